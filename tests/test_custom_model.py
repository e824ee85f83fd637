"""A user-written parametrisation and loss (examples/custom_model.py: ``beta = u^3 - v^3``
with the Huber loss) through trajectory (discrete and flow), sweep and fit, against a
NumPy float64 reference written here: the gradient by its hand-derived formula, GD and
l2-SAM steps by hand, the flow by SciPy. Nothing of samflow is used by the reference.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp
from tolerance import norm_rel

import samflow
from samflow import inputs, losses, parametrizations
from samflow.model import Problem
from samflow.precision import precision

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "custom_model.py"
_spec = importlib.util.spec_from_file_location("custom_model", EXAMPLE)
custom = importlib.util.module_from_spec(_spec)
sys.modules["custom_model"] = custom  # dataclasses look their module up there
_spec.loader.exec_module(custom)

X, Y, MODEL = custom.X, custom.Y, custom.MODEL
L, DELTA = MODEL.parametrization.power, MODEL.loss.delta


# ---- The reference: NumPy float64, derived by hand --------------------------------


def np_beta(theta):
    return theta[0] ** L - theta[1] ** L


def np_huber(r):
    """Value and derivative of the Huber loss at residuals ``r``."""
    inside = np.abs(r) <= DELTA
    value = np.where(inside, 0.5 * r * r, DELTA * (np.abs(r) - 0.5 * DELTA))
    return value, np.clip(r, -DELTA, DELTA)


def np_loss(theta):
    return np.mean(np_huber(X @ np_beta(theta) - Y)[0])


def np_grad(theta):
    """``dLoss/du_j = c_j L u_j^(L-1)``, ``dLoss/dv_j = -c_j L v_j^(L-1)`` with ``c =
    X^T l'(p) / n`` (chain rule through ``beta_j = u_j^L - v_j^L``)."""
    c = X.T @ np_huber(X @ np_beta(theta) - Y)[1] / len(Y)
    return np.stack([c * L * theta[0] ** (L - 1), -c * L * theta[1] ** (L - 1)])


def np_run(theta, method, rho, eta, steps):
    """``steps`` discrete steps; l2-SAM takes the gradient at ``theta + rho g / ||g||``."""
    out = [theta]
    for _ in range(steps):
        g = np_grad(theta)
        if method == "sam-l2":
            g = np_grad(theta + rho * g / np.linalg.norm(g))
        theta = theta - eta * g
        out.append(theta)
    return np.array(out)


THETA0 = np.full((2, 3), 0.5)
KW = dict(depth=2, data=(X, Y), parametrization=MODEL.parametrization, loss=MODEL.loss)


def test_gradient_and_loss_match_the_hand_derived_formula():
    """At a generic point (no Huber kink near), float64: a few roundings of O(1) terms,
    so 1e-13 of the norm is room for summation order and far below a wrong power or sign
    (O(1))."""
    theta = np.array([[0.7, -0.4, 1.1], [0.3, 0.9, -0.5]])
    with precision("float64"):
        g, aux = MODEL.grad_and_aux(
            jnp.asarray(theta), Problem(jnp.asarray(X), jnp.asarray(Y)), None
        )
    assert norm_rel(np.asarray(g), np_grad(theta)) < 1e-13
    assert abs(float(aux.loss) - np_loss(theta)) < 1e-13 * np_loss(theta)
    assert float(aux.lprime_abs) == 1.0  # not a margin loss: plain time


@pytest.mark.parametrize("method", ["gd", "sam-l2"])
def test_discrete_trajectory_matches_numpy_steps(method):
    """Eight steps recorded one by one. Each step repeats the same float64 arithmetic in
    another order; errors grow at most by the step's Lipschitz factor (1 + eta ||H||,
    ||H|| ~ 5 here), so 1e-12 of beta's norm over 8 steps holds with a margin of 100."""
    rho, eta, steps = 0.05, 0.05, 8
    ds = samflow.trajectory(
        method, alpha=0.5, rho=rho if method != "gd" else None,
        runner=samflow.Discrete(eta=eta, steps=steps, save=samflow.Every(1)), save_theta=True, **KW,
    )  # fmt: skip
    want = np_run(THETA0, method, rho, eta, steps)
    assert ds["step"].values.tolist() == list(range(steps + 1))
    assert norm_rel(ds["theta"].values, want) < 1e-12
    assert norm_rel(ds["beta"].values, np.array([np_beta(t) for t in want])) < 1e-12
    assert ds.attrs["parametrization"] == "signed-power" and ds.attrs["loss"] == "huber"
    assert "regime" not in ds  # not the product network with a margin loss
    assert int(ds.attrs["underflow_at_start"]) == 0  # beta(0) = 0 is exact at u = v


def test_flow_matches_scipy():
    """The l2-SAM flow ``dtheta/dt = -grad Loss(theta + rho g/||g||)`` to t = 6 against
    SciPy's DOP853 at rtol 1e-11: samflow's solver runs at rtol 1e-10, atol 1e-12, and
    the error of an adaptive solve accumulates to ~100x its local tolerance over the
    few hundred steps here, so 1e-7 of theta's norm is the bound (the field is smooth
    away from the Huber kinks, which this horizon does not reach)."""
    rho, times = 0.05, np.linspace(0.0, 6.0, 7)

    def field(t, w):
        theta = w.reshape(2, 3)
        g = np_grad(theta)
        return -np_grad(theta + rho * g / np.linalg.norm(g)).ravel()

    sol = solve_ivp(field, (0, 6.0), THETA0.ravel(), method="DOP853", t_eval=times,
                    rtol=1e-11, atol=1e-13)  # fmt: skip
    ds = samflow.trajectory(
        "sam-l2", alpha=0.5, rho=rho, save_theta=True,
        runner=samflow.Flow(save=samflow.At(tuple(times)), rtol=1e-10, atol=1e-12), **KW,
    )  # fmt: skip
    assert ds.attrs["flow_formulation"] == "linear" and int(ds.attrs["solver_failed"]) == 0
    assert norm_rel(ds["theta"].values, sol.y.T.reshape(-1, 2, 3)) < 1e-7


