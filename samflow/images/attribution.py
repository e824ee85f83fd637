"""Attribution maps and the number this experiment reports: the background share.

Two views of what a classifier uses, both for the class of the true label ``y``
(``s = y`` in {-1, +1}: "what the model takes as evidence for this image's class"):

- Grad-CAM on the last conv layer (:func:`samflow.images.models.grad_cam`), the map
  the paper shows;
- input-gradient saliency (Simonyan et al., 2014): ``max_c |d logit / d x_c|`` per pixel.

Background pixels are those whose brightness in [0, 1] (mean over colour channels,
before normalisation) is below a threshold. The background share of one image is the
map's mass on background pixels over its total mass, both maps being nonnegative; an
image whose map is zero everywhere has no share (NaN) and is left out of the mean.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import Array

from samflow.images.models import Classifier, PyTree

DEFAULT_BACKGROUND_THRESHOLD = 0.1
"""Brightness below which a pixel counts as background. MNIST strokes are near 1 and
its background exactly 0; 0.1 keeps the faint anti-aliased edge of a stroke with it."""


def saliency(classifier: Classifier, params: PyTree, x: Array) -> Array:
    """Input-gradient saliency of one image, ``[C, H, W] -> [H, W]``, nonnegative."""
    grad = jax.grad(lambda xi: classifier.logit(params, xi))(x)
    return jnp.max(jnp.abs(grad), axis=0)


def attribution_maps(
    classifier: Classifier, params: PyTree, x: Array, y: Array
) -> tuple[Array, Array]:
    """Grad-CAM-slot maps and saliency maps of a batch, each ``[n, H, W]``.

    ``x``: ``[n, C, H, W]`` network inputs; ``y``: ``[n]`` labels in {-1, +1}.
    """
    cams = jax.vmap(lambda xi, yi: classifier.cam(params, xi, yi))(x, y)
    sal = jax.vmap(lambda xi: saliency(classifier, params, xi))(x)
    return cams, sal


def background_mask(raw: Array, threshold: float) -> Array:
    """``[n, H, W]`` bool: brightness of ``raw`` ``[n, H, W, C]`` (in [0, 1]) below threshold."""
    return jnp.mean(raw, axis=-1) < threshold


def background_shares(maps: Array, background: Array) -> Array:
    """Per-image share of map mass on background, ``[n]``; NaN where a map is all zero."""
    total = jnp.sum(maps, axis=(1, 2))
    on_background = jnp.sum(jnp.where(background, maps, 0.0), axis=(1, 2))
    return jnp.where(total > 0, on_background / jnp.where(total > 0, total, 1.0), jnp.nan)


def mean_background_share(maps: Array, background: Array) -> Array:
    """Background share averaged over the images whose map is not all zero (scalar)."""
    return jnp.nanmean(background_shares(maps, background))
