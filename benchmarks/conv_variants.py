"""Every LeNet-5 convolution and max-pooling formulation ldpsim has measured, and their benchmark.

``ldpsim.models`` keeps three formulations (``ldpsim/_src/models/_layers.py``): ``"xla"``
(``lax.conv_general_dilated`` + ``lax.reduce_window``: accelerators, and the reference),
``"chwn"`` (the CPU default: batch-innermost activations, see below) and ``"mixed"``
(the CPU default before it: conv1 channels-first patches, conv2 im2col, reshape-max
pooling).
The others were measured slower and live here, self-contained (nothing private from
ldpsim is imported), because *why* they lose is worth knowing when a backend, a model
or jax changes:

With per-client weights, ``jax.vmap`` turns an XLA convolution into a grouped
convolution (one group per client), which XLA's CPU backend runs poorly, and more
slowly as the number of clients grows.  The alternatives express a stride-1 2-D
convolution (NHWC input, HWIO kernel) through operations whose batching rule is cheap:

* ``"im2col"``: the ``kh*kw`` shifted windows taken as static slices and concatenated
  into patches ``[N, Ho, Wo, kh*kw*C]``; the convolution is one matmul with the
  ``[kh*kw*C, O]`` kernel (under ``vmap``: a batched ``dot_general``).  Its VJP (col2im)
  is ``kh*kw`` in-place ``.at[].add`` into a zero input (a ``custom_vjp``).
* ``"im2col_autodiff"``: the same patches, differentiated by autodiff: XLA CPU fuses the
  transpose of the slices (``kh*kw`` pads + adds) with the pooling gradient into one
  fusion that cost ~1.2 ms per LeNet-5 client step, twice the in-place col2im.
* ``"patches"``: the patches from :func:`jax.lax.conv_general_dilated_patches`
  (feature order (c, i, j)).
* ``"taps"``: ``sum_t window_t @ kernel_t`` over the ``kh*kw`` taps, never
  materialising the patches (meant for tiny ``C``, e.g. grey images).
* ``"cnhw"``: channels-first im2col: activations ``[C, N, H, W]``, patches
  ``[kh*kw*C, N*Ho*Wo]`` a stack of contiguous static slices, the convolution
  ``kernel.T [O, K] @ patches [K, N*Ho*Wo]`` (long rows).  As a whole-network layout
  (LeNet-5 transposes its input once and stays channels-first until the dense head).
* ``"mixed"``: conv1 ``"cnhw"`` (NHWC in and out, one transpose each way), conv2
  ``"im2col"`` -- what ``ldpsim.models`` ran on CPU before ``"chwn"``.
* ``"xla"``: :func:`jax.lax.conv_general_dilated`.
* ``"chwn"`` (kept, ``ldpsim.models``) and the ``"chwn_*"`` variants here:
  batch-innermost activations ``[C, H, W, B]`` (cuda-convnet's layout) from the input
  to the dense head: one transpose in (``[B, 28, 28, 1] -> [1, 28, 28, B]``) and one
  out before the flatten (NHWC order, so the params are unchanged).  With B = 16 a
  batch row is one 512-bit vector, windows are static slices with contiguous runs of
  ``W*B`` floats, pooling keeps B innermost.  In this file (:func:`conv2d_chwn`):
  ``"chwn_mm"``: both convolutions ``kernel.T [O, kh*kw*C] @ patches [kh*kw*C,
  Ho*Wo*B]``, autodiff; ``"chwn_col2im"``: the same, conv2's patches with an in-place
  col2im VJP (:func:`patches_chwn`); ``"chwn_taps"``: both ``sum_t kernel_t^T @
  window_t`` (conv1: 25 broadcast multiply-adds, no patch matrix); ``"chwn_taps_mm"``:
  conv1 taps, conv2 mm; ``"chwn_red"``: conv1 with a hand VJP whose kernel gradient is
  a dot batched over the B lanes; ``"chwn_kconv"`` / ``"chwn_kconv_taps"``: conv1
  (mm / taps forward) with a hand VJP whose kernel gradient is one XLA convolution
  (``x`` as NHWC with N = C and B features, by the cotangent as an HWIO kernel),
  conv2 col2im; ``"chwn_kkt"``: both convolutions taps + that VJP.  The kept
  ``"chwn"`` is conv1 taps and conv2 mm, both with the convolution kernel gradient
  (and in-place col2im input gradient), for B a multiple of 16; for other B it falls
  back to patches and the dot (that chwn, with the taps forward, is ``"chwn_kept_taps"``;
  ``"chwn_kept_mm"``: conv1's forward the patch matmul; ``"chwn_kept"``: ldpsim's, conv1's
  forward one XLA convolution).  Pool ``"hand"``: relu + pool with a hand VJP
  (:func:`relu_pool_chwn`, first-maximum routing as ``reduce_window``);
  ``"hand_masks"`` / ``"hand_bits"`` / ``"phases"`` (kept): tie-splitting as JAX's
  reshape + max (below).

Max-pooling 2x2 / stride 2: ``"reshape"`` (reshape + max, kept for CPU), ``"window"``
(:func:`jax.lax.reduce_window`, kept), ``"slices"`` (pairwise maximum of the four
strided 2x2 phases).

Measured (benchmarks/client_formulations.py, whole LeNet-5 local training, 32 examples,
batch 16, 2 SGD steps, one client per scan step as the engine runs on CPU):
  * 2-core CPU shared (load ~8), jax 0.10.2, m = 200, CPU-ms per client update:
    im2col 3.8 (4.1 as im2col_autodiff), cnhw 4.4, xla 23.
  * quiet 2-core CPU, m = 128, median of 7, client-updates/s: mixed 441 (435 in another
    run), im2col 356 (345), cnhw 269; with mixed convolutions, pooling reshape 435,
    slices 377, window 358.
  * layer by layer (this file, ``--layers``, same machine): conv1's forward + kernel
    gradient 273 us per client step as cnhw against 465 as im2col; conv2 237 against 244.
  * patches and taps were measured slower than im2col when they were introduced (those
    figures were not kept).  This file, 2-core CPU under load ~7 (so only the ranking
    within a row means much), jax 0.10.2, m = 16, median of 3, us per client step:
    conv1 (kernel grad): cnhw 835, im2col_autodiff 1173, im2col 1361, patches 3194,
    xla 3680, taps 6469; conv2 (input + kernel grad): cnhw 1112, im2col 1341,
    taps 2021, im2col_autodiff 2110, xla 12353, patches 15145; relu + pool + grad:
    slices 696, reshape 909, window 1516.  A layer alone is not the model: inside the
    whole LeNet-5 step XLA fuses across layers, and the policy in ldpsim.models
    follows the whole-model figures above.

chwn:
  * one core (``taskset -c 0``), B = 16: mixed 2.86-2.92, chwn 2.01-2.03 (1.42x);
    variants (against mixed 2.91 / 2.92 in their runs): chwn_kkt 3.07, chwn_kconv_taps
    2.23-2.25, chwn_kconv 2.51, chwn_col2im 2.57-2.62, chwn_red 2.70 (2.92 as an
    elementwise-product reduction), chwn_mm 2.89, chwn_col2im/hand 2.97,
    chwn_taps_mm 3.76, chwn_taps 5.36; chwn_kconv_taps/hand 10.8 (!).
    B = 32: mixed 5.58, chwn 4.75 (1.17x); 24: 4.25 / 3.77; 10: 1.78 / 1.58 (1.13x; with
    the taps and the convolution gradient at B = 10: 3.04); 8: 1.44 / 1.30.
    Chunk 8 (map8): mixed 4.70, chwn 3.79.  Other poolings with the kept convolutions
    (``"chwn_kept"`` = ldpsim's conv2d_chwn here): reshape 2.03, window 2.78, and
    pathological slices 13.0 and hand 11.3 (also 11.3 behind an optimization barrier).
    XLA fuses conv1's 25-tap forward into each of its three consumers (relu + pool
    forward, the pool's tie mask, relu's backward select) and recomputes it there;
    materialising it once (an optimization barrier on the taps output) changed nothing
    (2.02 against 2.01).
  * both cores (XLA's intra-op threads), updates/s: B = 16 mixed 338, chwn 479 (1.42x;
    CPU-ms 4.24 / 3.26); B = 32 192 / 229; B = 10 (before the fallback) 410 / 451.
  Why (per-thunk profile, one core, 2 local steps, before the convolution kernel
  gradient): the largest single cost in mixed and chwn_col2im alike was conv1's kernel
  gradient, a ``[6, 12544] x [25, 12544]^T`` dot (K = Ho*Wo*B, a [6, 25] output) at
  ~15 GFLOP/s: ~570 us of a ~2,400 us client.  The layout alone saved ~10 % (conv2's
  patches concatenated along the leading axis, not the minor one: 295 -> 183 us;
  pooling/ReLU 594 -> 464; conv1's forward 294 -> 231); the convolution kernel gradient
  (which only the B-innermost layout allows without a transpose: ``[1, H, W, B]`` *is*
  an NHWC image with B channels) gave the rest.  The taps forms under autodiff lose
  because their kernel gradient is 25 (150) separate reductions over (H, W, B); the
  hand relu + pool VJP loses as the NHWC one did (XLA fuses the autodiff one with its
  neighbours).

relu + pool:
  * Why the hand relu + pool VJPs were pathological (11-15 ms; "slices" too): XLA's CPU
    fusion recomputes an elementwise producer inside each consumer.  With the pooled
    output an elementwise max of four strided phases (not a reduce, which XLA does not
    duplicate), the whole of conv1's 25-tap forward + bias + ReLU + pool was fused into
    each of conv2's 25 window slices (HLO: 25 fusions of ~270 ops, one per window),
    i.e. conv1 ran 25 times.  Not the phases themselves: alone a strided-phase max, the
    stack + reshape interleave and the 6-D select each cost 13-27 us (like a copy).
    ``lax.optimization_barrier`` (in and out of the pooling) changed nothing: XLA CPU
    expands barriers before fusion; nor did an "expensive" divide by a runtime 1.0.
  * With conv1's output computed once (an XLA convolution, kept, or the patch matmul
    ``chwn_kept_mm``) the strided phases are cheap: chwn_kept (XLA conv1) + phases
    1.59-1.60 against chwn_kept_taps/reshape (the chwn before) 2.03-2.04 and
    chwn_kept/reshape 1.96; chwn_kept_mm: phases 2.01, reshape 2.37.  Later run:
    chwn 1.72, chwn_kept_taps/reshape 2.22, chwn_kept/reshape 2.16, hand_masks 2.03,
    hand_bits 2.05, chwn_kept_mm/phases 2.18, reshape+phases 2.08, mixed 3.06.
  * Pool variants with tie masks from the forward: the phase residuals (4 bool masks +
    count, kept) and recomputing them in the backward from ``x`` and the max ran alike
    (1.60 / 1.61); ``hand_masks`` (full-resolution 6-D mask) 1.91-2.03; ``hand_bits``
    (one variadic reduce: max + 4-bit tie mask) 2.05 with the XLA conv1 and 2.67-2.95
    with the taps (its reduce with the taps fused in ran ~550 us a step, scalar code);
    conv1's taps as a reduce over the 25 taps: 6.1-6.6 whatever the pooling.  Pool2's
    formulation hardly matters (one run: phases 1.65, phases+reshape 1.68,
    phases+hand_masks 1.64).
  * Left in a client (per-thunk profile, one core, ~1.9 ms profiled): conv1's kernel-gradient
    convolution ~140 us a step (alone 154 us; as the [25, 12544] x [6, 12544]^T dot
    239, as 28 row-batched dots 362-523, jax's own rhs transpose 150), conv2's ~85, the
    XLA conv1 forward ~50, the dense layers' dots 60-80 each.

Run:  PYTHONPATH=. python benchmarks/conv_variants.py [--m 64] [--repeats 5]
      (checks every formulation against the lax reference, then times each layer).
The whole-model comparison: benchmarks/client_formulations.py --formulations
map1-mixed map1-im2col map1-cnhw map1-mixed/slices ... (conv names from this file).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ldpsim.models import Model, get_model

CONV_IMPLS = ("xla", "im2col", "im2col_autodiff", "patches", "taps", "cnhw")
CHWN_IMPLS = ("chwn_taps_mm", "chwn_taps", "chwn_mm", "chwn_col2im", "chwn_red", "chwn_kconv",
              "chwn_kconv_taps", "chwn_kkt", "chwn_kept", "chwn_kept_taps",
              "chwn_kept_mm")  # whole-network batch-innermost layouts
LENET_CONV_IMPLS = CONV_IMPLS + ("mixed",) + CHWN_IMPLS
POOL_IMPLS = ("reshape", "window", "slices")
# relu + pool with a hand VJP (chwn_* only): "hand" (first maximum), "hand_masks",
# "hand_bits" and the kept "phases" (tie-splitting, as JAX's).  "a+b": pool1 a, pool2 b.
CHWN_POOL_IMPLS = POOL_IMPLS + ("hand", "hand_masks", "hand_bits", "phases")
KEPT_CONV = ("auto", "chwn", "mixed", "xla")  # what ldpsim.models.lenet5 accepts
KEPT_POOL = ("auto", "reshape", "window", "phases")


# --------------------------------------------------------------------------- formulations


# The kept formulations are the package's own (one copy of the code): the SAME padding,
# im2col / channels-first patches with their in-place col2im VJPs, and the CNHW conv.
# im2col_autodiff is the package's im2col without its hand-written VJP.
from ldpsim._src.models._layers import _im2col as im2col_autodiff  # noqa: E402
from ldpsim._src.models._layers import _pad_same, conv2d_cnhw, im2col  # noqa: E402
from ldpsim._src.models._layers import _conv_chwn_valid_bwd  # noqa: E402
from ldpsim._src.models._layers import conv2d_chwn as kept_conv2d_chwn  # noqa: E402
from ldpsim._src.models._layers import relu_max_pool2x2  # noqa: E402


def conv2d(x, kernel, *, padding, impl):
    """Stride-1 cross-correlation of NHWC ``x`` with HWIO ``kernel`` by formulation ``impl``."""
    kh, kw, c, o = kernel.shape
    if impl == "xla":
        return lax.conv_general_dilated(x, kernel, (1, 1), padding,
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))
    if impl == "cnhw":
        y = conv2d_cnhw(jnp.transpose(x, (3, 0, 1, 2)), kernel, padding=padding)
        return jnp.transpose(y, (1, 2, 3, 0))
    if padding == "SAME":
        x = _pad_same(x, kh, kw)
    n, h, w, _ = x.shape
    ho, wo = h - kh + 1, w - kw + 1
    if impl in ("im2col", "im2col_autodiff"):
        p = (im2col if impl == "im2col" else im2col_autodiff)(x, kh, kw)
        return jnp.dot(p, kernel.reshape(kh * kw * c, o))
    if impl == "patches":
        p = lax.conv_general_dilated_patches(
            x, (kh, kw), (1, 1), "VALID", dimension_numbers=("NHWC", "OIHW", "NHWC"))
        return jnp.dot(p, kernel.transpose(2, 0, 1, 3).reshape(c * kh * kw, o))
    if impl == "taps":
        out = jnp.zeros((n, ho, wo, o), x.dtype)
        for i in range(kh):
            for j in range(kw):
                win = x[:, i : i + ho, j : j + wo, :]
                out = out + (win * kernel[i, j, 0] if c == 1 else jnp.dot(win, kernel[i, j]))
        return out
    raise ValueError(f"conv impl must be one of {CONV_IMPLS}, got {impl!r}")


def max_pool2x2(x, *, impl, spatial=(1, 2)):
    """2x2 max-pool, stride 2, 'VALID'; ``spatial`` names the (H, W) axes ((2, 3) for CNHW)."""
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
        def phase(i, j):
            return lax.slice_in_dim(lax.slice_in_dim(x, i, 2 * h2, 2, axis=ha), j, 2 * w2, 2,
                                    axis=wa)
        return jnp.maximum(jnp.maximum(phase(0, 0), phase(0, 1)),
                           jnp.maximum(phase(1, 0), phase(1, 1)))
    raise ValueError(f"pool impl must be one of {POOL_IMPLS}, got {impl!r}")


def _windows_chwn(x, kh, kw):
    """The ``kh*kw`` VALID windows ``[C, Ho, Wo, B]`` of ``x [C, H, W, B]``, order (i, j)."""
    _, h, w, _ = x.shape
    ho, wo = h - kh + 1, w - kw + 1
    return [x[:, i : i + ho, j : j + wo, :] for i in range(kh) for j in range(kw)]


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2))
def patches_chwn(x, kh, kw):
    """Batch-innermost patches ``[C, H, W, B] -> [kh*kw*C, Ho, Wo, B]``, order (i, j, c).

    The VJP (col2im) adds each window's cotangent in place into a zero input.
    """
    return jnp.concatenate(_windows_chwn(x, kh, kw), 0)


def _patches_chwn_fwd(x, kh, kw):
    return patches_chwn(x, kh, kw), jnp.zeros((0,) + x.shape, x.dtype)  # only the shape


def _patches_chwn_bwd(kh, kw, res, g):
    c, h, w, b = res.shape[1:]
    ho, wo = h - kh + 1, w - kw + 1
    g = g.reshape(kh, kw, c, ho, wo, b)
    dx = jnp.zeros((c, h, w, b), g.dtype)
    for i in range(kh):
        for j in range(kw):
            dx = dx.at[:, i : i + ho, j : j + wo, :].add(g[i, j])
    return (dx,)


patches_chwn.defvjp(_patches_chwn_fwd, _patches_chwn_bwd)


@jax.custom_vjp
def _conv_chwn_red(x, kernel):
    """VALID conv of ``[C, H, W, B]`` as ``kernel.T @ patches``; kernel gradient by lanes.

    The VJP's kernel gradient is a dot batched over B (the vector lanes), contracting
    (Ho, Wo), then a sum over B, instead of one ``[O, Ho*Wo*B] x [K, Ho*Wo*B]^T`` dot
    (whose K = 12,544 for LeNet-5's conv1 and tiny [6, 25] output run at ~15 GFLOP/s).
    """
    return _conv_chwn_red_fwd(x, kernel)[0]


def _conv_chwn_red_fwd(x, kernel):
    kh, kw, c, o = kernel.shape
    p = patches_chwn(x, kh, kw)  # [kh*kw*C, Ho, Wo, B]
    k, ho, wo, b = p.shape
    y = (kernel.reshape(k, o).T @ p.reshape(k, ho * wo * b)).reshape(o, ho, wo, b)
    return y, (p, kernel, jnp.zeros((0,) + x.shape, x.dtype))


def _conv_chwn_red_bwd(res, g):
    p, kernel, xs = res
    kh, kw, c, o = kernel.shape
    k, ho, wo, b = p.shape
    dk = jnp.einsum("khwb,ohwb->bko", p, g).sum(0)
    dp = (kernel.reshape(k, o) @ g.reshape(o, -1)).reshape(p.shape)
    dx = _patches_chwn_bwd(kh, kw, xs, dp)[0]
    return dx, dk.reshape(kernel.shape)


_conv_chwn_red.defvjp(_conv_chwn_red_fwd, _conv_chwn_red_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _conv_chwn_kconv(x, kernel, fwd_form):
    """VALID conv of ``[C, H, W, B]``; the kernel gradient is itself an XLA convolution.

    ``dk[i, j, c, o] = sum_{h, w, b} x[c, h+i, w+j, b] g[o, h, w, b]``: the convolution
    of ``x`` read as NHWC with N = C and B as its input features by ``g`` read as an
    HWIO kernel ``[Ho, Wo, B, O]`` -- a 'VALID' convolution with a [kh, kw] output.
    The forward is ``fwd_form`` ("mm" or "taps") of :func:`conv2d_chwn`.
    """
    return conv2d_chwn(x, kernel, padding="VALID", form=fwd_form)


def _conv_chwn_kconv_fwd(x, kernel, fwd_form):
    return _conv_chwn_kconv(x, kernel, fwd_form), (x, kernel)


def _conv_chwn_kconv_bwd(fwd_form, res, g):
    x, kernel = res
    kh, kw, c, o = kernel.shape
    dk = lax.conv_general_dilated(x, jnp.transpose(g, (1, 2, 3, 0)), (1, 1), "VALID",
                                  dimension_numbers=("NHWC", "HWIO", "NHWC"))
    dk = jnp.transpose(dk, (1, 2, 0, 3))  # [C, kh, kw, O] -> HWIO
    _, ho, wo, b = g.shape
    dp = (kernel.reshape(kh * kw * c, o) @ g.reshape(o, -1)).reshape(kh * kw * c, ho, wo, b)
    dx = _patches_chwn_bwd(kh, kw, jnp.zeros((0,) + x.shape, x.dtype), dp)[0]
    return dx, dk


_conv_chwn_kconv.defvjp(_conv_chwn_kconv_fwd, _conv_chwn_kconv_bwd)


def conv2d_chwn(x, kernel, *, padding, form):
    """Stride-1 cross-correlation of batch-innermost ``x [C, H, W, B]`` with HWIO ``kernel``.

    Returns ``[O, Ho, Wo, B]``.  ``form``: ``"taps"`` (``sum_t kernel_t^T @ window_t``;
    for ``C == 1`` a broadcast multiply-add per tap, no patch matrix) or ``"mm"``
    (``kernel.T [O, kh*kw*C] @ patches [kh*kw*C, Ho*Wo*B]``, patches stacked windows).
    """
    kh, kw, c, o = kernel.shape
    if padding == "SAME":
        x = _pad_same(x, kh, kw, h_axis=1)
    if form == "red":
        return _conv_chwn_red(x, kernel)
    if form in ("kconv", "kconv_taps"):
        return _conv_chwn_kconv(x, kernel, "taps" if form == "kconv_taps" else "mm")
    wins = _windows_chwn(x, kh, kw)
    _, ho, wo, b = wins[0].shape
    if form == "taps":
        out = None
        for t, win in enumerate(wins):
            k = kernel[t // kw, t % kw]  # [C, O]
            if c == 1:
                term = k[0][:, None, None, None] * win
            else:
                term = jnp.einsum("co,chwb->ohwb", k, win)
            out = term if out is None else out + term
        return out
    if form == "mm":
        p = jnp.stack(wins, 0).reshape(kh * kw * c, ho * wo * b)
        return (kernel.reshape(kh * kw * c, o).T @ p).reshape(o, ho, wo, b)
    if form == "col2im":
        p = patches_chwn(x, kh, kw).reshape(kh * kw * c, ho * wo * b)
        return (kernel.reshape(kh * kw * c, o).T @ p).reshape(o, ho, wo, b)
    raise ValueError(f"chwn form must be 'taps', 'mm' or 'col2im', got {form!r}")


def _phases_chwn(x):
    """The four 2x2 phases ``[C, H/2, W/2, B]`` of ``x [C, H, W, B]`` (even H, W), row-major."""
    c, h, w, b = x.shape
    r = x.reshape(c, h // 2, 2, w // 2, 2, b)
    return [r[:, :, i, :, j, :] for i in range(2) for j in range(2)]


@jax.custom_vjp
def relu_pool_chwn(x):
    """``max_pool2x2(relu(x))`` of ``[C, H, W, B]`` (even H, W) with a hand-written VJP.

    The VJP routes each pooled cotangent to the first maximum of its window (as
    ``lax.reduce_window``'s does), and to nothing where the max is <= 0 (ReLU).
    """
    a, b_, c_, d = _phases_chwn(x)
    return jnp.maximum(jnp.maximum(jnp.maximum(a, b_), jnp.maximum(c_, d)), 0.0)


def _relu_pool_chwn_fwd(x):
    y = relu_pool_chwn(x)
    return y, (x, y)


def _relu_pool_chwn_bwd(res, g):
    x, y = res
    c, h2, w2, b = y.shape
    g = jnp.where(y > 0, g, 0.0)[:, :, None, :, None, :]
    yb = y[:, :, None, :, None, :]
    e00, e01, e10, _ = (ph == y for ph in _phases_chwn(x))  # earlier maxima of a window
    e00, e01, e10 = (e[:, :, None, :, None, :] for e in (e00, e01, e10))
    i = lax.broadcasted_iota(jnp.int32, (1, 1, 2, 1, 2, 1), 2)
    j = lax.broadcasted_iota(jnp.int32, (1, 1, 2, 1, 2, 1), 4)
    pos = 2 * i + j  # the window position of each full-resolution element
    prior = (((pos > 0) & e00) | ((pos > 1) & e01) | ((pos > 2) & e10))
    r = x.reshape(c, h2, 2, w2, 2, b)
    dx = jnp.where((r == yb) & ~prior, g, 0.0)
    return (dx.reshape(x.shape),)


relu_pool_chwn.defvjp(_relu_pool_chwn_fwd, _relu_pool_chwn_bwd)


def _pool6(x):
    c, h, w, b = x.shape
    return x.reshape(c, h // 2, 2, w // 2, 2, b)


@jax.custom_vjp
def relu_pool_masks(x):
    """``max_pool2x2(relu(x))`` of ``[C, H, W, B]`` (even H, W), tie-splitting hand VJP.

    The forward keeps the full-resolution tie mask (``[C, H/2, 2, W/2, 2, B]``, ReLU's
    ``max > 0`` folded in) and the tie count; the backward is one select.
    """
    return jnp.maximum(_pool6(x).max(axis=(2, 4)), 0.0)


def _relu_pool_masks_fwd(x):
    r = _pool6(x)
    m = r.max(axis=(2, 4))
    mb = m[:, :, None, :, None, :]
    hit = r == mb
    return jnp.maximum(m, 0.0), (hit & (mb > 0), hit.sum(axis=(2, 4), dtype=x.dtype))


def _relu_pool_masks_bwd(res, g):
    hit, count = res
    c, h2, _, w2, _, b = hit.shape
    dx = jnp.where(hit, (g / count)[:, :, None, :, None, :], 0.0)
    return (dx.reshape(c, 2 * h2, 2 * w2, b),)


relu_pool_masks.defvjp(_relu_pool_masks_fwd, _relu_pool_masks_bwd)


def _window_bit():
    shape = (1, 1, 2, 1, 2, 1)
    return (2 * lax.broadcasted_iota(jnp.int8, shape, 2)
            + lax.broadcasted_iota(jnp.int8, shape, 4))


def _max_and_ties(a, b):
    (av, ab), (bv, bb) = a, b
    return jnp.maximum(av, bv), jnp.where(av > bv, ab, jnp.where(bv > av, bb, ab | bb))


@jax.custom_vjp
def relu_pool_bits(x):
    """As :func:`relu_pool_masks`; the forward is one variadic reduce giving the maximum and
    a 4-bit mask of its tied window positions (int8), the backward decodes the bits."""
    return jnp.maximum(_pool6(x).max(axis=(2, 4)), 0.0)


def _relu_pool_bits_fwd(x):
    r = _pool6(x)
    bits = jnp.broadcast_to(jnp.left_shift(jnp.int8(1), _window_bit()), r.shape)
    m, code = lax.reduce((r, bits), (jnp.array(-jnp.inf, x.dtype), jnp.int8(0)),
                         _max_and_ties, (2, 4))
    y = jnp.maximum(m, 0.0)
    return y, (code, y)


def _relu_pool_bits_bwd(res, g):
    code, y = res
    count = sum((code >> k) & 1 for k in range(4)).astype(g.dtype)
    share = jnp.where(y > 0, g / count, 0.0)[:, :, None, :, None, :]
    hit = ((code[:, :, None, :, None, :] >> _window_bit()) & 1) == 1
    dx = jnp.where(hit, share, 0.0)
    c, h2, _, w2, _, b = dx.shape
    return (dx.reshape(c, 2 * h2, 2 * w2, b),)


relu_pool_bits.defvjp(_relu_pool_bits_fwd, _relu_pool_bits_bwd)

_HAND_POOLS = {"hand": relu_pool_chwn, "hand_masks": relu_pool_masks, "hand_bits": relu_pool_bits}


def _kept_taps_forward(x, kernel):
    """conv2d_chwn's earlier forward (before pool "phases"): for one input channel, 25
    broadcast multiply-adds of static windows; else the patch matmul."""
    kh, kw, c, o = kernel.shape
    wins = _windows_chwn(x, kh, kw)
    _, ho, wo, b = wins[0].shape
    if c == 1 and b % 16 == 0:
        out = kernel[0, 0, 0][:, None, None, None] * wins[0]
        for t in range(1, kh * kw):
            out = out + kernel[t // kw, t % kw, 0][:, None, None, None] * wins[t]
        return out
    p = jnp.concatenate(wins, 0).reshape(kh * kw * c, ho * wo * b)
    return (kernel.reshape(kh * kw * c, o).T @ p).reshape(o, ho, wo, b)


def _kept_mm_forward(x, kernel):
    """conv2d_chwn's forward as ``kernel.T @ patches`` for every layer."""
    kh, kw, c, o = kernel.shape
    wins = _windows_chwn(x, kh, kw)
    _, ho, wo, b = wins[0].shape
    p = jnp.concatenate(wins, 0).reshape(kh * kw * c, ho * wo * b)
    return (kernel.reshape(kh * kw * c, o).T @ p).reshape(o, ho, wo, b)


def _kept_with_forward(forward):
    @jax.custom_vjp
    def conv(x, kernel):
        return forward(x, kernel)

    conv.defvjp(lambda x, k: (forward(x, k), (x, k)), _conv_chwn_valid_bwd)

    def conv2d(x, kernel, *, padding):
        kh, kw, _, _ = kernel.shape
        if padding == "SAME":
            x = _pad_same(x, kh, kw, h_axis=1)
        return conv(x, kernel)

    return conv2d


#: ldpsim's conv2d_chwn (its VJP) with another forward, for B a multiple of 16.
KEPT_CHWN_FORWARDS = {"chwn_kept_taps": _kept_with_forward(_kept_taps_forward),
                      "chwn_kept_mm": _kept_with_forward(_kept_mm_forward)}


# --------------------------------------------------------------------------- LeNet-5


class Conv2D(nn.Module):
    """Stride-1 convolution, HWIO ``kernel`` and ``bias`` (the param tree of ldpsim's LeNet-5)."""

    features: int
    kernel_size: int
    padding: str = "VALID"
    use_bias: bool = True
    impl: str = "xla"
    channels_first: bool = False  # x is [C, N, H, W] (impl "cnhw") or [C, H, W, B] (chwn_*)

    @nn.compact
    def __call__(self, x):
        k = self.kernel_size
        c = x.shape[0] if self.channels_first else x.shape[-1]
        kernel = self.param("kernel", nn.initializers.lecun_normal(),
                            (k, k, c, self.features), jnp.float32)
        if self.impl == "chwn_kept":  # ldpsim's conv2d_chwn (for other poolings with it)
            y = kept_conv2d_chwn(x, kernel, padding=self.padding)
        elif self.impl in KEPT_CHWN_FORWARDS:
            y = KEPT_CHWN_FORWARDS[self.impl](x, kernel, padding=self.padding)
        elif self.impl.startswith("chwn_"):
            y = conv2d_chwn(x, kernel, padding=self.padding, form=self.impl[5:])
        elif self.channels_first:
            y = conv2d_cnhw(x, kernel, padding=self.padding)
        else:
            y = conv2d(x, kernel, padding=self.padding, impl=self.impl)
        if self.use_bias:
            b = self.param("bias", nn.initializers.zeros_init(), (self.features,), jnp.float32)
            y = y + (b[:, None, None, None] if self.channels_first else b)
        return y


class LeNet5(nn.Module):
    """ldpsim's LeNet-5 (same params, same function) with every formulation switchable."""

    num_classes: int = 10
    first_conv_padding: str = "SAME"
    conv_bias: bool = True
    conv_impl: str = "im2col"
    pool_impl: str = "reshape"

    @nn.compact
    def __call__(self, x):
        if self.conv_impl in CHWN_IMPLS:
            return self._chwn(x)
        cf = self.conv_impl == "cnhw"  # channels first from the input to the dense head
        spatial = (2, 3) if cf else (1, 2)
        if cf:
            x = jnp.transpose(x, (3, 0, 1, 2))
        first = "cnhw" if self.conv_impl == "mixed" else self.conv_impl
        x = Conv2D(6, 5, self.first_conv_padding, self.conv_bias, first, cf, name="conv1")(x)
        x = max_pool2x2(nn.relu(x), impl=self.pool_impl, spatial=spatial)
        second = "im2col" if self.conv_impl == "mixed" else self.conv_impl
        x = Conv2D(16, 5, "VALID", self.conv_bias, second, cf, name="conv2")(x)
        x = max_pool2x2(nn.relu(x), impl=self.pool_impl, spatial=spatial)
        if cf:  # flatten in (h, w, c) order, as NHWC: the dense params do not depend on impl
            x = jnp.transpose(x, (1, 2, 3, 0))
        x = x.reshape(x.shape[0], -1)
        x = nn.relu(nn.Dense(120, name="fc1")(x))
        x = nn.relu(nn.Dense(84, name="fc2")(x))
        return nn.Dense(self.num_classes, name="fc3")(x)

    def _chwn(self, x):
        """Batch-innermost [C, H, W, B] from the input to the dense head (chwn_* impls)."""
        first, second = {"chwn_taps_mm": ("chwn_taps", "chwn_mm"),
                         "chwn_taps": ("chwn_taps",) * 2,
                         "chwn_mm": ("chwn_mm",) * 2,
                         "chwn_col2im": ("chwn_mm", "chwn_col2im"),
                         "chwn_red": ("chwn_red", "chwn_col2im"),
                         "chwn_kconv": ("chwn_kconv", "chwn_col2im"),
                         "chwn_kconv_taps": ("chwn_kconv_taps", "chwn_col2im"),
                         "chwn_kkt": ("chwn_kconv_taps",) * 2,
                         "chwn_kept": ("chwn_kept",) * 2,
                         "chwn_kept_taps": ("chwn_kept_taps", "chwn_kept"),
                         "chwn_kept_mm": ("chwn_kept_mm", "chwn_kept")}[self.conv_impl]
        x = jnp.transpose(x, (3, 1, 2, 0))
        pool1, _, pool2 = self.pool_impl.partition("+")

        def relu_pool(x, impl):
            if impl == "phases":
                return relu_max_pool2x2(x, impl=impl)
            if impl not in _HAND_POOLS:
                return max_pool2x2(nn.relu(x), impl=impl, spatial=(1, 2))
            h2, w2 = x.shape[1] // 2, x.shape[2] // 2
            return _HAND_POOLS[impl](x[:, : 2 * h2, : 2 * w2, :])

        x = Conv2D(6, 5, self.first_conv_padding, self.conv_bias, first, True, name="conv1")(x)
        x = relu_pool(x, pool1)
        x = Conv2D(16, 5, "VALID", self.conv_bias, second, True, name="conv2")(x)
        x = relu_pool(x, pool2 or pool1)
        x = jnp.transpose(x, (3, 1, 2, 0))  # [B, H, W, C]: the NHWC flatten order
        x = x.reshape(x.shape[0], -1)
        x = nn.relu(nn.Dense(120, name="fc1")(x))
        x = nn.relu(nn.Dense(84, name="fc2")(x))
        return nn.Dense(self.num_classes, name="fc3")(x)


def lenet5_variant(conv_impl="auto", pool_impl="auto", *, input_shape=(28, 28, 1),
                   num_classes=10, **kw) -> Model:
    """LeNet-5 with any formulation; the ones ldpsim keeps come from ``ldpsim.models``.

    ``conv_impl``: one of :data:`LENET_CONV_IMPLS` or ``"auto"``; ``pool_impl``: one of
    :data:`POOL_IMPLS` or ``"auto"``.  Params are interchangeable with
    ``get_model("lenet5", ...)``'s.
    """
    if conv_impl in KEPT_CONV and pool_impl in KEPT_POOL:
        return get_model("lenet5", input_shape=input_shape, num_classes=num_classes,
                         conv_impl=conv_impl, pool_impl=pool_impl, **kw)
    cpu = jax.default_backend() == "cpu"
    if conv_impl == "auto":
        conv_impl = "chwn" if cpu else "xla"
    if pool_impl == "auto":
        pool_impl = ("phases" if conv_impl in CHWN_IMPLS else "reshape") if cpu else "window"
    pools = CHWN_POOL_IMPLS if conv_impl in CHWN_IMPLS else POOL_IMPLS
    if conv_impl not in LENET_CONV_IMPLS or not set(pool_impl.split("+")) <= set(pools):
        raise ValueError(f"conv_impl must be one of {LENET_CONV_IMPLS} and pool_impl one of "
                         f"{pools}; got {conv_impl!r}, {pool_impl!r}")
    shape = tuple(int(s) for s in input_shape)
    shape = shape + (1,) if len(shape) == 2 else shape
    module = LeNet5(num_classes, conv_impl=conv_impl, pool_impl=pool_impl, **kw)

    def rows(x):
        x = jnp.asarray(x, jnp.float32)
        return x.reshape((x.shape[0],) + shape)

    def init(key, sample_x):
        return module.init(key, rows(sample_x))["params"]

    def apply(params, x):
        return module.apply({"params": params}, rows(x))

    config = dict(kw, conv_impl=conv_impl, pool_impl=pool_impl)
    return Model(init, apply, "lenet5", shape, int(num_classes), config)


# --------------------------------------------------------------------------- benchmark

# LeNet-5's two convolutions and its first pooling, per client step (batch 16).
LAYERS = {"conv1": ((16, 28, 28, 1), (5, 5, 1, 6), "SAME"),
          "conv2": ((16, 14, 14, 6), (5, 5, 6, 16), "VALID")}
POOL_INPUT = (16, 28, 28, 6)


def check_against_reference():
    """Every formulation against ``lax.conv_general_dilated`` / ``reduce_window``, value and VJP."""
    key = jax.random.key(0)
    for name, (xs, ks, padding) in LAYERS.items():
        kx, kk, kg = jax.random.split(jax.random.fold_in(key, len(name)), 3)
        x, k = jax.random.normal(kx, xs), jax.random.normal(kk, ks)

        def ref(x, k, padding=padding):
            return lax.conv_general_dilated(x, k, (1, 1), padding,
                                            dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                            precision=lax.Precision.HIGHEST)

        want, ref_vjp = jax.vjp(ref, x, k)
        g = jax.random.normal(kg, want.shape)
        for impl in CONV_IMPLS:
            got, vjp = jax.vjp(functools.partial(conv2d, padding=padding, impl=impl), x, k)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=impl)
            for a, b in zip(vjp(g), ref_vjp(g), strict=True):
                np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-3, err_msg=impl)
        # batch innermost: [C, H, W, B]
        for form in ("taps", "mm", "col2im", "red", "kconv", "kconv_taps"):
            def chwn(x, k, form=form, padding=padding):
                y = conv2d_chwn(jnp.transpose(x, (3, 1, 2, 0)), k, padding=padding, form=form)
                return jnp.transpose(y, (3, 1, 2, 0))
            got, vjp = jax.vjp(chwn, x, k)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=form)
            for a, b in zip(vjp(g), ref_vjp(g), strict=True):
                np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-3, err_msg=form)
    # relu + pool with its hand VJP, on data with ties (the VJP takes the first maximum
    # of a window, as reduce_window's does; the ReLU passes nothing where the max <= 0)
    x = jnp.round(2 * jax.random.normal(key, (3, 8, 6, 5))) / 2
    g = jax.random.normal(jax.random.fold_in(key, 1), (3, 4, 3, 5))
    got, vjp = jax.vjp(relu_pool_chwn, x)
    want, ref_vjp = jax.vjp(lambda x: max_pool2x2(nn.relu(x), impl="window", spatial=(1, 2)), x)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(vjp(g)[0], ref_vjp(g)[0])
    # the tie-splitting ones against relu + reshape-max (each tied maximum gets g / count)
    want, ref_vjp = jax.vjp(lambda x: max_pool2x2(nn.relu(x), impl="reshape"), x)
    for f in (relu_pool_masks, relu_pool_bits, functools.partial(relu_max_pool2x2,
                                                                  impl="phases")):
        got, vjp = jax.vjp(f, x)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(vjp(g)[0], ref_vjp(g)[0])
    x = jax.random.normal(key, (2, 7, 6, 3))
    want = np.asarray(x)[:, :6, :6, :].reshape(2, 3, 2, 3, 2, 3).max(axis=(2, 4))
    for impl in POOL_IMPLS:
        np.testing.assert_array_equal(max_pool2x2(x, impl=impl), want)
        cf = max_pool2x2(jnp.transpose(x, (3, 0, 1, 2)), impl=impl, spatial=(2, 3))
        np.testing.assert_array_equal(jnp.transpose(cf, (1, 2, 3, 0)), want)
    print(f"all {len(CONV_IMPLS)} conv (and 6 chwn) and {len(POOL_IMPLS)} pool (and the chwn "
          "relu + pool) formulations match the lax reference (value and VJP)")


