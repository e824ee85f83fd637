"""Compiled programs are released before the process runs out of memory mappings.

The cause of the suite's segmentation faults (issue 37): every kernel XLA's CPU compiler
loads takes mappings of its own, and past ``vm.max_map_count`` the next compile crashes.
Each case runs in a child process that first takes all but a few hundred of its
mappings with ``mmap`` (shared anonymous mappings, which the kernel never merges), so
that a handful of compiles reaches the cap: without :func:`samflow.mappings.relieve` the
child dies, with it the child finishes and its numbers are those of a fresh process.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from samflow import mappings

pytestmark = pytest.mark.skipif(mappings.count() is None, reason="no /proc/self/maps here")

CHILD = textwrap.dedent(
    """
    import json, mmap, sys
    import samflow
    from samflow import mappings

    # About four discrete programs' worth (800-950 mappings each at depths 3-7 since the
    # certificates of issue 38 grew them; the first call, with JAX's own programs, about
    # 1,300): the first call must fit whole, as nothing it holds can be released while it
    # runs; a release comes once half of what is left after the last one is taken, so a
    # program must fit in that half (about 1,400 here); and the six together (about
    # 5,700) must not fit, or the control below could not crash.
    HEADROOM = 3200
    if sys.argv[1] == "off":
        mappings.relieve = lambda: False
    if sys.argv[1] == "keep":  # a release that leaves samflow.exported's programs held
        from samflow import exported
        exported.forget = lambda: None
    hold = 0 if sys.argv[1] == "fill" else mappings.cap() - HEADROOM - mappings.count()
    held = [mmap.mmap(-1, 4096) for _ in range(hold)]
    betas = {}
    for depth in (2, 3, 4, 5, 6, 7):
        t = samflow.trajectory(
            "sam-l2", depth=depth, mu=[1, 2, 3, 4], alpha=0.5, rho=0.1,
            runner=samflow.Discrete(eta=0.02, steps=50),
        )
        betas[depth] = t["beta"].values.tolist()
    print(json.dumps({"releases": mappings.releases(), "betas": betas}))
    """
)


def child(relief: str, cache: str = "off") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", CHILD, relief],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "SAMFLOW_COMPILE_CACHE": cache},  # off: every program compiled
    )


def test_without_relief_the_cap_crashes_a_compile():
    """The control: the same child with :func:`relieve` disabled does not finish (a
    segmentation fault in jaxlib 0.10.2). Should a future jaxlib raise instead, the
    child still fails; should it cope, this test says the relief may go."""
    done = child("off")
    assert done.returncode != 0, "six programs fitted under the cap without relief"


def test_relief_keeps_a_process_under_the_cap():
    done = child("on")
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["releases"] >= 2
    # The programs compiled again after a release give the numbers of this process,
    # which never came near the cap (same program, same machine: bit for bit).
    import samflow

    for depth in ("2", "7"):  # the first program, and the last after the releases
        fresh = samflow.trajectory(
            "sam-l2",
            depth=int(depth),
            mu=[1, 2, 3, 4],
            alpha=0.5,
            rho=0.1,
            runner=samflow.Discrete(eta=0.02, steps=50),
        )
        np.testing.assert_array_equal(np.asarray(out["betas"][depth]), fresh["beta"].values)


def test_relief_releases_the_programs_read_back_compiled(tmp_path):
    """With a compile cache a second process reads its programs back compiled
    (samflow.exported), outside JAX's caches: a release drops them too. The control: a
    release that leaves them held does not keep the same child under the cap."""
    cache = str(tmp_path / "cache")
    first = child("fill", cache)  # the first process, with all of the cap to itself
    assert first.returncode == 0, first.stderr[-2000:]
    done = child("on", cache)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["releases"] >= 2
    assert out["betas"] == json.loads(first.stdout.strip().splitlines()[-1])["betas"]
    assert child("keep", cache).returncode != 0, "a release that keeps them sufficed"
