"""Runners: how a trajectory is advanced in time, passed as objects (as in diffrax).

:class:`Discrete` takes steps of the update rule and records at a schedule;
:class:`Flow` solves the rescaled continuous-time flow with diffrax and saves at
log-spaced times. Every default of the engine lives here, once: the command line, the
Python API, the sweeps, the figures and the benchmarks all read these fields.

A runner validates itself when it is made (``InputError`` naming the bad value), is
frozen and hashable (part of the key of a compiled program), and knows its record
times (:meth:`Discrete.times`, :meth:`Flow.times`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import ClassVar

import numpy as np

from samflow.errors import InputError
from samflow.inputs import integer, positive, real, real_array

MAX_STEPS = 2**62
"""Step counters are int64; a bound well inside it keeps every sum of them exact."""
TAU_MIN_SHARE = 1e-4
"""A flow's first positive save time, as a share of its horizon, unless given."""
SOLVERS = ("tsit5", "dopri5", "dopri8", "heun", "kvaerno5")
FORMULATIONS = ("auto", "log", "linf", "linear")


def _strictly_increasing(name: str, values, first=0) -> tuple:
    a = real_array(name, values)
    if a.ndim != 1 or a.size < 2:
        raise InputError(f"{name} must hold at least two times, got {values!r}")
    if a[0] != first or np.any(np.diff(a) <= 0):
        raise InputError(f"{name} must start at {first} and increase strictly, got {a.tolist()}")
    return tuple(a.tolist())


