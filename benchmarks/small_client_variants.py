"""LeNet-5 local training in the seed-000 client shape, by formulation (training only).

Workload: LeNet-5 (61,706 params), M clients of 3 random 28x28x1 images, 3 local SGD
steps of batch 3 (lr 0.1) from the same global weights (passed as an argument, as the
engine does), run as one jitted ``lax.scan`` over chunks of clients (chunk 1 = one
client per iteration, the CPU engine's default; chunk k vmaps k clients); each program
returns the sum of the M client updates.  No clipping, noise or aggregation weights
(``small_clients.py`` times whole rounds).  All programs are compiled first, then run
round-robin ``--repeats`` times; the table gives the median CPU time (all threads,
``time.process_time``) and wall time per client, and each variant's largest relative
deviation from the first variant's summed update (float rounding only).

Variants (``name:chunk``, e.g. ``base:1 ghost:1 ghost:16``):

* ``base``: ``ldpsim.fl.local_update`` with today's ``lenet5`` (``"chwn"`` on CPU).
* ``mixed`` / ``xla``: ``lenet5(conv_impl=...)`` with pooling ``"reshape"``.
* ``col2im-pads``: ``base`` with conv2's input gradient (col2im) as one fused sum of
  25 padded windows instead of 25 in-place adds.
* ``ghost``: the dense layers never materialised per step.  With batch B each SGD step
  changes a dense kernel by a rank-B term, ``W_s = W_0 - lr sum_{t<s} A_t^T G_t``
  (``A_t``: the layer's input rows, ``G_t``: the loss gradient at its output, read off
  a zero "probe" added to the output), so step s computes ``X_s W_0 - lr (X_s A^T) G``,
  the input gradient ``g W_0^T - lr (g G^T) A`` (``W_0^T`` formed once per program) and
  the delta ``-lr A^T G`` once at the end.  The convolutions are chwn's, updated per
  step.  Exact in exact arithmetic (same delta to float rounding).
* ``shared1``: the chunk's first local step batched over its clients, then the rest one
  client at a time.  Every client starts from the same global weights, so step 1 is
  ``vmap`` of the gradient with the weights unbatched (one forward product over chunk x
  batch rows, per-client weight gradients only); the clients' remaining steps (their
  weights now differ) run as a ``lax.scan`` over the chunk, one client per iteration.
  ``shared1:1`` is ``base:1`` written by hand (plain SGD, no optimizer state).

Measured 2026-11-28 (2-core AMD EPYC, load average 5-13 from other jobs): see
``benchmarks/README.md``, "Where a round's time goes, by layer".

Run:  PYTHONPATH=. python benchmarks/small_client_variants.py --m 256 --repeats 7 \\
          base:1 ghost:1 ghost:16 col2im-pads:1 mixed:1
      PYTHONPATH=. python benchmarks/small_client_variants.py --m 512 --repeats 5 \\
          base:1 shared1:1 shared1:4 shared1:16 shared1:64
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax

from ldpsim._src import _xla
from ldpsim._src.fl.client import client_optimizer, local_update
from ldpsim._src.models import _layers
from ldpsim._src.models._layers import conv2d_chwn, relu_max_pool2x2
from ldpsim.models import get_model

EXAMPLES, BATCH, STEPS, LR = 3, 3, 3, 0.1
FC = ("fc1", "fc2", "fc3")


# ----------------------------------------------------------------- col2im as one fusion


def _conv_chwn_pads():
    """chwn's conv (patch forward, the B % 16 != 0 path) whose col2im is a sum of pads."""

    @jax.custom_vjp
    def conv(x, kernel):
        return _layers._conv_chwn_forward(x, kernel)

    def fwd(x, kernel):
        return _layers._conv_chwn_forward(x, kernel), (x, kernel)

    def bwd(res, g):
        x, kernel = res
        kh, kw, c, o = kernel.shape
        _, ho, wo, b = g.shape
        _, h, w, _ = x.shape
        p = jnp.concatenate(_layers._windows_chwn(x, kh, kw), 0).reshape(kh * kw * c, -1)
        dk = (p @ g.reshape(o, -1).T).reshape(kh, kw, c, o)
        dp = (kernel.reshape(kh * kw * c, o) @ g.reshape(o, -1)).reshape(kh, kw, c, ho, wo, b)
        dx = sum(jnp.pad(dp[i, j], ((0, 0), (i, h - ho - i), (j, w - wo - j), (0, 0)))
                 for i in range(kh) for j in range(kw))
        return dx, dk

    conv.defvjp(fwd, bwd)
    return conv


