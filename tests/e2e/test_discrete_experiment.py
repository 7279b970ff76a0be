"""experiments/distributed_discrete_lenet5.py runs a whole-run cell end to end (a tiny synthetic
grid in place of MNIST / LeNet-5): the driver solves the cell's granularity and noise with the
Poisson amplification, the engine runs it with ``epsilon_scope="run"``, and the rows it appends
carry the whole-run accounting."""

from __future__ import annotations

import importlib.util
import math
import warnings
from pathlib import Path

import pandas as pd
import pytest

from ldpsim._src.fl.config import SimulationConfig
from ldpsim._src.fl.simulate import build_data, model_dimension, model_name_for
from ldpsim._src.privacy.discrete import accounting as dacc

SCRIPT = Path(__file__).resolve().parents[2] / "experiments" / "distributed_discrete_lenet5.py"
RUN = dict(dataset="synthetic", model="logreg", partition="iid", population=400, rounds=3,
           eval_every=1, clip=1.0, local_steps=1, batch_size=4, client_lr=0.1,
           client_optimizer="sgd", weighting="examples", sampling="poisson",
           server_optimizer="fedavg", server_lr=1.0)


def _toml(v) -> str:
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, list):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return repr(v)


@pytest.mark.slow
@pytest.mark.parametrize("mechanism", ["ddg", "skellam"])
def test_whole_run_cell_runs_end_to_end(tmp_path, mechanism):
    pop, _, _ = build_data(SimulationConfig(**RUN))
    dim = model_dimension(model_name_for("logreg", pop), tuple(pop.input_shape),
                          int(pop.num_classes))
    spec = tmp_path / "tiny.toml"
    spec.write_text("\n".join([
        "[sweep]", 'name = "tiny"', 'out = "tiny.csv"', f"dim = {dim}", "[grid]",
        f'mechanism = ["{mechanism}"]', 'target = ["whole_run_8"]', "seed = [0]",
        "cells = [[40, 20]]", "[run]", *(f"{k} = {_toml(v)}" for k, v in RUN.items()),
        ""]))
    mod_spec = importlib.util.spec_from_file_location("ddl5", SCRIPT)
    driver = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(driver)
    out = tmp_path / "tiny.csv"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert driver.main(["--spec", str(spec), "--out", str(out)]) == 0
    df = pd.read_csv(out)
    assert list(df["round"]) == [1, 2, 3] and list(df["final"]) == [0, 0, 1]
    assert (df["target"] == "whole_run_8").all() and (df["wrapped_fraction"] == 0).all()
    # the driver's own solve: ε = 8 over the 3 rounds at q = 40/400, δ = 1/400, the noise
    # counted from the cohort floor at δ less its tail charge
    floor, tail = dacc.cohort_floor(400, 40, 3, 8.0, 1.0 / 400)
    assert (df["noise_survivors"] == floor).all() and floor < 40
    assert df["epsilon_accounted"].iloc[0] <= 8.0
    assert df["epsilon_accounted"].iloc[0] == pytest.approx(8.0, rel=1e-3)
    # the engine's accounting: the same mechanism (γ from the driver, noise re-solved to the
    # same value), the fewest realised survivors so far capped at the floor, amplified at q = 0.1
    g = float(df["granularity"].iloc[0])
    mech = dacc.DiscreteMechanism(mechanism, 1.0, g, float(df["noise"].iloc[0]), 40, dim,
                                  20, neighbours="add-remove")
    for t in (1, 2, 3):
        s = max(1, min(floor, int(df["survivors"].iloc[:t].min())))
        want = dacc.discrete_epsilon(mech, 1.0 / 400 - tail, t, survivors=s, sampling_rate=0.1)
        assert df["epsilon_spent"].iloc[t - 1] == pytest.approx(want, rel=1e-9)
        assert df["delta_spent"].iloc[t - 1] <= 1.0 / 400
    assert math.isfinite(df["accuracy"].iloc[-1])


