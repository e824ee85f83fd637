"""Every bad input exits 2 with one line naming the value, before any computation.

Property-based: hypothesis draws malformed axis strings, numbers (negative, zero, NaN,
inf, huge, non-numeric, unicode digits) and paths for each subcommand's options. The
command runs in this process (``samflow.cli.main``); a bad value must be refused
before the engine starts, so every example is fast, and no example may print a
traceback or more than one line.
"""

import contextlib
import io
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from samflow.cli import main

BASE = {
    "trajectory": [
        "trajectory",
        "--method",
        "sam-l2",
        "--depth",
        "2",
        "--mu",
        "1,2,3,4",
        "--alpha",
        "0.5",
        "--rho",
        "1",
        "--steps",
        "10",
    ],
    "phase": [
        "phase",
        "--method",
        "sam-l2",
        "--depth",
        "2",
        "--mu",
        "1,2,3,4",
        "--rho",
        "1",
        "--axis",
        "alpha=0.1:1:3:log",
        "--steps",
        "10",
    ],
    "boundary": [
        "boundary",
        "--method",
        "sam-l2",
        "--depth",
        "2",
        "--mu",
        "1,2,3,4",
        "--rho",
        "1",
        "--tau-max",
        "1",
    ],
}

NOT_A_NUMBER = st.sampled_from(
    ["", "abc", "1,2", "--", "0x", "１", "٣", "1e", "nan", "NaN", "inf", "-inf", "1e999"]
)
NEGATIVE = st.floats(max_value=-1e-300, allow_nan=False, allow_infinity=False).map(repr)
NON_POSITIVE = st.one_of(NEGATIVE, st.just("0"), st.just("-0.0"))
HUGE_INT = st.integers(min_value=2**62, max_value=10**30).map(str)
BAD_INT = st.one_of(NOT_A_NUMBER, st.sampled_from(["1.5", "2e0", "0", "-3"]), HUGE_INT)

# option -> values that are all wrong for it, for the subcommands that take it
BAD_VALUES = {
    "--rho": st.one_of(NOT_A_NUMBER, NEGATIVE),
    "--alpha": st.one_of(NOT_A_NUMBER, NON_POSITIVE),
    "--eta": st.one_of(NOT_A_NUMBER, NON_POSITIVE),
    "--depth": st.one_of(NOT_A_NUMBER, st.sampled_from(["0", "-1", "1.5"])),
    "--steps": BAD_INT,
    "--record-every": st.one_of(NOT_A_NUMBER, st.sampled_from(["0", "-1", "1.5"])),
    "--tau-max": st.one_of(NOT_A_NUMBER, NON_POSITIVE),
    "--rtol": st.one_of(NOT_A_NUMBER, NON_POSITIVE),
    "--atol": st.one_of(NOT_A_NUMBER, NON_POSITIVE),
    "--n-save": st.one_of(NOT_A_NUMBER, st.sampled_from(["0", "1", "-5"])),
    "--max-steps": st.one_of(NOT_A_NUMBER, st.sampled_from(["0", "-1"])),
    "--collapse-factor": st.one_of(NOT_A_NUMBER, NON_POSITIVE, st.sampled_from(["1", "2.5"])),
    "--mu": st.one_of(
        NOT_A_NUMBER.filter(lambda t: t != "1,2"),
        st.sampled_from(["0,1", "-1,2", "1,nan", "1,,x", "1;2", "inf,1", "１,2"]),
    ),
    "--solver": st.sampled_from(["bogus", "", "RK4", "tsit6"]),
    "--formulation": st.sampled_from(["bogus", "", "LOG"]),
    "--method": st.sampled_from(["sam", "SAM-L2", "", "l2"]),
    "--dtype": st.sampled_from(["float16", "double", ""]),
}
MODE_OPTIONS = {"--tau-max", "--rtol", "--atol", "--n-save", "--max-steps", "--formulation"}
DISCRETE_OPTIONS = {"--eta", "--steps", "--record-every"}

