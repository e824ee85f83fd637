"""Numerical failure is reported per point, never classified: overflow, NaN, stalls."""

import numpy as np

import samflow
from samflow.regimes import (
    DIRECT,
    FAILED,
    LIMIT_FAILED,
    LIMIT_STALLED,
    UNRESOLVED,
    finish,
    record_path,
    start,
    track,
)

MU = [1.0, 2.0, 3.0, 4.0]


def test_beta_overflow_with_finite_layers_fails_at_its_step():
    """Each layer 1e80 is finite; their product at depth 4 (1e320) overflows float64."""
    t = samflow.trajectory(
        "gd", depth=4, mu=[1.0, 2.0], alpha=1e80, runner=samflow.Discrete(0.1, 10)
    )
    assert int(t["regime"]) == FAILED
    assert t.attrs["failed_step"] == 0  # the step where it failed, never -1 ("none")
    assert int(t["limit_coord"]) == LIMIT_FAILED


def test_overflow_during_the_run_names_the_step():
    t = samflow.trajectory(
        "gd",
        depth=3,
        mu=[1.0, 2.0],
        alpha=1.0,
        runner=samflow.Discrete(1e150, 40, save=samflow.Every(1)),
    )
    assert int(t["regime"]) == FAILED and t.attrs["failed_step"] > 0
    step = t.attrs["failed_step"]
    beta = t["beta"].values
    assert np.all(np.isfinite(beta[:step])) and not np.all(np.isfinite(beta[step]))


def test_a_loss_that_underflows_is_a_stall_not_a_finite_limit():
    """alpha = 30 at L = 2: the margin is ~3e4, exp(-z) underflows to 0 and so does the
    gradient; the float64 iterates stop moving, which is no convergence to a finite limit.
    l2-SAM's start is tied and inside the take-over region, so the exact map's first step
    puts the major ahead for good: direct, limit the major
    (docs/theory/regimes.md#takeover-certificate). So does linf-SAM's: every coordinate
    above rho, its excess grows by 1 + h mu_j a step (docs/theory/regimes.md#linf-sam-
    discrete-step). With one coordinate below rho that the step may throw out (eta mu_4 =
    4 > 2) no certificate holds: unresolved, and said to have stalled."""
    cases = (
        ("sam-l2", {"alpha": 30.0}, 0.1, DIRECT, 4),
        ("sam-linf", {"alpha": 30.0}, 0.1, DIRECT, 4),
        ("sam-linf", {"alpha_per_coord": [30.0, 30.0, 30.0, 0.5]}, 1.0, UNRESOLVED, LIMIT_STALLED),
    )
    for method, init, eta, regime, limit in cases:
        t = samflow.trajectory(
            method, depth=2, mu=MU, rho=1.0, runner=samflow.Discrete(eta, 100), **init
        )
        assert t["loss"].values[-1] == 0.0, method
        beta = t["beta"].values
        assert np.all(beta[-1] == beta[0]), method  # stood still
        assert int(t["n_leaders"]) == 0, method
        assert int(t["regime"]) == regime, method
        assert int(t["limit_coord"]) == limit, method


def test_overflow_guard_never_reads_as_collapse():
    t = samflow.trajectory(
        "sam-l2", depth=2, mu=MU, alpha=0.5, rho=1.0, runner=samflow.Flow(tau_max=1e308)
    )
    assert t.attrs["overflow_guard_hit"] == 1 and t.attrs["collapsed_to_zero"] == 0
    assert int(t["limit_coord"]) == 4  # the major coordinate leads at the guard
    assert t.attrs["regime_meaning"] != "collapse"


def test_a_nan_inside_the_horizon_is_never_classified():
    """Records 0..3 of a direct-looking run, record 2 NaN: FAILED, whatever the others say."""
    beta = np.array([[1.0, 1.0], [1.0, 2.0], [np.nan, np.nan], [1.0, 4.0]])
    loss = np.array([0.7, 0.5, np.nan, 0.1])
    state, first = start(beta[0], loss[0])
    records = [first]
    for b, lo in zip(beta[1:], loss[1:], strict=True):
        state, rec = track(state, b, lo)
        records.append(rec)
    stacked = {k: np.stack([r[k] for r in records]) for k in records[0]}
    path = record_path(stacked["dominant"], np.arange(4.0), major=2)
    out = finish(state, stacked, np.arange(4.0), path=path, major=2)
    assert int(out["regime"]) == FAILED and int(out["limit_coord"]) == LIMIT_FAILED


def test_an_overflow_at_the_perturbed_point_fails_that_point_only():
    """rho = 1e200 puts the perturbed beta (~1e400) beyond float64 (1e30: float32): its
    gradient underflows to zero, which would pass for a stall; the run is failed at the
    record that sees it (here record 0), and in a sweep only the points with that rho."""
    runner = samflow.Discrete(eta=0.01, steps=20, save=samflow.Every(2))
    for dtype, rho in (("float64", 1e200), ("float32", 1e30)):
        t = samflow.trajectory(
            "sam-l2", depth=2, mu=MU, alpha=0.5, rho=rho, runner=runner, dtype=dtype
        )
        assert int(t["regime"]) == FAILED, dtype
        assert t.attrs["failed_step"] == 0, dtype  # the start's perturbed point overflows
    ds = samflow.sweep(
        "sam-l2", depth=2, mu=MU, alpha=0.5, axes={"rho": [0.5, 1e200]}, runner=runner
    )
    assert ds["regime"].values[0] != FAILED and ds["regime"].values[1] == FAILED
