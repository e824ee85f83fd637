"""What a long step cap costs a discrete sweep, in one pass and in two (issue 38).

A batch of discrete runs taken to their fate steps until its last run stops, so a cap far
past what most runs need once cost every run the steps of the slowest. The engine now
runs two passes (``samflow.engine.FIRST_PASS``): every run up to 100 times its last
record's step, then only the runs still undecided, in groups of one vector per device, up
to the cap. This times the figure grid's discrete l2-SAM sweep (mu (1, 2, 3, 4), alpha
1e-4..10 x rho 0.02..5, 8 x 8, depth 2, 3, 4; eta 0.01, 2,000 steps: 192 points) with
caps of 10^2, 10^3 and 10^4 times the steps, both ways in the same run (one pass:
``FIRST_PASS`` set past the cap), each compiled first and then timed, the faster of two
calls; and checks that both ways give the same labels.

    PYTHONPATH=experiments:. python experiments/step_cap_passes.py
    PYTHONPATH=experiments:. python experiments/step_cap_passes.py --factors 100,1000
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from unresolved_shares import ETA, STEPS, grids

import samflow
from samflow import engine
from samflow.regimes import UNRESOLVED


def timed(grid: dict, cap: int, first_pass: int) -> tuple[float, np.ndarray]:
    """The faster of two calls of the sweep (after one that compiles) and its labels."""
    engine.FIRST_PASS = first_pass
    runner = samflow.Discrete(eta=ETA, steps=STEPS, step_cap=cap)

    def run():
        return samflow.sweep("sam-l2", depth=2, mu=grid["mu"], axes=grid["axes"], runner=runner)

    run()
    took = []
    for _ in range(2):
        start = time.perf_counter()
        ds = run()
        took.append(time.perf_counter() - start)
    return min(took), ds["regime"].values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--factors", default="100,1000,10000", help="caps, times the steps")
    args = parser.parse_args()
    grid = grids(8, np.random.default_rng(0))["figure"]
    default = engine.FIRST_PASS
    print("cap (x steps) | one pass s | two passes s | one / two | unresolved (L = 2, 3, 4)")
    for factor in (float(f) for f in args.factors.split(",")):
        cap = int(factor * STEPS)
        one, labels_one = timed(grid, cap, first_pass=10 * cap)
        two, labels_two = timed(grid, cap, first_pass=default)
        engine.FIRST_PASS = default
        same = np.array_equal(labels_one, labels_two)
        left = [int((labels_two[..., i] == UNRESOLVED).sum()) for i in range(labels_two.shape[-1])]
        print(
            f"{factor:>13g} | {one:10.1f} | {two:12.1f} | {one / two:9.1f} | {left}"
            + ("" if same else "  LABELS DIFFER"),
            flush=True,
        )


if __name__ == "__main__":
    main()
