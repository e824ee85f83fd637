r"""Figure 4: the initialisation-dependent limit of linf-SAM (Corollary 3.5), L = 2, 3, 4.

Balanced initialisation \(w^{(l)} = (\alpha_1, \dots, \alpha_d)\) in every layer; the maps
(d = 2, mu = (1, 2), rho = 1) show which coordinate beta ends up along. Corollary 3.5
(docs/theory/balanced.md#balanced-linf-sam, ``samflow.theory.linf_limit_index``): the excess
\(\alpha_j - \rho\) obeys the GD flow, so coordinates above rho grow (L = 2, like
\(\exp(\mu_j \tau)\)) or blow up (L >= 3, at
\(\tau_j^* = (\alpha_j - \rho)^{-(L-2)} / ((L-2) \mu_j)\)), and the limit is \(e_j^*\),
\(j^* = \operatorname{argmax}\{\mu_j (\alpha_j - \rho)^{L-2} : \alpha_j > \rho\}\): the minor
coordinate wins when only it starts above rho, and at L >= 3 also when it starts far enough above.
Below rho a coordinate falls to 0 for even L (collapse when all do) and creeps up to rho for odd L
(a finite limit). Dashed: these predicted boundaries,
\(\alpha_2 - \rho = (\alpha_1 - \rho) (\mu_1 / \mu_2)^{1/(L-2)}\) between the two races.

Measured: the engine's label of the limit (``limit_coord``;
docs/theory/regimes.md#labels-of-the-limit), each run taken to its fate (records to tau = 1000): L
= 2 from the certificate of the excess' signs, a collapse, or the overflow guard; odd L "finite"
from the certificate (every \(\alpha_j \le \rho\)); L >= 3 otherwise the coordinate leading just
before the blow-up (each blow-up rerun in time relative to it, see ``_engine.up_to_blowup``).

Fourth panel: d = 3, mu = (1, 2, 3), random \(\alpha\) (log-uniform in [0.2, 5], 96
seeds, full 480), L = 2, 3, 4, the engine's limit (``limit_coord``, from the state at
the blow-up for L >= 3) against the closed form, start by start.
"""

from __future__ import annotations

import sys
from dataclasses import replace
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
from samflow.regimes import LIMIT_FINITE, LIMIT_OPEN
from samflow.sweeps.axes import parse_axis
from samflow.theory import linf_limit_index

MU2, MU3 = (1.0, 2.0), (1.0, 2.0, 3.0)
RHO, TAU_MAX = 1.0, 1000.0
DEPTHS = (2, 3, 4)
LAYERS = 4
ALPHA_RANGE_D3 = (0.2, 5.0)
FAILED = -1
COLOURS = {
    0: "#BBBBBB",
    1: coord_style(0)["color"],
    2: coord_style(1)["color"],
    LIMIT_FINITE: OKABE_ITO[5],
    LIMIT_OPEN: "#FFFFFF",
    FAILED: "#000000",
}
NAMES = {
    0: r"0: $\beta \to 0$ (collapse)",
    1: r"1: $\beta/\|\beta\| \to e_1$ (minor)",
    2: r"2: $\beta/\|\beta\| \to e_2$ (major)",
    3: r"3: $\beta/\|\beta\| \to e_3$ (d = 3)",
    LIMIT_FINITE: r"-2: $\beta \to$ finite point",
    LIMIT_OPEN: "-5: undecided at the cap",
    FAILED: "-1: solver failed",
}


def run(quick: bool) -> dict:
    n = 24 if quick else 120  # even: no grid point sits on alpha_j = rho (a fixed point)
    axes = (
        parse_axis(f"alpha_1=0.1:10:{n}:log", d=2),
        parse_axis(f"alpha_2=0.1:10:{n}:log", d=2),
        parse_axis(f"depth={','.join(map(str, DEPTHS))}"),
    )
    spec = figure_spec("sam-linf", "flow", depth=2, axes=axes, rho=RHO, mu=MU2, tau_max=TAU_MAX)
    ds = sweep(spec, layers=LAYERS, quick=quick, times=flow_times(TAU_MAX, quick, 1e-3))
    near, blew = up_to_blowup(spec, ds, quick, layers=LAYERS)
    return {"": ds, "blowup": near, "blew": blew, "d3": run_d3(quick)}


def run_d3(quick: bool):
    """Random starts in d = 3, every depth, with the closed form of each."""
    n = 96 if quick else 480
    axes = (parse_axis(f"seed=0:{n - 1}:{n}"), parse_axis(f"depth={','.join(map(str, DEPTHS))}"))
    spec = replace(
        figure_spec("sam-linf", "flow", depth=2, axes=axes, rho=RHO, mu=MU3, tau_max=TAU_MAX),
        alpha_range=ALPHA_RANGE_D3,
    )
    ds = sweep(spec, layers=LAYERS, quick=quick, times=flow_times(TAU_MAX, quick, 1e-3))
    alphas = ds["seed_alpha"].values
    pred = [[linf_limit_index(a, MU3, RHO, int(L)) for L in DEPTHS] for a in alphas]
    ds["limit_predicted"] = (
        ("seed", "depth"),
        np.asarray(pred, np.int32),
        {"long_name": "Corollary 3.5: limit coordinate, 0 collapse, -2 finite"},
    )
    ds["limit_measured"] = (
        ("seed", "depth"),
        ds["limit_coord"].values.astype(np.int32),
        {"long_name": "limit_coord of the engine (a label of the limit; -5: undecided)"},
    )
    return ds


