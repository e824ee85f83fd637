"""Figure plumbing: drawing helpers on tiny Datasets, the shared-program runner of the
figure modules against ``samflow.sweep``, the ``samflow figures`` command (one cheap
figure, ``--list``, exit 1 when nothing is built), the figure modules inside a built
wheel, and that importing the plotting code leaves matplotlib's backend alone."""

import os
import shutil
import subprocess
import sys
import types
import zipfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
import xarray as xr
from tolerance import assert_close

import samflow
from samflow.cli import main
from samflow.figures import FIGURES, _engine
from samflow.plotting import (
    category_legend,
    coordinate_colours,
    dominant_codes,
    draw_categories,
    draw_regimes,
    phase_map,
    save_figure_set,
)
from samflow.sweeps.axes import parse_axis

ROOT = Path(__file__).resolve().parents[1]


def tiny_regime_dataset() -> xr.Dataset:
    alpha, rho = np.geomspace(0.1, 10, 4), np.geomspace(0.1, 1, 3)
    regime = np.array([[1, 1, 1], [2, 1, 1], [3, 2, 1], [3, 3, -1]], dtype=np.int8)
    ds = xr.Dataset({"regime": (("alpha", "rho"), regime)}, coords={"alpha": alpha, "rho": rho})
    ds.attrs = {"axes": "alpha rho", "method": "sam-l2", "depth": 2, "mode": "flow"}
    ds.attrs["mu"] = np.array([1.0, 2.0, 3.0, 4.0])
    return ds


def test_phase_map_and_draw_regimes(tmp_path):
    ds = tiny_regime_dataset()
    fig = phase_map(ds)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["-1: failed", "1: collapse", "2: sequential", "3: direct"]
    paths = save_figure_set(fig, tmp_path, "tiny", {"": ds})
    assert [p.suffix for p in paths] == [".png", ".pdf", ".nc"]
    assert all(p.stat().st_size > 0 for p in paths)
    xr.testing.assert_equal(xr.load_dataset(tmp_path / "tiny.nc")["regime"], ds["regime"])
    fig, ax = plt.subplots()
    draw_regimes(ax, ds["regime"], "alpha", "rho")
    assert ax.get_xlabel() == r"$\alpha$"
    plt.close("all")


def test_dominant_codes_mark_collapse_and_missing_records():
    dominant = np.array([[0, 2, 3, 4], [0, 1, 1, 0]])
    norm = np.array([[1.0, 2.0, 5.0, 9.0], [1.0, 0.5, 0.0, np.nan]])
    codes = dominant_codes(dominant, norm)
    np.testing.assert_array_equal(codes[0], [np.nan, 2, 3, 4])
    np.testing.assert_array_equal(codes[1], [np.nan, 1, 0, np.nan])


def test_draw_categories_colours_each_cell():
    colours = coordinate_colours(2)
    fig, ax = plt.subplots()
    values = np.array([[0, 1, 2], [2, np.nan, 1]])
    mesh = draw_categories(ax, values, [1e-2, 1e-1, 1.0], [0.5, 5.0], colours)
    rgba = mesh.to_rgba(mesh.get_array())
    assert np.ma.is_masked(mesh.get_array()[1, 1])
    np.testing.assert_allclose(rgba[0, 2][:3], plt.matplotlib.colors.to_rgb(colours[2]))
    np.testing.assert_allclose(rgba[0, 0][:3], plt.matplotlib.colors.to_rgb(colours[0]))
    assert ax.get_xscale() == "log"
    leg = category_legend(ax, colours, {0: "zero", 1: "one", -9: "blank"})
    assert [t.get_text() for t in leg.get_texts()] == ["zero", "one", "blank"]
    plt.close(fig)


