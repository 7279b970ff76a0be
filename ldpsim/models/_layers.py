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
* ``"cnhw"``: channels-first im2col.  The activations are ``[C, N, H, W]``, the patches
  ``[kh*kw*C, N*Ho*Wo]`` are a stack of ``kh*kw`` contiguous static slices, the
  convolution is ``kernel.T [O, K] @ patches [K, N*Ho*Wo]`` (long rows, no grouped op),
  and the patches' transpose (the input cotangent, "col2im") is ``kh*kw`` in-place
  ``.at[].add`` updates (:func:`patches_cnhw`, a ``custom_vjp``): XLA CPU fuses the
  autodiff transpose of the slices (``kh*kw`` pads + adds) into one fusion that cost
  ~1.2 ms per LeNet-5 step, twice the whole in-place version.  A model built on it
  (LeNet-5) transposes its input once and stays channels-first until the dense head;
  :func:`conv2d` with this impl takes and returns NHWC (one transpose each way).
  ``"im2col"`` uses the same in-place col2im as its VJP.

All of them compute exactly the same function (cross-correlation, NHWC input, HWIO
kernel, stride 1) up to float rounding.  Max-pooling is written as a reshape + max
(``"reshape"``), with :func:`jax.lax.reduce_window` (``"window"``), or as the pairwise
maximum of the four strided 2x2 phases (``"slices"``).  Measurements:
``benchmarks/client_formulations.py``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

from ldpsim._checks import check_choice

CONV_IMPLS = ("auto", "im2col", "patches", "taps", "xla", "cnhw")
POOL_IMPLS = ("auto", "reshape", "window", "slices")

# Measured with benchmarks/client_formulations.py (LeNet-5 local updates, 2-core CPU,
# jax 0.10.2), one client at a time (chunk 1, vmapped as the engine does), CPU-ms per
# update: im2col 3.8 (4.1 before its in-place col2im), cnhw 4.4, xla 23; pooling
# "reshape" beats "slices" and "window" there.
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


def _im2col(x: jax.Array, kh: int, kw: int) -> jax.Array:
    _, h, w, _ = x.shape
    ho, wo = h - kh + 1, w - kw + 1
    cols = [x[:, i : i + ho, j : j + wo, :] for i in range(kh) for j in range(kw)]
    return jnp.concatenate(cols, axis=-1)


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2))
def im2col(x: jax.Array, kh: int, kw: int) -> jax.Array:
    """Patches ``[N, Ho, Wo, kh*kw*C]`` of a VALID stride-1 window, feature order (i, j, c).

    The order matches ``kernel.reshape(kh * kw * C, O)`` for an HWIO kernel.  The VJP
    (col2im) adds each window's cotangent in place into a zero input (``kh*kw``
    ``.at[].add``), which XLA CPU runs faster than autodiff's transpose of the slices
    (``kh*kw`` pads + adds fused with the pooling gradient; see the module docstring).
    """
    return _im2col(x, kh, kw)


def _im2col_fwd(x, kh, kw):
    return _im2col(x, kh, kw), jnp.zeros((0,) + x.shape, x.dtype)  # only the shape


def _im2col_bwd(kh, kw, res, g):
    n, h, w, c = res.shape[1:]
    ho, wo = h - kh + 1, w - kw + 1
    g = g.reshape(n, ho, wo, kh * kw, c)
    dx = jnp.zeros((n, h, w, c), g.dtype)
    for i in range(kh):
        for j in range(kw):
            dx = dx.at[:, i : i + ho, j : j + wo, :].add(g[:, :, :, i * kw + j, :])
    return (dx,)


im2col.defvjp(_im2col_fwd, _im2col_bwd)


def _patches_cnhw(x: jax.Array, kh: int, kw: int) -> jax.Array:
    c, n, h, w = x.shape
    ho, wo = h - kh + 1, w - kw + 1
    cols = [x[:, :, i : i + ho, j : j + wo] for i in range(kh) for j in range(kw)]
    return jnp.stack(cols, 0).reshape(kh * kw * c, n, ho, wo)


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2))
def patches_cnhw(x: jax.Array, kh: int, kw: int) -> jax.Array:
    """Channels-first VALID stride-1 patches: ``[C, N, H, W] -> [kh*kw*C, N, Ho, Wo]``.

    Feature order (i, j, c), matching ``kernel.reshape(kh * kw * C, O)`` for an HWIO
    kernel.  The VJP (col2im) adds each window's cotangent in place into a zero input.
    """
    return _patches_cnhw(x, kh, kw)


