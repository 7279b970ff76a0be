"""What the float32 code delivers: the guarantee of the realised mechanisms (host side).

Every sampler that runs has a finite range and a finite resolution, so the law a mechanism
realises is not the ideal real-number law its proof is about (Mironov, "On significance of
the least significant bits for differential privacy", CCS 2012). This module turns a
description of a realisation into a guarantee that is never stronger than what it delivers.

The model
---------
A sampler is modelled by its *continuous idealisation*: the ideal law of the draw
restricted to the set the sampler can reach and renormalised (e.g. ldpsim's Box–Muller
draw with ``U ≥ 2⁻³³`` is the 2-D standard normal conditioned on the disk of radius
``√(66 ln 2)``). What this still leaves out -- the outputs' float32 grid -- is the caveat
every floating-point DP library states (Mironov 2012): rounding the release can leak the
low bits of the input, and ldpsim does not defend against it.

Two facts about a realisation then bound its privacy (docs/privacy_sharp_edges.md,
"what the floats deliver"):

* ``tail_mass`` η: the probability, over the worst pair of inputs, that the release lands
  where the other input's realisation has zero density (a *support mismatch*: an event that
  tells the two apart with certainty).
* ``tail_scale`` s ≥ 1: on outputs both can produce, the realised density is the ideal one
  times at most s (the renormalisation ``1/Z``), with the same factor for both inputs.

For ``k`` adaptively composed releases whose ideal part is ``event`` this gives

    δ_k(ε) ≤ 1 − (1 − η)^k + s^k · δ_event,k(ε)                         (1)

(split the product space on "some release fell where a neighbour cannot reach"; off that
event the realised densities are the ideal ones times ``s`` each, on it the hockey-stick
integrand is at most the realised probability of the event, at most ``1 − (1 − η)^k`` by a
union bound over the rounds). An (ε, δ)-DP mechanism with no finer structure is dominated
by binary randomized response at ε composed with "reveal with probability δ" (Kairouz, Oh
& Viswanath, ICML 2015), so it enters (1) with ``event = RR(ε)``, ``η = δ``, ``s = 1``.
"""

from __future__ import annotations

import math

__all__ = ["compose_delta", "delta_budget"]


def compose_delta(ideal_delta: float, tail_mass: float, tail_scale: float, count: int) -> float:
    """Bound (1): the δ of ``count`` realised releases whose ideal part has ``ideal_delta``.

    Args:
        ideal_delta: ``δ_event,k(ε)`` of the ideal event composed ``count`` times, at the ε
            of interest.
        tail_mass: η per release.
        tail_scale: s ≥ 1 per release.
        count: the number of releases k ≥ 0.

    Returns:
        The realised δ at that ε (at most 1).
    """
    k = int(count)
    if k == 0:
        return 0.0
    off = -math.expm1(k * math.log1p(-tail_mass)) if tail_mass < 1 else 1.0
    return min(1.0, off + math.exp(k * math.log(tail_scale)) * ideal_delta)


def delta_budget(delta: float, tail_mass: float, tail_scale: float, count: int) -> float:
    """The δ left for the ideal event so that (1) stays at most ``delta`` after ``count``
    releases: ``(δ − (1 − (1 − η)^k)) / s^k``; ``≤ 0`` means no ε reaches ``delta``
    (report ε = inf)."""
    k = int(count)
    if k == 0:
        return float(delta)
    off = -math.expm1(k * math.log1p(-tail_mass)) if tail_mass < 1 else 1.0
    return (float(delta) - off) / math.exp(k * math.log(tail_scale))
