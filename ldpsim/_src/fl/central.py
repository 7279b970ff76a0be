"""Centralised (non-federated) DP-SGD training, as MindArmour's ``DPModel`` runs it.

This is the MindArmour LeNet-5 tutorial (seed 002, ALGORITHMS §2.3–2.5) in JAX:
one model, the whole training set, per-micro-batch clipping with Gaussian noise in
front of SGD / Momentum / Adam, and after every epoch the test accuracy and the
privacy spent.

Sampling (``DpsgdConfig.sampling``), and what the reported ε is a guarantee of:

* ``"poisson"`` (default; Opacus' and jax_privacy's default): at every step each of the
  ``n`` training examples is included independently with probability
  ``q = batch_size / n`` (expected batch ``B``; the comparison ``bits < ⌊q·2³²⌋`` of
  32 random bits makes the true rate ``⌊q·2³²⌋/2³² ≤ q``, so accounting with ``q`` is
  conservative). The step is jitted as a padded batch of a fixed *capacity* ``K`` with a
  validity mask, ``K`` chosen so that ``P(Binomial(n, q) > K) < 1e-9``
  (:func:`poisson_capacity`). A larger draw is **not truncated**: the step processes
  the sampled rows in further blocks of ``K`` (a ``lax.fori_loop`` over
  ``ceil(count/K)`` blocks), so every step is exactly the Poisson-sampled mechanism and
  only its running time depends on the draw. The *units* clipped to ``C``:

  - ``micro_batches == batch_size``: every sampled example (per-example clipping);
  - otherwise ``M = micro_batches`` chunks fixed by the example's index (example ``i``
    is in chunk ``i mod M``, independent of the data and of the other draws); a chunk's
    unit is the gradient of the *sum* of its sampled rows' losses divided by the
    expected chunk size ``B/M`` (MindArmour's chunk mean when a chunk has ``B/M`` rows).

  The noise ``N(0, (b·m_t)²)`` is added to the *sum* of the clipped units and the sum
  is divided by the expected number of units (``B`` per-example, ``M`` chunks), so
  without clipping the step is the standard Poisson DP-SGD estimator
  ``Σ_{i sampled} ∇ℓ_i / B``. Accounting: dp_accounting's ``PoissonSampledDpEvent(q,
  GaussianDpEvent(z_t))`` for every step t, **add-or-remove one example** neighbours.
* ``"shuffle"`` (MindArmour's batching, for parity): every epoch the rows are permuted
  with ``jax.random.permutation(fold_in(data_key, epoch))``, the first
  ``steps_per_epoch · batch_size`` rows are cut into disjoint batches (remainder
  dropped, as MindSpore's batching), each batch into ``M`` contiguous chunks of
  ``B/M`` rows whose mean-loss gradients are clipped (:func:`make_epoch_fn`). No
  amplification is claimed: the batch positions are data-independent and every example
  is in exactly one batch per epoch, so (parallel composition) an epoch is one Gaussian
  mechanism with sensitivity ``2C`` under **replace-one-example** neighbours (add/remove
  would change the permutation of every row), and ``E`` epochs are ``E`` Gaussians
  (multiplier ``z = b·m/(2C)`` with a fixed clip bound), whose ε is exact (``E``
  Gaussians of multiplier ``z`` are one of ``z/√E``; Balle & Wang 2018, Thm. 8).

Sensitivity of the value. Adding, removing or replacing one example changes one unit's
clipped gradient from ``g`` to ``g'`` with ``‖g − g'‖ ≤ 2C`` whenever the unit can hold
other examples (a chunk), and ``≤ C`` for add/remove when every unit is one example. So the
L2 sensitivity of the noised sum is ``s·C_t`` with ``s = 1`` only for Poisson sampling with
per-example clipping, and ``s = 2`` otherwise (every micro-batch setting with ``M < B``, and
every shuffled run). :func:`privacy_setting` gives sampling, neighbouring relation and
sensitivity of a config.

What one step releases, and its noise multiplier (:func:`step_noise_multipliers`):

* the value: the sum of clipped units plus ``N(0, σ_t² I)``, ``σ_t = b·m_t`` (MindArmour:
  ``b = noise_norm_bound``, default ``C₀``) or ``σ_t = C_t·m_t`` (``noise_follows_clip``);
  multiplier ``z_v,t = σ_t / (s·|C_t|)``. With a fixed clip bound ``C_t = C₀``.
* with adaptive clipping (``clip_mechanism`` ``"Linear"``/``"Geometric"``, MindArmour's
  default) also the noisy unclipped fraction ``β̃_t = β_t/M + N(0, σ_f²)``
  (``β_t = #{units with norm < C_t}``, ``M = micro_batches``, ``= B`` per-example;
  :func:`ldpsim._src.privacy.dpsgd.dp_aggregate`, :func:`presummed_dp_aggregate`), from which
  ``C_{t+1}`` is computed (Linear ``C_t − η(β̃_t − γ)``, Geometric
  ``C_t·exp(−η(β̃_t − γ))``; ``C_{t+1}`` determines ``β̃_t``, so it is a release). One
  example changes one unit — under Poisson add/remove a unit appears, disappears or
  changes, under shuffle replace-one a unit changes — so ``β_t`` moves by at most 1 and
  ``β_t/M`` by ``1/M``, whatever the unit: multiplier ``z_f = σ_f·M`` (the same under
  both relations; the value's factor 2 comes from the clipped vector, not from a count).
  With ``η = 0`` the fraction influences nothing and is not a release. With
  ``fraction_stddev = 0`` it is released **without noise**: no finite ε holds, ε is
  ``inf`` and a :class:`UnaccountedReleaseWarning` is raised.
* both releases use the same batch. Scaled by their noise, ``(V/σ_t, F/σ_f)`` is a
  Gaussian with identity covariance whose mean moves by at most
  ``√(1/z_v,t² + 1/z_f²)`` between neighbours: the step is **one** Gaussian mechanism
  of multiplier ``z_t``, ``1/z_t² = 1/z_v,t² + 1/z_f²``
  (:func:`combine_noise_multipliers`). Without sampling this is exactly the
  composition of the two Gaussians, in RDP (``α/(2z_v²) + α/(2z_f²) = α/(2z_t²)`` at
  every order) and in PLD (the privacy loss of a Gaussian of multiplier z is
  ``N(μ²/2, μ²)`` with ``μ = 1/z``; two of them convolve into the one of
  ``μ² = μ_v² + μ_f²``, i.e. μ-GDP composition, Dong, Roth & Su 2022 — the tests check
  both with dp_accounting). Under Poisson sampling the step is the sampled
  Gaussian of ``z_t`` (one sampled set shifts both means); composing two *separately*
  sampled events would model two independent batches and gives a smaller, wrong ε.

Which multipliers are composed. ``C_t`` is a function of ``C₀`` and the earlier noisy
fractions ``β̃_0 … β̃_{t−1}`` only, i.e. post-processing of outputs already released (and
accounted), and ``m_t`` is data-independent; so ``z_t`` is fixed before step t runs, from
public information. The trainer records ``C_t`` and ``m_t`` from the DP state at every
step (``trace`` of :func:`train_dpsgd`; ``ldpsim dpsgd --trace``), and the accountant
composes the realised ``z_t``. This is sound by privacy filters, which allow each
mechanism's guarantee to be chosen adaptively from earlier outputs (RDP: Feldman & Zrnic
2021, arXiv:2008.11193; Gaussian DP: Smith & Thakurta 2022, arXiv:2210.17520; the PLD is
only used when every multiplier is the same, i.e. fixed in advance):
for any budget fixed in advance, the run stopped before its composed RDP (or
``Σ 1/z²``) exceeds it satisfies that budget; as the trajectory is part of the output, the
outcomes whose reported ε is within a threshold fixed in advance satisfy the (ε, δ)
inequality at that threshold (the run and the filter coincide on them). A trajectory
fixed in advance would make the same number a plain guarantee.

Reported ε (δ = ``config.delta``), after every epoch:

* ``"poisson"``: dp_accounting RDP (its default orders, :data:`RDP_ORDERS`) of
  ``PoissonSampledDpEvent(q, GaussianDpEvent(z_t))`` over the steps, one event per
  distinct ``z_t`` with its count (the RDP of each distinct value is computed once,
  :func:`_poisson_rdp`). An epoch with more than :data:`EXACT_DISTINCT_MULTIPLIERS`
  distinct values (adaptive clipping, noise decay) has each ``z_t`` rounded *down* to the
  grid ``GRID_RATIO**k`` (RDP decreases in z, so this only raises ε: z at most 1 %
  smaller, ε at most a few % larger), which keeps the 2,340 steps of the MindArmour
  configuration to ~70 distinct values, about a second. ``epsilon_pld``: dp_accounting
  PLD, only when every step has the same multiplier, fixed before the run (a fixed clip
  bound or ``noise_follows_clip``, no decay; slow for tiny multipliers, so by default
  after the last epoch, ``config.pld``); NaN otherwise, the ``accounting`` column says
  so: a PLD per distinct multiplier costs ~10 s at the MindArmour multipliers, and
  composing PLDs of adaptively chosen multipliers lacks the filter theorem RDP and GDP
  have. For tiny multipliers the RDP bound is loose (z = 0.025, q = 256/60000, 2,340
  steps: RDP 1.9e6, PLD 2.1e4).
* ``"shuffle"``: every example is in exactly one step of an epoch, at a data-independent
  position; the other steps' releases have the same distribution under both neighbours
  given the past, so an epoch's privacy loss is that of the one step holding the changed
  example, whose multiplier is at least the epoch's smallest ``z_t``: an epoch is charged
  the Gaussian of ``z_e = min_t z_t`` (worst case over the positions), and ``E`` epochs
  compose exactly into the Gaussian of ``1/z² = Σ_e 1/z_e²``: ``epsilon_pld`` is its
  exact ε (Balle & Wang 2018), ``epsilon_rdp`` the RDP bound.
* ``epsilon``: the smaller of ``epsilon_rdp`` and ``epsilon_pld`` (both are valid
  bounds): *the* ε of this run. ``accounting`` states in one line how it was computed.
* ``epsilon_monitor``: MindArmour's ``RDPMonitor`` arithmetic
  (:class:`ldpsim._src.privacy.monitors.RDPMonitor`: 11 orders, classic conversion, its
  P+1-step window) with the nominal multiplier ``m_t``: it assumes Poisson sampling,
  sensitivity C and a fixed clip bound, and ignores the released fraction — MindArmour's
  figure (:data:`MONITOR_LABEL`), not a guarantee of this run.

Noise decay (AdaGaussian, which MindArmour allows only with a fixed clip bound) enters
through ``m_t``: each Poisson step has its own multiplier, a shuffled epoch is charged its
smallest (its last). Not covered by ε: the diagnostic columns ``train_loss`` and
``unclipped_fraction`` (computed from the training data without noise), and the
floating-point sampler's bounded tails (``docs/privacy_sharp_edges.md`` §4).

Evaluation is on the whole test set after each epoch. Both samplings run
``steps_per_epoch = num_train // batch_size`` steps per epoch inside one jitted
``lax.scan``.
"""

