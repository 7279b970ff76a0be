"""Checkpoints of a simulation, so that a long run continues after an interrupt.

:func:`ldpsim.simulate` with ``checkpoint_dir`` saves, every ``every`` rounds
and when the run stops or ends, everything the run needs to continue:

* the :class:`~ldpsim.fl.ServerState`: params, server optimizer state, root key
  (saved as its key data, :func:`jax.random.key_data`) and the privacy mode's state
  (adaptive clip bounds);
* the host-side counters: per-client participation counts and the smallest
  noise-variance fraction so far (what the accountants read);
* the history rows so far, the next round index and the elapsed time;
* a hash of the resolved configuration(s): a checkpoint of another configuration is
  refused with an :class:`~ldpsim.LdpsimError` naming the settings that differ (data
  given to ``simulate(data=...)`` are the caller's to keep the same: they are not hashed).

Arrays go through orbax-checkpoint (the JAX ecosystem's checkpointing library: each
checkpoint is written to a temporary folder and renamed when complete, so an interrupt
never leaves a half-written one), the rest as its JSON item. Only the newest checkpoint
is kept. A resumed run's history equals an uninterrupted run's bit for bit on the same
machine: cohorts come from ``(seed, round)`` and client keys from ``(round, client id)``,
so nothing but what is saved here carries over from one round to the next.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import time
from pathlib import Path
from typing import Any, Sequence

import jax
import numpy as np

from ldpsim._src._checks import LdpsimError
from ldpsim._src._interrupt import critical

__all__ = ["RunCheckpoint", "config_hash", "saved_round"]

_FORMAT = 1


#: Configuration fields added after runs were first checkpointed, with their defaults: at
#: the default they are left out of :func:`config_hash`, so a run checkpointed before the
#: field existed still resumes (its settings meant the same thing).
_ADDED_FIELDS = {"client_dp_delta": None}


def _config_dicts(configs: Sequence[Any]) -> list[dict]:
    return [json.loads(json.dumps(dataclasses.asdict(c), default=repr)) for c in configs]


def _hashed(config: dict) -> dict:
    return {k: v for k, v in config.items()
            if not (k in _ADDED_FIELDS and v == _ADDED_FIELDS[k])}


def config_hash(configs: Sequence[Any]) -> str:
    """SHA-256 of the resolved configurations (every field, in order)."""
    text = json.dumps([_hashed(c) for c in _config_dicts(configs)], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def saved_round(directory: str | Path | None) -> int | None:
    """The number of rounds saved in ``directory``'s newest checkpoint (a run given it
    continues after that round), or ``None`` when it holds none. Cheap (no orbax import):
    for callers that report what an interrupt left or decide whether an existing result
    file is being resumed."""
    if directory is None or not Path(directory).is_dir():
        return None
    steps = [int(p.name) for p in Path(directory).iterdir() if p.is_dir() and p.name.isdigit()]
    return max(steps, default=None)


def _is_key(x: Any) -> bool:
    return isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def _data(x: Any) -> Any:
    """``x``, a PRNG key array as its key data (orbax stores plain arrays)."""
    return jax.random.key_data(x) if _is_key(x) else x


def _place(value: np.ndarray, like: Any) -> Any:
    """``value`` as an array placed like ``like`` (a committed one on its sharding, an
    uncommitted one uncommitted: the jitted round is not recompiled) and of its kind
    (a PRNG key array from its key data)."""
    if getattr(like, "committed", False):
        out = jax.device_put(value, like.sharding if not _is_key(like)
                             else jax.random.key_data(like).sharding)
    else:
        out = jax.numpy.asarray(value)
    return jax.random.wrap_key_data(out, impl=jax.random.key_impl(like)) if _is_key(like) else out


def _plain(rows: list[dict]) -> list[dict]:
    """Rows with NumPy scalars as Python numbers (for JSON)."""
    return [{k: (v.item() if isinstance(v, np.generic) else v) for k, v in row.items()}
            for row in rows]


def _nan_to_one_object(rows: list[dict]) -> list[dict]:
    """NaN as the object ``math.nan`` (what the driver's rows hold, so ``==`` compares
    restored and fresh histories as equal)."""
    return [{k: (math.nan if isinstance(v, float) and math.isnan(v) else v)
             for k, v in row.items()} for row in rows]


class RunCheckpoint:
    """The checkpoints of one run (or one group of lanes) in ``directory``.

    Args:
        directory: the checkpoint folder (created if missing).
        configs: the run's resolved :class:`~ldpsim.fl.SimulationConfig` (several
            for :func:`~ldpsim.fl.simulate_lanes`).
        every: save after every ``every``-th round (and when the run stops or ends).
        participation: the driver's per-client participation counts (updated in place on
            restore).
        start: the driver's ``time.perf_counter()`` at its start (``wall_time`` is
            measured from it; on restore it moves back by the time already spent).
    """

    def __init__(self, directory: str | Path, configs: Sequence[Any], every: int,
                 participation: np.ndarray, start: float) -> None:
        if isinstance(every, bool) or not isinstance(every, (int, np.integer)) or every < 1:
            raise LdpsimError(f"checkpoint_every must be an integer >= 1, got {every!r}")
        try:
            import orbax.checkpoint  # noqa: F401
        except ImportError:  # pragma: no cover - a dependency of ldpsim (and of flax)
            raise LdpsimError("checkpoints need orbax-checkpoint: pip install "
                              "orbax-checkpoint") from None
        self.directory = Path(directory).expanduser().absolute()
        if self.directory.exists() and not self.directory.is_dir():
            raise LdpsimError(f"checkpoint folder {str(self.directory)!r} is a file; give a "
                              "folder")
        self.every = int(every)
        self.participation = participation
        self.start = start
        self._configs = _config_dicts(configs)
        self._hash = config_hash(configs)
        self._saved: int | None = None

    def _manager(self):
        import orbax.checkpoint as ocp  # deferred: heavy, only checkpointed runs need it

        options = ocp.CheckpointManagerOptions(
            max_to_keep=1, create=True, enable_async_checkpointing=False,
            cleanup_tmp_directories=True)
        return ocp.CheckpointManager(self.directory, options=options)

    def restore(self, state: Any, min_fraction: Any) -> tuple[Any, Any, int, list[dict]]:
        """``(state, min_fraction, next_round, rows)`` from the newest checkpoint, or the
        arguments with ``(0, [])`` when there is none. ``state`` and ``min_fraction`` are
        the run's initial values: the templates (structure, dtypes, placement) of the
        restored ones.

        Raises:
            LdpsimError: the checkpoint belongs to another configuration.
        """
        import orbax.checkpoint as ocp  # deferred: heavy, only checkpointed runs need it

        with self._manager() as manager:
            step = manager.latest_step()
            if step is None:
                return state, min_fraction, 0, []
            meta = manager.restore(step, args=ocp.args.Composite(
                meta=ocp.args.JsonRestore())).meta
            self._check(meta)
            leaves, treedef = jax.tree_util.tree_flatten((state, min_fraction))
            host = [np.empty(np.shape(x), _data(x).dtype) for x in leaves]
            saved = manager.restore(step, args=ocp.args.Composite(
                arrays=ocp.args.StandardRestore(host + [self.participation]))).arrays
        values = [_place(np.asarray(v), x) for x, v in zip(leaves, saved[:-1])]
        self.participation[:] = np.asarray(saved[-1])
        self.start -= float(meta["elapsed"])
        self._saved = step
        state, min_fraction = jax.tree_util.tree_unflatten(treedef, values)
        return state, min_fraction, int(meta["next_round"]), _nan_to_one_object(meta["rows"])

    def _check(self, meta: dict) -> None:
        if meta.get("format") == _FORMAT and meta.get("config_hash") == self._hash:
            return
        theirs = meta.get("configs") or []
        diff = []
        if len(theirs) != len(self._configs):
            diff.append(f"{len(theirs)} configuration(s) there, {len(self._configs)} here")
        for a, b in zip(theirs, self._configs):
            diff += [f"{k} {a.get(k)!r} there, {b.get(k)!r} here"
                     for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        what = "; ".join(dict.fromkeys(diff)) or "another checkpoint format"
        raise LdpsimError(f"checkpoint folder {str(self.directory)!r} holds a checkpoint of "
                          f"another configuration ({what}); give another folder, or delete "
                          "it to start afresh")

    def save(self, state: Any, min_fraction: Any, next_round: int, rows: list[dict],
             final: bool = False, participation: np.ndarray | None = None) -> None:
        """Save the state after round ``next_round - 1`` if it is due (every ``every``-th
        round, or ``final``) and not saved already; ``participation``: the counts at that
        round, where the driver's have moved on (default: the driver's)."""
        if not (final or next_round % self.every == 0) or next_round == self._saved:
            return
        import orbax.checkpoint as ocp  # deferred: heavy, only checkpointed runs need it

        leaves = jax.tree_util.tree_leaves((state, min_fraction))
        # Host copies: orbax writes NumPy arrays synchronously, while for jax.Arrays a
        # background thread reads back array metadata, which raced the commit under heavy
        # load ("No ArrayMetadata found"); restore() already reads into NumPy templates.
        arrays = [np.asarray(_data(x)) for x in leaves]
        arrays.append(np.array(self.participation if participation is None
                               else participation))
        meta = {"format": _FORMAT, "config_hash": self._hash, "configs": self._configs,
                "next_round": int(next_round), "rows": _plain(rows),
                "elapsed": time.perf_counter() - self.start}
        # A checkpoint is written whole: SIGINT/SIGTERM wait for it (an interrupt inside
        # orbax's save left its metadata thread running into interpreter shutdown).
        with critical(), self._manager() as manager:
            manager.save(next_round, args=ocp.args.Composite(
                arrays=ocp.args.StandardSave(arrays), meta=ocp.args.JsonSave(meta)),
                force=True)
            self._saved = next_round
