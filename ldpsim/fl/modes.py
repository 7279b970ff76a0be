"""Privacy modes of the reference systems in one jitted round.

:func:`make_mode_round_fn` generalises :func:`ldpsim.fl.simulate.make_round_fn` (the same
cohort loop, :func:`ldpsim.fl.sharding.map_cohort`: chunked ``lax.scan``, split over devices;
same per-position keys) to every place the noise can go:

``"ldp"``
    Local DP (the default engine): each client clips to C (L2; L1 for Laplace) and adds
    noise calibrated for (ε, δ) — identical to ``make_round_fn``.
``"mindspore"``
    MindSpore Federated ``DP_ENCRYPT`` (ALGORITHMS §1): client k clips its update to its
    own adaptive bound C_k,t (:func:`ldpsim.privacy.adaptive.mindspore_clip`: 0.05, then
    ``dp_norm_clip·‖W_{t+1} − W_t‖`` with the running minimum, updated only by the clients
    of the round), adds ``N(0, (a(ε,δ)·C_k,t)²)`` (analytic Gaussian with sensitivity C —
    MindSpore's add/remove convention — or 2C for replace-one), and the server takes the
    FedAvg mean weighted by n_k.
``"central"``
    DP-FedAvg (McMahan et al. 2018; TFF ``gaussian_fixed``/``gaussian_adaptive``):
    unweighted clipped sum + ONE server draw ``N(0, (z_Δ C)²)``, fixed denominator m;
    optional quantile-adaptive C (Andrew et al. 2021) with the count noise σ_b.
``"distributed"``
    Distributed DP (ALGORITHMS §3.4): each client adds ``N(0, (zC)²/m)``; the sum carries
    ``N(0, (zC)²)`` when all m report. Clients drop out independently with probability
    ``dropout_rate`` and the realised noise shortfall is reported.

``noise_mode="aggregate"`` (Gaussian only) draws the round's noise once:
``Σ_k w_k ξ_k ~ N(0, Σ_k w_k² σ_k² I)`` exactly in distribution
(:func:`ldpsim.privacy.server_dp.aggregate_gaussian_noise`), O(d) instead of O(m·d).

Keys: client c in round t uses ``client_key(root, t, c)`` as in ``make_round_fn``; its
dropout coin is ``fold_in`` of its key with a salt; the server's draws (central noise,
aggregate noise, clipped-count noise) use ``fold_in(fold_in(root, SALT), t)``.
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from ldpsim.fl import metrics as metrics_lib
from ldpsim.fl import server as server_lib
from ldpsim.fl import sharding
from ldpsim.fl.privatize import privatize
from ldpsim.privacy import adaptive, server_dp

PyTree = Any

__all__ = ["NOISE_MODES", "PRIVACY_MODES", "ModeAux", "PrivacyHyper", "init_privacy_state",
           "make_mode_round_fn", "server_key"]

PRIVACY_MODES = ("ldp", "mindspore", "central", "distributed")
NOISE_MODES = ("per-client", "aggregate")
_SERVER_SALT = 0x73727672   # "srvr"
_DROPOUT_SALT = 0x64726F70  # "drop"


class PrivacyHyper(NamedTuple):
    """Traced knobs of the modes (float32 scalars; changing them never recompiles).

    Attributes:
        noise_multiplier: central/distributed z (on the sum, per unit of C); for central
            adaptive clipping this is the value multiplier z_Δ.
        sigma_per_clip: MindSpore: σ_t / C_t (= a(ε, δ) for add/remove, 2a for replace).
        dp_norm_clip: MindSpore's multiplier of ‖W_{t+1} − W_t‖.
        dropout_rate: distributed: probability a sampled client never reports.
        count_stddev: σ_b of the clipped-count release (adaptive central).
        target_quantile: γ. clip_lr: η.
        client_dp_clip, client_dp_noise: DP-SGD clients' micro-batch clip and multiplier.
    """

    noise_multiplier: jax.Array
    sigma_per_clip: jax.Array
    dp_norm_clip: jax.Array
    dropout_rate: jax.Array
    count_stddev: jax.Array
    target_quantile: jax.Array
    clip_lr: jax.Array
    client_dp_clip: jax.Array
    client_dp_noise: jax.Array

    @classmethod
    def create(cls, *, noise_multiplier=0.0, sigma_per_clip=0.0, dp_norm_clip=1.0,
               dropout_rate=0.0, count_stddev=0.0, target_quantile=0.5, clip_lr=0.2,
               client_dp_clip=1.0, client_dp_noise=0.0) -> "PrivacyHyper":
        f = lambda v: jnp.asarray(v, jnp.float32)  # noqa: E731
        return cls(f(noise_multiplier), f(sigma_per_clip), f(dp_norm_clip), f(dropout_rate),
                   f(count_stddev), f(target_quantile), f(clip_lr), f(client_dp_clip),
                   f(client_dp_noise))


class ModeAux(NamedTuple):
    """Per-round values of the modes, beyond :class:`~ldpsim.fl.metrics.RoundMetrics`.

    Attributes:
        clip_bound: mean clip bound C used by the round's included clients.
        next_clip: the bound for the next round (MindSpore: mean over this round's
            clients after their update; central adaptive: the new C; else C).
        noise_sum_std: per-coordinate std of the noise on the weighted SUM,
            ``√(Σ_k w_k² σ_k²)`` (central: z_Δ·C).
        survivors: clients whose update reached the aggregate.
        noise_variance_fraction: distributed: realised / target noise variance on the sum
            (survivors/m); 1 in the other modes.
        unclipped_fraction: the released noisy b̄ (central adaptive), NaN otherwise.
    """

    clip_bound: jax.Array
    next_clip: jax.Array
    noise_sum_std: jax.Array
    survivors: jax.Array
    noise_variance_fraction: jax.Array
    unclipped_fraction: jax.Array


def server_key(root_key: jax.Array, round_idx: jax.typing.ArrayLike) -> jax.Array:
    """The server's key of a round (its salt is never a round index, so no client collides)."""
    return jax.random.fold_in(jax.random.fold_in(root_key, _SERVER_SALT), round_idx)


