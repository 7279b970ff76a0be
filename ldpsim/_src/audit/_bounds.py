"""From error rates to an ε lower bound: Clopper–Pearson bounds and the hypothesis-testing inequality.

Host-side NumPy/scipy maths (no JAX).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import numpy as np
from scipy import stats

from ldpsim._src._checks import LdpsimError, check_choice

ORIENTATIONS = ("above", "below")

#: Candidate thresholds the selection step considers at most (from the data, thinned).
MAX_CANDIDATES = 4096


class Test(NamedTuple):
    """A threshold test on the score.

    Attributes:
        threshold: a float32 value ``t``.
        orientation: ``"above"``: guess ``x1`` iff ``score > t``; ``"below"``: iff ``score ≤ t``.
    """

    threshold: float
    orientation: str = "above"


def clopper_pearson_upper(k: Any, n: Any, alpha: float) -> Any:
    """One-sided Clopper–Pearson upper bound: ``P(p ≤ U) ≥ 1 − α`` for ``k`` successes in ``n``.

    ``U = Beta⁻¹(1 − α; k + 1, n − k)`` (``scipy.stats.beta.ppf``), and ``U = 1`` for ``k = n``
    (Clopper & Pearson, Biometrika 1934). Vectorised; ``k`` may be non-integer (used when
    planning with expected counts).
    """
    k, n = np.broadcast_arrays(np.asarray(k, np.float64), np.asarray(n, np.float64))
    out = np.ones(k.shape)
    inner = k < n
    out[inner] = stats.beta.ppf(1.0 - alpha, k[inner] + 1.0, n[inner] - k[inner])
    return out if out.ndim else float(out)


def clopper_pearson_lower(k: Any, n: Any, alpha: float) -> Any:
    """One-sided Clopper–Pearson lower bound: ``P(p ≥ L) ≥ 1 − α``; ``L = Beta⁻¹(α; k, n − k + 1)``, 0 for ``k = 0``."""
    k, n = np.broadcast_arrays(np.asarray(k, np.float64), np.asarray(n, np.float64))
    out = np.zeros(k.shape)
    inner = k > 0
    out[inner] = stats.beta.ppf(alpha, k[inner], n[inner] - k[inner] + 1.0)
    return out if out.ndim else float(out)


def _log_ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """``log(num/den)``; −inf where ``num ≤ 0``, +inf where ``num > 0 = den``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.log(num) - np.log(den)
    return np.where(num > 0, np.where(den > 0, out, np.inf), -np.inf)


def epsilon_lower_bound(fpr_upper: Any, fnr_upper: Any, delta: float) -> Any:
    """``max(0, log((1 − δ − FNR⁺)/FPR⁺), log((1 − δ − FPR⁺)/FNR⁺))``.

    Any (ε, δ)-DP mechanism and any test of ``x0`` against ``x1`` satisfy
    ``FPR + e^ε·FNR ≥ 1 − δ`` and ``FNR + e^ε·FPR ≥ 1 − δ`` (Kairouz, Oh & Viswanath, "The
    composition theorem for differential privacy", ICML 2015, arXiv:1311.0776, Thm. 2.1;
    used for auditing by Jagielski, Ullman & Oprea, NeurIPS 2020, arXiv:2006.07709, and
    Nasr et al., IEEE S&P 2021, arXiv:2101.04535). So for upper bounds ``FPR⁺ ≥ FPR`` and
    ``FNR⁺ ≥ FNR`` every ε the mechanism satisfies is at least this value. A direction whose
    numerator is ≤ 0 gives nothing; a zero denominator with a positive numerator gives
    ``inf`` (no ε works at this δ). Vectorised.
    """
    fpr, fnr = np.asarray(fpr_upper, np.float64), np.asarray(fnr_upper, np.float64)
    a = _log_ratio(1.0 - delta - fnr, fpr)
    b = _log_ratio(1.0 - delta - fpr, fnr)
    out = np.maximum(0.0, np.maximum(a, b))
    return out if out.ndim else float(out)


def error_rates(above0: Any, above1: Any, n: int, orientation: str) -> tuple[Any, Any]:
    """``(FPR, FNR)`` counts of a threshold test from counts of scores above the threshold.

    ``"above"``: FPR count ``above0``, FNR count ``n − above1``; ``"below"``: ``n − above0``
    and ``above1``.
    """
    above0, above1 = np.asarray(above0), np.asarray(above1)
    if orientation == "above":
        return above0, n - above1
    return n - above0, above1


