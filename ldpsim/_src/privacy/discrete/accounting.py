"""Exact accounting of the distributed discrete Gaussian and Skellam mechanisms (no JAX).

What is accounted: each round every one of ``n`` clients clips its update to L2 norm ``C``,
rotates it (:mod:`ldpsim._src.privacy.hadamard`, dimension padded to ``D``), scales it by ``1/γ`` (``γ`` the
granularity), rounds it conditionally to an integer vector of norm ``≤ Δ₂``
(:mod:`.rounding`), adds integer noise and wraps modulo ``2^b``; the server learns only the sum
modulo ``2^b``, a post-processing of the integer sum. For one client the round is therefore the
integer sum ``Σ x̃ᵢ + Z`` with ``Z`` the survivors' summed noise, against a change of the client's
integer vector of L2 norm ``≤ Δ₂`` (add/remove) or ``≤ 2Δ₂`` (replace one, the default, as in
docs/privacy_sharp_edges.md §1) and L1 norm ``≤ Δ₂²`` (resp. ``2Δ₂²``; integer vectors have
``‖v‖₁ ≤ ‖v‖₂²``) or ``√D`` times the L2 bound.

* **Discrete Gaussian** (Kairouz, Liu & Steinke, ICML 2021, arXiv:2102.06387, Proposition 14,
  the general form of their Theorem 1): for ``N`` independent ``N_Z(0, σ²)`` summands per
  coordinate (``σ ≥ 1/2``) and all ``α ≥ 1``,
  ``D_α ≤ min{ α/2·Δ₂²/(Nσ²) + τD,  α/2·(Δ₂²/(Nσ²) + 2τΔ₁/(√N σ) + τ²D),  α/2·(Δ₂/(√N σ) + τ√D)² }``,
  ``τ = 10·Σ_{k=1}^{N−1} exp(−2π²σ²·k/(k+1))``. ``N`` counts the survivors (the dropped clients'
  noise is not in the sum; the protected client's own share counts, the honest-client assumption of
  the ``distributed`` mode, docs/privacy_sharp_edges.md §5) times the sampler's pieces, and ``σ`` is
  the parameter of the law one piece's table is built for (:func:`.table.table_plan`: the
  requested σ itself when one table holds it).
* **Skellam** (Agarwal, Kairouz & Liu, NeurIPS 2021, arXiv:2110.04995, Theorem 3.5): for
  central noise ``Sk`` of variance ``μ`` per coordinate and integer ``α > 1``,
  ``D_α ≤ αΔ₂²/(2μ) + min{ ((2α − 1)Δ₂² + 6Δ₁)/(4μ²),  3Δ₁/(2μ) }``.
  The formula is the ideal Skellam law's (``μ`` the sum of the survivors' variances).

**What runs is covered.** Both mechanisms' noise is drawn by the table sampler
(:func:`.samplers.table_sample`), whose draw is within total variation ``tv_bound``
(:attr:`.table.TablePlan.tv_bound`, proven, ≈ 2⁻¹⁰⁰) of the ideal law per coordinate; by the
coupling bound of docs/privacy_sharp_edges.md §4 the ``n·D·rounds`` draws add at most
``(1 + e^ε)·n·D·rounds·tv_bound`` to δ, which :func:`discrete_epsilon` charges for both.

Rounds compose by adding RDP; (ε, δ) is dp_accounting's conversion
(``dp_accounting.rdp.compute_epsilon``, Canonne, Kamath & Steinke 2020 / Asoodeh et al.).

**Amplification by cohort sampling** (``sampling_rate = q < 1``): each round's cohort is a
Poisson sample of the population (every client independently with probability ``q = m/N``).
dp_accounting amplifies only Gaussian events, so the subsampled curve is Zhu & Wang, "Poisson
Subsampled Rényi Differential Privacy", ICML 2019, Theorem 6, valid for **any** mechanism with
RDP curve ``ε(·)`` at integer orders ``α ≥ 2``:
``ε'(α) ≤ 1/(α−1) · log{ (1−q)^(α−1)(αq − q + 1) + C(α,2) q² (1−q)^(α−2) e^{ε(2)}
+ 3 Σ_{ℓ=3}^{α} C(α,ℓ) q^ℓ (1−q)^(α−ℓ) e^{(ℓ−1)ε(ℓ)} }`` (:func:`poisson_subsampled_rdp`),
applied to the round's curve above. The guarantee is then the one Poisson sampling gives:
neighbouring populations differ by one client (added or removed); the round's curve is taken
under ``neighbours`` (``"replace"``'s doubled sensitivity is the conservative choice, and
``"add-remove"`` the matching one). Without sampling, ``"add-remove"`` is the relation the
RDP curve covers only in its *zero-out* form: one client's update replaced by zero while its
noise share stays in the sum (under true add/remove the share goes too, and the sum's
variance changes by a factor s/(s−1), which the curve does not cover); the CLI names it so.
With Poisson sampling the conservative noise floor below is what the analysis leans on.
The noise is counted from ``survivors`` clients (default the
expected cohort ``clients``): a deployment that samples must set it to the cohort size it can
guarantee (e.g. a lower quantile of the Binomial cohort, less dropout).

The modular wrap: per coordinate the integer sum is the rotated signal (sub-Gaussian with
variance proxy ``(nC/γ)²/D`` over the random signs, Hoeffding), plus the rounding errors (mean
zero, each in an interval of length 1: proxy ``1/4``, Hoeffding's lemma; conditioning on
acceptance multiplies the moment generating function by at most ``1/(1 − β)`` per client), plus
the noise (a discrete Gaussian of variance ``σ²`` is ``σ²``-sub-Gaussian, Canonne, Kamath &
Steinke 2020, Corollary 9; a Skellam's log-MGF is ``μ(cosh λ − 1)`` exactly). A Chernoff bound
with the best ``λ`` and a union bound over the ``D`` coordinates give :func:`wrap_probability`
(the analysis of Kairouz et al. 2021, §4.2, with the conditioning made explicit).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import numpy as np
from dp_accounting.rdp import rdp_privacy_accountant as _rdp
from scipy import optimize, special

from ldpsim._src._checks import (
    LdpsimError,
    check_choice,
    check_open_unit,
    check_positive,
    check_positive_int,
)
from ldpsim._src.privacy.discrete.table import noise_table, table_plan

__all__ = [
    "MECHANISMS", "DiscreteMechanism", "BitsRow", "BitsReport",
    "norm_check_slack", "norm_check_threshold", "rounding_norm_bound", "integer_sensitivity",
    "ddg_tau", "ddg_rdp", "skellam_rdp", "gaussian_rdp", "rdp_to_epsilon",
    "discrete_rdp", "discrete_epsilon", "wrap_probability", "wrap_mse_bound", "check_wrap",
    "solve_noise",
    "bits_needed", "cohort_floor", "cohort_ceiling", "poisson_subsampled_rdp", "SUBSAMPLED_ORDERS", "gaussian_central_variance",
]

MECHANISMS = ("ddg", "skellam")
NEIGHBOURS = ("replace", "add-remove")
_U = 2.0**-24
DDG_ORDERS = tuple([1.0 + x / 20.0 for x in range(1, 100)] + list(range(6, 64))
                   + [64, 80, 96, 128, 192, 256, 512, 1024])
SKELLAM_ORDERS = tuple(list(range(2, 64)) + [64, 80, 96, 128, 192, 256, 512, 1024])
SUBSAMPLED_ORDERS = tuple(list(range(2, 65)) + [80, 96, 128, 160, 192, 256])


# --------------------------------------------------------------------------- rounding bounds

def norm_check_slack(dim: int) -> float:
    """``η = γ_{D+3}``: relative error of the float32 squared norm of ``D`` int32 entries."""
    k = int(dim) + 3
    if k * _U >= 0.5:
        raise LdpsimError(f"dimension {dim} too large for a float32 norm check")
    return k * _U / (1 - k * _U)


def norm_check_threshold(norm_bound: float, dim: int) -> float:
    """The float32 threshold on the computed squared norm that proves ``‖x̃‖₂ ≤ norm_bound``."""
    b = check_positive("norm_bound", norm_bound)
    val = b * b * (1 - norm_check_slack(dim)) * (1 - 1e-12)
    f = np.float32(val)
    if float(f) > val:
        f = np.nextafter(f, np.float32(0))
    return float(f)


def rounding_norm_bound(c: float, dim: int, beta: float = 2.0**-20) -> float:
    """``Δ₂``: the norm bound enforced on the rounded vector of an input of norm ``≤ c``.

    Kairouz et al. 2021 (Theorem 2 / Lemma 25): one randomized rounding of ``x ∈ R^D``,
    ``‖x‖₂ ≤ c``, exceeds ``√(c² + D/4 + √(2 ln(1/β))(c + √D/2))`` with probability ``≤ β`` and
    never exceeds ``c + √D``; the smaller, times ``√((1+η)/(1−η)·(1 + 2⁻²¹))`` for the float32 check
    (:mod:`.rounding`). ``beta = 0``: the deterministic bound.
    """
    c = check_positive("c", c)
    dim = check_positive_int("dim", dim)
    beta = float(beta)
    if not 0.0 <= beta < 1.0:
        raise LdpsimError(f"beta must be in [0, 1), got {beta!r}")
    det = c + math.sqrt(dim)
    if beta > 0:
        sq = c * c + dim / 4 + math.sqrt(2 * math.log(1 / beta)) * (c + math.sqrt(dim) / 2)
        det = min(det, math.sqrt(sq))
    eta = norm_check_slack(dim)
    return det * math.sqrt((1 + eta) / (1 - eta) * (1 + 2.0**-21))


def integer_sensitivity(norm_bound: float, dim: int, neighbours: str = "replace") -> tuple[float, float]:
    """``(Δ₂, Δ₁)`` of one client's integer vector (norm ``≤ norm_bound``) under ``neighbours``."""
    check_choice("neighbours", neighbours, NEIGHBOURS)
    b = float(norm_bound)
    sq = math.floor(b * b)                       # integer vectors: ‖v‖₁ ≤ ‖v‖₂² ≤ ⌊Δ²⌋
    if neighbours == "add-remove":
        return b, min(float(sq), math.sqrt(dim) * b)
    return 2 * b, min(2.0 * sq, 2 * math.sqrt(dim) * b)


