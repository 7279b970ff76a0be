"""Report randomizers (PrivUnit2, PrivUnitG, Duchi et al., SignDS, k-RR): exact privacy at
small sizes, unbiased decoding with the exact variance, keys, bad input.

Statistical checks use fixed keys (so each run is deterministic) with 5-standard-error
tolerances: for a correct implementation each two-sided 5-SE check fails with probability
5.7e-7 under a normal approximation; this file makes fewer than 100 such checks, so the
chance that a correct implementation fails any of them for a fresh key is below 6e-5.
"""

from __future__ import annotations

import functools
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, special, stats

from ldpsim._src._checks import LdpsimError
from ldpsim._src.privacy.randomizers import mechanism, randomizer, rr, signds

REPORT = ("privunit2", "privunitg", "duchi", "signds", "rr")
EPS = (0.5, 2.0, 8.0)


def _f32(x) -> float:
    return float(np.float32(x))


def _norm_ratio(params) -> float:
    """Worst ratio of the norm coin's output probabilities over r ∈ [0, C] (extremes r = 0, C),
    from the float32 numbers it uses: P(−B | r) = (excess + 2(C − r))/(2B)."""
    c, b, x = (np.float32(v) for v in (params.clip, params.norm_bound, params.norm_excess))
    # the coin draws the smaller side, in float32 as the sampler computes it
    plus_at_0 = float(np.float32(x) / np.float32(2 * b))            # r = 0: P(+B) is small
    minus_at_c = float(np.float32(x) / np.float32(2 * b))           # r = C: P(−B) is small
    return max((1 - minus_at_c) / plus_at_0, (1 - plus_at_0) / minus_at_c)


# ------------------------------------------------------------------------ exact privacy


@pytest.mark.parametrize("k", [2, 3, 10])
@pytest.mark.parametrize("eps", [0.5, 1.0, 4.0, 10.0])
def test_rr_realised_law_is_eps_ldp(k, eps):
    """The integer grid's exact output law (float64 here; exact fractions in
    test_realised_discrete.py): every ratio over any two inputs <= e^eps, and tight."""
    laws = np.stack([rr.realised_probabilities(eps, k, v) for v in range(k)])
    assert np.allclose(laws.sum(1), 1.0, atol=1e-12)
    ratio = (laws[:, None, :] / laws[None, :, :]).max()
    assert ratio <= math.exp(eps) * (1 + 1e-12)
    assert ratio >= math.exp(eps) * (1 - 1e-12)


def test_rr_sampler_follows_its_realised_law():
    """Chi-square of 2e5 draws against the exact grid law (p-value > 1e-6: false-failure 1e-6)."""
    k, eps, n = 4, 1.0, 200_000
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(3), i))(jnp.arange(n))
    y = np.asarray(jax.jit(jax.vmap(lambda key: rr.k_randomized_response(key, 2, k=k, epsilon=eps)))(keys))
    counts = np.bincount(y, minlength=k)
    assert stats.chisquare(counts, n * rr.realised_probabilities(eps, k, 2)).pvalue > 1e-6


def _cap_probability_quad(gamma: float, d: int) -> float:
    """P(<V,u> >= gamma) for V uniform on S^{d-1}, by quadrature of the density of t."""
    dens = lambda t: (1 - t * t) ** ((d - 3) / 2) / special.beta(0.5, (d - 1) / 2)  # noqa: E731
    return integrate.quad(dens, gamma, 1.0, epsabs=0, epsrel=1e-12)[0]


@pytest.mark.parametrize("d", [4, 5, 8, 20, 61_706])
@pytest.mark.parametrize("eps", (*EPS, 20.0))
def test_privunit2_density_ratio_is_at_most_e_eps(d, eps):
    """Output density of (V, r̂) under u is g·p/q (cap) or g·(1−p)/(1−q), times the norm's
    P(±B); the worst ratio over any two inputs is p(1−q)/((1−p)q) · P₊(C)/P₊(0)... computed
    from the float32 parameters the sampler uses, with q by independent quadrature."""
    m = mechanism.make("privunit2", epsilon=eps, dim=d)
    p, gamma = 1.0 - _f32(m.params.p_out), _f32(m.params.gamma)
    q = _cap_probability_quad(gamma, d)
    ratio = p * (1 - q) / ((1 - p) * q) * _norm_ratio(m.params)
    assert ratio <= math.exp(eps) * (1 + 1e-5)
    assert ratio >= math.exp(eps) * (1 - 1e-4)   # tight: the whole budget is used


