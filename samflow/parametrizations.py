r"""Parametrisations of a diagonal linear network, and how to write your own
(docs/theory/models.md#parametrisations-and-losses).

A parametrisation says how the predictor ``beta`` ``[d]`` is made from the parameters
``theta`` ``[rows, d]``, coordinate by coordinate: ``beta_j`` depends on the column
``theta[:, j]`` only. That is all the engine needs to know of it: the gradient and
the Hessian of any loss follow from ``beta``, its Jacobian
\(G[l, j] = \partial \beta_j / \partial \theta[l, j]\) and its curvature
\(B[l, k, j] = \partial^2 \beta_j / \partial \theta[l, j] \partial \theta[k, j]\) (derivation in
:class:`samflow.model.Model`). A parametrisation is a frozen, hashable :class:`Parametrization` (a
static argument of compiled programs); the
built-in ones are instances, :data:`PRODUCT`, :data:`U2_V2` and :data:`UV`::

    @dataclass(frozen=True)
    class Signed(samflow.Parametrization):       # beta = u^L - v^L
        power: int = 3
        name: str = "signed-3"
        rows: int | None = 2
        def beta(self, theta): ...
        def jacobian(self, theta): ...
        def curvature(self, theta): ...

    samflow.trajectory("sam-l2", parametrization=Signed(), loss="squared", ...)

(``examples/custom_model.py`` writes one out in full.) Every method takes the
batch-last layout of :mod:`samflow.model`: ``theta`` ``[rows, d, *batch]``.

Capabilities beyond the protocol, each a fast or closed form the engine takes where the
object declares it:

- ``layered`` (:data:`PRODUCT`): the network is a product of layers ``w^(1) ...
  w^(L)``, the paper's network. Its depth may vary inside one program (rows past the
  depth are ones, :func:`samflow.model.layer_mask`), and its regimes
  (docs/theory/regimes.md#definitions) and the perturbation rules' balanced closed forms
  (docs/theory/flows.md#rescaled-flows) are written for it.
- ``log_gd`` (:data:`U2_V2`): gradient descent from a balanced start has a closed form
  in log space (:class:`LogGradientFlow`), which the flow solver integrates instead of
  ``theta``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import jax.numpy as jnp
import numpy as np
from jax import Array

from samflow.errors import InputError
from samflow.layout import prod_rows


def exclusive_products(theta: Array) -> Array:
    """``P[l, j] = prod_{k != l} theta[k, j]`` by prefix and suffix products, no division.

    Division would fail where a weight is zero; the prefix/suffix form is exact there.
    ``[L_max, d, *batch]`` in and out; ``L_max`` is small and static, so the products are
    unrolled over layers.
    """
    layers = list(theta)
    prefix, suffix = [jnp.ones_like(layers[0])], [jnp.ones_like(layers[0])]
    for w in layers[:-1]:
        prefix.append(prefix[-1] * w)
    for w in layers[:0:-1]:
        suffix.append(suffix[-1] * w)
    return jnp.stack([p * s for p, s in zip(prefix, suffix[::-1], strict=True)])


def pair_products(theta: Array) -> Array:
    """``B[l, k, j] = prod_{m != l, k} theta[m, j]`` for ``l != k`` and 0 on the diagonal,
    ``[L_max, d, *b] -> [L_max, L_max, d, *b]``: the second derivatives of the product
    ``beta_j`` in layers ``l`` and ``k``.

    For ``l < k``: ``B[l, k] = P[l] * M[l, k] * S[k]`` with the exclusive prefix product
    ``P[l] = prod_{m < l}``, the suffix product ``S[k] = prod_{m > k}`` and the middle
    ``M[l, k] = prod_{l < m < k}``, an exclusive cumulative product along ``k`` of the
    rows ``w_m`` for ``m > l`` (1 elsewhere); ``B`` is symmetric. No division (exact
    where a weight is zero) and a program of fixed size: the former unrolled product
    over every pair of layers had ``L^3 / 2`` operations, 1 M at L = 128, and compiling
    it took 11 GB. The products are taken in another order than a left-to-right
    product of the other layers: the same up to rounding.
    """
    L = theta.shape[0]
    one = jnp.ones_like(theta[:1])
    prefix = jnp.concatenate([one, jnp.cumprod(theta[:-1], axis=0)])  # prod_{m < l}
    suffix = jnp.concatenate([jnp.cumprod(theta[:0:-1], axis=0)[::-1], one])  # prod_{m > k}
    lk = (slice(None), slice(None), *(None,) * (theta.ndim - 1))
    layer = jnp.arange(L)
    after = (layer[None, :] > layer[:, None])[lk]  # [l, m]: m > l
    rows = jnp.where(after, theta[None], 1)  # [l, m, d, *b]
    ones = jnp.ones_like(rows[:, :1])
    middle = jnp.concatenate([ones, jnp.cumprod(rows, axis=1)[:, :-1]], axis=1)
    upper = prefix[:, None] * middle * suffix[None, :]
    zero = jnp.zeros_like(upper)
    return jnp.where(after, upper, zero) + jnp.where(after, upper, zero).swapaxes(0, 1)


@dataclass(frozen=True)
class LogGradientFlow:
    """Gradient descent from a balanced start ``a`` ``[d]`` in closed form: the parameters
    are ``theta(R, a)`` with ``dR/dt = c(beta)``, ``c = grad_beta Loss`` ``[d]``, so the
    solver integrates ``R`` ``[d]`` from 0 (docs/theory/models.md#parametrisations-and-losses).

    Attributes:
        theta: ``(R, a) -> theta`` ``[rows, d]``.
        beta: ``(R, a) -> beta`` ``[d]``, in a form that stays accurate where ``theta``
            would over- or underflow.
    """

    theta: Callable[[Array, Array], Array]
    beta: Callable[[Array, Array], Array]


class Parametrization(ABC):
    r"""The protocol of a parametrisation: ``beta`` of \(\theta\) and its derivatives.

    Subclass it as a frozen dataclass (hashable: it is static under ``jit``); its
    constructor is where its own options are checked.

    Attributes:
        name: what files and the command line call it (the ``parametrization``
            attribute of a file).
        rows: the number of rows of \(\theta\) (2 for ``u, v``), or None for a product of
            any number of layers (:attr:`layered`).
        layered: capability, the product network of the paper (module docstring).
        log_gd: capability, the closed form of gradient descent from a balanced start,
            or None.

    Raises:
        InputError: a subclass's constructor refuses its own bad options, naming the
            value; :meth:`check_rows` refuses a \(\theta\) or depth of another row count.

    Examples:
        A parametrisation of one's own, \(\beta = u \cdot v\) (two rows), with its derivatives:

        >>> from dataclasses import dataclass
        >>> import jax.numpy as jnp
        >>> import samflow
        >>> @dataclass(frozen=True)
        ... class Times(samflow.Parametrization):
        ...     name: str = "times"
        ...     rows: int = 2
        ...     def beta(self, theta):
        ...         return theta[0] * theta[1]
        ...     def jacobian(self, theta):
        ...         return jnp.stack([theta[1], theta[0]])
        ...     def curvature(self, theta):
        ...         one, zero = jnp.ones_like(theta[0]), jnp.zeros_like(theta[0])
        ...         return jnp.stack([jnp.stack([zero, one]), jnp.stack([one, zero])])
        >>> theta = jnp.array([[2.0, 3.0], [0.5, -1.0]])
        >>> Times().beta(theta).tolist(), Times().jacobian(theta)[0].tolist()
        ([1.0, -3.0], [0.5, -1.0])
        >>> samflow.Model(Times(), "squared").parametrization.rows
        2
    """

    name: str
    rows: int | None = None
    layered: ClassVar[bool] = False
    log_gd: ClassVar[LogGradientFlow | None] = None

    @abstractmethod
    def beta(self, theta: Array) -> Array:
        """The predictor, ``[rows, d, *batch] -> [d, *batch]``."""

    @abstractmethod
    def jacobian(self, theta: Array) -> Array:
        r"""\(G[l, j] = \partial \beta_j / \partial \theta[l, j]\), ``[rows, d, *batch]``."""

    @abstractmethod
    def curvature(self, theta: Array) -> Array:
        r"""\(B[l, k, j] = \partial^2 \beta_j / \partial \theta[l, j] \partial \theta[k, j]\),
        ``[rows, rows, d, *batch]``."""

    def underflow(self, theta0: Array) -> Array:
        r"""``[d, *batch]``: where ``beta(theta0)`` lost a coordinate to underflow (0 from
        nonzero parameters). This default says where every row is nonzero and ``beta``
        is 0; a parametrisation whose ``beta`` may be 0 from nonzero rows (\(u^2 - v^2\)) says more
        precisely."""
        return (self.beta(theta0) == 0) & jnp.all(theta0 != 0, axis=0)

    def start(self, theta0: np.ndarray) -> np.ndarray:
        """The start of a run initialised at scale alpha, from ``theta0`` ``[rows, d,
        *batch]`` (NumPy) with every row alpha: by default ``theta0`` itself."""
        return theta0

    def check_rows(self, rows: int) -> None:
        r"""Refuse (``InputError``) a \(\theta\) or a depth of ``rows`` rows."""
        if rows < 1 or (self.rows is not None and rows != self.rows):
            want = "at least 1" if self.rows is None else f"exactly {self.rows}"
            raise InputError(f"parametrization {self.name} has {want} rows, got {rows}")


@dataclass(frozen=True)
class Product(Parametrization):
    """``beta = w^(1) * ... * w^(L)`` (elementwise), any depth: the paper's network.
    ``G[l] = prod_{k != l} w^(k)`` (:func:`exclusive_products`), ``B[l, k] = prod_{m !=
    l, k} w^(m)``, 0 for ``l = k`` (:func:`pair_products`)."""

    name: ClassVar[str] = "product"
    layered: ClassVar[bool] = True

    def beta(self, theta: Array) -> Array:
        # Padding rows are ones, so the product over all rows is the depth-L predictor.
        return prod_rows(theta)

    def jacobian(self, theta: Array) -> Array:
        return exclusive_products(theta)

    def curvature(self, theta: Array) -> Array:
        return pair_products(theta)


def _u2v2_theta(R: Array, a: Array) -> Array:
    return jnp.stack([a * jnp.exp(-2.0 * R), a * jnp.exp(2.0 * R)], axis=-2)


def _u2v2_beta(R: Array, a: Array) -> Array:
    return -2.0 * a * a * jnp.sinh(4.0 * R)


@dataclass(frozen=True)
class U2MinusV2(Parametrization):
    """``beta = u^2 - v^2`` (rows u, v): ``G = (2u, -2v)``, ``B = diag(2, -2)``.

    Gradient descent from ``u = v = a`` has a closed form (**derived here**): ``du/dt =
    -2 u c``, ``dv/dt = +2 v c`` with ``c = grad_beta Loss``, so ``u = a e^{-2R}``, ``v =
    a e^{2R}`` with ``dR/dt = c(beta)`` and ``beta = -2 a^2 sinh(4R)``. ``R`` is
    O(log(1/a)) however small ``a`` is: the flow from ``a = 1e-8`` is as well
    conditioned as from ``a = 1``."""

    name: ClassVar[str] = "u2-v2"
    rows: ClassVar[int | None] = 2
    log_gd: ClassVar[LogGradientFlow | None] = LogGradientFlow(_u2v2_theta, _u2v2_beta)

    def beta(self, theta: Array) -> Array:
        u, v = theta[0], theta[1]
        return u * u - v * v

    def jacobian(self, theta: Array) -> Array:
        u, v = theta[0], theta[1]
        return jnp.stack([2 * u, -2 * v])

    def curvature(self, theta: Array) -> Array:
        one, zero = jnp.ones_like(theta[0]), jnp.zeros_like(theta[0])
        return jnp.stack([jnp.stack([2 * one, zero]), jnp.stack([zero, -2 * one])])

    def underflow(self, theta0: Array) -> Array:
        u, v = theta0[0], theta0[1]
        return ((u != 0) & (u * u == 0)) | ((v != 0) & (v * v == 0))


@dataclass(frozen=True)
class UTimesV(Parametrization):
    """``beta = u v`` (rows u, v): ``G = (v, u)``, ``B = [[0, 1], [1, 0]]``; the default
    underflow test is exact for it (``u v = 0`` from nonzero ``u``, ``v``)."""

    name: ClassVar[str] = "uv"
    rows: ClassVar[int | None] = 2

    def beta(self, theta: Array) -> Array:
        return theta[0] * theta[1]

    def jacobian(self, theta: Array) -> Array:
        u, v = theta[0], theta[1]
        return jnp.stack([v, u])

    def curvature(self, theta: Array) -> Array:
        one, zero = jnp.ones_like(theta[0]), jnp.zeros_like(theta[0])
        return jnp.stack([jnp.stack([zero, one]), jnp.stack([one, zero])])

    def start(self, theta0: np.ndarray) -> np.ndarray:
        """``u = alpha``, ``v = 0``: ``beta(0) = 0``
        (docs/theory/models.md#parametrisations-and-losses)."""
        theta0 = np.array(theta0, dtype=np.float64)
        theta0[1] = 0.0
        return theta0


PRODUCT = Product()
"""The product network of any depth (the paper's)."""
U2_V2 = U2MinusV2()
"""``beta = u^2 - v^2``."""
UV = UTimesV()
"""``beta = u v``."""

BUILT_IN: dict[str, Parametrization] = {p.name: p for p in (PRODUCT, U2_V2, UV)}
"""The built-in parametrisations by name (the command line's choices)."""
