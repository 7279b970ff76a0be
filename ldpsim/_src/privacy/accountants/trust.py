"""Each trust model's Gaussian noise for one target CENTRAL (ε, δ) (host-side, float64).

"Equal central ε" (the comparison of :func:`trust_model_noise`): in ONE round, n clients
each release one update clipped to L2 norm C, and whatever the trust model lets the
adversary see — every report (local DP), the shuffled multiset of reports (shuffling),
only the sum of the surviving reports (secure aggregation) or only the noisy sum a trusted
server publishes (central DP) — is (ε, δ)-DP for datasets that differ in **one client's
data (replace one; the cohort size n is public)**, under the analysis named below. No
amplification by sampling is taken in any model (a per-participation guarantee: over a
run, each client's guarantee is the composition over the rounds it took part in, the same
participation pattern for every model, :class:`ldpsim.privacy.PrivacyLedger`).

``"central"``
    Trusted server: the clipped sum (sensitivity 2C) plus ``N(0, σ_sum² I)`` with
    ``σ_sum`` the analytic Gaussian calibration for (ε, δ) (Balle & Wang 2018) of the
    float32 noise that runs (:func:`~ldpsim.privacy.calibrate`: the exact ideal σ unless
    the sampler's bounded tails bind, at large ε, where σ is raised until they do not).
``"secagg"``
    Secure aggregation with distributed Gaussian noise: each client adds ``N(0, σ² I)``;
    the adversary sees only the sum of the ``s = n − ⌊ρn⌋`` worst-case survivors, a
    Gaussian of std ``σ√(s − k)`` (``k`` shares the adversary may know);
    :func:`~ldpsim.privacy.secagg_sigma` (exact) and
    :func:`~ldpsim.privacy.secagg_epsilon` (check). With ρ = 0 and k = 0 it is
    the central noise, split over the clients.
``"local"``
    No trusted party: each report is (ε, δ)-DP on its own (replace one input, sensitivity
    2C), ``σ`` the analytic Gaussian calibration of the float32 noise (as ``"central"``);
    the central figure is the same (ε, δ) (the adversary sees the report itself).
``"shuffle"``
    A trusted shuffler: each report is (ε₀, δ₀)-LDP with the LARGEST ε₀ whose shuffled
    guarantee meets the target at this n. The central ε of n shuffled ε₀-LDP reports is
    the numerical "clones" bound of Feldman, McMillan & Talwar (FOCS 2021,
    arXiv:2012.12803; :func:`~ldpsim.privacy.shuffle_epsilon`) at
    ``δ_s = split·δ``. The Gaussian randomizer is (ε₀, δ₀)-DP, not pure: by the same
    paper's extension to approximate-DP local randomizers (arXiv:2012.12803, Theorem 3.8,
    which reduces each (ε₀, δ₀)-DP randomizer to an ε₀-DP one close in total variation), the
    shuffled output is ``(ε, δ_s + (e^ε + 1)(1 + e^{-ε₀}/2)·n·δ₀)``-DP, so ldpsim sets ``δ₀ = (1 − split)·δ / ((e^ε + 1)(1 + e^{-ε₀}/2)·n)`` and the total is
    δ. Each report's σ is the float32 calibration for (ε₀, δ₀) (as ``"local"``: δ₀ is
    tiny, so at large ε₀ the sampler's tails raise σ; the realised δ₀ is never above the
    δ₀ the bound was given). ε₀ is found by bisection on the monotone map ε₀ ↦ central ε (to 1e-6 relative,
    rounded down), starting from ε₀ = ε (always valid: shuffling never hurts). For
    ``n = 1`` and small n amplification is small and ε₀ ≈ ε (at a smaller δ₀: the
    shuffled model can then need MORE noise than local DP). The split is a choice
    (default ½), not optimised.

The std of the noise on the mean of the n reports is ``σ_sum / n`` in every model
(``sigma_mean``); it is what the accuracy depends on (the clip and the signal are the
same in all four). Every guarantee is that of ldpsim's float32 noise sampler (``sampler``,
default ldpsim's) for updates of up to ``dim`` coordinates (default 10⁷), as the engine's.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ldpsim._src._checks import (
    LdpsimError,
    check_choice,
    check_open_unit,
    check_positive,
    check_positive_int,
)
from ldpsim._src.privacy.accountants import secagg, shuffling
from ldpsim._src.privacy.noise import calibration, realised
from ldpsim._src.privacy.noise.calibration import calibrate

__all__ = ["TRUST_MODELS", "TrustModelNoise", "shuffle_local_epsilon", "trust_model_noise"]

TRUST_MODELS = ("local", "shuffle", "secagg", "central")

_RTOL = 1e-6


@dataclasses.dataclass(frozen=True)
class TrustModelNoise:
    """One trust model's Gaussian noise for a target central (ε, δ) at n clients.

    Attributes:
        model: ``"local"``, ``"shuffle"``, ``"secagg"`` or ``"central"``.
        target_epsilon, delta: the central target (per round, replace one client).
        clients: n, reports per round.
        clip: L2 clip bound C.
        sigma_client: std of each client's own noise per coordinate (0 for central).
        sigma_sum: std of the noise on the sum of all n reports (secagg: every client's
            share, ``σ√n``; with the worst-case ``s`` survivors it is ``σ√s`` = central's).
        sigma_mean: ``sigma_sum / n``, the noise std on the mean.
        local_epsilon, local_delta: the guarantee of one report on its own (inf, 1 for
            central: the server sees clean updates).
        central_epsilon: the central ε the model's analysis gives (≤ target; equal up to
            rounding except for shuffle, where it is the bound at the chosen ε₀).
        analysis: the analysis behind ``central_epsilon``.
        details: model-specific values (δ split, survivors, ...).
    """

    model: str
    target_epsilon: float
    delta: float
    clients: int
    clip: float
    sigma_client: float
    sigma_sum: float
    sigma_mean: float
    local_epsilon: float
    local_delta: float
    central_epsilon: float
    analysis: str
    details: dict

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _shuffle_delta0(delta: float, target: float, eps0: float, n: int, split: float) -> float:
    return (1.0 - split) * delta / ((math.exp(target) + 1.0) * (1.0 + math.exp(-eps0) / 2.0)
                                    * n)


def shuffle_local_epsilon(target_epsilon: float, delta: float, clients: int, *,
                          analysis: str = "clones", split: float = 0.5) -> tuple[float, float]:
    """The largest ε₀ (and its δ₀) whose n shuffled (ε₀, δ₀)-LDP reports are centrally
    (``target_epsilon``, ``delta``)-DP (module docstring: the clones bound at
    ``split·delta`` plus the approximate-DP term ``(e^ε+1)(1+e^{-ε₀}/2)·n·δ₀``).

    Returns ``(epsilon0, delta0)``; ``epsilon0 ≥ target_epsilon`` always.
    """
    target = check_positive("target_epsilon", target_epsilon)
    delta = check_open_unit("delta", delta)
    n = check_positive_int("clients", clients)
    split = check_open_unit("split", split)
    if analysis not in ("clones", "stronger"):
        raise LdpsimError(f"analysis must be 'clones' or 'stronger' (numerical bounds), got "
                          f"{analysis!r}")
    delta_s = split * delta

    def central(eps0: float) -> float:
        return float(shuffling.shuffle_epsilon(delta_s, eps0, n, analysis=analysis))

    lo, hi = target, 2.0 * target
    while central(hi) <= target:        # the central ε grows without bound in ε₀
        lo, hi = hi, 2.0 * hi
        if hi > 1e4:
            raise LdpsimError(f"no finite epsilon0 bound found for clients={n}")
    while hi - lo > _RTOL * lo:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if central(mid) <= target else (lo, mid)
    return lo, _shuffle_delta0(delta, target, lo, n, split)


def trust_model_noise(model: str, *, target_epsilon: float, delta: float, clients: int,
                      clip: float = 1.0, dropout: float = 0.0, known_shares: int = 0,
                      shuffle_analysis: str = "clones", delta_split: float = 0.5,
                      sampler: str | None = None, dim: int | None = None) -> TrustModelNoise:
    """The Gaussian noise of trust ``model`` for a central (ε, δ) per round at n clients.

    Args:
        model: one of :data:`TRUST_MODELS`.
        target_epsilon: central ε per round (> 0, finite).
        delta: central δ in (0, 1).
        clients: n, reports per round (≥ 1).
        clip: L2 clip bound C (> 0).
        dropout: secagg only: worst-case dropout rate ρ in [0, 1) the noise tolerates.
        known_shares: secagg only: noise shares the adversary may know.
        shuffle_analysis: shuffle only: ``"clones"`` (every ε₀-DP randomizer) or
            ``"stronger"`` (only randomizers that admit it: not the Gaussian).
        delta_split: shuffle only: the fraction of δ given to the clones bound.
        sampler: the float32 Gaussian sampler that runs (default ldpsim's; ``"ideal"``:
            real-valued noise, the textbook σ).
        dim: coordinates of the update (default: the guarantee holds up to 10⁷).

    Returns:
        A :class:`TrustModelNoise`. Equal ``target_epsilon`` and ``delta`` across models
        is "equal central ε" in the sense of the module docstring.

    Example: ε = 1, δ = 1e-5, n = 1000, C = 1: central σ_sum = 7.461 (analytic, Δ = 2),
    local σ per client the same (so its σ_sum, 235.9, is √1000 times larger), secagg σ per
    client 7.461/√1000 = 0.2359. At ε = 100 the ideal σ (0.1893) is not (100, 1e-5)-DP as
    float32 noise: local and central get σ = 0.2751.
    """
    check_choice("model", model, TRUST_MODELS)
    target = check_positive("target_epsilon", target_epsilon)
    delta = check_open_unit("delta", delta)
    n = check_positive_int("clients", clients)
    clip = check_positive("clip", clip)
    sens = 2.0 * clip
    if model != "secagg" and (dropout != 0.0 or known_shares != 0):
        raise LdpsimError(f"dropout and known_shares apply to model='secagg' only, got "
                          f"model={model!r}")
    if model != "shuffle" and (shuffle_analysis != "clones" or delta_split != 0.5):
        raise LdpsimError(f"shuffle_analysis and delta_split apply to model='shuffle' only, "
                          f"got model={model!r}")
    ideal = sampler == "ideal"
    if not ideal:
        sampler = realised.default_sampler("gaussian") if sampler is None else sampler
        check_choice("sampler", sampler, realised.SAMPLERS["gaussian"] + ("ideal",))
    dim = None if ideal else realised.check_dim(dim)
    details: dict[str, Any] = {"neighbours": "replace one client (sensitivity 2C)",
                               "sampler": sampler if not ideal else "ideal", "dim": dim}

    def gaussian(eps: float, dlt: float) -> tuple[float, float]:
        """(σ, ε delivered at ``dlt``) of one release at sensitivity 2C."""
        if ideal:
            sigma = calibration.analytic_gaussian_sigma(eps, dlt, sens)
            return sigma, calibration.analytic_gaussian_epsilon(sigma, dlt, sens)
        cal = calibrate("gaussian", epsilon=eps, delta=dlt, sensitivity=sens,
                        sampler=sampler, dim=dim)
        return cal.sigma, cal.achieved_epsilon

    def share_epsilon(sigma: float) -> float:   # one report alone, at δ
        if ideal:
            return calibration.analytic_gaussian_epsilon(sigma, delta, sens)
        return realised.realised_epsilon("gaussian", sampler, sens / sigma, dim, delta)

    if model == "central":
        sigma_sum, central = gaussian(target, delta)
        sigma_client, local_eps, local_delta = 0.0, math.inf, 1.0
        analysis = "analytic Gaussian (Balle & Wang 2018) on the clipped sum"
    elif model == "local":
        sigma_client, local_eps = gaussian(target, delta)
        sigma_sum = sigma_client * math.sqrt(n)
        local_delta = delta
        central = local_eps
        analysis = "analytic Gaussian on each report (the adversary sees it)"
    elif model == "secagg":
        sigma_client = secagg.secagg_sigma(target_epsilon=target, delta=delta, clip=clip,
                                           clients=n, dropout=dropout,
                                           known_shares=known_shares, sampler=sampler,
                                           dim=dim)
        s = secagg.secagg_survivors(n, dropout)
        sigma_sum = sigma_client * math.sqrt(n)     # every client's share (no dropout)
        central = secagg.secagg_epsilon(sigma=sigma_client, clip=clip, clients=n, delta=delta,
                                        dropout=dropout, known_shares=known_shares,
                                        method="analytic", sampler=sampler, dim=dim).epsilon
        local_eps, local_delta = share_epsilon(sigma_client), delta
        analysis = "secure aggregation of Gaussian shares (ldpsim.privacy.secagg_epsilon)"
        details.update(survivors=s, dropout=float(dropout), known_shares=int(known_shares))
    else:
        eps0, delta0 = shuffle_local_epsilon(target, delta, n, analysis=shuffle_analysis,
                                             split=delta_split)
        sigma_client, _ = gaussian(eps0, delta0)   # (ε₀, δ₀)-DP as the float32 noise runs
        sigma_sum = sigma_client * math.sqrt(n)
        local_eps, local_delta = eps0, delta0
        central = float(shuffling.shuffle_epsilon(delta_split * delta, eps0, n,
                                                  analysis=shuffle_analysis))
        analysis = (f"shuffling, Feldman-McMillan-Talwar {shuffle_analysis} bound at "
                    f"delta_s = {delta_split:g}*delta, + (e^eps+1)(1+e^-eps0/2) n delta0")
        details.update(delta_split=float(delta_split), delta_shuffle=delta_split * delta)
    return TrustModelNoise(model=model, target_epsilon=target, delta=delta, clients=n,
                           clip=clip, sigma_client=float(sigma_client),
                           sigma_sum=float(sigma_sum), sigma_mean=float(sigma_sum) / n,
                           local_epsilon=float(local_eps), local_delta=float(local_delta),
                           central_epsilon=float(central), analysis=analysis, details=details)
