"""The integer aggregator and the discrete privacy mode (distributed discrete Gaussian or
Skellam over secure aggregation's sum modulo 2^b), through the round's stages and the kernel.

References are independent of the code under test: NumPy's int64 sums for the modular
arithmetic, the rounding's deterministic error bound (|x̃ − x| < 1 per coordinate), and the
variance the sampler's law has (Skellam: the Poisson rates; discrete Gaussian: the spec's
realised variance) for the statistical checks.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ldpsim import LdpsimError
from ldpsim._src.fl import modes, planning, sharding, stages
from ldpsim._src.fl.config import SimulationConfig
from ldpsim._src.fl.round import RoundHyper, init_state, make_round_fn
from ldpsim._src.privacy.discrete.accounting import DiscreteMechanism
from ldpsim.models import get_model

from toy_data import toy_logreg_problem

REPO = Path(__file__).resolve().parents[2]


def _with_host_devices(n: int) -> str:
    """The suite's XLA options (tests/conftest.py) plus ``n`` host devices, for a child
    process: both sides of a comparison compile with the same options, as cheaply as the
    suite's own programs."""
    return f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={n}".strip()


D_TOY = 21   # logreg 6 -> 3: d = 21, padded to D = 32


def _reports(ids, d, bits, seed=0):
    """Random int32 reports (already wrapped to ``bits`` bits) keyed by client id."""
    def one(c):
        u = jax.random.bits(jax.random.fold_in(jax.random.key(seed), c), (d,), jnp.uint32)
        if bits == 32:
            return jax.lax.bitcast_convert_type(u, jnp.int32)
        return (u >> (32 - bits)).astype(jnp.int32) - jnp.int32(1 << (bits - 1))

    return jax.vmap(one)(ids)


class _R:   # the fields the modular aggregator reads of a release
    def __init__(self, noisy):
        self.noisy = noisy
        self.exact = noisy.astype(jnp.float32)
        self.ok = jnp.ones(noisy.shape[0], bool)


def _modular_total(m, d, bits, chunk, devices=1):
    agg = stages.modular_sum(bits, d, lambda key, s, like: s, float(m))

    def chunk_fn(operands, ids, mask):
        return agg.chunk(jnp.ones(ids.shape), mask, _R(_reports(ids, d, bits)))

    ids = jnp.arange(m, dtype=jnp.int32)
    _, payload = sharding.map_cohort(chunk_fn, agg.zeros(None), (), ids, jnp.ones(m, bool),
                                     chunk_size=chunk, devices=devices)
    return np.asarray(payload.total), agg


@pytest.mark.parametrize("bits", [8, 32])
def test_modular_sum_is_the_exact_integer_sum_mod_2_to_the_b_for_every_chunking(bits):
    m, d = 37, 64
    ref = np.asarray(_reports(jnp.arange(m, dtype=jnp.int32), d, bits)).astype(np.int64)
    ref = ref.sum(0) % (1 << bits)                    # NumPy int64: no wrap before the mod
    ref = np.where(ref >= 1 << (bits - 1), ref - (1 << bits), ref)
    for chunk in (1, 5, 37):
        total, agg = _modular_total(m, d, bits, chunk)
        mask = (1 << bits) - 1 if bits < 32 else 0xFFFFFFFF
        got = (total.astype(np.int64) & mask)
        got = np.where(got >= 1 << (bits - 1), got - (1 << bits), got)
        np.testing.assert_array_equal(got, ref)
        # finalize: decoded − clean; with decode = identity and clean = 0, the signed sum
        noise, _ = agg.finalize((), stages.ModularPayload(
            jnp.asarray(total), jnp.zeros(d), jnp.int32(0)), jnp.zeros(d), None)
        np.testing.assert_array_equal(np.asarray(noise), ref.astype(np.float32))


_CHILD = r"""
import sys, numpy as np
sys.path.insert(0, sys.argv[1])
import test_discrete_mode as t
for bits in (12, 32):
    one = t._modular_total(37, 64, bits, 3, devices=1)[0]
    four = t._modular_total(37, 64, bits, 3, devices=4)[0]
    assert one.dtype == np.uint32 and np.array_equal(one, four), bits
print("OK")
"""


@pytest.mark.slow
def test_modular_sum_on_four_devices_is_the_same_integers():
    env = dict(os.environ, XLA_FLAGS=_with_host_devices(4),
               PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "tests")]))
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(Path(__file__).parent)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-2000:]


# ----------------------------------------------------------------------------- the stages


def _stage_round(dm, updates, round_key, noise=True, include=None):
    """The discrete mode's stages on given updates (no training): decoded sum, clean sum,
    diagnostics, releases."""
    n = jax.tree_util.tree_leaves(updates)[0].shape[0]
    include = jnp.ones(n, bool) if include is None else include
    return _stage_program(dm, noise)(updates, round_key, include)


