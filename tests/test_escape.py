"""l2-SAM's escape past the fixed point at odd L >= 3
(docs/theory/regimes.md#escape-past-the-fixed-point): with the major ahead in rate and some
u_j above the fixed point u* (every r_j = 1), the major leads for ever from some finite time
on. Checked against NumPy float64 step maps and SciPy DOP853 flows written here, read every
step, and the engine's labels against a NumPy run 50 times longer."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.integrate import solve_ivp

import samflow
from samflow import fate as fates
from samflow.regimes import RETURNED
from samflow.rules import SAM_L2
from tests.runs import certify, l2_log_field, l2_step


def _map(mu, u0, L, rho, eta, steps):
    """The map from u0 [n, d], read every step: the leaders [steps + 1, n] (1-based),
    whether the major kept the strictly largest x_j = mu_j u_j^(L-2) and no u_j fell at
    every step [n], and the last state."""
    u = np.array(u0, float)
    a = np.argmax(mu, axis=1)
    rows = np.arange(len(u))
    leads = np.empty((steps + 1, len(u)), int)
    leads[0] = np.argmax(u, axis=1) + 1
    kept = np.ones(len(u), bool)
    for t in range(steps):
        new = l2_step(u, mu, L, rho, eta)
        kept &= np.all(new >= u, axis=1)
        x = mu * new ** (L - 2)
        others = np.where(np.arange(mu.shape[1]) == a[:, None], -np.inf, x)
        kept &= np.max(others, axis=1) < x[rows, a]
        u = new
        leads[t + 1] = np.argmax(u, axis=1) + 1
    return leads, kept, u


def _states(rng, n, L, rho, ahead):
    """Random mu [n, 4] in (0.5, 3) and states u [n, 4] below sqrt(L) rho with a minor
    leading; ``ahead``: the major strictly ahead in rate, else a minor k with x_k > x_a."""
    mu = rng.uniform(0.5, 3.0, size=(n, 4))
    rows, a = np.arange(n), np.argmax(mu, axis=1)
    bound = np.sqrt(L) * rho
    u = bound * rng.uniform(0.2, 0.9, size=(n, 4))
    k = (a + rng.integers(1, 4, size=n)) % 4
    room = (mu[rows, a] / mu[rows, k]) ** (1.0 / (L - 2))  # x_k = x_a where u_k = room u_a
    top = np.max(u, axis=1)
    if ahead:  # u_k between the others and room u_a: a minor leads, the major ahead in rate
        u[rows, a] = top * rng.uniform(0.6, 0.95, size=n)
        u[rows, k] = u[rows, a] * np.minimum(room * rng.uniform(0.9, 0.999, size=n), 1 / 0.6)
        u[rows, k] = np.maximum(u[rows, k], top * 1.001)
    else:
        u[rows, k] = np.maximum(u[rows, a] * room * rng.uniform(1.05, 1.5, size=n), top)
    return mu, u, a, k


@pytest.mark.parametrize("depth", [3, 5])
def test_escape_step_map_hands_the_lead_to_the_major_for_good(depth):
    """From random states with a minor leading below sqrt(L) rho and the major ahead in
    rate, wherever the certificate fires (RETURNS, the major): the NumPy float64 map (eta
    0.05 and near the step condition's limit, 8,000 steps, read every step) keeps the
    major strictly ahead in rate and lets no u_j fall (the proof's two invariants), and
    by its end most runs have the major past u_a = sqrt(L) rho with the largest x, where
    the take-over at every depth (tested in tests/test_certificates.py) has it take the
    lead and keep it; the rule says so there. (The take-over itself is slow: the steps
    shrink as the loss does.)"""
    rng = np.random.default_rng(500 + depth)
    n, rho, L = 32, 0.5, depth
    mu, u, a, _ = _states(rng, n, L, rho, ahead=True)
    s = np.log(u)
    # The step condition n eta x_bar ((L-2)/L)^(L-2) < 1 at the largest mu_a here (3):
    x_bar = 3.0 * (np.sqrt(L) * rho) ** (L - 2)
    limit = 1.0 / ((L - 2) * x_bar * ((L - 2) / L) ** (L - 2))
    fired_total = 0
    for eta in (0.05, 0.9 * limit):
        code, winner = certify(SAM_L2, s, mu, depth, rho, eta)
        # TAKES_OVER where the leader is past the bound (tested below)
        fired = np.isin(code, [fates.WINS_LATER, fates.TAKES_OVER]) & (winner == a + 1)
        fired = np.nonzero(fired)[0]
        fired_total += len(fired)
        _, kept, last = _map(mu[fired], u[fired], L, rho, eta, 8_000)
        assert np.all(kept), eta
        x = mu[fired] * last ** (L - 2)
        major = a[fired]
        assert np.all(np.argmax(x, axis=1) == major), eta
        passed = last[np.arange(len(fired)), major] > np.sqrt(L) * rho
        assert passed.sum() >= 0.75 * len(fired), (eta, passed.sum(), len(fired))
        # There the take-over of every depth holds (the major ahead in rate, u_a past the
        # bound; tested in tests/test_certificates.py): the rule says so.
        code, winner = certify(SAM_L2, np.log(last[passed]), mu[fired][passed], depth, rho, eta)
        assert np.all(np.isin(code, [fates.TAKES_OVER, fates.LEADS])), eta
        assert np.all(winner == major[passed] + 1), eta
    assert fired_total >= n // 2, fired_total
    # The flow (eta None): SciPy DOP853 to the blow-up; its last leader is the major.
    code, winner = certify(SAM_L2, s, mu, depth, rho, None)
    for i in np.nonzero(code == fates.WINS_LATER)[0][:3]:
        f = l2_log_field(mu[i], L, rho)

        def high(t, y):
            return 40.0 - L * np.max(y)

        high.terminal = True
        sol = solve_ivp(f, (0, 1e4), s[i], method="DOP853", rtol=1e-11, atol=1e-13, events=high)
        assert sol.status == 1, i  # ended at the blow-up guard
        assert np.argmax(sol.y[:, -1]) == a[i], i


def test_escape_needs_the_major_ahead_in_rate():
    """The condition's breakage: states as above but with a minor k ahead in rate (x_k >
    x_a). The certificate must not name the major there; the NumPy map (eta 0.05, 20,000
    steps) shows why: k, not the major, has the largest x at the end and leads. With the
    rate condition dropped from ``_l2_past_fixed_point``, this test fails (checked by hand)."""
    rng = np.random.default_rng(77)
    n, rho, L, eta = 24, 0.5, 3, 0.05
    mu, u, a, k = _states(rng, n, L, rho, ahead=False)
    code, winner = certify(SAM_L2, np.log(u), mu, L, rho, eta)
    named_major = (code == fates.WINS_LATER) & (winner == a + 1)
    leads, _, last = _map(mu, u, L, rho, eta, 20_000)
    x = mu * last ** (L - 2)
    lost = (np.argmax(x, axis=1) == k) & (leads[-1] == k + 1)
    assert lost.sum() >= n // 2, lost.sum()  # the major does not win these
    assert not np.any(named_major & lost), np.nonzero(named_major & lost)


def test_escape_labels_hold_50x_longer():
    """Engine runs (l2-SAM, L = 3, mu (1, 2, 3, 4), uniform alpha, eta 0.05, 3,000
    steps) that end with a minor leading after the major led: labelled returned, limit the
    major, by the certificate. The NumPy float64 map run 50 times longer (150,000 steps,
    read every step, the three runs at once) sees the same path up to step 3,000, keeps the
    major strictly ahead in rate with no u_j falling, and ends with u_a past sqrt(3) rho,
    where the take-over at every depth hands it the lead for good (that take-over is slow
    here: the steps shrink as the loss does); a path that ends with the major is returned."""
    mu = np.array([1.0, 2.0, 3.0, 4.0])
    cases = [
        (0.01, 0.5, [4, 3]),
        (0.1, 0.5, [4, 2]),
        (0.1584893192461114, 0.58295720059, [4, 1, 2]),
    ]
    steps, eta, L = 3000, 0.05, 3
    for alpha, rho, seen in cases:
        ds = samflow.trajectory(
            "sam-l2", depth=L, mu=list(mu), alpha=alpha, rho=rho,
            runner=samflow.Discrete(eta=eta, steps=steps),
        )  # fmt: skip
        assert list(ds["leader_path"].values[: int(ds["n_leaders"])]) == seen
        assert int(ds["regime"]) == RETURNED and int(ds["limit_coord"]) == 4
    u0 = np.array([[alpha] * 4 for alpha, _, _ in cases])
    rho = np.array([[rho] for _, rho, _ in cases])
    mus = np.tile(mu, (len(cases), 1))
    leads, kept, last = _map(mus, u0, L, rho, eta, 50 * steps)
    assert np.all(kept)
    assert np.all(last[:, 3] > np.sqrt(L) * rho[:, 0]), last
    for i, (_, _, seen) in enumerate(cases):
        run = leads[:, i]
        path = [int(v) for k, v in enumerate(run[1:]) if k == 0 or v != run[k]]
        cut = [int(v) for k, v in enumerate(run[1 : steps + 1]) if k == 0 or v != run[k]]
        assert cut == seen and path[: len(seen)] == seen, (path, seen)
        assert path[-1] != 4 or path.count(4) >= 2, path


def test_escape_with_the_leader_past_the_bound_is_a_take_over():
    """L = 3: a minor k leading above sqrt(L) rho, the major below it and ahead in rate.
    No u_j falls, so when the major first leads its u is past the bound, where it keeps
    the lead: the certificate says TAKES_OVER (the major). The NumPy float64 map (eta
    0.05, 4,000 steps, read every step) has the major lead only past the bound, ahead in
    rate, and, once it leads, lead to the end; some take the lead within the run."""
    rng = np.random.default_rng(11)
    n, rho, L, eta = 24, 0.5, 3, 0.05
    bound = np.sqrt(L) * rho
    rows = np.arange(n)
    mu = rng.uniform(0.3, 1.0, size=(n, 4))
    a, k = rng.integers(0, 4, size=n), rng.integers(1, 4, size=n)
    k = (a + k) % 4
    mu[rows, a] = rng.uniform(2.0, 3.0, size=n)
    u = bound * rng.uniform(0.1, 0.5, size=(n, 4))
    u[rows, a] = bound * rng.uniform(0.8, 0.95, size=n)
    u[rows, k] = bound * rng.uniform(1.05, 1.5, size=n)
    code, winner = certify(SAM_L2, np.log(u), mu, L, rho, eta)
    assert np.all(code == fates.TAKES_OVER) and np.all(winner == a + 1)
    uu, seen = u.copy(), 0
    first = np.full(n, -1)
    for t in range(4000):
        uu = l2_step(uu, mu, L, rho, eta)
        x = mu * uu
        leads = np.argmax(uu, axis=1) == a
        assert np.all(uu[rows, a][leads] > bound), t
        assert np.all(np.argmax(x, axis=1)[leads] == a[leads]), t
        assert np.all(leads[first >= 0]), t  # once it leads, it leads
        first = np.where((first < 0) & leads, t, first)
    seen = int(np.sum(first >= 0))
    assert seen >= 3, seen


def test_escape_below_the_bound_is_no_take_over():
    """The leader's bound is needed: from random L = 3 states with a minor leading and the
    major ahead in rate, the NumPy map (eta 0.05, 4,000 steps, read every step) has some
    major lead and then lose the lead (held back below sqrt(L) rho); at none of those
    states may the certificate say TAKES_OVER (with the leader's bound dropped from
    ``_l2_lead``, it does: checked by hand)."""
    rng = np.random.default_rng(0)
    n, L, eta = 400, 3, 0.05
    rho = np.exp(rng.uniform(np.log(0.02), 0.0, (n, 1)))
    mu = rng.uniform(0.5, 3.0, (n, 4))
    u = rho * np.exp(rng.uniform(-3.0, 0.5, (n, 4)))
    a = np.argmax(mu, axis=1)
    led, lost, uu = np.zeros(n, bool), np.zeros(n, bool), u.copy()
    for _ in range(4000):
        uu = l2_step(uu, mu, L, rho, eta)
        leads = np.argmax(uu, axis=1) == a
        lost |= led & ~leads
        led |= leads
    ahead = np.argmax(mu * u, axis=1) == a
    cases = np.nonzero(lost & (np.argmax(u, axis=1) != a) & ahead)[0]
    assert len(cases) >= 3, len(cases)
    code, _ = certify(SAM_L2, np.log(u[cases]), mu[cases], L, rho[cases, 0], eta)
    assert np.all(code != fates.TAKES_OVER), cases[code == fates.TAKES_OVER]
