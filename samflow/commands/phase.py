"""``samflow phase``: a regime map over a grid of axes, chunked, resumable, sharded."""

from __future__ import annotations

import argparse
import warnings

import numpy as np

from samflow.commands.common import (
    add_model_args,
    add_output_args,
    add_plateau_arg,
    add_problem_args,
    add_stochastic_args,
    classification_from_args,
    finite_float,
    float_list,
    integer,
    load_array,
    model_from_args,
    problem_from_args,
    runner_from_args,
)
from samflow.errors import InputError
from samflow.inputs import DEFAULT_CHUNK, SEED_ALPHA_RANGE


def register(sub) -> None:
    p = sub.add_parser(
        "phase",
        help="regime map over a grid (alpha, rho, depth, eta, mu, alpha_j, seed, noise_seed)",
        description="Run one compiled, vmapped program over a grid of initialisations "
        "and hyper-parameters; write regime, limit coordinate, dominant-coordinate "
        "timelines and hand-off times as netCDF. Chunks are written to <out>.work/ and "
        "a rerun of the same command resumes there.",
    )
    add_problem_args(p)
    add_model_args(p)
    add_stochastic_args(p)
    p.add_argument(
        "--axis",
        action="append",
        default=[],
        metavar="NAME=START:STOP:NUM[:log|:lin] | NAME=v1,v2,..",
        help="grid axis (repeatable): alpha, alpha_1..alpha_d, rho, depth, eta, mu, seed "
        "(random alpha_j; with stochastic steps it keys their draws too), noise_seed (the "
        "stochastic steps' draws only)",
    )
    p.add_argument(
        "--alpha", type=finite_float("alpha"), help="alpha where no axis sets it (default 1)"
    )
    p.add_argument("--mu-file", help="for --axis mu: .npy or text file of mu vectors (k, d)")
    p.add_argument(
        "--alpha-range",
        default=",".join(f"{v:g}" for v in SEED_ALPHA_RANGE),
        help="for --axis seed: alpha_j log-uniform in LOW,HIGH",
    )
    add_plateau_arg(p)
    p.add_argument(
        "--chunk", type=integer("chunk"), default=DEFAULT_CHUNK, help="grid points per chunk"
    )
    p.add_argument(
        "--save-trajectories", action="store_true", help="also keep beta(time, coord) per point"
    )
    p.add_argument(
        "--yes",
        action="store_true",
        help="run a discrete sweep past a day on this machine all the same (refused without it)",
    )
    add_output_args(p, "--no-progress")
    p.add_argument("--out", required=True, help="output netCDF file")
    p.add_argument("--figure", help="phase-diagram figure (PNG or PDF) of the first two axes")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="recompute --out and rewrite it, also where it holds another sweep",
    )
    p.set_defaults(func=run)


def _mu_file(path: str) -> np.ndarray:
    """The mu vectors ``[k, d]`` of a ``.npy`` or comma-separated text file (the values are
    checked by the library)."""
    if path.endswith(".npy"):
        rows = np.atleast_2d(load_array(path, "mu"))
    else:
        try:
            with warnings.catch_warnings():  # an empty file: refused below, by name
                warnings.simplefilter("ignore", UserWarning)
                rows = np.loadtxt(path, delimiter=",", ndmin=2)
        except FileNotFoundError:
            raise InputError(f"mu file not found: {path}") from None
        except (OSError, ValueError) as err:
            raise InputError(f"cannot read mu file {path}: {str(err).splitlines()[0]}") from None
    if rows.size == 0:
        raise InputError(f"mu file {path} holds no mu vectors (shape {rows.shape})")
    return rows


def sweep_kwargs(args: argparse.Namespace) -> dict:
    """The keyword arguments of :func:`samflow.sweep` that the options describe."""
    from samflow.sweeps.axes import parse_axis

    problem = problem_from_args(args)
    d = len(problem["mu"]) if "mu" in problem else problem["data"][0].shape[-1]
    axes = {}
    for text in args.axis:
        axis = parse_axis(text, d)
        if axis.name in axes:
            raise InputError(f"axis {axis.name} given twice")
        axes[axis.name] = axis.values
    if not axes:
        raise InputError("phase needs at least one --axis")
    if "mu" in axes and "mu" not in problem:
        raise InputError("axis mu needs --mu (one point), not --data")
    if "mu" in axes and not args.mu_file:
        raise InputError("axis mu needs --mu-file with the mu vectors")
    if args.mu_file and "mu" not in axes:
        raise InputError(f"--mu-file {args.mu_file} is given but no --axis mu indexes it")
    lo_hi = float_list(args.alpha_range, "alpha-range")
    return dict(
        method=args.method,
        depth=args.depth,
        **problem,
        axes=axes,
        rho=args.rho,
        alpha=args.alpha,
        runner=runner_from_args(args),
        dtype=args.dtype,
        chunk=args.chunk,
        mu_set=_mu_file(args.mu_file) if "mu" in axes else None,
        alpha_range=tuple(lo_hi),
        classification=classification_from_args(args),
        save_trajectories=args.save_trajectories,
        **model_from_args(args),
        seed=args.seed,
    )


def run(args: argparse.Namespace) -> int:
    from samflow.api import sweep
    from samflow.io import FIGURE_SUFFIXES, NETCDF_SUFFIXES, check_output
    from samflow.model import Model

    kwargs = sweep_kwargs(args)
    check_output(args.out, NETCDF_SUFFIXES)
    if args.figure:
        check_output(args.figure, FIGURE_SUFFIXES)
        if not Model(kwargs["parametrization"], kwargs["loss"]).classifies:
            raise InputError(
                "--figure draws a regime map: regimes need the product network and a margin "
                "loss (logistic, exponential)"
            )
    ds = sweep(
        **kwargs,
        out=args.out,
        progress=not args.quiet,
        overwrite=args.overwrite,
        history=args.command_line,
        yes=args.yes,
    )
    if not args.quiet and "regime" in ds:
        values, n = np.unique(ds["regime"].values, return_counts=True)
        counts = {int(k): int(v) for k, v in zip(values, n, strict=True)}
        print(f"{args.out}: {ds['regime'].size} grid points, regime counts {counts}")
    elif not args.quiet:
        size = ds["loss"][..., -1].size
        print(f"{args.out}: {size} grid points (no regimes: {args.parametrization}, {args.loss})")
    if args.figure:
        import matplotlib.pyplot as plt

        from samflow.io import save_figure
        from samflow.plotting import phase_map

        fig = phase_map(ds)
        save_figure(fig, args.figure)
        plt.close(fig)
    return 0
