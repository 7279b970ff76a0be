"""Noise averaging: exact theory (χ mean, n_eff) and the chunked per-client simulator vs theory.

Statistical checks compare a mean over T trials with its expectation using a tolerance of
5 standard errors (SE from the exact per-trial SD): a two-sided false-failure rate of
5.7e-7 per check with fixed keys (the keys are fixed, so a pass is reproducible).
"""

from __future__ import annotations

import csv
import math

import jax
import mpmath
import numpy as np
import pytest
from scipy import stats

from ldpsim._src._checks import LdpsimError
from ldpsim.cli import main
from ldpsim._src.cli.cmd_noise import COLUMNS
from ldpsim._src.privacy.analysis import averaging as A
from ldpsim._src.privacy.noise.calibration import analytic_gaussian_sigma

Z = 5.0  # 5 standard errors: two-sided false-failure rate 5.7e-7 per check
ALPHA = 2 * stats.norm.sf(Z)   # the same two-sided false-failure rate, for the χ² windows


def _chi2_sd_window(trials: int) -> tuple[float, float]:
    """The two-sided window of s/τ for a sample SD s of ``trials`` normal values of SD τ:
    ``√(χ²_{T−1}(α/2)/(T−1)) < s/τ < √(χ²_{T−1}(1−α/2)/(T−1))``, false-failure rate α = ALPHA
    (5.7e-7). T = 64: [0.588, 1.469]."""
    k = trials - 1
    return (math.sqrt(stats.chi2.ppf(ALPHA / 2, k) / k),
            math.sqrt(stats.chi2.isf(ALPHA / 2, k) / k))


@pytest.mark.parametrize("d", [1, 2, 7, 100, 61_706, 10**7])
def test_chi_mean_factor_matches_mpmath(d):
    # Independent reference: 50-digit Gamma ratio (mpmath), and scipy's chi distribution.
    mpmath.mp.dps = 50
    ref = float(mpmath.sqrt(2) * mpmath.gamma(mpmath.mpf(d + 1) / 2) / mpmath.gamma(mpmath.mpf(d) / 2))
    assert A.chi_mean_factor(d) == pytest.approx(ref, rel=1e-13)
    assert A.chi_mean_factor(d) == pytest.approx(stats.chi(d).mean(), rel=1e-13)


def test_chi_mean_factor_expansion():
    d = 20_000
    assert A.chi_mean_factor(d) == pytest.approx(math.sqrt(d) * (1 - 1 / (4 * d)), rel=1e-8)


def test_effective_num_clients():
    assert A.effective_num_clients(np.ones(37)) == pytest.approx(37)
    assert A.effective_num_clients([3.0, 1.0]) == pytest.approx(16 / 10)
    with pytest.raises(LdpsimError):
        A.effective_num_clients([0.0, 0.0])


def test_theory_worked_example_mindspore_defaults():
    # noise study: eps=50, delta=0.01, sensitivity C: per-client noise norm ~30.9 C, and the
    # aggregate noise norm reaches C at n = sigma^2 d / C^2 ~ 958 clients (d = 61,684).
    sigma = analytic_gaussian_sigma(50.0, 0.01, 1.0)
    d = 61_684
    assert A.expected_noise_norm(sigma, d, 1) == pytest.approx(30.9, abs=0.05)
    assert sigma**2 * d == pytest.approx(958, abs=1)
    assert A.expected_snr_aligned(1.0, sigma, d, sigma**2 * d) == pytest.approx(1.0)


