"""linf-SAM's discrete-step certificates (docs/theory/regimes.md#linf-sam-discrete-step)
against NumPy float64 loops of the balanced step map written here, read at every step:
the engine runs that map; from random states where a certificate says LEADS, TAKES_OVER,
COLLAPSE or FINITE, the map does what it says, for small and large eta at L = 2, 3, 4;
the step-size conditions are needed; and the engine's decided discrete runs keep their
labels in the map run 50 times longer.
"""

import itertools

import numpy as np
import pytest

import samflow
from samflow import fate as fates
from samflow.regimes import NAMES
from samflow.rules import SAM_LINF
from tests.runs import certify

ETAS = (0.01, 0.3, 2.0)


def _step(u, mu, L, rho, eta):
    """One balanced linf-SAM step of the logistic loss on one point, states [n, d]:
    w~ = u - rho sign(mu u^(L-1)), u' = u + eta sigmoid(-z~) mu w~^(L-1),
    z~ = sum_j mu_j w~_j^L."""
    w = u - rho * np.sign(mu * u ** (L - 1))
    zt = np.clip(np.sum(mu * w**L, axis=1, keepdims=True), -700.0, 700.0)
    return u + eta / (1.0 + np.exp(zt)) * mu * w ** (L - 1)


def _run(u0, mu, L, rho, eta, steps):
    """Every state of the map [steps + 1, n, d]; a state past 1e100 is frozen (its run
    is decided by then: the ratios below only need the order, which freezing keeps)."""
    u = np.array(u0, float)
    out = [u]
    for _ in range(steps):
        nxt = _step(u, mu, L, rho, eta)
        big = np.any(np.abs(u) > 1e100, axis=1, keepdims=True)
        u = np.where(big, u, nxt)
        out.append(u)
    return np.array(out)


