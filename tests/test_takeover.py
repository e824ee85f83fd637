"""The take-over certificate (docs/theory/regimes.md#takeover-certificate): at L = 2, a
run that stops inside the region ``rho c (a + b) < 1`` with a minor coordinate leading
is labelled by the major's later take-over. Checked against a NumPy float64 loop of the
balanced discrete map written here, run on until the major leads (and past it)."""

from __future__ import annotations

import numpy as np
import pytest

import samflow
from samflow.regimes import COLLAPSE, DIRECT, RETURNED, SEQUENTIAL, UNRESOLVED

RULES = {"sam-l2": "l2", "usam": "usam", "gd": "gd"}


def numpy_map(rule, mu, u0, rho, eta, steps, watch_from=None):
    """The balanced discrete map at L = 2 from ``u = u0`` (every layer), one point
    ``x = mu``, ``y = +1``, float64, batched over the leading axis of ``u0`` ``[n, d]``:
    ``w~ = u - rho c mu u`` (``c = 1 / ||m||_2``, ``m = mu u`` in both layers, so
    ``||m||_2^2 = 2 sum (mu u)^2``; USAM ``c = sigmoid(-z)``; GD ``c = 0``), then
    ``u += eta sigmoid(-z~) mu w~``. Returns the leader at the start and after every
    step ``[steps + 1, n]`` (1-based; 0 where the largest ``u^2`` is tied) and, from
    step ``watch_from`` on, whether the proof's invariants held at every step ``[n]``: the region
    ``rho c (a + b) < 1`` and a rise of every ``log(u_major / u_j)`` by at least
    ``log(1 + h delta_j / (1 + eta a))``, ``delta_j`` taken with ``c`` at ``watch_from``, and
    whether the region held at step ``watch_from`` ``[n]``; and whether every step from
    ``watch_from`` on was in the shrinking region ``rho c mu_min > 1`` (the set the discrete
    collapse certificate keeps, docs/theory/regimes.md#discrete-collapse-at-depth-two) ``[n]``."""
    mu = np.asarray(mu, np.float64)
    a, b = np.sort(mu)[-2:][::-1]
    major = int(np.argmax(mu))
    u = np.array(u0, np.float64)
    n = u.shape[0]
    leaders = np.zeros((steps + 1, n), np.int64)  # row t: the leader after step t
    held = np.ones(n, bool)
    inside = np.zeros(n, bool)
    shrinking = np.ones(n, bool)
    delta = None

    def c_of(u):
        m = mu * u
        if rule == "l2":
            return 1.0 / np.sqrt(2.0 * np.sum(m * m, axis=1, keepdims=True))
        if rule == "usam":
            return 1.0 / (1.0 + np.exp(np.sum(mu * u * u, axis=1, keepdims=True)))
        return np.zeros((n, 1))

    def leader(u):
        size = u * u
        tied = np.sum(size == size.max(axis=1, keepdims=True), axis=1) > 1
        return np.where(tied, 0, np.argmax(size, axis=1) + 1)

    leaders[0] = leader(u)
    for t in range(steps):
        c = c_of(u)
        if watch_from is not None and t >= watch_from:
            if delta is None:
                delta = (mu[major] - mu) * (1.0 - rho[:, None] * c * (a + b))
                inside = (rho * c[:, 0] * (a + b)) < 1
            held &= (rho * c[:, 0] * (a + b)) < 1
            shrinking &= (rho * c[:, 0] * mu.min()) > 1
        w = u - rho[:, None] * c * mu * u
        h = eta / (1.0 + np.exp(np.sum(mu * w * w, axis=1, keepdims=True)))
        new = u + h * mu * w
        if delta is not None:
            # Runs outside the region may reach 0 or overflow: held is False there anyway.
            with np.errstate(all="ignore"):
                rise = np.log(np.abs(new[:, [major]] / new)) - np.log(np.abs(u[:, [major]] / u))
                bound = np.log1p(h * delta / (1.0 + eta * a))
            # Rounding: a rise is compared with a float64 ulp-sized slack of the logs.
            held &= np.all(rise >= bound - 1e-12, axis=1)
        u = new
        leaders[t + 1] = leader(u)
    return leaders, held, inside, shrinking


def regime_of(path, major):
    """The regime a complete leader path names (docs/theory/regimes.md#definitions)."""
    assert path and path[-1] == major
    return (
        SEQUENTIAL
        if path.count(major) == 1 and len(path) > 1
        else (RETURNED if len(path) > 1 else None)
    )


def compress(leaders):
    path = []
    for lead in leaders:
        if lead and (not path or path[-1] != lead):
            path.append(int(lead))
    return path


def test_a_minor_leader_in_the_region_is_labelled_by_the_take_over():
    """l2-SAM, mu (1, 2, 3, 4), rho 1.5, alpha 1.3275, eta 0.05: the region holds from
    step 121, coordinate 3 leads until the major takes over after step 304. Stopped at
    step 200 the run is decided: sequential, limit the major, the path as seen ([3])."""
    mu, alpha, rho, eta = [1.0, 2.0, 3.0, 4.0], 1.3274657662401144, 1.5, 0.05
    ds = samflow.trajectory(
        "sam-l2", depth=2, mu=mu, alpha=alpha, rho=rho, runner=samflow.Discrete(eta=eta, steps=200)
    )
    leaders = numpy_map("l2", mu, [[alpha] * 4], np.array([rho]), eta, 5_000)[0][:, 0]
    assert compress(leaders[:201]) == [3]  # the reference: a minor leads at step 200
    assert compress(leaders) == [3, 4] and np.all(leaders[305:] == 4)
    assert int(ds["regime"]) == SEQUENTIAL
    assert int(ds["limit_coord"]) == 4 and int(ds["stop_leader"]) == 3
    assert list(ds["leader_path"].values[: int(ds["n_leaders"])]) == [3]