@dataclass(frozen=True)
class Discrete:
    """Discrete steps ``theta <- theta - eta * grad Loss(theta + rho eps)``.

    Attributes:
        eta: step size (> 0).
        steps: number of steps (>= 1).
        record_every: record every this many steps (default ``steps // 100``, at least
            1); the last step is always recorded.
        log_records: instead, this many log-spaced records.
        record_steps: instead, exactly these step indices (starting at 0, increasing).
        batch: minibatch size: each step uses ``batch`` examples drawn without
            replacement, a fresh random subset every step (docs/theory.md §12). None
            (default): every example, today's deterministic step.
        m: m-sharpness: the (mini)batch is cut into groups of ``m`` examples, each
            group perturbed with its own ``eps_k`` and the descent gradient the mean of
            the groups' gradients at their perturbed points. None (default): one group
            (the batch, "n-SAM"); 1: "1-SAM". ``m`` must divide the batch.
        label_noise: ``delta >= 0``: label-noise SGD, each step's labels ``y_i + delta
            xi_i`` with random signs ``xi_i`` (real labels: the squared loss). 0: none.
    Record 0 is the initial state (step 0). The random draws of ``batch`` and
    ``label_noise`` are keyed by the run's seed (:mod:`samflow.stochastic`).
    """

    eta: float = 0.01
    steps: int = 20_000
    record_every: int | None = None
    log_records: int | None = None
    record_steps: tuple[int, ...] | None = None
    batch: int | None = None
    m: int | None = None
    label_noise: float = 0.0

    mode: ClassVar[str] = "discrete"

    def __post_init__(self) -> None:
        object.__setattr__(self, "eta", positive("eta", self.eta))
        given = [
            name.replace("_", "-")
            for name in ("record_every", "log_records", "record_steps")
            if getattr(self, name) is not None
        ]
        if len(given) > 1:
            raise InputError(f"give only one of {', '.join(given)}")
        if self.record_steps is not None:
            steps = _strictly_increasing("record-steps", self.record_steps)
            if not all(float(s).is_integer() for s in steps):
                raise InputError(f"record-steps must be integers, got {list(steps)}")
            object.__setattr__(self, "record_steps", tuple(int(s) for s in steps))
            object.__setattr__(self, "steps", self.record_steps[-1])
        # Step counters are int64; a bound well inside it keeps every sum of them exact.
        object.__setattr__(self, "steps", integer("steps", self.steps, 1, MAX_STEPS - 1))
        for name in ("record_every", "log_records"):
            if getattr(self, name) is not None:
                value = integer(name.replace("_", "-"), getattr(self, name))
                object.__setattr__(self, name, value)
        for name in ("batch", "m"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, integer(name, getattr(self, name)))
        noise = real("label-noise", self.label_noise)
        if noise < 0:
            raise InputError(f"label-noise must be >= 0, got {noise}")
        object.__setattr__(self, "label_noise", noise)
        if self.batch is not None and self.m is not None and self.batch % self.m:
            raise InputError(f"m = {self.m} must divide batch = {self.batch}")

    @property
    def stochastic(self) -> bool:
        """Whether the steps draw anything (a minibatch, label noise) or cut the batch
        into groups (``m``): settings beyond today's full-batch step."""
        return self.batch is not None or self.m is not None or self.label_noise > 0

    def n_records(self) -> int:
        """How many records :meth:`times` gives at most (counted, not made)."""
        if self.record_steps is not None:
            return len(self.record_steps)
        if self.log_records is not None:
            return min(self.log_records, self.steps) + 1
        every = self.record_every or max(1, self.steps // 100)
        return self.steps // every + 2

    def times(self) -> np.ndarray:
        """Step indices of the records ``[T]`` int64: 0, ..., ``steps`` (increasing)."""
        if self.record_steps is not None:
            return np.asarray(self.record_steps, np.int64)
        if self.log_records is not None:
            ticks = np.unique(np.round(np.geomspace(1, self.steps, self.log_records)))
        else:
            every = self.record_every or max(1, self.steps // 100)
            ticks = np.arange(every, self.steps + 1, every)
        ticks = np.union1d(ticks.astype(np.int64), [self.steps])
        return np.concatenate([[0], ticks]).astype(np.int64)

    def attrs(self) -> dict:
        """The settings as file attributes."""
        out = {"eta": self.eta, "steps": self.steps}
        for name in ("record_every", "log_records", "batch", "m"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.label_noise > 0:
            out["label_noise"] = self.label_noise
        return out

    def __repr__(self) -> str:
        """As the dataclass's, without the stochastic fields left unset (so that a
        full-batch run's ``history`` reads as it did before they existed)."""
        unset = {"batch": None, "m": None, "label_noise": 0.0}
        shown = ", ".join(
            f"{f.name}={getattr(self, f.name)!r}"
            for f in fields(self)
            if f.name not in unset or getattr(self, f.name) != unset[f.name]
        )
        return f"Discrete({shown})"


@dataclass(frozen=True)
class Flow:
    """The rescaled flow (one point) or SAM gradient flow (n points), with diffrax.

    Attributes:
        tau_max: horizon (> 0).
        n_save: number of saved times, 0 and ``n_save - 1`` log-spaced ones ending at
            ``tau_max`` (2: 0 and ``tau_max``).
        tau_min: first positive save time (default ``tau_max * TAU_MIN_SHARE``).
        rtol, atol: tolerances of the PID step-size controller.
        solver: one of :data:`SOLVERS`.
        max_steps: cap on solver steps; reaching it is reported as a failure.
        formulation: ``auto`` (log space for a balanced positive start on one point,
            where the rule has a closed form; else linear), or ``log``, ``linf``,
            ``linear`` forced (docs/theory.md §3).
        save_tau: instead of the log grid, exactly these times (starting at 0).
        tau_cap: run to the fate (docs/theory.md, "Labels of the limit"): a run whose
            fate is not decided at ``tau_max`` goes on, unrecorded, until it is (an
            event or a certificate) or until ``tau_cap`` (> ``tau_max``); its leader
            path, stop and label are those of the longer run, its records end at
            ``tau_max``. None (the default): the run ends at ``tau_max``, and one not
            decided there is unresolved.
    """

    tau_max: float = 50.0
    n_save: int = 200
    tau_min: float | None = None
    rtol: float = 1e-8
    atol: float = 1e-10
    solver: str = "tsit5"
    max_steps: int = 100_000
    formulation: str = "auto"
    save_tau: tuple[float, ...] | None = None
    tau_cap: float | None = None

    mode: ClassVar[str] = "flow"

    def __post_init__(self) -> None:
        if self.save_tau is not None:
            taus = _strictly_increasing("save-tau", self.save_tau, first=0.0)
            object.__setattr__(self, "save_tau", tuple(float(t) for t in taus))
            object.__setattr__(self, "tau_max", taus[-1])
            object.__setattr__(self, "n_save", len(taus))
        object.__setattr__(self, "tau_max", positive("tau-max", self.tau_max))
        object.__setattr__(self, "n_save", integer("n-save", self.n_save, 2))
        if self.tau_min is not None:
            tau_min = real("tau-min", self.tau_min)
            if not (0 < tau_min < self.tau_max):
                raise InputError(f"tau-min must lie in (0, tau-max), got {tau_min}")
            object.__setattr__(self, "tau_min", tau_min)
        if self.tau_cap is not None:
            tau_cap = positive("tau-cap", self.tau_cap)
            if not tau_cap > self.tau_max:
                raise InputError(f"tau-cap must exceed tau-max = {self.tau_max:g}, got {tau_cap:g}")
            object.__setattr__(self, "tau_cap", tau_cap)
        object.__setattr__(self, "rtol", positive("rtol", self.rtol))
        object.__setattr__(self, "atol", positive("atol", self.atol))
        object.__setattr__(self, "max_steps", integer("max-steps", self.max_steps))
        if self.solver not in SOLVERS:
            raise InputError(f"unknown solver {self.solver!r}; choose from {', '.join(SOLVERS)}")
        if self.formulation not in FORMULATIONS:
            raise InputError(
                f"unknown formulation {self.formulation!r}; choose from {', '.join(FORMULATIONS)}"
            )

    def n_records(self) -> int:
        """How many records :meth:`times` gives."""
        return self.n_save

    @property
    def first_save(self) -> float:
        """The first positive save time: ``tau_min``, or ``tau_max * TAU_MIN_SHARE``."""
        return self.tau_max * TAU_MIN_SHARE if self.tau_min is None else self.tau_min

    def times(self) -> np.ndarray:
        """Saved times ``[T]`` float64: 0, then log-spaced from ``tau_min`` to ``tau_max``
        (the horizon is always the last)."""
        if self.save_tau is not None:
            return np.asarray(self.save_tau, np.float64)
        if self.n_save == 2:  # no log grid between: 0 and the horizon
            return np.array([0.0, self.tau_max])
        return np.concatenate([[0.0], np.geomspace(self.first_save, self.tau_max, self.n_save - 1)])

    def attrs(self) -> dict:
        """The settings as file attributes (the full solver configuration)."""
        out = {
            "tau_max": self.tau_max,
            "n_save": self.n_save,
            "tau_min": self.first_save,
            "solver": self.solver,
            "rtol": self.rtol,
            "atol": self.atol,
            "max_steps": self.max_steps,
        }
        if self.tau_cap is not None:
            out["tau_cap"] = self.tau_cap
        return out


Runner = Discrete | Flow


def check_runner(runner, modes: Sequence[str] = ("discrete", "flow")):
    """A runner of one of ``modes`` (:class:`samflow.Discrete`, :class:`samflow.Flow`)."""
    kinds = {"discrete": Discrete, "flow": Flow}
    if not isinstance(runner, tuple(kinds[m] for m in modes)):
        wanted = " or ".join(f"samflow.{kinds[m].__name__}(...)" for m in modes)
        raise InputError(f"runner must be {wanted}, got {runner!r}")
    return runner


def check_counters(runner: Runner, dtype: str) -> None:
    """Refuse a discrete run whose step counter would wrap in ``dtype``'s integers.

    float32 runs compute without JAX's x64 mode, where integers are int32: a step index
    of 2^31 or more would wrap (a silent error), so it is refused here.
    """
    if runner.mode == "discrete" and str(dtype) == "float32" and runner.steps >= 2**31:
        raise InputError(
            f"steps = {runner.steps} needs 64-bit step counters: with dtype float32 steps "
            "must be below 2^31; use float64"
        )


def default(owner: type, name: str):
    """The default of field ``name`` of the settings class ``owner`` (a runner,
    :class:`samflow.Classification`, ...), for command-line options.

    Args:
        owner: a dataclass.
        name: one of its fields.

    Returns:
        The field's default.
    """
    return next(f.default for f in fields(owner) if f.name == name)
