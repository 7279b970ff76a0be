"""Gradient inversion (DLG, iDLG) against what a client releases: what local DP protects.

Threat model: an honest-but-curious server knows the model parameters θ, the architecture
and loss, the number B of examples behind a client's update, the clip bound C and the
mechanism, and observes what the client releases: the gradient of its mean cross-entropy
at θ, clipped and privatized by ldpsim's own local randomizer (additive noise, or a report
randomizer whose report the server decodes), or the sum of n such releases. It
reconstructs the (first) client's examples by gradient matching:

* DLG: Zhu, Liu & Han, "Deep Leakage from Gradients", NeurIPS 2019, arXiv:1906.08935.
* iDLG: Zhao, Mopuri & Bilen, "iDLG: Improved Deep Leakage from Gradients", 2020,
  arXiv:2001.02610 (labels read from the sign of the output layer's gradient).

Reconstruction quality is PSNR and SSIM (Wang et al. 2004) against the true images after
the best matching of the B reconstructions to the B examples, and the label recovery rate.

Example::

    from ldpsim import attacks, models
    model = models.get_model("mlp", input_shape=(28, 28, 1), num_classes=10)
    rows, _ = attacks.run_grid(x_train, y_train, model=model, epsilons=[float("inf"), 100],
                               mechanisms=["gaussian"], examples=[1], clients=[1], seeds=[0])

The command line is ``ldpsim attack``.
"""

from ldpsim._src.attacks._experiment import (
    COLUMNS,
    DEFAULT_EPSILONS,
    AttackResult,
    attack_mechanisms,
    attack_trials,
    build_mechanism,
    pick_examples,
    release_of,
    run_grid,
)
from ldpsim._src.attacks._figure import reconstruction_figure
from ldpsim._src.attacks._inversion import (
    METHODS,
    NORMS,
    OPTIMIZERS,
    InversionConfig,
    Reconstruction,
    client_gradient,
    invert,
    recover_labels,
    victim_loss,
)
from ldpsim._src.attacks._metrics import (
    label_recovery,
    match_examples,
    psnr,
    ssim,
)

__all__ = [
    "COLUMNS",
    "DEFAULT_EPSILONS",
    "METHODS",
    "NORMS",
    "OPTIMIZERS",
    "AttackResult",
    "InversionConfig",
    "Reconstruction",
    "attack_mechanisms",
    "attack_trials",
    "build_mechanism",
    "client_gradient",
    "invert",
    "label_recovery",
    "match_examples",
    "pick_examples",
    "psnr",
    "reconstruction_figure",
    "recover_labels",
    "release_of",
    "run_grid",
    "ssim",
    "victim_loss",
]
