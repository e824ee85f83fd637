"""What every file says: each dimension, variable and attribute, declared once (CF-1.10).

Four kinds of file, one :class:`Schema` each: :data:`TRAJECTORY` (``samflow
trajectory``, :func:`samflow.trajectory`), :data:`SWEEP` (``samflow phase``,
:func:`samflow.sweep`, its resumable store and chunks), :data:`BOUNDARY` (``samflow
boundary``, :func:`samflow.boundary`) and :data:`IMAGES` (``samflow cnn``,
:func:`samflow.images.study`). A producer hands its arrays by name to
:meth:`Schema.dataset` (or labels a Dataset it assembled with :meth:`Schema.conform`):
the dims, dtype, ``long_name``, ``units``, CF flag attributes and fill values come from
here, and the global attributes get ``Conventions``, ``history`` and the library
versions. A name that is not declared here is refused, so the in-memory Dataset, the
store and the written file cannot drift apart. :meth:`Schema.check` says how a Dataset
departs from its schema (``tests/test_schema.py`` runs it on a file of every kind).

A variable's dims may start with :data:`GRID`, the file's grid dims: the sweep's axes
(named in the ``axes`` attribute), none in a trajectory, ``point`` in a store chunk.
A dtype of :data:`FLOAT` is the run's precision (the ``dtype`` attribute). Text
attributes are templates filled from the file's attributes: ``{match_loss:g}``,
``{tau_name}`` (rescaled time for one point, the plain time ``eta * steps`` for n > 1
points: docs/theory/flows.md#rescaled-flows), and ``{j}`` in a name declared as ``alpha_{j}``.

Adding a variable is one entry in the table of its kind (:data:`POINT` for the
per-point results trajectories and sweeps share), and a new dim one entry for its
coordinate, for example::

    "handoff": Variable(("handoff",), "int64", "hand-off index k", coord=True),
    "handoff_tau": Variable((GRID, "handoff"), FLOAT, "tau of the k-th hand-off (NaN: none)"),

A new global attribute is one :class:`Attribute` in the ``attrs`` of its kind.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from samflow.model import named_classifies
from samflow.regimes import (
    FLAG_MEANINGS,
    FLAG_VALUES,
    LIMIT_MEANINGS,
    MAX_LEADERS,
    PATH_HOW,
    REASON_MEANINGS,
    UNRESOLVED_HOW,
)
from samflow.version import __version__

if TYPE_CHECKING:
    import xarray as xr

GRID = "..."
"""In a declared dims tuple: the file's grid dims (a sweep's axes; none for a trajectory)."""
FLOAT = "float"
"""The dtype of a variable computed in the run's precision (float32 or float64)."""
KINDS = ("collapse", "direct")
"""The two kinds of edge in a boundary file: where the regime starts or stops being
collapse / direct."""
MAX_EDGES = 4
"""Edges of one kind a boundary file keeps per point in ``alpha_<kind>_all`` (more are
counted only)."""
WHY_NAN = ("found", "no_edge", "several_edges", "solver_failure", "unresolved")
"""Codes 0.. of ``why_nan_<kind>``: why ``alpha_<kind>`` is NaN (0: it is not)."""
CONVENTIONS = "CF-1.10"
LIBRARIES = ("jax", "jaxlib", "diffrax", "equinox", "optax", "numpy", "xarray")


@dataclass(frozen=True)
class Variable:
    """A variable or coordinate: dims, dtype and meaning (its CF attributes).

    Attributes:
        dims: dimension names, :data:`GRID` first for per-grid-point values.
        dtype: a NumPy dtype name, or :data:`FLOAT`; ``"str"`` for text labels.
        long_name: what it is (a template, see the module docstring).
        units: CF units (``"1"``: dimensionless, ``"s"``: seconds).
        when: None if every file of its kind has it, else when it is there.
        attrs: further CF attributes (``flag_values``, ``flag_meanings``, ``comment``,
            ``symbol``).
        coord: whether it is a coordinate (labels a dim) rather than a data variable.
        classified: there only where the model classifies (:func:`classified`), in
            every such file when ``when`` is None.
    """

    dims: tuple[str, ...]
    dtype: str
    long_name: str
    units: str = "1"
    when: str | None = None
    attrs: Mapping[str, object] = field(default_factory=dict)
    coord: bool = False
    classified: bool = False

    @property
    def fill(self) -> float | None:
        """``_FillValue``: NaN for floats (no value: never reached, no such edge, after
        the run stopped); none for integer codes and labels, whose every value means
        something (-1 failed, 0 none, ...)."""
        return np.nan if self.dtype == FLOAT or self.dtype.startswith("float") else None


@dataclass(frozen=True)
class Attribute:
    """A global attribute: what it says, and when it is there (None: always; with
    ``classified``, always where the model classifies, :func:`classified`)."""

    meaning: str
    when: str | None = None
    classified: bool = False


