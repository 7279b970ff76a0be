"""Image reconstruction metrics: PSNR, SSIM, label recovery, with the best example matching.

Images are compared in [0, 1] (a reconstruction is clipped to that range first, as an
attacker displaying it would); ``data_range`` L = 1.

* PSNR = ``10·log10(L² / MSE)`` (``inf`` for identical images).
* SSIM (Wang, Bovik, Sheikh & Simoncelli, "Image quality assessment: from error visibility
  to structural similarity", IEEE TIP 13(4), 2004): local statistics under an 11×11
  Gaussian window of σ = 1.5 (normalised to sum 1), over every window position that lies
  inside the image ("valid"; no padding), ``C1 = (0.01 L)²``, ``C2 = (0.03 L)²``,

      ``SSIM = mean over windows of (2μxμy + C1)(2σxy + C2) / ((μx² + μy² + C1)(σx² + σy² + C2))``

  with ``σ² = E_w[x²] − μ²`` and ``σxy = E_w[xy] − μxμy`` (population moments, as in the
  paper), averaged over channels.
* A client's B reconstructions come in no particular order, so they are matched to the B
  true examples by the assignment that maximises the summed PSNR (the Hungarian method,
  ``scipy.optimize.linear_sum_assignment``, on the host); the label recovery rate is the
  size of the multiset intersection of recovered and true labels over B.
"""

from __future__ import annotations

from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["SSIM_SIGMA", "SSIM_WINDOW", "gaussian_window", "label_recovery", "match_examples",
           "psnr", "ssim"]

SSIM_WINDOW = 11
SSIM_SIGMA = 1.5


def gaussian_window(size: int = SSIM_WINDOW, sigma: float = SSIM_SIGMA) -> jax.Array:
    """The normalised 2-D Gaussian window ``[size, size]`` (outer product of 1-D ones)."""
    r = jnp.arange(size, dtype=jnp.float32) - (size - 1) / 2
    g = jnp.exp(-(r * r) / (2 * sigma * sigma))
    g = g / jnp.sum(g)
    return jnp.outer(g, g)


def _as_hwc(x: jax.Array) -> jax.Array:
    x = jnp.asarray(x, jnp.float32)
    return x[..., None] if x.ndim == 2 else x


def psnr(x: jax.Array, ref: jax.Array, data_range: float = 1.0) -> jax.Array:
    """PSNR in dB of ``x`` (clipped to [0, data_range]) against ``ref``; one image
    ``[H, W]`` or ``[H, W, C]`` (vmap for batches)."""
    x = jnp.clip(_as_hwc(x), 0.0, data_range)
    mse = jnp.mean(jnp.square(x - _as_hwc(ref)))
    return 10.0 * jnp.log10(data_range ** 2 / mse)


def _filter(img: jax.Array, window: jax.Array) -> jax.Array:
    """Valid 2-D correlation of every channel of ``img [H, W, C]`` with ``window``."""
    x = jnp.moveaxis(img, -1, 0)[:, None]                 # [C, 1, H, W]
    y = jax.lax.conv_general_dilated(x, window[None, None], (1, 1), "VALID",
                                     precision=jax.lax.Precision.HIGHEST)
    return y[:, 0]                                        # [C, H', W']


def ssim(x: jax.Array, ref: jax.Array, data_range: float = 1.0) -> jax.Array:
    """SSIM of ``x`` (clipped to [0, data_range]) against ``ref`` (Wang et al. 2004, see the
    module docstring); one image ``[H, W]`` or ``[H, W, C]`` with H, W ≥ 11."""
    x = jnp.clip(_as_hwc(x), 0.0, data_range)
    y = _as_hwc(ref)
    w = gaussian_window()
    mx, my = _filter(x, w), _filter(y, w)
    sxx = _filter(x * x, w) - mx * mx
    syy = _filter(y * y, w) - my * my
    sxy = _filter(x * y, w) - mx * my
    c1, c2 = (0.01 * data_range) ** 2, (0.03 * data_range) ** 2
    num = (2 * mx * my + c1) * (2 * sxy + c2)
    den = (mx * mx + my * my + c1) * (sxx + syy + c2)
    return jnp.mean(num / den)


def match_examples(recon: np.ndarray, true: np.ndarray) -> np.ndarray:
    """The permutation ``p`` (``recon[p[i]]`` ↔ ``true[i]``) maximising the summed PSNR of
    B reconstructions against B true images (host side)."""
    from scipy.optimize import linear_sum_assignment

    recon = np.clip(np.asarray(recon, np.float64), 0.0, 1.0).reshape(len(recon), -1)
    true = np.asarray(true, np.float64).reshape(len(true), -1)
    mse = ((true[:, None, :] - recon[None, :, :]) ** 2).mean(-1)
    cost = np.log10(np.maximum(mse, 1e-30))   # −PSNR/10 up to a constant
    rows, cols = linear_sum_assignment(cost)
    return cols[np.argsort(rows)]


def label_recovery(recovered: np.ndarray, true: np.ndarray) -> float:
    """Fraction of the B true labels recovered: ``|multiset(recovered) ∩ multiset(true)| / B``."""
    rec, tru = Counter(np.asarray(recovered).tolist()), Counter(np.asarray(true).tolist())
    return sum((rec & tru).values()) / max(len(np.asarray(true)), 1)
