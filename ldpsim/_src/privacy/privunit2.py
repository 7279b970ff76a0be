"""PrivUnit2: a pure ε-LDP randomizer for vectors in an L2 ball (direction + norm).

Privatize one client's update ``x`` (clipped to ``‖x‖ ≤ C``, flattened to dimension d):

1. Direction ``u = x/‖x‖`` (``e₁`` for ``x = 0``). With probability ``p`` draw ``V`` uniformly
   on the spherical cap ``{v ∈ S^{d−1}: ⟨v, u⟩ ≥ γ}``, otherwise uniformly on its complement
   (Bhowmick, Duchi, Freudiger, Kapoor & Rogers 2018, Alg. 1). ``V = t·u + √(1−t²)·w`` with
   ``w`` uniform on the unit sphere orthogonal to ``u`` (a normalised projected Gaussian)
   and ``t = ⟨V, u⟩`` drawn exactly from its conditional law ``∝ (1−t²)^a``, ``a = (d−3)/2``,
   on ``[γ, 1]`` or ``[−1, γ)`` by rejection from a truncated normal with variance
   ``1/(d−3)`` (``(1−t²)^a ≤ e^{−a t²}``; acceptance → 1 as d grows) or, on the cap when it is
   better, from the exponential tangent to the concave ``a·log(1−t²)`` at γ (the host picks
   the proposal with the higher acceptance and refuses parameters below 1e-3).
2. Norm ``r = ‖x‖ ∈ [0, C]``: the private scalar randomizer
   (:func:`ldpsim._src.privacy.randomizer.signed_scalar`): ``r̂ = (C ± B)/2`` with
   ``B = C·coth(ε_r/2)``, ``E r̂ = r``, ``E r̂² = (B² − (2r − C)²)/4 + r²``.

Report ``{"direction": V, "norm": r̂}``. Decode: ``x̂ = r̂·V/m`` with
``m = E⟨V, u⟩ = E[t; t ≥ γ]·(p/q − (1 − p)/(1 − q))``, ``q = P(t ≥ γ)`` for uniform ``V``
and ``E[t; t ≥ γ] = (1 − γ²)^{(d−1)/2}/((d − 1)·B(½, (d−1)/2))``: ``E[x̂] = x`` exactly (r̂ and
V independent, ``E r̂ = r``, ``E V = m·u``). Per-coordinate variance
``E[r̂²]·(E[t²]u_i² + (1 − E[t²])(1 − u_i²)/(d − 1))/m² − x_i²`` (:func:`variance`), total
``E[r̂²]/m² − ‖x‖²``.

Guarantee: the output density of ``V`` is ``p/q`` (cap) or ``(1−p)/(1−q)`` (complement)
times the uniform density, so for any two inputs the ratio is at most
``e^{ε_d}`` with ``ε_d = logit(p) + logit(1 − q)``; the norm release is ``ε_r``-LDP; the
two are independent, so the report is **pure (ε_d + ε_r)-LDP for any two inputs in the C
ball** (neighbouring relation ``"replace"``; an input above C is clipped and counted).

Parameters (host, float64, :func:`constants`): ``q = 1/(1 + e^{ε₁})`` and
``γ² = betainccinv(½, (d−1)/2, 2q)`` or ``1 − γ² = betaincinv((d−1)/2, ½, 2q)`` (the
incomplete beta inverted on the side where its value is small, so wide and thin caps both
stay accurate at d = 61,706), ``p = e^{ε₀}/(1 + e^{ε₀})``, ``ε_d = ε₀ + ε₁``; ``m``
in log space (``betaln``, ``log1p``). **ε split**: ε₀ maximises ``m`` for the direction's
budget ε_d (as Bhowmick et al. and Asi et al. optimise), and ε_r minimises the worst-case
total variance ``E[r̂²]/m(ε − ε_r)² − C²`` at ``‖x‖ = C``; both 1-D searches on the host
(``norm_epsilon`` fixes ε_r instead). The norm needs little budget: its variance is a
factor ``coth²(ε_r/2)`` while the direction's is ``∝ d/ε_d``, so for large d most of ε
goes to the direction (at d = 61,706 and ε = 4 the norm gets about 0.9).

Float32 realisation: ``p`` and the coins are on a 32-bit grid and the proposal uses the
float32 inverse normal CDF, so the realised law is the ideal one up to rounding (relative
1e-6); ε₀ ≤ 15 and ε₁ ≤ 68 keep every probability a normal float32 (ε up to about 99 with
the norm's 16); caps thinner than ``1 − γ = 10⁻³`` (small d at large ε) are refused (use
PrivUnitG).

References:
    Bhowmick, Duchi, Freudiger, Kapoor & Rogers, "Protection against reconstruction and its
    applications in private federated learning", 2018 (arXiv:1812.00984), Alg. 1 and §4;
    Asi, Feldman & Talwar, "Optimal algorithms for mean estimation under local differential
    privacy", ICML 2022 (arXiv:2205.02466); Duchi, Jordan & Wainwright 2018 (scalar).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from scipy import optimize, special

from ldpsim._src._checks import LdpsimError
from ldpsim._src.privacy import randomizer as rz
from ldpsim._src.privacy import sampling
from ldpsim._src.privacy.randomizer import LocalMechanism, Report

NAME = "privunit2"
MIN_DIM = 4

#: Largest ε₀ (cap probability) and ε₁ (cap size) a float32 realisation represents.
#: ε₁ ≤ 68 keeps the cap's mass q ≥ 3e-30, so ``u·q`` with ``u ≥ 2⁻²³`` stays a normal float32
#: (XLA on CPU flushes subnormals, which would turn an inverse-CDF draw into ±inf).
MAX_EPS_P, MAX_EPS_CAP, MAX_EPS_NORM = 15.0, 68.0, 16.0
#: Rejection steps before giving up (the host refuses parameters with acceptance < 1e-3).
MAX_TRIES = 100_000


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class PrivUnit2Params:
    """PrivUnit2's calibrated numbers (float32 scalars; may be traced) and its dimension."""

    clip: jax.Array
    p: jax.Array          # probability of the cap
    p_out: jax.Array      # 1 − p = 1/(1 + e^{ε₀}) (the coin's small side, exact in float32)
    gamma: jax.Array      # cap threshold on ⟨V, u⟩
    prop_q: jax.Array     # upper-tail mass of the proposal N(0, 1/(d−3)) beyond γ
    cap_rate: jax.Array   # λ of the tangent exponential proposal on [γ, 1] (0: normal proposal)
    m: jax.Array          # E⟨V, u⟩
    et2: jax.Array        # E⟨V, u⟩²
    norm_bound: jax.Array  # B of the norm's scalar randomizer
    norm_excess: jax.Array  # B − C, exact
    dim: int = dataclasses.field(metadata=dict(static=True))


