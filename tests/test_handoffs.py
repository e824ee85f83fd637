"""Hand-offs found from the dynamics, and labels that do not depend on how one looks.

References: the L = 2 l2-SAM balanced flow of docs/theory/balanced.md#balanced-l2-sam integrated by
SciPy (its own field, written here), GD's closed form, and the NumPy float64 iterates of
``tests/reference.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.integrate import solve_ivp
from scipy.optimize import brentq

import samflow
from samflow.regimes import DIRECT, RETURNED, SEQUENTIAL
from tests import reference


def _l2sam_l2_leaders(mu, alpha, rho, tau_max):
    """Leaders of the L = 2 balanced l2-SAM flow and the tau each took the lead, by
    SciPy: ``d log u_j/dtau = mu_j (1 - rho mu_j / N)``, ``N = sqrt(2 sum mu_k^2 u_k^2)``;
    ``log beta_j = 2 log u_j``; crossings of the top two refined by brentq."""
    mu = np.asarray(mu, float)

    def field(_, s):
        N = np.sqrt(2 * np.sum(mu**2 * np.exp(2 * s)))
        return mu * (1 - rho * mu / N)

    s0 = np.full(mu.size, np.log(alpha))
    sol = solve_ivp(field, (0, tau_max), s0, rtol=1e-12, atol=1e-12, dense_output=True)
    grid = np.linspace(0, tau_max, 20001)[1:]
    lead = np.argmax(sol.sol(grid), axis=0)
    leaders, taus = [int(lead[0]) + 1], [0.0]
    for k in np.flatnonzero(np.diff(lead)) + 1:
        a, b = lead[k - 1], lead[k]
        gap = lambda t, a=a, b=b: sol.sol(t)[b] - sol.sol(t)[a]  # noqa: E731
        leaders.append(int(b) + 1)
        taus.append(brentq(gap, grid[k - 1], grid[k], xtol=1e-14))
    return leaders, np.array(taus)


def _path(ds):
    n = int(ds["n_leaders"])
    return ds["leader_path"].values[:n].tolist(), ds["handoff_tau"].values[:n]


def test_flow_handoff_times_match_an_independent_integration():
    """mu = (1, 2, 3, 4), alpha = 0.5, rho = 1: leaders 2, 3, 4
    (docs/theory/balanced.md#direct-edge-depth-2).

    Tolerance: the hand-off is placed on the cubic Hermite interpolant of the log-ratio
    over one accepted step (docs/theory/regimes.md#definitions): measured 5.8e-7 in tau here at rtol
    1e-8 (the linear crossing of before: 8.6e-4); 3e-5 / slope is the bound of
    docs/theory/regimes.md#definitions, about 3e-5 here (slopes about 1 per unit tau).
    """
    mu, alpha, rho = (1.0, 2.0, 3.0, 4.0), 0.5, 1.0
    want_leaders, want_tau = _l2sam_l2_leaders(mu, alpha, rho, 10.0)
    # Few saves on purpose: the hand-offs do not come from the records.
    ds = samflow.trajectory(
        "sam-l2",
        depth=2,
        mu=mu,
        alpha=alpha,
        rho=rho,
        runner=samflow.Flow(tau_max=10, save=samflow.LogSpaced(4)),
    )
    leaders, taus = _path(ds)
    assert leaders == want_leaders == [2, 3, 4]
    np.testing.assert_allclose(taus, want_tau, atol=3e-5)
    assert int(ds["regime"]) == SEQUENTIAL


def _l2sam_leaders_any_depth(mu, alpha, rho, L, tau_max):
    """Leaders, hand-off times and the log-ratio's slope at each hand-off of the
    balanced l2-SAM flow at depth L, by SciPy (written here from
    docs/theory/flows.md#log-space-form): ``s = log u``, ``ds_j/dtau = mu_j u_j^(L-2) (1 -
    r_j)^(L-1)``, ``r_j = rho mu_j u_j^(L-2) / N``, ``N = sqrt(L sum_k mu_k^2 u_k^(2L-2))`` (a
    log-sum-exp), i.e. ``du_j/dtau = mu_j w~_j^(L-1)`` with ``w~_j = u_j - rho mu_j u_j^(L-1) / N``;
    ``log|beta_j| = L s_j``. DOP853 at rtol 1e-12, atol 1e-14 (s is O(1)) with dense
    output, stopped where samflow's blow-up edge ``log max beta = L/(L-2) R`` is
    reached; leaders on a fine grid, each crossing refined by brentq on the dense
    output; the first leader from the rates at tau = 0 (a tied start)."""
    mu = np.asarray(mu, float)

    def field(_, s):
        log_n = 0.5 * np.log(L) + np.log(np.sqrt(np.sum(mu**2 * np.exp((2 * L - 2) * s))))
        r = rho * mu * np.exp((L - 2) * s - log_n)
        return mu * np.exp((L - 2) * s) * (1 - r) ** (L - 1)

    events = None
    if L >= 3:
        edge = L / (L - 2) * 0.45 * -np.log(np.finfo(np.float64).eps)

        def blowup(_, s):
            return L * np.max(s) - edge

        blowup.terminal = True
        events = blowup
    s0 = np.full(mu.size, np.log(alpha))
    sol = solve_ivp(
        field, (0, tau_max), s0, method="DOP853", rtol=1e-12, atol=1e-14,
        dense_output=True, events=events,
    )  # fmt: skip
    assert sol.success, sol.message
    end = sol.t[-1]
    grid = np.concatenate([np.geomspace(1e-9, 1e-3, 400) * end, np.linspace(1e-3, 1, 40001) * end])
    lead = np.argmax(sol.sol(grid), axis=0)
    leaders, taus, slopes = [int(np.argmax(field(0, s0))) + 1], [0.0], [np.inf]
    assert lead[0] + 1 == leaders[0]
    for k in np.flatnonzero(np.diff(lead)) + 1:
        a, b = lead[k - 1], lead[k]
        gap = lambda t, a=a, b=b: sol.sol(t)[b] - sol.sol(t)[a]  # noqa: E731
        t = brentq(gap, grid[k - 1], grid[k], xtol=1e-15, rtol=1e-15)
        rate = field(t, sol.sol(t))
        leaders.append(int(b) + 1)
        taus.append(t)
        slopes.append(L * abs(rate[b] - rate[a]))  # d log(beta_b / beta_a) / dtau
    return leaders, np.array(taus), np.array(slopes)


# 0.999 x the exact edge of docs/theory/balanced.md#direct-edge-depth-2 at rho 0.1
EDGE_L2 = 0.999 * 7.0 / np.sqrt(60.0) * 0.1


@pytest.mark.parametrize(
    "L, alpha, rho, tau_max",
    [
        (2, 0.5, 1.0, 10.0),
        (2, EDGE_L2, 0.1, 1.0),  # the lead passes at tau 1.2e-3, inside the first step
        (3, 0.05, 0.1, 200.0),  # issue 29's shallow crossings (slopes 0.42, 0.25, 0.019)
        (3, 0.0398, 0.1, 200.0),
        (4, 0.1, 0.1, 200.0),
        (3, 2e-3, 0.05, 2000.0),  # 4 -> 3 -> 4, the last hand-off at tau 270.8
    ],
)
def test_flow_handoff_times_hold_their_bound_at_every_depth(L, alpha, rho, tau_max):
    """Every hand-off time against the independent SciPy integration above, mu = (1, 2,
    3, 4), at L = 2, 3, 4, including shallow crossings (the log-ratio's slope down to
    0.019 per unit tau) and a hand-off inside the first step of a tied start.

    Tolerance: a crossing is placed on the cubic Hermite interpolant of the log-ratio ``D =
    log|beta_b / beta_a|`` over one accepted step (docs/theory/regimes.md#definitions), so its error
    is the error of ``D`` there (interpolation and the solver's own, rtol 1e-8) divided by the slope
    ``|dD/dtau|``. Measured: that error of ``D`` is at most 5e-6 away from a blow-up and 1.9e-5 at
    the last case's second hand-off, 0.9 before its blow-up where the states are large (hand-offs
    off by 5.8e-7 .. 1.1e-4 in tau; the linear crossings of before were off by up to 4.4e-2); the
    bound of docs/theory/regimes.md#definitions is 3e-5 / slope, floored at 1e-6 (a steep crossing,
    to the solver's resolution)."""
    mu = (1.0, 2.0, 3.0, 4.0)
    want_leaders, want_tau, slope = _l2sam_leaders_any_depth(mu, alpha, rho, L, tau_max)
    ds = samflow.trajectory(
        "sam-l2", depth=L, mu=mu, alpha=alpha, rho=rho,
        runner=samflow.Flow(tau_max=tau_max, save=samflow.LogSpaced(4)),
    )  # fmt: skip
    leaders, taus = _path(ds)
    assert leaders == want_leaders
    bound = np.maximum(3e-5 / slope, 1e-6)
    err = np.abs(taus - want_tau)
    assert np.all(err <= bound), (err, bound, taus, want_tau)


def test_gd_handoffs_skip_a_coordinate_as_the_closed_form_does():
    """GD, L = 2, alpha = (3, 1, 0.5), mu = (1, 2, 3): log beta_j = 2 log alpha_j +
    2 mu_j tau are lines; 3 overtakes 1 at log(6)/2 before 2 does (log 3), so 2 never
    leads. The interpolation is exact for lines: rounding-level tolerance."""
    ds = samflow.trajectory(
        "gd",
        depth=2,
        mu=(1.0, 2.0, 3.0),
        alpha_per_coord=(3.0, 1.0, 0.5),
        runner=samflow.Flow(tau_max=5, save=samflow.LogSpaced(2)),
    )
    leaders, taus = _path(ds)
    assert leaders == [1, 3]
    np.testing.assert_allclose(taus, [0.0, np.log(6) / 2], rtol=1e-9)


def test_discrete_handoffs_match_the_numpy_iterates():
    """Every step's leader of the float64 NumPy reference, against a run recorded only
    at its end: the same leaders; each hand-off at the very step after which the new
    leader leads (the engine checks after every step), with that step's tau to
    rounding."""
    mu, alpha, rho, eta, steps = np.array([1.0, 2.0, 3.0, 4.0]), 0.5, 1.0, 0.05, 600
    W, taus = reference.run(np.full((2, 4), alpha), mu[None], np.ones(1), "sam-l2", rho, eta, steps)
    lead = np.argmax(np.abs(W.prod(axis=1)), axis=1) + 1
    at = [k for k in range(2, steps + 1) if lead[k] != lead[k - 1]]  # step 0 is tied
    ds = samflow.trajectory(
        "sam-l2",
        depth=2,
        mu=mu,
        alpha=alpha,
        rho=rho,
        runner=samflow.Discrete(eta=eta, steps=steps, save=samflow.At((0, steps))),
    )
    n = int(ds["n_leaders"])
    assert ds["leader_path"].values[:n].tolist() == [lead[1], *lead[at]]
    seen = ds["handoff_step"].values[:n]
    want = np.array([1, *at])
    np.testing.assert_array_equal(seen, want)
    np.testing.assert_allclose(ds["handoff_tau"].values[:n], taus[seen], rtol=1e-12)


def test_the_issue_examples_keep_their_label_whatever_the_save_grid():
    """Issue 16: L = 3, mu = (0.3, 1, 1.5, 2.5, 4), alpha 0.02, rho 3 was direct with
    60 saves and sequential with 400 or 3000; the path is 5 -> 4 -> 5 at every grid."""
    got = set()
    for n_save in (60, 400, 3000):
        ds = samflow.trajectory(
            "sam-l2",
            depth=3,
            mu=[0.3, 1, 1.5, 2.5, 4],
            alpha=0.02,
            rho=3.0,
            runner=samflow.Flow(tau_max=200, save=samflow.LogSpaced(n_save - 1)),
        )
        leaders, taus = _path(ds)
        got.add((int(ds["regime"]), tuple(leaders), tuple(np.round(taus, 12))))
    assert len(got) == 1
    regime, leaders, _ = got.pop()
    assert regime == RETURNED and leaders == (5, 4, 5)


@pytest.mark.parametrize("method", ["sam-l2", "gd"])
def test_a_major_in_first_place_is_direct(method):
    """Issue 16: mu = (4, 3, 2, 1) with coordinate 1 leading throughout was sequential."""
    ds = samflow.trajectory(
        method,
        depth=2,
        mu=[4.0, 3.0, 2.0, 1.0],
        alpha=1.5,
        rho=1.0 if method == "sam-l2" else None,
        runner=samflow.Flow(tau_max=20),
    )
    assert int(ds["regime"]) == DIRECT and int(ds["limit_coord"]) == 1
    assert _path(ds)[0] == [1]


def test_a_tied_major_is_refused():
    with pytest.raises(samflow.InputError, match="tied"):
        samflow.trajectory("gd", depth=2, mu=[1, 2, 4, 4], alpha=1.0, runner=samflow.Flow())


GRID = {"alpha": [0.05, 0.2, 0.5, 1.0, 3.0], "depth": [2, 3, 4]}
MU = np.array([1.0, 2.0, 3.0, 4.0])
PERM = np.array([2, 0, 3, 1])  # mu' = mu[PERM]: new coordinate i is old PERM[i]


def _labels(ds):
    return {k: ds[k].values for k in ("regime", "limit_coord", "n_leaders", "leader_path")}


def _relabelled(path):
    """An old leader path in the permuted coordinates (0 stays unused)."""
    new_of_old = np.argsort(PERM) + 1
    return np.where(path > 0, new_of_old[np.maximum(path, 1) - 1], 0)


@pytest.mark.parametrize(
    "runner, finer",
    [
        (
            samflow.Flow(tau_max=20, save=samflow.LogSpaced(39)),
            samflow.Flow(tau_max=20, save=samflow.LogSpaced(399)),
        ),
        (
            samflow.Discrete(eta=0.05, steps=2000, save=samflow.Every(200)),
            samflow.Discrete(eta=0.05, steps=2000, save=samflow.Every(20)),
        ),
    ],
    ids=["flow", "discrete"],
)
def test_labels_do_not_move_with_the_records_or_the_order_of_mu(runner, finer):
    """Over alpha x L = 2, 3, 4 (l2-SAM, rho = 1): every label and leader path is the
    same with 10x the records, and follows a permutation of mu."""

    def run(runner, mu):
        return samflow.sweep("sam-l2", depth=4, mu=mu, axes=GRID, rho=1.0, runner=runner)

    base = run(runner, MU)
    # The grid is not trivial. Discrete runs below the collapse edge fall to the collapse
    # event but no collapse certificate of the map covers eta = 0.05 (or L >= 3), so they
    # are unresolved (docs/theory/regimes.md#collapse-certificates): a decided label and
    # unresolved runs there, three labels for the flow.
    assert len(np.unique(base["regime"].values)) >= (3 if runner.mode == "flow" else 2)
    fine = run(finer, MU)
    for name, value in _labels(base).items():
        np.testing.assert_array_equal(_labels(fine)[name], value, err_msg=name)
    np.testing.assert_array_equal(fine["handoff_tau"].values, base["handoff_tau"].values)
    permuted = _labels(run(runner, MU[PERM]))
    for name in ("regime", "n_leaders"):
        np.testing.assert_array_equal(permuted[name], base[name].values, err_msg=name)
    np.testing.assert_array_equal(permuted["leader_path"], _relabelled(base["leader_path"].values))
    limit = base["limit_coord"].values
    np.testing.assert_array_equal(
        permuted["limit_coord"], np.where(limit > 0, _relabelled(limit), limit)
    )


def test_the_overflow_guard_stop_is_where_it_stopped():
    """GD, L = 2, alpha = 1: beta_4 = exp(8 tau) meets the guard log beta = log(max)/2
    at tau = 354.89/8 = 44.36, inside a log-space step that runs to the horizon 50.
    Tolerance: the crossing is placed linearly in log max|beta|, which is exactly
    linear here, so what is left is the solver's own error (rtol 1e-8): 1e-7."""
    ds = samflow.trajectory("gd", depth=2, mu=MU, alpha=1.0, runner=samflow.Flow(tau_max=50))
    want = 0.5 * np.log(np.finfo(np.float64).max) / 8
    assert ds.attrs["overflow_guard_hit"] and not ds.attrs["solver_failed"]
    np.testing.assert_allclose(ds.attrs["stop_tau"], want, rtol=1e-7)
    reached = ds["reached"].values.astype(bool)
    np.testing.assert_array_equal(reached, ds["tau"].values <= want)
    assert np.all(np.isfinite(ds["beta"].values[reached])) and np.all(
        np.isnan(ds["beta"].values[~reached])
    )
    assert int(ds["regime"]) == DIRECT


@pytest.mark.parametrize("alpha", [300.0, 1000.0])
def test_large_alpha_at_depth_3_is_a_blowup_not_a_failure(alpha):
    """GD, L = 3: tau_j* = 1 / (alpha mu_j) (docs/theory/balanced.md#balanced-gd), 8.3e-4 at alpha
    300, before the first save time. Tolerance 1e-4 relative: the stop is where the level
    crosses the blow-up edge, e^-16 short of tau* in units of the field's scale."""
    ds = samflow.trajectory("gd", depth=3, mu=MU, alpha=alpha, runner=samflow.Flow(tau_max=50))
    assert not ds.attrs["solver_failed"] and ds.attrs["blowup"]
    np.testing.assert_allclose(ds.attrs["blowup_tau"], 1 / (alpha * MU[-1]), rtol=1e-4)
    assert int(ds["regime"]) == DIRECT and int(ds["limit_coord"]) == 4


@pytest.mark.parametrize("mode", ["flow", "discrete"])
def test_an_underflowed_start_is_failed_and_flagged(mode):
    """Depth 8, alpha 1e-8: beta(0) = 1e-64 is 0 in float32, not in float64."""
    runner = samflow.Flow(tau_max=1) if mode == "flow" else samflow.Discrete(steps=10)
    kw = dict(depth=8, mu=MU, alpha=1e-8, rho=1.0, runner=runner)
    ds = samflow.trajectory("sam-l2", dtype="float32", **kw)
    assert int(ds["regime"]) == -1 and ds.attrs["underflow_at_start"]
    ok = samflow.trajectory("sam-l2", dtype="float64", **kw)
    assert not ok.attrs["underflow_at_start"]
