"""Figure 8 (beyond the paper): USAM against l2-SAM. Is the normalisation the cause?

Regime maps over (alpha, rho) of the rescaled flows at L = 2, mu = (1, 2, 3, 4),
records to tau = 200 as in figure 1. l2-SAM perturbs by ``rho g / ||g||``: at L = 2
``d log u_j / dtau = mu_j (1 - rho mu_j / N)`` with ``N`` proportional to alpha, so
only alpha / rho matters (diagonal bands). USAM perturbs by ``rho g``, which carries
the loss factor ``|l'(z)|`` and is not scale invariant: ``d log u_j / dtau = mu_j (1 -
rho mu_j sigmoid(-z))`` (derived here), so whether the minor coordinates lead depends
on rho (and on alpha only through the margin z). Right: the dominant coordinate
early on (at tau = 0.1), which shows which coordinate is amplified first.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from samflow.figures._engine import MU, figure_spec, flow_times, sweep
from samflow.plotting import (
    coordinate_colours,
    dominant_codes,
    dominant_legend,
    draw_categories,
    draw_regimes,
    mu_label,
    regime_legend,
    save_figure_set,
)
from samflow.sweeps.axes import parse_axis
from samflow.theory import l2sam_l2_alpha_bounds

TAU_MAX, TAU_EARLY = 200.0, 0.1
METHODS = {"l2sam": ("sam-l2", "l2-SAM"), "usam": ("usam", "USAM")}


def run(quick: bool) -> dict:
    n_alpha, n_rho = (32, 16) if quick else (160, 96)
    axes = (parse_axis(f"alpha=0.01:10:{n_alpha}:log"), parse_axis(f"rho=0.05:5:{n_rho}:log"))
    times = flow_times(TAU_MAX, quick, tau_min=1e-3)
    times[np.argmin(np.abs(times - TAU_EARLY))] = TAU_EARLY
    out = {}
    for key, (method, _) in METHODS.items():
        spec = figure_spec(method, "flow", depth=2, axes=axes, mu=MU, tau_max=TAU_MAX)
        out[key] = sweep(spec, quick=quick, times=times)
    return out


def early_dominant(ds) -> np.ndarray:
    k = int(np.argmin(np.abs(ds["tau"].values - TAU_EARLY)))
    codes = dominant_codes(ds["dominant"].values, ds["beta_norm"].values)
    return codes[..., k]


def draw(datasets: dict):
    fig, axs = plt.subplots(2, 2, figsize=(11.5, 8.6), sharex=True, sharey=True)
    colours = coordinate_colours(len(MU))
    codes = set()
    for row, (key, (_, label)) in enumerate(METHODS.items()):
        ds = datasets[key]
        draw_regimes(axs[row, 0], ds["regime"], "alpha", "rho")
        codes |= set(np.unique(ds["regime"].values).tolist())
        axs[row, 0].set_title(f"{label} flow, L = 2, mu = {mu_label(MU)}: regime", fontsize=10)
        early = early_dominant(ds)
        draw_categories(axs[row, 1], early.T, ds["alpha"].values, ds["rho"].values, colours)
        axs[row, 1].set_title(
            rf"{label}: dominant coordinate at $\tau = {TAU_EARLY:g}$", fontsize=10
        )
        axs[row, 1].set_xlabel(r"$\alpha$")
    for ax in axs[:, 0]:
        ax.set_xlabel("")
    axs[1, 0].set_xlabel(r"$\alpha$")
    alpha = datasets["l2sam"]["alpha"].values
    rho_line = np.geomspace(0.05, 5, 50)
    lo, hi = np.array([l2sam_l2_alpha_bounds(MU, r) for r in rho_line]).T
    for ax in axs[0]:
        for bound, style, label in ((lo, "--", "all shrink"), (hi, ":", "major fastest")):
            ax.plot(bound, rho_line, "w-", lw=2)
            ax.plot(bound, rho_line, "k", ls=style, lw=1.2, label=f"{label} at " + r"$\tau=0$")
    axs[0, 0].legend(loc="lower right", fontsize=8, framealpha=0.9)
    # USAM: every coordinate shrinks at the start when rho mu_1 sigmoid(-z_0) > 1.
    z0 = np.sum(MU) * alpha**2
    with np.errstate(over="ignore"):
        rho_all_shrink = (1 + np.exp(z0)) / MU[0]
    for ax in axs[1]:
        ax.plot(alpha, rho_all_shrink, "w-", lw=2)
        ax.plot(
            alpha,
            rho_all_shrink,
            "k--",
            lw=1.2,
            label=r"all shrink at $\tau=0$ above: $\rho\,\mu_1\,\sigma(-z_0) = 1$",
        )
    axs[1, 0].legend(loc="lower right", fontsize=8, framealpha=0.9)
    rho = datasets["l2sam"]["rho"].values
    step_a, step_r = np.sqrt(alpha[1] / alpha[0]), np.sqrt(rho[1] / rho[0])
    axs[0, 0].set_xlim(alpha[0] / step_a, alpha[-1] * step_a)
    axs[0, 0].set_ylim(rho[0] / step_r, rho[-1] * step_r)
    regime_legend(axs[0, 1], sorted(codes), loc="upper left", bbox_to_anchor=(1.03, 1.0))
    dominant_legend(axs[1, 1], colours, 4, bbox_to_anchor=(1.03, 1.0))
    fig.suptitle(
        r"USAM vs l2-SAM (rescaled flows to $\tau = 200$): does the gradient normalisation "
        "make minor features lead?",
        fontsize=11,
    )
    return fig


def build(out_dir: Path, quick: bool) -> list[Path]:
    datasets = run(quick)
    for ds in datasets.values():
        ds["dominant_early"] = (
            ("alpha", "rho"),
            np.nan_to_num(early_dominant(ds), nan=-1).astype(np.int32),
            {"long_name": f"dominant coordinate at tau = {TAU_EARLY} (0 collapsed, -1 none)"},
        )
    return save_figure_set(draw(datasets), out_dir, "usam", datasets)


if __name__ == "__main__":
    print(build(Path("figures"), "--quick" in sys.argv))
