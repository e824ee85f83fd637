"""The lead certificates at every depth (docs/theory/regimes.md#lead-certificates-at-every-depth)
against independent float64 computations written here: where a rule's certificate says
LEADS from a state, the flow (SciPy DOP853, rtol 1e-11, in log space) and the discrete
balanced step map (a NumPy loop) from that state never hand the lead on, and the
certificate fires on a good share of the sampled states (so the tests can fail).
"""

import numpy as np
import pytest
from scipy.integrate import solve_ivp

import samflow
from samflow import fate as fates
from samflow.regimes import UNRESOLVED
from samflow.rules import GD, SAM_L2, USAM
from tests.runs import certify
from tests.test_crossing import _kept as crossing_kept
from tests.test_region_outlasts import _phi_min

MU = [1.0, 2.0, 3.0, 4.0]
METHODS = {"gd": GD, "sam-l2": SAM_L2, "usam": USAM}


def _c(method, u, mu, L):
    """The rule's c in eps = -c m, m_j = mu_j u_j^(L-1) (u may be negative at even L)."""
    if method == "sam-l2":
        return 1.0 / np.sqrt(L * np.sum(mu**2 * u ** (2 * L - 2)))
    if method == "usam":
        return 1.0 / (1.0 + np.exp(min(np.sum(mu * u**L), 700.0)))
    return 0.0


