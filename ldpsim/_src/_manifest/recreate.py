"""A run recreated from its manifest: the :class:`~ldpsim.fl.SimulationConfig` it records."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from ldpsim._src._manifest.jsonfile import load

__all__ = ["simulation_config"]


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
