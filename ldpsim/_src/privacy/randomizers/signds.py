"""SignDS as MindSpore Federated implements it: pure ε-LDP index release.

Client (``SecureProtocol.signDSModel``), on the flattened update Δ of dimension d:

1. A sign ``b = ±1`` with probability ½ each. The top-k set ``T_b`` is the ``k = ⌊sign_k·d⌋``
   largest coordinates of Δ for ``b = +1`` and the k smallest for ``b = −1`` (ties by index,
   as MindSpore's stable sort and ``lax.top_k`` both break them).
2. The output size ``h = sign_dim_out``; if 0, the largest h whose expected top-k share
   ``E[ν]/h`` is at least ``sign_thr_ratio`` (MindSpore's ``findOptOutputDim``).
3. The threshold ``ν_th ∈ [1, h]``: MindSpore's ``calcOptThr`` (increase t from 1 while the
   expected count rises).
   Both searches are public constants and run on the host in MindSpore's own double
   arithmetic (its combination products overflow for large ``sign_k·d``, which stops the
   search for h there, as in MindSpore); the ideal law of ν is computed in log space
   (:func:`pmf`), the sampled one in exact integers (:func:`realised_counts`).
4. ``ν ~ P(ν) ∝ C(k, ν)·C(d − k, h − ν)·exp(ε·1[ν ≥ ν_th])`` (exponential mechanism, inverse
   CDF on an integer grid, below), then ν indices uniformly from ``T_b`` and ``h − ν`` from
   the rest (Floyd's algorithm with exactly uniform integers).
5. Report ``{"indices": sorted int32[h], "sign": b}`` (no weights).

Server (``ParseSignDSFeatureMap``): the reconstructed update is ``b·sign_global_lr`` on the
reported indices and 0 elsewhere (:func:`decode`). This decoder is **not unbiased**: it
is MindSpore's fixed-step reconstruction. :func:`mean` and :func:`variance` give its exact
expectation and per-coordinate variance for a given update (coordinate i is reported with
probability ``E[ν]/k`` if ``i ∈ T_b`` and ``(h − E[ν])/(d − k)`` otherwise).

Guarantee (ideal law): for a given b, every index set S of size h has probability
``exp(ε·1[|S ∩ T_b(Δ)| ≥ ν_th])/Z`` with ``Z = Σ_ν C(k,ν)C(d−k,h−ν)e^{ε1[ν≥ν_th]}`` independent
of Δ; b is independent of Δ. So the ratio for any two updates is at most ``e^ε``: **pure
ε-LDP for any two updates** (relation ``"replace"``; no clipping is needed, the release
depends on the order of the coordinates only; a non-finite update is replaced by 0).

What runs (exact): ν is drawn by an inverse CDF on a ``32W``-bit integer grid: ``ν = #{j :
U ≥ t_j}`` for a uniform ``32W``-bit ``U`` (W Threefry words) and integer cumulative
thresholds ``t_j`` computed on the host in exact big-integer arithmetic
(:func:`realised_counts`), so ``P(ν = j) = (t_j − t_{j−1})/2^{32W}`` exactly. The sign is
``bits < 2³¹`` (exactly ½, and independent of Δ in any case), and given ν the index set is
exactly uniform (Floyd's algorithm; each integer uniform on ``[0, n)`` by rejection of the
incomplete last block of 32-bit words). So a set S with ``|S ∩ T_b(Δ)| = ν`` has probability
``½·m_ν/(2^{32W}·C(k,ν)C(d−k,h−ν))`` (``m_ν`` the grid counts), and since ``T_b(Δ)`` can be any
k-set, the realised worst-case ratio over two updates is exactly
``max_ν w_ν / min_ν w_ν`` with ``w_ν = m_ν/(C(k,ν)C(d−k,h−ν))`` over the feasible ν. The counts
are rounded (ceil below ν_th, floor at and above it, with a relative margin) so that this
ratio is at most ``e^{ε(1 − 2⁻⁴⁴)}``, proven on the host (logarithms to 80 digits); every
feasible ν has ``m_ν ≥ 1``, and ``W ≥ 2`` grows until that holds (the counts of least
probability need ``2^{32W}`` beyond their inverse probability: ``W = 2`` at small ε, 5 at
MindSpore's default ε = 100, d = 61,706; at most :data:`MAX_WORDS`, else a clear error;
where the rarest counts get one grid unit, more than their ideal share, ε' < ε: more
private than asked, e.g. ε' ≈ 89 at ε = 100, d = 6). Hence the float32 code is **pure
ε'-LDP with ε' ≤ ε exactly** (no model beyond uniform Threefry bits; the release is integers,
so no output-grid caveat): ε is printed, ε' is in ``realisation`` and
:func:`realised_epsilon`. (The previous inverse CDF of float32 uniforms, a 2⁻²³ grid, never
drew counts of probability below its resolution: 16.001 at ε = 16 and 20.05 at ε = 20 for
d = 1000, no finite ε from ε ≈ 30.)

MindSpore defaults and valid ranges (``fl_context.h``): sign_k = 0.01 in (0, 0.25],
sign_eps = 100 in (0, 100], sign_thr_ratio = 0.6 in [0.5, 1], sign_global_lr = 0.1 > 0,
sign_dim_out = 0 in [0, 50] (integer).

Reference:
    MindSpore Federated (2022-10), ``SecureProtocol.java`` (``signDSModel``) and
    ``update_model_kernel.cc``; Jiang et al., "SignDS-FL: local differentially private
    federated learning with sign-based dimension selection", ACM TIST 2022.
"""

