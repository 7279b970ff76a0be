"""DP-SGD inside each client: sample-level DP for one client's local training.

:func:`dp_local_update` is :func:`ldpsim.fl.local_update` with every local step
made differentially private as in MindArmour's ``DPModel`` and the
FL+DP article (seed 004, step 3: each participant adds DP noise while training
locally): the step's batch is split into ``M = micro_batches`` chunks, each chunk's
gradient is clipped to L2 norm ``C``, the clipped gradients are summed, Gaussian
noise ``N(0, (z·C)² I)`` is added and the sum is divided by ``M``
(:func:`ldpsim.privacy.dp_aggregate`), then the client optimizer steps.
Batching, masking, padding exactness and step counting are exactly those of
``local_update`` (its module docstring); a chunk with no valid row has gradient 0.

Partial batches follow MindArmour's micro-batch semantics: each chunk's loss is the mean
over its valid rows and the step direction is ``(1/M) Σ_j clip(∇L_j)`` — the mean of the
M chunk means, divided by the fixed M (an empty chunk counts as 0) — not the mean over the
batch's valid rows. The fixed divisor keeps the noise-to-signal ratio independent of the
data. So without noise and clipping this equals ``local_update`` when every step's batch is
full (or for M = 1, where the one chunk mean is the batch mean) and differs slightly on a
client's last, partial batch when M > 1 (MindArmour always feeds full batches).

It composes with the engine's other privacy layers because they act on different
things: the engine's client-level local randomizer (:func:`ldpsim.fl.privatize`)
clips and noises the *update* this function returns, and server-side noise would be
added to the aggregate. Each guarantee holds for its own neighbouring relation.

Formal guarantee (one client, its own dataset of ``n`` rows, clip ``C``, multiplier
``z``): one local step is the Gaussian mechanism on the sum of clipped micro-batch
gradients. Replacing one example changes one chunk's clipped gradient from ``g`` to
``g'``, so the sum moves by at most ``‖g − g'‖ ≤ 2C`` and the batch composition is
unchanged (the shuffle depends on row positions and the key only). Every example is used
at most once per pass over the data, so after ``k`` passes the client's released update is
(ε, δ)-DP for replace-one-example neighbours with ε that of ``k`` Gaussians of multiplier
``z/2`` (exact: one Gaussian of multiplier ``z/(2√k)``, Balle & Wang 2018, Thm. 8); see
:func:`dp_client_epsilon` with ``method="shuffle"`` (each round starts a fresh pass, so
``k`` counts passes per round times rounds). The usual DP-SGD figure assumes Poisson
sampling with ``q = B/n`` (add/remove one example, Abadi et al. 2016,
arXiv:1607.00133), which the shuffled batches do not do: ``method="rdp"`` / ``"pld"``
are a reference figure, not a guarantee of this function. Even there the sensitivity is
``C`` only with per-example clipping (``micro_batches = batch_size``); a micro-batch of
several rows changes from ``g`` to ``g'`` when one of its rows is added or removed, up to
``2C``, so those methods use the multiplier ``z/2`` unless told the clipping is
per-example.

References:
    Abadi et al., "Deep Learning with Differential Privacy", CCS 2016 (arXiv:1607.00133), Alg. 1.
    McMahan et al., "Learning Differentially Private Recurrent Language Models", ICLR 2018
    (arXiv:1710.06963) — the user-level counterpart applied to the update.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable, NamedTuple

import dp_accounting
import jax
import jax.numpy as jnp
import optax

from ldpsim._src._checks import (
    LdpsimError,
    check_choice,
    check_nonnegative,
    check_open_unit,
    check_positive,
    check_positive_int,
)
from ldpsim._src.fl.client import ClientMetrics, local_update, num_local_steps, train_local_steps
from ldpsim._src.privacy.accountants import accounting
from ldpsim._src.fl.dpsgd.aggregate import dp_aggregate

Params = Any

__all__ = ["DP_CLIENT_METHODS", "PLAIN", "ClientDpHyper", "ClientTraining", "dp_client_epsilon",
           "dp_local_update", "dpsgd", "event_epsilon", "make_dp_client_update", "plain"]

DP_CLIENT_METHODS = ("rdp", "pld", "shuffle")
_NOISE_SALT = 0x64707367  # "dpsg": the noise key is fold_in(key, salt) of the training key


def _is_concrete(x: Any) -> bool:
    return not isinstance(x, jax.core.Tracer)


def dp_local_update(params: Params, x: jax.Array, y: jax.Array, count: jax.Array, *,
                    apply_fn: Callable[[Params, jax.Array], jax.Array],
                    optimizer: optax.GradientTransformation, batch_size: int, key: jax.Array,
                    local_steps: int | None = None, local_epochs: int | None = None,
                    unroll: int | bool | None = None, micro_batches: int,
                    clip_norm: jax.typing.ArrayLike, noise_multiplier: jax.typing.ArrayLike,
                    noise_key: jax.Array | None = None) -> tuple[Params, ClientMetrics]:
    """Train one client with DP-SGD and return ``(W_local − W_global, metrics)``.

    Same signature and semantics as :func:`ldpsim.fl.local_update` plus the DP
    arguments; jittable and vmappable (``clip_norm`` and ``noise_multiplier`` may be
    traced, so sweeping them never recompiles). With ``noise_multiplier = 0`` and a
    clip bound no chunk reaches, it equals ``local_update`` (up to float rounding) when
    ``micro_batches = 1`` or every batch is full; on a partial batch with M > 1 the step is
    the mean of the M micro-batch means (MindArmour; module docstring), not the mean over
    the valid rows.

    Args:
      params, x, y, count, apply_fn, optimizer, batch_size, key, local_steps,
        local_epochs, unroll: as in :func:`ldpsim.fl.local_update`.
      micro_batches: static number M of chunks per batch; must divide ``batch_size``
        (``M = batch_size``: per-example clipping).
      clip_norm: L2 clip bound ``C > 0`` of each chunk's mean-loss gradient.
      noise_multiplier: ``z ≥ 0``; noise std on the sum of clipped chunks is ``z·C``.
      noise_key: key of the DP noise (default ``fold_in(key, 0x64707367)``).

    Returns:
      ``(delta, metrics)``; ``metrics.loss`` is the mean over the steps taken of the
      batch loss over valid rows (before each step's update).

    Raises:
      LdpsimError: bad micro_batches / clip_norm / noise_multiplier, or the arguments
        :func:`~ldpsim.fl.local_update` rejects.
    """
    num_local_steps(max_examples=x.shape[0], batch_size=batch_size,  # validates the step args
                    local_steps=local_steps, local_epochs=local_epochs)
    M = check_positive_int("micro_batches", micro_batches)
    B = batch_size
    if B % M:
        raise LdpsimError(f"batch_size ({B}) must be a multiple of micro_batches, got {M}")
    if _is_concrete(clip_norm):
        check_positive("clip_norm", clip_norm)
    if _is_concrete(noise_multiplier):
        check_nonnegative("noise_multiplier", noise_multiplier)
    if noise_key is None:
        noise_key = jax.random.fold_in(key, _NOISE_SALT)
    dp_opt = optax.chain(
        dp_aggregate(jnp.asarray(clip_norm, jnp.float32),
                     jnp.asarray(noise_multiplier, jnp.float32), key=noise_key),
        optimizer)
    split = lambda a: a.reshape((M, B // M) + a.shape[1:])  # noqa: E731

    def chunk_loss(p, xb, yb, mask):
        ce = optax.losses.softmax_cross_entropy_with_integer_labels(apply_fn(p, xb), yb)
        valid = jnp.sum(mask)
        return jnp.sum(jnp.where(mask, ce, 0.0)) / jnp.maximum(valid, 1).astype(ce.dtype)

    def loss_and_grad(p, xb, yb, mask):
        # One mean-loss gradient per micro-batch (MindArmour); dp_aggregate clips each,
        # sums, adds noise and divides by M. The reported loss is the valid-row mean.
        losses, grads = jax.vmap(jax.value_and_grad(chunk_loss), in_axes=(None, 0, 0, 0))(
            p, split(xb), split(yb), split(mask))
        valid = jnp.sum(split(mask), axis=1).astype(jnp.float32)
        return jnp.sum(losses * valid) / jnp.maximum(jnp.sum(valid), 1.0), grads

    return train_local_steps(params, x, y, count, loss_and_grad=loss_and_grad, optimizer=dp_opt,
                             batch_size=B, key=key, local_steps=local_steps,
                             local_epochs=local_epochs, unroll=unroll)


def make_dp_client_update(*, micro_batches: int, clip_norm: float, noise_multiplier: float
                          ) -> Callable[..., tuple[Params, ClientMetrics]]:
    """A ``client_update`` for :func:`ldpsim.fl.make_round_fn` doing DP-SGD locally.

    Returns :func:`dp_local_update` with the DP arguments bound; it has exactly the
    signature of :func:`ldpsim.fl.local_update`. The bound values are
    compile-time constants of the round; to sweep them without recompiling, call
    :func:`dp_local_update` with traced values instead (e.g. from the round's hyper).
    """
    M = check_positive_int("micro_batches", micro_batches)
    C = check_positive("clip_norm", clip_norm)
    z = check_nonnegative("noise_multiplier", noise_multiplier)
    return functools.partial(dp_local_update, micro_batches=M, clip_norm=C,
                             noise_multiplier=z)


# ----------------------------------------------------------------------------- the object


class ClientDpHyper(NamedTuple):
    """DP-SGD clients' traced knobs: micro-batch clip bound C and noise multiplier z."""

    clip: jax.Array
    noise_multiplier: jax.Array


class ClientTraining(NamedTuple):
    """How each client trains before its update is privatized, as one object of pure
    functions (the client-side counterpart of :class:`ldpsim.modes.RoundMechanism`;
    a mode composes with one through :func:`ldpsim.modes.with_client_training`).

    Build one with :func:`plain` or :func:`dpsgd`; both are cached, so equal settings give
    the same object (it is part of the engine's compile-cache key).

    Attributes:
        name: ``"plain"`` or ``"dpsgd"`` (for reading; nothing branches on it).
        update: ``(params, x, y, count, knobs, **kw) -> (delta, ClientMetrics)``: one
            client's local training, ``kw`` those of
            :func:`ldpsim.fl.local_update` (``apply_fn``, ``optimizer``,
            ``batch_size``, ``key``, ``local_steps``, ``local_epochs``); ``knobs`` are
            its traced settings (``RoundHyper.client``).
        knobs: ``(clip, noise_multiplier) -> knobs`` (host side, float32 arrays, or
            ``()`` where there are none).
        dp_event: ``(noise_multiplier, *, num_examples, batch_size, local_steps) ->
            dp_accounting.DpEvent`` of ONE round of one client holding ``num_examples``
            rows, relative to :attr:`sensitivity` under :attr:`neighbours`; None where
            local training releases nothing private (no sample-level guarantee).
        neighbours: the neighbouring relation of :attr:`dp_event`, in words.
        sensitivity: the L2 sensitivity of one noised step, in units of the clip bound.
    """

    name: str
    update: Callable[..., tuple[Params, ClientMetrics]]
    knobs: Callable[[float, float], Any]
    dp_event: Callable[..., Any] | None = None
    neighbours: str = ""
    sensitivity: str = ""


def _plain_update(params, x, y, count, knobs, **kw):
    return local_update(params, x, y, count, **kw)


@functools.cache
def plain() -> ClientTraining:
    """Ordinary local training (:func:`ldpsim.fl.local_update`); no knobs, no
    sample-level guarantee."""
    return ClientTraining(name="plain", update=_plain_update, knobs=lambda clip, z: ())


@functools.cache
def dpsgd(micro_batches: int) -> ClientTraining:
    """DP-SGD clients (:func:`dp_local_update` with ``micro_batches`` M, clip bound and
    multiplier traced in :class:`ClientDpHyper`).

    Accounting event of one round (module docstring; the ``"shuffle"`` method of
    :func:`dp_client_epsilon`, which gives the same ε): a round of ``K`` steps makes
    ``p = ceil(K / ceil(n/B))`` passes over the client's ``n`` rows, each pass one
    Gaussian of multiplier ``z/2`` (replace one example, sensitivity 2C, no sampling
    amplification): ``SelfComposedDpEvent(GaussianDpEvent(z/2), p)``.
    """
    micro = check_positive_int("micro_batches", micro_batches)

    def update(params, x, y, count, knobs: ClientDpHyper, **kw):
        return dp_local_update(params, x, y, count, micro_batches=micro, clip_norm=knobs.clip,
                               noise_multiplier=knobs.noise_multiplier, **kw)

    def knobs(clip: float, noise_multiplier: float) -> ClientDpHyper:
        return ClientDpHyper(jnp.float32(clip), jnp.float32(noise_multiplier))

    return ClientTraining(name="dpsgd", update=update, knobs=knobs, dp_event=_round_event,
                          neighbours="replace one example of the client (no sampling "
                                     "amplification)", sensitivity="2C")


#: Ordinary clients (the default of every mode).
PLAIN = plain()


def _round_event(noise_multiplier: float, *, num_examples: int, batch_size: int,
                 local_steps: int) -> dp_accounting.SelfComposedDpEvent:
    """One round of one DP-SGD client: ``p = ceil(K / ceil(n/B))`` passes over its ``n``
    rows, each one Gaussian of multiplier ``z/2`` (replace one example, sensitivity 2C)."""
    passes = -(-int(local_steps) // -(-int(num_examples) // int(batch_size)))
    return dp_accounting.SelfComposedDpEvent(
        dp_accounting.GaussianDpEvent(noise_multiplier / 2), passes)


def event_epsilon(event: Any, count: int, delta: float) -> float:
    """ε at ``delta`` of ``count`` independent releases of a ``dp_accounting`` event (the ideal
    law of the event: callers add what a float32 realisation changes,
    :mod:`ldpsim._src.privacy.noise.realised`).

    Exact where a closed form exists, through :func:`ldpsim.privacy.ldp_epsilon`:
    Gaussians compose exactly (``k`` of multiplier ``z`` are one of ``z/√k``, Balle & Wang
    2018, Thm. 8; ``z = 0``: inf); Laplace (pure DP) by basic composition ``k/b``
    (``delta`` unused); a self-composed event multiplies the count; no privacy is inf;
    randomized response (the event of every pure ε₀-LDP report randomizer) by its own PLD
    self-composed ``count`` times, capped by ``count·ε₀``. Any other event is composed by
    dp_accounting's PLD accountant, or its RDP accountant where PLD does not support the event
    (add/remove composition of independent releases).

    Raises:
        LdpsimError: neither accountant supports the event.
    """
    count = int(count)
    while isinstance(event, dp_accounting.SelfComposedDpEvent):
        count *= int(event.count)
        event = event.event
    if count == 0:
        return 0.0
    if isinstance(event, dp_accounting.NonPrivateDpEvent):
        return math.inf
    if isinstance(event, dp_accounting.GaussianDpEvent):
        z = event.noise_multiplier
        if z == 0:
            return math.inf
        return accounting.ldp_epsilon("gaussian", sensitivity=1.0, sigma=z, rounds=count,
                                      delta=delta, method="analytic", sampler="ideal").epsilon
    if isinstance(event, dp_accounting.LaplaceDpEvent):
        return accounting.ldp_epsilon("laplace", sensitivity=1.0, scale=event.noise_multiplier,
                                      rounds=count, method="basic", sampler="ideal").epsilon
    if isinstance(event, dp_accounting.RandomizedResponseDpEvent):   # pure-ε report randomizers
        return accounting.randomized_response_epsilon(event, count, delta)
    for accountant in (dp_accounting.pld.PLDAccountant(), dp_accounting.rdp.RdpAccountant()):
        if accountant.supports(event):
            accountant.compose(event, count)
            return float(accountant.get_epsilon(delta))
    raise LdpsimError(f"dp_accounting cannot account {type(event).__name__}")


def dp_client_epsilon(*, noise_multiplier: float, batch_size: int, num_examples: int,
                      local_steps: int, rounds: int = 1, delta: float, method: str = "shuffle",
                      micro_batches: int | None = None):
    """Sample-level ε of one client after ``rounds`` rounds of ``local_steps`` DP-SGD steps each.

    The client holds ``num_examples`` rows; every round's update is a function of that
    round's noisy gradients, so the guarantee composes over the rounds it took part in.
    In a population of unequal clients, the smallest client is the worst case.

    Methods:
      ``"shuffle"`` (rigorous for :func:`dp_local_update`'s batching, no sampling
      assumption): replace-one-example neighbours, sensitivity ``2C`` per step whatever
      the micro-batching, and an example is in at most one batch per pass over the
      client's data; a round of ``K`` steps makes ``ceil(K / ceil(n/B))`` passes (each
      round starts a fresh pass), so ``k = rounds · ceil(K / ceil(n/B))``: ε of ``k``
      Gaussians with multiplier ``z/2``, exactly (dp_accounting). For ``local_epochs=E``
      pass ``local_steps = E·ceil(n/B)``.
      ``"rdp"`` / ``"pld"``: the standard DP-SGD figure, *assuming* Poisson sampling with
      ``q = B/n`` (add/remove one example) over ``rounds · K`` steps via
      :func:`ldpsim.privacy.dpsgd_epsilon` — :func:`dp_local_update` shuffles,
      so this is a reference figure, not its guarantee. The sensitivity is ``C`` (multiplier
      ``z``) only for per-example clipping, ``micro_batches == batch_size``; otherwise
      (including ``micro_batches=None``, unknown) a micro-batch holds several rows and the
      sensitivity is ``2C`` (multiplier ``z/2``).

    Args:
      micro_batches: M of :func:`dp_local_update` (must divide ``batch_size``); only the
        ``"rdp"``/``"pld"`` sensitivity depends on it. None: assume ``M < B`` (2C, valid
        for every M).

    Returns:
      A :class:`ldpsim.privacy.PrivacyReport`; ``details`` has ``sensitivity``
      (``"C"`` or ``"2C"``) and ``accounted_noise_multiplier`` (``z`` over it).
    """
    check_choice("method", method, DP_CLIENT_METHODS)
    z = check_nonnegative("noise_multiplier", noise_multiplier)
    b = check_positive_int("batch_size", batch_size)
    n = check_positive_int("num_examples", num_examples)
    delta = check_open_unit("delta", delta)
    if micro_batches is not None:
        micro_batches = check_positive_int("micro_batches", micro_batches)
        if b % micro_batches:
            raise LdpsimError(f"batch_size ({b}) must be a multiple of micro_batches, got "
                              f"{micro_batches}")
    for name, value in (("local_steps", local_steps), ("rounds", rounds)):
        if isinstance(value, bool) or int(value) != value or value < 0:
            raise LdpsimError(f"{name} must be an integer >= 0, got {value!r}")
    local_steps, rounds = int(local_steps), int(rounds)
    if method != "shuffle":
        if b >= n:
            raise LdpsimError(f"batch_size must be < num_examples ({n}) for method={method!r} "
                              f"(sampling rate q = B/n < 1), got {b}; use method='shuffle'")
        s = 1 if micro_batches == b else 2
        rep = accounting.dpsgd_epsilon(noise_multiplier=z / s, batch_size=b, num_examples=n,
                                       steps=rounds * local_steps, delta=delta,
                                       sampling="poisson", method=method)
        why = ("per-example clipping" if s == 1 else
               "a micro-batch of several rows changes by up to 2C")
        return dataclasses.replace(
            rep, neighbouring=f"add-or-remove one example of the client, sensitivity "
                              f"{'C' if s == 1 else '2C'} ({why}); assumes Poisson sampling "
                              "with q = B/n, which dp_local_update does not do",
            details={**rep.details, "noise_multiplier": z, "micro_batches": micro_batches,
                     "sensitivity": "C" if s == 1 else "2C", "accounted_noise_multiplier": z / s})
    event = _round_event(z, num_examples=n, batch_size=b, local_steps=local_steps)
    k = rounds * event.count
    details = {"noise_multiplier": z, "batch_size": b, "num_examples": n,
               "local_steps": local_steps, "rounds": rounds, "passes": k,
               "micro_batches": micro_batches, "sensitivity": "2C",
               "accounted_noise_multiplier": z / 2}
    neighbouring = ("replace one example of the client, sensitivity 2C "
                    "(no sampling amplification)")
    # k Gaussians of std zC and sensitivity 2C, composed exactly (the DP-SGD clients' event).
    return accounting.PrivacyReport(event_epsilon(event, rounds, delta), delta, "analytic",
                                    neighbouring, k, details)
