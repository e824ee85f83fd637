"""Initialisations of the diagonal network, all returning ``theta0`` ``[L_max, d]``.

Rows ``depth..L_max-1`` are padding (ones, see :mod:`samflow.model`). The uniform and
per-coordinate forms are *balanced*: every real layer equals the same vector alpha,
and stays equal under every method (the gradients of equal layers are equal).
"""

from __future__ import annotations

import numpy as np

from samflow.errors import InputError


def check_depth(depth: int) -> int:
    if int(depth) != depth or depth < 1:
        raise InputError(f"depth must be an integer >= 1, got {depth}")
    return int(depth)


def check_alpha(alpha: np.ndarray | float, name: str = "alpha") -> np.ndarray:
    """Positive, finite initialisation scales."""
    a = np.atleast_1d(np.asarray(alpha, dtype=np.float64))
    if not np.all(np.isfinite(a)):
        raise InputError(f"{name} must be finite, got {a.tolist()}")
    if np.any(a <= 0):
        raise InputError(f"{name} must be > 0, got {a.tolist()}")
    return a


def balanced(alpha: np.ndarray | float, d: int, depth: int, n_layers: int | None = None):
    """``w^(l) = alpha`` (a scalar or a ``[d]`` vector) for every real layer l.

    Returns a float64 NumPy array ``[n_layers, d]`` (``n_layers`` defaults to depth).
    """
    depth = check_depth(depth)
    n_layers = depth if n_layers is None else n_layers
    a = check_alpha(alpha)
    if a.size not in (1, d):
        raise InputError(f"alpha has {a.size} entries but mu has d = {d}")
    theta = np.ones((n_layers, d))
    theta[:depth] = np.broadcast_to(a, (d,))
    return theta


def from_array(theta0: np.ndarray, d: int, n_layers: int | None = None) -> np.ndarray:
    """A given ``[L, d]`` initialisation, padded to ``[n_layers, d]`` with ones."""
    theta0 = np.asarray(theta0, dtype=np.float64)
    if theta0.ndim != 2:
        raise InputError(f"theta0 must have shape (L, d), got {theta0.shape}")
    if theta0.shape[1] != d:
        raise InputError(f"theta0 has d = {theta0.shape[1]} but mu/data has d = {d}")
    if not np.all(np.isfinite(theta0)):
        raise InputError("theta0 contains NaN or inf")
    L = theta0.shape[0]
    n_layers = L if n_layers is None else n_layers
    return np.concatenate([theta0, np.ones((n_layers - L, d))], axis=0)


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
