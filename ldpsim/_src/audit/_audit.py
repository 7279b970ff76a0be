"""The audit: play the game, choose a test on one split, bound ε on the other."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ldpsim._src._checks import LdpsimError, check_choice, check_open_unit, check_positive, check_positive_int
from ldpsim._src.audit import _bounds, _game, _mechanisms, _mismatch
from ldpsim._src.audit._bounds import AuditResult, Test
from ldpsim._src.audit._mechanisms import Mechanism, Score
from ldpsim._src.privacy import registry

PyTree = Any

#: Selection trials per input whose scores are kept on the host; beyond it a pilot of this
#: size proposes the thresholds and the selection counts are taken in the kernel.
PILOT_TRIALS = 2**20

#: Thresholds of the grid the selection counts when it streams (beyond :data:`PILOT_TRIALS`).
SELECTION_GRID = 2**14

MECHANISMS = registry.audit_randomizers()


def _check_delta(delta: Any) -> float:
    try:
        out = float(delta)
    except (TypeError, ValueError):
        raise LdpsimError(f"delta must be a number in [0, 1), got {delta!r}") from None
    if not 0.0 <= out < 1.0:
        raise LdpsimError(f"delta must be in [0, 1), got {delta!r}")
    return out


def _split(trials: int, select_fraction: float) -> tuple[int, int]:
    n_select = int(math.floor(trials * select_fraction))
    if n_select < 1 or trials - n_select < 1:
        raise LdpsimError(
            f"trials must leave at least one selection and one evaluation trial per input "
            f"(trials={trials}, select_fraction={select_fraction}); use trials >= 2"
        )
    return n_select, trials - n_select


def audit(
    mechanism: Mechanism,
    x0: PyTree,
    x1: PyTree,
    *,
    key: jax.Array,
    trials: int,
    delta: float = 0.0,
    score: Score | None = None,
    confidence: float = 0.95,
    select_fraction: float = 0.5,
    test: Test | None = None,
    support=None,
    chunk_size: int | None = None,
    progress: Callable[[int], Any] | None = None,
    support_check: bool = True,
    statistics: _mismatch.Statistics | None = None,
) -> AuditResult:
    """Empirical ε lower bound at ``delta`` for ``mechanism`` on the neighbouring pair ``(x0, x1)``.

    The first ``⌊select_fraction·trials⌋`` trials of each input choose a threshold test
    (:func:`ldpsim.audit.select_test`); the remaining trials, disjoint from them (other key
    positions), are counted for that one test, and only those counts enter the bound. A test
    fixed in advance (``test``) skips the selection: every trial is an evaluation trial.

    With ``support_check`` the same releases (same keys) also go through the support-mismatch
    test (:func:`ldpsim.audit.support_mismatch_test`: a region of some 1-D statistic of the
    release that one input hits and the other never does, chosen on the selection trials and
    bounded on the others), reported as ``result.support_mismatch`` with its own ε lower bound
    at ``confidence``. Each bound errs with probability at most ``α``; a verdict that takes
    the larger of the two errs with probability at most ``2α`` (union bound). It needs
    ``trials ≥ 3`` (skipped below) and costs one more pass over the trials.

    Args:
        mechanism: ``(key, x) -> output``, pure and vmappable over the key.
        x0, x1: the neighbouring inputs.
        key: root key (trial ``i`` of input ``w`` uses ``fold_in(fold_in(key, w), i)``).
        trials: trials per input (≥ 2 with selection, ≥ 1 with a fixed ``test``).
        delta: the δ of the claim (0 for pure DP).
        score: ``output -> scalar`` (default :func:`ldpsim.audit.projection_score`).
        confidence: ``1 − α`` in (0, 1); the two Clopper–Pearson bounds take ``α/2`` each.
        select_fraction: share of the trials used to choose the test, in (0, 1).
        test: a :class:`Test` fixed in advance (no selection split).
        support: ``((lo0, hi0), (lo1, hi1))``, closed intervals that contain every score
            under ``x0`` and ``x1`` *by construction* (e.g. a sampler's tail bound); a test
            region outside one of them has an exactly zero rate. None: no such knowledge.
        chunk_size: trials per kernel call (default: 2**22 output elements per chunk).
        progress: called with the number of trials finished after each chunk.
        support_check: also run the support-mismatch test (default True).
        statistics: the statistics it examines (default
            :func:`ldpsim.audit.default_statistics` of the release, with ``score``).

    Returns:
        An :class:`AuditResult`.

    Raises:
        LdpsimError: bad arguments, a NaN score, or samples outside the stated support.
    """
    trials = check_positive_int("trials", trials)
    confidence = check_open_unit("confidence", confidence)
    delta = _check_delta(delta)
    if score is None:
        score = _mechanisms.projection_score(x0, x1)
    game = _game.Game(mechanism, x0, x1, score, key=key,
                      chunk_size=_game._chunk(chunk_size, mechanism, x0, key, trials))
    score_only = False   # the default statistics of a scalar release scored by itself: the score alone
    if support_check and statistics is None:
        statistics = _mismatch.default_statistics(mechanism, x0, x1, key, score=score)
        score_only = statistics.size == 1
    kept = [] if score_only else None   # then the threshold test's scores are the statistic
    if test is None:
        select_fraction = check_open_unit("select_fraction", select_fraction)
        n_select, n_eval = _split(trials, select_fraction)
        test = _choose(game, n_select, n_eval, delta, 1 - confidence, support, progress, kept)
    else:
        check_choice("orientation", test.orientation, _bounds.ORIENTATIONS)
        test = Test(float(np.float32(test.threshold)), test.orientation)
        n_select, n_eval = 0, trials
    above0, above1 = _count(game, np.asarray([test.threshold], np.float32), n_eval, n_select, progress, kept)
    result = _bounds.evaluate_test(test, int(above0[0]), int(above1[0]), n_eval=n_eval, n_select=n_select,
                                   delta=delta, confidence=confidence, support=support)
    fraction = select_fraction if n_select else 0.5
    if support_check and math.floor(trials * fraction) >= 2 and trials - math.floor(trials * fraction) >= 1:
        if kept is not None and sum(s.x0.size for s in kept) == trials:
            # a scalar release scored by itself: the threshold test's own scores, every trial in order
            v0, v1 = (np.concatenate([np.asarray(s[w], np.float32) for s in kept]) for w in (0, 1))
            mismatch = _mismatch.support_mismatch_from_values(
                v0, v1, names=statistics.names, ordered=statistics.ordered, delta=delta,
                confidence=confidence, select_fraction=fraction)
        else:
            mismatch = _mismatch.support_mismatch_test(
                mechanism, x0, x1, key=key, trials=trials, statistics=statistics, score=score, delta=delta,
                confidence=confidence, select_fraction=fraction, chunk_size=chunk_size, progress=progress,
                game=game if score_only else None)
        result = dataclasses.replace(result, support_mismatch=mismatch)
    return result


def _count(game: _game.Game, thresholds: np.ndarray, trials: int, start: int, progress, kept=None) -> tuple:
    """Counts above ``thresholds``: from host-side scores for up to :data:`PILOT_TRIALS` trials
    (the kernel the selection compiled; appended to ``kept`` when given), else in the kernel."""
    if trials > PILOT_TRIALS:
        return game.count_above(thresholds, trials=trials, start=start, progress=progress)
    s = _no_nan(game.scores(trials=trials, start=start, progress=progress))
    if kept is not None:
        kept.append(s)
    return tuple(trials - np.searchsorted(np.sort(v), thresholds, side="right") for v in s)


def _no_nan(scores: _game.Scores) -> _game.Scores:
    for which, v in enumerate(scores):
        nans = int(np.isnan(v).sum())
        if nans:
            raise LdpsimError(f"{nans} of {v.size} scores under x{which} are NaN: the mechanism or score is broken")
    return scores


def _choose(game: _game.Game, n_select, n_eval, delta, alpha, support, progress, kept=None) -> Test:
    pilot = min(n_select, PILOT_TRIALS)
    s = _no_nan(game.scores(trials=pilot, progress=progress))
    if kept is not None and pilot == n_select:
        kept.append(s)
    pooled = np.concatenate([s.x0, s.x1])
    if n_select == pilot:
        thresholds = _bounds.candidate_thresholds(pooled, support)
        above0, above1 = (n_select - np.searchsorted(np.sort(v), thresholds, side="right") for v in s)
    else:  # a uniform grid over three times the pilot's range (O(1) per score; a grid point
        # within a step of a support end stands in for it)
        lo, hi = float(np.min(pooled)), float(np.max(pooled))
        width = max(hi - lo, 0.05 * max(abs(lo), abs(hi)), 1e-3)  # a step of >= 64 float32 ulps
        step = 3 * width / (SELECTION_GRID - 1)
        thresholds, above0, above1 = game.count_above_grid(lo - width, step, SELECTION_GRID,
                                                           trials=n_select, progress=progress)
    return _bounds.select_test(thresholds, above0, above1, n_select=n_select, n_eval=n_eval,
                               delta=delta, alpha=alpha, support=support)


@dataclasses.dataclass(frozen=True)
class AuditReport:
    """An audit of one of ldpsim's randomizers against its claimed guarantee.

    Attributes:
        mechanism: ``"gaussian"``, ``"laplace"``, ``"rr"`` or a report randomizer
            (:data:`REPORT_RANDOMIZERS`).
        epsilon, delta: the claim (``delta`` None for the pure-DP mechanisms).
        neighbours: the relation of the pair (``"replace"`` or ``"add-remove"``).
        clip: the clip bound C (None for RR).
        sensitivity: distance between the pair's clipped inputs (None for RR).
        scale: σ (Gaussian), b (Laplace), the keep probability (RR), None for the
            report randomizers (their parameters are not one scale).
        path: ``"sufficient-statistic"`` (1-D game) or ``"full-mechanism"``.
        dim: the full path's dimension (None on the 1-D path).
        sampler: the noise sampler audited.
        method: how the scale was calibrated.
        description: the test, in words.
        seconds: wall time of the audit.
        result: the :class:`AuditResult`.
    """

    mechanism: str
    epsilon: float
    delta: float | None
    neighbours: str
    clip: float | None
    sensitivity: float | None
    scale: float | None
    path: str
    dim: int | None
    sampler: str
    method: str
    description: str
    seconds: float
    result: AuditResult

    @property
    def refuted_by(self) -> tuple[str, ...]:
        """The tests whose bound exceeds the claimed ε: ``"threshold"`` (``result.epsilon_lb``)
        and ``"support-mismatch"`` (``result.support_mismatch.epsilon_lb``)."""
        out = []
        if self.result.epsilon_lb > self.epsilon:
            out.append("threshold")
        sm = self.result.support_mismatch
        if sm is not None and sm.refutes(self.epsilon):
            out.append("support-mismatch")
        return tuple(out)

    @property
    def refuted(self) -> bool:
        """Whether the audit refutes the claim: either test's ε lower bound exceeds it. Each
        bound holds with probability ``≥ confidence``, so a correct claim is refuted with
        probability at most ``2·(1 − confidence)``."""
        return bool(self.refuted_by)

    def to_dict(self) -> dict[str, Any]:
        """A flat JSON-ready dict: the claim, the path, and the result's fields (the
        support-mismatch test nested under ``"support_mismatch"``)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "result"}
        result = self.result.to_dict()
        result.pop("delta")  # the claim's delta above (None for pure DP; the bound used 0)
        out.update(result)
        out["refuted"] = self.refuted
        out["refuted_by"] = list(self.refuted_by)
        return out


