"""The configuration of one simulation: a frozen, keyword-only, validated dataclass.

Every knob of :func:`ldpsim.simulate` lives here, flat: this is the flat view of the nested
schema of :mod:`ldpsim._src.fl.schema` (the CLI flags, TOML files, manifests and the
engine read it). Its fields, with their defaults, are the schema's :class:`FlatFields`
(the registry's randomizer and mode options among them); this class adds the validation.
Validation happens in ``__post_init__`` and raises :class:`~ldpsim.LdpsimError` naming the
field, the value and the valid range; which option applies to which privacy mode,
randomizer or switch is read from the nested schema (an option set where the nested form
has no place for it is refused), never written here.
Derive variants with :func:`dataclasses.replace`.
"""

from __future__ import annotations

import dataclasses
import math

from ldpsim._src.fl import schema
from ldpsim._src.fl.schema import FlatFields
from ldpsim._src.privacy import registry
from ldpsim._src._checks import (
    LdpsimError,
    check_choice,
    check_nonnegative,
    check_open_unit,
    check_positive,
    check_positive_int,
    check_unit_interval,
)

#: The local randomizers of a local-DP run (the engine's randomizers of
#: :mod:`ldpsim._src.privacy.registry`, read when a configuration is validated; this tuple
#: is the list at import).
MECHANISMS = registry.engine_randomizers()
#: The pure ε-LDP report randomizers (δ unused; ``neighbours="replace"`` only).
REPORT_MECHANISMS = registry.report_randomizers()
NEIGHBOURS = ("replace", "add-remove")
CALIBRATIONS = ("analytic", "classic", "mindspore")
CLIENT_OPTIMIZERS = ("sgd", "momentum", "adam")
SERVER_OPTIMIZERS = ("fedavg", "fedavgm", "fedadam", "fedyogi")
WEIGHTINGS = ("examples", "uniform")
SAMPLINGS = ("uniform", "poisson")
DATA_SOURCES = ("auto", "idx", "tfds")
PARTITIONS = ("iid", "dirichlet", "shards", "natural", "sampled")  # ldpsim.data.PARTITIONS
PRIVACY_MODES = registry.mode_names()                       # ldpsim.modes.PRIVACY_MODES
NOISE_MODES = ("per-client", "aggregate")                       # ldpsim._src.fl.modes.NOISE_MODES
MINDSPORE_CLIP_RULES = ("running-min", "overwrite")
SECAGG_MECHANISMS = ("ddg", "skellam")   # ldpsim._src.privacy.discrete.accounting.MECHANISMS
EPSILON_SCOPES = ("round", "run")
STOP_POLICIES = ("client", "run")


#: Flat options several modes read with their defaults, so a configuration keeps them
#: whatever its mode (one sweep file may hold several modes and randomizers; ``delta`` is
#: also the default δ of the DP-SGD clients' accountant, ``client_dp_delta`` its own place;
#: ``clip`` the bound of several): the nesting governs the others. The command line still
#: refuses them where typed for a mode that does not use them.
_READ_WITH_DEFAULTS = ("delta", "clip")


def _where(field: str) -> tuple[str, str]:
    """``(where it is used, what the run has instead)`` of a governed flat option, read
    from its place in the nested schema (:func:`ldpsim._src.fl.schema.placement`)."""
    kind, names = schema.placement(field)
    if kind == "randomizer":
        return "by mechanism=" + " and ".join(repr(r) for r in names), "mechanism"
    if kind == "switch":
        return f"with {names[0]}=true", names[0]
    if kind == "requires":
        return f"with {names[0]}", names[0]
    return "by privacy_mode=" + " or ".join(repr(m) for m in names), "privacy_mode"


