"""benchmarks/random_bits.py runs, and its two variants compute the same thing."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "random_bits.py"


def _module():
    spec = importlib.util.spec_from_file_location("random_bits_benchmark", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_rows_agree_between_jax_bits_and_random_bits(capsys):
    mod = _module()
    mod.main(["--clients", "4", "--chunk", "2", "--dim", "1000", "--repeats", "1",
              "--only", "words,ddg,poisson"])
    out = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line.split()[-1] for line in out if line.split()
            and line.split()[0] in ("words", "ddg", "poisson")}
    assert rows == {"words": "True", "ddg": "True", "poisson": "True"}


def test_the_patch_puts_jax_random_bits_back_and_restores():
    mod = _module()
    from ldpsim._src.privacy.discrete import rounding
    from ldpsim._src.privacy.noise import sampling
    before = (rounding.random_bits, sampling.random_bits)
    with mod.jax_bits_everywhere():
        assert rounding.random_bits is mod._jax_bits and sampling.random_bits is mod._jax_bits
        key = jax.random.key(0)
        assert (rounding.random_bits(key, (8,)) == jax.random.bits(key, (8,))).all()
    assert (rounding.random_bits, sampling.random_bits) == before


def test_the_patch_reaches_every_module_that_imports_random_bits():
    """A module that imports ``random_bits`` by name and escaped the patch would make the
    benchmark's "jax" variant partly the fast one."""
    mod = _module()
    root = SCRIPT.parents[1] / "ldpsim"
    importers = {".".join(p.relative_to(root.parent).with_suffix("").parts)
                 for p in root.rglob("*.py") if "import random_bits" in p.read_text()}
    assert importers   # the package does import it
    found = {m.__name__ for m in mod._importers()}
    assert importers <= found, importers - found
