"""Noise-cancellation metrics of one round, computed exactly inside the jitted kernel.

The round accumulates, over the cohort (in chunks), the weighted sums of the clean
clipped updates ``S_u = Σ w_k u_k`` and of the noise ``S_ξ = Σ w_k ξ_k`` separately, so
that the aggregated noise ``z̄ = S_ξ/Σw`` and the aggregated clean update
``ū = S_u/Σw`` are known exactly (not estimated as a difference of noisy quantities).

Theory: with i.i.d. per-coordinate noise of standard deviation s
(σ for Gaussian, √2·b for Laplace) and weights w, ``z̄`` has per-coordinate std
``s·√(Σw²)/Σw = s/√n_eff`` with ``n_eff = (Σw)²/Σw²``, so ``‖z̄‖ ≈ s·√(d/n_eff)``.
A report randomizer (PrivUnit, Duchi et al., SignDS) has a decoding error ``ξ_k =
decoded_k − u_k`` whose variance depends on the client's input; the round passes
``s² = Σ w_k² s_k²/Σ w_k²`` with ``s_k²`` the exact mean per-coordinate variance of client
k's release, so the same formula gives ``√(E‖z̄‖²) = √(Σ w_k² tr Var_k)/Σw``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

PyTree = Any

__all__ = ["CohortSums", "RoundMetrics", "finalize_metrics", "theory_noise_norm", "tree_dot",
           "tree_norm", "tree_size"]


class CohortSums(NamedTuple):
    """Running sums over the clients of a round (the carry of the chunk loop).

    Attributes:
        clean: Σ w_k u_k, the weighted sum of clipped updates (model-shaped).
        noise: Σ w_k ξ_k, the weighted sum of the noise (model-shaped).
        weight: Σ w_k. weight_sq: Σ w_k².
        clients: number of participating (non-padding) clients.
        clipped: participating clients whose clip bound was active.
        nonfinite: participating clients whose update was not finite (aggregated as their
            privatized zero substitute; a diagnostic of the simulation, never released).
        loss: Σ of the finite participants' mean local training loss.
        examples: Σ |D_k| over included clients.
    """

    clean: PyTree
    noise: PyTree
    weight: jax.Array
    weight_sq: jax.Array
    clients: jax.Array
    clipped: jax.Array
    nonfinite: jax.Array
    loss: jax.Array
    examples: jax.Array

    @classmethod
    def zeros(cls, params: PyTree) -> "CohortSums":
        z = jax.tree_util.tree_map(lambda p: jnp.zeros(jnp.shape(p), jnp.float32), params)
        f = jnp.zeros((), jnp.float32)
        i = jnp.zeros((), jnp.int32)
        return cls(z, z, f, f, i, i, i, f, f)


class RoundMetrics(NamedTuple):
    """Per-round metrics (scalars; all computed exactly from the round's sums).

    Attributes:
        noise_norm: ‖z̄‖, norm of the aggregated noise: the error of the decoded aggregate
            against the clean (clipped) aggregate, for every randomizer (a report
            randomizer's "noise" is its decoding error, ``decoded − clipped``).
        signal_norm: ‖ū‖, norm of the aggregated clean clipped update.
        snr: signal_norm / noise_norm (inf without noise).
        cosine: cosine between the noisy aggregate ū + z̄ and the clean aggregate ū.
        update_norm: ‖ū + z̄‖, norm of what the server applies.
        clip_fraction: fraction of participants whose update was clipped (a non-finite
            update's zero substitute is not clipped).
        nonfinite_clients: participants whose update was not finite (aggregated as the
            privatized zero substitute; a diagnostic of the simulation, never released).
        clients: participants in the round (cohort size, padding excluded).
        n_eff: (Σw)²/Σw², the effective number of clients of the weighted mean.
        theory_noise_norm: √(E‖z̄‖²) = s·√(d/n_eff), s² the weighted mean
            per-coordinate variance ``Σw_k²s_k²/Σw_k²`` of the clients' releases (additive:
            (factor·scale)²; report randomizers: exact for each client's input); the round
            adds a biased decoder's ``‖Σw_k bias_k‖/Σw`` in quadrature.
        train_loss: mean local training loss over finite participants.
        clip_bound: the round's clip bound (a mode with per-client bounds: their mean over
            the included clients).
        noise_sum_std: per-coordinate std of the noise on the weighted SUM,
            ``√(Σ_k w_k² s_k²)`` (central: z_Δ·C).
        survivors: clients whose update reached the aggregate.
        noise_variance_fraction: realised / target noise variance on the sum (distributed
            DP: survivors/m); 1 in the other modes.
        unclipped_fraction: the released noisy fraction of unclipped clients (adaptive
            clipping), NaN otherwise.
        next_clip: the bound the next round starts from (adaptive rules), else the
            round's bound.
        effective_noise_std: the realised root mean square per coordinate of the noise on
            the weighted sum, ``‖Σ_k w_k ξ_k‖/√d`` (against ``noise_sum_std``, its
            expectation; for an integer aggregator the error of the decoded sum: noise,
            rounding and any wrap).
        wrapped_fraction: integer aggregators: the fraction of the integer sum's
            coordinates that left the ``b``-bit range (decoded wrongly); NaN otherwise.
        rounding_failures: integer aggregators: clients whose randomized rounding failed
            its norm check on every try (they sent zero); 0 otherwise.

    The last nine are set by the round kernel (:func:`ldpsim.fl.make_round_fn`);
    :func:`finalize_metrics` leaves them NaN (0 for ``rounding_failures``).
    """

    noise_norm: jax.Array
    signal_norm: jax.Array
    snr: jax.Array
    cosine: jax.Array
    update_norm: jax.Array
    clip_fraction: jax.Array
    nonfinite_clients: jax.Array
    clients: jax.Array
    n_eff: jax.Array
    theory_noise_norm: jax.Array
    train_loss: jax.Array
    clip_bound: jax.Array
    noise_sum_std: jax.Array
    survivors: jax.Array
    noise_variance_fraction: jax.Array
    unclipped_fraction: jax.Array
    next_clip: jax.Array
    effective_noise_std: jax.Array
    wrapped_fraction: jax.Array
    rounding_failures: jax.Array


def tree_dot(a: PyTree, b: PyTree) -> jax.Array:
    """⟨a, b⟩ summed over all leaves."""
    return sum(jnp.vdot(x, y) for x, y in zip(jax.tree_util.tree_leaves(a),
                                               jax.tree_util.tree_leaves(b)))


def tree_norm(a: PyTree) -> jax.Array:
    """Global L2 norm of a pytree."""
    return jnp.sqrt(tree_dot(a, a))


def tree_size(a: PyTree) -> int:
    """Number of scalars d in a pytree (static)."""
    return sum(int(jnp.size(x)) for x in jax.tree_util.tree_leaves(a))


def theory_noise_norm(noise_std: jax.typing.ArrayLike, d: int, n_eff: jax.typing.ArrayLike
                      ) -> jax.Array:
    """Predicted norm of the aggregated noise, ``s·√(d/n_eff)``.

    This is √(E‖z̄‖²); E‖z̄‖ is smaller by the factor c_d/√d = 1 − 1/(4d) + O(d⁻²).
    """
    return jnp.asarray(noise_std, jnp.float32) * jnp.sqrt(d / jnp.asarray(n_eff, jnp.float32))


def _safe_div(a: jax.Array, b: jax.Array, empty: float) -> jax.Array:
    return jnp.where(b > 0, a / jnp.where(b > 0, b, 1.0), empty)


def finalize_metrics(sums: CohortSums, noise_std: jax.typing.ArrayLike
                     ) -> tuple[PyTree, PyTree, RoundMetrics]:
    """Turn the round's sums into the aggregates and the metrics.

    Args:
        sums: the accumulated :class:`CohortSums`.
        noise_std: per-coordinate std of one client's noise (σ, or √2·b for Laplace).

    Returns:
        ``(clean_mean, noise_mean, metrics)``: ū, z̄ (zeros when no client was included)
        and the :class:`RoundMetrics`.
    """
    inv = _safe_div(jnp.ones((), jnp.float32), sums.weight, 0.0)
    clean = jax.tree_util.tree_map(lambda s: s * inv, sums.clean)
    noise = jax.tree_util.tree_map(lambda s: s * inv, sums.noise)
    noisy = jax.tree_util.tree_map(jnp.add, clean, noise)
    signal_norm = tree_norm(clean)
    noise_norm = tree_norm(noise)
    update_norm = tree_norm(noisy)
    cosine = _safe_div(tree_dot(noisy, clean), update_norm * signal_norm, jnp.nan)
    snr = jnp.where(noise_norm > 0, signal_norm / jnp.where(noise_norm > 0, noise_norm, 1.0),
                    jnp.inf)
    finite_clients = sums.clients - sums.nonfinite
    n_eff = _safe_div(sums.weight ** 2, sums.weight_sq, 0.0)
    d = tree_size(sums.clean)
    nan = jnp.full((), jnp.nan, jnp.float32)
    metrics = RoundMetrics(
        noise_norm=noise_norm,
        signal_norm=signal_norm,
        snr=snr,
        cosine=cosine,
        update_norm=update_norm,
        clip_fraction=_safe_div(sums.clipped.astype(jnp.float32),
                                sums.clients.astype(jnp.float32), jnp.nan),
        nonfinite_clients=sums.nonfinite,
        clients=sums.clients,
        n_eff=n_eff,
        theory_noise_norm=jnp.where(n_eff > 0, theory_noise_norm(noise_std, d, n_eff), jnp.nan),
        train_loss=_safe_div(sums.loss, finite_clients.astype(jnp.float32), jnp.nan),
        clip_bound=nan, noise_sum_std=nan, survivors=sums.clients,
        noise_variance_fraction=jnp.ones((), jnp.float32), unclipped_fraction=nan,
        next_clip=nan,
        effective_noise_std=noise_norm * sums.weight / jnp.sqrt(jnp.float32(max(d, 1))),
        wrapped_fraction=nan, rounding_failures=jnp.zeros((), jnp.int32),
    )
    return clean, noise, metrics
