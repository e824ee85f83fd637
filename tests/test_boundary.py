"""Regime boundaries (scan, then bisection), against the closed form and dense regime maps."""

from dataclasses import replace

import jax.monitoring
import numpy as np
import pytest
import xarray as xr

import samflow
from samflow._boundary import FAILURE, FOUND, NO_EDGE, UNDECIDED
from samflow.cli import main
from samflow.regimes import COLLAPSE, DIRECT, RETURNED, SEQUENTIAL, UNRESOLVED
from samflow.theory import l2sam_l2_direct_edge

MU = [1.0, 2.0, 3.0, 4.0]
FLOW = samflow.Flow(tau_max=200.0, save=samflow.LogSpaced(59))
CAPPED = replace(FLOW, tau_cap=samflow.BoundarySearch().cap_factor * FLOW.tau_max)
"""FLOW as the boundary runs it (to its fate, up to the default cap): a sweep with it runs
the boundary's own compiled program where its batch has the size of the boundary's."""


def _edges():
    return samflow.boundary(
        "sam-l2",
        depth=2,
        mu=MU,
        axes={"rho": [0.5, 1.0]},
        runner=FLOW,
        search=samflow.BoundarySearch(rtol_alpha=1e-6),
    )


@pytest.fixture(scope="module")
def edges():
    return _edges()


def test_direct_edge_is_the_closed_form(edges):
    """docs/theory/balanced.md#direct-edge-depth-2: alpha* = rho (mu_d + mu_{d-1}) / (sqrt 2
    ||mu||), 0.9037 here."""
    for rho in (0.5, 1.0):
        exact = l2sam_l2_direct_edge(MU, rho)
        found = float(edges["alpha_direct"].sel(rho=rho))
        assert abs(found / exact - 1) < 3e-6, (rho, found, exact)
    assert abs(float(edges["alpha_direct"].sel(rho=1.0)) - 0.9037) < 1e-4


def test_edges_scale_with_rho(edges):
    """(u, rho) -> (c u, c rho) leaves the balanced l2-SAM flow unchanged up to time
    (docs/theory/balanced.md#scale-invariance): both edges are proportional to rho."""
    for name in ("alpha_collapse", "alpha_direct"):
        v = edges[name].values
        assert abs(v[1] / v[0] - 2.0) < 1e-5, name


def test_edges_agree_with_a_dense_map(edges):
    """Runs to their fate, as the boundary's (labels of the limit), at 105 alphas: the
    batch of the fixture's scan (2 x 49 runs, padded to 112), so its program serves."""
    alphas = np.geomspace(0.2, 2.0, 105)
    ds = samflow.sweep("sam-l2", depth=2, mu=MU, rho=1.0, axes={"alpha": alphas}, runner=CAPPED)
    regime = ds["regime"].values
    a_c = float(edges["alpha_collapse"].sel(rho=1.0))
    a_d = float(edges["alpha_direct"].sel(rho=1.0))
    assert 0.3 < a_c < a_d < 1.0
    # collapse exactly below the collapse edge, direct exactly above the direct edge
    np.testing.assert_array_equal(regime == COLLAPSE, alphas < a_c)
    np.testing.assert_array_equal(regime == DIRECT, alphas >= a_d)
    # The collapse edge measured in docs/theory/regimes.md#three-regimes.
    assert abs(a_c - 0.3841) < 1e-3
    for kind in ("collapse", "direct"):
        np.testing.assert_array_equal(edges[f"n_edges_{kind}"].values, 1)
        np.testing.assert_array_equal(edges[f"why_nan_{kind}"].values, FOUND)
        np.testing.assert_array_equal(
            edges[f"alpha_{kind}_all"].isel(edge=0).values, edges[f"alpha_{kind}"].values
        )


def test_a_second_call_compiles_nothing(edges):
    """The batches run through the cached program of the setup: an identical call traces
    (and so compiles) nothing, and finds the same edges."""
    traced = []

    def count(event, duration, **kwargs):
        if event == "/jax/core/compile/jaxpr_trace_duration":
            traced.append(duration)

    jax.monitoring.register_event_duration_secs_listener(count)
    try:
        again = _edges()
    finally:
        jax.monitoring.unregister_event_duration_listener(count)
    assert traced == []
    xr.testing.assert_identical(again.drop_attrs(), edges.drop_attrs())


