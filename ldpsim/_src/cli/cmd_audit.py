"""``ldpsim audit``: an empirical ε lower bound for a local randomizer at its claimed guarantee,
or (``--pipeline``) for a whole LDP-FedAvg run with canary clients, against its accountant."""

from __future__ import annotations

import argparse
import json
import math

from ldpsim._src.privacy import registry

ORDER = 15

_EPILOG = """\
examples:
  ldpsim audit --mechanism gaussian --epsilon 1 --delta 1e-5 --clip 1 --trials 1000000
  ldpsim audit --mechanism gaussian --epsilon 50 --delta 1e-5 --trials 100000
  ldpsim audit --mechanism rr --epsilon 2 --k 4 --json
  ldpsim audit --mechanism gaussian --epsilon 4 --dim 61706 --trials 20000
  ldpsim audit --mechanism privunit2 --epsilon 1 --dim 16 --trials 200000

what it does: plays the distinguishing game on a worst-case pair of neighbouring inputs
(replace: -C e1 vs +C e1; add-remove: 0 vs C e1; rr: values 0 vs 1), chooses a threshold
test on the first half of the trials, and bounds its false-positive and false-negative
rates on the other half with Clopper-Pearson (1 - alpha/2 each), giving
  epsilon_lb = max(log((1 - delta - FNR+)/FPR+), log((1 - delta - FPR+)/FNR+)),
valid with probability >= confidence. epsilon_lb > epsilon refutes the claim; a smaller
value does not prove it. Without --dim the 1-D sufficient statistic is played (exact for
additive noise on this pair, and bit-for-bit the full randomizer's first coordinate);
with --dim the real randomizer runs on a d-coordinate update. The sampler's tail bound
is used as the support of the output (beyond it an output is impossible, not merely
unseen), which lets a bounded-tail sampler be refuted outright (epsilon_lb = inf).
--strict makes a refuted claim exit with status 1. JSON writes inf as Infinity and an
estimate the run could not make (NaN) as null.

--pipeline: audit a whole local-DP FedAvg run of the engine instead of one randomizer.
  ldpsim audit --pipeline --epsilon 4 --total-epsilon --rounds 4 --canaries 4000
  ldpsim audit --pipeline --epsilon 1 --rounds 8 --observe aggregate --json
--canaries canary clients take part in every round (next to --clients-per-round sampled
real clients), each with a fixed update +u_i or -u_i (random sign, norm 2C, so clipped to
C). The auditor sees every client's report (--observe reports, the LDP threat model) or only
the global model (--observe aggregate), scores each canary by the projection of what it
sees on u_i summed over the rounds, guesses the signs of the canaries with the largest
|score| (how many is chosen on a selection half, --select-fraction; the other half is
guessed on), and turns the right guesses into epsilon_lb with the one-run bound of
Steinke, Nasr & Jagielski (2023), valid with
probability >= confidence. With reports it also gives the Gaussian-DP route (Nasr et al.
2023): mu_lb from the error rates of the test "score > 0", and epsilon at delta of mu_lb-GDP
(valid if the pipeline's trade-off curve is Gaussian). Both are compared with the
accountant's epsilon for the same run (epsilon_spent). --epsilon is the engine's per-round
epsilon, or with --total-epsilon the accountant's epsilon after the rounds. The one-run
bound can never exceed about log(guesses / log(1/(1 - confidence))): at epsilon 16 it says
little, whatever the pipeline does. With --strict, --pipeline exits with status 1 when
either bound exceeds the claim.
"""

#: Options of the randomizer game only (an error with --pipeline), and of --pipeline only.
_GAME_ONLY = ("k", "trials", "dim", "sampler", "no_support", "no_memory_check")
_PIPELINE_ONLY = ("canaries", "rounds", "total_epsilon", "observe", "planted_bug",
                  "select_fraction", "dataset", "population", "clients_per_round", "model",
                  "examples_per_client")


#: The report randomizers the audit plays at import (ldpsim.audit.REPORT_RANDOMIZERS; the
#: JAX-free registry's list).
_REPORT = registry.randomizer_names(audit=True)


