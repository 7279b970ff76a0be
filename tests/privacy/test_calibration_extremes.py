"""Calibration never states a guarantee stronger than the one delivered, at any ε and δ.

References are independent of ldpsim's δ(σ): ``scipy.stats.norm`` in float64,
``mpmath`` at adaptive precision (exact for the float inputs) and
``dp_accounting.get_epsilon_gaussian`` (exact for the Gaussian mechanism).
"""

import json
import math
import shutil
import subprocess
import sys
import warnings

import pytest
from dp_accounting import gaussian_mechanism
from scipy import stats

from ldpsim import LdpsimError
from ldpsim.cli import main
from ldpsim._src.privacy.noise import calibration as cal

import mpmath as mp  # noqa: E402 (a dependency of dp-accounting)

REVIEW = dict(epsilon=0.01, delta=1e-12)  # the privacy review's example, sensitivity 1


def mp_delta(sigma, epsilon, sens=1.0):
    """δ(σ) = Φ(a − b) − e^ε Φ(−a − b), a = Δ/(2σ), b = εσ/Δ, in enough digits to be exact."""
    with mp.workdps(30):
        mag = max(abs(mp.mpf(sens) / (2 * mp.mpf(sigma))), abs(mp.mpf(epsilon) * sigma / sens), 1)
        digits = 60 + int(mp.log10(mag)) + (int(-math.log10(epsilon)) if epsilon < 1 else 0)
    with mp.workdps(digits):
        s, d, e = mp.mpf(sigma), mp.mpf(sens), mp.mpf(epsilon)
        a, b = d / (2 * s), e * s / d
        return float((mp.ncdf(a - b) - mp.ncdf(-a - b)) - mp.expm1(e) * mp.ncdf(-a - b))


def scipy_delta(sigma, epsilon, sens=1.0):
    a, b = sens / (2 * sigma), epsilon * sigma / sens
    return stats.norm.cdf(a - b) - math.exp(epsilon) * stats.norm.cdf(-a - b)


def no_warnings(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return fn(*args, **kwargs)


def quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cal.CalibrationShortfallWarning)
        warnings.simplefilter("ignore", cal.ClassicGaussianRangeWarning)
        return fn(*args, **kwargs)


# --------------------------------------------------------------------------- the review's case


def test_mindspore_review_case_reports_what_it_delivers():
    with pytest.warns(cal.CalibrationShortfallWarning, match="mindspore") as rec:
        sigma = cal.mindspore_gaussian_sigma(**REVIEW)
    assert sigma == pytest.approx(445.533, rel=1e-5)  # MindSpore's formula is kept
    assert "\n" not in str(rec[0].message)
    exact = no_warnings(cal.analytic_gaussian_sigma, **REVIEW)
    assert exact == pytest.approx(578.998, rel=1e-5)

    with pytest.warns(cal.CalibrationShortfallWarning):
        c = cal.calibrate(clip=1, method="mindspore", neighbours="add-remove", **REVIEW)
    assert c.sigma == sigma and c.sensitivity == 1.0 and c.shortfall
    assert c.achieved_delta == pytest.approx(1.95e-9, rel=0.01)
    assert c.achieved_delta == pytest.approx(scipy_delta(sigma, 0.01), rel=1e-9)
    assert c.achieved_delta == pytest.approx(mp_delta(sigma, 0.01), rel=1e-12)
    ref_eps = gaussian_mechanism.get_epsilon_gaussian(sigma, 1e-12)
    assert c.achieved_epsilon == pytest.approx(ref_eps, rel=1e-9)
    assert c.achieved_epsilon == pytest.approx(0.0130921, rel=1e-5)
    # the achieved ε is tight: δ(σ) at it is the requested δ
    assert mp_delta(sigma, c.achieved_epsilon) == pytest.approx(1e-12, rel=1e-9)
    assert mp_delta(sigma, c.achieved_epsilon) <= 1e-12 * (1 + 1e-12)

    a = no_warnings(cal.calibrate, clip=1, neighbours="add-remove", **REVIEW)
    assert not a.shortfall and a.achieved_epsilon == pytest.approx(0.01, rel=1e-12)
    assert a.achieved_delta <= 1e-12 and a.achieved_delta == pytest.approx(1e-12, rel=1e-12)


