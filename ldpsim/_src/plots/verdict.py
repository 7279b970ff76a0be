"""Figures of a converged accuracy-vs-clients verdict, with confidence intervals over seeds.

Drawn from :func:`ldpsim.sweep.accuracy_verdict` and :func:`ldpsim.sweep.accuracy_by_round`
(the statistics live there; this module only draws). One panel per private setting
(MindSpore's add/remove, the honest replace-one), ε coloured as in every ldpsim figure
(:func:`ldpsim._src.plots.figures.eps_colors`), the non-private runs black and dashed in
every panel. Error bars and bands are the t-intervals of the verdict (none with one seed).
ε is the per-round local ε throughout. Cells whose runs spent ``epsilon_spent = inf`` (no ε
guarantee at their δ: the sampler's floor) are ringed in red (and flagged in the gap table);
``chance=`` draws the chance accuracy (``1/num_classes``; e.g. 0.1 for MNIST).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ldpsim._src._checks import LdpsimError
from ldpsim._src.plots.figures import (
    _NO_GUARANTEE_STYLE,
    NO_GUARANTEE_LABEL,
    NO_PRIVACY_LABEL,
    _finish,
    _plain_log_ticks,
    eps_colors,
)
from ldpsim._src.sweep.verdict import NON_PRIVATE, Verdict, setting_label, setting_order

__all__ = ["plot_accuracy_ci", "plot_curves_ci", "plot_gap_table"]

_LEGEND_BELOW = dict(loc="upper center", bbox_to_anchor=(0.5, 0.0), fontsize="small", frameon=False)


def _private_settings(settings: pd.Series) -> list[str]:
    order = [s for s in setting_order(settings) if s != NON_PRIVATE]
    if not order:
        raise LdpsimError("the results have no private runs (every epsilon is inf): nothing to compare")
    return order


def _yerr(g: pd.DataFrame, mean: str, low: str, high: str) -> np.ndarray | None:
    lo = (g[mean] - g[low]).to_numpy(float)
    hi = (g[high] - g[mean]).to_numpy(float)
    if np.isnan(lo).all():
        return None
    return np.vstack([np.nan_to_num(lo), np.nan_to_num(hi)])


def _eps_label(eps: float) -> str:
    return NO_PRIVACY_LABEL if math.isinf(eps) else f"ε = {eps:g} per round"


def cell_without_guarantee(cells: pd.DataFrame) -> pd.Series:
    """Private verdict cells whose ``epsilon_spent`` (largest over seeds) is ``inf``."""
    if "epsilon_spent" not in cells.columns:
        return pd.Series(False, index=cells.index)
    eps = pd.to_numeric(cells["epsilon"], errors="coerce")
    spent = pd.to_numeric(cells["epsilon_spent"], errors="coerce")
    return pd.Series(np.isfinite(eps) & np.isposinf(spent), index=cells.index)


def _chance(ax, chance: float | None) -> None:
    if chance is not None:
        ax.axhline(chance, color="grey", linestyle="-.", linewidth=1.0, zorder=1,
                   label=f"chance ({chance:g})")


def _n_note(cells: pd.DataFrame) -> str:
    ns = sorted(cells["n"].unique())
    return f"{ns[0]} seed{'s' if ns[0] > 1 else ''}" if len(ns) == 1 else f"{ns[0]}–{ns[-1]} seeds per point"


def plot_accuracy_ci(verdict: Verdict, out: str | Path | None = None, *, title: str | None = None,
                     chance: float | None = None) -> Figure:
    """Final accuracy vs clients per round, one panel per private setting, per-round ε as series.

    Points are means over seeds, bars the verdict's t-intervals; the grey band under the
    non-private line is the tolerance (accuracy within ``verdict.tolerance`` of it). Cells
    without an ε guarantee are ringed in red; ``chance`` draws the chance accuracy.
    """
    cells = verdict.cells
    settings = _private_settings(cells["setting"])
    base = cells[cells["setting"] == NON_PRIVATE].sort_values("clients_per_round")
    palette = eps_colors(cells["epsilon"])
    fig = Figure(figsize=(5.0 * len(settings) + 0.4, 4.6))
    axes = fig.subplots(1, len(settings), sharey=True, squeeze=False)[0]
    n_series = cells["epsilon"].nunique()
    for ax, setting in zip(axes, settings):
        sub = cells[cells["setting"] == setting]
        for k, (eps, g) in enumerate(sub.groupby("epsilon", sort=True)):
            g = g.sort_values("clients_per_round")
            ax.errorbar(g["clients_per_round"] * _dodge(k, n_series), g["accuracy_mean"],
                        yerr=_yerr(g, "accuracy_mean", "accuracy_ci_low", "accuracy_ci_high"),
                        color=palette[float(eps)], marker="o", markersize=4, capsize=3, label=_eps_label(eps))
            bad = cell_without_guarantee(g).to_numpy()
            if bad.any():
                ax.scatter((g["clients_per_round"] * _dodge(k, n_series))[bad], g["accuracy_mean"][bad],
                           label=NO_GUARANTEE_LABEL, **_NO_GUARANTEE_STYLE)
        if len(base):
            ax.errorbar(base["clients_per_round"] * _dodge(n_series - 1, n_series), base["accuracy_mean"],
                        yerr=_yerr(base, "accuracy_mean", "accuracy_ci_low", "accuracy_ci_high"),
                        color="black", linestyle="--", marker="s", markersize=4, capsize=3, label=NO_PRIVACY_LABEL)
            ax.fill_between(base["clients_per_round"], base["accuracy_mean"] - verdict.tolerance,
                            base["accuracy_mean"], color="grey", alpha=0.25, linewidth=0,
                            label=f"within {verdict.tolerance * 100:g} point of no privacy")
        _chance(ax, chance)
        ax.set_xscale("log")
        _plain_log_ticks(ax, cells["clients_per_round"])
        ax.set_xlabel("clients per round m (log scale)")
        ax.set_title(setting_label(setting), fontsize="medium")
        ax.grid(True, alpha=0.3)
        ax.set_ylim(0.0, 1.0)
    axes[0].set_ylabel("final test accuracy")
    fig.suptitle(title or f"Final accuracy vs clients per round (mean, {verdict.confidence:.0%} t-interval; "
                 f"{_n_note(cells)})", fontsize="medium")
    fig.tight_layout()
    handles, labels = _merged_legend(axes)
    fig.legend(handles, labels, ncol=min(len(labels), 3), **_LEGEND_BELOW)
    return _finish(fig, out)


def _dodge(k: int, n: int) -> float:
    """Factor that shifts series k of n sideways on a log axis, so error bars do not overlap."""
    return 10 ** (0.025 * (k - (n - 1) / 2))


def _merged_legend(axes) -> tuple[list, list]:
    """Legend entries of all panels, once each: finite ε ascending, then ε = ∞, then the rest."""
    seen: dict[str, object] = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)

    def key(label: str) -> tuple:
        if label == NO_PRIVACY_LABEL:
            return (1, 0.0)
        if label.startswith("ε = "):
            return (0, float(label.split()[2]))
        return (3, 0.0) if label == NO_GUARANTEE_LABEL else (2, 0.0)

    labels = sorted(seen, key=key)
    return [seen[lab] for lab in labels], labels


def plot_curves_ci(curves: pd.DataFrame, out: str | Path | None = None, *,
                   clients: Sequence[int] = (1000, 10000), title: str | None = None,
                   chance: float | None = None) -> Figure:
    """Accuracy vs round: rows = private settings, columns = the given clients per round,
    per-round ε as series (``chance``: the chance accuracy, drawn when given).

    Args:
        curves: :func:`ldpsim.sweep.accuracy_by_round`'s table.
        out: where to save (``.png``, ``.svg``, ``.pdf``), or None.
        clients: the m to show (those absent from ``curves`` are left out, with a note).
        title: replaces the default title.
    """
    present = sorted(set(curves["clients_per_round"]))
    shown = [int(m) for m in clients if m in present]
    if not shown:
        raise LdpsimError(f"none of clients_per_round={list(clients)} is in the results (they have {present})")
    settings = _private_settings(curves["setting"])
    palette = eps_colors(curves["epsilon"])
    fig = Figure(figsize=(4.6 * len(shown) + 0.6, 3.4 * len(settings) + 0.8))
    axes = fig.subplots(len(settings), len(shown), sharex=True, sharey=True, squeeze=False)
    for i, setting in enumerate(settings):
        for j, m in enumerate(shown):
            ax = axes[i, j]
            sub = curves[(curves["clients_per_round"] == m) & curves["setting"].isin([setting, NON_PRIVATE])]
            for eps, g in sorted(sub.groupby("epsilon"), key=lambda kv: kv[0]):
                g = g.sort_values("round")
                color = palette[float(eps)]
                style = "--" if math.isinf(eps) else "-"
                ax.plot(g["round"], g["mean"], color=color, linestyle=style, label=_eps_label(eps))
                if g["ci_low"].notna().any():
                    ax.fill_between(g["round"], g["ci_low"], g["ci_high"], color=color, alpha=0.15, linewidth=0)
            ns = sorted(sub["n"].unique())
            n_text = "no runs" if not ns else f"{ns[0]} seed{'s' if ns[-1] > 1 else ''}" if len(ns) == 1 \
                else f"{ns[0]}–{ns[-1]} seeds"
            _chance(ax, chance)
            ax.set_title(f"{setting_label(setting)}, m = {m:,} ({n_text})", fontsize="small")
            ax.grid(True, alpha=0.3)
            ax.set_ylim(0.0, 1.0)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            if i == len(settings) - 1:
                ax.set_xlabel("round")
            if j == 0:
                ax.set_ylabel("test accuracy")
    missing = [int(m) for m in clients if m not in present]
    note = f" (no runs at m = {', '.join(f'{m:,}' for m in missing)})" if missing else ""
    conf = f"{float(curves['confidence'].iloc[0]):.0%}" if "confidence" in curves else "the"
    fig.suptitle(title or f"Accuracy vs round, mean and {conf} t-interval over seeds{note}",
                 fontsize="medium")
    fig.tight_layout()
    handles, labels = _merged_legend(axes.ravel())
    fig.legend(handles, labels, ncol=min(len(labels), 4), **_LEGEND_BELOW)
    return _finish(fig, out)


def plot_gap_table(verdict: Verdict, out: str | Path | None = None, *, title: str | None = None) -> Figure:
    """The gap to non-private as an annotated heat map: rows ε, columns m, one panel per setting.

    Each cell reads the mean gap in points with its interval below (``n = 1``: no
    interval) and is coloured by the mean gap (blue above, red below non-private; the
    colour scale runs from −20 (and below: the colour bar's arrow) to +5 points).
    """
    cells = verdict.cells[verdict.cells["setting"] != NON_PRIVATE]
    settings = _private_settings(verdict.cells["setting"])
    ms = sorted(verdict.cells["clients_per_round"].unique())
    eps_all = sorted(cells["epsilon"].unique())
    fig = Figure(figsize=(1.5 * len(ms) * len(settings) + 1.8, max(3.4, 0.9 * len(eps_all) + 1.9)))
    axes = fig.subplots(1, len(settings), squeeze=False)[0]
    norm = TwoSlopeNorm(vmin=-20.0, vcenter=0.0, vmax=5.0)
    image = None
    for ax, setting in zip(axes, settings):
        sub = cells[cells["setting"] == setting].set_index(["epsilon", "clients_per_round"])
        grid = np.full((len(eps_all), len(ms)), np.nan)
        for a, eps in enumerate(eps_all):
            for b, m in enumerate(ms):
                if (eps, m) not in sub.index:
                    continue
                r = sub.loc[(eps, m)]
                if math.isnan(r.gap_mean):
                    ax.text(b, a, "no\nbaseline", ha="center", va="center", fontsize="x-small", color="grey")
                    continue
                grid[a, b] = 100 * r.gap_mean
                text = f"{100 * r.gap_mean:+.1f}"
                if not math.isnan(r.gap_ci_low):
                    text += f"\n[{100 * r.gap_ci_low:+.1f}, {100 * r.gap_ci_high:+.1f}]"
                text += f"\nn = {int(r.gap_n)}"
                if cell_without_guarantee(pd.DataFrame([{"epsilon": eps,
                                                         "epsilon_spent": r.get("epsilon_spent", math.nan)}])).iloc[0]:
                    text += "\nno ε guarantee"
                dark = abs(100 * r.gap_mean) > 12
                ax.text(b, a, text, ha="center", va="center", fontsize="small",
                        color="white" if dark else "black")
        image = ax.imshow(np.clip(grid, -20, 5), cmap="RdBu", norm=norm, aspect="auto")
        ax.set_xticks(range(len(ms)), [f"{m:,}" for m in ms])
        ax.set_yticks(range(len(eps_all)), [f"{e:g}" for e in eps_all])
        ax.set_xlabel("clients per round m")
        ax.set_ylabel("ε per round")
        ax.set_title(setting_label(setting), fontsize="medium")
    flagged = bool(cell_without_guarantee(cells).any())
    fig.suptitle(title or "Gap to non-private at the same m, points of accuracy (ε per round)\n"
                 f"(mean, [{verdict.confidence:.0%} interval], paired by seed where possible, n = pairs or seeds"
                 + ("; 'no ε guarantee': epsilon_spent = ∞" if flagged else "") + ")",
                 fontsize="medium")
    fig.tight_layout()
    if image is not None:
        bar = fig.colorbar(image, ax=list(axes), shrink=0.9, pad=0.02, extend="min")  # arrow: capped
        bar.set_label("gap (points)")
    return _finish(fig, out)
