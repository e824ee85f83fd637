"""Figures drawn from result Datasets (so a figure can be redrawn from its file)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import xarray as xr

from samflow.classification import Classification
from samflow.errors import InputError
from samflow.io import save_figure, write_dataset
from samflow.regimes import NAMES
from samflow.schema import describe
from samflow.theory import l2sam_direct_edge

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

    ``ds`` holds ``beta(time, coord)``, ``tau(time)`` and ``loss(time)``; with a leader
    path (``leader_path``, ``handoff_tau``) each hand-off is a vertical line in the new
    leader's style, also where it falls between the records. Returns the figure.
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
    if "leader_path" in ds:
        for lead, when in zip(ds["leader_path"].values, ds["handoff_tau"].values, strict=True):
            if lead > 0 and when > 0:
                style = coord_style(int(lead) - 1)
                ax_share.axvline(when, color=style.get("color"), lw=0.9, ls=":")
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
            f"{a.get('method')}, L = {a.get('depth')}, {where}, {start_label(a)}, "
            f"rho = {a.get('rho')}, {a.get('mode')}: {a.get('regime_meaning', '?')}"
        )
        # A model without regimes (docs/theory/models.md#parametrisations-and-losses).
        if "regime_meaning" not in a:
            model = f"{a.get('parametrization', 'product')}, {a.get('loss', 'logistic')} loss"
            title = title.replace(": ?", f": {model}")
    ax_share.set_title(title, fontsize=10)
    return fig


# Paul Tol's high-contrast scheme: distinct hues *and* luminance, so the regimes stay
# apart in greyscale and for colour-blind readers (white/unresolved, black/failed).
REGIME_COLOURS = {
    -1: "#000000",  # failed
    0: "#FFFFFF",  # unresolved
    1: "#004488",  # collapse
    2: "#BB5566",  # sequential
    3: "#DDAA33",  # direct
    # The path codes beyond minor-first-major-last: Tol's medium-contrast hues.
    4: "#EE99AA",  # returned
    5: "#997700",  # major_lost
    6: "#6699CC",  # minor_end
    7: "#228833",  # finite (Tol's green: a limit, not a path)
}
REGIME_NAMES = NAMES
AXIS_SYMBOLS = {
    "alpha": r"$\alpha$",
    "rho": r"$\rho$",
    "eta": r"$\eta$",
    "depth": "depth $L$",
    "seed": "seed",
    "mu": r"$\mu$ index",
}


def axis_label(name: str) -> str:
    if name.startswith("alpha_"):
        return rf"$\alpha_{{{name.split('_')[1]}}}$"
    return AXIS_SYMBOLS.get(name, name)


def is_log_axis(values: np.ndarray) -> bool:
    """Log-spaced (or spanning over a decade of positive values): draw on a log axis."""
    v = np.asarray(values, dtype=float)
    if v.size < 3 or np.any(v <= 0):
        return bool(v.size >= 2 and np.all(v > 0) and v.max() / v.min() >= 10)
    ratios = v[1:] / v[:-1]
    return bool(np.allclose(ratios, ratios[0], rtol=1e-6) or v.max() / v.min() >= 100)


def _edges(values: np.ndarray, log: bool) -> np.ndarray:
    v = np.log(values) if log else np.asarray(values, dtype=float)
    if v.size == 1:
        mid = np.array([v[0] - 0.5, v[0] + 0.5])
    else:
        inner = 0.5 * (v[1:] + v[:-1])
        mid = np.concatenate([[2 * v[0] - inner[0]], inner, [2 * v[-1] - inner[-1]]])
    return np.exp(mid) if log else mid


def regime_legend(ax, codes=None, **kwargs):
    from matplotlib.patches import Patch

    codes = sorted(REGIME_COLOURS) if codes is None else codes
    handles = [
        Patch(facecolor=REGIME_COLOURS[c], edgecolor="black", label=f"{c}: {REGIME_NAMES[c]}")
        for c in codes
    ]
    return ax.legend(handles=handles, title="regime code", fontsize=8, **kwargs)


def draw_regimes(ax, regime: xr.DataArray, x: str, y: str):
    """Regime codes of a 2-D DataArray on ``ax`` (x, y: its dim names)."""
    from matplotlib.colors import BoundaryNorm, ListedColormap

    codes = sorted(REGIME_COLOURS)
    cmap = ListedColormap([REGIME_COLOURS[c] for c in codes])
    norm = BoundaryNorm(np.arange(codes[0] - 0.5, codes[-1] + 1.0), cmap.N)
    xs, ys = regime[x].values, regime[y].values
    xlog, ylog = is_log_axis(xs), is_log_axis(ys)
    ax.pcolormesh(
        _edges(xs, xlog),
        _edges(ys, ylog),
        regime.transpose(y, x).values,
        cmap=cmap,
        norm=norm,
        edgecolors="face",
        linewidth=0,
    )
    if xlog:
        ax.set_xscale("log")
    if ylog:
        ax.set_yscale("log")
    ax.set_xlabel(axis_label(x))
    ax.set_ylabel(axis_label(y))


def start_label(attrs: dict) -> str:
    """The start of a run as a title reads it ('' when an axis varies it)."""
    if "alpha" in attrs:
        return f"alpha = {float(attrs['alpha']):g}"
    if "alpha_per_coord" in attrs:
        return f"alpha = {mu_label(attrs['alpha_per_coord'])}"
    if "theta0_abs_range" in attrs:
        low, high = attrs["theta0_abs_range"]
        return f"|theta0| in [{low:.3g}, {high:.3g}]"
    return ""


def phase_map(ds: xr.Dataset, title: str | None = None):
    """Regime map over the first two grid axes (other axes at their first value)."""
    axes = [a for a in ds.attrs.get("axes", "").split() if a]
    if not axes:
        raise ValueError("the Dataset has no grid axes")
    regime = ds["regime"]
    for extra in axes[2:]:
        regime = regime.isel({extra: 0})
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    if len(axes) == 1:
        regime = regime.expand_dims({"_": [0]})
        draw_regimes(ax, regime, axes[0], "_")
        ax.set_yticks([])
        ax.set_ylabel("")
    else:
        draw_regimes(ax, regime, axes[0], axes[1])
    a = ds.attrs
    where = f"mu = {mu_label(a['mu'])}" if "mu" in a else f"n = {a.get('n_points')}"
    start = f", {start_label(a)}" if start_label(a) else ""
    ax.set_title(
        title or f"{a.get('method')}, L = {a.get('depth')}, {where}{start}, {a.get('mode')}",
        fontsize=10,
    )
    present = sorted(set(np.unique(regime.values).tolist()))
    regime_legend(ax, present, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    return fig


def save_figure_set(fig, out_dir, name: str, datasets: dict[str, xr.Dataset] | None = None):
    """Write ``name.png``, ``name.pdf`` and the data beside them (``name.nc`` or
    ``name_<key>.nc`` for several Datasets). Returns the paths."""
    from pathlib import Path

    out_dir = Path(out_dir)
    paths = [save_figure(fig, out_dir / f"{name}.{ext}") for ext in ("png", "pdf")]
    for key, ds in (datasets or {}).items():
        paths.append(
            write_dataset(
                describe(ds), out_dir / (f"{name}.nc" if key == "" else f"{name}_{key}.nc")
            )
        )
    plt.close(fig)
    return paths


# ---- Categorical maps (dominant coordinate, limit index) for the figure scripts ----

# Coordinate j keeps its timeline colour (coord_style); 0 means beta ~ 0 (collapsed),
# blank means no record (after a blow-up or the overflow guard).
COLLAPSED_COLOUR = "#BBBBBB"


def coordinate_colours(d: int) -> dict[int, str]:
    """Colours of the categories 0 (beta ~ 0) and 1..d (coordinate j), Okabe-Ito."""
    return {0: COLLAPSED_COLOUR, **{j: coord_style(j - 1)["color"] for j in range(1, d + 1)}}


def draw_categories(ax, values, xs, ys, colours: dict[int, str], xlog=None, ylog=None):
    """Integer categories ``values`` ``[len(ys), len(xs)]`` at cell centres ``xs``, ``ys``.

    NaN cells stay blank. ``colours`` maps each category to a colour; log axes are
    chosen as for regime maps unless ``xlog``/``ylog`` say otherwise.
    """
    from matplotlib.colors import BoundaryNorm, ListedColormap

    codes = sorted(colours)
    lookup = np.full(np.shape(values), np.nan)
    v = np.asarray(values, dtype=float)
    for i, c in enumerate(codes):
        lookup[v == c] = i
    cmap = ListedColormap([colours[c] for c in codes])
    norm = BoundaryNorm(np.arange(-0.5, len(codes)), cmap.N)
    xs, ys = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    xlog = is_log_axis(xs) if xlog is None else xlog
    ylog = is_log_axis(ys) if ylog is None else ylog
    mesh = ax.pcolormesh(
        _edges(xs, xlog),
        _edges(ys, ylog),
        np.ma.masked_invalid(lookup),
        cmap=cmap,
        norm=norm,
        edgecolors="face",
        linewidth=0,
    )
    if xlog:
        ax.set_xscale("log")
    if ylog:
        ax.set_yscale("log")
    return mesh


def category_legend(ax, colours: dict[int, str], names: dict[int, str], title=None, **kwargs):
    """Legend of categorical colours (``names``: category -> label; blank as a white box)."""
    from matplotlib.patches import Patch

    handles = [
        Patch(facecolor=colours.get(c, "white"), edgecolor="black", label=label)
        for c, label in names.items()
    ]
    kwargs.setdefault("fontsize", 8)
    return ax.legend(handles=handles, title=title, **kwargs)


def dominant_legend(
    ax,
    colours: dict[int, str],
    d: int,
    extra: dict[int, str] | None = None,
    zero: str = r"0: $\beta \approx 0$",
    **kwargs,
):
    """:func:`category_legend` of the dominant coordinate ``argmax_j |beta_j|``: 0 (beta
    collapsed), ``1..d``, then the ``extra`` codes (a tie, blanks)."""
    names = {0: zero, **{j: f"{j}: coordinate {j}" for j in range(1, d + 1)}, **(extra or {})}
    kwargs.setdefault("loc", "upper left")
    return category_legend(ax, colours, names, title=r"dominant $\arg\max_j|\beta_j|$", **kwargs)


def dominant_codes(
    dominant, beta_norm, collapse_factor: float = Classification.collapse_factor
) -> np.ndarray:
    """Dominant coordinate per record with 0 where beta has collapsed, NaN where no record.

    ``dominant`` and ``beta_norm`` ``[..., T]`` as a sweep writes them (``dominant`` is 0
    for records outside the horizon; at a collapse beta = 0 and argmax would say 1).
    """
    dom = np.asarray(dominant, dtype=float)
    norm = np.asarray(beta_norm, dtype=float)
    out = np.where(np.isfinite(norm) & (dom > 0), dom, np.nan)
    collapsed = np.isfinite(norm) & (norm < collapse_factor * norm[..., :1])
    return np.where(collapsed, 0.0, out)


def boundary_figure(ds: xr.Dataset):
    """Every edge against the first grid axis (log-log), other axes at their first value.

    For balanced l2-SAM on one point the closed-form sequential/direct edge of
    docs/theory/balanced.md#direct-edge-depth-2 (L = 2) and
    docs/theory/balanced.md#direct-edge-any-depth (any L >= 2) is drawn beside the measured one.
    """
    names = [a for a in ds.attrs.get("axes", "").split() if a]
    if not names:
        raise InputError("the boundary figure needs at least one grid axis")
    x = names[0]
    sub = ds.isel({n: 0 for n in names[1:]})
    xs = sub[x].values
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    styles = {"alpha_collapse": ("#004488", "o", "-"), "alpha_direct": ("#BB5566", "s", "--")}
    for name, (colour, marker, line) in styles.items():
        label = "collapse edges" if name == "alpha_collapse" else "direct edges"
        every = sub[f"{name}_all"].values  # [x, edge]: the k-th edge of each x on one curve
        for k in range(every.shape[-1]):
            if np.isfinite(every[:, k]).any():
                ax.plot(
                    xs,
                    every[:, k],
                    color=colour,
                    marker=marker,
                    ls=line,
                    ms=4,
                    label=label if k == 0 else None,
                )
    a = ds.attrs
    depth = a.get("depth") or 0  # None (or absent) where depth is a grid axis
    if x == "rho" and a.get("method") == "sam-l2" and depth >= 2 and "mu" in a:
        exact = [l2sam_direct_edge(a["mu"], r, int(depth)) for r in xs]
        ax.plot(
            xs,
            exact,
            color="black",
            ls=":",
            lw=1.5,
            label=rf"closed form $\rho M^*/(\sqrt{{{int(depth)}}}\|\mu\|)$",
        )
    ax.set_yscale("log")
    if is_log_axis(xs):
        ax.set_xscale("log")
    ax.set_xlabel(axis_label(x))
    ax.set_ylabel(r"critical $\alpha$")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    ax.set_title(
        f"{a.get('method')}, L = {a.get('depth', 'varied')}, {a.get('mode')}: regime edges",
        fontsize=10,
    )
    return fig