def _driver():
    spec = importlib.util.spec_from_file_location("dd_driver", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _rows(tmp_path) -> str:
    """Two CSVs as the committed results are (one per m) with final rows only: discrete cells
    with and without the wrap_clients column (the later plan and the earlier one), and the
    references."""
    a = pd.DataFrame([
        dict(mechanism="ddg", target="whole_run_4", clients_per_round=100, bits=16, seed=s,
             accuracy=acc, final=1) for s, acc in ((0, 0.88), (1, 0.90))] + [
        dict(mechanism=m, target=t, clients_per_round=100, bits=0, seed=0, accuracy=acc,
             final=1) for m, t, acc in (("nonprivate", "none", 0.95),
                                        ("continuous", "whole_run_4", 0.885),
                                        ("central", "whole_run_4", 0.93))])
    b = pd.DataFrame([
        dict(mechanism="ddg", target="whole_run_4", clients_per_round=1000, bits=b, seed=0,
             accuracy=acc, final=1, wrap_clients=1154) for b, acc in ((12, 0.90), (16, 0.95))] + [
        dict(mechanism="nonprivate", target="none", clients_per_round=1000, bits=0, seed=0,
             accuracy=0.951, final=1, wrap_clients=math.nan)])
    pa, pb = tmp_path / "m100.csv", tmp_path / "m1000.csv"
    a.to_csv(pa, index=False)
    b.to_csv(pb, index=False)
    return f"{pa},{pb}"


def test_table_gives_gaps_in_points_and_marks_the_earlier_plan(tmp_path):
    text = _driver().table(_rows(tmp_path))
    lines = text.splitlines()
    assert "points below non-private" in lines[0]
    old = next(x for x in lines if x.startswith("| whole_run_4 | 100 | ddg"))
    assert "ddg †" in old and "0.8900 ± 0.014 (2)" in old
    # gaps: non-private 0.95 - 0.89 = +6.0, continuous -0.5, central +4.0
    assert old.rstrip(" |").split(" | ")[-3:] == ["+6.0", "-0.5", "+4.0"]
    new = next(x for x in lines if x.startswith("| whole_run_4 | 1,000 | ddg | 12"))
    assert "†" not in new and "+5.1" in new
    assert "† planned with the wrap bound counting m reports" in text


def test_table_reads_glob_patterns_and_names_one_that_matches_nothing(tmp_path):
    paths = _rows(tmp_path)
    assert _driver().table(str(tmp_path / "*.csv")) == _driver().table(paths)
    with pytest.raises(SystemExit, match="no CSV matches"):
        _driver().read(str(tmp_path / "nothing_*.csv"))


def test_verdict_answers_the_smallest_m_and_the_fewest_bits(tmp_path):
    text = _driver().verdict(_rows(tmp_path))
    lines = text.splitlines()
    run4 = next(x for x in lines if x.startswith("* **whole_run_4**"))
    # non-private 0.95 / 0.951; ddg 16 bits 0.89 (2 seeds) at m = 100, 0.95 at m = 1,000
    assert "ddg 16 bits: within at m = 1,000 (+0.1, 1 seed); not at 100 (+6.0, 2 seeds)" in run4
    assert "central: within at m = none run; not at 100 (+2.0, 1 seed)" in run4
    bits = next(x for x in lines if x.startswith("* whole_run_4, m = 100, ddg"))
    assert "(bits run: 16×2;" in bits
    assert "of continuous from 16 bits" in bits                                 # -0.5
    assert "of central at no bit-width run (points below at 16: +4.0)" in bits
    # no continuous or central run at m = 1,000: no bits line there
    assert not any(x.startswith("* whole_run_4, m = 1,000") for x in lines)
    assert _driver().verdict(_rows(tmp_path), tolerance=7).count("not at") == 0


def test_plot_draws_every_target_and_m(tmp_path):
    png = tmp_path / "dd.png"
    assert _driver().plot(_rows(tmp_path), str(png)) == 0
    from matplotlib import image

    img = image.imread(png)
    assert img.shape[0] > 600 and img.shape[1] > 500


def test_plan_table_decomposes_the_error_variance():
    """--plan-table: every discrete cell's plan, host-side only. The decoded sum's error
    variance against the continuous Gaussian's factors into the rounding's norm inflation
    (the noise covers the rounded norm bound, not the clip), the cohort floor (noise counted
    from fewer clients than m) and the rounding's own variance share (to within the τ term
    and the table's exact variance, a few per cent)."""
    driver = _driver()
    spec = {"sweep": {"dim": 1000}, "grid": {"mechanism": ["ddg"], "target": ["whole_run_8",
                                                                             "per_round_4"],
                                             "seed": [0, 1], "cells": [[40, 12], [40, 16]]},
            "run": dict(RUN, population=400, rounds=3)}
    text = driver.plan_table(spec)
    rows = [line.strip("| ").split(" | ") for line in text.splitlines()[2:]]
    assert len(rows) == 4                                      # seed 0 only
    for r in rows:
        ratio, inflation, share, floor = (float(x) for x in r[7:11])
        assert inflation >= 1 and floor >= 1 and 0 <= share < 1
        assert ratio == pytest.approx(inflation * floor / (1 - share), rel=0.05)
    by = {(r[0], r[2]): r for r in rows}
    assert float(by[("per_round_4", "16")][10]) == 1.0          # fixed cohorts: no floor
    assert float(by[("whole_run_8", "16")][10]) > 1.0
    assert float(by[("whole_run_8", "12")][8]) > float(by[("whole_run_8", "16")][8])
    n_high, _ = dacc.cohort_ceiling(400, 40, 1e-6 / 2)         # Poisson: the cohort's reach
    assert by[("whole_run_8", "16")][6].endswith(f"({n_high})") and n_high > 40
    assert by[("per_round_4", "16")][6].endswith("(40)")


def test_append_writes_every_rows_columns(tmp_path):
    """A cell resumed from a checkpoint written by an earlier version replays history rows
    without the columns added since: the appended file has every row's columns (the first
    rows' missing ones NaN), and appending to it again widens it the same way."""
    append = _driver().append
    path = str(tmp_path / "cell.csv")
    append(path, [{"round": 5, "accuracy": 0.5}, {"round": 10, "accuracy": 0.6, "new": 1.0}])
    df = pd.read_csv(path)
    assert list(df.columns) == ["round", "accuracy", "new"]
    assert math.isnan(df["new"][0]) and df["new"][1] == 1.0
    append(path, [{"round": 15, "accuracy": 0.7, "newer": 2}])
    df = pd.read_csv(path)
    assert list(df["round"]) == [5, 10, 15] and set(df.columns) == {"round", "accuracy", "new", "newer"}


def test_the_crossover_driver_appends_every_rows_columns(tmp_path):
    spec = importlib.util.spec_from_file_location(
        "crossover_driver", SCRIPT.with_name("crossover_lenet5.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    path = str(tmp_path / "c.csv")
    mod.append(path, [{"round": 5, "accuracy": 0.5}, {"round": 10, "accuracy": 0.6, "new": 1.0}])
    mod.append(path, [{"round": 15, "accuracy": 0.7, "new": 3.0}])
    df = pd.read_csv(path)
    assert list(df.columns) == ["round", "accuracy", "new"] and list(df["round"]) == [5, 10, 15]
    assert math.isnan(df["new"][0]) and list(df["new"][1:]) == [1.0, 3.0]
