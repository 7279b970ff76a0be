"""A federated round in ONE jitted kernel, and the driver that runs a simulation.

A round (:func:`make_round_fn`)::

    cohort ids (host-sampled, padded to a multiple of the chunk, with a mask)
      -> ldpsim.fl.sharding.map_cohort: on each of D devices (D = 1: no sharding),
         lax.scan over chunks of that device's contiguous 1/D of the cohort:
           gather the chunk's data from the population
           vmap over the chunk: local_update (ldpsim.fl.client) + privatize
           accumulate Σw·clipped, Σw·noise, Σw, Σw², counts   (memory O(chunk × model))
         then psum of the per-device sums over the mesh
      -> aggregate Δ̄ = (Σw·clipped + Σw·noise)/Σw, server optimizer step, metrics

Randomness by position: client ``c`` in round ``t`` uses
``k = fold_in(fold_in(root_key, t), c)`` (``root_key = ServerState.key``; :func:`simulate`
sets it to ``fold_in(key(seed), "roun")`` and initialises the model from another
``fold_in`` of ``key(seed)``), split into a training and a noise key, so the
noise does not depend on the chunk size, the cohort order, the padding or the device
count, and two seeds never share client noise.  σ, C and the learning rates are traced
(:class:`RoundHyper`): sweeping ε never recompiles and a sweep may ``vmap`` the round
over an ε axis.

:func:`simulate` is the one obvious entry point: config in, metrics history out.
"""

from __future__ import annotations

import functools
import math
import time
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ldpsim import _xla
from ldpsim._checks import LdpsimError
from ldpsim.fl import metrics as metrics_lib
from ldpsim.fl import server as server_lib
from ldpsim.fl import sharding
from ldpsim.fl.config import SimulationConfig
from ldpsim.fl.privatize import privatize

PyTree = Any

__all__ = [
    "RoundHyper", "ServerState", "build_data", "chunk_layout", "chunk_sums", "client_key", "init_state", "initial_state", "make_eval_fn", "make_round_fn",
    "noise_scale", "sample_cohort", "simulate", "uses_modes",
]


class RoundHyper(NamedTuple):
    """The traced hyperparameters of a round (float32 scalars; vmappable over a sweep axis).

    Attributes:
        sigma: per-coordinate scale of each client's noise: the Gaussian std σ or the
            Laplace scale b (0: no noise).
        clip: clip bound C (L2; L1 for Laplace).
        client_lr: local learning rate.
        server_lr: server learning rate.
    """

    sigma: jax.Array
    clip: jax.Array
    client_lr: jax.Array
    server_lr: jax.Array

    @classmethod
    def create(cls, *, sigma: float, clip: float, client_lr: float, server_lr: float
               ) -> "RoundHyper":
        f = lambda v: jnp.asarray(v, jnp.float32)  # noqa: E731
        return cls(f(sigma), f(clip), f(client_lr), f(server_lr))


class ServerState(NamedTuple):
    """What persists across rounds: global params, server optimizer state, root key."""

    params: PyTree
    opt_state: Any
    key: jax.Array


def init_state(params: PyTree, key: jax.Array, *, server_optimizer: str = "fedavg",
               server_momentum: float = 0.9) -> ServerState:
    """Initial :class:`ServerState` (the optimizer state does not depend on the lr)."""
    opt = server_lib.server_optimizer(server_optimizer, 1.0, momentum=server_momentum)
    return ServerState(params, opt.init(params), key)


def client_key(root_key: jax.Array, round_idx: jax.typing.ArrayLike,
               client_id: jax.typing.ArrayLike) -> jax.Array:
    """``fold_in(fold_in(root_key, round), client_id)``: the key of one client in one round."""
    return jax.random.fold_in(jax.random.fold_in(root_key, round_idx), client_id)


#: Default clients per chunk by backend (measured with benchmarks/throughput.py: on the
#: 2-core CPU, vmap widths of 4-8 LeNet-5 clients beat 16-64; accelerators want wide vmaps).
#: CPU: a chunk of 1 (the scan is a loop over single clients inside XLA, no grouped or
#: batched ops) beat 2, 4, 8 in the same run: 6.0 vs 7.0, 7.2, 7.3 CPU-ms per LeNet-5
#: round update at m = 200 (benchmarks/client_formulations.py for training alone).
AUTO_CHUNK = {"cpu": 1}
AUTO_CHUNK_ACCELERATOR = 1024


def resolve_chunk_size(chunk_size: int | None, backend: str | None = None) -> int:
    """``chunk_size``, or the backend's default (:data:`AUTO_CHUNK`) when it is None."""
    if chunk_size is not None:
        return int(chunk_size)
    backend = backend or jax.default_backend()
    return AUTO_CHUNK.get(backend, AUTO_CHUNK_ACCELERATOR)


