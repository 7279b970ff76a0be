"""The trust-model crossover: MNIST / LeNet-5 accuracy against clients per
round at equal CENTRAL (ε, δ) for local DP, local DP + shuffling, secure aggregation with
distributed noise, and central DP.

Equal central ε (ldpsim.privacy.trust_model_noise): in one round, whatever the trust model
lets the adversary see (every report / the shuffled reports / the securely summed reports /
the server's noisy sum) is (ε, δ)-DP for replacing one client's data (sensitivity 2C), no
amplification by sampling. The four models' noise for that target:

  central  privacy_mode="central", noise_multiplier = σ_sum / C
  secagg   privacy_mode="distributed", noise calibrated for a tolerated worst-case dropout
           ρ_max (σ per client = σ_central/√(m − ⌊ρ_max m⌋)); realised dropout_rate ρ < ρ_max
  local    privacy_mode="ldp", epsilon = ε, delta = δ (each report is (ε, δ)-LDP)
  shuffle  privacy_mode="ldp", epsilon = ε₀, delta = δ₀: the largest ε₀ whose shuffled
           reports are centrally (ε, δ)-DP (Feldman-McMillan-Talwar clones bound)

The client setting is experiments/seed000_converged.toml's (MNIST, 20,000 IID clients of 3
images, 3 local SGD steps of batch 3, lr 0.1, FedAvg server lr 2, clip 1, noise_mode aggregate
— exact for all four: every model's noise is Gaussian and summed).

    nice -n 10 python experiments/crossover_lenet5.py                 # run (resumes)
    python experiments/crossover_lenet5.py --plot crossover_lenet5.png  # figure from the CSV
    python experiments/crossover_lenet5.py --table                     # README table
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import sys
import time

import pandas as pd
from matplotlib.figure import Figure

if __name__ == "__main__":   # one host device per core, before JAX starts (ldpsim's rule)
    from ldpsim import use_host_devices

    use_host_devices(quiet=True)

from ldpsim import simulate  # noqa: E402
from ldpsim.fl import SimulationConfig, build_data  # noqa: E402
from ldpsim.privacy import trust_model_noise  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "results", "crossover_lenet5.csv")
MODELS = ("central", "secagg", "shuffle", "local")
D = 61706   # LeNet-5's parameters (the noise norm on the mean is σ̄·√d)
LABELS = {"central": "central DP (trusted server)",
          "secagg": "secure aggregation + distributed noise",
          "shuffle": "local DP + shuffling", "local": "local DP alone"}

#: experiments/seed000_converged.toml's [run] (the client setting and plain FedAvg with server
#: lr 2), noise_mode aggregate. ``--server fedavgm``: FedAvgM (lr 1, momentum 0.9), the
#: setting of results/crossover_lenet5_fedavgm.csv.
BASE = dict(dataset="mnist", model="lenet5", partition="iid", population=20000,
            clip=1.0, local_steps=3, batch_size=3, client_lr=0.1, client_optimizer="sgd",
            weighting="examples", sampling="uniform", noise_mode="aggregate")
SERVERS = {"fedavg": dict(server_optimizer="fedavg", server_lr=2.0),
           "fedavgm": dict(server_optimizer="fedavgm", server_lr=1.0, server_momentum=0.9)}

EXTRA = ("trust_model", "target_epsilon", "target_delta", "central_epsilon_round",
         "local_epsilon", "local_delta", "sigma_client", "sigma_mean_theory",
         "tolerated_dropout", "process_time")


def config_for(model: str, m: int, args) -> tuple[SimulationConfig, dict]:
    kw = dict(model=model, target_epsilon=args.epsilon, delta=args.delta, clients=m,
              clip=BASE["clip"])
    if model == "secagg":
        kw["dropout"] = args.tolerated_dropout
    noise = trust_model_noise(**kw)
    common = dict(BASE, **SERVERS[args.server], clients_per_round=m, rounds=args.rounds, eval_every=args.eval_every,
                  seed=args.seed, delta=args.delta)
    if model == "central":
        cfg = SimulationConfig(**common, privacy_mode="central",
                               noise_multiplier=noise.sigma_sum / BASE["clip"])
    elif model == "secagg":
        cfg = SimulationConfig(**common, privacy_mode="distributed",
                               noise_multiplier=noise.sigma_client * math.sqrt(m) / BASE["clip"],
                               dropout_rate=args.dropout)
    else:
        cfg = SimulationConfig(**dict(common, delta=noise.local_delta), privacy_mode="ldp",
                               epsilon=noise.local_epsilon, neighbours="replace",
                               calibration="analytic")
    extra = {"trust_model": model, "target_epsilon": args.epsilon, "target_delta": args.delta,
             "central_epsilon_round": noise.central_epsilon,
             "local_epsilon": noise.local_epsilon, "local_delta": noise.local_delta,
             "sigma_client": noise.sigma_client, "sigma_mean_theory": noise.sigma_mean,
             "tolerated_dropout": args.tolerated_dropout if model == "secagg" else 0.0}
    return cfg, extra


def done_cells(path: str) -> set:
    if not os.path.exists(path):
        return set()
    with open(path) as f:
        rows = list(csv.DictReader(f))
    return {(r["trust_model"], int(r["clients_per_round"]), int(r["seed"])) for r in rows
            if r.get("final") == "1"}


def append(path: str, rows: list[dict]) -> None:
    """Append ``rows`` to the CSV at ``path``; if its header differs (a newer engine added
    columns), rewrite it with the new header, missing values NaN."""
    # every row's columns, in order of appearance: a cell resumed from a checkpoint written
    # by an earlier version replays rows that lack the columns added since
    fields = list(dict.fromkeys(k for r in rows for k in r))
    old: list[dict] = []
    if os.path.exists(path):
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            if reader.fieldnames != fields:
                old = list(reader)
                fields += [c for c in reader.fieldnames if c not in fields]
            else:
                with open(path, "a", newline="") as g:
                    csv.DictWriter(g, fieldnames=fields).writerows(rows)
                return
    tmp = path + ".tmp"
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, restval="nan")
        writer.writeheader()
        writer.writerows(old + rows)
    os.replace(tmp, path)


def run(args) -> None:
    clients = [int(c) for c in args.clients.split(",")]
    models = args.models.split(",")
    finished = done_cells(args.out)
    data = None
    for m in clients:
        for model in models:
            if (model, m, args.seed) in finished:
                print(f"skip {model} m={m} seed {args.seed} (in {args.out})", flush=True)
                continue
            cfg, extra = config_for(model, m, args)
            if data is None:
                data = build_data(cfg)
            t0 = time.process_time()
            rows = []

            def keep(row, extra=extra, t0=t0, rows=rows):
                rows.append(dict(row, **extra, process_time=time.process_time() - t0))
                print(f"{model:8s} m={m:5d} round {row['round']:3d} acc {row['accuracy']:.4f} "
                      f"noise {row['noise_norm']:.3g} cpu {time.process_time() - t0:.0f}s",
                      flush=True)

            simulate(cfg, callback=keep, data=data)
            if not math.isclose(rows[0]["sigma"], extra["sigma_client"], rel_tol=1e-6) \
                    and model in ("local", "shuffle"):
                raise SystemExit(f"engine sigma {rows[0]['sigma']} != {extra['sigma_client']}")
            for i, row in enumerate(rows):
                row["final"] = int(i == len(rows) - 1)
            append(args.out, rows)


def load(path: str) -> pd.DataFrame:
    return pd.read_csv(path)


def finals(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (trust model, m): the final accuracy's mean, std and seed count over the
    seeds run, with the model's noise (σ̄ = noise std on the mean, ε₀ per report) and the
    worst client's participations."""
    fin = df[df["final"] == 1]
    g = fin.groupby(["trust_model", "clients_per_round"])
    out = g.agg(accuracy=("accuracy", "mean"), std=("accuracy", "std"),
                seeds=("seed", "nunique"), sigma_mean=("sigma_mean_theory", "first"),
                local_epsilon=("local_epsilon", "first"), local_delta=("local_delta", "first"),
                participations=("max_participation", "max"), rounds=("round", "max"))
    return out.reset_index()


