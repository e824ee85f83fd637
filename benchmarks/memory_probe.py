"""Peak resident memory of one discrete sweep through the engine, in a fresh process.

``python -m benchmarks.memory_probe POINTS STEPS DTYPE CHUNK`` runs every chunk as
``samflow.sweep`` does (each chunk's summaries are dropped once made, where the store
writes them to disk) and prints one JSON line with the peak RSS (VmHWM) of the process.
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
    from samflow.devices import use_cpu_cores
    from samflow.host_memory import reuse_host_memory

    use_cpu_cores()
    reuse_host_memory()
    import jax

    from benchmarks.bench import l2_spec
    from samflow.sweeps.store import chunk_plan, computed

    spec = l2_spec(points, depth=2, d=4, steps=steps, dtype=dtype)
    setup = spec.setup()
    size, blocks = chunk_plan(spec.size, chunk, len(jax.devices()))
    for _ in computed(setup, spec, blocks, size):  # as a sweep runs them
        pass
    print(json.dumps({"points": spec.size, "peak_rss_bytes": vm_hwm_bytes()}))


if __name__ == "__main__":
    main()
