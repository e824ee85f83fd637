"""The trajectory command: output contract and every bad-input case."""

import subprocess
import sys

import numpy as np
import pytest
import xarray as xr

from samflow.cli import main

BASE = ["trajectory", "--depth", "2", "--mu", "1,2,3,4", "--alpha", "0.5"]


def run_cli(args, capsys):
    status = main(args)
    err = capsys.readouterr().err.strip()
    return status, err


def test_discrete_output_contract(tmp_path, capsys):
    out = tmp_path / "t.nc"
    args = [*BASE, "--method", "sam-l2", "--rho", "1", "--steps", "300", "--record-every", "50"]
    status, _ = run_cli(
        [*args, "--out", str(out), "--save-theta", "--figure", str(tmp_path / "f.png")], capsys
    )
    assert status == 0
    ds = xr.open_dataset(out)
    assert ds["beta"].dims == ("time", "coord")
    assert ds["theta"].dims == ("time", "layer", "coord")
    assert ds["theta_final"].dims == ("layer", "coord")
    assert ds["coord"].values.tolist() == [1, 2, 3, 4]
    assert ds["layer"].values.tolist() == [1, 2]
    assert ds["step"].values.tolist() == [0, 50, 100, 150, 200, 250, 300]
    assert ds["tau"].values[0] == 0 and np.all(np.diff(ds["tau"].values) > 0)
    np.testing.assert_allclose(ds["beta"].values[0], 0.25)
    for key in (
        "method",
        "depth",
        "rho",
        "eta",
        "mode",
        "dtype",
        "samflow_version",
        "history",
        "Conventions",
        "regime_meaning",
    ):
        assert key in ds.attrs, key
    assert ds["regime"].attrs["flag_meanings"].split()[0] == "failed"
    assert (
        ds.attrs["history"].endswith(" ".join(args[:3]))
        or "samflow trajectory" in ds.attrs["history"]
    )
    for name in ds.variables:
        assert "units" in ds[name].attrs and "long_name" in ds[name].attrs, name
    assert (tmp_path / "f.png").stat().st_size > 10_000


def test_flow_float32_mode(tmp_path, capsys):
    out = tmp_path / "f.nc"
    args = [
        *BASE,
        "--method",
        "gd",
        "--mode",
        "flow",
        "--tau-max",
        "3",
        "--n-save",
        "20",
        "--dtype",
        "float32",
        "--out",
        str(out),
    ]
    assert run_cli(args, capsys)[0] == 0
    ds = xr.open_dataset(out)
    assert "step" not in ds.coords and ds["beta"].dtype == np.float32
    assert ds.attrs["regime_meaning"] == "direct"


def _npz(path, **arrays):
    np.savez(path, **arrays)
    return str(path)


