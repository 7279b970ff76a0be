"""What local Gaussian noise means centrally once the reports are securely summed.

Each of n clients clips its update to L2 norm ``C`` and adds ``N(0, σ² I)``; secure
aggregation (Bonawitz et al. 2017) reveals only the SUM of the surviving reports. The sum
carries the noise of every surviving client, ``N(0, s·σ² I)``, so for one client it is the
Gaussian mechanism with noise standard deviation ``σ√s`` on a query of sensitivity

* ``Δ = 2C`` for **replace one client** (default: the cohort size is public), or
* ``Δ = C`` for **zeroing out one client** (``neighbours="add-remove"``: its update
  replaced by zero while its noise share stays in the sum; under true add/remove the share
  goes too and the sum's variance changes, which this analysis does not cover),

i.e. noise multiplier ``z = σ√(s − k)/Δ``, where ``k`` counts the noise shares the adversary
may know (below). Over the rounds a client takes part in, the guarantee composes by
dp_accounting (PLD by default, RDP, or the exact analytic composition of Gaussians) through
:func:`ldpsim.privacy.ldp_epsilon`, the function ldpsim uses for local
Gaussian noise, so the local and the central figure come from one accountant.

Assumptions, stated in every report (docs/privacy_sharp_edges.md):

* **Dropout.** Only surviving clients' noise is in the sum. With a dropout *rate* ρ the
  worst case is taken: at most ``⌊ρn⌋`` of the ``n`` clients drop, so ``s = n − ⌊ρn⌋``
  survive; or pass the realised ``survivors`` (one count, or one per round). The
  protected client is a survivor (a dropped client releases nothing that round).
* **Known shares** ``k`` (default 0). The default counts every survivor's noise, the
  standard assumption that clients are honest about their share (Kairouz, Liu & Steinke
  2021, arXiv:2102.06387, for distributed DP). If the adversary may know ``k`` shares —
  colluding clients' noise, or the target's own (``k = 1``, the conservative multiplier
  ``z·√((s − 1)/m)`` of the sharp-edges doc) — those do not protect anyone:
  ``z = σ√(s − k)/Δ``.
* Secure aggregation itself is ideal (no leakage beyond the sum), and there is no
  amplification by sampling (each participation is one release, as for local DP).
* The float32 noise: the sum's noise is accounted as ONE draw of ldpsim's float32 sampler
  at std ``σ√(s − k)`` with its bounded tails (bound (1) of
  :mod:`ldpsim._src.privacy.noise.realised`, as :func:`ldpsim.privacy.ldp_epsilon` accounts
  a client's own noise; ``sampler="ideal"``: real-valued noise), for updates of up to
  ``dim`` coordinates. At the ε of most experiments (up to about 40 per release at
  δ = 1e-5) the tails add nothing measurable; beyond, they raise ε (or make it inf).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

import dp_accounting

from ldpsim._src._checks import (
    LdpsimError,
    check_choice,
    check_open_unit,
    check_positive,
    check_positive_int,
)
from ldpsim._src.privacy.accountants import accounting
from ldpsim._src.privacy.accountants.accounting import PrivacyReport
from ldpsim._src.privacy.noise import realised
from ldpsim._src.privacy.noise.calibration import analytic_gaussian_epsilon, analytic_gaussian_sigma

__all__ = ["NEIGHBOURS", "secagg_epsilon", "secagg_noise_multiplier", "secagg_sigma",
           "secagg_survivors"]

NEIGHBOURS = ("replace", "add-remove")
METHODS = ("pld", "rdp", "analytic")


def secagg_survivors(clients: int, dropout: float = 0.0) -> int:
    """Worst-case survivors when at most a fraction ``dropout`` of ``clients`` drops out:
    ``n − ⌊ρn⌋`` (at least 1: the protected client)."""
    n = check_positive_int("clients", clients)
    rho = float(dropout)
    if not (math.isfinite(rho) and 0.0 <= rho < 1.0):
        raise LdpsimError(f"dropout must be in [0, 1), got {dropout!r}")
    return max(1, n - math.floor(rho * n + 1e-9))


def secagg_noise_multiplier(sigma: float, clip: float, survivors: int, *,
                            neighbours: str = "replace", known_shares: int = 0) -> float:
    """``z = σ√(s − k)/Δ`` of one round's securely summed Gaussian noise (module docstring)."""
    sigma = check_positive("sigma", sigma)
    clip = check_positive("clip", clip)
    s = check_positive_int("survivors", survivors)
    check_choice("neighbours", neighbours, NEIGHBOURS)
    k = accounting._check_count("known_shares", known_shares)
    if k >= s:
        raise LdpsimError(f"known_shares={k} leaves no unknown noise among survivors={s}; "
                          "it must be < survivors")
    sensitivity = 2.0 * clip if neighbours == "replace" else clip
    return sigma * math.sqrt(s - k) / sensitivity