from __future__ import annotations

import dataclasses
import math
import time
import tomllib
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from dp_accounting.rdp import RdpAccountant as _RdpAccountant
from jax import lax

from ldpsim._src import _xla
from ldpsim._src._checks import (
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
SAMPLINGS = ("poisson", "shuffle")
_DP_DEFAULT_ORDERS = _RdpAccountant().orders
KERNEL_INITS = ("he_normal", "lecun_normal", "glorot_uniform", "glorot_normal")
# MNIST normalisation used by MindArmour's generate_mnist_dataset (rescale 1/0.3081, shift).
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081
# P(a Poisson batch exceeds the padded capacity) per step; larger draws still run exactly.
POISSON_OVERFLOW_PROBABILITY = 1e-9
MONITOR_LABEL = ("MindArmour's RDPMonitor with the nominal multiplier: assumes Poisson "
                 "sampling, sensitivity C and a fixed clip bound, ignores the released "
                 "unclipped fraction - not the guarantee of this run")
#: An epoch with more distinct step multipliers than this has them rounded down to the
#: geometric grid GRID_RATIO**k before the Poisson RDP composition (conservative).
EXACT_DISTINCT_MULTIPLIERS = 16
GRID_RATIO = 1.01
#: RDP orders of the accountant: dp_accounting's defaults (1.1 … 1024). Orders closer to 1
#: would lower the (meaningless, ε ≳ 10³) figures of tiny multipliers, but dp_accounting's
#: series for them fails to converge at moderate q.
RDP_ORDERS = tuple(float(a) for a in _DP_DEFAULT_ORDERS)

__all__ = ["CSV_COLUMNS", "EXACT_DISTINCT_MULTIPLIERS", "GRID_RATIO", "MONITOR_LABEL",
           "RDP_ORDERS", "SAMPLINGS", "TRACE_COLUMNS", "DpsgdConfig", "PrivacySetting",
           "UnaccountedReleaseWarning", "combine_noise_multipliers", "epoch_keys",
           "epoch_permutation", "epsilon_by_epoch", "fraction_noise_multiplier",
           "load_config", "make_epoch_fn", "make_poisson_epoch_fn", "num_train_rows",
           "poisson_capacity", "poisson_sample", "presummed_dp_aggregate", "privacy_setting",
           "read_trace", "step_noise_multipliers", "train_dpsgd"]

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


@dataclasses.dataclass(frozen=True)
class PrivacySetting:
    """What the ε of a :class:`DpsgdConfig` run refers to (see the module docstring).

    Attributes:
        sampling: ``"poisson"`` or ``"shuffle"``.
        neighbouring: ``"add-or-remove one example"`` (Poisson) or ``"replace one example"``
            (shuffle).
        sensitivity_factor: s, the L2 sensitivity of the noised sum in units of the clip
            bound C: 1 for Poisson sampling with per-example clipping, else 2.
        noise_ratio: with the clip bound at ``C₀``, the value's multiplier is
            ``m_t · noise_ratio`` (noise std ``b·m_t`` over the sensitivity ``s·C₀``;
            ``1/s`` with ``noise_follows_clip``, whatever ``C_t``).
        reason: why that sensitivity, in words.
        fraction_noise_multiplier: ``z_f = σ_f·M`` of the unclipped-fraction release
            (:func:`fraction_noise_multiplier`): ``inf`` when nothing is released (fixed
            clip bound, or ``clip_learning_rate = 0``), 0 when it is released without noise.
    """

    sampling: str
    neighbouring: str
    sensitivity_factor: int
    noise_ratio: float
    reason: str
    fraction_noise_multiplier: float = math.inf

    @property
    def sensitivity(self) -> str:
        """``"C"`` or ``"2C"``."""
        return "C" if self.sensitivity_factor == 1 else f"{self.sensitivity_factor}C"

    def accounting(self, config: DpsgdConfig) -> str:
        """How the ε of ``config`` is computed, in one line (the ``accounting`` column gives
        the realised version: number of steps, grid, PLD or why not)."""
        if not config.dp:
            return "no DP"
        if not config.private or self.fraction_noise_multiplier == 0:
            return "none: a release without noise, epsilon = inf"
        parts = []
        adaptive = config.clip_mechanism is not None
        if adaptive and not config.noise_follows_clip:
            parts.append(f"value z_t = b*m_t/({self.sensitivity_factor}*C_t) from the recorded "
                         "clip bound C_t")
        else:
            parts.append("value z_t = " + (f"m_t/{self.sensitivity_factor}"
                                           if config.noise_follows_clip else
                                           f"{self.noise_ratio:.6g}*m_t"))
        if math.isfinite(self.fraction_noise_multiplier):
            parts.append(f"combined with the unclipped-fraction release z_f = sigma_f*M = "
                         f"{self.fraction_noise_multiplier:.6g} (1/z^2 = 1/z_t^2 + 1/z_f^2)")
        how = ("Poisson-sampled Gaussian per step, q = batch_size/num_train (RDP; PLD when "
               "every step has the same z)" if self.sampling == "poisson" else
               "one Gaussian per epoch at the epoch's smallest z, composed exactly")
        return f"{how}; " + ", ".join(parts)

    def describe(self, config: DpsgdConfig) -> str:
        """One line for a log: sampling, neighbours, sensitivity and how ε is accounted."""
        if not config.dp:
            return f"SGD without DP, sampling={self.sampling}: no privacy guarantee"
        how = ("each example independently with q = batch_size/num_train per step"
               if self.sampling == "poisson" else
               "a fresh permutation per epoch cut into disjoint batches, no amplification")
        z0 = combine_noise_multipliers(config.noise_multiplier * self.noise_ratio,
                                       self.fraction_noise_multiplier)
        text = (f"DP-SGD, sampling={self.sampling} ({how}); epsilon is for "
                f"{self.neighbouring} neighbours, sensitivity {self.sensitivity} "
                f"({self.reason}); accounting: {self.accounting(config)}; "
                f"accounted noise multiplier {z0:.6g}")
        if config.clip_mechanism is not None and not config.noise_follows_clip and z0 > 0:
            text += " at C_0 (it moves with C_t)"
        if config.private and self.fraction_noise_multiplier == 0:
            text += ("; WARNING: adaptive clipping with fraction_stddev = 0 releases the "
                     "unclipped fraction without noise: epsilon = inf")
        return text


def fraction_noise_multiplier(config: DpsgdConfig) -> float:
    """``z_f``, the noise multiplier of the unclipped-fraction release of adaptive clipping.

    Every step of adaptive clipping releases ``β/M + N(0, σ_f²)`` (through ``C_{t+1}``),
    with ``β`` the number of the ``M`` units (``M = micro_batches``; examples when
    ``M = B``) whose norm is below ``C_t``. One example changes one unit, so ``β`` by at
    most 1 — under add/remove (Poisson: a unit appears, disappears or changes) and under
    replace-one (shuffle) alike — and ``β/M`` by ``1/M``: ``z_f = σ_f·M``.

    Returns ``inf`` when no fraction is released (``clip_mechanism`` None, or
    ``clip_learning_rate = 0``, when ``C_t`` never moves) or DP is off, and ``0.0`` when
    it is released without noise (``fraction_stddev = 0``): then no finite ε holds.
    """
    if not config.dp or config.clip_mechanism is None or config.clip_learning_rate == 0:
        return math.inf
    return float(config.fraction_stddev) * config.micro_batches


def combine_noise_multipliers(*multipliers: float) -> float:
    """The multiplier of several Gaussian releases on the same data (same sampled batch).

    ``1/z² = Σ_i 1/z_i²`` (``inf`` terms contribute nothing, a 0 term gives 0): scaled by
    their noise stds the releases form one Gaussian of identity covariance whose mean
    moves by at most ``√Σ 1/z_i²``. Without sampling this is exactly their composition
    (RDP ``α/(2z²)`` adds; μ-GDP ``μ² = Σ μ_i²`` with ``μ = 1/z``). Example: 0.2 and 0.32
    give 0.16958.
    """
    finite = []
    for z in multipliers:
        z = float(z)
        if math.isnan(z) or z < 0:
            raise LdpsimError(f"noise multipliers must be >= 0, got {z}")
        if z == 0:
            return 0.0
        if math.isfinite(z):
            finite.append(z)
    if len(finite) <= 1:
        return finite[0] if finite else math.inf
    return 1.0 / math.sqrt(sum(1.0 / (z * z) for z in finite))


def step_noise_multipliers(config: DpsgdConfig, clip_norms: Any, noise_multipliers: Any
                           ) -> tuple[np.ndarray, np.ndarray]:
    """``(z_value, z)`` per step: the value release's and the step's combined multiplier.

    ``clip_norms`` and ``noise_multipliers`` are the ``C_t`` and ``m_t`` each step used
    (arrays of one length; a scalar broadcasts). ``z_value = σ_t/(s·|C_t|)`` with
    ``σ_t = b·m_t`` (``C_t·m_t`` with ``noise_follows_clip``, i.e. ``m_t/s``) and ``s``
    from :func:`privacy_setting`; ``z = (1/z_value² + 1/z_f²)^(-1/2)`` with
    ``z_f`` = :func:`fraction_noise_multiplier` (module docstring). ``inf`` where nothing
    data-dependent is released (``C_t = 0`` and no fraction), 0 where something is released
    without noise.
    """
    setting = privacy_setting(config)
    s = setting.sensitivity_factor
    c = np.abs(np.asarray(clip_norms, np.float64))
    m = np.asarray(noise_multipliers, np.float64)
    c, m = np.broadcast_arrays(c, m)
    bound = config.noise_norm_bound if config.noise_norm_bound is not None else config.norm_bound
    with np.errstate(divide="ignore", invalid="ignore"):
        if config.noise_follows_clip:
            # noise C_t·m_t on sensitivity s·C_t; nothing released when C_t = 0
            z_value = np.where(c > 0, m / s, np.inf)
        else:
            z_value = np.where(c > 0, bound * m / (s * c), np.inf)
        # A non-finite C_t does not bound anything (clipping leaves the update unchanged).
        z_value = np.where(np.isfinite(c), z_value, 0.0)
        z_f = setting.fraction_noise_multiplier
        if math.isinf(z_f):
            z = z_value
        elif z_f == 0:
            z = np.zeros_like(z_value)
        else:
            z = 1.0 / np.sqrt(1.0 / z_value**2 + 1.0 / z_f**2)
    return z_value, z


def privacy_setting(config: DpsgdConfig) -> PrivacySetting:
    """Sampling, neighbouring relation and sensitivity that ``config``'s ε refers to.

    Poisson sampling with ``micro_batches == batch_size`` (per-example clipping) is the
    only setting with sensitivity ``C``: adding or removing an example adds or removes one
    clipped gradient. With ``micro_batches < batch_size`` one example changes one chunk's
    clipped gradient from ``g`` to ``g'``, ``‖g − g'‖ ≤ 2C``. Shuffled batches are
    accounted under replace-one neighbours, ``2C`` whatever M. The unclipped-fraction
    release of adaptive clipping has multiplier :func:`fraction_noise_multiplier`.
    """
    per_example = config.micro_batches == config.batch_size
    if config.sampling == "poisson":
        neighbouring = "add-or-remove one example"
        s = 1 if per_example else 2
        reason = ("per-example clipping: one example adds or removes one clipped gradient"
                  if per_example else
                  f"{config.micro_batches} micro-batches of "
                  f"~{config.batch_size // config.micro_batches} examples: one example "
                  "changes one micro-batch's clipped gradient by up to 2C")
    else:
        neighbouring = "replace one example"
        s = 2
        reason = ("replacing one example changes one clipped "
                  + ("gradient" if per_example else "micro-batch gradient") + " by up to 2C")
    bound = config.noise_norm_bound if config.noise_norm_bound is not None else config.norm_bound
    ratio = (1.0 if config.noise_follows_clip else bound / config.norm_bound) / s
    return PrivacySetting(config.sampling, neighbouring, s, ratio, reason,
                          fraction_noise_multiplier(config))


def poisson_capacity(num_train: int, batch_size: int,
                     overflow_probability: float = POISSON_OVERFLOW_PROBABILITY) -> int:
    """Padded batch capacity K with ``P(Binomial(num_train, q) > K) < overflow_probability``.

    ``q = batch_size / num_train``. A draw above K is still processed exactly (in more
    blocks of K rows), so K only trades memory and time, never privacy.
    """
    from scipy.stats import binom

    n = check_positive_int("num_train", num_train)
    b = check_positive_int("batch_size", batch_size)
    p = check_open_unit("overflow_probability", overflow_probability)
    q = min(b / n, 1.0)
    k = int(binom.isf(p, n, q))
    while k < n and binom.sf(k, n, q) >= p:  # isf is a float search: make sure
        k += 1
    return max(1, min(k, n))


def _poisson_threshold(batch_size: int, num_train: int) -> int:
    """``⌊q·2³²⌋`` for q = batch_size/num_train (exact integers), at most 2³²−1."""
    return min((batch_size << 32) // num_train, 2**32 - 1)


def poisson_sample(key: jax.Array, num_train: int, batch_size: int) -> jax.Array:
    """``bool[num_train]``: each example independently with probability ``≤ q = B/n``.

    Example ``i`` is included iff its 32 random bits are ``< ⌊q·2³²⌋``, so the rate is
    exactly ``⌊q·2³²⌋/2³²`` (``q`` up to < 2.4e-10): accounting with ``q`` is conservative.
    """
    bits = jax.random.bits(key, (num_train,), jnp.uint32)
    return bits < jnp.uint32(_poisson_threshold(batch_size, num_train))


def _optimizer(config: DpsgdConfig, key: jax.Array, *, presummed_divisor: int | None = None
               ) -> optax.GradientTransformation:
    from ldpsim._src.privacy import dpsgd

    base = {"sgd": lambda: optax.sgd(config.learning_rate),
            "momentum": lambda: optax.sgd(config.learning_rate, momentum=config.momentum),
            "adam": lambda: optax.adam(config.learning_rate)}[config.optimizer]()
    if not config.dp:
        return base
    kwargs = dict(
        norm_bound=config.norm_bound, noise_multiplier=config.noise_multiplier, key=key,
        noise_decay=config.noise_decay if config.noise_mechanism == "AdaGaussian" else None,
        noise_decay_rate=config.noise_decay_rate, noise_norm_bound=config.noise_norm_bound,
        noise_follows_clip=config.noise_follows_clip, clip_decay=config.clip_mechanism,
        clip_learning_rate=config.clip_learning_rate,
        target_unclipped_quantile=config.target_unclipped_quantile,
        fraction_stddev=config.fraction_stddev)
    if presummed_divisor is not None:
        return optax.chain(presummed_dp_aggregate(presummed_divisor, **kwargs), base)
    return dpsgd.dp_optimizer(base, **kwargs)


def presummed_dp_aggregate(divisor: int, **dp_kwargs: Any) -> optax.GradientTransformation:
    """:func:`ldpsim._src.privacy.dpsgd.dp_aggregate` for units clipped and summed by the caller.

    ``update((total, unclipped_count), state)``: ``total`` is ``Σ_j clip(g_j, C_t)`` over a
    variable number of units (``C_t = state.clip_norm``) and ``unclipped_count`` the number
    of them with ``‖g_j‖ < C_t``; returns ``(total + N(0, (b·m_t)²)) / divisor`` and the
    next state, with ``unclipped_fraction = unclipped_count / divisor``. Same state, key
    schedule, noise, clip and decay rules as ``dp_aggregate`` (which is this with
    ``divisor`` = the number of units, all valid); used for Poisson batches with
    per-example clipping, where ``divisor`` is the expected batch size.
    """
    from ldpsim._src.privacy.dpsgd import dp_aggregate, noisy_sum_step

    divisor = check_positive_int("divisor", divisor)
    inner = dp_aggregate(**dp_kwargs)
    rules = dict(noise_follows_clip=bool(dp_kwargs.get("noise_follows_clip", False)),
                 clip_decay=dp_kwargs.get("clip_decay"), noise_decay=dp_kwargs.get("noise_decay"))

    def update_fn(updates, state, params=None):
        del params
        total, unclipped_count = updates
        unclipped = jnp.asarray(unclipped_count, jnp.float32) / divisor
        return noisy_sum_step(total, unclipped, divisor, state, **rules)

    return optax.GradientTransformation(inner.init, update_fn)


def _cross_entropy(apply_fn: Callable) -> Callable:
    def loss_fn(p, batch):
        xb, yb = batch
        return optax.losses.softmax_cross_entropy_with_integer_labels(apply_fn(p, xb), yb).mean()

    return loss_fn


def _dp_record(opt_state: Any) -> dict[str, jax.Array]:
    """The clip bound and noise multiplier the next update uses (empty without DP state)."""
    from ldpsim._src.privacy.dpsgd import DPAggregateState

    if isinstance(opt_state, tuple) and opt_state and isinstance(opt_state[0],
                                                                 DPAggregateState):
        return {"clip_norm": opt_state[0].clip_norm,
                "noise_multiplier": opt_state[0].noise_multiplier}
    return {}


def make_epoch_fn(apply_fn: Callable, optimizer: optax.GradientTransformation, *,
                  batch_size: int, micro_batches: int | None) -> Callable:
    """Shuffle sampling: ``epoch(params, opt_state, x, y, perm) -> (params, opt_state, losses,
    dp_trace)``.

    Pure, jittable. ``perm`` is ``int32[steps, batch_size]`` row indices; one optimizer
    step per row of ``perm`` inside a ``lax.scan``. With ``micro_batches`` (DP), the
    gradients are those of the M contiguous chunks' mean losses
    (:func:`ldpsim._src.privacy.dpsgd.microbatch_grads`) and ``optimizer`` must start with
    :func:`~ldpsim._src.privacy.dpsgd.dp_aggregate`; the loss is the mean of the chunk losses.
    Without, the gradient is that of the batch mean loss. ``dp_trace``: with a DP state
    (``opt_state[0]``), ``{"clip_norm": f32[steps], "noise_multiplier": f32[steps]}``, the
    ``C_t`` and ``m_t`` each step used (what the accountant needs); else ``{}``.
    """
    from ldpsim._src.privacy.dpsgd import microbatch_grads

    loss_fn = _cross_entropy(apply_fn)

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
            record = _dp_record(s)
            updates, s = optimizer.update(grads, s, p)
            return (optax.apply_updates(p, updates), s), (loss, record)

        (params, opt_state), (losses, trace) = lax.scan(step, (params, opt_state), perm)
        return params, opt_state, losses, trace

    return epoch


def make_poisson_epoch_fn(apply_fn: Callable, optimizer: optax.GradientTransformation, *,
                          num_train: int, batch_size: int, micro_batches: int | None,
                          capacity: int) -> Callable:
    """Poisson sampling: ``epoch(params, opt_state, x, y, keys) -> (params, opt_state, losses,
    dp_trace)``.

    Pure, jittable; one optimizer step per key of ``keys`` (``[steps]``) inside a
    ``lax.scan``. Step with key ``k``: the batch is :func:`poisson_sample` ``(k, n, B)``
    (``n = num_train = x.shape[0]``); its ``count`` row indices (ascending) are processed
    in ``ceil(count / capacity)`` blocks of ``capacity`` rows with a validity mask, so no
    sampled row is ever dropped. Gradients (module docstring):

    * ``micro_batches`` None (no DP): ``∇ Σ_{i sampled} ℓ_i / B``; ``optimizer`` is plain.
    * ``micro_batches == batch_size``: per-example gradients clipped to ``C_t``, summed
      (and the unclipped ones counted) over the blocks; ``optimizer`` must start with
      :func:`presummed_dp_aggregate` with ``divisor = B``.
    * otherwise: ``M`` chunk units ``u_j = Σ_{sampled i, i mod M = j} ∇ℓ_i / (B/M)``
      (accumulated over the blocks before any clipping); ``optimizer`` must start with
      :func:`~ldpsim._src.privacy.dpsgd.dp_aggregate` (clip, sum, noise, divide by M).

    An empty chunk is a zero unit (counted as unclipped by adaptive clipping, as in
    :func:`ldpsim._src.fl.dp_client.dp_local_update`). ``losses[t]`` is the mean loss over step
    t's sampled rows (0 for an empty batch); ``dp_trace`` as in :func:`make_epoch_fn`.
    """
    n = check_positive_int("num_train", num_train)
    B = check_positive_int("batch_size", batch_size)
    K = check_positive_int("capacity", capacity)
    if micro_batches is not None:
        M = check_positive_int("micro_batches", micro_batches)
        if B % M:
            raise LdpsimError(f"batch_size ({B}) must be a multiple of micro_batches, got {M}")
    per_example = micro_batches == B
    padded = -(-n // K) * K  # every block [t·K, t·K + K) of the index list is in range

    def row_loss(p, xi, yi):
        logits = apply_fn(p, xi[None])
        return optax.losses.softmax_cross_entropy_with_integer_labels(logits, yi[None])[0]

    row_grads = jax.vmap(jax.value_and_grad(row_loss), in_axes=(None, 0, 0))
    zeros_like = lambda tree: jax.tree_util.tree_map(jnp.zeros_like, tree)  # noqa: E731

    def masked(tree, valid):
        return jax.tree_util.tree_map(
            lambda g: jnp.where(valid.reshape((-1,) + (1,) * (g.ndim - 1)), g, 0.0), tree)

    def epoch(params, opt_state, x, y, keys):
        if x.shape[0] != n:
            raise LdpsimError(f"x must have num_train={n} rows, got {x.shape[0]}")

        def step(carry, key):
            p, s = carry
            include = poisson_sample(key, n, B)
            count = jnp.sum(include, dtype=jnp.int32)
            order = jnp.nonzero(include, size=padded, fill_value=0)[0].astype(jnp.int32)

            def block(t):
                start = t * K
                idx = lax.dynamic_slice(order, (start,), (K,))
                valid = start + jnp.arange(K, dtype=jnp.int32) < count
                return idx, valid

            if micro_batches is None:
                def body(t, acc):
                    idx, valid = block(t)

                    def total_loss(q):
                        ce = optax.losses.softmax_cross_entropy_with_integer_labels(
                            apply_fn(q, x[idx]), y[idx])
                        return jnp.sum(jnp.where(valid, ce, 0.0))

                    loss, g = jax.value_and_grad(total_loss)(p)
                    return (jax.tree_util.tree_map(jnp.add, acc[0], g), acc[1] + loss)

                grads, loss_sum = lax.fori_loop(0, (count + K - 1) // K, body,
                                                (zeros_like(p), jnp.zeros((), jnp.float32)))
                grads = jax.tree_util.tree_map(lambda g: g / B, grads)
            elif per_example:
                from ldpsim._src.privacy.clipping import clip_by_global_norm

                clip = s[0].clip_norm

                def body(t, acc):
                    idx, valid = block(t)
                    losses, g = row_grads(p, x[idx], y[idx])
                    clipped, norms = jax.vmap(clip_by_global_norm, in_axes=(0, None))(g, clip)
                    clipped = masked(clipped, valid)
                    total = jax.tree_util.tree_map(lambda a, c: a + jnp.sum(c, axis=0),
                                                   acc[0], clipped)
                    return (total, acc[1] + jnp.sum(valid & (norms < clip), dtype=jnp.int32),
                            acc[2] + jnp.sum(jnp.where(valid, losses, 0.0)))

                total, unclipped, loss_sum = lax.fori_loop(
                    0, (count + K - 1) // K, body,
                    (zeros_like(p), jnp.zeros((), jnp.int32), jnp.zeros((), jnp.float32)))
                grads = (total, unclipped)
            else:
                chunk_rows = B // M

                def body(t, acc):
                    idx, valid = block(t)
                    losses, g = row_grads(p, x[idx], y[idx])
                    seg = idx % M
                    units = jax.tree_util.tree_map(
                        lambda a, gg: a + jax.ops.segment_sum(gg, seg, num_segments=M),
                        acc[0], masked(g, valid))
                    return units, acc[1] + jnp.sum(jnp.where(valid, losses, 0.0))

                unit0 = jax.tree_util.tree_map(lambda a: jnp.zeros((M,) + a.shape, a.dtype), p)
                units, loss_sum = lax.fori_loop(0, (count + K - 1) // K, body,
                                                (unit0, jnp.zeros((), jnp.float32)))
                grads = jax.tree_util.tree_map(lambda u: u / chunk_rows, units)
            record = _dp_record(s)
            updates, s = optimizer.update(grads, s, p)
            loss = loss_sum / jnp.maximum(count, 1).astype(jnp.float32)
            return (optax.apply_updates(p, updates), s), (loss, record)

        (params, opt_state), (losses, trace) = lax.scan(step, (params, opt_state), keys)
        return params, opt_state, losses, trace

    return epoch


def epoch_keys(key: jax.Array, epoch: int, steps: int) -> jax.Array:
    """The ``steps`` Poisson-sampling keys of one epoch: ``split(fold_in(key, epoch), steps)``."""
    return jax.random.split(jax.random.fold_in(key, epoch), steps)


def _grid_floor(z: np.ndarray) -> np.ndarray:
    """The largest ``GRID_RATIO**k ≤ z`` (integer k), elementwise, for finite z > 0."""
    z = np.asarray(z, np.float64)
    k = np.floor(np.log(z) / math.log(GRID_RATIO))
    g = GRID_RATIO**k
    return np.where(g > z, GRID_RATIO ** (k - 1), g)


def _group_multipliers(zs: np.ndarray) -> tuple[list[tuple[float, int]], bool]:
    """``([(z, count), ...], rounded)``: distinct values of ``zs`` with their counts; more
    than :data:`EXACT_DISTINCT_MULTIPLIERS` of them are first rounded down to the grid."""
    values, counts = np.unique(zs, return_counts=True)
    rounded = len(values) > EXACT_DISTINCT_MULTIPLIERS
    if rounded:
        values, counts = np.unique(_grid_floor(zs), return_counts=True)
    return [(float(v), int(c)) for v, c in zip(values, counts, strict=True)], rounded


_RDP_CACHE: dict[tuple[float, float], np.ndarray] = {}


def _poisson_rdp(q: float, zs: Any) -> np.ndarray:
    """RDP at :data:`RDP_ORDERS` of one Poisson-sampled Gaussian step, for each z of ``zs``.

    ``[len(zs), len(RDP_ORDERS)]``, the values of dp_accounting's
    ``PoissonSampledDpEvent(q, GaussianDpEvent(z))``: fractional orders from
    dp_accounting's ``RdpAccountant``; integer orders from the same closed form
    (``log A_α = log Σ_{i≤α} C(α,i) q^i (1−q)^{α−i} e^{(i²−i)/(2z²)}``, Mironov, Talwar &
    Zhang 2019, §3.1; dp_accounting's ``_compute_log_a_int``) vectorised with numpy,
    which is ~10× faster than its Python loop over ``i`` (equal to rounding, tested).
    Cached per ``(q, z)``.
    """
    import dp_accounting
    from scipy.special import gammaln, logsumexp

    zs = [float(z) for z in np.atleast_1d(zs)]
    new = sorted({z for z in zs if (q, z) not in _RDP_CACHE})
    if new:
        orders = np.asarray(RDP_ORDERS)
        is_int = orders == np.round(orders)
        table = np.empty((len(new), len(orders)))
        inv = 1.0 / (2.0 * np.asarray(new) ** 2)
        log_q, log_1mq = math.log(q), math.log1p(-q)
        for col in np.flatnonzero(is_int):
            a = int(orders[col])
            i = np.arange(a + 1, dtype=np.float64)
            coef = (gammaln(a + 1) - gammaln(i + 1) - gammaln(a - i + 1)
                    + i * log_q + (a - i) * log_1mq)
            table[:, col] = logsumexp(coef[None, :] + np.outer(inv, i * i - i), axis=1) / (a - 1)
        frac = [float(a) for a in orders[~is_int]]
        for row, z in enumerate(new):
            acc = _RdpAccountant(orders=frac)
            acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)))
            table[row, ~is_int] = acc.rdp
        for row, z in enumerate(new):
            if len(_RDP_CACHE) > 100_000:
                _RDP_CACHE.clear()
            _RDP_CACHE[(q, z)] = table[row]
    return np.stack([_RDP_CACHE[(q, z)] for z in zs])


