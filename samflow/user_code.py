"""A user's parametrisation and loss, checked before a run compiles them
(docs/theory/models.md#models-of-your-own).

The engine calls the methods of a :class:`samflow.Parametrization` and a
:class:`samflow.Loss` deep inside compiled programs, where a wrong shape or dtype
surfaces as JAX's error (``dot_general requires contracting dimensions``, ``tuple index
out of range``) or, where broadcasting lets it through, as no error at all. Here each
method is evaluated abstractly (:func:`jax.eval_shape`: shapes and dtypes only, no
arithmetic) on the shapes and the dtype of the run, and what it returns is compared
with the protocol, so that a mistake is refused as an ``InputError`` naming the class,
the method, what it returned and what the protocol wants, as equinox and diffrax name
a user's module or term where it enters.

The probe ``theta`` is ``[rows, d, batch]`` with one batch axis whose length differs
from ``rows``, ``d`` and ``n``: a method that reduces, transposes or drops the wrong
axis then returns a shape that differs from the protocol's, where a probe of equal
lengths could let it pass.
"""

from __future__ import annotations

import functools

import jax
import numpy as np

from samflow.errors import InputError
from samflow.precision import precision

_TRACER_ERRORS = (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError)


def _describe(out) -> str:
    """What a method returned, for a message: ``float32[2, 3]``, a tuple of those, None."""
    if isinstance(out, jax.ShapeDtypeStruct):
        return f"{out.dtype}[{', '.join(map(str, out.shape))}]"
    if isinstance(out, tuple | list):
        inner = ", ".join(_describe(o) for o in out)
        return f"a {type(out).__name__} of {len(out)} ({inner})"
    return repr(out) if out is None else type(out).__name__


def _evaluate(owner, method: str, *args: jax.ShapeDtypeStruct):
    """``owner.method(*args)`` evaluated abstractly; an ``InputError`` naming the method
    where it cannot be traced: "use jax.numpy" where it makes a traced input concrete
    (NumPy, ``float()``: JAX says so by the tracer errors, or for ``float()`` of an array
    by a TypeError that says "converted to Python scalars"), else JAX's first line."""
    where = f"{type(owner).__name__}.{method}"
    try:
        return jax.eval_shape(getattr(owner, method), *args)
    except Exception as e:  # any failure of the user's code is named as theirs
        converts = isinstance(e, _TRACER_ERRORS) or "converted to Python scalars" in str(e)
        error = e
    if converts:
        raise InputError(
            f"{where} converts its traced input to a concrete value (NumPy, float(), if on "
            "an array): use jax.numpy, and jnp.where for branches"
        ) from None
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    raise InputError(
        f"{where} fails on inputs {', '.join(_describe(a) for a in args)}: "
        f"{type(error).__name__}: {first}"
    ) from None


def _expect(owner, method: str, out, shape: tuple[int, ...], dtype: np.dtype, args) -> None:
    """Refuse ``out`` unless it is one array of ``shape`` and ``dtype``, naming the method."""
    want = f"{dtype.name}[{', '.join(map(str, shape))}]"
    if not isinstance(out, jax.ShapeDtypeStruct) or out.shape != shape or out.dtype != dtype:
        inputs = ", ".join(_describe(a) for a in args)
        raise InputError(
            f"{type(owner).__name__}.{method} returned {_describe(out)} on inputs {inputs}; "
            f"the protocol wants one array {want} (docs/theory/models.md#models-of-your-own)"
        )


def _expect_triple(owner, method: str, out, shape, dtype: np.dtype, args) -> None:
    """Refuse ``out`` unless it is three arrays (value and two derivatives) of ``shape``
    and ``dtype``."""
    if not isinstance(out, tuple | list) or len(out) != 3:
        want = f"{dtype.name}[{', '.join(map(str, shape))}]"
        raise InputError(
            f"{type(owner).__name__}.{method} returned {_describe(out)}; the protocol wants a "
            f"tuple of 3 arrays {want} (the value and two derivatives, "
            "docs/theory/models.md#models-of-your-own)"
        )
    for k, part in enumerate(out):
        _expect(owner, f"{method}(...)[{k}]", part, shape, dtype, args)


