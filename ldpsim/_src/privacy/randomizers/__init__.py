"""Local randomizers: what one client releases, as objects of pure functions.

* :mod:`.randomizer` -- the :class:`LocalMechanism` interface and the pieces randomizers share.
* :mod:`.mechanism` -- the factories, the additive randomizers and the lookup by name.
* :mod:`.clipping` -- norm clipping of pytrees (the client's sensitivity bound).
* :mod:`.privunit2`, :mod:`.privunitg`, :mod:`.projunit`, :mod:`.duchi`, :mod:`.signds`,
  :mod:`.rr` -- one module per randomizer (its registry entry names it).
"""
