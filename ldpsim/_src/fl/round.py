"""A federated round in ONE jitted kernel, for every privacy mode.

A round (:func:`make_round_fn`)::

    cohort ids (host-sampled, padded to a multiple of the chunk, with a mask)
      -> ldpsim._src.fl.sharding.map_cohort: on each of D devices (D = 1: no sharding),
         lax.scan over chunks of that device's contiguous 1/D of the cohort:
           gather the chunk's data from the population
           vmap over the chunk: local training + the client stage (clip, scale, release:
             the randomizer, decoded, or an integer report)
           accumulate Σw·clipped, Σw², Σw²s², counts, and the aggregator's part: Σw·noise
             (float sum; noise = decoded − clipped) or Σ reports mod 2³² (integer sum)
             (memory O(chunk × model); s² the client's exact per-coordinate variance)
         then psum of the per-device sums over the mesh
      -> the aggregator's decoding (integer sum: mod 2^b, unscale, unrotate; noise =
         decoded − clean), the server-noise stage,
         Δ̄ = (Σw·clipped + Σw·noise) / (Σw or fixed m),
         server optimizer step, the clip policy's update (adaptive clip), metrics

Everything that differs between privacy modes comes from the stages of a
:class:`~ldpsim.modes.RoundMechanism` (:mod:`ldpsim._src.fl.stages`); this module never
looks at a mode's name.

Randomness by position: client ``c`` in round ``t`` uses
``k = fold_in(fold_in(root_key, t), c)`` (``root_key = ServerState.key``), split into a
training and a noise key, so the noise does not depend on the chunk size, the cohort
order, the padding or the device count. The server's draws use
:func:`ldpsim._src.fl.modes.server_key`. Every number that may change between runs of one
setting (σ, C, learning rates, the mode's knobs) is traced (:class:`RoundHyper`): sweeping
ε never recompiles and a sweep may ``vmap`` the round over an ε axis.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from ldpsim._src.fl import client as client_lib
from ldpsim._src.fl.evaluate import make_eval_fn
from ldpsim._src.fl import metrics as metrics_lib
from ldpsim._src.fl import modes as modes_lib
from ldpsim._src.fl import server as server_lib
from ldpsim._src.fl import sharding
from ldpsim._src.fl.dpsgd.client import ClientDpHyper
from ldpsim._src.privacy.server import adaptive

PyTree = Any

__all__ = ["ClientDpHyper", "RoundHyper", "ServerState", "chunk_sums", "client_key",
           "init_state", "make_eval_fn", "make_round_fn"]


class RoundHyper(NamedTuple):
    """The traced hyperparameters of a round (float32 scalars; vmappable over a sweep axis).

    Attributes:
        clip: the run's clip bound C (L2; L1 for Laplace); an adaptive mode's state may
            override it round by round.
        client_lr: local learning rate.
        server_lr: server learning rate.
        privacy: the mode's knobs (:class:`ldpsim._src.fl.modes.LocalHyper` for local DP: the
            noise scale σ or b; see :mod:`ldpsim._src.fl.modes` for the others).
        client: the clients' trainer's knobs (``mechanism.client.knobs``:
            :class:`~ldpsim._src.fl.dpsgd.client.ClientDpHyper` of DP-SGD clients, ``()`` for
            ordinary training).
    """

    clip: jax.Array
    client_lr: jax.Array
    server_lr: jax.Array
    privacy: PyTree
    client: PyTree = ()

    @classmethod
    def create(cls, *, clip: float, client_lr: float, server_lr: float,
               sigma: float | None = None, privacy: PyTree = None,
               client_dp_clip: float = 1.0, client_dp_noise: float = 0.0) -> "RoundHyper":
        """Float32 knobs; ``sigma`` is shorthand for ``privacy=LocalHyper(sigma)``;
        ``client`` holds DP-SGD clients' knobs (unused by ordinary training)."""
        f = lambda v: jnp.asarray(v, jnp.float32)  # noqa: E731
        if privacy is None:
            privacy = modes_lib.LocalHyper(f(0.0 if sigma is None else sigma))
        elif sigma is not None:
            raise ValueError("give sigma (local DP) or privacy, not both")
        return cls(f(clip), f(client_lr), f(server_lr), privacy,
                   ClientDpHyper(f(client_dp_clip), f(client_dp_noise)))


class ServerState(NamedTuple):
    """What persists across rounds: global params, server optimizer state, root key and
    the privacy mode's state (``()`` unless its clip bound adapts)."""

    params: PyTree
    opt_state: Any
    key: jax.Array
    privacy: PyTree = ()


