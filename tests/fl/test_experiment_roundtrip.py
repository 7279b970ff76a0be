"""Flat <-> nested configuration round trips are lossless for every field, by property over
random configurations (hypothesis): ``Experiment.from_flat(c).flat() == c`` for every valid
``c``, and a setting the nested form has no place for is refused, never dropped."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ldpsim import LdpsimError
from ldpsim._src.fl.config import SimulationConfig
from ldpsim._src.fl.experiment import Experiment
from ldpsim._src.privacy import registry

#: A few valid values of every field (the first is not always the default).
VALUES = {
    "dataset": ["synthetic", "mnist", "femnist"], "data_dir": [None, "/data"],
    "data_source": ["auto", "idx"], "partition": ["iid", "dirichlet", "sampled"],
    "alpha": [math.inf, 0.5], "model": ["auto", "logreg", "lenet5"],
    "population": [1000, 50], "examples_per_client": [32, 8],
    "clients_per_round": [100, 10], "rounds": [10, 3],
    "epsilon": [math.inf, 0.5, 4.0, 50.0], "delta": [1e-5, 1e-3], "clip": [1.0, 0.25, 3.0],
    "norm_epsilon": [None, 0.3], "sign_k": [0.01, 0.05], "sign_thr_ratio": [0.6, 0.9],
    "sign_global_lr": [0.1, 0.5], "sign_dim_out": [0, 3],
    "projection_dim": [None, 8], "projunit_simulation": ["report", "law"],
    "neighbours": ["replace", "add-remove"], "calibration": ["analytic", "classic"],
    "local_steps": [None, 3], "local_epochs": [None, 2], "batch_size": [None, 8],
    "client_optimizer": [None, "sgd", "adam"], "client_lr": [None, 0.2],
    "server_optimizer": ["fedavg", "fedavgm", "fedadam"], "server_lr": [None, 0.5],
    "server_momentum": [0.9, 0.5], "weighting": ["examples", "uniform"],
    "sampling": ["uniform", "poisson"], "eval_every": [1, 5], "chunk_size": [None, 16],
    "devices": [None, 1], "seed": [0, 7], "noise_mode": ["per-client", "aggregate"],
    "noise_multiplier": [1.0, 0.5, 2.0], "adaptive_clip": [False, True],
    "target_quantile": [0.5, 0.3], "clip_learning_rate": [0.2, 0.05],
    "clipped_count_stddev": [None, 2.0], "dropout_rate": [0.0, 0.2],
    "secagg_mechanism": ["ddg", "skellam"], "bits": [16, 20], "granularity": [None, 1e-3],
    "epsilon_scope": ["round", "run"],
    "dp_eps": [50.0, 10.0], "dp_delta": [0.01, 0.001], "dp_norm_clip": [1.0, 0.5],
    "mindspore_clip_rule": ["running-min", "overwrite"],
    "mindspore_neighbours": ["add-remove", "replace"], "client_dp": [False, True],
    "client_dp_micro_batches": [1, 2], "client_dp_clip": [1.0, 0.5],
    "client_dp_noise_multiplier": [0.0, 1.0], "client_dp_delta": [None, 1e-7],
    "stop_at_epsilon": [None, 1000.0],
    "stop_policy": ["client", "run"],
}
FIELDS = [f.name for f in dataclasses.fields(SimulationConfig)]


def test_every_field_has_values():
    assert set(VALUES) | {"mechanism", "privacy_mode"} == set(FIELDS)


def _uses(field: str, p: dict) -> bool:
    """Whether the settings ``p`` use ``field`` (the registry's rule, and the dependent
    options of adaptive clipping, DP-SGD clients and the budget)."""
    applies = registry.option_applies(field, p, shared_by_mode=True)
    if applies is not None:
        return applies
    if field in ("target_quantile", "clip_learning_rate", "clipped_count_stddev"):
        return bool(p.get("adaptive_clip"))
    if field.startswith("client_dp_"):
        return bool(p.get("client_dp"))
    if field == "stop_policy":
        return p.get("stop_at_epsilon") is not None
    return True


@st.composite
def configs(draw):
    """A random valid configuration whose every non-default setting is one its mode uses."""
    mode = draw(st.sampled_from(registry.mode_names()))
    p = {"privacy_mode": mode}
    if registry.mode(mode).randomizers:
        p["mechanism"] = draw(st.sampled_from(registry.engine_randomizers()))
    for field in ("adaptive_clip", "client_dp", "stop_at_epsilon"):   # those others depend on
        if _uses(field, p):
            p[field] = draw(st.sampled_from(VALUES[field]))
    for field in FIELDS:
        if field not in p and field in VALUES and _uses(field, p) and draw(st.booleans()):
            p[field] = draw(st.sampled_from(VALUES[field]))
    try:
        return SimulationConfig(**p)
    except LdpsimError:
        assume(False)


_SETTINGS = dict(deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])


def _lossless(config):
    exp = Experiment.from_flat(config)
    back = exp.flat()
    assert back == config
    for f in FIELDS:   # field by field (== of dataclasses compares all; say which differs)
        a, b = getattr(back, f), getattr(config, f)
        assert a == b or (a != a and b != b), f
    assert Experiment.from_flat(back) == exp


@settings(max_examples=40, **_SETTINGS)
@given(configs())
def test_flat_to_nested_to_flat_is_lossless(config):
    _lossless(config)


@pytest.mark.slow
@settings(max_examples=600, **_SETTINGS)
@given(configs())
def test_flat_to_nested_to_flat_is_lossless_many(config):
    _lossless(config)


def _refused(config, data):
    p = {f: getattr(config, f) for f in FIELDS}
    unused = [f for f in VALUES if not _uses(f, p)]
    assume(unused)
    field = data.draw(st.sampled_from(unused))
    value = data.draw(st.sampled_from([v for v in VALUES[field]
                                       if v != SimulationConfig.__dataclass_fields__[field].default]))
    p[field] = value
    try:
        bad = SimulationConfig(**p)
    except LdpsimError as err:
        assert field in str(err)
        return
    with pytest.raises(LdpsimError, match=field):
        Experiment.from_flat(bad)


@settings(max_examples=30, **_SETTINGS)
@given(configs(), st.data())
def test_a_setting_the_nested_form_cannot_hold_is_refused_not_dropped(config, data):
    """Set one field its mode does not use: either the flat configuration refuses it, or
    ``from_flat`` does, naming it; it is never silently lost."""
    _refused(config, data)


@pytest.mark.slow
@settings(max_examples=400, **_SETTINGS)
@given(configs(), st.data())
def test_a_setting_the_nested_form_cannot_hold_is_refused_many(config, data):
    _refused(config, data)


@pytest.mark.parametrize("kw", [
    dict(mechanism="signds", epsilon=5.0, sign_k=0.05, sign_thr_ratio=0.9, sign_global_lr=0.5,
         sign_dim_out=3),
    dict(mechanism="privunit2", epsilon=5.0, norm_epsilon=0.3),
    dict(mechanism="privunitg", epsilon=5.0, norm_epsilon=0.3),
])
def test_the_randomizers_options_survive_the_round_trip(kw):
    """The fields from_flat dropped silently before: sign_k, sign_dim_out, norm_epsilon."""
    config = SimulationConfig(**kw)
    exp = Experiment.from_flat(config)
    for k, v in kw.items():
        assert getattr(exp.privacy, k) == v
    assert exp.flat() == config


def test_every_field_is_set_away_from_its_default_and_survives_the_round_trip():
    """Field by field (not left to chance): each flat field, set to a value other than its
    default in a configuration whose nesting has a place for it, comes back unchanged."""
    from ldpsim._src.fl import experiment as schema

    shapes = [{"privacy_mode": m, "mechanism": r, "adaptive_clip": a, "client_dp": True,
               "stop_at_epsilon": 1000.0 if registry.mode(m).per_client else None}
              for m in registry.mode_names()
              for r in (registry.engine_randomizers() if registry.mode(m).randomizers
                        else ["gaussian"])
              for a in ((False, True) if "adaptive_clip" in registry.mode(m).settings
                        else (False,))]
    covered = set()
    for field in FIELDS:
        default = SimulationConfig.__dataclass_fields__[field].default
        for shape in shapes:
            if field in covered:
                break
            if field not in schema.flat_paths(shape):
                continue
            for value in [v for v in VALUES.get(field, []) if v != default] or [None]:
                p = {k: v for k, v in shape.items() if k in schema.flat_paths(shape)}
                p = {**p, "clients_per_round": 10, "epsilon": 50.0} if registry.mode(shape["privacy_mode"]).randomizers \
                    else p
                if value is not None:
                    p[field] = value
                try:
                    config = SimulationConfig(**p)
                except LdpsimError:
                    continue
                _lossless(config)
                if value is not None and getattr(config, field) == value:
                    covered.add(field)
    assert covered | {"mechanism", "privacy_mode", "adaptive_clip", "client_dp"} == set(FIELDS)


@st.composite
def experiments(draw):
    """A random nested experiment: a random mode class, randomizer class and switches, each
    field drawn from VALUES by its flat name (the nested direction of the round trip)."""
    from ldpsim._src.fl import experiment as schema

    def build(kind):
        kwargs = {}
        for f in dataclasses.fields(kind):
            if f.metadata.get("randomizer"):
                name = draw(st.sampled_from(registry.engine_randomizers()))
                kwargs[f.name] = build(schema.randomizer_class(name))
            elif "switch" in f.metadata:
                kwargs[f.name] = build(f.metadata["config"]) if draw(st.booleans()) else None
            else:
                flat = f.metadata.get("flat", f.name)
                if flat in VALUES and draw(st.booleans()):
                    kwargs[f.name] = draw(st.sampled_from(VALUES[flat]))
        return kind(**kwargs)

    mode = draw(st.sampled_from(registry.mode_names()))
    try:
        return schema.Experiment(
            data=build(schema.Data), training=build(schema.Training),
            execution=build(schema.Execution), privacy=build(schema.mode_class(mode)),
            client_dp=build(schema.DpSgdClients) if draw(st.booleans()) else None)
    except LdpsimError:
        assume(False)


@settings(max_examples=40, **_SETTINGS)
@given(experiments())
def test_nested_to_flat_to_nested_is_lossless(exp):
    flat = exp.flat()
    assert Experiment.from_flat(flat) == exp
    assert Experiment.from_flat(flat).flat() == flat


@pytest.mark.slow
@settings(max_examples=500, **_SETTINGS)
@given(experiments())
def test_nested_to_flat_to_nested_is_lossless_many(exp):
    test_nested_to_flat_to_nested_is_lossless.hypothesis.inner_test(exp)
