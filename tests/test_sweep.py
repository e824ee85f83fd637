"""Sweeps: agreement with single trajectories, resume, sharding, size guard, CLI errors."""

import os
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import xarray as xr

from samflow.cli import main
from samflow.errors import InputError
from samflow.init import balanced
from samflow.model import single_point
from samflow.precision import precision
from samflow.regimes import summarize
from samflow.sweep import STOP_AFTER_ENV, SweepSpec, parse_axis, run_sweep
from samflow.trajectory import trajectory

MU = (1.0, 2.0, 3.0, 4.0)


def flow_spec(**kw):
    base = dict(
        method="sam-l2",
        mode="flow",
        depth=2,
        axes=(parse_axis("alpha=0.05:4:7:log"), parse_axis("rho=0.5,1,2")),
        rho=1.0,
        mu=MU,
        tau_max=40.0,
        n_save=40,
        save_trajectories=True,
    )
    base.update(kw)
    return SweepSpec(**base)


@pytest.fixture(scope="module")
def flow_map(tmp_path_factory):
    return run_sweep(flow_spec(), tmp_path_factory.mktemp("s") / "map.nc", chunk=8, progress=False)


def single(spec, alpha, rho):
    return trajectory(
        single_point(MU),
        balanced(alpha, 4, spec.depth),
        spec.depth,
        spec.method,
        rho,
        spec.mode,
        eta=spec.eta,
        steps=spec.steps,
        record_every=spec.record_every,
        tau_max=spec.tau_max,
        n_save=spec.n_save,
        flow_options={"rtol": spec.rtol, "atol": spec.atol, "max_steps": spec.max_steps},
    )


def test_map_matches_single_trajectories_cell_by_cell(flow_map):
    spec = flow_spec()
    assert set(np.unique(flow_map["regime"].values)) >= {1, 2, 3}
    for alpha in flow_map["alpha"].values:
        for rho in flow_map["rho"].values:
            cell = flow_map.sel(alpha=alpha, rho=rho)
            one = single(spec, alpha, rho)
            assert int(cell["regime"]) == one.attrs["regime"], (alpha, rho)
            assert int(cell["limit_coord"]) == one.attrs["limit_coord"]
            assert int(cell["first_amplified"]) == one.attrs["first_amplified"]
            np.testing.assert_array_equal(cell["dominant"].values, one["dominant"].values)
            np.testing.assert_allclose(cell["beta"].values, one["beta"].values, rtol=1e-9)


def test_handoffs_of_the_sequential_cell(flow_map):
    cell = flow_map.sel(alpha=flow_map["alpha"].values[3], rho=1.0)  # alpha ~ 0.45
    assert int(cell["regime"]) == 2
    takeover = cell["takeover_tau"].values
    D = cell["dominant"].values
    tau = flow_map["tau"].values
    for j in np.unique(D[D > 0]):
        assert takeover[j - 1] == tau[np.argmax(D == j)]
    order = np.argsort(takeover[~np.isnan(takeover)])
    assert np.all(np.diff(np.flatnonzero(~np.isnan(takeover))[order]) > 0)  # minor first
    assert int(cell["n_handoffs"]) == np.count_nonzero(np.diff(D[1:]))


def test_discrete_sweep_matches_single_runs(tmp_path):
    spec = SweepSpec(
        method="sam-linf",
        mode="discrete",
        depth=2,
        axes=(parse_axis("alpha=0.3,0.8"), parse_axis("depth=1,2,3")),
        rho=0.5,
        mu=MU,
        eta=0.05,
        steps=400,
        record_every=40,
        save_trajectories=True,
    )
    ds = run_sweep(spec, tmp_path / "d.nc", chunk=4, progress=False)
    for alpha in (0.3, 0.8):
        for depth in (1, 2, 3):
            cell = ds.sel(alpha=alpha, depth=depth)
            one = single(SweepSpec(**{**spec.__dict__, "depth": depth}), alpha, 0.5)
            np.testing.assert_allclose(cell["beta"].values, one["beta"].values, rtol=1e-12)
            np.testing.assert_allclose(cell["rescaled_tau"].values, one["tau"].values, rtol=1e-12)
            assert int(cell["regime"]) == one.attrs["regime"]


