"""How long a discrete run takes on this machine: measured once, kept beside the
compile cache, and used to ask for ``yes`` before a run past a day and to show an
estimated end while a long trajectory runs.

A discrete run of ``points`` grid points of dimension ``d`` runs its chunks one after
another, each chunk's points side by side (split over the devices), so it takes about

    t = ceil(points / chunk) * steps * (a + b * width * d * L / 2),
    width = ceil(min(chunk, points) / devices),

with ``a`` the seconds of one step whatever its width (a loop iteration's dispatch and
bookkeeping: what a one-point trajectory costs) and ``b`` the seconds of one
coordinate-step. Both are measured (:func:`measure`) by a stand-in of the engine's
l2-SAM step on the depth-2 product network (two gradients and a normalisation per
step, in a ``lax.fori_loop``), compiled in a fraction of a second, not by the engine's
own program (which takes seconds to compile); a measurement is kept per machine,
backend, device and JAX version in ``step-rates.json`` beside the compile cache
(:mod:`samflow.compile_cache`), so each machine measures once. A run that stops early
(its fate decided) takes less: the estimate is an upper bound of the steps.

:data:`SLOWEST` bounds ``a`` and ``b`` from above on any machine samflow runs on, so a
run that even then ends within a day, or within the few seconds that earn a progress
bar, is let through without measuring anything.
"""

from __future__ import annotations

import json
import math
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

DAY_SECONDS = 86_400.0
SLOWEST = (1e-3, 1e-7)
"""``(a, b)`` no machine exceeds: 1 ms a step (the bench CPU takes about 3 us, a GPU
tens of us) and 1e7 coordinate-steps a second (the bench CPU's marginal rate is 1.5e9,
docs/benchmarks.md)."""
PROGRESS_SECONDS = 3.0
"""A trajectory estimated to take longer shows a bar with its estimated end."""
FILE = "step-rates.json"

_measured: dict[str, tuple[float, float]] = {}


def seconds(
    points: int,
    d: int,
    steps: int,
    chunk: int,
    rates: tuple[float, float],
    layers: int = 2,
    devices: int = 1,
) -> float:
    """The estimated seconds of a discrete run at ``rates`` ``(a, b)`` (module docstring;
    ``b`` measured at 2 layers, scaled by ``layers / 2``) on ``devices`` devices (one:
    the slower assumption, where JAX must not start yet)."""
    a, b = rates
    chunk = max(1, min(int(chunk), int(points)))
    width = math.ceil(chunk / max(int(devices), 1))
    return math.ceil(points / chunk) * float(steps) * (a + b * width * d * max(layers, 2) / 2)


def device_count() -> int:
    """The devices a run shards over (a multi-process run joined first, as it must be
    before JAX starts its backends: :func:`samflow.devices.start_distributed`)."""
    from samflow import devices

    devices.start_distributed()
    import jax

    return len(jax.devices())


def machine() -> str:
    """What the rates are measured for: backend, device kind and count, CPU, JAX."""
    device_count()  # a multi-process run joined before JAX starts
    import jax

    device = jax.devices()[0]
    return (
        f"{jax.default_backend()}/{device.device_kind}/{len(jax.devices())} devices/"
        f"{platform.machine()} x {os.cpu_count()} cores/jax {jax.__version__}"
    )


