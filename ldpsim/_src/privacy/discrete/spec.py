"""Host-side parameters of the reference discrete Gaussian sampler, Canonne–Kamath–Steinke
rejection (pure Python, no JAX).

See :mod:`ldpsim._src.privacy.discrete.samplers` for the algorithm and what "exact" means. The
``discrete`` mode draws its noise from the table sampler instead (:mod:`.table`); this spec
serves the reference sampler in tests and benchmarks.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

from ldpsim._src._checks import LdpsimError, check_positive

__all__ = ["DiscreteGaussianSpec", "discrete_gaussian_spec", "EXPONENT_CAP"]

_INT32_MAX = 2**31 - 1
_D_LIMIT = 2**27          # D = 2qtp: remainders fit int32; a word is redrawn w.p. < 2^-5
_PIECE_VARIANCE_MAX = 2**25
_Q_MAX = 2**20
EXPONENT_CAP = 64         # proposals with acceptance exponent >= this are rejected


@dataclasses.dataclass(frozen=True)
class DiscreteGaussianSpec:
    """Host-side parameters of the exact sampler for a requested σ (see module docstring).

    ``variance`` is the realised ``pieces · t·p/q ≥ σ²``; ``tv_bound`` bounds the total
    variation of one coordinate's draw from ``N_Z(0, variance)`` when ``pieces == 1`` (for
    ``pieces > 1`` from the sum of ``pieces`` exact discrete Gaussians of ``piece_variance``).
    """

    sigma: float
    t: int
    p: int
    q: int
    pieces: int
    w_limit: int
    z_limit: int
    tv_bound: float

    @property
    def piece_variance(self) -> float:
        return self.t * self.p / self.q

    @property
    def variance(self) -> float:
        return self.pieces * self.piece_variance

    def summands(self, clients: int) -> int:
        """Discrete Gaussians in the sum of ``clients`` clients' noise (for the accountant)."""
        return int(clients) * self.pieces


def _tail_tv(v: float, z_limit: int) -> float:
    """``P[|X| > z_limit]`` for ``X ~ N_Z(0, v)``, bounded above (normaliser ``≥ √(2πv)`` by
    Poisson summation; geometric bound on the tail sum)."""
    a = z_limit + 1
    head = -a * a / (2 * v)
    ratio = math.exp(-a / v)
    return 2 * math.exp(head) / ((1 - ratio) * math.sqrt(2 * math.pi * v))


def discrete_gaussian_spec(sigma: float) -> DiscreteGaussianSpec:
    """Integer parameters of the exact discrete Gaussian sampler for standard deviation ``σ``.

    Raises :class:`LdpsimError` for σ ≤ 0 or σ² > 2⁴⁰ (2¹⁵ pieces of variance 2²⁵).
    """
    sigma = check_positive("sigma", sigma)
    var = Fraction(sigma) ** 2
    pieces = max(1, math.ceil(var / _PIECE_VARIANCE_MAX))
    if pieces > 2**15:
        raise LdpsimError(f"sigma = {sigma} is too large for the discrete Gaussian sampler "
                          "(at most 2^15 pieces of variance 2^25)")
    v = var / pieces
    t = math.isqrt(math.floor(v)) + 1                 # floor(sqrt(v)) + 1 > sqrt(v)
    q = _Q_MAX
    while True:
        p = math.ceil(v * q / t)
        d = 2 * q * t * p
        if d < _D_LIMIT or q == 1:
            break
        q //= 2
    if d >= _D_LIMIT:
        raise LdpsimError(f"internal: D = {d} too large for sigma = {sigma}")
    w_limit = math.isqrt(EXPONENT_CAP * d - 1) + 1     # smallest W with W^2 >= 64 D
    if p >= w_limit:
        raise LdpsimError(f"internal: p = {p} >= W = {w_limit} for sigma = {sigma}")
    z_limit = min((p + w_limit - 1) // q, 12 * t - 1)   # q|x| - p < W, and V < 12 (samplers)
    if q * z_limit + p >= _INT32_MAX or z_limit * t > _INT32_MAX:
        raise LdpsimError(f"internal: integer range exceeded for sigma = {sigma}")
    v_real = t * p / q
    return DiscreteGaussianSpec(sigma=sigma, t=t, p=p, q=q, pieces=pieces, w_limit=w_limit,
                                z_limit=z_limit, tv_bound=pieces * _tail_tv(v_real, z_limit))