def _fmt(x: float) -> str:
    return f"{x:.6g}"


class _Ledger:
    """Privacy spent after each epoch: dp_accounting for the sampling used; MindArmour's monitor.

    :meth:`epoch_end` takes the epoch's per-step ``C_t`` (required with adaptive clipping)
    and ``m_t`` (optional: the closed form of the decay otherwise), as recorded by the
    trainer (module docstring).
    """

    def __init__(self, config: DpsgdConfig, num_train: int, steps_per_epoch: int) -> None:
        self.config, self.n, self.per_epoch = config, num_train, steps_per_epoch
        self.steps = 0
        self.last_trajectory: tuple[np.ndarray, np.ndarray] | None = None  # (C_t, m_t) used
        self.setting = privacy_setting(config)
        self.z_fraction = self.setting.fraction_noise_multiplier
        if config.dp and self.z_fraction == 0:
            warnings.warn(
                "adaptive clipping with fraction_stddev = 0 releases the unclipped fraction "
                "without noise (through the next clip bound): no finite epsilon holds, "
                "epsilon is reported as inf", UnaccountedReleaseWarning, stacklevel=3)
        if not config.private:
            return
        from ldpsim._src.privacy.monitors import RDPMonitor

        decay = config.noise_decay if config.noise_mechanism == "AdaGaussian" else None
        self.decay = decay
        self.monitor = RDPMonitor(num_train, config.batch_size, config.noise_multiplier,
                                  max_eps=None, target_delta=config.delta,
                                  noise_decay_mode=decay, noise_decay_rate=config.noise_decay_rate,
                                  per_print_times=steps_per_epoch)
        self.q = config.batch_size / num_train
        self.rdp = np.zeros(len(RDP_ORDERS))  # Poisson: the composed RDP curve
        self.inverse_squares = 0.0  # shuffle: Σ_e 1/z_e², the exact composition of Gaussians
        self.z_first: float | None = None  # Poisson: the one multiplier, while homogeneous
        # PLD (no filter theorem for it) only for multipliers fixed before the run: a fixed
        # clip bound, or noise that follows it, or a clip bound that never moves.
        self.homogeneous = (config.clip_mechanism is None or config.noise_follows_clip
                            or config.clip_learning_rate == 0)
        self.rounded = False
        self.infinite = False
        self.floor = 0.0   # sampler_delta_floor of the run so far (bounded-tail noise)

    def _update_floor(self, z_value: np.ndarray) -> None:
        """Raise :attr:`floor` to the bounded-tail floor of the epoch's noisiest step.

        A step whose value release has multiplier ``z_v`` (noise std over the sensitivity)
        tells worst-case neighbours apart with probability ``Φ(1/z_v − T)`` when the
        differing example is in the step (:func:`ldpsim._src.privacy.calibration.
        sampler_delta_floor`): always under shuffling, with probability q under Poisson
        sampling. Where that exceeds δ the reported ε is inf, with a warning.
        """
        from ldpsim._src.privacy.calibration import SamplerTailWarning, sampler_delta_floor

        finite = z_value[np.isfinite(z_value) & (z_value > 0)]
        if finite.size == 0:
            return
        floor = sampler_delta_floor(float(np.min(finite)), 1.0)
        if self.config.sampling == "poisson":
            floor *= self.q
        if floor > self.floor:
            if floor > self.config.delta >= self.floor:
                warnings.warn(
                    f"the Gaussian sampler's bounded tails make delta={self.config.delta:g} "
                    f"impossible at this noise level (no delta below {floor:.3g}): epsilon "
                    "is reported as inf (docs/privacy_sharp_edges.md)", SamplerTailWarning,
                    stacklevel=4)
            self.floor = floor

    def _trajectory(self, first: int, clip_norms: Any, noise_multipliers: Any
                    ) -> tuple[np.ndarray, np.ndarray]:
        """``(C_t, m_t)`` of the epoch's steps ``first … first + per_epoch − 1``."""
        from ldpsim._src.privacy.monitors import decayed_noise_multipliers

        cfg, k = self.config, self.per_epoch

        def given(name, value):
            arr = np.asarray(value, np.float64).reshape(-1)
            if arr.shape != (k,):
                raise LdpsimError(f"{name} must hold the {k} steps of one epoch, got "
                                  f"{arr.size} values")
            return arr

        if cfg.clip_mechanism is None:
            cs = np.full(k, float(cfg.norm_bound))
        elif clip_norms is None:
            raise LdpsimError(
                "adaptive clipping (clip_mechanism set): epsilon depends on the clip bound "
                "C_t of every step; pass the recorded clip_norms (a trace written by "
                "`ldpsim dpsgd --trace`, read with read_trace)")
        else:
            cs = given("clip_norms", clip_norms)
        if self.decay is None:
            ms = np.full(k, float(cfg.noise_multiplier))
        elif noise_multipliers is not None:
            ms = given("noise_multipliers", noise_multipliers)
        else:
            ms = decayed_noise_multipliers(cfg.noise_multiplier, np.arange(first, first + k),
                                           self.decay, cfg.noise_decay_rate)
        return cs, ms

    def epoch_end(self, last: bool, clip_norms: Any = None,
                  noise_multipliers: Any = None) -> dict[str, Any]:
        """Record one more epoch of steps; return the ε columns (and what they refer to)."""
        import dp_accounting

        cfg = self.config
        first, self.steps = self.steps, self.steps + self.per_epoch
        epochs = self.steps // self.per_epoch
        info = {"sampling": cfg.sampling,
                "neighbouring": self.setting.neighbouring if cfg.dp else "none",
                "sensitivity": self.setting.sensitivity if cfg.dp else "none",
                "fraction_noise_multiplier": self.z_fraction if cfg.dp else math.nan}
        if not cfg.private:
            value = math.inf if cfg.dp else math.nan
            return {**info, "epsilon": value, "epsilon_rdp": value, "epsilon_pld": value,
                    "epsilon_monitor": value,
                    "accounted_noise_multiplier": 0.0 if cfg.dp else math.nan,
                    "accounting": ("none: DP without noise, epsilon = inf" if cfg.dp
                                   else "no DP")}
        eps_monitor = math.nan
        for cur in range(first + 1, self.steps + 1):
            out = self.monitor.step_end(cur)
            if out is not None:
                eps_monitor = out[0]
        cs, ms = self._trajectory(first, clip_norms, noise_multipliers)
        self.last_trajectory = cs, ms
        z_value, zs = step_noise_multipliers(cfg, cs, ms)
        self._update_floor(z_value)
        info["sampler_delta_floor"] = self.floor
        parts = ["value and unclipped-fraction releases combined per step "
                 f"(z_f = {_fmt(self.z_fraction)})"] if math.isfinite(self.z_fraction) else []
        if self.z_fraction == 0 or np.any(zs == 0) or self.infinite:
            self.infinite = True
            why = ("the unclipped fraction is released without noise (fraction_stddev = 0)"
                   if self.z_fraction == 0 else "a step released its value without noise "
                   "(non-finite clip bound)")
            return {**info, "epsilon": math.inf, "epsilon_rdp": math.inf,
                    "epsilon_pld": math.inf, "epsilon_monitor": eps_monitor,
                    "accounted_noise_multiplier": 0.0,
                    "accounting": f"none: {why}, epsilon = inf"}
        if cfg.sampling == "shuffle":
            # One Gaussian per epoch (each example is in one step of the epoch), charged the
            # epoch's smallest multiplier; the epochs compose exactly (μ² = Σ μ_e²).
            z_epoch = float(np.min(zs))
            if math.isfinite(z_epoch):
                self.inverse_squares += 1.0 / z_epoch**2
            z_total = (1.0 / math.sqrt(self.inverse_squares) if self.inverse_squares > 0
                       else math.inf)
            if math.isinf(z_total):
                eps_rdp = eps_pld = 0.0
            else:
                acc = _RdpAccountant(orders=list(RDP_ORDERS))
                acc.compose(dp_accounting.GaussianDpEvent(z_total))
                eps_rdp = float(acc.get_epsilon(cfg.delta))
                eps_pld = float(dp_accounting.get_epsilon_gaussian(z_total, cfg.delta))
            z_now = z_epoch
            what = (f"exact composition of {epochs} Gaussian(s), one per epoch at the "
                    f"epoch's smallest step multiplier (now {_fmt(z_epoch)}; all epochs: "
                    f"{_fmt(z_total)})")
        else:
            finite = zs[np.isfinite(zs)]
            groups, rounded = _group_multipliers(finite)
            self.rounded |= rounded
            if groups:
                values, counts = zip(*groups, strict=True)
                self.rdp += np.asarray(counts, np.float64) @ _poisson_rdp(self.q, values)
            distinct = np.unique(zs)
            if self.z_first is None:
                self.z_first = float(distinct[0])
            self.homogeneous &= bool(len(distinct) == 1 and distinct[0] == self.z_first)
            from dp_accounting.rdp import compute_epsilon

            eps_rdp = float(compute_epsilon(list(RDP_ORDERS), self.rdp, cfg.delta)[0])
            eps_pld = math.nan
            pld_now = cfg.pld == "every_epoch" or (cfg.pld == "final" and last)
            if self.homogeneous and pld_now and math.isfinite(self.z_first):
                from ldpsim._src.privacy.accounting import dpsgd_epsilon

                rep = dpsgd_epsilon(noise_multiplier=self.z_first, batch_size=cfg.batch_size,
                                    num_examples=self.n, steps=self.steps, delta=cfg.delta,
                                    sampling="poisson", method="pld")
                # Out of the PLD accountant's range the report falls back to RDP: not a PLD.
                eps_pld = rep.epsilon if rep.method == "pld" else math.nan
            z_now = float(zs[-1])
            what = (f"RDP of {self.steps} Poisson-sampled Gaussian steps (q = {_fmt(self.q)}), "
                    + (f"z = {_fmt(self.z_first)} every step" if self.homogeneous else
                       "each step its own z_t (recorded C_t, m_t)"))
            if self.rounded:
                parts.append(f"z_t rounded down to a {100 * (GRID_RATIO - 1):g}% grid "
                             "(conservative)")
            if not self.homogeneous:
                parts.append("PLD not computed (multipliers differ or depend on the run)")
            elif cfg.pld == "off":
                parts.append("PLD off")
            elif not pld_now:
                parts.append("PLD after the last epoch")
            elif math.isnan(eps_pld):
                parts.append("PLD out of range")
        eps = float(np.nanmin([eps_rdp, eps_pld]))
        if self.floor > cfg.delta:
            eps = eps_rdp = eps_pld = math.inf
            parts.append(f"inf: the float32 sampler's bounded tails deliver no delta below "
                         f"{self.floor:.3g} (sampler_delta_floor)")
        return {**info, "epsilon": eps, "epsilon_rdp": eps_rdp, "epsilon_pld": eps_pld,
                "epsilon_monitor": eps_monitor, "accounted_noise_multiplier": z_now,
                "accounting": "; ".join([what] + parts)}


