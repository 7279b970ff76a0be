"""The driver: a simulation's configuration in, its metrics history out.

:func:`simulate` builds the data, the model, the privacy mode's plan
(:func:`ldpsim.modes.plan`: calibration, the kernel object and its knobs, the columns
and the accountant) and the jitted round (:func:`ldpsim.fl.make_round_fn`, cached
per static setting), then runs the rounds with the one host loop
(:func:`ldpsim.fl.run_loop`). :func:`simulate_lanes` runs several configurations
that differ only in traced knobs (an ε axis) as ONE vmapped program through the same code.

Randomness: :func:`initial_state` initialises the model from ``fold_in(key(seed), "init")``
and roots every round's keys at ``fold_in(key(seed), "roun")``; cohorts come from
:func:`sample_cohort` (NumPy, seeded by ``(seed, round)``). Nothing depends on chunking or
device count.

This module is the driver loop and the lanes' check; what it assembles lives beside it:
:mod:`~ldpsim._src.fl.build` (data, model, initial state, the compiled round),
:mod:`~ldpsim._src.fl.cohorts` (who takes part in a round), :mod:`~ldpsim._src.fl.budget`
(``stop_at_epsilon``), :mod:`~ldpsim._src.fl.history` (the rows' run-level columns),
:mod:`~ldpsim._src.fl.checkpoint` (saving and continuing a run) and
:mod:`~ldpsim._src.fl.writers` (optional outputs). Their names stay importable from here.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ldpsim._src._checks import LdpsimError
from ldpsim._src._interrupt import critical
from ldpsim._src.fl import _policy, planning, sharding
from ldpsim._src.fl.budget import budget_columns, budget_ledger
from ldpsim._src.fl.build import build_data, initial_state, model_dimension, model_name_for
from ldpsim._src.fl.build import compiled_round as _compiled
from ldpsim._src.fl.build import smallest_client as _smallest_client
from ldpsim._src.fl.checkpoint import RunCheckpoint
from ldpsim._src.fl.cohorts import cohort_capacity as _poisson_capacity
from ldpsim._src.fl.cohorts import sample_cohort
from ldpsim._src.fl.columns import HistoryRow
from ldpsim._src.fl.config import SimulationConfig
from ldpsim._src.fl.experiment import Experiment
from ldpsim._src.fl.history import NOT_COLUMNS, run_columns, scalar
from ldpsim._src.fl.loop import run_loop, status
from ldpsim._src.fl.round import RoundHyper
from ldpsim._src.privacy.server.adaptive import global_change_norm

PyTree = Any

__all__ = ["build_data", "initial_state", "model_dimension", "model_name_for", "sample_cohort",
           "simulate", "simulate_lanes"]


@jax.jit
def _change_norm(old: PyTree, new: PyTree) -> jax.Array:
    return global_change_norm(old, new)


_lane_change_norm = jax.jit(jax.vmap(global_change_norm))


#: Configuration fields that are traced knobs of the round: configurations that differ
#: only in these can run as lanes of one program (:func:`simulate_lanes`).
_TRACED_FIELDS = frozenset({
    "epsilon", "delta", "clip", "client_lr", "server_lr", "noise_multiplier", "dp_eps",
    "dp_delta", "dp_norm_clip", "dropout_rate", "target_quantile", "clip_learning_rate",
    "clipped_count_stddev", "client_dp_clip", "client_dp_noise_multiplier", "client_dp_delta"})


def _static_key(config: SimulationConfig) -> tuple:
    """What must agree between the configurations of one vmapped program."""
    return tuple((f.name, getattr(config, f.name)) for f in dataclasses.fields(config)
                 if f.name not in _TRACED_FIELDS)


def simulate(config: SimulationConfig | Experiment, *, progress: bool = False,
             callback: Callable[[dict], Any] | None = None, data: Any = None,
             checkpoint_dir: str | None = None, checkpoint_every: int = 10,
             mechanism: Any = None) -> list[HistoryRow]:
    """Run the simulation described by ``config`` and return its metrics history.

    Args:
        config: an :class:`~ldpsim.fl.Experiment` (nested settings) or the same
            settings flat, a :class:`~ldpsim.fl.SimulationConfig`.
        progress: on stderr, a status line per phase (loading data, building the round)
            and a tqdm bar over the rounds (compiling, then round k of K with ETA and
            accuracy).
        callback: called with each history row as soon as it exists (e.g. to write a CSV
            incrementally, :func:`ldpsim.fl.tensorboard_callback`); returning
            ``False`` stops the run after that row. A resumed run passes the restored rows
            first, so the callback sees the whole history.
        data: optional ``(population, x_test, y_test)`` to use instead of
            :func:`build_data` (research code, tests); ``config.population`` is then
            informational and the population's own size is used.
        checkpoint_dir: save everything the run needs to continue there every
            ``checkpoint_every`` rounds and when it stops or ends
            (:mod:`ldpsim._src.fl.checkpoint`); a checkpoint already there of the same
            configuration is continued, so the history equals an uninterrupted run's
            (bit-identical on the same machine, ``wall_time`` aside: it adds up the time
            of every session); one of another configuration is refused.
        checkpoint_every: rounds between checkpoints.
        mechanism: the clients' local randomizer instead of ``config.mechanism``: any
            :class:`~ldpsim.mechanism.LocalMechanism` (a user's own needs no registration:
            the round calls its ``privatize``, ``decode`` and ``variance`` with its
            ``params``), or a function ``dim -> LocalMechanism`` of the model's number of
            parameters. Local DP (``privacy_mode="ldp"``) only; the history's mechanism,
            epsilon, delta and epsilon_spent are the mechanism's (its ``dp_event``
            composed over the worst-case client's participations).

    Returns:
        One :class:`~ldpsim.fl.HistoryRow` (a typed dict) per evaluated round
        (every ``eval_every`` rounds and the last), with the results columns
        (each is described, and classified as a setting, part of the release or a
        diagnostic, in :data:`ldpsim.fl.COLUMNS`): dataset,
        model, mechanism, neighbours, epsilon, delta, clip, sensitivity, sigma,
        clients_per_round, population, seed, privacy_mode, noise_mode, noise_multiplier,
        sampler_delta_floor, round, accuracy, loss, the round's
        :class:`~ldpsim.fl.RoundMetrics` (noise_norm, signal_norm, snr, cosine,
        clip_fraction, nonfinite_clients, clients, n_eff, theory_noise_norm, train_loss,
        clip_bound, noise_sum_std, survivors, noise_variance_fraction,
        unclipped_fraction), model_change_norm (‖W_{t+1} − W_t‖₂), max_participation
        (most rounds any one client has taken part in so far), epsilon_spent,
        client_dp_epsilon, ledger_epsilon_max, ledger_epsilon_mean, retired_clients
        (``stop_at_epsilon``, below) and wall_time (seconds since the start, compilation
        included).

        sampler_delta_floor: no δ below it is delivered, because the float noise
        sampler's tails are bounded (:func:`ldpsim.privacy.sampler_delta_floor`);
        where it exceeds the claimed δ a
        :class:`~ldpsim.privacy.SamplerTailWarning` is issued and
        epsilon_spent is ``inf`` (no ε holds at that δ).

        epsilon_spent (:func:`ldpsim.modes.plan` builds the accountant): ``"ldp"``:
        the most-sampled client's LDP ε at total δ = ``config.delta`` (exact composition
        of Gaussians, Balle & Wang 2018 Thm. 8, via
        :class:`ldpsim.privacy.LdpAccountant`; basic composition k·ε for
        Laplace; NaN without privacy). ``"mindspore"``: the same accountant with the
        per-round mechanism ``N(0, (a·C_t)²)`` of sensitivity C_t (add-remove) or 2C_t
        (replace) — every round is exactly (dp_eps, dp_delta)-DP whatever C_t — at total
        δ = dp_delta. ``"central"``: user-level ε of DP-FedAvg after ``round`` rounds
        with q = m/N (:func:`ldpsim._src.fl.planning.central_epsilon`, RDP, δ = ``config.delta``).
        ``"distributed"``: the same with the smallest effective multiplier
        ``z·√(survivors/m)`` of the rounds so far (the dropout shortfall). In the
        mindspore/central/distributed rows, sigma is the noise std (mindspore: the mean
        per-client σ_t; central: z_Δ·C on the sum; distributed: per client zC/√m),
        sensitivity the bound it is calibrated to, and epsilon the per-round local ε
        (dp_eps; NaN for central/distributed). client_dp_epsilon (DP-SGD clients):
        sample-level ε of the worst-case client (the smallest client at the highest
        participation count) from the DP-SGD clients' accounting event
        (:func:`ldpsim._src.fl.dpsgd.client.dpsgd`, δ = ``config.delta``; it equals
        :func:`ldpsim._src.fl.dpsgd.client.dp_client_epsilon` with ``method="shuffle"``); NaN
        without DP-SGD clients.

        ``stop_at_epsilon = E`` (``"ldp"``/``"mindspore"``): a per-client
        :class:`~ldpsim.privacy.PrivacyLedger` over the participation counts,
        with the accountant of epsilon_spent, so that no client's ε exceeds E. Before each
        round, ``stop_policy="client"`` drops from the sampled cohort every client whose
        next participation would exceed E (the round runs with the rest; the run ends
        when a cohort has no one left), ``"run"`` ends the run before the first round in
        which a sampled client would exceed E; the last round done is then reported.
        Both decisions read participation counts only (who reported, public), never the
        data. ledger_epsilon_max / ledger_epsilon_mean: the ledger's largest and
        population-mean spent ε (NaN without a budget); retired_clients: clients whose
        next participation would exceed E (0 without a budget).

    Raises:
        LdpsimError: bad configuration or data; ``stop_at_epsilon`` below the ε of one
            participation; ``stop_at_epsilon`` with several lanes.
    """
    return simulate_lanes([config], progress=progress, callback=callback, data=data,
                          checkpoint_dir=checkpoint_dir, checkpoint_every=checkpoint_every,
                          mechanism=mechanism)[0]


def simulate_lanes(configs: Sequence[SimulationConfig | Experiment], *, progress: bool = False,
                   callback: Callable[[dict], Any] | None = None, data: Any = None,
                   on_round: Callable[[], None] | None = None,
                   checkpoint_dir: str | None = None, checkpoint_every: int = 10,
                   mechanism: Any = None) -> list[list[HistoryRow]]:
    """Run configurations that differ only in traced knobs (ε, δ, C, learning rates, the
    mode's knobs) as ONE program, the round vmapped over them ("lanes").

    One configuration runs exactly as :func:`simulate` (no vmap). Several share the data,
    the cohorts and the keys, so each lane's history equals running its configuration
    alone up to float rounding; the program runs on one device. ``on_round`` is called
    after every round; ``wall_time`` is the shared elapsed time. ``checkpoint_dir``,
    ``checkpoint_every``, ``mechanism``: as in :func:`simulate` (one checkpoint holds every
    lane).

    Raises:
        LdpsimError: the configurations differ in something that is not a traced knob
            (a static setting, or ε = inf against a finite ε: no noise is another program).
    """
    start = time.perf_counter()
    configs = [c.flat() if isinstance(c, Experiment) else c for c in configs]
    if not configs:
        return []
    c0 = configs[0]
    lanes = len(configs) > 1
    if lanes and any(_static_key(c) != _static_key(c0) or c.private != c0.private
                     for c in configs):
        raise LdpsimError("simulate_lanes needs configurations that differ only in traced "
                          "knobs (epsilon, delta, clip, learning rates, the privacy mode's "
                          "knobs), all private or all not")
    requested = sharding.resolve_devices(c0.devices)    # fails before loading data
    n_devices = 1 if lanes else _policy.cohort_devices(c0.devices, requested,
                                                       c0.clients_per_round)
    if progress and data is None:
        status(f"loading data ({c0.dataset})")
    population, x_test, y_test = build_data(c0) if data is None else data
    if progress:
        status("building the model, the privacy plan and the round")
    n_clients = population.num_clients
    if c0.clients_per_round > n_clients:
        raise LdpsimError(f"clients_per_round must be <= population ({n_clients}), got "
                          f"{c0.clients_per_round}")
    smallest = _smallest_client(population) if c0.client_dp else 1
    dim = model_dimension(model_name_for(c0.model, population),
                          tuple(population.input_shape), int(population.num_classes))
    plans = [planning.plan(c, n_clients, smallest_client=smallest, dim=dim, mechanism=mechanism)
             for c in configs]
    mech = plans[0].mechanism
    if any(p.mechanism is not mech for p in plans):
        raise LdpsimError("simulate_lanes needs configurations with the same privacy "
                          "mechanism")
    shapes = {jax.tree_util.tree_structure(p.hyper) for p in plans}
    if len(shapes) > 1:
        raise LdpsimError(
            f"simulate_lanes: the {c0.mechanism} randomizer's static settings differ between "
            f"these epsilon values (SignDS's output size h and threshold depend on epsilon), "
            f"so they cannot run as lanes of one program; run them one by one (no "
            f"--vmap-epsilon)")
    model, round_fn, evaluate = _compiled(
        model_name_for(c0.model, population), tuple(population.input_shape),
        int(population.num_classes), mech, c0.client_optimizer, c0.server_optimizer,
        float(c0.server_momentum), None if c0.local_epochs else c0.local_steps,
        c0.local_epochs, c0.batch_size, c0.weighting, c0.chunk_size,
        **({"devices": n_devices} if n_devices != 1 else {}),
        **({"lanes": True} if lanes else {}))
    state = initial_state(c0, model, population, mech)
    hypers = [RoundHyper(*(jnp.asarray(v, jnp.float32) for v in (c.clip, c.client_lr,
                                                                  c.server_lr)),
                         p.hyper, p.client_hyper)
              for c, p in zip(configs, plans)]
    if lanes:
        state = jax.tree_util.tree_map(lambda x: jnp.stack([x] * len(configs)), state)
        hyper = jax.tree_util.tree_map(lambda *v: jnp.stack(v), *hypers)
    else:
        hyper = hypers[0]
        # Placed once on every device of the mesh (not copied to each device every round).
        state, population = sharding.replicate((state, population), n_devices)
    x_test = jnp.asarray(x_test, jnp.float32)
    y_test = jnp.asarray(y_test, jnp.int32)
    capacity = (_poisson_capacity(c0) if c0.sampling == "poisson" else c0.clients_per_round)
    bases = [run_columns(c, model.name, n_clients, p) for c, p in zip(configs, plans)]
    participation = np.zeros(n_clients, np.int64)
    counted: list = [None]   # (round, ids) of the last participations counted
    change_norm = _lane_change_norm if lanes else _change_norm
    ledger = budget_ledger(configs, plans[0], participation)

    def local_params(params):
        # Evaluated once, on one local device (not redundantly on every mesh device).
        if n_devices == 1:
            return params
        return jax.tree_util.tree_map(lambda a: a.addressable_data(0), params)

    def cohort(t):
        ids, mask = sample_cohort(c0.seed, t, n_clients, c0.clients_per_round,
                                  c0.sampling, capacity)
        if ledger is not None and c0.stop_policy == "client":
            mask = mask & ledger.allowed(ids)   # counts only: data-independent
        return ids, mask

    def stop_before(carry, t):
        ids, mask = sample_cohort(c0.seed, t, n_clients, c0.clients_per_round,
                                  c0.sampling, capacity)
        allowed = ledger.allowed(ids[mask])
        return not allowed.all() if c0.stop_policy == "run" else not allowed.any()

    def step(carry, t):
        state, _, _, min_fraction = carry
        ids, mask = cohort(t)
        new_state, rm = round_fn(state, population, jnp.int32(t), ids, mask, hyper)
        with critical():   # the counts and the record of what was added change together
            participation[ids[mask]] += 1
            counted[0] = (t, ids[mask])
        min_fraction = jnp.minimum(min_fraction, rm.noise_variance_fraction)
        if on_round is not None:
            on_round()
        return new_state, state.params, rm, min_fraction

    def report(carry, t):
        state, prev_params, rm, min_fraction = carry
        acc, loss = evaluate(local_params(state.params), x_test, y_test)
        change = change_norm(prev_params, state.params)
        acc, loss, change, rm, min_fraction = jax.device_get(
            (acc, loss, change, rm, min_fraction))
        k_max = int(participation.max())
        budget = budget_columns(ledger)
        elapsed = time.perf_counter() - start
        rows = []
        for i, (base, p) in enumerate(zip(bases, plans)):
            lane = (lambda v: np.asarray(v)[i]) if lanes else np.asarray
            row = dict(base, round=t + 1, accuracy=float(lane(acc)), loss=float(lane(loss)))
            row.update({k: scalar(lane(v)) for k, v in rm._asdict().items()
                        if k not in NOT_COLUMNS})
            row.update(p.row_columns(row))
            row["model_change_norm"] = float(lane(change))
            row["max_participation"] = k_max
            row["epsilon_spent"] = p.epsilon_of(k_max, t + 1, float(lane(min_fraction)))
            row["delta_spent"] = p.delta_of(k_max, t + 1, float(lane(min_fraction)))
            row["client_dp_epsilon"] = p.client_epsilon_of(k_max)
            row["client_dp_delta"] = p.columns.get("client_dp_delta", math.nan)
            row.update(budget)
            row["wall_time"] = elapsed
            rows.append(row)
        return rows

    ones = jnp.ones((len(configs),) if lanes else (), jnp.float32)
    carry, first, done, save = (state, state.params, None, ones), 0, [], None
    if checkpoint_dir is not None:   # continue from the newest checkpoint, if any
        ckpt = RunCheckpoint(checkpoint_dir, configs, checkpoint_every, participation, start)
        state, fraction, first, done = ckpt.restore(state, ones)
        carry, start = (state, state.params, None, fraction), ckpt.start
        if progress and first:
            status(f"continuing after round {first} (checkpoint in {checkpoint_dir})")

        def save(c, t, rows, final):
            counts = None
            if counted[0] is not None and counted[0][0] == t:
                # An interrupt after round t was counted: the checkpoint is that of round
                # t − 1 (run_loop), so without round t's participations.
                counts = participation.copy()
                counts[counted[0][1]] -= 1
            ckpt.save(c[0], c[3], t, rows, final, participation=counts)
    rows = run_loop(c0.rounds, step, carry, report=report,
                    report_every=c0.eval_every, callback=callback, progress=progress,
                    postfix=lambda row: {"accuracy": f"{row['accuracy']:.4f}"},
                    start=first, done=done, checkpoint=save,
                    stop_before=None if ledger is None else stop_before)
    return [rows[i::len(configs)] for i in range(len(configs))]
