"""Discrete runs: ``init`` + ``step`` + ``lax.scan``, recorded at a schedule.

A run is a scan over *record intervals*; inside each interval a ``fori_loop`` takes
the steps. The schedule (which step indices are recorded) is a concrete array shared
by every trajectory of a sweep, so vmapping over grid points never batches the loop
bounds. Record 0 is the initial state (step 0, tau 0).

Rescaled time (THEORY section 3): for one data point ``tau_{t+1} = tau_t + eta |l'(z~_t)|``
with ``z~`` the margin at the perturbed point; for n > 1 the loss does not factor out
and ``tau`` is the plain time ``eta * t``.

Numerical failure: at every record the state is checked; the first record whose
parameters are not all finite sets ``failed_step`` (-1 while none failed).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from samflow.errors import InputError
from samflow.model import Problem, ascent_direction, beta, grad_and_aux, layer_mask, loss
from samflow.precision import precision
from samflow.regimes import Tracker, start, track
from samflow.steps import PerturbationRule, get_rule, step


class Trajectory(NamedTuple):
    """A recorded discrete run; ``*batch`` are the trailing grid axes of a batched run.

    Fields:
        step: ``[T]`` int, step index of each record (``step[0] = 0``).
        tau: ``[T, *batch]`` rescaled time (n = 1) or ``eta * step`` (n > 1).
        beta: ``[T, d, *batch]`` predictor.
        loss: ``[T, *batch]`` loss at the recorded parameters (NaN where beta is not
            finite, with ``track_regimes``).
        theta: ``[T, L_max, d, *batch]`` parameters, or None unless requested.
        theta_final: ``[L_max, d, *batch]`` parameters after the last step.
        failed_step: ``[*batch]`` int, step of the first non-finite record, -1 if none.
        tracker: with ``track_regimes``, the :class:`samflow.regimes.Tracker` after
            the last record; :func:`samflow.regimes.finish` reads it with ``tracked``.
        tracked: with ``track_regimes``, the scalars of every record: ``dominant``,
            ``beta_norm``, ``loss`` ``[T, *batch]`` (the last two NaN where not finite).
    """

    step: Array
    tau: Array
    beta: Array | None
    loss: Array
    theta: Array | None
    theta_final: Array
    failed_step: Array
    tracker: Tracker | None = None
    tracked: dict[str, Array] | None = None


def record_schedule(steps: int, every: int | None = None, n_log: int | None = None) -> np.ndarray:
    """Step indices to record: 0, then every ``every`` steps, or ``n_log`` log-spaced.

    The last step is always recorded. Returns a strictly increasing int64 array.
    """
    if int(steps) != steps or steps < 1:
        raise InputError(f"steps must be an integer >= 1, got {steps}")
    if every is not None and n_log is not None:
        raise InputError("give either a recording interval or a number of log-spaced records")
    if n_log is not None:
        if n_log < 1:
            raise InputError(f"number of records must be >= 1, got {n_log}")
        ticks = np.unique(np.round(np.geomspace(1, steps, n_log)).astype(np.int64))
    else:
        every = every or max(1, steps // 100)
        if every < 1:
            raise InputError(f"record-every must be >= 1, got {every}")
        ticks = np.arange(every, steps + 1, every, dtype=np.int64)
    ticks = np.union1d(ticks, [steps])
    return np.concatenate([[0], ticks]).astype(np.int64)


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
    track_regimes: bool = False,
    record_beta: bool = True,
) -> Trajectory:
    """Pure discrete run from ``theta0`` ``[L_max, d, *batch]``.

    One trajectory when ``theta0`` is ``[L_max, d]``; with trailing batch axes (the
    batch-last layout of :mod:`samflow.model`) every grid point runs in the same loop,
    and ``problem``, ``depth``, ``rho``, ``eta`` carry the same trailing axes (or
    broadcast). ``record_steps`` ``[T]`` starts at 0. Static: ``rule``, ``save_theta``,
    ``unroll`` (steps per iteration of the inner loop), ``track_regimes`` (reduce each
    record to the scalars of :func:`samflow.regimes.track` inside the loop, as sweeps
    do) and ``record_beta`` (keep ``beta`` at every record; without it ``beta`` is None).
    """
    batch_ndim = theta0.ndim - 2
    # No padding rows (depth is the static row count): nothing to mask.
    unpadded = isinstance(depth, int | np.integer) and depth == theta0.shape[0]
    mask = None if unpadded else layer_mask(depth, theta0.shape[0], theta0.dtype)

    def grad_fn(theta):
        return grad_and_aux(theta, problem, mask)

    # One data point: the ascent direction needs no loss derivative (THEORY section 3).
    ascent_fn = None
    if problem.X.shape[0] == 1:

        def ascent_fn(theta):
            return ascent_direction(theta, problem, mask)

    def one_step(carry):
        theta, tau = carry
        new, info = step(theta, grad_fn, rule, rho, eta, ascent_fn=ascent_fn, batch_ndim=batch_ndim)
        return new, tau + eta * info.aux_perturbed.lprime_abs

    def record(theta, tau):
        out = {"tau": tau, "loss": loss(theta, problem)}
        if record_beta:
            out["beta"] = beta(theta)
        if save_theta:
            out["theta"] = theta
        return out

    def all_finite(theta, tau):
        return jnp.all(jnp.isfinite(theta), axis=(0, 1)) & jnp.isfinite(tau)

    def unrolled(_, carry):
        for _ in range(unroll):
            carry = one_step(carry)
        return carry

    def steps(n_steps, carry):
        """``n_steps`` steps, ``unroll`` per loop iteration and the rest one by one."""
        carry = lax.fori_loop(0, n_steps // unroll, unrolled, carry)
        return lax.fori_loop(0, n_steps % unroll, lambda _, c: one_step(c), carry)

    def segment(carry, xs):
        theta, tau, failed, tracker = carry
        n_steps, at_step = xs
        theta, tau = steps(n_steps, (theta, tau))
        failed = jnp.where((failed < 0) & ~all_finite(theta, tau), at_step, failed)
        out = record(theta, tau)
        if track_regimes:
            tracker, out["tracked"] = track(tracker, beta(theta), out.pop("loss"))
        return (theta, tau, failed, tracker), out

    tau0 = jnp.zeros_like(theta0[0, 0])
    lengths = jnp.diff(record_steps)
    failed0 = jnp.where(all_finite(theta0, tau0), -1, 0).astype(record_steps.dtype)
    first = record(theta0, tau0)
    tracker0 = None
    if track_regimes:
        tracker0, first["tracked"] = start(beta(theta0), first.pop("loss"))
    (theta_f, _, failed, tracker), recs = lax.scan(
        segment, (theta0, tau0, failed0, tracker0), (lengths, record_steps[1:])
    )
    recs = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]), first, recs)
    return Trajectory(
        step=record_steps,
        tau=recs["tau"],
        beta=recs.get("beta"),
        loss=recs["tracked"]["loss"] if track_regimes else recs["loss"],
        theta=recs.get("theta"),
        theta_final=theta_f,
        failed_step=failed,
        tracker=tracker,
        tracked=recs.get("tracked"),
    )


_simulate_jit = jax.jit(simulate, static_argnames=("rule", "save_theta"))


def check_rates(method: str, rho: float | None, eta: float | None = None) -> float:
    """Validated ``rho`` for ``method`` (0 for GD); checks ``eta > 0`` when given."""
    rule = get_rule(method)
    if eta is not None and not (np.isfinite(eta) and eta > 0):
        raise InputError(f"eta must be a finite number > 0, got {eta}")
    if rule.direction is None:
        return 0.0 if rho is None else float(rho)
    if rho is None:
        raise InputError(f"method {method} needs --rho")
    if not np.isfinite(rho) or rho < 0:
        raise InputError(f"rho must be a finite number >= 0, got {rho}")
    return float(rho)


def run_discrete(
    problem: Problem,
    theta0: np.ndarray,
    depth: int,
    method: str,
    rho: float | None,
    eta: float,
    record_steps: np.ndarray,
    save_theta: bool = False,
    dtype: str = "float64",
) -> Trajectory:
    """Run ``method`` from ``theta0`` ``[L_max, d]`` and return NumPy arrays.

    ``depth`` real layers (rows beyond are padding). Computed in ``dtype``.
    """
    rule = get_rule(method)
    rho = check_rates(method, rho, eta)
    with precision(dtype) as dt:
        prob = Problem(jnp.asarray(problem.X, dt), jnp.asarray(problem.y, dt))
        traj = _simulate_jit(
            jnp.asarray(theta0, dt),
            prob,
            depth,
            jnp.asarray(rho, dt),
            jnp.asarray(eta, dt),
            jnp.asarray(record_steps, jnp.int64 if dt == np.float64 else jnp.int32),
            rule=rule,
            save_theta=save_theta,
        )
        return jax.tree_util.tree_map(np.asarray, traj)
