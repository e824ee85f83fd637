"""L-layer linear diagonal network with logistic loss (THEORY sections 1 and 7b).

Parameters are one array ``theta`` of shape ``[L_max, d]``; row ``l`` is the layer
``w^(l+1)``. A network of depth ``L <= L_max`` keeps rows ``L..L_max-1`` equal to one:
they contribute a factor one to ``beta``, and :func:`layer_mask` zeroes their gradient,
so they are never perturbed, never updated and never counted in a norm. Depth can then
vary inside one compiled, vmapped program.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array


class Problem(NamedTuple):
    """A binary classification data set.

    Fields:
        X: ``[n, d]`` inputs.
        y: ``[n]`` labels in {-1, +1}.
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
    """``[n_layers, 1]`` mask, one for the ``depth`` real layers, zero for padding."""
    mask = jnp.arange(n_layers)[:, None] < depth
    return mask.astype(dtype if dtype is not None else jnp.result_type(float))


def pad_theta(theta: Array, n_layers: int) -> Array:
    """Pad ``theta`` ``[L, d]`` to ``[n_layers, d]`` with layers of ones."""
    L, d = theta.shape
    if L > n_layers:
        raise ValueError(f"depth {L} exceeds the padded depth {n_layers}")
    return jnp.concatenate([theta, jnp.ones((n_layers - L, d), theta.dtype)], axis=0)


def beta(theta: Array) -> Array:
    """Predictor ``beta = w^(1) * ... * w^(L)`` (elementwise), ``[L_max, d] -> [d]``.

    Padding rows are ones, so the product over all rows is the depth-L predictor.
    """
    return jnp.prod(theta, axis=0)


def exclusive_products(theta: Array) -> Array:
    """``P[l, j] = prod_{k != l} theta[k, j]`` by prefix and suffix products, no division.

    Division would fail where a weight is zero; the prefix/suffix form is exact there.
    """
    ones = jnp.ones_like(theta[:1])
    prefix = jnp.concatenate([ones, jnp.cumprod(theta[:-1], axis=0)], axis=0)
    suffix = jnp.concatenate([jnp.cumprod(theta[:0:-1], axis=0)[::-1], ones], axis=0)
    return prefix * suffix


def margins(theta: Array, problem: Problem) -> Array:
    """``z_i = y_i <beta(theta), x_i>``, shape ``[n]``."""
    return problem.y * (problem.X @ beta(theta))


def logistic_loss(z: Array) -> Array:
    """Mean of ``l(z) = log(1 + exp(-z))``, computed as softplus for stability."""
    return jnp.mean(jax.nn.softplus(-z))


def loss(theta: Array, problem: Problem) -> Array:
    """Logistic loss of the diagonal network on ``problem``."""
    return logistic_loss(margins(theta, problem))


class DiagAux(NamedTuple):
    """What one gradient evaluation reports besides the gradient.

    Fields:
        loss: scalar loss at the evaluated parameters.
        lprime_abs: scalar ``|l'(z)|`` when n = 1 (the rescaling factor of
            THEORY section 3); for n > 1 the flow is not rescaled and this is 1.
    """

    loss: Array
    lprime_abs: Array


def grad_and_aux(theta: Array, problem: Problem, mask: Array) -> tuple[Array, DiagAux]:
    """Explicit gradient of THEORY section 1, ``[L_max, d]``, padding rows zero.

    ``dLoss/dw^(l)_j = (1/n) sum_i l'(z_i) y_i x_ij prod_{k != l} w^(k)_j`` with
    ``l'(z) = -sigmoid(-z)``.
    """
    z = margins(theta, problem)
    lprime = -jax.nn.sigmoid(-z)
    c = jnp.mean((lprime * problem.y)[:, None] * problem.X, axis=0)
    g = c[None, :] * exclusive_products(theta) * mask
    rescale = -lprime[0] if problem.X.shape[0] == 1 else jnp.ones((), theta.dtype)
    return g, DiagAux(loss=logistic_loss(z), lprime_abs=rescale)
