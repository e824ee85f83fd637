"""XLA's CPU compiler told to run each small step loop as one compiled function.

Without JAX: :mod:`samflow` calls :func:`compile_whole_loops` when it is imported, before
JAX starts its backends (XLA reads ``XLA_FLAGS`` once, when the first backend starts).

XLA's CPU runtime runs a program as a sequence of kernels (thunks), one per fused group
of operations, and a ``while`` loop as its body's kernels launched again at every
iteration. A loop whose one iteration touches fewer bytes than a threshold is instead
compiled whole into one function that runs every iteration itself (XLA's
``SmallWhileLoopHoistingPass``, for loops without scatter, sort, FFT or custom calls).
XLA's default threshold is 1 KiB, so none of samflow's loops qualified: a discrete tile's
step loop (a 256-point tile with its records and leader path, a few hundred KiB per
iteration) launched some thirty kernels per block of four steps, each doing a few dozen
vector instructions. With the threshold at :data:`THRESHOLD` those loops, and the loops
of a flow without saves in them, run as one function each: the same numbers bit for bit
on every sweep compared (docs/benchmarks.md#whole-loops), faster runs, compiles as long
as before. The setting is process-wide but changes no result: it decides how a loop is
launched, not what it computes, and only loops below the threshold (a loop over large
arrays, such as a CNN's training loop, keeps its kernels).
"""

from __future__ import annotations

import os
import sys

OPTION = "xla_cpu_small_while_loop_byte_threshold"
"""XLA's CPU compiler option (an entry of ``--xla_backend_extra_options``)."""
THRESHOLD = 16 * 2**20
"""Bytes one iteration of a loop may touch and still be compiled whole: a discrete tile's
step loop with 1,000 records of 256 points touches about 5 MiB."""
ENV = "SAMFLOW_XLA_LOOPS"
"""Set to ``default`` to leave ``XLA_FLAGS`` as it is (:func:`compile_whole_loops`)."""


def compile_whole_loops() -> bool:
    """Add ``--xla_backend_extra_options=xla_cpu_small_while_loop_byte_threshold=``
    :data:`THRESHOLD` to ``XLA_FLAGS``; returns whether it did.

    It does not where JAX's backends have already started (XLA has read its flags: the
    loops keep their kernels, with the same results), where ``XLA_FLAGS`` already has
    backend options of the user's (``xla_backend_extra_options``: add the option there
    yourself), or with ``SAMFLOW_XLA_LOOPS=default``.
    """
    if os.environ.get(ENV, "").lower() == "default":
        return False
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_backend_extra_options" in flags or _backends_started():
        return False
    os.environ["XLA_FLAGS"] = f"{flags} --xla_backend_extra_options={OPTION}={THRESHOLD}".strip()
    return True


def _backends_started() -> bool:
    """Whether JAX has started a backend (and so XLA has read ``XLA_FLAGS``)."""
    if "jax" not in sys.modules:
        return False
    try:
        from jax._src import xla_bridge

        return bool(xla_bridge.backends_are_initialized())
    except (ImportError, AttributeError):  # another JAX: assume it has
        return True


def loops_compiled_whole() -> bool:
    """Whether XLA compiles this process's small loops whole: the option is in
    ``XLA_FLAGS`` (set by :func:`compile_whole_loops` or by hand) and JAX's default
    backend is a CPU (a GPU launches a kernel per operation whatever it says)."""
    if f"{OPTION}=" not in os.environ.get("XLA_FLAGS", ""):
        return False
    import jax

    return jax.default_backend() == "cpu"
