"""Noise calibration: (ε, δ, sensitivity) -> noise scale. Host-side scalar maths.

Three Gaussian methods and the Laplace scale:

* ``analytic`` (default): the exact analytic Gaussian mechanism of Balle & Wang
  (ICML 2018, arXiv:1805.06530, Thm. 8). N(0, σ²) noise on a query of L2
  sensitivity Δ is (ε, δ)-DP **iff**
  ``δ(σ) = Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ) ≤ δ``; we solve
  ``δ(σ) = δ`` in log space with Brent's method, so σ is the smallest valid
  noise and ``δ(σ)`` reproduces the target to ~1e-12 relative.
* ``classic``: ``σ = Δ·√(2 ln(1.25/δ))/ε`` (Dwork & Roth 2014, Thm. A.1). Its
  proof requires ε < 1; for ε ≥ 1 a :class:`ClassicGaussianRangeWarning` is
  issued (the formula is then not a proven guarantee).
* ``mindspore``: MindSpore Federated's ``SecureProtocol.calculateSigma``
  numerics (ALGORITHMS §1.4): Balle–Wang Algorithm 1 with erf by trapezoidal
  integration over 10,000 segments cast to float32, doubling + bisection with
  an absolute δ tolerance of 1e-6 and at most 1,000 iterations. Slightly more
  conservative than exact; offered for parity with MindSpore only.
* Laplace: ``b = Δ₁/ε`` gives pure ε-DP for L1 sensitivity Δ₁ (Dwork & Roth,
  Thm. 3.6).

The neighbouring relation is explicit (see :func:`sensitivity`): for local DP
with **replace-one** neighbours a client update clipped to norm C may be replaced
by any other clipped update, so the sensitivity is ``2C`` (the default, and the
correct one for LDP). MindSpore calibrates with ``C``, which is the sensitivity
under **add/remove** neighbours (an update vs. no update). Every output names the
relation it used.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any

import numpy as np
from scipy import optimize, special

from ldpsim._checks import LdpsimError, check_choice, check_open_unit, check_positive

NEIGHBOURS = ("replace", "add-remove")
GAUSSIAN_METHODS = ("analytic", "classic", "mindspore")
MECHANISMS = ("gaussian", "laplace")


class ClassicGaussianRangeWarning(UserWarning):
    """The classic Gaussian formula was used with ε ≥ 1, outside the range of its proof."""


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
    return 2.0 * clip if neighbours == "replace" else clip


# --------------------------------------------------------------------------- exact


def _log_delta(s: float, epsilon: float) -> float:
    """log δ for noise multiplier ``s = σ/Δ`` (Balle & Wang 2018, Thm. 8), in log space."""
    a, b = 0.5 / s, epsilon * s
    log_p = special.log_ndtr(a - b)
    log_q = special.log_ndtr(-a - b)
    x = epsilon + log_q - log_p  # log(e^ε Φ(−a−b) / Φ(a−b)) < 0 for s > 0
    if x >= 0.0:
        return -math.inf
    return float(log_p + np.log(-np.expm1(x)))


def analytic_gaussian_delta(sigma: float, epsilon: float, sensitivity: float = 1.0) -> float:
    """The exact δ(σ) of the Gaussian mechanism at ε (Balle & Wang 2018, Thm. 8)."""
    sigma = check_positive("sigma", sigma)
    epsilon = check_positive("epsilon", epsilon)
    sens = check_positive("sensitivity", sensitivity)
    return math.exp(_log_delta(sigma / sens, epsilon))


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest σ such that N(0, σ²) noise is (ε, δ)-DP for L2 sensitivity ``sensitivity``.

    Exact calibration of Balle & Wang (ICML 2018, arXiv:1805.06530, Thm. 8 and
    Alg. 1): solves ``δ(σ) = δ`` by bracketing and Brent's method on ``log σ``
    with ``log δ(σ)`` evaluated through ``log Φ`` (no cancellation). Valid for
    every ε > 0, unlike the classic formula.

    Args:
        epsilon: ε > 0 (finite).
        delta: δ in (0, 1).
        sensitivity: L2 sensitivity Δ > 0 (see :func:`sensitivity`).

    Returns:
        σ (same units as ``sensitivity``).

    Examples:
        >>> round(analytic_gaussian_sigma(1.0, 1e-5), 6)
        3.730632
    """
    epsilon = check_positive("epsilon", epsilon)
    delta = check_open_unit("delta", delta)
    sens = check_positive("sensitivity", sensitivity)
    target = math.log(delta)

    def f(log_s: float) -> float:
        return _log_delta(math.exp(log_s), epsilon) - target

    lo, hi = -1.0, 1.0
    while f(lo) < 0.0:  # δ(σ) decreases in σ: move lo down until δ(lo) > δ
        lo -= 2.0
        if lo < -60:
            raise LdpsimError(f"cannot calibrate sigma for epsilon={epsilon}, delta={delta}")
    while f(hi) > 0.0:
        hi += 2.0
        if hi > 60:
            raise LdpsimError(f"cannot calibrate sigma for epsilon={epsilon}, delta={delta}")
    log_s = optimize.brentq(f, lo, hi, xtol=1e-15, rtol=4 * np.finfo(float).eps, maxiter=500)
    return math.exp(log_s) * sens


