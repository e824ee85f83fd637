"""One SAM step over any parameter pytree, the perturbation rule a parameter.

A step is ``theta <- theta - eta * grad Loss(theta + rho * eps(g))`` with
``g = grad Loss(theta)`` (docs/theory/setting.md#algorithms); ``eps`` is the rule's
(:mod:`samflow.rules`): GD, l2-SAM, linf-SAM, USAM or one of your own.

The step works on any parameter pytree: the diagonal network (one array) and the
equinox CNN (a module) use the same function. Parameters that must stay fixed
(depth padding) are handled by a gradient function that returns zero for them:
every rule maps a zero gradient to a zero perturbation. With an optax optimiser as
the base instead of ``p - eta * g``, see :mod:`samflow.transform`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import Array

from samflow.rules import PerturbationRule

PyTree = Any
GradFn = Callable[[PyTree], tuple[PyTree, Any]]
"""``params -> (grads, aux)``: the gradient of the loss and anything else it reports."""


class Groups(NamedTuple):
    """m-sharpness (docs/theory/stochastic.md#stochastic-steps): the step's examples cut into ``G``
    groups.

    Fields:
        grad_fn: ``(params, group) -> (grads, aux)``: the gradient of one group's loss
            (the mean over its examples).
        data: the groups, a pytree whose every leaf has a leading axis ``G``.
    """

    grad_fn: Callable[[PyTree, Any], tuple[PyTree, Any]]
    data: Any


class StepInfo(NamedTuple):
    """Auxiliary output of one step.

    Fields:
        aux: what the gradient function reported at ``theta`` (None when the ascent
            direction came from an ``ascent_fn``).
        aux_perturbed: the same at ``theta + rho * eps`` (equal to ``aux`` for GD).
    """

    aux: Any
    aux_perturbed: Any


def step(
    params: PyTree,
    grad_fn: GradFn,
    rule: PerturbationRule,
    rho,
    eta,
    *,
    ascent_fn: Callable[[PyTree], PyTree] | None = None,
    batch_ndim: int = 0,
    key: Array | None = None,
    t: Array | None = None,
    groups: Groups | None = None,
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
        key, t: this step's PRNG key and its number (from 0), for a random rule
            (:attr:`samflow.rules.PerturbationRule.random`); other rules ignore them.
        groups: m-sharpness: each group ``k`` gets its own ``eps_k = eps(grad L_k)``
            and the descent gradient is ``(1/G) sum_k grad L_k(params + rho eps_k)``
            (vmapped over the groups; a random rule draws with ``fold_in(key, k)``).
            ``grad_fn`` is then unused for a rule with an ascent step; for GD (no
            perturbation) the step is ``grad_fn``'s, the mean of the groups' gradients.
            ``aux`` and ``aux_perturbed`` have a leading group axis.
    """
    if groups is not None and rule.direction is not None:
        n_groups = jax.tree_util.tree_leaves(groups.data)[0].shape[0]

        def one(data, k):
            ascent, aux = groups.grad_fn(params, data)
            group_key = None if key is None else jax.random.fold_in(key, k)
            perturbed = rule.perturbed(params, ascent, rho, batch_ndim, key=group_key, step=t)
            descent, aux_perturbed = groups.grad_fn(perturbed, data)
            return descent, aux, aux_perturbed

        descents, aux, aux_perturbed = jax.vmap(one)(groups.data, jnp.arange(n_groups))
        descent = jax.tree_util.tree_map(lambda g: jnp.mean(g, axis=0), descents)
        new = jax.tree_util.tree_map(lambda p, g: p - eta * g, params, descent)
        return new, StepInfo(aux=aux, aux_perturbed=aux_perturbed)
    if rule.direction is None:
        descent, aux = grad_fn(params)
        aux_perturbed = aux
    else:
        if ascent_fn is not None and rule.scale_invariant:
            ascent, aux = ascent_fn(params), None
        else:
            ascent, aux = grad_fn(params)
        descent, aux_perturbed = grad_fn(
            rule.perturbed(params, ascent, rho, batch_ndim, key=key, step=t)
        )
    new = jax.tree_util.tree_map(lambda p, g: p - eta * g, params, descent)
    return new, StepInfo(aux=aux, aux_perturbed=aux_perturbed)
