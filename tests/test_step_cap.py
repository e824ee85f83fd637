"""Discrete runs taken to their fate (``Discrete(step_cap=...)``) and leader paths read
after every step, against a NumPy float64 loop of the balanced discrete map written
here (issue 38)."""

from __future__ import annotations

import numpy as np
import pytest

import samflow
from samflow.errors import InputError
from samflow.regimes import DIRECT, RETURNED, SEQUENTIAL, UNRESOLVED


def map_states(rule, mu, alpha, rho, eta, steps, depth=2):
    """The balanced discrete map of ``rule`` (``l2``: l2-SAM, ``usam``) from ``w = alpha``
    on one point ``x = mu``, ``y = +1``, in float64: every layer is the same ``u``, the
    perturbed layer ``w~ = u - rho c mu u^(L-1)`` (``c = 1 / ||m||_2`` with ``m`` every
    layer's ``mu u^(L-1)``, or USAM's ``sigmoid(-z)``), the step ``u += eta sigmoid(-z~)
    mu w~^(L-1)``. Yields ``u`` after each of ``steps`` steps."""
    mu = np.asarray(mu, np.float64)
    u = np.full(mu.shape, alpha, np.float64)
    for _ in range(steps):
        m = mu * u ** (depth - 1)
        if rule == "l2":
            c = 1.0 / np.sqrt(depth * np.sum(m * m))
        else:
            c = 1.0 / (1.0 + np.exp(np.sum(mu * u**depth)))
        w = u - rho * c * m
        lprime = 1.0 / (1.0 + np.exp(np.sum(mu * w**depth)))
        u = u + eta * lprime * mu * w ** (depth - 1)
        yield u


def numpy_map(rule, mu, alpha, rho, eta, steps, depth=2):
    """:func:`map_states` read as a leader path (leaders, and the step after which each
    took the lead) and the final ``u``."""
    leaders, at = [], []
    u = np.full(np.shape(mu), alpha, np.float64)
    for t, u in enumerate(map_states(rule, mu, alpha, rho, eta, steps, depth)):
        size = np.abs(u**depth)
        lead = int(np.argmax(size)) + 1
        if np.sum(size == size.max()) == 1 and (not leaders or leaders[-1] != lead):
            leaders.append(lead)
            at.append(t + 1)
    return leaders, at, u


def path_of(ds):
    n = int(ds["n_leaders"])
    return list(ds["leader_path"].values[:n]), list(ds["handoff_step"].values[:n])


def test_every_step_path_catches_short_leads():
    """Issue 38's example: read every 4 steps the path was [1, 3] (sequential); the map's
    leader changes after steps 1, 4, 5, 6 and 7, so the path is [3, 1, 3, 1, 3], returned.
    The hand-off steps must be the NumPy loop's exactly (a step late would be a miss)."""
    problem = dict(mu=[1.3448, 0.2928, 8.1706, 0.2226, 0.5390], alpha=0.02661, rho=1.0455)
    eta, steps = 0.78226, 400
    leaders, at, _ = numpy_map("usam", problem["mu"], problem["alpha"], problem["rho"], eta, steps)
    assert leaders == [3, 1, 3, 1, 3]  # the reference itself: five leads in seven steps
    ds = samflow.trajectory(
        "usam", depth=2, **problem, runner=samflow.Discrete(eta=eta, steps=steps)
    )
    assert path_of(ds) == (leaders, at)
    # Decided (L = 2 region certificate) and labelled from the whole path.
    assert int(ds["regime"]) == RETURNED


