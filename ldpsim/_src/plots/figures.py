"""Figures from the tidy results table (``ldpsim sweep``) or a noise table (``ldpsim noise``).

Every figure is built on a bare :class:`matplotlib.figure.Figure` (no pyplot, no global
backend switch, so it works headless and inside notebooks alike) and saved by the
suffix of ``out``: ``.png`` (150 dpi), ``.svg`` or ``.pdf``.

Statistics: a *run* is one cell of the sweep (one seed); its accuracy is that of its last
evaluated round. Points are the mean over seeds and bands are ± one standard deviation
over seeds (no band with a single seed).

Honesty marks: ``epsilon`` is the **per-round** local ε a client's randomizer is calibrated
to; what a client has spent over the run is ``epsilon_spent`` (the total, at the run's δ).
A private cell whose ``epsilon_spent`` is ``inf`` carries no ε guarantee at all (the
float32 sampler's bounded tails alone exceed δ; docs/privacy_sharp_edges.md): its points are
ringed in red, with a legend entry (:func:`no_guarantee`). ``accuracy-vs-epsilon`` can put
the total ε spent on the x axis instead (``epsilon_axis="total"``). Accuracy panels draw the
chance level ``1/num_classes`` of the dataset (:data:`NUM_CLASSES`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ldpsim._src._checks import LdpsimError, check_choice

__all__ = ["KINDS", "EPSILON_AXES", "NUM_CLASSES", "chance_level", "load_results", "no_guarantee",
           "plot"]

KINDS = ("accuracy-vs-epsilon", "accuracy-vs-clients", "noise-vs-clients", "convergence")
FORMATS = (".png", ".svg", ".pdf")
#: Settings that may vary across a results table and then distinguish series.
SETTING_COLUMNS = ("dataset", "model", "mechanism", "neighbours", "calibration", "delta", "clip",
                   "population", "partition", "local_steps", "client_lr")
METRIC_LABELS = {
    "accuracy": "test accuracy (fraction correct)",
    "loss": "test loss (cross-entropy, nats)",
}
_X_LABEL_EPS = "per-round local ε (each round a client takes part in; log scale)"
_X_LABEL_TOTAL = "total ε spent over the run (epsilon_spent of the busiest client; log scale)"
#: x axis of ``accuracy-vs-epsilon``: the per-round ``epsilon`` or the total ``epsilon_spent``.
EPSILON_AXES = ("per-round", "total")
#: Label classes of each dataset ldpsim loads (the chance accuracy is ``1/num_classes``);
#: checked against the loaders' own constants in the tests.
NUM_CLASSES = {"mnist": 10, "fashion_mnist": 10, "femnist": 62, "synthetic": 10,
               "synthetic_iid": 10, "shakespeare": 90}
NO_GUARANTEE_LABEL = "no ε guarantee (epsilon_spent = ∞: sampler floor)"
_NO_GUARANTEE_STYLE = dict(marker="o", s=110, facecolors="none", edgecolors="red", linewidths=1.5,
                           zorder=6)
_X_LABEL_CLIENTS = "clients per round m (log scale)"
#: Columns that only describe the privacy mechanism: meaningless (``none``, ``nan``) for the
#: ε = ∞ runs, so they are compared across the private runs only and never label ε = ∞.
PRIVACY_COLUMNS = ("mechanism", "neighbours", "calibration", "delta")
NO_PRIVACY_LABEL = "ε = ∞ (no privacy)"
#: Ordered colour map for finite ε (dark = strong privacy, bright = weak); ε = ∞ is black dashed.
EPS_CMAP = "plasma"
_LEGEND_OUTSIDE = dict(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize="small")


# --------------------------------------------------------------------------- data


def load_results(data: str | Path | pd.DataFrame) -> pd.DataFrame:
    """Read a results CSV (or take a DataFrame); ``inf`` ε values become ``math.inf``."""
    if isinstance(data, pd.DataFrame):
        return data.copy()
    path = Path(data)
    if not path.exists():
        raise LdpsimError(f"results file {str(path)!r} not found")
    if path.is_dir():
        raise LdpsimError(f"results file {str(path)!r} is a folder; give a CSV file")
    try:
        df = pd.read_csv(path)
    except (pd.errors.EmptyDataError, pd.errors.ParserError) as err:
        raise LdpsimError(f"cannot read results file {str(path)!r}: {' '.join(str(err).split())}") from None
    except UnicodeDecodeError as err:
        raise LdpsimError(f"results file {str(path)!r} is not UTF-8 text (byte at offset {err.start}); "
                          "is it binary or compressed?") from None
    except OSError as err:
        raise LdpsimError(f"cannot read results file {str(path)!r} ({err.strerror or err})") from None
    if df.empty:
        raise LdpsimError(f"results file {str(path)!r} has no rows")
    return df


def _require(df: pd.DataFrame, columns: Sequence[str], kind: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise LdpsimError(
            f"--kind {kind} needs the column(s) {', '.join(missing)}, which this table lacks "
            f"(it has: {', '.join(map(str, df.columns))})"
        )


def _numeric(df: pd.DataFrame, column: str) -> pd.DataFrame:
    df = df.copy()
    df[column] = pd.to_numeric(df[column].replace({"inf": np.inf, "∞": np.inf}), errors="coerce")
    return df


def _filter(df: pd.DataFrame, where: Mapping[str, Any] | None) -> pd.DataFrame:
    for column, value in (where or {}).items():
        if column not in df.columns:
            raise LdpsimError(f"--where {column}=...: no column {column!r} in the table")
        col = df[column]
        try:
            mask = np.isclose(pd.to_numeric(col, errors="raise").astype(float), float(value))
        except (ValueError, TypeError):
            mask = col.astype(str) == str(value)
        df = df[mask]
        if df.empty:
            raise LdpsimError(f"--where {column}={value}: no rows match (values: "
                              f"{', '.join(sorted(map(str, col.unique())))})")
    return df


def _run_columns(df: pd.DataFrame) -> list[str]:
    """Columns that identify a run. A sweep's ``cell`` names only its grid axes, so tables
    joined from pieces that differ in a fixed setting (e.g. ``neighbours``) reuse cell
    names: the setting columns are part of the key too."""
    settings = [c for c in SETTING_COLUMNS if c in df.columns]
    if "cell" in df.columns:
        return ["cell", *settings]
    return [c for c in ("epsilon", "clients_per_round", "seed") if c in df.columns] + settings


def _final_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The last evaluated round of every run."""
    if "round" not in df.columns:
        return df
    df = df.copy()
    df["_round"] = pd.to_numeric(df["round"], errors="coerce")
    idx = df.groupby(_run_columns(df), dropna=False)["_round"].idxmax()
    return df.loc[idx.dropna()].drop(columns="_round")


