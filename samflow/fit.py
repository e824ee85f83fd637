"""The discrete runner for any parameter pytree and loss: ``fit(loss_fn, params, ...)``.

``loss_fn(params) -> []`` is yours (a least-squares fit over a dict of arrays, an
equinox model's parameters, ...); samflow supplies the perturbation rule, the step and
the recording. One run is one compiled program, as in :func:`samflow.discrete.simulate`:
a ``lax.scan`` over record intervals, each a ``lax.fori_loop`` over its steps, the loss
recorded at ``runner.times()``::

    result = samflow.fit(loss, {"w": w0, "b": b0}, "sam-l2", rho=0.1,
                         runner=samflow.Discrete(eta=0.01, steps=1000))
    result.loss          # [T], at result.step

Without ``optimizer`` a step is :func:`samflow.steps.step` (``p - eta * g`` at the
perturbed gradient, ``eta`` from the runner). With an optax ``optimizer`` it is
:func:`samflow.transform.sam` around it, and the runner's ``eta`` is unused (the
optimiser has its own learning rate).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax import Array, lax

from samflow import inputs
from samflow.errors import InputError
from samflow.rules import PerturbationRule, check_rho, get_rule
from samflow.runners import Discrete
from samflow.steps import step
from samflow.transform import apply_step, sam

PyTree = Any


class FitResult(NamedTuple):
    """A recorded :func:`fit` run.

    Fields:
        step: ``[T]`` int, step index of each record (``runner.times()``, from 0).
        loss: ``[T]`` loss at the recorded parameters.
        params: the parameters after the last step (same pytree as the start).
        failed_step: ``[]`` int, step index of the first record whose parameters or
            loss are not all finite, -1 if none (the run goes on past it).
    """

    step: Array
    loss: Array
    params: PyTree
    failed_step: Array


def fit(
    loss_fn: Callable[[PyTree], Array],
    params: PyTree,
    method: str | PerturbationRule,
    *,
    rho: float | None = None,
    runner: Discrete,
    optimizer: optax.GradientTransformation | None = None,
) -> FitResult:
    """Run ``method`` on ``loss_fn`` from ``params`` with ``runner``'s steps and records.

    Args:
        loss_fn: ``params -> []`` scalar loss, differentiable by ``jax.grad``; static
            in the compiled program (pass the same function object to reuse it).
        params: pytree of float arrays (for an equinox model, its
            ``eqx.partition(model, eqx.is_inexact_array)`` arrays).
        method: a name of :data:`samflow.rules.METHODS` or a
            :class:`~samflow.rules.PerturbationRule`.
        rho: perturbation radius (required unless the rule has no ascent, as GD).
        runner: a :class:`samflow.runners.Discrete` (steps, ``eta`` and records).
        optimizer: an optax base optimiser to take SAM gradients instead of
            ``p - eta * g``; then ``runner.eta`` is unused.

    Raises:
        InputError: unknown method, bad or missing rho, a runner that is not
            ``Discrete``, parameters that are not float arrays, records that would not
            fit in memory, or a loss that is not a scalar (each named).
    """
    rule = get_rule(method)
    rho = check_rho(rule, rho)
    if not isinstance(runner, Discrete):
        raise InputError(f"fit needs a Discrete runner, got {runner!r}")
    if not callable(loss_fn):
        raise InputError(f"loss_fn must be a function of the parameters, got {loss_fn!r}")
    leaves = jax.tree_util.tree_leaves(params)
    if not leaves:
        raise InputError("params holds no arrays")
    for leaf in leaves:
        kind = "f" if isinstance(leaf, float) else getattr(getattr(leaf, "dtype", None), "kind", 0)
        if kind != "f":
            raise InputError(f"params must hold float arrays, got {leaf!r}")
    if optimizer is not None and not isinstance(optimizer, optax.GradientTransformation):
        raise InputError(f"optimizer must be an optax GradientTransformation, got {optimizer!r}")
    # step and loss per record
    inputs.check_bytes(f"fit with {runner.n_records()} records", 16 * runner.n_records())
    shape = jax.eval_shape(loss_fn, params).shape
    if shape != ():
        raise InputError(f"loss_fn must return a scalar, got shape {shape}")
    int_dtype = jax.dtypes.canonicalize_dtype(jnp.int64)
    record_steps = jnp.asarray(runner.times(), int_dtype)
    return _fit_jit(
        params,
        record_steps,
        rho,
        runner.eta,
        loss_fn=loss_fn,
        rule=rule,
        optimizer=optimizer,
    )


def _fit(
    params: PyTree,
    record_steps: Array,
    rho: float,
    eta: float,
    *,
    loss_fn: Callable[[PyTree], Array],
    rule: PerturbationRule,
    optimizer: optax.GradientTransformation | None,
) -> FitResult:
    """Pure run from ``params``, recording at ``record_steps`` ``[T]`` (from 0).

    ``rho`` and ``eta`` are traced (a new value does not recompile) and, as Python
    floats, weakly typed: they take the dtype of the parameters.
    """
    grad = jax.grad(loss_fn)
    if optimizer is None:

        def one_step(_, carry):
            params, state = carry
            new, _ = step(params, lambda p: (grad(p), None), rule, rho, eta)
            return new, state

        state0 = None
    else:
        tx = sam(optimizer, rho, rule)

        def one_step(_, carry):
            return apply_step(tx, *carry, grad)

        state0 = tx.init(params)

    def all_finite(params, loss):
        ok = jnp.isfinite(loss)
        for leaf in jax.tree_util.tree_leaves(params):
            ok = ok & jnp.all(jnp.isfinite(leaf))
        return ok

    def segment(carry, xs):
        params, state, failed = carry
        n_steps, at_step = xs
        params, state = lax.fori_loop(0, n_steps, one_step, (params, state))
        loss = loss_fn(params)
        failed = jnp.where((failed < 0) & ~all_finite(params, loss), at_step, failed)
        return (params, state, failed), loss

    loss0 = loss_fn(params)
    failed0 = jnp.where(all_finite(params, loss0), -1, 0).astype(record_steps.dtype)
    (params, _, failed), losses = lax.scan(
        segment, (params, state0, failed0), (jnp.diff(record_steps), record_steps[1:])
    )
    return FitResult(
        step=record_steps,
        loss=jnp.concatenate([loss0[None], losses]),
        params=params,
        failed_step=failed,
    )


_fit_jit = jax.jit(_fit, static_argnames=("loss_fn", "rule", "optimizer"))