AXIS_TEXT = st.one_of(
    st.text(max_size=20),
    st.sampled_from(
        [
            "alpha",
            "alpha=",
            "alpha=1:2",
            "alpha=1:2:0",
            "alpha=0:1:3:log",
            "alpha=-1,2",
            "alpha=1,1",
            "alpha=a,b",
            "rho=-1,1",
            "depth=0,1",
            "depth=1.5",
            "seed=-1,2",
            "seed=0:99999999999999999999:3",
            "eta=0,1",
            "alpha_9=1,2",
            "bogus=1,2",
            "alpha=1:2:3:cubic",
            "alpha=nan,1",
            "alpha=1:inf:3",
            "mu=0,1",
            "alpha=１,２",
        ]
    ),
)


def run_cli(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            status = main(argv)
        except SystemExit as exit_:  # argparse's --help and --version only
            status = exit_.code
    return status, err.getvalue()


def assert_refused(argv: list[str], named: str | None = None) -> None:
    status, err = run_cli(argv)
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == 2, (argv, status, err)
    assert len(lines) == 1, (argv, err)
    assert "Traceback" not in err and lines[0].startswith("samflow: error:"), (argv, err)
    if named:
        assert named in lines[0], (argv, lines[0])


def mode_args(command: str, option: str) -> list[str]:
    if option in MODE_OPTIONS and command != "boundary":
        return ["--mode", "flow"]
    if option in DISCRETE_OPTIONS and command == "boundary":
        return ["--mode", "discrete"]
    return []


def with_value(argv: list[str], option: str, value: str) -> list[str]:
    if option in argv:
        i = argv.index(option)
        return [*argv[: i + 1], value, *argv[i + 2 :]]
    return [*argv, option, value]


SETTINGS = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.mark.parametrize("command", sorted(BASE))
@pytest.mark.parametrize("option", sorted(BAD_VALUES))
@SETTINGS
@given(data=st.data())
def test_bad_number_or_name(tmp_path, command, option, data):
    value = data.draw(BAD_VALUES[option], label=option)
    argv = with_value([*BASE[command], *mode_args(command, option)], option, value)
    assert_refused([*argv, "--out", str(tmp_path / "o.nc")])


@pytest.mark.parametrize("command", ["phase", "boundary"])
@SETTINGS
@given(text=AXIS_TEXT)
def test_bad_axis(tmp_path, command, text):
    argv = BASE[command] if command == "boundary" else BASE[command][:-4]
    assert_refused([*argv, "--axis", text, "--steps", "10", "--out", str(tmp_path / "o.nc")])


@pytest.mark.parametrize("command", sorted(BASE))
@SETTINGS
@given(kind=st.sampled_from(["folder", "under_file", "empty", "suffix", "figure_suffix"]))
def test_bad_paths(tmp_path, command, kind):
    afile = tmp_path / "a_file"
    afile.write_text("x")
    out, extra = {
        "folder": (str(tmp_path), []),
        "under_file": (str(afile / "o.nc"), []),
        "empty": ("", []),
        "suffix": (str(tmp_path / "o.txt"), []),
        "figure_suffix": (str(tmp_path / "o.nc"), ["--figure", str(tmp_path / "f.jpeg")]),
    }[kind]
    assert_refused([*BASE[command], "--out", out, *extra])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]  # nothing written


@pytest.mark.parametrize(
    "argv, named",
    [
        (["--bogus"], "--bogus"),
        (["trajectory", "--bogus", "1"], "--bogus"),
        (["figures", "--only", "nope"], "nope"),
        (["demo", "--out", "/dev/null/x"], "/dev/null"),
        (["figures", "--out", "/dev/null/x"], "/dev/null"),
    ],
)
def test_other_commands(argv, named):
    assert_refused(argv, named)