def rates(measure_now: bool = True) -> tuple[float, float] | None:
    """``(a, b)`` of this machine: kept from an earlier process, else measured now
    (:func:`measure`: seconds, once per machine, said on stderr) and kept (an unwritable
    folder keeps it in this process only); None where none is kept and not
    ``measure_now``."""
    key = machine()
    if key in _measured:
        return _measured[key]
    path = _file()
    kept = _read(path)
    entry = kept.get(key)
    if isinstance(entry, dict) and _valid(entry.get("a"), entry.get("b")):
        _measured[key] = (float(entry["a"]), float(entry["b"]))
        return _measured[key]
    if not measure_now:
        return None
    import sys

    print(
        "samflow: measuring this machine's step rate for the estimate of a long run (once, "
        f"kept in {path or 'this process'})",
        file=sys.stderr,
        flush=True,
    )
    a, b = measure()
    _measured[key] = (a, b)
    if path is not None:
        kept[key] = {"a": a, "b": b, "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        try:
            from samflow.io import write_text_atomic

            path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(path, json.dumps(kept, indent=1, sort_keys=True))
        except OSError:
            pass
    return a, b


def _valid(a, b) -> bool:
    return all(isinstance(v, int | float) and math.isfinite(v) and v > 0 for v in (a, b))


def _file() -> Path | None:
    """``step-rates.json`` beside the compile cache folder (in use, else chosen); None
    where no folder can be named."""
    from samflow import compile_cache
    from samflow.errors import InputError

    try:
        folder = compile_cache.folder_in_use() or compile_cache.chosen_dir()
    except InputError:
        return None
    return None if folder is None else folder.parent / FILE


def _read(path: Path | None) -> dict:
    if path is None:
        return {}
    try:
        held = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return held if isinstance(held, dict) else {}


def measure() -> tuple[float, float]:
    """``(a, b)`` measured with the engine's own compiled programs: an l2-SAM trajectory
    on one point of d = 2 (``a``: seconds a step, from the difference of two step
    counts, so that what a run costs once cancels) and a sweep of 1024 such points in
    one chunk (``b``: the seconds per coordinate-step past ``a``). The step counts grow
    until each difference takes about 0.3 s; the programs are compiled once
    (a few seconds on a CPU, less with the compile cache warm)."""
    import numpy as np

    import samflow

    def trajectory(steps: int) -> float:
        start = time.perf_counter()
        samflow.trajectory(
            "sam-l2", depth=2, mu=[1.0, 2.0], alpha=0.01, rho=0.1, summaries=False,
            runner=samflow.Discrete(eta=1e-3, steps=steps, save=samflow.Every(steps)),
        )  # fmt: skip
        return time.perf_counter() - start

    alphas = np.geomspace(1e-3, 1e-2, 1024).tolist()

    def sweep(steps: int) -> float:
        start = time.perf_counter()
        samflow.sweep(
            "sam-l2", depth=2, mu=[1.0, 2.0], rho=0.1, axes={"alpha": alphas}, chunk=1024,
            runner=samflow.Discrete(eta=1e-3, steps=steps, save=samflow.Every(steps)),
        )  # fmt: skip
        return time.perf_counter() - start

    a = per_step(trajectory, 2000)
    wide = per_step(sweep, 200)
    b = max((wide - a) / (1024 * 2 / device_count()), 1e-15)
    return a, b


def per_step(run: Callable[[int], float], first: int) -> float:
    """Seconds a step of ``run`` (``run(steps)`` runs that many steps and returns its
    seconds): the difference of ``first`` and ``more`` steps, each
    the fastest of three runs taken in turn (so both see the same load); ``more``
    is chosen so that the difference is about 0.3 s. A difference under half of
    ``more``'s own seconds a step means a burst of load fell on one side: measured
    again (three tries), then the upper bound ``more``'s seconds / ``more`` is kept
    (an estimate too long asks for ``yes`` once too often; one too short would not
    ask)."""
    run(first)  # compiles
    for _ in range(3):
        base = min(run(first) for _ in range(2))
        more = int(min(max(first * 0.3 / max(base, 1e-6), 10 * first), 1000 * first))
        lo, hi = [], []
        for _ in range(3):
            lo.append(run(first))
            hi.append(run(more))
        step = (min(hi) - min(lo)) / (more - first)
        if step >= 0.5 * min(hi) / more:
            return step
    return min(hi) / more


def describe(rates_: tuple[float, float]) -> str:
    """The measured rates in words, for a message."""
    a, b = rates_
    return f"{a * 1e6:.3g} us a step and {1 / b:.3g} coordinate-steps/s measured here"


def clock(seconds_: float) -> str:
    """``seconds_`` as days, hours, minutes or seconds, for a message."""
    for unit, size in (("days", DAY_SECONDS), ("hours", 3600.0), ("min", 60.0)):
        if seconds_ >= size:
            return f"{seconds_ / size:.3g} {unit}"
    return f"{seconds_:.3g} s"


class Clock:
    """A bar of the time a run is estimated to take (``estimate`` seconds; None: the
    elapsed time only), moved by a thread while the run's one compiled call runs: its
    end is an estimate, held short of 100 % until the run returns. Shown only on a
    terminal (tqdm's ``disable=None``), and only once ``delay`` seconds have passed (a
    run that ends sooner shows nothing)."""

    def __init__(self, estimate: float | None, desc: str = "trajectory (estimated end)", delay=0.0):
        import threading

        from tqdm.auto import tqdm

        total = None if estimate is None else max(round(estimate, 1), 0.1)
        self.bar = tqdm(
            total=total, desc=desc, unit="s", disable=None, delay=delay,
            bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed}<{remaining}"
            if total else "{desc}: {elapsed} elapsed",
        )  # fmt: skip
        self.total, self.delay, self.stop = total, delay, threading.Event()
        self.start = time.monotonic()
        self.thread = threading.Thread(target=self._tick, daemon=True)

    def _tick(self) -> None:
        while not self.stop.wait(0.25):
            elapsed = time.monotonic() - self.start
            self.bar.n = elapsed if self.total is None else min(elapsed, 0.99 * self.total)
            if elapsed >= self.delay:
                self.bar.refresh()

    def __enter__(self):
        if not self.bar.disable:
            self.thread.start()
        return self

    def __exit__(self, kind, *exc) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join()
        shown = time.monotonic() - self.start >= self.delay
        if shown and not self.bar.disable:
            if kind is None and self.total is not None:
                self.bar.n = self.total
            self.bar.refresh()
            # What update() would have set: close() then ends the bar's line (it skips a
            # bar whose last print it dates before its delay, as never shown).
            self.bar.last_print_t = time.time()
        self.bar.close()


def trajectory_clock(d: int, steps: int | None, layers: int, shown: bool):
    """The bar of a trajectory (:class:`Clock`) where ``shown`` and stderr is a terminal;
    a null context otherwise. A discrete run (``steps``) that may take over
    :data:`PROGRESS_SECONDS` has its estimated end, from this machine's kept rates,
    measured now where none are kept and even :data:`SLOWEST` puts the run past a
    minute (a run of seconds is not worth a measurement of seconds); one that even
    :data:`SLOWEST` ends sooner has none. A flow (``steps`` None: an adaptive solve has
    no step count), and a discrete run without kept rates, shows its elapsed time once
    past :data:`PROGRESS_SECONDS`."""
    import contextlib
    import sys

    if not shown or not sys.stderr.isatty():
        return contextlib.nullcontext()
    if steps is None:
        return Clock(None, desc="trajectory", delay=PROGRESS_SECONDS)
    bound = seconds(1, d, steps, 1, SLOWEST, layers)
    if bound <= PROGRESS_SECONDS:
        return contextlib.nullcontext()
    known = rates(measure_now=bound > 60.0)
    if known is None:
        return Clock(None, desc="trajectory", delay=PROGRESS_SECONDS)
    estimate = seconds(1, d, steps, 1, known, layers)
    if estimate <= PROGRESS_SECONDS:
        return contextlib.nullcontext()
    return Clock(estimate)
