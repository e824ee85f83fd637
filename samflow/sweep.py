"""Sweeps: one compiled, vmapped program over a grid of (alpha, rho, depth, eta, mu, ...).

A sweep is a cartesian grid of *axes*. Grid points are numbered in C order and run in
*chunks*: each chunk's inputs are built from the flat indices, placed on all devices
(sharded along the grid axis), and pushed through one jitted ``vmap`` of the discrete
runner or the flow solver with the summaries of :func:`samflow.regimes.summarize`
computed inside the same program. Memory therefore grows with chunk x records, and the
assembled result with grid x records, never grid x steps.

Each finished chunk is written atomically to ``<out>.work/chunk_NNNNN.nc``; rerunning
the same sweep skips finished chunks (a spec file in the work folder guards against
resuming a different sweep), then the final file is assembled and the work folder is
removed. An interrupted and resumed sweep gives the same file as an uninterrupted one.

Axes (``--axis NAME=START:STOP:NUM[:log|:lin]`` or ``NAME=v1,v2,...``):

========== =============================================================================
alpha      uniform initialisation scale, w^(l) = alpha for every real layer
alpha_j    per-coordinate scale of coordinate j (1-based), overriding alpha there
rho        SAM radius
depth      number of layers (integers); shapes are padded to the largest depth
eta        step size (discrete mode)
mu         index into a set of mu vectors (``--mu-file``, ``[k, d]``); one point each
seed       random initialisations: alpha_j log-uniform in ``--alpha-range`` (integers)
========== =============================================================================

Multi-host (or multi-process): start the same command in every process with
``SAMFLOW_DISTRIBUTED=1``, and either ``JAX_COORDINATOR_ADDRESS=host:port``,
``SAMFLOW_NUM_PROCESSES`` and ``SAMFLOW_PROCESS_ID`` (0 on the coordinator's host), or
on a cluster that ``jax.distributed.initialize()`` detects by itself (SLURM, Open MPI,
...). ``jax.devices()`` then spans every process, each chunk is sharded over all of
them, results are gathered with ``process_allgather`` (CPU processes talk through
gloo), and process 0 writes the files; which chunks remain to be run is decided once,
by process 0, so that a resumed sweep runs the same chunks everywhere. Tested with two
CPU processes on one machine (``tests/test_sweep.py``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from samflow.discrete import check_rates, record_schedule, simulate
from samflow.errors import InputError
from samflow.flows import FlowConfig, integrate, save_times
from samflow.init import random_scales
from samflow.io import base_attrs, regime_attrs, write_dataset
from samflow.model import Problem
from samflow.precision import precision
from samflow.regimes import finish, summarize
from samflow.steps import get_rule

FIXED_AXES = ("alpha", "rho", "depth", "eta", "mu", "seed")
INTEGER_AXES = ("depth", "seed", "mu")
STOP_AFTER_ENV = "SAMFLOW_STOP_AFTER_CHUNKS"  # test hook: simulate a kill after N chunks


@dataclass(frozen=True)
class Axis:
    """One grid axis: its name and values (a 1-D float or int array as a tuple)."""

    name: str
    values: tuple

    def array(self) -> np.ndarray:
        dtype = np.int64 if self.name in INTEGER_AXES else np.float64
        return np.asarray(self.values, dtype=dtype)


def parse_axis(text: str, d: int | None = None) -> Axis:
    """Parse ``NAME=START:STOP:NUM[:log|:lin]`` or ``NAME=v1,v2,...``."""
    if "=" not in text:
        raise InputError(
            f"bad axis {text!r}: expected NAME=START:STOP:NUM[:log|:lin] or NAME=v1,v2"
        )
    name, spec = (s.strip() for s in text.split("=", 1))
    m = re.fullmatch(r"alpha_(\d+)", name)
    if name not in FIXED_AXES and not m:
        raise InputError(f"unknown axis {name!r}; choose from {', '.join(FIXED_AXES)}, alpha_j")
    if m and d is not None and not 1 <= int(m.group(1)) <= d:
        raise InputError(f"axis {name}: coordinate must be 1..{d}")
    try:
        if ":" in spec:
            parts = spec.split(":")
            if len(parts) not in (3, 4) or (len(parts) == 4 and parts[3] not in ("log", "lin")):
                raise InputError(f"bad axis {text!r}: expected START:STOP:NUM[:log|:lin]")
            start, stop, num = float(parts[0]), float(parts[1]), int(parts[2])
            scale = parts[3] if len(parts) == 4 else "lin"
            if num < 1:
                raise InputError(f"axis {name}: NUM must be >= 1, got {num}")
            if not (np.isfinite(start) and np.isfinite(stop)):
                raise InputError(f"axis {name}: range must be finite, got {spec!r}")
            if scale == "log":
                if start <= 0 or stop <= 0:
                    raise InputError(f"axis {name}: a log range needs positive ends, got {spec!r}")
                values = np.geomspace(start, stop, num)
            else:
                values = np.linspace(start, stop, num)
        else:
            values = np.array([float(v) for v in spec.split(",") if v.strip()])
    except InputError:
        raise
    except ValueError:
        raise InputError(f"bad axis {text!r}: values must be numbers") from None
    if values.size == 0:
        raise InputError(f"axis {name} is empty")
    if not np.all(np.isfinite(values)):
        raise InputError(f"axis {name} contains NaN or inf")
    if name in INTEGER_AXES:
        if not np.allclose(values, np.round(values)):
            raise InputError(f"axis {name} takes integers, got {values.tolist()}")
        values = np.round(values).astype(np.int64)
    if len(np.unique(values)) != values.size:
        raise InputError(f"axis {name} repeats a value: {values.tolist()}")
    return Axis(name, tuple(values.tolist()))


def check_axes(axes: list[Axis], mode: str) -> None:
    names = [a.name for a in axes]
    for name in names:
        if names.count(name) > 1:
            raise InputError(f"axis {name} given twice")
    for a in axes:
        v = a.array()
        if a.name in ("alpha", "eta") or a.name.startswith("alpha_"):
            if np.any(v <= 0):
                raise InputError(f"axis {a.name} must be > 0, got {v.tolist()}")
        if a.name == "rho" and np.any(v < 0):
            raise InputError(f"axis rho must be >= 0, got {v.tolist()}")
        if a.name == "depth" and np.any(v < 1):
            raise InputError(f"axis depth must be >= 1, got {v.tolist()}")
        if a.name == "eta" and mode == "flow":
            raise InputError("axis eta needs --mode discrete")


@dataclass(frozen=True)
class SweepSpec:
    """Everything that defines a sweep's result (hashed to guard resumption)."""

    method: str
    mode: str
    depth: int
    axes: tuple[Axis, ...]
    alpha: float = 1.0
    rho: float = 0.0
    eta: float = 0.01
    steps: int = 2000
    record_every: int | None = None
    tau_max: float = 50.0
    tau_min: float | None = None
    n_save: int = 60
    dtype: str = "float64"
    alpha_range: tuple[float, float] = (0.05, 5.0)
    collapse_factor: float = 1e-3
    plateau_fraction: float = 0.5
    solver: str = "tsit5"
    rtol: float = 1e-6
    atol: float = 1e-9
    max_steps: int = 20_000
    save_trajectories: bool = False
    mu: tuple = ()
    mu_set: tuple = ()
    data: tuple = field(default=(), repr=False)

    def key(self) -> str:
        payload = json.dumps(asdict(self), sort_keys=True, default=str)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(a.values) for a in self.axes)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape)) if self.axes else 1

    @property
    def d(self) -> int:
        if self.mu_set:
            return len(self.mu_set[0])
        if self.mu:
            return len(self.mu)
        return len(self.data[0][0])

    @property
    def n_layers(self) -> int:
        for a in self.axes:
            if a.name == "depth":
                return int(max(a.values))
        return self.depth

    def time_points(self) -> np.ndarray:
        if self.mode == "discrete":
            return record_schedule(self.steps, self.record_every)
        return save_times(self.tau_max, self.n_save, self.tau_min)


