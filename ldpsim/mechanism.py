"""Local randomizers as objects of pure functions (the optax pattern).

A :class:`LocalMechanism` is built by a factory that calibrates it on the host; it carries
``params`` (traced numbers), ``privatize(key, update, params)`` (what ONE client releases:
a :class:`Privatized` for additive noise, a :class:`Report` otherwise), ``decode`` (the
server's estimate), the exact ``mean`` and per-coordinate ``variance`` of that estimate,
``noise_std`` and ``dp_event`` (its accounting with the neighbouring relation stated)::

    import jax, ldpsim
    mech = ldpsim.mechanism.gaussian(epsilon=8.0, delta=1e-5, clip=1.0)   # sensitivity 2C
    out = mech.privatize(jax.random.key(0), update, mech.params)

Factories: :func:`gaussian`, :func:`laplace`, :func:`clip_only` (the additive randomizers
the engine's round runs), :func:`privunit2`, :func:`privunitg`, :func:`duchi`,
:func:`signds`, :func:`randomized_response`, :func:`projunit`, :func:`fastprojunit` (report
randomizers), and :func:`make` by name
(:data:`REGISTRY`, one entry per randomizer: adding one is one module and one entry).
"""

from ldpsim._src.privacy.randomizers.duchi import make as duchi
from ldpsim._src.privacy.randomizers.mechanism import (
    ADDITIVE,
    REGISTRY,
    LocalMechanism,
    MechanismParams,
    Privatized,
    RegistryEntry,
    Report,
    clip_only,
    gaussian,
    laplace,
    make,
    total_variance,
)
from ldpsim._src.privacy.randomizers.privunit2 import make as privunit2
from ldpsim._src.privacy.randomizers.privunitg import make as privunitg
from ldpsim._src.privacy.randomizers.projunit import fastprojunit, projunit
from ldpsim._src.privacy.randomizers.rr import make as randomized_response
from ldpsim._src.privacy.randomizers.signds import make as signds

__all__ = [
    "ADDITIVE",
    "REGISTRY",
    "LocalMechanism",
    "MechanismParams",
    "Privatized",
    "RegistryEntry",
    "Report",
    "clip_only",
    "duchi",
    "fastprojunit",
    "gaussian",
    "laplace",
    "make",
    "privunit2",
    "privunitg",
    "projunit",
    "randomized_response",
    "signds",
    "total_variance",
]
