"""``ldpsim account shuffle``, ``account secagg`` and an ε of 0: output and one-line errors."""

from __future__ import annotations

import contextlib
import io
import json
import shlex
import traceback

import pytest

from ldpsim.cli import main

SHUF = "account shuffle --epsilon0 1 --clients 1000 --delta 1e-6"
SEC = "account secagg --sigma 1 --clip 1 --clients 100 --delta 1e-5"


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


def test_shuffle_prints_local_and_central_side_by_side():
    rc, out, err = _invoke("account shuffle --epsilon0 4 --clients 100000 --delta 1e-6")
    assert rc == 0, err
    lines = {line.split()[0] + " " + line.split()[1]: line for line in out.splitlines()}
    assert lines["local epsilon0"].split()[2] == "4"
    # The authors' README: between 0.16754 and 0.17279; closed form 0.5378040242374512.
    central = float(lines["central epsilon"].split()[2])
    assert 0.16754 <= central <= 0.17279
    assert float(lines["closed form"].split()[2]) == pytest.approx(0.537804, abs=1e-6)
    assert "replace one client" in out


def test_shuffle_json_and_closed_form_out_of_range():
    rc, out, err = _invoke("account shuffle --epsilon0 6 --clients 1000 --delta 1e-6 "
                           "--analysis stronger --json")
    assert rc == 0, err
    rec = json.loads(out)
    assert rec["kind"] == "shuffle" and rec["analysis"] == "stronger"
    assert rec["closed_form_epsilon"] is None and rec["epsilon"] <= 6
    rc, out, _ = _invoke("account shuffle --epsilon0 6 --clients 1000 --delta 1e-6 "
                         "--analysis stronger")
    assert "n/a" in out and "caveat" in out


def test_shuffle_rounds():
    rc, out, err = _invoke("account shuffle --epsilon0 1 --clients 2000 --delta 1e-6 "
                           "--rounds 16 --json")
    assert rc == 0, err
    rec = json.loads(out)
    from ldpsim._src.privacy.accountants.shuffling import shuffle_rounds_epsilon

    assert rec["epsilon"] == pytest.approx(shuffle_rounds_epsilon(1.0, 2000, 16, 1e-6))
    assert rec["epsilon_one_round"] < rec["epsilon"] < 16 * rec["epsilon_one_round"]
    assert rec["local_epsilon_rounds"] == 16.0
    rc, out, err = _invoke("account shuffle --epsilon0 1 --clients 2000 --delta 1e-6 "
                           "--rounds 16")
    assert rc == 0 and "16 rounds" in out and "central, 1 round" in out


def test_secagg_prints_local_and_central_side_by_side():
    rc, out, err = _invoke(SEC + " --json")
    assert rc == 0, err
    rec = json.loads(out)
    # sigma = 1 against 2C = 2: each report alone is the Gaussian of multiplier 1/2; the sum
    # of 100 has multiplier 5.
    assert rec["noise_multiplier"] == 5.0 and rec["survivors"] == 100
    assert rec["local_epsilon"] == pytest.approx(9.997, abs=1e-3)
    assert rec["epsilon"] == pytest.approx(0.7255, abs=1e-4)
    rc, out, err = _invoke(SEC + " --rounds 10 --dropout 0.1 --known-shares 1")
    assert rc == 0, err
    assert "local epsilon" in out and "central epsilon" in out and "survivors 90" in out


def test_secagg_target_epsilon():
    rc, out, err = _invoke("account secagg --target-epsilon 2 --clients 100 --delta 1e-5 "
                           "--rounds 100 --dropout 0.1 --method analytic --json")
    assert rc == 0, err
    rec = json.loads(out)
    assert rec["epsilon"] == pytest.approx(2.0, rel=1e-9) and rec["target_epsilon"] == 2.0
    assert rec["local_epsilon"] > rec["epsilon"]


