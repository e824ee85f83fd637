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
    held = [mmap.mmap(-1, 4096) for _ in range(mappings.cap() - HEADROOM - mappings.count())]
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


def child(relief: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", CHILD, relief],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "SAMFLOW_COMPILE_CACHE": "off"},  # every program compiled there
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


def test_a_release_unmaps_the_programs_read_back_compiled(tmp_path, monkeypatch):
    """A program read back compiled (samflow.exported) is held outside JAX's caches; a
    release drops it too and its kernels' pages go. The control: a release that leaves
    samflow.exported's programs held unmaps none of them."""
    import gc

    import jax

    from samflow import exported
    from samflow.engine import Points, Setup, place, program
    from samflow.precision import precision
    from samflow.rules import SAM_L2

    pytest.importorskip("flatbuffers")
    monkeypatch.setattr(exported, "folder", lambda: tmp_path)
    monkeypatch.setattr(exported, "_loaded", {})
    setup = Setup(rule=SAM_L2, mode="discrete", keep=("beta",), padding=False, sharded=False)
    points = Points(
        theta0=np.full((8, 3, 4), 0.5),
        X=np.array([[[1.0, 2.0, 3.0, 4.0]]]),
        y=np.ones(1),
        depth=np.array([3]),
        rho=np.linspace(0.1, 1.0, 8),
        eta=np.full(8, 0.05),
    )

    def loaded(traced) -> int:
        """Mappings held once the program is read back (or made) and run."""
        with precision(setup.dtype):
            args = (*place(setup, points, np.arange(5) * 10), jax.numpy.asarray(5))
            exported.runnable(setup, args, traced)(*args)["beta"].block_until_ready()
        gc.collect()
        return mappings.count()

    loaded(lambda: program(setup))  # exported, compiled and stored
    mappings.release()
    base = mappings.count()
    held = loaded(lambda: pytest.fail("traced again")) - base  # read back compiled
    assert held > 100, held  # a discrete program's kernels: hundreds
    monkeypatch.setattr(exported, "forget", lambda: None)
    mappings.release()
    assert mappings.count() - base > held // 2, "unmapped without forgetting them"
    monkeypatch.undo()
    mappings.release()
    assert mappings.count() - base < held // 4
