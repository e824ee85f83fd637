"""Initialisations of the diagonal network, all returning ``theta0`` ``[L_max, d]``.

Rows ``depth..L_max-1`` are padding (ones, see :mod:`samflow.model`). The uniform and
per-coordinate forms are *balanced*: every real layer equals the same vector alpha,
and stays equal under every method (the gradients of equal layers are equal).
"""

from __future__ import annotations

import numpy as np

from samflow.errors import InputError
from samflow.inputs import check_alpha, check_depth, real_array


def layer_rows(depth, n_layers: int) -> np.ndarray:
    """``[C, n_layers, 1]`` bool: which rows are real layers for each depth of ``depth``
    (a number or ``[C]``); the rest are padding (ones, see :mod:`samflow.model`)."""
    depth = np.reshape(np.asarray(depth), (-1, 1, 1))
    return np.arange(n_layers)[None, :, None] < depth


def pad_layers(theta: np.ndarray, n_layers: int) -> np.ndarray:
    """``theta`` ``[..., L, d]`` padded with layers of ones to ``[..., n_layers, d]``."""
    theta = np.asarray(theta, dtype=np.float64)
    *lead, L, d = theta.shape
    if L > n_layers:
        raise InputError(f"depth {L} exceeds the padded depth {n_layers}")
    return np.concatenate([theta, np.ones((*lead, n_layers - L, d))], axis=-2)


def balanced_start(alpha: np.ndarray | float, d: int, depth: int, n_layers: int | None = None):
    """``w^(l) = alpha`` (a scalar or a ``[d]`` vector) for every real layer l.

    Returns a float64 NumPy array ``[n_layers, d]`` (``n_layers`` defaults to depth).
    """
    depth = check_depth(depth)
    n_layers = depth if n_layers is None else n_layers
    a = check_alpha(alpha)
    if a.size not in (1, d):
        raise InputError(f"alpha has {a.size} entries but mu has d = {d}")
    return pad_layers(np.broadcast_to(a, (depth, d)), n_layers)


def from_array(theta0: np.ndarray, d: int, n_layers: int | None = None) -> np.ndarray:
    """A given ``[L, d]`` initialisation, padded to ``[n_layers, d]`` with ones."""
    theta0 = real_array("theta0", theta0, ndim=2)
    if theta0.shape[1] != d:
        raise InputError(f"theta0 has d = {theta0.shape[1]} but mu/data has d = {d}")
    return pad_layers(theta0, theta0.shape[0] if n_layers is None else n_layers)


def random_scales(
    seed: int, d: int, low: float, high: float, log_uniform: bool = True
) -> np.ndarray:
    """Per-coordinate scales alpha_j drawn from [low, high], log-uniform by default."""
    check_alpha([low, high], "alpha range")
    rng = np.random.default_rng(seed)
    if log_uniform:
        return np.exp(rng.uniform(np.log(low), np.log(high), size=d))
    return rng.uniform(low, high, size=d)


def is_balanced(theta0: np.ndarray, depth: int) -> bool:
    """True when every real layer is the same vector and all its entries are > 0."""
    real = np.asarray(theta0)[:depth]
    return bool(np.all(real == real[:1]) and np.all(real > 0))