# --------------------------------------------------------------------------- RDP formulas

def ddg_tau(sigma: float, summands: int) -> float:
    """``τ = 10·Σ_{k=1}^{N−1} exp(−2π²σ²k/(k+1))`` (Kairouz et al. 2021, Theorem 1)."""
    n = int(summands)
    if n <= 1:
        return 0.0
    s2 = float(sigma) ** 2
    if 10 * (n - 1) * math.exp(-math.pi**2 * s2) == 0.0:   # k/(k+1) ≥ 1/2: every term is 0
        return 0.0
    k = np.arange(1, n, dtype=np.float64)
    return float(10 * np.sum(np.exp(-2 * math.pi**2 * s2 * k / (k + 1))))


def ddg_rdp(orders: Sequence[float], *, l2: float, l1: float, sigma: float, summands: int,
            dim: int) -> np.ndarray:
    """RDP of the sum of ``summands`` i.i.d. ``N_Z(0, σ²)`` vectors (dimension ``dim``) against an
    integer shift of norms ``(l2, l1)``: Kairouz et al. 2021, Proposition 14 (module docstring)."""
    sigma = check_positive("sigma", sigma)
    if sigma < 0.5:
        raise LdpsimError(f"the discrete Gaussian bound needs sigma >= 1/2, got {sigma}")
    a = np.asarray(orders, dtype=np.float64)
    if np.any(a < 1):
        raise LdpsimError("RDP orders must be >= 1")
    n = check_positive_int("summands", summands)
    tau = ddg_tau(sigma, n)
    s = math.sqrt(n) * sigma
    r2, r1 = (l2 / s) ** 2, l1 / s
    t1 = a / 2 * r2 + tau * dim
    t2 = a / 2 * (r2 + 2 * r1 * tau + tau * tau * dim)
    t3 = a / 2 * (math.sqrt(r2) + math.sqrt(dim) * tau) ** 2
    return np.minimum(np.minimum(t1, t2), t3)