@pytest.mark.parametrize("argv, words", [
    (SHUF.replace("--epsilon0 1", "--epsilon0 0"), ("epsilon0",)),
    (SHUF.replace("--epsilon0 1", "--epsilon0 nan"), ("epsilon0",)),
    (SHUF.replace("--epsilon0 1", "--epsilon0 1e9"), ("epsilon0",)),
    (SHUF.replace("--clients 1000", "--clients 0"), ("clients",)),
    (SHUF.replace("--clients 1000", "--clients 1.5"), ("--clients",)),
    (SHUF.replace("1e-6", "0"), ("delta",)),
    (SHUF.replace("1e-6", "1"), ("delta",)),
    (SHUF + " --analysis blanket", ("--analysis",)),
    (SHUF + " --rounds -2", ("rounds",)),
    ("account shuffle --clients 10 --delta 1e-6", ("--epsilon0",)),
    (SEC.replace("--sigma 1", "--sigma 0"), ("sigma",)),
    (SEC.replace("--sigma 1", "--sigma -inf"), ("sigma",)),
    (SEC.replace("--clip 1", "--clip 0"), ("clip",)),
    (SEC.replace("--clients 100", "--clients -3"), ("clients",)),
    (SEC.replace("1e-5", "2"), ("delta",)),
    (SEC + " --rounds -1", ("rounds",)),
    (SEC + " --dropout 1", ("dropout",)),
    (SEC + " --dropout nan", ("dropout",)),
    (SEC + " --survivors 101", ("survivors",)),
    (SEC + " --survivors 50 --dropout 0.1", ("not both",)),
    (SEC + " --known-shares 100", ("known_shares",)),
    (SEC + " --known-shares -1", ("known_shares",)),
    (SEC + " --neighbours swap", ("--neighbours",)),
    (SEC + " --target-epsilon 1", ("--target-epsilon",)),
    (SEC.replace("--sigma 1", "--target-epsilon 0"), ("epsilon",)),
    (SEC.replace("--sigma 1", "--target-epsilon 1") + " --survivors 50", ("--survivors",)),
])
def test_bad_input_is_one_line(argv, words):
    rc, out, err = _invoke(argv)
    where = f"ldpsim {argv}\nstdout: {out}\nstderr: {err}"
    assert "Traceback" not in out + err, where
    assert rc == 2, where
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "error" in lines[0], where
    for word in words:
        assert word in lines[0], where


def test_shuffle_closed_form_that_applies_to_no_epsilon0_says_so(capsys):
    from ldpsim.cli import main

    assert main(["account", "shuffle", "--epsilon0", "1", "--clients", "1", "--delta", "1e-6"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("closed form"))
    assert "applies to no epsilon0 at 1 reports" in line and "<= -" not in line


def test_laplace_with_analytic_composition_names_the_real_problem(capsys):
    from ldpsim.cli import main

    assert main(["account", "ldp", "--mechanism", "laplace", "--scale", "1", "--sensitivity", "2",
                 "--method", "analytic"]) == 2
    assert "method 'analytic' applies to the gaussian mechanism only" in capsys.readouterr().err


def test_account_ldp_calibration_without_an_epsilon_to_calibrate_is_refused(capsys):
    from ldpsim.cli import main

    assert main(["account", "ldp", "--sigma", "4", "--clip", "1", "--delta", "1e-5",
                 "--calibration", "classic"]) == 2
    assert "--calibration" in capsys.readouterr().err
    assert main(["account", "ldp", "--epsilon", "0.5", "--clip", "1", "--delta", "1e-5",
                 "--calibration", "classic", "--json"]) == 0


def test_account_ldp_reports_no_negative_delta_budget(capsys):
    """At a σ whose float32 tails alone exceed δ, ε is inf and the ideal event's δ budget is
    0, not negative."""
    import json

    from ldpsim.cli import main

    assert main(["account", "ldp", "--sigma", "0.001", "--clip", "1", "--delta", "1e-5",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["epsilon"] == float("inf") and out["ideal_delta_budget"] == 0.0


def test_an_epsilon_of_zero_is_explained_as_total_variation_within_delta():
    """z = 10⁴ at q = 0.01, one round: the outputs' total variation is q·(2Φ(1/(2z)) − 1)
    ≈ 4·10⁻⁷ < δ = 10⁻⁵, so (0, δ)-DP holds and the accountant prints 0, with the reason."""
    from scipy.stats import norm

    base = ("account dpfedavg --clients-per-round 100 --population 10000 --delta 1e-5 "
            "--rounds 1 --sampling poisson")
    assert 0.01 * (2 * norm.cdf(0.5e-4) - 1) < 1e-5
    rc, out, err = _invoke(base + " --noise-multiplier 10000")
    assert rc == 0, err
    assert out.splitlines()[0].split() == ["epsilon", "0"]
    assert "(0, delta)-DP" in out and "total variation" in out
    rc, out, err = _invoke(base + " --noise-multiplier 1")
    assert rc == 0, err
    assert float(out.splitlines()[0].split()[1]) > 0 and "total variation" not in out
