"""The static configuration of a flow solve, made without diffrax.

:class:`FlowConfig` is part of a program's key (:class:`samflow.engine.Setup`) and
:func:`formulation_for` decides its formulation; both are needed before a program is
traced, and a program read back from disk (:mod:`samflow.exported`) is never traced, so
they live here, apart from :mod:`samflow.flows` and its imports of diffrax, equinox and
optimistix (about half a second). A solver named by :class:`samflow.Flow` stays a name
here; :func:`samflow.flows.solver_of` makes the solver object when the solve is traced.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from samflow.errors import InputError

if TYPE_CHECKING:
    from samflow.model import Model
    from samflow.rules import PerturbationRule
    from samflow.runners import Flow


class FlowConfig(NamedTuple):
    """Static options of a solve (hashable: part of the compilation key).

    Made only by :meth:`of`: the solver settings are the runner's (which owns their
    defaults and checks them), copied here without its horizon and save grid, which
    are arguments of the compiled program and so must not key it.

    Fields:
        formulation: ``log``, ``linf`` or ``linear`` (see :mod:`samflow.flows`).
        solver: the runner's solver: a name of :data:`samflow.runners.SOLVERS` (made
            into its solver object where the solve is traced,
            :func:`samflow.flows.solver_of`) or a diffrax solver object.
        rtol, atol, max_steps: :class:`samflow.Flow`'s fields of those names.
        log_beta_max: stop when ``log max|beta_j|`` exceeds this.
        singular_log_range: how far, in ``log |beta|``, a finite-time singularity is
            followed: collapse when ``log max|beta_j|`` falls this far below its
            initial value; blow-up (L >= 3) at ``L/(L-2)`` times this.
        extend: ``tau_cap / tau_max`` of :class:`samflow.Flow` (1: no extension): a run
            not decided at the horizon goes on to ``extend`` times it, stopped where
            its fate is decided. :data:`ANY_EXTEND`: the same, with the ratio an argument
            of the compiled program (:func:`samflow.engine.start_points`), so that one
            program serves every ``tau_cap``.
    """

    formulation: str
    solver: Any
    rtol: float
    atol: float
    max_steps: int
    log_beta_max: float
    singular_log_range: float
    extend: float = 1.0

    @property
    def capped(self) -> bool:
        """Whether a run not decided at the horizon goes on (``tau_cap``)."""
        return self.extend == ANY_EXTEND or self.extend > 1

    @classmethod
    def of(cls, runner: Flow, formulation: str, dtype) -> FlowConfig:
        """The static configuration of ``runner`` with a resolved ``formulation``.

        The event edges follow the dtype: ``log_beta_max`` is half the log of its
        largest number (every square in a norm stays finite), and near a finite-time
        singularity a range beyond ~0.45 log(1/eps) asks for tau closer to tau* than
        the dtype resolves.
        """
        from samflow.regimes import singular_log_range

        info = np.finfo(np.dtype(dtype))
        return cls(
            formulation=formulation,
            solver=runner.solver,
            rtol=runner.rtol,
            atol=runner.atol,
            max_steps=runner.max_steps,
            log_beta_max=0.5 * float(np.log(info.max)),
            singular_log_range=singular_log_range(dtype),
            extend=1.0 if runner.tau_cap is None else runner.tau_cap / runner.tau_max,
        )


ANY_EXTEND = -1.0
"""``FlowConfig.extend`` of the program that :func:`samflow.engine.start_points` runs for
any ``tau_cap``: runs go on past the horizon, to the ratio ``tau_cap / tau_max`` given
as the program's argument ``cap`` (as a discrete program of
:data:`samflow.engine.ANY_CAP` takes its step cap)."""


def formulation_for(
    rule: PerturbationRule,
    requested: str,
    one_point_positive: bool,
    balanced: bool,
    model: Model | None = None,
) -> str:
    """The formulation a solve uses: ``requested``, or for ``auto`` the closed form the
    model and rule declare where the start allows it; otherwise ``linear``. InputError
    when a closed form is forced where it does not hold.

    The closed forms: on a model with :attr:`samflow.model.Model.closed_forms` (the
    paper's), the rule's own (:class:`samflow.rules.BalancedFlow`, ``log`` or ``linf``),
    for one point with ``mu > 0`` and a balanced positive start; on a parametrisation
    with a :class:`samflow.parametrizations.LogGradientFlow` (u2-v2), ``log`` for gd
    from its balanced start (``u = v > 0``), any data and loss
    (:func:`samflow.flows.log_gd_field`). ``model`` None: the paper's.
    """
    if model is None:
        from samflow.model import DEFAULT as model
    if model.closed_forms:
        closed = rule.balanced.formulation if rule.balanced is not None else None
        usable = closed if (one_point_positive and balanced) else None
        need = (
            f"needs one point with mu > 0, a balanced positive initialisation and a rule "
            f"whose closed form is {requested!r} (method {rule.name} has {closed or 'none'})"
        )
    else:
        log_gd = model.parametrization.log_gd is not None
        usable = "log" if log_gd and rule.direction is None and balanced else None
        need = (
            f"is not available for parametrization {model.parametrization.name}, loss "
            f"{model.loss.name}, method {rule.name}: use linear (or log: u2-v2, method gd, "
            "u = v > 0 at the start)"
        )
    if requested == "auto":
        return usable or "linear"
    if requested != "linear" and requested != usable:
        raise InputError(f"formulation {requested!r} {need}")
    return requested
