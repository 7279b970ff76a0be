"""The help formatter of every ``ldpsim`` command (no JAX)."""

from __future__ import annotations

import argparse


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the epilog's line breaks and shows every option's default: ``(default: X)`` is
    added unless the help already says what the default is (or the default is None, False
    or empty: an option that is off unless given, whose help says what None means)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if ("default" in text.lower() or default is argparse.SUPPRESS or default is None
                or default is False or default == [] or not action.option_strings
                or action.nargs == 0):  # a flag: off unless given
            return text
        return text + " (default: %(default)s)"

    def _get_default_metavar_for_optional(self, action: argparse.Action) -> str:
        # The flag's own name (``--rounds ROUNDS``), not its internal dest (``SET_ROUNDS``);
        # a comma-separated list reads ``EPS[,EPS...]``.
        longs = [o for o in action.option_strings if o.startswith("--")]
        name = longs[0][2:].replace("-", "_").upper() if longs else action.dest.upper()
        if "comma-separated" in (action.help or "").lower():
            one = {"EPSILON": "EPS", "EPSILONS": "EPS", "CLIENTS": "N"}.get(name, name.removesuffix("S"))
            return f"{one}[,{one}...]"
        return name
