"""The federated round kernel (ldpsim._src.fl.round.make_round_fn) and its building blocks."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from scipy import stats

from ldpsim.data import PaddedPopulation
from ldpsim._src.fl import client as client_lib
from ldpsim._src.fl import server as server_lib
from ldpsim._src.fl.privatize import privatize
from ldpsim._src.fl.round import RoundHyper, init_state, make_round_fn
from ldpsim._src.fl.simulate import sample_cohort
from ldpsim.models import get_model

FEATURES, CLASSES, MAX_EX = 6, 3, 8


def _population(n_clients=40, max_examples=MAX_EX, features=FEATURES, seed=0, pad_to=None):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_clients, max_examples, features)).astype(np.float32)
    y = rng.integers(0, CLASSES, size=(n_clients, max_examples))
    counts = rng.integers(1, max_examples + 1, size=n_clients)
    if pad_to is not None:  # extra padding rows holding garbage
        extra = pad_to - max_examples
        x = np.concatenate([x, rng.normal(size=(n_clients, extra, features)) * 1e3], 1)
        y = np.concatenate([y, rng.integers(0, CLASSES, size=(n_clients, extra))], 1)
    return PaddedPopulation.from_arrays(x, y, counts, num_classes=CLASSES, compact=False)


def _setup(features=FEATURES, classes=CLASSES, seed=0):
    model = get_model("logreg", input_shape=(features,), num_classes=classes)
    params = model.init(jax.random.key(seed), jnp.zeros((1, features)))
    # Non-zero bias/kernel so that the gradients differ across clients.
    params = jax.tree_util.tree_map(
        lambda p: p + 0.1 * jax.random.normal(jax.random.key(seed + 1), p.shape), params)
    return model, params


def _hyper(sigma=0.0, clip=1e6, client_lr=0.3, server_lr=1.0):
    return RoundHyper.create(sigma=sigma, clip=clip, client_lr=client_lr, server_lr=server_lr)


def _close(a, b, rtol=1e-5, atol=1e-6):
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)


# ----------------------------------------------------------------------------- FedAvg


def _reference_fedavg(params, apply_fn, pop, ids, *, lr, steps, clip, weighting):
    """Plain Python loop: full-batch GD on each client's valid rows, clip, weighted mean."""
    x_all, y_all, counts = (np.asarray(a) for a in (pop.x, pop.y, pop.counts))
    deltas, weights = [], []

    @jax.jit
    def grad(p, x, y):  # mean cross-entropy over the client's valid rows only
        return jax.grad(lambda q: optax.softmax_cross_entropy_with_integer_labels(
            apply_fn(q, x), y).mean())(p)

    for c in ids:
        n = int(counts[c])
        x, y = jnp.asarray(x_all[c, :n]), jnp.asarray(y_all[c, :n])
        p = params
        for _ in range(steps):
            p = jax.tree_util.tree_map(lambda a, g: a - lr * g, p, grad(p, x, y))
        d = [np.asarray(a, np.float64) - np.asarray(b, np.float64)
             for a, b in zip(jax.tree_util.tree_leaves(p), jax.tree_util.tree_leaves(params))]
        norm = math.sqrt(sum(float(np.sum(v * v)) for v in d))
        deltas.append([v * min(1.0, clip / norm) for v in d])
        weights.append(float(n) if weighting == "examples" else 1.0)
    w = np.asarray(weights) / sum(weights)
    mean = [sum(wk * dk[i] for wk, dk in zip(w, deltas)) for i in range(len(deltas[0]))]
    leaves = [np.asarray(p, np.float64) + m for p, m in zip(jax.tree_util.tree_leaves(params),
                                                             mean)]
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(params), leaves)


@pytest.mark.parametrize("weighting,clip", [
    # one compilation each; the fast tier keeps uniform weights unclipped and example
    # weights clipped (the third case is both branches again)
    pytest.param("examples", 1e6, marks=pytest.mark.slow), ("uniform", 1e6), ("examples", 0.05)])