def test_shared_runner_matches_the_sweep(tmp_path):
    """Layer padding, batch padding and a shared program change nothing."""
    spec = _engine.figure_spec(
        "sam-l2",
        "discrete",
        depth=2,
        axes=(parse_axis("alpha=0.2,0.5,2"), parse_axis("rho=0,1")),
        mu=(1.0, 2.0, 3.0, 4.0),
        eta=0.05,
        steps=60,
        record_every=20,
        save_trajectories=True,
    )
    ref = samflow.sweep(
        "sam-l2",
        depth=2,
        mu=[1.0, 2.0, 3.0, 4.0],
        axes={"alpha": [0.2, 0.5, 2], "rho": [0, 1]},
        # The figures take labelled runs to their fate: 100 times their steps.
        runner=samflow.Discrete(eta=0.05, steps=60, save=samflow.Every(20), step_cap=6000),
        out=tmp_path / "ref.nc",
        save_trajectories=True,
    )
    ours = _engine.sweep(spec, layers=4, batch=4)
    assert set(ours.data_vars) == set(ref.data_vars)
    # Two programs (depth padded to 4 rows, batches of 4) round differently: a few eps a
    # step over 60 steps (measured 1.1e-14). Collapsing coordinates reach 1e-47 of the
    # largest: they are held to their variable's scale, not to their own.
    for name in ref.data_vars:
        assert_close(ours[name].values, ref[name].values, rtol=1e-12, atol=1e-13, err_msg=name)
    # log-spaced records through the same program: the last record is the same state
    steps = _engine.log_steps(60, n=5)
    assert steps.tolist()[0] == 0 and steps[-1] == 60 and len(np.unique(steps)) == 5
    again = _engine.sweep(spec, layers=4, batch=4, times=steps)
    np.testing.assert_allclose(again["beta"].values[..., -1, :], ref["beta"].values[..., -1, :])
    np.testing.assert_array_equal(again["step"].values, steps)


@pytest.mark.slow
def test_figures_cli_writes_png_pdf_nc(tmp_path, capsys):
    assert main(["figures", "--only", "multipoint", "--quick", "--out", str(tmp_path)]) == 0
    for suffix in ("png", "pdf"):
        assert (tmp_path / f"multipoint.{suffix}").stat().st_size > 10_000
    ds = xr.load_dataset(tmp_path / "multipoint_l2sam_n16.nc")
    assert {"regime", "dominant", "beta", "X", "y"} <= set(ds.data_vars)
    assert "[multipoint]" in capsys.readouterr().out


