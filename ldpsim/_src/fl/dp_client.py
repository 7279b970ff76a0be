"""Moved: DP-SGD inside each client is :mod:`ldpsim._src.fl.dpsgd.client`.

A private path kept importable (no warning) while code written against it is updated.
New code imports :mod:`ldpsim._src.fl.dpsgd.client`.
"""

from ldpsim._src.fl.dpsgd.client import (
    DP_CLIENT_METHODS,
    PLAIN,
    ClientDpHyper,
    ClientTraining,
    dp_client_epsilon,
    dp_local_update,
    dpsgd,
    event_epsilon,
    make_dp_client_update,
    plain,
)

__all__ = ["ClientDpHyper", "ClientTraining", "DP_CLIENT_METHODS", "PLAIN", "dp_client_epsilon",
           "dp_local_update", "dpsgd", "event_epsilon", "make_dp_client_update", "plain"]