def _states(rng, n, L, rho):
    """Random distinct mu [n, 4] in (0.3, 4) and signed states u [n, 4]: each |u_j| in
    (0, 2 rho), a third of them all below rho; odd L: positive (a positive start stays so)."""
    mu = rng.uniform(0.3, 4.0, size=(n, 4))
    size = rho * rng.uniform(0.02, 2.0, size=(n, 4))
    size[: n // 3] *= 0.5
    sign = rng.choice([-1.0, 1.0], size=(n, 4)) if L % 2 == 0 else 1.0
    return mu, size * sign


@pytest.mark.parametrize("depth", [2, 3, 4])
def test_the_engine_runs_this_map(depth):
    """samflow.trajectory's discrete linf-SAM run (the balanced step) against the NumPy
    map: from the same start, every record at L = 2 and 3 to 1e-13 of max |beta| (the
    map there is contracting or mildly expanding: rounding stays at a few ulps); and at
    every L, each recorded step from the engine's own previous state to 1e-12 of max |u|
    (at even L the map expands near 0, where coordinates hover, so whole paths part by
    rounding after some tens of steps; |u| is the state there, the map being odd in u)."""
    mu = np.array([[1.0, 2.0, 3.0, 4.0]])
    alpha, rho, eta, steps = [0.3, 0.9, 0.5, 0.2], 0.6, {2: 0.05, 3: 0.3, 4: 0.5}[depth], 200
    ds = samflow.trajectory(
        "sam-linf", depth=depth, mu=mu[0], alpha_per_coord=alpha, rho=rho,
        runner=samflow.Discrete(eta=eta, steps=steps, save=samflow.Every(1)),
    )  # fmt: skip
    assert ds.attrs["step_path"] == "balanced"
    beta = np.asarray(ds["beta"].values)  # [steps + 1, d]
    u = np.abs(beta) ** (1.0 / depth) * (np.sign(beta) if depth % 2 else 1.0)
    one = _step(u[:-1], mu, depth, rho, eta)
    err = np.abs(np.abs(one) - np.abs(u[1:])).max(axis=1) / np.abs(u[1:]).max(axis=1)
    assert err.max() < 1e-12, err.max()
    if depth < 4:
        ref = _run(np.array([alpha]), mu, depth, rho, eta, steps)[:, 0] ** depth
        rel = np.abs(ref - beta).max(axis=1) / np.abs(ref).max(axis=1)
        assert rel.max() < 1e-13, rel.max()


def _lead_holds(path, w):
    """Whether coordinate w (0-based), from the first state it leads on, leads at every
    later state of path [T, d] (a relative slack of 1e-12 for rounding of equal sizes)."""
    size = np.abs(path)
    leads = size[:, w] >= size.max(axis=1) * (1 - 1e-12)
    if not leads.any():
        return True
    return bool(leads[np.argmax(leads) :].all())


def _collapse_holds(size, ball, rho):
    """Whether |u| along a path [T, d] does what the collapse certificate says: never
    above rho; each |u_j| does not rise until it is in its ball (ball [d]) and stays in it
    once in (a slack of 1e-12: rounding of |u|). Also whether all are in by the end."""
    slack = 1 + 1e-12
    inside = size <= ball * slack
    entered = np.maximum.accumulate(inside, axis=0)
    falls = np.diff(size, axis=0) <= 1e-12 * size[:-1]
    ok = np.all(size <= rho * slack) and np.all(inside[entered])
    ok = ok and np.all(falls | entered[:-1])
    return bool(ok), bool(inside[-1].all())


@pytest.mark.parametrize("depth", [2, 3, 4])
def test_a_certified_lead_holds_in_the_map(depth):
    """Where the certificate says LEADS or TAKES_OVER, the map (3,000 steps, eta 0.01, 0.3
    and 2, read every step) never hands the lead on once the winner leads, and never
    lets a coordinate at most rho past rho; under TAKES_OVER the major's excess over rho
    gains on every other excess at every step, and some runs that start with a minor
    leading are seen led by the major by the end. The certificate fires on a good
    share of the states (so the test can fail)."""
    rng = np.random.default_rng(10 + depth)
    rho, n = 0.8, 96
    mu, u0 = _states(rng, n, depth, rho)
    fired, took = 0, 0
    for eta in ETAS:
        code, winner = certify(SAM_LINF, u0, mu, depth, rho, eta)
        pick = np.nonzero((code == fates.LEADS) | (code == fates.TAKES_OVER))[0]
        fired += len(pick)
        path = _run(u0[pick], mu[pick], depth, rho, eta, 3000)
        for i, k in enumerate(pick):
            assert _lead_holds(path[:, i], winner[k] - 1), (eta, u0[k], mu[k])
            low = np.abs(u0[k]) <= rho
            assert np.all(np.abs(path[:, i][:, low]) <= rho * (1 + 1e-12)), (eta, u0[k])
            if code[k] == fates.TAKES_OVER:
                # The winner (the largest y in P: the major or a minor one): its excess
                # gains on every other excess above rho at every step (a float64 slack of
                # the logs), a minor winner keeps the major below it, and the winner leads
                # at the end where the loss left it time (h shrinks with the loss).
                w, a = winner[k] - 1, np.argmax(mu[k])
                v = np.abs(path[:, i]) - rho
                up = ~low
                ratio = np.log(v[:, w : w + 1]) - np.log(v[:, up])
                assert np.all(np.diff(ratio, axis=0) >= -1e-12), (eta, u0[k], mu[k])
                if w != a:
                    assert np.all(np.abs(path[:, i, a]) < np.abs(path[:, i, w])), (eta, u0[k])
                if np.argmax(np.abs(u0[k])) != w:
                    took += np.argmax(np.abs(path[-1, i])) == w
    assert fired >= 60, fired
    assert took >= 3, took  # some take-overs that start with a minor leading are seen


@pytest.mark.parametrize("depth", [2, 4])
def test_a_certified_discrete_collapse_falls_into_its_ball(depth):
    """Where the certificate says COLLAPSE (even L), the map (6,000 steps, read every
    step) never lets a |u_j| above rho, each |u_j| does not rise until it is inside its
    ball eta mu_j rho^(L-1) / 2 and stays there once in; most runs are wholly inside by
    the end (the fall is slow where h is small and, at L = 4, rho - |u_j| too)."""
    rng = np.random.default_rng(20 + depth)
    rho, n = 0.8, 96
    mu, u0 = _states(rng, n, depth, rho)
    fired = arrived = 0
    for eta in ETAS:
        code, _ = certify(SAM_LINF, u0, mu, depth, rho, eta)
        pick = np.nonzero(code == fates.COLLAPSE)[0]
        fired += len(pick)
        path = np.abs(_run(u0[pick], mu[pick], depth, rho, eta, 6000))
        for i, k in enumerate(pick):
            ok, done = _collapse_holds(path[:, i], eta * mu[k] * rho ** (depth - 1) / 2, rho)
            assert ok, (eta, u0[k], mu[k])
            arrived += done
    assert fired >= 30, fired
    assert arrived >= 0.4 * fired, (arrived, fired)  # about 60% seen at 6,000 steps


def test_a_certified_finite_limit_creeps_up_to_rho():
    """Where the certificate says FINITE (odd L = 3), the map keeps every u_j in (0, rho],
    nondecreasing at every step, and rho - u_j falls at the rate of the flow's
    rho - u = (rho - u0) / (1 + mu (rho - u0) tau) or faster: at 20,000 steps every gap is
    below 2 / (mu tau) with tau the map's own sum of eta sigmoid(-z~)."""
    rng = np.random.default_rng(3)
    rho, n = 0.8, 96
    mu, u0 = _states(rng, n, 3, rho)
    fired = 0
    for eta in ETAS:
        code, _ = certify(SAM_LINF, u0, mu, 3, rho, eta)
        pick = np.nonzero(code == fates.FINITE)[0]
        fired += len(pick)
        u, m_, tau = u0[pick].copy(), mu[pick], np.zeros((len(pick), 1))
        for _ in range(20_000):
            w = u - rho
            zt = np.sum(m_ * w**3, axis=1, keepdims=True)
            h = eta / (1.0 + np.exp(zt))
            nxt = u + h * m_ * w**2
            assert np.all(nxt >= u) and np.all(nxt <= rho) and np.all(nxt > 0), eta
            u, tau = nxt, tau + h
        assert np.all(rho - u <= 2.0 / (m_ * tau)), eta
    assert fired >= 30, fired


# (rho, mu, eta past the condition for mu_3 and mu_4, not for mu_1 and mu_2): h = eta
# sigmoid(-z~) is near its bound eta / 2 (even L) or eta (odd L) only where |z~| allows.
NEEDED = {
    2: (0.1, [1.0, 2.0, 3.0, 4.0], 1.0),
    3: (1.0, [1.0, 2.0, 3.0, 4.0], 0.4),
    4: (1.0, [0.05, 0.1, 0.15, 0.2], 20.0),
}


@pytest.mark.parametrize("depth", [2, 3, 4])
def test_the_step_size_conditions_are_needed(depth):
    """Past the conditions the map does jump: even L, a coordinate near 0 with eta mu_j
    rho^(L-2) > 2 jumps past -rho (and then its |u_j| - rho grows), so no collapse is
    certified there; odd L, one with eta mu_j (rho - u_j)^(L-2) > 1 jumps past rho (and
    then grows), so no finite limit is. A smaller eta is certified and stays under rho."""
    rho, mu, eta = NEEDED[depth]
    mu = np.array([mu])
    u0 = rho * np.array([[0.05, 0.3, 0.2, 0.01]])
    code, _ = certify(SAM_LINF, u0, mu, depth, rho, eta)
    assert code[0] == fates.OPEN
    size = np.abs(_run(u0, mu, depth, rho, eta, 2000)[:, 0])
    assert size[-1].max() > 1.2 * rho, size[-1]
    small = eta / 20
    code_small, _ = certify(SAM_LINF, u0, mu, depth, rho, small)  # kept: certified, and it holds
    assert code_small[0] == (fates.FINITE if depth % 2 else fates.COLLAPSE)
    assert np.abs(_run(u0, mu, depth, rho, small, 2000)).max() <= rho


def _regime(path, major):
    """The regime code a complete leader path names (docs/theory/regimes.md#definitions)."""
    if path[-1] == major:
        if len(path) == 1:
            return 3  # direct
        return 2 if path.count(major) == 1 else 4  # sequential, returned
    return 5 if major in path else 6  # major_lost, minor_end


@pytest.mark.parametrize("depth", [2, 3, 4])
def test_discrete_runs_are_decided_and_hold_50x_longer(depth):
    """The engine's discrete linf-SAM runs (random non-uniform starts around rho, eta 0.05
    and 1.0, 200 steps) that it decides keep their label in a NumPy loop of the map run
    50 times longer, read every step: a lead label is the regime of the map's whole
    leader path, whose last leader leads over its last half; collapse: every |u_j| stays
    under rho and falls into eta mu_j rho^(L-1) / 2, where it stays; finite: every u_j
    stays in (0, rho]."""
    from tests.test_takeover import compress

    rng = np.random.default_rng(40 + depth)
    mu, rho, steps, n = np.array([1.0, 2.0, 3.0, 4.0]), 0.7, 200, 12
    starts = rho * rng.uniform(0.1, 1.6, size=(n, 4))
    starts[: n // 3] *= 0.6  # some all below rho
    decided = taken = 0
    low = {}  # counts per regime code
    for eta in (0.05, 1.0):
        path = _run(starts, mu[None], depth, rho, eta, 50 * steps)  # [T, n, d]
        size = np.abs(path)
        for i, u0 in enumerate(starts):
            ds = samflow.trajectory(
                "sam-linf", depth=depth, mu=mu, alpha_per_coord=u0, rho=rho,
                runner=samflow.Discrete(eta=eta, steps=steps, save=samflow.Every(steps)),
            )  # fmt: skip
            regime = int(ds["regime"])
            if regime == 0:
                continue
            decided += 1
            low[regime] = low.get(regime, 0) + 1
            if regime == 1:
                ok, _ = _collapse_holds(size[:, i], eta * mu * rho ** (depth - 1) / 2, rho)
                assert ok, (eta, u0)
            elif regime == 7:
                assert np.all(size[:, i] <= rho) and np.all(path[:, i] > 0), (eta, u0)
            else:
                leads = np.argmax(size[:, i], axis=1) + 1
                seen = compress(leads)
                w = int(ds["limit_coord"])
                if seen[-1] != w and w > 0:
                    # A take-over the map has not reached yet (h shrinks with the loss):
                    # the winner's excess gains on every other excess above rho at every
                    # step, a minor winner keeps the major (4) below it, and the label is
                    # the path's with the winner appended.
                    v = size[:, i] - rho
                    up = v[0] > 0
                    gain = np.diff(np.log(v[:, w - 1 : w]) - np.log(v[:, up]), axis=0)
                    assert up[w - 1] and np.all(gain >= -1e-12), (eta, u0)
                    assert w == 4 or np.all(size[:, i, 3] < size[:, i, w - 1]), (eta, u0)
                    seen = [*seen, w]
                    taken += 1
                assert regime == _regime(seen, 4), (eta, u0, seen, regime)
                assert int(ds["limit_coord"]) == seen[-1], (eta, u0, seen)
                if seen[-1] == np.argmax(size[-1, i]) + 1:
                    assert _lead_holds(path[-path.shape[0] // 2 :, i], seen[-1] - 1), (eta, u0)
    # Of 24 runs (11 at L = 3: the others' winner, a minor, does not lead yet at step 200).
    assert decided >= 10, decided
    assert low.get(7 if depth % 2 else 1, 0) >= 2, low  # the starts below rho: finite, collapse
    assert depth > 2 or taken >= 1, taken  # a take-over not yet reached is checked too


def _scipy_blowup_path(u0, mu, L, rho):
    """linf-SAM's balanced flow from u0 [d] (some u_j > rho) to its first blow-up, by
    SciPy's DOP853 (rtol 1e-11) in s_j = log(u_j - rho) of the coordinates above rho
    (ds_j/dtau = mu_j e^((L-2) s_j); those at most rho stay there and never lead), in
    the time d sigma = e^((L-2) S) d tau, S = logsumexp(s), in which the field stays
    bounded up to the blow-up, to max s = 30: the leaders (0-based) read at every
    solver step and on a dense grid of each step, in order."""
    from scipy.integrate import solve_ivp
    from scipy.special import logsumexp

    above = np.flatnonzero(u0 > rho)
    m = mu[above]

    def top(t, s):
        return np.max(s) - 30.0

    top.terminal = True
    sol = solve_ivp(
        lambda t, s: m * np.exp((L - 2) * (s - logsumexp(s))), (0.0, 1e9),
        np.log(u0[above] - rho), method="DOP853", rtol=1e-11, atol=1e-12, events=top,
        dense_output=True,
    )  # fmt: skip
    assert sol.status == 1  # stopped by the blow-up event
    pairs = zip(sol.t[:-1], sol.t[1:], strict=True)
    grid = np.concatenate([np.linspace(a, b, 8) for a, b in pairs])
    leaders = above[np.argmax(sol.sol(grid), axis=0)]
    return [int(j) for j, _ in itertools.groupby(leaders)]


@pytest.mark.parametrize("depth", [3, 4, 5])
def test_linf_flows_first_blow_up_wins(depth):
    """docs/theory/regimes.md#linf-first-blow-up: from random states with some u_j above
    rho, the certificate's winner is the leader at SciPy's blow-up; the leaders on the
    way have rising mu (so a minor winner keeps the major from leading in between); a
    near tie (the first two blow-up times 1e-5 apart, relative) is left open, 1e-3 apart
    it is decided. Naming the
    leader now instead of the first blow-up fails: in 12 or more of the sampled states
    the leader now is not the winner."""
    rng = np.random.default_rng(depth)
    rho = 0.5
    mu, u = _states(rng, 40, depth, rho)
    u = np.abs(u)
    u[:, 0] = np.maximum(u[:, 0], 1.05 * rho)  # some coordinate above rho
    # and 40 with every coordinate above rho, excesses within a factor 20: races
    mu = np.concatenate([mu, rng.uniform(0.3, 4.0, size=(40, 4))])
    u = np.concatenate([u, rho * (1 + rng.uniform(0.05, 1.0, size=(40, 4)))])
    code, winner = certify(SAM_LINF, u, mu, depth, rho, None)
    assert np.all(code == fates.TAKES_OVER)
    changes = 0
    for k in range(len(u)):
        path = _scipy_blowup_path(u[k], mu[k], depth, rho)
        assert path[-1] == winner[k] - 1, (u[k], mu[k], path, winner[k])
        assert np.all(np.diff(mu[k][path]) > 0), (u[k], mu[k], path)
        major = int(np.argmax(mu[k]))
        if major != path[-1]:
            assert major not in path
        changes += len(path) > 1
    assert changes >= 12, changes
    # a near tie: coordinate 1's blow-up time 1e-5 after coordinate 0's
    p = depth - 2
    tied = np.array([[0.9, 0.5 + (0.4**-p * 1.5 * (1 + 1e-5)) ** (-1 / p), 0.3, 0.2]])
    tie_mu = np.array([[2.0, 3.0, 1.0, 4.0]])
    code, _ = certify(SAM_LINF, tied, tie_mu, depth, rho, None)
    assert code[0] == fates.OPEN
    apart = tied.copy()  # 1e-3 apart: decided, coordinate 1 (1-based) first
    apart[0, 1] = 0.5 + (0.4**-p * 1.5 * (1 + 1e-3)) ** (-1 / p)
    code, winner = certify(SAM_LINF, apart, tie_mu, depth, rho, None)
    assert code[0] == fates.TAKES_OVER and winner[0] == 1


@pytest.mark.parametrize(
    ("u0", "label", "coord"),
    [([1.0, 0.6, 0.9], "sequential", 3), ([1.5, 0.9, 0.6], "minor_end", 1)],
)
def test_linf_flow_is_labelled_by_its_first_blow_up(u0, label, coord):
    """The engine's linf-SAM flow at L = 3 (mu 1, 2, 4; rho 0.5): a minor leads at the
    start; the major blows up first (blow-up times 2, 5, 0.625: path 1 -> 3, sequential)
    or coordinate 1 does (1, 1.25, 2.5: minor_end, the major never led); SciPy's path to
    the blow-up agrees."""
    mu, rho = np.array([1.0, 2.0, 4.0]), 0.5
    ds = samflow.trajectory(
        "sam-linf", depth=3, mu=mu, alpha_per_coord=u0, rho=rho,
        runner=samflow.Flow(tau_max=5.0),
    )  # fmt: skip
    assert NAMES[int(ds["regime"])] == label
    assert int(ds["limit_coord"]) == coord
    path = _scipy_blowup_path(np.array(u0), mu, 3, rho)
    assert [j + 1 for j in path][-1] == coord