def _survivor_counts(clients: int, rounds: int, dropout: float,
                     survivors: int | Sequence[int] | None) -> Counter:
    n = check_positive_int("clients", clients)
    if survivors is None:
        return Counter({secagg_survivors(n, dropout): rounds}) if rounds else Counter()
    if float(dropout) != 0.0:
        raise LdpsimError("give either dropout (worst case) or survivors (realised), not both")
    if isinstance(survivors, (int,)) or not isinstance(survivors, Sequence):
        s = check_positive_int("survivors", survivors)
        per_round = [s] * rounds
    else:
        per_round = [check_positive_int("survivors", s) for s in survivors]
        if len(per_round) != rounds:
            raise LdpsimError(f"survivors has {len(per_round)} entries, one per round expected "
                              f"(rounds={rounds})")
    for s in per_round:
        if s > n:
            raise LdpsimError(f"survivors must be <= clients ({n}), got {s}")
    return Counter(per_round)


def secagg_epsilon(*, sigma: float, clip: float, clients: int, rounds: int = 1,
                   delta: float, dropout: float = 0.0,
                   survivors: int | Sequence[int] | None = None, known_shares: int = 0,
                   neighbours: str = "replace", method: str = "pld",
                   sampler: str | None = None, dim: int | None = None) -> PrivacyReport:
    """Central (ε, δ) of one client's participation in ``rounds`` securely summed rounds.

    Args:
        sigma: per-client Gaussian noise std per coordinate (> 0).
        clip: L2 clip bound C of every update (> 0).
        clients: n, the cohort of each round (≥ 1).
        rounds: rounds this client took part in (≥ 0).
        delta: total δ in (0, 1).
        dropout: worst-case dropout rate ρ in [0, 1): ``s = n − ⌊ρn⌋`` survivors every round.
        survivors: instead of ``dropout``, the realised survivors (one count for every round,
            or a sequence with one count per round).
        known_shares: noise shares the adversary may know (0: honest clients; 1: the target's
            own share too).
        neighbours: ``"replace"`` (Δ = 2C, default) or ``"add-remove"`` (Δ = C: one
            client's update zeroed out, its noise share kept; module docstring).
        method: ``"pld"`` (default), ``"rdp"`` or ``"analytic"`` (exact; every round must
            have the same survivors).
        sampler: the float32 noise sampler that runs (default ldpsim's; ``"ideal"`` for
            real-valued noise); module docstring.
        dim: coordinates of the update (default: the guarantee holds up to 10⁷).

    Returns:
        A :class:`PrivacyReport` (``details``: per-round survivors, noise multiplier(s),
        sensitivity, assumptions).

    Example: σ = 1, C = 1, n = 100, no dropout, replace-one, one round: z = √100/2 = 5, the
    Gaussian mechanism with multiplier 5 (ε = 0.7255 at δ = 1e-5 by PLD), against a local
    ε of 9.997 for each report alone (multiplier 1/2).
    """
    check_choice("method", method, METHODS)
    check_choice("neighbours", neighbours, NEIGHBOURS)
    delta = check_open_unit("delta", delta)
    k = accounting._check_count("rounds", rounds)
    counts = _survivor_counts(clients, k, dropout, survivors)
    clip = check_positive("clip", clip)
    sensitivity = 2.0 * clip if neighbours == "replace" else clip
    zs = {s: secagg_noise_multiplier(sigma, clip, s, neighbours=neighbours,
                                     known_shares=known_shares) for s in counts}
    if k == 0:
        eps, used = 0.0, method
    elif len(counts) == 1:
        (s, count), = counts.items()
        # One Gaussian of std σ√(s−k_shares) and sensitivity Δ, composed `count` times: the
        # same computation as a client's local Gaussian noise (accounting.ldp_epsilon).
        report = accounting.ldp_epsilon("gaussian", sensitivity=sensitivity, rounds=count,
                                        delta=delta, sigma=zs[s] * sensitivity, method=method,
                                        sampler=sampler, dim=dim)
        eps, used = report.epsilon, report.method
    else:
        # Rounds with different survivors: bound (1) with every round's tails charged as
        # those of the round with the least noise (the largest tail mass and scale).
        budget = delta
        if sampler != "ideal":
            tails = [accounting._realisation("gaussian", sampler, dim, zs[s])[2]
                     for s in counts]
            budget = realised.delta_budget(delta, max(t["tail_mass"] for t in tails),
                                           max(t["tail_scale"] for t in tails), k)
        if not budget > 0:
            eps, used = math.inf, method   # the sampler's tails alone exhaust δ
        elif method == "analytic":
            # Gaussians compose exactly: multipliers z_i give one of (Σ z_i⁻²)^{-1/2}.
            z_total = 1.0 / math.sqrt(sum(c / zs[s] ** 2 for s, c in counts.items()))
            eps, used = analytic_gaussian_epsilon(z_total, budget), "analytic"
        else:
            event = dp_accounting.ComposedDpEvent([
                dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(zs[s]), c)
                for s, c in sorted(counts.items())])
            eps, used = accounting._epsilon_and_method(event, 1, budget, method)
    relation = ("replace one client (sensitivity 2C)" if neighbours == "replace"
                else "zero out one client's update (sensitivity C; its noise share stays "
                     "in the sum)")
    details = {
        "sigma": float(sigma), "clip": clip, "clients": int(clients), "sensitivity": sensitivity,
        "survivors": dict(sorted(counts.items())) if len(counts) > 1 else
        (next(iter(counts)) if counts else secagg_survivors(clients, dropout)),
        "dropout": float(dropout), "known_shares": int(known_shares),
        "noise_multiplier": min(zs.values()) if zs else None,
        "assumptions": "ideal secure aggregation (only the sum is seen); survivors' noise "
                       f"counts except {int(known_shares)} share(s) the adversary may know; "
                       "no sampling amplification",
    }
    return PrivacyReport(float(eps), delta, used, relation, k, details)


