"""The estimate before a long run (samflow.estimate): the rates measured on this machine
predict the time of a discrete run they were not measured on; a run past a day here is
refused unless ``yes``, one the slowest machine ends within a day is let through
without measuring; the rates are kept beside the compile cache; a long trajectory on
a terminal shows a bar with its estimated end, and no bar goes to a log."""

from __future__ import annotations

import io
import json
import time

import numpy as np
import pytest

import samflow
from samflow import estimate


def test_the_estimate_is_the_documented_formula():
    """t = ceil(points / chunk) * steps * (a + b * ceil(min(chunk, points) / devices) * d
    * L / 2), written out here."""
    a, b = 2e-6, 3e-9
    for points, d, steps, chunk, layers, devices in ((1, 2, 10**6, 1, 2, 1),
                                                     (1000, 4, 5000, 256, 3, 1),
                                                     (1000, 4, 5000, 256, 3, 4),
                                                     (7, 3, 100, 100, 2, 2)):  # fmt: skip
        width = -(-min(chunk, points) // devices)
        want = -(-points // min(chunk, points)) * steps * (a + b * width * d * layers / 2)
        got = estimate.seconds(points, d, steps, chunk, (a, b), layers, devices)
        assert got == pytest.approx(want, rel=1e-12)  # the same arithmetic, reordered


def test_measured_rates_predict_another_run():
    """Rates measured on an l2-SAM trajectory and a 1024-point sweep at depth 2 predict a
    GD sweep at depth 3, d = 3, 600 points in 3 chunks, within a factor of 3 either way
    (the stand-in differs in method, depth, d and chunking; the bound leaves room for a
    machine shared with other work). The estimate covers the steps: the sweep is timed
    on its second and third calls, compiled (the faster kept), and the rates are
    measured twice (the faster of each kept): a burst of load during one measurement
    once put the prediction at 3.4 times the sweep's time."""
    rates = [estimate.measure() for _ in range(2)]
    a, b = min(r[0] for r in rates), min(r[1] for r in rates)
    assert 0 < a < estimate.SLOWEST[0] and 0 < b < estimate.SLOWEST[1]
    kw = dict(depth=3, mu=[1.0, 2.0, 3.0], axes={"alpha": np.geomspace(1e-3, 1e-2, 600)},
              chunk=200, runner=samflow.Discrete(eta=1e-3, steps=20000))  # fmt: skip
    samflow.sweep("gd", **kw)
    took = []
    for _ in range(2):  # the faster of two: a burst of load is not the sweep's time
        start = time.perf_counter()
        samflow.sweep("gd", **kw)
        took.append(time.perf_counter() - start)
    took = min(took)
    predicted = estimate.seconds(600, 3, 20000, 200, (a, b), 3, estimate.device_count())
    assert took / 3 < predicted < took * 3, (took, predicted)


def _stand_in(slow):
    """A run of 0.02 s + 1 us a step, ``slow(call, steps)`` times slower on its calls
    that ``slow`` picks (a burst of load on a shared machine)."""
    calls = []

    def run(steps):
        calls.append(steps)
        return (0.02 + 1e-6 * steps) * slow(len(calls), steps)

    return run


def test_a_burst_of_load_does_not_make_a_step_free():
    """``per_step`` on a stand-in of 1 us a step: exact when quiet; a burst that makes the
    short runs of the first round 20 times slower (the difference would be negative: a
    rate of zero, every run let through) is measured again and exact; a burst over
    every short run leaves the upper bound, the long run's seconds over its steps,
    which is never below the true rate."""
    quiet = estimate.per_step(_stand_in(lambda call, steps: 1.0), 2000)
    assert quiet == pytest.approx(1e-6, rel=1e-9)  # 0.02 s cancels exactly
    first_round = estimate.per_step(
        _stand_in(lambda call, steps: 20.0 if call <= 9 and steps == 2000 else 1.0), 2000
    )
    assert first_round == pytest.approx(1e-6, rel=1e-9)
    always = estimate.per_step(_stand_in(lambda call, steps: 20.0 if steps == 2000 else 1.0), 2000)
    # the slow base asks for the fewest long steps, 10 x 2000: (0.02 s + 0.02 s) / 20000
    assert always == pytest.approx(2e-6, rel=1e-9) and always >= 1e-6


@pytest.fixture
def kept(tmp_path, monkeypatch):
    """Rates kept in a fresh step-rates.json beside a compile cache folder in tmp_path."""
    from samflow import compile_cache

    monkeypatch.setattr(compile_cache, "folder_in_use", lambda: tmp_path / "jax")
    monkeypatch.setattr(estimate, "_measured", {})
    return tmp_path / "step-rates.json"


def test_rates_are_measured_once_and_kept_beside_the_compile_cache(kept, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(estimate, "measure", lambda: calls.append(1) or (4e-7, 5e-9))
    assert estimate.rates() == (4e-7, 5e-9)
    assert "measuring this machine's step rate" in capsys.readouterr().err
    held = json.loads(kept.read_text())
    assert held[estimate.machine()]["a"] == 4e-7 and held[estimate.machine()]["b"] == 5e-9
    monkeypatch.setattr(estimate, "_measured", {})  # a new process: read from the file
    assert estimate.rates() == (4e-7, 5e-9) and calls == [1]
    kept.write_text("not json")  # a damaged file is measured anew, and rewritten
    monkeypatch.setattr(estimate, "_measured", {})
    assert estimate.rates() == (4e-7, 5e-9) and calls == [1, 1]
    assert json.loads(kept.read_text())[estimate.machine()]["b"] == 5e-9
    monkeypatch.setattr(estimate, "_measured", {})
    assert estimate.rates(measure_now=False) == (4e-7, 5e-9)


def test_a_run_past_a_day_on_this_machine_asks_for_yes(kept, monkeypatch):
    """At a = 1 us a step (kept as this machine's), 2e11 steps of one point are 2.32 days:
    refused, named with the measured rates; 5e10 are 14 hours: let through (the check
    only; the run is not started). A run the slowest machine ends within a day measures
    nothing."""
    kept.write_text(json.dumps({estimate.machine(): {"a": 1e-6, "b": 1e-9}}))
    kw = dict(depth=2, mu=[1.0, 2.0], alpha=0.5, rho=0.1)
    with pytest.raises(samflow.InputError) as caught:
        samflow.trajectory("sam-l2", runner=samflow.Discrete(steps=2 * 10**11), **kw)
    assert str(caught.value) == (
        "1 point x d = 2 x 200000000000 steps would take about 2.32 days on this machine "
        "(1 us a step and 1e+09 coordinate-steps/s measured here), past a day; pass --yes "
        "(Python: yes=True) to run it all the same"
    )
    from samflow import api

    spec = api.SweepSpec.from_inputs(
        "sam-l2", runner=samflow.Discrete(steps=5 * 10**10), depth=2, mu=[1.0, 2.0], rho=0.1
    )
    api._check_duration(spec, False)  # 14 hours here: no refusal
    monkeypatch.setattr(estimate, "rates", lambda *a: pytest.fail("measured for a small run"))
    spec = api.SweepSpec.from_inputs(
        "gd", runner=samflow.Discrete(steps=10**4), depth=2, mu=[1.0, 2.0],
        axes={"alpha": np.geomspace(0.1, 1, 1000)},
    )  # fmt: skip
    api._check_duration(spec, False, chunk=1000)  # 10^4 steps: under a day anywhere


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_long_trajectory_on_a_terminal_shows_its_estimated_end(kept, monkeypatch):
    """Where the kept rates put a trajectory past PROGRESS_SECONDS, stderr a terminal: a
    bar of its estimated end, ended at 100 %; on a log (not a terminal), or asked quiet,
    or a short run: no bar."""
    import sys

    kept.write_text(json.dumps({estimate.machine(): {"a": 1e-6, "b": 1e-9}}))
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with estimate.trajectory_clock(2, 10**8, 2, True) as clock:  # 100 s at a = 1 us
        assert clock.total == pytest.approx(1e8 * (1e-6 + 1e-9 * 2), abs=0.05)
        time.sleep(0.6)
    shown = terminal.getvalue()
    assert "trajectory (estimated end):   0%" in shown and "100%" in shown
    for d, steps, shown_ in ((2, 10**8, False), (2, 100, True)):
        assert estimate.trajectory_clock(d, steps, 2, shown_).__class__.__name__ == "nullcontext"
    terminal.seek(0)
    terminal.truncate()
    with estimate.trajectory_clock(2, None, 2, True) as clock:  # a flow: elapsed, after 3 s
        assert clock.total is None and clock.delay == estimate.PROGRESS_SECONDS
        time.sleep(0.3)
    assert terminal.getvalue() == ""  # ended before the delay: nothing shown
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # a log
    assert estimate.trajectory_clock(2, 10**8, 2, True).__class__.__name__ == "nullcontext"
    assert estimate.trajectory_clock(2, None, 2, True).__class__.__name__ == "nullcontext"


def test_a_sweep_bar_goes_to_a_terminal_only(monkeypatch):
    import sys

    from samflow.sweeps.store import _Progress

    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert _Progress(10, True).bar.disable
    monkeypatch.setattr(sys, "stderr", _Terminal())
    assert not _Progress(10, True).bar.disable
    assert _Progress(10, False).bar.disable
