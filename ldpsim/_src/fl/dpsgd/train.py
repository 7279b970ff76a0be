"""The centralised DP-SGD trainer: data, model, one compiled epoch, and the driver loop
(:func:`ldpsim.fl.run_loop`, shared with the federated simulation)."""

from __future__ import annotations

import math
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from ldpsim._src import _xla
from ldpsim._src._checks import LdpsimError
from ldpsim._src.data.registry import load_dataset
from ldpsim._src.fl.dpsgd.batches import epoch_keys, epoch_permutation, poisson_capacity
from ldpsim._src.fl.dpsgd.config import MNIST_MEAN, MNIST_STD, DpsgdConfig
from ldpsim._src.fl.dpsgd.guarantee import step_noise_multipliers
from ldpsim._src.fl.dpsgd.ledger import Ledger
from ldpsim._src.fl.dpsgd.steps import make_epoch_fn, make_optimizer, make_poisson_epoch_fn
from ldpsim._src.fl.loop import run_loop
from ldpsim._src.fl.evaluate import make_eval_fn
from ldpsim._src.models import get_model

__all__ = ["num_train_rows", "train_dpsgd"]


def num_train_rows(config: DpsgdConfig) -> int:
    """The number of training rows a run of ``config`` uses (loads the dataset, no resizing)."""
    n = len(load_dataset(config.dataset, config.data_dir).y_train)
    return n if config.num_train is None else min(n, config.num_train)


def _load_data(config: DpsgdConfig):
    ds = load_dataset(config.dataset, config.data_dir)
    x_tr, y_tr, x_te, y_te = ds.x_train, ds.y_train, ds.x_test, ds.y_test
    if config.num_train is not None:
        x_tr, y_tr = x_tr[:config.num_train], y_tr[:config.num_train]
    if config.num_test is not None:
        x_te, y_te = x_te[:config.num_test], y_te[:config.num_test]
    if config.resize is not None:
        x_tr, x_te = _resize(x_tr, config.resize), _resize(x_te, config.resize)
    if config.normalize:
        x_tr = (x_tr - MNIST_MEAN) / MNIST_STD
        x_te = (x_te - MNIST_MEAN) / MNIST_STD
    return (np.asarray(x_tr, np.float32), np.asarray(y_tr, np.int32),
            np.asarray(x_te, np.float32), np.asarray(y_te, np.int32), ds.num_classes)


def _redraw_kernels(params: Any, key: jax.Array, init: Callable) -> Any:
    """Every leaf named ``kernel`` re-drawn as ``init(key_i, shape, dtype)``."""
    flat, treedef = jax.tree_util.tree_flatten_with_path(params)
    out = []
    for i, (path, leaf) in enumerate(flat):
        if getattr(path[-1], "key", None) == "kernel":
            leaf = init(jax.random.fold_in(key, i), leaf.shape, leaf.dtype)
        out.append(leaf)
    return jax.tree_util.tree_unflatten(treedef, out)


def _resize(x: np.ndarray, size: int) -> np.ndarray:
    """Bilinear resize of ``[n, H, W(, C)]`` images to ``size × size`` (jax.image.resize)."""
    shape = (x.shape[0], size, size) + x.shape[3:]
    fn = jax.jit(lambda a: jax.image.resize(a, (a.shape[0],) + shape[1:], "bilinear"))
    return np.concatenate([np.asarray(fn(jnp.asarray(x[i:i + 10000], jnp.float32)))
                           for i in range(0, x.shape[0], 10000)])


def _init_model(config: DpsgdConfig, x_train: np.ndarray, num_classes: int,
                root: jax.Array) -> tuple[Any, Any]:
    """``(model, params)``: ``config.model`` initialised from ``fold_in(root, 1)``, its
    kernels re-drawn from ``fold_in(root, 4)`` where the config asks for another init."""
    options = {k: getattr(config, k) for k in ("first_conv_padding", "conv_bias")
               if getattr(config, k) is not None}
    model = get_model(config.model, input_shape=x_train.shape[1:], num_classes=num_classes,
                      input_dtype=x_train.dtype,
                      **options)
    params = model.init(jax.random.fold_in(root, 1), jnp.zeros((1,) + x_train.shape[1:]))
    if config.kernel_init_stddev is not None:
        sd = config.kernel_init_stddev
        params = _redraw_kernels(params, jax.random.fold_in(root, 4),
                                 lambda k, shape, dtype: sd * jax.random.truncated_normal(
                                     k, -2.0, 2.0, shape, dtype))
    elif config.kernel_init is not None:
        params = _redraw_kernels(params, jax.random.fold_in(root, 4),
                                 getattr(jax.nn.initializers, config.kernel_init)())
    return model, params