@pytest.mark.parametrize("method", ["sam-l2", "usam", "gd"])
def test_take_over_labels_agree_with_a_long_numpy_run(method):
    """Random non-uniform starts, rho and eta, run 150 steps by the engine. For every run
    it decides with a minor leader (the take-over), a NumPy run 200 times longer keeps
    the proof's invariants at every step from step 150 (the region holds, every
    ``u_major / u_j`` rises at least as the proof says; for l2-SAM only where the region held
    at step 150: outside it the middle certificate decides, tested in tests/test_middle.py),
    and where the major has taken the lead by its end (the take-over can be slow: ``h``
    shrinks as the loss does), it leads there for good and the whole path's regime is the
    engine's label. Runs it labels collapse (the discrete collapse certificate at L = 2)
    stay in the shrinking region ``rho c mu_min > 1`` at every step of the NumPy run from
    step 150 on. The certificate must fire, and some take-overs must be seen (else the
    test could not fail)."""
    rng = np.random.default_rng(7 + len(method))
    mu = [0.7, 1.3, 2.1, 3.4]
    n, steps, eta = 48, 150, 0.05
    # USAM's steps shrink as e^-z: its starts are smaller, so that take-overs are seen.
    top = 0.6 if method == "usam" else 2.0
    u0 = np.exp(rng.uniform(np.log(0.02), np.log(top), (n, 4)))
    rho = np.exp(rng.uniform(np.log(0.05), np.log(2.0), n)) if method != "gd" else np.zeros(n)
    long, held, inside, shrinking = numpy_map(
        RULES[method], mu, u0, rho, eta, 200 * steps, watch_from=steps
    )
    labelled = seen_over = 0
    for i in range(n):
        kw = {} if method == "gd" else {"rho": float(rho[i])}
        ds = samflow.trajectory(
            method,
            depth=2,
            mu=mu,
            alpha_per_coord=list(u0[i]),
            runner=samflow.Discrete(eta=eta, steps=steps, save=samflow.Every(steps)),
            **kw,
        )
        regime, stop = int(ds["regime"]), int(ds["stop_leader"])
        assert list(ds["leader_path"].values[: int(ds["n_leaders"])]) == compress(
            long[: steps + 1, i]
        )
        if regime == COLLAPSE:  # the discrete collapse certificate: its set is kept
            assert method != "gd" and shrinking[i], i
            continue
        if regime == UNRESOLVED or stop == 4:
            continue
        labelled += 1
        assert int(ds["limit_coord"]) == 4
        # l2-SAM's middle certificate decides outside the region (tests/test_middle.py)
        assert held[i] or (method == "sam-l2" and not inside[i]), i
        path = compress(long[:, i])
        if path[-1] == 4:
            seen_over += 1
            first = np.argmax(long[steps + 1 :, i] == 4) + steps + 1
            assert np.all(long[first:, i] == 4), i
            assert regime == regime_of(path, 4), (i, path, regime)
    assert labelled >= 3 and seen_over >= 1, (labelled, seen_over)


@pytest.mark.parametrize("depth", [2, 3, 4])
def test_a_start_whose_steps_underflow_is_labelled_from_the_exact_map(depth):
    """l2-SAM, uniform alpha 1.914, rho 0.1, eta 0.02: the loss's slope at
    z = 10 alpha^L (~37 at L = 2, ~70 at L = 3, ~134 at L = 4) is below 1e-16, so every float64 step
    rounds back to the start and no leader is ever seen. The exact map (here in 60-digit
    decimals) has the major lead after the first step, inside the certificate's region
    (L = 2: rho c (a + b) < 1; L >= 3: u >= sqrt(L) rho): direct, limit the major."""
    from decimal import Decimal, getcontext

    getcontext().prec = 60
    mu = [Decimal(m) for m in (1, 2, 3, 4)]
    alpha, rho, eta = 1.9139780785698999, 0.1, 0.02
    u = [Decimal(alpha)] * 4
    for _ in range(3):
        m = [a * b ** (depth - 1) for a, b in zip(mu, u, strict=True)]
        c = 1 / (depth * sum(x * x for x in m)).sqrt()
        if depth == 2:
            assert Decimal(rho) * c * 7 < 1  # the region
        else:
            assert u[3] >= Decimal(depth).sqrt() * Decimal(rho)
        w = [b - Decimal(rho) * c * x for b, x in zip(u, m, strict=True)]
        z = sum(a * x**depth for a, x in zip(mu, w, strict=True))
        h = Decimal(eta) / (1 + z.exp())
        u = [b + h * a * x ** (depth - 1) for a, b, x in zip(mu, u, w, strict=True)]
        assert u[3] > u[2] > u[1] > u[0]
    ds = samflow.trajectory(
        "sam-l2", depth=depth, mu=[1, 2, 3, 4], alpha=alpha, rho=rho,
        runner=samflow.Discrete(eta=eta, steps=400),
    )  # fmt: skip
    assert int(ds["n_leaders"]) == 0  # float64 never moved
    assert int(ds["regime"]) == DIRECT and int(ds["limit_coord"]) == 4
