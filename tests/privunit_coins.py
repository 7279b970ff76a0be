"""The realised probabilities of PrivUnit's 32-bit coins, computed independently from the
float32 parameters (exact rationals, then mpmath): shared by the PrivUnit and ProjUnit tests."""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np


def p_lower(m) -> mpmath.mpf:
    """The realised probability of α's lower region: the 32-bit coin's exact cut-off."""
    p_out = Fraction(float(np.float32(m.params.p_out)))
    return mpmath.mpf(math.ceil(p_out * 2**32)) / 2**32


def norm_coin(m) -> mpmath.mpf:
    """The norm coin's small side (r = 0 or C), from its float32 arithmetic and 32-bit cut."""
    f = np.float32
    small = f(m.params.norm_excess) / (f(2.0) * f(m.params.norm_bound))
    return mpmath.mpf(math.ceil(Fraction(float(small)) * 2**32)) / 2**32
