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


def test_each_reconstruction_shows_its_mean_psnr_against_the_true_examples():
    true = np.zeros((2, 28, 28))
    # MSE 0.01 and 0.0001:
    # PSNR 20 and 40 dB, mean 30
    recon = np.stack([np.full((28, 28), 0.1), np.full((28, 28), 0.01)])
    kept = {("gaussian", 2, 1, 8.0, 0): (true, recon)}
    fig = reconstruction_figure(kept)
    assert fig.axes[0].get_xlabel() == ""                    # the true images: no score
    assert fig.axes[1].get_xlabel() == "PSNR 30.0 dB"
