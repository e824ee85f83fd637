"""Regime classification of a trajectory (THEORY section 6).

For records ``beta(tau_1..tau_T)`` (record 0, ``tau = 0``, is the initial state and is
excluded) and only records before the horizon actually reached (``valid``):

- dominant coordinate ``D(tau) = argmax_j |beta_j(tau)|``, labelled 1..d; a record
  where every ``|beta_j|`` is exactly equal (a tie, e.g. beta = 0 after a collapse, or
  a uniform start that has not moved in the dtype's resolution) has no dominant
  coordinate (``D = 0``) and does not count for sequential or direct;
- ``FAILED`` (-1): a NaN or overflow appeared, or the solver failed;
- ``COLLAPSE`` (1): ``||beta(tau_T)||_1 < collapse_factor * ||beta(0)||_1``;
- ``UNRESOLVED`` (0): not collapsed, yet ``||beta(tau_T)||_1 < ||beta(0)||_1``: beta is
  still below its initial size at the horizon and may go on to collapse or recover;
  also when no record inside the horizon has a dominant coordinate;
- ``DIRECT`` (3): ``D = d`` at every recorded tau;
- ``SEQUENTIAL`` (2): otherwise, i.e. not collapsed and ``D != d`` at some tau.

The functions are written in ``jax.numpy`` so that sweeps vmap them inside the
compiled program; they accept NumPy arrays too.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
from jax import Array

FAILED, UNRESOLVED, COLLAPSE, SEQUENTIAL, DIRECT = -1, 0, 1, 2, 3
FLAG_VALUES = (FAILED, UNRESOLVED, COLLAPSE, SEQUENTIAL, DIRECT)
FLAG_MEANINGS = "failed unresolved collapse sequential direct"
NAMES = dict(zip(FLAG_VALUES, FLAG_MEANINGS.split(), strict=True))
UNRESOLVED_HOW = (
    "unresolved: not collapsed, but ||beta||_1 at the horizon is still below its "
    "initial value (it may yet collapse or recover); or no record inside the horizon "
    "has a dominant coordinate (all |beta_j| tied)"
)
LIMIT_COLLAPSED, LIMIT_FINITE = 0, -2


def dominant(beta: Array) -> Array:
    """``D = argmax_j |beta_j| + 1`` over the last axis, ``[..., d] -> [...]`` int."""
    return jnp.argmax(jnp.abs(beta), axis=-1) + 1


class Classification(NamedTuple):
    """Per-trajectory summary (a sweep adds leading grid axes).

    Fields:
        regime: int, one of ``FLAG_VALUES``.
        limit_coord: int, D at the horizon; 0 if collapsed to 0, -2 if beta converged
            to a finite nonzero point (relative change below ``converged_rtol``
            over the last two records).
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
    valid: Array | None = None,
    failed: Array | bool = False,
    collapse_factor: float = 1e-3,
    converged_rtol: float = 1e-9,
    beta_end: Array | None = None,
    ended_at_blowup: Array | bool = False,
) -> Classification:
    """Classify one trajectory ``beta`` ``[T, d]`` recorded at increasing times.

    ``valid`` ``[T]`` marks the records inside the horizon reached (default: the
    finite ones); ``failed`` flags a numerical failure found elsewhere (solver).
    When the run ended at a finite-time blow-up (``ended_at_blowup``), the limit
    coordinate is read from ``beta_end`` ``[d]``, the state at the blow-up event:
    the leader at the last record can still lose the race.
    """
    T, d = beta.shape
    finite = jnp.all(jnp.isfinite(beta), axis=-1)
    valid = finite if valid is None else jnp.asarray(valid) & finite
    failed = jnp.asarray(failed) | jnp.any(~finite & (jnp.asarray(valid) | (jnp.arange(T) == 0)))
    later = valid & (jnp.arange(T) > 0)
    horizon = jnp.max(jnp.where(valid, jnp.arange(T), 0))
    norm = jnp.sum(jnp.abs(beta), axis=-1)
    norm0, normT = norm[0], norm[horizon]
    magnitude = jnp.abs(jnp.where(finite[:, None], beta, 0.0))
    tied = jnp.max(magnitude, axis=-1) == jnp.min(magnitude, axis=-1)
    ranked = later & ~tied
    D = jnp.where(ranked, dominant(magnitude), 0)

    collapsed = normT < collapse_factor * norm0
    shrinking = normT < norm0
    direct = jnp.all(jnp.where(ranked, D == d, True))
    any_later = jnp.any(later)
    regime = jnp.select(
        [failed, collapsed & any_later, ~jnp.any(ranked) | shrinking, direct],
        [FAILED, COLLAPSE, UNRESOLVED, DIRECT],
        SEQUENTIAL,
    )
    prev = jnp.max(jnp.where(valid & (jnp.arange(T) < horizon), jnp.arange(T), 0))
    change = jnp.sum(jnp.abs(beta[horizon] - beta[prev])) / jnp.maximum(normT, 1e-300)
    converged = (prev < horizon) & (change < converged_rtol)
    limit = jnp.select(
        [regime == COLLAPSE, converged, regime == FAILED],
        [LIMIT_COLLAPSED, LIMIT_FINITE, 0],
        D[horizon],
    )
    if beta_end is not None:
        racing = jnp.asarray(ended_at_blowup) & (regime != FAILED) & (regime != COLLAPSE)
        limit = jnp.where(racing, dominant(beta_end), limit)
    first = jnp.where(jnp.any(ranked), D[jnp.argmax(ranked)], 0)
    return Classification(
        regime=regime.astype(jnp.int8),
        limit_coord=limit.astype(jnp.int32),
        first_amplified=first.astype(jnp.int32),
        dominant=D.astype(jnp.int32),
        horizon=horizon,
    )


