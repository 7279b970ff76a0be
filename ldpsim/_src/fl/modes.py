"""Where a round's noise goes: each privacy mode is ONE object of pure functions.

A :class:`RoundMechanism` tells the round kernel (:func:`ldpsim._src.fl.round.make_round_fn`)
everything that differs between the privacy modes, so the kernel never branches on a
mode's name: which local randomizer each client applies and with which clip bound and
noise scale, who is kept (dropout), what the server adds, how the sum is normalised, and
how an adaptive clip bound moves. Its traced knobs (a mode's ``hyper``: noise multiplier,
σ/C, dropout rate, …) are arguments of those functions, so changing them never
recompiles; its state (MindSpore's per-client C_k,t, the quantile-adaptive C) is part of
:class:`ldpsim._src.fl.round.ServerState`.

The modes (factories below; :func:`plan` builds the one a
:class:`~ldpsim._src.fl.config.SimulationConfig` asks for, with its host-side reporting and
accounting):

:func:`local` (``"ldp"``)
    Local DP, the default engine: each client clips to C (L2; L1 for Laplace) and applies
    a registered local randomizer (:mod:`ldpsim._src.privacy.mechanism`): additive noise
    (Gaussian, Laplace; knob :class:`LocalHyper`) or a report randomizer (PrivUnit2,
    PrivUnitG, Duchi et al., SignDS; knob :class:`ReportHyper`, its calibrated params),
    whose report the server decodes before aggregating.
:func:`mindspore` (``"mindspore"``)
    MindSpore Federated ``DP_ENCRYPT`` (ALGORITHMS §1): client k clips to its own
    adaptive bound C_k,t (:func:`ldpsim._src.privacy.adaptive.mindspore_clip`) and adds
    ``N(0, (a(ε,δ)·C_k,t)²)``; FedAvg mean weighted by n_k.
:func:`central` (``"central"``)
    DP-FedAvg (McMahan et al. 2018; TFF ``gaussian_fixed``/``gaussian_adaptive``):
    unweighted clipped sum + ONE server draw ``N(0, (z_Δ C)²)``, fixed denominator m;
    optionally the quantile-adaptive C (Andrew et al. 2021) with the count noise σ_b.
:func:`distributed` (``"distributed"``)
    Distributed DP (ALGORITHMS §3.4): each client adds ``N(0, (zC)²/m)``; clients drop
    out independently with probability ``dropout_rate`` and the realised noise shortfall
    is reported.
:func:`with_client_training` (``client_dp=True``)
    Any mode with DP-SGD clients (:func:`ldpsim._src.fl.dp_client.dpsgd`): the clients'
    local trainer, its traced knobs and its sample-level accounting event come from a
    :class:`~ldpsim._src.fl.dp_client.ClientTraining` object; the mode is unchanged.
:func:`aggregated` (``noise_mode="aggregate"``)
    A simulation shortcut for any mode whose clients add Gaussian noise: the clients only
    clip and the server draws the round's noise once,
    ``Σ_k w_k ξ_k ~ N(0, Σ_k w_k² σ_k² I)`` exactly in distribution
    (:func:`ldpsim._src.privacy.server_dp.aggregate_gaussian_noise`), O(d) instead of O(m·d).

Keys: client c in round t uses ``client_key(root, t, c)``; its dropout coin is
``fold_in`` of that key with a salt; the server's draws (central noise, aggregate noise,
clipped-count noise) use :func:`server_key`.
"""

from __future__ import annotations

import functools
import math
import os
import sys
import warnings
from typing import Any, Callable, NamedTuple

import dp_accounting
import jax
import jax.numpy as jnp

from ldpsim._src._checks import LdpsimError, check_open_unit, check_positive
from ldpsim._src.fl import dp_client
from ldpsim._src.fl.config import SimulationConfig
from ldpsim._src.privacy import accounting, adaptive, calibration, sampling, server_dp
from ldpsim._src.privacy import mechanism as mechanism_lib

PyTree = Any

__all__ = ["CentralHyper", "DistributedHyper", "LocalHyper", "MindSporeHyper",
           "NOISE_MODES", "PRIVACY_MODES", "PrivacyPlan", "ReportHyper", "RoundMechanism",
           "aggregated",
           "central", "central_epsilon", "distributed", "local", "mindspore",
           "mindspore_sigma_per_clip", "noise_scale", "plan", "server_key",
           "with_client_training"]

PRIVACY_MODES = ("ldp", "mindspore", "central", "distributed")
NOISE_MODES = ("per-client", "aggregate")
_SERVER_SALT = 0x73727672   # "srvr"
_DROPOUT_SALT = 0x64726F70  # "drop"


