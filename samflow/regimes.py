"""Regime classification of a trajectory (docs/theory/regimes.md#definitions), from its leader path.

The **leader** ``D = argmax_j |beta_j|`` (1..d; 0 where the largest ``|beta_j|`` is
shared or beta is 0, :func:`leader`) is followed between the steps of a run, whatever
the records: the discrete runner checks it after every step
(:func:`path_observer`), a flow at every accepted solver step
(:class:`samflow.flows.LeaderWatch`). Each change is appended to a
:class:`LeaderPath` (the leaders in order, with the ``tau`` and step at which each
took the lead). A regime is a statement about the limit, so it is given only where
the run's *fate* is decided (:mod:`samflow.fate`: an event or a certificate;
docs/theory/regimes.md#labels-of-the-limit):

- ``FAILED`` (-1): a NaN or overflow in a record inside the horizon, or the solver failed;
- ``COLLAPSE`` (1): beta tends to 0 (a collapse certificate, at the collapse event or at
  the stop; docs/theory/regimes.md#collapse-certificates);
- ``FINITE`` (7): beta tends to a finite nonzero point (a certificate);
- from the path, read with the major coordinate (``argmax_j mu_j``, :func:`path_regime`)
  where the leader at the end leads for ever or a blow-up ended the run: ``DIRECT`` (3),
  ``SEQUENTIAL`` (2), ``RETURNED`` (4), ``MAJOR_LOST`` (5), ``MINOR_END`` (6)
  (:data:`PATH_HOW`);
- ``UNRESOLVED`` (0): anything else, with ``unresolved_reason`` (:data:`REASON_MEANINGS`).

Streaming, so that a sweep never holds a ``[T, d]`` trajectory: :func:`start` and
:func:`track` turn each record's ``beta`` into its scalars (D, ``||beta||_1``, the
loss) and carry only ``beta`` at the last valid record; :func:`finish` reduces them
and the path. The discrete runner is handed them as an observer (:data:`OBSERVER`)
and calls them inside its own loop; flows run the same functions over their saved
``beta`` (:func:`summarize`). Without a path from the run (:func:`classify` of given
records), the path is read from the records (:func:`record_path`), which sees only
the leaders at the record times.

All arrays may carry trailing *batch* axes (the batch-last layout of
:mod:`samflow.model`): ``beta`` ``[d, *batch]`` per record, per-record scalars
``[*batch]``, their records ``[T, *batch]``; reductions over the coordinates are
unrolled over rows (:mod:`samflow.layout`), those over time run along the major axis.
The functions are in ``jax.numpy`` and accept NumPy arrays.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from samflow import fate as fates
from samflow.classification import Classification
from samflow.discrete import Observer, StepObserver
from samflow.layout import UNROLL_ROWS, argmax_rows, max_rows, sum_rows

FAILED, UNRESOLVED, COLLAPSE, SEQUENTIAL, DIRECT, RETURNED, MAJOR_LOST, MINOR_END, FINITE = range(
    -1, 8
)
FLAG_VALUES = (
    FAILED, UNRESOLVED, COLLAPSE, SEQUENTIAL, DIRECT, RETURNED, MAJOR_LOST, MINOR_END, FINITE
)  # fmt: skip
"""The regime codes of a file's ``regime`` variable, -1 to 7 (CF ``flag_values``)."""
FLAG_MEANINGS = "failed unresolved collapse sequential direct returned major_lost minor_end finite"
"""The names of :data:`FLAG_VALUES`, in order, space-separated (CF ``flag_meanings``)."""
NAMES = dict(zip(FLAG_VALUES, FLAG_MEANINGS.split(), strict=True))
UNRESOLVED_HOW = (
    "unresolved: the run's fate was not decided where it stopped (no certified collapse, "
    "no blow-up with a proven winner, no certificate of the limit; "
    "docs/theory/regimes.md#labels-of-the-limit); "
    "unresolved_reason says how it stood, leader_path and stop_leader what was seen"
)
PATH_HOW = (
    "from the leader path of a run whose fate is decided (docs/theory/regimes.md#definitions), "
    "major = argmax_j mu_j: direct, the "
    "major leads throughout; sequential, minor coordinates lead first and the major takes "
    "over once, at the end; returned, the major leads, loses the lead and ends leading "
    "again; major_lost, the major led but a minor coordinate leads at the end; minor_end, "
    "the major never led; finite: beta converges to a finite nonzero point (certified)"
)
DECIDED, GROWING, SHRINKING, SLOWING, NO_LEADER = range(5)
REASON_MEANINGS = "decided growing shrinking slowing no_leader"
"""Codes of ``unresolved_reason``: 0 for a decided run; else how an unresolved run stood
where it stopped: ``||beta||_1`` at or above its start, below it, barely moving (relative
change below ``converged_rtol`` between the last two records, or stalled), or no
coordinate ever led."""
LIMIT_COLLAPSED, LIMIT_FAILED, LIMIT_FINITE, LIMIT_STALLED, LIMIT_NONE, LIMIT_OPEN = range(
    0, -6, -1
)
LIMIT_MEANINGS = (
    "j >= 1: coordinate j leads in the limit (the run's fate is decided: a certificate, "
    "or the leader at a finite-time blow-up); 0: beta collapses to 0; -1: failed; "
    "-2: beta converges to a finite nonzero point (certified); -3: stalled (the loss "
    "underflowed to 0, so the run stopped moving: not a limit); -4: no coordinate ever "
    "led; -5: not decided (unresolved; stop_leader is the leader where it stopped)"
)
MAX_LEADERS = 8
"""Entries of a leader path kept (the ``handoff`` axis of files): the first
``MAX_LEADERS - 1`` leaders and the latest; ``n_leaders`` counts them all."""


