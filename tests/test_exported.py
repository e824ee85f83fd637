"""Programs stored with jax.export (samflow.exported): a second process runs them without
tracing, with the traced program's bits; a damaged or swapped entry is never run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from samflow import exported
from samflow.engine import Points, Setup, place, program
from samflow.flow_config import FlowConfig
from samflow.precision import precision
from samflow.rules import SAM_L2, PerturbationRule
from samflow.runners import Flow

ROOT = Path(__file__).resolve().parent.parent
pytest.importorskip("flatbuffers")  # jax.export's serialisation needs it


def _points(C: int) -> Points:
    alpha = np.linspace(0.2, 1.5, C)
    return Points(
        theta0=np.broadcast_to(alpha[:, None, None], (C, 2, 4)).copy(),
        X=np.array([[[1.0, 2.0, 3.0, 4.0]]]),
        y=np.ones(1),
        depth=np.array([2]),
        rho=np.linspace(0.1, 1.0, C),
        eta=np.full(C, 0.05),
    )


def _bits(out: dict) -> dict:
    return {
        k: (np.asarray(v).dtype, np.asarray(v).shape, np.asarray(v).tobytes())
        for k, v in out.items()
    }


@pytest.fixture
def store(tmp_path, monkeypatch):
    """Entries in ``tmp_path``, and nothing read or exported before in this process."""
    monkeypatch.setattr(exported, "folder", lambda: tmp_path)
    monkeypatch.setattr(exported, "_loaded", {})
    return tmp_path


def _args(setup: Setup, C: int, T: int):
    times = np.arange(T) * 10
    return (*place(setup, _points(C), times), jnp.asarray(T, jnp.int32))


@pytest.mark.parametrize("sharded", [False, True])
def test_stored_program_gives_the_traced_programs_bits(store, sharded):
    """The traced program, the one exported now and the one read back from disk (traced
    never again) give the same bytes in every output: the compiled code is the same
    program's (a discrete l2-SAM run, on one device and sharded over all of them)."""
    setup = Setup(rule=SAM_L2, mode="discrete", keep=("beta",), padding=False, sharded=sharded)
    C = 8 * len(jax.devices())
    with precision(setup.dtype):
        args = _args(setup, C, 9)
        traced = _bits(program(setup)(*args))
        made = _bits(exported.runnable(setup, args, lambda: program(setup))(*args))
        assert len(list(store.glob("*" + exported.SUFFIX))) == 1
        assert len(list(store.glob("*" + exported.EXECUTABLE_SUFFIX))) == 1
        exported._loaded.clear()
        again = exported.runnable(setup, args, lambda: pytest.fail("traced again"))
        read = _bits(again(*args))  # the compiled entry
        for entry in store.glob("*" + exported.EXECUTABLE_SUFFIX):
            entry.unlink()
        exported._loaded.clear()
        again = exported.runnable(setup, args, lambda: pytest.fail("traced again"))
        lowered = _bits(again(*args))  # the export, lowered and compiled
    assert traced.keys() == made.keys() == read.keys() == lowered.keys()
    for name in traced:
        assert made[name] == traced[name], name
        assert read[name] == traced[name], name
        assert lowered[name] == traced[name], name


def test_only_a_program_compiled_here_is_stored_compiled(store, monkeypatch):
    """XLA's CPU client serialises a program it read from JAX's compile cache without its
    kernels' code: a compiled entry is made by a compile that does not read that cache,
    so with JAX's cache holding the program the stored one still runs, with the bits
    of the traced program."""
    from jax._src import compilation_cache as jax_cache

    setup = Setup(rule=SAM_L2, mode="discrete", keep=("beta",), padding=False, sharded=False)
    with precision(setup.dtype):
        args = _args(setup, 8, 7)
        traced = _bits(program(setup)(*args))
        reads = []
        original = jax_cache.get_executable_and_time
        monkeypatch.setattr(
            jax_cache,
            "get_executable_and_time",
            lambda *a, **k: reads.append(1) or original(*a, **k),
        )
        exported.runnable(setup, args, lambda: program(setup))
        assert reads == [], "the compiled entry's program was read from JAX's cache"
        exported._loaded.clear()
        read = _bits(exported.runnable(setup, args, lambda: pytest.fail("traced"))(*args))
    assert read == traced