def no_guarantee(df: pd.DataFrame) -> pd.Series:
    """Rows of a private run (finite ``epsilon``) whose ``epsilon_spent`` is ``inf``: the run
    carries no ε guarantee at its δ (the sampler's floor). All False without the columns."""
    if "epsilon" not in df.columns or "epsilon_spent" not in df.columns:
        return pd.Series(False, index=df.index)
    eps = pd.to_numeric(df["epsilon"].replace({"inf": np.inf, "∞": np.inf}), errors="coerce")
    spent = pd.to_numeric(df["epsilon_spent"].replace({"inf": np.inf, "∞": np.inf}), errors="coerce")
    return pd.Series(np.isfinite(eps) & np.isposinf(spent), index=df.index)


def chance_level(df: pd.DataFrame) -> float | None:
    """``1/num_classes`` of the table's dataset (None when unknown or several differ)."""
    if "dataset" not in df.columns:
        return None
    classes = {NUM_CLASSES.get(str(d)) for d in df["dataset"].unique()}
    if len(classes) != 1 or None in classes:
        return None
    return 1.0 / classes.pop()


def _chance_line(ax, df: pd.DataFrame, metric: str, label: bool = True) -> None:
    level = chance_level(df) if metric == "accuracy" else None
    if level is not None:
        ax.axhline(level, color="grey", linestyle="-.", linewidth=1.0, zorder=1,
                   label=f"chance (1/{round(1 / level)} classes)" if label else None)


def _mark_no_guarantee(ax, x, y, flags) -> None:
    """Ring the points of cells without an ε guarantee (one legend entry per axes)."""
    flags = np.asarray(flags, dtype=bool)
    if not flags.any():
        return
    labelled = NO_GUARANTEE_LABEL in ax.get_legend_handles_labels()[1]
    ax.scatter(np.asarray(x, dtype=float)[flags], np.asarray(y, dtype=float)[flags],
               label=None if labelled else NO_GUARANTEE_LABEL, **_NO_GUARANTEE_STYLE)


def _reference_last(handles: list, labels: list) -> tuple[list, list]:
    """Legend entries with the series first and the marks and reference lines (no
    guarantee, chance, theory) after them."""
    refs = (NO_GUARANTEE_LABEL, "chance (", "theory")
    order = sorted(range(len(labels)), key=lambda i: labels[i].startswith(refs))
    return [handles[i] for i in order], [labels[i] for i in order]


