"""A diverged client at the sizes users run: every randomizer, real model trees, jit(vmap).

A client whose update is NaN or inf (its local training diverged) must release exactly what
the zero update releases with the same key: the non-finite update is replaced by the zero
substitute before any noise or sampling, so its release has the law of a data-independent
input and nothing in it tells the client apart (docs/privacy_sharp_edges.md, "Diverged
clients"). A huge finite update (float32 max) is clipped to norm C like any other.

Why sizes matter: XLA on CPU hands a float reduction whose input has ≥ 4,096 elements to
YNNPACK, whose max does not propagate NaN (``jnp.max`` of 4,096 NaNs is ``-inf``), so a
finiteness test read off a float max passed an all-NaN update of LeNet-5's size and its NaN
reached the release; one update of ≤ 4,095 entries behaved, but under ``vmap`` the count is
over the cohort, so 8 clients of 4,095 did not (see ``ldpsim._src.privacy.randomizers.clipping._safe_norm``).

Sizes: LeNet-5 (61,706 parameters in 10 leaves), the project's LSTM ``lstm_fedavg`` (820,522
in its 9 real leaves) and 10⁶. Each cohort is one ``jit(vmap(...))`` over 8 clients that share
ONE key, so "same law as the zero update" is checked as "bit-identical to the zero client's
release". The fast tier runs the issue's reproduction eagerly, the clip on both sides of the
threshold and the additive randomizers at LeNet-5's size in two leaves. The slow tier (one
compilation each, 4-35 CPU s) runs every randomizer at LeNet-5's size in its 10 real leaves,
and at 820,522 and 10⁶ every distinct finiteness test once: the L2 clip (``gaussian``,
``none``), the L1 clip (``laplace``), the report randomizers' shared clip-and-flatten
(``randomizer.clip_flat``, run through ``privunit2``; ``duchi`` and ``privunitg`` use the same
one) and SignDS's own flattening (it clips nothing). Compilation, not the 8·10⁶ draws, is most
of a case's cost, so the large sizes run their randomizers in one program.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ldpsim
from ldpsim._src.fl.privatize import privatize as fl_privatize
from ldpsim._src.privacy.randomizers import clipping, mechanism

F32_MAX = float(np.finfo(np.float32).max)
CLIP = 1.0
EPS = 4.0

#: Leaf shapes of the project's models (ldpsim._src.models; checked against the models in
#: test_leaf_shapes_are_the_models).
LEAF_SHAPES = {
    "lenet5": [(6,), (5, 5, 1, 6), (16,), (5, 5, 6, 16), (120,), (400, 120), (84,), (120, 84),
               (10,), (84, 10)],
    "lstm_fedavg": [(90, 8), (1024,), (256, 1024), (8, 1024), (1024,), (256, 1024),
                    (256, 1024), (90,), (256, 90)],
    "million": [(1000, 999), (1000,)],
    # LeNet-5's size in two leaves: the fast tier's (a 10-leaf program compiles ~4x slower)
    "lenet5_2leaves": [(61_696,), (10,)],
}
SIZES = {"lenet5": 61_706, "lstm_fedavg": 820_522, "million": 10**6,
         "lenet5_2leaves": 61_706}

#: The cohort: client 0 is the zero update (the reference), 1 an ordinary finite update.
CASES = ("zero", "finite", "all_nan", "all_inf", "mixed", "one_nan", "huge", "huge_one_nan")
NONFINITE = ("all_nan", "all_inf", "mixed", "one_nan", "huge_one_nan")


def _flat_case(case: str, d: int) -> np.ndarray:
    i = np.arange(d)
    if case == "zero":
        return np.zeros(d, np.float32)
    if case == "finite":
        return (0.01 * ((i % 7) - 3)).astype(np.float32)
    if case == "all_nan":
        return np.full(d, np.nan, np.float32)
    if case == "all_inf":   # +inf and -inf
        return np.where(i % 2 == 0, np.inf, -np.inf).astype(np.float32)
    if case == "mixed":     # NaN, +inf, -inf and finite entries
        return np.choose(i % 4, [np.nan, np.inf, -np.inf, 0.5]).astype(np.float32)
    if case == "one_nan":
        return (0.01 * ((i % 7) - 3)).astype(np.float32) * (i != d // 2) + np.where(
            i == d // 2, np.nan, 0).astype(np.float32)
    if case == "huge":      # float32 max, alternating signs: ‖u‖ overflows float32
        return np.where(i % 2 == 0, F32_MAX, -F32_MAX).astype(np.float32)
    if case == "huge_one_nan":
        u = np.where(i % 2 == 0, F32_MAX, -F32_MAX).astype(np.float32)
        u[-1] = np.nan
        return u
    raise ValueError(case)


def _unflatten(flat: np.ndarray, shapes) -> dict:
    out, pos = {}, 0
    for j, s in enumerate(shapes):
        n = math.prod(s)
        out[f"l{j}"] = flat[pos:pos + n].reshape(s)
        pos += n
    assert pos == flat.shape[0]
    return out


@functools.cache
def cohort(size: str) -> dict:
    """The 8 clients' updates in the size's leaf structure, stacked on a leading axis."""
    shapes, d = LEAF_SHAPES[size], SIZES[size]
    trees = [_unflatten(_flat_case(c, d), shapes) for c in CASES]
    return jax.tree_util.tree_map(lambda *xs: jnp.asarray(np.stack(xs)), *trees)


def _params(name: str, d: int):
    kw = {"gaussian": dict(epsilon=EPS, delta=1e-5, clip=CLIP),
          "laplace": dict(epsilon=EPS, clip=CLIP), "none": dict(clip=CLIP),
          "signds": dict(dim=d, epsilon=EPS)}.get(name, dict(epsilon=EPS, dim=d, clip=CLIP))
    return mechanism.make(name, **kw).params


def _run(names: tuple[str, ...], size: str):
    """``{name: (privatize output, decoded release)}`` for the cohort, ONE compilation."""
    d = SIZES[size]
    params = {n: _params(n, d) for n in names}

    @jax.jit
    def go(key, updates, params):
        def one(u):
            return {n: (mechanism.REGISTRY[n].privatize(key, u, params[n]),
                        () if mechanism.REGISTRY[n].additive   # decoding is the identity
                        else mechanism.decoded_release_fn(n)(key, u, params[n])) for n in names}
        return jax.vmap(one)(updates)

    out = go(jax.random.key(7), cohort(size), params)
    return {n: (p, p if d == () else d) for n, (p, d) in out.items()}


def _leaves(tree, c: int) -> list[np.ndarray]:
    return [np.asarray(x[c]) for x in jax.tree_util.tree_leaves(tree)]


def _check(name: str, out, size: str) -> None:
    priv, dec = jax.device_get(out)   # numpy from here on (no per-leaf device dispatch)
    release = priv.noisy if isinstance(priv, mechanism.Privatized) else priv.report
    idx = {c: i for i, c in enumerate(CASES)}
    z = idx["zero"]
    for c, i in idx.items():
        for tree in (release, dec.noisy, dec.clipped, dec.noise):
            assert all(np.isfinite(x).all() for x in _leaves(tree, i)), (name, size, c)
    assert np.asarray(priv.finite).tolist() == [c not in NONFINITE for c in CASES], name
    assert np.asarray(dec.finite).tolist() == [c not in NONFINITE for c in CASES], name
    for c in NONFINITE:
        i = idx[c]
        # Same key: bit-identical to the zero update's release (the report and its decoding).
        for a, b in zip(_leaves(release, i), _leaves(release, z)):
            np.testing.assert_array_equal(a, b, err_msg=f"{name} {size} {c}")
        for a, b in zip(_leaves(dec.noisy, i), _leaves(dec.noisy, z)):
            np.testing.assert_array_equal(a, b, err_msg=f"{name} {size} {c}")
        assert all((x == 0).all() for x in _leaves(dec.clipped, i)), (name, c)
        assert float(priv.release_norm[i]) == 0.0 and not bool(priv.was_clipped[i])
        assert not math.isfinite(float(priv.norm[i]))   # flagged for the diagnostics
    # An ordinary finite update is not mistaken for a diverged one.
    assert any((a != b).any() for a, b in zip(_leaves(dec.clipped, idx["finite"]),
                                               _leaves(dec.clipped, z))), name
    if name == "signds":    # releases an order of the coordinates: nothing is clipped
        return
    # Huge finite: clipped to norm C (L1 for Laplace), direction kept (all |entries| equal).
    h = np.concatenate([x.ravel().astype(np.float64) for x in _leaves(dec.clipped, idx["huge"])])
    norm = np.abs(h).sum() if name == "laplace" else np.sqrt(np.square(h).sum())
    assert norm == pytest.approx(CLIP, rel=1e-5), (name, size)
    assert np.abs(h).min() == pytest.approx(np.abs(h).max(), rel=1e-6), (name, size)
    assert np.array_equal(np.sign(h), np.sign(_flat_case("huge", SIZES[size]))), (name, size)
    assert bool(priv.was_clipped[idx["huge"]]) and bool(priv.finite[idx["huge"]])


ADDITIVE = ("gaussian", "laplace", "none")
REPORT_VECTOR = tuple(n for n in mechanism.VECTOR if n not in ADDITIVE)


def test_registry_is_covered():
    assert set(ADDITIVE) | set(REPORT_VECTOR) | {"rr"} == set(mechanism.REGISTRY)


# ----------------------------------------------------------------------------- fast tier


@pytest.mark.parametrize("n", [4_096, 61_706])
def test_issue_reproduction_eager(n):
    """The issue's line, eagerly, on one all-NaN leaf of n entries: the zero update's release."""
    key = jax.random.key(0)
    nan, zero = {"a": jnp.full((n,), jnp.nan)}, {"a": jnp.zeros((n,))}
    got = ldpsim.gaussian_randomizer(key, nan, clip=1.0, stddev=2.0)
    ref = ldpsim.gaussian_randomizer(key, zero, clip=1.0, stddev=2.0)
    np.testing.assert_array_equal(np.asarray(got.noisy["a"]), np.asarray(ref.noisy["a"]))
    assert np.isfinite(np.asarray(got.noisy["a"])).all() and not bool(got.finite)


def test_public_entry_points_eager_at_lenet5_size():
    """``mechanism.gaussian(...).privatize``, ``fl.privatize`` and ``laplace_randomizer``,
    eagerly, on an all-NaN update of LeNet-5's size: the zero update's release."""
    key, n = jax.random.key(0), 61_706
    nan, zero = {"a": jnp.full((n,), jnp.nan)}, {"a": jnp.zeros((n,))}
    g = mechanism.gaussian(epsilon=EPS, delta=1e-5, clip=1.0)
    np.testing.assert_array_equal(np.asarray(g.privatize(key, nan, g.params).noisy["a"]),
                                  np.asarray(g.privatize(key, zero, g.params).noisy["a"]))
    for mech in ("gaussian", "laplace", "none"):
        a = fl_privatize(key, nan, clip=1.0, scale=2.0, mechanism=mech).noisy["a"]
        b = fl_privatize(key, zero, clip=1.0, scale=2.0, mechanism=mech).noisy["a"]
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    lap = ldpsim.laplace_randomizer(key, nan, clip=1.0, scale=2.0).noisy["a"]
    np.testing.assert_array_equal(
        np.asarray(lap), np.asarray(ldpsim.laplace_randomizer(key, zero, clip=1.0, scale=2.0).noisy["a"]))


@pytest.mark.parametrize("n", [4_095, 4_096, 61_706])
@pytest.mark.parametrize("clip_fn", [clipping.clip_by_global_norm, clipping.clip_by_l1_norm])
def test_clip_flags_every_non_finite_input_at_every_size(n, clip_fn):
    """The clip itself, on both sides of the 4,096 threshold, jit(vmap) over the cases."""
    cases = jnp.asarray(np.stack([_flat_case(c, n) for c in CASES]))
    clipped, norm = jax.jit(jax.vmap(clip_fn, in_axes=(0, None)))(cases, 1.0)
    clipped, norm = np.asarray(clipped), np.asarray(norm)
    for i, c in enumerate(CASES):
        if c in NONFINITE:
            assert (clipped[i] == 0).all(), c
            # the diagnostic norm: NaN when an entry is NaN, inf when only infinities
            assert np.isnan(norm[i]) == (c != "all_inf") and not np.isfinite(norm[i]), c
        else:
            assert np.isfinite(clipped[i]).all(), c
    assert np.isinf(norm[CASES.index("huge")])   # ‖u‖ > float32 max: reported as inf


def test_additive_randomizers_at_lenet5_size():
    out = _run(ADDITIVE, "lenet5_2leaves")
    for n in ADDITIVE:
        _check(n, out[n], "lenet5_2leaves")


def test_rr_non_finite_category():
    """k-RR privatizes an integer category: a float NaN becomes category 0 (XLA converts NaN
    to 0), identical to privatizing 0; ±inf and huge values are out of range, so they are
    clamped into [0, k) and counted (``was_clipped``), as rr.privatize documents for every
    out-of-range value. Every release is a valid category: never a non-finite tell."""
    m = mechanism.make("rr", epsilon=EPS, k=10)
    vals = jnp.asarray([0.0, 9.0, np.nan, np.inf, -np.inf, F32_MAX, -F32_MAX], jnp.float32)
    rep = jax.jit(jax.vmap(lambda v: m.privatize(jax.random.key(3), v, m.params)))(vals)
    y, clamped = np.asarray(rep.report), np.asarray(rep.clipped)
    assert ((0 <= y) & (y < 10)).all()
    assert clamped.tolist() == [0, 9, 0, 9, 0, 9, 0]
    assert y[2] == y[0] and y[4] == y[0] and y[6] == y[0] and y[3] == y[1] and y[5] == y[1]
    assert np.asarray(rep.was_clipped).tolist() == [False, False, False, True, True, True, True]


# ----------------------------------------------------------------------------- slow tier


@pytest.mark.slow
@pytest.mark.parametrize("name", REPORT_VECTOR)
def test_report_randomizers_at_lenet5_size_in_its_leaves(name):
    """Every report randomizer on LeNet-5's update in its 10 real leaves."""
    _check(name, _run((name,), "lenet5")[name], "lenet5")


