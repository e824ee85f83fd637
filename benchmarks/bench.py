"""samflow benchmarks: the engine against what a researcher would otherwise use.

``make bench`` (or ``python -m benchmarks.bench``) runs every case, prints the table and
writes ``benchmarks/results/latest.json`` and ``latest.md`` (``partial.*`` with ``--only``,
so a partial run leaves the full table alone), and puts the table into the benchmarks
page of the documentation (``docs/benchmarks.md``) between its bench markers.
``--quick`` shrinks every case (a smoke test).

Unit: coordinate-steps per second = grid points x d x steps / seconds; flows:
trajectories per second at the stated tolerance. Every figure is the median of
``--repeats`` (>= 5) runs after one warm-up run; for JAX the warm-up's extra time over
the median is reported as compile time. The engine is timed through the point runner
(``samflow.sweeps.store.computed`` over the chunks of ``chunk_plan``): the program
behind ``samflow.sweep`` and ``samflow phase``, without writing files.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
DOCS_PAGE = ROOT / "docs" / "benchmarks.md"
MARK_START, MARK_END = "<!-- bench:start -->", "<!-- bench:end -->"
MU4 = (1.0, 2.0, 3.0, 4.0)
ETA = 0.01


# ------------------------------------------------------------------ the engine
def l2_spec(points: int, depth: int, d: int, steps: int, dtype: str):
    """l2-SAM over a square (alpha, rho) grid of about ``points`` points, balanced init."""
    from samflow.rules import SAM_L2
    from samflow.runners import Discrete
    from samflow.sweeps.spec import SweepSpec

    return SweepSpec(
        rule=SAM_L2,
        runner=Discrete(eta=ETA, steps=steps),
        depth=depth,
        axes=_square_grid(points),
        dtype=dtype,
        mu=tuple(float(m) for m in range(1, d + 1)),
    )


def few_records(spec):
    """``spec`` recording 3 times (steps 0, steps / 2 and the last): against the default
    100 records, the difference is what the records cost."""
    from samflow.runners import Every

    steps = spec.runner.steps
    return replace(spec, runner=replace(spec.runner, save=Every(max(1, steps // 2))))


def _square_grid(points: int):
    """(alpha, rho) axes of about ``points`` points."""
    from samflow.sweeps.axes import Axis

    side = round(np.sqrt(points))
    return (
        Axis("alpha", tuple(np.geomspace(0.05, 2.0, side).tolist())),
        Axis("rho", tuple(np.linspace(0.1, 1.5, side).tolist())),
    )


def flow_spec(points: int, tau_max: float, rtol: float, atol: float):
    from samflow.rules import SAM_L2
    from samflow.runners import Flow, LogSpaced
    from samflow.sweeps.spec import SweepSpec

    return SweepSpec(
        rule=SAM_L2,
        runner=Flow(tau_max=tau_max, save=LogSpaced(59), rtol=rtol, atol=atol, max_steps=20_000),
        depth=2,
        axes=_square_grid(points),
        mu=MU4,
    )


def engine_runner(spec, chunk: int = 16384):
    """``() -> None``: the whole grid through the point runner, chunk by chunk, as
    :func:`samflow.sweep` runs it (without assembling a Dataset)."""
    import jax

    from samflow.sweeps.store import chunk_plan, computed

    setup = spec.setup()
    size, blocks = chunk_plan(spec.size, chunk, len(jax.devices()))

    def run():
        return list(computed(setup, spec, blocks, size))

    return run


# ------------------------------------------------------------------ timing
def timed(fn, repeats: int) -> dict:
    """Warm-up run, then ``repeats`` timed runs: median, all runs, warm-up extra time."""
    start = time.perf_counter()
    fn()
    first = time.perf_counter() - start
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    median = float(np.median(runs))
    return {"seconds": median, "runs": runs, "warmup_extra": max(0.0, first - median)}


def calibrated_steps(run_steps, seconds: float) -> int:
    """Steps that make one run of ``run_steps(steps)`` last about ``seconds`` (>= 2).

    Baselines whose cost per step is constant are timed over this many steps of the full
    grid instead of all of them, to keep the bench short; the rate is unchanged.
    """
    run_steps(1)
    start = time.perf_counter()
    run_steps(2)
    per_step = (time.perf_counter() - start) / 2
    return max(2, round(seconds / per_step))


def record(rows, case, impl, dtype, t, work, unit="coordinate-steps/s", note="", compile_=True):
    """Append a result row; ``work`` is the amount done by one timed run."""
    row = {
        "case": case,
        "impl": impl,
        "dtype": dtype,
        "seconds": t["seconds"],
        "runs": t["runs"],
        "compile_s": t["warmup_extra"] if compile_ else None,
        "rate": work / t["seconds"],
        "unit": unit,
        "note": note,
    }
    rows.append(row)
    print(f"  {case:<28} {impl:<34} {dtype:<8} {row['rate']:10.3e} {unit}  {note}", flush=True)
    return row


# ------------------------------------------------------------------ cases
def discrete_case(
    rows, case, points, depth, d, steps, dtypes, args, baselines=True, records_row=False
):
    """The engine's row (the default 100 records) and, with ``baselines``, every
    baseline's; ``records_row`` adds the engine with 3 records (0, steps / 2, steps): the
    difference is what the records cost."""
    from benchmarks import baselines as bl
    from benchmarks import roofline

    for dtype in dtypes:
        spec = l2_spec(points, depth, d, steps, dtype)
        work = spec.size * d * steps
        t = timed(engine_runner(spec, args.chunk), args.repeats)
        eng = record(rows, case, "samflow (sweep engine)", dtype, t, work)
        eng["points"], eng["steps"], eng["depth"], eng["d"] = spec.size, steps, depth, d
        if records_row:
            few = few_records(spec)
            t = timed(engine_runner(few, args.chunk), args.repeats)
            n = len(few.runner.times())
            record(rows, case, f"samflow, {n} records", dtype, t, work, note="records' cost apart")
        if not baselines:
            continue
        inputs = bl.grid_inputs(spec.size, depth, d, np.dtype(dtype))
        impls = [("NumPy batched", bl.numpy_run)]
        if bl.torch_available():
            impls.append(("PyTorch batched (CPU)", bl.torch_run))
        else:
            print("  PyTorch not installed: torch baseline skipped (pip install -e '.[bench]')")
        for name, run in impls:
            n = calibrated_steps(partial(run, inputs, ETA), args.baseline_seconds)
            t = timed(partial(run, inputs, ETA, n), args.repeats)
            record(rows, case, name, dtype, t, spec.size * d * n, note=f"{n} steps", compile_=False)
        k = args.optax_traj
        t = timed(partial(bl.optax_loop, inputs, ETA, steps, k), args.repeats)
        record(
            rows,
            case,
            "optax SAM, loop over points",
            dtype,
            t,
            k * d * steps,
            note=f"{k} of {spec.size} points timed, rate extrapolated",
            compile_=False,
        )
        if depth == 2:
            lib = roofline.build(dtype)
            if lib is None:
                print("  gcc not found: roofline skipped")
                continue
            t = timed(roofline.runner(lib, inputs, ETA, steps), args.repeats)
            record(
                rows,
                case,
                "roofline (hand-fused C, balanced)",
                dtype,
                t,
                work,
                note=f"{roofline.threads()} OpenMP threads",
                compile_=False,
            )


def flow_case(rows, args):
    from benchmarks import baselines as bl

    case = "3 flow l2 L=2 d=4"
    points, tau_max, rtol, atol = args.flow_points, 50.0, 1e-6, 1e-9
    spec = flow_spec(points, tau_max, rtol, atol)
    t = timed(engine_runner(spec, args.chunk), args.repeats)
    eng = record(
        rows,
        case,
        "samflow (sweep engine, diffrax)",
        "float64",
        t,
        spec.size,
        unit="trajectories/s",
        note=f"tau=50, rtol={rtol}, atol={atol}",
    )
    eng["points"] = spec.size
    idx = np.linspace(0, spec.size - 1, args.scipy_traj).round().astype(int)
    inputs = bl.grid_inputs(spec.size, 2, 4, np.float64)
    alpha, rho = inputs["alpha"][idx], inputs["rho"][idx]
    t = timed(
        lambda: bl.scipy_flow_loop(alpha, rho, np.asarray(MU4), tau_max, rtol, atol),
        args.repeats,
    )
    record(
        rows,
        case,
        "SciPy solve_ivp RK45, loop",
        "float64",
        t,
        len(idx),
        unit="trajectories/s",
        note=f"{len(idx)} of {spec.size} trajectories timed, rate extrapolated",
        compile_=False,
    )


def scaling_case(rows, args):
    case_n, case_s = "4a scaling: grid size", "4b scaling: steps"
    steps = args.scaling_steps
    for points in args.scaling_points:
        spec = l2_spec(points, 2, 4, steps, "float32")
        t = timed(engine_runner(spec, args.chunk), args.repeats)
        row = record(
            rows,
            case_n,
            f"samflow, {spec.size} points",
            "float32",
            t,
            spec.size * 4 * steps,
            note=f"{steps} steps",
        )
        row["points"], row["steps"] = spec.size, steps
    for steps in args.scaling_step_counts:
        spec = l2_spec(args.scaling_fixed_points, 2, 4, steps, "float32")
        t = timed(engine_runner(spec, args.chunk), args.repeats)
        row = record(
            rows,
            case_s,
            f"samflow, {steps} steps",
            "float32",
            t,
            spec.size * 4 * steps,
            note=f"{spec.size} points",
        )
        row["points"], row["steps"] = spec.size, steps


def memory_case(args) -> list[dict]:
    out = []
    for points in args.scaling_points:
        cmd = [
            sys.executable,
            "-m",
            "benchmarks.memory_probe",
            str(points),
            str(args.scaling_steps),
            "float32",
            str(args.chunk),
        ]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        out.append(row)
        print(
            f"  peak RSS {row['points']:>8} points: {row['peak_rss_bytes'] / 2**20:8.1f} MiB",
            flush=True,
        )
    return out


# ------------------------------------------------------------------ reporting
def machine() -> dict:
    import jax

    cpu = "unknown"
    try:
        text = Path("/proc/cpuinfo").read_text()
        cpu = re.search(r"model name\s*:\s*(.*)", text).group(1).strip()
    except (OSError, AttributeError):
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "numpy": np.__version__,
        "jax_devices": [str(d) for d in jax.devices()],
        "load_average_start": os.getloadavg(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def cnn_case(rows, args):
    """Case 5: an l2-SAM step of the default CNN (benchmarks/cnn.py)."""
    from benchmarks import cnn

    case = "5 CNN l2-SAM step b=128"
    steps = args.cnn_steps
    impls = [
        ("samflow (cnn, host loop)", lambda: cnn.samflow_run("host", steps), "CPU default"),
        (
            "samflow host loop, conv=lax",
            lambda: cnn.samflow_run("host", steps, conv="lax"),
            "lax.conv in every layer",
        ),
        ("samflow scan driver", lambda: cnn.samflow_run("scan", steps), "for a GPU"),
        ("equinox + lax.scan (plain)", lambda: cnn.equinox_scan(steps), ""),
    ]
    try:
        import torch

        impls.append((f"PyTorch {torch.__version__} CPU", lambda: cnn.torch_loop(steps), ""))
    except ImportError:
        print("  (PyTorch not installed: make bench installs the bench extra)")
    for impl, make, note in impls:
        t = timed(make(), min(args.repeats, 3))
        record(rows, case, impl, "float32", t, steps, unit="steps/s", note=note)


COMPILE_CACHE_COMMANDS = (
    (
        "samflow trajectory (flow)",
        "trajectory --method sam-l2 --depth 2 --mu 1,2,3,4 --alpha 0.5 --rho 1 --mode flow "
        "--out {out}.nc",
    ),
    (
        "samflow phase (flow, 16 x 16)",
        "phase --method sam-l2 --depth 2 --mu 1,2,3,4 --mode flow --tau-max 50 "
        "--axis alpha=0.05:5:16:log --axis rho=0.1:3:16:log --out {out}.nc",
    ),
    (
        "samflow phase (flow, 15 x 16: same bucket)",
        "phase --method sam-l2 --depth 2 --mu 1,2,3,4 --mode flow --tau-max 50 "
        "--axis alpha=0.05:5:15:log --axis rho=0.1:3:16:log --out {out}.nc",
    ),
    ("samflow figures --quick --only staircase", "figures --quick --only staircase --out {out}"),
)


def compile_cache_case(rows, args):
    """Case 6: the same command in a first and a second process sharing a fresh
    compilation cache (samflow.compile_cache); wall times of whole processes. The third
    command runs after the second, so its 'first' process already finds the programs of
    its bucket on disk."""
    import tempfile

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryDirectory() as tmp:
        env["SAMFLOW_COMPILE_CACHE"] = str(Path(tmp) / "jax")
        for impl, command in COMPILE_CACHE_COMMANDS:
            seconds, cpu = [], []
            for i in (1, 2):
                out = Path(tmp) / f"{len(rows)}_{i}"
                cmd = [sys.executable, "-m", "samflow.cli", *command.format(out=out).split(), "-q"]
                used = _children_cpu()
                start = time.perf_counter()
                subprocess.run(cmd, cwd=tmp, env=env, check=True, capture_output=True)
                seconds.append(time.perf_counter() - start)
                cpu.append(_children_cpu() - used)
            (first, second), (cpu1, cpu2) = seconds, cpu
            row = {
                "case": "6 compile cache",
                "impl": impl,
                "dtype": "float64",
                "seconds": second,
                "runs": seconds,
                "cpu_seconds": cpu,
                "compile_s": None,
                "rate": first / second,
                "unit": "first/second process",
                "note": f"wall {first:.1f} s then {second:.1f} s; "
                f"CPU {cpu1:.1f} s then {cpu2:.1f} s",
            }
            rows.append(row)
            print(f"  {impl:<44} {row['note']}", flush=True)


START_UP_BARE = "import jax, jax.numpy as jnp; jnp.ones(3).block_until_ready()"
"""Case 9's baseline: the bare start of JAX (import, the CPU backend, one tiny program)."""
START_UP_RUNS = (
    (
        "samflow trajectory (flow), second process",
        [
            "-m",
            "samflow.cli",
            *"trajectory --method sam-l2 --depth 2 --mu 1,2,3,4 --alpha 0.5 --rho 1 "
            "--mode flow --tau-max 50 -q --out".split(),
        ],
    ),
    (
        "samflow.trajectory(...) (flow), second process",
        [
            "-c",
            "import samflow; ds = samflow.trajectory('sam-l2', depth=2, mu=[1, 2, 3, 4], "
            "alpha=0.5, rho=1.0, runner=samflow.Flow(tau_max=50)); int(ds['regime'])",
        ],
    ),
)
"""Case 9's processes: the first labelled trajectory of a process, by the command line
(written to a file) and by the Python call."""


