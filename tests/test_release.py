"""The release installs and runs without the clone.

``python -m build`` makes an sdist and, from that sdist (so the sdist is complete), a
wheel; both pass ``twine check --strict``. The wheel is then installed into a new
virtual environment and run from a folder outside the clone, with ``PYTHONPATH`` unset:
the installed ``samflow`` command makes the quick staircase figure, and the README's
Python example prints what its comment says.

CI reaches only package registries, and samflow's dependencies (JAX, SciPy, ...) are
large: the new environment does not download them. The wheel goes in with
``--no-deps``, and one ``.pth`` line names this environment's site-packages for the
dependencies. A ``.pth`` line adds a folder to ``sys.path`` but runs none of the
``.pth`` files inside it, so this checkout's editable install (itself a ``.pth`` file
there) is not seen: what runs is the wheel's own content, its modules, its ``samflow``
entry point and its metadata (the version), which the test checks by where ``samflow``
is imported from. The dependencies' versions are this environment's, not a fresh
resolution of ``pyproject.toml``'s ranges.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
import venv
from pathlib import Path

import netCDF4
import pytest

ROOT = Path(__file__).resolve().parent.parent
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def _run(args, cwd, env, timeout=300) -> str:
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"{args}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def readme_example() -> tuple[str, list[str]]:
    """The README's Python example and the outputs its print lines' comments claim."""
    text = (ROOT / "README.md").read_text()
    match = re.search(r"^## Python\n.*?^```python\n(.*?)^```", text, re.M | re.S)
    assert match, "README.md has no ## Python section with a python block"
    code = match.group(1)
    claims = re.findall(r"^\s*print\(.*\)\s+#\s*(.+?)\s*$", code, re.M)
    assert claims, "the README's example claims no output"
    return code, claims


@pytest.mark.slow
def test_built_wheel_installs_and_runs_without_the_clone(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # no clone on the path
    dist = tmp_path / "dist"
    # --no-isolation: the build backend is this environment's setuptools (the dev
    # extra), not one downloaded for the build.
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", dist, ROOT], ROOT, env)
    wheel = dist / f"samflow-{VERSION}-py3-none-any.whl"
    sdist = dist / f"samflow-{VERSION}.tar.gz"
    assert sorted(dist.iterdir()) == [wheel, sdist]
    checked = _run([sys.executable, "-m", "twine", "check", "--strict", wheel, sdist], ROOT, env)
    assert checked.count("PASSED") == 2, checked
    with tarfile.open(sdist) as tar:
        names = {name.split("/", 1)[-1] for name in tar.getnames()}
    assert {"CHANGELOG.md", "CITATION.cff", "README.md", "samflow/cli.py"} <= names
    assert not any(name.startswith("tests/") for name in names)  # they need the clone

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python, command = env_dir / "bin" / "python", env_dir / "bin" / "samflow"
    purelib = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = Path(_run([python, "-c", purelib], tmp_path, env).strip())
    here = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    (site / "dependencies.pth").write_text("".join(f"{p}\n" for p in sorted(here)))
    pip = [sys.executable, "-m", "pip", "--python", python, "install", "--quiet"]
    _run([*pip, "--no-deps", "--no-index", wheel], tmp_path, env)

    work = tmp_path / "work"  # no clone here
    work.mkdir()
    where = "import samflow; print(samflow.__file__, samflow.__version__)"
    file, version = _run([python, "-c", where], work, env).split()
    assert Path(file).is_relative_to(site / "samflow"), file  # the wheel's own copy
    assert version == VERSION
    assert _run([command, "--version"], work, env).strip() == f"samflow {VERSION}"

    _run([command, "figures", "--quick", "--only", "staircase", "--out", "figures"], work, env)
    made = sorted(p.name for p in (work / "figures").iterdir())
    assert made == ["staircase.pdf", "staircase.png", "staircase_gd.nc", "staircase_l2sam.nc"]
    assert (work / "figures" / "staircase.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with netCDF4.Dataset(work / "figures" / "staircase_l2sam.nc") as nc:
        assert nc.getncattr("samflow_version") == VERSION  # written by the installed wheel

    code, claims = readme_example()
    (work / "example.py").write_text(code)
    printed = _run([python, "example.py"], work, env).splitlines()
    assert len(printed) >= len(claims), printed
    for line, claim in zip(printed[-len(claims) :], claims, strict=True):
        pattern = ".*".join(map(re.escape, claim.split("...")))
        assert re.fullmatch(pattern, line), (line, claim)


def test_version_changelog_and_citation_agree():
    # One version everywhere a reader looks: the newest changelog entry, CITATION.cff
    # (the software and, for the paper, its arXiv address) and the package metadata.
    import yaml

    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert re.findall(r"^## \[(\d+\.\d+\.\d+)\]", changelog, re.M)[0] == VERSION
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["version"] == VERSION
    paper = cff["preferred-citation"]
    assert paper["url"] == "https://arxiv.org/abs/2603.08290"
    assert paper["authors"][0] == {"family-names": "Moon", "given-names": "Chaewon"}
    manifest = (ROOT / "MANIFEST.in").read_text()
    assert "CHANGELOG.md" in manifest and "CITATION.cff" in manifest  # in the sdist
