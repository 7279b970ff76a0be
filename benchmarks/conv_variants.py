"""Every LeNet-5 convolution and max-pooling formulation ldpsim has measured, and their benchmark.

``ldpsim.models`` keeps two formulations (``ldpsim/_src/models/_layers.py``): ``"xla"``
(``lax.conv_general_dilated`` + ``lax.reduce_window``: accelerators, and the reference)
and ``"mixed"`` (CPU: conv1 channels-first patches, conv2 im2col, reshape-max pooling).
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
  ``"im2col"`` -- what ``ldpsim.models`` runs on CPU.
* ``"xla"``: :func:`jax.lax.conv_general_dilated`.

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
LENET_CONV_IMPLS = CONV_IMPLS + ("mixed",)
POOL_IMPLS = ("reshape", "window", "slices")
KEPT_CONV = ("auto", "mixed", "xla")  # what ldpsim.models.lenet5 accepts
KEPT_POOL = ("auto", "reshape", "window")


# --------------------------------------------------------------------------- formulations


# The kept formulations are the package's own (one copy of the code): the SAME padding,
# im2col / channels-first patches with their in-place col2im VJPs, and the CNHW conv.
# im2col_autodiff is the package's im2col without its hand-written VJP.
from ldpsim._src.models._layers import _im2col as im2col_autodiff  # noqa: E402
from ldpsim._src.models._layers import _pad_same, conv2d_cnhw, im2col  # noqa: E402


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


# --------------------------------------------------------------------------- LeNet-5


class Conv2D(nn.Module):
    """Stride-1 convolution, HWIO ``kernel`` and ``bias`` (the param tree of ldpsim's LeNet-5)."""

    features: int
    kernel_size: int
    padding: str = "VALID"
    use_bias: bool = True
    impl: str = "xla"
    channels_first: bool = False  # x is [C, N, H, W] (impl "cnhw" only); else NHWC

    @nn.compact
    def __call__(self, x):
        k = self.kernel_size
        c = x.shape[0] if self.channels_first else x.shape[-1]
        kernel = self.param("kernel", nn.initializers.lecun_normal(),
                            (k, k, c, self.features), jnp.float32)
        if self.channels_first:
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
        conv_impl = "mixed" if cpu else "xla"
    if pool_impl == "auto":
        pool_impl = "reshape" if cpu else "window"
    if conv_impl not in LENET_CONV_IMPLS or pool_impl not in POOL_IMPLS:
        raise ValueError(f"conv_impl must be one of {LENET_CONV_IMPLS} and pool_impl one of "
                         f"{POOL_IMPLS}; got {conv_impl!r}, {pool_impl!r}")
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
    x = jax.random.normal(key, (2, 7, 6, 3))
    want = np.asarray(x)[:, :6, :6, :].reshape(2, 3, 2, 3, 2, 3).max(axis=(2, 4))
    for impl in POOL_IMPLS:
        np.testing.assert_array_equal(max_pool2x2(x, impl=impl), want)
        cf = max_pool2x2(jnp.transpose(x, (3, 0, 1, 2)), impl=impl, spatial=(2, 3))
        np.testing.assert_array_equal(jnp.transpose(cf, (1, 2, 3, 0)), want)
    print(f"all {len(CONV_IMPLS)} conv and {len(POOL_IMPLS)} pool formulations match the "
          "lax reference (value and VJP)")


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
