"""Per-client privacy ledger: every client's spent ε from its own participations.

Host-side NumPy. The ledger keeps one participation count per client (int64, up to 10⁶
clients and more) and turns counts into ε with one accountant call per *distinct* count
(cached), so a round costs O(clients) NumPy work plus at most one new accountant call.

What one participation releases (one per ledger):

* ``event``: a ``dp_accounting`` event (Gaussian, Laplace, sampled events, ...), composed
  ``k`` times by dp_accounting (``method="rdp"`` by default: the per-event RDP curve is
  computed once and scaled by ``k``, then converted; ``"pld"``: privacy-loss distributions;
  ``"analytic"``: exact, Gaussian events only, ``k`` Gaussians of multiplier ``z`` being one
  of ``z/√k``). The event's noise multiplier must be relative to the sensitivity of the
  relation you mean (as :class:`ldpsim.mechanism.LocalMechanism.dp_event`
  gives it; :meth:`PrivacyLedger.from_mechanism`). Randomized-response events (k-ary RR,
  and the binary-RR event that ldpsim's pure-ε randomizers report, which dominates every
  ε-DP pair) are accounted under dp_accounting's replace-one relation, the one in which RR
  is defined. dp_accounting 0.6.0's PLD accountant ignores the composition count of a
  ``RandomizedResponseDpEvent`` (``compose(event, k)`` returns the ε of one event); the
  ledger composes its privacy-loss distribution with ``self_compose(k)`` instead.
* ``pld``: a ``dp_accounting`` privacy-loss distribution of one participation, composed
  ``k`` times with ``self_compose`` — e.g. one shuffled round,
  :func:`ldpsim.privacy.shuffle_pld`.
* ``accountant``: any function ``k ↦ ε`` of ``k`` participations (non-decreasing in
  ``k``, 0 at 0), e.g. the one behind a simulation's ``epsilon_spent`` column, so that
  the ledger and the run report the same ε (the engine's ``stop_at_epsilon``).
* ``epsilon0``: a pure ε₀-DP randomizer (PrivUnit, randomized response, Laplace, ...):
  ``k`` participations are exactly ``k·ε₀``-DP (basic composition, δ = 0; Dwork & Roth 2014,
  Thm. 3.16), which is tight at δ = 0.

Every client's ε is that of its own count (not only the worst client's). With a
``target_epsilon``, :meth:`PrivacyLedger.exhausted` flags the clients whose budget is
spent, :meth:`PrivacyLedger.allowed` the clients that may still take part once more
without exceeding it, and :meth:`PrivacyLedger.run_exhausted` says whether the run should
stop (``"any"`` client exhausted, or ``"all"``).

The engine (:func:`ldpsim.simulate` with ``stop_at_epsilon``) keeps one
ledger over its participation counts (``counts=``) with the run's own accountant; by hand,
each round::

    ledger = PrivacyLedger(num_clients, event=mechanism.dp_event(params), delta=1e-5,
                           target_epsilon=8.0)         # once, before round 0
    cohort = cohort[ledger.allowed(cohort)]             # drop clients whose budget is spent
    ...                                                 # the round releases `cohort`
    ledger.record(cohort)                               # after the release
    row["epsilon_spent"] = ledger.max_epsilon()         # worst client, as today
    per_client = ledger.epsilons()                      # every client's own ε
    if ledger.run_exhausted("any"): stop the run
"""

from __future__ import annotations

import math
from typing import Any, Callable

import dp_accounting
import numpy as np
from dp_accounting.pld import privacy_loss_distribution as _pld
from dp_accounting.rdp import rdp_privacy_accountant as _rdp

from ldpsim._src._checks import LdpsimError, check_choice, check_open_unit, check_positive, \
    check_positive_int
from ldpsim._src.privacy.accountants import accounting
from ldpsim._src.privacy.noise.calibration import analytic_gaussian_epsilon

__all__ = ["PrivacyLedger"]

METHODS = ("rdp", "pld", "analytic", "basic")
STOP_POLICIES = ("any", "all")


