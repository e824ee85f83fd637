"""What defines a sweep (:class:`SweepSpec`) and the inputs of its grid points.

A sweep is a cartesian grid of axes (:mod:`samflow.sweeps.axes`) over one problem, one
rule and one runner. Grid points are numbered in C order; :meth:`SweepSpec.points`
builds the :class:`samflow.engine.Points` of any set of them, and :meth:`SweepSpec.setup`
the program that runs them.

:meth:`SweepSpec.from_inputs` is the one way in: :func:`samflow.trajectory`,
:func:`samflow.sweep`, :func:`samflow.boundary`, the figures and the command line all
describe their run with it, and the spec validates itself when made (types, shapes,
ranges, conflicts, and the memory the run would hold against what the machine has),
without importing JAX: a bad input is refused before any compilation.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields, is_dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from samflow import inputs
from samflow._removed import refuse
from samflow.classification import Classification
from samflow.errors import InputError
from samflow.init import is_balanced, layer_rows, random_scales
from samflow.inputs import check_major
from samflow.runners import Discrete, Flow, check_counters, check_runner
from samflow.summaries import Summaries
from samflow.sweeps.axes import Axis, check_axes, make_axis, parse_axis

if TYPE_CHECKING:  # the engine (JAX) is imported when a spec is run, not when it is made
    from samflow.engine import Points, Setup
    from samflow.model import Model
    from samflow.rules import PerturbationRule
    from samflow.stochastic import Sampling

SUMMARY_VALUES = 14
"""Per-point scalars of a sweep's result (regime, limit_coord, ..., solver_failed)."""
RECORD_VALUES = 4
"""Per-point, per-record values of a sweep's result (dominant, beta_norm, loss, tau)."""
SUMMARY_RECORD_VALUES = 6
"""Per-record values the regression summaries add at most (samflow.summaries.NAMES)."""
LABELS = "limit-11"
"""The version of what a regime label means, part of :meth:`SweepSpec.key`: chunks labelled
under another meaning (limit-10: before the discrete step's collapse from every r_j >= 1
below the fixed point, l2-SAM at even L, docs/theory/regimes.md#collapse-certificates,
and the map that follows its flow from a start tied at the top, named by who leads first,
docs/theory/regimes.md#vanishing-steps;
limit-9: before the discrete l2-SAM map that follows its flow where
its steps vanished, docs/theory/regimes.md#vanishing-steps; limit-8: before l2-SAM's exact
race to the bound, docs/theory/regimes.md#lead-certificates-at-every-depth, and its pinned
major that hands the lead on at odd L, docs/theory/regimes.md#pinned-major; limit-7: before
those certificates: the discrete collapse at L = 2 with the step's bound h <= eta / 2,
docs/theory/regimes.md#discrete-collapse-at-depth-two, l2-SAM's middle that empties into
collapse, docs/theory/regimes.md#middle-empties, its crossing bound at odd L,
docs/theory/regimes.md#crossing-bound, and its region that outlasts the race,
docs/theory/regimes.md#region-outlasts; limit-6: before these labels: a blow-up without a
proven winner left unresolved (a rule of one's own, other models) and linf-SAM's flow
labelled by its first blow-up, docs/theory/regimes.md#linf-first-blow-up; l2-SAM's middle at
depth two, docs/theory/regimes.md#middle-at-depth-two, and its take-over by a minor with the
strictly largest rate, docs/theory/regimes.md#minor-winner; limit-5: before take-overs named
their winner, a minor coordinate included, docs/theory/regimes.md#minor-winner, and before
the blow-up's winner was kept to the closed forms that declare its proof (a rule of one's
own is read by its leader at the blow-up again); limit-4: before this stop's certificates:
linf-SAM's discrete step, docs/theory/regimes.md#linf-sam-discrete-step, USAM's finite
limits and leads beyond the region at L >= 3, docs/theory/regimes.md#finite-limits-of-usam,
l2-SAM's lead by a minor leader with the largest rate and race to the bound,
docs/theory/regimes.md#lead-certificates-at-every-depth, l2-SAM's second collapse
certificate and the blow-up's winner; limit-3: before the take-over at every depth and the
labels of stalled tied starts, docs/theory/regimes.md#takeover-at-every-depth; limit-2:
before the take-over certificate, docs/theory/regimes.md#takeover-certificate; limit-1:
before discrete leader paths were read after every step; earlier: before
docs/theory/regimes.md#labels-of-the-limit) are never resumed into a sweep of this one."""
KEY_FORMAT = 2
"""The version of how :meth:`SweepSpec.key` is computed, part of it: 2 (issue 31) hashes
every field that differs from its default, recursing into the settings objects
(:func:`identity`); a chunk written under format 1 is never resumed, it is recomputed."""
COPIES = 3
"""A result is held about three times at its peak: by the compiled program, on the host,
and in the Dataset made from it."""