def point_inputs(spec: SweepSpec, flat: np.ndarray) -> dict[str, np.ndarray]:
    """Inputs of the grid points with flat indices ``flat`` ``[C]`` (NumPy float64).

    Returns ``theta0`` ``[C, L_max, d]``, ``X`` ``[C, n, d]``, ``depth``, ``rho``, ``eta`` ``[C]``.
    """
    C, d, n_layers = len(flat), spec.d, spec.n_layers
    idx = np.unravel_index(flat, spec.shape) if spec.axes else ()
    values = {a.name: a.array()[i] for a, i in zip(spec.axes, idx, strict=True)}
    depth = values.get("depth", np.full(C, spec.depth))
    alpha = np.broadcast_to(values.get("alpha", spec.alpha), (C,))[:, None] * np.ones((C, d))
    if "seed" in values:
        lo, hi = spec.alpha_range
        alpha = np.stack([random_scales(int(s), d, lo, hi) for s in values["seed"]])
    for j in range(1, d + 1):
        if f"alpha_{j}" in values:
            alpha[:, j - 1] = values[f"alpha_{j}"]
    rows = np.arange(n_layers)[None, :, None] < depth[:, None, None]
    theta0 = np.where(rows, alpha[:, None, :], 1.0)
    if "mu" in values:
        X = np.asarray(spec.mu_set, dtype=np.float64)[values["mu"]][:, None, :]
    elif spec.mu:
        X = np.broadcast_to(np.asarray(spec.mu, dtype=np.float64), (C, 1, d))
    else:
        X = np.broadcast_to(
            np.asarray(spec.data[0], dtype=np.float64), (C, *np.shape(spec.data[0]))
        )
    return {
        "theta0": theta0,
        "X": np.ascontiguousarray(X),
        "depth": depth.astype(np.int64),
        "rho": np.broadcast_to(values.get("rho", spec.rho), (C,)).astype(np.float64),
        "eta": np.broadcast_to(values.get("eta", spec.eta), (C,)).astype(np.float64),
    }


