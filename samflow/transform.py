"""SAM as an optax gradient transformation around any base optimiser.

``sam(base, rho, rule)`` turns an optax optimiser into its SAM version: the gradient
handed to ``base`` is the descent gradient at the perturbed point
``params + rho * eps(g)`` (:mod:`samflow.rules`), not ``g`` itself::

    tx = samflow.transform.sam(optax.adam(1e-3), rho=0.05)          # l2-SAM + Adam
    state = tx.init(params)
    grads = jax.grad(loss)(params)
    updates, state = tx.update(grads, state, params, grad_fn=jax.grad(loss))
    params = optax.apply_updates(params, updates)

With ``base = optax.sgd(eta)`` this is exactly :func:`samflow.steps.step` (derivation
in :func:`sam`); momentum, Adam, weight decay, schedules are whatever ``base`` does.

Composition with ``optax.chain``: ``update`` takes ``grad_fn`` as an extra argument
(optax's ``GradientTransformationExtraArgs``), which ``chain`` hands to every member,
so ``optax.chain(sam(optax.scale_by_adam(), rho), optax.scale(-eta))`` is
``sam(optax.adam(eta), rho)``. Members *before* ``sam`` in a chain change only the
ascent gradient (``grad_fn`` returns raw gradients); a transformation of the descent
gradient (clipping, say) belongs inside ``base``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import optax
from jax import Array

from samflow.errors import InputError
from samflow.rules import PerturbationRule, check_rho, get_rule

PyTree = Any


def sam(
    base: optax.GradientTransformation,
    rho: float,
    rule: str | PerturbationRule = "sam-l2",
) -> optax.GradientTransformationExtraArgs:
    r"""The SAM version of ``base`` for the perturbation ``rule`` at radius ``rho``.

    ``init(params)`` is ``base.init(params)`` (SAM itself keeps no state).
    ``update(grads, state, params, *, grad_fn, **extra)``:

    - ``grads``: pytree like ``params``, the gradient \(g\) of the loss at ``params``;
    - ``grad_fn``: ``p -> grads at p`` (``jax.grad(loss)`` for a loss of \(p\) alone; a
      minibatch loss must close over the same batch as ``grads``);
    - returns ``base.update(grad_fn(params + rho * eps(g)), state, params, **extra)``:
      ``base`` sees the unperturbed ``params`` (for weight decay) and any other extra
      arguments. A rule without ascent (GD) passes ``grads`` straight through and never
      calls ``grad_fn``;
    - ``key``, ``step``: this step's PRNG key and number, which a random rule
      (:attr:`~samflow.rules.PerturbationRule.random`) needs and other rules ignore.

    Why ``base = optax.sgd(eta)`` is exactly :func:`samflow.steps.step`: ``optax.sgd``
    without momentum is ``scale_by_learning_rate``, stateless, and maps \(u\) to
    \((-\eta) \cdot u\). Here \(u = \nabla L(\theta + \rho \cdot \varepsilon(g))\) with the same
    rule function \(\varepsilon\) and the same perturbed point (``rule.perturbed``) as ``step``, so
    ``optax.apply_updates`` gives \(\theta + (-\eta) \cdot u\), and ``step`` gives
    \(\theta - \eta \cdot u\). In IEEE arithmetic \((-\eta) \cdot u = -(\eta \cdot u)\) and
    \(\theta + (-x) = \theta - x\) exactly, so the two agree to rounding of the compiled
    program (``tests/test_transform.py`` measures it).

    Args:
        base: the optimiser that takes the SAM gradient (``optax.sgd``, ``adam``, ...).
        rho: perturbation radius, finite and \(\ge 0\) (ignored by GD).
        rule: a method name of :data:`samflow.rules.METHODS` or a
            :class:`~samflow.rules.PerturbationRule`.

    Returns:
        An ``optax.GradientTransformationExtraArgs`` whose ``update`` takes
        ``grad_fn`` (and ``key``, ``step`` for a random rule) as extra arguments.

    Raises:
        InputError: a ``base`` that is not an optax transformation, an unknown rule, or
            a bad or missing ``rho`` (naming the value).

    Examples:
        Three steps of l2-SAM with SGD on a quadratic whose minimum is at 1:

        >>> import jax
        >>> import jax.numpy as jnp
        >>> import optax
        >>> import samflow
        >>> def loss(p):
        ...     return jnp.sum((p - 1.0) ** 2)
        >>> tx = samflow.sam(optax.sgd(0.1), rho=0.05)
        >>> params = jnp.zeros(2)
        >>> state = tx.init(params)
        >>> for _ in range(3):
        ...     grads = jax.grad(loss)(params)
        ...     updates, state = tx.update(grads, state, params, grad_fn=jax.grad(loss))
        ...     params = optax.apply_updates(params, updates)
        >>> params.tolist()
        [0.5053, 0.5053]
    """
    if not isinstance(base, optax.GradientTransformation):
        raise InputError(
            f"base must be an optax GradientTransformation (optax.sgd(eta), ...), got {base!r}"
        )
    rule = get_rule(rule)
    if not isinstance(rho, jax.core.Tracer):  # a traced rho is checked where it is given
        rho = check_rho(rule, rho, ignored_ok=True)  # documented: GD ignores rho
    base = optax.with_extra_args_support(base)

    def update(
        grads: PyTree,
        state: optax.OptState,
        params: PyTree | None = None,
        *,
        grad_fn: Callable[[PyTree], PyTree] | None = None,
        key: Array | None = None,
        step: Array | None = None,
        **extra_args,
    ) -> tuple[PyTree, optax.OptState]:
        if rule.direction is not None:
            if params is None or grad_fn is None:
                raise InputError(
                    f"sam with rule {rule.name} needs params and grad_fn in update, got "
                    f"params={'None' if params is None else 'given'}, "
                    f"grad_fn={'None' if grad_fn is None else 'given'}"
                )
            grads = grad_fn(rule.perturbed(params, grads, rho, key=key, step=step))
        return base.update(grads, state, params, **extra_args)

    return optax.GradientTransformationExtraArgs(base.init, update)


def apply_step(
    tx: optax.GradientTransformation,
    params: PyTree,
    state: optax.OptState,
    grad_fn: Callable[[PyTree], PyTree],
    *,
    key: Array | None = None,
    step: Array | None = None,
) -> tuple[PyTree, optax.OptState]:
    """One step of ``tx`` (e.g. from :func:`sam`) with ``grad_fn``: new ``(params, state)``.

    ``key`` and ``step`` (this step's PRNG key and number) go to a random rule.
    """
    grads = grad_fn(params)
    updates, state = tx.update(grads, state, params, grad_fn=grad_fn, key=key, step=step)
    return optax.apply_updates(params, updates), state
