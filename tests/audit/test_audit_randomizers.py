"""Audits of the randomizers beyond additive noise: PrivUnit2, PrivUnitG,
Duchi et al., SignDS, and the canonical k-RR, through ``ldpsim.audit.audit_randomizer``.

False-failure rate: each audit runs at ``confidence = 0.999``, so for a correct
implementation ``P(ε_lb > ε) ≤ 1e-3`` per audit (two one-sided Clopper–Pearson bounds at
``1 − 5e-4`` each, union bound), and so does each one's support-mismatch bound; the five
"never refuted" audits below fail together with probability at most 1e-2 for a fresh seed
(the seeds are fixed, so each run is deterministic).
The power checks (ε_lb well above 0) and the planted bug are deterministic at these seeds.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import pytest

import ldpsim.mechanism

from ldpsim._src._checks import LdpsimError
from ldpsim._src.audit import _audit, _mechanisms
from ldpsim._src.privacy.randomizers import duchi, rr

TRIALS = 20_000


@pytest.mark.parametrize("name", ["privunit2", "privunitg", "duchi", "signds", "rr"])
def test_correct_report_randomizers_are_never_refuted(name):
    report = _audit.audit_randomizer(name, epsilon=1.0, trials=TRIALS, confidence=0.999, seed=1,
                                     **({"k": 3} if name == "rr" else {}))
    assert report.result.epsilon_lb <= 1.0
    assert report.result.support_mismatch.epsilon_lb <= 1.0   # and no event only one input reaches
    assert not report.refuted
    # power: the score is informative (the bound is not vacuous at 1e4 evaluation trials;
    # SignDS's informative event, the reported index inside a top-k set, is rare at k = 2)
    assert report.result.epsilon_lb > (0.3 if name == "signds" else 0.5)
    assert report.path in ("full-mechanism", "sufficient-statistic")
    if report.path == "full-mechanism":   # the code it names exists
        assert report.sampler == f"ldpsim.mechanism.make({name!r}, ...).privatize"
        assert name in ldpsim.mechanism.REGISTRY


def test_a_planted_bug_is_caught():
    """Duchi et al. whose far-side coin is 1/(e^4 + 1) while it claims ε = 1: ε_lb > 1."""
    mech, x0, x1, score, local, _ = _mechanisms.report_game("duchi", epsilon=1.0, dim=16)
    c, n = duchi.away_cut(4.0)
    bad = dataclasses.replace(local.params, cut=jax.numpy.asarray(rr.words_of(c, n)))

    def buggy(key, x):
        return local.privatize(key, x, bad).report

    result = _audit.audit(buggy, x0, x1, key=jax.random.key(0), trials=TRIALS, score=score,
                          confidence=0.999)
    assert result.epsilon_lb > 1.0


def test_report_randomizer_audit_bad_input():
    with pytest.raises(LdpsimError, match="pure epsilon-LDP: delta must be omitted"):
        _audit.audit_randomizer("privunitg", epsilon=1.0, delta=1e-5, trials=10)
    with pytest.raises(LdpsimError, match="neighbours must be 'replace'"):
        _audit.audit_randomizer("duchi", epsilon=1.0, neighbours="add-remove", trials=10)
    with pytest.raises(LdpsimError, match="mechanism must be one of .*privunit2"):
        _audit.audit_randomizer("privunit", epsilon=1.0, trials=10)
    with pytest.raises(LdpsimError, match="epsilon must be > 0"):
        _audit.audit_randomizer("privunit2", epsilon=0.0, trials=10)