def skellam_rdp(orders: Sequence[int], *, l2: float, l1: float, variance: float) -> np.ndarray:
    """RDP of central Skellam noise of variance ``μ`` per coordinate against an integer shift of
    norms ``(l2, l1)``, integer orders ``α > 1``: Agarwal et al. 2021, Theorem 3.5."""
    mu = check_positive("variance", variance)
    a = np.asarray(orders, dtype=np.float64)
    if np.any(a <= 1) or np.any(a != np.round(a)):
        raise LdpsimError("the Skellam bound holds for integer orders > 1 only")
    lead = a * l2 * l2 / (2 * mu)
    return lead + np.minimum(((2 * a - 1) * l2 * l2 + 6 * l1) / (4 * mu * mu), 3 * l1 / (2 * mu))


def gaussian_rdp(orders: Sequence[float], *, l2: float, variance: float) -> np.ndarray:
    """``α·Δ²/(2σ²)``: the continuous Gaussian's RDP (Mironov 2017), the reference the discrete
    mechanisms approach."""
    return np.asarray(orders, dtype=np.float64) * l2 * l2 / (2 * float(variance))


def rdp_to_epsilon(orders: Sequence[float], rdp: Sequence[float], delta: float) -> float:
    """ε at ``δ`` of an RDP curve: dp_accounting's conversion (``rdp.compute_epsilon``)."""
    delta = check_open_unit("delta", delta)
    eps, _ = _rdp.compute_epsilon(np.asarray(orders, float), np.asarray(rdp, float), delta)
    return float(eps)