def init_state(params: PyTree, key: jax.Array, *, server_optimizer: str = "fedavg",
               server_momentum: float = 0.9, privacy: PyTree = ()) -> ServerState:
    """Initial :class:`ServerState` (the optimizer state does not depend on the lr);
    ``privacy``: the mode's initial state (``RoundMechanism.init``)."""
    opt = server_lib.server_optimizer(server_optimizer, 1.0, momentum=server_momentum)
    return ServerState(params, opt.init(params), key, privacy)


def client_key(root_key: jax.Array, round_idx: jax.typing.ArrayLike,
               client_id: jax.typing.ArrayLike) -> jax.Array:
    """``fold_in(fold_in(root_key, round), client_id)``: the key of one client in one round."""
    return jax.random.fold_in(jax.random.fold_in(root_key, round_idx), client_id)


def chunk_sums(w: jax.Array, include: jax.Array, mask: jax.Array, priv: Any,
               loss: jax.Array, counts: jax.Array, *, noise: Any = None
               ) -> metrics_lib.CohortSums:
    """One chunk's contribution to the round's :class:`~ldpsim.fl.CohortSums`.

    Args:
        w: float32[k] aggregation weights (0 for excluded clients).
        include: bool[k], in the aggregate (real slot, not dropped out; a non-finite
            update is included as its privatized zero substitute).
        mask: bool[k], real (non-padding) slot.
        priv: the chunk's :class:`~ldpsim.mechanism.Privatized` releases (vmapped).
        loss: float32[k] mean local training losses. counts: int32[k] examples.
        noise: the chunk's noise sum as the round's aggregator computes it
            (:attr:`ldpsim._src.fl.stages.Aggregator.chunk`); None: ``Σ w·priv.noise``.
    """
    return metrics_lib.CohortSums(
        clean=server_lib.weighted_sum(w, priv.clipped),
        noise=server_lib.weighted_sum(w, priv.noise) if noise is None else noise,
        weight=jnp.sum(w),
        weight_sq=jnp.sum(w * w),
        clients=jnp.sum(mask, dtype=jnp.int32),
        clipped=jnp.sum(include & priv.was_clipped, dtype=jnp.int32),
        nonfinite=jnp.sum(mask & ~priv.finite, dtype=jnp.int32),
        loss=jnp.sum(jnp.where(include & priv.finite, loss, 0.0)),
        examples=jnp.sum(jnp.where(include, counts, 0)).astype(jnp.float32),
    )


class _ModeSums(NamedTuple):
    """Per-chunk sums the mode needs beyond :class:`~ldpsim.fl.CohortSums`."""

    noise_var: jax.Array    # Σ w² s² (s²: each client's mean per-coordinate noise variance)
    bits: jax.Array         # Σ quantile bits (unclipped clients, ±½ encoding)
    survivors: jax.Array    # clients in the aggregate
    clip: jax.Array         # Σ of their clip bounds
    bias: Any = ()          # Σ w (E[decoded] − clipped): a biased decoder only (SignDS)

    @classmethod
    def zeros(cls, params: PyTree = None) -> "_ModeSums":
        """``params``: the model, when the decoder is biased (its bias is model-shaped)."""
        z = jnp.zeros((), jnp.float32)
        bias = () if params is None else jax.tree_util.tree_map(
            lambda p: jnp.zeros(jnp.shape(p), jnp.float32), params)
        return cls(z, z, jnp.zeros((), jnp.int32), z, bias)


