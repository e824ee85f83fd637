"""The paper's theorems as ensemble checks against independent solutions.

- Theorem 3.1 (L = 1): GD, l2-SAM and linf-SAM turn beta towards the l2 max-margin
  (hard-margin SVM) direction, on 20 random separable data sets, against a QP that
  SciPy solves here.
- Theorem 4.2 (L = 2): l2-SAM (and GD) turn beta towards the l1 max-margin direction,
  on 20 random separable data sets, against a linear program (``scipy.optimize.linprog``).
- Corollary 3.5 (L = 2, 3, 4): the limit of balanced linf-SAM on one point is
  ``e_j*``, ``j* = argmax{mu_j (alpha_j - rho)^(L-2) : alpha_j > rho}``, on 200 random
  alpha vectors, against that closed form (``samflow.theory.linf_limit_index``, whose
  derivation docs/theory/balanced.md#balanced-linf-sam gives) recomputed here in NumPy.

Each prints the fraction that agrees (``pytest -s``); the thresholds say why they are
what they are. Directional convergence is slow (``1 - cos ~ 1/log(t)^2`` at L = 1,
the normalised margin's gap ``~ 1/log(t)`` at L = 2), so the flows run in plain time to
``t = 1e30`` (L = 1) and ``1e200`` (L = 2): cheap for an adaptive solver once the loss
is tiny, hopeless for discrete steps.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linprog, minimize

import samflow
from samflow.figures._engine import on_datasets
from samflow.regimes import LIMIT_OPEN, UNRESOLVED
from samflow.rules import get_rule
from samflow.runners import Discrete, Flow, LogSpaced
from samflow.sweeps.axes import make_axis
from samflow.sweeps.spec import SweepSpec
from samflow.theory import linf_limit_index

N_SETS, N_POINTS, D = 20, 8, 3
SOLVER = {"rtol": 1e-6, "atol": 1e-9, "max_steps": 100_000}


def signed_data(seed: int, n: int = N_POINTS, d: int = D) -> np.ndarray:
    """``y_i x_i`` ``[n, d]``: Gaussian ``x_i`` labelled by a Gaussian teacher (separable)."""
    rng = np.random.default_rng(seed)
    X, teacher = rng.normal(size=(n, d)), rng.normal(size=d)
    return X * np.sign(X @ teacher)[:, None]


def svm_direction(Z: np.ndarray) -> np.ndarray:
    """Unit hard-margin SVM direction: ``min ||w||_2^2`` s.t. ``Z w >= 1``.

    By its dual ``min_a ||Z^T a||^2 / 2 - sum(a)``, ``a >= 0`` (L-BFGS-B), ``w = Z^T a``,
    then polished on the support set ``S``: ``Z_S Z_S^T a_S = 1``. The KKT conditions
    (``a_S > 0``, every margin ``>= 1``) are checked, so a wrong support set fails here.
    """
    G = Z @ Z.T
    res = minimize(
        lambda a: (0.5 * a @ G @ a - a.sum(), G @ a - 1),
        np.zeros(len(Z)),
        jac=True,
        method="L-BFGS-B",
        bounds=[(0, None)] * len(Z),
        options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 10_000},
    )
    support = res.x > 1e-6 * res.x.max()
    a = np.linalg.solve(G[np.ix_(support, support)], np.ones(support.sum()))
    w = Z[support].T @ a
    assert np.all(a > 0) and np.min(Z @ w) > 1 - 1e-9, (res.message, a, Z @ w)
    return w / np.linalg.norm(w)


def l1_max_margin(Z: np.ndarray) -> tuple[np.ndarray, float]:
    """The l1 max-margin solution: ``max gamma`` s.t. ``Z beta >= gamma``, ``||beta||_1 = 1``.

    As a linear program in ``beta = p - q``, ``p, q >= 0``, ``sum(p + q) = 1``.
    Returns ``beta`` ``[d]`` (unit l1 norm) and the margin ``gamma*``.
    """
    n, d = Z.shape
    res = linprog(
        np.r_[np.zeros(2 * d), -1.0],
        A_ub=np.c_[-Z, Z, np.ones(n)],
        b_ub=np.zeros(n),
        A_eq=np.r_[np.ones(2 * d), 0.0][None],
        b_eq=[1.0],
        bounds=[(0, None)] * (2 * d) + [(None, None)],
    )
    assert res.status == 0, res.message
    return res.x[:d] - res.x[d : 2 * d], -res.fun


def data_spec(
    method: str, depth: int, rhos, alpha: float, d: int, t_max: float, n: int = N_POINTS
) -> SweepSpec:
    """A flow on ``n`` points in ``d`` dimensions, one grid point per rho."""
    shape = (tuple((0.0,) * d for _ in range(n)), (1.0,) * n)
    return SweepSpec(
        rule=get_rule(method),
        runner=Flow(tau_max=t_max, **SOLVER),
        depth=depth,
        axes=(make_axis("rho", rhos),),
        alpha=alpha,
        data=shape,
    )


def log_times(t_max: float) -> np.ndarray:
    return np.r_[0.0, np.geomspace(1e-2, t_max, 120)]


def test_theorem_3_1_depth_1_flows_find_the_l2_max_margin():
    """GD (rho = 0) and l2-SAM (rho = 0.2), flows to t = 1e200."""
    Z = np.stack([signed_data(s) for s in range(N_SETS)])
    w_svm = np.repeat(np.stack([svm_direction(z) for z in Z]), 2, axis=0)
    rhos = (0.0, 0.2)
    spec = data_spec("sam-l2", 1, rhos, alpha=0.1, d=D, t_max=1e200)
    out = on_datasets(spec, np.repeat(Z, 2, axis=0), log_times(1e200))
    assert not out["solver_failed"].any()
    beta = out["beta"][:, -1]
    cos = np.sum(beta * w_svm, axis=1) / np.linalg.norm(beta, axis=1)
    for r, rho in enumerate(rhos):
        c = cos[r::2]
        print(
            f"Theorem 3.1 flow rho={rho}: cos >= 0.9999 on {np.mean(c >= 0.9999):.0%}, "
            f"min {c.min():.6f}"
        )
        # 1 - cos ~ C / log(t)^2 with a set-dependent C = O(1): about 5e-6 C at
        # t = 1e200 (log t = 460); measured 1 - cos <= 6e-5 on every set (the slowest
        # had 2e-3 at t = 1e30). Any other direction would stay >= 1e-2 away.
        assert np.all(c >= 0.9999), (rho, np.round(c, 6))


def test_theorem_3_1_depth_1_linf_sam_finds_the_l2_max_margin():
    """linf-SAM (rho = 0.2) beside GD, discrete (eta = 1, 1e5 steps).

    Discrete, because linf-SAM's flow at L = 1 slides along sign switches of the
    gradient (``eps = sign(g)`` jumps), where the adaptive solver runs out of steps on
    most of these sets; the iterates step across them.
    """
    Z = np.stack([signed_data(s) for s in range(N_SETS)])
    w_svm = np.stack([svm_direction(z) for z in Z])
    shape = (tuple((0.0,) * D for _ in range(N_POINTS)), (1.0,) * N_POINTS)
    steps = 100_000
    cos = {}
    for label, method, rho in (("GD", "sam-l2", 0.0), ("linf-SAM", "sam-linf", 0.2)):
        spec = SweepSpec(
            rule=get_rule(method),
            runner=Discrete(eta=1.0, steps=steps),
            depth=1,
            axes=(make_axis("rho", [rho]),),
            alpha=0.1,
            data=shape,
        )
        out = on_datasets(spec, Z, np.array([0, steps]))
        # neither failed nor collapsed (n points: no certificate, so unresolved or a label)
        assert np.all((out["regime"] != -1) & (out["regime"] != 1))
        beta = out["beta"][:, -1]
        cos[label] = np.sum(beta * w_svm, axis=1) / np.linalg.norm(beta, axis=1)
    c, gd = cos["linf-SAM"], cos["GD"]
    print(
        f"Theorem 3.1 linf-SAM (discrete, 1e5 steps): cos >= 0.99 on {np.mean(c >= 0.99):.0%}, "
        f"min {c.min():.5f} (GD: min {gd.min():.5f})"
    )
    # At t = 1e5, 1 - cos ~ C / log(t)^2 = C / 130: GD itself (the theorem's classic
    # case) is at 0.974 on the slowest set, so 0.97 is what the horizon allows, and
    # linf-SAM must keep pace with GD (the approach need not be monotone: cos can dip
    # as the support vectors change).
    assert np.all(c >= 0.97), np.round(c, 5)
    assert np.mean(c >= 0.99) >= 0.8, np.round(c, 5)
    assert np.all(np.abs(c - gd) <= 5e-3), np.round(c - gd, 5)


@pytest.mark.slow
def test_theorem_4_2_depth_2_finds_the_l1_max_margin():
    """L = 2 on n = 6 points in d = 8 (the l1 and l2 max-margin directions differ), on
    doubled features ``(x, -x)``: a balanced positive start then reaches every sign of
    ``beta = beta_+ - beta_-`` (the usual ``u^2 - v^2`` model)."""
    n, d = 6, 8
    Z = np.stack([signed_data(s, n, d) for s in range(N_SETS)])
    rhos = (0.0, 0.5)  # GD and l2-SAM at alpha / rho = 1
    spec = data_spec("sam-l2", 2, rhos, alpha=0.5, d=2 * d, t_max=1e200, n=n)
    times = log_times(1e200)
    out = on_datasets(spec, np.repeat(np.concatenate([Z, -Z], axis=2), 2, axis=0), times)
    beta = out["beta"][..., :d] - out["beta"][..., d:]  # [2K, T, d]
    ok = ~out["solver_failed"].astype(bool)
    at = [np.searchsorted(times, 1e30), len(times) - 1]
    for r, rho in enumerate(rhos):
        ratio, cos, svm_ratio = [], [], []
        for k in np.where(ok[r::2])[0]:
            b = beta[2 * k + r, at]  # [2, d] at t = 1e30 and 1e200
            w, gamma = l1_max_margin(Z[k])
            ratio.append(np.min(b @ Z[k].T, axis=1) / np.sum(np.abs(b), axis=1) / gamma)
            cos.append(b[-1] @ w / (np.linalg.norm(b[-1]) * np.linalg.norm(w)))
            s = svm_direction(Z[k])
            svm_ratio.append(np.min(Z[k] @ s) / np.sum(np.abs(s)) / gamma)
        ratio, cos, svm_ratio = np.array(ratio), np.array(cos), np.array(svm_ratio)
        print(
            f"Theorem 4.2 rho={rho}: {len(ratio)}/{N_SETS} solved; l1 margin / LP margin at "
            f"t = 1e200: mean {ratio[:, 1].mean():.4f}, min {ratio[:, 1].min():.4f} (1e30: "
            f"mean {ratio[:, 0].mean():.4f}); cos with the LP solution >= 0.99 on "
            f"{np.mean(cos >= 0.99):.0%}; the l2 SVM direction's ratio: mean "
            f"{svm_ratio.mean():.4f}, max {svm_ratio.max():.4f}"
        )
        # The solver may give up on a SAM run (sign switches near beta_j = 0): not
        # evidence either way, but nearly all must be solved.
        assert len(ratio) >= 0.9 * N_SETS
        # The normalised l1 margin closes in on the LP's slowly (measured: from 0.92-0.99
        # at t = 1e30 to 0.95-0.998 at 1e200); it must be rising on every set, within 6%
        # at the end, and beyond what the l2 max-margin direction (0.72-0.94 here) gets:
        # the bias is towards l1, not l2.
        assert np.all(ratio[:, 1] > ratio[:, 0])
        assert np.all(ratio[:, 1] >= 0.94), np.round(ratio[:, 1], 4)
        assert np.all(ratio[:, 1] > svm_ratio), np.round(ratio[:, 1] - svm_ratio, 4)


def predicted_limit(alpha: np.ndarray, mu: np.ndarray, rho: float, depth: int) -> int:
    """Corollary 3.5 in NumPy, from the blow-up times of the excess ``alpha - rho``."""
    above = alpha > rho
    if not above.any():
        return -2 if depth % 2 else 0  # odd L: each u_j creeps up to rho; even L: to 0
    if depth == 2:  # u_j - rho = (alpha_j - rho) e^(mu_j tau): the fastest rate wins
        return int(np.argmax(np.where(above, mu, -1))) + 1
    with np.errstate(divide="ignore"):
        tau_star = np.where(above, 1 / ((depth - 2) * mu * (alpha - rho) ** (depth - 2)), np.inf)
    return int(np.argmin(tau_star)) + 1


def settle_time(alpha: np.ndarray, mu: np.ndarray, rho: float, depth: int) -> float:
    """When the closed form decides the limit: the slowest coordinate below rho reaches
    0 (even L; the time of ``|v|^-(L-2) = |v_0|^-(L-2) - (L-2) mu tau`` at ``|v| = rho``)."""
    below = alpha < rho
    if depth % 2 or not below.any() or (alpha > rho).any():
        return 0.0
    if depth == 2:
        return float(np.max(np.log(rho / (rho - alpha[below])) / mu[below]))
    v0 = rho - alpha[below]
    return float(np.max((v0 ** (2 - depth) - rho ** (2 - depth)) / ((depth - 2) * mu[below])))


def test_corollary_3_5_linf_limit_on_random_alpha():
    mu, rho, tau_max = np.array([1.0, 2.0, 3.0, 4.0]), 0.5, 1000.0
    ds = samflow.sweep(
        "sam-linf",
        depth=2,
        mu=mu,
        rho=rho,
        axes={"seed": "0:199:200", "depth": [2, 3, 4]},
        alpha_range=(0.1, 2.0),
        runner=Flow(tau_max=tau_max, save=LogSpaced(79), rtol=1e-6, atol=1e-9, max_steps=20_000),
    )
    alphas = ds["seed_alpha"].values
    for k, depth in enumerate(ds["depth"].values.tolist()):
        one = ds.isel(depth=k)
        measured = one["limit_coord"].values  # the product's output, as it is
        decided = one["regime"].values != UNRESOLVED
        pred = np.array([predicted_limit(a, mu, rho, depth) for a in alphas])
        assert np.array_equal(pred, [linf_limit_index(a, mu, rho, depth) for a in alphas])
        settled = np.array([settle_time(a, mu, rho, depth) for a in alphas]) < tau_max
        agree = measured == pred
        print(
            f"Corollary 3.5 L={depth}: measured = predicted on {agree.mean():.1%} of 200; "
            f"decided {decided.mean():.1%}, of which {agree[decided].mean():.1%} agree; "
            f"{settled.sum()} settled by tau = {tau_max:g} in the closed form"
        )
        # A decided run names its limit, and the closed form is exact for the flow: every
        # decided run must agree. An undecided one says so (limit_coord -5), never a
        # leader. Nearly every run is decided by the horizon: odd L by the certificate
        # (every alpha_j <= rho: finite) or the blow-up, even L by the certificate of
        # L = 2 or the collapse event; the rest (alpha_j within ~1e-3 rho of rho at
        # L = 4) is still on its way.
        assert agree[decided].all(), np.where(~agree & decided)[0]
        assert (measured[~decided] == LIMIT_OPEN).all()
        assert decided[settled].mean() >= 0.95
