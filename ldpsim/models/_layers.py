"""Convolution and pooling written so that ``jax.vmap`` over clients stays fast.

With per-client weights, ``jax.vmap`` turns an XLA convolution into a grouped
convolution (one group per client), which XLA's CPU backend runs poorly, and more
slowly as the number of clients grows (``PERF_NOTES.md``).  The alternatives here
express a 2-D convolution through operations whose batching rule is cheap:

* ``"im2col"``: the ``kh * kw`` shifted windows are taken as *static slices* and
  concatenated into patches ``[N, Ho, Wo, kh*kw*C]``; the convolution is one matmul
  with the ``[kh*kw*C, O]`` kernel.  Under ``vmap`` with per-client kernels it becomes
  a batched matmul (``dot_general`` with a client batch dimension).
* ``"patches"``: the same patches from :func:`jax.lax.conv_general_dilated_patches`.
* ``"taps"``: ``sum_t window_t @ kernel_t`` over the ``kh*kw`` taps, never
  materialising the patches (a good fit when ``C`` is tiny, e.g. grey images).
* ``"xla"``: :func:`jax.lax.conv_general_dilated` (the natural choice on GPU).

All of them compute exactly the same function (cross-correlation, NHWC input, HWIO
kernel, stride 1) up to float rounding.  Max-pooling is written either as a reshape +
max (``"reshape"``) or with :func:`jax.lax.reduce_window` (``"window"``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from ldpsim._checks import check_choice

CONV_IMPLS = ("auto", "im2col", "patches", "taps", "xla")
POOL_IMPLS = ("auto", "reshape", "window")

# Measured with benchmarks/client_formulations.py (vmapped LeNet-5 local updates).
_AUTO_CONV = {"cpu": "im2col"}
_AUTO_POOL = {"cpu": "reshape"}


def resolve_conv_impl(conv_impl: str, backend: str | None = None) -> str:
    """Map ``"auto"`` to the formulation measured fastest on ``backend``."""
    check_choice("conv_impl", conv_impl, CONV_IMPLS)
    if conv_impl != "auto":
        return conv_impl
    backend = backend or jax.default_backend()
    return _AUTO_CONV.get(backend, "xla")


def resolve_pool_impl(pool_impl: str, backend: str | None = None) -> str:
    """Map ``"auto"`` to the pooling formulation measured fastest on ``backend``."""
    check_choice("pool_impl", pool_impl, POOL_IMPLS)
    if pool_impl != "auto":
        return pool_impl
    backend = backend or jax.default_backend()
    return _AUTO_POOL.get(backend, "window")


def _pad_same(x: jax.Array, kh: int, kw: int) -> jax.Array:
    """Zero-pad H and W as XLA's 'SAME' does for stride 1."""
    ph, pw = kh - 1, kw - 1
    return jnp.pad(x, ((0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2), (0, 0)))


def im2col(x: jax.Array, kh: int, kw: int) -> jax.Array:
    """Patches ``[N, Ho, Wo, kh*kw*C]`` of a VALID stride-1 window, feature order (i, j, c).

    The order matches ``kernel.reshape(kh * kw * C, O)`` for an HWIO kernel.
    """
    _, h, w, _ = x.shape
    ho, wo = h - kh + 1, w - kw + 1
    cols = [x[:, i : i + ho, j : j + wo, :] for i in range(kh) for j in range(kw)]
    return jnp.concatenate(cols, axis=-1)


def conv2d(x: jax.Array, kernel: jax.Array, *, padding: str, impl: str) -> jax.Array:
    """Stride-1 2-D cross-correlation of NHWC ``x`` with an HWIO ``kernel``.

    Args:
      x: ``[N, H, W, C]`` input.
      kernel: ``[kh, kw, C, O]`` weights.
      padding: ``"SAME"`` or ``"VALID"``.
      impl: one of ``"im2col"``, ``"patches"``, ``"taps"``, ``"xla"`` (not ``"auto"``).

    Returns:
      ``[N, Ho, Wo, O]``, identical in exact arithmetic for every ``impl``.
    """
    check_choice("padding", padding, ("SAME", "VALID"))
    kh, kw, c, o = kernel.shape
    if impl == "xla":
        return lax.conv_general_dilated(
            x, kernel, (1, 1), padding, dimension_numbers=("NHWC", "HWIO", "NHWC")
        )
    if padding == "SAME":
        x = _pad_same(x, kh, kw)
    n, h, w, _ = x.shape
    ho, wo = h - kh + 1, w - kw + 1
    if impl == "im2col":
        p = im2col(x, kh, kw)
        return jnp.dot(p, kernel.reshape(kh * kw * c, o))
    if impl == "patches":
        p = lax.conv_general_dilated_patches(
            x, (kh, kw), (1, 1), "VALID", dimension_numbers=("NHWC", "OIHW", "NHWC")
        )  # feature order (c, i, j)
        return jnp.dot(p, kernel.transpose(2, 0, 1, 3).reshape(c * kh * kw, o))
    if impl == "taps":
        out = jnp.zeros((n, ho, wo, o), x.dtype)
        for i in range(kh):
            for j in range(kw):
                win = x[:, i : i + ho, j : j + wo, :]
                out = out + (win * kernel[i, j, 0] if c == 1 else jnp.dot(win, kernel[i, j]))
        return out
    raise ValueError(f"conv impl must be one of {CONV_IMPLS[1:]}, got {impl!r}")


def max_pool2x2(x: jax.Array, *, impl: str) -> jax.Array:
    """2x2 max-pool with stride 2 ('VALID': an odd last row/column is dropped)."""
    n, h, w, c = x.shape
    if impl == "window":
        return lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    if impl == "reshape":
        h2, w2 = h // 2, w // 2
        x = x[:, : 2 * h2, : 2 * w2, :]
        return x.reshape(n, h2, 2, w2, 2, c).max(axis=(2, 4))
    raise ValueError(f"pool impl must be one of {POOL_IMPLS[1:]}, got {impl!r}")
