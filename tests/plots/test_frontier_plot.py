"""The frontier figure's ε tick labels: the first and last always, none overlapping."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

from ldpsim._src.plots.frontier import _thinned_labels  # noqa: E402


def test_a_sparse_grid_keeps_every_label():
    eps = [0.25, 0.5, 1, 2, 4, 8, 16]
    assert _thinned_labels(eps) == ["0.25", "0.5", "1", "2", "4", "8", "16"]
    assert _thinned_labels([4.0]) == ["4"]


def test_a_dense_grid_keeps_the_ends_and_spaces_the_rest():
    eps = list(range(1, 16))
    labels = _thinned_labels(eps)
    assert labels[0] == "1" and labels[-1] == "15"
    kept = [e for e, lab in zip(eps, labels) if lab]
    gap = math.log10(15) / 12
    assert all(math.log10(b / a) >= gap for a, b in zip(kept, kept[1:]))
    assert 5 <= len(kept) < len(eps)
