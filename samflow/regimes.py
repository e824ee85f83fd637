"""Regime classification of a trajectory (docs/theory.md §6), record by record.

For records ``beta(tau_1..tau_T)`` (record 0, ``tau = 0``, is the initial state and is
excluded) and only records before the horizon actually reached (``valid``):

- dominant coordinate ``D(tau) = argmax_j |beta_j(tau)|``, labelled 1..d; a record
  where every ``|beta_j|`` is exactly equal (a tie, e.g. beta = 0 after a collapse, or
  a uniform start that has not moved in the dtype's resolution; for d = 1 only
  beta = 0) has no dominant coordinate (``D = 0``) and does not count for sequential
  or direct;
- ``FAILED`` (-1): a NaN or overflow appeared, or the solver failed;
- ``COLLAPSE`` (1): ``||beta(tau_T)||_1 < collapse_factor * ||beta(0)||_1``;
- ``UNRESOLVED`` (0): not collapsed, yet ``||beta(tau_T)||_1 < ||beta(0)||_1``: beta is
  still below its initial size at the horizon and may go on to collapse or recover;
  also when no record inside the horizon has a dominant coordinate;
- ``DIRECT`` (3): ``D = d`` at every recorded tau;
- ``SEQUENTIAL`` (2): otherwise, i.e. not collapsed and ``D != d`` at some tau.

Streaming, so that a sweep never holds a ``[T, d]`` trajectory: :func:`start` and
:func:`track` turn each record's ``beta`` into its scalars (D, ``||beta||_1``, the
loss) and carry only ``beta`` at the last valid record; :func:`finish` reduces the
recorded scalars over time. The discrete runner is handed them as an observer
(:data:`OBSERVER`, given to :func:`samflow.discrete.simulate`) and calls them inside
its own loop; flows run the same functions over their saved ``beta``
(:func:`summarize`).

All arrays may carry trailing *batch* axes (the batch-last layout of
:mod:`samflow.model`): ``beta`` ``[d, *batch]`` per record, per-record scalars
``[*batch]``, their records ``[T, *batch]``; reductions over the coordinates are
unrolled over rows (:mod:`samflow.layout`), those over time run along the major axis.
The functions are in ``jax.numpy`` and accept NumPy arrays.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
from jax import Array, lax

from samflow.discrete import Observer
from samflow.inputs import COLLAPSE_FACTOR, PLATEAU_FRACTION
from samflow.layout import argmax_rows, max_rows, min_rows, sum_rows

FAILED, UNRESOLVED, COLLAPSE, SEQUENTIAL, DIRECT = -1, 0, 1, 2, 3
FLAG_VALUES = (FAILED, UNRESOLVED, COLLAPSE, SEQUENTIAL, DIRECT)
FLAG_MEANINGS = "failed unresolved collapse sequential direct"
NAMES = dict(zip(FLAG_VALUES, FLAG_MEANINGS.split(), strict=True))
UNRESOLVED_HOW = (
    "unresolved: not collapsed, but ||beta||_1 at the horizon is still below its "
    "initial value (it may yet collapse or recover); or no record inside the horizon "
    "has a dominant coordinate (all |beta_j| tied)"
)
LIMIT_COLLAPSED, LIMIT_FAILED, LIMIT_FINITE, LIMIT_STALLED, LIMIT_NONE = 0, -1, -2, -3, -4
LIMIT_MEANINGS = (
    "j >= 1: coordinate j dominates at the horizon; 0: beta collapsed to 0; -1: failed; "
    "-2: converged to a finite nonzero point; -3: stalled (the loss underflowed to 0, so "
    "the run stopped moving: not a limit); -4: no dominant coordinate at the horizon"
)


def dominant(beta: Array) -> Array:
    """``D = argmax_j |beta_j| + 1`` over the coordinates, ``[d, *rest] -> [*rest]`` int.

    The first largest coordinate wins a tie, as with ``jnp.argmax``.
    """
    return argmax_rows(jnp.abs(beta)) + 1


def _norm(beta: Array) -> Array:
    return sum_rows(jnp.abs(beta))


class Tracker(NamedTuple):
    """What the records leave behind besides their scalars (fields with ``*batch``).

    Fields:
        beta_last: ``[d, *batch]`` beta at the last valid, finite record.
        last_change: ``||beta_last - beta_before||_1``, ``beta_before`` the valid
            record before it (NaN while the last valid record is record 0).
    """

    beta_last: Array
    last_change: Array


def _observe(beta: Array, loss: Array, valid) -> tuple[Array, dict[str, Array]]:
    """One record's scalars: ``dominant`` (0 if invalid, non-finite or tied),
    ``beta_norm`` and ``loss`` (NaN where invalid or non-finite); and whether it counts."""
    norm = _norm(beta)
    # Not finite: a NaN, or an overflow (also of the norm itself).
    ok = jnp.asarray(valid) & jnp.isfinite(norm)
    magnitude = jnp.abs(beta)
    largest = max_rows(magnitude)
    # A tie among several coordinates, or beta = 0 (with one coordinate too).
    tied = (largest == min_rows(magnitude)) & ((beta.shape[0] > 1) | (largest == 0))
    ranked = ok & ~tied
    D = jnp.where(ranked, argmax_rows(magnitude) + 1, 0).astype(jnp.int32)
    out = {
        "dominant": D,
        "beta_norm": jnp.where(ok, norm, jnp.nan),
        "loss": jnp.where(ok, loss, jnp.nan),
    }
    return ok, out


def start(beta0: Array, loss0: Array, valid0=True) -> tuple[Tracker, dict[str, Array]]:
    """The tracker after record 0 (``tau = 0``), and that record's scalars.

    Record 0 is the initial state: it never has a dominant coordinate.
    """
    beta0 = jnp.asarray(beta0)
    _, out = _observe(beta0, jnp.asarray(loss0), valid0)
    out["dominant"] = jnp.zeros_like(out["dominant"])
    nan = jnp.full(beta0.shape[1:], jnp.nan, beta0.dtype)
    return Tracker(beta_last=beta0, last_change=nan), out


def track(state: Tracker, beta: Array, loss: Array, valid=True) -> tuple[Tracker, dict[str, Array]]:
    """Take record ``beta`` ``[d, *batch]`` (after record 0): the new state and its scalars.

    ``valid`` is False for records beyond the horizon reached.
    """
    ok, out = _observe(beta, loss, valid)
    new = Tracker(
        beta_last=jnp.where(ok, beta, state.beta_last),
        last_change=jnp.where(ok, _norm(beta - state.beta_last), state.last_change),
    )
    return new, out


OBSERVER = Observer(start=start, track=track)
"""The classifier as an observer of a discrete run (every record inside the horizon)."""


def finish(
    state: Tracker,
    records: dict[str, Array],
    tau: Array,
    valid: Array | bool = True,
    failed: Array | bool = False,
    collapse_factor: float = COLLAPSE_FACTOR,
    plateau_fraction: float = PLATEAU_FRACTION,
    converged_rtol: float = 1e-9,
    beta_end: Array | None = None,
    ended_at_blowup: Array | bool = False,
) -> dict[str, Array]:
    """Per-trajectory summaries from the final ``state`` and the recorded scalars.

    ``records`` holds ``dominant``, ``beta_norm``, ``loss`` ``[T, *batch]`` from
    :func:`start` and :func:`track`; ``tau`` ``[T, *batch]`` their times, which never
    decrease (save times, or a sum of non-negative increments), so the first time at
    which something happens is the least time at which it does. ``valid`` ``[T, *batch]``
    marks the records inside the horizon reached (default every record): a NaN or
    overflow inside it, or at record 0, makes the trajectory ``FAILED``, as does
    ``failed`` ``[*batch]``, a failure found elsewhere (solver, runner).

    Returns ``regime`` (int8); ``limit_coord`` (codes :data:`LIMIT_MEANINGS`): D at the
    horizon (the last valid record), 0 after a collapse, -1 for a failed run, -2 when
    beta converged to a finite nonzero point (relative change below ``converged_rtol``
    between the last two valid records), -3 when it stopped moving because the loss
    underflowed to 0 (a stall, not a limit), -4 when the horizon has no dominant
    coordinate, or,
    when the run ended at a finite-time blow-up (``ended_at_blowup``), D of
    ``beta_end`` ``[d, *batch]``, the state at the event (the leader at the last record
    can still lose the race); ``first_amplified``: D at the first record with a
    dominant coordinate (0 if none); ``n_handoffs``: changes of D between consecutive
    records that both have one; ``horizon``; ``final_direction`` ``[d]``:
    ``beta / ||beta||_1`` at the horizon; ``takeover_tau`` ``[d]``: first recorded tau
    at which coordinate j dominates (NaN if never: the hand-offs are these times for the
    coordinates that take over after the first); ``plateau_end_tau``: first recorded
    tau at which the loss is down to ``plateau_fraction`` of its initial value (NaN if
    never: a plateau that outlasts the horizon).
    """
    D, norm, loss = records["dominant"], records["beta_norm"], records["loss"]
    tau = jnp.asarray(tau)
    d = state.beta_last.shape[0]
    T = D.shape[0]
    t = jnp.arange(T).reshape(T, *(1,) * (D.ndim - 1))
    ok = jnp.isfinite(norm)
    inside = jnp.broadcast_to(jnp.asarray(valid), D.shape) | (t == 0)
    failed = jnp.asarray(failed) | jnp.any(inside & ~ok, axis=0)
    later = ok & (t > 0)
    any_later = jnp.any(later, axis=0)
    ranked = D > 0
    any_ranked = jnp.any(ranked, axis=0)
    # Record index and D in one integer, so that one reduction finds both.
    key = t * (d + 1) + D
    last = jnp.max(jnp.where(ok, key, 0), axis=0)
    horizon, last_D = last // (d + 1), last % (d + 1)
    first = jnp.min(jnp.where(ranked, key, T * (d + 1)), axis=0) % (d + 1)
    direct = jnp.all(~ranked | (D == d), axis=0)
    n_handoffs = jnp.sum(ranked[1:] & ranked[:-1] & (D[1:] != D[:-1]), axis=0)

    def first_tau(when, times):
        earliest = jnp.min(jnp.where(when, times, jnp.inf), axis=0)
        return jnp.where(jnp.isinf(earliest), jnp.nan, earliest)

    coords = jnp.arange(1, d + 1).reshape(d, *(1,) * (D.ndim - 1))
    takeover = first_tau(D[:, None] == coords, tau[:, None])
    plateau = first_tau(later & (loss <= plateau_fraction * loss[0]), tau)

    normT = _norm(state.beta_last)
    collapsed = normT < collapse_factor * norm[0]
    shrinking = normT < norm[0]
    regime = jnp.select(
        [failed, collapsed & any_later, ~any_ranked | shrinking, direct],
        [FAILED, COLLAPSE, UNRESOLVED, DIRECT],
        SEQUENTIAL,
    )
    converged = any_later & (state.last_change / jnp.maximum(normT, 1e-300) < converged_rtol)
    loss_T = jnp.max(jnp.where(t == horizon, loss, -jnp.inf), axis=0)
    limit = jnp.select(
        [regime == COLLAPSE, regime == FAILED, converged & (loss_T == 0), converged, last_D == 0],
        [LIMIT_COLLAPSED, LIMIT_FAILED, LIMIT_STALLED, LIMIT_FINITE, LIMIT_NONE],
        last_D,
    )
    if beta_end is not None:
        racing = jnp.asarray(ended_at_blowup) & (regime != FAILED) & (regime != COLLAPSE)
        limit = jnp.where(racing, dominant(beta_end), limit)
    safe = jnp.where(normT > 0, normT, 1.0)
    return {
        "regime": regime.astype(jnp.int8),
        "limit_coord": limit.astype(jnp.int32),
        "first_amplified": first.astype(jnp.int32),
        "n_handoffs": n_handoffs.astype(jnp.int32),
        "horizon": horizon.astype(jnp.int32),
        "final_direction": jnp.where(normT > 0, state.beta_last / safe, 0.0),
        "takeover_tau": takeover,
        "plateau_end_tau": plateau,
    }


def summarize(
    beta: Array,
    tau: Array,
    loss: Array,
    valid: Array | bool = True,
    failed: Array | bool = False,
    collapse_factor: float = COLLAPSE_FACTOR,
    plateau_fraction: float = PLATEAU_FRACTION,
    beta_end: Array | None = None,
    ended_at_blowup: Array | bool = False,
    lead_start: Array | None = None,
) -> dict[str, Array]:
    """:func:`start`, :func:`track` and :func:`finish` over recorded ``beta`` ``[T, d, *batch]``.

    ``tau``, ``loss``, ``valid`` are ``[T, *batch]`` (``valid`` broadcasts). Returns
    :func:`finish`'s summaries plus the per-record ``dominant`` ``[T]`` (0 where
    invalid or tied), ``beta_norm`` and ``loss`` ``[T]`` (NaN outside the horizon).

    ``lead_start`` ``[*batch]``: the leader as ``tau -> 0+`` (a flow knows it from its
    field, :func:`samflow.flows.lead_at_start`); it becomes the dominant coordinate of
    record 0, which otherwise has none, so a hand-off before the first save time
    counts (a sequential run is never classified direct because of the save grid).
    """
    beta, tau, loss = jnp.asarray(beta), jnp.asarray(tau), jnp.asarray(loss)
    valid = jnp.broadcast_to(jnp.asarray(valid), tau.shape)
    state, first = start(beta[0], loss[0], valid[0])
    if lead_start is not None:
        first["dominant"] = jnp.broadcast_to(
            jnp.asarray(lead_start, jnp.int32), first["dominant"].shape
        )

    def body(state, record):
        return track(state, *record)

    state, rest = lax.scan(body, state, (beta[1:], loss[1:], valid[1:]))
    records = {k: jnp.concatenate([v[None], rest[k]]) for k, v in first.items()}
    out = finish(
        state,
        records,
        tau,
        valid,
        failed,
        collapse_factor,
        plateau_fraction,
        beta_end=beta_end,
        ended_at_blowup=ended_at_blowup,
    )
    out.update(records)
    return out


class Classification(NamedTuple):
    """Per-trajectory classification (each field with the trajectory's batch axes).

    Fields:
        regime: int, one of ``FLAG_VALUES``.
        limit_coord: int, see :func:`finish`.
        first_amplified: int, D at the first record after tau = 0 with a dominant
            coordinate (0 if none).
        dominant: ``[T]`` int, D at each record, 0 where the record is not valid or tied.
        horizon: int, index of the last valid record.
    """

    regime: Array
    limit_coord: Array
    first_amplified: Array
    dominant: Array
    horizon: Array


def classify(
    beta: Array,
    valid: Array | bool = True,
    failed: Array | bool = False,
    collapse_factor: float = COLLAPSE_FACTOR,
    beta_end: Array | None = None,
    ended_at_blowup: Array | bool = False,
) -> Classification:
    """Classify ``beta`` ``[T, d, *batch]``: :func:`summarize` without time or loss."""
    beta = jnp.asarray(beta)
    zeros = jnp.zeros((beta.shape[0], *beta.shape[2:]), beta.dtype)
    s = summarize(
        beta,
        zeros,
        zeros,
        valid,
        failed,
        collapse_factor,
        beta_end=beta_end,
        ended_at_blowup=ended_at_blowup,
    )
    return Classification(
        s["regime"], s["limit_coord"], s["first_amplified"], s["dominant"], s["horizon"]
    )
