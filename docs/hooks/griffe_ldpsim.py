"""A griffe extension for ldpsim's API reference (used by mkdocstrings when the site builds).

Two things static analysis cannot see on its own:

* ``ldpsim``, ``ldpsim.fl`` and ``ldpsim.plots`` export some names lazily (a module
  ``__getattr__`` over a name table, so that ``import ldpsim`` does not import JAX). This
  extension reads those tables and adds each name as an alias of its implementation, so
  every name in a public module's ``__all__`` is documented on that module's page.
* The docstrings cite other objects with Sphinx roles (``:func:`calibrate```). Markdown has
  no roles: a role naming a public object by its full name (``ldpsim.privacy.calibrate``)
  becomes a link to its entry; any other role becomes inline code. A reStructuredText
  literal-block marker (a paragraph ending in ``::``) loses one colon: the indented block
  after it is already a code block in Markdown.
"""

from __future__ import annotations

import importlib
import re

import griffe

#: The public modules (tests/api/test_public_surface.py pins the same list).
PUBLIC = ["ldpsim", "ldpsim.privacy", "ldpsim.fl", "ldpsim.data", "ldpsim.models",
          "ldpsim.sweep", "ldpsim.audit", "ldpsim.plots", "ldpsim.cli", "ldpsim.attacks",
          "ldpsim.mechanism", "ldpsim.modes"]

_LITERAL = re.compile(r"(?<=\S)::(?=\n)")
_ROLE = re.compile(r":(?:py:)?(?:func|class|mod|meth|data|attr|exc|obj|const)"
                   r":`~?([^`<]+?)(?:\s*<([^>]+)>)?`")


def _lazy_targets(name: str) -> dict[str, str]:
    """name -> full path of the implementation, for the lazily exported names of module ``name``."""
    mod = importlib.import_module(name)
    if name == "ldpsim":
        return {k: f"{m}.{a}" if a else m for k, (m, a) in mod._EXPORTS.items()}
    if name == "ldpsim.fl":
        return {k: f"ldpsim._src.fl.{m}.{k}" for k, m in mod._EXPORTS.items()}
    if name == "ldpsim.plots":
        return {k: f"{m}.{k}" for k, m in getattr(mod, "_LAZY", {}).items()}
    return {}


def _public_names() -> set[str]:
    names = set()
    for name in PUBLIC:
        names.add(name)
        mod = importlib.import_module(name)
        names.update(f"{name}.{attr}" for attr in mod.__all__)
    return names


class LdpsimApi(griffe.Extension):
    def __init__(self) -> None:
        super().__init__()
        self._public: set[str] | None = None

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs) -> None:
        if pkg.path != "ldpsim":
            return
        for name in ("ldpsim", "ldpsim.fl", "ldpsim.plots"):
            mod = pkg if name == "ldpsim" else pkg.get_member(name.split(".", 1)[1])
            for attr, target in _lazy_targets(name).items():
                if attr not in mod.members:
                    mod.set_member(attr, griffe.Alias(attr, target, parent=mod))
            mod.exports = list(importlib.import_module(name).__all__)
        self._public = _public_names()
        self._rewrite(pkg, seen=set())

    def _link(self, match: re.Match) -> str:
        target = (match.group(2) or match.group(1)).strip()
        label = match.group(1).strip() if match.group(2) else target
        if self._public and target in self._public:
            return f"[`{label}`][{target}]"
        return f"`{label}`"

    def _rewrite(self, obj: griffe.Object, seen: set[str]) -> None:
        if obj.path in seen:
            return
        seen.add(obj.path)
        if obj.docstring is not None:
            obj.docstring.value = _LITERAL.sub(":", _ROLE.sub(self._link, obj.docstring.value))
        for member in obj.members.values():
            if not member.is_alias:
                self._rewrite(member, seen)