def test_missing_edges_are_nan():
    """GD at L = 2 is direct for every alpha: neither edge lies in the range."""
    ds = samflow.boundary(
        "gd",
        depth=2,
        mu=MU,
        axes={"depth": [2]},
        runner=FLOW,
        search=samflow.BoundarySearch(rtol_alpha=1e-3),
    )
    for kind in ("collapse", "direct"):
        assert np.isnan(ds[f"alpha_{kind}"].values).all()
        assert np.isnan(ds[f"alpha_{kind}_all"].values).all()
        np.testing.assert_array_equal(ds[f"n_edges_{kind}"].values, 0)
        np.testing.assert_array_equal(ds[f"why_nan_{kind}"].values, NO_EDGE)
    assert ds["why_nan_direct"].attrs["flag_meanings"].split()[NO_EDGE] == "no_edge"


def test_a_failed_run_is_said():
    """A solver capped at 20 steps fails at alpha = 0.1 (checked below): an edge could
    hide where a run failed, so no edge is reported as the edge, and the reason says so."""
    runner = samflow.Flow(tau_max=200.0, save=samflow.LogSpaced(19), max_steps=20)
    ds = samflow.boundary(
        "sam-l2",
        depth=2,
        mu=MU,
        rho=1.0,
        axes={},
        runner=runner,
        search=samflow.BoundarySearch(alpha_range=(0.1, 10.0)),
    )
    # the premise: the smallest alpha fails (the scan's alphas, run as the boundary runs
    # them, to the default cap: its compiled program)
    capped = replace(runner, tau_cap=samflow.BoundarySearch().cap_factor * runner.tau_max)
    scan = np.geomspace(0.1, 10.0, ds.attrs["scan_points"])
    check = samflow.sweep("sam-l2", depth=2, mu=MU, rho=1.0, axes={"alpha": scan}, runner=capped)
    assert int(check["solver_failed"][0]) == 1
    for kind in ("collapse", "direct"):
        assert int(ds[f"why_nan_{kind}"]) == FAILURE and np.isnan(float(ds[f"alpha_{kind}"]))


def test_depth_3_edges_are_edges_of_the_limit(capsys):
    """l2-SAM at L = 3, mu = (1, 2, 3, 4), rho = 0.1. Stopped at tau = 200 the runs below
    alpha ~ 2.7e-3 looked direct (the major led up to the horizon) and gave a second,
    lower "direct edge"; run to their blow-up they return (4 -> 3 -> 4), so the boundary,
    which runs flows to their fate, finds one direct edge only, with returned and
    sequential runs below it. The edge is checked against the labels of independent runs
    just below and just above it, each run to its fate."""
    runner = samflow.Flow(tau_max=200.0, save=samflow.LogSpaced(59))
    problem = dict(depth=3, mu=MU, rho=0.1, runner=runner)
    ds = samflow.boundary(
        "sam-l2",
        **problem,
        axes={},
        search=samflow.BoundarySearch(alpha_range=(1e-3, 1.0), rtol_alpha=1e-4),
        progress=True,
    )
    shown = capsys.readouterr().err  # the progress bar, on stderr
    assert "scan" in shown and "bisect" in shown
    assert ds.attrs["tau_cap"] == samflow.BoundarySearch().cap_factor * 200.0 == 2e7
    assert int(ds["n_edges_direct"]) == 1 and int(ds["why_nan_direct"]) == FOUND
    assert int(ds["n_edges_collapse"]) == 0 and int(ds["why_nan_collapse"]) == NO_EDGE
    edge = float(ds["alpha_direct"])
    assert 0.05 < edge < 0.2
    # 1e-3 on each side: ten times the bisection's tolerance, so both sides are outside
    # the final bracket whatever the rounding. Run to the boundary's cap (2e7), a batch of
    # the bisection's size: its compiled program.
    alphas = np.array([1e-3, 2e-3, 1e-2, edge * (1 - 1e-3), edge * (1 + 1e-3)])
    regime = samflow.sweep("sam-l2", **{**problem, "runner": CAPPED}, axes={"alpha": alphas})[
        "regime"
    ].values
    assert (regime[:3] == RETURNED).all() and regime[3] == SEQUENTIAL and regime[4] == DIRECT
    # The horizon alone never makes the small alphas direct: each is unresolved, or (the
    # major led, a minor leads at tau = 200 and l2-SAM's escape past the fixed point holds,
    # docs/theory/regimes.md#escape-past-the-fixed-point) returned, as run to its fate.
    short = samflow.sweep("sam-l2", **problem, axes={"alpha": alphas[:2]})["regime"].values
    assert ((short == UNRESOLVED) | (short == regime[:2])).all()
    assert not (short == DIRECT).any()