def _per_client(step, *arrays):
    """Run ``step`` over m clients as the CPU engine does: a scan, one vmapped client a step."""
    def body(acc, xs):
        out = jax.vmap(step)(*(a[None] for a in xs))
        return acc + sum(jnp.sum(o) for o in jax.tree_util.tree_leaves(out)), None

    return jax.jit(lambda *a: lax.scan(body, jnp.zeros(()), a)[0])


def time_layers(m, repeats):
    """Microseconds per client step of each layer's forward + gradients (median of repeats)."""
    key = jax.random.key(1)
    fns = {}
    for name, (xs, ks, padding) in LAYERS.items():
        x = jax.random.normal(key, (m,) + xs)
        k = jax.random.normal(key, (m,) + ks)
        out = jax.eval_shape(functools.partial(conv2d, padding=padding, impl="xla"), x[0], k[0])
        g = jax.random.normal(key, (m,) + out.shape)
        # conv1's input gradient is never needed in training (x is data): kernel only.
        argnums = (1,) if name == "conv1" else (0, 1)
        for impl in CONV_IMPLS:
            def step(x, k, g, impl=impl, padding=padding, argnums=argnums):
                f = lambda x, k: jnp.sum(conv2d(x, k, padding=padding, impl=impl) * g)  # noqa: E731
                return jax.grad(f, argnums)(x, k)
            fns[f"{name}/{impl}"] = (_per_client(step, x, k, g), (x, k, g))
    xp = jax.random.normal(key, (m,) + POOL_INPUT)
    for impl in POOL_IMPLS:
        def step(x, impl=impl):
            return jax.grad(lambda x: jnp.sum(max_pool2x2(nn.relu(x), impl=impl) ** 2))(x)
        fns[f"pool/{impl}"] = (_per_client(step, xp), (xp,))
    for fn, args in fns.values():
        jax.block_until_ready(fn(*args))
    times = {n: [] for n in fns}
    for _ in range(repeats):  # round-robin, so load changes hit every formulation alike
        for n, (fn, args) in fns.items():
            t = time.perf_counter()
            jax.block_until_ready(fn(*args))
            times[n].append((time.perf_counter() - t) / m)
    for n, t in times.items():
        print(f"{n:>22}: {1e6 * statistics.median(t):8.1f} us per client step")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--m", type=int, default=64, help="clients per timed call")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--check-only", action="store_true")
    args = p.parse_args(argv)
    print(f"jax {jax.__version__}, backend {jax.default_backend()}")
    check_against_reference()
    if not args.check_only:
        time_layers(args.m, args.repeats)


if __name__ == "__main__":
    main()
