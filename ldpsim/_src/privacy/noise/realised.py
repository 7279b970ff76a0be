"""What the float32 code delivers: the guarantee of the realised mechanisms (host side).

Every sampler that runs has a finite range and a finite resolution, so the law a mechanism
realises is not the ideal real-number law its proof is about (Mironov, "On significance of
the least significant bits for differential privacy", CCS 2012). This module turns a
description of a realisation into a guarantee that is never stronger than what it delivers.

The model
---------
A sampler is modelled by its *continuous idealisation*: the ideal law of the draw
restricted to the set the sampler can reach and renormalised (e.g. ldpsim's Box–Muller
draw with ``U ≥ 2⁻³³`` is the 2-D standard normal conditioned on the disk of radius
``√(66 ln 2)``). What this still leaves out -- the outputs' float32 grid -- is the caveat
every floating-point DP library states (Mironov 2012): rounding the release can leak the
low bits of the input, and ldpsim does not defend against it.

Two facts about a realisation then bound its privacy (docs/privacy_sharp_edges.md,
"what the floats deliver"):

* ``tail_mass`` η: the probability, over the worst pair of inputs, that the release lands
  where the other input's realisation has zero density (a *support mismatch*: an event that
  tells the two apart with certainty).
* ``tail_scale`` s ≥ 1: on outputs both can produce, the realised density is the ideal one
  times at most s (the renormalisation ``1/Z``), with the same factor for both inputs.

For ``k`` adaptively composed releases whose ideal part is ``event`` this gives

    δ_k(ε) ≤ 1 − (1 − η)^k + s^k · δ_event,k(ε)                         (1)

(split the product space on "some release fell where a neighbour cannot reach"; off that
event the realised densities are the ideal ones times ``s`` each, on it the hockey-stick
integrand is at most the realised probability of the event, at most ``1 − (1 − η)^k`` by a
union bound over the rounds). An (ε, δ)-DP mechanism with no finer structure is dominated
by binary randomized response at ε composed with "reveal with probability δ" (Kairouz, Oh
& Viswanath, ICML 2015), so it enters (1) with ``event = RR(ε)``, ``η = δ``, ``s = 1``.
"""

from __future__ import annotations

import math

__all__ = ["compose_delta", "delta_budget"]


def compose_delta(ideal_delta: float, tail_mass: float, tail_scale: float, count: int) -> float:
    """Bound (1): the δ of ``count`` realised releases whose ideal part has ``ideal_delta``.

    Args:
        ideal_delta: ``δ_event,k(ε)`` of the ideal event composed ``count`` times, at the ε
            of interest.
        tail_mass: η per release.
        tail_scale: s ≥ 1 per release.
        count: the number of releases k ≥ 0.

    Returns:
        The realised δ at that ε (at most 1).
    """
    k = int(count)
    if k == 0:
        return 0.0
    off = -math.expm1(k * math.log1p(-tail_mass)) if tail_mass < 1 else 1.0
    return min(1.0, off + math.exp(k * math.log(tail_scale)) * ideal_delta)


def delta_budget(delta: float, tail_mass: float, tail_scale: float, count: int) -> float:
    """The δ left for the ideal event so that (1) stays at most ``delta`` after ``count``
    releases: ``(δ − (1 − (1 − η)^k)) / s^k``; ``≤ 0`` means no ε reaches ``delta``
    (report ε = inf)."""
    k = int(count)
    if k == 0:
        return float(delta)
    off = -math.expm1(k * math.log1p(-tail_mass)) if tail_mass < 1 else 1.0
    return (float(delta) - off) / math.exp(k * math.log(tail_scale))


