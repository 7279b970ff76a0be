"""Pure maths of privacy: clipping, local randomizers, calibration, accounting, DP-SGD.

Importable and useful on its own, without :mod:`ldpsim.fl`.  The frontier's figure is
:func:`ldpsim.plots.plot_frontier` (``ldpsim.privacy.plot_frontier`` still works, with a
:class:`DeprecationWarning`).
"""

from ldpsim._src.privacy.noise.calibration import (
    SHORTFALL_RTOL,
    Calibration,
    CalibrationShortfallWarning,
    ClassicGaussianRangeWarning,
    analytic_gaussian_delta,
    analytic_gaussian_epsilon,
    analytic_gaussian_sigma,
    calibrate,
    classic_gaussian_sigma,
    gaussian_achieved,
    laplace_epsilon,
    laplace_scale,
    mindspore_gaussian_sigma,
    sensitivity,
)
from ldpsim._src.privacy.randomizers.clipping import (
    clip_by_global_norm,
    clip_by_l1_norm,
    clip_per_layer,
    global_norm,
    per_layer_bound,
)
from ldpsim._src.privacy.accountants.accounting import (
    LdpAccountant,
    PrivacyReport,
    SampledGaussianAccountant,
    dpfedavg_epsilon,
    dpfedavg_noise_multiplier,
    dpsgd_epsilon,
    dpsgd_noise_multiplier,
    ldp_epsilon,
    ldp_round_epsilon,
    mechanism_epsilon,
    total_epsilon,
)
from ldpsim._src.privacy.server.adaptive import AdaptiveClip, mindspore_clip, quantile_clip
from ldpsim._src.privacy.analysis.averaging import effective_num_clients, expected_noise_norm, noise_study
from ldpsim._src.privacy.noise.calibration import SamplerTailWarning, sampler_delta_floor
from ldpsim._src.privacy.noise.realised import (
    AdditiveRealisation,
    SamplerModel,
    additive_realisation,
    compose_delta,
    delta_budget,
    realised_delta,
    realised_epsilon,
    sampler_model,
)
from ldpsim._src.fl.dpsgd.aggregate import (
    dp_adam,
    dp_aggregate,
    dp_momentum,
    dp_optimizer,
    dp_sgd,
    microbatch_grads,
)
from ldpsim._src.privacy.randomizers.mechanism import (
    LocalMechanism,
    MechanismParams,
    Privatized,
    gaussian_randomizer,
    laplace_randomizer,
)
from ldpsim._src.privacy.randomizers.duchi import make as duchi
from ldpsim._src.privacy.randomizers.privunit2 import make as privunit2
from ldpsim._src.privacy.randomizers.privunitg import make as privunitg
from ldpsim._src.privacy.randomizers.projunit import fastprojunit, projunit
from ldpsim._src.privacy.randomizers.randomizer import Report, total_variance
from ldpsim._src.privacy.randomizers.rr import k_randomized_response
from ldpsim._src.privacy.randomizers.rr import make as randomized_response
from ldpsim._src.privacy.randomizers.signds import make as signds
from ldpsim._src.privacy.accountants.monitors import RDPMonitor, ZCDPMonitor
from ldpsim._src.privacy.accountants.ledger import PrivacyLedger
from ldpsim._src.privacy.accountants.secagg import (
    secagg_epsilon,
    secagg_noise_multiplier,
    secagg_sigma,
    secagg_survivors,
)
from ldpsim._src.privacy.accountants.shuffling import (
    ShuffleReport,
    shuffle_delta,
    shuffle_epsilon,
    shuffle_pld,
    shuffle_report,
    shuffle_rounds_epsilon,
    stronger_clone_applies,
)
from ldpsim._src.privacy.accountants.shuffling import closed_form_epsilon as shuffle_closed_form_epsilon
from ldpsim._src.privacy.accountants.trust import (
    TRUST_MODELS,
    TrustModelNoise,
    shuffle_local_epsilon,
    trust_model_noise,
)
from ldpsim._src.privacy.analysis.frontier import FrontierRow, frontier, frontier_cell
from ldpsim._src.privacy.analysis.frontier import lower_bound as frontier_lower_bound
from ldpsim._src.privacy.analysis.frontier import winners as frontier_winners
import warnings as _warnings

