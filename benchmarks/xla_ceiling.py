"""What XLA's CPU code makes of the roofline's update: the ceiling under the engine.

    PYTHONPATH=$PWD python benchmarks/xla_ceiling.py                 # float32, bench case 1
    PYTHONPATH=$PWD python benchmarks/xla_ceiling.py --dtype float64
    PYTHONPATH=$PWD python benchmarks/xla_ceiling.py --quick         # tiny, a smoke test

Bench case 1 reports the engine's share of a hand-fused C kernel (``roofline.c``: the
balanced L = 2 l2-SAM update, one data point ``x = mu``, ``y = +1``). This script
separates what the engine adds from what the compiler allows: it times the same update
written as bare JAX loops, with no records, no leader check and no chunks, on the same
grid and devices (one JAX device per core, the points split between them; the C kernel
on as many OpenMP threads), in three layouts of the state:

- ``rows``: one 1-D array of points per coordinate, the sums over coordinates written
  out (the fastest layout measured);
- ``[d, points], row sums``: the engine's layout (:mod:`samflow.layout`), coordinates
  summed as rows;
- ``[d, points], jnp.sum``: the same with one reduction over the coordinate axis;

then the engine itself (bench case 1's sweep, 100 records and 3, and the same run 4 steps
long: what does not grow with the steps). Every loop runs
``--steps`` steps, four per iteration of a ``fori_loop``; each is checked against the C
kernel's end state (the "median rel. diff" column, :func:`agreement`).
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: benchmarks/ is not installed
    sys.path.insert(0, str(ROOT))

UNROLL = 4
LAYOUTS = ("rows", "[d, points], row sums", "[d, points], jnp.sum")


def jax_loop(layout: str, inputs: dict, eta: float, steps: int):
    """``() -> u [d, B]``: the C kernel's update as a bare JAX loop in ``layout``, run as
    the engine runs the balanced step: the points split between the devices
    (``shard_map``), each device running its tiles of :func:`samflow.engine.tile_points`
    points one after another (``lax.map``)."""
    from samflow.precision import precision

    with precision(str(inputs["alpha"].dtype)):
        return _jax_loop(layout, inputs, eta, steps)


def _jax_loop(layout: str, inputs: dict, eta: float, steps: int):
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.sharding import PartitionSpec as P

    from samflow.devices import mesh
    from samflow.engine import tile_points
    from samflow.layout import sum_rows
    from samflow.precision import precision

    alpha, rho, mu = inputs["alpha"], inputs["rho"], inputs["mu"]
    dtype, B, d = alpha.dtype, len(alpha), len(mu)
    grid = mesh()
    n_dev = grid.devices.size
    T = tile_points("discrete", B, 1, d, dtype, n_dev, balanced_step=True)
    n_tiles = -(-B // (n_dev * T)) * n_dev
    pad = n_tiles * T - B

    def tiles(a):  # [B] -> [n_tiles, T], the last point repeated into the padding
        return np.concatenate([a, np.full(pad, a[-1], dtype)]).reshape(n_tiles, T)

    u0 = np.ascontiguousarray(np.broadcast_to(tiles(alpha)[:, None], (n_tiles, d, T)))
    rho = tiles(rho)
    m = [dtype.type(v) for v in mu]
    M = np.asarray(mu, dtype)[:, None]
    eta = dtype.type(eta)

    def rows_step(u, r0):
        """``u`` as d rows: N, u~, z~ and the update one coordinate at a time."""
        rows = [u[j] for j in range(d)]
        n2 = functools.reduce(jnp.add, [2 * m[j] * m[j] * rows[j] * rows[j] for j in range(d)])
        r = r0 / jnp.sqrt(n2)
        ut = [rows[j] - r * m[j] * rows[j] for j in range(d)]
        z = functools.reduce(jnp.add, [m[j] * ut[j] * ut[j] for j in range(d)])
        s = eta / (1 + jnp.exp(z))
        return jnp.stack([rows[j] + s * m[j] * ut[j] for j in range(d)])

    def array_step(u, r0, total):
        """``u`` as one ``[d, T]`` array, summed over coordinates by ``total``."""
        r = r0 / jnp.sqrt(total(2 * M * M * u * u))
        ut = u - r * M * u
        s = eta / (1 + jnp.exp(total(M * ut * ut)))
        return u + s * M * ut

    step = {
        LAYOUTS[0]: rows_step,
        LAYOUTS[1]: lambda u, r: array_step(u, r, sum_rows),
        LAYOUTS[2]: lambda u, r: array_step(u, r, lambda x: jnp.sum(x, axis=0)),
    }[layout]

    def tile(a):
        u, r = a

        def iteration(_, u):
            for _ in range(UNROLL):
                u = step(u, r)
            return u

        u = lax.fori_loop(0, steps // UNROLL, iteration, u)
        return lax.fori_loop(0, steps % UNROLL, lambda _, u: step(u, r), u)

    run = jax.jit(
        jax.shard_map(
            lambda u, r: lax.map(tile, (u, r)),
            mesh=grid,
            in_specs=(P(grid.axis_names[0]),) * 2,
            out_specs=P(grid.axis_names[0]),
        )
    )

    def call():
        with precision(str(dtype)):
            u = np.asarray(jax.block_until_ready(run(u0, rho)))
        return np.moveaxis(u, 1, 0).reshape(d, -1)[:, :B]

    return call


def agreement(u: np.ndarray, u_c: np.ndarray) -> str:
    """The median over points of ``max_j |u_j - u_C,j| / max_j |u_C,j|`` (points where
    the C kernel's state is finite): a typical point's agreement. Not the maximum: over
    2000 steps a point that collapses towards 0 (where the C kernel, built with
    -ffast-math, may also give NaN) or that sits on a regime boundary amplifies the
    rounding of either side without bound."""
    finite = np.all(np.isfinite(u_c), axis=0)
    scale = np.max(np.abs(u_c[:, finite]), axis=0)
    return f"{np.median(np.max(np.abs(u[:, finite] - u_c[:, finite]), axis=0) / scale):.1e}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    p.add_argument("--points", type=int, default=65536)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="1024 points, 40 steps, 1 repeat")
    args = p.parse_args(argv)
    if args.quick:
        args.points, args.steps, args.repeats = 1024, 40, 1
    from samflow.devices import use_cpu_cores
    from samflow.host_memory import reuse_host_memory

    use_cpu_cores()
    reuse_host_memory()  # as the bench and the command line do
    import jax

    from benchmarks import baselines, roofline
    from benchmarks.bench import ETA, engine_runner, few_records, l2_spec, timed

    dtype = np.dtype(args.dtype)
    spec = l2_spec(args.points, 2, 4, args.steps, args.dtype)
    inputs = baselines.grid_inputs(spec.size, 2, 4, dtype)
    work = spec.size * 4 * args.steps
    lib = roofline.build(dtype)
    if lib is None:
        print("gcc not found: no roofline to compare with", file=sys.stderr)
        return 1
    c_run = roofline.runner(lib, inputs, ETA, args.steps)
    u_c = c_run()[0]
    rows = [("roofline (hand-fused C)", timed(c_run, args.repeats), "")]
    for layout in LAYOUTS:
        call = jax_loop(layout, inputs, ETA, args.steps)
        rows.append((f"JAX loop, {layout}", timed(call, args.repeats), agreement(call(), u_c)))
    rows.append(("samflow (sweep engine)", timed(engine_runner(spec), args.repeats), ""))
    rows.append(("samflow, 3 records", timed(engine_runner(few_records(spec)), args.repeats), ""))
    # what does not grow with the steps: the chunk's set-up, the fates at the end, the
    # labels and the copy back (the same sweep run 4 steps, 3 records)
    fixed = few_records(l2_spec(args.points, 2, 4, 4, args.dtype))
    rows.append(("samflow, 4 steps, 3 records", timed(engine_runner(fixed), args.repeats), ""))

    roof = rows[0][1]["seconds"]
    print(
        f"{spec.size} points x {args.steps} steps, L = 2, d = 4, {args.dtype}; "
        f"{len(jax.devices())} JAX device(s), {roofline.threads()} OpenMP threads"
    )
    print("\n| implementation | median s | share of the roofline | median rel. diff from C |")
    print("|---|---:|---:|---:|")
    for name, t, diff in rows:
        print(f"| {name} | {t['seconds']:.3f} | {100 * roof / t['seconds']:.0f}% | {diff} |")
    print(f"\nwork: {work:.3g} coordinate-steps per run")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