# ------------------------------------------------------------------ additive noise samplers
#
# A coordinate of additive noise (units of its scale σ or b) is drawn by one of ldpsim's
# samplers; its continuous idealisation is one of two kinds:
#
# * "disk" (Box–Muller with U ≥ U_min): the coordinate is X of a 2-D standard normal (X, Y)
#   conditioned on X² + Y² ≤ R², R = √(−2 ln U_min). The release of x + σX is a
#   post-processing of the release of (x + σX, σY), whose law is the 2-D normal restricted
#   to a disk: the analysis below runs on the pairs, the shift acting on X only.
# * "cube": the coordinate is N(0, 1) (or Laplace(1)) conditioned on |z| ≤ T.
#
# In both, the realised law of the whole release is the ideal one restricted to a product
# set C (of disks or intervals) and renormalised by Z = Z₁^d, the same for every input (C is
# translated with the input). For two inputs whose releases differ by the shift s (in units
# of the scale), with a_i = |s_i|:
#
#   h(a) = P(coordinate in range, coordinate + a out of range)   (ideal, unnormalised)
#   k(a) = P(coordinate out of range, coordinate − a in range)
#
# The region one input reaches and the other does not has realised probability at most
# Σ h(a_i)/Z₁ (the other coordinates' restriction cancels), and on it the ideal density of
# the other input integrates to at most Σ k(a_i). Hence, per release,
#
#   η = sup Σ h(a_i)/Z₁,    s = 1/Z₁^d,                                      (2)
#   δ(ε) ≤ (δ_ideal(ε) + sup Σ min(h(a_i), e^ε k(a_i))) / Z₁^d,               (3)
#
# the sups over shifts with Σ a_i² ≤ S² (L2, Gaussian) or Σ a_i ≤ S (L1, Laplace), over at
# most d coordinates. They are bounded by d·F̂(S²/d) (resp. d·F̂(S/d)) with F̂ the least
# concave majorant of F(b) = f(√b) (resp. f(a)) on [0, S²]: Σ F(b_i) ≤ Σ F̂(b_i) ≤ d·F̂(Σb_i/d)
# (Jensen) and F̂ is nondecreasing. F̂ is computed from a grid, taking on each cell the value
# at its right end (f is nondecreasing), so the piecewise-linear hull lies above F.

import functools
from typing import NamedTuple

import numpy as np
from scipy import special


#: The samplers each law can run with (sampling.py implements them).
SAMPLERS = {"gaussian": ("tail", "fast", "icdf", "jax"), "laplace": ("bits", "jax")}
#: ldpsim's default samplers (threefry keys): the Gaussian's reaches 11.6σ, the Laplace's 44.4b.
DEFAULT_SAMPLER = {"gaussian": "tail", "laplace": "bits"}
#: The dimension a guarantee is stated for when the caller does not give one (it then holds
#: for every update of at most this many coordinates).
DEFAULT_DIM = 10**7


def default_sampler(law: str) -> str:
    """ldpsim's default sampler for ``law`` (``"gaussian"`` or ``"laplace"``); for Gaussian
    noise the environment variable ``LDPSIM_NOISE_SAMPLER`` (``tail``, ``fast``, ``icdf``)
    overrides it, e.g. ``fast`` to reproduce histories computed before ``tail`` was the
    default (every accountant then states ``fast``'s guarantee)."""
    import os

    from ldpsim._src._checks import check_choice

    if law == "gaussian" and os.environ.get("LDPSIM_NOISE_SAMPLER"):
        return check_choice("LDPSIM_NOISE_SAMPLER", os.environ["LDPSIM_NOISE_SAMPLER"],
                            ("tail", "fast", "icdf"))
    return DEFAULT_SAMPLER[law]


def check_dim(dim) -> int:
    """``dim`` as an int ≥ 1, or :data:`DEFAULT_DIM` for None."""
    from ldpsim._src._checks import LdpsimError

    if dim is None:
        return DEFAULT_DIM
    try:
        d = int(dim)
    except (TypeError, ValueError):
        raise LdpsimError(f"dim must be a positive integer, got {dim!r}") from None
    if d != dim or d < 1:
        raise LdpsimError(f"dim must be a positive integer, got {dim!r}")
    return d


class SamplerModel(NamedTuple):
    """The continuous idealisation of one noise sampler (see above).

    Attributes:
        law: ``"gaussian"`` or ``"laplace"``.
        kind: ``"disk"`` or ``"cube"``.
        bound: R (disk) or T (cube), in units of the noise scale.
        coordinate_tail_mass: ``1 − Z₁``: the ideal mass the sampler never reaches, per
            coordinate (U_min for a disk, ``P(|Z| > T)`` for a cube).
    """

    law: str
    kind: str
    bound: float
    coordinate_tail_mass: float


def _disk(u_min: float, bound: float) -> SamplerModel:
    return SamplerModel("gaussian", "disk", bound, u_min)