def _legend(ax, **kwargs):
    handles, labels = _reference_last(*ax.get_legend_handles_labels())
    return ax.legend(handles, labels, **kwargs)


def _private_rows(df: pd.DataFrame) -> pd.DataFrame:
    if "epsilon" not in df.columns:
        return df
    eps = pd.to_numeric(df["epsilon"].replace({"inf": np.inf, "∞": np.inf}), errors="coerce")
    return df[np.isfinite(eps)]


def _varying(df: pd.DataFrame, exclude: Sequence[str], x: str | None = None) -> list[str]:
    """Setting columns that vary in ``df`` and are not determined by ``x`` (e.g. δ = 1/m).

    The privacy columns (:data:`PRIVACY_COLUMNS`) are compared over the private (finite ε)
    runs only: the ε = ∞ runs' ``mechanism = none, delta = nan`` is not a second setting.
    """
    out = []
    for c in SETTING_COLUMNS:
        if c in exclude or c not in df.columns:
            continue
        rows = _private_rows(df) if c in PRIVACY_COLUMNS else df
        if rows.empty or rows[c].nunique(dropna=False) <= 1:
            continue
        if x is not None and rows.groupby(x)[c].nunique(dropna=False).max() <= 1:
            continue
        out.append(c)
    return out


def _mean_std(df: pd.DataFrame, keys: list[str], value: str) -> pd.DataFrame:
    """Mean, std and count of ``value`` per ``keys``, with ``no_guarantee``: whether any of
    the group's rows is a private run without an ε guarantee."""
    df = _numeric(df, value)
    df = df.assign(_no_guarantee=no_guarantee(df))
    g = df.groupby(keys, dropna=False)
    out = g[value].agg(["mean", "std", "count"])
    out["no_guarantee"] = g["_no_guarantee"].any()
    out = out.reset_index()
    out["std"] = out["std"].fillna(0.0)
    return out


def _metric_title(metric: str) -> str:
    """A metric's name at the head of a title: ``Accuracy``, ``Loss``, ``SNR``; a column's
    own spelling otherwise."""
    return {"snr": "SNR", "accuracy": "Accuracy", "loss": "Loss"}.get(metric, metric)


def _eps_label(eps: float) -> str:
    return NO_PRIVACY_LABEL if math.isinf(eps) else f"ε = {eps:g}"


def _is_missing(v: Any) -> bool:
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


def _series_label(values: Mapping[str, Any]) -> str:
    """Legend text of one series; never prints ``nan``, and ε = ∞ gets no mechanism details."""
    no_dp = "epsilon" in values and math.isinf(float(values["epsilon"]))
    parts = []
    for k, v in values.items():
        if k == "epsilon":
            parts.append(_eps_label(float(v)))
        elif (no_dp and k in PRIVACY_COLUMNS) or _is_missing(v):
            continue
        elif k == "clients_per_round":
            parts.append(f"m = {int(v):,}")
        elif k == "delta":
            parts.append(f"δ = {float(v):g}")
        else:
            parts.append(f"{k} = {v:g}" if isinstance(v, float) else f"{k} = {v}")
    return ", ".join(parts) or "all runs"


def _colors(n: int) -> list:
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    return [cmap(0.1 + 0.75 * i / max(n - 1, 1)) for i in range(n)]


def eps_colors(epsilons: Sequence[float]) -> dict[float, Any]:
    """Colour of each ε: finite ε in increasing order along :data:`EPS_CMAP`, ∞ black.

    The same ε set gives the same colours in every figure (dark = strong privacy).
    """
    from matplotlib import colormaps

    cmap = colormaps[EPS_CMAP]
    finite = sorted({float(e) for e in epsilons if np.isfinite(float(e))})
    n = len(finite)
    out: dict[float, Any] = {e: cmap(0.0 + 0.8 * i / max(n - 1, 1)) for i, e in enumerate(finite)}
    out.update({float(e): "black" for e in epsilons if not np.isfinite(float(e))})
    return out


def _series_style(labels: Mapping[str, Any], fallback, eps_palette: Mapping[float, Any] | None) -> dict:
    """Colour / line style of a series: by ε when ε labels it (∞: black dashed, squares)."""
    if "epsilon" in labels:
        eps = float(labels["epsilon"])
        if math.isinf(eps):
            return dict(color="black", linestyle="--", marker="s")
        if eps_palette is not None and len(labels) == 1:
            return dict(color=eps_palette[eps], linestyle="-", marker="o")
    return dict(color=fallback, linestyle="-", marker="o")