def _f32(v: Any) -> jax.Array:
    return jnp.asarray(v, jnp.float32)


def server_key(root_key: jax.Array, round_idx: jax.typing.ArrayLike) -> jax.Array:
    """The server's key of a round (its salt is never a round index, so no client collides)."""
    return jax.random.fold_in(jax.random.fold_in(root_key, _SERVER_SALT), round_idx)


# ----------------------------------------------------------------------------- traced knobs


class LocalHyper(NamedTuple):
    """``"ldp"``: the randomizer's noise scale (Gaussian σ, Laplace b; 0 = no noise)."""

    scale: jax.Array


class ReportHyper(NamedTuple):
    """``"ldp"`` with a report randomizer: its calibrated params (the mechanism's own pytree
    of float32 scalars, e.g. :class:`~ldpsim._src.privacy.privunit2.PrivUnit2Params`; its
    static fields, such as the dimension, are part of the compiled program)."""

    params: PyTree


class MindSporeHyper(NamedTuple):
    """``"mindspore"``: σ_t/C_t (= a(ε, δ) add/remove, 2a replace) and MindSpore's
    multiplier of ‖W_{t+1} − W_t‖ for the next bound."""

    sigma_per_clip: jax.Array
    dp_norm_clip: jax.Array


class CentralHyper(NamedTuple):
    """``"central"``: the value noise multiplier z (z_Δ with adaptive clipping), and the
    adaptive rule's clipped-count std σ_b, target quantile γ and learning rate η."""

    noise_multiplier: jax.Array
    count_stddev: jax.Array
    target_quantile: jax.Array
    clip_lr: jax.Array


class DistributedHyper(NamedTuple):
    """``"distributed"``: z of the noise on the sum, and the dropout probability."""

    noise_multiplier: jax.Array
    dropout_rate: jax.Array


# ----------------------------------------------------------------------------- the object


def _additive_params(clip: jax.Array, scale: jax.Array, phyper: PyTree) -> PyTree:
    return mechanism_lib.MechanismParams(clip, scale)


class RoundMechanism(NamedTuple):
    """Everything the round kernel needs to know about a privacy mode (pure functions).

    Build one with a factory (:func:`local`, :func:`mindspore`, :func:`central`,
    :func:`distributed`, :func:`aggregated`); factories are cached, so equal settings give
    the same object (it keys the engine's compile cache). ``phyper`` below is the mode's
    traced knobs (:class:`LocalHyper`, …), ``state`` its adaptive state.

    Attributes:
        name: the privacy mode (``"ldp"``, ``"mindspore"``, ``"central"``,
            ``"distributed"``), with ``"+aggregate"`` for the shortcut.
        randomizer: the local randomizer each client applies (a name in
            :data:`ldpsim._src.privacy.mechanism.REGISTRY`; ``"none"`` clips only).
        noise_std_factor: additive randomizers: per-coordinate std of a client's noise per
            unit of its scale (:func:`ldpsim._src.privacy.mechanism.noise_std_factor`); the
            round's noise variance on the sum is ``Σ_k w_k² (factor·scale_k)²`` unless
            ``client_noise_var`` is given (0 for report randomizers).
        weighted: FedAvg weights (the engine's ``weighting``) or one vote per client.
        fixed_denominator: divide the sum by this m (DP-FedAvg's f̃_f), else by Σw.
        per_client_clip: clients have their own bounds (the reported clip bound is
            then the mean over the included clients).
        init: ``(num_clients, clip) -> state`` (host side, once per run).
        round_clip: ``(state, clip, phyper) -> C`` of the round.
        client_scales: ``(state, ids, round_clip, phyper) -> (clip[k], scale[k])``.
        keep: ``(client_keys[k], phyper) -> bool[k]`` (dropout), or None (keep all).
        server_noise: ``(server_key, clean_sum, noise_var_sum, round_clip, phyper) ->
            (noise_sum, noise_var_sum)``, or None (the clients' noise is the noise).
        update: ``(state, server_key, params, new_params, ids, mask, unclipped_bits,
            phyper) -> (state, next_clip, unclipped_fraction)``, or None (fixed clip).
        noise_fraction: ``(survivors) -> realised / target noise variance on the sum``,
            or None (always 1).
        client: the clients' local training before the randomizer, a
            :class:`~ldpsim._src.fl.dp_client.ClientTraining` (ordinary training unless
            composed with DP-SGD clients by :func:`with_client_training`); its traced
            knobs are ``RoundHyper.client``.
        client_params: ``(clip[k], scale[k], phyper) -> params`` of the randomizer for one
            client (vmapped): ``MechanismParams(clip, scale)`` for additive noise (default),
            the calibrated params in :class:`ReportHyper` for a report randomizer.
        client_noise_var: ``(params, update) -> scalar``: the mean per-coordinate variance
            of the client's decoded release for its input
            (:func:`ldpsim._src.privacy.mechanism.mean_variance_fn`, exact and input
            dependent), or None: ``(noise_std_factor·scale)²``.
        client_mean: ``(params, update) -> E[decoded release]`` exactly, for a randomizer
            whose decoder is biased (SignDS: its bias enters the theory of the aggregate's
            error), or None (unbiased: the clipped update).
    """

    name: str
    randomizer: str
    noise_std_factor: float
    weighted: bool
    fixed_denominator: float | None
    per_client_clip: bool
    init: Callable[[int, float], PyTree]
    round_clip: Callable[[PyTree, jax.Array, PyTree], jax.Array]
    client_scales: Callable[..., tuple[jax.Array, jax.Array]]
    keep: Callable[[jax.Array, PyTree], jax.Array] | None = None
    server_noise: Callable[..., tuple[PyTree, jax.Array]] | None = None
    update: Callable[..., tuple[PyTree, jax.Array, jax.Array]] | None = None
    noise_fraction: Callable[[jax.Array], jax.Array] | None = None
    client: dp_client.ClientTraining = dp_client.PLAIN
    client_params: Callable[..., PyTree] = _additive_params
    client_noise_var: Callable[[PyTree, PyTree], jax.Array] | None = None
    client_mean: Callable[[PyTree, PyTree], PyTree] | None = None


