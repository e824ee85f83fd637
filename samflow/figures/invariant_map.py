r"""Figure 14: the l2-SAM regime edges at L = 2 in invariant coordinates, alpha / rho over
the direction of mu.

Balanced l2-SAM at L = 2 on one point is invariant under \((u, \rho) \to (c u, c \rho)\)
and under \(\mu \to s \mu\) with \(\tau \to \tau / s\) (docs/theory/balanced.md#scale-invariance,
derived there and checked in ``tests/test_invariances.py``): the regime depends only on
\(\alpha / \rho\) and on \(\mu / \lVert \mu\rVert\). The (alpha, rho) map of ``phase_l2`` is
one-dimensional; this is the real phase diagram. Two one-parameter families of directions:
\(\mu = (1, m)\) in d = 2 (left) and \(\mu = (1, 1 + s, 1 + 2 s, 1 + 3 s)\) in d = 4 (right; s = 1
is the paper's (1, 2, 3, 4)). Markers: the edges that :func:`samflow.boundary` finds
by bisection (flows to \(\tau = 100\), the regime at the horizon) at two radii,
rho = 0.5 (circles) and 2 (crosses), divided by rho: they coincide, as the invariance
says. Dotted: the exact sequential/direct edge \((\mu_d + \mu_{d-1}) / (\sqrt{2} \lVert \mu\rVert)\)
(docs/theory/balanced.md#direct-edge-depth-2); grey: the instantaneous collapse bound
\(\mu_1 / (\sqrt{2} \lVert \mu\rVert)\) (docs/theory/balanced.md#balanced-l2-sam), below which
collapse is proven.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from samflow._boundary import BoundarySearch, boundary
from samflow.figures._engine import FLOW_SETTINGS
from samflow.plotting import save_figure_set
from samflow.runners import Flow, LogSpaced
from samflow.theory import l2sam_l2_alpha_bounds, l2sam_l2_direct_edge

RHOS = (0.5, 2.0)
TAU_MAX = 100.0
FAMILIES = {  # name: (parameter label, values (quick, full), mu of a parameter value)
    "d2": (r"$m$ in $\mu = (1, m)$", (8, 40), lambda m: (1.0, m)),
    "d4": (
        r"$s$ in $\mu = (1, 1+s, 1+2s, 1+3s)$",
        (8, 40),
        lambda s: (1.0, 1 + s, 1 + 2 * s, 1 + 3 * s),
    ),
}
RANGES = {"d2": (1.1, 30.0), "d4": (0.02, 10.0)}


def family(name: str, quick: bool) -> tuple[np.ndarray, np.ndarray]:
    """The parameter values ``[k]`` and the mu vectors ``[k, d]`` of family ``name``."""
    _, (n_quick, n_full), make = FAMILIES[name]
    values = np.geomspace(*RANGES[name], n_quick if quick else n_full)
    return values, np.array([make(v) for v in values])


def run(quick: bool) -> dict:
    out = {}
    for name in FAMILIES:
        values, mus = family(name, quick)
        ds = boundary(
            "sam-l2",
            depth=2,
            mu=mus[0],
            mu_set=mus,
            axes={"mu": np.arange(len(mus)), "rho": RHOS},
            runner=Flow(tau_max=TAU_MAX, save=LogSpaced(40 if quick else 200), **FLOW_SETTINGS),
            search=BoundarySearch(alpha_range=(1e-2, 1e2), rtol_alpha=1e-3 if quick else 1e-6),
        )
        ds = ds.assign_coords(parameter=("mu", values))
        ds["mu_values"] = (("mu", "coord"), mus, {"long_name": "mu vector of each row"})
        for edge in ("alpha_collapse", "alpha_direct"):
            ds[f"{edge}_over_rho"] = ds[edge] / ds["rho"]
            ds[f"{edge}_over_rho"].attrs["long_name"] = f"{edge} / rho"
        ds["direct_edge_exact"] = (
            "mu",
            [l2sam_l2_direct_edge(m, 1.0) for m in mus],
            {
                "long_name": "exact sequential/direct edge alpha*/rho, "
                "docs/theory/balanced.md#direct-edge-depth-2"
            },
        )
        ds["collapse_bound"] = (
            "mu",
            [l2sam_l2_alpha_bounds(m, 1.0)[0] for m in mus],
            {
                "long_name": "instantaneous collapse bound alpha/rho, "
                "docs/theory/balanced.md#balanced-l2-sam"
            },
        )
        out[name] = ds
    return out


def draw(results: dict):
    fig, axs = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
    for ax, (name, ds) in zip(axs, results.items(), strict=True):
        x = ds["parameter"].values
        ax.fill_between(x, 1e-3, ds["collapse_bound"].values, color="#DDDDDD", lw=0)
        ax.plot(x, ds["collapse_bound"].values, color="grey", lw=1, label="collapse proven below")
        ax.plot(
            x,
            ds["direct_edge_exact"].values,
            "k:",
            lw=2,
            label=r"exact direct edge $(\mu_d+\mu_{d-1})/(\sqrt{2}\|\mu\|)$",
        )
        for rho, marker in zip(RHOS, ("o", "x"), strict=True):
            one = ds.sel(rho=rho)
            for edge, colour in (("alpha_collapse", "#004488"), ("alpha_direct", "#BB5566")):
                what = (
                    "collapse | sequential" if edge == "alpha_collapse" else "sequential | direct"
                )
                ax.plot(
                    x,
                    one[f"{edge}_over_rho"].values,
                    marker=marker,
                    ls="-" if rho == RHOS[0] else "none",
                    color=colour,
                    ms=5,
                    mfc="none",
                    lw=1,
                    label=rf"{what}, $\rho = {rho:g}$",
                )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(0.03, 1.3)
        ax.set_xlabel(FAMILIES[name][0])
        ax.grid(alpha=0.3, which="both")
        for y, label in ((0.04, "collapse"), (0.45, "sequential"), (1.1, "direct")):
            ax.text(x[len(x) // 2], y, label, ha="center", fontsize=9, style="italic")
    axs[0].set_ylabel(r"critical $\alpha / \rho$")
    axs[0].set_title(r"d = 2, $\mu = (1, m)$", fontsize=10)
    axs[1].set_title(r"d = 4, $\mu = (1, 1+s, 1+2s, 1+3s)$ ($s = 1$: (1, 2, 3, 4))", fontsize=10)
    axs[1].axvline(1.0, color="grey", lw=0.8, ls="--")
    handles, labels = axs[1].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, bbox_to_anchor=(0.5, 0))
    fig.suptitle(
        r"l2-SAM, L = 2, uniform $\alpha$: the regime edges depend on $\alpha/\rho$ and the "
        rf"direction of $\mu$ only (flows to $\tau = {TAU_MAX:g}$; two $\rho$ overlap)",
        fontsize=11,
    )
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig


def build(out_dir: Path, quick: bool) -> list[Path]:
    results = run(quick)
    fig = draw(results)
    return save_figure_set(fig, out_dir, "invariant_map", results)


if __name__ == "__main__":
    print(build(Path("figures"), "--quick" in sys.argv))