from __future__ import annotations

import dataclasses
import decimal
import functools
import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from scipy import special

from ldpsim._src._checks import LdpsimError
from ldpsim._src.privacy.noise.sampling import random_bits
from ldpsim._src.privacy.randomizers import randomizer as rz
from ldpsim._src.privacy.randomizers import rr
from ldpsim._src.privacy.randomizers.randomizer import LocalMechanism, Report

NAME = "signds"
DEFAULTS = dict(sign_k=0.01, sign_eps=100.0, sign_thr_ratio=0.6, sign_global_lr=0.1,
                sign_dim_out=0)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SignDSParams:
    """SignDS's numbers: the cumulative integer thresholds of ν (uint32[min(h, k), W], most
    significant word first), the realised E[ν] and the step (may be traced); d, k, h and ν_th
    (static)."""

    thresholds: jax.Array
    expected: jax.Array
    lr: jax.Array
    dim: int = dataclasses.field(metadata=dict(static=True))
    k: int = dataclasses.field(metadata=dict(static=True))
    h: int = dataclasses.field(metadata=dict(static=True))
    threshold: int = dataclasses.field(metadata=dict(static=True))


# ------------------------------------------------------------------------------ host side


def _log_comb(n: int, r: np.ndarray) -> np.ndarray:
    r = np.asarray(r, np.float64)
    ok = (r >= 0) & (r <= n)
    rr = np.where(ok, r, 0.0)
    out = special.gammaln(n + 1) - special.gammaln(rr + 1) - special.gammaln(n - rr + 1)
    return np.where(ok, out, -np.inf)


def pmf(threshold: int, k: int, d: int, h: int, eps: float) -> np.ndarray:
    """``P(ν)`` for ν = 0..h (float64, log space; MindSpore's ``calcPmf``)."""
    nu = np.arange(h + 1)
    logw = _log_comb(k, nu) + _log_comb(d - k, h - nu) + np.where(nu >= threshold, eps, 0.0)
    return np.exp(logw - special.logsumexp(logw))


#: Most 32-bit words of ν's grid (2048 bits).
MAX_WORDS = 64


def _feasible(k: int, d: int, h: int) -> tuple[int, int, list[int]]:
    """``(lo, hi, N)``: the counts ν ∈ [lo, hi] of a size-h set that a k-set can share, and
    ``N_ν = C(k, ν)·C(d − k, h − ν)`` (exact integers)."""
    lo, hi = max(0, h - (d - k)), min(h, k)
    return lo, hi, [math.comb(k, v) * math.comb(d - k, h - v) for v in range(lo, hi + 1)]