def _no_state(num_clients: int, clip: float) -> tuple:
    return ()


def _fixed_clip(state: PyTree, clip: jax.Array, phyper: PyTree) -> jax.Array:
    return clip


def _full(ids: jax.Array, value: jax.Array) -> jax.Array:
    return jnp.full(ids.shape, value, jnp.float32)


def _report_params(clip, scale, phyper: ReportHyper) -> PyTree:
    return phyper.params


@functools.cache
def local(randomizer: str = "gaussian") -> RoundMechanism:
    """``"ldp"``: every client applies the local randomizer ``randomizer`` (a vector
    randomizer of :data:`ldpsim._src.privacy.mechanism.REGISTRY`): additive noise with the
    run's clip bound and :class:`LocalHyper` scale, or a report randomizer with the
    calibrated params of :class:`ReportHyper`, whose reports the server decodes.

    Raises:
        LdpsimError: an unknown name, or a randomizer of categories (``"rr"``).
    """
    entry = mechanism_lib.entry(randomizer)   # validates the name
    if entry.input != "vector":
        raise LdpsimError(f"the round privatizes model updates; {randomizer!r} privatizes "
                          f"categories (vector randomizers: {', '.join(mechanism_lib.VECTOR)})")

    def client_scales(state, ids, clip, phyper):
        scale = phyper.scale if entry.additive else 0.0
        return _full(ids, clip), _full(ids, scale)

    extra = {} if entry.additive else dict(
        client_params=_report_params,
        client_noise_var=mechanism_lib.mean_variance_fn(randomizer),
        client_mean=None if entry.unbiased else entry.mean)
    return RoundMechanism(name="ldp", randomizer=randomizer,
                          noise_std_factor=float(entry.noise_std_factor or 0.0),
                          weighted=True, fixed_denominator=None, per_client_clip=False,
                          init=_no_state, round_clip=_fixed_clip, client_scales=client_scales,
                          **extra)


@functools.cache
def mindspore(running_min: bool = True) -> RoundMechanism:
    """MindSpore ``DP_ENCRYPT``: per-client adaptive bounds (state ``[N]``, 0.05 each at
    the start), Gaussian noise ``σ_t = (σ/C)·C_k,t``; ``running_min`` selects MindSpore's
    current rule (overwrite after the first round, then the running minimum) or the older
    overwrite-every-round one."""

    def init(num_clients: int, clip: float):
        return adaptive.mindspore_clip(1.0, num_clients=num_clients).init()

    def client_scales(state, ids, round_clip, phyper: MindSporeHyper):
        clip = jnp.take(state.clip, ids, mode="clip")
        return clip, phyper.sigma_per_clip * clip

    def update(state, skey, params, new_params, ids, mask, bits, phyper: MindSporeHyper):
        rule = adaptive.mindspore_clip(phyper.dp_norm_clip, running_min=running_min)
        g = adaptive.global_change_norm(params, new_params)
        participated = jnp.zeros(state.clip.shape, bool).at[ids].max(mask)
        state = rule.update(state, g, participated)
        n_part = jnp.maximum(jnp.sum(participated), 1)
        next_clip = jnp.sum(jnp.where(participated, state.clip, 0.0)) / n_part
        return state, next_clip, _f32(jnp.nan)

    return RoundMechanism(name="mindspore", randomizer="gaussian", noise_std_factor=1.0,
                          weighted=True, fixed_denominator=None, per_client_clip=True,
                          init=init, round_clip=_fixed_clip, client_scales=client_scales,
                          update=update)


