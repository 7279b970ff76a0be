"""One privacy round at LeNet-5 size: the distributed discrete mechanisms against the continuous
distributed Gaussian, client side and aggregation, at m = 10^3, 10^4 (and 10^5) clients.

What is timed, per mode, for one round of ``m`` clients at ``d = 61,706`` (padded to
``D = 65,536`` for the discrete modes), chunk by chunk (``--chunk`` clients vmapped per step of
a ``fori_loop`` whose trip count is traced, so one compiled program serves every m):

* ``continuous`` (the ``distributed`` mode): clip to C, add the client's N(0, σ²/m) share
  (:func:`ldpsim._src.privacy.noise.mechanisms.gaussian_noise`, key ``fold_in(round, id)``),
  sum in float32; the server divides by m.
* ``ddg`` / ``skellam`` (the ``discrete`` mode): clip to C, then
  :func:`ldpsim._src.privacy.discrete.pipeline.encode` (randomized Hadamard rotation, scale by
  1/γ, conditional randomized rounding, discrete Gaussian or Skellam noise from the table
  sampler, wrap to b bits), the sum modulo 2^b in uint32 (:func:`ldpsim._src.privacy.discrete.modular.modular_sum`),
  and the server's decoding once (unwrap, unscale, unrotate).

The clients' updates are synthetic: ``--chunk`` fixed random vectors of norm 2C..3C (so every
client is clipped), reused by every chunk, so the time measured is the mechanism's alone (no
model, no data). γ and the noise are those the engine plans (``bits_needed`` at the first of
``--bits`` that fits, ε per round, δ = 1e-5, replace neighbours).

Every mode is first called once at m = ``--chunk`` (compilation + one run; reported), then
each (m, mode) is timed ``--repeats`` times (1 time for m > ``--max-repeat-m``), modes
interleaved within each repeat; the table gives the median process CPU seconds (all threads:
steadier than wall time on a shared machine) per client, the median wall seconds of the round,
and the CPU ratio to the continuous mode at the same m.

    PYTHONPATH=$PWD python benchmarks/discrete_scale.py                 # m = 10^3, 10^4
    PYTHONPATH=$PWD python benchmarks/discrete_scale.py --with-1e5      # + m = 10^5 (hours)

``ddg-ref`` / ``skellam-ref`` (not in the default ``--modes``): the same round with the
reference samplers (``encode(..., sampler="reference")``: the Canonne–Kamath–Steinke rejection
sampler, the float32 Poisson differences), for the table's gain in one run:

    PYTHONPATH=$PWD python benchmarks/discrete_scale.py --ms 1000 \
        --modes continuous,ddg,skellam,ddg-ref,skellam-ref

``--profile-sampler`` also times the parts of one ddg client's encoding separately (rotation
and rounding, the discrete Gaussian noise, the Skellam noise) at one chunk.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time

import jax
import jax.numpy as jnp
from jax import lax

from ldpsim._src.privacy.discrete import accounting as dacc
from ldpsim._src.privacy.discrete import modular, pipeline
from ldpsim._src.privacy.hadamard import rotate
from ldpsim._src.privacy.discrete.rounding import conditional_round
from ldpsim._src.privacy.discrete.samplers import discrete_gaussian, skellam, table_sample
from ldpsim._src.privacy.discrete.table import noise_table
from ldpsim._src.privacy.discrete.spec import discrete_gaussian_spec
from ldpsim._src.privacy.noise.mechanisms import gaussian_noise

LENET5_DIM = 61_706
MODES = ("continuous", "ddg", "skellam")
REF_MODES = ("ddg-ref", "skellam-ref")


def _updates(chunk: int, dim: int, clip: float) -> jax.Array:
    """``chunk`` synthetic updates of norm between 2C and 3C (all clipped)."""
    g = jax.random.normal(jax.random.key(12345), (chunk, dim), jnp.float32)
    scale = clip * (2.0 + jnp.arange(chunk, dtype=jnp.float32) / chunk)
    return g / jnp.linalg.norm(g, axis=1, keepdims=True) * scale[:, None]


def _clip(x: jax.Array, clip: float) -> jax.Array:
    n = jnp.linalg.norm(x)
    return x * jnp.minimum(1.0, jnp.float32(clip) / jnp.maximum(n, 1e-30))


def plan(kind: str, *, clients: int, dim: int, clip: float, epsilon: float, delta: float,
         bits_list) -> dacc.DiscreteMechanism:
    """The engine's planning at the first bit-width that fits (``bits_needed`` at one b)."""
    for b in bits_list:
        rep = dacc.bits_needed(kind, epsilon=epsilon, delta=delta, clients=clients, dim=dim,
                               clip=clip, bit_range=(b,), wrap_target=1e-6)
        if rep.rows:
            r = rep.rows[0]
            return dacc.DiscreteMechanism(kind, clip, r.granularity, r.noise, clients, dim, b)
    raise SystemExit(f"{kind}: no bit-width in {bits_list} fits m = {clients}")