@functools.lru_cache(maxsize=64)
def check_model(model, rows: int, d: int, n: int, dtype: str) -> None:
    """Refuse (``InputError`` naming the class and the method) a model whose methods do
    not keep the protocol on ``theta`` ``[rows, d, batch]``, ``n`` data points and
    ``dtype``: each method is traced once (:func:`jax.eval_shape`, no arithmetic); the
    answer is cached per model and shapes, so a sweep's tiles pay for it once.

    Args:
        model: a :class:`samflow.model.Model` (hashable: its constructor checks it).
        rows: the rows of ``theta`` of the run (its layers, padding included).
        d: the dimension of the data.
        n: the number of data points.
        dtype: ``float64`` or ``float32``, the run's.

    Raises:
        InputError: a method that fails to trace, converts a traced input, or returns
            another shape, dtype or number of arrays than the protocol's.
    """
    batch = max(rows, d, n) + 1
    with precision(dtype) as dt:
        theta = jax.ShapeDtypeStruct((rows, d, batch), dt)
        p = jax.ShapeDtypeStruct((n, batch), dt)
        param, loss = model.parametrization, model.loss
        for method, shape in (
            ("beta", (d, batch)),
            ("jacobian", (rows, d, batch)),
            ("curvature", (rows, rows, d, batch)),
        ):
            _expect(param, method, _evaluate(param, method, theta), shape, dt, (theta,))
        underflow = _evaluate(param, "underflow", theta)
        _expect(param, "underflow", underflow, (d, batch), np.dtype(bool), (theta,))
        if loss.margin:
            _expect_triple(loss, "phi", _evaluate(loss, "phi", p), (n, batch), dt, (p,))
        out = _evaluate(loss, "derivatives", p, p)
        _expect_triple(loss, "derivatives", out, (n, batch), dt, (p, p))
        _expect(loss, "value", _evaluate(loss, "value", p, p), (n, batch), dt, (p, p))


def _is_users(obj) -> bool:
    """Whether ``obj`` is of a class written outside samflow (a user's model part)."""
    return not type(obj).__module__.startswith("samflow.")


def nonfinite_method(model, theta: np.ndarray, X: np.ndarray, y: np.ndarray, dtype: str):
    """The first of a user's methods (``Class.method``, ``Class.method(...)[k]`` for a
    part of a tuple) whose value at ``theta`` ``[rows, d]`` on the data ``(X, y)`` is not
    finite, with what it holds (``nan`` or ``inf``); None where every method of the user's
    is finite there, or the model is samflow's own. Evaluated concretely, once, after a
    run failed: it names the method that made the NaN the run's record only dates
    (``failed_step``, ``stop_tau``).

    Args:
        model: the run's :class:`samflow.model.Model`.
        theta: the parameters ``[rows, d]`` (the start, or a later finite state).
        X: ``[n, d]`` inputs.
        y: ``[n]`` labels or targets.
        dtype: the run's, ``float64`` or ``float32``.

    Returns:
        ``("FaultyHuber.derivatives(...)[0]", "nan")`` or None.
    """
    import jax.numpy as jnp

    param, loss = model.parametrization, model.loss
    with precision(dtype) as dt:
        t = jnp.asarray(theta, dt)[..., None]  # one batch element: [rows, d, 1]
        named = []
        if _is_users(param):
            named += [(param, m, getattr(param, m)(t)) for m in ("beta", "jacobian", "curvature")]
        if _is_users(loss):
            p = jnp.asarray(X, dt) @ param.beta(t)  # [n, 1]
            labels = jnp.asarray(y, dt)[:, None]
            if loss.margin:
                named.append((loss, "phi", loss.phi(labels * p)))
            else:
                named.append((loss, "derivatives", loss.derivatives(p, labels)))
        for owner, method, out in named:
            parts = out if isinstance(out, tuple | list) else (out,)
            for k, part in enumerate(parts):
                values = np.asarray(part)
                if not np.all(np.isfinite(values)):
                    where = f"{type(owner).__name__}.{method}"
                    where += f"(...)[{k}]" if isinstance(out, tuple | list) else ""
                    return where, "nan" if np.isnan(values).any() else "inf"
    return None
