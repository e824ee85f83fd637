"""Labels of the limit (docs/theory/regimes.md#labels-of-the-limit): a regime only where the run's
fate is decided, so that no longer run contradicts it."""

import itertools

import numpy as np
import pytest
from scipy.integrate import solve_ivp
from scipy.special import logsumexp

import samflow
from samflow.regimes import (
    DIRECT,
    FINITE,
    LIMIT_FINITE,
    RETURNED,
    UNRESOLVED,
)

MU = [1.0, 2.0, 3.0, 4.0]


def test_the_depth_3_example_is_returned_at_the_horizon_and_at_its_fate():
    """The issue's example: at tau_max = 200 the run is still growing towards a blow-up
    that comes at tau 271.7 after the lead passed 4 -> 3 -> 4. It was labelled direct,
    then unresolved (the major leads, below the bound sqrt(3) rho of its lead
    certificate); at its last state the major is pinned at its fixed point, and the
    certificate tried there (docs/theory/regimes.md#pinned-major: a minor leads later, and
    the major escapes past the fixed point) says returned, before the minor's lead: what
    the run to its fate (tau_cap) and the run to 2000 say."""
    problem = dict(depth=3, mu=MU, alpha=2e-3, rho=0.05)
    short = samflow.trajectory("sam-l2", **problem, runner=samflow.Flow(tau_max=200.0))
    assert int(short["regime"]) == RETURNED
    assert int(short["unresolved_reason"]) == 0
    assert int(short["limit_coord"]) == 4 and int(short["stop_leader"]) == 4
    np.testing.assert_array_equal(short["leader_path"].values[:2], [4, 0])
    assert short.attrs["stop_tau"] == 200.0 and "blowup_tau" not in short.attrs
    capped = samflow.trajectory(
        "sam-l2", **problem, runner=samflow.Flow(tau_max=200.0, tau_cap=2000.0)
    )
    long = samflow.trajectory("sam-l2", **problem, runner=samflow.Flow(tau_max=2000.0))
    for ds in (capped, long):
        assert int(ds["regime"]) == RETURNED and int(ds["limit_coord"]) == 4
        assert int(ds["unresolved_reason"]) == 0
        np.testing.assert_array_equal(ds["leader_path"].values[:4], [4, 3, 4, 0])
    # The capped run keeps its records on [0, 200] and goes on unrecorded until decided:
    # the same solve as the long one (the solver's steps differ only in where the save
    # grid cuts them: hand-offs 1e-6 relative), stopped once the major leads again above
    # sqrt(3) rho (docs/theory/regimes.md#lead-certificates-at-every-depth), before the
    # blow-up at 271.72 that decides the long one.
    assert capped["tau"].values[-1] == 200.0
    hand_capped, hand_long = (ds["handoff_tau"].values[:3] for ds in (capped, long))
    np.testing.assert_allclose(hand_capped, hand_long, rtol=1e-6)
    assert hand_capped[2] <= capped.attrs["stop_tau"] < long.attrs["blowup_tau"]
    assert "blowup_tau" not in capped.attrs
    assert abs(long.attrs["blowup_tau"] - 271.72) < 0.01
    assert capped.attrs["tau_cap"] == 2000.0


