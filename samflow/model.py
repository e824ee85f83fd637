"""L-layer linear diagonal network with logistic loss (docs/theory.md §1 and §7b).

Parameters are one array ``theta`` of shape ``[L_max, d]``; row ``l`` is the layer
``w^(l+1)``. A network of depth ``L <= L_max`` keeps rows ``L..L_max-1`` equal to one:
they contribute a factor one to ``beta``, and :func:`layer_mask` zeroes their gradient,
so they are never perturbed, never updated and never counted in a norm. Depth can then
vary inside one compiled, vmapped program.

Batch-last layout: every function here also takes any number of trailing *batch* axes,
``theta`` ``[L_max, d, *batch]``, ``X`` ``[n, d, *batch]``, ``y`` ``[n, *batch]``, ``depth``
``[*batch]`` (size-1 batch axes broadcast). Sweeps put their grid points there, so each
formula is one elementwise loop over contiguous memory. Sums and products over the small
structural axes (layers, coordinates, data points) are unrolled over rows, which XLA
fuses into that loop (:mod:`samflow.layout`).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from samflow.layout import prod_rows, sum_rows


class Problem(NamedTuple):
    """A binary classification data set.

    Fields:
        X: ``[n, d, *batch]`` inputs.
        y: ``[n, *batch]`` labels in {-1, +1}.
    """

    X: Array
    y: Array

    @property
    def n(self) -> int:
        return int(self.X.shape[0])

    @property
    def d(self) -> int:
        return int(self.X.shape[1])


def single_point(mu: Array | np.ndarray | list[float]) -> Problem:
    """The paper's focal problem: one point ``x = mu`` with label ``y = +1``."""
    mu = jnp.asarray(mu)
    return Problem(X=mu[None, :], y=jnp.ones((1,), dtype=mu.dtype))


def layer_mask(depth: int | Array, n_layers: int, dtype=None) -> Array:
    """``[n_layers, 1, *batch]`` mask for ``depth`` ``[*batch]``: one for real layers, else zero."""
    depth = jnp.asarray(depth)
    layers = jnp.arange(n_layers).reshape(n_layers, 1, *(1,) * depth.ndim)
    return (layers < depth).astype(dtype if dtype is not None else jnp.result_type(float))


def beta(theta: Array) -> Array:
    """Predictor ``beta = w^(1) * ... * w^(L)`` (elementwise), ``[L_max, d, *b] -> [d, *b]``.

    Padding rows are ones, so the product over all rows is the depth-L predictor.
    """
    return prod_rows(theta)


def exclusive_products(theta: Array) -> Array:
    """``P[l, j] = prod_{k != l} theta[k, j]`` by prefix and suffix products, no division.

    Division would fail where a weight is zero; the prefix/suffix form is exact there.
    ``[L_max, d, *batch]`` in and out; ``L_max`` is small and static, so the products are
    unrolled over layers.
    """
    layers = list(theta)
    prefix, suffix = [jnp.ones_like(layers[0])], [jnp.ones_like(layers[0])]
    for w in layers[:-1]:
        prefix.append(prefix[-1] * w)
    for w in layers[:0:-1]:
        suffix.append(suffix[-1] * w)
    return jnp.stack([p * s for p, s in zip(prefix, suffix[::-1], strict=True)])


def margins(theta: Array, problem: Problem) -> Array:
    """``z_i = y_i <beta(theta), x_i>``, shape ``[n, *batch]``."""
    return problem.y * sum_rows(jnp.swapaxes(problem.X, 0, 1) * beta(theta)[:, None])


def logistic_loss(z: Array) -> Array:
    """Mean over data points (axis 0) of ``l(z) = log(1 + exp(-z))``, as softplus."""
    return sum_rows(jax.nn.softplus(-z)) / z.shape[0]


def loss(theta: Array, problem: Problem) -> Array:
    """Logistic loss of the diagonal network on ``problem``."""
    return logistic_loss(margins(theta, problem))


