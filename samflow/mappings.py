"""Compiled programs released before the process runs out of memory mappings.

XLA's CPU compiler loads every kernel of a compiled program into pages of its own: three
memory mappings (code, read-only data, data) per kernel, about 700 for one flow program
and about 350 for a discrete one, held for as long as the program stays in JAX's caches.
Linux caps the mappings of a process (``vm.max_map_count``, 65,530 by default). When a
compile, or the load of a program from the persistent cache, needs a mapping past that
cap, the JIT's ``mmap`` fails and jaxlib (0.10.2) ends the process instead of raising:
``LLVM ERROR: Unable to allocate section memory!`` and an abort, or a segmentation fault
in the compiler or in the write of the persistent cache. A process that compiles many
distinct programs meets it: the test suite (about 95 flow programs' worth of distinct
settings in one pytest worker), a notebook of sweeps over many settings, a long script
of boundaries.

:func:`watch` registers a listener with JAX's public monitoring API that marks every
compile and cache load. :func:`relieve`, called where samflow is about to dispatch a
program (:func:`samflow.engine.run_points`, :func:`samflow.engine.one_ahead`,
:func:`samflow.fit`, the CNN trainer), counts the process's mappings when something was
compiled since its last look, and past the threshold drops every compiled program
(``jax.clear_caches()``, which empties the executables of every live ``jit`` too, and
the compiled programs :mod:`samflow.exported` holds), which unmaps their pages. It is
never called while one of samflow's own programs is still running. A program dropped
is compiled again when next needed, read back from the persistent compile cache (or
:mod:`samflow.exported`'s compiled entries) when that is on. The threshold is half the
headroom left after the last release (at first, half the cap), so a process whose other
mappings stay high does not release at every call.
"""

from __future__ import annotations

import functools
import gc
import sys
from pathlib import Path

MAPS = Path("/proc/self/maps")
MAX_MAP_COUNT = Path("/proc/sys/vm/max_map_count")
DEFAULT_CAP = 65530
"""Linux's default ``vm.max_map_count``: the cap where :data:`MAX_MAP_COUNT` cannot be
read."""

_compiled = True  # whether anything may have been compiled since the last count
_floor = 0  # the mappings left after the last release
_watching = False
_releases = 0


def count() -> int | None:
    """The number of memory mappings of this process; None where the system does not
    say (no ``/proc``: macOS, Windows)."""
    try:
        return MAPS.read_bytes().count(b"\n")
    except OSError:
        return None


@functools.cache
def cap() -> int:
    """The most mappings a process may hold (``vm.max_map_count``, read once)."""
    try:
        return int(MAX_MAP_COUNT.read_text().strip())
    except (OSError, ValueError):
        return DEFAULT_CAP


def threshold() -> int:
    """The count of mappings past which :func:`relieve` releases the compiled programs:
    half way from what was left after the last release to the cap."""
    return _floor + (cap() - _floor) // 2


def releases() -> int:
    """How many times :func:`release` has run in this process."""
    return _releases


def _mark(*_args, **_kwargs) -> None:
    global _compiled
    _compiled = True


def loaded() -> None:
    """Say that a compiled program was loaded outside JAX's compile path (a compiled
    entry of :mod:`samflow.exported`, which JAX's monitoring does not report)."""
    _mark()


def watch() -> None:
    """Mark every compile and persistent-cache load of this process (once per process;
    JAX's public ``jax.monitoring`` listeners), so that :func:`relieve` counts mappings
    only after something may have added some."""
    global _watching
    if _watching:
        return
    from jax import monitoring

    monitoring.register_event_duration_secs_listener(_mark)
    _watching = True


def release() -> None:
    """Drop every compiled program of this process now (``jax.clear_caches()``, which
    also empties the executables of every live ``jit``), unmapping their kernels; what
    is left becomes the floor of :func:`threshold`."""
    global _floor, _releases
    if "jax" in sys.modules:
        sys.modules["jax"].clear_caches()
    if "samflow.exported" in sys.modules:  # the compiled programs it read or made
        sys.modules["samflow.exported"].forget()
    gc.collect()
    _floor = count() or 0
    _releases += 1


def relieve() -> bool:
    """:func:`release` when this process's memory mappings are past :func:`threshold`;
    returns whether it did.

    Costs nothing when nothing was compiled since the last call (one count of
    ``/proc/self/maps``, about a millisecond per 10,000 mappings, when something was).
    """
    global _compiled
    watch()
    if not _compiled:
        return False
    _compiled = False
    n = count()
    if n is None or n <= threshold():
        return False
    release()
    return True
