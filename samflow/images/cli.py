"""``samflow cnn`` and ``samflow data``: the image experiment on the command line.

``samflow cnn`` trains one or more methods (``--method gd,sam-l2``) with the same data,
seeds and schedule and writes one result file; ``--figure`` needs both gd and sam-l2,
since it sets their Grad-CAM maps side by side. ``samflow data download`` fetches a
data set (see :mod:`samflow.images.download`). Every option is checked, and the output
paths too, before any data is read or fetched; ``-q`` prints nothing but errors.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from samflow import __version__
from samflow.commands.common import add_output_args, finite_float, float_list, integer
from samflow.errors import InputError
from samflow.images import data as image_data
from samflow.images.attribution import DEFAULT_BACKGROUND_THRESHOLD
from samflow.images.download import BASE_URL_ENV, ByteProgress, download
from samflow.images.models import DEFAULT_CHANNELS, MODELS, make_classifier
from samflow.images.results import DEFAULT_MATCH_LOSS
from samflow.images.train import BASE_OPTIMIZERS, LOOPS
from samflow.io import FIGURE_SUFFIXES, check_output, write_dataset
from samflow.rules import METHODS

# Chosen on MNIST 3 vs 8 (docs/images.md): with alpha = 2 and rho = 0.25, l2-SAM sits in
# the medium regime (a loss plateau, then learning), while rho = 0.5 at alpha = 1 and
# rho = 1 at alpha = 2 stayed at log 2 (collapse) for 240 steps.
DEFAULTS = {
    "rho": 0.25,
    "alpha": 2.0,
    "eta": 0.3,
    "steps": 600,
    "batch": 128,
    "seeds": 3,
    "n_train": 1000,
    "n_test": 500,
    "record_every": 100,
    "examples": 6,
}


# Upper bounds that keep a run within what it can hold: the step counter is an int32
# inside the jitted run, and seeds, records and conv widths beyond these would only
# exhaust memory (a Python list of seeds, the recorded history, the conv weights).
MAX_STEPS = 2**31 - 1
MAX_SEEDS = 10**6
MAX_RECORDS = 10**6
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
    """Add the ``cnn`` and ``data`` subcommands."""
    d = DEFAULTS
    cnn = subparsers.add_parser(
        "cnn",
        help="train a CNN (or the diagonal network) on images with GD / SAM; Grad-CAM",
        description="Train on a binary image task with the engine's step, measure the share "
        "of attribution on background pixels, write a result file (and a figure).",
    )
    cnn.add_argument("--dataset", choices=image_data.DATASETS, default="mnist")
    cnn.add_argument(
        "--data-dir",
        help="data directory (default: $SAMFLOW_DATA, else $XDG_CACHE_HOME/samflow/data, "
        "else ~/.cache/samflow/data)",
    )
    cnn.add_argument(
        "--classes",
        help="class pair A,B (digits or CIFAR names); A is labelled -1, B +1; default: "
        + ", ".join(f"{k} {a},{b}" for k, (a, b) in image_data.DEFAULT_CLASSES.items()),
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
        "--channels", type=_channels, default=DEFAULT_CHANNELS, help="conv widths, e.g. 8,16,32"
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
        help="brightness in [0, 1] below which a pixel is background",
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

    data = subparsers.add_parser("data", help="fetch image data sets")
    data_sub = data.add_subparsers(dest="data_command", required=True)
    dl = data_sub.add_parser(
        "download",
        help="download a data set, verify its SHA-256, resume partial downloads",
    )
    dl.add_argument("name", choices=image_data.DATASETS)
    dl.add_argument(
        "--dir", help="data directory; files go to DIR/NAME/ (default: as for samflow cnn)"
    )
    dl.add_argument(
        "--base-url",
        help=f"http(s):// or file:// mirror to fetch from (default: ${BASE_URL_ENV}, else "
        "the canonical)",
    )
    add_output_args(dl)
    dl.set_defaults(func=run_download)


def _methods(text: str) -> list[str]:
    methods = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if not methods or unknown:
        raise InputError(f"--method: unknown {unknown or text!r}; choose from {', '.join(METHODS)}")
    if len(set(methods)) != len(methods):
        raise InputError(f"--method lists a method twice: {text!r}")
    return methods


def run_cnn(args: argparse.Namespace) -> int:
    """Train, write the result file, optionally draw the figure; exit status."""
    from samflow.images.attribution import background_mask
    from samflow.images.plot import alpha_figure, gradcam_figure
    from samflow.images.results import build_dataset
    from samflow.images.train import TrainConfig, example_indices, train_seeds, uniform_share

    say = _printer(args.quiet)
    methods = _methods(args.method)
    if args.figure and not {"gd", "sam-l2"} <= set(methods):
        raise InputError("--figure needs both methods: use --method gd,sam-l2")
    if not 0 < args.background_threshold <= 1:
        raise InputError(
            f"--background-threshold must be in (0, 1], got {args.background_threshold}"
        )
    alphas = [float(a) for a in float_list(args.alpha, "alpha")]
    if min(alphas) <= 0:
        raise InputError(f"--alpha must be positive, got {args.alpha}")
    if len(set(alphas)) < len(alphas):
        raise InputError(f"--alpha repeats a value: {args.alpha}")
    if not 0 < args.match_loss:
        raise InputError(f"--match-loss must be positive, got {args.match_loss}")
    if args.rho < 0:
        raise InputError(f"--rho must be >= 0, got {args.rho}")
    if args.eta <= 0:
        raise InputError(f"--eta must be positive, got {args.eta}")
    if args.steps % args.record_every:
        raise InputError(
            f"--steps ({args.steps}) must be a positive multiple of "
            f"--record-every ({args.record_every})"
        )
    if args.steps // args.record_every > MAX_RECORDS:
        raise InputError(
            f"--steps {args.steps} / --record-every {args.record_every} makes "
            f"{args.steps // args.record_every} records; at most {MAX_RECORDS}"
        )
    if args.data_dir is not None and not args.data_dir.strip():
        raise InputError("--data-dir is empty")
    check_output(args.out, (".nc",))
    if args.figure is not None:
        check_output(args.figure, FIGURE_SUFFIXES)
    classes = image_data.parse_classes(args.classes, args.dataset)
    dataset = image_data.load_dataset(args.dataset, args.data_dir, split_seed=args.split_seed)
    if dataset.split_note:
        say(f"note: {dataset.split_note}")
    task = image_data.binary_task(
        dataset,
        classes,
        n_train=args.n_train,
        n_test=args.n_test,
        normalise=args.normalise,
        seed=args.split_seed,
    )
    n_train, n_test = task.x_train.shape[0], task.x_test.shape[0]
    height, width = task.x_train.shape[2:]
    if args.model == "cnn" and min(height, width) < 2 ** (len(args.channels) - 1):
        raise InputError(
            f"--channels {','.join(map(str, args.channels))}: {len(args.channels)} conv layers "
            f"halve the {height}x{width} images {len(args.channels) - 1} times, to nothing; "
            f"use at most {min(height, width).bit_length()} layers"
        )
    say(
        f"{args.dataset} {task.class_names[0]} (-1) vs {task.class_names[1]} (+1): "
        f"{n_train} training, {n_test} test images; model {args.model}, alpha {args.alpha}"
    )
    batch = None if args.batch == 0 else args.batch
    configs = [
        TrainConfig(
            method,
            args.rho,
            args.eta,
            args.steps,
            batch,
            args.record_every,
            args.base_optimizer,
            args.loop,
        )
        for method in methods
    ]
    for config in configs:
        config.check(n_train)
    examples = example_indices(task.y_test, args.examples)
    seeds = list(range(args.seeds))
    runs = {}
    for alpha in alphas:
        classifier = make_classifier(
            args.model, task.x_train.shape[1:], alpha=alpha, channels=args.channels
        )
        if len(alphas) > 1:
            say(f"alpha {alpha:g}:")
        runs[alpha] = [
            train_seeds(
                classifier,
                task,
                config,
                seeds,
                threshold=args.background_threshold,
                examples=examples,
                log=say,
            )
            for config in configs
        ]
    attrs = {
        "title": "GD vs SAM on images: background share of attribution",
        "dataset": args.dataset,
        "classes": classes,
        "class_names": task.class_names,
        "split_note": dataset.split_note or "train and test splits as published",
        "source": dataset.source,
        "model": args.model,
        "channels": args.channels if args.model == "cnn" else "",
        "rho": args.rho,
        "alpha": alphas[0] if len(alphas) == 1 else "",
        "eta": args.eta,
        "base_optimizer": args.base_optimizer,
        "steps": args.steps,
        "batch": "full" if batch is None else batch,
        "n_train": n_train,
        "n_test": n_test,
        "normalise": args.normalise,
        "background_threshold": args.background_threshold,
        "attribution_class": "the true label of each test image",
        "samflow_version": __version__,
        "command_line": getattr(args, "command_line", "samflow " + " ".join(sys.argv[1:])),
    }
    examples_arrays = {"image": task.raw_test[examples], "label": task.y_test[examples]}
    background = background_mask(task.raw_test, args.background_threshold)
    ds = build_dataset(
        runs if len(alphas) > 1 else runs[alphas[0]],
        examples_arrays,
        {k: v for k, v in attrs.items() if v != ""},
        match_loss=args.match_loss,
        uniform_share=uniform_share(np.asarray(background)),
    )
    write_dataset(ds, args.out)
    say(f"wrote {args.out}")
    for line in summary_lines(ds, runs):
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


def _printer(quiet: bool):
    """``print``, or a function that prints nothing for ``-q``."""
    return (lambda _text: None) if quiet else print


def summary_lines(ds, runs: dict) -> list[str]:
    """The printed summary: per alpha and method, then the paired differences."""
    lines = [f"uniform map background share: {float(ds['uniform_background_share']):.3f}"]
    for alpha, group in runs.items():
        one = ds.sel(alpha=alpha) if "alpha" in ds.dims else ds
        if len(runs) > 1:
            lines.append(f"alpha {alpha:g}:")
        lines += [_summary(run) for run in group]
        if "contrast" not in one.dims:
            continue
        for contrast in one["contrast"].values:
            c = one.sel(contrast=contrast)
            for var, label in (
                ("background_share", "at the end"),
                ("background_share_at_loss", f"at loss {ds.attrs['match_loss']:g}"),
            ):
                lines.append(
                    f"  {contrast} Grad-CAM background share {label}: "
                    f"{float(c[var + '_diff_mean']):+.3f} [{float(c[var + '_diff_ci_low']):+.3f}, "
                    f"{float(c[var + '_diff_ci_high']):+.3f}] (95% CI), paired t p = "
                    f"{float(c[var + '_diff_p_value']):.3g}, "
                    f"{int(c[var + '_diff_n'])} seeds"
                )
    return lines


def _summary(run) -> str:
    h = run.history

    def ms(values: np.ndarray) -> str:
        return f"{np.nanmean(values):.3f} ± {np.nanstd(values, ddof=min(1, values.size - 1)):.3f}"

    return (
        f"{run.method:8s} background share: Grad-CAM {ms(h.background_share[:, -1])}, "
        f"saliency {ms(h.saliency_background_share[:, -1])}; top-10% mass "
        f"{ms(h.top_mass[:, -1])}; occlusion drop background {ms(h.occlusion_background[:, -1])}"
        f" / stroke {ms(h.occlusion_stroke[:, -1])}; test accuracy "
        f"{ms(h.test_accuracy[:, -1])} over {run.seeds.size} seeds ({run.seconds:.0f} s)"
    )


def run_download(args: argparse.Namespace) -> int:
    """Download a data set; exit status."""
    say = _printer(args.quiet)
    if args.dir is not None and not args.dir.strip():
        raise InputError("--dir is empty")
    directory = image_data.resolve_data_dir(args.dir)
    progress = None if args.quiet else ByteProgress(sys.stderr)
    download(args.name, directory, base_url=args.base_url, log=say, progress=progress)
    say(f"done: {args.name} in {directory / args.name}")
    return 0
