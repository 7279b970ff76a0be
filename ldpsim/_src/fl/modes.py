"""Where a round's noise goes: each privacy mode is ONE object of pure functions.

This module holds what the round kernel reads: :class:`RoundMechanism`, the modes' traced
knobs (:class:`LocalHyper`, :class:`ReportHyper`, :class:`MindSporeHyper`,
:class:`CentralHyper`, :class:`DistributedHyper`), the factories below and
:func:`server_key`. Turning a configuration into one of these objects, with its
calibration, results columns and accountant, is host-side work and lives in
:mod:`ldpsim._src.fl.planning`.

A :class:`RoundMechanism` tells the round kernel (:func:`ldpsim.fl.make_round_fn`)
everything that differs between the privacy modes, so the kernel never branches on a
mode's name: which local randomizer each client applies and with which clip bound and
noise scale, who is kept (dropout), what the server adds, how the sum is normalised, and
how an adaptive clip bound moves. Its traced knobs (a mode's ``hyper``: noise multiplier,
σ/C, dropout rate, …) are arguments of those functions, so changing them never
recompiles; its state (MindSpore's per-client C_k,t, the quantile-adaptive C) is part of
:class:`ldpsim.fl.ServerState`.

The modes (factories below; :func:`ldpsim.modes.plan` builds the one a
:class:`~ldpsim.fl.SimulationConfig` asks for, with its host-side reporting and
accounting):

:func:`local` (``"ldp"``)
    Local DP, the default engine: each client clips to C (L2; L1 for Laplace) and applies
    a registered local randomizer (:mod:`ldpsim.mechanism`): additive noise
    (Gaussian, Laplace; knob :class:`LocalHyper`) or a report randomizer (PrivUnit2,
    PrivUnitG, Duchi et al., SignDS; knob :class:`ReportHyper`, its calibrated params),
    whose report the server decodes before aggregating.
:func:`mindspore` (``"mindspore"``)
    MindSpore Federated ``DP_ENCRYPT``: client k clips to its own
    adaptive bound C_k,t (:func:`ldpsim.privacy.mindspore_clip`) and adds
    ``N(0, (a(ε,δ)·C_k,t)²)``; FedAvg mean weighted by n_k.
:func:`central` (``"central"``)
    DP-FedAvg (McMahan et al. 2018; TFF ``gaussian_fixed``/``gaussian_adaptive``):
    unweighted clipped sum + ONE server draw ``N(0, (z_Δ C)²)``, fixed denominator m;
    optionally the quantile-adaptive C (Andrew et al. 2021) with the count noise σ_b.
:func:`distributed` (``"distributed"``)
    Distributed DP (Kairouz, Liu & Steinke, ICML 2021): each client adds ``N(0, (zC)²/m)``; clients drop
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
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from ldpsim._src._checks import LdpsimError
from ldpsim._src.fl import dp_client
from ldpsim._src.privacy import adaptive, registry, server_dp
from ldpsim._src.privacy import mechanism as mechanism_lib

PyTree = Any

__all__ = ["CentralHyper", "DistributedHyper", "LocalHyper", "MindSporeHyper",
           "NOISE_MODES", "PRIVACY_MODES", "ReportHyper", "RoundMechanism", "aggregated",
           "central", "distributed", "local", "mindspore", "server_key",
           "with_client_training"]

PRIVACY_MODES = registry.mode_names()   # the registry's (ldpsim._src.privacy.registry)
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
            :data:`ldpsim.mechanism.REGISTRY`; ``"none"`` clips only).
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
        release: ``(key, update, params) -> Privatized``: the clients' randomizer, decoded
            (:func:`ldpsim._src.privacy.randomizer.decoded_release`); the round applies
            this function and never looks the randomizer up by its name.
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
    release: Callable[..., Any] = mechanism_lib.GAUSSIAN.privatize


def _no_state(num_clients: int, clip: float) -> tuple:
    return ()


def _fixed_clip(state: PyTree, clip: jax.Array, phyper: PyTree) -> jax.Array:
    return clip


def _full(ids: jax.Array, value: jax.Array) -> jax.Array:
    return jnp.full(ids.shape, value, jnp.float32)


def _report_params(clip, scale, phyper: ReportHyper) -> PyTree:
    return phyper.params


def local(randomizer: "str | mechanism_lib.LocalMechanism" = "gaussian") -> RoundMechanism:
    """``"ldp"``: every client applies the local randomizer ``randomizer``: a registered
    vector randomizer's name (:data:`ldpsim.mechanism.REGISTRY`): additive noise with the
    run's clip bound and :class:`LocalHyper` scale, or a report randomizer with the
    calibrated params of :class:`ReportHyper`, whose reports the server decodes; or any
    :class:`~ldpsim.mechanism.LocalMechanism` (a user's own, not registered), whose
    ``params`` go in :class:`ReportHyper` and whose functions the round calls directly.

    Equal randomizers (the same name, or the same functions) give the same object (it keys
    the engine's compile cache).

    Raises:
        LdpsimError: an unknown name, or a randomizer of categories (``"rr"``).
    """
    if isinstance(randomizer, str):
        return _registered(randomizer)
    lm = randomizer
    return _local(lm.name, lm.privatize, lm.decode, lm.mean, lm.variance, bool(lm.additive),
                  bool(lm.unbiased), None)


@functools.cache
def _registered(randomizer: str) -> RoundMechanism:
    entry = mechanism_lib.entry(randomizer)   # validates the name
    if entry.input != "vector":
        raise LdpsimError(f"the round privatizes model updates; {randomizer!r} privatizes "
                          f"categories (vector randomizers: {', '.join(mechanism_lib.VECTOR)})")
    return _local(randomizer, entry.privatize, entry.decode, entry.mean, entry.variance,
                  entry.additive, entry.unbiased, entry.noise_std_factor)


@functools.cache
def _local(name: str, privatize: Callable, decode: Callable | None, mean: Callable | None,
           variance: Callable | None, additive: bool, unbiased: bool,
           noise_std_factor: float | None) -> RoundMechanism:
    """The local-DP round object of a randomizer given by its functions. ``noise_std_factor``
    (registered additive randomizers): the clients' params are ``MechanismParams(clip,
    scale)`` from the run's clip and :class:`LocalHyper`; None: the calibrated params in
    :class:`ReportHyper` and the exact per-client variance."""
    by_scale = noise_std_factor is not None

    def client_scales(state, ids, clip, phyper):
        scale = phyper.scale if by_scale else 0.0
        return _full(ids, clip), _full(ids, scale)

    extra = {} if by_scale else dict(
        client_params=_report_params,
        client_noise_var=mechanism_lib.mean_variance(variance),
        client_mean=None if unbiased else mean)
    return RoundMechanism(name="ldp", randomizer=name,
                          noise_std_factor=float(noise_std_factor or 0.0),
                          weighted=True, fixed_denominator=None, per_client_clip=False,
                          init=_no_state, round_clip=_fixed_clip, client_scales=client_scales,
                          release=mechanism_lib.decoded_release(privatize, decode, additive),
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
                          update=update, release=mechanism_lib.GAUSSIAN.privatize)


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
                              client_scales=client_scales, server_noise=server_noise,
                              release=mechanism_lib.CLIP_ONLY.privatize)

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
                          update=update, release=mechanism_lib.CLIP_ONLY.privatize)


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
                          keep=keep, release=mechanism_lib.GAUSSIAN.privatize,
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
    if mech.release is not mechanism_lib.GAUSSIAN.privatize:
        raise ValueError(f"noise_mode='aggregate' is exact for Gaussian noise only, got "
                         f"{mech.randomizer!r}")
    return mech._replace(name=mech.name + "+aggregate", randomizer="none",
                         server_noise=_aggregate_noise, release=mechanism_lib.CLIP_ONLY.privatize)


@functools.cache
def with_client_training(mech: RoundMechanism,
                         training: dp_client.ClientTraining) -> RoundMechanism:
    """``mech`` whose clients train with ``training`` (e.g. DP-SGD clients,
    :func:`ldpsim._src.fl.dp_client.dpsgd`) before the mode's randomizer. The two
    guarantees hold side by side, each for its own relation: the mode's for the client's
    update (or user), the trainer's for one example of a client's data."""
    return mech if mech.client is training else mech._replace(client=training)