class PrivacyLedger:
    """Participation counts of ``num_clients`` clients and the ε each has spent.

    Args:
        num_clients: number of clients (ids ``0 .. num_clients − 1``).
        event: the ``dp_accounting.DpEvent`` of one participation (give this or
            ``epsilon0``).
        epsilon0: the pure ε₀ of one participation (basic composition, exact at δ = 0).
        pld: instead, the privacy-loss distribution of one participation (``method`` is
            then ``"pld"``).
        delta: δ in (0, 1) at which ε is reported (``event`` ledgers; ignored, and reported
            as 0, for ``epsilon0`` ledgers).
        method: ``"rdp"`` (default for events), ``"pld"``, ``"analytic"`` (Gaussian
            events), ``"basic"`` (the only one for ``epsilon0``).
        neighbours: dp_accounting's relation for the event: ``"add-remove"`` (default for
            noise events: their multiplier already carries the sensitivity, as ldpsim's
            mechanisms state it) or ``"replace"`` (default, and required, for
            ``RandomizedResponseDpEvent``).
        target_epsilon: optional budget per client (> 0).
        accountant: instead of ``event``/``epsilon0``/``pld``, a function ``k -> ε`` (at
            ``delta``, which is then only reported; default NaN).
        counts: an int64 array of shape ``(num_clients,)`` to use as the participation
            counts (shared, not copied: e.g. a driver's counter); default zeros.

    ``event`` is an ideal event: for a :class:`~ldpsim.privacy.LocalMechanism` as its float32
    realisation delivers it, pass ``accountant=lambda k: ldpsim.privacy.mechanism_epsilon(
    mech, k, delta)``.

    Example:
        >>> import dp_accounting
        >>> led = PrivacyLedger(4, event=dp_accounting.GaussianDpEvent(2.0), delta=1e-5)
        >>> led.record([0, 1]); led.record([0])
        >>> led.counts.tolist()
        [2, 1, 0, 0]
        >>> led.epsilons()[2:].tolist()
        [0.0, 0.0]
    """

    def __init__(self, num_clients: int, *, event: Any = None, epsilon0: float | None = None,
                 pld: Any = None, delta: float | None = None, method: str | None = None,
                 neighbours: str | None = None, target_epsilon: float | None = None,
                 accountant: Callable[[int], float] | None = None,
                 counts: np.ndarray | None = None) -> None:
        self.num_clients = check_positive_int("num_clients", num_clients)
        if sum(x is not None for x in (event, epsilon0, pld, accountant)) != 1:
            raise LdpsimError("give exactly one of event (a dp_accounting DpEvent), "
                              "epsilon0 (pure epsilon per participation), pld or accountant")
        is_rr = isinstance(event, dp_accounting.RandomizedResponseDpEvent)
        neighbours = neighbours or ("replace" if is_rr else "add-remove")
        self.neighbours = check_choice("neighbours", neighbours, ("add-remove", "replace"))
        if is_rr and self.neighbours != "replace":
            raise LdpsimError("a RandomizedResponseDpEvent is accounted with neighbours="
                              "'replace' (any two inputs of one client)")
        self.target_epsilon = (None if target_epsilon is None
                               else check_positive("target_epsilon", target_epsilon))
        if counts is None:
            counts = np.zeros(self.num_clients, dtype=np.int64)
        elif not (isinstance(counts, np.ndarray) and counts.dtype == np.int64
                  and counts.shape == (self.num_clients,)):
            raise LdpsimError(f"counts must be an int64 NumPy array of shape "
                              f"({self.num_clients},), got {type(counts).__name__} "
                              f"{getattr(counts, 'dtype', '')} {getattr(counts, 'shape', '')}")
        self.counts = counts
        self._cache: dict[int, float] = {0: 0.0}
        self.pld = None
        self._accountant = accountant
        if accountant is not None:
            if not callable(accountant):
                raise LdpsimError(f"accountant must be a function k -> epsilon, got "
                                  f"{type(accountant).__name__}")
            self.event, self.epsilon0 = None, None
            self.method = "accountant"
            self.delta = math.nan if delta is None else check_open_unit("delta", delta)
            return
        if pld is not None:
            if not isinstance(pld, _pld.PrivacyLossDistribution):
                raise LdpsimError(f"pld must be a dp_accounting PrivacyLossDistribution, got "
                                  f"{type(pld).__name__}")
            if delta is None:
                raise LdpsimError("delta is required for a pld ledger (a value in (0, 1))")
            self.pld, self.event, self.epsilon0 = pld, None, None
            self.method = check_choice("method", method or "pld", ("pld",))
            self.delta = check_open_unit("delta", delta)
            return
        if epsilon0 is not None:
            self.epsilon0 = check_positive("epsilon0", epsilon0)
            self.method = check_choice("method", method or "basic", ("basic",))
            self.event, self.delta = None, 0.0
            return
        if not isinstance(event, dp_accounting.DpEvent):
            raise LdpsimError(f"event must be a dp_accounting.DpEvent, got {type(event).__name__}")
        self.epsilon0 = None
        self.event = event
        self.method = check_choice("method", method or "rdp", ("rdp", "pld", "analytic"))
        if delta is None:
            raise LdpsimError("delta is required for an event ledger (a value in (0, 1))")
        self.delta = check_open_unit("delta", delta)
        if self.method == "analytic":
            if not isinstance(event, dp_accounting.GaussianDpEvent):
                raise LdpsimError("method='analytic' needs a GaussianDpEvent; use 'rdp' or 'pld'")
            if self.neighbours != "add-remove":
                raise LdpsimError("method='analytic' takes the event's multiplier relative to "
                                  "the sensitivity: use neighbours='add-remove'")
        accountant = accounting._fresh_accountant(
            "rdp" if self.method == "analytic" else self.method, self.neighbours)
        if not accountant.supports(event):
            raise LdpsimError(f"method={self.method!r} does not support "
                              f"{type(event).__name__} in dp_accounting; for a pure eps0-DP "
                              "randomizer pass epsilon0 instead")
        if self.method == "rdp":
            accountant.compose(event)
            self._orders, self._rdp_one = np.asarray(accountant.orders), np.asarray(accountant.rdp)

    @classmethod
    def from_mechanism(cls, mechanism: Any, params: Any, num_clients: int, **kwargs: Any
                       ) -> "PrivacyLedger":
        """Ledger of a :class:`~ldpsim.mechanism.LocalMechanism`: its
        ``dp_event(params)`` is one participation; with ``method="basic"``, its pure
        ``epsilon`` (``k·ε₀``, for mechanisms with ``delta == 0``)."""
        if kwargs.get("method") == "basic":
            if float(getattr(mechanism, "delta", 1.0)) != 0.0:
                raise LdpsimError("method='basic' needs a pure eps-LDP mechanism (delta = 0); "
                                  f"{getattr(mechanism, 'name', 'this one')} is not")
            kwargs.pop("delta", None)
            return cls(num_clients, epsilon0=float(mechanism.epsilon), **kwargs)
        return cls(num_clients, event=mechanism.dp_event(params), **kwargs)

    # ---------------------------------------------------------------- recording

    def _ids(self, clients: Any) -> np.ndarray:
        ids = np.asarray(clients)
        if ids.dtype == bool:
            if ids.shape != (self.num_clients,):
                raise LdpsimError(f"a boolean mask of clients must have shape "
                                  f"({self.num_clients},), got {ids.shape}")
            return np.flatnonzero(ids)
        if ids.size == 0:
            return ids.astype(np.int64).ravel()
        if not np.issubdtype(ids.dtype, np.integer):
            raise LdpsimError(f"clients must be integer ids or a boolean mask, got dtype "
                              f"{ids.dtype}")
        ids = ids.ravel().astype(np.int64)
        if ids.min() < 0 or ids.max() >= self.num_clients:
            bad = ids[(ids < 0) | (ids >= self.num_clients)][0]
            raise LdpsimError(f"client id {bad} is out of range [0, {self.num_clients})")
        return ids

    def record(self, clients: Any, times: int = 1) -> None:
        """Record ``times`` participations of each of ``clients`` (ids, repeats counted, or
        a boolean mask over all clients)."""
        ids = self._ids(clients)
        times = accounting._check_count("times", times)
        np.add.at(self.counts, ids, times)

    # ---------------------------------------------------------------- epsilon

    def epsilon_of_count(self, count: int) -> float:
        """ε after ``count`` participations (cached)."""
        k = accounting._check_count("count", count)
        if k not in self._cache:
            self._cache[k] = self._compute(k)
        return self._cache[k]

    def _compute(self, k: int) -> float:
        if self._accountant is not None:
            return float(self._accountant(k))
        if self.epsilon0 is not None:
            return k * self.epsilon0
        if self.pld is not None:
            return float(self.pld.self_compose(k).get_epsilon_for_delta(self.delta))
        if self.method == "rdp":
            return float(_rdp.compute_epsilon(self._orders, k * self._rdp_one, self.delta)[0])
        if self.method == "analytic":
            return analytic_gaussian_epsilon(self.event.noise_multiplier / math.sqrt(k),
                                             self.delta)
        if isinstance(self.event, dp_accounting.RandomizedResponseDpEvent):
            return accounting.randomized_response_epsilon(self.event, k, self.delta)
        return accounting._epsilon_of(self.event, k, self.delta, "pld", self.neighbours)

    def _per_count(self, counts: np.ndarray) -> np.ndarray:
        uniq, inverse = np.unique(counts, return_inverse=True)
        values = np.array([self.epsilon_of_count(int(k)) for k in uniq], dtype=np.float64)
        return values[inverse].reshape(counts.shape)

    def epsilons(self, clients: Any = None) -> np.ndarray:
        """Each client's spent ε (float64, shape ``(num_clients,)``, or that of ``clients``)."""
        counts = self.counts if clients is None else self.counts[self._ids(clients)]
        return self._per_count(counts)

    def max_epsilon(self) -> float:
        """The worst client's ε (the most participations)."""
        return self.epsilon_of_count(int(self.counts.max()))

    # ---------------------------------------------------------------- budgets

    def _target(self, target_epsilon: float | None) -> float:
        target = self.target_epsilon if target_epsilon is None else check_positive(
            "target_epsilon", target_epsilon)
        if target is None:
            raise LdpsimError("no target_epsilon: give one here or to the ledger")
        return target

    def exhausted(self, target_epsilon: float | None = None) -> np.ndarray:
        """Boolean mask over clients: ε spent ≥ the target (the budget is used up)."""
        return self.epsilons() >= self._target(target_epsilon)

    def allowed(self, clients: Any = None, target_epsilon: float | None = None) -> np.ndarray:
        """Boolean mask (over ``clients``, default all): one more participation keeps ε ≤ the
        target. A client listed k times in ``clients`` is asked about k more participations
        (as :meth:`record` would count them)."""
        target = self._target(target_epsilon)
        if clients is None:
            return self._per_count(self.counts + 1) <= target
        ids = self._ids(clients)
        _, where, times = np.unique(ids, return_inverse=True, return_counts=True)
        return self._per_count(self.counts[ids] + times[where.reshape(ids.shape)]) <= target

    def run_exhausted(self, policy: str = "any", target_epsilon: float | None = None) -> bool:
        """Whether the run should stop: ``"any"`` client may not take part again, or
        ``"all"`` clients may not."""
        check_choice("policy", policy, STOP_POLICIES)
        ok = self.allowed(target_epsilon=target_epsilon)
        return bool(not ok.all()) if policy == "any" else bool(not ok.any())

    def summary(self) -> dict[str, Any]:
        """JSON-ready summary: clients, participations, ε min/median/max, method, δ."""
        eps = self.epsilons()
        return {"clients": self.num_clients, "participations": int(self.counts.sum()),
                "epsilon_min": float(eps.min()), "epsilon_median": float(np.median(eps)),
                "epsilon_max": float(eps.max()), "delta": self.delta, "method": self.method,
                "target_epsilon": self.target_epsilon}
