"""Privacy modes in the round (ldpsim._src.fl.modes objects through ldpsim._src.fl.round.make_round_fn):
MindSpore, central, distributed, aggregate noise."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from ldpsim.data import PaddedPopulation
from ldpsim._src.fl import modes, planning, stages
from ldpsim._src.fl.round import RoundHyper, init_state, make_round_fn
from ldpsim.models import get_model
from ldpsim._src.privacy.server import server_dp

FEATURES, CLASSES, MAX_EX, N = 6, 3, 8, 40


def _population(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(N, MAX_EX, FEATURES)).astype(np.float32)
    y = rng.integers(0, CLASSES, size=(N, MAX_EX))
    counts = rng.integers(1, MAX_EX + 1, size=N)
    return PaddedPopulation.from_arrays(x, y, counts, num_classes=CLASSES, compact=False)


@pytest.fixture(scope="module")
def setup():
    model = get_model("logreg", input_shape=(FEATURES,), num_classes=CLASSES)
    params = model.init(jax.random.key(0), jnp.zeros((1, FEATURES)))
    params = jax.tree_util.tree_map(
        lambda p: p + 0.1 * jax.random.normal(jax.random.key(1), p.shape), params)
    return model, params, _population()


def _mech(mode="ldp", noise_mode="per-client", m=10, mechanism="gaussian",
          adaptive_clip=False):
    mech = {"ldp": lambda: modes.local(mechanism), "mindspore": modes.mindspore,
            "central": lambda: modes.central(m, adaptive_clip),
            "distributed": lambda: modes.distributed(m)}[mode]()
    return modes.aggregated(mech) if noise_mode == "aggregate" else mech


_KERNELS: dict = {}


def _round(model, mode="ldp", noise_mode="per-client", m=10, mechanism="gaussian",
           adaptive_clip=False, **kw):
    """``(state, pstate, pop, t, ids, mask, hyper, phyper) -> (state, pstate, metrics)``:
    the round of ``mode`` with the mode's state and knobs passed on their own (``phyper``
    None: the local-DP knobs of ``hyper``)."""
    key = (id(model), mode, noise_mode, m, mechanism, adaptive_clip, tuple(sorted(kw.items())))
    if key not in _KERNELS:   # tests of one mode share its compilations (compiling dominates)
        _KERNELS[key] = jax.jit(make_round_fn(
            apply_fn=model.apply, mechanism=_mech(mode, noise_mode, m, mechanism, adaptive_clip),
            local_steps=2, batch_size=4, chunk_size=4, **kw))
    fn = _KERNELS[key]

    def run(state, pstate, pop, t, ids, mask, hyper, phyper=None):
        hyper = hyper if phyper is None else hyper._replace(privacy=phyper)
        new, rm = fn(state._replace(privacy=pstate), pop, t, ids, mask, hyper)
        return new, new.privacy, rm

    return run


def _f(v):
    return jnp.float32(v)


def _ms(sigma_per_clip=0.0, dp_norm_clip=1.0):
    return modes.MindSporeHyper(_f(sigma_per_clip), _f(dp_norm_clip))


def _central(z=0.0, count_stddev=0.0, target_quantile=0.5, clip_lr=0.2):
    return modes.CentralHyper(_f(z), _f(count_stddev), _f(target_quantile), _f(clip_lr))


def _dist(z=0.0, dropout_rate=0.0):
    return modes.DistributedHyper(_f(z), _f(dropout_rate))


def _cohort(m=10, offset=0):
    ids = np.arange(offset, offset + m, dtype=np.int32)
    return ids, np.ones(m, bool)


def _hyper(sigma=0.0, clip=1e6):
    return RoundHyper.create(sigma=sigma, clip=clip, client_lr=0.3, server_lr=1.0)


def _flat(tree):
    return np.concatenate([np.ravel(np.asarray(x)) for x in jax.tree_util.tree_leaves(tree)])


def test_ldp_mode_equals_engine_round(setup):
    model, params, pop = setup
    state = init_state(params, jax.random.key(5))
    ids, mask = _cohort()
    hyper = _hyper(sigma=0.3, clip=0.5)
    ref, rm_ref = jax.jit(make_round_fn(apply_fn=model.apply, local_steps=2, batch_size=4,
                                        chunk_size=4))(state, pop, 3, ids, mask, hyper)
    new, _, rm = _round(model)(state, (), pop, 3, ids, mask, hyper)
    aux = rm
    np.testing.assert_allclose(_flat(new.params), _flat(ref.params), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(rm.noise_norm, rm_ref.noise_norm, rtol=1e-6)
    np.testing.assert_allclose(rm.theory_noise_norm, rm_ref.theory_noise_norm, rtol=1e-5)
    assert int(aux.survivors) == 10


def test_mindspore_clip_sequence_in_engine(setup):
    # Full participation, no noise: round 1 clips every client to 0.05; after it every
    # client's bound is dp_norm_clip·‖W_2 − W_1‖; then the running minimum.
    model, params, pop = setup
    rf = _round(model, "mindspore")
    state = init_state(params, jax.random.key(0))
    pstate = modes.mindspore().init(N, 1.0)
    ph = _ms(0.0, 1.5)
    ids, mask = _cohort(N)
    expected = 0.05
    for t in range(3):
        old = state.params
        state, pstate, aux = rf(state, pstate, pop, t, ids, mask, _hyper(), ph)
        np.testing.assert_allclose(aux.clip_bound, expected, rtol=1e-6)
        g = float(np.linalg.norm(_flat(old) - _flat(state.params)))
        assert g <= expected * (1 + 1e-5)   # weighted mean of updates clipped to C_t
        expected = 1.5 * g if t == 0 else min(expected, 1.5 * g)
        np.testing.assert_allclose(np.asarray(pstate.clip), expected, rtol=1e-5)
    assert int(pstate.iteration) == 4


def test_mindspore_noise_scale_and_partial_participation(setup):
    model, params, pop = setup
    rf = _round(model, "mindspore")
    state = init_state(params, jax.random.key(0))
    pstate = modes.mindspore().init(N, 1.0)
    a = 2.0
    ph = _ms(a, 1.0)
    ids, mask = _cohort(10, offset=5)
    _, new_p, aux = rf(state, pstate, pop, 0, ids, mask, _hyper(), ph)
    # Σ w²σ² with σ = a·0.05 for every client: noise_sum_std = a·0.05·√(Σw²) (w = n_k).
    counts = np.asarray(pop.counts)[ids].astype(np.float64)
    np.testing.assert_allclose(aux.noise_sum_std, a * 0.05 * math.sqrt(np.sum(counts ** 2)),
                               rtol=1e-5)
    # Only clients 5..14 took part in iteration 1: the others keep 0.05.
    clip = np.asarray(new_p.clip)
    assert np.all(clip[:5] == np.float32(0.05)) and np.all(clip[15:] == np.float32(0.05))
    assert np.all(clip[5:15] == clip[5])


def test_central_fixed_denominator_one_server_draw(setup):
    model, params, pop = setup
    m = 10
    state = init_state(params, jax.random.key(2))
    ids, mask = _cohort(m)
    hyper = _hyper(clip=0.02)
    ph0 = _central(0.0)
    ph = _central(1.3)
    rf = _round(model, "central")
    clean, _, rm0 = rf(state, (), pop, 7, ids[:7], mask[:7], hyper, ph0)
    # Fixed denominator: 7 clients, each clipped to 0.02, divided by m = 10 (not 7).
    ldp, _, rm_ldp = _round(model, weighting="uniform")(
        state, (), pop, 7, ids[:7], mask[:7], hyper)
    d_central = _flat(clean.params) - _flat(params)
    d_mean = _flat(ldp.params) - _flat(params)
    np.testing.assert_allclose(d_central, d_mean * 7 / 10, rtol=1e-5, atol=1e-7)
    noisy, _, rm = rf(state, (), pop, 7, ids[:7], mask[:7], hyper, ph)
    aux = rm
    # The noise is exactly one N(0, (zC)²) draw from the server key, divided by m.
    expect = server_dp.aggregate_gaussian_noise(modes.server_key(state.key, 7), params,
                                                1.3 * 0.02, 1.0)
    np.testing.assert_allclose(_flat(noisy.params) - _flat(clean.params),
                               _flat(expect) / m, rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(aux.noise_sum_std, 1.3 * 0.02, rtol=1e-6)
    d = _flat(params).size
    np.testing.assert_allclose(rm.theory_noise_norm, 1.3 * 0.02 * math.sqrt(d) / m, rtol=1e-5)


@pytest.mark.parametrize("clip, factor", [(1e3, math.exp(-0.1)), (1e-6, math.exp(0.1))])
def test_central_adaptive_direction(setup, clip, factor):
    model, params, pop = setup
    rf = _round(model, "central", adaptive_clip=True)
    state = init_state(params, jax.random.key(2))
    pstate = modes.central(10, True).init(N, clip)
    ph = _central(0.0, count_stddev=0.0)
    ids, mask = _cohort(10)
    _, new_p, aux = rf(state, pstate, pop, 0, ids, mask, _hyper(), ph)
    np.testing.assert_allclose(new_p.clip, clip * factor, rtol=1e-5)
    np.testing.assert_allclose(aux.unclipped_fraction, 1.0 if clip > 1 else 0.0, atol=1e-6)


def test_distributed_noise_and_dropout_shortfall(setup):
    model, params, pop = setup
    m, z, c = 40, 2.0, 0.5
    rf = _round(model, "distributed", m=m)
    state = init_state(params, jax.random.key(3))
    ids, mask = _cohort(m)
    full = rf(state, (), pop, 0, ids, mask, _hyper(clip=c),
              _dist(z))[2]
    assert int(full.survivors) == m and float(full.noise_variance_fraction) == 1.0
    np.testing.assert_allclose(full.noise_sum_std, z * c, rtol=1e-5)   # Σ m·(zC)²/m
    aux = rf(state, (), pop, 0, ids, mask, _hyper(clip=c),
             _dist(z, 0.5))[2]
    k = int(aux.survivors)
    # Binomial(40, ½): P(outside [8, 32]) < 1e-4 (false-failure rate).
    assert 8 <= k <= 32
    np.testing.assert_allclose(aux.noise_variance_fraction, k / m, rtol=1e-6)
    short = server_dp.distributed_shortfall(z * c, m, k)
    np.testing.assert_allclose(aux.noise_sum_std ** 2, short.variance, rtol=1e-5)


def test_aggregate_noise_mode_indistinguishable_from_per_client(setup):
    # The same round (fixed state, so the signal is identical) at 150 round indices per
    # mode; the noise norms of the two modes must come from one distribution. Two-sample
    # KS at α = 0.001 (false-failure rate 0.1 % for a correct implementation), and each
    # against the exact law ‖z̄‖ = s·χ_d with s = σ√(Σw²)/Σw (α = 0.001 each).
    model, params, pop = setup
    state = init_state(params, jax.random.key(4))
    ids, mask = _cohort(10)
    hyper = _hyper(sigma=0.7, clip=0.3)
    per = _round(model, "ldp", "per-client")
    agg = _round(model, "ldp", "aggregate")
    d = _flat(params).size
    out = {}
    for name, rf in (("per", per), ("agg", agg)):
        norms, scale = [], None
        for t in range(150):
            rm = rf(state, (), pop, t, ids, mask, hyper)[2]
            norms.append(float(rm.noise_norm))
            scale = float(rm.theory_noise_norm) / math.sqrt(d)
        out[name] = (np.asarray(norms), scale)
    assert stats.ks_2samp(out["per"][0], out["agg"][0]).pvalue > 1e-3
    for norms, s in out.values():
        assert stats.kstest(norms / s, stats.chi(d).cdf).pvalue > 1e-3


def test_laplace_engine_clips_l1(setup):
    model, params, pop = setup
    state = init_state(params, jax.random.key(0))
    ids, mask = _cohort(1)
    new, _, rm = _round(model, mechanism="laplace", weighting="uniform")(
        state, (), pop, 0, ids, mask, _hyper(sigma=0.0, clip=0.01))
    delta = _flat(new.params) - _flat(params)
    assert np.sum(np.abs(delta)) == pytest.approx(0.01, rel=1e-4)   # L1, not L2
    assert np.linalg.norm(delta) < 0.01


@pytest.mark.slow
def test_client_dp_wiring_equals_engine_hook(setup):
    # DP-SGD clients with traced clip/multiplier equal the engine's client_update hook
    # with the same values bound (same keys), and differ from ordinary clients.
    from ldpsim._src.fl import dp_client
    from ldpsim._src.fl.dp_client import make_dp_client_update

    model, params, pop = setup
    state = init_state(params, jax.random.key(0))
    ids, mask = _cohort(8)
    dp_hyper = RoundHyper.create(sigma=0.0, clip=1e6, client_lr=0.3, server_lr=1.0,
                                 client_dp_clip=0.1, client_dp_noise=1.0)
    dp_clients = modes.with_client_training(modes.local("gaussian"), dp_client.dpsgd(4))
    ours = jax.jit(make_round_fn(apply_fn=model.apply, mechanism=dp_clients, local_steps=2,
                                 batch_size=4, chunk_size=4))(
        state, pop, 0, ids, mask, dp_hyper)[0]
    hook = jax.jit(make_round_fn(
        apply_fn=model.apply, local_steps=2, batch_size=4, chunk_size=4,
        client_update=make_dp_client_update(micro_batches=4, clip_norm=0.1,
                                            noise_multiplier=1.0)))
    ref = hook(state, pop, 0, ids, mask, _hyper())[0]
    np.testing.assert_allclose(_flat(ours.params), _flat(ref.params), rtol=1e-5, atol=1e-6)
    plain = _round(model)(state, (), pop, 0, ids, mask, dp_hyper)[0]
    assert not np.allclose(_flat(ours.params), _flat(plain.params))


def test_mode_errors():
    from ldpsim import LdpsimError

    with pytest.raises(ValueError, match="Gaussian"):
        modes.aggregated(modes.local("laplace"))
    with pytest.raises(LdpsimError, match="mechanism"):
        modes.local("secagg")
    # The shortcut is a no-op where the server already draws the noise or nothing is drawn.
    assert modes.aggregated(modes.central(10)) is modes.central(10)
    assert modes.aggregated(modes.local("none")) is modes.local("none")
    # Factories are cached: equal settings give the same object (the compile-cache key).
    assert modes.distributed(7) is modes.distributed(7)
    assert modes.mindspore(True) is not modes.mindspore(False)


def test_mindspore_sigma_and_ranges():
    # the MindSpore calibration reference table (exact σ, Balle & Wang 2018) "exact σ" at ε = 50, δ = 0.01 (Δ = 1): 0.124601; replace-one doubles it.
    assert planning.mindspore_sigma_per_clip() == pytest.approx(0.124601, abs=2e-6)
    assert planning.mindspore_sigma_per_clip(neighbours="replace") == pytest.approx(
        2 * 0.124601, abs=4e-6)
    with pytest.raises(ValueError, match="dp_delta"):
        planning.mindspore_sigma_per_clip(50.0, 1.0)
    with pytest.raises(ValueError, match="dp_eps"):
        planning.mindspore_sigma_per_clip(0.0)


def test_central_epsilon_matches_dp_accounting():
    import dp_accounting

    eps = planning.central_epsilon(noise_multiplier=1.0, clients_per_round=10, population=1000,
                                rounds=1000, delta=1e-6, sampling="poisson")
    acc = dp_accounting.rdp.RdpAccountant()
    acc.compose(dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.0)),
                1000)
    assert eps == pytest.approx(acc.get_epsilon(1e-6), rel=1e-9)
    assert eps == pytest.approx(2.4367, abs=1e-4)   # dp_accounting's RDP accountant


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["distributed", "mindspore"])
def test_chunks_in_flight_change_mode_rounds_only_by_rounding(setup, mode):
    # 10 clients in chunks of 4 = 3 chunks; 2 in flight pads them to 4 chunks (one of
    # padding slots only), 5 in flight is capped at 3. Dropout and MindSpore's per-client
    # state are drawn/kept by client id, so the padding and the unrolling change nothing.
    model, params, pop = setup
    state = init_state(params, jax.random.key(6))
    ids, mask = _cohort(10, offset=7)
    phyper = _dist(1.5, 0.3) if mode == "distributed" else _ms(0.8, 0.4)
    pstate = _mech(mode).init(N, 0.5)
    outs = []
    for k in (1, 2, 5):
        rf = _round(model, mode, chunks_in_flight=k)
        outs.append(rf(state, pstate, pop, 2, ids, mask, _hyper(clip=0.5), phyper))
    def arrays(out):  # (state, pstate, metrics) without the server's PRNG key
        return [x for x in jax.tree_util.tree_leaves(out)
                if not jnp.issubdtype(x.dtype, jax.dtypes.prng_key)]

    for out in outs[1:]:
        for a, b in zip(arrays(out), arrays(outs[0]), strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-7)
    assert int(outs[0][2].survivors) <= 10


@pytest.mark.slow
def test_a_new_mode_is_one_object_the_kernel_runs_unchanged(setup):
    # A mode written outside ldpsim: clients clip to C and add N(0, (s·C)²) with s a traced
    # knob, the server averages with one vote per client. Built from the public fields of
    # RoundMechanism only; the round kernel is not touched.
    # Twice: composed from stages with modes.chain, and with the former flat field names
    # through _replace (deprecated, still honoured); both must run identically.
    model, params, pop = setup
    base = modes.local("gaussian")

    def scales(state, ids, clip, ph):
        return jnp.full(ids.shape, clip), jnp.full(ids.shape, ph.scale * clip)

    composed = modes.chain(base.privatizer._replace(client_scales=scales),
                           stages.float_sum(weighted=False), name="my-mode")
    with pytest.warns(DeprecationWarning, match="round stages"):
        legacy = base._replace(name="my-mode", weighted=False, client_scales=scales)
    assert legacy == composed
    state = init_state(params, jax.random.key(3))
    ids, mask = _cohort(10)
    hyper = RoundHyper.create(sigma=2.0, clip=0.25, client_lr=0.3, server_lr=1.0)
    new, rm = jax.jit(make_round_fn(apply_fn=model.apply, mechanism=composed, local_steps=2,
                                    batch_size=4, chunk_size=4))(state, pop, 0, ids, mask, hyper)
    # It equals local DP with σ = 2·0.25 and uniform weights, same keys.
    ref_fn = jax.jit(make_round_fn(apply_fn=model.apply, mechanism=base, local_steps=2,
                                   batch_size=4, chunk_size=4, weighting="uniform"))
    ref, rm_ref = ref_fn(state, pop, 0, ids, mask,
                         RoundHyper.create(sigma=0.5, clip=0.25, client_lr=0.3, server_lr=1.0))
    np.testing.assert_allclose(_flat(new.params), _flat(ref.params), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(rm.noise_sum_std, 0.5 * math.sqrt(10), rtol=1e-6)


def test_the_round_stages_are_public_in_ldpsim_modes():
    """A user composes a mode from ldpsim.modes alone (no private import): the stages of a
    registered mode are its fields, and the public constructors are the kernel's."""
    import ldpsim.modes as public

    base = public.local("gaussian")
    assert isinstance(base.privatizer, public.ClientStage)
    assert isinstance(base.aggregator, public.Aggregator)
    assert isinstance(base.clip_policy, public.ClipPolicy)
    mine = public.chain(base.privatizer, public.float_sum(weighted=False), public.fixed_clip(),
                        name="one-vote")
    assert mine == modes.chain(base.privatizer, stages.float_sum(weighted=False),
                               stages.fixed_clip(), name="one-vote")
    assert public.modular_sum is stages.modular_sum and public.ServerNoise is stages.ServerNoise