# Every reach below is derived from the samplers' bits (ldpsim._src.privacy.noise.sampling, "Reach";
# 40-digit mpmath values rounded to float64, checked against the samplers in
# tests/privacy/test_sampling.py). A sampler whose two sides reach differently (jax.random)
# is modelled by its smaller one-sided reach: the symmetric model over-states both the mass a
# neighbour cannot reach and the renormalisation, so it is conservative.
_MODELS = {
    ("gaussian", "fast"): _disk(2.0**-33, 6.763705635001895),     # U ≥ 2**-33: √(66 ln 2)
    ("gaussian", "tail"): _disk(2.0**-97, 11.59614388616446),     # U ≥ 2**-97: √(194 ln 2)
    # sign bit + p ≥ 2**-64: T = Φ⁻¹(1 − 2**-64), P(|Z| > T) = 2**-63
    ("gaussian", "icdf"): SamplerModel("gaussian", "cube", 9.080155124873613, 2.0**-63),
    # jax.random.normal: √2·erfinv(u), u ∈ [−1 + 2**-24, 1 − 3·2**-24]: T = Φ⁻¹(1 − 3·2**-25)
    ("gaussian", "jax"): SamplerModel("gaussian", "cube", 5.220113060600540, 3.0 * 2.0**-24),
    # sign bit + U ≥ 2**-64: T = 64 ln 2, P(|L| > T) = 2**-64
    ("laplace", "bits"): SamplerModel("laplace", "cube", 44.36141955583650, 2.0**-64),
    # jax.random.laplace: the negative side stops at 24 ln 2 − ln 3
    ("laplace", "jax"): SamplerModel("laplace", "cube", 15.53692004477058, 3.0 * 2.0**-24),
}


def sampler_model(impl: str, law: str = "gaussian") -> SamplerModel:
    """The model of ldpsim's noise sampler ``impl`` (``law`` ``"gaussian"`` or ``"laplace"``)."""
    from ldpsim._src._checks import check_choice

    check_choice("law", law, tuple(SAMPLERS))
    return _MODELS[(law, check_choice("sampler", impl, SAMPLERS[law]))]