@pytest.mark.parametrize("kind", ["export", "compiled"])
def test_damaged_or_swapped_entries_are_traced_afresh(store, capsys, kind):
    """An entry with a byte flipped, or another program's entry under this one's name,
    fails its check: removed with one line, never run; a damaged compiled entry falls
    back to the export (not traced), a damaged export (its compiled entry gone) is
    traced afresh; the same results."""
    suffix = exported.SUFFIX if kind == "export" else exported.EXECUTABLE_SUFFIX
    setup = Setup(rule=SAM_L2, mode="discrete", padding=False, sharded=False)
    other = replace(setup, keep=("beta",))
    with precision(setup.dtype):
        args = _args(setup, 8, 5)
        want = _bits(exported.runnable(setup, args, lambda: program(setup))(*args))
        exported.runnable(other, args, lambda: program(other))
        (a, b) = sorted(store.glob("*" + suffix), key=lambda p: p.stat().st_mtime_ns)
        damaged = bytearray(a.read_bytes())
        damaged[len(damaged) // 2] ^= 0xFF
        for entry in (bytes(damaged), b.read_bytes()):  # flipped; then the other's
            a.write_bytes(entry)
            if kind == "export":
                for compiled in store.glob("*" + exported.EXECUTABLE_SUFFIX):
                    compiled.unlink()
            exported._loaded.clear()
            traced = []

            def trace(traced=traced):
                traced.append(1)
                return program(setup)

            fn = exported.runnable(setup, args, trace)
            assert traced == ([1] if kind == "export" else [])
            assert _bits(fn(*args)) == want
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and "failed its check" in err[0], err
    exported._loaded.clear()
    with precision(setup.dtype):  # healed: read back without a word
        exported.runnable(setup, args, lambda: pytest.fail("traced again"))
    assert capsys.readouterr().err == ""


def test_only_samflows_own_pieces_are_exported():
    """A setup names its program only when every piece is samflow's own: a rule of the
    user's (same name, other code) or a solver object is not exported."""
    flow = FlowConfig.of(Flow(tau_max=5.0), "log", "float64")
    setup = Setup(rule=SAM_L2, mode="flow", flow=flow, sharded=False)
    text = exported.setup_text(setup)
    assert text is not None and "sam-l2" in text and "tsit5" in text
    again = Setup(rule=SAM_L2, mode="flow", flow=FlowConfig.of(Flow(tau_max=9.0), "log", "float64"))
    assert exported.setup_text(replace(again, sharded=False)) == text  # horizon: an argument
    mine = PerturbationRule("sam-l2", SAM_L2.direction, True)
    assert exported.setup_text(replace(setup, rule=mine)) is None
    import diffrax

    solver = FlowConfig.of(Flow(tau_max=5.0, solver=diffrax.Dopri5()), "log", "float64")
    assert exported.setup_text(replace(setup, flow=solver)) is None


CHILD = """
import json, sys
import hashlib
from jax import monitoring
import samflow.engine as engine
traces, made = [], []
monitoring.register_event_duration_secs_listener(
    lambda name, secs, **kw: traces.append(name) if name.endswith("jaxpr_trace_duration") else None)
original = engine.traced_program
engine.traced_program = lambda setup: made.append(1) or original(setup)
import samflow
flow = sys.argv[1] == "flow"
runner = samflow.Flow(tau_max=5.0) if flow else samflow.Discrete(eta=0.05, steps=40)
ds = samflow.trajectory("sam-l2", depth=2, mu=[1, 2, 3, 4], alpha=0.5, rho=1.0, runner=runner)
digest = hashlib.sha256(b"".join(ds[k].values.tobytes() for k in sorted(ds.data_vars))).hexdigest()
unused = ("diffrax", "equinox", "optimistix", "lineax", "optax", "scipy", "matplotlib", "tqdm",
          "sklearn", "samflow.flows", "samflow.images", "samflow.plotting")
print(json.dumps({"traced_programs": len(made), "traces": len(traces), "digest": digest,
                  "unused": [m for m in unused if m in sys.modules], "regime": int(ds["regime"])}))
"""


def _child(folder: Path, mode: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
    env.update({"SAMFLOW_COMPILE_CACHE": str(folder), "JAX_PLATFORMS": "cpu"})
    env["JAX_NUM_CPU_DEVICES"] = "2"  # as the command line: a trajectory runs on one of two
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, mode], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mode", ["discrete", pytest.param("flow", marks=pytest.mark.slow)])
def test_second_process_does_not_trace(tmp_path, mode):
    """The first process traces the trajectory's program and stores it; the second
    traces none of samflow's programs (only the call of the stored one and a few
    conversions), imports none of diffrax, equinox, optimistix, scipy (JAX's LAPACK
    kernels), matplotlib and the like, and gives the same bytes."""
    first = _child(tmp_path / "cache", mode)
    second = _child(tmp_path / "cache", mode)
    assert first["traced_programs"] == 1 and second["traced_programs"] == 0
    assert second["traces"] < first["traces"] and second["traces"] <= 5, (first, second)
    assert second["unused"] == [], second
    assert second["digest"] == first["digest"] and second["regime"] == first["regime"]


def test_compiled_entries_are_kept_per_machine(store, monkeypatch):
    """A compiled entry is keyed by the processor (samflow.exported.machine): another
    machine's is not read (its code may use instructions this one lacks); this one
    lowers the export, compiles and stores its own beside it."""
    setup = Setup(rule=SAM_L2, mode="discrete", keep=("beta",), padding=False, sharded=False)
    with precision(setup.dtype):
        args = _args(setup, 8, 6)
        want = _bits(exported.runnable(setup, args, lambda: program(setup))(*args))
        monkeypatch.setattr(exported, "machine", lambda: "another processor")
        exported._loaded.clear()
        got = _bits(exported.runnable(setup, args, lambda: pytest.fail("traced"))(*args))
    assert got == want
    assert len(list(store.glob("*" + exported.EXECUTABLE_SUFFIX))) == 2