@pytest.mark.slow
def test_additive_randomizers_at_lenet5_size_in_its_leaves():
    out = _run(ADDITIVE, "lenet5")
    for n in ADDITIVE:
        _check(n, out[n], "lenet5")


#: One randomizer per distinct finiteness test: the L2 and L1 clips (additive), the report
#: randomizers' shared ``randomizer.clip_flat`` (privunit2; duchi and privunitg call the same
#: function, and each runs at LeNet-5's size above) and SignDS's own flattening.
PATHS = ADDITIVE + ("privunit2", "signds")


def test_paths_cover_every_finiteness_test():
    import inspect

    from ldpsim._src.privacy.randomizers import duchi, privunit2, privunitg, projunit, signds

    for mod in (duchi, privunit2, privunitg, projunit):
        assert "rz.clip_flat(update" in inspect.getsource(mod.privatize), mod.__name__
    assert "rz.clip_flat" not in inspect.getsource(signds.privatize)
    assert set(REPORT_VECTOR) == {"duchi", "privunit2", "privunitg", "projunit", "fastprojunit",
                                  "signds"}


@pytest.mark.slow
@pytest.mark.parametrize("size", ["lstm_fedavg", "million"])
def test_every_finiteness_test_at_large_sizes(size):
    out = _run(PATHS, size)   # ONE compilation for the five randomizers
    for n in PATHS:
        _check(n, out[n], size)


@pytest.mark.slow
def test_leaf_shapes_are_the_models():
    from ldpsim._src.models import get_model

    for name, shape, classes, dtype in [("lenet5", (28, 28, 1), 10, None),
                                        ("lstm_fedavg", (80,), 90, jnp.int32)]:
        model = get_model(name, input_shape=shape, num_classes=classes, input_dtype=dtype)
        tree = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1,) + shape))
        leaves = jax.tree_util.tree_leaves(tree)
        assert [tuple(x.shape) for x in leaves] == LEAF_SHAPES[name]
        assert sum(x.size for x in leaves) == SIZES[name]
