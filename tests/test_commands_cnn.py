"""``samflow cnn``: bad input ends with one line and exit status 2; a tiny full run."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from runs import write_mnist_test_split

from samflow.cli import main
from samflow.images import results, train
from samflow.io import write_dataset
from samflow.schema import IMAGES


@pytest.fixture
def mnist_dir(tmp_path):
    """A 12x12 stand-in for the MNIST test split only: dark background, a bright blob."""
    rng = np.random.default_rng(0)
    n = 60
    labels = np.where(np.arange(n) % 2 == 0, 3, 8).astype(np.uint8)
    images = np.zeros((n, 12, 12), np.uint8)
    for i, label in enumerate(labels):
        r, c = (2, 2) if label == 3 else (6, 6)
        images[i, r : r + 4, c : c + 4] = rng.integers(150, 256, size=(4, 4))
    return write_mnist_test_split(tmp_path / "mnist", images, labels)


def _run(argv, capsys) -> tuple[int, str]:
    status = main(argv)
    return status, capsys.readouterr().err


@pytest.mark.parametrize(
    "extra, expected",
    [
        (["--method", "adam"], "unknown"),
        (["--method", "gd", "--figure", "f.png"], "--figure needs both methods"),
        (["--method", "gd", "--steps", "5", "--record-every", "2"], "multiple of"),
        (["--method", "gd", "--classes", "3,3"], "two different classes"),
        (["--method", "gd", "--alpha", "nan"], "alpha contains NaN or inf"),
        (["--method", "gd", "--batch", "1000"], "batch 1000 must be between 1 and n_train"),
        (["--method", "gd", "--dataset", "imagenet"], "invalid choice"),
        (["--method", "gd", "--base-optimizer", "rmsprop"], "invalid choice: 'rmsprop'"),
    ],
)
def test_bad_input_is_one_line_and_status_2(mnist_dir, tmp_path, capsys, extra, expected):
    argv = ["cnn", "--data-dir", str(mnist_dir), "--out", str(tmp_path / "r.nc"), *extra]
    status, err = _run(argv, capsys)
    assert status == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("samflow: error:"), err
    assert expected in lines[0]
    assert not (tmp_path / "r.nc").exists()


def _no_training(*args, **kwargs):
    raise AssertionError("training started")


@pytest.mark.parametrize(
    "extra, named",
    [
        (["--split-seed", "-1"], "split-seed must be an integer >= 0, got '-1'"),
        (["--split-seed", "١"], "split-seed must be an integer, got '١'"),
        (["--steps", "0"], "steps must be an integer in 1..2147483647, got '0'"),
        (["--steps", "-1"], "got '-1'"),
        (["--steps", "1" + "0" * 30], "got '1" + "0" * 30 + "'"),
        (["--steps", "2.5"], "steps must be an integer, got '2.5'"),
        (["--batch", "-1"], "batch must be an integer >= 0, got '-1'"),
        (["--seeds", "0"], "seeds must be an integer in 1..1000000, got '0'"),
        (["--seeds", str(2**40)], f"got '{2**40}'"),
        (["--n-train", "0"], "n-train must be an integer >= 1, got '0'"),
        (["--n-test", "-3"], "n-test must be an integer >= 1, got '-3'"),
        (["--record-every", "0"], "record-every must be an integer >= 1, got '0'"),
        (
            ["--steps", "4", "--record-every", "3"],
            "steps (4) must be a multiple of record_every (3)",
        ),
        (["--steps", "2000000", "--record-every", "1"], "2000000 records; at most 1000000"),
        (["--background-threshold", "2"], "background_threshold must be in (0, 1], got 2.0"),
        (["--background-threshold", "0"], "got 0.0"),
        (["--rho", "-1"], "rho must be >= 0, got -1.0"),
        (["--rho", "nan"], "rho must be finite, got 'nan'"),
        (["--eta", "0"], "eta must be > 0, got 0.0"),
        (["--eta", "-0.1"], "eta must be > 0, got -0.1"),
        (["--alpha", "0"], "alpha must be positive, got 0"),
        (["--alpha", "1,1"], "alpha repeats a value: 1,1"),
        (["--match-loss", "0"], "match_loss must be positive, got 0.0"),
        (["--alpha", "1,x"], "alpha must be comma-separated numbers"),
        (["--channels", "8,,16"], "got '8,,16'"),
        (["--channels", "8,0"], "got '8,0'"),
        (["--channels", "8,100000"], "conv widths in 1..4096"),
        (["--channels", "2,2,2,2,2"], "channels 2,2,2,2,2: 5 conv layers halve the 12x12"),
        (["--examples", "-1"], "examples must be an integer >= 1, got '-1'"),
        (["--examples", "0"], "got '0'"),
        (["--classes", "3,12"], "'12' is not a class of mnist"),
        (["--data-dir", ""], "--data-dir is empty"),
        (["--background", "border", "--background-box", "1"], "background_box must be in (0, 1)"),
        (["--background-box", "-0.5"], "background_box must be in (0, 1), got -0.5"),
        (["--min-accuracy", "1.5"], "min_accuracy must be in [0, 1], got 1.5"),
        (["--background", "sky"], "invalid choice: 'sky'"),
    ],
)
def test_bad_option_values_are_refused_before_training(
    mnist_dir, tmp_path, capsys, monkeypatch, extra, named
):
    monkeypatch.setattr(train, "train_seeds", _no_training)
    out = tmp_path / "r.nc"
    data_dir = [] if "--data-dir" in extra else ["--data-dir", str(mnist_dir)]  # given once
    argv = ["cnn", *data_dir, "--method", "gd", "--out", str(out), *extra]
    status, err = _run(argv, capsys)
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and lines[0].startswith("samflow: error:"), err
    assert named in lines[0]
    assert not out.exists()


@pytest.mark.parametrize("kind", ["folder", "under_file", "empty", "suffix", "figure", "fig_dir"])
def test_bad_output_paths_are_refused_before_training(
    mnist_dir, tmp_path, capsys, monkeypatch, kind
):
    monkeypatch.setattr(train, "train_seeds", _no_training)
    monkeypatch.setattr(
        "samflow.images.data.load_dataset", lambda *a, **k: pytest.fail("data read first")
    )
    afile = tmp_path / "a_file"
    afile.write_text("x")
    out, figure, named = {
        "folder": (tmp_path, None, "is a folder"),
        "under_file": (afile / "r.nc", None, f"{afile}' is a file"),
        "empty": ("", None, "the output path is empty"),
        "suffix": (tmp_path / "r.txt", None, "unknown suffix '.txt'; use .nc"),
        "figure": (tmp_path / "r.nc", tmp_path / "f.jpeg", "unknown suffix '.jpeg'"),
        "fig_dir": (tmp_path / "r.nc", tmp_path, "is a folder"),
    }[kind]
    argv = ["cnn", "--data-dir", str(mnist_dir), "--method", "gd,sam-l2", "--out", str(out)]
    status, err = _run([*argv, *(["--figure", str(figure)] if figure else [])], capsys)
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and named in lines[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "mnist"]


def test_quiet_run_prints_nothing(mnist_dir, tmp_path, capsys):
    out = tmp_path / "q.nc"
    argv = [
        "cnn", "--data-dir", str(mnist_dir), "--method", "gd", "--model", "diagonal",
        "--steps", "2", "--record-every", "1", "--batch", "0", "--seeds", "1",
        "--examples", "2", "--out", str(out), "-q",
    ]  # fmt: skip
    assert main(argv) == 0
    assert capsys.readouterr() == ("", "")
    with xr.open_dataset(out) as ds:
        assert ds["step"].values.tolist() == [0, 1, 2]


def test_missing_data_names_files_and_download(tmp_path, capsys):
    status, err = _run(
        ["cnn", "--method", "gd", "--data-dir", str(tmp_path), "--out", "x.nc"], capsys
    )
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert "t10k-images-idx3-ubyte" in err and "samflow data download mnist" in err


def test_tiny_run_writes_file_and_figure(mnist_dir, tmp_path, capsys):
    out, fig = tmp_path / "run.nc", tmp_path / "fig.png"
    argv = [
        "cnn", "--data-dir", str(mnist_dir), "--method", "gd,sam-l2", "--channels", "2,2",
        "--steps", "4", "--record-every", "2", "--batch", "0", "--seeds", "2",
        "--alpha", "2", "--examples", "2", "--out", str(out), "--figure", str(fig),
    ]  # fmt: skip
    status = main(argv)
    printed = capsys.readouterr().out
    assert status == 0
    assert "note: only the test split" in printed
    assert fig.stat().st_size > 0
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    with xr.open_dataset(out) as ds:
        assert ds["background_share"].dims == ("optimizer", "seed")
        assert ds["loss"].dims == ("optimizer", "seed", "record")
        assert ds["step"].values.tolist() == [0, 2, 4]
        assert list(ds["optimizer"].values) == ["gd", "sam-l2"]
        assert "only the test split" in ds.attrs["split_note"]
        assert ds.attrs["method"] == "gd,sam-l2" and ds.attrs["classes"] == "3,8"
        assert ds.attrs["history"].split(": ", 1)[1].startswith("samflow cnn --data-dir")
        assert ds.attrs["base_optimizer"] == "sgd"
        for name in ("samflow_version", "rho", "alpha", "dataset"):
            assert name in ds.attrs
        share = ds["background_share"].values
        assert np.all((share >= 0) & (share <= 1))


def test_base_optimizer_is_used_and_recorded(mnist_dir, tmp_path, capsys):
    out = tmp_path / "adam.nc"
    argv = [
        "cnn", "--data-dir", str(mnist_dir), "--method", "sam-l2", "--model", "diagonal",
        "--base-optimizer", "adam", "--eta", "0.05", "--steps", "4", "--record-every", "2",
        "--batch", "0", "--seeds", "1", "--examples", "2", "--out", str(out),
    ]  # fmt: skip
    assert main(argv) == 0
    assert "sam-l2 (adam) seed 0" in capsys.readouterr().out
    with xr.open_dataset(out) as ds:
        assert ds.attrs["base_optimizer"] == "adam"
        loss = ds["loss"].values[0]
        assert loss[-1] < loss[0]


def test_single_method_file_has_seed_dims(tmp_path):
    history = train.Metrics(*(np.full((3, 2), 0.5, np.float32) for _ in train.Metrics._fields))
    run = train.RunResult(
        "gd", np.arange(3), np.array([0, 5]), history, np.zeros((1, 4, 4)), np.zeros((1, 4, 4)), 1.0
    )
    examples = {"image": np.zeros((1, 4, 4, 1)), "label": np.ones(1)}
    path = write_dataset(results.build_dataset([run], examples, {"rho": 0.1}), tmp_path / "g.nc")
    with xr.open_dataset(path) as ds:
        for name in ("background_share", "saliency_background_share", "test_accuracy"):
            assert ds[name].dims == ("seed",)
        assert ds["loss"].dims == ("seed", "record")
        assert ds.attrs["method"] == "gd" and ds.attrs["rho"] == 0.1
    assert [p.name for p in tmp_path.iterdir()] == ["g.nc"]


def test_paired_difference_against_scipy():
    from scipy import stats

    rng = np.random.default_rng(4)
    gd = rng.uniform(0.6, 0.8, 10)
    sam = gd + rng.normal(0.03, 0.02, 10)
    sam[3] = np.nan  # a pair with a NaN side is left out
    r = results.paired_difference(sam, gd)
    keep = np.isfinite(sam)
    d = sam[keep] - gd[keep]
    ci = stats.t.interval(0.95, d.size - 1, loc=d.mean(), scale=stats.sem(d))
    assert r["n"] == 9
    np.testing.assert_allclose(r["mean"], d.mean())
    np.testing.assert_allclose((r["ci_low"], r["ci_high"]), ci)
    np.testing.assert_allclose(r["p_value"], stats.ttest_rel(sam[keep], gd[keep]).pvalue)
    assert np.isnan(results.paired_difference(sam[:1], gd[:1])["p_value"])


def test_matched_loss_is_the_first_record_below_the_threshold():
    loss = np.array([[0.7, 0.3, 0.05, 0.01], [0.7, 0.6, 0.5, 0.4]])
    share = np.array([[0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.8]])
    value, step = results.at_matched_loss(loss, share, np.array([0, 10, 20, 30]), 0.1)
    np.testing.assert_array_equal(value, [0.3, np.nan])
    np.testing.assert_array_equal(step, [20, np.nan])


def test_an_alpha_list_gives_an_alpha_dim_and_paired_differences(mnist_dir, tmp_path, capsys):
    out, fig = tmp_path / "alphas.nc", tmp_path / "alphas.png"
    argv = [
        "cnn", "--data-dir", str(mnist_dir), "--method", "gd,sam-l2", "--model", "diagonal",
        "--steps", "4", "--record-every", "2", "--batch", "8", "--seeds", "3",
        "--alpha", "0.5,1", "--examples", "2", "--match-loss", "0.69",
        "--out", str(out), "--figure", str(fig),
    ]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "alpha 0.5:" in printed and "sam-l2 - gd Grad-CAM background share" in printed
    assert (tmp_path / "alphas_alpha.png").stat().st_size > 0
    with xr.open_dataset(out) as ds:
        assert ds["background_share"].dims == ("alpha", "optimizer", "seed")
        assert ds["alpha"].values.tolist() == [0.5, 1.0] and "alpha" not in ds.attrs
        assert ds["background_share_diff_mean"].dims == ("alpha", "contrast")
        assert ds["contrast"].values.tolist() == ["sam-l2 - gd"]
        for a in (0.5, 1.0):
            one = ds.sel(alpha=a)
            d = results.paired_difference(
                one["background_share"].sel(optimizer="sam-l2").values,
                one["background_share"].sel(optimizer="gd").values,
            )
            np.testing.assert_allclose(one["background_share_diff_mean"].values[0], d["mean"])
        assert 0 < float(ds["uniform_background_share"]) < 1
        for name in ("top_mass", "zero_maps", "occlusion_background", "occlusion_stroke"):
            assert ds[name].dims == ("alpha", "optimizer", "seed")
        assert ds.attrs["match_loss"] == 0.69


def test_the_python_study_is_the_cli_file(mnist_dir, tmp_path):
    """``samflow.images.study`` returns what ``samflow cnn`` writes (but the timings and
    the command line)."""
    from samflow.images import study

    out = tmp_path / "cli.nc"
    argv = [
        "cnn", "--data-dir", str(mnist_dir), "--method", "gd,sam-l2", "--model", "diagonal",
        "--steps", "4", "--record-every", "2", "--batch", "8", "--seeds", "2",
        "--alpha", "0.5,1", "--examples", "2", "-q", "--out", str(out),
    ]  # fmt: skip
    assert main(argv) == 0
    mine = study(
        ["gd", "sam-l2"], data_dir=str(mnist_dir), model="diagonal", steps=4,
        record_every=2, batch=8, seeds=2, alpha=[0.5, 1], examples=2, log=lambda _: None,
    )  # fmt: skip
    with xr.open_dataset(out) as ds:
        written = ds.load()
    for ds in (written, mine):
        ds.attrs.pop("history")
    xr.testing.assert_identical(written.drop_vars("seconds"), mine.drop_vars("seconds"))


def test_border_background_and_min_accuracy_are_used_and_recorded(mnist_dir, tmp_path, capsys):
    """``--background border``: the share is on the pixels outside the centred box (on
    12x12 images a box of 0.5 is the central 6x6, so a uniform map scores 108/144); the
    dark-pixel share is reported beside it; ``--min-accuracy`` names the runs below it
    and leaves their pairs out."""
    out = tmp_path / "border.nc"
    argv = [
        "cnn", "--data-dir", str(mnist_dir), "--method", "gd,sam-l2", "--channels", "2,2",
        "--steps", "2", "--record-every", "2", "--batch", "0", "--seeds", "3",
        "--examples", "2", "--background", "border", "--min-accuracy", "0.99",
        "--out", str(out),
    ]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    with xr.open_dataset(out) as ds:
        assert ds.attrs["background"] == "border" and ds.attrs["background_box"] == 0.5
        assert ds.attrs["min_accuracy"] == 0.99
        assert float(ds["uniform_background_share"]) == 108 / 144
        # the blobs are bright on a black background: the dark area is what is not blob
        assert 0.8 < float(ds["uniform_dark_share"]) < 1
        assert ds["dark_share"].dims == ("optimizer", "seed")
        learned = ds["learned"].values
        np.testing.assert_array_equal(learned, ds["test_accuracy"].values >= 0.99)
        both = learned.astype(bool).all(axis=0)
        assert int(ds["background_share_diff_n"].values[0]) == both.sum()
        for k, method in enumerate(ds["optimizer"].values):
            for seed in np.flatnonzero(~learned[k].astype(bool)):
                assert f"did not learn: {method} seed {seed}" in printed
        assert f"{(~both).sum()} seed pair(s) left out" in printed or both.all()
        assert "dark_share_diff_mean" in ds
    assert IMAGES.check(xr.open_dataset(out)) == []


def test_default_background_file_has_no_new_variables(mnist_dir, tmp_path):
    """Without the new options a file is as before them: no background attributes, no
    dark share, no learned flags."""
    out = tmp_path / "dark.nc"
    argv = [
        "cnn", "--data-dir", str(mnist_dir), "--method", "gd,sam-l2", "--model", "diagonal",
        "--steps", "2", "--record-every", "2", "--batch", "0", "--seeds", "2",
        "--examples", "2", "-q", "--out", str(out),
    ]  # fmt: skip
    assert main(argv) == 0
    with xr.open_dataset(out) as ds:
        for name in ("background", "background_box", "min_accuracy"):
            assert name not in ds.attrs
        for name in ("dark_share", "learned", "uniform_dark_share", "dark_share_diff_mean"):
            assert name not in ds


def test_pairs_with_a_run_that_did_not_learn_are_left_out():
    """The paired differences with ``min_accuracy``: by hand on made-up runs."""
    rng = np.random.default_rng(2)
    accuracy = {"gd": np.array([0.9, 0.5, 0.9, 0.9]), "sam-l2": np.array([0.9, 0.9, 0.9, 0.55])}
    share = {m: rng.uniform(0.2, 0.8, 4).astype(np.float32) for m in accuracy}
    runs = []
    for m in accuracy:
        fields = {f: np.full((4, 2), 0.5, np.float32) for f in train.Metrics._fields}
        fields["test_accuracy"][:, -1] = accuracy[m]
        fields["background_share"][:, -1] = share[m]
        fields["dark_share"] = None
        history = train.Metrics(**fields)
        z = np.zeros((1, 4, 4))
        runs.append(train.RunResult(m, np.arange(4), np.array([0, 5]), history, z, z, 1.0))
    examples = {"image": np.zeros((1, 4, 4, 1)), "label": np.ones(1)}
    ds = results.build_dataset(runs, examples, {"rho": 0.1}, min_accuracy=0.6)
    np.testing.assert_array_equal(ds["learned"].values, [[1, 0, 1, 1], [1, 1, 1, 0]])
    keep = [0, 2]  # seed 1: gd did not learn; seed 3: sam-l2 did not
    d = share["sam-l2"][keep].astype(np.float64) - share["gd"][keep]
    assert int(ds["background_share_diff_n"].values[0]) == 2
    np.testing.assert_allclose(ds["background_share_diff_mean"].values[0], d.mean(), rtol=1e-12)
    assert "dark_share" not in ds and "dark_share_diff_mean" not in ds
    # the variables conform (the settings a study records are not given here)
    assert [p for p in IMAGES.check(ds) if not p.startswith("attribute ")] == []


def test_gradcam_figure_measures_cifar_on_the_border(tmp_path, monkeypatch):
    """The gradcam figure trains CIFAR-10 with the border background and the
    did-not-learn threshold, MNIST with the defaults (its dark mask)."""
    from samflow.figures import gradcam

    calls = {}

    def fake_study(methods, *, dataset, **kwargs):
        calls[dataset] = kwargs
        raise RuntimeError("stop")  # the settings are what is checked

    monkeypatch.setattr(gradcam, "load_dataset", lambda name, d: None)
    monkeypatch.setattr(gradcam, "study", fake_study)
    for name in ("mnist", "cifar10"):
        monkeypatch.setattr(gradcam, "DATASETS", (name,))
        with pytest.raises(RuntimeError, match="stop"):
            gradcam.build(tmp_path, quick=True)
    assert calls["cifar10"]["background"] == "border" and calls["cifar10"]["min_accuracy"] == 0.6
    assert "background" not in calls["mnist"] and "min_accuracy" not in calls["mnist"]