def round_fn(mode: str, mech, *, dim: int, chunk: int, clip: float, sigma_share: float):
    """A jitted ``(round_key, n_chunks, updates) -> decoded mean`` for one mode."""
    if mode == "continuous":
        def client(key, x):
            y = _clip(x, clip)
            return y + gaussian_noise(key, y, sigma_share)

        def run(round_key, n_chunks, upd):
            def body(c, acc):
                ids = c * chunk + jnp.arange(chunk, dtype=jnp.int32)
                keys = jax.vmap(lambda i: jax.random.fold_in(round_key, i))(ids)
                return acc + jnp.sum(jax.vmap(client)(keys, upd), axis=0)

            s = lax.fori_loop(0, n_chunks, body, jnp.zeros((dim,), jnp.float32))
            return s / (n_chunks * chunk).astype(jnp.float32)

        return jax.jit(run)

    big = mech.padded_dim
    rot_key_salt = 0x5EC
    sampler = "reference" if mode.endswith("-ref") else "table"

    def client(rkey, key, x):
        y = jnp.pad(_clip(x, clip), (0, big - dim))
        report, _, _ = pipeline.encode(rkey, key, y, mech, sampler=sampler)
        return report

    def run(round_key, n_chunks, upd):
        rkey = jax.random.fold_in(round_key, rot_key_salt)

        def body(c, acc):
            ids = c * chunk + jnp.arange(chunk, dtype=jnp.int32)
            keys = jax.vmap(lambda i: jax.random.fold_in(round_key, i))(ids)
            rep = jax.vmap(client, in_axes=(None, 0, 0))(rkey, keys, upd)
            part = lax.bitcast_convert_type(modular.modular_sum(rep, mech.bits), jnp.uint32)
            return acc + part                                  # uint32: exact mod 2^32

        acc = lax.fori_loop(0, n_chunks, body, jnp.zeros((big,), jnp.uint32))
        total = modular.wrap(lax.bitcast_convert_type(acc, jnp.int32), mech.bits)
        return pipeline.decode(rkey, total, mech) / (n_chunks * chunk).astype(jnp.float32)

    return jax.jit(run)


def _timed(f, *args):
    c0, w0 = time.process_time(), time.perf_counter()
    jax.block_until_ready(f(*args))
    return time.process_time() - c0, time.perf_counter() - w0