def test_step_cap_decides_what_the_steps_leave_open():
    """l2-SAM, L = 2, rho 3: coordinate 2 leads and every u_j is below rho / sqrt(2) at
    step 100, where no certificate holds (unresolved); with a cap of 10,000 the run goes
    on, unrecorded, until u_2 passes rho / sqrt(2) with the major behind coordinate 3,
    where the middle certificate (docs/theory/regimes.md#middle-at-depth-two) makes it
    sequential, limit the major. A NumPy float64 run of the map to 10,000 steps: the same
    path [2], and by its end the certificate's conditions hold (u_2 > rho / sqrt(2),
    u_4 < u_3); the major's later lead rests on the proof (test_middle), not on this run."""
    problem = dict(mu=[1.0, 2.0, 3.0, 4.0], alpha=1.6714740848610046, rho=3.0)
    eta = 0.05
    short = samflow.trajectory(
        "sam-l2", depth=2, **problem, runner=samflow.Discrete(eta=eta, steps=100)
    )
    assert int(short["regime"]) == UNRESOLVED
    runner = samflow.Discrete(eta=eta, steps=100, step_cap=10_000)
    capped = samflow.trajectory("sam-l2", depth=2, **problem, runner=runner)
    assert int(capped["regime"]) == SEQUENTIAL and int(capped["limit_coord"]) == 4
    leaders, at, u = numpy_map("l2", problem["mu"], problem["alpha"], problem["rho"], eta, 10_000)
    assert path_of(capped) == path_of(short) == (leaders, at) == ([2], [1])
    assert u[1] > problem["rho"] / np.sqrt(2) and u[3] < u[2]
    _, _, u100 = numpy_map("l2", problem["mu"], problem["alpha"], problem["rho"], eta, 100)
    assert np.all(u100 < problem["rho"] / np.sqrt(2))
    assert int(capped["step"].values[-1]) == 100  # the records end at step 100


def test_the_cap_is_an_argument_of_one_program(monkeypatch):
    """The run of the test above, under a cap before and after the step where the middle
    certificate's conditions first hold in the NumPy map (u_2 > rho / sqrt(2), u_4 < u_3):
    unresolved, then sequential, from one program (the setups reaching the program
    store are equal, with :data:`samflow.engine.ANY_CAP`: a new cap compiles nothing)."""
    from samflow import engine, exported

    problem = dict(mu=[1.0, 2.0, 3.0, 4.0], alpha=1.6714740848610046, rho=3.0)
    eta = 0.05
    rho = problem["rho"]
    states = map_states("l2", problem["mu"], problem["alpha"], rho, eta, 10_000)
    crossing = next(
        (t for t, u in enumerate(states, 1) if u[1] > rho / np.sqrt(2) and u[3] < u[2]), None
    )
    assert crossing is not None and 100 < crossing < 10_000
    seen = []
    original = exported.runnable
    monkeypatch.setattr(
        exported, "runnable", lambda setup, *a: seen.append(setup) or original(setup, *a)
    )
    labels = [
        int(samflow.trajectory("sam-l2", depth=2, **problem, runner=samflow.Discrete(
            eta=eta, steps=100, step_cap=cap))["regime"])
        for cap in (crossing - 1, 10_000)
    ]  # fmt: skip
    assert labels == [UNRESOLVED, SEQUENTIAL]
    assert len(seen) == 2 and seen[0] == seen[1] and seen[0].step_cap == engine.ANY_CAP


def test_step_cap_keeps_what_the_middle_certificate_decides():
    """l2-SAM, L = 2: at step 100 coordinate 3 leads outside the region; the middle
    certificate (docs/theory/regimes.md#middle-at-depth-two: u above rho / sqrt(2), the
    major behind coordinate 3) decides the run there, sequential, limit the major (this
    run was unresolved at step 100 before it, and decided by the region after step 304
    under a cap). A cap of 10,000 changes nothing. The NumPy run 100 times longer agrees:
    path [3, 4], the major's lead after step 304, held to the end, in the region."""
    problem = dict(mu=[1.0, 2.0, 3.0, 4.0], alpha=1.3274657662401144, rho=1.5)
    eta = 0.05
    short = samflow.trajectory(
        "sam-l2", depth=2, **problem, runner=samflow.Discrete(eta=eta, steps=100)
    )
    runner = samflow.Discrete(eta=eta, steps=100, step_cap=10_000)
    capped = samflow.trajectory("sam-l2", depth=2, **problem, runner=runner)
    leaders, at, u = numpy_map("l2", problem["mu"], problem["alpha"], problem["rho"], eta, 10_000)
    assert (leaders, at) == ([3, 4], [1, 304])
    for ds in (short, capped):
        assert int(ds["regime"]) == SEQUENTIAL and int(ds["limit_coord"]) == 4
        assert path_of(ds) == ([3], [1])
    # The records end at step 100 either way.
    assert int(capped["step"].values[-1]) == 100
    assert capped.attrs["step_cap"] == 10_000
    # The reference's end is inside the certificate's region rho c (mu_3 + mu_4) < 1.
    mu = np.asarray(problem["mu"])
    c = 1.0 / np.sqrt(2 * np.sum((mu * u) ** 2))
    assert problem["rho"] * c * 7.0 < 1


