"""Linear diagonal networks and their losses (docs/theory/setting.md#setting,
docs/theory/numerics.md#depth-in-one-program and docs/theory/models.md#parametrisations-and-losses).

A :class:`Model` is a parametrisation (:mod:`samflow.parametrizations`: how ``beta`` is
made from ``theta``) and a loss (:mod:`samflow.losses`), each an object a user may write;
:data:`DEFAULT`, the paper's model, is the L-layer product network with the logistic loss.

Parameters are one array ``theta`` of shape ``[L_max, d]``; row ``l`` is the layer
``w^(l+1)``. A network of depth ``L <= L_max`` keeps rows ``L..L_max-1`` equal to one:
they contribute a factor one to ``beta``, and :func:`layer_mask` zeroes their gradient,
so they are never perturbed, never updated and never counted in a norm. Depth can then
vary inside one compiled, vmapped program.

Batch-last layout: every function here also takes any number of trailing *batch* axes,
``theta`` ``[L_max, d, *batch]``, ``X`` ``[n, d, *batch]``, ``y`` ``[n, *batch]``, ``depth``
``[*batch]`` (size-1 batch axes broadcast). Sweeps put their grid points there, so each
formula is one elementwise loop over contiguous memory. Sums and products over the small
structural axes (layers, coordinates, data points) are unrolled over rows, which XLA
fuses into that loop (:mod:`samflow.layout`); the one exception is more than one data
point shared by the whole batch, whose contractions with ``beta`` are matrix products
(:func:`inner_products`, :func:`weighted_points`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from samflow.errors import InputError
from samflow.inputs import check_hashable, check_problem
from samflow.layout import sum_rows
from samflow.losses import BUILT_IN as LOSS_NAMES
from samflow.losses import LOGISTIC, Loss
from samflow.parametrizations import BUILT_IN as PARAMETRIZATION_NAMES
from samflow.parametrizations import PRODUCT, Parametrization


def _built_in(what: str, value, protocol: type, built_in: dict):
    """``value`` as an object of ``protocol``: itself, or the built-in of that exact name
    (``"U2-V2"`` is refused, not read as another); else ``InputError`` naming it."""
    if isinstance(value, protocol):
        check_hashable(value, what)
        return value
    if not isinstance(value, str):
        raise InputError(
            f"{what} must be one of {', '.join(built_in)} or a samflow.{protocol.__name__}; "
            f"got {value!r} ({type(value).__name__})"
        )
    if value not in built_in:
        raise InputError(f"unknown {what} {value!r}; choose from {', '.join(built_in)}")
    return built_in[value]


class Problem(NamedTuple):
    """A binary classification data set.

    Fields:
        X: ``[n, d, *batch]`` inputs.
        y: ``[n, *batch]`` labels in {-1, +1}.
    """

    X: Array
    y: Array

    @property
    def n(self) -> int:
        return int(self.X.shape[0])

    @property
    def d(self) -> int:
        return int(self.X.shape[1])


def single_point(mu: Array | np.ndarray | list[float]) -> Problem:
    """The paper's focal problem: one point ``x = mu`` with label ``y = +1``."""
    mu = jnp.asarray(mu)
    return Problem(X=mu[None, :], y=jnp.ones((1,), dtype=mu.dtype))


def layer_mask(depth: int | Array, n_layers: int, dtype=None) -> Array:
    """``[n_layers, 1, *batch]`` mask for ``depth`` ``[*batch]``: one for real layers, else zero."""
    depth = jnp.asarray(depth)
    layers = jnp.arange(n_layers).reshape(n_layers, 1, *(1,) * depth.ndim)
    return (layers < depth).astype(dtype if dtype is not None else jnp.result_type(float))


def _shared_data(X: Array) -> Array | None:
    """``X`` as ``[n, d]`` when it has more than one point and no real batch axis (every
    trailing axis of size one: the points are the same for the whole batch), else None."""
    if X.shape[0] == 1 or any(s != 1 for s in X.shape[2:]):
        return None
    return X.reshape(X.shape[:2])