def audit_randomizer(
    mechanism: str = "gaussian",
    *,
    epsilon: float,
    delta: float | None = None,
    clip: float = 1.0,
    neighbours: str = "replace",
    trials: int = 1_000_000,
    confidence: float = 0.95,
    dim: int | PyTree | None = None,
    seed: int = 0,
    k: int = 2,
    method: str | None = None,
    impl: str | None = None,
    use_support: bool = True,
    select_fraction: float = 0.5,
    chunk_size: int | None = None,
    progress: Callable[[int], Any] | None = None,
    support_check: bool = True,
) -> AuditReport:
    """Audit ldpsim's Gaussian or Laplace randomizer, or k-ary randomized response, at its claim.

    Gaussian and Laplace are calibrated by :func:`ldpsim.privacy.calibrate`
    (``method``, ``neighbours``) and played on the worst-case pair along one axis
    (:func:`worst_case_pair`): ``±C·e₁`` (replace-one) or ``0, C·e₁`` (add/remove). Without
    ``dim`` the 1-D sufficient statistic is played (:func:`scalar_gaussian`,
    :func:`scalar_laplace`); with ``dim`` the real randomizer on a ``dim``-coordinate update
    (or a pytree template), scored by its projection on ``x1 − x0``. RR is played on values
    0 and 1 of ``k`` with :func:`rr_score`. With ``use_support`` the sampler's tail bound
    (:data:`ldpsim._src.privacy.noise.sampling.TAIL_BOUND`, ``LAPLACE_TAIL_BOUNDS``) is used as the
    support of the scores: outputs beyond it are impossible, not merely unobserved. With
    ``support_check`` (default) the releases also go through the support-mismatch test
    (``result.support_mismatch``; :func:`audit`), and :attr:`AuditReport.refuted` counts it.

    Raises:
        LdpsimError: bad arguments (the message names them).
    """
    from ldpsim._src.privacy.noise import calibration, sampling

    check_choice("mechanism", mechanism, MECHANISMS)
    if mechanism in _mechanisms.REPORT_RANDOMIZERS:   # PrivUnit2/G, Duchi et al., SignDS
        return audit_report_randomizer(
            mechanism, epsilon=epsilon, delta=delta, clip=clip, neighbours=neighbours, trials=trials,
            confidence=confidence, dim=dim, seed=seed, method=method, impl=impl,
            select_fraction=select_fraction, chunk_size=chunk_size, progress=progress,
            support_check=support_check)
    epsilon = check_positive("epsilon", epsilon)
    trials = check_positive_int("trials", trials)
    confidence = check_open_unit("confidence", confidence)
    key = jax.random.key(int(seed))
    start = time.perf_counter()
    if mechanism == "rr":
        if delta not in (None, 0, 0.0):
            raise LdpsimError(f"randomized response is pure epsilon-DP: delta must be omitted, got {delta!r}")
        if dim is not None:
            raise LdpsimError("dim applies to the gaussian and laplace randomizers, not to rr")
        if neighbours != "replace":
            raise LdpsimError("randomized response has one relation: any two values (neighbours 'replace')")
        if method not in (None, "rr"):
            raise LdpsimError(f"method {method!r} does not apply to rr")
        mech = _mechanisms.rr_mechanism(k=k, epsilon=epsilon)
        result = audit(mech, np.int32(0), np.int32(1), key=key, trials=trials, delta=0.0,
                       score=_mechanisms.rr_score(0, 1), confidence=confidence,
                       select_fraction=select_fraction, chunk_size=chunk_size, progress=progress,
                       support_check=support_check)
        keep = 1.0 / (1.0 + (k - 1) * math.exp(-epsilon))
        return AuditReport("rr", epsilon, None, "replace", None, None, keep, "sufficient-statistic", None,
                           f"k_randomized_response (k = {k})", "rr",
                           _describe("the output's class (v1 / other / v0)", None, result),
                           time.perf_counter() - start, result)
    if mechanism == "gaussian" and delta is None:
        delta = 1e-5
    cal = calibration.calibrate(mechanism, epsilon=epsilon, delta=delta, clip=clip, method=method,
                                neighbours=neighbours)
    scale = cal.sigma if mechanism == "gaussian" else cal.scale
    if mechanism == "gaussian":
        impl = sampling.resolve_impl(key, impl)
        bound, sampler = sampling.TAIL_BOUND[impl], f"ldpsim.privacy.gaussian_noise (impl={impl!r})"
    else:
        if impl is not None:
            raise LdpsimError("impl applies to the gaussian mechanism only")
        lap = sampling.resolve_laplace_impl(jax.random.key(0), None)
        bound = sampling.LAPLACE_TAIL_BOUNDS[lap]
        sampler = ("Threefry 64-bit Laplace (float32)" if lap == "bits"
                   else "jax.random.laplace (float32)")
    lo = -cal.clip if neighbours == "replace" else 0.0
    support = None
    if dim is None:
        if mechanism == "gaussian":
            mech = _mechanisms.scalar_gaussian(clip=cal.clip, stddev=scale, impl=impl)
        else:
            mech = _mechanisms.scalar_laplace(clip=cal.clip, scale=scale)
        x0, x1 = np.float32(lo), np.float32(cal.clip)
        score, path, ndim, what = _mechanisms.identity_score, "sufficient-statistic", None, "the 1-D output"
    else:
        if mechanism == "gaussian":
            if impl != sampling.resolve_impl(key, None):
                raise LdpsimError("the full-mechanism path (dim, --dim) runs the randomizer's default sampler; drop the sampler choice (impl, --sampler) or dim")
            mech = _mechanisms.gaussian_mechanism(clip=cal.clip, stddev=scale)
        else:
            mech = _mechanisms.laplace_mechanism(clip=cal.clip, scale=scale)
        x0, x1 = _mechanisms.worst_case_pair(dim, clip=cal.clip, neighbours=neighbours)
        ndim = sum(int(np.size(v)) for v in jax.tree_util.tree_leaves(x1))
        score, path, what = _mechanisms.projection_score(x0, x1), "full-mechanism", "the projection on x1 - x0"
    if use_support:
        support = (_mechanisms.scalar_support(lo, scale, bound), _mechanisms.scalar_support(cal.clip, scale, bound))
    result = audit(mech, x0, x1, key=key, trials=trials, delta=delta or 0.0, score=score, confidence=confidence,
                   select_fraction=select_fraction, support=support, chunk_size=chunk_size, progress=progress,
                   support_check=support_check)
    return AuditReport(mechanism, epsilon, cal.delta, neighbours, cal.clip, cal.sensitivity, scale, path, ndim,
                       sampler, cal.method, _describe(what, bound if use_support else None, result),
                       time.perf_counter() - start, result)


