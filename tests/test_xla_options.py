"""Importing samflow before JAX starts has XLA's CPU compiler run each small loop as one
function (samflow.xla_options): set only where it can act and the user has not chosen,
present in the programs the engine compiles, and with the numbers of the kernel-by-kernel
loops."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import samflow
from samflow import xla_options
from samflow.engine import Points, Setup, place, program
from samflow.precision import precision
from samflow.rules import SAM_L2

ROOT = Path(__file__).resolve().parent.parent
OURS = f"--xla_backend_extra_options={xla_options.OPTION}={xla_options.THRESHOLD}"


def _ours_here() -> None:
    """Skip where this test process's XLA_FLAGS were chosen by hand (the user's backend
    options, or ``SAMFLOW_XLA_LOOPS=default``): what is tested is samflow's own setting."""
    if OURS not in os.environ.get("XLA_FLAGS", ""):
        chosen = os.environ.get(xla_options.ENV, "").lower() == "default" or (
            "xla_backend_extra_options" in os.environ.get("XLA_FLAGS", "")
        )
        if chosen:
            pytest.skip("XLA_FLAGS chosen by hand in this process")


def _flags_after_import(code: str = "import samflow", **env: str) -> str:
    """``XLA_FLAGS`` in a fresh process after ``code`` and reading it."""
    child = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", xla_options.ENV)}
    child.update(env, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", f"{code}; import os; print(os.environ.get('XLA_FLAGS', ''))"],
        env=child, capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    return out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""


def test_set_on_import_only_where_it_acts_and_nobody_chose():
    assert _flags_after_import() == OURS
    # the user's own flags are kept, ours added
    assert _flags_after_import(XLA_FLAGS="--xla_cpu_enable_fast_math=false") == (
        f"--xla_cpu_enable_fast_math=false {OURS}"
    )
    # the user's backend options are theirs to complete
    theirs = "--xla_backend_extra_options=xla_cpu_disable_loop_unrolling"
    assert _flags_after_import(XLA_FLAGS=theirs) == theirs
    assert _flags_after_import(**{xla_options.ENV: "default"}) == ""
    # JAX started first: XLA has read its flags, so they are left as they are
    started = "import jax.numpy as jnp; jnp.ones(1).block_until_ready(); import samflow"
    assert _flags_after_import(started) == ""
    # imported but not started: still in time
    assert _flags_after_import("import jax; import samflow") == OURS


def _points(C: int) -> Points:
    alpha = np.geomspace(0.05, 1.5, C)
    return Points(
        theta0=np.broadcast_to(alpha[:, None, None], (C, 2, 4)).copy(),
        X=np.array([[[1.0, 2.0, 3.0, 4.0]]]),
        y=np.ones(1),
        depth=np.array([2]),
        rho=np.linspace(0.05, 1.0, C),
        eta=np.full(C, 0.05),
    )


def test_the_step_loop_of_this_process_is_compiled_whole():
    """This test process imported samflow before JAX started (tests/conftest.py), as a
    user's does: the discrete program's step loop is one function, not kernels."""
    _ours_here()
    assert OURS in os.environ.get("XLA_FLAGS", "")
    assert xla_options.loops_compiled_whole()
    setup = Setup(rule=SAM_L2, mode="discrete", keep=("beta",), padding=False, sharded=False)
    with precision(setup.dtype):
        times = np.arange(9) * 10
        args = (*place(setup, _points(8), times), jnp.asarray(9, jnp.int32))
        text = program(setup).lower(*args).compile().as_text()
    assert text.count('xla_cpu_small_call="true"') >= 2  # the step loop and the records'


SWEEPS = {
    "discrete": (
        "sam-l2",
        {"depth": 3, "mu": [1.0, 2.0, 3.0, 4.0], "axes": {"alpha": "0.05:1.5:8:log", "rho":
         "0.05:1:4:log"}, "runner": samflow.Discrete(eta=0.02, steps=600)},
    ),
    "flow": (
        "usam",
        {"depth": 4, "mu": [1.0, 2.0, 3.0, 4.0], "rho": 2.27, "axes": {"alpha":
         "1e-3:1:8:log"}, "runner": samflow.Flow(tau_max=50.0, tau_cap=500.0)},
    ),
}  # fmt: skip
COMPARED = ("regime", "limit_coord", "leader_path", "final_direction", "beta_norm", "loss")
COMPARED += ("handoff_tau", "stop_tau")


def _sweeps() -> dict:
    out = {}
    for mode, (method, kwargs) in SWEEPS.items():
        ds = samflow.sweep(method, **kwargs)
        for name in COMPARED:
            if name in ds:
                out[f"{mode}/{name}"] = np.asarray(ds[name].values, float).tolist()
            elif name in ds.attrs:
                out[f"{mode}/{name}"] = np.asarray(ds.attrs[name], float).tolist()
    return out


def test_whole_loops_give_the_numbers_of_the_kernel_by_kernel_loops(tmp_path):
    """The same sweeps (a discrete l2-SAM map at L = 3, a USAM flow at L = 4 taken to its
    fate) in this process and in one that leaves XLA_FLAGS alone: the same labels and
    leader paths, and the same numbers. Measured bit for bit (AMD EPYC, 2026-12-07); the
    tolerance, 1e-12 of each array's largest entry, leaves room for a code generator that
    rounds a fused multiply-add otherwise on another processor (1e-16 per operation over
    at most a few thousand steps)."""
    _ours_here()
    here = _sweeps()
    script = tmp_path / "other.py"
    script.write_text(
        "import json, sys\n"
        f"sys.path.insert(0, {str(ROOT / 'tests')!r})\n"
        "import test_xla_options as t\n"
        "assert not t._whole(), 'this process was to leave XLA_FLAGS alone'\n"
        f"json.dump(t._sweeps(), open({str(tmp_path / 'other.json')!r}, 'w'))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT), **{xla_options.ENV: "default"})
    env.pop("XLA_FLAGS", None)
    subprocess.run([sys.executable, str(script)], env=env, check=True, timeout=600)
    there = json.loads((tmp_path / "other.json").read_text())
    assert here.keys() == there.keys()
    for name in here:
        a, b = np.asarray(here[name]), np.asarray(there[name])
        if name.split("/")[1] in ("regime", "limit_coord", "leader_path"):
            np.testing.assert_array_equal(a, b, err_msg=name)
        else:
            finite = np.isfinite(a)
            np.testing.assert_array_equal(finite, np.isfinite(b), err_msg=name)
            np.testing.assert_array_equal(a[~finite], b[~finite], err_msg=name)  # inf, nan
            scale = np.max(np.abs(a[finite]), initial=1e-300)
            np.testing.assert_allclose(
                a[finite], b[finite], rtol=0, atol=1e-12 * scale, err_msg=name
            )


def _loop(x):
    return jax.lax.fori_loop(0, 10, lambda i, x: jnp.sin(x) * 1.5, x)


def _whole(size: int = 4096) -> bool:
    """Whether XLA compiles a loop over ``size`` floats (16 KiB by default) whole."""
    text = jax.jit(_loop).lower(jnp.ones(size, jnp.float32)).compile().as_text()
    return 'xla_cpu_small_call="true"' in text


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="a CPU compiler option")
def test_a_loop_below_the_threshold_is_one_function_above_it_kernels():
    """XLA's pass hoists a loop by the bytes one iteration touches: 16 MiB is the line
    (an iteration of this loop reads and writes its array: 8 MiB for 2^20 floats, 32 MiB
    for 2^22)."""
    _ours_here()
    assert _whole()
    assert _whole(2**20)
    assert not _whole(4 * 2**20)