# ----------------------------------------------------------------- low-rank dense layers


@jax.custom_vjp
def _dense_fixed(a, w, wt):
    """``a @ w`` for a weight that is not differentiated; input gradient ``g @ wt``."""
    return a @ w


def _dense_fixed_fwd(a, w, wt):
    return a @ w, wt


def _dense_fixed_bwd(wt, g):
    return g @ wt, None, None


_dense_fixed.defvjp(_dense_fixed_fwd, _dense_fixed_bwd)


def _trunk(tp, x):
    x = jnp.transpose(x.reshape(x.shape[0], 28, 28, 1), (3, 1, 2, 0))
    x = conv2d_chwn(x, tp["conv1"]["kernel"], padding="SAME") + tp["conv1"]["bias"][:, None, None, None]
    x = relu_max_pool2x2(x, impl="phases")
    x = conv2d_chwn(x, tp["conv2"]["kernel"], padding="VALID") + tp["conv2"]["bias"][:, None, None, None]
    x = relu_max_pool2x2(x, impl="phases")
    return jnp.transpose(x, (3, 1, 2, 0)).reshape(x.shape[-1], -1)


def ghost_update(params, wts, x, y, lr, steps):
    """One client's delta (all rows valid, one batch per step): see the module docstring."""
    tp = {k: params[k] for k in ("conv1", "conv2")}
    bias = {k: params[k]["bias"] for k in FC}
    hist = {k: ([], []) for k in FC}
    b = x.shape[0]

    def loss_fn(tp, bias, probes, past):
        a, inputs = _trunk(tp, x), []
        for i, k in enumerate(FC):
            inputs.append(a)
            z = _dense_fixed(a, params[k]["kernel"], wts[k]) + bias[k] + probes[i]
            if past[k] is not None:
                A, G = past[k]
                z = z - lr * ((a @ A.T) @ G)
            a = jax.nn.relu(z) if i < 2 else z
        return jnp.mean(optax.losses.softmax_cross_entropy_with_integer_labels(a, y)), inputs

    for _ in range(steps):
        past = {k: (jnp.concatenate(hist[k][0]), jnp.concatenate(hist[k][1]))
                if hist[k][0] else None for k in FC}
        probes = [jnp.zeros((b, params[k]["kernel"].shape[1])) for k in FC]
        (_, inputs), (gtp, gb, gp) = jax.value_and_grad(
            loss_fn, argnums=(0, 1, 2), has_aux=True)(tp, bias, probes, past)
        tp = jax.tree_util.tree_map(lambda p, g: p - lr * g, tp, gtp)
        bias = {k: bias[k] - lr * gb[k] for k in FC}
        for i, k in enumerate(FC):
            hist[k][0].append(inputs[i])
            hist[k][1].append(gp[i])
    delta = {k: jax.tree_util.tree_map(jnp.subtract, tp[k], params[k]) for k in ("conv1", "conv2")}
    for k in FC:
        A, G = jnp.concatenate(hist[k][0]), jnp.concatenate(hist[k][1])
        delta[k] = {"kernel": -lr * (A.T @ G), "bias": bias[k] - params[k]["bias"]}
    return delta


# ----------------------------------------------------------------- harness