def register(subparsers: argparse._SubParsersAction) -> None:
    from ldpsim._src.cli._help import HelpFormatter

    report = registry.randomizer_names(audit=True)
    dims = "; ".join(f"{n} {registry.randomizer(n).audit_dim}" for n in report)
    p = subparsers.add_parser(
        "audit",
        help="empirical epsilon lower bound for a local randomizer ("
             + ", ".join(registry.audit_randomizers())
             + ") or a whole LDP-FedAvg run (--pipeline)",
        description="Measure what a local randomizer protects: an empirical lower bound on its "
                    "epsilon at the claimed delta, from a distinguishing game on neighbouring inputs.",
        epilog=_EPILOG,
        formatter_class=HelpFormatter,
    )
    p.add_argument("--mechanism", choices=registry.audit_randomizers(), default="gaussian",
                   help=" and ".join(registry.randomizer_names(engine=True, family="additive"))
                        + ": ldpsim's additive randomizers; "
                        + ", ".join(registry.randomizer_names(engine=False, family="report"))
                        + ": k-ary randomized response; " + ", ".join(report)
                        + ": the report randomizers, played in full on a --dim update "
                          f"(defaults {dims})")
    p.add_argument("--epsilon", type=float, required=True, help="the claimed epsilon > 0")
    p.add_argument("--delta", type=float, default=None,
                   help="the claimed delta (gaussian only; default 1e-5)")
    p.add_argument("--clip", type=float, default=1.0,
                   help="clip bound C of the randomizers that clip: "
                        + ", ".join(n for n in registry.audit_randomizers()
                                    if registry.randomizer(n).input == "vector"
                                    and registry.randomizer(n).uses_clip)
                        + " (default 1)")
    p.add_argument("--neighbours", choices=("replace", "add-remove"), default="replace",
                   help="neighbouring relation (default: replace, inputs 2C apart)")
    p.add_argument("--method", choices=("analytic", "classic", "mindspore"), default=None,
                   help="gaussian calibration to audit (default analytic)")
    p.add_argument("--k", type=int, default=2, help="categories of randomized response (default 2)")
    p.add_argument("--trials", type=int, default=1_000_000,
                   help="trials per input, half to choose the test and half to bound it (default 10^6)")
    p.add_argument("--confidence", type=float, default=0.95, help="confidence of the bound, in (0, 1)")
    p.add_argument("--dim", type=int, default=None,
                   help="run the full randomizer on a d-coordinate update (default: the 1-D sufficient statistic)")
    p.add_argument("--sampler", choices=("tail", "fast", "icdf", "jax"), default=None,
                   help="gaussian N(0,1) sampler of the 1-D path (default: the engine's, tail)")
    p.add_argument("--no-support", action="store_true",
                   help="do not use the sampler's tail bound (a purely black-box bound)")
    p.add_argument("--seed", type=int, default=0, help="root seed")
    p.add_argument("--strict", action="store_true", help="exit with status 1 when the claim is refuted")
    p.add_argument("--no-memory-check", action="store_true",
                   help="run even when the memory estimate exceeds this host's memory")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    g = p.add_argument_group("pipeline audit (--pipeline)")
    g.add_argument("--pipeline", action="store_true",
                   help="audit a whole LDP-FedAvg run with canary clients (one run)")
    g.add_argument("--canaries", type=int, default=None, help="canary clients (default 1000)")
    g.add_argument("--rounds", type=int, default=None, help="rounds of the run (default 4)")
    g.add_argument("--total-epsilon", action="store_true",
                   help="--epsilon is the accountant's epsilon after the rounds (Gaussian), "
                        "not the per-round epsilon")
    g.add_argument("--observe", choices=("reports", "aggregate"), default=None,
                   help="what the auditor sees (default reports: every client's release)")
    g.add_argument("--planted-bug", choices=("sensitivity-c", "half-clip", "one-round-accounting"),
                   default=None, help="run a deliberately wrong pipeline (to test the audit)")
    g.add_argument("--select-fraction", type=float, default=None,
                   help="share of the canaries that choose the number of guesses (default 0.5)")
    g.add_argument("--dataset", default=None, help="dataset of the real clients (default synthetic)")
    g.add_argument("--population", type=int, default=None, help="real clients (default 100)")
    g.add_argument("--clients-per-round", type=int, default=None,
                   help="real clients sampled per round (default 10)")
    g.add_argument("--model", default=None, help="model (default auto)")
    g.add_argument("--examples-per-client", type=int, default=None,
                   help="examples per real client (default 16)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from ldpsim._src._checks import LdpsimError, check_open_unit, check_positive, check_positive_int
    from ldpsim._src.audit._audit import audit_randomizer
    from ldpsim._src.cli._guards import check_audit_args
    from ldpsim._src.cli._parsing import option, was_given

    if args.pipeline:
        return run_pipeline(args)
    for dest in _PIPELINE_ONLY:
        if was_given(args, dest, None if dest != "total_epsilon" else False):
            raise LdpsimError(f"{option(dest)} applies to --pipeline only; add --pipeline or "
                              "remove it")
    check_positive("epsilon", args.epsilon)
    check_positive_int("trials", args.trials)
    check_open_unit("confidence", args.confidence)
    if args.dim is not None:
        check_positive_int("dim", args.dim)
    if args.sampler is not None and args.mechanism != "gaussian":
        raise LdpsimError("--sampler applies to --mechanism gaussian only")
    check_audit_args(args)  # options of other mechanisms, seed, trial range, memory
    report = audit_randomizer(
        args.mechanism, epsilon=args.epsilon, delta=args.delta, clip=args.clip, neighbours=args.neighbours,
        trials=args.trials, confidence=args.confidence, dim=args.dim, seed=args.seed, k=args.k,
        method=args.method, impl=args.sampler, use_support=not args.no_support,
    )
    if args.json:
        print(_json(report.to_dict()))
    else:
        _print(report)
    return 1 if args.strict and report.refuted else 0


def _fmt(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:.4g}"


def _print(report) -> None:
    r = report.result
    if report.mechanism == "rr":
        what = f"rr, keep probability {report.scale:.6g}"
        claim = f"epsilon = {report.epsilon:g} (pure)"
    elif report.mechanism in registry.randomizer_names(audit=True):
        what = (f"{report.mechanism}" + (f", clip {report.clip:g}" if report.clip else "")
                + f", any two inputs (pair {report.sensitivity:.4g} apart)")
        claim = f"epsilon = {report.epsilon:g} (pure)"
    else:
        name = "sigma" if report.mechanism == "gaussian" else "b"
        what = (f"{report.mechanism} ({report.method}), {name} = {report.scale:.6g}, clip {report.clip:g}, "
                f"{report.neighbours} (sensitivity {report.sensitivity:g})")
        claim = f"epsilon = {report.epsilon:g}" + (f", delta = {report.delta:g}" if report.delta else " (pure)")
    path = report.path + (f", d = {report.dim}" if report.dim else "")
    verdict = "REFUTED (epsilon_lb > epsilon)" if report.refuted else "not refuted (a lower bound cannot prove it)"
    rows = [
        ("mechanism", what),
        ("claimed", claim),
        ("epsilon_lb", f"{_fmt(r.epsilon_lb)} at {r.confidence:.4g} confidence"
                       + (f" (sampled rates alone: {_fmt(r.epsilon_lb_sampled)})" if r.zero_by_support else "")),
        ("verdict", verdict),
        ("trials", f"{r.trials} per input: {r.select_trials} choose the test, {r.eval_trials} bound it "
                   f"(black-box maximum at {r.eval_trials} trials: {_fmt(r.epsilon_cap)})"),
        ("rates", f"FPR {r.fpr:.4g} (upper {r.fpr_upper:.4g}), FNR {r.fnr:.4g} (upper {r.fnr_upper:.4g})"),
        *([("support", _support_line(r.support_mismatch, report.epsilon))] if r.support_mismatch else []),
        ("path", f"{path}; {report.sampler}"),
        ("test", report.description),
        ("seconds", f"{report.seconds:.1f}"),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")


def _support_line(sm, epsilon: float) -> str:
    """The support-mismatch test in one line (ldpsim.audit.support_mismatch_test)."""
    if sm.statistic is None:
        return (f"no support mismatch: every value one input reached on the selection trials, the other "
                f"reached too ({sm.statistics} statistics)")
    other = "x1" if sm.hit_input == "x0" else "x0"
    each = 1 - (1 - sm.confidence) / 2
    text = (f"{sm.region}: {sm.hit_input} in {sm.hits} of {sm.eval_trials} held-out trials, {other} in "
            f"{sm.other_hits}; P({sm.hit_input}) >= {sm.hits_lower:.3g}, P({other}) <= {sm.other_upper:.3g} "
            f"({each:.4g} each) -> epsilon_lb {_fmt(sm.epsilon_lb)} (at most {_fmt(sm.epsilon_cap)} at "
            f"{sm.eval_trials} trials)")
    if sm.refutes(epsilon):
        return text + ": REFUTES the claim"
    if sm.observed:
        need = sm.trials_to_refute(epsilon)
        return text + (f": never under {other}, but refuting epsilon = {epsilon:g} at this rate needs about "
                       f"{need:.2g} trials per input" if math.isfinite(need) else "")
    return text + ": no support mismatch seen"


def run_pipeline(args: argparse.Namespace) -> int:
    """``ldpsim audit --pipeline``: canary clients in one LDP-FedAvg run."""
    import warnings

    from ldpsim._src._checks import (LdpsimError, check_open_unit, check_positive,
                                     check_positive_int)
    from ldpsim._src.cli._parsing import check_seed, option, was_given

    defaults = {"k": 2, "trials": 1_000_000, "dim": None, "sampler": None, "no_support": False,
                "no_memory_check": False}
    for dest in _GAME_ONLY:
        if was_given(args, dest, defaults[dest]):
            raise LdpsimError(f"{option(dest)} applies to the randomizer game, not to "
                              "--pipeline; remove it")
    if args.mechanism == "rr":
        raise LdpsimError("--pipeline audits the engine's local randomizers: --mechanism "
                          "gaussian or laplace")
    check_positive("epsilon", args.epsilon)
    check_open_unit("confidence", args.confidence)
    check_seed(args.seed)
    canaries = check_positive_int("canaries", 1000 if args.canaries is None else args.canaries)
    rounds = check_positive_int("rounds", 4 if args.rounds is None else args.rounds)
    select = 0.5 if args.select_fraction is None else args.select_fraction
    if args.total_epsilon and args.mechanism != "gaussian":
        raise LdpsimError("--total-epsilon applies to --mechanism gaussian")
    from ldpsim._src.audit._pipeline import audit_pipeline, per_round_epsilon
    from ldpsim._src.fl.config import SimulationConfig

    delta = 1e-5 if args.delta is None else args.delta
    epsilon = (per_round_epsilon(args.epsilon, delta, rounds) if args.total_epsilon
               else args.epsilon)
    kw = dict(dataset=args.dataset or "synthetic", model=args.model or "auto",
              population=100 if args.population is None else args.population,
              clients_per_round=10 if args.clients_per_round is None else args.clients_per_round,
              examples_per_client=(16 if args.examples_per_client is None
                                   else args.examples_per_client),
              rounds=rounds, epsilon=epsilon, clip=args.clip, mechanism=args.mechanism,
              neighbours=args.neighbours, seed=args.seed)
    if args.mechanism == "gaussian":
        kw["delta"] = delta
        if args.method is not None:
            kw["calibration"] = args.method
    elif was_given(args, "delta") or args.method is not None:
        raise LdpsimError("--delta and --method apply to --mechanism gaussian")
    config = SimulationConfig(**kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the sampler-floor warning: epsilon_claimed says inf
        report = audit_pipeline(config, canaries=canaries, confidence=args.confidence,
                                observe=args.observe or "reports", select_fraction=select,
                                planted_bug=args.planted_bug)
    if args.json:
        print(_json(report.to_dict()))
    else:
        _print_pipeline(report)
    refuted = report.refuted or report.refuted_gdp
    return 1 if args.strict and refuted else 0


def _json(record: dict) -> str:
    """One JSON object; a NaN (an estimate the run could not make) is null, inf is Infinity."""
    def clean(v):
        if isinstance(v, float) and math.isnan(v):
            return None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        return v

    return json.dumps(clean(record))


def _print_pipeline(a) -> None:
    conf = f"at {a.confidence:.4g} confidence"
    claim = (f"{_fmt(a.epsilon_claimed)} at delta = {a.delta:g} (accountant, {a.participations} "
             f"participations" + (", planted bug: one round's epsilon" if a.planted_bug ==
                                  "one-round-accounting" else "") + ")")
    verdict = ("REFUTED (epsilon_lb > claimed)" if a.refuted else
               "REFUTED under the GDP assumption only" if a.refuted_gdp else
               "not refuted (a lower bound cannot prove the claim)")
    if not (a.refuted or a.refuted_gdp) and a.epsilon_cap <= a.epsilon_claimed:
        verdict += (f"; this run could not have refuted it: with {a.guesses} guesses its bound "
                    f"is at most {_fmt(a.epsilon_cap)}, not above the claimed "
                    f"{_fmt(a.epsilon_claimed)} (more --canaries)")
    rows = [
        ("pipeline", f"LDP-FedAvg, {a.mechanism}, clip {a.clip:g}, {a.neighbours} (sensitivity "
                     f"{a.sensitivity:g}), sigma {a.sigma:.6g}"
                     + (f", applied sigma {a.sigma_applied:.6g} (planted bug {a.planted_bug})"
                        if a.sigma_applied != a.sigma else "")),
        ("run", f"{a.rounds} rounds, {a.clients_per_round} of {a.population} real clients per "
                f"round + {a.canaries} canaries every round, per-round epsilon "
                f"{a.epsilon_per_round:.6g}"),
        ("observed", "every client's report (LDP threat model)" if a.observe == "reports"
         else "the global model after each round (aggregate only)"),
        ("epsilon claimed", claim),
        ("epsilon_lb (one run)", f"{_fmt(a.epsilon_lb)} {conf} (Steinke et al. 2023; at most "
                                 f"{_fmt(a.epsilon_cap)} with {a.guesses} guesses)"),
        ("guesses", f"{a.correct} right of {a.guesses} on {a.eval_canaries} evaluation canaries "
                    f"({a.select_canaries} chose the number)"),
    ]
    if a.observe == "reports":
        rows.append(("epsilon_lb (GDP)", f"{_fmt(a.epsilon_lb_gdp)} {conf}: mu_lb "
                                         f"{a.mu_lb:.4g}, fitted mu {a.mu_hat:.4g}, claimed mu "
                                         f"{a.mu_claimed:.4g} (valid if the trade-off curve is "
                                         "Gaussian)"))
    rows += [("verdict", verdict), ("seconds", f"{a.seconds:.1f}")]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
