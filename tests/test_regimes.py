"""The streaming regime summaries against the plain-loop reference of
docs/theory/regimes.md#definitions."""

from __future__ import annotations

import numpy as np
import pytest

from samflow.classification import Classification
from samflow.precision import precision
from samflow.regimes import FLAG_VALUES, MAX_LEADERS, summarize
from tests import reference


def random_trajectories(n: int, T: int, d: int, seed: int = 0):
    """Trajectories that hit every branch: ties, collapse, shrinking, direct, sequential,
    NaN and overflow inside the horizon, horizons cut short, convergence."""
    rng = np.random.default_rng(seed)
    beta = np.empty((n, T, d))
    for i in range(n):
        start = np.full(d, rng.choice([0.5, 1.0]))
        growth = rng.uniform(-0.6, 0.6, size=d)
        t = np.arange(T)[:, None]
        beta[i] = start * np.exp(growth * t * rng.choice([0.3, 1.0]))
        kind = i % 8
        if kind == 1:  # collapse
            beta[i, 1:] *= np.geomspace(1e-1, 1e-5, T - 1)[:, None]
        elif kind == 2:  # tied records, and a permanent leader change
            beta[i, 2:4] = beta[i, 2:4, :1]
            beta[i, T // 2 :, -1] *= 10.0
        elif kind == 3:  # converged: the last records repeat
            beta[i, -3:] = beta[i, -3]
        elif kind == 4:  # NaN inside the horizon
            beta[i, rng.integers(1, T), rng.integers(d)] = np.nan
        elif kind == 5:  # overflow
            beta[i, rng.integers(1, T)] = np.inf
        elif kind == 6:  # coordinate d leads from the first record on
            beta[i, 1:, -1] = 5.0 * np.abs(beta[i, 1:]).max(axis=1) + 1.0
        elif kind == 7 and d > 1:  # the major (1 + i % d) leads, loses the lead, regains it
            m, other = i % d, (i + 1) % d
            big = 5.0 * np.abs(beta[i]).max() + 1.0
            beta[i, 1:4, m], beta[i, 4:7, other], beta[i, 7:, m] = big, 2 * big, 3 * big
    tau = np.cumsum(rng.uniform(0.0, 1.0, size=(n, T)), axis=1)
    tau[:, 0] = 0.0
    loss = np.log1p(np.exp(-np.cumsum(rng.uniform(0, 0.5, size=(n, T)), axis=1)))
    valid = np.ones((n, T), bool)
    for i in range(0, n, 3):  # a horizon cut short: later records are invalid (and may be junk)
        stop = rng.integers(1, T)
        valid[i, stop:] = False
        beta[i, stop:] = np.where(rng.random() < 0.5, np.inf, beta[i, stop:])
    failed = rng.random(n) < 0.05
    return beta, tau, loss, valid, failed


FIELDS = (
    "regime",
    "limit_coord",
    "unresolved_reason",
    "stop_leader",
    "first_amplified",
    "dominant",
    "n_handoffs",
    "n_leaders",
    "leader_path",
    "takeover_tau",
    "plateau_end_tau",
    "final_direction",
    "beta_norm",
)


@pytest.mark.parametrize("d", [1, 3, 5])
def test_batched_summaries_match_the_reference_loop(d):
    n, T = 240, 12
    beta, tau, loss, valid, failed = random_trajectories(n, T, d, seed=d)
    major = 1 + np.arange(n) % d  # every coordinate is the major of some (kind 7 uses it)
    # every code of samflow.fate, settled (the path names the regime) most often
    fate = np.random.default_rng(d).choice([0, 1, 1, 1, 1, 2, 3, 4], n)
    with precision("float64"):
        # Batch-last, as a discrete sweep tile: [T, d, n], [T, n], [n].
        got = summarize(
            np.moveaxis(beta, 0, -1),
            tau.T,
            loss.T,
            valid.T,
            failed,
            Classification(plateau_fraction=0.7),
            major=major,
            fate=fate,
            collapse_by_records=True,
        )
        got = {k: np.moveaxis(np.asarray(v), -1, 0) for k, v in got.items()}
    regimes = set()
    for i in range(n):
        want = reference.summarize(
            beta[i],
            tau[i],
            loss[i],
            valid[i],
            failed[i],
            plateau_fraction=0.7,
            major=major[i],
            max_leaders=MAX_LEADERS,
            fate=fate[i],
            collapse_by_records=True,
        )
        regimes.add(want["regime"])
        for name in FIELDS:
            np.testing.assert_allclose(
                got[name][i], want[name], rtol=1e-12, err_msg=f"{name}, trajectory {i}"
            )
    assert regimes >= ({-1, 0, 1, 3} if d == 1 else set(FLAG_VALUES))


def test_one_trajectory_without_batch_axes_matches_its_batched_self():
    beta, tau, loss, valid, failed = random_trajectories(16, 10, 3, seed=7)
    with precision("float64"):
        major = 1 + np.arange(16) % 3
        batched = summarize(np.moveaxis(beta, 0, -1), tau.T, loss.T, valid.T, failed, major=major)
        for i in range(16):
            one = summarize(beta[i], tau[i], loss[i], valid[i], failed[i], major=major[i])
            for name, value in one.items():
                np.testing.assert_array_equal(
                    np.asarray(value), np.asarray(batched[name])[..., i], err_msg=name
                )
