"""Every bad input exits 2 with one line naming the value, before any computation.

Property-based: hypothesis draws malformed axis strings, numbers (negative, zero, NaN,
inf, huge, non-numeric, unicode digits) and paths for each subcommand's options. The
command runs in this process (``samflow.cli.main``); a bad value must be refused
before the engine starts, so every example is fast, and no example may print a
traceback or more than one line.
"""

import contextlib
import io
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
