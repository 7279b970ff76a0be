"""PSNR, SSIM, matching and label recovery: exact checks and an independent SSIM reference."""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import pytest

from ldpsim._src.attacks._metrics import (gaussian_window, label_recovery, match_examples, psnr,
                                          ssim)


def _ssim_reference(x: np.ndarray, y: np.ndarray, L: float = 1.0) -> float:
    """SSIM from the formula of Wang et al. 2004 in NumPy float64, window by window (no
    convolution): 11×11 Gaussian weights, σ = 1.5, valid positions, C1 = (0.01L)²,
    C2 = (0.03L)², population moments."""
    r = np.arange(11, dtype=np.float64) - 5.0
    g = np.exp(-r * r / (2 * 1.5 ** 2))
    w = np.outer(g, g) / np.outer(g, g).sum()
    x, y = np.clip(x.astype(np.float64), 0, L), y.astype(np.float64)
    c1, c2 = (0.01 * L) ** 2, (0.03 * L) ** 2
    vals = []
    for i in range(x.shape[0] - 10):
        for j in range(x.shape[1] - 10):
            a, b = x[i:i + 11, j:j + 11], y[i:i + 11, j:j + 11]
            mx, my = (w * a).sum(), (w * b).sum()
            vx, vy = (w * (a - mx) ** 2).sum(), (w * (b - my) ** 2).sum()
            cxy = (w * (a - mx) * (b - my)).sum()
            vals.append((2 * mx * my + c1) * (2 * cxy + c2)
                        / ((mx * mx + my * my + c1) * (vx + vy + c2)))
    return float(np.mean(vals))


def test_psnr_exact():
    ref = np.full((28, 28), 0.5, np.float32)
    assert float(psnr(ref + 0.1, ref)) == pytest.approx(20.0, abs=1e-4)   # MSE 0.01
    assert float(psnr(ref + 0.01, ref)) == pytest.approx(40.0, abs=1e-3)  # MSE 1e-4
    assert math.isinf(float(psnr(ref, ref)))
    # Clipped to [0, 1] first: 1.5 against 1 is an exact match.
    assert math.isinf(float(psnr(np.full((4, 4), 1.5), np.ones((4, 4)))))


def test_gaussian_window_sums_to_one_and_is_symmetric():
    w = np.asarray(gaussian_window())
    assert w.shape == (11, 11)
    assert w.sum() == pytest.approx(1.0, abs=1e-6)
    np.testing.assert_allclose(w, w.T, atol=0)
    np.testing.assert_allclose(w, w[::-1, ::-1], atol=0)


def test_ssim_identical_is_one():
    x = np.random.default_rng(0).random((28, 28)).astype(np.float32)
    assert float(ssim(x, x)) == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("case", ["noise", "blur", "shift", "inverted", "mnist-like"])
def test_ssim_matches_float64_reference(case):
    rng = np.random.default_rng(1)
    y = np.zeros((28, 28))
    y[6:22, 12:16] = 1.0
    y[6:10, 8:20] = 0.8
    y = np.clip(y + 0.05 * rng.random((28, 28)), 0, 1)
    x = {"noise": y + 0.2 * rng.standard_normal((28, 28)),
         "blur": (y + np.roll(y, 1, 0) + np.roll(y, 1, 1)) / 3,
         "shift": np.roll(y, 2, 1),
         "inverted": 1 - y,
         "mnist-like": rng.random((28, 28))}[case]
    got = float(ssim(jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.float32)))
    want = _ssim_reference(x, y)
    assert got == pytest.approx(want, abs=2e-5), (case, got, want)


def test_ssim_channels_are_averaged():
    rng = np.random.default_rng(2)
    x, y = rng.random((16, 16, 2)), rng.random((16, 16, 2))
    want = np.mean([_ssim_reference(x[..., c], y[..., c]) for c in range(2)])
    assert float(ssim(x, y)) == pytest.approx(want, abs=2e-5)


def test_match_examples_recovers_the_permutation():
    rng = np.random.default_rng(3)
    true = rng.random((5, 28, 28))
    perm = np.array([3, 0, 4, 1, 2])
    recon = np.empty_like(true)
    recon[perm] = true + 0.01 * rng.standard_normal(true.shape)   # recon[perm[i]] ≈ true[i]
    np.testing.assert_array_equal(match_examples(recon, true), perm)


def test_label_recovery_is_a_multiset_overlap():
    assert label_recovery([3], [3]) == 1.0
    assert label_recovery([2], [3]) == 0.0
    assert label_recovery([1, 2, 3, 4], [4, 3, 2, 1]) == 1.0
    assert label_recovery([1, 1, 2, 5], [1, 2, 2, 7]) == 0.5


def test_best_against_all_finds_another_clients_example():
    """psnr_any / ssim_any: a reconstruction equal to the 2nd client's example scores
    inf / 1 although it matches nothing of client 0."""
    from ldpsim._src.attacks._experiment import _best_against_all

    rng = np.random.default_rng(4)
    all_x = rng.random((3, 1, 16, 16, 1)).astype(np.float32)   # n = 3 clients, B = 1
    p, s = _best_against_all(all_x[1], all_x)
    assert math.isinf(p) and s == pytest.approx(1.0, abs=1e-6)
    p0 = float(psnr(all_x[1, 0], all_x[0, 0]))
    assert p0 < 20.0
