"""ProjUnit and FastProjUnit: PrivUnitG in a random k-dimensional projection (ε-LDP).

Asi, Feldman, Nelson, Nguyen & Talwar, "Fast Optimal Locally Private Mean Estimation via
Random Projections", NeurIPS 2023 (arXiv:2306.04444). A client holding ``x`` (clipped to
``‖x‖ ≤ C``, flattened to dimension d, ``u = x/‖x‖``, ``e₁`` for ``x = 0``, ``ρ = ‖x‖``):

1. draws a random ``W ∈ R^{k×d}`` from a seed derived from its key (public randomness: the
   seed travels with the report and the server rebuilds ``W`` from it);
2. projects and normalises, ``w = Wu/‖Wu‖ ∈ S^{k−1}`` (``e₁`` if ``Wu = 0``);
3. runs PrivUnitG in k dimensions on ``w`` (:mod:`ldpsim._src.privacy.randomizers.privunitg`):
   ``V = αw + (I − wwᵀ)g``, ``g ~ N(0, I_k)``, α the two-region truncated normal, and
   releases ``ρ`` by the private scalar randomizer (``r̂``, as PrivUnitG does for inputs in
   the ball; the paper's inputs are unit vectors);
4. sends ``(V ∈ R^k, r̂, seed)``: **k + 1 floats and a 64-bit seed** (``params.floats_sent``)
   instead of PrivUnitG's d + 1.

The server decodes ``x̂ = r̂·Wᵀ V/(m·c)``, ``m = E[α]`` (PrivUnitG's realised constant) and
``c`` the projection's normalisation constant below.

Projections:

* ``projunit``: ``W`` with i.i.d. ``N(0, 1/k)`` entries (the paper's ProjUnit uses ``√(d/k)``
  times k rows of a random rotation; the Gaussian ensemble is rotation invariant too, and it
  can be generated in row blocks inside a scan, so ``W`` is never held whole: memory
  O(block·d) per client; cost k·d normal draws per client, twice (client and server). It
  runs at d = 10⁶ (blocks of one row), but at k = 1,000 that is 10⁹ draws per client per
  pass, ~3 min on one loaded CPU core: at 10⁶, FastProjUnit is the practical one).
* ``fastprojunit``: the randomized Hadamard transform ``W = √(d'/k)·S·H·D`` (the paper's
  FastProjUnit): ``D`` diagonal random signs on ``d' = 2^⌈log₂ d⌉`` coordinates (``x`` padded
  with zeros), ``H`` the orthonormal Walsh–Hadamard matrix applied by the fast transform
  (O(d' log d')), ``S`` k of the d' rows drawn uniformly without replacement (the k largest of i.i.d.
  random priorities); the decoder
  keeps the first d coordinates of ``Wᵀ V``.

Mean and variance (derivations; σ_α² := E[α²], E[V | w] = m·w, E[VVᵀ | w] = I + (σ_α² − 1)wwᵀ,
E[r̂] = ρ, E[r̂²] from :func:`~ldpsim._src.privacy.randomizers.randomizer.signed_scalar_second_moment`):

* **projunit, exact.** Write ``W = (Wu)uᵀ + W_⊥`` with ``W_⊥ = W(I − uuᵀ)``; for Gaussian ``W``,
  ``y = Wu ~ N(0, I_k/k)`` and ``W_⊥`` are independent. Then ``WᵀV = u·⟨y, V⟩ + W_⊥ᵀV`` with
  ``⟨y, V⟩ = s·α`` (``s = ‖y‖``), and given V, ``W_⊥ᵀV`` is ``N(0, ‖V‖²/k)`` on ``u^⊥``. Hence
  ``E[WᵀV] = m·E[s]·u`` and, with ``c = E[s] = √(2/k)·Γ((k+1)/2)/Γ(k/2)`` (the χ_k mean),
  the decoder is **unbiased**: ``E[x̂] = x``. Its per-coordinate variance is

      Var x̂_i = E[r̂²]/(m²c²) · (σ_α² u_i² + (σ_α² + k − 1)(1 − u_i²)/k) − x_i²,

  total ``E[r̂²]/(m²c²)·(σ_α² + (d − 1)(σ_α² + k − 1)/k) − ρ²`` (E[s²] = 1, E‖V‖² = σ_α² + k − 1).
  Against PrivUnitG's ``E[r̂²](σ_α² + d − 1)/m² − ρ²`` the direction term grows by
  ``(1 + (σ_α² − 1)/k)/c² = 1 + O(ε/k)``: the paper's 1 + o(1) for k ≫ ε.
* **fastprojunit, bias bounded, variance approximate.** ``E_S[SᵀS] = (k/d')I`` gives
  ``E[WᵀWu] = u`` and, exactly (independent of D), ``E[(WᵀWu)_i²] = a·u_i² + f`` with
  ``a = d'(k − 1)/(k(d' − 1))``, ``f = (d' − k)/(k(d' − 1))``. The normalisation by
  ``s = ‖Wu‖`` is not rotation invariant here, so ``E[x̂]`` depends on the direction: along
  ``u``, ``E⟨x̂, u⟩ = ρ·E[s]/c`` and, from ``1 − s = (1 − s²)/2 + (1 − s)²/2``,
  ``E[s²] = 1`` and ``Var(s²) = 2(1 − ‖u‖₄⁴)·f`` (exact; ``E_D[d'Σz_j⁴] = 3 − 2‖u‖₄⁴``),
  ``1 − (1 − ‖u‖₄⁴)·f ≤ E[s] ≤ 1`` (proven). ``c = 1 − f/4`` (the second-order value of E[s]
  for a dense input, ``‖u‖₄⁴ ≈ 0``) removes the leading bias of dense inputs; the relative
  bias along u is then within ``[−(3/4)f, f/4]/(1 − f/4)`` for every input (≈ 1/(4k) at worst;
  ``e₁``: E[s] = 1, +f/4). The component orthogonal to u is measured, not proven
  (tests/privacy/test_projunit.py). :func:`mean` returns the clipped input and
  :func:`variance` the formula of ``projunit`` with ``1/k`` replaced by ``f``:
  ``E[r̂²]/(m²c²)·(1 + (σ_α² − 1)(u_i² + (1 − u_i²)f)) − x_i²``, whose sum over the padded
  coordinates is the exact second moment ``E[r̂²]/(m²c²)·(d'/k)(σ_α² + k − 1)`` (exact for
  ``d = d'``; the ``− ρ²`` term is exact to the bias above). The LocalMechanism says
  ``unbiased=False``.

Privacy. ``W`` depends on the key only, never on ``x``: for each fixed ``W`` the map
``x ↦ (w, ρ)`` is a function of the input into PrivUnitG's domain (k-dimensional unit
vectors, norms in ``[0, C]``), and PrivUnitG is (ε', δ')-LDP for ANY two such inputs, so the
release ``(V, r̂, seed)`` (a mixture over the public W of (ε', δ')-LDP mechanisms) is
(ε', δ')-LDP for any two inputs of the C ball (replace-one). The guarantee printed is
PrivUnitG's **realised** one in k dimensions (:func:`privunitg.realise` at ``dim = k``: 32-bit
coins, α on a 96-bit uniform, the k direction draws' tails), never d's: the tail mass of the
direction sampler counts the k coordinates that are drawn. The seed reveals nothing about the
mechanism's own draws (distinct ``fold_in`` tags of the client key). Float32 normalisation:
``w`` is computed in float32, so ``‖w‖ = 1`` to a relative ~1e-7 (measured: |‖w‖ − 1| < 3e-7
at k = 1,000); this is the float32 rounding of the transforms that PrivUnitG's realised model
already leaves out (relative ~1e-6). ``Wu`` is computed from the unit ``u``, never from ``x``,
so no clip bound can overflow it.

``ldpsim frontier --mechanisms privunitg,projunit,fastprojunit --dims 32768 --clients 1
--epsilon 1,2,...,15`` gives the MSE of the decoded mean against ε at the paper's settings
(d = 2¹⁵, k = 1,000) with the scalars sent per client (``floats_sent``).

A non-finite update is replaced by the zero substitute before anything is drawn (as every
randomizer does), so it releases exactly what the zero update releases with the same key.

References:
    Asi, Feldman, Nelson, Nguyen & Talwar, NeurIPS 2023 (arXiv:2306.04444); Asi, Feldman &
    Talwar, ICML 2022 (arXiv:2205.02466) for PrivUnitG; Ailon & Chazelle, "The fast
    Johnson–Lindenstrauss transform", STOC 2006, for the randomized Hadamard transform.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ldpsim._src.privacy.randomizers import privunit2 as p2
from ldpsim._src.privacy.randomizers import privunitg as pg
from ldpsim._src.privacy.randomizers import randomizer as rz
from ldpsim._src.privacy.hadamard import fwht_unnormalised
from ldpsim._src.privacy.noise import sampling
from ldpsim._src.privacy.randomizers.privunit2 import _direction, best_split, split_epsilon
from ldpsim._src.privacy.randomizers.randomizer import LocalMechanism, Report

NAMES = ("projunit", "fastprojunit")
MIN_K = 2
#: Default projection dimension (the paper's experiments use k = 1,000); ``k=None`` takes
#: ``min(1000, d)`` (``min(1000, d')`` for FastProjUnit).
DEFAULT_K = 1000
#: ``fold_in`` tag of the projection's seed (distinct from the randomizer's tags 11-16).
TAG_PROJECTION = 21
#: Elements of one generated block of Gaussian W (rows × d), per client: 2²⁰ (4 MiB).
BLOCK_ELEMENTS = 1 << 20


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ProjUnitParams:
    """Calibrated numbers (float32 scalars; may be traced) and the static shapes.

    ``p``, ``q``, ``m``, ``ea2`` are PrivUnitG's realised values in k dimensions; ``c`` the
    projection's normalisation constant (module docstring)."""

    clip: jax.Array
    p: jax.Array
    p_out: jax.Array
    gamma: jax.Array
    q: jax.Array
    log_q: jax.Array
    log_1mq: jax.Array
    m: jax.Array
    ea2: jax.Array
    c: jax.Array
    norm_bound: jax.Array
    norm_excess: jax.Array
    dim: int = dataclasses.field(metadata=dict(static=True))
    k: int = dataclasses.field(metadata=dict(static=True))
    fast: bool = dataclasses.field(metadata=dict(static=True))

    @property
    def padded_dim(self) -> int:
        """d' = 2^⌈log₂ d⌉ for the Hadamard transform (d for Gaussian W)."""
        return _pow2(self.dim) if self.fast else self.dim

    @property
    def floats_sent(self) -> int:
        """Floats one client sends: k direction coordinates and the norm (plus a seed)."""
        return self.k + 1

    @property
    def seed_bits(self) -> int:
        """Bits of the projection seed sent with the report (a threefry key: 64)."""
        return 64


