"""Compile once: the persistent compilation cache across processes, and size buckets
that let one compiled program serve nearby grid sizes and record counts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from samflow import compile_cache
from samflow.engine import Points, Setup, bucket, place, program, run_points
from samflow.flows import FlowConfig
from samflow.precision import precision
from samflow.rules import SAM_L2
from samflow.runners import Flow

ROOT = Path(__file__).resolve().parent.parent


def test_bucket_sizes():
    for per_doubling in (4, 8):
        # The sizes written out: n itself up to per_doubling, then m * 2^k.
        m = range(per_doubling + 1, 2 * per_doubling + 1)
        allowed = sorted({*range(1, per_doubling + 1)} | {a * 2**k for a in m for k in range(20)})
        for n in range(1, 5000):
            size = bucket(n, per_doubling=per_doubling)
            assert size == next(a for a in allowed if a >= n)
            assert size <= n * (1 + 1 / per_doubling)
    assert bucket(9) == bucket(10) == 10 and bucket(101) == 112
    assert bucket(101, per_doubling=8) == 104 and bucket(1_000_000) == 2**20
    for n, multiple in ((9, 4), (101, 3), (1, 2)):
        b = bucket(n, multiple)
        assert b % multiple == 0 and b >= bucket(n) and b - bucket(n) < multiple


def _points(C: int, rng) -> Points:
    alpha = rng.uniform(0.2, 1.5, C)
    return Points(
        theta0=np.broadcast_to(alpha[:, None, None], (C, 2, 4)).copy(),
        X=np.array([[[1.0, 2.0, 3.0, 4.0]]]),
        y=np.ones(1),
        depth=np.array([2]),
        rho=rng.uniform(0.1, 1.0, C),
        eta=np.full(C, 0.05),
    )


def test_sizes_in_one_bucket_compile_once():
    """17 and 20 points, 17 and 18 records: one bucket each, one compilation; and the
    padded runs give what the program gives without padding (padded records repeat
    the last one: unmasked, they would read as a run that stopped moving, limit -2)."""
    # The points start balanced: run_points takes the balanced step, as this setup says.
    setup = Setup(
        rule=SAM_L2,
        mode="discrete",
        keep=("beta",),
        padding=False,
        sharded=False,
        step_path="balanced",
    )
    fn = program(setup)
    rng = np.random.default_rng(0)
    runs = [(_points(17, rng), np.arange(17) * 20), (_points(20, rng), np.arange(18) * 15)]
    before = fn._cache_size()
    padded = [run_points(setup, points, times) for points, times in runs]
    assert fn._cache_size() == before + 1
    for (points, times), ours in zip(runs, padded, strict=True):
        with precision(setup.dtype):
            exact = {k: np.asarray(v) for k, v in fn(*place(setup, points, times)).items()}
        assert ours.keys() == exact.keys()
        for name, value in exact.items():
            assert ours[name].shape == value.shape, name
            # The same arithmetic per point (tiles of the same width): equal but for
            # rounding in a differently vectorised loop, hence 1e-12 in float64.
            np.testing.assert_allclose(ours[name], value, rtol=1e-12, atol=0, err_msg=name)


def test_flow_program_has_no_host_callback():
    """JAX writes no program with a host callback to disk: diffrax's checks must be
    traced without one (samflow.compile_cache.no_host_checks)."""
    runner = Flow(tau_max=2.0, n_save=5)
    flow = FlowConfig.of(runner, "linear", "float64")
    setup = Setup(rule=SAM_L2, mode="flow", flow=flow, sharded=False)
    points = _points(2, np.random.default_rng(2))
    with precision("float64"):
        text = program(setup).lower(*place(setup, points, runner.times())).as_text()
    assert "callback" not in text


CHILD = """
import json, sys
import jax
from jax import monitoring
events = []
monitoring.register_event_listener(lambda name, **kw: events.append(name))
import samflow
samflow.trajectory("sam-l2", depth=2, mu=[1, 2, 3, 4], alpha=0.5, rho=1.0,
                   runner=samflow.Discrete(eta=0.05, steps=40))
print(json.dumps({"hits": events.count("/jax/compilation_cache/cache_hits"),
                  "folder": jax.config.jax_compilation_cache_dir}))
"""


def _child(env: dict) -> dict:
    full = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", **env}
    full.pop("JAX_COMPILATION_CACHE_DIR", None)
    proc = subprocess.run(
        [sys.executable, "-c", CHILD], env=full, capture_output=True, text=True, check=True
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_second_process_reads_the_cache(tmp_path):
    folder = tmp_path / "jax"
    first = _child({compile_cache.ENV: str(folder)})
    assert first == {"hits": 0, "folder": str(folder)}
    assert any(folder.iterdir())
    second = _child({compile_cache.ENV: str(folder)})
    assert second["hits"] >= 1


@pytest.mark.slow
def test_cache_off(tmp_path):
    out = _child({compile_cache.ENV: "off", "XDG_CACHE_HOME": str(tmp_path)})
    assert out == {"hits": 0, "folder": None}
    assert not (tmp_path / "samflow").exists()


@pytest.mark.slow
def test_command_line_option(tmp_path):
    """--compile-cache DIR wins over the variable; --compile-cache off leaves none."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path)}
    env[compile_cache.ENV] = str(tmp_path / "from_variable")
    command = [sys.executable, "-m", "samflow.cli", "trajectory", "--method", "gd"]
    command += ["--depth", "1", "--mu", "1,2", "--alpha", "0.5", "--steps", "20", "-q"]
    for i, setting in enumerate((str(tmp_path / "from_option"), "off")):
        out = ["--out", str(tmp_path / f"t{i}.nc"), "--compile-cache", setting]
        subprocess.run(command + out, env=env, check=True, capture_output=True)
    assert any((tmp_path / "from_option").iterdir())
    assert not (tmp_path / "from_variable").exists() and not (tmp_path / "samflow").exists()


def test_cache_folder_choice(monkeypatch, tmp_path):
    monkeypatch.delenv(compile_cache.ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert compile_cache.chosen_dir() == tmp_path / "samflow" / "jax"
    assert compile_cache.chosen_dir("off") is None
    assert compile_cache.chosen_dir(tmp_path / "x") == tmp_path / "x"
    monkeypatch.setenv(compile_cache.ENV, "OFF")
    assert compile_cache.chosen_dir() is None
    monkeypatch.setenv(compile_cache.ENV, str(tmp_path / "y"))
    assert compile_cache.chosen_dir() == tmp_path / "y"
    assert compile_cache.chosen_dir(tmp_path / "z") == tmp_path / "z"  # the option wins
    assert jax.config.jax_compilation_cache_dir != str(tmp_path / "y")  # nothing set