# ---------------------------------------------------------------------------- host maths


def log_cap_mean(gamma: float, d: int, log_one_minus_g2: float | None = None) -> float:
    """``log E[t; t ≥ γ]`` for ``t = ⟨V, u⟩``, V uniform on S^{d−1} (γ ≥ 0):
    ``((d−1)/2)·log(1 − γ²) − log(d − 1) − log B(½, (d−1)/2)``."""
    b = (d - 1) / 2.0
    if log_one_minus_g2 is None:
        log_one_minus_g2 = math.log1p(-gamma * gamma)
    return b * log_one_minus_g2 - math.log(d - 1) - special.betaln(0.5, b)


def cap_geometry(q: float, d: int) -> tuple[float, float]:
    """``(γ, log(1 − γ²))`` with ``P(t ≥ γ) = q`` (q ≤ ½), both accurate: ``γ²`` from
    ``betainccinv(½, (d−1)/2, 2q)`` while it is below ½, else ``1 − γ²`` from
    ``betaincinv((d−1)/2, ½, 2q)`` (1 − t² ~ Beta((d−1)/2, ½)), so thin caps keep their width."""
    b = (d - 1) / 2.0
    g2 = float(special.betainccinv(0.5, b, 2.0 * q))
    if g2 < 0.5:
        return math.sqrt(g2), math.log1p(-g2)
    om = float(special.betaincinv(b, 0.5, 2.0 * q))
    return math.sqrt(1.0 - om), (math.log(om) if om > 0 else -math.inf)