def structural_zeros(thresholds: Any, orientation: str, support) -> tuple[Any, Any]:
    """Where the FPR (resp. FNR) of a test is exactly 0 because the region lies outside a support.

    ``support = ((lo0, hi0), (lo1, hi1))``: closed intervals holding every score under ``x0``
    and under ``x1`` (by construction of the sampler, not by observation). ``"above"``:
    FPR = ``P0(s > t)`` is 0 for ``t ≥ hi0``; FNR = ``P1(s ≤ t)`` is 0 for ``t < lo1``.
    ``"below"``: FPR = ``P0(s ≤ t)`` is 0 for ``t < lo0``; FNR = ``P1(s > t)`` for ``t ≥ hi1``.
    """
    t = np.asarray(thresholds, np.float64)
    if support is None:
        return np.zeros(t.shape, bool), np.zeros(t.shape, bool)
    (lo0, hi0), (lo1, hi1) = support
    if orientation == "above":
        return t >= hi0, t < lo1
    return t < lo0, t >= hi1


def support_thresholds(support) -> np.ndarray:
    """The support's end points as float32, with the float32 values either side (empty for None)."""
    if support is None:
        return np.zeros(0, np.float32)
    ends = np.asarray([e for pair in support for e in pair], np.float32)
    both = np.concatenate([ends, np.nextafter(ends, np.float32(-np.inf)), np.nextafter(ends, np.float32(np.inf))])
    return np.unique(both[np.isfinite(both)])