def summarize(
    beta: Array,
    tau: Array,
    loss: Array,
    valid: Array,
    failed: Array | bool = False,
    collapse_factor: float = 1e-3,
    plateau_fraction: float = 0.5,
    beta_end: Array | None = None,
    ended_at_blowup: Array | bool = False,
) -> dict[str, Array]:
    """Per-trajectory summaries a sweep keeps (``beta`` ``[T, d]``, the rest ``[T]``).

    Returns the :class:`Classification` fields plus

    - ``beta_norm`` ``[T]``: ``||beta||_1`` (NaN outside the horizon);
    - ``final_direction`` ``[d]``: ``beta / ||beta||_1`` at the horizon;
    - ``takeover_tau`` ``[d]``: first recorded tau at which coordinate j is dominant
      (NaN if never); the hand-offs are where ``D`` changes, i.e. these times for the
      coordinates that take over after the first;
    - ``n_handoffs``: number of changes of ``D`` between consecutive valid records;
    - ``plateau_end_tau``: first recorded tau at which the loss falls to
      ``plateau_fraction`` times its initial value (NaN if never: a plateau that
      outlasts the horizon).

    ``beta_end`` and ``ended_at_blowup`` are passed on to :func:`classify`.
    """
    T, d = beta.shape
    c = classify(
        beta,
        valid,
        failed,
        collapse_factor,
        beta_end=beta_end,
        ended_at_blowup=ended_at_blowup,
    )
    later = c.dominant > 0
    norm = jnp.sum(jnp.abs(beta), axis=-1)
    hit = later[:, None] & (c.dominant[:, None] == jnp.arange(1, d + 1)[None, :])
    takeover = jnp.where(jnp.any(hit, axis=0), tau[jnp.argmax(hit, axis=0)], jnp.nan)
    prev_valid = jnp.concatenate([jnp.zeros((1,), bool), later[:-1]])
    prev_D = jnp.concatenate([jnp.zeros((1,), c.dominant.dtype), c.dominant[:-1]])
    n_handoffs = jnp.sum(later & prev_valid & (c.dominant != prev_D))
    low = valid & (loss <= plateau_fraction * loss[0]) & (jnp.arange(T) > 0)
    plateau = jnp.where(jnp.any(low), tau[jnp.argmax(low)], jnp.nan)
    normT = norm[c.horizon]
    direction = jnp.where(normT > 0, beta[c.horizon] / jnp.where(normT > 0, normT, 1.0), 0.0)
    return {
        "regime": c.regime,
        "limit_coord": c.limit_coord,
        "first_amplified": c.first_amplified,
        "dominant": c.dominant,
        "beta_norm": jnp.where(valid, norm, jnp.nan),
        "loss": jnp.where(valid, loss, jnp.nan),
        "final_direction": direction,
        "takeover_tau": takeover,
        "n_handoffs": n_handoffs.astype(jnp.int32),
        "plateau_end_tau": plateau,
    }
