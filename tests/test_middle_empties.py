"""l2-SAM's middle that empties into collapse at L = 2
(docs/theory/regimes.md#middle-empties): with every u_j below rho / sqrt(2), where the
bound ``Q(T) = sum_j P_j^2 e^(2 nu_j T)`` (``P_j = sqrt(2) mu_j u_j / rho``, ``nu_j = mu_j (1 -
mu_j / K0)``) falls below ``mu_min^2`` (on a window of length eta / 2 for the step), the run
enters ``K = ||m||_2 / rho < mu_min`` and collapses. Checked against an independent
minimisation of ``Q`` (SciPy), NumPy float64 loops of the balanced step map read every
step, and SciPy's DOP853 for the flow."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.integrate import solve_ivp
from scipy.special import logsumexp

import samflow
from samflow import fate as fates
from samflow.regimes import COLLAPSE, UNRESOLVED
from samflow.rules import SAM_L2
from tests.runs import certify


def _certify(u, mu, rho, eta=None):
    """l2-SAM's certificate at L = 2 over states u [n, d] (logs of |u|; mu [d], rho [n])."""
    return certify(SAM_L2, np.log(np.abs(u)), mu, 2, rho, eta)


def _K(u, mu, rho):
    """K = ||m||_2 / rho = sqrt(2 sum (mu u)^2) / rho, per state [n]."""
    return np.sqrt(2 * np.sum((mu * u) ** 2, axis=-1)) / rho


def _rates(u, mu, rho):
    """nu_j = mu_j (1 - mu_j / K0) [n, d], the bound on d log|u_j| / dtau while K <= K0."""
    return mu * (1 - mu / _K(u, mu, rho)[:, None])


def _best(u, mu, rho, window):
    """An independent search of the least ``max(log Q(T), log Q(T + window)) - 2 log
    mu_min`` over T >= 0 (a convex function of T: 200 ternary steps over ``[0, 60 /
    slowest shrinking rate]``, all states at once): ``(T, value)`` per state [n]."""
    nu = _rates(u, mu, rho)
    log_A = np.log(2 * (mu * u / rho[:, None]) ** 2)

    def worst(T):
        at = [logsumexp(log_A + 2 * nu * (T + e)[:, None], axis=1) for e in (0.0, window)]
        return np.maximum(*at) - 2 * np.log(np.min(mu))

    slowest = np.min(np.where(nu < 0, -nu, np.inf), axis=1)
    lo, hi = np.zeros(len(u)), np.where(np.isfinite(slowest), 60.0 / slowest, 1.0)
    for _ in range(200):
        a, b = lo + (hi - lo) / 3, hi - (hi - lo) / 3
        right = worst(a) > worst(b)
        lo, hi = np.where(right, a, lo), np.where(right, hi, b)
    return lo, worst(lo)


def _map(u, mu, rho, eta, steps):
    """The balanced l2-SAM step of the logistic loss at L = 2, states u [n, d], float64,
    read every step: ``w~ = u - rho mu u / N``, ``u' = u + h mu w~``, ``h = eta sigmoid(-z~)``.
    Returns K [steps + 1, n], the rescaled time T_t = sum of h before step t [steps + 1,
    n], and |u| [steps + 1, n, d]."""
    u = np.array(u, np.float64)
    rho = np.asarray(rho, np.float64)[:, None]
    Ks, Ts, us = [], [], []
    T = np.zeros(len(u))
    for t in range(steps + 1):
        m = mu * u
        N = np.sqrt(2 * np.sum(m * m, axis=1, keepdims=True))
        Ks.append(N[:, 0] / rho[:, 0])
        Ts.append(T.copy())
        us.append(np.abs(u))
        if t == steps:
            break
        w = u - rho * m / N
        h = eta / (1 + np.exp(np.sum(mu * w * w, axis=1)))
        u = u + h[:, None] * mu * w
        T += h
    return np.array(Ks), np.array(Ts), np.array(us)


