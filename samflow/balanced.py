"""The balanced step: a discrete run whose real layers are all equal runs one vector.

Why equal layers stay equal (the discrete counterpart of
docs/theory/balanced.md#balanced-initialisation). Let every real layer be ``w^(l) = u`` (``[d]``),
``l = 1..L``, on any data ``(X, y)``. The gradient of layer ``l`` (docs/theory/setting.md#setting)
is

    dLoss/dw^(l)_j = c_j prod_{k != l} w^(k)_j = c_j u_j^(L-1),
    c_j = (1/n) sum_i l'(z_i) y_i x_ij,   z_i = y_i <x_i, u^L>,

the same vector ``g = c u^(L-1)`` for every layer. Each rule maps these equal layer
gradients to equal perturbations (:attr:`samflow.rules.PerturbationRule.layers_alike`):

- GD: none;
- l2-SAM: ``||(g, ..., g)||_2^2 = sum_l sum_j g_j^2 = L ||g||_2^2``, so every layer
  gets ``eps = g / (sqrt(L) ||c u^(L-1)||_2)``;
- linf-SAM: ``eps = sign(g)`` for every layer;
- USAM: ``eps = g`` for every layer.

So the perturbed point has equal layers ``w~ = u + rho eps``; the descent gradient there
is ``c~ w~^(L-1)`` for every layer (``c~`` from the margins ``z~_i = y_i <x_i, w~^L>``),
and the update ``u <- u - eta c~ w~^(L-1)`` leaves the layers equal. By induction they
are equal after every step, and the L-layer run *is* the run of ``u``, with
``beta = u^L``. Nothing here needs ``u``, alpha or the data to be positive, nor one data
point: only equal real layers at the start (permuting the layers is a symmetry of the
loss and of each of these rules). With one data point a scale-invariant rule takes
``eps`` from the ascent direction ``-y x u^(L-1)`` (a positive multiple of ``g``,
:func:`samflow.model.ascent_direction`) and ``tau`` grows by ``eta sigmoid(-z~)``
(docs/theory/flows.md#rescaled-flows), as in the general step.

The state is ``[d, *batch]`` instead of ``[L_max, d, *batch]``: per step one chain of
powers ``w^2, ..., w^L`` replaces the ``L`` exclusive products, and every
layer-wise operation runs once instead of ``L`` times. The loss and its derivative come
from :mod:`samflow.model` itself, evaluated on a one-layer network whose layer is
``beta``: its gradient is ``c`` (the empty product is one) and its margins those of
``beta``. Depth padding (docs/theory/numerics.md#depth-in-one-program): a point of depth ``L <
L_max`` selects its own power among the static ``0..L_max``; its padding rows are ones throughout.

The numbers are those of the general step up to rounding: the l2 norm sums ``L`` copies
as ``L`` times one sum, and at ``L >= 5`` the general step's exclusive products multiply
in another order (``tests/test_balanced.py``: 1e-12 relative in float64, every rule,
depth and padding the path serves). Which runs take it is decided once,
:func:`applies`; the files say which path ran (attribute ``step_path``).
"""

from __future__ import annotations

import numpy as np
from jax import Array
from jax import numpy as jnp

from samflow.loop import Network
from samflow.model import (
    DEFAULT,
    Model,
    Problem,
    ascent_direction,
    grad_and_aux,
    layer_mask,
    loss,
    margins,
)
from samflow.rules import PerturbationRule

BALANCED, GENERAL = "balanced", "general"
STEP_PATHS = (BALANCED, GENERAL)
"""Values of the ``step_path`` attribute of a discrete file."""


def equal_layers(theta0: np.ndarray, depth: np.ndarray) -> bool:
    """Whether every point of ``theta0`` ``[C, L_max, d]`` has all its real layers equal
    (rows ``0..depth-1``; ``depth`` ``[C]`` or ``[1]``) and its padding rows one."""
    theta0 = np.asarray(theta0)
    C, n_layers, _ = theta0.shape
    depth = np.broadcast_to(np.asarray(depth).reshape(-1), (C,))
    real = np.arange(n_layers)[None, :, None] < depth[:, None, None]
    same = np.where(real, theta0 == theta0[:, :1], theta0 == 1.0)
    return bool(np.all(same))


def rule_applies(rule: PerturbationRule) -> bool:
    """Whether runs of ``rule`` from equal layers may take the balanced step: GD and every
    rule that declares ``layers_alike`` (a random rule cannot)."""
    return rule.treats_layers_alike and not rule.random


