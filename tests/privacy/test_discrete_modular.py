"""Modular wrap, sum modulo 2^b and decoding (ldpsim._src.privacy.discrete.modular)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ldpsim._src._checks import LdpsimError
from ldpsim._src.privacy import hadamard as H
from ldpsim._src.privacy.discrete import modular as M


@pytest.mark.parametrize("bits", [2, 8, 16, 20, 31, 32])
def test_wrap_and_sum_match_integer_arithmetic(bits):
    rng = np.random.default_rng(bits)
    v = rng.integers(-(2**31), 2**31, size=(50, 300), dtype=np.int64)
    mod = 2**bits
    ref_wrap = ((v + mod // 2) % mod) - mod // 2                     # numpy int64, exact
    ref_sum = ((v.sum(axis=0) + mod // 2) % mod) - mod // 2
    np.testing.assert_array_equal(np.asarray(M.wrap(jnp.asarray(v, jnp.int32), bits)), ref_wrap)
    got = jax.jit(M.modular_sum, static_argnums=1)(jnp.asarray(v, jnp.int32), bits)
    np.testing.assert_array_equal(np.asarray(got), ref_sum)
    # summing the wrapped reports gives the same residue (wrap is a post-processing)
    got2 = M.modular_sum(M.wrap(jnp.asarray(v, jnp.int32), bits), bits)
    np.testing.assert_array_equal(np.asarray(got2), ref_sum)


def test_bad_bits_refused():
    for b in (0, 33, 2.5, True):
        with pytest.raises(LdpsimError, match="bits"):
            M.wrap(jnp.zeros(3, jnp.int32), b)


def test_decoding_is_exact_without_wrap():
    rng = np.random.default_rng(0)
    ints = rng.integers(-300, 300, size=(20, 1024))
    total = ints.sum(axis=0)                                         # |total| < 6000 < 2^15
    key = jax.random.key(2)
    s = M.modular_sum(M.wrap(jnp.asarray(ints, jnp.int32), 16), 16)
    np.testing.assert_array_equal(np.asarray(s), total)
    gamma = 2.0**-10
    dec = M.decode(key, s, gamma, d=1000)
    ref = np.asarray(H.unrotate(key, jnp.asarray(total * gamma, jnp.float32)))[:1000]
    np.testing.assert_array_equal(np.asarray(dec), ref)
    assert float(M.wrapped_fraction(jnp.asarray(total), 16)) == 0.0
    assert float(M.wrapped_fraction(jnp.asarray(total), 8)) > 0.5     # |total| mostly ≥ 128
