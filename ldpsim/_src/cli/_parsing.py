"""What the command line gave: the options typed (not defaulted), their names, and the
``FIELD=VALUE`` items of ``--axis``/``--set``.

* :func:`given_dests`: which options the command line actually gave (not defaults), so an
  option that does not apply to the chosen mode is an error only when the user typed it;
  :func:`was_given` reads that record.
* :func:`option` names a field as its flag; :func:`pairs` splits ``FIELD=VALUE`` items;
  :func:`check_seed` checks a seed.

Everything here is cheap: no JAX, no data.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from typing import Any

from ldpsim._src._checks import LdpsimError

#: Dest names argparse or the CLI itself sets (never a user option); the dests of
#: subcommand choices (``command``, ``account``'s ``kind``) are left out too (so is
#: ``plot --kind``, which shares the name; no rule needs it).
_INTERNAL = {"handler", "help", "version"}



def _walk(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from _walk(sub)


def given_dests(parser: argparse.ArgumentParser, argv: Sequence[str]) -> frozenset[str]:
    """The dests of the options ``argv`` gives explicitly (parsed again with every default
    suppressed; ``argv`` has already parsed once, so this cannot fail)."""
    saved, internal = [], set(_INTERNAL)
    for p in _walk(parser):
        saved.append((p, None, p._defaults))
        p._defaults = {}
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                internal.add(action.dest)
            elif action.dest not in _INTERNAL:
                saved.append((p, action, action.default))
                action.default = argparse.SUPPRESS
    try:
        namespace = parser.parse_args(list(argv))
    finally:
        for p, action, default in saved:
            if action is None:
                p._defaults = default
            else:
                action.default = default
    return frozenset(k for k in vars(namespace) if k not in internal)


def was_given(args: argparse.Namespace, dest: str, default: Any = None) -> bool:
    """Whether the command line gave ``dest`` (without the record of :func:`given_dests`,
    e.g. a handler called from Python: whether its value differs from ``default``)."""
    given = getattr(args, "_given", None)
    if given is not None:
        return dest in given
    value = getattr(args, dest, default)
    if isinstance(value, float) and isinstance(default, float) and math.isnan(value):
        return not math.isnan(default)
    return value != default


def option(dest: str) -> str:
    """``client_dp_clip`` -> ``--client-dp-clip``."""
    return "--" + dest.replace("_", "-")


def pairs(items, flag: str) -> list[tuple[str, str]]:
    """``FIELD=VALUE`` items of ``flag`` (``--axis``, ``--set``) as (field, value) pairs."""
    out = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise LdpsimError(f"{flag} expects FIELD=VALUE, got {item!r}")
        out.append((name.strip().replace("-", "_"), value.strip()))
    return out


def check_seed(value: Any, what: str = "--seed") -> None:
    if value is not None and (not isinstance(value, int) or value < 0):
        raise LdpsimError(f"{what} must be an integer >= 0, got {value!r}")
