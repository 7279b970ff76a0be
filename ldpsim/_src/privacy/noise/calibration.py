"""Noise calibration: (ε, δ, sensitivity) -> noise scale. Host-side scalar maths.

Three Gaussian methods and the Laplace scale:

* ``analytic`` (default): the exact analytic Gaussian mechanism of Balle & Wang
  (ICML 2018, arXiv:1805.06530, Thm. 8). N(0, σ²) noise on a query of L2
  sensitivity Δ is (ε, δ)-DP **iff**
  ``δ(σ) = Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ) ≤ δ``; we solve
  ``δ(σ) = δ`` with Brent's method (bracketed in log σ, polished in σ) and
  round σ up to the first float whose exact δ(σ) is ≤ δ, so σ is the smallest
  valid noise and ``δ(σ)`` reproduces the target to ~1e-12 relative.
* ``classic``: ``σ = Δ·√(2 ln(1.25/δ))/ε`` (Dwork & Roth 2014, Thm. A.1). Its
  proof requires ε < 1; for ε ≥ 1 a :class:`ClassicGaussianRangeWarning` is
  issued (the formula is then not a proven guarantee).
* ``mindspore``: MindSpore Federated's ``SecureProtocol.calculateSigma``
  numerics: Balle–Wang Algorithm 1 with erf by trapezoidal
  integration over 10,000 segments cast to float32, doubling + bisection with
  an absolute δ tolerance of 1e-6 and at most 1,000 iterations. Usually a little
  more conservative than exact, but **not always** (see below); offered for
  parity with MindSpore only. Defined for ε ≤ :data:`MINDSPORE_MAX_EPSILON`
  (≈ 709.78: MindSpore evaluates ``exp(ε)`` in double precision).
* Laplace: ``b = Δ₁/ε`` gives pure ε-DP for L1 sensitivity Δ₁ (Dwork & Roth,
  Thm. 3.6).

The neighbouring relation is explicit (see :func:`sensitivity`): for local DP
with **replace-one** neighbours a client update clipped to norm C may be replaced
by any other clipped update, so the sensitivity is ``2C`` (the default, and the
correct one for LDP). MindSpore calibrates with ``C``, which is the sensitivity
under **add/remove** neighbours (an update vs. no update). Every output names the
relation it used.

What the numbers mean
---------------------
A :class:`Calibration` states one release of one clipped client update: the
requested ``(epsilon, delta)`` holds for neighbouring inputs under the named
relation, i.e. for two updates at L2 (Gaussian) or L1 (Laplace) distance at most
``sensitivity`` (2C replace-one, C add/remove). Next to the request it carries
what the returned noise **actually achieves**, computed exactly (Balle & Wang's
δ(σ) is necessary and sufficient; it is evaluated through ``log Φ`` and ``erfcx``
-- or, for large σ and small ε, as a short Gaussian integral by quadrature -- with
``Δ/(2σ) ± εσ/Δ`` in exact rational arithmetic, so without cancellation or
overflow: ~1e-11 relative against 60+-digit mpmath for δ ≥ 1e-300):

* ``achieved_delta`` -- the exact δ(σ) at the requested ε (the smallest δ for
  which σ is (ε, δ)-DP);
* ``achieved_epsilon`` -- the exact smallest ε for which σ is (ε, δ)-DP at the
  requested δ (:func:`analytic_gaussian_epsilon`; agrees with
  ``dp_accounting.get_epsilon_gaussian``).

For ``analytic`` they equal the request (δ never above it). ``classic`` and
``mindspore`` can miss it: classic for ε ≳ 1, MindSpore's numerics at extremes
(its float32 Φ cannot resolve small δ: ε = 0.01, δ = 1e-12 gives σ = 445.5 with
an exact δ of 1.95e-9, not 1e-12 -- the exact σ is 579.0). Whenever the achieved δ
exceeds the request by more than :data:`SHORTFALL_RTOL` (relative) a
:class:`CalibrationShortfallWarning` is issued and ``ldpsim calibrate`` prints it.
All of this is about ideal real-valued noise; a float sampler adds its own
(tiny) deviations (see :mod:`ldpsim._src.privacy.noise.sampling` on tails).

Extreme values: every entry point accepts any finite ε > 0 and δ in (0, 1) and
either returns a finite positive scale or raises :class:`~ldpsim.LdpsimError`
naming the value and its valid range (e.g. MindSpore's numerics above ε ≈ 709.78,
or classic's σ ∝ 1/ε beyond float64 at ε ≈ 1e-320); never an
``OverflowError`` or NaN. For huge ε (≳ 1e15) σ's float64 spacing is coarser than
the δ(σ) curve, so the analytic σ (rounded up) may over-deliver: achieved δ < δ.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import warnings
from fractions import Fraction
from typing import Any

import numpy as np
from scipy import special

from ldpsim._src._checks import LdpsimError, check_choice, check_open_unit, check_positive
from ldpsim._src.privacy.noise import realised
from ldpsim._src.privacy.noise.gaussian_exact import (  # noqa: F401  (re-exported)
    _log_delta,
    _root_decreasing,
    _round_up,
    _to_float,
    analytic_gaussian_delta,
    analytic_gaussian_epsilon,
)

NEIGHBOURS = ("replace", "add-remove")
GAUSSIAN_METHODS = ("analytic", "classic", "mindspore")
MECHANISMS = ("gaussian", "laplace")

#: Relative tolerance above which an achieved δ counts as a shortfall (δ_ach > δ·(1 + tol)).
SHORTFALL_RTOL = 1e-6
#: Largest ε MindSpore's numerics are defined for: ``ln(DBL_MAX)`` (``exp(ε)`` overflows above).
MINDSPORE_MAX_EPSILON = math.log(sys.float_info.max)

_FLOAT_MAX = sys.float_info.max
_FLOAT_TINY = math.ulp(0.0)  # 5e-324, the smallest positive float
_SQRT2 = math.sqrt(2.0)
_LOG2 = math.log(2.0)


class ClassicGaussianRangeWarning(UserWarning):
    """The classic Gaussian formula was used with ε ≥ 1, outside the range of its proof."""


#: The remedy the messages of the other calibrations name (the API argument and the flags).
_USE_ANALYTIC = ("use the analytic calibration (method='analytic'; on the command line "
                 "--calibration analytic, or --method analytic in ldpsim calibrate)")


class CalibrationShortfallWarning(UserWarning):
    """A calibrated σ delivers less privacy than requested.

    Issued when the exact δ(σ) at the requested ε exceeds the requested δ by more
    than :data:`SHORTFALL_RTOL` (relative). The message gives σ, the exactly
    achieved ε (at the requested δ) and δ (at the requested ε).
    """


def sensitivity(clip: float, neighbours: str = "replace") -> float:
    """Sensitivity of a client update clipped to norm ``clip`` under a neighbouring relation.

    Args:
        clip: the clip bound C > 0 (an L2 bound for the Gaussian mechanism, an L1
            bound for the Laplace mechanism; the rule is the same).
        neighbours: ``"replace"`` (replace-one: any clipped update may be swapped
            for any other, ‖u − u'‖ ≤ 2C; the correct relation for local DP and the
            default) or ``"add-remove"`` (an update vs. no update, ‖u − 0‖ ≤ C;
            MindSpore Federated's convention).

    Returns:
        ``2C`` for replace-one, ``C`` for add/remove.
    """
    clip = check_positive("clip", clip)
    check_choice("neighbours", neighbours, NEIGHBOURS)
    sens = 2.0 * clip if neighbours == "replace" else clip
    if math.isinf(sens):
        raise LdpsimError(f"clip must be <= {_FLOAT_MAX / 2:.6g} with replace-one neighbours "
                          f"(the sensitivity 2C overflows float64); got {clip!r}")
    return sens


_sensitivity_of = sensitivity   # for calibrate, whose keyword ``sensitivity`` shadows it


# --------------------------------------------------------------------------- exact


def _s_of_t(t: float, epsilon: float) -> float:
    """The noise multiplier ``s = σ/Δ`` with ``1/(2s) − εs = t`` (may overflow to inf)."""
    u = math.hypot(t, _SQRT2 * math.sqrt(epsilon))
    if t >= 0.0:
        return 1.0 / (t + u)
    return (u - t) / 2.0 / epsilon


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest σ such that N(0, σ²) noise is (ε, δ)-DP for L2 sensitivity ``sensitivity``.

    Exact calibration of Balle & Wang (ICML 2018, arXiv:1805.06530, Thm. 8 and
    Alg. 1): solves ``δ(σ) = δ`` (Brent's method, bracketed in log σ) with ``log
    δ(σ)`` evaluated without cancellation or overflow, then rounds σ up to the
    first float whose exact δ(σ) is ≤ δ. Valid for every finite ε > 0, unlike the
    classic formula; for huge ε σ is tiny (≈ Δ/√(2ε)), never 0 or NaN.

    Args:
        epsilon: ε > 0 (finite).
        delta: δ in (0, 1).
        sensitivity: L2 sensitivity Δ > 0 (see :func:`sensitivity`).

    Returns:
        σ (same units as ``sensitivity``).

    Raises:
        LdpsimError: invalid input, or σ outside the float64 range (a subnormal
            δ with a tiny ε, or an extreme sensitivity).

    Examples:
        >>> round(analytic_gaussian_sigma(1.0, 1e-5), 6)
        3.730632
    """
    epsilon = check_positive("epsilon", epsilon)
    delta = check_open_unit("delta", delta)
    sens = check_positive("sensitivity", sensitivity)
    target = math.log(delta)
    # δ(s) ≤ Φ(t(s)), so s(t = Φ⁻¹(δ)) is an upper bound on the root.
    s_hi = _s_of_t(float(special.ndtri(delta)), epsilon)
    s = _root_decreasing(lambda x: _log_delta(x, epsilon, 1.0) - target,
                         s_hi if math.isfinite(s_hi) else _FLOAT_MAX, _FLOAT_TINY, _FLOAT_MAX)
    sigma = math.nan if s is None else s * sens
    if not 0.0 < sigma < math.inf:
        raise LdpsimError(
            f"cannot calibrate sigma for epsilon={epsilon!r}, delta={delta!r}, sensitivity={sens!r}: "
            "sigma lies outside the float64 range (0, 1.8e308); use a larger epsilon or delta "
            "(with a sensitivity near 1 any delta >= 1e-300 fits) or a clip bound nearer 1")
    sigma = _round_up(sigma, lambda x: math.exp(_log_delta(x, epsilon, sens)) <= delta)
    if math.isinf(sigma):  # pragma: no cover (needs sigma within an ulp of float max)
        raise LdpsimError(f"sigma for epsilon={epsilon!r}, delta={delta!r} overflows float64")
    _check_shortfall("analytic", sigma, epsilon, delta, sens)
    return sigma


def gaussian_achieved(sigma: float, epsilon: float, delta: float,
                      sensitivity: float = 1.0) -> tuple[float, float]:
    """``(achieved_epsilon, achieved_delta)`` of N(0, σ²) noise, both exact.

    ``achieved_delta`` is δ(σ) at the requested ε (:func:`analytic_gaussian_delta`);
    ``achieved_epsilon`` is the smallest ε at the requested δ
    (:func:`analytic_gaussian_epsilon`). The request ``(epsilon, delta)`` is met iff
    ``achieved_delta <= delta``, and then ``achieved_epsilon <= epsilon`` (kept
    consistent with each other to the last ulp).
    """
    achieved_delta = analytic_gaussian_delta(sigma, epsilon, sensitivity)
    achieved_epsilon = analytic_gaussian_epsilon(sigma, delta, sensitivity)
    # The two are one fact (monotone in ε); keep them consistent at the last ulp too.
    if achieved_delta <= delta:
        achieved_epsilon = min(achieved_epsilon, float(epsilon))
    else:
        achieved_epsilon = max(achieved_epsilon, math.nextafter(float(epsilon), math.inf))
    return achieved_epsilon, achieved_delta


def _is_shortfall(achieved: float, requested: float) -> bool:
    return achieved > requested * (1.0 + SHORTFALL_RTOL)


def _check_shortfall(method: str, sigma: float, epsilon: float, delta: float, sens: float) -> None:
    """Issue a :class:`CalibrationShortfallWarning` if σ misses the requested (ε, δ)."""
    achieved_delta = math.exp(_log_delta(sigma, epsilon, sens))
    if not _is_shortfall(achieved_delta, delta):
        return
    achieved_epsilon = analytic_gaussian_epsilon(sigma, delta, sens)
    warnings.warn(
        f"method {method!r} misses the requested (epsilon={epsilon:.6g}, delta={delta:.6g}): "
        f"sigma={sigma:.6g} for sensitivity {sens:.6g} is exactly (epsilon={epsilon:.6g}, "
        f"delta={achieved_delta:.6g})-DP, or (epsilon={achieved_epsilon:.6g}, delta={delta:.6g})-DP; "
        "the analytic calibration delivers the request",
        CalibrationShortfallWarning,
        stacklevel=3,
    )


# --------------------------------------------------------------------------- classic


def classic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Classic Gaussian calibration ``σ = Δ·√(2 ln(1.25/δ))/ε`` (Dwork & Roth 2014, Thm. A.1).

    The theorem assumes ε < 1. For ε ≥ 1 the value is still returned (Flower's
    ``LocalDpMod`` uses it everywhere) but a :class:`ClassicGaussianRangeWarning`
    is issued: it is not a proven (ε, δ) guarantee there. Use ``analytic``. When
    the exact δ(σ) exceeds δ (e.g. ε = 10, δ = 0.01) a
    :class:`CalibrationShortfallWarning` is issued as well.

    Raises:
        LdpsimError: invalid input, or σ beyond the float64 range (ε ≲ 1e-307).
    """
    epsilon = check_positive("epsilon", epsilon)
    delta = check_open_unit("delta", delta)
    sens = check_positive("sensitivity", sensitivity)
    if epsilon >= 1.0:
        warnings.warn(
            f"classic Gaussian calibration is only proven for epsilon < 1 (got epsilon={epsilon}); "
            "the result is not a valid (epsilon, delta) guarantee - " + _USE_ANALYTIC,
            ClassicGaussianRangeWarning,
            stacklevel=2,
        )
    sigma = sens * math.sqrt(2.0 * (math.log(1.25) - math.log(delta))) / epsilon
    if not 0.0 < sigma < math.inf:
        raise LdpsimError(
            f"classic sigma = sensitivity*sqrt(2 ln(1.25/delta))/epsilon is outside the float64 range "
            f"for epsilon={epsilon!r}, delta={delta!r}, sensitivity={sens!r}; use a larger epsilon")
    _check_shortfall("classic", sigma, epsilon, delta, sens)
    return sigma


# --------------------------------------------------------------------------- mindspore


def _mindspore_erf(x: float) -> float:
    """erf(x) as MindSpore's Java client computes it: trapezoid rule, 10,000 segments, float32."""
    segments = 10_000
    with np.errstate(all="ignore"):  # x = ±inf gives NaN (as in Java), without numpy's warnings
        dx = x / segments
        t = dx * np.arange(segments + 1, dtype=np.float64)
        weights = np.full(segments + 1, 2.0)
        weights[0] = weights[-1] = 1.0
        total = float(np.sum(weights * np.exp(-np.square(t))))
        return float(np.float32(total * dx / math.sqrt(math.pi)))


def _mindspore_phi(x: float) -> float:
    return 0.5 * (1.0 + _mindspore_erf(x / math.sqrt(2.0)))


def _mindspore_b(eps: float, v: float, sign: float) -> float:
    """B⁺ (sign=+1) or B⁻ (sign=−1) of Balle–Wang Alg. 1 with MindSpore's Φ (eps ≤ 709.78)."""
    return _mindspore_phi(sign * math.sqrt(eps * v)) - math.exp(eps) * _mindspore_phi(
        -math.sqrt(eps * (v + 2.0))
    )


def _mindspore_search(eps: float, delta: float, sign: float) -> float:
    """Doubling then bisection on B(v) ≈ δ from below, absolute tolerance 1e-6, ≤ 1,000 steps."""
    tol, max_iter = 1e-6, 1000
    lo, hi = 0.0, 1.0
    if sign > 0:  # B⁺ increases in v
        while _mindspore_b(eps, hi, sign) <= delta:
            lo, hi = hi, 2.0 * hi
    else:  # B⁻ decreases in v
        while _mindspore_b(eps, hi, sign) > delta:
            lo, hi = hi, 2.0 * hi
    mid = lo + (hi - lo) / 2.0
    for _ in range(max_iter + 1):
        b = _mindspore_b(eps, mid, sign)
        if b <= delta:
            if delta - b <= tol:
                break
            lo, hi = (mid, hi) if sign > 0 else (lo, mid)
        else:
            lo, hi = (lo, mid) if sign > 0 else (mid, hi)
        mid = lo + (hi - lo) / 2.0
    return mid


def mindspore_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """σ exactly as MindSpore Federated's Java client computes it.

    Balle & Wang's Algorithm 1 with MindSpore's numerics: ``δ₀ = B⁺(0)``; if
    δ > δ₀ search ``v*`` with ``B⁺(v*) ≈ δ`` and ``α = √(1+v*/2) − √(v*/2)``; if
    δ < δ₀ search ``u*`` on ``B⁻`` and ``α = √(1+u*/2) + √(u*/2)``; then
    ``σ = α·Δ/√(2ε)``. Φ uses a float32 trapezoidal erf and the search stops at an
    absolute δ error of 1e-6, so the result is usually a little larger than
    :func:`analytic_gaussian_sigma` but **smaller** (a weaker guarantee than
    requested) for small δ: ε = 0.01, δ = 1e-12 gives σ = 445.5 (exact δ ≈ 1.95e-9)
    where the exact σ is 579.0. Then a :class:`CalibrationShortfallWarning` is
    issued; :func:`calibrate` reports the exactly achieved (ε, δ).

    Raises:
        LdpsimError: invalid input, ε > :data:`MINDSPORE_MAX_EPSILON` (≈ 709.78,
            where MindSpore's ``exp(ε)`` overflows a double), or MindSpore's
            iteration not giving a finite σ (e.g. ε ≲ 1e-290).
    """
    epsilon = check_positive("epsilon", epsilon)
    delta = check_open_unit("delta", delta)
    sens = check_positive("sensitivity", sensitivity)
    if epsilon > MINDSPORE_MAX_EPSILON:
        raise LdpsimError(
            f"method 'mindspore' needs epsilon <= {MINDSPORE_MAX_EPSILON:.6f} (MindSpore evaluates "
            f"exp(epsilon) in double precision, which overflows above); got epsilon={epsilon!r}; "
            + _USE_ANALYTIC + ", valid for any finite epsilon > 0")
    delta0 = _mindspore_b(epsilon, 0.0, +1.0)
    if delta > delta0:
        v = _mindspore_search(epsilon, delta, +1.0)
        alpha = math.sqrt(1.0 + v / 2.0) - math.sqrt(v / 2.0)
    elif delta < delta0:
        u = _mindspore_search(epsilon, delta, -1.0)
        alpha = math.sqrt(1.0 + u / 2.0) + math.sqrt(u / 2.0)
    else:
        alpha = 1.0
    sigma = alpha * sens / math.sqrt(2.0 * epsilon)
    if not 0.0 < sigma < math.inf:
        raise LdpsimError(
            f"MindSpore's numerics give no finite sigma for epsilon={epsilon!r}, delta={delta!r} "
            f"(sigma={sigma!r}); " + _USE_ANALYTIC)
    _check_shortfall("mindspore", sigma, epsilon, delta, sens)
    return sigma


# --------------------------------------------------------------------------- laplace


class SamplerTailWarning(UserWarning):
    """The sampler's bounded tails make the requested δ impossible at this noise level."""


def sampler_delta_floor(scale: float, sensitivity: float, *, mechanism: str = "gaussian",
                        impl: str | None = None) -> float:
    """A floor under the δ that the *implemented* noise can deliver, at every ε (a
    diagnostic: a lower bound, not the guarantee).

    Floating-point samplers have bounded tails (Mironov, "On significance of the least
    significant bits for differential privacy", CCS 2012): ldpsim's default Gaussian
    sampler (``"tail"``) never returns ``|z| > 11.60`` (``"fast"``: 6.764; ``"icdf"``: 9.08;
    ``jax.random.normal``: 5.42), its Laplace sampler never ``|x| > 44.36 b``
    (``jax.random.laplace``: 16.64 b); :func:`ldpsim._src.privacy.noise.realised.sampler_model`.
    Take two neighbouring inputs whose clipped updates differ by the full sensitivity Δ
    along one coordinate, ``x' = x + Δ e₁``. Under ``x'`` a release below
    ``x₁ + Δ − T·s`` on that coordinate is impossible, while under ``x`` it has
    probability about ``P(Z < Δ/s − T)``. So for every ε the implemented mechanism is not
    (ε, δ)-DP for any ``δ`` below

        ``floor = P(Z < Δ/s − T)``  (Z the sampler's standard law, s = σ or b),

    whatever the ideal analysis says. The guarantee itself -- the realised δ at each ε, an
    upper bound -- is :func:`ldpsim._src.privacy.noise.realised.realised_delta`, which every
    calibration and accountant of ldpsim uses.

    Args:
        scale: σ (Gaussian std) or b (Laplace scale) per coordinate, > 0.
        sensitivity: Δ > 0 (L2 for Gaussian, L1 for Laplace).
        mechanism: ``"gaussian"`` or ``"laplace"``.
        impl: the sampler (Gaussian ``"tail"``, ``"fast"``, ``"icdf"``, ``"jax"``; Laplace
            ``"jax"`` or any other value for the default); default ldpsim's.

    Returns:
        The floor in [0, 1].
    """
    check_choice("mechanism", mechanism, MECHANISMS)
    scale = check_positive("scale", scale)
    sens = check_positive("sensitivity", sensitivity)
    mu = sens / scale
    if mechanism == "laplace":
        lap = "jax" if impl == "jax" else realised.default_sampler("laplace")
        bound = realised.sampler_model(lap, "laplace").bound
        t = mu - bound
        if t >= bound:
            return 1.0
        return 0.5 * math.exp(t) if t < 0 else 1.0 - 0.5 * math.exp(-t)
    impl = realised.default_sampler("gaussian") if impl is None else impl
    bound = realised.sampler_model(check_choice("impl", impl, realised.SAMPLERS["gaussian"]),
                                   "gaussian").bound
    if mu - bound >= bound:
        return 1.0
    return float(special.ndtr(mu - bound))


def laplace_scale(epsilon: float, sensitivity: float = 1.0) -> float:
    """Laplace scale ``b = Δ₁/ε``: Lap(b) per coordinate is ε-DP for L1 sensitivity Δ₁.

    Reference: Dwork & Roth, "The Algorithmic Foundations of Differential
    Privacy", 2014, Thm. 3.6. The noise variance per coordinate is ``2b²``.

    Raises:
        LdpsimError: invalid input, or ``Δ₁/ε`` overflowing or underflowing float64.
    """
    epsilon = check_positive("epsilon", epsilon)
    sens = check_positive("sensitivity", sensitivity)
    scale = sens / epsilon
    if not 0.0 < scale < math.inf:
        raise LdpsimError(
            f"the Laplace scale sensitivity/epsilon = {sens!r}/{epsilon!r} is outside the float64 "
            "range (0, 1.8e308); choose epsilon and the clip bound within 1e300 of each other")
    return scale


def laplace_epsilon(scale: float, sensitivity: float = 1.0) -> float:
    """The exact ε of Lap(``scale``) noise for L1 sensitivity Δ₁: ``Δ₁/b``, rounded up."""
    scale = check_positive("scale", scale)
    sens = check_positive("sensitivity", sensitivity)
    q = Fraction(sens) / Fraction(scale)
    out = _to_float(q)
    if math.isfinite(out) and Fraction(out) < q:
        out = math.nextafter(out, math.inf)
    return out


_GAUSSIAN = {
    "analytic": analytic_gaussian_sigma,
    "classic": classic_gaussian_sigma,
    "mindspore": mindspore_gaussian_sigma,
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Calibration:
    """The outcome of :func:`calibrate`, with every assumption named.

    Attributes:
        mechanism: ``"gaussian"`` or ``"laplace"``.
        epsilon, delta: the **requested** per-release guarantee (δ is None for Laplace).
        clip: the clip bound C (L2 for Gaussian, L1 for Laplace).
        neighbours: the neighbouring relation (``"replace"`` or ``"add-remove"``).
        sensitivity: Δ implied by ``clip`` and ``neighbours``.
        method: the Gaussian calibration method, or ``"laplace"``.
        sigma: Gaussian noise std per coordinate (None for Laplace).
        scale: Laplace scale b per coordinate (None for Gaussian).
        achieved_epsilon: what the **float32 noise that runs** delivers
            (:mod:`ldpsim._src.privacy.noise.realised`): Gaussian, the smallest ε at the requested δ
            (≤ ``epsilon`` iff the request is met); Laplace, ``Δ₁/b`` rounded up, holding with
            ``achieved_delta``.
        achieved_delta: what the float32 noise delivers at the requested ε: Gaussian, ≤
            ``delta`` iff the request is met; Laplace, the δ its bounded sampler adds to the
            ideal pure ε (never exactly 0; e.g. 2.9e-7 at ε = 30 with the 64-bit sampler).
        ideal_epsilon, ideal_delta: the same two numbers for ideal real-valued noise
            (Balle & Wang's exact δ(σ); Laplace: ``Δ₁/b`` and 0).
        sampler: the noise sampler the guarantee is computed for
            (:data:`ldpsim._src.privacy.noise.realised.DEFAULT_SAMPLER` by default).
        dim: the number of coordinates the guarantee holds up to (the realised δ grows with
            d for bounded samplers; :data:`ldpsim._src.privacy.noise.realised.DEFAULT_DIM` when not
            given).
        tail_mass: η of one release (:class:`ldpsim._src.privacy.noise.realised.AdditiveRealisation`):
            the probability that a neighbour's release lands where this input's cannot.
        method_sigma: Gaussian, the method's σ for ideal real-valued noise; ``sigma`` is
            larger when the analytic calibration raised it so that the sampler's bounded
            tails deliver the request (None for Laplace).
    """

    mechanism: str
    epsilon: float
    delta: float | None
    clip: float
    neighbours: str
    sensitivity: float
    method: str
    sigma: float | None = None
    scale: float | None = None
    achieved_epsilon: float | None = None
    achieved_delta: float | None = None
    ideal_epsilon: float | None = None
    ideal_delta: float | None = None
    sampler: str | None = None
    dim: int | None = None
    tail_mass: float | None = None
    method_sigma: float | None = None

    @property
    def noise_std(self) -> float:
        """Per-coordinate standard deviation of the noise (σ, or √2·b for Laplace)."""
        return self.sigma if self.mechanism == "gaussian" else math.sqrt(2.0) * self.scale

    @property
    def shortfall(self) -> bool:
        """True when the noise misses the request by more than :data:`SHORTFALL_RTOL` (relative).

        Gaussian: ``achieved_delta > delta·(1 + SHORTFALL_RTOL)`` (the condition of
        :class:`CalibrationShortfallWarning`); Laplace: the same test on ε.
        """
        if self.mechanism == "gaussian":
            return self.achieved_delta is not None and _is_shortfall(self.achieved_delta, self.delta)
        return self.achieved_epsilon is not None and _is_shortfall(self.achieved_epsilon, self.epsilon)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dict of the fields.

        Gaussian has keys ``sigma`` and ``method_sigma``, Laplace has key ``scale``; both have
        ``achieved_epsilon``/``achieved_delta`` (what runs) and ``ideal_epsilon``/
        ``ideal_delta``, ``sampler``, ``dim`` and ``tail_mass``; an infinite ε (no ε
        delivers the requested δ, e.g. ``classic`` at δ = 1e-300 whose σ the sampler's reach
        cannot support) is the string ``"inf"``.
        """
        out = dataclasses.asdict(self)
        for key in (("scale",) if self.mechanism == "gaussian" else ("sigma", "method_sigma")):
            out.pop(key)
        for key in ("achieved_epsilon", "ideal_epsilon"):   # JSON has no infinity
            if isinstance(out[key], float) and math.isinf(out[key]):
                out[key] = "inf"
        return out


def calibrate(
    mechanism: str = "gaussian",
    *,
    epsilon: float,
    delta: float | None = None,
    clip: float | None = None,
    method: str | None = None,
    neighbours: str = "replace",
    dim: int | None = None,
    sampler: str | None = None,
    sensitivity: float | None = None,
) -> Calibration:
    """Calibrate a local randomizer for one release of a client update clipped to ``clip``.

    Args:
        mechanism: ``"gaussian"`` (L2 clip, (ε, δ)-DP) or ``"laplace"`` (L1 clip, ε-DP).
        epsilon: ε > 0, finite.
        delta: δ in (0, 1); required for Gaussian, must be None (or 0) for Laplace.
        clip: the clip bound C > 0.
        method: Gaussian method ``"analytic"`` (default), ``"classic"`` or
            ``"mindspore"``; for Laplace only ``None``/``"laplace"``.
        neighbours: ``"replace"`` (Δ = 2C, default) or ``"add-remove"`` (Δ = C,
            MindSpore's convention).
        dim: the number of coordinates d of the update (the realised guarantee of a bounded
            sampler depends on it); default :data:`~ldpsim._src.privacy.noise.realised.DEFAULT_DIM`
            (the guarantee then holds for every d up to it).
        sampler: the noise sampler that will run (Gaussian ``"tail"``, ``"fast"``,
            ``"icdf"``, ``"jax"``; Laplace ``"bits"``, ``"jax"``); default: ldpsim's default.
        sensitivity: Δ > 0 itself, instead of ``clip`` (the words of the accountants,
            :func:`ldpsim.privacy.ldp_epsilon`): the clip is then Δ/2 under ``"replace"``
            and Δ under ``"add-remove"``.

    The analytic σ is the smallest whose **realised** δ at ε is ≤ δ: it equals Balle &
    Wang's exact σ whenever the sampler's bounded tails add nothing measurable (the default
    sampler, up to ε ≈ 40 at δ = 1e-5), and is larger where they do.

    Returns:
        A :class:`Calibration` naming the mechanism, relation, sensitivity and scale,
        and the exactly achieved (ε, δ) next to the requested one.

    Warns:
        CalibrationShortfallWarning: the σ of ``classic``/``mindspore`` misses the
            requested (ε, δ) (never for ``analytic``).
        ClassicGaussianRangeWarning: ``classic`` with ε ≥ 1.

    Raises:
        LdpsimError: on any invalid value (the message names it and the valid range),
            including extremes the method cannot represent (see the module docstring).
    """
    check_choice("mechanism", mechanism, MECHANISMS)
    epsilon = check_positive("epsilon", epsilon)
    if sensitivity is not None:   # the accountants' word: Δ, with the relation that gives C
        if clip is not None:
            raise LdpsimError("give clip= (with neighbours=) or sensitivity=, not both "
                              "(sensitivity is 2*clip for neighbours='replace', clip for "
                              "'add-remove')")
        check_choice("neighbours", neighbours, NEIGHBOURS)
        clip = check_positive("sensitivity", sensitivity) / (2.0 if neighbours == "replace" else 1.0)
    if clip is None:
        raise LdpsimError("calibrate needs clip= (the clip bound C, with neighbours=) or "
                          "sensitivity=")
    clip = check_positive("clip", clip)
    sens = _sensitivity_of(clip, neighbours)
    if mechanism == "laplace":
        if method not in (None, "laplace"):
            raise LdpsimError(
                f"method {method!r} applies to the Gaussian mechanism only; "
                "the Laplace mechanism has one calibration (b = sensitivity/epsilon)"
            )
        if delta not in (None, 0, 0.0):
            raise LdpsimError(f"the Laplace mechanism is pure epsilon-DP: delta must be omitted, got {delta!r}")
        scale = laplace_scale(epsilon, sens)
        sampler = realised.default_sampler("laplace") if sampler is None else sampler
        check_choice("sampler", sampler, realised.SAMPLERS["laplace"])
        d = realised.check_dim(dim)
        shift = laplace_epsilon(scale, sens)
        return Calibration(
            mechanism="laplace", epsilon=epsilon, delta=None, clip=clip, neighbours=neighbours,
            sensitivity=sens, method="laplace", scale=scale,
            achieved_epsilon=shift,
            achieved_delta=realised.realised_delta("laplace", sampler, shift, d, shift),
            ideal_epsilon=shift, ideal_delta=0.0, sampler=sampler, dim=d,
            tail_mass=realised.additive_realisation("laplace", sampler, shift, d).tail_mass,
        )
    method = "analytic" if method is None else method
    check_choice("method", method, GAUSSIAN_METHODS)
    if delta is None:
        raise LdpsimError("the Gaussian mechanism needs delta in (0, 1); e.g. delta=1e-5 or 1/population")
    delta = check_open_unit("delta", delta)
    sampler = realised.default_sampler("gaussian") if sampler is None else sampler
    check_choice("sampler", sampler, realised.SAMPLERS["gaussian"])
    d = realised.check_dim(dim)
    sigma = method_sigma = _GAUSSIAN[method](epsilon, delta, sens)
    if method == "analytic":   # the smallest σ whose realised δ at ε is ≤ δ
        shift = realised.gaussian_shift_for(epsilon, delta, sampler, d, sens / sigma)
        if shift < sens / sigma:
            sigma = _round_up(sens / shift, lambda s: realised.realised_delta(
                "gaussian", sampler, sens / s, d, epsilon) <= delta)
    ideal_epsilon, ideal_delta = gaussian_achieved(sigma, epsilon, delta, sens)
    achieved_delta = realised.realised_delta("gaussian", sampler, sens / sigma, d, epsilon)
    achieved_epsilon = realised.realised_epsilon("gaussian", sampler, sens / sigma, d, delta)
    if _is_shortfall(achieved_delta, delta) and not _is_shortfall(ideal_delta, delta):
        warnings.warn(
            f"method {method!r}: sigma={sigma:.6g} meets (epsilon={epsilon:.6g}, "
            f"delta={delta:.6g}) for ideal noise, but the float32 sampler {sampler!r} reaches "
            f"only its bounded range: what runs is (epsilon={epsilon:.6g}, "
            f"delta={achieved_delta:.6g})-DP for updates of up to {d:,} coordinates; "
            "the analytic calibration calibrates for what runs", CalibrationShortfallWarning,
            stacklevel=2)
    if achieved_delta <= delta:   # one fact (monotone in ε): consistent to the last ulp
        achieved_epsilon = min(achieved_epsilon, float(epsilon))
    else:
        achieved_epsilon = max(achieved_epsilon, math.nextafter(float(epsilon), math.inf))
    return Calibration(
        mechanism="gaussian", epsilon=epsilon, delta=delta, clip=clip, neighbours=neighbours,
        sensitivity=sens, method=method, sigma=sigma,
        achieved_epsilon=achieved_epsilon, achieved_delta=achieved_delta,
        ideal_epsilon=ideal_epsilon, ideal_delta=ideal_delta, sampler=sampler, dim=d,
        tail_mass=realised.additive_realisation("gaussian", sampler, sens / sigma, d).tail_mass,
        method_sigma=method_sigma,
    )
