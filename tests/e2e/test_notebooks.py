"""The notebooks run end to end (small default settings) and are committed with the outputs of
one clean run, which the documentation site shows (it does not execute them: the build stays
fast, and this file's slow test executes every notebook afresh from a clean kernel).

Refresh the committed outputs with
``jupyter nbconvert --to notebook --execute --inplace notebooks/*.ipynb`` (docs/uses/notebooks.md).

Each notebook is executed by nbclient in a fresh kernel started with *this* interpreter
(a temporary kernel spec, so a ``python`` elsewhere on PATH is never picked up), inside a
temporary folder (their results/ and figures land there), with a per-cell timeout.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from conftest import xla_default_flags

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
KERNEL = "ldpsim-test"
CELL_TIMEOUT_S = 1800  # generous per cell: the sweep cell of accuracy_vs_privacy took 17 min at load average 20


def test_the_expected_notebooks_exist():
    assert {p.name for p in NOTEBOOKS} >= {"accuracy_vs_privacy.ipynb", "noise_cancellation.ipynb"}


MAX_BYTES = 1_500_000  # a committed notebook with its figures stays small


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_committed_with_the_outputs_of_one_clean_run(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    counts = [c.execution_count for c in code]
    assert counts == list(range(1, len(code) + 1)), (
        f"{path.name}: execution counts {counts}: not one top-to-bottom run from a fresh kernel; "
        "refresh with jupyter nbconvert --to notebook --execute --inplace")
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, f"{path.name}: committed with an error output"
    images = [o for c in code for o in c.outputs if "image/png" in o.get("data", {})]
    assert images, f"{path.name}: committed without its figures"
    text = path.read_text()
    assert path.stat().st_size < MAX_BYTES, f"{path.name}: {path.stat().st_size} bytes"
    assert str(REPO) not in text and "/home/" not in text, f"{path.name}: outputs name a local path"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_defaults_to_small_settings(path):
    nb = nbformat.read(path, as_version=4)
    sources = [c.source for c in nb.cells if c.cell_type == "code"]
    assert any(s.lstrip().startswith("FULL = False") for s in sources), f"{path.name}: no `FULL = False` flag cell"


@pytest.fixture()
def kernel_env(tmp_path, monkeypatch):
    """A kernel spec named KERNEL that launches ipykernel with this interpreter."""
    spec = tmp_path / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "ldpsim test kernel", "language": "python",
    }))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    # The kernel imports ldpsim from this checkout even when it is not pip-installed.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    work = tmp_path / "work"
    work.mkdir()
    return work


#: Smaller settings for the executed run, papermill-style: a code cell assigning these names
#: (values as Python source) is inserted right after the notebook's parameters cell (the one
#: that starts ``FULL = False``), so every cell still runs, on a smaller grid. The committed
#: outputs stay those of the notebook's own defaults. Only where the default's size is not
#: what the run proves: accuracy_vs_privacy's quick grid reaches m = 1,000 for 10 rounds (about
#: 20 minutes on 2 loaded cores), and m = 10 and 100 for 3 rounds run the same sweep, verdict
#: and figures; attacks_and_audits keeps the attack without noise and one private point,
#: audits up to 10^4 trials and a pipeline audit of 300 canaries.
TEST_PARAMETERS = {
    "accuracy_vs_privacy.ipynb": {"CLIENTS_PER_ROUND": "[10, 100]", "ROUNDS": "3"},
    "attacks_and_audits.ipynb": {"QUICK_EPSILONS": '(float("inf"), 1e3)',
                                 "QUICK_TRIALS": "(10**3, 10**4)", "QUICK_CANARIES": "300"},
}


def _parameter_cell(name: str) -> str:
    return "\n".join(f"{key} = {value}" for key, value in TEST_PARAMETERS[name].items())


def _with_test_parameters(nb, name):
    """``nb`` with TEST_PARAMETERS[name] assigned right after its parameters cell; each name
    must be one the parameters cell assigns (a renamed parameter fails here, not silently)."""
    if name not in TEST_PARAMETERS:
        return nb
    (at,) = [i for i, c in enumerate(nb.cells)
             if c.cell_type == "code" and c.source.lstrip().startswith("FULL = False")]
    defaults: dict = {}
    exec(nb.cells[at].source, defaults)  # noqa: S102 - the notebook's own literal settings
    missing = set(TEST_PARAMETERS[name]) - set(defaults)
    assert not missing, f"{name}: its parameters cell assigns no {sorted(missing)}"
    nb.cells.insert(at + 1, nbformat.v4.new_code_cell(_parameter_cell(name)))
    return nb


def test_test_parameters_name_the_notebooks_parameters():
    for name in TEST_PARAMETERS:
        nb = _with_test_parameters(nbformat.read(REPO / "notebooks" / name, as_version=4), name)
        at = [c.source for c in nb.cells].index(_parameter_cell(name))
        assert nb.cells[at - 1].source.startswith("FULL = False")
        exec(_parameter_cell(name), {})  # noqa: S102 - valid Python


#: Notebooks whose kernel compiles with XLA's default options, as a user's kernel does.  The
#: suite's options (tests/conftest.py) save compile time but make long-running kernels several
#: times slower: noise_cancellation draws ~10^9 Gaussians at d = 61,706 (its noise_study calls:
#: 292 CPU-s with the suite's options, 25 with XLA's defaults).  The other notebooks are
#: compile-bound and cheaper with the suite's options (accuracy_vs_privacy 55 vs 78 CPU-s).
XLA_DEFAULTS = {"noise_cancellation.ipynb"}


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_executes(path, kernel_env, monkeypatch):
    if path.name in XLA_DEFAULTS:
        monkeypatch.setenv("XLA_FLAGS", xla_default_flags())
    nb = _with_test_parameters(nbformat.read(path, as_version=4), path.name)
    client = nbclient.NotebookClient(nb, kernel_name=KERNEL, timeout=CELL_TIMEOUT_S,
                                     resources={"metadata": {"path": str(kernel_env)}})
    client.execute()  # raises CellExecutionError (with the traceback) if any cell fails
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    # Every figure cell displayed PNGs, and they were written under the working folder.
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "display_data" and "image/png" in o.get("data", {})]
    assert images, f"{path.name} displayed no figure"
    written = list((kernel_env / "results" / "figures").glob("*.png"))
    assert written and all(p.stat().st_size > 1000 for p in written)