def start_up_case(rows, args):
    """Case 9: a second process's first labelled trajectory against the bare start of
    JAX (:data:`START_UP_BARE`), wall time of whole processes. A fresh compile cache is
    filled by one first process of each; then ``--repeats`` rounds run the baseline and
    each second process in turn (interleaved, so that the load of a shared machine
    falls on all alike); rate = median wall time over the baseline's median."""
    import tempfile

    path = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    with tempfile.TemporaryDirectory() as tmp:
        env["SAMFLOW_COMPILE_CACHE"] = str(Path(tmp) / "jax")

        def run(argv, out=None) -> float:
            cmd = [sys.executable, *argv] + ([str(out)] if out is not None else [])
            start = time.perf_counter()
            subprocess.run(cmd, cwd=tmp, env=env, check=True, capture_output=True)
            return time.perf_counter() - start

        def out(i, k):
            return Path(tmp) / f"t{i}_{k}.nc"

        for k, (_, argv) in enumerate(START_UP_RUNS):  # the first processes fill the cache
            run(argv, out("first", k) if argv[0] == "-m" else None)
        bare, seconds = [], [[] for _ in START_UP_RUNS]
        for i in range(args.repeats):
            bare.append(run(["-c", START_UP_BARE]))
            for k, (_, argv) in enumerate(START_UP_RUNS):
                seconds[k].append(run(argv, out(i, k) if argv[0] == "-m" else None))
    base = float(np.median(bare))
    rows.append(
        {
            "case": "9 start-up",
            "impl": "bare JAX start",
            "dtype": "float64",
            "seconds": base,
            "runs": bare,
            "compile_s": None,
            "rate": 1.0,
            "unit": "x bare JAX start",
            "note": f"median {base:.2f} s",
        }
    )
    print(f"  {'bare JAX start':<48} {base:.2f} s", flush=True)
    for (impl, _), runs in zip(START_UP_RUNS, seconds, strict=True):
        median = float(np.median(runs))
        row = {
            "case": "9 start-up",
            "impl": impl,
            "dtype": "float64",
            "seconds": median,
            "runs": runs,
            "compile_s": None,
            "rate": median / base,
            "unit": "x bare JAX start",
            "note": f"median {median:.2f} s, {median / base:.2f} x the bare start "
            f"({base:.2f} s); load {os.getloadavg()[0]:.1f}",
        }
        rows.append(row)
        print(f"  {impl:<48} {row['note']}", flush=True)


