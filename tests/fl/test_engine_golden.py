"""The engine's golden histories: every engine path reruns to the history recorded in
tests/fixtures/engine_golden.json (written by tests/fixtures/make_engine_golden.py, which
lists the cases: every privacy mode, additive and report randomizers, DP-SGD clients).

Tolerance. The fixture is recorded under the test suite's XLA options (tests/conftest.py) and
records them with the jax/jaxlib versions and the CPU model. When this run has the same options,
versions and CPU model (XLA:CPU compiles for the host's vector units), the comparison is exact: every value bit-identical (a run is deterministic on one CPU: the
keys are positional, the programs fixed). Otherwise (LDPSIM_TEST_XLA_DEFAULTS=1, an XLA
without the emitter flag, another jax, another CPU) the last bits of a float may differ, and each float
must be within a relative RTOL = 1e-4 (or an absolute ATOL = 1e-6, for values near zero) of
the recorded one. Measured: the same cases compiled with XLA's default options
(``make_engine_golden.py --xla-flags '' --out OTHER.json``) differ from the fixture in 73 of
its values, the largest relative difference 5.7e-6 (the discrete mode's cosine at round 3;
every other case below 1e-6, i.e. float32 rounding of a few ulps compounded over 3 rounds),
so RTOL leaves a factor ~18; a change of behaviour (another key, noise scale, clip or
decoder) moves the loss and the noise norm by far more. Integers, strings and non-finite
values are always compared exactly. A jax upgrade that changes a random stream fails the
test: check that the change is only that, then rerun the script and commit the new fixture.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GOLDEN = json.loads((FIXTURES / "engine_golden.json").read_text())

#: Relative and absolute tolerance when the environment differs from the recorded one.
RTOL, ATOL = 1e-4, 1e-6


def _generator():
    spec = importlib.util.spec_from_file_location("make_engine_golden",
                                                  FIXTURES / "make_engine_golden.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _same_environment() -> bool:
    import jax
    import jaxlib

    rec = GOLDEN["environment"]
    flags = sorted(os.environ.get("XLA_FLAGS", "").split())
    return (rec["jax"], rec["jaxlib"], sorted(rec["xla_flags"].split()), rec.get("cpu")) == (
        jax.__version__, jaxlib.__version__, flags, _generator().cpu_model())


def compare(old: list[dict], new: list[dict], exact: bool) -> list[str]:
    """The differences between two histories (empty when they agree), one line each."""
    problems = []
    if len(old) != len(new):
        problems.append(f"{len(new)} rows, recorded {len(old)}")
    for i, (ro, rn) in enumerate(zip(old, new)):
        if set(ro) != set(rn):
            problems.append(f"row {i}: columns {sorted(set(ro) ^ set(rn))} differ")
        for c in sorted(set(ro) & set(rn)):
            a, b = ro[c], rn[c]
            if a == b:
                continue
            close = (not exact and isinstance(a, float) and isinstance(b, float)
                     and math.isclose(a, b, rel_tol=RTOL, abs_tol=ATOL))
            if not close:
                problems.append(f"row {i} {c}: {b!r}, recorded {a!r}")
    return problems


def test_fixture_lists_the_generators_cases():
    """The committed fixture is the one the committed script writes (same cases and settings),
    and it covers every privacy mode, both randomizer families and DP-SGD clients."""
    gen = _generator()
    assert set(GOLDEN["cases"]) == set(gen.CASES)
    for name, case in GOLDEN["cases"].items():
        assert case["settings"] == {**gen.BASE, **gen.CASES[name]}, name
        assert len(case["history"]) == case["settings"]["rounds"], name
    settings = [c["settings"] for c in GOLDEN["cases"].values()]
    modes = {s.get("privacy_mode", "ldp") for s in settings}
    assert modes == {"ldp", "mindspore", "central", "distributed", "discrete"}
    mechs = {s.get("mechanism", "gaussian") for s in settings if s.get("privacy_mode", "ldp") == "ldp"
             and "epsilon" in s}
    assert {"gaussian", "laplace", "privunitg", "fastprojunit"} <= mechs
    assert any(s.get("adaptive_clip") for s in settings)
    assert any(s.get("privacy_mode") == "central" and not s.get("adaptive_clip")
               for s in settings)
    assert any(s.get("dropout_rate", 0) > 0 for s in settings)
    assert any(s.get("client_dp") for s in settings)


@pytest.mark.slow   # one compilation per case
@pytest.mark.parametrize("name", sorted(GOLDEN["cases"]))
def test_engine_reproduces_golden_history(name):
    gen = _generator()
    case = GOLDEN["cases"][name]
    exact = _same_environment()
    problems = compare(case["history"], gen.run_case(name), exact=exact)
    how = "exactly" if exact else f"within rtol {RTOL:g}"
    assert not problems, f"{name} differs from its golden history ({how}):\n" + "\n".join(
        problems[:20])


def test_compare_catches_a_change():
    """``compare`` is not vacuous: a one-ulp change fails the exact check and passes the
    tolerant one; a change of 1e-3 fails both; a missing row fails."""
    old = [{"loss": 1.0, "round": 1, "accuracy": 0.5}]
    ulp = [{"loss": math.nextafter(1.0, 2.0), "round": 1, "accuracy": 0.5}]
    moved = [{"loss": 1.001, "round": 1, "accuracy": 0.5}]
    assert compare(old, old, exact=True) == []
    assert compare(old, ulp, exact=True) and not compare(old, ulp, exact=False)
    assert compare(old, moved, exact=False)
    assert compare(old, [], exact=False)