def test_sweep_and_fit_match_numpy_gd():
    """A sweep over alpha (GD) and :func:`samflow.fit` on the model's loss (l2-SAM, its
    gradient by JAX's autodiff of ``beta``), each against the NumPy run of its start
    (the same arithmetic as the discrete test: 1e-12)."""
    alphas, eta, steps = [0.2, 0.5, 1.0], 0.05, 40
    ds = samflow.sweep(
        "gd", axes={"alpha": alphas}, runner=samflow.Discrete(eta=eta, steps=steps,
        save=samflow.Every(10)), **KW,
    )  # fmt: skip
    assert ds.attrs["parametrization"] == "signed-power"
    for k, a in enumerate(alphas):
        want = np_run(np.full((2, 3), a), "gd", 0.0, eta, steps)[::10]
        got = ds["loss"].isel(alpha=k).values
        assert norm_rel(got, np.array([np_loss(t) for t in want])) < 1e-12
    fit = samflow.fit(
        MODEL.loss_fn(X, Y), THETA0, "sam-l2", rho=0.05,
        runner=samflow.Discrete(eta=eta, steps=steps, save=samflow.Every(10)), save_params=True,
        dtype="float64",
    )  # fmt: skip
    want = np_run(THETA0, "sam-l2", 0.05, eta, steps)[::10]
    assert norm_rel(np.asarray(fit.saved_params), want) < 1e-12
    assert norm_rel(np.asarray(fit.loss), np.array([np_loss(t) for t in want])) < 1e-12


def test_protocol_checks_and_the_example_runs(tmp_path):
    """The objects check themselves when made; a model refuses what is not one; the
    example script runs and prints its four results."""
    with pytest.raises(samflow.InputError, match="power"):
        custom.SignedPower(power=1)
    with pytest.raises(samflow.InputError, match="delta"):
        custom.Huber(delta=0.0)
    with pytest.raises(samflow.InputError, match="exactly 2 rows, got 3"):
        MODEL.check_theta(np.ones((3, 3)))
    with pytest.raises(samflow.InputError, match="depth must be 2"):
        samflow.trajectory("gd", alpha=0.5, runner=samflow.Discrete(0.1, 2), **{**KW, "depth": 3})
    # the command line's names, kept where no JAX is loaded, are the built-in objects'
    assert tuple(parametrizations.BUILT_IN) == inputs.PARAMETRIZATIONS
    assert tuple(losses.BUILT_IN) == inputs.LOSSES
    assert samflow.Model("u2-v2", "squared") == samflow.Model(
        parametrizations.U2_V2, losses.SQUARED
    )
    run = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, cwd=tmp_path, timeout=600
    )
    assert run.returncode == 0, run.stderr
    assert len(run.stdout.strip().splitlines()) == 4


def test_a_margin_loss_of_ones_own_runs_as_the_built_in_one():
    """The logistic loss written as a user's :class:`samflow.MarginLoss` (no declared
    closed forms, so the general step and the linear flow) on the paper's network, one
    point: the margin capabilities (rescaled time, the ascent direction without
    ``phi'``) and the regimes apply, and it runs as the built-in loss (which takes the
    balanced step and the closed-form flow) to rounding: 1e-10 of beta's norm over 300
    steps of O(1) growth, and the solver tolerance (rtol 1e-10) for the flow."""
    from dataclasses import dataclass

    import jax

    from samflow.regimes import NAMES

    UNRESOLVED = next(code for code, name in NAMES.items() if name == "unresolved")

    @dataclass(frozen=True)
    class MyLogistic(samflow.MarginLoss):
        name: str = "my-logistic"

        def phi(self, z):
            s = jax.nn.sigmoid(-z)
            return jax.nn.softplus(-z), -s, s * jax.nn.sigmoid(z)

    kw = dict(depth=2, mu=[1.0, 2.0], alpha=0.3, rho=0.1)
    for runner, tol in (
        (samflow.Discrete(eta=0.05, steps=300), 1e-10),
        (samflow.Flow(8.0, samflow.LogSpaced(19), rtol=1e-10, atol=1e-12), 1e-7),
    ):
        mine = samflow.trajectory("sam-l2", loss=MyLogistic(), runner=runner, **kw)
        built_in = samflow.trajectory("sam-l2", runner=runner, **kw)
        assert mine.attrs["loss"] == "my-logistic" and "regime" in mine
        assert norm_rel(mine["beta"].values, built_in["beta"].values) < tol
        assert norm_rel(mine["tau"].values, built_in["tau"].values) < tol
        # No closed forms, so no certificate decides the fate at the horizon: the label
        # is the built-in run's or "unresolved".
        assert int(mine["regime"]) in (UNRESOLVED, int(built_in["regime"]))