def gamma_for_cap(q: float, d: int) -> float:
    """γ ≥ 0 with ``P(t ≥ γ) = q`` (q ≤ ½) (:func:`cap_geometry`)."""
    return cap_geometry(q, d)[0]


def cap_probability(gamma: float, d: int) -> float:
    """``P(t ≥ γ) = ½·I_{1−γ²}((d−1)/2, ½)`` for γ ≥ 0."""
    return 0.5 * float(special.betaincc(0.5, (d - 1) / 2.0, gamma * gamma))


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def direction_constants(eps_p: float, eps_cap: float, d: int) -> dict:
    """p, q, γ, m, E[t²] for the split (ε₀ = ``eps_p``, ε₁ = ``eps_cap``)."""
    p = _sigmoid(eps_p)
    q = _sigmoid(-eps_cap)
    gamma, log_om = cap_geometry(q, d)
    log_mean = log_cap_mean(gamma, d, log_om)
    m = math.exp(log_mean) * (p / q - (1 - p) / (1 - q))
    e_hi = float(special.betaincc(1.5, (d - 1) / 2.0, gamma * gamma)) / (2.0 * d * q)
    e_lo = (1.0 / d - q * e_hi) / (1 - q)
    return dict(p=p, q=q, gamma=gamma, m=m, et2=p * e_hi + (1 - p) * e_lo)


def best_split(eps_dir: float, objective) -> tuple[float, float]:
    """``(ε₀, ε₁)`` with ε₀ + ε₁ = ε_dir minimising ``objective(ε₀, ε₁)`` (bounded search),
    ε₀ ≤ 15 and ε₁ ≤ 68."""
    lo = max(1e-9, eps_dir - MAX_EPS_CAP)
    hi = min(eps_dir - 1e-9, MAX_EPS_P)
    if abs(hi - lo) <= 1e-9 * eps_dir:
        return hi, eps_dir - hi
    if lo > hi:
        raise LdpsimError(f"epsilon {float(eps_dir):g} for the direction is above what float32 "
                          f"realises ({MAX_EPS_P + MAX_EPS_CAP:g})")
    res = optimize.minimize_scalar(lambda e0: objective(e0, eps_dir - e0), bounds=(lo, hi),
                                   method="bounded", options=dict(xatol=1e-6 * eps_dir))
    e0 = float(res.x)
    return e0, eps_dir - e0


def split_epsilon(epsilon: float, norm_epsilon, worst_variance) -> float:
    """ε_r: ``norm_epsilon`` if given, else the minimiser of ``worst_variance(ε_r)``."""
    if norm_epsilon is not None:
        er = rz.check_epsilon(norm_epsilon, "norm_epsilon")
        if not er < epsilon:
            raise LdpsimError(f"norm_epsilon must be < epsilon ({epsilon!r}); got {norm_epsilon!r}")
        if er > MAX_EPS_NORM:
            raise LdpsimError(f"norm_epsilon must be <= {MAX_EPS_NORM:g} (float32 coins); got {norm_epsilon!r}")
        return er
    hi = min(MAX_EPS_NORM, 0.5 * epsilon)
    lo = max(1e-3 * epsilon, epsilon - (MAX_EPS_P + MAX_EPS_CAP))
    if abs(hi - lo) <= 1e-9 * epsilon:
        return hi
    if lo > hi:
        raise LdpsimError(f"epsilon must be <= {MAX_EPS_P + MAX_EPS_CAP + MAX_EPS_NORM:g} for the "
                          f"float32 PrivUnit samplers; got {epsilon!r}")
    res = optimize.minimize_scalar(worst_variance, bounds=(lo, hi), method="bounded",
                                   options=dict(xatol=1e-6 * epsilon))
    return float(res.x)


