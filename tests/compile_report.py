"""Where the suite's time goes: per test, the seconds JAX spends tracing, lowering and
compiling, the programs it compiled and those it read back from the compile cache.

The suite is mostly compile time: a flow program takes about 10 s of CPU to trace and
compile (a discrete one 1-3 s), and a run of a few points well under a second, so a
test that makes a program no other test shares (another save-grid length, depth,
tolerance or rule) costs about 10 s. An opt-in pytest plugin, off in ``make test``::

    pytest -p tests.compile_report --compile-report /tmp/compiles.jsonl tests/test_flows.py
    python -m tests.compile_report /tmp/compiles.jsonl       # per file, then per test

Each test appends one JSON line (also from every xdist worker): its wall and CPU
seconds, ``trace``, ``lower`` and ``compile`` seconds (``compile`` includes reading a
program back from the cache), ``compiled`` (programs compiled) and ``cached`` (programs
read back), and ``programs``: each samflow program traced (its
:class:`samflow.engine.Setup`, the rule by name, and the shapes of its arguments), from
which the summary counts the setups the run compiled. Work in child processes (the
command line, a second process) is not seen.
"""

from __future__ import annotations

import collections
import json
import re
import sys
import time

import pytest

_EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
    "/jax/core/compile/backend_compile_duration": "compile",
}
_now: collections.Counter = collections.Counter()
_setups: list[str] = []


def _duration(event: str, seconds: float, **_) -> None:
    name = _EVENTS.get(event)
    if name is not None:
        _now[name] += seconds
        if name == "compile":
            _now["programs"] += 1


def _event(event: str, **_) -> None:
    if event == "/jax/compilation_cache/cache_hits":
        _now["cached"] += 1


def pytest_addoption(parser):
    parser.addoption(
        "--compile-report",
        metavar="PATH",
        help="append one JSON line per test (JAX trace/compile seconds and counts) to PATH",
    )


def pytest_configure(config):
    if config.getoption("compile_report"):
        import jax.monitoring

        jax.monitoring.register_event_duration_secs_listener(_duration)
        jax.monitoring.register_event_listener(_event)
        _name_programs()


def _text(setup) -> str:
    """``setup`` as text, the same in every process: its rule by name and no addresses."""
    text = repr(setup).replace(repr(setup.rule), repr(setup.rule.name))
    return re.sub(r" at 0x[0-9a-f]+", "", text)


def _name_programs() -> None:
    """Record each samflow program that is traced (its :class:`samflow.engine.Setup`
    and input shapes), so that a report can say which setups the suite compiles."""
    import jax

    from samflow import engine

    traced = engine.traced_program

    def named(setup):
        run = traced(setup)

        def run_named(points, times, *rest, **kw):
            shapes = [tuple(x.shape) for x in jax.tree_util.tree_leaves(points)]
            _setups.append(f"{_text(setup)} points {shapes} times {tuple(times.shape)}")
            return run(points, times, *rest, **kw)

        return run_named

    engine.traced_program = named


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    path = item.config.getoption("compile_report")
    _now.clear()
    _setups.clear()
    wall, cpu = time.perf_counter(), time.process_time()
    yield
    if path:
        row = {
            "test": item.nodeid,
            "wall": round(time.perf_counter() - wall, 3),
            "cpu": round(time.process_time() - cpu, 3),
            **{k: round(_now[k], 3) for k in ("trace", "lower", "compile")},
            "compiled": _now["programs"] - _now["cached"],
            "cached": _now["cached"],
            "programs": list(_setups),
        }
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")


def summary(rows: list[dict]) -> str:
    """Per file (slowest first), then the 30 slowest tests: wall seconds, the part spent
    tracing, lowering and compiling, and the programs compiled and read back."""
    files: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for row in rows:
        f = files[row["test"].split("::")[0]]
        f["tests"] += 1
        for k in ("wall", "cpu", "trace", "lower", "compile", "compiled", "cached"):
            f[k] += row[k]
    head = f"{'wall s':>8} {'jit s':>8} {'compiled':>8} {'cached':>6} {'tests':>5}  "
    lines = [head + "file"]
    for name, f in sorted(files.items(), key=lambda kv: -kv[1]["wall"]):
        jit = f["trace"] + f["lower"] + f["compile"]
        counts = f"{f['compiled']:8d} {f['cached']:6d} {f['tests']:5d}"
        lines.append(f"{f['wall']:8.1f} {jit:8.1f} {counts}  {name}")
    total = sum(f["wall"] for f in files.values())
    jit = sum(f["trace"] + f["lower"] + f["compile"] for f in files.values())
    lines.append(f"{total:8.1f} {jit:8.1f}  all ({len(rows)} tests)")
    parts = {k: sum(f[k] for f in files.values()) for k in ("trace", "lower", "compile")}
    lines.append(
        f"of {total:.0f} s: tracing {parts['trace']:.0f} s, lowering {parts['lower']:.0f} s, "
        f"compiling {parts['compile']:.0f} s"
    )
    traced = [p for row in rows for p in row.get("programs", [])]
    setups = {p.split(" points ")[0] for p in traced}
    again = sum(n - 1 for n in collections.Counter(traced).values())
    lines.append(
        f"samflow programs traced: {len(traced)} ({len(set(traced))} setups and shapes, "
        f"{len(setups)} setups; traced again: {again})"
    )
    lines += ["", head.replace("tests", "") + "test"]
    for row in sorted(rows, key=lambda r: -r["wall"])[:30]:
        j = row["trace"] + row["lower"] + row["compile"]
        counts = f"{row['compiled']:8d} {row['cached']:6d}"
        lines.append(f"{row['wall']:8.1f} {j:8.1f} {counts}        {row['test']}")
    return "\n".join(lines)


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        print(summary([json.loads(line) for line in f if line.strip()]))