MODEL_OPTIONS = (
    # (label, parametrization, loss, summaries, sharpness)
    ("product, logistic", "product", "logistic", False, False),
    ("product, logistic + sharpness", "product", "logistic", True, True),
    ("u2-v2, squared", "u2-v2", "squared", False, False),
    ("u2-v2, squared + summaries", "u2-v2", "squared", True, False),
    ("u2-v2, squared + sharpness", "u2-v2", "squared", True, True),
    ("uv, squared + summaries", "uv", "squared", True, False),
)
"""Case 8's rows: the cost of the model options in a sweep, against the first."""


def model_options_case(rows, args):
    """Case 8: the same discrete l2-SAM sweep (an (alpha, rho) grid, n = 8 points in
    d = 16) with each parametrisation, loss and summary option; the cost of each as a
    ratio to the paper's model (product, logistic, no summaries) in the same run."""
    from samflow.rules import SAM_L2
    from samflow.runners import Discrete
    from samflow.summaries import Summaries
    from samflow.sweeps.spec import SweepSpec

    case = "8 model options, n=8 d=16"
    rng = np.random.default_rng(0)
    X = rng.normal(size=(8, 16))
    star = np.zeros(16)
    star[:3] = (1.0, -1.0, 0.5)
    targets = {"squared": X @ star, "logistic": np.sign(X @ star)}
    base = None
    for label, par, loss, summaries, sharpness in MODEL_OPTIONS:
        spec = SweepSpec(
            rule=SAM_L2,
            runner=Discrete(eta=ETA, steps=args.model_steps),
            depth=2,
            axes=_square_grid(args.model_points),
            mu=(),
            data=(tuple(map(tuple, X.tolist())), tuple(targets[loss].tolist())),
            parametrization=par,
            loss=loss,
            summaries=Summaries(test_error=True, sharpness=sharpness) if summaries else None,
            beta_star=tuple(star.tolist()) if summaries else (),
        )
        t = timed(engine_runner(spec, args.chunk), args.repeats)
        work = spec.size * 16 * spec.runner.steps
        row = record(rows, case, f"samflow ({label})", "float64", t, work)
        base = base or row
        row["cost_over_paper_model"] = base["rate"] / row["rate"]
        row["note"] = (
            f"{spec.size} points, {spec.runner.steps} steps, "
            f"{spec.runner.n_records()} records; cost x{row['cost_over_paper_model']:.2f}"
        )
        print(f"    cost over the paper's model: x{row['cost_over_paper_model']:.2f}", flush=True)


