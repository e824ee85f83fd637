"""What the every-step leader check costs: bench case 1 with and without it, in CPU time.

    PYTHONPATH=$PWD python benchmarks/leader_check.py               # 16,384 points, 3 repeats
    PYTHONPATH=$PWD python benchmarks/leader_check.py --points 65536
    PYTHONPATH=$PWD python benchmarks/leader_check.py --quick       # tiny, a smoke test

Bench case 1's sweep (l2-SAM, L = 2, d = 4, float32, 100 records) through the point
runner on one JAX device, as it runs (the leader path read after every step,
:func:`samflow.regimes.path_observer`) and with a step observer that looks at nothing
(the path stays empty: only for timing), each in its own process with the compile cache
off (so neither reads the other's program), against the C roofline on one OpenMP thread
in the same process. CPU seconds of the process, medians of ``--repeats`` runs after a
warm-up: on a shared machine they move less than wall time. docs/benchmarks.md (the
every-step leader check) reports a run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ("every step", "no look")


def cpu_median(fn, repeats: int) -> float:
    fn()
    runs = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        runs.append(time.process_time() - start)
    return float(np.median(runs))


def measure(variant: str, points: int, steps: int, repeats: int) -> dict:
    """One variant's engine and roofline CPU seconds (run in a fresh process)."""
    import jax.numpy as jnp

    import samflow.engine as engine
    from benchmarks import baselines as bl
    from benchmarks import bench, roofline
    from samflow.discrete import StepObserver

    if variant == "no look":
        real = engine.path_observer

        def blind(major):
            def look(state, lead, beta):
                none = jnp.zeros(beta.shape[1:], jnp.int32)
                return state, none if lead is None else lead, none

            return StepObserver(start=real(major).start, look=look, write=real(major).write)

        engine.path_observer = blind
    spec = bench.l2_spec(points, 2, 4, steps, "float32")
    out = {"variant": variant, "points": spec.size, "steps": steps}
    out["engine_cpu_s"] = cpu_median(bench.engine_runner(spec, 16384), repeats)
    lib = roofline.build("float32")
    if lib is not None:
        inputs = bl.grid_inputs(spec.size, 2, 4, np.float32)
        out["roofline_cpu_s"] = cpu_median(roofline.runner(lib, inputs, bench.ETA, steps), repeats)
    out["load"] = [round(x, 1) for x in os.getloadavg()]
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--points", type=int, default=16384)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="1024 points, 100 steps, 1 repeat")
    p.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.points, args.steps, args.repeats = 1024, 100, 1
    if args.variant is not None:
        print(json.dumps(measure(args.variant, args.points, args.steps, args.repeats)))
        return 0
    env = dict(
        os.environ,
        XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=1",
        OMP_NUM_THREADS="1",
        SAMFLOW_COMPILE_CACHE="off",
        PYTHONPATH=str(ROOT),
    )
    print("| step observer | engine, CPU s | roofline, CPU s | share | load |")
    print("|---|---:|---:|---:|---|")
    for variant in VARIANTS:
        cmd = [sys.executable, "-m", "benchmarks.leader_check", "--variant", variant]
        cmd += ["--points", str(args.points), "--steps", str(args.steps)]
        cmd += ["--repeats", str(args.repeats)]
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=True)
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        roof = row.get("roofline_cpu_s")
        share = f"{roof / row['engine_cpu_s']:.0%}" if roof else "n/a"
        roof_text = f"{roof:.3f}" if roof else "n/a"
        print(
            f"| {variant} | {row['engine_cpu_s']:.3f} | {roof_text} | {share} | {row['load']} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
