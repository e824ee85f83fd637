"""The validity map (samflow.validity): its small-eta end agrees with the flow, and a
discrete-only behaviour is detected where it is computed by hand."""

from __future__ import annotations

import numpy as np
import pytest

import samflow
from samflow.validity import (
    AGREES,
    CRITERIA,
    DIVERGENCE,
    OSCILLATION,
    discrete_behaviour,
    validity_map,
)

MU = (1.0, 2.0, 3.0, 4.0)


def test_small_eta_end_agrees_with_the_flow(tmp_path):
    """Below a derived step size every criterion agrees.

    Derivation (docs/theory/validity.md#flow-validity), balanced L = 2: a step multiplies ``u_j`` by
    ``1 + eta |l'| g_j`` with ``|g_j| <= mu_d = 4`` here and ``|l'| <= 1/2``, so no
    coordinate crosses 0 and no two swap order within one step while ``eta < 0.5``: the
    regime, path and limit agree, and direct runs meet the leads certificate at any step
    size. The iterates carry the first-order error measured in docs/theory/flows.md#rescaled-flows
    (0.5 eta relative in beta), which shifts a hand-off by about ``eta / s`` (``s >= 0.8``
    the slope of the crossing, docs/theory/regimes.md#definitions; measured ``(1-2) eta``), against
    the tolerance ``0.1 tau_k`` plus one step's tau (``eta |l'| <= eta / 2``): for the
    earliest hand-off here (tau = 0.16) ``0.016 + 0.01`` at eta = 0.02, which the measured
    shifts meet, and ``0.016 + 0.02`` at eta = 0.04, which a shift of about ``0.05`` does
    not (the 4-step detection delay of earlier versions, ``0.06``, hid that).
    """
    rho = 0.1
    ds = validity_map(
        "sam-l2",
        depth=2,
        mu=MU,
        rho=rho,
        alpha=rho * np.array([0.6, 0.8, 2.0]),
        eta=[0.01, 0.02, 0.04],
        sharpness=False,
    )
    assert list(ds["flow_regime"].values) == [2, 2, 3]
    for c in CRITERIA:
        small = ds[f"{c}_agrees"].sel(eta=[0.01, 0.02]).values
        assert (small == AGREES).all(), c
        if c != "handoffs":
            assert (ds[f"{c}_agrees"].values == AGREES).all(), c
    # eta = 0.04: the earliest hand-off of the sequential rows moves past the tolerance.
    late = ds.sel(eta=0.04)
    assert (late["handoffs_agrees"].values == [0, 0, AGREES]).all()
    assert (late["handoff_shift"].values[:2] > 0.016 + 0.02).all()
    assert (ds["discrete_behaviour"].values == 0).all()
    assert np.isfinite(ds["eta_valid_regime"].values).all()
    assert np.isnan(ds["eta_sam_edge"].values).all()  # no eigenvalue tracked: not known
    assert _draws(ds, tmp_path)


def _draws(ds, tmp_path):
    import matplotlib.pyplot as plt

    from samflow.figures.flow_validity import draw

    fig = draw({"": ds})
    fig.savefig(tmp_path / "map.png")
    plt.close(fig)
    return (tmp_path / "map.png").stat().st_size > 0


def _quadratic(method, eta, rho, w0, steps):
    """1-D quadratic ``(1/2)(w - 1)^2`` (``x = y = 1``, lambda = 1), every step recorded."""
    return samflow.trajectory(
        method,
        depth=1,
        data=(np.array([[1.0]]), np.array([1.0])),
        loss="squared",
        theta0=np.array([[w0]]),
        rho=rho,
        runner=samflow.Discrete(eta=eta, steps=steps, save=samflow.Every(1)),
    )


def _flags(ds):
    return int(discrete_behaviour(ds["beta"], ds["loss"]).values)


def test_usam_just_past_its_edge_oscillates_with_period_two():
    """USAM on ``(1/2) lambda e^2``: ``e <- e (1 - eta lambda (1 + rho lambda))``. With
    ``eta lambda (1 + rho lambda) = 2.02`` the factor is -1.02: the error flips sign every
    step and grows by 2 % a step (the edge is 2: Long & Bartlett's quadratic)."""
    eta, rho, e0, steps = 1.01, 1.0, 0.1, 40
    ds = _quadratic("usam", eta, rho, 1.0 + e0, steps)
    by_hand = 1.0 + e0 * (1.0 - eta * (1.0 + rho)) ** np.arange(steps + 1)
    np.testing.assert_allclose(ds["beta"].values[:, 0], by_hand, rtol=1e-12)
    assert _flags(ds) & OSCILLATION
    assert not _flags(ds) & DIVERGENCE
    below = _quadratic("usam", 0.9, rho, 1.0 + e0, steps)  # factor -0.8: a damped flip
    assert _flags(below) & OSCILLATION  # the flips are there below the edge too ...
    assert np.abs(below["beta"].values[-1, 0] - 1.0) < e0 * 0.8**30  # ... and they die out


