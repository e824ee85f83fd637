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


def _first_python_block(text: str) -> str:
    return re.search(r"```python\n(.*?)```", text, flags=re.S).group(1)


def _prints(code: str) -> list[tuple[str, str]]:
    """Run ``code`` (the example as written) and pair each line it prints with the
    comment of the ``print`` that wrote it (``# ...`` after the call), in order."""
    import contextlib
    import io

    promised = re.findall(r"^print\(.*\)\s*#\s*(.+)$", code, flags=re.M)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "<example>", "exec"), {})
    return list(zip(out.getvalue().splitlines(), promised, strict=True))


def test_readme_example_prints_what_its_comment_says():
    """The README's first example, run as it stands: the regime it prints is the one its
    comment names (it printed ``unresolved`` under ``# sequential`` when it ran a discrete
    trajectory whose fate 5,000 steps do not decide)."""
    code = _first_python_block(README)
    assert 'print(t.attrs["regime_meaning"])  # sequential' in code
    assert _prints(code) == [("sequential", "sequential")]


def test_getting_started_regime_is_what_its_comment_says():
    """docs/getting-started.md's first run prints the regime of the README's trajectory:
    its trajectory call, run as written (without the regime map before it, which the
    README's test runs, and the u2-v2 run after it), prints the word its comment says."""
    text = (ROOT / "docs" / "getting-started.md").read_text()
    code = _first_python_block(text)
    mark = 'print(t.attrs["regime_meaning"])  # sequential\n'
    call = code[code.index("t = samflow.trajectory(") : code.index(mark) + len(mark)]
    assert _prints("import samflow\n" + call) == [("sequential", "sequential")]
