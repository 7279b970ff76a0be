"""What a local ε₀ means centrally once the n reports are shuffled (host-side NumPy/SciPy).

n clients each release one report of an ε₀-DP local randomizer; a trusted shuffler hands
the analyst the reports in a uniformly random order. The shuffled output is (ε, δ)-DP
for datasets that differ in **one client's data (replace one, n fixed)**. Three bounds:

``"clones"`` (default): the numerical bound of Feldman, McMillan & Talwar, "Hiding among
    the clones" (FOCS 2021, arXiv:2012.12803, §4 and Appendix E). Each other client's
    report is a mixture that, with probability ``e^{-ε₀}``, is a "clone" of the target's
    report on one of two inputs; the shuffled output is then a post-processing of the pair

    .. math::
        C \\sim \\mathrm{Bin}(n-1, p),\\ A \\sim \\mathrm{Bin}(C, 1/2),\\
        \\Delta \\sim \\mathrm{Bern}(e^{ε₀}/(e^{ε₀}+1)),\\
        P = (A + \\Delta, C - A + 1 - \\Delta),\\ Q = (A + 1 - \\Delta, C - A + \\Delta)

    with ``p = e^{-ε₀}``, and δ(ε) ≤ D_{e^ε}(P‖Q), a hockey-stick divergence ldpsim
    computes **exactly** (not the stepped upper/lower bracket of the authors' reference
    implementation). Holds for every ε₀-DP local randomizer (adaptive ones too).
``"stronger"``: the stronger clone of Feldman, McMillan & Talwar, "Stronger privacy
    amplification by shuffling for Rényi and approximate differential privacy" (SODA 2023,
    arXiv:2208.04591): the same pair with clone probability ``p = 2/(e^{ε₀}+1)`` (larger,
    so δ is never larger than ``"clones"``). **Restricted validity**: the authors' erratum
    (arXiv:2208.04591, later versions) states that this bound does not hold for every
    ε₀-DP randomizer, only for those that admit the stronger-clone decomposition. ldpsim
    uses it only where the caller says the randomizer qualifies; for a finite randomizer
    :func:`stronger_clone_applies` checks the sufficient condition ldpsim relies on: every
    output distribution dominates ``(R(x₀) + R(x₁))/(e^{ε₀}+1)`` pointwise for every pair of
    inputs (true for k-ary and binary randomized response). PrivUnit, Duchi et al.'s
    mechanism, Laplace, SignDS: use ``"clones"``.
``"closed_form"``: the closed-form bound of Theorem 3.1 of arXiv:2012.12803, evaluated in the
    form of the authors' reference implementation (apple/ml-shuffling-amplification,
    ``closedformanalysis``), with ``a = 8√(e^{ε₀} log(4/δ)/n)``, ``c = 8e^{ε₀}/n``:
    ``ε = log(1 + (1 − e^{-ε₀})/(1 + e^{-ε₀ - log(1+a+c)})·(a + c))``. Valid only for
    ``ε₀ ≤ log(n / (16 log(4/δ)))`` (an error outside). It bounds the same divergence as
    ``"clones"``, so it is never smaller; it is a cross-check and a fallback.

Exact evaluation. Given ``C = c`` the pair is ``P_c = α·B_c + (1−α)·(B_c+1)`` and
``Q_c = (1−α)·B_c + α·(B_c+1)`` on ``{0..c+1}`` with ``B_c ~ Bin(c, ½)``, ``α =
e^{ε₀}/(e^{ε₀}+1)``. Their likelihood ratio decreases in ``x``, so ``D_{e^ε}(P_c‖Q_c)`` is
the sum over ``x ≤ t_c`` of the positive terms ``A·b(x) − B·b(x−1)`` with
``A = α − e^ε(1−α)``, ``B = e^ε α − (1−α)`` and ``t_c = ⌊A(c+1)/(A+B)⌋``, which telescopes
to ``A·F(t_c) − B·F(t_c − 1)`` (``b``, ``F`` the Bin(c, ½) pmf and cdf), evaluated from
``scipy.special.bdtr``, plus a margin of ``1e-13·A·F(t)`` for rounding, so δ stays an
upper bound; it agrees with a direct sum of the positive terms to ~1e-11 relative down to
δ = 1e-14 (tests).
``C`` is part of the output, so ``δ = Σ_c Pr[C=c]·δ_c``; the sum runs over the ``c`` of
``Bin(n−1, p)`` but at most ``1e-20`` of mass on each side, which is added as a bound
(δ_c ≤ 1 below, ``δ_c ≤ δ_{c_max}`` above, since one more clone is a post-processing).
By symmetry (swap the two coordinates) ``D(P‖Q) = D(Q‖P)``. ε(δ) is found by Brent's
method on ``[0, ε₀]`` (δ(ε) is non-increasing and δ(ε₀) = 0) and rounded up until
``δ(ε_returned) ≤ δ`` holds.

Rounds. :func:`shuffle_pld` builds the pair's privacy-loss distribution (rounded up on a
grid) for dp_accounting, and :func:`shuffle_rounds_epsilon` composes it over the rounds a
client takes part in: pairs that dominate each round dominate the composition (Zhu, Dong &
Wang 2022, arXiv:2106.08567). ε₀ = 1, n = 2000, δ = 1e-6: 16 rounds give far less than
16 times one round.

Limits. ``n = 1`` gives ε₀-randomized response (``δ(ε) = α − e^ε(1−α)``): ε ≤ ε₀, with
equality as δ → 0. For large n, ε shrinks like
``O((1 − e^{-ε₀})·√(e^{ε₀} log(1/δ)/n))`` (arXiv:2012.12803, abstract and Thm. 3.1).

Reproduced: the authors' reference implementation prints, for ``n = 10⁵``, ``ε₀ = 4``,
``δ = 1e-6``, the numerical ε between 0.16754 and 0.17279 and the closed form
0.5378040242374512 (its README); ldpsim gives 0.169770 (exact) and 0.5378040242374512.
The stronger clone agrees with Wang et al.'s independent implementation of the same pair
(wangsw/PrivacyAmplification, ``strong_clone``) to 1e-6 relative.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import numpy as np
from scipy import optimize, special, stats

from ldpsim._src._checks import LdpsimError, check_choice, check_positive, check_positive_int

__all__ = ["ANALYSES", "ShuffleReport", "closed_form_epsilon", "closed_form_max_epsilon0",
           "shuffle_delta", "shuffle_epsilon", "shuffle_pld", "shuffle_report",
           "shuffle_rounds_epsilon", "stronger_clone_applies"]

ANALYSES = ("clones", "stronger", "closed_form")

#: Largest ε₀ accepted (e^{ε₀} stays finite in float64 with room to spare).
MAX_EPSILON0 = 500.0
#: Mass of Bin(n−1, p) left out of the explicit sum on each side (added back as a bound).
_TAIL = 1e-20
#: Relative rounding margin added to every conditional δ_c (cdf evaluation and cancellation).
_ROUNDING = 1e-13
#: Root-finding tolerance on ε, relative to ε₀.
_XTOL = 1e-10

_REFERENCES = {
    "clones": "Feldman, McMillan & Talwar 2021, arXiv:2012.12803 (numerical, exact divergence)",
    "stronger": "Feldman, McMillan & Talwar 2023, arXiv:2208.04591 (stronger clone; restricted "
                "class of randomizers per the authors' erratum)",
    "closed_form": "Feldman, McMillan & Talwar 2021, arXiv:2012.12803, Thm. 3.1 (closed form)",
}
NEIGHBOURING = "replace one client's data (n fixed); each report eps0-LDP, order hidden by a shuffler"


@dataclasses.dataclass(frozen=True)
class ShuffleReport:
    """Local ε₀ and the central (ε, δ) of n shuffled reports, side by side.

    Attributes:
        epsilon0: the local ε₀ of one report (pure ε₀-LDP).
        clients: n, the number of shuffled reports.
        epsilon: central ε at ``delta`` (≤ ε₀).
        delta: central δ.
        analysis: ``"clones"``, ``"stronger"`` or ``"closed_form"``.
        neighbouring: the relation of the central guarantee.
        reference: where the bound comes from.
    """

    epsilon0: float
    clients: int
    epsilon: float
    delta: float
    analysis: str
    neighbouring: str = NEIGHBOURING
    reference: str = ""

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dict of the fields."""
        return dataclasses.asdict(self)


