"""The record loop (``samflow.loop``), ``fit``'s dtype and parameter history, random
rules and the checks on what a rule returns.

References: plain Python loops, a NumPy float64 loop of GD, and the closed form of one
step on ``||p||^2 / 2`` (the step moves ``p`` by exactly ``eta rho`` off the GD step).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import samflow
from samflow._fit import fit
from samflow.errors import InputError
from samflow.loop import record_loop, take_steps
from samflow.rules import RANDOM_L2, PerturbationRule
from samflow.runners import Discrete, Every, Flow, LogSpaced

SCHEDULE = [0, 1, 4, 5, 9, 16]


def _counting_loop(start, unroll=1):
    """A state ``[sum of step numbers taken, steps taken]``, recorded as is."""

    def one_step(t, s):
        return s + jnp.stack([t, jnp.ones_like(t)])

    def advance(s, interval):
        return take_steps(one_step, s, interval.start, interval.length, unroll=unroll)

    def record(s):
        return s, {"state": s}

    return jax.jit(
        lambda steps: record_loop(
            advance, record, jnp.zeros(2, jnp.int32), steps, start=record if start else None
        )
    )(jnp.asarray(SCHEDULE, jnp.int32))


@pytest.mark.parametrize("start", [True, False], ids=["start", "record-first"])
@pytest.mark.parametrize("unroll", [1, 3])
def test_the_loop_takes_each_step_once_with_its_number(start, unroll):
    run = _counting_loop(start, unroll)
    # Python reference: at record k, steps 0..s_k - 1 were taken, their numbers summed.
    want = np.array([[s * (s - 1) // 2, s] for s in SCHEDULE])
    np.testing.assert_array_equal(run.records["state"], want)
    np.testing.assert_array_equal(run.state, want[-1])
    assert int(run.failed_step) == -1


def test_the_loop_reports_the_first_unsound_record():
    def advance(s, interval):
        return s * 10.0 ** interval.length.astype(s.dtype)  # overflows float32 at 1e39

    def record(s):
        return s, s

    for start in (record, None):
        out = record_loop(
            advance,
            record,
            jnp.ones(3, jnp.float32) * jnp.array([1.0, 1e-30, 1e10], jnp.float32),
            jnp.asarray([0, 10, 20, 30, 40], jnp.int32),
            start=start,
            finite=lambda s, _: jnp.isfinite(s),
        )
        # 1 * 10^t passes 3.4e38 first at record 40; 1e-30 never; 1e10 at record 30.
        assert out.failed_step.tolist() == [40, -1, 30]


def _gd_reference(x, y, w0, eta, times):
    """NumPy float64 GD on the mean squared error, ``w`` kept at ``times``."""
    w, kept = np.array(w0, np.float64), []
    for t in range(max(times) + 1):
        if t in times:
            kept.append(w.copy())
        w = w - eta * 2 * x.T @ (x @ w - y) / len(y)
    return np.array(kept)


def test_fit_in_float64_with_the_parameter_history():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(30, 3)), rng.normal(size=30)
    runner = Discrete(eta=0.05, steps=200, save=LogSpaced(8))
    times = runner.times().tolist()
    want = _gd_reference(x, y, np.zeros(3), 0.05, times)

    def loss(p):
        # Both constants cast: jax 0.10.2 reuses a closed-over NumPy array converted with
        # x64 on in a trace with x64 off (a lowering error, with plain jax.jit too).
        dtype = p["w"].dtype
        return jnp.mean((jnp.asarray(x, dtype) @ p["w"] - jnp.asarray(y, dtype)) ** 2)

    # x64 is off here: the dtype option turns it on for the run alone.
    assert not jax.config.jax_enable_x64
    result = fit(loss, {"w": np.zeros(3)}, "gd", runner=runner, dtype="float64", save_params=True)
    assert result.params["w"].dtype == np.float64 and result.loss.dtype == np.float64
    assert result.saved_params["w"].shape == (len(times), 3)
    # float64 programs against float64 NumPy: only summation order differs (measured
    # 1e-16 relative); 1e-12 of the norm leaves room for another CPU's rounding.
    scale = np.max(np.abs(want))
    assert np.max(np.abs(np.asarray(result.saved_params["w"]) - want)) <= 1e-12 * scale
    np.testing.assert_array_equal(np.asarray(result.saved_params["w"][-1]), result.params["w"])
    in32 = fit(loss, {"w": np.zeros(3)}, "gd", runner=runner, dtype="float32")
    assert in32.params["w"].dtype == np.float32 and in32.saved_params is None
    with pytest.raises(InputError, match="float16"):
        fit(loss, {"w": np.zeros(3)}, "gd", runner=runner, dtype="float16")


def _sphere_steps(key):
    """``fit`` of RANDOM_L2 on ``||p||^2 / 2``, every step recorded."""
    runner = Discrete(eta=0.1, steps=20, save=Every(1))
    return fit(
        lambda p: 0.5 * jnp.sum(p["a"] ** 2) + 0.5 * jnp.sum(p["b"] ** 2),
        {"a": jnp.ones(3), "b": jnp.full((2, 2), 0.5)},
        RANDOM_L2,
        rho=0.3,
        runner=runner,
        save_params=True,
        key=key,
    )


def test_a_random_rule_moves_by_rho_in_a_new_direction_each_step():
    result = _sphere_steps(jax.random.key(7))
    # One step on ||p||^2 / 2: p' = p - eta (p + rho eps) = (1 - eta) p - eta rho eps,
    # so the step's offset from GD is eta rho eps, of norm eta rho = 0.03 exactly.
    flat = np.concatenate(
        [np.asarray(result.saved_params[k]).reshape(21, -1) for k in ("a", "b")], axis=1
    )
    offsets = flat[1:] - 0.9 * flat[:-1]
    norms = np.linalg.norm(offsets, axis=1)
    # float32 rounding of a few O(1) numbers: 1e-5 relative is far above it.
    np.testing.assert_allclose(norms, 0.03, rtol=1e-5)
    cosines = (offsets[1:] * offsets[:-1]).sum(axis=1) / norms[1:] / norms[:-1]
    assert np.all(np.abs(cosines) < 0.999)  # a new direction every step
    same = _sphere_steps(jax.random.key(7))
    other = _sphere_steps(jax.random.key(8))
    np.testing.assert_array_equal(same.params["a"], result.params["a"])
    assert not np.allclose(other.params["a"], result.params["a"])


def test_a_random_rule_draws_per_grid_point_and_has_no_flow():
    ds = samflow.trajectory(
        RANDOM_L2, depth=2, mu=[1.0, 2.0], alpha=0.5, rho=0.2, runner=Discrete(steps=5)
    )
    assert np.all(np.isfinite(ds["beta"].values))
    with pytest.raises(InputError, match=r"random-l2.*discrete runner"):
        samflow.trajectory(RANDOM_L2, depth=2, mu=[1.0, 2.0], alpha=0.5, rho=0.2, runner=Flow())


@pytest.mark.parametrize(
    "args, message",
    [
        (("five", 5), "direction must be a function"),
        (("", None), "non-empty string"),
        (("x", None, "yes"), "scale_invariant must be True or False"),
        (("x", None, False, "closed"), "balanced must be a BalancedFlow"),
        (("x", None, False, None, True), "random rule needs a direction"),
    ],
)
def test_a_bad_rule_is_refused_when_made(args, message):
    with pytest.raises(InputError, match=message):
        PerturbationRule(*args)


@pytest.mark.parametrize(
    "direction, message",
    [
        (lambda g, b: {"w": g}, "structure"),
        (lambda g, b: jnp.ones((), g.dtype), r"shape \(\) .* shape \(2,\)"),
        (lambda g, b: jnp.sign(g).astype(jnp.int32), "dtype int32"),
    ],
    ids=["structure", "broadcast", "int-dtype"],
)
def test_a_rule_returning_the_wrong_eps_is_refused_when_traced(direction, message):
    rule = PerturbationRule("bad", direction)
    with pytest.raises(InputError, match=f"rule bad: direction returned.*{message}"):
        fit(lambda p: jnp.sum(p**2), jnp.ones(2), rule, rho=0.1, runner=Discrete(steps=2))
    with pytest.raises(InputError, match="rule bad: direction returned"):
        samflow.trajectory(
            rule, depth=2, mu=[1.0, 2.0], alpha=0.5, rho=0.1, runner=Discrete(steps=2)
        )