@functools.lru_cache(maxsize=None)
def _stage_program(dm, noise):
    """The stages compiled as one program per mechanism, as the round kernel runs them (run
    op by op, each call compiled dozens of small programs: most of these tests' time)."""
    mech = modes.discrete(dm, noise)
    st, agg = mech.privatizer, mech.aggregator

    def run(updates, round_key, include):
        n = jax.tree_util.tree_leaves(updates)[0].shape[0]
        keys = jax.vmap(lambda c: jax.random.fold_in(jax.random.key(5), c))(jnp.arange(n))
        p = st.params(jnp.float32(dm.clip), jnp.float32(0.0), None, round_key)
        rel = jax.vmap(lambda k, u: st.release(k, u, p))(keys, updates)
        _, payload = agg.chunk(jnp.ones(n), include, rel)
        clean = jax.tree_util.tree_map(lambda c: jnp.sum(jnp.where(
            include.reshape((-1,) + (1,) * (c.ndim - 1)), c, 0.0), 0), rel.clipped)
        noise_sum, diag = agg.finalize((), payload, clean, round_key)
        decoded = jax.tree_util.tree_map(jnp.add, clean, noise_sum)
        return decoded, clean, diag, rel

    return jax.jit(run)


@pytest.mark.parametrize("kind", ["skellam", pytest.param("ddg", marks=pytest.mark.slow)])
def test_without_noise_the_decoded_sum_is_the_clipped_sum_up_to_the_rounding(kind):
    """|x̃ᵢ − yᵢ| < 1 per rotated coordinate and the rotation is orthogonal, so
    ‖decoded − Σ clipped‖ ≤ γ·‖Σ (x̃ − y)‖ ≤ γ·n·√D (plus float32 rounding, far smaller)."""
    n, d = 12, 1000
    u = jax.random.normal(jax.random.key(1), (n, d)) * 0.02   # norms ~0.63 < C
    dm = DiscreteMechanism(kind, clip=1.0, granularity=1e-3, noise=1.0, clients=n, dim=d,
                           bits=24)
    decoded, clean, diag, rel = _stage_round(dm, {"w": u}, jax.random.key(9), noise=False)
    err = float(jnp.linalg.norm(decoded["w"] - clean["w"]))
    bound = dm.granularity * n * math.sqrt(dm.padded_dim)
    assert 0 < err <= bound
    # and the rounding is unbiased: the error is a sum of n·D independent zero-mean terms of
    # variance <= 1/4, so E err² <= γ²·n·D/4; Markov at 20x: false failure < 5%·... (< 0.05)
    assert err ** 2 <= 20 * dm.granularity ** 2 * n * dm.padded_dim / 4
    # the clip is exact: the clean sum is the sum of the clipped inputs (norms < C here)
    np.testing.assert_allclose(np.asarray(clean["w"]), np.asarray(u.sum(0)), rtol=1e-5,
                               atol=1e-6)
    assert float(diag.wrapped_fraction) == 0.0 and int(diag.rounding_failures) == 0
    assert bool(jnp.all(rel.ok))


@pytest.mark.parametrize("kind,noise,n,rounds", [
    ("skellam", 9.0, 16, 4), pytest.param("ddg", 3.0, 4, 2, marks=pytest.mark.slow)])
def test_decoded_noise_variance_is_the_mechanisms_times_gamma_squared(kind, noise, n, rounds):
    """Zero updates: no rounding error, so the decoded sum is γ·Hᵀ(Σ z) and, H being
    orthogonal (d = D = 1024), ‖decoded‖²/γ² = ‖Σ z‖², a sum of D·rounds independent squares
    of mean n·v (v the per-client variance of the sampler's law: μ for Skellam, the spec's
    realised σ̂² for the discrete Gaussian). Its relative std is √((2 + κ)/(D·rounds)), κ the
    excess kurtosis of Σz (≤ 1/(n·v) for Skellam, ~0 for the discrete Gaussian); the
    tolerance is 5 of those stds: false failure < 1e-5 (normal approximation of a sum of
    ≥ 2048 terms)."""
    d = 1024
    dm = DiscreteMechanism(kind, clip=1.0, granularity=0.01, noise=noise, clients=n, dim=d,
                           bits=24)
    stat = 0.0
    for r in range(rounds):
        decoded, _, diag, _ = _stage_round(dm, {"w": jnp.zeros((n, d))}, jax.random.key(100 + r))
        stat += float(jnp.sum(jnp.square(decoded["w"]))) / dm.granularity ** 2
        assert float(diag.wrapped_fraction) == 0.0
    v = dm.client_variance
    mean = d * rounds * n * v
    rel_std = math.sqrt((2 + 1 / (n * v)) / (d * rounds))
    assert abs(stat / mean - 1) <= 5 * rel_std, (stat / mean, rel_std)


