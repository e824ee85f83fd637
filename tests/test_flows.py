"""Flows against closed forms, SciPy's solve_ivp, and the discrete iterates."""

import jax
import numpy as np
import pytest
from runs import record_schedule, run_discrete, save_times, solve_flow
from scipy.integrate import solve_ivp

import samflow
from samflow import theory
from samflow.fate import SETTLED
from samflow.init import balanced_start, random_scales
from samflow.model import single_point
from samflow.precision import precision
from samflow.regimes import COLLAPSE, DIRECT, MINOR_END, SEQUENTIAL, classify

MU = np.array([1.0, 2.0, 3.0, 4.0])
P = single_point(MU)
# Eagerly, every call re-traces the summary's scan; jitted, each shape compiles once.
_classify = jax.jit(classify)


@pytest.mark.parametrize("formulation", ["log", "linear"])
def test_gd_depth2_matches_exponential(formulation):
    alpha = np.array([0.3, 0.5, 0.2, 0.1])
    taus = save_times(5.0, 30)
    sol = solve_flow(P, balanced_start(alpha, 4, 2), 2, "gd", None, taus, formulation=formulation)
    u = theory.gd_u(alpha, MU, taus, 2)
    np.testing.assert_allclose(sol.beta, u**2, rtol=1e-6)