def constants(*, epsilon: float, dim: int, clip: float = 1.0, norm_epsilon=None) -> dict:
    """Host calibration of PrivUnit2 (float64): the ε split and every constant."""
    eps = rz.check_epsilon(epsilon)
    d = rz.check_dim(dim, MIN_DIM, NAME)
    c = rz.check_clip(clip)

    def dir_for(eps_dir):
        def obj(a, b):
            m = direction_constants(a, b, d)["m"]
            return -math.log(m) if m > 0 else math.inf

        e0, e1 = best_split(eps_dir, obj)
        return e0, e1, direction_constants(e0, e1, d)

    def worst(er):   # log E[r̂²] at r = C, minus 2 log m (total variance E[r̂²]/m² − C²)
        b = rz.signed_scalar_bound(c, er)
        m = dir_for(eps - er)[2]["m"]
        return math.log((b * b + 3 * c * c) / 4) - 2 * math.log(m) if m > 0 else math.inf

    er = split_epsilon(eps, norm_epsilon, worst)
    e0, e1, k = dir_for(eps - er)
    if not 1.0 - k["gamma"] > 1e-3:   # float32 1 − t² keeps a relative error ≤ 3e-5 in the cap
        raise LdpsimError(f"privunit2 at epsilon {epsilon!r}, dim {dim!r}: the cap (gamma = "
                          f"{k['gamma']:.8f}) is too thin for float32; use privunitg")
    a = (d - 3) / 2.0
    s = 1.0 / math.sqrt(2 * a)
    prop_q = float(special.ndtr(-k["gamma"] / s))
    # acceptance of the rejection step in each region (target mass / proposal mass)
    log_target_hi = math.log(k["q"]) + special.betaln(0.5, (d - 1) / 2.0)
    log_prop = math.log(s) + 0.5 * math.log(2 * math.pi)
    acc_hi = math.exp(log_target_hi - log_prop - math.log(prop_q)) if prop_q > 0 else 0.0
    acc_lo = math.exp(math.log1p(-k["q"]) + special.betaln(0.5, (d - 1) / 2.0) - log_prop
                      - math.log1p(-prop_q))
    # the tangent exponential proposal on [γ, 1]: log(1−t²)^a is concave, so its tangent at γ
    # bounds it; better than the normal when γ is far out (large ε, moderate d)
    g = k["gamma"]
    lam = 2 * a * g / (1 - g * g)
    if lam > 0:
        log_prop_exp = a * math.log1p(-g * g) + math.log(-math.expm1(-lam * (1 - g))) - math.log(lam)
        acc_exp = math.exp(log_target_hi - log_prop_exp)
    else:
        acc_exp = 0.0
    if acc_exp > acc_hi:
        acc_hi = acc_exp
    else:
        lam = 0.0
    if min(acc_hi, acc_lo) < 1e-3:
        raise LdpsimError(f"privunit2 at epsilon {epsilon!r}, dim {dim!r}: the cap sampler's "
                          f"acceptance {min(acc_hi, acc_lo):.2g} is below 1e-3; use privunitg")
    bound = rz.signed_scalar_bound(c, er)
    return dict(k, clip=c, dim=d, epsilon=eps, eps_p=e0, eps_cap=e1, eps_norm=er,
                prop_q=prop_q, cap_rate=lam, norm_bound=bound, acceptance=(acc_hi, acc_lo),
                worst_total_variance=(bound ** 2 + 3 * c * c) / 4 / k["m"] ** 2 - c * c)


# ---------------------------------------------------------------------------- device side