def _epoch_program(config: DpsgdConfig, model: Any, n: int, steps_per_epoch: int,
                   root: jax.Array) -> tuple[Callable, Any, Callable[[int], jax.Array]]:
    """``(epoch_fn, optimizer, batches)`` of ``config.sampling``: the epoch kernel, its
    optimizer (noise keyed by ``fold_in(root, 3)``) and ``batches(e)``, epoch e's batch
    selection (keys or a permutation from ``fold_in(root, 2)``)."""
    data_key = jax.random.fold_in(root, 2)
    poisson = config.sampling == "poisson"
    micro = config.micro_batches if config.dp else None
    per_example = poisson and micro == config.batch_size
    optimizer = make_optimizer(config, jax.random.fold_in(root, 3),
                               presummed_divisor=config.batch_size if per_example else None)
    if poisson:
        epoch_fn = make_poisson_epoch_fn(model.apply, optimizer, num_train=n,
                                         batch_size=config.batch_size, micro_batches=micro,
                                         capacity=poisson_capacity(n, config.batch_size))

        def batches(e: int) -> jax.Array:
            return epoch_keys(data_key, e, steps_per_epoch)
    else:
        epoch_fn = make_epoch_fn(model.apply, optimizer, batch_size=config.batch_size,
                                 micro_batches=micro)

        def batches(e: int) -> jax.Array:
            return epoch_permutation(data_key, e, n, steps_per_epoch, config.batch_size)
    return epoch_fn, optimizer, batches


