"""The Python API: the same Datasets as the command line, sweeps against single
trajectories, summaries against their saved records, validation in the library,
user-defined rules, and the multi-process sweep."""

import os
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest
import xarray as xr

import samflow
from samflow.cli import main
from samflow.precision import precision
from samflow.regimes import COLLAPSE, SEQUENTIAL, SHRINKING, UNRESOLVED, summarize
from samflow.sweeps.axes import parse_axis
from samflow.sweeps.spec import SweepSpec

MU = [1.0, 2.0, 3.0, 4.0]
FLOW = samflow.Flow(tau_max=40.0, save=samflow.LogSpaced(39))
AXES = {"alpha": "0.05:4:7:log", "rho": [0.5, 1.0, 2.0]}


def same_dataset(a: xr.Dataset, b: xr.Dataset) -> None:
    """Identical data, coordinates and attributes, except the ``history`` line."""
    a, b = a.copy(), b.copy()
    for ds in (a, b):
        ds.attrs.pop("history", None)
    xr.testing.assert_identical(a, b)


@pytest.fixture(scope="module")
def flow_map():
    return samflow.sweep("sam-l2", depth=2, mu=MU, axes=AXES, runner=FLOW, save_trajectories=True)


def test_map_matches_single_trajectories_cell_by_cell(flow_map):
    assert set(np.unique(flow_map["regime"].values)) >= {1, 2, 3}
    for alpha in flow_map["alpha"].values:
        for rho in flow_map["rho"].values:
            cell = flow_map.sel(alpha=alpha, rho=rho)
            one = samflow.trajectory("sam-l2", depth=2, mu=MU, alpha=alpha, rho=rho, runner=FLOW)
            assert int(cell["regime"]) == int(one["regime"]), (alpha, rho)
            assert int(cell["limit_coord"]) == int(one["limit_coord"])
            assert int(cell["first_amplified"]) == one.attrs["first_amplified"]
            np.testing.assert_array_equal(cell["dominant"].values, one["dominant"].values)
            np.testing.assert_allclose(cell["beta"].values, one["beta"].values, rtol=1e-9)


def test_handoffs_of_the_sequential_cell(flow_map):
    cell = flow_map.sel(alpha=flow_map["alpha"].values[3], rho=1.0)  # alpha ~ 0.45
    assert int(cell["regime"]) == SEQUENTIAL
    takeover = cell["takeover_tau"].values
    D = cell["dominant"].values
    tau = flow_map["tau"].values
    for j in np.unique(D[D > 0]):  # taken between the record before and the first record led
        k = np.argmax(D == j)
        assert (tau[k - 1] if k else 0) <= takeover[j - 1] <= tau[k]
    seen = np.flatnonzero(~np.isnan(takeover))
    assert np.all(np.diff(seen[np.argsort(takeover[seen])]) > 0)  # minor first, major last
    n = int(cell["n_leaders"])
    assert cell["leader_path"].values[:n].tolist() == [2, 3, 4]
    assert int(cell["n_handoffs"]) == n - 1 >= np.count_nonzero(np.diff(D[D > 0]))


def test_discrete_sweep_matches_single_runs():
    runner = samflow.Discrete(eta=0.05, steps=400, save=samflow.Every(40))
    ds = samflow.sweep(
        "sam-linf",
        depth=2,
        mu=MU,
        axes={"alpha": [0.3, 0.8], "depth": [1, 2, 3]},
        rho=0.5,
        runner=runner,
        save_trajectories=True,
        chunk=4,
    )
    for alpha in (0.3, 0.8):
        for depth in (1, 2, 3):
            cell = ds.sel(alpha=alpha, depth=depth)
            one = samflow.trajectory(
                "sam-linf", depth=depth, mu=MU, alpha=alpha, rho=0.5, runner=runner
            )
            np.testing.assert_allclose(cell["beta"].values, one["beta"].values, rtol=1e-12)
            np.testing.assert_allclose(cell["rescaled_tau"].values, one["tau"].values, rtol=1e-12)
            assert int(cell["regime"]) == int(one["regime"])