class DiagAux(NamedTuple):
    """What one gradient evaluation reports besides the gradient.

    Fields:
        loss: ``[*batch]`` loss at the evaluated parameters.
        lprime_abs: ``[*batch]`` ``|l'(z)|`` when n = 1 (the rescaling factor of
            docs/theory.md §3); for n > 1 the flow is not rescaled and this is 1.
    """

    loss: Array
    lprime_abs: Array


def _masked(g: Array, mask: Array | None) -> Array:
    return g if mask is None else g * mask


def grad_and_aux(theta: Array, problem: Problem, mask: Array | None) -> tuple[Array, DiagAux]:
    """Explicit gradient of docs/theory.md §1, ``[L_max, d, *batch]``, padding rows zero.

    ``dLoss/dw^(l)_j = (1/n) sum_i l'(z_i) y_i x_ij prod_{k != l} w^(k)_j`` with
    ``l'(z) = -sigmoid(-z)``; ``mask`` from :func:`layer_mask`, or None when no row is
    padding.
    """
    z = margins(theta, problem)
    lprime = -jax.nn.sigmoid(-z)
    n = problem.X.shape[0]
    c = sum_rows((lprime * problem.y)[:, None] * problem.X) / n
    g = _masked(c[None] * exclusive_products(theta), mask)
    rescale = -lprime[0] if n == 1 else jnp.ones_like(z[0])
    return g, DiagAux(loss=logistic_loss(z), lprime_abs=rescale)


def ascent_direction(theta: Array, problem: Problem, mask: Array | None) -> Array:
    """For one data point, ``-y x_j prod_{k != l} w^(k)_j``: the gradient over ``|l'(z)|``.

    With one point the gradient is ``l'(z) y x * P`` and ``l'(z) < 0``, so this is a
    positive multiple of it (docs/theory.md §3). A scale-invariant perturbation rule gets
    the same ``eps`` from it without evaluating ``l'(z)``: the ascent step costs no
    sigmoid, and the direction survives where ``l'(z)`` underflows.
    """
    if problem.X.shape[0] != 1:
        raise ValueError("ascent_direction needs exactly one data point")
    return _masked(-(problem.y[0] * problem.X[0])[None] * exclusive_products(theta), mask)


def major_coordinate(problem: Problem) -> int:
    """The major coordinate (1-based) of ``problem`` (docs/theory.md §6).

    One point: ``argmax_j mu_j``. ``n`` points: the coordinate of the largest ``|beta_j|``
    in the l1 max-margin direction ``argmax_{||beta||_1 <= 1} min_i y_i <x_i, beta>``
    (a linear program, HiGHS), which for one point is ``e_argmax mu``; a tie goes to the
    first coordinate; data that are not separable (margin <= 0) have no such direction
    and use ``argmax_j |sum_i y_i x_ij|`` instead.
    """
    from scipy.optimize import linprog

    X, y = np.asarray(problem.X), np.asarray(problem.y)
    n, d = X.shape
    if n == 1:
        return int(np.argmax(X[0])) + 1
    # Variables p, q >= 0 (beta = p - q) and the margin t; maximise t.
    signed = y[:, None] * X
    cost = np.r_[np.zeros(2 * d), -1.0]
    rows = np.c_[-signed, signed, np.ones(n)]  # t - y_i <x_i, beta> <= 0
    budget = np.r_[np.ones(2 * d), 0.0][None]  # ||beta||_1 <= 1
    bounds = [(0, None)] * (2 * d) + [(None, None)]
    res = linprog(cost, A_ub=np.r_[rows, budget], b_ub=np.r_[np.zeros(n), 1.0], bounds=bounds)
    if res.status == 0 and -res.fun > 0:
        direction = np.abs(res.x[:d] - res.x[d : 2 * d])
    else:
        direction = np.abs(signed.sum(axis=0))
    return int(np.argmax(direction)) + 1