def secagg_sigma(*, target_epsilon: float, delta: float, clip: float, clients: int,
                 rounds: int = 1, dropout: float = 0.0, known_shares: int = 0,
                 neighbours: str = "replace", method: str = "analytic",
                 sampler: str | None = None, dim: int | None = None) -> float:
    """Smallest per-client σ whose securely summed noise reaches ``target_epsilon`` centrally.

    Exact (analytic Gaussian calibration, Balle & Wang 2018): ``rounds`` Gaussians of std
    ``σ√(s − k)`` on sensitivity Δ are one Gaussian of std ``σ√((s − k)/rounds)``, so
    ``σ = σ_central·√rounds/√(s − k)`` with ``σ_central`` the analytic σ for (ε, δ) and Δ,
    ``s`` the worst-case survivors for ``dropout``. :func:`secagg_epsilon` with
    ``method="analytic"`` (and the same ``sampler`` and ``dim``) gives back
    ``target_epsilon``; where the float32 sampler's bounded tails bind (large ε: the
    module docstring) that σ does not deliver the target, and the σ returned is instead the
    least that does (bisection as below). With ``method="pld"`` or ``"rdp"``
    the σ is instead the least (bisection, relative tolerance 1e-6, from the exact σ up) whose
    :func:`secagg_epsilon` by that accountant is ``≤ target_epsilon``: a bound looser than the
    exact composition (RDP) asks for more noise to certify the same ε.
    """
    check_choice("method", method, METHODS)
    check_choice("neighbours", neighbours, NEIGHBOURS)
    clip = check_positive("clip", clip)
    k = check_positive_int("rounds", rounds)
    s = secagg_survivors(clients, dropout)
    shares = accounting._check_count("known_shares", known_shares)
    if shares >= s:
        raise LdpsimError(f"known_shares={shares} leaves no unknown noise among "
                          f"survivors={s}; it must be < survivors")
    sensitivity = 2.0 * clip if neighbours == "replace" else clip
    central = analytic_gaussian_sigma(target_epsilon, delta, sensitivity)
    exact = central * math.sqrt(k) / math.sqrt(s - shares)

    def eps(sigma):
        return secagg_epsilon(sigma=sigma, clip=clip, clients=clients, rounds=k, delta=delta,
                              dropout=dropout, known_shares=shares, neighbours=neighbours,
                              method=method, sampler=sampler, dim=dim).epsilon

    if method == "analytic" and eps(exact) <= target_epsilon * (1.0 + 1e-9):
        return exact   # the float32 tails add nothing measurable (rounding of the exact σ)

    lo, hi = exact, exact
    while eps(hi) > target_epsilon:
        lo, hi = hi, hi * 1.25
    while hi - lo > 1e-6 * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if eps(mid) > target_epsilon else (lo, mid)
    return hi