@pytest.mark.parametrize("d", [2, 5, 61_706])
@pytest.mark.parametrize("eps", (*EPS, 50.0, 99.0))
def test_privunitg_density_ratio_is_at_most_e_eps(d, eps):
    m = mechanism.make("privunitg", epsilon=eps, dim=d)
    p, gamma = 1.0 - _f32(m.params.p_out), _f32(m.params.gamma)
    q = stats.norm.sf(gamma)
    ratio = p * (1 - q) / ((1 - p) * q) * _norm_ratio(m.params)
    assert ratio <= math.exp(eps) * (1 + 1e-5)
    assert ratio >= math.exp(eps) * (1 - 1e-4)


@pytest.mark.parametrize("eps", EPS)
def test_duchi_density_ratio_is_at_most_e_eps(eps):
    """Density on each side of ⊥u is a·π + (1−a)(1−π) (or swapped), a = ½ + ‖x‖/2C ∈ [0, 1]:
    enumerate inputs' a on a grid and both sides, with the away coin's exact realised
    probability ρ = c/2^{32W} (its integer cut)."""
    m = mechanism.make("duchi", epsilon=eps, dim=3)
    cut = np.asarray(m.params.cut)
    rho = rr.int_of(cut) / 2.0 ** (32 * cut.size)
    pi = 1.0 - rho
    a = np.linspace(0.0, 1.0, 101)
    dens = np.concatenate([a * pi + (1 - a) * (1 - pi), a * (1 - pi) + (1 - a) * pi])
    assert dens.max() / dens.min() <= math.exp(eps) * (1 + 1e-12)
    assert dens.max() / dens.min() >= math.exp(eps) * (1 - 1e-12)


def test_signds_law_of_index_sets_is_eps_ldp():
    """Every index set's exact probability (both signs, from the sampler's integer thresholds)
    for every ordering of a d = 6 update: the ratio over any two updates is <= e^ε."""
    d, eps = 6, 1.5
    m = mechanism.make("signds", dim=d, sign_k=0.25, sign_eps=eps, sign_dim_out=2)
    k, h = m.params.k, m.params.h
    th = np.asarray(m.params.thresholds)
    grid = 2.0 ** (32 * th.shape[1])
    cum = [0] + [rr.int_of(t) for t in th] + [int(grid)]
    pmf = np.diff(np.array(cum, np.float64)) / grid

    def law(top_plus, top_minus):
        out = {}
        for s in itertools.combinations(range(d), h):
            for b, top in ((1, top_plus), (-1, top_minus)):
                nu = len(set(s) & top)
                out[(s, b)] = 0.5 * pmf[nu] / (math.comb(k, nu) * math.comb(d - k, h - nu))
        return out

    laws = [law(set(perm[:k]), set(perm[-k:])) for perm in itertools.permutations(range(d))]
    probs = np.array([[lw[o] for o in laws[0]] for lw in laws])
    assert np.allclose(probs.sum(1), 1.0)
    assert probs.max(0).max() > 0
    ratio = (probs.max(0) / probs.min(0)).max()
    assert ratio <= math.exp(eps) * (1 + 1e-12)


