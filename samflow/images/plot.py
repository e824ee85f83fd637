"""The image figures, drawn from a result file alone (:mod:`samflow.images.results`).

- :func:`gradcam_figure`: rows of test images; columns input, GD Grad-CAM, SAM Grad-CAM
  (with several alphas, those of the first alpha);
- :func:`alpha_figure`: the background share against alpha for each method, at the end
  of training and at matched training loss, with the uniform map's share (the image-side
  regime plot; a file with an ``alpha`` dim).

Each Grad-CAM map is scaled to its own maximum (Grad-CAM is read per image); a thin
cyan line marks the edge of the background (brightness below the threshold, or the
centred box of a ``border`` background), so the reader sees how much of the map lies
outside the digit or object.
"""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import xarray as xr

from samflow.errors import InputError
from samflow.images.attribution import DEFAULT_BOX, Background
from samflow.images.data import TITLES
from samflow.io import save_figure

COLUMNS = (("gd", "GD"), ("sam-l2", "l2-SAM"))


def _share_text(ds: xr.Dataset, method: str) -> str:
    share = ds["background_share"].sel(optimizer=method).values
    sd = np.std(share, ddof=min(1, share.size - 1))
    what = "border" if ds.attrs.get("background") == "border" else "background"
    return f"{what} share\n{np.mean(share):.2f} ± {sd:.2f}"


def gradcam_figure(ds: xr.Dataset, paths: list[str | os.PathLike], n_rows: int = 6) -> list[Path]:
    """Draw the figure from result Dataset ``ds`` and save it to each of ``paths``."""
    alpha = ds.attrs.get("alpha")
    if "alpha" in ds.dims:
        ds = ds.isel(alpha=0)
        alpha = float(ds["alpha"])
    methods = list(ds["optimizer"].values) if "optimizer" in ds.dims else []
    if not all(m in methods for m, _ in COLUMNS):
        raise InputError("the Grad-CAM figure needs both methods: run with --method gd,sam-l2")
    images = ds["example_image"].values
    n_rows = min(n_rows, images.shape[0])
    threshold = float(ds.attrs.get("background_threshold", 0.1))
    background = Background(
        str(ds.attrs.get("background", "dark")),
        threshold,
        float(ds.attrs.get("background_box", DEFAULT_BOX)),
    )
    masks = np.asarray(background.mask(images[:n_rows]))
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
            ax.contour(masks[r], levels=[0.5], colors="cyan", linewidths=0.6)
            if r == 0:
                ax.set_title(f"{title} Grad-CAM\n{_share_text(ds, method)}", fontsize=8)
        if r == 0:
            axes[r, 0].set_title("input", fontsize=8)
    for ax in axes.ravel():
        ax.set_xticks([])
        ax.set_yticks([])
    n_seeds = ds.sizes["seed"]
    fig.suptitle(
        f"{_dataset_title(ds)}\n{' vs '.join(classes)}: alpha={alpha:g}, "
        f"rho={ds.attrs.get('rho')}, {ds.attrs.get('steps')} steps\n"
        f"Grad-CAM of seed 0 (background share: mean ± sd over {n_seeds} seeds)\n"
        f"cyan line: edge of the background ({_background_text(background)})",
        fontsize=8,
    )
    fig.colorbar(heat, ax=axes[:, 1:], shrink=0.6, label="Grad-CAM / its maximum")
    written = [save_figure(fig, path) for path in paths]
    plt.close(fig)
    return written


def _dataset_title(ds: xr.Dataset) -> str:
    name = str(ds.attrs.get("dataset", ""))
    return TITLES.get(name, name)


def _background_text(background: Background) -> str:
    if background.kind == "dark":
        return f"brightness < {background.threshold:g}"
    return f"outside the centred box of {background.box:g} x the side"


def alpha_figure(ds: xr.Dataset, paths: list[str | os.PathLike]) -> list[Path]:
    """Grad-CAM background share against alpha, per method: mean and 95% t interval
    over seeds, at the end of training (left) and at matched training loss (right)."""
    import warnings

    from scipy import stats

    if "alpha" not in ds.dims or "optimizer" not in ds.dims:
        raise InputError("the alpha figure needs several --alpha values and methods")
    alpha = ds["alpha"].values
    fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.8), sharey=True, constrained_layout=True)
    styles = {"gd": ("black", "o", "-"), "sam-l2": ("#d55e00", "s", "--")}
    for ax, var, title in (
        (axes[0], "background_share", "at the end of training"),
        (axes[1], "background_share_at_loss", f"at training loss {ds.attrs['match_loss']:g}"),
    ):
        for k, method in enumerate(ds["optimizer"].values):
            values = ds[var].sel(optimizer=method).values  # [alpha, seed]
            n = np.sum(np.isfinite(values), axis=1)
            with warnings.catch_warnings():  # an alpha where no seed reached the loss
                warnings.simplefilter("ignore", RuntimeWarning)
                mean = np.nanmean(values, axis=1)
                sd = np.nanstd(values, axis=1, ddof=1)
            t = stats.t.ppf(0.975, np.maximum(n - 1, 1))
            half = np.where(n > 1, t * sd / np.sqrt(np.maximum(n, 1)), np.nan)
            shift = 1.0 + 0.012 * (k - (ds.sizes["optimizer"] - 1) / 2)  # bars side by side
            colour, marker, line = styles.get(str(method), ("#0072b2", "^", ":"))
            ax.errorbar(
                alpha * shift, mean, yerr=half, color=colour, marker=marker, ls=line, capsize=3,
                label=str(method),
            )  # fmt: skip
        ax.axhline(float(ds["uniform_background_share"]), color="grey", ls=":", label="uniform map")
        ax.set_xscale("log")
        ax.set_xlim(alpha[0] / 1.1, alpha[-1] * 1.1)
        ax.set_xticks(alpha, [f"{a:g}" for a in alpha])
        ax.minorticks_off()
        ax.set_xlabel(r"initialisation scale $\alpha$")
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("Grad-CAM background share")
    axes[0].legend(fontsize=8)
    fig.suptitle(
        f"{_dataset_title(ds)}: background share against alpha, mean and 95% "
        f"interval over {ds.sizes['seed']} seeds (rho = {ds.attrs.get('rho')})",
        fontsize=9,
    )
    written = [save_figure(fig, path) for path in paths]
    plt.close(fig)
    return written
