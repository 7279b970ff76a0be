"""The privacy record of a manifest: the guarantee columns of a results row and one sentence
that states the guarantee (user-level or local, pure or approximate, after how many rounds).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ldpsim._src.privacy import registry

__all__ = ["PRIVACY_COLUMNS", "guarantee"]

#: Results columns copied into the privacy record.
PRIVACY_COLUMNS = ("privacy_mode", "mechanism", "neighbours", "epsilon", "delta", "epsilon_spent",
                   "delta_spent", "sensitivity", "sigma", "clip", "noise_mode", "noise_multiplier",
                   "sampler_delta_floor", "client_dp_epsilon", "client_dp_delta", "round")


def guarantee(row: Mapping[str, Any]) -> dict[str, Any]:
    """The privacy record of a results row (its last round): the columns of
    :data:`PRIVACY_COLUMNS` present in it and a one-sentence ``statement``."""
    rec = {k: _plain(row[k]) for k in PRIVACY_COLUMNS if k in row}
    mode = rec.get("privacy_mode") or registry.MODES[0].name
    spec = next((m for m in registry.MODES if m.name == mode), None)
    if spec is None:   # a mode not registered here (a record from another version)
        spec = registry.ModeSpec(name=str(mode), help="", settings=(), plan="",
                                 label=f"{mode} mode")
    eps, delta = rec.get("epsilon_spent"), rec.get("delta")
    rounds = rec.get("round")
    if rec.get("mechanism") in (None, "none") or (spec.randomizers
                                                  and _isinf(rec.get("epsilon"))):
        statement = "no privacy: no noise was added (epsilon = inf)"
    elif spec.user_level:
        statement = (f"user-level ({_fmt(eps)}, {_fmt(delta)})-DP after {rounds} rounds "
                     f"({spec.label}, noise multiplier {_fmt(rec.get('noise_multiplier'))}, "
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
    client_eps = rec.get("client_dp_epsilon")
    if isinstance(client_eps, (int, float)) and not math.isnan(client_eps):
        statement += (f"; and DP-SGD clients: sample-level ({_fmt(client_eps)}, "
                      f"{_fmt(rec.get('client_dp_delta'))})-DP for the most-sampled client's "
                      f"examples")
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
