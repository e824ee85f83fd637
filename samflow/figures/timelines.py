r"""Figure 3: feature-amplification timelines, one initialisation scale per regime.

l2-SAM flow, L = 2, mu = (1, 2, 3, 4), rho = 1; alpha = 0.3 (collapse), 0.5
(sequential) and 3 (direct). Top: the shares \(\beta_j / \lVert \beta\rVert_1\) against tau;
bottom: the loss. The dotted line marks the end of the loss plateau
(``plateau_end_tau``: the first tau with loss <= half its initial value), the dashed
lines the hand-offs of the dominant coordinate (``takeover_tau``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from samflow.figures._engine import MU, figure_spec, flow_times, sweep
from samflow.plotting import REGIME_NAMES, coord_style, mu_label, save_figure_set
from samflow.sweeps.axes import parse_axis

RHO, TAU_MAX = 1.0, 40.0
ALPHAS = (0.3, 0.5, 3.0)


def run(quick: bool):
    spec = figure_spec(
        "sam-l2",
        "flow",
        depth=2,
        axes=(parse_axis("alpha=" + ",".join(str(a) for a in ALPHAS)),),
        rho=RHO,
        mu=MU,
        tau_max=TAU_MAX,
        save_trajectories=True,
    )
    return sweep(spec, quick=quick, times=flow_times(TAU_MAX, quick, tau_min=1e-3))


def draw(ds):
    fig, axs = plt.subplots(
        2,
        len(ds["alpha"]),
        figsize=(13, 5.6),
        sharex=True,
        sharey="row",
        gridspec_kw={"height_ratios": [2, 1]},
    )
    tau_all = ds["tau"].values
    for col, alpha in enumerate(ds["alpha"].values):
        one = ds.sel(alpha=alpha)
        ax_share, ax_loss = axs[:, col]
        beta, loss = one["beta"].values, one["loss"].values
        norm = np.sum(np.abs(beta), axis=1)
        # After a collapse beta is exactly 0: its shares are undefined, so not drawn.
        keep = (tau_all > 0) & np.isfinite(norm) & (norm > 0)
        tau = tau_all[keep]
        share = beta[keep] / norm[keep, None]
        for j, label in enumerate(ds["coord"].values):
            ax_share.plot(tau, share[:, j], lw=1.8, label=f"$j = {label}$", **coord_style(j))
        later = tau_all > 0
        ax_loss.plot(tau_all[later], loss[later] / loss[0], color="black", lw=1.5)
        ax_loss.axhline(0.5, color="grey", lw=0.8)
        regime = int(one["regime"])
        plateau = float(one["plateau_end_tau"])
        title = rf"$\alpha = {alpha:g}$: {REGIME_NAMES[regime]}"
        if np.isfinite(plateau):
            for a in (ax_share, ax_loss):
                a.axvline(plateau, color="grey", ls=":", lw=1.6)
            ax_loss.annotate(
                rf"plateau ends $\tau = {plateau:.2g}$",
                (plateau, 0.5),
                xytext=(4, -12),
                textcoords="offset points",
                fontsize=8,
            )
        takeover = one["takeover_tau"].values
        first = int(one["first_amplified"])
        handoffs = [
            (j, t) for j, t in zip(ds["coord"].values, takeover, strict=True) if np.isfinite(t)
        ]
        for j, t in handoffs:
            if j != first:
                ax_share.axvline(t, lw=1.0, ls="--", color=coord_style(int(j) - 1)["color"])
        if regime == 1:
            gone = tau_all[np.argmax(np.isfinite(norm) & (norm == 0))]
            for a in (ax_share, ax_loss):
                a.axvline(gone, color="black", ls="-.", lw=1.0)
            ax_share.annotate(
                rf"$\beta = 0$ from $\tau \approx {gone:.2g}$",
                (gone, 0.5),
                xytext=(4, 0),
                textcoords="offset points",
                fontsize=8,
            )
        else:
            title += f", {int(one['n_handoffs'])} hand-off(s)"
        ax_share.set_title(title, fontsize=10)
        ax_share.grid(alpha=0.3)
        ax_loss.grid(alpha=0.3)
        ax_loss.set_xscale("log")
        ax_loss.set_yscale("log")
        ax_loss.set_xlabel(r"rescaled time $\tau$")
    axs[0, 0].set_ylabel(r"share $\beta_j / \|\beta\|_1$")
    axs[0, 0].set_ylim(-0.05, 1.05)
    axs[1, 0].set_ylabel(r"loss / loss($\tau = 0$)")
    axs[1, 0].set_ylim(1e-4, 5)
    axs[0, -1].legend(title="coordinate", fontsize=8, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.suptitle(
        f"l2-SAM flow, L = 2, mu = {mu_label(MU)}, rho = {RHO:g}: one run per regime "
        "(dotted: loss reaches half its initial value; dashed: hand-offs)",
        fontsize=11,
    )
    return fig


def build(out_dir: Path, quick: bool) -> list[Path]:
    ds = run(quick)
    return save_figure_set(draw(ds), out_dir, "timelines", {"": ds})


if __name__ == "__main__":
    print(build(Path("figures"), "--quick" in sys.argv))
