"""Regime boundaries as curves: every critical alpha of every grid point, scan then bisect.

For a balanced start ``w^(l) = alpha`` at L = 2 the l2-SAM regimes are ordered in alpha
(docs/theory/regimes.md#three-regimes): collapse below ``alpha_collapse``, sequential between,
direct from ``alpha_direct`` on. At L >= 3 they need not be: at L = 3 a band that is not direct
(major lost, returned, sequential) lies between two direct ranges
(docs/theory/regimes.md#three-regimes). So :func:`boundary` does not assume one edge:
for every point of a grid of the other axes (``rho``, ``depth``, ``mu``, ``eta``) it

1. scans a log-spaced grid of alpha over ``alpha_range`` (one batch of runs: every grid
   point x every scan alpha),
2. takes every pair of neighbouring scan alphas where an edge's indicator changes as a
   bracket (the indicator of the collapse edge is "the regime is collapse", of the
   direct edge "the regime is direct"; a change either way is an edge),
3. bisects every bracket on ``log alpha`` at once (each round one batch of runs at the
   midpoints of all brackets) to ``rtol_alpha``.

Every batch runs through :func:`samflow.engine.run_points`, whose compiled program is
cached by the static setup and the padded batch size: a second identical call compiles
nothing.

Edges lie between labels of the limit only (docs/theory/regimes.md#labels-of-the-limit): a
flow runner without ``tau_cap`` is run to its fate up to
:attr:`BoundarySearch.cap_factor` times its horizon (``tau_cap`` is written to the
file), a discrete one without ``step_cap`` up to
:attr:`BoundarySearch.step_cap_factor` times its steps (``step_cap``), and a bracket
is a pair of consecutive *decided* scan alphas (neither failed nor unresolved) whose
indicators differ. An edge that moved with the horizon is therefore not
reported: at L = 3 the lower "direct edge" near alpha = 2e-3 of a run stopped at tau = 200
is gone once the runs below it are taken to their blow-up.

What is found, precisely: the edges whose neighbouring decided scan alphas differ; two
edges closer than one scan step (``alpha_range`` and ``scan_points``) are not seen. Each
edge comes with its bracket (``alpha_<kind>_low``, ``alpha_<kind>_high``: the last
decided alphas on each side) and its geometric middle. A bisection midpoint that fails or
is left unresolved (runs very near an edge are slow to decide) stops that bracket's
bisection and nothing else: the edge keeps the bracket it had. Scan runs that fail or are
unresolved hide only the brackets beside them: between two decided scan alphas with
different labels the edge is counted and keeps that bracket, but its place is NaN, with
reason ``solver_failure`` (said first) or ``unresolved``; below the first or above the
last decided scan alpha an edge may be missing, so the edges found are kept but none is
named the only one (``alpha_<kind>`` NaN, with that reason). Each point reports how many
edges it has, all of them in increasing alpha (at most :data:`samflow.schema.MAX_EDGES`),
the edge itself where there is exactly one, and why not (:data:`samflow.schema.WHY_NAN`)
otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from samflow import inputs
from samflow._removed import refuse
from samflow.classification import Classification
from samflow.errors import InputError
from samflow.init import layer_rows
from samflow.runners import MAX_STEPS, Discrete, Flow
from samflow.sweeps.spec import SweepSpec

if TYPE_CHECKING:  # JAX and xarray are imported once the inputs are checked
    import xarray as xr

    from samflow.rules import PerturbationRule

SCAN_PER_DECADE = 8
"""Scan alphas per decade of ``alpha_range`` where ``scan_points`` is not given."""
ALPHA_LIMITS = (1e-100, 1e100)
"""The alphas a scan may reach (``alpha_range`` within): a start ``alpha ** L`` stays a
normal float64 number up to depth 3, and far beyond any regime edge."""
MIN_RTOL_ALPHA = 1e-12
"""The finest ``rtol_alpha``: a few hundred float64 roundings of ``log alpha``."""
MAX_SCAN_POINTS = 100_000
"""The most scan alphas per grid point (``scan_points``): 8 per decade over the widest
``alpha_range`` (:data:`ALPHA_LIMITS`) takes 1601."""
SCAN_RUN_BYTES = 64
"""Host bytes a boundary scan holds per (grid point, scan alpha): its indices, log
alpha, regime codes and the bracket masks."""
FOUND, NO_EDGE, SEVERAL, FAILURE, UNDECIDED = range(5)
"""Codes of ``why_nan_<kind>``, in the order of :data:`samflow.schema.WHY_NAN`."""


@dataclass(frozen=True)
class BoundarySearch:
    """How :func:`boundary` looks for the edges: a scan in alpha, then bisection.

    Attributes:
        alpha_range: ``(low, high)``, the alphas scanned (log-spaced), within
            :data:`ALPHA_LIMITS`.
        scan_points: how many scan alphas (2..:data:`MAX_SCAN_POINTS`); None:
            :data:`SCAN_PER_DECADE` per decade of ``alpha_range``, at least 9. Two edges
            closer than one scan step are not seen.
        rtol_alpha: relative tolerance of each edge found (at least
            :data:`MIN_RTOL_ALPHA`, below 1).
        cap_factor: a flow runner without ``tau_cap`` runs to its fate up to this many
            times its ``tau_max`` (> 1). The default, 1e5, reaches the fates of runs that
            linger near a fixed point (l2-SAM at L = 4 just above the collapse edge decides
            at tau of order 1e5 to 1e6) and of runs from small starts whose first phase is
            gradient descent's (USAM at L = 4 from alpha 1e-4, rho 2.27 leaves it near tau
            1.7e7); an undecided flow costs solver steps, not tau.
        step_cap_factor: a discrete runner without ``step_cap`` runs to its fate up to
            this many times its ``steps`` (> 1; at most ``MAX_STEPS`` steps); each step
            costs the same, so this default is lower (1,000). Only the runs undecided
            at 100 times their steps pay for the rest (:data:`samflow.engine.FIRST_PASS`).

    Raises:
        InputError: a field of the wrong type or out of range, naming it.

    Examples:
        >>> import samflow
        >>> samflow.BoundarySearch().n_scan()  # the default range, 1e-3 to 1e3
        49
        >>> samflow.BoundarySearch(alpha_range=(0.1, 10), scan_points=5).n_scan()
        5
    """

    alpha_range: tuple[float, float] = (1e-3, 1e3)
    scan_points: int | None = None
    rtol_alpha: float = 1e-6
    cap_factor: float = 1e5
    step_cap_factor: float = 1000.0

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        lo, hi = inputs.check_range("alpha-range", self.alpha_range)
        if lo < ALPHA_LIMITS[0] or hi > ALPHA_LIMITS[1]:
            raise InputError(
                f"alpha-range {lo!r},{hi!r}: alphas must lie in [{ALPHA_LIMITS[0]:g}, "
                f"{ALPHA_LIMITS[1]:g}] (a start alpha ** depth beyond that over- or underflows)"
            )
        set_(self, "alpha_range", (lo, hi))
        rtol = inputs.fraction("rtol-alpha", self.rtol_alpha)
        if rtol < MIN_RTOL_ALPHA:
            raise InputError(
                f"rtol-alpha {rtol!r} is below {MIN_RTOL_ALPHA:g}: a bisection on log alpha "
                "in float64 cannot resolve it"
            )
        set_(self, "rtol_alpha", rtol)
        if self.scan_points is not None:
            points = inputs.integer("scan-points", self.scan_points, 2, MAX_SCAN_POINTS)
            set_(self, "scan_points", points)
        for name in ("cap_factor", "step_cap_factor"):
            flag = name.replace("_", "-")
            cap = inputs.positive(flag, getattr(self, name))
            if cap <= 1:
                raise InputError(f"{flag} must exceed 1, got {cap}")
            set_(self, name, cap)

    def n_scan(self) -> int:
        """How many alphas the scan runs.

        Returns:
            ``scan_points``, or :data:`SCAN_PER_DECADE` per decade of ``alpha_range``
            (at least 9).
        """
        if self.scan_points is not None:
            return self.scan_points
        lo, hi = self.alpha_range
        decades = math.log10(hi) - math.log10(lo)
        return max(9, math.ceil(SCAN_PER_DECADE * decades) + 1)


@refuse("collapse_factor")
def boundary(
    method: str | PerturbationRule,
    *,
    depth: int,
    mu: Sequence[float] | None = None,
    data: tuple[np.ndarray, np.ndarray] | None = None,
    axes: Mapping[str, Sequence[float] | np.ndarray | str],
    rho: float | None = None,
    runner: Discrete | Flow,
    mu_set: np.ndarray | None = None,
    search: BoundarySearch = BoundarySearch(),
    dtype: str = "float64",
    classification: Classification = Classification(),
    progress: bool = False,
    history: str | None = None,
) -> xr.Dataset:
    """Every collapse and direct edge in alpha over a grid of the other axes.

    Args:
        method: a name of :data:`samflow.METHODS` or a :class:`samflow.PerturbationRule`.
        depth: layers L, unless an axis varies it.
        mu: one data point ``[d]``, or None with ``data``.
        data: ``(X [n, d], y [n])``, or None with ``mu``.
        axes: as for :func:`samflow.sweep`, but not ``alpha``, ``alpha_j`` or ``seed``
            (alpha is what is solved for; an empty mapping gives one point).
        rho: SAM radius where no axis sets it.
        runner: :class:`samflow.Discrete` or :class:`samflow.Flow` (a flow without
            ``tau_cap`` runs to its fate up to ``search.cap_factor`` times ``tau_max``,
            a discrete runner without ``step_cap`` up to ``search.step_cap_factor`` times
            ``steps``).
        mu_set: the rows ``[k, d]`` a ``mu`` axis indexes.
        search: the scan and the bisection (:class:`samflow.BoundarySearch`): the range
            ``alpha_range`` is scanned at ``scan_points`` log-spaced alphas, and each
            change found is bisected to a relative tolerance ``rtol_alpha``.
        dtype: ``float64`` or ``float32``.
        classification: the settings of regime classification
            (:class:`samflow.Classification`).
        progress: show a bar over the scan and the bisection rounds.
        history: the file's ``history`` line (default: this call).

    Returns:
        For ``<kind>`` in ``collapse``, ``direct``: ``alpha_<kind>(<axes>)`` (the edge
        where exactly one exists in the range, else NaN), ``n_edges_<kind>(<axes>)``,
        ``alpha_<kind>_all(<axes>, edge)`` (every edge in increasing alpha, NaN-filled
        to :data:`samflow.schema.MAX_EDGES`) and ``why_nan_<kind>(<axes>)``
        (:data:`samflow.schema.WHY_NAN`), with attributes saying how they were found.

    Raises:
        InputError: a bad input, named, before anything is compiled (an ``alpha`` axis,
            a ``search`` that is not a :class:`BoundarySearch`, a scan too large for
            memory, ...).

    Examples:
        Where l2-SAM's regime changes in alpha for one point (a coarse, quick search):

        >>> import samflow
        >>> search = samflow.BoundarySearch(alpha_range=(0.1, 10), scan_points=3, rtol_alpha=0.05)
        >>> edges = samflow.boundary("sam-l2", depth=2, mu=[1, 2, 3, 4], rho=1.0, axes={},
        ...                          runner=samflow.Flow(tau_max=20.0), search=search)
        >>> round(float(edges.alpha_collapse), 1), round(float(edges.alpha_direct), 1)
        (0.4, 0.9)
    """
    if not isinstance(axes, Mapping):
        raise InputError(f"axes must be a mapping of axis name to values, got {axes!r}")
    for name in axes:
        if name in ("alpha", "seed") or str(name).startswith("alpha_"):
            raise InputError(f"axis {name}: boundary solves for alpha; vary the other axes")
    if not isinstance(search, BoundarySearch):
        raise InputError(f"search must be samflow.BoundarySearch(...), got {search!r}")
    scan_points = search.n_scan()
    progress = inputs.check_flag("progress", progress)
    if isinstance(runner, Flow) and runner.tau_cap is None:
        runner = replace(runner, tau_cap=search.cap_factor * runner.tau_max)
    if isinstance(runner, Discrete) and runner.step_cap is None:
        runner = replace(
            runner, step_cap=min(MAX_STEPS - 1, round(search.step_cap_factor * runner.steps))
        )
    spec = SweepSpec.from_inputs(
        method,
        depth=depth,
        mu=mu,
        data=data,
        axes=axes,
        rho=rho,
        runner=runner,
        dtype=dtype,
        classification=classification,
        mu_set=mu_set,
    )
    spec.check_size()
    inputs.check_bytes(
        f"a scan of {spec.size} grid points x {scan_points} alphas (--scan-points)",
        spec.size * scan_points * SCAN_RUN_BYTES,
    )
    if history is None:
        history = inputs.python_call(
            "boundary",
            method=spec.rule.name,
            depth=depth,
            mu=mu,
            axes=dict(axes),
            rho=rho,
            runner=runner,
        )
    lo_alpha, hi_alpha = search.alpha_range
    return _solve(spec, lo_alpha, hi_alpha, search.rtol_alpha, scan_points, progress, history)


class _Regimes:
    """The regime (a label of the limit) of grid points at given alphas, in batches of runs."""

    def __init__(self, spec: SweepSpec, bar):
        from samflow import devices

        self.spec, self.bar = spec, bar
        self.setup = replace(spec.setup(), keep=())
        self.n_dev = len(devices.mesh().devices.flat)

    def __call__(self, flat: np.ndarray, log_alpha: np.ndarray) -> np.ndarray:
        """Regime codes of the grid points ``flat`` ``[C]`` at ``exp(log_alpha)`` ``[C]``,
        run in chunks through the sweep's runner (:func:`samflow.sweeps.store.computed`)."""
        from samflow.sweeps.store import chunk_plan, computed

        def points(at: np.ndarray):  # at: positions in flat (a padded chunk)
            out = self.spec.points(flat[at])
            rows = layer_rows(np.broadcast_to(out.depth, (len(at),)), self.spec.n_layers)
            # The base start has alpha = 1 in every real layer: scale those rows.
            scale = np.where(rows, np.exp(log_alpha[at])[:, None, None], 1.0)
            return out._replace(theta0=out.theta0 * scale)

        chunk, blocks = chunk_plan(len(flat), inputs.DEFAULT_CHUNK, self.n_dev)
        regimes = []
        for block, result in zip(
            blocks, computed(self.setup, self.spec, blocks, chunk, points), strict=True
        ):
            regimes.append(result["regime"])
            self.bar.update(len(block))
        return np.concatenate(regimes)