def _gauss_interval(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``P(lo < Z ≤ hi)`` for Z ~ N(0, 1), accurate in both tails (lo ≤ hi elementwise)."""
    lo, hi = np.broadcast_arrays(np.asarray(lo, float), np.asarray(hi, float))
    # on the upper side use survival functions, on the lower side CDFs (no cancellation)
    upper = lo >= 0
    out = np.where(upper, special.ndtr(-lo) - special.ndtr(-hi), special.ndtr(hi) - special.ndtr(lo))
    return np.maximum(out, 0.0)


def _lap_interval(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``P(lo < Z ≤ hi)`` for Z ~ Laplace(0, 1), for 0 ≤ lo ≤ hi (upper side)."""
    return 0.5 * (np.exp(-lo) - np.exp(-hi))


def _interval_hk(law: str, t: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """h and k of one interval [−t, t] and shift a ≥ 0 (ideal, unnormalised)."""
    lo_h = np.maximum(t - a, -t)       # in range, z + a > t  <=>  z ∈ (max(t − a, −t), t]
    lo_k = np.maximum(t, a - t)        # out of range (z > t), z − a ≥ −t, z − a ≤ t
    if law == "laplace":
        # h: (t − a, t] on the upper side (for a > t the part below 0 adds the lower side)
        h = np.where(lo_h >= 0, _lap_interval(np.maximum(lo_h, 0), t),
                     0.5 * (1 - np.exp(-t)) + 0.5 * (1 - np.exp(-np.abs(lo_h))))
        k = _lap_interval(lo_k, t + a)
        return h, k
    return _gauss_interval(lo_h, t), _gauss_interval(lo_k, t + a)


@functools.lru_cache(maxsize=4)
def _leggauss(n: int) -> tuple[np.ndarray, np.ndarray]:
    x, w = special.roots_legendre(n)
    return np.asarray(x), np.asarray(w)


def _hk(model: SamplerModel, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """h(a), k(a) of the model (vectorised over a ≥ 0)."""
    a = np.asarray(a, float)
    if model.kind == "cube":
        return _interval_hk(model.law, np.full_like(a, model.bound), a)
    # disk: integrate the interval formulas over Y = y (|y| < R, half-width √(R² − y²)) by
    # Gauss–Legendre in θ (y = R sin θ, smooth in θ); two orders, the larger result kept
    # and inflated by their difference (the bound must not be below the integral)
    r = model.bound
    out = []
    for n in (192, 384):
        x, w = _leggauss(n)
        theta = 0.25 * np.pi * (x + 1.0)                   # [0, π/2]
        wt = 0.25 * np.pi * w * r * np.cos(theta) * 2.0    # dy = R cos θ dθ, both signs of y
        dens = np.exp(-0.5 * np.square(r * np.sin(theta))) / math.sqrt(2 * math.pi)
        t = (r * np.cos(theta))[:, None]
        h_y, k_y = _interval_hk("gaussian", np.broadcast_to(t, (n, a.size)), a.ravel()[None, :])
        out.append((np.sum((wt * dens)[:, None] * h_y, axis=0),
                    np.sum((wt * dens)[:, None] * k_y, axis=0)))
    (h1, k1), (h2, k2) = out
    h = np.maximum(h1, h2) + np.abs(h2 - h1)
    k = np.maximum(k1, k2) + np.abs(k2 - k1)
    return h.reshape(a.shape), k.reshape(a.shape)


#: Absolute grid of shifts (in units of the scale) on which h and k are tabulated once per
#: sampler; a table for a shift S is the grid below S plus S itself.
_GRID = np.concatenate([[0.0], np.geomspace(1e-9, 100.0, 481)])
#: Relative safety factor on every computed bound (covers quadrature and rounding errors).
_SAFETY = 1.0 + 1e-6


@functools.lru_cache(maxsize=16)
def _base_table(model: SamplerModel) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    h, k = _hk(model, _GRID)
    return _GRID, h, k


@functools.lru_cache(maxsize=512)
def _table(model: SamplerModel, shift: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(a grid ending at ``shift``, h on it, k on it), h and k made nondecreasing."""
    grid, hg, kg = _base_table(model)
    below = grid < shift
    h_s, k_s = _hk(model, np.array([shift]))
    a = np.concatenate([grid[below], [shift]])
    h = np.concatenate([hg[below], h_s])
    k = np.concatenate([kg[below], k_s])
    return a, np.maximum.accumulate(h), np.maximum.accumulate(k)


def _hull_at(x: np.ndarray, y: np.ndarray, x0: float) -> float:
    """The least concave majorant of the points (x, y) (x increasing) evaluated at x0,
    made nondecreasing."""
    hull: list[int] = []
    for i in range(len(x)):
        while len(hull) >= 2:
            i1, i2 = hull[-2], hull[-1]
            # drop i2 if it lies on or below the chord i1 -> i
            if (y[i2] - y[i1]) * (x[i] - x[i1]) <= (y[i] - y[i1]) * (x[i2] - x[i1]):
                hull.pop()
            else:
                break
        hull.append(i)
    hx, hy = x[hull], np.maximum.accumulate(y[hull])
    return float(np.interp(x0, hx, hy))


def _sup_sum(f_right: np.ndarray, a: np.ndarray, shift: float, dim: int, norm: str) -> float:
    """Upper bound on ``sup Σ_{i ≤ d} f(a_i)`` over shifts of L2 (or L1) norm ≤ ``shift``;
    ``f_right[j]`` bounds f on the cell ``[a[j], a[j+1]]`` (its value at the right end)."""
    if shift <= 0 or dim <= 0:
        return 0.0
    x = np.square(a) if norm == "l2" else a
    # cell j: [x_j, x_{j+1}] with value f(a_{j+1}); the last point with its own value
    y = np.concatenate([f_right[1:], f_right[-1:]])
    total = x[-1]
    return _SAFETY * dim * _hull_at(x, y, total / dim)


class AdditiveRealisation(NamedTuple):
    """η and s of bound (1) for one release of additive noise, with the model behind them."""

    tail_mass: float
    tail_scale: float
    model: SamplerModel
    shift: float
    dim: int
    norm: str


def additive_realisation(law: str, impl: str, shift: float, dim: int) -> AdditiveRealisation:
    """η (2) and s = 1/Z₁^d of a release of ``dim`` coordinates of noise from sampler
    ``impl`` whose pairs of inputs differ by at most ``shift`` scales (L2 for Gaussian, L1
    for Laplace)."""
    model = sampler_model(impl, law)
    norm = "l2" if law == "gaussian" else "l1"
    d = int(dim)
    log_z1 = math.log1p(-model.coordinate_tail_mass)
    scale = math.exp(-d * log_z1)
    if not shift > 0:
        return AdditiveRealisation(0.0, scale, model, float(shift), d, norm)
    if shift >= 2.0 * model.bound:   # one coordinate's ranges no longer overlap: η = 1
        return AdditiveRealisation(1.0, scale, model, float(shift), d, norm)
    a, h, _ = _table(model, float(shift))
    eta = min(1.0, _sup_sum(h, a, float(shift), d, norm) / math.exp(log_z1))
    return AdditiveRealisation(eta, scale, model, float(shift), d, norm)


def _ideal_delta(law: str, shift: float, epsilon: float, count: int) -> float:
    """δ(ε) of ``count`` ideal releases whose pairs differ by ``shift`` scales."""
    if law == "gaussian":
        from ldpsim._src.privacy.noise import gaussian_exact

        return gaussian_exact.analytic_gaussian_delta(1.0, epsilon, shift * math.sqrt(count))
    import dp_accounting

    if count == 1:   # Laplace, one release: 1 − e^{(ε − S)/2} below S, else 0
        return max(0.0, -math.expm1((epsilon - shift) / 2.0))
    acc = dp_accounting.pld.PLDAccountant()
    acc.compose(dp_accounting.LaplaceDpEvent(1.0 / shift), count)
    return float(acc.get_delta(epsilon))


def realised_delta(law: str, impl: str, shift: float, dim: int, epsilon: float,
                   count: int = 1) -> float:
    """The δ at ``epsilon`` that ``count`` realised releases deliver (never below the truth
    under the model): bound (1) with (2), and for one release also (3); the smaller."""
    r = additive_realisation(law, impl, shift, dim)
    if count == 0:
        return 0.0
    ideal = _ideal_delta(law, shift, epsilon, count)
    best = compose_delta(ideal, r.tail_mass, r.tail_scale, count)
    if count == 1 and 0 < shift < 2.0 * r.model.bound:
        a, h, k = _table(r.model, float(shift))
        f = np.minimum(h, math.exp(min(epsilon, 700.0)) * k)
        extra = _sup_sum(f, a, float(shift), r.dim, r.norm)
        best = min(best, (ideal + extra) * r.tail_scale)
    return min(1.0, best)


def _ideal_epsilon(law: str, shift: float, delta: float, count: int) -> float:
    """ε at ``delta`` of ``count`` ideal releases whose pairs differ by ``shift`` scales."""
    if law == "gaussian":
        from ldpsim._src.privacy.noise import gaussian_exact

        return gaussian_exact.analytic_gaussian_epsilon(1.0, delta, shift * math.sqrt(count))
    return count * shift   # Laplace: pure, basic composition (tight for a worst-case pair)


def realised_epsilon(law: str, impl: str, shift: float, dim: int, delta: float,
                     count: int = 1) -> float:
    """The smallest ε (to 1e-9 relative, rounded up) at which ``count`` realised releases
    deliver ``delta`` under bound (1) (and (3) for one release); ``inf`` when none does."""
    if count == 0 or not shift > 0:
        return 0.0
    r = additive_realisation(law, impl, shift, dim)
    budget = delta_budget(delta, r.tail_mass, r.tail_scale, count)
    best = _ideal_epsilon(law, shift, budget, count) if budget > 0 else math.inf
    if law == "laplace" and best < math.inf:
        # pure ideal part: δ_ideal = 0 at ε = k·S, so (1) holds iff the tails alone fit
        best = best if compose_delta(0.0, r.tail_mass, r.tail_scale, count) <= delta else math.inf
    if count == 1 and r.tail_mass > 1e-9 * delta:   # bound (3): bisect below the composed answer
        top = best if math.isfinite(best) else 1e4
        if realised_delta(law, impl, shift, dim, top) <= delta:
            lo = 0.0
            for _ in range(200):
                mid = 0.5 * (lo + top)
                if mid > 0 and realised_delta(law, impl, shift, dim, mid) <= delta:
                    top = mid
                else:
                    lo = mid
                if top - lo <= 1e-10 * top:
                    break
            best = min(best, top)
    return best


def gaussian_shift_for(epsilon: float, delta: float, impl: str, dim: int,
                       ideal_shift: float) -> float:
    """The largest shift S = Δ/σ (≤ ``ideal_shift``, the ideal analytic one) at which one
    realised Gaussian release delivers (ε, δ): σ = Δ/S is the realised calibration.

    Raises:
        LdpsimError: no S ≥ 1e-300·``ideal_shift`` does (δ far below what any float
            sampler's reach allows).
    """
    from ldpsim._src._checks import LdpsimError

    def ok(shift: float) -> bool:
        return realised_delta("gaussian", impl, shift, dim, epsilon) <= delta

    if ok(ideal_shift):
        return ideal_shift
    hi, lo = ideal_shift, ideal_shift / 2.0
    while not ok(lo):   # down by halves (the realised δ of tiny shifts is linear in S)
        hi, lo = lo, lo / 2.0
        if lo < 1e-300 * ideal_shift:
            raise LdpsimError(
                f"delta {delta:g} is below what the float32 sampler {impl!r} can deliver at "
                f"epsilon {epsilon:g} for {dim:,} coordinates (its bounded tails); use a "
                f"larger delta")
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if ok(mid):
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return lo