def chunk_layout(m: int, chunk_size: int | None) -> tuple[int, int]:
    """``(n_chunks, chunk)`` for a cohort of ``m`` slots: the fewest chunks of at most
    ``chunk_size`` clients (None: :func:`resolve_chunk_size`), evened out so that padding
    is under ``n_chunks`` slots (m = 1,000 with chunk_size 64: 16 chunks of 63)."""
    chunk_size = resolve_chunk_size(chunk_size)
    n_chunks = -(-m // max(1, min(chunk_size, m)))
    return n_chunks, -(-m // n_chunks)


def chunk_sums(w: jax.Array, include: jax.Array, mask: jax.Array, priv: Any,
               loss: jax.Array, counts: jax.Array) -> metrics_lib.CohortSums:
    """One chunk's contribution to the round's :class:`~ldpsim.fl.metrics.CohortSums`.

    Args:
        w: float32[k] aggregation weights (0 for excluded clients).
        include: bool[k], in the aggregate (real slot, not dropped out; a non-finite
            update is included as its privatized zero substitute).
        mask: bool[k], real (non-padding) slot.
        priv: the chunk's :class:`~ldpsim.fl.privatize.Privatized` updates.
        loss: float32[k] mean local training losses. counts: int32[k] examples.
    """
    return metrics_lib.CohortSums(
        clean=server_lib.weighted_sum(w, priv.clipped),
        noise=server_lib.weighted_sum(w, priv.noise),
        weight=jnp.sum(w),
        weight_sq=jnp.sum(w * w),
        clients=jnp.sum(mask, dtype=jnp.int32),
        clipped=jnp.sum(include & priv.was_clipped, dtype=jnp.int32),
        nonfinite=jnp.sum(mask & ~priv.finite, dtype=jnp.int32),
        loss=jnp.sum(jnp.where(include & priv.finite, loss, 0.0)),
        examples=jnp.sum(jnp.where(include, counts, 0)).astype(jnp.float32),
    )


#: With ``devices=None`` on several host CPU devices, cohorts larger than this run on one
#: device. Measured (jax 0.10.2, benchmarks/scale.py --lenet-round M with 2 host devices):
#: XLA's CPU runtime holds about 46 KB per client until a multi-device round ends (peak RSS
#: 1.25 GB at m = 2,000, 1.56 GB at 8,000, 5.4 GB at 100,000; one device: 1.1 GB at any m),
#: although the compiled program's buffers do not grow with m. glibc's per-thread malloc
#: arenas are part of the cause, not all of it: with MALLOC_ARENA_MAX=1 the LeNet-5 peak was
#: 915 / 932 MB at m = 2,000 / 8,000 but still 1,784 MB at 30,000. Below this size the split
#: costs < 1 GB and runs 1.3-1.7x faster on 2 cores than one device with chunks in flight;
#: above it memory stays set by the chunk. An explicit ``devices=K`` is always honoured.
CPU_MULTI_DEVICE_MAX_CLIENTS = 20_000


def make_round_fn(*, apply_fn: Callable, mechanism: str = "gaussian",
                  client_optimizer: str = "sgd", server_optimizer: str = "fedavg",
                  server_momentum: float = 0.9, local_steps: int | None = 1,
                  local_epochs: int | None = None, batch_size: int = 16,
                  weighting: str = "examples", chunk_size: int | None = None,
                  client_update: Callable | None = None, devices: int | None = 1,
                  chunks_in_flight: int | None = None) -> Callable:
    """Build the pure round function ``round_fn(state, population, round_idx, ids, mask, hyper)``.

    Args:
        apply_fn: the model's ``(params, x) -> logits``.
        mechanism: ``"gaussian"``, ``"laplace"`` or ``"none"`` (no noise drawn).
        client_optimizer: ``"sgd"``, ``"momentum"`` or ``"adam"``.
        server_optimizer: ``"fedavg"``, ``"fedavgm"``, ``"fedadam"``, ``"fedyogi"``.
        server_momentum: FedAvgM momentum.
        local_steps, local_epochs: local work per client (exactly one is not None).
        batch_size: local batch size.
        weighting: ``"examples"`` (|D_k|) or ``"uniform"``.
        chunk_size: at most this many clients per vmapped chunk (memory O(chunk × model));
            None picks the backend's default; see :func:`chunk_layout`.
        client_update: the one-client trainer, default :func:`ldpsim.fl.client.local_update`
            (same signature; research code may substitute its own).
        devices: split the cohort over this many devices (None: all JAX sees), see
            :func:`ldpsim.fl.sharding.map_cohort`; the result equals the one-device
            result up to the float rounding of the cross-device sum.  1 (default): no
            sharding, the single-device program.
        chunks_in_flight: chunks computed per iteration of the cohort scan, added in
            cohort order (None: 3 for one CPU device and at least 256 chunks, else 1; see
            :func:`ldpsim.fl.sharding.resolve_chunks_in_flight`).

    Returns:
        ``round_fn(state, population, round_idx, cohort_ids, cohort_mask, hyper) ->
        (state, RoundMetrics)``, pure and jittable: ``cohort_ids`` int32[m],
        ``cohort_mask`` bool[m] (False = padding slot, contributes nothing), ``hyper``
        a :class:`RoundHyper`.  ``m`` need not be a multiple of ``chunk_size`` or of
        ``devices``.

    Raises:
        LdpsimError: ``devices`` is more than JAX sees (:func:`~ldpsim.fl.sharding.resolve_devices`).
    """
    from ldpsim.fl import client as client_lib

    if client_update is None:
        client_update = client_lib.local_update
    n_devices = sharding.resolve_devices(devices)
    noise_factor = math.sqrt(2.0) if mechanism == "laplace" else 1.0

    def one_client(params, x, y, count, key, hyper):
        train_key, noise_key = jax.random.split(key)
        opt = client_lib.client_optimizer(client_optimizer, hyper.client_lr)
        delta, cm = client_update(params, x, y, count, apply_fn=apply_fn, optimizer=opt,
                                  batch_size=batch_size, key=train_key,
                                  local_steps=local_steps, local_epochs=local_epochs)
        priv = privatize(noise_key, delta, clip=hyper.clip, scale=hyper.sigma,
                         mechanism=mechanism)
        return priv, cm.loss

    def chunk_fn(operands, c_ids, c_mask):
        params, key, round_idx, population, hyper = operands
        x, y, counts = population.gather(c_ids)
        keys = jax.vmap(lambda c: client_key(key, round_idx, c))(c_ids)
        priv, loss = jax.vmap(one_client, in_axes=(None, 0, 0, 0, 0, None))(
            params, x, y, counts, keys, hyper)
        include = c_mask   # a non-finite update enters as its privatized zero substitute
        w = server_lib.aggregation_weights(counts, include, weighting)
        return chunk_sums(w, include, c_mask, priv, loss, counts)

    def round_fn(state: ServerState, population, round_idx, cohort_ids, cohort_mask,
                 hyper: RoundHyper):
        params = state.params
        sums = sharding.map_cohort(
            chunk_fn, metrics_lib.CohortSums.zeros(params),
            (params, state.key, round_idx, population, hyper), cohort_ids, cohort_mask,
            chunk_size=chunk_size, devices=n_devices, chunks_in_flight=chunks_in_flight)
        clean, noise, round_metrics = metrics_lib.finalize_metrics(
            sums, noise_factor * hyper.sigma)
        aggregate = jax.tree_util.tree_map(jnp.add, clean, noise)
        opt = server_lib.server_optimizer(server_optimizer, hyper.server_lr,
                                          momentum=server_momentum)
        new_params, opt_state = server_lib.server_update(params, state.opt_state, aggregate, opt)
        return ServerState(new_params, opt_state, state.key), round_metrics

    return round_fn


def make_eval_fn(apply_fn: Callable, batch_size: int = 500) -> Callable:
    """``evaluate(params, x, y) -> (accuracy, mean cross-entropy)`` over a whole test set.

    Batched with ``lax.map`` (memory O(batch)); the last batch is padded and masked, so
    the result is exact for any test-set size.
    """
    import optax

    def evaluate(params, x, y):
        n = x.shape[0]
        b = min(batch_size, n)
        nb = -(-n // b)
        pad = nb * b - n
        valid = jnp.arange(nb * b) < n
        xp = jnp.concatenate([x, jnp.zeros((pad,) + x.shape[1:], x.dtype)]) if pad else x
        yp = jnp.concatenate([y, jnp.zeros((pad,), y.dtype)]) if pad else y

        def one(batch):
            xb, yb, vb = batch
            logits = apply_fn(params, xb)
            ce = optax.softmax_cross_entropy_with_integer_labels(logits, yb)
            correct = (jnp.argmax(logits, -1) == yb)
            return (jnp.sum(jnp.where(vb, correct, False), dtype=jnp.float32),
                    jnp.sum(jnp.where(vb, ce, 0.0)))

        correct, ce = lax.map(one, (xp.reshape((nb, b) + x.shape[1:]), yp.reshape(nb, b),
                                    valid.reshape(nb, b)))
        return jnp.sum(correct) / n, jnp.sum(ce) / n

    return evaluate


def sample_cohort(seed: int, round_idx: int, population: int, clients_per_round: int,
                  sampling: str = "uniform", capacity: int | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Sample one round's cohort on the host, reproducibly from ``(seed, round_idx)``.

    Args:
        seed, round_idx: seed the NumPy generator ``default_rng([seed, round_idx])``.
        population: N.
        clients_per_round: m (uniform: exactly m distinct clients; Poisson: each client
            independently with probability m/N).
        sampling: ``"uniform"`` or ``"poisson"``.
        capacity: length of the returned arrays (padding slots have mask False);
            defaults to the number sampled.  Grows if a Poisson draw exceeds it.

    Returns:
        ``(ids int32[capacity], mask bool[capacity])``; ids sorted ascending.
    """
    rng = np.random.default_rng([seed, round_idx, 0x636F68])  # "coh"
    if sampling == "uniform":
        ids = np.sort(rng.choice(population, size=clients_per_round, replace=False))
    elif sampling == "poisson":
        ids = np.flatnonzero(rng.random(population) < clients_per_round / population)
    else:
        raise ValueError(f"sampling must be uniform or poisson, got {sampling!r}")
    size = max(int(capacity or 0), len(ids), 1)
    out = np.zeros(size, np.int32)
    out[: len(ids)] = ids
    mask = np.arange(size) < len(ids)
    return out, mask


def noise_scale(config: SimulationConfig) -> tuple[float, float, str]:
    """``(sigma, sensitivity, mechanism)`` for ``config`` via :mod:`ldpsim.privacy.calibration`.

    ``sigma`` is the Gaussian std or the Laplace scale; ε = inf gives ``(0, nan, "none")``.
    """
    if not config.private:
        return 0.0, math.nan, "none"
    from ldpsim.privacy import calibration

    cal = calibration.calibrate(
        config.mechanism, epsilon=config.epsilon,
        delta=config.delta if config.mechanism == "gaussian" else None,
        clip=config.clip, neighbours=config.neighbours,
        method=config.calibration if config.mechanism == "gaussian" else None)
    sigma = cal.sigma if config.mechanism == "gaussian" else cal.scale
    return float(sigma), float(cal.sensitivity), config.mechanism


def _poisson_capacity(config: SimulationConfig) -> int:
    """Fixed cohort capacity under Poisson sampling: exceeded with probability < 1e-9."""
    from scipy import stats

    q = config.clients_per_round / config.population
    cap = int(stats.binom.ppf(1 - 1e-9, config.population, q))
    chunk = resolve_chunk_size(config.chunk_size)   # None: the backend default
    return max(chunk * -(-cap // chunk), 1) if cap > chunk else max(cap, 1)


def _seed_free_width(ds: Any, config: SimulationConfig) -> int | None:
    """Pad width of a disjoint partition that depends on the settings only, not the seed.

    The FedProx synthetic data draws each device's sample count, so the largest client,
    and with it the padded shape, changed with the seed and every seed recompiled the
    round.  With ``B`` the seed-free bound on a device's train samples
    (``info["max_train_per_device"]``, from the cap), a natural client holds at most
    ``B`` and an IID / Dirichlet / shard client at most ``ceil(D·B/N)`` (shards: ``2·ceil(D·B/2N)``) of the ``D``
    devices' samples (those schemes deal ``n // N`` or one more each), so padding to that
    width never truncates: the data are unchanged, only the padding grows.
    ``None`` (pad to the largest client) for other datasets and for ``"sampled"``.
    """
    bound = (ds.info or {}).get("max_train_per_device")
    if bound is None or config.partition == "sampled":
        return None
    if config.partition == "natural":
        return int(bound)
    devices = len(ds.client_names) if ds.client_names else config.population
    total = devices * int(bound)
    if config.partition == "shards":  # two shards of at most ceil(total / 2N) each
        return max(1, 2 * -(-total // (2 * config.population)))
    return max(1, -(-total // config.population))


def build_data(config: SimulationConfig) -> tuple[Any, np.ndarray, np.ndarray]:
    """Load ``config.dataset`` and deal it to ``config.population`` clients.

    Uses :func:`ldpsim.data.load_dataset` and :func:`ldpsim.data.make_population`
    (partition ``config.partition``, Dirichlet ``config.alpha``, seeded by
    ``config.seed``).  FedProx ``synthetic`` data is generated for ``config.population``
    devices.  Returns ``(population, x_test, y_test)``.

    Raises:
        LdpsimError: unknown dataset or partition, missing files (the loader names the fix).
    """
    from ldpsim import data as data_lib

    kwargs = {}
    if config.dataset.lower().replace("-", "_").startswith("synthetic"):
        kwargs = {"num_clients": config.population, "seed": config.seed}
    if config.data_source != "auto":
        kwargs["source"] = config.data_source
    ds = data_lib.load_dataset(config.dataset, config.data_dir, **kwargs)
    population = data_lib.make_population(
        ds, config.partition,
        None if config.partition == "natural" else config.population,
        alpha=config.alpha, examples_per_client=config.examples_per_client,
        max_examples=_seed_free_width(ds, config), seed=config.seed)
    return population, ds.x_test, ds.y_test


@functools.lru_cache(maxsize=32)
def _compiled(model_name: str, input_shape: tuple[int, ...], num_classes: int,
              mechanism: str, client_optimizer: str, server_optimizer: str,
              server_momentum: float, local_steps: int | None, local_epochs: int | None,
              batch_size: int, weighting: str, chunk_size: int | None,
              mode: tuple | None = None, devices: int = 1):
    """(model, jitted round, jitted eval) for one static setting, cached across runs.

    Every traced knob (σ, C, learning rates, seed, round; the modes' z, σ/C, dp_norm_clip,
    dropout rate, quantile-clip and DP-SGD knobs) is an argument, so runs that differ only
    in those (an ε sweep, seeds) reuse one compilation.  ``mode`` is None for the default
    engine round (:func:`make_round_fn`), else the static part of
    :func:`ldpsim.fl.modes.make_mode_round_fn`: ``(privacy_mode, noise_mode,
    adaptive_clip, mindspore_running_min, client_dp_micro_batches, clients_per_round)``.
    ``devices`` (resolved, >= 1) splits the cohort over that many devices; :func:`simulate`
    passes it only when it is not 1, so single-device runs keep their cache keys.
    """
    from ldpsim.models import get_model

    model = get_model(model_name, input_shape=input_shape, num_classes=num_classes)
    common = dict(apply_fn=model.apply, mechanism=mechanism, client_optimizer=client_optimizer,
                  server_optimizer=server_optimizer, server_momentum=server_momentum,
                  local_steps=local_steps, local_epochs=local_epochs, batch_size=batch_size,
                  weighting=weighting, chunk_size=chunk_size, devices=devices)
    if mode is None:
        round_fn = _xla.jit(make_round_fn(**common))
    else:
        from ldpsim.fl.modes import make_mode_round_fn

        privacy_mode, noise_mode, adaptive_clip, running_min, micro, m = mode
        round_fn = _xla.jit(make_mode_round_fn(
            privacy_mode=privacy_mode, noise_mode=noise_mode, clients_per_round=m,
            adaptive_clip=adaptive_clip, mindspore_running_min=running_min,
            client_dp_micro_batches=micro, **common))
    return model, round_fn, _xla.jit(make_eval_fn(model.apply))


def initial_state(config: SimulationConfig, model: Any, population: Any) -> ServerState:
    """The :class:`ServerState` :func:`simulate` starts from for ``config.seed``.

    Model init key ``fold_in(key(seed), "init")``, round root key
    ``fold_in(key(seed), "roun")`` (distinct from every round index's use).
    """
    root = jax.random.key(config.seed)
    params = model.init(jax.random.fold_in(root, 0x696E6974),  # "init"
                        jnp.zeros((1,) + tuple(population.input_shape), jnp.float32))
    return init_state(params, jax.random.fold_in(root, 0x726F756E),  # "roun"
                      server_optimizer=config.server_optimizer,
                      server_momentum=config.server_momentum)


def uses_modes(config: SimulationConfig) -> bool:
    """Whether ``config`` needs :func:`ldpsim.fl.modes.make_mode_round_fn` (a privacy mode
    other than ``"ldp"``, aggregate noise or DP-SGD clients) rather than :func:`make_round_fn`."""
    return (config.privacy_mode != "ldp" or config.noise_mode != "per-client"
            or config.client_dp)


#: Columns every history row carries beyond the engine's metrics (NaN where not applicable).
MODE_COLUMNS = ("clip_bound", "noise_sum_std", "survivors", "noise_variance_fraction",
                "unclipped_fraction", "model_change_norm")


@jax.jit
def _change_norm(old: PyTree, new: PyTree) -> jax.Array:
    from ldpsim.privacy.adaptive import global_change_norm

    return global_change_norm(old, new)


class _ModeSetup(NamedTuple):
    """Host-side settings of one run's privacy mode (see :func:`_mode_setup`)."""

    mechanism: str            # static mechanism of the round
    phyper: Any               # ldpsim.fl.modes.PrivacyHyper
    sigma_per_clip: float     # MindSpore σ_t/C_t (NaN otherwise)
    sens_per_clip: float      # MindSpore sensitivity / C_t: 1 (add-remove) or 2 (replace)
    value_multiplier: float   # central/distributed: z (z_Δ with adaptive clipping)


def _mode_setup(config: SimulationConfig, mechanism: str) -> _ModeSetup:
    """Static mechanism and traced :class:`~ldpsim.fl.modes.PrivacyHyper` for ``config``."""
    from ldpsim.fl import modes
    from ldpsim.privacy import adaptive

    kw = dict(client_dp_clip=config.client_dp_clip,
              client_dp_noise=config.client_dp_noise_multiplier)
    a, unit, z_value = math.nan, math.nan, math.nan
    if config.privacy_mode == "ldp":
        return _ModeSetup(mechanism, modes.PrivacyHyper.create(**kw), a, unit, z_value)
    if config.privacy_mode == "mindspore":
        a = modes.mindspore_sigma_per_clip(config.dp_eps, config.dp_delta,
                                           neighbours=config.mindspore_neighbours)
        unit = 2.0 if config.mindspore_neighbours == "replace" else 1.0
        kw.update(sigma_per_clip=a, dp_norm_clip=config.dp_norm_clip)
    else:
        z_value, count_std = config.noise_multiplier, 0.0
        if config.adaptive_clip:
            z_value, count_std = adaptive.adaptive_noise_split(
                config.noise_multiplier, config.clients_per_round, config.clipped_count_stddev)
        kw.update(noise_multiplier=z_value, count_stddev=count_std,
                  target_quantile=config.target_quantile, clip_lr=config.clip_learning_rate,
                  dropout_rate=config.dropout_rate)
    return _ModeSetup("gaussian", modes.PrivacyHyper.create(**kw), a, unit, z_value)


def _mode_base(config: SimulationConfig, sigma: float, sens: float, mechanism: str
               ) -> dict:
    """The run-level columns that depend on the privacy mode."""
    mode = config.privacy_mode
    out = {"mechanism": mechanism, "neighbours": config.neighbours, "epsilon": config.epsilon,
           "delta": config.delta if mechanism == "gaussian" else math.nan,
           "clip": config.clip, "sensitivity": sens, "sigma": sigma}
    if mode == "mindspore":   # per-round C_t: clip/sensitivity/sigma filled per row
        out.update(mechanism="gaussian", neighbours=config.mindspore_neighbours,
                   epsilon=config.dp_eps, delta=config.dp_delta, clip=math.nan)
    elif mode in ("central", "distributed"):
        # User-level central DP; neighbours as accounted (central_epsilon).
        out.update(mechanism="gaussian", epsilon=math.nan, delta=config.delta,
                   neighbours="add-remove" if config.sampling == "poisson" else "replace")
    return out


def _ldp_aux_columns(config: SimulationConfig, row: dict, sigma: float, mechanism: str,
                     sum_w2: float) -> dict:
    """:data:`MODE_COLUMNS` of a default-engine round, from what the host knows."""
    factor = math.sqrt(2.0) if mechanism == "laplace" else 1.0
    return {
        "clip_bound": config.clip,
        "noise_sum_std": factor * sigma * math.sqrt(sum_w2),
        "survivors": int(row["clients"]),
        "noise_variance_fraction": 1.0,
        "unclipped_fraction": math.nan,
    }


def _sum_w2(config: SimulationConfig, counts: np.ndarray, ids: np.ndarray,
            mask: np.ndarray) -> float:
    """Σ_k w_k² of a cohort (w = |D_k|, or 1 for uniform; every participant is aggregated)."""
    if config.weighting == "uniform":
        return float(np.count_nonzero(mask))
    c = counts[ids[mask]].astype(np.float64)
    return float(np.sum(c * c))


def simulate(config: SimulationConfig, *, progress: bool = False,
             callback: Callable[[dict], None] | None = None, data: Any = None
             ) -> list[dict]:
    """Run the simulation described by ``config`` and return its metrics history.

    The default (``privacy_mode="ldp"``, ``noise_mode="per-client"``, no DP-SGD clients)
    runs :func:`make_round_fn`; any other setting runs
    :func:`ldpsim.fl.modes.make_mode_round_fn` through the same compile cache, with its
    knobs traced and its state (MindSpore's per-client C_t, the adaptive central C)
    carried across rounds.

    Args:
        config: a :class:`~ldpsim.fl.config.SimulationConfig`.
        progress: show a tqdm progress bar (round, accuracy).
        callback: called with each history row as soon as it exists (e.g. to write a CSV
            incrementally).
        data: optional ``(population, x_test, y_test)`` to use instead of
            :func:`build_data` (research code, tests); ``config.population`` is then
            informational and the population's own size is used.

    Returns:
        One dict per evaluated round (every ``eval_every`` rounds and the last), with the
        DESIGN.md Results columns: dataset, model, mechanism, neighbours, epsilon, delta,
        clip, sensitivity, sigma, clients_per_round, population, seed, privacy_mode,
        noise_mode, noise_multiplier, round, accuracy, loss, then the round's
        :class:`~ldpsim.fl.metrics.RoundMetrics` (noise_norm, signal_norm, snr, cosine,
        clip_fraction, nonfinite_clients, clients, n_eff, theory_noise_norm, train_loss),
        the mode columns :data:`MODE_COLUMNS` (clip_bound: mean C of the round's included
        clients; noise_sum_std: std of the noise on the weighted sum, ``√(Σw²σ²)``;
        survivors: clients in the aggregate; noise_variance_fraction: distributed
        realised/target noise variance; unclipped_fraction: the released b̄ of adaptive
        clipping, else NaN; model_change_norm: ‖W_{t+1} − W_t‖₂), max_participation (most
        rounds any one client has taken part in so far), epsilon_spent, client_dp_epsilon
        and wall_time (seconds since the start, compilation included).

        sampler_delta_floor (a run column): no δ below it is delivered, because the float
        noise sampler's tails are bounded
        (:func:`ldpsim.privacy.calibration.sampler_delta_floor`); where it exceeds the
        claimed δ a :class:`~ldpsim.privacy.calibration.SamplerTailWarning` is issued and
        epsilon_spent is ``inf`` (no ε holds at that δ).

        epsilon_spent: ``"ldp"``: the most-sampled client's LDP ε at total δ =
        ``config.delta`` (exact composition of Gaussians, Balle & Wang 2018 Thm. 8, via
        :class:`ldpsim.privacy.accounting.LdpAccountant`; basic composition k·ε for
        Laplace; NaN without privacy).  ``"mindspore"``: the same accountant with the
        per-round mechanism ``N(0, (a·C_t)²)`` of sensitivity C_t (add-remove) or 2C_t
        (replace) — every round is exactly (dp_eps, dp_delta)-DP whatever C_t — at total
        δ = dp_delta.  ``"central"``: user-level ε of DP-FedAvg after ``round`` rounds
        with q = m/N (:func:`ldpsim.fl.modes.central_epsilon`, RDP, δ = ``config.delta``).
        ``"distributed"``: the same with the smallest effective multiplier
        ``z·√(survivors/m)`` of the rounds so far (the dropout shortfall), an upper bound.
        In the mindspore/central/distributed rows, sigma is the noise std (mindspore: the
        mean per-client σ_t; central: z_Δ·C on the sum; distributed: per client
        zC/√m), sensitivity the bound it is calibrated to, and epsilon the per-round local
        ε (dp_eps; NaN for central/distributed).  client_dp_epsilon (DP-SGD clients):
        sample-level ε of the worst-case client (the smallest client at the highest
        participation count) by :func:`ldpsim.fl.dp_client.dp_client_epsilon`
        (``method="shuffle"``, δ = ``config.delta``); NaN without DP-SGD clients.

    Raises:
        LdpsimError: bad configuration or data.
    """
    start = time.perf_counter()
    n_devices = sharding.resolve_devices(config.devices)   # fails before loading data
    if (config.devices is None and n_devices > 1 and jax.process_count() == 1
            and jax.default_backend() == "cpu"
            and config.clients_per_round > CPU_MULTI_DEVICE_MAX_CLIENTS):
        n_devices = 1   # see CPU_MULTI_DEVICE_MAX_CLIENTS
    on_devices = {} if n_devices == 1 else {"devices": n_devices}
    if data is None:
        data = build_data(config)
    population, x_test, y_test = data
    if config.clients_per_round > population.num_clients:
        raise LdpsimError(f"clients_per_round must be <= population "
                          f"({population.num_clients}), got {config.clients_per_round}")
    sigma, sens, mechanism = noise_scale(config)
    modal = uses_modes(config)
    local_steps = None if config.local_epochs else config.local_steps
    static = (model_name_for(config.model, population), tuple(population.input_shape),
              int(population.num_classes))
    if modal:
        from ldpsim.fl.modes import init_privacy_state

        setup = _mode_setup(config, mechanism)
        if config.privacy_mode != "ldp":
            sigma, sens, mechanism = 0.0, config.clip, setup.mechanism
        mode_key = (config.privacy_mode, config.noise_mode, config.adaptive_clip,
                    config.mindspore_clip_rule == "running-min",
                    config.client_dp_micro_batches if config.client_dp else None,
                    config.clients_per_round)
        model, round_fn, evaluate = _compiled(
            *static, setup.mechanism, config.client_optimizer, config.server_optimizer,
            float(config.server_momentum), local_steps, config.local_epochs,
            config.batch_size, config.weighting, config.chunk_size, mode_key, **on_devices)
        pstate = init_privacy_state(config.privacy_mode, num_clients=population.num_clients,
                                    clip=config.clip, adaptive_clip=config.adaptive_clip)
    else:
        model, round_fn, evaluate = _compiled(
            *static, mechanism, config.client_optimizer, config.server_optimizer,
            float(config.server_momentum), local_steps, config.local_epochs,
            config.batch_size, config.weighting, config.chunk_size, **on_devices)
    state = initial_state(config, model, population)
    # Placed once on every device of the mesh (not copied to each device every round).
    state, population = sharding.replicate((state, population), n_devices)
    if modal:
        pstate = sharding.replicate(pstate, n_devices)
    hyper = RoundHyper.create(sigma=sigma, clip=config.clip, client_lr=config.client_lr,
                              server_lr=config.server_lr)
    x_test = jnp.asarray(x_test, jnp.float32)
    y_test = jnp.asarray(y_test, jnp.int32)
    capacity = (_poisson_capacity(config) if config.sampling == "poisson"
                else config.clients_per_round)
    base = _run_columns(config, model.name, population.num_clients, sigma, sens, mechanism,
                        setup if modal else None)
    epsilon_of = _epsilon_spent(config, population.num_clients, sigma, sens, mechanism,
                                setup if modal else None)
    client_dp_epsilon = _client_dp_epsilon(config, population)
    counts = None if modal else np.asarray(population.client_counts())
    participation = np.zeros(population.num_clients, np.int64)
    z_eff_min = math.inf
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=config.rounds, desc="rounds", unit="round")
    history: list[dict] = []
    try:
        for t in range(config.rounds):
            ids, mask = sample_cohort(config.seed, t, population.num_clients,
                                      config.clients_per_round, config.sampling, capacity)
            prev_params = state.params
            if modal:
                state, pstate, rm, aux = round_fn(state, pstate, population, jnp.int32(t),
                                                  ids, mask, hyper, setup.phyper)
                if config.privacy_mode == "distributed":
                    frac = float(aux.noise_variance_fraction)
                    z_eff_min = min(z_eff_min, config.noise_multiplier * math.sqrt(frac))
            else:
                state, rm = round_fn(state, population, jnp.int32(t), ids, mask, hyper)
            participation[ids[mask]] += 1
            if (t + 1) % config.eval_every == 0 or t == config.rounds - 1:
                # Evaluated once, on one local device (not redundantly on every mesh
                # device): the local copy of the replicated parameters.
                acc, loss = evaluate(state.params if n_devices == 1 else
                                     jax.tree_util.tree_map(lambda a: a.addressable_data(0),
                                                            state.params),
                                     x_test, y_test)
                k_max = int(participation.max())
                row = _history_row(
                    base, t, acc, loss, rm._asdict(),
                    (lambda r: _modal_columns(config, r, aux, setup)) if modal else
                    (lambda r: _ldp_aux_columns(config, r, sigma, mechanism,
                                                _sum_w2(config, counts, ids, mask))),
                    change=_change_norm(prev_params, state.params), k_max=k_max,
                    epsilon=epsilon_of(k_max, t + 1, z_eff_min),
                    client_dp_epsilon=client_dp_epsilon(k_max),
                    wall_time=time.perf_counter() - start)
                history.append(row)
                if callback is not None:
                    callback(row)
                if bar is not None:
                    bar.set_postfix(accuracy=f"{row['accuracy']:.4f}")
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return history


def model_name_for(name: str, population: Any) -> str:
    """``name``, or for ``"auto"`` the model that fits ``population``'s inputs
    (:func:`ldpsim.models.resolve_model_name`: LeNet-5 for images, ``char_lstm`` for
    integer token sequences, MLP for feature vectors), judged by the stored dtype."""
    from ldpsim.models import resolve_model_name

    stored = getattr(population, "x", None)
    stored = getattr(population, "base_x", None) if stored is None else stored
    dtype = None if stored is None else stored.dtype
    return resolve_model_name(name, tuple(population.input_shape), input_dtype=dtype)


def _run_columns(config: SimulationConfig, model_name: str, population: int, sigma: float,
                 sens: float, mechanism: str, setup: _ModeSetup | None = None) -> dict:
    """The run-level columns every history row of ``config`` starts with."""
    return {
        "dataset": config.dataset,
        "model": model_name,
        **_mode_base(config, sigma, sens, mechanism),
        "clients_per_round": config.clients_per_round,
        "population": population, "seed": config.seed,
        "privacy_mode": config.privacy_mode, "noise_mode": config.noise_mode,
        "noise_multiplier": (config.noise_multiplier
                             if config.privacy_mode in ("central", "distributed") else math.nan),
        "sampler_delta_floor": _sampler_floor(config, sigma, sens, mechanism, setup)[0],
    }


def _history_row(base: dict, t: int, accuracy: Any, loss: Any, metrics: dict,
                 columns: Callable[[dict], dict], *, change: Any, k_max: int, epsilon: float,
                 client_dp_epsilon: float, wall_time: float) -> dict:
    """One history row: run columns, round ``t + 1``'s evaluation and engine metrics, then
    the mode's columns (``columns(row_so_far)``), the model change and the privacy spent."""
    row = dict(base, round=t + 1, accuracy=float(accuracy), loss=float(loss))
    row.update({k: _scalar(v) for k, v in metrics.items() if k != "update_norm"})
    row.update(columns(row))
    row["model_change_norm"] = float(change)
    row["max_participation"] = k_max
    row["epsilon_spent"] = epsilon
    row["client_dp_epsilon"] = client_dp_epsilon
    row["wall_time"] = wall_time
    return row


def _modal_columns(config: SimulationConfig, row: dict, aux: Any, setup: _ModeSetup) -> dict:
    """:data:`MODE_COLUMNS` (and the per-round sigma/sensitivity/clip) from a ModeAux."""
    out = {k: _scalar(getattr(aux, k)) for k in MODE_COLUMNS if k != "model_change_norm"}
    mode = config.privacy_mode
    if mode == "ldp":
        out["clip_bound"] = config.clip   # fixed; the kernel's mean is the same value
    elif mode == "mindspore":
        c = out["clip_bound"]
        out.update(sigma=setup.sigma_per_clip * c, sensitivity=setup.sens_per_clip * c)
    elif mode == "central":
        c = out["clip_bound"]
        out.update(sigma=setup.value_multiplier * c, sensitivity=_sum_sensitivity(config) * c)
    else:   # distributed: each client's std zC/√m
        c = out["clip_bound"]
        out.update(sigma=setup.value_multiplier * c / math.sqrt(config.clients_per_round),
                   sensitivity=_sum_sensitivity(config) * c)
    return out


def _sum_sensitivity(config: SimulationConfig) -> float:
    """Sensitivity of the clipped sum per unit of C in the central/distributed modes: 2
    for the engine's fixed-size ("uniform") cohorts (replace one user), 1 for Poisson
    (add or remove one user); see :func:`ldpsim.privacy.accounting.sensitivity_factor`."""
    from ldpsim.privacy.accounting import sensitivity_factor

    return sensitivity_factor("poisson" if config.sampling == "poisson" else "fixed")


def _sampler_floor(config: SimulationConfig, sigma: float, sens: float, mechanism: str,
                   setup: _ModeSetup | None) -> tuple[float, float]:
    """``(floor, claimed δ)``: :func:`ldpsim.privacy.calibration.sampler_delta_floor` of the
    run's noise (per client in ldp/mindspore, on the sum in central mode) and the δ the
    run claims (0 for Laplace). NaN floor where it is not computed (no noise; distributed
    DP, whose summed noise is not one draw of the sampler)."""
    from ldpsim.privacy import calibration, sampling

    mode = config.privacy_mode
    impl = sampling.resolve_impl(jax.random.key(0), None)
    if mechanism == "none" or mode == "distributed":
        return math.nan, math.nan
    if mode == "mindspore":
        return (calibration.sampler_delta_floor(setup.sigma_per_clip, setup.sens_per_clip,
                                                impl=impl), config.dp_delta)
    if mode == "central":
        if setup.value_multiplier <= 0:
            return math.nan, math.nan
        return (calibration.sampler_delta_floor(setup.value_multiplier,
                                                _sum_sensitivity(config), impl=impl),
                config.delta)
    if mechanism == "laplace":
        # Claimed pure DP: any positive floor breaks it; warn from 1e-6 (per-round ε ≳ 3.6).
        return calibration.sampler_delta_floor(sigma, sens, mechanism="laplace"), 1e-6
    return calibration.sampler_delta_floor(sigma, sens, impl=impl), config.delta


def _tail_limited(epsilon_of: Callable, floor: float, claimed_delta: float,
                  mechanism: str) -> Callable:
    """Warn that the sampler cannot deliver the claimed δ; for Gaussian noise, ε at that δ
    is then infinite (no ε holds), so ``epsilon_of`` reports ``inf`` once anything was
    released."""
    import warnings

    from ldpsim.privacy.calibration import SamplerTailWarning

    if mechanism == "laplace":
        warnings.warn(
            f"float32 Laplace noise is bounded (|x| <= 16.64 b): at this epsilon the release "
            f"is not pure epsilon-DP; worst-case neighbours are told apart with probability "
            f">= {floor:.3g} (column sampler_delta_floor)", SamplerTailWarning, stacklevel=4)
        return epsilon_of
    warnings.warn(
        f"the Gaussian sampler's bounded tails make delta={claimed_delta:g} impossible at "
        f"this noise level: worst-case neighbours are told apart with probability >= "
        f"{floor:.3g} whatever epsilon, so epsilon_spent is reported as inf; use a smaller "
        f"epsilon per round or a larger delta (see docs/privacy_sharp_edges.md)",
        SamplerTailWarning, stacklevel=4)
    return lambda k, t, z: math.inf if max(k, t) > 0 else 0.0


def _epsilon_spent(config: SimulationConfig, population: int, sigma: float, sens: float,
                   mechanism: str, setup: _ModeSetup | None
                   ) -> Callable[[int, int, float], float]:
    """``epsilon_of(max_participation, rounds, smallest_effective_z)`` for the mode; ``inf``
    (with a :class:`~ldpsim.privacy.calibration.SamplerTailWarning`) where the sampler's
    bounded tails cannot deliver the claimed δ (:func:`_sampler_floor`)."""
    epsilon_of = _epsilon_spent_ideal(config, population, sigma, sens, mechanism, setup)
    floor, claimed_delta = _sampler_floor(config, sigma, sens, mechanism, setup)
    if floor > claimed_delta:
        epsilon_of = _tail_limited(epsilon_of, floor, claimed_delta, mechanism)
    return epsilon_of


def _epsilon_spent_ideal(config: SimulationConfig, population: int, sigma: float, sens: float,
                         mechanism: str, setup: _ModeSetup | None
                         ) -> Callable[[int, int, float], float]:
    """:func:`_epsilon_spent` for ideal (unbounded) noise."""
    mode = config.privacy_mode
    if mode in ("ldp", "mindspore"):
        if mode == "mindspore":
            acc = _accountant("gaussian", setup.sigma_per_clip, setup.sens_per_clip,
                              config.dp_delta)
        else:
            acc = _accountant(mechanism, sigma, sens, config.delta)
        return lambda k, t, z: acc.epsilon(k) if acc else math.nan
    from ldpsim.fl.modes import central_epsilon

    cache: dict = {}

    def epsilon_of(k: int, t: int, z_eff: float) -> float:
        z = config.noise_multiplier if mode == "central" else z_eff
        if (z, t) not in cache:
            cache[(z, t)] = central_epsilon(
                noise_multiplier=z, clients_per_round=config.clients_per_round,
                population=population, rounds=t, delta=config.delta, sampling=config.sampling)
        return cache[(z, t)]

    return epsilon_of


def _client_dp_epsilon(config: SimulationConfig, population: Any) -> Callable[[int], float]:
    """``epsilon_of(max_participation)``: sample-level ε of the worst-case DP-SGD client."""
    if not config.client_dp:
        return lambda k: math.nan
    from ldpsim.fl.dp_client import dp_client_epsilon

    counts = np.asarray(population.client_counts())
    n = int(counts[counts > 0].min()) if np.any(counts > 0) else 1
    b = config.batch_size
    steps = (config.local_epochs * -(-n // b) if config.local_epochs else config.local_steps)

    @functools.lru_cache(maxsize=None)
    def epsilon_of(k: int) -> float:
        return float(dp_client_epsilon(
            noise_multiplier=config.client_dp_noise_multiplier, batch_size=b, num_examples=n,
            local_steps=steps, rounds=k, delta=config.delta, method="shuffle").epsilon)

    return epsilon_of


def _accountant(mechanism: str, sigma: float, sensitivity: float, delta: float):
    """LDP accountant of one client: exact Gaussian composition, basic for Laplace."""
    if mechanism == "none":
        return None
    from ldpsim.privacy.accounting import LdpAccountant

    if mechanism == "gaussian":
        return LdpAccountant(sigma, sensitivity, delta, mechanism="gaussian", method="analytic")
    return LdpAccountant(sigma, sensitivity, None, mechanism="laplace", method="basic")


def _scalar(v: jax.Array) -> float | int:
    a = np.asarray(v)
    return int(a) if np.issubdtype(a.dtype, np.integer) else float(a)