def setting_applies(
    mode: str, rule: PerturbationRule, model: Model = DEFAULT, sampling: object = None
) -> bool:
    """Whether runs of this setting take the balanced step from equal layers: a discrete
    run (``mode``) of the paper's model (product network, logistic loss: the step below is
    written for it), full-batch and deterministic (no ``sampling``,
    :class:`samflow.stochastic.Sampling`), with a rule that treats layers alike
    (:func:`rule_applies`)."""
    return mode == "discrete" and model.closed_forms and sampling is None and rule_applies(rule)


def applies(
    mode: str,
    rule: PerturbationRule,
    theta0: np.ndarray,
    depth: np.ndarray,
    model: Model = DEFAULT,
    sampling: object = None,
) -> bool:
    """Whether a run takes the balanced step: its setting does (:func:`setting_applies`)
    and every point starts with equal real layers (:func:`equal_layers`)."""
    return setting_applies(mode, rule, model, sampling) and equal_layers(theta0, depth)


def _powers(u: Array, top: int) -> list[Array]:
    """``[u^0, u^1, ..., u^top]``, each the previous times ``u`` (the order in which
    :func:`samflow.model.beta` multiplies equal rows)."""
    out = [jnp.ones_like(u), u]
    for _ in range(top - 1):
        out.append(out[-1] * u)
    return out[: top + 1]


def network(
    theta0: Array,
    problem: Problem,
    depth: Array | int,
    rho: Array | float,
    eta: Array | float,
    rule: PerturbationRule,
) -> Network:
    """The run of ``theta0`` ``[L_max, d, *batch]`` whose real layers are all equal, as the
    one vector ``u = theta0[0]`` ``[d, *batch]`` (:class:`samflow.loop.Network`).

    ``depth``: the static row count (no padding) or ``[*batch]`` ints; ``rule`` must
    treat layers alike (:func:`rule_applies`). The caller checks that the layers are
    equal (:func:`applies`): this runs row 0.
    """
    n_layers = theta0.shape[0]
    batch_ndim = theta0.ndim - 2
    static = isinstance(depth, int | np.integer)
    if static and depth != n_layers:
        raise ValueError(f"a static depth {depth} must be the row count {n_layers}")
    if not static:
        depth = jnp.asarray(depth)
    one_point = problem.X.shape[0] == 1

    def power(u: Array, less: int) -> Array:
        """``u^(depth - less)`` per point."""
        if static:
            return _powers(u, n_layers - less)[n_layers - less]
        powers = _powers(u, n_layers - less)
        out = powers[0]
        for k in range(1, n_layers - less + 1):
            out = jnp.where(depth == k + less, powers[k], out)
        return out

    def beta(u):
        return power(u, 0)

    def coefficient(beta_: Array) -> tuple[Array, object]:
        """``c`` ``[d, *batch]`` (the gradient in beta) and the loss's aux at ``beta_``."""
        c, aux = grad_and_aux(beta_[None], problem, None)
        return c[0], aux

    def perturbed(u: Array) -> Array:
        if rule.direction is None:
            return u
        below = power(u, 1)  # u^(L-1): the product of the other layers
        if one_point and rule.scale_invariant:
            ascent = ascent_direction(jnp.ones_like(u)[None], problem, None)[0] * below
        else:
            ascent = coefficient(below * u)[0] * below
        return rule.perturbed_alike(u, ascent, depth, rho, batch_ndim)

    def one_step(t, u, key):
        w = perturbed(u)
        below = power(w, 1)
        c, aux = coefficient(below * w)
        return u - eta * (c * below), aux.lprime_abs

    def finite(u):
        ok = jnp.all(jnp.isfinite(u), axis=0) & jnp.all(jnp.isfinite(beta(u)), axis=0)
        if rule.direction is None:
            return ok
        # The perturbed point's margins, as the general network checks them.
        return ok & jnp.all(jnp.isfinite(margins(beta(perturbed(u))[None], problem)), axis=0)

    def theta(u):
        rows = jnp.broadcast_to(u[None], (n_layers, *u.shape))
        if static:
            return rows
        return jnp.where(layer_mask(depth, n_layers, u.dtype) > 0, rows, 1.0)

    return Network(
        state0=theta0[0],
        step=one_step,
        beta=beta,
        loss=lambda u: loss(beta(u)[None], problem),
        theta=theta,
        finite=finite,
    )
