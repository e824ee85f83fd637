"""The exact sequential/direct edge of balanced l2-SAM at L = 2
(docs/theory/balanced.md#direct-edge-depth-2) and its closed form at every depth
(docs/theory/balanced.md#direct-edge-any-depth).

Checked against computations samflow does not make: the hand value of the formula, an
independent SciPy float64 integration of the balanced flow in log space, and the
growth rates taken from the generic two-layer field written out here in NumPy.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.integrate import solve_ivp
from scipy.optimize import brentq

from samflow.theory import l2sam_direct_edge, l2sam_l2_alpha_bounds, l2sam_l2_direct_edge

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


# --- the direct edge at every depth (docs/theory/balanced.md#direct-edge-any-depth)
# ---------------------------


def _f(x, M, L):
    """The growth rate at tau = 0 up to a common positive factor: x (1 - x/M)^(L-1)."""
    return x * (1.0 - x / M) ** (L - 1)


def _edge_by_root_finding(mu, rho, L):
    """alpha* from f(mu_d) = f(mu_{d-1}) solved for M by brentq on [mu_d, L mu_d]:
    at M = mu_d, f(mu_d) = 0 < f(mu_{d-1}); at M = L mu_d, mu_d is f's peak."""
    b, a = np.sort(mu)[-2:]
    M = brentq(lambda M: _f(a, M, L) - _f(b, M, L), a, L * a, xtol=1e-15, rtol=1e-15)
    return rho * M / (np.sqrt(L) * np.linalg.norm(mu))


def _generic_log_rates(mu, alpha, rho, L):
    """``d log|beta_j|/dtau`` at a uniform start from the L-layer rescaled field written
    out here (no balanced form assumed): ``m^(l)_j = mu_j prod_{k != l} w^(k)_j``,
    ``w~ = w - rho m / ||m||_2``, ``dw^(l)_j/dtau = mu_j prod_{k != l} w~^(k)_j``."""
    w = np.full((L, mu.size), alpha)

    def excl(v):
        return np.stack([np.prod(np.delete(v, i, axis=0), axis=0) for i in range(L)])

    m = mu * excl(w)
    tilde = w - rho * m / np.sqrt(np.sum(m**2))
    field = mu * excl(tilde)
    return np.sum(field / w, axis=0)  # log|beta_j| = sum_l log w^(l)_j


def test_direct_edge_at_every_depth_solves_the_tie_of_growth_rates():
    """The closed form against brentq on f(mu_d) = f(mu_{d-1}), and the hand values.

    Tolerance 1e-12 relative: brentq to 1e-15 on M, and the closed form's expm1 form
    loses a few ulps at most (q = 1/(L-1) down to 1/11)."""
    mu = np.array([1.0, 2.0, 3.0, 4.0])
    assert l2sam_direct_edge(mu, 1.0, 2) == l2sam_l2_direct_edge(mu, 1.0)
    hand3 = (4 + np.sqrt(12.0) + 3) / (np.sqrt(3.0) * np.sqrt(30.0))
    assert l2sam_direct_edge(mu, 1.0, 3) == pytest.approx(hand3, rel=1e-14)
    rng = np.random.default_rng(7)
    for _ in range(40):
        d = int(rng.integers(2, 7))
        mu = rng.uniform(0.1, 5.0, d)
        if np.sort(mu)[-1] - np.sort(mu)[-2] < 1e-3:
            continue
        rho = float(rng.uniform(0.01, 3.0))
        for L in range(2, 13):
            want = _edge_by_root_finding(mu, rho, L)
            assert l2sam_direct_edge(mu, rho, L) == pytest.approx(want, rel=1e-12), (mu, rho, L)
    # the edge moves up with depth and stays below the L mu_d / (sqrt L ||mu||) limit
    edges = [l2sam_direct_edge([1, 2, 3, 4], 0.1, L) for L in range(2, 9)]
    assert np.all(np.diff(edges) > 0)