def test_data_file_values(tmp_path):
    import numpy as np

    bad = tmp_path / "bad.npz"
    np.savez(bad, X=np.array([[1.0, np.nan]]), y=np.array([1.0]))
    assert_refused(
        [
            *BASE["trajectory"][:5],
            "--data",
            str(bad),
            "--alpha",
            "0.5",
            "--rho",
            "1",
            "--out",
            str(tmp_path / "o.nc"),
        ],
        "NaN",
    )
    labels = tmp_path / "labels.npz"
    np.savez(labels, X=np.ones((2, 2)), y=np.array([1.0, 0.0]))
    assert_refused(
        [
            *BASE["trajectory"][:5],
            "--data",
            str(labels),
            "--alpha",
            "0.5",
            "--rho",
            "1",
            "--out",
            str(tmp_path / "o.nc"),
        ],
        "labels",
    )
    assert Path(tmp_path / "o.nc").exists() is False


# --- The named cases of issue 17, on the command line and in Python -------------------

TRAJ = ["trajectory", "--method", "sam-l2", "--depth", "2", "--rho", "1", "--alpha", "0.5"]
PH = ["phase", "--method", "sam-l2", "--depth", "2", "--mu", "1,2,3,4", "--rho", "1"]


def _files(tmp_path):
    import numpy as np

    np.save(tmp_path / "complex.npy", np.ones((2, 4)) * (1 + 1j))
    np.save(tmp_path / "text.npy", np.array(["a", "b"]))
    (tmp_path / "empty.npy").write_bytes(b"")
    np.savez(tmp_path / "complex.npz", X=np.ones((2, 4)) * (1 + 2j), y=np.ones(2))
    np.savez(tmp_path / "x30.npz", X=np.ones((3, 0)), y=np.ones(3))
    np.savez(tmp_path / "text.npz", X=np.array([["a"]]), y=np.ones(1))
    np.save(tmp_path / "mus.npy", np.ones((2, 4)))
    np.save(tmp_path / "none.npy", np.ones((0, 4)))
    (tmp_path / "empty.txt").write_text("")
    return tmp_path


CLI_CASES = {
    "empty mu item": ([*TRAJ, "--mu", "1,2,,3"], "1,2,,3"),
    "trailing comma": ([*TRAJ, "--mu", "1,2,3,"], "1,2,3,"),
    "empty axis item": ([*PH, "--axis", "alpha=1,,2"], "alpha=1,,2"),
    "huge depth": ([*TRAJ[:4], "1000000000000", *TRAJ[5:], "--mu", "1,2"], "1000000000000"),
    "deep": ([*TRAJ[:4], "1000000", *TRAJ[5:], "--mu", "1,2"], "1000000"),
    "many records": ([*TRAJ, "--mu", "1,2", "--steps", "100000000", "--record-every", "1"], "GiB"),
    "n-save 1e9": ([*TRAJ, "--mu", "1,2", "--mode", "flow", "--n-save", "1000000000"], "GiB"),
    "1e10 grid": ([*PH[:-2], "--axis", "alpha=1:2:10000000000"], "10000000000"),
    "depth axis": ([*PH, "--axis", "depth=1,1000000"], "1000000"),
    "complex theta0": ([*TRAJ[:-2], "--mu", "1,2,3,4", "--theta0", "complex.npy"], "complex"),
    "text theta0": ([*TRAJ[:-2], "--mu", "1,2", "--theta0", "text.npy"], "theta0"),
    "empty theta0": ([*TRAJ[:-2], "--mu", "1,2", "--theta0", "empty.npy"], "empty.npy"),
    "complex data": ([*TRAJ, "--data", "complex.npz"], "complex"),
    "X (3, 0)": ([*TRAJ, "--data", "x30.npz"], "(3, 0)"),
    "text data": ([*TRAJ, "--data", "text.npz"], "data X"),
    "twice": ([*TRAJ, "--mu", "1,2", "--alpha", "2"], "--alpha"),
    "alpha beside axis": ([*PH, "--axis", "alpha=1,2", "--alpha", "1"], "alpha"),
    "rho beside axis": ([*PH, "--axis", "rho=1,2"], "rho"),
    "mu-file without axis": ([*PH, "--axis", "alpha=1,2", "--mu-file", "mus.npy"], "mus.npy"),
    "rho with gd": (["trajectory", "--method", "gd", *TRAJ[3:], "--mu", "1,2"], "rho"),
    "eta with flow": ([*TRAJ, "--mu", "1,2", "--mode", "flow", "--eta", "0.1"], "--eta"),
    "flow option, discrete": ([*TRAJ, "--mu", "1,2", "--n-save", "5"], "--n-save"),
    "figures out empty": (["figures", "--out", ""], "empty"),
    "alpha-range 1e-300,1e300": (
        ["boundary", *PH[1:], "--alpha-range", "1e-300,1e300"],
        "1e-300",
    ),
    "alpha-range 1e-320,1": (["boundary", *PH[1:], "--alpha-range", "1e-320,1"], "1e-320"),
    "rtol-alpha 1e-320": (["boundary", *PH[1:], "--rtol-alpha", "1e-320"], "1e-320"),
    "scan-points 1e8": (["boundary", *PH[1:], "--scan-points", "100000000"], "100000000"),
    "seed, nothing random": ([*TRAJ, "--mu", "1,2", "--seed", "3"], "seed 3"),
    "seed on a flow": ([*TRAJ, "--mu", "1,2", "--mode", "flow", "--seed", "3"], "seed 3"),
    "empty mu-file": ([*PH[:-2], "--axis", "mu=0,1", "--mu-file", "empty.txt"], "empty.txt"),
    "empty mu-file npy": ([*PH[:-2], "--axis", "mu=0,1", "--mu-file", "none.npy"], "none.npy"),
}


