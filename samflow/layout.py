"""Batch-last layout: reductions over small structural axes that XLA fuses.

The engine's arrays may carry trailing *batch* axes (``theta`` ``[L_max, d, *batch]``);
sweeps put their grid points there, so every formula is an elementwise loop over
contiguous memory. Sums and products over the small leading axes (layers, coordinates,
data points) then add rows one by one: XLA fuses that into the same loop, while a
reduction over a major axis would be a separate kernel that runs about half as fast.
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
from jax import Array

UNROLL_ROWS = 64
"""Leading axes up to this length are reduced row by row; longer ones by one reduction."""


def _fold_rows(x: Array, op, whole) -> Array:
    """``op`` folded over the rows of ``x`` (axis 0); ``whole(x, axis=0)`` if they are many."""
    if x.shape[0] > UNROLL_ROWS:
        return whole(x, axis=0)
    return functools.reduce(op, list(x))


def sum_rows(x: Array) -> Array:
    """Sum over axis 0: ``[k, *rest] -> [*rest]``."""
    return _fold_rows(x, jnp.add, jnp.sum)


def prod_rows(x: Array) -> Array:
    """Product over axis 0: ``[k, *rest] -> [*rest]``."""
    return _fold_rows(x, jnp.multiply, jnp.prod)


def max_rows(x: Array) -> Array:
    """Maximum over axis 0: ``[k, *rest] -> [*rest]`` (logical or for booleans)."""
    return _fold_rows(x, jnp.maximum, jnp.max)


def min_rows(x: Array) -> Array:
    """Minimum over axis 0: ``[k, *rest] -> [*rest]`` (logical and for booleans)."""
    return _fold_rows(x, jnp.minimum, jnp.min)


def argmax_rows(x: Array) -> Array:
    """Index of the first largest row, ``[k, *rest] -> [*rest]`` int32, as ``jnp.argmax``.

    Unrolled as a running maximum. A NaN row wins, as it does in ``jnp.argmax``.
    """
    if x.shape[0] > UNROLL_ROWS:
        return jnp.argmax(x, axis=0).astype(jnp.int32)
    best, index = x[0], jnp.zeros(x.shape[1:], jnp.int32)
    for j in range(1, x.shape[0]):
        wins = (x[j] > best) | (jnp.isnan(x[j]) & ~jnp.isnan(best))
        best = jnp.where(wins, x[j], best)
        index = jnp.where(wins, j, index)
    return index


def sum_leading(x: Array, batch_ndim: int) -> Array:
    """Sum over every axis but the trailing ``batch_ndim``: ``[*s, *batch] -> [*batch]``."""
    if batch_ndim == 0:
        return jnp.sum(x)
    batch = x.shape[x.ndim - batch_ndim :]
    return sum_rows(x.reshape(-1, *batch))
