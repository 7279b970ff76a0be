"""Integer noise for distributed DP: an exact discrete Gaussian sampler and a Skellam sampler.

Discrete Gaussian ``N_Z(0, σ²)``: ``P[X = x] ∝ exp(−x²/(2σ²))`` on the integers. The sampler is
Canonne, Kamath & Steinke, "The Discrete Gaussian for Differential Privacy", NeurIPS 2020
(arXiv:2004.00010), Algorithms 1–3: rejection from a discrete Laplace of integer scale ``t``,
with every ``Bernoulli(exp(−γ))`` drawn by their Algorithm 1 (``K ← 1``; while
``Bernoulli(γ/K)``, ``K ← K + 1``; return ``K`` odd), which needs only ``Bernoulli(a/b)`` coins
for integers ``a, b``.

**What "exact" means here.** No float enters a coin. Every random choice is a comparison of
integers: ``Bernoulli(a/b)`` is ``U < a`` for ``U`` exactly uniform on ``{0, …, b−1}``, namely
``word mod b`` for a 32-bit word below ``2³² − (2³² mod b)`` (a word above it is redrawn, or its
whole proposal is rejected: ``b`` is fixed per call, so that event is independent of every value
and the accepted proposals keep their exact law); ``Bernoulli(γ/K)`` with ``γ = a/b`` is
``Bernoulli(a/b) ∧ Bernoulli(1/K)``, and the ``Bernoulli(1/k)``, ``k = 1…S``, of the first ``S``
stages are the independent digits of one uniform integer below ``S!`` (factorial number
system); the rare coins that pass all ``S`` stages continue one stage at a time in a loop. To
keep every integer below 2³¹ the variance is taken rational, ``σ̂² = t·p/q`` (``t = ⌊σ⌋ + 1``,
``q`` a power of two, ``p = ⌈σ²q/t⌉``), so the acceptance exponent ``(|x| − σ̂²/t)²/(2σ̂²)`` is
``w²/D`` with integers ``w = q|x| − p`` and ``D = 2qtp < 2²⁷``; ``⌊w²/D⌋`` and ``w² mod D`` are
computed exactly (a float32 estimate of the quotient, off by at most one, corrected by the
remainder computed modulo 2³²). ``σ̂² ≥ σ²`` (more noise, never less);
:func:`discrete_gaussian_spec` reports it, and the accountant uses it. (As everywhere in ldpsim,
the 32-bit words themselves are taken to be ideal: they come from ``jax.random.bits``.)

One deliberate, bounded departure: a proposal is rejected outright when its acceptance exponent
is ``≥ 64`` (probability ``< e⁻⁶⁴``) or its geometric part reaches ``V ≥ 12`` (``|x| ≥ 12t``).
Rejecting a fixed set of values from a rejection sampler leaves the target conditioned on the
complement, so the output is **exactly** the discrete Gaussian conditioned on ``|x| ≤ L``
(``L = spec.z_limit ≈ 12σ``), at total variation ``≤ spec.tv_bound`` from ``N_Z(0, σ̂²)`` (below
1e-28 for every σ allowed), which an (ε, δ) statement absorbs as an additive ``(1 + e^ε)·TV`` per
coordinate (the coupling bound of docs/privacy_sharp_edges.md §4;
:func:`.accounting.discrete_epsilon` charges it).

Variances above ``2²⁵`` (σ ≈ 5,793) are sampled as the sum of ``pieces`` independent discrete
Gaussians of variance ``σ²/pieces``: a sum of discrete Gaussians is not one, so the accountant
then counts ``n·pieces`` summands of variance ``σ̂²_piece`` (:meth:`DiscreteGaussianSpec.summands`).

Vectorisation: a client's ``m`` coordinates draw pools of ``3m`` proposals at once; the accepted
ones fill the empty coordinates in pool order (given which proposals are accepted, their values
are i.i.d. from the target, so this value-independent assignment is exact), in a
``lax.while_loop`` that usually stops after one pool. Jittable and vmappable; the parameters
are traced (one compilation per shape); a client's noise depends only on its own key.

Skellam ``Sk(μ)``: ``Poisson(μ/2) − Poisson(μ/2)``, variance ``μ`` (Agarwal, Kairouz & Liu,
NeurIPS 2021, arXiv:2110.04995). It is drawn with ``jax.random.poisson``, which is **not exact**:
its float32 transformed-rejection sampler has no stated error, and at large rates it is visibly
wrong (measured, 2·10⁵ draws: variance/λ = 1.02 at λ = 10⁶, 1.46 at λ = 10⁸; only even values
from λ ≈ 3·10⁷, multiples of 8 at 10⁸). :func:`skellam` therefore draws each Poisson as a sum of
pieces of rate at most ``max_rate`` (default ``2¹⁶``; sums of Poissons are Poisson), where the
measured moments and pmf agree with the exact law (tests), but the accounting of the Skellam
mechanism is that of the **ideal** Skellam law: no proven bound covers this sampler.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax

from ldpsim._src._checks import check_positive, check_positive_int
from ldpsim._src.privacy.discrete.spec import DiscreteGaussianSpec, discrete_gaussian_spec

__all__ = ["DiscreteGaussianSpec", "discrete_gaussian_spec", "discrete_gaussian",
           "skellam", "uniform_below", "bernoulli_exp"]



def uniform_below(key: jax.Array, n, shape) -> jax.Array:
    """Exactly uniform integers on ``{0, …, n−1}`` (int32), ``1 ≤ n < 2³¹`` (broadcast to ``shape``).

    Rejection from 32 random bits: keep ``bits mod n`` when ``bits < 2³² − (2³² mod n)``
    (probability ``≥ 1/2`` per draw; redraw the rest with ``fold_in(key, i)``).
    """
    shape = tuple(shape)
    n = jnp.broadcast_to(jnp.asarray(n).astype(jnp.uint32), shape)
    rem = (jnp.uint32(0) - n) % n                 # 2^32 mod n
    limit = jnp.uint32(0) - rem                   # 2^32 - rem (mod 2^32); rem == 0: all accepted

    def body(state):
        i, done, val = state
        bits = jax.random.bits(jax.random.fold_in(key, i), shape, jnp.uint32)
        ok = (rem == 0) | (bits < limit)
        val = jnp.where(done, val, bits % n)
        return i + 1, done | ok, val

    init = (jnp.int32(0), jnp.zeros(shape, bool), jnp.zeros(shape, jnp.uint32))
    _, _, val = lax.while_loop(lambda s: ~jnp.all(s[1]), body, init)
    return val.astype(jnp.int32)


def _bernoulli_ratio(key, num, den, shape) -> jax.Array:
    """Exactly ``Bernoulli(num/den)`` for integers ``0 ≤ num ≤ den``, ``1 ≤ den < 2³¹``."""
    return uniform_below(key, den, shape) < jnp.broadcast_to(num, shape)


_STAGES = 6


def _inverse_k_coins(key, shape, stages: int = _STAGES) -> jax.Array:
    """Independent ``Bernoulli(1/k)`` for ``k = 1…S`` (leading axis), from one exactly uniform
    integer below ``S!`` read in the factorial number system (its digits are independent and
    uniform on ``{0, …, k−1}``)."""
    r = uniform_below(key, math.factorial(stages), shape)
    coins = []
    radix = 1
    for k in range(1, stages + 1):
        coins.append((r // radix) % k == 0)
        radix *= k
    return jnp.stack(coins)


def bernoulli_exp(key: jax.Array, num, den, shape) -> jax.Array:
    """Exactly ``Bernoulli(exp(−num/den))`` for integers ``0 ≤ num ≤ den < 2³¹`` (CKS Alg. 1).

    The first ``S`` stages (``Bernoulli(γ/k)``, ``k = 1…S``; ``S = 6``, or 10 for ``γ = 1``, where
    one uniform integer below ``10!`` gives all ten) are drawn at once; the few coordinates that
    pass all of them continue one stage at a time.
    """
    shape = tuple(shape)
    unit = isinstance(num, int) and isinstance(den, int) and num == den
    k0, k1, k2 = jax.random.split(key, 3)
    a = _inverse_k_coins(k0, shape, 10 if unit else _STAGES)
    if not unit:
        a = a & _bernoulli_ratio(k1, num, den, (_STAGES,) + shape)
    return _continue_stages(k2, a, num, den, unit, shape)


def _continue_stages(key, a, num, den, unit: bool, shape) -> jax.Array:
    """CKS Alg. 1 after its first stages ``a`` (leading axis, drawn at once): the few
    coordinates that passed them all continue one exact stage at a time (``Bernoulli(1/k)``,
    and ``Bernoulli(num/den)`` unless ``unit``); the result is the parity of the first failing
    stage."""
    passed = jnp.cumprod(a.astype(jnp.int32), axis=0)        # 1 while every stage so far passed
    k = 1 + jnp.sum(passed, axis=0)                          # first failing stage (or S + 1)
    active = passed[-1] == 1

    def body(state):
        i, active, k = state
        ka, kb = jax.random.split(jax.random.fold_in(key, i))
        step = _bernoulli_ratio(ka, 1, k, shape)
        if not unit:
            step = step & _bernoulli_ratio(kb, num, den, shape)
        k = jnp.where(active & step, k + 1, k)
        return i + 1, active & step, k

    _, _, k = lax.while_loop(lambda s: jnp.any(s[1]), body, (jnp.int32(0), active, k))
    return (k % 2) == 1


def _dg_params(spec: DiscreteGaussianSpec) -> dict:
    t, p, q = spec.t, spec.p, spec.q
    vals = dict(t=t, p=p, q=q, d=2 * q * t * p, w_limit=spec.w_limit, z_limit=spec.z_limit)
    return {k: jnp.asarray(v, jnp.int32) for k, v in vals.items()}


def _from_word(word, n):
    """``(word mod n, valid)``: exactly uniform below ``n`` given ``valid`` (``word`` below the
    largest multiple of ``n`` under 2³²). ``n`` is fixed per call, so rejecting a whole proposal
    when any of its words is invalid leaves the accepted proposals exactly distributed."""
    n = jnp.asarray(n).astype(jnp.uint32)
    rem = (jnp.uint32(0) - n) % n
    limit = jnp.uint32(0) - rem
    return (word % n).astype(jnp.int32), (rem == 0) | (word < limit)


def _coin_from_words(key, inv_word, ratio_words, num, den, stages):
    """``Bernoulli(exp(−num/den))`` (CKS Alg. 1) from pre-drawn words: ``stages`` stages at once
    (``Bernoulli(1/k)`` from the factorial digits of ``inv_word mod stages!``, ``Bernoulli(num/den)``
    from ``ratio_words``; ``None`` for ``num = den``), exact continuation for the rare rest."""
    r, valid = _from_word(inv_word, math.factorial(stages))
    coins = []
    radix = 1
    for k in range(1, stages + 1):
        coins.append((r // radix) % k == 0)
        radix *= k
    a = jnp.stack(coins)
    unit = ratio_words is None
    if not unit:
        u, ok = _from_word(ratio_words, den)
        a = a & (u < num)
        valid = valid & jnp.all(ok, axis=0)
    return _continue_stages(key, a, num, den, unit, inv_word.shape), valid


_GEOM = 12      # Bernoulli(e^-1) coins for V: V ≥ 12 (X ≥ 12t) is outside the support kept
_QUO = 8        # Bernoulli(e^-1) coins drawn at once for exp(-quo); more by an exact loop
_WORDS = 1 + 6 + 1 + 6 + 1 + _GEOM + _QUO + 1


def _dg_attempt(key, prm: dict, shape):
    """One proposal per coordinate of CKS Algorithm 3 with its exact accept/reject coin.

    All main-path randomness is one block of 32-bit words; the rare continuations are loops."""
    t, p, q, d = prm["t"], prm["p"], prm["q"], prm["d"]
    kw, k1, k2, k3, k4, k5 = jax.random.split(key, 6)
    w = jax.random.bits(kw, (_WORDS,) + tuple(shape), jnp.uint32)
    u, valid = _from_word(w[0], t)
    keep, ok = _coin_from_words(k1, w[7], w[1:7], u, t, 6)                 # exp(-U/t)
    valid = valid & ok
    gcoins, ok = _coin_from_words(k2, w[15:15 + _GEOM], None, 1, 1, 10)     # V's coins
    valid = valid & jnp.all(ok, axis=0)
    lead = jnp.sum(jnp.cumprod(gcoins.astype(jnp.int32), axis=0), axis=0)
    in_range = lead < _GEOM                                                # else X ≥ 12t: truncated
    x = u + t * lead
    neg = (w[-1] & 1) == 1
    keep = keep & ~(neg & (x == 0))
    z = jnp.where(neg, -x, x)
    # accept with probability exp(-(|z| - σ²/t)²/(2σ²)) = exp(-w²/D)
    in_range = in_range & (x <= prm["z_limit"])
    xs = jnp.where(in_range, x, 0)
    wv = q * xs - p
    in_range = in_range & (jnp.abs(wv) < prm["w_limit"])
    wv = jnp.where(in_range, wv, 0)
    wf = wv.astype(jnp.float32)
    quo = jnp.floor(wf * wf / d.astype(jnp.float32)).astype(jnp.int32)   # exact quotient ± 1
    wu = wv.astype(jnp.uint32)
    rem = lax.bitcast_convert_type(wu * wu - quo.astype(jnp.uint32) * d.astype(jnp.uint32),
                                   jnp.int32)
    quo = jnp.where(rem < 0, quo - 1, jnp.where(rem >= d, quo + 1, quo))
    rem = jnp.where(rem < 0, rem + d, jnp.where(rem >= d, rem - d, rem))
    frac, ok = _coin_from_words(k3, w[14], w[8:14], rem, d, 6)             # exp(-rem/D)
    valid = valid & ok
    qcoins, ok = _coin_from_words(k4, w[15 + _GEOM:15 + _GEOM + _QUO], None, 1, 1, 10)
    valid = valid & jnp.all(ok, axis=0)
    idx = jnp.arange(_QUO).reshape((_QUO,) + (1,) * len(shape))
    qcoins = qcoins | (idx >= quo)
    alive = jnp.all(qcoins, axis=0)                                          # first min(quo, 8)
    more = alive & (quo > _QUO)

    def body(state):
        j, alive = state
        b = bernoulli_exp(jax.random.fold_in(k5, j), 1, 1, shape)
        return j + 1, alive & ((j + _QUO >= quo) | b)

    _, alive2 = lax.while_loop(lambda s: jnp.any(s[1] & (s[0] + _QUO < quo)), body,
                               (jnp.int32(0), more))
    alive = jnp.where(more, alive2, alive)
    return z, valid & keep & in_range & frac & alive


_POOL = 3


@functools.partial(jax.jit, static_argnames=("shape",))
def _dg_piece(key, spec: dict, shape) -> jax.Array:
    """``prod(shape)`` exact draws. Each sweep draws a pool of ``3·m`` proposals and hands the
    accepted ones, in pool order, to the still-empty coordinates in index order (given which
    proposals are accepted, their values are i.i.d. from the target, so this value-independent
    assignment is exact); sweeps repeat until every coordinate is filled (usually one)."""
    n = math.prod(shape)
    size = _POOL * n

    def body(state):
        i, done, out = state
        z, ok = _dg_attempt(jax.random.fold_in(key, i), spec, (size,))
        rank = jnp.cumsum(ok.astype(jnp.int32)) - 1
        accepted = jnp.zeros((size,), jnp.int32).at[jnp.where(ok, rank, size)].set(z, mode="drop")
        empty_rank = jnp.cumsum((~done).astype(jnp.int32)) - 1
        fill = ~done & (empty_rank <= rank[-1])
        out = jnp.where(fill, accepted[jnp.clip(empty_rank, 0, size - 1)], out)
        return i + 1, done | fill, out

    init = (jnp.int32(0), jnp.zeros((n,), bool), jnp.zeros((n,), jnp.int32))
    _, _, out = lax.while_loop(lambda s: ~jnp.all(s[1]), body, init)
    return out.reshape(shape)


def discrete_gaussian(key: jax.Array, spec: DiscreteGaussianSpec | float, shape) -> jax.Array:
    """Exact discrete Gaussian noise (int32) of variance ``spec.variance`` (module docstring).

    ``spec`` is a :class:`DiscreteGaussianSpec` (or a σ, turned into one). Key it per client,
    e.g. ``fold_in(round_key, client_id)``; vmap over keys for a cohort.
    """
    if not isinstance(spec, DiscreteGaussianSpec):
        spec = discrete_gaussian_spec(spec)
    shape = tuple(shape)
    prm = _dg_params(spec)
    if spec.pieces == 1:
        return _dg_piece(key, prm, shape)
    return lax.fori_loop(0, spec.pieces,
                         lambda j, acc: acc + _dg_piece(jax.random.fold_in(key, j), prm, shape),
                         jnp.zeros(shape, jnp.int32))


def skellam(key: jax.Array, variance: float, shape, *, max_rate: float = 2.0**16) -> jax.Array:
    """Symmetric Skellam noise (int32) of variance ``μ``: ``Poisson(μ/2) − Poisson(μ/2)``.

    Each Poisson is a sum of ``⌈μ/(2·max_rate)⌉`` Poissons of equal rate (exact in law: sums
    of independent Poissons are Poisson), drawn by ``jax.random.poisson`` — not an exact
    sampler (module docstring).
    """
    mu = check_positive("variance", variance)
    max_rate = check_positive("max_rate", max_rate)
    pieces = max(1, math.ceil(mu / 2 / max_rate))
    check_positive_int("pieces", pieces)
    rate = mu / 2 / pieces
    shape = tuple(shape)

    def body(j, acc):
        k1, k2 = jax.random.split(jax.random.fold_in(key, j))
        a = jax.random.poisson(k1, rate, shape, dtype=jnp.int32)
        b = jax.random.poisson(k2, rate, shape, dtype=jnp.int32)
        return acc + (a - b)

    return lax.fori_loop(0, pieces, body, jnp.zeros(shape, jnp.int32))
