"""accuracy_verdict on a small hand-made table: exact means, t-intervals, paired gaps, thresholds.

The expected intervals are checked two ways: against numbers worked by hand (with two
degrees of freedom the t quantile has the closed form (2p − 1)/√(2p(1 − p))) and against
scipy's own t-tests (``ttest_1samp``, ``ttest_rel``, ``ttest_ind(equal_var=False)`` and their
``confidence_interval``), which share no code with the module.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from ldpsim import LdpsimError
from ldpsim.privacy import analytic_gaussian_epsilon, ldp_epsilon
from ldpsim.sweep import (
    NON_PRIVATE,
    accuracy_by_round,
    accuracy_verdict,
    concat_results,
    final_accuracy,
    total_epsilon,
    verdict_markdown,
)
from verdict_fakes import FINAL
from verdict_fakes import verdict_table as _table

T975_2 = 0.95 / math.sqrt(2 * 0.975 * 0.025)  # t_{0.975} with 2 degrees of freedom: 4.3027
INF = math.inf


@pytest.fixture(scope="module")
def verdict():
    return accuracy_verdict(_table(), method="analytic")


def _cell(v, setting, eps, m):
    c = v.cells
    row = c[(c["setting"] == setting) & (c["epsilon"] == eps) & (c["clients_per_round"] == m)]
    assert len(row) == 1
    return row.iloc[0]


def test_final_accuracy_keeps_the_last_round_and_names_the_settings():
    finals = final_accuracy(_table())
    assert set(finals["round"]) == {10}
    assert len(finals) == sum(len(v) for v in FINAL.values())
    assert set(finals["setting"]) == {NON_PRIVATE, "add-remove", "replace"}
    assert (finals.loc[finals["setting"] == NON_PRIVATE, "epsilon"] == INF).all()


def test_mean_and_t_interval_exact(verdict):
    r = _cell(verdict, "add-remove", 10.0, 10)
    assert r.n == 3 and r.seeds == "0,1,2" and r.final_round == 10
    accs = np.array([0.80, 0.83, 0.83])
    half = T975_2 * accs.std(ddof=1) / math.sqrt(3)
    assert r.accuracy_mean == pytest.approx(0.82, abs=1e-15)
    assert (r.accuracy_ci_low, r.accuracy_ci_high) == pytest.approx((0.82 - half, 0.82 + half), abs=1e-12)
    ci = stats.ttest_1samp(accs, 0.0).confidence_interval(0.95)
    assert (r.accuracy_ci_low, r.accuracy_ci_high) == pytest.approx((ci.low, ci.high), abs=1e-12)
    # baseline row: itself, no gap
    b = _cell(verdict, NON_PRIVATE, INF, 10)
    assert b.accuracy_mean == pytest.approx(0.92) and b.baseline_mean == pytest.approx(0.92)
    assert math.isnan(b.gap_mean) and b.gap_method == ""


def test_gap_is_paired_by_seed(verdict):
    r = _cell(verdict, "add-remove", 10.0, 10)
    assert r.gap_method == "paired" and r.gap_n == 3
    diffs = np.array([-0.10, -0.09, -0.11])
    half = T975_2 * 0.01 / math.sqrt(3)
    assert r.gap_mean == pytest.approx(-0.10, abs=1e-12)
    assert (r.gap_ci_low, r.gap_ci_high) == pytest.approx((-0.10 - half, -0.10 + half), abs=1e-12)
    ci = stats.ttest_rel([0.80, 0.83, 0.83], [0.90, 0.92, 0.94]).confidence_interval(0.95)
    assert (r.gap_ci_low, r.gap_ci_high) == pytest.approx((ci.low, ci.high), abs=1e-12)
    assert diffs.mean() == pytest.approx(r.gap_mean)


def test_gap_is_welch_without_common_seeds_and_pointwise_with_one_seed(verdict):
    r = _cell(verdict, "replace", 10.0, 10)
    assert r.gap_method == "welch"
    ci = stats.ttest_ind([0.85, 0.87], [0.90, 0.92, 0.94], equal_var=False).confidence_interval(0.95)
    assert r.gap_mean == pytest.approx(0.86 - 0.92, abs=1e-12)
    assert (r.gap_ci_low, r.gap_ci_high) == pytest.approx((ci.low, ci.high), abs=1e-12)
    one = _cell(verdict, "replace", 10.0, 100)
    assert one.gap_method == "single" and one.n == 1
    assert math.isnan(one.accuracy_ci_low) and math.isnan(one.gap_ci_low)
    assert one.gap_mean == pytest.approx(0.95 - np.mean([0.95, 0.95, 0.96]), abs=1e-12)


def test_smallest_m_within_one_point_by_mean_and_by_ci(verdict):
    th = verdict.thresholds.set_index(["setting", "epsilon"])
    ms = th.loc[("add-remove", 10.0)]
    assert ms.tested == "10,100,1000"
    # m = 100: mean gap -0.33 points (within), its interval reaches -2.2 points (not within)
    assert ms.m_by_mean == 100 and ms.holds_above_mean
    assert ms.m_by_ci == 1000 and ms.holds_above_ci
    r100 = _cell(verdict, "add-remove", 10.0, 100)
    d = np.array([-0.01, 0.005, -0.005])
    assert r100.gap_ci_low == pytest.approx(d.mean() - T975_2 * d.std(ddof=1) / math.sqrt(3), abs=1e-12)
    assert r100.gap_ci_low < -0.01 < r100.gap_mean
    honest = th.loc[("replace", 10.0)]
    # m = 100 (one seed, gap -0.33 points) passes by mean; with no interval it never passes by CI
    assert honest.m_by_mean == 100 and math.isnan(honest.m_by_ci) and not honest.holds_above_ci


def test_a_larger_m_with_one_seed_neither_confirms_nor_breaks_the_ci_threshold():
    df = _table()
    extra = df[(df["clients_per_round"] == 1000) & (df["seed"] == 0) & (df["neighbours"] == "add-remove")]
    extra = extra.assign(clients_per_round=10000)
    extra.loc[extra["epsilon"] == 10.0, "accuracy"] -= 0.05  # 5 points below non-private
    th = accuracy_verdict(pd.concat([df, extra]), method=None).thresholds
    th = th.set_index(["setting", "epsilon"]).loc[("add-remove", 10.0)]
    assert th.tested == "10,100,1000,10000"
    assert th.m_by_ci == 1000 and th.holds_above_ci      # m = 10,000 has no interval
    assert th.m_by_mean == 100 and not th.holds_above_mean  # its mean is 5 points below


def test_threshold_flags_a_larger_m_that_falls_outside_again():
    df = _table()
    df.loc[(df["epsilon"] == 10.0) & (df["clients_per_round"] == 1000) & (df["neighbours"] == "add-remove"),
           "accuracy"] -= 0.05
    th = accuracy_verdict(df, method=None).thresholds.set_index(["setting", "epsilon"]).loc[("add-remove", 10.0)]
    assert th.m_by_mean == 100 and not th.holds_above_mean
    assert math.isnan(th.m_by_ci)


def test_total_epsilon_is_the_composed_ideal_gaussian(verdict):
    pr = verdict.privacy.set_index("setting")
    assert list(verdict.privacy["setting"]) == ["add-remove", "replace"]
    # 10 rounds of z = sigma / sensitivity = 2 compose exactly to one Gaussian with z / sqrt(10)
    want = analytic_gaussian_epsilon(2.0 / math.sqrt(10), 1e-5)
    for setting in ("add-remove", "replace"):
        assert pr.loc[setting, "rounds"] == 10
        assert pr.loc[setting, "epsilon_total"] == pytest.approx(want, rel=1e-9)
    assert pr.loc["add-remove", "epsilon_spent_min"] == pytest.approx(3.01)
    assert pr.loc["add-remove", "epsilon_spent_max"] == pytest.approx(4.0)
    assert pr.loc["replace", "epsilon_spent_max"] == INF  # reported beside, not replaced


def test_total_epsilon_by_pld_is_dp_accountings():
    finals = final_accuracy(_table())
    pld = total_epsilon(finals[finals["setting"] == "replace"])  # default method: PLD
    assert pld["method"].iloc[0] == "pld"
    direct = ldp_epsilon("gaussian", sensitivity=2.0, rounds=10, delta=1e-5, sigma=4.0, method="pld",
                         sampler="ideal")
    assert pld["epsilon_total"].iloc[0] == direct.epsilon
    exact = analytic_gaussian_epsilon(2.0 / math.sqrt(10), 1e-5)
    assert exact <= direct.epsilon <= exact * 1.01  # PLD is a (tight) upper bound


def test_total_epsilon_is_the_ideal_gaussians_where_the_float_sampler_has_none():
    """At a small σ the float32 sampler's bounded tails leave no finite ε after 100 rounds
    (the runs' own epsilon_spent is inf there); the total is the ideal Gaussian's, finite."""
    finals = final_accuracy(_table())
    g = finals[finals["setting"] == "replace"].assign(sigma=0.1846, delta=5e-5, round=100)
    row = total_epsilon(g, method="analytic").iloc[0]
    assert ldp_epsilon("gaussian", sensitivity=2.0, rounds=100, delta=5e-5, sigma=0.1846,
                       method="analytic").epsilon == INF   # the float sampler: none
    want = analytic_gaussian_epsilon(0.1846 / 2.0 / math.sqrt(100), 5e-5)
    assert row["epsilon_total"] == pytest.approx(want, rel=1e-9) and math.isfinite(want)


def test_total_epsilon_composes_nearly_equal_sigmas_at_the_smallest():
    # Two calibrations of one eps (1e-5 apart) compose at the smaller sigma (the weaker
    # guarantee); sigmas further apart than SIGMA_RTOL are still an error.
    from ldpsim._src.sweep.verdict import SIGMA_RTOL

    finals = final_accuracy(_table())
    rows = finals["setting"] == "replace"
    one = finals[rows].copy()
    base = total_epsilon(one, method="analytic")
    near = one.copy()
    near.loc[near.index[0], "sigma"] *= 1 + 1e-5
    got = total_epsilon(near, method="analytic")
    assert got["sigma"].iloc[0] == base["sigma"].iloc[0]
    assert got["sigma_max"].iloc[0] == pytest.approx(base["sigma"].iloc[0] * (1 + 1e-5))
    assert got["epsilon_total"].iloc[0] == base["epsilon_total"].iloc[0]
    low = one.copy()
    low.loc[low.index[0], "sigma"] *= 1 - 1e-5
    assert total_epsilon(low, method="analytic")["epsilon_total"].iloc[0] > base["epsilon_total"].iloc[0]
    far = one.copy()
    far.loc[far.index[0], "sigma"] *= 1 + 2 * SIGMA_RTOL
    with pytest.raises(LdpsimError, match="differ in sigma"):
        total_epsilon(far, method="analytic")


def test_non_private_runs_under_two_relations_count_once():
    df = _table()
    extra = df[(df["epsilon"] == INF)].assign(neighbours="replace")
    v = accuracy_verdict(pd.concat([df, extra]), method=None)
    assert _cell(v, NON_PRIVATE, INF, 10).n == 3


def test_runs_of_different_lengths_are_refused():
    df = _table()
    df = df[~((df["epsilon"] == INF) & (df["clients_per_round"] == 10) & (df["round"] == 10))]
    with pytest.raises(LdpsimError, match="round 10 but the non-private ones at"):
        accuracy_verdict(df, method=None)


def test_bad_arguments_are_named():
    with pytest.raises(LdpsimError, match="confidence"):
        accuracy_verdict(_table(), confidence=95)
    with pytest.raises(LdpsimError, match="missing column.*accuracy"):
        accuracy_verdict(_table().drop(columns="accuracy"))


def test_concat_results_joins_pieces_and_refuses_overlap(tmp_path):
    df = _table()
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    df[df["neighbours"] == "add-remove"].to_csv(a, index=False)
    df[df["neighbours"] == "replace"].to_csv(b, index=False)
    joined = concat_results([a, b])
    assert len(joined) == len(df) and set(joined["source"]) == {"a.csv", "b.csv"}
    assert accuracy_verdict(joined, method=None).cells.equals(accuracy_verdict(df, method=None).cells)
    c = tmp_path / "c.csv"
    df[(df["neighbours"] == "replace") & (df["seed"] == 0)].to_csv(c, index=False)
    with pytest.raises(LdpsimError, match=r"setting=replace, epsilon=10, clients_per_round=100, seed=0 "
                                          r"is in both 'b.csv' and 'c.csv'"):
        concat_results([a, b, c])
    with pytest.raises(LdpsimError, match="not found"):
        concat_results([tmp_path / "absent.csv"])


def test_accuracy_by_round_has_intervals_per_round():
    curves = accuracy_by_round(_table())
    r = curves[(curves["setting"] == "add-remove") & (curves["epsilon"] == 10.0)
               & (curves["clients_per_round"] == 10)].set_index("round")
    assert list(r.index) == [5, 10]
    assert r.loc[5, "mean"] == pytest.approx(0.52) and r.loc[5, "n"] == 3
    ci = stats.ttest_1samp([0.50, 0.53, 0.53], 0.0).confidence_interval(0.95)
    assert (r.loc[5, "ci_low"], r.loc[5, "ci_high"]) == pytest.approx((ci.low, ci.high), abs=1e-12)


def test_markdown_tables(verdict):
    text = verdict_markdown(verdict)
    assert "| non-private | ∞ | 0.920 [0.870, 0.970] (n = 3) |" in text
    assert "| MindSpore (add/remove, Δ = C) | 10 | -10.0 [-12.5, -7.5] |" in text
    assert "| honest (replace-one, Δ = 2C) | 10 | -6.0 [" in text and "] w |" in text
    assert "| MindSpore (add/remove, Δ = C) | 10 | 10, 100, 1,000 | 100 | 1,000 |" in text
    assert "| honest (replace-one, Δ = 2C) | 10 | 10, 100 | 100 | — |" in text
    assert "(analytic)" in text and "| inf |" in text