def _flow_leaders(method, mu, s0, L, rho, tau, top=60.0):
    """Leaders (argmax_j s_j, 1-based) at every DOP853 step of ds_j/dtau = x_j (1 -
    rho c x_j)^(L-1), x_j = mu_j e^((L-2) s_j), to tau or near a blow-up (L max s = top;
    nearer than 60, the time to blow-up falls below the spacing of float64 taus)."""

    def f(t, s):
        u = np.exp(s)
        x = mu * u ** (L - 2)
        return x * (1 - rho * _c(method, u, mu, L) * x) ** (L - 1)

    def high(t, s):
        return top - L * np.max(s)

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
    code, winner = certify(METHODS[method], s, mu, depth, rho)
    # TAKES_OVER (tests below) also says the winner, once it leads, leads for ever.
    fired = np.nonzero((code == fates.LEADS) | (code == fates.TAKES_OVER))[0]
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
        code, winner = certify(METHODS[method], s, mu, depth, rho, eta)
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
    (0.3, 0.3, 0.3, 0.31) the major leads but is below the bound (no certificate that it
    keeps the lead; the escape past the fixed point says only that it leads for ever from
    some later time, docs/theory/regimes.md#escape-past-the-fixed-point), and the flow
    hands the lead to a minor coordinate."""
    L, rho, mu = 3, 1.0, np.asarray(MU)
    s = np.log(np.array([0.3, 0.3, 0.3, 0.31]))
    code, _ = certify(SAM_L2, s[None], mu[None], L, rho)
    assert code[0] in (fates.OPEN, fates.WINS_LATER)
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
        leads, last = _map_leaders("sam-l2", np.asarray(MU), u0, depth, rho, 0.02, 50 * steps)
        stop = part["stop_leader"].values[decided]
        moved = stop > 0
        assert moved.sum() >= 2, depth
        assert np.all(leads[steps - 1 :, moved] == stop[None, moved]), depth
        # The decided runs that never saw a leader are the tied starts whose float64 steps
        # all round back to the start (labelled from the exact map's first step, checked
        # in 60-digit decimals in tests/test_takeover.py): the NumPy loop stands still too.
        assert np.all(last[~moved] == u0[~moved]), depth


def _minor_ahead(rng, n, L, rho, method):
    """Random mu [n, 4] in (0.5, 3) and states with a minor coordinate leading while the
    major is ahead in rate, x_k < x_major (x_j = mu_j u_j^(L-2)): the take-over's
    condition (docs/theory/regimes.md#takeover-at-every-depth), the region aside."""
    mu = rng.uniform(0.5, 3.0, size=(n, 4))
    a = np.argmax(mu, axis=1)
    scale = {"sam-l2": 1.5 * np.sqrt(L) * rho, "below": 0.95 * np.sqrt(L) * rho}.get(method, 0.6)
    u = scale * np.exp(rng.uniform(-0.5, 0.0, size=(n, 4)))
    rows = np.arange(n)
    # one minor ahead of the major by a factor inside (1, (mu_a / mu_k)^(1/(L-2)))
    k = (a + rng.integers(1, 4, size=n)) % 4
    room = (mu[rows, a] / mu[rows, k]) ** (1.0 / (L - 2))
    u[rows, k] = u[rows, a] * (1.0 + (room - 1.0) * rng.uniform(0.1, 0.7, size=n))
    others = np.ones((n, 4), bool)
    others[rows, a] = False
    others[rows, k] = False
    u = np.where(others, np.minimum(u, 0.9 * u[rows, a][:, None]), u)  # the rest behind
    assert np.all(np.argmax(u, axis=1) == k)
    return mu, np.log(u), a


def _shares_kept(mu, u, L, rho, a=None):
    """The l2-SAM *shares* condition below sqrt(L) rho
    (docs/theory/regimes.md#takeover-at-every-depth), written again here: R = L rho c x_a <
    1, q_k = x_k / x_a < 1 and sum_{k != a} (q_k u_k / u_a)^2 g(q_k) <= 1 / (L - 1), g the
    largest of y^p (1 - q y) over y in (0, 1], p = 2 (L - 1) / (L - 2), found on a grid;
    ``a`` the major unless given."""
    a = np.argmax(mu) if a is None else a
    x = mu * u ** (L - 2)
    q = x / x[a]
    R = L * rho * _c("sam-l2", u, mu, L) * x[a]
    y = np.linspace(1e-6, 1.0, 200001)
    p = 2 * (L - 1) / (L - 2)
    g = np.array([np.max(y**p * (1 - qk * y)) for qk in q])
    total = np.sum(np.delete((q * u / u[a]) ** 2 * g, a))
    return bool(R < 1 and np.all(np.delete(q, a) < 1) and total <= 1 / (L - 1))


def _kappa_share(method, mu, u, L, rho):
    """The proof's quantities at a state: theta, the bound on L rho c x_a that the rule's
    condition keeps for ever (l2-SAM sqrt(L) rho / u_a; USAM's (bound) L rho sup_{v >= u_a}
    phi(v), found here on a grid of v, or (fall) L rho c x_a now; GD 0), kappa = (1 -
    theta/L)^(L-2) (1 - theta), q_k = x_k / x_a."""
    a = np.argmax(mu)
    x = mu * u ** (L - 2)
    if method == "sam-l2" and _shares_kept(mu, u, L, rho):
        theta = L * rho * _c(method, u, mu, L) * x[a]  # R itself: it does not rise
    elif method == "sam-l2" and u[a] < np.sqrt(L) * rho:  # the region kept by a race
        theta = np.sqrt(L) * rho / np.sqrt(_phi_min(mu, u, L)[0])
    elif method == "sam-l2":
        theta = np.sqrt(L) * rho / u[a]
    elif method == "usam":
        c = _c(method, u, mu, L)
        v = u[a] * np.geomspace(1.0, 1e3, 20001)
        bound = L * rho * np.max(mu[a] * v ** (L - 2) / (1 + np.exp(np.minimum(mu[a] * v**L, 700))))
        fall = (1 - c) * L * mu[a] * u[a] ** L >= L - 2
        theta = min(bound, L * rho * c * x[a]) if fall else bound
    else:
        theta = 0.0
    return theta, (1 - theta / L) ** (L - 2) * (1 - theta), x / x[a]


@pytest.mark.parametrize("method", ["sam-l2", "below", "usam"])
@pytest.mark.parametrize("depth", [3, 4])
def test_a_take_over_flow_hands_the_lead_to_the_major(method, depth):
    """From states with a minor leading where the take-over certificate holds, the flow
    (SciPy DOP853, rtol 1e-11, to a blow-up or tau 200) keeps L rho c x_a below its start's
    theta < 1, hands the lead to the major before log u_a has grown by the proof's
    bound max_k log(u_k/u_a) / (kappa (1 - q_k)), and the major then keeps it. ``below``:
    l2-SAM from u_a below sqrt(L) rho, certified by the *shares* condition."""
    rng = np.random.default_rng(depth * 11 + len(method))
    rho = 0.3
    below = method == "below"
    mu, s, a = _minor_ahead(rng, 48 if below else 24, depth, rho, method)
    method = "sam-l2" if below else method
    code, winner = certify(METHODS[method], s, mu, depth, rho)
    # At odd L a leader past the crossing bound (below sqrt(L) rho) with the major below
    # it is a take-over by the escape past the fixed point (its own proofs, tested in
    # tests/test_escape.py and tests/test_crossing.py, whose independent recomputation of
    # the bound is used here): not here.
    kept = np.array([_shares_kept(mu[i], np.exp(s[i]), depth, rho) for i in range(len(mu))])
    low = np.exp(s[np.arange(len(mu)), a]) <= np.sqrt(depth) * rho
    escape = (method == "sam-l2") & (depth % 2 == 1) & low & ~kept
    escape &= (np.max(s, axis=1) > np.log(np.sqrt(depth) * rho)) | crossing_kept(
        np.exp(s), mu, depth, rho, None
    )
    fired = np.nonzero((code == fates.TAKES_OVER) & ~escape)[0]
    if below:  # the shares condition certifies, and besides it only the race
        # (docs/theory/regimes.md#region-outlasts, min Phi > B^2 found independently)
        race = np.array([_phi_min(mu[i], np.exp(s[i]), depth)[0] for i in range(len(mu))])
        race = race > depth * rho**2
        takes = (code == fates.TAKES_OVER) & ~escape
        assert np.all(takes[kept & low]) and np.all((kept & low | race)[takes])
    assert len(fired) >= 8, f"only {len(fired)} of {len(mu)} sampled states certified"
    assert np.all(winner[fired] == a[fired] + 1)
    seen = 0
    for i in fired:
        u0 = np.exp(s[i])
        theta, kappa, q = _kappa_share(method, mu[i], u0, depth, rho)
        assert 0 < theta < 1
        ahead = np.nonzero(u0 > u0[a[i]])[0]
        need = max(np.log(u0[k] / u0[a[i]]) / (kappa * (1 - q[k])) for k in ahead)
        # stopped at L max s = 40: nearer a blow-up DOP853 can fail at rtol 1e-11
        leads, path = _flow_leaders(method, mu[i], s[i], depth, rho, 200.0, top=40.0)
        u = np.exp(path)
        x_a = mu[i][a[i]] * u[a[i]] ** (depth - 2)
        c = np.array([_c(method, u[:, t], mu[i], depth) for t in range(u.shape[1])])
        assert np.all(depth * rho * c * x_a <= theta * (1 + 1e-9)), i  # the region is kept
        reached = np.nonzero(leads == a[i] + 1)[0]
        if len(reached) == 0:  # the run ended (tau 200 or near a blow-up) before it
            assert path[a[i], -1] - s[i][a[i]] < need, i
            continue
        seen += 1
        assert np.all(leads[reached[0] :] == a[i] + 1), i
        # the grid of DOP853 steps: the crossing lies before the first step that sees it
        assert path[a[i], reached[0] - 1] - s[i][a[i]] <= need, i
    assert seen >= 6, seen


@pytest.mark.parametrize("method", ["gd", "sam-l2", "below", "usam"])
@pytest.mark.parametrize("depth", [3, 4])
def test_a_take_over_step_map_hands_the_lead_to_the_major(method, depth):
    """The discrete take-over (eta 0.05, 0.5, 2): a NumPy float64 loop of the balanced
    step map from each certified state, read every step: log(u_a / |u_k|) rises at every
    step by at least the proof's (1 - lambda_k) min(s, 1) / 2 (s = h F(x_a), lambda_k = 1
    - kappa (1 - q_k)), less a float64 slack, L rho c x_a stays below the proof's theta;
    the major takes the lead and keeps it (within 4,000 steps for most states: the proof
    says finite, not how soon). ``below``: l2-SAM below sqrt(L) rho (the shares condition)."""
    rng = np.random.default_rng(200 + depth * 11 + len(method))
    rho = 0.3
    mu, s, a = _minor_ahead(rng, 48 if method == "below" else 16, depth, rho, method)
    method = "sam-l2" if method == "below" else method
    seen = 0
    for eta in (0.05, 0.5, 2.0):
        code, winner = certify(METHODS[method], s, mu, depth, rho, eta)
        fired = np.nonzero(code == fates.TAKES_OVER)[0]
        assert len(fired) >= 6, (eta, len(fired))
        assert np.all(winner[fired] == a[fired] + 1)
        m_, L, ai, rows = mu[fired], depth, a[fired], np.arange(len(fired))
        u = np.exp(s[fired])
        proof = [_kappa_share(method, m_[j], u[j], L, rho) for j in rows]
        lam = np.stack([1 - k * (1 - q) for _, k, q in proof])
        theta = np.array([t for t, _, _ in proof])
        others = np.arange(4)[None, :] != ai[:, None]
        took = np.full(len(fired), -1)
        for t in range(4000):
            c = np.array([_c(method, u[j], m_[j], L) for j in rows])[:, None]
            x = m_ * u ** (L - 2)
            if method != "gd":  # the region the proof keeps: L rho c x_a <= theta
                assert np.all(L * rho * c[:, 0] * x[rows, ai] <= theta * (1 + 1e-9)), (eta, t)
            F = x * (1 - rho * c * x) ** (L - 1)
            w = u * (1 - rho * c * x)
            h = eta / (1 + np.exp(np.minimum(np.sum(m_ * w**L, axis=1, keepdims=True), 700.0)))
            new = u * (1 + h * F)
            rise = np.log(new[rows, ai][:, None] / new) - np.log(u[rows, ai][:, None] / u)
            want = 0.5 * (1 - lam) * np.minimum(h * F[rows, ai][:, None], 1.0)
            assert np.all((rise >= want - 1e-12) | ~others), (eta, t)
            u = new
            leads = np.argmax(u, axis=1) == ai
            took = np.where((took < 0) & leads, t, took)
            assert np.all(leads | (took < 0)), (eta, t)  # once the major leads, it keeps it
        seen += int(np.sum(took >= 0))
    assert seen >= 12, seen


@pytest.mark.parametrize("depth", [3, 4])
def test_discrete_take_overs_hold_50x_longer(depth):
    """Random non-uniform starts (l2-SAM, rho 0.05-0.3, eta 0.5, 150 steps by the
    engine). For every run the engine labels with a minor leading (the take-over at every
    depth), a NumPy loop of the map run 50 times longer, read every step, has the engine's
    path up to its stop, keeps the take-over's condition (u_a > sqrt(L) rho, x_k < x_a)
    and a nonfalling log(u_a / |u_k|) at every later step, and where the major has taken
    the lead by its end (it can be slow: h shrinks with the loss), the major keeps it and
    the whole path's regime is the engine's label. A run labelled with a minor's limit
    (the coordinate with the largest rate above sqrt(L) rho: the lead certificate where it
    leads, else its take-over) never has the major lead in the NumPy loop, and the minor,
    once it leads there, keeps the lead at every later step."""
    from tests.test_takeover import compress, regime_of

    rng = np.random.default_rng(31 + depth)
    mu = np.array([0.25, 0.5, 0.75, 1.0])
    n, steps, eta = 24, 150, 0.5
    u0 = np.exp(rng.uniform(np.log(0.2), np.log(1.5), (n, 4)))
    rho = np.exp(rng.uniform(np.log(0.05), np.log(0.3), n))[:, None]
    # The NumPy map (as _map_leaders), with the invariants read after every step.
    u, leads = u0.copy(), np.zeros((50 * steps + 1, n), int)
    leads[0] = np.argmax(u, axis=1) + 1
    held = np.ones(n, bool)
    for t in range(50 * steps):
        m = mu * u ** (depth - 1)
        w = u - rho * m / np.sqrt(depth * np.sum(m * m, axis=1, keepdims=True))
        zt = np.minimum(np.sum(mu * w**depth, axis=1, keepdims=True), 700.0)
        new = u + eta / (1.0 + np.exp(zt)) * mu * w ** (depth - 1)
        if t >= steps:
            x = mu * new ** (depth - 2)
            held &= new[:, 3] > np.sqrt(depth) * rho[:, 0]
            held &= np.all(x[:, :3] < x[:, 3:], axis=1)
            ratio = np.log(new[:, 3:] / new) - np.log(u[:, 3:] / u)
            held &= np.all(ratio >= -1e-12, axis=1)  # a float64 slack of the logs
        u = new
        leads[t + 1] = np.argmax(u, axis=1) + 1
    labelled = seen_over = minor_kept = 0
    for i in range(n):
        ds = samflow.trajectory(
            "sam-l2", depth=depth, mu=list(mu), alpha_per_coord=list(u0[i]), rho=float(rho[i, 0]),
            runner=samflow.Discrete(eta=eta, steps=steps, save=samflow.Every(steps)),
        )  # fmt: skip
        regime, stop = int(ds["regime"]), int(ds["stop_leader"])
        seen = list(ds["leader_path"].values[: int(ds["n_leaders"])])
        assert seen == compress(leads[: steps + 1, i]), i
        if regime == UNRESOLVED or stop == 4:
            continue
        winner = int(ds["limit_coord"])
        if winner != 4:  # a minor with the largest rate above sqrt(L) rho: leading, it keeps
            # the lead; else it takes the lead and keeps it (docs/theory/regimes.md#minor-winner)
            minor_kept += 1
            later = leads[steps:, i]
            assert not np.any(later == 4), i
            if np.any(later == winner):
                assert np.all(later[int(np.argmax(later == winner)) :] == winner), i
            continue
        labelled += 1
        assert int(ds["limit_coord"]) == 4 and held[i], i
        path = compress(leads[:, i])
        if path[-1] == 4:
            seen_over += 1
            first = np.argmax(leads[steps + 1 :, i] == 4) + steps + 1
            assert np.all(leads[first:, i] == 4), i
            assert regime == regime_of(path, 4), (i, path, regime)
    assert labelled >= 3 and seen_over >= 1, (labelled, seen_over)


@pytest.mark.parametrize("depth", [4, 6])
def test_a_discrete_collapse_at_even_depth_stays_in_its_ball(depth):
    """l2-SAM's discrete collapse certificate at even L >= 4
    (docs/theory/regimes.md#collapse-certificates): from random states it certifies
    (signs mixed: the map is even in each u_j), a NumPy float64 loop of the balanced step
    map, eta 0.01 to 2, keeps max_j |u_j| <= B = max(U, eta J) at every one of 3,000 steps
    (a relative slack of 1e-12: float64 rounding of |u|), J = min(mu_max (rho / sqrt
    L)^(L-1), mu_max^(1/L) (p / e)^p), p = (L - 1) / L. At rho 4, eta 0.3 only the second
    bound of J certifies (the first is above rho_0)."""
    rng = np.random.default_rng(50 + depth)
    n = 64
    fired_total = 0
    new_bound = 0  # states certified only by the second bound of J
    for rho, eta in ((1.0, 0.01), (1.0, 2.0), (4.0, 0.3)):
        mu = rng.uniform(0.5, 3.0, size=(n, 4))
        rho0 = rho * mu.min(axis=1) / np.sqrt(depth * np.sum(mu * mu, axis=1))
        u0 = rho0[:, None] * np.exp(rng.uniform(-2.0, 0.0, size=(n, 4)))
        u0 *= rng.choice([-1.0, 1.0], size=(n, 4))
        code, _ = certify(SAM_L2, np.log(np.abs(u0)), mu, depth, rho, eta)
        fired = np.nonzero(code == fates.COLLAPSE)[0]
        fired_total += len(fired)
        m_, u = mu[fired], u0[fired].copy()
        p = (depth - 1) / depth
        J = np.minimum(
            m_.max(axis=1) * (rho / np.sqrt(depth)) ** (depth - 1),
            m_.max(axis=1) ** (1 / depth) * (p / np.e) ** p,
        )
        B = np.maximum(np.max(np.abs(u), axis=1), eta * J)
        assert np.all(B < rho0[fired])
        old_J = m_.max(axis=1) * (rho / np.sqrt(depth)) ** (depth - 1)
        new_bound += np.sum(eta * old_J >= rho0[fired])
        for t in range(3000):
            m = m_ * u ** (depth - 1)
            w = u - rho * m / np.sqrt(depth * np.sum(m * m, axis=1, keepdims=True))
            zt = np.minimum(np.sum(m_ * w**depth, axis=1, keepdims=True), 700.0)
            u = u + eta / (1.0 + np.exp(zt)) * m_ * w ** (depth - 1)
            assert np.all(np.max(np.abs(u), axis=1) <= B * (1 + 1e-12)), (eta, t)
    assert fired_total >= 60 and new_bound >= 20, (fired_total, new_bound)


def test_discrete_collapses_at_depth_4_hold_50x_longer():
    """The engine's discrete l2-SAM runs at L = 4 (uniform starts, eta 0.05, 200 steps)
    labelled collapse: a NumPy loop of the map has, at the engine's stop, a state inside
    the certificate (B < rho_0 and the growth condition, evaluated here in NumPy), and run
    50x longer never takes max_j |u_j| above that B."""
    L, steps, eta = 4, 200, 0.05
    mu = np.asarray(MU)
    alphas, rhos = np.geomspace(0.01, 0.3, 6), np.array([1.0, 2.0])
    ds = samflow.sweep(
        "sam-l2", depth=L, mu=MU, axes={"alpha": alphas, "rho": rhos},
        runner=samflow.Discrete(eta=eta, steps=steps),
    )  # fmt: skip
    i, j = np.nonzero(ds["regime"].values == 1)  # collapse
    assert len(i) >= 4, len(i)
    rho = rhos[j][:, None]
    u = np.repeat(alphas[i][:, None], 4, axis=1)
    rho0 = rho[:, 0] * mu.min() / np.sqrt(L * np.sum(mu * mu))
    for t in range(50 * steps):
        m = mu * u ** (L - 1)
        w = u - rho * m / np.sqrt(L * np.sum(m * m, axis=1, keepdims=True))
        zt = np.minimum(np.sum(mu * w**L, axis=1, keepdims=True), 700.0)
        u = u + eta / (1.0 + np.exp(zt)) * mu * w ** (L - 1)
        if t + 1 == steps:  # the engine's stop: the certificate, in NumPy
            p = (L - 1) / L
            jump = np.minimum(
                mu.max() * (rho[:, 0] / np.sqrt(L)) ** (L - 1),
                mu.max() ** (1 / L) * (p / np.e) ** p,
            )
            B = np.maximum(np.max(np.abs(u), axis=1), eta * jump)
            grow = 1 + eta * np.sqrt(L * np.sum(mu * mu)) * B ** (L - 1) / rho[:, 0]
            assert np.all(B < rho0) and np.all((B / rho0) ** (1 / (L - 2)) * grow <= 1)
        if t + 1 >= steps:
            assert np.all(np.max(np.abs(u), axis=1) <= B * (1 + 1e-12)), t


@pytest.mark.parametrize("depth", [3, 4])
def test_gd_step_a_minor_leader_with_the_largest_rate_leads_for_ever(depth):
    """GD's step: a minor coordinate that leads and has the largest x_j = mu_j u_j^(L-2)
    is the certificate's winner, and a NumPy float64 loop of the map (eta 0.05 to 2,
    3,000 steps, read every step) never takes the lead from it."""
    rng = np.random.default_rng(70 + depth)
    n = 32
    mu = rng.uniform(0.5, 3.0, size=(n, 4))
    a = np.argmax(mu, axis=1)
    u = 0.3 * np.exp(rng.uniform(-0.5, 0.0, size=(n, 4)))
    rows = np.arange(n)
    k = (a + rng.integers(1, 4, size=n)) % 4
    # the minor k ahead of the major by more than (mu_a / mu_k)^(1/(L-2)): x_k > x_a
    room = (mu[rows, a] / mu[rows, k]) ** (1.0 / (depth - 2))
    u[rows, k] = np.max(u, axis=1) * room * rng.uniform(1.05, 1.5, size=n)
    s = np.log(u)
    total = 0
    for eta in (0.05, 0.5, 2.0):
        code, winner = certify(GD, s, mu, depth, 0.0, eta)
        # (TAKES_OVER: its take-over too, docs/theory/regimes.md#takeover-at-every-depth)
        lead = (code == fates.LEADS) | (code == fates.TAKES_OVER)
        fired = np.nonzero(lead & (winner == k + 1))[0]
        total += len(fired)
        leads, _ = _map_leaders("gd", mu[fired], u[fired], depth, 0.0, eta, 3000)
        assert np.all(leads == k[fired][None, :] + 1), eta
    assert total == 3 * n, total


def _l2_fixed_point(mu, L, rho):
    """u* of l2-SAM (every r_j = 1), solved here by a bisection on its scale t, u = t
    mu^(-1/(L-2)) (all r_j = 1 fixes the direction): r(t) = rho t^(L-2) / N(t) falls as
    1/t, so the scale is where it is 1."""
    direction = mu ** (-1.0 / (L - 2))
    lo, hi = 1e-8, 1e8
    for _ in range(200):
        t = np.sqrt(lo * hi)
        u = t * direction
        r = rho * mu[0] * u[0] ** (L - 2) / np.sqrt(L * np.sum(mu**2 * u ** (2 * L - 2)))
        lo, hi = (t, hi) if r > 1 else (lo, t)
    return np.sqrt(lo * hi) * direction


def _l2_r(u, mu, L, rho):
    return rho * mu * u ** (L - 2) / np.sqrt(L * np.sum(mu**2 * u ** (2 * L - 2)))


@pytest.mark.parametrize("depth", [4, 6])
def test_a_flow_with_every_r_above_one_collapses(depth):
    """l2-SAM's second collapse certificate at even L (docs/theory/regimes.md#collapse-
    certificates): every r_j >= 1 and some u_j below the fixed point u* (computed here by
    bisection, not by the engine's closed form). From random states where it fires, SciPy's
    DOP853 (rtol 1e-11, log space) keeps every r_j >= 1 and no u_j rising until max_j u_j
    has fallen e^5 and below the first certificate's bound rho mu_min / (sqrt(L) ||mu||)
    (so beta tends to 0); at u* itself, and where some r_j < 1 (and the first bound
    fails), it does not fire. Evaluated in float64, as the engine does."""
    rng = np.random.default_rng(70 + depth)
    L, rho = depth, 1.0
    inside, outside = [], []
    while len(inside) < 12 or len(outside) < 12:
        mu = rng.uniform(0.5, 3.0, size=4)
        star = _l2_fixed_point(mu, L, rho)
        u = star * np.exp(rng.uniform(-1.5, 0.3, size=4))
        r = _l2_r(u, mu, L, rho)
        rho0 = rho * mu.min() / np.sqrt(L * np.sum(mu * mu))
        if r.min() >= 1 and len(inside) < 12:
            inside.append((mu, u, star, rho0))
        elif r.min() < 1 and u.max() > rho0 and len(outside) < 12:
            outside.append((mu, u))
    code, _ = certify(SAM_L2, np.log([u for _, u, _, _ in inside]),
                       np.array([m for m, _, _, _ in inside]), L, rho)  # fmt: skip
    assert np.all(code == fates.COLLAPSE), code
    code, _ = certify(SAM_L2, np.log([u for _, u in outside]),
                       np.array([m for m, _ in outside]), L, rho)  # fmt: skip
    assert np.all(code != fates.COLLAPSE), code
    stars = [(m, s) for m, _, s, _ in inside[:4]]
    code, _ = certify(
        SAM_L2, np.log([s for _, s in stars]), np.array([m for m, _ in stars]), L, rho
    )
    assert np.all(code != fates.COLLAPSE), (code, stars)  # u* is a fixed point: no collapse there
    for mu, u, _, rho0 in inside:

        def f(t, s, mu=mu):
            log_n = 0.5 * (np.log(L) + np.log(np.sum(mu**2 * np.exp((2 * L - 2) * s))))
            r = np.exp(np.log(rho) + np.log(mu) + (L - 2) * s - log_n)
            return mu * np.exp((L - 2) * s) * (1 - r) ** (L - 1)

        level = min(np.log(rho0), np.log(u.max()) - 5.0)

        def below(t, s, level=level):
            return s.max() - level

        below.terminal = True
        sol = solve_ivp(f, (0, 1e7), np.log(u), method="DOP853", rtol=1e-11, atol=1e-12,
                        events=below, dense_output=True)  # fmt: skip
        # max u fell e^5 and below rho_0 (from there the first certificate's proof holds)
        assert sol.status == 1, sol.message
        path = sol.sol(np.linspace(0, sol.t[-1], 4001))
        # 1e-9 in log r and log u: rounding of the rtol-1e-11 solve over the path
        r = np.array([_l2_r(np.exp(s), mu, L, rho) for s in path.T])
        assert np.all(np.log(r) >= -1e-9)
        assert np.all(np.diff(path, axis=1) < 1e-9)


def _l2_step_ball(u, mu, L, rho, eta):
    """The first discrete collapse certificate (l2-SAM, even L), in NumPy, per row of u, mu
    [n, d]: U = max_j |u_j|, B = max(U, eta J) below rho_0 with the growth condition."""
    p = (L - 1) / L
    top = mu.max(axis=-1)
    J = np.minimum(top * (rho / np.sqrt(L)) ** (L - 1), top ** (1 / L) * (p / np.e) ** p)
    B = np.maximum(np.max(np.abs(u), axis=-1), eta * J)
    norm = np.sqrt(L * np.sum(mu * mu, axis=-1))
    rho0 = rho * mu.min(axis=-1) / norm
    grow = 1 + eta * norm * B ** (L - 1) / rho
    return (B < rho0) & ((B / rho0) ** (1 / (L - 2)) * grow <= 1)


@pytest.mark.parametrize("depth", [4, 6])
def test_a_step_map_with_every_r_above_one_collapses(depth):
    """The discrete step's form of the second collapse certificate (l2-SAM, even L;
    docs/theory/regimes.md#collapse-certificates): every r_j >= 1, some u_j below u*
    (bisection here), and steps small enough for the region to be kept down to a level
    where the first certificate holds. From random such states above rho_0 (where the
    first one does not fire), at a few (rho, eta) with eta rho^(L-2) near the floor's
    limit, the certificate fires on most states, and a NumPy float64 loop of the
    balanced step map, read every step, keeps every r_j >= 1 and every u_j from rising
    (1e-12 relative: the loop's own rounding) until the first certificate holds, checked
    here in NumPy. With a step 100 times longer it fires on none, and there the loop
    has some u_j rise from at least half of the states (the floor is needed)."""
    rng = np.random.default_rng(90 + depth)
    L, n = depth, 16
    fired = 0
    settings = {4: ((1.0, 0.01), (1.0, 0.02), (0.5, 0.08)), 6: ((1.0, 0.3), (0.5, 4.8))}[L]
    for rho, eta in settings:
        states = []
        while len(states) < n:
            mu = rng.uniform(0.5, 3.0, size=4)
            star = _l2_fixed_point(mu, L, rho)
            u = star * rng.uniform(0.3, 0.6) * np.exp(rng.uniform(-0.05, 0.05, size=4))
            if _l2_r(u, mu, L, rho).min() >= 1 and not _l2_step_ball(u, mu, L, rho, eta):
                states.append((mu, u))
        mu = np.array([m for m, _ in states])
        u = np.array([u for _, u in states])
        code, _ = certify(SAM_L2, np.log(u), mu, L, rho, eta)
        long_code, _ = certify(SAM_L2, np.log(u), mu, L, rho, 100 * eta)
        assert not np.any(long_code == fates.COLLAPSE), (rho, eta, long_code)
        rose, v = np.zeros(n, bool), u.copy()  # ... rightly: there the region is left
        for _ in range(3000):
            m = mu * v ** (L - 1)
            w = v - rho * m / np.sqrt(L * np.sum(m * m, axis=1, keepdims=True))
            zt = np.minimum(np.sum(mu * w**L, axis=1, keepdims=True), 700.0)
            v_next = v + 100 * eta / (1.0 + np.exp(zt)) * mu * w ** (L - 1)
            rose |= np.any(np.abs(v_next) > np.abs(v) * (1 + 1e-12), axis=1)
            v = v_next
        assert np.sum(rose) >= n // 2, (rho, eta, np.sum(rose))
        keep = code == fates.COLLAPSE
        fired += np.sum(keep)
        mu, u = mu[keep], u[keep]
        done = np.zeros(len(u), bool)
        for t in range(100_000):
            done |= _l2_step_ball(u, mu, L, rho, eta)
            if done.all():
                break
            m = mu * u ** (L - 1)
            w = u - rho * m / np.sqrt(L * np.sum(m * m, axis=1, keepdims=True))
            zt = np.minimum(np.sum(mu * w**L, axis=1, keepdims=True), 700.0)
            u_next = u + eta / (1.0 + np.exp(zt)) * mu * w ** (L - 1)
            assert np.all(np.abs(u_next) <= np.abs(u) * (1 + 1e-12)), (rho, eta, t)
            u = np.where(done[:, None], u, u_next)
            m = mu * np.abs(u) ** (L - 1)
            r = rho * mu * np.abs(u) ** (L - 2) / np.sqrt(L * np.sum(m * m, axis=1, keepdims=True))
            assert r.min() >= 1 - 1e-12, (rho, eta, t)
        assert done.all(), (rho, eta, np.nonzero(~done))
    assert fired >= 0.9 * len(settings) * n, fired


@pytest.mark.parametrize("depth", [3, 4])
def test_l2_a_minor_leader_with_the_largest_rate_leads_for_ever(depth):
    """l2-SAM at L >= 3 (docs/theory/regimes.md#lead-certificates-at-every-depth, *a minor
    winner*): a minor coordinate k that leads, has the largest x_j = mu_j u_j^(L-2) and
    u_k >= sqrt(L) rho is the certificate's winner, flow and step; the NumPy float64 map
    (eta 0.01 to 2, 3,000 steps, read every step) and SciPy's DOP853 flow (to blow-up or
    tau 50, read at every solver step) never take the lead from it (below the bound, by
    the shares condition for k or the race to the bound, tested below)."""
    rng = np.random.default_rng(90 + depth)
    n, rho = 32, 0.3
    mu = rng.uniform(0.5, 3.0, size=(n, 4))
    a = np.argmax(mu, axis=1)
    rows = np.arange(n)
    k = (a + rng.integers(1, 4, size=n)) % 4
    u = np.sqrt(depth) * rho * np.exp(rng.uniform(-1.0, 0.5, size=(n, 4)))
    # the minor k ahead of the major by more than (mu_a / mu_k)^(1/(L-2)): x_k > x_a
    room = (mu[rows, a] / mu[rows, k]) ** (1.0 / (depth - 2))
    u[rows, k] = np.max(u, axis=1) * room * rng.uniform(1.05, 1.5, size=n)
    s = np.log(u)
    above = u[rows, k] >= np.sqrt(depth) * rho
    assert above.sum() >= n // 2
    for eta in (None, 0.01, 0.3, 2.0):
        code, winner = certify(SAM_L2, s, mu, depth, rho, None if eta is None else eta)
        fired = np.nonzero((code == fates.LEADS) & (winner == k + 1))[0]
        assert set(np.nonzero(above)[0]) <= set(fired), eta  # above the bound: always
        if eta is None:
            for i in fired[:3]:  # DOP853 is the slow part: 3 states per depth
                leads, _ = _flow_leaders("sam-l2", mu[i], s[i], depth, rho, 50.0)
                assert np.all(leads == k[i] + 1), (i, leads)
        else:
            leads, _ = _map_leaders("sam-l2", mu[fired], u[fired], depth, rho, eta, 3000)
            assert np.all(leads == k[fired][None, :] + 1), eta


@pytest.mark.parametrize("depth", [3, 4])
def test_l2_a_leader_racing_to_the_bound_leads_for_ever(depth):
    """l2-SAM at L >= 3 below the bound (docs/theory/regimes.md#lead-certificates-at-every-depth,
    *race to the bound*): a leader w with u_w in (0.7, 1) sqrt(L) rho and the others behind
    is certified where its line u_w^-(L-2) reaches the bound before any other line can
    catch it; from every certified state the NumPy float64 map (eta 0.01 and 0.3, 3,000
    steps, read every step) and SciPy's DOP853 flow (to blow-up or tau 50) keep w leading,
    and the map's u_w passes the bound with w still ahead in rate."""
    rng = np.random.default_rng(120 + depth)
    n, rho = 24, 0.5
    mu = rng.uniform(0.5, 3.0, size=(n, 4))
    rows = np.arange(n)
    w = rng.integers(0, 4, size=n)
    bound = np.sqrt(depth) * rho
    u = bound * rng.uniform(0.1, 0.6, size=(n, 4))
    u[rows, w] = bound * rng.uniform(0.7, 0.99, size=n)
    s = np.log(u)
    total = 0
    for eta in (None, 0.01, 0.3):
        code, winner = certify(SAM_L2, s, mu, depth, rho, eta)
        fired = np.nonzero((code == fates.LEADS) & (winner == w + 1))[0]
        total += len(fired)
        if eta is None:
            for i in fired[:3]:  # DOP853 is the slow part: 3 states per depth
                leads, _ = _flow_leaders("sam-l2", mu[i], s[i], depth, rho, 50.0)
                assert np.all(leads == w[i] + 1), (i, leads)
        elif len(fired):
            leads, last = _map_leaders("sam-l2", mu[fired], u[fired], depth, rho, eta, 3000)
            assert np.all(leads == w[fired][None, :] + 1), eta
            x = mu[fired] * last ** (depth - 2)
            passed = last[np.arange(len(fired)), w[fired]] >= bound
            assert passed.sum() >= len(fired) // 2, eta  # most reach the bound in 3,000 steps
            assert np.all(np.argmax(x, axis=1)[passed] == w[fired][passed]), eta
    assert total >= 15, total


def _step_factor_bound(h, mu):
    """l2-SAM's band ``B / rho`` of the discrete collapse at L = 2 (``_l2_step_collapse``)
    for a step ``h``: ``h mu_d^2 (1 + (1 + h mu_d) / (2 + h mu_d))``."""
    a = mu.max(axis=-1)
    return h * a * a * (1 + (1 + h * a) / (2 + h * a))


@pytest.mark.parametrize("method", ["sam-l2", "usam"])
def test_a_discrete_collapse_at_depth_two_needs_half_the_step(method):
    """The discrete collapse certificates at L = 2 (``_l2_step_collapse``,
    ``_usam_step_collapse``) bound the step by ``eta / 2``: the logistic loss's
    ``|l'(z~)| = sigmoid(-z~)`` is at most 1/2 because the margin at the perturbed point,
    ``z~ = sum_j mu_j w_j^2``, is never negative at L = 2. From random signed states in the
    shrinking region (``rho c mu_min > 1``) that only the halved step certifies (the
    bound at ``eta`` itself fails for each), a NumPy float64 loop of the balanced step
    map, read at every one of 4,000 steps: l2-SAM keeps ``N = ||m||_2 < rho mu_min`` (the
    set the proof never leaves, inside the flow's collapse region); USAM shrinks every
    ``|u_j|`` at every step (a relative slack of 1e-12: float64 rounding of ``|u|``), most
    of them to below 1e-3 of their start (those left have steps ``h ~ eta e^-z~``).
    Every ``z~`` the loop meets is nonnegative."""
    rng = np.random.default_rng(61)
    rule, L = {"sam-l2": SAM_L2, "usam": USAM}[method], 2
    n, fired, fell = 1000, 0, 0
    for eta in (0.05, 0.2):
        mu = rng.uniform(0.3, 4.0, size=(n, 4))
        lo, a = mu.min(axis=1), mu.max(axis=1)
        if method == "sam-l2":
            rho = rng.uniform(0.5, 4.0, size=n)
            new_only = (_step_factor_bound(eta / 2, mu) < lo) & (_step_factor_bound(eta, mu) >= lo)
            # N = sqrt(2) ||mu u|| below rho mu_min: rho c mu_min > 1
            u = rng.uniform(0.05, 1.0, size=(n, 4)) / np.sqrt(2 * np.sum(mu * mu, axis=1))[:, None]
            u *= (rho * lo * rng.uniform(0.2, 0.95, size=n))[:, None]
        else:
            rho = 2.0 / lo * rng.uniform(1.05, 3.0, size=n)  # rho mu_min > 2
            new_only = ((eta / 2) * a * (rho * a / 2 - 1) < 2) & (eta * a * (rho * a / 2 - 1) >= 2)
            u = rng.uniform(0.01, 0.5, size=(n, 4))
        u *= rng.choice([-1.0, 1.0], size=(n, 4))
        code, _ = certify(rule, np.log(np.abs(u)), mu, L, rho, eta)
        keep = np.nonzero(new_only & (code == fates.COLLAPSE))[0]
        fired += len(keep)
        # the old bound (eta itself) certified none of them; the new one all of those kept
        mu_, u, rho_ = mu[keep], u[keep], rho[keep][:, None]
        start = np.abs(u).max(axis=1)
        for t in range(4000):
            m = mu_ * u
            norm = np.sqrt(L * np.sum(m * m, axis=1, keepdims=True))
            if method == "sam-l2":
                assert np.all(norm[:, 0] < rho_[:, 0] * mu_.min(axis=1)), (eta, t)
                w = u - rho_ * m / norm
            else:
                z = np.minimum(np.sum(mu_ * u * u, axis=1, keepdims=True), 700.0)
                c = 1.0 / (1.0 + np.exp(z))
                w = u - rho_ * c * m
            zt = np.sum(mu_ * w * w, axis=1, keepdims=True)
            assert np.all(zt >= 0)
            new = u + eta / (1.0 + np.exp(np.minimum(zt, 700.0))) * mu_ * w
            if method == "usam":
                assert np.all(np.abs(new) <= np.abs(u) * (1 + 1e-12)), (eta, t)
            u = new
        if method == "usam":  # most move far (the rest have tiny steps: h ~ eta e^-z~)
            fell += np.sum(np.abs(u).max(axis=1) < 1e-3 * start)
    assert fired >= 40 and (method == "sam-l2" or fell >= fired / 2), (fired, fell)