def _plain_log_ticks(ax, values) -> None:
    """Major ticks at the data's x values, written plainly (10, 100, 1,000; not 10¹)."""
    ticks = sorted({float(v) for v in values if np.isfinite(float(v)) and float(v) > 0})
    if ticks:
        ax.set_xticks(ticks)
        ax.set_xticklabels([f"{t:,.0f}" if t >= 1 and float(t).is_integer() else f"{t:g}" for t in ticks])
        ax.minorticks_off()


def _norm_key(key: Any) -> tuple:
    key = key if isinstance(key, tuple) else (key,)
    return tuple("nan" if _is_missing(v) else (float(v) if isinstance(v, (int, float, np.number)) else str(v))
                 for v in key)


def _line_with_band(ax, x, mean, std, count, *, color, label, marker="o", linestyle="-") -> None:
    ax.plot(x, mean, marker=marker, linestyle=linestyle, color=color, label=label, markersize=4)
    if np.nanmax(np.asarray(count, dtype=float), initial=0) > 1:
        ax.fill_between(x, np.asarray(mean) - std, np.asarray(mean) + std, color=color, alpha=0.2, linewidth=0)


def _finish(fig: Figure, out: str | Path | None) -> Figure:
    if out is not None:
        out = Path(out)
        suffix = out.suffix.lower()
        if suffix not in FORMATS:
            raise LdpsimError(f"--out must end in {', '.join(FORMATS)} (the format is taken from the suffix); got {str(out)!r}")
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=150 if suffix == ".png" else None, bbox_inches="tight")
    return fig


# The columns that tell one grid cell from another (everything a run varies except its seed).
_CELL_KEYS = ("dataset", "model", "mechanism", "neighbours", "privacy_mode", "noise_mode",
              "epsilon", "clients_per_round")


def _seeds_note(df: pd.DataFrame) -> str:
    """The title's seed count: "n seeds", or "lo–hi seeds per point" when cells differ."""
    if "seed" not in df.columns:
        return ""
    keys = [c for c in _CELL_KEYS if c in df.columns]
    if keys:
        per_cell = df.groupby(keys, dropna=False)["seed"].nunique()
        lo, hi = int(per_cell.min()), int(per_cell.max())
    else:
        lo = hi = int(df["seed"].nunique())
    if lo != hi:
        return f"mean ± std over {lo}–{hi} seeds per point"
    return f"mean ± std over {hi} seeds" if hi > 1 else "1 seed"



# --------------------------------------------------------------------------- kinds


