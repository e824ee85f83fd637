"""A fixed set of files the library writes, kept from before a refactor, to check that
the refactor moves nothing (issue 31: "every file the library writes today is the same
after the change, to rounding").

``COMMANDS`` names each file and the command line that writes it; ``python -m
tests.golden`` writes them anew into ``tests/golden_files/`` (do that only when a change
of the outputs is meant, and say so in the commit). :func:`differences` compares two
files: the same variables, dimensions, dtypes and attributes, integers equal, floats
equal to a tolerance set by their dtype.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import xarray as xr

FILES = Path(__file__).parent / "golden_files"

# The command lines, as a shell would take them (no argument holds a space).
LINES = {
    "traj_flow_l2": "trajectory --method sam-l2 --depth 2 --mu 1,2,3,4 --rho 1 --alpha 0.5 --mode"
    " flow --tau-max 20",
    "traj_flow_linf_l3_cap": "trajectory --method sam-linf --depth 3 --mu 1,2,3,4 --rho 0.05"
    " --alpha 0.01 --mode flow --tau-max 50 --tau-cap 500",
    "traj_discrete_l2": "trajectory --method sam-l2 --depth 2 --mu 1,2,3,4 --rho 1 --alpha 0.5"
    " --mode discrete --eta 0.05 --steps 400 --sharpness --save-theta",
    "traj_discrete_uv_exp": "trajectory --method usam --depth 2 --mu 1,2,3,4 --rho 0.2 --alpha 0.3"
    " --mode discrete --eta 0.02 --steps 300 --parametrization uv --loss exponential",
    "traj_flow_u2v2_squared": "trajectory --method sam-l2 --depth 2 --mu 1,2,3,4 --rho 0.1 --alpha"
    " 0.2 --mode flow --tau-max 5 --parametrization u2-v2 --loss squared",
    "phase_flow": "phase --method sam-l2 --depth 2 --mu 1,2,3,4 --mode flow --tau-max 30 --axis"
    " alpha=1e-3:1:6:log --axis rho=0.1,1",
    "phase_discrete_depth": "phase --method usam --mu 1,2,3,4 --rho 0.5 --mode discrete --eta 0.02"
    " --steps 500 --axis alpha=0.01:1:4:log --axis depth=1,2,3 --depth 2",
    "boundary_flow": "boundary --method sam-l2 --depth 2 --mu 1,2,3,4 --rho 1 --mode flow"
    " --tau-max 30 --alpha-range 1e-3,1 --scan-points 12 --rtol-alpha 1e-4",
    "fig_timelines": "figures --quick --only timelines",
    "fig_discrete_vs_flow": "figures --quick --only discrete_vs_flow",
    "cnn_digits": "cnn --dataset digits --method gd,sam-l2 --rho 0.05 --eta 0.1 --steps 20 --seeds"
    " 1 --record-every 10",
}
COMMANDS: dict[str, list[str]] = {name: line.split() for name, line in LINES.items()}

# float64: a refactor may reorder sums and products, which changes the last bits; the
# runs here are short and well conditioned, so 1e-9 (about 1e7 ulps) leaves room for that
# amplification and still catches any change of meaning. float32 (the CNN, trained with
# minibatch-free steps for 20 steps): 1e-4 of the variable's largest magnitude.
RTOL = {np.dtype("float64"): 1e-9, np.dtype("float32"): 1e-4}


def write(name: str, out: Path) -> list[Path]:
    """Run ``COMMANDS[name]`` (in this process) writing ``out / f"{name}.nc"``; a figure
    writes each of its netCDF files as ``out / f"{name}.{file}"`` (its PNG and PDF are
    left in a folder beside them)."""
    from samflow.cli import main

    command = COMMANDS[name]
    figure = command[0] == "figures"
    target = out / (f"{name}.figure" if figure else f"{name}.nc")
    args = [*command, "--out", str(target), "-q"]
    if command[0] == "phase":
        args.append("--overwrite")
    if main(args) != 0:
        raise RuntimeError(f"samflow {' '.join(args)} failed")
    if not figure:
        return [target]
    paths = []
    for nc in sorted(target.glob("*.nc")):
        paths.append(nc.replace(out / f"{name}.{nc.name}"))
    shutil.rmtree(target)
    return paths


# Variables that measure the machine, not the result (the CNN's wall-clock seconds).
MEASURED = ("seconds",)


def _volatile(key: str) -> bool:
    # sweep_key: a hash of the definition, whose format changed in issue 31 (KEY_FORMAT).
    return key in ("history", "sweep_key") or key.endswith("_version")


def _same_value(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    if a.dtype.kind == "f" and b.dtype.kind == "f":
        return bool(np.allclose(a, b, rtol=1e-9, atol=0, equal_nan=True))
    return bool(np.array_equal(a, b))


def differences(ref: xr.Dataset, new: xr.Dataset) -> list[str]:
    """What differs between ``ref`` and ``new`` (an empty list when nothing does)."""
    out = []
    before, after = set(ref.variables), set(new.variables)
    if before != after:
        out.append(
            f"variables: only before {sorted(before - after)}, only after {sorted(after - before)}"
        )
    keys = {k for k in ref.attrs if not _volatile(k)} | {k for k in new.attrs if not _volatile(k)}
    for k in sorted(keys):
        if k not in ref.attrs or k not in new.attrs:
            out.append(f"attribute {k}: only in {'after' if k in new.attrs else 'before'}")
        elif not _same_value(ref.attrs[k], new.attrs[k]):
            out.append(f"attribute {k}: {ref.attrs[k]!r} -> {new.attrs[k]!r}")
    for name in sorted(set(ref.variables) & set(new.variables) - set(MEASURED)):
        a, b = ref[name], new[name]
        if a.dims != b.dims or a.shape != b.shape or a.dtype != b.dtype:
            out.append(f"{name}: {a.dims} {a.shape} {a.dtype} -> {b.dims} {b.shape} {b.dtype}")
            continue
        for k in sorted(set(a.attrs) | set(b.attrs)):
            if not _same_value(a.attrs.get(k), b.attrs.get(k)):
                out.append(f"{name} attribute {k}: {a.attrs.get(k)!r} -> {b.attrs.get(k)!r}")
        x, y = np.asarray(a.values), np.asarray(b.values)
        if x.dtype.kind == "f":
            scale = np.nanmax(np.abs(x), initial=0.0) if x.size else 0.0
            rtol = RTOL.get(x.dtype, 1e-9)
            finite = np.isfinite(x) & np.isfinite(y)
            same_nonfinite = np.array_equal(np.isfinite(x), np.isfinite(y)) and np.array_equal(
                x[~finite], y[~finite], equal_nan=True
            )
            tol = rtol * np.abs(x[finite]) + (rtol * scale if x.dtype != np.float64 else 0.0)
            close = np.all(np.abs(x[finite] - y[finite]) <= tol)
            if not (same_nonfinite and close):
                worst = np.max(np.abs(x[finite] - y[finite]), initial=0.0)
                out.append(f"{name}: floats differ (largest |difference| {worst:.3g})")
        elif not np.array_equal(x, y):
            out.append(f"{name}: values differ at {int(np.sum(x != y))} places")
    return out


if __name__ == "__main__":  # python -m tests.golden [NAME ...]
    FILES.mkdir(exist_ok=True)
    for name in sys.argv[1:] or COMMANDS:
        for path in write(name, FILES):
            print(path)
