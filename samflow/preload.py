"""Modules imported in the background while a compiled program runs.

A process's first result waits on two things that need not wait on each other: reading
its compiled program back from the compile cache (XLA deserialises and links it,
0.3-0.4 s for a flow on a 2-core machine, without holding Python's GIL) and importing
xarray, which the result is built with (0.23-0.30 s, nearly all pandas, holding it).
:func:`ahead` starts such an import in a thread just before the program runs,
so the two overlap; the caller's own ``import`` later finds the module in
``sys.modules``, or waits on Python's per-module import lock until the thread has
finished it. An import that fails in the thread is left for the caller's ``import``
to raise, as it would have without this.

Measured alone (before compiled entries, docs/benchmarks.md#start-up): a second
process's first flow trajectory, 2.02 s without and 1.91 s with, against 1.19 s for the
bare start of JAX (medians of 9 interleaved rounds).
"""

from __future__ import annotations

import importlib
import sys
import threading


def _import(names: tuple[str, ...]) -> None:
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # the caller's own import raises it, where it is needed
            return


def ahead(*names: str) -> None:
    """Import ``names`` (in order) in a thread, unless all are imported already.

    Call it just before a program whose run leaves the GIL free (a compiled JAX
    program, the compile cache's read of it), where the caller imports the same modules
    afterwards. The thread is not a daemon: a process that ends early (an error, an
    interrupt) waits for the import to finish rather than tear an extension module's
    initialisation down half way."""
    missing = tuple(name for name in names if name not in sys.modules)
    if missing:
        threading.Thread(target=_import, args=(missing,), name="samflow-preload").start()
