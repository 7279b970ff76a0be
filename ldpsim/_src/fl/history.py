"""The history rows' pieces that do not change within a run: the run-level columns every row
starts with (the settings and the privacy plan's columns), which round metrics are not
columns, and the conversion of device values to plain Python numbers.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ldpsim._src.fl import planning
from ldpsim._src.fl.config import SimulationConfig

__all__ = ["NOT_COLUMNS", "PLAN_COLUMNS", "run_columns", "scalar"]

#: Metrics of the round kernel that are not history columns (the applied update's norm
#: and the next round's clip bound are visible in the next row).
NOT_COLUMNS = ("update_norm", "next_clip")

#: The run-level columns a privacy plan provides (in the order of the history rows).
PLAN_COLUMNS = ("mechanism", "neighbours", "epsilon", "delta", "clip", "sensitivity", "sigma")


def run_columns(config: SimulationConfig, model_name: str, population: int,
                plan: planning.PrivacyPlan) -> dict:
    """The run-level columns every history row of ``config`` starts with."""
    return {
        "dataset": config.dataset,
        "model": model_name,
        **{k: plan.columns[k] for k in PLAN_COLUMNS},
        "clients_per_round": config.clients_per_round,
        "population": population, "seed": config.seed,
        "privacy_mode": config.privacy_mode, "noise_mode": config.noise_mode,
        "noise_multiplier": plan.columns["noise_multiplier"],
        "sampler_delta_floor": plan.columns["sampler_delta_floor"],
    }


def scalar(v: Any) -> float | int:
    """A Python number; NaN is always the object ``math.nan``, so that equal histories
    compare equal with ``==`` (two NaN objects never do)."""
    a = np.asarray(v)
    if np.issubdtype(a.dtype, np.integer):
        return int(a)
    x = float(a)
    return math.nan if math.isnan(x) else x