@functools.cache
def central(clients_per_round: int, adaptive_clip: bool = False) -> RoundMechanism:
    """DP-FedAvg: clients clip only; the server adds ``N(0, (z·C)² I)`` to the unweighted
    sum and divides by the fixed ``clients_per_round``. ``adaptive_clip``: C follows the
    quantile rule of Andrew et al. (2021) from the noisy count of unclipped clients."""
    m = float(clients_per_round)

    def client_scales(state, ids, round_clip, phyper):
        return _full(ids, round_clip), jnp.zeros(ids.shape, jnp.float32)

    def server_noise(skey, clean_sum, var_sum, round_clip, phyper: CentralHyper):
        std_sum = phyper.noise_multiplier * round_clip
        noise = server_dp.aggregate_gaussian_noise(skey, clean_sum, std_sum, 1.0)
        return noise, std_sum * std_sum

    if not adaptive_clip:
        return RoundMechanism(name="central", randomizer="none", noise_std_factor=0.0,
                              weighted=False, fixed_denominator=m, per_client_clip=False,
                              init=_no_state, round_clip=_fixed_clip,
                              client_scales=client_scales, server_noise=server_noise)

    def init(num_clients: int, clip: float):
        return adaptive.quantile_clip(clients_per_round=1.0, initial_clip=clip).init()

    def update(state, skey, params, new_params, ids, mask, bits, phyper: CentralHyper):
        rule = adaptive.quantile_clip(
            clients_per_round=m, initial_clip=1.0, target_quantile=phyper.target_quantile,
            learning_rate=phyper.clip_lr, clipped_count_stddev=phyper.count_stddev)
        state, info = rule.update(state, jax.random.fold_in(skey, 1), bits)
        return state, state.clip, info.unclipped_fraction

    return RoundMechanism(name="central", randomizer="none", noise_std_factor=0.0,
                          weighted=False, fixed_denominator=m, per_client_clip=False,
                          init=init, round_clip=lambda state, clip, phyper: state.clip,
                          client_scales=client_scales, server_noise=server_noise,
                          update=update)


@functools.cache
def distributed(clients_per_round: int) -> RoundMechanism:
    """Distributed DP: each client adds ``N(0, (zC)²/m)`` (m = ``clients_per_round``) and
    is kept with probability ``1 − dropout_rate``; unweighted sum over the fixed m."""
    m = float(clients_per_round)

    def client_scales(state, ids, round_clip, phyper: DistributedHyper):
        return (_full(ids, round_clip),
                _full(ids, phyper.noise_multiplier * round_clip / jnp.sqrt(jnp.float32(m))))

    def keep(keys, phyper: DistributedHyper):
        coin = jax.vmap(lambda k: jax.random.uniform(jax.random.fold_in(k, _DROPOUT_SALT)))(keys)
        return coin >= phyper.dropout_rate

    return RoundMechanism(name="distributed", randomizer="gaussian", noise_std_factor=1.0,
                          weighted=False, fixed_denominator=m, per_client_clip=False,
                          init=_no_state, round_clip=_fixed_clip, client_scales=client_scales,
                          keep=keep,
                          noise_fraction=lambda survivors: survivors.astype(jnp.float32)
                          / jnp.float32(m))


def _aggregate_noise(skey, clean_sum, var_sum, round_clip, phyper):
    return server_dp.aggregate_gaussian_noise(skey, clean_sum, 1.0, var_sum), var_sum