def _describe(what: str, bound: float | None, result: AuditResult) -> str:
    t = result.test
    rule = f"guess x1 iff score {'>' if t.orientation == 'above' else '<='} {t.threshold:.6g}"
    text = (f"threshold test on {what} ({rule}), chosen on {result.select_trials} separate trials per input; "
            f"Clopper-Pearson upper bounds on FPR and FNR at {1 - (1 - result.confidence) / 2:.4g} each "
            f"over {result.eval_trials} trials per input")
    if result.select_trials == 0:
        text = text.replace(f"chosen on {result.select_trials} separate trials per input", "fixed in advance")
    if bound is not None:
        text += f"; support |noise| <= {bound:.6g} x scale (the sampler's tail bound)"
        if result.zero_by_support:
            text += f": {result.zero_by_support.upper()} = 0 exactly"
    return text


def audit_report_randomizer(
    name: str, *, epsilon: float, delta: float | None = None, clip: float = 1.0,
    neighbours: str = "replace", trials: int = 1_000_000, confidence: float = 0.95,
    dim: int | None = None, seed: int = 0, method: str | None = None, impl: str | None = None,
    select_fraction: float = 0.5, chunk_size: int | None = None, progress=None,
    support_check: bool = True,
):
    """:func:`ldpsim.audit.audit_randomizer` for PrivUnit2, PrivUnitG, Duchi et al. and SignDS:
    the real randomizer (full-mechanism path) on :func:`report_game`'s pair, pure ε (δ = 0).

    Raises:
        LdpsimError: δ given (these are pure ε-LDP), a relation other than replace-one,
            ``method``/``impl`` (not applicable), or bad arguments of the randomizer.
    """
    if delta not in (None, 0, 0.0):
        raise LdpsimError(f"{name} is pure epsilon-LDP: delta must be omitted, got {delta!r}")
    if neighbours != "replace":
        raise LdpsimError(f"{name} is epsilon-LDP for any two inputs: neighbours must be 'replace', "
                          f"got {neighbours!r}")
    if method is not None or impl is not None:
        raise LdpsimError(f"method and impl do not apply to {name}")
    epsilon = check_positive("epsilon", epsilon)
    dim = _mechanisms.REPORT_DIM[name] if dim is None else check_positive_int("dim", dim)
    start = time.perf_counter()
    mech, x0, x1, score, local, what = _mechanisms.report_game(name, epsilon=epsilon, dim=dim, clip=float(clip))
    if chunk_size is None:   # the work per trial scales with the input's size, not the report's
        chunk_size = int(max(1, min(check_positive_int("trials", trials), _game.CHUNK_ELEMENTS // (4 * dim))))
    statistics = None
    if support_check:
        statistics = _mismatch.default_statistics(
            mech, x0, x1, jax.random.key(0), score=score,
            extra=_mechanisms.report_statistics(name, epsilon=epsilon, dim=dim, clip=float(clip)))
    result = audit(mech, x0, x1, key=jax.random.key(int(seed)), trials=trials, delta=0.0,
                   score=score, confidence=confidence, select_fraction=select_fraction,
                   chunk_size=chunk_size, progress=progress, support_check=support_check,
                   statistics=statistics)
    gap = float(jnp.linalg.norm(x1 - x0))
    return AuditReport(
        name, local.epsilon, None, "replace",
        float(clip) if registry.randomizer(name).uses_clip else None, gap,
        None, "full-mechanism", dim, f"ldpsim.mechanism.make({name!r}, ...).privatize",
        name, _describe(what, None, result), time.perf_counter() - start, result)