def _pow2(d: int) -> int:
    return 1 << max(0, (int(d) - 1).bit_length())


# ---------------------------------------------------------------------------- host maths


def chi_mean(k: int) -> float:
    """``E‖y‖`` for ``y ~ N(0, I_k/k)``: ``√(2/k)·Γ((k+1)/2)/Γ(k/2)``."""
    return math.sqrt(2.0 / k) * math.exp(math.lgamma((k + 1) / 2.0) - math.lgamma(k / 2.0))


def fpc(dim: int, k: int) -> float:
    """``f = (d' − k)/(k(d' − 1))`` of the subsampled Hadamard transform (module docstring)."""
    dp = _pow2(dim)
    return (dp - k) / (k * (dp - 1)) if dp > 1 else 0.0


def _direction_factor(ea2: float, dim: int, k: int, fast: bool) -> float:
    """``E‖Wᵀ V‖²`` summed over the d output coordinates for a unit input direction: the
    factor that multiplies ``E[r̂²]/(m²c²)`` in the total second moment."""
    if fast:   # Σ_{i ≤ d} (1 + (σ_α² − 1)(u_i² + (1 − u_i²)f)) with Σ u_i² = 1
        f = fpc(dim, k)
        return dim + (ea2 - 1.0) * (1.0 + (dim - 1) * f)
    return ea2 + (dim - 1) * (ea2 + k - 1) / k