def test_an_undecided_run_is_said():
    """A cap too short to decide the runs near the collapse edge of L = 4 (they shrink
    slowly for thousands of tau): no edge is reported across them, and the reason says
    why."""
    runner = samflow.Flow(tau_max=20.0, save=samflow.LogSpaced(19), tau_cap=40.0)

    def edges(alpha_range):
        # 20 scan alphas, the default over the wide range below: every batch of this test
        # (both scans, the sweep of the wide scan) runs one compiled program
        search = samflow.BoundarySearch(alpha_range=alpha_range, scan_points=20)
        return samflow.boundary(
            "sam-l2", depth=4, mu=MU, rho=0.1, axes={}, runner=runner, search=search
        )

    ds = edges((0.01, 0.05))
    assert int(ds["why_nan_collapse"]) == UNDECIDED and np.isnan(float(ds["alpha_collapse"]))
    # Wider, from alphas that collapse (certified: docs/theory/regimes.md#collapse-certificates)
    # through the undecided band to decided sequential runs: the collapse edge is counted
    # with its bracket of decided scan alphas around the band, and has no place (NaN).
    wide = edges((1e-3, 0.2))
    scan = np.geomspace(1e-3, 0.2, wide.attrs["scan_points"])
    regime = samflow.sweep("sam-l2", depth=4, mu=MU, rho=0.1, axes={"alpha": scan}, runner=runner)[
        "regime"
    ].values
    assert regime[0] == COLLAPSE and (regime == UNRESOLVED).any()  # the premise
    assert int(wide["n_edges_collapse"]) == 1
    assert int(wide["why_nan_collapse"]) == UNDECIDED
    assert np.isnan(float(wide["alpha_collapse_all"].isel(edge=0)))
    low = float(wide["alpha_collapse_low"].isel(edge=0))
    high = float(wide["alpha_collapse_high"].isel(edge=0))
    i, j = np.argmin(abs(scan - low)), np.argmin(abs(scan - high))
    np.testing.assert_allclose([low, high], scan[[i, j]], rtol=1e-12)  # scan alphas
    assert regime[i] == COLLAPSE and regime[j] not in (COLLAPSE, UNRESOLVED)
    assert (regime[i + 1 : j] == UNRESOLVED).all() and j > i + 1


@pytest.mark.parametrize(
    "kwargs, named",
    [
        ({"axes": {"alpha": [1.0]}}, "alpha"),
        ({"axes": {"seed": [1]}}, "seed"),
        ({"axes": {}, "search": (1e-3, 1e3)}, "search"),
        ({"axes": {}, "progress": "yes"}, "progress"),
        ({"axes": {}, "rho": -1.0}, "rho"),
    ],
)
def test_bad_input(kwargs, named):
    args = {"depth": 2, "mu": MU, "rho": 1.0, "runner": FLOW, **kwargs}
    with pytest.raises(samflow.InputError, match=named):
        samflow.boundary("sam-l2", **args)


@pytest.mark.parametrize(
    "fields, named",
    [
        ({"alpha_range": (2.0, 1.0)}, "alpha-range"),
        ({"rtol_alpha": 0.0}, "rtol-alpha"),
        ({"scan_points": 1}, "scan-points"),
        ({"cap_factor": 1.0}, "cap-factor"),
        ({"step_cap_factor": 0.5}, "step-cap-factor"),
    ],
)
def test_bad_search(fields, named):
    with pytest.raises(samflow.InputError, match=named):
        samflow.BoundarySearch(**fields)


def test_cli_writes_the_edges(edges, tmp_path, capsys):
    """The command line runs the fixture's boundary (each call compiles the bisection)."""
    out, fig = tmp_path / "b.nc", tmp_path / "b.png"
    argv = ["boundary", "--method", "sam-l2", "--depth", "2", "--mu", "1,2,3,4", "--tau-max", "200"]
    argv += ["--n-save", "60", "--axis", "rho=0.5,1", "--rtol-alpha", "1e-6"]
    assert main([*argv, "--out", str(out), "--figure", str(fig)]) == 0
    ds = xr.load_dataset(out)
    for name in ("alpha_collapse", "alpha_direct"):
        np.testing.assert_array_equal(ds[name].values, edges[name].values)
        assert ds[name].attrs["units"] == "1"
    assert "bisection" in ds.attrs["method_of_solution"]
    assert fig.stat().st_size > 10_000
    assert "alpha_direct" in capsys.readouterr().out


