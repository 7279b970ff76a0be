"""Audit of the whole LDP-FedAvg pipeline with canary clients, in ONE training run.

What is audited
---------------
A local-DP run of the engine (``privacy_mode="ldp"``, Gaussian or Laplace randomizer): the
calibration of σ from (ε, δ, C, relation), the clip, the noise draw with the engine's keys,
the cohort schedule over several rounds, and the accountant's composed ε
(:func:`ldpsim.modes.plan`, the number :func:`ldpsim.simulate` reports as
``epsilon_spent``). The result is an empirical lower bound ε_lb to set against that claim.

How canaries enter the engine
-----------------------------
Nothing in :mod:`ldpsim._src.fl` is changed. The run uses the engine's public pieces: the
round kernel :func:`ldpsim.fl.make_round_fn`, :func:`ldpsim.fl.sample_cohort`,
:func:`ldpsim._src.fl.simulate.initial_state` and the privacy plan. Canaries are data:

* :class:`CanaryPopulation` wraps the real population. Ids ``N … N+m−1`` are the ``m``
  canary clients. Their gathered "data" carry the canary's update, a fixed vector
  ``S_i·a·u_i`` with a unit direction ``u_i``, a uniform sign ``S_i ∈ {−1, +1}`` and norm ``a``
  (default 2C, so the clip acts and the clipped update is ``S_i·C·u_i``).
* :func:`canary_client_update` is the kernel's ``client_update`` hook. Real clients train as
  usual (:func:`ldpsim.fl.local_update`). A canary's update is its fixed vector,
  whatever the model. The kernel then clips it, adds the randomizer's noise with the
  client's own key, and aggregates it like any other client.
* Every canary takes part in every round, next to the cohort the engine samples from the
  real clients. Under local DP the server is the adversary and may choose whom it asks. So
  every canary's participation count equals the run's most-sampled client's, which is the
  count the accountant reports ε for.

``S_i = +1`` against ``S_i = −1`` is a replace-one pair of updates ``2C`` apart after
clipping, the neighbouring relation of the engine's default ``neighbours="replace"``.
Because the canaries' signs are independent, one run holds ``m`` independent games. This
is the one-run design of Steinke, Nasr & Jagielski (2023, arXiv:2305.08846).

What the auditor sees (threat model)
------------------------------------
``observe="reports"`` (local DP: the server is the adversary): every client's released
report, every round. The score of canary ``i`` is ``Σ_t ⟨report_{i,t}, u_i⟩`` over the rounds
it took part in. This is the log-likelihood-ratio statistic for Gaussian noise, so no test
on the reports does better. The kernel returns only the round's aggregate, so the reports
are rebuilt outside it. :func:`canary_reports` calls the same mechanism object with the
same clip and scale (``RoundMechanism.client_scales``) and the same key,
``split(client_key(root, t, c))[1]``. A canary's update does not depend on the model, so
each rebuilt report is the same noise draw on the same clipped update as the one the
kernel aggregated, equal up to the float rounding of a separately compiled program. The
tests check that the reports' weighted mean is the round's FedAvg update, to 2e-5 in
every coordinate.

``observe="aggregate"``: the auditor sees only the model after each round, as anyone who
receives the global model does. The score is ``Σ_t ⟨W_{t+1} − W_t, u_i⟩``. Each canary is now
hidden among the noise and updates of the whole cohort (about √n more noise in the
projection, plus the other canaries' projections). The audit then measures what the
aggregate leaks, which is far less than the local claim. ε_lb collapses, and that does not
mean the LDP accounting is loose for the reports. The one-run bound stays valid, because
it holds for any score. The GDP route below is not computed here: its Clopper–Pearson
step needs canaries whose outcomes are independent, and canaries that share one aggregate
are not.

The bounds
----------
* One-run (:mod:`ldpsim._src.audit._one_run`). Guess ``sign(score)`` for the ``r``
  evaluation canaries with the largest ``|score|``, then apply the ε_lb of Steinke et al. at
  ``confidence``. The fraction of canaries to guess on is chosen on a selection split (the
  first ``select_fraction`` of the canaries, whose signs the auditor is then treated as
  knowing) and applied to the others: each candidate fraction is rated by the bound its
  selection accuracy (taken one standard error low) would give at the evaluation size.
  The δ term uses the number of evaluation canaries.
  ``P(ε_lb > true ε) ≤ 1 − confidence``.
* Gaussian DP (``observe="reports"`` only). The fixed test "score > 0" on all canaries
  gives FPR and FNR with Clopper–Pearson bounds, hence μ_lb and ε_lb at δ of μ_lb-GDP
  (Nasr et al. 2023, arXiv:2302.07956). This assumes the pipeline's trade-off curve is
  Gaussian. That holds for clipped Gaussian LDP composed over rounds, including a
  wrongly calibrated one, but it is not a black-box guarantee. μ̂ (moment fit: the
  difference of the class means of the scores over their pooled std) is reported as the
  point estimate.

Planted bugs (:data:`PLANTED_BUGS`, for testing the audit): the kernel runs wrong noise
while the claim stays that of the correct configuration.

* ``"sensitivity-c"``: σ calibrated for sensitivity C under replace-one.
* ``"half-clip"``: σ calibrated for a clip bound C/2, while the applied clip is C.
* ``"one-round-accounting"``: the right noise, but the claim is the ε of one round.

Scope: additive-noise local DP (``privacy_mode="ldp"``, ``noise_mode="per-client"`` for
the reports). For Laplace the canary score is still the projection, which is not the
likelihood ratio of L1 noise, so its bound is looser.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from scipy import stats

from ldpsim._src import _xla
from ldpsim._src._checks import (LdpsimError, check_choice, check_open_unit, check_positive,
                                 check_positive_int, check_unit_interval)
from ldpsim._src.audit import _one_run
from ldpsim._src.audit._bounds import clopper_pearson_lower
from ldpsim._src.fl import client as client_lib
from ldpsim._src.fl import modes, planning
from ldpsim._src.fl.config import SimulationConfig
from ldpsim._src.fl.experiment import Experiment
from ldpsim._src.fl.round import ClientDpHyper, RoundHyper, client_key, make_round_fn
from ldpsim._src.fl.simulate import build_data, initial_state, model_name_for, sample_cohort
from ldpsim._src.models import get_model
from ldpsim._src.privacy import registry
from ldpsim._src.privacy.noise import calibration
from ldpsim._src.privacy.randomizers import mechanism as mechanism_lib

__all__ = ["GUESS_FRACTIONS", "OBSERVATIONS", "PLANTED_BUGS", "CanaryPopulation",
           "PipelineAudit", "audit_pipeline", "canary_client_update", "canary_design",
           "canary_reports", "per_round_epsilon"]

OBSERVATIONS = ("reports", "aggregate")
PLANTED_BUGS = ("sensitivity-c", "half-clip", "one-round-accounting")
#: Fractions of the evaluation canaries the auditor may guess on (chosen on the selection split).
GUESS_FRACTIONS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0)
_DESIGN_SALT = 0x636E7279  # "cnry"


# ----------------------------------------------------------------------------- canaries as data


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class CanaryPopulation:
    """A population with ``m`` canary clients appended after the ``N`` real ones.

    Attributes:
        base: the real population (any object with ``gather``, ``num_clients``,
            ``input_shape``, ``num_classes``, ``client_counts``; a pytree).
        updates: float32[m, d], canary ``i``'s fixed update ``S_i·a·u_i`` (flat, in the
            order of :func:`jax.flatten_util.ravel_pytree` of the model's params).
        num_real: N (static).

    ``gather(ids)`` returns ``((x, update, is_canary), y, counts)``. A canary reuses the data
    and example count of real client ``(id − N) mod N`` as inputs its trainer ignores. The
    count only sets its FedAvg weight, which the reports do not depend on.
    """

    base: Any
    updates: jax.Array
    num_real: int = dataclasses.field(metadata=dict(static=True))

    @property
    def num_canaries(self) -> int:
        return int(self.updates.shape[0])

    @property
    def num_clients(self) -> int:
        return self.num_real + self.num_canaries

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.base.input_shape)

    @property
    def num_classes(self) -> int:
        return int(self.base.num_classes)

    def client_counts(self) -> np.ndarray:
        real = np.asarray(self.base.client_counts())
        return np.concatenate([real, real[np.arange(self.num_canaries) % self.num_real]])

    def gather(self, client_ids: jax.Array):
        ids = jnp.asarray(client_ids, jnp.int32)
        is_canary = ids >= self.num_real
        j = ids - self.num_real
        x, y, counts = self.base.gather(jnp.where(is_canary, j % self.num_real, ids))
        upd = jnp.take(self.updates, jnp.clip(j, 0, self.num_canaries - 1), axis=0)
        upd = jnp.where(is_canary[:, None], upd, 0.0)
        return (x, upd, is_canary), y, counts


def canary_client_update(unravel: Callable[[jax.Array], Any],
                         base: Callable = client_lib.local_update) -> Callable:
    """The kernel's ``client_update`` for a :class:`CanaryPopulation`: real clients train
    with ``base``; a canary returns its fixed update (``unravel(update)``, a params pytree)."""

    def update(params, x, y, count, **kw):
        x_real, flat, is_canary = x
        delta, metrics = base(params, x_real, y, count, **kw)
        fixed = unravel(flat)
        delta = jax.tree_util.tree_map(lambda a, b: jnp.where(is_canary, b.astype(a.dtype), a),
                                       delta, fixed)
        return delta, metrics

    return update


def canary_design(m: int, d: int, seed: int, norm: float) -> tuple[np.ndarray, np.ndarray]:
    """Signs ``S`` (int8[m], ±1 uniform) and unit directions ``u`` (float32[m, d]) of ``m``
    canaries, from ``default_rng([seed, "cnry"])``: independent uniform directions on the
    sphere (normalised Gaussian vectors; two of them overlap by about 1/√d, which matters
    only for ``observe="aggregate"``). ``norm`` is only checked here; the updates are
    ``S_i·norm·u_i``."""
    check_positive_int("canaries", m)
    check_positive("canary norm", norm)
    rng = np.random.default_rng([int(seed), _DESIGN_SALT])
    signs = np.where(rng.random(m) < 0.5, -1, 1).astype(np.int8)
    g = rng.standard_normal((m, d))
    return signs, (g / np.linalg.norm(g, axis=1, keepdims=True)).astype(np.float32)


def canary_reports(mechanism: "modes.RoundMechanism", unravel: Callable, ravel: Callable
                   ) -> Callable:
    """``scores(root_key, round_idx, ids, updates, directions, pstate, hyper) -> float32[m]``:
    ``⟨report, u_i⟩`` of each canary's released report in that round, rebuilt with the
    kernel's mechanism object, clip/scale and noise key (jitted)."""
    privatize = mechanism_lib.privatize_fn(mechanism.randomizer)

    def scores(root_key, round_idx, ids, updates, directions, pstate, hyper):
        round_clip = mechanism.round_clip(pstate, hyper.clip, hyper.privacy)
        clip, scale = mechanism.client_scales(pstate, ids, round_clip, hyper.privacy)

        def one(c, upd, u, c_clip, c_scale):
            _, noise_key = jax.random.split(client_key(root_key, round_idx, c))
            release = privatize(noise_key, unravel(upd),
                                mechanism_lib.MechanismParams(c_clip, c_scale))
            return jnp.dot(ravel(release.noisy), u)

        return jax.vmap(one)(ids, updates, directions, clip, scale)

    return jax.jit(scores)


