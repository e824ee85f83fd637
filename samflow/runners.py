"""Runners: how a trajectory is advanced in time, passed as objects (as in diffrax).

:class:`Discrete` takes steps of the update rule and :class:`Flow` solves the
rescaled continuous-time flow with diffrax; each saves at a schedule, an object
(:class:`Every`, :class:`LogSpaced`, :class:`At`). Every default of the engine lives
here, once: the command line, the Python API, the sweeps, the figures and the
benchmarks all read these fields.

A runner validates itself when it is made (``InputError`` naming the bad value), is
frozen and hashable (part of the key of a compiled program), and knows its record
times (:meth:`Discrete.times`, :meth:`Flow.times`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from samflow._removed import refuse
from samflow.errors import InputError
from samflow.inputs import integer, positive, real, real_array

if TYPE_CHECKING:  # a solver object is diffrax's; a name needs no JAX
    from diffrax import AbstractSolver

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
class Every:
    """Save a discrete run every ``k`` steps, and at its last step (as diffrax's
    ``SaveAt``, a save schedule is an object: :class:`Every`, :class:`LogSpaced`,
    :class:`At`).

    Attributes:
        k: steps between saves (>= 1); None: ``steps // 100``, at least 1.

    Raises:
        InputError: ``k`` not an integer >= 1.

    Examples:
        >>> import samflow
        >>> samflow.Discrete(eta=0.1, steps=100, save=samflow.Every(25)).times().tolist()
        [0, 25, 50, 75, 100]
        >>> samflow.Discrete(eta=0.1, steps=10, save=samflow.Every(4)).times().tolist()
        [0, 4, 8, 10]
    """

    k: int | None = None

    def __post_init__(self) -> None:
        if self.k is not None:
            object.__setattr__(self, "k", integer("record-every", self.k))


@dataclass(frozen=True)
class LogSpaced:
    """Save at time 0 and at ``n`` log-spaced positive times, the last at the horizon.

    A discrete run rounds the times to steps and drops repeats, so it may save fewer.

    Attributes:
        n: how many positive times (>= 1; 1: the horizon alone).
        first: the first positive time, in (0, horizon); None: step 1 of a discrete
            run, ``tau_max * TAU_MIN_SHARE`` of a flow.

    Raises:
        InputError: ``n`` not an integer >= 1, or ``first`` not a number (the runner
            checks it against its horizon).

    Examples:
        >>> import samflow
        >>> samflow.Flow(tau_max=100.0, save=samflow.LogSpaced(2)).times().tolist()
        [0.0, 0.01, 100.0]
        >>> samflow.Discrete(eta=0.1, steps=1000, save=samflow.LogSpaced(3)).times().tolist()
        [0, 1, 32, 1000]
    """

    n: int
    first: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "n", integer("log-records", self.n))
        if self.first is not None:
            object.__setattr__(self, "first", real("tau-min", self.first))


@dataclass(frozen=True)
class At:
    """Save at exactly these times: steps of a discrete run, tau of a flow; the last is
    the horizon (it sets the runner's ``steps`` or ``tau_max``).

    Attributes:
        times: at least two times, from 0, strictly increasing (integers for a
            discrete run).

    Raises:
        InputError: fewer than two times, a first time other than 0, times that do not
            increase, or a boolean among them.

    Examples:
        >>> import samflow
        >>> samflow.Flow(save=samflow.At((0, 1, 5))).tau_max  # the last time is the horizon
        5.0
        >>> samflow.Discrete(eta=0.1, save=samflow.At((0, 10, 30))).steps
        30
    """

    times: tuple[float, ...]

    def __post_init__(self) -> None:
        times = self.times if isinstance(self.times, Sequence | np.ndarray) else (self.times,)
        # NumPy reads True as 1: a bool among times is a mistake, not a time.
        if any(isinstance(t, bool | np.bool_) for t in np.asarray(times, object).ravel()):
            raise InputError(f"save times must be numbers, not booleans, got {self.times!r}")
        object.__setattr__(self, "times", _strictly_increasing("save times", self.times))


Schedule = Every | LogSpaced | At


def _check_schedule(save, kinds: tuple[type, ...], runner: str):
    if not isinstance(save, kinds):
        wanted = " or ".join(f"samflow.{k.__name__}(...)" for k in kinds)
        raise InputError(f"{runner} save must be {wanted}, got {save!r}")
    return save


@refuse("record_every", "log_records", "record_steps")
@dataclass(frozen=True)
class Discrete:
    r"""Discrete steps
    \(\theta \leftarrow \theta - \eta \cdot \nabla \mathrm{Loss}(\theta + \rho \varepsilon)\).

    Attributes:
        eta: step size (> 0).
        steps: number of steps (>= 1); an :class:`At` schedule sets it to its last time.
        save: when to record: :class:`Every` (default: every ``steps // 100`` steps),
            :class:`LogSpaced` or :class:`At` (step indices). Record 0 is the initial
            state (step 0), and the last step is always recorded.
        batch: minibatch size: each step uses ``batch`` examples drawn without
            replacement, a fresh random subset every step
            (docs/theory/stochastic.md#stochastic-steps). None (default): every example, today's
            deterministic step.
        m: m-sharpness: the (mini)batch is cut into groups of ``m`` examples, each
            group perturbed with its own \(\varepsilon_k\) and the descent gradient the mean of
            the groups' gradients at their perturbed points. None (default): one group
            (the batch, "n-SAM"); 1: "1-SAM". ``m`` must divide the batch.
        label_noise: \(\delta \ge 0\): label-noise SGD, each step's labels \(y_i + \delta \xi_i\)
            with random signs \(\xi_i\) (real labels: the squared loss). 0: none. The random draws
            of ``batch`` and ``label_noise`` are keyed by the run's seed
            (:mod:`samflow.stochastic`).
        step_cap: run to the fate (docs/theory/regimes.md#labels-of-the-limit), the
            counterpart of :attr:`Flow.tau_cap`: a run whose fate is not decided at
            ``steps`` goes on, unrecorded, until a certificate decides it (checked
            every 512 steps) or until step ``step_cap`` (> ``steps``); its leader path
            and label are those of the longer run, its records end at ``steps``. None
            (the default): the run ends at ``steps``, and one not decided there is
            unresolved.

    Raises:
        InputError: a field of the wrong type or out of range, naming it.

    Examples:
        >>> import samflow
        >>> runner = samflow.Discrete(eta=0.05, steps=1000)  # saves every steps // 100 steps
        >>> runner.times()[:3].tolist(), len(runner.times())
        ([0, 10, 20], 101)
        >>> samflow.Discrete(eta=0.05, steps=0)
        Traceback (most recent call last):
            ...
        samflow.errors.InputError: steps must be an integer in 1..4611686018427387903, got 0
    """

    eta: float = 0.01
    steps: int = 20_000
    save: Schedule = Every()
    batch: int | None = None
    m: int | None = None
    label_noise: float = 0.0
    step_cap: int | None = None

    mode: ClassVar[str] = "discrete"

    def __post_init__(self) -> None:
        object.__setattr__(self, "eta", positive("eta", self.eta))
        save = _check_schedule(self.save, (Every, LogSpaced, At), "Discrete")
        if isinstance(save, At):
            if not all(float(s).is_integer() for s in save.times):
                raise InputError(f"record-steps must be integers, got {list(save.times)}")
            if save.times[-1] > MAX_STEPS - 1:  # before int(): 1e300 would be a 300-digit int
                raise InputError(
                    f"record-steps must end at a step below 2^62, got {save.times[-1]:g}"
                )
            object.__setattr__(self, "save", At(tuple(int(s) for s in save.times)))
            object.__setattr__(self, "steps", self.save.times[-1])
        # Step counters are int64; a bound well inside it keeps every sum of them exact.
        object.__setattr__(self, "steps", integer("steps", self.steps, 1, MAX_STEPS - 1))
        if isinstance(save, LogSpaced) and save.first is not None:
            if not 0 < save.first < self.steps:
                raise InputError(f"the first save must lie in (0, steps), got {save.first}")
        for name in ("batch", "m"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, integer(name, getattr(self, name)))
        noise = real("label-noise", self.label_noise)
        if noise < 0:
            raise InputError(f"label-noise must be >= 0, got {noise}")
        object.__setattr__(self, "label_noise", noise)
        if self.batch is not None and self.m is not None and self.batch % self.m:
            raise InputError(f"m = {self.m} must divide batch = {self.batch}")
        if self.step_cap is not None:
            cap = integer("step-cap", self.step_cap, 1, MAX_STEPS - 1)
            if not cap > self.steps:
                raise InputError(f"step-cap must exceed steps = {self.steps}, got {cap}")
            object.__setattr__(self, "step_cap", cap)

    @property
    def stochastic(self) -> bool:
        """Whether the steps draw anything (a minibatch, label noise) or cut the batch
        into groups (``m``): settings beyond today's full-batch step."""
        return self.batch is not None or self.m is not None or self.label_noise > 0

    @property
    def _every(self) -> int:
        return self.save.k or max(1, self.steps // 100)

    def n_records(self) -> int:
        """How many records :meth:`times` gives at most (counted, not made)."""
        if isinstance(self.save, At):
            return len(self.save.times)
        if isinstance(self.save, LogSpaced):
            return min(self.save.n, self.steps) + 1
        return self.steps // self._every + 2

    def _log_samples(self, first: float) -> int:
        """How many log-spaced times to draw for :class:`LogSpaced` ``n``: ``n``, or fewer
        where fewer give the same steps (so ``LogSpaced(10**12)`` over 40 steps draws
        no more than the 40 steps it can save).

        Consecutive log-spaced times from ``first`` to ``steps`` are ``h = log(steps /
        first) / (n - 1)`` apart in log, and the times that round to step ``k`` fill
        ``log((k + 1/2) / (k - 1/2)) > 1 / k >= 1 / steps`` of it, so with ``h <= 1 /
        steps`` every step from ``round(first)`` to ``steps`` is drawn: more times only
        repeat them (**derived here**)."""
        every_step = int(np.ceil(self.steps * np.log(self.steps / first))) + 1
        return min(self.save.n, max(every_step, 2))

    def times(self) -> np.ndarray:
        """Step indices of the records ``[T]`` int64: 0, ..., ``steps`` (increasing)."""
        if isinstance(self.save, At):
            return np.asarray(self.save.times, np.int64)
        if isinstance(self.save, LogSpaced):
            first = 1 if self.save.first is None else self.save.first
            ticks = np.unique(np.round(np.geomspace(first, self.steps, self._log_samples(first))))
        else:
            ticks = np.arange(self._every, self.steps + 1, self._every)
        ticks = np.union1d(ticks.astype(np.int64), [self.steps])
        return np.concatenate([[0], ticks]).astype(np.int64)

    def attrs(self) -> dict:
        """The settings as file attributes."""
        out = {"eta": self.eta, "steps": self.steps}
        if isinstance(self.save, Every) and self.save.k is not None:
            out["record_every"] = self.save.k
        if isinstance(self.save, LogSpaced):
            out["log_records"] = self.save.n
        for name in ("batch", "m"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.label_noise > 0:
            out["label_noise"] = self.label_noise
        if self.step_cap is not None:
            out["step_cap"] = self.step_cap
        return out

    def __repr__(self) -> str:
        """As the dataclass's, without the fields left at their defaults but ``eta`` and
        ``steps`` (a run's ``history`` line stays short)."""
        shown = ", ".join(
            f"{f.name}={getattr(self, f.name)!r}"
            for f in fields(self)
            if f.name in ("eta", "steps") or getattr(self, f.name) != f.default
        )
        return f"Discrete({shown})"


@refuse("n_save", "tau_min", "save_tau")
@dataclass(frozen=True)
class Flow:
    """The rescaled flow (one point) or SAM gradient flow (n points), with diffrax.

    Attributes:
        tau_max: horizon (> 0); an :class:`At` schedule sets it to its last time.
        save: when to save: :class:`LogSpaced` (default: 0 and 199 log-spaced times
            from ``tau_max * TAU_MIN_SHARE`` to ``tau_max``) or :class:`At`.
        rtol, atol: tolerances of the PID step-size controller.
        solver: a name of :data:`SOLVERS` (``tsit5``: :class:`samflow.flows.Tsit5`,
            else diffrax's solver of that name), or a diffrax solver object, e.g.
            ``diffrax.Dopri8()`` (a name keeps the runner free of JAX until it runs).
        max_steps: cap on solver steps; reaching it is reported as a failure.
        formulation: ``auto`` (log space for a balanced positive start on one point,
            where the rule has a closed form; else linear), or ``log``, ``linf``,
            ``linear`` forced (docs/theory/flows.md#rescaled-flows).
        tau_cap: run to the fate (docs/theory/regimes.md#labels-of-the-limit): a run whose
            fate is not decided at ``tau_max`` goes on, unrecorded, until it is (an
            event or a certificate) or until ``tau_cap`` (> ``tau_max``, at most
            ``tau_max / eps``, eps float64's); its leader
            path, stop and label are those of the longer run, its records end at
            ``tau_max``. None (the default): the run ends at ``tau_max``, and one not
            decided there is unresolved.

    Raises:
        InputError: a field of the wrong type or out of range, naming it: among them a
            solver object that cannot solve the flow (:func:`check_solver`) and a
            ``tau_cap`` past ``tau_max / eps`` (float64's eps), where one rounding unit
            of the solver's time is longer than the recorded run.

    Examples:
        >>> import samflow
        >>> runner = samflow.Flow(tau_max=50.0)  # 200 saves: 0 and 199 log-spaced times
        >>> times = runner.times()
        >>> len(times), float(times[0]), float(times[1]), float(times[-1])  # tau_max 1e-4 first
        (200, 0.0, 0.005, 50.0)
    """

    tau_max: float = 50.0
    save: LogSpaced | At = LogSpaced(199)
    rtol: float = 1e-8
    atol: float = 1e-10
    solver: str | AbstractSolver = "tsit5"
    max_steps: int = 100_000
    formulation: str = "auto"
    tau_cap: float | None = None

    mode: ClassVar[str] = "flow"

    def __post_init__(self) -> None:
        save = _check_schedule(self.save, (LogSpaced, At), "Flow")
        if isinstance(save, At):
            object.__setattr__(self, "tau_max", save.times[-1])
        object.__setattr__(self, "tau_max", positive("tau-max", self.tau_max))
        if isinstance(save, LogSpaced) and save.first is not None:
            if not 0 < save.first < self.tau_max:
                raise InputError(f"tau-min must lie in (0, tau-max), got {save.first}")
        object.__setattr__(self, "rtol", positive("rtol", self.rtol))
        object.__setattr__(self, "atol", positive("atol", self.atol))
        object.__setattr__(self, "max_steps", integer("max-steps", self.max_steps))
        if self.tau_cap is not None:
            tau_cap = positive("tau-cap", self.tau_cap)
            if not tau_cap > self.tau_max:
                raise InputError(f"tau-cap must exceed tau-max = {self.tau_max:g}, got {tau_cap:g}")
            # Past tau_max / eps, one rounding unit of the solver's time near the cap is
            # longer than the whole recorded run: no step there resolves the dynamics the
            # records follow, and the solve only spends max_steps (1e308: 150 s).
            reach = self.tau_max / float(np.finfo(np.float64).eps)
            if tau_cap > reach:
                raise InputError(
                    f"tau-cap = {tau_cap:g} is past what a solver resolves from tau-max = "
                    f"{self.tau_max:g}: at most tau-max / eps = {reach:.3g} (float64), where "
                    "one rounding unit of time is the whole recorded run; lower tau-cap"
                )
            object.__setattr__(self, "tau_cap", tau_cap)
        if isinstance(self.solver, str):
            if self.solver not in SOLVERS:
                raise InputError(
                    f"unknown solver {self.solver!r}; choose from {', '.join(SOLVERS)}"
                )
        else:
            check_solver(self.solver)
        if self.formulation not in FORMULATIONS:
            raise InputError(
                f"unknown formulation {self.formulation!r}; choose from {', '.join(FORMULATIONS)}"
            )

    @property
    def solver_name(self) -> str:
        """The solver's name in files: its name, or its class's in lower case."""
        return self.solver if isinstance(self.solver, str) else type(self.solver).__name__.lower()

    def n_records(self) -> int:
        """How many records :meth:`times` gives."""
        if isinstance(self.save, At):
            return len(self.save.times)
        return self.save.n + 1

    @property
    def first_save(self) -> float:
        """The first positive save time of a log grid: its ``first``, or ``tau_max *
        TAU_MIN_SHARE``."""
        first = getattr(self.save, "first", None)
        return self.tau_max * TAU_MIN_SHARE if first is None else first

    def times(self) -> np.ndarray:
        """Saved times ``[T]`` float64: 0, then log-spaced from the first save time to
        ``tau_max``, or the :class:`At` times (the horizon is always the last)."""
        if isinstance(self.save, At):
            return np.asarray(self.save.times, np.float64)
        if self.save.n == 1:  # no log grid between: 0 and the horizon
            return np.array([0.0, self.tau_max])
        return np.concatenate([[0.0], np.geomspace(self.first_save, self.tau_max, self.save.n)])

    def attrs(self) -> dict:
        """The settings as file attributes (the full solver configuration)."""
        out = {
            "tau_max": self.tau_max,
            "n_save": self.n_records(),
            "tau_min": self.first_save,
            "solver": self.solver_name,
            "rtol": self.rtol,
            "atol": self.atol,
            "max_steps": self.max_steps,
        }
        if self.tau_cap is not None:
            out["tau_cap"] = self.tau_cap
        return out


Runner = Discrete | Flow

SOLVERS_THAT_WORK = "diffrax.Tsit5(), Dopri5(), Dopri8(), Heun(), Bosh3(), Kvaerno5()"
"""Solver objects a :class:`Flow` takes, for messages (any adaptive ODE solver works)."""


def check_solver(solver) -> None:
    """Refuse (``InputError`` naming it and what works) a solver object a flow cannot
    use: the flow is one ``diffrax.ODETerm`` solved with adaptive steps (a PID
    controller), so the solver must be an instance, estimate its error (an adaptive
    solver: not ``Euler``) and solve a single term (not ``SemiImplicitEuler`` or
    ``EulerHeun``, which take two). diffrax is imported only here, for an object that
    is not a name, which its maker has loaded already.

    Args:
        solver: what :class:`Flow` was given as ``solver``, not a name.

    Raises:
        InputError: a class, an object of no diffrax solver, a solver without an
            error estimate, or one of several terms.
    """
    import diffrax

    works = f"use one of {SOLVERS_THAT_WORK} or a name of {', '.join(SOLVERS)}"
    if isinstance(solver, type):
        if issubclass(solver, diffrax.AbstractSolver):
            raise InputError(
                f"solver {solver.__name__} is a class: pass an instance, "
                f"diffrax.{solver.__name__}()"
            )
        raise InputError(
            f"solver must be a diffrax solver, got the class {solver.__name__}; {works}"
        )
    if not isinstance(solver, diffrax.AbstractSolver):
        raise InputError(f"solver must be a diffrax solver, got {solver!r}; {works}")
    name = f"{type(solver).__name__}()"
    if solver.term_structure is not diffrax.AbstractTerm:
        raise InputError(
            f"solver {name} solves several terms (an SDE or split system); the flow is one "
            f"ODETerm: {works}"
        )
    if not isinstance(solver, diffrax.AbstractAdaptiveSolver):
        raise InputError(
            f"solver {name} has no error estimate, which the flow's adaptive steps need: {works}"
        )


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