# --------------------------------------------------------------------------- classic


def classic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Classic Gaussian calibration ``σ = Δ·√(2 ln(1.25/δ))/ε`` (Dwork & Roth 2014, Thm. A.1).

    The theorem assumes ε < 1. For ε ≥ 1 the value is still returned (Flower's
    ``LocalDpMod`` uses it everywhere) but a :class:`ClassicGaussianRangeWarning`
    is issued: it is not a proven (ε, δ) guarantee there. Use ``analytic``.
    """
    epsilon = check_positive("epsilon", epsilon)
    delta = check_open_unit("delta", delta)
    sens = check_positive("sensitivity", sensitivity)
    if epsilon >= 1.0:
        warnings.warn(
            f"classic Gaussian calibration is only proven for epsilon < 1 (got epsilon={epsilon}); "
            "the result is not a valid (epsilon, delta) guarantee - use method='analytic'",
            ClassicGaussianRangeWarning,
            stacklevel=2,
        )
    return sens * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


# --------------------------------------------------------------------------- mindspore


def _mindspore_erf(x: float) -> float:
    """erf(x) as MindSpore's Java client computes it: trapezoid rule, 10,000 segments, float32."""
    segments = 10_000
    dx = x / segments
    t = dx * np.arange(segments + 1, dtype=np.float64)
    weights = np.full(segments + 1, 2.0)
    weights[0] = weights[-1] = 1.0
    total = float(np.sum(weights * np.exp(-np.square(t))))
    return float(np.float32(total * dx / math.sqrt(math.pi)))


def _mindspore_phi(x: float) -> float:
    return 0.5 * (1.0 + _mindspore_erf(x / math.sqrt(2.0)))


def _mindspore_b(eps: float, v: float, sign: float) -> float:
    """B⁺ (sign=+1) or B⁻ (sign=−1) of Balle–Wang Alg. 1 with MindSpore's Φ."""
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
    """σ exactly as MindSpore Federated's Java client computes it (ALGORITHMS §1.4).

    Balle & Wang's Algorithm 1 with MindSpore's numerics: ``δ₀ = B⁺(0)``; if
    δ > δ₀ search ``v*`` with ``B⁺(v*) ≈ δ`` and ``α = √(1+v*/2) − √(v*/2)``; if
    δ < δ₀ search ``u*`` on ``B⁻`` and ``α = √(1+u*/2) + √(u*/2)``; then
    ``σ = α·Δ/√(2ε)``. Φ uses a float32 trapezoidal erf, so the result is a little
    larger (more conservative) than :func:`analytic_gaussian_sigma`.
    """
    epsilon = check_positive("epsilon", epsilon)
    delta = check_open_unit("delta", delta)
    sens = check_positive("sensitivity", sensitivity)
    delta0 = _mindspore_b(epsilon, 0.0, +1.0)
    if delta > delta0:
        v = _mindspore_search(epsilon, delta, +1.0)
        alpha = math.sqrt(1.0 + v / 2.0) - math.sqrt(v / 2.0)
    elif delta < delta0:
        u = _mindspore_search(epsilon, delta, -1.0)
        alpha = math.sqrt(1.0 + u / 2.0) + math.sqrt(u / 2.0)
    else:
        alpha = 1.0
    return alpha * sens / math.sqrt(2.0 * epsilon)


