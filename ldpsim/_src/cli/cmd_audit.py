"""``ldpsim audit``: an empirical ε lower bound for a local randomizer at its claimed guarantee."""

from __future__ import annotations

import argparse
import json
import math

ORDER = 15

_EPILOG = """\
examples:
  ldpsim audit --mechanism gaussian --epsilon 1 --delta 1e-5 --clip 1 --trials 1000000
  ldpsim audit --mechanism gaussian --epsilon 50 --delta 1e-5 --trials 100000
  ldpsim audit --mechanism rr --epsilon 2 --k 4 --json
  ldpsim audit --mechanism gaussian --epsilon 4 --dim 61706 --trials 20000

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
--strict makes a refuted claim exit with status 1. JSON writes inf as Infinity.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    from ldpsim._src.cli._guards import HelpFormatter

    p = subparsers.add_parser(
        "audit",
        help="empirical epsilon lower bound for a local randomizer (gaussian, laplace, rr)",
        description="Measure what a local randomizer protects: an empirical lower bound on its "
                    "epsilon at the claimed delta, from a distinguishing game on neighbouring inputs.",
        epilog=_EPILOG,
        formatter_class=HelpFormatter,
    )
    p.add_argument("--mechanism", choices=("gaussian", "laplace", "rr"), default="gaussian",
                   help="gaussian and laplace: ldpsim's randomizers; rr: k-ary randomized response")
    p.add_argument("--epsilon", type=float, required=True, help="the claimed epsilon > 0")
    p.add_argument("--delta", type=float, default=None,
                   help="the claimed delta (gaussian only; default 1e-5)")
    p.add_argument("--clip", type=float, default=1.0, help="clip bound C (gaussian, laplace; default 1)")
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
    p.add_argument("--sampler", choices=("fast", "icdf", "jax"), default=None,
                   help="gaussian N(0,1) sampler of the 1-D path (default: the engine's, fast)")
    p.add_argument("--no-support", action="store_true",
                   help="do not use the sampler's tail bound (a purely black-box bound)")
    p.add_argument("--seed", type=int, default=0, help="root seed")
    p.add_argument("--strict", action="store_true", help="exit with status 1 when the claim is refuted")
    p.add_argument("--no-memory-check", action="store_true",
                   help="run even when the memory estimate exceeds this host's memory")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from ldpsim._src._checks import LdpsimError, check_open_unit, check_positive, check_positive_int
    from ldpsim._src.audit._audit import audit_randomizer
    from ldpsim._src.cli._guards import check_audit_args

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
        print(json.dumps(report.to_dict()))
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
        ("path", f"{path}; {report.sampler}"),
        ("test", report.description),
        ("seconds", f"{report.seconds:.1f}"),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
