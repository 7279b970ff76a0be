"""DP-SGD: clip each example's (or micro-batch's) gradient, add Gaussian noise to the sum.

Everything DP-SGD in ldpsim lives in this package, in three parts, in the direction of
dependency:

* :mod:`~ldpsim._src.fl.dpsgd.aggregate` -- the core, as optax transformations:
  :func:`dp_aggregate` (clip, sum, noise, average; MindArmour's noise decay and adaptive
  clipping), :func:`microbatch_grads` and the DP optimizers :func:`dp_sgd`,
  :func:`dp_momentum`, :func:`dp_adam` (public as :mod:`ldpsim.privacy`'s).
* :mod:`~ldpsim._src.fl.dpsgd.client` -- DP-SGD inside each federated client
  (:func:`dp_local_update`, the engine's :class:`ClientTraining` objects ``plain`` and
  ``dpsgd``) and its sample-level accounting (:func:`dp_client_epsilon`,
  :func:`event_epsilon`); the round of :mod:`ldpsim._src.fl.round` calls it.
* the centralised (non-federated) trainer, as MindArmour's ``DPModel`` runs it (below):
  :mod:`~ldpsim._src.fl.dpsgd.config`, :mod:`~ldpsim._src.fl.dpsgd.guarantee`,
  :mod:`~ldpsim._src.fl.dpsgd.ledger`, :mod:`~ldpsim._src.fl.dpsgd.batches`,
  :mod:`~ldpsim._src.fl.dpsgd.steps` and :mod:`~ldpsim._src.fl.dpsgd.train`; it runs on
  the federated engine's driver loop and evaluation, so the package sits in
  :mod:`ldpsim._src.fl`. This file imports nothing: importing one part never loads another.

The centralised trainer is the MindArmour LeNet-5 tutorial (seed 002) in JAX:
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

Evaluation is on the whole test set after each epoch. Both samplings run
``steps_per_epoch = num_train // batch_size`` steps per epoch inside one jitted
``lax.scan``.

The trainer's modules, in the direction of dependency (the one driver loop is
:func:`ldpsim.fl.run_loop`, shared with the federated simulation):

* :mod:`~ldpsim._src.fl.dpsgd.config` -- :class:`DpsgdConfig` (the settings, MindArmour's
  defaults), :func:`load_config` (TOML), the results and trace columns.
* :mod:`~ldpsim._src.fl.dpsgd.guarantee` -- what a run's ε refers to: sampling, neighbouring
  relation, sensitivity, the per-step noise multipliers (:func:`privacy_setting`).
* :mod:`~ldpsim._src.fl.dpsgd.ledger` -- the privacy spent after every epoch
  (dp_accounting RDP/PLD and MindArmour's monitor), also without training
  (:func:`epsilon_by_epoch`, :func:`read_trace`).
* :mod:`~ldpsim._src.fl.dpsgd.batches` -- Poisson and shuffled batch selection.
* :mod:`~ldpsim._src.fl.dpsgd.steps` -- the jitted epoch kernels (one ``lax.scan`` of
  DP-SGD steps) and the DP optimizer of a config.
* :mod:`~ldpsim._src.fl.dpsgd.train` -- :func:`train_dpsgd`: data, model, compile, the loop.
"""
