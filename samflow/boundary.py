"""Regime boundaries as curves: the critical alpha of every grid point, by bisection.

For a balanced start ``w^(l) = alpha`` the l2-SAM regimes are ordered in alpha
(docs/theory.md §5): collapse below ``alpha_collapse``, sequential between, direct
from ``alpha_direct`` on. :func:`boundary` finds both edges for every point of a grid
of the other axes (``rho``, ``depth``, ``mu``, ``eta``) by bisection on ``log alpha``:
every bisection step runs the flows (or discrete runs) at the midpoints of all
brackets, both edges of every grid point at once, and the whole bisection is one
compiled program (a ``lax.fori_loop`` around the point runner of
:mod:`samflow.engine`).

What is found, precisely: ``alpha_collapse`` is where the classification at the
runner's horizon changes from ``collapse`` (below) to anything else (above);
``alpha_direct`` where it changes from anything else (below) to ``direct`` (above).
The bisection assumes one change in the bracket ``alpha_range``: where the ends do
not straddle a change (e.g. no collapse anywhere in the range), or a run fails at a
midpoint, the edge is NaN. That the regimes are ordered in alpha is checked against a
dense map in ``tests/test_boundary.py``, not assumed silently: at the end, the
classification just below and just above each edge is recomputed, and an edge whose
two sides do not differ as they should is NaN as well.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from samflow import inputs
from samflow.errors import InputError
from samflow.runners import Discrete, Flow
from samflow.sweeps.spec import SweepSpec

if TYPE_CHECKING:  # JAX and xarray are imported once the inputs are checked
    import jax
    import xarray as xr

    from samflow.engine import Points

ALPHA_RANGE = (1e-3, 1e3)
"""The default bracket of the bisection on alpha."""
EDGES = ("alpha_collapse", "alpha_direct")
"""The two edges; edge ``k`` is 'below' at alpha when ``_below(k, regime)``."""


def _below(kind: jax.Array, regime: jax.Array) -> jax.Array:
    """Whether ``alpha`` lies below the edge of ``kind`` (0 collapse, 1 direct)."""
    import jax.numpy as jnp

    from samflow.regimes import COLLAPSE, DIRECT

    return jnp.where(kind == 0, regime == COLLAPSE, regime != DIRECT)


def _bisection(setup, n_iter: int):
    import jax
    import jax.numpy as jnp
    from jax import lax

    from samflow.engine import traced_program
    from samflow.regimes import FAILED

    run = traced_program(setup)

    def at(points: Points, rows, log_alpha, times):
        # The base start has alpha = 1 in every real layer: scale those rows.
        scale = jnp.where(rows, jnp.exp(log_alpha)[:, None, None], 1.0)
        return run(points._replace(theta0=points.theta0 * scale), times)["regime"]

    def bisect(points, rows, kind, lo, hi, times):
        """``lo``, ``hi`` ``[C]`` log alpha brackets; returns the final bracket, whether
        the ends straddled a change, and whether any run failed."""
        below_lo, below_hi = (
            _below(kind, at(points, rows, lo, times)),
            _below(kind, at(points, rows, hi, times)),
        )
        straddles = below_lo & ~below_hi

        def body(_, carry):
            lo, hi, failed = carry
            mid = 0.5 * (lo + hi)
            regime = at(points, rows, mid, times)
            failed = failed | (regime == FAILED)
            below = _below(kind, regime)
            return jnp.where(below, mid, lo), jnp.where(below, hi, mid), failed

        lo, hi, failed = lax.fori_loop(0, n_iter, body, (lo, hi, jnp.zeros_like(straddles)))
        # The two sides of the final bracket, recomputed: they must differ as an edge does.
        sides = _below(kind, at(points, rows, lo, times)) & ~_below(
            kind, at(points, rows, hi, times)
        )
        return lo, hi, straddles & sides, failed

    return jax.jit(bisect)


def boundary(
    method,
    *,
    depth: int,
    mu: Sequence[float] | None = None,
    data=None,
    axes: Mapping[str, Sequence[float] | np.ndarray | str],
    rho: float | None = None,
    runner: Discrete | Flow,
    mu_set: np.ndarray | None = None,
    alpha_range: tuple[float, float] = ALPHA_RANGE,
    rtol_alpha: float = 1e-6,
    dtype: str = "float64",
    collapse_factor: float = inputs.COLLAPSE_FACTOR,
    history: str | None = None,
) -> xr.Dataset:
    """The collapse/sequential and sequential/direct critical alpha over a grid.

    ``axes`` as for :func:`samflow.sweep`, but not ``alpha``, ``alpha_j`` or ``seed``
    (alpha is what is solved for; an empty mapping gives one point); a ``mu`` axis
    indexes the rows of ``mu_set`` ``[k, d]``, as in :func:`samflow.sweep`. Each edge is
    found to a relative tolerance ``rtol_alpha`` inside ``alpha_range``. Returns
    ``alpha_collapse(<axes>)`` and ``alpha_direct(<axes>)`` (NaN where the edge does not
    exist in the range, or a run failed), with attributes saying how they were found.
    """
    if not isinstance(axes, Mapping):
        raise InputError(f"axes must be a mapping of axis name to values, got {axes!r}")
    for name in axes:
        if name in ("alpha", "seed") or str(name).startswith("alpha_"):
            raise InputError(f"axis {name}: boundary solves for alpha; vary the other axes")
    lo_alpha, hi_alpha = inputs.check_range("alpha-range", alpha_range)
    rtol_alpha = inputs.fraction("rtol-alpha", rtol_alpha)
    spec = SweepSpec.from_inputs(
        method,
        depth=depth,
        mu=mu,
        data=data,
        axes=axes,
        rho=rho,
        runner=runner,
        dtype=dtype,
        collapse_factor=collapse_factor,
        mu_set=mu_set,
    )
    # Both edges of every grid point are one batch of 2 x the grid.
    spec.check_size(inputs.MEMORY_SHARE * inputs.memory_bytes() / 2)
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
    return _solve(spec, lo_alpha, hi_alpha, rtol_alpha, history)


def _solve(spec, lo_alpha, hi_alpha, rtol_alpha, history) -> xr.Dataset:
    """Bisect both edges of every point of the checked ``spec``."""
    import jax.numpy as jnp

    from samflow import devices
    from samflow.engine import place
    from samflow.init import layer_rows
    from samflow.precision import precision
    from samflow.schema import BOUNDARY
    from samflow.sweeps.store import chunk_plan

    rule, runner, depth, dtype = spec.rule, spec.runner, spec.depth, spec.dtype
    collapse_factor = spec.collapse_factor
    n_iter = max(1, math.ceil(math.log2(math.log(hi_alpha / lo_alpha) / math.log1p(rtol_alpha))))
    P = spec.size
    # Both edges of every grid point in one batch: points 0..P-1 collapse, P..2P-1 direct.
    C, _ = chunk_plan(2 * P, 2 * P, len(devices.mesh().devices.flat))
    flat = np.arange(C) % P
    kind = (np.arange(C) >= P).astype(np.int32)
    setup = replace(spec.setup(), keep=())
    points = spec.points(flat)
    rows = layer_rows(np.broadcast_to(points.depth, (C,)), spec.n_layers)
    fn = _bisection(setup, n_iter)
    with precision(dtype) as dt:
        args, times = place(setup, points, spec.times())
        lo = jnp.full(C, math.log(lo_alpha), dt)
        hi = jnp.full(C, math.log(hi_alpha), dt)
        out = fn(args, jnp.asarray(rows), jnp.asarray(kind), lo, hi, times)
        lo, hi, ok, failed = (np.asarray(v) for v in devices.gather(out))
    edge = np.where(ok & ~failed, np.exp(0.5 * (lo + hi)), np.nan)
    data = {a.name: a.array() for a in spec.axes}
    for k, name in enumerate(EDGES):
        data[name] = edge[k * P : (k + 1) * P].reshape(spec.shape)
    names = list(spec.axis_names)
    settings = dict(
        method=rule.name,
        mode=runner.mode,
        depth=depth if "depth" not in spec.axis_names else None,
        rho=spec.rho if "rho" not in spec.axis_names else None,
        mu=np.asarray(spec.mu) if spec.mu else None,
        dtype=dtype,
        axes=" ".join(names),
        method_of_solution=(
            f"bisection on log alpha in [{lo_alpha:g}, {hi_alpha:g}], {n_iter} steps "
            f"(relative tolerance {rtol_alpha:g}), both edges of every grid point in one "
            "compiled program; an edge is where the regime at the horizon changes from "
            "collapse (below) / from not direct to direct (above); NaN where the ends of "
            "the range do not straddle it, a run failed, or the two sides of the final "
            "bracket do not differ as an edge does"
        ),
        alpha_range=np.asarray([lo_alpha, hi_alpha]),
        rtol_alpha=rtol_alpha,
        bisection_steps=n_iter,
        collapse_factor=collapse_factor,
        flow_formulation=spec.formulation,
        **runner.attrs(),
    )
    return BOUNDARY.dataset(data, grid=names, dtype=dtype, attrs=settings, history=history)


def figure(ds: xr.Dataset):
    """Both edges against the first grid axis (log-log), other axes at their first value.

    For balanced l2-SAM at L = 2 on one point the exact sequential/direct edge of
    docs/theory.md §4.4 is drawn beside the measured one.
    """
    import matplotlib.pyplot as plt

    from samflow.plotting import axis_label, is_log_axis
    from samflow.theory import l2sam_l2_direct_edge

    names = [a for a in ds.attrs.get("axes", "").split() if a]
    if not names:
        raise InputError("the boundary figure needs at least one grid axis")
    x = names[0]
    sub = ds.isel({n: 0 for n in names[1:]})
    xs = sub[x].values
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    styles = {"alpha_collapse": ("#004488", "o", "-"), "alpha_direct": ("#BB5566", "s", "--")}
    for name, (colour, marker, line) in styles.items():
        label = "collapse | sequential" if name == "alpha_collapse" else "sequential | direct"
        ax.plot(xs, sub[name].values, color=colour, marker=marker, ls=line, ms=4, label=label)
    a = ds.attrs
    if x == "rho" and a.get("method") == "sam-l2" and a.get("depth") == 2 and "mu" in a:
        exact = [l2sam_l2_direct_edge(a["mu"], r) for r in xs]
        ax.plot(
            xs,
            exact,
            color="black",
            ls=":",
            lw=1.5,
            label=r"exact: $\rho(\mu_d+\mu_{d-1})/(\sqrt{2}\|\mu\|)$",
        )
    ax.set_yscale("log")
    if is_log_axis(xs):
        ax.set_xscale("log")
    ax.set_xlabel(axis_label(x))
    ax.set_ylabel(r"critical $\alpha$")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    ax.set_title(
        f"{a.get('method')}, L = {a.get('depth', 'varied')}, {a.get('mode')}: regime edges",
        fontsize=10,
    )
    return fig