def test_one_program_serves_every_tau_cap(monkeypatch):
    """tau_cap is an argument of the compiled program, not part of its key
    (FlowConfig.extend ANY_EXTEND): the example above to three caps runs one program,
    and each run goes on to its own cap. At 230, before the minor takes the lead (236.67),
    it is unresolved; at 260, with the minor leading after the major, its certificate
    says returned; with 2000, it stops at its fate past the major's lead again (270.81),
    before the blow-up at 271.72."""
    from samflow import engine
    from samflow.flow_config import ANY_EXTEND

    runs = []
    runnable = engine.exported.runnable

    def spy(setup, args, traced):
        runs.append((setup, float(args[-1])))
        return runnable(setup, args, traced)

    monkeypatch.setattr(engine.exported, "runnable", spy)
    problem = dict(depth=3, mu=MU, alpha=2e-3, rho=0.05)
    out = {
        cap: samflow.trajectory(
            "sam-l2", **problem, runner=samflow.Flow(tau_max=200.0, tau_cap=cap)
        )
        for cap in (230.0, 260.0, 2000.0)
    }
    assert [ratio for _, ratio in runs] == [1.15, 1.3, 10.0]
    assert all(setup == runs[0][0] for setup, _ in runs)
    assert runs[0][0].flow.extend == ANY_EXTEND
    # stopped at the cap: 200 * (cap / 200), to an ulp
    assert out[230.0].attrs["stop_tau"] == pytest.approx(230.0, rel=1e-15)
    assert int(out[230.0]["regime"]) == UNRESOLVED
    np.testing.assert_array_equal(out[230.0]["leader_path"].values[:2], [4, 0])
    assert out[260.0].attrs["stop_tau"] == pytest.approx(260.0, rel=1e-15)
    assert int(out[260.0]["regime"]) == RETURNED
    np.testing.assert_array_equal(out[260.0]["leader_path"].values[:3], [4, 3, 0])
    fate = out[2000.0]
    assert int(fate["regime"]) == RETURNED
    np.testing.assert_array_equal(fate["leader_path"].values[:4], [4, 3, 4, 0])
    assert 270.81 < fate.attrs["stop_tau"] < 271.72


@pytest.mark.parametrize(
    ("method", "depth", "rho"),
    [
        ("sam-l2", 2, 1.0),
        ("sam-l2", 3, 0.1),
        ("sam-l2", 4, 0.1),
        ("gd", 3, None),
        ("sam-linf", 2, 0.5),
        ("sam-linf", 3, 0.5),
        ("usam", 2, 1.0),
    ],
)
def test_no_longer_run_contradicts_a_label(method, depth, rho):
    """Every run decided at a horizon T keeps its regime, limit and leader path when run
    ten times longer, and again with a cap of a hundred times T (run to its fate)."""
    alphas = np.geomspace(1e-3, 2.0, 13)
    T = 20.0
    out = {}
    for name, runner in {
        "T": samflow.Flow(tau_max=T, save=samflow.LogSpaced(19)),
        "10T": samflow.Flow(tau_max=10 * T, save=samflow.LogSpaced(19)),
        "cap": samflow.Flow(tau_max=T, save=samflow.LogSpaced(19), tau_cap=100 * T),
    }.items():
        out[name] = samflow.sweep(
            method, depth=depth, mu=MU, rho=rho, axes={"alpha": alphas}, runner=runner
        )
    base = out["T"]
    decided = base["regime"].values != UNRESOLVED
    assert decided.any()
    for name in ("10T", "cap"):
        other = out[name]
        for var in ("regime", "limit_coord"):
            np.testing.assert_array_equal(
                other[var].values[decided], base[var].values[decided], err_msg=f"{name} {var}"
            )
        # A path decided with its limit's leader leading is complete: the longer run has
        # the same leaders. One decided by the major's later take-over
        # (docs/theory/regimes.md#takeover-certificate) is the start of the longer run's,
        # which ends at the major.
        limit = base["limit_coord"].values
        complete = decided & ((limit < 1) | (base["stop_leader"].values == limit))
        np.testing.assert_array_equal(
            other["leader_path"].values[complete], base["leader_path"].values[complete]
        )
        for i in np.nonzero(decided & ~complete)[0]:
            n = int(base["n_leaders"].values[i])
            seen = base["leader_path"].values[i, :n]
            longer = other["leader_path"].values[i, : int(other["n_leaders"].values[i])]
            np.testing.assert_array_equal(longer[:n], seen)
            assert longer[-1] == limit[i], (name, i, longer)
    # Running to the fate decides at least as much as the horizon T did.
    assert (out["cap"]["regime"].values != UNRESOLVED).sum() >= decided.sum()


