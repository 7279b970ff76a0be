"""Host-side privacy guarantees (NumPy/SciPy, ``dp_accounting``).

* :mod:`.accounting` -- ε of local, central and DP-SGD training by composition (RDP and PLD).
* :mod:`.ledger` -- every client's spent ε from its own participations.
* :mod:`.monitors` -- MindArmour-compatible RDP and zCDP monitors.
* :mod:`.shuffling` -- amplification by shuffling.
* :mod:`.secagg` -- local Gaussian noise seen centrally after secure aggregation.
* :mod:`.trust` -- each trust model's noise for one target central (ε, δ).
"""
