"""One round of the distributed discrete mechanisms: the client's encoding, the server's decoding.

``encode`` is what one client runs on its (already clipped, L2 ≤ C) flat update; vmap it over
clients with per-client keys (``fold_in(round_key, client_id)``) and one shared rotation key. The
server sums the wrapped reports modulo ``2^b`` (:func:`.modular.modular_sum`) and calls
``decode``. The host-side parameters come from :class:`.accounting.DiscreteMechanism`; the
integer noise is drawn by the table sampler (:func:`.samplers.table_sample`, tables of
:mod:`.table`) for both mechanisms.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ldpsim._src.privacy.discrete.accounting import DiscreteMechanism
from ldpsim._src.privacy.hadamard import rotate
from ldpsim._src.privacy.discrete.modular import decode as _decode
from ldpsim._src.privacy.discrete.modular import wrap
from ldpsim._src.privacy.discrete.rounding import conditional_round
from ldpsim._src.privacy.discrete.samplers import discrete_gaussian, skellam, table_sample
from ldpsim._src.privacy.discrete.spec import discrete_gaussian_spec
from ldpsim._src.privacy.discrete.table import noise_table

__all__ = ["encode", "decode"]


def encode(rotation_key: jax.Array, client_key: jax.Array, x: jax.Array,
           mech: DiscreteMechanism, *, max_tries: int = 4, noise: bool = True,
           sampler: str = "table"):
    """Rotate, scale by ``1/γ``, round conditionally, add integer noise, wrap to ``b`` bits.

    ``x``: the client's clipped update, flat, padded to ``mech.padded_dim``. Returns
    ``(report int32, integer vector before noise, rounding ok)``; the second is a diagnostic.
    ``sampler``: ``"table"`` (the default, what the accountant covers) or ``"reference"`` (the
    earlier samplers, for benchmarks and tests only: the Canonne–Kamath–Steinke rejection
    sampler at its σ̂ ≥ σ, and the float32 Poisson differences for Skellam, which no proven
    bound covers).
    """
    if sampler not in ("table", "reference"):
        raise ValueError(f"sampler must be 'table' or 'reference', got {sampler!r}")
    x = jnp.asarray(x, jnp.float32)
    if x.shape[-1] != mech.padded_dim:
        raise ValueError(f"x has length {x.shape[-1]}, expected padded_dim = {mech.padded_dim}")
    k_round, k_noise = jax.random.split(client_key)
    y = rotate(rotation_key, x) * jnp.float32(1.0 / mech.granularity)
    v, ok = conditional_round(k_round, y, mech.norm_bound, max_tries=max_tries)
    if noise:
        # the table sampler for both laws (samplers.table_sample): exact to the table's
        # law, within noise_table(...).plan.tv_bound of N_Z(0, σ²) / Sk(μ) per coordinate,
        # which the accountant charges (accounting.discrete_epsilon)
        shape = (mech.padded_dim,)
        if sampler == "table":
            z = table_sample(k_noise, noise_table(mech.mechanism, float(mech.noise)), shape)
        elif mech.mechanism == "ddg":
            z = discrete_gaussian(k_noise, discrete_gaussian_spec(mech.noise), shape)
        else:
            z = skellam(k_noise, mech.noise, shape)
        out = v + z
    else:
        out = v
    return wrap(out, mech.bits), v, ok


def decode(rotation_key: jax.Array, total: jax.Array, mech: DiscreteMechanism) -> jax.Array:
    """The decoded sum of the clients' updates (first ``mech.dim`` coordinates, float32)."""
    return _decode(rotation_key, total, mech.granularity, mech.dim)