def test_discrete_summaries_made_in_the_loop_equal_those_of_the_saved_records(tmp_path):
    """The runner reduces each record as it goes; the saved beta, reduced afterwards by
    the same definitions, must give every summary again."""
    spec = SweepSpec(
        method="sam-l2",
        mode="discrete",
        depth=2,
        axes=(parse_axis("alpha=0.05:3:8:log"), parse_axis("rho=0.5,1")),
        mu=MU,
        eta=0.05,
        steps=3000,
        record_every=60,
        save_trajectories=True,
    )
    ds = run_sweep(spec, tmp_path / "d.nc", chunk=5, progress=False)
    assert set(np.unique(ds["regime"].values)) >= {1, 2, 3}
    with precision("float64"):
        post = summarize(
            np.moveaxis(ds["beta"].values, (2, 3), (0, 1)),  # [time, coord, alpha, rho]
            np.moveaxis(ds["rescaled_tau"].values, 2, 0),
            np.moveaxis(ds["loss"].values, 2, 0),
        )
    for name in ("regime", "limit_coord", "first_amplified", "n_handoffs", "plateau_end_tau"):
        np.testing.assert_array_equal(ds[name].values, np.asarray(post[name]), err_msg=name)
    for name in ("dominant", "beta_norm", "final_direction", "takeover_tau"):
        np.testing.assert_array_equal(
            ds[name].values, np.moveaxis(np.asarray(post[name]), 0, 2), err_msg=name
        )


def test_interrupted_sweep_resumes_to_the_same_file(tmp_path, monkeypatch):
    spec = flow_spec(save_trajectories=False, n_save=20)
    whole = tmp_path / "whole.nc"
    run_sweep(spec, whole, chunk=3, progress=False)
    part = tmp_path / "part.nc"
    monkeypatch.setenv(STOP_AFTER_ENV, "2")
    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec, part, chunk=3, progress=False)
    work = tmp_path / "part.nc.work"
    assert len(list(work.glob("chunk_*.nc"))) == 2 and not part.exists()
    monkeypatch.setenv(STOP_AFTER_ENV, "3")
    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec, part, chunk=3, progress=False)
    assert len(list(work.glob("chunk_*.nc"))) == 5
    monkeypatch.delenv(STOP_AFTER_ENV)
    run_sweep(spec, part, chunk=3, progress=False)
    assert not work.exists()
    xr.testing.assert_identical(xr.load_dataset(whole), xr.load_dataset(part))
    assert whole.read_bytes() == part.read_bytes()


def test_resume_refuses_a_different_sweep(tmp_path, monkeypatch):
    monkeypatch.setenv(STOP_AFTER_ENV, "1")
    with pytest.raises(KeyboardInterrupt):
        run_sweep(flow_spec(n_save=20), tmp_path / "x.nc", chunk=3, progress=False)
    monkeypatch.delenv(STOP_AFTER_ENV)
    with pytest.raises(InputError, match="different sweep"):
        run_sweep(flow_spec(n_save=21), tmp_path / "x.nc", chunk=3, progress=False)


def test_four_host_devices_equal_one(tmp_path):
    script = textwrap.dedent(
        f"""
        import sys, jax
        from samflow.sweep import SweepSpec, parse_axis, run_sweep
        spec = SweepSpec(method="sam-l2", mode="discrete", depth=2, rho=1.0, mu={MU!r},
                         axes=(parse_axis("alpha=0.05:4:9:log"), parse_axis("rho=0.5,1,2")),
                         steps=300, record_every=30, save_trajectories=True)
        run_sweep(spec, sys.argv[1], chunk=8, progress=False)
        print(len(jax.devices()))
        """
    )
    outs = {}
    for n in (1, 4):
        env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={n}")
        path = tmp_path / f"dev{n}.nc"
        proc = subprocess.run(
            [sys.executable, "-c", script, str(path)], env=env, capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip().splitlines()[-1] == str(n)
        outs[n] = xr.load_dataset(path)
    for name in outs[1].data_vars:
        np.testing.assert_array_equal(outs[1][name].values, outs[4][name].values, err_msg=name)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("localhost", 0))
        return sock.getsockname()[1]


