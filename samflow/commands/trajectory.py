"""``samflow trajectory``: one run, written as netCDF (and optionally a timeline)."""

from __future__ import annotations

import argparse

from samflow.commands.common import (
    add_model_args,
    add_output_args,
    add_problem_args,
    add_stochastic_args,
    classification_from_args,
    finite_float,
    float_list,
    load_array,
    model_from_args,
    problem_from_args,
    runner_from_args,
)


def register(sub) -> None:
    p = sub.add_parser(
        "trajectory",
        help="run one trajectory (discrete or flow) and classify it",
        description="Run GD / SAM on an L-layer linear diagonal network from one "
        "initialisation; write beta, tau, loss (and theta) over time as netCDF. "
        "Python: samflow.trajectory(...).",
    )
    add_problem_args(p)
    add_model_args(p)
    add_stochastic_args(p)
    init = p.add_mutually_exclusive_group(required=True)
    init.add_argument("--alpha", type=finite_float("alpha"), help="uniform scale: w^(l) = alpha")
    init.add_argument("--alpha-per-coord", help="per-coordinate scales a1,..,ad")
    init.add_argument("--theta0", help=".npy of shape (L, d)")
    p.add_argument("--out", required=True, help="output netCDF file")
    p.add_argument("--figure", help="timeline figure (PNG or PDF)")
    p.add_argument("--save-theta", action="store_true", help="also record theta over time")
    p.add_argument(
        "--yes",
        action="store_true",
        help="run a discrete run past a day on this machine all the same (refused without it)",
    )
    add_output_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from samflow.api import trajectory
    from samflow.io import (
        FIGURE_SUFFIXES,
        NETCDF_SUFFIXES,
        check_output,
        save_figure,
        write_dataset,
    )
    from samflow.regimes import REASON_MEANINGS, UNRESOLVED

    check_output(args.out, NETCDF_SUFFIXES)
    if args.figure:
        check_output(args.figure, FIGURE_SUFFIXES)
    ds = trajectory(
        args.method,
        depth=args.depth,
        **problem_from_args(args),
        alpha=args.alpha,
        alpha_per_coord=None
        if args.alpha_per_coord is None
        else float_list(args.alpha_per_coord, "alpha-per-coord"),
        theta0=None if args.theta0 is None else load_array(args.theta0, "theta0"),
        rho=args.rho,
        runner=runner_from_args(args),
        dtype=args.dtype,
        save_theta=args.save_theta,
        classification=classification_from_args(args),
        history=args.command_line,
        **model_from_args(args),
        seed=args.seed,
        yes=args.yes,
        progress=not args.quiet,
    )
    write_dataset(ds, args.out)
    if not args.quiet and "regime" in ds and int(ds["regime"]) == UNRESOLVED:
        reason = REASON_MEANINGS.split()[int(ds["unresolved_reason"])]
        print(
            f"{args.out}: regime {UNRESOLVED} (unresolved: {reason} where it stopped, "
            f"leader {int(ds['stop_leader'])}; a run goes on to its fate with --tau-cap "
            "(flow) or --step-cap (discrete))"
        )
    elif not args.quiet and "regime" in ds:
        print(
            f"{args.out}: regime {int(ds['regime'])} ({ds.attrs['regime_meaning']}), "
            f"limit coordinate {int(ds['limit_coord'])}"
        )
    elif not args.quiet:
        print(f"{args.out}: final loss {float(ds['loss'][-1]):.6g} ({args.loss} loss)")
    if args.figure:
        import matplotlib.pyplot as plt

        from samflow.plotting import timeline

        fig = timeline(ds)
        save_figure(fig, args.figure)
        plt.close(fig)
    return 0
