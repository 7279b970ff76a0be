"""The manifest of a run or a sweep: what ran, with what, where, and what it guarantees.

``ldpsim run --out R.csv``, ``ldpsim sweep --out R.csv`` and ``ldpsim dpsgd --out R.csv``
write ``R.manifest.json`` beside the CSV (:func:`manifest_path`): JSON, written atomically
(temporary file renamed over the old one) when the command starts (``"status":
"running"``), updated as it goes (a sweep: after every finished cell) and when it ends
(``"finished"``, ``"interrupted"`` by SIGINT/SIGTERM, or ``"failed"``), with ``ended_at``.

Fields (every one present; a value that cannot be known is ``null``):

``ldpsim_manifest``   format number (:data:`FORMAT`).
``kind``              ``"run"``, ``"sweep"`` or ``"dpsgd"``.
``status``, ``started_at``, ``ended_at``, ``wall_seconds``, ``error``
                      ISO 8601 UTC times; ``ended_at`` is null while running; ``error``
                      names the exception of a ``failed`` command (else null).
``command_line``      ``sys.argv`` as a list, ``command`` the same quoted for a shell,
                      ``cwd`` the working folder.
``results``           ``{"csv": path, "rows": rows written by this command}``.
``configuration``     the full resolved configuration: ``run``: every
                      :class:`~ldpsim.fl.SimulationConfig` field (defaults included;
                      :func:`simulation_config` turns it back into one); ``sweep``: name,
                      fingerprint, the normalised grid and fixed settings
                      (:meth:`~ldpsim.sweep.SweepConfig.normalized`) and the cell keys;
                      ``dpsgd``: the DP-SGD configuration.
``seeds``             the root seed(s).
``data``              per dataset: name, source, folder and per file its SHA-256 (and the
                      published digest the loader verifies it against; LEAF FEMNIST: the
                      known MD5) -- ``files`` is null for generated data (synthetic).
``privacy``           from the last results row: mechanism, neighbours (the neighbouring
                      relation), epsilon, delta, epsilon_spent, sensitivity and the mode's
                      noise settings, with a one-sentence ``statement``; a sweep has one
                      such record per finished cell under ``cells``.
``software``          ldpsim version, git commit and whether the work tree had uncommitted
                      changes (null outside a git checkout or without git), Python and the
                      versions of jax, jaxlib, flax, optax, dp-accounting, numpy, scipy.
``hardware``          JAX backend, device kinds and count, process count, CPU model
                      (``/proc/cpuinfo``), CPU count, host name, operating system.
``environment``       the variables that change how JAX/XLA/ldpsim run (``XLA_FLAGS``,
                      ``JAX_*``, ``LDPSIM_*``, ``CUDA_VISIBLE_DEVICES``).
``earlier_sessions``  a resumed sweep: the status, times, command line and software of
                      each earlier invocation that wrote the same results file.

Non-finite numbers are written as the strings ``"inf"``, ``"-inf"`` and ``"nan"`` (strict
JSON has no literal for them).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ldpsim._src.privacy import registry

__all__ = ["FORMAT", "Recorder", "collect", "dataset_record", "guarantee", "load",
           "manifest_path", "simulation_config", "write"]

FORMAT = 1
#: Distributions whose versions are recorded (importlib.metadata names).
PACKAGES = ("jax", "jaxlib", "flax", "optax", "dp-accounting", "numpy", "scipy")
#: Results columns copied into the privacy record.
PRIVACY_COLUMNS = ("privacy_mode", "mechanism", "neighbours", "epsilon", "delta", "epsilon_spent",
                   "delta_spent", "sensitivity", "sigma", "clip", "noise_mode", "noise_multiplier",
                   "sampler_delta_floor", "client_dp_epsilon", "round")
_ENV_PREFIXES = ("XLA_", "JAX_", "LDPSIM_", "TF_CPP_", "CUDA_VISIBLE_DEVICES", "TPU_")
#: Keys of a session kept in ``earlier_sessions``.
_SESSION_KEYS = ("status", "started_at", "ended_at", "wall_seconds", "command_line", "software",
                 "hardware", "results")


def manifest_path(out: str | os.PathLike) -> Path:
    """``results/run.csv`` -> ``results/run.manifest.json`` (beside the CSV)."""
    return Path(out).with_suffix(".manifest.json")


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


# ----------------------------------------------------------------------------- encoding


def _jsonable(value: Any) -> Any:
    """JSON-ready copy: non-finite floats as strings, numpy/jax scalars as Python numbers."""
    if isinstance(value, bool) or value is None or isinstance(value, (str, int)):
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return value
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _jsonable(dataclasses.asdict(value))
    if hasattr(value, "item") and getattr(value, "shape", None) == ():  # numpy / jax scalar
        return _jsonable(value.item())
    return str(value)


def write(path: str | os.PathLike, manifest: Mapping[str, Any]) -> Path:
    """Write ``manifest`` to ``path`` atomically (temporary file, then rename); an interrupt
    waits for the write to end (:func:`ldpsim._src._interrupt.critical`)."""
    from ldpsim._src._interrupt import critical

    path = Path(path)
    text = json.dumps(_jsonable(manifest), indent=2, allow_nan=False) + "\n"
    tmp = path.with_name(path.name + ".tmp")
    with critical():
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    return path


def load(path: str | os.PathLike) -> dict[str, Any]:
    """Read a manifest (raises LdpsimError naming the file when it is not one)."""
    from ldpsim._src._checks import LdpsimError

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise LdpsimError(f"manifest {str(path)!r} cannot be read ({err})") from None
    if not isinstance(data, dict) or "ldpsim_manifest" not in data:
        raise LdpsimError(f"{str(path)!r} is not an ldpsim manifest")
    return data


def simulation_config(manifest: Mapping[str, Any] | str | os.PathLike):
    """The :class:`~ldpsim.fl.SimulationConfig` a ``run`` manifest records: running
    it again gives the same history (same machine and software; ``wall_time`` aside)."""
    from ldpsim._src._checks import LdpsimError
    from ldpsim._src.fl.config import SimulationConfig

    if not isinstance(manifest, Mapping):
        manifest = load(manifest)
    if manifest.get("kind") != "run":
        raise LdpsimError(f"a {manifest.get('kind')!r} manifest holds no single run's configuration")
    config = dict(manifest["configuration"])
    kwargs = {}
    for f in dataclasses.fields(SimulationConfig):
        if f.name not in config:
            continue
        value = config[f.name]
        if isinstance(value, str) and "float" in str(f.type) and value in ("inf", "-inf", "nan"):
            value = float(value)
        kwargs[f.name] = value
    return SimulationConfig(**kwargs)


# ----------------------------------------------------------------------------- facts


def _git() -> dict[str, Any]:
    """Commit of the checkout ldpsim is imported from (null when it is not one)."""
    package = Path(__file__).resolve().parent
    env = dict(os.environ, GIT_OPTIONAL_LOCKS="0", LC_ALL="C")

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(package.parent), *args], capture_output=True,
                                  text=True, timeout=10, env=env, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    top = git("rev-parse", "--show-toplevel")
    if not top or Path(top).resolve() != package.parent:
        return {"git_commit": None, "git_dirty": None}
    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"git_commit": commit, "git_dirty": None if status is None else bool(status)}


def _software() -> dict[str, Any]:
    from importlib import metadata

    from ldpsim import __version__

    out: dict[str, Any] = {"ldpsim": __version__, **_git(),
                           "python": platform.python_version(),
                           "python_implementation": platform.python_implementation()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "cpu model", "Processor"):
                    return value.strip() or None
    except OSError:
        pass
    return platform.processor() or None


def _hardware() -> dict[str, Any]:
    out: dict[str, Any] = {"backend": None, "device_count": None, "device_kinds": None,
                           "process_count": None}
    try:
        import jax

        devices = jax.devices()
        out.update(backend=jax.default_backend(), device_count=len(devices),
                   device_kinds=sorted({d.device_kind for d in devices}),
                   process_count=jax.process_count())
    except Exception:  # noqa: BLE001 - no backend is a fact to record, not an error
        pass
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover (not Linux)
        cpus = os.cpu_count()
    out.update(cpu_model=_cpu_model(), cpu_count=cpus, host=platform.node() or None,
               os=platform.platform())
    return out


def _environment() -> dict[str, str]:
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(_ENV_PREFIXES)}


def dataset_record(dataset: str, data_dir: str | os.PathLike | None = None,
                   data_source: str = "auto") -> dict[str, Any]:
    """Where a dataset's files are and their checksums (the values ldpsim.data verifies).

    Returns:
        ``{"dataset", "source", "folder", "files"}``; ``files`` maps a file (relative to
        ``folder``) to ``{"bytes", "sha256", "expected_sha256"}`` (FEMNIST:
        ``expected_md5`` of the known LEAF shards instead), or is null for generated data.
        Files not present yet (to be downloaded) have null ``bytes`` and ``sha256``.
    """
    from ldpsim._src.data import _files, idx, leaf, shakespeare

    key = str(dataset).strip().lower().replace("-", "_")
    record: dict[str, Any] = {"dataset": dataset, "source": None, "folder": None, "files": None}
    if key.startswith("synthetic"):
        record["source"] = "generated (no files; determined by the settings and the seed)"
        return record
    root = _files.resolve_data_dir(data_dir)

    def files(folder: Path | None, expected: Mapping[str, str], algo: str = "sha256"):
        if folder is None:
            return None
        out = {}
        for name, digest in expected.items():
            path = folder / name
            present = path.is_file()
            entry = {"bytes": path.stat().st_size if present else None}
            if algo == "sha256":
                entry["sha256"] = _files.sha256_of(path) if present else None
            entry[f"expected_{algo}"] = digest
            out[name] = entry
        return out

    if key in idx.IDX_DATASETS and data_source in ("auto", "idx"):
        folder = _files.find_subdir(root, (key,), idx.FILES[:1])
        record.update(source="idx", folder=str(folder) if folder else None,
                      files=files(folder, idx.IDX_DATASETS[key]["sha256"]))
    elif key == "shakespeare":
        folder = _files.find_subdir(root, shakespeare.FOLDER_NAMES, (shakespeare.FILES["train"],))
        record.update(source="tff-hdf5", folder=str(folder) if folder else None,
                      files=files(folder, shakespeare.SHA256))
    elif key == "femnist":
        folder = _files.find_subdir(root, leaf.FOLDER_NAMES, ("train", "test"))
        known = {}
        if folder is not None:
            for split in ("train", "test"):
                for path in sorted((folder / split).glob("*.json*")):
                    rel = f"{split}/{path.name}"
                    known[rel] = leaf.KNOWN_JSON_MD5.get(rel.removesuffix(".gz"))
        record.update(source="leaf-json", folder=str(folder) if folder else None,
                      files=files(folder, known, "md5") if folder else None)
    else:
        record["source"] = "tfds (checksums are kept by tensorflow-datasets)"
    return record


def guarantee(row: Mapping[str, Any]) -> dict[str, Any]:
    """The privacy record of a results row (its last round): the columns of
    :data:`PRIVACY_COLUMNS` present in it and a one-sentence ``statement``."""
    rec = {k: _plain(row[k]) for k in PRIVACY_COLUMNS if k in row}
    mode = rec.get("privacy_mode", "ldp")
    eps, delta = rec.get("epsilon_spent"), rec.get("delta")
    rounds = rec.get("round")
    if rec.get("mechanism") in (None, "none") or (mode in ("ldp", None)
                                                  and _isinf(rec.get("epsilon"))):
        statement = "no privacy: no noise was added (epsilon = inf)"
    elif mode in [m.name for m in registry.MODES if m.user_level]:
        statement = (f"user-level ({_fmt(eps)}, {_fmt(delta)})-DP after {rounds} rounds "
                     f"({mode} DP-FedAvg, noise multiplier {_fmt(rec.get('noise_multiplier'))}, "
                     f"{rec.get('neighbours')} neighbours, sensitivity {_fmt(rec.get('sensitivity'))})")
    elif isinstance(delta, float) and math.isnan(delta):   # pure ideal epsilon-LDP
        spent = rec.get("delta_spent", 0.0)
        spent = 0.0 if spent is None or (isinstance(spent, float) and math.isnan(spent)) else spent
        kind = ("pure " if spent == 0 else "ideally pure ") + f"{_fmt(rec.get('epsilon'))}-LDP"
        statement = (f"local DP per client: {kind} per round "
                     f"({rec.get('mechanism')}, {rec.get('neighbours')} neighbours); "
                     f"epsilon_spent {_fmt(eps)} at delta {_fmt(spent)} (pure composition; the "
                     f"delta is what the float32 realisation adds) for the most-sampled client "
                     f"after {rounds} rounds ({mode})")
    else:
        statement = (f"local DP per client: ({_fmt(rec.get('epsilon'))}, {_fmt(delta)}) per round, "
                     f"{rec.get('neighbours')} neighbours (sensitivity "
                     f"{_fmt(rec.get('sensitivity'))}); epsilon_spent {_fmt(eps)} at delta "
                     f"{_fmt(delta)} for the most-sampled client after {rounds} rounds ({mode})")
    rec["statement"] = statement
    return rec


def _plain(value: Any) -> Any:
    if hasattr(value, "item") and getattr(value, "shape", None) == ():
        return value.item()
    return value


def _isinf(value: Any) -> bool:
    try:
        return math.isinf(float(value))
    except (TypeError, ValueError):
        return False


def _fmt(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


# ----------------------------------------------------------------------------- collect


def collect(kind: str, configuration: Any, *, out: str | os.PathLike | None = None,
            seeds: Sequence[int] = (), data: Sequence[Mapping[str, Any]] = (),
            argv: Sequence[str] | None = None) -> dict[str, Any]:
    """A new manifest (status ``"running"``, started now) with every field of the module
    docstring; ``configuration`` is a dataclass or a mapping."""
    if dataclasses.is_dataclass(configuration) and not isinstance(configuration, type):
        configuration = dataclasses.asdict(configuration)
    argv = list(sys.argv if argv is None else argv)
    if argv and os.path.basename(argv[0]) in ("ldpsim", "__main__.py"):
        argv[0] = "ldpsim"
    return {
        "ldpsim_manifest": FORMAT,
        "kind": kind,
        "status": "running",
        "started_at": _now(),
        "ended_at": None,
        "wall_seconds": None,
        "error": None,
        "command_line": argv,
        "command": shlex.join(argv),
        "cwd": os.getcwd(),
        "results": {"csv": None if out is None else os.fspath(out), "rows": 0},
        "configuration": _jsonable(dict(configuration)),
        "seeds": [int(s) for s in seeds],
        "data": [dict(d) for d in data],
        "privacy": None,
        "software": _software(),
        "hardware": _hardware(),
        "environment": _environment(),
        "earlier_sessions": [],
    }


class Recorder:
    """Keeps a manifest file up to date while a command runs.

    Use as a context manager: the manifest is written on entry (``running``) and on exit
    with ``finished``, ``interrupted`` (``KeyboardInterrupt``: SIGINT or SIGTERM through
    :mod:`ldpsim._src._interrupt`) or ``failed`` (any other exception, named in ``error``).

    Args:
        path: the manifest file.
        manifest: from :func:`collect`.
        resume: keep the earlier sessions (and a sweep's per-cell privacy records) of an
            existing manifest at ``path`` (a resumed sweep).
    """

    def __init__(self, path: str | os.PathLike, manifest: dict[str, Any], *,
                 resume: bool = False) -> None:
        self.path = Path(path)
        self.manifest = manifest
        self._start = time.monotonic()
        if resume and self.path.is_file():
            try:
                old = load(self.path)
            except ValueError:  # unreadable: start a new record
                old = None
            if old is not None and old.get("kind") == manifest.get("kind"):
                sessions = list(old.get("earlier_sessions") or [])
                sessions.append({k: old.get(k) for k in _SESSION_KEYS})
                manifest["earlier_sessions"] = sessions
                if isinstance(old.get("privacy"), Mapping) and "cells" in old["privacy"]:
                    manifest["privacy"] = {"cells": dict(old["privacy"]["cells"])}

    def update(self, **fields: Any) -> None:
        """Set top-level fields and write the file."""
        self.manifest.update(fields)
        write(self.path, self.manifest)

    def add_rows(self, n: int) -> None:
        self.manifest["results"]["rows"] = int(self.manifest["results"].get("rows") or 0) + n

    def finish(self, status: str, **fields: Any) -> None:
        self.update(status=status, ended_at=_now(),
                    wall_seconds=round(time.monotonic() - self._start, 3), **fields)

    def __enter__(self) -> "Recorder":
        write(self.path, self.manifest)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.finish("finished")
        elif issubclass(exc_type, KeyboardInterrupt):
            self.finish("interrupted")
        else:
            self.finish("failed", error=f"{exc_type.__name__}: {' '.join(str(exc).split())}")
