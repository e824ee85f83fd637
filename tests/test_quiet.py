"""Quiet runs: a command that compiles a flow program prints no XLA error or warning.

XLA's CPU compiler logs ``E... algebraic_simplifier.cc:...] Algebraic simplifier is
likely stuck in a circular simplification loop`` when one pass keeps rewriting a
program for 50 runs; diffrax's 100 chained ``prevbefore(t1)`` did that whenever the
times of a vmapped tile were provably equal (samflow.flows._solve hides them behind an
optimization barrier). A ``samflow phase`` flow sweep over three alphas on every CPU
core (sharded, as the figures run) compiled the program that printed 8 such lines;
with the compile cache off it compiles here, so the check cannot pass by reading a
kept program.
"""

import os
import re
import subprocess
import sys

import xarray as xr

XLA_LINE = re.compile(r"^[EWF]\d{4} |algebraic_simplifier")


def test_flow_sweep_prints_no_xla_errors(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_CPP_")}
    env["SAMFLOW_COMPILE_CACHE"] = "off"
    out = tmp_path / "grid.nc"
    proc = subprocess.run(
        [sys.executable, "-m", "samflow.cli", "phase", "--method", "sam-l2", "--depth", "2",
         "--mu", "1,2,3,4", "--rho", "1", "--mode", "flow", "--axis", "alpha=0.1,0.5,3",
         "--out", str(out), "-q"],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    noisy = [line for line in proc.stderr.splitlines() if XLA_LINE.search(line)]
    assert noisy == []
    # the run did what it always did: one alpha per regime (collapse, sequential, direct)
    assert xr.load_dataset(out)["regime"].values.tolist() == [1, 2, 3]
