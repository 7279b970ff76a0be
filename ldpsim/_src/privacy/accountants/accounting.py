"""Host-side privacy accounting built on Google's ``dp_accounting`` (RDP and PLD).

Nothing here re-derives what ``dp_accounting`` computes: each guarantee is
written as a ``DpEvent`` and handed to ``dp_accounting.rdp.RdpAccountant`` (Rényi
DP with the improved RDP→(ε, δ) conversion of Canonne, Kamath & Steinke 2020)
or ``dp_accounting.pld.PLDAccountant`` (privacy-loss distributions, Koskela et
al. 2020; Doroshenko et al. 2022). These are scalar NumPy/SciPy computations;
they never run under ``jit``.

Three settings, each naming its unit of privacy and neighbouring relation in the
returned :class:`PrivacyReport`:

* **LDP per client** (:func:`ldp_round_epsilon`, :func:`ldp_epsilon`,
  :class:`LdpAccountant`). A client's randomizer releases its clipped update plus
  noise. The neighbouring relation is *local*: any two inputs of one client whose
  distance is at most ``sensitivity`` (``2C`` for replace-one, ``C`` for
  add/remove; see :func:`ldpsim.privacy.sensitivity`). A Gaussian
  with std ``sigma`` is then the Gaussian mechanism with noise multiplier
  ``z = sigma / sensitivity``; a Laplace with scale ``b`` has ``ε = Δ₁/b``. Over
  the ``k`` rounds a client takes part in, the guarantee composes: basic
  composition ``(kε₀, kδ₀)`` (Dwork & Roth 2014, Thm. 3.16), or RDP / PLD
  composition of ``k`` Gaussians (tighter), or the exact analytic value
  (``k`` Gaussians with multiplier ``z`` are one Gaussian with ``z/√k``; Balle &
  Wang 2018, Thm. 8 via :func:`ldpsim.privacy.analytic_gaussian_epsilon`).
* **DP-FedAvg, user-level central DP** (:func:`dpfedavg_epsilon`,
  :func:`dpfedavg_noise_multiplier`; McMahan et al. 2018, arXiv:1710.06963).
  ``m`` of ``N`` users per round, noise multiplier ``z`` relative to the per-user
  clip, ``T`` rounds. Poisson sampling (``q = m/N``) uses
  ``PoissonSampledDpEvent`` with add-or-remove-one-user neighbours (the clipped sum
  moves by at most ``C``: multiplier ``z``); fixed-size sampling uses
  ``SampledWithoutReplacementDpEvent`` with replace-one-user neighbours, under which
  the clipped sum moves by up to ``2C``, so the event's multiplier is ``z/2`` (RDP
  only: dp_accounting's PLD does not support it, except when every user takes part,
  where there is no amplification and the event is a plain Gaussian of ``z/2``).
* **DP-SGD, sample-level** (:func:`dpsgd_epsilon`, :func:`dpsgd_noise_multiplier`;
  Abadi et al. 2016, arXiv:1607.00133): the same maths with examples instead of
  users, ``q = batch/N``.

Reproduced (dp-accounting 0.6.0): ``q = 256/60000, z = 1.1,
14062 steps, δ = 1e-5`` gives RDP 2.5966 and PLD 2.3817; ``q = 0.01, z = 1,
T = 1000, δ = 1e-6`` gives RDP 2.4367 and PLD 2.1245.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from collections.abc import Callable
from typing import Any

import dp_accounting
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant
from dp_accounting.rdp import rdp_privacy_accountant as _rdp

from ldpsim._src.privacy.noise import realised
from ldpsim._src.privacy.noise.calibration import analytic_gaussian_epsilon
from ldpsim._src._checks import (
    LdpsimError,
    check_choice,
    check_nonnegative,
    check_open_unit,
    check_positive,
    check_positive_int,
)

METHODS = ("rdp", "pld")
LDP_METHODS = ("basic", "rdp", "pld", "analytic")
SAMPLINGS = ("poisson", "fixed")
LDP_MECHANISMS = ("gaussian", "laplace")

_ADD_REMOVE = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
_REPLACE = dp_accounting.NeighboringRelation.REPLACE_ONE


@dataclasses.dataclass(frozen=True)
class PrivacyReport:
    """An (ε, δ) guarantee with everything needed to read it.

    Attributes:
        epsilon: the ε of the guarantee (``inf`` if there is none).
        delta: the δ of the guarantee.
        method: ``"rdp"``, ``"pld"``, ``"basic"`` or ``"analytic"`` (how ε was obtained).
        neighbouring: the neighbouring relation in words, e.g. ``"add-or-remove one user"``.
        count: the number of compositions (rounds a client took part in, rounds, steps).
        details: the inputs (noise multiplier, sampling rate, ...), JSON-ready.
    """

    epsilon: float
    delta: float
    method: str
    neighbouring: str
    count: int
    details: dict[str, Any] = dataclasses.field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """Flat JSON-ready dict with keys ``epsilon``, ``delta``, ``method``, ``neighbouring``, ..."""
        out = {k: v for k, v in dataclasses.asdict(self).items() if k != "details"}
        out.update(self.details)
        return out


# --------------------------------------------------------------------------- helpers


def _check_method(method: str, allowed: tuple[str, ...] = METHODS) -> str:
    return check_choice("method", method, allowed)


def _check_count(name: str, value: Any) -> int:
    """A composition count: an integer >= 0 (0 means nothing released yet)."""
    msg = f"{name} must be an integer >= 0, got {value!r}"
    if isinstance(value, (bool, str)):
        raise LdpsimError(msg)
    try:
        out = int(value)
    except (TypeError, ValueError, OverflowError):
        raise LdpsimError(msg) from None
    if out != value or out < 0:
        raise LdpsimError(msg)
    return out


#: Default PLD discretization (dp_accounting's), and the most points a PLD may span.
_PLD_INTERVAL = 1e-4
_PLD_MAX_POINTS = 1e6


def _fresh_accountant(method: str, neighbours: str = "add-remove",
                      interval: float = _PLD_INTERVAL):
    relation = _REPLACE if neighbours == "replace" else _ADD_REMOVE
    if method == "rdp":
        return RdpAccountant(neighboring_relation=relation)
    return PLDAccountant(neighboring_relation=relation, value_discretization_interval=interval)


def _pld_interval(event, neighbours: str) -> float:
    """PLD discretization for ``event``: dp_accounting's 1e-4 unless the privacy loss spans
    more than :data:`_PLD_MAX_POINTS` such steps (tiny noise, ε₀ in the hundreds or more),
    where a coarser grid keeps memory bounded. The PLD is discretized pessimistically, so a
    coarser grid can only raise the reported ε (by at most one interval per composition),
    never lower it.
    """
    rdp = _fresh_accountant("rdp", neighbours)
    if not rdp.supports(event):
        return _PLD_INTERVAL
    rdp.compose(event)
    # The (ε, δ = 1e-12) of one event bounds the privacy loss where the PLD keeps its mass.
    scale = float(rdp.get_epsilon(1e-12))
    if not math.isfinite(scale):
        return _PLD_INTERVAL
    return max(_PLD_INTERVAL, 10.0 * scale / _PLD_MAX_POINTS)


#: Coarsest PLD grid used; beyond it (ε₀ ≳ 10⁴ per event) the RDP bound is reported.
_PLD_MAX_INTERVAL = 0.05


class PldRangeWarning(UserWarning):
    """PLD accounting was out of range (ε in the thousands or more); the RDP bound is used."""


def randomized_response_epsilon(event: dp_accounting.RandomizedResponseDpEvent, count: int,
                                delta: float) -> float:
    """ε at ``delta`` of ``count`` releases of a randomized-response event (replace-one).

    The event of k-RR and, at ε₀, of every pure ε₀-LDP report randomizer (binary randomized
    response dominates any ε₀-DP pair: Kairouz, Oh & Viswanath, ICML 2015). Its PLD is
    self-composed here because dp_accounting 0.6's ``PLDAccountant.compose(event, k)`` of this
    event returns the ε of ONE release whatever ``k``; the result is capped by basic
    composition ``count·ε₀`` (both are upper bounds).
    """
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    count = int(count)
    if count == 0:
        return 0.0
    p, k = float(event.noise_parameter), int(event.num_buckets)
    eps0 = math.inf if p == 0 else math.log1p(k * (1.0 - p) / p)
    one = pld_lib.from_randomized_response(
        noise_parameter=p, num_buckets=k, value_discretization_interval=_PLD_INTERVAL,
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    composed = one if count == 1 else one.self_compose(count)
    return float(min(composed.get_epsilon_for_delta(delta), count * eps0))


def _epsilon_of(event, count: int, delta: float, method: str, neighbours: str = "add-remove") -> float:
    """ε at ``delta`` of ``event`` composed ``count`` times, by dp_accounting."""
    return _epsilon_and_method(event, count, delta, method, neighbours)[0]


def _epsilon_and_method(event, count: int, delta: float, method: str,
                        neighbours: str = "add-remove") -> tuple[float, str]:
    """``(ε, method used)``: as :func:`_epsilon_of`; the method is ``"rdp"`` where PLD was
    out of range (:class:`PldRangeWarning`)."""
    if count == 0:
        return 0.0, method
    interval = _pld_interval(event, neighbours) if method == "pld" else _PLD_INTERVAL
    if interval > _PLD_MAX_INTERVAL:
        warnings.warn(f"{type(event).__name__}: the privacy loss is too large for PLD "
                      "accounting (epsilon per event in the thousands); reporting the RDP "
                      "bound, which is never smaller", PldRangeWarning, stacklevel=3)
        method, interval = "rdp", _PLD_INTERVAL
    accountant = _fresh_accountant(method, neighbours, interval)
    if not accountant.supports(event):
        raise LdpsimError(
            f"method={method!r} does not support {type(event).__name__} with {neighbours} "
            "neighbours in dp_accounting; use method='rdp'"
        )
    accountant.compose(event, count)
    return float(accountant.get_epsilon(delta)), method


def _calibrate(make_event: Callable[[float], Any], target_epsilon: float, delta: float,
               method: str, neighbours: str) -> float:
    """Smallest noise multiplier whose ε at ``delta`` is ≤ ``target_epsilon`` (dp_accounting).

    RDP: ``calibrate_dp_mechanism`` searches its own bracket from [1e-3, 1]. PLD:
    the RDP answer is an upper end (PLD ε ≤ RDP ε), and the lower end is found by
    halving it; this keeps PLD away from tiny multipliers, whose discretized
    privacy-loss distributions need unbounded memory.
    """

    def calibrate(method: str, bracket) -> float:
        return float(dp_accounting.calibrate_dp_mechanism(
            lambda: _fresh_accountant(method, neighbours), make_event, target_epsilon, delta,
            bracket_interval=bracket))

    try:
        z_rdp = calibrate("rdp", dp_accounting.LowerEndpointAndGuess(1e-3, 1.0))
    except dp_accounting.mechanism_calibration.NoBracketIntervalFoundError:
        raise LdpsimError(f"no noise multiplier reaches target_epsilon={target_epsilon!r} at "
                          f"delta={delta!r}") from None
    except ValueError as err:  # brentq could not bracket: even z = 1e-3 meets the target
        raise LdpsimError(f"cannot calibrate a noise multiplier for target_epsilon="
                          f"{target_epsilon!r}: {err}") from None
    if method == "rdp":
        return z_rdp
    lower = z_rdp
    while lower >= 0.05 and _epsilon_of(make_event(lower), 1, delta, "pld",
                                        neighbours) <= target_epsilon:
        lower /= 2
    if lower < 0.05:
        raise LdpsimError(f"target_epsilon={target_epsilon!r} needs a noise multiplier "
                          "below 0.05, out of the range of the PLD accountant; use method='rdp'")
    return calibrate("pld", dp_accounting.ExplicitBracketInterval(lower, z_rdp))


# --------------------------------------------------------------------------- LDP per client


def _ldp_event_and_eps0(mechanism: str, sigma, scale, sensitivity, delta):
    check_choice("mechanism", mechanism, LDP_MECHANISMS)
    sensitivity = check_positive("sensitivity", sensitivity)
    if mechanism == "gaussian":
        if sigma is None or scale is not None:
            raise LdpsimError("mechanism='gaussian' needs sigma (and no scale)")
        sigma = check_positive("sigma", sigma)
        if delta is None:
            raise LdpsimError("delta is required for mechanism='gaussian' (a value in (0, 1))")
        delta = check_open_unit("delta", delta)
        z = sigma / sensitivity
        return dp_accounting.GaussianDpEvent(z), {"sigma": sigma, "noise_multiplier": z}, delta
    if scale is None or sigma is not None:
        raise LdpsimError("mechanism='laplace' needs scale (and no sigma)")
    scale = check_positive("scale", scale)
    delta = 0.0 if delta is None else check_nonnegative("delta", delta)
    if delta >= 1:
        raise LdpsimError(f"delta must be in [0, 1), got {delta!r}")
    b = scale / sensitivity
    return dp_accounting.LaplaceDpEvent(b), {"scale": scale, "noise_multiplier": b}, delta


def mechanism_epsilon(mechanism: Any, count: int, delta: float) -> float:
    """ε at ``delta`` of ``count`` releases of a :class:`~ldpsim.privacy.LocalMechanism`, for
    what its float32 realisation delivers: its ideal ``dp_event`` composed ``count`` times at
    the δ that bound (1) leaves, ``(δ − (1 − (1 − η)^k))/s^k`` (``tail_mass`` η,
    ``tail_scale`` s); ``inf`` where nothing is left. Pass
    ``accountant=lambda k: mechanism_epsilon(mech, k, delta)`` to
    :class:`~ldpsim.privacy.PrivacyLedger` to track a mechanism's realised budget.
    """
    k = _check_count("count", count)
    delta = check_open_unit("delta", delta)
    if k == 0:
        return 0.0
    budget = realised.delta_budget(delta, mechanism.tail_mass, mechanism.tail_scale, k)
    if not budget > 0:
        return math.inf
    event = mechanism.dp_event(mechanism.params)
    if isinstance(event, dp_accounting.NonPrivateDpEvent):
        return math.inf
    if isinstance(event, dp_accounting.RandomizedResponseDpEvent):
        return randomized_response_epsilon(event, k, budget)
    if isinstance(event, dp_accounting.GaussianDpEvent):
        return analytic_gaussian_epsilon(event.noise_multiplier / math.sqrt(k), budget)
    if isinstance(event, dp_accounting.LaplaceDpEvent):
        return k / event.noise_multiplier
    return _epsilon_of(event, k, budget, "pld",
                       "replace" if mechanism.neighbours == "replace" else "add-remove")


def total_epsilon(per_round_epsilon: float, rounds: int, delta: float, *,
                  mechanism: str = "gaussian", neighbours: str = "replace",
                  calibration: str = "analytic", dim: int | None = None,
                  sampler: str | None = None, **options: Any) -> float:
    """The total ε a client has spent after taking part in ``rounds`` rounds of a local
    randomizer calibrated to ``per_round_epsilon`` per round, at the total ``delta`` (the
    ``epsilon_spent`` column of ``ldpsim run``/``sweep``).

    The randomizer is calibrated as the engine does (per-round (ε, δ) with the run's δ;
    :func:`ldpsim.privacy.calibrate` for the Gaussian, sensitivity from
    ``neighbours``) and its releases composed by :func:`mechanism_epsilon`: exactly for the
    Gaussian (``k`` releases of multiplier ``z`` are one of ``z/√k``; Balle & Wang 2018,
    Thm. 8), ``k·ε₀`` for pure-ε randomizers (Laplace; randomized response and the report
    randomizers by their PLD, capped by ``k·ε₀``), for what their float32 realisation
    delivers (bound (1) of :mod:`ldpsim._src.privacy.noise.realised`: ``inf`` where the sampler's
    bounded tails leave nothing of δ, docs/privacy_sharp_edges.md). The clip bound cancels
    (only σ/Δ matters), so it is not asked for.

    Args:
        per_round_epsilon: ε₀ > 0 of one release (``inf``: no privacy, returns inf for
            ``rounds > 0``).
        rounds: ``k ≥ 0`` participations.
        delta: δ in (0, 1): the per-round calibration's δ and the total δ (as the engine
            uses the run's δ for both).
        mechanism: a registered local randomizer (``gaussian``, ``laplace``, ``privunit2``,
            ``privunitg``, ``duchi``, ``signds``, ``rr``).
        neighbours: ``"replace"`` (default) or ``"add-remove"`` (additive mechanisms).
        calibration: the Gaussian calibration, ``"analytic"`` (default), ``"classic"`` or
            ``"mindspore"``.
        dim: the update's number of coordinates (needed by the vector report randomizers).
        sampler: the noise sampler (default ldpsim's).
        **options: further arguments of the randomizer's factory (``norm_epsilon``, ``k``).

    Example:
        >>> total_epsilon(10.0, rounds=20, delta=1e-5)   # doctest: +SKIP
        47.6...
    """
    import inspect

    from ldpsim._src.privacy.randomizers import mechanism as _mechanism

    k = _check_count("rounds", rounds)
    delta = check_open_unit("delta", delta)
    eps0 = check_positive("per_round_epsilon", per_round_epsilon, allow_inf=True)
    if k == 0:
        return 0.0
    if math.isinf(eps0):
        return math.inf
    entry = _mechanism.entry(mechanism)
    given = {"epsilon": eps0, "delta": delta, "clip": 1.0, "neighbours": neighbours,
             "method": calibration, "dim": dim, "sampler": sampler, **options}
    accepted = inspect.signature(entry.factory).parameters
    kwargs = {k_: v for k_, v in given.items() if k_ in accepted and (v is not None or k_ in options)}
    if "dim" in accepted and accepted["dim"].default is inspect.Parameter.empty and dim is None:
        raise LdpsimError(f"total_epsilon of mechanism={mechanism!r} needs dim= (the update's "
                          "number of coordinates)")
    return mechanism_epsilon(entry(**kwargs), k, delta)


def _ldp_neighbouring(sensitivity: float, neighbours: str | None = None) -> str:
    relation = {"replace": "replace-one, 2C", "add-remove": "add/remove, C"}.get(neighbours)
    return (f"local: any two inputs of one client at distance <= sensitivity={sensitivity:g}"
            + (f" ({relation})" if relation else ""))


def resolve_sensitivity(sensitivity: float | None = None, clip: float | None = None,
                        neighbours: str | None = None) -> tuple[float, str | None]:
    """``(Δ, neighbours)`` from the one vocabulary every ldpsim privacy function takes: the
    clip bound and the neighbouring relation (``clip=C, neighbours="replace"`` gives Δ = 2C,
    ``"add-remove"`` Δ = C; :func:`ldpsim.privacy.sensitivity`), or the sensitivity itself.

    Raises:
        LdpsimError: both or neither given, or ``neighbours`` with ``sensitivity``.
    """
    from ldpsim._src.privacy.noise.calibration import sensitivity as _sensitivity

    if clip is not None and sensitivity is not None:
        raise LdpsimError("give clip= (with neighbours=) or sensitivity=, not both "
                          "(sensitivity is 2*clip for neighbours='replace', clip for 'add-remove')")
    if clip is not None:
        neighbours = "replace" if neighbours is None else neighbours
        return _sensitivity(clip, neighbours), neighbours
    if sensitivity is None:
        raise LdpsimError("give clip= (and neighbours=, default 'replace') or sensitivity=")
    if neighbours is not None:
        raise LdpsimError("neighbours= goes with clip= (it turns the clip into the sensitivity); "
                          "with sensitivity= leave it out")
    return check_positive("sensitivity", sensitivity), None


def ldp_round_epsilon(
    mechanism: str = "gaussian",
    *,
    clip: float | None = None,
    neighbours: str | None = None,
    sensitivity: float | None = None,
    delta: float | None = None,
    sigma: float | None = None,
    scale: float | None = None,
    sampler: str | None = None,
    dim: int | None = None,
) -> PrivacyReport:
    """The per-round (ε₀, δ₀) of one local randomizer release, as the float32 noise that runs
    delivers it (``sampler="ideal"``: real-valued noise).

    Gaussian: the exact (tightest) ε of ``N(0, sigma²)`` noise on a query of L2
    sensitivity ``sensitivity`` at ``delta`` (Balle & Wang 2018, Thm. 8;
    :func:`ldpsim.privacy.analytic_gaussian_epsilon`, overflow-free). Laplace: ``ε₀ = sensitivity/scale``
    for L1 sensitivity (Dwork & Roth 2014, Thm. 3.6), ``δ₀ = 0``.

    Args:
        mechanism: ``"gaussian"`` or ``"laplace"``.
        clip: the clip bound C > 0 of the client update (as :func:`ldpsim.privacy.calibrate`
            and ``SimulationConfig`` take it); with ``neighbours``.
        neighbours: ``"replace"`` (Δ = 2C, default) or ``"add-remove"`` (Δ = C).
        sensitivity: Δ > 0 itself, instead of ``clip`` and ``neighbours``.
        delta: δ₀ in (0, 1) (Gaussian only; Laplace reports δ = 0).
        sigma: Gaussian noise std per coordinate.
        scale: Laplace scale b per coordinate.
        sampler: the noise sampler (default ldpsim's; ``"ideal"``: real-valued noise); its
            bounded tails add to δ (:mod:`ldpsim._src.privacy.noise.realised`): Laplace reports the
            δ₀ they add, Gaussian the ε₀ at ``delta`` they leave.
        dim: coordinates of the update (default: up to 10⁷).

    Returns:
        A :class:`PrivacyReport` with ``count = 1``.
    """
    sensitivity, neighbours = resolve_sensitivity(sensitivity, clip, neighbours)
    event, details, delta = _ldp_event_and_eps0(mechanism, sigma, scale, sensitivity, delta)
    sampler, d, extra = _realisation(mechanism, sampler, dim, event.noise_multiplier)
    if mechanism == "gaussian":
        eps = analytic_gaussian_epsilon(event.noise_multiplier, delta)
        if sampler != "ideal":
            eps = max(eps, realised.realised_epsilon("gaussian", sampler,
                                                     1.0 / event.noise_multiplier, d, delta))
        method = "analytic"
    else:
        eps, method = 1.0 / event.noise_multiplier, "laplace"
        if sampler != "ideal":
            delta = max(delta, realised.realised_delta("laplace", sampler, eps, d, eps))
    return PrivacyReport(eps, delta, method, _ldp_neighbouring(sensitivity, neighbours), 1,
                         {"mechanism": mechanism, "sensitivity": float(sensitivity), **details,
                          **extra})


def _realisation(mechanism: str, sampler: str | None, dim, multiplier: float):
    """``(sampler, d, info)``: the sampler the LDP accountants compute for and its facts."""
    if sampler == "ideal":
        return "ideal", None, {"sampler": "ideal"}
    sampler = realised.default_sampler(mechanism) if sampler is None else sampler
    check_choice("sampler", sampler, realised.SAMPLERS[mechanism] + ("ideal",))
    d = realised.check_dim(dim)
    r = realised.additive_realisation(mechanism, sampler, 1.0 / multiplier, d)
    return sampler, d, {"sampler": sampler, "dim": d, "tail_mass": r.tail_mass,
                        "tail_scale": r.tail_scale}


def ldp_epsilon(
    mechanism: str = "gaussian",
    *,
    clip: float | None = None,
    neighbours: str | None = None,
    sensitivity: float | None = None,
    rounds: int,
    delta: float | None = None,
    sigma: float | None = None,
    scale: float | None = None,
    method: str = "pld",
    sampler: str | None = None,
    dim: int | None = None,
) -> PrivacyReport:
    """The guarantee of one client over the ``rounds`` rounds it took part in (LDP), as the
    float32 noise that runs delivers it (``sampler="ideal"``: real-valued noise).

    The sampler's bounded tails enter by bound (1) of :mod:`ldpsim._src.privacy.noise.realised`:
    the ideal composition is evaluated at ``δ' = (δ − (1 − (1 − η)^k))/s^k`` (ε = inf when
    nothing is left).

    Composition methods:
        * ``"basic"``: basic composition of the per-round :func:`ldp_round_epsilon`:
          ``(k·ε₀, k·δ₀)`` (Dwork & Roth 2014, Thm. 3.16). **The reported δ is k·δ₀.**
        * ``"rdp"`` / ``"pld"``: dp_accounting composes ``k`` Gaussian (or Laplace)
          events with noise multiplier ``sigma/sensitivity`` (``scale/sensitivity``);
          ε is reported at the total ``delta``.
        * ``"analytic"`` (Gaussian only): exact; ``k`` Gaussians with multiplier
          ``z`` equal one with ``z/√k`` (their privacy-loss distributions compose
          exactly), evaluated by
          :func:`ldpsim.privacy.analytic_gaussian_epsilon`.

    Args:
        mechanism: ``"gaussian"`` or ``"laplace"``.
        clip: the clip bound C > 0 of one client update (L2 for Gaussian, L1 for Laplace);
            with ``neighbours``.
        neighbours: ``"replace"`` (Δ = 2C, default) or ``"add-remove"`` (Δ = C).
        sensitivity: Δ > 0 itself, instead of ``clip`` and ``neighbours``.
        rounds: ``k ≥ 0``, the number of rounds this client took part in.
        delta: δ in (0, 1): per round for ``"basic"``, total otherwise.
        sigma: Gaussian noise std per coordinate.
        scale: Laplace scale per coordinate.
        method: one of ``basic``, ``rdp``, ``pld`` (default), ``analytic``.
        sampler: the noise sampler (default ldpsim's; ``"ideal"`` for real-valued noise).
        dim: coordinates of the update (default: the guarantee holds up to 10⁷).

    Returns:
        A :class:`PrivacyReport`; ε = 0 when ``rounds == 0``.
    """
    method = _check_method(method, LDP_METHODS)
    k = _check_count("rounds", rounds)
    sensitivity, neighbours = resolve_sensitivity(sensitivity, clip, neighbours)
    event, details, delta = _ldp_event_and_eps0(mechanism, sigma, scale, sensitivity, delta)
    sampler, d, extra = _realisation(mechanism, sampler, dim, event.noise_multiplier)
    info = {"mechanism": mechanism, "sensitivity": float(sensitivity), **details, **extra}
    neighbouring = _ldp_neighbouring(sensitivity, neighbours)
    if method == "basic":
        per_round = ldp_round_epsilon(mechanism, sensitivity=sensitivity, delta=delta,
                                      sigma=sigma, scale=scale, sampler=sampler, dim=d)
        return PrivacyReport(k * per_round.epsilon, min(1.0, k * per_round.delta), method,
                             neighbouring, k, {**info, "epsilon_per_round": per_round.epsilon,
                                               "delta_per_round": per_round.delta})
    if method == "analytic" and mechanism != "gaussian":
        raise LdpsimError("method 'analytic' applies to the gaussian mechanism only")
    if mechanism == "laplace" and delta == 0.0:
        raise LdpsimError("rdp/pld composition of Laplace needs delta in (0, 1); "
                          "method 'basic' gives its pure ε-DP")
    budget = delta
    if sampler != "ideal" and k > 0:
        budget = realised.delta_budget(delta, extra["tail_mass"], extra["tail_scale"], k)
        info["ideal_delta_budget"] = max(budget, 0.0)   # 0: the tails spend all of δ (ε inf)
    if k > 0 and not budget > 0:
        eps = math.inf   # the sampler's tails alone exhaust δ
    elif method == "analytic":
        eps = 0.0 if k == 0 else analytic_gaussian_epsilon(
            event.noise_multiplier / math.sqrt(k), budget)
    else:
        eps, method = _epsilon_and_method(event, k, budget, method)
    return PrivacyReport(eps, delta, method, neighbouring, k, info)


class LdpAccountant:
    """Running LDP guarantee of one client (or of the worst-case client) in an FL loop.

    Call :meth:`step` each time the client takes part in a round (or pass the
    number of new participations); :meth:`epsilon` gives the composed ε at the
    fixed total ``delta`` (see :func:`ldp_epsilon`). Results are cached by round
    count, so reporting every round is cheap: the engine can track the maximum
    participation count over clients and report that client's ε.

    The words are :func:`ldp_epsilon`'s: ``clip`` with ``neighbours`` (or ``sensitivity``),
    ``sigma`` for the Gaussian, ``scale`` for the Laplace (``sigma=`` for a Laplace scale
    still works, with a :class:`DeprecationWarning`).

    Example:
        >>> acc = LdpAccountant(sigma=4.0, clip=1.0, neighbours="replace", delta=1e-5)
        >>> acc.step(); acc.step(2)
        >>> acc.rounds
        3
        >>> round(acc.epsilon(), 2)  # doctest: +SKIP
    """

    def __init__(self, sigma: float | None = None, sensitivity: float | None = None,
                 delta: float | None = None, *, clip: float | None = None,
                 neighbours: str | None = None, scale: float | None = None,
                 mechanism: str = "gaussian", method: str = "pld", sampler: str | None = None,
                 dim: int | None = None) -> None:
        if mechanism == "laplace" and sigma is not None and scale is None:
            warnings.warn("LdpAccountant(sigma=..., mechanism='laplace') is deprecated: pass the "
                          "Laplace scale as scale=", DeprecationWarning, stacklevel=2)
            sigma, scale = None, sigma
        kwargs = {"sigma": sigma, "scale": scale, "clip": clip, "neighbours": neighbours,
                  "sensitivity": sensitivity, "sampler": sampler, "dim": dim}
        # Validate everything once, eagerly.
        ldp_epsilon(mechanism, rounds=0, delta=delta, method=method, **kwargs)
        self._report = functools.lru_cache(maxsize=256)(
            lambda k: ldp_epsilon(mechanism, rounds=k, delta=delta, method=method, **kwargs))
        self.rounds = 0

    def step(self, rounds: int = 1) -> None:
        """Record ``rounds ≥ 0`` more participations."""
        self.rounds += _check_count("rounds", rounds)

    def report(self, rounds: int | None = None) -> PrivacyReport:
        """The :class:`PrivacyReport` after ``rounds`` participations (default: so far)."""
        return self._report(self.rounds if rounds is None else _check_count("rounds", rounds))

    def epsilon(self, rounds: int | None = None) -> float:
        """ε after ``rounds`` participations (default: the number recorded by :meth:`step`)."""
        return self.report(rounds).epsilon


# --------------------------------------------------------------------------- central DP


def _sampled_gaussian_event(z: float, sample_size: int, population: int, sampling: str):
    """The dp_accounting event of one round (or step) of the sampled Gaussian mechanism.

    ``z`` is the noise std on the clipped sum divided by the clip bound C, the convention
    of every public function here. The event's multiplier is relative to the sensitivity
    of the neighbouring relation it is accounted under:

    * Poisson (add-or-remove one unit): the sum moves by at most C, so the multiplier is
      ``z`` (``PoissonSampledDpEvent``, Mironov, Talwar & Zhang 2019).
    * Fixed-size sampling without replacement (replace one unit, the only relation under
      which the cohort size is public): the sum moves by up to ``2C`` (one clipped update
      swapped for another), so the multiplier is ``z/2``
      (``SampledWithoutReplacementDpEvent`` in dp_accounting's RDP accountant, Wang, Balle
      & Kasiviswanathan 2019, whose inner Gaussian is stated relative to the replace-one
      sensitivity). With every unit in every round (``sample_size == population``) there
      is no amplification: the event is the plain Gaussian of multiplier ``z/2``, which
      PLD also supports.
    """
    if sampling == "poisson":
        return dp_accounting.PoissonSampledDpEvent(
            sample_size / population, dp_accounting.GaussianDpEvent(z))
    gaussian = dp_accounting.GaussianDpEvent(z / 2.0)
    if sample_size == population:
        return gaussian
    return dp_accounting.SampledWithoutReplacementDpEvent(population, sample_size, gaussian)


def _sampled_relation(sampling: str, sample_size: int, population: int) -> str:
    """The dp_accounting relation under which :func:`_sampled_gaussian_event` is composed.

    The full-participation fixed case is a plain Gaussian whose multiplier already carries
    the replace-one sensitivity 2C, so it is composed as such (dp_accounting's PLD would
    double the sensitivity again under ``REPLACE_ONE``).
    """
    if sampling == "fixed" and sample_size != population:
        return "replace"
    return "add-remove"


def sensitivity_factor(sampling: str) -> float:
    """Sensitivity of the clipped sum in units of the clip bound C: 1 (Poisson, add/remove
    one unit) or 2 (fixed-size sampling, replace one unit)."""
    check_choice("sampling", sampling, SAMPLINGS)
    return 2.0 if sampling == "fixed" else 1.0


def _check_sampled(sample_name, sample_size, population_name, population, count_name, count,
                   delta, sampling, method):
    m = check_positive_int(sample_name, sample_size)
    n = check_positive_int(population_name, population)
    if m > n:
        raise LdpsimError(f"{sample_name} must be <= {population_name} ({n}), got {m}")
    k = _check_count(count_name, count)
    delta = check_open_unit("delta", delta)
    check_choice("sampling", sampling, SAMPLINGS)
    _check_method(method)
    if sampling == "fixed" and method == "pld" and m != n:
        raise LdpsimError("sampling='fixed' (sampling without replacement) is supported by "
                          "dp_accounting's RDP accountant only; use method='rdp' or "
                          "sampling='poisson'")
    return m, n, k, delta


def _sampled_report(unit, z, m, n, k, delta, sampling, method, names) -> PrivacyReport:
    event = _sampled_gaussian_event(z, m, n, sampling)
    eps, method = _epsilon_and_method(event, k, delta, method, _sampled_relation(sampling, m, n))
    factor = sensitivity_factor(sampling)
    relation = (f"replace one {unit}" if sampling == "fixed" else f"add-or-remove one {unit}")
    details = {"noise_multiplier": z, names[0]: m, names[1]: n, "sampling_probability": m / n,
               "sampling": sampling, "sensitivity": "2C" if factor == 2 else "C",
               "accounted_noise_multiplier": z / factor,
               "amplification": "none (every unit in every round)" if (
                   sampling == "fixed" and m == n) else sampling}
    return PrivacyReport(eps, delta, method, relation, k, details)


def dpfedavg_epsilon(
    *,
    noise_multiplier: float,
    clients_per_round: int,
    population: int,
    rounds: int,
    delta: float,
    sampling: str = "poisson",
    method: str = "rdp",
) -> PrivacyReport:
    """User-level ε of DP-FedAvg after ``rounds`` rounds (McMahan et al. 2018, §3).

    Each round the server sums the clipped updates of a sample of users (Poisson
    with ``q = clients_per_round/population``, or exactly ``clients_per_round``
    without replacement) and adds ``N(0, (z·C)²)``. The guarantee is that of the
    sampled Gaussian mechanism composed over ``rounds``, computed by dp_accounting
    (Mironov, Talwar & Zhang 2019 for RDP; Poisson ⇒ add-or-remove-one-user
    neighbours; fixed ⇒ replace-one-user, Wang, Balle & Kasiviswanathan 2019).

    Sensitivity: under Poisson sampling (add/remove one user) the clipped sum moves by
    at most C; under fixed-size sampling (replace one user) by up to 2C, so the
    accounted multiplier is ``z/2`` (details ``sensitivity`` and
    ``accounted_noise_multiplier`` of the report). With ``clients_per_round ==
    population`` and fixed sampling nothing is amplified: the report is that of ``T``
    Gaussians of multiplier ``z/2`` (e.g. z = 1, T = 1, δ = 1e-5: ε = 9.997 exactly by
    PLD, 10.73 by RDP).

    Args:
        noise_multiplier: z ≥ 0, noise std on the sum divided by the per-user clip C
            (z = 0 gives ε = inf).
        clients_per_round: m ≥ 1 (expected cohort for Poisson).
        population: N ≥ m.
        rounds: T ≥ 0.
        delta: δ in (0, 1).
        sampling: ``"poisson"`` (default) or ``"fixed"`` (RDP only, unless m = N).
        method: ``"rdp"`` (default) or ``"pld"``.
    """
    z = check_nonnegative("noise_multiplier", noise_multiplier)
    m, n, k, delta = _check_sampled("clients_per_round", clients_per_round, "population",
                                    population, "rounds", rounds, delta, sampling, method)
    return _sampled_report("user", z, m, n, k, delta, sampling, method,
                           ("clients_per_round", "population"))


def dpfedavg_noise_multiplier(
    *,
    target_epsilon: float,
    clients_per_round: int,
    population: int,
    rounds: int,
    delta: float,
    sampling: str = "poisson",
    method: str = "rdp",
) -> float:
    """The smallest z for which :func:`dpfedavg_epsilon` ≤ ``target_epsilon`` (to 1e-6).

    Uses ``dp_accounting.calibrate_dp_mechanism`` (Brent's method on ε(z) − target).
    """
    eps = check_positive("target_epsilon", target_epsilon)
    m, n, k, delta = _check_sampled("clients_per_round", clients_per_round, "population",
                                    population, "rounds", rounds, delta, sampling, method)
    check_positive_int("rounds", k)
    return _calibrate(
        lambda z: dp_accounting.SelfComposedDpEvent(_sampled_gaussian_event(z, m, n, sampling), k),
        eps, delta, method, _sampled_relation(sampling, m, n))


def dpsgd_epsilon(
    *,
    noise_multiplier: float,
    batch_size: int,
    num_examples: int,
    steps: int,
    delta: float,
    sampling: str = "poisson",
    method: str = "rdp",
) -> PrivacyReport:
    """Sample-level ε of DP-SGD after ``steps`` steps (Abadi et al. 2016).

    ``q = batch_size/num_examples``; the accounting is that of
    :func:`dpfedavg_epsilon` with examples in place of users (Poisson sampling ⇒
    add-or-remove-one-example neighbours, multiplier z; fixed-size batches ⇒
    replace-one-example neighbours, sensitivity 2C, multiplier z/2). ``noise_multiplier`` is the noise std
    on the *sum* of clipped per-example (or per-micro-batch) gradients divided by
    the clip bound. Example: ``q = 256/60000, z = 1.1, 14062 steps, δ = 1e-5``
    gives 2.5966 (RDP) and 2.3817 (PLD).

    The unit of clipping matters: with per-example clipping (or micro-batches of one
    example) adding or removing an example moves the clipped sum by at most C; with
    micro-batches of several examples one changed example moves its micro-batch's clipped
    gradient from g to g', up to 2C, so pass ``noise_multiplier / 2`` (as
    :mod:`ldpsim._src.fl.dpsgd.ledger` does).
    """
    z = check_nonnegative("noise_multiplier", noise_multiplier)
    m, n, k, delta = _check_sampled("batch_size", batch_size, "num_examples", num_examples,
                                    "steps", steps, delta, sampling, method)
    return _sampled_report("example", z, m, n, k, delta, sampling, method,
                           ("batch_size", "num_examples"))


def dpsgd_noise_multiplier(
    *,
    target_epsilon: float,
    batch_size: int,
    num_examples: int,
    steps: int,
    delta: float,
    sampling: str = "poisson",
    method: str = "rdp",
) -> float:
    """The smallest z for which :func:`dpsgd_epsilon` ≤ ``target_epsilon`` (to 1e-6)."""
    return dpfedavg_noise_multiplier(
        target_epsilon=target_epsilon, clients_per_round=batch_size, population=num_examples,
        rounds=steps, delta=delta, sampling=sampling, method=method)


class SampledGaussianAccountant:
    """Running ε of a sampled Gaussian mechanism (DP-FedAvg rounds or DP-SGD steps).

    RDP: the per-step RDP vector is computed once, and ε after ``k`` steps is the
    improved conversion of ``k·RDP`` (``dp_accounting.rdp.compute_epsilon``), so
    calling :meth:`epsilon` every round costs microseconds. PLD: the composed
    distribution is rebuilt by dp_accounting for each new count (cached).

    Args:
        noise_multiplier, sample_size, population, delta, sampling, method: as in
            :func:`dpfedavg_epsilon` (``sample_size`` = clients per round or batch).
        unit: ``"user"`` or ``"example"`` (used in :attr:`PrivacyReport.neighbouring`).
    """

    def __init__(self, noise_multiplier: float, sample_size: int, population: int, delta: float,
                 *, sampling: str = "poisson", method: str = "rdp", unit: str = "user") -> None:
        self._z = check_nonnegative("noise_multiplier", noise_multiplier)
        self._m, self._n, _, self._delta = _check_sampled(
            "sample_size", sample_size, "population", population, "steps", 0, delta, sampling,
            method)
        self._sampling, self._method = sampling, method
        self._unit = check_choice("unit", unit, ("user", "example"))
        self.steps = 0
        if method == "rdp":
            acc = _fresh_accountant("rdp", _sampled_relation(sampling, self._m, self._n))
            acc.compose(_sampled_gaussian_event(self._z, self._m, self._n, sampling))
            self._orders, self._rdp_step = acc.orders, acc.rdp
        self._cache: dict[int, float] = {0: 0.0}

    def step(self, count: int = 1) -> None:
        """Record ``count ≥ 0`` more rounds (or steps)."""
        self.steps += _check_count("count", count)

    def epsilon(self, steps: int | None = None) -> float:
        """ε at ``delta`` after ``steps`` (default: the number recorded by :meth:`step`)."""
        k = self.steps if steps is None else _check_count("steps", steps)
        if k not in self._cache:
            if self._method == "rdp":
                self._cache[k] = float(_rdp.compute_epsilon(self._orders, k * self._rdp_step,
                                                            self._delta)[0])
            else:
                self._cache[k] = self.report(k).epsilon
        return self._cache[k]

    def report(self, steps: int | None = None) -> PrivacyReport:
        """Full :class:`PrivacyReport` after ``steps`` (default: so far)."""
        k = self.steps if steps is None else _check_count("steps", steps)
        return _sampled_report(self._unit, self._z, self._m, self._n, k, self._delta,
                               self._sampling, self._method, ("sample_size", "population"))
