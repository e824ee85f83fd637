"""Solvers and settings are checked when made (samflow.runners, samflow.compile_cache):
each mistake of issue 39 is refused with one line naming the value and what works."""

from __future__ import annotations

import diffrax
import numpy as np
import pytest

import samflow
from samflow import compile_cache

WORKS = "use one of diffrax.Tsit5(), Dopri5(), Dopri8(), Heun(), Bosh3(), Kvaerno5()"


@pytest.mark.parametrize(
    "solver, message",
    [
        (
            diffrax.Euler(),
            f"solver Euler() has no error estimate, which the flow's adaptive steps need: {WORKS}",
        ),
        (diffrax.Dopri5, "solver Dopri5 is a class: pass an instance, diffrax.Dopri5()"),
        (
            diffrax.SemiImplicitEuler(),
            f"solver SemiImplicitEuler() solves several terms (an "
            f"SDE or split system); the flow is one ODETerm: {WORKS}",
        ),
        (diffrax.EulerHeun(), "solver EulerHeun() solves several terms"),
        (3, f"solver must be a diffrax solver, got 3; {WORKS}"),
    ],
)
def test_a_solver_the_flow_cannot_use_is_named(solver, message):
    with pytest.raises(samflow.InputError) as caught:
        samflow.Flow(solver=solver)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    "solver",
    [diffrax.Dopri8(), diffrax.Heun(), diffrax.Bosh3(), diffrax.Kvaerno5(), diffrax.Tsit5()],
)
def test_an_adaptive_ode_solver_is_taken(solver):
    assert samflow.Flow(solver=solver).solver is solver


def test_log_spaced_never_draws_more_times_than_steps():
    """``LogSpaced(10**12)`` over 40 steps saves every step once (it allocated 7.28 TiB),
    and a count near the steps saves what the full log grid rounds to."""
    runner = samflow.Discrete(steps=40, save=samflow.LogSpaced(10**12))
    assert runner.times().tolist() == list(range(41))
    assert runner.n_records() == 41
    for steps, n, first in ((40, 60, None), (1000, 3000, 2.5), (500, 2000, None)):
        runner = samflow.Discrete(steps=steps, save=samflow.LogSpaced(n, first))
        full = np.unique(np.round(np.geomspace(first or 1, steps, n))).astype(np.int64)
        assert runner.times().tolist() == [0, *np.union1d(full, [steps]).tolist()]


def test_booleans_are_not_times():
    with pytest.raises(
        samflow.InputError,
        match=r"save times must be numbers, not booleans, "
        r"got \(0, True\)",
    ):
        samflow.At((0, True))
    with pytest.raises(samflow.InputError, match="not booleans"):
        samflow.At(np.array([0, 1, True], dtype=object))


def test_a_huge_last_step_is_named():
    with pytest.raises(
        samflow.InputError,
        match=r"record-steps must end at a step below "
        r"2\^62, got 1e\+300",
    ):
        samflow.Discrete(save=samflow.At([0, 1e300]))


def test_tau_cap_is_bounded_by_what_a_solver_resolves():
    """Past tau_max / eps (float64) a rounding unit of the solver's time is the whole
    recorded run: 1e308 is refused, naming it; the boundary search's 100 x tau_max cap,
    also with max_steps = 20, is taken."""
    message = r"tau-cap = 1e\+308 is past what a solver resolves from tau-max = 2: at most "
    with pytest.raises(samflow.InputError, match=message + r"tau-max / eps = 9.01e\+15"):
        samflow.Flow(tau_max=2.0, tau_cap=1e308)
    assert samflow.Flow(tau_max=2.0, tau_cap=9e15).tau_cap == 9e15
    assert samflow.Flow(tau_max=200.0, tau_cap=2e4, max_steps=20).tau_cap == 2e4


@pytest.mark.parametrize("setting", [123, 1.5, ["/tmp"]])
def test_compile_cache_enable_is_type_checked(setting):
    with pytest.raises(
        samflow.InputError,
        match=r"compile cache setting must be a folder \(a "
        rf"str or a path\) or 'off', got {setting!r}".replace("[", r"\["),
    ):
        compile_cache.enable(setting)


def test_a_run_past_a_day_anywhere_asks_for_yes(tmp_path, capsys):
    """The issue's ``--steps 4000000000000000000`` is refused at once, by the command line
    and by Python; ``yes`` lets it through the check (the run itself is not started)."""
    from samflow import inputs
    from samflow.cli import main

    argv = ["trajectory", "--method", "sam-l2", "--depth", "2", "--mu", "1,2", "--alpha", "0.5",
            "--rho", "0.1", "--steps", "4000000000000000000", "--out"]  # fmt: skip
    argv.append(str(tmp_path / "t.nc"))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert (
        "1 point x d = 2 x 4000000000000000000 steps is 8e+18 coordinate-steps: more than "
        "92.6 days even at 1e+12/s, beyond any machine; pass --yes (Python: yes=True)"
    ) in err
    runner = samflow.Discrete(eta=0.1, steps=10**14)
    with pytest.raises(samflow.InputError, match=r"1000 points x d = 2 x 100000000000000 steps"):
        samflow.sweep("gd", depth=2, mu=[1.0, 2.0], axes={"alpha": "0.1:1:1000:log"},
                      runner=runner)  # fmt: skip
    with pytest.raises(samflow.InputError, match="yes must be True or False"):
        samflow.trajectory("gd", depth=2, mu=[1.0, 2.0], alpha=0.5, runner=runner, yes="y")
    inputs.check_duration(1000, 2, 10**14, yes=True)  # asked for: no refusal
    inputs.check_duration(10**6, 4, 10**4, yes=False)  # an ordinary large sweep: none
