"""The exact sequential/direct edge of balanced l2-SAM at L = 2 (docs/theory.md §4.4).

Checked against computations samflow does not make: the hand value of the formula, an
independent SciPy float64 integration of the balanced flow in log space, and the
growth rates taken from the generic two-layer field written out here in NumPy.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from samflow.theory import l2sam_l2_alpha_bounds, l2sam_l2_direct_edge

MU = np.array([1.0, 2.0, 3.0, 4.0])
GRID = np.concatenate([np.geomspace(1e-8, 1e-2, 300), np.linspace(1e-2, 5.0, 500)[1:]])


def _log_beta(mu, rho, alpha, taus):
    """``log|beta_j(tau)|`` ``[T, d]`` of the balanced L = 2 l2-SAM flow, uniform alpha.

    State ``s_j = log(u_j / alpha)`` (log space, anchored at 0 so the tolerances
    resolve the tiny early differences), ``ds_j/dtau = mu_j (1 - rho mu_j / N)``,
    ``N = sqrt(2 sum_k mu_k^2 u_k^2)``; ``beta = u^2``.
    """
    log_alpha = np.log(alpha)

    def rhs(tau, s):
        log_n = 0.5 * np.log(2.0) + log_alpha + 0.5 * np.log(np.sum(mu**2 * np.exp(2 * s)))
        return mu * (1.0 - rho * mu * np.exp(-log_n))

    sol = solve_ivp(
        rhs,
        (0.0, taus[-1]),
        np.zeros(mu.size),
        t_eval=taus,
        method="DOP853",
        rtol=1e-10,
        atol=1e-15,
    )
    assert sol.success, sol.message
    return 2.0 * (log_alpha + sol.y.T)


def _leaders(mu, rho, alpha):
    lb = _log_beta(mu, rho, alpha, GRID)
    top = np.sort(lb, axis=1)
    assert np.all(top[:, -1] > top[:, -2]), "a tie in the reference: cannot rank"
    return np.argmax(lb, axis=1) + 1, lb


def _check_edge(mu, rho):
    edge = l2sam_l2_direct_edge(mu, rho)
    d = mu.size
    above, log_beta = _leaders(mu, rho, edge * (1 + 1e-3))
    assert np.all(above == d), f"above the edge {edge}: leaders {np.unique(above)}"
    # The step of the proof: N = sqrt(2 sum mu^2 beta) only grows above the edge.
    log_n2 = np.log(2 * np.sum(mu**2 * np.exp(log_beta), axis=1))
    assert np.all(np.diff(log_n2) > 0)
    below, _ = _leaders(mu, rho, edge * (1 - 1e-3))
    # The leader at tau = 0+ has the largest growth rate at tau = 0.
    n0 = np.sqrt(2.0) * edge * (1 - 1e-3) * np.linalg.norm(mu)
    expected = int(np.argmax(mu * (1 - rho * mu / n0))) + 1
    assert expected != d
    assert below[0] == expected
    return edge, above, below


def test_edge_value_for_the_focal_problem():
    edge = l2sam_l2_direct_edge(MU, 1.0)
    assert round(edge, 4) == 0.9037
    assert edge == pytest.approx(7.0 / np.sqrt(60.0), rel=1e-15)  # (4 + 3) / (sqrt 2 sqrt 30)
    lo, hi = l2sam_l2_alpha_bounds(MU, 1.0)
    assert lo < edge < hi  # sharper than the instantaneous direct bound
    assert l2sam_l2_direct_edge(MU[::-1], 2.5) == pytest.approx(2.5 * edge, rel=1e-15)


def test_edge_rejects_ties_and_bad_mu():
    for bad in ([1.0, 3.0, 3.0], [2.0], [0.0, 1.0], [-1.0, 2.0]):
        with pytest.raises(ValueError):
            l2sam_l2_direct_edge(bad, 1.0)


def test_major_leads_throughout_just_above_the_edge_and_not_just_below():
    _, _, below = _check_edge(MU, 1.0)
    assert below[0] == 3  # the runner-up leads first
    assert np.any(below == 4)  # ... and hands over to the major coordinate later


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_edge_for_random_mu_and_rho(seed):
    rng = np.random.default_rng(seed)
    d = int(rng.integers(3, 6))
    while True:
        mu = np.sort(rng.uniform(0.5, 3.0, d))
        if np.min(np.diff(mu)) > 0.1:
            break
    rho = float(rng.uniform(0.3, 2.0))
    _check_edge(mu, rho)


def _generic_growth_rates(mu, u, rho):
    """``d log u_j/dtau`` from the two-layer rescaled field, nothing balanced assumed."""
    w = np.stack([u, u])  # layers w^(1), w^(2)
    m = mu * w[::-1]  # m^(l)_j = mu_j prod_{k != l} w^(k)_j
    tilde = w - rho * m / np.sqrt(np.sum(m**2))
    field = mu * tilde[::-1]  # dw^(l)_j/dtau = mu_j prod_{k != l} w~^(k)_j
    np.testing.assert_allclose(field[0], field[1], rtol=1e-14)  # layers stay equal
    return field[0] / u


def test_growth_rate_gap_identity():
    rng = np.random.default_rng(0)
    for _ in range(200):
        d = int(rng.integers(2, 8))
        mu = np.sort(rng.uniform(0.1, 5.0, d))
        u = np.exp(rng.uniform(-3.0, 3.0, d))
        rho = float(rng.uniform(0.0, 3.0))
        g = _generic_growth_rates(mu, u, rho)
        N = np.sqrt(2.0 * np.sum(mu**2 * u**2))
        np.testing.assert_allclose(g, mu * (1 - rho * mu / N), rtol=1e-12, atol=1e-12)
        gap = (mu - mu[-1]) * (1 - rho * (mu + mu[-1]) / N)
        np.testing.assert_allclose(g - g[-1], gap, rtol=1e-10, atol=1e-12)
