"""Per-point losses of the prediction, and how to write your own
(docs/theory/models.md#parametrisations-and-losses).

The training loss is the mean over the ``n`` data points of ``l(p_i, y_i)``, with the
prediction ``p_i = <beta, x_i>``. The engine needs ``l`` and its first two derivatives
in ``p`` (the gradient and the Hessian, :class:`samflow.model.Model`). A loss is a
frozen, hashable :class:`Loss` (static under ``jit``); the built-in ones are instances,
:data:`LOGISTIC`, :data:`EXPONENTIAL` and :data:`SQUARED`.

A *margin* loss (:class:`MarginLoss`) is ``l(p, y) = phi(z)`` of the margin ``z = y p``
with labels ``y`` in {-1, +1}, ``phi`` decreasing and convex: subclass it and write
``phi`` with its derivatives in ``z``. With one data point the gradient is ``phi'(z)``
times a vector that does not depend on the loss, so (capabilities the engine takes
from ``margin``, docs/theory/flows.md#rescaled-flows) time is rescaled by ``|phi'(z)|``, a
scale-invariant rule's ascent direction needs no ``phi'`` at all, and the regimes of
docs/theory/regimes.md#definitions apply on the product network. Any other loss (``margin =
False``) runs in plain time ``t = eta * steps``.

One more capability: ``closed_forms`` (:data:`LOGISTIC`) says that the perturbation
rules' balanced closed forms, the flow's singular edges (collapse, blow-up) and its
certificates (docs/theory/flows.md#rescaled-flows, docs/theory/balanced.md#balanced-initialisation)
were derived for this loss on the product network, so the flow solver may use them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp
from jax import Array


class Loss(ABC):
    r"""The protocol of a per-point loss \(l(p, y)\) of the prediction \(p\).

    Subclass it as a frozen dataclass (hashable: static under ``jit``).

    Attributes:
        name: what files and the command line call it (the ``loss`` attribute).
        margin: capability, \(l(p, y) = \phi(y p)\) with labels in {-1, +1}
            (:class:`MarginLoss`); data are checked for such labels.
        closed_forms: capability, the paper's closed forms hold (module docstring).

    Raises:
        InputError: a subclass's constructor refuses its own bad options (the
            built-ins take none), naming the value.

    Examples:
        A loss of one's own, half the squared error, with its two derivatives:

        >>> from dataclasses import dataclass
        >>> import jax.numpy as jnp
        >>> import samflow
        >>> @dataclass(frozen=True)
        ... class HalfSquared(samflow.Loss):
        ...     name: str = "half-squared"
        ...     def derivatives(self, p, y):
        ...         r = p - y
        ...         return 0.5 * r * r, r, jnp.ones_like(r)
        >>> [v.tolist() for v in HalfSquared().derivatives(jnp.array([3.0]), jnp.array([1.0]))]
        [[2.0], [2.0], [1.0]]
        >>> samflow.Model(loss=HalfSquared()).classifies  # not a margin loss: no regimes
        False
    """

    name: str
    margin: ClassVar[bool] = False
    closed_forms: ClassVar[bool] = False

    @abstractmethod
    def derivatives(self, p: Array, y: Array) -> tuple[Array, Array, Array]:
        r"""\(l\), \(\mathrm{d}l/\mathrm{d}p\) and \(\mathrm{d}^2 l/\mathrm{d}p^2\) at predictions
        ``p`` and labels ``y``, each ``[n, *batch]``."""

    def value(self, p: Array, y: Array) -> Array:
        """``l(p, y)`` per point, ``[n, *batch]``."""
        return self.derivatives(p, y)[0]


class MarginLoss(Loss):
    r"""A loss of the margin \(z = y p\), \(y\) in {-1, +1}: \(l = \phi(z)\),
    \(\mathrm{d}l/\mathrm{d}p = y \phi'(z)\),
    \(\mathrm{d}^2 l/\mathrm{d}p^2 = y^2 \phi''(z) = \phi''(z)\). Subclasses write :meth:`phi`.

    ``phi`` must be decreasing and convex; data run with a margin loss are checked for
    labels in {-1, +1}, and with one point time is rescaled by :meth:`rate`.

    Attributes:
        name: what files and the command line call it (the ``loss`` attribute).
        margin: True (the capability that defines this class).

    Raises:
        InputError: a subclass's constructor refuses its own bad options, naming the
            value.

    Examples:
        The exponential loss written as a margin loss of one's own:

        >>> from dataclasses import dataclass
        >>> import jax.numpy as jnp
        >>> import samflow
        >>> @dataclass(frozen=True)
        ... class Exp(samflow.MarginLoss):
        ...     name: str = "my-exponential"
        ...     def phi(self, z):
        ...         e = jnp.exp(-z)
        ...         return e, -e, e
        >>> float(Exp().value(jnp.array([1.0]), jnp.array([-1.0]))[0])  # phi(y p) = e
        2.71828
        >>> samflow.Model(loss=Exp()).classifies  # the product network, a margin loss
        True
    """

    margin: ClassVar[bool] = True

    @abstractmethod
    def phi(self, z: Array) -> tuple[Array, Array, Array]:
        r"""\(\phi(z)\), \(\phi'(z) < 0\) and \(\phi''(z)\), each of ``z``'s shape."""

    def value(self, p: Array, y: Array) -> Array:
        return self.phi(y * p)[0]

    def derivatives(self, p: Array, y: Array) -> tuple[Array, Array, Array]:
        value, slope, curve = self.phi(y * p)
        return value, y * slope, curve

    def rate(self, z: Array) -> Array:
        r"""\(\lvert \phi'(z)\rvert\): the factor by which one point's time is rescaled
        (docs/theory/flows.md#rescaled-flows)."""
        return -self.phi(z)[1]


@dataclass(frozen=True)
class Logistic(MarginLoss):
    """``phi(z) = log(1 + e^-z)`` as softplus; ``phi' = -sigmoid(-z)``, ``phi'' =
    sigmoid(z) sigmoid(-z)``."""

    name: ClassVar[str] = "logistic"
    closed_forms: ClassVar[bool] = True

    def phi(self, z: Array) -> tuple[Array, Array, Array]:
        s = jax.nn.sigmoid(-z)
        return jax.nn.softplus(-z), -s, s * jax.nn.sigmoid(z)


@dataclass(frozen=True)
class Exponential(MarginLoss):
    """``phi(z) = e^-z``; ``phi' = -e^-z``, ``phi'' = e^-z``."""

    name: ClassVar[str] = "exponential"

    def phi(self, z: Array) -> tuple[Array, Array, Array]:
        e = jnp.exp(-z)
        return e, -e, e


@dataclass(frozen=True)
class Squared(Loss):
    """``l = (1/2)(p - y)^2``, any real labels; ``dl/dp = p - y``, ``d^2 l/dp^2 = 1``."""

    name: ClassVar[str] = "squared"

    def derivatives(self, p: Array, y: Array) -> tuple[Array, Array, Array]:
        r = p - y
        return 0.5 * r * r, r, jnp.ones_like(r)


LOGISTIC = Logistic()
"""The logistic loss (the paper's)."""
EXPONENTIAL = Exponential()
"""The exponential loss."""
SQUARED = Squared()
"""The squared loss."""

BUILT_IN: dict[str, Loss] = {f.name: f for f in (LOGISTIC, EXPONENTIAL, SQUARED)}
"""The built-in losses by name (the command line's choices)."""