def classified(attrs: Mapping[str, object]) -> bool:
    """Whether a file's model gives regimes: the product network with a margin loss
    (docs/theory/models.md#parametrisations-and-losses); a file says its model in
    ``parametrization`` and ``loss`` where it is not the default."""
    return named_classifies(attrs.get("parametrization", "product"), attrs.get("loss", "logistic"))


def _flags(long_name: str, dims=(), when=None) -> Variable:
    """A 0/1 variable with CF flag attributes."""
    flags = {"flag_values": np.array([0, 1], np.int8), "flag_meanings": "false true"}
    return Variable(dims, "int8", long_name, when=when, attrs=flags)


@dataclass(frozen=True)
class Schema:
    """Every variable (coordinates included) and global attribute of one kind of file.

    Attributes:
        kind: the file's kind (``trajectory``, ``sweep``, ``boundary``, ``images``).
        variables: name -> :class:`Variable`; ``alpha_{j}`` declares ``alpha_1``, ...
        attrs: global attribute name -> :class:`Attribute`.
        optional_dims: dims a variable lacks where the file lacks them (images: ``alpha``
            with one alpha, ``optimizer`` with one method).
    """

    kind: str
    variables: Mapping[str, Variable]
    attrs: Mapping[str, Attribute]
    optional_dims: frozenset[str] = frozenset()

    def variable(self, name: str) -> tuple[Variable, dict]:
        """The declaration of ``name`` and the template fields its name gives (``j``)."""
        key, fields = self._key(name)
        return self.variables[key], fields

    def is_coord(self, name: str) -> bool:
        """Whether ``name`` is a coordinate."""
        return self.variable(name)[0].coord

    def _key(self, name: str) -> tuple[str, dict]:
        if name in self.variables:
            return name, {}
        for key in self.variables:
            if "{j}" in key:
                match = re.fullmatch(re.escape(key).replace(r"\{j\}", r"(\d+)"), name)
                if match:
                    return key, {"j": int(match.group(1))}
        raise ValueError(
            f"{name!r} is not declared in the {self.kind} file schema; declare it in "
            "samflow/schema.py"
        )

    def dims(self, name: str, grid: Sequence[str] = (), present=None) -> tuple[str, ...]:
        """The dims of ``name`` in a file of grid ``grid`` with the dims ``present``
        (None: all of :attr:`optional_dims`)."""
        var, fields = self.variable(name)
        out = []
        for dim in var.dims:
            dim = dim.format_map(fields)  # alpha_{j}: its own dim
            if dim == GRID:
                out.extend(grid)
            elif dim not in self.optional_dims or present is None or dim in present:
                out.append(dim)
        return tuple(out)

    def dataset(
        self,
        data: Mapping[str, object],
        *,
        grid: Sequence[str] = (),
        dtype: str = "float64",
        attrs: Mapping[str, object] | None = None,
        history: str | None = None,
    ) -> xr.Dataset:
        """The Dataset of the arrays ``data`` (name -> values, coordinates included).

        ``grid``: what :data:`GRID` stands for; an optional dim is there when its
        coordinate is in ``data``; ``dtype``: the run's precision; ``attrs``: the
        settings, made global attributes by :meth:`conform`.
        """
        import xarray as xr  # here: a result's first call imports it meanwhile (preload)

        coords, data_vars = {}, {}
        for name, values in data.items():
            entry = (self.dims(name, grid, present=data), values)
            (coords if self.is_coord(name) else data_vars)[name] = entry
        ds = xr.Dataset(data_vars, coords=coords)
        return self.conform(ds, dtype=dtype, attrs=attrs, history=history)

    def conform(
        self,
        ds: xr.Dataset,
        *,
        dtype: str = "float64",
        attrs: Mapping[str, object] | None = None,
        history: str | None = None,
    ) -> xr.Dataset:
        """``ds`` labelled by the schema: each variable in its declared dtype, with its
        CF attributes and fill value; with ``attrs``, the global attributes of
        :func:`file_attrs`. Refuses (ValueError) a variable or attribute not declared."""
        ds = ds.copy()  # shallow: new attribute dicts, the same arrays
        if attrs is not None:
            ds.attrs = file_attrs(history, **attrs)
        for name in ds.attrs:
            if name not in self.attrs:
                raise ValueError(
                    f"attribute {name!r} is not declared in the {self.kind} file schema; "
                    "declare it in samflow/schema.py"
                )
        cast = {}
        for name, values in ds.variables.items():
            var, fields = self.variable(str(name))
            want = _dtype(var, dtype)
            if want is not None and values.dtype != want:
                cast[name] = values.astype(want)
        ds = ds.assign_coords({k: v for k, v in cast.items() if k in ds.coords})
        ds = ds.assign({k: v for k, v in cast.items() if k not in ds.coords})
        for name, values in ds.variables.items():
            var, fields = self.variable(str(name))
            values.attrs = _attrs(var, {**ds.attrs, **fields})
            values.encoding["_FillValue"] = None if self.is_coord(str(name)) else var.fill
        return ds

    def check(self, ds: xr.Dataset) -> list[str]:
        """How ``ds`` departs from the schema, one line per difference ([]: it conforms).

        Checks every variable's dims, dtype and attributes against its declaration, that
        every variable and global attribute is declared, and that every one declared
        for all files of the kind is there.
        """
        grid = ds.attrs.get("axes", "").split()
        problems = []
        for name, da in ds.variables.items():
            try:
                var, fields = self.variable(str(name))
            except ValueError as err:
                problems.append(str(err))
                continue
            dims = self.dims(str(name), grid, present=ds.dims)
            if da.dims != dims:
                problems.append(f"{name}: dims {da.dims}, declared {dims}")
            want = _dtype(var, ds.attrs.get("dtype", "float64"))
            if want is not None and da.dtype != want:
                problems.append(f"{name}: dtype {da.dtype}, declared {want}")
            if want is None and da.dtype.kind not in "OUS":
                problems.append(f"{name}: dtype {da.dtype}, declared text")
            if (name in ds.coords) != self.is_coord(str(name)):
                problems.append(f"{name}: coordinate {name in ds.coords}, declared the opposite")
            for key, value in _attrs(var, {**ds.attrs, **fields}).items():
                if not np.array_equal(np.asarray(da.attrs.get(key)), np.asarray(value)):
                    problems.append(f"{name}: {key} {da.attrs.get(key)!r}, declared {value!r}")
        regimes = classified(ds.attrs)
        for name, var in self.variables.items():
            if var.classified and not regimes:
                if name in ds.variables:
                    problems.append(f"{name}: a regime label, in a file of a model without them")
                continue
            if var.when is None and name not in ds.variables:
                problems.append(f"{name}: declared for every {self.kind} file, missing")
        for name, attr in self.attrs.items():
            if attr.classified and not regimes:
                if name in ds.attrs:
                    problems.append(f"attribute {name}: a regime label, in a file without them")
                continue
            if attr.when is None and name not in ds.attrs:
                problems.append(f"attribute {name}: declared for every {self.kind} file, missing")
        problems.extend(
            f"attribute {name}: not declared" for name in ds.attrs if name not in self.attrs
        )
        return problems


