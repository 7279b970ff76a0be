"""A run's privacy mode resolved on the host: calibration, results columns and accounting.

:mod:`ldpsim._src.fl.modes` holds what the round kernel reads (one
:class:`~ldpsim.modes.RoundMechanism` per privacy mode and its traced knobs); this
module turns a :class:`~ldpsim.fl.SimulationConfig` into one of them. Nothing
here is traced: it runs once per run, before the first round.

:func:`plan` builds a configuration's :class:`PrivacyPlan`: the mode's kernel object
(composed with the noise-mode shortcut and the clients' local training), its calibrated
knobs, its run-level and per-round results columns, and its accountant (user-level ε spent
after k participations or t rounds, limited by the noise sampler's δ floor, with a
:class:`~ldpsim.privacy.SamplerTailWarning` where that floor breaks the
claimed δ; the clients' sample-level ε under DP-SGD).

The formulas it calls, usable on their own: :func:`noise_scale` (σ or b of an
additive-noise local randomizer), :func:`local_randomizer` (the calibrated randomizer of an
``"ldp"`` run), :func:`mindspore_sigma_per_clip` (σ/C of MindSpore's ``DP_ENCRYPT``) and
:func:`central_epsilon` (user-level ε of central and distributed DP-FedAvg, by RDP).
"""

from __future__ import annotations

import functools
import math
import os
import sys
import warnings
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from ldpsim._src._checks import LdpsimError, check_open_unit, check_positive
from ldpsim._src.fl import modes
from ldpsim._src.fl.dpsgd import client as dp_client
from ldpsim._src.fl.config import SimulationConfig
from ldpsim._src.privacy import registry
from ldpsim._src.privacy.accountants import accounting
from ldpsim._src.privacy.noise import calibration, realised, sampling
from ldpsim._src.privacy.randomizers import mechanism as mechanism_lib
from ldpsim._src.privacy.server import adaptive

PyTree = Any

__all__ = ["PrivacyPlan", "central_epsilon", "mindspore_sigma_per_clip", "noise_scale", "plan"]


def _f32(v: Any) -> jax.Array:
    return jnp.asarray(v, jnp.float32)


class PrivacyPlan(NamedTuple):
    """A run's privacy mode resolved on the host: the kernel object, its traced knobs, and
    what the reports need (every formula in one function, called by simulate and sweeps).

    Attributes:
        mechanism: the :class:`~ldpsim.modes.RoundMechanism`.
        hyper: its traced knobs (``RoundHyper.privacy``).
        columns: the run-level results columns of the mode: mechanism, neighbours,
            epsilon, delta, clip, sensitivity, sigma (in this order), noise_multiplier,
            and sampler_delta_floor.
        row_columns: ``metrics_row -> dict``: per-round columns that depend on the mode
            (the clip bound, and σ/sensitivity where they follow an adaptive bound).
        epsilon_of: ``(max_participation, rounds, min_noise_fraction) -> ε`` spent so far
            (``min_noise_fraction``: the smallest realised / target noise variance of the
            rounds so far, 1 outside distributed DP), for what the float32 samplers
            deliver (:mod:`ldpsim._src.privacy.noise.realised`); ``inf`` where their bounded tails
            cannot deliver the claimed δ (with a :class:`~ldpsim.privacy.SamplerTailWarning`).
        delta_of: same arguments ``-> δ`` at which ``epsilon_of`` holds: the run's δ, or for a
            pure ideal randomizer the δ its realisation adds (0 only when proven pure).
        client_hyper: the clients' trainer's traced knobs (``RoundHyper.client``).
        client_epsilon_of: ``max_participation -> ε``: sample-level ε of the worst-case
            client's local training (from the trainer's ``dp_event``); NaN where local
            training releases nothing private.
    """

    mechanism: modes.RoundMechanism
    hyper: PyTree
    columns: dict
    row_columns: Callable[[dict], dict]
    epsilon_of: Callable[[int, int, float], float]
    client_hyper: PyTree = ()
    client_epsilon_of: Callable[[int], float] = lambda k: math.nan
    delta_of: Callable[[int, int, float], float] = lambda k, t, frac: math.nan


def noise_scale(config: SimulationConfig, dim: int | None = None) -> tuple[float, float, str]:
    """``(sigma, sensitivity, mechanism)`` of an additive-noise ``"ldp"`` run via
    :func:`ldpsim.privacy.calibrate`: ``sigma`` is the Gaussian std or the
    Laplace scale; ε = inf gives ``(0, nan, "none")``.

    Raises:
        LdpsimError: ``config.mechanism`` is a report randomizer (it has no noise scale:
            :func:`local_randomizer` calibrates it).
    """
    if not config.private:
        return 0.0, math.nan, _CLIP_ONLY
    spec = registry.randomizer(config.mechanism)
    if not spec.additive:
        raise LdpsimError(f"noise_scale: {config.mechanism!r} adds no noise of a scale; "
                          f"calibrate it with local_randomizer(config, dim)")
    cal = calibration.calibrate(config.mechanism, **randomizer_options(spec, config, dim))
    scale = cal.sigma if cal.sigma is not None else cal.scale
    return float(scale), float(cal.sensitivity), config.mechanism