def test_a_wrapped_sum_is_detected_and_reported():
    """Few bits and a fine grid: the integer sum leaves [−2^(b−1), 2^(b−1)) on some
    coordinates, the diagnostic counts them, and the decoded sum is wrong there."""
    n, d = 8, 256
    u = jnp.ones((n, d)) / math.sqrt(d)             # norm 1 each; the sum's norm is 8
    dm = DiscreteMechanism("skellam", clip=1.0, granularity=1e-3, noise=1.0, clients=n, dim=d,
                           bits=10)
    decoded, clean, diag, rel = _stage_round(dm, {"w": u}, jax.random.key(3), noise=False)
    frac = float(diag.wrapped_fraction)
    # reference: the exact integer sum from the releases' pre-wrap values, in int64
    exact = np.asarray(rel.exact).astype(np.int64).sum(0)
    ref = np.mean((exact < -512) | (exact >= 512))
    assert frac == pytest.approx(ref) and frac > 0.1
    assert float(jnp.linalg.norm(decoded["w"] - clean["w"])) > 1.0


@pytest.mark.slow
def test_dropped_clients_contribute_nothing_to_the_integer_sum():
    n, d = 6, 64
    u = jax.random.normal(jax.random.key(2), (n, d)) * 0.05
    dm = DiscreteMechanism("skellam", clip=1.0, granularity=1e-3, noise=4.0, clients=n, dim=d,
                           bits=20)
    keep = jnp.array([True, False, True, True, False, True])
    both, _, _, _ = _stage_round(dm, {"w": u}, jax.random.key(4), include=keep)
    only, _, _, _ = _stage_round(dm, {"w": jnp.where(keep[:, None], u, 0.0)},
                                 jax.random.key(4), include=keep)
    np.testing.assert_array_equal(np.asarray(both["w"]), np.asarray(only["w"]))


# ----------------------------------------------------------------------------- the kernel


@pytest.fixture(scope="module")
def toy():
    pop, xt, yt = toy_logreg_problem(n_clients=24)
    model = get_model("logreg", input_shape=(6,), num_classes=3)
    params = model.init(jax.random.key(0), jnp.zeros((1, 6)))
    return pop, model, params


def _kernel_round(toy, dm, chunk, noise=True, dropout=0.0, m=10):
    pop, model, params = toy
    mech = modes.discrete(dm, noise)
    fn = jax.jit(make_round_fn(apply_fn=model.apply, mechanism=mech, local_steps=2,
                               batch_size=4, chunk_size=chunk))
    state = init_state(params, jax.random.key(7))
    hyper = RoundHyper.create(clip=1.0, client_lr=0.1, server_lr=1.0,
                              privacy=modes.DiscreteHyper(jnp.float32(dropout)))
    ids = jnp.arange(m, dtype=jnp.int32)
    return fn(state, pop, 0, ids, jnp.ones(m, bool), hyper)


def test_kernel_round_is_the_same_for_every_chunk_size_and_reports_its_diagnostics(toy):
    dm = DiscreteMechanism("skellam", clip=1.0, granularity=1e-3, noise=16.0, clients=10,
                           dim=D_TOY, bits=20)
    (s3, r3), (s10, _) = _kernel_round(toy, dm, 3), _kernel_round(toy, dm, 10)
    # the decoded sum is the same integers decoded the same way; the float clean sum (and so
    # noise = decoded − clean) differs by float rounding of the chunked sum only
    for a, b in zip(jax.tree_util.tree_leaves(s3.params), jax.tree_util.tree_leaves(s10.params)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-6)
    assert float(r3.wrapped_fraction) == 0.0 and int(r3.rounding_failures) == 0
    assert int(r3.survivors) == 10
    # noise_sum_std: γ·√(m·(μ + mean rounding variance)); the rounding adds at most 1/4
    lo = dm.granularity * math.sqrt(10 * 16.0)
    assert lo <= float(r3.noise_sum_std) <= dm.granularity * math.sqrt(10 * 16.25) * 1.0001
    assert float(r3.effective_noise_std) > 0


