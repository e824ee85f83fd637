"""Independent NumPy float64 reference: plain loops over the formulas of
docs/theory/setting.md#setting, 2 and 6.

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


def summarize(
    beta,
    tau,
    loss,
    valid,
    failed=False,
    collapse_factor=1e-3,
    plateau_fraction=0.5,
    *,
    major,
    max_leaders=8,
    fate=0,
    collapse_by_records=False,
):
    """docs/theory/regimes.md#definitions for one trajectory ``beta`` ``[T, d]``, by plain loops,
    with the leader path read from the records, ``major`` the major coordinate (1-based) and
    ``fate`` what decided the run (0 open, 1 settled, 2 collapse, 3 finite, 4 blow-up:
    docs/theory/regimes.md#labels-of-the-limit; a regime only where it is decided).

    Returns the same names as ``samflow.regimes.summarize`` (per-record ``dominant``).
    """
    T, d = beta.shape
    finite = [
        bool(np.all(np.isfinite(beta[t])) and np.isfinite(np.abs(beta[t]).sum())) for t in range(T)
    ]
    ok = [bool(valid[t]) and finite[t] for t in range(T)]
    failed = bool(failed) or any((valid[t] or t == 0) and not finite[t] for t in range(T))
    D = []
    for t in range(T):
        m = np.abs(beta[t])
        tied = np.count_nonzero(m == m.max()) > 1 or m.max() == 0  # top shared, or beta = 0
        D.append(0 if not ok[t] or tied else int(np.argmax(m)) + 1)
    path, path_tau = [], []
    for t in range(T):
        if D[t] > 0 and (not path or D[t] != path[-1]):
            path.append(D[t])
            path_tau.append(tau[t])
    horizon = max([t for t in range(T) if ok[t]], default=0)
    norm0 = np.abs(beta[0]).sum()
    normT = np.abs(beta[horizon]).sum()
    later = [t for t in range(1, T) if ok[t]]
    major_leads = path.count(major)
    if failed:
        regime = -1
    elif fate == 2 or (collapse_by_records and later and normT < collapse_factor * norm0):
        regime = 1
    elif fate == 3:
        regime = 7  # finite
    elif fate not in (1, 4) or not path:
        regime = 0  # unresolved: not decided, or no leader
    elif path == [major]:
        regime = 3  # direct
    elif path[-1] == major and major_leads == 1:
        regime = 2  # sequential: minor first, major once, last
    elif path[-1] == major:
        regime = 4  # returned
    elif major_leads:
        regime = 5  # major_lost
    else:
        regime = 6  # minor_end
    before = [t for t in range(horizon) if ok[t]]
    converged = bool(later) and bool(before)
    if converged:
        converged = np.abs(beta[horizon] - beta[before[-1]]).sum() / normT < 1e-9
    if regime != 0:
        reason = 0
    elif not path:
        reason = 4  # no leader
    elif converged:
        reason = 3  # slowing
    elif normT < norm0:
        reason = 2  # shrinking
    else:
        reason = 1  # growing
    if regime == 1:
        limit = 0
    elif regime == -1:
        limit = -1
    elif regime == 7:
        limit = -2
    elif regime == 0 and converged and loss[horizon] == 0:
        limit = -3  # stalled: the loss underflowed, nothing moves
    elif not path:
        limit = -4  # no coordinate ever led
    elif regime == 0:
        limit = -5  # not decided
    else:
        limit = path[-1]
    takeover = np.full(d, np.nan)
    for j in range(d):
        if j + 1 in path:
            takeover[j] = path_tau[path.index(j + 1)]
    low = [t for t in range(1, T) if ok[t] and loss[t] <= plateau_fraction * loss[0]]
    kept = path if len(path) <= max_leaders else path[: max_leaders - 1] + path[-1:]
    return {
        "regime": regime,
        "unresolved_reason": reason,
        "stop_leader": path[-1] if path else 0,
        "limit_coord": limit,
        "first_amplified": path[0] if path else 0,
        "dominant": np.array(D),
        "n_handoffs": max(len(path) - 1, 0),
        "n_leaders": len(path),
        "leader_path": np.array(kept + [0] * (max_leaders - len(kept))),
        "takeover_tau": takeover,
        "plateau_end_tau": tau[low[0]] if low else np.nan,
        "final_direction": beta[horizon] / normT if normT > 0 else np.zeros(d),
        "beta_norm": np.array([np.abs(beta[t]).sum() if ok[t] else np.nan for t in range(T)]),
    }
