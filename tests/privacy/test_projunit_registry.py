"""ProjUnit and FastProjUnit through the registry: one module plus one entry each reaches the
engine's configuration, the command line, the frontier (with its communication cost) and the
audit, with no other file naming them."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from ldpsim._src.privacy.analysis import frontier as fr
from ldpsim._src.privacy.randomizers import mechanism, projunit
from ldpsim._src.privacy import registry
from ldpsim.cli import main

NAMES = ("projunit", "fastprojunit")


@pytest.mark.parametrize("name", NAMES)
def test_registered_everywhere_from_one_entry(name):
    spec = registry.randomizer(name)
    assert spec.family == "report" and spec.guarantee == "pure"
    assert name in registry.engine_randomizers() and name in fr.VECTOR_MECHANISMS
    assert name in mechanism.REGISTRY and spec.uses("projection_dim")
    assert spec.uses("norm_epsilon") and not spec.uses("delta")
    assert mechanism.REGISTRY[name].unbiased == (name == "projunit")


@pytest.mark.parametrize("name, fast", [("projunit", False), ("fastprojunit", True)])
def test_registry_make_passes_the_projection_dim(name, fast):
    m = mechanism.make(name, epsilon=4.0, dim=300, projection_dim=24)
    assert (m.params.k, m.params.fast, m.params.dim) == (24, fast, 300)
    assert m.name == name and m.delta < 1e-12 and m.epsilon >= 4.0


def test_projection_dim_is_refused_for_other_randomizers(capsys):
    run = ["run", "--dataset", "synthetic", "--model", "logreg", "--population", "30",
           "--clients-per-round", "6", "--rounds", "1", "--local-steps", "1", "--no-progress",
           "--epsilon", "2"]
    assert main(run + ["--mechanism", "privunitg", "--projection-dim", "8"]) == 2
    err = capsys.readouterr().err
    assert "--projection-dim does not apply to --mechanism privunitg" in err


@pytest.mark.parametrize("name, dim, expect", [
    ("gaussian", 500, 500),          # the noisy vector
    ("privunitg", 500, 501),         # direction and norm
    ("projunit", 500, None),         # computed below
    ("signds", 2000, 2),             # one index (d = 2,000, sign_k = 0.01) and its sign
])
def test_message_size_counts_what_one_client_sends(name, dim, expect):
    m = fr.build_mechanism(name, epsilon=4.0, dim=dim)
    if name == "projunit":   # k = min(1000, d) floats, the norm, a 64-bit seed as 2 words
        expect = min(1000, dim) + 1 + 2
    assert fr.message_size(m, dim) == expect


def test_frontier_cell_at_the_papers_shape_reports_its_cost():
    # small n and d (the paper's d = 2^15, k = 1000 is the README's command; one trial here)
    row = fr.frontier_cell("fastprojunit", epsilon=8.0, dim=1024, clients=4, trials=2)
    m = fr.build_mechanism("fastprojunit", epsilon=8.0, dim=1024)
    assert row.floats_sent == m.params.k + 3 and row.floats_sent < 1024
    # the exact theory the row prints is the module's formula at a unit input
    exact = projunit.total_variance_formula(m.params, 1.0) / row.clients
    assert row.mse_theory == pytest.approx(exact, rel=1e-5)
    assert math.isfinite(row.mse) and row.mse > 0


def test_the_frontier_runs_one_cell_per_k_and_plots_a_series_per_k(tmp_path):
    """``frontier(projection_dims=...)``: a ProjUnit cell per k, the others once; each row's
    projection_dim is the k it ran; the figure draws one labelled series per k."""
    from ldpsim.plots import plot_frontier

    rows = fr.frontier(["gaussian", "fastprojunit"], [4.0], [64], [2], trials=2,
                       projection_dims=[4, 16])
    assert [(r.mechanism, r.projection_dim, r.floats_sent) for r in rows] == [
        ("gaussian", None, 64), ("fastprojunit", 4, 7), ("fastprojunit", 16, 19)]
    with pytest.raises(Exception, match="projection_dim applies to projunit, fastprojunit only"):
        fr.frontier(["gaussian"], [4.0], [64], [2], trials=2, projection_dims=[4])
    with pytest.raises(Exception, match="projection_dim applies to"):
        fr.build_mechanism("privunitg", epsilon=4.0, dim=64, projection_dim=4)
    fig = plot_frontier(pd.DataFrame([r.as_dict() for r in rows]), tmp_path / "f.png")
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert "FastProjUnit (k = 4)" in labels and "FastProjUnit (k = 16)" in labels


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_run_trains_with_projunit_from_the_command_line(name, tmp_path):
    out = tmp_path / "p.csv"
    assert main(["run", "--dataset", "synthetic", "--model", "logreg", "--population", "30",
                 "--clients-per-round", "6", "--rounds", "2", "--local-steps", "1",
                 "--no-progress", "--mechanism", name, "--epsilon", "4",
                 "--projection-dim", "8", "--out", str(out)]) == 0
    df = pd.read_csv(out)
    assert (df["mechanism"] == name).all()
    assert (df["epsilon_spent"] >= 4 * df["max_participation"]).all()
    assert (df["epsilon_spent"] < 4.01 * df["max_participation"]).all()
    assert (df["theory_noise_norm"] > 0).all() and (df["noise_norm"] > 0).all()


def test_the_simulation_choices_are_the_modules():
    from ldpsim._src.privacy import registry
    from ldpsim._src.privacy.randomizers import projunit

    users, spec = registry.option_help("projunit_simulation")
    assert users == ("projunit",) and spec.choices == projunit.SIMULATIONS