STOCHASTIC_N = 16
"""Data points of case 7 (Gaussian inputs around 1..d, random labels)."""


def stochastic_case(rows, args):
    """Case 7: the cost of the stochastic steps against full-batch l2-SAM, one sweep
    (the same (alpha, rho) grid, L = 2, d = 4, n = 16 points) per setting; the rate's
    ratio to the first row is the cost (samflow_over > 1: slower than full-batch SAM)."""
    from samflow.rules import GD, SAM_L2, USAM
    from samflow.runners import Discrete
    from samflow.sweeps.spec import SweepSpec

    rng = np.random.default_rng(0)
    d, n = 4, STOCHASTIC_N
    X = rng.normal(size=(n, d)) + np.arange(1.0, d + 1)
    y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    data = (tuple(map(tuple, X.tolist())), tuple(y.tolist()))
    settings = [
        ("full-batch n-SAM", SAM_L2, {}),
        ("full-batch 1-SAM (m=1)", SAM_L2, {"m": 1}),
        ("minibatch SAM (batch=4)", SAM_L2, {"batch": 4}),
        ("minibatch 1-SAM (batch=4, m=1)", SAM_L2, {"batch": 4, "m": 1}),
        ("full-batch GD", GD, {}),
        ("full-batch USAM", USAM, {}),
        ("SGD (batch=4)", GD, {"batch": 4}),
    ]
    for dtype in ("float64",):
        for name, rule, extra in settings:
            spec = SweepSpec(
                rule=rule,
                runner=Discrete(eta=ETA, steps=args.stochastic_steps, **extra),
                depth=2,
                axes=_square_grid(args.stochastic_points),
                dtype=dtype,
                data=data,
            )
            t = timed(engine_runner(spec, args.chunk), args.repeats)
            row = record(
                rows,
                "7 stochastic steps n=16",
                f"samflow ({name})",
                dtype,
                t,
                spec.size * d * args.stochastic_steps,
                note=f"{spec.size} points x {args.stochastic_steps} steps",
            )
            row["points"], row["steps"] = spec.size, args.stochastic_steps