def rule_identity(rule: PerturbationRule) -> str:
    """A rule's name and the code of its direction: two rules that share a name but not
    their code never share a key."""
    fn = rule.direction
    code = "none" if fn is None else f"{fn.__module__}.{fn.__qualname__}"
    return f"{rule.name}:{code}:{rule.scale_invariant}"


def _is_default(value, f) -> bool:
    """Whether ``value`` equals the default of dataclass field ``f`` (False: none)."""
    if f.default is not MISSING:
        default = f.default
    elif f.default_factory is not MISSING:
        default = f.default_factory()
    else:
        return False
    try:
        return bool(type(value) is type(default) and value == default)
    except (TypeError, ValueError):  # values whose == is not one bool
        return False


def identity(value):
    """What defines ``value`` in a key, as JSON-able data: a dataclass (a runner, a save
    schedule, :class:`samflow.Classification`, :class:`samflow.summaries.Summaries`, a
    model's parts, ...) as its type's name and the fields that differ from their
    defaults, recursively; sequences and mappings item by item; a function as its
    module and name; anything else as itself.

    So a field or an option added later with a default leaves every existing key as it
    was, and a default written explicitly gives the key of leaving it out.
    """
    if is_dataclass(value) and not isinstance(value, type):
        out = {"type": type(value).__qualname__}
        for f in fields(value):
            item = getattr(value, f.name)
            if not _is_default(item, f):
                out[f.name] = identity(item)
        return out
    if isinstance(value, Mapping):
        return {str(k): identity(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [identity(v) for v in value]
    if isinstance(value, np.ndarray | np.generic):
        return value.tolist()
    if callable(value):
        return f"{value.__module__}.{value.__qualname__}"
    return value


@refuse("collapse_factor", "plateau_fraction", "sharpness", "active_threshold")
@dataclass(frozen=True)
class SweepSpec:
    """Everything that defines a sweep's result (hashed to guard resumption).

    Make one with :meth:`from_inputs` (user forms: a method name, axes as a mapping,
    ``mu`` as a list); the fields are checked when the spec is made, whichever way.

    Attributes:
        rule: the perturbation rule (a name of :data:`samflow.inputs.METHODS` is
            replaced by its rule once every field is checked).
        runner: :class:`samflow.runners.Discrete` or :class:`samflow.runners.Flow`.
        depth: layers, unless an axis varies it.
        axes: the grid axes, in order (C-order numbering of the points).
        alpha: uniform initialisation scale where no axis sets it.
        rho: SAM radius where no axis sets it (required for SAM unless an axis does).
        dtype: ``float64`` or ``float32``.
        alpha_range: for a ``seed`` axis, alpha_j log-uniform in ``[low, high]``.
        classification: the settings of regime classification
            (:class:`samflow.Classification`).
        save_trajectories: keep ``beta(time, coord)`` of every point.
        mu: the data point (one point), or ``()`` with ``data``.
        mu_set: rows for a ``mu`` axis.
        data: ``(X, y)`` as nested tuples (n points), or ``()``.
        pad_layers: pad parameters to at least this many layers (one program serves
            several depths; padding rows change nothing,
            docs/theory/numerics.md#depth-in-one-program).
        parametrization, loss: the model (:data:`samflow.inputs.PARAMETRIZATIONS`,
            :data:`samflow.inputs.LOSSES`; docs/theory/models.md#parametrisations-and-losses).
        summaries: the regression summaries taken at every record
            (:class:`samflow.Summaries`: ``l1_norm``, ``l2_norm``, ``n_active``;
            ``test_error``, set where ``beta_star`` is given; ``sharpness`` and
            ``hessian_trace``), or None: none.
        beta_star: the ground truth of ``test_error`` ``[d]``, or ``()``.
        seed: the seed of the stochastic steps (minibatches, label noise) where no axis
            sets it: a ``noise_seed`` axis, else a ``seed`` axis (which then keys both
            the random initialisation and the steps) (docs/theory/stochastic.md#stochastic-steps).

    Raises:
        InputError: a field of the wrong type or out of range, fields that conflict
            (``rho`` as a value and an axis, ``beta_star`` without summaries, ...), or a
            result that would not fit in memory; the message names the value.

    Examples:
        The description of a 64-point regime map, checked without running it:

        >>> import samflow
        >>> spec = samflow.SweepSpec.from_inputs("sam-l2", depth=2, mu=[1, 2, 3, 4], rho=1.0,
        ...     axes={"alpha": "0.05:5:64:log"}, runner=samflow.Flow(tau_max=200.0))
        >>> spec.size, spec.rule.name, spec.runner.tau_max
        (64, 'sam-l2', 200.0)
    """

    rule: PerturbationRule
    runner: Discrete | Flow
    depth: int
    axes: tuple[Axis, ...] = ()
    alpha: float = 1.0
    rho: float | None = None
    dtype: str = "float64"
    alpha_range: tuple[float, float] = inputs.SEED_ALPHA_RANGE
    classification: Classification = Classification()
    save_trajectories: bool = False
    mu: tuple = ()
    mu_set: tuple = ()
    data: tuple = field(default=(), repr=False)
    pad_layers: int = 0
    parametrization: str = "product"
    loss: str = "logistic"
    summaries: Summaries | None = None
    beta_star: tuple = field(default=(), repr=False)
    seed: int = 0

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        inputs.check_method(self.rule)
        check_runner(self.runner)
        set_(self, "depth", inputs.check_depth(self.depth))
        set_(self, "dtype", inputs.check_dtype(self.dtype))
        check_counters(self.runner, self.dtype)
        if not isinstance(self.axes, tuple) or not all(isinstance(a, Axis) for a in self.axes):
            raise InputError(f"axes must be a tuple of Axis, got {self.axes!r}")
        check_axes(self.axes, self.mode)
        names = self.axis_names
        if "rho" not in names:
            set_(self, "rho", inputs.check_rho(self.rule, self.rho))
        elif self.rho is not None:
            raise InputError("rho is set both as a value and by axis rho")
        # An axis rho is taken by every rule, gd too: a gd map may share a SAM map's grid.
        set_(self, "alpha", inputs.positive("alpha", self.alpha))
        set_(self, "alpha_range", inputs.check_range("alpha-range", self.alpha_range))
        if not isinstance(self.classification, Classification):
            raise InputError(
                f"classification must be samflow.Classification(...), got {self.classification!r}"
            )
        set_(
            self,
            "save_trajectories",
            inputs.check_flag("save-trajectories", self.save_trajectories),
        )
        set_(
            self, "pad_layers", inputs.integer("pad-layers", self.pad_layers, 0, inputs.MAX_LAYERS)
        )
        if bool(self.mu) == bool(self.data):
            raise InputError("a sweep needs exactly one of mu (one point) and data (X, y)")
        self._check_model()
        if "mu" in names:
            if not self.mu_set:
                raise InputError("axis mu needs mu_set, the mu vectors it indexes")
            rows = inputs.real_array("mu_set", self.mu_set, ndim=2)
            if rows.shape[1] != len(self.mu):
                raise InputError(f"mu_set must hold rows of d = {len(self.mu)} entries")
            if np.any(rows <= 0):
                raise InputError("mu_set rows must be > 0")
            check_major(rows, "mu_set row")
            index = next(a for a in self.axes if a.name == "mu").array()
            if index.min() < 0 or index.max() >= len(rows):
                raise InputError(f"axis mu indexes rows 0..{len(rows) - 1} of mu_set")
        elif self.mu_set:
            raise InputError("mu_set is given but no axis mu indexes it")
        set_(self, "seed", inputs.check_seed(self.seed))
        inputs.check_sampling(self.runner, self.rule, self.n, self.model.margin_loss)
        if "noise_seed" in names and self.sampling is None:
            raise InputError(
                "axis noise_seed needs stochastic steps (a runner with batch, m or label_noise)"
            )
        self.check_size()
        if isinstance(self.rule, str):
            from samflow.rules import get_rule

            set_(self, "rule", get_rule(self.rule))

    def _check_model(self) -> None:
        """The model options, against the depth, the axes and the data."""
        set_ = object.__setattr__
        inputs.check_model(self.parametrization, self.loss, self.depth)
        if inputs.fixed_rows(self.parametrization) is not None and "depth" in self.axis_names:
            name = getattr(self.parametrization, "name", self.parametrization)
            raise InputError(f"parametrization {name} has no depth axis")
        if self.data:
            inputs.check_problem(data=(np.asarray(self.data[0]), np.asarray(self.data[1])),
                                 loss=self.loss)  # fmt: skip
        summaries = self.summaries
        if summaries is not None and not isinstance(summaries, Summaries):
            raise InputError(f"summaries must be samflow.Summaries(...) or None, got {summaries!r}")
        if self.beta_star:
            set_(self, "beta_star", tuple(inputs.check_beta_star(self.beta_star, self.d).tolist()))
            if summaries is None:
                raise InputError("beta_star is for the test_error summary: it needs summaries on")
            set_(self, "summaries", replace(summaries, test_error=True))
        elif summaries is not None and summaries.test_error:
            raise InputError("the test_error summary needs beta_star, the ground truth")
        if self.sharpness and self.n_layers * self.d > inputs.MAX_HESSIAN:
            raise InputError(
                f"sharpness solves a Hessian of L * d = {self.n_layers * self.d} rows, over "
                f"{inputs.MAX_HESSIAN}"
            )

    @property
    def model(self) -> Model:
        """The parametrisation and loss (:class:`samflow.model.Model`)."""
        from samflow.model import Model

        return Model(self.parametrization, self.loss)

    @classmethod
    @refuse("collapse_factor", "plateau_fraction", "sharpness", "active_threshold")
    def from_inputs(
        cls,
        method: str | PerturbationRule,
        *,
        depth: int,
        runner: Discrete | Flow,
        mu: Sequence[float] | None = None,
        data: tuple[np.ndarray, np.ndarray] | None = None,
        axes: Mapping[str, Sequence[float] | np.ndarray | str] | None = None,
        alpha: float | None = None,
        rho: float | None = None,
        dtype: str = "float64",
        alpha_range: tuple[float, float] = inputs.SEED_ALPHA_RANGE,
        classification: Classification = Classification(),
        save_trajectories: bool = False,
        mu_set: np.ndarray | None = None,
        pad_layers: int = 0,
        loss: str = "logistic",
        parametrization: str = "product",
        beta_star: np.ndarray | None = None,
        summaries: Summaries | bool | None = None,
        seed: int | None = None,
    ) -> SweepSpec:
        """The description of a run from the forms a user writes, every input checked.

        Args:
            method: a name of :data:`samflow.METHODS` or a rule.
            depth: layers L, unless an axis varies it.
            runner: :class:`samflow.Discrete` or :class:`samflow.Flow`.
            mu: one data point ``[d]`` (entries > 0), or None with ``data``.
            data: ``(X [n, d], y [n])``, or None with ``mu``.
            axes: axis name to values or to a range string ``"START:STOP:NUM[:log|:lin]"``
                (:mod:`samflow.sweeps.axes`), in grid order (None or empty: one point).
            alpha: uniform initialisation scale (default 1), refused beside an axis that
                sets it (``alpha``, ``seed``).
            rho: SAM radius, refused beside axis ``rho``.
            dtype: ``float64`` or ``float32``.
            alpha_range: for a ``seed`` axis, alpha_j log-uniform in ``(low, high)``.
            classification: the settings of regime classification.
            save_trajectories: keep ``beta(time, coord)`` of every point.
            mu_set: the rows ``[k, d]`` a ``mu`` axis indexes.
            pad_layers: pad parameters to at least this many layers.
            loss: the loss, a name of :data:`samflow.inputs.LOSSES` or a
                :class:`samflow.Loss`.
            parametrization: a name of :data:`samflow.inputs.PARAMETRIZATIONS` or a
                :class:`samflow.Parametrization`.
            beta_star: the ground truth ``[d]`` of the ``test_error`` summary.
            summaries: the summaries to take (:class:`samflow.Summaries`); True: the
                default ones; False: none; None: the default ones where the model is not
                the paper's or ``beta_star`` is given, else none.
            seed: keys the stochastic steps (default 0); refused beside an axis that sets
                it, and where nothing is random.

        Returns:
            The checked spec.

        Raises:
            InputError: naming the bad value, before anything is computed or compiled.
        """
        inputs.check_model(parametrization, loss, depth)
        X, y = inputs.check_problem(mu, data, loss)
        d = X.shape[1]
        beta_star = inputs.check_beta_star(beta_star, d)
        if summaries is None:
            default = parametrization == "product" and loss == "logistic"
            summaries = not default or beta_star is not None
        if isinstance(summaries, bool):
            summaries = Summaries() if summaries else None
        if axes is None:
            axes = {}
        if not isinstance(axes, Mapping):
            raise InputError(f"axes must be a mapping of axis name to values, got {axes!r}")
        grid = []
        for name, values in axes.items():
            if not isinstance(name, str):
                raise InputError(f"axis names must be strings, got {name!r}")
            text = isinstance(values, str)
            grid.append(parse_axis(f"{name}={values}", d) if text else make_axis(name, values, d))
        if alpha is not None and {"alpha", "seed"} & {a.name for a in grid}:
            raise InputError("alpha is set both as a value and by an axis")
        if seed is not None and {"seed", "noise_seed"} & {a.name for a in grid}:
            raise InputError("seed is set both as a value and by an axis")
        spec = cls(
            rule=method,
            runner=runner,
            depth=depth,
            axes=tuple(grid),
            alpha=1.0 if alpha is None else alpha,
            rho=rho,
            dtype=dtype,
            alpha_range=alpha_range,
            classification=classification,
            save_trajectories=save_trajectories,
            mu=tuple(X[0].tolist()) if data is None else (),
            mu_set=()
            if mu_set is None
            else tuple(map(tuple, inputs.real_array("mu_set", mu_set, ndim=2).tolist())),
            data=() if data is None else (tuple(map(tuple, X.tolist())), tuple(y.tolist())),
            pad_layers=pad_layers,
            parametrization=parametrization,
            loss=loss,
            summaries=summaries,
            beta_star=() if beta_star is None else tuple(beta_star.tolist()),
            seed=0 if seed is None else seed,
        )
        if seed is not None and spec.sampling is None:
            raise InputError(f"seed {seed!r}: {inputs.NOTHING_RANDOM}; drop the seed")
        return spec

    def bytes_needed(self, keep_theta: bool = False) -> int:
        """Bytes a run would hold at its peak (:data:`COPIES` of its result): per point
        its summaries, per record its timelines (``beta`` with ``save_trajectories`` or
        ``keep_theta``, ``theta`` with ``keep_theta``, as a trajectory keeps)."""
        keep_beta = self.save_trajectories or keep_theta
        per_record = RECORD_VALUES + self.d * (keep_beta + keep_theta * self.n_layers)
        per_record += SUMMARY_RECORD_VALUES * (self.summaries is not None)
        per_point = SUMMARY_VALUES + 2 * self.d + self.runner.n_records() * per_record
        return COPIES * self.size * per_point * np.dtype(self.dtype).itemsize

    def check_size(self, limit_bytes: int | None = None, keep_theta: bool = False) -> None:
        """Refuse a run whose result would not fit in memory (``limit_bytes``, default
        :data:`samflow.inputs.MEMORY_SHARE` of the machine's)."""
        shape = " x ".join(str(n) for n in self.shape) or "1"
        kept = " with trajectories" if self.save_trajectories or keep_theta else ""
        inputs.check_bytes(
            f"a grid of {shape} points x {self.runner.n_records()} records x d = {self.d}{kept}",
            self.bytes_needed(keep_theta),
            limit_bytes,
        )

    @property
    def mode(self) -> str:
        return self.runner.mode

    @property
    def axis_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.axes)

    @property
    def sharpness(self) -> bool:
        """Whether the run takes the Hessian's top eigenvalue and trace."""
        return self.summaries is not None and self.summaries.sharpness

    def key(self) -> str:
        """A hash of everything that defines the result (a sweep's resume key).

        The spec's :func:`identity` (every field that differs from its default, the
        settings objects recursively; the rule by :func:`rule_identity`), with
        :data:`LABELS` and :data:`KEY_FORMAT`.

        Returns:
            16 hex digits.
        """
        described = identity(self)
        described["rule"] = rule_identity(self.rule)
        payload = {"format": KEY_FORMAT, "labels": LABELS, "spec": described}
        text = json.dumps(payload, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(a.values) for a in self.axes)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape)) if self.axes else 1

    @property
    def n(self) -> int:
        """Number of data points."""
        return 1 if self.mu else len(self.data[0])

    @property
    def sampling(self) -> Sampling | None:
        """The stochastic steps resolved against the data (None: deterministic)."""
        from samflow.stochastic import Sampling

        return Sampling.of(self.runner, self.n)

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
    def step_path(self) -> str | None:
        """The discrete step this sweep's points take (None for flows): ``balanced`` when
        the rule treats layers alike, the model is the paper's and the steps are
        full-batch and deterministic, since every point of a sweep starts with equal
        layers (:meth:`points`; :func:`samflow.engine.step_path` decides per run)."""
        if self.mode != "discrete":
            return None
        from samflow.balanced import BALANCED, GENERAL, setting_applies

        fits = setting_applies(self.mode, self.rule, self.model, self.sampling)
        return BALANCED if fits else GENERAL

    @property
    def formulation(self) -> str | None:
        """The flow formulation of the grid's points (None for a discrete runner)."""
        return self.formulation_of()

    def formulation_of(self, theta0: np.ndarray | None = None) -> str | None:
        r"""The flow formulation (None for a discrete runner) from the start ``theta0``
        ``[L, d]``; None: the grid's starts, every one balanced (:meth:`points`).

        The one place that decides it, for sweeps and trajectories alike
        (:func:`samflow.flows.formulation_for`): a closed form needs one point with
        \(x > 0\) (``mu`` always is) and a balanced positive start."""
        if self.mode != "flow":
            return None
        from samflow.flow_config import formulation_for

        positive = not self.data or (self.n == 1 and bool(np.all(np.asarray(self.data[0]) > 0)))
        balanced = theta0 is None or is_balanced(theta0, self.depth)
        return formulation_for(self.rule, self.runner.formulation, positive, balanced, self.model)

    def setup(self, sharded: bool = True, theta0: np.ndarray | None = None) -> Setup:
        """The program that runs this sweep's points; with ``theta0`` ``[L, d]``, the one
        trajectory from it (:meth:`trajectory_points`), which keeps its states (``beta``
        and ``theta``), on one device. The model's methods are checked against the
        protocol on this run's shapes first (:func:`samflow.user_code.check_model`), so a
        user's mistake is named before it is compiled (samflow's own models are tested
        instead: :attr:`samflow.model.Model.built_in`)."""
        from samflow.engine import Setup
        from samflow.flow_config import FlowConfig
        from samflow.user_code import check_model

        if not self.model.built_in:  # samflow's own are tested; a user's is checked here
            check_model(self.model, self.n_layers, self.d, self.n, self.dtype)

        flow = (
            FlowConfig.of(self.runner, self.formulation_of(theta0), self.dtype)
            if self.mode == "flow"
            else None
        )
        if theta0 is not None:
            keep, sharded = ("beta", "theta"), False
        else:
            keep = ("beta",) if self.save_trajectories else ()
        return Setup(
            rule=self.rule,
            mode=self.mode,
            dtype=self.dtype,
            flow=flow,
            classification=self.classification,
            keep=keep,
            padding=self.has_padding,
            sharded=sharded,
            major=self.major(),
            model=self.model,
            summaries=self.summaries,
            sampling=self.sampling,
            step_cap=getattr(self.runner, "step_cap", None),
        )

    def model_attrs(self) -> dict:
        """File attributes of the model options, each only where it is not the default (a
        file of the paper's model stays as it was)."""
        model = self.model
        out = {
            "parametrization": model.parametrization.name,
            "loss": model.loss.name,
            "active_threshold": None if self.summaries is None else self.summaries.active_threshold,
            "beta_star": np.asarray(self.beta_star) if self.beta_star else None,
        }
        fields = SweepSpec.__dataclass_fields__
        return {
            k: v
            for k, v in out.items()
            if not (k in ("parametrization", "loss") and v == fields[k].default)
        }

    def major(self) -> int:
        """The major coordinate of shared data (0 for one point; 1 where the model does
        not classify: no regime is read from it)."""
        from samflow.model import Problem, major_coordinate

        if not self.data:
            return 0
        if not self.model.classifies:
            return 1
        return major_coordinate(Problem(*map(np.asarray, self.data)))

    def points(self, flat: np.ndarray) -> Points:
        """Inputs of the grid points with flat indices ``flat`` ``[C]`` (NumPy float64).

        Inputs every point shares (the data, a fixed depth) have leading size 1.
        """
        from samflow.engine import Points

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
        theta0 = np.where(layer_rows(depth, n_layers), alpha[:, None, :], 1.0)
        # The parametrisation's start at scale alpha (uv: v = 0), rows first.
        theta0 = np.moveaxis(self.model.parametrization.start(np.moveaxis(theta0, 0, -1)), -1, 0)
        if "mu" in values:
            X = np.asarray(self.mu_set, dtype=np.float64)[values["mu"]][:, None, :]
        elif self.mu:
            X = np.asarray(self.mu, dtype=np.float64)[None, None, :]
        else:
            X = np.asarray(self.data[0], dtype=np.float64)[None]
        y = np.asarray(self.data[1], dtype=np.float64) if self.data else np.ones(1)
        eta = self.runner.eta if self.mode == "discrete" else 0.0
        key = None
        if self.sampling is not None:
            from samflow.stochastic import seed_key_data

            seeds = values.get("noise_seed", values.get("seed", np.full(C, self.seed)))
            key = seed_key_data(seeds)
        return Points(
            theta0=theta0,
            X=np.ascontiguousarray(X),
            y=y,
            depth=np.asarray(depth, np.int64),
            rho=np.broadcast_to(values.get("rho", self.rho), (C,)).astype(np.float64),
            eta=np.broadcast_to(values.get("eta", eta), (C,)).astype(np.float64),
            beta_star=np.asarray(self.beta_star, np.float64) if self.beta_star else None,
            key=key,
        )

    def trajectory_points(self, theta0: np.ndarray) -> Points:
        """The inputs of the one trajectory of this spec (no axes) from ``theta0``
        ``[L, d]`` (NumPy float64)."""
        if self.axes:
            raise ValueError("a trajectory is one point: its spec has no axes")
        return self.points(np.zeros(1, np.int64))._replace(theta0=np.asarray(theta0)[None])

    def seed_alpha(self, seeds) -> np.ndarray:
        """Per-seed scales alpha_j ``[len(seeds), d]`` of a ``seed`` axis."""
        lo, hi = self.alpha_range
        return np.stack([random_scales(int(s), self.d, lo, hi) for s in np.atleast_1d(seeds)])