@pytest.mark.parametrize("kind,noise", [("ddg", 3.0), ("skellam", 16.0)])
def test_client_variance_is_the_rounding_and_noise_variance_of_the_rotated_update(kind, noise):
    """The stage's variance is γ²(v + mean_j f_j(1 − f_j)), f = y − ⌊y⌋, y = H·diag(s)·x/γ,
    recomputed here independently (scipy's Hadamard matrix, float64), and the release's
    report is ``pipeline.encode``'s for the same keys."""
    from scipy.linalg import hadamard as sylvester

    from ldpsim._src.fl.modes import _rotation_key
    from ldpsim._src.privacy import hadamard
    from ldpsim._src.privacy.discrete import pipeline

    d, big = 50, 64
    dm = DiscreteMechanism(kind, clip=1.0, granularity=3e-3, noise=noise, clients=10, dim=d,
                           bits=20)
    mech = modes.discrete(dm)
    rng = np.random.default_rng(3)
    update = {"w": jnp.asarray(rng.normal(size=(d,)) * 0.05, jnp.float32)}   # norm ≈ 0.35 < C
    round_key, key = jax.random.key(11), jax.random.key(12)
    p = mech.privatizer.params(jnp.float32(1.0), jnp.float32(0.0), modes.DiscreteHyper(
        jnp.float32(0.0)), round_key)
    rel = jax.jit(mech.release)(key, update, p)
    signs = np.asarray(hadamard.random_signs(_rotation_key(round_key), big), np.float64)
    x = np.zeros(big)
    x[:d] = np.asarray(update["w"], np.float64)
    y = (sylvester(big) / math.sqrt(big)) @ (signs * x) / dm.granularity
    f = y - np.floor(y)
    want = dm.granularity ** 2 * (dm.client_variance + np.mean(f * (1 - f)))
    var = jax.jit(mech.privatizer.noise_var)(p, update)
    assert float(var) == pytest.approx(want, rel=1e-5)
    ref, _, _ = pipeline.encode(_rotation_key(round_key), key, jnp.pad(update["w"], (0, big - d)),
                                dm)
    np.testing.assert_array_equal(np.asarray(rel.noisy), np.asarray(ref))


@pytest.mark.slow
def test_kernel_dropout_keeps_the_survivors_and_reports_the_shortfall(toy):
    dm = DiscreteMechanism("skellam", clip=1.0, granularity=1e-3, noise=16.0, clients=10,
                           dim=D_TOY, bits=20)
    _, rm = _kernel_round(toy, dm, 5, dropout=0.5)
    s = int(rm.survivors)
    assert 0 < s < 10 and float(rm.noise_variance_fraction) == pytest.approx(s / 10)


# ----------------------------------------------------------------------------- planning


def _cfg(**kw):
    base = dict(dataset="synthetic", model="logreg", population=30, clients_per_round=10,
                rounds=2, privacy_mode="discrete", epsilon=4.0, delta=1e-5, clip=1.0)
    base.update(kw)
    return SimulationConfig(**base)


def test_plan_solves_noise_for_the_per_round_epsilon_and_fits_the_bits():
    from ldpsim._src.privacy.discrete import accounting as dacc

    p = planning.plan(_cfg(secagg_mechanism="skellam", bits=16), 30, dim=D_TOY)
    dm = p.mechanism.privatizer   # the stage; the DiscreteMechanism is in the plan's columns
    assert p.mechanism.name == "skellam" and p.mechanism.aggregator.name == "modular"
    assert dm.randomizer == "skellam"
    assert p.epsilon_of(1, 1, 1.0) <= 4.0
    assert p.epsilon_of(1, 1, 1.0) == pytest.approx(4.0, rel=1e-3)
    assert p.epsilon_of(2, 2, 1.0) > p.epsilon_of(1, 1, 1.0)    # composed over rounds
    assert p.epsilon_of(1, 1, 0.5) > p.epsilon_of(1, 1, 1.0)    # dropouts: less noise
    mech = planning.secagg_mechanism(_cfg(secagg_mechanism="skellam", bits=16), D_TOY)
    assert dacc.wrap_probability(mech) <= planning.SECAGG_WRAP_TARGET
    row = p.row_columns({"clip_bound": 1.0})
    assert row["continuous_noise_std"] > 0


@pytest.mark.parametrize("kw,match", [(dict(bits=4), "bits = 4 too small"),
                                      (dict(bits=12, granularity=1e-7), "granularity")])
def test_bits_too_small_or_gamma_that_cannot_fit_is_a_clear_error(kw, match):
    with pytest.raises(LdpsimError, match=match):
        planning.plan(_cfg(secagg_mechanism="skellam", **kw), 30, dim=D_TOY)


@pytest.mark.parametrize("kw,match", [(dict(bits=1), "bits"), (dict(bits=33), "bits"),
                                      (dict(granularity=0.0), "granularity"),
                                      (dict(secagg_mechanism="gauss"), "secagg_mechanism")])
def test_bad_settings_are_errors(kw, match):
    with pytest.raises(LdpsimError, match=match):
        _cfg(**kw)


