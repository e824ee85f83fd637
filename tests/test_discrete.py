"""Discrete runs against the independent NumPy reference and optax's SAM."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import optax.contrib
import pytest
import reference

import samflow
from samflow.discrete import simulate
from samflow.init import balanced_start
from samflow.model import Problem, grad_and_aux, layer_mask, loss, single_point
from samflow.rules import METHODS, get_rule
from samflow.steps import step

RHO = {"gd": None, "sam-l2": 0.3, "sam-linf": 0.05, "usam": 0.4}
STEPS = 40
_simulate = jax.jit(simulate, static_argnames=("rule", "save_theta"))


def run_padded(problem, theta0, depth, method, rho, eta, record_steps, save_theta=False):
    """The pure discrete run from ``theta0`` ``[L_max, d]`` (rows past ``depth``: padding)."""
    with jax.enable_x64(True):
        traj = _simulate(
            jnp.asarray(theta0, jnp.float64),
            Problem(jnp.asarray(problem.X, jnp.float64), jnp.asarray(problem.y, jnp.float64)),
            depth,
            jnp.asarray(rho or 0.0, jnp.float64),
            jnp.asarray(eta, jnp.float64),
            jnp.asarray(record_steps, jnp.int64),
            rule=get_rule(method),
            save_theta=save_theta,
        )
        return jax.tree_util.tree_map(np.asarray, traj)


def three_points():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3, 4)) + np.array([0.5, 1.0, 1.5, 2.0])
    y = np.array([1.0, -1.0, 1.0])
    X[1] *= -1  # keep the data separable by mu-like directions
    return Problem(X, y)


def random_theta(rng, L, d=4):
    return rng.uniform(0.3, 1.2, size=(L, d)) * rng.choice([-1.0, 1.0], size=(L, d))


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("n_points", [1, 3])
def test_iterates_match_numpy_reference(method, n_points):
    rng = np.random.default_rng(1)
    problem = single_point([1.0, 2.0, 3.0, 4.0]) if n_points == 1 else three_points()
    X, y = np.asarray(problem.X), np.asarray(problem.y)
    schedule = samflow.Discrete(eta=0.05, steps=STEPS, save=samflow.Every(1)).times()
    for L in (1, 2, 3):
        W0 = random_theta(rng, L)
        # pad to L_max = 3 so all depths share one compiled program
        padded = np.concatenate([W0, np.ones((3 - L, 4))])
        traj = run_padded(problem, padded, L, method, RHO[method], 0.05, schedule, True)
        ref_W, ref_tau = reference.run(W0, X, y, method, RHO[method] or 0.0, 0.05, STEPS)
        err = np.max(np.abs(traj.theta[:, :L] - ref_W)) / np.max(np.abs(ref_W))
        assert err <= 1e-10, (method, L, err)
        assert np.all(traj.theta[:, L:] == 1.0)
        np.testing.assert_allclose(traj.tau, ref_tau, rtol=1e-10, atol=1e-14)
        np.testing.assert_allclose(traj.beta, np.prod(ref_W, axis=1), rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize(
    "method, n_points", [*((m, 1) for m in METHODS), ("sam-l2", 3), ("usam", 3)]
)
def test_public_trajectory_matches_numpy_reference(method, n_points):
    """samflow.trajectory (the engine's unpadded program) against the same reference."""
    W0 = random_theta(np.random.default_rng(3), 2)
    problem = single_point([1.0, 2.0, 3.0, 4.0]) if n_points == 1 else three_points()
    X, y = np.asarray(problem.X), np.asarray(problem.y)
    ds = samflow.trajectory(
        method,
        depth=2,
        **({"mu": X[0]} if n_points == 1 else {"data": (X, y)}),
        theta0=W0,
        rho=RHO[method],
        runner=samflow.Discrete(eta=0.05, save=samflow.At(tuple(range(STEPS + 1)))),
        save_theta=True,
    )
    ref_W, ref_tau = reference.run(W0, X, y, method, RHO[method] or 0.0, 0.05, STEPS)
    err = np.max(np.abs(ds["theta"].values - ref_W)) / np.max(np.abs(ref_W))
    assert err <= 1e-10, (method, err)
    np.testing.assert_allclose(ds["tau"].values, ref_tau, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(ds["beta"].values, np.prod(ref_W, axis=1), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(ds["theta_final"].values, ref_W[-1], rtol=1e-10, atol=1e-14)
    assert ds.attrs["failed_step"] == -1


def test_l2_sam_step_equals_optax_sam():
    rho, eta = 0.3, 0.05
    with jax.enable_x64(True):
        problem = single_point(jnp.array([1.0, 2.0, 3.0, 4.0]))
        theta = jnp.asarray(balanced_start(np.array([0.4, 0.7, 0.2, 0.5]), 4, 2))
        mask = layer_mask(2, 2)
        opt = optax.contrib.sam(
            optax.sgd(eta),
            optax.chain(optax.contrib.normalize(), optax.sgd(rho)),
            opaque_mode=True,
        )
        state = opt.init(theta)
        ours = theta
        rule = get_rule("sam-l2")

        def grad_fn(p):
            return grad_and_aux(p, problem, mask)

        for _ in range(25):
            grads = jax.grad(loss)(theta, problem)
            updates, state = opt.update(
                grads, state, theta, grad_fn=lambda p, _: jax.grad(loss)(p, problem)
            )
            theta = optax.apply_updates(theta, updates)
            ours, _ = step(ours, grad_fn, rule, rho, eta)
            np.testing.assert_allclose(ours, theta, rtol=1e-12, atol=1e-14)


def test_nan_is_reported_not_propagated_silently():
    problem = single_point([1.0, 2.0])
    theta0 = np.array([[1.0, np.nan]])  # the public API refuses it: the pure run reports it
    schedule = samflow.Discrete(eta=0.1, steps=10, save=samflow.Every(2)).times()
    traj = run_padded(problem, theta0, 1, "gd", None, 0.1, schedule)
    assert traj.failed_step == 0
    # overflow during the run: huge step sizes on a depth-3 net
    ds = samflow.trajectory(
        "usam",
        depth=3,
        mu=[1.0, 2.0],
        alpha=1.0,
        rho=1.0,  # 1e200 would overflow the start's perturbed point: failed at record 0
        runner=samflow.Discrete(eta=1e200, steps=20, save=samflow.Every(2)),
    )
    assert ds.attrs["failed_step"] > 0


def test_record_schedules():
    assert samflow.Discrete(steps=10, save=samflow.Every(3)).times().tolist() == [0, 3, 6, 9, 10]
    log = samflow.Discrete(steps=1000, save=samflow.LogSpaced(5)).times()
    assert log[0] == 0 and log[-1] == 1000 and np.all(np.diff(log) > 0)
