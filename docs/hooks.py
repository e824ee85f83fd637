"""mkdocs hooks: the pages that are generated from the code, so that they cannot drift.

- ``cli.md``: every subcommand's ``--help``, from the parsers of :mod:`samflow.cli`;
- ``files.md``: every variable and attribute of every kind of file, from
  :mod:`samflow.schema`;
- ``gallery.md``: every figure of :data:`samflow.figures.FIGURES`, its module's
  docstring, its picture in ``docs/gallery/`` and the command that builds it;
- ``reference/*.md``: the reference by topic; a public name of ``samflow.__all__``
  without a ``::: samflow.NAME`` entry on one of its pages fails the build. Entries keep
  their public path (``samflow.boundary``, not the module that defines it), and so do
  their anchors;
- every page: a docstring's citation of a page of the site as plain text
  (``docs/theory/flows.md#rescaled-flows``, how the source cites it) becomes a link to
  that page and section, named by its heading; a citation of a page or heading that does
  not exist fails the build (a heading that does not exist links the page, said in the
  log).

Each page holds a marker (``<!-- cli -->``, ``<!-- schema:KIND -->``, ``<!-- gallery
-->``) where the generated text goes.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import logging
import os
import re
from pathlib import Path

from mkdocs.exceptions import PluginError

log = logging.getLogger("mkdocs.hooks")

DOCS = Path(__file__).resolve().parent
HELP_WIDTH = "86"


def on_page_markdown(markdown: str, page, config, files) -> str:
    name = page.file.src_uri
    if name == "cli.md":
        return markdown.replace("<!-- cli -->", cli_page())
    if name == "files.md":
        return re.sub(r"<!-- schema:(\w+) -->", lambda m: schema_tables(m.group(1)), markdown)
    if name == "gallery.md":
        return markdown.replace("<!-- gallery -->", gallery())
    if name.startswith("reference/"):
        return reference(markdown)
    return markdown


def on_page_content(html: str, page, config, files) -> str:
    return cite_links(html, page)


def on_post_build(config) -> None:
    import samflow

    missing = sorted(set(samflow.__all__) - _NAMED - {"__version__"})
    if missing:
        raise PluginError(f"reference/: public names without an entry: {', '.join(missing)}")


# ---- The command line ---------------------------------------------------------------


def cli_page() -> str:
    from samflow.cli import LAZY_COMMANDS, build_parser

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_WIDTH  # argparse wraps to the terminal's width
    try:
        top = build_parser()
        out = [_help_block("samflow", top, level=2)]
        for command in _subparsers(top):
            # a lazy command's options exist only once its module is imported
            parser = build_parser([command]) if command in LAZY_COMMANDS else top
            out += _commands(f"samflow {command}", _subparsers(parser)[command], level=2)
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old
    return "\n".join(out)


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _commands(prog: str, parser: argparse.ArgumentParser, level: int) -> list[str]:
    out = [_help_block(prog, parser, level)]
    for name, sub in _subparsers(parser).items():
        out += _commands(f"{prog} {name}", sub, level + 1)
    return out


def _help_block(prog: str, parser: argparse.ArgumentParser, level: int) -> str:
    anchor = prog.replace(" ", "-")
    return f"{'#' * level} `{prog}` {{ #{anchor} }}\n\n```text\n{parser.format_help()}```\n"


# ---- The file format ----------------------------------------------------------------

TEMPLATE_FIELDS = {
    "tau_name": "rescaled time tau (one point, margin loss), else the time eta * steps",
    "tau_symbol": "tau or t",
    "loss_name": "the run's",
    "match_loss": "the matched",
    "j": "j",
}


def schema_tables(kind: str) -> str:
    from samflow import schema

    if kind not in schema.SCHEMAS:
        raise PluginError(f"files.md: no schema of kind {kind!r} (kinds: {list(schema.SCHEMAS)})")
    s = schema.SCHEMAS[kind]
    rows = ["| name | dims | dtype | units | meaning | there |", "|---|---|---|---|---|---|"]
    notes = []
    for name, var in s.variables.items():
        dims = ", ".join("&lt;grid&gt;" if d == schema.GRID else d for d in var.dims)
        dtype = "float (the run's)" if var.dtype == schema.FLOAT else var.dtype
        role = " (coordinate)" if var.coord else ""
        meaning, more = _meaning(var)
        rows.append(
            f"| `{name}`{role} | {dims or 'scalar'} | {dtype} | `{var.units}` | "
            f"{_cell(meaning)} | {_cell(_when(var.when, var.classified))} |"
        )
        notes += [f"- `{name}`, {key}: {_cell(text)}" for key, text in more]
    attrs = ["| attribute | meaning | there |", "|---|---|---|"]
    for name, attr in s.attrs.items():
        when = _when(attr.when, attr.classified)
        attrs.append(f"| `{name}` | {_cell(_fill(attr.meaning))} | {_cell(when)} |")
    notes = ["", "Notes:", "", *notes] if notes else []
    parts = ["**Variables**", "", *_styled(rows), *notes, "", "**Global attributes**", ""]
    return "\n".join([*parts, *_styled(attrs)])


def _styled(table: list[str]) -> list[str]:
    """A table in a block styled by docs/stylesheets/extra.css (names on one line)."""
    return ['<div class="schema-table" markdown>', "", *table, "", "</div>"]


def _meaning(var) -> tuple[str, list[tuple[str, str]]]:
    """The variable's meaning for its table row, and its longer CF notes for below."""
    text = _fill(var.long_name)
    extra = dict(var.attrs)
    if "flag_meanings" in extra:
        values = [int(v) for v in extra.pop("flag_values")]
        pairs = zip(values, str(extra.pop("flag_meanings")).split(), strict=True)
        text += ". Values: " + ", ".join(f"{v} {m}" for v, m in pairs)
    extra.pop("symbol", None)
    return text, [(key, _fill(str(value))) for key, value in extra.items()]


