"""The cheaper certificates a flow's solver checks at each step (``BalancedFlow.step_fate``,
``BalancedFlow.step_collapse``; docs/theory/regimes.md#labels-of-the-limit): they leave out
what is costly, never what they say. Checked against the full certificate
(``BalancedFlow.fate``) on random states of every built-in log-form rule."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from samflow import fate as fates
from samflow.rules import get_rule
from tests.runs import certify


def _states(seed, n=1000, d=4):
    """Random states: log |u| from 1e-3 rho to 10 rho, mu in [0.2, 5], rho in [0.05, 5]."""
    rng = np.random.default_rng(seed)
    mu = rng.uniform(0.2, 5.0, (n, d))
    rho = np.exp(rng.uniform(np.log(0.05), np.log(5.0), n))
    s = np.log(rho)[:, None] + rng.uniform(np.log(1e-3), np.log(10.0), (n, d))
    return s, mu, rho


def _step_collapse(rule, s, mu, depth, rho):
    with jax.enable_x64(True):
        check = rule.balanced.step_collapse

        def one(s_, mu_, rho_):
            return check(s_, mu_, depth, rho_)

        args = (jnp.asarray(s), jnp.asarray(mu), jnp.asarray(rho))
        return np.asarray(jax.jit(jax.vmap(one))(*args))


@pytest.mark.parametrize("method", ["gd", "sam-l2", "usam"])
def test_the_step_checks_say_what_the_certificate_says(method):
    """At L = 2..5: where the solver's collapse check holds, the full certificate says
    collapse, and the other way round (the lead, finite and return certificates it leaves
    out prove no collapse and hold in none of the collapse regions); every code the step's
    certificate gives is the full one's (it leaves out only l2-SAM's middle that empties,
    which says collapse where the step's says nothing). Some collapses must be seen, else
    the test could not fail."""
    rule = get_rule(method)
    seen = 0
    for depth in (2, 3, 4, 5):
        s, mu, rho = _states(depth)
        code, winner = certify(rule, s, mu, depth, rho)
        step_code, step_winner = certify(rule, s, mu, depth, rho, in_step=True)
        collapses = _step_collapse(rule, s, mu, depth, rho)
        assert np.array_equal(collapses, step_code == fates.COLLAPSE), depth
        same = step_code == code
        assert np.all(same | ((step_code == fates.OPEN) & (code == fates.COLLAPSE))), depth
        assert np.array_equal(step_winner[same], winner[same]), depth
        seen += int(np.sum(collapses))
    assert method == "gd" or seen >= 10, seen
