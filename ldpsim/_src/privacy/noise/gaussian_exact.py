"""The exact δ(ε) and ε(δ) of the Gaussian mechanism, overflow- and cancellation-free.

Balle & Wang, "Improving the Gaussian Mechanism for Differential Privacy", ICML 2018
(arXiv:1805.06530), Thm. 8: N(0, σ²) noise on a query of L2 sensitivity Δ is (ε, δ)-DP iff
``δ ≥ Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ)``. Evaluated through ``log Φ`` and ``erfcx`` with
``Δ/(2σ) ± εσ/Δ`` in exact rational arithmetic (or, for large σ and small ε, as a short
Gaussian integral by quadrature); see :mod:`ldpsim._src.privacy.noise.calibration`, which
re-exports these functions and builds the calibrations on them, and
:mod:`ldpsim._src.privacy.noise.realised`, which adds what the float32 samplers change.
"""

from __future__ import annotations

import math
import sys
from fractions import Fraction
from typing import Callable

import numpy as np
from scipy import optimize, special

from ldpsim._src._checks import check_open_unit, check_positive

__all__ = ["analytic_gaussian_delta", "analytic_gaussian_epsilon"]

_FLOAT_MAX = sys.float_info.max
_FLOAT_TINY = math.ulp(0.0)  # 5e-324, the smallest positive float
_SQRT2 = math.sqrt(2.0)
_LOG2 = math.log(2.0)


def _to_float(q: Fraction) -> float:
    """``float(q)`` correctly rounded, ±inf instead of OverflowError."""
    try:
        return float(q)
    except OverflowError:
        return math.inf if q > 0 else -math.inf


def _abtu(sigma: float, epsilon: float, sens: float) -> tuple[float, float, float, float]:
    """``a = Δ/(2σ)``, ``b = εσ/Δ``, ``t = a − b`` and ``u = a + b``, each correctly rounded.

    Computed in exact rational arithmetic: for huge ε the two terms nearly cancel
    in ``t`` and a float subtraction would lose every digit.
    """
    s, d = Fraction(sigma), Fraction(sens)
    a = d / (2 * s)
    b = Fraction(epsilon) * s / d
    return _to_float(a), _to_float(b), _to_float(a - b), _to_float(a + b)


def _log_erfcx(z: float) -> float:
    v = float(special.erfcx(z))
    return math.log(v) if v > 0.0 else -math.inf


def _log_sub(log_x: float, log_y: float) -> float:
    """log(x − y) from log x and log y (−inf when y ≥ x)."""
    if log_y == -math.inf:
        return log_x
    d = log_y - log_x
    if not d < 0.0:
        return -math.inf
    return log_x + math.log(-math.expm1(d))


# Gauss-Legendre rule for the short-interval form of δ (integrand entire, nearly constant there).
_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(24)
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_LOG_SQRT_HALF_PI = 0.5 * math.log(0.5 * math.pi)


def _log_delta_short(a: float, b: float, u: float, epsilon: float) -> float:
    """log δ for a short interval (``a ≤ 1``, ``ε ≤ 4``: large σ, small ε), from a, b, u and ε.

    ``δ = A − B`` with ``A = Φ(a − b) − Φ(−a − b)`` and ``B = (e^ε − 1) Φ(−u)``.
    Substituting ``z = −b + ay`` and using ``ab = ε/2``:
    ``A = φ(b)·2a·J``, ``J = ½∫₋₁¹ exp(εy/2 − a²y²/2) dy`` (Gauss-Legendre; the
    integrand is entire and nearly constant), and
    ``B = φ(b)·2 sinh(ε/2)·e^{−a²/2}·R(u)`` with Mills' ratio
    ``R(u) = Φ(−u)/φ(u) = √(π/2)·erfcx(u/√2)``, insensitive to the rounding of u.
    Here ``Φ(t)`` and ``e^ε Φ(−u)`` agree to many digits and the form of
    :func:`_log_delta_abtu` would cancel; ``A`` and ``B`` differ by a factor of at
    least ~1/b² (b ≲ 40 for δ ≥ 1e-300).
    """
    j = 0.5 * float(np.dot(_GL_WEIGHTS, np.exp(0.5 * epsilon * _GL_NODES - 0.5 * a * a * _GL_NODES ** 2)))
    log_t1 = math.log(2.0 * a) + math.log(j)
    sh = 2.0 * math.sinh(0.5 * epsilon)
    if sh > 0.0:
        log_t2 = math.log(sh) - 0.5 * a * a + _LOG_SQRT_HALF_PI + _log_erfcx(u / _SQRT2)
    else:
        log_t2 = -math.inf
    return -0.5 * b * b - _LOG_SQRT_2PI + _log_sub(log_t1, log_t2)