def init_privacy_state(privacy_mode: str, *, num_clients: int, clip: float,
                       adaptive_clip: bool = False) -> Any:
    """Initial mode state: MindSpore per-client bounds ``[N]`` (0.05 each), the central
    adaptive clip (``clip``), or ``()``."""
    if privacy_mode == "mindspore":
        return adaptive.mindspore_clip(1.0, num_clients=num_clients).init()
    if privacy_mode == "central" and adaptive_clip:
        return adaptive.quantile_clip(clients_per_round=1.0, initial_clip=clip).init()
    return ()


def make_mode_round_fn(*, apply_fn: Callable, privacy_mode: str = "ldp",
                       noise_mode: str = "per-client", mechanism: str = "gaussian",
                       clients_per_round: int, adaptive_clip: bool = False,
                       mindspore_running_min: bool = True, client_dp_micro_batches: int | None = None,
                       client_optimizer: str = "sgd", server_optimizer: str = "fedavg",
                       server_momentum: float = 0.9, local_steps: int | None = 1,
                       local_epochs: int | None = None, batch_size: int = 16,
                       weighting: str = "examples", chunk_size: int | None = None,
                       devices: int | None = 1, chunks_in_flight: int | None = None) -> Callable:
    """Build ``round_fn(state, pstate, population, round_idx, ids, mask, hyper, phyper)``.

    Args:
        apply_fn: the model's ``(params, x) -> logits``.
        privacy_mode: one of :data:`PRIVACY_MODES` (static).
        noise_mode: ``"per-client"`` or ``"aggregate"`` (Gaussian only; static).
        mechanism: ``"gaussian"``, ``"laplace"`` (ldp only) or ``"none"`` (no noise).
        clients_per_round: m, the fixed denominator (central, distributed) and the
            distributed per-client share ``σ²/m``.
        adaptive_clip: central: quantile-adaptive C (Andrew et al. 2021).
        mindspore_running_min: MindSpore's min rule (True) or overwrite every round.
        client_dp_micro_batches: None for ordinary clients; M for DP-SGD clients
            (:func:`ldpsim.fl.dp_client.dp_local_update`, clip/multiplier from ``phyper``).
        client_optimizer, server_optimizer, server_momentum, local_steps, local_epochs,
        batch_size, weighting, chunk_size, devices, chunks_in_flight: as
            :func:`ldpsim.fl.simulate.make_round_fn` (central and distributed always weight
            clients equally, w = 1); the cohort is split over ``devices`` by
            :func:`ldpsim.fl.sharding.map_cohort`, server-side draws happen once, after the
            cross-device sum.

    Returns:
        A pure, jittable ``round_fn -> (state, pstate, RoundMetrics, ModeAux)``; ``hyper``
        is a :class:`~ldpsim.fl.simulate.RoundHyper` (σ: ldp scale; clip: C),
        ``phyper`` a :class:`PrivacyHyper`, ``pstate`` from :func:`init_privacy_state`.
    """
    from ldpsim.fl import client as client_lib
    from ldpsim.fl.simulate import ServerState, chunk_sums, client_key

    if privacy_mode not in PRIVACY_MODES:
        raise ValueError(f"privacy_mode must be one of {PRIVACY_MODES}, got {privacy_mode!r}")
    if noise_mode not in NOISE_MODES:
        raise ValueError(f"noise_mode must be one of {NOISE_MODES}, got {noise_mode!r}")
    if noise_mode == "aggregate" and mechanism == "laplace":
        raise ValueError("noise_mode='aggregate' is exact for Gaussian noise only")
    if privacy_mode != "ldp" and mechanism == "laplace":
        raise ValueError(f"privacy_mode={privacy_mode!r} uses Gaussian noise, not Laplace")
    noisy = mechanism != "none"
    unweighted = privacy_mode in ("central", "distributed")
    # Noise drawn by each client inside the vmapped kernel?
    client_noise = noisy and noise_mode == "per-client" and privacy_mode != "central"
    client_mech = mechanism if client_noise else "none"   # "none": clip only
    std_factor = math.sqrt(2.0) if mechanism == "laplace" else 1.0
    m_fixed = float(clients_per_round)
    n_devices = sharding.resolve_devices(devices)
    if client_dp_micro_batches is not None:
        from ldpsim.fl.dp_client import dp_local_update

    def train(params, x, y, count, key, hyper, phyper):
        opt = client_lib.client_optimizer(client_optimizer, hyper.client_lr)
        kw = dict(apply_fn=apply_fn, optimizer=opt, batch_size=batch_size, key=key,
                  local_steps=local_steps, local_epochs=local_epochs)
        if client_dp_micro_batches is None:
            return client_lib.local_update(params, x, y, count, **kw)
        return dp_local_update(params, x, y, count, micro_batches=client_dp_micro_batches,
                               clip_norm=phyper.client_dp_clip,
                               noise_multiplier=phyper.client_dp_noise, **kw)

    def one_client(params, x, y, count, key, clip, scale, hyper, phyper):
        train_key, noise_key = jax.random.split(key)
        delta, cm = train(params, x, y, count, train_key, hyper, phyper)
        priv = privatize(noise_key, delta, clip=clip, scale=scale, mechanism=client_mech)
        return priv, cm.loss

    def clients_clip_scale(c_ids, pstate, round_clip, hyper, phyper):
        """Per-client (clip, noise scale, noise std) for this chunk."""
        k = c_ids.shape[0]
        if privacy_mode == "mindspore":
            clip = jnp.take(pstate.clip, c_ids, mode="clip")
            scale = phyper.sigma_per_clip * clip
        elif privacy_mode == "distributed":
            clip = jnp.full((k,), round_clip)
            scale = jnp.full((k,), phyper.noise_multiplier * round_clip
                             / jnp.sqrt(jnp.float32(m_fixed)))
        elif privacy_mode == "central":
            clip = jnp.full((k,), round_clip)
            scale = jnp.zeros((k,), jnp.float32)
        else:
            clip = jnp.full((k,), hyper.clip)
            scale = jnp.full((k,), hyper.sigma)
        if not noisy:
            scale = jnp.zeros_like(scale)
        return clip, scale, std_factor * scale

    def chunk_fn(operands, c_ids, c_mask):
        params, key, round_idx, population, pstate, round_clip, hyper, phyper = operands
        x, y, counts = population.gather(c_ids)
        keys = jax.vmap(lambda c: client_key(key, round_idx, c))(c_ids)
        clip, scale, std = clients_clip_scale(c_ids, pstate, round_clip, hyper, phyper)
        priv, loss = jax.vmap(one_client, in_axes=(None, 0, 0, 0, 0, 0, 0, None, None))(
            params, x, y, counts, keys, clip, scale, hyper, phyper)
        include = c_mask   # a non-finite update enters as its privatized zero substitute
        if privacy_mode == "distributed":
            coin = jax.vmap(lambda k: jax.random.uniform(
                jax.random.fold_in(k, _DROPOUT_SALT)))(keys)
            include = include & (coin >= phyper.dropout_rate)
        if unweighted:
            w = include.astype(jnp.float32)
        else:
            w = server_lib.aggregation_weights(counts, include, weighting)
        inc = include.astype(jnp.float32)
        extra = (jnp.sum(w * w * std * std),
                 jnp.sum(adaptive.quantile_bits(priv.release_norm, clip, include)),
                 jnp.sum(include, dtype=jnp.int32),
                 jnp.sum(inc * clip))
        return chunk_sums(w, include, c_mask, priv, loss, counts), extra

    def round_fn(state, pstate, population, round_idx, cohort_ids, cohort_mask,
                 hyper, phyper):
        params = state.params
        ids = jnp.asarray(cohort_ids, jnp.int32)
        mask = jnp.asarray(cohort_mask, bool)
        skey = server_key(state.key, round_idx)

        if privacy_mode == "central" and adaptive_clip:
            round_clip = pstate.clip
        else:
            round_clip = hyper.clip

        zero = jnp.zeros((), jnp.float32)
        zeros = (metrics_lib.CohortSums.zeros(params), (zero, zero, jnp.zeros((), jnp.int32),
                                                         zero))
        operands = (params, state.key, round_idx, population, pstate, round_clip, hyper,
                    phyper)
        sums, (var_sum, bit_sum, survivors, clip_sum) = sharding.map_cohort(
            chunk_fn, zeros, operands, ids, mask, chunk_size=chunk_size, devices=n_devices,
            chunks_in_flight=chunks_in_flight)

        if privacy_mode == "central" and noisy:
            std_sum = phyper.noise_multiplier * round_clip
            noise = server_dp.aggregate_gaussian_noise(skey, sums.clean, std_sum, 1.0)
            sums = sums._replace(noise=noise)
            var_sum = std_sum * std_sum
        elif noise_mode == "aggregate" and noisy:
            noise = server_dp.aggregate_gaussian_noise(skey, sums.clean, 1.0, var_sum)
            sums = sums._replace(noise=noise)
        if unweighted:  # fixed denominator m (McMahan et al. 2018, f̃_f)
            sums = sums._replace(weight=jnp.float32(m_fixed))
        noise_std = jnp.sqrt(var_sum / jnp.maximum(sums.weight_sq, 1e-30))
        clean, noise, round_metrics = metrics_lib.finalize_metrics(sums, noise_std)
        aggregate = jax.tree_util.tree_map(jnp.add, clean, noise)
        opt = server_lib.server_optimizer(server_optimizer, hyper.server_lr,
                                          momentum=server_momentum)
        new_params, opt_state = server_lib.server_update(params, state.opt_state, aggregate, opt)

        clip_bound = jnp.where(survivors > 0, clip_sum / jnp.maximum(survivors, 1), round_clip)
        frac_unclipped = jnp.float32(jnp.nan)
        next_clip = clip_bound
        if privacy_mode == "mindspore":
            rule = adaptive.mindspore_clip(phyper.dp_norm_clip, running_min=mindspore_running_min)
            g = adaptive.global_change_norm(params, new_params)
            participated = jnp.zeros(pstate.clip.shape, bool).at[ids].max(mask)
            pstate = rule.update(pstate, g, participated)
            n_part = jnp.maximum(jnp.sum(participated), 1)
            next_clip = jnp.sum(jnp.where(participated, pstate.clip, 0.0)) / n_part
        elif privacy_mode == "central" and adaptive_clip:
            rule = adaptive.quantile_clip(
                clients_per_round=m_fixed, initial_clip=1.0,
                target_quantile=phyper.target_quantile, learning_rate=phyper.clip_lr,
                clipped_count_stddev=phyper.count_stddev)
            pstate, info = rule.update(pstate, jax.random.fold_in(skey, 1), bit_sum)
            frac_unclipped, next_clip = info.unclipped_fraction, pstate.clip
        aux = ModeAux(
            clip_bound=clip_bound, next_clip=next_clip, noise_sum_std=jnp.sqrt(var_sum),
            survivors=survivors,
            noise_variance_fraction=(survivors.astype(jnp.float32) / jnp.float32(m_fixed)
                                     if privacy_mode == "distributed" else jnp.float32(1.0)),
            unclipped_fraction=frac_unclipped)
        return ServerState(new_params, opt_state, state.key), pstate, round_metrics, aux

    return round_fn