def _norm(beta: Array) -> Array:
    return sum_rows(jnp.abs(beta))


def top(values: Array) -> Array:
    """The unique largest row of ``values`` ``[d, *batch]`` (1..d), 0 where the largest
    value is shared by several rows or is not finite."""
    largest = max_rows(values)
    unique = sum_rows((values == largest).astype(jnp.int32)) == 1
    return jnp.where(unique & jnp.isfinite(largest), argmax_rows(values) + 1, 0).astype(jnp.int32)


def leader(beta: Array) -> Array:
    """The leading coordinate of ``beta`` ``[d, *batch]`` (1..d), 0 where there is none:
    beta is 0 or not finite, or its largest ``|beta_j|`` is tied (a uniform start that
    has not moved in the dtype's resolution, identical coordinates).

    One pass over the rows (a running maximum and whether it is shared): the discrete
    runner calls it after every step.
    """
    magnitude = jnp.abs(beta)
    if beta.shape[0] > UNROLL_ROWS:
        return jnp.where(max_rows(magnitude) > 0, top(magnitude), 0)
    best, index = magnitude[0], jnp.zeros(beta.shape[1:], jnp.int32)
    shared = jnp.zeros(beta.shape[1:], bool)
    for j in range(1, beta.shape[0]):
        above = magnitude[j] > best
        shared = jnp.where(above, False, shared | (magnitude[j] == best))
        best = jnp.where(above, magnitude[j], best)
        index = jnp.where(above, j, index)
    # best > 0 is False for NaN; inf is no leader either
    ok = (best > 0) & (best < jnp.inf) & ~shared
    return jnp.where(ok, index + 1, 0).astype(jnp.int32)


