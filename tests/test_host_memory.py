"""The host's malloc settings (samflow.host_memory): freed memory is kept for reuse."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import pytest

from samflow.host_memory import HOST_MEMORY_ENV, reuse_host_memory

# Four 10 MiB arrays made, filled and freed ten times; the minor page faults per round.
# glibc's defaults hand the freed heap back to the kernel (its top passes the trim
# threshold, twice the 10 MiB block), so every round maps and zeroes its pages again.
ROUNDS = """
import resource
import numpy as np
from samflow.host_memory import reuse_host_memory
print(reuse_host_memory())
def one_round():
    arrays = [np.ones(10 * 2**20 // 8) for _ in range(4)]
    del arrays
one_round()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    one_round()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 10)
"""


def _glibc() -> bool:
    try:
        ctypes.CDLL(None).mallopt  # noqa: B018
    except (OSError, AttributeError):
        return False
    return sys.platform.startswith("linux")


def _faults_per_round(env: dict[str, str]) -> tuple[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", ROUNDS],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.split()
    return out[0], float(out[1])


@pytest.mark.skipif(not _glibc(), reason="mallopt is glibc's")
def test_freed_memory_is_reused_not_faulted_in_again():
    """With the setting a round of the same allocations takes (almost) no new pages;
    without it (SAMFLOW_HOST_MALLOC=default) it faults in a large share of its 40 MiB
    again. The bounds are loose (kernels differ in fault-around and huge pages): below
    one page in twenty of 40 MiB with it, and ten times that without."""
    pages = 4 * 10 * 2**20 // 4096
    did, kept = _faults_per_round({HOST_MEMORY_ENV: ""})
    left, default = _faults_per_round({HOST_MEMORY_ENV: "default"})
    assert (did, left) == ("True", "False")
    assert kept < pages / 20
    assert default > 10 * max(kept, 1.0)


def test_opt_out_leaves_malloc_alone(monkeypatch):
    monkeypatch.setenv(HOST_MEMORY_ENV, "default")
    assert reuse_host_memory() is False
