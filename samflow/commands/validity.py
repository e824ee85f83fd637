"""``samflow validity``: where the rescaled flow stops describing discrete SAM."""

from __future__ import annotations

import argparse

from samflow.commands.common import add_output_args, finite_float, float_list, integer
from samflow.errors import InputError

METHODS = ("gd", "sam-l2", "sam-linf", "usam")
RHO = 0.1


def register(sub) -> None:
    p = sub.add_parser(
        "validity",
        help="validity map: where discrete SAM stops agreeing with its rescaled flow",
        description="Run the flow to its fate at every alpha and the discrete runs over the "
        "grid (eta, alpha), each in one vmapped call, and record whether they agree on the "
        "regime, the leader path, the hand-off times and the limit coordinate, what only "
        "the discrete map does (period-2 oscillation, catapult, divergence) and where each "
        "run meets GD's and the method's edge of stability "
        "(docs/theory/validity.md#flow-validity). "
        "Python: samflow.validity.validity_map(...).",
    )
    p.add_argument("--method", choices=METHODS, default="sam-l2")
    p.add_argument("--depth", type=integer("depth"), default=2, help="number of layers L")
    p.add_argument("--mu", default="1,2,3,4", help="the data point x = mu (comma-separated)")
    p.add_argument(
        "--rho",
        type=finite_float("rho"),
        default=None,
        help=f"SAM radius (default {RHO:g}; not gd)",
    )
    p.add_argument(
        "--alpha",
        default="0.015:0.3:8:log",
        metavar="START:STOP:NUM[:log|:lin] | v1,v2,..",
        help="initialisation scales",
    )
    p.add_argument(
        "--eta",
        default="0.02:32:9:log",
        metavar="START:STOP:NUM[:log|:lin] | v1,v2,..",
        help="step sizes",
    )
    p.add_argument(
        "--steps",
        type=integer("steps"),
        default=None,
        help="discrete steps (default: 2 tau_cover / min eta, at most --max-steps)",
    )
    p.add_argument("--max-steps", type=integer("max-steps"), default=20_000)
    p.add_argument(
        "--tau-cover",
        type=finite_float("tau-cover"),
        default=None,
        help="rescaled time the smallest eta covers (default from the flow's hand-offs)",
    )
    p.add_argument(
        "--handoff-rtol",
        type=finite_float("handoff-rtol"),
        default=None,
        help="relative tolerance of hand-off times (default samflow.validity.HANDOFF_RTOL, 0.1)",
    )
    p.add_argument(
        "--no-sharpness",
        action="store_true",
        help="do not track the top Hessian eigenvalue (no edges of stability; faster)",
    )
    p.add_argument("--out", required=True, help="output netCDF file")
    p.add_argument("--figure", help="the map and its curves (PNG or PDF)")
    add_output_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from samflow.io import FIGURE_SUFFIXES, NETCDF_SUFFIXES, check_output, write_dataset
    from samflow.sweeps.axes import parse_axis

    check_output(args.out, NETCDF_SUFFIXES)
    if args.figure is not None:
        if not args.figure.strip():
            raise InputError("--figure is empty; give a PNG or PDF path, or leave it out")
        check_output(args.figure, FIGURE_SUFFIXES)
    # The options by their own names: the library would name its arguments (max_steps).
    for option, value, low in (
        ("--steps", args.steps, 1),
        ("--max-steps", args.max_steps, 1),
        ("--tau-cover", args.tau_cover, 0),
        ("--handoff-rtol", args.handoff_rtol, 0),
    ):
        positive = option in ("--tau-cover",)
        if value is not None and (value <= low if positive else value < low):
            relation = f"> {low}" if positive else f">= {low}"
            raise InputError(f"{option} must be {relation}, got {value}")
    if args.method == "gd" and args.rho is not None:
        raise InputError("--rho is not an option of --method gd")
    rho = None if args.method == "gd" else (RHO if args.rho is None else args.rho)
    mu = float_list(args.mu, "mu")
    alpha = parse_axis(f"alpha={args.alpha}").values
    eta = parse_axis(f"eta={args.eta}").values
    from samflow.schema import describe
    from samflow.validity import validity_map

    ds = validity_map(
        args.method,
        depth=args.depth,
        mu=mu,
        rho=rho,
        alpha=alpha,
        eta=eta,
        steps=args.steps,
        max_steps=args.max_steps,
        tau_cover=args.tau_cover,
        handoff_rtol=args.handoff_rtol,
        sharpness=not args.no_sharpness,
        history=args.command_line,
    )
    write_dataset(describe(ds), args.out)
    if not args.quiet:
        for name in ("eta_valid_regime", "eta_valid_path", "eta_breakdown", "eta_sam_edge"):
            print(f"{args.out}: {name} {ds[name].values.round(4).tolist()}")
    if args.figure is not None:
        import matplotlib.pyplot as plt

        from samflow.figures.flow_validity import draw
        from samflow.io import save_figure

        fig = draw({"": ds})
        save_figure(fig, args.figure)
        plt.close(fig)
    return 0
