"""Figure 4: the initialisation-dependent limit of linf-SAM, d = 2, mu = (1, 2), rho = 1.

Balanced initialisation ``w^(l) = (alpha_1, alpha_2)`` in every layer; the map shows
which coordinate beta ends up along. L = 2 (docs/theory.md §4): coordinates with
``alpha_j < rho`` decay to 0, the others grow like ``exp(mu_j tau)``, so the limit is
``e_j*`` with ``j* = argmax{mu_j : alpha_j > rho}`` -- the minor coordinate wins when
only it starts above rho -- and beta collapses when both start below. L = 3 (odd):
coordinates below rho creep up to rho (a finite limit), those above blow up at
``tau_j* = 1 / (mu_j (alpha_j - rho))``; the earliest blow-up wins, which can be the
minor coordinate even when both start above rho. Dashed: these predicted boundaries.

Measured: L = 2 from ``limit_coord`` of the flow run until the overflow guard (records
to tau = 1000); L = 3 from the coordinate leading just before the blow-up (each
blow-up rerun in time relative to it, see ``_engine.up_to_blowup``), and "finite"
where no blow-up happened by tau = 1000 and ``||beta||_1 <= d rho^L``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from samflow.figures._engine import figure_spec, flow_times, sweep, up_to_blowup
from samflow.plotting import (
    OKABE_ITO,
    category_legend,
    coord_style,
    draw_categories,
    mu_label,
    save_figure_set,
)
from samflow.regimes import LIMIT_FINITE
from samflow.sweeps.axes import parse_axis
from samflow.theory import blowup_tau, linf_limit_index

MU2 = (1.0, 2.0)
RHO, TAU_MAX = 1.0, 1000.0
FAILED = -1
COLOURS = {
    0: "#BBBBBB",
    1: coord_style(0)["color"],
    2: coord_style(1)["color"],
    LIMIT_FINITE: OKABE_ITO[5],
    FAILED: "#000000",
}
NAMES = {
    0: r"0: $\beta \to 0$ (collapse)",
    1: r"1: $\beta/\|\beta\| \to e_1$ (minor)",
    2: r"2: $\beta/\|\beta\| \to e_2$ (major)",
    LIMIT_FINITE: r"-2: $\beta \to$ finite point",
    FAILED: "-1: solver failed",
}


def run(quick: bool) -> dict:
    n = 24 if quick else 120  # even: no grid point sits on alpha_j = rho (a fixed point)
    axes = (
        parse_axis(f"alpha_1=0.1:10:{n}:log", d=2),
        parse_axis(f"alpha_2=0.1:10:{n}:log", d=2),
        parse_axis("depth=2,3"),
    )
    spec = figure_spec("sam-linf", "flow", depth=2, axes=axes, rho=RHO, mu=MU2, tau_max=TAU_MAX)
    ds = sweep(spec, layers=None, quick=quick, times=flow_times(TAU_MAX, quick, 1e-3))
    near, blew = up_to_blowup(spec, ds, quick, layers=None)
    return {"": ds, "blowup": near, "blew": blew}


def measured_limit(ds, near, blew) -> np.ndarray:
    """Limit category over (alpha_1, alpha_2, depth)."""
    limit = ds["limit_coord"].values.astype(float)
    depth = ds["depth"].values[None, None, :]
    bounded = ds["beta_norm"].isel(time=-1).values <= ds.sizes["coord"] * RHO**depth * (1 + 1e-9)
    last = near["dominant"].isel(time=-1).values
    at_blowup = np.where(last > 0, last, FAILED)
    odd = np.where(blew, at_blowup, np.where(bounded, LIMIT_FINITE, FAILED))
    out = np.where(depth == 3, odd, limit)
    return np.where((ds["regime"].values == FAILED) & ~blew, FAILED, out)


def predicted(a1, a2, depth: int) -> int:
    alpha = np.array([a1, a2])
    if depth == 2:
        return linf_limit_index(alpha, MU2, RHO)
    taus = blowup_tau(alpha, MU2, depth, RHO)
    return int(np.argmin(taus)) + 1 if np.isfinite(taus).any() else LIMIT_FINITE


def draw(ds, limit):
    a1, a2 = ds["alpha_1"].values, ds["alpha_2"].values
    fig, axs = plt.subplots(1, 2, figsize=(11.5, 4.8), sharey=True)
    lo, hi = a1[0] / 1.2, a1[-1] * 1.2
    for k, (ax, depth) in enumerate(zip(axs, ds["depth"].values, strict=True)):
        draw_categories(ax, limit[:, :, k].T, a1, a2, COLOURS)
        ax.set_xlabel(r"$\alpha_1 / \rho$ (minor, $\mu_1 = 1$)")
        ax.plot([RHO, RHO], [lo, RHO if depth == 3 else hi], "w-", lw=2.4)
        ax.plot([RHO, RHO], [lo, RHO if depth == 3 else hi], "k--", lw=1.2)
        if depth == 2:
            bx, by = [lo, hi], [RHO, RHO]
        else:  # tau_1* = tau_2*: mu_1 (alpha_1 - rho) = mu_2 (alpha_2 - rho)
            x = np.geomspace(lo, hi, 200)
            y = np.where(x > RHO, RHO + (x - RHO) * MU2[0] / MU2[1], RHO)
            bx, by = x, y
        ax.plot(bx, by, "w-", lw=2.4)
        ax.plot(bx, by, "k--", lw=1.2, label="predicted boundary")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        agree = np.mean(
            [
                limit[i, j, k] == predicted(x, y, int(depth))
                for i, x in enumerate(a1)
                for j, y in enumerate(a2)
            ]
        )
        ax.set_title(
            f"linf-SAM flow, L = {depth}, mu = {mu_label(MU2)}, rho = {RHO:g}\n"
            f"measured = predicted on {100 * agree:.1f}% of the grid",
            fontsize=10,
        )
    axs[0].legend(loc="lower right", fontsize=8)
    axs[0].set_ylabel(r"$\alpha_2 / \rho$ (major, $\mu_2 = 2$)")
    present = sorted(set(np.unique(limit).astype(int).tolist()), reverse=True)
    category_legend(
        axs[1],
        COLOURS,
        {c: NAMES[c] for c in present},
        title="limit (code)",
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
    )
    fig.suptitle(r"Where linf-SAM converges depends on the initialisation", fontsize=11, y=1.04)
    return fig


def build(out_dir: Path, quick: bool) -> list[Path]:
    res = run(quick)
    ds = res[""]
    limit = measured_limit(ds, res["blowup"], res["blew"])
    ds["limit_measured"] = (
        ("alpha_1", "alpha_2", "depth"),
        limit.astype(np.int32),
        {
            "long_name": "limit of beta: coordinate, 0 collapse, -2 finite, -1 failed",
            "comment": "L = 3: leader at tau = (1 - 1e-5) tau*, see the _blowup file",
        },
    )
    ds["blowup_rerun"] = (("alpha_1", "alpha_2", "depth"), res["blew"])
    fig = draw(ds, limit)
    return save_figure_set(fig, out_dir, "linf_limit", {"": ds, "blowup": res["blowup"]})


if __name__ == "__main__":
    print(build(Path("figures"), "--quick" in sys.argv))
