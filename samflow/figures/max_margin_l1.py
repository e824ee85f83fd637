r"""Figure 13: on many points, L = 2 turns beta towards the l1 max-margin direction
(Theorem 4.2), L = 1 towards the l2 one (Theorem 3.1).

Four random separable data sets, n = 6 Gaussian points in d = 8 labelled by a
Gaussian teacher (seeds 0-3; with d > n the l1 and l2 max-margin directions differ),
balanced start alpha = 0.5, gradient flows in plain time t of GD (rho = 0) and l2-SAM
(rho = 0.5). L = 2 runs on doubled features ``(x, -x)``, so that a positive balanced
start reaches every sign of \(\beta = \beta_+ - \beta_-\) (the usual \(u^2 - v^2\) model).
References, solved by SciPy independently of samflow: the l1 max-margin solution
(\(\max \gamma\) s.t. \(y_i \langle x_i, \beta\rangle \ge \gamma\), \(\lVert \beta\rVert_1 = 1\), a
linear program for ``linprog``) and the hard-margin SVM direction (L = 1).

Left: \(1 - \cos(\beta, \beta_{\ell_1})\); middle: the gap of the normalised l1 margin,
\(1 - \min_i y_i \langle x_i, \beta\rangle / (\lVert \beta\rVert_1 \gamma^*)\) (it does not depend
on which l1 solution the LP returns when there are several; the l2 SVM direction's gap is
marked on the right edge); right: L = 1, \(1 - \cos(\beta, w_{\mathrm{svm}})\); the x axis is
``log10 t``. Directional convergence is slow: at L = 2 the margin gap falls more
slowly than \(1/\log t\) (about \((\log t)^{-1/3}\) here; dash-dotted: \(1/\log t\)), at
L = 1 \(1 - \cos\) like \(1/\log(t)^2\), so the flows run to t = 1e200. The \(t\) at
which each run first comes within 5% of the l1 margin is in the file's
``t_within_5pct``; a discrete run needs \(t / \eta\) steps for the same.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import xarray as xr
from scipy.optimize import linprog

from samflow.figures._engine import figure_spec, on_datasets
from samflow.figures.depth1_max_margin import svm_direction
from samflow.plotting import OKABE_ITO, save_figure_set
from samflow.sweeps.axes import make_axis

N_SETS, N_POINTS, D = 4, 6, 8
ALPHA, RHO, T_MAX, T_MIN = 0.5, 0.5, 1e200, 1e-2
METHODS = {"GD": 0.0, "l2-SAM": RHO}  # sam-l2 with rho = 0 is GD: one program
STYLE = {"GD": {"color": OKABE_ITO[7], "ls": "-"}, "l2-SAM": {"color": OKABE_ITO[4], "ls": "--"}}


def make_data(seed: int) -> np.ndarray:
    """``y_i x_i`` ``[n, d]``: Gaussian ``x_i`` labelled by a Gaussian teacher (separable)."""
    rng = np.random.default_rng(seed)
    X, teacher = rng.normal(size=(N_POINTS, D)), rng.normal(size=D)
    return X * np.sign(X @ teacher)[:, None]


def l1_max_margin(Z: np.ndarray) -> tuple[np.ndarray, float]:
    """``max gamma`` s.t. ``Z beta >= gamma``, ``||beta||_1 = 1`` as a linear program in
    ``beta = p - q`` (``p, q >= 0``); returns ``beta`` ``[d]`` and ``gamma*``."""
    n, d = Z.shape
    res = linprog(
        np.r_[np.zeros(2 * d), -1.0],
        A_ub=np.c_[-Z, Z, np.ones(n)],
        b_ub=np.zeros(n),
        A_eq=np.r_[np.ones(2 * d), 0.0][None],
        b_eq=[1.0],
        bounds=[(0, None)] * (2 * d) + [(None, None)],
    )
    if res.status != 0:
        raise RuntimeError(f"l1 max-margin LP failed: {res.message}")
    return res.x[:d] - res.x[d : 2 * d], -res.fun


def run(quick: bool) -> xr.Dataset:
    Z = np.stack([make_data(s) for s in range(N_SETS)])
    times = np.r_[0.0, np.geomspace(T_MIN, T_MAX, 161 if quick else 401)]
    betas = {}
    for depth, data in ((1, Z), (2, np.concatenate([Z, -Z], axis=2))):
        shape = (tuple(map(tuple, data[0].tolist())), (1.0,) * N_POINTS)
        spec = figure_spec(
            "sam-l2",
            "flow",
            depth=depth,
            axes=(make_axis("rho", list(METHODS.values())),),
            alpha=ALPHA,
            data=shape,
            tau_max=T_MAX,
            to_fate=False,
        )
        spec = replace(spec, runner=replace(spec.runner, max_steps=100_000))
        out = on_datasets(spec, np.repeat(data, len(METHODS), axis=0), times)
        beta = out["beta"].reshape(N_SETS, len(METHODS), len(times), -1)
        betas[depth] = beta if depth == 1 else beta[..., :D] - beta[..., D:]
    l1 = [l1_max_margin(z) for z in Z]
    w_l1 = np.stack([w / np.linalg.norm(w) for w, _ in l1])
    gamma = np.array([g for _, g in l1])
    w_svm = np.stack([svm_direction(z, np.ones(N_POINTS)) for z in Z])
    dims = ("dataset", "optimizer", "time")
    b1, b2 = betas[1], betas[2]
    with np.errstate(invalid="ignore", divide="ignore"):
        cos_svm = np.einsum("kmtd,kd->kmt", b1, w_svm) / np.linalg.norm(b1, axis=-1)
        cos_l1 = np.einsum("kmtd,kd->kmt", b2, w_l1) / np.linalg.norm(b2, axis=-1)
        margin = np.min(np.einsum("kmtd,knd->kmtn", b2, Z), axis=-1) / np.sum(np.abs(b2), -1)
    gap = 1 - margin / gamma[:, None, None]
    svm_gap = 1 - np.min(np.einsum("kd,knd->kn", w_svm, Z), 1) / np.abs(w_svm).sum(1) / gamma
    within = np.where(gap <= 0.05, times[None, None, :], np.inf).min(axis=-1)
    return xr.Dataset(
        {
            "signed_X": (("dataset", "point", "coord"), Z, {"long_name": "y_i x_i"}),
            "beta_l1": (("dataset", "coord"), w_l1, {"long_name": "unit l1 max-margin (LP)"}),
            "gamma_l1": ("dataset", gamma, {"long_name": "l1 max margin gamma* (LP)"}),
            "w_svm": (("dataset", "coord"), w_svm, {"long_name": "unit hard-margin SVM (QP)"}),
            "cos_l1": (dims, cos_l1, {"long_name": "L = 2: cos(beta, l1 max margin)"}),
            "margin_gap": (dims, gap, {"long_name": "L = 2: 1 - l1 margin of beta / gamma*"}),
            "svm_margin_gap": ("dataset", svm_gap, {"long_name": "same for w_svm"}),
            "cos_svm": (dims, cos_svm, {"long_name": "L = 1: cos(beta, SVM direction)"}),
            "t_within_5pct": (
                ("dataset", "optimizer"),
                within,
                {"long_name": "L = 2: first t with margin_gap <= 0.05 (inf: not by t_max)"},
            ),
        },
        coords={
            "dataset": np.arange(N_SETS),
            "optimizer": list(METHODS),
            "t": ("time", times, {"long_name": "time t of the gradient flow"}),
        },
        attrs={"alpha": ALPHA, "rho_l2sam": RHO, "t_max": T_MAX, "n_points": N_POINTS, "d": D},
    )


def draw(ds: xr.Dataset):
    fig, axs = plt.subplots(1, 3, figsize=(17, 4.8))
    # x = log10 t on a log axis: a gap falling like 1/log t is a line of slope -1.
    late = ds["t"].values >= 10.0
    x = np.log10(ds["t"].values[late])
    panels = (
        (axs[0], 1 - ds["cos_l1"], r"$1 - \cos(\beta, \beta_{\ell_1})$", "L = 2: direction"),
        (axs[1], ds["margin_gap"], r"$1 - \gamma_1(\beta) / \gamma_1^*$", "L = 2: l1 margin"),
        (axs[2], 1 - ds["cos_svm"], r"$1 - \cos(\beta, w_{\mathrm{SVM}})$", "L = 1: direction"),
    )
    for ax, values, ylabel, title in panels:
        for label in METHODS:
            for k in ds["dataset"].values:
                y = values.sel(optimizer=label, dataset=k).values[late]
                ax.plot(
                    x,
                    np.clip(y, 1e-12, None),
                    lw=1.4,
                    label=label if k == 0 else None,
                    **STYLE[label],
                )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(r"$\log_{10} t$ (gradient-flow time $t$)")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3, which="both")
    for gap in ds["svm_margin_gap"].values:
        axs[1].plot(x[-1], gap, marker="<", color="#004488", ms=7, clip_on=False)
    axs[1].plot(x, 0.1 * x[0] / x, color="grey", lw=1, ls="-.", label=r"$\propto 1/\log t$")
    axs[1].plot([], [], "<", color="#004488", label="l2 SVM direction")
    axs[1].axhline(0.05, color="grey", lw=0.8, ls=":")
    axs[0].legend(title=f"method ({N_SETS} data sets each)", fontsize=8)
    axs[1].legend(fontsize=8, loc="lower left")
    within = np.log10(ds["t_within_5pct"].values)  # inf: not within 5% by t_max
    fig.suptitle(
        f"n = {N_POINTS} points in d = {D}, {N_SETS} data sets, balanced "
        rf"$\alpha = {ALPHA:g}$, l2-SAM $\rho = {RHO:g}$: L = 2 heads to the l1 max margin, "
        "L = 1 to the l2 one\n"
        r"within 5% of the l1 margin (L = 2) at $\log_{10} t$ = "
        f"{np.min(within):.0f} to {np.max(within):.0f}: directional convergence is slow",
        fontsize=11,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.92))
    return fig


def build(out_dir: Path, quick: bool) -> list[Path]:
    ds = run(quick)
    return save_figure_set(draw(ds), out_dir, "max_margin_l1", {"": ds})


if __name__ == "__main__":
    print(build(Path("figures"), "--quick" in sys.argv))