def norm_constant(dim: int, k: int, fast: bool) -> float:
    """The decoder's ``c``: ``E‖Wu‖`` exactly (Gaussian W) or ``1 − f/4`` (Hadamard)."""
    return 1.0 - fpc(dim, k) / 4.0 if fast else chi_mean(k)


def constants(*, epsilon: float, dim: int, k: int | None = None, clip: float = 1.0,
              norm_epsilon=None, fast: bool = False) -> dict:
    """Host calibration (float64): the ε split minimising the decoded total variance at
    ``‖x‖ = C``, PrivUnitG's realised constants in k dimensions and the guarantee they
    deliver (:func:`privunitg.realise`), the projection constant ``c``."""
    name = NAMES[int(bool(fast))]
    eps = rz.check_epsilon(epsilon)
    d = rz.check_dim(dim, MIN_K, name)
    if k is None:       # the paper's k = 1,000, or the whole (padded) dimension below it
        k = min(DEFAULT_K, _pow2(d) if fast else d)
    k = rz.check_dim(k, MIN_K, name, name="k (projection_dim)")
    c = rz.check_clip(clip)
    if k > (_pow2(d) if fast else d):
        raise rz.LdpsimError(f"k must be <= {'the padded dimension ' if fast else 'dim '}"
                             f"{_pow2(d) if fast else d} for {name}; got {k}")

    def dir_for(eps_dir):
        def obj(a, b):
            kk = pg.direction_constants(a, b)
            return math.log(_direction_factor(kk["ea2"], d, k, fast)) - 2 * math.log(kk["m"])

        e0, e1 = best_split(eps_dir, obj)
        return e0, e1, pg.direction_constants(e0, e1)

    def worst(er):
        kk = dir_for(eps - er)[2]
        b = rz.signed_scalar_bound(c, er)
        return (math.log((b * b + 3 * c * c) / 4) + math.log(_direction_factor(kk["ea2"], d, k, fast))
                - 2 * math.log(kk["m"]))

    er = split_epsilon(eps, norm_epsilon, worst)
    e0, e1, kk = dir_for(eps - er)
    out = pg.realise(dict(kk, clip=c, dim=k, epsilon=eps, eps_p=e0, eps_cap=e1, eps_norm=er))
    cn = norm_constant(d, k, fast)
    b = out["norm_bound"]
    worst_total = ((b * b + 3 * c * c) / 4 * _direction_factor(out["ea2"], d, k, fast)
                   / (out["m"] * cn) ** 2 - c * c)
    return dict(out, k=k, dim=d, c=cn, fast=bool(fast), name=name,
                worst_total_variance=worst_total,
                privunitg_dim_delta=out["delta_real"])


