"""l2-SAM's take-over by a minor coordinate at L = 3 and 4 (docs/theory/regimes.md#minor-winner,
#takeover-at-every-depth): a coordinate ``t`` with the strictly largest rate variable
``x_t = mu_t u_t^(L-2)`` and ``u_t > sqrt(L) rho`` takes the lead within finite time and keeps
it, whoever leads now, and the major (a larger mu, so a smaller u) never leads. Checked
against a NumPy float64 loop of the balanced step map written here, read every step."""

from __future__ import annotations

import numpy as np
import pytest

import samflow
from samflow import fate as fates
from samflow.regimes import MAJOR_LOST, MINOR_END
from samflow.rules import SAM_L2
from tests.runs import certify


def _certify(u, mu, L, rho, eta):
    """l2-SAM's certificate over states u [n, d] (in logs), mu [n, d], in float64 as the
    engine evaluates it."""
    return certify(SAM_L2, np.log(u), mu, L, rho, eta)


def _leaders(u, mu, L, rho, eta, steps):
    """The leader (0-based) at the start and after every step [steps + 1, n] of the balanced
    l2-SAM step of the logistic loss: ``m = mu u^(L-1)``, ``w~ = u - rho m / sqrt(L sum
    m^2)``, ``u' = u + eta sigmoid(-z~) mu w~^(L-1)``, ``z~ = sum mu w~^L``; float64."""
    u = np.array(u, np.float64)
    out = np.zeros((steps + 1, len(u)), np.int64)
    out[0] = np.argmax(np.abs(u), axis=1)
    for t in range(steps):
        m = mu * u ** (L - 1)
        w = u - rho * m / np.sqrt(L * np.sum(m * m, axis=1, keepdims=True))
        z = np.minimum(np.sum(mu * w**L, axis=1, keepdims=True), 700.0)
        u = u + eta / (1 + np.exp(z)) * mu * w ** (L - 1)
        out[t + 1] = np.argmax(np.abs(u), axis=1)
    return out


def _states(rng, n, L, rho):
    """States [n, 4] with a minor ``t`` (index 1 or 2, mu sorted) above sqrt(L) rho with the
    strictly largest x, a coordinate of smaller mu leading with a smaller x, the rest small."""
    mu = np.sort(rng.uniform(0.3, 4.0, (n, 4)), axis=1)
    t = rng.integers(1, 3, n)
    rows = np.arange(n)
    u = np.exp(rng.uniform(np.log(0.01), np.log(0.1), (n, 4)))
    u[rows, t] = np.sqrt(L) * rho * rng.uniform(1.1, 2.0, n)
    lead = rng.integers(0, t)  # a smaller mu: ahead in u, behind in x
    x_t = mu[rows, t] * u[rows, t] ** (L - 2)
    top = (x_t / mu[rows, lead]) ** (1 / (L - 2))  # u_lead with x_lead = x_t
    u[rows, lead] = np.minimum(u[rows, t] * rng.uniform(1.02, 1.3, n), 0.98 * top)
    # the major behind t in x (so behind it in u)
    u[:, 3] = np.minimum(u[:, 3], 0.9 * (x_t / mu[:, 3]) ** (1 / (L - 2)))
    keep = u[rows, lead] > u[rows, t]
    return mu[keep], u[keep], t[keep]


@pytest.mark.parametrize("depth", [3, 4])
def test_a_minor_with_the_largest_rate_takes_over_for_good(depth):
    """Random states (rho 0.3, eta 0.05 and 0.5): the certificate names the minor ``t``
    (take-over); the NumPy map, read every step for 4,000 steps, never has the major lead,
    and once ``t`` leads it leads at every later step; ``t`` takes the lead in most runs
    (the proof says finite, not how soon)."""
    rng = np.random.default_rng(40 + depth)
    rho = 0.3
    mu, u, t = _states(rng, 40, depth, rho)
    took = 0
    for eta in (0.05, 0.5):
        code, winner = _certify(u, mu, depth, rho, eta)
        fired = np.flatnonzero(code == fates.TAKES_OVER)
        assert len(fired) >= 0.8 * len(u), (len(fired), len(u))
        assert np.all(winner[fired] == t[fired] + 1)
        leaders = _leaders(u[fired], mu[fired], depth, rho, eta, 4000)
        assert not np.any(leaders == 3), "the major led"
        for j, i in enumerate(fired):
            leads = leaders[:, j] == t[i]
            if np.any(leads):
                took += 1
                assert np.all(leads[int(np.argmax(leads)) :]), (eta, i)
    assert took >= 20, took


@pytest.mark.parametrize("depth", [3, 4])
def test_minor_take_over_labels_agree_with_a_numpy_run_1000_times_longer(depth):
    """Engine runs (eta 0.05, 4 steps) from such states are labelled minor_end with the
    minor as ``limit_coord``; a NumPy run 1,000 times longer (read every step) never has the
    major lead and, where the minor leads by its end, has that minor lead for good. With
    the rate condition dropped (the leader named instead) the labels would differ."""
    rng = np.random.default_rng(60 + depth)
    rho, eta, steps = 0.3, 0.05, 4
    mu, u, t = _states(rng, 6, depth, rho)
    leaders = _leaders(u, mu, depth, rho, eta, 1000 * steps)
    checked = 0
    for i in range(len(u)):
        ds = samflow.trajectory(
            "sam-l2",
            depth=depth,
            mu=list(mu[i]),
            alpha_per_coord=list(u[i]),
            rho=rho,
            runner=samflow.Discrete(eta=eta, steps=steps, save=samflow.Every(steps)),
        )
        assert int(ds["regime"]) in (MINOR_END, MAJOR_LOST)
        assert int(ds["regime"]) == MINOR_END and int(ds["limit_coord"]) == t[i] + 1, i
        assert not np.any(leaders[:, i] == 3), i
        leads = leaders[:, i] == t[i]
        if np.any(leads):
            assert np.all(leads[int(np.argmax(leads)) :]), i
            checked += 1
    assert checked >= 2, checked
