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

from samflow import compile_cache, exported
from samflow.engine import Points, Setup, bucket, place, program, run_points
from samflow.flows import FlowConfig
from samflow.precision import precision
from samflow.rules import SAM_L2
from samflow.runners import Flow, LogSpaced

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
    """17 and 20 points, 17 and 18 records: one bucket each, one program; and the
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
    # A program runs as jitted here, or read back or exported (samflow.exported) where
    # the compile cache is on: one more of either, for both sizes.
    before = fn._cache_size() + len(exported._loaded)
    padded = [run_points(setup, points, times) for points, times in runs]
    assert fn._cache_size() + len(exported._loaded) == before + 1
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
    runner = Flow(tau_max=2.0, save=LogSpaced(4))
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
events, compiles = [], []
monitoring.register_event_listener(lambda name, **kw: events.append(name))
monitoring.register_event_duration_secs_listener(
    lambda name, secs, **kw: compiles.append(name) if name.endswith("backend_compile_duration")
    else None)
import samflow
samflow.trajectory("sam-l2", depth=2, mu=[1, 2, 3, 4], alpha=0.5, rho=1.0,
                   runner=samflow.Discrete(eta=0.05, steps=40))
print(json.dumps({"hits": events.count("/jax/compilation_cache/cache_hits"),
                  "compiles": len(compiles), "folder": jax.config.jax_compilation_cache_dir}))
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
    """The first process compiles the trajectory's program and stores it; the second
    compiles nothing: it reads the program back compiled (samflow.exported)."""
    folder = tmp_path / "jax"
    first = _child({compile_cache.ENV: str(folder)})
    assert first["hits"] == 0 and first["compiles"] >= 1 and first["folder"] == str(folder)
    assert any(folder.iterdir())
    second = _child({compile_cache.ENV: str(folder)})
    assert second["compiles"] == 0, second


@pytest.mark.slow
def test_cache_off(tmp_path):
    out = _child({compile_cache.ENV: "off", "XDG_CACHE_HOME": str(tmp_path)})
    assert out["hits"] == 0 and out["folder"] is None and out["compiles"] >= 1
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


TRAJ = """
import sys, samflow
from samflow.rules import SAM_L2
name, depth, mu, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rule = samflow.PerturbationRule(name, SAM_L2.direction, True)
runner = samflow.Discrete(eta=0.05, steps=30)
mu = [float(m) for m in mu.split(",")]
samflow.trajectory(rule, depth=depth, mu=mu, alpha=0.5, rho=1.0, runner=runner).to_netcdf(out)
"""
"""A trajectory of a user's rule: its program is not stored by samflow.exported (whose
compiled entries bypass JAX's cache), so JAX's own cache holds it."""


def _traj(folder, out, depth="2", mu="1,2"):
    env = {**os.environ, "PYTHONPATH": str(ROOT), compile_cache.ENV: str(folder)}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    argv = [sys.executable, "-c", TRAJ, "mine", depth, mu, str(out)]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


def _same_file(a, b):
    import xarray as xr

    x, y = xr.load_dataset(a), xr.load_dataset(b)
    for name in x.data_vars:
        np.testing.assert_array_equal(x[name].values, y[name].values, err_msg=name)


@pytest.mark.slow
def test_damaged_and_swapped_cache_entries_heal(tmp_path):
    """Entries swapped between two programs' names, or with bytes flipped, fail their
    check: each is named once, removed and replaced by the fresh compile, and the
    results equal the first runs' exactly; the next run reads the healed entries."""
    cache = tmp_path / "cache"
    assert _traj(cache, tmp_path / "a.nc") == ""
    assert _traj(cache, tmp_path / "b.nc", "3", "1,2,3") == ""
    # The two programs of the runs, the largest entries: on a loaded machine a few small
    # programs also take over MIN_COMPILE_SECONDS to compile and are kept beside them.
    first, second = sorted(cache.glob("*-cache"), key=lambda p: p.stat().st_size)[-2:]
    first_bytes = first.read_bytes()
    first.write_bytes(second.read_bytes())
    second.write_bytes(first_bytes)
    err = _traj(cache, tmp_path / "a2.nc") + _traj(cache, tmp_path / "b2.nc", "3", "1,2,3")
    assert err.count("failed its check") == 2 and str(cache) in err, err
    _same_file(tmp_path / "a.nc", tmp_path / "a2.nc")
    _same_file(tmp_path / "b.nc", tmp_path / "b2.nc")
    for entry in (first, second):  # 8 bytes zeroed in the middle of each
        data = bytearray(entry.read_bytes())
        data[len(data) // 2 : len(data) // 2 + 8] = bytes(8)
        entry.write_bytes(bytes(data))
    err = _traj(cache, tmp_path / "a3.nc")
    assert err.count("failed its check") == 1, err
    _same_file(tmp_path / "a.nc", tmp_path / "a3.nc")
    assert _traj(cache, tmp_path / "a4.nc") == ""  # healed: read back, no message


def test_same_folder_however_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert compile_cache.chosen_dir("x/../cache") == tmp_path / "cache"
    assert compile_cache.chosen_dir("~/cache") == tmp_path / "cache"
    assert compile_cache.chosen_dir(str(tmp_path / "cache")) == tmp_path / "cache"


@pytest.mark.parametrize(
    "setting, named",
    [
        ("", "--compile-cache is empty"),
        ("~nosuchuser30/x", "~nosuchuser30/x"),
        ("FILE/x", "cannot be made or written"),
    ],
)
def test_bad_cache_settings_are_refused(tmp_path, monkeypatch, capsys, setting, named):
    """An empty --compile-cache, a ~user that does not exist or a folder that cannot be
    made: exit 2, one line naming it, nothing written (not into the current folder)."""
    from samflow.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "FILE").write_text("a file")
    argv = ["trajectory", "--method", "gd", "--depth", "1", "--mu", "1,2", "--alpha", "0.5"]
    argv += ["--steps", "10", "--out", str(tmp_path / "t.nc"), "--compile-cache", setting]
    saved = jax.config.jax_compilation_cache_dir
    try:
        status = main(argv)
    finally:
        jax.config.update("jax_compilation_cache_dir", saved)
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and named in err[0], err
    assert sorted(os.listdir(tmp_path)) == ["FILE"]


