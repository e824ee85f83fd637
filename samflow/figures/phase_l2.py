r"""Figure 1: l2-SAM regime map over (alpha, rho) at L = 2, GD beside it.

Drawn over the measured map: the exact sequential/direct edge
\(\alpha = \rho (\mu_d + \mu_{d-1}) / (\sqrt 2 \lVert \mu\rVert)\)
(docs/theory/balanced.md#direct-edge-depth-2), and both regime edges as found by
:func:`samflow.boundary` (bisection on alpha over the same flows, per rho), with the collapse bound
\(\rho \mu_1 / (\sqrt 2 \lVert \mu\rVert)\) (every coordinate shrinks at tau = 0 below it) for
comparison: a bound, not the edge.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from samflow._boundary import BoundarySearch, boundary
from samflow.figures._engine import FLOW_SETTINGS, figure_spec
from samflow.plotting import draw_regimes, mu_label, regime_legend, save_figure_set
from samflow.runners import Flow, LogSpaced
from samflow.sweeps.axes import parse_axis
from samflow.sweeps.store import run
from samflow.theory import l2sam_l2_alpha_bounds, l2sam_l2_direct_edge

MU = (1.0, 2.0, 3.0, 4.0)


def build(out_dir: Path, quick: bool) -> list[Path]:
    n_alpha, n_rho = (32, 16) if quick else (160, 96)
    axes = (parse_axis(f"alpha=0.01:10:{n_alpha}:log"), parse_axis(f"rho=0.05:5:{n_rho}:log"))
    datasets = {}
    for method in ("sam-l2", "gd"):
        spec = figure_spec(method, "flow", depth=2, axes=axes, mu=MU, tau_max=200.0, n_save=80)
        datasets[method] = run(spec, chunk=4096)
    fig, axs = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
    rho = datasets["sam-l2"]["rho"].values
    edges = boundary(
        "sam-l2",
        depth=2,
        mu=MU,
        axes={"rho": rho},
        runner=Flow(tau_max=200.0, save=LogSpaced(79), **FLOW_SETTINGS),
        search=BoundarySearch(alpha_range=(0.01, 10.0), rtol_alpha=1e-4),
    )
    datasets["boundary"] = edges
    lo = np.array([l2sam_l2_alpha_bounds(MU, r)[0] for r in rho])
    exact = np.array([l2sam_l2_direct_edge(MU, r) for r in rho])
    for ax, (method, ds) in zip(axs, list(datasets.items())[:2], strict=True):
        draw_regimes(ax, ds["regime"], "alpha", "rho")
        ax.set_title(f"{'l2-SAM' if method == 'sam-l2' else 'GD'} flow, L = 2, mu = {mu_label(MU)}")
    for alpha_line, style, label in (
        (lo, "--", r"all shrink at $\tau = 0$ below $\rho\mu_1/(\sqrt{2}\|\mu\|)$"),
        (exact, ":", r"exact direct edge $\rho(\mu_d+\mu_{d-1})/(\sqrt{2}\|\mu\|)$"),
    ):
        axs[0].plot(alpha_line, rho, color="white", lw=3.0)
        axs[0].plot(alpha_line, rho, color="black", lw=1.6, ls=style, label=label)
    for name, marker, label in (
        ("alpha_collapse", "o", "collapse"),
        ("alpha_direct", "^", "direct"),
    ):
        axs[0].plot(
            edges[name].values,
            rho,
            ls="none",
            marker=marker,
            ms=4.5,
            mfc="white",
            mec="black",
            label=f"{label} edge, bisection (samflow.boundary)",
        )
    axs[0].legend(loc="upper left", fontsize=8, framealpha=0.9)
    alpha = datasets["sam-l2"]["alpha"].values
    axs[0].set_xlim(alpha[0] / 1.15, alpha[-1] * 1.15)
    codes = sorted(
        set(np.unique(datasets["sam-l2"]["regime"].values))
        | set(np.unique(datasets["gd"]["regime"].values))
    )
    regime_legend(axs[1], codes, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    axs[1].set_ylabel("")
    fig.suptitle(
        r"Regimes at $\tau = 200$ (rescaled flow): collapse, sequential, direct", fontsize=11
    )
    return save_figure_set(
        fig,
        out_dir,
        "phase_l2",
        {"l2sam": datasets["sam-l2"], "gd": datasets["gd"], "boundary": datasets["boundary"]},
    )


if __name__ == "__main__":
    print(build(Path("figures"), "--quick" in sys.argv))
