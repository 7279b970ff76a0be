"""What each results column is: a setting, part of the private release, or a diagnostic.

A simulation knows more than any deployed system could: the clean clipped updates, the
noise each client drew, whether a client's training diverged. Columns computed from those
are **diagnostics of the simulation**. They are not covered by the privacy guarantee of
the run (a deployed server could not compute them, and publishing them from a real
deployment would leak client data). Everything a deployed system would release is a
function of the privatized reports (and public data), so the guarantee covers it by
post-processing.

Kinds:

``setting``
    Configuration of the run (public by assumption).
``release``
    A function of what the server receives through the mechanism (the privatized updates,
    the noisy adaptive-clip count, who reported) and of public data (the test set); covered
    by the run's guarantee. ``epsilon_spent`` is the accountant's statement about them.
``diagnostic``
    Needs client data or the noise itself: never released by a deployed system, not
    covered by the guarantee, reported so that the simulation can be understood.

:data:`COLUMNS` maps each column of :func:`ldpsim.simulate`'s history rows
(and therefore of ``ldpsim run`` / ``ldpsim sweep`` CSVs) to ``(kind, description)``.
"""

from __future__ import annotations

from typing import TypedDict

from ldpsim._src.privacy import registry

__all__ = ["COLUMNS", "KINDS", "HistoryRow", "column_kind", "columns_of_kind"]

KINDS = ("setting", "release", "diagnostic")

