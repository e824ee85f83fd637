"""Discrete runs: ``init`` + ``step`` + the record loop, recorded at a schedule.

A run is :func:`samflow.loop.record_loop`, a scan over *record intervals*; inside each
interval a ``fori_loop`` takes the steps. The schedule (which step indices are
recorded) is a concrete array shared by every trajectory of a sweep, so a batched run
never batches the loop bounds. Record 0 is the initial state (step 0, tau 0).

Rescaled time (docs/theory/flows.md#rescaled-flows): for one data point ``tau_{t+1} = tau_t + eta
|l'(z~_t)|`` with ``z~`` the margin at the perturbed point; for n > 1 the loss does not factor out
and ``tau`` is the plain time ``eta * t``.

Numerical failure: at every record the state is checked; the first record whose
parameters, predictor or loss are not all finite sets ``failed_step`` (-1 while none
failed).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from samflow.balanced import network as balanced_network
from samflow.loop import Network, record_loop
from samflow.model import DEFAULT, Model, Problem, layer_mask
from samflow.rules import PerturbationRule
from samflow.steps import Groups, step
from samflow.stochastic import Sampling, draws, group


class Observer(NamedTuple):
    """Reduces each record inside the step loop, so no ``[T, d]`` trajectory is kept.

    Fields:
        start: ``(beta0, loss0) -> (state, scalars)`` at record 0.
        track: ``(state, beta, loss) -> (state, scalars)`` at every later record;
            ``scalars`` is a dict of ``[*batch]`` arrays, stacked over records.
    :data:`samflow.regimes.OBSERVER` is the regime classifier's.
    """

    start: Callable
    track: Callable


class StepObserver(NamedTuple):
    """Watches every step (not only the records), carrying a small state.

    Fields:
        start: ``(beta0, tau0) -> state`` at step 0.
        look: ``(state, lead, beta) -> (state, lead, new)`` after every step, inside
            the runner's fused loop (cheap, branchless): ``lead`` ``[*batch]`` the
            running leader (None at a block's first step: the state's), ``beta``
            ``[d, *batch]`` after the step; ``new`` the leader that took over after
            this step (0: none).
        write: ``(state, news, taus, first) -> state`` after a block of steps (the
            runner's unrolled loop body), with each step's ``new`` and ``tau``
            (tuples), ``first`` the steps taken before the block; :func:`simulate`
            calls it only where some ``new`` of the block is nonzero for some
            trajectory of the batch (a branch for the whole batch).
    :func:`samflow.regimes.path_observer` finds the hand-offs of the leader with it.
    """

    start: Callable
    look: Callable
    write: Callable


class Trajectory(NamedTuple):
    """A recorded discrete run; ``*batch`` are the trailing grid axes of a batched run.

    Fields:
        step: ``[T]`` int, step index of each record (``step[0] = 0``).
        tau: ``[T, *batch]`` rescaled time (n = 1) or ``eta * step`` (n > 1).
        beta: ``[T, d, *batch]`` predictor.
        loss: ``[T, *batch]`` loss at the recorded parameters (with an observer: the
            observer's ``loss`` scalar, e.g. NaN where beta is not finite).
        theta: ``[T, L_max, d, *batch]`` parameters, or None unless requested.
        theta_final: ``[L_max, d, *batch]`` parameters after the last step.
        failed_step: ``[*batch]`` int, step of the first non-finite record, -1 if none.
        tracker: with an observer, its state after the last record (the regime
            classifier's :func:`samflow.regimes.finish` reads it with ``tracked``).
        tracked: with an observer, its scalars of every record ``[T, *batch]``.
        watched: with a step observer, its state after the last step (of the
            extension, with one).
        summaries: with ``summaries``, its dict of every record ``[T, *batch]``.
        stop_step: ``[*batch]`` int, the step the run ended at: the last record's,
            or with an :class:`Extension` the step at which ``decided`` first held
            (checked every :data:`EXTENSION_CHUNK` steps), or the cap.
        beta_end: ``[d, *batch]`` beta at ``stop_step`` (with an extension; else
            None).
    """

    step: Array
    tau: Array
    beta: Array | None
    loss: Array
    theta: Array | None
    theta_final: Array
    failed_step: Array
    tracker: Any = None
    tracked: dict[str, Array] | None = None
    watched: Any = None
    summaries: dict[str, Array] | None = None
    stop_step: Array | None = None
    beta_end: Array | None = None


EXTENSION_CHUNK = 512
"""Steps an :class:`Extension` takes between two checks of ``decided``: a run stops at
most this many steps after its fate is decided; the check (a certificate of a few
operations per coordinate) costs far less than the steps."""


class Extension(NamedTuple):
    """A run taken on past its last record, unrecorded, to its fate (the discrete
    counterpart of :attr:`samflow.Flow.tau_cap`).

    Fields:
        cap: the step at which the run ends in any case (an int, > the last record).
        decided: ``(beta, watched) -> bool [*batch]``: whether a trajectory's future is
            decided at the state of ``beta`` ``[d, *batch]``, ``watched`` the step
            observer's state there. Checked at the last record and every
            :data:`EXTENSION_CHUNK` steps after it: a trajectory for which it holds,
            or whose state is no longer finite, stops (its state and ``watched`` stay
            as they were at its last check), and the loop ends when every trajectory
            of the batch has stopped or the cap is reached.
    """

    cap: Any
    decided: Callable


def row_mask(theta0: Array, depth: Array | int) -> Array | None:
    """The layer mask of ``theta0`` ``[L_max, d, *batch]`` (:func:`samflow.model.layer_mask`),
    or None where ``depth`` is the static row count: no row is padding."""
    if isinstance(depth, int | np.integer) and depth == theta0.shape[0]:
        return None
    return layer_mask(depth, theta0.shape[0], theta0.dtype)


def general_network(
    theta0: Array,
    problem: Problem,
    depth: Array | int,
    rho: Array | float,
    eta: Array | float,
    rule: PerturbationRule,
    model: Model = DEFAULT,
) -> Network:
    """Every layer of ``theta0`` ``[L_max, d, *batch]``, stepped by :func:`samflow.steps.step`
    (rows beyond ``depth`` are padding: masked, unless ``depth`` is the static row
    count); ``model`` the parametrisation and loss."""
    beta = model.beta
    batch_ndim = theta0.ndim - 2
    mask = row_mask(theta0, depth)

    def grad_fn(theta):
        return model.grad_and_aux(theta, problem, mask)

    # One data point: the ascent direction needs no loss derivative
    # (docs/theory/flows.md#rescaled-flows).
    ascent_fn = None
    if problem.X.shape[0] == 1 and model.margin_loss:

        def ascent_fn(theta):
            return model.ascent_direction(theta, problem, mask)

    def one_step(t, theta, key):
        new, info = step(
            theta, grad_fn, rule, rho, eta,
            ascent_fn=ascent_fn, batch_ndim=batch_ndim, key=key, t=t,
        )  # fmt: skip
        return new, info.aux_perturbed.lprime_abs

    def finite(theta):
        # beta too: finite layers can still multiply to an overflow.
        ok = jnp.all(jnp.isfinite(theta), axis=(0, 1))
        ok = ok & jnp.all(jnp.isfinite(beta(theta)), axis=0)
        if rule.direction is None or rule.random:
            return ok
        # The perturbed point too: beyond the dtype's range its margin overflows and the
        # gradient underflows to zero, a stall that would pass for a limit. Checked at each
        # record, not each step (a per-step check cost 40% of a sweep).
        if ascent_fn is not None and rule.scale_invariant:
            ascent = ascent_fn(theta)
        else:
            ascent = grad_fn(theta)[0]
        perturbed = rule.perturbed(theta, ascent, rho, batch_ndim)
        return ok & jnp.all(jnp.isfinite(model.predictions(perturbed, problem)), axis=0)

    return Network(
        state0=theta0,
        step=one_step,
        beta=beta,
        loss=lambda theta: model.value(theta, problem),
        theta=lambda theta: theta,
        finite=finite,
    )


def simulate(
    theta0: Array,
    problem: Problem,
    depth: Array | int,
    rho: Array | float,
    eta: Array | float,
    record_steps: Array,
    *,
    rule: PerturbationRule,
    save_theta: bool = False,
    unroll: int = 1,
    observer: Observer | None = None,
    step_observer: StepObserver | None = None,
    record_beta: bool = True,
    key: Array | None = None,
    model: Model = DEFAULT,
    summaries: Callable | None = None,
    balanced_step: bool = False,
    sampling: Sampling | None = None,
    point_keys: Array | None = None,
    extension: Extension | None = None,
) -> Trajectory:
    """Pure discrete run from ``theta0`` ``[L_max, d, *batch]``.

    One trajectory when ``theta0`` is ``[L_max, d]``; with trailing batch axes (the
    batch-last layout of :mod:`samflow.model`) every grid point runs in the same loop,
    and ``problem``, ``depth``, ``rho``, ``eta`` carry the same trailing axes (or
    broadcast). ``record_steps`` ``[T]`` starts at 0. Static: ``rule``, ``save_theta``,
    ``unroll`` (steps per iteration of the inner loop), ``step_observer`` (called after
    every step, e.g. to find the hand-offs of the leading coordinate between the
    records), ``observer`` (reduce each
    record inside the loop, as sweeps do with :data:`samflow.regimes.OBSERVER`) and
    ``record_beta`` (keep ``beta`` at every record; without it ``beta`` is None).
    ``key``: the PRNG key of a random rule (step ``t`` draws with ``fold_in(key, t)``;
    default ``jax.random.key(0)``); other rules ignore it. ``model``: the
    parametrisation and loss (static; default the paper's). ``summaries``: static
    ``(theta, mask) -> dict`` of ``[*batch]`` values taken at every record
    (:func:`samflow.engine.record_summaries`).
    ``balanced_step`` (static): every real layer of ``theta0`` is the same vector, the rule
    treats layers alike (:attr:`samflow.rules.PerturbationRule.treats_layers_alike`) and
    the model is the paper's: run that one vector (:func:`samflow.balanced.network`; the
    caller checks the start, :func:`samflow.balanced.applies`).

    Stochastic steps (docs/theory/stochastic.md#stochastic-steps): ``sampling`` (static,
    :class:`samflow.stochastic.Sampling`) draws each step's minibatch and label noise
    with :func:`samflow.stochastic.draws` from ``point_keys``, the PRNG keys of the
    trajectories (a key array of shape ``[*batch]``, one per trajectory, so that a
    trajectory's draws do not depend on the batch it runs in; default
    ``jax.random.key(0)`` for all), and cuts it into m-sharpness groups. ``tau`` is
    then the plain time ``eta * step``; the recorded loss is the full training loss.
    They take the general step (``balanced_step`` must be False).

    ``extension`` (an :class:`Extension`, static but for its cap): after the last
    record the run goes on, unrecorded, until its fate is decided or the cap; the step
    observer follows it, ``theta_final`` and the records stay those of the last record,
    ``stop_step`` and ``beta_end`` say where it ended.
    """
    if balanced_step:
        if not model.closed_forms or sampling is not None:
            raise ValueError("the balanced step runs the paper's model, full batch, only")
        net = balanced_network(theta0, problem, depth, rho, eta, rule)
    else:
        net = general_network(theta0, problem, depth, rho, eta, rule, model)
    mask = row_mask(theta0, depth)

    def one_step(t, carry):
        state, tau = carry
        step_key = None if key is None else jax.random.fold_in(key, t)
        if sampling is not None:
            return stochastic_step(t, state, tau, step_key)
        new, lprime_abs = net.step(t, state, step_key)
        return new, tau + eta * lprime_abs

    batch_ndim = theta0.ndim - 2
    batch_shape = theta0.shape[2:]

    def step_problem(t):
        """Step ``t``'s examples: the minibatch (``[batch, d, *batch]``) with its noisy labels."""
        keys = jnp.broadcast_to(point_keys, batch_shape).reshape(-1)
        index, xi = jax.vmap(lambda k: draws(k, t, sampling, theta0.dtype))(keys)

        def per_point(a):  # [B, k] -> [k, *batch]
            return jnp.moveaxis(a.reshape(*batch_shape, a.shape[-1]), -1, 0)

        X, y = problem.X, problem.y
        if xi is not None:
            y = y + sampling.label_noise * per_point(xi)
        if index is not None:
            index = per_point(index)
            X = jnp.broadcast_to(X, (*X.shape[:2], *batch_shape))
            y = jnp.broadcast_to(y, (X.shape[0], *batch_shape))
            X = jnp.take_along_axis(X, index[:, None], axis=0)
            y = jnp.take_along_axis(y, index, axis=0)
        return Problem(X, y)

    def stochastic_step(t, theta, tau, step_key):
        sub = step_problem(t)
        groups = None
        if sampling.m is not None:
            groups = Groups(
                lambda th, prob: model.grad_and_aux(th, prob, mask),
                Problem(group(sub.X, sampling), group(sub.y, sampling)),
            )
        new, _ = step(
            theta, lambda th: model.grad_and_aux(th, sub, mask), rule, rho, eta,
            batch_ndim=batch_ndim, key=step_key, t=t, groups=groups,
        )  # fmt: skip
        return new, tau + eta

    def block(first, carry, k):
        """``k`` steps from step ``first``; the step observer sees each of them."""
        state, tau, watched = carry
        if step_observer is not None:
            lead, news, taus = None, [], []
        for j in range(k):
            state, tau = one_step(first + j, (state, tau))
            if step_observer is not None:
                watched, lead, new = step_observer.look(watched, lead, net.beta(state))
                news.append(new)
                taus.append(tau)
        if step_observer is None:
            return state, tau, watched
        # Hand-offs are rare: the path is written only in the blocks that have one.
        moved = jnp.any(functools.reduce(jnp.logical_or, [n > 0 for n in news]))
        write = functools.partial(step_observer.write, news=tuple(news), taus=tuple(taus))
        watched = lax.cond(moved, lambda w: write(w, first=first), lambda w: w, watched)
        return state, tau, watched

    def stepped(carry, start, length):
        """``carry`` after steps ``start, ..., start + length - 1``: ``unroll`` at a time
        (XLA fuses across them), then one by one."""
        carry = lax.fori_loop(
            0, length // unroll, lambda i, c: block(start + i * unroll, c, unroll), carry
        )
        rest = start + length // unroll * unroll
        return lax.fori_loop(0, length % unroll, lambda i, c: block(rest + i, c, 1), carry)

    def advance(carry, interval):
        inner, tracker = carry
        return stepped(inner, interval.start, interval.length), tracker

    def recorded_beta(state):
        b = net.beta(state)
        # The balanced beta is a power u^L: inlined into the observer's norm, XLA may fuse
        # |u*u| + ... into multiply-adds that skip the product's rounding, and the record
        # would summarise a beta one ulp away from the beta it keeps. Read it once.
        return lax.optimization_barrier(b) if balanced_step else b

    def kept(state, tau, b):
        out = {"tau": tau, "loss": net.loss(state)}
        if summaries is not None:
            out["summaries"] = summaries(net.theta(state), mask)
        if record_beta:
            out["beta"] = b
        if save_theta:
            out["theta"] = net.theta(state)
        return out

    def record(carry):
        (state, tau, watched), tracker = carry
        b = recorded_beta(state)
        out = kept(state, tau, b)
        if observer is not None:
            tracker, out["tracked"] = observer.track(tracker, b, out.pop("loss"))
        return ((state, tau, watched), tracker), out

    def start(carry):
        (state, tau, watched), _ = carry
        b = recorded_beta(state)
        out = kept(state, tau, b)
        tracker = None
        if observer is not None:
            tracker, out["tracked"] = observer.start(b, out.pop("loss"))
        return ((state, tau, watched), tracker), out

    def all_finite(carry, _):
        (state, tau, _), _ = carry
        # The loss too: a user's loss may be NaN where the state is finite. Taken from
        # the state, not the records (the observer's are NaN past the last real record);
        # the same operations as the recorded loss's, and no slower (measured: 256 points
        # of l2-SAM recording each of 4000 steps, 0.51 s against 0.52 s without it).
        return net.finite(state) & jnp.isfinite(tau) & jnp.isfinite(net.loss(state))

    if rule.random and key is None:
        key = jax.random.key(0)
    if sampling is not None and point_keys is None:
        point_keys = jax.random.key(0)
    state0 = net.state0
    tau0 = jnp.zeros_like(theta0[0, 0])
    watched0 = None if step_observer is None else step_observer.start(net.beta(state0), tau0)
    ((state_f, tau_f, watched), tracker), recs, failed = record_loop(
        advance,
        record,
        ((state0, tau0, watched0), None),
        record_steps,
        start=start,
        finite=all_finite,
    )
    last = record_steps[-1]
    stop_step, beta_end = jnp.full(tau_f.shape, last), None
    if extension is not None:
        stop_step, beta_end, watched = extend(
            stepped, net, (state_f, tau_f, watched), failed, last, extension
        )
    return Trajectory(
        step=record_steps,
        tau=recs["tau"],
        beta=recs.get("beta"),
        loss=recs["tracked"]["loss"] if observer is not None else recs["loss"],
        theta=recs.get("theta"),
        theta_final=net.theta(state_f),
        failed_step=failed,
        tracker=tracker,
        tracked=recs.get("tracked"),
        watched=watched,
        summaries=recs.get("summaries"),
        stop_step=stop_step,
        beta_end=beta_end,
    )


def extend(
    stepped: Callable,
    net: Network,
    carry: tuple,
    failed: Array,
    last: Array,
    extension: Extension,
) -> tuple[Array, Array, Any]:
    """The run from ``carry`` ``(state, tau, watched)`` at step ``last`` taken to its fate
    (:class:`Extension`): ``(stop_step, beta_end, watched)``; ``stepped(carry, start,
    length)`` takes the steps.

    A ``while_loop`` over chunks of :data:`EXTENSION_CHUNK` steps, all trajectories of
    the batch stepped together until every one has stopped (decided, failed in its
    records (``failed >= 0``), not finite) or the cap; a stopped trajectory's state is
    kept as it was where it stopped (one select per chunk), so what decided it stays.
    """

    def keep(stop, old, new):
        return jax.tree_util.tree_map(lambda a, b: jnp.where(stop, a, b), old, new)

    state, tau, watched = carry
    stopped0 = (failed >= 0) | extension.decided(net.beta(state), watched)
    cap = jnp.asarray(extension.cap, jnp.asarray(last).dtype)

    def running(c):
        t, _, stopped = c
        return (t < cap) & ~jnp.all(stopped)

    def chunk(c):  # the step each trajectory stopped at rides with its state
        t, (inner, stop_at), stopped = c
        state, tau, watched = inner
        length = jnp.minimum(EXTENSION_CHUNK, cap - t)
        new = stepped((state, tau, watched), t, length)
        stop = stopped | ~(net.finite(new[0]) & jnp.isfinite(new[1]))
        inner = keep(stop, inner, new)
        stop_at = jnp.where(stop, stop_at, t + length)
        decided = extension.decided(net.beta(inner[0]), inner[2])
        return t + length, (inner, stop_at), stop | decided

    start = jnp.asarray(last, cap.dtype)
    stop_at0 = jnp.full(stopped0.shape, start)
    _, ((state, _, watched), stop_at), _ = lax.while_loop(
        running, chunk, (start, ((state, tau, watched), stop_at0), stopped0)
    )
    return stop_at, net.beta(state), watched
