"""The manifest file: where it lives, its strict-JSON encoding, its atomic write and its read.

:func:`manifest_path` puts ``R.manifest.json`` beside ``R.csv``; :func:`write` encodes
non-finite numbers as the strings ``"inf"``, ``"-inf"`` and ``"nan"`` (strict JSON has no
literal for them) and replaces the file atomically; :func:`load` reads one back.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["FORMAT", "jsonable", "load", "manifest_path", "now", "write"]

FORMAT = 1


def manifest_path(out: str | os.PathLike) -> Path:
    """``results/run.csv`` -> ``results/run.manifest.json`` (beside the CSV)."""
    return Path(out).with_suffix(".manifest.json")


def now() -> str:
    """The current time, ISO 8601 UTC to the second (the manifest's times)."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def jsonable(value: Any) -> Any:
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
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value))
    if hasattr(value, "item") and getattr(value, "shape", None) == ():  # numpy / jax scalar
        return jsonable(value.item())
    return str(value)


def write(path: str | os.PathLike, manifest: Mapping[str, Any]) -> Path:
    """Write ``manifest`` to ``path`` atomically (temporary file, then rename); an interrupt
    waits for the write to end (:func:`ldpsim._src._interrupt.critical`)."""
    from ldpsim._src._atomic import atomic_open

    path = Path(path)
    text = json.dumps(jsonable(manifest), indent=2, allow_nan=False) + "\n"
    with atomic_open(path, encoding="utf-8") as f:
        f.write(text)
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
