r"""Figure 2: the staircase. Dominant coordinate over (alpha, tau) for the l2-SAM flow.

L = 2, mu = (1, 2, 3, 4), rho = 1. Each row is one initialisation scale alpha; along
it the colour is the coordinate j with the largest \(\lvert \beta_j\rvert\) at rescaled time tau.
Medium alpha climbs the staircase minor -> major (sequential amplification); small
alpha collapses (grey); large alpha is led by the major coordinate 4 throughout, as
GD is for every alpha (right panel: GD is the same program with rho = 0). Dashed:
the collapse bound of docs/theory/balanced.md#balanced-l2-sam (a bound, not the edge); dotted: the
exact sequential/direct edge of docs/theory/balanced.md#direct-edge-depth-2; the strip between the
panels is the measured regime of each row.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Patch

from samflow.figures._engine import MU, figure_spec, flow_times, sweep
from samflow.plotting import (
    REGIME_COLOURS,
    REGIME_NAMES,
    coordinate_colours,
    dominant_codes,
    dominant_legend,
    draw_categories,
    mu_label,
    save_figure_set,
)
from samflow.sweeps.axes import parse_axis
from samflow.theory import l2sam_l2_alpha_bounds, l2sam_l2_direct_edge

RHO, TAU_MAX = 1.0, 40.0


def run(quick: bool) -> dict:
    n_alpha = 48 if quick else 240
    axes = (parse_axis(f"alpha=0.05:5:{n_alpha}:log"),)
    times = flow_times(TAU_MAX, quick, tau_min=1e-3)
    out = {}
    for key, rho in (("l2sam", RHO), ("gd", 0.0)):
        spec = figure_spec("sam-l2", "flow", depth=2, axes=axes, rho=rho, mu=MU, tau_max=TAU_MAX)
        ds = sweep(spec, quick=quick, times=times)
        if rho == 0.0:
            ds.attrs["note"] = "GD: the sam-l2 flow with rho = 0 (eps is scaled by rho)"
        out[key] = ds
    return out


def draw(datasets: dict):
    sam, gd = datasets["l2sam"], datasets["gd"]
    d = sam.sizes["coord"]
    colours = staircase_colours(d)
    fig, (ax, ax_reg, ax_gd) = plt.subplots(
        1, 3, figsize=(11, 4.8), sharey=True, gridspec_kw={"width_ratios": [4, 0.22, 1.4]}
    )
    tau, alpha = sam["tau"].values[1:], sam["alpha"].values
    for a, ds in ((ax, sam), (ax_gd, gd)):
        codes = dominant_codes(ds["dominant"].values, ds["beta_norm"].values)[:, 1:]
        draw_categories(a, codes, tau, alpha, colours)
        a.set_xlabel(r"rescaled time $\tau$")
    ax.set_ylabel(r"initialisation scale $\alpha$")
    lo, _ = l2sam_l2_alpha_bounds(MU, RHO)
    for value, style, label in (
        (lo, "--", r"all shrink at $\tau=0$ below $\rho\mu_1/(\sqrt{2}\|\mu\|)$"),
        (
            l2sam_l2_direct_edge(MU, RHO),
            ":",
            r"exact direct edge $\rho(\mu_d+\mu_{d-1})/(\sqrt{2}\|\mu\|)$",
        ),
    ):
        ax.axhline(value, color="white", lw=2.4)
        ax.axhline(value, color="black", lw=1.2, ls=style, label=label)
    ax.legend(loc="lower left", fontsize=7.5, framealpha=0.9)
    ax.set_title(f"l2-SAM flow, L = 2, mu = {mu_label(MU)}, rho = {RHO:g}", fontsize=10)
    ax_gd.set_title("GD flow (rho = 0)", fontsize=10)
    regime = sam["regime"].values.astype(int)
    reg_codes = sorted(set(regime.tolist()))
    reg_colours = {c: REGIME_COLOURS[c] for c in reg_codes}
    draw_regime_strip(ax_reg, regime, alpha)
    blank = np.any(sam["dominant"].values[:, 1:] == 0) or np.any(gd["dominant"].values[:, 1:] == 0)
    extra = {-9: "blank: no record (overflow guard)"} if blank else {}
    zero = r"0: $\beta \approx 0$ (collapsed)"
    leg = dominant_legend(ax_gd, colours, d, extra, zero=zero, bbox_to_anchor=(1.04, 1.0))
    ax_gd.add_artist(leg)
    ax_gd.legend(
        handles=[
            Patch(
                facecolor=reg_colours[c],
                edgecolor="black",
                hatch=STRIP_HATCHES.get(c, ""),
                label=f"{c}: {REGIME_NAMES[c]}",
            )
            for c in reg_codes
        ],
        title="regime code (strip)",
        loc="lower left",
        bbox_to_anchor=(1.04, 0.0),
        fontsize=8,
    )
    fig.suptitle(
        "Minor first, major last: the coordinate that leads, over initialisation and time",
        fontsize=11,
    )
    return fig


def staircase_colours(d: int) -> dict[int, str]:
    """Coordinates 1..d on viridis, dark to light (the staircase climbs from dark to
    light, so its order survives greyscale: grey levels 0.12, 0.36, 0.54, 0.84 for
    d = 4); 0 (beta ~ 0) stays the maps' light grey (0.73). Not the Okabe-Ito line
    colours of the other figures: their orange, sky blue and grey are one grey level,
    and their orange and blue are the regime strip's gold and navy."""
    from matplotlib import colormaps
    from matplotlib.colors import to_hex

    ramp = colormaps["viridis"](np.linspace(0.0, 1.0, d) if d > 1 else [0.0])
    return {0: coordinate_colours(d)[0], **{j: to_hex(ramp[j - 1]) for j in range(1, d + 1)}}