# ----------------------------------------------------------------------------- the audit


@dataclasses.dataclass(frozen=True)
class PipelineAudit:
    """The outcome of :func:`audit_pipeline` (every number with its confidence).

    Attributes:
        epsilon_claimed: the accountant's ε for the run (``epsilon_spent`` after the last
            round, at ``delta``), or the buggy claim of ``"one-round-accounting"``.
        epsilon_lb: one-run lower bound (Steinke et al.) at ``confidence``.
        epsilon_lb_gdp: ε at δ of μ_lb-GDP (reports only; NaN for the aggregate).
        mu_lb, mu_hat, mu_claimed: GDP μ: lower bound, moment fit, and the μ the claim
            implies for a Gaussian pipeline (``√k·Δ/σ``; NaN for Laplace).
        epsilon_cap: the largest one-run ε_lb the chosen number of guesses could give.
        refuted: ``epsilon_lb > epsilon_claimed`` (the one-run bound, no shape assumption).
        refuted_gdp: ``epsilon_lb_gdp > epsilon_claimed`` (under the GDP assumption).
        canaries, select_canaries, eval_canaries, guesses, correct: the one-run counts.
        rounds, participations: rounds run, and rounds each canary took part in.
        errors: ``(false positives, negatives, false negatives, positives)`` of the GDP test.
    """

    observe: str
    planted_bug: str | None
    mechanism: str
    neighbours: str
    epsilon_per_round: float
    delta: float
    clip: float
    sensitivity: float
    sigma: float
    sigma_applied: float
    rounds: int
    participations: int
    clients_per_round: int
    population: int
    canaries: int
    canary_norm: float
    select_canaries: int
    eval_canaries: int
    guesses: int
    correct: int
    confidence: float
    epsilon_claimed: float
    epsilon_lb: float
    epsilon_cap: float
    epsilon_lb_gdp: float
    mu_lb: float
    mu_hat: float
    mu_claimed: float
    errors: tuple[int, int, int, int]
    seconds: float

    @property
    def refuted(self) -> bool:
        return self.epsilon_lb > self.epsilon_claimed

    @property
    def refuted_gdp(self) -> bool:
        return self.epsilon_lb_gdp > self.epsilon_claimed

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["errors"] = list(self.errors)
        out["refuted"] = self.refuted
        out["refuted_gdp"] = self.refuted_gdp
        return out


