r"""The formulas of the public docstrings stay typeset.

The reference pages (docs/reference/, rendered by mkdocstrings) and the gallery (figure
modules' docstrings, docs/hooks.py) show docstrings through pymdownx.arithmatex and KaTeX:
a formula is written ``\( ... \)`` inline or ``\[ ... \]`` on its own lines. A formula
written as ASCII (``alpha^(2 - 2|s_i|)``, ``||beta||_1``) shows as code or plain text.
These tests read the docstrings the site shows, statically as mkdocstrings does (griffe,
no import of JAX), and look for tokens that only ASCII mathematics has.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import griffe

import samflow

ROOT = Path(__file__).resolve().parent.parent

# Tokens no Python code or prose has, only ASCII mathematics: a norm, a power, a braced
# or parenthesised subscript, sqrt, an asymptotic "~", a derivative, argmax/argmin of
# something, an absolute value |x|.
ASCII_MATH = re.compile(
    r"\|\|"  # ||beta||_1
    r"|[\w)]\^[\w(+-]"  # alpha^2, u^(L-1), e^-z, X^+
    r"|_\{"  # mu_{d-1}
    r"|\b[A-Za-z]\w*_\(\w"  # mu_(d)
    r"|(?<![\w.])sqrt\b"  # sqrt 2 (np.sqrt is code)
    r"|\S ~ \S"  # |beta_i| ~ alpha^2
    r"|\bd ?log\b|\bd\w{0,5} ?/ ?d(?:t|tau|T)\b"  # d log u / dt, du/dtau
    r"|\barg(?:max|min)(?:_\w|\s*[{(|]|\s+[A-Z]\w*_)"  # argmax_j, argmin ||beta||
    r"|(?<![\w|])\|[A-Za-z][^|\s]*\|(?![\w|])"  # |beta_j|
)
TYPESET = re.compile(r"\\\(.*?\\\)|\\\[.*?\\\]", flags=re.S)


def untypeset_math(doc: str) -> list[str]:
    """The ASCII-mathematics tokens of docstring ``doc`` outside its typeset formulas and
    its doctest examples (code: a ``>>>`` line and what follows it up to a blank line)."""
    text = TYPESET.sub(" ", doc)
    kept, in_example = [], False
    for line in text.split("\n"):
        stripped = line.strip()
        if stripped.startswith(">>>"):
            in_example = True
        elif not stripped:
            in_example = False
        if not in_example:
            kept.append(line)
    return [m.group(0) for m in ASCII_MATH.finditer("\n".join(kept))]


def _reference_entries() -> list[str]:
    names = []
    for page in sorted((ROOT / "docs" / "reference").glob("*.md")):
        names += re.findall(r"^::: (samflow[\w.]*)\s*$", page.read_text(), flags=re.M)
    return names


@functools.cache
def public_docstrings() -> dict[str, str]:
    """Every docstring the site shows: each ``::: samflow.X`` entry of docs/reference/
    with its public members (mkdocstrings' ``filters: ["!^_"]``), and each figure
    module's (the gallery's text)."""
    pkg = griffe.load("samflow", search_paths=[str(ROOT)], resolve_aliases=False)
    docs: dict[str, str] = {}

    def walk(obj) -> None:
        if obj.is_alias:  # an import, documented where it is defined
            return
        if obj.docstring is not None:
            docs[obj.path] = obj.docstring.value
        if obj.is_module or obj.is_class:
            for name, member in obj.members.items():
                if not name.startswith("_"):
                    walk(member)

    for entry in _reference_entries():
        parts = entry.split(".")[1:]
        if len(parts) == 1 and parts[0] in samflow._WHERE:  # a lazy public name
            parts = [*samflow._WHERE[parts[0]].split(".")[1:], parts[0]]
        walk(pkg[".".join(parts)])

    from samflow.figures import FIGURES

    for name in FIGURES:
        source = (ROOT / "samflow" / "figures" / f"{name}.py").read_text()
        docs[f"figure {name}"] = ast.get_docstring(ast.parse(source)) or ""
    return docs


def test_the_scan_reads_the_documented_docstrings():
    """Not vacuous: the scan finds the reference's and the gallery's docstrings, and the
    formulas in them."""
    from samflow.figures import FIGURES

    docs = public_docstrings()
    assert len(_reference_entries()) >= 30
    for path in (
        "samflow.oracles",
        "samflow.oracles.saddle_to_saddle",
        "samflow.theory.l2sam_direct_edge",
        "samflow.model.Model",
        "samflow.rules.SAM_L2",  # an attribute's docstring
        "samflow.runners.Discrete",
    ):
        assert path in docs, path
    assert sum(key.startswith("figure ") for key in docs) == len(FIGURES)
    assert len(docs) >= 120
    formulas = sum(len(TYPESET.findall(doc)) for doc in docs.values())
    assert formulas >= 400, formulas


def test_the_detector_flags_ascii_math_and_spares_code():
    bad = [
        "the edge ``alpha = rho (mu_d + mu_{d-1}) / (sqrt 2 ||mu||)``",
        "``|beta_i| ~ alpha^(2 - 2|s_i|)``",
        "grows like u_j^(L-2)",
        "``d log u_j / dtau = mu_j (1 - rho mu_j / N)``",
        "the leader ``argmax_j |beta_j|``",
        "``mu_(d) > mu_(d-1)``",
        "Then\n\n    du/dtau = mu u^(L-1)\n\nso",  # a display written as a code block
        "the test error ||beta - beta*||^2",
        "the pseudo-inverse solution ``X^+ y``",
    ]
    for text in bad:
        assert untypeset_math(text), text
    good = [
        r"the edge \(\alpha = \rho (\mu_d + \mu_{d-1}) / (\sqrt 2 \lVert \mu\rVert)\)",
        "Then\n\n\\[\n\\mathrm{d}u/\\mathrm{d}\\tau = \\mu u^{L-1}\n\\]\n\nso",
        "``params + rho * eps(grads)`` and ``jnp.sqrt(x)``; ``tau_max``, ``beta_star``",
        "``[rows, d, *batch]``, ``update(grads, state, params, *, grad_fn, **extra)``",
        "``str | None``; ``2 ** 53``; *emphasis* and ``a | b``; the argmax is unique",
        "Examples:\n    >>> float(np.linalg.norm(x) ** 2)  # ||x||^2\n    4.0",
    ]
    for text in good:
        assert not untypeset_math(text), text


def test_no_formula_of_a_public_docstring_is_ascii():
    r"""A formula in a docstring is written ``\( ... \)`` or ``\[ ... \]`` (code names
    such as ``tau_max`` stay code): ASCII mathematics shows untypeset on the site."""
    found = {
        path: hits for path, doc in public_docstrings().items() if (hits := untypeset_math(doc))
    }
    assert not found, found


def test_typeset_docstrings_are_raw_and_balanced():
    r"""A docstring with formulas is a raw string: in a plain one ``\tau``, ``\beta``,
    ``\nu`` and ``\rho`` would become a tab, a backspace, a newline and a carriage return
    (``\(`` alone is only a warning). Every ``\(`` and ``\[`` is closed."""
    for path, doc in public_docstrings().items():
        if "\\(" not in doc and "\\[" not in doc:
            continue
        assert not re.search(r"[\t\b\a\f\v\r]", doc), f"{path}: not a raw docstring"
        assert doc.count("\\(") == doc.count("\\)"), path
        assert doc.count("\\[") == doc.count("\\]"), path