def test_mindspore_also_misses_at_epsilon_10_delta_001():
    # the MindSpore calibration reference table (exact σ, Balle & Wang 2018) table: MindSpore's σ 0.349953 < exact 0.350097
    with pytest.warns(cal.CalibrationShortfallWarning):
        c = cal.calibrate(epsilon=10, delta=0.01, clip=1, method="mindspore", neighbours="add-remove")
    assert c.achieved_delta == pytest.approx(mp_delta(c.sigma, 10.0), rel=1e-12)
    assert c.achieved_delta > 0.01 * (1 + cal.SHORTFALL_RTOL)


# --------------------------------------------------------------------------- exactness


ANALYTIC_GRID = [(e, d) for e in (1e-3, 0.01, 0.1, 1, 10, 100, 1e3, 1e4) for d in (1e-12, 1e-5, 0.1)]


@pytest.mark.parametrize("eps,delta", ANALYTIC_GRID)
def test_analytic_never_warns_and_meets_the_request(eps, delta):
    c = no_warnings(cal.calibrate, epsilon=eps, delta=delta, clip=1.0)
    assert not c.shortfall
    # what runs (the float32 sampler, bounded tails) meets the request
    assert c.achieved_delta <= delta and c.achieved_epsilon <= eps
    # the ideal law's numbers, exact for the returned σ
    ideal = mp_delta(c.sigma, eps, c.sensitivity)
    assert c.ideal_delta == pytest.approx(ideal, rel=1e-10) and ideal <= delta * (1 + 1e-10)
    ref = gaussian_mechanism.get_epsilon_gaussian(c.sigma / c.sensitivity, delta)
    assert c.ideal_epsilon == pytest.approx(ref, rel=1e-9, abs=1e-11)
    if c.sigma == cal.analytic_gaussian_sigma(eps, delta, c.sensitivity):
        # the sampler's tails add nothing measurable here: Balle & Wang's exact σ, exactly
        assert ideal == pytest.approx(delta, rel=1e-10)
        assert c.achieved_delta == pytest.approx(delta, rel=1e-10)
        assert c.achieved_epsilon == pytest.approx(eps, rel=1e-10)
    else:   # they do (ε ≳ 40 at δ = 1e-5): a larger σ, whose realised δ is the request
        assert c.sigma > cal.analytic_gaussian_sigma(eps, delta, c.sensitivity)
        assert c.achieved_delta == pytest.approx(delta, rel=1e-6)
    json.dumps(c.as_dict(), allow_nan=False)


@pytest.mark.parametrize("method", ["classic", "mindspore"])
@pytest.mark.parametrize("eps", [0.01, 0.5, 1.0, 8.0, 10.0, 50.0])
@pytest.mark.parametrize("delta", [1e-12, 1e-5, 0.01])
def test_achieved_is_exact_and_warning_iff_shortfall(method, eps, delta):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c = cal.calibrate(epsilon=eps, delta=delta, clip=0.5, method=method)
    warned = any(issubclass(w.category, cal.CalibrationShortfallWarning) for w in caught)
    ref_delta = mp_delta(c.sigma, eps, c.sensitivity)
    assert c.ideal_delta == pytest.approx(ref_delta, rel=1e-10, abs=1e-300)
    # the realised δ (what runs) is never below the ideal one; warned iff it misses
    assert c.achieved_delta >= c.ideal_delta * (1 - 1e-12)
    assert warned == c.shortfall == (c.achieved_delta > delta * (1 + cal.SHORTFALL_RTOL))
    ref_eps = gaussian_mechanism.get_epsilon_gaussian(c.sigma / c.sensitivity, delta)
    assert c.ideal_epsilon == pytest.approx(ref_eps, rel=1e-9, abs=1e-11)
    assert c.achieved_epsilon >= c.ideal_epsilon * (1 - 1e-12)
    assert (c.achieved_epsilon > eps * (1 + 1e-9)) <= c.shortfall  # a missed ε shows as a shortfall
    json.dumps(c.as_dict(), allow_nan=False)


