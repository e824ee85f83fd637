r"""Figure 6: at depth 1 every method finds the l2 max-margin direction of mu.

One point x = mu = (1, 2, 3, 4), discrete runs with eta = 0.1 from the unbalanced
start alpha = (0.4, 0.2, 0.1, 0.05) (minor coordinates large, so the cosine starts
at 0.51). L = 1 (left): GD, l2-SAM and linf-SAM (rho = 0.25) all turn beta towards
\(\mu/\lVert \mu\rVert\): the gradient of a linear model does not depend on w, so the perturbation
only changes the speed, \(\beta = \alpha + \tau \mu\) in rescaled time for all three
(white dotted: that closed form at each run's own tau, a check). L = 2 (right, the
contrast): l2-SAM turns towards e_4, the l1 max-margin direction (cosine
\(4/\lVert \mu\rVert = 0.73\)), GD too but more slowly, and linf-SAM to e_1 (cosine 0.18): only
alpha_1 starts above rho (docs/theory/balanced.md#balanced-initialisation, the
initialisation-dependent limit).

Third panel: L = 1 on many points (docs/theory/controls.md#depth-1-many-points). n = 8 Gaussian
points in d = 3 labelled by the teacher (1, -1, 0.5) (seed 0), balanced start alpha = 0.1,
the SAM gradient flows (plain time t, records log-spaced from t = 0.01) of GD (l2-SAM
with rho = 0), l2-SAM and linf-SAM with rho = 0.2 (at rho = 0.5 the linf flow's solver
runs out of steps, a sign switching). Each is compared with the hard-margin SVM
direction, the QP \(\min \lVert w\rVert^2\) s.t. \(y_i \langle x_i, w\rangle \ge 1\) solved by
SciPy's SLSQP, independently of samflow: \(1 - \cos(\beta, w_{\mathrm{svm}})\) falls like
\(1/\log(t)^2\) or faster. Horizon t = 1e8 (quick) or 1e30 (full); the final cosines are in the
legend and in the ``svm_*`` files.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from scipy.optimize import minimize

from samflow.figures._engine import MU, figure_spec, flow_times, log_steps, sweep
from samflow.plotting import OKABE_ITO, mu_label, save_figure_set
from samflow.sweeps.axes import parse_axis
from samflow.theory import l1_max_margin_direction, l2_max_margin_direction

ALPHA = (0.4, 0.2, 0.1, 0.05)
RHO, ETA = 0.25, 0.1
METHODS = {  # label: (engine method, rho); GD is l2-SAM with rho = 0 (eps scaled by rho)
    "GD": ("sam-l2", 0.0),
    "l2-SAM": ("sam-l2", RHO),
    "linf-SAM": ("sam-linf", RHO),
}
STYLE = {
    "GD": {"color": OKABE_ITO[7], "ls": "-"},
    "l2-SAM": {"color": OKABE_ITO[4], "ls": "--"},
    "linf-SAM": {"color": OKABE_ITO[3], "ls": "-."},
}


N_POINTS, D_DATA, TEACHER = 8, 3, (1.0, -1.0, 0.5)
ALPHA_DATA, RHO_DATA, T_MIN = 0.1, 0.2, 1e-2
SVM_METHODS = {
    "GD": ("sam-l2", 0.0),
    "l2-SAM": ("sam-l2", RHO_DATA),
    "linf-SAM": ("sam-linf", RHO_DATA),
}
KEYS = {"GD": "gd", "l2-SAM": "l2sam", "linf-SAM": "linfsam"}


def make_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``X`` ``[n, d]`` standard Gaussian, ``y`` ``[n]`` the teacher's signs: separable."""
    X = np.random.default_rng(seed).normal(size=(N_POINTS, D_DATA))
    return X, np.where(X @ np.asarray(TEACHER) > 0, 1.0, -1.0)