@dataclasses.dataclass(frozen=True, kw_only=True)
class SimulationConfig(FlatFields):
    """All settings of one federated simulation under local DP.

    Attributes:
        dataset: dataset name understood by :mod:`ldpsim.data` (e.g. ``"mnist"``,
            ``"synthetic"``).
        data_dir: folder holding the real dataset files (``None``: the loader's default).
        data_source: how MNIST / Fashion-MNIST are read: ``"auto"`` and ``"idx"`` parse the
            checksum-verified IDX files with NumPy (the same arrays and order whether or not
            the ``tfds`` extra is installed); ``"tfds"`` prepares them through
            tensorflow-datasets from ``data_dir`` offline (``manual_dir``). TFDS stores the
            examples in its own order, so partitions differ between the two sources.
        partition: how the training set is dealt to clients, by
            :func:`ldpsim.data.make_population`: ``"iid"``, ``"dirichlet"`` (label skew,
            Hsu et al. 2019), ``"shards"`` (McMahan et al. 2017), ``"natural"`` (writer /
            device) or ``"sampled"`` (a virtual population of any size: each client draws
            ``examples_per_client`` examples from its own Dirichlet(alpha) label mix).
        alpha: Dirichlet concentration for ``"dirichlet"`` and ``"sampled"`` (inf = IID).
        model: model name for :func:`ldpsim.models.get_model` (``"lenet5"``, ``"mlp"``,
            ``"logreg"``), or ``"auto"`` (default): LeNet-5 for image datasets, the MLP for
            feature vectors (the synthetic default); the history records the model used.
        population: number of clients N.
        examples_per_client: examples held by each client of a ``"sampled"`` population.
        clients_per_round: cohort size m (expected size under Poisson sampling).
        rounds: number of federated rounds.
        epsilon: per-client, per-round local DP budget; ``math.inf`` disables privacy
            (no clipping noise; updates are still clipped when ``clip`` is finite).
        delta: δ of the Gaussian mechanism (not used by Laplace and the report
            randomizers, which are ideally pure ε-LDP: their ``delta_spent`` is the δ their
            float32 realisation adds, e.g. 2e-24 for PrivUnitG at ε = 4, d = 61,706; exactly
            0 only for SignDS and Duchi et al.).
        clip: clip bound C of each client update: L2 for Gaussian, L1 for Laplace.
            ``inf`` (no clipping) is allowed only without privacy (ε = inf).
        mechanism: the local randomizer of ``privacy_mode="ldp"``: ``"gaussian"``
            ((ε, δ)-LDP), ``"laplace"`` (ε-LDP), or a pure ε-LDP report randomizer whose
            report the server decodes (:data:`REPORT_MECHANISMS`): ``"privunit2"``
            (Bhowmick et al. 2018), ``"privunitg"`` (Asi, Feldman & Talwar 2022), both with
            a private scalar norm (ε split: ``norm_epsilon``), ``"duchi"`` (Duchi, Jordan &
            Wainwright 2018, L2 ball) or ``"signds"`` (MindSpore's SignDS, ``epsilon`` is its
            ``sign_eps`` in (0, 100]; biased decoder), ``"projunit"``/``"fastprojunit"``
            (PrivUnitG in a k-dim random projection, Asi et al. 2023). Replace-one
            neighbours only. The registry (``ldpsim._src.privacy.registry``) lists them all.
        norm_epsilon: PrivUnit2/PrivUnitG/ProjUnit: the part of ``epsilon`` spent on the norm
            (None: the split minimising the worst-case variance).
        sign_k, sign_thr_ratio, sign_global_lr, sign_dim_out: SignDS's settings with
            MindSpore's defaults and ranges (top-k fraction in (0, 0.25], threshold ratio in
            [0.5, 1], the server's reconstruction step > 0, output size in [0, 50], 0 =
            computed).
        projection_dim: ProjUnit/FastProjUnit: the projection's dimension k (None:
            min(1000, d)).
        neighbours: ``"replace"`` (sensitivity 2C, the correct LDP relation, default) or
            ``"add-remove"`` (sensitivity C, as MindSpore calibrates).
        calibration: Gaussian calibration: ``"analytic"`` (Balle & Wang 2018), ``"classic"``
            (Dwork & Roth Thm A.1, valid for ε < 1) or ``"mindspore"``.
        local_steps: optimizer steps per client per round (ignored if ``local_epochs``).
        local_epochs: if set, local epochs E over the client's data instead of steps.
        batch_size: local batch size B.
        client_optimizer: ``"sgd"``, ``"momentum"`` or ``"adam"``.
        client_lr: local learning rate.
            These five and ``server_lr``, left ``None``, take the measured per-dataset
            defaults of :mod:`ldpsim._src.fl.defaults` (MNIST/LeNet-5: 5 local epochs of
            batch 16, SGD 0.1, server lr 2; docs/defaults.md); a value given always wins.
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
            (:func:`ldpsim._src.fl._policy.resolve_chunk_size`: 1 on CPU, where a scan over
            single clients measured fastest; 1024 otherwise).
        devices: split each round's cohort over this many devices (``jax.sharding``,
            :mod:`ldpsim._src.fl.sharding`); None: every device JAX sees (all local devices, and
            every process's devices after ``jax.distributed.initialize()``). Results equal
            the one-device results up to the float rounding of the cross-device sum:
            client keys come from client ids, not from the device layout. On CPU, None
            uses one device for cohorts above
            :data:`ldpsim._src.fl._policy.CPU_MULTI_DEVICE_MAX_CLIENTS` (20,000), where XLA's CPU
            runtime would hold ~46 KB per client in a multi-device round.
        seed: root seed of all randomness (model init, cohorts, training, noise).
        privacy_mode: where the noise goes (:mod:`ldpsim.modes`): ``"ldp"`` (each
            client clips to ``clip`` and adds noise for (``epsilon``, ``delta``), the
            default), ``"mindspore"`` (MindSpore Federated ``DP_ENCRYPT``:
            per-client adaptive bound C_t, noise for (``dp_eps``, ``dp_delta``)),
            ``"central"`` (DP-FedAvg, McMahan et al. 2018: clipped sum + one server draw
            N(0, (zC)²), fixed denominator m) or ``"distributed"`` (each client adds
            N(0, (zC)²/m); Kairouz, Liu & Steinke, ICML 2021). ``epsilon`` is used by ``"ldp"`` only.
        noise_mode: ``"per-client"`` (every client draws its own noise) or
            ``"aggregate"`` (one exact draw of the weighted noise sum,
            ``N(0, Σw²σ² I)``; Gaussian only). ``"central"`` always draws once.
        noise_multiplier: central/distributed z ≥ 0: std of the noise on the sum of
            clipped updates divided by C (0: no noise, ε = inf).
        adaptive_clip: central only: quantile-adaptive C (Andrew et al. 2021; TFF
            ``gaussian_adaptive``), starting from ``clip``; z is split between the value
            and the clipped-count releases (:func:`ldpsim._src.privacy.server.adaptive.adaptive_noise_split`).
        target_quantile: adaptive clipping's target quantile γ in [0, 1].
        clip_learning_rate: adaptive clipping's geometric learning rate η ≥ 0.
        clipped_count_stddev: σ_b > 0 of the clipped-count release; None: TFF's m/20.
        dropout_rate: "distributed" and "discrete" only: probability in [0, 1) that a sampled
            client never reports (the noise shortfall is reported per round). The noise is
            planned for the cohort, not its survivors: under "discrete" a round whose survivors
            fall short is accounted with their realised count, so ``epsilon_spent`` may exceed
            ``epsilon`` (4.7 at ε = 4 per round with 30 % dropping out, m = 50).
        secagg_mechanism: privacy_mode "discrete" only: the clients' integer noise, ``"ddg"`` (distributed
            discrete Gaussian, Kairouz, Liu & Steinke 2021) or ``"skellam"`` (Agarwal,
            Kairouz & Liu 2021).
        bits: "discrete" only: b in [2, 32], the bit-width of secure aggregation's sum mod 2^b.
        granularity: "discrete" only: γ > 0 of the integer grid; None: the finest γ whose sum
            stays inside b bits (wrap probability ≤ 10⁻⁶ per round).
        epsilon_scope: "discrete" only: ``"round"`` (default: ``epsilon`` is each round's, the
            rounds composed without amplification) or ``"run"`` (``epsilon`` is the whole
            run's: the noise is solved so that the ``rounds``-fold composition of the round,
            amplified by the Poisson cohort sampling at rate q = m/N (Zhu & Wang 2019,
            Theorem 6), is (``epsilon``, ``delta``)-DP; needs ``sampling="poisson"`` (the plan
            refuses fixed-size cohorts, whose amplification bound differs)).
        dp_eps: MindSpore's per-round ε (> 0; MindSpore's default 50).
        dp_delta: MindSpore's δ in (0, 1) (default 0.01).
        dp_norm_clip: MindSpore's multiplier of ‖W_{t+1} − W_t‖ for C_{t+1} (> 0).
        mindspore_clip_rule: ``"running-min"`` (current MindSpore client: overwrite after
            iteration 1, then running minimum) or ``"overwrite"`` (older lite client).
        mindspore_neighbours: ``"add-remove"`` (sensitivity C_t, MindSpore's convention)
            or ``"replace"`` (2C_t, replace-one LDP).
        client_dp: train every client with DP-SGD (:func:`ldpsim._src.fl.dpsgd.client.dp_local_update`,
            sample-level DP inside the client), combinable with every ``privacy_mode``.
        client_dp_micro_batches: DP-SGD micro-batches M per local batch (must divide
            ``batch_size``; M = batch_size is per-example clipping).
        client_dp_clip: DP-SGD clip bound of each micro-batch gradient (> 0).
        client_dp_noise_multiplier: DP-SGD noise multiplier z ≥ 0 (noise std z·C on the
            sum of clipped micro-batch gradients).
        client_dp_delta: the δ in (0, 1) of the DP-SGD clients' sample-level accountant
            (column ``client_dp_epsilon``); ``None`` (default): the run's ``delta``.
        stop_at_epsilon: a per-client budget E > 0 (``None``: none). A per-client ledger
            (:class:`ldpsim.privacy.PrivacyLedger`) keeps each client's spent
            ε from its own participations, by the accountant of ``epsilon_spent``; no
            client's ε ever exceeds E. ``"ldp"`` and ``"mindspore"`` only (their rounds
            are per-client releases; central/distributed ε is not per client), private
            runs only; one participation must fit in E.
        stop_policy: with ``stop_at_epsilon``: ``"client"`` (default) leaves out of each
            cohort the clients whose next participation would exceed E (the round runs
            with the others; the run ends if none is left in a cohort) or ``"run"`` ends
            the run before the first round in which a sampled client would exceed it.
            Either decision uses the participation counts only (public: who reported),
            never the data, so it releases nothing and changes no client's guarantee.
    """

    def __post_init__(self) -> None:
        for name in ("dataset", "model"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise LdpsimError(f"{name} must be a non-empty string, got {value!r}")
        from ldpsim._src.fl.defaults import apply_training_defaults

        apply_training_defaults(self)  # unset training fields: the dataset's defaults
        for name in ("population", "examples_per_client", "clients_per_round", "rounds",
                     "local_steps", "batch_size", "eval_every"):
            object.__setattr__(self, name, check_positive_int(name, getattr(self, name)))
        if self.chunk_size is not None:
            object.__setattr__(self, "chunk_size", check_positive_int("chunk_size",
                                                                      self.chunk_size))
        if self.devices is not None:
            object.__setattr__(self, "devices", check_positive_int("devices", self.devices))
        if self.local_epochs is not None:
            object.__setattr__(self, "local_epochs",
                               check_positive_int("local_epochs", self.local_epochs))
        if self.seed is None or isinstance(self.seed, bool) or int(self.seed) != self.seed \
                or self.seed < 0:
            raise LdpsimError(f"seed must be an integer >= 0, got {self.seed!r}")
        if self.clients_per_round > self.population:
            raise LdpsimError(
                f"clients_per_round must be <= population ({self.population}), got "
                f"{self.clients_per_round}; lower clients_per_round (--clients-per-round) or raise population (--population)")
        object.__setattr__(self, "epsilon", check_positive("epsilon", self.epsilon,
                                                           allow_inf=True))
        check_choice("partition", self.partition, PARTITIONS)
        check_choice("data_source", self.data_source, DATA_SOURCES)
        object.__setattr__(self, "alpha", check_positive("alpha", self.alpha, allow_inf=True))
        object.__setattr__(self, "clip", check_positive("clip", self.clip, allow_inf=True))
        if self.private and math.isinf(self.clip):
            raise LdpsimError(
                f"clip must be finite when epsilon is finite (got clip={self.clip!r}, "
                f"epsilon={self.epsilon!r}): the noise is calibrated to the clip bound")
        check_choice("mechanism", self.mechanism, registry.engine_randomizers())
        check_choice("neighbours", self.neighbours, NEIGHBOURS)
        check_choice("calibration", self.calibration, CALIBRATIONS)
        check_choice("client_optimizer", self.client_optimizer, CLIENT_OPTIMIZERS)
        check_choice("server_optimizer", self.server_optimizer, SERVER_OPTIMIZERS)
        check_choice("weighting", self.weighting, WEIGHTINGS)
        check_choice("sampling", self.sampling, SAMPLINGS)
        if registry.randomizer(self.mechanism).uses("delta"):
            object.__setattr__(self, "delta", check_open_unit("delta", self.delta))
        object.__setattr__(self, "client_lr", check_positive("client_lr", self.client_lr))
        object.__setattr__(self, "server_lr", check_positive("server_lr", self.server_lr))
        object.__setattr__(self, "server_momentum",
                           check_nonnegative("server_momentum", self.server_momentum))
        if self.server_momentum >= 1:
            raise LdpsimError(f"server_momentum must be in [0, 1), got {self.server_momentum!r}")
        self._check_modes()

    def _check_modes(self) -> None:
        """Validate the privacy-mode fields and their combinations."""
        check_choice("privacy_mode", self.privacy_mode, registry.mode_names())
        mode = registry.mode(self.privacy_mode)
        spec = registry.randomizer(self.mechanism)
        default = _DEFAULT_MECHANISM
        check_choice("noise_mode", self.noise_mode, NOISE_MODES)
        check_choice("mindspore_clip_rule", self.mindspore_clip_rule, MINDSPORE_CLIP_RULES)
        check_choice("mindspore_neighbours", self.mindspore_neighbours, NEIGHBOURS)
        for name in ("adaptive_clip", "client_dp"):
            if not isinstance(getattr(self, name), bool):
                raise LdpsimError(f"{name} must be true or false, got {getattr(self, name)!r}")
        for name in ("noise_multiplier", "clip_learning_rate", "client_dp_noise_multiplier"):
            object.__setattr__(self, name, check_nonnegative(name, getattr(self, name)))
        for name in ("dp_eps", "dp_norm_clip", "client_dp_clip"):
            object.__setattr__(self, name, check_positive(name, getattr(self, name)))
        object.__setattr__(self, "dp_delta", check_open_unit("dp_delta", self.dp_delta))
        if self.client_dp_delta is not None:
            object.__setattr__(self, "client_dp_delta",
                               check_open_unit("client_dp_delta", self.client_dp_delta))
        object.__setattr__(self, "target_quantile",
                           check_unit_interval("target_quantile", self.target_quantile))
        if self.clipped_count_stddev is not None:
            object.__setattr__(self, "clipped_count_stddev",
                               check_nonnegative("clipped_count_stddev",
                                                 self.clipped_count_stddev))
        rate = check_nonnegative("dropout_rate", self.dropout_rate)
        if rate >= 1:
            raise LdpsimError(f"dropout_rate must be in [0, 1), got {self.dropout_rate!r}")
        object.__setattr__(self, "dropout_rate", rate)
        check_choice("secagg_mechanism", self.secagg_mechanism, SECAGG_MECHANISMS)
        if isinstance(self.bits, bool) or not isinstance(self.bits, int) \
                or not 2 <= self.bits <= 32:
            raise LdpsimError(f"bits must be an integer in [2, 32], got {self.bits!r}")
        if self.granularity is not None:
            object.__setattr__(self, "granularity",
                               check_positive("granularity", self.granularity))
        check_choice("epsilon_scope", self.epsilon_scope, EPSILON_SCOPES)
        if self.epsilon_scope == "run" and \
                "epsilon_scope" not in registry.mode(self.privacy_mode).settings:
            users = [m.name for m in registry.MODES if "epsilon_scope" in m.settings]
            raise LdpsimError(f"epsilon_scope='run' applies to privacy_mode="
                              f"{' or '.join(repr(u) for u in users)} only (got "
                              f"{self.privacy_mode!r}); the other modes' epsilon is per round, "
                              "or their noise is set by noise_multiplier")
        micro = check_positive_int("client_dp_micro_batches", self.client_dp_micro_batches)
        object.__setattr__(self, "client_dp_micro_batches", micro)
        if self.batch_size % micro:
            raise LdpsimError(
                f"client_dp_micro_batches must divide batch_size ({self.batch_size}), got "
                f"{micro}")
        if self.noise_mode == "aggregate" and spec.sampler != "normal":
            raise LdpsimError(
                f"noise_mode='aggregate' is exact for Gaussian noise only, got "
                f"mechanism={self.mechanism!r}; use noise_mode='per-client'")
        if not mode.randomizers and self.mechanism != default:
            raise LdpsimError(
                f"privacy_mode={self.privacy_mode!r} adds Gaussian noise; mechanism must be "
                f"{default!r}, got {self.mechanism!r}")
        if self.neighbours not in spec.neighbours:
            raise LdpsimError(
                f"mechanism={self.mechanism!r} is pure epsilon-LDP for any two inputs "
                f"(replace-one); neighbours must be 'replace', got {self.neighbours!r}")
        if self.private and not self.epsilon <= spec.epsilon_max:
            raise LdpsimError(f"mechanism={self.mechanism!r}: epsilon {spec.epsilon_is}valid "
                              f"range (0, {spec.epsilon_max:g}]; got {self.epsilon!r}")
        if mode.user_level and math.isinf(self.clip):
            raise LdpsimError(f"clip must be finite for privacy_mode={self.privacy_mode!r} "
                              f"(the noise is z·clip), got {self.clip!r}")
        self._check_budget()       # its own message first (stop_at_epsilon's modes)
        self._check_applicable()
        if self.adaptive_clip:
            from ldpsim._src.privacy.server.adaptive import adaptive_noise_split

            adaptive_noise_split(self.noise_multiplier, self.clients_per_round,
                                 self.clipped_count_stddev)

    def _check_budget(self) -> None:
        """``stop_at_epsilon`` / ``stop_policy``: a finite budget, of a per-client mode."""
        check_choice("stop_policy", self.stop_policy, STOP_POLICIES)
        if self.stop_at_epsilon is None:
            return
        if isinstance(self.stop_at_epsilon, bool):
            raise LdpsimError(f"stop_at_epsilon must be a number > 0, got "
                              f"{self.stop_at_epsilon!r}")
        object.__setattr__(self, "stop_at_epsilon",
                           check_positive("stop_at_epsilon", self.stop_at_epsilon))
        mode = registry.mode(self.privacy_mode)
        if not mode.per_client:
            raise LdpsimError(
                f"stop_at_epsilon applies to privacy_mode "
                f"{' or '.join(repr(m.name) for m in registry.MODES if m.per_client)} "
                f"(per-client releases), got privacy_mode={self.privacy_mode!r}: a "
                f"{mode.label} run's epsilon is not per client; choose rounds (--rounds) for its budget")
        if mode.randomizers and not self.private:
            raise LdpsimError(f"stop_at_epsilon={self.stop_at_epsilon!r} needs a private run; "
                              f"epsilon is {self.epsilon!r} (no noise, no epsilon spent)")

    def _check_applicable(self) -> None:
        """An option set away from its default where this configuration's nested form has
        no place for it (:mod:`ldpsim._src.fl.schema`: the mode's class, the
        randomizer's class, a switched sub-configuration) is an error naming the option
        (never silently ignored)."""
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        used = schema.flat_paths({k: getattr(self, k) for k in schema._DECIDING})
        for name in schema.governed():
            if name in used or name in ("privacy_mode", "mechanism") + _READ_WITH_DEFAULTS:
                continue
            value = getattr(self, name)
            if value == defaults[name] or (isinstance(value, float) and math.isnan(value)):
                continue
            where, by = _where(name)
            context = f"privacy_mode={self.privacy_mode!r}"
            if by == "adaptive_clip":
                context += f", adaptive_clip={self.adaptive_clip}"
            elif by == "mechanism":
                context += f", mechanism={self.mechanism!r}"
            elif by == "client_dp":
                context = f"client_dp={self.client_dp}"
            elif by == "stop_at_epsilon":
                context = "no stop_at_epsilon"
            raise LdpsimError(f"{name}={value!r} does not apply: it is used {where}, and this "
                              f"run has {context}; remove it or choose the mode that uses it")

    @property
    def private(self) -> bool:
        """Whether noise is added (finite ε)."""
        return math.isfinite(self.epsilon)


_DEFAULT_MECHANISM = SimulationConfig.__dataclass_fields__["mechanism"].default