@pytest.mark.parametrize("d,eps,proposal", [(5, 1.0, "normal"), (10, 20.0, "exponential")])
def test_privunit2_cap_sampler_matches_the_exact_law_of_t(d, eps, proposal):
    """t = <V, u> against its exact conditional CDFs (KS, p > 1e-6) and P(cap) = p (5 SE),
    for both proposals of the rejection step (normal; exponential tangent on a far cap)."""
    n = 20_000
    m = mechanism.make("privunit2", epsilon=eps, dim=d)
    assert (float(m.params.cap_rate) > 0) == (proposal == "exponential")
    x = jnp.zeros(d).at[1].set(0.7)
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(5), i))(jnp.arange(n))
    v = jax.jit(jax.vmap(lambda key: m.privatize(key, x, m.params).report["direction"]))(keys)
    v = np.asarray(v, np.float64)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    t = v[:, 1]
    gamma, p = _f32(m.params.gamma), 1.0 - _f32(m.params.p_out)
    cap = t >= gamma
    assert abs(cap.mean() - p) <= 5 * math.sqrt(p * (1 - p) / n)
    q = _cap_probability_quad(gamma, d)
    b = (d - 1) / 2
    tail = lambda s: np.where(s >= 0, 0.5 * special.betaincc(0.5, b, s * s),  # noqa: E731
                              1 - 0.5 * special.betaincc(0.5, b, s * s))
    cdf_hi = lambda s: 1 - tail(s) / q  # noqa: E731
    cdf_lo = lambda s: (1 - tail(s)) / (1 - q)  # noqa: E731
    assert stats.kstest(t[cap], cdf_hi).pvalue > 1e-6
    assert stats.kstest(t[~cap], cdf_lo).pvalue > 1e-6


# ------------------------------------------------------------- unbiasedness and variance

CASES = [
    ("privunit2", dict(epsilon=2.0, dim=6)),
    ("privunit2", dict(epsilon=6.0, dim=6, norm_epsilon=1.0)),
    ("privunitg", dict(epsilon=2.0, dim=6)),
    ("duchi", dict(epsilon=1.0, dim=6)),
    ("signds", dict(dim=6, sign_k=0.25, sign_eps=2.0, sign_dim_out=2, sign_global_lr=0.5)),
]


@functools.lru_cache(maxsize=None)
def _mech(name, kw):
    return mechanism.make(name, **dict(kw))


@functools.lru_cache(maxsize=None)
def _decoder(name, kw):
    """``jit(vmap)`` of decode∘privatize over keys, the input traced: one compile per case."""
    m = _mech(name, kw)
    return jax.jit(jax.vmap(lambda key, x: m.decode(m.privatize(key, x, m.params).report, m.params, x),
                            in_axes=(0, None)))


def _draws(m, x, n, seed, kw=None):
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(seed), i))(jnp.arange(n))
    if kw is not None:
        return np.asarray(_decoder(m, kw)(keys, x), np.float64)
    f = jax.jit(jax.vmap(lambda key: m.decode(m.privatize(key, x, m.params).report, m.params, x)))
    return np.asarray(f(keys), np.float64)


@pytest.mark.parametrize("name,kw", CASES)
@pytest.mark.parametrize("scale", [0.8, 3.0])   # inside the clip bound, and clipped to it
def test_decoded_mean_and_variance_are_exact(name, kw, scale):
    x = jnp.array([0.3, -0.4, 0.1, 0.2, 0.5, -0.05])
    x = x / jnp.linalg.norm(x) * scale
    kw = tuple(sorted(kw.items()))
    m = _mech(name, kw)
    n = 20_000
    est = _draws(name, x, n, seed=11, kw=kw)
    mu = np.asarray(m.mean(m.params, x), np.float64)
    var = np.asarray(m.variance(m.params, x), np.float64)
    if m.unbiased:
        clipped = np.asarray(x) * min(1.0, 1.0 / scale)
        np.testing.assert_allclose(mu, clipped, rtol=1e-6)
    assert np.all(np.abs(est.mean(0) - mu) <= 5 * np.sqrt(var / n))
    centred = est - mu
    fourth = np.mean(centred**4, 0)
    se_var = np.sqrt(np.maximum(fourth - var**2, 0) / n)
    assert np.all(np.abs(centred.var(0) - var) <= 5 * se_var + 1e-6)
    total = float(randomizer.total_variance(m, x))
    assert total == pytest.approx(float(np.sum(var)), rel=1e-5)


def test_rr_decoder_is_unbiased_with_its_exact_variance():
    m = mechanism.make("rr", epsilon=1.0, k=5)
    n = 40_000
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(2), i))(jnp.arange(n))
    est = np.asarray(jax.jit(jax.vmap(lambda key: m.decode(m.privatize(key, 3, m.params).report,
                                                           m.params)))(keys), np.float64)
    var = np.asarray(m.variance(m.params, 3), np.float64)
    np.testing.assert_array_equal(np.asarray(m.mean(m.params, 3)), np.eye(5)[3])
    assert np.all(np.abs(est.mean(0) - np.eye(5)[3]) <= 5 * np.sqrt(var / n))
    assert np.allclose(est.var(0), var, rtol=0.05)   # Bernoulli-based: 5 SE < 5 % at n = 4e4