def _log_delta_abtu(a: float, b: float, t: float, u: float, epsilon: float) -> float:
    """log δ of the Gaussian mechanism from the values of :func:`_abtu` (``u ≥ |t|``).

    ``δ = Φ(t) − e^ε Φ(−u)`` (Balle & Wang 2018, Thm. 8). Since ``u² − t² = 2ε``,
    ``e^ε Φ(−u) = ½ erfcx(u/√2) e^{−t²/2}``: ε never enters an exponent (no overflow
    for any ε), and for ``t < 0`` also ``Φ(t) = ½ erfcx(−t/√2) e^{−t²/2}``, so the
    ratio ``x = log(e^ε Φ(−u)/Φ(t)) < 0`` is formed without overflow and
    ``log δ = log Φ(t) + log(−expm1(x))``. When ``x`` is near 0 (δ ≪ Φ(t): small ε,
    large σ) its rounding would dominate, and :func:`_log_delta_short` is used.
    """
    log_p = float(special.log_ndtr(t))
    if log_p == -math.inf:
        return -math.inf
    if t < 0.0:
        x = _log_erfcx(u / _SQRT2) - _log_erfcx(-t / _SQRT2)
    else:
        x = _log_erfcx(u / _SQRT2) - _LOG2 - 0.5 * t * t - log_p
    if x > -1e-3 and a <= 1.0 and epsilon <= 4.0:
        return _log_delta_short(a, b, u, epsilon)
    if x >= 0.0:  # e^ε Φ(−u) ≥ Φ(t) only by rounding: δ = 0
        return -math.inf
    return log_p + math.log(-math.expm1(x))


def _log_delta(sigma: float, epsilon: float, sens: float) -> float:
    return _log_delta_abtu(*_abtu(sigma, epsilon, sens), epsilon)


def analytic_gaussian_delta(sigma: float, epsilon: float, sensitivity: float = 1.0) -> float:
    """The exact δ(σ) of the Gaussian mechanism at ε (Balle & Wang 2018, Thm. 8).

    The smallest δ for which N(0, σ²) noise on a query of L2 sensitivity
    ``sensitivity`` is (ε, δ)-DP. Finite for every finite ε > 0 (no overflow: see
    the module docstring); in [0, 1].
    """
    sigma = check_positive("sigma", sigma)
    epsilon = check_positive("epsilon", epsilon)
    sens = check_positive("sensitivity", sensitivity)
    return math.exp(_log_delta(sigma, epsilon, sens))


def _finite(v: float) -> float:
    """Brent's method needs finite values: ±inf becomes ±1e300 (monotonicity kept)."""
    return min(max(v, -1e300), 1e300)


