"""The stages a round is composed of, each a small tuple of pure functions (optax-style).

A privacy mode (:class:`~ldpsim.modes.RoundMechanism`) is the composition of four stages,
built with :func:`chain` the way ``optax.chain`` composes gradient transformations:

:class:`ClientStage`
    What each client does with its trained update: its clip bound and noise scale
    (``client_scales``), the randomizer's params (``params``), the release, decoded
    (``release``: clip, privatize, and the server's estimate of the client's clipped update,
    or for an integer aggregator the client's integer report), the exact per-coordinate
    variance and mean of the decoded release (``noise_var``, ``mean``) and the dropout coin
    (``keep``) with the realised share of the target noise it leaves (``noise_fraction``).
:class:`Aggregator`
    How the releases are summed: :func:`float_sum` (the weighted sum of the decoded releases,
    FedAvg or one vote per client, in float32), or an integer sum modulo ``2^b`` decoded once
    at the server (:func:`modular_sum`, secure aggregation). Either way the kernel also keeps
    the float sum ``Σ w·clipped`` for its metrics (noise = decoded − clean).
:class:`ServerNoise`
    What the server adds to the sum (DP-FedAvg's one Gaussian draw; the aggregate-noise
    shortcut), or nothing.
:class:`ClipPolicy`
    How the clip bound is initialised and moves: :func:`fixed_clip`, MindSpore's per-client
    bounds, the quantile-adaptive rule (``init``, ``round_clip``, ``update``).

The kernel (:func:`ldpsim.fl.make_round_fn`) calls these functions and never branches on a
mode's name. Every stage is a NamedTuple: equal stages compare equal, so a composition built
from cached stages keys the engine's compile cache.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from ldpsim._src.fl import server as server_lib

PyTree = Any

__all__ = ["Aggregator", "AggregatorDiagnostics", "ClientStage", "ClipPolicy", "ServerNoise",
           "fixed_clip", "float_sum", "modular_sum"]


class ClientStage(NamedTuple):
    """One client's work after local training (every function vmapped over the clients).

    Attributes:
        randomizer: the name of the local randomizer (``"none"``: clipping only).
        noise_std_factor: additive randomizers: per-coordinate std of the noise per unit of
            the client's scale (0 for the others, which give ``noise_var``).
        client_scales: ``(clip_state, ids, round_clip, phyper) -> (clip[k], scale[k])``.
        params: ``(clip, scale, phyper, round_key) -> params`` of one client's randomizer
            (``round_key``: the server's key of the round, for randomness every client of
            the round shares, e.g. a public rotation).
        release: ``(key, update, params) -> release``: a
            :class:`~ldpsim.mechanism.Privatized` whose ``noisy`` is the server's decoded
            estimate (float aggregators), or the integer report (:func:`modular_sum`).
        noise_var: ``(params, update) -> scalar`` exact mean per-coordinate variance of the
            decoded release, or None: ``(noise_std_factor·scale)²``.
        mean: ``(params, update) -> E[decoded release]`` for a biased decoder, or None.
        keep: ``(client_keys[k], phyper) -> bool[k]`` the dropout coin, or None (keep all).
        noise_fraction: ``survivors -> realised / target noise variance``, or None (1).
    """

    randomizer: str
    noise_std_factor: float
    client_scales: Callable[..., tuple[jax.Array, jax.Array]]
    params: Callable[..., PyTree]
    release: Callable[..., Any]
    noise_var: Callable[[PyTree, PyTree], jax.Array] | None = None
    mean: Callable[[PyTree, PyTree], PyTree] | None = None
    keep: Callable[[jax.Array, PyTree], jax.Array] | None = None
    noise_fraction: Callable[[jax.Array], jax.Array] | None = None


class AggregatorDiagnostics(NamedTuple):
    """What an aggregator reports beyond the sum (simulation diagnostics, never released).

    Attributes:
        wrapped_fraction: fraction of the coordinates of the round's integer sum that left
            the ``b``-bit range and decoded wrongly (NaN for a float sum).
        rounding_failures: clients whose every randomized rounding failed the norm check
            and who therefore sent the zero vector (0 for a float sum).
    """

    wrapped_fraction: jax.Array
    rounding_failures: jax.Array

    @classmethod
    def none(cls) -> "AggregatorDiagnostics":
        return cls(jnp.full((), jnp.nan, jnp.float32), jnp.zeros((), jnp.int32))


class Aggregator(NamedTuple):
    """How the clients' releases become the noisy sum (pure functions, summed by chunk).

    Attributes:
        name: ``"float"`` or ``"modular"`` (for reports; the kernel never reads it).
        weighted: FedAvg weights (the engine's ``weighting``) or one vote per client.
        fixed_denominator: divide the sum by this ``m`` (DP-FedAvg's f̃_f), else by Σw.
        zeros: ``params -> (noise_zero, payload_zero)``: the additive identity of the
            aggregator's carry (``noise_zero`` is model-shaped for a float sum, ``()`` when
            the noise is known only after decoding).
        chunk: ``(w[k], include[k], releases) -> (noise_part, payload_part)``: one chunk's
            contribution (a sum: chunks and devices are added with ``+``, which for
            ``uint32`` payloads is exact modulo ``2^32``).
        finalize: ``(noise_sum, payload, clean_sum, round_key) -> (noise_sum,
            AggregatorDiagnostics)``: the server's decoding; ``noise_sum`` is then the
            decoded weighted sum minus ``clean_sum``.
    """

    name: str
    weighted: bool
    fixed_denominator: float | None
    zeros: Callable[[PyTree], tuple[PyTree, PyTree]]
    chunk: Callable[..., tuple[PyTree, PyTree]]
    finalize: Callable[..., tuple[PyTree, AggregatorDiagnostics]]


class ServerNoise(NamedTuple):
    """Noise the server adds to the sum.

    Attributes:
        add: ``(server_key, clean_sum, noise_var_sum, round_clip, phyper) -> (noise_sum,
            noise_var_sum)``: the noise on the sum and its per-coordinate variance.
    """

    add: Callable[..., tuple[PyTree, jax.Array]]


class ClipPolicy(NamedTuple):
    """How the clip bound starts and moves.

    Attributes:
        init: ``(num_clients, clip) -> state`` (host side, once per run).
        round_clip: ``(state, clip, phyper) -> C`` of the round.
        update: ``(state, server_key, params, new_params, ids, mask, unclipped_bits,
            phyper) -> (state, next_clip, unclipped_fraction)``, or None (fixed).
        per_client: clients have their own bounds (the reported bound is their mean).
    """

    init: Callable[[int, float], PyTree]
    round_clip: Callable[[PyTree, jax.Array, PyTree], jax.Array]
    update: Callable[..., tuple[PyTree, jax.Array, jax.Array]] | None = None
    per_client: bool = False


# ----------------------------------------------------------------------------- clip policies


def _no_state(num_clients: int, clip: float) -> tuple:
    return ()


def _fixed_round_clip(state: PyTree, clip: jax.Array, phyper: PyTree) -> jax.Array:
    return clip


#: The run's clip bound, every round (no state).
FIXED_CLIP = ClipPolicy(init=_no_state, round_clip=_fixed_round_clip)


def fixed_clip() -> ClipPolicy:
    """The run's clip bound ``hyper.clip`` every round (no state)."""
    return FIXED_CLIP


# ----------------------------------------------------------------------------- float sum


def _float_zeros(params: PyTree) -> tuple[PyTree, tuple]:
    return jax.tree_util.tree_map(lambda p: jnp.zeros(jnp.shape(p), jnp.float32), params), ()


def _float_chunk(w: jax.Array, include: jax.Array, releases: Any) -> tuple[PyTree, tuple]:
    return server_lib.weighted_sum(w, releases.noise), ()


def _float_finalize(noise_sum: PyTree, payload: tuple, clean_sum: PyTree, round_key: jax.Array
                    ) -> tuple[PyTree, AggregatorDiagnostics]:
    return noise_sum, AggregatorDiagnostics.none()


_FLOAT_SUMS: dict = {}


def float_sum(weighted: bool = True, fixed_denominator: float | None = None) -> Aggregator:
    """The float32 sum ``Σ w_k·decoded_k`` (decoded = clipped + noise, accumulated as the two
    sums): FedAvg weights when ``weighted``, else one vote per client; divided by Σw or by
    ``fixed_denominator``."""
    key = (bool(weighted), None if fixed_denominator is None else float(fixed_denominator))
    if key not in _FLOAT_SUMS:
        _FLOAT_SUMS[key] = Aggregator("float", key[0], key[1], _float_zeros, _float_chunk,
                                      _float_finalize)
    return _FLOAT_SUMS[key]


# ----------------------------------------------------------------------------- integer sum


class ModularPayload(NamedTuple):
    """The integer aggregator's carry: the reports' sum modulo ``2^32`` (``uint32[D]``; what
    secure aggregation computes, reduced to ``b`` bits at the end), and for the diagnostics
    only the exact integer sum as float32 (never released) and the failed roundings."""

    total: jax.Array
    exact: jax.Array
    failures: jax.Array


def modular_sum(bits: int, padded_dim: int, decode: Callable[[jax.Array, jax.Array], PyTree],
                fixed_denominator: float) -> Aggregator:
    """Secure aggregation's sum: the survivors' integer reports (``int32[D]`` each, already
    wrapped to ``bits`` bits) summed modulo ``2^bits``, one vote per client, divided by the
    fixed ``fixed_denominator`` (``m``), decoded once at the server.

    ``uint32`` addition wraps modulo ``2³²`` (XLA), so the per-chunk sums, the scan's carry
    and the cross-device ``psum`` are exact modulo ``2³²``, hence modulo ``2^bits`` after the
    final mask, whatever the chunking and the device count.

    Args:
        bits: ``b``, ``1 ≤ b ≤ 32``.
        padded_dim: ``D``, the length of a report.
        decode: ``(round_key, signed_sum int32[D], like) -> float32 pytree shaped like
            ``like`` (the model)``: the server's
            decoding (unscale, inverse rotation, drop the padding).
        fixed_denominator: ``m``.

    The release each client returns (``ClientStage.release``) must carry ``noisy``: its
    report, ``exact``: its report before the wrap as float32 (diagnostic), and ``ok``: the
    rounding passed its norm check.
    """
    from ldpsim._src.privacy.discrete import modular

    bits = int(bits)
    if not 1 <= bits <= 32:
        raise ValueError(f"bits must be in [1, 32], got {bits}")
    mask = jnp.uint32(0xFFFFFFFF if bits == 32 else (1 << bits) - 1)

    def zeros(params):
        return (), ModularPayload(jnp.zeros((padded_dim,), jnp.uint32),
                                  jnp.zeros((padded_dim,), jnp.float32),
                                  jnp.zeros((), jnp.int32))

    def chunk(w, include, releases):
        u = jax.lax.bitcast_convert_type(releases.noisy, jnp.uint32)
        u = jnp.where(include[:, None], u, jnp.uint32(0))
        total = jnp.sum(u, axis=0, dtype=jnp.uint32)
        exact = jnp.sum(jnp.where(include[:, None], releases.exact, 0.0), axis=0)
        failures = jnp.sum(include & ~releases.ok, dtype=jnp.int32)
        return (), ModularPayload(total, exact, failures)

    def finalize(noise_sum, payload, clean_sum, round_key):
        residue = payload.total & mask
        signed = modular.wrap(jax.lax.bitcast_convert_type(residue, jnp.int32), bits)
        decoded = decode(round_key, signed, clean_sum)
        noise = jax.tree_util.tree_map(jnp.subtract, decoded, clean_sum)
        return noise, AggregatorDiagnostics(modular.wrapped_fraction(payload.exact, bits),
                                            payload.failures)

    return Aggregator("modular", False, float(fixed_denominator), zeros, chunk, finalize)
