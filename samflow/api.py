"""The public entry points: one trajectory, a sweep over a grid.

Both take what varies as objects, in the style of diffrax: the method (a name or a
:class:`samflow.rules.PerturbationRule`), the problem (``mu`` for one point or
``data = (X, y)``), the initialisation, and a runner (:class:`samflow.Discrete` or
:class:`samflow.Flow`). Both validate every input here, once, raising
:class:`samflow.InputError` (a ``ValueError``) that names the bad value; the command
line turns it into its one-line exit 2. Both return labelled xarray Datasets, the same
the command line writes for the same settings.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np
import xarray as xr

from samflow.engine import Points, Setup, run_points
from samflow.errors import InputError
from samflow.flows import FlowConfig, formulation_for
from samflow.init import balanced, check_alpha, check_depth, from_array, is_balanced
from samflow.model import make_problem
from samflow.precision import check_dtype
from samflow.regimes import NAMES
from samflow.rules import PerturbationRule, check_rho, get_rule
from samflow.runners import Discrete, Flow, check_counters
from samflow.schema import TRAJECTORY
from samflow.sweeps.axes import Axis, make_axis, parse_axis
from samflow.sweeps.spec import SweepSpec
from samflow.sweeps.store import DEFAULT_CHUNK
from samflow.sweeps.store import run as run_store

Method = str | PerturbationRule


def _check_runner(runner) -> Discrete | Flow:
    if not isinstance(runner, Discrete | Flow):
        raise InputError(
            f"runner must be samflow.Discrete(...) or samflow.Flow(...), got {runner!r}"
        )
    return runner


def _call(name: str, **kwargs) -> str:
    """A readable record of a Python call, for the ``history`` attribute."""
    shown = ", ".join(f"{k}={v!r}" for k, v in kwargs.items() if v is not None)
    return f"samflow.{name}({shown})"


def initial_theta(
    d: int,
    depth: int,
    alpha: float | None = None,
    alpha_per_coord: Sequence[float] | None = None,
    theta0: np.ndarray | None = None,
) -> np.ndarray:
    """``theta0`` ``[L, d]`` from exactly one of ``alpha``, ``alpha_per_coord``, ``theta0``."""
    given = [
        n
        for n, v in (("alpha", alpha), ("alpha_per_coord", alpha_per_coord), ("theta0", theta0))
        if v is not None
    ]
    if len(given) != 1:
        raise InputError(
            "give exactly one initialisation: alpha, alpha_per_coord or theta0"
            + (f" (got {', '.join(given)})" if given else "")
        )
    if alpha is not None:
        a = check_alpha(alpha)
        if a.size != 1:
            raise InputError(f"alpha must be one number, got {a.tolist()}; use alpha_per_coord")
        return balanced(a, d, depth)
    if alpha_per_coord is not None:
        a = check_alpha(alpha_per_coord, "alpha-per-coord")
        if a.size != d:
            raise InputError(f"alpha-per-coord has {a.size} entries but d = {d}")
        return balanced(a, d, depth)
    theta0 = np.asarray(theta0, dtype=np.float64)
    if theta0.ndim != 2 or theta0.shape[0] != depth:
        raise InputError(f"theta0 must have shape (L={depth}, d={d}), got {theta0.shape}")
    return from_array(theta0, d)


def trajectory(
    method: Method,
    *,
    depth: int,
    mu: Sequence[float] | None = None,
    data: tuple[np.ndarray, np.ndarray] | None = None,
    alpha: float | None = None,
    alpha_per_coord: Sequence[float] | None = None,
    theta0: np.ndarray | None = None,
    rho: float | None = None,
    runner: Discrete | Flow,
    dtype: str = "float64",
    save_theta: bool = False,
    collapse_factor: float = 1e-3,
    history: str | None = None,
) -> xr.Dataset:
    """Run one trajectory and classify it.

    Returns a Dataset with dims ``time``, ``coord`` (1..d), ``layer`` (1..L):
    ``beta(time, coord)``, ``tau(time)`` (rescaled time; ``eta * step`` for n > 1
    points), ``loss(time)``, ``dominant(time)``, ``theta_final(layer, coord)``,
    ``step(time)`` (discrete), ``theta(time, layer, coord)`` (``save_theta``), the
    scalars ``regime`` (CF flags) and ``limit_coord``; ``tau`` (and ``step``) are
    coordinates along ``time``; attributes: the settings, the regime's meaning,
    ``first_amplified``, and for flows where and why the solve ended.
    """
    rule = get_rule(method)
    rho = check_rho(rule, rho)
    depth = check_depth(depth)
    runner = _check_runner(runner)
    check_dtype(dtype)
    check_counters(runner, dtype)
    if not (np.isfinite(collapse_factor) and 0 < collapse_factor < 1):
        raise InputError(f"collapse-factor must lie in (0, 1), got {collapse_factor}")
    problem = make_problem(mu, data)
    n, d = problem.X.shape
    theta0 = initial_theta(d, depth, alpha, alpha_per_coord, theta0)
    flow = None
    if runner.mode == "flow":
        positive = n == 1 and bool(np.all(problem.X > 0))
        form = formulation_for(rule, runner.formulation, positive, is_balanced(theta0, depth))
        flow = FlowConfig.of(runner, form, dtype)
    setup = Setup(
        rule=rule,
        mode=runner.mode,
        dtype=dtype,
        flow=flow,
        collapse_factor=collapse_factor,
        keep=("beta", "theta"),
        padding=False,
        sharded=False,
    )
    eta = runner.eta if runner.mode == "discrete" else 0.0
    points = Points(
        theta0[None],
        problem.X[None],
        problem.y,
        np.array([depth]),
        np.array([rho]),
        np.array([eta]),
    )
    times = runner.times()
    r = {k: v[0] for k, v in run_points(setup, points, times).items()}
    if history is None:
        history = _call("trajectory", method=rule.name, depth=depth, mu=mu, rho=rho, runner=runner)
    discrete = runner.mode == "discrete"
    data = {
        "time": np.arange(len(times)),
        "coord": np.arange(1, d + 1),
        "layer": np.arange(1, depth + 1),
        "tau": r["rescaled_tau"] if discrete else times,
        "beta": r["beta"],
        "loss": r["loss"],
        "dominant": r["dominant"],
        "theta_final": r["theta_final"][:depth],
        "regime": r["regime"],
        "limit_coord": r["limit_coord"],
    }
    if discrete:
        data["step"] = times
    if save_theta:
        data["theta"] = r["theta"][:, :depth]
    if discrete:
        outcome = {"failed_step": int(r["failed_step"])}
    else:
        blowup = bool(np.isfinite(r["blowup_tau"]))
        outcome = {
            "stop_tau": float(r["stop_tau"]),
            "blowup": blowup,
            "overflow_guard_hit": bool(r["overflow_guard_hit"]),
            "collapsed_to_zero": bool(r["collapsed_to_zero"]),
            "solver_failed": bool(r["solver_failed"]),
            "blowup_tau": float(r["blowup_tau"]) if blowup else None,
            "flow_formulation": flow.formulation,
        }
    settings = {
        "method": rule.name,
        "depth": depth,
        "rho": rho,
        "mode": runner.mode,
        "dtype": dtype,
        "n_points": n,
        "mu": np.asarray(problem.X[0], dtype=np.float64) if n == 1 else None,
        "regime_meaning": NAMES[int(r["regime"])],
        "first_amplified": int(r["first_amplified"]),
        "collapse_factor": collapse_factor,
        **runner.attrs(),
        **outcome,
    }
    return TRAJECTORY.dataset(data, dtype=dtype, attrs=settings, history=history)


def sweep(
    method: Method,
    *,
    depth: int,
    mu: Sequence[float] | None = None,
    data: tuple[np.ndarray, np.ndarray] | None = None,
    axes: Mapping[str, Sequence[float] | np.ndarray | str],
    rho: float | None = None,
    alpha: float | None = None,
    runner: Discrete | Flow,
    dtype: str = "float64",
    out: str | os.PathLike | None = None,
    progress: bool = False,
    overwrite: bool = False,
    chunk: int = DEFAULT_CHUNK,
    mu_set: np.ndarray | None = None,
    alpha_range: tuple[float, float] = (0.05, 5.0),
    collapse_factor: float = 1e-3,
    plateau_fraction: float = 0.5,
    save_trajectories: bool = False,
    pad_layers: int = 0,
    history: str | None = None,
) -> xr.Dataset:
    """Run ``method`` over the cartesian grid of ``axes`` in one compiled program.

    ``axes`` maps an axis name (``alpha``, ``alpha_j``, ``rho``, ``depth``, ``eta``,
    ``mu``, ``seed``; see :mod:`samflow.sweeps.axes`) to its values, or to a range
    ``"START:STOP:NUM[:log|:lin]"``; the grid's dims follow the mapping's order.
    ``out=None`` runs in memory and writes nothing; with a path the result is the
    resumable store the command line uses (rerun the same call to resume; a finished
    file of the same sweep is returned as it is, one of another sweep is refused unless
    ``overwrite``). Returns
    the Dataset of the ``samflow phase`` file: ``regime(<axes>)`` and the summaries of
    :mod:`samflow.regimes` per grid point (``beta`` too with ``save_trajectories``).
    """
    rule = get_rule(method)
    runner = _check_runner(runner)
    problem = make_problem(mu, data)
    d = problem.X.shape[1]
    if not isinstance(axes, Mapping) or not axes:
        raise InputError("axes must be a non-empty mapping of axis name to values")
    grid: list[Axis] = []
    for name, values in axes.items():
        if isinstance(values, str):
            grid.append(parse_axis(f"{name}={values}", d))
        else:
            grid.append(make_axis(name, values, d))
    if alpha is not None and {"alpha", "seed"} & {a.name for a in grid}:
        raise InputError("alpha is set both as a value and by an axis")
    spec = SweepSpec(
        rule=rule,
        runner=runner,
        depth=depth,
        axes=tuple(grid),
        alpha=1.0 if alpha is None else alpha,
        rho=rho,
        dtype=dtype,
        alpha_range=tuple(float(v) for v in alpha_range),
        collapse_factor=collapse_factor,
        plateau_fraction=plateau_fraction,
        save_trajectories=save_trajectories,
        mu=tuple(problem.X[0].tolist()) if data is None else (),
        mu_set=() if mu_set is None else tuple(map(tuple, np.asarray(mu_set, float).tolist())),
        data=()
        if data is None
        else (tuple(map(tuple, problem.X.tolist())), tuple(problem.y.tolist())),
        pad_layers=pad_layers,
    )
    if history is None:
        history = _call(
            "sweep",
            method=rule.name,
            depth=depth,
            mu=mu,
            axes=dict(axes),
            rho=rho,
            alpha=alpha,
            runner=runner,
        )
    return run_store(
        spec, out, chunk=chunk, history=history, progress=progress, overwrite=overwrite
    )
