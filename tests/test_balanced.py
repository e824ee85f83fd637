"""The balanced step (samflow.balanced): the same numbers as the general step, chosen
automatically, recorded in the files, and one step against a NumPy derivation."""

from dataclasses import replace

import numpy as np
import pytest

import samflow
from samflow.balanced import applies, equal_layers
from samflow.engine import run_points, step_path
from samflow.model import Model
from samflow.rules import GD, RANDOM_L2, SAM_L2, SAM_LINF, USAM, PerturbationRule
from samflow.runners import Discrete
from samflow.sweeps.spec import SweepSpec

RULES = (GD, SAM_L2, SAM_LINF, USAM)
# Both paths round differently (the l2 norm sums L copies as L times one sum; at L >= 5
# the general step multiplies its exclusive products in another order): each step errs
# by a few float64 eps, and over 400 steps the differences measured at most 1e-14 of
# each value's scale. 1e-12 is the bound the balanced step promises. (Each case compiles
# two programs: few steps and few cases keep the file cheap.)
RTOL = 1e-12


def both_paths(spec: SweepSpec) -> tuple[dict, dict]:
    """Every grid point of ``spec`` through the general and the balanced step."""
    setup = spec.setup(sharded=False)
    points = spec.points(np.arange(spec.size))
    general = run_points(replace(setup, step_path="general"), points, spec.times())
    balanced = run_points(replace(setup, step_path="balanced"), points, spec.times())
    return general, balanced


def assert_same(general: dict, balanced: dict) -> None:
    assert general.keys() == balanced.keys()
    for name, a in general.items():
        b = balanced[name]
        if a.dtype.kind != "f":  # regimes, leaders, steps: identical
            np.testing.assert_array_equal(a, b, err_msg=name)
            continue
        np.testing.assert_array_equal(np.isfinite(a), np.isfinite(b), err_msg=name)
        ok = np.isfinite(a)
        # Relative to each variable's largest magnitude: entries that pass near 0 (a
        # coordinate of beta crossing zero) carry the absolute error of their scale.
        scale = np.max(np.abs(a[ok]), initial=0.0)
        np.testing.assert_allclose(b[ok], a[ok], rtol=RTOL, atol=RTOL * scale, err_msg=name)


def spec_of(rule, depth, axes, **kw) -> SweepSpec:
    rho = {} if rule is GD or "rho" in axes else {"rho": 0.7}
    return SweepSpec.from_inputs(
        rule,
        depth=depth,
        runner=Discrete(eta=0.05, steps=200, save=samflow.Every(20)),
        axes=axes,
        save_trajectories=True,
        **{"mu": [1.0, 2.0, 3.0, 4.0], **rho, **kw},
    )


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
def test_same_numbers_padded_depths(rule):
    # One program over depths 1, 2, 3, 5 padded to 5 rows: every depth, the padding rows
    # and the per-point powers of the balanced step at once.
    spec = spec_of(rule, 5, {"depth": [1, 2, 3, 5], "alpha": [0.3, 1.4]})
    assert spec.has_padding
    general, balanced = both_paths(spec)
    assert_same(general, balanced)
    assert np.all(general["failed_step"] == -1)


@pytest.mark.parametrize("rule", (SAM_L2, USAM), ids=lambda r: r.name)
def test_same_numbers_static_depth(rule):
    # No padding (a static depth: no mask, the static powers), per-coordinate alphas;
    # the ascent from the ascent direction (l2) and from the true gradient (USAM).
    spec = spec_of(rule, 3, {"alpha_1": [0.2, 0.9], "alpha_3": [0.5, 1.3]})
    assert not spec.has_padding
    assert_same(*both_paths(spec))


def test_same_numbers_several_points():
    # n > 1 points (no rescaling, the true gradient for the ascent): layers stay equal too.
    X = np.array([[1.0, 0.5, -0.3], [0.2, -1.0, 0.8], [-0.4, 0.3, 1.1]])
    y = np.array([1.0, -1.0, 1.0])
    spec = SweepSpec.from_inputs(
        SAM_L2,
        depth=2,
        data=(X, y),
        rho=0.3,
        runner=Discrete(eta=0.1, steps=200, save=samflow.Every(20)),
        axes={"alpha": [0.2, 0.8]},
        save_trajectories=True,
    )
    assert_same(*both_paths(spec))


def test_one_step_against_numpy():
    # One l2-SAM step of L = 3 equal layers, derived by hand (module docstring):
    # w~ = u + rho eps, eps = -x u^2 / (sqrt(3) ||x u^2||), u <- u + eta sigmoid(-z~) x w~^2.
    mu, u, rho, eta = np.array([1.0, 2.0, 3.0]), np.array([0.4, 0.7, 0.2]), 0.3, 0.1
    ascent = -mu * u**2
    w = u + rho * ascent / (np.sqrt(3) * np.linalg.norm(ascent))
    sig = 1 / (1 + np.exp(mu @ w**3))
    want = u + eta * sig * mu * w**2
    t = samflow.trajectory(
        "sam-l2",
        depth=3,
        mu=mu.tolist(),
        alpha_per_coord=u.tolist(),
        rho=rho,
        runner=Discrete(eta=eta, steps=1),
    )
    assert t.attrs["step_path"] == "balanced"
    np.testing.assert_allclose(t.theta_final.values, np.tile(want, (3, 1)), rtol=1e-14)
    np.testing.assert_allclose(t.tau.values, [0.0, eta * sig], rtol=1e-14)


