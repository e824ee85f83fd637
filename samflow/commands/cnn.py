"""``samflow cnn``: the image experiment on the command line.

``samflow cnn`` trains one or more methods (``--method gd,sam-l2``) with the same data,
seeds and schedule (:func:`samflow.images.study`) and writes one result file;
``--figure`` needs both gd and sam-l2, since it sets their Grad-CAM maps side by side.
Every option is checked, and the output paths too, before any data is read; ``-q``
prints nothing but errors. ``samflow data download`` is :mod:`samflow.commands.data`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from samflow.commands.common import (
    add_output_args,
    finite_float,
    float_list,
    integer,
    parse_list,
)
from samflow.errors import InputError
from samflow.images import data as image_data
from samflow.images.attribution import BACKGROUNDS, DEFAULT_BACKGROUND_THRESHOLD, DEFAULT_BOX
from samflow.images.experiment import DEFAULTS
from samflow.images.models import CONVS, DEFAULT_CHANNELS, MIN_MAP_SIDE, MODELS
from samflow.images.results import DEFAULT_MATCH_LOSS
from samflow.images.tasks import DEFAULT_CLASSES
from samflow.images.train import BASE_OPTIMIZERS, LOOPS
from samflow.io import FIGURE_SUFFIXES, check_output, write_dataset
from samflow.rules import METHODS

# Upper bounds that keep a run within what it can hold: the step counter is an int32
# inside the jitted run, and seeds, records and conv widths beyond these would only
# exhaust memory (a Python list of seeds, the recorded history, the conv weights).
MAX_STEPS = 2**31 - 1
MAX_SEEDS = 10**6
MAX_CHANNELS = 4096


def _bounded(name: str, minimum: int, maximum: int | None = None):
    """argparse type: an integer (:func:`integer`) in ``[minimum, maximum]``."""
    parse_int = integer(name)

    def parse(text: str) -> int:
        value = parse_int(text)
        if value < minimum or (maximum is not None and value > maximum):
            bound = f">= {minimum}" if maximum is None else f"in {minimum}..{maximum}"
            raise argparse.ArgumentTypeError(f"{name} must be an integer {bound}, got {text!r}")
        return value

    return parse


def _channels(text: str) -> tuple[int, ...]:
    width = _bounded("channels", 1, MAX_CHANNELS)
    try:
        return tuple(width(v) for v in text.split(","))
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"channels must be conv widths in 1..{MAX_CHANNELS} like 8,16,32, got {text!r}"
        ) from None


def register(subparsers) -> None:
    """Add the ``cnn`` subcommand."""
    d = DEFAULTS
    cnn = subparsers.add_parser(
        "cnn",
        help="train a CNN (or the diagonal network) on images with GD / SAM; Grad-CAM",
        description="Train on a binary image task with the engine's step, measure the share "
        "of attribution on background pixels, write a result file (and a figure).",
    )
    cnn.add_argument(
        "--dataset",
        choices=image_data.DATASETS + image_data.BUILTIN,
        default="mnist",
        help="digits: scikit-learn's built-in 8x8 digits (no download, no --data-dir)",
    )
    cnn.add_argument(
        "--data-dir",
        help="data directory (default: $SAMFLOW_DATA, else $XDG_CACHE_HOME/samflow/data, "
        "else ~/.cache/samflow/data)",
    )
    cnn.add_argument(
        "--classes",
        help="class pair A,B (digits or CIFAR names; a side may be a group, 0+1+2+3+4); "
        "A is labelled -1, B +1; default: "
        + ", ".join(f"{k} {a},{b}" for k, (a, b) in DEFAULT_CLASSES.items()),
    )
    cnn.add_argument(
        "--method",
        required=True,
        help=f"a method or a comma list ({', '.join(METHODS)}); --figure needs gd,sam-l2",
    )
    cnn.add_argument("--rho", type=finite_float("rho"), default=d["rho"], help="SAM radius")
    cnn.add_argument(
        "--alpha",
        default=str(d["alpha"]),
        help="initialisation scale, multiplies the default initialisation; a comma list "
        "(e.g. 1.5,2,2.5,3) runs every method at each value (an alpha dim in the file)",
    )
    cnn.add_argument("--eta", type=finite_float("eta"), default=d["eta"], help="step size")
    cnn.add_argument(
        "--base-optimizer",
        choices=BASE_OPTIMIZERS,
        default="sgd",
        help="what takes the (SAM) gradient: sgd (p - eta g, the engine's step), momentum "
        "(heavy ball 0.9) or adam, both from optax at learning rate --eta",
    )
    cnn.add_argument("--steps", type=_bounded("steps", 1, MAX_STEPS), default=d["steps"])
    cnn.add_argument(
        "--batch",
        type=_bounded("batch", 0),
        default=d["batch"],
        help="minibatch size; 0 for full batch",
    )
    cnn.add_argument(
        "--seeds", type=_bounded("seeds", 1, MAX_SEEDS), default=d["seeds"], help="seeds 0..K-1"
    )
    cnn.add_argument(
        "--match-loss",
        type=finite_float("match-loss"),
        default=DEFAULT_MATCH_LOSS,
        help="training loss at which the methods' shares are also compared (the first "
        "record at or below it)",
    )
    cnn.add_argument(
        "--loop",
        choices=LOOPS,
        default="auto",
        help="training driver: host (a Python loop over one compiled step; fastest on a "
        "CPU), scan (one compiled program; for a GPU) or auto (host on a CPU)",
    )
    cnn.add_argument("--model", choices=MODELS, default="cnn")
    cnn.add_argument(
        "--channels",
        type=_channels,
        default=None,
        help="conv widths, e.g. 8,16,32 (default: "
        + ",".join(map(str, DEFAULT_CHANNELS))
        + f", less blocks from the end where the last map would be under {MIN_MAP_SIDE}x"
        f"{MIN_MAP_SIDE}: 8,16 on the 8x8 digits)",
    )
    cnn.add_argument(
        "--conv",
        choices=CONVS,
        default="auto",
        help="how the CNN computes its convolutions, not what: lax (lax.conv), shifted "
        "(shifted matrix products forward, lax.conv derivatives) or auto (shifted for "
        "one input channel on a CPU, else lax); all agree to float32 rounding",
    )
    cnn.add_argument("--n-train", type=_bounded("n-train", 1), default=d["n_train"])
    cnn.add_argument("--n-test", type=_bounded("n-test", 1), default=d["n_test"])
    cnn.add_argument(
        "--normalise",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="standardise pixels with the training mean and std (default: yes)",
    )
    cnn.add_argument(
        "--background-threshold",
        type=finite_float("background-threshold"),
        default=DEFAULT_BACKGROUND_THRESHOLD,
        help="brightness in [0, 1] below which a pixel is dark: the background with "
        "--background dark; reported beside the border share with --background border",
    )
    cnn.add_argument(
        "--background",
        choices=BACKGROUNDS,
        default="dark",
        help="which pixels are background: dark (brightness below --background-threshold; "
        "MNIST) or border (outside a centred box, --background-box; CIFAR-10, whose "
        "objects cover the centre)",
    )
    cnn.add_argument(
        "--background-box",
        type=finite_float("background-box"),
        default=DEFAULT_BOX,
        help="side of the centred object box of --background border, a fraction of the "
        f"image side (default {DEFAULT_BOX:g}: the central quarter of the area)",
    )
    cnn.add_argument(
        "--min-accuracy",
        type=finite_float("min-accuracy"),
        help="a run whose final test accuracy is below this did not learn: named in the "
        "summary and its seed's pairs left out of the paired differences (default: all count)",
    )
    cnn.add_argument("--record-every", type=_bounded("record-every", 1), default=d["record_every"])
    cnn.add_argument(
        "--split-seed",
        type=_bounded("split-seed", 0),
        default=0,
        help="seed of the train/test split (when one split only is on disk) and subsample",
    )
    cnn.add_argument(
        "--examples",
        type=_bounded("examples", 1),
        default=d["examples"],
        help="test images kept in the file for the figure",
    )
    cnn.add_argument("--out", required=True, help="result file (.nc)")
    cnn.add_argument(
        "--figure",
        help="figure file (.png, .pdf, .svg); needs --method gd,sam-l2; with several --alpha "
        "values also <stem>_alpha<suffix>, the share against alpha",
    )
    add_output_args(cnn)
    cnn.set_defaults(func=run_cnn)


def _methods(text: str) -> list[str]:
    methods = parse_list(text, "--method")
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise InputError(f"--method: unknown {unknown or text!r}; choose from {', '.join(METHODS)}")
    if len(set(methods)) != len(methods):
        raise InputError(f"--method lists a method twice: {text!r}")
    return methods


def run_cnn(args: argparse.Namespace) -> int:
    """Train (:func:`samflow.images.study`), write the result file, optionally draw the
    figures; exit status."""
    from samflow.images.experiment import check_alphas, study, summary_lines
    from samflow.images.plot import alpha_figure, gradcam_figure

    say = printer(args.quiet)
    methods = _methods(args.method)
    if args.figure and not {"gd", "sam-l2"} <= set(methods):
        raise InputError("--figure needs both methods: use --method gd,sam-l2")
    alphas = check_alphas(float_list(args.alpha, "alpha"), args.alpha)
    if args.data_dir is not None and not args.data_dir.strip():
        raise InputError("--data-dir is empty")
    check_output(args.out, (".nc",))
    if args.figure is not None:
        check_output(args.figure, FIGURE_SUFFIXES)
    ds = study(
        methods,
        dataset=args.dataset,
        data_dir=args.data_dir,
        classes=args.classes,
        alpha=alphas,
        base_optimizer=args.base_optimizer,
        batch=args.batch,
        seeds=args.seeds,
        model=args.model,
        channels=args.channels,
        conv=args.conv,
        n_train=args.n_train,
        n_test=args.n_test,
        normalise=args.normalise,
        split_seed=args.split_seed,
        examples=args.examples,
        loop=args.loop,
        rho=args.rho,
        eta=args.eta,
        steps=args.steps,
        record_every=args.record_every,
        background_threshold=args.background_threshold,
        background=args.background,
        background_box=args.background_box,
        min_accuracy=args.min_accuracy,
        match_loss=args.match_loss,
        log=say,
        history=getattr(args, "command_line", "samflow " + " ".join(sys.argv[1:])),
    )
    write_dataset(ds, args.out)
    say(f"wrote {args.out}")
    for line in summary_lines(ds):
        say(line)
    if args.figure:
        for path in gradcam_figure(ds, [args.figure]):
            say(f"wrote {path}")
        if len(alphas) > 1:
            figure = Path(args.figure)
            alpha_path = figure.with_name(f"{figure.stem}_alpha{figure.suffix}")
            for path in alpha_figure(ds, [alpha_path]):
                say(f"wrote {path}")
    return 0


def printer(quiet: bool):
    """``print``, or a function that prints nothing for ``-q``."""
    return (lambda _text: None) if quiet else print