@functools.cache
def aggregated(mech: RoundMechanism) -> RoundMechanism:
    """``mech`` with its clients' Gaussian noise drawn once at the server, exactly in
    distribution (a simulation shortcut: no client holds its noise). A mode whose server
    already draws the noise (central) is returned unchanged.

    Raises:
        ValueError: the clients' randomizer is not Gaussian (the shortcut is exact for
            Gaussian noise only).
    """
    if mech.client_noise_var is not None:
        raise ValueError(f"noise_mode='aggregate' is exact for Gaussian noise only, got the "
                         f"report randomizer {mech.randomizer!r}")
    if mech.server_noise is not None or mech.noise_std_factor == 0.0:   # nothing to move
        return mech
    if mech.randomizer != "gaussian":
        raise ValueError(f"noise_mode='aggregate' is exact for Gaussian noise only, got "
                         f"{mech.randomizer!r}")
    return mech._replace(name=mech.name + "+aggregate", randomizer="none",
                         server_noise=_aggregate_noise)


@functools.cache
def with_client_training(mech: RoundMechanism,
                         training: dp_client.ClientTraining) -> RoundMechanism:
    """``mech`` whose clients train with ``training`` (e.g. DP-SGD clients,
    :func:`ldpsim._src.fl.dp_client.dpsgd`) before the mode's randomizer. The two
    guarantees hold side by side, each for its own relation: the mode's for the client's
    update (or user), the trainer's for one example of a client's data."""
    return mech if mech.client is training else mech._replace(client=training)


# ----------------------------------------------------------------------------- host side


class PrivacyPlan(NamedTuple):
    """A run's privacy mode resolved on the host: the kernel object, its traced knobs, and
    what the reports need (every formula in one function, called by simulate and sweeps).

    Attributes:
        mechanism: the :class:`RoundMechanism`.
        hyper: its traced knobs (``RoundHyper.privacy``).
        columns: the run-level results columns of the mode: mechanism, neighbours,
            epsilon, delta, clip, sensitivity, sigma (in this order), noise_multiplier,
            and sampler_delta_floor.
        row_columns: ``metrics_row -> dict``: per-round columns that depend on the mode
            (the clip bound, and σ/sensitivity where they follow an adaptive bound).
        epsilon_of: ``(max_participation, rounds, min_noise_fraction) -> ε`` spent so far
            (``min_noise_fraction``: the smallest realised / target noise variance of the
            rounds so far, 1 outside distributed DP); ``inf`` where the sampler's bounded
            tails cannot deliver the claimed δ (with a
            :class:`~ldpsim._src.privacy.calibration.SamplerTailWarning`).
        client_hyper: the clients' trainer's traced knobs (``RoundHyper.client``).
        client_epsilon_of: ``max_participation -> ε``: sample-level ε of the worst-case
            client's local training (from the trainer's ``dp_event``); NaN where local
            training releases nothing private.
    """

    mechanism: RoundMechanism
    hyper: PyTree
    columns: dict
    row_columns: Callable[[dict], dict]
    epsilon_of: Callable[[int, int, float], float]
    client_hyper: PyTree = ()
    client_epsilon_of: Callable[[int], float] = lambda k: math.nan


def noise_scale(config: SimulationConfig) -> tuple[float, float, str]:
    """``(sigma, sensitivity, mechanism)`` of an additive-noise ``"ldp"`` run via
    :func:`ldpsim._src.privacy.calibration.calibrate`: ``sigma`` is the Gaussian std or the
    Laplace scale; ε = inf gives ``(0, nan, "none")``.

    Raises:
        LdpsimError: ``config.mechanism`` is a report randomizer (it has no noise scale:
            :func:`local_randomizer` calibrates it).
    """
    if not config.private:
        return 0.0, math.nan, "none"
    if config.mechanism not in calibration.MECHANISMS:
        raise LdpsimError(f"noise_scale: {config.mechanism!r} adds no noise of a scale; "
                          f"calibrate it with local_randomizer(config, dim)")
    cal = calibration.calibrate(config.mechanism,
                                **_RANDOMIZER_OPTIONS[config.mechanism](config, None))
    scale = cal.sigma if cal.sigma is not None else cal.scale
    return float(scale), float(cal.sensitivity), config.mechanism


def mindspore_sigma_per_clip(dp_eps: float = 50.0, dp_delta: float = 0.01, *,
                             neighbours: str = "add-remove", method: str = "analytic") -> float:
    """σ_t / C_t of MindSpore's ``DP_ENCRYPT`` (ALGORITHMS §1.4), validated as MindSpore does.

    Ranges (``yaml_config.cc``, ``InitEncryptConfig``): dp_eps > 0, 0 < dp_delta < 1.
    ``neighbours="add-remove"`` (MindSpore: sensitivity C_t) or ``"replace"`` (2C_t, strict
    replace-one LDP, ALGORITHMS §1.7); ``method`` ``"analytic"`` (exact Balle–Wang) or
    ``"mindspore"`` (the Java numerics).
    """
    eps = check_positive("dp_eps", dp_eps)
    delta = check_open_unit("dp_delta", dp_delta)
    return float(calibration.calibrate("gaussian", epsilon=eps, delta=delta, clip=1.0,
                                       neighbours=neighbours, method=method).sigma)


