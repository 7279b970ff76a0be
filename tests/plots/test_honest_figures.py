"""Honest figures: cells without an ε guarantee (``epsilon_spent = inf``) are ringed and in the
legend, per-round and total ε are named on the axes, the total ε spent can be the x axis,
accuracy panels draw the chance level, and every reference line has a legend entry."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from ldpsim._src._checks import LdpsimError
from ldpsim._src.plots.figures import NO_GUARANTEE_LABEL, NUM_CLASSES, chance_level, no_guarantee
from ldpsim.cli import main
from ldpsim.plots import plot, plot_accuracy_ci, plot_gap_table
from ldpsim.sweep import accuracy_verdict
from verdict_fakes import verdict_table

INF = math.inf


def _table(floor_at: float = 100.0) -> pd.DataFrame:
    """Two m, three finite ε and ∞, two seeds, three rounds; ε >= floor_at has no guarantee
    (inf spent), the others spend eps*sqrt(round)*(1 + m/100)."""
    rows = []
    for eps in (1.0, 10.0, 100.0, INF):
        for m in (10, 100):
            for seed in (0, 1):
                for r in (1, 2, 3):
                    spent = (math.nan if math.isinf(eps) else INF if eps >= floor_at
                             else eps * math.sqrt(r) * (1 + m / 100))
                    rows.append(dict(dataset="mnist", epsilon=eps, clients_per_round=m, seed=seed,
                                     round=r, accuracy=0.2 + 0.1 * r + 0.01 * seed,
                                     epsilon_spent=spent, noise_norm=1.0 if eps < INF else 0.0,
                                     signal_norm=0.3, theory_noise_norm=1.0,
                                     cell=f"clients_per_round={m};epsilon={eps:g};seed={seed}"))
    return pd.DataFrame(rows)


def _labels(fig) -> list[str]:
    legends = [a.get_legend() for a in fig.axes if a.get_legend() is not None] + list(fig.legends)
    return [t.get_text() for leg in legends for t in leg.get_texts()]


def _rings(ax) -> np.ndarray:
    """(x, y) of the ringed points (the scatter with red edges and no face)."""
    out = [c.get_offsets() for c in ax.collections
           if c.get_label() == NO_GUARANTEE_LABEL or (len(c.get_edgecolors())
                                                    and tuple(c.get_edgecolors()[0]) == (1, 0, 0, 1)
                                                    and not len(c.get_facecolors()))]
    return np.concatenate(out) if out else np.empty((0, 2))


def test_no_guarantee_marks_private_rows_with_infinite_spend_only():
    df = pd.DataFrame({"epsilon": [1.0, 50.0, INF, "inf", 5.0],
                       "epsilon_spent": [3.0, INF, np.nan, INF, "inf"]})
    assert no_guarantee(df).tolist() == [False, True, False, False, True]
    assert not no_guarantee(df.drop(columns="epsilon_spent")).any()


def test_chance_level_is_one_over_the_loaders_class_counts():
    from ldpsim._src.data import idx, leaf, shakespeare, synthetic

    want = {"mnist": idx.IDX_DATASETS["mnist"]["num_classes"],
            "fashion_mnist": idx.IDX_DATASETS["fashion_mnist"]["num_classes"],
            "femnist": leaf.NUM_CLASSES, "synthetic": synthetic.NUM_CLASSES,
            "synthetic_iid": synthetic.NUM_CLASSES, "shakespeare": len(shakespeare.VOCAB)}
    assert NUM_CLASSES == want
    assert chance_level(pd.DataFrame({"dataset": ["mnist", "mnist"]})) == 0.1
    assert chance_level(pd.DataFrame({"dataset": ["mnist", "femnist"]})) is None
    assert chance_level(pd.DataFrame({"dataset": ["my_data"]})) is None


@pytest.mark.parametrize("kind", ["accuracy-vs-epsilon", "accuracy-vs-clients", "convergence",
                                  "noise-vs-clients"])
def test_cells_without_a_guarantee_are_ringed_and_in_the_legend(kind):
    fig = plot(_table(), kind)
    labels = _labels(fig)
    assert labels.count(NO_GUARANTEE_LABEL) == 1
    rings = np.concatenate([_rings(ax) for ax in fig.axes])
    # Exactly the ε = 100 cells: one per m (final accuracy mean over the 2 seeds = 0.505).
    assert len(rings) == 2
    if kind != "noise-vs-clients":
        assert list(rings[:, 1]) == pytest.approx([0.505, 0.505])
    if kind == "accuracy-vs-epsilon":
        assert sorted(rings[:, 0]) == [100.0, 100.0]
    fig = plot(_table(floor_at=INF), kind)   # every cell holds a guarantee: no ring, no entry
    assert NO_GUARANTEE_LABEL not in _labels(fig)
    assert sum(len(_rings(ax)) for ax in fig.axes) == 0


def test_axes_name_per_round_and_total_epsilon():
    ax = plot(_table(), "accuracy-vs-epsilon").axes[0]
    assert "per-round" in ax.get_xlabel() and "per-round ε" in ax.get_title()
    ax = plot(_table(), "accuracy-vs-epsilon", epsilon_axis="total").axes[0]
    assert "total ε spent" in ax.get_xlabel() and "total ε spent" in ax.get_title()
    assert "epsilon_spent" in ax.get_xlabel()


@pytest.mark.parametrize("top", [1 - 2 ** -52, 9.99, 5.0, 0.05])
def test_infinity_column_stays_clear_of_the_largest_finite_spend(top):
    """A largest total ε just under a power of ten (ε = 1 for one round composes to
    0.9999999999999998) once put the "∞" column on top of it; it is at least 2x further."""
    rows = [dict(dataset="mnist", epsilon=eps, clients_per_round=10, seed=0, round=1,
                 accuracy=acc, epsilon_spent=spent, noise_norm=1.0, signal_norm=0.3,
                 theory_noise_norm=1.0)
            for eps, acc, spent in ((1.0, 0.2, top), (INF, 0.9, math.nan))]
    ax = plot(pd.DataFrame(rows), "accuracy-vs-epsilon", epsilon_axis="total").axes[0]
    ticks = dict(zip((t.get_text() for t in ax.get_xticklabels()), ax.get_xticks()))
    inf_x = next(x for label, x in ticks.items() if label.startswith("∞"))
    points = [x for line in ax.get_lines() for x, y in zip(line.get_xdata(), line.get_ydata())
              if y == pytest.approx(0.2)]
    assert points and max(points) == pytest.approx(top)
    assert inf_x >= 2 * top


def test_total_axis_places_each_cell_at_its_largest_spend():
    df = _table()
    ax = plot(df, "accuracy-vs-epsilon", epsilon_axis="total").axes[0]
    xs = sorted({round(float(x), 9) for line in ax.get_lines() for x in line.get_xdata()
                 if line.get_linestyle() == "-" and line.get_marker() == "o"})
    # Finite spends at the last round (r = 3): eps*sqrt(3)*(1 + m/100) for eps 1, 10, m 10, 100.
    want = sorted(round(e * math.sqrt(3) * (1 + m / 100), 9) for e in (1.0, 10.0) for m in (10, 100))
    assert xs == want
    # The no-guarantee cells sit in the ∞ column, named as such.
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks[-1].startswith("∞") and "no guarantee" in ticks[-1]
    with pytest.raises(LdpsimError, match="accuracy-vs-epsilon only"):
        plot(df, "convergence", epsilon_axis="total")
    with pytest.raises(LdpsimError, match="epsilon_spent"):
        plot(df.drop(columns="epsilon_spent"), "accuracy-vs-epsilon", epsilon_axis="total")


@pytest.mark.parametrize("kind", ["accuracy-vs-epsilon", "accuracy-vs-clients", "convergence"])
def test_accuracy_panels_draw_the_chance_level(kind):
    fig = plot(_table(), kind)
    assert "chance (1/10 classes)" in _labels(fig)
    chance = [line for ax in fig.axes for line in ax.get_lines()
              if list(line.get_ydata()) == [0.1, 0.1]]
    assert len(chance) == len([ax for ax in fig.axes if ax.get_visible()])
    for other in (plot(_table().assign(dataset="x"), kind),   # unknown classes
                  plot(_table().assign(loss=1.0), kind, metric="loss")):   # not accuracy
        assert not any(s.startswith("chance") for s in _labels(other))


def test_every_reference_line_of_the_noise_figure_has_a_legend_entry():
    fig = plot(_table(floor_at=INF), "noise-vs-clients")
    ax = fig.axes[0]
    # Every drawn line has a label, except the theory line repeated per series (one entry).
    unlabelled = [line for line in ax.get_lines() if line.get_label().startswith("_")]
    assert all(line.get_color() == "black" for line in unlabelled)
    labels = _labels(fig)
    assert "theory σ√(d/n_eff)" in labels
    for eps in ("ε = 1", "ε = 10", "ε = 100"):
        assert f"‖ū‖ (clean mean update), {eps}" in labels


def test_verdict_figures_flag_cells_without_a_guarantee():
    verdict = accuracy_verdict(verdict_table(), method=None)   # replace-one cells spend inf
    fig = plot_accuracy_ci(verdict, chance=0.1)
    labels = _labels(fig)
    assert NO_GUARANTEE_LABEL in labels and "chance (0.1)" in labels
    assert labels[-1] == NO_GUARANTEE_LABEL
    honest = fig.axes[1]
    assert len(_rings(honest)) == 2 and len(_rings(fig.axes[0])) == 0
    texts = [t.get_text() for ax in plot_gap_table(verdict).axes for t in ax.texts]
    assert sum("no ε guarantee" in t for t in texts) == 2


def test_cli_plot_total_axis(tmp_path, capsys):
    csv = tmp_path / "r.csv"
    _table().to_csv(csv, index=False)
    out = tmp_path / "t.png"
    assert main(["plot", str(csv), "--kind", "accuracy-vs-epsilon", "--epsilon-axis", "total",
                 "--out", str(out)]) == 0
    assert out.stat().st_size > 5_000
