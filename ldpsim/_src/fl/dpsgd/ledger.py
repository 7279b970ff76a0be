"""The privacy spent by a centralised DP-SGD run, after every epoch.

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
  (:class:`ldpsim.privacy.RDPMonitor`: 11 orders, classic conversion, its
  P+1-step window) with the nominal multiplier ``m_t``: it assumes Poisson sampling,
  sensitivity C and a fixed clip bound, and ignores the released fraction — MindArmour's
  figure (:data:`MONITOR_LABEL`), not a guarantee of this run.

Noise decay (AdaGaussian, which MindArmour allows only with a fixed clip bound) enters
through ``m_t``: each Poisson step has its own multiplier, a shuffled epoch is charged its
smallest (its last). Not covered by ε: the diagnostic columns ``train_loss`` and
``unclipped_fraction`` (computed from the training data without noise), and the
floating-point sampler's bounded tails (``docs/privacy_sharp_edges.md`` §4).
"""

from __future__ import annotations

import csv
import math
import warnings
from pathlib import Path
from typing import Any

import dp_accounting
import numpy as np
from dp_accounting.rdp import RdpAccountant as _RdpAccountant
from dp_accounting.rdp import compute_epsilon
from scipy.special import gammaln, logsumexp

from ldpsim._src._checks import LdpsimError, check_positive_int
from ldpsim._src.fl.dpsgd.config import TRACE_COLUMNS, DpsgdConfig, UnaccountedReleaseWarning
from ldpsim._src.fl.dpsgd.guarantee import privacy_setting, step_noise_multipliers
from ldpsim._src.privacy.accountants.accounting import dpsgd_epsilon
from ldpsim._src.privacy.noise.calibration import SamplerTailWarning, sampler_delta_floor
from ldpsim._src.privacy.accountants.monitors import RDPMonitor, decayed_noise_multipliers

__all__ = ["EXACT_DISTINCT_MULTIPLIERS", "GRID_RATIO", "MONITOR_LABEL", "RDP_ORDERS", "Ledger",
           "epsilon_by_epoch", "read_trace"]

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
RDP_ORDERS = tuple(float(a) for a in _RdpAccountant().orders)


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


