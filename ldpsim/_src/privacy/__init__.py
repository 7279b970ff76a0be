"""Implementation of :mod:`ldpsim.privacy` (private; the public names are re-exported there).

One subpackage per concern, each importing only those listed before it:

* :mod:`.registry` -- the one list of local randomizers and privacy modes (JAX-free specs).
* :mod:`.noise` -- the additive noise: its samplers, draws on pytrees, scale calibration, the
  exact Gaussian δ(ε), and the law the float32 samplers realise.
* :mod:`.randomizers` -- the local randomizers (the :class:`LocalMechanism` interface, the
  factories, clipping, PrivUnit2/G, ProjUnit, Duchi et al., SignDS, k-RR).
* :mod:`.server` -- what the server adds: noise at the aggregate, adaptive clip rules.
* :mod:`.discrete` -- distributed discrete DP under secure aggregation.
* :mod:`.accountants` -- host-side guarantees: composition (``dp_accounting``), per-client
  ledger, MindArmour monitors, shuffling, secure aggregation, trust models.
* :mod:`.analysis` -- studies built on the above: noise averaging, the mechanism frontier.
"""

import importlib

#: The former flat module names (``from ldpsim._src.privacy import sampling``), resolved
#: lazily to their subpackage so that nothing is imported before it is asked for.
_MOVED = {
    "gaussian_exact": "noise", "realised": "noise", "calibration": "noise",
    "sampling": "noise", "mechanisms": "noise",
    "randomizer": "randomizers", "mechanism": "randomizers", "clipping": "randomizers",
    "privunit2": "randomizers", "privunitg": "randomizers", "projunit": "randomizers",
    "duchi": "randomizers", "rr": "randomizers", "signds": "randomizers",
    "server_dp": "server", "adaptive": "server",
    "accounting": "accountants", "ledger": "accountants", "monitors": "accountants",
    "secagg": "accountants", "shuffling": "accountants", "trust": "accountants",
    "averaging": "analysis", "frontier": "analysis",
}


def __getattr__(name: str):
    if name in _MOVED:
        return importlib.import_module(f"{__name__}.{_MOVED[name]}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
