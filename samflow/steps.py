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

PyTree = Any
GradFn = Callable[[PyTree], tuple[PyTree, Any]]
"""``params -> (grads, aux)``: the gradient of the loss and anything else it reports."""


def _tree_l2_norm(tree: PyTree) -> Array:
    leaves = jax.tree_util.tree_leaves(tree)
    return jnp.sqrt(sum(jnp.sum(jnp.square(leaf)) for leaf in leaves))


def _l2_direction(g: PyTree) -> PyTree:
    norm = _tree_l2_norm(g)
    # A zero gradient (e.g. all weights zero) gives no perturbation rather than 0/0.
    safe = jnp.where(norm > 0, norm, 1.0)
    return jax.tree_util.tree_map(lambda leaf: leaf / safe.astype(leaf.dtype), g)


def _linf_direction(g: PyTree) -> PyTree:
    return jax.tree_util.tree_map(jnp.sign, g)


def _usam_direction(g: PyTree) -> PyTree:
    return g


@dataclass(frozen=True)
class PerturbationRule:
    """How the ascent direction ``eps`` is made from the gradient.

    Attributes:
        name: the method's name on the command line.
        direction: ``g -> eps`` over pytrees, or None for no ascent step (GD).
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
        aux: what the gradient function reported at ``theta``.
        aux_perturbed: the same at ``theta + rho * eps`` (equal to ``aux`` for GD).
    """

    aux: Any
    aux_perturbed: Any


def perturbed_point(params: PyTree, grads: PyTree, rule: PerturbationRule, rho) -> PyTree:
    """``params + rho * eps(grads)``; ``params`` itself for a rule without ascent."""
    if rule.direction is None:
        return params
    eps = rule.direction(grads)
    return jax.tree_util.tree_map(lambda p, e: p + rho * e, params, eps)


def step(
    params: PyTree, grad_fn: GradFn, rule: PerturbationRule, rho, eta
) -> tuple[PyTree, StepInfo]:
    """One update ``params - eta * grad Loss(params + rho * eps(grad Loss(params)))``.

    Pure and jit-able; ``rule`` is static (close over it or mark it static).
    """
    grads, aux = grad_fn(params)
    if rule.direction is None:
        descent, aux_perturbed = grads, aux
    else:
        descent, aux_perturbed = grad_fn(perturbed_point(params, grads, rule, rho))
    new = jax.tree_util.tree_map(lambda p, g: p - eta * g, params, descent)
    return new, StepInfo(aux=aux, aux_perturbed=aux_perturbed)