def make_round_fn(*, apply_fn: Callable,
                  mechanism: "modes_lib.RoundMechanism | str" = "gaussian",
                  client_optimizer: str = "sgd", server_optimizer: str = "fedavg",
                  server_momentum: float = 0.9, local_steps: int | None = 1,
                  local_epochs: int | None = None, batch_size: int = 16,
                  weighting: str = "examples", chunk_size: int | None = None,
                  client_update: Callable | None = None, devices: int | None = 1,
                  chunks_in_flight: int | None = None) -> Callable:
    """Build the pure round function ``round_fn(state, population, round_idx, ids, mask, hyper)``.

    Args:
        apply_fn: the model's ``(params, x) -> logits``.
        mechanism: the privacy mode, a :class:`~ldpsim.modes.RoundMechanism`; a
            randomizer name (``"gaussian"``, ``"laplace"``, ``"none"``, ``"privunit2"``,
            ``"privunitg"``, ``"duchi"``, ``"signds"``) or a
            :class:`~ldpsim.mechanism.LocalMechanism` is short for ``modes.local(it)``,
            local DP (a report randomizer's ``hyper.privacy`` is a
            :class:`~ldpsim._src.fl.modes.ReportHyper`).
        client_optimizer: ``"sgd"``, ``"momentum"`` or ``"adam"``.
        server_optimizer: ``"fedavg"``, ``"fedavgm"``, ``"fedadam"``, ``"fedyogi"``.
        server_momentum: FedAvgM momentum.
        local_steps, local_epochs: local work per client (exactly one is not None).
        batch_size: local batch size.
        weighting: ``"examples"`` (|D_k|) or ``"uniform"``, for modes that weight
            (``mechanism.weighted``); the others give every client one vote.
        chunk_size: at most this many clients per vmapped chunk (memory O(chunk × model));
            None picks the backend's default (:mod:`ldpsim._src.fl._policy`).
        client_update: a one-client trainer with the signature of
            :func:`ldpsim.fl.local_update` to use instead of the mechanism's
            (``mechanism.client``, a :class:`~ldpsim._src.fl.dpsgd.client.ClientTraining`:
            ordinary training, or DP-SGD clients with their knobs in ``hyper.client``);
            research code may substitute its own.
        devices: split the cohort over this many devices (None: all JAX sees), see
            :func:`ldpsim._src.fl.sharding.map_cohort`; the result equals the one-device
            result up to the float rounding of the cross-device sum. 1 (default): the
            single-device program.
        chunks_in_flight: chunks computed per iteration of the cohort scan, added in
            cohort order (None: :func:`ldpsim._src.fl._policy.resolve_chunks_in_flight`).

    Returns:
        ``round_fn(state, population, round_idx, cohort_ids, cohort_mask, hyper) ->
        (state, RoundMetrics)``, pure and jittable: ``state`` a :class:`ServerState`
        whose ``privacy`` is ``mechanism.init(...)``, ``cohort_ids`` int32[m],
        ``cohort_mask`` bool[m] (False = padding slot, contributes nothing), ``hyper`` a
        :class:`RoundHyper` whose ``privacy`` holds the mode's knobs. ``m`` need not be a
        multiple of ``chunk_size`` or of ``devices``.

    Raises:
        LdpsimError: ``devices`` is more than JAX sees (:func:`~ldpsim._src.fl.sharding.resolve_devices`).
    """
    mech = (mechanism if isinstance(mechanism, modes_lib.RoundMechanism)
            else modes_lib.local(mechanism))   # a name or a LocalMechanism: local DP
    train = mech.client.update
    if client_update is not None:
        def train(params, x, y, count, knobs, **kw):  # noqa: F811
            return client_update(params, x, y, count, **kw)
    # the clients' randomizer as (key, update, params) -> decoded release (additive: itself)
    privatize = mech.release
    n_devices = sharding.resolve_devices(devices)
    client_weighting = weighting if mech.weighted else "uniform"

    client_stage = mech.privatizer
    aggregator = mech.aggregator

    def one_client(params, x, y, count, key, clip, scale, hyper, round_key):
        train_key, noise_key = jax.random.split(key)
        opt = client_lib.client_optimizer(client_optimizer, hyper.client_lr)
        delta, cm = train(params, x, y, count, hyper.client, apply_fn=apply_fn, optimizer=opt,
                          batch_size=batch_size, key=train_key, local_steps=local_steps,
                          local_epochs=local_epochs)
        mparams = client_stage.params(clip, scale, hyper.privacy, round_key)
        release = privatize(noise_key, delta, mparams)
        if client_stage.noise_var is None:   # additive: iid noise of std factor·scale
            var = jnp.square(client_stage.noise_std_factor * scale)
        else:                                # exact, for this client's input
            var = client_stage.noise_var(mparams, delta)
        bias = ()
        if client_stage.mean is not None:    # a biased decoder: E[decoded] − clipped
            bias = jax.tree_util.tree_map(jnp.subtract, client_stage.mean(mparams, delta),
                                          release.clipped)
        return release, cm.loss, var, bias

    def chunk_fn(operands, c_ids, c_mask):
        params, key, round_idx, population, pstate, round_clip, hyper, round_key = operands
        x, y, counts = population.gather(c_ids)
        keys = jax.vmap(lambda c: client_key(key, round_idx, c))(c_ids)
        clip, scale = client_stage.client_scales(pstate, c_ids, round_clip, hyper.privacy)
        priv, loss, var, bias = jax.vmap(
            one_client, in_axes=(None, 0, 0, 0, 0, 0, 0, None, None))(
            params, x, y, counts, keys, clip, scale, hyper, round_key)
        include = c_mask   # a non-finite update enters as its privatized zero substitute
        if client_stage.keep is not None:
            include = include & client_stage.keep(keys, hyper.privacy)
        w = server_lib.aggregation_weights(counts, include, client_weighting)
        noise_part, payload = aggregator.chunk(w, include, priv)
        extra = _ModeSums(
            noise_var=jnp.sum(w * w * var),
            bits=jnp.sum(adaptive.quantile_bits(priv.release_norm, clip, include)),
            survivors=jnp.sum(include, dtype=jnp.int32),
            clip=jnp.sum(include.astype(jnp.float32) * clip),
            bias=server_lib.weighted_sum(w, bias))
        sums = chunk_sums(w, include, c_mask, priv, loss, counts, noise=noise_part)
        return sums, extra, payload

    def round_fn(state: ServerState, population, round_idx, cohort_ids, cohort_mask,
                 hyper: RoundHyper):
        params = state.params
        ids = jnp.asarray(cohort_ids, jnp.int32)
        mask = jnp.asarray(cohort_mask, bool)
        skey = modes_lib.server_key(state.key, round_idx)
        round_clip = mech.round_clip(state.privacy, hyper.clip, hyper.privacy)
        noise_zero, payload_zero = aggregator.zeros(params)
        zeros = (metrics_lib.CohortSums.zeros(params)._replace(noise=noise_zero),
                 _ModeSums.zeros(None if client_stage.mean is None else params), payload_zero)
        operands = (params, state.key, round_idx, population, state.privacy, round_clip,
                    hyper, skey)
        sums, extra, payload = sharding.map_cohort(
            chunk_fn, zeros, operands, ids, mask, chunk_size=chunk_size, devices=n_devices,
            chunks_in_flight=chunks_in_flight)
        noise_sum, diagnostics = aggregator.finalize(sums.noise, payload, sums.clean, skey)
        sums = sums._replace(noise=noise_sum)
        var_sum = extra.noise_var
        if mech.noise is not None:
            noise, var_sum = mech.noise.add(skey, sums.clean, var_sum, round_clip,
                                            hyper.privacy)
            sums = sums._replace(noise=noise)
        if aggregator.fixed_denominator is not None:  # DP-FedAvg's f̃_f: divide by m
            sums = sums._replace(weight=jnp.float32(aggregator.fixed_denominator))
        noise_std = jnp.sqrt(var_sum / jnp.maximum(sums.weight_sq, 1e-30))
        clean, noise, rm = metrics_lib.finalize_metrics(sums, noise_std)
        if client_stage.mean is not None:   # a biased decoder: E‖z̄‖² = ‖bias‖² + variance
            inv = jnp.where(sums.weight > 0, 1.0 / jnp.where(sums.weight > 0, sums.weight, 1.0),
                            0.0)
            bias_norm = metrics_lib.tree_norm(extra.bias) * inv
            rm = rm._replace(theory_noise_norm=jnp.sqrt(
                jnp.square(rm.theory_noise_norm) + jnp.square(bias_norm)))
        aggregate = jax.tree_util.tree_map(jnp.add, clean, noise)
        opt = server_lib.server_optimizer(server_optimizer, hyper.server_lr,
                                          momentum=server_momentum)
        new_params, opt_state = server_lib.server_update(params, state.opt_state, aggregate, opt)

        survivors = extra.survivors
        if mech.clip_policy.per_client:
            clip_bound = jnp.where(survivors > 0, extra.clip / jnp.maximum(survivors, 1),
                                   round_clip)
        else:
            clip_bound = jnp.asarray(round_clip, jnp.float32)
        pstate, next_clip, unclipped = state.privacy, clip_bound, jnp.float32(jnp.nan)
        if mech.clip_policy.update is not None:
            pstate, next_clip, unclipped = mech.clip_policy.update(
                state.privacy, skey, params, new_params, ids, mask, extra.bits, hyper.privacy)
        fraction = (jnp.float32(1.0) if client_stage.noise_fraction is None
                    else client_stage.noise_fraction(survivors))
        metrics = rm._replace(clip_bound=clip_bound, noise_sum_std=jnp.sqrt(var_sum),
                              survivors=survivors, noise_variance_fraction=fraction,
                              unclipped_fraction=unclipped, next_clip=next_clip,
                              wrapped_fraction=diagnostics.wrapped_fraction,
                              rounding_failures=diagnostics.rounding_failures)
        return ServerState(new_params, opt_state, state.key, pstate), metrics

    return round_fn