def test_zero_noise_round_equals_python_loop_fedavg(weighting, clip):
    model, params = _setup()
    pop = _population()
    ids, mask = sample_cohort(3, 0, pop.num_clients, 12)
    # batch_size >= max_examples: every local step is a full-batch step on the valid rows,
    # so the reference needs no knowledge of the client's shuffling.
    round_fn = jax.jit(make_round_fn(apply_fn=model.apply, local_steps=3, batch_size=MAX_EX,
                                     weighting=weighting, chunk_size=5))
    state, metrics = round_fn(init_state(params, jax.random.key(7)), pop, jnp.int32(0), ids,
                              mask, _hyper(sigma=0.0, clip=clip, client_lr=0.3))
    ref = _reference_fedavg(params, model.apply, pop, ids, lr=0.3, steps=3, clip=clip,
                            weighting=weighting)
    _close(state.params, ref, rtol=1e-5, atol=1e-6)
    assert float(metrics.noise_norm) == 0.0
    assert int(metrics.clients) == 12 and int(metrics.nonfinite_clients) == 0
    if clip < 1:
        assert float(metrics.clip_fraction) == 1.0  # every update is larger than 0.05 here
        assert float(metrics.signal_norm) <= clip * (1 + 1e-6)
    else:
        assert float(metrics.clip_fraction) == 0.0
    np.testing.assert_allclose(float(metrics.cosine), 1.0, rtol=1e-6)


def test_mechanism_none_equals_zero_sigma():
    model, params = _setup()
    pop = _population()
    ids, mask = sample_cohort(0, 0, pop.num_clients, 10)
    st = init_state(params, jax.random.key(1))
    a, _ = make_round_fn(apply_fn=model.apply, batch_size=4)(st, pop, 0, ids, mask, _hyper())
    b, _ = make_round_fn(apply_fn=model.apply, batch_size=4, mechanism="none")(
        st, pop, 0, ids, mask, _hyper(sigma=123.0))
    _close(a.params, b.params, rtol=0, atol=0)


# ------------------------------------------------------------------ chunking and padding


_ROUNDS: dict = {}


def _run(pop, ids, mask, *, chunk, sigma=0.3, clip=0.5, round_idx=2, mechanism="gaussian"):
    model, params = _setup()
    key = (chunk, mechanism)
    if key not in _ROUNDS:  # share compilations between tests (compiling dominates here)
        _ROUNDS[key] = jax.jit(make_round_fn(apply_fn=model.apply, local_steps=2, batch_size=3,
                                             chunk_size=chunk, mechanism=mechanism))
    fn = _ROUNDS[key]
    return fn(init_state(params, jax.random.key(11)), pop, jnp.int32(round_idx), ids, mask,
              _hyper(sigma=sigma, clip=clip, client_lr=0.2))


