"""``ldpsim calibrate``: the noise scale of a local randomizer for (ε, δ, C)."""

from __future__ import annotations

import argparse
import json
import sys
import warnings

ORDER = 10

_EPILOG = """\
examples:
  ldpsim calibrate --mechanism gaussian --epsilon 1 --delta 1e-5 --clip 1
  ldpsim calibrate --epsilon 50 --delta 0.01 --clip 1 --method mindspore --neighbours add-remove
  ldpsim calibrate --mechanism laplace --epsilon 2 --clip 0.5 --json

neighbouring relations:
  replace     replace-one: a client's clipped update may be swapped for any other, so the
              sensitivity is 2C (correct for local DP; the default)
  add-remove  an update vs. no update, sensitivity C (MindSpore Federated's convention)

output:
  next to the requested (epsilon, delta) the command prints the guarantee the float32
  noise that runs actually delivers (JSON: achieved_epsilon, achieved_delta): epsilon at
  the requested delta and delta at the requested epsilon, for ldpsim's sampler (its
  bounded tails add to delta; docs/privacy_sharp_edges.md, "what the floats deliver")
  and updates of up to --dim coordinates; and the same for ideal real-valued noise
  (exact, Balle & Wang 2018; JSON: ideal_epsilon, ideal_delta).
  classic (epsilon >= 1) and mindspore (at extremes, e.g. epsilon 0.01, delta 1e-12)
  can miss the request: a one-line warning on stderr says so, and the exit status
  stays 0. mindspore accepts epsilon <= 709.78 only (MindSpore's exp(epsilon)).
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    from ldpsim._src.cli._help import HelpFormatter

    p = subparsers.add_parser(
        "calibrate",
        help="noise scale (sigma or Laplace b) for epsilon, delta and a clip bound",
        description=(
            "Print the per-coordinate noise scale of a local randomizer that releases one "
            "client update clipped to norm C with (epsilon, delta)-DP (Gaussian, L2 clip) "
            "or epsilon-DP (Laplace, L1 clip), and the sensitivity it used."
        ),
        epilog=_EPILOG,
        formatter_class=HelpFormatter,
    )
    p.add_argument("--mechanism", choices=("gaussian", "laplace"), default="gaussian",
                   help="local randomizer (default: gaussian)")
    p.add_argument("--epsilon", type=float, required=True, help="epsilon > 0 per release")
    p.add_argument("--delta", type=float, default=None,
                   help="delta in (0, 1); required for gaussian, not allowed for laplace")
    p.add_argument("--clip", type=float, required=True,
                   help="clip bound C > 0 (L2 norm for gaussian, L1 norm for laplace)")
    p.add_argument("--method", choices=("analytic", "classic", "mindspore"), default=None,
                   help="gaussian calibration: analytic (exact Balle-Wang, default), classic "
                        "(sqrt(2 ln(1.25/delta))/epsilon, proven only for epsilon < 1), "
                        "mindspore (MindSpore Federated's numerics)")
    p.add_argument("--neighbours", choices=("replace", "add-remove"), default="replace",
                   help="neighbouring relation (default: replace, sensitivity 2C)")
    p.add_argument("--dim", type=int, default=None, metavar="D",
                   help="coordinates of the update (default 10,000,000: the guarantee then "
                        "holds for every update up to that size)")
    p.add_argument("--sampler", default=None, metavar="NAME",
                   help="noise sampler the guarantee is computed for: gaussian tail "
                        "(default), fast, icdf, jax; laplace bits (default), jax")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=run)


def _default_sampler() -> str:
    from ldpsim._src.privacy.noise import realised

    return realised.default_sampler("gaussian")


def run(args: argparse.Namespace) -> int:
    from ldpsim._src.privacy.noise.calibration import (
        CalibrationShortfallWarning,
        calibrate,
        sampler_delta_floor,
    )

    if args.mechanism == "laplace":  # pure epsilon-DP, one calibration (b = sensitivity/epsilon)
        from ldpsim._src._checks import LdpsimError

        for dest in ("delta", "method"):
            if getattr(args, dest) is not None:
                raise LdpsimError(f"--{dest} does not apply to --mechanism laplace (pure "
                                  "epsilon-DP, b = sensitivity/epsilon); remove it")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cal = calibrate(
            args.mechanism, epsilon=args.epsilon, delta=args.delta, clip=args.clip,
            method=args.method, neighbours=args.neighbours, dim=args.dim,
            sampler=args.sampler,
        )
    shortfall_warned = False
    for w in caught:
        shortfall_warned |= issubclass(w.category, CalibrationShortfallWarning)
        print(f"ldpsim calibrate: warning: {' '.join(str(w.message).split())}", file=sys.stderr)
    if cal.shortfall and not shortfall_warned:  # pragma: no cover (the calibration warns itself)
        print("ldpsim calibrate: warning: the noise misses the requested guarantee "
              f"(achieved epsilon {cal.achieved_epsilon:.6g}, delta {cal.achieved_delta})", file=sys.stderr)
    floor = sampler_delta_floor(cal.sigma if cal.mechanism == "gaussian" else cal.scale,
                                cal.sensitivity, mechanism=cal.mechanism, impl=cal.sampler)
    if cal.mechanism == "laplace" and cal.achieved_delta > 1e-9:
        print(f"ldpsim calibrate: warning: ldpsim's float32 laplace sampler has bounded tails: "
              f"the release is (epsilon, {cal.achieved_delta:.3g})-DP, not pure "
              f"(see docs/privacy_sharp_edges.md)", file=sys.stderr)
    if args.json:
        print(json.dumps({**cal.as_dict(), "sampler_delta_floor": floor}))
        return 0
    if cal.mechanism == "gaussian":
        print(f"sigma        {cal.sigma:.9g}")
    else:
        print(f"scale        {cal.scale:.9g}   (Laplace b; noise std {cal.noise_std:.6g})")
    print(f"sensitivity  {cal.sensitivity:.9g}   ({cal.neighbours} neighbours, clip {cal.clip:g})")
    print(f"mechanism    {cal.mechanism}, method {cal.method}")
    if cal.mechanism == "gaussian":
        print(f"requested    epsilon {cal.epsilon:.6g}, delta {cal.delta:.6g}")
        print(f"achieved     epsilon {cal.achieved_epsilon:.6g}, delta {cal.achieved_delta:.6g}   "
              "(what the float32 noise delivers: epsilon at the requested delta, delta at "
              "the requested epsilon)")
        print(f"ideal        epsilon {cal.ideal_epsilon:.6g}, delta {cal.ideal_delta:.6g}   "
              "(real-valued noise, exact)")
    else:
        print(f"requested    epsilon {cal.epsilon:.6g} (pure DP)")
        print(f"achieved     epsilon {cal.achieved_epsilon:.6g}, delta {cal.achieved_delta:.3g}   "
              "(what the float32 noise delivers; ideal noise: pure, delta 0)")
    print(f"sampler      {cal.sampler}, for updates of up to {cal.dim:,} coordinates: "
          f"neighbours told apart with probability <= {cal.tail_mass:.3g} per release "
          f"(bounded tails; at least {floor:.3g})")
    if cal.mechanism == "gaussian" and cal.method_sigma and cal.sigma > cal.method_sigma * (1 + 1e-6):
        ratio = cal.sigma / cal.method_sigma
        how = f"{ratio:.3g}x" if ratio >= 1.01 else f"{100 * (ratio - 1):.2g} % above"
        other = ""
        if cal.sampler != _default_sampler():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                tail = calibrate(args.mechanism, epsilon=args.epsilon, delta=args.delta,
                                 clip=args.clip, method=args.method, neighbours=args.neighbours,
                                 dim=args.dim)
            other = f"; the default sampler ({tail.sampler}) needs sigma {tail.sigma:.6g}"
        print(f"raised       sigma is {how} the {cal.method} sigma of real-valued noise "
              f"({cal.method_sigma:.6g}) so that the {cal.sampler} sampler's bounded tails "
              f"deliver the request{other}")
    if cal.shortfall:
        print("shortfall    the noise MISSES the requested guarantee and delivers only the achieved "
              "one (use --method analytic)")
    return 0
