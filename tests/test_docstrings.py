"""Every public name of ``samflow`` documents itself fully, as the API reference shows
it: a function its arguments, what it returns and what it raises; a class its
attributes and what its constructor raises; a constant what it holds. Read the way the
docs site reads them (griffe, Google style), so a section the site would not show is
missing here too."""

from __future__ import annotations

import griffe
import pytest

import samflow

PACKAGE = griffe.load("samflow", docstring_parser="google", resolve_aliases=True)
PUBLIC = sorted(set(samflow.__all__) - {"__version__"})


def _sections(obj) -> set[str]:
    if obj.docstring is None:
        return set()
    return {section.kind.value for section in obj.docstring.parse("google")}


@pytest.mark.parametrize("name", PUBLIC)
def test_public_name_documented(name):
    module = getattr(samflow, name).__module__ if name not in samflow._WHERE else None
    path = (samflow._WHERE.get(name) or module).removeprefix("samflow")
    obj = PACKAGE[f"{path.removeprefix('.')}.{name}".removeprefix(".")]
    obj = obj.final_target if obj.is_alias else obj
    assert obj.docstring is not None and obj.docstring.value.strip(), f"{name}: no docstring"
    sections = _sections(obj)
    if obj.is_function:
        wanted = {"raises"}
        if any(p.name not in ("self", "cls") for p in obj.parameters):
            wanted.add("parameters")
        if str(obj.returns) != "None":
            wanted.add("returns")
    elif obj.is_class and any(b.endswith(("Error", "Exception")) for b in map(str, obj.bases)):
        wanted = set()  # an exception: its docstring says when it is raised
    elif obj.is_class:
        wanted = {"attributes"}
        if {"__post_init__", "__init__"} & set(obj.members):  # a constructor that checks
            wanted.add("raises")
    else:
        wanted = set()  # a constant: its docstring says what it holds
    missing = wanted - sections
    assert not missing, f"{name}: no {', '.join(sorted(missing))} section"
