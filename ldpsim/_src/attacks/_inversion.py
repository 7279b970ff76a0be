"""DLG and iDLG: reconstruct a client's training examples from its (privatized) update.

Threat model (honest-but-curious server): the attacker knows the model's parameters θ at
which the client computed its update, the architecture, the loss, the number of examples
B behind the update, the clip bound C and the mechanism (all public in ldpsim's
simulation), and observes exactly what the client releases: the gradient of the mean
cross-entropy over its B examples, clipped to C and privatized by the engine's local
randomizer (:mod:`ldpsim.mechanism`). In the "sum of n clients" setting it
observes only the sum of n such releases and attacks the first client's examples; the
other clients' updates are, to this attacker, interference it does not model.

The attack minimises, over dummy inputs x' (and, for DLG, dummy soft labels y'),

    ``‖clip_C(∇θ L(θ; x', y')) − r‖²``

where ``r`` is the observed release and ``clip_C`` is the client's clipping applied to the
dummy gradient (so an unnoised release with an active clip bound is matched exactly).
The minimiser is L-BFGS (as in DLG) or Adam, both from optax, run for a fixed number of
steps inside ``lax.scan``; the best iterate seen is returned. Everything is jittable, the
key is explicit, and one call attacks one client (``jax.vmap`` it over clients).

* DLG (Zhu, Liu & Han, "Deep Leakage from Gradients", NeurIPS 2019, arXiv:1906.08935):
  labels are optimised jointly as softmax logits.
* iDLG (Zhao, Mopuri & Bilen, "iDLG: Improved Deep Leakage from Gradients", 2020,
  arXiv:2001.02610): the labels are read off the last layer first. For cross-entropy,
  ``∂L/∂W[i, j] = h_i (p_j − y_j)`` with ``h ≥ 0`` after a ReLU, so the column of the true
  label is the only one with a negative sum. For B > 1 examples (mean loss) the B most
  negative column sums are taken (exact for distinct labels when each example's
  ``(1 − p_y)·Σh`` dominates the others' positive terms, the extension of Wainakh et al.
  2022, arXiv:2105.09369); then only the inputs are optimised.

Second-order gradients: the attack differentiates the gradient of the model. LeNet-5's
CPU convolutions (``conv_impl="chwn"``, the default, and ``"mixed"``) have hand-written
VJPs made of ``.at[].add``, matmuls and (chwn) a convolution; their VJPs are
differentiable again, and the attack's input gradient agrees with the plain-JAX reference
(``conv_impl="xla"``; "mixed" to 1.5e-7, tests/attacks/test_inversion.py checks both to
rtol 1e-4), so the engine's default formulation is used.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax.flatten_util import ravel_pytree

from ldpsim._src._checks import LdpsimError, check_choice, check_positive, check_positive_int

PyTree = Any

__all__ = ["METHODS", "NORMS", "OPTIMIZERS", "InversionConfig", "Reconstruction", "clip_dummy",
           "client_gradient", "invert", "last_layer_kernel", "recover_labels", "victim_loss"]

METHODS = ("idlg", "dlg")
OPTIMIZERS = ("lbfgs", "adam")
NORMS = ("l2", "l1")


class InversionConfig(NamedTuple):
    """Static settings of one inversion (hashable: changing one recompiles).

    Attributes:
        method: ``"idlg"`` (labels recovered analytically, then inputs optimised) or
            ``"dlg"`` (inputs and soft labels optimised jointly).
        optimizer: ``"lbfgs"`` (optax L-BFGS with zoom line search, as DLG) or ``"adam"``.
        steps: optimiser iterations.
        learning_rate: Adam's step size (L-BFGS uses its line search).
        norm: the clip norm of the attacked mechanism, ``"l2"`` (Gaussian) or ``"l1"``
            (Laplace); the attacker clips its dummy gradient the same way.
    """

    method: str = "idlg"
    optimizer: str = "lbfgs"
    steps: int = 100
    learning_rate: float = 0.1
    norm: str = "l2"

    def checked(self) -> "InversionConfig":
        """This config after validation (raises :class:`LdpsimError` naming the field)."""
        check_choice("method", self.method, METHODS)
        check_choice("optimizer", self.optimizer, OPTIMIZERS)
        check_choice("norm", self.norm, NORMS)
        check_positive_int("steps", self.steps)
        check_positive("learning_rate", self.learning_rate)
        return self


class Reconstruction(NamedTuple):
    """One attacked client's reconstruction.

    Attributes:
        x: reconstructed inputs ``[B, *input_shape]`` (unconstrained; metrics clip to [0, 1]).
        labels: recovered labels ``[B]`` (iDLG: from the last layer; DLG: argmax of the
            optimised soft labels).
        loss: the gradient-matching distance at the returned iterate (the best one seen).
    """

    x: jax.Array
    labels: jax.Array
    loss: jax.Array


def victim_loss(apply_fn: Callable, params: PyTree, x: jax.Array, y: jax.Array) -> jax.Array:
    """Mean softmax cross-entropy of ``apply_fn(params, x)`` against soft labels ``y [B, K]``."""
    logits = apply_fn(params, x)
    return -jnp.mean(jnp.sum(y * jax.nn.log_softmax(logits, axis=-1), axis=-1))


def client_gradient(apply_fn: Callable, params: PyTree, x: jax.Array, labels: jax.Array,
                    num_classes: int) -> PyTree:
    """The gradient a client computes on its B examples (``x [B, ...]``, int ``labels [B]``):
    ``∇θ`` of the mean cross-entropy, a pytree like ``params``."""
    y = jax.nn.one_hot(labels, num_classes, dtype=jnp.float32)
    return jax.grad(victim_loss, argnums=1)(apply_fn, params, x, y)


def clip_dummy(flat: jax.Array, clip: jax.typing.ArrayLike, norm: str) -> jax.Array:
    """The attacker's differentiable copy of the client's clipping, ``g · min(1, C/‖g‖)``
    (L2 or L1), on a flat vector. (The engine's overflow-safe clipping computes the same
    function for finite gradients of ordinary size.)"""
    if norm == "l2":
        n = jnp.sqrt(jnp.sum(jnp.square(flat)) + 1e-30)
    else:
        n = jnp.sum(jnp.abs(flat)) + 1e-30
    clip = jnp.asarray(clip, flat.dtype)
    finite = jnp.isfinite(clip)   # inf = no clipping; keeps inf out of the derivative
    return flat * jnp.where(finite, jnp.minimum(1.0, jnp.where(finite, clip, 1.0) / n), 1.0)


def last_layer_kernel(tree: PyTree, num_classes: int) -> jax.Array:
    """The last 2-D leaf of ``tree`` whose last axis has ``num_classes`` entries: the output
    layer's kernel ``[hidden, K]`` of ldpsim's flax models (``fc3`` of LeNet-5)."""
    leaves = [x for x in jax.tree_util.tree_leaves(tree)
              if x.ndim == 2 and x.shape[-1] == num_classes]
    if not leaves:
        raise LdpsimError(f"no output-layer kernel [hidden, {num_classes}] in the update")
    return leaves[-1]


def recover_labels(release: PyTree, num_classes: int, batch: int) -> jax.Array:
    """iDLG's label recovery from the output layer's gradient (see the module docstring).

    Returns the ``batch`` classes with the most negative column sums of the output kernel's
    (released) gradient, in increasing order of that sum; ``batch`` ≤ ``num_classes``.
    """
    if batch > num_classes:
        raise LdpsimError(f"iDLG label recovery needs examples per client <= {num_classes} "
                          f"classes; got {batch}")
    sums = jnp.sum(last_layer_kernel(release, num_classes), axis=0)
    return jnp.argsort(sums)[:batch].astype(jnp.int32)


def _optimizer(config: InversionConfig) -> optax.GradientTransformationExtraArgs:
    if config.optimizer == "lbfgs":
        return optax.lbfgs()
    return optax.with_extra_args_support(optax.adam(config.learning_rate))


def invert(key: jax.Array, release: PyTree, params: PyTree, *, apply_fn: Callable,
           input_shape: tuple[int, ...], num_classes: int, batch: int,
           clip: jax.typing.ArrayLike, config: InversionConfig = InversionConfig()
           ) -> Reconstruction:
    """Reconstruct the ``batch`` examples behind ``release`` (DLG or iDLG).

    Args:
        key: initialises the dummy inputs (uniform in [0, 1]) and, for DLG, the dummy
            label logits (standard normal).
        release: what the attacker observes, a pytree like ``params`` (one client's
            privatized update, its raw gradient, or a sum of several clients' releases).
        params: the model parameters θ the update was computed at.
        apply_fn: ``(params, x) -> logits`` (a :class:`ldpsim.models.Model`'s apply).
        input_shape: shape of one example; ``num_classes``: K; ``batch``: B (static).
        clip: the client's clip bound C (may be traced); ``inf`` = no clipping.
        config: static settings (:class:`InversionConfig`).

    Returns:
        A :class:`Reconstruction`. Jittable with ``apply_fn``, shapes and ``config``
        static; vmap it over clients (keys, releases).
    """
    target, _ = ravel_pytree(release)
    kx, ky = jax.random.split(key)
    x0 = jax.random.uniform(kx, (batch, *input_shape), jnp.float32)
    idlg = config.method == "idlg"
    fixed = jax.nn.one_hot(recover_labels(release, num_classes, batch), num_classes) if idlg else None

    def objective(z):
        x, logits = z
        y = fixed if idlg else jax.nn.softmax(logits, axis=-1)
        g = jax.grad(victim_loss, argnums=1)(apply_fn, params, x, y)
        flat = clip_dummy(ravel_pytree(g)[0], clip, config.norm)
        return jnp.sum(jnp.square(flat - target))

    z0 = (x0, jnp.zeros((batch, 0)) if idlg else jax.random.normal(ky, (batch, num_classes)))
    opt = _optimizer(config)
    value_and_grad = (optax.value_and_grad_from_state(objective) if config.optimizer == "lbfgs"
                      else lambda z, state: jax.value_and_grad(objective)(z))

    def step(carry, _):
        z, state, best_z, best_v = carry
        value, grad = value_and_grad(z, state=state)
        better = value < best_v   # NaN never wins: a diverged step cannot replace the best
        best_z = jax.tree_util.tree_map(lambda a, b: jnp.where(better, a, b), z, best_z)
        best_v = jnp.where(better, value, best_v)
        updates, state = opt.update(grad, state, z, value=value, grad=grad, value_fn=objective)
        return (optax.apply_updates(z, updates), state, best_z, best_v), None

    carry = (z0, opt.init(z0), z0, jnp.asarray(jnp.inf, jnp.float32))
    (z, _, best_z, best_v), _ = jax.lax.scan(step, carry, None, length=config.steps)
    last_v = objective(z)
    better = last_v < best_v
    x = jnp.where(better, z[0], best_z[0])
    logits = jnp.where(better, z[1], best_z[1])
    labels = fixed.argmax(-1).astype(jnp.int32) if idlg else jnp.argmax(logits, -1).astype(jnp.int32)
    return Reconstruction(x, labels, jnp.minimum(last_v, best_v))