def per_round_epsilon(total_epsilon: float, delta: float, rounds: int) -> float:
    """The per-round ε of the Gaussian LDP engine whose accountant reports ``total_epsilon``
    after ``rounds`` participations at ``delta``.

    ``k`` Gaussians of multiplier ``z`` compose exactly to one of multiplier ``z/√k``, so
    the per-round multiplier is ``√k·z_total`` with ``z_total`` from the analytic
    calibration (Balle & Wang 2018), and the per-round ε is its ε at ``delta``.
    """
    eps = check_positive("total_epsilon", total_epsilon)
    delta = check_open_unit("delta", delta)
    k = check_positive_int("rounds", rounds)
    z = calibration.analytic_gaussian_sigma(eps, delta) * math.sqrt(k)
    return float(calibration.analytic_gaussian_epsilon(z, delta))


def _kernel_config(config: SimulationConfig, bug: str | None) -> SimulationConfig:
    """The configuration whose calibration the kernel's noise comes from."""
    if bug == "sensitivity-c":
        if config.neighbours != "replace":
            raise LdpsimError("planted bug 'sensitivity-c' needs neighbours='replace'")
        return dataclasses.replace(config, neighbours="add-remove")
    if bug == "half-clip":
        return dataclasses.replace(config, clip=config.clip / 2.0)
    return config


