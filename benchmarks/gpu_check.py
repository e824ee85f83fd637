"""The GPU check: the engine's large maps and the CNN step on an accelerator, one table.

    python benchmarks/gpu_check.py            # on a machine with a GPU (exit 1 without)
    python benchmarks/gpu_check.py --cpu      # a dry run with tiny sizes on the CPU

Cases, each in float32 and float64 where it says so:

- ``discrete``: the 1e6-point discrete l2-SAM map (a 1000 x 1000 (alpha, rho) grid,
  L = 2, d = 4, 2000 steps, bench case 1's settings) in one chunk, i.e. one program
  call for the whole map; rate in coordinate-steps/s (points x d x steps / s);
- ``flow``: a 4096-trajectory flow map (64 x 64, l2-SAM, L = 2, tau up to 50; float64
  at bench case 3's tolerances rtol 1e-6, atol 1e-9, float32 at rtol 1e-5, atol 1e-7,
  which float32 can meet); trajectories/s;
- ``cnn``: l2-SAM steps of the default CNN (benchmarks/cnn.py) at minibatch 128 and
  1024, ``conv="lax"``, the scan driver; float32; steps/s.

Each is timed as a first call (compile and run) and the median of up to
``--repeats`` more (at least one; no more once a case has run 20 s); compile s = first - median. The
table (Markdown, with the device and the date) is printed and written to ``--out``.
Sized to finish within 5 minutes on one H200; ``--cpu`` runs every case at toy sizes
(tests/test_gpu_check.py).
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: the repository root holds `benchmarks`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CASES = ("discrete", "flow", "cnn")
DTYPES = ("float32", "float64")
FULL = {"points": 1_000_000, "steps": 2000, "flow_points": 4096, "batches": (128, 1024)}
FULL.update(cnn_steps=200, flow_tau=50.0)
TOY = {"points": 256, "steps": 20, "flow_points": 16, "batches": (8,)}
TOY.update(cnn_steps=2, flow_tau=5.0)
FLOW_TOLERANCES = {"float64": (1e-6, 1e-9), "float32": (1e-5, 1e-7)}
BUDGET_S = 20.0


def timed(make, repeats: int) -> dict:
    """``make() -> run``; the first call of ``run`` and the median of the next ones."""
    run = make()
    start = time.perf_counter()
    result = run()
    first = time.perf_counter() - start
    runs = []
    while len(runs) < repeats and (not runs or first + sum(runs) < BUDGET_S):
        start = time.perf_counter()
        run()
        runs.append(time.perf_counter() - start)
    median = float(np.median(runs))
    return {"first": first, "median": median, "compile": max(0.0, first - median), "out": result}


def discrete_rows(sizes: dict, repeats: int, dtypes: tuple[str, ...]) -> list[dict]:
    from benchmarks.bench import engine_runner, l2_spec

    rows = []
    for dtype in dtypes:
        spec = l2_spec(sizes["points"], 2, 4, sizes["steps"], dtype)
        t = timed(lambda spec=spec: engine_runner(spec, chunk=spec.size), repeats)
        failed = sum(int((c["failed_step"] >= 0).sum()) for c in t["out"])
        rows.append(
            row(
                "discrete l2 L=2 d=4",
                dtype,
                f"{spec.size} points x {sizes['steps']} steps",
                t,
                spec.size * 4 * sizes["steps"],
                "cs/s",
                f"{failed} failed points",
            )
        )
    return rows


def flow_rows(sizes: dict, repeats: int, dtypes: tuple[str, ...]) -> list[dict]:
    from dataclasses import replace

    from benchmarks.bench import engine_runner, flow_spec

    rows = []
    for dtype in dtypes:
        rtol, atol = FLOW_TOLERANCES[dtype]
        spec = replace(flow_spec(sizes["flow_points"], sizes["flow_tau"], rtol, atol), dtype=dtype)
        t = timed(lambda spec=spec: engine_runner(spec, chunk=spec.size), repeats)
        failed = sum(int(c["solver_failed"].sum()) for c in t["out"])
        rows.append(
            row(
                f"flow l2 L=2 d=4 tau={sizes['flow_tau']:g}",
                dtype,
                f"{spec.size} trajectories",
                t,
                spec.size,
                "traj/s",
                f"rtol={rtol:g}, atol={atol:g}; {failed} solver failures",
            )
        )
    return rows


def cnn_rows(sizes: dict, repeats: int, dtypes: tuple[str, ...]) -> list[dict]:
    from benchmarks import cnn

    rows = []
    steps = sizes["cnn_steps"]
    for batch in sizes["batches"]:
        n_train = 4 * batch

        def make(batch=batch, n_train=n_train):
            return cnn.samflow_run("scan", steps, n_train=n_train, conv="lax", batch=batch)

        t = timed(make, repeats)
        rows.append(
            row(
                f"CNN l2-SAM step b={batch}",
                "float32",
                f"{steps} steps, {n_train} train images",
                t,
                steps,
                "steps/s",
                "conv=lax, scan driver; 2 evaluations per run",
            )
        )
    return rows


def row(case, dtype, size, t, work, unit, note) -> dict:
    out = {"case": case, "dtype": dtype, "size": size, "unit": unit, "note": note}
    out.update(first_s=t["first"], compile_s=t["compile"], median_s=t["median"])
    out["rate"] = work / t["median"]
    print(f"  {case:<28} {dtype:<8} {out['rate']:10.3e} {unit}  ({size})", flush=True)
    return out


def table(rows: list[dict], device: str) -> str:
    import jax

    date = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    lines = [
        f"Device: {device}; JAX {jax.__version__}; {date}.",
        "",
        "| case | dtype | size | first call s | compile s | median s | rate | note |",
        "|---|---|---|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['case']} | {r['dtype']} | {r['size']} | {r['first_s']:.2f} | "
            f"{r['compile_s']:.2f} | {r['median_s']:.3f} | {r['rate']:.3g} {r['unit']} | "
            f"{r['note']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cpu", action="store_true", help="dry run: toy sizes on the CPU")
    p.add_argument("--only", nargs="*", choices=CASES, default=None, help="cases to run")
    p.add_argument(
        "--dtype", choices=DTYPES, default=None, help="only this dtype (CNN: float32 anyway)"
    )
    p.add_argument("--repeats", type=int, default=3, help="timed runs after the first")
    p.add_argument("--out", default=None, help="also write the table here")
    args = p.parse_args(argv)
    if args.cpu and "jax" not in sys.modules:
        os.environ["JAX_PLATFORMS"] = "cpu"
    import jax

    device = jax.devices()[0]
    if not args.cpu and device.platform == "cpu":
        print("gpu_check: no accelerator found (use --cpu for a dry run)", file=sys.stderr)
        return 1
    name = f"{len(jax.devices())} x {device.device_kind} ({device.platform})"
    print(f"gpu_check on {name}", flush=True)
    sizes = TOY if args.cpu else FULL
    repeats = 1 if args.cpu else args.repeats
    makers = {"discrete": discrete_rows, "flow": flow_rows, "cnn": cnn_rows}
    rows = []
    start = time.perf_counter()
    for case in args.only or CASES:
        rows += makers[case](sizes, repeats, (args.dtype,) if args.dtype else DTYPES)
    text = table(rows, name)
    text += f"\nTotal {time.perf_counter() - start:.0f} s.\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
