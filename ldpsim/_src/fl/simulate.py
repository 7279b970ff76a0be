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
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from ldpsim._src import _xla
from ldpsim._src.data import partition as partition_lib
from ldpsim._src.data import registry as data_registry
from ldpsim._src._checks import LdpsimError
from ldpsim._src.fl import _policy, modes, planning, sharding
from ldpsim._src.fl.columns import HistoryRow
from ldpsim._src.fl.config import SimulationConfig
from ldpsim._src.fl.experiment import Experiment
from ldpsim._src.fl.checkpoint import RunCheckpoint
from ldpsim._src.fl.loop import run_loop, status
from ldpsim._src.fl.round import (RoundHyper, ServerState, init_state, make_eval_fn,
                                  make_round_fn)
from ldpsim._src.models import get_model, resolve_model_name
from ldpsim._src.privacy.adaptive import global_change_norm
from ldpsim._src.privacy.ledger import PrivacyLedger

PyTree = Any

__all__ = ["build_data", "initial_state", "model_name_for", "sample_cohort", "simulate",
           "simulate_lanes"]

#: Metrics of the round kernel that are not history columns (the applied update's norm
#: and the next round's clip bound are visible in the next row).
_NOT_COLUMNS = ("update_norm", "next_clip")

#: The run-level columns a privacy plan provides (in the order of the history rows).
_PLAN_COLUMNS = ("mechanism", "neighbours", "epsilon", "delta", "clip", "sensitivity", "sigma")


