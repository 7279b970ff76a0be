"""Clipping: ‖clip(u)‖ = min(‖u‖, C), direction preserved, edge cases explicit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import examples

from ldpsim._src.privacy.randomizers import clipping


def _tree(seed: int, scale: float, shapes):
    rng = np.random.default_rng(seed)
    return {f"w{i}": jnp.asarray(rng.normal(size=s) * scale, jnp.float32) for i, s in enumerate(shapes)}


def _flat(tree):
    return np.concatenate([np.asarray(x, np.float64).ravel() for x in jax.tree_util.tree_leaves(tree)])


shapes_st = st.lists(st.lists(st.integers(1, 6), min_size=0, max_size=3).map(tuple), min_size=1, max_size=4)


@settings(max_examples=examples(60), deadline=None)
@given(seed=st.integers(0, 2**31 - 1), scale=st.floats(1e-6, 1e6), clip=st.floats(1e-3, 1e3),
       shapes=shapes_st)
def test_global_clip_norm_and_direction(seed, scale, clip, shapes):
    tree = _tree(seed, scale, shapes)
    clipped, norm = clipping.clip_by_global_norm(tree, clip)
    u, v = _flat(tree), _flat(clipped)
    true_norm = np.linalg.norm(u)
    np.testing.assert_allclose(float(norm), true_norm, rtol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(v), min(true_norm, clip), rtol=1e-5, atol=1e-30)
    if true_norm > 0:
        cos = u @ v / (np.linalg.norm(u) * max(np.linalg.norm(v), 1e-300))
        assert cos == pytest.approx(1.0, abs=1e-5)  # direction preserved
    if true_norm <= clip:
        np.testing.assert_array_equal(v, u)  # untouched below the bound


def test_zero_update_is_returned_unchanged_with_zero_norm():
    tree = {"a": jnp.zeros((3, 2)), "b": jnp.zeros(4)}
    clipped, norm = clipping.clip_by_global_norm(tree, 1.0)
    assert float(norm) == 0.0
    assert all(np.all(np.isfinite(x)) and not np.any(x) for x in jax.tree_util.tree_leaves(clipped))


def test_huge_finite_values_never_give_nan():
    tree = {"a": jnp.full((10,), 1e30, jnp.float32)}  # squares overflow float32
    clipped, norm = clipping.clip_by_global_norm(tree, 2.0)
    np.testing.assert_allclose(float(norm), 1e30 * np.sqrt(10), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(clipped["a"]), np.full(10, 2.0 / np.sqrt(10)), rtol=1e-5)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_update_becomes_zero_and_is_flagged(bad):
    tree = {"a": jnp.array([1.0, bad, 3.0]), "b": jnp.ones(2)}
    clipped, norm = clipping.clip_by_global_norm(tree, 1.0)
    assert not np.isfinite(float(norm))
    for leaf in jax.tree_util.tree_leaves(clipped):
        np.testing.assert_array_equal(np.asarray(leaf), 0.0)


def test_l1_clip():
    tree = {"a": jnp.array([3.0, -4.0]), "b": jnp.array([1.0])}
    clipped, norm = clipping.clip_by_l1_norm(tree, 4.0)
    assert float(norm) == pytest.approx(8.0)
    np.testing.assert_allclose(_flat(clipped), np.array([1.5, -2.0, 0.5]), rtol=1e-6)


def test_per_layer_clip_uses_each_leaf_bound():
    tree = {"a": jnp.array([3.0, 4.0]), "b": jnp.array([0.3, 0.4])}
    clipped, norms = clipping.clip_per_layer(tree, {"a": 1.0, "b": 1.0})
    np.testing.assert_allclose(np.asarray(clipped["a"]), [0.6, 0.8], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(clipped["b"]), [0.3, 0.4], rtol=1e-6)  # below its bound
    assert float(norms["a"]) == pytest.approx(5.0) and float(norms["b"]) == pytest.approx(0.5)
    assert float(clipping.per_layer_bound({"a": 3.0, "b": 4.0})) == pytest.approx(5.0)
    scalar, _ = clipping.clip_per_layer(tree, 0.5)
    np.testing.assert_allclose(np.asarray(scalar["b"]), [0.3, 0.4], rtol=1e-6)


def test_clip_is_jittable_vmappable_and_clip_is_traced():
    traces = []

    @jax.jit
    def f(u, c):
        traces.append(1)
        return jax.vmap(clipping.clip_by_global_norm, in_axes=(0, None))(u, c)

    u = {"w": jnp.arange(12.0).reshape(3, 4)}
    for c in (0.5, 1.0, 7.0):
        clipped, norms = f(u, jnp.float32(c))
        np.testing.assert_allclose(np.linalg.norm(np.asarray(clipped["w"]), axis=1),
                                   np.minimum(np.linalg.norm(np.arange(12.0).reshape(3, 4), axis=1), c),
                                   rtol=1e-6)
    assert len(traces) == 1


# ---------------------------------------------------------------------------
# Huge finite entries (privacy review): the bound must hold for EVERY finite float32
# input. XLA on CPU rewrites ``x / s`` into ``x * (1/s)``; for s >= 2^126 the reciprocal
# is subnormal and flushed to zero, which used to leave such updates unclipped.
#
# Tolerance: the norm is a float32 sum of d terms (relative error <= ~d·u/2 + u with
# u = 2^-24, the float32 unit roundoff) and each output entry takes three more roundings,
# so ‖clip(u)‖ <= C·(1 + (d + 8)·u); for the trees below (d <= 64) that is < 5e-6.

F32_MAX = float(np.finfo(np.float32).max)
U32 = 2.0 ** -24
TINY_NORMAL = float(np.finfo(np.float32).tiny)  # 2^-126; smaller values may be flushed (FTZ/DAZ)


def _np_norm(v, ord):
    return float(np.sum(np.abs(v))) if ord == 1 else float(np.linalg.norm(v))


def _clip_fn(ord):
    return clipping.clip_by_l1_norm if ord == 1 else clipping.clip_by_global_norm


def _check_clipped(u, v, norm, clip, ord):
    """``v`` = clip(``u``) (flat float64 views of float32 data); ``norm`` the reported norm."""
    d = u.size
    tol = (d + 8) * U32
    true = _np_norm(u, ord)
    out = _np_norm(v, ord)
    assert np.all(np.isfinite(v))
    assert out <= clip * (1 + tol), (out, clip)  # the privacy bound
    # Reported norm: the true norm (entries below 2^-126 may count as 0), inf on overflow.
    if true > F32_MAX * (1 + U32):
        assert norm == np.inf
    elif true < F32_MAX * (1 - U32):
        assert abs(norm - true) <= 1e-5 * true + np.sqrt(d) * TINY_NORMAL, (norm, true)
    if true <= clip * (1 - tol):
        return
    # Clipped: the output has norm C (up to rounding) and the input's direction.
    big = np.abs(u) >= TINY_NORMAL
    true_big = _np_norm(np.where(big, u, 0.0), ord)
    if true_big >= clip:
        assert out >= clip * (1 - tol) - np.sqrt(d) * TINY_NORMAL, (out, clip)
    if out > 0:
        cos = (u / np.linalg.norm(u)) @ (v / np.linalg.norm(v))
        assert cos == pytest.approx(1.0, abs=1e-6)
        assert np.all(u * v >= 0)  # no sign flips
    # If the direction had been lost, the output would be zero: forbid it when it is representable.
    if clip >= 1e-30:
        assert out > 0


HUGE_CASES = {
    # the review's examples
    "review_mixed_leaves": ({"a": [1e38, -1.0, 2.0], "b": [-3.3e37]}, 1.5),
    "single_1e38": ({"a": [1e38]}, 1.5),
    "1e38_in_a_leaf": ({"a": [1e38, 1.0]}, 1.5),  # used to pass unclipped, norm 0
    "ten_1e38": ({"a": [1e38] * 10}, 1.5),  # L2 3.2e38 fits float32, L1 1e39 overflows
    "subnormal_factor": ({"a": [1e38]}, 0.1),  # C/‖u‖ = 1e-39 is subnormal
    "at_2_126": ({"a": [2.0 ** 126, -3.0], "b": [2.0 ** 125]}, 1.0),
    "f32_max_single": ({"a": [F32_MAX]}, 1.0),
    "f32_max_overflowing_norm": ({"a": [F32_MAX, -F32_MAX, 3.4e38], "b": [F32_MAX]}, 2.0),
    "mixed_with_tiny": ({"a": [1e38, 1e-30, -1e-30], "b": [2.5e38, -1e-30], "c": [1e-30]}, 1e-30),
    "big_clip": ({"a": [3e38, -1e35], "b": [1e-30] * 5}, 1e30),
    "many_leaves": ({f"w{i}": [(-1.0) ** i * 10.0 ** (38 - i), 1e-30 * i, 7.0] for i in range(20)}, 0.5),
}


def _as_tree(spec):
    return {k: jnp.asarray(np.asarray(v, np.float32)) for k, v in spec.items()}


@pytest.mark.parametrize("ord", [2, 1], ids=["l2", "l1"])
@pytest.mark.parametrize("case", sorted(HUGE_CASES))
def test_huge_finite_entries_are_clipped(case, ord):
    spec, clip = HUGE_CASES[case]
    tree = _as_tree(spec)
    clipped, norm = _clip_fn(ord)(tree, clip)
    assert jax.tree_util.tree_structure(clipped) == jax.tree_util.tree_structure(tree)
    _check_clipped(_flat(tree), _flat(clipped), float(norm), clip, ord)


@pytest.mark.parametrize("ord", [2, 1], ids=["l2", "l1"])
@pytest.mark.parametrize("case", sorted(HUGE_CASES))
def test_huge_finite_entries_are_clipped_under_jit_vmap(case, ord):
    spec, clip = HUGE_CASES[case]
    tree = _as_tree(spec)
    # A cohort of 3: the case, its negation and a harmless small update.
    batch = jax.tree_util.tree_map(lambda x: jnp.stack([x, -x, jnp.full_like(x, 1e-3)]), tree)
    f = jax.jit(jax.vmap(_clip_fn(ord), in_axes=(0, None)))
    clipped, norms = f(batch, jnp.float32(clip))
    for i in range(3):
        u = _flat(jax.tree_util.tree_map(lambda x: x[i], batch))
        v = _flat(jax.tree_util.tree_map(lambda x: x[i], clipped))
        _check_clipped(u, v, float(norms[i]), clip, ord)


def test_review_example_exact_values():
    tree = _as_tree(HUGE_CASES["review_mixed_leaves"][0])
    clipped, norm = clipping.clip_by_global_norm(tree, 1.5)
    true = np.sqrt(1e76 + 3.3e37 ** 2)
    np.testing.assert_allclose(float(norm), true, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(clipped["a"])[0], 1.5 * 1e38 / true, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(clipped["b"]), [-1.5 * 3.3e37 / true], rtol=1e-6)
    assert float(clipping.global_norm(tree)) == pytest.approx(true, rel=1e-6)


def _random_entries(data, n):
    exps = data.draw(st.lists(st.integers(-40, 38), min_size=n, max_size=n))
    mants = data.draw(st.lists(st.floats(1.0, 3.4), min_size=n, max_size=n))
    signs = data.draw(st.lists(st.sampled_from([-1.0, 1.0]), min_size=n, max_size=n))
    zeros = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    vals = [0.0 if z else s * m * 10.0 ** e for e, m, s, z in zip(exps, mants, signs, zeros)]
    return np.asarray(vals, np.float64).astype(np.float32)  # 3.4e38 < float32 max


clip_exp_st = st.floats(-30.0, 30.0)


@pytest.mark.slow   # 5-17 CPU s of compilation; the fast tier covers its code elsewhere
@settings(max_examples=examples(150), deadline=None)
@given(data=st.data(), shapes=shapes_st, clip_exp=clip_exp_st, ord=st.sampled_from([1, 2]))
def test_bound_holds_for_every_finite_float32_input(data, shapes, clip_exp, ord):
    """Entries ±m·10^e with e in [-40, 38] (subnormals to float32 max), clip 10^[-30, 30]."""
    leaves = {}
    for i, s in enumerate(shapes):
        n = int(np.prod(s, dtype=np.int64))
        leaves[f"w{i}"] = jnp.asarray(_random_entries(data, n).reshape(s))
    clip = float(np.float32(10.0 ** clip_exp))
    clipped, norm = _clip_fn(ord)(leaves, clip)
    _check_clipped(_flat(leaves), _flat(clipped), float(norm), clip, ord)


@settings(max_examples=examples(40), deadline=None)
@given(data=st.data(), clip_exp=clip_exp_st, ord=st.sampled_from([1, 2]))
def test_bound_holds_under_jit_vmap_property(data, clip_exp, ord):
    batch = {"a": jnp.asarray(_random_entries(data, 4 * 6).reshape(4, 6)),
             "b": jnp.asarray(_random_entries(data, 4 * 3).reshape(4, 3))}
    clip = float(np.float32(10.0 ** clip_exp))
    clipped, norms = _JIT_VMAP[ord](batch, jnp.float32(clip))
    for i in range(4):
        u = _flat(jax.tree_util.tree_map(lambda x: x[i], batch))
        v = _flat(jax.tree_util.tree_map(lambda x: x[i], clipped))
        _check_clipped(u, v, float(norms[i]), clip, ord)


_JIT_VMAP = {o: jax.jit(jax.vmap(_clip_fn(o), in_axes=(0, None))) for o in (1, 2)}


def _bits(tree):
    return [np.asarray(x).view(np.uint32) for x in jax.tree_util.tree_leaves(tree)]


@pytest.mark.parametrize("ord", [2, 1], ids=["l2", "l1"])
@pytest.mark.parametrize("spec,clip", [
    ({"a": [1e38, -1e-30, 0.0, -0.0], "b": [2e37]}, 2e38),
    ({"a": [F32_MAX, 1.0]}, np.inf),
    ({"a": [1e-30, -3e-38, 1e-40], "b": [0.0]}, 1e-29),
    ({"a": [0.3, -0.4], "b": [1e-30]}, 1.0),
    ({"a": [0.0, -0.0]}, 1e-30),
])
def test_inside_bound_is_returned_bit_identical(spec, clip, ord):
    tree = _as_tree(spec)
    clipped, _ = _clip_fn(ord)(tree, clip)
    for a, b in zip(_bits(tree), _bits(clipped)):
        np.testing.assert_array_equal(a, b)
    batch = jax.tree_util.tree_map(lambda x: x[None], tree)
    clipped, _ = _JIT_VMAP[ord](batch, jnp.float32(clip))
    for a, b in zip(_bits(batch), _bits(clipped)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("ord", [2, 1], ids=["l2", "l1"])
def test_non_finite_with_huge_entries_keeps_documented_behaviour(ord):
    f = _clip_fn(ord)
    clipped, norm = f({"a": jnp.array([1e38, np.nan, -np.inf]), "b": jnp.ones(2)}, 1.0)
    assert np.isnan(float(norm))
    assert all(not np.any(np.asarray(x)) for x in jax.tree_util.tree_leaves(clipped))
    clipped, norm = f({"a": jnp.array([3e38, -np.inf]), "b": jnp.ones(2)}, 1.0)
    assert float(norm) == np.inf
    assert all(not np.any(np.asarray(x)) for x in jax.tree_util.tree_leaves(clipped))


def test_per_layer_bound_does_not_overflow():
    assert float(clipping.per_layer_bound({"a": 3e20, "b": 4e20})) == pytest.approx(5e20, rel=1e-6)
    clipped, norms = clipping.clip_per_layer({"a": jnp.array([1e38, 1.0]), "b": jnp.array([3e38])}, 0.5)
    assert float(jnp.linalg.norm(clipped["a"])) <= 0.5 * (1 + 1e-6)
    assert float(jnp.linalg.norm(clipped["b"])) == pytest.approx(0.5, rel=1e-6)
    assert float(norms["a"]) == pytest.approx(1e38, rel=1e-6)


@pytest.mark.parametrize("ord", [2, 1], ids=["l2", "l1"])
@pytest.mark.parametrize("clip", [0.0, -1.0])
def test_non_positive_clip_never_produces_nan(clip, ord):
    """Not validated here (documented): C = 0 zeroes the update, C < 0 flips it; no NaN."""
    zeros, norm = _clip_fn(ord)({"a": jnp.zeros(3)}, clip)
    assert float(norm) == 0.0 and np.all(np.isfinite(np.asarray(zeros["a"])))
    out, _ = _clip_fn(ord)({"a": jnp.array([3.0, 4.0])}, clip)
    assert np.all(np.isfinite(np.asarray(out["a"])))


@pytest.mark.parametrize("ord", [1, 2])
def test_clip_checked_flags_finiteness_and_clips_as_the_clip_functions(ord):
    # The flag comes off the clip's own max reduction; it must equal all(isfinite(u)) at the
    # sizes where XLA's CPU max drops NaN (>= 4,096 entries), and the clip must be the
    # public function's, bit for bit.
    from ldpsim._src.privacy.randomizers.clipping import clip_checked

    public = clipping.clip_by_global_norm if ord == 2 else clipping.clip_by_l1_norm
    rng = np.random.default_rng(7)
    base = {"a": rng.normal(size=(400, 120)).astype(np.float32),
            "b": rng.normal(size=(10,)).astype(np.float32)}
    cases = {"finite": base, "small": jax.tree_util.tree_map(lambda x: x * 1e-3, base)}
    for name, value in (("nan", np.nan), ("inf", np.inf), ("-inf", -np.inf)):
        for leaf in ("a", "b"):
            t = {k: v.copy() for k, v in base.items()}
            t[leaf].flat[3] = value
            cases[f"{name}@{leaf}"] = t
    cases["all-nan"] = jax.tree_util.tree_map(lambda x: np.full_like(x, np.nan), base)
    f = jax.jit(lambda t: clip_checked(t, 1.5, ord))
    for name, tree in cases.items():
        clipped, norm, finite = f(tree)
        want_finite = all(bool(np.isfinite(x).all()) for x in jax.tree_util.tree_leaves(tree))
        assert bool(finite) == want_finite, name
        ref_clipped, ref_norm = jax.jit(lambda t: public(t, 1.5))(tree)
        np.testing.assert_array_equal(np.asarray(norm), np.asarray(ref_norm), err_msg=name)
        for a, b in zip(jax.tree_util.tree_leaves(clipped), jax.tree_util.tree_leaves(ref_clipped)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=name)
    clipped, norm, finite = clip_checked({}, 1.0, ord)
    assert clipped == {} and float(norm) == 0.0 and bool(finite)
