"""Building blocks of distributed discrete DP under secure aggregation.

The distributed discrete Gaussian (Kairouz, Liu & Steinke, ICML 2021, arXiv:2102.06387) and the
Skellam mechanism (Agarwal, Kairouz & Liu, NeurIPS 2021, arXiv:2110.04995), as deployed: clip,
randomized Hadamard rotation (:mod:`ldpsim._src.privacy.hadamard`), scale by ``1/γ``, conditional randomized
rounding (:mod:`.rounding`), integer noise (:mod:`.samplers`: an exact discrete Gaussian
sampler; a Skellam sampler), wrap to ``b`` bits, sum modulo ``2^b`` and decode
(:mod:`.modular`), with JAX-free accounting (:mod:`.accounting`) and diagnostics
(:mod:`.diagnostics`). :mod:`.pipeline` chains the
client's and the server's steps.
"""