from ldpsim._src.privacy.noise.mechanisms import (
    add_gaussian_noise,
    add_laplace_noise,
    gaussian_noise,
    laplace_noise,
)

__all__ = [
    "AdaptiveClip",
    "AdditiveRealisation",
    "mechanism_epsilon",
    "SamplerModel",
    "additive_realisation",
    "compose_delta",
    "delta_budget",
    "realised_delta",
    "realised_epsilon",
    "sampler_model",
    "Calibration",
    "CalibrationShortfallWarning",
    "ClassicGaussianRangeWarning",
    "FrontierRow",
    "TRUST_MODELS",
    "TrustModelNoise",
    "LdpAccountant",
    "LocalMechanism",
    "MechanismParams",
    "PrivacyLedger",
    "PrivacyReport",
    "Privatized",
    "RDPMonitor",
    "Report",
    "SHORTFALL_RTOL",
    "SampledGaussianAccountant",
    "SamplerTailWarning",
    "ShuffleReport",
    "ZCDPMonitor",
    "add_gaussian_noise",
    "add_laplace_noise",
    "analytic_gaussian_delta",
    "analytic_gaussian_epsilon",
    "analytic_gaussian_sigma",
    "calibrate",
    "classic_gaussian_sigma",
    "clip_by_global_norm",
    "clip_by_l1_norm",
    "clip_per_layer",
    "dp_adam",
    "dp_aggregate",
    "dp_momentum",
    "dp_optimizer",
    "dp_sgd",
    "dpfedavg_epsilon",
    "dpfedavg_noise_multiplier",
    "dpsgd_epsilon",
    "dpsgd_noise_multiplier",
    "duchi",
    "fastprojunit",
    "effective_num_clients",
    "expected_noise_norm",
    "frontier",
    "frontier_cell",
    "frontier_lower_bound",
    "frontier_winners",
    "gaussian_achieved",
    "gaussian_noise",
    "gaussian_randomizer",
    "global_norm",
    "k_randomized_response",
    "laplace_epsilon",
    "laplace_noise",
    "laplace_randomizer",
    "laplace_scale",
    "ldp_epsilon",
    "total_epsilon",
    "ldp_round_epsilon",
    "microbatch_grads",
    "mindspore_clip",
    "mindspore_gaussian_sigma",
    "noise_study",
    "per_layer_bound",
    "privunit2",
    "privunitg",
    "projunit",
    "quantile_clip",
    "randomized_response",
    "sampler_delta_floor",
    "secagg_epsilon",
    "secagg_noise_multiplier",
    "secagg_sigma",
    "secagg_survivors",
    "sensitivity",
    "shuffle_closed_form_epsilon",
    "shuffle_delta",
    "shuffle_epsilon",
    "shuffle_local_epsilon",
    "shuffle_pld",
    "shuffle_report",
    "shuffle_rounds_epsilon",
    "signds",
    "stronger_clone_applies",
    "total_variance",
    "trust_model_noise",
]


#: Names that moved, kept importable with a DeprecationWarning: name -> new home.
_DEPRECATED = {"plot_frontier": "ldpsim.plots.plot_frontier"}


def __getattr__(name: str):
    if name in _DEPRECATED:
        _warnings.warn(f"ldpsim.privacy.{name} is deprecated: use {_DEPRECATED[name]} (a figure "
                       "belongs in ldpsim.plots)", DeprecationWarning, stacklevel=2)
        from ldpsim._src.plots import frontier   # on first use: matplotlib is not imported before

        return getattr(frontier, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