def _fill(text: str) -> str:
    return re.sub(r"\{(\w+)(?::[^}]*)?\}", lambda m: TEMPLATE_FIELDS.get(m[1], m[0]), text)


def _when(when: str | None, classified: bool) -> str:
    parts = ([when] if when else []) + (["where the model classifies"] if classified else [])
    return "; ".join(parts) or "always"


def _cell(text: str) -> str:
    """Plain text in a table cell: no table, emphasis or HTML syntax."""
    for a, b in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ("|", "&#124;"), ("*", r"\*")):
        text = text.replace(a, b)
    return text.replace("_", r"\_")


# ---- The gallery --------------------------------------------------------------------


def gallery() -> str:
    from samflow.figures import FIGURES

    out = []
    for number, name in enumerate(FIGURES, 1):
        picture = DOCS / "gallery" / f"{name}.png"
        if not picture.exists():
            raise PluginError(
                f"gallery.md: no picture docs/gallery/{name}.png (build it with "
                f"`samflow figures --quick --only {name}` and copy its PNG there)"
            )
        title, body = _docstring(name)
        # the number is the figure's place in FIGURES (as in figures.md and the
        # command's list), whatever number its docstring gives itself
        rest = re.sub(r"^Figure \d+:?\s*", "", title)
        sep = " " if rest.startswith("(") else ": "
        title = f"Figure {number}{sep}{rest}"
        out += [
            f"## {number}. `{name}` {{ #{name} }}",
            "",
            f"**{title}**",
            "",
            f"[![{name}](gallery/{name}.png)](gallery/{name}.png)",
            "",
            "```bash",
            f"samflow figures --quick --only {name} --out figures",
            "```",
            "",
            body,
            "",
            f"More: [{name} in detail](figures.md#{name}).",
            "",
        ]
    return "\n".join(out)


def _docstring(name: str) -> tuple[str, str]:
    """The first paragraph and the rest of figure ``name``'s module docstring, read from
    its source (importing the figures would import JAX and matplotlib)."""
    spec = importlib.util.find_spec(f"samflow.figures.{name}")
    if spec is None or spec.origin is None:
        raise PluginError(f"gallery.md: no module samflow.figures.{name}")
    doc = ast.get_docstring(ast.parse(Path(spec.origin).read_text())) or name
    title, _, body = doc.partition("\n\n")
    return _rst(" ".join(title.split())), _rst(body)


def _rst(text: str) -> str:
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text)  # :func:`x` -> `x`
    return text.replace("``", "`")


# ---- The API reference --------------------------------------------------------------

_NAMED: set[str] = set()


def reference(markdown: str) -> str:
    """Record the public names with an entry on this page (checked after the build)."""
    _NAMED.update(re.findall(r"^::: samflow\.(\w+)[ \t]*$", markdown, flags=re.M))
    return markdown


# ---- Citations of pages in docstrings -----------------------------------------------

CITE = re.compile(
    r"(?:<code>)?(?<![\w/\"=.])docs/((?:theory/)?[\w-]+)\.md(?:#([\w-]+))?(?:</code>)?"
)


def _titles(src: str) -> dict[str | None, str]:
    """The headings of page ``src`` (relative to docs/): anchor -> text, None -> its
    title."""
    path = DOCS / src
    if not path.is_file():
        return {}
    text = path.read_text()
    titles: dict[str | None, str] = {}
    for level, heading, anchor in re.findall(
        r"^(#+)\s+(.*?)\s*(?:\{\s*#([\w-]+)\s*\})?\s*$", text, flags=re.M
    ):
        plain = heading.replace("`", "")
        if level == "#" and None not in titles:
            titles[None] = plain
        slug = anchor or re.sub(r"[^\w\- ]", "", plain.lower()).strip().replace(" ", "-")
        titles.setdefault(slug, plain)
    # Paragraph sections: an anchor of its own before a bold title (docs/theory/regimes.md)
    for anchor, title in re.findall(r'^<a id="([\w-]+)"></a>\s*\n\*\*(.+?)\*\*', text, flags=re.M):
        titles.setdefault(anchor, title.replace("`", ""))
    return titles


def cite_links(html: str, page) -> str:
    """``docs/X.md#anchor`` in rendered text (docstrings) -> a link to that section."""
    if "docs/" not in html:
        return html
    depth = page.file.src_uri.count("/")
    up = "../" * depth

    def link(match: re.Match) -> str:
        src, anchor = match.group(1) + ".md", match.group(2)
        titles = _titles(src)
        if not titles:
            raise PluginError(
                f"{page.file.src_uri}: a docstring cites {match.group(0)!r}, no page of the site"
            )
        if anchor and anchor not in titles:
            # a section not there (yet): the page itself, said in the build's log
            log.info(
                "%s: cites %s, no such heading: linked to the page",
                page.file.src_uri,
                match.group(0),
            )
            anchor = None
        text = titles[anchor] if anchor else titles.get(None, src)
        href = up + src[:-3] + ".html" + (f"#{anchor}" if anchor else "")
        return f'<a href="{href}">{text}</a>'

    # not inside code blocks (<pre>): split them out
    parts = re.split(r"(<pre.*?</pre>)", html, flags=re.S)
    return "".join(p if p.startswith("<pre") else CITE.sub(link, p) for p in parts)
