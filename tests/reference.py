"""Independent NumPy float64 reference: plain loops over the formulas of THEORY 1-2.

Nothing here imports samflow: it is the yardstick the engine is measured against.
"""

from __future__ import annotations

import math

import numpy as np


def lprime(z: float) -> float:
    """l'(z) = -1 / (1 + exp(z))."""
    return -1.0 / (1.0 + math.exp(z)) if z < 700 else 0.0


def grad(W: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """dLoss/dW for W [L, d] by explicit loops."""
    L, d = W.shape
    n = X.shape[0]
    beta = np.ones(d)
    for l in range(L):
        beta = beta * W[l]
    g = np.zeros((L, d))
    for i in range(n):
        z = y[i] * float(np.dot(beta, X[i]))
        for l in range(L):
            for j in range(d):
                others = 1.0
                for k in range(L):
                    if k != l:
                        others *= W[k, j]
                g[l, j] += lprime(z) * y[i] * X[i, j] * others / n
    return g


def margin(W: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    return y * (X @ np.prod(W, axis=0))


def step(W, X, y, method, rho, eta):
    """One GD / SAM step; returns (new W, |l'(z~)| at the perturbed point for n = 1)."""
    g = grad(W, X, y)
    if method == "gd":
        eps = np.zeros_like(g)
    elif method == "sam-l2":
        eps = g / math.sqrt(float(np.sum(g * g)))
    elif method == "sam-linf":
        eps = np.sign(g)
    elif method == "usam":
        eps = g
    else:
        raise ValueError(method)
    W_adv = W + rho * eps
    z_adv = margin(W_adv, X, y)[0]
    return W - eta * grad(W_adv, X, y), -lprime(z_adv)


def run(W0, X, y, method, rho, eta, steps):
    """Iterates W_0..W_steps [steps+1, L, d] and the rescaled times tau_t."""
    X, y = np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)
    Ws, taus = [np.array(W0, dtype=np.float64)], [0.0]
    for _ in range(steps):
        W, dtau = step(Ws[-1], X, y, method, rho, eta)
        Ws.append(W)
        taus.append(taus[-1] + eta * (dtau if X.shape[0] == 1 else 1.0))
    return np.array(Ws), np.array(taus)
