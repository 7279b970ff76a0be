"""The default sweep runner: cells run through the simulation engine (:mod:`ldpsim.fl`).

A group of cells differs only in ε. Without ``vmap_epsilon`` each cell is one call of
:func:`ldpsim.simulate`; the engine caches its jitted round per static setting
and σ is a traced argument, so the whole group (and every seed) shares one compilation.

With ``vmap_epsilon`` the finite-ε cells of a group run as **one** program: the engine's
pure round function (:func:`~ldpsim.fl.make_round_fn`) is ``jax.vmap``-ed over
(server state, :class:`~ldpsim.fl.RoundHyper`) with one set of knobs per ε, on the same data,
cohorts and keys as the one-by-one runs. So the results equal running the cells one by
one up to float rounding (tested), and the ε axis costs one dispatch per round instead of
one per cell. ε = ∞ (no noise: a different static program) runs on its own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ldpsim._src._checks import LdpsimError
from ldpsim._src.sweep.config import Cell

__all__ = ["EngineRunner", "simulate_epsilon_axis"]

#: Settings that determine the clients' data (cached across the cells of a sweep).
_DATA_FIELDS = ("dataset", "data_dir", "partition", "alpha", "population", "examples_per_client", "seed")


def make_config(params: dict[str, Any]):
    """``SimulationConfig(**params)``, with unknown settings named in the error."""
    from ldpsim._src.fl.config import SimulationConfig

    fields = {f.name for f in dataclasses.fields(SimulationConfig)}
    unknown = sorted(set(params) - fields)
    if unknown:
        from ldpsim._src.sweep.config import unknown_names

        raise LdpsimError(
            f"unknown run setting(s) {unknown_names(unknown, fields)}; valid settings are: "
            f"{', '.join(sorted(fields))}"
        )
    return SimulationConfig(**params)


def simulate_epsilon_axis(configs: Sequence[Any], *, data: Any = None,
                          on_round: Callable[[], None] | None = None) -> list[list[dict]]:
    """Run configs that differ only in (finite) ε as one vmapped program.

    :func:`ldpsim.fl.simulate_lanes` with the ε values as lanes: the same data,
    cohorts and keys as the one-by-one runs, so each history equals its cell's
    :func:`~ldpsim.simulate` up to float rounding.

    Args:
        configs: :class:`~ldpsim.fl.SimulationConfig` objects, identical except
            ``epsilon`` (all finite).
        data: ``(population, x_test, y_test)``; default :func:`ldpsim.fl.build_data`.
        on_round: called after every round.

    Returns:
        One history per config (``wall_time`` is the shared elapsed time).
    """
    from ldpsim._src.fl.simulate import simulate_lanes

    if not configs:
        return []
    c0 = configs[0]
    for c in configs:
        if dataclasses.replace(c, epsilon=c0.epsilon) != c0 or not c.private:
            raise LdpsimError("simulate_epsilon_axis needs configs that differ only in a "
                              "finite epsilon")
    return simulate_lanes(configs, data=data, on_round=on_round)


class EngineRunner:
    """Runs sweep cells with the simulation engine (see the module docstring).

    Args:
        vmap_epsilon: run the finite ε values of a group as one vmapped program (off by
            default: slower than one by one on CPU, see benchmarks/sweep_vmap_epsilon.py).
        checkpoint_dir: checkpoint each cell run one by one in a folder of its own there
            (named by its configuration's hash; :mod:`ldpsim._src.fl.checkpoint`), so that an
            interrupted cell continues where it stopped; the folder is removed once the
            cell's rows are written. ``None``: no checkpoints. Cells of at most
            ``checkpoint_every`` rounds are not checkpointed (nothing to gain).
        checkpoint_every: rounds between a cell's checkpoints.
    """

    def __init__(self, *, vmap_epsilon: bool = False, checkpoint_dir: str | Path | None = None,
                 checkpoint_every: int = 10) -> None:
        self.vmap_epsilon = vmap_epsilon
        self.checkpoint_dir = None if checkpoint_dir is None else Path(checkpoint_dir)
        self.checkpoint_every = checkpoint_every
        self._data_key: tuple | None = None
        self._data: Any = None

    def check(self, cell: Cell) -> None:
        """Validate a cell's settings before the sweep starts (raises :class:`LdpsimError`)."""
        try:
            make_config(dict(cell.params))
        except LdpsimError as err:
            raise LdpsimError(f"cell {cell.key}: {err}") from None

    def _data_for(self, config) -> Any:
        from ldpsim._src.fl.simulate import build_data

        key = tuple(getattr(config, f) for f in _DATA_FIELDS)
        if key != self._data_key:
            self._data, self._data_key = None, None  # free the previous one first
            self._data, self._data_key = build_data(config), key
        return self._data

    def __call__(self, cells: Sequence[Cell], on_round: Callable[[], None]) -> Iterator[tuple[Cell, list[dict]]]:
        from ldpsim._src.fl.simulate import simulate

        configs = [make_config(dict(c.params)) for c in cells]
        data = self._data_for(configs[0])
        finite = [i for i, c in enumerate(configs) if c.private]
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

            folder = None
            if self.checkpoint_dir is not None and config.rounds > self.checkpoint_every:
                from ldpsim._src.fl.checkpoint import config_hash

                folder = self.checkpoint_dir / config_hash([config])[:20]
            yield cell, simulate(config, data=data, callback=tick, checkpoint_dir=folder,
                                 checkpoint_every=self.checkpoint_every)
            if folder is not None:  # the caller has written the cell's rows
                shutil.rmtree(folder, ignore_errors=True)
                with contextlib.suppress(OSError):
                    self.checkpoint_dir.rmdir()  # only when no other cell's is left
