"""Empirical ε lower bounds for local randomizers: what local DP protects, measured.

An audit runs a local randomizer many times on two neighbouring inputs and asks how well
any test can tell them apart. The result is a **lower bound** on the ε that the
implementation satisfies at the claimed δ. If the lower bound is above the claim, the claim
is refuted at the stated confidence. A lower bound below the claim proves nothing.

The game
--------
A *mechanism* is any callable ``(key, x) -> output``; a *score* maps an output to a scalar.
For a pair of neighbouring inputs ``(x0, x1)``, the audit draws ``n`` outputs of ``M(x0)`` and
``n`` of ``M(x1)``. Trial ``i`` of input ``w`` uses the key ``fold_in(fold_in(key, w), i)``, so
every output is fixed by its position. Each output is scored inside one jitted kernel,
``vmap``-ped over the trials of a chunk. A chunk holds at most 2²² output elements (67
trials at d = 61,706), so memory stays bounded for any ``n``, and only scalars or counts
reach the host (:class:`Game`, :func:`play`, :func:`count_above`).

:func:`worst_case_pair` gives the pairs:

* Replace-one: ``x0 = −C·e₁`` and ``x1 = +C·e₁``. These are ``u`` and ``−u`` with
  ``‖u‖ = C``, 2C apart along one coordinate. ``direction="dense"`` uses
  ``u = C·(1, …, 1)/√d`` instead.
* Add/remove: ``0`` and ``C·e₁``.
* Randomized response: the values 0 and 1.

The bound
---------
Let ``M`` be (ε, δ)-DP and let ``φ`` be any test of ``x0`` against ``x1``. Write
``FPR = P(φ says x1 | x0)`` and ``FNR = P(φ says x0 | x1)``. Then

    ``FPR + e^ε·FNR ≥ 1 − δ``  and  ``FNR + e^ε·FPR ≥ 1 − δ``

(Kairouz, Oh & Viswanath, "The composition theorem for differential privacy", ICML 2015,
arXiv:1311.0776, Thm. 2.1). Hence, for any upper bounds ``FPR⁺ ≥ FPR`` and ``FNR⁺ ≥ FNR``,

    ``ε ≥ ε_lb = max(0, log((1 − δ − FNR⁺)/FPR⁺), log((1 − δ − FPR⁺)/FNR⁺))``

(:func:`epsilon_lower_bound`). This is the hypothesis-testing audit of Jagielski, Ullman &
Oprea, "Auditing differentially private machine learning: how private is private SGD?",
NeurIPS 2020, arXiv:2006.07709, and Nasr et al., "Adversary instantiation: lower bounds for
differentially private machine learning", IEEE S&P 2021, arXiv:2101.04535.

``FPR⁺`` and ``FNR⁺`` are one-sided Clopper–Pearson upper bounds, each at ``1 − α/2``
(:func:`clopper_pearson_upper`, ``scipy.stats.beta.ppf``). By the union bound, both hold
together with probability at least ``1 − α``. On that event ``ε_lb`` is at most the
mechanism's true ε at δ. So ``P(ε_lb > true ε) ≤ α``, for ``confidence = 1 − α``
(default 95 %).

**Choosing the test honestly.** The tests are thresholds on the score: guess ``x1`` iff
``s > t`` or iff ``s ≤ t``. The first ``⌊f·n⌋`` trials of each input (``select_fraction`` f,
default ½) choose the threshold and the orientation. Each candidate is rated by the bound
that its rates would give at the evaluation size (:func:`select_test`). The bound is then
computed for that one test from the remaining trials, whose key positions are disjoint from
the selection trials. Picking the best of many thresholds on the same trials would report a
maximum of many bounds, and the Clopper–Pearson confidence would no longer hold. A test
fixed in advance (``test=``) needs no split, and then every trial is an evaluation trial.

A threshold on the projection is the Neyman–Pearson test for Gaussian noise (the
likelihood ratio is strictly monotone in the score) and for Laplace noise (non-strictly
monotone). :func:`rr_score` gives the same for randomized response.

The sufficient statistic
------------------------
Take additive noise with iid coordinates, ``M(x) = clip(x) + Z``, and let
``v = (x1 − x0)/‖x1 − x0‖``. For Gaussian noise the part of the output orthogonal to ``v``
has the same law under both inputs and is independent of ``⟨M(x), v⟩`` (rotation
invariance). So ``⟨M(x), v⟩`` is sufficient for the pair, and the game on the scalar
``⟨x, v⟩ + σz`` is exactly equivalent and d times cheaper. For Laplace noise the same holds
when ``x1 − x0`` lies along one axis, which is the L1 worst case.

:func:`scalar_gaussian` and :func:`scalar_laplace` draw one scalar from the randomizer's own
sampler. For the Gaussian that is :func:`ldpsim.privacy.gaussian_noise` with the engine's
default ``impl="fast"`` sampler, so its bounded tails are audited too. For Laplace it is
``jax.random.laplace``.

For the axis pair, the 1-D scores equal the full randomizer's projected outputs with the
same keys bit for bit: the first coordinate of its first leaf is the same draw. For the
dense pair the rates agree statistically. Both are tested. The full-mechanism path is kept
as this check: :func:`gaussian_mechanism` and :func:`laplace_mechanism` run the real
randomizers on d-dimensional pytrees and project inside the kernel (:func:`projection_score`).
:func:`from_local_mechanism` audits the engine's mechanism interface
(:class:`ldpsim.privacy.LocalMechanism`) the same way.

Outputs a sampler cannot produce
--------------------------------
With ``n`` evaluation trials, a black-box audit can never show more than
``ε_cap ≈ log(n/log(2/α))``, reached when both error counts are 0 (:func:`epsilon_cap`: 13.0
for n = 10⁶ at 95 %). Sampling alone cannot refute a claim above that value, however wrong
the claim is.

Float samplers, however, have bounded tails: ``|z| ≤ 6.764`` for the default sampler.
Some outputs are therefore *impossible* under
one input, not merely unobserved. ``support`` states intervals that contain every score by
construction. When a test region lies outside one input's support, that error rate is
exactly 0. Then ``ε_lb = inf`` as soon as the other rate's upper bound is below ``1 − δ``:
no ε holds at this δ (see :func:`ldpsim.privacy.sampler_delta_floor`).
:func:`audit_randomizer` derives the support from the sampler's tail bound, padded for
float32 rounding. A sampled score outside the stated support raises an error.

Example: at (ε = 50, δ = 1e-5) with Δ = 2C, σ = 0.30C. Under ``+C``, an output below
``C − 6.764σ`` has probability 0; under ``−C`` it has probability 0.47. So ``ε_lb = inf``
from 2·10⁵ trials per input. Black-box, the same trials give about 9.4. ``jax.random.normal`` (5.42σ)
is refuted the same way at ε = 10.

What a subtle bug costs
-----------------------
The classic ``σ = Δ√(2 ln(1.25/δ))/ε`` at ε = 10, δ = 1e-5 gives σ = 0.969 for Δ = 2. It
delivers ε = 10.39 exactly, 4 % above its claim. Computed from the Clopper–Pearson widths
(:func:`gaussian_trials_needed`, threshold fixed in advance from the ideal analysis):

* The most promising test sits 5.96σ above ``x0``, with ``FPR = 1.2e-9`` and
  ``FNR = 0.99995``. Its exact rates give a bound of only 10.34.
* At 95 % confidence, refuting the claim takes **3.9·10¹⁰ trials per input** for an even
  chance and **7.8·10¹⁰** for 90 % power. At 99 % confidence it takes 6.1·10¹⁰ and
  1.1·10¹¹.
* Choosing the threshold on a selection split would about double these counts.
* On 2 CPU cores the 1-D counting kernel runs about 8·10⁷ trials/s, so the audit takes
  0.3–0.7 h. It was not run.
* Trial positions are 32-bit, so 10–26 root keys would each play 2³² trials and their
  counts be pooled. :func:`audit` itself takes at most 2³² trials per input.
* At FPR ≈ 1e-9 such an audit also measures the sampler itself: the default sampler's
  CDF error is at most 2⁻²⁹ ≈ 1.9e-9.

A gross bug is cheap by comparison. σ calibrated for sensitivity C under replace-one
(true ε 4.39 for a claim of 2) is refuted with 2·10⁶ trials in about a second.

Measured (``benchmarks/audit.py``, 2 loaded CPU cores, 95 % confidence, half the trials
select the test):

* Gaussian (analytic, replace-one, δ = 1e-5), 10⁹ trials per input, about 75 s each:
  ε_lb = 0.993 for a claim of 1, and 3.946 for a claim of 4.
* RR (k = 2), 10⁸ trials per input: 0.999 for 1, and 3.999 for 4.
* Full path: 10⁶ runs of the Gaussian randomizer on a LeNet-5 pytree (d = 61,706) took
  487 s (1.3·10⁸ noise draws/s).

Randomizers beyond additive noise
---------------------------------
``audit_randomizer("privunit2" | "privunitg" | "duchi" | "signds", epsilon=...)`` plays the
real randomizer (:func:`audit_report_randomizer`, pure ε, replace-one) on a worst-case pair
(:func:`report_game`): PrivUnit ``x1 = C·e₁`` against ``x0 = −10⁻⁶C·e₁`` (both the norm and
the direction differ, so both parts of its ε split are exercised), Duchi et al. ``±C·e₁``,
SignDS an update against its reverse (disjoint top-k sets for both signs). The score is the
exact log-likelihood ratio of the pair computed from the report (for Duchi et al. the sign of
the report's projection on e₁, which is that ratio), a sufficient statistic, so the threshold
tests include the Neyman–Pearson test. At ε = 1 and 10⁴ evaluation trials per input
(confidence 0.999): ε_lb ≈ 0.97 for PrivUnit2 and PrivUnitG (2·10⁵ trials, 95 %), never
above the claim (tests/audit/test_audit_randomizers.py). SignDS's informative event (the
reported indices inside a top-k set) is rare at MindSpore's k, so its bound needs more trials.

Events one input never produces
-------------------------------
A float32 realisation can break a pure-ε claim where the score does not look: an output the
sampler produces under one input and never under the other (PrivUnitG's ``α`` from ``ndtri`` of
a uniform ≥ 2⁻²³ never falls below −5.2498 at ε = 2, d = 2, where the raw Gaussian coordinate
of an orthogonal input does with probability 7.6e-8; SignDS counts below its float32 CDF's
resolution; bounded noise against a shifted input). :func:`audit` (and so
:func:`audit_randomizer`) therefore also runs :func:`support_mismatch_test` on the same
releases: the releases are reduced to 1-D statistics (:func:`default_statistics`: the score,
the projection on ``x1 − x0``, the output coordinates, each leaf's min and max, a hash of a
small release; for SignDS the reported indices' counts in each input's top-k set), the first
half of the selection trials gives each input's extreme values and (for statistics with few
values) its set of values, the second half rates every region beyond the other input's
extremes or among values it never took, and the best region's hits ``n_a`` of ``N`` and
``n_b`` of ``N`` on the held-out trials give ``ε_lb = log((L − δ)/U)`` with ``L``, ``U`` the
Clopper–Pearson bounds at ``1 − α/2`` each (``U = 1 − (α/2)^{1/N}`` for ``n_b = 0``). The
result is ``AuditResult.support_mismatch`` (:class:`SupportMismatch`);
:attr:`AuditReport.refuted` counts both tests, so a correct claim is refuted with
probability at most ``2α``.

Sampling never shows a probability is exactly 0, so this bound too stops at ``ε_cap``: a
region of mass ``p`` refutes ε only from about ``e^ε·log(2/α)/p`` held-out trials per input
(:func:`trials_to_refute`). Measured needs (95 %): PrivUnitG's bug at ε = 2, d = 2,
5.1·10⁸; at ε = 1, 2.7·10⁸; at ε = 4, 2.5·10⁹. SignDS at ε = 30 and 100 (d = 1000) is told
apart in every report, but its ideal law gives those regions probabilities of 4.5e-9 and
below: no sampling audit can tell its float32 sampler from the ideal one there, and the
test reports the separation (``observed``) without refuting; a separation is also what any
correct mechanism shows at a large ε. Planted bugs of 0.7–18 % of mass, at 99.9 %
confidence (tests/audit/test_support_mismatch.py), where the threshold test stays below the
claim: a clamp of a coordinate the score ignores (ε = 1, 2·10⁴ trials per input: ε_lb 3.03,
threshold test 0.88), a category one input never outputs (k-RR, ε = 1, 4·10³: 3.73 against
0.80), PrivUnitG's α on a 2⁻⁶ grid (ε = 2, 4·10⁴: 3.02 against 0.77); noise bounded at 2.5σ
(ε = 1, δ = 1e-5, 4·10⁴: 2.66, the threshold test 2.19). Correct Laplace, Gaussian and k-RR
at ε = 1: no refutation in 3 × 200 seeds at 95 % (20,000 trials, largest ε_lb 0.72).

Scope: each audit covers one release, one pair and one relation. It does not cover
composition over rounds, amplification by sampling, or the aggregate.

The whole pipeline
------------------
:func:`audit_pipeline` audits an LDP-FedAvg run of the engine over several rounds with
canary clients whose updates are fixed directions, in ONE run. It computes the one-run
ε_lb of Steinke, Nasr & Jagielski (2023, arXiv:2305.08846;
:func:`one_run_epsilon_lower_bound`) and the Gaussian-DP route of Nasr et al. (2023,
arXiv:2302.07956; :func:`gdp_mu_lower_bound`, :func:`gdp_epsilon`), and sets both against
the accountant's ε. Two threat models (``observe=``): ``"reports"``, the LDP one, where
the server is the adversary and sees every client's release each round (a canary's score
is ``Σ_t ⟨report_{i,t}, u_i⟩``, the likelihood-ratio statistic for Gaussian noise); and
``"aggregate"``, where only the global model after each round is seen (score
``Σ_t ⟨W_{t+1} − W_t, u_i⟩``). Under ``"aggregate"`` ε_lb measures what the aggregate leaks,
far less than the local claim, and the Gaussian-DP route is not computed (its canaries
share one aggregate, so their outcomes are not independent). The Gaussian-DP route assumes
a Gaussian trade-off curve: true for clipped Gaussian LDP composed over rounds, not a
black-box guarantee.
"""

