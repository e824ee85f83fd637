"""Figure 6: at depth 1 every method finds the l2 max-margin direction mu / ||mu||.

One point x = mu = (1, 2, 3, 4), discrete runs with eta = 0.1 from the unbalanced
start alpha = (0.4, 0.2, 0.1, 0.05) (minor coordinates large, so the cosine starts
at 0.51). L = 1 (left): GD, l2-SAM and linf-SAM (rho = 0.25) all turn beta towards
mu/||mu||: the gradient of a linear model does not depend on w, so the perturbation
only changes the speed, ``beta = alpha + tau mu`` in rescaled time for all three
(white dotted: that closed form at each run's own tau, a check). L = 2 (right, the
contrast): l2-SAM turns towards e_4, the l1 max-margin direction (cosine
4/||mu|| = 0.73), GD too but more slowly, and linf-SAM to e_1 (cosine 0.18): only
alpha_1 starts above rho (docs/theory.md §4, the initialisation-dependent limit).
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from samflow.figures._engine import MU, figure_spec, log_steps, sweep
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
        )
        ds = sweep(spec, quick=quick, times=log_steps(steps))
        out[label] = ds.squeeze([f"alpha_{j + 1}" for j in range(4)])
    return out


def cosine(beta: np.ndarray, direction: np.ndarray) -> np.ndarray:
    return beta @ direction / np.linalg.norm(beta, axis=-1)


def draw(datasets: dict):
    e2, e1 = l2_max_margin_direction(MU), l1_max_margin_direction(MU)
    fig, axs = plt.subplots(1, 2, figsize=(12, 4.6), sharey=True)
    for ax, depth in zip(axs, (1, 2), strict=True):
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
    fig.suptitle(
        "L = 1: GD, l2-SAM and linf-SAM all approach the l2 max-margin direction "
        r"($\cos = 0.51$ at $t = 0$). L = 2: l2-SAM heads to $e_4$, linf-SAM to $e_1$"
        "\n"
        r"(GD at L = 2 reaches $e_4$ only as $\tau \to \infty$: after astronomically many steps)",
        fontsize=11,
    )
    return fig


def build(out_dir: Path, quick: bool) -> list[Path]:
    datasets = run(quick)
    keys = {"GD": "gd", "l2-SAM": "l2sam", "linf-SAM": "linfsam"}
    e2 = l2_max_margin_direction(MU)
    for ds in datasets.values():
        ds["cos_l2_max_margin"] = (
            ("depth", "time"),
            cosine(ds["beta"].values, e2),
            {"long_name": "cosine of beta with mu / ||mu||_2"},
        )
    fig = draw(datasets)
    return save_figure_set(
        fig, out_dir, "depth1_max_margin", {keys[k]: v for k, v in datasets.items()}
    )


if __name__ == "__main__":
    print(build(Path("figures"), "--quick" in sys.argv))
