"""Argument parsing shared by the subcommands.

The command line only parses: each option's default is read from the object that owns
it (the runners, :class:`samflow.Classification`, :class:`samflow.Summaries`: their
fields' defaults, by :func:`samflow.runners.default`), values are checked by the library
(:meth:`samflow.sweeps.spec.SweepSpec.from_inputs`, without JAX), whose ``InputError``
the command line prints as one line with exit status 2. Nothing here imports JAX.
"""

from __future__ import annotations

import argparse
import os
import zipfile

import numpy as np

from samflow import inputs
from samflow.classification import Classification
from samflow.errors import InputError
from samflow.runners import SOLVERS, TAU_MIN_SHARE, Discrete, Every, Flow, LogSpaced, default
from samflow.summaries import Summaries


def parse_list(text: str, name: str) -> list[str]:
    """The items of a comma list ``"a,b,c"``, stripped; InputError naming ``name`` for an
    empty list or an empty item (``"1,,2"``, ``"1,2,"``: a typo, never silently dropped)."""
    items = [item.strip() for item in text.split(",")]
    if not text.strip():
        raise InputError(f"{name} is empty")
    if any(not item for item in items):
        raise InputError(f"{name} has an empty item: {text!r}")
    return items


def float_list(text: str, name: str) -> np.ndarray:
    """Parse ``"1,2,3"`` into finite floats; InputError naming ``name`` otherwise."""
    items = parse_list(text, name)
    try:
        if not text.isascii():  # float() takes other scripts' digits: '١' is 1
            raise ValueError(text)
        values = np.array([float(v) for v in items])
    except ValueError:
        raise InputError(f"{name} must be comma-separated numbers, got {text!r}") from None
    if not np.all(np.isfinite(values)):
        raise InputError(f"{name} contains NaN or inf: {text!r}")
    return values


def finite_float(name: str):
    """argparse type: a finite float, the error naming the option."""

    def parse(text: str) -> float:
        try:
            if not text.isascii():  # float() takes other scripts' digits: '١' is 1
                raise ValueError(text)
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None
        if not np.isfinite(value):
            raise argparse.ArgumentTypeError(f"{name} must be finite, got {text!r}")
        return value

    return parse


def integer(name: str):
    """argparse type: an integer in ASCII digits, the error naming the option."""

    def parse(text: str) -> int:
        try:
            if not text.isascii():  # int() takes other scripts' digits: '١' is 1
                raise ValueError(text)
            return int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, got {text!r}") from None

    return parse


def load_array(path: str, what: str) -> np.ndarray:
    """The array in the ``.npy`` file ``path`` (``what`` names it in errors); its values
    are checked by the library."""
    if not os.path.isfile(path):
        raise InputError(f"{what} file not found: {path}")
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as err:  # EOFError: an empty file
        raise InputError(f"cannot read {what} file {path}: {_first_line(err)}") from None


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def load_npz_problem(path: str) -> tuple[np.ndarray, np.ndarray]:
    """``(X, y)`` from an ``.npz`` holding ``X`` ``[n, d]`` and ``y`` ``[n]``.

    Only the file is checked here; the values are checked by
    :func:`samflow.inputs.check_problem`.
    """
    return _load_npz(path)[:2]