def _split_epochs(name: str, values: Any, epochs: int, steps: int) -> list[Any]:
    if values is None:
        return [None] * epochs
    arr = np.asarray(values, np.float64).reshape(-1)
    if arr.size < epochs * steps:
        raise LdpsimError(f"{name} must hold at least epochs * steps_per_epoch = "
                          f"{epochs * steps} values (one per step), got {arr.size}")
    return [arr[e * steps:(e + 1) * steps] for e in range(epochs)]


def epsilon_by_epoch(config: DpsgdConfig, num_train: int, *, clip_norms: Any = None,
                     noise_multipliers: Any = None) -> list[dict[str, Any]]:
    """The ε columns :func:`train_dpsgd` reports after each epoch, without training.

    ``num_train`` is the number of training rows actually used. ``clip_norms``: the clip
    bound ``C_t`` of every step (``epochs · steps_per_epoch`` values, e.g. the
    ``clip_norm`` column of a trace, :func:`read_trace`); required with adaptive clipping,
    whose ε depends on that trajectory, ignored otherwise. ``noise_multipliers``: the
    ``m_t`` of every step with AdaGaussian noise (default: the decay's closed form).
    Each dict has the keys ``epoch``, ``step``, ``sampling``, ``neighbouring``,
    ``sensitivity``, ``accounted_noise_multiplier``, ``fraction_noise_multiplier``,
    ``accounting``, ``epsilon``, ``epsilon_rdp``, ``epsilon_pld``, ``epsilon_monitor``
    (see the module docstring).

    Raises:
        LdpsimError: bad sizes, or adaptive clipping without ``clip_norms``.
    """
    n = check_positive_int("num_train", num_train)
    steps = n // config.batch_size
    if steps < 1 or config.batch_size >= n:
        raise LdpsimError(f"batch_size must be < the number of training rows ({n}), "
                          f"got {config.batch_size}")
    if config.clip_mechanism is not None and config.private and clip_norms is None:
        raise LdpsimError(
            "adaptive clipping (clip_mechanism set): epsilon depends on the clip bound C_t of "
            "every step; pass clip_norms (e.g. read_trace() of `ldpsim dpsgd --trace`)")
    cs = _split_epochs("clip_norms", clip_norms, config.epochs, steps)
    ms = _split_epochs("noise_multipliers", noise_multipliers, config.epochs, steps)
    ledger = _Ledger(config, n, steps)
    return [{"epoch": e + 1, "step": (e + 1) * steps,
             **ledger.epoch_end(last=e == config.epochs - 1, clip_norms=cs[e],
                                noise_multipliers=ms[e])} for e in range(config.epochs)]


