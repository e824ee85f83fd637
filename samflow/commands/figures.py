"""``samflow figures``: rebuild every figure from the scripts in ``experiments/``.

Each script ``experiments/<name>.py`` exposes ``build(out_dir, quick) -> list[Path]``
and runs standalone as well (``python experiments/<name>.py [--quick]``).
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from pathlib import Path

from samflow.errors import InputError

FIGURES = (
    "phase_l2",
    "staircase",
    "timelines",
    "linf_limit",
    "depth",
    "depth1_max_margin",
    "multipoint",
    "usam",
    "discrete_vs_flow",
    "gradcam",
)
EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"


def register(sub) -> None:
    p = sub.add_parser(
        "figures",
        help="build the paper's figures (and ours) from experiments/",
        description="Build every figure as PNG and PDF with its netCDF beside it. "
        f"Names: {', '.join(FIGURES)}.",
    )
    p.add_argument("--quick", action="store_true", help="small grids (a few minutes in all)")
    p.add_argument("--only", action="append", choices=FIGURES, help="build only this (repeatable)")
    p.add_argument("--out", default="figures", help="output folder")
    p.set_defaults(func=run)


def load(name: str):
    path = EXPERIMENTS / f"{name}.py"
    if not path.exists():
        raise InputError(f"figure script not found: {path}")
    spec = importlib.util.spec_from_file_location(f"samflow_experiment_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(args: argparse.Namespace) -> int:
    names = args.only or [n for n in FIGURES if (EXPERIMENTS / f"{n}.py").exists()]
    start = time.perf_counter()
    for name in names:
        t0 = time.perf_counter()
        paths = load(name).build(Path(args.out), args.quick)
        built = ", ".join(str(p) for p in paths) or "nothing built"
        print(f"[{name}] {time.perf_counter() - t0:.1f} s: {built}")
    print(f"figures done in {time.perf_counter() - start:.1f} s")
    return 0