def _dtype(var: Variable, run_dtype: str) -> np.dtype | None:
    if var.dtype == "str":
        return None
    return np.dtype(run_dtype if var.dtype == FLOAT else var.dtype)


def _attrs(var: Variable, context: Mapping[str, object]) -> dict:
    """``var``'s CF attributes, text templates filled from ``context`` (file attributes)."""
    # Time is rescaled for one point and a margin loss (docs/theory/flows.md#rescaled-flows,
    # docs/theory/models.md#parametrisations-and-losses).
    one = int(context.get("n_points", 1)) == 1 and context.get("loss") != "squared"
    fields = {
        "loss_name": context.get("loss", "logistic"),
        "tau_name": "rescaled time" if one else "time eta * steps",
        "tau_symbol": r"$\tau$" if one else "$t$",
        **context,
    }
    out = {"long_name": var.long_name, "units": var.units, **var.attrs}
    return {k: v.format_map(fields) if isinstance(v, str) else v for k, v in out.items()}


def library_versions() -> dict[str, str]:
    """Versions of samflow and of the libraries its numbers come from."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"samflow_version": __version__}
    for name in LIBRARIES:
        try:
            out[f"{name}_version"] = version(name)
        except PackageNotFoundError:
            out[f"{name}_version"] = "not installed"
    return out


def file_attrs(history: str | None = None, **settings) -> dict:
    """The global attributes of a file: CF ``Conventions``, ``history`` (when, and by
    which command line or Python call it was made), the library versions, then
    ``settings`` (None values dropped, booleans as 0/1: netCDF has no booleans)."""
    from datetime import UTC, datetime

    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    out = {"Conventions": CONVENTIONS, "history": f"{stamp}: {history or 'samflow'}"}
    out.update(library_versions())
    for key, value in settings.items():
        if value is not None:
            out[key] = int(value) if isinstance(value, bool) else value
    return out


COMPLEVEL = 1
"""zlib level of the files (with the byte shuffle filter, which groups the bytes of equal
significance of every value). Measured on a 65536-point sweep's file (125 MB of arrays,
float32, 2026-12-04): level 4 wrote in 1.30 s to 36.4 MB, level 1 in 0.99 s to 38.0 MB,
and without shuffle 2.2 s and 1.6 s to 56 MB; without compression 0.1 s to 125 MB."""


def encoding(ds: xr.Dataset, compress: bool = True) -> dict[str, dict]:
    """netCDF-4 encoding of ``ds``: zlib (:data:`COMPLEVEL`, shuffled) for numeric arrays
    unless not ``compress``, the fill values set by :meth:`Schema.conform` (none on
    coordinates: CF wants them complete)."""
    out = {}
    for name, var in ds.variables.items():
        enc = {}
        if compress and var.dtype.kind in "biuf" and var.ndim > 0:
            enc.update(zlib=True, complevel=COMPLEVEL, shuffle=True)
        if "_FillValue" in var.encoding or name in ds.coords:
            enc["_FillValue"] = var.encoding.get("_FillValue")
        out[name] = enc
    return out


def describe(ds: xr.Dataset) -> xr.Dataset:
    """Give a derived Dataset (a figure's data, built from files of the kinds above
    plus figure-specific variables) ``long_name`` and ``units`` wherever missing: a
    variable without units is dimensionless (``"1"``), one without a name is named
    after itself. In place."""
    for name in ds.variables:
        ds[name].attrs.setdefault("long_name", str(name).replace("_", " "))
        ds[name].attrs.setdefault("units", "1")
    return ds


# ---- Attributes -------------------------------------------------------------------

COMMON_ATTRS = {
    "Conventions": Attribute("the CF conventions followed"),
    "history": Attribute("when, and by which command line or Python call, it was made"),
    "samflow_version": Attribute("version of samflow"),
    **{f"{lib}_version": Attribute(f"version of {lib}") for lib in LIBRARIES},
}
DISCRETE, FLOW = "discrete runs", "flows"
RUN_ATTRS = {
    **COMMON_ATTRS,
    "method": Attribute("the perturbation rule (gd, sam-l2, sam-linf, usam or yours)"),
    "mode": Attribute("the runner: discrete or flow"),
    "dtype": Attribute("the precision of the run (float32 or float64)"),
    "depth": Attribute("number of layers L", when="not varied"),
    "rho": Attribute("SAM radius rho", when="not varied"),
    "mu": Attribute("the data point x = mu (y = +1)", when="one data point"),
    "n_points": Attribute("number of data points n", when="not a boundary"),
    "collapse_factor": Attribute(
        "records with ||beta||_1 below this times its start are drawn as collapsed "
        "(figures, validity map); no label uses it"
    ),
    "eta": Attribute("step size eta", when=DISCRETE),
    "steps": Attribute("number of steps", when=DISCRETE),
    "record_every": Attribute("steps between records", when=DISCRETE),
    "log_records": Attribute("number of log-spaced records", when=DISCRETE),
    "step_path": Attribute(
        "the discrete step that ran: balanced (every layer equal: one vector u per point, "
        "samflow.balanced) or general (every layer); the same numbers up to rounding",
        when=DISCRETE,
    ),
    "batch": Attribute("minibatch size (examples per step)", when="given"),
    "m": Attribute("m-sharpness: examples per perturbation group", when="given"),
    "label_noise": Attribute("label noise delta (y + delta * random sign)", when="given"),
    "seed": Attribute("seed of the stochastic steps' draws", when="stochastic steps, no seed axis"),
    "tau_max": Attribute("horizon in tau", when=FLOW),
    "n_save": Attribute("number of saved times", when=FLOW),
    "tau_min": Attribute("first positive saved time", when=FLOW),
    "solver": Attribute("the diffrax solver", when=FLOW),
    "rtol": Attribute("relative tolerance of the step-size controller", when=FLOW),
    "atol": Attribute("absolute tolerance of the step-size controller", when=FLOW),
    "max_steps": Attribute("cap on solver steps", when=FLOW),
    "tau_cap": Attribute(
        "runs not decided at tau_max went on, unrecorded, to their fate or to this tau",
        when="given",
    ),
    "step_cap": Attribute(
        "runs not decided at the last step went on, unrecorded, to their fate or to this step",
        when="given",
    ),
    "flow_formulation": Attribute("the flow's state: log, linf or linear", when=FLOW),
    "parametrization": Attribute(
        "the predictor: u2-v2 (beta = u^2 - v^2) or uv (beta = u v)",
        when="not the product network",
    ),
    "loss": Attribute("the loss: exponential or squared", when="not the logistic loss"),
    "active_threshold": Attribute("n_active counts |beta_j| above this", when="summaries"),
    "beta_star": Attribute("the ground truth beta* of test_error", when="beta_star given"),
}
SUMMARIES = "summaries"

# ---- The per-point results a trajectory and a sweep share -------------------------

SWEEP_ONLY = ("beta_norm", "n_handoffs", "plateau_end_tau", "final_direction", "takeover_tau")
"""Per-point summaries a sweep keeps and a trajectory does not (its records hold them)."""
OUTCOMES = (
    "first_amplified",
    "failed_step",
    "stop_tau",
    "collapsed_to_zero",
    "overflow_guard_hit",
    "solver_failed",
    "blowup_tau",
    "underflow_at_start",
)
"""Scalar outcomes: variables of a sweep, attributes of a trajectory."""

POINT = {
    "time": Variable(("time",), "int64", "record index", coord=True),
    "coord": Variable(("coord",), "int64", "coordinate index j (1-based)", coord=True),
    "layer": Variable(("layer",), "int64", "layer index l (1-based)", when="theta", coord=True),
    "step": Variable(("time",), "int64", "step index of each record", when=DISCRETE, coord=True),
    "tau": Variable(
        ("time",),
        "float64",
        "{tau_name}",
        when=FLOW,
        attrs={"symbol": "{tau_symbol}"},
        coord=True,
    ),
    "regime": Variable(
        (GRID,),
        "int8",
        "regime of the trajectory",
        classified=True,
        attrs={
            "flag_values": np.array(FLAG_VALUES, np.int8),
            "flag_meanings": FLAG_MEANINGS,
            "unresolved_means": UNRESOLVED_HOW,
            "path_codes": PATH_HOW,
        },
    ),
    "unresolved_reason": Variable(
        (GRID,),
        "int8",
        "how an unresolved run stood where it stopped (0: decided)",
        classified=True,
        attrs={
            "flag_values": np.arange(len(REASON_MEANINGS.split()), dtype=np.int8),
            "flag_meanings": REASON_MEANINGS,
        },
    ),
    "stop_leader": Variable(
        (GRID,), "int32", "leading coordinate where the run stopped (0: none; not a limit)"
    ),
    "limit_coord": Variable(
        (GRID,),
        "int32",
        "coordinate leading in the limit, where the run's fate is decided (else a code)",
        classified=True,
        attrs={"comment": LIMIT_MEANINGS},
    ),
    "first_amplified": Variable((GRID,), "int32", "first leader of the leader path (0: none)"),
    "n_handoffs": Variable(
        (GRID,), "int32", "number of changes of the leading coordinate (n_leaders - 1)"
    ),
    "handoff": Variable(("handoff",), "int64", "index k of a lead in the leader path", coord=True),
    "leader_path": Variable(
        (GRID, "handoff"),
        "int32",
        "leading coordinates in the order they took the lead (0: unused)",
        attrs={
            "comment": "found between the steps of the run, whatever the records "
            f"(docs/theory/regimes.md#definitions); more than {MAX_LEADERS} leads keep the first "
            f"{MAX_LEADERS - 1} and the last"
        },
    ),
    "handoff_tau": Variable(
        (GRID, "handoff"), FLOAT, "tau at which each leader of leader_path took the lead"
    ),
    "handoff_step": Variable(
        (GRID, "handoff"),
        "int64",
        "first step each leader of leader_path led at (-1: unused)",
        when=DISCRETE,
    ),
    "n_leaders": Variable((GRID,), "int32", "number of leads in the leader path"),
    "reached": _flags(
        "the record holds a state of the run (0: after the solve stopped or failed; beta, "
        "loss and theta are NaN there)",
        (GRID, "time"),
    ),
    "underflow_at_start": _flags(
        "beta(0) underflowed to 0 in the dtype: some coordinate has nonzero layers but "
        "beta_j(0) = 0 (the run is failed; use float64)",
        (GRID,),
    ),
    "plateau_end_tau": Variable(
        (GRID,), FLOAT, "first tau with loss <= plateau_fraction * loss(0) (NaN: never)"
    ),
    "failed_step": Variable(
        (GRID,), "int64", "step of the first non-finite record (-1: none)", when=DISCRETE
    ),
    "rescaled_tau": Variable(
        (GRID, "time"),
        FLOAT,
        "{tau_name} of each record",
        when=DISCRETE,
        attrs={"symbol": "{tau_symbol}"},
    ),
    "stop_tau": Variable(
        (GRID,),
        FLOAT,
        "tau where the solve stopped (the horizon, a solver failure, or an event: where "
        "log max|beta| crossed its edge)",
        when=FLOW,
    ),
    "blowup_tau": Variable((GRID,), FLOAT, "finite-time blow-up tau (NaN: none)", when=FLOW),
    "collapsed_to_zero": _flags(
        "the solve reached beta = 0 (lower norm event)", (GRID,), when=FLOW
    ),
    "overflow_guard_hit": _flags(
        "the solve stopped at the overflow guard (L <= 2)", (GRID,), when=FLOW
    ),
    "solver_failed": _flags(
        "the solver failed (max_steps, a non-finite state, or a record whose beta or loss "
        "is not finite; stop_tau is where)",
        (GRID,),
        when=FLOW,
    ),
    "dominant": Variable(
        (GRID, "time"), "int32", "dominant coordinate D = argmax_j |beta_j| (0: none)"
    ),
    "beta_norm": Variable((GRID, "time"), FLOAT, "||beta||_1"),
    "loss": Variable((GRID, "time"), FLOAT, "{loss_name} loss"),
    "l1_norm": Variable((GRID, "time"), FLOAT, "||beta||_1", when=SUMMARIES),
    "l2_norm": Variable((GRID, "time"), FLOAT, "||beta||_2", when=SUMMARIES),
    "n_active": Variable(
        (GRID, "time"),
        "int32",
        "number of coordinates with |beta_j| > active_threshold",
        when=SUMMARIES,
    ),
    "test_error": Variable(
        (GRID, "time"),
        FLOAT,
        "||beta - beta*||_2^2 (the population squared error for x ~ N(0, I))",
        when="beta_star given",
    ),
    "sharpness": Variable(
        (GRID, "time"),
        FLOAT,
        "largest eigenvalue of the Hessian of the training loss in theta",
        when="sharpness",
        attrs={
            "comment": "of the L d x L d Hessian, to the dtype's precision "
            "(docs/theory/models.md#summaries-and-sharpness)"
        },
    ),
    "hessian_trace": Variable(
        (GRID, "time"),
        FLOAT,
        "trace of the Hessian of the training loss in theta",
        when="sharpness",
    ),
    "final_direction": Variable((GRID, "coord"), FLOAT, "beta / ||beta||_1 at the horizon"),
    "takeover_tau": Variable(
        (GRID, "coord"), FLOAT, "first tau at which coordinate j took the lead (NaN: never)"
    ),
    "beta": Variable((GRID, "time", "coord"), FLOAT, "predictor beta", when="save_trajectories"),
    "theta": Variable((GRID, "time", "layer", "coord"), FLOAT, "parameters theta", when="theta"),
    "theta_final": Variable(
        (GRID, "layer", "coord"),
        FLOAT,
        "parameters theta after the last step (discrete) or at the last record reached (flows)",
        when="theta",
    ),
}
"""Per grid point (:data:`GRID`: none in a trajectory): every name the point runner
(:func:`samflow.engine.run_points`) returns, and the coordinates of its records. A new
entry is a variable of sweeps and trajectories alike (but :data:`SWEEP_ONLY`)."""

# ---- The four kinds of file -------------------------------------------------------

TRAJECTORY = Schema(
    kind="trajectory",
    variables={
        **{n: v for n, v in POINT.items() if n not in SWEEP_ONLY + OUTCOMES + ("rescaled_tau",)},
        # a trajectory always has these (its discrete tau is the run's rescaled_tau)
        **{n: replace(POINT[n], when=None) for n in ("layer", "tau", "beta", "theta_final")},
        "theta": replace(POINT["theta"], when="save_theta"),
        "theta0": Variable(("layer", "coord"), FLOAT, "parameters theta at tau = 0"),
    },
    attrs={
        **RUN_ATTRS,
        "regime_meaning": Attribute("the regime's name (flag_meanings of regime)", classified=True),
        **{n: Attribute(POINT[n].long_name, when=POINT[n].when) for n in OUTCOMES},
        "blowup_tau": Attribute(POINT["blowup_tau"].long_name, when="a flow that blew up"),
        "blowup": Attribute("the flow ended at a finite-time blow-up (0/1)", when=FLOW),
        "alpha": Attribute("initialisation scale alpha (w^(l) = alpha)", when="given"),
        "alpha_per_coord": Attribute("initialisation scale of each coordinate", when="given"),
        "theta0_abs_range": Attribute("smallest and largest |theta0|", when="theta0 given"),
    },
)

AXIS = "an axis"
AXES = {
    name: Variable((name,), dtype, long_name, when=AXIS, coord=True)
    for name, dtype, long_name in (
        ("alpha", "float64", "initialisation scale alpha (w^(l) = alpha)"),
        ("alpha_{j}", "float64", "initialisation scale of coordinate {j}"),
        ("rho", "float64", "SAM radius rho"),
        ("depth", "int64", "number of layers L"),
        ("eta", "float64", "step size eta"),
        ("mu", "int64", "row of the set of mu vectors"),
        ("seed", "int64", "seed of the random initialisation (and of stochastic steps)"),
        ("noise_seed", "int64", "seed of the stochastic steps"),
    )
}
"""Grid axes (:mod:`samflow.sweeps.axes`): the dimension coordinates of sweeps and
boundaries, there when varied."""

SWEEP = Schema(
    kind="sweep",
    variables={
        **POINT,
        **AXES,
        "point": Variable(
            ("point",), "int64", "grid point (flat C-order index)", when="chunks", coord=True
        ),
        "mu_values": Variable(("mu", "coord"), "float64", "mu vector", when="a mu axis"),
        "seed_alpha": Variable(
            ("seed", "coord"),
            "float64",
            "alpha_j drawn for each seed (log-uniform in alpha_range)",
            when="a seed axis",
        ),
    },
    attrs={
        **RUN_ATTRS,
        "axes": Attribute("the grid's axes, in the order of its dims"),
        "alpha": Attribute("initialisation scale alpha", when="no alpha or seed axis"),
        "alpha_range": Attribute("alpha_j log-uniform in this range", when="a seed axis"),
        "plateau_fraction": Attribute("plateau ends at this fraction of the initial loss"),
        "sweep_key": Attribute("hash of the sweep's definition (resuming checks it)"),
    },
)


def _edge_variables(kind: str, where: str) -> dict[str, Variable]:
    """What a boundary file says of the edges of one kind (collapse or direct)."""
    return {
        f"alpha_{kind}": Variable(
            (GRID,),
            FLOAT,
            f"critical alpha of the {kind} edge, {where}",
            attrs={
                "comment": f"NaN unless exactly one such edge lies in alpha_range: why_nan_{kind}"
            },
        ),
        f"alpha_{kind}_all": Variable(
            (GRID, "edge"),
            FLOAT,
            f"every {kind} edge inside alpha_range, in increasing alpha, the geometric "
            "middle of its bracket (NaN: none, or hidden by undecided runs)",
            attrs={"comment": f"more than {MAX_EDGES} edges keep the first {MAX_EDGES}"},
        ),
        f"alpha_{kind}_low": Variable(
            (GRID, "edge"),
            FLOAT,
            f"the largest decided alpha below each {kind} edge (its bracket's low end)",
            attrs={"comment": f"the edge lies between this and alpha_{kind}_high"},
        ),
        f"alpha_{kind}_high": Variable(
            (GRID, "edge"),
            FLOAT,
            f"the smallest decided alpha above each {kind} edge (its bracket's high end)",
            attrs={
                "comment": f"where runs between the two decided scan alphas of the bracket "
                f"failed or are unresolved, alpha_{kind}_all is NaN: an edge lies inside, "
                "its place is not known"
            },
        ),
        f"n_edges_{kind}": Variable(
            (GRID,),
            "int32",
            f"number of {kind} edges found inside alpha_range",
            attrs={
                "comment": "hidden edges counted; a lower bound where why_nan is "
                "solver_failure or unresolved"
            },
        ),
        f"why_nan_{kind}": Variable(
            (GRID,),
            "int8",
            f"why alpha_{kind} is NaN (found: it is not)",
            attrs={
                "flag_values": np.arange(len(WHY_NAN), dtype=np.int8),
                "flag_meanings": " ".join(WHY_NAN),
                "comment": "solver_failure / unresolved: a scan run failed / was not "
                "decided between two decided scan alphas with different labels (the edge "
                "there is hidden) or beyond the decided ones (an edge may be missing); "
                "a bisection midpoint that fails or is undecided only stops that bisection",
            },
        ),
    }


BOUNDARY = Schema(
    kind="boundary",
    variables={
        # alpha is what a boundary solves for, not an axis
        **{k: v for k, v in AXES.items() if k not in ("alpha", "seed")},
        "edge": Variable(("edge",), "int64", "index k of an edge, in increasing alpha", coord=True),
        **_edge_variables(
            "collapse", "where the label of the limit starts or stops being collapse"
        ),
        **_edge_variables("direct", "where the label of the limit starts or stops being direct"),
    },
    attrs={
        **{k: v for k, v in RUN_ATTRS.items() if k != "n_points"},
        "axes": Attribute("the grid's axes, in the order of its dims"),
        "method_of_solution": Attribute("how the edges were found"),
        "alpha_range": Attribute("the bracket of alpha searched"),
        "rtol_alpha": Attribute("relative tolerance of each edge"),
        "scan_points": Attribute("log-spaced alphas scanned for changes of regime"),
        "bisection_steps": Attribute("bisection steps on log alpha"),
    },
)


def _images_variables() -> dict[str, Variable]:
    run = ("alpha", "optimizer")  # optional dims: several alphas, several methods
    history = {
        "loss": "logistic loss on the training set",
        "train_accuracy": "fraction of training images classified right",
        "test_accuracy": "fraction of test images classified right",
        "background_share": "mean share of positive Grad-CAM mass on background test pixels",
        "saliency_background_share": (
            "mean share of input-gradient saliency mass on background test pixels"
        ),
        "top_mass": "mean share of Grad-CAM mass on the top 10% of pixels of each map",
        "zero_maps": "test images whose Grad-CAM map is zero everywhere",
        "occlusion_background": (
            "mean drop of y * logit when the background pixels are set to the training mean"
        ),
        "occlusion_stroke": (
            "mean drop of y * logit when the stroke pixels are set to the training mean"
        ),
        "dark_share": "mean share of positive Grad-CAM mass on dark test pixels",
    }
    out = {}
    for name, meaning in history.items():
        when = "border background" if name == "dark_share" else None
        over = name if name in ("loss", "train_accuracy") else f"{name}_history"
        out[over] = Variable((*run, "seed", "record"), "float32", meaning, when=when)
        if over != name:  # its value at the end of training too
            out[name] = Variable(
                (*run, "seed"), "float32", f"{meaning}, at the end of training", when=when
            )
    out["learned"] = _flags(
        "final test accuracy >= {min_accuracy:g} (0: left out of the paired differences)",
        (*run, "seed"),
        when="min_accuracy given",
    )
    out["background_share_at_loss"] = Variable(
        (*run, "seed"),
        "float32",
        "mean Grad-CAM background share at the first record with training loss "
        "<= {match_loss:g} (NaN: never)",
    )
    out["step_at_loss"] = Variable(
        (*run, "seed"),
        "float64",
        "step of the first record with training loss <= {match_loss:g} (NaN: never)",
    )
    out["seconds"] = Variable(run, "float64", "wall-clock time, compilation included", "s")
    for name, what in (("gradcam", "Grad-CAM map"), ("saliency", "input-gradient saliency")):
        out[f"example_{name}"] = Variable(
            (*run, "example", "row", "col"),
            "float32",
            f"{what} of the first seed at the end of training",
        )
    out["uniform_background_share"] = Variable(
        (), "float64", "background share of a uniform map (mean background area)"
    )
    out["uniform_dark_share"] = Variable(
        (), "float64", "dark share of a uniform map (mean dark area)", when="border background"
    )
    out["example_image"] = Variable(
        ("example", "row", "col", "channel"),
        "float32",
        "test image pixels before normalisation",
        attrs={"comment": "0 = black, 1 = white"},
    )
    out["example_label"] = Variable(
        ("example",), "float32", "label: -1 the first class, +1 the second class"
    )
    stats = {
        "mean": ("float64", "mean over seeds of the paired difference"),
        "ci_low": ("float64", "lower end of the 95% t interval of the mean paired difference"),
        "ci_high": ("float64", "upper end of the 95% t interval of the mean paired difference"),
        "p_value": ("float64", "two-sided paired t test p value"),
        "n": ("int64", "number of seed pairs"),
    }
    for var in CONTRASTS:
        for stat, (dtype, meaning) in stats.items():
            out[f"{var}_diff_{stat}"] = Variable(
                ("alpha", "contrast"),
                dtype,
                f"{var}: {meaning} (method - gd, same seed)",
                when="gd and another method",
            )
    for name, dims, dtype, long_name, when in (
        ("alpha", ("alpha",), "float64", "initialisation scale", "several alphas"),
        ("optimizer", ("optimizer",), "str", "method", "several methods"),
        ("contrast", ("contrast",), "str", "paired difference: method - gd", "gd and another"),
        ("seed", ("seed",), "int64", "seed of the initialisation and minibatch order", None),
        ("record", ("record",), "int64", "record index", None),
        ("step", ("record",), "int64", "training step of the record", None),
    ):
        out[name] = Variable(dims, dtype, long_name, when=when, coord=True)
    return out


CONTRASTS = (
    "background_share",
    "background_share_at_loss",
    "saliency_background_share",
    "top_mass",
    "dark_share",
)
"""The variables whose paired SAM - GD differences an image file holds (``dark_share``
with a ``border`` background only)."""

IMAGES = Schema(
    kind="images",
    variables=_images_variables(),
    attrs={
        **COMMON_ATTRS,
        "title": Attribute("what the file holds"),
        "method": Attribute("the methods, comma-separated"),
        "dataset": Attribute("the image data set"),
        "classes": Attribute("the two classes (or groups of classes), -1 then +1"),
        "class_names": Attribute("their names"),
        "split_note": Attribute("which splits were used"),
        "source": Attribute("where the data were read"),
        "model": Attribute("cnn or diagonal"),
        "alpha": Attribute("initialisation scale", when="one alpha"),
        "rho": Attribute("SAM radius rho"),
        "eta": Attribute("step size eta"),
        "base_optimizer": Attribute("the optax optimiser SAM wraps"),
        "steps": Attribute("training steps"),
        "batch": Attribute("minibatch size, or full"),
        "n_train": Attribute("training images"),
        "n_test": Attribute("test images"),
        "normalise": Attribute("inputs standardised by the training mean and std (0/1)"),
        "background_threshold": Attribute(
            "pixels darker than this are background (dark) or dark (beside border)"
        ),
        "background": Attribute(
            "background mask: border (outside a centred box); absent: dark", when="border"
        ),
        "background_box": Attribute(
            "side of the centred object box, a fraction of the image side", when="border"
        ),
        "min_accuracy": Attribute(
            "final test accuracy below which a run did not learn (its pairs left out)",
            when="min_accuracy given",
        ),
        "attribution_class": Attribute("the class each map explains"),
        "match_loss": Attribute("training loss at which shares are compared"),
        "channels": Attribute("channels of the conv layers", when="cnn"),
        "conv": Attribute("how the convolutions are computed", when="cnn"),
    },
    optional_dims=frozenset({"alpha", "optimizer"}),
)

SCHEMAS = {s.kind: s for s in (TRAJECTORY, SWEEP, BOUNDARY, IMAGES)}
