"""Settings of a centralised DP-SGD run (:class:`DpsgdConfig`, MindArmour's tutorial defaults),
read from TOML by :func:`load_config`, and the columns of its results and per-step trace."""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ldpsim._src._checks import (
    LdpsimError,
    check_choice,
    check_nonnegative,
    check_open_unit,
    check_positive,
    check_positive_int,
    check_unit_interval,
)

__all__ = ["CLIP_MECHANISMS", "CSV_COLUMNS", "KERNEL_INITS", "NOISE_MECHANISMS", "OPTIMIZERS",
           "PLD_MODES", "SAMPLINGS", "TRACE_COLUMNS", "DpsgdConfig", "UnaccountedReleaseWarning",
           "load_config"]

OPTIMIZERS = ("sgd", "momentum", "adam")
NOISE_MECHANISMS = ("Gaussian", "AdaGaussian")
CLIP_MECHANISMS = ("Linear", "Geometric")
PLD_MODES = ("final", "every_epoch", "off")
SAMPLINGS = ("poisson", "shuffle")
KERNEL_INITS = ("he_normal", "lecun_normal", "glorot_uniform", "glorot_normal")
# MNIST normalisation used by MindArmour's generate_mnist_dataset (rescale 1/0.3081, shift).
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081

CSV_COLUMNS = (
    "epoch", "step", "dp", "sampling", "train_loss", "accuracy", "loss", "epsilon",
    "epsilon_rdp", "epsilon_pld", "epsilon_monitor", "delta", "neighbouring", "sensitivity",
    "accounted_noise_multiplier", "fraction_noise_multiplier", "accounting",
    "sampler_delta_floor", "noise_multiplier", "clip_norm", "effective_noise_multiplier", "unclipped_fraction",
    "epoch_time", "wall_time",
)
#: Columns of the per-step trace (:func:`train_dpsgd` ``trace``, ``ldpsim dpsgd --trace``):
#: the clip bound C_t and noise multiplier m_t the step used (from the DP state before
#: its update), and the accountant's value and combined multipliers of that step.
TRACE_COLUMNS = ("step", "epoch", "clip_norm", "noise_multiplier", "value_noise_multiplier",
                 "accounted_noise_multiplier")


class UnaccountedReleaseWarning(UserWarning):
    """Something is released without noise (the unclipped fraction with
    ``fraction_stddev = 0``): no finite ε holds, ε is reported as inf."""


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
        epochs: training epochs (``num_train // batch_size`` steps each).
        batch_size: batch size B (the expected batch with Poisson sampling; must be a
            multiple of ``micro_batches`` with DP).
        sampling: how batches are drawn, which fixes what ε means (module docstring):
            ``"poisson"`` (default: each example independently with probability
            ``q = B/num_train`` every step; add-or-remove-one-example ε with Poisson
            amplification) or ``"shuffle"`` (MindArmour: a fresh permutation per epoch cut
            into disjoint batches; replace-one-example ε of ``epochs`` Gaussians, no
            amplification).
        optimizer: ``"sgd"``, ``"momentum"`` (MindSpore ``nn.Momentum``) or ``"adam"``.
        learning_rate: step size.
        momentum: momentum of ``"momentum"``.
        dp: train with DP-SGD (False: plain full-batch gradients, no clipping or noise).
        micro_batches: M, the number of units clipped separately: ``"shuffle"`` splits each
            batch into M contiguous chunks of B/M rows (MindArmour); ``"poisson"`` puts
            example ``i`` in chunk ``i mod M``. ``M = B`` is per-example clipping, the only
            setting with sensitivity C (Poisson); any ``M < B`` has sensitivity 2C.
        norm_bound: initial clip bound C₀ (DPModel ``norm_bound``).
        noise_multiplier: m₀, noise std / ``noise_norm_bound`` on the sum of clipped units
            (the accountant uses ``b·m/(s·C₀)`` for sensitivity ``s·C₀``, s ∈ {1, 2}).
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
        seed: root seed (init, sampling, noise).
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
    sampling: str = "poisson"
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
        check_choice("sampling", self.sampling, SAMPLINGS)
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