def measured_limit(ds, near, blew) -> np.ndarray:
    """Limit category over (alpha_1, alpha_2, depth)."""
    limit = ds["limit_coord"].values.astype(float)
    last = near["dominant"].isel(time=-1).values if near is not None else limit
    at_blowup = np.where(last > 0, last, FAILED)
    out = np.where(blew, at_blowup, limit)
    return np.where((ds["regime"].values == FAILED) & ~blew, FAILED, out)


def predicted(a1, a2, depth: int) -> int:
    return linf_limit_index(np.array([a1, a2]), MU2, RHO, depth)


def draw(ds, limit, d3):
    a1, a2 = ds["alpha_1"].values, ds["alpha_2"].values
    fig, axs = plt.subplots(1, 4, figsize=(21, 4.9), gridspec_kw={"width_ratios": [1, 1, 1, 0.9]})
    lo, hi = a1[0] / 1.2, a1[-1] * 1.2
    for k, (ax, depth) in enumerate(zip(axs, ds["depth"].values, strict=False)):
        draw_categories(ax, limit[:, :, k].T, a1, a2, COLOURS)
        ax.set_xlabel(r"$\alpha_1 / \rho$ (minor, $\mu_1 = 1$)")
        ax.plot([RHO, RHO], [lo, RHO], "w-", lw=2.4)
        ax.plot([RHO, RHO], [lo, RHO], "k--", lw=1.2)
        # tau_1* = tau_2*: mu_1 (alpha_1 - rho)^(L-2) = mu_2 (alpha_2 - rho)^(L-2); at
        # L = 2 the major coordinate wins whenever it starts above rho.
        x = np.geomspace(lo, hi, 200)
        ratio = 0.0 if depth == 2 else (MU2[0] / MU2[1]) ** (1 / (depth - 2))
        y = np.where(x > RHO, RHO + (x - RHO) * ratio, RHO)
        ax.plot(x, y, "w-", lw=2.4)
        ax.plot(x, y, "k--", lw=1.2, label="predicted boundary")
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
        axs[2],
        COLOURS,
        {c: NAMES[c] for c in present},
        title="limit (code)",
        loc="upper left",
        bbox_to_anchor=(0.0, -0.16),
        ncol=3,
    )
    draw_d3(axs[3], d3)
    fig.suptitle(
        r"Where linf-SAM converges depends on the initialisation $\alpha$ (Corollary 3.5)",
        fontsize=11,
        y=1.02,
    )
    return fig


def draw_d3(ax, d3) -> None:
    """Stacked bars per depth: how many random starts end where predicted, by limit."""
    pred, meas = d3["limit_predicted"].values, d3["limit_measured"].values
    codes = [c for c in (0, LIMIT_FINITE, 1, 2, 3) if (pred == c).any()]
    colours = {0: COLOURS[0], LIMIT_FINITE: COLOURS[LIMIT_FINITE], 1: OKABE_ITO[0]}
    colours.update({2: OKABE_ITO[1], 3: OKABE_ITO[2]})
    hatches = {0: "", LIMIT_FINITE: "..", 1: "//", 2: "\\\\", 3: "xx"}
    for k in range(d3.sizes["depth"]):
        bottom = 0
        for c in codes:
            n = int(np.sum(pred[:, k] == c))
            ax.bar(
                k,
                n,
                bottom=bottom,
                color=colours[c],
                hatch=hatches[c],
                edgecolor="k",
                lw=0.5,
                label=(NAMES.get(c, f"{c}: e_{c}") if k == 0 else None),
            )
            bottom += n
        agree = np.mean(pred[:, k] == meas[:, k])
        ax.text(k, bottom + 1, f"{100 * agree:.0f}%", ha="center", fontsize=9)
    ax.set_xticks(range(len(d3["depth"])), [f"L = {L}" for L in d3["depth"].values])
    ax.set_ylabel("random starts, by predicted limit")
    ax.set_ylim(0, len(pred) * 1.15)
    lo, hi = ALPHA_RANGE_D3
    ax.set_title(
        f"d = 3, mu = {mu_label(MU3)}, rho = {RHO:g}, {len(pred)} random alpha in "
        f"[{lo:g}, {hi:g}]^3\nmeasured = predicted (% above each bar)",
        fontsize=10,
    )
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0.0, -0.1), ncol=2)


def build(out_dir: Path, quick: bool) -> list[Path]:
    res = run(quick)
    ds = res[""]
    limit = measured_limit(ds, res["blowup"], res["blew"])
    ds["limit_measured"] = (
        ("alpha_1", "alpha_2", "depth"),
        limit.astype(np.int32),
        {
            "long_name": "limit of beta: coordinate, 0 collapse, -2 finite, -1 failed, "
            "-5 undecided",
            "comment": "L = 3: leader at tau = (1 - 1e-5) tau*, see the _blowup file",
        },
    )
    ds["blowup_rerun"] = (("alpha_1", "alpha_2", "depth"), res["blew"])
    fig = draw(ds, limit, res["d3"])
    files = {"": ds, "blowup": res["blowup"], "d3": res["d3"]}
    return save_figure_set(fig, out_dir, "linf_limit", files)


if __name__ == "__main__":
    print(build(Path("figures"), "--quick" in sys.argv))