def mindspore_sigma_per_clip(dp_eps: float = 50.0, dp_delta: float = 0.01, *,
                             neighbours: str = "add-remove", method: str = "analytic") -> float:
    """σ_t / C_t of MindSpore's ``DP_ENCRYPT``, validated as MindSpore does.

    Ranges (``yaml_config.cc``, ``InitEncryptConfig``): dp_eps > 0, 0 < dp_delta < 1.
    ``neighbours="add-remove"`` (MindSpore: sensitivity C_t) or ``"replace"`` (2C_t, strict
    replace-one LDP); ``method`` ``"analytic"`` (exact Balle–Wang) or
    ``"mindspore"`` (the Java numerics).
    """
    eps = check_positive("dp_eps", dp_eps)
    delta = check_open_unit("dp_delta", dp_delta)
    return float(calibration.calibrate("gaussian", epsilon=eps, delta=delta, clip=1.0,
                                       neighbours=neighbours, method=method).sigma)


def central_epsilon(*, noise_multiplier: float, clients_per_round: int, population: int,
                    rounds: int, delta: float, sampling: str = "uniform") -> float:
    """User-level ε of central/distributed DP-FedAvg after ``rounds`` rounds, q = m/N.

    :func:`ldpsim.privacy.dpfedavg_epsilon` (RDP): the engine's ``"uniform"``
    cohort (m of N without replacement) is accounted as ``"fixed"`` — replace one user,
    under which the clipped sum moves by up to 2C, so the accounted multiplier is z/2 —
    and ``"poisson"`` as Poisson (add/remove one user, the sum moves by at most C,
    multiplier z). With adaptive clipping the value noise z_Δ and the clipped-count noise
    σ_b compose to a Gaussian of multiplier z under add/remove (the count's shifted bits
    ±½ have sensitivity ½) and z/2 under replace-one (a bit flips from −½ to ½:
    sensitivity 1, as the value's 2C), so passing the overall z is exact in both cases.

    Distributed DP: pass the smallest effective multiplier ``z·√(survivors/m)`` seen so
    far (the dropout shortfall). Assumption: the protected client is honest, so its own
    noise share counts towards its protection (the standard distributed-DP analysis,
    Kairouz, Liu & Steinke 2021). If the adversary may know the target's own share (for
    instance, the target's device is compromised), the conservative multiplier is
    ``z·√((survivors − 1)/m)``; ldpsim does not report that variant.
    """
    if rounds == 0:
        return 0.0
    if noise_multiplier <= 0:
        return math.inf
    return accounting.dpfedavg_epsilon(
        noise_multiplier=noise_multiplier, clients_per_round=clients_per_round,
        population=population, rounds=rounds, delta=delta,
        sampling="poisson" if sampling == "poisson" else "fixed", method="rdp").epsilon


def _sum_sensitivity(config: SimulationConfig) -> float:
    """Sensitivity of the clipped sum per unit of C in the central/distributed modes: 2
    for the engine's fixed-size ("uniform") cohorts (replace one user), 1 for Poisson
    (add or remove one user); see :func:`ldpsim._src.privacy.accountants.accounting.sensitivity_factor`."""
    return accounting.sensitivity_factor("poisson" if config.sampling == "poisson" else "fixed")


#: The clip-only randomizer of a run without noise (ε = inf).
_CLIP_ONLY = "none"


def _sampler_impl() -> str:
    return sampling.resolve_impl(jax.random.key(0), None)


