"""One round of the distributed discrete mechanisms at LeNet-5 size (d = 61,706): rotation,
scaling, conditional rounding, integer noise, wrap to b bits, sum modulo 2^b and decoding,
jitted and vmapped over clients."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ldpsim._src.privacy.discrete import accounting as A
from ldpsim._src.privacy import hadamard as H
from ldpsim._src.privacy.discrete import modular as M
from ldpsim._src.privacy.discrete import pipeline as P

D_LENET = 61_706


def _clients(n, d, clip, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)) * rng.uniform(0.2, 2.0, size=(n, 1)) / math.sqrt(d)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    x = x * np.minimum(1.0, clip / norms) * (1 - 1e-6)
    return x


def _round(mech, x, noise):
    n = x.shape[0]
    padded = jnp.pad(jnp.asarray(x, jnp.float32), ((0, 0), (0, mech.padded_dim - mech.dim)))
    rot = jax.random.key(1)
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(2), i))(jnp.arange(n))
    enc = jax.jit(jax.vmap(lambda k, v: P.encode(rot, k, v, mech, noise=noise)))
    reports, ints, ok = enc(keys, padded)
    total = jax.jit(lambda r: M.modular_sum(r, mech.bits))(reports)
    return rot, reports, ints, ok, total


def _expected_mse(mech, x, noise_var):
    """E‖decoded − Σx‖²/d: rounding variance f(1−f) of each rotated, scaled coordinate (computed
    from the inputs, in float64) plus the noise, spread evenly by the inverse rotation."""
    padded = np.pad(x, ((0, 0), (0, mech.padded_dim - mech.dim)))
    rot = np.asarray(H.rotate(jax.random.key(1), jnp.asarray(padded, jnp.float32)), float)
    y = rot / mech.granularity
    f = y - np.floor(y)
    per = (f * (1 - f)).sum() / mech.padded_dim + x.shape[0] * noise_var
    return mech.granularity**2 * per


@pytest.mark.parametrize("d", [1000, pytest.param(D_LENET, marks=pytest.mark.slow)])
def test_round_trip_without_noise(d):
    n = 3
    mech = A.DiscreteMechanism("ddg", 1.0, 2e-4, 1.0, n, d, bits=20)
    x = _clients(n, d, 1.0)
    rot, reports, ints, ok, total = _round(mech, x, noise=False)
    assert bool(np.all(np.asarray(ok)))
    exact = np.asarray(ints, np.int64).sum(axis=0)
    np.testing.assert_array_equal(np.asarray(total), exact)          # no wrap at 20 bits
    dec = np.asarray(P.decode(rot, total, mech), float)
    err = dec - x.sum(axis=0)
    ratio = np.mean(err**2) / _expected_mse(mech, x, 0.0)
    # mean of d roughly independent squared errors: SE ≈ √(2/d); 5 SE
    assert abs(ratio - 1) < 5 * math.sqrt(2 / d)


@pytest.mark.slow
@pytest.mark.parametrize("mechanism", ["ddg", "skellam"])
def test_round_trip_with_noise_lenet5(mechanism):
    n = 3
    noise = 30.0 if mechanism == "ddg" else 900.0
    mech = A.DiscreteMechanism(mechanism, 1.0, 2e-4, noise, n, D_LENET, bits=20)
    x = _clients(n, D_LENET, 1.0, seed=1)
    rot, reports, ints, ok, total = _round(mech, x, noise=True)
    assert bool(np.all(np.asarray(ok)))
    noise_var = noise**2 if mechanism == "ddg" else noise   # the table's law (σ = 30: Var = σ²)
    dec = np.asarray(P.decode(rot, total, mech), float)
    err = dec - x.sum(axis=0)
    ratio = np.mean(err**2) / _expected_mse(mech, x, noise_var)
    assert abs(ratio - 1) < 0.04                                      # 5 SE
    # the sum wrapped nowhere: the wrap bound at these parameters is tiny
    assert A.wrap_probability(mech) < 1e-9
    # wrapping at fewer bits changes nothing modulo 2^b (post-processing), and is detected
    small = M.modular_sum(reports, 12)
    np.testing.assert_array_equal(np.asarray(small), np.asarray(M.wrap(total, 12)))