@pytest.mark.parametrize("case", sorted(CLI_CASES))
def test_named_cli_cases(tmp_path, monkeypatch, case):
    monkeypatch.chdir(_files(tmp_path))
    argv, named = CLI_CASES[case]
    if argv[0] != "figures":
        argv = [*argv, "--out", str(tmp_path / "o.nc")]
    assert_refused(argv, named)
    assert not (tmp_path / "o.nc").exists()


def test_cnn_method_list_refuses_empty_items():
    from samflow.commands.cnn import _methods

    with pytest.raises(Exception, match="gd,,") as err:
        _methods("gd,,")
    assert type(err.value).__name__ == "InputError"


def _python_cases():
    import numpy as np

    import samflow

    flow = samflow.Flow(tau_max=1.0, save=samflow.LogSpaced(2))
    one = dict(depth=2, mu=[1.0, 2.0], alpha=0.5, rho=1.0, runner=flow)
    grid = dict(depth=2, mu=[1.0, 2.0], rho=1.0, runner=flow, axes={"alpha": [0.5, 1.0]})
    t, s, b = samflow.trajectory, samflow.sweep, samflow.boundary
    two = samflow.Discrete(steps=2)
    masked = np.ma.array([1.0, 2.0], mask=[False, True])

    def sq(p):
        return (p * p).sum()

    return {
        "Discrete eta": (lambda: samflow.Discrete(eta="a"), "'a'"),
        "Flow tau_max": (lambda: samflow.Flow(tau_max="a"), "'a'"),
        "rho list": (lambda: t("sam-l2", **{**one, "rho": [1, 2]}), "[1, 2]"),
        "depth None": (lambda: t("sam-l2", **{**one, "depth": None}), "None"),
        "depth True": (lambda: t("sam-l2", **{**one, "depth": True}), "True"),
        "depth huge": (lambda: t("sam-l2", **{**one, "depth": 10**12}), str(10**12)),
        "mu strings": (lambda: t("sam-l2", **{**one, "mu": ["1", "2"]}), "mu"),
        "mu empty": (lambda: t("sam-l2", **{**one, "mu": []}), "mu"),
        "mu complex": (lambda: t("sam-l2", **{**one, "mu": [1j, 2]}), "complex"),
        "X (3, 0)": (
            lambda: t("sam-l2", **{**one, "mu": None, "data": (np.ones((3, 0)), np.ones(3))}),
            "(3, 0)",
        ),
        "collapse None": (lambda: samflow.Classification(collapse_factor=None), "None"),
        "classification a number": (lambda: t("sam-l2", **one, classification=0.1), "0.1"),
        "summaries a string": (lambda: t("sam-l2", **one, summaries="yes"), "'yes'"),
        "active_threshold 0": (lambda: samflow.Summaries(active_threshold=0), "active-threshold"),
        "dtype float16": (lambda: t("sam-l2", **one, dtype="float16"), "float16"),
        "rho with gd": (lambda: t("gd", **one), "rho"),
        "alpha_range short": (lambda: s("sam-l2", **grid, alpha_range=(0.1,)), "alpha-range"),
        "plateau None": (lambda: samflow.Classification(plateau_fraction=None), "None"),
        "axis empty": (lambda: s("sam-l2", **{**grid, "axes": {"alpha": []}}), "alpha"),
        "axis strings": (lambda: s("sam-l2", **{**grid, "axes": {"alpha": ["a"]}}), "alpha"),
        "axis repeats": (lambda: s("sam-l2", **{**grid, "axes": {"alpha": [1, 1]}}), "[1.0, 1.0]"),
        "alpha beside axis": (lambda: s("sam-l2", **grid, alpha=1.0), "alpha"),
        "rho beside axis": (lambda: s("sam-l2", **{**grid, "axes": {"rho": [1, 2]}}), "rho"),
        "eta axis on a flow": (lambda: s("sam-l2", **{**grid, "axes": {"eta": [1]}}), "eta"),
        "pad_layers 1e6": (lambda: s("sam-l2", **grid, pad_layers=10**6), str(10**6)),
        "1e10 grid": (
            lambda: s("sam-l2", **{**grid, "axes": {"alpha": "1:2:10000000000"}}),
            "10000000000",
        ),
        "huge records": (
            lambda: t(
                "sam-l2", **{**one, "runner": samflow.Flow(save=samflow.LogSpaced(10**9 - 1))}
            ),
            "1000000000 records",
        ),
        "mu_set without axis": (lambda: s("sam-l2", **grid, mu_set=np.ones((2, 2))), "mu_set"),
        "save_trajectories 'yes'": (lambda: s("sam-l2", **grid, save_trajectories="yes"), "yes"),
        "boundary alpha_range": (
            lambda: b("sam-l2", **grid, search=samflow.BoundarySearch(alpha_range=(1, 0.5))),
            "alpha-range",
        ),
        "boundary alpha axis": (lambda: b("sam-l2", **grid), "alpha"),
        "rule name": (lambda: samflow.PerturbationRule("five", 5), "5"),
        "rule flag": (lambda: samflow.PerturbationRule("r", None, "yes"), "yes"),
        "Model foo": (lambda: samflow.Model("foo"), "'foo'"),
        "Model 123": (lambda: samflow.Model(123), "123"),
        "Model U2-V2": (lambda: samflow.Model("U2-V2", "squared"), "'U2-V2'"),
        "Model hinge": (lambda: samflow.Model("product", "hinge"), "'hinge'"),
        "Model loss None": (lambda: samflow.Model("uv", None), "None"),
        "Model 3-row theta": (
            lambda: samflow.Model("u2-v2").loss_fn(np.ones((1, 2)), np.ones(1))(np.ones((3, 2))),
            "(3, 2)",
        ),
        "Model theta columns": (
            lambda: samflow.Model().loss_fn(np.ones((1, 2)), np.ones(1))(np.ones((2, 3))),
            "(2, 3)",
        ),
        "fit runner": (lambda: samflow.fit(lambda p: p, 1.0, "gd", runner=flow), "runner"),
        "fit key abc": (lambda: samflow.fit(sq, np.ones(2), "gd", runner=two, key="abc"), "'abc'"),
        "fit key 5": (lambda: samflow.fit(sq, np.ones(2), "gd", runner=two, key=5), "5"),
        "fit one-argument loss, data": (
            lambda: samflow.fit(sq, np.ones(2), "gd", runner=two, data=(np.ones((3, 2)),) * 2),
            "loss_fn sq",
        ),
        "fit seed, nothing random": (
            lambda: samflow.fit(sq, np.ones(2), "gd", runner=two, seed=3),
            "seed 3",
        ),
        "trajectory seed, nothing random": (lambda: t("sam-l2", **one, seed=3), "seed 3"),
        "sweep seed on a flow": (lambda: s("sam-l2", **grid, seed=4), "seed 4"),
        "sam None": (lambda: samflow.sam(None, rho=0.1), "None"),
        "axis nested": (
            lambda: s("sam-l2", **{**grid, "axes": {"alpha": [[0.3, 1], [2, 3]]}}),
            "(2, 2)",
        ),
        "masked mu": (lambda: t("sam-l2", **{**one, "mu": masked}), "masked"),
        "masked axis": (lambda: s("sam-l2", **{**grid, "axes": {"alpha": masked}}), "masked"),
        "masked data": (
            lambda: t("sam-l2", **{**one, "mu": None, "data": (masked[None], np.ones(1))}),
            "masked",
        ),
        "dtype None": (lambda: t("sam-l2", **one, dtype=None), "None"),
        "boundary scan_points 1e9": (
            lambda: samflow.BoundarySearch(scan_points=10**9),
            str(10**9),
        ),
        "boundary alpha_range 1e-300": (
            lambda: samflow.BoundarySearch(alpha_range=(1e-300, 1e300)),
            "1e-300",
        ),
        "fit int params": (
            lambda: samflow.fit(
                lambda p: p, np.ones(2, int), "gd", runner=samflow.Discrete(steps=2)
            ),
            "float",
        ),
    }