def _children_cpu() -> float:
    """CPU seconds (user + system) of the finished child processes so far."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def ratios(rows: list[dict]) -> None:
    """Per case and dtype: samflow's speed over each other implementation."""
    for case in {r["case"] for r in rows}:
        for dtype in {r["dtype"] for r in rows}:
            group = [r for r in rows if r["case"] == case and r["dtype"] == dtype]
            ours = [r for r in group if r["impl"].startswith("samflow (")]
            if not ours:
                continue
            for r in group:
                r["samflow_over"] = ours[0]["rate"] / r["rate"]


def linear_fits(rows: list[dict]) -> list[str]:
    """The scaling cases as lines: log-log slope (1 = linear) and ``seconds = a + b x``."""
    out = []
    for case, key, unit in (
        ("4a scaling: grid size", "points", "point"),
        ("4b scaling: steps", "steps", "step"),
    ):
        group = [r for r in rows if r["case"] == case]
        if len(group) < 2:
            continue
        x = np.array([r[key] for r in group], float)
        t = np.array([r["seconds"] for r in group])
        slope = np.polyfit(np.log(x), np.log(t), 1)[0]
        b, a = np.polyfit(x, t, 1)
        per = group[0]["points"] * 4 if key == "steps" else group[0]["steps"] * 4
        out.append(
            f"{case}: log-log slope {slope:.2f}; seconds = {a:.3g} + {b:.3g} per {unit}, "
            f"i.e. a fixed cost and a marginal rate of {per / b:.3g} coordinate-steps/s"
        )
    return out