# --------------------------------------------------------------------------- laplace


def laplace_scale(epsilon: float, sensitivity: float = 1.0) -> float:
    """Laplace scale ``b = Δ₁/ε``: Lap(b) per coordinate is ε-DP for L1 sensitivity Δ₁.

    Reference: Dwork & Roth, "The Algorithmic Foundations of Differential
    Privacy", 2014, Thm. 3.6. The noise variance per coordinate is ``2b²``.
    """
    epsilon = check_positive("epsilon", epsilon)
    sens = check_positive("sensitivity", sensitivity)
    return sens / epsilon


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
        epsilon, delta: the per-release guarantee (δ is None for Laplace).
        clip: the clip bound C (L2 for Gaussian, L1 for Laplace).
        neighbours: the neighbouring relation (``"replace"`` or ``"add-remove"``).
        sensitivity: Δ implied by ``clip`` and ``neighbours``.
        method: the Gaussian calibration method, or ``"laplace"``.
        sigma: Gaussian noise std per coordinate (None for Laplace).
        scale: Laplace scale b per coordinate (None for Gaussian).
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

    @property
    def noise_std(self) -> float:
        """Per-coordinate standard deviation of the noise (σ, or √2·b for Laplace)."""
        return self.sigma if self.mechanism == "gaussian" else math.sqrt(2.0) * self.scale

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dict; Gaussian has key ``sigma``, Laplace has key ``scale``."""
        out = dataclasses.asdict(self)
        out.pop("scale" if self.mechanism == "gaussian" else "sigma")
        return out


def calibrate(
    mechanism: str = "gaussian",
    *,
    epsilon: float,
    delta: float | None = None,
    clip: float,
    method: str | None = None,
    neighbours: str = "replace",
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

    Returns:
        A :class:`Calibration` naming the mechanism, relation, sensitivity and scale.

    Raises:
        LdpsimError: on any invalid value (the message names it and the valid range).
    """
    check_choice("mechanism", mechanism, MECHANISMS)
    epsilon = check_positive("epsilon", epsilon)
    clip = check_positive("clip", clip)
    sens = sensitivity(clip, neighbours)
    if mechanism == "laplace":
        if method not in (None, "laplace"):
            raise LdpsimError(
                f"method {method!r} applies to the Gaussian mechanism only; "
                "the Laplace mechanism has one calibration (b = sensitivity/epsilon)"
            )
        if delta not in (None, 0, 0.0):
            raise LdpsimError(f"the Laplace mechanism is pure epsilon-DP: delta must be omitted, got {delta!r}")
        return Calibration(
            mechanism="laplace", epsilon=epsilon, delta=None, clip=clip, neighbours=neighbours,
            sensitivity=sens, method="laplace", scale=laplace_scale(epsilon, sens),
        )
    method = "analytic" if method is None else method
    check_choice("method", method, GAUSSIAN_METHODS)
    if delta is None:
        raise LdpsimError("the Gaussian mechanism needs delta in (0, 1); e.g. delta=1e-5 or 1/population")
    delta = check_open_unit("delta", delta)
    sigma = _GAUSSIAN[method](epsilon, delta, sens)
    return Calibration(
        mechanism="gaussian", epsilon=epsilon, delta=delta, clip=clip, neighbours=neighbours,
        sensitivity=sens, method=method, sigma=sigma,
    )