class LeaderPath(NamedTuple):
    """The sequence of leading coordinates of a run, streamed (fields with ``*batch``).

    Every time the leader changes (found between the steps of a discrete run or the
    accepted steps of a flow, whatever the records), :func:`path_enter` appends the
    new leader and the time it took the lead. ``K = MAX_LEADERS``.

    Fields:
        lead: the current leader (1..d; 0 while none has led).
        count: how many leads so far (entries of the path; may exceed ``K``).
        major_leads: how many of them were the major's.
        leaders: ``[K, *batch]`` int: the first ``K - 1`` leaders, then the latest
            beyond them; 0 where unused.
        tau: ``[K, *batch]`` when each took the lead (rescaled time); NaN where unused.
        step: ``[K, *batch]`` int, the first step it led at (discrete); -1 where unused
            or for flows.
    """

    lead: Array
    count: Array
    major_leads: Array
    leaders: Array
    tau: Array
    step: Array


def path_start(batch: tuple[int, ...], dtype, step_dtype=jnp.int32) -> LeaderPath:
    """An empty path for trajectories of shape ``batch`` (no leader yet)."""
    zero = jnp.zeros(batch, jnp.int32)
    shape = (MAX_LEADERS, *batch)
    return LeaderPath(
        lead=zero,
        count=zero,
        major_leads=zero,
        leaders=jnp.zeros(shape, jnp.int32),
        tau=jnp.full(shape, jnp.nan, dtype),
        step=jnp.full(shape, -1, step_dtype),
    )


def path_enter(path: LeaderPath, new: Array, tau: Array, step: Array, major: Array) -> LeaderPath:
    """``path`` after leader ``new`` (0: none, which changes nothing) at ``tau``, ``step``.

    ``major`` ``[*batch]`` is the major coordinate (1-based).
    """
    changed = (new > 0) & (new != path.lead)
    slot = jnp.minimum(path.count, MAX_LEADERS - 1)
    k = jnp.arange(MAX_LEADERS).reshape(MAX_LEADERS, *(1,) * changed.ndim)
    write = changed & (k == slot)
    return LeaderPath(
        lead=jnp.where(changed, new, path.lead),
        count=path.count + changed,
        major_leads=path.major_leads + (changed & (new == major)),
        leaders=jnp.where(write, new, path.leaders),
        tau=jnp.where(write, jnp.asarray(tau, path.tau.dtype), path.tau),
        step=jnp.where(write, jnp.asarray(step, path.step.dtype), path.step),
    )


def singular_log_range(dtype) -> float:
    """How far, in ``log |beta|``, a finite-time singularity is followed in ``dtype``
    (docs/theory/flows.md#stopping-events): beyond ~0.45 log(1/eps) the dtype no longer resolves
    it."""
    return 0.45 * float(-np.log(np.finfo(np.dtype(dtype)).eps))


def path_observer(major: Array) -> StepObserver:
    """The leader path of a discrete run, checked after every step
    (:func:`samflow.discrete.simulate`), so no lead, however short, is missed.

    ``major`` ``[*batch]``: the major coordinate of each trajectory. Step 0 counts a
    leader only when the start has one (a uniform start is tied: its first leader is
    the one after the first step). A hand-off is placed at the step after which the new
    leader first leads, with that step's ``tau``. After each step the leader is found
    (:func:`leader`, branchless, fused with the step) and compared with the running
    one; the path, ``MAX_LEADERS`` entries per trajectory, is written once per block of
    steps and only where some trajectory of the batch had a hand-off in it (a branch
    for the whole batch; under vmap it becomes a select, still correct). Once
    ``max_j |beta_j|`` has fallen :func:`singular_log_range` below its start, the path
    is frozen (the flow's collapse event; the iterates then hover at 0, where the
    leader is rounding noise). The state is ``(path, floor)``; ``floor`` becomes inf
    when frozen.
    """

    def begin(beta0, tau0):
        path = path_start(beta0.shape[1:], tau0.dtype, jnp.asarray(0).dtype)
        path = path_enter(path, leader(beta0), tau0, jnp.zeros_like(path.step[0]), major)
        return path, max_rows(jnp.abs(beta0)) * np.exp(-singular_log_range(beta0.dtype))

    def look(state, lead, beta):
        path, floor = state
        lead = path.lead if lead is None else lead
        floor = jnp.where(max_rows(jnp.abs(beta)) < floor, jnp.inf, floor)
        new = jnp.where(jnp.isinf(floor), 0, leader(beta))
        changed = (new > 0) & (new != lead)
        return (path, floor), jnp.where(changed, new, lead), jnp.where(changed, new, 0)

    def write(state, news, taus, first):
        path, floor = state
        for k, (new, tau) in enumerate(zip(news, taus, strict=True)):
            path = path_enter(path, new, tau, first + k + 1, major)
        return path, floor

    return StepObserver(start=begin, look=look, write=write)