def test_named_python_cases():
    import samflow

    cases = _python_cases()
    for name, (call, named) in cases.items():
        with pytest.raises(samflow.InputError) as err:
            call()
        message = str(err.value)
        assert "\n" not in message and named in message, (name, message)


def test_help_does_not_import_jax():
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from samflow.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "assert 'jax' not in sys.modules, 'jax imported'\n"
        "import samflow\n"
        "assert 'jax' not in sys.modules and samflow.InputError\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_a_corrupt_spec_json_is_rebuilt(tmp_path):
    import samflow

    out = tmp_path / "run.nc"
    work = tmp_path / "run.nc.work"
    work.mkdir()
    (work / "spec.json").write_text("{not json")
    other = tmp_path / ".run2.abc.nc.tmp"  # another run's file in the making
    other.write_text("x")
    ds = samflow.sweep(
        "gd",
        depth=2,
        mu=[1.0, 2.0],
        axes={"alpha": [0.5]},
        runner=samflow.Discrete(eta=0.1, steps=4),
        out=out,
    )
    assert int(ds["regime"].size) == 1 and out.exists() and other.exists()


# --- The same, drawn: bad values of every keyword of the Python API -------------------

NOT_NUMBERS = st.one_of(
    st.none(),
    st.booleans(),
    st.text(max_size=3),
    st.complex_numbers(allow_nan=False).filter(lambda z: z.imag != 0),
    st.lists(st.floats(allow_nan=False), min_size=2, max_size=3),
)
NOT_FINITE = st.sampled_from([float("nan"), float("inf"), -float("inf")])
BAD_API_VALUES = {
    "depth": st.one_of(
        NOT_NUMBERS,
        NOT_FINITE,
        st.integers(max_value=0),
        st.integers(min_value=257, max_value=10**30),
        st.floats(allow_nan=False, allow_infinity=False).filter(lambda v: not v.is_integer()),
    ),
    "rho": st.one_of(NOT_NUMBERS, NOT_FINITE, st.floats(max_value=-1e-300)),
    "alpha": st.one_of(NOT_NUMBERS.filter(lambda v: not isinstance(v, list)), NOT_FINITE),
    "collapse_factor": st.one_of(
        NOT_NUMBERS, NOT_FINITE, st.floats(allow_nan=False).filter(lambda v: not 0 < v < 1)
    ),
    "dtype": st.text(max_size=8).filter(lambda t: t not in ("float64", "float32")),
    "mu": st.one_of(
        st.just([]),
        st.lists(st.text(min_size=1, max_size=2), min_size=1, max_size=3),
        st.lists(st.floats(max_value=0), min_size=1, max_size=3),
        st.lists(st.sampled_from([float("nan"), float("inf")]), min_size=1, max_size=2),
        st.just([[1.0, 2.0]]),
        st.just([1.0, 2j]),
        st.just("1,2"),
    ),
}


