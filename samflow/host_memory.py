"""The host process's malloc: keep freed memory for the next chunk.

Kept apart from :mod:`samflow.devices` because it must not import JAX: the command line
sets it up before JAX starts (:class:`samflow.cli._cpu_cores`).
"""

from __future__ import annotations

import ctypes
import os

HOST_MEMORY_ENV = "SAMFLOW_HOST_MALLOC"
"""Set to ``default`` to leave the C library's malloc settings alone
(:func:`reuse_host_memory`)."""
MMAP_THRESHOLD, TRIM_THRESHOLD = 32 * 2**20, 512 * 2**20
"""glibc ``mallopt`` settings of :func:`reuse_host_memory`: blocks below 32 MiB (glibc's
largest threshold on 64-bit machines) come from the heap, and up to 512 MiB of freed heap
is kept for the next allocation."""
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h


def reuse_host_memory() -> bool:
    """Let the C library keep freed memory for reuse (glibc ``mallopt``); returns whether
    it did.

    Every call of a compiled program allocates its outputs afresh: for a 16384-point
    chunk with 100 records that is about 30 MB, whose pages glibc by default maps for
    each call and hands back to the kernel when they are freed (a freed block above its
    threshold, or a heap top above its trim threshold, goes back), so that the kernel
    zeroes every page again on the next call. On the 2-core bench machine that cost
    about a sixth of a discrete sweep (``benchmarks/bench.py`` case 1). With blocks below
    :data:`MMAP_THRESHOLD` taken from the heap and up to :data:`TRIM_THRESHOLD` of freed
    heap kept, the next chunk reuses the same pages. The process's memory then stays
    near its peak instead of shrinking between chunks. Process-wide, so the command line
    and the benchmarks call it and a library user may; a no-op (False) where the C
    library has no ``mallopt`` (macOS, musl) or ``SAMFLOW_HOST_MALLOC=default``.
    """
    if os.environ.get(HOST_MEMORY_ENV, "").lower() == "default":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