def test_choice_and_attribute():
    # Shapes of test_one_step_against_numpy's trajectory: its programs serve these.
    one = {"depth": 3, "mu": [1.0, 2.0, 3.0], "rho": 0.3, "runner": Discrete(eta=0.1, steps=1)}
    # Unequal layers: the general step, said in the file.
    theta0 = np.array([[0.5, 0.6, 0.2], [0.4, 0.6, 0.2], [0.5, 0.6, 0.2]])
    assert samflow.trajectory("sam-l2", theta0=theta0, **one).attrs["step_path"] == "general"
    # A given theta0 whose layers are equal is balanced.
    theta0 = np.tile([0.5, 0.6, 0.2], (3, 1))
    assert samflow.trajectory("sam-l2", theta0=theta0, **one).attrs["step_path"] == "balanced"
    # Sweeps start every point with equal layers: balanced for the built-in rules.
    runner = Discrete(eta=0.05, steps=40)
    for rule in RULES:
        rho = None if rule is GD else 0.5
        spec = SweepSpec.from_inputs(rule, depth=2, mu=[1.0], rho=rho, runner=runner)
        assert spec.step_path == "balanced"
    # A rule of yours without layers_alike, and a random rule: general.
    mine = PerturbationRule("mine", SAM_L2.direction, True)
    spec = SweepSpec.from_inputs(mine, depth=2, mu=[1.0], rho=0.5, runner=runner)
    assert spec.step_path == "general"
    assert not applies("discrete", RANDOM_L2, np.ones((1, 2, 2)), np.array([2]))
    # Another loss or parametrisation: the balanced step is written for the paper's model.
    for model in ({"loss": "exponential"}, {"parametrization": "uv", "depth": 2}):
        spec = SweepSpec.from_inputs(
            SAM_L2, **{"depth": 2, **model}, mu=[1.0], rho=0.5, runner=runner
        )
        assert spec.step_path == "general"
    assert not applies("discrete", SAM_L2, np.ones((1, 2, 2)), np.array([2]), Model(loss="squared"))
    # Stochastic steps (minibatches, m-sharpness) step every layer.
    data = (np.array([[1.0, 2.0], [2.0, 1.0]]), np.array([1.0, 1.0]))
    for extra in ({"batch": 1}, {"m": 1}):
        noisy = Discrete(eta=0.05, steps=40, **extra)
        spec = SweepSpec.from_inputs(SAM_L2, depth=2, data=data, rho=0.5, runner=noisy)
        assert spec.step_path == "general"
        t = samflow.trajectory("sam-l2", depth=2, data=data, alpha=0.5, rho=0.5, runner=noisy)
        assert t.attrs["step_path"] == "general"
    # Flows have no step.
    flow = SweepSpec.from_inputs(
        "sam-l2", depth=2, mu=[1.0], rho=0.5, runner=samflow.Flow(tau_max=1.0)
    )
    assert flow.step_path is None
    assert not applies("flow", SAM_L2, np.ones((1, 2, 2)), np.array([2]))


def test_equal_layers_and_forcing():
    theta0 = np.array([[[0.5, 0.2], [0.5, 0.2], [1.0, 1.0]], [[0.3, 0.1], [1.0, 1.0], [1.0, 1.0]]])
    assert equal_layers(theta0, np.array([2, 1]))
    assert not equal_layers(theta0, np.array([3, 1]))  # a real row of ones differs
    assert not equal_layers(theta0 * [[[1], [1.01], [1]]], np.array([2, 1]))
    spec = spec_of(SAM_L2, 2, {"alpha": [0.5]})
    points = spec.points(np.arange(1))
    setup = spec.setup(sharded=False)
    assert step_path(setup, points) == "balanced"
    assert step_path(replace(setup, step_path="general"), points) == "general"
    unequal = points._replace(theta0=points.theta0 * np.array([1.0, 2.0])[None, :, None])
    assert step_path(setup, unequal) == "general"
    with pytest.raises(ValueError, match="balanced step does not apply"):
        step_path(replace(setup, step_path="balanced"), unequal)


def test_layers_alike_is_checked():
    with pytest.raises(samflow.InputError, match="layers_alike"):
        PerturbationRule("bad", SAM_L2.direction, True, layers_alike=3)
    with pytest.raises(samflow.InputError, match="deterministic rule with a direction"):
        PerturbationRule("bad", None, True, layers_alike=SAM_L2.layers_alike)
