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

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import Array, lax
from jax.custom_derivatives import SymbolicZero

from samflow import model as diag
from samflow.errors import InputError

PyTree = Any
MODELS: tuple[str, ...] = ("cnn", "diagonal")
DEFAULT_CHANNELS: tuple[int, ...] = (8, 16, 32)
MIN_MAP_SIDE = 3
"""The smallest last conv map (per side) that :func:`default_channels` allows: Grad-CAM
is that map, upsampled, so a 2x2 map says little more than "left or right"."""
CONVS: tuple[str, ...] = ("auto", "lax", "shifted")


def _lax_conv(x: Array, w: Array) -> Array:
    """Stride-1 SAME convolution, channels last: ``x [B, H, W, I]``, ``w [kh, kw, I, O]``."""
    return lax.conv_general_dilated(
        x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )


def _shifted_products(x: Array, w: Array) -> Array:
    """The same convolution as a sum of ``kh * kw`` shifted matrix products.

    SAME padding pads ``(k - 1) // 2`` before and ``k // 2`` after each spatial axis;
    then ``out[b, h, v] = sum_{i, j} xp[b, h + i, v + j] @ w[i, j]``, which is the
    cross-correlation ``lax.conv_general_dilated`` computes. With one input channel each
    product is a broadcast multiply and XLA fuses the whole sum into one loop.
    """
    kh, kw = w.shape[:2]
    height, width = x.shape[1:3]
    xp = jnp.pad(x, ((0, 0), ((kh - 1) // 2, kh // 2), ((kw - 1) // 2, kw // 2), (0, 0)))
    terms = [
        xp[:, i : i + height, j : j + width, :] @ w[i, j] for i in range(kh) for j in range(kw)
    ]
    return sum(terms[1:], terms[0])


@jax.custom_jvp
def _shifted_conv(x: Array, w: Array) -> Array:
    """:func:`_shifted_products` forward, :func:`_lax_conv` derivatives.

    The convolution is bilinear, so its tangent is ``conv(dx, w) + conv(x, dw)``; written
    with ``lax.conv`` it transposes (reverse mode) to XLA's own backward convolutions,
    which are the fast ones on a CPU, where the shifted sum's transpose is not. Zero
    tangents (the data, in a gradient with respect to the weights) are skipped.
    """
    return _shifted_products(x, w)


@functools.partial(_shifted_conv.defjvp, symbolic_zeros=True)
def _shifted_conv_jvp(primals, tangents):
    x, w = primals
    dx, dw = tangents
    out = _shifted_products(x, w)
    parts = []
    if not isinstance(dx, SymbolicZero):
        parts.append(_lax_conv(dx, w))
    if not isinstance(dw, SymbolicZero):
        parts.append(_lax_conv(x, dw))
    if not parts:  # JAX does not call a rule with no tangent at all; kept total
        return out, jnp.zeros_like(out)
    return out, sum(parts[1:], parts[0])


def conv_same(x: Array, w: Array, conv: str = "auto") -> Array:
    """Stride-1 SAME convolution, channels last: ``x [B, H, W, I]``, ``w [kh, kw, I, O]``.

    ``conv``: ``lax`` (``lax.conv_general_dilated``), ``shifted`` (shifted products
    forward, ``lax.conv`` derivatives: :func:`_shifted_conv`), or ``auto``: ``shifted``
    for one input channel on a CPU, ``lax`` otherwise. The rule is measured (benchmark
    case 5, docs/images.md): with ``I = 1`` XLA's CPU convolution is about 10x slower
    than the fused shifted sum, and for every ``I >= 2`` we timed it is as fast or
    faster; on a GPU ``lax.conv`` (cuDNN) is the one to keep. All three agree to
    float32 rounding.
    """
    check_conv(conv)
    if conv == "auto":
        conv = "shifted" if w.shape[2] == 1 and jax.default_backend() == "cpu" else "lax"
    return _shifted_conv(x, w) if conv == "shifted" else _lax_conv(x, w)


def check_conv(conv: str) -> None:
    """A one-line error for an unknown convolution implementation."""
    if conv not in CONVS:
        raise InputError(f"unknown conv {conv!r}; choose one of {', '.join(CONVS)}")


def default_channels(height: int, width: int) -> tuple[int, ...]:
    """:data:`DEFAULT_CHANNELS`, less conv blocks from the end while the last conv map
    (``H // 2 ** (len(channels) - 1)`` a side) would be smaller than :data:`MIN_MAP_SIDE`.

    MNIST (28x28: a 7x7 map), SVHN and CIFAR-10 (32x32: 8x8) keep all three blocks; the
    built-in 8x8 digits get ``(8, 16)``: one pooling, a 4x4 map (three blocks would
    leave 2x2), and a logit homogeneous of degree 3 in the weights instead of 4.
    """
    channels = DEFAULT_CHANNELS
    while len(channels) > 1 and min(height, width) // 2 ** (len(channels) - 1) < MIN_MAP_SIDE:
        channels = channels[:-1]
    return channels


def _avg_pool2(x: Array) -> Array:
    """2x2 average pooling with stride 2, channels last, ``[B, H, W, K] -> [B, H//2, W//2, K]``."""
    b, h, w, k = x.shape
    x = x[:, : h - h % 2, : w - w % 2]
    return x.reshape(b, h // 2, 2, w // 2, 2, k).mean(axis=(2, 4))


class CNN(eqx.Module):
    """Conv-ReLU blocks, global average pooling, one logit; no biases, no batch norm.

    Shapes: one image ``[C, H, W]`` -> last conv activations ``[channels[-1], h, w]``
    (``h = H // 2 ** (len(channels) - 1)``) -> scalar logit; :meth:`logits` takes a
    batch ``[B, C, H, W]``. The weights are ``eqx.nn.Conv2d``'s (``[O, I, 3, 3]``);
    inside, the batch runs channels last through :func:`conv_same` with the
    implementation ``conv`` (a static field: it is not a parameter).
    """

    convs: tuple[eqx.nn.Conv2d, ...]
    head: eqx.nn.Linear
    conv: str = eqx.field(static=True)

    def __init__(
        self,
        in_channels: int,
        channels: tuple[int, ...] = DEFAULT_CHANNELS,
        *,
        alpha: float = 1.0,
        conv: str = "auto",
        key: Array,
    ):
        check_conv(conv)
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
        self.conv = conv

    def _features_last(self, x: Array) -> Array:
        """Last conv activations of a batch, channels last: ``[B, C, H, W] -> [B, h, w, K]``."""
        x = jnp.transpose(x, (0, 2, 3, 1))
        for i, layer in enumerate(self.convs):
            x = jax.nn.relu(conv_same(x, jnp.transpose(layer.weight, (2, 3, 1, 0)), self.conv))
            if i < len(self.convs) - 1:
                x = _avg_pool2(x)
        return x

    def features(self, x: Array) -> Array:
        """Activations of the last conv layer (what Grad-CAM weighs), ``[K, h, w]``."""
        return jnp.transpose(self._features_last(x[None])[0], (2, 0, 1))

    def logit_from_features(self, a: Array) -> Array:
        """Global average pooling and the linear head, ``[K, h, w] -> []``."""
        return self.head(jnp.mean(a, axis=(1, 2)))

    def logits(self, x: Array) -> Array:
        """Logits of a batch, ``[B, C, H, W] -> [B]``."""
        return jax.vmap(self.head)(jnp.mean(self._features_last(x), axis=(1, 2)))

    def __call__(self, x: Array) -> Array:
        return self.logits(x[None])[0]


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
    in_channels: int,
    channels: tuple[int, ...] = DEFAULT_CHANNELS,
    alpha: float = 1.0,
    conv: str = "auto",
) -> Classifier:
    """The :class:`CNN`, its parameters split off with ``eqx.partition``.

    ``conv`` (see :func:`conv_same`) changes how the convolutions are computed, not
    what: the parameters and the initialisation are the same for every choice.
    """

    def build(key: Array) -> CNN:
        return CNN(in_channels, channels, alpha=alpha, conv=conv, key=key)

    _, static = eqx.partition(build(jax.random.key(0)), eqx.is_inexact_array)

    def init(key: Array) -> PyTree:
        return eqx.partition(build(key), eqx.is_inexact_array)[0]

    def logit(params: PyTree, x: Array) -> Array:
        return eqx.combine(params, static)(x)

    def loss(params: PyTree, x: Array, y: Array) -> Array:
        return logistic_loss(y * eqx.combine(params, static).logits(x))

    def grad_and_aux(params: PyTree, x: Array, y: Array) -> tuple[PyTree, Aux]:
        value, grads = jax.value_and_grad(loss)(params, x, y)
        return grads, Aux(loss=value)

    def cam(params: PyTree, x: Array, s: Array) -> Array:
        net = eqx.combine(params, static)
        return grad_cam(net.features(x), net.logit_from_features, s, x.shape[1:])

    return Classifier("cnn", init, logit, grad_and_aux, cam)


def diagonal_classifier(image_shape: tuple[int, int, int], alpha: float = 1.0) -> Classifier:
    """The L = 2 diagonal network on flattened pixels, ``theta`` ``[2, C*H*W]``.

    Initialised balanced, ``w^(1) = w^(2) = alpha``
    (docs/theory/balanced.md#balanced-initialisation): the key is unused, so every seed gives the
    same run when training is full batch. The gradient is the engine's explicit one,
    :func:`samflow.model.grad_and_aux`.
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
    conv: str = "auto",
) -> Classifier:
    """The classifier ``name`` (``cnn`` or ``diagonal``) for images ``[C, H, W]``.

    ``conv`` is the CNN's convolution implementation (:func:`conv_same`); the diagonal
    network has none and ignores it.
    """
    if name == "cnn":
        return cnn_classifier(image_shape[0], channels, alpha, conv)
    if name == "diagonal":
        return diagonal_classifier(image_shape, alpha)
    raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")
