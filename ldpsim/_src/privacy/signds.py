"""SignDS as MindSpore Federated implements it (ALGORITHMS.md §1.8): pure ε-LDP index release.

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
   search for h there, as in MindSpore); the law of ν that is sampled is computed exactly,
   in log space (:func:`pmf`).
4. ``ν ~ P(ν) ∝ C(k, ν)·C(d − k, h − ν)·exp(ε·1[ν ≥ ν_th])`` (exponential mechanism, inverse
   CDF), then ν indices uniformly from ``T_b`` and ``h − ν`` from the rest.
5. Report ``{"indices": sorted int32[h], "sign": b}`` (no weights).

Server (``ParseSignDSFeatureMap``): the reconstructed update is ``b·sign_global_lr`` on the
reported indices and 0 elsewhere (:func:`decode`). This decoder is **not unbiased**: it
is MindSpore's fixed-step reconstruction. :func:`mean` and :func:`variance` give its exact
expectation and per-coordinate variance for a given update (coordinate i is reported with
probability ``E[ν]/k`` if ``i ∈ T_b`` and ``(h − E[ν])/(d − k)`` otherwise).

Guarantee: for a given b, every index set S of size h has probability
``exp(ε·1[|S ∩ T_b(Δ)| ≥ ν_th])/Z`` with ``Z = Σ_ν C(k,ν)C(d−k,h−ν)e^{ε1[ν≥ν_th]}`` independent
of Δ; b is independent of Δ. So the ratio for any two updates is at most ``e^ε``: **pure
ε-LDP for any two updates** (relation ``"replace"``; no clipping is needed, the release
depends on the order of the coordinates only; a non-finite update is replaced by 0).
The realised sampler draws ν by an inverse CDF in float32 (MindSpore: float64), so values
of ν whose probability is below the CDF's resolution (2⁻²⁴; MindSpore 2⁻⁵³) are never
drawn: as in MindSpore, exact ε-LDP holds for the ideal sampler, and the realised one gives
the sets with those counts probability 0.

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
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from scipy import special

from ldpsim._src._checks import LdpsimError
from ldpsim._src.privacy import randomizer as rz
from ldpsim._src.privacy.randomizer import LocalMechanism, Report

NAME = "signds"
DEFAULTS = dict(sign_k=0.01, sign_eps=100.0, sign_thr_ratio=0.6, sign_global_lr=0.1,
                sign_dim_out=0)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SignDSParams:
    """SignDS's numbers: the CDF of ν (float32[h+1]), E[ν] and the step (may be traced);
    d, k, h and ν_th (static)."""

    cdf: jax.Array
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
    return dict(dim=d, k=k, h=h, threshold=thr, pmf=p, expected=_expect(p), epsilon=eps, lr=lr)


# ---------------------------------------------------------------------------- device side


def _flat(update):
    flat, unravel = ravel_pytree(update)
    flat = flat.astype(jnp.float32)
    finite = jnp.all(jnp.isfinite(flat))
    return jnp.where(finite, flat, 0.0), finite, unravel


def _top_mask(score: jax.Array, k: int) -> jax.Array:
    _, idx = jax.lax.top_k(score, k)
    return jnp.zeros(score.shape, bool).at[idx].set(True)


def _uniform_int(bits: jax.Array, n: jax.Array) -> jax.Array:
    """``⌊bits·n/2³²⌋ ∈ [0, n)`` (multiply-shift; bias at most ``n/2³²`` relative)."""
    return ((bits.astype(jnp.uint64) * n.astype(jnp.uint64)) >> 32).astype(jnp.int32) \
        if jax.config.jax_enable_x64 else jnp.minimum(
            (bits.astype(jnp.float32) * (n.astype(jnp.float32) / np.float32(2.0**32))).astype(jnp.int32), n - 1)


def _floyd(bits: jax.Array, start: jax.Array, population: int, size: int) -> jax.Array:
    """Uniform ``(size − start)``-subset of ``[0, population)`` by Floyd's algorithm, in slots
    ``start..size−1`` of an int32[size] (slots before ``start`` are −1). ``start`` is traced."""

    def body(s, chosen):
        j = population - size + s                       # Floyd's j for this slot
        t = _uniform_int(bits[s], jnp.asarray(j + 1))
        pick = jnp.where(jnp.any(chosen == t), j, t)
        return chosen.at[s].set(jnp.where(s >= start, pick, -1))

    return jax.lax.fori_loop(0, size, body, jnp.full((size,), -1, jnp.int32))


def privatize(key: jax.Array, update, params: SignDSParams) -> Report:
    """One client's report ``{"indices": int32[h] (sorted), "sign": ±1 (float32)}``.

    Cost: one ``top_k`` of the update (the top-k set), then O(k + h²) work: ν of the k
    top-k indices by a random order of those k, and ``h − ν`` of the ``d − k`` others by
    Floyd's algorithm on their ranks (mapped to indices through the sorted top-k set).
    """
    flat, finite, _ = _flat(update)
    if flat.shape[0] != params.dim:
        raise LdpsimError(f"update has {flat.shape[0]} coordinates; these signds params are for "
                          f"dim {params.dim}")
    d, k, h = params.dim, params.k, params.h
    b = jnp.where(rz.bernoulli(rz.subkey(key, rz.TAG_SIGN), 0.5), 1.0, -1.0)
    _, top = jax.lax.top_k(b * flat, k)                          # T_b (ties: lower index)
    u = jax.random.uniform(rz.subkey(key, rz.TAG_CAP), (), jnp.float32)
    nu = jnp.sum(u >= params.cdf[:-1]).astype(jnp.int32)       # inverse CDF on ν = 0..h
    nu = jnp.minimum(nu, min(h, k))
    sel = rz.subkey(key, rz.TAG_SELECT)
    order = jax.random.uniform(jax.random.fold_in(sel, 0), (k,), jnp.float32)
    from_top = top[jax.lax.top_k(order, min(h, k))[1]]          # a uniform ν-subset of T
    ranks = _floyd(jax.random.bits(jax.random.fold_in(sel, 1), (h,), jnp.uint32), nu, d - k, h)
    t_sorted = jnp.sort(top)
    # the rank-i index outside T: i + #{m : t_m − m ≤ i}
    from_rest = ranks + jnp.searchsorted(t_sorted - jnp.arange(k), ranks, side="right").astype(jnp.int32)
    j = jnp.arange(h)
    idx = jnp.where(j < nu, from_top[jnp.minimum(j, min(h, k) - 1)], from_rest)
    norm = jnp.sqrt(jnp.sum(jnp.square(flat)))
    return Report(report={"indices": jnp.sort(idx).astype(jnp.int32), "sign": b},
                  clipped=update, norm=norm, release_norm=jnp.where(finite, norm, 0.0),
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
    cdf = np.cumsum(c["pmf"])
    params = SignDSParams(cdf=jnp.asarray(cdf, jnp.float32), expected=jnp.float32(c["expected"]),
                          lr=jnp.float32(c["lr"]), dim=c["dim"], k=c["k"], h=c["h"],
                          threshold=c["threshold"])
    eps = c["epsilon"]
    h, lr, d = c["h"], c["lr"], c["dim"]
    std = math.sqrt(h / d) * lr   # E‖decoded‖² = h·lr² spread over d coordinates (upper bound)

    def dp_event(params):
        return rz.pure_dp_event(eps)

    return LocalMechanism(name=NAME, params=params, neighbours="replace", epsilon=eps, delta=0.0,
                          privatize=privatize, noise_std=lambda params: jnp.float32(std),
                          dp_event=dp_event, decode=decode, mean=mean, variance=variance,
                          additive=False, unbiased=False)