@pytest.mark.slow   # 5-17 CPU s of compilation; the fast tier covers its code elsewhere
def test_privunit_at_lenet_size_is_unbiased_in_projection():
    """d = 61,706: the decoded projection on u averages to ‖x‖ (5 SE of the exact variance)."""
    d, n = 61_706, 256
    for name in ("privunit2", "privunitg", "duchi"):
        m = mechanism.make(name, epsilon=4.0, dim=d)
        x = jax.random.normal(jax.random.key(0), (d,))
        x = x / jnp.linalg.norm(x) * 0.5
        u = np.asarray(x / 0.5, np.float64)
        est = _draws(m, x, n, seed=4)
        proj = est @ u
        # exact variance of <x̂, u>: E[r̂²]E[<V,u>²]/m² − ‖x‖² (PrivUnit), B²/d − ‖x‖² (Duchi)
        p = m.params
        if name != "duchi":
            b = float(p.norm_bound)
            er2 = (b * b - (2 * 0.5 - 1) ** 2) / 4 + 0.25
        if name == "privunit2":
            var_proj = float(er2 * p.et2 / p.m**2) - 0.25
        elif name == "privunitg":
            var_proj = float(er2 * p.ea2 / p.m**2) - 0.25
        else:
            var_proj = float(p.bound**2 / d) - 0.25
        assert abs(proj.mean() - 0.5) <= 5 * math.sqrt(var_proj / n)
        assert np.all(np.isfinite(est))


# --------------------------------------------------------------------------------- keys


@pytest.mark.parametrize("name,kw", CASES)
def test_no_key_reuse_across_clients_and_determinism(name, kw):
    x = jnp.array([0.3, -0.4, 0.1, 0.2, 0.5, -0.05])
    root = jax.random.key(9)
    keys = jax.vmap(lambda c: jax.random.fold_in(jax.random.fold_in(root, 0), c))(jnp.arange(64))
    decoder = _decoder(name, tuple(sorted(kw.items())))
    f = lambda keys: decoder(keys, x)  # noqa: E731
    est = np.asarray(f(keys))
    if name == "signds":   # discrete: 2·C(6,2) = 30 outcomes; 64 clients must not all agree
        assert len({tuple(r) for r in est}) > 10
    else:
        assert len({tuple(r) for r in est}) == 64
    np.testing.assert_array_equal(est, np.asarray(f(keys)))        # same key, same report


def test_sub_streams_of_one_client_are_distinct():
    tags = (randomizer.TAG_DIRECTION, randomizer.TAG_NORM, randomizer.TAG_CAP,
            randomizer.TAG_ACCEPT, randomizer.TAG_SIGN, randomizer.TAG_SELECT)
    assert len(set(tags)) == len(tags)
    key = jax.random.key(0)
    data = {tuple(np.asarray(jax.random.key_data(randomizer.subkey(key, t))).tolist()) for t in tags}
    assert len(data) == len(tags)


# ---------------------------------------------------------------------------- interface


def test_one_registry_entry_per_randomizer():
    assert set(REPORT) <= set(mechanism.REGISTRY)
    for name in REPORT:
        e = mechanism.REGISTRY[name]
        assert e.name == name and not e.additive and e.guarantee == "pure"
    assert mechanism.ADDITIVE == ("gaussian", "laplace", "none")
    assert mechanism.REGISTRY["signds"].unbiased is False
    with pytest.raises(LdpsimError, match="report randomizer"):
        mechanism.privatize_fn("privunit2")
    with pytest.raises(LdpsimError, match="'duchi'"):
        mechanism.noise_std_factor("duchi")


