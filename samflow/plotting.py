"""Figures drawn from result Datasets (so a figure can be redrawn from its file)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import xarray as xr

# Okabe-Ito: distinguishable with colour-blindness; line styles keep it readable in grey.
OKABE_ITO = ["#E69F00", "#56B4E9", "#009E73", "#0072B2", "#D55E00", "#CC79A7", "#F0E442", "#000000"]
LINESTYLES = ["-", "--", "-.", ":"]


def coord_style(j: int) -> dict:
    """Colour and line style of coordinate index ``j`` (0-based)."""
    return {"color": OKABE_ITO[j % len(OKABE_ITO)], "linestyle": LINESTYLES[j % len(LINESTYLES)]}


def mu_label(mu) -> str:
    return "(" + ", ".join(f"{m:g}" for m in np.asarray(mu)) + ")"


def timeline(ds: xr.Dataset, ax_share=None, ax_loss=None, title: str | None = None):
    """Feature-amplification timeline: ``beta_j / ||beta||_1`` against tau, and the loss.

    ``ds`` holds ``beta(time, coord)``, ``tau(time)`` and ``loss(time)``. Returns the figure.
    """
    if ax_share is None:
        fig, (ax_share, ax_loss) = plt.subplots(
            2, 1, figsize=(6.4, 5.6), sharex=True, gridspec_kw={"height_ratios": [2, 1]}
        )
    else:
        fig = ax_share.figure
    tau = ds["tau"].values
    beta = ds["beta"].values
    keep = (tau > 0) & np.all(np.isfinite(beta), axis=1)
    norm = np.sum(np.abs(beta[keep]), axis=1, keepdims=True)
    share = np.divide(beta[keep], norm, out=np.zeros_like(beta[keep]), where=norm > 0)
    for j, label in enumerate(ds["coord"].values):
        ax_share.plot(tau[keep], share[:, j], label=f"$j={label}$", lw=1.8, **coord_style(j))
    ax_share.set_xscale("log")
    ax_share.set_ylabel(r"$\beta_j / \|\beta\|_1$")
    ax_share.set_ylim(-0.05, 1.05)
    ax_share.legend(title="coordinate", fontsize=8, ncol=2, loc="best")
    ax_share.grid(alpha=0.3)
    if ax_loss is not None:
        loss = ds["loss"].values[keep]
        ax_loss.plot(tau[keep], loss, color="black", lw=1.5)
        ax_loss.set_xscale("log")
        ax_loss.set_yscale("log")
        if np.any(loss > 0):
            # The loss falls like exp(-margin); show the plateau, not 300 decades.
            ax_loss.set_ylim(max(np.min(loss[loss > 0]), 1e-8 * np.max(loss)), 2 * np.max(loss))
        ax_loss.set_ylabel("loss")
        ax_loss.grid(alpha=0.3)
    tau_name = ds["tau"].attrs.get("symbol", r"$\tau$")
    (ax_loss or ax_share).set_xlabel(f"{tau_name} ({ds['tau'].attrs.get('long_name', 'time')})")
    if title is None:
        a = ds.attrs
        where = f"mu = {mu_label(a['mu'])}" if "mu" in a else f"n = {a.get('n_points')}"
        title = (
            f"{a.get('method')}, L = {a.get('depth')}, {where}, rho = {a.get('rho')}, "
            f"{a.get('mode')}: {a.get('regime_meaning', '?')}"
        )
    ax_share.set_title(title, fontsize=10)
    return fig
