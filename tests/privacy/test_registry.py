"""The registry (ldpsim._src.privacy.registry) is the only list of local randomizers and
privacy modes: no other module names them, a spec added to it is a choice everywhere, and it
imports without JAX."""

from __future__ import annotations

import ast
import dataclasses
import math
import pathlib
import subprocess
import sys

import pytest

from ldpsim import LdpsimError
from ldpsim._src.privacy import registry

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "ldpsim"

#: Modules allowed to spell a mode's name besides its spec's modules: the round kernel's
#: factories of each mode (one function per mode), and the theory table of trust models,
#: whose ``"central"`` is a trust model of its own list (ldpsim.privacy.TRUST_MODELS).
_MODE_HOMES = {"ldpsim/_src/fl/modes.py", "ldpsim/_src/privacy/accountants/trust.py"}


def _module_file(dotted: str) -> str:
    return dotted.partition(":")[0].replace(".", "/") + ".py"


def _string_constants(path: pathlib.Path):
    """The string constants of a module that are code (not docstrings, not ``__all__``, not
    attribute names given to getattr/hasattr/setattr)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                skip.add(id(body[0].value))
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                for t in node.targets):
            skip.update(id(sub) for sub in ast.walk(node.value))
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr", "setattr") and len(node.args) > 1):
            skip.add(id(node.args[1]))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in skip:
            yield node.lineno, node.value


def test_no_module_but_the_registry_and_its_own_names_a_randomizer_or_a_mode():
    """The report randomizers' names and the user-level modes' names (the words with no
    other meaning in ldpsim: ``gaussian``/``laplace`` also name noise laws, ``none`` a
    value, ``mindspore`` a calibration method) occur as code only in the registry and in the
    modules its specs point to."""
    homes: dict[str, set[str]] = {}
    for spec in registry.RANDOMIZERS:
        if spec.family == "report" and spec.engine:
            homes[spec.name] = {_module_file(spec.implementation)}
    for spec in registry.MODES:
        if spec.user_level:
            homes[spec.name] = {_module_file(spec.plan), _module_file(spec.nested), *_MODE_HOMES}
    assert {"privunit2", "signds", "distributed", "central"} <= set(homes)
    registry_file = "ldpsim/_src/privacy/registry.py"
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for line, text in _string_constants(path):
            if text in homes and rel != registry_file and rel not in homes[text]:
                found.append(f"{rel}:{line}: {text!r}")
    assert not found, "names outside the registry:\n" + "\n".join(found)


def test_the_scan_finds_a_name_where_there_is_one(tmp_path):
    """The scan above can fail: it sees a quoted name in code, not in a docstring."""
    f = tmp_path / "m.py"
    f.write_text('"""privunit2 in a docstring."""\n__all__ = ["signds"]\n'
                 'x = mech in ("privunit2", "duchi")\ny = getattr(a, "distributed")\n')
    assert [t for _, t in _string_constants(f)] == ["privunit2", "duchi"]


def test_the_registry_and_the_cli_help_import_no_jax():
    code = ("import sys; from ldpsim._src.privacy import registry; "
            "from ldpsim._src.cli import cmd_run, cmd_sweep, cmd_audit, cmd_frontier, _guards, "
            "_rules, _memory, _parsing, _files, _help; "
            "import ldpsim._src.fl.config; "
            "assert 'jax' not in sys.modules, sorted(m for m in sys.modules if 'jax' in m)")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_every_reader_agrees_with_the_registry():
    from ldpsim._src.audit import _mechanisms
    from ldpsim._src.cli import cmd_run
    from ldpsim._src.fl import config, modes
    from ldpsim._src.privacy.analysis import frontier
    from ldpsim._src.privacy.randomizers import mechanism

    engine = tuple(s.name for s in registry.RANDOMIZERS if s.engine)
    assert config.MECHANISMS == engine
    assert config.REPORT_MECHANISMS == tuple(s.name for s in registry.RANDOMIZERS
                                             if s.engine and s.family == "report")
    assert config.PRIVACY_MODES == modes.PRIVACY_MODES == tuple(m.name for m in registry.MODES)
    assert tuple(mechanism.REGISTRY) == tuple(s.name for s in registry.RANDOMIZERS)
    assert frontier.VECTOR_MECHANISMS == tuple(s.name for s in registry.RANDOMIZERS if s.frontier)
    assert _mechanisms.REPORT_RANDOMIZERS == tuple(s.name for s in registry.RANDOMIZERS
                                                   if s.audit_dim is not None)
    choices = {o[1]: o[3] for o in cmd_run.options()}
    assert choices["mechanism"] == engine
    assert choices["privacy_mode"] == config.PRIVACY_MODES
    for spec in registry.RANDOMIZERS:   # each spec's implementation has the interface
        impl = spec.load()
        for fn in ("make", "privatize", "decode", "mean", "variance"):
            assert callable(getattr(impl, fn)), (spec.name, fn)
        if spec.audit_dim is not None:
            assert callable(impl.audit_game), spec.name
    for m in registry.MODES:
        assert callable(registry.resolve(m.plan)) and isinstance(registry.resolve(m.nested), type)
    for field in registry.own_option_fields():   # every option is a configuration field
        assert field in {f.name for f in dataclasses.fields(config.SimulationConfig)}


@pytest.fixture
def extra_randomizer(monkeypatch):
    """A throwaway spec: Duchi et al.'s implementation under another name, with SignDS's
    sign_k as its option (only the registry is told)."""
    spec = dataclasses.replace(
        registry.randomizer("duchi"), name="throwaway", label="Throwaway", colour="tab:gray",
        help="a spec registered by a test",
        options=(registry.OptionSpec("sign_k", float, "an option of the throwaway"),))
    monkeypatch.setattr(registry, "RANDOMIZERS", registry.RANDOMIZERS + (spec,))
    return spec


def test_a_spec_added_to_the_registry_is_a_choice_everywhere(extra_randomizer, capsys):
    from ldpsim._src.cli import main
    from ldpsim._src.cli._rules import not_applicable
    from ldpsim._src.fl.config import SimulationConfig
    from ldpsim._src.privacy.randomizers import mechanism

    assert "throwaway" in registry.engine_randomizers()
    # configuration validation: a choice, whose option applies to it and to no other
    SimulationConfig(mechanism="throwaway", epsilon=2.0, sign_k=0.02)
    with pytest.raises(LdpsimError, match="sign_k=0.02 does not apply"):
        SimulationConfig(mechanism="duchi", epsilon=2.0, sign_k=0.02)
    with pytest.raises(LdpsimError, match="norm_epsilon=0.5 does not apply"):
        SimulationConfig(mechanism="throwaway", epsilon=2.0, norm_epsilon=0.5)
    # the command line's rules and choices
    not_applicable({"mechanism": "throwaway"}, {"sign_k"})
    with pytest.raises(LdpsimError, match="--norm-epsilon does not apply to --mechanism "
                                          "throwaway"):
        not_applicable({"mechanism": "throwaway"}, {"norm_epsilon"})
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out
    out = " ".join(out.split())   # help wraps lines where it likes
    assert "throwaway" in out and "a spec registered by a test" in out
    # the mechanism registry builds its entry from the spec
    local = mechanism.make("throwaway", epsilon=1.0, dim=8)
    assert local.epsilon == pytest.approx(1.0)


def test_option_applies_is_the_one_rule():
    p = lambda **kw: {"privacy_mode": "ldp", "mechanism": "gaussian", **kw}  # noqa: E731
    assert registry.option_applies("delta", p()) is True
    assert registry.option_applies("delta", p(mechanism="duchi")) is False
    assert registry.option_applies("delta", p(mechanism="duchi"), shared_by_mode=True) is True
    assert registry.option_applies("delta", p(privacy_mode="mindspore")) is False
    assert registry.option_applies("delta", p(privacy_mode="central")) is True
    assert registry.option_applies("norm_epsilon", p(mechanism="privunitg")) is True
    assert registry.option_applies("norm_epsilon", p(privacy_mode="central")) is False
    assert registry.option_applies("dropout_rate", p(privacy_mode="distributed")) is True
    assert registry.option_applies("dropout_rate", p()) is False
    assert registry.option_applies("seed", p()) is None


def test_unknown_names_list_the_registered_ones():
    with pytest.raises(LdpsimError, match="mechanism must be one of gaussian, laplace"):
        registry.randomizer("nope")
    with pytest.raises(LdpsimError, match="privacy_mode must be one of ldp, mindspore"):
        registry.mode("nope")
    assert math.isinf(registry.randomizer("gaussian").epsilon_max)


@pytest.mark.slow
def test_a_spec_alone_makes_a_randomizer_run_in_simulate(monkeypatch):
    """One entry (here: Duchi et al.'s module under another name) is all a randomizer needs
    to run in the engine by name: the run equals Duchi et al.'s, number for number."""
    from ldpsim._src.fl import simulate as sim
    from ldpsim._src.fl.config import SimulationConfig
    from toy_data import toy_logreg_problem

    spec = dataclasses.replace(registry.randomizer("duchi"), name="throwaway")
    monkeypatch.setattr(registry, "RANDOMIZERS", registry.RANDOMIZERS + (spec,))
    data = toy_logreg_problem(24, n_test=100)
    base = dict(dataset="toy", model="logreg", population=24, clients_per_round=8, rounds=2,
                epsilon=4.0, clip=1.0, local_steps=2, batch_size=4, client_lr=0.5,
                chunk_size=4, seed=3)
    mine = sim.simulate(SimulationConfig(mechanism="throwaway", **base), data=data)
    ref = sim.simulate(SimulationConfig(mechanism="duchi", **base), data=data)
    assert [r["mechanism"] for r in mine] == ["throwaway"] * 2
    for a, b in zip(mine, ref):
        for col in ("accuracy", "loss", "noise_norm", "signal_norm", "epsilon_spent", "sigma"):
            assert a[col] == b[col], col