def central_epsilon(*, noise_multiplier: float, clients_per_round: int, population: int,
                    rounds: int, delta: float, sampling: str = "uniform") -> float:
    """User-level ε of central/distributed DP-FedAvg after ``rounds`` rounds, q = m/N.

    :func:`ldpsim._src.privacy.accounting.dpfedavg_epsilon` (RDP): the engine's ``"uniform"``
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
    (add or remove one user); see :func:`ldpsim._src.privacy.accounting.sensitivity_factor`."""
    return accounting.sensitivity_factor("poisson" if config.sampling == "poisson" else "fixed")


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


def _with_floor(epsilon_of: Callable, floor: float, claimed_delta: float,
                gaussian: bool) -> Callable:
    """``epsilon_of``, limited by the sampler's δ floor: above the claimed δ, warn; for
    Gaussian noise ε is then infinite once anything was released (no ε holds)."""
    if not floor > claimed_delta:
        return epsilon_of
    if not gaussian:
        warnings.warn(
            f"float32 Laplace noise is bounded (|x| <= 16.64 b): at this epsilon the release "
            f"is not pure epsilon-DP; worst-case neighbours are told apart with probability "
            f">= {floor:.3g} (column sampler_delta_floor)", calibration.SamplerTailWarning,
            stacklevel=_outside_ldpsim())
        return epsilon_of
    warnings.warn(
        f"the Gaussian sampler's bounded tails make delta={claimed_delta:g} impossible at "
        f"this noise level: worst-case neighbours are told apart with probability >= "
        f"{floor:.3g} whatever epsilon, so epsilon_spent is reported as inf; use a smaller "
        f"epsilon per round or a larger delta (see docs/privacy_sharp_edges.md)",
        calibration.SamplerTailWarning, stacklevel=_outside_ldpsim())
    return lambda k, t, frac: math.inf if max(k, t) > 0 else 0.0


def _accountant(event: Any, delta: float) -> Callable[[int], float]:
    """``k -> ε`` at ``delta`` of ``k`` releases of ``event``
    (:func:`ldpsim._src.fl.dp_client.event_epsilon`: exact for Gaussian and Laplace),
    cached by ``k``."""
    return functools.lru_cache(maxsize=256)(
        lambda k: dp_client.event_epsilon(event, k, delta))


def _privunit_options(c: SimulationConfig, dim: int | None) -> dict:
    return dict(epsilon=c.epsilon, dim=dim, clip=c.clip, norm_epsilon=c.norm_epsilon)


#: Each local randomizer's factory options, read from the configuration and the model's
#: dimension d (host table; the report randomizers are calibrated for d).
_RANDOMIZER_OPTIONS: dict[str, Callable[[SimulationConfig, int | None], dict]] = {
    "gaussian": lambda c, d: dict(epsilon=c.epsilon, delta=c.delta, clip=c.clip,
                                  neighbours=c.neighbours, method=c.calibration),
    "laplace": lambda c, d: dict(epsilon=c.epsilon, clip=c.clip, neighbours=c.neighbours),
    "privunit2": _privunit_options,
    "privunitg": _privunit_options,
    "duchi": lambda c, d: dict(epsilon=c.epsilon, dim=d, clip=c.clip),
    # SignDS: --epsilon is MindSpore's sign_eps; it releases an order, so clip is unused
    "signds": lambda c, d: dict(epsilon=c.epsilon, dim=d, sign_k=c.sign_k,
                                sign_thr_ratio=c.sign_thr_ratio,
                                sign_global_lr=c.sign_global_lr, sign_dim_out=c.sign_dim_out),
}

#: Pure ε-DP claims no δ; a sampler floor above this is still reported (ε ≳ 3.6 for
#: float32 Laplace): any positive floor breaks pure DP.
_PURE_DP_WARN_DELTA = 1e-6