def sample_cohort(seed: int, round_idx: int, population: int, clients_per_round: int,
                  sampling: str = "uniform", capacity: int | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Sample one round's cohort on the host, reproducibly from ``(seed, round_idx)``.

    Args:
        seed, round_idx: seed the NumPy generator ``default_rng([seed, round_idx])``.
        population: N.
        clients_per_round: m (uniform: exactly m distinct clients; Poisson: each client
            independently with probability m/N).
        sampling: ``"uniform"`` or ``"poisson"``.
        capacity: length of the returned arrays (padding slots have mask False);
            defaults to the number sampled.  Grows if a Poisson draw exceeds it.

    Returns:
        ``(ids int32[capacity], mask bool[capacity])``; ids sorted ascending.
    """
    rng = np.random.default_rng([seed, round_idx, 0x636F68])  # "coh"
    if sampling == "uniform":
        ids = np.sort(rng.choice(population, size=clients_per_round, replace=False))
    elif sampling == "poisson":
        ids = np.flatnonzero(rng.random(population) < clients_per_round / population)
    else:
        raise ValueError(f"sampling must be uniform or poisson, got {sampling!r}")
    size = max(int(capacity or 0), len(ids), 1)
    out = np.zeros(size, np.int32)
    out[: len(ids)] = ids
    mask = np.arange(size) < len(ids)
    return out, mask



def _poisson_capacity(config: SimulationConfig) -> int:
    """Fixed cohort capacity under Poisson sampling: exceeded with probability < 1e-9."""
    q = config.clients_per_round / config.population
    cap = int(stats.binom.ppf(1 - 1e-9, config.population, q))
    chunk = _policy.resolve_chunk_size(config.chunk_size)   # None: the backend default
    return max(chunk * -(-cap // chunk), 1) if cap > chunk else max(cap, 1)


def _seed_free_width(ds: Any, config: SimulationConfig) -> int | None:
    """Pad width of a disjoint partition that depends on the settings only, not the seed.

    The FedProx synthetic data draws each device's sample count, so the largest client,
    and with it the padded shape, changed with the seed and every seed recompiled the
    round.  With ``B`` the seed-free bound on a device's train samples
    (``info["max_train_per_device"]``, from the cap), a natural client holds at most
    ``B`` and an IID / Dirichlet / shard client at most ``ceil(D·B/N)`` (shards:
    ``2·ceil(D·B/2N)``) of the ``D`` devices' samples (those schemes deal ``n // N`` or
    one more each), so padding to that width never truncates: the data are unchanged,
    only the padding grows. ``None`` (pad to the largest client) for other datasets and
    for ``"sampled"``.
    """
    bound = (ds.info or {}).get("max_train_per_device")
    if bound is None or config.partition == "sampled":
        return None
    if config.partition == "natural":
        return int(bound)
    devices = len(ds.client_names) if ds.client_names else config.population
    total = devices * int(bound)
    if config.partition == "shards":  # two shards of at most ceil(total / 2N) each
        return max(1, 2 * -(-total // (2 * config.population)))
    return max(1, -(-total // config.population))


def build_data(config: SimulationConfig) -> tuple[Any, np.ndarray, np.ndarray]:
    """Load ``config.dataset`` and deal it to ``config.population`` clients.

    Uses :func:`ldpsim.data.load_dataset` and :func:`ldpsim.data.make_population`
    (partition ``config.partition``, Dirichlet ``config.alpha``, seeded by
    ``config.seed``).  FedProx ``synthetic`` data is generated for ``config.population``
    devices.  Returns ``(population, x_test, y_test)``.

    Raises:
        LdpsimError: unknown dataset or partition, missing files (the loader names the fix).
    """
    kwargs = {}
    if config.dataset.lower().replace("-", "_").startswith("synthetic"):
        kwargs = {"num_clients": config.population, "seed": config.seed}
    if config.data_source != "auto":
        kwargs["source"] = config.data_source
    ds = data_registry.load_dataset(config.dataset, config.data_dir, **kwargs)
    population = partition_lib.make_population(
        ds, config.partition,
        None if config.partition == "natural" else config.population,
        alpha=config.alpha, examples_per_client=config.examples_per_client,
        max_examples=_seed_free_width(ds, config), seed=config.seed)
    return population, ds.x_test, ds.y_test


def initial_state(config: SimulationConfig, model: Any, population: Any,
                  mechanism: modes.RoundMechanism | None = None) -> ServerState:
    """The :class:`~ldpsim.fl.ServerState` :func:`simulate` starts from for
    ``config.seed``: model init key ``fold_in(key(seed), "init")``, round root key
    ``fold_in(key(seed), "roun")`` (distinct from every round index's use), and the
    privacy mode's initial state (``mechanism.init``; none for local DP)."""
    root = jax.random.key(config.seed)
    params = model.init(jax.random.fold_in(root, 0x696E6974),  # "init"
                        jnp.zeros((1,) + tuple(population.input_shape), jnp.float32))
    privacy = () if mechanism is None else mechanism.init(population.num_clients, config.clip)
    return init_state(params, jax.random.fold_in(root, 0x726F756E),  # "roun"
                      server_optimizer=config.server_optimizer,
                      server_momentum=config.server_momentum, privacy=privacy)


@functools.lru_cache(maxsize=32)
def _compiled(model_name: str, input_shape: tuple[int, ...], num_classes: int,
              mechanism: modes.RoundMechanism, client_optimizer: str, server_optimizer: str,
              server_momentum: float, local_steps: int | None, local_epochs: int | None,
              batch_size: int, weighting: str, chunk_size: int | None, devices: int = 1,
              lanes: bool = False):
    """(model, jitted round, jitted eval) for one static setting, cached across runs.

    Every traced knob (σ, C, learning rates, seed, round, the mode's knobs) is an
    argument of the round, so runs that differ only in those (an ε sweep, seeds) reuse one
    compilation. ``lanes``: the round and the evaluation vmapped over a leading axis of
    the state and the knobs (:func:`simulate_lanes`).
    """
    model = get_model(model_name, input_shape=input_shape, num_classes=num_classes)
    round_fn = make_round_fn(
        apply_fn=model.apply, mechanism=mechanism, client_optimizer=client_optimizer,
        server_optimizer=server_optimizer, server_momentum=server_momentum,
        local_steps=local_steps, local_epochs=local_epochs, batch_size=batch_size,
        weighting=weighting, chunk_size=chunk_size, devices=devices)
    evaluate = make_eval_fn(model.apply)
    if lanes:
        round_fn = jax.vmap(round_fn, in_axes=(0, None, None, None, None, 0))
        evaluate = jax.vmap(evaluate, in_axes=(0, None, None))
    return model, _xla.jit(round_fn), _xla.jit(evaluate)


@functools.lru_cache(maxsize=32)
def model_dimension(model_name: str, input_shape: tuple[int, ...], num_classes: int) -> int:
    """The number of parameters d of the model (the dimension the report randomizers are
    calibrated for), from the shapes of its initial parameters (nothing is computed)."""
    model = get_model(model_name, input_shape=input_shape, num_classes=num_classes)
    shapes = jax.eval_shape(model.init, jax.random.key(0),
                            jax.ShapeDtypeStruct((1,) + tuple(input_shape), jnp.float32))
    return int(sum(math.prod(x.shape) for x in jax.tree_util.tree_leaves(shapes)))


@jax.jit
def _change_norm(old: PyTree, new: PyTree) -> jax.Array:
    return global_change_norm(old, new)


_lane_change_norm = jax.jit(jax.vmap(global_change_norm))


#: Configuration fields that are traced knobs of the round: configurations that differ
#: only in these can run as lanes of one program (:func:`simulate_lanes`).
_TRACED_FIELDS = frozenset({
    "epsilon", "delta", "clip", "client_lr", "server_lr", "noise_multiplier", "dp_eps",
    "dp_delta", "dp_norm_clip", "dropout_rate", "target_quantile", "clip_learning_rate",
    "clipped_count_stddev", "client_dp_clip", "client_dp_noise_multiplier"})


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
    bases = [_run_columns(c, model.name, n_clients, p) for c, p in zip(configs, plans)]
    participation = np.zeros(n_clients, np.int64)
    change_norm = _lane_change_norm if lanes else _change_norm
    ledger = _budget_ledger(configs, plans[0], participation)

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
        participation[ids[mask]] += 1
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
        budget = _budget_columns(ledger)
        elapsed = time.perf_counter() - start
        rows = []
        for i, (base, p) in enumerate(zip(bases, plans)):
            lane = (lambda v: np.asarray(v)[i]) if lanes else np.asarray
            row = dict(base, round=t + 1, accuracy=float(lane(acc)), loss=float(lane(loss)))
            row.update({k: _scalar(lane(v)) for k, v in rm._asdict().items()
                        if k not in _NOT_COLUMNS})
            row.update(p.row_columns(row))
            row["model_change_norm"] = float(lane(change))
            row["max_participation"] = k_max
            row["epsilon_spent"] = p.epsilon_of(k_max, t + 1, float(lane(min_fraction)))
            row["delta_spent"] = p.delta_of(k_max, t + 1, float(lane(min_fraction)))
            row["client_dp_epsilon"] = p.client_epsilon_of(k_max)
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
        save = lambda c, t, rows, final: ckpt.save(c[0], c[3], t, rows, final)  # noqa: E731
    rows = run_loop(c0.rounds, step, carry, report=report,
                    report_every=c0.eval_every, callback=callback, progress=progress,
                    postfix=lambda row: {"accuracy": f"{row['accuracy']:.4f}"},
                    start=first, done=done, checkpoint=save,
                    stop_before=None if ledger is None else stop_before)
    return [rows[i::len(configs)] for i in range(len(configs))]


def _budget_ledger(configs: Sequence[SimulationConfig], plan: planning.PrivacyPlan,
                   participation: np.ndarray) -> PrivacyLedger | None:
    """The per-client ledger of ``stop_at_epsilon`` over the driver's participation counts,
    with the plan's accountant (the ε of epsilon_spent, per participation count)."""
    c0 = configs[0]
    if c0.stop_at_epsilon is None:
        return None
    if len(configs) > 1:
        raise LdpsimError("stop_at_epsilon needs one run per program (each lane would "
                          "exclude other clients); run the configurations one by one")
    delta = c0.dp_delta if c0.privacy_mode == "mindspore" else c0.delta
    ledger = PrivacyLedger(len(participation), accountant=lambda k: plan.epsilon_of(k, k, 1.0),
                           delta=delta, target_epsilon=c0.stop_at_epsilon,
                           counts=participation)
    one = ledger.epsilon_of_count(1)
    if not one <= c0.stop_at_epsilon:
        raise LdpsimError(f"stop_at_epsilon={c0.stop_at_epsilon!r} is below the epsilon of one "
                          f"participation ({one:.6g} at delta={delta:g}): no client could take "
                          "part; raise it or lower the per-round epsilon")
    return ledger


def _budget_columns(ledger: PrivacyLedger | None) -> dict:
    """ledger_epsilon_max / _mean and retired_clients of a report (NaN, NaN, 0 without one)."""
    if ledger is None:
        return {"ledger_epsilon_max": math.nan, "ledger_epsilon_mean": math.nan,
                "retired_clients": 0}
    return {"ledger_epsilon_max": ledger.max_epsilon(),
            "ledger_epsilon_mean": float(ledger.epsilons().mean()),
            "retired_clients": int((~ledger.allowed()).sum())}


def _run_columns(config: SimulationConfig, model_name: str, population: int,
                 plan: planning.PrivacyPlan) -> dict:
    """The run-level columns every history row of ``config`` starts with."""
    return {
        "dataset": config.dataset,
        "model": model_name,
        **{k: plan.columns[k] for k in _PLAN_COLUMNS},
        "clients_per_round": config.clients_per_round,
        "population": population, "seed": config.seed,
        "privacy_mode": config.privacy_mode, "noise_mode": config.noise_mode,
        "noise_multiplier": plan.columns["noise_multiplier"],
        "sampler_delta_floor": plan.columns["sampler_delta_floor"],
    }


def _scalar(v: Any) -> float | int:
    """A Python number; NaN is always the object ``math.nan``, so that equal histories
    compare equal with ``==`` (two NaN objects never do)."""
    a = np.asarray(v)
    if np.issubdtype(a.dtype, np.integer):
        return int(a)
    x = float(a)
    return math.nan if math.isnan(x) else x


def model_name_for(name: str, population: Any) -> str:
    """``name``, or for ``"auto"`` the model that fits ``population``'s inputs
    (:func:`ldpsim.models.resolve_model_name`: LeNet-5 for images, ``char_lstm`` for
    integer token sequences, MLP for feature vectors), judged by the stored dtype."""
    stored = getattr(population, "x", None)
    stored = getattr(population, "base_x", None) if stored is None else stored
    dtype = None if stored is None else stored.dtype
    return resolve_model_name(name, tuple(population.input_shape), input_dtype=dtype)



def _smallest_client(population: Any) -> int:
    """The fewest examples a client holds (1 if none holds any): the worst case of the
    clients' sample-level accounting."""
    counts = np.asarray(population.client_counts())
    return int(counts[counts > 0].min()) if np.any(counts > 0) else 1
