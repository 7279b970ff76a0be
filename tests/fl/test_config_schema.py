"""The nested schema decides which flat option applies: the rules derived from it equal the
hand-written rules they replace, the registry's mode settings agree with the nested classes,
and a randomizer or a mode added as a registry entry alone is a configuration field, a nested
option, a command-line flag and an applicability rule, with no other edit.

The reference for "the rules they replace" is :func:`ldpsim._src.privacy.registry.option_applies`
(the rule over the registry's ``settings`` lists that configuration validation and the command
line used before, unchanged) plus the adaptive-clipping, DP-SGD-client and budget rules as
they were written by hand in ``config.py`` and ``cli/_guards.py``.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ldpsim import LdpsimError
from ldpsim._src.cli import _rules
from ldpsim._src.fl import experiment as schema
from ldpsim._src.fl.config import SimulationConfig
from ldpsim._src.privacy import registry

REPO = Path(__file__).resolve().parents[2]
DEFAULTS = {f.name: f.default for f in dataclasses.fields(SimulationConfig)}
_ADAPTIVE = ("target_quantile", "clip_learning_rate", "clipped_count_stddev")
_CLIENT_DP = ("client_dp_micro_batches", "client_dp_clip", "client_dp_noise_multiplier",
              "client_dp_delta")


def _shapes():
    """Every valid combination of the settings that decide which options apply (adaptive
    clipping where a mode has it, a budget where its releases are per client: elsewhere the
    switch itself is refused first)."""
    for mode in registry.mode_names():
        spec = registry.mode(mode)
        mechs = registry.engine_randomizers() if spec.randomizers else ["gaussian"]
        for mech, adaptive, client_dp, budget in itertools.product(
                mechs, (False, True), (False, True), (None, 5.0)):
            if (adaptive and "adaptive_clip" not in spec.settings) or (
                    budget and not spec.per_client):
                continue
            yield {"privacy_mode": mode, "mechanism": mech, "adaptive_clip": adaptive,
                   "client_dp": client_dp, "stop_at_epsilon": budget}


def _old_cli_rule(field, p):
    """The command line's rule before the schema (cli/_guards.py as it was)."""
    applies = registry.option_applies(field, p)
    if applies is not None:
        return bool(applies)
    if field in _ADAPTIVE:
        return p["privacy_mode"] in [m.name for m in registry.MODES
                                     if "adaptive_clip" in m.settings] and p["adaptive_clip"]
    if field in _CLIENT_DP:
        return p["client_dp"]
    return None


def _old_config_rule(field, p):
    """SimulationConfig's rule before the schema (config.py as it was)."""
    if field in ("delta", "clip"):
        return True
    applies = registry.option_applies(field, p, shared_by_mode=True)
    if applies is not None and field in set(registry.mode_option_fields()) | set(
            registry.own_option_fields()):
        return bool(applies)
    if field in _ADAPTIVE:
        return p["adaptive_clip"]
    if field in _CLIENT_DP:
        return p["client_dp"]
    if field == "stop_policy":
        return p["stop_at_epsilon"] is not None
    return None


def test_derived_command_line_rules_equal_the_hand_written_ones():
    rules = _rules.rules()
    compared = 0
    for p in _shapes():
        for field, (applies, why) in rules.items():
            old = _old_cli_rule(field, p)
            if old is None:
                assert field in ("alpha", "examples_per_client", "server_momentum",
                                 "data_source", "stop_at_epsilon"), field
                continue
            assert applies(p) == old, (field, p)
            if not old:
                assert why(p)
            compared += 1
    # every field the old rules governed is governed now
    old_fields = set(registry.mode_option_fields()) | set(registry.randomizer_option_fields())
    assert old_fields | set(_ADAPTIVE) | set(_CLIENT_DP) <= set(rules)
    assert compared > 1000


def test_stop_at_epsilon_now_also_refused_where_typed_for_a_mode_without_it():
    """The one rule the command line gained: a budget is a setting of the per-client modes."""
    applies, why = _rules.rules()["stop_at_epsilon"]
    for m in registry.MODES:
        assert applies({"privacy_mode": m.name, "mechanism": "gaussian"}) == m.per_client
    assert "--privacy-mode ldp or --privacy-mode mindspore" in why({"privacy_mode": "central"})


