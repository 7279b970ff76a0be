"""Implementation of :mod:`ldpsim.privacy` (private; the public names are re-exported there).

One subpackage per concern, each importing only those listed before it:

* :mod:`.registry` -- the one list of local randomizers and privacy modes (JAX-free specs).
* :mod:`.hadamard` -- the fast Walsh–Hadamard transform and the randomized rotation built on
  it (FastProjUnit's projection, the discrete mode's rotation).
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
