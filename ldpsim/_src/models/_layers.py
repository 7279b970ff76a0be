"""LeNet-5's convolution and max-pooling, and the one per-backend choice between formulations.

Three formulations are kept, nothing else (every one computes the same function, up to
float rounding; the slower ones measured, and their numbers, are in
``benchmarks/conv_variants.py``):

* ``"xla"``: :func:`jax.lax.conv_general_dilated` and :func:`jax.lax.reduce_window`.
  The fast path on accelerators, and the plain-JAX reference the tests check the CPU
  path against.
* ``"mixed"``: with per-client weights, ``jax.vmap`` turns an XLA convolution
  into a grouped convolution (one group per client), which XLA's CPU backend runs
  poorly.  So LeNet-5's convolutions are written as matmuls over static-slice patches,
  whose batching rule is a batched matmul: the first (1 input channel) channels-first,
  ``kernel.T [O, kh*kw*C] @ patches [kh*kw*C, N*Ho*Wo]`` (one long product instead of a
  concatenation of 25 one-channel windows; :func:`conv2d_cnhw`), the second
  channels-last, ``patches [N, Ho, Wo, kh*kw*C] @ kernel [kh*kw*C, O]``
  (:func:`im2col`).  Both patch functions have a hand-written VJP (col2im: ``kh*kw``
  in-place ``.at[].add`` into a zero input): autodiff's transpose of the slices
  (``kh*kw`` pads + adds, fused into one fusion) cost about twice as much on XLA CPU.
  Max-pooling is a reshape + max.  The CPU default until ``"chwn"``.
* ``"chwn"`` (CPU default): batch-innermost activations ``[C, H, W, B]`` from the
  input to the dense head (one transpose in, one before the NHWC-order flatten), as
  cuda-convnet had them: with a batch of 16 a row of B floats is one 512-bit vector,
  windows are static slices of contiguous ``W*B`` runs, and pooling keeps B innermost.
  :func:`conv2d_chwn`: conv2 (and conv1 when B is not a multiple of 16) as
  ``kernel.T @ patches``; a hand VJP whose kernel gradient is one
  XLA convolution (input read as NHWC with ``N = C``, features ``B``; the cotangent as
  the kernel) -- the ``[O, Ho*Wo*B] x [K, Ho*Wo*B]^T`` dot autodiff gives (e.g. a [6, 25]
  output contracted over 12,544) ran at ~15 GFLOP/s and was a quarter of a client
  update -- and whose input gradient is an in-place col2im.  Under ``jax.vmap`` over
  clients that kernel-gradient convolution becomes a grouped one: fine at the CPU
  engine's one client per scan step, slower for wide chunks (see the policy below).
  With B a multiple of 16 conv1's forward is one XLA convolution in that layout
  (dimension numbers ``CHWN``), and ReLU + pooling is :func:`relu_max_pool2x2`'s
  ``"phases"``: the maximum of the four strided 2x2 phases with a hand VJP that keeps
  the tie masks and tie count from the forward (each tied maximum gets ``g / count``,
  as ``jnp.max``'s gradient).

The choice per backend is :data:`_AUTO_CONV` / :data:`_AUTO_POOL` (and
:data:`_AUTO_POOL_CHWN`) below, the only place that tests the backend.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

from ldpsim._src._checks import check_choice

#: ``conv_impl`` of :func:`ldpsim.models.lenet5`: how its two convolutions are formulated.
_CONV_IMPLS = ("auto", "chwn", "mixed", "xla")
#: ``pool_impl`` of :func:`ldpsim.models.lenet5`.
_POOL_IMPLS = ("auto", "reshape", "window", "phases")

# The per-backend policy ("auto"); any backend not listed gets "xla" / "window".
# Measured with benchmarks/client_formulations.py (2-core CPU, one client per scan step,
# LeNet-5 training only, batch 16):
# * chwn against mixed (25 Nov 2026, m = 200, median of 5 interleaved, load ~1 from one
#   other job): one core (taskset -c 0) 2.04 against 2.92 CPU-ms per update (1.43x);
#   both cores 468 against 326 updates/s (3.33 against 4.40 CPU-ms).  Engine end to end
#   (benchmarks/engine_vs_commit.py, m = 1,000): 3.09 against 3.95 CPU-ms per update.
#   Not a win everywhere (one core, CPU-ms): DP-SGD-style per-example gradients (256
#   examples, vmap of batch-1 gradients) 112.5 against 102.6; a 10,000-row forward
#   1,676 against 1,412 (batches of 500 / 1,000, as evaluation uses: 51.6 / 49.5, 117 /
#   119).
# * chwn + pool "phases" (conv1's forward one XLA convolution), 25 Nov 2026, m = 200,
#   median of 7 interleaved, load ~1: one core 1.72-1.76 against 2.22-2.24 CPU-ms for
#   the chwn before (taps forward, pool reshape: conv_variants' chwn_kept_taps/reshape)
#   and 3.06-3.12 for mixed; both cores 515 against 450 and 319 updates/s.  Engine end
#   to end against 7de142f: see benchmarks/README.md.  One core, CPU-ms, chwn / the
#   chwn before / mixed: 256 per-example gradients 133 / 132 / 124 (vmap of B = 1:
#   "phases" is "reshape" there); forward of 10,000 rows 1,668 / 1,753 / 1,476, of
#   1,008 141 / 134 / 168, of 512 57 / 50 / 67; B = 10 client update 1.59 / 1.60 / 1.80.
#   Only together: the XLA conv1 with pool "reshape" 1.96-2.16, pool "phases" after
#   the taps 14.9 (XLA recomputes conv1's taps in each of conv2's 25 windows).
# * earlier (m = 128, median of 7, client-updates/s): mixed 441, im2col 356, cnhw 269,
#   xla ~40 (23 CPU-ms per update against 3.8 for im2col); pooling "reshape" 435
#   against "slices" 377 and "window" 358 (with mixed).
# benchmarks/conv_variants.py keeps the slower formulations and compares them.
_AUTO_CONV = {"cpu": "chwn"}
# The LEAF FEMNIST CNN (32 and 64 channels, both convolutions 'SAME') keeps "mixed": chwn
# was measured on LeNet-5 only, so femnist_cnn does not offer it.
_CNN_CONV_IMPLS = ("auto", "mixed", "xla")
_AUTO_CONV_CNN = {"cpu": "mixed"}
_AUTO_POOL = {"cpu": "reshape"}
# LeNet-5's chwn pools with "phases" (relu_max_pool2x2), the femnist CNN cannot.
_AUTO_POOL_CHWN = {"cpu": "phases"}
_CNN_POOL_IMPLS = ("auto", "reshape", "window")

#: (conv1, conv2) formulation of :func:`conv2d` for each LeNet-5 ``conv_impl``
#: ("chwn" runs :func:`conv2d_chwn` on batch-innermost activations throughout).
_LENET_CONVS = {"chwn": ("chwn", "chwn"), "mixed": ("cnhw", "im2col"), "xla": ("xla", "xla")}


def resolve_conv_impl(conv_impl: str, backend: str | None = None, *,
                      model: str = "lenet5") -> str:
    """``conv_impl``, or for ``"auto"`` the formulation measured fastest on ``backend``.

    ``model``: ``"lenet5"`` or ``"femnist_cnn"`` (which offers no ``"chwn"``).
    """
    cnn = model == "femnist_cnn"
    check_choice("conv_impl", conv_impl, _CNN_CONV_IMPLS if cnn else _CONV_IMPLS)
    if conv_impl != "auto":
        return conv_impl
    return (_AUTO_CONV_CNN if cnn else _AUTO_CONV).get(backend or jax.default_backend(), "xla")


def resolve_pool_impl(pool_impl: str, backend: str | None = None, *,
                      conv_impl: str | None = None, model: str = "lenet5") -> str:
    """``pool_impl``, or for ``"auto"`` the pooling measured fastest on ``backend``.

    ``conv_impl``: the resolved convolution formulation (LeNet-5's ``"chwn"`` has its own
    default); ``model``: ``"lenet5"`` or ``"femnist_cnn"`` (which offers no ``"phases"``).
    """
    cnn = model == "femnist_cnn"
    check_choice("pool_impl", pool_impl, _CNN_POOL_IMPLS if cnn else _POOL_IMPLS)
    if pool_impl != "auto":
        return pool_impl
    backend = backend or jax.default_backend()
    if conv_impl == "chwn" and not cnn and backend in _AUTO_POOL_CHWN:
        return _AUTO_POOL_CHWN[backend]
    return _AUTO_POOL.get(backend, "window")


def _pad_same(x: jax.Array, kh: int, kw: int, h_axis: int = 1) -> jax.Array:
    """Zero-pad the two axes from ``h_axis`` as XLA's 'SAME' does for stride 1."""
    ph, pw = kh - 1, kw - 1
    pads = [(0, 0)] * x.ndim
    pads[h_axis], pads[h_axis + 1] = (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2)
    return jnp.pad(x, pads)


