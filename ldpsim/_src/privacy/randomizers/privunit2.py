"""PrivUnit2: an ε-LDP randomizer for vectors in an L2 ball (direction + norm).

Privatize one client's update ``x`` (clipped to ``‖x‖ ≤ C``, flattened to dimension d):

1. Direction ``u = x/‖x‖`` (``e₁`` for ``x = 0``). With probability ``p`` draw ``V`` uniformly
   on the spherical cap ``{v ∈ S^{d−1}: ⟨v, u⟩ ≥ γ}``, otherwise uniformly on its complement
   (Bhowmick, Duchi, Freudiger, Kapoor & Rogers 2018, Alg. 1). ``V = t·u + √(1−t²)·w`` with
   ``w`` uniform on the unit sphere orthogonal to ``u`` (a normalised projected Gaussian)
   and ``t = ⟨V, u⟩`` drawn exactly from its conditional law ``∝ (1−t²)^a``, ``a = (d−3)/2``,
   on ``[γ, 1]`` or ``[−1, γ)`` by rejection from a normal ``t = s·z`` with ``a·s² ≥ ½``
   truncated to the region (accept with ``(1−t²)^a·e^{z²/2} ≤ 1``; acceptance → 1 as d grows)
   or, on the cap when it is better, from ``t = γ + E/λ``, ``E ~ Exp(1)``, with λ at most the
   slope of the concave ``a·log(1−t²)`` at γ (accept with ``((1−t²)/(1−γ²))^a·e^E ≤ 1``); the
   host picks the proposal with the higher acceptance and refuses parameters below 1e-3.
2. Norm ``r = ‖x‖ ∈ [0, C]``: the private scalar randomizer
   (:func:`ldpsim._src.privacy.randomizers.randomizer.signed_scalar`): ``r̂ = (C ± B)/2`` with
   ``B = C·coth(ε_r/2)``, ``E r̂ = r``, ``E r̂² = (B² − (2r − C)²)/4 + r²``.

Report ``{"direction": V, "norm": r̂}``. Decode: ``x̂ = r̂·V/m`` with
``m = E⟨V, u⟩ = E[t; t ≥ γ]·(p/q − (1 − p)/(1 − q))``, ``q = P(t ≥ γ)`` for uniform ``V``
and ``E[t; t ≥ γ] = (1 − γ²)^{(d−1)/2}/((d − 1)·B(½, (d−1)/2))``: ``E[x̂] = x`` exactly (r̂ and
V independent, ``E r̂ = r``, ``E V = m·u``). Per-coordinate variance
``E[r̂²]·(E[t²]u_i² + (1 − E[t²])(1 − u_i²)/(d − 1))/m² − x_i²`` (:func:`variance`), total
``E[r̂²]/m² − ‖x‖²``. ``p``, ``q``, γ, ``m`` and ``E[t²]`` in the params are the values the
sampler realises (below), so the decoder is unbiased for the law that runs.

Ideal guarantee: the output density of ``V`` is ``p/q`` (cap) or ``(1−p)/(1−q)`` (complement)
times the uniform density, so for any two inputs the ratio is at most
``e^{ε_d}`` with ``ε_d = logit(p) + logit(1 − q)``; the norm release is ``ε_r``-LDP; the
two are independent, so the ideal report is **pure (ε_d + ε_r)-LDP for any two inputs in the
C ball** (neighbouring relation ``"replace"``; an input above C is clipped and counted).

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

What the float32 realisation delivers (docs/privacy_sharp_edges.md, "what the floats
deliver"; model of :mod:`ldpsim._src.privacy.noise.realised`: each sampler's transform is exact
real maths on its uniforms, whose finite range is kept; the float32 output grid is the
caveat of Mironov 2012):

* The coins are exact on the 32-bit grid (:func:`~ldpsim._src.privacy.randomizers.randomizer.bernoulli_probability`):
  the realised ``p`` and the norm's ε are computed from the float32 numbers used.
* The cap is ``t ≥ γ`` with γ the float32 threshold the sampler compares against, so the
  realised ``q`` is the uniform-sphere mass of that cap (computed on the host from it).
* Every uniform behind ``t`` (proposal and acceptance test) has 96 bits
  (:func:`uniform_logs`: ``U = (K + ½)/2⁹⁶`` reaches ``[2⁻⁹⁷, 1 − 2⁻⁹⁷]``, all normal
  float32, used in log space), so each try is within total variation ``2·2⁻⁹⁶`` of the exact
  one and the accepted ``t`` within ``2⁻⁹⁵/A + (1 − A)^MAX_TRIES`` (A the smaller
  acceptance: a coupling of the tries, ``1/A`` of them on average, and the loop's cut-off).
* ``w`` comes from ``sampling.normal_like(..., impl=DIRECTION_IMPL)``, within total
  variation :data:`DIRECTION_TAIL_MASS` per coordinate of N(0, 1) (its bounded tails), so
  within ``d·DIRECTION_TAIL_MASS`` for the whole vector.

So, against the ideal mechanism at the realised ``p``, ``q`` and norm coin (exactly ε'-LDP,
ε' recomputed from them), the realisation is **(ε', δ')-LDP** with δ' the smaller of two
bounds (:func:`realised_guarantee`): the coupling bound ``(1 + e^{ε'})·TV``, TV the sum above
(``P'(S) ≤ P(S) + TV ≤ e^{ε'}(P̃'(S) + TV) + TV``); and the density-ratio bound
``(p/q)·κ + (1 + e^{ε'})·(1 − A)^MAX_TRIES``, where the realised density of every input is
at most ``1 + κ`` times the ideal one (the samplers' laws are ideal laws restricted to their
reach: ``1 + κ = A/((1 − 2⁻⁹⁶)²(A − 2⁻⁹⁵))·(1 − DIRECTION_TAIL_MASS)^{−d}``), smaller by
about ``(1 + e^{ε₀})e^{ε_r}``. :func:`make` prints it (``epsilon``, ``delta``,
``tail_mass = delta``, ``tail_scale = 1``). Exact pure ε is out of reach for any sampler
with bounded coordinates: the supports of ``V`` then depend on the direction. ε₀ ≤ 15 and
ε₁ ≤ 68 keep every probability a normal float32 (ε up to about 99 with the norm's 16);
caps thinner than ``1 − γ = 10⁻³`` (small d at large ε) are refused (use PrivUnitG).
Not modelled: the float32 rounding of the transforms (relative ~1e-6 on ``t``, and the
acceptance exponent's rounding, ≤ ~1e-5 in its logarithm).

References:
    Bhowmick, Duchi, Freudiger, Kapoor & Rogers, "Protection against reconstruction and its
    applications in private federated learning", 2018 (arXiv:1812.00984), Alg. 1 and §4;
    Asi, Feldman & Talwar, "Optimal algorithms for mean estimation under local differential
    privacy", ICML 2022 (arXiv:2205.02466); Duchi, Jordan & Wainwright 2018 (scalar);
    Mironov, "On significance of the least significant bits for differential privacy",
    CCS 2012.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
from scipy import optimize, special

from ldpsim._src._checks import LdpsimError
from ldpsim._src.privacy.randomizers import randomizer as rz
from ldpsim._src.privacy.noise import sampling
from ldpsim._src.privacy.randomizers.randomizer import LocalMechanism, Report

NAME = "privunit2"
MIN_DIM = 4

#: Largest ε₀ (cap probability) and ε₁ (cap size) a float32 realisation represents.
#: ε₁ ≤ 68 keeps the cap's mass q ≥ 3e-30 a normal float32 (XLA on CPU flushes subnormals).
MAX_EPS_P, MAX_EPS_CAP, MAX_EPS_NORM = 15.0, 68.0, 16.0
#: Rejection steps before giving up (the host refuses parameters with acceptance < 1e-3).
MAX_TRIES = 100_000
#: The N(0, 1) sampler of the direction draws (PrivUnitG's g, PrivUnit2's w).
DIRECTION_IMPL = "tail"
#: Total variation between one coordinate of ``sampling.normal(impl=...)`` and N(0, 1) in the
#: continuous idealisation (:mod:`ldpsim._src.privacy.noise.realised`: the ideal law restricted to
#: what the sampler reaches): the ideal mass beyond its reach. ``"icdf"``: |z| ≤ Φ̄⁻¹(2⁻⁶⁴),
#: 2⁻⁶³; ``"tail"``: Box–Muller with a 96-bit radius uniform, 2⁻⁹⁷; ``"fast"``: Box–Muller with
#: ``U ≥ 2⁻³³``, 2⁻³³ (the pair's disk; a coordinate is a function of the pair).
DIRECTION_TAIL_MASS = {"icdf": 2.0**-63, "tail": 2.0**-97, "fast": 2.0**-33}
#: Words (32 bits each) of every uniform behind α and t, and the total variation of one such
#: uniform from U(0, 1): ``U = (K + ½)/2⁹⁶`` reaches ``[2⁻⁹⁷, 1 − 2⁻⁹⁷]``, so the ideal mass
#: beyond its reach is 2⁻⁹⁶ (both ends: the lower region of a truncated normal uses both).
UNIFORM_WORDS, UNIFORM_TV = 3, 2.0**-96
#: Relative margin by which the normal proposals overlap the cap boundary (the rejection step
#: trims them at γ exactly, so float32 rounding of the quantile cannot open a gap there).
PROPOSAL_PAD = 1e-4


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class PrivUnit2Params:
    """PrivUnit2's calibrated numbers (float32 scalars; may be traced) and its dimension.

    ``p``, ``gamma``, ``m`` and ``et2`` are the realised values (module docstring)."""

    clip: jax.Array
    p: jax.Array          # realised probability of the cap
    p_out: jax.Array      # 1 − p = 1/(1 + e^{ε₀}) (the coin's small side, rounded up)
    gamma: jax.Array      # cap threshold on ⟨V, u⟩ (the sampler compares against this value)
    scale: jax.Array      # s of the normal proposal t = s·z (a·s² ≥ ½)
    log_q_hi: jax.Array   # log Q of the cap's normal proposal z ≥ Φ̄⁻¹(Q) (Q ≥ Φ̄(γ/s))
    log_q_lo: jax.Array   # log Q of the complement's proposal z < Φ̄⁻¹(Q) (Q ≤ Φ̄(γ/s))
    log_1mq_lo: jax.Array  # log(1 − Q) of the same
    cap_rate: jax.Array   # λ of the exponential proposal on the cap (0: normal proposal)
    m: jax.Array          # E⟨V, u⟩
    et2: jax.Array        # E⟨V, u⟩²
    norm_bound: jax.Array  # B of the norm's scalar randomizer
    norm_excess: jax.Array  # B − C, exact
    dim: int = dataclasses.field(metadata=dict(static=True))


# ---------------------------------------------------------------------------- host maths


def f32_up(x: float) -> float:
    """The smallest float32 ≥ x (as a Python float)."""
    v = np.float32(x)
    if float(v) < x:
        v = np.nextafter(v, np.float32(np.inf))
    return float(v)


def f32_down(x: float) -> float:
    """The largest float32 ≤ x (as a Python float)."""
    v = np.float32(x)
    if float(v) > x:
        v = np.nextafter(v, np.float32(-np.inf))
    return float(v)


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
    """``P(t ≥ γ) = ½·I_{1−γ²}((d−1)/2, ½)`` for γ ≥ 0 (the small side of the incomplete
    beta: ``1 − γ²`` is exact in float64 for a float32 γ, so thin caps stay accurate)."""
    g2 = gamma * gamma
    if g2 <= 0.5:
        return 0.5 * float(special.betaincc(0.5, (d - 1) / 2.0, g2))
    return 0.5 * float(special.betainc((d - 1) / 2.0, 0.5, 1.0 - g2))


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _moments(p: float, q: float, gamma: float, log_om: float, d: int) -> dict:
    """m = E⟨V, u⟩ and E⟨V, u⟩² for cap probability p, cap mass q and threshold γ."""
    m = math.exp(log_cap_mean(gamma, d, log_om)) * (p / q - (1 - p) / (1 - q))
    e_hi = float(special.betaincc(1.5, (d - 1) / 2.0, gamma * gamma)) / (2.0 * d * q)
    e_lo = (1.0 / d - q * e_hi) / (1 - q)
    return dict(p=p, q=q, gamma=gamma, m=m, et2=p * e_hi + (1 - p) * e_lo)


def direction_constants(eps_p: float, eps_cap: float, d: int) -> dict:
    """p, q, γ, m, E[t²] for the split (ε₀ = ``eps_p``, ε₁ = ``eps_cap``) (ideal values)."""
    p = _sigmoid(eps_p)
    q = _sigmoid(-eps_cap)
    gamma, log_om = cap_geometry(q, d)
    return _moments(p, q, gamma, log_om, d)


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


def realised_coins(eps_p: float, clip: float, eps_norm: float) -> dict:
    """The float32 coin parameters and what they realise (host): the cap coin's small side
    ``p_out`` (rounded up, so the realised ε₀ is not above the ideal one) and its exact
    realised probability, the norm coin's float32 ``bound``/``excess`` and its realised ε."""
    p_out = f32_up(_sigmoid(-eps_p))
    p_out_real = rz.bernoulli_probability(p_out)
    bound = float(np.float32(rz.signed_scalar_bound(clip, eps_norm)))
    excess = float(np.float32(rz.signed_scalar_excess(clip, eps_norm)))
    return dict(p_out=p_out, p=1.0 - p_out_real, p_out_real=p_out_real, norm_bound=bound,
                norm_excess=excess, eps_norm_real=rz.signed_scalar_epsilon(clip, bound, excess),
                eps_p_real=math.log1p(-p_out_real) - math.log(p_out_real))