@pytest.mark.filterwarnings("ignore::ldpsim._src.privacy.noise.calibration.ClassicGaussianRangeWarning")
def test_classic_misses_for_large_epsilon():
    with pytest.warns(cal.CalibrationShortfallWarning, match="classic"):
        sigma = cal.classic_gaussian_sigma(10.0, 0.01)
    assert cal.analytic_gaussian_delta(sigma, 10.0) == pytest.approx(mp_delta(sigma, 10.0), rel=1e-12)


@pytest.mark.parametrize("eps", [1e-300, 1e-20, 1e-8, 1e-3, 0.1, 1.0, 3.9, 4.1, 10.0, 100.0, 1e3, 1e4, 1e6])
@pytest.mark.parametrize("delta", [1e-300, 1e-100, 1e-12, 1e-5, 0.1, 0.5, 1 - 1e-12])
def test_delta_of_sigma_matches_mpmath(eps, delta):
    sigma = no_warnings(cal.analytic_gaussian_sigma, eps, delta)
    assert 0 < sigma < math.inf
    assert cal.analytic_gaussian_delta(sigma, eps) <= delta
    for factor in (1.0, 0.999, 1.5, 0.5):
        ours = cal.analytic_gaussian_delta(sigma * factor, eps)
        ref = mp_delta(sigma * factor, eps)
        if ref < 1e-305:  # below float64's normal range
            assert ours < 1e-300
        else:
            assert ours == pytest.approx(ref, rel=1e-10)


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")  # inside dp_accounting at σ = 2e4
def test_epsilon_inverse_of_delta_and_zero_case():
    for sigma in (0.05, 0.3, 1.0, 3.7, 40.0, 2e4):
        for delta in (1e-12, 1e-5, 0.2):
            eps = cal.analytic_gaussian_epsilon(sigma, delta)
            ref = gaussian_mechanism.get_epsilon_gaussian(sigma, delta)
            assert eps == pytest.approx(ref, rel=1e-9, abs=1e-11)
            if eps > 0:
                assert cal.analytic_gaussian_delta(sigma, eps) <= delta
                assert mp_delta(sigma, eps) == pytest.approx(delta, rel=1e-9)
    # σ so large that the mechanism is (0, δ)-DP: 2Φ(1/(2σ)) − 1 ≤ δ
    assert cal.analytic_gaussian_epsilon(1e7, 1e-5) == 0.0
    assert cal.gaussian_achieved(4.0, 1.0, 1e-5, 1.0) == (
        cal.analytic_gaussian_epsilon(4.0, 1e-5), cal.analytic_gaussian_delta(4.0, 1.0))


# --------------------------------------------------------------------------- extremes

LARGE = [1e3, 1e4, 1e6, 1e15, 1e30, 1e300]


def test_large_epsilon_analytic_finite_and_monotone():
    for delta in (1e-12, 1e-5, 0.1):
        sig = [no_warnings(cal.analytic_gaussian_sigma, e, delta) for e in LARGE]
        assert all(0 < s < math.inf for s in sig)
        assert all(x > y for x, y in zip(sig, sig[1:]))
        # huge ε: σ → Δ/√(2ε) (t = Δ/(2σ) − εσ/Δ stays O(1) while both terms grow)
        assert sig[-1] * math.sqrt(2e300) == pytest.approx(1.0, rel=1e-12)
        for e, s in zip(LARGE, sig):
            d = cal.analytic_gaussian_delta(s, e)
            assert 0.0 <= d <= delta  # over-delivers at most (float spacing of σ at ε ≳ 1e15)
            if e <= 1e6:
                assert d == pytest.approx(delta, rel=1e-9)
            ach = cal.analytic_gaussian_epsilon(s, delta)
            assert ach <= e and ach == pytest.approx(e, rel=1e-9)
    assert no_warnings(cal.analytic_gaussian_sigma, 1.7e308, 1e-5) > 0