def _solve(spec, lo_alpha, hi_alpha, rtol_alpha, scan_points, progress, history) -> xr.Dataset:
    """Scan, then bisect every edge of every point of the checked ``spec``."""
    from tqdm.auto import tqdm

    from samflow.regimes import COLLAPSE, DIRECT, FAILED, UNRESOLVED
    from samflow.schema import BOUNDARY, KINDS, MAX_EDGES

    P, S = spec.size, scan_points
    scan = np.linspace(math.log(lo_alpha), math.log(hi_alpha), S)
    step = scan[1] - scan[0]
    n_iter = max(1, math.ceil(math.log2(step / math.log1p(rtol_alpha))))
    with tqdm(total=P * S, desc="scan", unit="run", disable=not progress) as bar:
        regimes = _Regimes(spec, bar)
        regime = regimes(np.repeat(np.arange(P), S), np.tile(scan, P)).reshape(P, S)
        ok = (regime != FAILED) & (regime != UNRESOLVED)  # decided: a label of the limit
        # Consecutive decided scan alphas of each point (row-major: increasing alpha),
        # (p, i) -> (p, j): the runs between them (j > i + 1) failed or are unresolved.
        p_ok, i_ok = np.nonzero(ok)
        same_point = p_ok[:-1] == p_ok[1:]
        pair_p, pair_i, pair_j = p_ok[:-1][same_point], i_ok[:-1][same_point], i_ok[1:][same_point]
        gap_failed = np.zeros(len(pair_p), bool)
        if len(pair_p):
            failed_before = np.concatenate(
                [np.zeros((P, 1), int), np.cumsum(regime == FAILED, axis=1)], axis=1
            )
            gap_failed = failed_before[pair_p, pair_j] > failed_before[pair_p, pair_i + 1]
        # An edge per pair whose indicators differ; per edge its kind, point, ends (scan
        # indices), indicator at the low end, and whether runs between its ends are
        # undecided (it is then hidden: its place inside the gap is not known).
        found = []
        for k, code in enumerate((COLLAPSE, DIRECT)):
            ind = regime == code
            e = np.nonzero(ind[pair_p, pair_i] != ind[pair_p, pair_j])[0]
            found.append(
                (np.full(len(e), k), pair_p[e], pair_i[e], pair_j[e], ind[pair_p[e], pair_i[e]],
                 gap_failed[e])
            )  # fmt: skip
        kind, point, low, high, start, hidden_failed = (
            np.concatenate(v) for v in zip(*found, strict=True)
        )
        hidden = high > low + 1
        lo, hi = scan[low], scan[high]
        # Bisection of the brackets between neighbouring scan alphas. A midpoint that fails
        # or is left unresolved ends that bracket's bisection: the edge keeps the bracket
        # of its last decided alphas, whatever the later midpoints would have done.
        active = ~hidden
        if active.any():
            bar.reset(total=n_iter * int(active.sum()))
            bar.set_description("bisect")
            for _ in range(n_iter):
                at = np.nonzero(active)[0]
                if not len(at):
                    break
                mid = 0.5 * (lo[at] + hi[at])
                r = regimes(point[at], mid)
                decided = (r != FAILED) & (r != UNRESOLVED)
                is_kind = np.where(kind[at] == 0, r == COLLAPSE, r == DIRECT)
                below = decided & (is_kind == start[at])
                above = decided & ~below
                lo[at] = np.where(below, mid, lo[at])
                hi[at] = np.where(above, mid, hi[at])
                active[at] = decided
    edge = np.where(hidden, np.nan, np.exp(0.5 * (lo + hi)))
    bracket_lo, bracket_hi = np.exp(lo), np.exp(hi)  # decided alphas, hidden edges too
    # Runs below the first or above the last decided scan alpha of a point may hide edges
    # beyond what is known: the edges found are kept, but none is said to be the only one.
    has_ok = ok.any(axis=1)
    first_ok = np.argmax(ok, axis=1)
    last_ok = S - 1 - np.argmax(ok[:, ::-1], axis=1)
    idx = np.arange(S)
    outside = (idx < first_ok[:, None]) | (idx > last_ok[:, None]) | ~has_ok[:, None]
    end_failed = (outside & (regime == FAILED)).any(axis=1)
    end_open = (outside & (regime == UNRESOLVED)).any(axis=1)

    data = {a.name: a.array() for a in spec.axes}
    data["edge"] = np.arange(MAX_EDGES)
    for k, name in enumerate(KINDS):
        mine = kind == k
        count = np.bincount(point[mine], minlength=P)
        every = np.full((3, P, MAX_EDGES), np.nan)
        filled = np.zeros(P, int)
        # each point's edges come in increasing alpha: slot = rank among them
        for p, e, a, b in zip(
            point[mine], edge[mine], bracket_lo[mine], bracket_hi[mine], strict=True
        ):
            if filled[p] < MAX_EDGES:
                every[:, p, filled[p]] = e, a, b
            filled[p] += 1
        bad = end_failed | (np.bincount(point[mine & hidden & hidden_failed], minlength=P) > 0)
        open_ = end_open | (np.bincount(point[mine & hidden], minlength=P) > 0)
        why = np.select(
            [bad, open_, count == 0, count > 1], [FAILURE, UNDECIDED, NO_EDGE, SEVERAL], FOUND
        )
        data[f"alpha_{name}"] = np.where(why == FOUND, every[0, :, 0], np.nan).reshape(spec.shape)
        data[f"alpha_{name}_all"] = every[0].reshape(*spec.shape, MAX_EDGES)
        data[f"alpha_{name}_low"] = every[1].reshape(*spec.shape, MAX_EDGES)
        data[f"alpha_{name}_high"] = every[2].reshape(*spec.shape, MAX_EDGES)
        data[f"n_edges_{name}"] = count.reshape(spec.shape)
        data[f"why_nan_{name}"] = why.reshape(spec.shape)
    names = list(spec.axis_names)
    rule, runner = spec.rule, spec.runner
    settings = dict(
        method=rule.name,
        mode=runner.mode,
        depth=spec.depth if "depth" not in spec.axis_names else None,
        rho=spec.rho if "rho" not in spec.axis_names else None,
        mu=np.asarray(spec.mu) if spec.mu else None,
        dtype=spec.dtype,
        axes=" ".join(names),
        method_of_solution=(
            f"scan of {S} log-spaced alphas in [{lo_alpha:g}, {hi_alpha:g}], then "
            f"bisection on log alpha of every change, {n_iter} steps (relative tolerance "
            f"{rtol_alpha:g}); the collapse edge is where the regime (a label of the "
            "limit) starts or stops being collapse, the direct edge where it starts or "
            "stops being direct, between consecutive decided scan alphas (not unresolved, "
            "not failed); each edge is the middle of its bracket of decided alphas "
            "(alpha_<kind>_low, alpha_<kind>_high), a bisection stopping at a midpoint "
            "that is not decided; two edges closer than one scan step are not seen"
        ),
        alpha_range=np.asarray([lo_alpha, hi_alpha]),
        rtol_alpha=rtol_alpha,
        scan_points=S,
        bisection_steps=n_iter,
        collapse_factor=spec.classification.collapse_factor,
        flow_formulation=spec.formulation,
        step_path=spec.step_path,
        **runner.attrs(),
    )
    return BOUNDARY.dataset(data, grid=names, dtype=spec.dtype, attrs=settings, history=history)