#: Relative margin by which a realised ε' is rounded up: its float64 evaluation (logs of
#: probabilities, a few ulps) must not fall below the exact ratio, or the δ at the printed ε'
#: would gain ~1e-16 of the release's probability, more than δ' itself at small ε.
EPS_ROUND_UP = 1e-12


def round_up_epsilon(eps: float) -> float:
    """``eps·(1 + 1e-12)``: an ε' never below the exact one (:data:`EPS_ROUND_UP`)."""
    return eps * (1.0 + EPS_ROUND_UP)


def realised_guarantee(eps_real: float, tv: float, cap_weight: float = math.inf,
                       excess: float = math.inf, cut: float = 0.0) -> float:
    """δ' of the realisation at ε' (at most 1): the smaller of two proven bounds.

    * Coupling: every input's realised law is within ``tv`` of an ε'-DP law, so
      ``δ' ≤ (1 + e^{ε'})·tv`` (``P'(S) ≤ P(S) + tv ≤ e^{ε'}(P̃'(S) + tv) + tv``).
    * Density ratio: where the realised density of every input is at most ``1 + excess``
      times that of the ideal law at the realised ``p``, ``q`` (whose cap weights are
      ``c_hi = cap_weight = p/q`` and ``c_lo``), apart from an event of probability ``cut``,
      ``δ' ≤ c_hi·excess + (1 + e^{ε'})·cut``: with ``ρ = f'/f ≤ 1 + excess`` and
      ``e^{ε_d} c_{u'} ≥ c_u``, ``(f'_u − e^{ε_d} f'_{u'})₊ ≤ c_u·σ·(ρ_u − ρ_{u'})₊ ≤
      c_hi·σ·(1 + excess − ρ_{u'})``, whose integral is ``c_hi·excess`` because
      ``∫σρ_{u'} = p/c_hi + (1 − p)/c_lo = 1`` (the regions' probabilities are exact); the
      norm's independent pure ε_r' adds nothing to δ at ``ε_d' + ε_r'``.
    """
    def upper(log_x):
        return math.inf if log_x > 700 else math.exp(log_x)

    log1pe = eps_real + math.log1p(math.exp(-eps_real))          # log(1 + e^ε)
    coupling = upper(math.log(tv) + log1pe) if tv > 0 else 0.0
    sharp = cap_weight * excess + (upper(math.log(cut) + log1pe) if cut > 0 else 0.0)
    return min(1.0, coupling, sharp)


