"""The Grad-CAM figure: rows of test images; columns input, GD Grad-CAM, SAM Grad-CAM.

Drawn from a result file alone (:mod:`samflow.images.results` with both methods).
Each Grad-CAM map is scaled to its own maximum (Grad-CAM is read per image); a thin
cyan line marks the edge of the background (brightness below the threshold), so the
reader sees how much of the map lies outside the digit or object.
"""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import xarray as xr

from samflow.errors import InputError
from samflow.io import save_figure

COLUMNS = (("gd", "GD"), ("sam-l2", "l2-SAM"))


def _share_text(ds: xr.Dataset, method: str) -> str:
    share = ds["background_share"].sel(optimizer=method).values
    sd = np.std(share, ddof=min(1, share.size - 1))
    return f"background share\n{np.mean(share):.2f} ± {sd:.2f}"


def gradcam_figure(ds: xr.Dataset, paths: list[str | os.PathLike], n_rows: int = 6) -> list[Path]:
    """Draw the figure from result Dataset ``ds`` and save it to each of ``paths``."""
    methods = list(ds["optimizer"].values) if "optimizer" in ds.dims else []
    if not all(m in methods for m, _ in COLUMNS):
        raise InputError("the Grad-CAM figure needs both methods: run with --method gd,sam-l2")
    images = ds["example_image"].values
    n_rows = min(n_rows, images.shape[0])
    threshold = float(ds.attrs.get("background_threshold", 0.1))
    classes = str(ds.attrs.get("class_names", "-1,+1")).split(",")
    fig, axes = plt.subplots(
        n_rows, 3, figsize=(6.6, 2.0 * n_rows + 0.9), squeeze=False, constrained_layout=True
    )
    heat = None
    for r in range(n_rows):
        image = images[r]
        gray = image.mean(axis=-1)
        label = int(ds["example_label"].values[r] > 0)
        ax = axes[r, 0]
        ax.imshow(image if image.shape[-1] == 3 else gray, cmap="gray", vmin=0, vmax=1)
        ax.set_ylabel(f"class {classes[label]}", fontsize=9)
        for c, (method, title) in enumerate(COLUMNS, start=1):
            cam = ds["example_gradcam"].sel(optimizer=method).values[r]
            peak = cam.max()
            ax = axes[r, c]
            ax.imshow(gray, cmap="gray", vmin=0, vmax=1)
            heat = ax.imshow(
                cam / peak if peak > 0 else cam, cmap="inferno", vmin=0, vmax=1, alpha=0.75
            )
            ax.contour(gray < threshold, levels=[0.5], colors="cyan", linewidths=0.6)
            if r == 0:
                ax.set_title(f"{title} Grad-CAM\n{_share_text(ds, method)}", fontsize=8)
        if r == 0:
            axes[r, 0].set_title("input", fontsize=8)
    for ax in axes.ravel():
        ax.set_xticks([])
        ax.set_yticks([])
    n_seeds = ds.sizes["seed"]
    fig.suptitle(
        f"{ds.attrs.get('dataset', '')} {' vs '.join(classes)}: alpha={ds.attrs.get('alpha')}, "
        f"rho={ds.attrs.get('rho')}, {ds.attrs.get('steps')} steps\n"
        f"Grad-CAM of seed 0 (background share: mean ± sd over {n_seeds} seeds)\n"
        f"cyan line: edge of the background (brightness < {threshold:g})",
        fontsize=8,
    )
    fig.colorbar(heat, ax=axes[:, 1:], shrink=0.6, label="Grad-CAM / its maximum")
    written = [save_figure(fig, path) for path in paths]
    plt.close(fig)
    return written
