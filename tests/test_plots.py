"""Figures: every kind is written (PNG/SVG/PDF, non-empty) from sweep and noise tables; bad input is named."""

from __future__ import annotations

import jax
import pandas as pd
import pytest

from ldpsim._checks import LdpsimError
from ldpsim.cli import main
from ldpsim.cli.cmd_plot import KINDS as CLI_KINDS
from ldpsim.plots import KINDS, plot
from ldpsim.privacy.averaging import noise_study
from ldpsim.sweep import run_sweep
from sweep_fakes import FakeRunner, small_config


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    path = tmp_path_factory.mktemp("plots") / "r.csv"
    run_sweep(small_config(mechanism=["gaussian", "laplace"]), path, runner=FakeRunner(), progress=False)
    return path


def test_cli_kinds_match():
    assert CLI_KINDS == KINDS


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("suffix", [".png", ".svg", ".pdf"])
def test_every_kind_and_format(results, tmp_path, kind, suffix):
    out = tmp_path / f"fig{suffix}"
    fig = plot(results, kind, out)
    assert out.stat().st_size > 5_000
    ax = fig.axes[0]
    assert ax.get_xlabel() and ax.get_ylabel()
    assert any(a.get_legend() is not None for a in fig.axes)
    if kind != "convergence":
        assert ax.get_xscale() == "log"
    # mechanism varies in this table, so series are split by it and labelled.
    labels = [t.get_text() for a in fig.axes if a.get_legend() for t in a.get_legend().get_texts()]
    assert any("laplace" in s for s in labels) or kind == "noise-vs-clients" and any("ε" in s for s in labels)


def test_bands_are_mean_plus_minus_std_over_seeds(results, tmp_path):
    fig = plot(results, "accuracy-vs-clients", where={"mechanism": "gaussian"})
    df = pd.read_csv(results)
    df = df[(df["mechanism"] == "gaussian") & (df["round"] == 4) & (df["epsilon"] == 10)]
    stats = df.groupby("clients_per_round")["accuracy"].agg(["mean", "std"])
    line = next(ln for ln in fig.axes[0].get_lines() if ln.get_label() == "ε = 10")
    assert list(line.get_ydata()) == pytest.approx(list(stats["mean"]))
    from matplotlib.colors import to_rgb

    band = next(c for c in fig.axes[0].collections
                if tuple(c.get_facecolor()[0][:3]) == pytest.approx(to_rgb(line.get_color())))
    ys = band.get_paths()[0].vertices[:, 1]
    assert ys.max() == pytest.approx((stats["mean"] + stats["std"]).max())


def test_noise_table_plot_has_theory(tmp_path):
    rows = noise_study(jax.random.key(0), clients=[1, 10, 100], dim=500, noise_scale=0.3, clip=1.0, trials=3)
    df = pd.DataFrame([{**r, "epsilon": 2.0, "clip": 1.0} for r in rows])
    fig = plot(df, "noise-vs-clients", tmp_path / "n.png")
    labels = [ln.get_label() for ln in fig.axes[0].get_lines()]
    assert any(s.startswith("theory") for s in labels)
    assert fig.axes[0].get_yscale() == "log" and (tmp_path / "n.png").stat().st_size > 5_000


def test_errors_name_the_problem(results, tmp_path):
    with pytest.raises(LdpsimError, match=r"\.png"):
        plot(results, "convergence", tmp_path / "fig.jpg")
    with pytest.raises(LdpsimError, match="kind"):
        plot(results, "pie", tmp_path / "fig.png")
    with pytest.raises(LdpsimError, match="no rows match"):
        plot(results, "convergence", where={"mechanism": "nope"})
    with pytest.raises(LdpsimError, match="noise_norm"):
        plot(pd.DataFrame({"clients_per_round": [1], "accuracy": [0.5]}), "noise-vs-clients")
    with pytest.raises(LdpsimError, match="not found"):
        plot(tmp_path / "missing.csv", "convergence")


def test_cli_plot(results, tmp_path, capsys):
    out = tmp_path / "c.svg"
    assert main(["plot", str(results), "--kind", "convergence", "--metric", "loss",
                 "--where", "mechanism=laplace", "--out", str(out)]) == 0
    assert out.stat().st_size > 5_000
    assert main(["plot", str(results), "--kind", "convergence", "--out", str(tmp_path / "x.gif")]) == 2
    assert ".png" in capsys.readouterr().err