def _round_counts(sets: list[int], high: list[bool], eps: float, n_words: int) -> list[int]:
    """Integer counts ``m_ν ≥ 1`` summing to ``2^{32W}``, close to ``2^{32W}·P(ν)``: the ideal
    units times a common scale, rounded up below ν_th and down (after a relative margin
    ``max(8F²/2^{32W}, 1e-45)``, F the number of counts) at and above it; the residual of the
    sum goes to the largest count."""
    total = 1 << (32 * n_words)
    ctx = decimal.Context(prec=10 * n_words + 40, Emin=-999_999, Emax=999_999)
    D = decimal.Decimal
    e = ctx.exp(D(eps))
    f = len(sets)
    # the margin covers the rounding (8F²/2^{32W}) and the 1e-50 of the proof's logarithms
    shrink = ctx.subtract(D(1), max(ctx.divide(D(8 * f * f), D(total)), D(10) ** -45))
    units = [ctx.multiply(ctx.multiply(D(n), e), shrink) if hi else D(n)
             for n, hi in zip(sets, high)]
    scale = ctx.divide(D(total), sum(units, D(0)))
    counts = []
    for u, hi in zip(units, high):
        x = ctx.multiply(u, scale)
        r = x.to_integral_value(rounding=decimal.ROUND_FLOOR if hi else decimal.ROUND_CEILING)
        counts.append(max(int(r), 1))
    j = max(range(f), key=counts.__getitem__)
    counts[j] += total - sum(counts)
    return counts


def _worst_ratio(sets: list[int], counts: list[int]) -> tuple[int, int]:
    """``max_ν w_ν / min_ν w_ν`` with ``w_ν = m_ν/N_ν``, as a pair of integers."""
    w = [Fraction(m, n) for m, n in zip(counts, sets)]
    ratio = max(w) / min(w)
    return ratio.numerator, ratio.denominator