def _log_field(mu, rho):
    """The flow at L = 2 in ``s = log u`` for one state's ``rho``: ``ds_j/dtau = mu_j (1 -
    mu_j / K)``, ``K = sqrt(2 sum (mu u)^2) / rho``."""

    def field(tau, s):
        K = np.sqrt(2 * np.sum((mu * np.exp(s)) ** 2)) / rho
        return mu * (1 - mu / K)

    return field


def _to_the_region(mu, rho, s0, tau_end):
    """SciPy's DOP853 (rtol 1e-11) of :func:`_log_field` from ``s0`` up to ``tau_end``,
    stopped where ``K`` falls below ``mu_min`` (``t_events[0]``: that time, if it came)."""

    def below(tau, s):
        return np.sqrt(2 * np.sum((mu * np.exp(s)) ** 2)) / rho - np.min(mu)

    below.terminal, below.direction = True, -1
    field = _log_field(mu, rho)
    return solve_ivp(field, (0, tau_end), s0, method="DOP853", rtol=1e-11, atol=1e-12, events=below)


def _emptying_states(rng, mu, n):
    """Random middle states, every u_j below rho / sqrt(2): u [n, d], rho [n]."""
    d = len(mu)
    rho = np.exp(rng.uniform(np.log(0.05), np.log(0.3), 8 * n))
    u = rho[:, None] / np.sqrt(2) * np.exp(rng.uniform(np.log(0.02), np.log(0.999), (8 * n, d)))
    K = _K(u, mu, rho)
    keep = (K > np.min(mu)) & (K < np.sum(np.sort(mu)[-2:]))
    return u[keep][:n], rho[keep][:n]


@pytest.mark.parametrize("eta", [0.05, 0.15])
def test_the_step_empties_into_the_collapse_region_and_stays(eta):
    """Random middle states (a random mu in [1, 2.5]^4, where the step's collapse condition
    holds at eta 0.15): where the certificate says collapse, an independent search finds a
    window of Q below mu_min^2 (and where that search finds one clearly, the certificate
    says collapse); the NumPy map, read every step, keeps K <= K0 and every |u_j| under
    |u_j(0)| e^(nu_j T_t) until K < mu_min, gets there by the first step past the window's
    start, and keeps K < mu_min for 1,000 steps after."""
    rng = np.random.default_rng(38)
    mu = rng.uniform(1.0, 2.5, 4)
    u, rho = _emptying_states(rng, mu, 200)
    window = eta / 2
    code, _ = _certify(u, mu, rho, eta)
    T_best, value = _best(u, mu, rho, window)
    fired = code == fates.COLLAPSE
    assert np.all(value[fired] < 0), "the certificate fired where Q stays above mu_min^2"
    # 1e-6: the searches place the window differently only by their tolerances
    assert np.all(fired[value < -1e-6]), "a clear window the certificate missed"
    assert 30 <= np.sum(fired) <= len(u) - 30, np.sum(fired)  # both kinds are tried
    u, rho, T_best = u[fired], rho[fired], T_best[fired]
    nu = _rates(u, mu, rho)
    K, T, us = _map(u, mu, rho, eta, 1200)
    lo = np.min(mu)
    for i in range(len(u)):
        inside = np.flatnonzero(K[:, i] < lo)
        assert inside.size, i  # by T_best + eta / 2 at the latest
        first = inside[0]
        assert T[first, i] <= T_best[i] + window, (i, T[first, i], T_best[i])
        # float64 steps, at most 1,200 of them: the bounds hold to 1e-9 relative
        assert np.all(K[:first, i] <= K[0, i] * (1 + 1e-9)), i
        bound = us[0, i] * np.exp(nu[i] * T[:first, i, None])
        assert np.all(us[:first, i] <= bound * (1 + 1e-9)), i
        assert np.all(K[first : first + 1000, i] < lo), i


