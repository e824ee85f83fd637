"""samflow.preload: a module imported in a thread while the caller runs something else;
the caller's own import gets the whole module, or the error it would have raised."""

from __future__ import annotations

import importlib
import sys
import threading
import time

import pytest

from samflow import preload


def test_a_module_imported_ahead_is_whole_when_the_caller_imports_it(tmp_path, monkeypatch):
    """The module is imported by the thread, not by the caller; a caller that imports it
    before the thread is done waits for it (its import takes 0.3 s here) and gets it
    complete, its last line run."""
    (tmp_path / "slow_module_for_preload.py").write_text(
        "import threading, time\n"
        "BY = threading.current_thread().name\n"
        "time.sleep(0.3)\n"
        "DONE = True\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "slow_module_for_preload", raising=False)
    preload.ahead("slow_module_for_preload")
    deadline = time.monotonic() + 30
    while "slow_module_for_preload" not in sys.modules:  # until the thread has begun it
        assert time.monotonic() < deadline, "the thread never started the import"
        time.sleep(0.001)
    module = importlib.import_module("slow_module_for_preload")
    assert module.DONE and module.BY == "samflow-preload"
    assert threading.current_thread().name != module.BY


def test_a_failing_import_is_raised_by_the_callers_own(tmp_path, monkeypatch):
    (tmp_path / "broken_module_for_preload.py").write_text("raise ValueError('broken')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    preload.ahead("no_such_module_for_preload", "broken_module_for_preload")
    time.sleep(0.2)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("no_such_module_for_preload")
    with pytest.raises(ValueError, match="broken"):
        importlib.import_module("broken_module_for_preload")


def test_nothing_starts_for_modules_already_imported(monkeypatch):
    started = []
    monkeypatch.setattr(threading.Thread, "start", lambda self: started.append(self))
    preload.ahead("json", "sys")
    assert started == []