from ldpsim._src.audit._audit import (
    MECHANISMS,
    AuditReport,
    audit,
    audit_randomizer,
    audit_report_randomizer,
)
from ldpsim._src.audit._bounds import (
    MAX_CANDIDATES,
    ORIENTATIONS,
    AuditResult,
    Test,
    candidate_thresholds,
    clopper_pearson_lower,
    clopper_pearson_upper,
    epsilon_cap,
    epsilon_lower_bound,
    error_rates,
    evaluate_test,
    select_test,
    support_thresholds,
)
from ldpsim._src.audit._game import (
    MAX_CHUNK,
    MAX_TRIALS,
    Game,
    Scores,
    count_above,
    play,
    trial_keys,
)
from ldpsim._src.audit._mismatch import (
    Region,
    Statistic,
    Statistics,
    SupportMismatch,
    candidate_regions,
    default_statistics,
    event_epsilon,
    region_hits,
    statistics_of,
    support_mismatch_from_values,
    support_mismatch_test,
    trials_to_refute,
)
from ldpsim._src.audit._mechanisms import (
    REPORT_RANDOMIZERS,
    from_local_mechanism,
    gaussian_mechanism,
    identity_score,
    k_randomized_response,
    laplace_mechanism,
    projection_score,
    report_game,
    rr_mechanism,
    rr_score,
    scalar_gaussian,
    scalar_laplace,
    scalar_support,
    signds_statistics,
    worst_case_pair,
)
from ldpsim._src.audit._one_run import (
    gdp_epsilon,
    gdp_mu_lower_bound,
    one_run_epsilon_cap,
    one_run_epsilon_lower_bound,
    one_run_guesses,
    one_run_p_value,
)
from ldpsim._src.audit._pipeline import (
    GUESS_FRACTIONS,
    OBSERVATIONS,
    PLANTED_BUGS,
    CanaryPopulation,
    PipelineAudit,
    audit_pipeline,
    canary_client_update,
    canary_design,
    canary_reports,
    per_round_epsilon,
)
from ldpsim._src.audit._power import TrialsNeeded, bound_at_quantile, gaussian_trials_needed