def test_the_flow_empties_into_the_collapse_region():
    """The same states for the flow: where the flow's certificate says collapse, an
    independent minimisation of Q finds it below mu_min^2 at some T, and SciPy's DOP853
    (log u, rtol 1e-11) takes K below mu_min by tau = T, after which K stays below and max_j
    u_j falls to 1e-6 of its start."""
    rng = np.random.default_rng(40)
    mu = rng.uniform(0.3, 4.0, 4)
    u, rho = _emptying_states(rng, mu, 120)
    code, _ = _certify(u, mu, rho)
    T_best, value = _best(u, mu, rho, 0.0)
    fired = code == fates.COLLAPSE
    assert np.all(value[fired] < 0)
    assert np.all(fired[value < -1e-6])
    assert np.sum(fired) >= 20, np.sum(fired)
    lo = np.min(mu)
    for i in np.flatnonzero(fired)[:20]:
        s0 = np.log(u[i])
        field = _log_field(mu, rho[i])
        sol = _to_the_region(mu, rho[i], s0, T_best[i])
        assert sol.t_events[0].size, (i, T_best[i])

        def gone(tau, s, s0=s0):
            return np.max(s) - (np.max(s0) + np.log(1e-6))

        gone.terminal = True
        more = solve_ivp(
            field, (0, 1e3), sol.y_events[0][0], method="DOP853", rtol=1e-11, atol=1e-12,
            events=gone, dense_output=True,
        )  # fmt: skip
        assert more.t_events[0].size, i
        taus = np.linspace(0, more.t_events[0][0], 200)[1:]
        K = np.sqrt(2 * np.sum((mu[:, None] * np.exp(more.sol(taus))) ** 2, axis=0)) / rho[i]
        assert np.all(K < lo), i


def test_a_flow_tries_the_search_at_its_end_and_goes_on_to_the_region_past_it():
    """The search is left out of the check at each solver step (BalancedFlow.step_fate:
    it cost more than the step), not out of the run: on emptying states the step's check
    says nothing where the certificate says collapse; a flow that ends at once (tau_max
    1e-6) is labelled collapse by its end's check, and one run to its fate goes on and stops
    where the region's certificate holds: past the time at which SciPy's DOP853 (log u, rtol
    1e-11) takes K below mu_min (the region is entered by the flow's own step, so the
    stop is at or after that crossing; 1e-6 relative for the two solvers' tolerances)."""
    rng = np.random.default_rng(40)
    mu = rng.uniform(0.3, 4.0, 4)
    u, rho = _emptying_states(rng, mu, 120)
    code, _ = _certify(u, mu, rho)
    step_code, _ = certify(SAM_L2, np.log(u), mu, 2, rho, in_step=True)
    fired = np.flatnonzero(code == fates.COLLAPSE)
    assert fired.size >= 20, fired.size
    assert np.all(step_code[fired] == fates.OPEN)
    for i in fired[:3]:
        common = dict(depth=2, mu=list(mu), alpha_per_coord=list(u[i]), rho=float(rho[i]))
        now = samflow.trajectory("sam-l2", runner=samflow.Flow(tau_max=1e-6), **common)
        assert int(now["regime"]) == COLLAPSE, i
        on = samflow.trajectory("sam-l2", runner=samflow.Flow(tau_max=1e-6, tau_cap=1e3), **common)
        assert int(on["regime"]) == COLLAPSE, i
        entry = _to_the_region(mu, rho[i], np.log(u[i]), 1e3).t_events[0][0]
        stop = float(on.attrs["stop_tau"])
        assert stop >= entry * (1 - 1e-6), (i, stop, entry)


