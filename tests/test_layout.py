"""Batch-last layout: a batched run equals its points run one by one; tiles and chunks."""

from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from runs import record_schedule
from tolerance import F32_EPS

from samflow import engine
from samflow.discrete import simulate
from samflow.engine import (
    FLOW_TILE_POINTS,
    TILE_BYTES,
    cost_order,
    program,
    run_points,
    tile_points,
)
from samflow.layout import UNROLL_ROWS, prod_rows, sum_leading, sum_rows
from samflow.model import Problem, ascent_direction, grad_and_aux, layer_mask
from samflow.rules import get_rule
from samflow.runners import Discrete, Every, Flow, LogSpaced
from samflow.sweeps.axes import parse_axis
from samflow.sweeps.spec import SweepSpec
from samflow.sweeps.store import chunk_plan, compute


def test_row_reductions_match_numpy():
    # float32 against float64. Rounding k inputs and summing them in any order errs by
    # at most k eps times the sum of their magnitudes (the textbook bound): a signed sum
    # that cancels towards zero would fail a relative check (measured 5.9e-7 at k = 3).
    # A product does not cancel: its relative error is at most 2 k eps.
    def assert_sum(got, x, axes):
        n_terms = x.size // np.size(x.sum(axes))
        bound = n_terms * F32_EPS * np.abs(x).sum(axes)
        assert np.all(np.abs(np.asarray(got, np.float64) - x.sum(axes)) <= bound), n_terms

    rng = np.random.default_rng(0)
    for k in (1, 3, UNROLL_ROWS + 5):
        x = rng.normal(size=(k, 2, 5))
        assert_sum(sum_rows(jnp.asarray(x)), x, 0)
        np.testing.assert_allclose(prod_rows(jnp.asarray(x)), x.prod(0), rtol=2 * k * F32_EPS)
    x = rng.normal(size=(3, 4, 7))
    assert_sum(sum_leading(jnp.asarray(x), 1), x, (0, 1))
    assert_sum(sum_leading(jnp.asarray(x), 0), x, None)


def test_ascent_direction_is_the_gradient_over_its_loss_factor():
    with jax.enable_x64(True):
        rng = np.random.default_rng(1)
        theta = jnp.asarray(rng.uniform(-1, 1, size=(3, 4)))
        problem = Problem(jnp.array([[1.0, -2.0, 3.0, 0.5]]), jnp.array([-1.0]))
        mask = layer_mask(2, 3)
        g, aux = grad_and_aux(theta, problem, mask)
        v = ascent_direction(theta, problem, mask)
        np.testing.assert_allclose(g, aux.lprime_abs * v, rtol=1e-14, atol=1e-16)


@pytest.mark.parametrize("method, n_points", [("sam-l2", 1), ("sam-linf", 1), ("usam", 3)])
def test_batched_run_equals_single_runs(method, n_points):
    """Trailing grid axes (batch-last) give each point's own run, depths and data mixed."""
    rng = np.random.default_rng(2)
    B, L_max, d = 5, 3, 4
    depth = np.array([1, 2, 3, 2, 3])
    theta0 = np.where(
        np.arange(L_max)[:, None, None] < depth, rng.uniform(0.3, 1.2, (L_max, d, B)), 1.0
    )
    X = rng.uniform(0.5, 2.0, (n_points, d, B))
    y = np.where(rng.random((n_points, B)) < 0.5, -1.0, 1.0)
    rho, eta = rng.uniform(0.05, 0.5, B), rng.uniform(0.01, 0.05, B)
    rule = get_rule(method)
    with jax.enable_x64(True):
        times = jnp.asarray(record_schedule(30, 7))
        run = jax.jit(simulate, static_argnames=("rule", "unroll"))
        batched = run(
            jnp.asarray(theta0),
            Problem(jnp.asarray(X), jnp.asarray(y)),
            jnp.asarray(depth),
            jnp.asarray(rho),
            jnp.asarray(eta),
            times,
            rule=rule,
            unroll=4,
        )
        for b in range(B):
            one = run(
                jnp.asarray(theta0[..., b]),
                Problem(jnp.asarray(X[..., b]), jnp.asarray(y[:, b])),
                int(depth[b]),
                rho[b],
                eta[b],
                times,
                rule=rule,
                unroll=1,
            )
            np.testing.assert_allclose(batched.beta[..., b], one.beta, rtol=1e-13, atol=1e-15)
            np.testing.assert_allclose(batched.tau[..., b], one.tau, rtol=1e-13, atol=1e-15)
            np.testing.assert_allclose(batched.loss[..., b], one.loss, rtol=1e-13)
            assert batched.failed_step[b] == one.failed_step