def _direction(flat: jax.Array) -> tuple[jax.Array, jax.Array]:
    r = jnp.sqrt(jnp.sum(jnp.square(flat)))
    e1 = jnp.zeros_like(flat).at[0].set(1.0)
    u = jnp.where(r > 0, flat / jnp.where(r > 0, r, 1.0), e1)
    return u, r


def orthogonal_unit(key: jax.Array, u: jax.Array) -> jax.Array:
    """A uniform unit vector orthogonal to the unit vector ``u`` (a normalised projection of
    ldpsim's fast Gaussian draw)."""
    g = sampling.normal_like(key, u)
    g = g - jnp.vdot(g, u) * u
    return g / jnp.sqrt(jnp.sum(jnp.square(g)))


def _uniform01(key: jax.Array, shape=()) -> jax.Array:
    """Uniform on (0, 1] (never 0, so inverse CDFs stay finite)."""
    return 1.0 - jax.random.uniform(key, shape, jnp.float32)


def sample_t(key: jax.Array, in_cap: jax.Array, params: PrivUnit2Params) -> jax.Array:
    """``t = ⟨V, u⟩`` from ``∝ (1−t²)^a`` (a = (d−3)/2) on ``[γ, 1]`` (``in_cap``) or ``[−1, γ)``:
    rejection from ``N(0, 1/(2a))`` truncated to the region (accept w.p.
    ``exp(a·(log(1−t²) + t²)) ≤ 1``); a ``while_loop`` (exact; vmaps as the longest lane)."""
    a = np.float32((params.dim - 3) / 2.0)
    s = np.float32(1.0 / math.sqrt(2 * ((params.dim - 3) / 2.0)))
    qp = jnp.asarray(params.prop_q, jnp.float32)
    gamma = jnp.asarray(params.gamma, jnp.float32)

    lam = jnp.asarray(params.cap_rate, jnp.float32)
    use_exp = in_cap & (lam > 0)
    lam_safe = jnp.where(lam > 0, lam, 1.0)
    width = -jnp.expm1(-lam_safe * (1.0 - gamma))

    def draw(i):
        k = jax.random.fold_in(key, i)
        u1, u2 = _uniform01(k, (2,))
        t_hi = jnp.maximum(-s * jax.scipy.special.ndtri(u1 * qp), gamma)
        t_lo = s * jax.scipy.special.ndtri(u1 * (1.0 - qp))
        t_exp = gamma - jnp.log1p(-u1 * width) / lam_safe        # truncated Exp(λ) on [γ, 1]
        t = jnp.where(use_exp, t_exp, jnp.where(in_cap, t_hi, jnp.where(t_lo < gamma, t_lo, -2.0)))
        t2 = jnp.square(t)
        log_f = a * jnp.log1p(-t2)          # −inf/NaN for |t| ≥ 1: rejected below
        log_acc = jnp.where(use_exp, log_f - a * jnp.log1p(-gamma * gamma) + lam * (t - gamma),
                            log_f + a * t2)
        ok = (t2 < 1.0) & (jnp.log(u2) <= log_acc)
        return t, ok

    def cond(state):
        i, _, ok = state
        return (~ok) & (i < MAX_TRIES)

    def body(state):
        i, _, _ = state
        t, ok = draw(i)
        return i + 1, t, ok

    t0, ok0 = draw(0)
    _, t, _ = jax.lax.while_loop(cond, body, (jnp.int32(1), t0, ok0))
    return t


