"""Figures: every kind is written (PNG/SVG/PDF, non-empty) from sweep and noise tables; bad input is named."""

from __future__ import annotations

import itertools
import math

import jax
import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_rgba

from ldpsim._src._checks import LdpsimError
from ldpsim.cli import main
from ldpsim._src.cli.cmd_plot import KINDS as CLI_KINDS
from ldpsim.plots import KINDS, plot
from ldpsim._src.plots.figures import eps_colors
from ldpsim._src.privacy.analysis.averaging import noise_study
from ldpsim.sweep import run_sweep
from sweep_fakes import FakeRunner, small_config


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    path = tmp_path_factory.mktemp("plots") / "r.csv"
    run_sweep(small_config(mechanism=["gaussian", "laplace"]), path, runner=FakeRunner(), progress=False)
    return path


def _legends(fig):
    return [a.get_legend() for a in fig.axes if a.get_legend() is not None] + list(fig.legends)


def _legend_texts(fig):
    return [t.get_text() for leg in _legends(fig) for t in leg.get_texts()]


def _sweep_like_table():
    """Rows as `ldpsim sweep` writes them: ε = ∞ runs have mechanism 'none' and δ = nan."""
    rows = []
    for eps in (1.0, 10.0, 100.0, math.inf):
        private = math.isfinite(eps)
        for m in (10, 100):
            for seed in (0, 1):
                for r in range(1, 6):
                    acc = 0.1 + 0.08 * r * (1.0 if not private else math.log10(eps) / 3) + 0.01 * seed
                    rows.append(dict(dataset="synthetic", model="mlp",
                                     mechanism="gaussian" if private else "none",
                                     delta=0.005 if private else math.nan, epsilon=eps,
                                     clients_per_round=m, seed=seed, round=r, accuracy=acc,
                                     noise_norm=(100.0 / eps / m ** 0.5) if private else 0.0,
                                     cell=f"clients_per_round={m};epsilon={eps:g};seed={seed}"))
    return pd.DataFrame(rows)


def _inside_axes_fraction(fig, legend):
    """Share of the legend's area that lies over any axes (0: fully outside the data area)."""
    fig.canvas.draw()
    box = legend.get_window_extent()
    over = 0.0
    for ax in fig.axes:
        inter = box.intersection(box, ax.get_window_extent())
        if inter is not None:
            over += inter.width * inter.height
    return over / (box.width * box.height)


@pytest.mark.parametrize("kind", ["accuracy-vs-clients", "convergence", "noise-vs-clients"])
def test_epsilon_series_are_labelled_coloured_in_order_and_legend_is_off_the_data(kind):
    fig = plot(_sweep_like_table(), kind)
    labels = _legend_texts(fig)
    assert not any("nan" in s.lower() for s in labels), labels
    assert not any("none" in s for s in labels), labels
    if kind != "noise-vs-clients":  # the noise plot has no ε = ∞ series (no noise)
        assert "ε = ∞ (no privacy)" in labels
    eps_labels = [s for s in labels if s.startswith("ε = ") and "∞" not in s] or \
                 [s.split(", ")[1] for s in labels if s.startswith("‖z̄‖, ")]
    assert eps_labels == ["ε = 1", "ε = 10", "ε = 100"]
    # Finite ε follow the ordered colour map (distinct colours, monotone along it);
    # ε = ∞ is black and dashed.
    lines = {}
    for leg in _legends(fig):
        for handle, text in zip(leg.legend_handles, leg.get_texts()):
            lines[text.get_text()] = handle
    pal = eps_colors([1.0, 10.0, 100.0, math.inf])
    assert pal[math.inf] == "black"
    cols = [np.asarray(pal[e][:3]) for e in (1.0, 10.0, 100.0)]
    assert min(np.abs(a - b).sum() for a, b in itertools.combinations(cols, 2)) > 0.5
    for e, key in ((1.0, "ε = 1"), (10.0, "ε = 10"), (100.0, "ε = 100")):
        handle = lines.get(key) or lines[f"‖z̄‖, {key}"]
        assert np.allclose(to_rgba(handle.get_color()), pal[e])
    if "ε = ∞ (no privacy)" in lines:
        handle = lines["ε = ∞ (no privacy)"]
        assert to_rgba(handle.get_color()) == to_rgba("black") and handle.get_linestyle() == "--"
    for leg in _legends(fig):
        assert _inside_axes_fraction(fig, leg) == 0.0


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
    assert _legends(fig)
    if kind != "convergence":
        assert ax.get_xscale() == "log"
    # mechanism varies in this table, so series are split by it and labelled.
    labels = _legend_texts(fig)
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