def test_linf_depth2_matches_closed_form():
    alpha = np.array([0.9, 0.3, 0.7, 0.45])
    rho = 0.5
    taus = save_times(3.0, 40)
    sol = solve_flow(P, balanced_start(alpha, 4, 2), 2, "sam-linf", rho, taus)
    u = theory.linf_l2_u(alpha, MU, rho, taus)
    np.testing.assert_allclose(sol.theta[:, 0], u, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("method", ["gd", "sam-l2", "sam-linf"])
def test_depth1_direction_is_l2_max_margin(method):
    alpha = np.array([0.7, 0.1, 0.4, 0.2])
    taus = save_times(2000.0, 20)
    rho = None if method == "gd" else 0.5  # gd takes no rho
    sol = solve_flow(P, balanced_start(alpha, 4, 1), 1, method, rho, taus, formulation="linear")
    np.testing.assert_allclose(sol.beta, theory.l2sam_l1_u(alpha, MU, taus), rtol=1e-7)
    direction = sol.beta[-1] / np.linalg.norm(sol.beta[-1])
    assert direction @ theory.l2_max_margin_direction(MU) > 1 - 1e-6


@pytest.mark.parametrize("formulation", ["log", "linear"])
def test_gd_depth3_blowup_time(formulation):
    alpha = 0.5
    sol = solve_flow(
        P, balanced_start(alpha, 4, 3), 3, "gd", None, save_times(10.0, 20), formulation=formulation
    )
    expected = theory.blowup_tau(alpha, MU, 3).min()
    assert sol.blowup
    assert abs(sol.stop_tau - expected) / expected < 1e-4


def test_log_l2_flow_matches_solve_ivp():
    alpha, rho = np.array([0.5, 0.6, 0.4, 0.5]), 1.0

    # docs/theory/balanced.md#balanced-initialisation, L = 2, written in linear space
    def rhs(tau, u):
        N = np.sqrt(2 * np.sum(MU**2 * u**2))
        return MU * u * (1 - rho * MU / N)

    taus = save_times(4.0, 25)
    ref = solve_ivp(rhs, (0, 4.0), alpha, t_eval=taus, method="DOP853", rtol=1e-12, atol=1e-14)
    sol = solve_flow(P, balanced_start(alpha, 4, 2), 2, "sam-l2", rho, taus, formulation="log")
    np.testing.assert_allclose(sol.theta[:, 0], ref.y.T, rtol=1e-6)


def test_discrete_error_falls_linearly_in_eta():
    alpha, rho, tau_star = 0.5, 1.0, 0.5
    flow = solve_flow(P, balanced_start(alpha, 4, 2), 2, "sam-l2", rho, np.array([0.0, tau_star]))
    target = flow.beta[-1]
    errors = []
    etas = np.array([0.04, 0.02, 0.01, 0.005])
    # One schedule long enough for the smallest eta: one compiled program for every eta
    # (the larger ones run past tau_star; only the records around it are read).
    schedule = record_schedule(int(2.5 * tau_star / etas.min() / 0.2), 1)
    for eta in etas:
        run = run_discrete(P, balanced_start(alpha, 4, 2), 2, "sam-l2", rho, eta, schedule)
        k = np.searchsorted(run.tau, tau_star)
        w = (tau_star - run.tau[k - 1]) / (run.tau[k] - run.tau[k - 1])
        beta = (1 - w) * run.beta[k - 1] + w * run.beta[k]
        errors.append(np.linalg.norm(beta - target) / np.linalg.norm(target))
    slope = np.polyfit(np.log(etas), np.log(errors), 1)[0]
    assert 0.8 <= slope <= 1.2, (errors, slope)


def _classified(method, alpha, tau_max=60.0):
    rho = None if method == "gd" else 1.0  # gd takes no rho
    sol = solve_flow(P, balanced_start(alpha, 4, 2), 2, method, rho, save_times(tau_max, 120))
    with precision("float64"):
        return _classify(sol.beta, sol.valid, sol.failed, major=4, path=sol.path, fate=sol.fate)


def test_phenomena_three_regimes_and_gd():
    assert int(_classified("sam-l2", 0.1).regime) == COLLAPSE
    seq = _classified("sam-l2", 0.5)
    assert int(seq.regime) == SEQUENTIAL
    D = np.asarray(seq.dominant)[1:]
    D = D[D > 0]
    before_major = D[: np.argmax(D == 4)]
    assert len(set(before_major.tolist())) >= 2 and before_major.max() < 4
    assert np.all(D[np.argmax(D == 4) :] == 4)
    direct = _classified("sam-l2", 3.0)
    assert int(direct.regime) == DIRECT and int(direct.first_amplified) == 4
    for alpha in (0.1, 0.5, 3.0):
        gd = _classified("gd", alpha)
        assert int(gd.regime) == DIRECT, alpha


def test_linf_limit_index_matches_closed_form():
    rho = 0.5
    for seed in range(12):
        alpha = random_scales(seed, 4, 0.2, 1.2, log_uniform=False)
        sol = solve_flow(P, balanced_start(alpha, 4, 2), 2, "sam-linf", rho, save_times(400.0, 50))
        with precision("float64"):
            c = _classify(sol.beta, sol.valid, sol.failed, major=4, path=sol.path, fate=sol.fate)
        assert int(c.limit_coord) == theory.linf_limit_index(alpha, MU, rho), (seed, alpha)


@pytest.mark.parametrize("mode", ["discrete", "flow"])
def test_depth_padding_gives_the_unpadded_beta(mode):
    alpha = np.array([0.5, 0.4, 0.6, 0.3])
    small, padded = balanced_start(alpha, 4, 2), balanced_start(alpha, 4, 2, n_layers=4)
    assert padded.shape == (4, 4)
    if mode == "discrete":
        sched = record_schedule(300, 10)
        a = run_discrete(P, small, 2, "sam-l2", 1.0, 0.05, sched)
        b = run_discrete(P, padded, 2, "sam-l2", 1.0, 0.05, sched)
    else:
        taus = save_times(5.0, 20)
        a = solve_flow(P, small, 2, "sam-l2", 1.0, taus, formulation="linear")
        b = solve_flow(P, padded, 2, "sam-l2", 1.0, taus, formulation="linear")
    np.testing.assert_allclose(a.beta, b.beta, rtol=1e-12)
    np.testing.assert_allclose(a.tau, b.tau, rtol=1e-12)


def test_alpha_bounds_bracket_the_measured_regimes():
    lo, hi = theory.l2sam_l2_alpha_bounds(MU, 1.0)
    assert int(_classified("sam-l2", 0.9 * lo).regime) == COLLAPSE
    assert int(_classified("sam-l2", 1.1 * hi).regime) == DIRECT


def test_solver_failure_is_flagged_and_keeps_the_accepted_records():
    taus = save_times(5.0, 20)
    sol = solve_flow(P, balanced_start(0.5, 4, 2), 2, "sam-l2", 1.0, taus, max_steps=8)
    assert sol.failed and not sol.blowup
    assert 0 < sol.stop_tau < 5.0
    assert np.all(sol.valid == (taus <= sol.stop_tau))
    assert np.all(np.isfinite(sol.beta[sol.valid]))
    with precision("float64"):
        assert int(_classify(sol.beta, sol.valid, sol.failed, major=4).regime) == -1


def test_blowup_limit_is_read_at_the_event():
    alpha = np.array([0.9, 0.8, 0.7, 0.55])  # GD, L = 3: tau_j* = 1 / (alpha_j mu_j)
    sol = solve_flow(P, balanced_start(alpha, 4, 3), 3, "gd", None, save_times(5.0, 10))
    expected = int(np.argmin(theory.blowup_tau(alpha, MU, 3))) + 1
    assert sol.blowup and int(sol.path.lead) == expected
    with precision("float64"):
        c = _classify(sol.beta, sol.valid, sol.failed, major=4, path=sol.path, fate=sol.fate)
    assert int(c.limit_coord) == expected


def test_exact_ties_have_no_dominant_coordinate():
    beta = np.array([[1.0, 1.0, 1.0], [2.0, 2.0, 2.0], [2.0, 3.0, 2.5]])
    with precision("float64"):
        c = _classify(beta, major=3, fate=SETTLED)  # a run its fate decided
        assert np.asarray(c.dominant).tolist() == [0, 0, 2]
        assert int(c.first_amplified) == 2 and int(c.regime) == MINOR_END
        assert int(_classify(beta[:2], major=3, fate=SETTLED).regime) == 0  # no leader: all tied


def test_overflow_guard_ends_the_horizon_before_any_record_overflows():
    # GD at L = 2 grows like exp(mu_j tau): the guard stops it near beta ~ 1e153, at the
    # end of a long log-space step; records inside that step beyond it are not valid.
    sol = solve_flow(P, balanced_start(1.0, 4, 2), 2, "gd", None, save_times(200.0, 60))
    assert sol.blowup and not sol.failed and not sol.valid[-1]
    assert np.all(np.isfinite(np.abs(sol.beta[sol.valid]).sum(axis=1)))
    with precision("float64"):
        assert (
            int(
                _classify(
                    sol.beta, sol.valid, sol.failed, major=4, path=sol.path, fate=sol.fate
                ).regime
            )
            == DIRECT
        )


@pytest.mark.parametrize("depth", [2, 3])
def test_written_out_tsit5_is_diffrax_tsit5(depth):
    """samflow.flows.Tsit5 (stages written out) against diffrax's own Tsit5, vmapped
    over three balanced l2-SAM starts (at L = 2 a collapse, a sequential and a direct
    run; at L = 3 a blow-up), each stopped by a norm event as in samflow.flows: the same
    accepted and rejected steps and the same saved states (interpolated inside the steps
    by samflow.flows.Tsit5Interpolation against diffrax's own). Only the order of the
    sums differs, so states agree to rounding accumulated over a few dozen steps
    (1e-12 relative leaves a thousand ulps of room)."""
    import diffrax
    import jax.numpy as jnp
    import optimistix as optx

    from samflow.flows import Tsit5
    from samflow.rules import SAM_L2

    ts = jnp.asarray(save_times(6.0 if depth == 2 else 1.0, 20))
    mu = jnp.asarray(MU)

    def solve(solver, alpha, rho):
        def leaves(t, y, args, **kwargs):  # log max beta leaves (start - 16, 20)
            level = depth * jnp.max(y)
            return jnp.minimum(level - depth * jnp.log(alpha) + 16.0, 20.0 - level)

        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(SAM_L2.balanced.field),
            solver,
            ts[0],
            ts[-1],
            None,
            jnp.full(4, jnp.log(alpha)),
            (mu, jnp.asarray(depth), rho),
            saveat=diffrax.SaveAt(ts=ts),
            stepsize_controller=diffrax.PIDController(rtol=1e-8, atol=1e-10, norm=optx.max_norm),
            event=diffrax.Event(leaves),
            max_steps=10_000,
        )
        return sol.ys, sol.stats["num_steps"], sol.stats["num_accepted_steps"]

    with precision("float64"):
        alpha, rho = jnp.asarray([0.1, 0.3, 1.5]), jnp.asarray([1.0, 0.6, 0.2])
        ours = jax.jit(jax.vmap(lambda a, r: solve(Tsit5(), a, r)))(alpha, rho)
        theirs = jax.jit(jax.vmap(lambda a, r: solve(diffrax.Tsit5(), a, r)))(alpha, rho)
    ys, steps, accepted = map(np.asarray, ours)
    ref, ref_steps, ref_accepted = map(np.asarray, theirs)
    np.testing.assert_array_equal(steps, ref_steps)
    np.testing.assert_array_equal(accepted, ref_accepted)
    assert steps.sum() > 60  # enough steps to exercise the controller
    np.testing.assert_array_equal(np.isfinite(ys), np.isfinite(ref))  # inf after the event
    assert np.any(~np.isfinite(ys[:, -1]))  # an event ended a run
    finite = np.isfinite(ys)
    np.testing.assert_allclose(np.exp(ys[finite]), np.exp(ref[finite]), rtol=1e-12)