def test_secagg_settings_in_another_mode_are_errors():
    with pytest.raises(LdpsimError, match="bits"):
        SimulationConfig(dataset="synthetic", model="logreg", privacy_mode="central", bits=12)


@pytest.mark.slow
def test_cli_run_discrete_end_to_end(tmp_path):
    import pandas as pd

    from ldpsim.cli import main

    out = tmp_path / "m.csv"
    rc = main(["run", "--dataset", "synthetic", "--model", "logreg", "--population", "30",
               "--clients-per-round", "10", "--rounds", "2", "--local-steps", "1",
               "--chunk-size", "5", "--no-progress", "--privacy-mode", "discrete",
               "--secagg-mechanism", "skellam", "--bits", "16", "--epsilon", "4",
               "--delta", "1e-5", "--clip", "0.5", "--out", str(out)])
    assert rc == 0
    df = pd.read_csv(out)
    assert list(df["round"]) == [1, 2] and (df["mechanism"] == "skellam").all()
    assert (df["wrapped_fraction"] == 0).all() and (df["rounding_failures"] == 0).all()
    assert df["epsilon_spent"].iloc[0] == pytest.approx(4.0, rel=1e-3)
    # the discrete noise on the sum is within 10% of the continuous Gaussian's at equal ε
    ratio = df["noise_sum_std"] / df["continuous_noise_std"]
    assert ((ratio > 0.99) & (ratio < 1.1)).all()


@pytest.mark.slow
def test_lenet5_round_with_skellam_at_real_size():
    """d = 61,706 (D = 65,536): one discrete-mode round of 4 clients through the kernel. The
    realised
    noise on the sum matches its expectation: ‖noise‖²/d averages d nearly independent
    coordinates (rotation-mixed), relative std ≈ √(2/d) = 0.6%; tolerance 5% (false failure
    far below 1e-9)."""
    from ldpsim.data import PaddedPopulation

    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 4, 28, 28, 1)).astype(np.float32)
    y = rng.integers(0, 10, size=(8, 4))
    pop = PaddedPopulation.from_arrays(x, y, np.full(8, 4), num_classes=10, compact=False)
    model = get_model("lenet5", input_shape=(28, 28, 1), num_classes=10)
    params = model.init(jax.random.key(0), jnp.zeros((1, 28, 28, 1)))
    d = sum(p.size for p in jax.tree_util.tree_leaves(params))
    assert d == 61706
    cfg = SimulationConfig(dataset="synthetic", model="lenet5", population=8,
                           clients_per_round=4, rounds=1, privacy_mode="discrete",
                           secagg_mechanism="skellam", bits=16, epsilon=4.0, delta=1e-5,
                           clip=1.0)
    p = planning.plan(cfg, 8, dim=d)
    fn = jax.jit(make_round_fn(apply_fn=model.apply, mechanism=p.mechanism, local_steps=1,
                               batch_size=4, chunk_size=2))
    state = init_state(params, jax.random.key(7))
    hyper = RoundHyper.create(clip=1.0, client_lr=0.1, server_lr=1.0, privacy=p.hyper)
    _, rm = fn(state, pop, 0, jnp.arange(4, dtype=jnp.int32), jnp.ones(4, bool), hyper)
    assert float(rm.wrapped_fraction) == 0.0 and int(rm.rounding_failures) == 0
    assert float(rm.effective_noise_std) == pytest.approx(float(rm.noise_sum_std), rel=0.05)
    # within 10% of the continuous Gaussian's noise at the same per-round (ε, δ)
    ref = p.row_columns({"clip_bound": 1.0})["continuous_noise_std"]
    assert 0.99 < float(rm.noise_sum_std) / ref < 1.1


# ----------------------------------------------------------------- whole-run epsilon target

def _whole(population=1000, rounds=20, kind="ddg", **kw):
    return _cfg(population=population, clients_per_round=50, rounds=rounds, sampling="poisson",
                epsilon_scope="run", epsilon=4.0, delta=1.0 / population, bits=20,
                granularity=2.0**-10, secagg_mechanism=kind, **kw)


def _whole_mech(population=1000, rounds=20, kind="ddg", dim=D_TOY):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # Skellam's ideal-law warning, if any
        cfg = _whole(population, rounds, kind)
        return cfg, planning.plan(cfg, population, dim=dim), planning.secagg_mechanism(
            cfg, dim, population)


