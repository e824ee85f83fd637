"""The (alpha, rho) regime map of l2-SAM at depth 3 and 4, at a horizon and at the fate.

A label read where a run stopped is not a label of its limit
(docs/theory/regimes.md#labels-of-the-limit): this script maps the same grid twice, once stopped at
tau_max = 200 (undecided runs are ``unresolved``) and once run to its fate (``tau_cap``: a run goes
on, unrecorded, until a blow-up, a collapse or a certificate decides it), prints each map's regime
counts and the bands along alpha, and draws the fate maps with the direct edge in closed form.

Run: python examples/fate_map.py [OUT.png]   (a few minutes on 2 CPU cores)
"""

import sys

import matplotlib.pyplot as plt
import numpy as np

import samflow
from samflow.plotting import draw_regimes, regime_legend
from samflow.regimes import NAMES

MU = [1.0, 2.0, 3.0, 4.0]
AXES = {"alpha": "1e-3:1:32:log", "rho": "0.05,0.1,0.2"}


def bands(ds) -> list[str]:
    """Each rho's regimes along alpha, as 'name from alpha'."""
    out = []
    for k, rho in enumerate(ds["rho"].values):
        labels = [NAMES[int(r)] for r in ds["regime"].values[:, k]]
        alphas = ds["alpha"].values
        runs = [f"{labels[0]} from {alphas[0]:.3g}"]
        steps = zip(alphas[1:], labels[:-1], labels[1:], strict=True)
        runs += [f"{b} from {a:.3g}" for a, p, b in steps if b != p]
        out.append(f"  rho = {rho:g}: " + ", ".join(runs))
    return out


fig, axs = plt.subplots(1, 2, figsize=(11, 4.2))
for ax, depth in zip(axs, (3, 4), strict=True):
    for name, cap in (("horizon tau = 200", None), ("run to the fate (tau_cap = 2e4)", 2e4)):
        ds = samflow.sweep(
            "sam-l2",
            depth=depth,
            mu=MU,
            axes=AXES,
            runner=samflow.Flow(tau_max=200.0, save=samflow.LogSpaced(39), tau_cap=cap),
        )
        codes, counts = np.unique(ds["regime"].values, return_counts=True)
        counted = ", ".join(f"{NAMES[int(c)]} {n}" for c, n in zip(codes, counts, strict=True))
        print(f"L = {depth}, {name}: {counted}")
        print("\n".join(bands(ds)))
    draw_regimes(ax, ds["regime"], "alpha", "rho")
    rho = np.geomspace(0.04, 0.25, 20)
    edge = [samflow.theory.l2sam_direct_edge(MU, r, depth) for r in rho]
    ax.plot(edge, rho, "k--", lw=1.2, label="direct edge, closed form")
    ax.set_title(f"l2-SAM flow, L = {depth}, mu = (1, 2, 3, 4), run to its fate", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
regime_legend(axs[1], [0, 1, 2, 3, 4, 5, 6], loc="upper left", bbox_to_anchor=(1.02, 1.0))
fig.savefig(sys.argv[1] if len(sys.argv) > 1 else "fate_map.png", dpi=120, bbox_inches="tight")
