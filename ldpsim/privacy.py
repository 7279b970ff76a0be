"""Pure maths of privacy: clipping, local randomizers, calibration (and accounting).

Importable and useful on its own, without :mod:`ldpsim.fl`.
"""

from ldpsim._src.privacy.calibration import (
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
from ldpsim._src.privacy.clipping import (
    clip_by_global_norm,
    clip_by_l1_norm,
    clip_per_layer,
    global_norm,
    per_layer_bound,
)
from ldpsim._src.privacy.mechanism import Privatized, gaussian_randomizer, laplace_randomizer
from ldpsim._src.privacy.mechanisms import (
    add_gaussian_noise,
    add_laplace_noise,
    gaussian_noise,
    laplace_noise,
)

__all__ = [
    "SHORTFALL_RTOL",
    "Calibration",
    "CalibrationShortfallWarning",
    "ClassicGaussianRangeWarning",
    "Privatized",
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
    "gaussian_noise",
    "gaussian_achieved",
    "gaussian_randomizer",
    "global_norm",
    "laplace_noise",
    "laplace_epsilon",
    "laplace_randomizer",
    "laplace_scale",
    "mindspore_gaussian_sigma",
    "per_layer_bound",
    "sensitivity",
]
