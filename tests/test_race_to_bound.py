"""l2-SAM's *race to the bound* at L >= 3 (docs/theory/regimes.md#lead-certificates-at-every-depth,
``samflow.rules._l2_race_to_bound``) against independent float64 computations written here:
from states it decides (and the rule before it did not) the NumPy step map, read at every
step, and SciPy's DOP853 flow carry the leader to ``sqrt(L) rho`` still leading with the
largest rate; the rule's edge is the proof's own, found here on a fine grid of tau.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

from samflow import fate as fates
from samflow.rules import SAM_L2, _l2_race_to_bound
from tests.runs import certify, l2_log_field, l2_step


def _h_max(eta, L):
    """The largest logistic step eta sigmoid(-z~): eta / 2 at even L (z~ >= 0), else eta."""
    return eta / 2 if L % 2 == 0 else eta


def _rule(u, mu, L, rho, w, eta):
    """The rule's race (float64, as the engine evaluates it), per state."""
    with jax.enable_x64(True):
        e = None if eta is None else jnp.asarray(eta, jnp.float64)
        one = jax.vmap(lambda s, m, k: _l2_race_to_bound(s, m, float(L), rho, k, e))
        return np.asarray(jax.jit(one)(jnp.log(jnp.asarray(u)), jnp.asarray(mu), jnp.asarray(w)))


def _old(u, mu, L, rho, w, eta):
    """The race before (main 0a6d2d2), written again: the leader's worst rate kappa =
    (1 - rho / (sqrt(L) u_w))^(L-1) for the whole race, ``small`` (rho B^n / (sqrt(L)
    u_w^(L-1)) <= 2), two lines compared at their two ends."""
    rows = np.arange(len(u))
    n, B = L - 2, np.sqrt(L) * rho
    uw, mw = u[rows, w], mu[rows, w]
    r_bar = rho / (np.sqrt(L) * uw)
    kappa = np.maximum(1 - r_bar, 0.0) ** (L - 1)
    step = 0.0 if eta is None else eta
    slope = n * mw * kappa / (1 + n * step * mw * B**n)
    small = rho * B**n / (np.sqrt(L) * uw ** (L - 1)) <= 2
    A = u**-n
    t_end = np.maximum(A[rows, w] - B**-n, 0.0) / np.where(slope > 0, slope, 1.0) + step
    ok = (r_bar < 1) & (slope > 0) & small
    for t in (np.zeros_like(t_end), t_end):
        line_w = (A[rows, w] - slope * t)[:, None]
        line = A - n * mu * t[:, None]
        both = (line_w <= line) & (line_w / mw[:, None] <= line / mu)
        ok &= np.all(both | (np.arange(u.shape[1]) == w[:, None]), axis=1)
    return ok


def _margin(u, mu, L, rho, w, eta, points=20001):
    """The proof's condition read pointwise on a fine grid of tau in [0, T* + h_max]:
    min over k != w and tau of m_k (|u_k|^-n - n mu_k tau) - U(tau)^-n, relative to the
    first (> 0 where the proof holds at every point read; a grid of points, so this is
    necessary, not sufficient). U = b + ((u_w - b)^-n - n mu_w sigma tau)^(-1/n), b = rho
    / sqrt(L), sigma = 1 / (1 + n h_max mu_w (B - b)^n), from the bounds F(x_w) >= mu_w
    (u_w - b)^(L-1) / u_w and 0 <= F(x_k) <= x_k, Bernoulli's inequalities for the step."""
    n, B, b = L - 2, np.sqrt(L) * rho, rho / np.sqrt(L)
    h = 0.0 if eta is None else _h_max(eta, L)
    out = np.empty(len(u))
    for i in range(len(u)):
        k = w[i]
        if u[i, k] <= b:
            out[i] = -np.inf
            continue
        sigma = 1 / (1 + n * h * mu[i, k] * (B - b) ** n)
        P0 = (u[i, k] - b) ** -n
        T = (P0 - (B - b) ** -n) / (n * mu[i, k] * sigma) + h
        tau = np.linspace(0.0, T, points)
        P = P0 - n * mu[i, k] * sigma * tau
        U_inv = np.where(P > 0, (b + np.maximum(P, 1e-300) ** (-1 / n)) ** -n, 0.0)
        worst = np.inf
        for j in range(u.shape[1]):
            if j != k:
                m = min(1.0, mu[i, k] / mu[i, j])
                worst = min(worst, np.min(m * (u[i, j] ** -n - n * mu[i, j] * tau) - U_inv))
        out[i] = worst / U_inv[0]
    return out


def _states(rng, n, L, rho):
    """Random mu [n, 4] in (0.3, 4) and states with a random leader w at u_w in (0.3, 0.98)
    sqrt(L) rho (above rho / sqrt(L) for L >= 4; at L = 3 some below), the others from 0.05
    to 0.9 of it (any mu: the rate condition x_w >= x_k is not imposed)."""
    mu = rng.uniform(0.3, 4.0, size=(n, 4))
    w = rng.integers(0, 4, size=n)
    rows, B = np.arange(n), np.sqrt(L) * rho
    top = B * rng.uniform(0.3, 0.98, size=n)
    u = top[:, None] * rng.uniform(0.05, 0.9, size=(n, 4))
    u[rows, w] = top
    return mu, u, w


