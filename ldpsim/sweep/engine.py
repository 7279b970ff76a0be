"""The default sweep runner: cells run through the simulation engine (:mod:`ldpsim.fl`).

A group of cells differs only in ε. Without ``vmap_epsilon`` each cell is one call of
:func:`ldpsim.fl.simulate.simulate`; the engine caches its jitted round per static setting
and σ is a traced argument, so the whole group (and every seed) shares one compilation.

With ``vmap_epsilon`` the finite-ε cells of a group run as **one** program: the engine's
pure round function (:func:`~ldpsim.fl.simulate.make_round_fn`) is ``jax.vmap``-ed over
(server state, :class:`~ldpsim.fl.simulate.RoundHyper`) with one σ per ε, on the same data,
cohorts and keys as the one-by-one runs. So the results equal running the cells one by
one up to float rounding (tested), and the ε axis costs one dispatch per round instead of
one per cell. ε = ∞ (no noise: a different static program) runs on its own.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ldpsim import _xla
from ldpsim._checks import LdpsimError
from ldpsim.sweep.config import Cell

__all__ = ["EngineRunner", "simulate_epsilon_axis"]

#: Settings that determine the clients' data (cached across the cells of a sweep).
_DATA_FIELDS = ("dataset", "data_dir", "partition", "alpha", "population", "examples_per_client", "seed")


def make_config(params: dict[str, Any]):
    """``SimulationConfig(**params)``, with unknown settings named in the error."""
    from ldpsim.fl.config import SimulationConfig

    fields = {f.name for f in dataclasses.fields(SimulationConfig)}
    unknown = sorted(set(params) - fields)
    if unknown:
        raise LdpsimError(
            f"unknown run setting(s) {', '.join(unknown)}; valid settings are: {', '.join(sorted(fields))}"
        )
    return SimulationConfig(**params)


def simulate_epsilon_axis(configs: Sequence[Any], *, data: Any = None,
                          on_round: Callable[[], None] | None = None) -> list[list[dict]]:
    """Run configs that differ only in (finite) ε as one vmapped program.

    Args:
        configs: :class:`~ldpsim.fl.config.SimulationConfig` objects, identical except ``epsilon``
            (all finite).
        data: ``(population, x_test, y_test)``; default :func:`ldpsim.fl.simulate.build_data`.
        on_round: called after every round.

    Returns:
        One history per config, with the rows :func:`ldpsim.fl.simulate.simulate` returns
        (``wall_time`` is the shared elapsed time of the vmapped program).
    """
    import jax
    import jax.numpy as jnp
    import numpy as np

    from ldpsim.fl import simulate as sim
    from ldpsim.models import get_model

    if not configs:
        return []
    c0 = configs[0]
    for c in configs:
        if dataclasses.replace(c, epsilon=c0.epsilon) != c0 or not c.private:
            raise LdpsimError("simulate_epsilon_axis needs configs that differ only in a finite epsilon")
        if sim.uses_modes(c):
            raise LdpsimError("simulate_epsilon_axis runs the default engine only (privacy_mode='ldp', "
                              "noise_mode='per-client', client_dp=false); use simulate() for the other modes")
    start = time.perf_counter()
    population, x_test, y_test = sim.build_data(c0) if data is None else data
    if c0.clients_per_round > population.num_clients:
        raise LdpsimError(f"clients_per_round must be <= population ({population.num_clients}), "
                          f"got {c0.clients_per_round}")
    scales = [sim.noise_scale(c) for c in configs]
    mechanism = scales[0][2]
    model = get_model(sim.model_name_for(c0.model, population),
                      input_shape=tuple(population.input_shape),
                      num_classes=int(population.num_classes))
    round_fn = sim.make_round_fn(
        apply_fn=model.apply, mechanism=mechanism, client_optimizer=c0.client_optimizer,
        server_optimizer=c0.server_optimizer, server_momentum=float(c0.server_momentum),
        local_steps=None if c0.local_epochs else c0.local_steps, local_epochs=c0.local_epochs,
        batch_size=c0.batch_size, weighting=c0.weighting, chunk_size=c0.chunk_size)
    vround = _xla.jit(jax.vmap(round_fn, in_axes=(0, None, None, None, None, 0)))
    veval = _xla.jit(jax.vmap(sim.make_eval_fn(model.apply), in_axes=(0, None, None)))
    # The same initial state as simulate() builds for this seed, replicated over ε.
    state = sim.initial_state(c0, model, population)
    e = len(configs)
    state = jax.tree_util.tree_map(lambda x: jnp.stack([x] * e), state)
    hyper = sim.RoundHyper(*(jnp.stack(v) for v in zip(*(
        sim.RoundHyper.create(sigma=s, clip=c.clip, client_lr=c.client_lr, server_lr=c.server_lr)
        for (s, _, _), c in zip(scales, configs)))))
    x_test = jnp.asarray(x_test, jnp.float32)
    y_test = jnp.asarray(y_test, jnp.int32)
    capacity = sim._poisson_capacity(c0) if c0.sampling == "poisson" else c0.clients_per_round
    epsilon_of = [sim._epsilon_spent(c, population.num_clients, sigma, sens, mech, None)
                  for (sigma, sens, mech), c in zip(scales, configs)]
    bases = [sim._run_columns(c, model.name, population.num_clients, sigma, sens, mech)
             for (sigma, sens, mech), c in zip(scales, configs)]
    participation = np.zeros(population.num_clients, np.int64)
    counts = np.asarray(population.client_counts())
    vchange = jax.jit(jax.vmap(sim._change_norm))
    histories: list[list[dict]] = [[] for _ in configs]
    for t in range(c0.rounds):
        ids, mask = sim.sample_cohort(c0.seed, t, population.num_clients, c0.clients_per_round,
                                      c0.sampling, capacity)
        prev_params = state.params
        state, rm = vround(state, population, jnp.int32(t), ids, mask, hyper)
        participation[ids[mask]] += 1
        if (t + 1) % c0.eval_every == 0 or t == c0.rounds - 1:
            acc, loss = veval(state.params, x_test, y_test)
            acc, loss = jax.device_get((acc, loss))
            metrics = {k: np.asarray(v) for k, v in zip(rm._fields, jax.device_get(tuple(rm)))}
            k_max = int(participation.max())
            change = np.asarray(vchange(prev_params, state.params))
            sum_w2 = sim._sum_w2(c0, counts, ids, mask)
            elapsed = time.perf_counter() - start
            for i, (c, (sigma, sens, mech)) in enumerate(zip(configs, scales)):
                row = sim._history_row(
                    bases[i], t, acc[i], loss[i], {k: v[i] for k, v in metrics.items()},
                    lambda r, c=c, sigma=sigma, mech=mech: sim._ldp_aux_columns(
                        c, r, sigma, mech, sum_w2),
                    change=change[i], k_max=k_max, epsilon=epsilon_of[i](k_max, t + 1, math.inf),
                    client_dp_epsilon=math.nan, wall_time=elapsed)
                histories[i].append(row)
        if on_round is not None:
            on_round()
    return histories


class EngineRunner:
    """Runs sweep cells with the simulation engine (see the module docstring).

    Args:
        vmap_epsilon: run the finite ε values of a group as one vmapped program (off by
            default: slower than one by one on CPU, see benchmarks/sweep_vmap_epsilon.py).
    """

    def __init__(self, *, vmap_epsilon: bool = False) -> None:
        self.vmap_epsilon = vmap_epsilon
        self._data_key: tuple | None = None
        self._data: Any = None

    def check(self, cell: Cell) -> None:
        """Validate a cell's settings before the sweep starts (raises :class:`LdpsimError`)."""
        try:
            make_config(dict(cell.params))
        except LdpsimError as err:
            raise LdpsimError(f"cell {cell.key}: {err}") from None

    def _data_for(self, config) -> Any:
        from ldpsim.fl.simulate import build_data

        key = tuple(getattr(config, f) for f in _DATA_FIELDS)
        if key != self._data_key:
            self._data, self._data_key = None, None  # free the previous one first
            self._data, self._data_key = build_data(config), key
        return self._data

    def __call__(self, cells: Sequence[Cell], on_round: Callable[[], None]) -> Iterator[tuple[Cell, list[dict]]]:
        from ldpsim.fl.simulate import simulate, uses_modes

        configs = [make_config(dict(c.params)) for c in cells]
        data = self._data_for(configs[0])
        finite = [i for i, c in enumerate(configs) if c.private and not uses_modes(c)]
        batched = set(finite) if self.vmap_epsilon and len(finite) > 1 else set()
        if batched:
            def tick_all() -> None:  # one vmapped round advances every ε of the group
                for _ in finite:
                    on_round()

            histories = simulate_epsilon_axis([configs[i] for i in finite], data=data, on_round=tick_all)
            for i, rows in zip(finite, histories):
                yield cells[i], rows
        for i, (cell, config) in enumerate(zip(cells, configs)):
            if i in batched:
                continue
            last = [0]

            def tick(row: dict, last=last) -> None:
                for _ in range(int(row["round"]) - last[0]):
                    on_round()
                last[0] = int(row["round"])

            yield cell, simulate(config, data=data, callback=tick)