def test_large_epsilon_other_entry_points():
    lap = [cal.laplace_scale(e) for e in LARGE]
    assert all(0 < b < math.inf for b in lap) and all(x > y for x, y in zip(lap, lap[1:]))
    cla = [quiet(cal.classic_gaussian_sigma, e, 1e-5) for e in LARGE]
    assert all(0 < s < math.inf for s in cla) and all(x > y for x, y in zip(cla, cla[1:]))
    for e in LARGE + [1.7e308]:
        for sigma in (1e-200, 1e-3, 1.0, 1e200):
            d = cal.analytic_gaussian_delta(sigma, e)
            assert 0.0 <= d <= 1.0
        c = quiet(cal.calibrate, epsilon=e, delta=1e-5, clip=1.0, method="classic")
        assert c.shortfall and c.achieved_delta == pytest.approx(1.0) and c.achieved_epsilon > e
        for method in (None, "analytic"):
            c = no_warnings(cal.calibrate, epsilon=e, delta=1e-5, clip=1.0, method=method)
            assert 0 < c.sigma < math.inf and not c.shortfall
            json.dumps(c.as_dict(), allow_nan=False)
        c = cal.calibrate("laplace", epsilon=e, clip=1.0)
        assert c.achieved_epsilon == pytest.approx(e, rel=1e-15)


@pytest.mark.parametrize("eps", [709.79, 710.0, 1e3, 1e4, 1e6, 1e300])
def test_mindspore_large_epsilon_is_a_clear_error(eps):
    with pytest.raises(LdpsimError, match=r"epsilon <= 709\.78.*got epsilon=.*analytic"):
        cal.mindspore_gaussian_sigma(eps, 1e-5)
    with pytest.raises(LdpsimError, match="709.78"):
        cal.calibrate(epsilon=eps, delta=1e-5, clip=1.0, method="mindspore")


def test_mindspore_just_below_the_limit():
    s = quiet(cal.mindspore_gaussian_sigma, 709.7, 1e-5)
    assert 0 < s < math.inf
    assert cal.analytic_gaussian_delta(s, 709.7) == pytest.approx(mp_delta(s, 709.7), rel=1e-10)


@pytest.mark.parametrize("method", ["analytic", "classic", "mindspore"])
@pytest.mark.parametrize("eps,delta", [(1e-8, 1e-5), (1e-8, 1e-300), (1e-8, 1 - 1e-12),
                                       (1.0, 1e-300), (1.0, 1 - 1e-12), (1e4, 1e-300), (1e4, 1 - 1e-12)])
def test_small_epsilon_and_extreme_delta(method, eps, delta):
    if method == "mindspore" and eps > cal.MINDSPORE_MAX_EPSILON:
        with pytest.raises(LdpsimError, match="709.78"):   # its own numerics stop there
            quiet(cal.calibrate, epsilon=eps, delta=delta, clip=1.0, method=method)
        return
    c = quiet(cal.calibrate, epsilon=eps, delta=delta, clip=1.0, method=method)
    assert 0 < c.sigma < math.inf
    assert 0.0 <= c.achieved_delta <= 1.0 and 0.0 <= c.ideal_epsilon < math.inf
    assert c.achieved_epsilon >= c.ideal_epsilon * (1 - 1e-12)   # may be inf: see below
    ref = mp_delta(c.sigma, eps, c.sensitivity)
    if ref > 1e-305:
        assert c.ideal_delta == pytest.approx(ref, rel=1e-10)
    assert c.achieved_delta >= c.ideal_delta * (1 - 1e-12)
    assert c.shortfall == (c.achieved_delta > delta * (1 + cal.SHORTFALL_RTOL))
    if method == "analytic":   # calibrated for what runs: always delivered, never inf
        assert not c.shortfall and c.achieved_delta <= delta and c.achieved_epsilon < math.inf
        assert c.achieved_delta == pytest.approx(delta, rel=1e-6)
    elif delta == 1e-300:
        # δ = 1e-300 is below the reach of the float32 sampler at the σ of these formulas
        # (no ε delivers it): honest infinity, not a finite ε the noise does not deliver
        assert c.shortfall and c.achieved_epsilon == math.inf


def test_mindspore_tiny_delta_shortfall():
    # MindSpore's float32 Φ cannot resolve δ = 1e-300: it stops at σ ≈ 5 (exact σ ≈ 36.9)
    with pytest.warns(cal.CalibrationShortfallWarning):
        c = cal.calibrate(epsilon=1.0, delta=1e-300, clip=1.0, method="mindspore", neighbours="add-remove")
    assert c.sigma < no_warnings(cal.analytic_gaussian_sigma, 1.0, 1e-300)
    assert c.ideal_delta == pytest.approx(mp_delta(c.sigma, 1.0), rel=1e-10)


