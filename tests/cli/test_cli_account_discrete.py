"""``ldpsim account ddg`` and ``ldpsim account skellam``: the printed parameters agree with the
library's accounting (recomputed here), and bad input gets a one-line error."""

from __future__ import annotations

import contextlib
import io
import json
import shlex
import traceback

import pytest

from ldpsim._src.privacy.discrete import accounting as A
from ldpsim.cli import main

BASE = "--epsilon 4 --delta 1e-5 --clients 100 --dim 1000 --clip 1"


def _invoke(argv: str) -> tuple[object, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(shlex.split(argv))
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 1
        except BaseException:  # noqa: BLE001 - any escape is a failure
            err.write(traceback.format_exc())
            rc = "raised"
    return rc, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("mech", ["ddg", "skellam"])
def test_json_agrees_with_the_library(mech):
    rc, out, err = _invoke(f"account {mech} {BASE} --rounds 20 --population 2000 --bits 16 "
                           "--json")
    assert rc == 0, err
    o = json.loads(out)
    assert o["bits"] == 16 and o["sampling_rate"] == pytest.approx(0.05)
    m = A.DiscreteMechanism(mech, 1.0, o["granularity"], o["noise"], 100, 1000, 16)
    # the noise is counted from the cohort floor, at delta less the cohort-tail charge
    floor, tail = A.cohort_floor(2000, 100, 20, 4.0, 1e-5)
    assert o["noise_survivors"] == floor < 100 and o["delta_solved"] == pytest.approx(1e-5 - tail)
    eps = A.discrete_epsilon(m, 1e-5 - tail, 20, floor, sampling_rate=0.05)
    assert o["epsilon"] == pytest.approx(eps, rel=1e-12) and eps <= 4.0
    assert A.discrete_epsilon(m, 1e-5 - tail, 20, 100, sampling_rate=0.05) < eps
    # the wrap bound counts the Poisson cohort's size up to n_high, plus P[cohort > n_high]
    n_high, wrap_tail = A.cohort_ceiling(2000, 100, 1e-6 / 2)
    assert o["wrap_clients"] == n_high > 100
    assert o["wrap_probability"] == pytest.approx(wrap_tail + A.wrap_probability(m, n_high),
                                                  rel=1e-9)
    assert A.wrap_probability(m) < o["wrap_probability"] <= 1e-6
    assert o["padded_dim"] == 1024
    assert o["epsilon_unamplified"] > eps


def test_text_output_names_bits_wrap_and_whole_run_epsilon():
    rc, out, err = _invoke(f"account ddg {BASE} --bits 18")
    assert rc == 0, err
    for key in ("bits", "granularity", "noise", "wrap probability", "epsilon", "neighbouring"):
        assert any(line.startswith(key) for line in out.splitlines()), key


@pytest.mark.parametrize("extra,msg", [
    ("--bits 6", "too small"),
    ("--bits 12 --granularity 1e-7", "cannot fit"),
    ("--granularity 0.01", "needs --bits"),
    ("--bits 40", "[2, 32]"),
    ("--population 10", "smaller than --clients"),
    ("--bits 16 --granularity -1", "--granularity must be > 0"),
    ("--mse-tolerance -1", "--mse-tolerance must be >= 0"),
    ("--mse-tolerance nan", "--mse-tolerance must be >= 0"),
])
def test_bad_input_is_one_clear_error(extra, msg):
    rc, out, err = _invoke(f"account ddg {BASE} {extra}")
    assert rc not in (0, "raised"), err
    assert msg in err and "Traceback" not in err


def test_help_lists_the_options():
    rc, out, _ = _invoke("account skellam --help")
    assert rc == 0
    for opt in ("--population", "--sampling-rate", "--bits", "--granularity", "--wrap-target"):
        assert opt in out


def test_a_discrete_run_prints_the_planned_wrap_bound(tmp_path):
    """`ldpsim run --privacy-mode discrete` names the bit-width and the plan's wrap bound (a
    Poisson cohort: the sizes it reaches counted) beside the wrap measured in the last round;
    other modes print no such line."""
    import csv

    out = tmp_path / "r.csv"
    rc, text, err = _invoke(f"run --privacy-mode discrete --secagg-mechanism ddg --bits 16 "
                            f"--rounds 1 --clients-per-round 40 --population 400 --epsilon 4 "
                            f"--sampling poisson --no-progress --out {out}")
    assert rc == 0, err
    line = next(x for x in text.splitlines() if x.startswith("secure aggregation:"))
    row = list(csv.DictReader(open(out)))[-1]
    assert line.startswith("secure aggregation: 16-bit sum, wrap probability <= ")
    assert f"{float(row['wrap_bound']):.3g}" in line and 0 < float(row["wrap_bound"]) <= 1e-6
    rc, text, err = _invoke("run --rounds 1 --clients-per-round 20 --population 400 "
                            "--epsilon 4 --no-progress")
    assert rc == 0, err
    assert "secure aggregation" not in text


def test_an_unreachable_mse_tolerance_names_the_least_ratio_reached():
    """The decoded sum's error variance never falls to the continuous Gaussian's (the rounding
    adds γ²/4 per coordinate and the discrete accounting is not tighter): a tolerance of 0 is
    unreachable, and the error says what is reachable (the least ratio over the bit-widths
    searched, recomputed here)."""
    rc, out, err = _invoke(f"account ddg {BASE} --mse-tolerance 0")
    assert rc not in (0, "raised") and "Traceback" not in err, err
    report = A.bits_needed("ddg", epsilon=4, delta=1e-5, clients=100, dim=1000, clip=1.0,
                           mse_tolerance=0.0)
    assert report.bits is None
    best = min(report.rows, key=lambda r: r.mse_ratio)
    assert best.mse_ratio > 1
    assert f"{best.mse_ratio:.4f} x the continuous Gaussian's, at {best.bits} bits" in err
    assert "relax --mse-tolerance" in err