@pytest.mark.slow   # 5-17 CPU s of compilation; the fast tier covers its code elsewhere
def test_decoded_release_in_the_engine_release_type():
    """decoded_release_fn: noisy = decode(report), noise = noisy − clipped, under jit(vmap);
    additive randomizers keep their own privatize (bit-identical)."""
    tree = {"w": jnp.ones((2, 3)) * 0.5, "b": jnp.array([0.2, -0.1])}
    m = mechanism.make("privunitg", epsilon=2.0, dim=8)
    f = jax.jit(jax.vmap(mechanism.decoded_release_fn("privunitg"), in_axes=(0, None, None)))
    keys = jax.random.split(jax.random.key(0), 3)
    rel = f(keys, tree, m.params)
    ref = jax.vmap(lambda k: m.decode(m.privatize(k, tree, m.params).report, m.params, tree))(keys)
    # same draws (jit vs eager: float32 rounding of fused ops only)
    np.testing.assert_allclose(np.asarray(rel.noisy["w"]), np.asarray(ref["w"]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(rel.noise["b"]),
                               np.asarray(rel.noisy["b"] - rel.clipped["b"]), rtol=1e-6, atol=1e-6)
    assert mechanism.decoded_release_fn("gaussian") is mechanism.privatize_fn("gaussian")
    with pytest.raises(LdpsimError, match="categories"):
        mechanism.decoded_release_fn("rr")


def test_pytree_updates_and_accounting_events():
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant

    tree = {"w": jnp.ones((2, 3)) * 0.1, "b": jnp.array([0.2, -0.1])}
    for name in ("privunit2", "privunitg", "duchi", "signds"):
        kw = dict(dim=8) if name != "signds" else dict(dim=8, sign_k=0.25, sign_dim_out=2, sign_eps=2.0)
        if name != "signds":
            kw["epsilon"] = 2.0
        m = mechanism.make(name, **kw)
        rep = m.privatize(jax.random.key(1), tree, m.params)
        out = m.decode(rep.report, m.params, tree)
        assert jax.tree_util.tree_structure(out) == jax.tree_util.tree_structure(tree)
        assert out["w"].shape == (2, 3)
        assert jax.tree_util.tree_structure(m.variance(m.params, tree)) == jax.tree_util.tree_structure(tree)
        acc = pld_privacy_accountant.PLDAccountant(
            neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
        acc.compose(m.dp_event(m.params), 1)
        assert acc.get_epsilon(1e-12) == pytest.approx(m.epsilon, rel=1e-3)


# ---------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("name", ["privunit2", "privunitg", "duchi", "rr"])
@pytest.mark.parametrize("eps", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_epsilon_is_a_clear_error(name, eps):
    kw = dict(k=3) if name == "rr" else dict(dim=10)
    with pytest.raises(LdpsimError, match=r"epsilon must be > 0 and finite.*got " + re_value(eps)):
        mechanism.make(name, epsilon=eps, **kw)


def re_value(v) -> str:
    return {0.0: "0.0", -1.0: "-1.0"}.get(v, "nan" if v != v else "inf")


@pytest.mark.parametrize("name,dim,minimum", [("privunit2", 3, 4), ("privunitg", 1, 2), ("duchi", 1, 2)])
def test_dimension_too_small_is_a_clear_error(name, dim, minimum):
    with pytest.raises(LdpsimError, match=rf"dim must be an integer >= {minimum} for {name}; got {dim}"):
        mechanism.make(name, epsilon=1.0, dim=dim)


def test_signds_ranges_are_mindspore_s():
    with pytest.raises(LdpsimError, match="too small for sign_k"):
        mechanism.make("signds", dim=50)                     # k = floor(0.01·50) = 0
    for kw, what in [(dict(sign_k=0.3), "sign_k"), (dict(sign_eps=150.0), "sign_eps"),
                     (dict(sign_thr_ratio=0.4), "sign_thr_ratio"), (dict(sign_dim_out=51), "sign_dim_out"),
                     (dict(sign_global_lr=0.0), "sign_global_lr"), (dict(sign_eps=0.0), "sign_eps")]:
        with pytest.raises(LdpsimError, match=what):
            mechanism.make("signds", dim=1000, **kw)
    m = mechanism.make("signds", dim=61_706)                 # MindSpore's defaults
    assert (m.params.k, m.epsilon, float(m.params.lr)) == (617, 100.0, pytest.approx(0.1))
    assert m.params.h == signds.opt_output_dim(0.6, 617, 61_706, 100.0)
    # MindSpore's own unit test (SecureProtocolTest.signDSModel): "the total output dimension
    # of SignDS is 40 to 70" at d = 800,000, sign_k = 0.2, sign_eps = 100, sign_thr_ratio = 0.6
    # (its double-precision counts overflow there, which stops the search for h)
    h = signds.opt_output_dim(0.6, 160_000, 800_000, 100.0)
    assert 40 <= h <= 70
    assert signds.opt_threshold(617, 61_706, 43, 100.0) == m.params.threshold


def test_unknown_name_and_bad_k():
    with pytest.raises(LdpsimError, match="mechanism must be one of .*privunit2.*got 'privunit'"):
        mechanism.make("privunit", epsilon=1.0)
    with pytest.raises(LdpsimError, match="k must be an integer >= 2.*got 1"):
        mechanism.make("rr", epsilon=1.0, k=1)


@pytest.mark.slow   # 5-17 CPU s of compilation; the fast tier covers its code elsewhere
@pytest.mark.parametrize("name", ["privunit2", "privunitg", "duchi"])
def test_input_above_the_clip_is_clipped_and_counted(name):
    m = mechanism.make(name, epsilon=2.0, dim=6, clip=0.5)
    x = jnp.array([3.0, 4.0, 0.0, 0.0, 0.0, 0.0])
    rep = m.privatize(jax.random.key(0), x, m.params)
    assert bool(rep.was_clipped) and float(rep.norm) == pytest.approx(5.0)
    assert float(jnp.linalg.norm(rep.clipped)) == pytest.approx(0.5, rel=1e-6)
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(0), i))(jnp.arange(8))
    counted = jax.vmap(lambda key, s: m.privatize(key, x * s, m.params).was_clipped)(
        keys, jnp.array([0.01, 0.05, 0.2, 1.0, 1.0, 0.05, 2.0, 0.01]))
    assert int(jnp.sum(counted)) == 4   # norms 0.05, 0.25, 1, 5, 5, 0.25, 10, 0.05 vs C = 0.5
    bad = m.privatize(jax.random.key(0), x.at[0].set(jnp.nan), m.params)
    assert not bool(bad.finite) and float(jnp.abs(bad.clipped).sum()) == 0.0


def test_privunit_dimension_mismatch_and_huge_epsilon():
    m = mechanism.make("privunitg", epsilon=1.0, dim=6)
    with pytest.raises(LdpsimError, match="dim 6"):
        m.privatize(jax.random.key(0), jnp.ones(7), m.params)
    with pytest.raises(LdpsimError, match="epsilon must be <= 99 for the float32 PrivUnit samplers; got 200.0"):
        mechanism.make("privunitg", epsilon=200.0, dim=10)
    big = mechanism.make("privunitg", epsilon=99.0, dim=61_706)
    # printed: ε (the realised ε' ≤ it, coins on the 32-bit grid) and a δ' that is vacuous
    # this far out (the cap lies beyond the direction sampler's reach)
    assert big.ideal_epsilon == 99.0 and big.epsilon == pytest.approx(99.0, rel=1e-4)
    assert big.delta == 1.0
    with pytest.raises(LdpsimError, match="epsilon must be <= 700 for duchi"):
        mechanism.make("duchi", epsilon=701.0, dim=10)
    assert mechanism.make("duchi", epsilon=100.0, dim=10).epsilon == 100.0
    with pytest.raises(LdpsimError, match="too thin for float32; use privunitg"):
        mechanism.make("privunit2", epsilon=60.0, dim=4)


@pytest.mark.parametrize("name", ["projunit", "fastprojunit"])
def test_projection_dimension_errors_name_k_not_dim(name):
    with pytest.raises(LdpsimError, match=r"k \(projection_dim\) must be an integer >= 2 .*got 1"):
        mechanism.make(name, epsilon=4.0, dim=100, projection_dim=1)
    with pytest.raises(LdpsimError, match=r"^dim must be an integer >= 2 .*got 1"):
        mechanism.make(name, epsilon=4.0, dim=1)