def candidate_thresholds(pooled: np.ndarray, support=None) -> np.ndarray:
    """Increasing float32 thresholds to try: the data's distinct values, thinned to keep the tails.

    Beyond :data:`MAX_CANDIDATES` distinct values every one of the most extreme order
    statistics is kept (geometrically spaced ranks from both ends) plus an even spread in
    the middle; :func:`support_thresholds` are added.
    """
    values = np.unique(np.asarray(pooled, np.float32))
    values = values[np.isfinite(values)]
    if values.size > MAX_CANDIDATES:
        m = values.size
        ranks = np.unique(np.concatenate([
            np.round(np.geomspace(1, m // 2, MAX_CANDIDATES // 4)) - 1,
            m - np.round(np.geomspace(1, m // 2, MAX_CANDIDATES // 4)),
            np.round(np.linspace(0, m - 1, MAX_CANDIDATES // 2)),
        ]).astype(np.int64))
        values = values[ranks]
    values = np.unique(np.concatenate([values, support_thresholds(support)]))
    if values.size == 0:
        raise LdpsimError("no finite scores to choose a threshold from")
    return values.astype(np.float32)


def select_test(
    thresholds: np.ndarray,
    above0: np.ndarray,
    above1: np.ndarray,
    *,
    n_select: int,
    n_eval: int,
    delta: float,
    alpha: float,
    support=None,
) -> Test:
    """The test whose bound would be largest, judged on the selection trials only.

    Every threshold and both orientations are scored by :func:`epsilon_lower_bound` of the
    Clopper–Pearson bounds (at ``α/2`` each) that the observed rates would give with
    ``n_eval`` trials (counts scaled by ``n_eval/n_select``), with structurally zero rates
    taken as 0. Ties among infinite bounds go to the largest numerator.
    """
    best, best_key = None, (-np.inf, -np.inf)
    for orientation in ORIENTATIONS:
        kf, kn = error_rates(above0, above1, n_select, orientation)
        scale = n_eval / n_select
        fpr_up = clopper_pearson_upper(kf * scale, n_eval, alpha / 2)
        fnr_up = clopper_pearson_upper(kn * scale, n_eval, alpha / 2)
        zf, zn = structural_zeros(thresholds, orientation, support)
        fpr_up, fnr_up = np.where(zf, 0.0, fpr_up), np.where(zn, 0.0, fnr_up)
        eps = np.atleast_1d(epsilon_lower_bound(fpr_up, fnr_up, delta))
        # tie-break between infinite bounds: the numerator of the infinite direction
        margin = np.maximum(np.where(fpr_up == 0, 1.0 - delta - fnr_up, -np.inf),
                            np.where(fnr_up == 0, 1.0 - delta - fpr_up, -np.inf))
        order = np.lexsort((margin, eps))
        i = int(order[-1])
        key = (float(eps[i]), float(margin[i]))
        if key > best_key:
            best, best_key = Test(float(thresholds[i]), orientation), key
    return best


@dataclasses.dataclass(frozen=True)
class AuditResult:
    """An empirical ε lower bound and how it was obtained.

    Attributes:
        epsilon_lb: the ε lower bound at ``delta``, valid with probability ≥ ``confidence``
            over the evaluation trials (``inf``: no ε holds at this δ); uses the support
            where one was given (see ``zero_by_support``).
        epsilon_lb_sampled: the same from the sampled rates alone (every rate bounded by
            Clopper–Pearson, no support knowledge): a black-box bound.
        epsilon_cap: the largest ``epsilon_lb_sampled`` that ``eval_trials`` trials can
            ever give (both error counts 0): about ``log(eval_trials/log(2/α))``.
        delta: the δ of the bound.
        confidence: ``1 − α``; each of the two rates is bounded at ``1 − α/2``.
        trials: trials per input (selection + evaluation).
        select_trials: trials per input used to choose the test (0: test fixed in advance).
        eval_trials: trials per input, disjoint from the selection trials, that the bound uses.
        test: the threshold test.
        fpr, fnr: the observed error rates on the evaluation trials.
        fpr_upper, fnr_upper: the upper bounds used (0 for a structurally zero rate).
        zero_by_support: ``"fpr"``/``"fnr"`` when that rate was taken as exactly 0 because
            the test's region lies outside the stated support of the scores; else None.
        support_mismatch: the support-mismatch test on the same releases
            (:class:`ldpsim._src.audit._mismatch.SupportMismatch`: a region one input hits
            and the other never does, with its own ε lower bound at ``confidence``); None
            when it was not run.
    """

    epsilon_lb: float
    epsilon_lb_sampled: float
    epsilon_cap: float
    delta: float
    confidence: float
    trials: int
    select_trials: int
    eval_trials: int
    test: Test
    fpr: float
    fnr: float
    fpr_upper: float
    fnr_upper: float
    zero_by_support: str | None
    support_mismatch: Any = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``inf`` stays a float; ``json.dumps`` writes ``Infinity``)."""
        out = dataclasses.asdict(self)
        out["test"] = {"threshold": self.test.threshold, "orientation": self.test.orientation}
        out["support_mismatch"] = None if self.support_mismatch is None else self.support_mismatch.to_dict()
        return out


def evaluate_test(
    test: Test,
    above0: int,
    above1: int,
    *,
    n_eval: int,
    n_select: int,
    delta: float,
    confidence: float,
    support=None,
) -> AuditResult:
    """Bound ε from one test's counts on the evaluation trials (see :func:`epsilon_lower_bound`).

    Raises:
        LdpsimError: a sampled score contradicts the stated support.
    """
    check_choice("orientation", test.orientation, ORIENTATIONS)
    alpha = 1.0 - confidence
    kf, kn = (int(v) for v in error_rates(above0, above1, n_eval, test.orientation))
    zf, zn = (bool(v) for v in structural_zeros(test.threshold, test.orientation, support))
    for zero, count, name in ((zf, kf, "FPR"), (zn, kn, "FNR")):
        if zero and count:
            raise LdpsimError(
                f"{count} evaluation trials fall where the stated support says the {name} is 0: "
                "the support is wrong for this mechanism"
            )
    fpr_s = clopper_pearson_upper(kf, n_eval, alpha / 2)
    fnr_s = clopper_pearson_upper(kn, n_eval, alpha / 2)
    fpr_up, fnr_up = (0.0 if zf else fpr_s), (0.0 if zn else fnr_s)
    return AuditResult(
        epsilon_lb=float(epsilon_lower_bound(fpr_up, fnr_up, delta)),
        epsilon_lb_sampled=float(epsilon_lower_bound(fpr_s, fnr_s, delta)),
        epsilon_cap=epsilon_cap(n_eval, confidence, delta),
        delta=float(delta),
        confidence=float(confidence),
        trials=int(n_select + n_eval),
        select_trials=int(n_select),
        eval_trials=int(n_eval),
        test=Test(float(test.threshold), test.orientation),
        fpr=kf / n_eval,
        fnr=kn / n_eval,
        fpr_upper=float(fpr_up),
        fnr_upper=float(fnr_up),
        zero_by_support="fpr" if zf else ("fnr" if zn else None),
    )


def epsilon_cap(n_eval: int, confidence: float, delta: float = 0.0) -> float:
    """The largest black-box ε lower bound ``n_eval`` trials per input can give (no errors at all).

    ``log((1 − δ − U₀)/U₀)`` with ``U₀ = 1 − (α/2)^{1/n}`` the Clopper–Pearson bound of 0
    errors: about ``log(n/log(2/α))`` (13.0 for 10⁶ trials at 95 %). A claim above it cannot
    be refuted by sampling alone, however wrong it is.
    """
    cp0 = clopper_pearson_upper(0, n_eval, (1.0 - confidence) / 2)
    return float(epsilon_lower_bound(cp0, cp0, delta))
