"""Griffe extensions for the API reference.

- ``SphinxRoles``: samflow's docstrings name other objects the Sphinx way
  (``:func:`samflow.sweep```); Markdown has no roles, so each becomes a code span
  (`` `samflow.sweep` ``).
- ``PublicNames``: the public names of ``samflow`` load on first use (PEP 562,
  ``samflow._WHERE``), which griffe's static analysis does not see; each becomes an
  alias of its definition, so that ``::: samflow.boundary`` documents
  ``samflow._boundary.boundary`` under its public path and anchor (``#samflow.boundary``).
"""

from __future__ import annotations

import re

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|class|mod|meth|data|attr|exc|obj|const|term):`~?([^`]+)`")


class SphinxRoles(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(r"`\1`", obj.docstring.value)


class PublicNames(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        if pkg.name != "samflow":
            return
        import samflow  # light: the public names load lazily, JAX is not imported

        for name, module in samflow._WHERE.items():
            if name not in pkg.members:
                pkg.set_member(name, griffe.Alias(name, f"{module}.{name}", parent=pkg))
