"""A persistent cache of compiled XLA programs, so that a run does not compile again what an
earlier process compiled.

Compiling a training round is most of a short run's cost on CPU: a 3-round MNIST / LeNet-5
``ldpsim run`` took 76.0 CPU-s with an empty cache and 37.2 with a warm one (whole process;
``docs/uses/cli.md``). JAX keeps such a cache when
``jax_compilation_cache_dir`` is set (its key covers the program, the jax and XLA versions, the
XLA flags and the device, so a changed setting compiles anew); :func:`enable_compilation_cache`
sets it, without overriding a cache the user configured for JAX.

The ``ldpsim`` command and the experiment drivers enable it on their start, in
``~/.cache/ldpsim/xla`` (``$XDG_CACHE_HOME/ldpsim/xla`` where that is set), bounded to
:data:`DEFAULT_MAX_BYTES` (JAX evicts the least recently used programs beyond it). The
environment variable ``LDPSIM_COMPILATION_CACHE`` moves it (a folder) or turns it off (``off``,
``0``, ``false`` or ``no``). A script or notebook opts in by calling
``ldpsim.enable_compilation_cache()``; a library function never changes JAX's settings itself.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import warnings
from pathlib import Path

__all__ = ["DEFAULT_MAX_BYTES", "ENV", "default_cache_dir", "enable_compilation_cache"]

ENV = "LDPSIM_COMPILATION_CACHE"

#: The cache's size bound unless JAX's own ``jax_compilation_cache_max_size`` is set: 4 GiB
#: (a LeNet-5 round of one mode is 1-4 MB on disk).
DEFAULT_MAX_BYTES = 4 << 30

_OFF = ("off", "0", "false", "no", "none")


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/ldpsim/xla``, else ``~/.cache/ldpsim/xla``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ldpsim" / "xla"


def _jax_setting(name: str):
    """A JAX setting without importing JAX: its value when JAX is loaded, else the environment
    variable JAX reads it from at import."""
    if "jax" in sys.modules:
        return getattr(sys.modules["jax"].config, name)
    return os.environ.get(name.upper())


def enable_compilation_cache(path: str | os.PathLike | None = None, *,
                             max_bytes: int = DEFAULT_MAX_BYTES) -> str | None:
    """Keep compiled XLA programs on disk and reuse them in later processes.

    Args:
        path: the cache folder. ``None``: ``$LDPSIM_COMPILATION_CACHE`` when it names a
            folder, else :func:`default_cache_dir`.
        max_bytes: the cache's size bound (least recently used programs are evicted), used
            unless JAX's ``jax_compilation_cache_max_size`` is already set.

    Returns:
        The folder in use, or ``None`` when the cache stays off: ``LDPSIM_COMPILATION_CACHE``
        is ``off`` (with ``path=None``), or the folder cannot be created (a warning says why).
        A cache the user configured for JAX (``JAX_COMPILATION_CACHE_DIR`` or
        ``jax.config.update("jax_compilation_cache_dir", ...)``) is left as it is and
        returned.

    Works before or after JAX is imported (before: through the environment variables JAX
    reads at import, so importing ldpsim's command-line tools stays free of JAX).
    """
    current = _jax_setting("jax_compilation_cache_dir")
    if current:
        return str(current)
    if path is None:
        env = os.environ.get(ENV, "").strip()
        if env.lower() in _OFF:
            return None
        path = env or default_cache_dir()
    folder = Path(path).expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        warnings.warn(f"ldpsim: no compilation cache ({folder}: {err.strerror or err}); "
                      f"set {ENV}=off to silence this, or {ENV}=DIR to move it", stacklevel=2)
        return None
    max_set = _jax_setting("jax_compilation_cache_max_size")
    # JAX enforces the bound with the filelock package (a dependency of ldpsim); without it
    # a bound would make every cache read fail, so the cache is then left unbounded
    unset_max = (max_set in (None, "", -1, "-1")
                 and importlib.util.find_spec("filelock") is not None)
    if "jax" in sys.modules:
        config = sys.modules["jax"].config
        config.update("jax_compilation_cache_dir", str(folder))
        if unset_max:
            config.update("jax_compilation_cache_max_size", int(max_bytes))
    else:
        os.environ["JAX_COMPILATION_CACHE_DIR"] = str(folder)
        if unset_max:
            os.environ["JAX_COMPILATION_CACHE_MAX_SIZE"] = str(int(max_bytes))
    return str(folder)
