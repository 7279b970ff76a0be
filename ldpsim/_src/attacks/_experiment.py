"""Gradient inversion against ε, examples per client and clients summed: the experiment grid.

One *trial* is one attacked client: with root key ``PRNGKey(seed)`` the model parameters θ
are ``init(fold_in(root, 0))``, client ``c``'s noise key is ``fold_in(fold_in(root, 1), c)``
and the dummy initialisation key ``fold_in(root, 2)``. Each of the n clients computes the
gradient of its B examples at θ and privatizes it with the engine's randomizer
(``LocalMechanism.privatize``: clip, then noise); the server observes the sum of the n
releases and inverts it for client 0's examples. The keys do not depend on ε, so the
cells of an ε grid see the same data, θ and standard noise draws, scaled by each ε's noise
scale (common random numbers: differences between ε are not sampling noise).

The mechanism's calibrated parameters are traced, so a whole ε grid reuses one compiled
program per (mechanism, B, n); trials (seeds) are vmapped.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import time
from typing import Any, Callable, Iterable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ldpsim._src._checks import (LdpsimError, check_open_unit, check_positive, check_positive_int)
from ldpsim._src.attacks._inversion import (InversionConfig, Reconstruction, client_gradient,
                                            invert)
from ldpsim._src.attacks._metrics import label_recovery, match_examples, psnr, ssim

__all__ = ["COLUMNS", "DEFAULT_EPSILONS", "AttackResult", "attack_mechanisms", "attack_trials",
           "build_mechanism", "pick_examples", "release_of", "run_grid"]

DEFAULT_EPSILONS = (math.inf, 1000.0, 100.0, 50.0, 10.0, 1.0)

#: Columns of the tidy table :func:`run_grid` returns (one row per attacked client).
COLUMNS = ("model", "method", "optimizer", "steps", "mechanism", "epsilon", "delta",
           "neighbours", "clip", "noise_scale", "examples", "clients", "seed", "psnr",
           "ssim", "label_acc", "match_loss", "release_norm", "seconds", "psnr_any", "ssim_any")


def attack_mechanisms() -> tuple[str, ...]:
    """Registered local randomizers of a vector update, calibrated by ε, that the attack can
    run against: the additive ones (Gaussian, Laplace) and the report randomizers
    (PrivUnit, Duchi, ...), whose reports the server decodes to its unbiased estimate of
    the clipped update before inverting it. ``"none"`` is ε = inf of any of them; a
    randomizer without an ε argument, with a biased decoder (SignDS: the attacker's model of
    the release, the clipped update, would not hold) or of a category (RR) is not listed."""
    from ldpsim._src.privacy.randomizers import mechanism

    names = []
    for name, e in mechanism.REGISTRY.items():
        if (name == "none" or getattr(e, "input", "vector") != "vector"
                or not getattr(e, "unbiased", True)):
            continue
        factory = getattr(e, "factory", e)
        if "epsilon" in inspect.signature(factory).parameters:
            names.append(name)
    return tuple(names)


def build_mechanism(name: str, *, epsilon: float, delta: float, clip: float, dim: int,
                    neighbours: str = "replace"):
    """The engine's registered randomizer ``name`` calibrated for (ε, δ) at clip C for a
    ``dim``-coordinate update (``mechanism.make``; only the keywords its factory takes are
    passed, so pure-DP randomizers ignore δ). ε = inf gives clipping without noise: an
    additive randomizer with noise scale 0 (L1 clipping for Laplace), or for a report
    randomizer :func:`~ldpsim.mechanism.clip_only` (L2)."""
    from ldpsim._src.privacy.randomizers import mechanism

    if name not in attack_mechanisms():
        raise LdpsimError(f"mechanism must be one of {', '.join(attack_mechanisms())}; "
                          f"got {name!r}")
    entry = mechanism.REGISTRY[name]
    additive = getattr(entry, "additive", name in ("gaussian", "laplace"))
    if math.isinf(epsilon) and not additive:
        return mechanism.clip_only(clip=clip, neighbours=neighbours, norm=clip_norm(name))
    kwargs = dict(epsilon=1.0 if math.isinf(epsilon) else epsilon, delta=delta, clip=clip,
                  neighbours=neighbours, dim=dim)
    accepted = inspect.signature(getattr(entry, "factory", entry)).parameters
    mech = mechanism.make(name, **{k: v for k, v in kwargs.items() if k in accepted})
    if math.isinf(epsilon):
        # The same additive randomizer with noise scale 0: it releases exactly the clipped
        # update (+0.0), and the ε grid keeps one compiled program per mechanism.
        mech = mech._replace(params=mech.params._replace(
            scale=jnp.zeros_like(mech.params.scale)), epsilon=math.inf, delta=0.0)
    return mech


def release_of(mech, key: jax.Array, update: Any, params: Any) -> Any:
    """What the server holds for one client: an additive randomizer's release
    (``clipped + noise``), or a report randomizer's report decoded to its unbiased
    estimate of the clipped update (a pytree like ``update``)."""
    from ldpsim._src.privacy.randomizers import mechanism

    out = mech.privatize(key, update, params)
    if isinstance(out, mechanism.Privatized):
        return out.noisy
    return mech.decode(out.report, params, like=update)


def clip_norm(name: str) -> str:
    """The norm a mechanism clips in (Laplace: L1; the others: L2)."""
    return "l1" if name == "laplace" else "l2"


class AttackResult(NamedTuple):
    """What :func:`attack_trials` returns for T trials (device arrays).

    Attributes:
        recon: client 0's reconstruction, ``x [T, B, ...]``, ``labels [T, B]``, ``loss [T]``.
        release_norm: L2 norm of what the server observed (the sum of n releases) ``[T]``.
    """

    recon: Reconstruction
    release_norm: jax.Array


def _observed(root, x, labels, mech_params, *, model, mech):
    """What the server observes in one trial: θ, and the sum of the n clients' releases
    (``x [n, B, ...]``, ``labels [n, B]``)."""
    n = labels.shape[0]
    params = model.init(jax.random.fold_in(root, 0), x[0])
    grads = jax.vmap(lambda xc, yc: client_gradient(model.apply, params, xc, yc,
                                                    model.num_classes))(x, labels)
    noise_root = jax.random.fold_in(root, 1)
    keys = jax.vmap(lambda c: jax.random.fold_in(noise_root, c))(jnp.arange(n))
    released = jax.vmap(lambda k, g: release_of(mech, k, g, mech_params))(keys, grads)
    return params, jax.tree_util.tree_map(lambda a: jnp.sum(a, axis=0), released)


def _attack(root, params, observed, clip, *, model, batch, config):
    recon = invert(jax.random.fold_in(root, 2), observed, params, apply_fn=model.apply,
                   input_shape=model.input_shape, num_classes=model.num_classes, batch=batch,
                   clip=clip, config=config)
    flat = jnp.concatenate([a.ravel() for a in jax.tree_util.tree_leaves(observed)])
    return AttackResult(recon, jnp.linalg.norm(flat))


_COMPILED: dict = {}


def _cached(key, model, build):
    model_ref, fn = _COMPILED.get(key, (None, None))
    if model_ref is not model.apply:
        fn = build()
        _COMPILED[key] = (model.apply, fn)
    return fn


def attack_trials(seeds: jax.Array, x: jax.Array, labels: jax.Array, mech, *, model,
                  mechanism_name: str, config: InversionConfig) -> AttackResult:
    """Run T trials at once (vmapped): ``seeds [T]`` int, ``x [T, n, B, ...]``,
    ``labels [T, n, B]``; ``mech`` a :class:`LocalMechanism` (its ``params``, hence ε,
    are traced). Two programs: the releases (one per mechanism and shape, cheap to
    compile) and the inversion (one per B and ``config``, whatever n and ε)."""
    config = config._replace(norm=clip_norm(mechanism_name))
    roots = jax.vmap(jax.random.PRNGKey)(jnp.asarray(seeds, jnp.uint32))
    observe = _cached(("observe", id(model.apply), mechanism_name, mech.name), model,
                      lambda: jax.jit(jax.vmap(
                          lambda r, xs, ys, mp: _observed(r, xs, ys, mp, model=model, mech=mech),
                          in_axes=(0, 0, 0, None))))
    params, observed = observe(roots, x, labels, mech.params)
    batch = int(labels.shape[-1])
    attack = _cached(("invert", id(model.apply), batch, config), model,
                     lambda: jax.jit(jax.vmap(
                         lambda r, p, o, c: _attack(r, p, o, c, model=model, batch=batch,
                                                    config=config),
                         in_axes=(0, 0, 0, None))))
    return attack(roots, params, observed, jnp.asarray(mech.params.clip, jnp.float32))


def pick_examples(x_pool: np.ndarray, y_pool: np.ndarray, seed: int, clients: int,
                  examples: int) -> tuple[np.ndarray, np.ndarray]:
    """``clients × examples`` distinct examples drawn without replacement from the pool by
    ``default_rng([seed, clients, examples])`` (host side): ``x [n, B, ...]``, ``y [n, B]``."""
    rng = np.random.default_rng([int(seed), int(clients), int(examples)])
    idx = rng.choice(len(y_pool), clients * examples, replace=False)
    x = np.asarray(x_pool[idx], np.float32)
    return (x.reshape((clients, examples) + x.shape[1:]),
            np.asarray(y_pool[idx], np.int32).reshape(clients, examples))


def _best_against_all(recon: np.ndarray, all_x: np.ndarray) -> tuple[float, float]:
    """Mean over the B reconstructions of the best PSNR (and best SSIM) against ANY of the
    n·B examples behind the observed sum: whether the attack leaked someone's example,
    not necessarily client 0's."""
    pool = jnp.asarray(all_x.reshape((-1,) + all_x.shape[2:]))
    pairs = lambda f: jax.vmap(lambda r: jax.vmap(lambda x: f(r, x))(pool))(  # noqa: E731
        jnp.asarray(recon))
    return (float(np.mean(np.max(np.asarray(pairs(psnr)), axis=1))),
            float(np.mean(np.max(np.asarray(pairs(ssim)), axis=1))))