def test_discrete_labels_are_not_contradicted_by_more_steps():
    """Discrete l2-SAM at L = 2 (balanced step, certificate of the discrete map) and at
    L = 3 (the lead certificate of every depth): decided labels hold with 8x the steps."""
    alphas = np.geomspace(0.05, 2.0, 9)
    for depth in (2, 3):
        runs = [
            samflow.sweep(
                "sam-l2",
                depth=depth,
                mu=MU,
                rho=0.5,
                axes={"alpha": alphas},
                runner=samflow.Discrete(eta=0.02, steps=steps, save=samflow.Every(steps // 20)),
            )
            for steps in (2000, 16000)
        ]
        decided = runs[0]["regime"].values != UNRESOLVED
        if depth == 2:
            assert decided.sum() >= 6  # the certificate decides most of the grid
        np.testing.assert_array_equal(
            runs[1]["regime"].values[decided], runs[0]["regime"].values[decided]
        )


def test_odd_depth_linf_below_rho_is_a_finite_limit():
    """linf-SAM at L = 3 with every alpha_j < rho: each u_j creeps up to rho
    (docs/theory/balanced.md#balanced-linf-sam), beta -> rho^3 (1, 1, 1, 1). The engine names it
    from its certificate, and its records follow the closed form v = u - rho = v0 / (1 - mu v0 tau)
    (dv/dtau = mu v^2, written here) to the solver's tolerance."""
    alpha, rho = np.array([0.3, 0.2, 0.4, 0.1]), 0.5
    for tau_max in (50.0, 1000.0):
        ds = samflow.trajectory(
            "sam-linf",
            depth=3,
            mu=MU,
            alpha_per_coord=alpha,
            rho=rho,
            runner=samflow.Flow(tau_max=tau_max, save=samflow.LogSpaced(29)),
        )
        assert int(ds["regime"]) == FINITE and int(ds["limit_coord"]) == LIMIT_FINITE
        assert ds.attrs["regime_meaning"] == "finite"
    tau = ds["tau"].values
    v0 = alpha - rho
    u = rho + v0 / (1 - np.asarray(MU) * v0 * tau[:, None])
    # rtol 1e-8 of the solver on values of order rho^3: 1e-6 relative is 100x that.
    np.testing.assert_allclose(ds["beta"].values, u**3, rtol=1e-6)
    assert np.all(ds["beta"].values[-1] / rho**3 > 0.99)


def test_depth_4_near_collapse_is_decided_before_max_u_falls():
    """l2-SAM at L = 4, alpha = 0.01, rho = 0.1: by tau = 50 max u is still above the first
    collapse certificate's bound (it was unresolved, shrinking), but every r_j >= 1
    holds with u below the fixed point u*: the second certificate says collapse
    (docs/theory/regimes.md#collapse-certificates; checked against SciPy by
    test_l2_collapses_are_still_collapse, alpha 0.01 there)."""
    ds = samflow.trajectory(
        "sam-l2", depth=4, mu=MU, alpha=0.01, rho=0.1, runner=samflow.Flow(tau_max=50.0)
    )
    assert int(ds["regime"]) == samflow.regimes.COLLAPSE


def _norm_m(s):
    """N = sqrt(2 sum_k mu_k^2 e^(2 s_k)) by a log-sum-exp (no overflow at large s)."""
    return np.exp(0.5 * (np.log(2) + logsumexp(2 * np.log(MU) + 2 * s)))


def _l2_flow_l2(alpha, rho, tau):
    """Independent float64 integration of the balanced l2-SAM flow at L = 2 in log space:
    ds_j/dtau = mu_j (1 - rho mu_j / N), N = sqrt(2 sum mu_k^2 e^(2 s_k))."""
    mu = np.asarray(MU)

    def f(t, s):
        return mu * (1 - rho * mu / _norm_m(s))

    s0 = np.log(np.full(len(MU), alpha))
    sol = solve_ivp(f, (0, tau), s0, rtol=1e-11, atol=1e-12, dense_output=True)
    return sol


def test_the_l2_certificate_is_an_invariant_region():
    """Where samflow says a run is decided by the L = 2 certificate (direct at alpha = 1,
    sequential at alpha = 0.5), an independent integration to five times the stop shows
    the major leading from the stop on, at 200 checkpoints."""
    mu = np.asarray(MU)
    for alpha, regime in ((1.0, DIRECT), (0.5, 2)):
        ds = samflow.trajectory(
            "sam-l2", depth=2, mu=MU, alpha=alpha, rho=1.0, runner=samflow.Flow(tau_max=30.0)
        )
        assert int(ds["regime"]) == regime
        sol = _l2_flow_l2(alpha, 1.0, 150.0)
        for t in np.linspace(30.0, 150.0, 200):
            s = sol.sol(t)
            assert np.argmax(s) == 3
            assert _norm_m(s) > 1.0 * (mu[-1] + mu[-2])  # still inside the region


R_FALL = 16.2  # the collapse event's fall of log max|beta| in float64 (0.45 log(1/eps))


def _usam_l2(mu, alpha, rho, tau, **kwargs):
    """Independent float64 integration (SciPy DOP853, rtol 1e-11) of the balanced USAM
    flow at L = 2 in log space: ds_j/dtau = mu_j (1 - rho c mu_j), c = sigmoid(-z),
    z = sum_k mu_k e^(2 s_k) (log c = -log(1 + e^z), by logaddexp: no overflow)."""
    mu = np.asarray(mu, float)

    def f(t, s):
        z = np.sum(mu * np.exp(np.minimum(2 * s, 700.0)))
        return mu * (1 - rho * np.exp(-np.logaddexp(0.0, z)) * mu)

    s0 = np.log(np.asarray(alpha, float))
    return solve_ivp(f, (0, tau), s0, method="DOP853", rtol=1e-11, atol=1e-12, **kwargs)


def _crossings(sol, t_from, t_to, n=200_001):
    """Leader changes of beta = u^2 (the argmax of s) on a fine grid of the dense output,
    each refined by bisection to 1e-10 in tau: [(tau, new leader 1-based)]."""
    t = np.linspace(t_from, t_to, n)
    lead = np.argmax(sol.sol(t), axis=0)
    out = []
    for k in np.nonzero(lead[1:] != lead[:-1])[0]:
        a, b, old = t[k], t[k + 1], lead[k]
        while b - a > 1e-10:
            m = 0.5 * (a + b)
            a, b = (m, b) if np.argmax(sol.sol(m)) == old else (a, m)
        out.append((b, int(lead[k + 1]) + 1))
    return out


def test_the_usam_collapse_event_is_no_label():
    """The issue's example (docs/theory/regimes.md#collapse-certificates): USAM at L = 2 with
    rho mu_1 = 1 < 2 keeps coordinate 1 growing (c <= 1/2), so the fall of max|beta| by
    e^R at tau 2.03 was no collapse. samflow now follows it on: path 2 -> 1 -> 2, returned,
    with the hand-offs of an independent integration run to tau 1e4 (80x samflow's stop)."""
    mu, alpha, rho = [1.0, 4.0], [1e-9, 0.1], 1.0
    ds = samflow.trajectory(
        "usam", depth=2, mu=mu, alpha_per_coord=alpha, rho=rho,
        runner=samflow.Flow(tau_max=200.0, tau_cap=1000.0),
    )  # fmt: skip
    assert ds.attrs["regime_meaning"] == "returned" and int(ds["limit_coord"]) == 2
    np.testing.assert_array_equal(ds["leader_path"].values[:4], [2, 1, 2, 0])
    sol = _usam_l2(mu, alpha, rho, 1e4, dense_output=True)
    assert sol.success
    # Only these two hand-offs up to 80x the stop; the major leads at the end of it.
    seen = _crossings(sol, 0.0, 1e4)
    assert [c[1] for c in seen] == [1, 2]
    assert np.argmax(sol.y[:, -1]) == 1
    # Stated bound of a hand-off time: 3e-5 / |dD/dtau| (docs/theory/regimes.md#definitions);
    # the slopes here are about 4.5 and 0.08 (the second crossing is shallow): 1e-3 covers
    # both with room, and is 1e3 times below the 1.5 tau a missed step would cost.
    np.testing.assert_allclose(
        ds["handoff_tau"].values[1:3], [c[0] for c in seen], rtol=0, atol=1e-3
    )
    assert abs(seen[0][0] - 4.10) < 0.01 and abs(seen[1][0] - 96.0) < 0.1


def test_usam_is_collapse_only_where_it_collapses():
    """USAM at L = 2 from random non-uniform starts (alpha_j log-uniform in [1e-6, 1]): no
    run with rho mu_1 < 2 is labelled collapse (a coordinate with rho mu_j < 2 grows for
    ever), and every collapse label is confirmed by an independent integration run to
    100 times samflow's stop: max|beta| falls further, at every rate below 0 at its end."""
    mu = np.array([1.0, 2.0, 3.0, 4.0])
    ds = samflow.sweep(
        "usam", depth=2, mu=mu, axes={"seed": np.arange(16), "rho": [0.5, 1.5, 2.5, 6.0]},
        alpha_range=(1e-6, 1.0), runner=samflow.Flow(tau_max=50.0, tau_cap=500.0),
    )  # fmt: skip
    regime = ds["regime"].transpose("seed", "rho").values
    rho = ds["rho"].values
    collapse = regime == samflow.regimes.COLLAPSE
    assert not collapse[:, rho * mu.min() < 2].any()
    assert collapse.sum() >= 8  # the premise: there are collapse labels to check
    alphas = ds["seed_alpha"].transpose("seed", "coord").values
    stops = ds["stop_tau"].transpose("seed", "rho").values
    for i, k in zip(*np.nonzero(collapse), strict=True):
        a = alphas[i]
        sol = _usam_l2(mu, a, rho[k], 100 * stops[i, k])
        assert sol.success
        s_end = sol.y[:, -1]
        # beta = u^2 fell below the event's level and goes on falling
        assert 2 * s_end.max() < 2 * np.log(a).max() - R_FALL
        z = np.sum(mu * np.exp(2 * s_end))
        assert np.all(mu * (1 - rho[k] * mu / (1 + np.exp(z))) < 0)


@pytest.mark.parametrize(
    ("depth", "rho", "alphas"), [(2, 1.0, [0.05, 0.3]), (4, 0.1, [2e-3, 5e-3, 0.01])]
)
def test_l2_collapses_are_still_collapse(depth, rho, alphas):
    """l2-SAM, uniform alpha well below the collapse edge (0.384 at L = 2, rho = 1; about
    0.025 at L = 4, rho = 0.1): collapse, now by the certificates of
    docs/theory/regimes.md#collapse-certificates, and an independent integration run to 100
    times samflow's stop sees max_j u_j never rise after that stop and beta fall e^40 below
    its start (the finite-time collapse)."""
    ds = samflow.sweep(
        "sam-l2", depth=depth, mu=MU, rho=rho, axes={"alpha": alphas},
        runner=samflow.Flow(tau_max=100.0),
    )  # fmt: skip
    assert (ds["regime"].values == samflow.regimes.COLLAPSE).all()
    mu, L = np.asarray(MU), depth

    def f(t, s):  # ds_j/dtau = mu_j u^(L-2) (1 - r_j)^(L-1), r_j = rho mu_j u^(L-2) / N
        log_n = 0.5 * (np.log(L) + logsumexp(2 * np.log(mu) + 2 * (L - 1) * s))
        lift = (L - 2) * s
        r = np.exp(np.log(rho) + np.log(mu) + lift - log_n)
        return mu * np.exp(lift) * (1 - r) ** (L - 1)

    for alpha, stop in zip(alphas, ds["stop_tau"].values, strict=True):
        s0 = np.full(4, np.log(alpha))

        def fallen(t, s, s0=s0):
            return L * (s.max() - s0.max()) + 40.0

        fallen.terminal = True
        sol = solve_ivp(
            f, (0, 100 * stop), s0, method="DOP853", rtol=1e-11, atol=1e-12,
            events=fallen, dense_output=True,
        )  # fmt: skip
        assert sol.status == 1  # the fall of e^40 came before 100x the stop
        after = sol.sol(np.linspace(min(stop, sol.t[-1]), sol.t[-1], 2001)).max(axis=0)
        # max u never rises: 1e-9 of log u is rounding of the rtol-1e-11 solve
        assert np.all(np.diff(after) < 1e-9)


def _balanced_field(method, mu, L, rho):
    """ds_j/dtau = x_j (1 - rho c x_j)^(L-1), x_j = mu_j u_j^(L-2), in log space; c = 0
    (GD), 1 / ||m||_2 (l2-SAM, ||m||^2 = L sum mu_k^2 u_k^(2L-2)), sigmoid(-z) (USAM,
    z = sum mu_k u_k^L), all in logs so that nothing overflows before the blow-up."""

    def f(t, s):
        log_x = np.log(mu) + (L - 2) * s
        if method == "gd":
            log_c = -np.inf
        elif method == "sam-l2":
            log_c = -0.5 * (np.log(L) + logsumexp(2 * np.log(mu) + (2 * L - 2) * s))
        else:
            log_c = -np.logaddexp(0.0, np.exp(min(logsumexp(np.log(mu) + L * s), 700.0)))
        r = np.exp(np.log(rho) + log_c + log_x) if method != "gd" else 0.0
        return np.exp(log_x) * (1 - r) ** (L - 1)

    return f


@pytest.mark.parametrize("depth", [3, 4])
@pytest.mark.parametrize("method", ["gd", "sam-l2", "usam"])
def test_the_blow_up_is_won_by_the_largest_rate(method, depth):
    """docs/theory/regimes.md#blow-up-winner: from random starts with some coordinate above
    the rest in x_j = mu_j u_j^(L-2), SciPy's DOP853 (rtol 1e-11, log space) run until
    max_j log u_j has risen by 12 above its start (the blow-up) ends with the largest x of
    the start far ahead: 2 in log u over the next coordinate, where the race is decided
    (a ratio e^2 is no rounding of an rtol-1e-11 solve). Runs that do not blow up within
    tau 1e3 (collapse, finite limits, slow runs) are skipped; enough must blow up for the test to
    count."""
    rng = np.random.default_rng(90 + depth)
    L, won = depth, 0
    for _ in range(10):
        mu = rng.uniform(0.3, 4.0, size=4)
        s0 = np.log(rng.uniform(0.2, 1.5, size=4))
        rho = rng.uniform(0.05, 1.0)
        f = _balanced_field(method, mu, L, rho)

        top = s0.max()

        def up(t, s, top=top):
            return s.max() - top - 12.0

        up.terminal = True
        sol = solve_ivp(f, (0, 1e3), s0, method="DOP853", rtol=1e-11, atol=1e-12, events=up)
        if sol.status != 1:
            continue
        won += 1
        end = np.sort(sol.y[:, -1])
        assert int(np.argmax(sol.y[:, -1])) == int(np.argmax(np.log(mu) + (L - 2) * s0))
        assert end[-1] - end[-2] > 2.0
    assert won >= 5, won


def test_a_blow_up_stopped_mid_race_is_labelled_by_its_winner():
    """USAM, L = 3, alpha = 1e-4, rho = 2.272 (the figures' flow settings): the solve
    stops at its overflow guard with the path 4 -> 3 -> 2 -> 3 and the major (the
    largest x) behind; SciPy's DOP853 (rtol 1e-11) runs on past it and the major takes
    the lead before the blow-up: returned, which the engine says (it said major_lost
    before the blow-up's winner). Since USAM's return certificate
    (docs/theory/regimes.md#usam-returns) the engine decides it earlier, at the horizon,
    with the major leading (path [4]): the same label, proven before the race."""
    rho = float(np.geomspace(0.02, 5.0, 8)[6])
    runner = samflow.Flow(tau_max=200.0, tau_cap=2e6, rtol=1e-6, atol=1e-9, max_steps=20_000)
    ds = samflow.trajectory("usam", depth=3, mu=MU, alpha=1e-4, rho=rho, runner=runner)
    assert list(ds["leader_path"].values[: int(ds["n_leaders"])]) == [4]
    assert int(ds["regime"]) == RETURNED and int(ds["limit_coord"]) == 4
    f = _balanced_field("usam", np.asarray(MU), 3, rho)
    s0 = np.full(4, np.log(1e-4))

    def up(t, s):
        return s.max() - s0.max() - 30.0

    up.terminal = True
    sol = solve_ivp(f, (0, 1e7), s0, method="DOP853", rtol=1e-11, atol=1e-12, events=up,
                    dense_output=True)  # fmt: skip
    leads = np.argmax(sol.sol(np.linspace(1e-3, sol.t[-1], 400_001)), axis=0) + 1
    path = [int(leads[0])] + [int(b) for a, b in itertools.pairwise(leads) if a != b]
    assert path[-1] == 4 and 4 in path[:-1]  # returned