def _im2col(x: jax.Array, kh: int, kw: int) -> jax.Array:
    _, h, w, _ = x.shape
    ho, wo = h - kh + 1, w - kw + 1
    cols = [x[:, i : i + ho, j : j + wo, :] for i in range(kh) for j in range(kw)]
    return jnp.concatenate(cols, axis=-1)


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2))
def im2col(x: jax.Array, kh: int, kw: int) -> jax.Array:
    """Patches ``[N, Ho, Wo, kh*kw*C]`` of a VALID stride-1 window, feature order (i, j, c).

    The order matches ``kernel.reshape(kh * kw * C, O)`` for an HWIO kernel.  The VJP
    (col2im) adds each window's cotangent in place into a zero input.
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
        x = _pad_same(x, kh, kw, h_axis=2)
    p = patches_cnhw(x, kh, kw)
    _, n, ho, wo = p.shape
    y = kernel.reshape(kh * kw * c, o).T @ p.reshape(kh * kw * c, n * ho * wo)
    return y.reshape(o, n, ho, wo)


#: chwn's one-channel convolution forward and its convolution kernel gradient are used when
#: the batch B is a multiple of this (whole 512-bit vectors of float32); otherwise the patch
#: matmul and the ``[O, Ho*Wo*B] x [K, Ho*Wo*B]^T`` dot.  LeNet-5, one core, CPU-ms per
#: client update, chwn against mixed: B = 16 2.01 / 2.86, 24 3.77 / 4.25, 32 4.75 / 5.58;
#: B = 10 2.89 / 1.80 with taps and the convolution, 1.58 / 1.78 with the fallback;
#: B = 8 (fallback) 1.30 / 1.44.  (Measured with the taps forward, before pool "phases".)
_CHWN_LANES = 16


def _windows_chwn(x: jax.Array, kh: int, kw: int) -> list[jax.Array]:
    """The ``kh*kw`` VALID windows ``[C, Ho, Wo, B]`` of ``x [C, H, W, B]``, order (i, j)."""
    _, h, w, _ = x.shape
    ho, wo = h - kh + 1, w - kw + 1
    return [x[:, i : i + ho, j : j + wo, :] for i in range(kh) for j in range(kw)]


def _conv_chwn_forward(x: jax.Array, kernel: jax.Array) -> jax.Array:
    kh, kw, c, o = kernel.shape
    wins = _windows_chwn(x, kh, kw)
    _, ho, wo, b = wins[0].shape
    if c == 1 and b % _CHWN_LANES == 0:
        # One XLA convolution in the batch-innermost layout, not 25 broadcast multiply-adds
        # of static windows ("taps", chwn's first forward): XLA fused the taps into every
        # consumer and recomputed them there (the pooling's forward, its tie mask and
        # count, ReLU's backward, and with pool_impl "phases" each of conv2's 25 windows:
        # 7x slower); a convolution is computed once.
        return lax.conv_general_dilated(x, kernel, (1, 1), "VALID",
                                        dimension_numbers=("CHWN", "HWIO", "CHWN"))
    p = jnp.concatenate(wins, 0).reshape(kh * kw * c, ho * wo * b)
    return (kernel.reshape(kh * kw * c, o).T @ p).reshape(o, ho, wo, b)


@jax.custom_vjp
def _conv_chwn_valid(x: jax.Array, kernel: jax.Array) -> jax.Array:
    return _conv_chwn_forward(x, kernel)


def _conv_chwn_valid_fwd(x, kernel):
    return _conv_chwn_forward(x, kernel), (x, kernel)


def _conv_chwn_valid_bwd(res, g):
    x, kernel = res
    kh, kw, c, o = kernel.shape
    _, ho, wo, b = g.shape
    if b % _CHWN_LANES == 0:
        # dk[i, j, c, o] = sum_{h, w, b} x[c, h+i, w+j, b] g[o, h, w, b]: a VALID
        # convolution of x read as NHWC (N = C, features = B) by g read as an HWIO
        # kernel [Ho, Wo, B, O].
        dk = lax.conv_general_dilated(x, jnp.transpose(g, (1, 2, 3, 0)), (1, 1), "VALID",
                                      dimension_numbers=("NHWC", "HWIO", "NHWC"))
        dk = jnp.transpose(dk, (1, 2, 0, 3))
    else:
        p = jnp.concatenate(_windows_chwn(x, kh, kw), 0).reshape(kh * kw * c, ho * wo * b)
        dk = (p @ g.reshape(o, ho * wo * b).T).reshape(kh, kw, c, o)
    # dx: col2im of kernel @ g, each window added in place into a zero input (XLA drops
    # it where x is data, as for the first layer).
    dp = (kernel.reshape(kh * kw * c, o) @ g.reshape(o, ho * wo * b)).reshape(
        kh, kw, c, ho, wo, b)
    dx = jnp.zeros(x.shape, g.dtype)
    for i in range(kh):
        for j in range(kw):
            dx = dx.at[:, i : i + ho, j : j + wo, :].add(dp[i, j])
    return dx, dk


_conv_chwn_valid.defvjp(_conv_chwn_valid_fwd, _conv_chwn_valid_bwd)


def conv2d_chwn(x: jax.Array, kernel: jax.Array, *, padding: str) -> jax.Array:
    """Stride-1 cross-correlation of batch-innermost ``x [C, H, W, B]`` with HWIO ``kernel``.

    Returns ``[O, Ho, Wo, B]``; the same function as :func:`conv2d` in another layout.
    Forward: for one input channel and B a multiple of :data:`_CHWN_LANES`, one XLA
    convolution with dimension numbers ``CHWN``; else ``kernel.T [O, kh*kw*C] @ patches
    [kh*kw*C, Ho*Wo*B]``.  Hand-written VJP: the kernel gradient is one XLA convolution
    (``x`` as NHWC with ``N = C`` and ``B`` as features, by the cotangent as an HWIO
    kernel) when B is a multiple of :data:`_CHWN_LANES`, else the patches' dot; the input
    gradient an in-place col2im.
    """
    check_choice("padding", padding, ("SAME", "VALID"))
    kh, kw, _, _ = kernel.shape
    if padding == "SAME":
        x = _pad_same(x, kh, kw, h_axis=1)
    return _conv_chwn_valid(x, kernel)


def conv2d(x: jax.Array, kernel: jax.Array, *, padding: str, impl: str) -> jax.Array:
    """Stride-1 2-D cross-correlation of NHWC ``x`` with an HWIO ``kernel``.

    Args:
      x: ``[N, H, W, C]`` input.
      kernel: ``[kh, kw, C, O]`` weights.
      padding: ``"SAME"`` or ``"VALID"``.
      impl: ``"xla"`` (the reference), ``"im2col"``, ``"cnhw"`` (channels-first
        patches, one transpose of ``x`` in and of the result out) or ``"chwn"``
        (batch innermost, :func:`conv2d_chwn`, one transpose each way).

    Returns:
      ``[N, Ho, Wo, O]``, identical in exact arithmetic for every ``impl``.
    """
    check_choice("padding", padding, ("SAME", "VALID"))
    check_choice("impl", impl, ("xla", "im2col", "cnhw", "chwn"))
    if impl == "xla":
        return lax.conv_general_dilated(
            x, kernel, (1, 1), padding, dimension_numbers=("NHWC", "HWIO", "NHWC"))
    if impl == "cnhw":
        y = conv2d_cnhw(jnp.transpose(x, (3, 0, 1, 2)), kernel, padding=padding)
        return jnp.transpose(y, (1, 2, 3, 0))
    if impl == "chwn":
        y = conv2d_chwn(jnp.transpose(x, (3, 1, 2, 0)), kernel, padding=padding)
        return jnp.transpose(y, (3, 1, 2, 0))
    kh, kw, c, o = kernel.shape
    if padding == "SAME":
        x = _pad_same(x, kh, kw)
    return jnp.dot(im2col(x, kh, kw), kernel.reshape(kh * kw * c, o))


def max_pool2x2(x: jax.Array, *, impl: str) -> jax.Array:
    """2x2 max-pool with stride 2 of NHWC ``x`` ('VALID': an odd last row/column is dropped).

    Axes 1 and 2 are pooled, so a batch-innermost ``[C, H, W, B]`` array pools the same.

    ``impl``: ``"window"`` (:func:`jax.lax.reduce_window`, the reference) or
    ``"reshape"`` (crop to even sizes, reshape to ``[N, H/2, 2, W/2, 2, C]``, max).
    """
    check_choice("impl", impl, ("window", "reshape"))
    if impl == "window":
        return lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    n, h, w, c = x.shape
    h2, w2 = h // 2, w // 2
    return x[:, : 2 * h2, : 2 * w2, :].reshape(n, h2, 2, w2, 2, c).max(axis=(2, 4))


def _pool_phases(x: jax.Array) -> list[jax.Array]:
    """The four 2x2 phases ``x[:, i::2, j::2, :]`` of even-sized axes 1, 2, order (i, j)."""
    return [x[:, i::2, j::2, :] for i in range(2) for j in range(2)]


@jax.custom_vjp
def _relu_pool_phases(x: jax.Array) -> jax.Array:
    # Undifferentiated (inference): reshape + max, the same values.  The phases' maximum
    # is an elementwise fusion that XLA recomputes inside each of conv2's 25 windows (a
    # 10,000-row LeNet-5 forward took 4.6 s against 1.7 s, one core).
    c, h, w, b = x.shape
    return jnp.maximum(x.reshape(c, h // 2, 2, w // 2, 2, b).max(axis=(2, 4)), 0.0)


def _relu_pool_phases_fwd(x):
    phases = _pool_phases(x)
    a, b, c, d = phases
    m = jnp.maximum(jnp.maximum(a, b), jnp.maximum(c, d))
    hits = [p == m for p in phases]
    count = sum(h.astype(x.dtype) for h in hits)
    positive = m > 0  # ReLU passes a gradient only where the maximum is > 0
    return jnp.maximum(m, 0.0), (tuple(h & positive for h in hits), count)


def _relu_pool_phases_bwd(res, g):
    hits, count = res
    share = g / count  # each tied maximum gets g / count, as jnp.max's gradient
    d = [jnp.where(h, share, 0.0) for h in hits]
    c, h2, w2, b = share.shape
    rows = [jnp.stack(d[2 * i : 2 * i + 2], axis=3) for i in range(2)]  # [C, H/2, W/2, 2, B]
    return (jnp.stack(rows, axis=2).reshape(c, 2 * h2, 2 * w2, b),)


_relu_pool_phases.defvjp(_relu_pool_phases_fwd, _relu_pool_phases_bwd)


def relu_max_pool2x2(x: jax.Array, *, impl: str) -> jax.Array:
    """``max_pool2x2(relu(x), impl=impl)``; ``impl`` may also be ``"phases"``.

    ``"phases"``: the maximum of the four strided 2x2 phases ``x[:, i::2, j::2, :]`` with a
    hand-written VJP that keeps, from the forward, each phase's tie mask (and ReLU's
    ``max > 0``) and the number of tied maxima: the backward gives each tied maximum
    ``g / count`` -- the gradient of ``relu`` then the reshape + max reference, exactly --
    through four selects interleaved back by a stack and a reshape (no scatter, no reduce,
    no recomputation of ``x``).  The same function as the others, measured for LeNet-5's
    ``"chwn"`` (whose first convolution is then an XLA one, see
    :func:`_conv_chwn_forward`) and used only where the last axis (chwn's batch B) is a
    multiple of :data:`_CHWN_LANES`; otherwise ``"phases"`` is ``"reshape"``, faster there
    (one core, CPU-ms: B = 10 client update 1.60 against 2.12; 256 per-example gradients,
    vmap of B = 1, 129 against 152).
    """
    if impl != "phases" or x.shape[-1] % _CHWN_LANES:
        return max_pool2x2(jax.nn.relu(x), impl="reshape" if impl == "phases" else impl)
    h2, w2 = x.shape[1] // 2, x.shape[2] // 2
    return _relu_pool_phases(x[:, : 2 * h2, : 2 * w2, :])
