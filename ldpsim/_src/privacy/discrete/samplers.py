"""Integer noise for distributed DP: the table sampler, and the reference samplers.

**What the ``discrete`` mode runs** is :func:`table_sample` (end of this module): exact
sampling of a 128-bit fixed-point table of ``N_Z(0, σ²)`` or ``Sk(μ)`` (:mod:`.table`) by
Walker's alias method from four Threefry words per coordinate, within a proven total
variation of the ideal law that the accountant charges. The rest of this module, below, are
the earlier samplers, kept as references (tests compare the table with the rejection sampler;
``pipeline.encode(..., sampler="reference")`` runs them for benchmarks).

Discrete Gaussian ``N_Z(0, σ²)``: ``P[X = x] ∝ exp(−x²/(2σ²))`` on the integers. The sampler is
Canonne, Kamath & Steinke, "The Discrete Gaussian for Differential Privacy", NeurIPS 2020
(arXiv:2004.00010), Algorithms 1–3: rejection from a discrete Laplace of integer scale ``t``,
with every ``Bernoulli(exp(−γ))`` drawn by their Algorithm 1 (``K ← 1``; while
``Bernoulli(γ/K)``, ``K ← K + 1``; return ``K`` odd), which needs only ``Bernoulli(a/b)`` coins
for integers ``a, b``.

**What "exact" means here.** No float enters a coin. Every random choice is a comparison of
integers: a 32-bit word below the largest multiple of ``N`` under 2³² is exactly uniform on
``{0, …, 2³²/N·N − 1}``, so its mixed-radix digits (radices with product ``N``) are independent
and exactly uniform; a word above it is redrawn, or its whole proposal is rejected (the radices
are fixed per call, so that event is independent of every value and the accepted proposals
keep their exact law). In Algorithm 1 for ``γ = a/b`` stage ``k`` is ``Bernoulli(a/b) ∧
Bernoulli(1/k)``: the ``a/b`` part compares a digit below ``b`` with ``a``; the ``1/k`` parts of
stages ``1…7`` are read off one digit ``R`` below ``7! = 5040`` (stages ``1…k`` all pass iff ``R <
7!/k!``, probability ``1/k!``), and for ``γ = 1`` that digit alone gives the coin. To keep every
integer below 2³¹ the variance is taken rational, ``σ̂² = t·p/q`` (``t = ⌊σ⌋ + 1``,
``q`` a power of two, ``p = ⌈σ²q/t⌉``), so the acceptance exponent ``(|x| − σ̂²/t)²/(2σ̂²)`` is
``w²/D`` with integers ``w = q|x| − p`` and ``D = 2qtp < 2²⁷``; ``⌊w²/D⌋`` and ``w² mod D`` are
computed exactly (a float32 estimate of the quotient, off by at most one, corrected by the
remainder computed modulo 2³²). ``σ̂² ≥ σ²`` (more noise, never less);
:func:`discrete_gaussian_spec` reports it, and the accountant uses it. (As everywhere in ldpsim,
the 32-bit words themselves are taken to be ideal: Threefry-2x32-20, the block cipher behind
``jax.random``, on per-proposal counters under the client's key.)

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

Vectorisation (the speed). A proposal's coins are drawn a few stages at a time from 14 words
(``U`` and its sign; five stages of ``exp(−U/t)``; five of the fractional acceptance coin
``exp(−rem/D)``; six ``Bernoulli(e⁻¹)`` coins for ``V`` and four for ``exp(−⌊w²/D⌋)``), by
Threefry unrolled so that XLA fuses it with the digit arithmetic
(:mod:`ldpsim._src.privacy.noise.sampling`). The ≈ 0.5 % of proposals where some coin passed every
stage drawn (or ``V`` used every coin drawn) are gathered and finished exactly, every coin
run to its end, in a loop on those few only (:func:`_dg_attempt`). A client's ``m``
coordinates draw pools of ``2.5m`` proposals (acceptance ≈ 0.45 for ``σ ≥ 1``, ≈ 0.35 below);
the accepted ones fill the empty coordinates in pool order (given which proposals are
accepted, their values are i.i.d. from the target, so this value-independent assignment is
exact), in a ``lax.while_loop`` that usually stops after one pool. Jittable and vmappable; the
parameters are traced (one compilation per shape); a client's noise depends only on its own
key and the shape. ``benchmarks/discrete_samplers.py`` measures it against the earlier
implementation (module docstring of that script).

Skellam ``Sk(μ)``: ``Poisson(μ/2) − Poisson(μ/2)``, variance ``μ`` (Agarwal, Kairouz & Liu,
NeurIPS 2021, arXiv:2110.04995). Each Poisson is drawn by :func:`poisson`, Hörmann's
transformed rejection (PTRS) whose acceptance test uses the saddle-point form of the log-pmf
(Loader 2000), accurate in float32 at any rate; ``jax.random.poisson`` runs the same algorithm
with ``k·log λ − λ − lgamma(k+1)``, whose float32 cancellation biases it at large rates
(measured, 2·10⁶ draws: variance/λ = 1.014-1.025 at λ = 10⁶ depending on XLA's options; 1.46
at 10⁸, only even values from λ ≈ 3·10⁷). :func:`skellam` draws each Poisson as a sum of pieces
of rate at most ``max_rate`` (default ``2²⁰``; sums of Poissons are Poisson), where the moments
and the pmf agree with the exact law (tests, chi-square at 2·10⁵ draws up to 2²⁰); it is
still not an exact sampler (the transform and the test run in float32) and no proven bound
covers it, which is why the ``discrete`` mode draws Skellam noise from the table instead.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax

from ldpsim._src._checks import LdpsimError, check_positive, check_positive_int
from ldpsim._src.privacy.noise import sampling as _sampling
from ldpsim._src.privacy.discrete.spec import DiscreteGaussianSpec, discrete_gaussian_spec

__all__ = ["DiscreteGaussianSpec", "discrete_gaussian_spec", "discrete_gaussian",
           "poisson", "skellam", "uniform_below", "bernoulli_exp"]



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


def _dg_params(spec: DiscreteGaussianSpec) -> dict:
    t, p, q = spec.t, spec.p, spec.q
    vals = dict(t=t, p=p, q=q, d=2 * q * t * p, w_limit=spec.w_limit, z_limit=spec.z_limit)
    return {k: jnp.asarray(v, jnp.int32) for k, v in vals.items()}


_GEOM = 12      # V ≥ 12 (|x| ≥ 12t) is outside the support kept (spec.z_limit)
_FACT = 5040                                               # 7!
_FT = tuple(_FACT // math.factorial(k) for k in range(1, 8))  # 7!/k!: R < 7!/k! w.p. 1/k!
_DG_TAG = 0x64670000                                       # Threefry counter word x0 ("dg")
_U_STAGES = 5           # exp(-U/t): stages drawn at once (the rest, w.p. ≤ 1/720, continue)
_F_STAGES = 5           # exp(-rem/D): likewise
_V_COINS = 6            # Bernoulli(e^-1) coins for V drawn at once (V ≥ 6: w.p. e^-6, continue)
_Q_COINS = 4            # Bernoulli(e^-1) coins for exp(-quo) drawn at once
_NWORDS = 3 + 1 + _F_STAGES + _V_COINS // 2 + _Q_COINS // 2     # 14 words per proposal


def _words(key, sweep, nwords: int, ctr) -> list:
    """``nwords`` arrays of independent uint32 words for proposals ``ctr`` (uint32) of sweep
    ``sweep``.

    Threefry keys: word ``2j + h`` of proposal ``i`` is output ``h`` of Threefry-2x32-20 (the
    block cipher behind ``jax.random``) on the counter ``(_DG_TAG + 16·sweep + j, i)`` under the
    key's words, unrolled so that XLA fuses it with its consumers
    (:mod:`ldpsim._src.privacy.noise.sampling`): a proposal's words depend only on its index. Other
    key types: ``jax.random.bits`` (by position)."""
    npairs = (nwords + 1) // 2
    if _sampling._is_threefry(key):
        k0, k1 = _sampling._key_words(key)
        base = jnp.uint32(_DG_TAG) + jnp.asarray(sweep).astype(jnp.uint32) * jnp.uint32(16)
        out = []
        for j in range(npairs):
            a, b = _sampling.threefry2x32(k0, k1, jnp.full_like(ctr, base + jnp.uint32(j)), ctr)
            out += [a, b]
        return out[:nwords]
    key = jax.random.fold_in(jax.random.fold_in(key, 0x64670000), sweep)
    bits = jax.random.bits(key, (nwords,) + ctr.shape, jnp.uint32)
    return [bits[j] for j in range(nwords)]


def _digits(word, radices):
    """Mixed-radix digits of ``word`` (uint32) and ``valid``: given ``valid`` (``word`` below the
    largest multiple of ``N = Π radices`` under 2³²; ``N < 2³²`` is the caller's guarantee) the
    digits are independent and exactly uniform below their radices. The radices are fixed per
    call, so rejecting a whole proposal when a word is invalid is independent of every value and
    leaves the accepted proposals exactly distributed."""
    radices = [jnp.asarray(r).astype(jnp.uint32) for r in radices]
    n = radices[0]
    for r in radices[1:]:
        n = n * r
    rem = (jnp.uint32(0) - n) % n
    valid = (rem == 0) | (word < jnp.uint32(0) - rem)
    out = []
    for r in radices:
        out.append(word % r)
        word = word // r
    return out, valid


def _unit_coin(r):
    """CKS Algorithm 1 for ``γ = 1`` from ``r`` uniform below 7!: stages ``1…k`` all pass iff
    ``r < 7!/k!`` (probability ``1/k!``, the product of the stages' ``1/j``). Returns ``(coin,
    cont)``: the coin (``K`` odd, ``K`` the first failing stage) unless all 7 stages passed
    (``cont``, probability 1/5040; then stage 8 onwards continue exactly)."""
    passes = sum((r < jnp.uint32(f)).astype(jnp.int32) for f in _FT)
    return passes % 2 == 0, r == 0


def _ratio_coin(r, digits, a):
    """CKS Algorithm 1 for ``γ = a/b`` (``digits`` uniform below ``b``, one per stage; stage ``k``
    is ``Bernoulli(a/b) ∧ Bernoulli(1/k)``, the ``1/k`` parts read off ``r`` uniform below 7!).
    Returns ``(coin, cont)``; ``cont``: every stage drawn passed (continue from the next)."""
    a = jnp.asarray(a).astype(jnp.uint32)
    cum = jnp.ones(a.shape, bool)
    passes = jnp.zeros(a.shape, jnp.int32)
    for k, d in enumerate(digits):
        cum = cum & (r < jnp.uint32(_FT[k])) & (d < a)
        passes = passes + cum.astype(jnp.int32)
    return passes % 2 == 0, cum


def _runs(mask, dkey, a, b, k0, v0, stop):
    """Runs of exact CKS Algorithm 1 coins where ``mask`` (all arguments of one shape; ``v0``
    elsewhere).

    Coordinate ``i`` continues a ``Bernoulli(exp(−a/b))`` coin at stage ``k0`` (stages ``1…k0−1``
    passed); each finished coin that succeeds adds one to the count ``v0`` and, while the count
    is below ``stop``, a new coin starts at stage 1; the run ends at the first failing coin or
    at ``stop``. Returns the final count. Stage ``k`` passes with ``Bernoulli(a/b) ∧
    Bernoulli(1/k)``, two exactly uniform integers from the two Threefry words of the counter
    ``(step, position)`` under ``dkey`` (a rejected word repeats the stage with the next step's
    words). A loop over the whole
    array: call it on the few coordinates that need it."""
    shape = mask.shape
    a, b, k0, v0, stop = (jnp.broadcast_to(jnp.asarray(x, jnp.int32), shape)
                          for x in (a, b, k0, v0, stop))
    au, bu = a.astype(jnp.uint32), b.astype(jnp.uint32)

    if _sampling._is_threefry(dkey):
        k0w, k1w = _sampling._key_words(dkey)
        pos = lax.iota(jnp.uint32, math.prod(shape)).reshape(shape)

        def words(i):                       # Threefry on the counter (step, position)
            return _sampling.threefry2x32(k0w, k1w, jnp.full_like(pos, i), pos)
    else:
        def words(i):
            bits = jax.random.bits(jax.random.fold_in(dkey, i), (2,) + shape, jnp.uint32)
            return bits[0], bits[1]

    def step(s):
        i, k, v, going = s
        w1, w2 = words(i)
        (x,), ok1 = _digits(w1, (bu,))
        (y,), ok2 = _digits(w2, (k.astype(jnp.uint32),))
        ok = going & ok1 & ok2
        passed = (x < au) & (y == 0)
        finished = ok & ~passed                             # the coin's first failing stage is k
        success = finished & (k % 2 == 1)
        v = jnp.where(success, v + 1, v)
        going = going & ~(finished & ~success) & ~(success & (v >= stop))
        k = jnp.where(success, 1, jnp.where(ok & passed, k + 1, k))
        return i + 1, k, v, going

    init = (jnp.uint32(0), k0, v0, mask & (v0 < stop))
    return lax.while_loop(lambda s: jnp.any(s[3]), step, init)[2]


def _is_typed_key(key) -> bool:
    return jax.dtypes.issubdtype(jnp.result_type(key), jax.dtypes.prng_key)


def _cont_key(key, kind: int, sweep):
    key = key if _is_typed_key(key) else _sampling._as_jax_key(key)
    return jax.random.fold_in(jax.random.fold_in(key, 0x7D000000 + kind), sweep)


def bernoulli_exp(key: jax.Array, num, den, shape) -> jax.Array:
    """Exactly ``Bernoulli(exp(−num/den))`` for integers ``0 ≤ num ≤ den < 2³¹`` (CKS Alg. 1),
    elementwise (``num``, ``den`` broadcast to ``shape``).

    The discrete Gaussian's coins on their own: the first five stages (``Bernoulli(num/den) ∧
    Bernoulli(1/k)``) come from one word per stage split into an exact digit below ``den``, the
    ``1/k`` parts from one uniform below 7!; coordinates that pass every stage continue exactly,
    and those with a rejected word are redrawn from stage 1 (:func:`_runs`).
    """
    shape = tuple(shape)
    n = max(1, math.prod(shape))
    num = jnp.broadcast_to(jnp.asarray(num, jnp.int32), shape).reshape(n)
    den = jnp.broadcast_to(jnp.asarray(den, jnp.int32), shape).reshape(n)
    ctr = lax.iota(jnp.uint32, n)
    w = _words(key, 0, 1 + _F_STAGES, ctr)
    (r,), valid = _digits(w[0], (_FACT,))
    digs = []
    for j in range(_F_STAGES):
        (x,), ok = _digits(w[1 + j], (den,))
        digs.append(x)
        valid = valid & ok
    coin, cont = _ratio_coin(r, digs, num)
    redo = cont | ~valid
    start = jnp.where(valid, _F_STAGES + 1, 1)
    tail = _runs(redo, _cont_key(key, 5, 0), num, den, start, 0, 1)
    return jnp.where(redo, tail == 1, coin).reshape(shape)


def _bulk(key, prm: dict, sweep, ctr) -> dict:
    """The first stages of every coin of proposals ``ctr`` (uint32 indices) of sweep ``sweep``:
    14 Threefry words per proposal split into exactly uniform digits (:func:`_finish` reads
    them)."""
    tu, du = prm["t"].astype(jnp.uint32), prm["d"].astype(jnp.uint32)
    w = _words(key, sweep, _NWORDS, ctr)
    (r0, dg1), valid = _digits(w[0], (2 * tu, tu))            # U and sign; U-stage 1
    (dg2, dg3), ok1 = _digits(w[1], (tu, tu))
    (dg4, dg5), ok2 = _digits(w[2], (tu, tu))
    (ru, rf), ok3 = _digits(w[3], (_FACT, _FACT))             # the 1/k parts of both coins
    valid = valid & ok1 & ok2 & ok3
    fdig = []
    for j in range(_F_STAGES):
        (x,), ok = _digits(w[4 + j], (du,))
        fdig.append(x)
        valid = valid & ok
    unit = []
    for j in range((_V_COINS + _Q_COINS) // 2):
        (a, b), ok = _digits(w[4 + _F_STAGES + j], (_FACT, _FACT))
        unit += [a, b]
        valid = valid & ok
    u = r0 >> 1
    keep, kcont = _ratio_coin(ru, [dg1, dg2, dg3, dg4, dg5], u)        # exp(-U/t)
    coins, conts = (jnp.stack(c) for c in zip(*[_unit_coin(r) for r in unit]))   # e^-1 each
    return dict(u=u.astype(jnp.int32), neg=(r0 & 1) == 1, valid=valid, keep=keep, kcont=kcont,
                coins=coins, conts=conts, rf=rf, fdig=jnp.stack(fdig))


def _finish(st: dict, prm: dict, dkey=None):
    """CKS Algorithm 3 on the digits of :func:`_bulk`: a discrete Laplace of scale ``t``
    (Algorithm 2: ``U`` uniform below ``t`` kept with probability ``exp(−U/t)``, ``V`` geometric
    from ``Bernoulli(e⁻¹)`` coins, a sign), accepted with probability
    ``exp(−(|z| − σ̂²/t)²/(2σ̂²))``; every coin CKS Algorithm 1. Returns ``(z, ok, needs)``.

    ``dkey=None``: only the stages drawn at once; ``needs`` flags the proposals where a coin
    passed every stage drawn (or ``V`` used every coin drawn), whose ``ok`` is then not final.
    With ``dkey``: every coin run to its end (:func:`_runs`), so ``(z, ok)`` is final; call it
    on the few proposals that need it."""
    t, p, q, d = prm["t"], prm["p"], prm["q"], prm["d"]
    u, neg, keep, kcont = st["u"], st["neg"], st["keep"], st["kcont"]
    coins, conts = st["coins"], st["conts"]
    n = u.shape[0]
    # V: the leading e^-1 coins that succeeded; the first that did not is failed (V found),
    # or unfinished (its run continues at stage 8), or all 6 succeeded (fresh coins continue)
    vc, vk = coins[:_V_COINS], conts[:_V_COINS]
    lead = jnp.sum(jnp.cumprod((vc & ~vk).astype(jnp.int32), axis=0), axis=0)
    vmore = lead == _V_COINS
    vk_at = jnp.any(vk & (jnp.arange(_V_COINS)[:, None] == lead), axis=0)
    vneeds = vmore | vk_at
    if dkey is not None:
        both = _runs(jnp.concatenate([kcont, vneeds]), jax.random.fold_in(dkey, 0),
                     jnp.concatenate([u, jnp.ones((n,), jnp.int32)]),
                     jnp.concatenate([jnp.broadcast_to(t, (n,)), jnp.ones((n,), jnp.int32)]),
                     jnp.concatenate([jnp.full((n,), _U_STAGES + 1, jnp.int32),
                                      jnp.where(vk_at, 8, 1)]),
                     jnp.concatenate([jnp.zeros((n,), jnp.int32), lead]),
                     jnp.concatenate([jnp.ones((n,), jnp.int32),
                                      jnp.full((n,), _GEOM, jnp.int32)]))
        keep = jnp.where(kcont, both[:n] == 1, keep)
        lead = jnp.where(vneeds, both[n:], lead)
    in_range = lead < _GEOM                                              # else X ≥ 12t: truncated
    x = u + t * lead
    keep = keep & ~(neg & (x == 0))
    z = jnp.where(neg, -x, x)
    # accept with probability exp(-(|z| - σ²/t)²/(2σ²)) = exp(-w²/D) = exp(-quo)·exp(-rem/D)
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
    frac, fcont = _ratio_coin(st["rf"], list(st["fdig"]), rem)
    # exp(-quo): quo e^-1 coins must all succeed; the first min(quo, 4) are drawn at once
    qc, qk = coins[_V_COINS:], conts[_V_COINS:]
    ql = jnp.sum(jnp.cumprod((qc & ~qk).astype(jnp.int32), axis=0), axis=0)   # leading successes
    ql = jnp.minimum(ql, quo)
    qk_at = jnp.any(qk & (jnp.arange(_Q_COINS)[:, None] == ql), axis=0) & (ql < quo)
    alive = ql >= quo
    qneeds = qk_at | ((ql == _Q_COINS) & (quo > _Q_COINS))
    if dkey is not None:
        both = _runs(jnp.concatenate([fcont, qneeds]), jax.random.fold_in(dkey, 1),
                     jnp.concatenate([rem, jnp.ones((n,), jnp.int32)]),
                     jnp.concatenate([jnp.broadcast_to(d, (n,)), jnp.ones((n,), jnp.int32)]),
                     jnp.concatenate([jnp.full((n,), _F_STAGES + 1, jnp.int32),
                                      jnp.where(qk_at, 8, 1)]),
                     jnp.concatenate([jnp.zeros((n,), jnp.int32), ql]),
                     jnp.concatenate([jnp.ones((n,), jnp.int32), quo]))
        frac = jnp.where(fcont, both[:n] == 1, frac)
        alive = jnp.where(qneeds, both[n:] >= quo, alive)
    needs = kcont | vneeds | fcont | qneeds
    return z, st["valid"] & keep & in_range & frac & alive, needs


def _dg_attempt(key, prm: dict, sweep, size: int):
    """``size`` proposals of sweep ``sweep`` with their exact accept decisions: all of them
    with the stages drawn at once, then the few (≈ 0.5 %) that need more gathered, ``buf`` at a
    time, their words recomputed from their indices and every coin run to its end."""
    z, ok, needs = _finish(_bulk(key, prm, sweep, lax.iota(jnp.uint32, size)), prm)
    dkey = _cont_key(key, 0, sweep)
    buf = min(size, size // 64 + 64)
    pos = jnp.cumsum(needs.astype(jnp.int32))
    total = pos[-1]
    rank = jnp.arange(1, buf + 1, dtype=jnp.int32)

    def batch(state):
        j, z, ok = state
        want = j * buf + rank
        gi = jnp.searchsorted(pos, want, side="left").astype(jnp.int32)
        gi = jnp.where(want <= total, gi, size)                           # past the end: dropped
        g = jnp.minimum(gi, size - 1).astype(jnp.uint32)
        zz, okk, _ = _finish(_bulk(key, prm, sweep, g), prm, jax.random.fold_in(dkey, j))
        return j + 1, z.at[gi].set(zz, mode="drop"), ok.at[gi].set(okk, mode="drop")

    _, z, ok = lax.while_loop(lambda s: s[0] * buf < total, batch, (jnp.int32(0), z, ok))
    return z, ok


_POOL = 2.5     # proposals per coordinate per sweep (acceptance ≈ 0.45 for σ ≥ 1: one sweep)


@functools.partial(jax.jit, static_argnames=("shape",))
def _dg_piece(key, spec: dict, shape) -> jax.Array:
    """``prod(shape)`` exact draws. Each sweep draws a pool of proposals and hands the accepted
    ones, in pool order, to the still-empty coordinates in index order (given which proposals
    are accepted, their values are i.i.d. from the target, so this value-independent assignment
    is exact); sweeps repeat until every coordinate is filled (usually one)."""
    n = math.prod(shape)
    size = max(64, math.ceil(_POOL * n))

    def body(state):
        i, done, out = state
        z, ok = _dg_attempt(key, spec, i, size)
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


_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _log1p_minus(x: jax.Array) -> jax.Array:
    """``(1 + x)·log(1 + x) − x`` without float32 cancellation: its Taylor series
    ``Σ_{n≥2} (−x)^n/(n(n−1))`` for ``|x| < 0.1`` (8 terms: error below 1e-10 relative),
    the closed form elsewhere."""
    small = jnp.abs(x) < 0.1
    xs = jnp.where(small, x, 0.0)
    series = jnp.zeros_like(x)
    power = xs * xs
    for n in range(2, 10):
        series = series + power * ((-1.0) ** n / (n * (n - 1)))
        power = power * xs
    xl = jnp.where(small, 0.0, x)
    return jnp.where(small, series, (1.0 + xl) * jnp.log1p(xl) - xl)


def _poisson_log_pmf(k: jax.Array, lam: float) -> jax.Array:
    """``log P(K = k)`` of Poisson(``lam``) for ``k ≥ 1`` (``−λ`` at 0), in Loader's saddle-point form
    ``−½log(2πk) − stirlerr(k) − bd0(k, λ)`` (Loader 2000, "Fast and accurate computation of
    binomial probabilities"): ``bd0 = λ·h((k − λ)/λ)`` with ``h`` of :func:`_log1p_minus`, and
    ``stirlerr(k) = log k! − (k + ½)log k + k − ½log 2π`` by its asymptotic series from k = 15
    (error below 1e-9), by ``lgamma`` below. Every term is O(1) near the mode, so float32
    keeps ~1e-6 absolute accuracy at any λ, where ``k·log λ − λ − lgamma(k + 1)`` subtracts
    numbers of size λ·log λ (absolute error ~λ·log λ·6e-8: 0.04 at λ = 2¹⁶)."""
    kf = jnp.maximum(k.astype(jnp.float32), 1.0)
    inv = 1.0 / kf
    inv2 = inv * inv
    series = inv * (1.0 / 12 - inv2 * (1.0 / 360 - inv2 * (1.0 / 1260 - inv2 / 1680)))
    direct = lax.lgamma(kf + 1.0) - (kf + 0.5) * jnp.log(kf) + kf - _HALF_LOG_2PI
    stirlerr = jnp.where(kf >= 15.0, series, direct)
    bd0 = jnp.float32(lam) * _log1p_minus((kf - lam) / jnp.float32(lam))
    return -_HALF_LOG_2PI - 0.5 * jnp.log(kf) - stirlerr - bd0


def poisson(key: jax.Array, lam: float, shape) -> jax.Array:
    """Poisson(``lam``) draws (int32) for a static rate ``lam ≥ 10``: Hörmann's transformed
    rejection with squeeze (PTRS; W. Hörmann, "The transformed rejection method for generating
    Poisson random variables", Insurance: Mathematics and Economics 12, 1993), with the
    acceptance test on the saddle-point log-pmf (:func:`_poisson_log_pmf`) instead of
    ``lgamma``, whose float32 cancellation biases ``jax.random.poisson`` at large rates (its
    variance/λ measured 1.014-1.025 at λ = 10⁶, depending on the compiler's options). Every
    coordinate loops until accepted (acceptance ≈ 0.9 per try). Not an exact sampler: the
    transform and the test run in float32.
    """
    lam = float(lam)
    if not (lam >= 10.0 and lam < 2.0**23):
        raise LdpsimError(f"poisson: rate {lam} outside [10, 2^23); draw smaller rates with "
                          "jax.random.poisson and larger ones as a sum of pieces (skellam)")
    shape = tuple(shape)
    slam = math.sqrt(lam)
    b = 0.931 + 2.53 * slam
    a = -0.059 + 0.02483 * b
    log_inv_alpha = math.log(1.1239 + 1.1328 / (b - 3.4))
    vr = 0.9277 - 3.6224 / (b - 2.0)

    def draw(k_try):
        k_u, k_v = jax.random.split(k_try)
        u = jax.random.uniform(k_u, shape, jnp.float32) - 0.5
        v = jax.random.uniform(k_v, shape, jnp.float32)
        us = 0.5 - jnp.abs(u)
        k = jnp.floor((2.0 * a / us + b) * u + lam + 0.43)
        quick = (us >= 0.07) & (v <= vr)
        hopeless = (k < 0) | ((us < 0.013) & (v > us))
        lhs = jnp.log(v) + log_inv_alpha - jnp.log(a / (us * us) + b)
        log_pmf = jnp.where(k < 1.0, jnp.float32(-lam), _poisson_log_pmf(jnp.maximum(k, 1.0), lam))
        ok = quick | (~hopeless & (lhs <= log_pmf))
        ok = ok & (k >= 0)
        return k.astype(jnp.int32), ok

    def cond(carry):
        return ~jnp.all(carry[1])

    def body(carry):
        out, done, i = carry
        k, ok = draw(jax.random.fold_in(key, i))
        take = ok & ~done
        return jnp.where(take, k, out), done | ok, i + 1

    out, _, _ = lax.while_loop(cond, body, (jnp.zeros(shape, jnp.int32),
                                            jnp.zeros(shape, bool), jnp.uint32(0)))
    return out


def skellam(key: jax.Array, variance: float, shape, *, max_rate: float = 2.0**20) -> jax.Array:
    """Symmetric Skellam noise (int32) of variance ``μ``: ``Poisson(μ/2) − Poisson(μ/2)``.

    Each Poisson is a sum of ``⌈μ/(2·max_rate)⌉`` Poissons of equal rate (exact in law: sums
    of independent Poissons are Poisson), drawn by :func:`poisson` (rates from 10) or
    ``jax.random.poisson`` (below) — not an exact sampler (module docstring).
    """
    mu = check_positive("variance", variance)
    max_rate = check_positive("max_rate", max_rate)
    pieces = max(1, math.ceil(mu / 2 / max_rate))
    check_positive_int("pieces", pieces)
    rate = mu / 2 / pieces
    shape = tuple(shape)

    def one(k):
        if rate >= 10.0:
            return poisson(k, rate, shape)
        return jax.random.poisson(k, rate, shape, dtype=jnp.int32)

    def body(j, acc):
        k1, k2 = jax.random.split(jax.random.fold_in(key, j))
        return acc + (one(k1) - one(k2))

    return lax.fori_loop(0, pieces, body, jnp.zeros(shape, jnp.int32))


# --------------------------------------------------------------------------- table sampler

_TB_TAG = 0x74620000                                       # Threefry counter word x0 ("tb")


def _table_words(key, piece, ctr) -> list:
    """Four independent uint32 words per coordinate ``ctr`` (uint32) of piece ``piece``: the
    two outputs of Threefry-2x32-20 on the counters ``(_TB_TAG + 2·piece + j, i)``, ``j = 0, 1``,
    under the key's words (as :func:`_words`); other key types: ``jax.random.bits``."""
    if _sampling._is_threefry(key):
        k0, k1 = _sampling._key_words(key)
        base = jnp.uint32(_TB_TAG) + jnp.asarray(piece).astype(jnp.uint32) * jnp.uint32(2)
        a, b = _sampling.threefry2x32(k0, k1, jnp.full_like(ctr, base), ctr)
        c, d = _sampling.threefry2x32(k0, k1, jnp.full_like(ctr, base + jnp.uint32(1)), ctr)
        return [a, b, c, d]
    bits = jax.random.bits(jax.random.fold_in(jax.random.fold_in(key, _TB_TAG), piece),
                           (4,) + ctr.shape, jnp.uint32)
    return [bits[j] for j in range(4)]


def _less128(a, b):
    """``a < b`` for 128-bit integers given as four uint32 words, most significant first
    (lexicographic, branch-free)."""
    a0, a1, a2, a3 = a
    b0, b1, b2, b3 = b
    return (a0 < b0) | ((a0 == b0) & ((a1 < b1) | ((a1 == b1) & (
        (a2 < b2) | ((a2 == b2) & (a3 < b3))))))


def table_lookup(words, threshold: jax.Array, alias: jax.Array, columns_log2: int,
                 half: int) -> jax.Array:
    """The table's value for the uniform 128-bit ``U = (w₀, w₁, w₂, w₃)`` (uint32 words, most
    significant first): column ``c = ⌊U / 2^(128−k)⌋`` (the top ``k`` bits of ``w₀``), remainder
    ``V = U mod 2^(128−k)``; ``c − L`` if ``V < T_c``, else ``alias[c]`` (int32)."""
    k = int(columns_log2)
    w0, w1, w2, w3 = words
    col = (w0 >> jnp.uint32(32 - k)).astype(jnp.int32)
    v0 = w0 & jnp.uint32((1 << (32 - k)) - 1)
    t = [jnp.take(threshold[:, j], col, mode="clip") for j in range(4)]
    below = _less128((v0, w1, w2, w3), t)
    return jnp.where(below, col - jnp.int32(half), jnp.take(alias, col, mode="clip"))


@functools.partial(jax.jit, static_argnames=("columns_log2", "half", "pieces", "shape"))
def _table_draw(key, threshold, alias, columns_log2: int, half: int, pieces: int, shape):
    n = math.prod(shape)
    ctr = lax.iota(jnp.uint32, n)

    def piece(j):
        return table_lookup(_table_words(key, j, ctr), threshold, alias, columns_log2, half)

    if pieces == 1:
        return piece(0).reshape(shape)
    out = lax.fori_loop(0, pieces, lambda j, acc: acc + piece(j), jnp.zeros((n,), jnp.int32))
    return out.reshape(shape)


def table_sample(key: jax.Array, table, shape) -> jax.Array:
    """Integer noise (int32) from a :class:`.table.NoiseTable`: the sum of ``table.plan.pieces``
    independent draws of its law, each from four 32-bit words by Walker's alias method.

    **Exactness.** Given ideal uniform words, ``U = (w₀, w₁, w₂, w₃)`` is uniform on
    ``[0, 2¹²⁸)``, so its column ``c`` (top ``k`` bits) is uniform on the ``2^k`` columns and
    independent of ``V`` (the other ``128 − k`` bits), uniform on ``[0, cap)``, ``cap =
    2^(128−k)``. Hence ``P[out = x] = 2^−k·Σ_c (T_c/cap·1{c − L = x} + (1 − T_c/cap)·1{alias_c =
    x}) = m_x/2¹²⁸`` exactly, where ``m_x`` are the table's integer masses (the alias table is
    built from them in integer arithmetic, :func:`.table._alias`; the tests rebuild ``m`` from
    it): the output law is exactly the table's law, within ``table.plan.tv_bound`` of the ideal
    law (:mod:`.table`). Pieces use disjoint counters, so they are independent.

    Keyed by position: coordinate ``i`` (row-major in ``shape``) of piece ``j`` reads the
    Threefry outputs at counters ``(_TB_TAG + 2j + {0, 1}, i)`` only, so a client's noise
    depends on its key and the shape alone (vmap over client keys). Jittable; the table is an
    argument (one compilation per shape and table size).
    """
    shape = tuple(shape)
    if math.prod(shape) > 2**32:
        raise LdpsimError("table_sample: at most 2^32 coordinates per key")
    plan = table.plan
    return _table_draw(key, jnp.asarray(table.threshold), jnp.asarray(table.alias),
                       plan.columns_log2, plan.half, plan.pieces, shape)


def table_noise(key: jax.Array, law: str, param: float, shape) -> jax.Array:
    """:func:`table_sample` from the cached table of ``law`` (``"ddg"``: σ, ``"skellam"``:
    variance μ) at ``param`` (:func:`.table.noise_table`)."""
    from ldpsim._src.privacy.discrete.table import noise_table
    return table_sample(key, noise_table(law, float(param)), shape)
