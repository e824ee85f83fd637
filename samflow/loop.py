"""The record loop: every discrete run is ``init`` + ``step`` + this one ``lax.scan``.

A run records its state at a schedule ``record_steps`` ``[T]`` (step numbers, starting
at 0, increasing: :meth:`samflow.runners.Discrete.times`). The scan goes over the
``T - 1`` *record intervals*; ``advance`` takes the steps of one interval (usually
:func:`take_steps`, a ``lax.fori_loop``) and ``record`` reduces the state to what is
kept. The schedule is a concrete array shared by every trajectory of a batch, so a
batched run never batches the loop bounds. Three runners use it:
:func:`samflow.discrete.simulate` (the diagonal engine, batch-last, an observer inside
the scan), :func:`samflow.fit` (any pytree and loss) and the image training's scan
driver (:func:`samflow.images.train.make_run`).

Numerical failure: with ``finite``, the first record at which it is False sets
``failed_step`` (per batch element; -1 while none failed). The run goes on past it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import Array, lax

State = Any
Records = Any


class Network(NamedTuple):
    """What a discrete run steps and reads: the parameters in some state, the step, and
    the quantities records are made of (``*batch`` the trailing grid axes).

    Fields:
        state0: the initial state: ``theta`` ``[L_max, d, *batch]`` for the general
            network (:func:`samflow.discrete.general_network`), one layer ``u``
            ``[d, *batch]`` for the balanced one (:func:`samflow.balanced.network`).
        step: ``(t, state, key) -> (state, lprime_abs)``: step number ``t`` (from 0),
            this step's PRNG key (None unless the rule is random); ``lprime_abs``
            ``[*batch]`` is the rescaling factor of the step (docs/theory/flows.md#rescaled-flows).
        beta: ``state -> [d, *batch]`` the predictor.
        loss: ``state -> [*batch]`` the loss.
        theta: ``state -> [L_max, d, *batch]`` the parameters.
        finite: ``state -> bool [*batch]``: the parameters, beta and (for a rule that
            perturbs) the perturbed point's margins are finite.
    """

    state0: Any
    step: Callable
    beta: Callable
    loss: Callable
    theta: Callable
    finite: Callable


class Interval(NamedTuple):
    """One record interval, as ``advance`` gets it (every field ``[]`` int).

    Fields:
        index: ``r``: the interval from record ``r`` to record ``r + 1``.
        start: the step number before its first step, ``record_steps[r]``.
        length: how many steps it takes, ``record_steps[r + 1] - record_steps[r]``.
    """

    index: Array
    start: Array
    length: Array


class Recorded(NamedTuple):
    """What :func:`record_loop` returns.

    Fields:
        state: the state after the last step.
        records: ``record``'s output, every leaf stacked over records ``[T, ...]``.
        failed_step: ``[*batch]`` int, step number of the first record at which
            ``finite`` was False, -1 if none (a scalar -1 without ``finite``).
    """

    state: State
    records: Records
    failed_step: Array


def take_steps(
    one_step: Callable[[Array, State], State],
    state: State,
    start: Array,
    length: Array,
    *,
    unroll: int = 1,
    after: Callable[[Array, State], State] | None = None,
) -> State:
    """``state`` after ``one_step(t, state)`` for ``t = start, ..., start + length - 1``.

    ``t`` is the number of the step (from 0; step ``t`` makes the state of step
    ``t + 1``): a random rule draws from it. ``unroll`` steps per iteration of the
    ``fori_loop``, then the rest one by one (static; unrolling lets XLA fuse across
    steps, which the diagonal engine measures). ``after(n, state)``, if given, sees the
    state after each iteration, ``n`` the steps taken so far (a step observer).
    """
    watch = after or (lambda n, s: s)
    if unroll == 1:
        return lax.fori_loop(
            0, length, lambda i, s: watch(start + i + 1, one_step(start + i, s)), state
        )

    def unrolled(i, s):
        first = start + i * unroll
        for j in range(unroll):
            s = one_step(first + j, s)
        return watch(first + unroll, s)

    state = lax.fori_loop(0, length // unroll, unrolled, state)
    rest = start + length // unroll * unroll
    return lax.fori_loop(
        0, length % unroll, lambda i, s: watch(rest + i + 1, one_step(rest + i, s)), state
    )


def record_loop(
    advance: Callable[[State, Interval], State],
    record: Callable[[State], tuple[State, Records]],
    state: State,
    record_steps: Array,
    *,
    start: Callable[[State], tuple[State, Records]] | None = None,
    finite: Callable[[State, Records], Array] | None = None,
) -> Recorded:
    """Run from ``state`` (at step ``record_steps[0] = 0``), recording at ``record_steps``.

    Args:
        advance: ``(state, interval) -> state`` after the interval's steps.
        record: ``state -> (state, records)`` at a record; it may update the state
            (an observer's tracker) and returns a pytree of arrays, stacked over records.
        state: the initial state (any pytree; its structure stays the same).
        record_steps: ``[T]`` int step numbers, ``T >= 1``, starting at 0.
        start: ``state -> (state, records)`` for record 0 when it differs from
            ``record`` (an observer's ``start``). Without it ``record`` takes record 0
            too and appears once in the program: the scan records, then advances under
            a ``lax.cond`` that skips the last interval (half the compile time for an
            expensive ``record``, as the image metrics are).
        finite: ``(state, records) -> bool [*batch]``, whether a record is sound; the
            first that is not sets ``failed_step``.
    """
    n_records = record_steps.shape[0]
    index = jnp.arange(n_records, dtype=record_steps.dtype)
    lengths = jnp.diff(record_steps)

    def failed_at(failed, state, recs, at):
        if finite is None:
            return failed
        return jnp.where((failed < 0) & ~finite(state, recs), at, failed)

    def never_failed(state, recs):
        shape = () if finite is None else jnp.shape(finite(state, recs))
        return jnp.full(shape, -1, record_steps.dtype)

    if start is not None:
        state, first = start(state)
        failed = failed_at(never_failed(state, first), state, first, record_steps[0])

        def interval(carry, xs):
            state, failed = carry
            state = advance(state, Interval(*xs))
            state, recs = record(state)
            return (state, failed_at(failed, state, recs, xs[1] + xs[2])), recs

        (state, failed), recs = lax.scan(
            interval, (state, failed), (index[:-1], record_steps[:-1], lengths)
        )
        recs = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]), first, recs)
        return Recorded(state, recs, failed)

    def record_then_advance(carry, xs):
        state, failed = carry
        r, at, length = xs
        state, recs = record(state)
        failed = failed_at(failed, state, recs, at)
        state = lax.cond(
            r < n_records - 1, lambda s: advance(s, Interval(r, at, length)), lambda s: s, state
        )
        return (state, failed), recs

    shapes = jax.eval_shape(lambda s: never_failed(s, record(s)[1]), state)
    failed = jnp.full(shapes.shape, -1, record_steps.dtype)
    # The last record advances nothing: its length is a placeholder.
    lengths = jnp.concatenate([lengths, jnp.zeros(1, lengths.dtype)])
    (state, failed), recs = lax.scan(
        record_then_advance, (state, failed), (index, record_steps, lengths)
    )
    return Recorded(state, recs, failed)