def markdown(results: dict) -> str:
    m = results["machine"]
    lines = [
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB; "
        f"JAX {m['jax']} on {len(m['jax_devices'])} CPU device(s); {m['date']}; "
        f"load average at start {m['load_average_start'][0]:.1f}, at end "
        f"{results['load_average_end'][0]:.1f} (the machine is shared). No GPU.",
        "",
        "| case | implementation | dtype | median s | compile s | rate | samflow is × faster "
        "| note |",
        "|---|---|---|---:|---:|---:|---:|---|",
    ]
    for r in results["rows"]:
        comp = "" if r["compile_s"] is None else f"{r['compile_s']:.1f}"
        over = r.get("samflow_over")
        over = "" if over is None or r["impl"].startswith("samflow") else f"{over:.1f}"
        if r["impl"].startswith("roofline") and r.get("samflow_over"):
            over = f"{r['samflow_over']:.2f} (samflow at {100 * r['samflow_over']:.0f}%)"
        unit = {
            "coordinate-steps/s": "cs/s",
            "steps/s": "steps/s",
            "first/second process": "×",
            "x bare JAX start": "× bare JAX",
        }
        unit = unit.get(r["unit"], "traj/s")
        lines.append(
            f"| {r['case']} | {r['impl']} | {r['dtype']} | {r['seconds']:.3f} | {comp} | "
            f"{r['rate']:.3g} {unit} | {over} | {r['note']} |"
        )
    if results.get("memory"):
        lines += ["", "| grid points | peak RSS (MiB) |", "|---:|---:|"]
        lines += [
            f"| {r['points']} | {r['peak_rss_bytes'] / 2**20:.0f} |" for r in results["memory"]
        ]
    lines += ["", *[f"- {n}" for n in results.get("fits", []) + results["notes"]]]
    return "\n".join(lines) + "\n"


