"""The configuration of one simulation: a frozen, keyword-only, validated dataclass.

Every knob of :func:`ldpsim.fl.simulate.simulate` lives here.  Validation happens in
``__post_init__`` and raises :class:`~ldpsim.LdpsimError` naming the field, the value
and the valid range.  Derive variants with :func:`dataclasses.replace`.
"""

from __future__ import annotations

import dataclasses
import math

from ldpsim._checks import (
    LdpsimError,
    check_choice,
    check_nonnegative,
    check_open_unit,
    check_positive,
    check_positive_int,
)

MECHANISMS = ("gaussian", "laplace")
NEIGHBOURS = ("replace", "add-remove")
CALIBRATIONS = ("analytic", "classic", "mindspore")
CLIENT_OPTIMIZERS = ("sgd", "momentum", "adam")
SERVER_OPTIMIZERS = ("fedavg", "fedavgm", "fedadam", "fedyogi")
WEIGHTINGS = ("examples", "uniform")
SAMPLINGS = ("uniform", "poisson")
PARTITIONS = ("iid", "dirichlet", "shards", "natural", "sampled")  # ldpsim.data.PARTITIONS


@dataclasses.dataclass(frozen=True, kw_only=True)
class SimulationConfig:
    """All settings of one federated simulation under local DP.

    Attributes:
        dataset: dataset name understood by :mod:`ldpsim.data` (e.g. ``"mnist"``,
            ``"synthetic"``).
        data_dir: folder holding the real dataset files (``None``: the loader's default).
        partition: how the training set is dealt to clients, by
            :func:`ldpsim.data.make_population`: ``"iid"``, ``"dirichlet"`` (label skew,
            Hsu et al. 2019), ``"shards"`` (McMahan et al. 2017), ``"natural"`` (writer /
            device) or ``"sampled"`` (a virtual population of any size: each client draws
            ``examples_per_client`` examples from its own Dirichlet(alpha) label mix).
        alpha: Dirichlet concentration for ``"dirichlet"`` and ``"sampled"`` (inf = IID).
        model: model name for :func:`ldpsim.models.get_model` (``"lenet5"``, ``"mlp"``,
            ``"logreg"``).
        population: number of clients N.
        examples_per_client: examples held by each client of a ``"sampled"`` population.
        clients_per_round: cohort size m (expected size under Poisson sampling).
        rounds: number of federated rounds.
        epsilon: per-client, per-round local DP budget; ``math.inf`` disables privacy
            (no clipping noise; updates are still clipped when ``clip`` is finite).
        delta: δ of the Gaussian mechanism (ignored by Laplace).
        clip: clip bound C of each client update: L2 for Gaussian, L1 for Laplace.
            ``inf`` (no clipping) is allowed only without privacy (ε = inf).
        mechanism: ``"gaussian"`` ((ε, δ)-LDP) or ``"laplace"`` (ε-LDP).
        neighbours: ``"replace"`` (sensitivity 2C, the correct LDP relation, default) or
            ``"add-remove"`` (sensitivity C, as MindSpore calibrates).
        calibration: Gaussian calibration: ``"analytic"`` (Balle & Wang 2018), ``"classic"``
            (Dwork & Roth Thm A.1, valid for ε < 1) or ``"mindspore"``.
        local_steps: optimizer steps per client per round (ignored if ``local_epochs``).
        local_epochs: if set, local epochs E over the client's data instead of steps.
        batch_size: local batch size B.
        client_optimizer: ``"sgd"``, ``"momentum"`` or ``"adam"``.
        client_lr: local learning rate.
        server_optimizer: ``"fedavg"`` (SGD, lr 1), ``"fedavgm"``, ``"fedadam"``,
            ``"fedyogi"``.
        server_lr: server learning rate (FedAvg uses 1.0).
        server_momentum: momentum of FedAvgM.
        weighting: ``"examples"`` (FedAvg weights |D_k|/Σ|D_j|) or ``"uniform"``.
        sampling: ``"uniform"`` (m of N without replacement) or ``"poisson"`` (each
            client independently with probability m/N).
        eval_every: evaluate on the test set every k rounds (and after the last round).
        chunk_size: clients trained together in one vmapped chunk; memory is
            O(chunk_size × model size). None: the backend's measured default
            (:func:`ldpsim.fl.simulate.resolve_chunk_size`: 8 on CPU, 1024 otherwise).
        seed: root seed of all randomness (model init, cohorts, training, noise).
    """

    dataset: str = "synthetic"
    data_dir: str | None = None
    partition: str = "iid"
    alpha: float = math.inf
    model: str = "lenet5"
    population: int = 1000
    examples_per_client: int = 32
    clients_per_round: int = 100
    rounds: int = 10
    epsilon: float = math.inf
    delta: float = 1e-5
    clip: float = 1.0
    mechanism: str = "gaussian"
    neighbours: str = "replace"
    calibration: str = "analytic"
    local_steps: int = 2
    local_epochs: int | None = None
    batch_size: int = 16
    client_optimizer: str = "sgd"
    client_lr: float = 0.05
    server_optimizer: str = "fedavg"
    server_lr: float = 1.0
    server_momentum: float = 0.9
    weighting: str = "examples"
    sampling: str = "uniform"
    eval_every: int = 1
    chunk_size: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("dataset", "model"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise LdpsimError(f"{name} must be a non-empty string, got {value!r}")
        for name in ("population", "examples_per_client", "clients_per_round", "rounds",
                     "local_steps", "batch_size", "eval_every"):
            object.__setattr__(self, name, check_positive_int(name, getattr(self, name)))
        if self.chunk_size is not None:
            object.__setattr__(self, "chunk_size", check_positive_int("chunk_size",
                                                                      self.chunk_size))
        if self.local_epochs is not None:
            object.__setattr__(self, "local_epochs",
                               check_positive_int("local_epochs", self.local_epochs))
        if self.seed is None or isinstance(self.seed, bool) or int(self.seed) != self.seed \
                or self.seed < 0:
            raise LdpsimError(f"seed must be an integer >= 0, got {self.seed!r}")
        if self.clients_per_round > self.population:
            raise LdpsimError(
                f"clients_per_round must be <= population ({self.population}), got "
                f"{self.clients_per_round}; lower --clients-per-round or raise --population")
        object.__setattr__(self, "epsilon", check_positive("epsilon", self.epsilon,
                                                           allow_inf=True))
        check_choice("partition", self.partition, PARTITIONS)
        object.__setattr__(self, "alpha", check_positive("alpha", self.alpha, allow_inf=True))
        object.__setattr__(self, "clip", check_positive("clip", self.clip, allow_inf=True))
        if self.private and math.isinf(self.clip):
            raise LdpsimError(
                f"clip must be finite when epsilon is finite (got clip={self.clip!r}, "
                f"epsilon={self.epsilon!r}): the noise is calibrated to the clip bound")
        check_choice("mechanism", self.mechanism, MECHANISMS)
        check_choice("neighbours", self.neighbours, NEIGHBOURS)
        check_choice("calibration", self.calibration, CALIBRATIONS)
        check_choice("client_optimizer", self.client_optimizer, CLIENT_OPTIMIZERS)
        check_choice("server_optimizer", self.server_optimizer, SERVER_OPTIMIZERS)
        check_choice("weighting", self.weighting, WEIGHTINGS)
        check_choice("sampling", self.sampling, SAMPLINGS)
        if self.mechanism == "gaussian":
            object.__setattr__(self, "delta", check_open_unit("delta", self.delta))
        object.__setattr__(self, "client_lr", check_positive("client_lr", self.client_lr))
        object.__setattr__(self, "server_lr", check_positive("server_lr", self.server_lr))
        object.__setattr__(self, "server_momentum",
                           check_nonnegative("server_momentum", self.server_momentum))
        if self.server_momentum >= 1:
            raise LdpsimError(f"server_momentum must be in [0, 1), got {self.server_momentum!r}")

    @property
    def private(self) -> bool:
        """Whether noise is added (finite ε)."""
        return math.isfinite(self.epsilon)
