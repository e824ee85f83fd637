"""The discrete runner for any parameter pytree and loss: ``fit(loss_fn, params, ...)``.

``loss_fn(params) -> []`` is yours (a least-squares fit over a dict of arrays, an
equinox model's parameters, ...); samflow supplies the perturbation rule, the step and
the recording. One run is one compiled program, the record loop of :func:`samflow.discrete.simulate`
(:func:`samflow.loop.record_loop`): a ``lax.scan`` over record intervals, each a
``lax.fori_loop`` over its steps, the loss (and, if asked, the parameters) recorded
at ``runner.times()``::

    result = samflow.fit(loss, {"w": w0, "b": b0}, "sam-l2", rho=0.1,
                         runner=samflow.Discrete(eta=0.01, steps=1000))
    result.loss          # [T], at result.step

Without ``optimizer`` a step is :func:`samflow.steps.step` (``p - eta * g`` at the
perturbed gradient, ``eta`` from the runner). With an optax ``optimizer`` it is
:func:`samflow.transform.sam` around it, and the runner's ``eta`` is unused (the
optimiser has its own learning rate).

Stochastic steps (docs/theory/stochastic.md#stochastic-steps): give the examples as ``data=(X, y)``
(leading axis n) and write ``loss_fn(params, X, y)``, the mean loss over the examples it gets;
the runner's ``batch``, ``m`` and ``label_noise`` then draw each step's minibatch,
cut it into m-sharpness groups and add label noise (:mod:`samflow.stochastic`), keyed
by ``seed``. The recorded loss is ``loss_fn(params, X, y)`` on all the examples::

    result = samflow.fit(lambda p, X, y: jnp.mean((X @ p - y) ** 2) / 2, w0, "sam-l2",
                         rho=0.1, data=(X, y), seed=3,
                         runner=samflow.Discrete(eta=0.1, steps=1000, batch=8, m=1))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax import Array

from samflow import inputs, mappings
from samflow.errors import InputError
from samflow.loop import record_loop, take_steps
from samflow.precision import precision
from samflow.rules import PerturbationRule, check_rho, get_rule
from samflow.runners import Discrete
from samflow.steps import Groups, step
from samflow.stochastic import Sampling, draws, group, run_key
from samflow.transform import apply_step, sam

PyTree = Any


class FitResult(NamedTuple):
    """A recorded :func:`fit` run (what :func:`fit` returns).

    Attributes:
        step: ``[T]`` int, step index of each record (``runner.times()``, from 0).
        loss: ``[T]`` loss at the recorded parameters.
        params: the parameters after the last step (same pytree as the start).
        failed_step: ``[]`` int, step index of the first record whose parameters or
            loss are not all finite, -1 if none (the run goes on past it).
        saved_params: with ``save_params``, the parameters at every record (the same
            pytree, each leaf ``[T, *leaf shape]``); else None.

    Examples:
        >>> import jax.numpy as jnp
        >>> import samflow
        >>> result = samflow.fit(lambda p: jnp.sum(p**2), jnp.ones(2), "gd",
        ...                      runner=samflow.Discrete(eta=0.25, steps=4), dtype="float64")
        >>> result.step.tolist(), result.loss.tolist()  # each step halves p: the loss / 4
        ([0, 1, 2, 3, 4], [2.0, 0.5, 0.125, 0.03125, 0.0078125])
        >>> int(result.failed_step), result.saved_params is None
        (-1, True)
    """

    step: Array
    loss: Array
    params: PyTree
    failed_step: Array
    saved_params: PyTree | None = None


def fit(
    loss_fn: Callable[[PyTree], Array],
    params: PyTree,
    method: str | PerturbationRule,
    *,
    rho: float | None = None,
    runner: Discrete,
    optimizer: optax.GradientTransformation | None = None,
    dtype: str | None = None,
    save_params: bool = False,
    key: Array | None = None,
    data: tuple[Array, Array] | None = None,
    seed: int | None = None,
) -> FitResult:
    r"""Run ``method`` on ``loss_fn`` from ``params`` with ``runner``'s steps and records.

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
            \(p - \eta \cdot g\); then ``runner.eta`` is unused.
        dtype: ``float64`` or ``float32``: every leaf of ``params`` is cast to it and
            the run computes in it (float64 inside a local ``jax.enable_x64``, as the
            diagonal engine does: :mod:`samflow.precision`). None: the leaves' own
            dtypes, in the process's JAX configuration.
        save_params: also keep the parameters at every record
            (:attr:`FitResult.saved_params`; memory \(T\) times the parameters').
        key: the run's PRNG key: a random rule draws step \(t\)'s direction with
            ``fold_in(key, t)``, the stochastic steps their minibatch and label noise
            from it (:func:`samflow.stochastic.draws`); default
            ``jax.random.key(seed)``.
        data: ``(X, y)``, arrays with a leading axis of \(n\) examples; then
            ``loss_fn(params, X, y)`` is the mean loss over the examples it is given,
            and the runner's ``batch``, ``m``, ``label_noise`` apply (\(y + \delta \xi\)
            with random signs \(\xi\) per example, broadcast over \(y\)'s trailing
            axes). None: ``loss_fn(params)``, full-batch steps.
        seed: the seed of the default ``key`` (an integer >= 0; default 0); refused
            where nothing is random (no random rule, no stochastic steps).

    Returns:
        A :class:`FitResult`: the records' steps and losses, the last parameters, the
        first step whose state is not finite (-1 if none) and, with ``save_params``,
        the parameters at every record.

    Raises:
        InputError: unknown method, bad or missing rho, a runner that is not
            ``Discrete``, parameters that are not float arrays, an unknown dtype, records
            that would not fit in memory, a loss that is not a scalar, stochastic
            settings without ``data`` or that do not fit it (each named).

    Examples:
        l2-SAM on a quadratic in a pytree of parameters, 50 steps:

        >>> import jax.numpy as jnp
        >>> import samflow
        >>> def loss(p):
        ...     return jnp.sum((p["w"] - 1.0) ** 2)
        >>> result = samflow.fit(loss, {"w": jnp.zeros(3)}, "sam-l2", rho=0.05,
        ...                      runner=samflow.Discrete(eta=0.1, steps=50), dtype="float64")
        >>> float(result.loss[0]), result.params["w"].round(2).tolist()
        (3.0, [1.0, 1.0, 1.0])
    """
    rule = get_rule(method)
    rho = check_rho(rule, rho)
    if not isinstance(runner, Discrete):
        raise InputError(f"fit needs a Discrete runner, got {runner!r}")
    seed_given = seed is not None
    seed = inputs.check_seed(0 if seed is None else seed)
    sampling = None
    if data is not None:
        data = _check_data(data)
        n = int(jnp.shape(data[0])[0])
        inputs.check_sampling(runner, rule, n, margin_loss=False)
        sampling = Sampling.of(runner, n)
        if optimizer is not None and sampling is not None and sampling.m is not None:
            raise InputError(f"m = {runner.m} is not available with an optax optimizer")
    elif runner.stochastic:
        raise InputError("batch, m and label_noise need the examples: pass data=(X, y)")
    if seed_given and not rule.random and sampling is None:
        raise InputError(
            f"seed {seed}: nothing in this run is random (a random rule, or data with "
            "batch, m or label_noise, draws); drop the seed"
        )
    key = _check_key(key)
    if not callable(loss_fn):
        raise InputError(f"loss_fn must be a function of the parameters, got {loss_fn!r}")
    _check_arguments(loss_fn, 1 + (0 if data is None else 2))
    leaves = jax.tree_util.tree_leaves(params)
    if not leaves:
        raise InputError("params holds no arrays")
    for leaf in leaves:
        kind = "f" if isinstance(leaf, float) else getattr(getattr(leaf, "dtype", None), "kind", 0)
        if kind != "f":
            raise InputError(f"params must hold float arrays, got {leaf!r}")
    if optimizer is not None and not isinstance(optimizer, optax.GradientTransformation):
        raise InputError(f"optimizer must be an optax GradientTransformation, got {optimizer!r}")
    if dtype is not None:
        dtype = inputs.check_dtype(dtype)
    # step and loss per record, and the parameters at every record if kept
    per_record = 16 + (8 * sum(jnp.size(leaf) for leaf in leaves) if save_params else 0)
    inputs.check_bytes(f"fit with {runner.n_records()} records", per_record * runner.n_records())
    with precision("float32" if dtype is None else dtype):
        if dtype is not None:
            params = jax.tree_util.tree_map(lambda leaf: jnp.asarray(leaf, dtype), params)
        if data is not None:
            data = tuple(jnp.asarray(a, dtype) if dtype is not None else a for a in data)
        shape = jax.eval_shape(loss_fn, params, *(data or ())).shape
        if shape != ():
            raise InputError(f"loss_fn must return a scalar, got shape {shape}")
        int_dtype = jax.dtypes.canonicalize_dtype(jnp.int64)
        record_steps = jnp.asarray(runner.times(), int_dtype)
        if key is None and (rule.random or sampling is not None):
            key = run_key(seed)
        mappings.relieve()
        return _fit_jit(
            params,
            record_steps,
            rho,
            runner.eta,
            key,
            data,
            loss_fn=loss_fn,
            rule=rule,
            optimizer=optimizer,
            save_params=save_params,
            sampling=sampling,
        )


def _check_key(key) -> Array | None:
    """None, or a JAX PRNG key: a typed key (``jax.random.key``) or a raw ``uint32[2]``
    one (``jax.random.PRNGKey``); InputError naming anything else."""
    if key is None:
        return None
    dtype = getattr(key, "dtype", None)
    typed = dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)
    raw = dtype == jnp.uint32 and jnp.shape(key) == (2,)
    if not (typed and jnp.shape(key) == ()) and not raw:
        raise InputError(
            f"key must be a JAX PRNG key (jax.random.key(seed)), got {key!r} ({type(key).__name__})"
        )
    return key


def _check_arguments(loss_fn, count: int) -> None:
    """Refuse a ``loss_fn`` that cannot take ``count`` positional arguments (params, and
    X, y with data), naming it; one whose signature is unknown is let through."""
    import inspect

    try:
        inspect.signature(loss_fn).bind(*range(count))
    except TypeError:
        name = getattr(loss_fn, "__name__", repr(loss_fn))
        what = "loss_fn(params, X, y) with data" if count == 3 else "loss_fn(params)"
        raise InputError(f"loss_fn {name} cannot be called as {what}") from None
    except ValueError:  # no signature (a builtin): the call itself will tell
        pass


def _check_data(data) -> tuple[Array, Array]:
    """``(X, y)``: two arrays with the same leading number of examples (>= 1)."""
    if isinstance(data, str) or not isinstance(data, tuple | list) or len(data) != 2:
        raise InputError(f"data must be a pair (X, y) of arrays, got {type(data).__name__}")
    X, y = data
    for name, a in (("X", X), ("y", y)):
        if not hasattr(a, "shape") or jnp.ndim(a) < 1 or jnp.shape(a)[0] < 1:
            raise InputError(f"data {name} must be an array with a leading axis of examples")
        if getattr(getattr(a, "dtype", None), "kind", "f") not in "fiu":
            raise InputError(f"data {name} must hold numbers, got dtype {a.dtype}")
    if jnp.shape(X)[0] != jnp.shape(y)[0]:
        raise InputError(
            f"data: X and y hold {jnp.shape(X)[0]} and {jnp.shape(y)[0]} examples; need the same"
        )
    return X, y


def _fit(
    params: PyTree,
    record_steps: Array,
    rho: float,
    eta: float,
    key: Array | None,
    data: tuple[Array, Array] | None,
    *,
    loss_fn: Callable[..., Array],
    rule: PerturbationRule,
    optimizer: optax.GradientTransformation | None,
    save_params: bool,
    sampling: Sampling | None = None,
) -> FitResult:
    """Pure run from ``params``, recording at ``record_steps`` ``[T]`` (from 0).

    ``rho`` and ``eta`` are traced (a new value does not recompile) and, as Python
    floats, weakly typed: they take the dtype of the parameters. With ``data``,
    ``loss_fn(params, X, y)``; ``sampling`` draws each step's examples from ``key``.
    """
    examples = tuple(data or ())
    grad = jax.grad(loss_fn)

    def step_key(t):
        return None if key is None else jax.random.fold_in(key, t)

    def step_data(t):
        """Step ``t``'s examples ``(X, y)``: the minibatch, with noisy labels."""
        X, y = examples
        if sampling is None:
            return X, y
        index, xi = draws(key, t, sampling, jnp.result_type(y))
        if xi is not None:
            y = y + sampling.label_noise * xi.reshape(-1, *(1,) * (jnp.ndim(y) - 1))
        if index is not None:
            X, y = X[index], y[index]
        return X, y

    def step_groups(batch):
        if sampling is None or sampling.m is None:
            return None
        return Groups(lambda p, g: (grad(p, *g), None), tuple(group(a, sampling) for a in batch))

    if optimizer is None:

        def one_step(t, carry):
            params, state = carry
            batch = step_data(t) if data is not None else ()
            new, _ = step(
                params, lambda p: (grad(p, *batch), None), rule, rho, eta,
                key=step_key(t), t=t, groups=step_groups(batch),
            )  # fmt: skip
            return new, state

        state0 = None
    else:
        tx = sam(optimizer, rho, rule)

        def one_step(t, carry):
            batch = step_data(t) if data is not None else ()
            return apply_step(tx, *carry, lambda p: grad(p, *batch), key=step_key(t), step=t)

        state0 = tx.init(params)

    def advance(carry, interval):
        return take_steps(one_step, carry, interval.start, interval.length)

    def record(carry):
        out = {"loss": loss_fn(carry[0], *examples)}
        if save_params:
            out["params"] = carry[0]
        return carry, out

    def all_finite(carry, out):
        ok = jnp.isfinite(out["loss"])
        for leaf in jax.tree_util.tree_leaves(carry[0]):
            ok = ok & jnp.all(jnp.isfinite(leaf))
        return ok

    (params, _), recs, failed = record_loop(
        advance, record, (params, state0), record_steps, finite=all_finite
    )
    return FitResult(
        step=record_steps,
        loss=recs["loss"],
        params=params,
        failed_step=failed,
        saved_params=recs.get("params"),
    )


_fit_jit = jax.jit(
    _fit, static_argnames=("loss_fn", "rule", "optimizer", "save_params", "sampling")
)