def test_l2_sam_bounces_on_its_two_cycle():
    """l2-SAM on ``(1/2) lambda e^2`` in 1-D: ``eps = rho sign(e)``, so
    ``e <- (1 - eta lambda) e - eta lambda rho sign(e)``, whose 2-cycle is
    ``e = +-c``, ``c = eta lambda rho / (2 - eta lambda)`` (stable: its multiplier over two
    steps is ``(1 - eta lambda)^2 < 1``). The flow instead stops at ``e = 0``."""
    eta, rho, steps = 0.5, 0.5, 80
    ds = _quadratic("sam-l2", eta, rho, 1.3, steps)
    c = eta * rho / (2.0 - eta)
    tail = ds["beta"].values[-10:, 0] - 1.0
    np.testing.assert_allclose(np.abs(tail), c, rtol=1e-9)
    assert (np.sign(tail[1:]) != np.sign(tail[:-1])).all()
    assert _flags(ds) & OSCILLATION


@pytest.mark.parametrize("run", [3, 12])
def test_oscillation_needs_a_run_of_reversals(run):
    """Isolated reversals are not oscillation; a run of OSCILLATION_RUN of them is."""
    import xarray as xr

    t = np.arange(40.0)
    beta = t.copy()
    beta[10 : 10 + run] += 0.6 * (-1.0) ** np.arange(run)
    b = xr.DataArray(beta[:, None], dims=("time", "coord"))
    one = xr.DataArray(np.ones(40), dims="time")
    code = discrete_behaviour(b, one).values
    assert bool(code & OSCILLATION) == (run >= 8)


def test_command_refuses_rho_for_gd(tmp_path, capsys):
    from samflow.cli import main

    argv = ["validity", "--method", "gd", "--rho", "0.1", "--out", str(tmp_path / "v.nc")]
    assert main(argv) == 2
    assert "--rho is not an option of --method gd" in capsys.readouterr().err
    assert not (tmp_path / "v.nc").exists()


@pytest.mark.parametrize("returns", [True, False])
def test_catapult_is_a_spike_that_returns(returns):
    """A loss that jumps above CATAPULT_FACTOR times its running minimum is a catapult
    only if it later falls back below that minimum (a collapse, whose loss rises to
    log 2 and stays, is not one)."""
    import xarray as xr

    from samflow.validity import CATAPULT

    loss = np.geomspace(1.0, 0.1, 30)
    loss[12:16] = 2.0  # above 2 * loss[11] = 0.84
    if not returns:
        loss[16:] = 2.0
    b = xr.DataArray(np.linspace(0.0, 1.0, 30)[:, None], dims=("time", "coord"))
    code = discrete_behaviour(b, xr.DataArray(loss, dims="time")).values
    assert bool(code & CATAPULT) == returns


@pytest.fixture
def no_sweep(monkeypatch):
    """samflow.sweep replaced by a failure: a check must come before any sweep runs."""

    def sweep(*args, **kwargs):
        raise AssertionError("a sweep ran before the arguments were checked")

    monkeypatch.setattr(samflow, "sweep", sweep)


@pytest.mark.parametrize(
    "given, message",
    [
        ({"alpha": "0.1,1"}, "alpha must be a list of numbers, got the string '0.1,1'"),
        ({"alpha": ["a"]}, "alpha must hold numbers, got <U1 values"),
        ({"alpha": [0.1 + 1j]}, "alpha must be real, got complex values"),
        ({"eta": [0.1, -1.0]}, "eta must hold numbers > 0, got [0.1, -1.0]"),
        ({"handoff_rtol": "x"}, "handoff_rtol must be a number, got 'x' (str)"),
        ({"tau_cover": 0}, "tau_cover must be > 0, got 0"),
        ({"tau_cover": -1}, "tau_cover must be > 0, got -1"),
        ({"tau_cover": float("nan")}, "tau_cover must be finite, got nan"),
        ({"tau_cover": float("inf")}, "tau_cover must be finite, got inf"),
        ({"max_steps": 0}, "max_steps must be an integer in 1.."),
        ({"steps": 10**12}, "steps = 1000000000000: too many steps for this grid: a grid of"),
        ({"sharpness": "yes"}, "sharpness must be True or False"),
    ],
)
def test_every_argument_is_checked_before_a_sweep(no_sweep, given, message):
    with pytest.raises(samflow.InputError) as caught:
        validity_map("sam-l2", **{"alpha": [0.1, 0.2], "eta": [0.05, 0.1], **given})
    assert message in str(caught.value)


@pytest.mark.parametrize(
    "options, message",
    [
        (["--max-steps", "0"], "--max-steps must be >= 1, got 0"),
        (["--tau-cover", "0"], "--tau-cover must be > 0, got 0.0"),
        (["--steps", "0"], "--steps must be >= 1, got 0"),
        (["--handoff-rtol", "-1"], "--handoff-rtol must be >= 0, got -1.0"),
        (["--figure", ""], "--figure is empty; give a PNG or PDF path, or leave it out"),
        (["--steps", "1000000000000"], "steps = 1000000000000: too many steps for this grid"),
    ],
)
def test_the_command_names_its_options(no_sweep, tmp_path, capsys, options, message):
    from samflow.cli import main

    out = tmp_path / "v.nc"
    assert main(["validity", "--out", str(out), *options]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not out.exists()