def poisson_subsampled_rdp(orders: Sequence[int], base_rdp, q: float) -> np.ndarray:
    """RDP at integer ``orders`` of a mechanism run on a Poisson sample (rate ``q``) of the data,
    from the mechanism's RDP ``base_rdp(ℓ)`` (a function of an integer array ``ℓ``, ``ε(ℓ) ≥ 0``):
    Zhu & Wang, ICML 2019, Theorem 6 (module docstring). ``q = 1`` returns ``base_rdp``."""
    q = float(q)
    if not 0.0 < q <= 1.0:
        raise LdpsimError(f"sampling_rate must be in (0, 1], got {q!r}")
    a = np.asarray(orders)
    if np.any(a < 2) or np.any(a != np.round(a)):
        raise LdpsimError("the subsampled RDP bound holds for integer orders >= 2 only")
    a = a.astype(np.int64)
    if q == 1.0:
        return np.asarray(base_rdp(a), np.float64)
    top = int(a.max())
    ell = np.arange(2, top + 1)
    eps = np.asarray(base_rdp(ell), np.float64)              # ε(ℓ), ℓ = 2..top
    lq, l1q = math.log(q), math.log1p(-q)
    al = a.ravel().astype(np.float64)[:, None]                 # orders, one row each
    j = np.arange(0, top + 1, dtype=np.float64)[None, :]       # ℓ = 0..top
    logc = special.gammaln(al + 1) - special.gammaln(j + 1) - special.gammaln(
        np.maximum(al - j, 0) + 1)
    epsj = np.concatenate([[0.0, 0.0], eps])[None, :]           # ε(ℓ), ℓ = 0..top
    body = logc + j * lq + (al - j) * l1q + np.where(j == 2, epsj, (j - 1) * epsj) + np.where(
        j >= 3, math.log(3), 0.0)
    body = np.where((j >= 2) & (j <= al), body, -np.inf)
    first = (al[:, 0] - 1) * l1q + np.log(al[:, 0] * q - q + 1)
    total = np.logaddexp(first, special.logsumexp(body, axis=1))
    return np.maximum(0.0, total / (al[:, 0] - 1)).reshape(a.shape)


# --------------------------------------------------------------------------- the mechanism

@dataclasses.dataclass(frozen=True)
class DiscreteMechanism:
    """One round's parameters (all in the client's units unless named integer).

    ``noise``: per client, in integer units — the discrete Gaussian's σ (``ddg``; the sampler
    realises ``σ̂ ≥ σ``) or the Skellam variance ``μ`` (``skellam``). ``dim``: the model's ``d``
    (padded to ``D``). ``granularity``: γ. ``clients``: ``n`` per round.
    """

    mechanism: str
    clip: float
    granularity: float
    noise: float
    clients: int
    dim: int
    bits: int = 32
    beta: float = 2.0**-20
    neighbours: str = "replace"

    def __post_init__(self):
        check_choice("mechanism", self.mechanism, MECHANISMS)
        check_choice("neighbours", self.neighbours, NEIGHBOURS)
        check_positive("clip", self.clip)
        check_positive("granularity", self.granularity)
        check_positive("noise", self.noise)
        check_positive_int("clients", self.clients)
        check_positive_int("dim", self.dim)
        if not (isinstance(self.bits, int) and 2 <= self.bits <= 32):
            raise LdpsimError(f"bits must be an integer in [2, 32], got {self.bits!r}")
        if self.scaled_clip > 2.0**30 / 2:
            raise LdpsimError(f"granularity {self.granularity} too fine: clip/granularity = "
                              f"{self.scaled_clip:.3g} exceeds 2^29 (int32 rounding range)")

    @property
    def padded_dim(self) -> int:
        return 1 << (int(self.dim) - 1).bit_length()

    @property
    def scaled_clip(self) -> float:
        """``c = C/γ``: the clip in integer units."""
        return self.clip / self.granularity

    @property
    def norm_bound(self) -> float:
        """``Δ₂`` of one client's rounded vector (:func:`rounding_norm_bound`)."""
        return rounding_norm_bound(self.scaled_clip, self.padded_dim, self.beta)

    @property
    def plan(self):
        """The table sampler's plan for this mechanism's noise (:func:`.table.table_plan`)."""
        return table_plan(self.mechanism, float(self.noise))

    @property
    def noise_proxy(self) -> float:
        """The per-client noise's sub-Gaussian variance proxy (integer units):
        ``pieces·σ_piece²`` for ``ddg`` (``N_Z(0, σ²)`` is ``σ²``-sub-Gaussian, Canonne, Kamath
        & Steinke 2020, Corollary 9), ``μ`` for ``skellam`` (whose log-MGF is used exactly)."""
        plan = self.plan
        if self.mechanism == "ddg":
            return plan.pieces * plan.piece * plan.piece
        return float(self.noise)

    @property
    def client_variance(self) -> float:
        """The variance of the noise the sampler draws per client and coordinate (integer
        units), as a float: the table's exact variance (:attr:`.table.NoiseTable.variance`,
        from its integer masses) for a discrete Gaussian with σ < 8, where it is below σ²
        (0.215 at σ = 1/2); above, ``pieces·σ_piece²`` and ``μ`` for Skellam, which equal the
        table's exact variance to float64 precision (the truncation, the rounding and, for
        DDG, the ``O(σ⁴e^{−2π²σ²})`` deficit are below 10⁻²⁵ relative; tests compare). Cheap:
        a table is built only when it is tiny."""
        plan = self.plan
        if self.mechanism == "ddg" and plan.pieces == 1 and plan.piece < 8:
            return noise_table("ddg", float(self.noise)).total_variance
        return self.noise_proxy


