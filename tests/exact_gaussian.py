"""The exact Gaussian mechanism at 50 digits: an independent reference for the tests.

δ(ε) of N(0, 1) against N(μ, 1), i.e. of noise σ on sensitivity Δ = μσ (Balle & Wang 2018,
arXiv:1805.06530, Thm. 8): ``Φ(μ/2 − ε/μ) − e^ε Φ(−μ/2 − ε/μ)``, evaluated with mpmath and
inverted by bisection. Nothing of ldpsim is used.
"""

from __future__ import annotations

import mpmath


def gaussian_delta(mu, eps):
    """δ at ε of the Gaussian mechanism of ratio μ = Δ/σ (an mpmath number)."""
    with mpmath.workdps(50):
        mu, eps = mpmath.mpf(mu), mpmath.mpf(eps)
        return mpmath.ncdf(mu / 2 - eps / mu) - mpmath.exp(eps) * mpmath.ncdf(-mu / 2 - eps / mu)


def _bisect(f, lo, hi):
    """The root of an increasing ``f`` on [lo, hi] (hi doubled until f(hi) > 0), 50 digits."""
    with mpmath.workdps(50):
        lo, hi = mpmath.mpf(lo), mpmath.mpf(hi)
        while f(hi) <= 0:
            hi *= 2
        for _ in range(180):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if f(mid) <= 0 else (lo, mid)
        return float(hi)


def gaussian_epsilon(mu, delta):
    """The exact ε at δ of the Gaussian mechanism of ratio μ = Δ/σ (rounded up)."""
    return _bisect(lambda e: delta - gaussian_delta(mu, e), 0, 1)


def gaussian_mu(eps, delta):
    """The ratio μ = Δ/σ at which the Gaussian mechanism is exactly (ε, δ)-DP."""
    return _bisect(lambda m: gaussian_delta(m, eps) - delta, 0, 1)
