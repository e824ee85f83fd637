"""Every kind of file against its schema (samflow/schema.py), made through the command
line as a user would; the Python API's in-memory Datasets equal the written files."""

import numpy as np
import pytest
import xarray as xr
from runs import write_mnist_test_split

import samflow
from samflow.cli import main
from samflow.schema import BOUNDARY, IMAGES, SCHEMAS, SWEEP, TRAJECTORY

MU = [1.0, 2.0, 3.0]
DATA_X = np.array([[1.0, 2.0, 0.5], [-0.5, 1.0, 2.0], [2.0, -1.0, 1.0]])
DATA_Y = np.array([1.0, -1.0, 1.0])
DISCRETE = ["--mode", "discrete", "--eta", "0.05", "--steps", "40", "--record-every", "10"]
FLOW = ["--mode", "flow", "--tau-max", "2", "--n-save", "6"]


def _write(tmp_path, argv: list[str]) -> xr.Dataset:
    out = tmp_path / f"{argv[0]}.nc"
    assert main([*argv, "-q", "--out", str(out)]) == 0
    ds = xr.load_dataset(out)
    out.unlink()
    return ds


def _conforms(ds: xr.Dataset, kind: str) -> None:
    assert SCHEMAS[kind].check(ds) == [], kind
    # CF: every variable and coordinate is named and has units; the file says who made it.
    for name, var in ds.variables.items():
        assert var.attrs["long_name"] and var.attrs["units"], name
    assert ds.attrs["Conventions"] == "CF-1.10"
    for lib in ("samflow", "jax", "diffrax", "equinox", "optax", "numpy", "xarray"):
        assert ds.attrs[f"{lib}_version"], lib


def _same(written: xr.Dataset, in_memory: xr.Dataset) -> None:
    """The same data, coordinates, dtypes and attributes (but the ``history`` line)."""
    a, b = written.copy(), in_memory.copy()
    for ds in (a, b):
        ds.attrs.pop("history")
    xr.testing.assert_identical(a, b)
    for name in a.variables:
        assert a[name].dtype == b[name].dtype, name


@pytest.fixture
def data_file(tmp_path):
    path = tmp_path / "data.npz"
    np.savez(path, X=DATA_X, y=DATA_Y)
    return path


def test_trajectory_files(tmp_path, data_file):
    argv = ["trajectory", "--method", "sam-l2", "--depth", "2", "--mu", "1,2,3", "--rho", "0.5"]
    ds = _write(tmp_path, [*argv, "--alpha", "0.5", *DISCRETE, "--save-theta"])
    _conforms(ds, "trajectory")
    assert ds["tau"].attrs["long_name"] == "rescaled time"
    mine = samflow.trajectory(
        "sam-l2",
        depth=2,
        mu=MU,
        rho=0.5,
        alpha=0.5,
        runner=samflow.Discrete(eta=0.05, steps=40, save=samflow.Every(10)),
        save_theta=True,
    )
    _same(ds, mine)

    # n > 1 points in float32: tau is the plain time eta * steps, floats are float32
    argv = ["trajectory", "--method", "gd", "--depth", "3", "--data", str(data_file)]
    ds = _write(tmp_path, [*argv, "--alpha", "0.3", *FLOW, "--dtype", "float32"])
    _conforms(ds, "trajectory")
    assert ds["beta"].dtype == np.float32 and ds["tau"].attrs["long_name"] == "time eta * steps"
    mine = samflow.trajectory(
        "gd",
        depth=3,
        data=(DATA_X, DATA_Y),
        alpha=0.3,
        runner=samflow.Flow(tau_max=2.0, save=samflow.LogSpaced(5)),
        dtype="float32",
    )
    _same(ds, mine)


def test_sweep_files(tmp_path, data_file):
    # n > 1 points: rescaled_tau is the plain time eta * steps, as a trajectory's tau says
    argv = ["phase", "--method", "sam-l2", "--depth", "2", "--data", str(data_file)]
    grid = ["--axis", "alpha_2=0.5,1", "--axis", "depth=2,3", "--rho", "0.5"]
    ds = _write(tmp_path, [*argv, *grid, *DISCRETE, "--save-trajectories", "--dtype", "float32"])
    _conforms(ds, "sweep")
    assert ds["regime"].dims == ("alpha_2", "depth") and ds["beta"].dtype == np.float32
    assert ds["rescaled_tau"].attrs["long_name"] == "time eta * steps of each record"
    mine = samflow.sweep(
        "sam-l2",
        depth=2,
        data=(DATA_X, DATA_Y),
        rho=0.5,
        axes={"alpha_2": [0.5, 1.0], "depth": [2, 3]},
        runner=samflow.Discrete(eta=0.05, steps=40, save=samflow.Every(10)),
        save_trajectories=True,
        dtype="float32",
    )
    _same(ds, mine)

    mu_file = tmp_path / "mu.npy"
    np.save(mu_file, np.array([MU, [2.0, 1.0, 3.0]]))
    argv = ["phase", "--method", "sam-l2", "--depth", "2", "--mu", "1,2,3", "--rho", "0.5"]
    grid = ["--axis", "seed=0,1", "--axis", "mu=0,1", "--mu-file", str(mu_file)]
    ds = _write(tmp_path, [*argv, *grid, *FLOW])
    _conforms(ds, "sweep")
    assert {"seed_alpha", "mu_values", "tau", "stop_tau"} <= set(ds.variables)