def test_summaries_made_in_the_loop_equal_those_of_the_saved_records():
    """The runner reduces each record as it goes; the saved beta, reduced afterwards by
    the same definitions, must give every summary again."""
    ds = samflow.sweep(
        "sam-l2",
        depth=2,
        mu=MU,
        axes={"alpha": "0.05:3:8:log", "rho": [0.5, 1.0]},
        runner=samflow.Discrete(eta=0.05, steps=3000, save=samflow.Every(60)),
        save_trajectories=True,
        chunk=5,
    )
    # Decided sequential and direct runs, and the runs below the collapse edge, collapse:
    # the discrete map's collapse certificate needs h mu_d^2 (1 + (1 + h mu_d) /
    # (2 + h mu_d)) < mu_1 with h = eta / 2, 0.61 < 1 at eta = 0.05
    # (docs/theory/regimes.md#collapse-certificates).
    assert set(np.unique(ds["regime"].values)) >= {COLLAPSE, 2, 3}
    with precision("float64"):
        post = summarize(
            np.moveaxis(ds["beta"].values, (2, 3), (0, 1)),  # [time, coord, alpha, rho]
            np.moveaxis(ds["rescaled_tau"].values, 2, 0),
            np.moveaxis(ds["loss"].values, 2, 0),
            major=4,
        )
    np.testing.assert_array_equal(ds["plateau_end_tau"].values, np.asarray(post["plateau_end_tau"]))
    for name in ("dominant", "beta_norm", "final_direction"):
        np.testing.assert_array_equal(
            ds[name].values, np.moveaxis(np.asarray(post[name]), 0, 2), err_msg=name
        )
    # The loop checks after every step, the records only their own: every leader seen
    # at a record is in the path found between the steps (but not after the fall to the
    # collapse event, where the loop's path is frozen and the records read rounding
    # noise: such a run is collapse where certified, else unresolved and shrinking, its
    # beta hovering far below its start).
    seen = np.moveaxis(np.asarray(post["leader_path"]), 0, -1)
    fell = (ds["regime"].values == COLLAPSE) | (ds["unresolved_reason"].values == SHRINKING)
    for i in np.ndindex(ds["regime"].shape):
        if not fell[i]:
            assert set(seen[i].tolist()) - {0} <= set(ds["leader_path"].values[i].tolist()), i


PHASE = ["phase", "--method", "sam-l2", "--depth", "2", "--mu", "1,2,3,4"]  # rho: an axis


@pytest.mark.parametrize("mode", ["flow", "discrete"])
def test_the_phase_file_is_the_sweep_dataset(tmp_path, mode):
    if mode == "flow":
        args, runner = (
            ["--mode", "flow", "--tau-max", "30", "--n-save", "30"],
            samflow.Flow(tau_max=30, save=samflow.LogSpaced(29)),
        )
    else:
        args = ["--mode", "discrete", "--eta", "0.05", "--steps", "300", "--record-every", "30"]
        runner = samflow.Discrete(eta=0.05, steps=300, save=samflow.Every(30))
    out = tmp_path / "p.nc"
    grid = ["--axis", "alpha=0.1:2:4:log", "--axis", "rho=0.5,1", "--save-trajectories", "-q"]
    assert main([*PHASE, *args, *grid, "--out", str(out)]) == 0
    axes = {"alpha": "0.1:2:4:log", "rho": [0.5, 1.0]}
    mine = samflow.sweep("sam-l2", depth=2, mu=MU, axes=axes, runner=runner, save_trajectories=True)
    same_dataset(xr.load_dataset(out), mine)
    assert not list(tmp_path.glob("*.work"))  # in memory: nothing written
    on_disk = samflow.sweep(
        "sam-l2", depth=2, mu=MU, axes=axes, runner=runner, save_trajectories=True,
        out=tmp_path / "api.nc",
    )  # fmt: skip
    same_dataset(on_disk, mine)
    same_dataset(xr.load_dataset(tmp_path / "api.nc"), xr.load_dataset(out))