def _labels(spec: SweepSpec) -> np.ndarray:
    if spec.data:
        return np.asarray(spec.data[1], dtype=np.float64)
    return np.ones(1)


def flow_formulation(spec: SweepSpec) -> str:
    """Balanced one-point sweeps use the log (or linf) formulation; data sets linear."""
    if spec.data:
        return "linear"
    return "linf" if spec.method == "sam-linf" else "log"


TILE_BYTES = 16 * 2**10
"""Discrete sweeps run in tiles whose state ``[L_max, d, T]`` takes about this many bytes,
so that it stays in the core's cache for all the steps of the run."""
FLOW_TILE_POINTS = 256
"""Flow sweeps solve this many trajectories in lockstep (one vmapped solve): fewer waste
steps on the slowest trajectory of the tile, more pay the solver's per-step overhead."""
UNROLL = 4
"""Steps per iteration of the inner step loop of discrete sweeps (less loop overhead)."""


def tile_points(mode: str, n_points: int, n_layers: int, d: int, dtype, n_devices: int) -> int:
    """Grid points per tile for a chunk of ``n_points`` on ``n_devices``.

    Discrete: the tile's state fits :data:`TILE_BYTES`; flows: :data:`FLOW_TILE_POINTS`.
    A small chunk gets one tile per device. Always a multiple of 8, the vector width, so
    that no tile ends in a scalar remainder.
    """
    if mode == "discrete":
        per_point = n_layers * d * np.dtype(dtype).itemsize
        fit = max(8, TILE_BYTES // per_point // 8 * 8)
    else:
        fit = FLOW_TILE_POINTS
    share = -(-n_points // n_devices)
    return min(fit, -(-share // 8) * 8)


def _tiled(tile_fn: Callable, mode: str) -> Callable:
    """The jitted chunk program around ``tile_fn``, which runs one tile of points.

    The chunk's points are cut into tiles of :func:`tile_points` points (the last padded
    with copies of the last point), the tiles are spread over the devices
    (``shard_map``), and each device runs its tiles one after another (``lax.map``), so
    a tile's data stay in cache. Discrete tiles are batch-last: ``tile_fn`` gets
    ``theta0`` ``[L_max, d, T]``, ``X`` ``[n, d, T]``, ``depth``, ``rho``, ``eta`` ``[T]``
    (an input shared by every point arrives with a batch axis of 1); flow tiles put the
    points first. Either way ``tile_fn(..., y, times)`` returns ``[T, ...]`` summaries.
    """
    mesh = _mesh()
    n_dev = mesh.size
    batch_last = mode == "discrete"

    def run_tiles(theta0, X, depth, rho, eta, y, times):
        return lax.map(lambda a: tile_fn(*a, y, times), (theta0, X, depth, rho, eta))

    sharded = jax.shard_map(
        run_tiles,
        mesh=mesh,
        in_specs=(*(PartitionSpec("grid"),) * 5, PartitionSpec(), PartitionSpec()),
        out_specs=PartitionSpec("grid"),
        check_vma=False,  # diffrax's solver state mixes per-device and shared values
    )

    def chunk(theta0, X, y, depth, rho, eta, times):
        C, n_layers, d = theta0.shape
        T = tile_points(mode, C, n_layers, d, theta0.dtype, n_dev)
        n_tiles = -(-C // (n_dev * T)) * n_dev

        def to_tiles(a):  # [C, *s] -> [n_tiles, *s, T] (batch-last) or [n_tiles, T, *s]
            if a.shape[0] == 1:  # shared by every point: one batch entry that broadcasts
                return jnp.broadcast_to(jnp.moveaxis(a, 0, -1), (n_tiles, *a.shape[1:], 1))
            pad = jnp.broadcast_to(a[-1:], (n_tiles * T - C, *a.shape[1:]))
            a = jnp.concatenate([a, pad]).reshape(n_tiles, T, *a.shape[1:])
            return jnp.moveaxis(a, 1, -1) if batch_last else a

        out = sharded(*map(to_tiles, (theta0, X, depth, rho, eta)), y, times)
        return {k: v.reshape(n_tiles * T, *v.shape[2:])[:C] for k, v in out.items()}

    return jax.jit(chunk)


def make_chunk_fn(spec: SweepSpec, padding: bool | None = None) -> Callable:
    """The jitted ``inputs -> summaries`` program of this sweep.

    Inputs: ``theta0`` ``[C, L_max, d]``, ``X`` ``[C, n, d]``, ``y`` ``[n]``, ``depth``,
    ``rho``, ``eta`` ``[C]``, and the record ``times`` ``[T]``; any chunk size ``C``. In
    discrete mode ``X`` and ``depth`` may have leading size 1 instead of ``C`` when every
    point shares them: the loop then reads one copy instead of one per point.
    ``padding``: whether rows of ``theta0`` beyond a point's ``depth`` may be padding
    (default: whether the grid has points with fewer layers than ``spec.n_layers``).
    Without it a discrete program takes every row as a real layer and ignores ``depth``,
    which saves the layer mask in every step.
    Cached on what the program depends on (not the grid values), so a rerun or another
    sweep of the same kind in the same process compiles nothing new.
    """
    if padding is None:
        padding = has_padding(spec)
    return _chunk_fn(
        spec.method,
        spec.mode,
        flow_formulation(spec) if spec.mode == "flow" else None,
        spec.solver,
        spec.rtol,
        spec.atol,
        spec.max_steps,
        spec.dtype,
        spec.collapse_factor,
        spec.plateau_fraction,
        spec.save_trajectories,
        spec.mode != "discrete" or padding,
    )


def has_padding(spec: SweepSpec) -> bool:
    """Whether some grid point has fewer layers than ``spec.n_layers``."""
    depths = next((a.values for a in spec.axes if a.name == "depth"), (spec.depth,))
    return min(depths) < spec.n_layers


@functools.lru_cache(maxsize=32)
def _chunk_fn(
    method: str,
    mode: str,
    formulation: str | None,
    solver: str,
    rtol: float,
    atol: float,
    max_steps: int,
    dtype: str,
    collapse_factor: float,
    plateau_fraction: float,
    keep: bool,
    padding: bool = True,
) -> Callable:
    rule = get_rule(method)

    def summaries(beta, tau, loss, valid, failed, **kwargs):
        out = summarize(beta, tau, loss, valid, failed, collapse_factor, plateau_fraction, **kwargs)
        del out["horizon"]
        return out

    if mode == "discrete":

        def discrete_tile(theta0, X, depth, rho, eta, y, times):
            # Each record is reduced to its scalars inside the step loop, batch-last
            # like the run itself: no [T, d] trajectory unless it is to be kept.
            traj = simulate(
                theta0,
                Problem(X, y[:, None]),
                # Without padding rows the runner needs no layer mask: a static depth.
                depth if padding else theta0.shape[0],
                rho,
                eta,
                times,
                rule=rule,
                unroll=UNROLL,
                track_regimes=True,
                record_beta=keep,
            )
            out = finish(
                traj.tracker,
                traj.tracked,
                traj.tau,
                failed=traj.failed_step >= 0,
                collapse_factor=collapse_factor,
                plateau_fraction=plateau_fraction,
            )
            del out["horizon"]
            out.update(traj.tracked)
            out["failed_step"] = traj.failed_step
            out["rescaled_tau"] = traj.tau
            if keep:
                out["beta"] = traj.beta
            return {k: jnp.moveaxis(v, -1, 0) for k, v in out.items()}

        return _tiled(discrete_tile, mode)

    config = FlowConfig(
        formulation=formulation,
        solver=solver,
        rtol=rtol,
        atol=atol,
        max_steps=max_steps,
        log_beta_max=0.5 * float(np.log(np.finfo(dtype).max)),
        singular_log_range=0.45 * float(-np.log(np.finfo(dtype).eps)),
    )

    def one(theta0, X, depth, rho, y, times):
        sol = integrate(theta0, Problem(X, y), depth, rho, times, rule=rule, config=config)
        out = summaries(
            sol.beta,
            sol.tau,
            sol.loss,
            sol.valid,
            sol.failed,
            beta_end=sol.beta_end,
            ended_at_blowup=sol.blowup & (depth >= 3),
        )
        out["blowup_tau"] = jnp.where(sol.blowup & (depth >= 3), sol.stop_tau, jnp.nan)
        out["stop_tau"] = sol.stop_tau
        if keep:
            out["beta"] = sol.beta
        return out

    def flow_tile(theta0, X, depth, rho, eta, y, times):
        return jax.vmap(one, in_axes=(0, 0, 0, 0, None, None))(theta0, X, depth, rho, y, times)

    return _tiled(flow_tile, mode)


def use_cpu_cores() -> bool:
    """Make each CPU core a JAX device, so that sweeps shard over every core.

    XLA runs one CPU device's program on one thread; the chunks of a sweep are split
    over the devices, so without this a sweep uses a single core. Acts only before JAX
    has started and when no device count was chosen (``jax_num_cpu_devices`` or
    ``--xla_force_host_platform_device_count`` in ``XLA_FLAGS``); returns whether it did.
    """
    chosen = "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", "")
    if chosen or jax.config.jax_num_cpu_devices >= 0:
        return False
    try:
        jax.config.update("jax_num_cpu_devices", os.cpu_count() or 1)
    except RuntimeError:  # JAX has started: its devices stay as they are
        return False
    return True


def start_distributed() -> bool:
    """Join a multi-process run when ``SAMFLOW_DISTRIBUTED=1``; returns whether one runs.

    Reads ``JAX_COORDINATOR_ADDRESS`` (by JAX itself), ``SAMFLOW_NUM_PROCESSES`` and
    ``SAMFLOW_PROCESS_ID``; what is not given is left to JAX's cluster detection. Must
    run before JAX starts its backends.
    """
    if os.environ.get("SAMFLOW_DISTRIBUTED") != "1":
        return False
    if not jax.distributed.is_initialized():
        number = os.environ.get("SAMFLOW_NUM_PROCESSES")
        index = os.environ.get("SAMFLOW_PROCESS_ID")
        # CPU processes exchange results through gloo (XLA's CPU collectives).
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            num_processes=int(number) if number else None,
            process_id=int(index) if index else None,
        )
    return True


def _agreed(flags: np.ndarray) -> np.ndarray:
    """Process 0's ``flags`` in every process (a no-op with one process)."""
    if jax.process_count() == 1:
        return flags
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.broadcast_one_to_all(flags))


def _barrier(name: str) -> None:
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def _mesh() -> Mesh:
    return Mesh(np.array(jax.devices()), ("grid",))


def run_chunk(spec: SweepSpec, fn: Callable, flat: np.ndarray, chunk_size: int) -> dict:
    """Run the grid points ``flat`` (padded to ``chunk_size``).

    Returns NumPy summaries with leading axis ``len(flat)``.
    """
    n = len(flat)
    padded = np.concatenate([flat, np.full(chunk_size - n, flat[-1])])
    inputs = point_inputs(spec, padded)
    mesh = _mesh()
    if spec.mode == "discrete":
        shared = {k for k in ("X", "depth") if np.all(inputs[k] == inputs[k][:1])}
        inputs.update({k: inputs[k][:1] for k in shared})
    else:
        shared = set()
    with precision(spec.dtype) as dt:
        sharded = NamedSharding(mesh, PartitionSpec("grid"))
        replicated = NamedSharding(mesh, PartitionSpec())
        args = {
            k: jax.device_put(
                jnp.asarray(v, jnp.int32 if k == "depth" else dt),
                replicated if k in shared else sharded,
            )
            for k, v in inputs.items()
        }
        times = spec.time_points()
        times = jnp.asarray(
            times, (jnp.int64 if dt == np.float64 else jnp.int32) if spec.mode == "discrete" else dt
        )
        out = fn(
            args["theta0"],
            args["X"],
            jnp.asarray(_labels(spec), dt),
            args["depth"],
            args["rho"],
            args["eta"],
            times,
        )
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils

            out = multihost_utils.process_allgather(out, tiled=True)
        return {k: np.asarray(v)[:n] for k, v in out.items()}


def chunk_plan(size: int, chunk: int, n_devices: int) -> tuple[int, list[np.ndarray]]:
    """Chunk size rounded up to a multiple of the device count, and the index blocks."""
    chunk = max(1, min(chunk, size))
    chunk = -(-chunk // n_devices) * n_devices
    return chunk, [np.arange(s, min(s + chunk, size)) for s in range(0, size, chunk)]


def trajectory_bytes(spec: SweepSpec) -> int:
    """Bytes the ``beta`` trajectories of the whole grid would take."""
    return spec.size * len(spec.time_points()) * spec.d * np.dtype(spec.dtype).itemsize


def check_size(spec: SweepSpec, limit_bytes: int | None = None) -> None:
    """Refuse ``save_trajectories`` when the trajectories would not fit in memory."""
    if not spec.save_trajectories:
        return
    if limit_bytes is None:
        limit_bytes = int(0.25 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    need = trajectory_bytes(spec)
    if need > limit_bytes:
        raise InputError(
            f"--save-trajectories would need {need / 2**30:.1f} GiB for {spec.size} grid points "
            f"x {len(spec.time_points())} records x d = {spec.d}, over the limit of "
            f"{limit_bytes / 2**30:.1f} GiB; shrink the grid or drop --save-trajectories"
        )


DIMS = {
    "regime": (),
    "limit_coord": (),
    "first_amplified": (),
    "n_handoffs": (),
    "plateau_end_tau": (),
    "failed_step": (),
    "blowup_tau": (),
    "stop_tau": (),
    "dominant": ("time",),
    "beta_norm": ("time",),
    "loss": ("time",),
    "rescaled_tau": ("time",),
    "final_direction": ("coord",),
    "takeover_tau": ("coord",),
    "beta": ("time", "coord"),
}
ATTRS = {
    "limit_coord": {
        "long_name": "coordinate dominating at the horizon",
        "comment": "0: beta collapsed to 0; -2: converged to a finite nonzero point",
    },
    "first_amplified": {"long_name": "dominant coordinate at the first record after tau = 0"},
    "n_handoffs": {"long_name": "number of changes of the dominant coordinate"},
    "plateau_end_tau": {"long_name": "first tau with loss <= plateau_fraction * loss(0)"},
    "failed_step": {"long_name": "step of the first non-finite record (-1: none)"},
    "blowup_tau": {"long_name": "finite-time blow-up tau (NaN: none)"},
    "stop_tau": {"long_name": "tau where the solve ended (horizon or event)"},
    "dominant": {"long_name": "dominant coordinate D = argmax_j |beta_j| (0: none)"},
    "beta_norm": {"long_name": "||beta||_1"},
    "loss": {"long_name": "logistic loss"},
    "rescaled_tau": {"long_name": "rescaled time of each record"},
    "final_direction": {"long_name": "beta / ||beta||_1 at the horizon"},
    "takeover_tau": {"long_name": "first recorded tau at which coordinate j dominates"},
    "beta": {"long_name": "predictor beta"},
}


def chunk_dataset(chunk: dict[str, np.ndarray], flat: np.ndarray) -> xr.Dataset:
    return xr.Dataset(
        {k: (("point", *DIMS[k]), v) for k, v in chunk.items()}, coords={"point": flat}
    )


def assemble(spec: SweepSpec, chunks: list[xr.Dataset], attrs: dict) -> xr.Dataset:
    """Fill the gridded result from chunk Datasets (preallocated, no concatenation copy)."""
    axis_names = [a.name for a in spec.axes]
    times = spec.time_points()
    coords = {a.name: a.array() for a in spec.axes}
    coords["time"] = np.arange(len(times))
    coords["coord"] = np.arange(1, spec.d + 1)
    first = chunks[0]
    data = {}
    for name, var in first.data_vars.items():
        extra = DIMS[name]
        shape = (spec.size, *(len(coords[e]) for e in extra))
        flat = np.empty(shape, var.dtype)
        for ch in chunks:
            flat[ch["point"].values] = ch[name].values
        data[name] = (
            (*axis_names, *extra),
            flat.reshape(*spec.shape, *shape[1:]),
            ATTRS.get(name, {}),
        )
    ds = xr.Dataset(data, coords=coords)
    ds["regime"] = ds["regime"].astype(np.int8)
    ds["regime"].attrs.update(regime_attrs())
    if spec.mode == "discrete":
        ds["step"] = ("time", times, {"long_name": "step index of each record"})
    else:
        ds["tau"] = ("time", times, {"long_name": "rescaled time", "symbol": r"$\tau$"})
    if spec.mu_set:
        ds["mu_values"] = (("mu", "coord"), np.asarray(spec.mu_set), {"long_name": "mu vector"})
    ds.attrs = attrs
    return ds


def sweep_attrs(spec: SweepSpec, command_line: str | None) -> dict:
    return base_attrs(
        method=spec.method,
        mode=spec.mode,
        depth=spec.depth,
        rho=spec.rho,
        alpha=spec.alpha,
        eta=spec.eta if spec.mode == "discrete" else None,
        steps=spec.steps if spec.mode == "discrete" else None,
        tau_max=spec.tau_max if spec.mode == "flow" else None,
        dtype=spec.dtype,
        mu=np.asarray(spec.mu) if spec.mu else None,
        n_points=len(spec.data[1]) if spec.data else 1,
        axes=" ".join(a.name for a in spec.axes),
        alpha_range=np.asarray(spec.alpha_range),
        collapse_factor=spec.collapse_factor,
        plateau_fraction=spec.plateau_fraction,
        flow_formulation=flow_formulation(spec) if spec.mode == "flow" else None,
        rtol=spec.rtol if spec.mode == "flow" else None,
        atol=spec.atol if spec.mode == "flow" else None,
        command_line=command_line,
    )


def run_sweep(
    spec: SweepSpec,
    out: str | os.PathLike,
    chunk: int = 16384,
    command_line: str | None = None,
    progress: bool = True,
    size_limit_bytes: int | None = None,
) -> xr.Dataset:
    """Run (or resume) the sweep and write the assembled Dataset to ``out``."""
    from tqdm.auto import tqdm

    check_rates(spec.method, spec.rho if spec.method != "gd" else None, spec.eta)
    check_axes(list(spec.axes), spec.mode)
    check_size(spec, size_limit_bytes)
    start_distributed()
    out = Path(out)
    work = out.with_name(out.name + ".work")
    work.mkdir(parents=True, exist_ok=True)
    key_file = work / "spec.json"
    key = spec.key()
    if key_file.exists() and json.loads(key_file.read_text()).get("key") != key:
        raise InputError(
            f"{work} holds chunks of a different sweep; remove it or choose another --out"
        )
    key_file.write_text(json.dumps({"key": key, "command_line": command_line}))
    n_dev = len(jax.devices())
    chunk_size, blocks = chunk_plan(spec.size, chunk, n_dev)
    stop_after = int(os.environ.get(STOP_AFTER_ENV, "0") or 0)
    fn = None
    done_now = 0
    paths = [work / f"chunk_{i:05d}.nc" for i in range(len(blocks))]
    todo = _agreed(np.array([not p.exists() for p in paths]))
    bar = tqdm(total=len(blocks), desc=f"{out.name}", unit="chunk", disable=not progress)
    for path, flat, run in zip(paths, blocks, todo, strict=True):
        if run:
            if fn is None:
                fn = make_chunk_fn(spec)
            result = run_chunk(spec, fn, flat, chunk_size)
            if jax.process_index() == 0:
                write_dataset(chunk_dataset(result, flat), path)
            done_now += 1
            if stop_after and done_now >= stop_after:
                bar.close()
                raise KeyboardInterrupt(f"stopped after {done_now} chunks ({STOP_AFTER_ENV})")
        bar.update(1)
    bar.close()
    _barrier("samflow: every chunk written")
    chunks = [xr.load_dataset(p) for p in paths]
    _barrier("samflow: every chunk read")
    ds = assemble(spec, chunks, sweep_attrs(spec, command_line))
    if jax.process_index() == 0:
        write_dataset(ds, out)
        shutil.rmtree(work, ignore_errors=True)
    return ds
