"""Summaries for regression (and any model), taken at every record of a run.

What a researcher on implicit bias reads off a diagonal network besides its loss
(docs/theory/models.md#summaries-and-sharpness): ``l1_norm`` ``||beta||_1``, ``l2_norm``
``||beta||_2``, ``n_active`` (coordinates with ``|beta_j| > active_threshold``), ``test_error``
``||beta - beta*||_2^2`` against a ground truth, and the ``sharpness`` (the largest
eigenvalue of the Hessian of the training loss in the network's parameters) with the
Hessian's trace (:meth:`samflow.model.Model.sharpness`).

:class:`Summaries` says which a run takes; it is made, and checked, before JAX loads.
The program takes them at every record (:func:`samflow.engine.record_summaries`): the
discrete runner inside its record loop, a flow from its saved parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

from samflow.inputs import check_flag, positive

NAMES = ("l1_norm", "l2_norm", "n_active", "test_error", "sharpness", "hessian_trace")
"""Every summary this module can give (declared in :data:`samflow.schema.POINT`)."""


@dataclass(frozen=True)
class Summaries:
    r"""Which summaries a run takes (hashable: part of a program's key).

    ``l1_norm``, ``l2_norm`` and ``n_active`` are always taken; the fields add the rest.
    Pass ``summaries=Summaries(sharpness=True)`` to :func:`samflow.trajectory` or
    :func:`samflow.sweep`.

    Attributes:
        test_error: \(\lVert \beta - \beta^*\rVert_2^2\). It needs the ground truth \(\beta^*\), an
            input of the run (``beta_star=``), and is taken whenever that is given.
        sharpness: the top Hessian eigenvalue and the trace.
        active_threshold: ``n_active`` counts \(\lvert \beta_j\rvert\) above it (> 0).

    Raises:
        InputError: a flag that is not a bool, or a threshold that is not a number > 0.

    Examples:
        >>> import samflow
        >>> samflow.Summaries().names()
        ('l1_norm', 'l2_norm', 'n_active')
        >>> samflow.Summaries(sharpness=True).names()[-2:]
        ('sharpness', 'hessian_trace')
    """

    test_error: bool = False
    sharpness: bool = False
    active_threshold: float = 1e-3

    def __post_init__(self) -> None:
        object.__setattr__(self, "test_error", check_flag("test_error", self.test_error))
        object.__setattr__(self, "sharpness", check_flag("sharpness", self.sharpness))
        object.__setattr__(
            self, "active_threshold", positive("active-threshold", self.active_threshold)
        )

    def names(self) -> tuple[str, ...]:
        """The variables these summaries give.

        Returns:
            Names of :data:`NAMES`, in that order.
        """
        out = ["l1_norm", "l2_norm", "n_active"]
        if self.test_error:
            out.append("test_error")
        if self.sharpness:
            out += ["sharpness", "hessian_trace"]
        return tuple(out)