def _outside_ldpsim() -> int:
    """``stacklevel`` for ``warnings.warn`` called right here that names the first caller
    outside the ldpsim package (the user's line, whichever entry point it called)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(root):
        frame, level = frame.f_back, level + 1
    return level


def _laplace_impl() -> str:
    return "bits" if _sampler_impl() != "jax" else "jax"


def _tail_warning(message: str) -> None:
    warnings.warn(message, calibration.SamplerTailWarning, stacklevel=_outside_ldpsim())


def _realised_gaussian(impl: str, shift: float, dim: int | None, delta: float
                       ) -> Callable[[int], float]:
    """``k -> ε`` at ``delta`` of ``k`` realised Gaussian releases (bound (1) of
    :mod:`ldpsim._src.privacy.noise.realised`; inf where the sampler's tails exhaust δ, with one
    :class:`~ldpsim.privacy.SamplerTailWarning`)."""
    d = realised.check_dim(dim)
    warned = []

    @functools.lru_cache(maxsize=256)
    def eps(k: int) -> float:
        out = realised.realised_epsilon("gaussian", impl, shift, d, delta, k)
        if math.isinf(out) and not warned:
            warned.append(k)
            r = realised.additive_realisation("gaussian", impl, shift, d)
            _tail_warning(
                f"the Gaussian sampler {impl!r} reaches only {r.model.bound:.4g} sigma: after "
                f"{k} release(s) worst-case neighbours are told apart with probability up to "
                f"{realised.compose_delta(0.0, r.tail_mass, r.tail_scale, k):.3g} >= "
                f"delta={delta:g}, so epsilon_spent is reported as inf; use a smaller epsilon "
                f"per round or a larger delta" + ("" if impl == "tail" else
                                                   ", or the default 'tail' sampler")
                + " (docs/privacy_sharp_edges.md)")
        return out

    return eps


def _coupled_epsilon(ideal_at: Callable[[float], float], delta: float, tv: float) -> float:
    """ε at ``delta`` of a realisation within total variation ``tv`` of an ideal transcript
    whose ε at δ' is ``ideal_at(δ')``: ``P'(S) ≤ e^ε P'_neighbour(S) + δ_ideal + (1 + e^ε)·tv``.
    A share ``f`` of δ is given to the coupling (the first of 1e-3, 0.1, 0.5 that fits)."""
    if tv <= 0:
        return ideal_at(delta)
    for f in (1e-12, 1e-6, 1e-3, 0.1, 0.5):
        eps = ideal_at(delta * (1.0 - f))
        if (1.0 + math.exp(min(eps, 700.0))) * tv <= f * delta:
            return eps
    return math.inf


def _bounded_gaussian_budget(delta: float, shift: float, dim: int | None, draws: int) -> float:
    """The δ left for the ideal accountant after ``draws`` releases of d-coordinate Gaussian
    noise from the default sampler whose mixture components (subsampling, cohorts) differ
    by at most ``shift`` noise stds: bound (1) of :mod:`ldpsim._src.privacy.noise.realised` (on
    the event that every release lies where all components reach, the realised densities
    are the ideal ones over Z₁^d; off it, at most η per release). ``≤ 0``: none."""
    r = realised.additive_realisation("gaussian", _sampler_impl(), shift,
                                      realised.check_dim(dim))
    return realised.delta_budget(delta, r.tail_mass, r.tail_scale, draws)


def _gaussian_draw_tail(dim: int | None) -> float:
    """Probability that one d-coordinate draw of the default Gaussian sampler differs from
    the ideal draw it idealises (the coupling's total variation per draw)."""
    model = realised.sampler_model(_sampler_impl(), "gaussian")
    return realised.check_dim(dim) * model.coordinate_tail_mass


def _accountant(event: Any, delta: float) -> Callable[[int], float]:
    """``k -> ε`` at ``delta`` of ``k`` releases of ``event``
    (:func:`ldpsim._src.fl.dpsgd.client.event_epsilon`: exact for Gaussian and Laplace),
    cached by ``k``."""
    return functools.lru_cache(maxsize=256)(
        lambda k: dp_client.event_epsilon(event, k, delta))


def randomizer_options(spec: registry.RandomizerSpec, config: SimulationConfig,
                       dim: int | None) -> dict:
    """The keyword arguments of the randomizer's ``make``, read from ``config`` and the
    model's dimension ``dim`` by its spec: ε, the clip bound (if it clips), δ and the
    calibration method (if it reads them), the relation (if it has a choice), the
    sampler its guarantee is computed for (additive noise), and its own options."""
    kwargs: dict[str, Any] = {"epsilon": config.epsilon, "dim": dim}
    if spec.uses_clip:
        kwargs["clip"] = config.clip
    if spec.uses("delta"):
        kwargs["delta"] = config.delta
    if spec.uses("calibration"):
        kwargs["method"] = config.calibration
    if len(spec.neighbours) > 1:
        kwargs["neighbours"] = config.neighbours
    if spec.sampler == "normal":
        kwargs["sampler"] = _sampler_impl()
    elif spec.sampler == "laplace":
        kwargs["sampler"] = _laplace_impl()
    kwargs.update({o.field: getattr(config, o.field) for o in spec.options})
    return kwargs


#: Pure ε-DP claims no δ; a sampler floor above this is still reported (ε ≳ 3.6 for
#: float32 Laplace): any positive floor breaks pure DP.
_PURE_DP_WARN_DELTA = 1e-6


def local_randomizer(config: SimulationConfig,
                     dim: int | None = None) -> mechanism_lib.LocalMechanism:
    """The :class:`~ldpsim.mechanism.LocalMechanism` an ``"ldp"`` run's
    clients apply (:func:`~ldpsim.mechanism.clip_only` for ε = inf), calibrated
    from ``config`` (``--epsilon``; PrivUnit's ``norm_epsilon``; SignDS's ``sign_*``
    settings) and, for a report randomizer, the model's dimension ``dim``.

    Raises:
        LdpsimError: a report randomizer without ``dim``, or the factory's own errors
            (ε out of the mechanism's range, a dimension too small), naming the value.
    """
    if not config.private:
        return mechanism_lib.clip_only(clip=config.clip, neighbours=config.neighbours)
    spec = registry.randomizer(config.mechanism)
    if not spec.additive and dim is None:
        raise LdpsimError(f"mechanism {config.mechanism!r} is calibrated for the model's "
                          f"dimension: pass dim (plan(..., dim=d))")
    with warnings.catch_warnings():   # noise_scale, called first, has issued them
        warnings.simplefilter("ignore")
        return mechanism_lib.make(config.mechanism, **randomizer_options(spec, config, dim))


def _plan_report(config: SimulationConfig, dim: int | None) -> PrivacyPlan:
    """``"ldp"`` with a report randomizer (PrivUnit2, PrivUnitG, Duchi et al., SignDS):
    pure ε-LDP per round for any two inputs (replace-one), so δ is not used; ε_spent is
    the pure composition ``k·ε`` of the worst-case client's ``k`` participations, from the
    randomizer's dp event (binary randomized response at ε, which dominates every ε-DP
    pair) composed at δ = 0."""
    lm = local_randomizer(config, dim)
    acc = _accountant(lm.dp_event(lm.params), 0.0)
    # The column is the setting (the ε the randomizer is calibrated for, so that runs group
    # by it); what the float32 parameters deliver (lm.epsilon, e.g. 16.0000009 for
    # PrivUnit2 at 16) is what epsilon_spent composes, from lm.dp_event.
    columns = {"mechanism": lm.name, "neighbours": lm.neighbours, "epsilon": config.epsilon,
               "delta": math.nan, "clip": config.clip, "sensitivity": math.nan,
               # root mean per-coordinate variance of one decoded report at ‖x‖ = C
               "sigma": float(lm.noise_std(lm.params)),
               "noise_multiplier": math.nan, "sampler_delta_floor": math.nan}
    # The registered functions, unless the randomizer's options chose others (ProjUnit's
    # decoded-law simulation): then the made mechanism's own.
    entry = mechanism_lib.entry(lm.name)
    same = lm.privatize is entry.privatize and lm.decode is entry.decode
    return PrivacyPlan(modes.local(lm.name if same else lm), modes.ReportHyper(lm.params),
                       columns, lambda row: {"clip_bound": config.clip},
                       lambda k, t, frac: acc(k),
                       delta_of=lambda k, t, frac: realised.compose_delta(
                           0.0, lm.tail_mass, lm.tail_scale, k))


def _plan_user(config: SimulationConfig, lm: mechanism_lib.LocalMechanism) -> PrivacyPlan:
    """``"ldp"`` with a user's own :class:`~ldpsim.mechanism.LocalMechanism` (registered or
    not): its calibrated params are the round's knobs (:class:`~ldpsim.modes.ReportHyper`),
    its functions the clients' release and exact variance, its guarantee the columns.
    ε spent after the worst-case client's ``k`` releases: its ``dp_event`` composed ``k``
    times at δ = ``lm.delta`` (0 for a pure mechanism, ``config.delta`` otherwise); δ spent
    adds the realisation's tails (``tail_mass``, ``tail_scale``, bound (1) of
    :mod:`ldpsim._src.privacy.noise.realised`)."""
    if lm.decode is None or lm.variance is None:
        raise LdpsimError(f"the local mechanism {lm.name!r} needs decode and variance to run in "
                          f"the engine (the round aggregates decoded releases and reports "
                          f"their exact variance)")
    pure = not lm.delta
    delta = 0.0 if pure else config.delta
    acc = _accountant(lm.dp_event(lm.params), delta)
    clip = float(getattr(lm.params, "clip", config.clip))
    columns = {"mechanism": lm.name, "neighbours": lm.neighbours, "epsilon": lm.epsilon,
               "delta": math.nan if pure else lm.delta, "clip": clip, "sensitivity": math.nan,
               "sigma": float(lm.noise_std(lm.params)),
               "noise_multiplier": math.nan, "sampler_delta_floor": math.nan}
    return PrivacyPlan(modes.local(lm), modes.ReportHyper(lm.params), columns,
                       lambda row: {"clip_bound": clip},
                       lambda k, t, frac: acc(k),
                       delta_of=lambda k, t, frac: realised.compose_delta(
                           delta if k else 0.0, lm.tail_mass, lm.tail_scale, k))


def _plan_ldp(config: SimulationConfig, population: int, dim: int | None = None) -> PrivacyPlan:
    spec = registry.randomizer(config.mechanism)
    if config.private and not spec.additive:
        return _plan_report(config, dim)
    sigma, sens, randomizer = noise_scale(config, dim)
    lm = local_randomizer(config, dim)
    mech = modes.local(lm.name)
    floor = math.nan
    delta_of: Callable[[int, int, float], float] = lambda k, t, frac: math.nan  # noqa: E731
    if not config.private:
        epsilon_of = lambda k, t, frac: math.nan  # noqa: E731  (no privacy: no ε column)
    elif spec.guarantee == "approximate":   # Gaussian: (ε, δ) of the realised sampler
        floor = calibration.sampler_delta_floor(sigma, sens, impl=_sampler_impl())
        acc = _realised_gaussian(_sampler_impl(), sens / sigma, dim, config.delta)
        epsilon_of = lambda k, t, frac: acc(k)  # noqa: E731
        delta_of = lambda k, t, frac: config.delta if k else 0.0  # noqa: E731
    else:   # Laplace: pure ε per release ideally, the realised δ composes by bound (1)
        floor = calibration.sampler_delta_floor(sigma, sens, mechanism="laplace")
        per = sens / sigma
        epsilon_of = lambda k, t, frac: k * per  # noqa: E731
        delta_of = lambda k, t, frac: realised.compose_delta(  # noqa: E731
            0.0, lm.tail_mass, lm.tail_scale, k)
        if lm.delta > _PURE_DP_WARN_DELTA:
            _tail_warning(f"float32 Laplace noise is bounded: at epsilon {config.epsilon:g} "
                          f"the release is (epsilon, {lm.delta:.3g})-DP, not pure "
                          f"(column delta_spent)")
    pure = config.private and spec.guarantee == "pure"
    columns = {"mechanism": randomizer, "neighbours": config.neighbours,
               "epsilon": config.epsilon, "delta": math.nan if pure else config.delta,
               "clip": config.clip, "sensitivity": sens, "sigma": sigma,
               "noise_multiplier": math.nan, "sampler_delta_floor": floor}
    return PrivacyPlan(mech, modes.LocalHyper(_f32(sigma)), columns,
                       lambda row: {"clip_bound": config.clip}, epsilon_of, delta_of=delta_of)


def _plan_mindspore(config: SimulationConfig, population: int, dim: int | None = None
                    ) -> PrivacyPlan:
    mech = modes.mindspore(config.mindspore_clip_rule == "running-min")
    a = mindspore_sigma_per_clip(config.dp_eps, config.dp_delta,
                                 neighbours=config.mindspore_neighbours)
    unit = 2.0 if config.mindspore_neighbours == "replace" else 1.0
    floor = calibration.sampler_delta_floor(a, unit, impl=_sampler_impl())
    columns = {"mechanism": "gaussian", "neighbours": config.mindspore_neighbours,
               "epsilon": config.dp_eps, "delta": config.dp_delta, "clip": math.nan,
               "sensitivity": math.nan, "sigma": math.nan, "noise_multiplier": math.nan,
               "sampler_delta_floor": floor}
    # Every round is (dp_eps, dp_delta)-DP whatever C_t (ideal): the accountant of N(0, a²)
    # with sensitivity `unit` per unit of C, here for the realised sampler.
    acc = _realised_gaussian(_sampler_impl(), unit / a, dim, config.dp_delta)
    epsilon_of = lambda k, t, frac: acc(k)  # noqa: E731

    def row_columns(row: dict) -> dict:
        c = row["clip_bound"]
        return {"sigma": a * c, "sensitivity": unit * c}

    return PrivacyPlan(mech, modes.MindSporeHyper(_f32(a), _f32(config.dp_norm_clip)), columns,
                       row_columns, epsilon_of,
                       delta_of=lambda k, t, frac: config.dp_delta if k else 0.0)


def _plan_sum(config: SimulationConfig, population: int, dim: int | None = None, *,
              distributed_mode: bool) -> PrivacyPlan:
    """central and distributed: user-level DP of the (noisy) sum, accounted by RDP."""
    m = config.clients_per_round
    z_value, count_std = config.noise_multiplier, 0.0
    if config.adaptive_clip:
        z_value, count_std = adaptive.adaptive_noise_split(
            config.noise_multiplier, m, config.clipped_count_stddev)
    sens = _sum_sensitivity(config)
    if distributed_mode:
        mech = modes.distributed(m)
        hyper = modes.DistributedHyper(_f32(z_value), _f32(config.dropout_rate))
        floor = math.nan   # the summed noise is not one draw of the sampler
    else:
        mech = modes.central(m, config.adaptive_clip)
        hyper = modes.CentralHyper(_f32(z_value), _f32(count_std),
                                   _f32(config.target_quantile), _f32(config.clip_learning_rate))
        floor = (calibration.sampler_delta_floor(z_value, sens, impl=_sampler_impl())
                 if z_value > 0 else math.nan)
    columns = {"mechanism": "gaussian",
               "neighbours": "add-remove" if config.sampling == "poisson" else "replace",
               "epsilon": math.nan, "delta": config.delta, "clip": config.clip,
               "sensitivity": math.nan, "sigma": math.nan,
               "noise_multiplier": config.noise_multiplier, "sampler_delta_floor": floor}
    cache: dict = {}
    warned: list = []
    # Central: a round's noise is one d-coordinate draw of the sampler (plus the adaptive
    # clip's count), bound (1) with the cohort's shift sens/z. Distributed: m shares whose
    # sum is not a restricted Gaussian: within total variation t·m·d·(mass never reached)
    # of the ideal transcript, composed by coupling (_coupled_epsilon).
    tv_round = config.clients_per_round * (_gaussian_draw_tail(dim) + (
        _gaussian_draw_tail(1) if config.adaptive_clip else 0.0))

    def ideal(k: int, t: int, frac: float) -> float:
        z = config.noise_multiplier * (math.sqrt(frac) if distributed_mode else 1.0)

        def at(delta: float) -> float:
            if (z, t, delta) not in cache:
                cache[(z, t, delta)] = central_epsilon(
                    noise_multiplier=z, clients_per_round=m, population=population, rounds=t,
                    delta=delta, sampling=config.sampling)
            return cache[(z, t, delta)]

        if t == 0 or z <= 0:
            return at(config.delta)
        if distributed_mode:
            out = _coupled_epsilon(at, config.delta, t * tv_round)
        else:
            draws = t * (2 if config.adaptive_clip else 1)
            budget = _bounded_gaussian_budget(config.delta, sens / z_value, dim, draws)
            out = at(budget) if budget > 0 else math.inf
        if math.isinf(out) and not warned and distributed_mode:
            warned.append(t)
            tv = t * tv_round
            _tail_warning(
                f"distributed noise is a sum of {m} shares of the Gaussian sampler "
                f"{_sampler_impl()!r} (bounded tails), accounted by coupling to the ideal "
                f"transcript: delta_ideal + (1 + e^epsilon) * TV with TV = {tv:.3g} after {t} "
                f"round(s); the ideal epsilon at delta={config.delta:g} is "
                f"{at(config.delta):.4g}, where e^epsilon * TV exceeds delta (this bound "
                f"holds only up to about epsilon = {math.log(config.delta / tv):.3g}), so "
                f"epsilon_spent is reported as inf (see docs/privacy_sharp_edges.md)")
        elif math.isinf(out) and not warned:
            warned.append(t)
            _tail_warning(
                f"the Gaussian sampler {_sampler_impl()!r} reaches only "
                f"{realised.sampler_model(_sampler_impl()).bound:.4g} sigma: after {t} "
                f"round(s) its bounded tails alone exhaust delta={config.delta:g} at noise "
                f"multiplier {z:g}, so epsilon_spent is reported as inf (see "
                f"docs/privacy_sharp_edges.md)")
        return out

    per_client = 1.0 / math.sqrt(m) if distributed_mode else 1.0

    def row_columns(row: dict) -> dict:
        c = row["clip_bound"]
        return {"sigma": z_value * c * per_client, "sensitivity": sens * c}

    return PrivacyPlan(mech, hyper, columns, row_columns, ideal,
                       delta_of=lambda k, t, frac: config.delta if t else 0.0)


_plan_central = functools.partial(_plan_sum, distributed_mode=False)
_plan_distributed = functools.partial(_plan_sum, distributed_mode=True)

#: The simulation shortcut of each noise mode (``"aggregate"``: :func:`~ldpsim.modes.aggregated`).
_NOISE_MODES: dict[str, Callable[[modes.RoundMechanism], modes.RoundMechanism]] = {
    "per-client": lambda mech: mech, "aggregate": modes.aggregated,
}


def _client_training(config: SimulationConfig) -> dp_client.ClientTraining:
    return (dp_client.dpsgd(config.client_dp_micro_batches) if config.client_dp
            else dp_client.PLAIN)


def plan(config: SimulationConfig, population: int, *,
         smallest_client: int = 1, dim: int | None = None,
         mechanism: Any = None) -> PrivacyPlan:
    """The :class:`PrivacyPlan` of ``config`` for a population of ``population`` clients
    (calibration, the mode's kernel object and knobs, its columns and its accountant),
    composed with the clients' local training (:func:`~ldpsim.modes.with_client_training`).

    ``smallest_client``: the fewest examples any client holds (> 0): the worst case of
    the clients' sample-level accounting (DP-SGD clients). ``dim``: the model's number of
    parameters d, needed by the report randomizers (PrivUnit2, PrivUnitG, Duchi et al.,
    SignDS are calibrated for d). ``mechanism``: a
    :class:`~ldpsim.mechanism.LocalMechanism`, or a function ``dim -> LocalMechanism``, that
    the clients apply instead of ``config.mechanism`` (it need not be registered; a local-DP
    ``config`` only: its ε and randomizer settings are the mechanism's own).
    """
    if mechanism is not None:
        if not registry.mode(config.privacy_mode).randomizers:
            raise LdpsimError(f"a local mechanism runs in privacy_mode="
                              f"{registry.MODES[0].name!r}; got {config.privacy_mode!r}")
        lm = mechanism if isinstance(mechanism, mechanism_lib.LocalMechanism) else mechanism(dim)
        base = _plan_user(config, lm)
    else:
        base = registry.resolve(registry.mode(config.privacy_mode).plan)(config, population, dim)
    mech = _NOISE_MODES[config.noise_mode](base.mechanism)
    training = _client_training(config)
    knobs = training.knobs(config.client_dp_clip, config.client_dp_noise_multiplier)
    client_epsilon_of: Callable[[int], float] = lambda k: math.nan  # noqa: E731
    cd_delta = math.nan   # the δ of client_dp_epsilon (none without DP-SGD clients)
    if training.dp_event is not None:  # noqa: SIM102
        steps = (config.local_epochs * -(-smallest_client // config.batch_size)
                 if config.local_epochs else config.local_steps)
        event = training.dp_event(
            config.client_dp_noise_multiplier, num_examples=smallest_client,
            batch_size=config.batch_size, local_steps=steps)
        # one d-coordinate noise draw per local step; replace-one example: shift 2/z
        shift = 2.0 / config.client_dp_noise_multiplier if config.client_dp_noise_multiplier \
            else math.inf
        cd_delta = (config.delta if config.client_dp_delta is None
                    else config.client_dp_delta)

        @functools.lru_cache(maxsize=256)
        def client_epsilon_of(k: int) -> float:
            if k == 0 or math.isinf(shift):
                return dp_client.event_epsilon(event, k, cd_delta)
            budget = _bounded_gaussian_budget(cd_delta, shift, dim, k * steps)
            return dp_client.event_epsilon(event, k, budget) if budget > 0 else math.inf
    mode_row_columns = base.row_columns

    def row_columns(row: dict) -> dict:   # the discrete mode's reference, NaN elsewhere
        return {"continuous_noise_std": math.nan, "noise_survivors": math.nan,
                "wrap_bound": math.nan, **mode_row_columns(row)}

    return base._replace(mechanism=modes.with_client_training(mech, training),
                         columns=dict(base.columns, client_dp_delta=cd_delta),
                         client_hyper=knobs, client_epsilon_of=client_epsilon_of,
                         row_columns=row_columns)


# ----------------------------------------------------------------------------- secure aggregation

#: Largest per-round probability that the b-bit sum wraps which a plan accepts (the wrap is
#: reported per round in ``wrapped_fraction``; a larger bound is an error: nothing wraps
#: silently).
SECAGG_WRAP_TARGET = 1e-6


def sampling_rate(config: SimulationConfig, population: int | None) -> float | None:
    """The rate q = m/N of the Poisson cohort sampling that a whole-run (``epsilon_scope="run"``)
    discrete plan is amplified by; ``None`` for a per-round plan (no amplification)."""
    if config.epsilon_scope != "run":
        return None
    if population is None:
        raise LdpsimError("epsilon_scope='run' is planned for the population: pass population")
    if config.sampling != "poisson":
        raise LdpsimError(
            "epsilon_scope='run' needs sampling='poisson': the whole-run noise is solved with "
            "the amplification of Poisson cohort sampling (Zhu & Wang 2019, Theorem 6); "
            "fixed-size cohorts (sampling='uniform') would need the without-replacement bound "
            "(Wang, Balle & Kasiviswanathan 2019), which ldpsim does not implement")
    return int(config.clients_per_round) / int(population)


def cohort_guarantee(config: SimulationConfig, population: int | None
                     ) -> tuple[int | None, float]:
    """``(n_low, δ')`` of a whole-run (``epsilon_scope="run"``) discrete plan: the cohort size
    whose noise the plan counts in every round, and the δ its noise is solved at; ``(None, δ)``
    for a per-round plan (fixed-size cohorts count ``clients_per_round``).

    A Poisson cohort falls short of its expected size m = ``clients_per_round`` about half the
    time, and the per-client noise of a short cohort adds to less than m clients' noise: solved
    for m, the run would spend more than its target. The noise is solved instead for the
    ``n_low`` that every round's cohort reaches except with a probability charged to δ
    (:func:`~ldpsim._src.privacy.discrete.accounting.cohort_floor`: a tenth of δ, so ``δ' =
    0.9 δ``). ``epsilon_spent`` then stays within the target unless a round's survivors fall
    below ``n_low`` (a rare cohort, or dropout), when it is accounted with the realised count.
    """
    from ldpsim._src.privacy.discrete import accounting as dacc

    q = sampling_rate(config, population)
    if q is None or not config.private:
        return None, float(config.delta)
    n_low, delta_tail = dacc.cohort_floor(int(population), int(config.clients_per_round),
                                          int(config.rounds), float(config.epsilon),
                                          float(config.delta))
    return min(n_low, int(config.clients_per_round)), float(config.delta) - delta_tail


def wrap_cohort(config: SimulationConfig, population: int | None) -> tuple[int, float]:
    """``(n, target)``: the number of reports a round's wrap bound counts and the bound it must
    meet so that a round wraps with probability ``≤ SECAGG_WRAP_TARGET``.

    Fixed-size cohorts sum ``clients_per_round`` reports: ``(m, SECAGG_WRAP_TARGET)``. A Poisson
    cohort's size is Binomial(population, m/population) and exceeds m about half the time; the
    bound counts the size ``n_high`` that a cohort exceeds with probability ``t ≤
    SECAGG_WRAP_TARGET/2`` (:func:`~ldpsim._src.privacy.discrete.accounting.cohort_ceiling`)
    and must meet ``SECAGG_WRAP_TARGET − t``.
    """
    from ldpsim._src.privacy.discrete import accounting as dacc

    m = int(config.clients_per_round)
    if config.sampling != "poisson":
        return m, SECAGG_WRAP_TARGET
    if population is None:
        raise LdpsimError("privacy_mode='discrete' with Poisson cohorts is planned for the "
                          "population (the cohort size varies with it): pass population")
    n_high, tail = dacc.cohort_ceiling(int(population), m, SECAGG_WRAP_TARGET / 2)
    return n_high, SECAGG_WRAP_TARGET - tail


def secagg_mechanism(config: SimulationConfig, dim: int, population: int | None = None) -> Any:
    """The :class:`~ldpsim._src.privacy.discrete.accounting.DiscreteMechanism` of a
    ``"discrete"`` run: clip C, ``bits`` b, ``clients_per_round`` m, the model's d, and

    * the granularity γ: ``config.granularity``, or (None) the finest γ at which a round's
      sum stays inside b bits with probability ``≥ 1 − SECAGG_WRAP_TARGET``
      (:func:`~ldpsim._src.privacy.discrete.accounting.bits_needed` at this one b), counting
      m reports for fixed-size cohorts and a Poisson cohort's variable size otherwise
      (:func:`wrap_cohort`);
    * the per-client integer noise (σ of the discrete Gaussian, or the Skellam variance) that
      makes one round ``(epsilon, delta)``-DP for one user of the sum, or, with
      ``epsilon_scope="run"``, the ``rounds``-fold composition of the round amplified by the
      Poisson cohort sampling at rate ``clients_per_round/population`` (Zhu & Wang 2019,
      Theorem 6), counting the noise of the cohort size every round reaches but with a
      probability charged to δ (:func:`cohort_guarantee`)
      (:func:`~ldpsim._src.privacy.discrete.accounting.solve_noise`); ε = inf: no
      noise (the mechanism then holds the smallest noise only to size the wrap bound).

    Neighbours: replace one user for the engine's fixed-size cohorts, add/remove under
    Poisson sampling (as central/distributed DP-FedAvg).

    Raises:
        LdpsimError: b too small for C, m and d at any γ (or at the given γ), a γ too fine
            for int32 rounding, or no noise reaching ε.
    """
    from ldpsim._src.privacy.discrete import accounting as dacc

    if dim is None:
        raise LdpsimError("privacy_mode='discrete' is planned for the model's dimension: pass "
                          "dim (plan(..., dim=d))")
    kind, bits, m = config.secagg_mechanism, int(config.bits), int(config.clients_per_round)
    neighbours = "add-remove" if config.sampling == "poisson" else "replace"
    common = dict(clients=m, dim=int(dim), clip=float(config.clip), bits=bits,
                  neighbours=neighbours)
    q = sampling_rate(config, population)
    floor, delta = cohort_guarantee(config, population)
    whole = (dict(rounds=int(config.rounds), sampling_rate=q, survivors=floor)
             if q is not None else {})
    scope = (f"over {config.rounds} rounds at sampling rate {q:.4g}" if q is not None
             else "per round")
    smallest = 0.5 if kind == "ddg" else 1e-6
    wrap_n, wrap_target = wrap_cohort(config, population)
    if config.private:
        if config.granularity is None:
            report = dacc.bits_needed(kind, epsilon=config.epsilon, delta=delta,
                                      wrap_target=wrap_target, bit_range=(bits,),
                                      wrap_clients=wrap_n,
                                      **{k: v for k, v in common.items() if k != "bits"},
                                      **whole)
            if not report.rows:
                cohort = (f"{m} clients" if wrap_n == m else
                          f"a Poisson cohort of {m} clients on average (up to {wrap_n})")
                raise LdpsimError(
                    f"bits = {bits} too small for privacy_mode='discrete' ({kind}): no "
                    f"granularity keeps the sum of {cohort} (clip {config.clip}, d = {dim}, "
                    f"epsilon {config.epsilon} {scope}) inside {bits} bits with probability "
                    f">= 1 - {SECAGG_WRAP_TARGET:g}; use more bits")
            gamma = report.rows[0].granularity
        else:
            gamma = float(config.granularity)
        try:
            mech = dacc.solve_noise(kind, epsilon=config.epsilon, delta=delta,
                                    granularity=gamma, **common, **whole)
        except LdpsimError as err:
            raise LdpsimError(f"granularity {gamma:g} cannot fit privacy_mode='discrete' "
                              f"({kind}, {bits} bits, clip {config.clip}): {err}; use a "
                              f"coarser granularity or leave it unset") from None
    else:   # no noise: the finest γ whose rounding-and-signal sum fits the bits
        def make(g):
            return dacc.DiscreteMechanism(kind, granularity=g, noise=smallest, **common)

        if config.granularity is not None:
            mech = make(float(config.granularity))
        else:
            hi = float(config.clip)
            lo = hi / 2.0**28
            if dacc.wrap_probability(make(hi), wrap_n) > wrap_target:
                mech = make(hi)   # check_wrap below names the problem
            else:
                for _ in range(60):
                    mid = math.sqrt(lo * hi)
                    ok = dacc.wrap_probability(make(mid), wrap_n) <= wrap_target
                    lo, hi = (lo, mid) if ok else (mid, hi)
                    if hi / lo < 1.001:
                        break
                mech = make(hi)
    dacc.check_wrap(mech, wrap_target, wrap_n)
    return mech


def _continuous_std(epsilon: float, delta: float, neighbours: str, clip: float,
                    rounds: int = 1, q: float | None = None) -> float:
    """The std on the sum of the continuous Gaussian with the discrete modes' (ε, δ) at the same
    rounds and sampling, by the same RDP bounds and conversion
    (:func:`~ldpsim._src.privacy.discrete.accounting.gaussian_central_variance`): the reference
    for their effective noise."""
    from ldpsim._src.privacy.discrete import accounting as dacc

    return math.sqrt(dacc.gaussian_central_variance(epsilon, delta, rounds, clip, neighbours, q))


def _plan_discrete(config: SimulationConfig, population: int, dim: int | None = None
                 ) -> PrivacyPlan:
    """Distributed discrete DP over secure aggregation (:func:`~ldpsim.modes.discrete`):
    user-level DP of the modular sum. ε spent after t rounds: the RDP of each round's sum
    (Kairouz, Liu & Steinke 2021, Proposition 14, for the discrete Gaussian; Agarwal, Kairouz
    & Liu 2021, Theorem 3.5, for Skellam) with the smallest realised survivor count of the
    rounds so far, composed over the t rounds
    (:func:`~ldpsim._src.privacy.discrete.accounting.discrete_epsilon`); no amplification by
    the cohort sampling (conservative), or, with ``epsilon_scope="run"``, each round's curve
    amplified by the Poisson cohort sampling at rate q = m/N (Zhu & Wang, ICML 2019, Theorem 6;
    the noise is then solved for the whole run's ε, :func:`secagg_mechanism`)."""
    from ldpsim._src.privacy.discrete import accounting as dacc

    mech = secagg_mechanism(config, dim, population)
    q = sampling_rate(config, population)
    floor, delta_solved = cohort_guarantee(config, population)
    # Both laws are drawn by the table sampler, within a proven total variation of the ideal
    # law that discrete_epsilon charges to δ: the ε printed covers the code that runs.
    m = int(config.clients_per_round)
    gamma = mech.granularity
    client_std = gamma * math.sqrt(mech.client_variance) if config.private else 0.0
    sens = (2.0 if mech.neighbours == "replace" else 1.0) * config.clip
    continuous = _continuous_std(
        config.epsilon, config.delta, mech.neighbours, config.clip,
        *((config.rounds, q) if q is not None else ())) if config.private else 0.0
    columns = {"mechanism": mech.mechanism, "neighbours": mech.neighbours,
               "epsilon": config.epsilon, "delta": config.delta, "clip": config.clip,
               "sensitivity": sens, "sigma": client_std,
               # the integer noise on the sum over C (rounding not included)
               "noise_multiplier": client_std * math.sqrt(m) / config.clip,
               "sampler_delta_floor": math.nan}
    wrap_n, wrap_target = wrap_cohort(config, population)
    wrap_bound = (SECAGG_WRAP_TARGET - wrap_target) + dacc.wrap_probability(mech, wrap_n)
    cache: dict = {}
    counted = m if floor is None else floor
    # a whole-run plan: the cohort-tail event costs (1 + e^eps)·eta of delta (cohort_guarantee)
    eta = (0.0 if floor is None else
           dacc.cohort_tail_eta(config.delta - delta_solved, config.epsilon))

    def epsilon_of(k: int, t: int, frac: float) -> float:
        if t == 0:
            return 0.0
        if not config.private:
            return math.inf
        survivors = max(1, min(counted, int(math.floor(frac * m + 1e-9))))
        if (t, survivors) not in cache:
            cache[(t, survivors)] = dacc.discrete_epsilon(mech, delta_solved, rounds=t,
                                                          survivors=survivors, sampling_rate=q)
        return cache[(t, survivors)]

    def delta_of(k: int, t: int, frac: float) -> float:
        if not t:
            return 0.0
        if floor is None:
            return config.delta
        eps = epsilon_of(k, t, frac)
        return min(1.0, delta_solved + (1.0 + math.exp(min(eps, 700.0))) * eta)

    def row_columns(row: dict) -> dict:
        return {"clip_bound": config.clip, "continuous_noise_std": continuous,
                "noise_survivors": counted if config.private else math.nan,
                "wrap_bound": wrap_bound}

    return PrivacyPlan(modes.discrete(mech, noise=config.private),
                       modes.DiscreteHyper(_f32(config.dropout_rate)), columns, row_columns,
                       epsilon_of, delta_of=delta_of)