# --------------------------------------------------------------------------- checks


def _check_epsilon0(epsilon0: Any) -> float:
    eps0 = check_positive("epsilon0", epsilon0)
    if eps0 > MAX_EPSILON0:
        raise LdpsimError(f"epsilon0 must be <= {MAX_EPSILON0:g} (no amplification is left to "
                          f"compute beyond it), got {epsilon0!r}")
    return eps0


def _check_delta_array(delta: Any) -> np.ndarray:
    arr = np.asarray(delta, dtype=np.float64)
    if arr.size == 0 or not np.all((arr > 0) & (arr < 1)):
        bad = arr[~((arr > 0) & (arr < 1))] if arr.size else arr
        raise LdpsimError(f"delta must be in the open interval (0, 1); got "
                          f"{bad.ravel()[0] if bad.size else delta!r}")
    return arr


def _check_epsilon_array(epsilon: Any) -> np.ndarray:
    arr = np.asarray(epsilon, dtype=np.float64)
    if arr.size == 0 or not np.all(np.isfinite(arr) & (arr >= 0)):
        raise LdpsimError(f"epsilon must be finite and >= 0; got {epsilon!r}")
    return arr


def _clone_probability(epsilon0: float, analysis: str) -> float:
    if analysis == "clones":
        return math.exp(-epsilon0)
    return 2.0 / (math.exp(epsilon0) + 1.0)  # "stronger"