def inner_products(X: Array, v: Array) -> Array:
    """``sum_j X[i, j] v[j]``: ``X`` ``[n, d, *batch]``, ``v`` ``[d, *batch]`` -> ``[n, *batch]``.

    Data shared by the batch (more than one point, no batch axis of their own) contract
    as one matrix product ``[n, d] @ [d, B]``. As a sum of the rows of the broadcast
    ``[n, d, B]`` products, XLA materialised that array and recomputed it in every
    consumer: measured on 4096 points, n = 16, d = 4 and 500 steps, a USAM sweep ran 7x
    slower (0.75 s against 0.11 s) and GD 3x (0.19 s against 0.06 s); at n = 256 GD ran
    13x slower. Points that vary along the batch (a minibatch per grid point) contract
    as one reduction, which XLA keeps apart (minibatch l2-SAM, 64 points, batch 32: 0.62 s
    against 0.80 s as a sum of rows). One point (the paper's problem) keeps the sum of
    rows, the faster form there (:mod:`samflow.layout`).
    """
    shared = _shared_data(X)
    if shared is None:
        terms = jnp.swapaxes(X, 0, 1) * v[:, None]
        return sum_rows(terms) if X.shape[0] == 1 else jnp.sum(terms, axis=0)
    out = jnp.tensordot(shared, v, axes=1, precision=jax.lax.Precision.HIGHEST)
    return jnp.broadcast_to(out, (X.shape[0], *jnp.broadcast_shapes(X.shape[2:], v.shape[1:])))


def weighted_points(X: Array, a: Array) -> Array:
    """``sum_i a[i] X[i, j]``: ``X`` ``[n, d, *batch]``, ``a`` ``[n, *batch]`` -> ``[d, *batch]``;
    the transposed contraction of :func:`inner_products`, as one matrix product where
    the data are shared by the batch, as one reduction where they vary along it (the
    same measurements)."""
    shared = _shared_data(X)
    if shared is None:
        return sum_rows(a[:, None] * X) if X.shape[0] == 1 else jnp.sum(a[:, None] * X, axis=0)
    out = jnp.tensordot(shared.T, a, axes=1, precision=jax.lax.Precision.HIGHEST)
    return jnp.broadcast_to(out, (X.shape[1], *jnp.broadcast_shapes(X.shape[2:], a.shape[1:])))


def beta(theta: Array) -> Array:
    """Predictor of the paper's network ``beta = w^(1) * ... * w^(L)`` (elementwise),
    ``[L_max, d, *b] -> [d, *b]`` (:class:`samflow.parametrizations.Product`)."""
    return PRODUCT.beta(theta)


def margins(theta: Array, problem: Problem) -> Array:
    """``z_i = y_i <beta(theta), x_i>`` of the paper's network, shape ``[n, *batch]``."""
    return problem.y * inner_products(problem.X, beta(theta))


class DiagAux(NamedTuple):
    """What one gradient evaluation reports besides the gradient.

    Fields:
        loss: ``[*batch]`` loss at the evaluated parameters.
        lprime_abs: ``[*batch]`` ``|l'(z)|`` when time is rescaled (one point, a margin
            loss: the rescaling factor of docs/theory/flows.md#rescaled-flows); else 1.
    """

    loss: Array
    lprime_abs: Array


def _masked(g: Array, mask: Array | None) -> Array:
    return g if mask is None else g * mask


def loss(theta: Array, problem: Problem) -> Array:
    """Logistic loss of the paper's network on ``problem`` (:data:`DEFAULT`), ``[*batch]``."""
    return DEFAULT.value(theta, problem)


def grad_and_aux(theta: Array, problem: Problem, mask: Array | None) -> tuple[Array, DiagAux]:
    """The gradient of the paper's model (:meth:`Model.grad_and_aux` of :data:`DEFAULT`):
    ``dLoss/dw^(l)_j = (1/n) sum_i l'(z_i) y_i x_ij prod_{k != l} w^(k)_j`` with ``l'(z) =
    -sigmoid(-z)`` (docs/theory/setting.md#setting); ``mask`` from :func:`layer_mask`, or None when
    no row is padding."""
    return DEFAULT.grad_and_aux(theta, problem, mask)


