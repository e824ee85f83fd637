"""The certificate of a discrete l2-SAM run whose steps vanish (``samflow.rules._l2_follows``,
docs/theory/regimes.md#vanishing-steps): where it holds, the step map itself, run on in
NumPy float64 (an independent loop, written here) until the plain take-over certificate
holds, must end led by the certificate's winner, never lose a lead that winner took, and,
for a minor winner, never have the major lead; and the engine labels a run of the figures'
grid whose steps have vanished as its flow does."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import samflow
from samflow import rules


def numpy_map(u, mu, L, rho, eta, steps):
    """The balanced l2-SAM step map ``u' = u + h mu w^(L-1)``, ``w = u - rho m / ||m||``,
    ``m = mu u^(L-1)`` (``||m||^2 = L sum m^2``), ``h = eta sigmoid(-sum mu w^L)``: each
    step's u, ``[steps + 1, d]``."""
    out = [u]
    for _ in range(steps):
        m = mu * u ** (L - 1)
        w = u - rho * m / np.sqrt(L * np.sum(m * m))
        h = eta / (1.0 + np.exp(min(np.sum(mu * w**L), 700.0)))
        u = u + h * mu * w ** (L - 1)
        out.append(u)
    return np.array(out)


def follows(s, mu, L, rho, eta, **kw):
    with jax.enable_x64(True):
        args = [jnp.asarray(v) for v in (s, mu, float(L), rho, eta)]
        holds, winner, first = jax.jit(lambda *a: rules._l2_follows(*a, **kw))(*args)
    return bool(holds), int(winner), int(first)


def leaders(path):
    """The leader at each step (argmax u; ties to the larger index do not occur here)."""
    return np.argmax(path, axis=1) + 1


@pytest.mark.parametrize("L", [3, 4])
def test_where_it_holds_the_map_ends_led_by_the_winner(L):
    rng = np.random.default_rng(7 + L)
    checked = 0
    for _ in range(40):
        mu = np.sort(rng.uniform(0.5, 4.0, 3))
        rho = rng.uniform(0.3, 1.0)
        eta = rng.uniform(0.002, 0.01)
        u = rng.uniform(0.8, 1.5, 3) * rho
        holds, winner, _ = follows(np.log(u), mu, L, rho, eta, start_share=1.0)
        if not holds:
            continue
        # the map, in chunks, until the take-over's region (its steps shrink: up to 2e5)
        path = np.array([u])
        for _ in range(10):
            path = np.concatenate([path, numpy_map(path[-1], mu, L, rho, eta, 20_000)[1:]])
            x = mu * path ** (L - 2)
            done = (np.argmax(x, axis=1) + 1 == winner) & (path[:, winner - 1] > np.sqrt(L) * rho)
            if done.any():
                break
        # (where its steps vanish before, the path so far is still checked below)
        lead = leaders(path)
        end = int(np.argmax(done)) if done.any() else len(path) - 1
        # There the take-over certificate holds (tested in test_certificates): the winner
        # takes the lead in the end and keeps it. Before it, the map's own path must keep
        # what this certificate claims of it.
        seen = lead[: end + 1]
        if (seen == winner).any():
            first = int(np.argmax(seen == winner))
            assert np.all(seen[first:] == winner), "the winner lost a lead it took"
        if winner != np.argmax(mu) + 1:
            assert not np.any(seen == np.argmax(mu) + 1), "the major led before a minor winner"
        checked += bool(done.any())
        if checked == 3:
            break
    assert checked >= 2


def test_the_figure_grids_run_whose_steps_vanished_is_labelled_as_its_flow():
    """alpha 1.93, rho 5, L = 3 (mu 1..4, eta 0.01, 2,000 steps): the loss at the perturbed
    point is ~1e-5 from the start and the step h ~3e-5 of rescaled time at the end, where
    the flow decides at tau ~0.7; it was unresolved. Now sequential, the major the limit's
    leader, as the flow from the same start (its own certificates)."""
    kw = dict(depth=3, mu=[1, 2, 3, 4], alpha=1.93, rho=5.0)
    run = samflow.trajectory("sam-l2", runner=samflow.Discrete(eta=0.01, steps=2000), **kw)
    flow = samflow.trajectory("sam-l2", runner=samflow.Flow(tau_max=200.0, tau_cap=2000.0), **kw)
    assert int(run.stop_leader) == 1  # a minor leads where the map stops
    assert int(run.regime) == int(flow.regime) == samflow.regimes.SEQUENTIAL
    assert int(run.limit_coord) == int(flow.limit_coord) == 4