def _check_numerical(analysis: str) -> str:
    check_choice("analysis", analysis, ANALYSES)
    if analysis == "closed_form":
        raise LdpsimError("analysis='closed_form' gives epsilon only (closed_form_epsilon); "
                          "use 'clones' or 'stronger' for delta(epsilon)")
    return analysis


# --------------------------------------------------------------------------- exact divergence


@functools.lru_cache(maxsize=64)
def _clone_counts(n: int, p: float, max_c: int = 20_000
                  ) -> tuple[np.ndarray, np.ndarray, float, float]:
    """``c`` values of ``Bin(n−1, p)`` summed explicitly, their weights, and the masses left
    out below and above them (each at most :data:`_TAIL`, computed exactly).

    Beyond ``max_c`` values (n ≳ 10⁶), consecutive ``c`` are grouped in blocks whose
    weight is given to the block's smallest ``c``: fewer clones give a pair of which the
    true one is a post-processing (add the missing clones), so δ and the PLD stay upper
    bounds; the blocks are ``range/max_c`` wide, a tiny fraction of the spread of ``C``.
    """
    m = n - 1
    if m == 0 or p <= 0.0:
        return np.zeros(1, np.int64), np.ones(1), 0.0, 0.0
    dist = stats.binom(m, p)
    mean, sd = m * p, math.sqrt(m * p * (1.0 - p))
    width = 12.0
    while True:  # widen until both left-out tails are below _TAIL (Poisson-like tails too)
        lo = int(max(0, math.floor(mean - width * sd - width)))
        hi = int(min(m, math.ceil(mean + width * sd + 2 * width)))
        below = float(dist.cdf(lo - 1)) if lo > 0 else 0.0
        above = float(dist.sf(hi)) if hi < m else 0.0
        if max(below, above) <= _TAIL:
            break
        width *= 2.0
    c = np.arange(lo, hi + 1, dtype=np.int64)
    w = np.exp(dist.logpmf(c))
    # scipy's log pmf carries a common relative error (~1e-11 at n = 10⁵, from log-gamma):
    # rescale so that the weights and the left-out tails sum to one.
    w *= (1.0 - below - above) / w.sum()
    if c.size > max_c:
        starts = np.arange(0, c.size, int(math.ceil(c.size / max_c)))
        c, w = c[starts], np.add.reduceat(w, starts)
    return c, w, below, above


