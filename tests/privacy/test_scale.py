"""Scale: the noise study's memory is set by the chunk, not by n.

Two independent proofs:

* structural: the traced program of one per-client trial is the same for n = 10 and
  n = 10^6 (n is a traced loop bound) and none of its arrays, in any nested jaxpr, holds
  more than chunk × d elements;
* measured: the peak resident memory of a fresh process running n = 5·10^3 and one running
  n = 5·10^4 (d = 1,000) differ by far less than the 180 MB that a single n × d float32
  array would add.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ldpsim._src.privacy.analysis import averaging as A

ROOT = Path(__file__).resolve().parents[2]


def _subjaxprs(value):
    if hasattr(value, "eqns"):  # Jaxpr
        yield value
    elif hasattr(value, "jaxpr") and hasattr(value.jaxpr, "eqns"):  # ClosedJaxpr
        yield value.jaxpr
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _subjaxprs(v)


def _array_sizes(jaxpr):
    """Element counts of every variable in ``jaxpr`` and all nested jaxprs."""
    for v in list(jaxpr.invars) + list(jaxpr.constvars):
        yield math.prod(getattr(v.aval, "shape", ()))
    for eqn in jaxpr.eqns:
        for v in eqn.outvars:
            yield math.prod(getattr(v.aval, "shape", ()))
        for p in eqn.params.values():
            for sub in _subjaxprs(p):
                yield from _array_sizes(sub)


def _trial_jaxpr(n, dim, chunk, mechanism="gaussian"):
    def f(key, num_clients):
        return A._per_client_trial(key, num_clients, None, jnp.float32(1.0), jnp.float32(1.0),
                                   dim=dim, chunk=chunk, mechanism=mechanism)

    return jax.make_jaxpr(f)(jax.random.key(0), jnp.int32(n))


def test_per_client_program_does_not_depend_on_n_and_holds_at_most_a_chunk():
    dim, chunk = 5_000, 64
    for mechanism in ("gaussian", "laplace"):
        small = _trial_jaxpr(10, dim, chunk, mechanism)
        large = _trial_jaxpr(10**6, dim, chunk, mechanism)
        assert str(small) == str(large)  # n only enters as a traced loop bound
        biggest = max(_array_sizes(large.jaxpr))
        # The chunk's noise (and its threefry bits) is [chunk, d]; n·d = 5e9 would be 10^5 × more.
        assert chunk * dim <= biggest <= 2 * chunk * dim, (mechanism, biggest)


def test_simulate_average_passes_no_array_of_size_n():
    # Equal weights: nothing of size n crosses to the device, and one compiled trial serves
    # every n >= chunk (the loop bound is traced), so 10^6 clients cost no extra compilation.
    A._per_client_trial.clear_cache()
    for n in (200, 3_000, 10**6):
        A.simulate_average(jax.random.key(n), num_clients=n, dim=4, noise_scale=1.0, clip=1.0,
                           method="per-client", chunk_size=128)
    assert A._per_client_trial._cache_size() == 1


_CHILD = """
import json, sys, jax
from pathlib import Path
from ldpsim._src.privacy.analysis import averaging as A
n, d = int(sys.argv[1]), int(sys.argv[2])
out = A.simulate_average(jax.random.key(0), num_clients=n, dim=d, noise_scale=1.0, clip=1.0,
                         method="per-client")
hwm = [l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith("VmHWM:")]
print(json.dumps({"hwm_kb": int(hwm[0].split()[1]), "noise_sq": float(out.noise_sq)}))
"""


def _peak_rss_mb(n: int, dim: int) -> tuple[float, float]:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(n), str(dim)], env=env,
                          capture_output=True, text=True, timeout=120, check=True)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return out["hwm_kb"] / 1024.0, out["noise_sq"]


@pytest.mark.slow
def test_peak_memory_of_a_process_does_not_grow_with_n():
    if not Path("/proc/self/status").exists():
        pytest.skip("needs /proc (Linux) for VmHWM")
    dim = 1_000
    small, sq_small = _peak_rss_mb(5_000, dim)
    large, sq_large = _peak_rss_mb(50_000, dim)
    # One n × d float32 array at n = 5·10^4 would be 200 MB (180 MB more than at 5·10^3). The
    # margin of 100 MB covers allocator and compilation jitter between two processes; the
    # chunk buffer itself is 16 MiB.
    assert large - small < 100.0, (small, large)
    # And the draws were real: ||z̄||² ~ σ² χ²_d / n, mean d/n; a 0.7..1.3 window around it
    # is > 6 SDs (SD √(2/d) ≈ 4.5 %), false-failure rate < 1e-9.
    for sq, n in ((sq_small, 5_000), (sq_large, 50_000)):
        assert 0.7 < sq / (dim / n) < 1.3, (sq, n)
    assert np.isfinite(small) and small > 0


@pytest.mark.slow
def test_cli_noise_accepts_one_trial(tmp_path, capsys):
    # One trial is how n = 10^6 with --draw per-client is run: noise_norm_std is then NaN.
    import csv

    from ldpsim.cli import main

    out = tmp_path / "noise.csv"
    assert main(["noise", "--dim", "500", "--epsilon", "5", "--clients", "2000", "--trials", "1",
                 "--draw", "per-client", "--out", str(out), "--no-progress"]) == 0
    (row,) = list(csv.DictReader(open(out)))
    assert row["method"] == "per-client" and int(row["trials"]) == 1
    assert math.isnan(float(row["noise_norm_std"]))
    # ‖z̄‖/E‖z̄‖ has relative SD ≈ 1/√(2d) = 3.2 %: a ±25 % window is > 7 SDs (rate < 1e-12).
    assert float(row["noise_norm_mean"]) == pytest.approx(float(row["noise_norm_theory"]), rel=0.25)
    assert main(["noise", "--dim", "500", "--epsilon", "5", "--trials", "0", "--no-progress"]) == 2
    assert "trials" in capsys.readouterr().err
