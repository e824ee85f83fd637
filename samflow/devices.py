"""Devices and processes: one JAX device per CPU core, a mesh over all devices, and
multi-process (multi-host) runs.

Multi-host (or multi-process): start the same command in every process with
``SAMFLOW_DISTRIBUTED=1``, and either ``JAX_COORDINATOR_ADDRESS=host:port``,
``SAMFLOW_NUM_PROCESSES`` and ``SAMFLOW_PROCESS_ID`` (0 on the coordinator's host), or
on a cluster that ``jax.distributed.initialize()`` detects by itself (SLURM, Open MPI,
...). ``jax.devices()`` then spans every process, each chunk is sharded over all of
them, results are gathered with :func:`gather` (CPU processes talk through gloo), and
process 0 writes the files; what is agreed (which chunks remain) is decided by process
0 (:func:`agreed`). Tested with two CPU processes on one machine
(``tests/test_sweep.py``).
"""

from __future__ import annotations

import os

import jax
import numpy as np
from jax.sharding import Mesh


def use_cpu_cores() -> bool:
    """Make each CPU core a JAX device, so that sweeps shard over every core.

    XLA runs one CPU device's program on one thread; the chunks of a sweep are split
    over the devices, so without this a sweep uses a single core. Acts only before JAX
    has started and when no device count was chosen (``jax_num_cpu_devices`` or
    ``--xla_force_host_platform_device_count`` in ``XLA_FLAGS``); returns whether it did.
    """
    chosen = "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", "")
    if chosen or jax.config.jax_num_cpu_devices >= 0:
        return False
    try:
        jax.config.update("jax_num_cpu_devices", os.cpu_count() or 1)
    except RuntimeError:  # JAX has started: its devices stay as they are
        return False
    return True


def start_distributed() -> bool:
    """Join a multi-process run when ``SAMFLOW_DISTRIBUTED=1``; returns whether one runs.

    Reads ``JAX_COORDINATOR_ADDRESS`` (by JAX itself), ``SAMFLOW_NUM_PROCESSES`` and
    ``SAMFLOW_PROCESS_ID``; what is not given is left to JAX's cluster detection. Must
    run before JAX starts its backends.
    """
    if os.environ.get("SAMFLOW_DISTRIBUTED") != "1":
        return False
    if not jax.distributed.is_initialized():
        number = os.environ.get("SAMFLOW_NUM_PROCESSES")
        index = os.environ.get("SAMFLOW_PROCESS_ID")
        # CPU processes exchange results through gloo (XLA's CPU collectives).
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            num_processes=int(number) if number else None,
            process_id=int(index) if index else None,
        )
    return True


def mesh() -> Mesh:
    """A one-axis mesh ``grid`` over every device of every process."""
    return Mesh(np.array(jax.devices()), ("grid",))


def is_writer() -> bool:
    """Whether this process writes files (process 0)."""
    return jax.process_index() == 0


def agreed(flags: np.ndarray) -> np.ndarray:
    """Process 0's ``flags`` in every process (a no-op with one process)."""
    if jax.process_count() == 1:
        return flags
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.broadcast_one_to_all(flags))


def barrier(name: str) -> None:
    """Wait for every process (a no-op with one process)."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def gather(tree):
    """A pytree of globally sharded arrays, whole in every process."""
    if jax.process_count() == 1:
        return tree
    from jax.experimental import multihost_utils

    return multihost_utils.process_allgather(tree, tiled=True)