def _check_against_theory(rows, mechanism, clip):
    for r in rows:
        t = r["trials"]
        se = r["noise_norm_sd_theory"] / math.sqrt(t)
        assert abs(r["noise_norm_mean"] - r["noise_norm_theory"]) < Z * se, r
        # ‖z̄‖²/d averages d·T squared coordinates: relative SE of the std ≈ √((2+κ)/(4 d T)).
        kappa = 0.0 if mechanism == "gaussian" else 3.0 / r["n_eff"]
        rel = math.sqrt((2 + kappa) / (4 * r["dim"] * t))
        assert r["coord_std"] == pytest.approx(r["coord_std_theory"], rel=Z * rel)
        # The noise-norm SD over trials: the sample SD s of T values of ‖z̄‖ with SD τ has
        # (T − 1)s²/τ² ~ χ²_{T−1} for normal values; ‖z̄‖ is a norm of d ≥ 2,000 coordinates,
        # normal to O(1/d) (its excess kurtosis adds O(1/(dT)) to Var(s²/τ²) = 2/(T − 1)).
        lo, hi = _chi2_sd_window(t)
        assert lo < r["noise_norm_std"] / r["noise_norm_sd_theory"] < hi, r
        # Aligned cosine: per trial SD ≲ 1/√d around ρ/√(1+ρ²) (large d).
        assert abs(r["cosine"] - r["cosine_theory"]) < Z / math.sqrt(r["dim"] * t) + 1e-3, r
        # SNRs: snr = C/‖z̄‖ with relative SD ≈ SD(‖z̄‖)/E‖z̄‖.
        rel_norm = r["noise_norm_sd_theory"] / r["noise_norm_theory"] / math.sqrt(t)
        assert r["snr_aligned"] == pytest.approx(r["snr_aligned_theory"], rel=Z * rel_norm + 1e-3)


#: The studies of test_simulated_noise_matches_theory: 64 trials, so the χ² window of the
#: noise-norm SD is [0.59, 1.47] (16 trials: [0.26, 1.99]).
STUDY = dict(clients=[1, 30, 300], dim=2_000, noise_scale=0.5, clip=1.0, trials=64)
NOISE_ARGS = ["noise", "--dim", "3000", "--epsilon", "2", "--delta", "1e-5", "--clip", "1",
              "--clients", "1,100,1000", "--trials", "12", "--no-progress"]


@pytest.fixture(scope="module")
def xla_defaults_runs(tmp_path_factory):
    """The per-client studies (both mechanisms) and the ``ldpsim noise`` run, in ONE child
    process with XLA's default options, as users compile.  Their cost is executing ~10^8
    per-client draws, not compiling: 54 CPU-s for the two studies with the suite's options
    (which skip LLVM's optimisation), 15 with XLA's defaults, whose figures agree with the
    suite's to float rounding (tests/test_xla_defaults.py checks the options on rounds)."""
    import json

    from conftest import run_with_xla_defaults

    out = tmp_path_factory.mktemp("noise") / "noise.csv"
    stdout = run_with_xla_defaults(
        "import json, sys\nimport jax\n"
        "from ldpsim._src.privacy.analysis import averaging as A\n"
        "from ldpsim.cli import main\n"
        f"rc = main({[*NOISE_ARGS, '--out', str(out)]!r})\n"
        "rows = {m: A.noise_study(jax.random.key(11), mechanism=m, method='per-client', "
        f"**{STUDY!r}) for m in ('gaussian', 'laplace')}}\n"
        "print(json.dumps({'rc': rc, 'rows': rows}, default=float))\n")
    result = json.loads(stdout.strip().splitlines()[-1])
    return {"cli": (result["rc"], out), **result["rows"]}


@pytest.mark.parametrize("mechanism", ["gaussian", pytest.param("laplace", marks=pytest.mark.slow)])
@pytest.mark.parametrize("method", [pytest.param("per-client", marks=pytest.mark.slow), "aggregate"])
def test_simulated_noise_matches_theory(mechanism, method, request):
    if method == "per-client":   # execution-bound: drawn with XLA's defaults (fixture above)
        rows = request.getfixturevalue("xla_defaults_runs")[mechanism]
    else:
        rows = A.noise_study(jax.random.key(11), mechanism=mechanism, method=method, **STUDY)
    assert [r["method"] for r in rows] == [method] * 3
    assert [(r["clients"], r["dim"], r["trials"]) for r in rows] == [(n, 2_000, 64)
                                                                     for n in STUDY["clients"]]
    _check_against_theory(rows, mechanism, 1.0)


@pytest.mark.slow
def test_random_directions_do_not_gain_snr():
    # noise study: with independent directions ‖ū‖ ≈ C/√n, so the SNR is flat in n.
    rows = A.noise_study(jax.random.key(3), clients=[4, 400], dim=1_000, noise_scale=0.2, clip=1.0,
                         trials=8, method="per-client")
    for r in rows:
        # ‖ū_r‖/‖z̄‖ is a ratio of two norms of d-dim Gaussians (relative SD ~ 1/√d each).
        assert r["snr_random"] == pytest.approx(r["snr_random_theory"], rel=Z * math.sqrt(2 / (1_000 * 8)) + 0.02)
    assert rows[1]["snr_aligned"] / rows[0]["snr_aligned"] == pytest.approx(10.0, rel=0.05)