@pytest.mark.parametrize(
    "args, kwargs",
    [
        (
            ["--mode", "discrete", "--eta", "0.05", "--steps", "500", "--alpha", "0.3"],
            dict(alpha=0.3, runner=samflow.Discrete(eta=0.05, steps=500)),
        ),
        (
            [
                "--mode",
                "flow",
                "--tau-max",
                "20",
                "--n-save",
                "25",
                "--alpha-per-coord",
                "0.1,0.2,0.3,0.4",
            ],
            dict(
                alpha_per_coord=[0.1, 0.2, 0.3, 0.4],
                runner=samflow.Flow(tau_max=20, save=samflow.LogSpaced(24)),
            ),
        ),
    ],
)
def test_the_trajectory_file_is_the_trajectory_dataset(tmp_path, args, kwargs):
    out = tmp_path / "t.nc"
    argv = ["trajectory", "--method", "sam-l2", "--depth", "2", "--mu", "1,2,3,4"]
    assert main([*argv, "--rho", "1", *args, "--save-theta", "-q", "--out", str(out)]) == 0
    mine = samflow.trajectory("sam-l2", depth=2, mu=MU, rho=1.0, save_theta=True, **kwargs)
    same_dataset(xr.load_dataset(out), mine)


@pytest.mark.parametrize(
    "call, needle",
    [
        (lambda: samflow.trajectory("sam-l2", depth=2, mu=MU, alpha=0.5, runner=FLOW), "needs rho"),
        (lambda: samflow.trajectory("sam-l2", depth=2, alpha=0.5, rho=1, runner=FLOW), "mu"),
        (
            lambda: samflow.trajectory(
                "gd", depth=2, mu=MU, alpha_per_coord=[0.1, 0.2], runner=FLOW
            ),
            "alpha",
        ),
        (
            lambda: samflow.trajectory("gd", depth=2, mu=MU, theta0=np.ones((2, 3)), runner=FLOW),
            "theta0",
        ),
        (lambda: samflow.trajectory("gd", depth=0, mu=MU, alpha=1, runner=FLOW), "depth"),
        (lambda: samflow.trajectory("sam", depth=2, mu=MU, alpha=1, runner=FLOW), "unknown"),
        (lambda: samflow.trajectory("gd", depth=2, mu=MU, alpha=0.0, runner=FLOW), "alpha"),
        (lambda: samflow.trajectory("gd", depth=2, mu=MU, alpha=1, runner="flow"), "runner"),
        (
            lambda: samflow.sweep("sam-l2", depth=2, mu=MU, axes={"alpha": [1, 2]}, runner=FLOW),
            "needs rho",
        ),
        (lambda: samflow.sweep("gd", depth=2, mu=MU, axes={}, runner=FLOW), "axes"),
        (lambda: samflow.sweep("gd", depth=2, axes=AXES, runner=FLOW), "mu"),
        (
            lambda: samflow.sweep("gd", depth=2, mu=MU, axes={"alpha_7": [1, 2]}, runner=FLOW),
            "1..4",
        ),
        (
            lambda: samflow.sweep(
                "gd", depth=2, mu=MU, axes={"alpha": [1, 2]}, alpha=1.0, runner=FLOW
            ),
            "both",
        ),
        (
            lambda: samflow.sweep(
                "gd", depth=2, mu=MU, axes={"mu": [0, 1]}, mu_set=np.ones((2, 3)), runner=FLOW
            ),
            "mu",
        ),
    ],
)
def test_the_library_validates(call, needle):
    with pytest.raises(samflow.InputError, match=needle) as err:
        call()
    assert "\n" not in str(err.value)


