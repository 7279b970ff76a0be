"""The secure-aggregation frontier: error of the decoded mean of the distributed discrete
mechanisms against the bit-width b and ε, beside the continuous distributed Gaussian.

For one round of ``n`` clients, each holding the same input ``x = C·u`` (``u`` the frontier's
common unit vector, :func:`.frontier.common_input`; norm C, so nothing is clipped and the
signal is the largest the clip allows), the server decodes the mean of the clients' updates
from the sum modulo ``2^b`` of their integer reports (:mod:`ldpsim._src.privacy.discrete`:
rotate, scale by ``1/γ``, round conditionally, add discrete Gaussian (``ddg``) or Skellam noise,
wrap; sum modulo ``2^b``; unwrap, unscale, unrotate). γ and the noise are the engine's plan
(:func:`plan_mechanism`: the finest γ whose wrap bound is at most ``wrap_target``, the least
noise reaching ``(ε, δ)`` for the round, replace neighbours).

**The exact MSE of the decoded mean** (docs/distributed_discrete.md, "The decoded mean's
error"). With the rotation ``U = diag(s)·H/√D`` fixed (the round's public key), ``y = U^T x/γ``
the scaled rotated input (computed in float32 as the encoder does), ``f_j = y_j − ⌊y_j⌋`` and
``p_j = ⌊2³²f_j⌋/2³²`` the rounding coin's probability, the decoded mean's error when no
coordinate wraps is ``e = (γ/n)·[U(Σ_i r_i + Z)]_{1..d}`` with ``r_i`` the clients' independent
rounding errors (mean ``p − f``, variance ``p_j(1 − p_j)``) and ``Z`` the summed noise (variance
``n·σ̂²`` per coordinate, σ̂² the variance the sampler realises). Every entry of ``U`` is
``±1/√D``, so

    E‖e‖² = γ²·d·σ̂²/n  +  γ²·(d/D)·Σ_j p_j(1 − p_j)/n  +  γ²·‖[U(p − f)]_{1..d}‖²

(``mse_noise``, ``mse_rounding`` with the last, ≤ γ²·D·2⁻⁶⁴, term included; ``mse_theory`` their
sum). The conditional rounding's rejection (probability ≤ β per try) changes it by a relative
``O(β)`` (β = 2⁻²⁰). The wrap adds an error whose expected squared norm is at most
``mse_wrap_bound`` (:func:`ldpsim._src.privacy.discrete.accounting.wrap_mse_bound` × γ²/n²), and
a wrap happens with probability at most ``wrap_probability``; by Minkowski the MSE lies in
``[(√A − √B)², (√A + √B)²]``, A = ``mse_theory``, B = ``mse_wrap_bound``.

**The reference** ``mse_continuous = d·σ_c²/n²``: the continuous distributed Gaussian with
central variance σ_c² on the sum at the same (ε, δ), by the same RDP bound and conversion
(:func:`ldpsim._src.privacy.discrete.accounting.gaussian_central_variance`), so that
``ratio_to_continuous`` is the price of the discretisation alone. ``bits_sent = b·D``: one
client's message (the continuous mode's float32 shares are ``32·d`` bits, and cannot be summed
by secure aggregation).

**The Monte-Carlo** (:func:`measure`, ``trials > 0``): the real pipeline, ``n`` clients
(:func:`ldpsim._src.privacy.discrete.pipeline.encode`), the sum modulo ``2^b`` in uint32 chunk
by chunk (vmap within a chunk, ``lax.scan`` over chunks), the server's decoding
(:func:`ldpsim._src.privacy.discrete.pipeline.decode`), ``‖decoded/n − x‖²`` per trial. Keys by
position: rotation ``fold_in(root, ROTATION_TAG)`` (the same for every trial: the theory is
conditional on it), client ``i`` of trial ``t`` ``fold_in(fold_in(fold_in(root, tag), t), i)``.
It also counts the coordinates whose exact integer sum wrapped (``wrapped_fraction``).

References: Kairouz, Liu & Steinke, "The Distributed Discrete Gaussian Mechanism for Federated
Learning with Secure Aggregation", ICML 2021 (arXiv:2102.06387); Agarwal, Kairouz & Liu, "The
Skellam Mechanism for Differentially Private Federated Learning", NeurIPS 2021
(arXiv:2110.04995).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
import zlib
from typing import Any, Callable, Iterable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ldpsim._src import _xla
from ldpsim._src._checks import (
    LdpsimError,
    check_choice,
    check_nonnegative,
    check_open_unit,
    check_positive,
    check_positive_int,
)
from ldpsim._src.privacy.discrete import accounting as dacc

__all__ = ["MECHANISMS", "DEFAULT_BITS", "DEFAULT_WRAP_TARGET", "DiscreteFrontierRow",
           "plan_mechanism", "theory", "measure", "frontier_cell", "discrete_frontier",
           "kurtosis_bound", "mse_sd_bound"]

MECHANISMS = dacc.MECHANISMS
#: Bit-widths of the default grid.
DEFAULT_BITS = (12, 14, 16, 18, 20)
#: The engine's wrap target (``ldpsim._src.fl.planning.SECAGG_WRAP_TARGET``).
DEFAULT_WRAP_TARGET = 1e-6
#: Elements of int32 per chunk of clients (chunk·D).
CHUNK_ELEMENTS = 2**20
ROTATION_TAG = 0x2D07
_INPUT_TAG = 0x7F3A          # the LDP frontier's input stream: the same common direction


def _tag(name: str) -> int:
    return (zlib.crc32(("secagg-" + name).encode()) & 0x3FFFFFFF) | 0x40000000


def plan_mechanism(mechanism: str, *, bits: int, epsilon: float, delta: float, clients: int,
                   dim: int, clip: float = 1.0, wrap_target: float = DEFAULT_WRAP_TARGET,
                   neighbours: str = "replace") -> dacc.DiscreteMechanism:
    """The engine's plan at ``bits``: the finest γ whose wrap bound is ``≤ wrap_target`` and the
    least noise making one round ``(ε, δ)``-DP (:func:`.accounting.bits_needed` at one b).

    Raises:
        LdpsimError: bits outside [2, 32], or too few bits: no γ keeps the n-client sum inside
            b bits (the message names the least bit-width that fits, up to 32).
    """
    check_choice("mechanism", mechanism, MECHANISMS)
    if isinstance(bits, bool) or int(bits) != bits or not 2 <= int(bits) <= 32:
        raise LdpsimError(f"bits must be an integer in [2, 32], got {bits!r}")
    bits = int(bits)
    kw = dict(epsilon=check_positive("epsilon", epsilon), delta=check_open_unit("delta", delta),
              clients=check_positive_int("clients", clients), dim=check_positive_int("dim", dim),
              clip=check_positive("clip", clip), wrap_target=wrap_target, neighbours=neighbours)
    rep = dacc.bits_needed(mechanism, bit_range=(bits,), **kw)
    if not rep.rows:
        least = None
        for b in range(bits + 1, 33):
            if dacc.bits_needed(mechanism, bit_range=(b,), **kw).rows:
                least = b
                break
        hint = (f"the least that fits is {least} bits" if least is not None
                else "no bit-width up to 32 fits")
        raise LdpsimError(
            f"{mechanism} at {bits} bits cannot fit: no granularity keeps the sum of {clients} "
            f"clients (d = {dim}, clip {clip:g}, epsilon {epsilon:g}) inside {bits} bits with "
            f"wrap probability <= {wrap_target:g}; {hint}")
    r = rep.rows[0]
    return dacc.DiscreteMechanism(mechanism, float(clip), r.granularity, r.noise, int(clients),
                                  int(dim), bits, neighbours=neighbours)


def _input(seed: int, dim: int, clip: float) -> jax.Array:
    g = jax.random.normal(jax.random.fold_in(jax.random.key(seed), _INPUT_TAG), (dim,),
                          jnp.float32)
    return g / jnp.linalg.norm(g) * jnp.float32(clip)


def _rotation_key(seed: int) -> jax.Array:
    return jax.random.fold_in(jax.random.key(seed), ROTATION_TAG)


@functools.lru_cache(maxsize=32)
def _rounding_parts(padded_dim: int, dim: int) -> Callable:
    from ldpsim._src.privacy.hadamard import rotate, unrotate

    def parts(rkey, x, inv_gamma):
        y = rotate(rkey, jnp.pad(x, (0, padded_dim - dim))) * inv_gamma   # as encode computes
        f = y - jnp.floor(y)
        thresh = (f * jnp.float32(2.0**32)).astype(jnp.uint32)            # rounding's coin
        return f, thresh, unrotate(rkey, thresh.astype(jnp.float32) * jnp.float32(2.0**-32) - f)

    return jax.jit(parts)


def theory(mech: dacc.DiscreteMechanism, *, seed: int = 0) -> dict[str, float]:
    """The exact MSE of the decoded mean and its parts (module docstring) for the common input
    ``C·u`` of ``seed`` and the rotation of ``seed``: ``mse_noise``, ``mse_rounding``,
    ``mse_theory`` (their sum), ``mse_wrap_bound``, ``wrap_probability`` and ``v_max`` (the
    largest per-coordinate variance of the integer sum, for :func:`mse_sd_bound`)."""
    n, d, big = mech.clients, mech.dim, mech.padded_dim
    g2 = float(mech.granularity) ** 2
    x = _input(seed, d, mech.clip)
    f, thresh, bias_rot = _rounding_parts(big, d)(_rotation_key(seed), x,
                                                  jnp.float32(1.0 / mech.granularity))
    p = np.asarray(thresh, np.float64) / 2.0**32
    pq = p * (1.0 - p)
    b = np.asarray(bias_rot, np.float64)[:d]
    var = mech.client_variance
    noise = g2 * d * var / n
    rounding = g2 * (d / big) * float(pq.sum()) / n + g2 * float(b @ b)
    return dict(mse_noise=noise, mse_rounding=rounding, mse_theory=noise + rounding,
                mse_wrap_bound=g2 * dacc.wrap_mse_bound(mech) / n**2,
                wrap_probability=dacc.wrap_probability(mech),
                v_max=n * (var + float(pq.max())), kappa4=kurtosis_bound(mech, pq))


def _dg_fourth_cumulant(variance: float) -> float:
    """|κ₄| of N_Z(0, v) from its pmf (float64 sums over |z| ≤ 40√v + 10)."""
    lim = int(40 * math.sqrt(variance)) + 10
    z = np.arange(-lim, lim + 1, dtype=np.float64)
    w = np.exp(-z * z / (2 * variance))
    w /= w.sum()
    m2, m4 = float(w @ z**2), float(w @ z**4)
    return abs(m4 - 3 * m2 * m2)


def kurtosis_bound(mech: dacc.DiscreteMechanism, pq: np.ndarray) -> float:
    """``Σ_j |κ₄(T_j)|`` over the ``D`` coordinates of the integer sum: the rounding's
    ``n·p(1−p)·|1 − 6p(1−p)|`` plus the noise's (Skellam: ``n·μ``, its even cumulants are μ;
    discrete Gaussian: ``n·pieces·|κ₄|`` of one piece, from its pmf)."""
    n, big = mech.clients, mech.padded_dim
    rounding = n * float(np.sum(pq * np.abs(1 - 6 * pq)))
    if mech.mechanism == "skellam":
        noise = n * big * mech.client_variance
    else:
        from ldpsim._src.privacy.discrete.spec import discrete_gaussian_spec

        spec = discrete_gaussian_spec(mech.noise)
        noise = n * big * spec.pieces * _dg_fourth_cumulant(spec.piece_variance)
    return rounding + noise


def mse_sd_bound(mech: dacc.DiscreteMechanism, th: dict[str, float]) -> float:
    """An upper bound on the standard deviation of one trial's ``‖e‖²`` (no wrap): for
    ``e = A·w``, ``w`` the integer sum's centred coordinates (independent, variances ``v_j``,
    fourth cumulants ``κ_j``), ``Var‖e‖² = 2 tr((BΣ)²) + Σ_j κ_j B_jj²`` with ``B = AᵀA``;
    ``B ⪯ (γ/n)² I`` gives ``2 tr((BΣ)²) ≤ 2(γ/n)² v_max·E‖e‖²``, and ``B_jj = (γ/n)²·d/D``."""
    g2n = float(mech.granularity) ** 2 / mech.clients**2
    bjj = g2n * mech.dim / mech.padded_dim
    var = 2 * g2n * th["v_max"] * th["mse_theory"] + bjj * bjj * th["kappa4"]
    return math.sqrt(var)


def default_chunk(padded_dim: int, clients: int) -> int:
    return max(1, min(int(clients), CHUNK_ELEMENTS // int(padded_dim)))


@functools.lru_cache(maxsize=32)
def _kernel(mech: dacc.DiscreteMechanism, chunk: int) -> Callable:
    """``(rkey, tkey, x) -> (error of the decoded mean float32[d], wrapped coordinates)``."""
    from ldpsim._src.privacy.discrete import modular, pipeline

    n, d, big, bits = mech.clients, mech.dim, mech.padded_dim, mech.bits
    n_chunks = -(-n // chunk)

    def run(rkey, tkey, x):
        xp = jnp.pad(x, (0, big - d))
        ids = jnp.arange(n_chunks * chunk, dtype=jnp.int32).reshape(n_chunks, chunk)

        def one(i):
            report, v, _ = pipeline.encode(rkey, jax.random.fold_in(tkey, i), xp, mech)
            return report, v + modular.wrap(report - v, bits)   # exact while |noise| < 2^(b-1)

        def step(carry, cids):
            acc, exact = carry
            rep, ex = jax.vmap(one)(cids)
            valid = (cids < n)[:, None]
            rep = jnp.where(valid, rep, 0)
            acc = acc + lax.bitcast_convert_type(modular.modular_sum(rep, bits), jnp.uint32)
            return (acc, exact + jnp.sum(jnp.where(valid, ex, 0), axis=0)), None

        init = (jnp.zeros((big,), jnp.uint32), jnp.zeros((big,), jnp.int32))
        (acc, exact), _ = lax.scan(step, init, ids)
        total = modular.wrap(lax.bitcast_convert_type(acc, jnp.int32), bits)
        err = pipeline.decode(rkey, total, mech) / jnp.float32(n) - x
        half = 2 ** (bits - 1)
        wrapped = jnp.sum((exact < -half) | (exact >= half)) if bits < 32 else jnp.int32(0)
        return err, wrapped

    return _xla.jit(run)


def measure(mech: dacc.DiscreteMechanism, *, trials: int, seed: int = 0,
            chunk: int | None = None) -> dict[str, Any]:
    """Monte-Carlo of the real pipeline (module docstring): ``mse`` (mean over trials of
    ``‖decoded mean − x‖²``), ``mse_se`` (its standard error, NaN for one trial), ``mse_trials``
    and ``wrapped_fraction`` (coordinates of the exact integer sum outside the b-bit range, over
    all trials)."""
    trials = check_positive_int("trials", trials)
    chunk = default_chunk(mech.padded_dim, mech.clients) if chunk is None \
        else min(check_positive_int("chunk", chunk), mech.clients)
    f = _kernel(mech, int(chunk))
    x = _input(seed, mech.dim, mech.clip)
    root = jax.random.fold_in(jax.random.key(seed), _tag(mech.mechanism))
    mses, wrapped = [], 0
    for t in range(trials):
        err, w = f(_rotation_key(seed), jax.random.fold_in(root, t), x)
        e = np.asarray(err, np.float64)
        mses.append(float(e @ e))
        wrapped += int(w)
    se = float(np.std(mses, ddof=1) / math.sqrt(trials)) if trials > 1 else math.nan
    return dict(mse=float(np.mean(mses)), mse_se=se, mse_trials=mses, chunk=int(chunk),
                wrapped_fraction=wrapped / (trials * mech.padded_dim))


@dataclasses.dataclass(frozen=True)
class DiscreteFrontierRow:
    """One cell (the CSV row, :meth:`as_dict`)."""

    mechanism: str
    bits: int
    epsilon: float
    delta: float
    dim: int
    padded_dim: int
    clients: int
    clip: float
    granularity: float
    noise: float
    client_variance: float
    mse_theory: float
    mse_noise: float
    mse_rounding: float
    mse_wrap_bound: float
    wrap_probability: float
    mse_continuous: float
    ratio_to_continuous: float
    bits_sent: int
    mse: float
    mse_se: float
    mse_sd_bound: float
    wrapped_fraction: float
    trials: int
    seed: int
    chunk: int
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


COLUMNS = tuple(f.name for f in dataclasses.fields(DiscreteFrontierRow))


def frontier_cell(mechanism: str, *, bits: int, epsilon: float, clients: int, dim: int,
                  clip: float = 1.0, delta: float = 1e-5, trials: int = 0, seed: int = 0,
                  chunk: int | None = None, wrap_target: float = DEFAULT_WRAP_TARGET,
                  mech: dacc.DiscreteMechanism | None = None) -> DiscreteFrontierRow:
    """One (mechanism, b, ε, n, d, C) cell: the plan, the exact MSE and, for ``trials > 0``,
    the Monte-Carlo (NaN columns otherwise). ``mech`` overrides the plan (e.g. a given γ)."""
    trials = int(check_nonnegative("trials", trials))
    t0 = time.perf_counter()
    mech = mech or plan_mechanism(mechanism, bits=bits, epsilon=epsilon, delta=delta,
                                  clients=clients, dim=dim, clip=clip, wrap_target=wrap_target)
    th = theory(mech, seed=seed)
    ref = dim * dacc.gaussian_central_variance(epsilon, delta, 1, clip, mech.neighbours) \
        / clients**2
    mc = measure(mech, trials=trials, seed=seed, chunk=chunk) if trials else dict(
        mse=math.nan, mse_se=math.nan, wrapped_fraction=math.nan,
        chunk=default_chunk(mech.padded_dim, clients) if chunk is None else int(chunk))
    return DiscreteFrontierRow(
        mechanism=mech.mechanism, bits=mech.bits, epsilon=float(epsilon), delta=float(delta),
        dim=int(dim), padded_dim=mech.padded_dim, clients=int(clients), clip=float(clip),
        granularity=mech.granularity, noise=mech.noise, client_variance=mech.client_variance,
        mse_theory=th["mse_theory"], mse_noise=th["mse_noise"], mse_rounding=th["mse_rounding"],
        mse_wrap_bound=th["mse_wrap_bound"], wrap_probability=th["wrap_probability"],
        mse_continuous=ref, ratio_to_continuous=th["mse_theory"] / ref,
        bits_sent=mech.bits * mech.padded_dim, mse=mc["mse"], mse_se=mc["mse_se"],
        mse_sd_bound=mse_sd_bound(mech, th), wrapped_fraction=mc["wrapped_fraction"],
        trials=trials, seed=int(seed), chunk=int(mc["chunk"]),
        seconds=time.perf_counter() - t0)


def discrete_frontier(mechanisms: Iterable[str], bits: Iterable[int], epsilons: Iterable[float],
                      dims: Iterable[int], clients: Iterable[int], *, clip: float = 1.0,
                      delta: float = 1e-5, trials: int = 0, seed: int = 0,
                      chunk: int | None = None, wrap_target: float = DEFAULT_WRAP_TARGET,
                      skip_unfit: bool = False,
                      skip: Callable[[dict], bool] | None = None,
                      on_row: Callable[[DiscreteFrontierRow], None] | None = None,
                      on_unfit: Callable[[str], None] | None = None
                      ) -> list[DiscreteFrontierRow]:
    """Every cell, d then n then mechanism then ε then b. Every cell is planned first, so a
    bit-width that cannot fit fails before any work (:class:`LdpsimError` naming every such cell
    and the least bits that fit), unless ``skip_unfit`` (those cells are left out and reported
    to ``on_unfit``). ``skip(cell)``: leave a cell out (resume); ``on_row``: each finished row."""
    mechanisms, bits = list(mechanisms), [int(b) for b in bits]
    epsilons = [check_positive("epsilon", e) for e in epsilons]
    dims = [check_positive_int("dim", d) for d in dims]
    clients = [check_positive_int("clients", n) for n in clients]
    plans, unfit = {}, []
    for d in dims:
        for n in clients:
            for m in mechanisms:
                for e in epsilons:
                    for b in bits:
                        try:
                            plans[(m, b, e, d, n)] = plan_mechanism(
                                m, bits=b, epsilon=e, delta=delta, clients=n, dim=d, clip=clip,
                                wrap_target=wrap_target)
                        except LdpsimError as err:
                            if not str(err).startswith(f"{m} at {b} bits cannot fit"):
                                raise
                            unfit.append(f"d = {d}, n = {n}, {err}")
    if unfit and not skip_unfit:
        more = f" (and {len(unfit) - 3} more)" if len(unfit) > 3 else ""
        raise LdpsimError("; ".join(unfit[:3]) + more + "; use more bits, or skip_unfit")
    for u in unfit:
        if on_unfit is not None:
            on_unfit(u)
    rows = []
    for (m, b, e, d, n), mech in plans.items():
        cell = dict(mechanism=m, bits=b, epsilon=e, dim=d, clients=n)
        if skip is not None and skip(cell):
            continue
        row = frontier_cell(m, bits=b, epsilon=e, clients=n, dim=d, clip=clip, delta=delta,
                            trials=trials, seed=seed, chunk=chunk, mech=mech)
        rows.append(row)
        if on_row is not None:
            on_row(row)
    return rows