def _load_npz(path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``(X, y, beta_star)`` of an ``.npz`` (``beta_star``: None when the file has none)."""
    if not os.path.isfile(path):
        raise InputError(f"data file not found: {path}")
    try:
        with np.load(path, allow_pickle=False) as f:
            if not hasattr(f, "files"):
                raise InputError(f"data file {path} is one array, not an .npz with X and y")
            missing = [k for k in ("X", "y") if k not in f.files]
            if missing:
                raise InputError(f"data file {path} lacks array(s) {', '.join(missing)}")
            star = np.asarray(f["beta_star"]) if "beta_star" in f.files else None
            return np.asarray(f["X"]), np.asarray(f["y"]), star
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        if isinstance(err, InputError):
            raise
        raise InputError(f"cannot read data file {path}: {_first_line(err)}") from None


def add_problem_args(p: argparse.ArgumentParser) -> None:
    """Method, depth, problem and runner options (defaults from the runners)."""
    p.add_argument("--method", required=True, choices=tuple(inputs.METHODS), help="optimizer")
    p.add_argument(
        "--depth",
        required=True,
        type=integer("depth"),
        help=f"number of layers L, 1..{inputs.MAX_LAYERS}",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--mu", help="one data point x = mu, y = +1: comma-separated, > 0")
    src.add_argument(
        "--data",
        help=".npz with X (n, d) and y (n,): labels in {-1, +1} for a margin loss, real "
        "targets for --loss squared; optionally beta_star (d,), the ground truth",
    )
    p.add_argument(
        "--rho", type=finite_float("rho"), help="SAM radius (required for SAM; not for gd)"
    )
    p.add_argument("--mode", choices=("discrete", "flow"), default="discrete")
    # No argparse defaults for the runners' options: an option given for the other mode
    # is refused (runner_from_args), and an absent one takes the runner's own default.
    options = {
        "eta": (finite_float, Discrete, "step size (discrete)"),
        "steps": (integer, Discrete, "number of steps (discrete)"),
        "record-every": (integer, None, "record every K steps (discrete; default steps/100)"),
        "log-records": (integer, None, "instead: this many log-spaced records (discrete)"),
        "step-cap": (
            integer,
            None,
            "discrete: a run not decided at the last step goes on, unrecorded, to its fate "
            "(a certificate of the limit) or to this step (default: it ends at the last step)",
        ),
        "tau-max": (finite_float, Flow, "flow horizon"),
        "tau-min": (
            finite_float,
            None,
            f"first save time (flow; default tau-max * {TAU_MIN_SHARE:g})",
        ),
        "n-save": (
            integer,
            None,
            f"saved times, 0 and log-spaced ones (flow; default {Flow().n_records()})",
        ),
        "formulation": (
            str,
            Flow,
            "flow: auto, log, linf or linear (docs/theory/flows.md#rescaled-flows)",
        ),
        "solver": (str, Flow, f"flow: {', '.join(SOLVERS)}"),
        "rtol": (finite_float, Flow, "flow tolerance"),
        "atol": (finite_float, Flow, "flow tolerance"),
        "max-steps": (integer, Flow, "flow: solver step cap"),
        "tau-cap": (
            finite_float,
            None,
            "flow: a run not decided at tau-max goes on, unrecorded, to its fate (an event "
            "or a certificate of the limit) or to this tau (default: it ends at tau-max)",
        ),
    }
    for flag, (kind, runner, text) in options.items():
        if runner is not None:
            text += f" (default {default(runner, flag.replace('-', '_'))})"
        p.add_argument(f"--{flag}", type=str if kind is str else kind(flag), help=text)
    p.add_argument("--dtype", choices=inputs.DTYPES, default="float64")
    p.add_argument(
        "--collapse-factor",
        type=finite_float("collapse-factor"),
        default=default(Classification, "collapse_factor"),
        help="figures and the validity map draw a record with ||beta||_1 < factor * "
        "||beta(0)||_1 as collapsed (no regime label uses it: collapse needs a certificate)",
    )


def add_plateau_arg(p: argparse.ArgumentParser) -> None:
    """``--plateau-fraction`` (its default :class:`samflow.Classification`'s)."""
    p.add_argument(
        "--plateau-fraction",
        type=finite_float("plateau-fraction"),
        default=default(Classification, "plateau_fraction"),
        help="plateau ends when the loss falls to this fraction of its initial value",
    )


def classification_from_args(args: argparse.Namespace) -> Classification:
    """The :class:`samflow.Classification` the options describe (``--collapse-factor``,
    and ``--plateau-fraction`` where the command has it)."""
    plateau = getattr(args, "plateau_fraction", default(Classification, "plateau_fraction"))
    return Classification(collapse_factor=args.collapse_factor, plateau_fraction=plateau)


def add_model_args(p: argparse.ArgumentParser) -> None:
    """The model (docs/theory/models.md#parametrisations-and-losses) and its summaries
    (``trajectory``, ``phase``)."""
    p.add_argument(
        "--loss",
        choices=inputs.LOSSES,
        default="logistic",
        help="logistic or exponential of the margin, or squared (1/2)(<beta, x> - y)^2",
    )
    p.add_argument(
        "--parametrization",
        choices=inputs.PARAMETRIZATIONS,
        default="product",
        help="product: beta = w^(1)...w^(L); u2-v2: beta = u^2 - v^2 from u = v = alpha; "
        "uv: beta = u v from u = alpha, v = 0 (these two: --depth 2)",
    )
    p.add_argument(
        "--beta-star",
        metavar="FILE.npy",
        help="ground truth beta* (d,) for test_error = ||beta - beta*||^2 (or a key "
        "beta_star in the --data file)",
    )
    p.add_argument(
        "--sharpness",
        action="store_true",
        help="also record the top eigenvalue and the trace of the loss's Hessian",
    )
    p.add_argument(
        "--active-threshold",
        type=finite_float("active-threshold"),
        default=default(Summaries, "active_threshold"),
        help="n_active counts |beta_j| above this",
    )


def model_from_args(args: argparse.Namespace) -> dict:
    """The model keywords of :func:`samflow.trajectory` / :func:`samflow.sweep`: the
    model, ``beta_star`` and the :class:`samflow.Summaries` where ``--sharpness`` or
    ``--active-threshold`` asks for them (else None: the library's default, on where
    the model is not the paper's or ``beta_star`` is given)."""
    star = None
    if args.beta_star is not None:
        star = load_array(args.beta_star, "beta-star")
    if args.data is not None:
        in_file = _load_npz(args.data)[2]
        if in_file is not None and star is not None:
            raise InputError(f"beta_star is in {args.data} and given by --beta-star: give one")
        star = in_file if star is None else star
    summaries = Summaries(sharpness=args.sharpness, active_threshold=args.active_threshold)
    if summaries == Summaries():
        summaries = None
    return dict(
        loss=args.loss,
        parametrization=args.parametrization,
        beta_star=star,
        summaries=summaries,
    )


def add_stochastic_args(p: argparse.ArgumentParser) -> None:
    """``--batch``, ``--m``, ``--label-noise`` (the discrete runner's stochastic steps)
    and ``--seed`` (docs/theory/stochastic.md#stochastic-steps)."""
    p.add_argument(
        "--batch",
        type=integer("batch"),
        help="discrete: minibatch size, a fresh random subset of the n points every step "
        "(default: all n, the deterministic step)",
    )
    p.add_argument(
        "--m",
        type=integer("m"),
        help="discrete, SAM: m-sharpness, one perturbation per group of m points of the "
        "(mini)batch (1: 1-SAM; default: the whole batch, n-SAM)",
    )
    p.add_argument(
        "--label-noise",
        type=finite_float("label-noise"),
        help="discrete: label-noise SGD, labels y + delta * random sign at each step "
        "(real labels only; default 0)",
    )
    p.add_argument(
        "--seed",
        type=integer("seed"),
        help="seed of the stochastic steps' draws (default 0); refused where nothing is "
        "random (no --batch, --m or --label-noise)",
    )


def add_output_args(p: argparse.ArgumentParser, *quiet_aliases: str) -> None:
    """``-q/--quiet``: print nothing but errors (no progress bar, no summary);
    ``--compile-cache``: where compiled programs are kept (:mod:`samflow.compile_cache`)."""
    p.add_argument("-q", "--quiet", *quiet_aliases, action="store_true", help="print only errors")
    p.add_argument(
        "--compile-cache",
        metavar="DIR",
        default=None,
        help="keep compiled programs in DIR, or 'off' (default: $SAMFLOW_COMPILE_CACHE, "
        "else ~/.cache/samflow/jax)",
    )


DISCRETE_OPTIONS = ("eta", "steps", "record_every", "log_records", "batch", "m", "label_noise")
DISCRETE_OPTIONS += ("step_cap",)
FLOW_OPTIONS = ("tau_max", "tau_min", "n_save", "formulation", "solver", "rtol", "atol")
FLOW_OPTIONS += ("max_steps", "tau_cap")


def runner_from_args(args: argparse.Namespace) -> Discrete | Flow:
    """The runner the options describe. An option of the other mode is refused (it would
    be silently unused); the runner checks its own values."""
    discrete = args.mode == "discrete"
    unused = FLOW_OPTIONS if discrete else DISCRETE_OPTIONS
    given = [n for n in unused if getattr(args, n, None) is not None]
    if given:
        flag = "--" + given[0].replace("_", "-")
        raise InputError(f"{flag} is an option of --mode {'flow' if discrete else 'discrete'}")
    names = DISCRETE_OPTIONS if discrete else FLOW_OPTIONS
    given = {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}
    if discrete:
        every, n_log = given.pop("record_every", None), given.pop("log_records", None)
        if every is not None and n_log is not None:
            raise InputError("give only one of record-every, log-records")
        if every is not None or n_log is not None:
            given["save"] = Every(every) if n_log is None else LogSpaced(n_log)
        return Discrete(**given)
    n_save, tau_min = given.pop("n_save", None), given.pop("tau_min", None)
    if n_save is not None or tau_min is not None:
        log = default(Flow, "save").n if n_save is None else inputs.integer("n-save", n_save, 2) - 1
        given["save"] = LogSpaced(log, first=tau_min)
    return Flow(**given)


def problem_from_args(args: argparse.Namespace) -> dict:
    """``{"mu": ...}`` or ``{"data": (X, y)}`` for the library's ``mu=`` / ``data=``."""
    if args.mu is not None:
        return {"mu": float_list(args.mu, "mu")}
    return {"data": load_npz_problem(args.data)}