def test_a_randomizer_option_in_a_mode_without_randomizers_names_the_mode():
    """Not "does not apply to --mechanism gaussian" (a flag nobody typed) in central mode."""
    applies, why = _rules.rules()["projection_dim"]
    p = {"privacy_mode": "central", "mechanism": "gaussian"}
    assert not applies(p)
    text = why(p)
    assert text.startswith("--privacy-mode central (no local randomizer)")
    assert "--mechanism projunit and --mechanism fastprojunit" in text
    assert "--privacy-mode ldp" in text and "--mechanism gaussian" not in text
    assert why({"privacy_mode": "ldp", "mechanism": "gaussian"}).startswith("--mechanism gaussian")


def test_derived_config_rules_equal_the_hand_written_ones():
    """For every deciding shape and every governed option: set away from its default, the
    option is refused exactly where the old rule refused it."""
    checked = 0
    for p in _shapes():
        used = schema.flat_paths(p)
        for field in schema.governed():
            if field in ("privacy_mode", "mechanism", "adaptive_clip", "client_dp",
                         "stop_at_epsilon"):
                continue
            old = _old_config_rule(field, p)
            assert old is not None, field
            new = field in used or field in ("delta", "clip")
            assert new == old, (field, p)
            checked += 1
    assert checked > 1000


@pytest.mark.parametrize("field, value, shape", [
    ("norm_epsilon", 1.0, dict(mechanism="duchi", epsilon=1.0)),
    ("sign_k", 0.02, dict(mechanism="privunit2", epsilon=1.0)),
    ("projection_dim", 8, dict(mechanism="privunitg", epsilon=1.0)),
    ("dp_eps", 10.0, dict()),
    ("noise_multiplier", 2.0, dict()),
    ("dropout_rate", 0.1, dict(privacy_mode="central")),
    ("target_quantile", 0.3, dict(privacy_mode="central")),
    ("client_dp_clip", 0.5, dict()),
    ("stop_policy", "run", dict()),
    ("epsilon", 8.0, dict(privacy_mode="central")),
])
def test_config_refuses_an_option_its_nested_form_has_no_place_for(field, value, shape):
    with pytest.raises(LdpsimError, match=rf"^{field}={value!r} does not apply: it is used "):
        SimulationConfig(**shape, **{field: value})


def test_mode_settings_in_the_registry_agree_with_the_nested_classes():
    """``ModeSpec.settings`` (read by help texts and memory estimates) lists exactly the
    options its nested class holds, shared sections and budget aside."""
    shared = set(schema.flat_paths({"privacy_mode": registry.MODES[0].name})) - {
        f for f, path in schema.flat_paths({"privacy_mode": registry.MODES[0].name}).items()
        if path.startswith("privacy")}
    for m in registry.MODES:
        mine = {f for f, path in schema.flat_paths({"privacy_mode": m.name}).items()
                if path.startswith("privacy.") and not path.startswith("privacy.randomizer")}
        mine -= {"stop_at_epsilon"}
        assert mine == set(m.settings) | {o.field for o in m.options}, m.name
        assert not (mine & shared)


def test_every_randomizer_option_is_a_field_of_its_nested_class_only():
    for spec in registry.RANDOMIZERS:
        if not spec.engine:
            continue
        kind = schema.randomizer_class(spec.name)
        assert {f.name for f in dataclasses.fields(kind)} == {o.field for o in spec.options}
        assert kind.name == spec.name
        for o in spec.options:
            assert schema.flat_paths({"mechanism": spec.name})[o.field] == \
                f"privacy.randomizer.{o.field}"


def test_flat_table_is_one_to_one_per_configuration():
    """In one configuration's nesting, every flat name has one path and no two names share
    one (the round trip's precondition)."""
    for p in _shapes():
        paths = schema.flat_paths(p)
        assert len(set(paths.values())) == len(paths), p
        assert set(paths) <= set(DEFAULTS), set(paths) - set(DEFAULTS)


