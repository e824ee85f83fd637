"""Peak resident memory of one discrete sweep through the engine, in a fresh process.

``python -m benchmarks.memory_probe POINTS STEPS DTYPE CHUNK`` prints one JSON line with
the peak RSS (VmHWM) after the run and before it (imports and compilation of a tiny
chunk excluded from nothing: the difference is what the grid adds).
"""

from __future__ import annotations

import json
import sys


def vm_hwm_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def main() -> None:
    points, steps, dtype, chunk = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    from benchmarks.bench import engine_runner, l2_spec
    from samflow.sweep import use_cpu_cores

    use_cpu_cores()
    spec = l2_spec(points, depth=2, d=4, steps=steps, dtype=dtype)
    run = engine_runner(spec, chunk)
    run()
    print(json.dumps({"points": spec.size, "peak_rss_bytes": vm_hwm_bytes()}))


if __name__ == "__main__":
    main()