def _check_config(config: Any, observe: str) -> SimulationConfig:
    if isinstance(config, Experiment):
        config = config.flat()
    if not isinstance(config, SimulationConfig):
        raise LdpsimError(f"config must be a SimulationConfig or an Experiment, got "
                          f"{type(config).__name__}")
    if not registry.mode(config.privacy_mode).randomizers:
        local = registry.MODES[0].name
        raise LdpsimError(f"the pipeline audit covers privacy_mode={local!r} (local DP), got "
                          f"{config.privacy_mode!r}")
    if not config.private:
        raise LdpsimError("the pipeline audit needs a private run (finite epsilon)")
    if config.client_dp:
        raise LdpsimError("the pipeline audit does not cover DP-SGD clients (client_dp)")
    if observe == "reports" and config.noise_mode != "per-client":
        raise LdpsimError("observe='reports' needs noise_mode='per-client': the aggregate "
                          "shortcut releases no per-client reports; use observe='aggregate'")
    return config


def _choose_fraction(scores: np.ndarray, signs: np.ndarray, m_eval: int, delta: float,
                     confidence: float) -> float:
    """The guess fraction whose selection-split accuracy promises the best bound at the
    evaluation size. The accuracy is taken about one standard error low (the one-sided
    Clopper–Pearson bound at 84 %), so that a fraction with few selection guesses does not
    win by luck."""
    best, best_f = -1.0, GUESS_FRACTIONS[-1]
    for f in GUESS_FRACTIONS:
        r_s = max(1, round(f * scores.size))
        r_s, v_s = _one_run.one_run_guesses(scores, signs, r_s)
        r_e = max(1, round(f * m_eval))
        v_e = int(math.floor(clopper_pearson_lower(v_s, r_s, 0.16) * r_e))
        rating = _one_run.one_run_epsilon_lower_bound(m_eval, r_e, v_e, delta=delta,
                                                      confidence=confidence)
        if rating > best:
            best, best_f = rating, f
    return best_f


