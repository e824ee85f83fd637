"""Every public function and class shows an example in its docstring, and the test
command runs those examples as doctests (``--doctest-modules`` over the package, set in
pyproject's pytest options, so ``make test`` collects them).

Public: what ``samflow.__all__`` exports, and the modules the reference documents by
their own names (``samflow.images.study``, ``samflow.oracles``). Constants (``GD``,
``METHODS``, ``FLAG_MEANINGS``, ...) hold no docstring of their own that doctest could
run; the examples of the functions that take them use them.
"""

import inspect
import re
import tomllib
from pathlib import Path

import pytest

import samflow
from samflow import oracles
from samflow.images import study

ROOT = Path(__file__).resolve().parent.parent


def _public():
    for name in sorted(samflow.__all__):
        value = getattr(samflow, name)
        if inspect.isfunction(value) or inspect.isclass(value):
            yield f"samflow.{name}", value
    yield "samflow.images.study", study
    for name, value in sorted(vars(oracles).items()):
        if name.startswith("_") or getattr(value, "__module__", None) != oracles.__name__:
            continue
        if inspect.isfunction(value) or inspect.isclass(value):
            yield f"samflow.oracles.{name}", value


PUBLIC = dict(_public())


def test_the_public_names_are_the_ones_listed():
    # 16 classes and 6 functions at the top level, study, and the oracles' 10.
    assert len(PUBLIC) == 33, sorted(PUBLIC)


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_public_name_has_an_example(name):
    doc = inspect.getdoc(PUBLIC[name]) or ""
    examples = doc.split("\nExamples:\n", 1)[-1] if "\nExamples:\n" in doc else ""
    assert re.search(r"^\s+>>> ", examples, re.M), f"{name}: no Examples section with >>>"


def test_the_test_command_runs_the_doctests():
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    options = options["ini_options"]
    assert "--doctest-modules" in options["addopts"].split()
    assert "samflow" in options["testpaths"]
    assert {"NUMBER", "ELLIPSIS"} <= set(options["doctest_optionflags"])