def test_tiles_and_chunks():
    assert tile_points("discrete", 10**6, 2, 4, np.float32, 2) == TILE_BYTES // 32
    assert tile_points("discrete", 6, 2, 4, np.float64, 1) == 8  # small chunk: one tile
    assert tile_points("discrete", 100, 3, 4, np.float64, 2) == 56
    assert tile_points("flow", 10**6, 2, 4, np.float64, 2) == FLOW_TILE_POINTS
    size, blocks = chunk_plan(1000, 301, 2)
    assert size == 302 and sum(len(b) for b in blocks) == 1000


def test_shared_and_per_point_inputs_agree():
    """A chunk whose points share X and depth (sent once) equals the per-point chunk."""
    spec = SweepSpec(
        rule=get_rule("sam-l2"),
        runner=Discrete(eta=0.05, steps=60, save=Every(10)),
        depth=2,
        axes=(parse_axis("alpha=0.2:2:13:log"),),
        rho=0.7,
        mu=(1.0, 2.0, 3.0, 4.0),
        save_trajectories=True,
    )
    setup = spec.setup()
    flat = np.arange(spec.size)
    shared = compute(setup, spec, flat, 16)
    points = spec.points(np.concatenate([flat, np.full(3, flat[-1])]))
    assert points.X.shape[0] == 1 and points.depth.shape[0] == 1  # sent once
    per_point = points._replace(
        X=np.repeat(points.X, 16, axis=0), depth=np.repeat(points.depth, 16, axis=0)
    )
    full = run_points(setup, per_point, spec.times())
    for k, v in shared.items():
        np.testing.assert_array_equal(v, full[k][: spec.size], err_msg=k)
    assert program(setup) is program(setup)  # one compiled program per setup


def test_a_program_without_padding_equals_one_with_it():
    """Without padding rows the discrete program drops the layer mask; nothing else changes."""
    spec = SweepSpec(
        rule=get_rule("usam"),
        runner=Discrete(eta=0.05, steps=80, save=Every(10)),
        depth=3,
        axes=(parse_axis("alpha=0.2:2:9:log"), parse_axis("rho=0.1,0.5")),
        mu=(1.0, 2.0, 3.0, 4.0),
        save_trajectories=True,
    )
    flat = np.arange(spec.size)
    setup = spec.setup()
    assert not setup.padding
    plain = compute(setup, spec, flat, 24)
    masked = compute(replace(setup, padding=True), spec, flat, 24)
    for k, v in plain.items():
        np.testing.assert_array_equal(v, masked[k], err_msg=k)


def test_cost_order_sorts_then_deals_to_devices():
    """Each device's contiguous share of the slots holds every n-th point of the sorted
    order; padding slots (copies of the last point) sort with it; NaN sorts last."""
    rate = jnp.asarray([5.0, np.nan, -1.0, 3.0, 0.0, 2.0])
    perm = np.asarray(cost_order(rate, 8, 2))
    assert sorted(perm.tolist()) == list(range(8))  # a permutation of the slots
    padded = np.asarray(rate)[np.minimum(np.arange(8), 5)]  # slots 6, 7: copies of point 5
    ranked = np.argsort(padded, kind="stable")  # -1, 0, 2, 2, 2, 3, 5, nan
    np.testing.assert_array_equal(perm[:4], ranked[0::2])  # device 0
    np.testing.assert_array_equal(perm[4:], ranked[1::2])  # device 1
    assert perm[-1] == 1  # NaN last
    np.testing.assert_array_equal(np.asarray(cost_order(rate, 6, 1)), np.argsort(rate))