# ------------------------------------------------------------------------- projections


def _block_rows(dim: int, k: int) -> int:
    return max(1, min(k, BLOCK_ELEMENTS // max(dim, 1)))


def _gauss_blocks(seed: jax.Array, dim: int, k: int):
    b = _block_rows(dim, k)
    n = -(-k // b)
    scale = np.float32(1.0 / math.sqrt(k))

    def block(i):
        return jax.random.normal(jax.random.fold_in(seed, i), (b, dim), jnp.float32) * scale

    return b, n, block


def gaussian_project(seed: jax.Array, u: jax.Array, k: int) -> jax.Array:
    """``W u`` for ``W`` with i.i.d. N(0, 1/k) entries from ``seed``, rows generated in
    blocks inside a scan (row block i from ``fold_in(seed, i)``)."""
    d = u.shape[0]
    b, n, block = _gauss_blocks(seed, d, k)

    def step(_, i):
        return None, block(i) @ u

    _, ys = jax.lax.scan(step, None, jnp.arange(n))
    return ys.reshape(n * b)[:k]


def gaussian_backproject(seed: jax.Array, v: jax.Array, dim: int) -> jax.Array:
    """``Wᵀ v`` for the ``W`` of :func:`gaussian_project` (same seed, same blocks)."""
    k = v.shape[0]
    b, n, block = _gauss_blocks(seed, dim, k)
    vb = jnp.pad(v, (0, n * b - k)).reshape(n, b)

    def step(acc, i):
        return acc + vb[i] @ block(i), None

    out, _ = jax.lax.scan(step, jnp.zeros((dim,), jnp.float32), jnp.arange(n))
    return out


def fwht(x: jax.Array) -> jax.Array:
    """Unnormalised fast Walsh–Hadamard transform of a vector of length 2^a (Sylvester
    order: ``H_{2n} = [[H_n, H_n], [H_n, −H_n]]``); the shared implementation is
    :func:`ldpsim._src.privacy.hadamard.fwht_unnormalised`."""
    return fwht_unnormalised(x)


def _srht_parts(seed: jax.Array, dim: int, k: int):
    """The signs ``D`` and the k rows ``S`` of the seed's randomized Hadamard projection.

    One 32-bit word per padded coordinate: its lowest bit is the sign, its top 23 bits the
    coordinate's priority, and ``S`` is the k coordinates of largest priority (``lax.top_k``;
    the bits are independent, so ``D`` and ``S`` are). Priorities are i.i.d. uniform, so ``S``
    is a uniform k-subset except when two priorities tie across the cut, where ``top_k`` keeps
    the lower index: probability ≈ d'/2²³ per draw (0.8 % at d' = 2¹⁶) of moving one row,
    which changes no row's inclusion probability by more than about 2⁻²³·d'/k relative. The
    projection is public randomness: privacy holds for every fixed ``W``, so this touches the
    utility analysis only, and at float32's own resolution. (A sort-based exact draw,
    ``jax.random.choice(replace=False)``, costs 20× more: 46 against 2.5 CPU-ms per client at
    d' = 2¹⁶.)
    """
    dp = _pow2(dim)
    bits = sampling.random_bits(jax.random.fold_in(seed, 0), (dp,))
    signs = jnp.where((bits & 1) == 1, np.float32(1.0), np.float32(-1.0))
    priority = jax.lax.bitcast_convert_type((bits >> 9) | np.uint32(0x3F800000), jnp.float32)
    rows = jax.lax.top_k(priority, k)[1]
    return dp, signs, rows


def hadamard_project(seed: jax.Array, u: jax.Array, k: int) -> jax.Array:
    """``W u = √(d'/k)·(H D u)_S`` (``u`` padded to d', H orthonormal)."""
    d = u.shape[0]
    dp, signs, rows = _srht_parts(seed, d, k)
    z = fwht(signs * jnp.pad(u, (0, dp - d)))
    return z[rows] * np.float32(1.0 / math.sqrt(k))       # √(d'/k)/√d' = 1/√k


def hadamard_backproject(seed: jax.Array, v: jax.Array, dim: int) -> jax.Array:
    """``Wᵀ v`` (first d coordinates) for the ``W`` of :func:`hadamard_project`."""
    k = v.shape[0]
    dp, signs, rows = _srht_parts(seed, dim, k)
    full = jnp.zeros((dp,), jnp.float32).at[rows].set(v)
    return (signs * fwht(full))[:dim] * np.float32(1.0 / math.sqrt(k))


def project(seed: jax.Array, u: jax.Array, params: ProjUnitParams) -> jax.Array:
    """``W u`` (float32[k]) for the client's projection seed."""
    f = hadamard_project if params.fast else gaussian_project
    return f(seed, u, params.k)


def backproject(seed: jax.Array, v: jax.Array, params: ProjUnitParams) -> jax.Array:
    """``Wᵀ v`` (float32[d]) for the same seed."""
    f = hadamard_backproject if params.fast else gaussian_backproject
    return f(seed, v, params.dim)


def projection_seed(key: jax.Array) -> jax.Array:
    """The projection's seed of a client key (what the report carries: a threefry key's
    two uint32 words; typed ``jax.random.key`` and legacy ``PRNGKey`` keys give the same)."""
    return jax.random.key_data(rz.subkey(key, TAG_PROJECTION))


def _seed_key(seed: jax.Array) -> jax.Array:
    return jax.random.wrap_key_data(jnp.asarray(seed, jnp.uint32))


# --------------------------------------------------------------------------- randomizer


def privatize_direction(key: jax.Array, w: jax.Array, r: jax.Array,
                        params: ProjUnitParams) -> tuple[jax.Array, jax.Array]:
    """PrivUnitG's draws on the k-dimensional unit vector ``w`` and norm ``r``:
    ``(V float32[k], r̂)`` (the same draws and keys as
    :func:`ldpsim._src.privacy.randomizers.privunitg.privatize`)."""
    r_hat = rz.signed_scalar(rz.subkey(key, rz.TAG_NORM), r, params.clip, params.norm_bound,
                              params.norm_excess)
    upper = ~rz.bernoulli(rz.subkey(key, rz.TAG_CAP), params.p_out)
    alpha = pg.sample_alpha(rz.subkey(key, rz.TAG_ACCEPT), upper, params)
    g = sampling.normal_like(rz.subkey(key, rz.TAG_DIRECTION), w, impl=p2.DIRECTION_IMPL)
    return g + (alpha - jnp.vdot(g, w)) * w, r_hat


def privatize(key: jax.Array, update, params: ProjUnitParams) -> Report:
    """One client's report ``{"direction": V (float32[k]), "norm": r̂, "seed": uint32[2]}``."""
    flat, clipped, norm, release_norm, was_clipped, finite, _ = rz.clip_flat(update, params.clip)
    if flat.shape[0] != params.dim:
        raise rz.LdpsimError(f"update has {flat.shape[0]} coordinates; these "
                             f"{NAMES[int(params.fast)]} params are for dim {params.dim}")
    u, r = _direction(flat)
    seed = projection_seed(key)
    w, _ = _direction(project(_seed_key(seed), u, params))
    v, r_hat = privatize_direction(key, w, r, params)
    return Report(report={"direction": v, "norm": r_hat, "seed": seed}, clipped=clipped,
                  norm=norm, release_norm=release_norm, was_clipped=was_clipped, finite=finite)


def decode(report, params: ProjUnitParams, like=None):
    """``r̂·Wᵀ V/(m·c)`` with ``W`` rebuilt from the report's seed (a pytree like ``like``)."""
    back = backproject(_seed_key(report["seed"]), report["direction"], params)
    return rz.unravel_like(back * (report["norm"] / (params.m * params.c)), like)


# ------------------------------------------------------------ ProjUnit's decoded law

#: ``simulation`` values of :func:`make`: the deployed report, or ProjUnit's decoded law.
SIMULATIONS = ("report", "law")


def privatize_law(key: jax.Array, update, params: ProjUnitParams) -> Report:
    """ProjUnit's decoded value drawn from its exact law, in O(k + d) (Gaussian ``W`` only).

    For Gaussian ``W`` (i.i.d. ``N(0, 1/k)`` entries) and a unit ``u``, ``y = Wu ~ N(0, I_k/k)``
    whatever ``u`` is, and ``W_⊥ = W(I − uuᵀ)`` is independent of ``y``. The client's
    PrivUnitG report ``V`` is a function of ``w = y/‖y‖`` and its own coins, and the server's
    ``WᵀV = u·⟨y, V⟩ + W_⊥ᵀV`` where, given ``V``, ``W_⊥ᵀV ~ N(0, ‖V‖²/k·(I − uuᵀ))``. So

        x̂ = r̂/(m·c) · (u·⟨y, V⟩ + ‖V‖/√k · (I − uuᵀ)g),   g ~ N(0, I_d),

    has exactly the law of :func:`decode` ∘ :func:`privatize`, with ``V`` and ``r̂`` drawn by
    the same float32 PrivUnitG code on a unit vector (so the printed guarantee is the same),
    without the two k × d matrices (2.3 CPU-s per client at d = 61,706, k = 1,000). The
    "report" is the decoded vector: what the client would send is not materialised, so
    audits and attacks on the message use :func:`privatize`. Tested against the deployed
    path (tests/privacy/test_projunit.py).
    """
    if params.fast:
        raise rz.LdpsimError("the decoded-law simulation is ProjUnit's (Gaussian W); "
                             "FastProjUnit's randomized Hadamard W is not rotation invariant")
    flat, clipped, norm, release_norm, was_clipped, finite, _ = rz.clip_flat(update, params.clip)
    if flat.shape[0] != params.dim:
        raise rz.LdpsimError(f"update has {flat.shape[0]} coordinates; these projunit params "
                             f"are for dim {params.dim}")
    u, r = _direction(flat)
    pkey = rz.subkey(key, TAG_PROJECTION)
    inv_sqrt_k = np.float32(1.0 / math.sqrt(params.k))
    y = sampling.normal_like(jax.random.fold_in(pkey, 0), jnp.zeros((params.k,), jnp.float32),
                             impl=p2.DIRECTION_IMPL) * inv_sqrt_k
    w, _ = _direction(y)
    v, r_hat = privatize_direction(key, w, r, params)
    g = sampling.normal_like(jax.random.fold_in(pkey, 1), flat, impl=p2.DIRECTION_IMPL)
    perp = g - jnp.vdot(u, g) * u
    back = u * jnp.vdot(y, v) + perp * (jnp.linalg.norm(v) * inv_sqrt_k)
    out = back * (r_hat / (params.m * params.c))
    return Report(report={"decoded": out}, clipped=clipped, norm=norm,
                  release_norm=release_norm, was_clipped=was_clipped, finite=finite)


def decode_law(report, params: ProjUnitParams, like=None):
    """The decoded value :func:`privatize_law` drew (a pytree like ``like``)."""
    return rz.unravel_like(report["decoded"], like)


def mean(params: ProjUnitParams, update):
    """The clipped update: ``E[decode]`` exactly for ProjUnit; FastProjUnit's decoder is
    within the bias of the module docstring of it."""
    return rz.clip_flat(update, params.clip)[1]


def variance(params: ProjUnitParams, update):
    """Per-coordinate variance of :func:`decode` (module docstring): exact for ProjUnit,
    FastProjUnit's formula otherwise."""
    flat, *_, unravel = rz.clip_flat(update, params.clip)
    u, r = _direction(flat)
    er2 = rz.signed_scalar_second_moment(r, params.clip, params.norm_bound)
    u2 = u * u
    if params.fast:
        f = np.float32(fpc(params.dim, params.k))
        second = 1.0 + (params.ea2 - 1.0) * (u2 + (1.0 - u2) * f)
    else:
        second = params.ea2 * u2 + (params.ea2 + (params.k - 1)) * (1.0 - u2) / params.k
    return unravel(er2 / jnp.square(params.m * params.c) * second - flat * flat)


def total_variance_formula(params: ProjUnitParams, norm: float) -> float:
    """Host float64 ``E‖x̂ − E x̂‖²`` for an input of norm ``norm`` (the direction does not
    enter): ``E[r̂²]/(m²c²)·F − ρ²`` with F of the module docstring."""
    c, b = float(params.clip), float(params.norm_bound)
    r = min(max(float(norm), 0.0), c)
    er2 = (b * b - (2 * r - c) ** 2) / 4 + r * r
    fac = _direction_factor(float(params.ea2), params.dim, params.k, params.fast)
    return er2 / (float(params.m) * float(params.c)) ** 2 * fac - r * r


def log_likelihood_ratio(report, params: ProjUnitParams, x1, x0) -> jax.Array:
    """``log f(report | x1) − log f(report | x0)`` of the realised ideal law at the float32
    parameters, for one report (jittable; W from the report's seed): the direction's density
    is ``φ_k(v)·c(⟨v, w⟩)`` with ``c = p/q`` on ``⟨v, w⟩ ≥ γ`` and ``(1 − p)/(1 − q)`` off it
    (so only the cap sides of ``⟨V, w₁⟩`` and ``⟨V, w₀⟩`` enter), and the norm coin's two
    values. The audit's sufficient statistic for any pair (the worst pair: ``x1 = C·u``,
    ``x0 = −10⁻⁶·C·u``, whose projections are opposite: w₀ = −w₁)."""
    seed = _seed_key(report["seed"])
    p = params.p
    lw_in = jnp.log(p) - params.log_q
    lw_out = jnp.log1p(-p) - params.log_1mq

    def side(x):
        flat = rz.clip_flat(x, params.clip)[0]
        u, r = _direction(flat)
        w, _ = _direction(project(seed, u, params))
        t = jnp.vdot(report["direction"], w)
        c, b, ex = params.clip, params.norm_bound, params.norm_excess
        r = jnp.clip(r, 0.0, c)
        p_high = 1.0 - (ex + 2.0 * (c - r)) / (2.0 * b)
        high = report["norm"] >= 0.5 * c
        return jnp.where(t >= params.gamma, lw_in, lw_out) + jnp.log(
            jnp.where(high, p_high, 1.0 - p_high))

    return side(x1) - side(x0)


def make(*, epsilon: float, dim: int, k: int | None = None, clip: float = 1.0,
         norm_epsilon=None, fast: bool = False, simulation: str = "report") -> LocalMechanism:
    """ProjUnit (``fast=False``, Gaussian W) or FastProjUnit (``fast=True``, randomized
    Hadamard) with PrivUnitG and a private norm in k dimensions, calibrated to ideal pure
    ε-LDP; prints the (ε', δ') PrivUnitG's float32 realisation delivers in k dimensions.

    ``simulation="law"`` (ProjUnit only) draws each client's decoded value from its exact
    law (:func:`privatize_law`: O(k + d) instead of two k × d Gaussian matrices) for
    training at scale; ``"report"`` (the default) runs the deployed client and server.

    Raises:
        LdpsimError: ε ≤ 0, non-finite or beyond float32 PrivUnitG's range; ``k`` < 2 or
            above the (padded) dimension; ``dim`` < 2; clip ≤ 0; ``simulation`` not one of
            :data:`SIMULATIONS`, or ``"law"`` with ``fast=True``.
    """
    if simulation not in SIMULATIONS:
        raise rz.LdpsimError(f"projunit simulation must be one of {SIMULATIONS}, "
                             f"got {simulation!r}")
    if simulation == "law" and fast:
        raise rz.LdpsimError("simulation='law' is ProjUnit's (Gaussian projection); "
                             "FastProjUnit's randomized Hadamard projection has no such "
                             "shortcut (and needs none: O(d log d) per client)")
    kk = constants(epsilon=epsilon, dim=dim, k=k, clip=clip, norm_epsilon=norm_epsilon,
                   fast=fast)
    f = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    params = ProjUnitParams(clip=f(kk["clip"]), p=f(kk["p"]), p_out=f(kk["p_out"]),
                            gamma=f(kk["gamma"]), q=f(kk["q"]), log_q=f(kk["log_q"]),
                            log_1mq=f(kk["log_1mq"]), m=f(kk["m"]), ea2=f(kk["ea2"]),
                            c=f(kk["c"]), norm_bound=f(kk["norm_bound"]),
                            norm_excess=f(kk["norm_excess"]), dim=kk["dim"], k=kk["k"],
                            fast=bool(fast))
    proj = ("randomized Hadamard (signs, FWHT on d' = %d, %d rows without replacement)"
            % (_pow2(kk["dim"]), kk["k"]) if fast
            else "Gaussian N(0, 1/k) projection in row blocks")
    line = (f"float32 {kk['name']}: public {proj} keyed by the client's seed (post-processing "
            f"of public randomness), then float32 PrivUnitG in k = {kk['k']} dimensions: alpha "
            f"by a log-space inverse CDF on a 96-bit uniform (TV 2^-96), g from sampling "
            f"'{p2.DIRECTION_IMPL}' on k coordinates, 32-bit coins; delta' = "
            f"min((1 + e^eps')*TV, (p/q)*kappa), TV = {kk['tv']:.3g}, kappa = "
            f"{kk['excess']:.3g}; float32 arithmetic and output grid idealised (Mironov 2012)")
    if simulation == "law":
        line += ("; simulated: each client's decoded value drawn from ProjUnit's exact "
                 "decoded law (the same float32 PrivUnitG draws; W not materialised)")
        pair = (privatize_law, decode_law)
    else:
        pair = (privatize, decode)
    mech = p2._mechanism(kk["name"], params, kk, *pair, mean, variance, line)
    return mech._replace(unbiased=not fast)


def projunit(*, epsilon: float, dim: int, k: int | None = None, clip: float = 1.0,
             norm_epsilon=None, simulation: str = "report") -> LocalMechanism:
    """ProjUnit (Asi, Feldman, Nelson, Nguyen & Talwar 2023): a public Gaussian projection
    of the clipped update to ``k`` dimensions (default ``min(1000, dim)``), keyed by a seed
    the client sends, then PrivUnitG with a private norm there; the server back-projects.
    Calibrated to pure ε-LDP ideally; the guarantee its float32 realisation delivers is
    printed. A client sends ``k + 1`` floats and a seed instead of ``dim`` floats.

    Args:
      epsilon: the ε of one release (> 0).
      dim: the update's dimension d (≥ 2).
      k: the projection dimension (2 ≤ k ≤ d; ``projection_dim`` in
        ``ldpsim.mechanism.make`` and ``--projection-dim`` on the command line).
      clip: the L2 bound C the update is clipped to.
      norm_epsilon: the part of ε spent on the norm (default: the split minimising the
        decoded variance at ‖x‖ = C).
      simulation: ``"report"`` (the deployed client and server) or ``"law"`` (each
        client's decoded value drawn from its exact law in O(k + d), for training at scale).
    """
    return make(epsilon=epsilon, dim=dim, k=k, clip=clip, norm_epsilon=norm_epsilon,
                fast=False, simulation=simulation)


def fastprojunit(*, epsilon: float, dim: int, k: int | None = None, clip: float = 1.0,
                 norm_epsilon=None) -> LocalMechanism:
    """FastProjUnit (Asi et al. 2023): ProjUnit with a randomized Hadamard projection
    (random signs, a fast Walsh–Hadamard transform on d padded to a power of two, ``k``
    rows without replacement), O(d log d) per client instead of O(k d). Arguments as
    :func:`projunit` (``k`` ≤ the padded dimension) but no ``simulation``: the deployed
    client is already cheap, and has no exact-law shortcut; pure ε-LDP ideally, the float32
    guarantee printed. Not exactly unbiased: the relative bias of the decoded mean along
    the input is within about 1/(4k) (proven), the component orthogonal to it measured
    (docs/algorithms.md)."""
    return make(epsilon=epsilon, dim=dim, k=k, clip=clip, norm_epsilon=norm_epsilon, fast=True)



# ------------------------------------------------------------------------------ registry

def audit_game(*, epsilon: float, dim: int, clip: float = 1.0, fast: bool = False,
               k: int | None = None) -> tuple:
    """The distinguishing game at the worst-case pair ``x1 = C·e₁`` against ``x0 =
    −10⁻⁶·C·e₁`` (opposite projected directions, norm C against ≈ 0: both parts of the ε
    split are exercised), scored by the exact :func:`log_likelihood_ratio`. ``k`` defaults
    to ``max(2, dim // 4)`` (a small audit dimension keeps the projection's share of the
    cost low). Returns ``(mechanism, x0, x1, score, local, what)`` as
    :func:`ldpsim.audit.report_game`."""
    local = make(epsilon=epsilon, dim=dim, k=k or max(MIN_K, dim // 4), clip=clip, fast=fast)
    params = local.params

    def mech(key, x):
        return local.privatize(key, x, params).report

    x1, x0 = rz.axis(dim, clip), rz.axis(dim, -rz.AUDIT_TINY * clip)

    def score(report):
        return log_likelihood_ratio(report, params, x1, x0).astype(jnp.float32)

    what = ("the exact log-likelihood ratio (cap sides of the report against both inputs' "
            "projected directions, from the report's seed, and the norm's value)")
    return mech, x0, x1, score, local, what


@dataclasses.dataclass(frozen=True)
class _Registered:
    """One registry entry of this module (ProjUnit or FastProjUnit): the interface the
    registry reads, with the run option ``projection_dim`` as the paper's ``k``."""

    fast: bool

    def make(self, *, epsilon: float, dim: int, clip: float = 1.0, norm_epsilon=None,
             projection_dim: int | None = None,
             projunit_simulation: str = "report") -> LocalMechanism:
        return make(epsilon=epsilon, dim=dim, k=projection_dim, clip=clip,
                    norm_epsilon=norm_epsilon, fast=self.fast,
                    simulation=projunit_simulation or "report")

    def audit_game(self, *, epsilon: float, dim: int, clip: float = 1.0) -> tuple:
        return audit_game(epsilon=epsilon, dim=dim, clip=clip, fast=self.fast)

    # the module's functions (a class body reads the globals of the same names)
    privatize = staticmethod(privatize)
    decode = staticmethod(decode)
    mean = staticmethod(mean)
    variance = staticmethod(variance)


#: The registry's implementations (``ldpsim._src.privacy.randomizers.projunit:PROJUNIT`` and
#: ``…:FASTPROJUNIT``).
PROJUNIT, FASTPROJUNIT = _Registered(fast=False), _Registered(fast=True)