class Ledger:
    """Privacy spent after each epoch: dp_accounting for the sampling used; MindArmour's monitor.

    :meth:`epoch_end` takes the epoch's per-step ``C_t`` (required with adaptive clipping)
    and ``m_t`` (optional: the closed form of the decay otherwise), as recorded by the
    trainer (module docstring).
    """

    def __init__(self, config: DpsgdConfig, num_train: int, steps_per_epoch: int,
                 dim: int | None = None) -> None:
        self.config, self.n, self.per_epoch = config, num_train, steps_per_epoch
        # The float32 noise of a step is one (d + 1)-coordinate draw of the default sampler
        # (the value and the unclipped fraction): bound (1) of ldpsim._src.privacy.noise.realised
        # leaves δ' = (δ − (1 − (1 − η)^steps))/s^steps to the ideal accountant, η the mass
        # a step's release can put where the neighbour's cannot reach (shift 1/z).
        self.dim = dim
        self.accounting_delta, self.budget_ok = config.delta, True
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
        differing example is in the step (:func:`ldpsim._src.privacy.noise.calibration.
        sampler_delta_floor`): always under shuffling, with probability q under Poisson
        sampling. Where that exceeds δ the reported ε is inf, with a warning.
        """
        finite = z_value[np.isfinite(z_value) & (z_value > 0)]
        if finite.size == 0:
            return
        from ldpsim._src.privacy.noise import realised

        floor = sampler_delta_floor(float(np.min(finite)), 1.0,
                                    impl=realised.default_sampler("gaussian"))
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

    def _update_budget(self, z_value: np.ndarray) -> None:
        """Set :attr:`accounting_delta`: bound (1) over the steps so far, each charged the
        run's smallest multiplier (the largest shift 1/z, in noise stds)."""
        from ldpsim._src.privacy.noise import realised

        finite = z_value[np.isfinite(z_value) & (z_value > 0)]
        if finite.size:
            self.z_min = min(getattr(self, "z_min", math.inf), float(np.min(finite)))
        z_min = getattr(self, "z_min", math.inf)
        if not math.isfinite(z_min):
            self.accounting_delta = self.config.delta
            return
        r = realised.additive_realisation("gaussian", realised.default_sampler("gaussian"),
                                          1.0 / z_min, realised.check_dim(self.dim) + 1)
        budget = realised.delta_budget(self.config.delta, r.tail_mass, r.tail_scale, self.steps)
        self.budget_ok = budget > 0
        self.accounting_delta = budget if self.budget_ok else self.config.delta

    def _trajectory(self, first: int, clip_norms: Any, noise_multipliers: Any
                    ) -> tuple[np.ndarray, np.ndarray]:
        """``(C_t, m_t)`` of the epoch's steps ``first … first + per_epoch − 1``."""
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
        self._update_budget(z_value)
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
            eps_rdp, eps_pld, z_now, what = self._shuffle_epsilon(zs, epochs)
        else:
            eps_rdp, eps_pld, z_now, what = self._poisson_epsilon(zs, last, parts)
        eps = float(np.nanmin([eps_rdp, eps_pld]))
        if not self.budget_ok:
            eps = eps_rdp = eps_pld = math.inf
            parts.append(f"inf: the float32 sampler's bounded tails alone exhaust delta over "
                         f"{self.steps} steps")
        elif self.floor > cfg.delta:
            eps = eps_rdp = eps_pld = math.inf
            parts.append(f"inf: the float32 sampler's bounded tails deliver no delta below "
                         f"{self.floor:.3g} (sampler_delta_floor)")
        return {**info, "epsilon": eps, "epsilon_rdp": eps_rdp, "epsilon_pld": eps_pld,
                "epsilon_monitor": eps_monitor, "accounted_noise_multiplier": z_now,
                "accounting": "; ".join([what] + parts)}

    def _shuffle_epsilon(self, zs: np.ndarray, epochs: int) -> tuple[float, float, float, str]:
        """``(ε_rdp, ε_pld, z now, what)`` of shuffled epochs so far (module docstring)."""
        cfg = self.config
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
            eps_rdp = float(acc.get_epsilon(self.accounting_delta))
            eps_pld = float(dp_accounting.get_epsilon_gaussian(z_total, self.accounting_delta))
        z_now = z_epoch
        what = (f"exact composition of {epochs} Gaussian(s), one per epoch at the "
                f"epoch's smallest step multiplier (now {_fmt(z_epoch)}; all epochs: "
                f"{_fmt(z_total)})")
        return eps_rdp, eps_pld, z_now, what

    def _poisson_epsilon(self, zs: np.ndarray, last: bool,
                         parts: list[str]) -> tuple[float, float, float, str]:
        """``(ε_rdp, ε_pld, z now, what)`` of the Poisson steps so far (module docstring);
        notes on how it was computed are appended to ``parts``."""
        cfg = self.config
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
        eps_rdp = float(compute_epsilon(list(RDP_ORDERS), self.rdp, self.accounting_delta)[0])
        eps_pld = math.nan
        pld_now = cfg.pld == "every_epoch" or (cfg.pld == "final" and last)
        if self.homogeneous and pld_now and math.isfinite(self.z_first):
            rep = dpsgd_epsilon(noise_multiplier=self.z_first, batch_size=cfg.batch_size,
                                num_examples=self.n, steps=self.steps,
                                delta=self.accounting_delta,
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
        return eps_rdp, eps_pld, z_now, what


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
    ledger = Ledger(config, n, steps)
    return [{"epoch": e + 1, "step": (e + 1) * steps,
             **ledger.epoch_end(last=e == config.epochs - 1, clip_norms=cs[e],
                                noise_multipliers=ms[e])} for e in range(config.epochs)]


def read_trace(path: str | Path) -> dict[str, np.ndarray]:
    """A per-step trace CSV (``ldpsim dpsgd --trace``, :data:`TRACE_COLUMNS`) as arrays.

    Returns ``{"clip_norm": ..., "noise_multiplier": ..., ...}`` ordered by step, for
    :func:`epsilon_by_epoch` (``clip_norms=``, ``noise_multipliers=``).
    """
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
