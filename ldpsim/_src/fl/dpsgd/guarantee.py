"""What the ε of a centralised DP-SGD run refers to.

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
  :func:`ldpsim.privacy.dp_aggregate`, :func:`presummed_dp_aggregate`), from which
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
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from ldpsim._src._checks import LdpsimError
from ldpsim._src.fl.dpsgd.config import DpsgdConfig

__all__ = ["PrivacySetting", "combine_noise_multipliers", "fraction_noise_multiplier",
           "privacy_setting", "step_noise_multipliers"]


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
