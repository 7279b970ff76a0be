"""Gradient inversion attacks (DLG, iDLG) against what a client releases, and image metrics.

The implementation behind :mod:`ldpsim.attacks`; see that module for the threat model.
"""