def _map_race(u0, mu, L, rho, w, eta, steps):
    """The NumPy float64 step map (tests/runs.l2_step) from each state, read at every step
    until u_w >= sqrt(L) rho: whether w led with the largest rate at every step up to and
    including the one that passed the bound, and whether it passed."""
    rows, B = np.arange(len(u0)), np.sqrt(L) * rho
    u = np.array(u0, float)
    kept = np.ones(len(u), bool)
    done = u[rows, w] >= B
    for _ in range(steps):
        u = np.where(done[:, None], u, l2_step(u, mu, L, rho, eta))
        x = mu * u ** (L - 2)
        others = np.arange(u.shape[1]) != w[:, None]
        ahead = np.all(~others | ((u <= u[rows, w][:, None]) & (x <= x[rows, w][:, None])), axis=1)
        kept &= ahead | done
        done |= u[rows, w] >= B
        if done.all():
            break
    return kept, done


@pytest.mark.parametrize("depth", [3, 4, 5])
def test_the_race_decides_states_the_old_rule_missed_and_the_map_agrees(depth):
    """From random states, the race (flow and step, eta 0.01 and 0.5) decides a superset of
    what the rule before decided, and more (l2-SAM's certificate names w); from
    each state only the new rule decides, a
    NumPy float64 step map read at every step carries w past sqrt(L) rho leading with the
    largest rate at every step (eta 0.01: up to 30,000 steps; 0.5: 3,000)."""
    rng = np.random.default_rng(300 + depth)
    rho = 0.6
    mu, u, w = _states(rng, 400, depth, rho)
    for eta, steps in ((None, 0), (0.01, 30000), (0.5, 3000)):
        new, old = _rule(u, mu, depth, rho, w, eta), _old(u, mu, depth, rho, w, eta)
        assert not np.any(old & ~new), eta  # nothing the old rule decided is lost
        only = np.nonzero(new & ~old)[0]
        assert len(only) >= 10, (eta, len(only), old.sum())
        # the rule's certificate (BalancedFlow.fate) names w: LEADS (or TAKES_OVER by w, where
        # a take-over condition holds for it too; w leading, the run settles the same way)
        code, winner = certify(SAM_L2, np.log(u[only]), mu[only], depth, rho, eta)
        named = np.isin(code, (fates.LEADS, fates.TAKES_OVER)) & (winner == w[only] + 1)
        assert np.all(named), eta
        # every state decided satisfies the proof's condition read on a fine grid
        assert np.all(_margin(u[new], mu[new], depth, rho, w[new], eta) > 0), eta
        if eta is not None:
            pick = only[:40]
            kept, done = _map_race(u[pick], mu[pick], depth, rho, w[pick], eta, steps)
            assert np.all(kept), (eta, pick[~kept])
            assert np.all(done), (eta, pick[~done])


@pytest.mark.parametrize("depth", [3, 4, 5])
def test_a_flow_the_race_decides_reaches_the_bound_ahead(depth):
    """SciPy DOP853 (rtol 1e-11) from 3 states per depth only the new race decides (the
    flow's rule): at every solver step up to u_w = sqrt(L) rho, w leads with the largest
    rate (relative slack 1e-9 in logs: the solver's tolerance), and it gets there."""
    rng = np.random.default_rng(310 + depth)
    rho = 0.6
    mu, u, w = _states(rng, 200, depth, rho)
    only = np.nonzero(_rule(u, mu, depth, rho, w, None) & ~_old(u, mu, depth, rho, w, None))[0]
    assert len(only) >= 3
    logB = np.log(np.sqrt(depth) * rho)
    for i in only[:3]:
        k = w[i]

        def there(t, s, k=k):
            return s[k] - logB

        there.terminal = True
        f = l2_log_field(mu[i], depth, rho)
        sol = solve_ivp(f, (0, 1e4), np.log(u[i]), "DOP853", rtol=1e-11, atol=1e-13, events=there)
        assert sol.status == 1, i  # stopped at the bound
        s = sol.y
        lx = np.log(mu[i])[:, None] + (depth - 2) * s
        assert np.all(s <= s[k] + 1e-9), i
        assert np.all(lx <= lx[k] + 1e-9), i


@pytest.mark.parametrize("depth", [3, 4])
@pytest.mark.parametrize("eta", [None, 0.3])
def test_the_race_edge_is_the_proofs(depth, eta):
    """Sharpness: from decided states, the others' u grown by a common factor f (toward w)
    until the rule stops deciding (bisection; states it still decides with the others at
    0.999 of the tie are left out): 0.01% past that factor the proof's condition (read
    pointwise on a fine grid of tau, _margin) fails, and 0.01% before it, it holds: the
    rule's exact minimum is the proof's, and past its edge the rule is silent."""
    rng = np.random.default_rng(320 + depth)
    rho = 0.6
    mu, u, w = _states(rng, 120, depth, rho)
    fired = np.nonzero(_rule(u, mu, depth, rho, w, eta))[0][:12]
    assert len(fired) >= 6
    mu, u, w = mu[fired], u[fired], w[fired]
    rows = np.arange(len(u))
    others = np.arange(4) != w[:, None]

    def grown(f):
        return np.where(others, u * f[:, None], u)

    hi = 0.999 * np.min(np.where(others, u[rows, w][:, None] / u, np.inf), axis=1)
    # (a leader whose mu is far above the others' wins even from a near tie: left out)
    edge = ~_rule(grown(hi), mu, depth, rho, w, eta)
    assert edge.sum() >= 5
    mu, u, w, hi, others = mu[edge], u[edge], w[edge], hi[edge], others[edge]
    lo = np.ones(len(u))
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        yes = _rule(grown(mid), mu, depth, rho, w, eta)
        lo, hi = np.where(yes, mid, lo), np.where(yes, hi, mid)
    assert np.all(_margin(grown(hi * 1.0001), mu, depth, rho, w, eta) < 0)
    assert np.all(_margin(grown(lo / 1.0001), mu, depth, rho, w, eta) > 0)