def _root_decreasing(f: Callable[[float], float], x0: float, lo: float, hi: float) -> float | None:
    """A root of ``f`` (decreasing in x > 0) in [lo, hi], to float precision.

    Brackets by galloping in log x from ``x0``, bisects the bracket in log x down to
    a relative width of 1e-6, then runs Brent's method in x. None when ``f`` has one
    sign on all of [lo, hi] (``f(lo) ≤ 0`` or ``f(hi) > 0``).
    """
    def g(x: float) -> float:
        return _finite(f(x))

    x0 = min(max(x0, lo), hi)
    lx0, llo, lhi = math.log(x0), math.log(lo), math.log(hi)
    f0, step = g(x0), 1.0
    if f0 == 0.0:
        return x0
    if f0 > 0.0:  # the root lies above x0
        a = x0
        while True:
            lx = min(lx0 + step, lhi)
            b = hi if lx >= lhi else math.exp(lx)
            if g(b) <= 0.0:
                break
            if lx >= lhi:
                return None
            a, step = b, 2.0 * step
    else:
        b = x0
        while True:
            lx = max(lx0 - step, llo)
            a = lo if lx <= llo else math.exp(lx)
            if g(a) > 0.0:
                break
            if lx <= llo:
                return None
            b, step = a, 2.0 * step
    # g(a) > 0 >= g(b), a < b.
    for _ in range(200):
        if b - a <= 1e-6 * a:
            break
        m = math.exp(0.5 * (math.log(a) + math.log(b)))
        if not a < m < b:
            m = a + 0.5 * (b - a)
            if not a < m < b:
                break
        if g(m) > 0.0:
            a = m
        else:
            b = m
    if g(b) == 0.0:
        return b
    return optimize.brentq(g, a, b, xtol=_FLOAT_TINY, rtol=4 * np.finfo(float).eps, maxiter=500)


def _round_up(x: float, ok: Callable[[float], bool]) -> float:
    """The smallest float near ``x`` with ``ok`` (``ok`` monotone: false below, true above).

    If ``ok(x)`` holds, lowers ``x`` one ulp at a time (at most 16) while it still
    holds, so a root a few ulps high is tightened. Otherwise raises ``x`` by 1, 2,
    4, ... ulps until ``ok`` holds, then bisects back to the first float where it does.
    """
    if ok(x):
        for _ in range(16):
            lower = math.nextafter(x, 0.0)
            if lower <= 0.0 or not ok(lower):
                break
            x = lower
        return x
    bad, step = x, math.ulp(x)
    for _ in range(80):
        x = bad + step
        if math.isinf(x) or ok(x):
            break
        bad, step = x, 2.0 * step
    good = x
    while math.isfinite(good):
        mid = bad + 0.5 * (good - bad)
        if not bad < mid < good:
            break
        if ok(mid):
            good = mid
        else:
            bad = mid
    return good


def analytic_gaussian_epsilon(sigma: float, delta: float, sensitivity: float = 1.0) -> float:
    """The exact smallest ε ≥ 0 such that N(0, σ²) noise is (ε, δ)-DP (Balle & Wang, Thm. 8).

    The inverse of :func:`analytic_gaussian_delta` in ε: solves ``δ(σ; ε) = δ`` for
    ε and rounds up to the first float whose exact δ is ≤ δ. Returns 0.0 when σ is
    already (0, δ)-DP (``2Φ(Δ/(2σ)) − 1 ≤ δ``), ``inf`` when σ is too small for any
    float ε. Agrees with ``dp_accounting.get_epsilon_gaussian(sigma/sensitivity,
    delta)`` (which is exact for the Gaussian mechanism) to its tolerance.
    """
    sigma = check_positive("sigma", sigma)
    delta = check_open_unit("delta", delta)
    sens = check_positive("sensitivity", sensitivity)
    target = math.log(delta)

    def log_d(eps: float) -> float:
        return _log_delta(sigma, eps, sens)

    if math.exp(log_d(0.0)) <= delta:
        return 0.0
    a = _abtu(sigma, 0.0, sens)[0]
    # t = a − ε/(2a) ≥ Φ⁻¹(δ) at the root, so 2a(a − Φ⁻¹(δ)) bounds ε from above.
    guess = 2.0 * a * (a - float(special.ndtri(delta)))
    guess = guess if 0.0 < guess < math.inf else 1.0
    eps = _root_decreasing(lambda e: log_d(e) - target, guess, _FLOAT_TINY, _FLOAT_MAX)
    if eps is None:
        return math.inf if log_d(_FLOAT_MAX) > target else _FLOAT_TINY
    return _round_up(eps, lambda e: math.exp(log_d(e)) <= delta)
