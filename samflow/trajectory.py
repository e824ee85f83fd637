"""One trajectory, discrete or flow, as a labelled Dataset with its classification."""

from __future__ import annotations

import numpy as np
import xarray as xr

from samflow.discrete import record_schedule, run_discrete
from samflow.flows import save_times, solve_flow
from samflow.io import base_attrs, regime_attrs
from samflow.model import Problem
from samflow.precision import precision
from samflow.regimes import NAMES, classify


def trajectory(
    problem: Problem,
    theta0: np.ndarray,
    depth: int,
    method: str,
    rho: float | None,
    mode: str = "discrete",
    *,
    eta: float = 0.01,
    steps: int = 20_000,
    record_every: int | None = None,
    log_records: int | None = None,
    tau_max: float = 50.0,
    tau_min: float | None = None,
    n_save: int = 200,
    flow_options: dict | None = None,
    dtype: str = "float64",
    save_theta: bool = False,
    collapse_factor: float = 1e-3,
    command_line: str | None = None,
) -> xr.Dataset:
    """Run one trajectory and return the Dataset of the ``samflow trajectory`` contract.

    ``theta0`` ``[L, d]`` holds the real layers (``L == depth``).
    """
    d = problem.X.shape[1]
    one_point = problem.X.shape[0] == 1
    if mode == "discrete":
        schedule = record_schedule(steps, record_every, log_records)
        run = run_discrete(problem, theta0, depth, method, rho, eta, schedule, True, dtype)
        failed = run.failed_step >= 0
        valid = np.ones(len(schedule), bool)
        extra = {"step": ("time", schedule)}
        attrs = {"eta": eta, "steps": steps, "failed_step": int(run.failed_step)}
        theta_rec, theta_final = run.theta, run.theta_final
    elif mode == "flow":
        taus = save_times(tau_max, n_save, tau_min)
        run = solve_flow(
            problem, theta0, depth, method, rho, taus, **(flow_options or {}), dtype=dtype
        )
        failed = bool(run.failed)
        valid = run.valid
        extra = {}
        attrs = {
            "tau_max": tau_max,
            "stop_tau": float(run.stop_tau),
            "blowup": bool(run.blowup and depth >= 3),
            "overflow_guard_hit": bool(run.blowup and depth < 3),
            "collapsed_to_zero": bool(run.collapsed),
            "solver_failed": failed,
        }
        if run.blowup and depth >= 3:
            attrs["blowup_tau"] = float(run.stop_tau)
        theta_rec = run.theta
        last = np.max(np.nonzero(valid)[0])
        theta_final = run.theta[last]
    else:
        raise ValueError(f"unknown mode {mode!r}")
    with precision("float64"):
        at_blowup = mode == "flow" and bool(run.blowup) and depth >= 3
        end = run.beta_end if mode == "flow" else None
        c = classify(
            run.beta, valid, failed, collapse_factor, beta_end=end, ended_at_blowup=at_blowup
        )
        c = type(c)(*(np.asarray(v) for v in c))
    coords = {"time": np.arange(len(run.tau)), "coord": np.arange(1, d + 1)}
    coords["layer"] = np.arange(1, depth + 1)
    data = {
        "beta": (("time", "coord"), run.beta, {"long_name": "predictor beta"}),
        "tau": (
            "time",
            run.tau,
            {
                "long_name": "rescaled time" if one_point else "time eta * steps",
                "symbol": r"$\tau$" if one_point else r"$t$",
            },
        ),
        "loss": ("time", run.loss, {"long_name": "logistic loss"}),
        "dominant": (("time",), c.dominant, {"long_name": "dominant coordinate (0: none)"}),
        "theta_final": (("layer", "coord"), theta_final[:depth]),
    }
    for name, value in extra.items():
        data[name] = value
    if save_theta:
        data["theta"] = (("time", "layer", "coord"), theta_rec[:, :depth])
    ds = xr.Dataset(data, coords=coords)
    ds["regime_code"] = xr.DataArray(np.int8(c.regime), attrs=regime_attrs())
    ds.attrs = base_attrs(
        method=method,
        depth=depth,
        rho=0.0 if rho is None else float(rho),
        mode=mode,
        dtype=dtype,
        n_points=int(problem.X.shape[0]),
        mu=np.asarray(problem.X[0], dtype=np.float64) if one_point else None,
        command_line=command_line,
        regime=int(c.regime),
        regime_meaning=NAMES[int(c.regime)],
        limit_coord=int(c.limit_coord),
        first_amplified=int(c.first_amplified),
        collapse_factor=collapse_factor,
        **attrs,
    )
    return ds
