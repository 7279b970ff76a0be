"""ε lower bounds from canary guesses in ONE run, and the Gaussian-DP (f-DP) conversion.

Host-side SciPy maths behind :mod:`ldpsim._src.audit._pipeline`; nothing here knows about
federated learning.

One-run bound (Steinke, Nasr & Jagielski 2023)
-----------------------------------------------
``m`` canaries each get an independent uniform sign ``S_i ∈ {−1, +1}`` (for a federated
canary client: its update is ``+u_i`` or ``−u_i``, a replace-one pair). After ONE run the
auditor makes ``r`` guesses ``T_i ∈ {−1, +1}`` (abstaining on the other ``m − r``) and ``v``
of them are right. If the run is (ε, δ)-DP with respect to every single canary's sign, then
for every ``v``

    ``P[W ≥ v] ≤ f(v) + 2mδ · max_{1≤i≤v} (f(v − i) − f(v)) / i``,
    ``f(x) = P[Binomial(r, q) ≥ x]``, ``q = e^ε / (1 + e^ε)``

(Steinke, Nasr & Jagielski, "Privacy auditing with one (1) training run", NeurIPS 2023,
arXiv:2305.08846, Thm. 3.1 for δ = 0 and its approximate-DP extension in §5). The right-hand
side is the p-value :func:`one_run_p_value`, computed exactly from SciPy's binomial tail
(``binom.sf``) and point masses (``f(v − i) − f(v) = Σ_{j=1..i} P[Bin = v − j]``); nothing is
approximated.

:func:`one_run_epsilon_lower_bound` returns the end of the interval ``[0, ε_lb)`` of ε values
that the observation rejects at level ``β = 1 − confidence``: ``p(ε) ≤ β`` for every
``ε < ε_lb``. If the run is (ε*, δ)-DP, then ``ε_lb > ε*`` needs ``p(ε*) ≤ β``, which happens
with probability at most β. So ``P(ε_lb > ε*) ≤ 1 − confidence``. The first crossing of ``β``
is found on a grid of step 1/16 and refined by ``brentq``; p is non-decreasing in ε in every
case tested (``tests/audit/test_pipeline_audit.py``).

For δ = 0 the bound is a Clopper–Pearson bound in disguise: ``ε_lb = logit(L)`` with ``L`` the
one-sided lower Clopper–Pearson bound on the guess accuracy (:func:`one_run_epsilon_lower_bound`
is tested against that closed form).

What one run can show: with ``r`` guesses all right, ``ε_lb`` is at most about
``log(r / log(1/β))`` (:func:`one_run_epsilon_cap`): 5.1 for r = 500 guesses at 95 %.
A Gaussian pipeline at ε = 16 is therefore never audited tightly by this route; that is a
limit of the method, not evidence of privacy.

Gaussian DP (Nasr et al. 2023)
------------------------------
A mechanism is μ-GDP when no test of a neighbouring pair beats the Gaussian trade-off
``FNR ≥ Φ(Φ⁻¹(1 − FPR) − μ)`` (Dong, Roth & Su, "Gaussian differential privacy", JRSS-B
2022, arXiv:1905.02383). Any test's rates then give ``μ ≥ Φ⁻¹(1 − FPR) − Φ⁻¹(FNR)``; with
Clopper–Pearson upper bounds on both rates this is :func:`gdp_mu_lower_bound`, valid with
probability ≥ 1 − α **if the mechanism's trade-off curve is Gaussian** (true for clipped
Gaussian LDP composed over rounds; not a black-box statement). ε at δ of μ-GDP
(:func:`gdp_epsilon`) is the ε of the Gaussian mechanism with noise multiplier 1/μ
(Dong, Roth & Su, Cor. 2.13; Balle & Wang 2018, Thm. 8), computed by ldpsim's exact
:func:`ldpsim.privacy.analytic_gaussian_epsilon` and tested against
dp_accounting and an independent SciPy root. This is the audit route of Nasr et al.,
"Tight auditing of differentially private machine learning", USENIX Security 2023,
arXiv:2302.07956.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import optimize, special, stats

from ldpsim._src._checks import LdpsimError, check_nonnegative, check_open_unit
from ldpsim._src.audit._bounds import clopper_pearson_upper
from ldpsim._src.privacy.noise.calibration import analytic_gaussian_epsilon

__all__ = ["EPSILON_GRID_MAX", "gdp_epsilon", "gdp_mu_lower_bound", "one_run_epsilon_cap",
           "one_run_epsilon_lower_bound", "one_run_guesses", "one_run_p_value"]

#: ε_lb is searched in [0, EPSILON_GRID_MAX]; at ε = 64, q = 1 − 1.6e-28, so p(ε) = 1 there
#: for every observation (v ≤ r): the crossing always lies inside.
EPSILON_GRID_MAX = 64.0
_GRID_STEP = 1.0 / 16.0


def _counts(m: Any, r: Any, v: Any) -> tuple[int, int, int]:
    out = []
    for name, value in (("canaries", m), ("guesses", r), ("correct", v)):
        if isinstance(value, bool) or not float(value).is_integer() or value < 0:
            raise LdpsimError(f"{name} must be a non-negative integer, got {value!r}")
        out.append(int(value))
    m, r, v = out
    if m < 1:
        raise LdpsimError(f"canaries must be >= 1, got {m}")
    if not v <= r <= m:
        raise LdpsimError(f"need correct <= guesses <= canaries, got correct={v}, guesses={r}, "
                          f"canaries={m}")
    return m, r, v


def _check_delta(delta: Any) -> float:
    delta = check_nonnegative("delta", delta)
    if delta >= 1:
        raise LdpsimError(f"delta must be in [0, 1), got {delta!r}")
    return delta


def _p_values(m: int, r: int, v: int, eps: np.ndarray, delta: float) -> np.ndarray:
    """The one-run p-value at each ε of ``eps`` (float64, vectorised over ε)."""
    eps = np.atleast_1d(np.asarray(eps, np.float64))
    if v == 0:
        return np.ones(eps.shape)
    q = special.expit(eps)[:, None]
    tail = stats.binom.sf(v - 1, r, q[:, 0])                      # P[Bin(r, q) >= v]
    if delta == 0.0:
        return np.minimum(tail, 1.0)
    below = stats.binom.pmf(v - np.arange(1, v + 1)[None, :], r, q)  # P[Bin = v - i], i=1..v
    ratio = np.cumsum(below, axis=1) / np.arange(1, v + 1)[None, :]
    return np.minimum(tail + 2.0 * m * delta * ratio.max(axis=1), 1.0)


def one_run_p_value(m: int, r: int, v: int, epsilon: float, delta: float = 0.0) -> float:
    """P[≥ v of r guesses right] under the hypothesis that the run is (ε, δ)-DP.

    Args:
        m: canaries (each with an independent uniform sign).
        r: guesses made (0 ≤ r ≤ m); the others abstain.
        v: right guesses (0 ≤ v ≤ r).
        epsilon: ε ≥ 0 of the hypothesis.
        delta: δ in [0, 1) of the hypothesis.

    Returns:
        ``min(1, f(v) + 2mδ·max_i (f(v−i) − f(v))/i)`` (see the module docstring).

    Raises:
        LdpsimError: counts that are not integers with ``v ≤ r ≤ m``, ``m < 1``, ε < 0 or
            NaN, δ outside [0, 1).
    """
    m, r, v = _counts(m, r, v)
    eps = check_nonnegative("epsilon", epsilon)
    return float(_p_values(m, r, v, np.array([eps]), _check_delta(delta))[0])


def one_run_epsilon_lower_bound(m: int, r: int, v: int, *, delta: float = 0.0,
                                confidence: float = 0.95) -> float:
    """ε_lb from ``v`` right guesses out of ``r`` on ``m`` canaries, at ``confidence``.

    ``p(ε) ≤ 1 − confidence`` for every ``ε < ε_lb`` (:func:`one_run_p_value`), so a run
    that is (ε*, δ)-DP gives ``ε_lb > ε*`` with probability at most ``1 − confidence``.
    0 when even ε = 0 is not rejected.

    Raises:
        LdpsimError: bad counts (see :func:`one_run_p_value`), confidence outside (0, 1).
    """
    m, r, v = _counts(m, r, v)
    beta = 1.0 - check_open_unit("confidence", confidence)
    delta = _check_delta(delta)
    grid = np.arange(0.0, EPSILON_GRID_MAX + _GRID_STEP / 2, _GRID_STEP)
    p = _p_values(m, r, v, grid, delta)
    above = np.flatnonzero(p > beta)
    if above.size == 0:   # cannot happen for v <= r (p(64) = 1); kept as a guard
        return EPSILON_GRID_MAX
    i = int(above[0])
    if i == 0:
        return 0.0
    f = lambda e: float(_p_values(m, r, v, np.array([e]), delta)[0]) - beta  # noqa: E731
    return float(optimize.brentq(f, grid[i - 1], grid[i], xtol=1e-10, rtol=1e-12))


def one_run_epsilon_cap(m: int, r: int, *, delta: float = 0.0, confidence: float = 0.95) -> float:
    """The largest ε_lb ``r`` guesses on ``m`` canaries can give (all ``r`` right)."""
    return one_run_epsilon_lower_bound(m, r, r, delta=delta, confidence=confidence)


def one_run_guesses(scores: Any, signs: Any, guesses: int) -> tuple[int, int]:
    """Guess ``sign(score)`` for the ``guesses`` canaries of largest ``|score|``.

    Args:
        scores: float[m], positive when the score favours ``S = +1``.
        signs: the true signs, ±1 [m].
        guesses: r, 0 ≤ r ≤ m (ties in ``|score|`` broken by position).

    Returns:
        ``(r, v)``: guesses made and right guesses. A score of exactly 0 guesses −1.
    """
    scores = np.asarray(scores, np.float64)
    signs = np.asarray(signs)
    r = int(guesses)
    if not 0 <= r <= scores.size:
        raise LdpsimError(f"guesses must be in [0, {scores.size}], got {guesses!r}")
    order = np.argsort(-np.abs(scores), kind="stable")[:r]
    guess = np.where(scores[order] > 0, 1, -1)
    return r, int(np.sum(guess == signs[order]))


def gdp_mu_lower_bound(errors_neg: int, n_neg: int, errors_pos: int, n_pos: int, *,
                       confidence: float = 0.95) -> dict[str, float]:
    """μ_lb of a μ-GDP mechanism from one fixed test's error counts.

    ``FPR⁺`` and ``FNR⁺`` are one-sided Clopper–Pearson upper bounds at ``1 − α/2`` each
    (``α = 1 − confidence``, union bound), and ``μ_lb = max(0, Φ⁻¹(1 − FPR⁺) − Φ⁻¹(FNR⁺))``.
    Also returned: the point estimate ``μ̂ = Φ⁻¹(1 − FPR) − Φ⁻¹(FNR)`` (inf when a rate is 0).

    Args:
        errors_neg, n_neg: false positives among the ``S = −1`` trials, and their number.
        errors_pos, n_pos: false negatives among the ``S = +1`` trials, and their number.
        confidence: in (0, 1).

    Returns:
        dict with ``mu_lb``, ``mu_hat``, ``fpr``, ``fnr``, ``fpr_upper``, ``fnr_upper``.
    """
    alpha = 1.0 - check_open_unit("confidence", confidence)
    for name, k, n in (("negatives", errors_neg, n_neg), ("positives", errors_pos, n_pos)):
        if n < 1 or not 0 <= k <= n:
            raise LdpsimError(f"{name}: need 0 <= errors <= trials and trials >= 1, got "
                              f"{k} of {n}")
    fpr, fnr = errors_neg / n_neg, errors_pos / n_pos
    fpr_u = float(clopper_pearson_upper(errors_neg, n_neg, alpha / 2))
    fnr_u = float(clopper_pearson_upper(errors_pos, n_pos, alpha / 2))
    mu_lb = max(0.0, float(special.ndtri(1.0 - fpr_u) - special.ndtri(fnr_u)))
    with np.errstate(divide="ignore"):
        mu_hat = float(special.ndtri(1.0 - fpr) - special.ndtri(fnr))
    return {"mu_lb": mu_lb, "mu_hat": mu_hat, "fpr": fpr, "fnr": fnr,
            "fpr_upper": fpr_u, "fnr_upper": fnr_u}


def gdp_epsilon(mu: float, delta: float) -> float:
    """ε at δ of a μ-GDP mechanism: ε of the Gaussian mechanism with multiplier 1/μ.

    Solves ``δ = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)`` (Dong, Roth & Su, Cor. 2.13) through
    :func:`ldpsim.privacy.analytic_gaussian_epsilon` (exact, overflow-free).
    μ = 0 gives 0, μ = inf gives inf.
    """
    delta = check_open_unit("delta", delta)
    if mu == math.inf:
        return math.inf
    mu = check_nonnegative("mu", mu)
    if mu == 0.0:
        return 0.0
    return float(analytic_gaussian_epsilon(1.0 / mu, delta))