def local_randomizer(config: SimulationConfig,
                     dim: int | None = None) -> mechanism_lib.LocalMechanism:
    """The :class:`~ldpsim._src.privacy.mechanism.LocalMechanism` an ``"ldp"`` run's
    clients apply (:func:`~ldpsim._src.privacy.mechanism.clip_only` for ε = inf), calibrated
    from ``config`` (``--epsilon``; PrivUnit's ``norm_epsilon``; SignDS's ``sign_*``
    settings) and, for a report randomizer, the model's dimension ``dim``.

    Raises:
        LdpsimError: a report randomizer without ``dim``, or the factory's own errors
            (ε out of the mechanism's range, a dimension too small), naming the value.
    """
    if not config.private:
        return mechanism_lib.clip_only(clip=config.clip, neighbours=config.neighbours)
    if config.mechanism not in calibration.MECHANISMS and dim is None:
        raise LdpsimError(f"mechanism {config.mechanism!r} is calibrated for the model's "
                          f"dimension: pass dim (plan(..., dim=d))")
    with warnings.catch_warnings():   # noise_scale, called first, has issued them
        warnings.simplefilter("ignore")
        return mechanism_lib.make(config.mechanism,
                                  **_RANDOMIZER_OPTIONS[config.mechanism](config, dim))


def _plan_report(config: SimulationConfig, dim: int | None) -> PrivacyPlan:
    """``"ldp"`` with a report randomizer (PrivUnit2, PrivUnitG, Duchi et al., SignDS):
    pure ε-LDP per round for any two inputs (replace-one), so δ is not used; ε_spent is
    the pure composition ``k·ε`` of the worst-case client's ``k`` participations, from the
    randomizer's dp event (binary randomized response at ε, which dominates every ε-DP
    pair) composed at δ = 0."""
    lm = local_randomizer(config, dim)
    acc = _accountant(lm.dp_event(lm.params), 0.0)
    columns = {"mechanism": lm.name, "neighbours": lm.neighbours, "epsilon": config.epsilon,
               "delta": math.nan, "clip": config.clip, "sensitivity": math.nan,
               # root mean per-coordinate variance of one decoded report at ‖x‖ = C
               "sigma": float(lm.noise_std(lm.params)),
               "noise_multiplier": math.nan, "sampler_delta_floor": math.nan}
    return PrivacyPlan(local(lm.name), ReportHyper(lm.params), columns,
                       lambda row: {"clip_bound": config.clip},
                       lambda k, t, frac: acc(k))


def _plan_ldp(config: SimulationConfig, population: int, dim: int | None = None) -> PrivacyPlan:
    if config.private and config.mechanism not in calibration.MECHANISMS:
        return _plan_report(config, dim)
    sigma, sens, randomizer = noise_scale(config)
    lm = local_randomizer(config)
    mech = local(lm.name)
    # The randomizer's accounting event, at the float64 calibration (its params are float32).
    event = lm.dp_event(mechanism_lib.MechanismParams(config.clip, sigma))
    pure = lm.delta == 0.0
    floor, claimed = math.nan, math.nan
    if isinstance(event, dp_accounting.NonPrivateDpEvent):
        epsilon_of = lambda k, t, frac: math.nan  # noqa: E731  (no privacy: no ε column)
    else:
        if lm.name in calibration.MECHANISMS:
            floor = calibration.sampler_delta_floor(sigma, sens, mechanism=lm.name,
                                                    impl=_sampler_impl())
        claimed = _PURE_DP_WARN_DELTA if pure else config.delta
        acc = _accountant(event, config.delta)
        epsilon_of = lambda k, t, frac: acc(k)  # noqa: E731
    columns = {"mechanism": randomizer, "neighbours": config.neighbours,
               "epsilon": config.epsilon, "delta": math.nan if pure else config.delta,
               "clip": config.clip, "sensitivity": sens, "sigma": sigma,
               "noise_multiplier": math.nan, "sampler_delta_floor": floor}
    return PrivacyPlan(mech, LocalHyper(_f32(sigma)), columns,
                       lambda row: {"clip_bound": config.clip},
                       _with_floor(epsilon_of, floor, claimed, not pure))