def read_trace(path: str | Path) -> dict[str, np.ndarray]:
    """A per-step trace CSV (``ldpsim dpsgd --trace``, :data:`TRACE_COLUMNS`) as arrays.

    Returns ``{"clip_norm": ..., "noise_multiplier": ..., ...}`` ordered by step, for
    :func:`epsilon_by_epoch` (``clip_norms=``, ``noise_multipliers=``).
    """
    import csv

    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as err:
        raise LdpsimError(f"cannot read trace {str(path)!r}: {err}") from None
    if not rows or not {"step", "clip_norm", "noise_multiplier"} <= set(rows[0]):
        raise LdpsimError(f"{str(path)!r} is not a trace (columns {', '.join(TRACE_COLUMNS)})")
    rows.sort(key=lambda r: int(r["step"]))
    steps = [int(r["step"]) for r in rows]
    if steps != list(range(1, len(rows) + 1)):
        raise LdpsimError(f"trace {str(path)!r} must hold steps 1..{len(rows)} once each")
    return {k: np.array([float(r[k]) for r in rows]) for k in rows[0] if k != "epoch"}


def num_train_rows(config: DpsgdConfig) -> int:
    """The number of training rows a run of ``config`` uses (loads the dataset, no resizing)."""
    from ldpsim._src.data.registry import load_dataset

    n = len(load_dataset(config.dataset, config.data_dir).y_train)
    return n if config.num_train is None else min(n, config.num_train)


