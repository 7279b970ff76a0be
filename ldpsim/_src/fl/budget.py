"""The per-client privacy budget of ``stop_at_epsilon``: the ledger the driver consults before
each round (:class:`~ldpsim.privacy.PrivacyLedger` over the participation counts, with the
privacy plan's accountant) and the budget columns of each history row.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ldpsim._src._checks import LdpsimError
from ldpsim._src.fl import planning, schema
from ldpsim._src.fl.config import SimulationConfig
from ldpsim._src.privacy.accountants.ledger import PrivacyLedger

__all__ = ["budget_columns", "budget_ledger"]


def budget_ledger(configs: Sequence[SimulationConfig], plan: planning.PrivacyPlan,
                  participation: np.ndarray) -> PrivacyLedger | None:
    """The per-client ledger of ``stop_at_epsilon`` over the driver's participation counts,
    with the plan's accountant (the ε of epsilon_spent, per participation count)."""
    c0 = configs[0]
    if c0.stop_at_epsilon is None:
        return None
    if len(configs) > 1:
        raise LdpsimError("stop_at_epsilon needs one run per program (each lane would "
                          "exclude other clients); run the configurations one by one")
    # the mode's own delta (MindSpore's dp_delta, local DP's delta): its place in the schema
    paths = schema.flat_paths({k: getattr(c0, k) for k in schema._DECIDING})
    delta = next((getattr(c0, f) for f, path in paths.items() if path == "privacy.delta"),
                 c0.delta)
    ledger = PrivacyLedger(len(participation), accountant=lambda k: plan.epsilon_of(k, k, 1.0),
                           delta=delta, target_epsilon=c0.stop_at_epsilon,
                           counts=participation)
    one = ledger.epsilon_of_count(1)
    if not one <= c0.stop_at_epsilon:
        raise LdpsimError(f"stop_at_epsilon={c0.stop_at_epsilon!r} is below the epsilon of one "
                          f"participation ({one:.6g} at delta={delta:g}): no client could take "
                          "part; raise it or lower the per-round epsilon")
    return ledger


def budget_columns(ledger: PrivacyLedger | None) -> dict:
    """ledger_epsilon_max / _mean and retired_clients of a report (NaN, NaN, 0 without one)."""
    if ledger is None:
        return {"ledger_epsilon_max": math.nan, "ledger_epsilon_mean": math.nan,
                "retired_clients": 0}
    return {"ledger_epsilon_max": ledger.max_epsilon(),
            "ledger_epsilon_mean": float(ledger.epsilons().mean()),
            "retired_clients": int((~ledger.allowed()).sum())}
