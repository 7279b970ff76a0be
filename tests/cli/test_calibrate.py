"""`ldpsim calibrate` end to end (in-process and through the console script)."""

import json
import shutil
import subprocess
import sys

import pytest

from ldpsim.cli import main


def test_json_gaussian(capsys):
    assert main(["calibrate", "--epsilon", "1", "--delta", "1e-5", "--clip", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"mechanism", "epsilon", "delta", "clip", "neighbours", "sensitivity", "method", "sigma",
                        "achieved_epsilon", "achieved_delta", "ideal_epsilon", "ideal_delta",
                        "sampler", "dim", "tail_mass", "sampler_delta_floor", "method_sigma"}
    assert out["neighbours"] == "replace" and out["sensitivity"] == 2.0 and out["method"] == "analytic"
    assert out["sigma"] == pytest.approx(2 * 3.730632, rel=1e-6) == out["method_sigma"]


def test_json_laplace_and_mindspore(capsys):
    assert main(["calibrate", "--mechanism", "laplace", "--epsilon", "2", "--clip", "0.5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["scale"] == 0.5 and "sigma" not in out and out["delta"] is None
    assert main(["calibrate", "--epsilon", "50", "--delta", "0.01", "--clip", "1", "--method", "mindspore",
                 "--neighbours", "add-remove", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["sigma"] == pytest.approx(0.125934, rel=1e-3) and out["sensitivity"] == 1.0


def test_text_output_names_sensitivity(capsys):
    assert main(["calibrate", "--epsilon", "1", "--delta", "1e-5", "--clip", "1"]) == 0
    text = capsys.readouterr().out
    assert "sigma" in text and "sensitivity  2" in text and "replace" in text


def test_classic_warning_on_stderr(capsys):
    assert main(["calibrate", "--epsilon", "2", "--delta", "1e-5", "--clip", "1", "--method", "classic"]) == 0
    assert "only proven for epsilon < 1" in capsys.readouterr().err


def _exit_code(argv):
    try:
        return main(argv)
    except SystemExit as exc:  # argparse errors exit directly
        return exc.code


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--epsilon", "0", "--delta", "1e-5", "--clip", "1"], "epsilon"),
        (["--epsilon", "nan", "--delta", "1e-5", "--clip", "1"], "epsilon"),
        (["--epsilon", "inf", "--delta", "1e-5", "--clip", "1"], "epsilon"),
        (["--epsilon", "1", "--delta", "1.5", "--clip", "1"], "delta"),
        (["--epsilon", "1", "--delta", "1e-5", "--clip", "-2"], "clip"),
        (["--epsilon", "1", "--delta", "1e-5", "--clip", "1", "--method", "foo"], "method"),
        (["--epsilon", "1", "--clip", "1"], "delta"),
    ],
)
def test_bad_input_exit_2_one_line(argv, needle, capsys):
    assert _exit_code(["calibrate", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err and "Traceback" not in err


def test_console_script_no_traceback():
    exe = shutil.which("ldpsim")
    cmd = [exe] if exe else [sys.executable, "-m", "ldpsim"]
    res = subprocess.run([*cmd, "calibrate", "--epsilon", "-1", "--delta", "0.1", "--clip", "1"],
                         capture_output=True, text=True)
    assert res.returncode == 2
    assert "Traceback" not in res.stderr and "epsilon" in res.stderr
    res = subprocess.run([*cmd, "calibrate", "--help"], capture_output=True, text=True)
    assert res.returncode == 0 and "--neighbours" in res.stdout


def test_a_sigma_raised_for_the_samplers_tails_says_so(capsys):
    """With JAX's own sampler (bounded float32 tails) the analytic sigma is raised far above
    the real-valued one; the output names the raise and the default sampler's sigma. The
    default sampler needs no raise here, and then no such line is printed."""
    from ldpsim.cli import main

    assert main(["calibrate", "--epsilon", "1", "--delta", "1e-5", "--clip", "1",
                 "--sampler", "jax"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("raised"))
    assert "x the analytic sigma of real-valued noise (7.46126)" in line
    assert "the default sampler (tail) needs sigma 7.46126" in line
    assert main(["calibrate", "--epsilon", "1", "--delta", "1e-5", "--clip", "1"]) == 0
    assert "raised" not in capsys.readouterr().out