# ----------------------------------------------------------------------------- host side


def mindspore_sigma_per_clip(dp_eps: float = 50.0, dp_delta: float = 0.01, *,
                             neighbours: str = "add-remove", method: str = "analytic") -> float:
    """σ_t / C_t of MindSpore's ``DP_ENCRYPT`` (ALGORITHMS §1.4), validated as MindSpore does.

    Ranges (``yaml_config.cc``, ``InitEncryptConfig``): dp_eps > 0, 0 < dp_delta < 1.
    ``neighbours="add-remove"`` (MindSpore: sensitivity C_t) or ``"replace"`` (2C_t, strict
    replace-one LDP, ALGORITHMS §1.7); ``method`` ``"analytic"`` (exact Balle–Wang) or
    ``"mindspore"`` (the Java numerics).
    """
    from ldpsim._checks import check_open_unit, check_positive
    from ldpsim.privacy import calibration

    eps = check_positive("dp_eps", dp_eps)
    delta = check_open_unit("dp_delta", dp_delta)
    return float(calibration.calibrate("gaussian", epsilon=eps, delta=delta, clip=1.0,
                                       neighbours=neighbours, method=method).sigma)


def central_epsilon(*, noise_multiplier: float, clients_per_round: int, population: int,
                    rounds: int, delta: float, sampling: str = "uniform") -> float:
    """User-level ε of central/distributed DP-FedAvg after ``rounds`` rounds, q = m/N.

    :func:`ldpsim.privacy.accounting.dpfedavg_epsilon` (RDP): the engine's ``"uniform"``
    cohort (m of N without replacement) is accounted as ``"fixed"`` — replace one user,
    under which the clipped sum moves by up to 2C, so the accounted multiplier is z/2 —
    and ``"poisson"`` as Poisson (add/remove one user, the sum moves by at most C,
    multiplier z). With adaptive clipping the value noise z_Δ and the clipped-count noise
    σ_b compose to a Gaussian of multiplier z under add/remove (the count's shifted bits
    ±½ have sensitivity ½) and z/2 under replace-one (a bit flips from −½ to ½:
    sensitivity 1, as the value's 2C), so passing the overall z is exact in both cases.

    Distributed DP: pass the smallest effective multiplier ``z·√(survivors/m)`` seen so
    far (the dropout shortfall). Assumption: the protected client is honest, so its own
    noise share counts towards its protection (the standard distributed-DP analysis,
    Kairouz, Liu & Steinke 2021). If the adversary may know the target's own share (for
    instance, the target's device is compromised), the conservative multiplier is
    ``z·√((survivors − 1)/m)``; ldpsim does not report that variant.
    """
    from ldpsim.privacy import accounting

    if rounds == 0:
        return 0.0
    if noise_multiplier <= 0:
        return math.inf
    return accounting.dpfedavg_epsilon(
        noise_multiplier=noise_multiplier, clients_per_round=clients_per_round,
        population=population, rounds=rounds, delta=delta,
        sampling="poisson" if sampling == "poisson" else "fixed", method="rdp").epsilon