@pytest.mark.parametrize("L", [2, 3, 4, 5, 6])
def test_the_major_leads_at_the_start_exactly_above_the_edge(L):
    """Just above alpha* the major has the largest rate of log|beta_j| at tau = 0 (so it
    leads at 0+, every |beta_j(0)| being tied), just below it the runner-up does, and
    down to the branch point M = mu_d (alpha = rho mu_d / (sqrt L ||mu||)) it never
    does. Rates from the generic L-layer field, relative offsets 1e-6 (the rate gap is
    first order in the offset, ~1e-7 of the rates, far above rounding)."""
    mu, rho = np.array([1.0, 2.0, 3.0, 4.0]), 0.1
    edge = l2sam_direct_edge(mu, rho, L)
    assert np.argmax(_generic_log_rates(mu, edge * (1 + 1e-6), rho, L)) == 3
    assert np.argmax(_generic_log_rates(mu, edge * (1 - 1e-6), rho, L)) == 2
    branch = rho * mu[-1] / (np.sqrt(L) * np.linalg.norm(mu))
    for alpha in np.geomspace(branch * (1 + 1e-6), edge * (1 - 1e-6), 50):
        assert np.argmax(_generic_log_rates(mu, alpha, rho, L)) != 3


def test_direct_edge_rejects_bad_depth_and_mu():
    for depth in (0, 1, 2.5):
        with pytest.raises(ValueError):
            l2sam_direct_edge([1.0, 2.0], 1.0, depth)
    with pytest.raises(ValueError):
        l2sam_direct_edge([1.0, 3.0, 3.0], 1.0, 3)


def test_direct_edge_is_the_upper_edge_samflow_boundary_finds_at_l_2_to_6():
    """samflow.boundary (scan of the regime at the horizon, then bisection) at L = 2..6,
    mu = (1, 2, 3, 4), rho = 0.05 and 0.2: its largest direct edge in alpha in
    [0.03, 0.5] is where the runs turn direct for good (the scan's top, 0.5, is direct
    at every L and rho, checked); it is the closed form. Lower edges that may appear at
    L >= 3 (one at L = 5, rho = 0.2, alpha 0.045) are starts the major leads at 0+ and
    loses later (docs/theory/balanced.md#direct-edge-any-depth, step 4), past this test.

    Tolerance 3e-6 relative: bisection on log alpha to rtol 1e-6 (the reported
    midpoint is within 5e-7 of the true change), and the change itself is exact to
    rounding, since samflow reads the leader at 0+ from the field at tau = 0."""
    import samflow
    from samflow.regimes import DIRECT

    depths, rhos = [2, 3, 4, 5, 6], [0.05, 0.2]
    # to the fate, up to the boundary's default cap: the top's sweep below is a batch of
    # the bisection's size through the same compiled program
    runner = samflow.Flow(
        tau_max=200.0, save=samflow.LogSpaced(19), tau_cap=samflow.BoundarySearch().cap_factor * 200
    )
    ds = samflow.boundary(
        "sam-l2",
        depth=6,
        mu=[1.0, 2.0, 3.0, 4.0],
        axes={"depth": depths, "rho": rhos},
        runner=runner,
        search=samflow.BoundarySearch(alpha_range=(0.03, 0.5), scan_points=13, rtol_alpha=1e-6),
    )
    top = samflow.sweep(
        "sam-l2",
        depth=6,
        mu=[1.0, 2.0, 3.0, 4.0],
        axes={"depth": depths, "rho": rhos, "alpha": [0.5]},
        runner=runner,
    )
    assert np.all(top["regime"].values == DIRECT)
    for L in depths:
        for rho in rhos:
            found = np.nanmax(ds["alpha_direct_all"].sel(depth=L, rho=rho).values)
            exact = l2sam_direct_edge([1.0, 2.0, 3.0, 4.0], rho, L)
            assert abs(found / exact - 1) < 3e-6, (L, rho, found, exact)