def test_unusable_cache_variable_falls_back_in_one_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "FILE").write_text("a file")
    monkeypatch.setenv(compile_cache.ENV, str(tmp_path / "FILE" / "x"))
    saved = jax.config.jax_compilation_cache_dir
    try:
        assert compile_cache.enable() is None
        assert jax.config.jax_compilation_cache_dir is None
    finally:
        jax.config.update("jax_compilation_cache_dir", saved)
        compile_cache._folder = None
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "compiling without a cache" in err[0], err


def test_cnn_data_dir_of_an_unknown_user(tmp_path, capsys):
    from samflow.cli import main

    out = str(tmp_path / "o.nc")
    status = main(["cnn", "--method", "gd", "--data-dir", "~nosuchuser30/data", "--out", out])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and "~nosuchuser30/data" in err[0], err


def test_a_failure_with_the_cache_on_is_retried_once_without_it(monkeypatch, capsys):
    """A command that fails unexpectedly with the cache on runs once more with it off,
    saying so in one line that names the folder and --compile-cache off; with the cache
    off, or for a failure of its own (bad input), nothing is retried."""
    from argparse import Namespace

    from samflow import cli

    calls, turned_off = [], []
    monkeypatch.setattr(compile_cache, "turn_off", lambda: turned_off.append(1))
    monkeypatch.setattr(compile_cache, "folder_in_use", lambda: Path("/some/cache"))

    def func(args):
        calls.append(1)
        if len(calls) == 1:
            raise AssertionError("a cached program broke")
        return 0

    assert cli._retried_without_cache(Namespace(func=func)) == 0
    assert len(calls) == 2 and turned_off == [1]
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "/some/cache" in err[0] and "--compile-cache off" in err[0]

    def bad_input(args):
        raise cli.InputError("bad")

    with pytest.raises(cli.InputError):
        cli._retried_without_cache(Namespace(func=bad_input))
    monkeypatch.setattr(compile_cache, "folder_in_use", lambda: None)
    calls.clear()
    with pytest.raises(AssertionError):
        cli._retried_without_cache(Namespace(func=func))
    assert len(calls) == 1 and turned_off == [1]