def _delta_given_c(eps: np.ndarray, eps0: float, c: np.ndarray) -> np.ndarray:
    """D_{e^ε}(P_c‖Q_c) for ε < ε₀, broadcast over ``eps[:, None]`` and ``c[None, :]``.

    ``A·F(t) − B·F(t−1)`` plus a rounding margin of ``_ROUNDING·A·F(t)``, so that the value
    is an upper bound despite the cancellation.
    """
    e = eps[:, None]
    alpha = special.expit(eps0)                          # e^{ε0}/(e^{ε0}+1)
    # A = α(1 − e^{ε−ε0}),  B = α e^ε (1 − e^{−ε−ε0}),
    # A/(A+B) = (1 − e^{ε−ε0}) / ((1+e^ε)(1 − e^{−ε0})).
    a = alpha * -np.expm1(e - eps0)
    b = alpha * np.exp(e) * -np.expm1(-e - eps0)
    frac = -np.expm1(e - eps0) / ((1.0 + np.exp(e)) * -math.expm1(-eps0))
    cc = c[None, :]
    t = np.minimum(np.floor(frac * (cc + 1)), cc)
    pos = a * special.bdtr(t, cc, 0.5)                   # A·F(t)
    neg = np.where(t >= 1, b * special.bdtr(np.maximum(t - 1, 0), cc, 0.5), 0.0)
    return np.clip(pos - neg + _ROUNDING * pos, 0.0, 1.0)


def _delta_of(eps: np.ndarray, eps0: float, n: int, p: float) -> np.ndarray:
    """δ(ε) of the clone pair with clone probability ``p`` (vector ``eps``, ε < ε₀)."""
    c, w, below, above = _clone_counts(n, p)
    d = _delta_given_c(eps, eps0, c)
    # Tails: δ_c ≤ 1 below the summed range; δ_c ≤ δ_{c_max} above it (monotone in c).
    return np.minimum(1.0, d @ w + below + above * d[:, -1])


def shuffle_delta(epsilon: Any, epsilon0: float, clients: int, *,
                  analysis: str = "clones") -> np.ndarray:
    """Central δ(ε) of ``clients`` shuffled ε₀-LDP reports (vectorised over ``epsilon``).

    Args:
        epsilon: central ε ≥ 0 (scalar or array).
        epsilon0: local ε₀ in (0, 500] of every report (pure ε₀-LDP).
        clients: n ≥ 1 reports shuffled together.
        analysis: ``"clones"`` (any ε₀-DP randomizer) or ``"stronger"`` (restricted class,
            see the module docstring and :func:`stronger_clone_applies`).

    Returns:
        δ with the shape of ``epsilon`` (float64), non-increasing in ε, 0 for ε ≥ ε₀.

    Raises:
        LdpsimError: on ε < 0 or non-finite, ε₀ outside (0, 500], n < 1, unknown analysis.
    """
    analysis = _check_numerical(analysis)
    eps0 = _check_epsilon0(epsilon0)
    n = check_positive_int("clients", clients)
    eps = _check_epsilon_array(epsilon)
    flat = eps.ravel()
    out = np.zeros(flat.shape)
    live = flat < eps0
    if live.any():
        out[live] = _delta_of(flat[live], eps0, n, _clone_probability(eps0, analysis))
    return out.reshape(eps.shape)


def shuffle_epsilon(delta: Any, epsilon0: float, clients: int, *,
                    analysis: str = "clones") -> np.ndarray:
    """Central ε(δ) of ``clients`` shuffled ε₀-LDP reports (vectorised over ``delta``).

    The smallest ε (to 1e-10·ε₀, rounded up) with ``δ(ε) ≤ delta``; ``analysis`` as in
    :func:`shuffle_delta`, or ``"closed_form"`` (:func:`closed_form_epsilon`).

    Returns:
        ε with the shape of ``delta``, in [0, ε₀], non-increasing in δ and in n.
    """
    check_choice("analysis", analysis, ANALYSES)
    if analysis == "closed_form":
        return closed_form_epsilon(epsilon0, clients, delta)
    eps0 = _check_epsilon0(epsilon0)
    n = check_positive_int("clients", clients)
    target = _check_delta_array(delta)
    p = _clone_probability(eps0, analysis)
    out = [_epsilon_at(float(d), eps0, n, p) for d in target.ravel()]
    return np.asarray(out, dtype=np.float64).reshape(target.shape)


