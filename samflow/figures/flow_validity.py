r"""Where the flow stops describing discrete SAM: agreement over (eta, alpha), edges of stability.

One column per setting: l2-SAM at L = 2 and L = 3, and the controls USAM and GD at
L = 2 (mu = (1, 2, 3, 4), rho = 0.1). Top: how many of the four criteria (regime, leader
path, hand-off times, limit coordinate; :mod:`samflow.validity`) the discrete run
shares with the flow run to its fate, hatched where one is undecided, with markers for
what only the discrete map does (period-2 oscillation, catapult, divergence) and the
step sizes at which each run first meets GD's edge of stability and the method's own.
Bottom: the largest eta at which each criterion holds, against alpha, with the edges.
At L = 3 the eta axis is ten times larger: with rho ten times smaller than alpha the
field's relative rate is \(\mu u (1 - r)^2 \sim \alpha\), a tenth of the L = 2 one.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib import patheffects
from matplotlib.colors import BoundaryNorm
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

from samflow.figures._engine import MU
from samflow.plotting import OKABE_ITO, mu_label, save_figure_set
from samflow.validity import CATAPULT, CRITERIA, DIVERGENCE, OSCILLATION, UNDECIDED, validity_map

RHO = 0.1
RATIO = (0.15, 3.0)  # alpha / rho: collapse, sequential and direct at L = 2 and 3
ETA_L2 = (0.02, 32.0)
PANELS = (  # method, depth, eta range
    ("sam-l2", 2, ETA_L2),
    ("sam-l2", 3, (0.2, 320.0)),
    ("usam", 2, ETA_L2),
    ("gd", 2, ETA_L2),
)
QUICK = {"n_alpha": 8, "n_eta": 9, "steps": 1000}
FULL = {"n_alpha": 16, "n_eta": 17, "steps": 4000}
MARKERS = {
    OSCILLATION: ("o", "period-2 oscillation"),
    CATAPULT: ("^", "catapult"),
    DIVERGENCE: ("x", "divergence"),
}
HALO = [patheffects.withStroke(linewidth=3, foreground="white")]
HALO_BLACK = [patheffects.withStroke(linewidth=2.6, foreground="black")]
CURVE_STYLE = {
    "regime": {"color": OKABE_ITO[3], "ls": "-", "marker": "o"},
    "path": {"color": OKABE_ITO[0], "ls": "--", "marker": "s"},
    "handoffs": {"color": OKABE_ITO[4], "ls": "-.", "marker": "D"},
    "limit": {"color": OKABE_ITO[2], "ls": ":", "marker": "v"},
}
EDGE_LABEL = {
    "gd": r"GD edge met ($\eta\lambda_{max} = 2$)",
    "sam": "the method's own edge met",
}
EDGE_STYLE = {
    "gd": {"color": "black", "ls": (0, (6, 2)), "lw": 1.6},
    "sam": {"color": "black", "ls": (0, (1, 1.5)), "lw": 2.2},
}


def run(quick: bool) -> dict:
    size = QUICK if quick else FULL
    alpha = RHO * np.geomspace(*RATIO, size["n_alpha"])
    out = {}
    for method, depth, (lo, hi) in PANELS:
        out[f"{method}_L{depth}"] = validity_map(
            method,
            depth=depth,
            mu=MU,
            rho=RHO,
            alpha=alpha,
            eta=np.geomspace(lo, hi, size["n_eta"]),
            steps=size["steps"],
            pad_layers=3,
        )
    return out


def _edges(v: np.ndarray) -> np.ndarray:
    """Cell edges of a log-spaced grid."""
    g = np.log(v)
    mid = 0.5 * (g[1:] + g[:-1])
    return np.exp(np.concatenate([[2 * g[0] - mid[0]], mid, [2 * g[-1] - mid[-1]]]))


def _ticks(axis, name: str):
    """Labels at decades for eta; at 1, 2, 5 per decade for alpha (it spans little more
    than one decade)."""
    if name == "alpha":
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(FormatStrFormatter("%g"))
    else:
        axis.set_major_locator(LogLocator(base=10))
    axis.set_minor_formatter(NullFormatter())


def _staircase(eta_at, eta, x, y):
    """The left edges of the cells ``(eta_at[i], alpha[i])`` joined as a staircase (NaN:
    a break), for a boundary read per alpha row."""
    xs, ys = [], []
    for i, e in enumerate(eta_at):
        left = x[np.searchsorted(eta, e)] if np.isfinite(e) else np.nan
        xs += [left, left]
        ys += [y[i], y[i + 1]]
    return np.array(xs), np.array(ys)


def draw_map(ax, ds):
    eta, alpha = ds["eta"].values, ds["alpha"].values
    x, y = _edges(eta), _edges(alpha)
    n_agree = ds["n_agree"].transpose("alpha", "eta").values
    cmap = plt.get_cmap("cividis", len(CRITERIA) + 1)
    norm = BoundaryNorm(np.arange(-0.5, len(CRITERIA) + 1), cmap.N)
    mesh = ax.pcolormesh(x, y, n_agree, cmap=cmap, norm=norm, edgecolors="face", linewidth=0)
    undecided = np.any([ds[f"{c}_agrees"].values == UNDECIDED for c in CRITERIA], axis=0).T
    for i, k in zip(*np.nonzero(undecided), strict=True):
        ax.add_patch(
            Rectangle(
                (x[k], y[i]),
                x[k + 1] - x[k],
                y[i + 1] - y[i],
                fill=False,
                hatch="///",
                edgecolor="white",
                linewidth=0,
                zorder=3,
            )
        )
    code = ds["discrete_behaviour"].transpose("alpha", "eta").values
    ee, aa = np.meshgrid(eta, alpha)
    for bit, (marker, _) in MARKERS.items():
        on = (code & bit) > 0
        # White with a black edge: seen on every cell colour, and in greyscale.
        ax.scatter(
            ee[on],
            aa[on],
            marker=marker,
            s=34,
            linewidths=1.0,
            zorder=4,
            **(
                {"color": "white", "path_effects": HALO_BLACK}  # x has no face
                if marker == "x"
                else {"facecolors": "white", "edgecolors": "black"}
            ),
        )
    for name, style in EDGE_STYLE.items():
        xs, ys = _staircase(ds[f"eta_{name}_edge"].values, eta, x, y)
        ax.plot(xs, ys, **style, path_effects=HALO, zorder=5)
    ax.set_xscale("log")
    ax.set_yscale("log")
    _ticks(ax.xaxis, "eta")
    _ticks(ax.yaxis, "alpha")
    ax.set_xlim(x[0], x[-1])
    ax.set_ylim(y[0], y[-1])
    ax.set_xlabel(r"step size $\eta$")
    ax.set_ylabel(r"initialisation scale $\alpha$")
    return mesh


def draw_curves(ax, ds):
    alpha = ds["alpha"].values
    for c in CRITERIA:
        ax.plot(alpha, ds[f"eta_valid_{c}"].values, ms=4, lw=1.4, **CURVE_STYLE[c], label=c)
    for name, style in EDGE_STYLE.items():
        ax.plot(alpha, ds[f"eta_{name}_edge"].values, **style, label=EDGE_LABEL[name])
    ax.set_xscale("log")
    ax.set_yscale("log")
    eta = ds["eta"].values
    ax.set_ylim(eta[0] / 1.5, eta[-1] * 1.5)
    _ticks(ax.xaxis, "alpha")
    _ticks(ax.yaxis, "eta")
    ax.set_xlabel(r"initialisation scale $\alpha$")
    ax.set_ylabel(r"largest $\eta$ that agrees")
    ax.grid(alpha=0.3, which="both")
    regime = ds["flow_regime"].values
    for k in np.flatnonzero(np.diff(regime)):  # the flow's regime edges, from the grid
        ax.axvline(np.sqrt(alpha[k] * alpha[k + 1]), color="grey", lw=0.8)


def draw(results: dict):
    fig, axes = plt.subplots(
        2,
        len(results),
        figsize=(4.3 * len(results) + 1.2, 8.6),
        layout="constrained",
        squeeze=False,
    )
    for col, ds in enumerate(results.values()):
        mesh = draw_map(axes[0, col], ds)
        draw_curves(axes[1, col], ds)
        method, depth = ds.attrs["method"], ds.attrs["depth"]
        rho = "" if method == "gd" else rf", $\rho = {RHO:g}$"
        axes[0, col].set_title(f"{method}, L = {depth}{rho}", fontsize=10)
    for ax in axes[:, 1:].ravel():
        ax.set_ylabel("")
    cbar = fig.colorbar(mesh, ax=axes[0, :], ticks=range(len(CRITERIA) + 1), shrink=0.9)
    cbar.set_label("criteria that agree with the flow")
    behaviour = [
        Line2D([], [], marker=m, ls="none", mfc="white", mec="black", color="black", label=name)
        for m, name in MARKERS.values()
    ]
    edges = [
        *(Line2D([], [], **EDGE_STYLE[k], label=EDGE_LABEL[k]) for k in EDGE_STYLE),
        Patch(facecolor="white", edgecolor="black", hatch="///", label="a criterion undecided"),
    ]
    axes[0, -1].legend(handles=behaviour + edges, fontsize=7, loc="upper left", framealpha=0.9)
    axes[1, -1].legend(
        title=r"largest $\eta$ that agrees; smallest that meets an edge",
        fontsize=7,
        title_fontsize=7,
        loc="lower right",
    )
    fig.suptitle(
        f"Where the rescaled flow stops describing discrete SAM, mu = {mu_label(MU)}\n"
        "criteria: regime, leader path, hand-off times, limit; grey lines: the flow's "
        "regime edges",
        fontsize=10,
    )
    return fig


def build(out_dir: Path, quick: bool) -> list[Path]:
    results = run(quick)
    fig = draw(results)
    return save_figure_set(fig, out_dir, "flow_validity", results)


if __name__ == "__main__":
    print(build(Path("figures"), "--quick" in sys.argv))
