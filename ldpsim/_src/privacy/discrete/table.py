"""Host-side tables of the integer noise laws, for exact sampling by table lookup (no JAX).

The discrete Gaussian ``N_Z(0, σ²)`` (``P[X = x] ∝ exp(−x²/(2σ²))``) and the symmetric Skellam
``Sk(μ) = Poisson(μ/2) − Poisson(μ/2)`` (``P[X = k] = e^{−μ} I_k(μ)``, variance ``μ``) are
tabulated on a window ``[−L, L]`` as a cumulative distribution in ``128``-bit fixed point
(``W = 4`` uint32 words), ``F[L] = 2¹²⁸`` exactly, and turned into Walker's alias table
(A. J. Walker, "An efficient method for generating discrete random variables with general
distributions", ACM TOMS 3, 1977; M. D. Vose, IEEE TSE 17, 1991) built with **integer**
arithmetic, so that the law the device sampler (:func:`.samplers.table_sample`) draws from 128
ideal random bits is exactly ``(F[i] − F[i−1])/2¹²⁸`` (the test rebuilds it from the alias
table, exactly).

**How the pmf is computed (no float64 in the table).** Both laws are computed from a
recurrence of positive terms with positive coefficients, in the stdlib ``decimal`` module at
``PREC = 60`` significant digits, twice: once with every operation rounded down and the inputs
rounded down, once with everything rounded up. A monotone recurrence then brackets the exact
values: ``lo_x ≤ y_x ≤ hi_x``, and ``η = max (hi_x − lo_x)/lo_x`` is a proven bound on the
relative error of the table's weights ``lo_x`` (measured: below ``10⁻⁵⁰``).

* DDG: ``y_x = r^{x²}``, ``r = exp(−1/(2σ²))``: ``y_{x+1} = y_x·s_x``, ``s_{x+1} = s_x·r²``
  (``Decimal.exp`` is correctly rounded; the bracket widens ``r`` by a relative margin that
  covers that and the rounding of ``1/(2σ²)``).
* Skellam: Miller's backward recurrence ``y_{k−1} = (2k/μ)·y_k + y_{k+1}`` from ``y_{K+1} = 0``,
  ``y_K = 1``, whose exact solution is ``y_k ∝ I_k(μ) ± (I_{K+1}/K_{K+1}(μ))·K_k(μ)`` (``K`` the
  modified Bessel function of the second kind, which satisfies the recurrence up to a sign
  ``(−1)^k``), so for ``k ≤ L`` the relative contamination is at most
  ``I_{K+1}(μ)/I_L(μ) ≤ ρ_L^{K+1−L}``, ``ρ_ν = μ/(ν + √(ν² + μ²))`` the bound of D. E. Amos,
  "Computation of modified Bessel functions and their ratios", Math. Comp. 28 (1974), on
  ``I_{ν+1}/I_ν`` (decreasing in ``ν``); ``K`` is chosen so that it is below ``2⁻¹⁴⁰``.

The weights on ``[−L, L]`` are normalised by their own sum: the table's target is the law
conditioned on ``|X| ≤ L``, at total variation ``P[|X| > L]`` from the law, bounded by
``_ddg_tail`` (the discrete Gaussian's normaliser is ``≥ √(2πσ²)`` and its tail is dominated by
a geometric series) or ``_skellam_tail`` (Chernoff with the exact log-MGF ``μ(cosh λ − 1)``).
``L`` is the least window with a tail below ``2⁻¹⁰⁰``.

**Total variation of one draw from the ideal law** (:attr:`NoiseTable.tv_bound`)::

    TV ≤ tail + N·2⁻¹²⁹ + 2η + 2c,

``N = 2L + 1`` atoms, each CDF entry correctly rounded (``≤ 2⁻¹²⁹``, so each atom's mass is
off by ``≤ 2⁻¹²⁸``), ``η`` the decimal bracket, ``c`` the Miller contamination (0 for DDG). The
bound is fixed from the parameters before the table is built (``η ≤ 10⁻⁴⁰`` charged, and the
build checks that the measured ``η`` is below it), so the accountant can use it without
building a table (:func:`table_plan`).

**Pieces.** A table holds at most ``MAX_ATOMS = 2¹⁸`` atoms. A larger law is sampled as the sum
of ``pieces`` independent draws of a law with ``1/pieces`` of the variance: for Skellam the sum
is exactly ``Sk(μ)``; for DDG it is not a discrete Gaussian, and the accountant counts
``n·pieces`` summands of the piece's σ (as for the rejection sampler). The TV bound of the sum
is ``pieces`` times the piece's.

Building takes ~0.1–1 s for σ ≈ 1,500 (measured in ``benchmarks/discrete_samplers.py``); tables
are cached by parameter.
"""

