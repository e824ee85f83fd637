"""The two image models, behind one small interface.

- :class:`CNN`: a small convolutional network, an ``eqx.Module``. Three 3x3 conv-ReLU
  blocks (2x2 average pooling between them), global average pooling, one linear logit.
  No biases and no batch norm: the logit is then positively homogeneous of degree
  ``len(channels) + 1`` in the parameters, so the initialisation scale ``alpha`` acts as
  it does in the diagonal network of the theory (small alpha: tiny gradients that the
  SAM perturbation ``rho`` dominates; large alpha: the perturbation is negligible).
- The L = 2 linear diagonal network of :mod:`samflow.model` on flattened pixels: the
  bridge between the theory and the CNN on the same images.

A :class:`Classifier` bundles what training and attribution need: initial parameters
(a pytree of arrays: what :func:`samflow.steps.step` updates), the logit of one image,
the gradient function, and the map that takes the Grad-CAM slot.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import Array

from samflow import model as diag

PyTree = Any
MODELS: tuple[str, ...] = ("cnn", "diagonal")
DEFAULT_CHANNELS: tuple[int, ...] = (8, 16, 32)


def _avg_pool2(x: Array) -> Array:
    """2x2 average pooling with stride 2, ``[K, H, W] -> [K, H // 2, W // 2]``."""
    k, h, w = x.shape
    x = x[:, : h - h % 2, : w - w % 2]
    return x.reshape(k, h // 2, 2, w // 2, 2).mean(axis=(2, 4))


class CNN(eqx.Module):
    """Conv-ReLU blocks, global average pooling, one logit; no biases, no batch norm.

    Shapes: one image ``[C, H, W]`` -> last conv activations ``[channels[-1], h, w]``
    (``h = H // 2 ** (len(channels) - 1)``) -> scalar logit.
    """

    convs: tuple[eqx.nn.Conv2d, ...]
    head: eqx.nn.Linear

    def __init__(
        self,
        in_channels: int,
        channels: tuple[int, ...] = DEFAULT_CHANNELS,
        *,
        alpha: float = 1.0,
        key: Array,
    ):
        keys = jax.random.split(key, len(channels) + 1)
        sizes = (in_channels, *channels)
        convs = tuple(
            eqx.nn.Conv2d(c_in, c_out, 3, padding="SAME", use_bias=False, key=k)
            for c_in, c_out, k in zip(sizes[:-1], sizes[1:], keys[:-1], strict=True)
        )
        head = eqx.nn.Linear(channels[-1], "scalar", use_bias=False, key=keys[-1])
        # alpha multiplies equinox's default (LeCun-uniform) initialisation of every weight.
        self.convs = tuple(jax.tree_util.tree_map(lambda p: alpha * p, c) for c in convs)
        self.head = jax.tree_util.tree_map(lambda p: alpha * p, head)

    def features(self, x: Array) -> Array:
        """Activations of the last conv layer (what Grad-CAM weighs), ``[K, h, w]``."""
        for i, conv in enumerate(self.convs):
            x = jax.nn.relu(conv(x))
            if i < len(self.convs) - 1:
                x = _avg_pool2(x)
        return x

    def logit_from_features(self, a: Array) -> Array:
        """Global average pooling and the linear head, ``[K, h, w] -> []``."""
        return self.head(jnp.mean(a, axis=(1, 2)))

    def __call__(self, x: Array) -> Array:
        return self.logit_from_features(self.features(x))


class Aux(NamedTuple):
    """What a gradient evaluation reports: the batch ``loss`` (scalar)."""

    loss: Array


@dataclass(frozen=True)
class Classifier:
    """A binary image classifier with a scalar logit, as training needs it.

    Attributes:
        name: ``cnn`` or ``diagonal``.
        init: ``key -> params``, the pytree of arrays that the step updates.
        logit: ``(params, x [C, H, W]) -> []``.
        grad_and_aux: ``(params, x [b, C, H, W], y [b]) -> (grads, Aux)``, logistic loss.
        cam: ``(params, x [C, H, W], s) -> [H, W]`` nonnegative map of evidence for the
            class of sign ``s``: Grad-CAM for the CNN; for the diagonal network, whose
            only "feature map" is the input, the positive part of ``s * beta * x``
            summed over channels (gradient times input, the linear model's contribution).
    """

    name: str
    init: Callable[[Array], PyTree]
    logit: Callable[[PyTree, Array], Array]
    grad_and_aux: Callable[[PyTree, Array, Array], tuple[PyTree, Aux]]
    cam: Callable[[PyTree, Array, Array], Array]


def logistic_loss(margins: Array) -> Array:
    """Mean of ``log(1 + exp(-z))``, as softplus for stability."""
    return jnp.mean(jax.nn.softplus(-margins))


def grad_cam(features: Array, head: Callable[[Array], Array], s: Array, size: tuple[int, int]):
    """Grad-CAM of the class of sign ``s`` (Selvaraju et al., 2017), upsampled to ``size``.

    ``features``: last conv activations ``[K, h, w]``; ``head``: features -> logit.
    Channel weights are the spatial means of ``d(s * logit) / d features``; the map is
    ``relu(sum_k weight_k * features_k)`` ``[h, w]``, resized bilinearly to ``[H, W]``.
    """
    grads = jax.grad(lambda a: s * head(a))(features)
    weights = jnp.mean(grads, axis=(1, 2))
    cam = jax.nn.relu(jnp.tensordot(weights, features, axes=1))
    return jax.image.resize(cam, size, method="bilinear")


def cnn_classifier(
    in_channels: int, channels: tuple[int, ...] = DEFAULT_CHANNELS, alpha: float = 1.0
) -> Classifier:
    """The :class:`CNN`, its parameters split off with ``eqx.partition``."""
    _, static = eqx.partition(
        CNN(in_channels, channels, alpha=alpha, key=jax.random.key(0)), eqx.is_inexact_array
    )

    def init(key: Array) -> PyTree:
        params, _ = eqx.partition(
            CNN(in_channels, channels, alpha=alpha, key=key), eqx.is_inexact_array
        )
        return params

    def logit(params: PyTree, x: Array) -> Array:
        return eqx.combine(params, static)(x)

    def loss(params: PyTree, x: Array, y: Array) -> Array:
        return logistic_loss(y * jax.vmap(lambda xi: logit(params, xi))(x))

    def grad_and_aux(params: PyTree, x: Array, y: Array) -> tuple[PyTree, Aux]:
        value, grads = jax.value_and_grad(loss)(params, x, y)
        return grads, Aux(loss=value)

    def cam(params: PyTree, x: Array, s: Array) -> Array:
        net = eqx.combine(params, static)
        return grad_cam(net.features(x), net.logit_from_features, s, x.shape[1:])

    return Classifier("cnn", init, logit, grad_and_aux, cam)


def diagonal_classifier(image_shape: tuple[int, int, int], alpha: float = 1.0) -> Classifier:
    """The L = 2 diagonal network on flattened pixels, ``theta`` ``[2, C*H*W]``.

    Initialised balanced, ``w^(1) = w^(2) = alpha`` (docs/theory.md §4): the key is unused,
    so every seed gives the same run when training is full batch. The gradient is the
    engine's explicit one, :func:`samflow.model.grad_and_aux`.
    """
    d = int(jnp.prod(jnp.array(image_shape)))
    depth = 2

    def init(key: Array) -> Array:
        del key
        return jnp.full((depth, d), alpha, dtype=jnp.float32)

    def logit(theta: Array, x: Array) -> Array:
        return jnp.dot(diag.beta(theta), x.reshape(-1))

    def grad_and_aux(theta: Array, x: Array, y: Array) -> tuple[Array, Aux]:
        mask = diag.layer_mask(depth, depth, dtype=theta.dtype)
        grads, aux = diag.grad_and_aux(theta, diag.Problem(x.reshape(x.shape[0], -1), y), mask)
        return grads, Aux(loss=aux.loss)

    def cam(theta: Array, x: Array, s: Array) -> Array:
        contribution = s * diag.beta(theta).reshape(x.shape) * x
        return jax.nn.relu(jnp.sum(contribution, axis=0))

    return Classifier("diagonal", init, logit, grad_and_aux, cam)


def make_classifier(
    name: str,
    image_shape: tuple[int, int, int],
    *,
    alpha: float = 1.0,
    channels: tuple[int, ...] = DEFAULT_CHANNELS,
) -> Classifier:
    """The classifier ``name`` (``cnn`` or ``diagonal``) for images ``[C, H, W]``."""
    if name == "cnn":
        return cnn_classifier(image_shape[0], channels, alpha)
    if name == "diagonal":
        return diagonal_classifier(image_shape, alpha)
    raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")