def update_docs(table: str) -> None:
    """Put ``table`` between the bench markers of the documentation's benchmarks page."""
    if not DOCS_PAGE.exists():
        return
    text = DOCS_PAGE.read_text()
    if MARK_START not in text:
        return
    head, rest = text.split(MARK_START, 1)
    _, tail = rest.split(MARK_END, 1)
    DOCS_PAGE.write_text(f"{head}{MARK_START}\n{table}{MARK_END}{tail}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes: a smoke test")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--chunk", type=int, default=16384, help="grid points per chunk")
    p.add_argument("--only", nargs="*", default=None, help="cases: 1 2 3 4 5 6 7 8 9 mem")
    p.add_argument("--no-docs", action="store_true", help="leave docs/benchmarks.md alone")
    args = p.parse_args(argv)
    from samflow.devices import use_cpu_cores
    from samflow.host_memory import reuse_host_memory

    use_cpu_cores()
    reuse_host_memory()  # as the command line does
    full = not args.quick
    args.points = 65536 if full else 4096
    args.steps = 2000 if full else 200
    args.baseline_seconds = 1.0 if full else 0.1
    args.optax_traj = 8 if full else 2
    args.flow_points = 4096 if full else 256
    args.scipy_traj = 64 if full else 8
    args.scaling_points = [1024, 10_000, 100_489, 1_000_000] if full else [1024, 4096]
    args.scaling_steps = 200 if full else 50
    args.scaling_fixed_points = 16384 if full else 1024
    args.scaling_step_counts = [250, 500, 1000, 2000, 4000] if full else [50, 100]
    args.cnn_steps = 100 if full else 4  # evaluations at both ends: <1 ms per step
    args.model_points = 4096 if full else 256
    args.model_steps = 2000 if full else 200
    args.stochastic_points = 4096 if full else 256
    args.stochastic_steps = 500 if full else 50
    only = set(args.only or ["1", "2", "3", "4", "5", "6", "7", "8", "9", "mem"])

    results = {"machine": machine(), "rows": [], "memory": [], "notes": []}
    rows = results["rows"]
    if "1" in only:
        print("case 1: discrete l2-SAM, L=2, d=4")
        discrete_case(
            rows,
            "1 discrete l2 L=2 d=4",
            args.points,
            2,
            4,
            args.steps,
            ["float32", "float64"],
            args,
            records_row=True,
        )
    if "2" in only:
        print("case 2: L=3 and d=16")
        discrete_case(
            rows,
            "2 discrete l2 L=3 d=4",
            args.points,
            3,
            4,
            args.steps,
            ["float32", "float64"],
            args,
        )
        discrete_case(
            rows,
            "2 discrete l2 L=2 d=16",
            args.points,
            2,
            16,
            args.steps,
            ["float32", "float64"],
            args,
        )
    if "3" in only:
        print("case 3: flows")
        flow_case(rows, args)
    if "4" in only:
        print("case 4: scaling")
        scaling_case(rows, args)
    if "5" in only:
        print("case 5: CNN l2-SAM step")
        cnn_case(rows, args)
    if "6" in only:
        print("case 6: compile cache, first and second process")
        compile_cache_case(rows, args)
    if "7" in only:
        print("case 7: stochastic steps against full-batch SAM, n = 16 points")
        stochastic_case(rows, args)
    if "8" in only:
        print("case 8: model options (parametrisation, loss, summaries, sharpness)")
        model_options_case(rows, args)
    if "9" in only:
        print("case 9: start-up, a second process's first trajectory against bare JAX")
        start_up_case(rows, args)
    if "mem" in only:
        print("case 4c: peak memory against grid size")
        results["memory"] = memory_case(args)
    ratios(rows)
    results["fits"] = linear_fits(rows)
    results["load_average_end"] = os.getloadavg()
    results["notes"] = [
        f"Discrete grids: square (alpha, rho) grids, balanced init, eta = {ETA}, mu = 1..d; "
        "rate = points x d x steps / s. The engine runs them as samflow.sweep does: "
        "chunks of --chunk points, each dispatched before the one before it is "
        "collected, with samflow.host_memory.reuse_host_memory() on (as the command "
        "line). The default 100 records and, in case 1, 3 records (0, steps / 2, "
        "steps): their difference is what the records cost.",
        "NumPy and PyTorch run the same grid for as many steps as take about "
        f"{args.baseline_seconds:g} s (their cost per step is constant); the optax loop times "
        f"{args.optax_traj} trajectories of the full length and extrapolates.",
        "Roofline: hand-fused C of the balanced L = 2 l2-SAM update (state u only, as the "
        "engine's balanced step, samflow/balanced.py), gcc -O3 "
        "-march=native -ffast-math -fopenmp, tiles of 256 points in L1; float32 at d = 4 "
        "with AVX-512: groups of 64 points whose state stays in registers for all steps "
        "(intrinsics; benchmarks/roofline.c).",
        "Flows: SciPy times an evenly spaced subset of the grid and extrapolates.",
        "Case 5: one l2-SAM step of the default CNN on 28x28 inputs, minibatch 128 "
        f"({args.cnn_steps} steps per run, a record at both ends for samflow); rate = "
        "steps/s. XLA's CPU convolution is slow inside a loop body (jax-ml/jax#12868): "
        "the plain lax.scan loop pays it, samflow's host loop does not. samflow's CNN runs "
        "the batch channels last, its one-input-channel first layer as nine shifted "
        "products (conv=auto on a CPU; the conv=lax row keeps lax.conv there) and "
        "compiles without XLA's YNNPACK fusions (docs/images.md).",
        "Case 6: wall and CPU time of a whole process, first and second, the same command "
        "(to a new output) with a fresh compilation cache shared by both "
        "(samflow.compile_cache); rate = first / second wall time (CPU time: less noisy on "
        "a shared machine). The 15 x 16 phase map runs after the 16 x 16 one: both "
        "pad to 256 points, so even its first process finds its program on disk. What is "
        "left in a second process: starting Python and JAX, tracing, writing the file.",
        f"Case 7: l2-SAM, GD and USAM sweeps over a {args.stochastic_points}-point (alpha, rho) "
        f"grid, L = 2, d = 4, n = {STOCHASTIC_N} Gaussian points; rate = points x d x steps "
        "/ s; samflow_over = full-batch n-SAM's rate / the row's (the cost of the option).",
        "Case 8: the same discrete l2-SAM sweep (square (alpha, rho) grid, eta = "
        f"{ETA}, n = 8 Gaussian points in d = 16, 3-sparse beta*, logistic labels its "
        "signs) with each model option; 'cost x' is the paper's model's rate over the "
        "row's, measured in the same run. Summaries (l1, l2, n_active, test_error) and "
        "the sharpness (the top eigenvalue of the 32 x 32 Hessian, samflow.model."
        "top_eigenvalue) are taken at every record (steps / 100).",
        "Case 9: wall time of whole processes with a compile cache that first processes "
        "filled: a second process's first labelled flow trajectory (samflow trajectory to "
        "a file; samflow.trajectory(...) in Python) over the bare start of JAX (python -c "
        f"'{START_UP_BARE}'), medians of {args.repeats} rounds, each round running the "
        "baseline and then both (interleaved: one load for all on a shared machine).",
        "No GPU was available to this benchmark: CPU only.",
    ]
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = "latest" if args.only is None else "partial"  # --only keeps the full table
    (RESULTS / f"{stem}.json").write_text(json.dumps(results, indent=1))
    table = markdown(results)
    (RESULTS / f"{stem}.md").write_text(table)
    print(table)
    if full and not args.no_docs and args.only is None:
        update_docs(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