@pytest.mark.parametrize("kind", ["ddg", "skellam"])
def test_whole_run_noise_meets_the_target_and_is_minimal(kind):
    """The noise solved for the whole run's ε (T = 20 rounds, Poisson cohorts at q = 50/1000)
    meets ε = 4 at δ = 1/N, and 1% less noise does not."""
    import dataclasses

    from ldpsim._src.privacy.discrete import accounting as dacc

    cfg, p, mech = _whole_mech(kind=kind)
    floor, delta = planning.cohort_guarantee(cfg, 1000)
    assert delta == pytest.approx(0.9 * cfg.delta) and 1 <= floor < 50
    eps = p.epsilon_of(1, 20, 1.0)
    assert eps <= 4.0 and eps == pytest.approx(4.0, rel=1e-3)
    assert p.delta_of(1, 20, 1.0) <= cfg.delta
    assert p.epsilon_of(1, 10, 1.0) < eps                       # spent grows with the rounds
    less = dataclasses.replace(mech, noise=mech.noise * 0.99)
    assert dacc.discrete_epsilon(less, delta, 20, floor, sampling_rate=0.05) > 4.0
    # amplification is what the run pays for: unamplified, the same noise spends far more
    assert dacc.discrete_epsilon(mech, delta, 20, floor) > 2 * eps


def test_whole_run_noise_against_the_exact_subsampled_gaussian():
    """Independent reference (dp_accounting's exact Poisson-subsampled Gaussian, Mironov et al.
    2019): at the solved noise the discrete mechanism's bound (Zhu & Wang's generic
    amplification of a curve at least the Gaussian's) is never below the subsampled Gaussian's
    ε with the same central noise multiplier Δ₂-normalised, and within a factor 2.5 of it."""
    import dp_accounting

    from ldpsim._src.privacy.discrete import accounting as dacc

    cfg, p, mech = _whole_mech(kind="ddg", dim=61_706)   # LeNet-5's d (D = 65,536)
    floor, delta = planning.cohort_guarantee(cfg, 1000)  # the noise the accountant counts
    l2, _ = dacc.integer_sensitivity(mech.norm_bound, mech.padded_dim, mech.neighbours)
    z = math.sqrt(floor * mech.client_variance) / l2
    acc = dp_accounting.rdp.RdpAccountant(list(dacc.SUBSAMPLED_ORDERS))
    acc.compose(dp_accounting.PoissonSampledDpEvent(
        0.05, dp_accounting.GaussianDpEvent(z)), 20)
    exact = acc.get_epsilon(delta)
    eps = p.epsilon_of(1, 20, 1.0)
    assert exact <= eps <= 2.5 * exact


def test_whole_run_noise_is_monotone_in_rounds_and_sampling_rate():
    _, _, t10 = _whole_mech(rounds=10)
    _, _, t20 = _whole_mech(rounds=20)
    _, _, q_small = _whole_mech(population=2000)      # q = 0.025
    assert t10.noise < t20.noise                        # more rounds: more noise
    assert q_small.noise < t20.noise                    # rarer participation: less noise


def test_cohort_floor_is_the_binomial_quantile():
    """n_low against an independent exact computation (the Binomial(N - 1, q) lower tail as a
    sum of exact terms in Fractions): with k = n_low - 1 (the others besides the protected
    user), P[X < k] <= eta/T < P[X < k + 1], eta = delta_tail/(1 + e^eps) and delta_tail a
    tenth of delta."""
    from fractions import Fraction

    from ldpsim._src.privacy.discrete import accounting as dacc

    for pop, m, rounds, eps, delta in [(1000, 50, 20, 4.0, 1e-3), (400, 100, 7, 8.0, 1e-4),
                                       (2000, 10, 100, 1.0, 5e-4)]:
        n_low, tail = dacc.cohort_floor(pop, m, rounds, eps, delta)
        assert tail == pytest.approx(0.1 * delta)
        q, n, k = Fraction(m, pop), pop - 1, n_low - 1
        pmf = [math.comb(n, j) * q**j * (1 - q)**(n - j) for j in range(k + 1)]
        below, below_next = sum(pmf[:k]), sum(pmf)
        bound = Fraction(tail) / (1 + Fraction(math.exp(eps))) / rounds
        assert below <= bound * (1 + Fraction(1, 10**9)) and below_next > bound


def test_cohort_ceiling_is_the_binomial_quantile():
    """n_high against exact Binomial(N, q) upper tails (Fractions): P[X > n_high] <= tail <
    P[X > n_high - 1], and the returned tail is P[X > n_high]."""
    from fractions import Fraction

    from ldpsim._src.privacy.discrete import accounting as dacc

    for pop, m, tail in [(1000, 50, 5e-7), (400, 100, 1e-3), (2000, 10, 1e-9), (300, 300, 1e-6)]:
        n_high, p = dacc.cohort_ceiling(pop, m, tail)
        if m == pop:
            assert (n_high, p) == (m, 0.0)
            continue
        q = Fraction(m, pop)
        pmf = [math.comb(pop, j) * q**j * (1 - q)**(pop - j) for j in range(pop + 1)]
        above = sum(pmf[n_high + 1:])
        assert above <= Fraction(tail) * (1 + Fraction(1, 10**9))
        assert sum(pmf[n_high:]) > Fraction(tail)
        assert p == pytest.approx(float(above), rel=1e-9)
        assert n_high > m


