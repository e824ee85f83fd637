"""``samflow demo``: the built-in default problem, one trajectory per regime."""

from __future__ import annotations

import argparse

import numpy as np

from samflow.commands.common import add_output_args

DEMO_MU = np.array([1.0, 2.0, 3.0, 4.0])
DEMO_ALPHAS = {"collapse": 0.1, "sequential": 0.5, "direct": 3.0}


def register(sub) -> None:
    p = sub.add_parser(
        "demo",
        help="l2-SAM flow at mu = (1,2,3,4), L = 2, rho = 1: one alpha per regime",
        description="Write trajectories and timeline figures for alpha = 0.1, 0.5, 3 "
        "(collapse, sequential, direct) of the l2-SAM rescaled flow, and GD beside them.",
    )
    p.add_argument("--out", default="out/demo", help="output folder")
    add_output_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import matplotlib.pyplot as plt

    from samflow.api import trajectory
    from samflow.io import check_folder, save_figure, write_dataset
    from samflow.plotting import timeline
    from samflow.runners import Flow

    out = check_folder(args.out)
    fig, axes = plt.subplots(2, 3, figsize=(15, 6.5), sharex=True, squeeze=False)
    for col, (name, alpha) in enumerate(DEMO_ALPHAS.items()):
        for method in ("sam-l2", "gd"):
            ds = trajectory(
                method,
                depth=2,
                mu=DEMO_MU,
                alpha=alpha,
                rho=1.0 if method == "sam-l2" else None,  # GD has no ascent step: no rho
                runner=Flow(tau_max=50.0),
                history=getattr(args, "command_line", None),
            )
            path = write_dataset(ds, out / f"{method}_alpha{alpha:g}.nc")
            if not args.quiet:
                print(f"{path}: {ds.attrs['regime_meaning']} (expected for sam-l2: {name})")
            if method == "sam-l2":
                timeline(ds, axes[0, col], axes[1, col], title=f"l2-SAM, alpha = {alpha:g}")
                axes[0, col].set_title(f"alpha = {alpha:g}: {ds.attrs['regime_meaning']}")
    fig.suptitle("l2-SAM rescaled flow, L = 2, mu = (1, 2, 3, 4), rho = 1")
    for ext in ("png", "pdf"):
        path = save_figure(fig, out / f"timelines.{ext}")
        if not args.quiet:
            print(path)
    plt.close(fig)
    return 0