def _accuracy_vs_epsilon(df: pd.DataFrame, metric: str, title: str | None,
                         epsilon_axis: str = "per-round") -> Figure:
    kind = "accuracy-vs-epsilon"
    check_choice("epsilon_axis", epsilon_axis, EPSILON_AXES)
    total = epsilon_axis == "total"
    _require(df, ["epsilon", metric] + (["epsilon_spent"] if total else []), kind)
    df = _numeric(_final_rows(df), "epsilon")
    series = (["clients_per_round"] if "clients_per_round" in df.columns else []) + _varying(df, ["epsilon"], "epsilon")
    stats = _mean_std(df, series + ["epsilon"], metric)
    if total:   # x: the largest total spent over the cell's seeds (inf: none holds)
        spent = _numeric(df, "epsilon_spent").groupby(series + ["epsilon"], dropna=False)["epsilon_spent"].max()
        stats["_eps"] = spent.reindex(pd.MultiIndex.from_frame(stats[series + ["epsilon"]])
                                      if series else stats["epsilon"]).to_numpy(float)
        stats.loc[~np.isfinite(stats["epsilon"]), "_eps"] = np.inf
    else:
        stats["_eps"] = stats["epsilon"]
    finite = stats.loc[np.isfinite(stats["_eps"]) & (stats["_eps"] > 0), "_eps"]
    top = float(finite.max()) if len(finite) else 1.0
    inf_x = 10 ** (math.floor(math.log10(top)) + 1) if len(finite) else 1.0
    if inf_x < 2 * top:   # a top just under a power of ten: keep "∞" clear of it
        inf_x *= 10
    stats["_x"] = np.where(np.isfinite(stats["_eps"]), stats["_eps"], inf_x)
    fig = Figure(figsize=(6.4, 4.4))
    ax = fig.add_subplot()
    groups = list(stats.groupby(series, dropna=False)) if series else [((), stats)]
    for i, (color, (key, g)) in enumerate(zip(_colors(len(groups)), groups)):
        key = key if isinstance(key, tuple) else (key,)
        g = g.sort_values("_x")
        fin = g[np.isfinite(g["_eps"])]
        _line_with_band(ax, fin["_x"], fin["mean"], fin["std"], fin["count"], color=color,
                        label=_series_label(dict(zip(series, key))))
        inf = g[~np.isfinite(g["_eps"])]
        if len(inf):
            # the series' no-privacy points side by side around the ∞ tick (they often
            # coincide: without noise m changes little), each still on its own colour
            dodge = 10 ** (0.06 * (i - (len(groups) - 1) / 2)) if len(groups) > 1 else 1.0
            ax.errorbar(inf["_x"] * dodge, inf["mean"],
                        yerr=inf["std"] if inf["count"].max() > 1 else None,
                        marker="s", color=color, capsize=3, linestyle="none")
            if len(fin):
                ax.plot([fin["_x"].iloc[-1], inf_x * dodge], [fin["mean"].iloc[-1], inf["mean"].iloc[0]],
                        linestyle=":", color=color)
        _mark_no_guarantee(ax, g["_x"], g["mean"], g["no_guarantee"])
    _chance_line(ax, df, metric)
    ax.set_xscale("log")
    if total:
        lo = math.floor(math.log10(float(finite.min()))) if len(finite) else 0
        ticks = [10.0 ** e for e in range(lo, int(round(math.log10(inf_x))))] + [inf_x]
    else:
        ticks = sorted(set(stats["_x"]))
    has_inf = (~np.isfinite(stats["_eps"])).any()
    inf_text = "∞\n(no privacy)" if not stats["no_guarantee"].any() else "∞\n(no privacy /\nno guarantee)"
    ax.set_xticks(ticks)
    ax.set_xticklabels([inf_text if t == inf_x and has_inf else f"{t:g}" for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel(_X_LABEL_TOTAL if total else _X_LABEL_EPS)
    ax.set_ylabel(f"final {METRIC_LABELS.get(metric, metric)}")
    what = "total ε spent" if total else "per-round ε"
    ax.set_title(title or f"{_metric_title(metric)} vs {what} ({_seeds_note(df)})")
    ax.grid(True, alpha=0.3)
    _legend(ax, title="clients per round" if series == ["clients_per_round"] else None, **_LEGEND_OUTSIDE)
    return fig


def _accuracy_vs_clients(df: pd.DataFrame, metric: str, title: str | None) -> Figure:
    kind = "accuracy-vs-clients"
    _require(df, ["clients_per_round", metric], kind)
    df = _final_rows(df)
    if "epsilon" in df.columns:
        df = _numeric(df, "epsilon")
    df = _numeric(df, "clients_per_round")
    series = (["epsilon"] if "epsilon" in df.columns else []) + _varying(df, ["clients_per_round"], "clients_per_round")
    stats = _mean_std(df, series + ["clients_per_round"], metric)
    fig = Figure(figsize=(6.4, 4.4))
    ax = fig.add_subplot()
    groups = list(stats.groupby(series, dropna=False)) if series else [((), stats)]
    palette = eps_colors(stats["epsilon"]) if "epsilon" in stats.columns else None
    for color, (key, g) in zip(_colors(len(groups)), groups):
        key = key if isinstance(key, tuple) else (key,)
        labels = dict(zip(series, key))
        g = g.sort_values("clients_per_round")
        _line_with_band(ax, g["clients_per_round"], g["mean"], g["std"], g["count"],
                        label=_series_label(labels), **_series_style(labels, color, palette))
        _mark_no_guarantee(ax, g["clients_per_round"], g["mean"], g["no_guarantee"])
    _chance_line(ax, df, metric)
    ax.set_xscale("log")
    _plain_log_ticks(ax, stats["clients_per_round"])
    ax.set_xlabel(_X_LABEL_CLIENTS)
    ax.set_ylabel(f"final {METRIC_LABELS.get(metric, metric)}")
    ax.set_title(title or f"{_metric_title(metric)} vs clients per round ({_seeds_note(df)})")
    ax.grid(True, alpha=0.3)
    _legend(ax, title="local ε per round" if series and series[0] == "epsilon" else None,
            **_LEGEND_OUTSIDE)
    return fig


def _convergence(df: pd.DataFrame, metric: str, title: str | None) -> Figure:
    kind = "convergence"
    _require(df, ["round", metric], kind)
    df = _numeric(df, "round")
    if "epsilon" in df.columns:
        df = _numeric(df, "epsilon")
    facets = sorted(df["clients_per_round"].unique()) if "clients_per_round" in df.columns else [None]
    series = (["epsilon"] if "epsilon" in df.columns else []) + _varying(df, ["clients_per_round", "epsilon"])
    ncols = min(len(facets), 3)
    nrows = math.ceil(len(facets) / ncols)
    fig = Figure(figsize=(4.2 * ncols + 0.6, 3.4 * nrows + 0.6))
    axes = fig.subplots(nrows, ncols, sharey=True, squeeze=False).ravel()
    all_keys = sorted({tuple(r) for r in df[series].itertuples(index=False)}, key=lambda t: tuple(map(str, t))) if series else [()]
    if "epsilon" in series:
        all_keys.sort(key=lambda t: float(t[series.index("epsilon")]))
    colors = {_norm_key(k): c for k, c in zip(all_keys, _colors(len(all_keys)))}
    palette = eps_colors(df["epsilon"]) if "epsilon" in df.columns else None
    for ax, m in zip(axes, facets):
        sub = df if m is None else df[df["clients_per_round"] == m]
        stats = _mean_std(sub, series + ["round"], metric)
        groups = list(stats.groupby(series, dropna=False)) if series else [((), stats)]
        for key, g in groups:
            key = key if isinstance(key, tuple) else (key,)
            labels = dict(zip(series, key))
            g = g.sort_values("round")
            style = _series_style(labels, colors.get(_norm_key(key), "C0"), palette)
            style["marker"] = ""
            _line_with_band(ax, g["round"], g["mean"], g["std"], g["count"],
                            label=_series_label(labels), **style)
            last = g.tail(1)   # a cell without a guarantee: its last point ringed
            _mark_no_guarantee(ax, last["round"], last["mean"], last["no_guarantee"])
        _chance_line(ax, df, metric)
        ax.set_title(f"m = {int(m):,} clients per round" if m is not None else "all runs", fontsize="medium")
        ax.set_xlabel("round")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, alpha=0.3)
    for ax in axes[len(facets):]:
        ax.set_visible(False)
    for ax in axes[::ncols]:
        ax.set_ylabel(METRIC_LABELS.get(metric, metric))
    handles, labels = [], []
    for ax in axes:   # every panel's entries once (a ringed cell may be in one panel only)
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    handles, labels = _reference_last(handles, labels)
    per_round = "; ε: local ε per round" if "epsilon" in series else ""
    fig.suptitle(title or f"Convergence ({_seeds_note(df)}{per_round})")
    fig.tight_layout()
    # Below the panels, never over the data (saved with bbox_inches="tight").
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0),
               ncol=min(len(labels), 4) or 1, fontsize="small", frameon=False)
    return fig