def path_regime(path: LeaderPath, major: Array) -> Array:
    """The regime a path names, for a run that neither failed, collapsed nor is
    unresolved (docs/theory/regimes.md#definitions); ``UNRESOLVED`` where no coordinate ever led."""
    at_major = path.lead == major
    return jnp.select(
        [
            path.count == 0,
            at_major & (path.count == 1),
            at_major & (path.major_leads == 1),
            at_major,
            path.major_leads > 0,
        ],
        [UNRESOLVED, DIRECT, SEQUENTIAL, RETURNED, MAJOR_LOST],
        MINOR_END,
    )


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
    """One record's scalars: ``dominant`` (:func:`leader`; 0 if invalid), ``beta_norm``
    and ``loss`` (NaN where invalid or non-finite); and whether it counts."""
    norm = _norm(beta)
    # Not finite: a NaN, or an overflow (also of the norm itself).
    ok = jnp.asarray(valid) & jnp.isfinite(norm)
    out = {
        "dominant": jnp.where(ok, leader(beta), 0).astype(jnp.int32),
        "beta_norm": jnp.where(ok, norm, jnp.nan),
        "loss": jnp.where(ok, loss, jnp.nan),
    }
    return ok, out


def start(beta0: Array, loss0: Array, valid0=True) -> tuple[Tracker, dict[str, Array]]:
    """The tracker after record 0 (``tau = 0``), and that record's scalars.

    Record 0 is the initial state: it has a dominant coordinate unless all ``|beta_j|``
    are tied (a uniform start).
    """
    beta0 = jnp.asarray(beta0)
    _, out = _observe(beta0, jnp.asarray(loss0), valid0)
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
    settings: Classification = Classification(),
    converged_rtol: float = 1e-9,
    *,
    path: LeaderPath,
    major: Array | int,
    fate: Array | int = fates.OPEN,
    winner: Array | int | None = None,
    first: Array | int = 0,
    collapse_by_records: bool = False,
) -> dict[str, Array]:
    """Per-trajectory summaries from the final ``state``, the recorded scalars and the
    leader ``path`` of the run, labelled by its ``fate``.

    ``records`` holds ``dominant``, ``beta_norm``, ``loss`` ``[T, *batch]`` from
    :func:`start` and :func:`track`; ``tau`` ``[T, *batch]`` their times, which never
    decrease. ``valid`` ``[T, *batch]`` marks the records inside the horizon reached
    (default every record): a NaN or overflow inside it, or at record 0, makes the
    trajectory ``FAILED``, as does ``failed`` ``[*batch]``, a failure found elsewhere
    (solver, runner). ``path`` is the :class:`LeaderPath` found between the steps of
    the run (or from the records, :func:`summarize`); ``major`` ``[*batch]`` the major
    coordinate (1-based).

    ``fate`` ``[*batch]`` (:mod:`samflow.fate`) says what decided the run's future:
    a regime is given only where it is decided (docs/theory/regimes.md#labels-of-the-limit).
    ``COLLAPSE``: collapse; ``FINITE``: finite; ``SETTLED`` or ``BLOWUP``: the regime the path
    names (:func:`path_regime`); ``TAKEOVER``: the regime of the path with ``winner``
    ``[*batch]`` (1-based; None: the major), the certified leader of the limit, appended
    (:mod:`samflow.fate`): the major: sequential if it never led, else returned, and with
    no leader seen direct where the major leads first (``first`` ``[*batch]``, 1-based:
    the major or a minor where a certificate proved which leads first; 0: where the major
    is among the largest ``|beta_j|``), else sequential; a minor coordinate: major_lost if
    the major led, else minor_end;
    ``limit_coord`` the winner, the path itself as seen); ``RETURN``: returned where the
    major led (``limit_coord`` the major, whoever leads at the stop), else unresolved;
    ``OPEN``: unresolved.
    ``collapse_by_records`` also labels collapse where
    ``||beta(tau_T)||_1 < settings.collapse_factor * ||beta(0)||_1`` (``settings``:
    :class:`Classification`): a reading of given records, which no runner of the engine
    asks for (a fall proves no collapse,
    docs/theory/regimes.md#collapse-certificates).

    Returns ``regime`` (int8): failed from the records, the rest from the fate;
    ``unresolved_reason`` (int8, :data:`REASON_MEANINGS`): 0 where decided, else how the
    run stood where it stopped; ``stop_leader``: the path's leader there (0: none);
    ``limit_coord`` (codes :data:`LIMIT_MEANINGS`): the last leader of a decided path,
    0 after a collapse, -1 for a failed run, -2 for a certified finite limit, -3 when an
    unresolved run stopped moving because the loss underflowed to 0, -4 when no
    coordinate ever led, -5 when unresolved; ``first_amplified``: the first leader (0 if
    none); ``n_handoffs``: changes of the leader; ``n_leaders``: entries of the path
    (more than :data:`MAX_LEADERS`: the path is cut); ``leader_path`` ``[K]``,
    ``handoff_tau`` ``[K]``, ``handoff_step`` ``[K]``: the path (:class:`LeaderPath`);
    ``horizon``; ``final_direction`` ``[d]``:
    ``beta / ||beta||_1`` at the horizon; ``takeover_tau`` ``[d]``: when coordinate j
    first took the lead (NaN if never, or only in the cut part of a long path);
    ``plateau_end_tau``: first recorded tau at which the loss is down to
    ``settings.plateau_fraction`` of its initial value (NaN if never).
    """
    norm, loss = records["beta_norm"], records["loss"]
    tau = jnp.asarray(tau)
    d = state.beta_last.shape[0]
    T = norm.shape[0]
    t = jnp.arange(T).reshape(T, *(1,) * (norm.ndim - 1))
    ok = jnp.isfinite(norm)
    inside = jnp.broadcast_to(jnp.asarray(valid), norm.shape) | (t == 0)
    failed = jnp.asarray(failed) | jnp.any(inside & ~ok, axis=0)
    later = ok & (t > 0)
    any_later = jnp.any(later, axis=0)
    horizon = jnp.max(jnp.where(ok, t, 0), axis=0)
    major = jnp.asarray(major, jnp.int32)

    def first_tau(when, times, axis=0):
        earliest = jnp.min(jnp.where(when, times, jnp.inf), axis=axis)
        return jnp.where(jnp.isinf(earliest), jnp.nan, earliest)

    coords = jnp.arange(1, d + 1).reshape(d, 1, *(1,) * (norm.ndim - 1))
    takeover = first_tau(path.leaders[None] == coords, path.tau[None], axis=1)
    plateau = first_tau(later & (loss <= settings.plateau_fraction * loss[0]), tau)

    normT = _norm(state.beta_last)
    fate = jnp.broadcast_to(jnp.asarray(fate, jnp.int32), normT.shape)
    collapsed = fate == fates.COLLAPSE
    if collapse_by_records:
        collapsed |= any_later & (normT < settings.collapse_factor * norm[0])
    by_path = (fate == fates.SETTLED) | (fate == fates.BLOWUP)
    # The winner takes the lead later and keeps it (docs/theory/regimes.md#takeover-certificate):
    # the path as seen, then the winner. Whatever coordinates lead in between: the major's
    # lead at the end is its first (sequential) or a return; a minor winner keeps the
    # major behind it, so the major led (major_lost) only where the path saw it lead.
    # A run that never saw a leader (a start tied at the top whose steps underflow, so
    # the iterates stand still) has the tied coordinates part in the order of mu at the
    # exact map's first step: the major leads at once where it is among them (direct),
    # else a minor leads first (sequential).
    winner = major if winner is None else jnp.asarray(winner, jnp.int32)
    winner = jnp.broadcast_to(winner, normT.shape)
    later_lead = (fate == fates.TAKEOVER) & (path.lead != winner)
    size = jnp.abs(state.beta_last)
    index = jnp.broadcast_to(major - 1, size.shape[1:])[None]
    at_top = jnp.take_along_axis(size, index, axis=0)[0] >= jnp.max(size, axis=0)
    # ... unless the certificate proved who leads first (the map that follows its flow:
    # there the rates need not be ordered as mu, docs/theory/regimes.md#vanishing-steps)
    first = jnp.broadcast_to(jnp.asarray(first, jnp.int32), normT.shape)
    never = jnp.where(jnp.where(first > 0, first == major, at_top), DIRECT, SEQUENTIAL)
    appended = path_enter(path, winner, jnp.nan, -1, major)
    taken = jnp.where((path.count == 0) & (winner == major), never, path_regime(appended, major))
    regime = jnp.select(
        [
            failed,
            collapsed,
            fate == fates.FINITE,
            by_path,
            later_lead,
            (fate == fates.RETURN) & (path.major_leads > 0),
        ],
        [
            FAILED,
            COLLAPSE,
            FINITE,
            path_regime(path, major),
            taken,
            RETURNED,  # the major led, and it takes the lead back for ever
        ],
        UNRESOLVED,
    )
    converged = any_later & (state.last_change / jnp.maximum(normT, 1e-300) < converged_rtol)
    loss_T = jnp.max(jnp.where(t == horizon, loss, -jnp.inf), axis=0)
    open_ = regime == UNRESOLVED
    reason = jnp.select(
        [~open_, path.count == 0, converged, normT < norm[0]],
        [DECIDED, NO_LEADER, SLOWING, SHRINKING],
        GROWING,
    )
    limit = jnp.select(
        [
            regime == COLLAPSE,
            regime == FAILED,
            regime == FINITE,
            open_ & converged & (loss_T == 0),
            later_lead & ~open_,
            (regime == RETURNED) & (fate == fates.RETURN),
            path.lead == 0,
            open_,
        ],
        [
            LIMIT_COLLAPSED,
            LIMIT_FAILED,
            LIMIT_FINITE,
            LIMIT_STALLED,
            winner,
            major,  # a return: the major wins in the end, whoever leads at the stop
            LIMIT_NONE,
            LIMIT_OPEN,
        ],
        path.lead,
    )
    safe = jnp.where(normT > 0, normT, 1.0)
    return {
        "regime": regime.astype(jnp.int8),
        "unresolved_reason": reason.astype(jnp.int8),
        "stop_leader": path.lead.astype(jnp.int32),
        "limit_coord": limit.astype(jnp.int32),
        "first_amplified": path.leaders[0],
        "n_handoffs": jnp.maximum(path.count - 1, 0).astype(jnp.int32),
        "n_leaders": path.count.astype(jnp.int32),
        "leader_path": path.leaders,
        "handoff_tau": path.tau,
        "handoff_step": path.step,
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
    settings: Classification = Classification(),
    *,
    major: Array | int,
    path: LeaderPath | None = None,
    lead_start: Array | None = None,
    fate: Array | int = fates.OPEN,
    winner: Array | int | None = None,
    collapse_by_records: bool = False,
) -> dict[str, Array]:
    """:func:`start`, :func:`track` and :func:`finish` over recorded ``beta`` ``[T, d, *batch]``.

    ``tau``, ``loss``, ``valid`` are ``[T, *batch]`` (``valid`` broadcasts). Returns
    :func:`finish`'s summaries plus the per-record ``dominant`` ``[T]`` (0 where
    invalid or tied), ``beta_norm`` and ``loss`` ``[T]`` (NaN outside the horizon).

    ``path``: the leader path found by the run between its steps (a flow's,
    :func:`samflow.flows.integrate`). Without it the path is read from the records,
    which sees only the leaders at the record times; ``lead_start`` ``[*batch]``, the
    leader as ``tau -> 0+`` (:func:`samflow.flows.lead_at_start`), then stands for
    record 0's.
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
    if path is None:
        path = record_path(records["dominant"], tau, major)
    out = finish(
        state,
        records,
        tau,
        valid,
        failed,
        settings,
        path=path,
        major=major,
        fate=fate,
        winner=winner,
        collapse_by_records=collapse_by_records,
    )
    out.update(records)
    return out


def record_path(dominant: Array, tau: Array, major: Array | int) -> LeaderPath:
    """The leader path seen at the records: ``dominant`` ``[T, *batch]`` (0: none) at
    ``tau`` ``[T, *batch]``; ``step`` is the record index."""
    dominant, tau = jnp.asarray(dominant), jnp.asarray(tau)
    major = jnp.asarray(major, jnp.int32)
    T = dominant.shape[0]

    def body(path, x):
        D, when, k = x
        return path_enter(path, D, when, k, major), None

    path = path_start(dominant.shape[1:], tau.dtype)
    path, _ = lax.scan(body, path, (dominant, tau, jnp.arange(T, dtype=jnp.int32)))
    return path


class Classified(NamedTuple):
    """Per-trajectory classification (each field with the trajectory's batch axes).

    Fields:
        regime: int, one of ``FLAG_VALUES``.
        limit_coord: int, see :func:`finish`.
        first_amplified: int, the first leader (0 if none).
        dominant: ``[T]`` int, D at each record, 0 where the record is not valid or tied.
        horizon: int, index of the last valid record.
        leader_path: ``[MAX_LEADERS]`` int, the leaders seen at the records (0 fill).
    """

    regime: Array
    limit_coord: Array
    first_amplified: Array
    dominant: Array
    horizon: Array
    leader_path: Array


def classify(
    beta: Array,
    valid: Array | bool = True,
    failed: Array | bool = False,
    settings: Classification = Classification(),
    *,
    major: Array | int,
    path: LeaderPath | None = None,
    lead_start: Array | None = None,
    fate: Array | int = fates.OPEN,
    winner: Array | int | None = None,
    collapse_by_records: bool = False,
) -> Classified:
    """Classify ``beta`` ``[T, d, *batch]``: :func:`summarize` without time or loss.

    ``fate`` (:mod:`samflow.fate`) is what decided the run (``winner``: the limit's
    leader of a ``TAKEOVER``, :func:`finish`); records alone decide
    nothing (the default leaves the run unresolved unless it failed, or collapsed by
    ``collapse_by_records``)."""
    beta = jnp.asarray(beta)
    zeros = jnp.zeros((beta.shape[0], *beta.shape[2:]), beta.dtype)
    s = summarize(
        beta,
        zeros,
        zeros,
        valid,
        failed,
        settings,
        major=major,
        path=path,
        lead_start=lead_start,
        fate=fate,
        winner=winner,
        collapse_by_records=collapse_by_records,
    )
    return Classified(
        s["regime"],
        s["limit_coord"],
        s["first_amplified"],
        s["dominant"],
        s["horizon"],
        s["leader_path"],
    )
