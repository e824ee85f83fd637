"""Sweeps for the figure scripts, sharing compiled programs across figures.

``samflow figures`` builds every figure in one process. A flow sweep's program takes
~20 s to compile (diffrax, events) and ~0.1 s to run a quick grid, so the figures
would spend nearly all their time compiling. :func:`sweep` therefore keeps one jitted
program per static configuration (method, mode, formulation, what is saved) and feeds
it inputs of a few standard shapes: the grid is cut into chunks of ``batch`` points
(the last one padded), parameters are padded to ``layers`` layers of ones (THEORY 7b:
padding rows change nothing), and the record times are an argument of the program.

It runs the engine's own pieces (:func:`samflow.sweep.point_inputs`,
:func:`samflow.sweep.make_chunk_fn`, :func:`samflow.sweep.assemble`), not a copy of
the physics. It writes nothing: the figure script saves the Dataset beside its figure.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import jax.numpy as jnp
import numpy as np
import xarray as xr

from samflow.discrete import check_rates
from samflow.precision import precision
from samflow.sweep import (
    SweepSpec,
    _labels,
    assemble,
    check_axes,
    chunk_dataset,
    flow_formulation,
    make_chunk_fn,
    point_inputs,
    sweep_attrs,
)

MU = (1.0, 2.0, 3.0, 4.0)
LAYERS = 4  # every d = 4 sweep is padded to this depth: one program serves L = 1..4
# Quick builds pad every sweep to one batch size per mode, so programs are shared;
# full builds (long runs, compile time negligible) use the grid's own size up to FULL_BATCH.
QUICK_BATCH, QUICK_DISCRETE_BATCH, FULL_BATCH = 256, 64, 2048
QUICK_FLOW_RECORDS, FULL_FLOW_RECORDS = 161, 401
DISCRETE_RECORDS = 401

_PROGRAMS: dict[tuple, object] = {}


@dataclass(frozen=True)
class AtTimes(SweepSpec):
    """A sweep recorded at given times (flow: ``tau``; discrete: step indices), both
    starting at 0, instead of the spec's own schedule (e.g. log-spaced steps)."""

    times: tuple = ()

    def time_points(self) -> np.ndarray:
        if not self.times:
            return super().time_points()
        return np.asarray(self.times, np.int64 if self.mode == "discrete" else np.float64)


def at_times(spec: SweepSpec, times: np.ndarray) -> AtTimes:
    kept = {f.name: getattr(spec, f.name) for f in fields(SweepSpec)}
    return AtTimes(**kept, times=tuple(np.asarray(times).tolist()))


def _program(spec: SweepSpec):
    """The jitted chunk program of ``spec`` (shared by every spec with the same statics).

    It always returns the trajectories ``beta``; :func:`sweep` drops them unless asked,
    so that sweeps with and without them share one program.
    """
    key = (
        spec.method,
        spec.mode,
        flow_formulation(spec) if spec.mode == "flow" else None,
        spec.collapse_factor,
        spec.plateau_fraction,
        spec.rtol,
        spec.atol,
        spec.max_steps,
        spec.dtype,
    )
    if key not in _PROGRAMS:
        # Parameters are padded here beyond the spec's own depth: rows may be padding.
        _PROGRAMS[key] = make_chunk_fn(replace(spec, save_trajectories=True), padding=True)
    return _PROGRAMS[key]


def sweep(
    spec: SweepSpec,
    *,
    quick: bool = True,
    layers: int | None = LAYERS,
    batch: int | None = None,
    times: np.ndarray | None = None,
    overrides: dict[str, np.ndarray] | None = None,
) -> xr.Dataset:
    """Run ``spec`` and return the Dataset :func:`samflow.sweep.run_sweep` would write.

    ``quick``: quick-build batch sizes (shared programs) or full-build ones;
    ``layers``: pad parameters to this many layers (None: the spec's own depth);
    ``batch``: points per program call (default: :func:`batch_size`); ``times``: record
    times (flow: ``tau``, starting at 0; discrete: step indices, starting at 0) replacing
    the spec's own, for instance log-spaced steps; ``overrides``: per-point inputs
    replacing those the grid gives (``theta0`` ``[size, L, d]``, ``rho`` ``[size]``, grid
    points in C order).
    """
    check_rates(spec.method, spec.rho if spec.method != "gd" else None, spec.eta)
    check_axes(list(spec.axes), spec.mode)
    fn = _program(spec)
    batch = batch_size(quick, spec) if batch is None else batch
    n_layers = spec.n_layers if layers is None else layers
    if n_layers < spec.n_layers:
        raise ValueError(f"layers = {n_layers} is below the sweep's depth {spec.n_layers}")
    if times is not None:
        spec = at_times(spec, times)
    times = spec.time_points()
    chunks = []
    for start in range(0, spec.size, batch):
        flat = np.arange(start, min(start + batch, spec.size))
        padded = np.concatenate([flat, np.full(batch - len(flat), flat[-1])])
        inputs = point_inputs(spec, padded)
        for key, value in (overrides or {}).items():
            inputs[key] = np.asarray(value, dtype=np.float64)[padded]
        theta0 = inputs["theta0"]
        pad = np.ones((batch, n_layers - theta0.shape[1], theta0.shape[2]))
        inputs["theta0"] = np.concatenate([theta0, pad], axis=1)
        with precision(spec.dtype) as dt:
            args = {k: jnp.asarray(v, jnp.int32 if k == "depth" else dt) for k, v in inputs.items()}
            if spec.mode == "discrete":
                t = jnp.asarray(times, jnp.int64 if dt == np.float64 else jnp.int32)
            else:
                t = jnp.asarray(times, dt)
            out = fn(
                args["theta0"],
                args["X"],
                jnp.asarray(_labels(spec), dt),
                args["depth"],
                args["rho"],
                args["eta"],
                t,
            )
            if not spec.save_trajectories:
                out.pop("beta")
            out = {k: np.asarray(v)[: len(flat)] for k, v in out.items()}
        chunks.append(chunk_dataset(out, flat))
    return assemble(spec, chunks, sweep_attrs(spec, None))


