"""Argument parsing shared by the subcommands.

Defaults come from :mod:`samflow.runners` (defined there once); values are checked by
the library (:func:`samflow.trajectory`, :func:`samflow.sweep`), whose
``InputError`` the command line prints as one line with exit status 2.
"""

from __future__ import annotations

import argparse
import os
import zipfile

import numpy as np

from samflow.errors import InputError
from samflow.rules import METHODS
from samflow.runners import SOLVERS, Discrete, Flow, default


def float_list(text: str, name: str) -> np.ndarray:
    """Parse ``"1,2,3"`` into finite floats; InputError naming ``name`` otherwise."""
    try:
        if not text.isascii():  # float() takes other scripts' digits: '١' is 1
            raise ValueError(text)
        values = np.array([float(v) for v in text.split(",") if v.strip() != ""])
    except ValueError:
        raise InputError(f"{name} must be comma-separated numbers, got {text!r}") from None
    if values.size == 0:
        raise InputError(f"{name} is empty")
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


def load_npz_problem(path: str) -> tuple[np.ndarray, np.ndarray]:
    """``(X, y)`` from an ``.npz`` holding ``X`` ``[n, d]`` and ``y`` ``[n]``.

    Only the file is checked here; the values are checked by
    :func:`samflow.model.make_problem`.
    """
    if not os.path.exists(path):
        raise InputError(f"data file not found: {path}")
    try:
        with np.load(path, allow_pickle=False) as f:
            missing = [k for k in ("X", "y") if k not in f.files]
            if missing:
                raise InputError(f"data file {path} lacks array(s) {', '.join(missing)}")
            return np.asarray(f["X"], dtype=np.float64), np.asarray(f["y"], dtype=np.float64)
    except (OSError, ValueError, zipfile.BadZipFile) as err:
        if isinstance(err, InputError):
            raise
        raise InputError(f"cannot read data file {path}: {err}") from None


def add_problem_args(p: argparse.ArgumentParser) -> None:
    """Method, depth, problem and runner options (defaults from the runners)."""

    def d(runner, name):
        return default(runner, name)

    p.add_argument("--method", required=True, choices=METHODS, help="optimizer")
    p.add_argument("--depth", required=True, type=integer("depth"), help="number of layers L >= 1")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--mu", help="one data point x = mu, y = +1: comma-separated, > 0")
    src.add_argument("--data", help=".npz with X (n, d) and y (n,) in {-1, +1}")
    p.add_argument("--rho", type=finite_float("rho"), help="SAM radius (required for SAM)")
    p.add_argument("--mode", choices=("discrete", "flow"), default="discrete")
    p.add_argument(
        "--eta", type=finite_float("eta"), default=d(Discrete, "eta"), help="step size (discrete)"
    )
    p.add_argument(
        "--steps",
        type=integer("steps"),
        default=d(Discrete, "steps"),
        help="number of steps (discrete)",
    )
    p.add_argument(
        "--record-every",
        type=integer("record-every"),
        help="record every K steps (default steps/100)",
    )
    p.add_argument(
        "--log-records",
        type=integer("log-records"),
        help="instead: this many log-spaced records (discrete)",
    )
    p.add_argument(
        "--tau-max", type=finite_float("tau-max"), default=d(Flow, "tau_max"), help="flow horizon"
    )
    p.add_argument(
        "--tau-min", type=finite_float("tau-min"), help="first save time (flow; tau-max * 1e-4)"
    )
    p.add_argument(
        "--n-save",
        type=integer("n-save"),
        default=d(Flow, "n_save"),
        help="log-spaced save times (flow)",
    )
    p.add_argument(
        "--formulation",
        default=d(Flow, "formulation"),
        help="flow: auto, log, linf or linear (docs/theory.md §3)",
    )
    p.add_argument("--solver", default=d(Flow, "solver"), help=f"flow: {', '.join(SOLVERS)}")
    p.add_argument(
        "--rtol", type=finite_float("rtol"), default=d(Flow, "rtol"), help="flow tolerance"
    )
    p.add_argument(
        "--atol", type=finite_float("atol"), default=d(Flow, "atol"), help="flow tolerance"
    )
    p.add_argument(
        "--max-steps",
        type=integer("max-steps"),
        default=d(Flow, "max_steps"),
        help="flow: solver step cap",
    )
    p.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    p.add_argument(
        "--collapse-factor",
        type=finite_float("collapse-factor"),
        default=1e-3,
        help="collapse when ||beta||_1 at the horizon < factor * ||beta(0)||_1",
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


def runner_from_args(args: argparse.Namespace) -> Discrete | Flow:
    """The runner the options describe. Both runners are made, so that a bad value of
    the other mode's options is an error too (never silently ignored)."""
    discrete = Discrete(
        eta=args.eta,
        steps=args.steps,
        record_every=args.record_every,
        log_records=getattr(args, "log_records", None),
    )
    flow = Flow(
        tau_max=args.tau_max,
        n_save=args.n_save,
        tau_min=args.tau_min,
        rtol=args.rtol,
        atol=args.atol,
        solver=args.solver,
        max_steps=args.max_steps,
        formulation=args.formulation,
    )
    return discrete if args.mode == "discrete" else flow


def unless_varied(args: argparse.Namespace, name: str, axes) -> float | None:
    """The value of option ``--name`` for the library, or None when an axis varies it.

    A value given beside its axis is still checked (a bad value is an error even where
    the axis makes it unused): ``rho >= 0``, ``alpha > 0``.
    """
    from samflow.init import check_alpha
    from samflow.rules import SAM_L2, check_rho

    value = getattr(args, name)
    if value is not None:
        check_rho(SAM_L2, value) if name == "rho" else check_alpha(value)
    varied = {"alpha": {"alpha", "seed"}, "rho": {"rho"}}[name] & set(axes)
    return None if varied else value


def problem_from_args(args: argparse.Namespace) -> dict:
    """``{"mu": ...}`` or ``{"data": (X, y)}`` for the library's ``mu=`` / ``data=``."""
    if args.mu is not None:
        return {"mu": float_list(args.mu, "mu")}
    return {"data": load_npz_problem(args.data)}