_ADD = r'''
import dataclasses, json, sys, warnings
from ldpsim._src.privacy import registry as r
# One new randomizer with its own option, and one new mode with its own option: registry
# entries only (their implementations are never imported by configuration code).
r.RANDOMIZERS = r.RANDOMIZERS + (r.RandomizerSpec(
    name="myunit", implementation="nowhere.myunit", family="report", guarantee="pure",
    label="MyUnit", colour=None, help="test randomizer",
    options=(r.OptionSpec("myunit_k", int, "its dimension", default=4),)),)
r.MODES = r.MODES + (r.ModeSpec(
    name="secagg", plan="nowhere:plan", help="test mode", label="test mode",
    settings=("noise_multiplier", "clip", "delta", "bits"),
    options=(r.OptionSpec("bits", int, "bits per coordinate", default=16),)),)
from ldpsim._src.fl.config import SimulationConfig
from ldpsim._src.fl import experiment as e
from ldpsim._src.cli import _rules as g
from ldpsim._src.cli.cmd_run import options
out = {}
fields = {f.name: f.default for f in dataclasses.fields(SimulationConfig)}
out["fields"] = [fields.get("myunit_k"), fields.get("bits")]
c = SimulationConfig(mechanism="myunit", epsilon=1.0, myunit_k=8)
x = e.Experiment.from_flat(c)
out["nested"] = [type(x.privacy.randomizer).__name__, x.privacy.randomizer.myunit_k,
                 x.flat() == c]
s = SimulationConfig(privacy_mode="secagg", bits=12, noise_multiplier=0.5)
y = e.Experiment.from_flat(s)
out["mode"] = [type(y.privacy).__name__, y.privacy.bits, y.flat() == s]
errors = []
for kw in (dict(myunit_k=8), dict(mechanism="privunit2", epsilon=1.0, myunit_k=8),
           dict(bits=12), dict(privacy_mode="central", bits=12)):
    try:
        SimulationConfig(**kw)
    except Exception as err:
        errors.append(str(err).split(":")[0] + ": " + str(err).split(": ")[1][:40])
out["errors"] = errors
rules = g.rules()
out["cli"] = [rules["bits"][0]({"privacy_mode": "central"}),
              rules["bits"][0]({"privacy_mode": "secagg"}),
              rules["myunit_k"][0]({"mechanism": "duchi"}),
              rules["myunit_k"][0]({"mechanism": "myunit"}),
              rules["bits"][1]({"privacy_mode": "central"})]
out["flags"] = sorted(o[0] for o in options() if o[1] in ("bits", "myunit_k"))
print(json.dumps(out))
'''


def test_a_randomizer_and_a_mode_added_as_registry_entries_only():
    """The proof that adding a randomizer's or a mode's option needs no edit in config.py,
    schema.py, experiment.py or cli/_rules.py (a fresh interpreter: the registry is extended
    before the configuration is imported)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-c", _ADD], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["fields"] == [4, 16]
    assert out["nested"] == ["MyUnit", 8, True]
    assert out["mode"] == ["SecaggDP", 12, True]
    assert [e.split(" does")[0] for e in out["errors"]] == [
        "myunit_k=8", "myunit_k=8", "bits=12", "bits=12"], out["errors"]
    assert out["cli"][:4] == [False, True, False, True]
    assert "--privacy-mode secagg" in out["cli"][4]
    assert out["flags"] == ["--bits", "--myunit-k"]


def test_an_option_at_its_default_never_counts_as_set():
    c = SimulationConfig(privacy_mode="central", dp_eps=DEFAULTS["dp_eps"],
                         sign_k=DEFAULTS["sign_k"], target_quantile=DEFAULTS["target_quantile"])
    assert c.privacy_mode == "central"


def test_delta_refused_where_typed_points_dp_sgd_clients_to_their_own_delta():
    p = {"privacy_mode": "mindspore", "client_dp": True}
    with pytest.raises(LdpsimError, match=r"--delta does not apply .*\(the DP-SGD clients' "
                                          r"delta is --client-dp-delta\)"):
        _rules.not_applicable(p, {"delta"})
    _rules.not_applicable(p, {"client_dp_delta"})   # accepted
    with pytest.raises(LdpsimError, match="--client-dp-delta does not apply"):
        _rules.not_applicable({"privacy_mode": "mindspore", "client_dp": False},
                              {"client_dp_delta"})


def test_the_light_copies_of_name_lists_agree_with_their_sources():
    """config keeps the secure-aggregation mechanisms without importing their accountant
    (dp_accounting, scipy: the command line's --help stays light); the two must agree."""
    from ldpsim import mechanism
    from ldpsim._src.fl import config, privatize
    from ldpsim._src.privacy.discrete import accounting

    assert config.SECAGG_MECHANISMS == tuple(accounting.MECHANISMS)
    # the registry's additive entries are the randomizers whose factories add noise
    assert privatize.MECHANISMS == mechanism.ADDITIVE == ("gaussian", "laplace", "none")
