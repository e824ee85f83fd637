"""``samflow boundary``: every critical alpha of each regime edge over a grid, scan then bisect."""

from __future__ import annotations

import argparse

import numpy as np

from samflow._boundary import (
    ALPHA_LIMITS,
    MAX_SCAN_POINTS,
    MIN_RTOL_ALPHA,
    SCAN_PER_DECADE,
    BoundarySearch,
)
from samflow.commands.common import (
    add_output_args,
    add_problem_args,
    classification_from_args,
    finite_float,
    float_list,
    integer,
    problem_from_args,
    runner_from_args,
)
from samflow.errors import InputError
from samflow.runners import default


def register(sub) -> None:
    p = sub.add_parser(
        "boundary",
        help="every collapse and direct edge in alpha over a grid",
        description="Find, for every point of a grid of the other axes (rho, depth, mu, eta), "
        "every alpha in the range where the regime starts or stops being collapse, and "
        "where it starts or stops being direct: a scan of log-spaced alphas, then a "
        "bisection on log alpha of every change found (vmapped runs). "
        "alpha_collapse / alpha_direct hold the edge where exactly one exists, "
        "alpha_*_all every edge, why_nan_* why a value is NaN. "
        "Python: samflow.boundary(...).",
    )
    add_problem_args(p)
    p.set_defaults(mode="flow")
    p.add_argument(
        "--axis",
        action="append",
        default=[],
        metavar="NAME=START:STOP:NUM[:log|:lin] | NAME=v1,v2,..",
        help="grid axis (repeatable): rho, depth, eta, mu (not alpha: it is solved for)",
    )
    p.add_argument(
        "--alpha-range",
        default=",".join(f"{v:g}" for v in default(BoundarySearch, "alpha_range")),
        help="range LOW,HIGH of alpha scanned for edges, within "
        f"[{ALPHA_LIMITS[0]:g}, {ALPHA_LIMITS[1]:g}]",
    )
    p.add_argument(
        "--scan-points",
        type=integer("scan-points"),
        default=default(BoundarySearch, "scan_points"),
        help=f"log-spaced alphas scanned (default {SCAN_PER_DECADE} per decade, at least 9; "
        f"at most {MAX_SCAN_POINTS}); two edges closer than one scan step are not seen",
    )
    p.add_argument(
        "--rtol-alpha",
        type=finite_float("rtol-alpha"),
        default=default(BoundarySearch, "rtol_alpha"),
        help=f"relative tolerance of each critical alpha (at least {MIN_RTOL_ALPHA:g})",
    )
    p.add_argument("--out", required=True, help="output netCDF file")
    p.add_argument("--figure", help="figure of every edge against the first axis (PNG or PDF)")
    add_output_args(p, "--no-progress")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from samflow._boundary import boundary
    from samflow.io import FIGURE_SUFFIXES, NETCDF_SUFFIXES, check_output, write_dataset
    from samflow.sweeps.axes import parse_axis

    check_output(args.out, NETCDF_SUFFIXES)
    if args.figure:
        check_output(args.figure, FIGURE_SUFFIXES)
    problem = problem_from_args(args)
    d = len(problem["mu"]) if "mu" in problem else problem["data"][0].shape[-1]
    axes = {}
    for text in args.axis:
        axis = parse_axis(text, d)
        if axis.name in axes:
            raise InputError(f"axis {axis.name} given twice")
        axes[axis.name] = axis.values
    lo_hi = float_list(args.alpha_range, "alpha-range")
    ds = boundary(
        args.method,
        depth=args.depth,
        **problem,
        axes=axes,
        rho=args.rho,
        runner=runner_from_args(args),
        search=BoundarySearch(
            alpha_range=tuple(lo_hi), scan_points=args.scan_points, rtol_alpha=args.rtol_alpha
        ),
        progress=not args.quiet,
        dtype=args.dtype,
        classification=classification_from_args(args),
        history=args.command_line,
    )
    write_dataset(ds, args.out)
    if not args.quiet:
        for name in ("alpha_collapse", "alpha_direct"):
            v = ds[name].values
            shown = np.array2string(v.ravel()[:6], precision=6)
            print(f"{args.out}: {name} {shown}{' ...' if v.size > 6 else ''}")
            several = int((ds[f"n_edges_{name[6:]}"].values > 1).sum())
            if several:
                print(f"{args.out}: {several} point(s) with several {name[6:]} edges: {name}_all")
    if args.figure:
        import matplotlib.pyplot as plt

        from samflow.io import save_figure
        from samflow.plotting import boundary_figure

        fig = boundary_figure(ds)
        save_figure(fig, args.figure)
        plt.close(fig)
    return 0