def flow_times(tau_max: float, quick: bool, tau_min: float | None = None) -> np.ndarray:
    """0 and log-spaced ``tau`` up to ``tau_max``, in the standard number of records."""
    n = QUICK_FLOW_RECORDS if quick else FULL_FLOW_RECORDS
    tau_min = tau_max * 1e-4 if tau_min is None else tau_min
    return np.concatenate([[0.0], np.geomspace(tau_min, tau_max, n - 1)])


def log_steps(steps: int, n: int = DISCRETE_RECORDS) -> np.ndarray:
    """``n`` distinct step indices 0 < ... = steps, log-spaced where they can be."""
    ticks = np.unique(np.round(np.geomspace(1, steps, n - 1)).astype(np.int64))
    while len(ticks) < n - 1:  # fill the dense start with the lowest unused integers
        free = np.setdiff1d(np.arange(1, steps + 1), ticks)[: n - 1 - len(ticks)]
        ticks = np.union1d(ticks, free)
    return np.concatenate([[0], ticks[: n - 1]]).astype(np.int64)


def batch_size(quick: bool, spec: SweepSpec) -> int:
    if not quick:
        return min(FULL_BATCH, spec.size)
    return QUICK_DISCRETE_BATCH if spec.mode == "discrete" else QUICK_BATCH


def relative_times(n: int, delta: float = 1e-5) -> np.ndarray:
    """0 and ``n - 1`` times in (0, 1 - delta]: log-spaced from 1e-4 and toward 1."""
    half = (n - 1) // 2
    early = np.geomspace(1e-4, 0.5, n - 1 - half, endpoint=False)
    late = 1.0 - np.geomspace(0.5, delta, half)
    return np.concatenate([[0.0], early, late])


def up_to_blowup(
    spec: SweepSpec,
    ds: xr.Dataset,
    quick: bool,
    delta: float = 1e-5,
    layers: int | None = LAYERS,
):
    """Rerun the points that blew up, each recorded in time relative to its blow-up.

    The flows of l2- and linf-SAM (and GD) with balanced initialisation are invariant
    under ``(u, rho) -> (c u, c rho)`` with ``tau -> c^(2-L) tau`` (derived here: ``eps``
    does not change and the field scales as ``c^(L-1)``). Each point that blew up at
    ``tau*`` (``blowup_tau``, or ``stop_tau`` where the solver failed at the
    blow-up) is rerun from ``c alpha`` with ``c rho``, ``c = (tau* /
    T)^(1/(L-2)) <= 1``, ``T`` the largest ``tau*``: all blow-ups then sit at ``T``, and
    one shared record grid in ``tau / tau*`` ends at ``1 - delta``, before the event
    (``c <= 1`` shrinks beta, so the norm event, which is not scale invariant, comes
    no earlier in relative time). That reads the coordinate winning the blow-up race.

    Returns the rerun Dataset (``tau`` and the other times divided by ``T``, i.e.
    relative to each point's blow-up; points that did not blow up are masked out by
    ``blew``) and ``blew``, a bool grid array.
    """
    size = spec.size
    inputs = point_inputs(spec, np.arange(size))
    depth = inputs["depth"].astype(float)
    horizon = float(spec.time_points()[-1])
    stop = ds["stop_tau"].values.reshape(size)
    failed = ds["regime"].values.reshape(size) == -1
    blowup = np.isfinite(ds["blowup_tau"].values.reshape(size))
    blew = (depth >= 3) & (blowup | (failed & np.isfinite(stop) & (stop < horizon)))
    if not blew.any():
        return None, blew.reshape(spec.shape)
    T = float(stop[blew].max())
    c = np.where(blew, (np.where(blew, stop, T) / T) ** (1.0 / np.maximum(depth - 2, 1)), 1.0)
    theta0 = inputs["theta0"]
    rows = np.arange(theta0.shape[1])[None, :, None] < depth[:, None, None]
    theta0 = np.where(rows, theta0 * c[:, None, None], 1.0)
    rerun = sweep(
        spec,
        quick=quick,
        layers=layers,
        times=T * relative_times(QUICK_FLOW_RECORDS if quick else FULL_FLOW_RECORDS, delta),
        overrides={"theta0": theta0, "rho": inputs["rho"] * c},
    )
    for name in ("tau", "stop_tau", "blowup_tau", "takeover_tau", "plateau_end_tau"):
        rerun[name] = rerun[name] / T
    rerun["tau"].attrs.update(long_name="time relative to the blow-up, tau / tau*")
    rerun.attrs["blowup_time_scale"] = T
    return rerun, blew.reshape(spec.shape)
