"""Centralised (non-federated) DP-SGD training, as MindArmour's ``DPModel`` runs it.

This is the MindArmour LeNet-5 tutorial (seed 002, ALGORITHMS §2.3–2.5) in JAX:
one model, the whole training set, per-micro-batch clipping with Gaussian noise
(:func:`ldpsim.privacy.dpsgd.dp_aggregate`) in front of SGD / Momentum / Adam, and
the privacy spent reported three ways after every epoch:

* ``epsilon_monitor``: MindArmour's ``RDPMonitor`` arithmetic
  (:class:`ldpsim.privacy.monitors.RDPMonitor`: 11 orders, classic conversion,
  ``per_print_times`` = steps per epoch, hence its P+1-step window quirk);
* ``epsilon_rdp``: dp_accounting's ``RdpAccountant`` (improved conversion);
* ``epsilon_pld``: dp_accounting's ``PLDAccountant`` (tightest; slow for tiny
  multipliers, so by default only after the last epoch).

All three treat a step as the Poisson-sampled Gaussian mechanism with rate
``q = batch_size / num_train`` and the *nominal* noise multiplier ``m_t``
(add-or-remove one example; Abadi et al. 2016, arXiv:1607.00133). Two caveats,
as in MindArmour, are recorded rather than hidden: batches are drawn by shuffling,
not Poisson sampling; and with adaptive clipping the noise std stays
``noise_norm_bound·m_t`` while the clip bound ``C_t`` moves, so the effective
multiplier is ``noise_norm_bound·m_t / C_t`` (column ``effective_noise_multiplier``),
and the noisy unclipped fraction it releases is not accounted for.

Semantics of one epoch: the training rows are permuted with
``jax.random.permutation(fold_in(data_key, epoch))``, the first
``steps_per_epoch · batch_size`` rows are taken (``drop_remainder`` as MindSpore's
batching), and the steps run inside one jitted ``lax.scan``. Evaluation is on the
whole test set after each epoch.
"""

from __future__ import annotations

import dataclasses
import math
import time
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax

from ldpsim import _xla
from ldpsim._checks import (
    LdpsimError,
    check_choice,
    check_nonnegative,
    check_open_unit,
    check_positive,
    check_positive_int,
    check_unit_interval,
)

OPTIMIZERS = ("sgd", "momentum", "adam")
NOISE_MECHANISMS = ("Gaussian", "AdaGaussian")
CLIP_MECHANISMS = ("Linear", "Geometric")
PLD_MODES = ("final", "every_epoch", "off")
KERNEL_INITS = ("he_normal", "lecun_normal", "glorot_uniform", "glorot_normal")
# MNIST normalisation used by MindArmour's generate_mnist_dataset (rescale 1/0.3081, shift).
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081

__all__ = ["CSV_COLUMNS", "DpsgdConfig", "load_config", "make_epoch_fn", "train_dpsgd"]