def bad_cases(tmp):
    good_X, good_y = np.array([[1.0, 2.0], [2.0, 1.0]]), np.array([1.0, -1.0])
    nan_theta = tmp / "nan.npy"
    np.save(nan_theta, np.array([[0.5, np.nan, 0.5, 0.5]] * 2))
    wrong_d = tmp / "wrongd.npy"
    np.save(wrong_d, np.full((2, 3), 0.5))
    corrupt = tmp / "corrupt.npz"
    corrupt.write_bytes(b"not a zip file")
    sam = ["--method", "sam-l2", "--rho", "1"]
    mu = ["--depth", "2", "--mu", "1,2,3,4"]
    data = ["--method", "gd", "--depth", "2", "--alpha", "0.5", "--data"]
    return {
        "unknown method": (["--method", "adam", *mu, "--alpha", "1"], "adam"),
        "depth < 1": (["--method", "gd", "--depth", "0", "--mu", "1,2", "--alpha", "1"], "depth"),
        "negative rho": (["--method", "sam-l2", "--rho", "-1", *mu, "--alpha", "1"], "rho"),
        "missing rho": (["--method", "sam-linf", *mu, "--alpha", "1"], "rho"),
        "zero eta": ([*sam, *mu, "--alpha", "1", "--eta", "0"], "eta"),
        "zero alpha": ([*sam, *mu, "--alpha", "0"], "alpha"),
        "negative alpha_j": ([*sam, *mu, "--alpha-per-coord", "1,-1,1,1"], "alpha"),
        "non-positive mu": ([*sam, "--depth", "2", "--mu", "1,0,3", "--alpha", "1"], "mu"),
        "alpha_j count": ([*sam, *mu, "--alpha-per-coord", "1,1,1"], "d = 4"),
        "theta0 d": ([*sam, *mu, "--theta0", str(wrong_d)], "d"),
        "theta0 NaN": ([*sam, *mu, "--theta0", str(nan_theta)], "NaN"),
        "theta0 missing": ([*sam, *mu, "--theta0", str(tmp / "none.npy")], "not found"),
        "NaN mu": ([*sam, "--depth", "2", "--mu", "1,nan", "--alpha", "1"], "NaN"),
        "inf rho": (["--method", "sam-l2", "--rho", "inf", *mu, "--alpha", "1"], "rho"),
        "NaN alpha": ([*sam, *mu, "--alpha", "nan"], "alpha"),
        "data missing": ([*data, str(tmp / "none.npz")], "not found"),
        "data corrupt": ([*data, str(corrupt)], "cannot read"),
        "data lacks y": ([*data, _npz(tmp / "noy.npz", X=good_X)], "lacks"),
        "data shapes": ([*data, _npz(tmp / "shape.npz", X=good_X, y=np.ones(3))], "shape"),
        "data labels": ([*data, _npz(tmp / "lab.npz", X=good_X, y=np.array([1.0, 0.0]))], "labels"),
        "data NaN": ([*data, _npz(tmp / "nan.npz", X=good_X * np.nan, y=good_y)], "NaN"),
        "data d vs theta0": (
            [
                "--method",
                "gd",
                "--depth",
                "2",
                "--theta0",
                str(wrong_d),
                "--data",
                _npz(tmp / "ok.npz", X=good_X, y=good_y),
            ],
            "d",
        ),
    }


def test_every_bad_input_exits_2_with_one_line(tmp_path, capsys):
    for name, (args, needle) in bad_cases(tmp_path).items():
        status, err = run_cli(["trajectory", *args, "--out", str(tmp_path / "o.nc")], capsys)
        assert status == 2, name
        assert err.startswith("samflow: error:") and "\n" not in err, (name, err)
        assert needle.lower() in err.lower(), (name, err)
    assert not (tmp_path / "o.nc").exists()


@pytest.mark.parametrize("args", [["--method", "adam"], ["--mu", "1,-2"]])
def test_subprocess_has_no_traceback(tmp_path, args):
    full = [
        "trajectory",
        "--method",
        "gd",
        "--depth",
        "2",
        "--mu",
        "1,2",
        "--alpha",
        "1",
        "--out",
        str(tmp_path / "o.nc"),
    ]
    for i in range(0, len(args), 2):
        full[full.index(args[i]) + 1] = args[i + 1]
    proc = subprocess.run(
        [sys.executable, "-m", "samflow.cli", *full], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_demo_runs_and_names_each_regime(tmp_path, capsys):
    """`samflow demo`, the built-in default problem: l2-SAM and GD at the three alphas,
    each file written, l2-SAM landing in the regime it stands for, and the figure."""
    from samflow.commands.demo import DEMO_ALPHAS

    status, err = run_cli(["demo", "--out", str(tmp_path), "-q"], capsys)
    assert status == 0, err
    for name, alpha in DEMO_ALPHAS.items():
        sam = xr.load_dataset(tmp_path / f"sam-l2_alpha{alpha:g}.nc")
        assert sam.attrs["regime_meaning"] == name
        gd = xr.load_dataset(tmp_path / f"gd_alpha{alpha:g}.nc")
        assert gd.attrs["method"] == "gd" and gd.attrs.get("rho", 0) == 0
    assert (tmp_path / "timelines.png").stat().st_size > 10_000