def test_the_size_guard_refuses_oversized_trajectories():
    axes = (parse_axis("alpha=0.1:1:10:log", 4), parse_axis("rho=0.1:1:30:log", 4))
    spec = SweepSpec(
        rule=samflow.SAM_L2, runner=FLOW, depth=2, axes=axes, mu=tuple(MU), save_trajectories=True
    )
    # 300 points x (14 summaries + 2 d + 200 records x (4 timelines + d of beta)) x 8 bytes,
    # held 3 times at the peak
    need = 300 * (14 + 2 * 4 + FLOW.n_records() * (4 + 4)) * 8 * 3
    assert spec.bytes_needed() == need
    spec.check_size(limit_bytes=need)
    with pytest.raises(samflow.InputError, match=r"10 x 30 points .* would need"):
        spec.check_size(limit_bytes=need - 1)


def _half_l2(g, batch_ndim=0):
    """A user's rule, written against the public API only: half the l2 ascent step."""
    return jax.tree_util.tree_map(lambda e: 0.5 * e, samflow.SAM_L2.direction(g, batch_ndim))


HALF = samflow.PerturbationRule("half-l2", _half_l2, scale_invariant=True)


@pytest.mark.parametrize("runner", [FLOW, samflow.Discrete(eta=0.05, steps=400)])
def test_a_user_rule_runs_everywhere(runner):
    """half-l2 at rho equals sam-l2 at rho / 2, in a trajectory and in a sweep. (The flow
    runner is the file's: sam-l2's trajectory is the program of the map's cells.)"""
    mine = samflow.trajectory("sam-l2", depth=2, mu=MU, alpha=0.4, rho=1.0, runner=runner)
    theirs = samflow.trajectory(HALF, depth=2, mu=MU, alpha=0.4, rho=2.0, runner=runner)
    assert theirs.attrs["method"] == "half-l2"
    if runner.mode == "flow":  # no closed form: the generic field in theta space
        assert theirs.attrs["flow_formulation"] == "linear"
    np.testing.assert_allclose(theirs["beta"].values, mine["beta"].values, rtol=1e-6)
    # A rule of yours declares no certificate of its limit
    # (docs/theory/regimes.md#labels-of-the-limit): its run is labelled where an event decides it,
    # else unresolved, with the same path.
    assert int(theirs["regime"]) in (int(mine["regime"]), UNRESOLVED)
    np.testing.assert_array_equal(theirs["leader_path"].values, mine["leader_path"].values)
    axes = {"alpha": [0.2, 0.6, 1.5]}
    a = samflow.sweep(HALF, depth=2, mu=MU, axes={**axes, "rho": [1.0, 2.0]}, runner=runner)
    b = samflow.sweep("sam-l2", depth=2, mu=MU, axes={**axes, "rho": [0.5, 1.0]}, runner=runner)
    decided = a["regime"].values != UNRESOLVED
    np.testing.assert_array_equal(a["regime"].values[decided], b["regime"].values[decided])
    np.testing.assert_array_equal(a["stop_leader"].values, b["stop_leader"].values)
    # Where both are decided: a collapse of sam-l2 is certified (beta is 0 after it, so is
    # its direction), while the rule of yours stops at the collapse event unresolved, its
    # records ending at a beta e^-16 of its start (docs/theory/flows.md#stopping-events).
    np.testing.assert_allclose(
        a["final_direction"].values[decided], b["final_direction"].values[decided], atol=1e-6
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("localhost", 0))
        return sock.getsockname()[1]


def test_two_processes_equal_one(tmp_path):
    """The multi-host path: two CPU processes (gloo) run one sweep together."""
    args = [
        *PHASE,
        *("--axis", "alpha=0.05:4:7:log", "--axis", "rho=0.5,1", "--mode", "discrete"),
        *("--eta", "0.05", "--steps", "300", "--record-every", "30", "--chunk", "4", "-q"),
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