def build(name: str, chunk: int, m: int):
    """A jitted ``(params, X, Y) -> sum of deltas`` for variant ``name`` at ``chunk``."""
    opt = client_optimizer("sgd", LR)
    if name == "shared1":
        return _build_shared_first_step(chunk, m)
    if name == "ghost":
        def one(params, wts, x, y, k):
            return ghost_update(params, wts, x, y, LR, STEPS)
    else:
        if name in ("mixed", "xla"):
            apply = get_model("lenet5", input_shape=(28, 28, 1), num_classes=10,
                              conv_impl=name, pool_impl="reshape").apply
        else:
            apply = get_model("lenet5", input_shape=(28, 28, 1), num_classes=10).apply

        def one(params, wts, x, y, k):
            return local_update(params, x, y, jnp.int32(EXAMPLES), apply_fn=apply,
                                optimizer=opt, batch_size=BATCH, key=k, local_steps=STEPS)[0]

    def f(params, X, Y):
        wts = {k: params[k]["kernel"].T for k in FC}
        keys = jax.random.split(jax.random.key(1), m)

        def body(acc, inp):
            d = jax.vmap(one, in_axes=(None, None, 0, 0, 0))(params, wts, *inp)
            return jax.tree_util.tree_map(lambda a, b: a + b.sum(0), acc, d), None

        zero = jax.tree_util.tree_map(jnp.zeros_like, params)
        n = m // chunk
        return lax.scan(body, zero, (X.reshape(n, chunk, *X.shape[1:]),
                                     Y.reshape(n, chunk, EXAMPLES), keys.reshape(n, chunk)))[0]

    jitted = jax.jit(f, compiler_options=_xla.compiler_options())
    if name != "col2im-pads":
        return jitted

    def with_pads(*args):   # the conv is looked up when the program is traced
        orig = _layers._conv_chwn_valid
        _layers._conv_chwn_valid = _PADS
        try:
            return jitted(*args)
        finally:
            _layers._conv_chwn_valid = orig
    return with_pads


_PADS = _conv_chwn_pads()


def _build_shared_first_step(chunk: int, m: int):
    apply = get_model("lenet5", input_shape=(28, 28, 1), num_classes=10).apply

    def grad(p, x, y):
        return jax.grad(lambda q: jnp.mean(
            optax.losses.softmax_cross_entropy_with_integer_labels(apply(q, x), y)))(p)

    sgd = lambda p, g: jax.tree_util.tree_map(lambda w, d: w - LR * d, p, g)

    def f(params, X, Y):
        def body(acc, inp):
            x, y = inp
            g1 = jax.vmap(grad, in_axes=(None, 0, 0))(params, x, y)   # shared weights

            def rest(acc, a):
                g1k, xk, yk = a
                q = sgd(params, g1k)
                for _ in range(STEPS - 1):
                    q = sgd(q, grad(q, xk, yk))
                return jax.tree_util.tree_map(lambda s, w, w0: s + (w - w0), acc, q, params), None

            return lax.scan(rest, acc, (g1, x, y))[0], None

        zero = jax.tree_util.tree_map(jnp.zeros_like, params)
        n = m // chunk
        return lax.scan(body, zero, (X.reshape(n, chunk, *X.shape[1:]),
                                     Y.reshape(n, chunk, EXAMPLES)))[0]

    return jax.jit(f, compiler_options=_xla.compiler_options())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("variants", nargs="+", help="name:chunk (base, mixed, xla, col2im-pads, ghost, shared1)")
    p.add_argument("--m", type=int, default=256, help="clients (a multiple of every chunk)")
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args(argv)
    model = get_model("lenet5", input_shape=(28, 28, 1), num_classes=10)
    params = model.init(jax.random.key(0), jnp.zeros((1, 28, 28, 1)))
    rng = np.random.default_rng(0)
    X = jnp.asarray(rng.random((args.m, EXAMPLES, 28, 28, 1), np.float32))
    Y = jnp.asarray(rng.integers(0, 10, (args.m, EXAMPLES)), jnp.int32)
    fns, outs = {}, {}
    for v in args.variants:
        name, chunk = v.split(":")
        fns[v] = build(name, int(chunk), args.m)
        c0 = time.process_time()
        outs[v] = jax.block_until_ready(fns[v](params, X, Y))
        print(f"{v}: first call {time.process_time() - c0:.1f} CPU-s", flush=True)
    ref = jax.tree_util.tree_leaves(outs[args.variants[0]])
    times = {v: [] for v in fns}
    for _ in range(args.repeats):
        for v, f in fns.items():
            c0, t0 = time.process_time(), time.perf_counter()
            jax.block_until_ready(f(params, X, Y))
            times[v].append((time.process_time() - c0, time.perf_counter() - t0))
    print("\n| variant | CPU-ms / client | wall-ms / client | max rel. deviation |\n|---|---:|---:|---:|")
    for v, ts in times.items():
        dev = max(float(jnp.max(jnp.abs(a - b)) / jnp.max(jnp.abs(b)))
                  for a, b in zip(jax.tree_util.tree_leaves(outs[v]), ref))
        print(f"| {v} | {1e3 * statistics.median(t[0] for t in ts) / args.m:.3f} | "
              f"{1e3 * statistics.median(t[1] for t in ts) / args.m:.3f} | {dev:.1e} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