def test_boundary_file(tmp_path):
    argv = ["boundary", "--method", "sam-l2", "--depth", "2", "--mu", "1,2,3", *DISCRETE]
    ds = _write(tmp_path, [*argv, "--axis", "rho=0.5,1", "--rtol-alpha", "0.1"])
    _conforms(ds, "boundary")
    assert ds["alpha_direct"].dims == ("rho",)


def _mnist(folder):
    """A 12x12 stand-in for the MNIST test split: dark background, a bright blob."""
    rng = np.random.default_rng(0)
    labels = np.where(np.arange(40) % 2 == 0, 3, 8).astype(np.uint8)
    images = np.zeros((40, 12, 12), np.uint8)
    for i, label in enumerate(labels):
        r = 2 if label == 3 else 6
        images[i, r : r + 4, r : r + 4] = rng.integers(150, 256, size=(4, 4))
    return write_mnist_test_split(folder, images, labels)


@pytest.mark.parametrize(
    "extra, dims",
    [
        (["--method", "gd,sam-l2", "--alpha", "0.5,1"], ("alpha", "optimizer", "seed")),
        (["--method", "sam-l2"], ("seed",)),
    ],
)
def test_image_files(tmp_path, extra, dims):
    argv = [
        "cnn", "--data-dir", str(_mnist(tmp_path / "mnist")), "--model", "diagonal",
        "--steps", "2", "--record-every", "1", "--batch", "0", "--seeds", "2",
        "--examples", "2", *extra,
    ]  # fmt: skip
    ds = _write(tmp_path, argv)
    _conforms(ds, "images")
    assert ds["background_share"].dims == dims
    assert ds["seconds"].attrs["units"] == "s"
    assert ds.attrs["history"].split(": ", 1)[1].startswith("samflow cnn --data-dir")


def test_check_finds_each_kind_of_departure():
    """The check is not vacuous: a file that departs from its schema is reported."""
    ds = TRAJECTORY.dataset(
        {"time": np.arange(3), "coord": [1, 2], "loss": np.ones(3)},
        attrs={"method": "gd", "dtype": "float64"},
    )
    missing = ("regime", "limit_coord", "unresolved_reason", "stop_leader", "dominant")
    missing += ("layer", "tau", "beta", "theta_final")
    missing += ("reached", "theta0", "handoff", "leader_path", "handoff_tau", "n_leaders")
    missing_attrs = ("mode", "collapse_factor", "regime_meaning", "first_amplified")
    missing_attrs += ("underflow_at_start",)
    assert sorted(TRAJECTORY.check(ds)) == sorted(
        [f"{name}: declared for every trajectory file, missing" for name in missing]
        + [
            f"attribute {name}: declared for every trajectory file, missing"
            for name in missing_attrs
        ]
    )
    bad = ds.copy()
    bad["loss"] = bad["loss"].astype(np.float32)
    bad["loss"].attrs.update(units="s")
    bad["time"].attrs.pop("long_name")
    bad.attrs["colour"] = "blue"
    found = TRAJECTORY.check(bad)
    assert "loss: dtype float32, declared float64" in found
    assert "loss: units 's', declared '1'" in found
    assert "time: long_name None, declared 'record index'" in found
    assert "attribute colour: not declared" in found
    transposed = SWEEP.dataset(
        {"alpha": [0.5, 1.0], "time": [0, 1], "loss": np.ones((2, 2))},
        grid=("alpha",),
        attrs={"axes": "alpha"},
    ).transpose("time", "alpha")
    assert "loss: dims ('time', 'alpha'), declared ('alpha', 'time')" in SWEEP.check(transposed)


def test_undeclared_names_are_refused_when_a_file_is_made():
    with pytest.raises(ValueError, match="'speed' is not declared in the boundary file schema"):
        BOUNDARY.dataset({"speed": np.ones(2)}, grid=("rho",))
    with pytest.raises(ValueError, match="attribute 'colour' is not declared"):
        IMAGES.dataset({"seconds": 1.0}, attrs={"colour": "blue"})


def test_patterned_and_optional_dims():
    assert SWEEP.dims("alpha_3") == ("alpha_3",)
    assert SWEEP.variable("alpha_3")[0].long_name == "initialisation scale of coordinate {j}"
    assert SWEEP.dims("takeover_tau", grid=("rho", "depth")) == ("rho", "depth", "coord")
    assert IMAGES.dims("loss", present=("optimizer", "seed", "record")) == (
        "optimizer",
        "seed",
        "record",
    )
