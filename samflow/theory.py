"""Closed forms of THEORY section 4 (balanced initialisation, one point x = mu).

Balanced means every layer equals the same vector ``alpha`` ``[d]`` (or a scalar);
all layers then stay equal to ``u(tau)`` and ``beta = u^L``. These functions are the
independent checks the engine is tested against, written straight from the algebra.
Coordinates are labelled 1..d where a label is returned.
"""

from __future__ import annotations

import numpy as np


def _vec(alpha, mu) -> tuple[np.ndarray, np.ndarray]:
    mu = np.asarray(mu, dtype=np.float64)
    return np.broadcast_to(np.asarray(alpha, dtype=np.float64), mu.shape), mu


def gd_u(alpha, mu, tau, depth: int) -> np.ndarray:
    """GD rescaled flow ``du/dtau = mu u^(L-1)`` for L = 1 and L = 2, ``[..., d]``.

    L = 1: ``u = alpha + mu tau``; L = 2: ``u = alpha exp(mu tau)``. ``tau`` may be an
    array ``[T]``, giving ``[T, d]``.
    """
    alpha, mu = _vec(alpha, mu)
    tau = np.asarray(tau, dtype=np.float64)[..., None]
    if depth == 1:
        return alpha + mu * tau
    if depth == 2:
        return alpha * np.exp(mu * tau)
    raise ValueError("closed form of the GD flow only for depth 1 and 2 (L >= 3 blows up)")


def blowup_tau(alpha, mu, depth: int, rho: float = 0.0) -> np.ndarray:
    """Per-coordinate finite blow-up time ``[d]`` for L >= 3 (``inf`` if none).

    GD (rho = 0): ``du/dtau = mu u^(L-1)`` gives ``u^-(L-2) = alpha^-(L-2) - (L-2) mu tau``,
    so ``tau_j* = alpha_j^-(L-2) / ((L-2) mu_j)``. linf-SAM with odd L: the excess
    ``v = u - rho`` obeys the same equation, ``tau_j* = (alpha_j - rho)^-(L-2) /
    ((L-2) mu_j)`` for ``alpha_j > rho``; coordinates with ``alpha_j <= rho`` never blow up.
    """
    if depth < 3:
        raise ValueError("finite-time blow-up needs depth >= 3")
    alpha, mu = _vec(alpha, mu)
    excess = alpha - rho
    with np.errstate(divide="ignore"):
        tau = excess ** (-(depth - 2.0)) / ((depth - 2) * mu)
    return np.where(excess > 0, tau, np.inf)


def linf_l2_u(alpha, mu, rho: float, tau) -> np.ndarray:
    """linf-SAM flow at L = 2: ``u_j - rho = (alpha_j - rho) exp(mu_j tau)``, ``[T, d]``.

    A coordinate with ``alpha_j < rho`` reaches 0 at ``tau = log(rho/(rho-alpha_j))/mu_j``
    and stays there (the sign of m flips at 0: Filippov sliding).
    """
    alpha, mu = _vec(alpha, mu)
    tau = np.asarray(tau, dtype=np.float64)[..., None]
    u = rho + (alpha - rho) * np.exp(mu * tau)
    return np.where(alpha < rho, np.maximum(u, 0.0), u)


def linf_limit_index(alpha, mu, rho: float) -> int:
    """linf-SAM L = 2 limit direction ``e_j*``: ``j* = argmax{mu_j : alpha_j > rho}``.

    Returns the label 1..d, or 0 when every ``alpha_j <= rho`` (beta collapses to 0).
    """
    alpha, mu = _vec(alpha, mu)
    grows = alpha > rho
    if not grows.any():
        return 0
    return int(np.argmax(np.where(grows, mu, -np.inf))) + 1


def l2sam_l1_u(alpha, mu, tau) -> np.ndarray:
    """l2-SAM at L = 1: the perturbation does not change the gradient, ``u = alpha + mu tau``."""
    return gd_u(alpha, mu, tau, 1)


def l2sam_l2_alpha_bounds(mu, rho: float) -> tuple[float, float]:
    """Instantaneous bounds at tau = 0 for uniform alpha, L = 2 (THEORY section 4).

    With ``N_0 = sqrt(2) alpha ||mu||`` and ``d log u_j/dtau = mu_j (1 - rho mu_j / N)``:
    every coordinate shrinks when ``alpha < rho mu_min / (sqrt(2) ||mu||)`` (collapse
    bound); the major coordinate grows fastest from the start when
    ``alpha >= sqrt(2) rho mu_max / ||mu||`` (direct bound). Bounds, not boundaries.
    """
    mu = np.asarray(mu, dtype=np.float64)
    norm = np.linalg.norm(mu)
    return rho * mu.min() / (np.sqrt(2) * norm), np.sqrt(2) * rho * mu.max() / norm


def l2_max_margin_direction(mu) -> np.ndarray:
    """The l2 max-margin direction for one point: ``mu / ||mu||_2``."""
    mu = np.asarray(mu, dtype=np.float64)
    return mu / np.linalg.norm(mu)


def l1_max_margin_direction(mu) -> np.ndarray:
    """The l1 max-margin direction for one point: ``e_j`` with ``j = argmax |mu_j|``."""
    mu = np.asarray(mu, dtype=np.float64)
    e = np.zeros_like(mu)
    e[np.argmax(np.abs(mu))] = 1.0
    return e