def train_dpsgd(config: DpsgdConfig, *, progress: bool = False,
                callback: Callable[[dict], None] | None = None,
                trace: Callable[[list[dict]], None] | None = None) -> list[dict]:
    """Train ``config.model`` centrally with (DP-)SGD and evaluate after every epoch.

    Batches are drawn as ``config.sampling`` says (module docstring), and the ε columns
    are the guarantee of that sampling.

    Args:
        config: a :class:`DpsgdConfig`.
        progress: show a tqdm bar over epochs (postfix: accuracy, ε).
        callback: called with each epoch's row as soon as it exists (e.g. to append to a
            CSV); returning ``False`` stops training after that epoch.
        trace: with DP, called after each epoch with one dict per step (keys
            :data:`TRACE_COLUMNS`): the ``C_t`` and ``m_t`` the step used, recorded from
            the DP state, and the multipliers the accountant composed.

    Returns:
        One dict per epoch with the keys :data:`CSV_COLUMNS` plus ``compile_time``:
        test ``accuracy`` and ``loss``, mean ``train_loss`` of the epoch's steps;
        ``sampling``, ``neighbouring`` (``"add-or-remove one example"`` for Poisson,
        ``"replace one example"`` for shuffle) and ``sensitivity`` (``"C"`` or ``"2C"``,
        :func:`privacy_setting`) that the ε refers to, and ``accounted_noise_multiplier``
        (the step's combined multiplier: value and unclipped fraction, the latest step for
        Poisson, the epoch's smallest for shuffle), ``fraction_noise_multiplier``
        (``inf`` without adaptive clipping) and ``accounting`` (one line: how the ε was
        computed); ``epsilon`` (the guarantee: the smaller of ``epsilon_rdp`` and
        ``epsilon_pld``), ``epsilon_rdp``, ``epsilon_pld`` (NaN where not computed) and
        ``epsilon_monitor`` (MindArmour's figure, :data:`MONITOR_LABEL`) — inf when DP is
        on without noise or the fraction is released without noise, NaN with DP off; and
        the DP state (current ``noise_multiplier``, ``clip_norm``,
        ``effective_noise_multiplier`` ``b·m/C``, last ``unclipped_fraction``, the latter
        a diagnostic computed without noise, not covered by ε).

    Raises:
        LdpsimError: bad config, missing data, or fewer training rows than one batch.
    """
    start = time.perf_counter()
    x_tr, y_tr, x_te, y_te, num_classes = _load_data(config)
    n = x_tr.shape[0]
    steps_per_epoch = n // config.batch_size
    if steps_per_epoch < 1 or config.batch_size >= n:
        raise LdpsimError(f"batch_size must be < the number of training rows ({n}), "
                          f"got {config.batch_size}")
    root = jax.random.key(config.seed)
    model, params = _init_model(config, x_tr, num_classes, root)
    epoch_fn, optimizer, batches = _epoch_program(config, model, n, steps_per_epoch, root)
    opt_state = optimizer.init(params)
    x_tr, y_tr = jnp.asarray(x_tr), jnp.asarray(y_tr)
    x_te, y_te = jnp.asarray(x_te), jnp.asarray(y_te)
    batches0 = batches(0)
    t0 = time.perf_counter()
    epoch_c = _xla.jit(epoch_fn, donate_argnums=(0, 1)).lower(
        params, opt_state, x_tr, y_tr, batches0).compile()
    evaluate = _xla.jit(make_eval_fn(model.apply, config.eval_batch_size))
    compile_time = time.perf_counter() - t0
    ledger = Ledger(config, n, steps_per_epoch,
                    dim=sum(int(np.size(x)) for x in jax.tree_util.tree_leaves(params)))

    def step(carry, e):
        params, opt_state, _, _ = carry
        t_epoch = time.perf_counter()
        params, opt_state, losses, dp_trace = epoch_c(params, opt_state, x_tr, y_tr,
                                                      batches0 if e == 0 else batches(e))
        return params, opt_state, (losses, dp_trace), t_epoch

    def report(carry, e):
        params, opt_state, (losses, dp_trace), t_epoch = carry
        acc, loss = evaluate(params, x_te, y_te)
        row = {"epoch": e + 1, "step": (e + 1) * steps_per_epoch, "dp": config.dp,
               "train_loss": float(jnp.mean(losses)), "accuracy": float(acc),
               "loss": float(loss)}
        clips = np.asarray(dp_trace["clip_norm"]) if dp_trace else None
        mults = np.asarray(dp_trace["noise_multiplier"]) if dp_trace else None
        row.update(ledger.epoch_end(last=e == config.epochs - 1, clip_norms=clips,
                                    noise_multipliers=mults))
        if trace is not None and dp_trace:
            if ledger.last_trajectory is not None:  # what the accountant used
                clips, mults = ledger.last_trajectory
            z_value, z = step_noise_multipliers(config, clips, mults)
            trace([{"step": e * steps_per_epoch + t + 1, "epoch": e + 1,
                    "clip_norm": float(clips[t]), "noise_multiplier": float(mults[t]),
                    "value_noise_multiplier": float(z_value[t]),
                    "accounted_noise_multiplier": float(z[t])}
                   for t in range(steps_per_epoch)])
        row["delta"] = config.delta if config.dp else math.nan
        row.update(_dp_state_columns(config, opt_state))
        row["epoch_time"] = time.perf_counter() - t_epoch
        row["wall_time"] = time.perf_counter() - start
        row["compile_time"] = compile_time
        return [row]

    return run_loop(config.epochs, step, (params, opt_state, None, None), report=report,
                    callback=callback, progress=progress,
                    desc="DP-SGD" if config.dp else "SGD", unit="epoch",
                    postfix=lambda row: {"accuracy": f"{row['accuracy']:.4f}",
                                         "eps": f"{row['epsilon']:.4g}"})


def _dp_state_columns(config: DpsgdConfig, opt_state: Any) -> dict[str, float]:
    if not config.dp:
        return {k: math.nan for k in ("noise_multiplier", "clip_norm",
                                      "effective_noise_multiplier", "unclipped_fraction")}
    s = opt_state[0]
    m, c = float(s.noise_multiplier), float(s.clip_norm)
    bound = c if config.noise_follows_clip else float(s.noise_norm_bound)
    return {"noise_multiplier": m, "clip_norm": c,
            "effective_noise_multiplier": bound * m / c if c > 0 else math.inf,
            "unclipped_fraction": float(s.unclipped_fraction)}
