"""``samflow phase``: a regime map over a grid of axes, chunked, resumable, sharded."""

from __future__ import annotations

import argparse

import numpy as np

from samflow.commands.common import add_problem_args, finite_float, float_list, problem_from_args
from samflow.errors import InputError


def register(sub) -> None:
    p = sub.add_parser(
        "phase",
        help="regime map over a grid (alpha, rho, depth, eta, mu, alpha_j, seed)",
        description="Run one compiled, vmapped program over a grid of initialisations "
        "and hyper-parameters; write regime, limit coordinate, dominant-coordinate "
        "timelines and hand-off times as netCDF. Chunks are written to <out>.work/ and "
        "a rerun of the same command resumes there.",
    )
    add_problem_args(p)
    p.set_defaults(steps=2000, n_save=60, rtol=1e-6, atol=1e-9, max_steps=20_000)
    p.add_argument(
        "--axis",
        action="append",
        default=[],
        metavar="NAME=START:STOP:NUM[:log|:lin] | NAME=v1,v2,..",
        help="grid axis (repeatable): alpha, alpha_1..alpha_d, rho, depth, eta, mu, seed",
    )
    p.add_argument("--alpha", type=finite_float("alpha"), default=1.0, help="fixed alpha")
    p.add_argument("--mu-file", help="for --axis mu: .npy or text file of mu vectors (k, d)")
    p.add_argument(
        "--alpha-range",
        default="0.05,5",
        help="for --axis seed: alpha_j log-uniform in LOW,HIGH",
    )
    p.add_argument(
        "--plateau-fraction",
        type=finite_float("plateau-fraction"),
        default=0.5,
        help="plateau ends when the loss falls to this fraction of its initial value",
    )
    p.add_argument("--chunk", type=int, default=16384, help="grid points per chunk")
    p.add_argument(
        "--save-trajectories", action="store_true", help="also keep beta(time, coord) per point"
    )
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("--out", required=True, help="output netCDF file")
    p.add_argument("--figure", help="phase-diagram figure (PNG or PDF) of the first two axes")
    p.set_defaults(func=run)


def spec_from_args(args: argparse.Namespace):
    from samflow.discrete import check_rates
    from samflow.sweep import SweepSpec, check_axes, parse_axis

    problem = problem_from_args(args)
    d = problem.X.shape[1]
    axes = [parse_axis(text, d) for text in args.axis]
    check_axes(axes, args.mode)
    names = [a.name for a in axes]
    sam = args.method != "gd"
    if sam and args.rho is None and "rho" not in names:
        raise InputError(f"method {args.method} needs --rho or --axis rho=...")
    check_rates(args.method, args.rho if args.rho is not None else (1.0 if sam else None), args.eta)
    if args.alpha <= 0:
        raise InputError(f"alpha must be > 0, got {args.alpha}")
    if args.chunk < 1:
        raise InputError(f"chunk must be >= 1, got {args.chunk}")
    lo, hi = float_list(args.alpha_range, "alpha-range")[:2]
    if not 0 < lo < hi:
        raise InputError(f"alpha-range must be 0 < LOW < HIGH, got {args.alpha_range}")
    mu_set = ()
    if "mu" in names:
        if args.data is not None:
            raise InputError("axis mu needs --mu (one point), not --data")
        if not args.mu_file:
            raise InputError("axis mu needs --mu-file with the mu vectors")
        try:
            mus = (
                np.load(args.mu_file)
                if args.mu_file.endswith(".npy")
                else np.loadtxt(args.mu_file, delimiter=",", ndmin=2)
            )
        except (OSError, ValueError) as err:
            raise InputError(f"cannot read mu file {args.mu_file}: {err}") from None
        mus = np.atleast_2d(mus)
        if mus.shape[1] != d or not np.all(np.isfinite(mus)) or np.any(mus <= 0):
            raise InputError(f"mu file {args.mu_file} must hold finite positive (k, d={d}) rows")
        mu_axis = next(a for a in axes if a.name == "mu")
        if min(mu_axis.values) < 0 or max(mu_axis.values) >= len(mus):
            raise InputError(f"axis mu indexes rows 0..{len(mus) - 1} of {args.mu_file}")
        mu_set = tuple(map(tuple, mus.tolist()))
    from samflow.flows import SOLVERS

    if args.solver not in SOLVERS:
        raise InputError(f"unknown solver {args.solver!r}; choose from {', '.join(SOLVERS)}")
    one_point = problem.X.shape[0] == 1 and args.data is None
    return SweepSpec(
        method=args.method,
        mode=args.mode,
        depth=args.depth,
        axes=tuple(axes),
        alpha=args.alpha,
        rho=float(args.rho) if args.rho is not None else 0.0,
        eta=args.eta,
        steps=args.steps,
        record_every=args.record_every,
        tau_max=args.tau_max,
        tau_min=args.tau_min,
        n_save=args.n_save,
        dtype=args.dtype,
        alpha_range=(float(lo), float(hi)),
        collapse_factor=args.collapse_factor,
        plateau_fraction=args.plateau_fraction,
        solver=args.solver,
        rtol=args.rtol,
        atol=args.atol,
        max_steps=args.max_steps,
        save_trajectories=args.save_trajectories,
        mu=tuple(problem.X[0].tolist()) if one_point else (),
        mu_set=mu_set,
        data=()
        if one_point
        else (tuple(map(tuple, problem.X.tolist())), tuple(problem.y.tolist())),
    )


def run(args: argparse.Namespace) -> int:
    from samflow.sweep import run_sweep

    if args.log_records is not None:
        raise InputError("phase records every --record-every steps; --log-records is not supported")
    spec = spec_from_args(args)
    ds = run_sweep(
        spec,
        args.out,
        chunk=args.chunk,
        command_line=args.command_line,
        progress=not args.no_progress,
    )
    counts = {
        int(k): int(v)
        for k, v in zip(*np.unique(ds["regime"].values, return_counts=True), strict=True)
    }
    print(f"{args.out}: {spec.size} grid points, regime counts {counts}")
    if args.figure:
        import matplotlib.pyplot as plt

        from samflow.io import save_figure
        from samflow.plotting import phase_map

        fig = phase_map(ds)
        save_figure(fig, args.figure)
        plt.close(fig)
    return 0
