"""What ``import samflow`` and a second process's first trajectory import: nothing they
do not use (each costs start-up time; their costs are in docs/benchmarks.md#start-up)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

NEVER_ON_IMPORT = (
    "jax",
    "numpy",
    "xarray",
    "pandas",
    "scipy",
    "matplotlib",
    "tqdm",
    "diffrax",
    "equinox",
    "optimistix",
    "optax",
    "netCDF4",
    "sklearn",
    "importlib.metadata",
    "samflow.images",
    "samflow.figures",
    "samflow.plotting",
)
"""Modules ``import samflow`` must leave alone: its names load on first use."""


def _modules(code: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
    proc = subprocess.run(
        [sys.executable, "-c", code + "\nimport json, sys; print(json.dumps(sorted(sys.modules)))"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_import_samflow_imports_nothing_heavy():
    loaded = set(_modules("import samflow"))
    assert [m for m in NEVER_ON_IMPORT if m in loaded] == []
    # ... and the names are there when asked for
    loaded = set(_modules("import samflow; samflow.__version__; samflow.Flow"))
    assert "importlib.metadata" in loaded and "samflow.runners" in loaded
    assert "jax" not in loaded  # the settings objects are made without JAX