def test_poisson_plans_count_the_cohort_size_the_round_can_reach():
    """Under Poisson cohorts the wrap bound of the plan is P[X > n_high] + the bound at n_high
    reports (<= the target), the plan is coarser than one counting m reports only, and the
    bound increases with the number of reports (so the split is a valid bound); fixed-size
    cohorts count m."""
    from ldpsim._src.privacy.discrete import accounting as dacc

    cfg, _, mech = _whole_mech(kind="ddg")
    pop = 1000
    n_high, target = planning.wrap_cohort(cfg, pop)
    ceiling, tail = dacc.cohort_ceiling(pop, cfg.clients_per_round, planning.SECAGG_WRAP_TARGET / 2)
    assert (n_high, target) == (ceiling, planning.SECAGG_WRAP_TARGET - tail)
    assert n_high > cfg.clients_per_round
    bound = tail + dacc.wrap_probability(mech, n_high)
    assert bound <= planning.SECAGG_WRAP_TARGET
    wraps = [dacc.wrap_probability(mech, n) for n in range(cfg.clients_per_round, n_high + 1, 3)]
    assert all(a <= b for a, b in zip(wraps, wraps[1:]))
    m_only = dacc.bits_needed("ddg", epsilon=cfg.epsilon, delta=planning.cohort_guarantee(cfg, pop)[1],
                              clients=mech.clients, dim=mech.dim, clip=mech.clip,
                              rounds=cfg.rounds, bit_range=(mech.bits,), neighbours=mech.neighbours,
                              sampling_rate=planning.sampling_rate(cfg, pop),
                              survivors=planning.cohort_guarantee(cfg, pop)[0]).rows[0]
    assert m_only.granularity < mech.granularity
    assert dacc.wrap_probability(dataclasses.replace(mech, granularity=m_only.granularity),
                                 n_high) > planning.SECAGG_WRAP_TARGET
    fixed = dataclasses.replace(cfg, sampling="uniform", epsilon_scope="round")
    assert planning.wrap_cohort(fixed, pop) == (cfg.clients_per_round,
                                                planning.SECAGG_WRAP_TARGET)
    with pytest.raises(LdpsimError, match="pass population"):
        planning.wrap_cohort(cfg, None)


def test_whole_run_spent_stays_within_the_target_until_a_cohort_falls_short():
    """A short Poisson cohort no longer lifts epsilon_spent over the target (the noise counts
    n_low clients, not m); survivors below n_low are accounted with the realised count, and the
    delta reported then includes the cohort-tail charge at the larger epsilon."""
    cfg, p, mech = _whole_mech(kind="ddg")
    floor, delta = planning.cohort_guarantee(cfg, 1000)
    m = cfg.clients_per_round
    at_floor = p.epsilon_of(1, 20, floor / m)
    assert at_floor == p.epsilon_of(1, 20, 1.0) <= 4.0          # any cohort >= n_low: the target
    assert p.epsilon_of(1, 20, 0.9 * m / m) == at_floor
    short = p.epsilon_of(1, 20, (floor - 2) / m)
    assert short > at_floor and p.delta_of(1, 20, (floor - 2) / m) > p.delta_of(1, 20, 1.0)
    assert p.delta_of(1, 20, 1.0) <= cfg.delta


@pytest.mark.parametrize("kind", ["ddg", "skellam"])
def test_whole_run_without_sampling_is_the_per_round_composition(kind):
    """q = 1 (the whole population every round): no amplification, the noise is the least
    whose T-fold composition meets ε, and ε spent is the plain composition."""
    from ldpsim._src.privacy.discrete import accounting as dacc

    cfg, p, mech = _whole_mech(population=50, rounds=20, kind=kind)
    plain = dacc.solve_noise(kind, epsilon=4.0, delta=cfg.delta, clients=50, dim=D_TOY,
                             clip=1.0, granularity=mech.granularity, rounds=20, bits=20,
                             neighbours="add-remove")
    assert mech.noise == plain.noise
    assert p.epsilon_of(1, 20, 1.0) == dacc.discrete_epsilon(mech, cfg.delta, 20)


@pytest.mark.parametrize("kw,match", [
    (dict(privacy_mode="central"), "discrete"),
    (dict(epsilon_scope="rounds"), "epsilon_scope")])