@pytest.mark.parametrize("T", [1, 5, 8, 24, 128])
def test_the_engine_runs_the_loop_on_gathered_groups_with_the_results_of_every_point(T):
    """``engine._in_groups`` (a loop per point, run on groups of attempted points): the
    same results as the loop vmapped over the whole batch, masked where not attempted,
    for batches shorter than a group, not a multiple of it, and none or every point
    attempted; each point's loop counts to a number of its own, so a point run with
    another's inputs, or left out, shows."""
    from samflow import engine

    def certificate(a, b, attempt):  # a loop of a point's own length: (a > b, steps)
        stop = jnp.where(attempt, jnp.round(a * 10).astype(jnp.int32), 0)
        n = jax.lax.while_loop(lambda i: i < stop, lambda i: i + 1, 0)
        return attempt & (a > b), n

    rng = np.random.default_rng(T)
    a, b = jnp.asarray(rng.uniform(0, 5, T)), jnp.asarray(rng.uniform(0, 5, T))
    for attempt in (rng.uniform(size=T) < 0.3, np.zeros(T, bool), np.ones(T, bool)):
        attempt = jnp.asarray(attempt)
        holds, n = jax.jit(lambda *x: engine._in_groups(certificate, *x))(attempt, a, b)
        want_holds, want_n = jax.vmap(certificate)(a, b, attempt)
        np.testing.assert_array_equal(holds, want_holds)
        np.testing.assert_array_equal(n, np.where(attempt, want_n, 0))


def test_the_near_simultaneous_blow_up_is_certified_with_the_flows_winner():
    """The figure grid's alpha 1.93, rho 5, L = 4 run (mu 1..4, eta 0.01) at its state
    after 2e6 steps (the map's own state at the figures' cap, written out here), where its
    coordinates near their blow-up together and the major is ahead in x by a few percent
    only there: only the last try (the bound's growth per step, H^2 K <= 1.5e-9) holds, with
    the major as the winner. Checked against an independent SciPy DOP853 flow of
    ``d s_j / d tau = x_j (1 - rho c x_j)^(L-1)`` from the same state (the map's steps
    have vanished: it follows this flow, and cannot itself be run that far): it reaches
    the take-over's region (the major strictly largest in x, u past sqrt(L) rho), the
    major leads at the blow-up (a u at 1e6), and once it leads it keeps the lead."""
    from scipy.integrate import solve_ivp
    from scipy.special import logsumexp

    s = np.array([1.004382921952054, 0.8579654435803122, 0.7382262126010348, 0.6729850637685089])
    mu, L, rho, eta = np.array([1.0, 2.0, 3.0, 4.0]), 4, 5.0, 0.01
    assert follows(s, mu, L, rho, eta)[:2] == (True, 4)
    assert not follows(s, mu, L, rho, eta, tries=rules.FOLLOW_TRIES[:-1])[0]

    # In Y_j = u_j^-(L-2) the field is bounded, dY_j/dtau = -(L-2) mu_j (1 - q_j)^(L-1),
    # and the blow-up is where a Y_j reaches 0.
    def field(_, Y):  # q_j = rho x_j / ||m||_2 in logs (u reaches 1e6 and beyond)
        log_u = -np.log(np.maximum(Y, 1e-300)) / (L - 2)
        log_m = np.log(mu) + (L - 1) * log_u
        log_norm = 0.5 * (np.log(L) + logsumexp(2 * log_m))
        q = np.exp(np.log(rho) + np.log(mu) + (L - 2) * log_u - log_norm)
        return -(L - 2) * mu * (1 - q) ** (L - 1)

    def region(_, Y):  # > 0 once the major is strictly largest in x and past sqrt(L) rho
        log_x = np.log(mu) - np.log(np.maximum(Y, 1e-300))
        log_u = -np.log(max(Y[3], 1e-300)) / (L - 2)
        return min(log_x[3] - np.max(log_x[:3]), log_u - np.log(np.sqrt(L) * rho))

    def far(_, Y):  # the blow-up, followed until a u is 1e6
        return np.min(Y) - 1e-6 ** (L - 2)

    region.direction, far.terminal = 1, True
    sol = solve_ivp(
        field, (0, 5), np.exp(-(L - 2) * s), method="DOP853", rtol=1e-11, atol=1e-14,
        events=(region, far), dense_output=True,
    )  # fmt: skip
    assert sol.status == 1 and sol.t_events[0].size, "the flow never reached the region"
    lead = np.argmin(sol.sol(np.linspace(0, sol.t[-1], 20_001)).T, axis=1) + 1  # largest u
    assert lead[-1] == 4
    first = int(np.argmax(lead == 4))
    assert np.all(lead[first:] == 4), "the major lost a lead it took"