COLUMNS: dict[str, tuple[str, str]] = {
    # --- settings
    "dataset": ("setting", "dataset name"),
    "model": ("setting", "model name"),
    "mechanism": ("setting", "local randomizer: " + ", ".join(registry.engine_randomizers())
                  + " (report randomizers: " + ", ".join(registry.report_randomizers())
                  + ": the server decodes each report), none (clipping only), or the name of "
                    "a user's own mechanism"),
    "neighbours": ("setting", "neighbouring relation of the guarantee: replace or add-remove"),
    "epsilon": ("setting", "per-round local epsilon the noise is calibrated for"),
    "delta": ("setting", "delta of the guarantee (NaN: pure epsilon-DP, delta unused)"),
    "clip": ("setting", "clip bound C"),
    "sensitivity": ("setting", "sensitivity the noise is calibrated to (2C replace, C add/remove; "
                               "NaN for report randomizers)"),
    "sigma": ("setting", "noise std per coordinate (Laplace: scale b; report randomizers: the "
                         "root mean per-coordinate variance of one decoded report at the "
                         "worst-case input norm C; SignDS: sqrt(h/d)*sign_global_lr, the "
                         "root mean square of its reconstruction)"),
    "clients_per_round": ("setting", "m, clients per round (expected m under Poisson sampling)"),
    "population": ("setting", "N, clients in the population"),
    "seed": ("setting", "seed of the run"),
    "privacy_mode": ("setting", "where the noise goes: " + ", ".join(registry.mode_names())),
    "noise_mode": ("setting", "per-client, or aggregate (a simulation shortcut: one exact "
                              "draw of the summed noise; no client holds its noise)"),
    "noise_multiplier": ("setting", "central/distributed z: noise std on the sum / C (discrete: "
                                    "the integer noise's std on the decoded sum / C)"),
    "noise_sum_std": ("setting", "std per coordinate of the noise on the weighted sum"),
    "continuous_noise_std": ("setting", "discrete mode: std per coordinate on the sum of the "
                                        "continuous Gaussian that is (epsilon, delta)-DP per "
                                        "round at the same sensitivity (the reference for "
                                        "noise_sum_std and effective_noise_std); NaN in the "
                                        "other modes"),
    "wrap_bound": ("setting", "discrete mode: the plan's bound on the probability that a "
                              "round's b-bit sum wraps (at most 1e-6; with Poisson cohorts it "
                              "counts the cohort sizes a round reaches); NaN in the other "
                              "modes"),
    "noise_survivors": ("setting", "discrete mode: the clients whose noise the accountant "
                                   "counts per round (clients_per_round; with Poisson cohorts "
                                   "and a whole-run epsilon the cohort size every round reaches "
                                   "but with a probability charged to delta); NaN in the other "
                                   "modes"),
    "round": ("setting", "round number (1-based)"),
    "sampler_delta_floor": ("setting", "no delta below this is delivered by the float noise "
                                       "sampler's bounded tails (ldpsim.privacy."
                                       "sampler_delta_floor); epsilon_spent is inf when it "
                                       "exceeds delta"),
    # --- released (functions of the privatized reports and public data)
    "accuracy": ("release", "test accuracy of the released model (public test set)"),
    "loss": ("release", "test cross-entropy of the released model"),
    "model_change_norm": ("release", "||W_{t+1} - W_t||, a function of the released models"),
    "clip_bound": ("release", "clip bound of the round (adaptive rules: a function of "
                              "earlier releases)"),
    "unclipped_fraction": ("release", "adaptive clipping: the noisy released fraction b"),
    "survivors": ("release", "clients whose report reached the aggregate (the server "
                             "sees who reported; dropout is data-independent)"),
    "noise_variance_fraction": ("release", "distributed DP: realised / target noise "
                                           "variance on the sum (survivors/m)"),
    "clients": ("release", "participants in the round (the cohort, public to the server)"),
    "n_eff": ("release", "(sum w)^2 / sum w^2 of the aggregation weights (weights by "
                         "example count are reported to the server in the clear)"),
    "max_participation": ("release", "most rounds any one client has taken part in"),
    "epsilon_spent": ("release", "the accountant's epsilon so far, for what the float32 "
                                 "samplers deliver (see the privacy docs); inf: a private "
                                 "run whose guarantee no epsilon meets; empty (NaN): a run "
                                 "without privacy (epsilon = inf), where nothing is accounted"),
    "delta_spent": ("release", "the delta at which epsilon_spent holds: the run's delta, or "
                               "for a pure-epsilon randomizer the delta its float32 "
                               "realisation adds (0 only when proven pure)"),
    "client_dp_epsilon": ("release", "DP-SGD clients: sample-level epsilon of the worst client"),
    "client_dp_delta": ("setting", "DP-SGD clients: the delta of client_dp_epsilon"),
    "ledger_epsilon_max": ("release", "stop_at_epsilon: the per-client ledger's largest spent "
                                      "epsilon (NaN without a budget)"),
    "ledger_epsilon_mean": ("release", "stop_at_epsilon: the population-mean spent epsilon of "
                                       "the per-client ledger (NaN without a budget)"),
    "retired_clients": ("release", "stop_at_epsilon: clients whose next participation would "
                                   "exceed the budget (participation counts only)"),
    "wall_time": ("setting", "seconds since the start of the run (compilation included)"),
    # --- diagnostics (need client data or the noise; never released)
    "noise_norm": ("diagnostic", "||decoded aggregate - clean aggregate||: the error of the "
                                 "weighted mean of what the server decodes (additive: the "
                                 "released updates) against the weighted mean of the clean "
                                 "clipped updates, i.e. the norm of the aggregated noise (never "
                                 "known to a deployed server)"),
    "theory_noise_norm": ("diagnostic", "sqrt(E||decoded aggregate - clean aggregate||^2) from "
                                        "each mechanism's exact variance for each client's "
                                        "input: sqrt(sum_k w_k^2 tr Var_k + ||sum_k w_k "
                                        "bias_k||^2) / sum_k w_k (bias: SignDS's decoder "
                                        "only); s * sqrt(d / n_eff) for additive noise of "
                                        "per-coordinate std s. Input dependent for report "
                                        "randomizers, so a diagnostic"),
    "signal_norm": ("diagnostic", "norm of the aggregated clean clipped updates"),
    "snr": ("diagnostic", "signal_norm / noise_norm"),
    "cosine": ("diagnostic", "cosine between the noisy and the clean aggregate"),
    "clip_fraction": ("diagnostic", "fraction of participants whose update was clipped "
                                    "(computed without noise)"),
    "nonfinite_clients": ("diagnostic", "participants whose local update was not finite; "
                                        "they are aggregated as noise around a zero "
                                        "substitute, so nothing about them is released"),
    "train_loss": ("diagnostic", "mean local training loss of the participants"),
    "effective_noise_std": ("diagnostic", "realised root mean square per coordinate of the "
                                          "noise on the weighted sum, ||sum_k w_k xi_k|| / "
                                          "sqrt(d) (compare noise_sum_std, its expectation; "
                                          "integer secure-aggregation modes: the error of the "
                                          "decoded sum, noise + rounding + wrap)"),
    "wrapped_fraction": ("diagnostic", "the discrete mode (ddg, skellam over secure aggregation): "
                                       "fraction of the coordinates of the round's integer "
                                       "sum that left the b-bit range and decoded wrongly "
                                       "(NaN for float sums)"),
    "rounding_failures": ("diagnostic", "the discrete mode: clients whose "
                                        "conditional randomized rounding failed its norm "
                                        "check on every try and sent the zero vector"),
}


def column_kind(name: str) -> str:
    """The kind of results column ``name`` (``"setting"``, ``"release"`` or ``"diagnostic"``).

    Raises:
        KeyError: ``name`` is not a results column.
    """
    return COLUMNS[name][0]


def columns_of_kind(kind: str) -> tuple[str, ...]:
    """Every column of one kind, in :data:`COLUMNS` order."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}; got {kind!r}")
    return tuple(name for name, (k, _) in COLUMNS.items() if k == kind)


_INT_COLUMNS = ("clients_per_round", "population", "seed", "round", "nonfinite_clients",
                "clients", "survivors", "max_participation", "retired_clients",
                "rounding_failures")
_STR_COLUMNS = ("dataset", "model", "mechanism", "neighbours", "privacy_mode", "noise_mode")

#: The typed results row: one per evaluated round, with exactly the :data:`COLUMNS` keys
#: (int, str, or float — NaN where a column does not apply to the run's mode).
HistoryRow = TypedDict("HistoryRow", {
    name: int if name in _INT_COLUMNS else str if name in _STR_COLUMNS else float
    for name in COLUMNS})
