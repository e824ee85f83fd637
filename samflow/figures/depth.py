r"""Figure 5: depth. The staircase of the l2-SAM flow at L = 1, 2, 3, 4 side by side.

mu = (1, 2, 3, 4), rho = 1, balanced initialisation alpha. Each panel shows the
dominant coordinate over (alpha, tau) as in figure 2. L = 1: the perturbation does
not change the gradient, \(\beta = \alpha + \mu \tau\) and the major coordinate leads at
once for every alpha. L = 2: collapse, the minor-to-major staircase, direct. L >= 3:
the flow blows up in finite time (white: after the blow-up; the black curve is the
measured blow-up time). The strip right of each panel is the coordinate that wins:
the one that blows up (read at \(\tau = (1 - 1e-5) \tau^*\) from a rerun in time relative
to the blow-up, ``_engine.up_to_blowup``), else the leader at the horizon tau = 40.
Dashed (L >= 2): the closed-form edge \(\alpha^*(L)\) of
docs/theory/balanced.md#direct-edge-any-depth, above which the major coordinate leads from tau = 0+
(``samflow.theory.l2sam_direct_edge``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from samflow.figures._engine import MU, figure_spec, flow_times, sweep, up_to_blowup
from samflow.plotting import (
    coordinate_colours,
    dominant_codes,
    dominant_legend,
    draw_categories,
    mu_label,
    save_figure_set,
)
from samflow.sweeps.axes import parse_axis
from samflow.theory import l2sam_direct_edge

RHO, TAU_MAX = 1.0, 40.0
DEPTHS = (1, 2, 3, 4)


def run(quick: bool) -> dict:
    n_alpha = 48 if quick else 200
    axes = (
        parse_axis(f"alpha=0.05:5:{n_alpha}:log"),
        parse_axis("depth=" + ",".join(str(L) for L in DEPTHS)),
    )
    spec = figure_spec("sam-l2", "flow", depth=2, axes=axes, rho=RHO, mu=MU, tau_max=TAU_MAX)
    ds = sweep(spec, quick=quick, times=flow_times(TAU_MAX, quick, tau_min=1e-3))
    near, blew = up_to_blowup(spec, ds, quick)
    return {"": ds, "blowup": near, "blew": blew}


def combined_codes(ds, near, blew) -> tuple[np.ndarray, np.ndarray]:
    """Dominant codes ``[alpha, depth, time]`` on the absolute tau grid, and the winner.

    Rows that blew up take their records from the rerun, looked up at ``tau / tau*``
    (nearest earlier relative record): the rerun ends before the event, so every
    record up to ``(1 - 1e-5) tau*`` holds a solution even if the first run's event
    failed (engines before c60b150 then dropped all of its records).
    """
    codes = dominant_codes(ds["dominant"].values, ds["beta_norm"].values)
    rel_codes = dominant_codes(near["dominant"].values, near["beta_norm"].values)
    tau, rel = ds["tau"].values, near["tau"].values
    stop = ds["stop_tau"].values
    winner = np.where(np.isfinite(codes[..., -1]), codes[..., -1], np.nan)
    for i, k in zip(*np.nonzero(blew), strict=True):
        at = np.searchsorted(rel, tau / stop[i, k], side="right") - 1
        row = rel_codes[i, k, np.clip(at, 1, len(rel) - 1)]
        codes[i, k] = np.where(tau < stop[i, k], row, np.nan)
        winner[i, k] = rel_codes[i, k, -1]
    return codes, winner


def draw(ds, codes, winner, blew):
    d = ds.sizes["coord"]
    colours = coordinate_colours(d)
    fig, axs = plt.subplots(
        1,
        2 * len(DEPTHS),
        figsize=(16, 4.6),
        sharey=True,
        gridspec_kw={"width_ratios": [4, 0.25] * len(DEPTHS), "wspace": 0.08},
    )
    tau, alpha = ds["tau"].values[1:], ds["alpha"].values
    stop = ds["stop_tau"].values
    for k, L in enumerate(ds["depth"].values):
        ax, strip = axs[2 * k], axs[2 * k + 1]
        draw_categories(ax, codes[:, k, 1:], tau, alpha, colours)
        if blew[:, k].any():
            ax.plot(stop[blew[:, k], k], alpha[blew[:, k]], color="black", lw=1.5)
        # The major leads from tau = 0+ above this (docs/theory/balanced.md#direct-edge-any-depth).
        if L >= 2:
            edge = l2sam_direct_edge(MU, RHO, int(L))
            ax.axhline(edge, color="white", lw=2.6)
            ax.axhline(edge, color="black", lw=1.2, ls="--")
            ax.text(
                tau[0] * 1.3,
                edge * 1.05,
                rf"$\alpha^*_{{{int(L)}}} = {edge:.3f}$",
                fontsize=7.5,
                bbox={"facecolor": "white", "alpha": 0.85, "lw": 0, "pad": 1},
            )
        ax.set_title(f"L = {L}", fontsize=10)
        ax.set_xlabel(r"rescaled time $\tau$")
        draw_categories(strip, winner[:, k, None], [0.0], alpha, colours, xlog=False, ylog=True)
        strip.set_xticks([])
        strip.set_title("wins", fontsize=8)
        n_blew = int(blew[:, k].sum())
        if L >= 3:
            ax.text(
                0.03,
                0.03,
                f"{n_blew}/{len(alpha)} rows blow up\n(black: blow-up time)",
                transform=ax.transAxes,
                fontsize=7.5,
                bbox={"facecolor": "white", "alpha": 0.85, "lw": 0},
            )
    axs[0].set_ylabel(r"initialisation scale $\alpha$")
    dominant_legend(axs[-1], colours, d, {-9: "blank: after blow-up"}, bbox_to_anchor=(1.3, 1.0))
    fig.suptitle(
        f"Depth: l2-SAM flow, mu = {mu_label(MU)}, rho = {RHO:g}, L = 1..4 "
        "(dominant coordinate over initialisation and time)",
        fontsize=11,
    )
    return fig


def build(out_dir: Path, quick: bool) -> list[Path]:
    res = run(quick)
    ds = res[""]
    codes, winner = combined_codes(ds, res["blowup"], res["blew"])
    ds["winner"] = (
        ("alpha", "depth"),
        np.nan_to_num(winner, nan=-1).astype(np.int32),
        {"long_name": "leader at the horizon (L <= 2) or at the blow-up (L >= 3); -1 none"},
    )
    ds["blowup_rerun"] = (("alpha", "depth"), res["blew"])
    fig = draw(ds, codes, winner, res["blew"])
    return save_figure_set(fig, out_dir, "depth", {"": ds, "blowup": res["blowup"]})


if __name__ == "__main__":
    print(build(Path("figures"), "--quick" in sys.argv))