__all__ = [
    "AuditReport",
    "AuditResult",
    "CanaryPopulation",
    "GUESS_FRACTIONS",
    "Game",
    "MAX_CANDIDATES",
    "MAX_CHUNK",
    "MAX_TRIALS",
    "MECHANISMS",
    "OBSERVATIONS",
    "ORIENTATIONS",
    "PLANTED_BUGS",
    "PipelineAudit",
    "REPORT_RANDOMIZERS",
    "Region",
    "Scores",
    "Statistic",
    "Statistics",
    "SupportMismatch",
    "Test",
    "TrialsNeeded",
    "audit",
    "audit_pipeline",
    "audit_randomizer",
    "audit_report_randomizer",
    "bound_at_quantile",
    "canary_client_update",
    "canary_design",
    "canary_reports",
    "candidate_regions",
    "candidate_thresholds",
    "clopper_pearson_lower",
    "clopper_pearson_upper",
    "count_above",
    "default_statistics",
    "epsilon_cap",
    "epsilon_lower_bound",
    "error_rates",
    "evaluate_test",
    "event_epsilon",
    "from_local_mechanism",
    "gaussian_mechanism",
    "gaussian_trials_needed",
    "gdp_epsilon",
    "gdp_mu_lower_bound",
    "identity_score",
    "k_randomized_response",
    "laplace_mechanism",
    "one_run_epsilon_cap",
    "one_run_epsilon_lower_bound",
    "one_run_guesses",
    "one_run_p_value",
    "per_round_epsilon",
    "play",
    "projection_score",
    "region_hits",
    "report_game",
    "rr_mechanism",
    "rr_score",
    "scalar_gaussian",
    "scalar_laplace",
    "scalar_support",
    "select_test",
    "signds_statistics",
    "statistics_of",
    "support_mismatch_from_values",
    "support_mismatch_test",
    "support_thresholds",
    "trial_keys",
    "trials_to_refute",
    "worst_case_pair",
]
