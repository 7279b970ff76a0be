"""Verdict figures (CI error bars, learning curves, gap heat map) and experiments/figures.py."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from ldpsim import LdpsimError
from ldpsim.plots import plot_accuracy_ci, plot_curves_ci, plot_gap_table
from ldpsim.sweep import accuracy_by_round, accuracy_verdict
from verdict_fakes import verdict_table

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def verdict():
    return accuracy_verdict(verdict_table(), method=None)


def _labels(fig):
    return [t.get_text() for leg in fig.legends for t in leg.get_texts()]


def test_accuracy_ci_has_one_panel_per_setting_and_the_verdict_intervals(verdict, tmp_path):
    out = tmp_path / "acc.png"
    fig = plot_accuracy_ci(verdict, out)
    assert out.stat().st_size > 5_000
    assert [ax.get_title() for ax in fig.axes] == ["MindSpore (add/remove, Δ = C)", "honest (replace-one, Δ = 2C)"]
    assert _labels(fig) == ["ε = 10 per round", "ε = ∞ (no privacy)", "within 1 point of no privacy",
                            "no ε guarantee (epsilon_spent = ∞: sampler floor)"]
    ax = fig.axes[0]
    # The error bar of ε = 10 at m = 10 spans the verdict's t-interval.
    row = verdict.cells.query("setting == 'add-remove' and clients_per_round == 10").iloc[0]
    segments = [seg for coll in ax.collections if hasattr(coll, "get_segments") for seg in coll.get_segments()]
    # (x, low, high) of every bar; series are dodged sideways by at most 10^±0.05 on the log axis
    spans = [(s[0][0], s[0][1], s[1][1]) for s in segments if len(s) == 2]
    assert any(abs(x / 10 - 1) < 0.13 and (lo, hi) == pytest.approx((row.accuracy_ci_low, row.accuracy_ci_high))
               for x, lo, hi in spans)
    assert ax.get_xscale() == "log" and ax.get_ylim() == (0.0, 1.0)


def test_curves_ci_panels_and_missing_m_note(tmp_path):
    curves = accuracy_by_round(verdict_table())
    fig = plot_curves_ci(curves, tmp_path / "c.png", clients=(100, 1000, 10000))
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["MindSpore (add/remove, Δ = C), m = 100 (3 seeds)",
                      "MindSpore (add/remove, Δ = C), m = 1,000 (3 seeds)",
                      "honest (replace-one, Δ = 2C), m = 100 (1–3 seeds)",
                      "honest (replace-one, Δ = 2C), m = 1,000 (3 seeds)"]
    assert "no runs at m = 10,000" in fig._suptitle.get_text()
    with pytest.raises(LdpsimError, match="none of clients_per_round"):
        plot_curves_ci(curves, clients=(5,))


def test_gap_table_annotates_mean_interval_and_n(verdict, tmp_path):
    fig = plot_gap_table(verdict, tmp_path / "g.png")
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "-10.0\n[-12.5, -7.5]\nn = 3" in texts
    honest = [t.get_text() for t in fig.axes[1].texts]
    # The honest cells spent inf (no guarantee at their delta): flagged in the cell's text.
    assert "-0.3\nn = 1\nno ε guarantee" in honest and any(t.startswith("-6.0\n[") for t in honest)


def test_no_private_runs_is_an_error():
    table = verdict_table()
    v = accuracy_verdict(table[np.isinf(table["epsilon"])], method=None)
    with pytest.raises(LdpsimError, match="no private runs"):
        plot_accuracy_ci(v)


def _script(name: str):
    """Import experiments/<name>.py (a script, not a package module)."""
    spec = importlib.util.spec_from_file_location(f"experiments_{name}", REPO / "experiments" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_figures_script_draws_what_it_has_and_skips_the_rest(tmp_path, capsys):
    script = _script("figures")
    results, out = tmp_path / "results", tmp_path / "figs"
    results.mkdir()
    table = verdict_table()
    table[table["neighbours"] == "add-remove"].to_csv(results / "seed000_converged_ms.csv", index=False)
    table[table["neighbours"] == "replace"].to_csv(results / "seed000_converged_hon.csv", index=False)
    assert script.main(["--results", str(results), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    seed000 = [s.name for s in script.FIGURES if s.name.startswith("seed000")]
    assert sorted(p.name for p in out.glob("*.png")) == sorted(seed000)
    assert "skip  noise_lenet5_eps50.png: no noise_lenet5_eps50.csv" in text
    assert f"{len(seed000)} drawn, {len(script.FIGURES) - len(seed000)} skipped" in text and "0 failed" in text
    # CSVs present but without the runs a figure shows: skipped too, not failed
    table[table["clients_per_round"] == 10].to_csv(results / "seed000_converged_ms.csv", index=False)
    (results / "seed000_converged_hon.csv").unlink()
    assert script.main(["--results", str(results), "--out", str(out), "--only", "accuracy-vs-round"]) == 0
    assert "skip  seed000_converged_accuracy-vs-round.png: no runs at clients_per_round 1,000 or 10,000 yet " \
           "(the CSVs have 10)" in capsys.readouterr().out
    assert script.main(["--results", str(results), "--out", str(out), "--only", "nothing-like-this"]) == 2


def test_figures_script_names_every_docs_figure():
    """Every image the READMEs link under experiments/figures/ is one the script draws."""
    script = _script("figures")
    names = {s.name for s in script.FIGURES}
    text = (REPO / "experiments" / "README.md").read_text()
    linked = {part.split(")")[0].split("`")[0] for part in text.split("figures/")[1:] if ".png" in part[:80]}
    linked = {name[: name.index(".png") + 4] for name in linked if ".png" in name}
    assert linked and linked <= names, linked - names


def test_seed000_table_script_prints_the_verdict(tmp_path, capsys):
    mod = _script("seed000_table")
    verdict_table().to_csv(tmp_path / "seed000_converged_all.csv", index=False)
    assert mod.main(["--results", str(tmp_path), "--method", "analytic"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("From seed000_converged_all.csv.")
    assert "| MindSpore (add/remove, Δ = C) | 10 | 10, 100, 1,000 | 100 | 1,000 |" in text
    assert mod.main(["--results", str(tmp_path / "none")]) == 2


def test_seed000_table_default_is_the_exact_composition_and_agrees_with_pld(tmp_path, capsys):
    """The default (analytic: exact for Gaussians, seconds) prints the tables dp_accounting's
    PLD prints (minutes at the committed results' small multipliers), up to the method label."""
    mod = _script("seed000_table")
    verdict_table().to_csv(tmp_path / "seed000_converged_all.csv", index=False)
    assert mod.main(["--results", str(tmp_path)]) == 0
    exact = capsys.readouterr().out
    assert mod.main(["--results", str(tmp_path), "--method", "pld"]) == 0
    pld = capsys.readouterr().out
    assert "(analytic)" in exact and exact.replace("(analytic)", "(pld)") == pld