def _load_data(config: DpsgdConfig):
    from ldpsim._src.data.registry import load_dataset

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
    """Shuffle sampling: row indices ``int32[steps, batch_size]`` of one epoch.

    A fresh permutation ``jax.random.permutation(fold_in(key, epoch), num_train)``, cut
    into disjoint batches, remainder dropped: each row is in at most one batch per epoch.
    """
    perm = jax.random.permutation(jax.random.fold_in(key, epoch), num_train)
    return perm[: steps * batch_size].reshape(steps, batch_size).astype(jnp.int32)


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
    from ldpsim._src.fl.loop import run_loop
    from ldpsim._src.fl.round import make_eval_fn
    from ldpsim._src.models import get_model

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
                      input_dtype=x_tr.dtype,
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
    poisson = config.sampling == "poisson"
    micro = config.micro_batches if config.dp else None
    per_example = poisson and micro == config.batch_size
    optimizer = _optimizer(config, jax.random.fold_in(root, 3),
                           presummed_divisor=config.batch_size if per_example else None)
    opt_state = optimizer.init(params)
    x_tr, y_tr = jnp.asarray(x_tr), jnp.asarray(y_tr)
    x_te, y_te = jnp.asarray(x_te), jnp.asarray(y_te)
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
    batches0 = batches(0)
    t0 = time.perf_counter()
    epoch_c = _xla.jit(epoch_fn, donate_argnums=(0, 1)).lower(
        params, opt_state, x_tr, y_tr, batches0).compile()
    evaluate = _xla.jit(make_eval_fn(model.apply, config.eval_batch_size))
    compile_time = time.perf_counter() - t0
    ledger = _Ledger(config, n, steps_per_epoch)

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
