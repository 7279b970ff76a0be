"""Every privacy mode of the engine at LeNet-5's size (d = 61,706), with a diverged client.

One private LeNet-5 round (4 clients of 4 examples, full participation, 1 round) for each
distinct release path of the engine's clients: local DP with the Gaussian randomizer (the L2
clip's finiteness test, which is also the client path of the central mode's clip-only
randomizer and of the distributed and MindSpore modes' Gaussian one), local DP with SignDS (a
report randomizer, decoded) and DP-SGD clients (per-example clipping, micro-batches = batch)
under local DP. The central, distributed and MindSpore modes run the same checks on a small
model (logistic regression): what they add (clip bounds, noise scales, the server side) does
not depend on the size, and their clients' size-dependent step (the finiteness test of a
vmapped cohort of LeNet-5 updates) is the L2 clip's, checked here at LeNet-5's size (and for
the clip-only randomizer in tests/privacy/test_nonfinite_sizes.py). Client 2's data is all
NaN, so its local training diverges (NaN loss, NaN gradients, NaN update). Each test checks:

* through :func:`ldpsim.fl.simulate` (the rows users read): the model stays finite, the
  diverged client is counted (``nonfinite_clients``), the privacy columns are present and
  the spent budget is finite;
* through the same compiled round (simulate's own compile cache): the round with the
  diverged client equals, bit for bit, the round in which that client's update is exactly
  the zero update (a client with no examples takes no step) — same new model, same noise,
  same metrics but the non-finite count and the training loss. So the diverged client
  released the zero substitute's release and nothing else (docs/privacy_sharp_edges.md,
  "Diverged clients"); aggregation weights are uniform so that both clients weigh the same.

DP-SGD clients clip every example's gradient (ldpsim._src.fl.dpsgd.aggregate), so a NaN example's
gradient becomes the zero substitute there, inside the client: the client's update stays
finite (it is not counted as non-finite) and, with the DP-SGD noise at 0, is exactly zero.

Each LeNet-5 round compiles for ~40 CPU s, so those tests are marked slow; the fast tier
checks the engine's decoded path (SignDS) on a small model.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ldpsim.data import PaddedPopulation
from ldpsim._src.fl import dp_client, planning
from ldpsim._src.fl import simulate as sim
from ldpsim._src.fl.config import SimulationConfig
from ldpsim._src.fl.round import RoundHyper

K, E, BAD, D_LENET = 4, 4, 2, 61_706

#: Columns every private row carries (ldpsim.fl.COLUMNS), whatever the mode.
PRIVACY_COLUMNS = {"privacy_mode", "noise_mode", "mechanism", "epsilon", "delta", "sigma",
                   "noise_multiplier", "neighbours", "sensitivity", "epsilon_spent",
                   "noise_sum_std", "clip_bound", "survivors", "noise_variance_fraction",
                   "sampler_delta_floor", "client_dp_epsilon", "max_participation",
                   "nonfinite_clients"}


def _data(bad: str, shape=(28, 28, 1), classes: int = 10):
    """4 clients of 4 examples; client BAD's rows are NaN (``"nan"``) or it holds no example
    (``"empty"``: its update is exactly zero); the other clients are the same in both."""
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(K, E) + shape).astype(np.float32)
    y = rng.integers(0, classes, size=(K, E))
    counts = np.full(K, E)
    if bad == "nan":
        x[BAD] = np.nan
    else:
        counts[BAD] = 0
    pop = PaddedPopulation.from_arrays(x, y, counts, num_classes=classes, compact=False)
    xt = rng.uniform(size=(20,) + shape).astype(np.float32)
    return pop, xt, rng.integers(0, classes, size=20)


def _config(**kw) -> SimulationConfig:
    base = dict(dataset="toy", model="lenet5", population=K, clients_per_round=K, rounds=1,
                clip=1.0, local_steps=1, batch_size=E, client_lr=0.1, chunk_size=K,
                eval_every=1, seed=0, weighting="uniform")
    base.update(kw)
    if base.get("privacy_mode", "ldp") == "ldp":
        base.setdefault("epsilon", 4.0)
        base.setdefault("delta", 1e-5)
    return SimulationConfig(**base)


def _compiled_round(config: SimulationConfig, pop):
    """simulate()'s own compiled round, plan and initial state for ``config`` (the same
    arguments simulate passes, so the compilation is shared with the simulate() call)."""
    name = sim.model_name_for(config.model, pop)
    shape, classes = tuple(pop.input_shape), int(pop.num_classes)
    dim = sim.model_dimension(name, shape, classes)
    smallest = sim._smallest_client(pop) if config.client_dp else 1
    plan = planning.plan(config, pop.num_clients, smallest_client=smallest, dim=dim)
    model, round_fn, _ = sim._compiled(
        name, shape, classes, plan.mechanism, config.client_optimizer,
        config.server_optimizer, float(config.server_momentum), config.local_steps,
        config.local_epochs, config.batch_size, config.weighting, config.chunk_size)
    state = sim.initial_state(config, model, pop, plan.mechanism)
    hyper = RoundHyper(*(jnp.asarray(v, jnp.float32) for v in
                         (config.clip, config.client_lr, config.server_lr)),
                       plan.hyper, plan.client_hyper)
    return round_fn, state, hyper


def _leaves(tree):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(tree)]


MODES = {
    "ldp-gaussian": dict(mechanism="gaussian"),
    "ldp-signds": dict(mechanism="signds"),
    "central": dict(privacy_mode="central", noise_multiplier=1.0),
    "distributed": dict(privacy_mode="distributed", noise_multiplier=1.0, dropout_rate=0.0),
    "mindspore": dict(privacy_mode="mindspore", dp_eps=4.0),
    "dpsgd-per-example": dict(mechanism="gaussian", client_dp=True, client_dp_micro_batches=E,
                              client_dp_clip=1.0, client_dp_noise_multiplier=1.0),
}

#: The modes whose clients' finiteness test is the L2 clip of the ldp-gaussian LeNet-5 case
#: (the Gaussian randomizer, or the clip-only one, built on the same clip): checked on the
#: small model only.
SMALL_ONLY = ("central", "distributed", "mindspore")


def test_small_only_modes_release_through_the_l2_clip():
    """The premise of SMALL_ONLY: those modes' clients apply the Gaussian randomizer, as the
    ldp-gaussian LeNet-5 case, or the clip-only one, whose finiteness test is the same L2 clip
    (``mechanism.clip_only``, checked on its own at LeNet-5's size in 10 leaves in
    tests/privacy/test_nonfinite_sizes.py)."""
    import inspect

    from ldpsim._src.fl import modes
    from ldpsim._src.privacy.randomizers import mechanism

    assert modes.local("gaussian").randomizer == "gaussian"
    assert modes.distributed(K).randomizer == "gaussian"
    assert modes.mindspore().randomizer == "gaussian"
    assert modes.central(K).randomizer == "none"
    src = inspect.getsource(mechanism)
    for const in ("GAUSSIAN", "CLIP_ONLY"):   # the implementations of "gaussian" and "none"
        start = src.index(f"\n{const} = _additive_implementation(")
        call = src[start:src.index(")", start)]
        assert call.split(",")[1].strip() == "clipping.clip_by_global_norm", const


def _assert_zero_substitute(config: SimulationConfig, data_nan, data_empty, dpsgd=False):
    """The round with client BAD diverged equals, bit for bit, the round in which its update
    is exactly zero (same compiled round, same keys), but for the non-finite count and the
    training loss."""
    round_fn, state, hyper = _compiled_round(config, data_nan[0])
    if dpsgd:   # DP-SGD noise off, so the NaN client's per-example-clipped update is exactly 0
        hyper = hyper._replace(client=dp_client.ClientDpHyper(jnp.float32(1.0), jnp.float32(0.0)))
    ids, mask = np.arange(K, dtype=np.int32), np.ones(K, bool)
    new_nan, rm_nan = round_fn(state, data_nan[0], jnp.int32(0), ids, mask, hyper)
    new_zero, rm_zero = round_fn(state, data_empty[0], jnp.int32(0), ids, mask, hyper)
    for a, b in zip(_leaves(new_nan.params), _leaves(new_zero.params)):
        assert np.isfinite(a).all()
        np.testing.assert_array_equal(a, b)
    for a, b in zip(_leaves(new_nan.privacy), _leaves(new_zero.privacy)):
        np.testing.assert_array_equal(a, b)
    assert int(rm_nan.nonfinite_clients) == (0 if dpsgd else 1)
    assert int(rm_zero.nonfinite_clients) == 0
    for field in rm_nan._fields:
        if field in ("nonfinite_clients", "train_loss"):
            continue
        np.testing.assert_array_equal(np.asarray(getattr(rm_nan, field)),
                                      np.asarray(getattr(rm_zero, field)), err_msg=field)
    assert float(rm_nan.noise_norm) > 0


def _check_mode(mode: str, model: str = "lenet5", shape=(28, 28, 1)):
    kw = MODES[mode]
    config = _config(model=model, **kw)
    data_nan = _data("nan", shape)
    dpsgd = bool(kw.get("client_dp"))

    # The rows users read.
    [row] = sim.simulate(config, data=data_nan)
    assert PRIVACY_COLUMNS <= set(row), PRIVACY_COLUMNS - set(row)
    assert row["privacy_mode"] == kw.get("privacy_mode", "ldp")
    assert row["clients"] == K and row["survivors"] == K
    # The diverged client is counted; DP-SGD's per-example clip already replaced every NaN
    # example gradient by zero inside the client, whose update is then finite.
    assert row["nonfinite_clients"] == (0 if dpsgd else 1)
    assert 0 < row["epsilon_spent"] < math.inf
    assert row["noise_sum_std"] > 0
    if dpsgd:
        assert 0 < row["client_dp_epsilon"] < math.inf
    for key in ("loss", "accuracy", "model_change_norm", "noise_norm", "signal_norm"):
        assert math.isfinite(row[key]), key

    # The same compiled round (simulate()'s own, from its cache), called directly.
    hits = sim._compiled.cache_info().hits
    _assert_zero_substitute(config, data_nan, _data("empty", shape), dpsgd)
    assert sim._compiled.cache_info().hits == hits + 1


@pytest.mark.slow
@pytest.mark.parametrize("mode", [m for m in MODES if m not in SMALL_ONLY])
def test_lenet5_round_with_a_diverged_client(mode):
    assert sim.model_dimension("lenet5", (28, 28, 1), 10) == D_LENET
    _check_mode(mode)


@pytest.mark.slow   # ~5 CPU s each: a logistic-regression round and its evaluation
@pytest.mark.parametrize("mode", SMALL_ONLY)
def test_small_model_round_with_a_diverged_client(mode):
    _check_mode(mode, "logreg", (100,))


@pytest.mark.parametrize("mechanism", ["signds", pytest.param("privunitg", marks=pytest.mark.slow)])
def test_report_randomizer_round_with_a_diverged_client(mechanism):
    """The engine's decoded path of the report randomizers, on a small model (logistic
    regression, d = 1,010; 4 clients of 1,010 make a reduction of 4,040 elements, so this is
    the fast check, not the size check). SignDS clips nothing: its ``clipped`` was the raw
    update, so before the engine read a non-finite input as the zero substitute, one diverged
    client made the aggregate NaN at every size."""
    config = _config(model="logreg", mechanism=mechanism)
    _assert_zero_substitute(config, _data("nan", (100,)), _data("empty", (100,)))


def test_distributed_coupling_bound_says_why_it_gives_up():
    """Distributed DP-FedAvg's float32 noise is a sum of m shares, accounted by coupling:
    ``δ_ideal + (1 + e^ε)·TV``. With TV ≈ 1.6e-21 after 40 rounds (m = 100, d = 61,706) the
    bound holds only up to ε ≈ ln(δ/TV) ≈ 36, so a composed ideal ε of 39.7 is reported as
    inf, with a warning that names that cause (not the tails exhausting δ: TV ≪ δ), while
    central DP (one draw a round, bound (1)) stays finite on the same noise."""
    from ldpsim.privacy import SamplerTailWarning

    def cfg(mode):
        return SimulationConfig(dataset="synthetic", privacy_mode=mode, noise_multiplier=1.0,
                                delta=1e-5, clip=1.0, population=1000, clients_per_round=100,
                                rounds=100)

    central = planning.plan(cfg("central"), 1000, dim=61_706)
    assert central.epsilon_of(1, 30, 1.0) == pytest.approx(32.27, abs=0.01)
    assert central.epsilon_of(1, 40, 1.0) == pytest.approx(39.65, abs=0.01)
    dist = planning.plan(cfg("distributed"), 1000, dim=61_706)
    assert dist.epsilon_of(1, 30, 1.0) == pytest.approx(32.27, abs=0.2)    # still finite
    with pytest.warns(SamplerTailWarning) as record:
        assert math.isinf(dist.epsilon_of(1, 40, 1.0))
    message = str(record[0].message)
    assert "sum of 100 shares" in message and "coupling" in message
    assert "exhaust" not in message
    tv = float(message.split("TV = ")[1].split()[0])
    assert 1e-21 < tv < 1e-20
    assert f"about epsilon = {math.log(1e-5 / tv):.3g}" in message
