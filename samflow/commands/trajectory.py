"""``samflow trajectory``: one run, written as netCDF (and optionally a timeline)."""

from __future__ import annotations

import argparse

import numpy as np

from samflow.commands.common import add_problem_args, finite_float, float_list, problem_from_args
from samflow.errors import InputError
from samflow.init import balanced, check_alpha, from_array


def register(sub) -> None:
    p = sub.add_parser(
        "trajectory",
        help="run one trajectory (discrete or flow) and classify it",
        description="Run GD / SAM on an L-layer linear diagonal network from one "
        "initialisation; write beta, tau, loss (and theta) over time as netCDF.",
    )
    add_problem_args(p)
    init = p.add_mutually_exclusive_group(required=True)
    init.add_argument("--alpha", type=finite_float("alpha"), help="uniform scale: w^(l) = alpha")
    init.add_argument("--alpha-per-coord", help="per-coordinate scales a1,..,ad")
    init.add_argument("--theta0", help=".npy of shape (L, d)")
    p.add_argument("--out", required=True, help="output netCDF file")
    p.add_argument("--figure", help="timeline figure (PNG or PDF)")
    p.add_argument("--save-theta", action="store_true", help="also record theta over time")
    p.set_defaults(func=run)


def initial_theta(args, d: int) -> np.ndarray:
    """``[L, d]`` initialisation from --alpha, --alpha-per-coord or --theta0."""
    if args.alpha is not None:
        return balanced(check_alpha(args.alpha), d, args.depth)
    if args.alpha_per_coord is not None:
        alphas = float_list(args.alpha_per_coord, "alpha-per-coord")
        if alphas.size != d:
            raise InputError(f"alpha-per-coord has {alphas.size} entries but d = {d}")
        return balanced(check_alpha(alphas, "alpha-per-coord"), d, args.depth)
    try:
        theta0 = np.load(args.theta0, allow_pickle=False)
    except FileNotFoundError:
        raise InputError(f"theta0 file not found: {args.theta0}") from None
    except (OSError, ValueError) as err:
        raise InputError(f"cannot read theta0 file {args.theta0}: {err}") from None
    if theta0.ndim != 2 or theta0.shape[0] != args.depth:
        raise InputError(f"theta0 must have shape (L={args.depth}, d={d}), got {theta0.shape}")
    return from_array(theta0, d)


def run(args: argparse.Namespace) -> int:
    from samflow.discrete import check_rates
    from samflow.io import save_figure, write_dataset
    from samflow.trajectory import trajectory

    problem = problem_from_args(args)
    d = problem.X.shape[1]
    check_rates(args.method, args.rho, args.eta)
    theta0 = initial_theta(args, d)
    flow_options = {
        "formulation": args.formulation,
        "solver": args.solver,
        "rtol": args.rtol,
        "atol": args.atol,
        "max_steps": args.max_steps,
    }
    ds = trajectory(
        problem,
        theta0,
        args.depth,
        args.method,
        args.rho,
        args.mode,
        eta=args.eta,
        steps=args.steps,
        record_every=args.record_every,
        log_records=args.log_records,
        tau_max=args.tau_max,
        tau_min=args.tau_min,
        n_save=args.n_save,
        flow_options=flow_options,
        dtype=args.dtype,
        save_theta=args.save_theta,
        collapse_factor=args.collapse_factor,
        command_line=args.command_line,
    )
    write_dataset(ds, args.out)
    print(
        f"{args.out}: regime {ds.attrs['regime']} ({ds.attrs['regime_meaning']}), "
        f"limit coordinate {ds.attrs['limit_coord']}"
    )
    if args.figure:
        import matplotlib.pyplot as plt

        from samflow.plotting import timeline

        fig = timeline(ds)
        save_figure(fig, args.figure)
        plt.close(fig)
    return 0
