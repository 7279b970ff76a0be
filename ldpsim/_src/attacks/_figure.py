"""A figure of example reconstructions per ε (matplotlib, host side)."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["reconstruction_figure"]


def _eps_label(eps: float) -> str:
    return "ε = ∞" if math.isinf(eps) else f"ε = {eps:g}"


def _psnr(recon: np.ndarray, true: np.ndarray) -> float:
    """Mean over the examples of the PSNR (dB, data range 1) of the reconstruction, clipped
    to [0, 1], against its true example (the CSV's ``psnr`` column)."""
    x = np.clip(np.asarray(recon, np.float64), 0.0, 1.0).reshape(len(recon), -1)
    mse = np.mean((x - np.asarray(true, np.float64).reshape(len(true), -1)) ** 2, axis=1)
    with np.errstate(divide="ignore"):
        return float(np.mean(10.0 * np.log10(1.0 / mse)))


def reconstruction_figure(kept: dict, path=None, *, title: str | None = None):
    """Grid of reconstructions: one row per (mechanism, B, n, seed), the true images first,
    then one column per ε (each cell shows the B examples side by side, with their mean
    PSNR against the true examples under it).

    Args:
        kept: ``{(mechanism, B, n, ε, seed): (true [B, H, W(, 1)], recon [B, H, W(, 1)])}``
            as returned by :func:`ldpsim.attacks.run_grid`.
        path: where to save a PNG (optional).

    Returns:
        The matplotlib figure.
    """
    import matplotlib

    if path is not None:
        matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    rows = sorted({(m, b, n, s) for (m, b, n, _, s) in kept}, key=str)
    epsilons = sorted({e for (_, _, _, e, _) in kept}, key=lambda e: -e)
    # a row of B examples side by side is a strip B times as wide as it is high: its row
    # gets that height (with room for its label), so no row is a thin strip in a tall cell
    heights = [max(1.0 / int(b), 0.4) for (_, b, _, _) in rows]
    fig, axes = plt.subplots(len(rows), len(epsilons) + 1, squeeze=False,
                             figsize=(1.6 * (len(epsilons) + 1), 1.7 * sum(heights) + 0.6),
                             gridspec_kw={"height_ratios": heights})
    strip = lambda imgs: np.concatenate([np.squeeze(im) for im in imgs], axis=1)  # noqa: E731
    for i, (m, b, n, s) in enumerate(rows):
        for j, eps in enumerate([None] + epsilons):
            ax = axes[i, j]
            ax.set_xticks([])
            ax.set_yticks([])
            item = kept.get((m, b, n, epsilons[0] if eps is None else eps, s))
            if item is None:
                ax.axis("off")
                continue
            ax.imshow(strip(item[0] if eps is None else item[1]), cmap="gray", vmin=0, vmax=1)
            if eps is not None:
                ax.set_xlabel(f"PSNR {_psnr(item[1], item[0]):.1f} dB", fontsize=7, labelpad=2)
            if i == 0:
                ax.set_title("true" if eps is None else _eps_label(eps), fontsize=9)
            if j == 0:
                ax.set_ylabel(f"{m}\nB={b} n={n}", fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig
