"""Record, or compare against, the histories of every engine path on small settings.

Used to show that a refactor of the engine preserves behaviour: run it with ``--save``
on the old commit, then with ``--compare`` on the new one. Every privacy mode, noise
mode, mechanism, sampling, DP-SGD clients, several devices and the vmapped ε axis are
covered on the FedProx synthetic data (no download), and centralised DP-SGD
(``train_dpsgd``: both samplings, fixed and adaptive clipping, noise decay, no DP) on the
first rows of MNIST (``LDPSIM_DATA_DIR``, e.g. ../shared/data; skipped when MNIST is not
found). Exact equality is reported per column; where a value differs, the largest
relative difference is printed.

    python benchmarks/engine_golden.py --save /tmp/golden.json        # old commit
    python benchmarks/engine_golden.py --compare /tmp/golden.json     # new commit

Run with ``XLA_FLAGS=--xla_force_host_platform_device_count=2`` for the two-device case
(it is skipped when JAX sees one device).
"""

from __future__ import annotations

import argparse
import json
import math
import sys

import jax

# Training settings are given explicitly (the pre-defaults values), so that a change of the
# per-dataset defaults (fl/defaults.py) does not read as a change of the engine.
BASE = dict(dataset="synthetic", population=60, clients_per_round=12, rounds=3,
            local_steps=2, batch_size=8, client_optimizer="sgd", client_lr=0.05,
            server_lr=1.0, seed=3, devices=1)

CASES = {
    "noprivacy": dict(),
    "ldp_gauss": dict(epsilon=8.0),
    "ldp_gauss_addremove_classic": dict(epsilon=0.8, neighbours="add-remove",
                                        calibration="classic"),
    "ldp_laplace": dict(epsilon=20.0, mechanism="laplace"),
    "ldp_poisson_uniformw": dict(epsilon=8.0, sampling="poisson", weighting="uniform"),
    "ldp_chunk4_adam_fedadam": dict(epsilon=8.0, chunk_size=4, client_optimizer="adam",
                                    server_optimizer="fedadam", server_lr=0.05),
    "ldp_epochs_eval2": dict(epsilon=8.0, local_epochs=1, eval_every=2, rounds=4),
    "ldp_aggregate": dict(epsilon=8.0, noise_mode="aggregate"),
    "mindspore": dict(privacy_mode="mindspore"),
    "mindspore_overwrite_replace": dict(privacy_mode="mindspore", dp_eps=20.0,
                                        mindspore_clip_rule="overwrite",
                                        mindspore_neighbours="replace"),
    "central": dict(privacy_mode="central", noise_multiplier=0.8),
    "central_poisson": dict(privacy_mode="central", noise_multiplier=0.8, sampling="poisson"),
    "central_adaptive": dict(privacy_mode="central", noise_multiplier=0.8, adaptive_clip=True,
                             clip=0.3),
    "distributed_dropout": dict(privacy_mode="distributed", noise_multiplier=1.2,
                                dropout_rate=0.25),
    "client_dp": dict(client_dp=True, client_dp_micro_batches=4,
                      client_dp_noise_multiplier=0.7),
    "client_dp_central": dict(privacy_mode="central", client_dp=True,
                              client_dp_noise_multiplier=0.5),
    "ldp_two_devices": dict(epsilon=8.0, devices=2),
    "central_two_devices": dict(privacy_mode="central", noise_multiplier=0.8, devices=2),
}
EPSILON_AXIS = (2.0, 8.0, 50.0)
DPSGD_BASE = dict(dataset="mnist", num_train=512, num_test=200, model="mlp", epochs=2,
                  batch_size=32, micro_batches=8, noise_multiplier=0.7, learning_rate=0.05,
                  delta=1e-3, seed=5)
DPSGD_CASES = {
    "dpsgd_poisson_linear": dict(),
    "dpsgd_poisson_per_example_fixed": dict(micro_batches=32, clip_mechanism=None),
    "dpsgd_poisson_geometric_adam": dict(clip_mechanism="Geometric", optimizer="adam",
                                         learning_rate=0.01),
    "dpsgd_shuffle_linear": dict(sampling="shuffle"),
    "dpsgd_shuffle_adagaussian": dict(sampling="shuffle", clip_mechanism=None,
                                      noise_mechanism="AdaGaussian", noise_decay="Exp",
                                      noise_decay_rate=0.01, pld="every_epoch"),
    "dpsgd_nodp_sgd": dict(dp=False, optimizer="sgd"),
}
SKIP_COLUMNS = {"wall_time", "epoch_time", "compile_time"}


def _clean(v):
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    if isinstance(v, float) and math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def run_all() -> dict[str, list[dict]]:
    import warnings

    from ldpsim._src.fl.config import SimulationConfig
    from ldpsim._src.fl.simulate import simulate
    from ldpsim._src.sweep import engine

    out: dict[str, list[dict]] = {}
    for name, over in CASES.items():
        cfg = SimulationConfig(**{**BASE, **over})
        if (cfg.devices or 1) > jax.device_count():
            print(f"  skip {name}: needs {cfg.devices} devices", file=sys.stderr)
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out[name] = simulate(cfg)
    configs = [SimulationConfig(**{**BASE, "epsilon": e}) for e in EPSILON_AXIS]
    for e, hist in zip(EPSILON_AXIS, engine.simulate_epsilon_axis(configs)):
        out[f"vmap_eps_{e:g}"] = hist
    out.update(run_dpsgd())
    return {k: [{c: _clean(v) for c, v in row.items() if c not in SKIP_COLUMNS}
                for row in rows] for k, rows in out.items()}


def run_dpsgd() -> dict[str, list[dict]]:
    """Centralised DP-SGD histories (per-epoch rows, and the per-step trace as rows)."""
    import warnings

    try:
        from ldpsim.fl import DpsgdConfig, train_dpsgd
    except ImportError:   # before the split of fl/central.py (commit 87db25b and older)
        from ldpsim._src.fl.central import DpsgdConfig, train_dpsgd

    try:
        from ldpsim._src.data.registry import load_dataset
        load_dataset("mnist")
    except Exception as exc:  # noqa: BLE001 - report and go on without the DP-SGD cases
        print(f"  skip DP-SGD cases: {exc}", file=sys.stderr)
        return {}
    out: dict[str, list[dict]] = {}
    for name, over in DPSGD_CASES.items():
        steps: list[dict] = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out[name] = train_dpsgd(DpsgdConfig(**{**DPSGD_BASE, **over}), trace=steps.extend)
        if steps:
            out[name + "_trace"] = steps
    return out


def compare(old: dict, new: dict) -> int:
    worst = 0
    for name in sorted(set(old) | set(new)):
        if name not in old or name not in new:
            print(f"{name:32s} only in {'old' if name in old else 'new'}")
            continue
        diffs: dict[str, float] = {}
        cols_old = set().union(*(r.keys() for r in old[name]))
        cols_new = set().union(*(r.keys() for r in new[name]))
        for c in sorted(cols_old ^ cols_new):
            diffs[c] = math.inf
        for ro, rn in zip(old[name], new[name]):
            for c in cols_old & cols_new:
                a, b = ro.get(c), rn.get(c)
                if a == b:
                    continue
                if isinstance(a, (int, float)) and isinstance(b, (int, float)):
                    rel = abs(a - b) / max(abs(a), abs(b), 1e-30)
                else:
                    rel = math.inf
                diffs[c] = max(diffs.get(c, 0.0), rel)
        if len(old[name]) != len(new[name]):
            diffs["<rows>"] = math.inf
        status = "identical" if not diffs else "differs: " + ", ".join(
            f"{c} {d:.1e}" for c, d in sorted(diffs.items()))
        print(f"{name:32s} {status}")
        worst = max(worst, 0 if not diffs else 1)
    return worst


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--save", metavar="JSON")
    g.add_argument("--compare", metavar="JSON")
    args = p.parse_args()
    histories = run_all()
    if args.save:
        with open(args.save, "w") as f:
            json.dump(histories, f)
        print(f"saved {len(histories)} histories to {args.save}")
        return 0
    with open(args.compare) as f:
        old = json.load(f)
    return compare(old, histories)


if __name__ == "__main__":
    sys.exit(main())