def _num_params(model) -> int:
    shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0),
                            jax.ShapeDtypeStruct((1,) + tuple(model.input_shape), jnp.float32))
    return int(sum(math.prod(s.shape) for s in jax.tree_util.tree_leaves(shapes)))


def _check_grid(epsilons, mechanisms, examples, clients, seeds, delta, clip) -> None:
    if not epsilons:
        raise LdpsimError("epsilons must not be empty")
    for e in epsilons:
        check_positive("epsilon", e, allow_inf=True)
    for m in mechanisms:
        if m not in attack_mechanisms():
            raise LdpsimError(f"mechanism must be one of {', '.join(attack_mechanisms())}; "
                              f"got {m!r}")
    for b in examples:
        if not 1 <= check_positive_int("examples", b) <= 8:
            raise LdpsimError(f"examples per client must be in 1..8; got {b}")
    for n in clients:
        check_positive_int("clients", n)
    if not seeds:
        raise LdpsimError("trials must be >= 1; got 0")
    check_open_unit("delta", delta)
    check_positive("clip", clip)


def run_grid(x_pool: np.ndarray, y_pool: np.ndarray, *, model, epsilons: Iterable[float],
             mechanisms: Iterable[str], examples: Iterable[int], clients: Iterable[int],
             seeds: Iterable[int], delta: float = 1e-5, clip: float = 1.0,
             neighbours: str = "replace", config: InversionConfig = InversionConfig(),
             on_row: Callable[[dict], None] | None = None,
             keep: Callable[[dict], bool] | None = None,
             on_skip: Callable[[str], None] | None = None) -> tuple[list[dict], dict]:
    """Attack every (mechanism, B, n, ε) cell over ``seeds`` and return the tidy rows.

    Args:
        x_pool, y_pool: the examples clients draw from (images in [0, 1]).
        model: a :class:`ldpsim.models.Model` (its input shape must match the pool).
        on_row: called with each row as soon as its cell is done (progress, writing).
        keep: ``row -> bool``; the reconstructions of the rows it accepts are returned.
        on_skip: called with a message for a cell whose mechanism cannot be calibrated
            (e.g. PrivUnit at an ε beyond float32's range), which is then skipped; without
            it the error is raised.

    Returns:
        ``(rows, kept)``: rows with :data:`COLUMNS`, and ``{(mechanism, B, n, ε, seed):
        (true x [B, ...], matched reconstruction [B, ...])}`` for the kept rows.
    """
    epsilons, mechanisms = [float(e) for e in epsilons], list(mechanisms)
    examples, clients, seeds = [int(b) for b in examples], [int(n) for n in clients], list(seeds)
    _check_grid(epsilons, mechanisms, examples, clients, seeds, delta, clip)
    config = config.checked()
    rows, kept = [], {}
    dim = _num_params(model)
    x_pool = np.asarray(x_pool, np.float32).reshape((len(y_pool),) + tuple(model.input_shape))
    for mech_name in mechanisms:
        for b in examples:
            for n in clients:
                data = [pick_examples(x_pool, y_pool, s, n, b) for s in seeds]
                xs = jnp.asarray(np.stack([d[0] for d in data]))
                ys = jnp.asarray(np.stack([d[1] for d in data]))
                for eps in epsilons:
                    try:
                        mech = build_mechanism(mech_name, epsilon=eps, delta=delta, clip=clip,
                                               dim=dim, neighbours=neighbours)
                    except LdpsimError as err:   # e.g. PrivUnit beyond float32's range of ε
                        if on_skip is None:
                            raise
                        on_skip(f"{mech_name} at epsilon {eps:g}: {err}")
                        continue
                    t0 = time.perf_counter()
                    out = attack_trials(np.asarray(seeds), xs, ys, mech, model=model,
                                        mechanism_name=mech_name, config=config)
                    out = jax.device_get(out)
                    seconds = (time.perf_counter() - t0) / len(seeds)
                    for t, seed in enumerate(seeds):
                        true_x, true_y = np.asarray(data[t][0][0]), data[t][1][0]
                        perm = match_examples(out.recon.x[t], true_x)
                        rec = np.asarray(out.recon.x[t])[perm]
                        ps = np.asarray(jax.vmap(psnr)(rec, true_x))
                        ss = np.asarray(jax.vmap(ssim)(rec, true_x))
                        any_p, any_s = _best_against_all(rec, np.asarray(data[t][0]))
                        row = dict(
                            model=model.name, method=config.method, optimizer=config.optimizer,
                            steps=config.steps, mechanism=mech_name, epsilon=eps,
                            delta=float(mech.delta), neighbours=neighbours, clip=clip,
                            noise_scale=float(getattr(mech.params, "scale", math.nan)), examples=b, clients=n,
                            seed=int(seed), psnr=float(np.mean(ps)), ssim=float(np.mean(ss)),
                            label_acc=label_recovery(out.recon.labels[t], true_y),
                            match_loss=float(out.recon.loss[t]),
                            release_norm=float(out.release_norm[t]), seconds=seconds,
                            psnr_any=any_p, ssim_any=any_s)
                        rows.append(row)
                        if keep is not None and keep(row):
                            kept[(mech_name, b, n, eps, int(seed))] = (true_x, np.clip(rec, 0, 1))
                        if on_row is not None:
                            on_row(row)
    return rows, kept
