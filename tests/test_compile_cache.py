"""ldpsim.enable_compilation_cache: where the cache goes, what turns it off, that a setting the
user made for JAX wins, and that a second process really reuses a compiled program.

Each case runs in a fresh interpreter (the setting is process-wide and JAX reads it at
import), with the suite's own cache variables removed from its environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

_CLEAR = ("JAX_COMPILATION_CACHE_DIR", "JAX_COMPILATION_CACHE_MAX_SIZE",
          "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES",
          "LDPSIM_COMPILATION_CACHE", "XDG_CACHE_HOME")


def _run(code: str, tmp_path, **env) -> dict:
    base = {k: v for k, v in os.environ.items() if k not in _CLEAR}
    base.update({"HOME": str(tmp_path / "home"), "JAX_PLATFORMS": "cpu", **env})
    proc = subprocess.run([sys.executable, "-c", code], env=base, capture_output=True, text=True,
                          cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


_REPORT = """
import json, sys, warnings
import ldpsim
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    got = ldpsim.enable_compilation_cache({arg})
import jax
print(json.dumps({{"got": got, "dir": jax.config.jax_compilation_cache_dir,
                  "max": jax.config.jax_compilation_cache_max_size,
                  "warnings": [str(x.message) for x in w]}}))
"""


def test_default_folder_before_jax_is_imported(tmp_path):
    out = _run(_REPORT.format(arg=""), tmp_path)
    want = str(tmp_path / "home" / ".cache" / "ldpsim" / "xla")
    assert out["got"] == want and out["dir"] == want
    assert out["max"] == 4 << 30
    assert os.path.isdir(want)


def test_xdg_cache_home_and_env_folder(tmp_path):
    out = _run(_REPORT.format(arg=""), tmp_path, XDG_CACHE_HOME=str(tmp_path / "xdg"))
    assert out["dir"] == str(tmp_path / "xdg" / "ldpsim" / "xla")
    out = _run(_REPORT.format(arg=""), tmp_path, LDPSIM_COMPILATION_CACHE=str(tmp_path / "c"))
    assert out["dir"] == str(tmp_path / "c")


@pytest.mark.parametrize("off", ["off", "0", "False", "no"])
def test_off(tmp_path, off):
    out = _run(_REPORT.format(arg=""), tmp_path, LDPSIM_COMPILATION_CACHE=off)
    assert out["got"] is None and out["dir"] is None
    assert not (tmp_path / "home" / ".cache").exists()


def test_the_users_jax_setting_wins(tmp_path):
    mine = str(tmp_path / "mine")
    out = _run(_REPORT.format(arg=repr(str(tmp_path / "other"))), tmp_path,
               JAX_COMPILATION_CACHE_DIR=mine, JAX_COMPILATION_CACHE_MAX_SIZE="1000")
    assert out["got"] == mine and out["dir"] == mine and out["max"] == 1000
    assert not (tmp_path / "other").exists()


def test_after_jax_is_imported(tmp_path):
    code = "import jax\n" + _REPORT.format(arg=repr(str(tmp_path / "late")))
    out = _run(code, tmp_path)
    assert out["dir"] == str(tmp_path / "late") and out["max"] == 4 << 30


def test_a_folder_that_cannot_be_made_warns_and_stays_off(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    out = _run(_REPORT.format(arg=repr(str(blocker / "sub"))), tmp_path)
    assert out["got"] is None and out["dir"] is None
    assert any("no compilation cache" in w for w in out["warnings"])


_COMPILE = """
import json
import ldpsim
ldpsim.enable_compilation_cache()
import jax, jax.numpy as jnp
from jax import monitoring
hits = []
monitoring.register_event_listener(lambda name, **kw: hits.append(name)
                                   if name == "/jax/compilation_cache/cache_hits" else None)
f = jax.jit(lambda x: jnp.sin(x) @ jnp.cos(x).T + 1.0)
f(jnp.ones((8, 8))).block_until_ready()
print(json.dumps({"hits": len(hits)}))
"""


def test_a_second_process_reuses_the_compiled_program(tmp_path):
    env = {"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
           "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1"}
    first = _run(_COMPILE, tmp_path, **env)
    folder = tmp_path / "home" / ".cache" / "ldpsim" / "xla"
    assert first["hits"] == 0 and any(folder.iterdir())
    assert _run(_COMPILE, tmp_path, **env)["hits"] >= 1
