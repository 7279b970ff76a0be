"""ldpsim._src._xla: the compile options of ldpsim's own kernels."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ldpsim import LdpsimError
from ldpsim._src import _xla
from ldpsim._src.privacy.noise import sampling


def test_options_on_cpu_and_override(monkeypatch):
    monkeypatch.delenv("LDPSIM_XLA_CPU_VECTOR_WIDTH", raising=False)
    assert _xla.compiler_options("cpu") == {"xla_cpu_prefer_vector_width": 512}
    assert _xla.compiler_options("gpu") == {}
    monkeypatch.setenv("LDPSIM_XLA_CPU_VECTOR_WIDTH", "256")
    assert _xla.compiler_options("cpu") == {"xla_cpu_prefer_vector_width": 256}
    monkeypatch.setenv("LDPSIM_XLA_CPU_VECTOR_WIDTH", "wide")
    with pytest.raises(LdpsimError, match="LDPSIM_XLA_CPU_VECTOR_WIDTH"):
        _xla.compiler_options("cpu")


def test_same_bits_as_plain_jit_top_level_and_nested():
    def draw(seed):
        keys = jax.vmap(lambda c: jax.random.fold_in(jax.random.key(seed), c))(jnp.arange(8))
        return jax.vmap(lambda k: sampling.normal(k, (1000,)))(keys)

    plain = np.asarray(jax.jit(draw)(3))
    ours = _xla.jit(draw)
    np.testing.assert_array_equal(np.asarray(ours(3)), plain)
    # Called inside another jit (options are top-level only in JAX): inlined, same values.
    np.testing.assert_array_equal(np.asarray(jax.jit(lambda s: ours(s))(3)), plain)
    # sampling.normal's own kernel is an _xla.jit: eager and traced calls agree.
    k = jax.random.key(5)
    np.testing.assert_array_equal(np.asarray(sampling.normal(k, (77,))),
                                  np.asarray(jax.jit(lambda k: sampling.normal(k, (77,)))(k)))


def test_unknown_option_falls_back_to_plain_jit(monkeypatch):
    # An older XLA that lacks the option rejects it at compile time ("No such compile
    # option"); the kernel must still run, without the option.
    monkeypatch.setattr(_xla, "compiler_options", lambda backend=None: {"xla_no_such_option": 1})
    f = _xla.jit(lambda x: x * 2 + 1)
    np.testing.assert_array_equal(np.asarray(f(jnp.arange(3.0))), [1.0, 3.0, 5.0])
    compiled = _xla.jit(lambda x: x - 1).lower(jnp.arange(2.0)).compile()   # AOT path too
    np.testing.assert_array_equal(np.asarray(compiled(jnp.arange(2.0))), [-1.0, 0.0])
    assert _xla._accepted((("xla_no_such_option", 1),)) is False
    assert _xla._accepted((("xla_cpu_prefer_vector_width", 512),)) is True
