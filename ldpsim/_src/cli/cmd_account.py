"""``ldpsim account``: ε of LDP, DP-FedAvg or DP-SGD training, or the z for a target ε; and
what a local ε means centrally (shuffled reports, securely summed Gaussian noise)."""

from __future__ import annotations

import argparse
import json
import math

ORDER = 20

_EPILOG = """\
examples:
  ldpsim account ldp --epsilon 10 --delta 1e-5 --rounds 20      # per-round eps -> total
  ldpsim account ldp --sigma 4 --clip 1 --delta 1e-5 --rounds 10 --method pld
  ldpsim account ldp --sigma 4 --clip 1 --neighbours add-remove --delta 1e-5 --rounds 10
  ldpsim account ldp --mechanism laplace --scale 1 --sensitivity 2 --rounds 10 --method basic
  ldpsim account dpfedavg --noise-multiplier 1 --clients-per-round 100 --population 10000 \\
      --rounds 1000 --delta 1e-6 --json           # fixed-size cohorts, as `ldpsim run` draws
  ldpsim account dpfedavg --target-epsilon 2 --clients-per-round 100 --population 10000 \\
      --rounds 1000 --delta 1e-6 --sampling poisson --method pld
  ldpsim account dpsgd --noise-multiplier 1.1 --batch-size 256 --num-examples 60000 \\
      --epochs 60 --delta 1e-5 --method pld
  ldpsim account dpsgd --noise-multiplier 1.1 --batch-size 256 --num-examples 60000 \\
      --epochs 10 --delta 1e-5 --method mindarmour
  ldpsim account shuffle --epsilon0 4 --clients 100000 --delta 1e-6
  ldpsim account shuffle --epsilon0 1 --clients 2000 --delta 1e-6 --rounds 50
  ldpsim account secagg --sigma 1 --clip 1 --clients 100 --delta 1e-5 --rounds 10 --dropout 0.1
  ldpsim account secagg --target-epsilon 2 --clients 100 --delta 1e-5 --rounds 100 --method analytic
  ldpsim account ddg --epsilon 8 --delta 1e-5 --clients 1000 --dim 61706 --clip 1 \\
      --rounds 500 --population 100000 --bits 16          # whole run, amplified by sampling
  ldpsim account skellam --epsilon 4 --delta 1e-5 --clients 1000 --dim 61706 --clip 1

neighbouring relations (named in every output):
  ldp       local: any two inputs of one client at distance <= the sensitivity:
            --clip C with --neighbours replace (2C, default) or add-remove (C), as
            `ldpsim calibrate` and `ldpsim run` take them; or --sensitivity itself
  dpfedavg  replace one user (fixed, the default: the engine's cohorts), add-or-remove one
            user (poisson)
  dpsgd     add-or-remove one example (poisson), replace one example (fixed)
  shuffle   central: replace one client's data among n shuffled eps0-LDP reports
  secagg    central: replace one client (2C, default) or, with --neighbours add-remove,
            zero out one client's update (C; its noise share stays in the sum); only the
            sum of the surviving reports is seen
  ddg,      central, as secagg, on the integer sum modulo 2^bits; with --population or
  skellam   --sampling-rate: add/remove one client of the population (Poisson cohorts)
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    from ldpsim._src.cli._help import HelpFormatter

    p = subparsers.add_parser(
        "account",
        help="privacy accounting: epsilon of LDP / DP-FedAvg / DP-SGD training or z for a target; "
             "what a local epsilon means centrally (shuffle, secagg)",
        description=(
            "Compute the (epsilon, delta) guarantee of a training run with dp_accounting "
            "(RDP or PLD), or the noise multiplier z that reaches a target epsilon."
        ),
        epilog=_EPILOG,
        formatter_class=HelpFormatter,
    )
    kinds = p.add_subparsers(dest="kind", metavar="<kind>", required=True)

    ldp = kinds.add_parser("ldp", help="one client's local DP over the rounds it takes part in", formatter_class=HelpFormatter)
    ldp.add_argument("--mechanism", choices=("gaussian", "laplace"), default="gaussian",
                     help="local randomizer")
    noise = ldp.add_mutually_exclusive_group(required=True)
    noise.add_argument("--epsilon", type=float, metavar="EPS",
                       help="per-round epsilon the randomizer is calibrated to, as `ldpsim run "
                            "--epsilon` does (at --delta); prints the total over --rounds, the "
                            "runs' epsilon_spent")
    noise.add_argument("--sigma", type=float, help="Gaussian noise std per coordinate")
    noise.add_argument("--scale", type=float, help="Laplace scale b per coordinate")
    ldp.add_argument("--clip", type=float, default=None,
                     help="clip bound C of one client update (with --neighbours; default 1 with "
                          "--epsilon, where it cancels)")
    ldp.add_argument("--neighbours", choices=("replace", "add-remove"), default=None,
                     help="replace one input (sensitivity 2C, the default) or add/remove one (C)")
    ldp.add_argument("--sensitivity", type=float, default=None,
                     help="the sensitivity itself, instead of --clip and --neighbours")
    ldp.add_argument("--calibration", choices=("analytic", "classic", "mindspore"),
                     default=None, help="Gaussian calibration of --epsilon (default analytic; "
                                        "with --epsilon and --mechanism gaussian only)")
    ldp.add_argument("--rounds", type=int, default=1, help="rounds the client took part in")
    ldp.add_argument("--delta", type=float, default=None,
                     help="delta (total; per round for --method basic)")
    ldp.add_argument("--method", choices=("basic", "rdp", "pld", "analytic"), default="pld",
                     help="composition: basic (k*eps0, k*delta0), rdp, pld (default), analytic "
                          "(exact, Gaussian only)")
    ldp.add_argument("--sampler", default=None, metavar="NAME",
                     help="noise sampler the guarantee is for: gaussian tail (default), fast, "
                          "icdf, jax; laplace bits (default), jax; 'ideal' for real-valued noise")
    ldp.add_argument("--dim", type=int, default=None, metavar="D",
                     help="coordinates of the update (default 10,000,000)")

    fed = kinds.add_parser("dpfedavg", help="user-level central DP of DP-FedAvg", formatter_class=HelpFormatter)
    _target_or_z(fed)
    fed.add_argument("--clients-per-round", type=int, required=True)
    fed.add_argument("--population", type=int, required=True)
    fed.add_argument("--rounds", type=int, required=True)
    _sampled_common(fed, default_sampling="fixed", sampling_help=(
        "fixed (default): cohorts of exactly --clients-per-round drawn without replacement, "
        "as `ldpsim run` draws them (sampling='uniform'), replace one user, rdp only; "
        "poisson: each user joins with q = m/N (sampling='poisson'), add or remove one user"))

    sgd = kinds.add_parser("dpsgd", help="sample-level DP of DP-SGD", formatter_class=HelpFormatter)
    _target_or_z(sgd)
    sgd.add_argument("--batch-size", type=int, required=True)
    sgd.add_argument("--num-examples", type=int, required=True)
    steps = sgd.add_mutually_exclusive_group(required=True)
    steps.add_argument("--steps", type=int)
    steps.add_argument("--epochs", type=int,
                       help="steps = epochs * floor(num_examples / batch_size) (--method "
                            "mindarmour: one more per epoch, as its monitor counts)")
    _sampled_common(sgd, extra_methods=("mindarmour",))

    shuf = kinds.add_parser(
        "shuffle", help="central (epsilon, delta) of n shuffled eps0-LDP reports",
        formatter_class=HelpFormatter,
        description="Privacy amplification by shuffling (Feldman, McMillan & Talwar 2021 and "
                    "2023): the central (epsilon, delta) of n reports of an eps0-LDP "
                    "randomizer whose order a trusted shuffler hides.")
    shuf.add_argument("--epsilon0", type=float, required=True,
                      help="local epsilon of each report (pure eps0-LDP)")
    shuf.add_argument("--clients", type=int, required=True, help="n, reports shuffled together")
    shuf.add_argument("--delta", type=float, required=True, help="central delta")
    shuf.add_argument("--rounds", type=int, default=1,
                      help="rounds the client takes part in (each a fresh shuffle of n "
                           "reports), composed by PLD of the clone pair")
    shuf.add_argument("--analysis", choices=("clones", "stronger"), default="clones",
                      help="clones: numerical bound of 'Hiding among the clones' (any eps0-LDP "
                           "randomizer); stronger: 2023 stronger clone (only randomizers that "
                           "admit its decomposition, e.g. randomized response)")

    sec = kinds.add_parser(
        "secagg", help="central (epsilon, delta) of securely summed local Gaussian noise",
        formatter_class=HelpFormatter,
        description="Each client clips to C and adds N(0, sigma^2); secure aggregation reveals "
                    "only the sum of the survivors' reports, whose noise sigma*sqrt(survivors) "
                    "protects each client centrally.")
    noise = sec.add_mutually_exclusive_group(required=True)
    noise.add_argument("--sigma", type=float, help="per-client noise std")
    noise.add_argument("--target-epsilon", type=float,
                       help="solve for the smallest per-client sigma reaching this central "
                            "epsilon (exact, analytic Gaussian)")
    sec.add_argument("--clip", type=float, default=1.0, help="L2 clip bound C")
    sec.add_argument("--clients", type=int, required=True, help="n, clients per round")
    sec.add_argument("--delta", type=float, required=True, help="total delta")
    sec.add_argument("--rounds", type=int, default=1, help="rounds the client took part in")
    sec.add_argument("--dropout", type=float, default=0.0,
                     help="worst-case dropout rate: survivors = n - floor(rate*n)")
    sec.add_argument("--survivors", type=int, default=None,
                     help="realised survivors per round (instead of --dropout)")
    sec.add_argument("--known-shares", type=int, default=0,
                     help="noise shares the adversary may know (1: the target's own too)")
    sec.add_argument("--neighbours", choices=("replace", "add-remove"), default="replace",
                     help="replace one client (sensitivity 2C) or add/remove one (C)")
    sec.add_argument("--method", choices=("pld", "rdp", "analytic"), default="pld",
                     help="composition over rounds")

    disc = []
    for name, what in (("ddg", "distributed discrete Gaussian (Kairouz, Liu & Steinke 2021)"),
                       ("skellam", "Skellam mechanism (Agarwal, Kairouz & Liu 2021)")):
        d = kinds.add_parser(
            name, formatter_class=HelpFormatter,
            help=f"bits, granularity, noise and whole-run epsilon of the {what}",
            description=f"The {what} under secure aggregation modulo 2^bits: clip to C, rotate "
                        "(d padded to a power of two D), scale by 1/gamma, round conditionally, "
                        "add integer noise, sum modulo 2^bits. Solves the least per-client noise "
                        "for --epsilon over --rounds (amplified by Poisson cohort sampling with "
                        "--population/--sampling-rate), and prints the bits needed, gamma, the "
                        "noise, the modular-wrap probability bound and the whole-run epsilon "
                        "(docs/distributed_discrete.md).")
        d.add_argument("--epsilon", type=float, required=True, help="target epsilon, whole run")
        d.add_argument("--delta", type=float, required=True,
                       help="delta, whole run (e.g. 1/population)")
        d.add_argument("--clients", type=int, required=True, help="n, clients per round")
        d.add_argument("--dim", type=int, required=True, help="d, the model's parameters")
        d.add_argument("--clip", type=float, default=1.0, help="L2 clip bound C")
        d.add_argument("--rounds", type=int, default=1, help="T, rounds composed")
        samp = d.add_mutually_exclusive_group()
        samp.add_argument("--population", type=int, default=None,
                          help="N: cohorts are Poisson samples at rate n/N (amplification)")
        samp.add_argument("--sampling-rate", type=float, default=None,
                          help="q: cohorts are Poisson samples at rate q (amplification)")
        d.add_argument("--bits", type=int, default=None,
                       help="b, the modular sum's bit-width (default: the least that meets "
                            "--wrap-target and --mse-tolerance, searched over 8..32)")
        d.add_argument("--granularity", type=float, default=None,
                       help="gamma (needs --bits; default: the finest meeting --wrap-target)")
        d.add_argument("--wrap-target", type=float, default=1e-6,
                       help="largest allowed bound on P[the round's sum wraps]")
        d.add_argument("--mse-tolerance", type=float, default=0.1,
                       help="decoded-sum error variance allowed over the continuous Gaussian's "
                            "(for the bits search)")
        d.add_argument("--neighbours", choices=("replace", "add-remove"), default="replace",
                       help="replace one client (2 x the norm bound) or add/remove one")
        d.set_defaults(mechanism=name)
        disc.append(d)

    for sub in (ldp, fed, sgd, shuf, sec, *disc):
        sub.add_argument("--json", action="store_true", help="print one JSON object")
        sub.set_defaults(handler=run)


def _target_or_z(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--noise-multiplier", type=float, help="z: noise std / clip bound")
    group.add_argument("--target-epsilon", type=float,
                       help="solve for the smallest z reaching this epsilon")


def _sampled_common(parser: argparse.ArgumentParser, extra_methods: tuple[str, ...] = (),
                    sampling_help: str | None = None, default_sampling: str = "poisson") -> None:
    parser.add_argument("--delta", type=float, required=True)
    parser.add_argument("--sampling", choices=("poisson", "fixed"), default=default_sampling,
                        help=sampling_help or "poisson (q = m/N, default) or fixed-size "
                                              "without replacement (rdp only)")
    help_ = "rdp (default) or pld"
    if extra_methods:
        help_ += "; mindarmour = MindArmour RDPMonitor arithmetic (classic conversion, 11 orders)"
    parser.add_argument("--method", choices=("rdp", "pld") + extra_methods, default="rdp",
                        help=help_)


def _ldp(args) -> dict:
    import sys

    from ldpsim._src._checks import LdpsimError
    from ldpsim._src.privacy.accountants.accounting import ldp_epsilon, resolve_sensitivity
    from ldpsim._src.privacy.noise.calibration import calibrate, sampler_delta_floor

    if args.epsilon is not None and args.clip is None and args.sensitivity is None:
        args.clip = 1.0   # sigma / sensitivity is what counts; C cancels
    if args.clip is not None and args.sensitivity is not None:
        raise LdpsimError("--clip and --sensitivity both give the sensitivity; keep one "
                          "(--sensitivity is 2*clip with --neighbours replace, clip with add-remove)")
    if args.clip is None and args.sensitivity is None:
        raise LdpsimError("give --clip C (and --neighbours, default replace: sensitivity 2C) "
                          "or --sensitivity")
    if args.neighbours is not None and args.sensitivity is not None:
        raise LdpsimError("--neighbours goes with --clip (it turns C into the sensitivity); "
                          "remove it or give --clip instead of --sensitivity")
    sens, _ = resolve_sensitivity(args.sensitivity, args.clip, args.neighbours)
    if args.calibration is not None and (args.epsilon is None or args.mechanism != "gaussian"):
        raise LdpsimError("--calibration turns --epsilon into the gaussian sigma; with "
                          + ("--sigma" if args.mechanism == "gaussian" else "--mechanism laplace")
                          + " it does nothing: remove it")
    if args.epsilon is not None:   # the engine's calibration of a per-round epsilon
        if args.sampler == "ideal":
            raise LdpsimError("--epsilon calibrates for ldpsim's float32 sampler; give --sigma "
                              "or --scale for --sampler ideal")
        cal = calibrate(args.mechanism, epsilon=args.epsilon,
                        delta=args.delta if args.mechanism == "gaussian" else None,
                        sensitivity=sens, neighbours=args.neighbours or "replace",
                        method=(args.calibration or "analytic") if args.mechanism == "gaussian"
                        else None,
                        dim=args.dim, sampler=args.sampler)
        args.sigma, args.scale = cal.sigma, cal.scale
    out = ldp_epsilon(args.mechanism, clip=args.clip, neighbours=args.neighbours,
                      sensitivity=args.sensitivity, rounds=args.rounds,
                      delta=args.delta, sigma=args.sigma, scale=args.scale,
                      method=args.method, sampler=args.sampler, dim=args.dim).as_dict()
    if args.epsilon is not None:
        out["epsilon_per_round"] = args.epsilon
    # What ldpsim's own float32 sampler can deliver at this noise level (bounded tails).
    floor = sampler_delta_floor(args.sigma if args.mechanism == "gaussian" else args.scale,
                                sens, mechanism=args.mechanism,
                                impl=None if args.sampler in (None, "ideal") else args.sampler)
    out["sampler_delta_floor"] = floor
    if args.rounds > 0 and out["epsilon"] == float("inf") and args.sampler != "ideal":
        print(f"ldpsim account: warning: the float32 {args.mechanism} sampler's bounded tails "
              f"alone tell worst-case neighbours apart with probability above delta after "
              f"{args.rounds} round(s): no epsilon holds (see docs/privacy_sharp_edges.md)",
              file=sys.stderr)
    return out


def _dpfedavg(args) -> dict:
    from ldpsim._src.privacy.accountants.accounting import dpfedavg_epsilon, dpfedavg_noise_multiplier

    from ldpsim._src._checks import LdpsimError

    if args.sampling == "fixed" and args.method == "pld" and \
            args.clients_per_round != args.population:
        raise LdpsimError("--method pld needs --sampling poisson: --sampling fixed (the "
                          "default, the cohorts `ldpsim run` draws) is accounted by RDP only "
                          "(dp_accounting); use --method rdp")
    common = dict(clients_per_round=args.clients_per_round, population=args.population,
                  rounds=args.rounds, delta=args.delta, sampling=args.sampling,
                  method=args.method)
    if args.target_epsilon is None:
        return dpfedavg_epsilon(noise_multiplier=args.noise_multiplier, **common).as_dict()
    z = dpfedavg_noise_multiplier(target_epsilon=args.target_epsilon, **common)
    out = dpfedavg_epsilon(noise_multiplier=z, **common).as_dict()
    out["target_epsilon"] = args.target_epsilon
    return out


def _dpsgd(args) -> dict:
    from ldpsim._src._checks import LdpsimError, check_positive_int
    from ldpsim._src.privacy.accountants.accounting import dpsgd_epsilon, dpsgd_noise_multiplier

    if args.steps is not None:
        steps = args.steps
    else:
        per_epoch = check_positive_int("num_examples", args.num_examples) // \
            check_positive_int("batch_size", args.batch_size)
        steps = check_positive_int("epochs", args.epochs) * per_epoch
    if args.method == "mindarmour":
        if args.target_epsilon is not None or args.sampling != "poisson" or args.epochs is None:
            raise LdpsimError("--method mindarmour needs --noise-multiplier, --epochs and "
                              "poisson sampling")
        from ldpsim._src.privacy.accountants.monitors import NEIGHBOURING, RDPMonitor

        per_epoch = args.num_examples // args.batch_size
        monitor = RDPMonitor(args.num_examples, args.batch_size, args.noise_multiplier,
                             target_delta=args.delta, noise_decay_mode=None,
                             per_print_times=per_epoch)
        eps, delta = monitor.run_epochs(args.epochs)[-1]
        return {"epsilon": eps, "delta": delta, "method": "mindarmour",
                "neighbouring": NEIGHBOURING, "count": monitor.steps_composed,
                "noise_multiplier": args.noise_multiplier, "batch_size": args.batch_size,
                "num_examples": args.num_examples, "epochs": args.epochs,
                "note": "MindArmour's window quirk: P + 1 steps composed per epoch of P = "
                        "floor(num_examples / batch_size)"}
    common = dict(batch_size=args.batch_size, num_examples=args.num_examples, steps=steps,
                  delta=args.delta, sampling=args.sampling, method=args.method)
    if args.target_epsilon is None:
        return dpsgd_epsilon(noise_multiplier=args.noise_multiplier, **common).as_dict()
    z = dpsgd_noise_multiplier(target_epsilon=args.target_epsilon, **common)
    out = dpsgd_epsilon(noise_multiplier=z, **common).as_dict()
    out["target_epsilon"] = args.target_epsilon
    return out


def _shuffle(args) -> dict:
    from ldpsim._src._checks import LdpsimError
    from ldpsim._src.privacy.accountants import shuffling

    from ldpsim._src.privacy.accountants.accounting import _check_count

    rounds = _check_count("rounds", args.rounds)
    out = shuffling.shuffle_report(args.epsilon0, args.clients, args.delta,
                                   analysis=args.analysis).as_dict()
    out["rounds"] = rounds
    out["local_epsilon_rounds"] = rounds * out["epsilon0"]
    if rounds != 1:
        out["epsilon_one_round"] = out["epsilon"]
        out["epsilon"] = shuffling.shuffle_rounds_epsilon(
            args.epsilon0, args.clients, rounds, args.delta, analysis=args.analysis)
    try:
        out["closed_form_epsilon"] = float(shuffling.closed_form_epsilon(
            args.epsilon0, args.clients, args.delta))
    except LdpsimError:
        out["closed_form_epsilon"] = None
    out["closed_form_max_epsilon0"] = float(shuffling.closed_form_max_epsilon0(args.clients,
                                                                              args.delta))
    return out


def _secagg(args) -> dict:
    from ldpsim._src.privacy.accountants.accounting import ldp_epsilon
    from ldpsim._src._checks import LdpsimError
    from ldpsim._src.privacy.accountants.secagg import secagg_epsilon, secagg_sigma

    if args.target_epsilon is not None:
        if args.survivors is not None:
            raise LdpsimError("--target-epsilon takes the worst case of --dropout; remove "
                              "--survivors")
        args.sigma = secagg_sigma(target_epsilon=args.target_epsilon, delta=args.delta,
                                  clip=args.clip, clients=args.clients, rounds=args.rounds,
                                  dropout=args.dropout, known_shares=args.known_shares,
                                  neighbours=args.neighbours, method=args.method)
    central = secagg_epsilon(sigma=args.sigma, clip=args.clip, clients=args.clients,
                             rounds=args.rounds, delta=args.delta, dropout=args.dropout,
                             survivors=args.survivors, known_shares=args.known_shares,
                             neighbours=args.neighbours, method=args.method).as_dict()
    sensitivity = central["sensitivity"]
    local = ldp_epsilon("gaussian", sensitivity=sensitivity, rounds=args.rounds,
                        delta=args.delta, sigma=args.sigma, method=args.method)
    out = {**central, "local_epsilon": local.epsilon, "local_method": local.method}
    if args.target_epsilon is not None:
        out["target_epsilon"] = args.target_epsilon
    return out


def _discrete(args) -> dict:
    from ldpsim._src._checks import LdpsimError
    from ldpsim._src.privacy.discrete import accounting as A

    if args.population is not None:
        if args.population < args.clients:
            raise LdpsimError(f"--population {args.population} is smaller than --clients "
                              f"{args.clients}")
        q = args.clients / args.population
    else:
        q = args.sampling_rate
    if q is not None and not 0 < q <= 1:
        raise LdpsimError(f"--sampling-rate must be in (0, 1], got {q}")
    if args.dim < 1 or args.clients < 1 or args.rounds < 1:
        raise LdpsimError("--dim, --clients and --rounds must be positive integers")
    if args.bits is not None and not 2 <= args.bits <= 32:
        raise LdpsimError(f"--bits must be an integer in [2, 32], got {args.bits}")
    if args.granularity is not None and args.bits is None:
        raise LdpsimError("--granularity needs --bits (the wrap bound depends on both)")
    if args.granularity is not None and not (args.granularity > 0 and math.isfinite(args.granularity)):
        raise LdpsimError(f"--granularity must be > 0 and finite, got {args.granularity:g}")
    if not (args.mse_tolerance >= 0 and math.isfinite(args.mse_tolerance)):
        raise LdpsimError(f"--mse-tolerance must be >= 0 and finite, got {args.mse_tolerance:g}")
    # Poisson cohorts fall short of --clients about half the time: the noise is counted from
    # the cohort size every round reaches but with a probability charged to delta
    # (accounting.cohort_floor); population N = --population, or --clients/--sampling-rate
    # ... and exceed it about half the time: the wrap bound counts the size a cohort exceeds
    # with probability at most half of --wrap-target, and adds that probability
    # (accounting.cohort_ceiling)
    survivors, delta = None, args.delta
    wrap_n, wrap_tail = args.clients, 0.0
    if q is not None and q < 1:
        population = args.population or max(args.clients, round(args.clients / q))
        survivors, tail = A.cohort_floor(population, args.clients, args.rounds, args.epsilon,
                                         args.delta)
        delta = args.delta - tail
        wrap_n, wrap_tail = A.cohort_ceiling(population, args.clients, args.wrap_target / 2)
    cohort = (f"{args.clients}-client sum" if wrap_n == args.clients else
              f"sum of a Poisson cohort of {args.clients} clients on average (up to {wrap_n})")
    kw = dict(epsilon=args.epsilon, delta=delta, clients=args.clients, dim=args.dim,
              clip=args.clip, rounds=args.rounds, neighbours=args.neighbours)
    if args.granularity is not None:
        try:
            mech = A.solve_noise(args.mechanism, granularity=args.granularity, bits=args.bits,
                                 sampling_rate=q, survivors=survivors, **kw)
        except LdpsimError as err:
            raise LdpsimError(f"gamma {args.granularity:g} cannot fit: {err}; use a coarser "
                              "--granularity (omit it to get the finest that fits)") from None
        wrap = wrap_tail + A.wrap_probability(mech, wrap_n)
        if wrap > args.wrap_target:
            raise LdpsimError(
                f"gamma {args.granularity:g} cannot fit in {args.bits} bits: the "
                f"{cohort} wraps with probability up to {wrap:.3g} > "
                f"--wrap-target {args.wrap_target:g}; use a coarser --granularity or more --bits "
                "(omit --granularity to get the finest that fits)")
        row = None
    else:
        report = A.bits_needed(args.mechanism, wrap_target=args.wrap_target - wrap_tail,
                               mse_tolerance=args.mse_tolerance, sampling_rate=q,
                               survivors=survivors, wrap_clients=wrap_n,
                               bit_range=[args.bits] if args.bits else range(8, 33), **kw)
        if args.bits is not None:
            if not report.rows:
                raise LdpsimError(
                    f"--bits {args.bits} is too small: no granularity keeps the wrap bound of "
                    f"the {cohort} (clip {args.clip}) below --wrap-target "
                    f"{args.wrap_target:g} at epsilon {args.epsilon:g}; use more bits")
            row = report.rows[0]
        else:
            if report.bits is None:
                best = min(report.rows, key=lambda r: r.mse_ratio, default=None)
                reached = ("" if best is None else
                           f" (the least error variance reached is {best.mse_ratio:.4f} x the "
                           f"continuous Gaussian's, at {best.bits} bits)")
                raise LdpsimError(
                    "no bit-width up to 32 meets --wrap-target and --mse-tolerance "
                    f"{args.mse_tolerance:g}{reached}; relax --mse-tolerance or give --bits")
            row = report.row(report.bits)
        mech = A.DiscreteMechanism(args.mechanism, args.clip, row.granularity, row.noise,
                                   args.clients, args.dim, row.bits, neighbours=args.neighbours)
        wrap = wrap_tail + row.wrap_probability
    eps = A.discrete_epsilon(mech, delta, args.rounds, survivors, sampling_rate=q)
    out = {"mechanism": args.mechanism, "bits": mech.bits, "granularity": mech.granularity,
           "noise": mech.noise, "client_variance": mech.client_variance,
           "padded_dim": mech.padded_dim, "norm_bound": mech.norm_bound,
           "wrap_probability": wrap, "epsilon": eps, "target_epsilon": args.epsilon,
           "delta": args.delta, "rounds": args.rounds, "sampling_rate": q,
           "clients": args.clients, "dim": args.dim, "clip": args.clip,
           "noise_survivors": args.clients if survivors is None else survivors,
           "wrap_clients": wrap_n,
           "delta_solved": delta,
           "neighbouring": ("add/remove one client of the population (Poisson cohorts)"
                            if q is not None and q < 1 else
                            ("replace one client" if args.neighbours == "replace"
                             else "zero out one client's update (its noise share stays in "
                                  "the sum)"))}
    if q is not None and q < 1:
        out["epsilon_unamplified"] = A.discrete_epsilon(mech, delta, args.rounds, survivors)
    if row is not None:
        out["mse_ratio"] = row.mse_ratio
    return out


def _print_discrete(out: dict) -> None:
    noise = "sigma" if out["mechanism"] == "ddg" else "variance mu"
    print(f"mechanism        {out['mechanism']}   (d = {out['dim']:,} padded to "
          f"D = {out['padded_dim']:,}; clip {out['clip']:g}; {out['clients']:,} clients/round)")
    print(f"bits             {out['bits']}")
    print(f"granularity      {out['granularity']:.6g}   (gamma; rounded-vector norm bound "
          f"{out['norm_bound']:.6g} integer units)")
    print(f"noise            {noise} {out['noise']:.6g} per client (integer units; realised "
          f"variance {out['client_variance']:.6g})")
    counted = (f" (a Poisson cohort: counted at up to {out['wrap_clients']:,} clients, the rest "
               "of its size tail added)" if out.get("wrap_clients", out["clients"]) != out["clients"]
               else "")
    print(f"wrap probability <= {out['wrap_probability']:.3g} per round{counted}")
    samp = (f", Poisson cohorts at q = {out['sampling_rate']:.4g}"
            if out["sampling_rate"] is not None and out["sampling_rate"] < 1 else "")
    print(f"epsilon          {out['epsilon']:.6g}   whole run: {out['rounds']} round(s) at delta "
          f"{out['delta']:.3g}{samp} (target {out['target_epsilon']:g})")
    if out["noise_survivors"] != out["clients"]:
        print(f"  cohort floor   noise counted from {out['noise_survivors']:,} clients: every "
              f"Poisson cohort reaches it but with a probability charged to delta (epsilon at "
              f"delta {out['delta_solved']:.3g}; docs/distributed_discrete.md)")
    if "epsilon_unamplified" in out:
        print(f"  unamplified    {out['epsilon_unamplified']:.6g}   (every round counted in full)")
    if "mse_ratio" in out:
        print(f"error variance   {out['mse_ratio']:.4g} x the continuous Gaussian's at the same "
              "epsilon")
    print("sampler          exact table draws within a proven total variation of the ideal "
          "law, charged to delta (docs/distributed_discrete.md)")
    print(f"neighbouring     {out['neighbouring']}")


def _print_central(out: dict) -> None:
    if out["kind"] == "shuffle":
        print(f"local epsilon0   {out['epsilon0']:.6g}   (each report alone, pure eps0-LDP)")
        if out["rounds"] != 1:
            print(f"local epsilon    {out['local_epsilon_rounds']:.6g}   over {out['rounds']} "
                  "rounds (k * eps0, exact at delta 0)")
            print(f"central, 1 round {out['epsilon_one_round']:.6g}   at delta "
                  f"{out['delta']:.3g}")
            print(f"central epsilon  {out['epsilon']:.6g}   at delta {out['delta']:.3g}, "
                  f"{out['rounds']} rounds of {out['clients']} shuffled reports "
                  f"({out['analysis']}, PLD composition)")
        else:
            print(f"central epsilon  {out['epsilon']:.6g}   at delta {out['delta']:.3g}, "
                  f"{out['clients']} shuffled reports ({out['analysis']})")
        if out["closed_form_epsilon"] is None:
            cap = out["closed_form_max_epsilon0"]
            print("closed form      n/a (" + (f"Thm. 3.1 needs epsilon0 <= {cap:.4g})" if cap > 0
                  else f"Thm. 3.1 applies to no epsilon0 at {out['clients']} reports and delta "
                       f"{out['delta']:.3g})"))
        else:
            print(f"closed form      {out['closed_form_epsilon']:.6g}   (one round, Thm. 3.1, "
                  "a looser cross-check)")
        print(f"reference        {out['reference']}")
        if out["analysis"] == "stronger":
            print("caveat           valid only for randomizers admitting the stronger-clone "
                  "decomposition (e.g. randomized response; the authors' erratum)")
    else:
        if "target_epsilon" in out:
            print(f"sigma            {out['sigma']:.6g}   (smallest per-client std reaching "
                  f"central epsilon {out['target_epsilon']:g})")
        print(f"local epsilon    {out['local_epsilon']:.6g}   (the client's reports alone over "
              f"{out['count']} round(s), sigma/sensitivity = "
              f"{out['sigma'] / out['sensitivity']:.4g})")
        print(f"central epsilon  {out['epsilon']:.6g}   at delta {out['delta']:.3g} "
              f"(noise multiplier {out['noise_multiplier']:.4g}, survivors "
              f"{out['survivors']})")
        print(f"method           {out['method']}, {out['count']} round(s)")
        print(f"assumes          {out['assumptions']}")
    print(f"neighbouring     {out['neighbouring']}")


def run(args: argparse.Namespace) -> int:
    from ldpsim._src._checks import LdpsimError

    if args.kind == "ldp":  # the noise scale of the other mechanism does not apply
        other = "scale" if args.mechanism == "gaussian" else "sigma"
        if getattr(args, other) is not None:
            mine = "sigma" if other == "scale" else "scale"
            raise LdpsimError(f"--{other} does not apply to --mechanism {args.mechanism} "
                              f"(its noise is --{mine}); remove it")
    try:
        out = {"ldp": _ldp, "dpfedavg": _dpfedavg, "dpsgd": _dpsgd, "shuffle": _shuffle,
               "secagg": _secagg, "ddg": _discrete, "skellam": _discrete}[args.kind](args)
    except MemoryError as err:
        count = "--rounds" if args.kind != "dpsgd" else "--steps/--epochs"
        raise LdpsimError(f"out of memory composing {count} with --method {args.method} "
                          f"({' '.join(str(err).split())}); use fewer {count} or --method "
                          "rdp") from None
    out = {"kind": args.kind, **out}
    if args.json:
        print(json.dumps(out))
        return 0
    if args.kind in ("shuffle", "secagg"):
        _print_central(out)
        return 0
    if args.kind in ("ddg", "skellam"):
        _print_discrete(out)
        return 0
    if "epsilon_per_round" in out:
        noise = (f"sigma {out['sigma']:.6g}" if "sigma" in out else f"scale {out['scale']:.6g}")
        print(f"per round     {out['epsilon_per_round']:.6g}   (calibrated: {noise} at "
              f"sensitivity {out['sensitivity']:g})")
        print(f"epsilon       {out['epsilon']:.6g}   total over {out['count']} round(s)")
    else:
        print(f"epsilon       {out['epsilon']:.6g}")
    if out["epsilon"] == 0 and out.get("count", 1) > 0:
        print("              ((0, delta)-DP: the outputs on neighbouring inputs are within "
              "delta in total variation)")
    print(f"delta         {out['delta']:.6g}")
    if "target_epsilon" in out:
        print(f"noise_mult.   {out['noise_multiplier']:.6g}   (smallest z reaching "
              f"epsilon {out['target_epsilon']:g})")
    print(f"method        {out['method']}, {out['count']} composition(s)"
          + (f"   ({out['note']})" if "note" in out else ""))
    print(f"neighbouring  {out['neighbouring']}")
    if "sampler_delta_floor" in out:
        if out.get("sampler") == "ideal":
            print("sampler       ideal real-valued noise (not what ldpsim's float32 samplers "
                  "deliver)")
        else:
            print(f"sampler       {out.get('sampler')}, up to {out.get('dim', 0):,} coordinates: "
                  f"neighbours told apart with probability <= {out.get('tail_mass', 0):.3g} "
                  f"per release (bounded tails; included above)")
    return 0