@pytest.mark.slow
def test_chunking_does_not_change_the_noise():
    # Keys are derived from client positions, so the chunk size only changes summation order.
    kw = dict(num_clients=50, dim=300, noise_scale=1.0, clip=1.0, method="per-client")
    a = A.simulate_average(jax.random.key(5), chunk_size=7, **kw)
    b = A.simulate_average(jax.random.key(5), chunk_size=64, **kw)
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5)
    c = A.simulate_average(jax.random.key(6), chunk_size=7, **kw)
    assert float(c.noise_norm) != float(a.noise_norm)


@pytest.mark.slow
def test_weighted_mean_uses_n_eff():
    n, d, t = 64, 4_000, 12
    w = np.linspace(1.0, 8.0, n)
    n_eff = A.effective_num_clients(w)
    assert n_eff < n
    rows = A.noise_study(jax.random.key(8), clients=[n], dim=d, noise_scale=1.0, clip=1.0, trials=t,
                         method="per-client", weights=lambda m: w)
    r = rows[0]
    assert r["n_eff"] == pytest.approx(n_eff)
    assert r["coord_std"] == pytest.approx(1 / math.sqrt(n_eff), rel=Z * math.sqrt(1 / (2 * d * t)))


def test_auto_method_and_errors():
    assert A.choose_method("auto", 10, 1000) == "per-client"
    assert A.choose_method("auto", 10**6, 61_706) == "aggregate"
    assert A.choose_method("auto", 10**6, 61_706, weighted=True, mechanism="laplace") == "per-client"
    with pytest.raises(LdpsimError, match="weights"):
        A.simulate_average(jax.random.key(0), num_clients=3, dim=4, noise_scale=1.0, clip=1.0, weights=[1.0, 2.0])
    with pytest.raises(LdpsimError, match="num_clients"):
        A.simulate_average(jax.random.key(0), num_clients=0, dim=4, noise_scale=1.0, clip=1.0)


def test_million_clients_per_client_draws_in_chunks():
    # n = 10^6 real per-client draws at small d: memory is O(chunk × d), never O(n × d).
    out = A.simulate_average(jax.random.key(1), num_clients=10**6, dim=8, noise_scale=1.0, clip=1.0,
                             method="per-client", chunk_size=65_536)
    # ‖z̄‖² ~ χ²_8/n: mean 8e-6; a 1e-8..1e-4 window has false-failure rate < 1e-7.
    assert 1e-8 < float(out.noise_sq) < 1e-4


@pytest.mark.slow
def test_cli_noise_csv_against_theory(xla_defaults_runs):
    rc, out = xla_defaults_runs["cli"]   # main(NOISE_ARGS) in the XLA-defaults child
    assert rc == 0
    with open(out, newline="") as f:
        reader = csv.DictReader(f)
        header = reader.fieldnames
        rows = [{k: (float(v) if k not in ("mechanism", "neighbours", "calibration", "method") else v)
                 for k, v in r.items()} for r in reader]
    assert tuple(header[: len(COLUMNS)]) == COLUMNS
    assert [int(r["clients"]) for r in rows] == [1, 100, 1000]
    sigma = analytic_gaussian_sigma(2.0, 1e-5, 2.0)  # replace-one: sensitivity 2C
    for r in rows:
        assert r["sigma"] == pytest.approx(sigma, rel=1e-12)
        assert r["sensitivity"] == 2.0
        assert r["noise_norm_theory"] == pytest.approx(A.chi_mean_factor(3000) * sigma / math.sqrt(r["clients"]))
        r["trials"], r["dim"], r["n_eff"] = int(r["trials"]), int(r["dim"]), r["n_eff"]
    _check_against_theory(rows, "gaussian", 1.0)


def test_cli_noise_rejects_infinite_epsilon(capsys):
    assert main(["noise", "--dim", "10", "--epsilon", "inf", "--no-progress"]) == 2
    assert "epsilon" in capsys.readouterr().err