def test_title_counts_seeds_per_point_when_cells_differ(results):
    df = pd.read_csv(results)
    seeds = sorted(df["seed"].unique())
    assert len(seeds) >= 2
    # Keep every seed at the smallest m but only the first seed elsewhere: points have 1..n seeds.
    m0 = df["clients_per_round"].min()
    uneven = df[(df["clients_per_round"] == m0) | (df["seed"] == seeds[0])]
    title = plot(uneven, "accuracy-vs-clients", where={"mechanism": "gaussian"}).axes[0].get_title()
    assert f"over 1–{len(seeds)} seeds per point" in title
    even = plot(df, "accuracy-vs-clients", where={"mechanism": "gaussian"}).axes[0].get_title()
    assert f"mean ± std over {len(seeds)} seeds)" in even


@pytest.mark.slow
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


def test_cli_plot_warns_when_where_drops_the_non_private_runs(tmp_path, capsys):
    """ε = ∞ runs read mechanism 'none': ``--where mechanism=gaussian`` keeps none of them,
    and the command says the figure lost its non-private reference; a filter that keeps
    them says nothing."""
    path = tmp_path / "r.csv"
    _sweep_like_table().to_csv(path, index=False)
    out = tmp_path / "c.png"
    assert main(["plot", str(path), "--kind", "convergence", "--where", "mechanism=gaussian",
                 "--out", str(out)]) == 0
    assert "no non-private reference" in capsys.readouterr().err
    assert main(["plot", str(path), "--kind", "convergence", "--where", "clients_per_round=10",
                 "--out", str(out)]) == 0
    assert "warning" not in capsys.readouterr().err


def test_a_mode_without_a_local_epsilon_plots_by_clients(tmp_path):
    """Central, distributed and MindSpore runs write epsilon as NaN (their budget is the noise
    multiplier): the figures that do not need ε draw them (one series), and
    accuracy-vs-epsilon says why it cannot."""
    df = _sweep_like_table()
    df = df[df["epsilon"] == 10.0].assign(epsilon=math.nan, privacy_mode="central",
                                          noise_multiplier=1.0, theory_noise_norm=1.0,
                                          signal_norm=0.5)
    for kind in ("accuracy-vs-clients", "convergence", "noise-vs-clients"):
        plot(df, kind, tmp_path / f"{kind}.png")
        assert (tmp_path / f"{kind}.png").stat().st_size > 0
    with pytest.raises(LdpsimError, match="no local epsilon \\(central"):
        plot(df, "accuracy-vs-epsilon")


def test_the_noise_table_figure_names_its_shared_setting():
    """``ldpsim noise``'s figure: the setting every row shares in the title (the mechanism,
    ε, δ, neighbours and σ the noise was drawn with); a varying one is the legend's."""
    rows = [dict(clients=n, epsilon=50.0, delta=0.01, clip=1.0, sigma=0.1246, dim=7850,
                 mechanism="gaussian", neighbours="add-remove",
                 noise_norm_mean=11.0 / n ** 0.5, noise_norm_std=0.01,
                 noise_norm_theory=11.04 / n ** 0.5) for n in (1, 10, 100)]
    fig = plot(pd.DataFrame(rows), "noise-vs-clients")
    title = fig._suptitle.get_text()
    assert title.endswith(": gaussian, ε = 50, δ = 0.01, add-remove, σ = 0.1246"), title
    two = pd.DataFrame(rows + [dict(r, epsilon=10.0, sigma=0.5) for r in rows])
    title = plot(two, "noise-vs-clients")._suptitle.get_text()
    assert "ε =" not in title and "σ =" not in title and "δ = 0.01" in title


def test_the_no_privacy_points_of_each_m_sit_side_by_side():
    """Without noise the m barely matter, so their ∞ points coincide: each series' square
    is drawn slightly apart around the ∞ tick, none hidden under another."""
    fig = plot(_sweep_like_table(), "accuracy-vs-epsilon")
    ax = fig.axes[0]
    xs = [float(line.get_xdata()[0]) for line in ax.get_lines() if line.get_marker() == "s"]
    assert len(xs) == 2 and len(set(xs)) == 2
    tick = max(ax.get_xticks())
    assert all(abs(math.log10(x / tick)) < 0.1 for x in xs)
