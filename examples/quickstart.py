"""Quick start: an l2-SAM regime map in memory, its regime counts, and a figure.

Run: python examples/quickstart.py [OUT.png]   (about a minute on a laptop CPU)
"""

import sys

import matplotlib.pyplot as plt
import numpy as np

import samflow
from samflow.plotting import phase_map

# The paper's focal problem: one point x = mu, a depth-2 diagonal network, l2-SAM flow.
ds = samflow.sweep(
    "sam-l2",
    depth=2,
    mu=[1.0, 2.0, 3.0, 4.0],
    axes={"alpha": "0.02:5:40:log", "rho": "0.1:3:24:log"},
    runner=samflow.Flow(tau_max=200.0, save=samflow.LogSpaced(59)),
)  # nothing is written to disk: out=None

names = dict(zip(samflow.FLAG_VALUES, samflow.FLAG_MEANINGS.split(), strict=True))
codes, counts = np.unique(ds["regime"].values, return_counts=True)
for code, count in zip(codes, counts, strict=True):
    print(f"{names[int(code)]:>11}: {count} grid points")

fig = phase_map(ds)
fig.savefig(sys.argv[1] if len(sys.argv) > 1 else "quickstart.png", dpi=120, bbox_inches="tight")
plt.close(fig)
