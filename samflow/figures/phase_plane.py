r"""Figure 12: trajectories of (beta_1, beta_2) for mu = (1, 2): GD, l2-SAM and linf-SAM.

The motivating picture. Balanced flows from 16 starts \(w^{(l)} = (\alpha_1, \alpha_2)\)
with \(\alpha_j\) in {0.4, 0.7, 1.5, 3.2} (rho = 1), at L = 2 (top) and L = 3 (bottom),
drawn in the (beta_1, beta_2) plane on log axes (\(\beta = u^L > 0\) from a positive
balanced start). Each line is coloured and dashed by where it ends, as measured by
the engine (``limit_coord``, each run taken to its fate; L = 3: the coordinate that
wins the blow-up race, or a certified finite point); a start is a dot. Lines that run
to the upper left turn towards e_2 (the major feature), to the lower right towards e_1
(the minor one), to the lower left collapse (lines are clipped to the box, so a
coordinate falling to 0 runs along its edge). Predicted limits, checked start by start
(panel titles):

- GD: \(e_2\) at L = 2; at L = 3 the earliest blow-up \(\tau_j^* = 1 / (\mu_j \alpha_j)\),
  i.e. Corollary 3.5 with rho = 0, so a large enough \(\alpha_1\) makes the minor
  coordinate win.
- linf-SAM: Corollary 3.5,
  \(j^* = \operatorname{argmax}\{\mu_j (\alpha_j - \rho)^{L-2} : \alpha_j > \rho\}\); without an
  \(\alpha_j > \rho\) beta collapses (L = 2) or tends to the finite point \(\rho^L (1, 1)\) (L = 3).
- l2-SAM: no closed form for the whole picture; at L = 2 the limit is \(e_2\) (the
  l1 max-margin direction of one point, Theorem 4.2) unless beta collapses; at L = 3
  there is no collapse (the field is never negative).
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import xarray as xr

from samflow.figures._engine import figure_spec, flow_times, sweep
from samflow.plotting import OKABE_ITO, mu_label, save_figure_set
from samflow.sweeps.axes import make_axis
from samflow.theory import LIMIT_FINITE, linf_limit_index

MU2 = (1.0, 2.0)
RHO, TAU_MAX = 1.0, 20.0
STARTS = (0.4, 0.7, 1.5, 3.2)  # no ties in the races of GD or linf-SAM at L = 3
LAYERS = 4  # the padding of linf_limit's d = 2 sweeps: the programs are shared
PANELS = (("GD", "sam-l2", 0.0), ("l2-SAM", "sam-l2", RHO), ("linf-SAM", "sam-linf", RHO))
STYLE = {  # limit code: colour, line style, name
    1: (OKABE_ITO[0], "-", r"$\to e_1$ (minor)"),
    2: (OKABE_ITO[3], "--", r"$\to e_2$ (major)"),
    0: ("#888888", ":", r"$\to 0$ (collapse)"),
    LIMIT_FINITE: (OKABE_ITO[2], "-.", "finite point"),
    -1: ("#000000", "-", "failed"),
    -5: ("#BBBBBB", (0, (1, 3)), "undecided"),
}
BOX = (1e-3, 1e10)
KEYS = {"GD": "gd", "l2-SAM": "l2sam", "linf-SAM": "linfsam"}


def run(quick: bool) -> dict[str, xr.Dataset]:
    axes = (
        make_axis("alpha_1", STARTS, d=2),
        make_axis("alpha_2", STARTS, d=2),
        make_axis("depth", [2, 3]),
    )
    out = {}
    for method, rhos in (("sam-l2", (0.0, RHO)), ("sam-linf", (RHO,))):
        spec = figure_spec(
            method,
            "flow",
            depth=2,
            axes=(*axes, make_axis("rho", rhos)),
            mu=MU2,
            tau_max=TAU_MAX,
            save_trajectories=True,
        )
        ds = sweep(spec, quick=quick, layers=LAYERS, times=flow_times(TAU_MAX, quick, 1e-3))
        for label, m, rho in PANELS:
            if m == method:
                out[label] = ds.sel(rho=rho)
    return out


def measured(one: xr.Dataset) -> int:
    """The limit code of one start: the engine's ``limit_coord`` (a label of the limit,
    the run taken to its fate; docs/theory/regimes.md#labels-of-the-limit)."""
    return int(one["limit_coord"])


def predicted(label: str, alpha: np.ndarray, depth: int, limit: int) -> int | None:
    """The predicted limit code, or None where no closed form gives it."""
    if label == "GD":
        return linf_limit_index(alpha, MU2, 0.0, depth)
    if label == "linf-SAM":
        return linf_limit_index(alpha, MU2, RHO, depth)
    if depth == 2:  # e_d unless it collapses (the collapse edge has no closed form)
        return 0 if limit == 0 else 2
    return None


def draw(results: dict[str, xr.Dataset]):
    fig, axs = plt.subplots(2, 3, figsize=(14, 9), sharex=True, sharey=True)
    for col, (label, ds) in enumerate(results.items()):
        for row, depth in enumerate((2, 3)):
            ax = axs[row, col]
            agree, total = 0, 0
            for a1 in STARTS:
                for a2 in STARTS:
                    one = ds.sel(alpha_1=a1, alpha_2=a2, depth=depth)
                    beta = one["beta"].values
                    limit = measured(one)
                    pred = predicted(label, np.array([a1, a2]), depth, limit)
                    if pred is not None:
                        agree, total = agree + (pred == limit), total + 1
                    colour, ls, _ = STYLE[limit]
                    keep = np.all(np.isfinite(beta), axis=1)
                    b = np.clip(beta[keep], *BOX)
                    ax.plot(b[:, 0], b[:, 1], color=colour, ls=ls, lw=1.6)
                    ax.plot(*beta[0], "o", color=colour, ms=4)
            ax.plot(BOX, BOX, color="grey", lw=0.6)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlim(*BOX)
            ax.set_ylim(*BOX)
            ax.grid(alpha=0.3)
            check = f"predicted = measured: {agree}/{total}" if total else "no closed form"
            ax.set_title(f"{label}, L = {depth}: {check}", fontsize=10)
            if row == 1:
                ax.set_xlabel(r"$\beta_1$ (minor, $\mu_1 = 1$)")
            if col == 0:
                ax.set_ylabel(r"$\beta_2$ (major, $\mu_2 = 2$)")
    handles = [
        plt.Line2D([], [], color=c, ls=ls, lw=1.6, label=name)
        for code, (c, ls, name) in STYLE.items()
        if code != -1
    ]
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=9, title="limit (measured)")
    fig.suptitle(
        rf"Balanced flows, $\mu = {mu_label(MU2)}$, $\rho = {RHO:g}$ (SAMs), starts "
        rf"$\alpha_j \in \{{{', '.join(f'{a:g}' for a in STARTS)}\}}$ (dots), "
        rf"$\tau \leq {TAU_MAX:g}$; $\beta$ clipped to [{BOX[0]:g}, {BOX[1]:g}]",
        fontsize=11,
    )
    fig.tight_layout(rect=(0, 0.07, 1, 0.97))
    return fig


def build(out_dir: Path, quick: bool) -> list[Path]:
    results = run(quick)
    fig = draw(results)
    files = {KEYS[k]: v for k, v in results.items()}
    return save_figure_set(fig, out_dir, "phase_plane", files)


if __name__ == "__main__":
    print(build(Path("figures"), "--quick" in sys.argv))