@pytest.mark.slow
@pytest.mark.parametrize("mechanism", ["gaussian", "laplace"])
def test_chunk_size_changes_results_only_by_rounding(mechanism):
    pop = _population()
    ids, mask = sample_cohort(5, 2, pop.num_clients, 23)
    ref_state, ref_m = _run(pop, ids, mask, chunk=23, mechanism=mechanism)
    for chunk in (1, 5) if mechanism == "gaussian" else (5,):
        state, m = _run(pop, ids, mask, chunk=chunk, mechanism=mechanism)
        _close(state.params, ref_state.params, rtol=1e-5, atol=1e-6)
        _close(m, ref_m, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_chunks_in_flight_change_results_only_by_rounding():
    # The cohort scan unrolled k chunks per iteration (k = 1, 2, 3 and more chunks than
    # there are: 23 clients in chunks of 5 -> 5 chunks) adds the same chunks in the same
    # order; only XLA's fusion of the unrolled body may differ.
    model, params = _setup()
    pop = _population()
    ids, mask = sample_cohort(5, 2, pop.num_clients, 23)
    runs = []
    for k in (1, 2, 3, 8):
        fn = make_round_fn(apply_fn=model.apply, local_steps=2, batch_size=3, chunk_size=5,
                           chunks_in_flight=k)
        args = (init_state(params, jax.random.key(11)), pop, jnp.int32(5), ids, mask,
                _hyper(sigma=0.3, clip=1.0, client_lr=0.2))
        unrolls = [e.params["unroll"] for e in jax.make_jaxpr(fn)(*args).eqns
                   if e.primitive.name == "scan"]
        assert unrolls == [min(k, 5)]   # the cohort scan: 5 chunks
        runs.append(jax.jit(fn)(*args))
    for state, m in runs[1:]:
        _close(state.params, runs[0][0].params, rtol=1e-6, atol=1e-7)
        _close(m, runs[0][1], rtol=1e-5, atol=1e-7)
    assert float(runs[0][1].noise_norm) > 0


def test_padding_and_order_change_nothing():
    pop = _population()
    ids, mask = sample_cohort(5, 2, pop.num_clients, 23)
    ref_state, ref_m = _run(pop, ids, mask, chunk=5)
    # 13 of those clients plus 10 padding slots (mask False, arbitrary ids), in shuffled
    # order, equal the 13 clients alone (noise and training keys are by position).
    rng = np.random.default_rng(0)
    ids13, mask13 = ids[:13], mask[:13]
    sub_state, sub_m = _run(pop, np.concatenate([ids13, ids13[:10]]),
                            np.concatenate([mask13, np.zeros(10, bool)]), chunk=23)
    pad_ids = np.concatenate([ids13, rng.integers(0, pop.num_clients, 10)]).astype(np.int32)
    pad_mask = np.concatenate([mask13, np.zeros(10, bool)])
    perm = rng.permutation(23)
    state, m = _run(pop, pad_ids[perm], pad_mask[perm], chunk=5)
    _close(state.params, sub_state.params)
    _close(m, sub_m, rtol=1e-4)
    assert int(m.clients) == 13
    # Extra padding rows (holding garbage) in every client's data change nothing either.
    state, m = _run(_population(pad_to=MAX_EX + 5), ids, mask, chunk=5)
    _close(state.params, ref_state.params)
    _close(m, ref_m, rtol=1e-4)


def test_nonfinite_update_is_released_as_noise_around_zero():
    """Privacy review: a diverged client must not be revealed. Its update is replaced by
    the zero update and noised like any other, so the round's noise is exactly that of
    the all-finite round (noise is by position), the client stays in the aggregate (same
    weights), and only the diagnostic column counts it."""
    pop = _population()
    x = np.asarray(pop.x).copy()
    bad = [3, 17]
    x[bad, 0, 0] = np.nan
    x[17, 1, 2] = np.inf
    bad_pop = PaddedPopulation.from_arrays(x, pop.y, pop.counts, num_classes=CLASSES,
                                           compact=False)
    ids = np.arange(0, 23, dtype=np.int32)
    mask = np.ones(23, bool)
    state, m = _run(bad_pop, ids, mask, chunk=5)
    assert int(m.nonfinite_clients) == 2 and int(m.clients) == 23
    assert all(np.isfinite(np.asarray(v)).all() for v in jax.tree_util.tree_leaves(state.params))
    # The noise of the round is that of the same cohort with every client finite.
    _, all_m = _run(pop, ids, mask, chunk=5)
    np.testing.assert_allclose(float(m.noise_norm), float(all_m.noise_norm), rtol=1e-6)
    np.testing.assert_allclose(float(m.n_eff), float(all_m.n_eff), rtol=1e-6)
    np.testing.assert_allclose(float(m.theory_noise_norm), float(all_m.theory_noise_norm),
                               rtol=1e-6)
    # The clean part is the good clients' sum over the FULL cohort's weight.
    _, good_m = _run(pop, ids, ~np.isin(ids, bad), chunk=5)
    w = np.asarray(pop.counts, np.float64)[ids]
    scale = w[~np.isin(ids, bad)].sum() / w.sum()
    np.testing.assert_allclose(float(m.signal_norm), float(good_m.signal_norm) * scale,
                               rtol=1e-5)


@pytest.mark.parametrize("mechanism", ["gaussian", "laplace"])
def test_privatize_nonfinite_release_equals_zero_update_release(mechanism):
    """Under jit(vmap), a NaN or inf update releases exactly what the zero update releases
    with the same key: noise around a data-independent substitute, never zeros."""
    tree = {"a": jnp.array([[jnp.nan, 1.0, 2.0], [jnp.inf, 0.0, 1.0], [1e30, -1e30, 3.0]]),
            "b": jnp.array([[1.0], [2.0], [-jnp.inf]])}
    zeros = jax.tree_util.tree_map(jnp.zeros_like, tree)
    keys = jax.random.split(jax.random.key(7), 3)
    fn = jax.jit(jax.vmap(lambda k, t: privatize(k, t, clip=1.0, scale=0.5,
                                                 mechanism=mechanism)))
    p, p0 = fn(keys, tree), fn(keys, zeros)
    np.testing.assert_array_equal(np.asarray(p.finite), [False, False, False])
    for leaf, leaf0 in zip(jax.tree_util.tree_leaves(p.noisy), jax.tree_util.tree_leaves(p0.noisy)):
        np.testing.assert_array_equal(np.asarray(leaf), np.asarray(leaf0))
        assert np.all(np.asarray(leaf) != 0.0)   # noise is drawn, not zeroed
    np.testing.assert_array_equal(np.asarray(p.release_norm), [0.0, 0.0, 0.0])
    assert not np.any(np.asarray(p.was_clipped))


# ---------------------------------------------------------- noise cancellation (ALG. §5)

NOISE_FEATURES, NOISE_CLASSES = 98, 80  # logreg: d = 98*80 + 80 = 7,920


@pytest.fixture(scope="module")
def noise_setup():
    n_clients = 10_000
    rng = np.random.default_rng(1)
    x = rng.normal(size=(n_clients, 2, NOISE_FEATURES)).astype(np.float32)
    y = rng.integers(0, NOISE_CLASSES, size=(n_clients, 2))
    counts = rng.integers(1, 3, size=n_clients)  # 1 or 2 examples: n_eff < n
    pop = PaddedPopulation.from_arrays(x, y, counts, num_classes=NOISE_CLASSES, compact=False)
    model, params = _setup(NOISE_FEATURES, NOISE_CLASSES)
    return pop, counts, model, params


@pytest.mark.slow
@pytest.mark.parametrize("mechanism", ["gaussian", "laplace"])
def test_aggregated_noise_norm_matches_theory(noise_setup, mechanism):
    pop, counts, model, params = noise_setup
    d = NOISE_FEATURES * NOISE_CLASSES + NOISE_CLASSES
    sigma = 0.7
    std = sigma if mechanism == "gaussian" else math.sqrt(2.0) * sigma
    fn = jax.jit(make_round_fn(apply_fn=model.apply, local_steps=1, batch_size=2,
                               chunk_size=100, mechanism=mechanism))
    ns = (1, 10, 100, 1000, 10_000) if mechanism == "gaussian" else (1, 100, 10_000)
    for i, n in enumerate(ns):
        # Small cohorts padded to 100 slots: one compilation serves n = 1, 10, 100.
        ids, mask = sample_cohort(i, 0, pop.num_clients, n, capacity=100)
        _, m = fn(init_state(params, jax.random.key(100 + i)), pop, jnp.int32(0),
                           ids, mask, _hyper(sigma=sigma, clip=1.0))
        c = counts[ids[mask]].astype(np.float64)
        n_eff = c.sum() ** 2 / (c ** 2).sum()  # independent of the kernel's bookkeeping
        np.testing.assert_allclose(float(m.n_eff), n_eff, rtol=1e-5)
        np.testing.assert_allclose(float(m.theory_noise_norm), std * math.sqrt(d / n_eff),
                                   rtol=1e-5)
        ratio = float(m.noise_norm) ** 2 * n_eff / std ** 2  # = ‖z̄‖²/(std²/n_eff)
        if mechanism == "gaussian":
            # Exactly chi-square with d degrees of freedom. Two-sided, 2e-7 per n: the
            # false-failure rate of this test is < 1e-6.
            lo, hi = stats.chi2.ppf([1e-7, 1 - 1e-7], d)
        else:
            # Sum of d i.i.d. squared (weighted means of) Laplace coordinates: mean d,
            # SD <= sqrt(5 d) (kurtosis of Laplace 6, lower after averaging). Six SDs
            # (normal approximation over d = 7,920 terms): false-failure rate ~ 1e-8.
            lo, hi = d - 6 * math.sqrt(5 * d), d + 6 * math.sqrt(5 * d)
        assert lo < ratio < hi, (n, ratio, d)


def test_privatize_zero_noise_and_clip_direction():
    delta = {"a": jnp.array([3.0, 4.0]), "b": jnp.array([[0.0]])}
    p = privatize(jax.random.key(0), delta, clip=1.0, scale=0.0)
    np.testing.assert_allclose(np.asarray(p.noisy["a"]), [0.6, 0.8], rtol=1e-6)
    assert float(p.norm) == pytest.approx(5.0) and bool(p.was_clipped) and bool(p.finite)
    p = privatize(jax.random.key(0), {"a": jnp.array([jnp.nan, 1.0])}, clip=1.0, scale=1.0)
    assert not bool(p.finite) and not bool(p.was_clipped)
    np.testing.assert_array_equal(np.asarray(p.clipped["a"]), [0.0, 0.0])
    np.testing.assert_array_equal(np.asarray(p.noisy["a"]), np.asarray(p.noise["a"]))
    assert float(jnp.sum(jnp.abs(p.noisy["a"]))) > 0.0   # noise around the zero substitute


# --------------------------------------------------------- traced hyperparameters, sweeps


@pytest.mark.slow
def test_no_recompilation_when_epsilon_clip_or_lr_change():
    model, params = _setup()
    pop = _population()
    traces = []

    def counting_update(*args, **kwargs):
        traces.append(1)  # runs at trace time only
        return client_lib.local_update(*args, **kwargs)

    fn = jax.jit(make_round_fn(apply_fn=model.apply, batch_size=4, client_update=counting_update))
    st = init_state(params, jax.random.key(0))
    ids, mask = sample_cohort(0, 0, pop.num_clients, 10)
    fn(st, pop, jnp.int32(0), ids, mask, _hyper(sigma=0.1))
    first = len(traces)
    assert first >= 1
    for t, (sigma, clip, lr) in enumerate([(2.0, 1.0, 0.1), (0.0, 0.3, 0.5), (17.0, 9.0, 1.0)]):
        ids, mask = sample_cohort(0, t + 1, pop.num_clients, 10)
        fn(st, pop, jnp.int32(t + 1), ids, mask, _hyper(sigma=sigma, clip=clip, client_lr=lr))
    assert len(traces) == first
    assert fn._cache_size() == 1


@pytest.mark.slow
def test_round_vmaps_over_an_epsilon_axis():
    model, params = _setup()
    pop = _population()
    fn = make_round_fn(apply_fn=model.apply, batch_size=4, chunk_size=4)
    st = init_state(params, jax.random.key(0))
    ids, mask = sample_cohort(0, 0, pop.num_clients, 10)
    sigmas = jnp.array([0.0, 0.5, 3.0])
    hyper = jax.tree_util.tree_map(lambda *v: jnp.stack(v), *(
        _hyper(sigma=float(s), clip=0.5, client_lr=0.1) for s in sigmas))
    batched, bm = jax.jit(jax.vmap(fn, in_axes=(None, None, None, None, None, 0)))(
        st, pop, jnp.int32(0), ids, mask, hyper)
    for i, s in enumerate(np.asarray(sigmas)):
        single, sm = fn(st, pop, jnp.int32(0), ids, mask, _hyper(sigma=s, clip=0.5,
                                                                  client_lr=0.1))
        _close(jax.tree_util.tree_map(lambda a: a[i], batched.params), single.params)
        np.testing.assert_allclose(float(bm.noise_norm[i]), float(sm.noise_norm), rtol=1e-5)


# ------------------------------------------------------------------ server, sampling


def test_server_optimizers():
    params = {"w": jnp.array([1.0, -2.0])}
    agg = {"w": jnp.array([0.5, 0.25])}
    opt = server_lib.server_optimizer("fedavg")
    p, _ = server_lib.server_update(params, opt.init(params), agg, opt)
    np.testing.assert_array_equal(np.asarray(p["w"]), [1.5, -1.75])  # W + Δ̄ exactly
    # FedAvgM: v ← βv + Δ̄, W ← W + ηv (heavy ball, Hsu et al. 2019).
    opt = server_lib.server_optimizer("fedavgm", 0.5, momentum=0.9)
    st = opt.init(params)
    p1, st = server_lib.server_update(params, st, agg, opt)
    p2, st = server_lib.server_update(p1, st, agg, opt)
    np.testing.assert_allclose(np.asarray(p2["w"]),
                               np.array([1.0, -2.0]) + 0.5 * (1 + 1.9) * np.array([0.5, 0.25]),
                               rtol=1e-6)
    # FedAdam's first step moves every coordinate by about η (Adam's sign-like first step).
    for name in ("fedadam", "fedyogi"):
        opt = server_lib.server_optimizer(name, 0.01)
        p, _ = server_lib.server_update(params, opt.init(params), agg, opt)
        step = np.asarray(p["w"]) - np.asarray(params["w"])
        assert np.all(step > 0) and np.all(step <= 0.01 + 1e-7), (name, step)
    with pytest.raises(ValueError):
        server_lib.server_optimizer("sgd")


def test_weighted_mean_excludes_zero_weights_and_handles_empty():
    w = server_lib.aggregation_weights(jnp.array([2, 3, 5]), jnp.array([True, False, True]))
    np.testing.assert_array_equal(np.asarray(w), [2.0, 0.0, 5.0])
    t = {"a": jnp.array([[1.0], [100.0], [8.0]])}
    np.testing.assert_allclose(np.asarray(server_lib.weighted_mean(w, t)["a"]), [6.0])
    zero = server_lib.weighted_mean(jnp.zeros(3), t)
    np.testing.assert_array_equal(np.asarray(zero["a"]), [0.0])


def test_sample_cohort():
    ids, mask = sample_cohort(1, 4, 1000, 50)
    assert len(ids) == 50 and mask.all() and len(np.unique(ids)) == 50
    again, _ = sample_cohort(1, 4, 1000, 50)
    np.testing.assert_array_equal(ids, again)
    assert not np.array_equal(ids, sample_cohort(2, 4, 1000, 50)[0])
    assert not np.array_equal(ids, sample_cohort(1, 5, 1000, 50)[0])
    # Poisson: Binomial(N, m/N) size, padded to the capacity.
    sizes = [int(sample_cohort(0, t, 1000, 50, "poisson", capacity=120)[1].sum())
             for t in range(200)]
    # Mean of 200 Binomial(1000, 0.05) draws: SD 6.89/sqrt(200) = 0.49; 5 SD bound
    # (false-failure rate ~ 6e-7).
    assert abs(np.mean(sizes) - 50) < 5 * 0.49
    ids, mask = sample_cohort(0, 0, 1000, 50, "poisson", capacity=120)
    assert len(ids) == 120 and np.all(ids[~mask] == 0)
