"""Planning: how many trials an audit needs to refute a claim, from the Clopper–Pearson widths."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy import stats

from ldpsim._src._checks import check_open_unit, check_positive
from ldpsim._src.audit._bounds import clopper_pearson_upper, epsilon_lower_bound


class TrialsNeeded(NamedTuple):
    """The smallest audit that refutes a claim with the stated power.

    Attributes:
        trials: evaluation trials per input (``2·trials`` mechanism runs in all).
        threshold: the test, fixed in advance: guess ``x1`` iff ``score > threshold``
            (score in units of the noise std, ``x0`` at 0, ``x1`` at ``sensitivity/σ``).
        fpr, fnr: the test's exact error rates.
        true_epsilon: ``log((1 − δ − fnr)/fpr)``, what infinitely many trials would show.
        power: probability (at least) that the audit's ε_lb exceeds the claim.
    """

    trials: float
    threshold: float
    fpr: float
    fnr: float
    true_epsilon: float
    power: float


def bound_at_quantile(fpr: float, fnr: float, trials: float, *, delta: float, confidence: float,
                      quantile: float) -> float:
    """The ε_lb an audit gets when both error counts sit at their ``quantile`` (``Binomial(n, rate)``).

    Both counts are independent and ε_lb decreases in each, so ε_lb is at least this value
    with probability at least ``quantile²``.
    """
    return float(_bounds_at(fpr, fnr, float(trials), delta, confidence, quantile))


def gaussian_trials_needed(
    *,
    sigma: float,
    sensitivity: float,
    epsilon: float,
    delta: float,
    confidence: float = 0.95,
    power: float = 0.5,
    max_trials: float = 1e16,
    grid: int = 241,
) -> TrialsNeeded:
    """Trials per input for a threshold test, fixed in advance, to refute ``(epsilon, delta)``.

    The mechanism is ideal Gaussian noise ``N(0, σ²)`` on a pair at distance
    ``sensitivity`` (the 1-D sufficient statistic). For each threshold ``t`` (a grid over
    ``[0, Δ/σ + 12]`` in units of σ, ``grid`` points) the smallest ``n`` with
    ``bound_at_quantile(..., quantile=√power) > epsilon`` is found by bisection on ``log n``;
    the best threshold wins. Fixing the threshold in advance (it is computed here, from the
    ideal analysis) needs no selection split, so ``n`` is the whole budget per input.

    Returns:
        :class:`TrialsNeeded`; ``trials = inf`` when no threshold refutes the claim below
        ``max_trials`` (e.g. a correct calibration).
    """
    sigma = check_positive("sigma", sigma)
    mu = check_positive("sensitivity", sensitivity) / sigma
    epsilon = check_positive("epsilon", epsilon)
    check_open_unit("delta", delta)
    check_open_unit("confidence", confidence)
    q = math.sqrt(check_open_unit("power", power))
    t = np.linspace(0.0, mu + 12.0, grid)
    fpr, fnr = stats.norm.sf(t), stats.norm.cdf(t - mu)
    keep = (fpr > 0) & (1.0 - delta - fnr > fpr * math.exp(epsilon))  # exact rates refute the claim
    t, fpr, fnr = t[keep], fpr[keep], fnr[keep]

    def ok(log_n: np.ndarray) -> np.ndarray:
        return _bounds_at(fpr, fnr, np.exp(log_n), delta, confidence, q) > epsilon

    lo = np.full(t.shape, math.log(2.0))
    hi = np.full(t.shape, math.log(max_trials))
    reachable = ok(hi)
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        good = ok(mid)
        hi, lo = np.where(good, mid, hi), np.where(good, lo, mid)
    if not np.any(reachable):
        return TrialsNeeded(math.inf, math.nan, math.nan, math.nan, math.nan, power)
    i = int(np.argmin(np.where(reachable, hi, np.inf)))
    return TrialsNeeded(float(math.ceil(math.exp(hi[i]))), float(t[i]), float(fpr[i]), float(fnr[i]),
                        math.log((1 - delta - fnr[i]) / fpr[i]), power)


def _count_quantile(quantile, n, p):
    """``Binomial(n, p)`` quantile: exact (scipy) for small variance, else the normal approximation
    (scipy's search is very slow for ``n·p·(1 − p)`` in the billions; the error is then < 1e-4 relative)."""
    n, p = np.broadcast_arrays(np.floor(np.asarray(n, np.float64)), np.asarray(p, np.float64))
    var = n * p * (1.0 - p)
    big = var > 1e6
    out = np.empty(n.shape)
    out[~big] = stats.binom.ppf(quantile, n[~big], p[~big])
    out[big] = np.floor(n[big] * p[big] + stats.norm.ppf(quantile) * np.sqrt(var[big]))
    return out


def _bounds_at(fpr, fnr, n, delta, confidence, quantile):
    alpha = 1.0 - confidence
    n = np.floor(n)
    kf = _count_quantile(quantile, n, fpr)
    kn = _count_quantile(quantile, n, fnr)
    return epsilon_lower_bound(clopper_pearson_upper(kf, n, alpha / 2), clopper_pearson_upper(kn, n, alpha / 2),
                               delta)