def _patches_cnhw_fwd(x, kh, kw):
    return _patches_cnhw(x, kh, kw), jnp.zeros((0,) + x.shape, x.dtype)


def _patches_cnhw_bwd(kh, kw, res, g):
    shape = res.shape[1:]
    c, n, h, w = shape
    ho, wo = h - kh + 1, w - kw + 1
    g = g.reshape(kh, kw, c, n, ho, wo)
    dx = jnp.zeros(shape, g.dtype)
    for i in range(kh):
        for j in range(kw):
            dx = dx.at[:, :, i : i + ho, j : j + wo].add(g[i, j])
    return (dx,)


patches_cnhw.defvjp(_patches_cnhw_fwd, _patches_cnhw_bwd)


def conv2d_cnhw(x: jax.Array, kernel: jax.Array, *, padding: str) -> jax.Array:
    """Stride-1 cross-correlation of channels-first ``x [C, N, H, W]`` with HWIO ``kernel``.

    Returns ``[O, N, Ho, Wo]``; the same function as :func:`conv2d` in another layout.
    """
    check_choice("padding", padding, ("SAME", "VALID"))
    kh, kw, c, o = kernel.shape
    if padding == "SAME":
        ph, pw = kh - 1, kw - 1
        x = jnp.pad(x, ((0, 0), (0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2)))
    p = patches_cnhw(x, kh, kw)
    _, n, ho, wo = p.shape
    y = kernel.reshape(kh * kw * c, o).T @ p.reshape(kh * kw * c, n * ho * wo)
    return y.reshape(o, n, ho, wo)


def conv2d(x: jax.Array, kernel: jax.Array, *, padding: str, impl: str) -> jax.Array:
    """Stride-1 2-D cross-correlation of NHWC ``x`` with an HWIO ``kernel``.

    Args:
      x: ``[N, H, W, C]`` input.
      kernel: ``[kh, kw, C, O]`` weights.
      padding: ``"SAME"`` or ``"VALID"``.
      impl: one of ``"im2col"``, ``"patches"``, ``"taps"``, ``"xla"``, ``"cnhw"`` (not
        ``"auto"``).

    Returns:
      ``[N, Ho, Wo, O]``, identical in exact arithmetic for every ``impl``.
    """
    check_choice("padding", padding, ("SAME", "VALID"))
    kh, kw, c, o = kernel.shape
    if impl == "xla":
        return lax.conv_general_dilated(
            x, kernel, (1, 1), padding, dimension_numbers=("NHWC", "HWIO", "NHWC")
        )
    if impl == "cnhw":
        y = conv2d_cnhw(jnp.transpose(x, (3, 0, 1, 2)), kernel, padding=padding)
        return jnp.transpose(y, (1, 2, 3, 0))
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


def max_pool2x2(x: jax.Array, *, impl: str, spatial: tuple[int, int] = (1, 2)) -> jax.Array:
    """2x2 max-pool with stride 2 ('VALID': an odd last row/column is dropped).

    ``spatial`` names the (H, W) axes of ``x``: ``(1, 2)`` for NHWC, ``(2, 3)`` for CNHW.
    """
    ha, wa = spatial
    h2, w2 = x.shape[ha] // 2, x.shape[wa] // 2
    if impl == "window":
        win = tuple(2 if a in spatial else 1 for a in range(x.ndim))
        return lax.reduce_window(x, -jnp.inf, lax.max, win, win, "VALID")
    x = lax.slice_in_dim(lax.slice_in_dim(x, 0, 2 * h2, axis=ha), 0, 2 * w2, axis=wa)
    if impl == "reshape":
        shape = list(x.shape)
        shape[wa: wa + 1] = [w2, 2]
        shape[ha: ha + 1] = [h2, 2]
        return x.reshape(shape).max(axis=(ha + 1, wa + 2))
    if impl == "slices":
        phase = lambda i, j: lax.slice_in_dim(lax.slice_in_dim(  # noqa: E731
            x, i, 2 * h2, 2, axis=ha), j, 2 * w2, 2, axis=wa)
        return jnp.maximum(jnp.maximum(phase(0, 0), phase(0, 1)),
                           jnp.maximum(phase(1, 0), phase(1, 1)))
    raise ValueError(f"pool impl must be one of {POOL_IMPLS[1:]}, got {impl!r}")
