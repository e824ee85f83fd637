"""The lead certificates at every depth (docs/theory/regimes.md#lead-certificates-at-every-depth)
against independent float64 computations written here: where a rule's certificate says
LEADS from a state, the flow (SciPy DOP853, rtol 1e-11, in log space) and the discrete
balanced step map (a NumPy loop) from that state never hand the lead on, and the
certificate fires on a good share of the sampled states (so the tests can fail).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import samflow
from samflow import fate as fates
from samflow.regimes import UNRESOLVED
from samflow.rules import GD, SAM_L2, USAM

MU = [1.0, 2.0, 3.0, 4.0]
METHODS = {"gd": GD, "sam-l2": SAM_L2, "usam": USAM}


def _certify(rule, s, mu, depth, rho, eta=None):
    """The rule's certificate over a batch of states s [n, d] (one program)."""

    def one(s_, mu_):
        return rule.balanced.fate(s_, mu_, depth, jnp.asarray(rho), eta)

    code, winner = jax.jit(jax.vmap(one))(jnp.asarray(s), jnp.asarray(mu))
    return np.asarray(code), np.asarray(winner)


def _c(method, u, mu, L):
    """The rule's c in eps = -c m, m_j = mu_j u_j^(L-1) (u may be negative at even L)."""
    if method == "sam-l2":
        return 1.0 / np.sqrt(L * np.sum(mu**2 * u ** (2 * L - 2)))
    if method == "usam":
        return 1.0 / (1.0 + np.exp(min(np.sum(mu * u**L), 700.0)))
    return 0.0


def _flow_leaders(method, mu, s0, L, rho, tau):
    """Leaders (argmax_j s_j, 1-based) at every DOP853 step of ds_j/dtau = x_j (1 -
    rho c x_j)^(L-1), x_j = mu_j e^((L-2) s_j), to tau or near a blow-up (L max s = 60: nearer, the
    time to blow-up falls below the spacing of float64 taus)."""

    def f(t, s):
        u = np.exp(s)
        x = mu * u ** (L - 2)
        return x * (1 - rho * _c(method, u, mu, L) * x) ** (L - 1)

    def high(t, s):
        return 60.0 - L * np.max(s)

    high.terminal = True
    sol = solve_ivp(f, (0, tau), s0, method="DOP853", rtol=1e-11, atol=1e-13, events=high)
    assert sol.status >= 0
    return np.argmax(sol.y, axis=0) + 1, sol.y


def _map_leaders(method, mu, u0, L, rho, eta, steps):
    """Leaders (argmax_j |u_j|, 1-based) at every step of the balanced step map of the
    logistic loss, states [n, d] at once: u' = u + eta |l'(z~)| mu w~^(L-1), w~ = u +
    rho eps(g), z~ = sum_j mu_j w~_j^L; and the last state."""
    u = np.array(u0, float)
    leads = np.empty((steps, u.shape[0]), int)
    for k in range(steps):
        m = mu * u ** (L - 1)
        if method == "gd":
            w = u
        elif method == "sam-l2":
            w = u - rho * m / np.sqrt(L * np.sum(m * m, axis=1, keepdims=True))
        else:
            z = np.minimum(np.sum(mu * u**L, axis=1, keepdims=True), 700.0)
            w = u - rho * m / (1.0 + np.exp(z))
        zt = np.minimum(np.sum(mu * w**L, axis=1, keepdims=True), 700.0)
        u = u + eta / (1.0 + np.exp(zt)) * mu * w ** (L - 1)
        u = np.where(np.isfinite(u), u, np.sign(u) * 1e300)  # past overflow: frozen, leader kept
        leads[k] = np.argmax(np.abs(u), axis=1) + 1
    return leads, u


def _states(rng, n, L, rho, method):
    """Random mu [n, 4] in (0.2, 5) and positive states s [n, 4] near the certificates'
    edges: the major leading, its u around sqrt(L) rho (l2), or anywhere (others)."""
    mu = rng.uniform(0.2, 5.0, size=(n, 4))
    scale = np.sqrt(L) * rho if method == "sam-l2" else 1.0
    u = scale * np.exp(rng.uniform(-1.5, 1.5, size=(n, 4)))
    major = np.argmax(mu, axis=1)
    if method != "gd":  # the major leads (GD's flow certificate needs no lead)
        top = np.max(u, axis=1) * np.exp(rng.uniform(0, 0.3, size=n))
        u[np.arange(n), major] = top
    return mu, np.log(u)


