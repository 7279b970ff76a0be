"""Input validation shared by every layer.

Every check raises :class:`LdpsimError` (a ``ValueError``) whose message names the
parameter, the value received and the valid range, so that both Python callers and
the CLI (which prints it as one line and exits with status 2) get an actionable error.
"""

from __future__ import annotations

import math
from typing import Any


class LdpsimError(ValueError):
    """Bad input to ldpsim: the message names the parameter, its value and the fix."""


def _as_float(name: str, value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise LdpsimError(f"{name} must be a number, got {value!r}") from None
    if math.isnan(out):
        raise LdpsimError(f"{name} must be a number, got NaN")
    return out


def check_positive(name: str, value: Any, *, allow_inf: bool = False) -> float:
    """Return ``value`` as a float if it is > 0 (and finite unless ``allow_inf``)."""
    out = _as_float(name, value)
    if out <= 0 or (math.isinf(out) and not allow_inf):
        valid = "(0, inf] (inf allowed)" if allow_inf else "(0, inf), finite"
        raise LdpsimError(f"{name} must be > 0, valid range {valid}; got {value!r}")
    return out


def check_nonnegative(name: str, value: Any) -> float:
    """Return ``value`` as a float if it is finite and >= 0."""
    out = _as_float(name, value)
    if out < 0 or math.isinf(out):
        raise LdpsimError(f"{name} must be in [0, inf), got {value!r}")
    return out


def check_open_unit(name: str, value: Any) -> float:
    """Return ``value`` as a float if it lies in the open interval (0, 1)."""
    out = _as_float(name, value)
    if not 0.0 < out < 1.0:
        raise LdpsimError(f"{name} must be in the open interval (0, 1); got {value!r}")
    return out


def check_unit_interval(name: str, value: Any) -> float:
    """Return ``value`` as a float if it lies in the closed interval [0, 1]."""
    out = _as_float(name, value)
    if not 0.0 <= out <= 1.0:
        raise LdpsimError(f"{name} must be in [0, 1], got {value!r}")
    return out


def check_positive_int(name: str, value: Any) -> int:
    """Return ``value`` as an int if it is an integer >= 1."""
    if isinstance(value, bool):
        raise LdpsimError(f"{name} must be an integer >= 1, got {value!r}")
    try:
        out = int(value)
    except (TypeError, ValueError):
        raise LdpsimError(f"{name} must be an integer >= 1, got {value!r}") from None
    if out != value and not (isinstance(value, str) and str(out) == value.strip()):
        raise LdpsimError(f"{name} must be an integer >= 1, got {value!r}")
    if out < 1:
        raise LdpsimError(f"{name} must be an integer >= 1, got {value!r}")
    return out


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    """Return ``value`` if it is one of ``choices``."""
    if value not in choices:
        raise LdpsimError(f"{name} must be one of {', '.join(choices)}; got {value!r}")
    return value


def suggestion(name: Any, valid: Any, *, cutoff: float = 0.75) -> str:
    """``" (did you mean 'x'?)"`` for the valid name closest to ``name``
    (:func:`difflib.get_close_matches`), or ``""`` when none is close."""
    import difflib

    close = difflib.get_close_matches(str(name), sorted(map(str, valid)), n=1, cutoff=cutoff)
    return f" (did you mean {close[0]!r}?)" if close else ""