def _epsilon_at(delta: float, eps0: float, n: int, p: float) -> float:
    """Smallest ε in [0, ε₀] with δ(ε) ≤ ``delta``, rounded up (Brent's method, then a check)."""
    def excess(e: float) -> float:
        return float(_delta_of(np.array([e]), eps0, n, p)[0]) - delta

    if excess(0.0) <= 0.0:
        return 0.0
    # δ(ε) is continuous and non-increasing on [0, ε₀), with δ → 0 as ε → ε₀.
    top = eps0 * (1.0 - 1e-12)
    if excess(top) > 0.0:
        return eps0
    tol = _XTOL * eps0
    root = optimize.brentq(excess, 0.0, top, xtol=tol, rtol=4 * np.finfo(float).eps)
    for _ in range(64):  # round up until δ(ε) ≤ delta holds at the returned ε
        if excess(root) <= 0.0:
            return root
        root = min(top, root + tol)
    return top


# --------------------------------------------------------------------------- closed form


def closed_form_max_epsilon0(clients: int, delta: float) -> float:
    """Largest ε₀ for which :func:`closed_form_epsilon` holds: ``log(n/(16 log(4/δ)))``
    (the check of the authors' reference implementation; Theorem 3.1 states ``log(2/δ)``,
    which allows slightly more)."""
    n = check_positive_int("clients", clients)
    d = _check_delta_array(delta)
    with np.errstate(divide="ignore"):
        return np.log(n / (16.0 * np.log(4.0 / d)))


def closed_form_epsilon(epsilon0: float, clients: int, delta: Any) -> np.ndarray:
    """Closed-form central ε of n shuffled ε₀-LDP reports (arXiv:2012.12803, Thm. 3.1).

    Evaluated as the authors' reference implementation does (module docstring).

    Raises:
        LdpsimError: if ``ε₀ > log(n / (16 log(4/δ)))`` for some δ (outside the theorem's
            range; use :func:`shuffle_epsilon`).
    """
    eps0 = _check_epsilon0(epsilon0)
    n = check_positive_int("clients", clients)
    d = _check_delta_array(delta)
    limit = closed_form_max_epsilon0(n, d)
    if np.any(eps0 > limit):
        worst = float(np.min(limit))
        raise LdpsimError(
            f"the closed-form shuffling bound needs epsilon0 <= log(n / (16 log(4/delta))) = "
            f"{worst:.4g} at clients={n}, delta={float(np.max(d)) if np.size(d) == 1 else 'given'}"
            f"; got epsilon0={eps0:g} (use analysis='clones')")
    a = 8.0 * np.sqrt(math.exp(eps0) * np.log(4.0 / d) / n)
    c = 8.0 * math.exp(eps0) / n
    e = np.log1p(a + c)
    b = -math.expm1(-eps0)
    dd = 1.0 + np.exp(-eps0 - e)
    return np.log1p(b / dd * (a + c))


# --------------------------------------------------------------------------- rounds (PLD)

#: Half-width, in standard deviations of Bin(c, 1/2), of the x values enumerated per c.
_X_WIDTH = 8.0
#: Most clone counts c enumerated for a PLD (blocks beyond; see _clone_counts).
_PLD_MAX_C = 2_000
#: Most (c, x) points enumerated at once when building a PLD.
_CHUNK = 2_000_000