def discrete_rdp(mech: DiscreteMechanism, survivors: int | None = None,
                 orders: Sequence[float] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(orders, RDP)`` of one round with ``survivors`` (default: all) clients' noise."""
    s = mech.clients if survivors is None else check_positive_int("survivors", survivors)
    if s > mech.clients:
        raise LdpsimError(f"survivors = {s} exceeds clients = {mech.clients}")
    l2, l1 = integer_sensitivity(mech.norm_bound, mech.padded_dim, mech.neighbours)
    if mech.mechanism == "ddg":
        plan = mech.plan
        o = np.asarray(orders if orders is not None else DDG_ORDERS, float)
        return o, ddg_rdp(o, l2=l2, l1=l1, sigma=plan.piece, summands=plan.summands(s),
                          dim=mech.padded_dim)
    o = np.asarray(orders if orders is not None else SKELLAM_ORDERS, float)
    return o, skellam_rdp(o, l2=l2, l1=l1, variance=s * mech.noise_proxy)


def discrete_epsilon(mech: DiscreteMechanism, delta: float, rounds: int = 1,
                     survivors: int | Sequence[int] | None = None,
                     sampling_rate: float | None = None) -> float:
    """ε at ``δ`` after ``rounds`` rounds (RDP composed), with ``survivors`` per round (one count,
    or one per round; default all clients). ``sampling_rate = q < 1``: each round's cohort is a
    Poisson sample of the population at rate ``q``, amplified by :func:`poisson_subsampled_rdp`
    (module docstring); ``None`` or 1: every round's guarantee counted in full (the default). For
    both mechanisms the table sampler's distance from the ideal law (total variation
    ``tv_bound`` per coordinate, :attr:`.table.TablePlan.tv_bound`; coupling bound
    ``(1 + e^ε)·TV`` over the ``n·D·rounds`` draws) must fit in ``10⁻⁶·δ``: ε is computed at
    ``δ(1 − 10⁻⁶)`` (``inf`` if it does not fit; it fits by ~15 orders of magnitude at the
    sizes planned)."""
    rounds = check_positive_int("rounds", rounds)
    if survivors is None or isinstance(survivors, (int, np.integer)):
        per = [survivors] * rounds
    else:
        per = list(survivors)
        if len(per) != rounds:
            raise LdpsimError(f"survivors has {len(per)} entries, rounds = {rounds}")
    q = 1.0 if sampling_rate is None else float(sampling_rate)
    if not 0.0 < q <= 1.0:
        raise LdpsimError(f"sampling_rate must be in (0, 1], got {sampling_rate!r}")
    total = None
    cache: dict = {}
    for s in per:
        if s not in cache:
            if q < 1.0:
                o = np.asarray(SUBSAMPLED_ORDERS, float)
                cache[s] = o, poisson_subsampled_rdp(
                    SUBSAMPLED_ORDERS, lambda ell, s=s: discrete_rdp(mech, s, ell)[1], q)
            else:
                cache[s] = discrete_rdp(mech, s)
        o, r = cache[s]
        total = r if total is None else total + r
    delta = check_open_unit("delta", delta)
    tv = mech.plan.tv_bound * mech.clients * mech.padded_dim * rounds
    slack = delta * 1e-6
    eps = rdp_to_epsilon(o, total, delta - slack)
    if tv * (1 + math.exp(min(eps, 700))) > slack:
        return math.inf
    return eps


def _noise_logmgf(mech: DiscreteMechanism, lam: float) -> float:
    var = mech.clients * mech.noise_proxy
    if mech.mechanism == "ddg":
        return lam * lam * var / 2
    if lam > 700:                     # cosh overflows; the tail bound there is void anyway
        return math.inf
    return var * (math.cosh(lam) - 1)


def _finite(x: float) -> float:
    """``x`` with ``inf`` replaced by ``1e300`` (an overflowed MGF: the minimiser must not see
    ``inf − inf``)."""
    return x if x < 1e300 else 1e300


#: The smallest wrap bound reported (and its log): smaller bounds are reported as this one.
_FLOOR = 1e-300
_LOG_FLOOR = math.log(_FLOOR)


def wrap_probability(mech: DiscreteMechanism, clients: int | None = None) -> float:
    """Upper bound on P[some coordinate of the round's integer sum leaves ``[−2^(b−1), 2^(b−1))``]
    (module docstring): ``min(1, 2D·(1−β)^(−n)·min_λ exp(λ²v/2 + log MGF_noise(λ) − λM))``,
    ``v = (nc)²/D + n/4``, ``M = 2^(b−1)``, for a sum of ``n = clients`` reports (default
    ``mech.clients``; a Poisson cohort's size varies: :func:`cohort_ceiling`). The bound
    increases with ``n``; bounds below 1e-300 are reported as 1e-300 (never 0: the noise is
    unbounded, so a wrap is never impossible)."""
    if clients is not None:
        mech = dataclasses.replace(mech, clients=check_positive_int("clients", clients))
    n, dim = mech.clients, mech.padded_dim
    m = 2.0 ** (mech.bits - 1)
    v = (n * mech.scaled_clip) ** 2 / dim + n / 4

    def log_tail(lam):
        return lam * lam * v / 2 + _noise_logmgf(mech, lam) - lam * m

    var_total = v + n * mech.client_variance
    lam0 = m / var_total
    res = optimize.minimize_scalar(lambda t: _finite(log_tail(math.exp(t))),
                                   bounds=(math.log(lam0) - 8, math.log(lam0) + 3),
                                   method="bounded")
    best = min(log_tail(lam0), float(res.fun))
    cond = -n * math.log1p(-mech.beta)
    log_p = math.log(2 * dim) + cond + best
    # below 1e-300 the bound is reported as 1e-300 (still an upper bound; exp would underflow
    # to 0, which would read as "never wraps", and an unbounded noise can always wrap)
    if log_p >= 0:
        return 1.0
    return math.exp(log_p) if log_p > _LOG_FLOOR else _FLOOR


def wrap_mse_bound(mech: DiscreteMechanism) -> float:
    """Upper bound on ``E‖w‖²``, ``w`` the error the modular wrap adds to the round's integer sum
    (``D`` coordinates, integer units; the decoded sum's error from the wrap is ``γ·U^T w``, of
    squared norm at most ``γ²‖w‖²``). Per coordinate the wrap changes ``T`` by a multiple of
    ``2^b`` only when ``|T| ≥ M = 2^(b−1)``, and then by at most ``2|T|``, so
    ``E w_j² ≤ 4·E[T² 1{|T| ≥ M}] = 4(M²·P[|T| ≥ M] + ∫_M^∞ 2t·P[|T| ≥ t] dt)``; with the
    Chernoff tail ``P[|T| ≥ t] ≤ 2(1−β)^(−n)·exp(g(λ) − λt)`` of :func:`wrap_probability`
    (``g`` the log-MGF bound of the signal, rounding and noise) this is
    ``8(1−β)^(−n)·exp(g(λ) − λM)·(M² + 2M/λ + 2/λ²)`` for every ``λ > 0``, minimised over ``λ``
    and summed over the ``D`` coordinates. Like :func:`wrap_probability` it is an expectation
    over the rotation's random signs, for any input of norm ``≤ C``."""
    n, dim = mech.clients, mech.padded_dim
    m = 2.0 ** (mech.bits - 1)
    v = (n * mech.scaled_clip) ** 2 / dim + n / 4

    def log_bound(lam):
        return (lam * lam * v / 2 + _noise_logmgf(mech, lam) - lam * m
                + math.log(m * m + 2 * m / lam + 2 / (lam * lam)))

    lam0 = m / (v + n * mech.client_variance)
    res = optimize.minimize_scalar(lambda t: _finite(log_bound(math.exp(t))),
                                   bounds=(math.log(lam0) - 8, math.log(lam0) + 3),
                                   method="bounded")
    best = min(log_bound(lam0), float(res.fun))
    log_e = math.log(8 * dim) - n * math.log1p(-mech.beta) + best
    return math.exp(min(log_e, 700.0))


def check_wrap(mech: DiscreteMechanism, max_probability: float = 1e-6,
               clients: int | None = None) -> float:
    """The wrap bound of :func:`wrap_probability` (for ``clients`` reports, default
    ``mech.clients``), or :class:`LdpsimError` when it exceeds ``max_probability`` (``b`` too
    small for the clip, γ, noise and ``n``): nothing wraps silently."""
    n = mech.clients if clients is None else int(clients)
    p = wrap_probability(mech, n)
    if p > max_probability:
        raise LdpsimError(
            f"bits = {mech.bits} too small: the {n}-client sum wraps modulo 2^{mech.bits} "
            f"with probability up to {p:.3g} > {max_probability:g} (clip {mech.clip}, granularity "
            f"{mech.granularity}, noise {mech.noise}); use more bits or a coarser granularity "
            "(bits_needed finds both)")
    return p


def solve_noise(mechanism: str, *, epsilon: float, delta: float, clients: int, dim: int,
                clip: float, granularity: float, rounds: int = 1, bits: int = 32,
                beta: float = 2.0**-20, neighbours: str = "replace",
                survivors: int | None = None,
                sampling_rate: float | None = None) -> DiscreteMechanism:
    """The least per-client noise (σ for ``ddg``, variance for ``skellam``, integer units) whose
    :func:`discrete_epsilon` after ``rounds`` rounds (amplified by Poisson cohort sampling at
    ``sampling_rate`` when given; default none) is ``≤ epsilon`` (bisection on the noise; the
    returned mechanism's ε is checked ``≤ epsilon``)."""
    epsilon = check_positive("epsilon", epsilon)

    def make(x):
        return DiscreteMechanism(mechanism, clip, granularity, x, clients, dim, bits, beta,
                                 neighbours)

    def eps_of(x):
        return discrete_epsilon(make(x), delta, rounds, survivors, sampling_rate)

    lo_default = 0.5 if mechanism == "ddg" else 1e-6
    lo, hi = lo_default, max(1.0, 2 * make(1.0).norm_bound)
    while eps_of(hi) > epsilon:
        lo, hi = hi, hi * 4
        if hi > 1e12:
            raise LdpsimError(f"no noise up to 1e12 reaches epsilon = {epsilon}")
    if eps_of(lo) <= epsilon:
        return make(lo)
    for _ in range(80):
        mid = math.sqrt(lo * hi)
        if eps_of(mid) <= epsilon:
            hi = mid
        else:
            lo = mid
        if hi / lo < 1 + 1e-6:
            break
    return make(hi)


def gaussian_central_variance(epsilon: float, delta: float, rounds: int, clip: float,
                              neighbours: str = "replace",
                              sampling_rate: float | None = None) -> float:
    """Central variance of the continuous Gaussian on the sum at the same (ε, δ, rounds,
    sampling), same RDP bounds (Mironov 2017; amplified by :func:`poisson_subsampled_rdp` when
    ``sampling_rate < 1``) and conversion: the reference for the discretisation's cost. The
    least variance whose ε is ``≤ epsilon``, by bisection to a relative width ``10⁻⁹``."""
    epsilon = check_positive("epsilon", epsilon)
    check_choice("neighbours", neighbours, NEIGHBOURS)
    sens = clip if neighbours == "add-remove" else 2 * clip
    q = 1.0 if sampling_rate is None else float(sampling_rate)
    o = np.asarray(DDG_ORDERS if q == 1.0 else SUBSAMPLED_ORDERS, float)

    def eps_of(var):
        r = poisson_subsampled_rdp(o, lambda ell: gaussian_rdp(ell, l2=sens, variance=var), q) \
            if q < 1.0 else gaussian_rdp(o, l2=sens, variance=var)
        return rdp_to_epsilon(o, rounds * r, delta)

    lo, hi = 1e-18 * sens * sens, sens * sens
    while eps_of(hi) > epsilon:
        lo, hi = hi, hi * 4
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if eps_of(mid) <= epsilon else (mid, hi)
        if hi / lo < 1 + 1e-9:
            break
    return hi


@dataclasses.dataclass(frozen=True)
class BitsRow:
    bits: int
    granularity: float
    noise: float
    wrap_probability: float
    epsilon: float
    mse_ratio: float          # decoded-sum error variance / the continuous Gaussian's


@dataclasses.dataclass(frozen=True)
class BitsReport:
    mechanism: str
    bits: int | None          # the least bits meeting the tolerance (None: none up to 32)
    rows: tuple
    continuous_variance: float

    def row(self, bits: int) -> BitsRow:
        return next(r for r in self.rows if r.bits == bits)


def bits_needed(mechanism: str, *, epsilon: float, delta: float, clients: int, dim: int,
                clip: float, rounds: int = 1, wrap_target: float = 1e-6,
                mse_tolerance: float = 0.1, beta: float = 2.0**-20,
                neighbours: str = "replace", bit_range: Sequence[int] = range(8, 33),
                sampling_rate: float | None = None,
                survivors: int | None = None,
                wrap_clients: int | None = None) -> BitsReport:
    """The least bit-width ``b`` at which the mechanism, at (ε, δ) over ``rounds`` rounds, has a
    modular-wrap probability (per round, :func:`wrap_probability`) ``≤ wrap_target`` and an error
    variance of the decoded sum within ``(1 + mse_tolerance)`` of the continuous Gaussian's at the
    same (ε, δ). ``sampling_rate``: whole-run accounting with Poisson cohort sampling
    (:func:`discrete_epsilon`), for the mechanism and the reference alike. ``survivors``: the
    clients whose noise the accounting counts (default ``clients``; with Poisson cohorts the
    count :func:`cohort_floor` guarantees); the error variance counts ``clients``, the wrap
    bound ``wrap_clients`` (default ``clients``; with Poisson cohorts the size
    :func:`cohort_ceiling` bounds).

    For each ``b`` the granularity γ is the finest whose wrap bound meets ``wrap_target`` (found
    by bisection on ``log γ``; the noise is re-solved for each γ); the error variance per
    coordinate is ``γ²·n·(1/4 + σ̂²)`` (rounding bounded by its worst case 1/4, plus the noise).
    """
    check_choice("mechanism", mechanism, MECHANISMS)
    wrap_target = check_open_unit("wrap_target", wrap_target)
    ref = gaussian_central_variance(epsilon, delta, rounds, clip, neighbours, sampling_rate)
    rows = []
    for b in bit_range:
        def mech_at(g):
            return solve_noise(mechanism, epsilon=epsilon, delta=delta, clients=clients, dim=dim,
                               clip=clip, granularity=g, rounds=rounds, bits=b, beta=beta,
                               neighbours=neighbours, sampling_rate=sampling_rate,
                               survivors=survivors)

        def ok(g):
            try:
                return wrap_probability(mech_at(g), wrap_clients) <= wrap_target
            except LdpsimError:                              # no valid noise at this γ
                return False

        hi = clip                                           # coarse: c = 1
        while not ok(hi):
            hi *= 4
            if hi > clip * 1e9:
                break
        if not ok(hi):
            continue
        lo = max(clip / 2.0**28, hi / 2.0**40)
        if ok(lo):
            hi = lo
        else:
            for _ in range(40):
                mid = math.sqrt(lo * hi)
                lo, hi = (lo, mid) if ok(mid) else (mid, hi)
                if hi / lo < 1.001:
                    break
        mech = mech_at(hi)
        mse = hi * hi * clients * (0.25 + mech.client_variance)
        rows.append(BitsRow(b, hi, mech.noise, wrap_probability(mech, wrap_clients),
                            discrete_epsilon(mech, delta, rounds, survivors,
                                             sampling_rate=sampling_rate),
                            mse / ref))
    good = [r.bits for r in rows if r.mse_ratio <= 1 + mse_tolerance]
    return BitsReport(mechanism, min(good) if good else None, tuple(rows), ref)


#: Share of δ that a whole-run plan under Poisson cohort sampling spends on the event that some
#: round's cohort is smaller than the count its noise is solved for (:func:`cohort_floor`).
COHORT_TAIL_SHARE = 0.1


def cohort_tail_eta(delta_tail: float, epsilon: float) -> float:
    """``η = δ_tail/(1 + e^ε)``: the probability of the cohort-tail event whose coupling-bound
    charge ``(1 + e^ε)·η`` is ``δ_tail`` (:func:`cohort_floor`)."""
    return float(delta_tail) / (1.0 + math.exp(min(float(epsilon), 700.0)))


def cohort_floor(population: int, clients: int, rounds: int, epsilon: float, delta: float,
                 share: float = COHORT_TAIL_SHARE) -> tuple[int, float]:
    """The cohort size ``n_low`` a whole-run plan under Poisson sampling can count on, and the
    part of δ it costs.

    Each round samples every client independently at rate ``q = clients/population``, so in a
    round where a user takes part the clients whose noise protects it are the user and the
    other ``population − 1`` users' Binomial count ``X`` (the protected client's own share
    counts, as everywhere in the distributed modes). With ``k`` the least count such that
    ``P[X < k] ≤ η/rounds``, per-client noise solved for ``n_low = k + 1`` clients meets the
    target in every round of the run except with probability ``≤ η`` (union bound). The real mechanism is within total
    variation ``η`` of one that tops up a short cohort's noise to ``n_low`` clients' (which
    meets the RDP bound in every round), so it is ``(ε, δ' + (1 + e^ε)·η)``-DP when that one is
    ``(ε, δ')``-DP (the coupling bound of docs/privacy_sharp_edges.md §4). With
    ``δ_tail = share·δ`` and ``η = δ_tail/(1 + e^ε)`` the noise is solved at ``δ' = δ − δ_tail``.

    Returns ``(n_low, δ_tail)``; ``n_low ≥ 1``.
    """
    from scipy import stats

    population = check_positive_int("population", population)
    clients = check_positive_int("clients", clients)
    if clients > population:
        raise LdpsimError(f"clients = {clients} exceeds population = {population}")
    rounds = check_positive_int("rounds", rounds)
    delta = check_open_unit("delta", delta)
    delta_tail = float(share) * delta
    eta = cohort_tail_eta(delta_tail, epsilon)
    q = clients / population
    if q >= 1.0 or population == 1:
        return clients, 0.0
    k = int(stats.binom.ppf(eta / rounds, population - 1, q))
    # ppf: the least k with P[X <= k] >= p, so P[X < k] = P[X <= k - 1] < p
    return min(k + 1, clients), delta_tail


def cohort_ceiling(population: int, clients: int, tail: float) -> tuple[int, float]:
    """The cohort size a round's wrap bound counts under Poisson sampling, and the probability
    that a cohort exceeds it.

    Each client of ``population`` joins independently at rate ``q = clients/population``, so
    the cohort size ``X`` is Binomial(population, q) and can exceed its mean ``clients``. The
    wrap bound increases with the number of reports summed (:func:`wrap_probability`), so
    ``P[wrap] ≤ P[X > n_high] + wrap_probability(mech, n_high)``, with ``n_high`` the least
    ``n`` such that ``P[X > n] ≤ tail``.

    Returns ``(n_high, P[X > n_high])``; ``(clients, 0)`` when ``q = 1``.
    """
    from scipy import stats

    population = check_positive_int("population", population)
    clients = check_positive_int("clients", clients)
    if clients > population:
        raise LdpsimError(f"clients = {clients} exceeds population = {population}")
    tail = check_open_unit("tail", tail)
    q = clients / population
    if q >= 1.0:
        return clients, 0.0
    n = int(stats.binom.isf(tail, population, q))
    while n < population and stats.binom.sf(n, population, q) > tail:
        n += 1
    while n > clients and stats.binom.sf(n - 1, population, q) <= tail:
        n -= 1
    return n, float(stats.binom.sf(n, population, q))
