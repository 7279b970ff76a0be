"""Moved: DP-SGD's optax transformations are :mod:`ldpsim._src.fl.dpsgd.aggregate`.

A private path kept importable (no warning) while code written against it is updated; the
public names are :mod:`ldpsim.privacy`'s (``dp_aggregate``, ``dp_sgd``, ...). New code
imports :mod:`ldpsim._src.fl.dpsgd.aggregate`.
"""

from ldpsim._src.fl.dpsgd.aggregate import (
    CLIP_DECAYS,
    NOISE_DECAYS,
    DPAggregateState,
    decay_noise_multiplier,
    dp_adam,
    dp_aggregate,
    dp_momentum,
    dp_optimizer,
    dp_sgd,
    microbatch_grads,
    noisy_sum_step,
    update_clip_norm,
)

__all__ = ["CLIP_DECAYS", "DPAggregateState", "NOISE_DECAYS", "decay_noise_multiplier", "dp_adam",
           "dp_aggregate", "dp_momentum", "dp_optimizer", "dp_sgd", "microbatch_grads",
           "noisy_sum_step", "update_clip_norm"]