TIED = [  # the grid (l2-SAM, L = 4, mu 1..4, eta 0.02): uniform starts that never move
    (1.9139780785698999, 1.6164182824074786),
    (1.9139780785698999, 2.202102369832618),
    (2.4332975598102577, 2.202102369832618),
    (2.4332975598102577, 3.0),
    (3.093523944120928, 3.0),
]


def test_a_start_tied_at_the_top_is_named_by_who_leads_first():
    """Uniform starts whose float64 steps round to nothing (the loss at the perturbed
    point is far below eta's resolution), so the map's state is its start, tied at the top
    for ever: the certificate holds with the major as the winner and names a minor that
    leads first (the rates are not ordered as mu there). An independent SciPy DOP853 flow
    from the same start (the map's steps vanish: it follows this flow) has that minor
    lead first, and the major lead last, from its first lead to the blow-up (a u at 1e6):
    sequential. The engine labels one of them so (a discrete
    run, with its limit the major), where without ``first`` it named a tie by mu: direct."""
    from scipy.integrate import solve_ivp

    import samflow
    from samflow.regimes import NAMES

    mu, L, eta = np.array([1.0, 2.0, 3.0, 4.0]), 4, 0.02
    for alpha, rho in TIED:
        s = np.full(4, np.log(alpha))
        holds, winner, first = follows(s, mu, L, rho, eta)
        assert holds and winner == 4 and first in (1, 2, 3), (alpha, rho, first)

        def field(_, s, rho=rho):
            m = mu * np.exp((L - 1) * s)
            q = rho * mu * np.exp((L - 2) * s) / np.sqrt(L * np.sum(m * m))
            return mu * np.exp((L - 2) * s) * (1 - q) ** (L - 1)

        def far(_, s):
            return np.max(s) - np.log(1e6)

        far.terminal = True
        sol = solve_ivp(field, (0, 50), s, method="DOP853", rtol=1e-11, atol=1e-13,
                        events=far, dense_output=True)  # fmt: skip
        assert sol.status == 1, sol.message
        # (t = 0 is the tie itself: no leader there)
        lead = np.argmax(sol.sol(np.linspace(0, sol.t[-1], 20_001)[1:]).T, axis=1) + 1
        path = [int(lead[0])] + [int(k) for k, j in zip(lead[1:], lead[:-1], strict=True) if k != j]
        # the certificate's minor leads before the major's one lead, which is the last
        # (here it is the flow's first leader too)
        assert first in path[:-1] and path[-1] == 4 and path.count(4) == 1, (alpha, rho, path)
        assert path[0] == first, (alpha, rho, path, first)

    alpha, rho = TIED[0]
    run = samflow.trajectory("sam-l2", depth=L, mu=list(mu), alpha=alpha, rho=rho,
                             runner=samflow.Discrete(eta=eta, steps=500))  # fmt: skip
    assert int(run.n_leaders) == 0  # it never moved
    assert NAMES[int(run.regime)] == "sequential" and int(run.limit_coord) == 4
