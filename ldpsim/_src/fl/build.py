"""What a simulation is built from: the clients' data, the model, its initial state and the
compiled round.

:func:`build_data` loads the dataset and deals it to the clients; :func:`model_name_for`
picks the model that fits the data (``"auto"``) and :func:`model_dimension` its number of
parameters; :func:`initial_state` is the server state a run starts from for its seed;
:func:`compiled_round` is the jitted round and evaluation of one static setting, cached
across runs so that runs differing only in traced knobs compile once.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ldpsim._src import _xla
from ldpsim._src.data import partition as partition_lib
from ldpsim._src.data import registry as data_registry
from ldpsim._src.fl import modes
from ldpsim._src.fl.config import SimulationConfig
from ldpsim._src.fl.round import ServerState, init_state, make_eval_fn, make_round_fn
from ldpsim._src.models import get_model, resolve_model_name

__all__ = ["build_data", "compiled_round", "initial_state", "model_dimension", "model_name_for",
           "seed_free_width", "smallest_client"]


def seed_free_width(ds: Any, config: SimulationConfig) -> int | None:
    """Pad width of a disjoint partition that depends on the settings only, not the seed.

    The FedProx synthetic data draws each device's sample count, so the largest client,
    and with it the padded shape, changed with the seed and every seed recompiled the
    round.  With ``B`` the seed-free bound on a device's train samples
    (``info["max_train_per_device"]``, from the cap), a natural client holds at most
    ``B`` and an IID / Dirichlet / shard client at most ``ceil(D·B/N)`` (shards:
    ``2·ceil(D·B/2N)``) of the ``D`` devices' samples (those schemes deal ``n // N`` or
    one more each), so padding to that width never truncates: the data are unchanged,
    only the padding grows. ``None`` (pad to the largest client) for other datasets and
    for ``"sampled"``.
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
    kwargs = {}
    if config.dataset.lower().replace("-", "_").startswith("synthetic"):
        kwargs = {"num_clients": config.population, "seed": config.seed}
    if config.data_source != "auto":
        kwargs["source"] = config.data_source
    ds = data_registry.load_dataset(config.dataset, config.data_dir, **kwargs)
    population = partition_lib.make_population(
        ds, config.partition,
        None if config.partition == "natural" else config.population,
        alpha=config.alpha, examples_per_client=config.examples_per_client,
        max_examples=seed_free_width(ds, config), seed=config.seed)
    return population, ds.x_test, ds.y_test


def model_name_for(name: str, population: Any) -> str:
    """``name``, or for ``"auto"`` the model that fits ``population``'s inputs
    (:func:`ldpsim.models.resolve_model_name`: LeNet-5 for images, ``char_lstm`` for
    integer token sequences, MLP for feature vectors), judged by the stored dtype."""
    stored = getattr(population, "x", None)
    stored = getattr(population, "base_x", None) if stored is None else stored
    dtype = None if stored is None else stored.dtype
    return resolve_model_name(name, tuple(population.input_shape), input_dtype=dtype)


def smallest_client(population: Any) -> int:
    """The fewest examples a client holds (1 if none holds any): the worst case of the
    clients' sample-level accounting."""
    counts = np.asarray(population.client_counts())
    return int(counts[counts > 0].min()) if np.any(counts > 0) else 1


@functools.lru_cache(maxsize=32)
def model_dimension(model_name: str, input_shape: tuple[int, ...], num_classes: int) -> int:
    """The number of parameters d of the model (the dimension the report randomizers are
    calibrated for), from the shapes of its initial parameters (nothing is computed)."""
    model = get_model(model_name, input_shape=input_shape, num_classes=num_classes)
    shapes = jax.eval_shape(model.init, jax.random.key(0),
                            jax.ShapeDtypeStruct((1,) + tuple(input_shape), jnp.float32))
    return int(sum(math.prod(x.shape) for x in jax.tree_util.tree_leaves(shapes)))


def initial_state(config: SimulationConfig, model: Any, population: Any,
                  mechanism: modes.RoundMechanism | None = None) -> ServerState:
    """The :class:`~ldpsim.fl.ServerState` :func:`~ldpsim._src.fl.simulate.simulate` starts from for
    ``config.seed``: model init key ``fold_in(key(seed), "init")``, round root key
    ``fold_in(key(seed), "roun")`` (distinct from every round index's use), and the
    privacy mode's initial state (``mechanism.init``; none for local DP)."""
    root = jax.random.key(config.seed)
    params = model.init(jax.random.fold_in(root, 0x696E6974),  # "init"
                        jnp.zeros((1,) + tuple(population.input_shape), jnp.float32))
    privacy = () if mechanism is None else mechanism.init(population.num_clients, config.clip)
    return init_state(params, jax.random.fold_in(root, 0x726F756E),  # "roun"
                      server_optimizer=config.server_optimizer,
                      server_momentum=config.server_momentum, privacy=privacy)


@functools.lru_cache(maxsize=32)
def compiled_round(model_name: str, input_shape: tuple[int, ...], num_classes: int,
                   mechanism: modes.RoundMechanism, client_optimizer: str, server_optimizer: str,
                   server_momentum: float, local_steps: int | None, local_epochs: int | None,
                   batch_size: int, weighting: str, chunk_size: int | None, devices: int = 1,
                   lanes: bool = False):
    """(model, jitted round, jitted eval) for one static setting, cached across runs.

    Every traced knob (σ, C, learning rates, seed, round, the mode's knobs) is an
    argument of the round, so runs that differ only in those (an ε sweep, seeds) reuse one
    compilation. ``lanes``: the round and the evaluation vmapped over a leading axis of
    the state and the knobs (:func:`ldpsim._src.fl.simulate.simulate_lanes`).
    """
    model = get_model(model_name, input_shape=input_shape, num_classes=num_classes)
    round_fn = make_round_fn(
        apply_fn=model.apply, mechanism=mechanism, client_optimizer=client_optimizer,
        server_optimizer=server_optimizer, server_momentum=server_momentum,
        local_steps=local_steps, local_epochs=local_epochs, batch_size=batch_size,
        weighting=weighting, chunk_size=chunk_size, devices=devices)
    evaluate = make_eval_fn(model.apply)
    if lanes:
        round_fn = jax.vmap(round_fn, in_axes=(0, None, None, None, None, 0))
        evaluate = jax.vmap(evaluate, in_axes=(0, None, None))
    return model, _xla.jit(round_fn), _xla.jit(evaluate)