@pytest.mark.parametrize("eta", [None, 0.001])
def test_a_grower_just_above_rho_over_sqrt2_is_not_named(eta):
    """Sharpness: mu (1, 30), rho 0.05, u_2 = rho / 20 (a fast shrinker) and u_1 at 0.99 or
    1.001 of rho / sqrt(2) (above it u_1 never falls). Below it the certificate says collapse
    and the map (eta 0.001) reaches K < mu_min and stays there; above it the certificate says
    nothing, and the map's u_1 never falls (K >= P_1 > mu_1) and grows."""
    mu, rho = np.array([1.0, 30.0]), np.array([0.05, 0.05])
    u = np.array([[0.99, 0.0], [1.001, 0.0]]) * rho[0] / np.sqrt(2)
    u[:, 1] = rho[0] / 20
    code, _ = _certify(u, mu, rho, eta)
    assert code[0] == fates.COLLAPSE and code[1] != fates.COLLAPSE, code
    K, _, us = _map(u, mu, rho, 0.001, 3000)
    assert np.all(K[-2000:, 0] < 1.0)
    assert np.all(np.diff(us[:, 1, 0]) >= 0) and us[-1, 1, 0] > us[0, 1, 0]
    assert np.all(K[:, 1] > 1.0)


def test_engine_runs_labelled_collapse_agree_with_a_numpy_run_1000_times_longer():
    """Engine runs (eta 0.05, 4 steps) from random emptying states still outside the collapse
    region at step 4 in the NumPy map: those the engine labels collapse reach K < mu_min in
    the NumPy run 1,000 times longer (4,000 steps, read every step) and stay there, with
    max_j |beta_j| falling; the rest are unresolved (the flow's and the region's
    certificates do not hold there). Some must be decided, else the test could not fail."""
    rng = np.random.default_rng(7)
    mu = np.array([1.0, 1.4, 1.9, 2.3])
    eta, steps = 0.05, 4
    u, rho = _emptying_states(rng, mu, 40)
    K, _, us = _map(u, mu, rho, eta, 1000 * steps)
    checked = 0
    for i in np.flatnonzero(K[steps] >= np.min(mu))[:16]:
        ds = samflow.trajectory(
            "sam-l2",
            depth=2,
            mu=list(mu),
            alpha_per_coord=list(u[i]),
            rho=float(rho[i]),
            runner=samflow.Discrete(eta=eta, steps=steps, save=samflow.Every(steps)),
        )
        if int(ds["regime"]) == UNRESOLVED:
            continue
        assert int(ds["regime"]) == COLLAPSE, i
        assert int(ds["limit_coord"]) == 0
        inside = np.flatnonzero(K[:, i] < np.min(mu))
        assert inside.size and np.all(K[inside[0] :, i] < np.min(mu)), i
        assert np.max(us[-1, i]) < 0.5 * np.max(us[inside[0], i]), i
        checked += 1
    assert checked >= 3, checked


@pytest.mark.parametrize("eta", [None, 1e-4])  # 1e-4: the step condition holds
def test_never_where_a_coordinate_is_above_rho_over_sqrt2(eta):
    """Random middle states with some u_j above rho / sqrt(2) (the middle certificate's G:
    such a u_j never falls, so K >= P_j > mu_j for ever and the run cannot collapse): the
    certificate never says collapse there, with or without a fast shrinker beside."""
    rng = np.random.default_rng(3)
    mu = np.concatenate([rng.uniform(0.3, 1.0, 2), rng.uniform(3.0, 30.0, 2)])
    rho = np.exp(rng.uniform(np.log(0.05), np.log(3.0), 2000))
    u = rho[:, None] / np.sqrt(2) * np.exp(rng.uniform(np.log(0.01), np.log(3.0), (2000, 4)))
    K = _K(u, mu, rho)
    keep = (K > np.min(mu)) & np.any(u > rho[:, None] / np.sqrt(2), axis=1)
    assert np.sum(keep) >= 500
    code, _ = _certify(u[keep], mu, rho[keep], eta)
    assert not np.any(code == fates.COLLAPSE)
