"""Sweeps for the figure scripts, sharing compiled programs across figures.

``samflow figures`` builds every figure in one process. A flow sweep's program takes
~20 s to compile (diffrax, events) and ~0.1 s to run a quick grid, so the figures
would spend nearly all their time compiling. The point runner caches one program per
:class:`samflow.engine.Setup` (rule, runner settings, dtype, what is kept), and
:func:`sweep` feeds it inputs of a few standard shapes: the grid is cut into chunks
of ``batch`` points (the last one padded), parameters are padded to ``layers`` layers
of ones (docs/theory/numerics.md#depth-in-one-program: padding rows change nothing), and the record
times are an argument of the program.

It runs the sweep's own runner (:meth:`samflow.sweeps.spec.SweepSpec.points`,
:func:`samflow.sweeps.store.in_memory`), not a copy of it or of the physics. It writes
nothing: the figure script saves the Dataset beside its figure.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import xarray as xr

from samflow import devices
from samflow._boundary import BoundarySearch
from samflow.engine import run_points, step_path
from samflow.errors import InputError
from samflow.init import layer_rows, pad_layers
from samflow.runners import MAX_STEPS, TAU_MIN_SHARE, At, Discrete, Every, Flow, LogSpaced, default
from samflow.sweeps.axes import Axis
from samflow.sweeps.spec import SweepSpec
from samflow.sweeps.store import chunk_plan, in_memory, sweep_attrs

MU = (1.0, 2.0, 3.0, 4.0)
LAYERS = 4  # every d = 4 sweep is padded to this depth: one program serves L = 1..4
# Quick builds pad every sweep to one batch size per mode, so programs are shared;
# full builds (long runs, compile time negligible) use the grid's own size up to FULL_BATCH.
QUICK_BATCH, QUICK_DISCRETE_BATCH, FULL_BATCH = 256, 64, 2048
QUICK_FLOW_RECORDS, FULL_FLOW_RECORDS = 161, 401
DISCRETE_RECORDS = 401
FLOW_SETTINGS = {"rtol": 1e-6, "atol": 1e-9, "max_steps": 20_000}
"""The figures' solver settings: looser than the library's defaults (samflow.Flow), which
the regime maps do not need; checked against tighter ones in docs/figures.md."""


def figure_spec(
    method: str,
    mode: str,
    *,
    depth: int,
    axes: tuple[Axis, ...],
    rho: float | None = None,
    alpha: float = 1.0,
    mu: tuple = MU,
    data: tuple = (),
    eta: float = 0.01,
    steps: int = 2000,
    record_every: int | None = None,
    tau_max: float = 50.0,
    n_save: int = 60,
    save_trajectories: bool = False,
    to_fate: bool = True,
) -> SweepSpec:
    """A figure's sweep: the runner built from these settings (flows: FLOW_SETTINGS).

    ``to_fate``: runs not decided at ``tau_max`` (flows) or ``steps`` (discrete) go on
    to their fate, up to :attr:`samflow.BoundarySearch.cap_factor` (flows) or
    :attr:`samflow.BoundarySearch.step_cap_factor` (discrete; their defaults) times it
    (``tau_cap``, ``step_cap``), so that the labels a figure draws are labels of the
    limit (docs/theory/regimes.md#labels-of-the-limit); off for figures that draw no
    labels."""
    if mode == "discrete":
        factor = default(BoundarySearch, "step_cap_factor")
        step_cap = min(MAX_STEPS - 1, round(factor * steps)) if to_fate else None
        runner = Discrete(eta=eta, steps=steps, save=Every(record_every), step_cap=step_cap)
    else:
        tau_cap = default(BoundarySearch, "cap_factor") * tau_max if to_fate else None
        runner = Flow(tau_max=tau_max, save=LogSpaced(n_save - 1), tau_cap=tau_cap, **FLOW_SETTINGS)
    axes = tuple(axes)
    for axis in axes:
        if not isinstance(axis, Axis):
            raise InputError(f"figure axes must be Axis objects, got {axis!r}")
    return SweepSpec.from_inputs(
        method,
        runner=runner,
        depth=depth,
        axes={a.name: a.values for a in axes},
        alpha=None if {"alpha", "seed"} & {a.name for a in axes} else alpha,
        rho=rho,
        mu=None if data else mu,
        data=data or None,
        save_trajectories=save_trajectories,
    )


def at_times(spec: SweepSpec, times: np.ndarray | None) -> SweepSpec:
    """``spec`` recorded at ``times`` (flow: ``tau``; discrete: step indices, from 0)."""
    if times is None:
        return spec
    if spec.mode == "discrete":
        runner = replace(spec.runner, save=At(tuple(int(t) for t in times)))
    else:
        runner = replace(spec.runner, save=At(tuple(float(t) for t in times)))
    return replace(spec, runner=runner)


def sweep(
    spec: SweepSpec,
    *,
    quick: bool = True,
    layers: int | None = LAYERS,
    batch: int | None = None,
    times: np.ndarray | None = None,
    overrides: dict[str, np.ndarray] | None = None,
) -> xr.Dataset:
    """Run ``spec`` and return the Dataset :func:`samflow.sweep` would give.

    ``quick``: quick-build batch sizes (shared programs) or full-build ones;
    ``layers``: pad parameters to this many layers (None: the spec's own depth);
    ``batch``: points per program call (default: :func:`batch_size`); ``times``: record
    times (flow: ``tau``, starting at 0; discrete: step indices, starting at 0) replacing
    the spec's own, for instance log-spaced steps; ``overrides``: per-point inputs
    replacing those the grid gives (``theta0`` ``[size, L, d]``, ``rho`` ``[size]``, grid
    points in C order).
    """
    n_layers = spec.n_layers if layers is None else layers
    if n_layers < spec.n_layers:
        raise InputError(f"layers = {n_layers} is below the sweep's depth {spec.n_layers}")
    keep_beta = spec.save_trajectories
    # Always keep beta and allow padding rows: sweeps with and without share a program.
    spec = replace(at_times(spec, times), save_trajectories=True, pad_layers=n_layers)
    setup = replace(spec.setup(), padding=True)
    batch = batch_size(quick, spec) if batch is None else batch
    batch, blocks = chunk_plan(spec.size, batch, len(devices.mesh().devices.flat))
    paths = set()

    def points(padded):
        out = spec.points(padded)
        for key, value in (overrides or {}).items():
            value = np.asarray(value, dtype=np.float64)[padded]
            if key == "theta0":  # given with the spec's own layers: pad to n_layers
                value = pad_layers(value, n_layers)
            out = out._replace(**{key: value})
        paths.add(step_path(setup, out))
        return out

    attrs = sweep_attrs(replace(spec, save_trajectories=keep_beta), None)
    ds = in_memory(spec, setup, blocks, batch, attrs, points=points)
    if spec.mode == "discrete":  # overrides of theta0 may start some points unbalanced
        ds.attrs["step_path"] = paths.pop() if len(paths) == 1 else "general"
    return ds if keep_beta else ds.drop_vars("beta")


def flow_times(tau_max: float, quick: bool, tau_min: float | None = None) -> np.ndarray:
    """0 and log-spaced ``tau`` up to ``tau_max``, in the standard number of records."""
    n = QUICK_FLOW_RECORDS if quick else FULL_FLOW_RECORDS
    tau_min = tau_max * TAU_MIN_SHARE if tau_min is None else tau_min
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
    inputs = spec.points(np.arange(size))
    depth = np.broadcast_to(inputs.depth, (size,)).astype(float)
    horizon = float(spec.times()[-1])
    stop = ds["stop_tau"].values.reshape(size)
    failed = ds["regime"].values.reshape(size) == -1
    blowup = np.isfinite(ds["blowup_tau"].values.reshape(size))
    blew = (depth >= 3) & (blowup | (failed & np.isfinite(stop) & (stop < horizon)))
    if not blew.any():
        return None, blew.reshape(spec.shape)
    T = float(stop[blew].max())
    c = np.where(blew, (np.where(blew, stop, T) / T) ** (1.0 / np.maximum(depth - 2, 1)), 1.0)
    theta0 = inputs.theta0
    theta0 = np.where(layer_rows(depth, theta0.shape[1]), theta0 * c[:, None, None], 1.0)
    rerun = sweep(
        spec,
        quick=quick,
        layers=layers,
        times=T * relative_times(QUICK_FLOW_RECORDS if quick else FULL_FLOW_RECORDS, delta),
        overrides={"theta0": theta0, "rho": inputs.rho * c},
    )
    for name in ("tau", "stop_tau", "blowup_tau", "takeover_tau", "plateau_end_tau"):
        rerun[name] = rerun[name] / T
    rerun["tau"].attrs.update(long_name="time relative to the blow-up, tau / tau*")
    rerun.attrs["blowup_time_scale"] = T
    return rerun, blew.reshape(spec.shape)


def on_datasets(spec: SweepSpec, signed_X: np.ndarray, times: np.ndarray) -> dict[str, np.ndarray]:
    """Run ``spec`` on ``K`` data sets at once; NumPy summaries ``[K, ...]``, with ``beta``.

    ``spec`` has one grid point or a few (a ``rho`` axis, say): data set ``k`` runs at
    grid point ``k mod spec.size``; its own ``data`` only fixes the shapes.
    ``signed_X`` ``[K, n, d]`` holds ``y_i x_i`` (the loss depends on ``x_i`` and
    ``y_i`` only through it, so every label becomes +1).
    ``times`` the record times (flow: ``t``, from 0), shared by every run.
    """
    signed_X = np.asarray(signed_X, dtype=np.float64)
    K, n, _ = signed_X.shape
    if K % spec.size:
        raise ValueError(f"{K} data sets do not fill the spec's {spec.size} grid points evenly")
    spec = replace(at_times(spec, times), save_trajectories=True)
    points = spec.points(np.arange(K) % spec.size)._replace(X=signed_X, y=np.ones(n))
    return run_points(spec.setup(sharded=False), points, spec.times())