from __future__ import annotations

import dataclasses
import decimal
import functools
import math
from decimal import Decimal
from fractions import Fraction

import numpy as np

from ldpsim._src._checks import LdpsimError, check_positive

__all__ = ["NoiseTable", "TablePlan", "table_plan", "noise_table", "LAWS", "WORDS",
           "MAX_ATOMS", "PREC"]

LAWS = ("ddg", "skellam")
WORDS = 4                       # 128-bit fixed point
BITS = 32 * WORDS
ONE = 1 << BITS                 # F[L] = 2^128
MAX_ATOMS = 1 << 18
PREC = 60                       # decimal digits
TAIL_TARGET = 2.0**-100
ETA_CHARGED = 1e-40             # the decimal bracket's relative width charged (measured ≪)
CONTAM_TARGET = 2.0**-140       # Miller's contamination (Skellam)


# --------------------------------------------------------------------------- tail bounds

def _ddg_tail(sigma2: float, half: int) -> float:
    """``P[|X| > half]`` for ``X ~ N_Z(0, σ²)``, bounded above (normaliser ``≥ √(2πσ²)`` by
    Poisson summation; geometric bound on the tail sum). Float64 with a 1e-12 relative
    margin (the bound's own slack is far larger)."""
    a = half + 1
    head = -a * a / (2 * sigma2)
    ratio = math.exp(-a / sigma2)
    return 2 * math.exp(head) / ((1 - ratio) * math.sqrt(2 * math.pi * sigma2)) * (1 + 1e-12)


def _skellam_tail(mu: float, half: int) -> float:
    """``P[|X| > half]`` for ``X ~ Sk(μ)``: ``2·exp(μ(cosh λ − 1) − λ(half + 1))`` at
    ``λ = asinh((half + 1)/μ)`` (Chernoff; the Skellam's log-MGF is ``μ(cosh λ − 1)``)."""
    a = half + 1
    t = a / mu
    log_p = mu * (math.sqrt(1 + t * t) - 1) - a * math.asinh(t)
    return 2 * math.exp(log_p) * (1 + 1e-12)


def _tail(law: str, param: float, half: int) -> float:
    return _ddg_tail(param * param, half) if law == "ddg" else _skellam_tail(param, half)


def _least_half(law: str, param: float) -> int:
    """The least ``L`` with tail ``< 2⁻¹⁰⁰`` (bisection on an integer)."""
    sd = param if law == "ddg" else math.sqrt(param)
    lo, hi = 0, max(4, math.ceil(14 * sd) + 40)
    while _tail(law, param, hi) >= TAIL_TARGET:
        hi *= 2
    while lo < hi:
        mid = (lo + hi) // 2
        if _tail(law, param, mid) < TAIL_TARGET:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _miller_start(mu: float, half: int) -> int:
    """``K`` with ``ρ_L^{K+1−L} ≤ 2⁻¹⁴⁰`` (Amos's ratio bound, module docstring)."""
    rho = mu / (half + math.sqrt(half * half + mu * mu))
    steps = math.ceil(140 * math.log(2) / -math.log(rho)) if rho < 1 else 10**9
    return half + steps + 1


# --------------------------------------------------------------------------- the plan

@dataclasses.dataclass(frozen=True)
class TablePlan:
    """What a table for ``(law, param)`` will be, computed without building it.

    ``param``: the requested σ (``ddg``) or variance μ (``skellam``) of the whole draw;
    ``piece``: the parameter of one piece's table (σ_piece with ``σ_piece² = σ²/pieces`` as a
    float, the value the table is built for, or ``μ/pieces``); ``half``: ``L``;
    ``tv_bound``: the total variation of one whole draw (``pieces`` pieces) from the ideal law
    (module docstring).
    """

    law: str
    param: float
    pieces: int
    piece: float
    half: int
    tv_bound: float

    @property
    def atoms(self) -> int:
        return 2 * self.half + 1

    @property
    def columns_log2(self) -> int:
        """``k``: the alias table has ``2^k ≥ N`` columns (``k ≥ 1``)."""
        return max(1, (self.atoms - 1).bit_length())

    def summands(self, clients: int) -> int:
        """Pieces in the sum of ``clients`` clients' noise (the DDG accountant's ``N``)."""
        return int(clients) * self.pieces