def test_two_saves_are_the_start_and_the_horizon():
    """``n_save = 2`` saves 0 and ``tau_max``: the log grid between them is empty, and
    the horizon must not shrink to the first log-spaced time (it once became 0.005 of
    tau_max, and the run stopped there). The save grid does not steer the solve
    (diffrax interpolates saves inside steps), so the stop and the regime equal those of
    a finer grid exactly."""
    import samflow

    assert list(samflow.Flow(tau_max=50.0, save=samflow.LogSpaced(1)).times()) == [0.0, 50.0]
    runs = [
        samflow.trajectory(
            "sam-l2",
            depth=2,
            mu=[1, 2, 3, 4],
            alpha=0.5,
            rho=1.0,
            runner=samflow.Flow(tau_max=50.0, save=samflow.LogSpaced(n - 1), rtol=1e-6, atol=1e-9),
        )
        for n in (2, 7)
    ]
    assert [float(r.tau[-1]) for r in runs] == [50.0, 50.0]
    assert runs[0].attrs["stop_tau"] == runs[1].attrs["stop_tau"] > 40
    assert int(runs[0].regime) == int(runs[1].regime)


def test_a_solver_object_runs_as_its_name():
    """``Flow(solver=...)`` takes a diffrax solver object as well as a name: the same
    solve, the same file attribute, and a key of its own."""
    import diffrax

    from samflow.sweeps.spec import SweepSpec

    kw = dict(depth=2, mu=[1.0, 2.0, 3.0], alpha=0.5, rho=1.0)
    named = samflow.Flow(tau_max=5.0, solver="dopri5", save=samflow.LogSpaced(9))
    given = samflow.Flow(tau_max=5.0, solver=diffrax.Dopri5(), save=samflow.LogSpaced(9))
    a = samflow.trajectory("sam-l2", runner=named, **kw)
    b = samflow.trajectory("sam-l2", runner=given, **kw)
    assert np.array_equal(a["beta"].values, b["beta"].values)
    assert a.attrs["solver"] == b.attrs["solver"] == "dopri5"
    grid = dict(depth=2, mu=[1.0, 2.0, 3.0], rho=1.0, axes={"alpha": [0.1, 1.0]})
    keys = {SweepSpec.from_inputs("sam-l2", runner=r, **grid).key() for r in (named, given)}
    assert len(keys) == 2
    with pytest.raises(samflow.InputError, match="a diffrax solver"):
        samflow.Flow(solver=3)