@pytest.mark.parametrize("keyword", sorted(BAD_API_VALUES))
@SETTINGS
@given(data=st.data())
def test_bad_api_values(keyword, data):
    import samflow

    value = data.draw(BAD_API_VALUES[keyword], label=keyword)
    kwargs = dict(
        depth=2, mu=[1.0, 2.0], alpha=0.5, rho=1.0, runner=samflow.Flow(1.0, samflow.LogSpaced(2))
    )
    with pytest.raises(samflow.InputError) as err:
        if keyword == "collapse_factor":  # a field of the settings object
            samflow.Classification(collapse_factor=value)
        else:
            samflow.trajectory("sam-l2", **{**kwargs, keyword: value})
    message = str(err.value)
    assert "\n" not in message
    assert keyword.replace("_", "-") in message or keyword in message, message


@SETTINGS
@given(
    axis=st.sampled_from(["alpha", "rho", "eta", "depth", "seed"]),
    values=st.one_of(
        st.just([]),
        st.lists(st.text(min_size=1, max_size=2), min_size=1, max_size=3),
        st.lists(st.just(1.0), min_size=2, max_size=3),  # a repeated value
        st.lists(st.sampled_from([float("nan"), -1.0]), min_size=1, max_size=2),
    ),
)
def test_bad_api_axes(axis, values):
    import samflow

    runner = (
        samflow.Discrete(eta=0.1, steps=2)
        if axis == "eta"
        else samflow.Flow(1.0, samflow.LogSpaced(2))
    )
    rho = None if axis == "rho" else 1.0
    with pytest.raises(samflow.InputError) as err:
        samflow.sweep("sam-l2", depth=2, mu=[1.0, 2.0], rho=rho, axes={axis: values}, runner=runner)
    assert axis in str(err.value) and "\n" not in str(err.value)