@functools.lru_cache(maxsize=64)
def realised_counts(threshold: int, k: int, d: int, h: int, eps: float) -> tuple[int, list[int]]:
    """``(W, m)``: ν's realised law on the ``32W``-bit grid, ``P(ν = j) = m[j]/2^{32W}`` for
    ``j = 0..min(h, k)`` (exact integers, 0 for infeasible counts), with the worst-case ratio
    ``max w/min w ≤ e^{ε(1 − 2⁻⁴⁴)}`` proven (module docstring).

    Raises:
        LdpsimError: no grid of at most :data:`MAX_WORDS` words realises it.
    """
    lo, hi, sets = _feasible(k, d, h)
    high = [v >= threshold for v in range(lo, hi + 1)]
    target = float(eps) * (1.0 - rr.TARGET_MARGIN)
    # the least probable count needs about log2(1/P) bits of the grid: start there
    logw = np.array([math.log(n) + (target if hi_ else 0.0) for n, hi_ in zip(sets, high)])
    bits = float((special.logsumexp(logw) - logw.min()) / math.log(2.0))
    for n_words in range(max(2, int(bits // 32)), MAX_WORDS + 1):
        counts = _round_counts(sets, high, target, n_words)
        if min(counts) < 1:
            continue
        if rr.ratio_within(*_worst_ratio(sets, counts), target):
            return n_words, [0] * lo + counts
    raise LdpsimError(f"signds with sign_eps {eps!r}, dim {d}, k {k}, h {h}: the law of the "
                      f"count cannot be realised within eps on a grid of {32 * MAX_WORDS} bits")


def realised_epsilon(threshold: int, k: int, d: int, h: int, eps: float) -> float:
    """The exact ε' of the realised law (a float at least it, within a few ulps)."""
    n_words, counts = realised_counts(threshold, k, d, h, eps)
    lo, _, sets = _feasible(k, d, h)
    return rr.log_ratio_upper(*_worst_ratio(sets, counts[lo:]))


def _expect(p: np.ndarray) -> float:
    return float(np.dot(np.arange(p.size), p))


def _java_comb(n: int, r: np.ndarray) -> np.ndarray:
    """MindSpore's ``comb(n, k)`` in IEEE double, vectorised over ``r``: the running product
    ``∏_{i ≤ min(r, n−r)} (n + 1 − i)/i`` (multiply, then divide, as the Java loop rounds),
    0 outside ``[0, n]``; it overflows to inf exactly where the Java code does."""
    r = np.asarray(r, np.int64)
    term = np.minimum(r, n - r)
    out = np.ones(r.shape, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        for i in range(1, int(max(term.max(initial=0), 0)) + 1):
            active = term >= i
            out = np.where(active, out * float(n + 1 - i), out)
            out = np.where(active, out / float(i), out)
    return np.where((r >= 0) & (r <= n), out, 0.0)


def _java_expectations(k: int, d: int, h: int, eps: float) -> np.ndarray:
    """MindSpore's ``calcExpectation(calcPmf(t, ...))`` for t = 1..h, in its double arithmetic
    (NaN where a count overflows, as in the Java code)."""
    nu = np.arange(h + 1)
    combs = _java_comb(k, nu) * _java_comb(d - k, h - nu)
    t = np.arange(1, h + 1)[:, None]
    with np.errstate(over="ignore", invalid="ignore"):
        w = np.where(nu[None, :] < t, combs[None, :], combs[None, :] * math.exp(eps))
        total = w.sum(axis=1, keepdims=True)
        pmf_t = w / total
        return (pmf_t * nu[None, :]).sum(axis=1)


def opt_threshold(k: int, d: int, h: int, eps: float) -> int:
    """MindSpore's ``calcOptThr``: raise t from 1 while the expected count rises (its double
    arithmetic; a NaN expectation stops the search, as ``NaN > x`` is false in Java)."""
    best, best_t = 0.0, 0
    for t, e in enumerate(_java_expectations(k, d, h, eps), start=1):
        if e > best:
            best, best_t = e, t
        else:
            break
    return max(best_t, 1)


def opt_output_dim(thr_ratio: float, k: int, d: int, eps: float) -> int:
    """MindSpore's ``findOptOutputDim``: raise h from 1 while ``E[ν]/h ≥ thr_ratio``; return the
    last such h. In MindSpore's double arithmetic, so where the counts ``C(k, ν)·C(d − k, h − ν)``
    overflow (large ``sign_k·d``) the expectation is NaN and the search stops there, as it
    does in MindSpore (its own unit test: h between 40 and 70 at d = 800,000, sign_k = 0.2)."""
    h = 1
    while h <= d:
        t = opt_threshold(k, d, h, eps)
        ratio = _java_expectations(k, d, h, eps)[t - 1] / h
        if ratio < thr_ratio or math.isnan(ratio):
            break
        h += 1
    return max(1, h - 1)


def _check_range(name, value, lo, hi, lo_open, hi_open=False):
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise LdpsimError(f"{name} must be a number, got {value!r}") from None
    bad = (not math.isfinite(v) or (v <= lo if lo_open else v < lo)
           or (v >= hi if hi_open else v > hi))
    if bad:
        interval = f"{'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
        raise LdpsimError(f"{name} must be in {interval} (MindSpore's range); got {value!r}")
    return v


def constants(*, dim: int, sign_k: float = 0.01, sign_eps: float = 100.0,
              sign_thr_ratio: float = 0.6, sign_global_lr: float = 0.1,
              sign_dim_out: int = 0) -> dict:
    """Host calibration (k, h, ν_th, the pmf of ν) with MindSpore's argument checks."""
    d = rz.check_dim(dim, 2, NAME)
    sk = _check_range("sign_k", sign_k, 0.0, 0.25, True)
    eps = rz.check_epsilon(sign_eps, "sign_eps")
    _check_range("sign_eps", eps, 0.0, 100.0, True)
    ratio = _check_range("sign_thr_ratio", sign_thr_ratio, 0.5, 1.0, False)
    lr = rz.check_epsilon(sign_global_lr, "sign_global_lr")
    if isinstance(sign_dim_out, bool) or int(sign_dim_out) != sign_dim_out or not 0 <= int(sign_dim_out) <= 50:
        raise LdpsimError(f"sign_dim_out must be an integer in [0, 50] (0: computed); got {sign_dim_out!r}")
    k = int(sk * d)
    if k < 1:
        raise LdpsimError(f"dim {dim!r} is too small for sign_k {sign_k!r}: the top-k set "
                          f"k = floor(sign_k*dim) is empty")
    h = int(sign_dim_out) or opt_output_dim(ratio, k, d, eps)
    if h > d - k:
        raise LdpsimError(f"sign_dim_out {sign_dim_out!r} needs dim {dim!r} - k >= {h}")
    thr = opt_threshold(k, d, h, eps)
    p = pmf(thr, k, d, h, eps)
    n_words, counts = realised_counts(thr, k, d, h, eps)
    total = 1 << (32 * n_words)
    lo, _, sets = _feasible(k, d, h)
    num, den = _worst_ratio(sets, counts[lo:])
    expected = float(Fraction(sum(j * m for j, m in enumerate(counts)), total))
    return dict(dim=d, k=k, h=h, threshold=thr, pmf=p, words=n_words, counts=counts,
                realised_pmf=np.array([float(Fraction(m, total)) for m in counts]),
                expected=expected, ideal_expected=_expect(p), epsilon=eps,
                realised_epsilon=rr.log_ratio_upper(num, den),
                printed_epsilon=rr.log_ratio_epsilon(num, den, eps), lr=lr)


# ---------------------------------------------------------------------------- device side


def _flat(update):
    flat, unravel = ravel_pytree(update)
    flat = flat.astype(jnp.float32)
    finite = jnp.all(jnp.isfinite(flat))
    return jnp.where(finite, flat, 0.0), finite, unravel


def _top_mask(score: jax.Array, k: int) -> jax.Array:
    _, idx = jax.lax.top_k(score, k)
    return jnp.zeros(score.shape, bool).at[idx].set(True)


def _uniform_below(key: jax.Array, n: jax.Array) -> jax.Array:
    """Exactly uniform on ``[0, n)`` (``n ≥ 1``, traced): a 32-bit word ``w`` mod n, redrawn
    (``fold_in(key, i)``, i = 1, 2, …) while ``w`` falls in the incomplete last block."""
    n = jnp.maximum(n, 1).astype(jnp.uint32)
    top = np.uint32(0xFFFFFFFF)
    limit = top - (top % n + np.uint32(1)) % n             # 2³² − 1 − (2³² mod n)

    def draw(i):
        return jax.random.bits(jax.random.fold_in(key, i), (), jnp.uint32)

    w, _ = jax.lax.while_loop(lambda c: c[0] > limit, lambda c: (draw(c[1]), c[1] + 1),
                              (draw(0), jnp.int32(1)))
    return (w % n).astype(jnp.int32)


def _select(key: jax.Array, nu: jax.Array, k: int, d: int, h: int) -> jax.Array:
    """int32[h]: slots ``0..ν−1`` a uniform ν-subset of ``[0, k)`` (positions in the top-k
    set), slots ``ν..h−1`` a uniform ``(h − ν)``-subset of ``[0, d − k)`` (ranks outside it),
    both by Floyd's algorithm (slot s draws uniformly on ``[0, j]`` and takes ``j`` on a
    collision with its own part) with exactly uniform integers."""
    slot = jnp.arange(h)

    def body(s, chosen):
        top_slot = s < nu
        j = jnp.where(top_slot, k - nu + s, d - k - h + s)        # Floyd's j for this slot
        t = _uniform_below(jax.random.fold_in(key, s), j + 1)
        same = ((slot < nu) == top_slot) & (slot < s)
        hit = jnp.any(same & (chosen == t))
        return chosen.at[s].set(jnp.where(hit, j, t))

    return jax.lax.fori_loop(0, h, body, jnp.zeros((h,), jnp.int32))


def privatize(key: jax.Array, update, params: SignDSParams) -> Report:
    """One client's report ``{"indices": int32[h] (sorted), "sign": ±1 (float32)}``.

    Cost: one ``top_k`` of the update (the top-k set), then O(h·W) for ν and O(h²) for the
    indices: ν of the k top-k indices and ``h − ν`` of the ``d − k`` others by Floyd's
    algorithm (the others through their ranks, mapped to indices with the sorted top-k set).
    """
    flat, finite, unravel = _flat(update)
    if flat.shape[0] != params.dim:
        raise LdpsimError(f"update has {flat.shape[0]} coordinates; these signds params are for "
                          f"dim {params.dim}")
    d, k, h = params.dim, params.k, params.h
    b = jnp.where(rz.bernoulli(rz.subkey(key, rz.TAG_SIGN), 0.5), 1.0, -1.0)   # bits < 2³¹
    _, top = jax.lax.top_k(b * flat, k)                          # T_b (ties: lower index)
    u = random_bits(rz.subkey(key, rz.TAG_CAP), params.thresholds.shape[-1:])
    nu = jnp.sum(~rr.below(u, params.thresholds)).astype(jnp.int32)   # #{j : U ≥ t_j}
    chosen = _select(rz.subkey(key, rz.TAG_SELECT), nu, k, d, h)
    t_sorted = jnp.sort(top)
    # the rank-i index outside T: i + #{m : t_m − m ≤ i}
    from_rest = chosen + jnp.searchsorted(t_sorted - jnp.arange(k), chosen,
                                          side="right").astype(jnp.int32)
    from_top = top[jnp.clip(chosen, 0, k - 1)]
    idx = jnp.where(jnp.arange(h) < nu, from_top, from_rest)
    # diagnostics: the zero substitute of a non-finite update, and a NaN norm flagging it
    norm = jnp.where(finite, jnp.sqrt(jnp.sum(jnp.square(flat))), jnp.nan)
    return Report(report={"indices": jnp.sort(idx).astype(jnp.int32), "sign": b},
                  clipped=unravel(flat), norm=norm, release_norm=jnp.where(finite, norm, 0.0),
                  was_clipped=jnp.bool_(False), finite=finite)


def decode(report, params, like=None):
    """MindSpore's reconstruction: ``b·sign_global_lr`` on the reported indices, 0 elsewhere
    (biased; see :func:`mean`)."""
    flat = jnp.zeros((params.dim,), jnp.float32).at[report["indices"]].set(
        report["sign"] * params.lr)
    return rz.unravel_like(flat, like)


def _selection_probabilities(params, update):
    flat, _, unravel = _flat(update)
    p_top = params.expected / params.k
    p_rest = (params.h - params.expected) / (params.dim - params.k)
    plus = jnp.where(_top_mask(flat, params.k), p_top, p_rest)
    minus = jnp.where(_top_mask(-flat, params.k), p_top, p_rest)
    return plus, minus, unravel


def mean(params, update):
    """Exact ``E[decode]``: ``lr·(P(i reported | b=+1) − P(i reported | b=−1))/2``."""
    plus, minus, unravel = _selection_probabilities(params, update)
    return unravel(params.lr * 0.5 * (plus - minus))


def variance(params, update):
    """Exact per-coordinate variance of :func:`decode` for this update."""
    plus, minus, unravel = _selection_probabilities(params, update)
    m = params.lr * 0.5 * (plus - minus)
    return unravel(jnp.square(params.lr) * 0.5 * (plus + minus) - m * m)


def make(*, dim: int, sign_k: float = 0.01, sign_eps: float = 100.0, sign_thr_ratio: float = 0.6,
         sign_global_lr: float = 0.1, sign_dim_out: int = 0, epsilon: float | None = None,
         clip: float | None = None) -> LocalMechanism:
    """SignDS with MindSpore's defaults (``epsilon`` is an alias of ``sign_eps``; ``clip`` is
    accepted and ignored: SignDS releases an order, not values).

    Raises:
        LdpsimError: an argument outside MindSpore's range (named), or a dimension for
            which the top-k set is empty.
    """
    if epsilon is not None:
        sign_eps = epsilon
    c = constants(dim=dim, sign_k=sign_k, sign_eps=sign_eps, sign_thr_ratio=sign_thr_ratio,
                  sign_global_lr=sign_global_lr, sign_dim_out=sign_dim_out)
    counts, n_words = c["counts"], c["words"]
    cumulative = np.cumsum(np.array(counts[:-1], dtype=object)) if len(counts) > 1 else []
    thresholds = np.stack([rr.words_of(int(t), n_words) for t in cumulative]) \
        if len(cumulative) else np.zeros((0, n_words), np.uint32)
    params = SignDSParams(thresholds=jnp.asarray(thresholds, jnp.uint32),
                          expected=jnp.float32(c["expected"]), lr=jnp.float32(c["lr"]),
                          dim=c["dim"], k=c["k"], h=c["h"], threshold=c["threshold"])
    eps = c["printed_epsilon"]
    h, lr, d = c["h"], c["lr"], c["dim"]
    std = math.sqrt(h / d) * lr   # E‖decoded‖² = h·lr² spread over d coordinates (upper bound)

    def dp_event(params):
        return rz.pure_dp_event(eps)

    line = (f"count nu: inverse CDF of a {32 * n_words}-bit Threefry integer against exact host "
            f"thresholds; sign bits < 2^31; indices by Floyd with rejection-exact integers: the "
            f"law is exactly eps'-LDP, eps' = {c['realised_epsilon']:.17g} <= eps "
            f"(Threefry bits modelled as uniform)")
    return LocalMechanism(name=NAME, params=params, neighbours="replace", epsilon=eps, delta=0.0,
                          privatize=privatize, noise_std=lambda params: jnp.float32(std),
                          dp_event=dp_event, decode=decode, mean=mean, variance=variance,
                          additive=False, unbiased=False, tail_mass=0.0, tail_scale=1.0,
                          ideal_epsilon=c["epsilon"], ideal_delta=0.0, realisation=line)


def audit_game(*, epsilon: float, dim: int, clip: float = 1.0) -> tuple:
    """SignDS's distinguishing game: ``x1 = (0, 1, …, d−1)`` and ``x0`` its reverse (top-k
    sets disjoint for both signs), scored by the exact log-likelihood ratio
    ``ε·(1[|S∩T_b(x1)| ≥ ν_th] − 1[|S∩T_b(x0)| ≥ ν_th])``; as
    :func:`ldpsim.audit.report_game` (``clip`` is unused: SignDS releases an order)."""
    local = make(dim=dim, sign_eps=epsilon)
    params = local.params

    def mech(key, x):
        return local.privatize(key, x, params).report

    x1 = jnp.arange(dim, dtype=jnp.float32)
    x0 = x1[::-1]
    k, thr, eps = params.k, params.threshold, float(local.epsilon)
    top = {}
    for label, x in (("x1", x1), ("x0", x0)):
        for b in (1.0, -1.0):
            _, idx = jax.lax.top_k(b * x, k)
            top[label, b] = jnp.zeros((dim,), bool).at[idx].set(True)

    def score(report):
        idx, b = report["indices"], report["sign"]
        n1 = jnp.sum(jnp.where(b > 0, top["x1", 1.0][idx], top["x1", -1.0][idx]))
        n0 = jnp.sum(jnp.where(b > 0, top["x0", 1.0][idx], top["x0", -1.0][idx]))
        return (eps * ((n1 >= thr).astype(jnp.float32) - (n0 >= thr).astype(jnp.float32)))

    what = "the exact log-likelihood ratio (top-k counts of the reported set against nu_th)"
    return mech, x0, x1, score, local, what


@functools.lru_cache(maxsize=64)
def _top_k_counts(dim: int, k: int, tops: tuple[tuple[str, bytes, bytes], ...]) -> tuple:
    out = []
    for label, plus, minus in tops:
        p = jnp.asarray(np.frombuffer(plus, np.bool_).reshape(dim))
        m = jnp.asarray(np.frombuffer(minus, np.bool_).reshape(dim))

        def fn(report, p=p, m=m):
            idx, b = report["indices"], report["sign"]
            return jnp.sum(jnp.where(b > 0, p[idx], m[idx])).astype(jnp.float32)

        out.append((f"reported indices in the top-k set of {label}", fn))
    return tuple(out)


def audit_statistics(params: SignDSParams, inputs: dict) -> tuple:
    """``(name, fn)`` statistics of SignDS reports for a support-mismatch audit: for each
    named input ``x``, the count ``|S ∩ T_b(x)|`` of reported indices inside its top-k set
    for the reported sign ``b`` (memoised on the masks, so kernels are shared)."""
    tops = []
    for label, x in inputs.items():
        flat = np.asarray(x, np.float32).ravel()
        masks = []
        for b in (1.0, -1.0):
            _, idx = jax.lax.top_k(jnp.asarray(b * flat), params.k)
            mask = np.zeros(params.dim, np.bool_)
            mask[np.asarray(idx)] = True
            masks.append(mask.tobytes())
        tops.append((label, *masks))
    return _top_k_counts(int(params.dim), int(params.k), tuple(tops))