def _noise_from_noise_table(df: pd.DataFrame, title: str | None) -> Figure:
    """Two panels from ``ldpsim noise``: ‖z̄‖ vs n with theory, and SNR vs n with theory."""
    for c in ("clients", "noise_norm_theory", "noise_norm_std"):
        df = _numeric(df, c)
    series = [c for c in ("epsilon", "mechanism", "dim", "clip", "delta") if c in df.columns and df[c].nunique() > 1]
    fig = Figure(figsize=(11.0, 4.4))
    ax_n, ax_s = fig.subplots(1, 2)
    groups = list(df.groupby(series, dropna=False)) if series else [((), df)]
    colors = _colors(len(groups))
    for i, (color, (key, g)) in enumerate(zip(colors, groups)):
        key = key if isinstance(key, tuple) else (key,)
        label = _series_label(dict(zip(series, key)))
        g = g.sort_values("clients")
        x = g["clients"]
        ax_n.errorbar(x, g["noise_norm_mean"], yerr=g["noise_norm_std"], marker="o", color=color, capsize=3,
                      linestyle="none", markersize=5, label=f"measured ‖z̄‖ (mean ± std){', ' + label if series else ''}")
        ax_n.plot(x, g["noise_norm_theory"], color=color, linestyle="--", linewidth=1.2,
                  label="theory E‖z̄‖ = c_d·σ/√n" if i == 0 else None)
        if "clip" in g.columns:
            clip = float(g["clip"].iloc[0])
            ax_n.axhline(clip, color="grey", linestyle=":", linewidth=1.2,
                         label=f"clip C = {clip:g} (largest update norm)" if i == 0 else None)
        if "snr_aligned" in g.columns:
            ax_s.plot(x, g["snr_aligned"], marker="o", color=color, linestyle="none", markersize=5,
                      label=f"aligned updates{', ' + label if series else ''}")
            if "snr_aligned_theory" in g.columns:
                ax_s.plot(x, g["snr_aligned_theory"], color=color, linestyle="--", linewidth=1.2,
                          label="theory ρ = C√n/(σ√d)" if i == 0 else None)
        if "snr_random" in g.columns:
            ax_s.plot(x, g["snr_random"], marker="^", color=color, linestyle="none", markersize=5, alpha=0.8,
                      label=f"independent random directions{', ' + label if series else ''}")
            if "snr_random_theory" in g.columns:
                ax_s.plot(x, g["snr_random_theory"], color=color, linestyle=":", linewidth=1.2,
                          label="theory C/(σ√d), flat in n" if i == 0 else None)
    ax_s.axhline(1.0, color="grey", linestyle=":", linewidth=1.0, label="SNR = 1")
    dim = int(df["dim"].iloc[0]) if "dim" in df.columns and df["dim"].nunique() == 1 else None
    for ax in (ax_n, ax_s):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("clients aggregated n (log scale)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
    ax_n.set_ylabel("norm of the mean noise ‖z̄‖ (L2, update units)")
    ax_s.set_ylabel("signal-to-noise ratio ‖ū‖/‖z̄‖")
    ax_n.set_title("Aggregated noise" + (f" (d = {dim:,})" if dim else ""))
    ax_s.set_title("Signal-to-noise ratio of the mean")
    fig.suptitle(title or "Noise cancellation across clients" + _noise_setting(df))
    fig.tight_layout()
    return fig


def _noise_setting(df: pd.DataFrame) -> str:
    """The privacy setting every row of an ``ldpsim noise`` table shares, for its title
    (``: gaussian, ε = 50, δ = 0.01, add-remove, σ = 0.1246``); the ones that vary are the
    legend's."""
    parts = []
    for column, text in (("mechanism", "{}"), ("epsilon", "ε = {:g}"), ("delta", "δ = {:g}"),
                         ("neighbours", "{}"), ("sigma", "σ = {:.4g}")):
        if column in df.columns and df[column].nunique(dropna=False) == 1:
            value = df[column].iloc[0]
            if not _is_missing(value):
                parts.append(text.format(value))
    return (": " + ", ".join(parts)) if parts else ""


def _noise_from_results(df: pd.DataFrame, title: str | None) -> Figure:
    """From sweep results: per-round ‖z̄‖ (and ‖ū‖) averaged over rounds, vs clients per round."""
    df = _numeric(_numeric(df, "clients_per_round"), "noise_norm")
    if "epsilon" in df.columns:
        df = _numeric(df, "epsilon")
        df = df[np.isfinite(df["epsilon"])]
        if df.empty:
            raise LdpsimError("--kind noise-vs-clients: every run has epsilon = inf (no noise to plot)")
    runs = _run_columns(df)
    keep = [c for c in ("epsilon", "clients_per_round", "seed", *SETTING_COLUMNS) if c in df.columns]
    values = ["noise_norm"] + [c for c in ("signal_norm", "theory_noise_norm") if c in df.columns]
    for v in values:
        df = _numeric(df, v)
    df = df.assign(epsilon_spent=np.where(no_guarantee(df), np.inf, 0.0))
    per_run = df.groupby(runs, dropna=False).agg({**{k: "first" for k in keep if k not in runs},
                                                  **{v: "mean" for v in values},
                                                  "epsilon_spent": "max"}).reset_index()
    series = (["epsilon"] if "epsilon" in per_run.columns else []) + _varying(per_run, ["clients_per_round", "epsilon"], "clients_per_round")
    fig = Figure(figsize=(6.4, 4.6))
    ax = fig.add_subplot()
    groups = list(per_run.groupby(series, dropna=False)) if series else [((), per_run)]
    palette = eps_colors(per_run["epsilon"]) if "epsilon" in per_run.columns else None
    for i, (color, (key, g)) in enumerate(zip(_colors(len(groups)), groups)):
        key = key if isinstance(key, tuple) else (key,)
        labels = dict(zip(series, key))
        color = _series_style(labels, color, palette)["color"]
        label = _series_label(labels)
        st = _mean_std(g, ["clients_per_round"], "noise_norm").sort_values("clients_per_round")
        _line_with_band(ax, st["clients_per_round"], st["mean"], st["std"], st["count"], color=color,
                        label=f"‖z̄‖, {label}")
        if "theory_noise_norm" in g.columns:
            th = g.groupby("clients_per_round")["theory_noise_norm"].mean().sort_index()
            # Drawn on top in black so it stays visible where it coincides with the measurement.
            ax.plot(th.index, th.values, color="black", linestyle=(0, (4, 3)), linewidth=1.0, zorder=5,
                    label="theory σ√(d/n_eff)" if i == 0 else None)
        if "signal_norm" in g.columns:
            sg = _mean_std(g, ["clients_per_round"], "signal_norm").sort_values("clients_per_round")
            ax.plot(sg["clients_per_round"], sg["mean"], color=color, linestyle=":", marker="^", markersize=4,
                    label=f"‖ū‖ (clean mean update), {label}")
        _mark_no_guarantee(ax, st["clients_per_round"], st["mean"], st["no_guarantee"])
    ax.set_xscale("log")
    ax.set_yscale("log")
    _plain_log_ticks(ax, per_run["clients_per_round"])
    ax.set_xlabel(_X_LABEL_CLIENTS)
    ax.set_ylabel("norm per round, mean over rounds (L2, update units)")
    ax.set_title(title or f"Aggregated noise vs clients per round ({_seeds_note(df)})")
    ax.grid(True, which="major", alpha=0.3)
    _legend(ax, title="local ε per round" if series and series[0] == "epsilon" else None,
            **_LEGEND_OUTSIDE)
    return fig


def plot(
    data: str | Path | pd.DataFrame,
    kind: str,
    out: str | Path | None = None,
    *,
    metric: str = "accuracy",
    where: Mapping[str, Any] | None = None,
    title: str | None = None,
    epsilon_axis: str = "per-round",
) -> Figure:
    """Draw one figure of ``kind`` from a results table and save it to ``out`` (if given).

    Args:
        data: a results CSV path or DataFrame (sweep results, or ``ldpsim noise`` output
            for ``noise-vs-clients``).
        kind: one of :data:`KINDS`.
        out: ``.png``, ``.svg`` or ``.pdf`` path (format from the suffix).
        metric: column on the y axis of the accuracy and convergence kinds (e.g. ``loss``).
        where: keep only rows whose column equals the value (e.g. ``{"mechanism": "gaussian"}``).
        title: replaces the default title.
        epsilon_axis: x axis of ``accuracy-vs-epsilon``: ``"per-round"`` (the ``epsilon``
            each release is calibrated to, default) or ``"total"`` (``epsilon_spent``, the
            total the busiest client spent over the run; it differs across m at one
            per-round ε). Cells without an ε guarantee (``epsilon_spent = inf``) are ringed
            in red in every kind.

    Returns:
        The :class:`matplotlib.figure.Figure`.
    """
    check_choice("kind", kind, KINDS)
    check_choice("epsilon_axis", epsilon_axis, EPSILON_AXES)
    if epsilon_axis != "per-round" and kind != "accuracy-vs-epsilon":
        raise LdpsimError(f"--epsilon-axis {epsilon_axis} applies to --kind accuracy-vs-epsilon only")
    if out is not None and Path(out).suffix.lower() not in FORMATS:
        raise LdpsimError(f"--out must end in {', '.join(FORMATS)} (the format is taken from the suffix); got {str(out)!r}")
    df = _filter(load_results(data), where)
    if "epsilon" in df.columns and pd.to_numeric(df["epsilon"], errors="coerce").isna().all():
        # a mode without a local ε (central, distributed, MindSpore: their budget is the
        # noise multiplier or dp_eps) writes ε as NaN: it labels no series
        df = df.drop(columns="epsilon")
        if kind == "accuracy-vs-epsilon":
            modes = ", ".join(sorted(map(str, df["privacy_mode"].unique()))) \
                if "privacy_mode" in df.columns else "these runs"
            raise LdpsimError(f"--kind accuracy-vs-epsilon: the runs have no local epsilon "
                              f"({modes}: the budget is the noise multiplier or dp_eps); draw "
                              "accuracy-vs-clients or convergence")
    if kind == "noise-vs-clients" and metric != "accuracy":
        raise LdpsimError(f"--metric applies to the accuracy and convergence kinds; "
                          f"{kind} always plots the noise norm")
    if kind != "noise-vs-clients" and metric != "accuracy" and metric not in df.columns:
        raise LdpsimError(f"--metric {metric}: no column {metric!r} in the table (it has: "
                          f"{', '.join(map(str, df.columns))})")
    if (kind != "noise-vs-clients" and metric in df.columns
            and pd.to_numeric(df[metric], errors="coerce").notna().sum() == 0):
        raise LdpsimError(f"--metric {metric}: the column has no numbers to plot "
                          "(choose a numeric column such as accuracy, loss or snr)")
    if kind == "accuracy-vs-epsilon":
        fig = _accuracy_vs_epsilon(df, metric, title, epsilon_axis)
    elif kind == "accuracy-vs-clients":
        fig = _accuracy_vs_clients(df, metric, title)
    elif kind == "convergence":
        fig = _convergence(df, metric, title)
    elif "noise_norm_mean" in df.columns:
        _require(df, ["clients", "noise_norm_mean", "noise_norm_std", "noise_norm_theory"], kind)
        fig = _noise_from_noise_table(df, title)
    else:
        _require(df, ["clients_per_round", "noise_norm"], kind)
        fig = _noise_from_results(df, title)
    return _finish(fig, out)