def test_a_zero_d_jax_rho_is_a_number():
    """``rho=jnp.array(1.0)`` (a 0-d JAX array) runs as ``rho=1.0`` does, bit for bit."""
    import jax.numpy as jnp
    import numpy as np

    import samflow

    kw = dict(depth=2, mu=[1.0, 2.0], alpha=0.5, runner=samflow.Discrete(0.1, 10))
    a = samflow.trajectory("sam-l2", rho=jnp.array(1.0), **kw)
    b = samflow.trajectory("sam-l2", rho=1.0, **kw)
    assert a.attrs["rho"] == 1.0
    np.testing.assert_array_equal(a["beta"].values, b["beta"].values)


def test_figures_say_why_nothing_was_built(tmp_path, monkeypatch):
    """``figures --only gradcam -q`` without image data names each data set it skipped
    and why; without scikit-learn for the built-in digits too, it ends in one line
    naming what is missing (exit 2)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("SAMFLOW_DATA", raising=False)
    monkeypatch.setitem(sys.modules, "sklearn", None)  # import sklearn fails
    status, err = run_cli(["figures", "--only", "gradcam", "-q", "--out", str(tmp_path / "f")])
    assert status == 2
    assert "gradcam: skipped mnist: no mnist data found" in err
    assert "the built-in digits need scikit-learn" in err.strip().splitlines()[-1]
