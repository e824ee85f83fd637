"""Ctrl-C on the command line: a prompt stop that keeps finished chunks and leaves no
temporary file.

Python turns SIGINT into a ``KeyboardInterrupt`` raised wherever the main thread is;
three places make that unsafe or lost, and :class:`interruptible` handles each:

- inside xarray / netCDF4 code, the interrupt can leave xarray's file lock held, and the
  main thread then waits forever for it while closing the file: there the interrupt is
  postponed until the main thread has left that code (it is re-delivered every
  :data:`POLL_SECONDS`);
- inside a garbage-collector callback (JAX has one) the interrupt is swallowed
  ("Exception ignored in ...") and the run would go on to the end: it is raised again;
- inside a long call that never returns to Python (compiling a program), or anything
  else that keeps the process from ending: after :data:`GRACE_SECONDS` the process
  removes the temporaries :func:`samflow.io.atomic_write` has open, says
  ``samflow: interrupted`` and exits with status 130 at once.

Files are made by renaming a finished temporary (:func:`samflow.io.atomic_write`), so
what was finished before the interrupt stays and nothing half-written is left.
"""

from __future__ import annotations

import _thread
import os
import select
import signal
import sys
import threading
import time
from types import FrameType

from samflow import io

GRACE_SECONDS = 4.0
"""How long after Ctrl-C the process may take to stop by itself before it is ended."""
POLL_SECONDS = 0.1
EXIT_STATUS = 130
MESSAGE = "samflow: interrupted"

_FILE_IO = (
    f"{os.sep}xarray{os.sep}backends{os.sep}",
    f"{os.sep}netCDF4{os.sep}",
    f"{os.sep}h5netcdf{os.sep}",
    f"{os.sep}tempfile.py",
)


def in_file_io(frame: FrameType | None) -> bool:
    """Whether ``frame`` or one of its callers runs xarray's or netCDF4's file code
    (where an interrupt can leave a file lock held) or makes a temporary file."""
    while frame is not None:
        name = frame.f_code.co_filename
        if any(part in name for part in _FILE_IO):
            return True
        frame = frame.f_back
    return False


class interruptible:
    """Within this context (in the main thread; elsewhere it does nothing) Ctrl-C raises
    one ``KeyboardInterrupt`` in the main thread at a safe point, promptly; see the
    module docstring. ``temporaries``: the files to remove before a forced exit (a live
    set, filled while files are written)."""

    def __init__(self, temporaries: set | None = None, grace: float = GRACE_SECONDS):
        self.temporaries = io.TEMPORARIES if temporaries is None else temporaries
        self.grace = grace
        self.active = False

    def __enter__(self) -> interruptible:
        if threading.current_thread() is not threading.main_thread():
            return self
        self.first: float | None = None  # when the first SIGINT arrived
        self.pending = False  # an interrupt waits to be raised
        self.raised = False  # a KeyboardInterrupt is on its way out
        self.closed = threading.Event()
        self.read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        self.write_fd = write_fd
        self.old_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        self.old_handler = signal.signal(signal.SIGINT, self._handler)
        self.old_hook = sys.unraisablehook
        sys.unraisablehook = self._unraisable
        self.active = True
        self.thread = threading.Thread(target=self._watch, name="samflow-interrupt", daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if not self.active:
            return
        self.active = False
        self.closed.set()
        signal.signal(signal.SIGINT, self.old_handler)
        signal.set_wakeup_fd(self.old_fd)
        sys.unraisablehook = self.old_hook
        self.thread.join()
        os.close(self.read_fd)
        os.close(self.write_fd)

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if self.first is None:
            self.first = time.monotonic()
        if self.raised:
            return  # one KeyboardInterrupt; a second Ctrl-C lets the first finish
        if in_file_io(frame):
            self.pending = True  # re-delivered by the watcher once out of the file code
            return
        self.pending = False
        self.raised = True
        raise KeyboardInterrupt

    def _unraisable(self, unraisable) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt) and self.raised:
            self.raised, self.pending = False, True  # swallowed (a gc callback): again
            return
        self.old_hook(unraisable)

    def _watch(self) -> None:
        while not self.closed.is_set():
            ready, _, _ = select.select([self.read_fd], [], [], POLL_SECONDS)
            if ready:
                try:
                    data = os.read(self.read_fd, 512)
                except OSError:
                    data = b""
                if signal.SIGINT in data and self.first is None:
                    self.first = time.monotonic()
            if self.first is None or self.closed.is_set():
                continue
            if time.monotonic() - self.first > self.grace:
                self._force_exit()
            if self.pending:
                _thread.interrupt_main()

    def _force_exit(self) -> None:
        for path in list(self.temporaries):
            try:
                os.unlink(path)
            except OSError:
                pass
        try:
            sys.stderr.write(MESSAGE + "\n")
            sys.stderr.flush()
        finally:
            os._exit(EXIT_STATUS)