CSV_COLUMNS = (
    "epoch", "step", "dp", "train_loss", "accuracy", "loss", "epsilon_monitor", "epsilon_rdp",
    "epsilon_pld", "delta", "noise_multiplier", "clip_norm", "effective_noise_multiplier",
    "unclipped_fraction", "epoch_time", "wall_time",
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DpsgdConfig:
    """Settings of one centralised (DP-)SGD run; defaults are the MindArmour tutorial's.

    Attributes:
        dataset: dataset name for :func:`ldpsim.data.load_dataset` (``"mnist"``).
        data_dir: folder with the dataset files (None: ``$LDPSIM_DATA_DIR`` / loader default).
        normalize: standardise images with MNIST's mean/std (as MindArmour's loader does).
        resize: resize images to ``resize × resize`` (bilinear, before normalising), as
            MindArmour's loader does (32); None keeps the dataset's size.
        num_train: use only the first ``num_train`` training rows (None: all).
        num_test: use only the first ``num_test`` test rows (None: all).
        model: model name for :func:`ldpsim.models.get_model`.
        first_conv_padding: LeNet-5 only: ``"VALID"`` (the seed, on 32×32 inputs) or
            ``"SAME"`` (28×28 inputs); None: the model's default.
        conv_bias: LeNet-5 only: convolutions with a bias (None: the model's default,
            True; the seed has none).
        kernel_init_stddev: if set, re-draw every ``kernel`` from a normal truncated at
            ±2σ with this σ (the seed's ``TruncatedNormal(0.05)``); None: the model's init.
        kernel_init: if set, re-draw every ``kernel`` with this ``jax.nn.initializers``
            variance-scaling rule (fan-in/fan-out of HWIO and [in, out] kernels):
            ``"he_normal"`` (He et al. 2015, for ReLU networks), ``"lecun_normal"``
            (the model's default), ``"glorot_uniform"``, ``"glorot_normal"``; exclusive
            with ``kernel_init_stddev``.  Biases keep the model's init (zeros).
        epochs: training epochs.
        batch_size: batch size B (must be a multiple of ``micro_batches`` with DP).
        optimizer: ``"sgd"``, ``"momentum"`` (MindSpore ``nn.Momentum``) or ``"adam"``.
        learning_rate: step size.
        momentum: momentum of ``"momentum"``.
        dp: train with DP-SGD (False: plain full-batch gradients, no clipping or noise).
        micro_batches: M, the number of chunks each batch is split into and clipped separately.
        norm_bound: initial clip bound C₀ (DPModel ``norm_bound``).
        noise_multiplier: m₀, noise std / ``noise_norm_bound`` on the sum of clipped chunks.
        noise_norm_bound: the noise mechanism's ``norm_bound`` b (None: ``norm_bound``).
        noise_mechanism: ``"Gaussian"`` (constant m) or ``"AdaGaussian"`` (decaying m).
        noise_decay: ``"Time"``, ``"Step"`` or ``"Exp"`` (AdaGaussian only).
        noise_decay_rate: r of the decay rule.
        clip_mechanism: None (fixed C), ``"Linear"`` or ``"Geometric"`` adaptive clipping.
        clip_learning_rate, target_unclipped_quantile, fraction_stddev: adaptive clip rule.
        noise_follows_clip: noise std ``C_t·m_t`` instead of ``b·m_t`` (not MindArmour).
        delta: δ at which ε is reported.
        pld: when to compute the PLD ε: ``"final"``, ``"every_epoch"`` or ``"off"``.
        eval_batch_size: test-set batch size.
        seed: root seed (init, shuffling, noise).
    """

    dataset: str = "mnist"
    data_dir: str | None = None
    normalize: bool = True
    resize: int | None = None
    num_train: int | None = None
    num_test: int | None = None
    model: str = "lenet5"
    first_conv_padding: str | None = None
    conv_bias: bool | None = None
    kernel_init_stddev: float | None = None
    kernel_init: str | None = None
    epochs: int = 10
    batch_size: int = 256
    optimizer: str = "momentum"
    learning_rate: float = 0.01
    momentum: float = 0.9
    dp: bool = True
    micro_batches: int = 32
    norm_bound: float = 1.0
    noise_multiplier: float = 0.05
    noise_norm_bound: float | None = None
    noise_mechanism: str = "Gaussian"
    noise_decay: str | None = None
    noise_decay_rate: float = 6e-6
    clip_mechanism: str | None = "Linear"
    clip_learning_rate: float = 0.001
    target_unclipped_quantile: float = 0.9
    fraction_stddev: float = 0.01
    noise_follows_clip: bool = False
    delta: float = 1e-5
    pld: str = "final"
    eval_batch_size: int = 1000
    seed: int = 0

    def __post_init__(self) -> None:
        ints = ("epochs", "batch_size", "micro_batches", "eval_batch_size")
        for name in ints:
            object.__setattr__(self, name, check_positive_int(name, getattr(self, name)))
        if self.first_conv_padding is not None:
            check_choice("first_conv_padding", self.first_conv_padding, ("SAME", "VALID"))
            if self.model != "lenet5":
                raise LdpsimError(f"first_conv_padding applies to model='lenet5' only, got "
                                  f"model={self.model!r}")
        if self.conv_bias is not None and self.model != "lenet5":
            raise LdpsimError(f"conv_bias applies to model='lenet5' only, got model={self.model!r}")
        if self.kernel_init_stddev is not None:
            check_positive("kernel_init_stddev", self.kernel_init_stddev)
        if self.kernel_init is not None:
            check_choice("kernel_init", self.kernel_init, KERNEL_INITS)
            if self.kernel_init_stddev is not None:
                raise LdpsimError("set kernel_init or kernel_init_stddev, not both (got "
                                  f"{self.kernel_init!r} and {self.kernel_init_stddev!r})")
        for name in ("num_train", "num_test", "resize"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, check_positive_int(name, getattr(self, name)))
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise LdpsimError(f"seed must be an integer >= 0, got {self.seed!r}")
        check_choice("optimizer", self.optimizer, OPTIMIZERS)
        check_positive("learning_rate", self.learning_rate)
        check_unit_interval("momentum", self.momentum)
        check_positive("norm_bound", self.norm_bound)
        check_nonnegative("noise_multiplier", self.noise_multiplier)
        if self.noise_norm_bound is not None:
            check_positive("noise_norm_bound", self.noise_norm_bound)
        check_choice("noise_mechanism", self.noise_mechanism, NOISE_MECHANISMS)
        if self.noise_mechanism == "AdaGaussian":
            check_choice("noise_decay", self.noise_decay, ("Time", "Step", "Exp"))
        elif self.noise_decay is not None:
            raise LdpsimError(f"noise_decay must be unset for noise_mechanism='Gaussian', got "
                              f"{self.noise_decay!r}; use noise_mechanism='AdaGaussian'")
        check_unit_interval("noise_decay_rate", self.noise_decay_rate)
        if self.clip_mechanism is not None:
            check_choice("clip_mechanism", self.clip_mechanism, CLIP_MECHANISMS)
            if self.noise_mechanism == "AdaGaussian":
                raise LdpsimError("clip_mechanism must be unset with noise_mechanism="
                                  "'AdaGaussian' (MindArmour's DPModel refuses the combination)")
        check_nonnegative("clip_learning_rate", self.clip_learning_rate)
        check_unit_interval("target_unclipped_quantile", self.target_unclipped_quantile)
        check_nonnegative("fraction_stddev", self.fraction_stddev)
        check_open_unit("delta", self.delta)
        check_choice("pld", self.pld, PLD_MODES)
        if self.dp and self.batch_size % self.micro_batches:
            raise LdpsimError(f"batch_size ({self.batch_size}) must be a multiple of "
                              f"micro_batches, got micro_batches={self.micro_batches}")

    @property
    def private(self) -> bool:
        """Whether noise is added (DP on with a positive multiplier)."""
        return self.dp and self.noise_multiplier > 0


def load_config(path: str | Path | None = None, **overrides: Any) -> DpsgdConfig:
    """A :class:`DpsgdConfig` from a TOML file, with keyword overrides (None = keep).

    Tables (``[data]``, ``[train]``, ``[dp]``, ...) only group keys: every key must be
    a field of :class:`DpsgdConfig` and may appear once. A top-level ``name`` or
    ``description`` is ignored.

    Raises:
        LdpsimError: unreadable file, unknown or duplicate key, bad value.
    """
    values: dict[str, Any] = {}
    if path is not None:
        try:
            with open(path, "rb") as f:
                doc = tomllib.load(f)
        except (OSError, tomllib.TOMLDecodeError) as err:
            raise LdpsimError(f"cannot read config {str(path)!r}: {err}") from None
        fields = {f.name for f in dataclasses.fields(DpsgdConfig)}

        def take(table: Mapping[str, Any], where: str) -> None:
            for k, v in table.items():
                if isinstance(v, dict):
                    take(v, f"{where}{k}.")
                elif where == "" and k in ("name", "description"):
                    continue
                elif k not in fields:
                    raise LdpsimError(f"unknown key '{where}{k}' in {str(path)!r}; valid keys: "
                                      f"{', '.join(sorted(fields))}")
                elif k in values:
                    raise LdpsimError(f"key {k!r} appears twice in {str(path)!r}")
                else:
                    values[k] = v

        take(doc, "")
    values.update({k: v for k, v in overrides.items() if v is not None})
    for k in ("clip_mechanism", "noise_decay", "noise_norm_bound", "num_train", "num_test",
              "data_dir", "resize", "first_conv_padding", "conv_bias", "kernel_init_stddev",
              "kernel_init"):
        if values.get(k) in ("", "none", "None"):
            values[k] = None
    try:
        return DpsgdConfig(**values)
    except TypeError as err:
        raise LdpsimError(str(err)) from None


def _optimizer(config: DpsgdConfig, key: jax.Array) -> optax.GradientTransformation:
    from ldpsim.privacy import dpsgd

    base = {"sgd": lambda: optax.sgd(config.learning_rate),
            "momentum": lambda: optax.sgd(config.learning_rate, momentum=config.momentum),
            "adam": lambda: optax.adam(config.learning_rate)}[config.optimizer]()
    if not config.dp:
        return base
    return dpsgd.dp_optimizer(
        base, norm_bound=config.norm_bound, noise_multiplier=config.noise_multiplier, key=key,
        noise_decay=config.noise_decay if config.noise_mechanism == "AdaGaussian" else None,
        noise_decay_rate=config.noise_decay_rate, noise_norm_bound=config.noise_norm_bound,
        noise_follows_clip=config.noise_follows_clip, clip_decay=config.clip_mechanism,
        clip_learning_rate=config.clip_learning_rate,
        target_unclipped_quantile=config.target_unclipped_quantile,
        fraction_stddev=config.fraction_stddev)


def make_epoch_fn(apply_fn: Callable, optimizer: optax.GradientTransformation, *,
                  batch_size: int, micro_batches: int | None) -> Callable:
    """``epoch(params, opt_state, x, y, perm) -> (params, opt_state, losses)``, pure, jittable.

    ``perm`` is ``int32[steps, batch_size]`` row indices; one optimizer step per row of
    ``perm`` inside a ``lax.scan``. With ``micro_batches`` (DP), the gradients are
    per-chunk (:func:`ldpsim.privacy.dpsgd.microbatch_grads`) and ``optimizer`` must
    start with :func:`~ldpsim.privacy.dpsgd.dp_aggregate`; the loss is the mean of the
    chunk losses. Without, the gradient is that of the batch mean loss.
    """
    from ldpsim.privacy.dpsgd import microbatch_grads

    def loss_fn(p, batch):
        xb, yb = batch
        return optax.losses.softmax_cross_entropy_with_integer_labels(apply_fn(p, xb), yb).mean()

    def epoch(params, opt_state, x, y, perm):
        if perm.ndim != 2 or perm.shape[1] != batch_size:
            raise LdpsimError(f"perm must be [steps, batch_size={batch_size}], got {perm.shape}")

        def step(carry, idx):
            p, s = carry
            batch = (x[idx], y[idx])
            if micro_batches is None:
                loss, grads = jax.value_and_grad(loss_fn)(p, batch)
            else:
                grads, loss = microbatch_grads(loss_fn, p, batch, micro_batches)
            updates, s = optimizer.update(grads, s, p)
            return (optax.apply_updates(p, updates), s), loss

        (params, opt_state), losses = lax.scan(step, (params, opt_state), perm)
        return params, opt_state, losses

    return epoch


class _Ledger:
    """Privacy spent after each epoch: MindArmour's monitor and dp_accounting (RDP, PLD)."""

    def __init__(self, config: DpsgdConfig, num_train: int, steps_per_epoch: int) -> None:
        self.config, self.n, self.per_epoch = config, num_train, steps_per_epoch
        self.steps = 0
        if not config.private:
            return
        from ldpsim.privacy.monitors import RDPMonitor

        decay = config.noise_decay if config.noise_mechanism == "AdaGaussian" else None
        self.decay = decay
        self.monitor = RDPMonitor(num_train, config.batch_size, config.noise_multiplier,
                                  max_eps=None, target_delta=config.delta,
                                  noise_decay_mode=decay, noise_decay_rate=config.noise_decay_rate,
                                  per_print_times=steps_per_epoch)
        if decay is None:
            from ldpsim.privacy.accounting import SampledGaussianAccountant

            self.rdp = SampledGaussianAccountant(config.noise_multiplier, config.batch_size,
                                                 num_train, config.delta, method="rdp",
                                                 unit="example")
        else:
            import dp_accounting

            self.rdp = dp_accounting.rdp.RdpAccountant()

    def epoch_end(self, last: bool) -> dict[str, float]:
        """Record one more epoch of steps; return the ε columns."""
        cfg = self.config
        first, self.steps = self.steps, self.steps + self.per_epoch
        if not cfg.private:
            return {"epsilon_monitor": math.inf if cfg.dp else math.nan,
                    "epsilon_rdp": math.inf if cfg.dp else math.nan,
                    "epsilon_pld": math.inf if cfg.dp else math.nan}
        eps_monitor = math.nan
        for cur in range(first + 1, self.steps + 1):
            out = self.monitor.step_end(cur)
            if out is not None:
                eps_monitor = out[0]
        if self.decay is None:
            eps_rdp = self.rdp.epsilon(self.steps)
        else:
            import dp_accounting

            from ldpsim.privacy.monitors import decayed_noise_multipliers

            zs = decayed_noise_multipliers(cfg.noise_multiplier, np.arange(first, self.steps),
                                           self.decay, cfg.noise_decay_rate)
            q = cfg.batch_size / self.n
            for z in zs:
                self.rdp.compose(dp_accounting.PoissonSampledDpEvent(
                    q, dp_accounting.GaussianDpEvent(float(z))))
            eps_rdp = float(self.rdp.get_epsilon(cfg.delta))
        eps_pld = math.nan
        if self.decay is None and (cfg.pld == "every_epoch" or (cfg.pld == "final" and last)):
            from ldpsim.privacy.accounting import dpsgd_epsilon

            eps_pld = dpsgd_epsilon(noise_multiplier=cfg.noise_multiplier,
                                    batch_size=cfg.batch_size, num_examples=self.n,
                                    steps=self.steps, delta=cfg.delta, method="pld").epsilon
        return {"epsilon_monitor": eps_monitor, "epsilon_rdp": eps_rdp, "epsilon_pld": eps_pld}


def _load_data(config: DpsgdConfig):
    from ldpsim.data import load_dataset

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


def epoch_permutation(key: jax.Array, epoch: int, num_train: int, steps: int,
                      batch_size: int) -> jax.Array:
    """Row indices ``int32[steps, batch_size]`` of one epoch: fresh permutation, drop remainder."""
    perm = jax.random.permutation(jax.random.fold_in(key, epoch), num_train)
    return perm[: steps * batch_size].reshape(steps, batch_size).astype(jnp.int32)


def train_dpsgd(config: DpsgdConfig, *, progress: bool = False,
                callback: Callable[[dict], None] | None = None) -> list[dict]:
    """Train ``config.model`` centrally with (DP-)SGD and evaluate after every epoch.

    Args:
        config: a :class:`DpsgdConfig`.
        progress: show a tqdm bar over epochs (postfix: accuracy, ε).
        callback: called with each epoch's row as soon as it exists (e.g. to append to a CSV).

    Returns:
        One dict per epoch with the keys :data:`CSV_COLUMNS` plus ``compile_time``:
        test ``accuracy`` and ``loss``, mean ``train_loss`` of the epoch's steps, ε by the
        MindArmour monitor, dp_accounting RDP and PLD (NaN where not computed, inf
        when DP is on without noise, NaN with DP off), and the DP state (current
        ``noise_multiplier``, ``clip_norm``, ``effective_noise_multiplier``,
        last ``unclipped_fraction``).

    Raises:
        LdpsimError: bad config, missing data, or fewer training rows than one batch.
    """
    from ldpsim.fl.simulate import make_eval_fn
    from ldpsim.models import get_model

    start = time.perf_counter()
    x_tr, y_tr, x_te, y_te, num_classes = _load_data(config)
    n = x_tr.shape[0]
    steps_per_epoch = n // config.batch_size
    if steps_per_epoch < 1 or config.batch_size >= n:
        raise LdpsimError(f"batch_size must be < the number of training rows ({n}), "
                          f"got {config.batch_size}")
    options = {k: getattr(config, k) for k in ("first_conv_padding", "conv_bias")
               if getattr(config, k) is not None}
    model = get_model(config.model, input_shape=x_tr.shape[1:], num_classes=num_classes,
                      **options)
    root = jax.random.key(config.seed)
    params = model.init(jax.random.fold_in(root, 1), jnp.zeros((1,) + x_tr.shape[1:]))
    if config.kernel_init_stddev is not None:
        sd = config.kernel_init_stddev
        params = _redraw_kernels(params, jax.random.fold_in(root, 4),
                                 lambda k, shape, dtype: sd * jax.random.truncated_normal(
                                     k, -2.0, 2.0, shape, dtype))
    elif config.kernel_init is not None:
        params = _redraw_kernels(params, jax.random.fold_in(root, 4),
                                 getattr(jax.nn.initializers, config.kernel_init)())
    data_key = jax.random.fold_in(root, 2)
    optimizer = _optimizer(config, jax.random.fold_in(root, 3))
    opt_state = optimizer.init(params)
    x_tr, y_tr = jnp.asarray(x_tr), jnp.asarray(y_tr)
    x_te, y_te = jnp.asarray(x_te), jnp.asarray(y_te)
    epoch_fn = make_epoch_fn(model.apply, optimizer, batch_size=config.batch_size,
                             micro_batches=config.micro_batches if config.dp else None)
    perm0 = epoch_permutation(data_key, 0, n, steps_per_epoch, config.batch_size)
    t0 = time.perf_counter()
    epoch_c = _xla.jit(epoch_fn, donate_argnums=(0, 1)).lower(
        params, opt_state, x_tr, y_tr, perm0).compile()
    evaluate = _xla.jit(make_eval_fn(model.apply, config.eval_batch_size))
    compile_time = time.perf_counter() - t0
    ledger = _Ledger(config, n, steps_per_epoch)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=config.epochs, desc="DP-SGD" if config.dp else "SGD", unit="epoch")
    history: list[dict] = []
    try:
        for e in range(config.epochs):
            t_epoch = time.perf_counter()
            perm = perm0 if e == 0 else epoch_permutation(data_key, e, n, steps_per_epoch,
                                                          config.batch_size)
            params, opt_state, losses = epoch_c(params, opt_state, x_tr, y_tr, perm)
            acc, loss = evaluate(params, x_te, y_te)
            row = {"epoch": e + 1, "step": (e + 1) * steps_per_epoch, "dp": config.dp,
                   "train_loss": float(jnp.mean(losses)), "accuracy": float(acc),
                   "loss": float(loss)}
            row.update(ledger.epoch_end(last=e == config.epochs - 1))
            row["delta"] = config.delta if config.dp else math.nan
            row.update(_dp_state_columns(config, opt_state))
            row["epoch_time"] = time.perf_counter() - t_epoch
            row["wall_time"] = time.perf_counter() - start
            row["compile_time"] = compile_time
            history.append(row)
            if callback is not None:
                callback(row)
            if bar is not None:
                bar.set_postfix(accuracy=f"{row['accuracy']:.4f}",
                                eps=f"{row['epsilon_monitor']:.4g}")
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return history


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
