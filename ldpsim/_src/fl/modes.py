"""Where a round's noise goes: each privacy mode is ONE object of pure functions.

This module holds what the round kernel reads: :class:`RoundMechanism`, the modes' traced
knobs (:class:`LocalHyper`, :class:`ReportHyper`, :class:`MindSporeHyper`,
:class:`CentralHyper`, :class:`DistributedHyper`), the factories below and
:func:`server_key`. Turning a configuration into one of these objects, with its
calibration, results columns and accountant, is host-side work and lives in
:mod:`ldpsim._src.fl.planning`.

A :class:`RoundMechanism` is the composition of the round's stages
(:func:`ldpsim.modes.chain`'s stages: a client stage, an aggregator, a clip policy and the
server's noise; :func:`chain` composes them like ``optax.chain``) and tells the round
kernel (:func:`ldpsim.fl.make_round_fn`) everything that differs between the privacy
modes, so the kernel never branches on a mode's name: which local randomizer each client
applies and with which clip bound and noise scale, who is kept (dropout), what the server
adds, how the sum is formed and normalised, and how an adaptive clip bound moves. Its traced knobs (a mode's ``hyper``: noise multiplier,
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
:func:`discrete` (``"discrete"``)
    The distributed discrete Gaussian (Kairouz, Liu & Steinke, ICML 2021) or Skellam
    mechanism (Agarwal, Kairouz & Liu, NeurIPS 2021) over secure aggregation: clients clip,
    rotate, scale, round and add integer noise; the server sums the integer reports modulo
    2^b and decodes once (:func:`ldpsim.modes.modular_sum`).
:func:`distributed` (``"distributed"``)
    Distributed DP (Kairouz, Liu & Steinke, ICML 2021): each client adds ``N(0, (zC)²/m)``; clients drop
    out independently with probability ``dropout_rate`` and the realised noise shortfall
    is reported.
:func:`with_client_training` (``client_dp=True``)
    Any mode with DP-SGD clients (:func:`ldpsim._src.fl.dpsgd.client.dpsgd`): the clients'
    local trainer, its traced knobs and its sample-level accounting event come from a
    :class:`~ldpsim._src.fl.dpsgd.client.ClientTraining` object; the mode is unchanged.
:func:`aggregated` (``noise_mode="aggregate"``)
    A simulation shortcut for any mode whose clients add Gaussian noise: the clients only
    clip and the server draws the round's noise once,
    ``Σ_k w_k ξ_k ~ N(0, Σ_k w_k² σ_k² I)`` exactly in distribution
    (:func:`ldpsim._src.privacy.server.server_dp.aggregate_gaussian_noise`), O(d) instead of O(m·d).

Keys: client c in round t uses ``client_key(root, t, c)``; its dropout coin is
``fold_in`` of that key with a salt; the server's draws (central noise, aggregate noise,
clipped-count noise) use :func:`server_key`.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from ldpsim._src._checks import LdpsimError
from ldpsim._src.fl import stages
from ldpsim._src.fl.dpsgd import client as dp_client
from ldpsim._src.privacy.server import adaptive, server_dp
from ldpsim._src.privacy import registry
from ldpsim._src.privacy.randomizers import mechanism as mechanism_lib

PyTree = Any

__all__ = ["CentralHyper", "DistributedHyper", "LocalHyper", "MindSporeHyper",
           "NOISE_MODES", "PRIVACY_MODES", "ReportHyper", "RoundMechanism", "aggregated",
           "central", "chain", "distributed", "local", "mindspore", "quantile_clip",
           "server_key", "with_client_training"]

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
    of float32 scalars, e.g. :class:`~ldpsim._src.privacy.randomizers.privunit2.PrivUnit2Params`; its
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


def _additive_params(clip: jax.Array, scale: jax.Array, phyper: PyTree,
                     round_key: jax.Array = None) -> PyTree:
    return mechanism_lib.MechanismParams(clip, scale)


class RoundMechanism(NamedTuple):
    """A privacy mode: the composition of the round's stages (:func:`chain`).

    Build one with a factory (:func:`local`, :func:`mindspore`, :func:`central`,
    :func:`distributed`, :func:`aggregated`, :func:`discrete`) or compose your own with
    :func:`chain`; factories are cached, so equal settings give the same object (it keys the
    engine's compile cache). ``phyper`` below is the mode's traced knobs
    (:class:`LocalHyper`, …), ``state`` its clip policy's state.

    Fields (the stages):
        name: the privacy mode (``"ldp"``, ``"mindspore"``, ``"central"``,
            ``"distributed"``, ``"ddg"``, ``"skellam"``), with ``"+aggregate"`` for the
            shortcut.
        privatizer: the :class:`~ldpsim.modes.ClientStage` (clip and scale per
            client, release, exact variance and mean of the decoded release, dropout).
        aggregator: the :class:`~ldpsim.modes.Aggregator` (float weighted sum, or
            an integer sum modulo ``2^b`` decoded at the server).
        clip_policy: the :class:`~ldpsim.modes.ClipPolicy` (fixed, MindSpore's
            per-client bounds, quantile-adaptive).
        noise: the :class:`~ldpsim.modes.ServerNoise`, or None (the clients' noise
            is the noise).
        client: the clients' local training before the randomizer, a
            :class:`~ldpsim._src.fl.dpsgd.client.ClientTraining` (ordinary training unless
            composed with DP-SGD clients by :func:`with_client_training`); its traced knobs
            are ``RoundHyper.client``.

    The properties below read the stages under the names of the flat object this one
    replaces (``randomizer``, ``noise_std_factor``, ``weighted``, ``fixed_denominator``,
    ``per_client_clip``, ``init``, ``round_clip``, ``client_scales``, ``keep``,
    ``server_noise``, ``update``, ``noise_fraction``, ``client_params``,
    ``client_noise_var``, ``client_mean``, ``release``).
    """

    name: str
    privatizer: stages.ClientStage
    aggregator: stages.Aggregator
    clip_policy: stages.ClipPolicy = stages.FIXED_CLIP
    noise: stages.ServerNoise | None = None
    client: dp_client.ClientTraining = dp_client.PLAIN

    # --- the stages' functions under their former flat names
    @property
    def randomizer(self) -> str:
        return self.privatizer.randomizer

    @property
    def noise_std_factor(self) -> float:
        return self.privatizer.noise_std_factor

    @property
    def weighted(self) -> bool:
        return self.aggregator.weighted

    @property
    def fixed_denominator(self) -> float | None:
        return self.aggregator.fixed_denominator

    @property
    def per_client_clip(self) -> bool:
        return self.clip_policy.per_client

    @property
    def init(self) -> Callable[[int, float], PyTree]:
        return self.clip_policy.init

    @property
    def round_clip(self) -> Callable:
        return self.clip_policy.round_clip

    @property
    def update(self) -> Callable | None:
        return self.clip_policy.update

    @property
    def client_scales(self) -> Callable:
        return self.privatizer.client_scales

    @property
    def keep(self) -> Callable | None:
        return self.privatizer.keep

    @property
    def noise_fraction(self) -> Callable | None:
        return self.privatizer.noise_fraction

    @property
    def client_params(self) -> Callable:
        return self.privatizer.params

    @property
    def client_noise_var(self) -> Callable | None:
        return self.privatizer.noise_var

    @property
    def client_mean(self) -> Callable | None:
        return self.privatizer.mean

    @property
    def release(self) -> Callable:
        return self.privatizer.release

    @property
    def server_noise(self) -> Callable | None:
        return None if self.noise is None else self.noise.add


#: The former flat fields of RoundMechanism -> (stage field, the stage's attribute).
_LEGACY_FIELDS: dict[str, tuple[str, str]] = {
    "randomizer": ("privatizer", "randomizer"),
    "noise_std_factor": ("privatizer", "noise_std_factor"),
    "client_scales": ("privatizer", "client_scales"),
    "client_params": ("privatizer", "params"),
    "release": ("privatizer", "release"),
    "client_noise_var": ("privatizer", "noise_var"),
    "client_mean": ("privatizer", "mean"),
    "keep": ("privatizer", "keep"),
    "noise_fraction": ("privatizer", "noise_fraction"),
    "weighted": ("aggregator", "weighted"),
    "fixed_denominator": ("aggregator", "fixed_denominator"),
    "per_client_clip": ("clip_policy", "per_client"),
    "init": ("clip_policy", "init"),
    "round_clip": ("clip_policy", "round_clip"),
    "update": ("clip_policy", "update"),
    "server_noise": ("noise", "add"),
}



_namedtuple_replace = RoundMechanism._replace


def _replace(self: RoundMechanism, /, **changes: Any) -> RoundMechanism:
    """A copy with ``changes``: the stage fields, or (deprecated) the former flat names, each
    routed to the stage that now holds it (``weighted=False`` replaces the aggregator's
    ``weighted``, ``client_scales=f`` the client stage's, ``server_noise=f`` the server
    noise's ``add``).

    Raises:
        ValueError: a name that is neither a field nor a former flat name.
    """
    legacy = {k: changes.pop(k) for k in list(changes) if k in _LEGACY_FIELDS}
    out = _namedtuple_replace(self, **changes)
    if not legacy:
        return out
    warnings.warn(
        f"RoundMechanism._replace({', '.join(sorted(legacy))}=...): the flat fields are now "
        f"round stages; replace the stage (e.g. privatizer=mech.privatizer._replace("
        f"client_scales=...), aggregator=stages.float_sum(weighted=False)) or compose one "
        f"with modes.chain", DeprecationWarning, stacklevel=2)
    by_stage: dict = {}
    for flat, value in legacy.items():
        stage, attr = _LEGACY_FIELDS[flat]
        by_stage.setdefault(stage, {})[attr] = value
    for stage, attrs in by_stage.items():
        if stage == "noise":
            add = attrs["add"]
            out = _namedtuple_replace(out, noise=None if add is None else stages.ServerNoise(add))
        else:
            out = _namedtuple_replace(out, **{stage: getattr(out, stage)._replace(**attrs)})
    return out


RoundMechanism._replace = _replace

def chain(*parts: Any, name: str = "custom",
          client: dp_client.ClientTraining = dp_client.PLAIN) -> RoundMechanism:
    """A :class:`RoundMechanism` composed of ``parts``, like ``optax.chain``: one
    :class:`~ldpsim.modes.ClientStage` (required), and at most one
    :class:`~ldpsim.modes.Aggregator` (default: the FedAvg-weighted float sum),
    :class:`~ldpsim.modes.ClipPolicy` (default: fixed) and
    :class:`~ldpsim.modes.ServerNoise` (default: none), in any order.

    Raises:
        TypeError: a part is not a stage, a stage kind is given twice, or no client stage.
    """
    kinds = {stages.ClientStage: "privatizer", stages.Aggregator: "aggregator",
             stages.ClipPolicy: "clip_policy", stages.ServerNoise: "noise"}
    found: dict = {}
    for part in parts:
        field = kinds.get(type(part))
        if field is None:
            raise TypeError(f"chain takes round stages (ClientStage, Aggregator, ClipPolicy, "
                            f"ServerNoise), got {type(part).__name__}")
        if field in found:
            raise TypeError(f"chain got two {type(part).__name__} stages")
        found[field] = part
    if "privatizer" not in found:
        raise TypeError("chain needs a ClientStage")
    found.setdefault("aggregator", stages.float_sum())
    return RoundMechanism(name=name, client=client, **found)


def _fixed_clip(state: PyTree, clip: jax.Array, phyper: PyTree) -> jax.Array:
    return clip


def _full(ids: jax.Array, value: jax.Array) -> jax.Array:
    return jnp.full(ids.shape, value, jnp.float32)


def _report_params(clip, scale, phyper: ReportHyper, round_key=None) -> PyTree:
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
        params=_report_params,
        noise_var=mechanism_lib.mean_variance(variance),
        mean=None if unbiased else mean)
    extra.setdefault("params", _additive_params)
    privatizer = stages.ClientStage(
        randomizer=name, noise_std_factor=float(noise_std_factor or 0.0),
        client_scales=client_scales,
        release=mechanism_lib.decoded_release(privatize, decode, additive), **extra)
    return chain(privatizer, stages.float_sum(weighted=True), name="ldp")


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

    privatizer = stages.ClientStage(
        randomizer="gaussian", noise_std_factor=1.0, client_scales=client_scales,
        params=_additive_params, release=mechanism_lib.GAUSSIAN.privatize)
    policy = stages.ClipPolicy(init=init, round_clip=_fixed_clip, update=update,
                               per_client=True)
    return chain(privatizer, stages.float_sum(weighted=True), policy, name="mindspore")


def _clip_only_scales(state, ids, round_clip, phyper):
    return _full(ids, round_clip), jnp.zeros(ids.shape, jnp.float32)


#: Clients that clip only (the server adds the noise).
_CLIP_ONLY_CLIENTS = stages.ClientStage(
    randomizer="none", noise_std_factor=0.0, client_scales=_clip_only_scales,
    params=_additive_params, release=mechanism_lib.CLIP_ONLY.privatize)


def _central_noise(skey, clean_sum, var_sum, round_clip, phyper: CentralHyper):
    std_sum = phyper.noise_multiplier * round_clip
    noise = server_dp.aggregate_gaussian_noise(skey, clean_sum, std_sum, 1.0)
    return noise, std_sum * std_sum


@functools.cache
def quantile_clip(clients_per_round: int) -> stages.ClipPolicy:
    """The quantile-adaptive clip bound of Andrew et al. (2021), moved by the noisy count of
    unclipped clients (knobs in :class:`CentralHyper`)."""
    m = float(clients_per_round)

    def init(num_clients: int, clip: float):
        return adaptive.quantile_clip(clients_per_round=1.0, initial_clip=clip).init()

    def update(state, skey, params, new_params, ids, mask, bits, phyper: CentralHyper):
        rule = adaptive.quantile_clip(
            clients_per_round=m, initial_clip=1.0, target_quantile=phyper.target_quantile,
            learning_rate=phyper.clip_lr, clipped_count_stddev=phyper.count_stddev)
        state, info = rule.update(state, jax.random.fold_in(skey, 1), bits)
        return state, state.clip, info.unclipped_fraction

    return stages.ClipPolicy(init=init, round_clip=lambda state, clip, phyper: state.clip,
                             update=update)


@functools.cache
def central(clients_per_round: int, adaptive_clip: bool = False) -> RoundMechanism:
    """DP-FedAvg: clients clip only; the server adds ``N(0, (z·C)² I)`` to the unweighted
    sum and divides by the fixed ``clients_per_round``. ``adaptive_clip``: C follows the
    quantile rule of Andrew et al. (2021) from the noisy count of unclipped clients."""
    m = float(clients_per_round)
    policy = quantile_clip(clients_per_round) if adaptive_clip else stages.FIXED_CLIP
    return chain(_CLIP_ONLY_CLIENTS, stages.float_sum(weighted=False, fixed_denominator=m),
                 stages.ServerNoise(_central_noise), policy, name="central")


def _dropout_keep(keys, phyper):
    coin = jax.vmap(lambda k: jax.random.uniform(jax.random.fold_in(k, _DROPOUT_SALT)))(keys)
    return coin >= phyper.dropout_rate


def _survivor_fraction(m: float) -> Callable[[jax.Array], jax.Array]:
    return lambda survivors: survivors.astype(jnp.float32) / jnp.float32(m)


@functools.cache
def distributed(clients_per_round: int) -> RoundMechanism:
    """Distributed DP: each client adds ``N(0, (zC)²/m)`` (m = ``clients_per_round``) and
    is kept with probability ``1 − dropout_rate``; unweighted sum over the fixed m."""
    m = float(clients_per_round)

    def client_scales(state, ids, round_clip, phyper: DistributedHyper):
        return (_full(ids, round_clip),
                _full(ids, phyper.noise_multiplier * round_clip / jnp.sqrt(jnp.float32(m))))

    privatizer = stages.ClientStage(
        randomizer="gaussian", noise_std_factor=1.0, client_scales=client_scales,
        params=_additive_params, release=mechanism_lib.GAUSSIAN.privatize,
        keep=_dropout_keep, noise_fraction=_survivor_fraction(m))
    return chain(privatizer, stages.float_sum(weighted=False, fixed_denominator=m),
                 name="distributed")


def _aggregate_noise(skey, clean_sum, var_sum, round_clip, phyper):
    return server_dp.aggregate_gaussian_noise(skey, clean_sum, 1.0, var_sum), var_sum


@functools.cache
def aggregated(mech: RoundMechanism) -> RoundMechanism:
    """``mech`` with its clients' Gaussian noise drawn once at the server, exactly in
    distribution (a simulation shortcut: no client holds its noise). A mode whose server
    already draws the noise (central) is returned unchanged.

    Raises:
        ValueError: the clients' randomizer is not Gaussian (the shortcut is exact for
            Gaussian noise only), or the mode sums integers.
    """
    if mech.client_noise_var is not None:
        raise ValueError(f"noise_mode='aggregate' is exact for Gaussian noise only, got the "
                         f"report randomizer {mech.randomizer!r}")
    if mech.aggregator.name != "float":
        raise ValueError(f"noise_mode='aggregate' is exact for a float sum only; {mech.name!r} "
                         f"sums integers")
    if mech.server_noise is not None or mech.noise_std_factor == 0.0:   # nothing to move
        return mech
    if mech.release is not mechanism_lib.GAUSSIAN.privatize:
        raise ValueError(f"noise_mode='aggregate' is exact for Gaussian noise only, got "
                         f"{mech.randomizer!r}")
    privatizer = mech.privatizer._replace(randomizer="none",
                                          release=mechanism_lib.CLIP_ONLY.privatize)
    return mech._replace(name=mech.name + "+aggregate", privatizer=privatizer,
                         noise=stages.ServerNoise(_aggregate_noise))


@functools.cache
def with_client_training(mech: RoundMechanism,
                         training: dp_client.ClientTraining) -> RoundMechanism:
    """``mech`` whose clients train with ``training`` (e.g. DP-SGD clients,
    :func:`ldpsim._src.fl.dpsgd.client.dpsgd`) before the mode's randomizer. The two
    guarantees hold side by side, each for its own relation: the mode's for the client's
    update (or user), the trainer's for one example of a client's data."""
    return mech if mech.client is training else mech._replace(client=training)


# ----------------------------------------------------------------------------- integer modes

_ROTATION_SALT = 0x726F7461   # "rota": the round's shared rotation key, from the server key


class DiscreteHyper(NamedTuple):
    """``"ddg"``/``"skellam"``: the dropout probability (the mechanism's γ, noise and bits are
    static: they fix the integer sampler and the modulus, part of the compiled program)."""

    dropout_rate: jax.Array


class DiscreteParams(NamedTuple):
    """One client's parameters in an integer mode: its clip bound and the round's rotation key
    (shared by every client of the round, public)."""

    clip: jax.Array
    rotation_key: jax.Array


class DiscreteRelease(NamedTuple):
    """A client's release in an integer mode (the fields the kernel reads of a
    :class:`~ldpsim.mechanism.Privatized`, plus the integer report's diagnostics).

    Attributes:
        noisy: the report, ``int32[D]`` wrapped to ``b`` bits (what secure aggregation sums).
        clipped: the clipped update (simulation only). noise: ``()`` (known after decoding).
        norm, release_norm, was_clipped, finite: as in :class:`~ldpsim.mechanism.Privatized`.
        exact: the report before the wrap (rounded vector + noise) as float32; diagnostic.
        ok: the conditional rounding passed its norm check (else the report is the noise
            alone around the zero vector).
    """

    noisy: jax.Array
    clipped: PyTree
    noise: tuple
    norm: jax.Array
    release_norm: jax.Array
    was_clipped: jax.Array
    finite: jax.Array
    exact: jax.Array
    ok: jax.Array


def _rotation_key(round_key: jax.Array) -> jax.Array:
    return jax.random.fold_in(round_key, _ROTATION_SALT)


@functools.cache
def discrete(mech: Any, noise: bool = True) -> RoundMechanism:
    """Distributed discrete DP under secure aggregation, as deployed: the distributed
    discrete Gaussian (``mech.mechanism == "ddg"``; Kairouz, Liu & Steinke, ICML 2021) or
    the Skellam mechanism (``"skellam"``; Agarwal, Kairouz & Liu, NeurIPS 2021).

    ``mech`` is a :class:`ldpsim._src.privacy.discrete.accounting.DiscreteMechanism` (host
    side: clip C, granularity γ, the per-client integer noise, ``clients`` m, the model's
    ``dim`` d, ``bits`` b). Each client clips its update to C (L2), and runs
    :func:`ldpsim._src.privacy.discrete.pipeline.encode`: the randomized Hadamard rotation
    with the round's shared key, scaling by 1/γ, conditional randomized rounding, its own
    integer noise (keyed by its id), the wrap to b bits. Clients drop out with
    ``DiscreteHyper.dropout_rate`` (the survivors' noise is what protects, as in
    :func:`distributed`). The server sums the survivors' reports modulo 2^b
    (:func:`ldpsim.modes.modular_sum`) and decodes once (unwrap, unscale,
    unrotate); the mean divides by the fixed m. ``noise=False``: no integer noise (the
    exact tests of the arithmetic; not private).
    """
    from jax.flatten_util import ravel_pytree

    from ldpsim._src.privacy import hadamard
    from ldpsim._src.privacy.discrete import modular, pipeline
    from ldpsim._src.privacy.discrete.accounting import DiscreteMechanism

    if not isinstance(mech, DiscreteMechanism):
        raise LdpsimError(f"discrete() takes a DiscreteMechanism, got {type(mech).__name__}")
    m = float(mech.clients)
    inv_gamma = jnp.float32(1.0 / mech.granularity)
    gamma_sq = float(mech.granularity) ** 2
    noise_var = float(mech.client_variance) if noise else 0.0

    def client_scales(state, ids, round_clip, phyper):
        return _full(ids, round_clip), jnp.zeros(ids.shape, jnp.float32)

    def params(clip, scale, phyper, round_key):
        return DiscreteParams(clip, _rotation_key(round_key))

    def _clip(update, p: DiscreteParams):
        return mechanism_lib.CLIP_ONLY.privatize(
            None, update, mechanism_lib.MechanismParams(p.clip, jnp.float32(0.0)))

    def release(key, update, p: DiscreteParams):
        priv = _clip(update, p)
        flat, _, _ = hadamard.flatten_pad(priv.clipped)
        report, v, ok = pipeline.encode(p.rotation_key, key, flat, mech, noise=noise)
        z = modular.wrap(report - v, mech.bits)   # the noise (exact while |z| < 2^(b-1))
        return DiscreteRelease(report, priv.clipped, (), priv.norm, priv.release_norm,
                               priv.was_clipped, priv.finite,
                               v.astype(jnp.float32) + z.astype(jnp.float32), ok)

    def variance(p: DiscreteParams, update):
        """γ²(σ̂² + mean_j f_j(1 − f_j)): the decoded release's per-coordinate variance
        (H has entries ±1/√D, so each decoded coordinate gets the mean of the rotated
        coordinates' rounding variances; conditioning on the norm check ignored)."""
        flat, _, _ = hadamard.flatten_pad(_clip(update, p).clipped)
        y = hadamard.rotate(p.rotation_key, flat) * inv_gamma
        f = y - jnp.floor(y)
        return jnp.float32(gamma_sq) * (jnp.float32(noise_var) + jnp.mean(f * (1.0 - f)))

    def decode(round_key, signed, like):
        flat = pipeline.decode(_rotation_key(round_key), signed, mech)
        return ravel_pytree(like)[1](flat)

    privatizer = stages.ClientStage(
        randomizer=mech.mechanism, noise_std_factor=0.0, client_scales=client_scales,
        params=params, release=release, noise_var=variance, keep=_dropout_keep,
        noise_fraction=_survivor_fraction(m))
    aggregator = stages.modular_sum(mech.bits, mech.padded_dim, decode, m)
    return chain(privatizer, aggregator, name=mech.mechanism)