def ascent_direction(theta: Array, problem: Problem, mask: Array | None) -> Array:
    """For one data point, ``-y x_j prod_{k != l} w^(k)_j`` (:meth:`Model.ascent_direction`
    of :data:`DEFAULT`)."""
    return DEFAULT.ascent_direction(theta, problem, mask)


def major_coordinate(problem: Problem) -> int:
    """The major coordinate (1-based) of ``problem`` (docs/theory/regimes.md#definitions).

    One point: ``argmax_j mu_j``. ``n`` points: the coordinate of the largest ``|beta_j|``
    in the l1 max-margin direction ``argmax_{||beta||_1 <= 1} min_i y_i <x_i, beta>``
    (a linear program, HiGHS), which for one point is ``e_argmax mu``; a tie goes to the
    first coordinate; data that are not separable (margin <= 0) have no such direction
    and use ``argmax_j |sum_i y_i x_ij|`` instead.
    """
    from scipy.optimize import linprog

    X, y = np.asarray(problem.X), np.asarray(problem.y)
    n, d = X.shape
    if n == 1:
        return int(np.argmax(X[0])) + 1
    # Variables p, q >= 0 (beta = p - q) and the margin t; maximise t.
    signed = y[:, None] * X
    cost = np.r_[np.zeros(2 * d), -1.0]
    rows = np.c_[-signed, signed, np.ones(n)]  # t - y_i <x_i, beta> <= 0
    budget = np.r_[np.ones(2 * d), 0.0][None]  # ||beta||_1 <= 1
    bounds = [(0, None)] * (2 * d) + [(None, None)]
    res = linprog(cost, A_ub=np.r_[rows, budget], b_ub=np.r_[np.zeros(n), 1.0], bounds=bounds)
    if res.status == 0 and -res.fun > 0:
        direction = np.abs(res.x[:d] - res.x[d : 2 * d])
    else:
        direction = np.abs(signed.sum(axis=0))
    return int(np.argmax(direction)) + 1


