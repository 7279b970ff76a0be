"""The documentation site builds with warnings as errors, and documents every public name.

``mkdocs build --strict`` (mkdocs.yml at the top of the repository) fails on any warning:
a broken internal link or anchor, a page missing from the navigation, a docstring griffe
cannot parse, a cross-reference mkdocstrings cannot resolve. The build is what CI runs
(the README's test command installs the ``docs`` extra); elsewhere, without mkdocs, the test
is skipped with the command that installs it. About 20-30 CPU-seconds (the API reference
loads every public module): marked slow.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PUBLIC = ["ldpsim", "ldpsim.privacy", "ldpsim.fl", "ldpsim.data", "ldpsim.models",
          "ldpsim.sweep", "ldpsim.audit", "ldpsim.plots", "ldpsim.cli", "ldpsim.attacks",
          "ldpsim.mechanism", "ldpsim.modes"]
# module -> its page under docs/api/ (the site's URL is api/<page>/)
PAGES = {name: "ldpsim" if name == "ldpsim" else name.split(".", 1)[1] for name in PUBLIC}


def _require_mkdocs():
    missing = [m for m in ("mkdocs", "material", "mkdocstrings_handlers.python", "mkdocs_jupyter")
               if importlib.util.find_spec(m.split(".")[0]) is None]
    if missing:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI must build the documentation, but {missing} are not installed: "
                        "install the docs extra (pip install -e \".[docs]\")")
        pytest.skip(f"{missing} not installed: pip install -e \".[docs]\" to build the site")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    _require_mkdocs()
    out = tmp_path_factory.mktemp("site")
    work = tmp_path_factory.mktemp("mkdocs_cwd")   # mkdocs-jupyter writes its .cache/ here
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           "NO_MKDOCS_2_WARNING": "1", "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(REPO / "mkdocs.yml"), "--site-dir", str(out)],
                          cwd=work, env=env, capture_output=True, text=True, timeout=900)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{log[-6000:]}"
    return out


@pytest.mark.slow
def test_the_site_builds_strictly_with_every_page(site):
    for page in ["index.html", "quickstart/index.html", "algorithms/index.html",
                 "privacy_sharp_edges/index.html", "experiments/index.html",
                 "experiments/mnist_converged/index.html", "tutorials/accuracy_vs_privacy/index.html",
                 "uses/cli/index.html", "uses/python/index.html", "uses/cite/index.html"]:
        assert (site / page).is_file(), page
    # the committed figures are part of the site, and the results pages show them
    assert (site / "figures" / "seed000_converged_accuracy-vs-clients.png").stat().st_size > 10_000
    assert "seed000_converged_accuracy-vs-clients.png" in (site / "experiments/mnist_converged/index.html").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("module", PUBLIC)
def test_the_api_reference_documents_every_public_name(site, module):
    html = (site / "api" / PAGES[module] / "index.html").read_text()
    names = importlib.import_module(module).__all__
    missing = [n for n in names if f'id="{module}.{n}"' not in html]
    assert not missing, f"{module}: no entry for {missing}"


@pytest.mark.slow
def test_the_tutorials_are_rendered_with_their_outputs(site):
    for name in ("accuracy_vs_privacy", "noise_cancellation", "mechanisms", "attacks_and_audits"):
        html = (site / "tutorials" / name / "index.html").read_text()
        assert "data:image/png;base64," in html, f"{name}: no figure in the rendered notebook"


def test_ci_runs_the_readme_test_command_verbatim():
    """.ci/run's last command is the README's test command, which installs the docs extra."""
    readme = (REPO / "README.md").read_text()
    ci = [line for line in (REPO / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")]
    command = ci[-1]
    assert command.endswith("pytest -n auto") and '".[test,tfds,docs]"' in command, command
    assert f"```bash\n{command}\n```" in readme, "the README's test command differs from .ci/run's"


def test_the_readme_links_resolve():
    import re

    for doc in (REPO / "README.md", REPO / "experiments" / "README.md"):
        for link in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text()):
            if not link.startswith(("http://", "https://")):
                assert (doc.parent / link).exists(), f"{doc.name}: broken link {link}"


def test_no_text_file_holds_a_control_character():
    """A Python string with a TeX macro and no r-prefix turns "\\v", "\\b", "\\f" into control
    characters ("\\varepsilon" became a vertical tab + "arepsilon" on one page): no Markdown,
    Python or notebook source may hold one (tab, newline and carriage return aside). Lines are
    split on "\\n" only: ``str.splitlines`` treats "\\v" and "\\f" as line breaks and would hide
    them."""
    import re

    bad = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
    hits = []
    for folder in ("docs", "ldpsim", "experiments", "benchmarks", "notebooks", "tests"):
        for path in sorted((REPO / folder).rglob("*")):
            if path.suffix in (".md", ".py", ".ipynb", ".toml") and path.is_file():
                for n, line in enumerate(path.read_text(errors="replace").split("\n"), 1):
                    if bad.search(line):
                        hits.append(f"{path.relative_to(REPO)}:{n}")
    for name in ("README.md", "mkdocs.yml", "pyproject.toml"):
        if bad.search((REPO / name).read_text()):
            hits.append(name)
    assert not hits, f"control characters in {hits[:20]}"


def test_script_help_descriptions_are_whole_sentences():
    """The experiment and benchmark scripts take their ``--help`` description from their
    docstring; where that is the first line only, the first line must be a whole sentence
    (a summary that wraps onto a second line printed cut off mid-phrase)."""
    import ast

    cut = []
    for folder in ("experiments", "benchmarks"):
        for path in sorted((REPO / folder).glob("*.py")):
            source = path.read_text()
            if "__doc__.splitlines()[0]" not in source:
                continue
            first = ast.get_docstring(ast.parse(source), clean=False).splitlines()[0].rstrip()
            if not first.endswith((".", ":", ")", "?")):
                cut.append(f"{path.relative_to(REPO)}: {first[-50:]!r}")
    assert not cut, f"--help descriptions cut mid-sentence: {cut}"