def test_out_of_float_range_is_a_clear_error():
    with pytest.raises(LdpsimError, match="epsilon"):
        cal.calibrate(epsilon=1e-320, delta=1e-5, clip=1.0, method="classic")
    with pytest.raises(LdpsimError, match="float64"):
        cal.laplace_scale(1e-320, 1e10)
    with pytest.raises(LdpsimError, match="clip"):
        cal.sensitivity(1e308)
    with pytest.raises(LdpsimError, match="MindSpore"):
        cal.mindspore_gaussian_sigma(1e-300, 0.1)
    with pytest.raises(LdpsimError, match="float64 range"):
        cal.analytic_gaussian_sigma(5e-324, 5e-324)  # σ ≈ 0.4/δ: beyond float64
    with pytest.raises(LdpsimError, match="float64 range"):
        cal.analytic_gaussian_sigma(1e-8, 1e-5, sensitivity=1e305)
    # the analytic σ exists as long as it fits a float
    s = no_warnings(cal.analytic_gaussian_sigma, 1e-300, 1e-300)
    assert 0 < s < math.inf and cal.analytic_gaussian_delta(s, 1e-300) <= 1e-300


def test_no_overflow_error_anywhere():
    """Every entry point on a grid of extremes: a value or an LdpsimError, never anything else."""
    fns = [
        lambda e, d: cal.analytic_gaussian_sigma(e, d),
        lambda e, d: cal.classic_gaussian_sigma(e, d),
        lambda e, d: cal.mindspore_gaussian_sigma(e, d),
        lambda e, d: cal.analytic_gaussian_delta(1.0, e),
        lambda e, d: cal.analytic_gaussian_epsilon(1.0 / max(e, 1e-300), d),
        lambda e, d: cal.laplace_scale(e),
        lambda e, d: cal.calibrate(epsilon=e, delta=d, clip=1.0).as_dict(),
        lambda e, d: cal.calibrate(epsilon=e, delta=d, clip=1.0, method="classic").as_dict(),
        lambda e, d: cal.calibrate("laplace", epsilon=e, clip=1.0).as_dict(),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for e in (1e-320, 1e-300, 1e-8, 1.0, 709.0, 710.0, 1e3, 1e4, 1e6, 1e300, 1.7e308):
            for d in (5e-324, 1e-300, 1e-5, 1 - 1e-12):
                for fn in fns:
                    try:
                        out = fn(e, d)
                    except LdpsimError as err:
                        assert str(err) and "\n" not in str(err)
                        continue
                    values = out.values() if isinstance(out, dict) else [out]
                    assert not any(isinstance(v, float) and math.isnan(v) for v in values)


# --------------------------------------------------------------------------- CLI


def _run(argv, capsys):
    try:
        code = main(["calibrate", *argv])
    except SystemExit as exc:  # argparse errors exit directly
        code = exc.code
    out = capsys.readouterr()
    assert "Traceback" not in out.err and "Traceback" not in out.out
    return code, out.out, out.err


def test_cli_review_case_prints_achieved_and_one_warning(capsys):
    code, out, err = _run(["--epsilon", "0.01", "--delta", "1e-12", "--clip", "1", "--method", "mindspore",
                           "--neighbours", "add-remove"], capsys)
    assert code == 0
    assert "sigma        445.533" in out
    assert "requested    epsilon 0.01, delta 1e-12" in out
    assert "achieved     epsilon 0.0130921, delta 1.9468e-09" in out
    assert "MISSES" in out
    lines = [ln for ln in err.splitlines() if "misses the requested" in ln]
    assert len(lines) == 1 and lines[0].startswith("ldpsim calibrate: warning: method 'mindspore'")
    assert "delta=1.9468e-09" in lines[0]


def test_cli_analytic_prints_achieved_equal_to_request(capsys):
    code, out, err = _run(["--epsilon", "0.01", "--delta", "1e-12", "--clip", "1", "--neighbours", "add-remove"],
                          capsys)
    assert code == 0 and "misses the requested" not in err
    assert "sigma        578.99786" in out
    assert "achieved     epsilon 0.01, delta 1e-12" in out and "shortfall" not in out
    # the default sampler reaches 11.6 sigma: its tails add ~1e-28 per release, far below
    # delta (the old Box-Muller's 6.76 sigma could not deliver 1e-12: --sampler fast)
    assert "sampler      tail" in out and err == ""
    code, out, err = _run(["--epsilon", "0.01", "--delta", "1e-12", "--clip", "1", "--neighbours",
                           "add-remove", "--sampler", "fast", "--dim", "1"], capsys)
    assert code == 0 and "achieved     epsilon 0.01, delta 1e-12" in out
    assert "sigma        578.99786" not in out   # a larger sigma: the fast sampler's tails bind


def test_cli_json_has_achieved_fields(capsys):
    code, out, err = _run(["--epsilon", "0.01", "--delta", "1e-12", "--clip", "1", "--method", "mindspore",
                           "--neighbours", "add-remove", "--json"], capsys)
    assert code == 0 and "misses the requested" in err
    d = json.loads(out)
    assert d["achieved_delta"] == pytest.approx(1.9468e-9, rel=1e-4)
    assert d["achieved_epsilon"] == pytest.approx(0.0130921, rel=1e-5)
    code, out, _ = _run(["--mechanism", "laplace", "--epsilon", "2", "--clip", "0.5", "--json"], capsys)
    d = json.loads(out)
    assert code == 0 and d["achieved_epsilon"] == 2.0 and d["ideal_delta"] == 0.0
    assert 0 < d["achieved_delta"] < 1e-18   # 64-bit Laplace sampler: (e^2 - 1)·2^-65-ish


@pytest.mark.parametrize("eps", ["1e3", "1e4", "1e6", "1e300"])
def test_cli_large_epsilon(eps, capsys):
    code, out, err = _run(["--epsilon", eps, "--delta", "1e-5", "--clip", "1"], capsys)
    # analytic calibrates for what runs: at such epsilon the float32 sampler's reach binds,
    # so sigma is set by delta (its tails), and the noise over-delivers epsilon; no warning
    assert code == 0 and err == ""
    sigma = float(out.split()[1])
    assert 0 < sigma < math.inf
    code, out, err = _run(["--epsilon", eps, "--delta", "1e-5", "--clip", "1", "--json"], capsys)
    d = json.loads(out)
    assert code == 0 and d["achieved_delta"] <= 1e-5 and d["achieved_epsilon"] < 200
    code, out, err = _run(["--epsilon", eps, "--delta", "1e-5", "--clip", "1", "--method", "mindspore"], capsys)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "709.78" in err and "epsilon" in err
    code, out, err = _run(["--epsilon", eps, "--delta", "1e-5", "--clip", "1", "--method", "classic"], capsys)
    assert code == 0 and "MISSES" in out and "misses the requested" in err
    code, out, err = _run(["--mechanism", "laplace", "--epsilon", eps, "--clip", "1"], capsys)
    assert code == 0 and err.count("\n") == 1 and "bounded tails" in err and "not pure" in err


@pytest.mark.parametrize("argv", [["--epsilon", "1e-8", "--delta", "1e-300"],
                                  ["--epsilon", "1e-8", "--delta", "0.999999999999"],
                                  ["--epsilon", "1e-8", "--delta", "1e-5", "--method", "mindspore"],
                                  ["--epsilon", "1e-320", "--delta", "1e-5", "--method", "classic"],
                                  ["--epsilon", "1e400", "--delta", "1e-5"]])
def test_cli_other_extremes(argv, capsys):
    code, out, err = _run([*argv, "--clip", "1"], capsys)
    assert code in (0, 2)
    if code == 2:
        assert len(err.strip().splitlines()) == 1 and "error" in err and "epsilon" in err
    else:
        assert "achieved" in out


def test_cli_console_script_large_epsilon_no_traceback():
    exe = shutil.which("ldpsim")
    cmd = [exe] if exe else [sys.executable, "-m", "ldpsim"]
    res = subprocess.run([*cmd, "calibrate", "--epsilon", "1e4", "--delta", "1e-5", "--clip", "1",
                          "--method", "mindspore"], capture_output=True, text=True)
    assert res.returncode == 2 and "Traceback" not in res.stderr and "709.78" in res.stderr
    res = subprocess.run([*cmd, "calibrate", "--epsilon", "1e300", "--delta", "1e-5", "--clip", "1"],
                         capture_output=True, text=True)
    assert res.returncode == 0 and "Traceback" not in res.stderr and "achieved" in res.stdout