@pytest.mark.parametrize("method", ["gd", "sam-l2", "usam"])
@pytest.mark.parametrize("depth", [3, 4])
def test_a_certified_flow_never_hands_the_lead_on(method, depth):
    """From every sampled state the certificate passes, the flow's leader from the
    moment the winner leads is the winner, at every DOP853 step to blow-up or tau 50
    (GD at L >= 3: the winner is the first to blow up, argmin u_j^-(L-2) / mu_j, checked
    also against the closed form's lowest line at the end)."""
    rng = np.random.default_rng(depth * 7 + len(method))
    rho = 0.7
    mu, s = _states(rng, 24, depth, rho, method)
    code, winner = _certify(METHODS[method], s, mu, depth, rho)
    fired = np.nonzero(code == fates.LEADS)[0]
    assert len(fired) >= 6, f"only {len(fired)} of 24 sampled states certified"
    for k in fired:
        leads, _ = _flow_leaders(method, mu[k], s[k], depth, rho, 50.0)
        reached = np.nonzero(leads == winner[k])[0]
        if method != "gd":
            assert leads[0] == winner[k]  # the major leads where it was certified
        assert len(reached) > 0 and np.all(leads[reached[0] :] == winner[k]), (k, leads)
        if method == "gd":  # the closed form: the first blow-up time T_j
            T = np.exp(-(depth - 2) * s[k]) / ((depth - 2) * mu[k])
            assert winner[k] == np.argmin(T) + 1


@pytest.mark.parametrize("method", ["gd", "sam-l2", "usam"])
@pytest.mark.parametrize("depth", [2, 3, 4])
def test_a_certified_step_map_never_hands_the_lead_on(method, depth):
    """The discrete certificate (eta given) at steps from 0.01 to 2: from every
    certified state, where the major leads, the map read every step for 3,000 steps keeps
    the major ahead (|u_major| >= |u_j|, so argmax, ties aside, names it)."""
    rng = np.random.default_rng(100 + depth * 7 + len(method))
    rho = 0.7
    mu, s = _states(rng, 48, depth, rho, method)
    u0 = np.exp(s)
    major = np.argmax(mu, axis=1) + 1
    u0[np.arange(len(u0)), major - 1] = np.max(u0, axis=1) * 1.01  # the major leads
    s = np.log(u0)
    total = 0
    for eta in (0.01, 0.3, 2.0):
        code, winner = _certify(METHODS[method], s, mu, depth, rho, jnp.asarray(eta))
        # L = 2's region says more (TAKES_OVER, tests/test_takeover.py): the lead holds too.
        fired = np.nonzero((code == fates.LEADS) | (code == fates.TAKES_OVER))[0]
        total += len(fired)
        if len(fired) == 0:
            continue
        assert np.all(winner[fired] == major[fired])
        leads, _ = _map_leaders(method, mu[fired], u0[fired], depth, rho, eta, 3000)
        assert np.all(leads == major[fired][None, :]), eta
    assert total >= 20, f"only {total} of 144 sampled (state, eta) certified"


def test_the_l2_bound_is_needed():
    """Below u_major = sqrt(L) rho a lead can break: l2-SAM at L = 3, rho 1, from u =
    (0.3, 0.3, 0.3, 0.31) the major leads but is below the bound (no certificate), and
    the flow hands the lead to a minor coordinate."""
    L, rho, mu = 3, 1.0, np.asarray(MU)
    s = np.log(np.array([0.3, 0.3, 0.3, 0.31]))
    code, _ = _certify(SAM_L2, s[None], mu[None], L, rho)
    assert code[0] == fates.OPEN
    leads, _ = _flow_leaders("sam-l2", mu, s, L, rho, 50.0)
    assert leads[0] == 4 and np.any(leads != 4)


def test_discrete_runs_at_depth_3_and_4_are_decided_and_hold_50x_longer():
    """The engine's discrete l2-SAM runs (balanced step, eta 0.02, 400 steps) at L = 3
    and 4: some now decided by the lead certificate, and a NumPy loop of the map run 50x
    longer, read every step, has the engine's last leader from the engine's end on (no
    hand-off after the engine's last)."""
    alphas, steps, rho = np.geomspace(0.3, 3.0, 5), 400, 0.2
    ds = samflow.sweep(
        "sam-l2",
        depth=3,
        mu=MU,
        rho=rho,
        axes={"alpha": alphas, "depth": [3, 4]},
        runner=samflow.Discrete(eta=0.02, steps=steps),
    )
    for depth in (3, 4):
        part = ds.sel(depth=depth)
        decided = part["regime"].values != UNRESOLVED
        assert decided.sum() >= 2, depth
        u0 = np.repeat(alphas[decided][:, None], 4, axis=1)
        leads, _ = _map_leaders("sam-l2", np.asarray(MU), u0, depth, rho, 0.02, 50 * steps)
        stop = part["stop_leader"].values[decided]
        assert np.all(leads[steps - 1 :] == stop[None, :]), depth