@functools.lru_cache(maxsize=16)
def _compiled(model_name: str, input_shape: tuple[int, ...], num_classes: int,
              mech: "modes.RoundMechanism", client_optimizer: str, server_optimizer: str,
              server_momentum: float, local_steps: int | None, local_epochs: int | None,
              batch_size: int, weighting: str, chunk_size: int | None):
    """(model, jitted round with the canary hook, jitted report scores, jitted aggregate
    projection, unravel, d) for one static setting, cached across audits: audits that
    differ only in traced knobs (ε, C, a planted bug's σ) share one compilation."""
    model = get_model(model_name, input_shape=input_shape, num_classes=num_classes)
    shapes = jax.eval_shape(model.init, jax.random.key(0),
                            jnp.zeros((1,) + input_shape, jnp.float32))
    flat, unravel = ravel_pytree(jax.tree_util.tree_map(
        lambda s: jnp.zeros(s.shape, s.dtype), shapes))
    ravel = lambda tree: ravel_pytree(tree)[0]  # noqa: E731
    round_fn = _xla.jit(make_round_fn(
        apply_fn=model.apply, mechanism=mech, client_optimizer=client_optimizer,
        server_optimizer=server_optimizer, server_momentum=server_momentum,
        local_steps=local_steps, local_epochs=local_epochs, batch_size=batch_size,
        weighting=weighting, chunk_size=chunk_size,
        client_update=canary_client_update(unravel), devices=1))
    project = jax.jit(lambda dirs, old, new: dirs @ (ravel(new) - ravel(old)))
    return (model, round_fn, canary_reports(mech, unravel, ravel), project, unravel,
            int(flat.size))


