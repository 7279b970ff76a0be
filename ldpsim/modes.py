"""Where the noise goes: each privacy mode as one object of pure functions.

A :class:`RoundMechanism` tells the one round kernel (:func:`ldpsim.make_round_fn`) which
local randomizer runs, how each client is clipped and scaled, who drops out, what the
server adds, and how the mode's state adapts; the kernel never branches on a mode's name::

    round_fn = ldpsim.make_round_fn(apply_fn=model.apply, mechanism=ldpsim.modes.local("gaussian"))

Factories: :func:`local` (local DP with a registered randomizer), :func:`mindspore`
(MindSpore Federated's ``DP_ENCRYPT``), :func:`central` (DP-FedAvg, fixed or adaptive
clipping), :func:`distributed` (distributed DP with dropout), :func:`discrete` (the
distributed discrete Gaussian or Skellam mechanism over secure aggregation's sum of integers
modulo 2^b), :func:`aggregated` (the exact
aggregate-noise shortcut of a Gaussian mode) and :func:`with_client_training` (DP-SGD inside
the clients, composed with any mode). :func:`chain` composes a mode of your own from the
round's stages, like ``optax.chain``: a :class:`ClientStage` (clip, scale, release), an
:class:`Aggregator` (:func:`float_sum`, or :func:`modular_sum`: integers summed modulo
2^b and decoded once), a :class:`ClipPolicy` (:func:`fixed_clip` or an adaptive rule) and
:class:`ServerNoise`; a registered mode's stages are its fields (``mode.privatizer``,
``mode.aggregator``, ``mode.clip_policy``, ``mode.noise``), so a variant replaces one::

    mode = ldpsim.modes.local("gaussian")
    one_vote = ldpsim.modes.chain(mode.privatizer, ldpsim.modes.float_sum(weighted=False))

:func:`plan` turns a configuration into its mode, traced knobs, results columns and
accountant (:class:`PrivacyPlan`).
"""

from ldpsim._src.fl.modes import (
    PRIVACY_MODES,
    RoundMechanism,
    aggregated,
    central,
    chain,
    discrete,
    distributed,
    local,
    mindspore,
    with_client_training,
)
from ldpsim._src.fl.planning import PrivacyPlan, plan
from ldpsim._src.fl.stages import (
    Aggregator,
    AggregatorDiagnostics,
    ClientStage,
    ClipPolicy,
    ServerNoise,
    fixed_clip,
    float_sum,
    modular_sum,
)

__all__ = [
    "Aggregator",
    "AggregatorDiagnostics",
    "ClientStage",
    "ClipPolicy",
    "PRIVACY_MODES",
    "PrivacyPlan",
    "RoundMechanism",
    "ServerNoise",
    "aggregated",
    "central",
    "chain",
    "discrete",
    "distributed",
    "fixed_clip",
    "float_sum",
    "local",
    "mindspore",
    "modular_sum",
    "plan",
    "with_client_training",
]
