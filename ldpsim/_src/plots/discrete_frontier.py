"""The figure of the secure-aggregation frontier (``ldpsim frontier --secagg``): MSE of the
decoded mean against the bit-width, one curve per (mechanism, ε), the continuous distributed
Gaussian at the same ε as a horizontal reference, the communication on the top axis.

It reads a table (a DataFrame or the CSV that ``ldpsim frontier --secagg --out`` writes); it
computes nothing, so it needs no JAX.
"""

from __future__ import annotations

from ldpsim._src._checks import LdpsimError
from ldpsim._src.plots.frontier import figure_legend

__all__ = ["plot_discrete_frontier"]

_STYLE = {"ddg": ("-", "o"), "skellam": ("--", "s")}


def plot_discrete_frontier(table, out=None):
    """MSE of the decoded mean against bits (log y), one panel per (d, n): the exact theory
    (lines; ddg solid, skellam dashed), the Monte-Carlo where measured (hollow markers, ±2
    standard errors), and the continuous distributed Gaussian at the same ε (dotted); one
    colour per ε. The top axis is one client's message in KiB (``b·D`` bits). Returns the
    matplotlib Figure (saved to ``out`` when given)."""
    import matplotlib.pyplot as plt
    import numpy as np
    import pandas as pd

    df = pd.read_csv(table) if not isinstance(table, pd.DataFrame) else table
    if df.empty:
        raise LdpsimError("no secure-aggregation frontier rows to plot")
    panels = sorted({(int(d), int(n)) for d, n in zip(df["dim"], df["clients"])})
    n_clients = len({n for _, n in panels})
    cols = n_clients if n_clients <= 3 else min(3, len(panels))   # one row per d when it fits
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.0 * cols, 4.2 * rows), squeeze=False)
    epsilons = sorted(set(float(e) for e in df["epsilon"]))
    cmap = plt.get_cmap("viridis")
    colour = {e: cmap(0.1 + 0.8 * i / max(1, len(epsilons) - 1)) for i, e in enumerate(epsilons)}
    for ax, (d, n) in zip(axes.flat, panels):
        g = df[(df["dim"] == d) & (df["clients"] == n)]
        for e in epsilons:
            ge = g[g["epsilon"] == e]
            if ge.empty:
                continue
            for m in sorted(set(ge["mechanism"])):
                s = ge[ge["mechanism"] == m].sort_values("bits")
                ls, mk = _STYLE.get(m, ("-.", "^"))
                ax.plot(s["bits"], s["mse_theory"], ls, marker=mk, ms=3, color=colour[e],
                        label=f"{m}, ε = {e:g}")
                meas = s[np.isfinite(s["mse"].astype(float))]
                if not meas.empty:
                    se = meas["mse_se"].astype(float).fillna(0.0).to_numpy()
                    ax.errorbar(meas["bits"], meas["mse"], yerr=2 * se, fmt=mk, ms=7,
                                mfc="none", color=colour[e], lw=1)
            ax.axhline(float(ge["mse_continuous"].iloc[0]), ls=":", lw=1.5, color=colour[e],
                       label=f"continuous Gaussian, ε = {e:g}")
        ax.set_yscale("log")
        bits = sorted(set(int(b) for b in g["bits"]))
        ax.set_xticks(bits)
        ax.set_xlabel("bits b per coordinate")
        ax.set_ylabel("MSE of the decoded mean")
        big = int(g["padded_dim"].iloc[0])
        ax.set_title(f"d = {d:,} (D = {big:,}), n = {n:,}")
        kib = big / 8 / 1024
        top = ax.secondary_xaxis("top", functions=(lambda b, k=kib: b * k, lambda x, k=kib: x / k))
        top.set_xlabel("KiB per client (b·D bits)")
        ax.grid(True, which="major", alpha=0.3)
    handles, ncol = figure_legend(fig, axes, len(panels), 3)
    fig.suptitle("Secure-aggregation frontier: exact MSE (lines), Monte-Carlo (hollow, ±2 SE), "
                 "continuous Gaussian at the same ε (dotted)", fontsize="medium")
    legend_rows = -(-len(handles) // max(1, ncol))
    fig.tight_layout(rect=(0, 0.04 * legend_rows / rows, 1, 1))
    if out is not None:
        fig.savefig(out, dpi=120, bbox_inches="tight")
    return fig
