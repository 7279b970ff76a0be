"""The notebooks run end to end (small default settings) and are committed without outputs.

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

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
KERNEL = "ldpsim-test"
CELL_TIMEOUT_S = 300  # generous per cell: the machine running CI may be loaded


def test_the_expected_notebooks_exist():
    assert {p.name for p in NOTEBOOKS} >= {"accuracy_vs_privacy.ipynb", "noise_cancellation.ipynb"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_committed_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{path.name}: a code cell has outputs; strip them before committing"
            assert cell.execution_count is None, f"{path.name}: a code cell has an execution count"


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


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_executes(path, kernel_env):
    nb = nbformat.read(path, as_version=4)
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
