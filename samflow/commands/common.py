"""Argument parsing and validation shared by the subcommands."""

from __future__ import annotations

import argparse
import os
import zipfile

import numpy as np

from samflow.errors import InputError
from samflow.model import Problem
from samflow.steps import METHODS


def float_list(text: str, name: str) -> np.ndarray:
    """Parse ``"1,2,3"`` into finite floats; InputError naming ``name`` otherwise."""
    try:
        values = np.array([float(v) for v in text.split(",") if v.strip() != ""])
    except ValueError:
        raise InputError(f"{name} must be comma-separated numbers, got {text!r}") from None
    if values.size == 0:
        raise InputError(f"{name} is empty")
    if not np.all(np.isfinite(values)):
        raise InputError(f"{name} contains NaN or inf: {text!r}")
    return values


def check_mu(mu: np.ndarray) -> np.ndarray:
    if np.any(mu <= 0):
        raise InputError(f"mu entries must be > 0, got {mu.tolist()}")
    return mu


def finite_float(name: str):
    """argparse type: a finite float, the error naming the option."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None
        if not np.isfinite(value):
            raise argparse.ArgumentTypeError(f"{name} must be finite, got {text!r}")
        return value

    return parse


def load_npz_problem(path: str) -> Problem:
    """Data set from an ``.npz`` holding ``X`` ``[n, d]`` and ``y`` ``[n]`` in {-1, +1}."""
    if not os.path.exists(path):
        raise InputError(f"data file not found: {path}")
    try:
        with np.load(path, allow_pickle=False) as f:
            missing = [k for k in ("X", "y") if k not in f.files]
            if missing:
                raise InputError(f"data file {path} lacks array(s) {', '.join(missing)}")
            X, y = np.asarray(f["X"], dtype=np.float64), np.asarray(f["y"], dtype=np.float64)
    except (OSError, ValueError, zipfile.BadZipFile) as err:
        if isinstance(err, InputError):
            raise
        raise InputError(f"cannot read data file {path}: {err}") from None
    if X.ndim != 2 or y.ndim != 1 or X.shape[0] != y.shape[0] or X.shape[0] == 0:
        raise InputError(f"data file {path}: need X (n, d) and y (n,), got {X.shape}, {y.shape}")
    if not (np.all(np.isfinite(X)) and np.all(np.isfinite(y))):
        raise InputError(f"data file {path} contains NaN or inf")
    if not np.all(np.isin(y, (-1.0, 1.0))):
        raise InputError(f"data file {path}: labels must be -1 or +1, got {np.unique(y).tolist()}")
    return Problem(X, y)


def add_problem_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--method", required=True, choices=METHODS, help="optimizer")
    p.add_argument("--depth", required=True, type=int, help="number of layers L >= 1")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--mu", help="one data point x = mu, y = +1: comma-separated, > 0")
    src.add_argument("--data", help=".npz with X (n, d) and y (n,) in {-1, +1}")
    p.add_argument("--rho", type=finite_float("rho"), help="SAM radius (required for SAM)")
    p.add_argument("--mode", choices=("discrete", "flow"), default="discrete")
    p.add_argument("--eta", type=finite_float("eta"), default=0.01, help="step size (discrete)")
    p.add_argument("--steps", type=int, default=20_000, help="number of steps (discrete)")
    p.add_argument("--record-every", type=int, help="record every K steps (default steps/200)")
    p.add_argument(
        "--log-records", type=int, help="instead: this many log-spaced records (discrete)"
    )
    p.add_argument("--tau-max", type=finite_float("tau-max"), default=50.0, help="flow horizon")
    p.add_argument("--tau-min", type=finite_float("tau-min"), help="first save time (flow)")
    p.add_argument("--n-save", type=int, default=200, help="log-spaced save times (flow)")
    p.add_argument("--formulation", default="auto", help="flow: auto, log, linf or linear")
    p.add_argument("--solver", default="tsit5", help="flow: tsit5, dopri5, dopri8, heun, kvaerno5")
    p.add_argument("--rtol", type=finite_float("rtol"), default=1e-8, help="flow tolerance")
    p.add_argument("--atol", type=finite_float("atol"), default=1e-10, help="flow tolerance")
    p.add_argument("--max-steps", type=int, default=100_000, help="flow: solver step cap")
    p.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    p.add_argument(
        "--collapse-factor",
        type=finite_float("collapse-factor"),
        default=1e-3,
        help="collapse when ||beta||_1 at the horizon < factor * ||beta(0)||_1",
    )


def problem_from_args(args) -> Problem:
    if args.depth < 1:
        raise InputError(f"depth must be >= 1, got {args.depth}")
    if args.mu is not None:
        mu = check_mu(float_list(args.mu, "mu"))
        return Problem(mu[None, :], np.ones(1))
    return load_npz_problem(args.data)
