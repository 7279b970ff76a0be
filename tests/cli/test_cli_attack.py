"""``ldpsim attack``: bad input is one line and exit status 2 before any work; a tiny real
run writes the tidy CSV and the figure."""

from __future__ import annotations

import contextlib
import csv
import io
import math
import time
import traceback

import pytest

from ldpsim.cli import main

#: A bad case must fail in its checks, before data loading and compilation.
CASE_LIMIT_S = 20

BASE = "attack --no-progress --out {tmp}/a.csv"

CASES = [
    ("trials-0", BASE + " --trials 0", ("trials", ">= 1")),
    ("trials-neg", BASE + " --trials -2", ("trials",)),
    ("mechanism-unknown", BASE + " --mechanism magic", ("mechanism", "magic", "gaussian")),
    ("mechanism-one-bad", BASE + " --mechanism gaussian,rr", ("mechanism", "'rr'")),
    ("examples-0", BASE + " --examples 0", ("examples", "1..8")),
    ("examples-9", BASE + " --examples 1,9", ("examples", "1..8", "9")),
    ("examples-text", BASE + " --examples two", ("--examples",)),
    ("clients-0", BASE + " --clients 0", ("clients",)),
    ("epsilon-0", BASE + " --epsilons inf,0", ("epsilon", "> 0")),
    ("epsilon-neg", BASE + " --epsilons=-1", ("epsilon",)),
    ("epsilon-text", BASE + " --epsilons 1,lots", ("--epsilons", "lots")),
    ("epsilon-nan", BASE + " --epsilons nan", ("epsilon", "NaN")),
    ("delta-1", BASE + " --delta 1", ("delta", "(0, 1)")),
    ("clip-0", BASE + " --clip 0", ("clip", "> 0")),
    ("steps-0", BASE + " --steps 0", ("steps",)),
    ("lr-0", BASE + " --lr 0", ("lr",)),
    ("seed-neg", BASE + " --seed -1", ("seed",)),
    ("method-unknown", BASE + " --method gd", ("--method",)),
    ("optimizer-unknown", BASE + " --optimizer sgd", ("--optimizer",)),
    ("model-unknown", BASE + " --model resnet", ("--model",)),
    ("out-folder", "attack --no-progress --out {tmp}", ("--out", "is a folder")),
    ("plot-folder", BASE + " --plot {tmp}", ("--plot", "is a folder")),
    ("plot-suffix", BASE + " --plot {tmp}/a.xyz", ("--plot", ".png", "a.xyz")),
    ("plot-no-suffix", BASE + " --plot {tmp}/a", ("--plot", ".png")),
    ("out-suffix", "attack --no-progress --out {tmp}/a.png", ("--out", ".csv")),
    ("lr-lbfgs", BASE + " --lr 0.5", ("--lr", "lbfgs", "--optimizer adam")),
    ("delta-pure", BASE + " --mechanism laplace --delta 1e-3", ("--delta", "gaussian", "laplace")),
]


def _invoke(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:   # argparse errors
            rc = exc.code
        except BaseException:       # noqa: BLE001  (a traceback is the failure we test for)
            return 99, out.getvalue(), traceback.format_exc()
    return int(rc or 0), out.getvalue(), err.getvalue()


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line(case, tmp_path):
    _, argv, expect = case
    start = time.perf_counter()
    rc, out, err = _invoke(argv.format(tmp=tmp_path).split())
    assert rc == 2, (rc, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith("ldpsim attack: error:"), lines[0]
    for word in expect:
        assert word in lines[0], (word, lines[0])
    assert not (tmp_path / "a.csv").exists()
    assert time.perf_counter() - start < CASE_LIMIT_S


@pytest.mark.slow  # loads MNIST and compiles two attack programs end to end
def test_tiny_run_writes_csv_and_figure(tmp_path, data_root):
    """logreg on MNIST, 2 trials, ε ∈ {inf, 1}, 40 L-BFGS steps: one row per trial and ε,
    every column filled; unnoised the image is recovered far better than at ε = 1, and iDLG
    gets every label (a linear model's output gradient is x ⊗ (p − y))."""
    out, plot = tmp_path / "a.csv", tmp_path / "a.png"
    rc, _, err = _invoke(f"attack --model logreg --epsilons inf,1 --trials 2 --steps 40 "
                         f"--data-dir {data_root} --out {out} --plot {plot}".split())
    assert rc == 0, err
    assert "eps=inf" in err and "eps=1 " in err   # progress lines
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 4
    from ldpsim._src.attacks._experiment import COLUMNS

    assert tuple(rows[0]) == COLUMNS
    clean = [r for r in rows if math.isinf(float(r["epsilon"]))]
    noisy = [r for r in rows if float(r["epsilon"]) == 1.0]
    assert all(float(r["label_acc"]) == 1.0 for r in clean)
    assert min(float(r["psnr"]) for r in clean) > max(float(r["psnr"]) for r in noisy) + 10
    assert all(float(r["noise_scale"]) == 0.0 for r in clean)
    assert plot.stat().st_size > 5000