def profile_sampler(mech_ddg, mech_sk, *, dim: int, chunk: int, clip: float, repeats: int):
    """CPU seconds per client of the encoding's parts at one chunk (median of ``repeats``)."""
    big = mech_ddg.padded_dim
    upd = jnp.pad(_updates(chunk, dim, clip), ((0, 0), (0, big - dim)))
    rkey = jax.random.key(7)
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(8), i))(jnp.arange(chunk))
    spec = discrete_gaussian_spec(mech_ddg.noise)
    tb_ddg = noise_table("ddg", mech_ddg.noise)
    tb_sk = noise_table("skellam", mech_sk.noise)
    parts = {
        "rotate+round": jax.jit(jax.vmap(lambda k, x: conditional_round(
            k, rotate(rkey, x) * jnp.float32(1 / mech_ddg.granularity),
            mech_ddg.norm_bound)[0])),
        "ddg noise (table)": jax.jit(jax.vmap(lambda k, x: table_sample(k, tb_ddg, (big,)))),
        "skellam noise (table)": jax.jit(jax.vmap(lambda k, x: table_sample(k, tb_sk, (big,)))),
        "ddg noise (CKS ref)": jax.jit(jax.vmap(lambda k, x: discrete_gaussian(k, spec, (big,)))),
        "skellam noise (PTRS ref)": jax.jit(jax.vmap(lambda k, x: skellam(k, mech_sk.noise,
                                                                          (big,)))),
        "full ddg encode": jax.jit(jax.vmap(lambda k, x: pipeline.encode(rkey, k, x,
                                                                         mech_ddg)[0])),
    }
    # inside the exact sampler (one pool of 2.5·D proposals per client, vmapped over the chunk):
    # the main path (Threefry words, digits, coins of every proposal), plus the exact
    # finishing of the few proposals whose coins need more stages, plus the compaction and fill
    from ldpsim._src.privacy.discrete import samplers as S

    prm = S._dg_params(spec)
    size = max(64, math.ceil(S._POOL * big))
    parts["dg: main path"] = jax.jit(jax.vmap(lambda k, x: S._finish(
        S._bulk(k, prm, jnp.int32(0), lax.iota(jnp.uint32, size)), prm)[1]))
    parts["dg: + finishing"] = jax.jit(jax.vmap(lambda k, x: S._dg_attempt(
        k, prm, jnp.int32(0), size)[1]))
    parts["dg: + fill (all)"] = jax.jit(jax.vmap(lambda k, x: S._dg_piece(k, prm, (big,))))
    for f in parts.values():
        jax.block_until_ready(f(keys, upd))
    out = {}
    for name, f in parts.items():
        out[name] = statistics.median(_timed(f, keys, upd)[0] for _ in range(repeats)) / chunk
    print(f"\nencoding parts at one chunk of {chunk} clients (CPU s per client, median of "
          f"{repeats}):")
    for name, v in out.items():
        print(f"  {name:16s} {v:.4g}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ms", default="1000,10000", help="comma-separated clients per round")
    ap.add_argument("--with-1e5", action="store_true", help="also m = 100,000 (hours on 2 cores)")
    ap.add_argument("--dim", type=int, default=LENET5_DIM)
    ap.add_argument("--chunk", type=int, default=8, help="clients vmapped per step")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-repeat-m", type=int, default=1000,
                    help="above this m each (m, mode) is timed once")
    ap.add_argument("--epsilon", type=float, default=4.0, help="epsilon per round")
    ap.add_argument("--delta", type=float, default=1e-5)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--bits", default="16,18,20,24,32",
                    help="bit-widths tried in order: the first that fits is used")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--profile-sampler", action="store_true",
                    help="also time the encoding's parts and the sampler's stages")
    ap.add_argument("--profile-only", action="store_true",
                    help="only the parts' timing (planned at the first m), no round")
    args = ap.parse_args(argv)
    ms = [int(float(x)) for x in args.ms.split(",")]
    if args.with_1e5 and 100_000 not in ms:
        ms.append(100_000)
    modes = [m for m in args.modes.split(",") if m]
    bits_list = [int(b) for b in args.bits.split(",")]
    for m in ms:
        if m % args.chunk:
            raise SystemExit(f"m = {m} is not a multiple of --chunk {args.chunk}")
    print(f"jax {jax.__version__}, {jax.devices()[0].platform}, d = {args.dim:,}, chunk "
          f"{args.chunk}, epsilon {args.epsilon:g}/round, delta {args.delta:g}, C {args.clip:g}",
          flush=True)
    if args.profile_only:
        kw = dict(clients=ms[0], dim=args.dim, clip=args.clip, epsilon=args.epsilon,
                  delta=args.delta, bits_list=bits_list)
        profile_sampler(plan("ddg", **kw), plan("skellam", **kw), dim=args.dim,
                        chunk=args.chunk, clip=args.clip, repeats=args.repeats)
        return 0
    upd = _updates(args.chunk, args.dim, args.clip)
    fns, mechs = {}, {}
    for m in ms:
        for mode in modes:
            if mode == "continuous":
                var = dacc.gaussian_central_variance(args.epsilon, args.delta, 1, args.clip)
                mech, share = None, math.sqrt(var / m)
            else:
                mech, share = plan(mode.removesuffix("-ref"), clients=m, dim=args.dim, clip=args.clip,
                                   epsilon=args.epsilon, delta=args.delta,
                                   bits_list=bits_list), 0.0
                print(f"  {mode} m = {m}: bits {mech.bits}, gamma {mech.granularity:.4g}, noise "
                      f"{mech.noise:.4g} per client, wrap <= "
                      f"{dacc.wrap_probability(mech):.2g}", flush=True)
            mechs[(m, mode)] = mech
            fns[(m, mode)] = round_fn(mode, mech, dim=args.dim, chunk=args.chunk,
                                      clip=args.clip, sigma_share=share)
    # warm-up: compile and run every program once at one chunk
    print("\nfirst call (compile + one chunk):", flush=True)
    key = jax.random.key(0)
    for (m, mode), f in fns.items():
        c, w = _timed(f, key, jnp.int32(1), upd)
        print(f"  m = {m:>7,} {mode:10s} CPU {c:7.2f} s, wall {w:7.2f} s", flush=True)
    times: dict = {k: [] for k in fns}
    for m in ms:
        reps = args.repeats if m <= args.max_repeat_m else 1
        for r in range(reps):
            for mode in modes:
                c, w = _timed(fns[(m, mode)], jax.random.key(r + 1), jnp.int32(m // args.chunk),
                              upd)
                times[(m, mode)].append((c, w))
                print(f"  m = {m:>7,} {mode:10s} repeat {r}: CPU {c:9.2f} s, wall {w:9.2f} s",
                      flush=True)
    print(f"\n| m | mode | bits | CPU s / client (median) | round wall s (median) | "
          f"CPU ratio to continuous | repeats |")
    print("|---|---|---|---|---|---|---|")
    for m in ms:
        base = statistics.median(c for c, _ in times[(m, "continuous")]) \
            if "continuous" in modes else math.nan
        for mode in modes:
            cs = [c for c, _ in times[(m, mode)]]
            ws = [w for _, w in times[(m, mode)]]
            mech = mechs[(m, mode)]
            print(f"| {m:,} | {mode} | {mech.bits if mech else 32} | "
                  f"{statistics.median(cs) / m:.3g} | {statistics.median(ws):.1f} | "
                  f"{statistics.median(cs) / base:.1f} | {len(cs)} |")
    if args.profile_sampler and "ddg" in modes and "skellam" in modes:
        profile_sampler(mechs[(ms[0], "ddg")], mechs[(ms[0], "skellam")], dim=args.dim,
                        chunk=args.chunk, clip=args.clip, repeats=args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
