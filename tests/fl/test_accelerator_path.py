"""The accelerator path (cohort in vmapped chunks) without an accelerator.

On GPU/TPU the engine scans the cohort in chunks of many clients whose local training is one
vmapped program. These tests pin, on CPU, what that path must be wherever it runs:

* the same round whatever the chunk (1, 64 or 256 clients): every client's randomness
  comes from its id, so only the float summation order changes;
* one program whose matrix products are batched over the clients of a chunk: the cohort
  loop runs m / chunk iterations (never one per client) and the model's dot products carry
  the chunk as a batch (or row) dimension.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.extend.core import jaxprs_in_params
import numpy as np
import pytest

from ldpsim._src.fl.round import RoundHyper, init_state, make_round_fn
from ldpsim.data import PaddedPopulation
from ldpsim.models import get_model

M, FEATURES, CLASSES, EXAMPLES, STEPS, BATCH = 256, 12, 4, 6, 2, 3


def _problem():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(M + 40, EXAMPLES, FEATURES)).astype(np.float32)
    y = rng.integers(0, CLASSES, size=(M + 40, EXAMPLES))
    counts = rng.integers(1, EXAMPLES + 1, size=M + 40)
    pop = PaddedPopulation.from_arrays(x, y, counts, num_classes=CLASSES, compact=False)
    model = get_model("mlp", input_shape=(FEATURES,), num_classes=CLASSES, hidden=(16,))
    params = model.init(jax.random.key(0), jnp.zeros((1, FEATURES)))
    ids = jnp.asarray(np.sort(rng.choice(M + 40, size=M, replace=False)).astype(np.int32))
    hyper = RoundHyper.create(sigma=0.2, clip=0.5, client_lr=0.3, server_lr=1.0)
    return model, params, pop, ids, jnp.ones(M, bool), hyper


def _round(model, chunk):
    return make_round_fn(apply_fn=model.apply, local_steps=STEPS, batch_size=BATCH,
                         chunk_size=chunk, chunks_in_flight=1, mechanism="gaussian")


def _scan_lengths(jaxpr) -> list[int]:
    """Lengths of every scan in a jaxpr, nested ones included."""
    out = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "scan":
            out.append(int(eqn.params["length"]))
        for sub in jaxprs_in_params(eqn.params):
            out += _scan_lengths(sub)
    return out


def _dot_shapes(jaxpr) -> list[tuple[tuple[int, ...], tuple[int, ...], tuple]]:
    """(lhs shape, rhs shape, lhs batch dims) of every dot product, nested ones included."""
    out = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            (_, _), (lb, _) = eqn.params["dimension_numbers"]
            out.append((tuple(eqn.invars[0].aval.shape), tuple(eqn.invars[1].aval.shape),
                        tuple(lb)))
        for sub in jaxprs_in_params(eqn.params):
            out += _dot_shapes(sub)
    return out


def _cohort_scan(jaxpr, length):
    """The outermost scan of ``length`` iterations (the loop over chunks)."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "scan" and int(eqn.params["length"]) == length:
            return eqn.params["jaxpr"].jaxpr
        for sub in jaxprs_in_params(eqn.params):
            found = _cohort_scan(sub, length)
            if found is not None:
                return found
    return None


@pytest.mark.slow   # 5-17 CPU s of compilation; the fast tier covers its code elsewhere
def test_chunks_of_1_64_and_256_give_the_same_round():
    model, params, pop, ids, mask, hyper = _problem()
    state = init_state(params, jax.random.key(5))
    runs = {c: jax.jit(_round(model, c))(state, pop, jnp.int32(3), ids, mask, hyper)
            for c in (1, 64, 256)}
    ref_state, ref_m = runs[1]
    assert float(ref_m.noise_norm) > 0 and int(ref_m.clients) == M
    for c in (64, 256):
        st, m = runs[c]
        for a, b in zip(jax.tree_util.tree_leaves(st.params),
                        jax.tree_util.tree_leaves(ref_state.params)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
        for a, b in zip(jax.tree_util.tree_leaves(m), jax.tree_util.tree_leaves(ref_m)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("chunk", [64, 256])
def test_the_program_batches_the_clients_of_a_chunk(chunk):
    model, params, pop, ids, mask, hyper = _problem()
    fn = _round(model, chunk)
    jaxpr = jax.make_jaxpr(fn)(init_state(params, jax.random.key(5)), pop, jnp.int32(3), ids,
                               mask, hyper).jaxpr
    lengths = _scan_lengths(jaxpr)
    # The cohort loop runs once per chunk; the only other loop is over the local steps
    # after the first (step 1 is peeled out of it: its weights are the chunk's shared
    # global weights).
    assert M // chunk in lengths
    assert all(n in (M // chunk, STEPS - 1) for n in lengths), lengths
    assert M not in lengths or chunk == 1
    # Inside the loop over chunks, every matrix product carries the chunk: as a batch
    # dimension (per-client weights) or folded into the rows (weights shared by the
    # chunk), never one client at a time.
    body = _cohort_scan(jaxpr, M // chunk)
    assert body is not None
    dots = _dot_shapes(body)
    assert dots
    per_client = [d for d in dots if not (d[0] and d[0][0] % chunk == 0)]
    assert not per_client, per_client
    assert any(lb and d[0][lb[0]] == chunk for *d, lb in dots), "no product batched over clients"
    # Step 1 (peeled out of the step loop) multiplies the whole chunk's rows by the shared
    # global weights: an unbatched 2-D weight against the chunk's [chunk, batch, features].
    assert any(not lb and d[0][:2] == (chunk, BATCH) and len(d[1]) == 2 for *d, lb in dots), \
        "step 1 is not one product over the chunk's rows"


def test_the_compiled_program_has_no_per_client_loop():
    """The compiled (XLA) program: the HLO's loops are the chunk loop and the local steps,
    and a dot product has the chunk's width as a dimension."""
    chunk = 64
    model, params, pop, ids, mask, hyper = _problem()
    lowered = jax.jit(_round(model, chunk)).lower(init_state(params, jax.random.key(5)), pop,
                                                  jnp.int32(3), ids, mask, hyper)
    text = lowered.as_text()
    dots = [line for line in text.splitlines() if "dot_general" in line]
    assert any(f"tensor<{chunk}x" in line for line in dots), dots[:5]