def test_an_overflowing_first_step_is_retried_shorter():
    """l2-SAM, L = 3, mu = (1, 2, 3, 4), rho = 2, alpha = 2.6e-4 failed at the solver's
    first step (stop_tau 0): diffeqsolve's first step of 0.01 overflowed (the field is
    ~1e4 there), and the NaN error stalled the PID controller
    (docs/theory/numerics.md#overflowing-steps). Now the step is retried shorter and the
    run reaches its horizon, where it agrees with an independent SciPy integration (DOP853,
    rtol 1e-11) of ds_j/dtau = mu_j u_j (1 - r_j)^2, r_j = rho mu_j u_j / N."""
    mu, rho, alpha, T = np.array([1.0, 2.0, 3.0, 4.0]), 2.0, 2.6e-4, 50.0
    ds = samflow.trajectory(
        "sam-l2", depth=3, mu=mu, alpha=alpha, rho=rho,
        runner=samflow.Flow(tau_max=T, save=samflow.LogSpaced(9)),
    )  # fmt: skip
    assert ds.attrs["regime_meaning"] != "failed" and ds.attrs["stop_tau"] == T

    def f(t, s):
        log_n = 0.5 * (np.log(3) + np.log(np.sum(mu**2 * np.exp(4 * s))))
        r = np.exp(np.log(rho * mu) + s - log_n)
        return mu * np.exp(s) * (1 - r) ** 2

    sol = solve_ivp(f, (0, T), np.full(4, np.log(alpha)), method="DOP853", rtol=1e-11, atol=1e-12)
    assert sol.success
    # log beta = 3 s, |s| <= 9: the engine's rtol 1e-8 gives ~1e-7 in s; the major sits
    # near the degenerate fixed point u = rho / sqrt(3), where errors do not grow. 1e-5
    # is 100x that and far below a wrong trajectory (s moves by O(1) over the run).
    np.testing.assert_allclose(np.log(ds["beta"].values[-1]) / 3, sol.y[:, -1], rtol=0, atol=1e-5)