def test_a_mu_axis_gives_each_direction_its_own_edge():
    """``mu_set`` with a ``mu`` axis: the direct edge of every row is its closed form,
    and scaling a row (mu -> s mu, docs/theory/balanced.md#scale-invariance) leaves its edges
    alone."""
    mus = np.array([[1.0, 2.0], [1.0, 5.0], [3.0, 15.0]])  # row 2 = 3 x row 1
    ds = samflow.boundary(
        "sam-l2",
        depth=2,
        mu=mus[0],
        mu_set=mus,
        axes={"mu": [0, 1, 2]},
        rho=1.0,
        runner=samflow.Flow(tau_max=100.0, save=samflow.LogSpaced(40)),
        search=samflow.BoundarySearch(alpha_range=(1e-2, 1e2), rtol_alpha=1e-4),
    )
    found = ds["alpha_direct"].values
    exact = [l2sam_l2_direct_edge(m, 1.0) for m in mus]
    # bisection to 1e-4 relative; the lead below the edge ends later than the first
    # record (tau = 0.01) only within ~1e-3 of it (docs/theory/balanced.md#direct-edge-depth-2),
    # hence 2e-3
    np.testing.assert_allclose(found, exact, rtol=2e-3)
    # Row 2 runs row 1's flow three times faster, so its horizon reaches tau = 300 of
    # row 1: the collapse edge (read at the horizon) could move, but only where a
    # trajectory is still undecided at tau = 100; it agrees to the bisection tolerance
    np.testing.assert_allclose(
        ds["alpha_collapse"].values[2], ds["alpha_collapse"].values[1], rtol=1e-3
    )


def test_edges_keep_their_brackets_and_match_the_closed_form():
    """The issue's case (mu = (0.8, 1.7, 2.3, 3.9), rho = 0.4 and 2.2) and two random
    directions: runs within ~1e-6 of the collapse edge are slow to decide, and an
    undecided bisection midpoint used to discard the edge (NaN, unresolved, at rho = 0.4).
    The edge now keeps the bracket of its last decided alphas, so both edges come back at
    every rho: the collapse edge scales with rho (docs/theory/balanced.md#scale-invariance)
    and lies above the bound below which every coordinate shrinks, the direct edge is the
    closed form (docs/theory/balanced.md#direct-edge-depth-2)."""
    rng = np.random.default_rng(38)
    mus = np.vstack([[0.8, 1.7, 2.3, 3.9], np.sort(rng.uniform(0.2, 5.0, (2, 4)), axis=1)])
    rhos = [0.4, 2.2]
    ds = samflow.boundary(
        "sam-l2",
        depth=2,
        mu=mus[0],
        mu_set=mus,
        axes={"mu": [0, 1, 2], "rho": rhos},
        runner=samflow.Flow(tau_max=300.0),
        search=samflow.BoundarySearch(alpha_range=(1e-3, 1e2)),
    )
    r = np.asarray(rhos)
    for kind in ("collapse", "direct"):
        np.testing.assert_array_equal(ds[f"why_nan_{kind}"].values, FOUND)
        np.testing.assert_array_equal(ds[f"n_edges_{kind}"].values, 1)
        edge = ds[f"alpha_{kind}"].values
        low = ds[f"alpha_{kind}_low"].isel(edge=0).values
        high = ds[f"alpha_{kind}_high"].isel(edge=0).values
        # the edge is the geometric middle of its bracket of decided alphas
        assert np.all((low < edge) & (edge < high))
        np.testing.assert_allclose(edge, np.sqrt(low * high), rtol=1e-12)
        if kind == "collapse":
            # The row: bisected to within a few rtol_alpha (1e-6) at both rho, and
            # alpha / rho the same there (scaling), 0.387224 as the issue measured.
            assert np.all(high[0] / low[0] - 1 < 1e-5)
            np.testing.assert_allclose(edge[0] / r, 0.387224, rtol=0, atol=2e-6)
            # Every row: the brackets of alpha / rho at the two rho overlap (scaling; a
            # row's bisection may stop early at an undecided midpoint: second row here,
            # 1.8% wide, where runs pass 2 -> 1 -> 2 -> 3 and overflow before 4 leads),
            # above the bound below which every coordinate shrinks
            # (docs/theory/balanced.md#balanced-l2-sam).
            assert np.all(low[:, 0] / r[0] < high[:, 1] / r[1])
            assert np.all(low[:, 1] / r[1] < high[:, 0] / r[0])
            bound = mus.min(axis=1) / (np.sqrt(2) * np.linalg.norm(mus, axis=1))
            assert np.all(low / r > bound[:, None])
        else:
            # the closed form (docs/theory/balanced.md#direct-edge-depth-2) lies in the
            # bracket, widened by 3e-6 as in test_direct_edge_is_the_closed_form
            exact = np.array([[l2sam_l2_direct_edge(mu, rho) for rho in rhos] for mu in mus])
            assert np.all((low * (1 - 3e-6) < exact) & (exact < high * (1 + 3e-6)))
            assert np.all(high / low - 1 < 1e-5)
