"""What defines a sweep (:class:`SweepSpec`) and the inputs of its grid points.

A sweep is a cartesian grid of axes (:mod:`samflow.sweeps.axes`) over one problem, one
rule and one runner. Grid points are numbered in C order; :meth:`SweepSpec.points`
builds the :class:`samflow.engine.Points` of any set of them, and :meth:`SweepSpec.setup`
the program that runs them. The spec validates itself when made, so that every way
in (Python or the command line) is checked once, here.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field

import numpy as np

from samflow.engine import Points, Setup
from samflow.errors import InputError
from samflow.flows import FlowConfig, formulation_for
from samflow.init import check_alpha, check_depth, random_scales
from samflow.precision import check_dtype
from samflow.rules import PerturbationRule, check_rho
from samflow.runners import Discrete, Flow, check_counters
from samflow.sweeps.axes import Axis, check_axes


def rule_identity(rule: PerturbationRule) -> str:
    """A rule's name and the code of its direction: two rules that share a name but not
    their code never share a key."""
    fn = rule.direction
    code = "none" if fn is None else f"{fn.__module__}.{fn.__qualname__}"
    return f"{rule.name}:{code}:{rule.scale_invariant}"


@dataclass(frozen=True)
class SweepSpec:
    """Everything that defines a sweep's result (hashed to guard resumption).

    Attributes:
        rule: the perturbation rule.
        runner: :class:`samflow.runners.Discrete` or :class:`samflow.runners.Flow`.
        depth: layers, unless an axis varies it.
        axes: the grid axes, in order (C-order numbering of the points).
        alpha: uniform initialisation scale where no axis sets it.
        rho: SAM radius where no axis sets it (required for SAM unless an axis does).
        dtype: ``float64`` or ``float32``.
        alpha_range: for a ``seed`` axis, alpha_j log-uniform in ``[low, high]``.
        collapse_factor, plateau_fraction: classification options.
        save_trajectories: keep ``beta(time, coord)`` of every point.
        mu: the data point (one point), or ``()`` with ``data``.
        mu_set: rows for a ``mu`` axis.
        data: ``(X, y)`` as nested tuples (n points), or ``()``.
        pad_layers: pad parameters to at least this many layers (one program serves
            several depths; padding rows change nothing, docs/theory.md §7b).
    """

    rule: PerturbationRule
    runner: Discrete | Flow
    depth: int
    axes: tuple[Axis, ...] = ()
    alpha: float = 1.0
    rho: float | None = None
    dtype: str = "float64"
    alpha_range: tuple[float, float] = (0.05, 5.0)
    collapse_factor: float = 1e-3
    plateau_fraction: float = 0.5
    save_trajectories: bool = False
    mu: tuple = ()
    mu_set: tuple = ()
    data: tuple = field(default=(), repr=False)
    pad_layers: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.rule, PerturbationRule):
            raise InputError(f"rule must be a PerturbationRule, got {self.rule!r}")
        if not isinstance(self.runner, Discrete | Flow):
            raise InputError(
                f"runner must be samflow.Discrete or samflow.Flow, got {self.runner!r}"
            )
        check_depth(self.depth)
        check_dtype(self.dtype)
        check_counters(self.runner, self.dtype)
        check_axes(self.axes, self.mode)
        names = self.axis_names
        if "rho" not in names:
            object.__setattr__(self, "rho", check_rho(self.rule, self.rho))
        elif self.rho is not None:
            raise InputError("rho is set both as a value and as an axis")
        check_alpha(self.alpha)
        lo, hi = self.alpha_range
        if not 0 < lo < hi < np.inf:
            raise InputError(f"alpha-range must be 0 < LOW < HIGH, got {lo}, {hi}")
        if not (np.isfinite(self.collapse_factor) and 0 < self.collapse_factor < 1):
            raise InputError(f"collapse-factor must lie in (0, 1), got {self.collapse_factor}")
        if not (np.isfinite(self.plateau_fraction) and 0 < self.plateau_fraction < 1):
            raise InputError(f"plateau-fraction must lie in (0, 1), got {self.plateau_fraction}")
        if bool(self.mu) == bool(self.data):
            raise InputError("a sweep needs exactly one of mu (one point) and data (X, y)")
        if "mu" in names:
            if not self.mu_set:
                raise InputError("axis mu needs mu_set, the mu vectors it indexes")
            rows = np.asarray(self.mu_set, dtype=np.float64)
            if rows.ndim != 2 or rows.shape[1] != len(self.mu):
                raise InputError(f"mu_set must hold rows of d = {len(self.mu)} entries")
            if not np.all(np.isfinite(rows)) or np.any(rows <= 0):
                raise InputError("mu_set rows must be finite and > 0")
            index = next(a for a in self.axes if a.name == "mu").array()
            if index.min() < 0 or index.max() >= len(rows):
                raise InputError(f"axis mu indexes rows 0..{len(rows) - 1} of mu_set")

    @property
    def mode(self) -> str:
        return self.runner.mode

    @property
    def axis_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.axes)

    def key(self) -> str:
        """A hash of everything that defines the result."""
        fields = asdict(self)
        fields["rule"] = rule_identity(self.rule)
        fields["runner"] = {"type": type(self.runner).__name__, **asdict(self.runner)}
        payload = json.dumps(fields, sort_keys=True, default=str)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(a.values) for a in self.axes)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape)) if self.axes else 1

    @property
    def d(self) -> int:
        return len(self.mu) if self.mu else len(self.data[0][0])

    @property
    def n_layers(self) -> int:
        depths = next((a.values for a in self.axes if a.name == "depth"), (self.depth,))
        return max(int(max(depths)), self.pad_layers)

    @property
    def has_padding(self) -> bool:
        """Whether some grid point has fewer layers than :attr:`n_layers`."""
        depths = next((a.values for a in self.axes if a.name == "depth"), (self.depth,))
        return min(depths) < self.n_layers

    def times(self) -> np.ndarray:
        """The record times of the runner (steps or tau), starting at 0."""
        return self.runner.times()

    @property
    def formulation(self) -> str | None:
        """The flow formulation (None for a discrete runner): every start is balanced."""
        if self.mode != "flow":
            return None
        return formulation_for(self.rule, self.runner.formulation, not self.data, True)

    def setup(self, sharded: bool = True) -> Setup:
        """The program that runs this sweep's points."""
        flow = (
            FlowConfig.of(self.runner, self.formulation, self.dtype)
            if self.mode == "flow"
            else None
        )
        return Setup(
            rule=self.rule,
            mode=self.mode,
            dtype=self.dtype,
            flow=flow,
            collapse_factor=self.collapse_factor,
            plateau_fraction=self.plateau_fraction,
            keep=("beta",) if self.save_trajectories else (),
            padding=self.mode != "discrete" or self.has_padding,
            sharded=sharded,
        )

    def points(self, flat: np.ndarray) -> Points:
        """Inputs of the grid points with flat indices ``flat`` ``[C]`` (NumPy float64).

        Inputs every point shares (the data, a fixed depth) have leading size 1.
        """
        C, d, n_layers = len(flat), self.d, self.n_layers
        idx = np.unravel_index(flat, self.shape) if self.axes else ()
        values = {a.name: a.array()[i] for a, i in zip(self.axes, idx, strict=True)}
        depth = values.get("depth", np.full(1, self.depth))
        alpha = np.broadcast_to(values.get("alpha", self.alpha), (C,))[:, None] * np.ones((C, d))
        if "seed" in values:
            alpha = self.seed_alpha(values["seed"])
        for j in range(1, d + 1):
            if f"alpha_{j}" in values:
                alpha[:, j - 1] = values[f"alpha_{j}"]
        rows = np.arange(n_layers)[None, :, None] < np.reshape(depth, (-1, 1, 1))
        theta0 = np.where(rows, alpha[:, None, :], 1.0)
        if "mu" in values:
            X = np.asarray(self.mu_set, dtype=np.float64)[values["mu"]][:, None, :]
        elif self.mu:
            X = np.asarray(self.mu, dtype=np.float64)[None, None, :]
        else:
            X = np.asarray(self.data[0], dtype=np.float64)[None]
        y = np.asarray(self.data[1], dtype=np.float64) if self.data else np.ones(1)
        eta = self.runner.eta if self.mode == "discrete" else 0.0
        return Points(
            theta0=theta0,
            X=np.ascontiguousarray(X),
            y=y,
            depth=np.asarray(depth, np.int64),
            rho=np.broadcast_to(values.get("rho", self.rho), (C,)).astype(np.float64),
            eta=np.broadcast_to(values.get("eta", eta), (C,)).astype(np.float64),
        )

    def seed_alpha(self, seeds) -> np.ndarray:
        """Per-seed scales alpha_j ``[len(seeds), d]`` of a ``seed`` axis."""
        lo, hi = self.alpha_range
        return np.stack([random_scales(int(s), self.d, lo, hi) for s in np.atleast_1d(seeds)])