def _plan_mindspore(config: SimulationConfig, population: int, dim: int | None = None
                    ) -> PrivacyPlan:
    mech = mindspore(config.mindspore_clip_rule == "running-min")
    a = mindspore_sigma_per_clip(config.dp_eps, config.dp_delta,
                                 neighbours=config.mindspore_neighbours)
    unit = 2.0 if config.mindspore_neighbours == "replace" else 1.0
    floor = calibration.sampler_delta_floor(a, unit, impl=_sampler_impl())
    columns = {"mechanism": "gaussian", "neighbours": config.mindspore_neighbours,
               "epsilon": config.dp_eps, "delta": config.dp_delta, "clip": math.nan,
               "sensitivity": math.nan, "sigma": math.nan, "noise_multiplier": math.nan,
               "sampler_delta_floor": floor}
    # Every round is exactly (dp_eps, dp_delta)-DP whatever C_t: the accountant of N(0, a²)
    # with sensitivity `unit` per unit of C.
    acc = _accountant(dp_accounting.GaussianDpEvent(a / unit), config.dp_delta)
    epsilon_of = _with_floor(lambda k, t, frac: acc(k), floor, config.dp_delta, True)

    def row_columns(row: dict) -> dict:
        c = row["clip_bound"]
        return {"sigma": a * c, "sensitivity": unit * c}

    return PrivacyPlan(mech, MindSporeHyper(_f32(a), _f32(config.dp_norm_clip)), columns,
                       row_columns, epsilon_of)


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
        mech = distributed(m)
        hyper = DistributedHyper(_f32(z_value), _f32(config.dropout_rate))
        floor = math.nan   # the summed noise is not one draw of the sampler
    else:
        mech = central(m, config.adaptive_clip)
        hyper = CentralHyper(_f32(z_value), _f32(count_std), _f32(config.target_quantile),
                             _f32(config.clip_learning_rate))
        floor = (calibration.sampler_delta_floor(z_value, sens, impl=_sampler_impl())
                 if z_value > 0 else math.nan)
    columns = {"mechanism": "gaussian",
               "neighbours": "add-remove" if config.sampling == "poisson" else "replace",
               "epsilon": math.nan, "delta": config.delta, "clip": config.clip,
               "sensitivity": math.nan, "sigma": math.nan,
               "noise_multiplier": config.noise_multiplier, "sampler_delta_floor": floor}
    cache: dict = {}

    def ideal(k: int, t: int, frac: float) -> float:
        z = config.noise_multiplier * (math.sqrt(frac) if distributed_mode else 1.0)
        if (z, t) not in cache:
            cache[(z, t)] = central_epsilon(
                noise_multiplier=z, clients_per_round=m, population=population, rounds=t,
                delta=config.delta, sampling=config.sampling)
        return cache[(z, t)]

    per_client = 1.0 / math.sqrt(m) if distributed_mode else 1.0

    def row_columns(row: dict) -> dict:
        c = row["clip_bound"]
        return {"sigma": z_value * c * per_client, "sensitivity": sens * c}

    return PrivacyPlan(mech, hyper, columns, row_columns,
                       _with_floor(ideal, floor, config.delta, True))


_PLANS: dict[str, Callable[[SimulationConfig, int, int | None], PrivacyPlan]] = {
    "ldp": _plan_ldp, "mindspore": _plan_mindspore,
    "central": functools.partial(_plan_sum, distributed_mode=False),
    "distributed": functools.partial(_plan_sum, distributed_mode=True),
}

#: The simulation shortcut of each noise mode (``"aggregate"``: :func:`aggregated`).
_NOISE_MODES: dict[str, Callable[[RoundMechanism], RoundMechanism]] = {
    "per-client": lambda mech: mech, "aggregate": aggregated,
}


def _client_training(config: SimulationConfig) -> dp_client.ClientTraining:
    return (dp_client.dpsgd(config.client_dp_micro_batches) if config.client_dp
            else dp_client.PLAIN)


def plan(config: SimulationConfig, population: int, *,
         smallest_client: int = 1, dim: int | None = None) -> PrivacyPlan:
    """The :class:`PrivacyPlan` of ``config`` for a population of ``population`` clients
    (calibration, the mode's kernel object and knobs, its columns and its accountant),
    composed with the clients' local training (:func:`with_client_training`).

    ``smallest_client``: the fewest examples any client holds (> 0): the worst case of
    the clients' sample-level accounting (DP-SGD clients). ``dim``: the model's number of
    parameters d, needed by the report randomizers (PrivUnit2, PrivUnitG, Duchi et al.,
    SignDS are calibrated for d).
    """
    base = _PLANS[config.privacy_mode](config, population, dim)
    mech = _NOISE_MODES[config.noise_mode](base.mechanism)
    training = _client_training(config)
    knobs = training.knobs(config.client_dp_clip, config.client_dp_noise_multiplier)
    client_epsilon_of: Callable[[int], float] = lambda k: math.nan  # noqa: E731
    if training.dp_event is not None:
        steps = (config.local_epochs * -(-smallest_client // config.batch_size)
                 if config.local_epochs else config.local_steps)
        client_epsilon_of = _accountant(training.dp_event(
            config.client_dp_noise_multiplier, num_examples=smallest_client,
            batch_size=config.batch_size, local_steps=steps), config.delta)
    return base._replace(mechanism=with_client_training(mech, training),
                         client_hyper=knobs, client_epsilon_of=client_epsilon_of)
