"""Distributed discrete DP on MNIST / LeNet-5: accuracy against bits, clients per round and the
privacy level, for the distributed discrete Gaussian and the Skellam mechanism
(experiments/distributed_discrete_lenet5.toml describes the grid; docs/distributed_discrete.md
the mechanisms and their accounting).

Each cell (mechanism, m, b, target, seed) is one 100-round run; the driver takes the cell's
granularity and per-client noise from the engine's own plan (host side: the finest γ whose
wrap bound fits b, counting the sizes a Poisson cohort reaches, the least noise meeting the
target, with the Poisson amplification and the cohort floor for the whole-run targets), runs it, and appends its rows with ``final = 1`` on
the last; a cell interrupted midway continues from its checkpoint (every 10 rounds), so the
grid resumes where it stopped. ``--only`` restricts to some mechanisms / targets / m / b /
seeds (pieces for 2 cores). Reference cells (``bits`` 0): the continuous distributed Gaussian,
central DP and no noise at each m (the toml's ``[reference]``).

    python experiments/distributed_discrete_lenet5.py --plan          # cells and their noise
    python experiments/distributed_discrete_lenet5.py --plan-table    # the plans, as a table
    python experiments/distributed_discrete_lenet5.py --only mechanism=ddg,m=1000 \
        --out experiments/results/distributed_discrete_lenet5_m1000.csv
    python experiments/distributed_discrete_lenet5.py --table \
        --out 'experiments/results/distributed_discrete_lenet5_m*.csv'     # verdict table
    python experiments/distributed_discrete_lenet5.py --plot acc_vs_bits.png --out A.csv,B.csv

The committed results are one CSV per m (experiments/results/distributed_discrete_lenet5_m*.csv).
The engine side (the privacy modes built from the round's stages) is not part of this file:
:func:`engine_config` is the single place that maps a cell onto ``SimulationConfig``, with the
engine's ``discrete`` privacy mode (``epsilon_scope="run"`` for the whole-run targets).
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import shutil
import sys
import time
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
SPEC = os.path.join(HERE, "distributed_discrete_lenet5.toml")
D = 61_706                      # LeNet-5's parameters
TARGETS = {"whole_run_4": (4.0, True), "whole_run_8": (8.0, True), "per_round_4": (4.0, False)}
#: Reference runs beside the two integer mechanisms (``bits`` 0 in their rows): the continuous
#: distributed Gaussian the discrete modes approximate, central DP (a trusted server adding the
#: least Gaussian noise that meets the target), and no noise at all (clipping only).
REFERENCES = ("continuous", "central", "nonprivate")



def load_spec(path: str = SPEC) -> dict:
    with open(path, "rb") as f:
        return tomllib.load(f)


def cells(spec: dict) -> list[dict]:
    g = spec["grid"]
    out = []
    for mech in g["mechanism"]:
        for target in g["target"]:
            for m, bits in g["cells"]:
                for seed in g["seed"]:
                    out.append(dict(mechanism=mech, target=target, clients_per_round=int(m),
                                    bits=int(bits), seed=int(seed)))
    ref = spec.get("reference", {})
    for mech in ref.get("mechanism", ()):
        for target in (("none",) if mech == "nonprivate" else g["target"]):
            for m in ref["clients"]:
                for seed in g["seed"]:
                    out.append(dict(mechanism=mech, target=target, clients_per_round=int(m),
                                    bits=0, seed=int(seed)))
    return out


def reference_noise(cell: dict, spec: dict) -> dict:
    key = (cell["mechanism"], cell["target"], cell["clients_per_round"],
           tuple(sorted(spec["run"].items())))
    if key not in _REFERENCE_CACHE:
        _REFERENCE_CACHE[key] = _reference_noise(cell, spec)
    return dict(_REFERENCE_CACHE[key])


_REFERENCE_CACHE: dict = {}


def _reference_noise(cell: dict, spec: dict) -> dict:
    """The noise multiplier z (noise std on the sum / C) of a reference cell.

    * ``central``, per-round target: the least Gaussian on the sum that makes one round
      (ε, δ)-DP against replacing one client (``trust_model_noise``, as the crossover);
      whole-run target: the least z whose ``rounds``-fold Poisson-subsampled Gaussian at
      q = m/N is (ε, δ)-DP under add/remove, by dp_accounting's PLD accountant (the tight
      accounting a trusted server would publish).
    * ``continuous``: the distributed Gaussian at the discrete cells' accounting: per round,
      the same z as central; whole run, the sum's variance from the same RDP bound and
      amplification (``accounting.gaussian_central_variance``) at the same delta, counted from
      the same cohort floor (each client's share is 1/n_low of it).
    """
    import dp_accounting

    from ldpsim._src.privacy.discrete import accounting as A
    from ldpsim.privacy import trust_model_noise

    eps, whole = TARGETS[cell["target"]]
    run, m = spec["run"], cell["clients_per_round"]
    pop, clip, rounds = run["population"], run["clip"], run["rounds"]
    delta = 1.0 / pop
    if not whole:
        z = trust_model_noise("central", target_epsilon=eps, delta=delta, clients=m,
                              clip=clip).sigma_sum / clip
        return dict(noise_multiplier=z, noise_survivors=m, delta_solved=delta)
    q = m / pop
    if cell["mechanism"] == "central":
        def event(z):
            return dp_accounting.SelfComposedDpEvent(
                dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)), rounds)
        z = dp_accounting.calibrate_dp_mechanism(     # about a minute of CPU per (m, target)
            lambda: dp_accounting.pld.PLDAccountant(), event, eps, delta,
            dp_accounting.LowerEndpointAndGuess(0.1, 1.0), tol=1e-4)
        return dict(noise_multiplier=float(z), noise_survivors=m, delta_solved=delta)
    floor, tail = A.cohort_floor(pop, m, rounds, eps, delta)
    var_sum = A.gaussian_central_variance(eps, delta - tail, rounds, clip, "add-remove", q)
    return dict(noise_multiplier=math.sqrt(var_sum * m / floor) / clip, noise_survivors=floor,
                delta_solved=delta - tail)


def solve(cell: dict, spec: dict) -> dict:
    """Granularity, noise, wrap bound and ε of one cell: the engine's own plan
    (``planning.secagg_mechanism``, host-side accounting only), so what is printed by
    ``--plan`` is what the run uses."""
    from ldpsim._src.fl import planning
    from ldpsim._src.privacy.discrete import accounting as A

    if cell["mechanism"] in REFERENCES:
        ref = (reference_noise(cell, spec) if cell["mechanism"] != "nonprivate" else
               dict(noise_multiplier=0.0, noise_survivors=math.nan, delta_solved=math.nan))
        return dict(feasible=1, granularity=math.nan, noise=math.nan, wrap_bound=math.nan,
                    epsilon_accounted=TARGETS.get(cell["target"], (math.inf,))[0],
                    mse_ratio=math.nan, delta=1.0 / spec["run"]["population"],
                    infeasible="", **ref)
    cfg = engine_config(cell, None, spec)
    pop, dim = spec["run"]["population"], spec["sweep"].get("dim", D)
    eps, whole = TARGETS[cell["target"]]
    m = cell["clients_per_round"]
    from ldpsim._src._checks import LdpsimError

    try:
        mech = planning.secagg_mechanism(cfg, dim, pop)
    except LdpsimError as err:          # b too small: an infeasible cell, recorded as such
        return dict(feasible=0, granularity=math.nan, noise=math.nan, wrap_bound=math.nan,
                    epsilon_accounted=math.nan, mse_ratio=math.nan, delta=cfg.delta,
                    noise_survivors=math.nan, infeasible=str(err).splitlines()[0][:200])
    floor, delta = planning.cohort_guarantee(cfg, pop)
    q = planning.sampling_rate(cfg, pop)
    rounds = cfg.rounds if whole else 1
    accounted = A.discrete_epsilon(mech, delta, rounds, floor, sampling_rate=q)
    ref = A.gaussian_central_variance(eps, delta, rounds, cfg.clip, mech.neighbours, q)
    mse = mech.granularity ** 2 * m * (0.25 + mech.client_variance)
    # the decoded sum's error variance per coordinate, γ²·m·(1/4 + σ̂²) (rounding at its worst
    # case 1/4 per client, plus the noise), against the continuous Gaussian's at the same
    # (ε, δ): mse_ratio. What makes it: the rounding's own variance (rounding_share of the
    # error variance), the rounding's norm inflation (the noise covers the rounded vector's
    # norm bound, not the clip: variance factor (norm_bound/scaled_clip)²), and the cohort floor
    # (the noise counted from noise_survivors < m clients: factor m/noise_survivors)
    # the wrap bound of the cohort sizes the round can have (Poisson: up to wrap_n, plus the
    # probability of a larger cohort; planning.wrap_cohort)
    wrap_n, wrap_target = planning.wrap_cohort(cfg, pop)
    wrap = (planning.SECAGG_WRAP_TARGET - wrap_target) + A.wrap_probability(mech, wrap_n)
    return dict(feasible=1, granularity=mech.granularity, noise=mech.noise,
                wrap_bound=wrap, wrap_clients=wrap_n, epsilon_accounted=accounted,
                mse_ratio=mse / ref, rounding_share=0.25 / (0.25 + mech.client_variance),
                norm_inflation=(mech.norm_bound / mech.scaled_clip) ** 2,
                floor_factor=m / (m if floor is None else floor), delta=cfg.delta,
                noise_survivors=m if floor is None else floor, infeasible="")


def engine_config(cell: dict, solved: dict | None, spec: dict):
    """The cell as a ``SimulationConfig`` of the engine's ``discrete`` privacy mode.

    A whole-run target runs with Poisson cohorts and ``epsilon_scope="run"``: the engine
    solves the noise for the whole run's ε with the amplification of the Poisson cohort
    sampling, counting the cohort size every round reaches (``planning.cohort_guarantee``),
    and accounts ``epsilon_spent`` the same way. A per-round target runs with fixed-size
    cohorts (``sampling="uniform"``, replace-one neighbours), the crossover's setting.
    ``solved`` (from :func:`solve`) passes the granularity on, so the engine does not search
    for it again (it would find the same).
    """
    from ldpsim.fl import SimulationConfig

    run = {k: v for k, v in spec["run"].items() if k != "wrap_target"}
    if cell["mechanism"] in REFERENCES:
        whole_run = TARGETS.get(cell["target"], (0, False))[1]
        run["sampling"] = "poisson" if whole_run else "uniform"
        mode = "distributed" if cell["mechanism"] == "continuous" else "central"
        return SimulationConfig(**run, clients_per_round=cell["clients_per_round"],
                                seed=cell["seed"], delta=1.0 / run["population"],
                                privacy_mode=mode, noise_multiplier=solved["noise_multiplier"])
    epsilon, whole_run = TARGETS[cell["target"]]
    run["sampling"] = "poisson" if whole_run else "uniform"
    return SimulationConfig(**run, clients_per_round=cell["clients_per_round"],
                            seed=cell["seed"], delta=1.0 / run["population"],
                            privacy_mode="discrete", secagg_mechanism=cell["mechanism"],
                            bits=cell["bits"],
                            granularity=None if solved is None else solved["granularity"],
                            epsilon=epsilon, epsilon_scope="run" if whole_run else "round")


def plan_table(spec: dict, only: str | None = None) -> str:
    """The plan of every discrete cell (seed 0), host-side only, as Markdown: granularity, noise,
    wrap bound and the cohort size it counts, and the decoded sum's error variance against the
    continuous Gaussian's at the same (ε, δ) with what makes it: the rounding's norm inflation
    (a variance factor), the rounding's own share of the variance and the cohort floor's
    factor."""
    lines = ["| target | m | bits | mechanism | γ | noise (integer units) | wrap bound (reports "
             "counted) | error variance / continuous | rounding's norm inflation | rounding's "
             "variance share | cohort floor factor |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for cell in cells(spec):
        if cell["mechanism"] in REFERENCES or cell["seed"] != 0 or not selected(cell, only):
            continue
        r = solve(cell, spec)
        head = (f"| {cell['target']} | {cell['clients_per_round']:,} | {cell['bits']} | "
                f"{cell['mechanism']} | ")
        if not r["feasible"]:
            lines.append(head + "infeasible | | | | | | |")
            continue
        lines.append(head + f"{r['granularity']:.3g} | {r['noise']:.4g} | {r['wrap_bound']:.2g} "
                     f"({r['wrap_clients']:,}) | {r['mse_ratio']:.3f} | {r['norm_inflation']:.3f} | "
                     f"{r['rounding_share']:.3f} | {r['floor_factor']:.3f} |")
    return "\n".join(lines)


def key_of(row: dict) -> tuple:
    return (row["mechanism"], row["target"], int(row["clients_per_round"]), int(row["bits"]),
            int(row["seed"]))


def done_cells(path: str) -> set:
    if not os.path.exists(path):
        return set()
    with open(path) as f:
        return {key_of(r) for r in csv.DictReader(f) if r.get("final") == "1"}


def append(path: str, rows: list[dict]) -> None:
    new = not os.path.exists(path)
    # every row's columns, in order of appearance: a cell resumed from a checkpoint written
    # by an earlier version replays rows that lack the columns added since
    fields = list(dict.fromkeys(k for r in rows for k in r))
    if not new:
        with open(path) as f:
            old_fields = next(csv.reader(f), [])
        if old_fields != fields:                             # rewrite with the union header
            with open(path) as f:
                old = list(csv.DictReader(f))
            fields += [c for c in old_fields if c not in fields]
            tmp = path + ".tmp"
            with open(tmp, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=fields, restval="nan")
                w.writeheader()
                w.writerows(old + rows)
            os.replace(tmp, path)
            return
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, restval="nan")
        if new:
            w.writeheader()
        w.writerows(rows)


def selected(cell: dict, only: str | None) -> bool:
    if not only:
        return True
    alias = {"m": "clients_per_round", "b": "bits"}
    for part in only.split(","):
        k, _, v = part.partition("=")
        k = alias.get(k, k)
        if str(cell[k]) != v:
            return False
    return True


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("--spec", default=SPEC)
    p.add_argument("--only", default=None,
                   help="comma list of key=value (mechanism, target, m, b, seed)")
    p.add_argument("--plan", action="store_true", help="print the cells and their noise, run none")
    p.add_argument("--plan-table", action="store_true",
                   help="print every discrete cell's plan (seed 0) as a Markdown table, run none")
    p.add_argument("--out", default=None,
                   help="the CSV the cells append to (--table / --plot: one, a comma list, or glob "
                        "patterns such as 'experiments/results/distributed_discrete_lenet5_m*.csv')")
    p.add_argument("--plot", metavar="PNG", help="accuracy against bits per m from --out")
    p.add_argument("--checkpoints", default=None,
                   help="folder of the running cell's checkpoints (default: .checkpoints next "
                        "to --out; removed when the cell ends)")
    p.add_argument("--progress", action="store_true", help="a progress bar per cell")
    p.add_argument("--table", action="store_true",
                   help="print the verdict table (Markdown) from --out and exit")
    args = p.parse_args(argv)
    spec = load_spec(args.spec)
    from ldpsim import enable_compilation_cache, use_host_devices

    enable_compilation_cache()
    # one host device per core before JAX starts: each cell's cohort is split over them, 1.7x
    # the rounds per second of XLA's single device (benchmarks/discrete_engine.py --layouts)
    use_host_devices(quiet=True)
    out = args.out or os.path.join(HERE, spec["sweep"]["out"])
    if args.plot:
        return plot(out, args.plot)
    if args.table:
        print(table(out))
        print()
        print(verdict(out))
        return 0
    if args.plan_table:
        print(plan_table(spec, args.only))
        return 0
    todo = [c for c in cells(spec) if selected(c, args.only)]
    finished = done_cells(out)
    for cell in todo:
        if key_of(cell) in finished:
            print("skip", cell, flush=True)
            continue
        solved = solve(cell, spec)
        if args.plan:
            print(cell, {k: (f"{v:.4g}" if isinstance(v, float) else v)
                         for k, v in solved.items()}, flush=True)
            continue
        if not solved["feasible"]:
            append(out, [dict(cell, **solved, round=0, accuracy=math.nan, final=1)])
            continue
        from ldpsim import simulate
        cfg = engine_config(cell, solved, spec)
        # a cell continues from its last checkpoint (every 10 rounds) after an interruption
        ckpt = os.path.join(args.checkpoints or os.path.join(os.path.dirname(out),
                                                             ".checkpoints"),
                            "_".join(str(v) for v in key_of(cell)))
        rows, t0 = [], time.process_time()
        print("run", cell, flush=True)
        # the cell's own columns win over the engine row's (whose "mechanism" is the noise's
        # law, e.g. "gaussian" for the reference cells: kept as engine_mechanism)
        simulate(cfg, checkpoint_dir=ckpt, progress=args.progress, callback=lambda r: rows.append(
            {**r, "engine_mechanism": r.get("mechanism"), **cell, **solved,
             "process_time": time.process_time() - t0}))
        for i, r in enumerate(rows):
            r["final"] = int(i == len(rows) - 1)
        append(out, rows)
        shutil.rmtree(ckpt, ignore_errors=True)
    return 0


def read(path: str):
    """The rows of one CSV, or of a comma-separated list of them, each possibly a glob pattern
    (the committed results are several files, to keep each small:
    ``experiments/results/distributed_discrete_lenet5_m*.csv``)."""
    import glob

    import pandas as pd

    files = []
    for part in path.split(","):
        hits = sorted(glob.glob(part)) if glob.has_magic(part) else [part]
        if not hits:
            raise SystemExit(f"no CSV matches {part!r}")
        files += hits
    return pd.concat([pd.read_csv(p) for p in files], ignore_index=True, sort=False)


def table(path: str) -> str:
    """The verdict table (Markdown) from the CSV: final accuracy (mean ± sd over seeds, seeds
    counted) per (target, m, mechanism, bits), with its gap to the non-private, the continuous
    and the central runs at the same m and target (points; positive: below the reference)."""
    import pandas as pd

    df = read(path)
    fin = df[df["final"] == 1].copy()
    # whole-run discrete cells run before the wrap bound counted the Poisson cohort's size
    # (no wrap_clients column): their granularity is 14-30 % finer than today's plan
    wc = fin["wrap_clients"] if "wrap_clients" in fin else math.nan
    fin["old_plan"] = (fin["mechanism"].isin(["ddg", "skellam"])
                       & fin["target"].str.startswith("whole_run") & pd.isna(wc))
    keys = ["target", "clients_per_round", "mechanism", "bits"]
    acc = fin.groupby(keys)["accuracy"].agg(["mean", "std", "count"]).reset_index()
    acc = acc.merge(fin.groupby(keys)["old_plan"].any().reset_index(), on=keys)

    def ref(mech, target, m):
        hit = acc[(acc.mechanism == mech) & (acc.target == target) &
                  (acc.clients_per_round == m)]
        return float(hit["mean"].iloc[0]) if len(hit) else math.nan

    lines = ["| target | m | mechanism | bits | accuracy (mean ± sd, seeds) | points below "
             "non-private | below continuous | below central |",
             "|---|---|---|---|---|---|---|---|"]
    for _, r in acc.sort_values(["target", "clients_per_round", "mechanism", "bits"]).iterrows():
        if r.mechanism == "nonprivate":
            continue
        m = int(r.clients_per_round)
        gaps = [100 * (ref(mech, tgt, m) - r["mean"]) for mech, tgt in
                (("nonprivate", "none"), ("continuous", r.target), ("central", r.target))]
        sd = f"{r['std']:.3f}" if r["count"] > 1 else "-"
        mark = " †" if r.old_plan else ""
        lines.append(f"| {r.target} | {m:,} | {r.mechanism}{mark} | {int(r.bits) or '-'} | "
                     f"{r['mean']:.4f} ± {sd} ({int(r['count'])}) | "
                     + " | ".join("-" if math.isnan(x) else f"{x:+.1f}" for x in gaps) + " |")
    for _, r in acc[acc.mechanism == "nonprivate"].iterrows():
        lines.append(f"| none | {int(r.clients_per_round):,} | nonprivate | - | "
                     f"{r['mean']:.4f} ({int(r['count'])}) | | | |")
    if acc["old_plan"].any():
        lines.append("\n† planned with the wrap bound counting m reports, not the Poisson "
                     "cohort's size: a granularity 14-30 % finer than today's plan; at 16 bits the "
                     "decoded error variance of the two plans differs by < 1 %")
    return "\n".join(lines)


def verdict(path: str, tolerance: float = 1.0) -> str:
    """The experiment's questions answered from the CSV(s), as Markdown bullets: per target,
    the smallest m at which each mechanism comes within ``tolerance`` points of the non-private
    run (16 bits for the discrete ones), and per (target, m) the fewest bits at which each
    discrete mechanism comes within ``tolerance`` points of the continuous and of the central
    runs, and stays there at every larger bit-width run. Means over the seeds run (counted):
    with one or two seeds a gap is a point estimate, not a test."""
    df = read(path)
    fin = df[df["final"] == 1]
    mean = fin.groupby(["target", "clients_per_round", "mechanism", "bits"])["accuracy"].agg(
        ["mean", "count"])

    def get(target, m, mech, bits=0):
        try:
            r = mean.loc[(target, m, mech, bits)]
        except KeyError:
            return None
        return float(r["mean"]), int(r["count"])

    ms = sorted(int(m) for m in fin["clients_per_round"].unique())
    lines = [f"Within {tolerance:g} point(s), from the runs in the CSV (mean over seeds, seeds "
             "counted):", ""]
    for target in TARGETS:
        parts = []
        for mech, bits in (("central", 0), ("continuous", 0), ("ddg", 16), ("skellam", 16)):
            hits, missed = [], []
            for m in ms:
                ref, got = get("none", m, "nonprivate"), get(target, m, mech, bits)
                if ref is None or got is None:
                    continue
                gap = 100 * (ref[0] - got[0])
                (hits if gap <= tolerance else missed).append(f"{m:,} ({gap:+.1f}, {got[1]} seed"
                                                              f"{'s' if got[1] > 1 else ''})")
            label = mech + (f" {bits} bits" if bits else "")
            if hits or missed:
                parts.append(f"{label}: within at m = {', '.join(hits) or 'none run'}"
                             + (f"; not at {', '.join(missed)}" if missed else ""))
        if parts:
            lines.append(f"* **{target}**, against non-private: " + "; ".join(parts) + ".")
    for target in TARGETS:
        for m in ms:
            for mech in ("ddg", "skellam"):
                bits = sorted(int(b) for (t, mm, me, b) in mean.index
                              if t == target and mm == m and me == mech)
                if not bits:
                    continue
                found = []
                for ref_mech in ("continuous", "central"):
                    ref = get(target, m, ref_mech)
                    if ref is None:
                        continue
                    gaps = {b: 100 * (ref[0] - get(target, m, mech, b)[0]) for b in bits}
                    ok = [b for b in bits if all(gaps[c] <= tolerance for c in bits if c >= b)]
                    worse = [f"{b}: {gaps[b]:+.1f}" for b in bits if gaps[b] > tolerance]
                    found.append(f"of {ref_mech} from {ok[0]} bits" if ok else
                                 f"of {ref_mech} at no bit-width run")
                    if worse:
                        found[-1] += f" (points below at {', '.join(worse)})"
                runs = ", ".join(f"{b}" + (f"×{get(target, m, mech, b)[1]}"
                                            if get(target, m, mech, b)[1] > 1 else "")
                                 for b in bits)
                if found:
                    lines.append(f"* {target}, m = {m:,}, {mech} (bits run: {runs}; ×k: k seeds): "
                                 f"within {tolerance:g} point {'; '.join(found)}.")
    return "\n".join(lines)


def plot(path: str, png: str) -> int:
    """Accuracy against bits per m: one row per target, one column per m; in each panel the two
    mechanisms (mean ± sd over seeds, each bit-width run) and, as horizontal lines, the
    references at the same m and target (continuous, central, no noise). Each row has its own
    accuracy range; a panel with nothing run yet says so."""
    from matplotlib.figure import Figure

    df = read(path)
    fin = df[df["final"] == 1]
    colours = {"ddg": "C0", "skellam": "C1", "continuous": "C2", "central": "C3",
               "nonprivate": "0.3"}
    ms = sorted(int(m) for m in fin["clients_per_round"].unique())
    fig = Figure(figsize=(3.6 * len(ms) + 0.8, 2.9 * len(TARGETS) + 0.9))
    axes = fig.subplots(len(TARGETS), len(ms), sharey="row", squeeze=False)
    for row, target in zip(axes, TARGETS):
        for ax, m in zip(row, ms):
            sub = fin[(fin["clients_per_round"] == m)]
            drawn = False
            for k, mech in enumerate(("ddg", "skellam")):
                g = sub[(sub.mechanism == mech) & (sub.target == target)]
                if len(g):
                    acc = g.groupby("bits")["accuracy"].agg(["mean", "std"])
                    ax.errorbar(acc.index + (0.12 if k else -0.12), acc["mean"],
                                yerr=acc["std"].fillna(0), marker="o", capsize=2,
                                color=colours[mech], label=mech)
                    drawn = True
            for mech in ("continuous", "central", "nonprivate"):
                g = sub[(sub.mechanism == mech) &
                        (sub.target == ("none" if mech == "nonprivate" else target))]
                if len(g):
                    ax.axhline(g["accuracy"].mean(), color=colours[mech], linestyle="--",
                               linewidth=1, label=f"{mech} (reference)")
                    drawn = True
            if not drawn:
                ax.text(0.5, 0.5, "not run yet", transform=ax.transAxes, ha="center",
                        va="center", color="0.5")
            title = (target.replace("_", " ").replace("run ", "run, ε = ")
                     .replace("round ", "round, ε = "))
            ax.set_title(f"{title}, m = {m:,}", fontsize=9)
            ax.set_xticks([12, 14, 16, 18, 20])
            ax.set_xlim(11, 21)
            ax.grid(alpha=0.3)
        row[0].set_ylabel("test accuracy, round 100")
    for ax in axes[-1]:
        ax.set_xlabel("bits b of the modular sum")
    handles = {}
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    fig.legend(list(handles.values()), list(handles), loc="lower center",
               ncol=len(handles), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(png, dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