STRIP_HATCHES = {1: "xx", 2: "//", 3: "..", 4: "\\\\", 5: "++", 6: "oo"}
"""The regime strip's hatches. Its fills (the regime maps' Tol colours) come close to
the coordinates' Okabe-Ito ones (direct's gold to coordinate 1's orange, collapse's
navy to coordinate 4's blue), and all but vanish in greyscale: the hatch and the name
written on the strip tell the regime apart from the coordinate map in any print."""


def draw_regime_strip(ax, regime: np.ndarray, alpha: np.ndarray) -> None:
    """The measured regime of each alpha row as one column of hatched, named bands."""
    edges = np.exp(np.r_[1.5 * np.log(alpha[0]) - 0.5 * np.log(alpha[1]),
                         0.5 * (np.log(alpha[1:]) + np.log(alpha[:-1])),
                         1.5 * np.log(alpha[-1]) - 0.5 * np.log(alpha[-2])])  # fmt: skip
    starts = np.flatnonzero(np.r_[True, regime[1:] != regime[:-1]])
    for first, stop in zip(starts, np.r_[starts[1:], regime.size], strict=True):
        code, lo, hi = int(regime[first]), edges[first], edges[stop]
        colour = REGIME_COLOURS[code]
        ax.axhspan(lo, hi, facecolor=colour, edgecolor="black", lw=0.6)
        ax.axhspan(
            lo, hi, facecolor="none", edgecolor="white", lw=0, hatch=STRIP_HATCHES.get(code, "")
        )
        if np.log(hi / lo) > 0.12 * np.log(edges[-1] / edges[0]):
            ink = "white" if code in (-1, 1, 2) else "black"
            ax.text(0.5, np.sqrt(lo * hi), REGIME_NAMES[code], rotation=90, ha="center",
                    va="center", fontsize=7, color=ink, transform=ax.get_yaxis_transform(),
                    bbox={"facecolor": colour, "edgecolor": "none", "pad": 1.0})  # fmt: skip
    ax.set_yscale("log")
    ax.set_ylim(edges[0], edges[-1])
    ax.set_xlim(0, 1)
    ax.set_xticks([])
    ax.set_title("regime", fontsize=8)


def build(out_dir: Path, quick: bool) -> list[Path]:
    datasets = run(quick)
    return save_figure_set(draw(datasets), out_dir, "staircase", datasets)


if __name__ == "__main__":
    print(build(Path("figures"), "--quick" in sys.argv))