def svm_direction(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Unit hard-margin SVM direction without bias: ``min ||w||^2``, ``y_i <x_i, w> >= 1``."""
    margins = y[:, None] * X
    res = minimize(
        lambda w: w @ w,
        np.zeros(X.shape[1]),
        jac=lambda w: 2 * w,
        constraints=[{"type": "ineq", "fun": lambda w: margins @ w - 1, "jac": lambda w: margins}],
        method="SLSQP",
        options={"ftol": 1e-15, "maxiter": 1000},
    )
    if not res.success or np.min(margins @ res.x) < 1 - 1e-8:
        raise RuntimeError(f"SVM QP did not converge: {res.message}")
    return res.x / np.linalg.norm(res.x)


def run_data(quick: bool) -> dict:
    """The L = 1 flows on the data set, each with ``cos_svm(time)``."""
    t_max = 1e8 if quick else 1e30
    X, y = make_data()
    w_svm = svm_direction(X, y)
    data = (tuple(map(tuple, X.tolist())), tuple(y.tolist()))
    out = {}
    for label, (method, rho) in SVM_METHODS.items():
        spec = figure_spec(
            method,
            "flow",
            depth=1,
            axes=(parse_axis(f"rho={rho}"),),
            alpha=ALPHA_DATA,
            data=data,
            tau_max=t_max,
            save_trajectories=True,
            to_fate=False,
        )
        ds = sweep(spec, quick=quick, times=flow_times(t_max, quick, tau_min=T_MIN))
        ds = ds.squeeze("rho")
        ds["X"] = (("point", "coord"), X, {"long_name": "inputs x_i"})
        ds["y"] = ("point", y, {"long_name": "labels y_i"})
        ds["w_svm"] = ("coord", w_svm, {"long_name": "unit hard-margin SVM direction (SciPy)"})
        ds["cos_svm"] = (
            "time",
            cosine(ds["beta"].values, w_svm),
            {"long_name": "cosine of beta with the hard-margin SVM direction"},
        )
        ds.attrs["final_cos_svm"] = float(ds["cos_svm"].values[-1])
        out[label] = ds
    return out


def run(quick: bool) -> dict:
    steps = 100_000 if quick else 1_000_000
    scales = [parse_axis(f"alpha_{j + 1}={a}", d=4) for j, a in enumerate(ALPHA)]
    axes = (*scales, parse_axis("depth=1,2"))
    out = {}
    for label, (method, rho) in METHODS.items():
        spec = figure_spec(
            method,
            "discrete",
            depth=1,
            axes=axes,
            rho=rho,
            eta=ETA,
            mu=MU,
            steps=steps,
            save_trajectories=True,
            to_fate=False,  # draws directions, no labels
        )
        ds = sweep(spec, quick=quick, times=log_steps(steps))
        out[label] = ds.squeeze([f"alpha_{j + 1}" for j in range(4)])
    return out


def cosine(beta: np.ndarray, direction: np.ndarray) -> np.ndarray:
    return beta @ direction / np.linalg.norm(beta, axis=-1)


def draw_data(ax, datasets: dict) -> None:
    """``1 - cos(beta, w_svm)`` against ``t`` for the L = 1 flows on many points."""
    for label, ds in datasets.items():
        t = ds["tau"].values[1:]
        final = ds.attrs["final_cos_svm"]
        ax.plot(
            t,
            1 - ds["cos_svm"].values[1:],
            lw=1.8,
            label=f"{label} (final cos = {final:.6f})",
            **STYLE[label],
        )
    ax.axhline(1e-3, color="grey", lw=0.8, ls="--")
    ax.text(T_MIN * 1.5, 1e-3, r"$\cos = 0.999$", va="bottom", fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(r"time $t$ (SAM gradient flow)")
    ax.set_ylabel(r"$1 - \cos(\beta, w_{\mathrm{SVM}})$")
    ax.set_title(
        f"L = 1, n = {N_POINTS} points in d = {D_DATA}, "
        + rf"$\alpha = {ALPHA_DATA:g}$, $\rho = {RHO_DATA:g}$ (SAMs)",
        fontsize=10,
    )
    ax.grid(alpha=0.3, which="both")
    ax.legend(title="method (flow)", fontsize=8, loc="lower left")


def draw(datasets: dict, svm: dict):
    e2, e1 = l2_max_margin_direction(MU), l1_max_margin_direction(MU)
    fig, axs = plt.subplots(1, 3, figsize=(18, 4.8))
    axs[1].sharey(axs[0])
    for ax, depth in zip(axs[:2], (1, 2), strict=True):
        for label, ds in datasets.items():
            one = ds.sel(depth=depth)
            step = one["step"].values[1:]
            ax.plot(step, cosine(one["beta"].values[1:], e2), lw=1.8, label=label, **STYLE[label])
            if depth == 1:
                tau = one["rescaled_tau"].values[1:]
                closed = np.asarray(ALPHA)[None, :] + tau[:, None] * np.asarray(MU)[None, :]
                ax.plot(step, cosine(closed, e2), color="white", lw=0.8, ls=":")
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.axhline(e1 @ e2, color="grey", lw=0.8, ls="--")
        ax.text(1.2, 1.0, r"$\mu/\|\mu\|_2$ (l2 max margin)", va="bottom", fontsize=8)
        ax.text(1.2, e1 @ e2, r"$e_4$ (l1 max margin)", va="bottom", fontsize=8)
        if depth == 2:
            ax.axhline(MU[0] / np.linalg.norm(MU), color="grey", lw=0.8, ls=":")
            ax.text(1.2, MU[0] / np.linalg.norm(MU), r"$e_1$", va="bottom", fontsize=8)
        ax.set_xscale("log")
        ax.set_xlabel(r"step $t$ ($\eta = $" + f"{ETA:g})")
        ax.set_title(f"L = {depth}, mu = {mu_label(MU)}, rho = {RHO:g} (SAMs)", fontsize=10)
        ax.grid(alpha=0.3)
    axs[0].set_ylabel(r"$\cos(\beta, \mu)$")
    axs[0].legend(title="method (discrete)", fontsize=8, loc="lower right")
    draw_data(axs[2], svm)
    fig.suptitle(
        "L = 1: GD, l2-SAM and linf-SAM all approach the l2 max-margin direction "
        r"($\cos = 0.51$ at $t = 0$), on one point and on many (right: the SVM direction)."
        "\n"
        r"L = 2: l2-SAM heads to $e_4$, linf-SAM to $e_1$ "
        r"(GD at L = 2 reaches $e_4$ only as $\tau \to \infty$: after astronomically many steps)",
        fontsize=11,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return fig


def build(out_dir: Path, quick: bool) -> list[Path]:
    datasets, svm = run(quick), run_data(quick)
    e2 = l2_max_margin_direction(MU)
    for ds in datasets.values():
        ds["cos_l2_max_margin"] = (
            ("depth", "time"),
            cosine(ds["beta"].values, e2),
            {"long_name": "cosine of beta with mu / ||mu||_2"},
        )
    fig = draw(datasets, svm)
    files = {KEYS[k]: v for k, v in datasets.items()}
    files.update({f"svm_{KEYS[k]}": v for k, v in svm.items()})
    return save_figure_set(fig, out_dir, "depth1_max_margin", files)


if __name__ == "__main__":
    print(build(Path("figures"), "--quick" in sys.argv))
