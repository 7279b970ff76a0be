"""MindArmour-compatible privacy monitors for DP-SGD.

:class:`RDPMonitor` and :class:`ZCDPMonitor` reproduce the arithmetic of
``mindarmour/privacy/diff_privacy/monitor/monitor.py`` so that ε figures
reported by MindArmour examples can be checked, and compared with
:mod:`ldpsim._src.privacy.accountants.accounting` (dp_accounting, tighter):

* RDP of the Poisson-sampled Gaussian at MindArmour's 11 orders
  :data:`MINDARMOUR_ORDERS` (Mironov, Talwar & Zhang 2019, arXiv:1908.10530),
  computed by ``dp_accounting.rdp.RdpAccountant`` (MindArmour's own series
  differs only in its stopping rule; the §2.4 vectors agree to 3 decimals).
* The *classic* RDP→DP conversion (Mironov 2017, Prop. 3):
  ``ε = min_α RDP_α − ln δ/(α−1)``, or ``δ = min(1, min_α e^{(RDP_α−ε)(α−1)})``,
  looser than dp_accounting's.
* Noise decay of the multiplier at global (0-based) step ``s``: Time
  ``m₀/(1+r·s)``, Step ``m₀(1−r)^s``, Exp ``m₀e^{−r·s}`` (:func:`decayed_noise_multipliers`).
* The **window quirk**: MindArmour's callback, at every step ``cur`` that is a
  multiple of ``per_print_times = P``, composes the steps ``cur−P, …, cur`` — P+1
  steps, so window end-points count twice and ε is slightly conservative.
  :meth:`RDPMonitor.step_end` reproduces this (the §2.4 vectors depend on it);
  :meth:`RDPMonitor.add_steps` composes exactly the steps it is given.
* zCDP: ``ρ_s = 1/(2 z_s²)`` summed over steps, ``ε = ρ + 2√(ρ ln(1/δ))`` (Bun &
  Steinke 2016, Prop. 1.3). **Subsampling is ignored**, as in MindArmour (its
  docstring says zCDP does not suit subsampled mechanisms), so ε is not amplified.

Neighbouring relation: add-or-remove one example (the sampled-Gaussian RDP).

Test vectors (q = 256/60000, P = 234, no decay; ε after epochs 1…10): z = 0.4,
δ = 1e-5: 13.714 … 33.528; z = 1.1, δ = 1e-5: 1.309 … 1.574; z = 1.5, δ = 1e-3:
0.389 … 0.616; zCDP z = 1.5, 235 steps, δ = 1e-3: 90.21.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import dp_accounting
import numpy as np
from dp_accounting.rdp import RdpAccountant

from ldpsim._src._checks import (
    LdpsimError,
    check_choice,
    check_open_unit,
    check_positive,
    check_positive_int,
    check_unit_interval,
)

MINDARMOUR_ORDERS = (1.005, 1.01, 1.02, 1.08, 1.2, 2, 5, 10, 20, 40, 80)
DECAY_MODES = ("Time", "Step", "Exp")
NEIGHBOURING = "add-or-remove one example"


def decayed_noise_multipliers(initial: float, steps: Sequence[int] | np.ndarray,
                              mode: str | None, rate: float) -> np.ndarray:
    """Noise multiplier used at each (0-based, global) step under MindArmour's decay.

    ``None``: constant ``m₀``. ``"Time"``: ``m₀/(1 + r·s)``. ``"Step"``:
    ``m₀(1 − r)^s``. ``"Exp"``: ``m₀·e^{−r·s}``.
    """
    initial = check_positive("initial_noise_multiplier", initial)
    s = np.asarray(steps, dtype=np.float64)
    if mode is None:
        return np.full(s.shape, initial)
    check_choice("noise_decay_mode", mode, DECAY_MODES)
    rate = check_unit_interval("noise_decay_rate", rate)
    if mode == "Time":
        return initial / (1.0 + rate * s)
    if mode == "Step":
        return initial * (1.0 - rate) ** s
    return initial * np.exp(-rate * s)


def classic_epsilon(orders: Sequence[float], rdp: Sequence[float], delta: float) -> float:
    """Classic RDP→(ε, δ): ``min_α RDP_α − ln δ/(α − 1)`` (Mironov 2017, Prop. 3)."""
    orders, rdp = np.asarray(orders, float), np.asarray(rdp, float)
    return float(np.min(rdp - math.log(delta) / (orders - 1.0)))


def classic_delta(orders: Sequence[float], rdp: Sequence[float], epsilon: float) -> float:
    """Classic RDP→(ε, δ): ``min(1, min_α exp((RDP_α − ε)(α − 1)))`` (Mironov 2017, Prop. 3)."""
    orders, rdp = np.asarray(orders, float), np.asarray(rdp, float)
    with np.errstate(over="ignore"):
        return float(min(1.0, np.min(np.exp((rdp - epsilon) * (orders - 1.0)))))


class _Monitor:
    """Shared constructor checks and step bookkeeping of the two monitors."""

    def __init__(self, num_samples, batch_size, initial_noise_multiplier, noise_decay_mode,
                 noise_decay_rate, per_print_times):
        self.num_samples = check_positive_int("num_samples", num_samples)
        self.batch_size = check_positive_int("batch_size", batch_size)
        if self.batch_size >= self.num_samples:
            raise LdpsimError(f"batch_size must be < num_samples ({self.num_samples}), "
                              f"got {batch_size!r}")
        self.initial_noise_multiplier = check_positive("initial_noise_multiplier",
                                                       initial_noise_multiplier)
        if noise_decay_mode is not None:
            check_choice("noise_decay_mode", noise_decay_mode, DECAY_MODES)
            check_unit_interval("noise_decay_rate", noise_decay_rate)
        self.noise_decay_mode = noise_decay_mode
        self.noise_decay_rate = float(noise_decay_rate)
        self.per_print_times = check_positive_int("per_print_times", per_print_times)
        self.sampling_rate = self.batch_size / self.num_samples
        self.steps_composed = 0

    def _multipliers(self, steps) -> np.ndarray:
        return decayed_noise_multipliers(self.initial_noise_multiplier, steps,
                                         self.noise_decay_mode, self.noise_decay_rate)

    def add_steps(self, steps: Sequence[int]) -> tuple[float, float]:
        """Compose the given global (0-based) steps exactly once each; return ``(ε, δ)``."""
        steps = np.asarray(steps)
        if steps.ndim != 1 or (steps.size and (steps.min() < 0
                                               or not np.all(steps == np.round(steps)))):
            raise LdpsimError(f"steps must be a 1-D sequence of integers >= 0, got {steps!r}")
        self._compose(self._multipliers(steps))
        self.steps_composed += int(steps.size)
        return self.privacy()

    def step_end(self, cur_step: int) -> tuple[float, float] | None:
        """MindArmour's callback after training step ``cur_step`` (1-based).

        When ``cur_step`` is a multiple of ``per_print_times`` P, composes the
        steps ``arange(cur_step − P, cur_step + 1)`` (P + 1 steps: MindArmour's
        window quirk) and returns ``(ε, δ)``; otherwise returns None.
        """
        cur_step = check_positive_int("cur_step", cur_step)
        if cur_step % self.per_print_times:
            return None
        return self.add_steps(np.arange(cur_step - self.per_print_times, cur_step + 1))

    def run_epochs(self, epochs: int, steps_per_epoch: int | None = None) -> list[tuple[float, float]]:
        """Feed :meth:`step_end` for ``epochs`` epochs; return ``(ε, δ)`` after each epoch.

        ``steps_per_epoch`` defaults to ``num_samples // batch_size``. Reproduces a
        MindArmour training run's log at its epoch ends.
        """
        epochs = check_positive_int("epochs", epochs)
        per_epoch = (self.num_samples // self.batch_size if steps_per_epoch is None
                     else check_positive_int("steps_per_epoch", steps_per_epoch))
        out, cur = [], 0
        for _ in range(epochs):
            for _ in range(per_epoch):
                cur += 1
                self.step_end(cur)
            out.append(self.privacy())
        return out

    def max_epoch_suggest(self) -> int:
        """MindArmour's estimate: the first epoch (≤ 10000) whose budget exceeds the maximum.

        Epoch ``e`` composes the steps ``(e−1)·S … e·S`` (S + 1 steps, the window
        quirk, ``S = num_samples // batch_size``) on a scratch copy; the monitor's
        own state is left unchanged. Note that MindArmour returns the first
        epoch that *exceeds* the budget, not the last one within it.
        """
        scratch = self._scratch()
        per_epoch = self.num_samples // self.batch_size
        epoch = 1
        while epoch < 10000:
            eps, delta = scratch.add_steps(np.arange((epoch - 1) * per_epoch,
                                                     epoch * per_epoch + 1))
            if not scratch._within_max(eps, delta):
                break
            epoch += 1
        return epoch


class RDPMonitor(_Monitor):
    """MindArmour's ``RDPMonitor`` arithmetic, without the callback plumbing.

    Args:
        num_samples: training set size N.
        batch_size: batch size B < N; the sampling rate is q = B/N.
        initial_noise_multiplier: m₀ > 0 (default 1.5 as in MindArmour).
        max_eps: budget for :meth:`max_epoch_suggest` (with ``target_delta``).
        target_delta: report ε at this δ (exactly one of target_delta/target_eps).
        max_delta: budget for :meth:`max_epoch_suggest` (with ``target_eps``).
        target_eps: report δ at this ε.
        orders: RDP orders > 1 (default :data:`MINDARMOUR_ORDERS`).
        noise_decay_mode: None, ``"Time"`` (MindArmour's default), ``"Step"`` or ``"Exp"``.
        noise_decay_rate: r in [0, 1] (default 6e-4).
        per_print_times: the window P of :meth:`step_end` (default 50).

    Examples:
        The §2.4 vector, z = 1.1, one epoch of 234 steps:

        >>> m = RDPMonitor(60000, 256, 1.1, target_delta=1e-5, noise_decay_mode=None,
        ...                per_print_times=234)
        >>> round(m.run_epochs(1)[0][0], 3)
        1.309
    """

    def __init__(self, num_samples: int, batch_size: int, initial_noise_multiplier: float = 1.5,
                 max_eps: float | None = 10.0, target_delta: float | None = 1e-3,
                 max_delta: float | None = None, target_eps: float | None = None,
                 orders: Sequence[float] | None = None, noise_decay_mode: str | None = "Time",
                 noise_decay_rate: float = 6e-4, per_print_times: int = 50) -> None:
        super().__init__(num_samples, batch_size, initial_noise_multiplier, noise_decay_mode,
                         noise_decay_rate, per_print_times)
        if (target_eps is None) == (target_delta is None):
            raise LdpsimError("exactly one of target_eps and target_delta must be set, got "
                              f"target_eps={target_eps!r}, target_delta={target_delta!r}")
        self.target_delta = None if target_delta is None else check_open_unit("target_delta",
                                                                              target_delta)
        self.target_eps = None if target_eps is None else check_positive("target_eps", target_eps)
        self.max_eps = None if max_eps is None else check_positive("max_eps", max_eps)
        self.max_delta = None if max_delta is None else check_open_unit("max_delta", max_delta)
        orders = MINDARMOUR_ORDERS if orders is None else tuple(orders)
        if not orders:
            raise LdpsimError("orders must be a non-empty sequence of numbers > 1")
        for a in orders:
            if check_positive("order", a) <= 1:
                raise LdpsimError(f"every order must be > 1, got {a!r}")
        self.orders = np.asarray(orders, dtype=np.float64)
        self._accountant = RdpAccountant(orders=list(orders))

    def _scratch(self) -> RDPMonitor:
        return RDPMonitor(self.num_samples, self.batch_size, self.initial_noise_multiplier,
                          self.max_eps, self.target_delta, self.max_delta, self.target_eps,
                          tuple(self.orders), self.noise_decay_mode, self.noise_decay_rate,
                          self.per_print_times)

    def _compose(self, multipliers: np.ndarray) -> None:
        # Equal multipliers (no decay) are composed once with a count.
        values, counts = np.unique(multipliers, return_counts=True)
        for z, count in zip(values, counts):
            event = dp_accounting.PoissonSampledDpEvent(self.sampling_rate,
                                                        dp_accounting.GaussianDpEvent(float(z)))
            self._accountant.compose(event, int(count))

    def _within_max(self, eps: float, delta: float) -> bool:
        if self.target_delta is not None:
            if self.max_eps is None:
                raise LdpsimError("max_epoch_suggest needs max_eps when target_delta is set")
            return eps <= self.max_eps
        if self.max_delta is None:
            raise LdpsimError("max_epoch_suggest needs max_delta when target_eps is set")
        return delta <= self.max_delta

    @property
    def rdp(self) -> np.ndarray:
        """Accumulated RDP at each of :attr:`orders`."""
        return self._accountant.rdp

    def privacy(self) -> tuple[float, float]:
        """``(ε, δ)`` so far: ε at ``target_delta``, or δ at ``target_eps`` (classic conversion)."""
        if self.target_eps is not None:
            return self.target_eps, classic_delta(self.orders, self.rdp, self.target_eps)
        return classic_epsilon(self.orders, self.rdp, self.target_delta), self.target_delta


class ZCDPMonitor(_Monitor):
    """MindArmour's ``ZCDPMonitor`` arithmetic: zCDP of the *unsampled* Gaussian per step.

    ``ρ = Σ_s 1/(2 z_s²)`` and ``ε = ρ + 2√(ρ ln(1/δ))`` (Bun & Steinke 2016,
    Prop. 1.3). The sampling rate is ignored, as in MindArmour, so ε grows
    linearly-ish with steps: z = 1.5 over 235 steps at δ = 1e-3 gives 90.21.

    Args: as :class:`RDPMonitor`, without target_eps / max_delta / orders.
    """

    def __init__(self, num_samples: int, batch_size: int, initial_noise_multiplier: float = 1.5,
                 max_eps: float = 10.0, target_delta: float = 1e-3,
                 noise_decay_mode: str | None = "Time", noise_decay_rate: float = 6e-4,
                 per_print_times: int = 50) -> None:
        super().__init__(num_samples, batch_size, initial_noise_multiplier, noise_decay_mode,
                         noise_decay_rate, per_print_times)
        self.max_eps = check_positive("max_eps", max_eps)
        self.target_delta = check_open_unit("target_delta", target_delta)
        self.rho = 0.0

    def _scratch(self) -> ZCDPMonitor:
        return ZCDPMonitor(self.num_samples, self.batch_size, self.initial_noise_multiplier,
                           self.max_eps, self.target_delta, self.noise_decay_mode,
                           self.noise_decay_rate, self.per_print_times)

    def _compose(self, multipliers: np.ndarray) -> None:
        self.rho += float(np.sum(0.5 / np.square(multipliers)))

    def _within_max(self, eps: float, delta: float) -> bool:
        return eps <= self.max_eps

    def privacy(self) -> tuple[float, float]:
        """``(ε, δ)`` so far, with δ = ``target_delta``."""
        rho = self.rho
        return rho + 2.0 * math.sqrt(rho * math.log(1.0 / self.target_delta)), self.target_delta