def privatize(key: jax.Array, update, params: PrivUnit2Params) -> Report:
    """One client's PrivUnit2 report ``{"direction": V (unit, float32[d]), "norm": r̂}``."""
    flat, clipped, norm, release_norm, was_clipped, finite, _ = rz.clip_flat(update, params.clip)
    if flat.shape[0] != params.dim:
        raise LdpsimError(f"update has {flat.shape[0]} coordinates; these privunit params are "
                          f"for dim {params.dim}")
    u, r = _direction(flat)
    r_hat = rz.signed_scalar(rz.subkey(key, rz.TAG_NORM), r, params.clip, params.norm_bound,
                              params.norm_excess)
    in_cap = ~rz.bernoulli(rz.subkey(key, rz.TAG_CAP), params.p_out)
    t = sample_t(rz.subkey(key, rz.TAG_ACCEPT), in_cap, params)
    w = orthogonal_unit(rz.subkey(key, rz.TAG_DIRECTION), u)
    v = t * u + jnp.sqrt(jnp.maximum(1.0 - t * t, 0.0)) * w
    return Report(report={"direction": v, "norm": r_hat}, clipped=clipped, norm=norm,
                  release_norm=release_norm, was_clipped=was_clipped, finite=finite)


def decode(report, params, like=None):
    """Unbiased estimate ``r̂·V/m`` of the clipped update (a pytree like ``like``)."""
    flat = report["norm"] * report["direction"] / params.m
    return rz.unravel_like(flat, like)


def mean(params, update):
    """``E[decode] =`` the clipped update (unbiased)."""
    return rz.clip_flat(update, params.clip)[1]


def _second_moment_dir(params, u):
    """Per-coordinate ``E[V_i²]`` for V uniform-cap-mixed around u (sphere)."""
    return params.et2 * u * u + (1.0 - params.et2) * (1.0 - u * u) / (params.dim - 1)


def variance(params, update):
    """Exact per-coordinate variance of :func:`decode` for this update (pytree like it):
    ``E[r̂²]·E[V_i²]/m² − x_i²``."""
    flat, *_, unravel = rz.clip_flat(update, params.clip)
    u, r = _direction(flat)
    er2 = rz.signed_scalar_second_moment(r, params.clip, params.norm_bound)
    var = er2 / jnp.square(params.m) * _second_moment_dir(params, u) - flat * flat
    return unravel(var)


def make(*, epsilon: float, dim: int, clip: float = 1.0, norm_epsilon=None) -> LocalMechanism:
    """PrivUnit2 + a private scalar norm, calibrated for pure ε-LDP (see the module docstring).

    Args:
        epsilon: total ε > 0 (direction + norm).
        dim: the update's number of coordinates d ≥ 4.
        clip: the L2 bound C of the inputs (above it: clipped, counted in ``was_clipped``).
        norm_epsilon: ε of the norm (default: chosen to minimise the worst-case variance).

    Raises:
        LdpsimError: ε ≤ 0 or non-finite or beyond the float32 range, ``dim`` < 4, clip ≤ 0.
    """
    k = constants(epsilon=epsilon, dim=dim, clip=clip, norm_epsilon=norm_epsilon)
    f = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    params = PrivUnit2Params(clip=f(k["clip"]), p=f(k["p"]), p_out=f(_sigmoid(-k["eps_p"])),
                             gamma=f(k["gamma"]), cap_rate=f(k["cap_rate"]),
                             prop_q=f(k["prop_q"]), m=f(k["m"]), et2=f(k["et2"]),
                             norm_bound=f(k["norm_bound"]),
                             norm_excess=f(rz.signed_scalar_excess(k["clip"], k["eps_norm"])),
                             dim=k["dim"])
    return _mechanism(NAME, params, k, privatize, decode, mean, variance)


def _mechanism(name, params, k, privatize, decode, mean, variance) -> LocalMechanism:
    eps = k["epsilon"]
    std = math.sqrt(k["worst_total_variance"] / k["dim"])

    def dp_event(params):
        return rz.pure_dp_event(eps)

    return LocalMechanism(name=name, params=params, neighbours="replace", epsilon=eps, delta=0.0,
                          privatize=privatize, noise_std=lambda params: jnp.float32(std),
                          dp_event=dp_event, decode=decode, mean=mean, variance=variance,
                          additive=False, unbiased=True)