def crossover(df: pd.DataFrame, points: float = 0.01, above: float = 0.5) -> dict:
    """Per model, the smallest m run from which on (that m and every larger m run) its mean
    final accuracy is within ``points`` of central DP's at the same m, counting only the m
    where central DP learns (accuracy ≥ ``above``: at chance every model is "within 1
    point"). None: not reached at the m run."""
    fin = finals(df)
    central = fin[fin.trust_model == "central"].set_index("clients_per_round")["accuracy"]
    ms = sorted(m for m in central.index if central[m] >= above)
    out = {}
    for model in MODELS:
        g = fin[fin.trust_model == model].set_index("clients_per_round")["accuracy"]
        run = [m for m in ms if m in g.index]
        close = [g[m] >= central[m] - points for m in run]
        out[model] = next((run[i] for i in range(len(run)) if all(close[i:])), None)
    return out


def table(df: pd.DataFrame) -> str:
    fin = finals(df)
    ms = sorted(fin.clients_per_round.unique())
    lines = ["| trust model | " + " | ".join(f"m = {m:,}" for m in ms)
             + " | within 1 pt of central from |", "|---|" + "---|" * (len(ms) + 1)]
    cross = crossover(df)
    for model in MODELS:
        g = fin[fin.trust_model == model].set_index("clients_per_round")
        cells = []
        for m in ms:
            if m not in g.index:
                cells.append("–")
                continue
            r = g.loc[m]
            acc = (f"{r.accuracy:.3f} ± {r['std']:.3f}" if r.seeds > 1 else f"{r.accuracy:.3f}")
            noise = f"σ̄√d {r.sigma_mean * math.sqrt(D):.2g}"
            if model in ("local", "shuffle"):
                noise += f", ε₀ {r.local_epsilon:.3g}"
            cells.append(f"{acc} ({noise})")
        c = cross[model]
        lines.append(f"| {LABELS[model]} | " + " | ".join(cells) + " | "
                     + (f"m = {c:,}" if c else f"not at m ≤ {max(ms):,}") + " |")
    return "\n".join(lines)


