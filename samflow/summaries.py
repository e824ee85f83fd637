"""Summaries for regression (and any model), taken at every record of a run.

What a researcher on implicit bias reads off a diagonal network besides its loss
(docs/theory.md §10.4): ``l1_norm`` ``||beta||_1``, ``l2_norm`` ``||beta||_2``,
``n_active`` (coordinates with ``|beta_j| > active_threshold``), ``test_error``
``||beta - beta*||_2^2`` against a ground truth, and the ``sharpness`` (the largest
eigenvalue of the Hessian of the training loss in the network's parameters) with the
Hessian's trace (:meth:`samflow.model.Model.sharpness`). The discrete runner takes them
inside its record loop (:func:`samflow.discrete.simulate`'s ``summaries``), a flow from
its saved parameters; every value is ``[*batch]`` per record (batch-last layout).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import jax.numpy as jnp
from jax import Array

from samflow.inputs import ACTIVE_THRESHOLD
from samflow.layout import sum_rows
from samflow.model import Model, Problem

NAMES = ("l1_norm", "l2_norm", "n_active", "test_error", "sharpness", "hessian_trace")
"""Every summary this module can give (declared in :data:`samflow.schema.POINT`)."""


@dataclass(frozen=True)
class Summaries:
    """Which summaries a run takes (hashable: part of a program's key).

    Attributes:
        test_error: ``||beta - beta*||_2^2`` (needs ``beta*``, an input of the program).
        sharpness: the top Hessian eigenvalue and the trace.
        active_threshold: ``n_active`` counts ``|beta_j|`` above it.
    """

    test_error: bool = False
    sharpness: bool = False
    active_threshold: float = ACTIVE_THRESHOLD

    def names(self) -> tuple[str, ...]:
        """The variables these summaries give."""
        out = ["l1_norm", "l2_norm", "n_active"]
        if self.test_error:
            out.append("test_error")
        if self.sharpness:
            out += ["sharpness", "hessian_trace"]
        return tuple(out)


def record_summaries(
    what: Summaries, model: Model, problem: Problem, beta_star: Array | None
) -> Callable[[Array, Array | None], dict[str, Array]]:
    """``(theta [L_max, d, *batch], mask) -> {name: [*batch]}`` for ``what``.

    ``beta_star`` ``[d, *batch]`` (or broadcasting) when ``what.test_error``.
    """

    def take(theta: Array, mask: Array | None) -> dict[str, Array]:
        b = model.beta(theta)
        out = {
            "l1_norm": sum_rows(jnp.abs(b)),
            "l2_norm": jnp.sqrt(sum_rows(b * b)),
            "n_active": sum_rows((jnp.abs(b) > what.active_threshold).astype(jnp.int32)),
        }
        if what.test_error:
            e = b - beta_star
            out["test_error"] = sum_rows(e * e)
        if what.sharpness:
            out["sharpness"], out["hessian_trace"] = model.sharpness(theta, problem, mask)
        return out

    return take