@functools.lru_cache(maxsize=256)
def table_plan(law: str, param: float) -> TablePlan:
    """The plan for ``law`` (``"ddg"``: σ; ``"skellam"``: variance μ); raises
    :class:`LdpsimError` for a non-positive parameter or more than 2¹⁵ pieces."""
    if law not in LAWS:
        raise LdpsimError(f"law must be one of {LAWS}, got {law!r}")
    param = check_positive("sigma" if law == "ddg" else "variance", param)
    pieces = 1
    while True:
        if law == "ddg":
            piece = param if pieces == 1 else math.sqrt(param * param / pieces)
        else:
            piece = param / pieces
        half = _least_half(law, piece)
        if 2 * half + 1 <= MAX_ATOMS:
            break
        sd = param if law == "ddg" else math.sqrt(param)
        pieces = max(pieces + 1, math.ceil(pieces * ((2 * half + 1) / MAX_ATOMS) ** 2))
        if pieces > 2**15:
            raise LdpsimError(f"{law} parameter {param} too large for the table sampler "
                              f"(sd {sd:.3g}; at most 2^15 pieces)")
    n = 2 * half + 1
    contam = 0.0 if law == "ddg" else CONTAM_TARGET
    tv_piece = _tail(law, piece, half) + n * 2.0**-(BITS + 1) + 2 * ETA_CHARGED + 2 * contam
    return TablePlan(law, param, pieces, piece, half, pieces * tv_piece)


# --------------------------------------------------------------------------- the pmf

def _contexts():
    lo = decimal.Context(prec=PREC, rounding=decimal.ROUND_FLOOR, Emax=10**8, Emin=-10**8)
    hi = decimal.Context(prec=PREC, rounding=decimal.ROUND_CEILING, Emax=10**8, Emin=-10**8)
    return lo, hi


def _ddg_weights(sigma: float, half: int, ctx: decimal.Context, up: bool) -> list:
    """``r^{x²}`` for ``x = 0..half`` (``r = exp(−1/(2σ²))``), every operation rounded in
    ``ctx``'s direction and ``r`` moved one ulp that way."""
    f2 = Fraction(sigma) ** 2
    two_s2 = ctx.divide(Decimal(2 * f2.numerator), Decimal(f2.denominator))
    arg = ctx.divide(Decimal(1), two_s2)              # 1/(2σ²), relative error ≤ 2·10^(1−PREC)
    r = ctx.exp(ctx.minus(arg))                       # correctly rounded (half even): ≤ ½ ulp
    # |r̃/r − 1| ≤ e^{arg·2u} − 1 + u ≤ (3·arg + 1)·u for u = 10^(1−PREC) (arg·2u ≪ 1):
    # widen r by that relative margin, in the bracket's direction
    margin = ctx.multiply(ctx.add(ctx.multiply(Decimal(3), arg), Decimal(1)),
                          Decimal(1).scaleb(1 - PREC))
    r = ctx.multiply(r, ctx.add(Decimal(1), margin) if up else ctx.subtract(Decimal(1), margin))
    r = min(r, Decimal(1)) if up else r
    r2 = ctx.multiply(r, r)
    y, s = Decimal(1), r
    out = [y]
    for _ in range(half):
        y = ctx.multiply(y, s)
        s = ctx.multiply(s, r2)
        out.append(y)
    return out


def _skellam_weights(mu: float, half: int, ctx: decimal.Context, up: bool) -> list:
    """Miller's backward recurrence for ``I_k(μ)``, ``k = 0..half`` (unnormalised, module
    docstring), every operation rounded in ``ctx``'s direction."""
    start = _miller_start(mu, half)
    m = Decimal(mu)                                    # exact (a float is a dyadic rational)
    y_next, y = Decimal(0), Decimal(1)
    out = [None] * (half + 1)
    for k in range(start, 0, -1):                      # y = y_k, y_next = y_{k+1}
        if k <= half:
            out[k] = y
        coef = ctx.divide(Decimal(2 * k), m)
        y_next, y = y, ctx.add(ctx.multiply(coef, y), y_next)
    out[0] = y
    return out


def _weights(law: str, piece: float, half: int):
    """``(lo, η)``: the lower bracket of the unnormalised weights ``x = 0..half`` and its
    measured relative width."""
    c_lo, c_hi = _contexts()
    fn = _ddg_weights if law == "ddg" else _skellam_weights
    lo = fn(piece, half, c_lo, False)
    hi = fn(piece, half, c_hi, True)
    eta = max(float((h - l) / l) for l, h in zip(lo, hi))
    return lo, eta


