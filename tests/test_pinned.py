"""l2-SAM's pinned major at odd L (docs/theory/regimes.md#pinned-major): the major leads at
its own fixed point (y_a = rho c x_a ~ 1, so it barely grows) and every minor is far
behind but grows like GD. Where the verified box integration shows a minor leading later
(``samflow.rules._l2_hands_on``) and the escape past the fixed point holds, the certificate
says RETURNS (the major, leading now, hands the lead on and wins in the end). Checked
against NumPy float64 step maps and SciPy DOP853 flows written here, read every step; the
same states with the major already released (y_a well below 1) are not certified, and
there the map and the flow keep the major's lead."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from samflow import fate as fates
from samflow.rules import SAM_L2
from tests.runs import certify, l2_log_field, l2_step


def _states(rng, n, L, y_a, share):
    """``n`` states [n, 4] at depth ``L``: mu distinct in [0.5, 4], rho in [0.3, 1.5], the
    minors' rate shares x_k / x_a uniform in ``share`` and the major at ``y_a`` (a range),
    solved in closed form: with u_k = c_k u_a (c_k = share mu_a / mu_k)^(1/n)), ``y_a = (rho
    / sqrt L) mu_a / (u_a sqrt(mu_a^2 + sum_k mu_k^2 c_k^(2L-2)))`` at L = 3, and in general
    ``y_a = (rho / sqrt L) mu_a u_a^(L-2) / (u_a^(L-1) sqrt(...))``."""
    n_ = L - 2
    mu = np.sort(rng.uniform(0.5, 4.0, (n, 4)), axis=1)
    rho = rng.uniform(0.3, 1.5, n)
    q = rng.uniform(*share, (n, 3))
    ya = rng.uniform(*y_a, n)
    c = (q * mu[:, 3:] / mu[:, :3]) ** (1 / n_)  # u_k / u_a
    root = np.sqrt(mu[:, 3] ** 2 + np.sum(mu[:, :3] ** 2 * c ** (2 * L - 2), axis=1))
    ua = (rho / np.sqrt(L) * mu[:, 3] / (ya * root)) ** (1 / 1)  # u_a^(L-1-n) = u_a
    u = np.concatenate([c * ua[:, None], ua[:, None]], axis=1)
    return u, mu, rho


def _map(u, mu, L, rho, eta, steps):
    """NumPy float64 map, read every step: per state, the step at which a minor first
    leads strictly (or -1); it stops where every state has one."""
    a = mu.shape[1] - 1
    first = np.full(len(u), -1)
    for t in range(1, steps + 1):
        u = l2_step(u, mu, L, rho[:, None], eta)
        ahead = np.max(u[:, :a], axis=1) > u[:, a]
        first = np.where((first < 0) & ahead, t, first)
        if np.all(first > 0):
            break
    return first


@pytest.mark.parametrize("L", [3, 5])
def test_pinned_major_hands_on(L):
    """Pinned states (y_a in [1, 1.03], minors at 0.2-2% of the major's rate): certified
    RETURNS (winner the major) for the flow and the step at eta 0.01 and 0.05 in most of them
    (the box is first order in gamma: half at least); where certified, the map (read
    every step; eta 0.01 at L = 3 and 0.05) has a minor lead strictly, and the flow has a
    minor pass the major before the major blows up. (The major's return, the escape's
    claim, comes later than such a map can afford: the steps shrink with the loss.)"""
    rng = np.random.default_rng(38 + L)
    u, mu, rho = _states(rng, 12, L, (1.0, 1.03), (0.002, 0.02))
    for eta in (None, 0.01, 0.05):
        code, winner = certify(SAM_L2, np.log(u), mu, L, rho, eta, at_end=True)
        certified = code == fates.RETURNS
        # tried at a run's end only (BalancedFlow.fate_at_end), not at every check
        checked, _ = certify(SAM_L2, np.log(u), mu, L, rho, eta)
        assert not np.any(checked == fates.RETURNS), eta
        if eta is None:
            flow_certified = certified
        assert np.sum(certified) >= 6, (eta, code)
        assert np.all(winner[certified] == 4)
        if eta is not None and (L == 3 or eta > 0.01):  # the map at L = 5: eta 0.05 only
            first = _map(u[certified], mu[certified], L, rho[certified], eta, 300_000)
            assert np.all(first > 0), first
    for i in np.flatnonzero(flow_certified)[:4]:  # the flow: a minor passes before blow-up
        events = [lambda t, y, k=k: y[3] - y[k] for k in range(3)]
        far = np.log(1e3 * np.sqrt(L) * rho[i])
        blow = lambda t, y, far=far: y[3] - far  # noqa: E731
        for e in [*events, blow]:
            e.terminal = True
        sol = solve_ivp(
            l2_log_field(mu[i], L, rho[i]),
            (0, 1e7),
            np.log(u[i]),
            method="DOP853",
            rtol=1e-11,
            atol=1e-12,
            events=[*events, blow],
        )
        assert any(len(sol.t_events[k]) for k in range(3)), i


def test_released_major_not_certified():
    """The same minors with the major released (y_a in [0.5, 0.8]): the major escapes before
    any minor comes near, the map (eta 0.01, read every step, 40,000 steps) keeps its lead,
    and the certificate does not say RETURNS."""
    rng = np.random.default_rng(7)
    u, mu, rho = _states(rng, 12, 3, (0.5, 0.8), (0.002, 0.02))
    for eta in (None, 0.01):
        code, _ = certify(SAM_L2, np.log(u), mu, 3, rho, eta, at_end=True)
        assert not np.any(code == fates.RETURNS), eta
    assert np.all(_map(u, mu, 3, rho, 0.01, 40_000) < 0)
