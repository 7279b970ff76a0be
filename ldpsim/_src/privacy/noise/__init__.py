"""The additive noise: samplers, draws on pytrees, calibration and the realised float32 law.

* :mod:`.gaussian_exact` -- the exact δ(ε) and ε(δ) of the Gaussian mechanism.
* :mod:`.realised` -- what the float32 samplers deliver (the guarantee of the realised law).
* :mod:`.calibration` -- (ε, δ, sensitivity) -> noise scale.
* :mod:`.sampling` -- fast, reproducible N(0, 1) and Laplace samplers.
* :mod:`.mechanisms` -- Gaussian and Laplace noise on pytrees.
"""
