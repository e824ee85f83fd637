"""The bench's baselines run the engine's update, so their ratios compare like with like.

``benchmarks/bench.py`` divides samflow's rate by the NumPy, PyTorch and C roofline rates
(the issue's "share of the roofline"). Those rates mean something only if every
implementation computes the same run: here each baseline's end state (``theta`` and the
rescaled time ``tau``) after 60 steps of l2-SAM, L = 2, d = 4, float64, on a few points
of the bench's (alpha, rho) grid, against :func:`samflow.trajectory` on the same points;
and the bare JAX loops of ``benchmarks/xla_ceiling.py`` against the C kernel.
"""

from __future__ import annotations

import numpy as np
import pytest

import samflow
from benchmarks import baselines as bl
from benchmarks import roofline
from benchmarks.bench import ETA, MU4
from samflow.runners import Discrete, Every

STEPS = 60
RTOL = 1e-12
"""Float64, 60 steps: the implementations differ in the order of their sums (the C kernel
is built with -ffast-math, which may reassociate them), an ulp or so per step that the
run does not amplify at this step size. Measured: 3e-16 (NumPy) and 6e-17 (C) relative to
the largest weight, 2e-15 on ``tau``; the run moves the weights by 10 % and ``tau`` to 0.3,
so a baseline with another update, step size or time would be off by far more."""


@pytest.fixture(scope="module")
def grid():
    inputs = bl.grid_inputs(16, 2, len(MU4), np.float64)
    theta, tau = [], []
    for alpha, rho in zip(inputs["alpha"], inputs["rho"], strict=True):
        ds = samflow.trajectory(
            "sam-l2",
            depth=2,
            mu=MU4,
            alpha=float(alpha),
            rho=float(rho),
            runner=Discrete(eta=ETA, steps=STEPS, save=Every(STEPS)),
        )
        theta.append(ds["theta_final"].values)
        tau.append(float(ds["tau"].values[-1]))
    return inputs, np.array(theta), np.array(tau)


def close(got, want):
    """Equal to :data:`RTOL` of the largest magnitude of ``want``."""
    scale = np.max(np.abs(want))
    np.testing.assert_allclose(got, want, rtol=0, atol=RTOL * scale)


def test_numpy_baseline_runs_samflows_update(grid):
    inputs, theta, tau = grid
    got_theta, got_tau = bl.numpy_run(inputs, ETA, STEPS)
    close(got_theta, theta)
    close(got_tau, tau)


def test_torch_baseline_runs_samflows_update(grid):
    if not bl.torch_available():
        pytest.skip("PyTorch is not installed (pip install -e '.[bench]')")
    inputs, theta, tau = grid
    got_theta, got_tau = bl.torch_run(inputs, ETA, STEPS)
    close(got_theta, theta)
    close(got_tau, tau)


def test_roofline_kernel_runs_samflows_update(grid):
    lib = roofline.build(np.float64)
    if lib is None:
        pytest.skip("gcc not found: the roofline is not built")
    inputs, theta, tau = grid
    u, got_tau = roofline.runner(lib, inputs, ETA, STEPS)()
    # The balanced kernel keeps one layer u [d, B]; both layers of samflow's run equal it.
    close(np.broadcast_to(u.T[:, None, :], theta.shape), theta)
    close(got_tau, tau)


def test_xla_ceiling_script_runs_the_same_update(capsys):
    """benchmarks/xla_ceiling.py at toy size: every row is there, and each bare JAX loop
    ends where the C kernel does (float32, 40 steps: measured 4e-8 median relative
    difference; 1e-5 leaves room for another instruction set's rounding, and a loop
    with another update would be off by about the run's own change, a median 0.24)."""
    if roofline.build(np.float32) is None:
        pytest.skip("gcc not found: the roofline is not built")
    from benchmarks import xla_ceiling

    assert xla_ceiling.main(["--quick"]) == 0
    table = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    names = [line.split(" | ")[0].lstrip("| ") for line in table[1:]]
    loops = [f"JAX loop, {layout}" for layout in xla_ceiling.LAYOUTS]
    assert names == [
        "roofline (hand-fused C)",
        *loops,
        "samflow (sweep engine)",
        "samflow, 3 records",
        "samflow, 4 steps, 3 records",
    ]
    for line in table[2:5]:
        assert float(line.rstrip(" |").rsplit("| ", 1)[1]) < 1e-5
