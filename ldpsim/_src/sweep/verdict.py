"""Converged accuracy vs clients per round: means with confidence intervals, gaps, thresholds.

Input: a tidy results table from ``ldpsim sweep`` (one row per run and evaluated round), or
several of them concatenated with :func:`concat_results` (a grid run in pieces). A *run* is
one (setting, ε, clients per round m, seed); its *final accuracy* is that of its last
evaluated round. The *setting* of a private run is its ``neighbours`` column
(``add-remove``: sensitivity C, MindSpore's; ``replace``: replace-one, sensitivity 2C);
every ε = ∞ run is ``non-private``, whatever its ``neighbours`` column says (no noise is
added, so the relation does not enter), and is the baseline of every setting at its m.

Statistics (per setting, ε, m), with ``n`` seeds:

* mean final accuracy and its two-sided t-interval ``mean ± t_{1-α/2, n-1} · s/√n``
  (``s`` the sample standard deviation; no interval when ``n = 1``);
* the gap to the non-private baseline at the same m (private − non-private, so a loss is
  negative). *Paired* by seed when at least two seeds have both runs: the mean and
  t-interval of the per-seed differences over those common seeds. Otherwise *Welch*
  (unpaired, Welch–Satterthwaite degrees of freedom) when both sides have at least two
  seeds, else the difference of the means without an interval (``single``);
* per (setting, ε): the smallest tested m whose gap is within ``tolerance`` (1 point =
  0.01 accuracy) of non-private, judged two ways: by the gap's mean (``gap_mean ≥
  −tolerance``) and by the lower end of its interval (``gap_ci_low ≥ −tolerance``: the
  interval excludes a loss of more than a point; cells without an interval never pass).
  A private run *better* than non-private counts as within.

Privacy (per private setting and ε): the total ε over the run's rounds of the ideal
(unbounded) Gaussian with the run's σ, sensitivity and δ, composed by PLD with
:func:`ldpsim.privacy.ldp_epsilon` (a client taking part in every round: the bound for any
sampling), beside the runs' own ``epsilon_spent``, which composes the rounds the busiest
client actually took part in and is ``inf`` when the float32 sampler's bounded tails make δ
unreachable (docs/privacy_sharp_edges.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from ldpsim._src._checks import LdpsimError, check_nonnegative
from ldpsim._src.privacy.accountants.accounting import ldp_epsilon

__all__ = [
    "NON_PRIVATE",
    "SETTING_LABELS",
    "Verdict",
    "accuracy_by_round",
    "accuracy_verdict",
    "concat_results",
    "final_accuracy",
    "setting_label",
    "setting_order",
    "total_epsilon",
    "verdict_markdown",
]

NON_PRIVATE = "non-private"
#: Display names of the settings, in display order (tables and figures).
SETTING_LABELS = {
    NON_PRIVATE: "non-private",
    "add-remove": "MindSpore (add/remove, Δ = C)",
    "replace": "honest (replace-one, Δ = 2C)",
}


def setting_label(setting: str) -> str:
    """Display name of a setting (its ``neighbours`` value when unknown)."""
    return SETTING_LABELS.get(setting, str(setting))


def setting_order(settings: Iterable[str]) -> list[str]:
    """The settings present, known ones first in :data:`SETTING_LABELS` order."""
    present = list(dict.fromkeys(settings))
    return [s for s in SETTING_LABELS if s in present] + sorted(s for s in present if s not in SETTING_LABELS)
_RUN_KEYS = ["setting", "epsilon", "clients_per_round", "seed"]
_REQUIRED = ("epsilon", "clients_per_round", "seed", "round", "accuracy")


# --------------------------------------------------------------------------- input


def concat_results(paths: Iterable[str | Path]) -> pd.DataFrame:
    """Read result CSVs (the pieces of one grid) into one table, refusing duplicated runs.

    Rows are concatenated in the order given (``pd.concat``, columns unioned); a ``source``
    column records each row's file name. Two pieces holding the same run (setting, ε, m,
    seed) are refused, naming the run and both files: a grid's pieces must be disjoint.

    Raises:
        LdpsimError: no paths, a missing or unreadable file, a file without the columns
            of a sweep table, or a run present in two files.
    """
    paths = [Path(p) for p in paths]
    if not paths:
        raise LdpsimError("concat_results: no result files given")
    frames = []
    for path in paths:
        if not path.is_file():
            raise LdpsimError(f"results file {str(path)!r} not found")
        try:
            df = pd.read_csv(path)
        except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as err:
            raise LdpsimError(f"cannot read results file {str(path)!r}: {' '.join(str(err).split())}") from None
        _check_columns(df, str(path))
        frames.append(df.assign(source=path.name))
    seen: dict[tuple, str] = {}
    for df in frames:
        runs = _with_setting(df)[_RUN_KEYS + ["source"]].drop_duplicates(_RUN_KEYS)
        for row in runs.itertuples(index=False):
            key = tuple(row[:4])
            if key in seen:
                raise LdpsimError(
                    f"run setting={key[0]}, epsilon={key[1]:g}, clients_per_round={key[2]}, "
                    f"seed={key[3]} is in both {seen[key]!r} and {row.source!r}; the pieces of a "
                    "grid must not overlap")
            seen[key] = row.source
    return pd.concat(frames, ignore_index=True)


def _check_columns(df: pd.DataFrame, what: str) -> None:
    missing = [c for c in _REQUIRED if c not in df.columns]
    if missing:
        raise LdpsimError(f"{what}: missing column(s) {', '.join(missing)} of a sweep results table "
                          f"(it has: {', '.join(map(str, df.columns))})")
    if df.empty:
        raise LdpsimError(f"{what}: no rows")


def _with_setting(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    df["epsilon"] = pd.to_numeric(df["epsilon"].replace({"inf": np.inf, "∞": np.inf}), errors="coerce")
    if df["epsilon"].isna().any():
        raise LdpsimError("epsilon column has values that are not numbers or inf")
    neighbours = df["neighbours"].astype(str) if "neighbours" in df.columns else pd.Series("add-remove", df.index)
    df["setting"] = np.where(np.isinf(df["epsilon"]), NON_PRIVATE, neighbours)
    return df


def final_accuracy(df: pd.DataFrame) -> pd.DataFrame:
    """One row per run: the last evaluated round of every (setting, ε, m, seed).

    Adds the ``setting`` column (see the module docstring). Non-private runs present in
    several pieces (e.g. under two ``neighbours`` values) are the same computation; the
    first one is kept.
    """
    _check_columns(df, "results table")
    df = _with_setting(df).reset_index(drop=True)
    df["round"] = pd.to_numeric(df["round"], errors="coerce")
    idx = df.groupby(_RUN_KEYS)["round"].idxmax()
    return df.loc[idx.to_numpy()].reset_index(drop=True)


# --------------------------------------------------------------------------- statistics


def _t_interval(values: np.ndarray, confidence: float) -> tuple[float, float, float]:
    """(mean, low, high) of the t-interval; NaN ends with fewer than 2 values."""
    mean = float(np.mean(values))
    if len(values) < 2:
        return mean, math.nan, math.nan
    half = stats.t.ppf(0.5 + confidence / 2, len(values) - 1) * np.std(values, ddof=1) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def _welch(a: np.ndarray, b: np.ndarray, confidence: float) -> tuple[float, float, float]:
    diff = float(np.mean(a) - np.mean(b))
    va, vb = np.var(a, ddof=1) / len(a), np.var(b, ddof=1) / len(b)
    se = math.sqrt(va + vb)
    if se == 0.0:
        return diff, diff, diff
    dof = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    half = stats.t.ppf(0.5 + confidence / 2, dof) * se
    return diff, diff - half, diff + half


def _gap(private: pd.Series, baseline: pd.Series, confidence: float) -> dict:
    """Gap private − baseline; both Series are final accuracy indexed by seed."""
    common = private.index.intersection(baseline.index)
    if len(common) >= 2:
        diffs = (private.loc[common] - baseline.loc[common]).to_numpy(float)
        mean, low, high = _t_interval(diffs, confidence)
        return dict(gap_mean=mean, gap_ci_low=low, gap_ci_high=high, gap_n=len(common), gap_method="paired")
    if len(private) >= 2 and len(baseline) >= 2:
        mean, low, high = _welch(private.to_numpy(float), baseline.to_numpy(float), confidence)
        return dict(gap_mean=mean, gap_ci_low=low, gap_ci_high=high,
                    gap_n=min(len(private), len(baseline)), gap_method="welch")
    return dict(gap_mean=float(private.mean() - baseline.mean()), gap_ci_low=math.nan,
                gap_ci_high=math.nan, gap_n=min(len(private), len(baseline)), gap_method="single")


def accuracy_by_round(df: pd.DataFrame, *, confidence: float = 0.95, metric: str = "accuracy") -> pd.DataFrame:
    """Learning curves: per (setting, ε, m, round) the mean of ``metric`` over seeds and its t-interval.

    Returns:
        Columns ``setting, epsilon, clients_per_round, round, n, mean, ci_low, ci_high,
        confidence`` (NaN interval ends where only one seed has that round).
    """
    _check_columns(df, "results table")
    if metric not in df.columns:
        raise LdpsimError(f"no column {metric!r} in the results table")
    df = _with_setting(df)
    rows = []
    for (setting, eps, m, rnd), g in df.groupby(["setting", "epsilon", "clients_per_round", "round"], sort=True):
        values = g.drop_duplicates("seed")[metric].to_numpy(float)
        mean, low, high = _t_interval(values, confidence)
        rows.append(dict(setting=setting, epsilon=eps, clients_per_round=int(m), round=int(rnd), n=len(values),
                         mean=mean, ci_low=low, ci_high=high, confidence=float(confidence)))
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class Verdict:
    """The three tables of :func:`accuracy_verdict` (pandas DataFrames).

    Attributes:
        cells: one row per (setting, ε, clients_per_round): ``n``, ``seeds``,
            ``final_round``, ``accuracy_mean``, ``accuracy_std``, ``accuracy_ci_low``,
            ``accuracy_ci_high``, ``baseline_mean`` (non-private mean at that m, all its
            seeds), ``gap_mean``, ``gap_ci_low``, ``gap_ci_high``, ``gap_n``, ``gap_method``
            (``paired``, ``welch``, ``single``; empty for the baseline and where it is
            missing), ``max_participation`` and ``epsilon_spent`` (largest over seeds).
        thresholds: one row per private (setting, ε): ``tested`` (the m with a baseline),
            ``m_by_mean``, ``m_by_ci`` (smallest m within tolerance; NaN if none),
            ``holds_above_mean``, ``holds_above_ci`` (no larger tested m fails; a cell
            without an interval, one seed, neither passes nor fails by CI).
        privacy: one row per private (setting, ε): see :func:`total_epsilon`.
        confidence: the intervals' confidence level.
        tolerance: the accuracy tolerance of the thresholds (0.01 = 1 point).
    """

    cells: pd.DataFrame
    thresholds: pd.DataFrame
    privacy: pd.DataFrame
    confidence: float
    tolerance: float


def _cells(finals: pd.DataFrame, confidence: float) -> pd.DataFrame:
    base = finals[finals["setting"] == NON_PRIVATE].set_index(["clients_per_round", "seed"])["accuracy"]
    rows = []
    for (setting, eps, m), g in finals.groupby(["setting", "epsilon", "clients_per_round"], sort=True):
        acc = g.set_index("seed")["accuracy"].astype(float).sort_index()
        mean, low, high = _t_interval(acc.to_numpy(), confidence)
        row = dict(setting=setting, epsilon=eps, clients_per_round=int(m), n=len(acc),
                   seeds=",".join(str(int(s)) for s in acc.index), final_round=int(g["round"].min()),
                   accuracy_mean=mean, accuracy_std=float(acc.std(ddof=1)) if len(acc) > 1 else math.nan,
                   accuracy_ci_low=low, accuracy_ci_high=high, baseline_mean=math.nan,
                   gap_mean=math.nan, gap_ci_low=math.nan, gap_ci_high=math.nan, gap_n=0, gap_method="",
                   max_participation=g["max_participation"].max() if "max_participation" in g else math.nan,
                   epsilon_spent=g["epsilon_spent"].max() if "epsilon_spent" in g else math.nan)
        if g["round"].nunique() > 1:
            raise LdpsimError(f"setting={setting}, epsilon={eps:g}, clients_per_round={m}: the runs end "
                              f"at different rounds ({sorted(g['round'].unique())}); compare runs of one length")
        if m in base.index.get_level_values(0):
            ref = base.loc[m].astype(float).sort_index()
            row["baseline_mean"] = float(ref.mean())
            if setting != NON_PRIVATE:
                ref_round = finals.loc[(finals["setting"] == NON_PRIVATE) & (finals["clients_per_round"] == m), "round"]
                if set(ref_round) != {row["final_round"]}:
                    raise LdpsimError(f"setting={setting}, epsilon={eps:g}, clients_per_round={m}: the runs end "
                                      f"at round {row['final_round']} but the non-private ones at "
                                      f"{sorted(set(ref_round))}; compare runs of one length")
                row.update(_gap(acc, ref, confidence))
        rows.append(row)
    return pd.DataFrame(rows)


def _thresholds(cells: pd.DataFrame, tolerance: float) -> pd.DataFrame:
    rows = []
    private = cells[(cells["setting"] != NON_PRIVATE) & cells["baseline_mean"].notna()]
    for (setting, eps), g in private.groupby(["setting", "epsilon"], sort=True):
        g = g.sort_values("clients_per_round")
        row = dict(setting=setting, epsilon=eps, tested=",".join(str(m) for m in g["clients_per_round"]))
        for name, column in (("mean", "gap_mean"), ("ci", "gap_ci_low")):
            known = g[column].notna().to_numpy()  # no interval (one seed): neither in nor out
            ok = known & (g[column] >= -tolerance).to_numpy()
            first = int(np.argmax(ok)) if ok.any() else None
            row[f"m_by_{name}"] = float(g["clients_per_round"].iloc[first]) if first is not None else math.nan
            row[f"holds_above_{name}"] = bool((ok | ~known)[first:].all()) if first is not None else False
        rows.append(row)
    return pd.DataFrame(rows, columns=["setting", "epsilon", "tested", "m_by_mean", "holds_above_mean",
                                       "m_by_ci", "holds_above_ci"])


#: Relative difference of σ below which runs of one (setting, ε) count as one calibration
#: (:func:`total_epsilon`): ldpsim's calibration of ε = 50 per round at δ = 5e-5 gave
#: σ = 0.1446534 in November 2026 and 0.1446548 in December (1e-5 relative).
SIGMA_RTOL = 1e-3


def total_epsilon(finals: pd.DataFrame, *, method: str = "pld") -> pd.DataFrame:
    """Total ε over the rounds of each private (setting, ε), ideal Gaussian, beside the runs' own.

    Args:
        finals: :func:`final_accuracy`'s table (needs ``sigma``, ``sensitivity``,
            ``delta``; ``epsilon_spent``, ``max_participation`` and
            ``sampler_delta_floor`` are reported when present).
        method: the composition of :func:`ldpsim.privacy.ldp_epsilon` (``pld`` by
            default; ``analytic`` is exact for Gaussians and faster).

    Returns:
        One row per private (setting, ε): ``sigma``, ``sensitivity``, ``delta``,
        ``rounds`` (the final round), ``epsilon_total`` (composition of ``rounds``
        Gaussians with multiplier σ/Δ at δ: a client in every round),
        ``epsilon_spent_min``/``_max`` (the runs' own, over m and seeds: the busiest
        client's participations with the sampler floor; may be ``inf``),
        ``max_participation_min``/``_max`` and ``sampler_delta_floor``.
        Runs of one (setting, ε) whose σ differ by at most :data:`SIGMA_RTOL` relative
        (the calibration of one ε by two versions of ldpsim) are composed at the smallest
        σ, the weakest of their guarantees; ``sigma_max`` gives the largest.

    Raises:
        LdpsimError: the runs of one (setting, ε) differ in Δ, δ or the number of rounds,
            or in σ by more than :data:`SIGMA_RTOL`.
    """
    rows = []
    private = finals[finals["setting"] != NON_PRIVATE]
    for column in ("sigma", "sensitivity", "delta"):
        if column not in private.columns:
            raise LdpsimError(f"total_epsilon needs the column {column!r} (a sweep results table has it)")
    for (setting, eps), g in private.groupby(["setting", "epsilon"], sort=True):
        values = {}
        for column in ("sigma", "sensitivity", "delta", "round"):
            uniq = pd.unique(g[column].astype(float))
            if column == "sigma" and len(uniq) > 1 and uniq.max() <= uniq.min() * (1 + SIGMA_RTOL):
                uniq = np.array([uniq.min()])
            if len(uniq) != 1:
                raise LdpsimError(f"setting={setting}, epsilon={eps:g}: the runs differ in {column} "
                                  f"({', '.join(f'{v:g}' for v in uniq)}); one total ε needs one value")
            values[column] = float(uniq[0])
        rounds = int(values["round"])
        report = ldp_epsilon("gaussian", sensitivity=values["sensitivity"], rounds=rounds,
                             delta=values["delta"], sigma=values["sigma"], method=method,
                             sampler="ideal")   # the ideal Gaussian; the runs' own is beside it
        spent = g["epsilon_spent"].astype(float) if "epsilon_spent" in g else pd.Series([math.nan])
        part = g["max_participation"].astype(float) if "max_participation" in g else pd.Series([math.nan])
        floor = g["sampler_delta_floor"].astype(float).max() if "sampler_delta_floor" in g else math.nan
        rows.append(dict(setting=setting, epsilon=eps, sigma=values["sigma"],
                         sigma_max=float(g["sigma"].astype(float).max()),
                         sensitivity=values["sensitivity"],
                         delta=values["delta"], rounds=rounds, epsilon_total=report.epsilon, method=report.method,
                         epsilon_spent_min=spent.min(), epsilon_spent_max=spent.max(),
                         max_participation_min=part.min(), max_participation_max=part.max(),
                         sampler_delta_floor=floor))
    return pd.DataFrame(rows)


def accuracy_verdict(df: pd.DataFrame, *, confidence: float = 0.95, tolerance: float = 0.01,
                     method: str | None = "pld") -> Verdict:
    """Final accuracy with t-intervals, gaps to non-private, thresholds and total ε.

    Args:
        df: a sweep results table (rows per run and evaluated round), e.g. from
            :func:`concat_results`.
        confidence: level of every interval, in (0, 1).
        tolerance: how far below non-private still counts as "within" (0.01 = 1 point).
        method: composition method of the total ε (see :func:`total_epsilon`); ``None``
            skips it (``privacy`` is then empty: the PLD takes seconds per ε).

    Returns:
        A :class:`Verdict`.

    Example:
        >>> import pandas as pd
        >>> rows = [dict(epsilon=e, clients_per_round=100, seed=s, round=5, accuracy=a)
        ...         for e, s, a in [(float("inf"), 0, 0.90), (float("inf"), 1, 0.92),
        ...                         (10.0, 0, 0.89), (10.0, 1, 0.90)]]
        >>> v = accuracy_verdict(pd.DataFrame(rows), method="analytic")  # doctest: +SKIP
    """
    if not 0.0 < float(confidence) < 1.0:
        raise LdpsimError(f"confidence must be in (0, 1), got {confidence!r}")
    tolerance = check_nonnegative("tolerance", tolerance)
    finals = final_accuracy(df)
    cells = _cells(finals, float(confidence))
    private = (finals["setting"] != NON_PRIVATE).any()
    privacy = total_epsilon(finals, method=method) if method is not None and private else pd.DataFrame()
    return Verdict(cells, _thresholds(cells, tolerance), privacy, float(confidence), tolerance)


# --------------------------------------------------------------------------- markdown


def _eps(e: float) -> str:
    return "∞" if math.isinf(e) else f"{e:g}"


def _m(m: float) -> str:
    return "—" if m is None or (isinstance(m, float) and math.isnan(m)) else f"{int(m):,}"


def _pm(mean: float, low: float, high: float, scale: float = 1.0, digits: int = 3) -> str:
    if math.isnan(mean):
        return "—"
    if math.isnan(low):
        return f"{mean * scale:.{digits}f}"
    return f"{mean * scale:.{digits}f} [{low * scale:.{digits}f}, {high * scale:.{digits}f}]"


def _range(lo: float, hi: float, digits: int = 1) -> str:
    if math.isnan(lo):
        return "—"

    def fmt(v: float) -> str:
        return "inf" if math.isinf(v) else f"{v:,.{digits}f}"

    return fmt(lo) if lo == hi else f"{fmt(lo)}–{fmt(hi)}"


def verdict_markdown(verdict: Verdict, *, settings: Sequence[str] | None = None) -> str:
    """The verdict as Markdown: accuracy, gap, threshold and privacy tables.

    Accuracy cells read ``mean [CI]`` (n seeds in the header row); gaps are in points
    (percentage points of accuracy, private − non-private).
    """
    cells = verdict.cells
    pct = f"{verdict.confidence:.0%}"
    tol = f"{verdict.tolerance * 100:g}"
    order = list(settings) if settings is not None else setting_order(cells["setting"])
    ms = sorted(cells["clients_per_round"].unique())
    out = [f"**Final test accuracy, mean [{pct} t-interval over seeds]** (n = seeds per cell)", "",
           "| setting | ε | " + " | ".join(f"m = {m:,}" for m in ms) + " |",
           "|---|---|" + "---|" * len(ms)]
    for setting in order:
        sub = cells[cells["setting"] == setting]
        for eps, g in sub.groupby("epsilon", sort=True):
            by_m = g.set_index("clients_per_round")
            vals = []
            for m in ms:
                r = by_m.loc[m] if m in by_m.index else None
                vals.append("" if r is None else
                            f"{_pm(r.accuracy_mean, r.accuracy_ci_low, r.accuracy_ci_high)} (n = {r.n})")
            out.append(f"| {setting_label(setting)} | {_eps(eps)} | " + " | ".join(vals) + " |")
    out += ["", f"**Gap to non-private at the same m, in points, mean [{pct} interval]** "
            "(paired by seed; `w`: Welch, unpaired; no interval with one seed)", "",
            "| setting | ε | " + " | ".join(f"m = {m:,}" for m in ms) + " |",
            "|---|---|" + "---|" * len(ms)]
    for setting in order:
        if setting == NON_PRIVATE:
            continue
        for eps, g in cells[cells["setting"] == setting].groupby("epsilon", sort=True):
            by_m = g.set_index("clients_per_round")
            vals = []
            for m in ms:
                if m not in by_m.index or math.isnan(by_m.loc[m, "gap_mean"]):
                    vals.append("")
                    continue
                r = by_m.loc[m]
                mark = " w" if r.gap_method == "welch" else ""
                vals.append(f"{_pm(r.gap_mean, r.gap_ci_low, r.gap_ci_high, 100, 1)}{mark}")
            out.append(f"| {setting_label(setting)} | {_eps(eps)} | " + " | ".join(vals) + " |")
    th = verdict.thresholds
    if not th.empty:
        out += ["", f"**Smallest m within {tol} point(s) of non-private** (by the gap's mean; by its "
                f"{pct} interval's lower end, which needs 2 seeds or more; `*`: a larger tested m falls outside "
                "again; —: none)", "",
                "| setting | ε | m tested | by mean | by CI lower end |", "|---|---|---|---|---|"]
        for r in th.itertuples(index=False):
            by_mean = _m(r.m_by_mean) + ("" if r.holds_above_mean or math.isnan(r.m_by_mean) else " *")
            by_ci = _m(r.m_by_ci) + ("" if r.holds_above_ci or math.isnan(r.m_by_ci) else " *")
            tested = ", ".join(f"{int(m):,}" for m in r.tested.split(","))
            out.append(f"| {setting_label(r.setting)} | {_eps(r.epsilon)} | {tested} | {by_mean} | {by_ci} |")
    pr = verdict.privacy
    if not pr.empty:
        out += ["", "**Privacy per client**: ε per round as configured; total over all rounds by "
                "composition of the ideal (unbounded) Gaussian; the runs' own `epsilon_spent` "
                "(the busiest client's participations; inf where the float32 sampler floor exceeds δ)", "",
                "| setting | ε per round | σ | Δ | δ | rounds | total ε (ideal, all rounds) | "
                "runs' epsilon_spent | busiest client's rounds |", "|---|---|---|---|---|---|---|---|---|"]
        for r in pr.itertuples(index=False):
            out.append(f"| {setting_label(r.setting)} | {_eps(r.epsilon)} | {r.sigma:.4g} | {r.sensitivity:g} | {r.delta:.3g} | "
                       f"{r.rounds} | {r.epsilon_total:,.1f} ({r.method}) | "
                       f"{_range(r.epsilon_spent_min, r.epsilon_spent_max)} | "
                       f"{_range(r.max_participation_min, r.max_participation_max, 0)} |")
    return "\n".join(out) + "\n"