def test_two_processes_equal_one(tmp_path):
    """The multi-host path: two CPU processes (gloo) run one sweep together."""
    args = [
        *("phase", "--method", "sam-l2", "--depth", "2", "--mu", "1,2,3,4", "--rho", "1"),
        *("--axis", "alpha=0.05:4:7:log", "--axis", "rho=0.5,1", "--eta", "0.05"),
        *("--steps", "300", "--record-every", "30", "--chunk", "4"),
    ]
    command = [sys.executable, "-m", "samflow.cli", *args]
    env = dict(
        os.environ,
        SAMFLOW_DISTRIBUTED="1",
        JAX_COORDINATOR_ADDRESS=f"localhost:{_free_port()}",
        SAMFLOW_NUM_PROCESSES="2",
        JAX_NUM_CPU_DEVICES="1",  # one device per process: light enough beside other tests
    )
    env.pop("XLA_FLAGS", None)
    logs = [tmp_path / f"process{i}.log" for i in range(2)]
    procs = []
    for i, log in enumerate(logs):
        with log.open("w") as sink:  # a file, not a pipe: a full pipe would stall a process
            procs.append(
                subprocess.Popen(
                    [*command, "--out", str(tmp_path / "two.nc")],
                    env={**env, "SAMFLOW_PROCESS_ID": str(i)},
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                )
            )
    codes = [proc.wait(timeout=300) for proc in procs]
    assert codes == [0, 0], "\n".join(f"{log.name}:\n{log.read_text()}" for log in logs)
    assert not (tmp_path / "two.nc.work").exists()
    one = subprocess.run(
        [*command, "--out", str(tmp_path / "one.nc")], capture_output=True, text=True
    )
    assert one.returncode == 0, one.stderr
    two, one = xr.load_dataset(tmp_path / "two.nc"), xr.load_dataset(tmp_path / "one.nc")
    xr.testing.assert_identical(two.drop_attrs(), one.drop_attrs())


def test_size_guard_refuses_oversized_trajectories(tmp_path):
    spec = flow_spec(axes=(parse_axis("alpha=0.1:1:1000:log"), parse_axis("rho=0.1:1:1000:log")))
    with pytest.raises(InputError, match="save-trajectories would need"):
        run_sweep(spec, tmp_path / "big.nc", progress=False, size_limit_bytes=2**30)


BASE = ["phase", "--method", "sam-l2", "--depth", "2", "--mu", "1,2,3,4", "--rho", "1"]


@pytest.mark.parametrize(
    "axes, needle",
    [
        (["alpha"], "bad axis"),
        (["alpha=1:2"], "START:STOP:NUM"),
        (["alpha=1:2:3:cubic"], "START:STOP:NUM"),
        (["alpha=a,b"], "numbers"),
        (["alpha=0:1:5:log"], "positive"),
        (["alpha=-1:1:5:log"], "positive"),
        (["alpha=1:2:0"], "NUM"),
        (["alpha="], "empty"),
        (["beta=1,2"], "unknown axis"),
        (["alpha_7=1,2"], "1..4"),
        (["alpha=1,2", "alpha=3,4"], "twice"),
        (["alpha=0,1"], "> 0"),
        (["rho=-1,1"], "rho"),
        (["depth=0,1"], "depth"),
        (["depth=1.5,2"], "integers"),
        (["alpha=1,1"], "repeats"),
        (["alpha=1,nan"], "NaN"),
    ],
)
def test_bad_axes_exit_2_with_one_line(tmp_path, capsys, axes, needle):
    args = [*BASE]
    for a in axes:
        args += ["--axis", a]
    status = main([*args, "--out", str(tmp_path / "o.nc")])
    err = capsys.readouterr().err.strip()
    assert status == 2 and err.startswith("samflow: error:") and "\n" not in err
    assert needle in err, err


def test_phase_cli_writes_the_contract(tmp_path, capsys):
    out = tmp_path / "p.nc"
    args = [*BASE, "--mode", "discrete", "--steps", "200", "--record-every", "50"]
    args += ["--axis", "alpha=0.1:2:3:log", "--axis", "rho=0.5,1", "--no-progress"]
    assert main([*args, "--out", str(out), "--figure", str(tmp_path / "p.png")]) == 0
    ds = xr.open_dataset(out)
    assert ds["regime"].dims == ("alpha", "rho") and ds["regime"].dtype == np.int8
    assert ds["regime"].attrs["flag_meanings"] == "failed unresolved collapse sequential direct"
    np.testing.assert_array_equal(ds["regime"].attrs["flag_values"], [-1, 0, 1, 2, 3])
    assert ds["dominant"].dims == ("alpha", "rho", "time")
    assert ds["final_direction"].dims == ("alpha", "rho", "coord")
    assert ds["step"].values.tolist() == [0, 50, 100, 150, 200]
    for name in ("limit_coord", "first_amplified", "beta_norm", "loss"):
        assert name in ds
    assert (tmp_path / "p.png").exists()
