"""The reconstruction figure's rows: a row of B examples side by side gets a height to match."""

from __future__ import annotations

import numpy as np

from ldpsim._src.attacks._figure import reconstruction_figure


def test_rows_of_several_examples_are_shorter_not_thin_strips_in_tall_cells():
    one = (np.zeros((1, 28, 28)), np.zeros((1, 28, 28)))
    four = (np.zeros((4, 28, 28)), np.zeros((4, 28, 28)))
    kept = {("gaussian", 1, 1, float("inf"), 0): one, ("gaussian", 4, 1, float("inf"), 0): four}
    fig = reconstruction_figure(kept)
    heights = fig.axes[0].get_gridspec().get_height_ratios()
    assert heights == [1.0, 0.4]   # B = 1: a square; B = 4: 1/4, with room for its label