def predicted_crossover(df: pd.DataFrame, model: str, *, tolerated_dropout: float = 0.1
                        ) -> tuple[int, float]:
    """NOT measured: the smallest m (to 2 significant digits, bisection on a log scale up to
    10⁹) at which ``model``'s noise on the mean, σ̄·√d, falls to central DP's at the largest
    m run (where central DP has converged): the m from which the model sees no more noise
    than central DP did where it converged. Returns ``(m, reference σ̄·√d)``."""
    fin = finals(df)
    central = fin[fin.trust_model == "central"].sort_values("clients_per_round").iloc[-1]
    ref = central.sigma_mean * math.sqrt(D)
    eps, delta = float(df.target_epsilon.iloc[0]), float(df.target_delta.iloc[0])
    kw = {"dropout": tolerated_dropout} if model == "secagg" else {}

    def noise(m: int) -> float:
        return trust_model_noise(model, target_epsilon=eps, delta=delta, clients=m,
                                 **kw).sigma_mean * math.sqrt(D)

    lo, hi = 1, 10 ** 9
    if noise(hi) > ref:
        return -1, ref
    while hi > 1.01 * lo + 1:
        mid = int(math.sqrt(lo * hi))
        lo, hi = (mid, hi) if noise(mid) > ref else (lo, mid)
    return int(float(f"{hi:.2g}")), ref


def plot(df: pd.DataFrame, out: str) -> None:
    fin = finals(df)
    fig = Figure(figsize=(6.4, 4.4))
    ax = fig.add_subplot()
    styles = {"central": ("black", "s", "-"), "secagg": ("tab:blue", "o", "--"),
              "shuffle": ("tab:orange", "^", "-"), "local": ("tab:red", "v", "-")}
    for model in MODELS:
        g = fin[fin.trust_model == model].sort_values("clients_per_round")
        if g.empty:
            continue
        color, marker, ls = styles[model]
        ax.errorbar(g.clients_per_round, g.accuracy, yerr=g["std"].fillna(0.0), marker=marker,
                    linestyle=ls, color=color, label=LABELS[model], markersize=5, capsize=2)
    ax.axhline(0.1, color="grey", linestyle=":", linewidth=1, label="chance (10 classes)")
    ms = sorted(fin.clients_per_round.unique())
    ax.set_xscale("log")
    ax.set_xticks(ms)
    ax.set_xticklabels([f"{m:,}" for m in ms])
    ax.minorticks_off()
    eps, delta = df.target_epsilon.iloc[0], df.target_delta.iloc[0]
    ax.set_xlabel("clients per round m")
    ax.set_ylabel(f"test accuracy after {int(fin.rounds.max())} rounds")
    ax.set_title(f"MNIST LeNet-5, equal central ε = {eps:g} per round (δ = {delta:g}, "
                 "replace one)", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.savefig(out, dpi=150, bbox_inches="tight")
    print(f"wrote {out}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epsilon", type=float, default=4.0, help="central ε per round")
    p.add_argument("--delta", type=float, default=5e-5, help="central δ (1/population)")
    p.add_argument("--clients", default="100,1000,3000")
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--eval-every", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--server", choices=tuple(SERVERS), default="fedavg",
                   help="fedavg: plain FedAvg, server lr 2 (seed000_converged.toml); "
                        "fedavgm: FedAvgM lr 1, momentum 0.9")
    p.add_argument("--tolerated-dropout", type=float, default=0.1,
                   help="secagg: worst-case dropout its noise is calibrated for")
    p.add_argument("--dropout", type=float, default=0.05,
                   help="secagg: realised dropout rate in the simulation")
    p.add_argument("--out", default=OUT)
    p.add_argument("--plot", metavar="PNG", help="draw the figure from --out and exit")
    p.add_argument("--table", action="store_true", help="print the README table and exit")
    args = p.parse_args(argv)
    from ldpsim import enable_compilation_cache

    enable_compilation_cache()   # each cell's compiled round, reused by a resumed run
    if args.plot or args.table:
        df = load(args.out)
        if args.table:
            print(table(df))
            print("measured:", crossover(df))
            for model in ("local", "shuffle"):
                m, ref = predicted_crossover(df, model,
                                             tolerated_dropout=args.tolerated_dropout)
                print(f"predicted (noise on the mean <= central's {ref:.3g} at its largest m):"
                      f" {model} m ~ {m:,}")
        if args.plot:
            plot(df, args.plot)
        return
    run(args)


if __name__ == "__main__":
    sys.exit(main())