@dataclass(frozen=True)
class Model:
    r"""A diagonal linear network: its parametrisation and its loss (hashable, static).

    Attributes:
        parametrization: a :class:`samflow.Parametrization` (how ``beta`` is made from
            \(\theta\)), or the name of a built-in one: ``product``
            (\(\beta = w^{(1)} \dots w^{(L)}\)), ``u2-v2`` (\(\beta = u^2 - v^2\), rows u, v) or
            ``uv`` (\(\beta = u v\)) (:mod:`samflow.parametrizations`).
        loss: a :class:`samflow.Loss` of the prediction, or the name of a built-in one:
            ``logistic`` (\(\log(1 + e^{-z})\)), ``exponential`` (\(e^{-z}\)) of the margin
            \(z = y \langle \beta, x\rangle\), or ``squared``
            (\((1/2)(\langle \beta, x\rangle - y)^2\)) (:mod:`samflow.losses`); the training loss is
            the mean over the n points.

    A name is turned into its object here, once: afterwards both fields are objects,
    and ``Model("uv", "squared") == Model(UV, SQUARED)``. Every method takes the
    batch-last layout of this module (\(\theta\) ``[L_max, d, *batch]``). Nothing here
    branches on which model it is: the paper's (:data:`DEFAULT`) computes with the same
    formulas, and its fast forms are the capabilities its objects declare (the product
    network's Jacobian without division; one point of a margin loss needing no
    \(l'(z)\) for its ascent direction; closed-form flows, :attr:`closed_forms`).

    **Gradient and Hessian (derived here).** With predictions \(p_i = \langle \beta, x_i\rangle\),
    per-point losses \(l_i(p_i)\), \(\mathrm{Loss} = (1/n) \sum_i l_i\), and since \(\beta_j\)
    depends on column ``theta[:, j]`` only, write
    \(G[l, j] = \partial \beta_j / \partial \theta[l, j]\) (:meth:`jacobian`),
    \(B[l, k, j] = \partial^2 \beta_j / \partial \theta[l, j] \partial \theta[k, j]\)
    (:meth:`curvature`), \(c_j = (1/n) \sum_i l_i'(p_i) x_{ij}\) (the gradient in beta) and
    \(A = (1/n) X^T \operatorname{diag}(l_i''(p_i)) X\) (the Hessian in beta, \(d \times d\)). Then

    \[
    \begin{gathered}
    \frac{\partial \mathrm{Loss}}{\partial \theta[l, j]} = c_j G[l, j], \\
    \frac{\partial^2 \mathrm{Loss}}{\partial \theta[l, j] \, \partial \theta[k, m]}
    = G[l, j] A[j, m] G[k, m] + [j = m] \, c_j B[l, k, j]:
    \end{gathered}
    \]

    coordinates couple only through the data term \(X^T \operatorname{diag}(l'') X\); the second
    term is block diagonal (an \(L \times L\) block per coordinate). \(G\) and \(B\) of each
    parametrisation are in its docstring, \(l'\) and \(l''\) of each loss in its.

    Raises:
        InputError: when made, a parametrisation or loss that is neither a built-in
            name (names are exact: ``"U2-V2"`` is refused) nor an object of the
            protocol, naming the value; one that cannot be hashed ("make it a frozen
            dataclass"). Its methods are checked against the protocol when a run first
            uses them, on the run's shapes (:func:`samflow.user_code.check_model`).

    Examples:
        >>> import jax.numpy as jnp
        >>> import samflow
        >>> model = samflow.Model()  # the paper's: the product network, the logistic loss
        >>> model.parametrization.name, model.loss.name, model.classifies
        ('product', 'logistic', True)
        >>> model.beta(jnp.array([[1.0, 2.0], [3.0, 0.5]])).tolist()  # beta = w1 * w2
        [3.0, 1.0]
        >>> samflow.Model("u2-v2", "squared").classifies  # no regimes for regression
        False
    """

    parametrization: Parametrization = PRODUCT
    loss: Loss = LOGISTIC

    def __post_init__(self) -> None:
        """Turn names into the built-in objects; refuse (``InputError`` naming the value)
        anything that is neither a built-in name nor an object of the protocol."""
        for what, protocol, built_in in (
            ("parametrization", Parametrization, PARAMETRIZATION_NAMES),
            ("loss", Loss, LOSS_NAMES),
        ):
            object.__setattr__(self, what, _built_in(what, getattr(self, what), protocol, built_in))

    def check_theta(self, theta, d: int | None = None) -> None:
        """Refuse (``InputError`` naming the shape) parameters this model cannot take:
        ``theta`` must be ``[rows, d]`` (``d`` the data's dimension when given), with the
        rows the parametrisation has (:meth:`Parametrization.check_rows`)."""
        shape = tuple(np.shape(theta))
        name = self.parametrization.name
        if len(shape) != 2 or shape[0] < 1 or (d is not None and shape[1] != d):
            want = f"[rows, {d}]" if d is not None else "[rows, d]"
            raise InputError(f"theta of shape {shape}: the {name} model wants {want}")
        try:
            self.parametrization.check_rows(shape[0])
        except InputError as e:
            raise InputError(f"theta of shape {shape}: {e}") from None

    @property
    def closed_forms(self) -> bool:
        """Whether the paper's closed forms hold (the balanced flows and steps of the
        rules, the flow's singular edges and certificates, docs/theory/flows.md#rescaled-flows
        and docs/theory/balanced.md#balanced-initialisation): the product network
        (``layered``) with a loss that declares them (logistic)."""
        return self.parametrization.layered and self.loss.closed_forms

    @property
    def margin_loss(self) -> bool:
        """Whether the loss is a margin loss (labels in {-1, +1})."""
        return self.loss.margin

    @property
    def built_in(self) -> bool:
        """Whether both pieces are samflow's own objects (``BUILT_IN`` of
        :mod:`samflow.parametrizations` and of :mod:`samflow.losses`), whose methods keep
        the protocol (``tests/test_models.py``) and whose code is samflow's."""
        return (
            PARAMETRIZATION_NAMES.get(self.parametrization.name) is self.parametrization
            and LOSS_NAMES.get(self.loss.name) is self.loss
        )

    @property
    def classifies(self) -> bool:
        """Whether the regimes of docs/theory/regimes.md#definitions apply: the product network
        with a margin loss. Elsewhere no regime is given (the variables are absent)."""
        return self.parametrization.layered and self.loss.margin

    def rescales(self, n: int) -> bool:
        """Whether time is rescaled (docs/theory/flows.md#rescaled-flows): one point and a margin
        loss."""
        return n == 1 and self.loss.margin

    def beta(self, theta: Array) -> Array:
        """The predictor ``[d, *batch]``."""
        return self.parametrization.beta(theta)

    def jacobian(self, theta: Array) -> Array:
        r"""\(G[l, j] = \partial \beta_j / \partial \theta[l, j]\), ``[L_max, d, *batch]``."""
        return self.parametrization.jacobian(theta)

    def curvature(self, theta: Array) -> Array:
        r"""\(B[l, k, j] = \partial^2 \beta_j / \partial \theta[l, j] \partial \theta[k, j]\), ``[L,
        L, d, *batch]``."""
        return self.parametrization.curvature(theta)

    def predictions(self, theta: Array, problem: Problem) -> Array:
        r"""\(p_i = \langle \beta, x_i\rangle\), ``[n, *batch]`` (:func:`inner_products`).

        One point with a loss that is not a margin loss (squared): one reduction, not the
        sum of rows :func:`inner_products` takes for one point. XLA fuses a sum of rows
        and the cheap residual \(p - y\) into each coordinate's gradient sum and so
        computes \(p\) d times over (measured: steps 40x slower at n = 8, d = 16, when
        every n took the sum of rows); a reduction is kept apart. The margin losses'
        transcendental derivatives keep \(p\) apart by themselves.
        """
        b = self.beta(theta)
        if not self.loss.margin and problem.X.shape[0] == 1:
            return jnp.sum(jnp.swapaxes(problem.X, 0, 1) * b[:, None], axis=0)
        return inner_products(problem.X, b)

    def value(self, theta: Array, problem: Problem) -> Array:
        r"""The training loss \((1/n) \sum_i l_i\), ``[*batch]``."""
        p = self.predictions(theta, problem)
        return sum_rows(self.loss.value(p, problem.y)) / p.shape[0]

    def grad_and_aux(
        self, theta: Array, problem: Problem, mask: Array | None
    ) -> tuple[Array, DiagAux]:
        r"""The gradient \(c_j G[l, j]\) (padding rows zero; ``mask`` from
        :func:`layer_mask`, or None when no row is padding) and the loss;
        ``lprime_abs`` is \(\lvert l'(z)\rvert\) when time is rescaled (:meth:`rescales`), else 1.
        Explicit, not autodiff: the Jacobian is the parametrisation's own (the product
        network's by prefix and suffix products, exact where a weight is zero)."""
        p = self.predictions(theta, problem)
        n = p.shape[0]
        if self.loss.margin:  # l' = y phi'(z) with phi' < 0: |l'| is -phi', no abs
            value, slope, _ = self.loss.phi(problem.y * p)
            d1, rate = slope * problem.y, -slope[0]
        else:
            value, d1, _ = self.loss.derivatives(p, problem.y)
            rate = jnp.abs(d1[0])
        c = weighted_points(problem.X, d1) / n
        g = _masked(c[None] * self.jacobian(theta), mask)
        rescale = rate if self.rescales(n) else jnp.ones_like(p[0])
        return g, DiagAux(loss=sum_rows(value) / n, lprime_abs=rescale)

    def ascent_direction(self, theta: Array, problem: Problem, mask: Array | None) -> Array:
        r"""One point, margin loss: \(-y x_j G[l, j]\), the gradient over \(\lvert l'(z)\rvert\).

        With one point the gradient is ``l'(z) y x G`` and \(l'(z) < 0\), so this is a
        positive multiple of it (docs/theory/flows.md#rescaled-flows). A scale-invariant
        perturbation rule gets the same \(\varepsilon\) from it without evaluating \(l'(z)\): the
        ascent step costs no sigmoid, and the direction survives where \(l'(z)\) underflows.
        """
        if problem.X.shape[0] != 1 or not self.loss.margin:
            raise ValueError("ascent_direction needs one data point and a margin loss")
        return _masked(-(problem.y[0] * problem.X[0])[None] * self.jacobian(theta), mask)

    def loss_fn(self, X, y) -> Callable[[Array], Array]:
        """``theta [rows, d] -> []``: this model's training loss on ``(X [n, d], y [n])``,
        a loss for :func:`samflow.fit` (checked as the engine checks data)."""
        X, y = check_problem(data=(X, y), loss=self.loss)  # NumPy float64

        def value(theta: Array) -> Array:
            from samflow.user_code import check_model

            self.check_theta(theta, X.shape[1])
            check_model(self, theta.shape[0], X.shape[1], X.shape[0], theta.dtype.name)
            dt = theta.dtype
            return self.value(theta, Problem(jnp.asarray(X, dt), jnp.asarray(y, dt)))

        return value

    def underflow(self, theta0: Array) -> Array:
        r"""``[*batch]``: whether \(\beta(0)\) lost a coordinate to underflow
        (:meth:`Parametrization.underflow`)."""
        return jnp.any(self.parametrization.underflow(theta0), axis=0)

    def hessian(self, theta: Array, problem: Problem, mask: Array | None = None) -> Array:
        """The Hessian of the training loss in ``theta``, ``[L_max * d, L_max * d, *batch]``
        (index ``l * d + j``), from the structure in the class docstring. Padding rows
        (``mask`` 0) give zero rows and columns."""
        H, _ = self._hessian_parts(theta, problem, mask)
        L, d = theta.shape[:2]
        return H.reshape(L * d, L * d, *theta.shape[2:])

    def _hessian_parts(self, theta, problem, mask):
        p = self.predictions(theta, problem)
        n = p.shape[0]
        _, d1, d2 = self.loss.derivatives(p, problem.y)
        X = problem.X
        c = weighted_points(X, d1) / n  # [d, *b]
        A = jnp.einsum("ij...,i...,im...->jm...", X, d2, X) / n  # [d, d, *b]
        G = _masked(self.jacobian(theta), mask)
        B = self.curvature(theta)
        if mask is not None:
            B = B * mask[:, None] * mask[None, :]
        d = theta.shape[1]
        eye = jnp.eye(d, dtype=theta.dtype).reshape(d, d, *(1,) * (theta.ndim - 2))
        H = jnp.einsum("lj...,jm...,km...->ljkm...", G, A, G)
        H = H + jnp.einsum("lkj...,j...,jm...->ljkm...", B, c, eye)
        trace = sum_rows(sum_rows(G * G) * jnp.einsum("jj...->j...", A))
        trace = trace + sum_rows(c * sum_rows(jnp.einsum("llj...->lj...", B)))
        return H, trace

    def sharpness(
        self, theta: Array, problem: Problem, mask: Array | None = None
    ) -> tuple[Array, Array]:
        r"""``(lambda_max, trace)`` of the Hessian, each ``[*batch]``.

        ``lambda_max`` is the largest (algebraic) eigenvalue of the
        \(L_{\max} d \times L_{\max} d\) matrix, solved to the dtype's precision by
        :func:`top_eigenvalue` (:data:`samflow.inputs.MAX_HESSIAN` bounds its size). Padding rows
        add zero eigenvalues, which never exceed ``lambda_max``: the second term of the Hessian
        has zero trace in every block (\(B\) has a zero diagonal for the product and uv,
        ``diag(2, -2)`` for u2-v2) and the first is positive semidefinite for a convex
        loss, so
        ``lambda_max >= trace / (L d) >= 0`` (derived here).
        """
        H, trace = self._hessian_parts(theta, problem, mask)
        L, d = theta.shape[:2]
        return top_eigenvalue(H.reshape(L * d, L * d, *theta.shape[2:])), trace


