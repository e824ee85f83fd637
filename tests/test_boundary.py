"""Regime boundaries by bisection, against the closed form and a dense regime map."""

import numpy as np
import pytest
import xarray as xr

import samflow
from samflow.cli import main
from samflow.regimes import COLLAPSE, DIRECT
from samflow.theory import l2sam_l2_direct_edge

MU = [1.0, 2.0, 3.0, 4.0]
FLOW = samflow.Flow(tau_max=200.0, n_save=60)


@pytest.fixture(scope="module")
def edges():
    return samflow.boundary(
        "sam-l2", depth=2, mu=MU, axes={"rho": [0.5, 1.0]}, runner=FLOW, rtol_alpha=1e-6
    )


def test_direct_edge_is_the_closed_form(edges):
    """docs/theory.md §4.4: alpha* = rho (mu_d + mu_{d-1}) / (sqrt 2 ||mu||), 0.9037 here."""
    for rho in (0.5, 1.0):
        exact = l2sam_l2_direct_edge(MU, rho)
        found = float(edges["alpha_direct"].sel(rho=rho))
        assert abs(found / exact - 1) < 3e-6, (rho, found, exact)
    assert abs(float(edges["alpha_direct"].sel(rho=1.0)) - 0.9037) < 1e-4


def test_edges_scale_with_rho(edges):
    """(u, rho) -> (c u, c rho) leaves the balanced l2-SAM flow unchanged up to time
    (docs/theory.md §4.6): both edges are proportional to rho."""
    for name in ("alpha_collapse", "alpha_direct"):
        v = edges[name].values
        assert abs(v[1] / v[0] - 2.0) < 1e-5, name


def test_edges_agree_with_a_dense_map(edges):
    alphas = np.geomspace(0.2, 2.0, 81)
    ds = samflow.sweep("sam-l2", depth=2, mu=MU, rho=1.0, axes={"alpha": alphas}, runner=FLOW)
    regime = ds["regime"].values
    a_c = float(edges["alpha_collapse"].sel(rho=1.0))
    a_d = float(edges["alpha_direct"].sel(rho=1.0))
    assert 0.3 < a_c < a_d < 1.0
    # collapse exactly below the collapse edge, direct exactly above the direct edge
    np.testing.assert_array_equal(regime == COLLAPSE, alphas < a_c)
    np.testing.assert_array_equal(regime == DIRECT, alphas >= a_d)
    assert abs(a_c - 0.3841) < 1e-3  # the collapse edge measured in docs/theory.md §4


def test_missing_edges_are_nan():
    """GD at L = 2 is direct for every alpha: neither edge lies in the range."""
    ds = samflow.boundary("gd", depth=2, mu=MU, axes={"depth": [2]}, runner=FLOW, rtol_alpha=1e-3)
    assert np.isnan(ds["alpha_collapse"].values).all()
    assert np.isnan(ds["alpha_direct"].values).all()


@pytest.mark.parametrize(
    "kwargs, named",
    [
        ({"axes": {"alpha": [1.0]}}, "alpha"),
        ({"axes": {"seed": [1]}}, "seed"),
        ({"axes": {}, "alpha_range": (2.0, 1.0)}, "alpha-range"),
        ({"axes": {}, "rtol_alpha": 0.0}, "rtol-alpha"),
        ({"axes": {}, "rho": -1.0}, "rho"),
    ],
)
def test_bad_input(kwargs, named):
    args = {"depth": 2, "mu": MU, "rho": 1.0, "runner": FLOW, **kwargs}
    with pytest.raises(samflow.InputError, match=named):
        samflow.boundary("sam-l2", **args)


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
    and scaling a row (mu -> s mu, docs/theory.md §4.6) leaves its edges alone."""
    mus = np.array([[1.0, 2.0], [1.0, 5.0], [3.0, 15.0]])  # row 2 = 3 x row 1
    ds = samflow.boundary(
        "sam-l2",
        depth=2,
        mu=mus[0],
        mu_set=mus,
        axes={"mu": [0, 1, 2]},
        rho=1.0,
        runner=samflow.Flow(tau_max=100.0, n_save=41),
        alpha_range=(1e-2, 1e2),
        rtol_alpha=1e-4,
    )
    found = ds["alpha_direct"].values
    exact = [l2sam_l2_direct_edge(m, 1.0) for m in mus]
    # bisection to 1e-4 relative; the lead below the edge ends later than the first
    # record (tau = 0.01) only within ~1e-3 of it (docs/theory.md §4.4), hence 2e-3
    np.testing.assert_allclose(found, exact, rtol=2e-3)
    # Row 2 runs row 1's flow three times faster, so its horizon reaches tau = 300 of
    # row 1: the collapse edge (read at the horizon) could move, but only where a
    # trajectory is still undecided at tau = 100; it agrees to the bisection tolerance
    np.testing.assert_allclose(
        ds["alpha_collapse"].values[2], ds["alpha_collapse"].values[1], rtol=1e-3
    )
