"""Noise averaging ("cancellation") of local DP noise: exact theory and a chunked simulator.

Setup: n clients each release ``v_i = u_i + z_i`` with a clipped update
``u_i`` and i.i.d. per-coordinate noise ``z_i`` of standard deviation ``s`` (``s = σ`` for
the Gaussian mechanism, ``s = √2·b`` for Laplace). The server forms the weighted mean with
weights ``w_i``; the aggregated noise ``z̄ = Σ w_i z_i / Σ w_i`` has per-coordinate standard
deviation ``s/√n_eff`` with ``n_eff = (Σw)²/Σw²`` (= n for equal weights). Hence

* ``E‖z̄‖ = c_d·s/√n_eff`` for Gaussian noise, with ``c_d = √2·Γ((d+1)/2)/Γ(d/2)``
  (the mean of a χ_d variable), ``c_d = √d·(1 − 1/(4d) + O(d⁻²))`` so ``E‖z̄‖ ≈ s·√(d/n)``;
* the aligned-signal SNR ``ρ = C√n_eff/(s√d)`` (all clients send the same update of norm
  C) and the expected cosine between the noisy and the clean mean ``≈ ρ/√(1+ρ²)``;
* with independent random directions the clean mean itself shrinks like ``1/√n_eff``,
  so the SNR does not grow with n: averaging only cancels noise relative to the
  *shared* part of the updates.

This module checks these claims by *drawing the real per-client noise*
(:func:`simulate_average` with ``method="per-client"``: n × d draws through
:func:`ldpsim.privacy.gaussian_noise` / :func:`~ldpsim.privacy.laplace_noise`,
in chunks of clients so memory is O(chunk × d), keys derived from positions as the engine
does) and, for very large n, by drawing the aggregate from its exact distribution
(``method="aggregate"``). It knows nothing of federated learning.

References:
    MindSpore Federated, "Local differential privacy training (noise)": the claim that
    noise mostly cancels beyond ~1,000 clients.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy import special

from ldpsim._src import _xla
from ldpsim._src._checks import LdpsimError, check_choice, check_nonnegative, check_positive, check_positive_int
from ldpsim._src.privacy.noise import sampling
from ldpsim._src.privacy.randomizers.mechanism import noise_std_factor
from ldpsim._src.privacy.noise.mechanisms import gaussian_noise, laplace_noise

__all__ = [
    "METHODS",
    "NoiseTrial",
    "chi_mean_factor",
    "choose_method",
    "effective_num_clients",
    "expected_cosine_aligned",
    "expected_noise_norm",
    "expected_snr_aligned",
    "expected_snr_random",
    "noise_norm_sd",
    "noise_study",
    "noise_std",
    "random_direction_sq_norm",
    "simulate_average",
]

MECHANISMS = ("gaussian", "laplace")
METHODS = ("auto", "per-client", "aggregate")
#: ``method="auto"`` draws real per-client noise while n·d stays at or below this many
#: coordinates per trial (≈ 2 s per trial with threefry on 2 CPU cores), and the exact
#: aggregate distribution above it.
AUTO_PER_CLIENT_MAX = 2**27
_CHUNK_ELEMENTS = 2**22  # floats per [chunk, d] buffer (16 MiB in float32)


# --------------------------------------------------------------------------- theory


def noise_std(mechanism: str, noise_scale: float) -> float:
    """Per-coordinate standard deviation of one client's noise: σ, or √2·b for Laplace(b)."""
    check_choice("mechanism", mechanism, MECHANISMS)
    scale = check_nonnegative("noise_scale", noise_scale)
    return noise_std_factor(mechanism) * scale


def chi_mean_factor(dim: int) -> float:
    """``c_d = E‖g‖`` for ``g ~ N(0, I_d)``: ``√2·Γ((d+1)/2)/Γ(d/2)``.

    Computed as ``√2·poch(d/2, 1/2)`` (scipy's Pochhammer symbol), which keeps full
    precision for any d; ``exp(gammaln(·) − gammaln(·))`` loses ~1e-9 relative at d = 10⁷.

    Examples:
        >>> round(chi_mean_factor(1), 6)  # E|N(0,1)| = √(2/π)
        0.797885
    """
    d = check_positive_int("dim", dim)
    return math.sqrt(2.0) * float(special.poch(d / 2.0, 0.5))


