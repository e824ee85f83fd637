"""``samflow figures``: rebuild every figure from the modules of :mod:`samflow.figures`.

Each module ``samflow.figures.<name>`` exposes ``build(out_dir, quick) -> list[Path]``
and runs standalone as well (``python -m samflow.figures.<name> [--quick]``). The
modules are part of the package, so an installed samflow builds them from any folder.

The exit status is 1 when no figure wrote anything (for example only ``gradcam`` and
no image data); an error inside a figure is not caught. No backend is chosen here:
without a display matplotlib falls back to Agg by itself, and ``MPLBACKEND`` or a
matplotlibrc still decide.
"""

from __future__ import annotations

import argparse
import sys
import time

from samflow.commands.common import add_output_args
from samflow.figures import FIGURES, describe, load
from samflow.io import check_folder


def register(sub) -> None:
    p = sub.add_parser(
        "figures",
        help="build the paper's figures (and ours) from samflow.figures",
        description="Build every figure as PNG and PDF with its netCDF beside it "
        "(modules samflow.figures.<name>). "
        f"Names: {', '.join(FIGURES)}.",
    )
    p.add_argument("--quick", action="store_true", help="small grids (a few minutes in all)")
    p.add_argument("--only", action="append", choices=FIGURES, help="build only this (repeatable)")
    p.add_argument("--out", default="figures", help="output folder")
    p.add_argument("--list", action="store_true", help="print the names and what each shows")
    add_output_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.list:
        width = max(len(n) for n in FIGURES)
        for name in FIGURES:
            print(f"{name:<{width}}  {describe(name)}")
        return 0
    names = args.only or list(FIGURES)
    out = check_folder(args.out)
    start = time.perf_counter()
    n_files = 0
    for name in names:
        t0 = time.perf_counter()
        if not args.quiet:
            print(f"[{name}] building ({names.index(name) + 1} of {len(names)}) ...", flush=True)
        paths = load(name).build(out, args.quick)
        n_files += len(paths)
        built = ", ".join(str(p) for p in paths) or "nothing built"
        if not args.quiet:
            print(f"[{name}] {time.perf_counter() - t0:.1f} s: {built}", flush=True)
    if n_files == 0:
        print(f"samflow figures: nothing built ({', '.join(names)} wrote no file)", file=sys.stderr)
        return 1
    if not args.quiet:
        print(f"figures done in {time.perf_counter() - start:.1f} s")
    return 0
