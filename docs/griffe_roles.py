"""A griffe extension for the API reference: Sphinx roles in docstrings as code.

samflow's docstrings name other objects the Sphinx way (``:func:`samflow.sweep```);
Markdown has no roles, so each becomes a code span (`` `samflow.sweep` ``).
"""

from __future__ import annotations

import re

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|class|mod|meth|data|attr|exc|obj|const|term):`~?([^`]+)`")


class SphinxRoles(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(r"`\1`", obj.docstring.value)