def effective_num_clients(weights: Sequence[float] | np.ndarray) -> float:
    """``n_eff = (Σw)²/Σw²`` of a weighted mean; ``n`` for equal weights."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or w.size == 0 or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise LdpsimError("weights must be a non-empty 1-D array of finite values >= 0 with a positive sum")
    return float(w.sum() ** 2 / np.sum(w**2))


def _excess_kurtosis(mechanism: str) -> float:
    return 0.0 if mechanism == "gaussian" else 3.0  # Laplace: excess kurtosis 3


def expected_noise_norm(std: float, dim: int, n_eff: float, mechanism: str = "gaussian") -> float:
    """``E‖z̄‖`` for the mean of n_eff clients' noise of per-coordinate std ``std``.

    Gaussian: exact, ``c_d·std/√n_eff`` (:func:`chi_mean_factor`). Laplace: the mean of n
    Laplace variables has excess kurtosis κ = 3/n, and the delta method gives
    ``std·√(d/n)·(1 − (2 + κ)/(8d))`` (error O(d⁻²); the Gaussian case of the same
    expansion is ``c_d``'s ``1 − 1/(4d)``).
    """
    check_choice("mechanism", mechanism, MECHANISMS)
    std = check_nonnegative("std", std)
    n_eff = check_positive("n_eff", n_eff)
    d = check_positive_int("dim", dim)
    if mechanism == "gaussian":
        return chi_mean_factor(d) * std / math.sqrt(n_eff)
    kappa = _excess_kurtosis(mechanism) / n_eff
    return std * math.sqrt(d / n_eff) * (1.0 - (2.0 + kappa) / (8.0 * d))


def noise_norm_sd(std: float, dim: int, n_eff: float, mechanism: str = "gaussian") -> float:
    """Standard deviation of ‖z̄‖ over trials.

    Gaussian: exact, ``std/√n_eff · √(d − c_d²)`` (≈ ``std/√(2 n_eff)``). Laplace: delta
    method, ``std/√n_eff · √((2 + κ)/4)`` with κ = 3/n_eff.
    """
    check_choice("mechanism", mechanism, MECHANISMS)
    std = check_nonnegative("std", std)
    n_eff = check_positive("n_eff", n_eff)
    d = check_positive_int("dim", dim)
    if mechanism == "gaussian":
        c = chi_mean_factor(d)
        return std / math.sqrt(n_eff) * math.sqrt(max(d - c * c, 0.0))
    kappa = _excess_kurtosis(mechanism) / n_eff
    return std / math.sqrt(n_eff) * math.sqrt((2.0 + kappa) / 4.0)


def expected_snr_aligned(clip: float, std: float, dim: int, n_eff: float) -> float:
    """ρ = C√n_eff/(std·√d): SNR when every client sends the same update of norm C (§5.3)."""
    clip = check_positive("clip", clip)
    d = check_positive_int("dim", dim)
    n_eff = check_positive("n_eff", n_eff)
    std = check_nonnegative("std", std)
    return math.inf if std == 0 else clip * math.sqrt(n_eff) / (std * math.sqrt(d))


def random_direction_sq_norm(clip: float, dim: int, mechanism: str = "gaussian") -> float:
    """``E‖r‖₂²`` of a random update on the clip sphere of the mechanism's norm.

    Gaussian (L2 clip): ``r`` uniform on the L2 sphere of radius C, ``‖r‖₂² = C²``.
    Laplace (L1 clip): ``r`` uniform on the L1 sphere of radius C; its normalised absolute
    values are Dirichlet(1, …, 1), so ``E‖r‖₂² = C²·d·E[x₁²] = 2C²/(d+1)``.
    """
    check_choice("mechanism", mechanism, MECHANISMS)
    clip = check_positive("clip", clip)
    d = check_positive_int("dim", dim)
    return clip**2 if mechanism == "gaussian" else 2.0 * clip**2 / (d + 1.0)


def expected_snr_random(clip: float, std: float, dim: int, mechanism: str = "gaussian") -> float:
    """SNR with independent random directions, ``√(E‖r‖²)/(std·√d)``: independent of n (§5.3).

    The clean mean of n_eff independent directions has ``E‖ū‖² = E‖r‖²/n_eff``, the
    same 1/n_eff as the noise, so the ratio does not improve with more clients.
    """
    std = check_nonnegative("std", std)
    m2 = random_direction_sq_norm(clip, dim, mechanism)
    return math.inf if std == 0 else math.sqrt(m2) / (std * math.sqrt(dim))


def expected_cosine_aligned(snr: float) -> float:
    """Cosine between the noisy and the clean mean, ``ρ/√(1+ρ²)`` (large d, §5.3)."""
    snr = check_nonnegative("snr", snr) if not math.isinf(snr) else snr
    return 1.0 if math.isinf(snr) else snr / math.sqrt(1.0 + snr * snr)


# --------------------------------------------------------------------------- simulation


class NoiseTrial(NamedTuple):
    """One trial of noise averaging (scalars).

    Attributes:
        noise_norm: ‖z̄‖, the norm of the aggregated noise.
        noise_sq: ‖z̄‖² (its mean over trials divided by d estimates the per-coordinate variance).
        cosine_aligned: cos(ū + z̄, ū) for the aligned signal ū = C·e₁ (every client
            sends the same update of norm C; e₁ is the first coordinate axis, which has
            norm C in both L1 and L2).
        random_signal_norm: ‖ū_r‖ for independent random directions on the clip sphere.
        cosine_random: cos(ū_r + z̄, ū_r).
    """

    noise_norm: jax.Array
    noise_sq: jax.Array
    cosine_aligned: jax.Array
    random_signal_norm: jax.Array
    cosine_random: jax.Array


def _trial_stats(z_bar: jax.Array, r_bar: jax.Array, clip: jax.Array) -> NoiseTrial:
    noise_sq = jnp.sum(z_bar * z_bar)
    noise_norm = jnp.sqrt(noise_sq)
    aligned_dot = clip * clip + clip * z_bar[0]  # ⟨C e₁ + z̄, C e₁⟩
    aligned_norm = jnp.sqrt(noise_sq + 2.0 * clip * z_bar[0] + clip * clip)
    r_sq = jnp.sum(r_bar * r_bar)
    r_norm = jnp.sqrt(r_sq)
    noisy_r = jnp.sqrt(jnp.sum(jnp.square(r_bar + z_bar)))
    return NoiseTrial(
        noise_norm=noise_norm,
        noise_sq=noise_sq,
        cosine_aligned=aligned_dot / (aligned_norm * clip),
        random_signal_norm=r_norm,
        cosine_random=(r_sq + jnp.vdot(z_bar, r_bar)) / (noisy_r * r_norm),
    )


def _random_direction(key: jax.Array, dim: int, clip: jax.Array, mechanism: str) -> jax.Array:
    """A uniformly random point on the sphere of radius ``clip`` in the mechanism's clip norm."""
    if mechanism == "gaussian":
        g = sampling.normal(key, (dim,))  # the signal, not privacy noise: the fast sampler
        return clip * g / jnp.linalg.norm(g)
    g = jax.random.laplace(key, (dim,))  # |g_j| iid Exp(1): g/‖g‖₁ is uniform on the L1 sphere
    return clip * g / jnp.sum(jnp.abs(g))


@_xla.jit(static_argnames=("dim", "chunk", "mechanism"))
def _per_client_trial(key, num_clients, weights, noise_scale, clip, *, dim, chunk, mechanism):
    """Draw every client's noise and random direction, chunk by chunk, and aggregate.

    ``num_clients`` is traced and the loop runs ``ceil(n / chunk)`` times, so one compiled
    program serves every n and time is linear in n. ``weights=None`` (equal weights) keeps
    nothing of size n: the only buffers are O(chunk × dim) (the chunk's noise and
    directions) and O(dim) (the running sums). With ``weights`` (float32[padded n]) the
    chunk's slice is read in the loop.
    """
    noise_root, dir_root = jax.random.split(key)
    template = jnp.zeros((dim,), jnp.float32)
    draw = gaussian_noise if mechanism == "gaussian" else laplace_noise

    def client(client_id):
        z = draw(jax.random.fold_in(noise_root, client_id), template, noise_scale)
        r = _random_direction(jax.random.fold_in(dir_root, client_id), dim, clip, mechanism)
        return z, r

    def body(c, carry):
        z_sum, r_sum, total = carry
        ids = c * chunk + jnp.arange(chunk, dtype=jnp.int32)
        valid = ids < num_clients
        if weights is None:
            w = valid.astype(jnp.float32)
        else:
            w = jnp.where(valid, jax.lax.dynamic_slice(weights, (c * chunk,), (chunk,)), 0.0)
        z, r = jax.vmap(client)(ids)
        return z_sum + w @ z, r_sum + w @ r, total + jnp.sum(w)

    num_chunks = (num_clients + chunk - 1) // chunk
    zeros = jnp.zeros((dim,), jnp.float32)
    z_sum, r_sum, total = jax.lax.fori_loop(0, num_chunks, body, (zeros, zeros, jnp.float32(0.0)))
    if weights is None:
        total = num_clients.astype(jnp.float32)  # exact; a float32 running count stops at 2^24
    return _trial_stats(z_sum / total, r_sum / total, clip)


@_xla.jit(static_argnames=("dim", "mechanism"))
def _aggregate_trial(key, num_clients, weight_ratio, noise_scale, clip, dir_sq, *, dim, mechanism):
    """Draw z̄ from its exact distribution (Gaussian: any weights; Laplace: equal weights).

    ``weight_ratio = √(Σw²)/Σw = 1/√n_eff``. The random-direction mean ū_r is drawn from
    its CLT limit N(0, E‖r‖²/(d·n_eff)·I) (exact first two moments).
    """
    k_noise, k_dir = jax.random.split(key)
    if mechanism == "gaussian":
        z_bar = noise_scale * weight_ratio * jax.random.normal(k_noise, (dim,))
    else:
        # Σ of n iid Laplace(b) = b·(G₁ − G₂) with G₁, G₂ iid Gamma(n, 1) (Laplace = difference
        # of two exponentials), exact for equal weights.
        n = num_clients.astype(jnp.float32)
        g = jax.random.gamma(k_noise, n, (2, dim))
        z_bar = noise_scale * (g[0] - g[1]) / n
    r_bar = jnp.sqrt(dir_sq / dim) * weight_ratio * jax.random.normal(k_dir, (dim,))
    return _trial_stats(z_bar, r_bar, clip)


def choose_method(method: str, num_clients: int, dim: int, weighted: bool = False, mechanism: str = "gaussian") -> str:
    """Resolve ``method="auto"``: real per-client draws while n·d ≤ :data:`AUTO_PER_CLIENT_MAX`.

    The aggregate method is exact in distribution for the Gaussian mechanism (any
    weights) and for Laplace with equal weights; weighted Laplace always draws per client.
    """
    check_choice("method", method, METHODS)
    if method != "auto":
        return method
    if (weighted and mechanism == "laplace") or num_clients * dim <= AUTO_PER_CLIENT_MAX:
        return "per-client"
    return "aggregate"


def _chunk_for(num_clients: int, dim: int, chunk_size: int | None) -> int:
    chunk = chunk_size if chunk_size is not None else max(1, _CHUNK_ELEMENTS // dim)
    chunk = check_positive_int("chunk_size", chunk)
    # Round n up to a power of two so that few distinct shapes are compiled.
    return min(chunk, 1 << max(num_clients - 1, 0).bit_length())


def simulate_average(
    key: jax.Array,
    *,
    num_clients: int,
    dim: int,
    noise_scale: float,
    clip: float,
    mechanism: str = "gaussian",
    method: str = "per-client",
    weights: np.ndarray | None = None,
    chunk_size: int | None = None,
) -> NoiseTrial:
    """One trial: aggregate ``num_clients`` clients' noise and measure it against two signals.

    With ``method="per-client"`` every client's noise vector (d coordinates) is drawn
    with :mod:`ldpsim._src.privacy.noise.mechanisms` from key ``fold_in(noise_root, client_id)``, and
    its random direction from ``fold_in(dir_root, client_id)``; clients are processed in
    chunks of ``chunk_size`` (default: 2²² / d) inside one ``fori_loop``, so memory is
    O(chunk × d) and n = 10⁶ is feasible (time O(n·d)). ``method="aggregate"`` draws the
    mean noise from its exact distribution in O(d) (see :func:`choose_method`).

    Args:
        key: PRNG key of this trial.
        num_clients: n ≥ 1.
        dim: dimension d of an update.
        noise_scale: the mechanism's parameter: σ (Gaussian) or b (Laplace).
        clip: clip bound C (L2 for Gaussian, L1 for Laplace): the signal scale.
        mechanism: ``"gaussian"`` or ``"laplace"``.
        method: ``"per-client"``, ``"aggregate"`` or ``"auto"``.
        weights: optional non-negative weights of the mean, shape [n] (e.g. data sizes).
        chunk_size: clients per chunk for ``"per-client"``.

    Returns:
        A :class:`NoiseTrial` of scalars.
    """
    n = check_positive_int("num_clients", num_clients)
    d = check_positive_int("dim", dim)
    check_choice("mechanism", mechanism, MECHANISMS)
    scale = check_nonnegative("noise_scale", noise_scale)
    clip = check_positive("clip", clip)
    if weights is not None:
        weights = np.asarray(weights, dtype=np.float32)
        if weights.shape != (n,):
            raise LdpsimError(f"weights must have shape ({n},) (one per client), got {weights.shape}")
        n_eff = effective_num_clients(weights)
    else:
        n_eff = float(n)
    method = choose_method(method, n, d, weights is not None, mechanism)
    if method == "aggregate":
        if mechanism == "laplace" and weights is not None:
            raise LdpsimError("method='aggregate' with Laplace noise needs equal weights; use method='per-client'")
        return _aggregate_trial(
            key, jnp.int32(n), jnp.float32(1.0 / math.sqrt(n_eff)), jnp.float32(scale), jnp.float32(clip),
            jnp.float32(random_direction_sq_norm(clip, d, mechanism)), dim=d, mechanism=mechanism,
        )
    chunk = _chunk_for(n, d, chunk_size)
    w = None
    if weights is not None:  # equal weights need no array of size n (memory set by the chunk)
        w = np.zeros(-(-n // chunk) * chunk, np.float32)
        w[:n] = weights
        w = jnp.asarray(w)
    return _per_client_trial(
        key, jnp.int32(n), w, jnp.float32(scale), jnp.float32(clip),
        dim=d, chunk=chunk, mechanism=mechanism,
    )


def _mean_sd(values: np.ndarray) -> tuple[float, float]:
    values = np.asarray(values, dtype=np.float64)
    sd = float(values.std(ddof=1)) if values.size > 1 else math.nan
    return float(values.mean()), sd


def noise_study(
    key: jax.Array,
    *,
    clients: Sequence[int],
    dim: int,
    noise_scale: float,
    clip: float,
    mechanism: str = "gaussian",
    trials: int = 10,
    method: str = "auto",
    weights: Callable[[int], np.ndarray] | None = None,
    chunk_size: int | None = None,
    progress: Callable[[int], Any] | None = None,
) -> list[dict[str, Any]]:
    """Measure noise cancellation for each client count n, with theory beside each measurement.

    Trial ``t`` of client count ``n`` uses key ``fold_in(fold_in(key, n), t)``, so a row does
    not depend on which other client counts are in the list.

    Args:
        key: root PRNG key.
        clients: client counts n (each ≥ 1).
        dim, noise_scale, clip, mechanism, method, chunk_size: see :func:`simulate_average`.
        trials: independent trials per n (≥ 2 for a standard deviation).
        weights: optional function ``n -> weights[n]`` for a weighted mean.
        progress: called with 1 after each trial (e.g. ``tqdm.update``).

    Returns:
        One dict per n with keys ``clients, dim, trials, sigma`` (per-coordinate noise std),
        ``noise_scale, n_eff, method, noise_norm_mean, noise_norm_std, noise_norm_theory,
        noise_norm_sd_theory, coord_std, coord_std_theory, snr_aligned, snr_aligned_theory,
        snr_random, snr_random_theory, cosine, cosine_theory, cosine_random``. SNRs and
        cosines are means over trials; ``snr_* = ‖ū‖/‖z̄‖``.
    """
    trials = check_positive_int("trials", trials)
    d = check_positive_int("dim", dim)
    std = noise_std(mechanism, noise_scale)
    rows = []
    for n in clients:
        n = check_positive_int("clients", n)
        w = None if weights is None else np.asarray(weights(n))
        n_eff = float(n) if w is None else effective_num_clients(w)
        chosen = choose_method(method, n, d, w is not None, mechanism)
        stats = []
        for t in range(trials):
            trial_key = jax.random.fold_in(jax.random.fold_in(key, n), t)
            out = simulate_average(
                trial_key, num_clients=n, dim=d, noise_scale=noise_scale, clip=clip,
                mechanism=mechanism, method=chosen, weights=w, chunk_size=chunk_size,
            )
            stats.append(np.asarray(jnp.stack(out), dtype=np.float64))
            if progress is not None:
                progress(1)
        s = NoiseTrial(*np.stack(stats, axis=1))
        norm_mean, norm_sd = _mean_sd(s.noise_norm)
        rho = expected_snr_aligned(clip, std, d, n_eff)
        rows.append({
            "clients": n,
            "dim": d,
            "trials": trials,
            "sigma": std,
            "noise_scale": float(noise_scale),
            "n_eff": n_eff,
            "method": chosen,
            "noise_norm_mean": norm_mean,
            "noise_norm_std": norm_sd,
            "noise_norm_theory": expected_noise_norm(std, d, n_eff, mechanism),
            "noise_norm_sd_theory": noise_norm_sd(std, d, n_eff, mechanism),
            "coord_std": math.sqrt(float(np.mean(s.noise_sq)) / d),
            "coord_std_theory": std / math.sqrt(n_eff),
            "snr_aligned": float(np.mean(clip / s.noise_norm)),
            "snr_aligned_theory": rho,
            "snr_random": float(np.mean(s.random_signal_norm / s.noise_norm)),
            "snr_random_theory": expected_snr_random(clip, std, d, mechanism),
            "cosine": float(np.mean(s.cosine_aligned)),
            "cosine_theory": expected_cosine_aligned(rho),
            "cosine_random": float(np.mean(s.cosine_random)),
        })
    return rows