def test_flow_tiles_in_cost_order_equal_single_points(monkeypatch):
    """A flow chunk run in tiles of 8, its points reordered by their start rate, gives
    every point the results it gets alone.

    The lanes of a vmapped solve do not interact (each has its own steps, saves and
    event), so the order only moves work between tiles: equal to 1e-12 relative (the
    same vector code runs each lane; in practice bit for bit)."""
    monkeypatch.setattr(engine, "FLOW_TILE_POINTS", 8)
    spec = SweepSpec(
        rule=get_rule("sam-l2"),
        # an rtol of its own: no other test's program (compiled with other tiles) is reused
        runner=Flow(tau_max=30.0, save=LogSpaced(11), rtol=3e-7),
        depth=2,
        axes=(parse_axis("alpha=0.05:2:16:log"), parse_axis("rho=0.2,1.2")),
        mu=(1.0, 2.0, 3.0, 4.0),
        save_trajectories=True,
    )
    setup = spec.setup()
    flat = np.arange(spec.size)
    points = spec.points(flat)
    with jax.enable_x64(True):
        per_point = points._replace(
            X=np.repeat(points.X, spec.size, 0), depth=np.repeat(points.depth, spec.size, 0)
        )
        per_point = jax.tree.map(jnp.asarray, per_point)
        rate = jax.vmap(lambda p: engine._start_rate(setup, p), in_axes=(engine.POINT_AXES,))(
            per_point
        )
    assert not np.all(np.diff(np.asarray(rate)) >= 0)  # the grid order is not the cost order
    together = compute(setup, spec, flat, spec.size)
    regimes = set()
    for i in flat:
        alone = compute(setup, spec, np.array([i]), 1)
        regimes.add(int(alone["regime"][0]))
        for k, v in alone.items():
            if v.dtype.kind == "f":
                np.testing.assert_allclose(together[k][i], v[0], rtol=1e-12, err_msg=k)
            else:
                np.testing.assert_array_equal(together[k][i], v[0], err_msg=k)
    assert len(regimes) >= 2  # tiles of unlike trajectories


@pytest.mark.parametrize("depth", [2, 3])
def test_a_flow_program_without_padding_equals_one_with_it(depth):
    """Without padding rows a flow program compiles its depth in (the closed form drops
    u^(L-2) = 1 at L = 2); nothing else changes. The field differs from the traced
    depth's by an ulp at most (exp(0) against 1), which the adaptive solve carries to
    about 1e-11 in the states; a time found inside a step (a hand-off, the stop) moves
    by that over the slopes it is interpolated from: 1e-8 relative leaves a hundred times
    the measured room. Labels and counts are equal."""
    spec = SweepSpec(
        rule=get_rule("sam-l2"),
        runner=Flow(tau_max=30.0 if depth == 2 else 3.0, save=LogSpaced(15)),
        depth=depth,
        axes=(parse_axis("alpha=0.05:2:12:log"), parse_axis("rho=0.2,1.2")),
        mu=(1.0, 2.0, 3.0, 4.0),
        save_trajectories=True,
    )
    setup = spec.setup()
    assert not setup.padding
    flat = np.arange(spec.size)
    static = compute(setup, spec, flat, 24)
    traced = compute(replace(setup, padding=True), spec, flat, 24)
    assert len(set(static["regime"].tolist())) >= 2
    for k, v in static.items():
        if v.dtype.kind == "f":
            np.testing.assert_allclose(v, traced[k], rtol=1e-8, atol=1e-300, err_msg=k)
        else:
            np.testing.assert_array_equal(v, traced[k], err_msg=k)
