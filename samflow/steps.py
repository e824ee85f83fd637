"""GD, l2-SAM, linf-SAM and USAM as one pure step with a perturbation rule.

A step is ``theta <- theta - eta * grad Loss(theta + rho * eps(g))`` with
``g = grad Loss(theta)`` (THEORY section 2). Only ``eps`` differs between methods:

========== ============================== ======================================
method     eps(g)                         note
========== ============================== ======================================
gd         0                              the ascent gradient is not evaluated
sam-l2     g / ||g||_2                    norm over every leaf and coordinate
sam-linf   sign(g)
usam       g                              unnormalised control
========== ============================== ======================================

The step works on any parameter pytree: the diagonal network (one array) and the
equinox CNN (a module) use the same function. Parameters that must stay fixed
(depth padding) are handled by a gradient function that returns zero for them:
every rule maps a zero gradient to a zero perturbation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import Array

from samflow.layout import sum_leading

PyTree = Any
GradFn = Callable[[PyTree], tuple[PyTree, Any]]
"""``params -> (grads, aux)``: the gradient of the loss and anything else it reports."""


def _tree_l2_norm(tree: PyTree, batch_ndim: int = 0) -> Array:
    """``||tree||_2`` over every leaf and coordinate, per element of the trailing batch axes."""
    leaves = jax.tree_util.tree_leaves(tree)
    return jnp.sqrt(sum(sum_leading(jnp.square(leaf), batch_ndim) for leaf in leaves))


def _l2_direction(g: PyTree, batch_ndim: int = 0) -> PyTree:
    norm = _tree_l2_norm(g, batch_ndim)
    # A zero gradient (e.g. all weights zero) gives no perturbation rather than 0/0.
    safe = jnp.where(norm > 0, norm, 1.0)
    return jax.tree_util.tree_map(lambda leaf: leaf / safe.astype(leaf.dtype), g)


def _linf_direction(g: PyTree, batch_ndim: int = 0) -> PyTree:
    return jax.tree_util.tree_map(jnp.sign, g)


def _usam_direction(g: PyTree, batch_ndim: int = 0) -> PyTree:
    return g


@dataclass(frozen=True)
class PerturbationRule:
    """How the ascent direction ``eps`` is made from the gradient.

    Attributes:
        name: the method's name on the command line.
        direction: ``(g, batch_ndim) -> eps`` over pytrees, or None for no ascent step
            (GD); ``batch_ndim`` trailing axes of every leaf are independent problems.
        scale_invariant: ``eps(c g) = eps(g)`` for every ``c > 0``. Then, for one data
            point, the loss factors out of the dynamics (THEORY section 3) and the
            rescaled flow may compute ``eps`` from ``m = g / l'(z)`` directly.
    """

    name: str
    direction: Callable[[PyTree], PyTree] | None
    scale_invariant: bool = True


RULES: dict[str, PerturbationRule] = {
    "gd": PerturbationRule("gd", None),
    "sam-l2": PerturbationRule("sam-l2", _l2_direction),
    "sam-linf": PerturbationRule("sam-linf", _linf_direction),
    "usam": PerturbationRule("usam", _usam_direction, scale_invariant=False),
}
METHODS: tuple[str, ...] = tuple(RULES)


def get_rule(method: str) -> PerturbationRule:
    """The perturbation rule of ``method``; ValueError naming it if unknown."""
    try:
        return RULES[method]
    except KeyError:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}") from None


class StepInfo(NamedTuple):
    """Auxiliary output of one step.

    Fields:
        aux: what the gradient function reported at ``theta`` (None when the ascent
            direction came from an ``ascent_fn``).
        aux_perturbed: the same at ``theta + rho * eps`` (equal to ``aux`` for GD).
    """

    aux: Any
    aux_perturbed: Any


def perturbed_point(
    params: PyTree, grads: PyTree, rule: PerturbationRule, rho, batch_ndim: int = 0
) -> PyTree:
    """``params + rho * eps(grads)``; ``params`` itself for a rule without ascent."""
    if rule.direction is None:
        return params
    eps = rule.direction(grads, batch_ndim)
    return jax.tree_util.tree_map(lambda p, e: p + rho * e, params, eps)


def step(
    params: PyTree,
    grad_fn: GradFn,
    rule: PerturbationRule,
    rho,
    eta,
    *,
    ascent_fn: Callable[[PyTree], PyTree] | None = None,
    batch_ndim: int = 0,
) -> tuple[PyTree, StepInfo]:
    """One update ``params - eta * grad Loss(params + rho * eps(grad Loss(params)))``.

    Pure and jit-able; ``rule`` is static (close over it or mark it static).

    Args:
        ascent_fn: optional ``params -> v`` with ``v`` a positive multiple of the
            gradient (for one data point, the gradient without its loss factor). A
            scale-invariant rule takes ``eps`` from it, saving the loss derivative of
            the ascent gradient; other rules ignore it.
        batch_ndim: how many trailing axes of every leaf are independent problems
            (batch-last sweeps): norms are per batch element, and ``rho``, ``eta``
            (shape ``[*batch]`` or scalar) broadcast against the leaves.
    """
    if rule.direction is None:
        descent, aux = grad_fn(params)
        aux_perturbed = aux
    else:
        if ascent_fn is not None and rule.scale_invariant:
            ascent, aux = ascent_fn(params), None
        else:
            ascent, aux = grad_fn(params)
        descent, aux_perturbed = grad_fn(perturbed_point(params, ascent, rule, rho, batch_ndim))
    new = jax.tree_util.tree_map(lambda p, g: p - eta * g, params, descent)
    return new, StepInfo(aux=aux, aux_perturbed=aux_perturbed)
