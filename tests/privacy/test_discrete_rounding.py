"""Randomized and conditional rounding (ldpsim._src.privacy.discrete.rounding)."""

import math

import jax
import jax.numpy as jnp
import numpy as np

from ldpsim._src.privacy.discrete import accounting as A
from ldpsim._src.privacy.discrete import rounding as R


def test_randomized_rounding_is_unbiased():
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.uniform(-50, 50, 4096), jnp.float32)
    reps = 4000
    keys = jax.random.split(jax.random.key(1), reps)
    mean = np.asarray(jax.jit(jax.vmap(lambda k: R.randomized_round(k, x)))(keys), float).mean(0)
    xf = np.asarray(x, float)
    frac = xf - np.floor(xf)
    se = np.sqrt(frac * (1 - frac) / reps) + 1e-12
    # every coordinate within 5.5 SE: false-failure rate 4096 × 3.8e-8 = 1.6e-4
    assert np.all(np.abs(mean - xf) <= 5.5 * se + 1e-9)
    v = np.asarray(R.randomized_round(keys[0], x))
    assert np.all((v == np.floor(xf)) | (v == np.floor(xf) + 1))


def test_conditional_rounding_respects_the_bound_exactly():
    dim, c, clients = 4096, 200.0, 64
    rng = np.random.default_rng(2)
    x = rng.normal(size=(clients, dim))
    x = x / np.linalg.norm(x, axis=1, keepdims=True) * c
    x = jnp.asarray(x, jnp.float32)
    keys = jax.random.split(jax.random.key(3), clients)
    # a bound below the typical rounded norm forces retries and some failures
    typical = math.sqrt(c * c + dim / 6)
    bound = typical * 0.9995
    out, ok = jax.jit(jax.vmap(lambda k, v: R.conditional_round(k, v, bound, max_tries=3)))(keys, x)
    out, ok = np.asarray(out, np.int64), np.asarray(ok)
    sq = (out * out).sum(axis=1)                              # exact int64 norms
    assert np.all(sq[ok] <= bound * bound)
    assert np.all(out[~ok] == 0)
    assert 0 < ok.sum() < clients
    # the paper's bound at β: one try fails with probability ≤ β (here 1e-2)
    beta = 1e-2
    b2 = A.rounding_norm_bound(c, dim, beta)
    out, ok = jax.jit(jax.vmap(lambda k, v: R.conditional_round(k, v, b2, max_tries=1)))(keys, x)
    assert np.all(np.asarray(ok))                 # P(any of 64 fails) ≤ 64β·(tighter in fact)
    sq = (np.asarray(out, np.int64) ** 2).sum(axis=1)
    assert np.all(sq <= b2 * b2)