def test_figures_list_names_and_describes_each(capsys):
    assert main(["figures", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == list(FIGURES)
    assert all(len(line.split(maxsplit=1)) == 2 for line in lines)
    assert lines[0].split(maxsplit=1)[1].startswith("Figure 1:")


def test_figures_exit_1_when_nothing_built(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(
        "samflow.commands.figures.load",
        lambda name: types.SimpleNamespace(build=lambda out_dir, quick: []),
    )
    out = tmp_path / "figs"
    assert main(["figures", "--only", "gradcam", "--quick", "--out", str(out)]) == 1
    captured = capsys.readouterr()
    assert "[gradcam]" in captured.out and "nothing built" in captured.out
    assert captured.err.strip().splitlines() == [
        "samflow figures: nothing built (gradcam wrote no file)"
    ]


@pytest.mark.slow
def test_gradcam_figure_on_a_machine_without_image_data(tmp_path, monkeypatch, capsys):
    """No MNIST, CIFAR-10 or SVHN in the data directory: the gradcam figure is built on
    the built-in 8x8 digits and says so in its title and its file."""
    from samflow.images import plot

    empty = tmp_path / "no-data"
    empty.mkdir()
    monkeypatch.setenv("SAMFLOW_DATA", str(empty))
    shown = []
    monkeypatch.setattr(plot.plt, "close", shown.append)  # keep the figure to read it
    out = tmp_path / "figs"
    assert main(["figures", "--only", "gradcam", "--quick", "--out", str(out)]) == 0
    shown_text = capsys.readouterr()
    printed = shown_text.out + shown_text.err  # why a data set was skipped: on stderr
    assert "skipped mnist" in printed and "using the built-in digits" in printed
    for suffix in ("png", "pdf"):
        assert (out / f"gradcam_digits.{suffix}").stat().st_size > 10_000
    assert not list(out.glob("gradcam_mnist*")) and not list(out.glob("gradcam_cifar10*"))
    ds = xr.load_dataset(out / "gradcam_digits.nc")
    assert ds.attrs["dataset"] == "digits" and "load_digits" in ds.attrs["source"]
    assert "one set of 1797 images" in ds.attrs["split_note"]
    assert ds.attrs["channels"] == "8,16"  # two blocks: a 4x4 Grad-CAM map
    assert ds["example_gradcam"].shape[-2:] == (8, 8)
    # --quick trains the built-in digits fully: both methods learn 3 vs 8
    assert ds.attrs["steps"] == 600 and ds.sizes["seed"] == 3
    assert float(ds["test_accuracy"].min()) > 0.9
    [fig] = shown
    title = fig._suptitle.get_text()
    assert "8x8 digits built into scikit-learn" in title and "3 vs 8" in title


def test_figure_errors_are_not_swallowed(tmp_path, monkeypatch):
    def build(out_dir, quick):
        raise RuntimeError("broken figure")

    monkeypatch.setattr(
        "samflow.commands.figures.load", lambda name: types.SimpleNamespace(build=build)
    )
    with pytest.raises(RuntimeError, match="broken figure"):
        main(["figures", "--only", "depth", "--out", str(tmp_path)])


def _python(code: str, tmp_path, **env_changes) -> str:
    env = {**os.environ, "MPLCONFIGDIR": str(tmp_path / "mplconfig")}  # no user matplotlibrc
    for key, value in env_changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _backend_after_imports(modules, tmp_path) -> list[str]:
    code = "import importlib, matplotlib; matplotlib.use('svg')\n"
    code += f"for m in {modules!r}: importlib.import_module(m); print(matplotlib.get_backend())"
    return _python(code, tmp_path, MPLBACKEND=None).splitlines()


def test_import_keeps_the_users_backend(tmp_path):
    """Importing the plotting code must not pick a backend (Jupyter's inline one, say)."""
    modules = ["samflow.plotting", "samflow.images.plot"]
    modules += [f"samflow.figures.{n}" for n in FIGURES]
    assert _backend_after_imports(modules, tmp_path) == ["svg"] * len(modules)


def test_plotting_works_headless(tmp_path):
    """No display, no backend chosen: matplotlib falls back to Agg on its own."""
    png = tmp_path / "tiny.png"
    code = (
        "import matplotlib, matplotlib.pyplot as plt, samflow.plotting; fig = plt.figure(); "
        f"fig.savefig({str(png)!r}); print(matplotlib.get_backend().lower())"
    )
    backend = _python(code, tmp_path, MPLBACKEND=None, DISPLAY=None, WAYLAND_DISPLAY=None)
    assert backend == "agg" and png.stat().st_size > 0


def test_wheel_holds_every_figure_module(tmp_path):
    """A non-editable install must carry the figures: build the wheel offline and look."""
    src = tmp_path / "src"  # a copy, so that the build writes nothing into the checkout
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "samflow", src / "samflow", ignore=shutil.ignore_patterns("__pycache__"))
    wheels = tmp_path / "wheels"
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index"]
    done = subprocess.run(
        [*cmd, "-q", "-w", str(wheels), str(src)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    (wheel,) = wheels.glob("samflow-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {f"samflow/figures/{n}.py" for n in ("__init__", "_engine", *FIGURES)}
    assert expected <= names, sorted(expected - names)
    assert "samflow/commands/figures.py" in names
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "samflow = samflow.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


# ---- The regression figures' drawing, on small data (their runs take minutes) ----


def _tiny_regression():
    from samflow.oracles import min_l1_interpolant, min_l2_interpolant, woodworth_interpolant

    rng = np.random.default_rng(0)
    X = rng.normal(size=(3, 6))
    beta_star = np.array([1.0, -0.5, 0, 0, 0, 0])
    y = X @ beta_star
    return X, y, beta_star, woodworth_interpolant, min_l1_interpolant, min_l2_interpolant


def test_kernel_rich_draws_each_method_and_names_what_diverged():
    from samflow.figures import kernel_rich

    X, y, beta_star, wood, l1, l2 = _tiny_regression()
    alphas = np.geomspace(1e-2, 10, 4)
    curve = np.stack([wood(X, y, a).beta for a in alphas])
    methods = list(kernel_rich.METHODS)
    error = np.tile(np.sum((curve - beta_star) ** 2, 1), (len(methods), 1))
    loss = np.full_like(error, 1e-12)
    loss[3, -1] = error[3, -1] = np.nan  # 1-SAM diverged at the largest alpha
    ds = xr.Dataset(
        {
            "loss": (("method", "alpha"), loss),
            "test_error": (("method", "alpha"), error),
            "l1_norm": (("method", "alpha"), np.tile(np.abs(curve).sum(1), (4, 1))),
            "sharpness": (("method", "alpha"), np.tile(4 + alphas**2, (4, 1))),
            "flow_beta": (("alpha", "coord"), curve),
            "woodworth_beta": (("curve_alpha", "coord"), curve),
            "l1_beta": ("coord", l1(X, y)),
            "l2_beta": ("coord", l2(X, y)),
            "beta_star": ("coord", beta_star),
        },
        coords={"method": methods, "alpha": alphas, "curve_alpha": alphas},
        attrs={"rho": 0.1, "steps": 100},
    )
    fig = kernel_rich.draw(ds)
    ax_err, _, ax_sharp = fig.axes
    assert all(ax.get_xscale() == "log" for ax in fig.axes)
    assert ax_err.get_yscale() == "log" and ax_sharp.get_yscale() == "log"
    labels = [t.get_text() for t in ax_err.get_legend().get_texts()]
    assert set(methods) <= set(labels) and "GD flow (engine)" in labels
    notes = " ".join(t.get_text() for t in ax_err.texts)
    assert "1-SAM at alpha = 10" in notes and "GD at" not in notes
    plt.close(fig)


def test_saddle_to_saddle_marks_the_jump_times():
    from samflow.figures import saddle_to_saddle
    from samflow.oracles import saddle_to_saddle as algorithm

    X, y, *_ = _tiny_regression()
    saddles = algorithm(X, y)
    T = np.r_[0.0, np.geomspace(1e-2, 2 * saddles.times[-1], 30)]
    k = np.searchsorted(saddles.times, T, side="right") - 1  # the limit: beta on saddle k
    alphas = np.array([1e-8, 1e-6, 1e-4, 1e-2])
    beta = np.broadcast_to(saddles.betas[k], (len(alphas), *saddles.betas[k].shape))
    u2v2 = xr.Dataset(
        {
            "beta": (("alpha", "T", "coord"), beta),
            "loss": (("alpha", "T"), np.broadcast_to(saddles.losses[k] + 1e-12, beta.shape[:2])),
            "n_active": (("alpha", "T"), np.sum(np.abs(beta) > 1e-3, axis=-1)),
            "saddle_T": ("jump", saddles.times),
            "saddle_beta": (("jump", "coord"), saddles.betas),
            "saddle_loss": ("jump", saddles.losses),
        },
        coords={"alpha": alphas, "T": T},
    )
    alpha_sam = np.array([0.1, 0.5, 0.9])
    dominant = np.tile(np.repeat([1.0, 2.0, 4.0], 10)[None], (3, 1))
    sam = xr.Dataset(
        {"dominant": (("alpha", "T"), np.c_[dominant, dominant[:, :1]])},
        coords={"alpha": alpha_sam, "T": T},
    )
    fig = saddle_to_saddle.draw({"u2v2": u2v2, "l2sam": sam})
    assert all(ax.get_xscale() == "log" for ax in fig.axes[:4])
    ax_beta = fig.axes[0]
    verticals = {line.get_xdata()[0] for line in ax_beta.lines if len(set(line.get_xdata())) == 1}
    np.testing.assert_allclose(sorted(verticals), saddles.times[1:])
    plt.close(fig)


def test_sam_sparsity_table_counts_the_order():
    from samflow.figures import sam_sparsity

    shape = (2, 2, 3, 3, 4)  # parametrization, perturbation, variant, problem, rho
    error = np.empty(shape)
    error[:, :, 0] = 0.03  # GD
    error[:, :, 1] = 0.02  # n-SAM
    error[:, :, 2] = 0.01  # 1-SAM: below n-SAM below GD, except on problem 0
    error[:, :, 2, 0] = 0.025
    dims = ("parametrization", "perturbation", "variant", "problem", "rho_index")
    ds = xr.Dataset(
        {
            "test_error": (dims, error),
            "l1_norm": (dims, np.ones(shape)),
            "loss": (dims, np.full(shape, 1e-12)),
            "rho": (("perturbation", "rho_index"), np.array(list(sam_sparsity.RHOS.values()))),
            "l1_test_error": ("problem", np.zeros(3)),
            "l1_l1_norm": ("problem", np.ones(3)),
        },
        coords={
            "parametrization": list(sam_sparsity.PARAMETRIZATIONS),
            "perturbation": list(sam_sparsity.RHOS),
            "variant": list(sam_sparsity.VARIANTS),
        },
        attrs={"alpha": 0.1, "eta": 0.05, "steps": 10, "n": 20, "d": 30, "sparsity": 3},
    )
    rows = sam_sparsity.table(ds).splitlines()
    assert len(rows) == 2 + 2 * 2 * 4
    assert all(row.endswith("| 3/3 | 2/3 | 2/3 |") for row in rows[2:])
    fig = sam_sparsity.draw(ds)
    assert fig.axes[0].get_xscale() == "log" and fig.axes[0].get_yscale() == "log"
    plt.close(fig)
