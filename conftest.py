"""Every example of README.md and docs/ runs as a test (Sybil; docs/contributing.md says
why this tool).

Each Markdown file is one document: its ``python`` blocks run in order in one namespace,
its ``bash`` blocks in a shell, all in a fresh working directory of the document's own
(so ``out/``, ``data.npz`` and the like go there, and a block can use the files an
earlier block of the same page made). ``samflow`` in a shell block is this interpreter's
samflow command. A block that cannot run here (the test command itself, a
download) is preceded by ``<!-- skip: next "reason" -->``; an output the text claims is
checked by an ``<!-- invisible-code-block: python -->`` assertion after it. Blocks in
other languages (``text`` for signatures and synopses, ``bibtex``) are not run;
tests/test_docs.py checks that no page uses another language for something runnable.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

try:
    from sybil import Sybil
    from sybil.parsers.markdown import (
        ClearNamespaceParser,
        CodeBlockParser,
        PythonCodeBlockParser,
        SkipParser,
    )
except ImportError:  # a run of tests/ alone does not need it; the docs' run says so
    Sybil = None
    CodeBlockParser = object

SHELL_TIMEOUT = 300  # seconds for one shell block; the longest takes about 30 s


def _samflow_function() -> str:
    """A shell function ``samflow`` that runs this interpreter's samflow (the console
    script may be missing from PATH, or be another installation's)."""
    return f'samflow() {{ {shlex.quote(sys.executable)} -m samflow.cli "$@"; }}\n'


class BashParser(CodeBlockParser):
    """Shell blocks: bash, strict mode, in the page's directory."""

    language = "bash"

    def evaluate(self, example) -> str | None:
        script = "set -euo pipefail\n" + _samflow_function() + example.parsed
        env = {**os.environ, "MPLBACKEND": "Agg"}
        done = subprocess.run(
            ["bash", "-c", script],
            cwd=example.namespace["__cwd__"],
            env=env,
            capture_output=True,
            text=True,
            timeout=SHELL_TIMEOUT,
        )
        if done.returncode != 0:
            return (
                f"the shell block exited {done.returncode}\n--- stdout\n{done.stdout}"
                f"--- stderr\n{done.stderr}"
            )
        return None


def _setup(namespace: dict) -> None:
    """A fresh working directory for the page, and matplotlib without a display."""
    import matplotlib

    matplotlib.use("Agg")
    tmp = tempfile.mkdtemp(prefix="samflow-docs-")
    namespace["__cwd__"] = tmp
    namespace["__old_cwd__"] = os.getcwd()
    os.chdir(tmp)


def _teardown(namespace: dict) -> None:
    import shutil

    import matplotlib.pyplot as plt

    plt.close("all")
    os.chdir(namespace["__old_cwd__"])
    shutil.rmtree(namespace["__cwd__"], ignore_errors=True)


def _sybil():
    return Sybil(
        parsers=[PythonCodeBlockParser(), BashParser(), SkipParser(), ClearNamespaceParser()],
        patterns=["*.md"],
        setup=_setup,
        teardown=_teardown,
    )


def pytest_collect_file(file_path: Path, parent):
    # only the documentation: README.md and docs/ (tests/ and benchmarks/ have no examples)
    root = Path(__file__).resolve().parent
    if file_path == root / "README.md" or root / "docs" in file_path.parents:
        if Sybil is None:
            return _NoSybil.from_parent(parent, path=file_path)
        return _sybil().pytest()(file_path, parent)
    return None


class _NoSybil(pytest.File):
    """A page whose examples cannot run: one failing test that says why (not a silent
    pass; a run of tests/ alone never selects it)."""

    def collect(self):
        yield _NoSybilItem.from_parent(self, name="examples")


class _NoSybilItem(pytest.Item):
    def runtest(self):
        raise ImportError("the documentation's examples run with Sybil: pip install -e '.[dev]'")

    def reportinfo(self):
        return self.path, None, f"{self.path.name}: examples"