def test_step_cap_in_a_sweep_keeps_decided_labels():
    """In a sweep, points decided at the last record keep their label and path with a
    cap (they stop where they are), and the cap changes the resume key."""
    kw = dict(depth=2, mu=[1.0, 2.0, 3.0, 4.0], axes={"alpha": [1.3274657662401144, 2.0]})
    kw["rho"] = 1.5
    plain = samflow.SweepSpec.from_inputs(
        "sam-l2", runner=samflow.Discrete(eta=0.05, steps=100), **kw
    )
    capped = samflow.SweepSpec.from_inputs(
        "sam-l2", runner=samflow.Discrete(eta=0.05, steps=100, step_cap=10_000), **kw
    )
    assert plain.key() != capped.key()
    a = samflow.sweep("sam-l2", runner=plain.runner, **kw)
    b = samflow.sweep("sam-l2", runner=capped.runner, **kw)
    assert np.all(a["regime"].values != UNRESOLVED)
    for name in ("regime", "leader_path", "handoff_step"):
        np.testing.assert_array_equal(a[name].values, b[name].values)
    assert a["regime"].values.tolist() == [SEQUENTIAL, DIRECT]


@pytest.mark.parametrize("cap", [100, 50, 0, 2.5])
def test_step_cap_must_exceed_steps(cap):
    with pytest.raises(InputError, match="step-cap"):
        samflow.Discrete(eta=0.05, steps=100, step_cap=cap)


def test_a_cap_past_the_first_pass_reruns_only_the_undecided(monkeypatch):
    """With 16 steps (17 records, which the program pads to 18), the first pass ends at
    step 1,600 (``FIRST_PASS`` times the last record): the run of the tests above, which
    the middle certificate decides only after step 4,135 of the NumPy map, is undecided
    there; alone it runs again up to the cap of 10,000 and ends sequential, with the
    labels, paths and records of one pass run to the whole cap (``FIRST_PASS`` made
    larger than the cap). The other two runs are decided in the first pass and are not
    run again."""
    from samflow import engine
    from samflow.sweeps import store

    kw = dict(depth=2, mu=[1.0, 2.0, 3.0, 4.0], rho=3.0)
    kw["axes"] = {"alpha": [0.5, 1.6714740848610046, 8.0]}
    runner = samflow.Discrete(eta=0.05, steps=16, save=samflow.Every(1), step_cap=10_000)
    passes = []
    original = engine.start_points

    def counted(setup, points, times, first_pass=True):
        starts = np.asarray(points.theta0).reshape(points.size, -1)
        passes.append((first_pass, len(np.unique(starts, axis=0))))  # distinct runs
        return original(setup, points, times, first_pass)

    monkeypatch.setattr(engine, "start_points", counted)
    monkeypatch.setattr(store, "start_points", counted)
    two = samflow.sweep("sam-l2", runner=runner, **kw)
    assert two["regime"].values[1] == SEQUENTIAL and int(two["limit_coord"][1]) == 4
    assert UNRESOLVED not in two["regime"].values
    assert [size for first, size in passes if not first] == [1]  # the undecided run alone
    assert [first for first, _ in passes] == [True, False]
    monkeypatch.setattr(engine, "FIRST_PASS", 10**6)
    passes.clear()
    one = samflow.sweep("sam-l2", runner=runner, **kw)
    assert all(first for first, _ in passes)
    for name in ("regime", "limit_coord", "leader_path", "handoff_step", "n_leaders"):
        np.testing.assert_array_equal(two[name].values, one[name].values)
    # the same map from the same start in a batch of another width: equal up to the
    # rounding of a reordered sum (1e-13 of a value of order 1, 16 steps)
    np.testing.assert_allclose(two["beta_norm"].values, one["beta_norm"].values, rtol=1e-13)
