"""The figure of the mechanism frontier (:func:`ldpsim.privacy.frontier`): MSE of the decoded
mean against ε, measured and exact theory, beside the order of the minimax lower bound.

It reads a frontier table (a DataFrame or the CSV that ``ldpsim frontier --out`` writes) and
the registry's names and colours; it computes nothing, so it needs no JAX.
"""

from __future__ import annotations

from ldpsim._src._checks import LdpsimError
from ldpsim._src.privacy import registry

__all__ = ["COLORS", "VECTOR_MECHANISMS", "plot_frontier"]

#: One colour per mechanism (fixed, so every figure reads the same; the registry's, at import).
COLORS = {s.name: s.colour for s in registry.RANDOMIZERS if s.colour is not None}
#: The legend's name of each mechanism (the registry's label).
LABELS = {s.name: s.label for s in registry.RANDOMIZERS}
#: The mechanisms drawn, in this order (the frontier's: :data:`ldpsim.privacy.frontier`'s rows).
VECTOR_MECHANISMS = registry.randomizer_names(frontier=True)


#: Markers of a mechanism's series at several k (the first is every mechanism's own).
_MARKERS = ("o", "s", "^", "v", "D", "P", "X")


def _thinned_labels(eps: list) -> list[str]:
    """Tick labels of the ε values on a log axis: the first and the last, and between them
    each value at least 1/12 of the axis' decades from the previous label (blank otherwise,
    so labels never overlap)."""
    import math

    span = math.log10(max(eps) / min(eps)) if len(eps) > 1 else 1.0
    gap, kept = span / 12, [0]
    for i in range(1, len(eps)):
        if math.log10(eps[i] / eps[kept[-1]]) >= gap:
            kept.append(i)
    if kept[-1] != len(eps) - 1:   # the last value always: it replaces a label too close
        if math.log10(eps[-1] / eps[kept[-1]]) < gap and len(kept) > 1:
            kept.pop()
        kept.append(len(eps) - 1)
    return [f"{e:g}" if i in kept else "" for i, e in enumerate(eps)]


def plot_frontier(table, out=None):
    """MSE of the decoded mean against ε (log-log), one panel per (d, n): measured (markers,
    ±2 standard errors), exact theory (dashed), and the order d/(n·min(ε, ε²)) of the minimax
    lower bound with constant 1 (black dotted). ``table``: a frontier DataFrame or CSV path.
    Returns the matplotlib Figure (saved to ``out`` when given)."""
    import matplotlib.pyplot as plt
    import pandas as pd
    from matplotlib.ticker import NullFormatter

    df = pd.read_csv(table) if not isinstance(table, pd.DataFrame) else table
    inputs_common = "inputs" not in df or set(df["inputs"]) == {"common"}
    if df.empty:
        raise LdpsimError("no frontier rows to plot")
    panels = sorted({(int(d), int(n)) for d, n in zip(df["dim"], df["clients"])})
    n_clients = len({n for _, n in panels})
    cols = n_clients if n_clients <= 4 else min(3, len(panels))   # one row per d when it fits
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.8 * rows), squeeze=False)
    for ax, (d, n) in zip(axes.flat, panels):
        g = df[(df["dim"] == d) & (df["clients"] == n)]
        for m in [m for m in VECTOR_MECHANISMS if m in set(g["mechanism"])]:
            rows_m = g[g["mechanism"] == m]
            # ProjUnit at several k (the projection_dim column): one series per k, marked
            ks = sorted(rows_m["projection_dim"].dropna().unique()) if "projection_dim" in g else []
            series = [(None, rows_m)] if len(ks) < 2 else \
                [(int(k), rows_m[rows_m["projection_dim"] == k]) for k in ks]
            for i, (k, s) in enumerate(series):
                s = s.sort_values("epsilon")
                c = COLORS.get(m)
                se = s["mse_se"].fillna(0.0).to_numpy()
                lo = s["mse"].to_numpy() - 2 * se
                yerr = [s["mse"].to_numpy() - lo.clip(min=s["mse"].to_numpy() * 1e-3), 2 * se]
                label = LABELS.get(m, m) + ("" if k is None else f" (k = {k:,})")
                ax.errorbar(s["epsilon"], s["mse"], yerr=yerr, fmt=_MARKERS[i % len(_MARKERS)],
                            ms=4, color=c, label=label)
                ax.plot(s["epsilon"], s["mse_theory"], "--" if i == 0 else "-.", color=c, lw=1)
        lb = g.drop_duplicates("epsilon").sort_values("epsilon")
        ax.plot(lb["epsilon"], lb["lower_bound"], ":", color="black", lw=1.5,
                label="d/(n·min(ε,ε²)), const. 1")
        ax.axhline(1.0, color="gray", lw=0.8, alpha=0.6,
                   label="estimate 0 (error ‖x̄‖² = 1)" if inputs_common else None)
        ax.set_xscale("log")
        ax.set_yscale("log")
        eps = sorted(set(g["epsilon"]))
        ax.set_xticks(eps)
        ax.set_xticklabels(_thinned_labels(eps))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_title(f"d = {d:,}, n = {n:,}")
        ax.set_xlabel("local ε")
        ax.set_ylabel("MSE of the decoded mean")
        ax.grid(True, which="major", alpha=0.3)
    # one narrow panel: fewer legend columns
    handles, ncol = figure_legend(fig, axes, len(panels), 4 if cols > 1 else 2)
    sep = " " if cols > 1 else "\n"
    fig.suptitle(f"Mechanism frontier: measured (markers ±2 SE),{sep}exact theory (dashed), "
                 "lower-bound order (dotted)", fontsize="medium")
    legend_rows = -(-len(handles) // max(1, ncol))
    fig.tight_layout(rect=(0, 0.045 * legend_rows / rows, 1, 1))
    if out is not None:   # "tight": the saved canvas holds the title and the legend whole
        fig.savefig(out, dpi=120, bbox_inches="tight")
    return fig


def figure_legend(fig, axes, used: int, max_cols: int) -> tuple[dict, int]:
    """Hide the grid's unused panels and draw one legend under the figure from the labels of
    the ``used`` panels (each label once). Returns ``(handles by label, legend columns)``."""
    for ax in list(axes.flat)[used:]:
        ax.set_visible(False)
    handles: dict = {}
    for ax in axes.flat[:used]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    ncol = max(1, min(len(handles), max_cols))
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=ncol,
               fontsize="small", frameon=False)
    return handles, ncol