def audit_pipeline(config: SimulationConfig | Experiment, *, canaries: int = 1000,
                   confidence: float = 0.95, observe: str = "reports",
                   canary_norm: float | None = None, select_fraction: float = 0.5,
                   guesses: int | None = None, planted_bug: str | None = None,
                   data: Any = None, progress: Callable[[str], None] | None = None
                   ) -> PipelineAudit:
    """Audit ``config``'s LDP-FedAvg run with ``canaries`` canary clients in ONE run.

    Args:
        config: the run (``privacy_mode="ldp"``; ``rounds``, ``clients_per_round`` real
            clients per round, ``epsilon`` per round, ``delta``, ``clip``, ``seed``, …).
        canaries: m ≥ 1 canary clients, all in every round.
        confidence: of both bounds, in (0, 1).
        observe: ``"reports"`` (each client's release; the LDP threat model) or
            ``"aggregate"`` (only the global model after each round).
        canary_norm: norm of a canary's update before clipping (default 2·clip).
        select_fraction: share of the canaries used to choose how many guesses to make
            (in [0, 1); 0 needs ``guesses``).
        guesses: make exactly this many guesses on all canaries (no selection split).
        planted_bug: None, or one of :data:`PLANTED_BUGS` (tests of the audit itself).
        data: ``(population, x_test, y_test)`` instead of :func:`build_data` (the test set
            is not used).
        progress: called with a status line per round.

    Returns:
        A :class:`PipelineAudit`.

    Raises:
        LdpsimError: canaries < 1, confidence outside (0, 1), an unknown observation or
            bug, a configuration outside the audit's scope.
    """
    start = time.perf_counter()
    m = check_positive_int("canaries", canaries)
    confidence = check_open_unit("confidence", confidence)
    observe = check_choice("observe", observe, OBSERVATIONS)
    if planted_bug is not None:
        check_choice("planted_bug", planted_bug, PLANTED_BUGS)
    config = _check_config(config, observe)
    select_fraction = check_unit_interval("select_fraction", select_fraction)
    if select_fraction >= 1.0:
        raise LdpsimError(f"select_fraction must be < 1, got {select_fraction!r}")
    if guesses is not None:
        guesses = int(guesses)
        if not 0 <= guesses <= m:
            raise LdpsimError(f"guesses must be in [0, canaries={m}], got {guesses}")
        select_fraction = 0.0
    elif select_fraction == 0.0 or round(select_fraction * m) < 1 or round(select_fraction * m) >= m:
        raise LdpsimError(f"select_fraction={select_fraction:g} of {m} canaries leaves no "
                          "selection or no evaluation canary; use more canaries")
    norm = 2.0 * config.clip if canary_norm is None else check_positive("canary_norm", canary_norm)

    population, _, _ = build_data(config) if data is None else data
    n_real = population.num_clients
    if config.clients_per_round > n_real:
        raise LdpsimError(f"clients_per_round must be <= the real population ({n_real}), got "
                          f"{config.clients_per_round}")
    claim = planning.plan(config, n_real + m)
    kernel_plan = planning.plan(_kernel_config(config, planted_bug), n_real + m)
    mech = kernel_plan.mechanism
    model, round_fn, report_scores, project, unravel, d = _compiled(
        model_name_for(config.model, population), tuple(population.input_shape),
        int(population.num_classes), mech, config.client_optimizer, config.server_optimizer,
        float(config.server_momentum), None if config.local_epochs else config.local_steps,
        config.local_epochs, config.batch_size, config.weighting, config.chunk_size)
    state = initial_state(config, model, population, mech)
    signs, dirs = canary_design(m, d, config.seed, norm)
    pop = CanaryPopulation(population, jnp.asarray(signs[:, None] * norm * dirs, jnp.float32),
                           n_real)
    hyper = RoundHyper(jnp.float32(config.clip), jnp.float32(config.client_lr),
                       jnp.float32(config.server_lr), kernel_plan.hyper,
                       ClientDpHyper(jnp.float32(1.0), jnp.float32(0.0)))
    canary_ids = jnp.arange(n_real, n_real + m, dtype=jnp.int32)
    dirs_j = jnp.asarray(dirs)
    scores = jnp.zeros((m,), jnp.float32)
    participation = np.zeros(n_real + m, np.int64)
    capacity = config.clients_per_round
    if config.sampling == "poisson":   # one padded shape for every round (P[overflow] < 1e-9)
        capacity = int(stats.binom.ppf(1 - 1e-9, n_real, config.clients_per_round / n_real))
    for t in range(config.rounds):
        ids, mask = sample_cohort(config.seed, t, n_real, config.clients_per_round,
                                  config.sampling, max(capacity, 1))
        all_ids = np.concatenate([ids, np.asarray(canary_ids)])
        all_mask = np.concatenate([mask, np.ones(m, bool)])
        new_state, _ = round_fn(state, pop, jnp.int32(t), all_ids, all_mask, hyper)
        if observe == "reports":
            scores = scores + report_scores(state.key, jnp.int32(t), canary_ids, pop.updates,
                                            dirs_j, state.privacy, hyper)
        else:
            scores = scores + project(dirs_j, state.params, new_state.params)
        participation[all_ids[all_mask]] += 1
        state = new_state
        if progress is not None:
            progress(f"round {t + 1}/{config.rounds}")
    scores = np.asarray(scores, np.float64)
    if not np.all(np.isfinite(scores)):
        raise LdpsimError("non-finite canary scores (the run diverged); lower the learning rates")
    k_max = int(participation.max())
    if planted_bug == "one-round-accounting":
        eps_claimed = float(claim.epsilon_of(1, 1, 1.0))
    else:
        eps_claimed = float(claim.epsilon_of(k_max, config.rounds, 1.0))
    delta = float(config.delta) if config.mechanism == "gaussian" else 0.0

    # One-run bound: choose the guess fraction on the selection canaries, bound the rest.
    n_sel = round(select_fraction * m)
    sel, ev = slice(0, n_sel), slice(n_sel, m)
    m_eval = m - n_sel
    if guesses is None:
        f = _choose_fraction(scores[sel], signs[sel], m_eval, delta, confidence)
        r_target = max(1, round(f * m_eval))
    else:
        r_target = guesses
    r, v = _one_run.one_run_guesses(scores[ev], signs[ev], r_target)
    eps_lb = _one_run.one_run_epsilon_lower_bound(m_eval, r, v, delta=delta, confidence=confidence)
    cap = _one_run.one_run_epsilon_cap(m_eval, r, delta=delta, confidence=confidence)

    # GDP route (reports only): the fixed test "score > 0" on every canary.
    pos, neg = signs > 0, signs < 0
    errors = (int(np.sum(scores[neg] > 0)), int(neg.sum()), int(np.sum(scores[pos] <= 0)),
              int(pos.sum()))
    mu_lb = mu_hat = eps_gdp = math.nan
    if observe == "reports" and delta > 0 and errors[1] > 0 and errors[3] > 0:
        mu_lb = _one_run.gdp_mu_lower_bound(*errors, confidence=confidence)["mu_lb"]
        pooled = math.sqrt(0.5 * (np.var(scores[pos], ddof=1) + np.var(scores[neg], ddof=1))) \
            if min(errors[1], errors[3]) > 1 else math.nan
        mu_hat = float((scores[pos].mean() - scores[neg].mean()) / pooled)
        eps_gdp = _one_run.gdp_epsilon(mu_lb, delta)
    sigma_claimed = float(claim.columns["sigma"])
    sens = float(claim.columns["sensitivity"])
    mu_claimed = (math.sqrt(k_max) * sens / sigma_claimed if config.mechanism == "gaussian"
                  else math.nan)
    if planted_bug == "one-round-accounting":
        mu_claimed = sens / sigma_claimed if config.mechanism == "gaussian" else math.nan
    return PipelineAudit(
        observe=observe, planted_bug=planted_bug, mechanism=config.mechanism,
        neighbours=config.neighbours, epsilon_per_round=float(config.epsilon), delta=delta,
        clip=float(config.clip), sensitivity=sens, sigma=sigma_claimed,
        sigma_applied=float(kernel_plan.columns["sigma"]), rounds=config.rounds,
        participations=k_max, clients_per_round=config.clients_per_round, population=n_real,
        canaries=m, canary_norm=norm, select_canaries=n_sel, eval_canaries=m_eval, guesses=r,
        correct=v, confidence=confidence, epsilon_claimed=eps_claimed, epsilon_lb=eps_lb,
        epsilon_cap=cap, epsilon_lb_gdp=eps_gdp, mu_lb=mu_lb, mu_hat=mu_hat,
        mu_claimed=mu_claimed, errors=errors, seconds=time.perf_counter() - start)
