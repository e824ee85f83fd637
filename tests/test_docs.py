"""The README stays a front page, and what it and the docs promise stays true.

The site itself is built by ``make test`` (``mkdocs build --strict``): broken links,
missing pages and pictures, and public names without a reference entry fail there.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_readme_is_a_front_page():
    """About 8 KB at most (diffrax's is 3 KB): what samflow is, two commands, examples."""
    assert len(README.encode()) <= 8192


def test_readme_commands_are_make_targets():
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z]+):", makefile, flags=re.M))
    for command in [*re.findall(r"^make (\w+)", README, flags=re.M), "docs"]:
        assert command in targets, command
    test_recipe = re.search(r"^test:(.*)$", makefile, flags=re.M).group(1)
    assert "docs" in test_recipe.split(), "make test must build the docs"


def test_readme_pictures_exist():
    for path in re.findall(r"!\[[^]]*\]\(([^)]+)\)", README):
        assert (ROOT / path).is_file(), path


def test_bench_writes_its_table_into_the_docs():
    from benchmarks import bench

    page = bench.DOCS_PAGE.read_text()
    assert bench.DOCS_PAGE == ROOT / "docs" / "benchmarks.md"
    assert page.count(bench.MARK_START) == 1 and page.count(bench.MARK_END) == 1
    assert bench.MARK_START not in README