def shuffle_pld(epsilon0: float, clients: int, *, analysis: str = "clones",
                value_discretization_interval: float | None = None):
    """The privacy-loss distribution of one shuffled round, for composing rounds.

    The clone pair (P, Q) of :func:`shuffle_delta` dominates one shuffled round for every
    pair of neighbouring datasets (the shuffled output is a post-processing of it), and
    dominating pairs compose, adaptively too (Zhu, Dong & Wang 2022, arXiv:2106.08567,
    Thm. 10), so ``T`` shuffled rounds in which the client's data may differ are dominated
    by the ``T``-fold product of the pair. This builds the pair's PLD for dp_accounting:
    privacy loss ``log P(c, x)/Q(c, x)`` at every ``(c, x)`` carrying mass (``x`` within
    ``±8`` standard deviations of ``c/2``), rounded **up** to the grid
    ``value_discretization_interval``; mass not enumerated (the tails of ``C`` and of
    ``x``) is put at the largest loss ``ε₀``. The pair is symmetric (swap the coordinates),
    so one distribution describes both directions. The default grid is
    ``min(1e-4, s/200)`` with ``s = (1 − e^{-ε₀})·√(e^{ε₀}/n)``, the scale of one round's ε,
    so the rounding costs about 0.5% of ε per round. Cost O(number of ``c`` × √c), at most
    2000 values of ``c`` (blocks beyond, still an upper bound): about 1 s at n = 10⁵,
    ε₀ = 4, 11 s at n = 10⁶, ε₀ = 0.5, 90 s at n = 10⁸ (2 shared cores).

    Returns:
        ``dp_accounting.pld.privacy_loss_distribution.PrivacyLossDistribution``
        (pessimistic estimate).
    """
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    analysis = _check_numerical(analysis)
    eps0 = _check_epsilon0(epsilon0)
    n = check_positive_int("clients", clients)
    if value_discretization_interval is None:
        scale = -math.expm1(-eps0) * math.sqrt(math.exp(eps0) / n)
        value_discretization_interval = min(1e-4, scale / 200.0)
    step = check_positive("value_discretization_interval", value_discretization_interval)
    if step > eps0:
        raise LdpsimError(f"value_discretization_interval must be <= epsilon0 ({eps0:g}), "
                          f"got {value_discretization_interval!r}")
    c_all, w_all, below, above = _clone_counts(n, _clone_probability(eps0, analysis),
                                               _PLD_MAX_C)
    alpha = float(special.expit(eps0))
    top = int(math.ceil(eps0 / step - 1e-9))                 # bucket of the largest loss
    hist = np.zeros(2 * top + 1)
    left_out = below + above
    half = _X_WIDTH * np.sqrt(np.maximum(c_all, 1)) / 2.0 + _X_WIDTH
    x_lo = np.maximum(0, np.floor(c_all / 2.0 - half)).astype(np.int64)
    x_hi = np.minimum(c_all + 1, np.ceil(c_all / 2.0 + half)).astype(np.int64)
    width = int((x_hi - x_lo).max()) + 1
    rows = max(1, _CHUNK // width)
    cols = np.arange(width)[None, :]
    for start in range(0, c_all.size, rows):                 # chunks of c, all x at once
        c = c_all[start:start + rows, None].astype(np.float64)
        lo = x_lo[start:start + rows, None]
        x = lo + cols
        valid = x <= x_hi[start:start + rows, None]
        inside = valid & (x <= c)                            # b(x) > 0
        # log b(x) by the ratio b(x)/b(x-1) = (c-x+1)/x, summed along x from log b(x_lo).
        with np.errstate(divide="ignore", invalid="ignore"):
            step_log = np.where(inside & (cols > 0), np.log(c - x + 1) - np.log(x), 0.0)
        lb = stats.binom.logpmf(lo, c, 0.5) + np.cumsum(step_log, axis=1)
        lb = np.where(inside, lb, -np.inf)
        lb1 = np.concatenate([stats.binom.logpmf(lo - 1, c, 0.5), lb[:, :-1]], axis=1)
        lb1 = np.where(valid, lb1, -np.inf)
        pb, pb1 = np.exp(lb), np.exp(lb1)
        p_mass = alpha * pb + (1.0 - alpha) * pb1              # P(x | c), Q(x | c) below
        q_mass = (1.0 - alpha) * pb + alpha * pb1
        w = w_all[start:start + rows, None]
        keep = p_mass > 0
        loss = np.log(p_mass[keep]) - np.log(q_mass[keep])
        idx = np.clip(np.ceil(loss / step + 1e-9), -top, top).astype(np.int64) + top
        hist += np.bincount(idx, weights=(w * p_mass)[keep], minlength=hist.size)
        # P-mass of these c outside their x window: at the largest loss.
        covered = p_mass.sum(axis=1)
        left_out += float(np.sum(w[:, 0] * np.clip(1.0 - covered, 0.0, 1.0)))
    hist[-1] += left_out
    pmf = {int(i) - top: float(m) for i, m in enumerate(hist) if m > 0}
    return pld_lib.PrivacyLossDistribution.create_from_rounded_probability(
        pmf, 0.0, step, pessimistic_estimate=True, symmetric=True)


def shuffle_rounds_epsilon(epsilon0: float, clients: int, rounds: int, delta: float, *,
                           analysis: str = "clones",
                           value_discretization_interval: float | None = None) -> float:
    """Central ε at ``delta`` of ``rounds`` shuffled rounds a client takes part in, each of
    ``clients`` ε₀-LDP reports: the PLD of :func:`shuffle_pld` composed ``rounds`` times
    (no amplification by sampling; one report per client per round)."""
    from ldpsim._src.privacy.accountants.accounting import _check_count

    k = _check_count("rounds", rounds)
    d = float(_check_delta_array(delta))
    if k == 0:
        return 0.0
    one = shuffle_pld(epsilon0, clients, analysis=analysis,
                      value_discretization_interval=value_discretization_interval)
    return float(one.self_compose(k).get_epsilon_for_delta(d))


# --------------------------------------------------------------------------- reports, checks


def shuffle_report(epsilon0: float, clients: int, delta: float, *,
                   analysis: str = "clones") -> ShuffleReport:
    """:class:`ShuffleReport` of ``clients`` shuffled ε₀-LDP reports at one ``delta``."""
    eps = float(shuffle_epsilon(delta, epsilon0, clients, analysis=analysis))
    return ShuffleReport(float(epsilon0), int(clients), eps, float(delta), analysis,
                         reference=_REFERENCES[analysis])


def stronger_clone_applies(probabilities: Any, epsilon0: float, *, rtol: float = 1e-12) -> bool:
    """Whether a finite randomizer admits the stronger-clone decomposition at ``epsilon0``.

    ``probabilities[x, y] = Pr[R(x) = y]`` (rows sum to 1). The condition checked is
    ``(e^{ε₀}+1)·R(x)(y) ≥ R(x₀)(y) + R(x₁)(y)`` for all inputs ``x, x₀, x₁`` and outputs
    ``y`` (every report is then, with probability ``2/(e^{ε₀}+1)``, a clone of the target's
    report on ``x₀`` or ``x₁``), together with ε₀-LDP itself. Both hold for k-ary
    randomized response at its own ε₀. Checked on the two largest and the smallest entry
    of every column, so the cost is O(inputs × outputs).
    """
    eps0 = _check_epsilon0(epsilon0)
    r = np.asarray(probabilities, dtype=np.float64)
    if r.ndim != 2 or r.shape[0] < 2 or not np.all(np.isfinite(r)) or np.any(r < 0):
        raise LdpsimError("probabilities must be a finite non-negative (inputs >= 2, outputs) "
                          f"matrix; got shape {r.shape}")
    if not np.allclose(r.sum(axis=1), 1.0, rtol=0, atol=1e-9):
        raise LdpsimError("every row of probabilities must sum to 1")
    col = np.sort(r, axis=0)
    lowest, top2 = col[0], col[-1] + col[-2]
    slack = 1.0 + rtol
    ldp = np.all(col[-1] <= math.exp(eps0) * col[0] * slack)
    return bool(ldp and np.all(top2 <= (math.exp(eps0) + 1.0) * lowest * slack))
