"""XLA compile options for ldpsim's own jitted kernels.

On CPU, XLA vectorises elementwise loops for 256-bit registers by default. ldpsim's kernels
are dominated by such loops (the Threefry cipher and the Box-Muller transform of per-client
noise: ``benchmarks/noise_throughput.py``), and on CPUs with AVX-512 asking for 512-bit vectors
makes them up to 1.4x faster with bit-identical results (LLVM's "prefer vector width" is only a
preference: machines without AVX-512 keep 256-bit code). The option is passed per compiled
program through ``jax.jit(..., compiler_options=...)``, so it never changes how the user's
own JAX code is compiled.  Set ``LDPSIM_XLA_CPU_VECTOR_WIDTH=256`` to turn it off (or another
width to try it).
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable
from typing import Any

import jax

__all__ = ["compiler_options", "jit"]

_ENV = "LDPSIM_XLA_CPU_VECTOR_WIDTH"


@functools.cache
def _jit_takes_options() -> bool:
    return "compiler_options" in inspect.signature(jax.jit).parameters


def compiler_options(backend: str | None = None) -> dict[str, Any]:
    """The options ldpsim compiles its kernels with on ``backend`` (default: JAX's default)."""
    backend = backend or jax.default_backend()
    if backend != "cpu" or not _jit_takes_options():
        return {}
    width = os.environ.get(_ENV, "512").strip()
    if not width.isdigit() or int(width) not in (128, 256, 512):
        from ldpsim._src._checks import LdpsimError

        raise LdpsimError(f"{_ENV} must be 128, 256 or 512, got {width!r}")
    return {"xla_cpu_prefer_vector_width": int(width)}


@functools.cache
def _accepted(items: tuple) -> bool:
    """Whether this XLA compiles with these options (an older one rejects unknown ones)."""
    try:
        jax.jit(lambda: 0, compiler_options=dict(items)).lower().compile()
    except Exception:  # noqa: BLE001 - any failure means: compile without the options
        return False
    return True


def jit(fun: Callable | None = None, **jit_kwargs: Any) -> Any:
    """``jax.jit`` with :func:`compiler_options`, resolved at the first call (not at import).

    Usable as ``jit(f, static_argnames=...)`` or as a decorator ``@jit(static_argnums=...)``.
    The returned object forwards calls and attributes (``lower``, ...) to the jitted function.
    """
    if fun is None:
        return functools.partial(jit, **jit_kwargs)
    return _LazyJit(fun, jit_kwargs)


class _LazyJit:
    """Compiles with ldpsim's options when called at top level; inside an enclosing trace
    (another jit, vmap, grad) it is a plain ``jax.jit``, whose body the enclosing program
    inlines and compiles with the enclosing program's options (JAX accepts options on the
    top-level jit only)."""

    def __init__(self, fun: Callable, jit_kwargs: dict[str, Any]) -> None:
        self._fun, self._kwargs = fun, jit_kwargs
        self._plain = jax.jit(fun, **jit_kwargs)
        self._top: Any = None
        functools.update_wrapper(self, fun)

    def _get(self) -> Any:
        if self._top is None:
            opts = compiler_options()
            if opts and not _accepted(tuple(sorted(opts.items()))):
                opts = {}
            self._top = (jax.jit(self._fun, **self._kwargs, compiler_options=opts) if opts
                         else self._plain)
        return self._top

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        traced = any(isinstance(x, jax.core.Tracer)
                     for x in jax.tree_util.tree_leaves((args, kwargs)))
        if traced:
            return self._plain(*args, **kwargs)
        return self._get()(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._get(), name)