def test_whole_run_bad_settings_are_errors(kw, match):
    base = dict(sampling="poisson", epsilon_scope="run")
    base.update(kw)
    with pytest.raises(LdpsimError, match=match):
        _cfg(**base)


def test_whole_run_with_fixed_size_cohorts_is_refused_by_the_plan():
    with pytest.raises(LdpsimError, match="needs sampling='poisson'"):
        planning.plan(_cfg(sampling="uniform", epsilon_scope="run"), 30, dim=D_TOY)


def test_whole_run_bits_too_small_is_a_clear_error():
    with pytest.raises(LdpsimError, match="bits = 6 too small.*over 20 rounds"):
        planning.plan(_cfg(population=1000, clients_per_round=50, rounds=20,
                           sampling="poisson", epsilon_scope="run", bits=6), 1000, dim=D_TOY)


@pytest.mark.slow
def test_whole_run_end_to_end_accounts_the_realised_cohorts():
    """A 3-round run with Poisson cohorts: epsilon_spent after t rounds is the whole-run
    accounting (amplified at q = m/N) with the fewest survivors so far, the noise the plan's."""
    from ldpsim import simulate
    from ldpsim._src.privacy.discrete import accounting as dacc

    cfg = _cfg(population=400, clients_per_round=40, rounds=3, sampling="poisson",
               epsilon_scope="run", epsilon=8.0, delta=1.0 / 400, bits=20, local_steps=1,
               eval_every=1)
    rows = []
    simulate(cfg, callback=rows.append)
    from ldpsim._src.fl.simulate import build_data, model_dimension, model_name_for

    pop, _, _ = build_data(cfg)
    dim = model_dimension(model_name_for(cfg.model, pop), tuple(pop.input_shape),
                          int(pop.num_classes))
    assert len(rows) == 3
    mech = planning.secagg_mechanism(cfg, dim, 400)
    assert rows[0]["sigma"] == pytest.approx(mech.granularity * math.sqrt(mech.client_variance))
    floor, delta = planning.cohort_guarantee(cfg, 400)
    for t, r in enumerate(rows, 1):
        s = max(1, min(floor, min(int(x["survivors"]) for x in rows[:t])))
        assert r["epsilon_spent"] == pytest.approx(
            dacc.discrete_epsilon(mech, delta, t, survivors=s, sampling_rate=0.1), rel=1e-12)
        assert r["wrapped_fraction"] == 0 and r["noise_survivors"] == floor
    full = dacc.discrete_epsilon(mech, delta, 3, floor, sampling_rate=0.1)
    assert full <= 8.0 and full == pytest.approx(8.0, rel=1e-3)


def test_cli_run_takes_the_epsilon_scope():
    import dataclasses

    from ldpsim._src.cli import build_parser
    from ldpsim._src.cli._guards import check_run_args

    args = build_parser().parse_args([
        "run", "--dataset", "synthetic", "--privacy-mode", "discrete", "--epsilon", "8",
        "--sampling", "poisson", "--epsilon-scope", "run"])
    check_run_args(args)
    fields = {f.name for f in dataclasses.fields(SimulationConfig)}
    config = SimulationConfig(**{k: v for k, v in vars(args).items() if k in fields})
    assert config.epsilon_scope == "run" and config.sampling == "poisson"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--epsilon-scope", "rounds"])


def test_history_rows_carry_the_plans_wrap_bound():
    """A discrete run's rows report the plan's wrap bound: with Poisson cohorts, the tail of
    the cohort size beyond n_high plus the bound at n_high reports, at most 1e-6."""
    from ldpsim._src.privacy.discrete import accounting as dacc

    cfg, p, mech = _whole_mech(kind="ddg")
    n_high, target = planning.wrap_cohort(cfg, 1000)
    cols = p.row_columns({})
    assert cols["wrap_bound"] == pytest.approx(
        planning.SECAGG_WRAP_TARGET - target + dacc.wrap_probability(mech, n_high), rel=1e-12)
    assert dacc.wrap_probability(mech) < cols["wrap_bound"] <= planning.SECAGG_WRAP_TARGET


def test_a_vanishing_wrap_bound_is_reported_as_1e300_never_zero():
    """At 31 bits the bound's exponent is far below exp's range: it is reported as 1e-300 (still
    an upper bound), not 0, which would claim a sum of unbounded noise can never wrap."""
    import dataclasses

    from ldpsim._src.privacy.discrete import accounting as dacc

    mech = planning.secagg_mechanism(_cfg(bits=16), D_TOY)
    assert 0 < dacc.wrap_probability(mech) <= planning.SECAGG_WRAP_TARGET
    wide = dataclasses.replace(mech, bits=31)
    assert dacc.wrap_probability(wide) == 1e-300