def direction_tail_mass(dim: int, impl: str | None = None) -> float:
    """Total variation of ``d`` direction coordinates from N(0, I_d) (union over coordinates)."""
    return -math.expm1(dim * math.log1p(-DIRECTION_TAIL_MASS[impl or DIRECTION_IMPL]))


def constants(*, epsilon: float, dim: int, clip: float = 1.0, norm_epsilon=None) -> dict:
    """Host calibration of PrivUnit2 (float64): the ε split and every constant, then the
    float32 values the sampler uses and the guarantee they realise (:func:`realise`)."""
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
    k = dict(k, clip=c, dim=d, epsilon=eps, eps_p=e0, eps_cap=e1, eps_norm=er)
    return realise(k)


def realise(k: dict, impl: str | None = None) -> dict:
    """The float32 numbers of the sampler for the ideal constants ``k`` and what they realise:
    realised p, q, m, E[t²], the proposals and their acceptances, ε' and δ' (module docstring).

    Raises:
        LdpsimError: a proposal's acceptance below 1e-3 (use privunitg).
    """
    d, c = k["dim"], k["clip"]
    a = (d - 3) / 2.0
    coins = realised_coins(k["eps_p"], c, k["eps_norm"])
    p = coins["p"]
    gamma = float(np.float32(k["gamma"]))          # the threshold the sampler compares with
    q = cap_probability(gamma, d)
    log_om = math.log1p(-gamma * gamma)            # exact-ish: 1 − γ² has ≤ 48 bits
    mom = _moments(p, q, gamma, log_om, d)
    # normal proposal t = s·z, z ~ N(0, 1): a·s² ≥ ½ (so (1−t²)^a·e^{z²/2} ≤ 1), checked exactly
    s = f32_up(1.0 / math.sqrt(2 * a))
    while Fraction(a) * Fraction(s) ** 2 < Fraction(1, 2):
        s = float(np.nextafter(np.float32(s), np.float32(np.inf)))
    log_pq = float(special.log_ndtr(-gamma / s))   # log Φ̄(γ/s): the exact split of the proposal
    q_hi = f32_up(math.exp(log_pq) * (1 + PROPOSAL_PAD))
    q_lo = f32_down(math.exp(log_pq) * (1 - PROPOSAL_PAD))
    log_target = special.betaln(0.5, (d - 1) / 2.0)          # ∫(1−t²)^a over [−1, 1]
    log_prop = math.log(s) + 0.5 * math.log(2 * math.pi)     # the normal's normaliser
    acc_hi = math.exp(math.log(q) + log_target - log_prop - math.log(q_hi))
    acc_lo = math.exp(math.log1p(-q) + log_target - log_prop - math.log1p(-q_lo))
    # exponential proposal t = γ + E/λ on [γ, ∞) (t ≥ 1 rejected): λ at most the slope of the
    # concave a·log(1−t²) at γ, so the tangent line dominates it (acceptance ≤ 1)
    lam = f32_down(2 * a * gamma / (1 - gamma * gamma)) if gamma > 0 else 0.0
    if lam > 0:
        acc_exp = math.exp(math.log(q) + log_target - a * log_om + math.log(lam))
    else:
        acc_exp = 0.0
    if acc_exp > acc_hi:
        acc_hi = acc_exp
    else:
        lam = 0.0
    acc = min(acc_hi, acc_lo)
    if acc < 1e-3:
        raise LdpsimError(f"privunit2 at epsilon {k['epsilon']!r}, dim {d!r}: the cap sampler's "
                          f"acceptance {acc:.2g} is below 1e-3; use privunitg")
    q_f = float(np.float32(q))
    eps_dir = coins["eps_p_real"] + math.log1p(-q) - math.log(q)
    eps_real = round_up_epsilon(eps_dir + coins["eps_norm_real"])
    acc = min(acc, 1.0)                            # (a ratio ≤ 1; float64 could round above)
    a_real = acc - 2 * UNIFORM_TV                  # the realised acceptance is at least this
    cut = math.exp(MAX_TRIES * math.log1p(-a_real)) if a_real < 1.0 else 0.0   # loop cut-off
    tv_t = 2 * UNIFORM_TV / acc + cut
    tv = tv_t + direction_tail_mass(d, impl)
    # density ratio of the accepted t to its ideal law: proposal (restricted U₁) ≤ 1/(1 − 2⁻⁹⁶),
    # acceptance (restricted U₂) ≤ acc/(1 − 2⁻⁹⁶), their integral ≥ A − 2⁻⁹⁵; w ≤ 1/Z (cube)
    log_k = (math.log(acc) - math.log(acc - 2 * UNIFORM_TV) - 2 * math.log1p(-UNIFORM_TV)
             - math.log1p(-direction_tail_mass(d, impl)))
    delta = realised_guarantee(eps_real, tv, cap_weight=p / q, excess=math.expm1(log_k), cut=cut)
    b = coins["norm_bound"]
    return dict(k, **mom, **{n: coins[n] for n in ("p_out", "norm_bound", "norm_excess")},
                q_f32=q_f, scale=s, log_q_hi=math.log(q_hi), log_q_lo=math.log(q_lo),
                log_1mq_lo=math.log1p(-q_lo), cap_rate=lam, acceptance=(acc_hi, acc_lo),
                eps_dir_real=eps_dir, eps_norm_real=coins["eps_norm_real"],
                epsilon_real=eps_real, tv=tv, tv_t=tv_t, cut=cut, excess=math.expm1(log_k),
                delta_real=delta,
                worst_total_variance=(b * b + 3 * c * c) / 4 / mom["m"] ** 2 - c * c)


