"""The README stays a front page, and what it and the docs promise stays true.

The examples themselves run as tests through Sybil (conftest.py at the root); the
tests here check that every example is one that runs, or is marked as not runnable.

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


PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
RUN = {"python", "bash"}  # run by conftest.py (Sybil)
INERT = {"text", "bibtex"}  # signatures, synopses, messages, citations: not run


def _fences(text: str) -> list[tuple[str, str]]:
    """Each fenced block's language and body (indented fences included)."""
    return re.findall(r"^[ \t]*```(\S*)[^\n]*\n(.*?)^[ \t]*```", text, flags=re.M | re.S)


def test_every_example_is_run_or_marked_inert():
    """A fenced block is Python or shell (both run as tests, conftest.py) or one of the
    inert languages: a block fenced ``sh``, ``console`` or without a language would be
    shown with a copy button and never run."""
    for page in PAGES:
        for language, _ in _fences(page.read_text()):
            assert language in RUN | INERT, f"{page.relative_to(ROOT)}: ```{language}"


def test_claimed_outputs_are_checked():
    """A ``print(...)  # value`` in an example claims what it prints: an invisible
    assertion (``<!-- invisible-code-block: python``) follows the block and checks it."""
    claims = 0
    for page in PAGES:
        text = page.read_text()
        for match in re.finditer(r"^```python\n(.*?)^```\n", text, flags=re.M | re.S):
            if re.search(r"^print\(.*\)\s*#\s*\S", match.group(1), flags=re.M):
                claims += 1
                after = text[match.end() :].lstrip("\n")
                assert after.startswith("<!-- invisible-code-block: python"), (
                    f"{page.relative_to(ROOT)}: a print with a claimed output and no check"
                )
    assert claims >= 2  # the README's regime and getting started's test error


def test_signatures_are_not_fenced_as_code():
    """A signature (``name(..., *, ...) -> type``) in a Python block does not run."""
    for page in PAGES:
        for language, body in _fences(page.read_text()):
            if language == "python":
                assert not re.search(r"^\S.*\) -> ", body, flags=re.M), page.name


def test_no_markdown_link_inside_an_example():
    """A Markdown link in a code block shows literally (``[text](page.md)``)."""
    for page in PAGES:
        for _, body in _fences(page.read_text()):
            assert not re.search(r"\]\([\w/.-]+\.md(#[\w-]+)?\)", body), page.name


def test_figure_numbers_follow_the_list():
    """A figure module that numbers itself ("Figure N: ...", the first line that
    ``samflow figures --list`` prints) has the number of its place in ``FIGURES``, as
    the gallery and figures.md have (they disagreed from the 11th figure on)."""
    import ast

    from samflow.figures import FIGURES

    for number, name in enumerate(FIGURES, 1):
        source = (ROOT / "samflow" / "figures" / f"{name}.py").read_text()
        doc = ast.get_docstring(ast.parse(source)) or ""
        own = re.match(r"Figure (\d+)", doc)
        assert own is None or int(own.group(1)) == number, (name, own.group(0), number)
    figures_page = (ROOT / "docs" / "figures.md").read_text()
    sections = re.findall(r"^## (\d+)\. `(\w+)`", figures_page, flags=re.M)
    assert [(int(n), name) for n, name in sections] == list(enumerate(FIGURES, 1))


def test_docstring_citations_become_links():
    """docs/hooks.py turns a docstring's ``docs/theory/X.md#anchor`` into a link named by
    the heading, relative to the page; a page that does not exist fails the build."""
    import sys
    from types import SimpleNamespace

    import pytest

    sys.path.insert(0, str(ROOT / "docs"))
    try:
        import hooks
    finally:
        sys.path.remove(str(ROOT / "docs"))
    from mkdocs.exceptions import PluginError

    page = SimpleNamespace(file=SimpleNamespace(src_uri="reference/runs.md"))
    html = "<p>see (docs/theory/flows.md#rescaled-flows) and <code>docs/faq.md</code></p>"
    out = hooks.cite_links(html, page)
    assert '<a href="../theory/flows.html#rescaled-flows">Rescaled flows</a>' in out
    assert '<a href="../faq.html">FAQ and troubleshooting</a>' in out
    # inside a code block it stays text
    pre = "<pre><code>docs/theory/flows.md#rescaled-flows</code></pre>"
    assert hooks.cite_links(pre, page) == pre
    with pytest.raises(PluginError, match="no page"):
        hooks.cite_links("<p>docs/theory/nowhere.md#x</p>", page)


def test_display_formulas_start_a_line():
    r"""A display formula ``\[ ... \]`` is typeset only where it starts a line of its own
    at the margin: indented (in a list item, say), Markdown reads it as the paragraph's
    continuation, the backslash is taken as an escape and the page shows ``[ F_c(x_a) ...
    ]`` as text (docs/theory/regimes.md had nine such). Inside a list item a formula is
    written inline, ``\( \displaystyle ... \)``."""
    pages = sorted((ROOT / "docs").rglob("*.md"))
    assert len(pages) > 10
    bad = [
        f"{page.relative_to(ROOT)}:{k}"
        for page in pages
        for k, line in enumerate(page.read_text().splitlines(), 1)
        if re.match(r"\s+\\\[", line)
    ]
    assert bad == [], bad