# --------------------------------------------------------------------------- the table

@dataclasses.dataclass(frozen=True, eq=False)
class NoiseTable:
    """One piece's table (module docstring) and its plan.

    ``cdf``: ``(N, 4)`` uint32, ``F[i]`` for ``x = i − L`` in 128-bit fixed point, most
    significant word first (``F[N−1] = 2¹²⁸`` is stored as all zeros: it wraps). ``threshold``:
    ``(2^k, 4)`` uint32, the alias table's thresholds ``T_c < 2^(128−k)``; ``alias``: ``(2^k,)``
    int32, the value (``x``, not the index) drawn when ``V ≥ T_c``; column ``c`` draws ``c − L``
    when ``V < T_c``. ``masses``: the exact integer masses ``F[i] − F[i−1]`` (Python ints).
    ``variance``: the exact variance of one piece's table law (a Fraction); ``eta``: the
    measured decimal bracket.
    """

    plan: TablePlan
    cdf: np.ndarray
    threshold: np.ndarray
    alias: np.ndarray
    masses: tuple
    variance: Fraction
    mean: Fraction
    eta: float

    @property
    def half(self) -> int:
        return self.plan.half

    @property
    def total_variance(self) -> float:
        """The exact variance of the whole draw (``pieces`` independent pieces), as a float."""
        return float(self.plan.pieces * self.variance)


def _to_words(values, width: int = WORDS) -> np.ndarray:
    out = np.zeros((len(values), width), np.uint32)
    for i, v in enumerate(values):
        for j in range(width):
            out[i, width - 1 - j] = (v >> (32 * j)) & 0xFFFFFFFF
    return out


def _alias(masses: list, k: int):
    """Walker's alias table for integer ``masses`` summing to ``2¹²⁸`` over ``2^k`` columns of
    capacity ``2^(128−k)`` (Vose's construction, exact in integers)."""
    cols = 1 << k
    cap = ONE >> k
    m = list(masses) + [0] * (cols - len(masses))
    thr = [0] * cols
    alias = list(range(cols))
    small = [i for i in range(cols) if m[i] < cap]
    large = [i for i in range(cols) if m[i] >= cap]
    while small and large:
        s, big = small.pop(), large.pop()
        thr[s] = m[s]
        alias[s] = big
        m[big] -= cap - m[s]
        (small if m[big] < cap else large).append(big)
    for i in small + large:        # exactly full (integer arithmetic): always itself
        if m[i] != cap:
            raise LdpsimError("internal: alias construction left a partial column")
        thr[i] = 0
        alias[i] = i
    return thr, alias


@functools.lru_cache(maxsize=32)
def noise_table(law: str, param: float) -> NoiseTable:
    """The (cached) table of one piece for ``law`` at ``param`` (:func:`table_plan`)."""
    plan = table_plan(law, float(param))
    half = plan.half
    lo, eta = _weights(law, plan.piece, half)
    if not eta <= ETA_CHARGED:
        raise LdpsimError(f"internal: decimal bracket {eta:.3g} exceeds the charged "
                          f"{ETA_CHARGED:g} for {law} {param}")
    # exact integers at a common decimal scale
    tups = [v.as_tuple() for v in lo]
    e = -min(t.exponent for t in tups)
    ints = [int("".join(map(str, t.digits))) * 10 ** (t.exponent + e) for t in tups]
    atoms = [ints[abs(x)] for x in range(-half, half + 1)]
    total = sum(atoms)
    cdf, acc = [], 0
    for a in atoms:
        acc += a
        cdf.append((acc * ONE + total // 2) // total)
    cdf[-1] = ONE
    masses = [cdf[0]] + [cdf[i] - cdf[i - 1] for i in range(1, len(cdf))]
    thr, alias = _alias(masses, plan.columns_log2)
    xs = range(-half, half + 1)
    mean = Fraction(sum(mm * x for mm, x in zip(masses, xs)), ONE)
    second = Fraction(sum(mm * x * x for mm, x in zip(masses, xs)), ONE)
    var = second - mean * mean
    cdf_words = _to_words([c % ONE for c in cdf])
    return NoiseTable(plan, cdf_words, _to_words(thr),
                      np.asarray([a - half for a in alias], np.int32), tuple(masses), var,
                      mean, eta)
