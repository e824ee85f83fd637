"""The optax adapter ``samflow.transform.sam`` and the pytree runner ``samflow.fit``.

References: ``samflow.steps.step`` (sgd base), the NumPy float64 loop of
``tests/reference.py``, ``optax.contrib.sam`` (l2-SAM with any base) and plain Python
loops of steps.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import reference

from samflow import model, rules, steps
from samflow._fit import fit
from samflow.errors import InputError
from samflow.runners import Discrete, Every, LogSpaced
from samflow.transform import apply_step, sam

MU = np.array([1.0, 2.0, 3.0, 4.0])
RHO, ETA, N_STEPS = 0.1, 0.1, 50
HALF_L2 = rules.PerturbationRule(
    "half-l2",
    lambda g, batch_ndim: jax.tree_util.tree_map(
        lambda leaf: 0.5 * leaf, rules.SAM_L2.direction(g, batch_ndim)
    ),
)


def _max_diff(a, b) -> float:
    return max(
        float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
        for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True)
    )


def _theta0() -> jax.Array:
    """An unbalanced start ``[2, 4]`` (layers differ, so the step is not symmetric)."""
    return jnp.array([[0.5, 0.4, 0.3, 0.6], [0.45, 0.5, 0.35, 0.2]])


def _diag_grad_fns():
    problem = model.single_point(jnp.asarray(MU))

    def grad_and_aux(theta):
        return model.grad_and_aux(theta, problem, None)

    return grad_and_aux, lambda theta: grad_and_aux(theta)[0]


def _scan_steps(fn, carry, n=N_STEPS):
    return jax.jit(lambda c: jax.lax.scan(lambda c, _: (fn(c), None), c, None, length=n)[0])(carry)


def _sam_run(tx, params, grad):
    """``N_STEPS`` steps of ``tx`` with ``grad``; final params."""
    params, _ = _scan_steps(lambda c: apply_step(tx, *c, grad), (params, tx.init(params)))
    return params


def _step_run(params, grad_and_aux, rule, rho=RHO, eta=ETA):
    return _scan_steps(lambda p: steps.step(p, grad_and_aux, rule, rho, eta)[0], params)


def _mlp():
    """A 3-8-8-1 equinox MLP in float64 and its least-squares loss on fixed data."""
    mlp = eqx.nn.MLP(3, 1, 8, 2, activation=jnp.tanh, key=jax.random.key(0), dtype=jnp.float64)
    params, static = eqx.partition(mlp, eqx.is_inexact_array)
    x = jax.random.normal(jax.random.key(1), (16, 3), jnp.float64)
    y = jnp.sin(x.sum(axis=1))

    def loss(p):
        net = eqx.combine(p, static)
        return jnp.mean((jax.vmap(net)(x)[:, 0] - y) ** 2)

    return params, loss


@pytest.mark.parametrize("method", rules.METHODS)
def test_sgd_base_is_the_engine_step_on_the_diagonal_net(method):
    with jax.enable_x64(True):
        grad_and_aux, grad = _diag_grad_fns()
        rule = rules.get_rule(method)
        theirs = _step_run(_theta0(), grad_and_aux, rule)
        ours = _sam_run(sam(optax.sgd(ETA), RHO, method), _theta0(), grad)
        numpy_loop, _ = reference.run(
            np.asarray(_theta0()), MU[None], np.ones(1), method, RHO, ETA, N_STEPS
        )
        assert ours.dtype == jnp.float64
        # Measured: 0 against steps.step, <= 2.3e-16 against the NumPy loop.
        assert _max_diff(ours, theirs) <= 1e-12
        assert _max_diff(ours, numpy_loop[-1]) <= 1e-12
        assert _max_diff(ours, _theta0()) > 1e-3


@pytest.mark.parametrize("method", [*rules.METHODS, HALF_L2])
def test_sgd_base_is_the_engine_step_on_an_equinox_mlp(method):
    with jax.enable_x64(True):
        params, loss = _mlp()
        grad = jax.grad(loss)
        rule = rules.get_rule(method)
        theirs = _step_run(params, lambda p: (grad(p), None), rule)
        ours = _sam_run(sam(optax.sgd(ETA), RHO, method), params, grad)
        assert _max_diff(ours, theirs) <= 1e-12
        assert _max_diff(ours, params) > 1e-3


def test_a_user_rule_is_sam_l2_at_half_the_radius():
    with jax.enable_x64(True):
        _, grad = _diag_grad_fns()
        half = _sam_run(sam(optax.sgd(ETA), RHO, HALF_L2), _theta0(), grad)
        l2 = _sam_run(sam(optax.sgd(ETA), RHO / 2, "sam-l2"), _theta0(), grad)
        assert _max_diff(half, l2) <= 1e-12


def _contrib_sam(base, rho):
    """optax's SAM, set up as one l2-SAM step per ``update`` call.

    ``opaque_mode=True`` with ``sync_period=2`` takes one adversarial step (here
    ``+rho * g / ||g||_2``: the normalised gradient through ``sgd(rho)``, negated by
    optax) and then one ``base`` step with the gradient at that point, from the
    unperturbed parameters, every call: l2-SAM. (``sync_period=1`` would take no
    adversarial step at all: plain ``base``.) Its ``grad_fn`` takes ``(params, i)``.
    """
    adversary = optax.chain(optax.contrib.normalize(), optax.sgd(rho))
    return optax.contrib.sam(base, adversary, sync_period=2, opaque_mode=True)


@pytest.mark.parametrize(
    "base",
    [optax.sgd(ETA), optax.sgd(ETA, momentum=0.9), optax.adam(0.01)],
    ids=["sgd", "momentum", "adam"],
)
def test_l2_rule_matches_optax_contrib_sam(base):
    with jax.enable_x64(True):
        _, grad = _diag_grad_fns()
        ours = _sam_run(sam(base, RHO, "sam-l2"), _theta0(), grad)
        tx = _contrib_sam(base, RHO)

        def contrib_step(carry):
            params, state = carry
            updates, state = tx.update(grad(params), state, params, grad_fn=lambda p, _: grad(p))
            return optax.apply_updates(params, updates), state

        theirs, _ = _scan_steps(contrib_step, (_theta0(), tx.init(_theta0())))
        # Measured: 0 (sgd), 1.2e-16 (momentum), 2.3e-16 (adam).
        assert _max_diff(ours, theirs) <= 1e-12


def test_sam_composes_inside_chain():
    with jax.enable_x64(True):
        _, grad = _diag_grad_fns()
        alone = _sam_run(sam(optax.adam(0.01), RHO, "sam-linf"), _theta0(), grad)
        chained = optax.chain(sam(optax.scale_by_adam(), RHO, "sam-linf"), optax.scale(-0.01))
        assert _max_diff(alone, _sam_run(chained, _theta0(), grad)) <= 1e-12


def test_gd_rule_passes_grads_through_without_grad_fn():
    tx = sam(optax.sgd(ETA, momentum=0.9), None, "gd")
    params = {"w": jnp.array([1.0, -2.0])}
    grads = {"w": jnp.array([0.5, 0.25])}
    state = tx.init(params)
    updates, _ = tx.update(grads, state, params)
    reference_updates, _ = optax.sgd(ETA, momentum=0.9).update(grads, state, params)
    assert _max_diff(updates, reference_updates) == 0.0


@pytest.mark.parametrize(
    "base", [optax.sgd(0.1, momentum=0.9), optax.adam(0.02)], ids=["momentum", "adam"]
)
def test_momentum_and_adam_bases_decrease_the_loss(base):
    problem = model.single_point(jnp.asarray(MU, jnp.float32))
    runner = Discrete(eta=1.0, steps=200, save=Every(50))
    result = fit(
        lambda t: model.loss(t, problem), _theta0(), "sam-l2", rho=0.05, runner=runner,
        optimizer=base,
    )  # fmt: skip
    loss = np.asarray(result.loss)
    assert result.step.tolist() == [0, 50, 100, 150, 200]
    assert int(result.failed_step) == -1
    assert loss[-1] < 0.1 * loss[0], loss
    assert np.all(np.diff(loss) < 0), loss


def _least_squares():
    """A dict pytree ``{"w": [3], "b": []}`` and its mean squared error on 20 points."""
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(20, 3)))
    y = jnp.asarray(x @ np.array([1.0, -2.0, 0.5]) + 0.3 + 0.1 * rng.normal(size=20))

    def loss(p):
        return jnp.mean((x @ p["w"] + p["b"] - y) ** 2)

    return {"w": jnp.zeros(3), "b": jnp.zeros(())}, loss


def _loop_reference(loss, params, rule, rho, runner):
    """A Python loop of jitted ``steps.step``, the loss kept at ``runner.times()``."""
    grad = jax.grad(loss)
    one = jax.jit(lambda p: steps.step(p, lambda q: (grad(q), None), rule, rho, runner.eta)[0])
    times, losses = set(runner.times().tolist()), [float(loss(params))]
    for t in range(1, runner.steps + 1):
        params = one(params)
        if t in times:
            losses.append(float(loss(params)))
    return np.asarray(losses), params


@pytest.mark.parametrize("method", [*rules.METHODS, HALF_L2])
def test_fit_on_a_user_pytree_is_a_loop_of_steps(method):
    with jax.enable_x64(True):
        params, loss = _least_squares()
        runner = Discrete(eta=0.05, steps=60, save=LogSpaced(6))
        rule = rules.get_rule(method)
        rho = 0.2 if rule.needs_rho else None
        result = fit(loss, params, method, rho=rho, runner=runner)
        losses, final = _loop_reference(loss, params, rule, rho or 0.0, runner)
        np.testing.assert_array_equal(result.step, runner.times())
        assert result.loss.dtype == jnp.float64
        # Measured: parameters 0, loss <= 4.5e-16 (two compiled programs), every method.
        assert np.max(np.abs(np.asarray(result.loss) - losses)) <= 1e-12
        assert _max_diff(result.params, final) <= 1e-12
        assert int(result.failed_step) == -1
        assert losses[-1] < 0.5 * losses[0]
        # optax.sgd(eta) as the optimizer is the same run.
        with_sgd = fit(loss, params, method, rho=rho, runner=runner, optimizer=optax.sgd(0.05))
        assert _max_diff(with_sgd.params, final) <= 1e-12


def test_fit_with_an_optimizer_is_a_loop_of_sam_updates():
    with jax.enable_x64(True):
        params, loss = _least_squares()
        runner = Discrete(eta=123.0, steps=40, save=Every(10))  # eta unused
        result = fit(loss, params, HALF_L2, rho=0.2, runner=runner, optimizer=optax.adam(0.05))
        tx, grad = sam(optax.adam(0.05), 0.1, "sam-l2"), jax.grad(loss)
        state, losses = tx.init(params), [loss(params)]
        for t in range(1, 41):
            params, state = apply_step(tx, params, state, grad)
            if t % 10 == 0:
                losses.append(loss(params))
        assert np.max(np.abs(np.asarray(result.loss) - np.asarray(losses))) <= 1e-12
        assert _max_diff(result.params, params) <= 1e-12


def test_fit_reports_the_first_non_finite_record():
    # GD on w^2 with eta = 100: w grows by |1 - 2 eta| = 199 a step and overflows.
    runner = Discrete(eta=100.0, steps=40, save=Every(4))
    with jax.enable_x64(True):
        result = fit(lambda p: jnp.sum(p**2), jnp.ones(2), "gd", runner=runner)
        # float64 max 1.8e308: 199^t finite while t log10(199) < 308.25 (t <= 134), the
        # loss (199^(2t)) while t <= 66: no failure within 40 steps.
        assert int(result.failed_step) == -1
    result = fit(lambda p: jnp.sum(p**2), jnp.ones(2, jnp.float32), "gd", runner=runner)
    # float32 max 3.4e38: the loss 2 * 199^(2t) overflows at t = 9, first recorded at 12.
    assert int(result.failed_step) == 12
    assert np.isfinite(result.loss[2]) and not np.isfinite(result.loss[3])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"method": "sam-l2", "rho": -0.5}, "-0.5"),
        ({"method": "sam-l3", "rho": 0.1}, "'sam-l3'"),
        ({"method": "sam-linf"}, "sam-linf needs rho"),
        ({"method": "usam", "rho": float("nan")}, "nan"),
    ],
)
def test_bad_input_names_the_value(kwargs, message):
    params, loss = _least_squares()
    method, rho = kwargs["method"], kwargs.get("rho")
    with pytest.raises(InputError, match=message):
        sam(optax.sgd(0.1), rho, method)
    with pytest.raises(InputError, match=message):
        fit(loss, params, method, rho=rho, runner=Discrete(eta=0.1, steps=2))


def test_fit_rejects_a_vector_loss_and_a_flow_runner():
    from samflow.runners import Flow

    params, loss = _least_squares()
    with pytest.raises(InputError, match=r"scalar, got shape \(3,\)"):
        fit(lambda p: p["w"], params, "gd", runner=Discrete(steps=2))
    with pytest.raises(InputError, match="Discrete runner, got Flow"):
        fit(loss, params, "gd", runner=Flow())


def test_sam_update_needs_grad_fn():
    tx = sam(optax.sgd(0.1), 0.1)
    params = jnp.ones(2)
    with pytest.raises(InputError, match="grad_fn=None"):
        tx.update(params, tx.init(params), params)