# ---------------------------------------------------------------------------- device side

_LOG_HALF = math.log(0.5)
_LOG_2PI = math.log(2 * math.pi)


def uniform_from_words(w0: jax.Array, w1: jax.Array, w2: jax.Array) -> jax.Array:
    """``U = (K + ½)/2⁹⁶`` in float32 for the 96-bit integer ``K = w0·2⁶⁴ + w1·2³² + w2``
    (uint32 words): every term is exact and the sum runs from the smallest, so ``U`` is
    within 2 float32 ulps of its value; ``U ≥ 2⁻⁹⁷``, a normal float32."""
    def halves(w, e):   # (w >> 8)·2^(e+8) and (w & 255)·2^e, both exact
        hi = (w >> np.uint32(8)).astype(jnp.int32).astype(jnp.float32) * np.float32(2.0 ** (e + 8))
        lo = (w & np.uint32(0xFF)).astype(jnp.int32).astype(jnp.float32) * np.float32(2.0**e)
        return hi, lo

    h2, l2 = halves(w2, -96)
    h1, l1 = halves(w1, -64)
    h0, l0 = halves(w0, -32)
    acc = l2 + np.float32(2.0**-97)
    for t in (h2, l1, h1, l0, h0):
        acc = acc + t
    return acc


def uniform_logs(words: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(log U, log(1 − U))`` for the 96-bit uniform of three uint32 ``words``
    (:func:`uniform_from_words`); ``1 − U`` is the uniform of the complemented words, exactly,
    so both ends keep full relative precision."""
    w = jnp.asarray(words, jnp.uint32)
    u = uniform_from_words(w[..., 0], w[..., 1], w[..., 2])
    c = ~w
    v = uniform_from_words(c[..., 0], c[..., 1], c[..., 2])
    return jnp.log(u), jnp.log(v)


def upper_quantile(log_s: jax.Array) -> jax.Array:
    """``Φ̄⁻¹(e^{log_s})`` (the standard normal's upper-tail quantile) in float32, for
    ``log_s ≤ log ½``, from its logarithm, so tails far below float32's range are exact:
    a start from ``ndtri`` (``log_s ≥ −80``) or the asymptote ``x² ≈ y − log y``,
    ``y = −2 log_s − log 2π``, then two Newton steps on ``log Φ̄(x) = log_s``
    (``jax.scipy.special.log_ndtr``). Relative error below 1e-6 for ``log_s ≥ −150``
    (tests/privacy/test_realised_privunit.py)."""
    log_s = jnp.minimum(jnp.asarray(log_s, jnp.float32), np.float32(_LOG_HALF))
    central = -jax.scipy.special.ndtri(jnp.exp(jnp.maximum(log_s, np.float32(-80.0))))
    y = np.float32(-2.0) * log_s - np.float32(_LOG_2PI)
    asym = jnp.sqrt(jnp.maximum(y - jnp.log(jnp.maximum(y, np.float32(1.0))), np.float32(0.0)))
    x = jnp.where(log_s >= np.float32(-80.0), central, asym)
    for _ in range(2):
        log_sf = jax.scipy.special.log_ndtr(-x)
        log_pdf = np.float32(-0.5) * x * x - np.float32(0.5 * _LOG_2PI)
        x = x + (log_sf - log_s) * jnp.exp(log_sf - log_pdf)
    return jnp.maximum(x, np.float32(0.0))


def truncated_normal(log_u: jax.Array, log_w: jax.Array, upper: jax.Array, log_q: jax.Array,
                     log_1mq: jax.Array) -> jax.Array:
    """N(0, 1) conditioned on ``z ≥ Φ̄⁻¹(Q)`` (``upper``) or ``z < Φ̄⁻¹(Q)``, by its inverse
    CDF on the uniform ``U`` (``log_u``; ``log_w = log(1 − U)``), in log space throughout:
    upper ``z = Φ̄⁻¹(Q·U)``; lower ``z = Φ⁻¹((1 − Q)·U)``, as ``−Φ̄⁻¹((1 − Q)U)`` while
    that is ≤ ½ and ``Φ̄⁻¹(Q + (1 − Q)(1 − U))`` above (the top of the lower region keeps its
    resolution up to Φ̄⁻¹(Q) however small Q is). The two regions meet at ``Φ̄⁻¹(Q)``."""
    log_lo = log_1mq + log_u                                   # log Φ(z) in the lower region
    below_half = log_lo <= np.float32(_LOG_HALF)
    arg = jnp.where(upper, log_u + log_q,
                    jnp.where(below_half, log_lo, jnp.logaddexp(log_q, log_1mq + log_w)))
    x = upper_quantile(arg)
    return jnp.where(upper | ~below_half, x, -x)


def _direction(flat: jax.Array) -> tuple[jax.Array, jax.Array]:
    r = jnp.sqrt(jnp.sum(jnp.square(flat)))
    e1 = jnp.zeros_like(flat).at[0].set(1.0)
    u = jnp.where(r > 0, flat / jnp.where(r > 0, r, 1.0), e1)
    return u, r


def orthogonal_unit(key: jax.Array, u: jax.Array) -> jax.Array:
    """A uniform unit vector orthogonal to the unit vector ``u`` (a normalised projection of
    a ``sampling.normal_like(impl=DIRECTION_IMPL)`` draw)."""
    g = sampling.normal_like(key, u, impl=DIRECTION_IMPL)
    g = g - jnp.vdot(g, u) * u
    return g / jnp.sqrt(jnp.sum(jnp.square(g)))


def t_try(words: jax.Array, in_cap: jax.Array, params: PrivUnit2Params):
    """One try of the rejection step from six uint32 words (96 bits for the proposal, 96 for
    the test): ``(t, accepted)``."""
    a = np.float32((params.dim - 3) / 2.0)
    gamma = jnp.asarray(params.gamma, jnp.float32)
    lam = jnp.asarray(params.cap_rate, jnp.float32)
    use_exp = in_cap & (lam > 0)
    log_u1, log_w1 = uniform_logs(words[:UNIFORM_WORDS])
    log_u2, _ = uniform_logs(words[UNIFORM_WORDS:])
    log_q = jnp.where(in_cap, params.log_q_hi, params.log_q_lo)
    z = truncated_normal(log_u1, log_w1, in_cap, log_q, params.log_1mq_lo)
    e = -log_u1                                               # Exp(1)
    t = jnp.where(use_exp, gamma + e / jnp.where(lam > 0, lam, 1.0), params.scale * z)
    log_f = a * jnp.log1p(-jnp.square(t))                     # −inf/NaN for |t| ≥ 1: rejected
    log_acc = jnp.where(use_exp, log_f - a * jnp.log1p(-gamma * gamma) + e,
                        log_f + np.float32(0.5) * z * z)
    region = jnp.where(in_cap, t >= gamma, t < gamma)
    ok = region & (jnp.square(t) < 1.0) & (log_u2 <= log_acc)
    return t, ok


def sample_t(key: jax.Array, in_cap: jax.Array, params: PrivUnit2Params) -> jax.Array:
    """``t = ⟨V, u⟩`` from ``∝ (1−t²)^a`` (a = (d−3)/2) on ``[γ, 1]`` (``in_cap``) or ``[−1, γ)``
    by rejection (:func:`t_try`, module docstring); a ``while_loop`` of at most
    :data:`MAX_TRIES` tries (vmaps as the longest lane)."""
    def draw(i):
        words = sampling.random_bits(jax.random.fold_in(key, i), (2 * UNIFORM_WORDS,))
        return t_try(words, in_cap, params)

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
    """PrivUnit2 + a private scalar norm, calibrated to ideal pure ε-LDP; prints the
    (ε', δ') its float32 realisation delivers (module docstring).

    Args:
        epsilon: total ε > 0 (direction + norm) of the ideal mechanism.
        dim: the update's number of coordinates d ≥ 4.
        clip: the L2 bound C of the inputs (above it: clipped, counted in ``was_clipped``).
        norm_epsilon: ε of the norm (default: chosen to minimise the worst-case variance).

    Raises:
        LdpsimError: ε ≤ 0 or non-finite or beyond the float32 range, ``dim`` < 4, clip ≤ 0.
    """
    k = constants(epsilon=epsilon, dim=dim, clip=clip, norm_epsilon=norm_epsilon)
    f = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    params = PrivUnit2Params(clip=f(k["clip"]), p=f(k["p"]), p_out=f(k["p_out"]),
                             gamma=f(k["gamma"]), scale=f(k["scale"]), log_q_hi=f(k["log_q_hi"]),
                             log_q_lo=f(k["log_q_lo"]), log_1mq_lo=f(k["log_1mq_lo"]),
                             cap_rate=f(k["cap_rate"]), m=f(k["m"]), et2=f(k["et2"]),
                             norm_bound=f(k["norm_bound"]), norm_excess=f(k["norm_excess"]),
                             dim=k["dim"])
    line = (f"float32 PrivUnit2: t by rejection on 96-bit uniforms (TV {k['tv_t']:.2g}), w from "
            f"sampling '{DIRECTION_IMPL}' (TV {DIRECTION_TAIL_MASS[DIRECTION_IMPL]:.2g}/coordinate), "
            f"32-bit coins; (eps', delta') against the ideal law at the realised p, q: delta' = "
            f"min((1 + e^eps')*TV, (p/q)*kappa + (1 + e^eps')*cut), TV = {k['tv']:.3g}, "
            f"kappa = {k['excess']:.3g}, cut = {k['cut']:.2g}; float32 arithmetic and output "
            f"grid idealised (Mironov 2012)")
    return _mechanism(NAME, params, k, privatize, decode, mean, variance, line)


def _mechanism(name, params, k, privatize, decode, mean, variance, realisation) -> LocalMechanism:
    """The LocalMechanism of a PrivUnit randomizer with the realised guarantee in ``k``
    (``epsilon_real``, ``delta_real``) and the ideal one (``epsilon``, 0)."""
    # any ε above the realised ε' holds with the same δ': print the requested ε when ε' ≤ it
    eps, delta = max(k["epsilon_real"], k["epsilon"]), k["delta_real"]
    std = math.sqrt(k["worst_total_variance"] / k["dim"])

    def dp_event(params):
        return rz.pure_dp_event(eps)

    return LocalMechanism(name=name, params=params, neighbours="replace", epsilon=eps,
                          delta=delta, privatize=privatize,
                          noise_std=lambda params: jnp.float32(std), dp_event=dp_event,
                          decode=decode, mean=mean, variance=variance, additive=False,
                          unbiased=True, tail_mass=delta, tail_scale=1.0,
                          ideal_epsilon=k["epsilon"], ideal_delta=0.0, realisation=realisation)


def privunit_audit_game(local: LocalMechanism, q: float, dim: int, clip: float) -> tuple:
    """The distinguishing game of a PrivUnit randomizer (``q``: its cap probability
    ``P(⟨V, e⟩ ≥ γ)`` for a uniform direction): ``x1 = C·e₁`` against ``x0 = −10⁻⁶C·e₁``
    (norm C against ≈ 0 and opposite directions: both parts of the ε split are exercised),
    scored by the exact log-likelihood ratio (cap side of ``±V₁`` against γ, and the norm's
    two values). Returns ``(mechanism, x0, x1, score, local, what)`` as
    :func:`ldpsim.audit.report_game`."""
    params = local.params

    def mech(key, x):
        return local.privatize(key, x, params).report

    x1, x0 = rz.axis(dim, clip), rz.axis(dim, -rz.AUDIT_TINY * clip)
    p = 1.0 - float(np.float32(params.p_out))
    gamma = float(params.gamma)
    lw_in, lw_out = math.log(p / q), math.log((1 - p) / (1 - q))
    c, b, ex = float(params.clip), float(params.norm_bound), float(params.norm_excess)
    high = 0.5 * (b + c)

    def p_high(r):
        return 1.0 - (ex + 2.0 * (c - r)) / (2.0 * b)

    ln_high = math.log(p_high(c)) - math.log(p_high(rz.AUDIT_TINY * c))
    ln_low = math.log(1 - p_high(c)) - math.log(1 - p_high(rz.AUDIT_TINY * c))

    def score(report):
        t = report["direction"][0]      # ⟨V, ±e₁⟩ = ±V₁ (α's axis for PrivUnitG)
        d1 = jnp.where(t >= gamma, lw_in, lw_out)
        d0 = jnp.where(-t >= gamma, lw_in, lw_out)
        n = jnp.where(report["norm"] >= 0.5 * high, ln_high, ln_low)
        return (d1 - d0 + n).astype(jnp.float32)

    what = "the exact log-likelihood ratio (cap side of ±V1 against gamma, and the norm's value)"
    return mech, x0, x1, score, local, what


def audit_game(*, epsilon: float, dim: int, clip: float = 1.0) -> tuple:
    """PrivUnit2's distinguishing game at its worst-case pair (:func:`privunit_audit_game`)."""
    local = make(epsilon=epsilon, dim=dim, clip=clip)
    return privunit_audit_game(local, cap_probability(float(local.params.gamma), dim), dim, clip)