def named_classifies(parametrization: str, loss: str) -> bool:
    """:attr:`Model.classifies` of the model a file names (its ``parametrization`` and
    ``loss`` attributes). A name that is no built-in one is a user's object, which the
    file does not hold: a parametrisation of one's own is not the product network, and
    a loss of one's own on the product network is taken as a margin loss (as before
    objects: every loss but ``squared``)."""
    if parametrization not in PARAMETRIZATION_NAMES:
        return False
    if loss not in LOSS_NAMES:
        return PARAMETRIZATION_NAMES[parametrization].layered
    return Model(parametrization, loss).classifies


def top_eigenvalue(H: Array, iterations: int = 64) -> Array:
    """The largest eigenvalue of symmetric ``H`` ``[n, n, *batch]`` -> ``[*batch]``, in
    plain XLA operations (batch-last, so it runs inside a tile of a sweep).

    Householder reduction to a tridiagonal matrix ``T`` (``n - 2`` reflections ``P = I -
    2 v v^T``, each ``A <- P A P = A - 2 v w^T - 2 w v^T + 4 (v.w) v v^T`` with ``w = A
    v``: backward stable), then bisection on the Sturm count of ``T``: the number of
    negative pivots of the ``LDL^T`` factorisation of ``T - s I``, ``q_0 = T_00 - s``,
    ``q_i = T_ii - s - T_{i,i-1}^2 / q_{i-1}``, is the number of eigenvalues below ``s``
    (Sylvester's law of inertia), starting from the Gershgorin interval and halving it
    ``iterations`` times. Not LAPACK's ``syevd``: that custom call deadlocked in a sweep
    sharded over several CPU devices (two tiles solving at once), and the bisection
    needs nothing but elementwise loops.
    """
    n = H.shape[0]
    index = jnp.arange(n).reshape(n, *(1,) * (H.ndim - 2))

    def reflect(k, A):
        x = jnp.where(index > k, jax.lax.dynamic_index_in_dim(A, k, 1, keepdims=False), 0.0)
        pivot = index == k + 1
        first = sum_rows(jnp.where(pivot, x, 0.0))
        alpha = -jnp.where(first >= 0, 1.0, -1.0) * jnp.sqrt(sum_rows(x * x))
        v = x - jnp.where(pivot, alpha, 0.0)
        vnorm = jnp.sqrt(sum_rows(v * v))
        v = jnp.where(vnorm > 0, v / jnp.where(vnorm > 0, vnorm, 1.0), 0.0)
        w = jnp.einsum("ij...,j...->i...", A, v)
        K = sum_rows(v * w)
        A = A - 2 * v[:, None] * w[None] - 2 * w[:, None] * v[None]
        return A + 4 * K * v[:, None] * v[None]

    A = jax.lax.fori_loop(0, max(n - 2, 0), reflect, H)
    diag = jnp.einsum("ii...->i...", A)
    off = jnp.einsum("ii...->i...", A[1:, :-1])  # T[i + 1, i], [n - 1, *batch]
    pad = jnp.zeros_like(diag[:1])
    radius = jnp.abs(jnp.concatenate([off, pad])) + jnp.abs(jnp.concatenate([pad, off]))
    lo, hi = jnp.min(diag - radius, axis=0), jnp.max(diag + radius, axis=0)
    tiny = jnp.finfo(H.dtype).tiny
    off2 = jnp.concatenate([pad, off * off])  # off2[i] = T[i, i - 1]^2, 0 for i = 0

    def below(s):  # eigenvalues of T below s, [*batch]
        def pivot(i, carry):
            q, count = carry
            q = jnp.where(jnp.abs(q) < tiny, -tiny, q)
            d_i = jax.lax.dynamic_index_in_dim(diag, i, 0, keepdims=False)
            e_i = jax.lax.dynamic_index_in_dim(off2, i, 0, keepdims=False)
            q = d_i - s - e_i / q
            return q, count + (q < 0)

        q0 = jnp.ones_like(s)  # T[0, -1] = 0: the first pivot is diag[0] - s
        return jax.lax.fori_loop(0, n, pivot, (q0, jnp.zeros(s.shape, jnp.int32)))[1]

    def halve(_, bounds):
        lo, hi = bounds
        mid = 0.5 * (lo + hi)
        top_below = below(mid) == n  # every eigenvalue is below mid
        return jnp.where(top_below, lo, mid), jnp.where(top_below, mid, hi)

    lo, hi = jax.lax.fori_loop(0, iterations, halve, (lo, hi))
    return 0.5 * (lo + hi)


DEFAULT = Model()
"""The paper's model: the product network with the logistic loss."""
