"""Floating-point precision without touching the user's global JAX configuration.

The diagonal engine computes in float64 by default (docs/theory/numerics.md#numerics: discrete
logistic training underflows in float32 in the collapse regime). Importing samflow
does NOT call ``jax.config.update("jax_enable_x64", True)``, which would silently
change every other JAX program in the same process. Instead each public entry point
runs inside :func:`precision`, a scoped ``jax.enable_x64`` context, and casts its
inputs to the requested dtype. Compiled functions are cached per precision.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import jax
import numpy as np

from samflow.inputs import check_dtype


@contextlib.contextmanager
def precision(dtype: str = "float64") -> Iterator[np.dtype]:
    """Context in which arrays of ``dtype`` can be made; float64 enables x64 locally."""
    dt = np.dtype(check_dtype(dtype))
    if dt == np.float64:
        with jax.enable_x64(True):
            yield dt
    else:
        yield dt
