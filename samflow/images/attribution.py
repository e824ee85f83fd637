"""Attribution maps and the number this experiment reports: the background share.

Two views of what a classifier uses, both for the class of the true label ``y``
(``s = y`` in {-1, +1}: "what the model takes as evidence for this image's class"):

- Grad-CAM on the last conv layer (:func:`samflow.images.models.grad_cam`), the map
  the paper shows;
- input-gradient saliency (Simonyan et al., 2014): ``max_c |d logit / d x_c|`` per pixel.

Which pixels are background (:class:`Background`, ``samflow cnn --background``):

- ``dark`` (the default): pixels whose brightness in [0, 1] (mean over colour channels,
  before normalisation) is below a threshold. Right for MNIST, whose background is
  exactly black; on CIFAR-10 only about 5% of the pixels are that dark.
- ``border``: the pixels outside a centred box whose side is a fraction ``box`` of the
  image's (default 0.5: the central 16x16 of a 32x32 image, a quarter of its area).
  Each CIFAR-10 image shows one prominent object, which in these photographs almost
  always covers the centre, so the border is mostly context (sky, road, grass,
  buildings) and the box mostly object: an approximation, the same mask for every
  image.

The background share of one image is the map's mass on background pixels over its
total mass, both maps being nonnegative; an image whose map is zero everywhere has no
share (NaN) and is left out of the mean.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from samflow.errors import InputError
from samflow.images.models import Classifier, PyTree

DEFAULT_BACKGROUND_THRESHOLD = 0.1
"""Brightness below which a pixel counts as background. MNIST strokes are near 1 and
its background exactly 0; 0.1 keeps the faint anti-aliased edge of a stroke with it."""
BACKGROUNDS = ("dark", "border")
"""The kinds of background mask (module docstring)."""
DEFAULT_BOX = 0.5
"""Side of the centred object box of the ``border`` mask, as a fraction of the image
side: the central half (a quarter of the area), which the object of almost every
CIFAR-10 image covers, so the border (three quarters of the area) is mostly context."""


@dataclass(frozen=True)
class Background:
    """Which test pixels are background (module docstring); checked when made.

    Attributes:
        kind: ``dark`` or ``border``.
        threshold: brightness in (0, 1] below which a pixel is dark (the ``dark``
            mask; with ``border`` it still defines the dark-pixel share reported beside).
        box: side of the centred box, a fraction in (0, 1) of the image side (``border``).
    """

    kind: str = "dark"
    threshold: float = DEFAULT_BACKGROUND_THRESHOLD
    box: float = DEFAULT_BOX

    def __post_init__(self) -> None:
        if self.kind not in BACKGROUNDS:
            raise InputError(
                f"unknown background {self.kind!r}; choose from {', '.join(BACKGROUNDS)}"
            )
        if not 0 < self.threshold <= 1:
            raise InputError(f"background_threshold must be in (0, 1], got {self.threshold}")
        if not 0 < self.box < 1:
            raise InputError(f"background_box must be in (0, 1), got {self.box}")

    def mask(self, raw: Array) -> Array:
        """``[n, H, W]`` bool background of ``raw`` ``[n, H, W, C]`` (pixels in [0, 1])."""
        if self.kind == "dark":
            return background_mask(raw, self.threshold)
        return jnp.broadcast_to(jnp.asarray(~box_mask(*raw.shape[1:3], self.box)), raw.shape[:3])


def box_mask(height: int, width: int, box: float) -> np.ndarray:
    """``[H, W]`` bool, True inside the centred box whose sides are ``box`` times the
    image's, rounded to whole pixels with equal margins (so the box is centred exactly
    when the side and the box differ by an even number of pixels: 16 of 32 at 0.5).
    At least one pixel wide."""
    inside = np.zeros((height, width), bool)
    rows = _centred(height, box)
    cols = _centred(width, box)
    inside[rows, cols] = True
    return inside


def _centred(n: int, box: float) -> slice:
    side = max(1, round(box * n))
    margin = (n - side) // 2
    return slice(margin, margin + side)


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
