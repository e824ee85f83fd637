r"""Figure 16: saddle to saddle. Gradient flow on the u2-v2 network (squared loss)
against \(t / \log(1/\alpha)\), beside the paper's minor-first staircase on the same axes.

Regression data: n = 5 Gaussian points in d = 10, \(y = X \beta^*\) with a 3-sparse
\(\beta^*\) (the problem of ``tests/test_oracles.py``, seed 4). GD flows of \(\beta = u^2 - v^2\)
from \(u = v = \alpha\), in the engine's log-space formulation, for alpha from 1e-2 down to 1e-8. As
alpha -> 0 the flow rests on saddles of the loss and jumps between them at times proportional to
\(\log(1/\alpha)\), coordinates entering the support one at a time (Pesme & Flammarion 2023); the
jump times \(T_k\) and the saddles come from their active-set algorithm, solved independently of the
engine (:func:`samflow.oracles.saddle_to_saddle`, docs/theory/oracles.md#saddle-to-saddle) and drawn
as dotted verticals.

(a) \(\lvert \beta_j\rvert\) against \(T = t / \log(1/\alpha)\) at alpha = 1e-8, the algorithm's
saddles as black steps; (b) the loss for four alphas, converging to the algorithm's
staircase; (c) the size of the active set (``n_active``, \(\lvert \beta_j\rvert > 1e-3\)) over
(alpha, T): its boundaries turn vertical, at the \(T_k\), as alpha falls; (d) the
leading coordinate \(\operatorname{argmax}_j \lvert \beta_j\rvert\) of the paper's l2-SAM flow
(product network, L = 2, one point mu = (1, 2, 3, 4), rho = 1) against \(\tau / \log(1/\alpha)\):
its hand-offs do not scale with \(\log(1/\alpha)\) (at L = 2 the flow depends on
\(\alpha / \rho\) only, docs/theory/balanced.md#scale-invariance, and collapses as alpha -> 0 at
fixed rho). The u2-v2 leader is no use here: the first coordinate to enter leads throughout.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import xarray as xr

from samflow.figures._engine import FLOW_SETTINGS, MU, sweep
from samflow.oracles import saddle_to_saddle
from samflow.plotting import (
    category_legend,
    coord_style,
    coordinate_colours,
    dominant_codes,
    draw_categories,
    save_figure_set,
)
from samflow.runners import Flow
from samflow.sweeps.spec import SweepSpec

N_POINTS, D, SPARSITY, SEED = 5, 10, 3, 4
ALPHA_RANGE = (1e-8, 1e-2)
LINE_ALPHAS = (1e-2, 1e-4, 1e-6, 1e-8)
RHO = 1.0
STAIRCASE_ALPHA = (0.05, 0.95)  # log(1/alpha) > 0
T_MIN = 1e-2  # first record, in units of log(1/alpha)


def make_problem() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``X`` ``[n, d]`` Gaussian, ``beta*`` with ``SPARSITY`` Gaussian entries, ``y = X beta*``."""
    rng = np.random.default_rng(SEED)
    X = rng.normal(size=(N_POINTS, D))
    beta_star = np.zeros(D)
    beta_star[:SPARSITY] = rng.normal(size=SPARSITY)
    return X, X @ beta_star, beta_star


def _rescaled(ds: xr.Dataset, alphas: np.ndarray, T: np.ndarray, names) -> dict:
    """Per alpha row, the records at plain times ``T log(1/alpha)`` (nearest record at or
    after; the record grid is log-spaced and 4x denser than ``T``)."""
    t = ds["tau"].values
    out = {}
    for name in names:
        v = ds[name].values
        rows = []
        for i, a in enumerate(alphas):
            idx = np.clip(np.searchsorted(t, T * np.log(1 / a)), 0, len(t) - 1)
            rows.append(v[i, idx])
        out[name] = np.stack(rows)
    return out


def run(quick: bool) -> dict[str, xr.Dataset]:
    X, y, beta_star = make_problem()
    saddles = saddle_to_saddle(X, y)
    T_max = 1.3 * saddles.times[-1]
    n_alpha, n_T = (25, 161) if quick else (61, 401)
    alphas = np.unique(np.r_[np.geomspace(*ALPHA_RANGE, n_alpha), LINE_ALPHAS])
    T = np.r_[0.0, np.geomspace(T_MIN, T_max, n_T - 1)]
    # one record grid in plain t, fine enough for every alpha's T grid
    t_max = T_max * np.log(1 / ALPHA_RANGE[0])
    t_grid = np.r_[0.0, np.geomspace(T_MIN * np.log(1 / ALPHA_RANGE[1]), t_max, 4 * n_T)]
    spec = SweepSpec.from_inputs(
        "gd",
        depth=2,
        runner=Flow(tau_max=t_max, **FLOW_SETTINGS),
        data=(X, y),
        axes={"alpha": alphas},
        loss="squared",
        parametrization="u2-v2",
        beta_star=beta_star,
        save_trajectories=True,
    )
    ds = sweep(spec, quick=quick, layers=None, times=t_grid)
    rows = _rescaled(ds, alphas, T, ("beta", "loss", "dominant", "n_active"))
    u2v2 = xr.Dataset(
        {
            "beta": (("alpha", "T", "coord"), rows["beta"], {"long_name": "beta"}),
            "loss": (("alpha", "T"), rows["loss"], {"long_name": "training loss"}),
            "dominant": (("alpha", "T"), rows["dominant"], {"long_name": "argmax_j |beta_j|"}),
            "n_active": (("alpha", "T"), rows["n_active"], {"long_name": "|beta_j| > 1e-3"}),
            "X": (("point", "coord"), X),
            "y": ("point", y),
            "beta_star": ("coord", beta_star),
            "saddle_T": ("jump", saddles.times, {"long_name": "jump times T_k (algorithm)"}),
            "saddle_beta": (("jump", "coord"), saddles.betas, {"long_name": "saddles"}),
            "saddle_loss": ("jump", saddles.losses, {"long_name": "loss at the saddles"}),
        },
        coords={
            "alpha": alphas,
            "T": ("T", T, {"long_name": "t / log(1/alpha)"}),
            "coord": np.arange(1, D + 1),
        },
        attrs={
            "model": "u2-v2, squared loss (1/(2n)) ||X beta - y||^2, GD flow (log space)",
            "reference": "Pesme & Flammarion 2023; samflow.oracles.saddle_to_saddle",
        },
    )
    # the paper's staircase, same axes: tau / log(1/alpha)
    s_alphas = np.geomspace(*STAIRCASE_ALPHA, 48 if quick else 160)
    tau_max = T_max * np.log(1 / STAIRCASE_ALPHA[0])
    tau_grid = np.r_[0.0, np.geomspace(T_MIN * np.log(1 / STAIRCASE_ALPHA[1]), tau_max, 4 * n_T)]
    sam_spec = SweepSpec.from_inputs(
        "sam-l2",
        depth=2,
        runner=Flow(tau_max=tau_max, **FLOW_SETTINGS),
        mu=MU,
        rho=RHO,
        axes={"alpha": s_alphas},
    )
    sam = sweep(sam_spec, quick=quick, times=tau_grid)
    codes = dominant_codes(sam["dominant"].values, sam["beta_norm"].values)
    sam_ds = xr.Dataset(
        {"dominant": (("alpha", "T"), _rescaled_codes(sam, codes, s_alphas, T))},
        coords={"alpha": s_alphas, "T": ("T", T, {"long_name": "tau / log(1/alpha)"})},
        attrs={"model": "product, L = 2, logistic loss, one point", "mu": MU, "rho": RHO},
    )
    return {"u2v2": u2v2, "l2sam": sam_ds}


def _rescaled_codes(ds, codes, alphas, T) -> np.ndarray:
    t = ds["tau"].values
    rows = []
    for i, a in enumerate(alphas):
        idx = np.clip(np.searchsorted(t, T * np.log(1 / a)), 0, len(t) - 1)
        rows.append(codes[i, idx])
    return np.stack(rows)


def draw(datasets: dict[str, xr.Dataset]):
    u2v2, sam = datasets["u2v2"], datasets["l2sam"]
    T = u2v2["T"].values
    jumps = u2v2["saddle_T"].values[1:]
    fig, axs = plt.subplots(2, 2, figsize=(13, 9.5))
    (ax_beta, ax_loss), (ax_map, ax_sam) = axs
    alphas = u2v2["alpha"].values
    low = int(np.argmin(alphas))
    entered = np.flatnonzero(np.any(u2v2["saddle_beta"].values != 0, axis=0))
    beta = np.abs(u2v2["beta"].values[low])
    steps = np.abs(u2v2["saddle_beta"].values)
    T_steps = np.r_[u2v2["saddle_T"].values, T[-1]]
    for k, j in enumerate(entered):
        style = coord_style(k)
        ax_beta.plot(T[1:], beta[1:, j], lw=1.8, label=f"$j = {j + 1}$", **style)
        on = steps[:, j] > 0
        ax_beta.hlines(steps[on, j], T_steps[:-1][on], T_steps[1:][on], color="black", lw=1.0)
    ax_beta.plot([], [], color="black", lw=0.9, label="saddles (algorithm)")
    ax_beta.set_yscale("log")
    ax_beta.set_ylim(1e-17, 10)
    ax_beta.set_ylabel(r"$|\beta_j|$")
    ax_beta.set_title(
        rf"(a) $u^2 - v^2$ GD flow, $\alpha = 10^{{{np.log10(alphas[low]):.0f}}}$: "
        "coordinates enter one at a time",
        fontsize=10,
    )
    ax_beta.legend(fontsize=8, ncol=2, loc="lower right")
    for i, a in enumerate(LINE_ALPHAS):
        row = int(np.argmin(np.abs(np.log(alphas / a))))
        ax_loss.plot(
            T[1:],
            u2v2["loss"].values[row, 1:],
            lw=1.6,
            label=rf"$\alpha = 10^{{{np.log10(a):.0f}}}$",
            **coord_style(i),
        )
    ax_loss.stairs(
        u2v2["saddle_loss"].values[:-1], T_steps[:-1], color="black", lw=1.2, baseline=None
    )
    ax_loss.plot([], [], color="black", lw=1.2, label=r"algorithm ($\alpha \to 0$)")
    ax_loss.set_yscale("log")
    low_loss = max(u2v2["saddle_loss"].values[-2] * 1e-3, 1e-12)
    ax_loss.set_ylim(low_loss, 2 * u2v2["loss"].values[:, 1].max())
    ax_loss.set_ylabel(r"training loss $\frac{1}{2n}\|X\beta - y\|^2$")
    ax_loss.set_title("(b) the loss: plateaus at the saddles, jumps at $T_k$", fontsize=10)
    ax_loss.legend(fontsize=8, loc="lower left")
    active = u2v2["n_active"].values.astype(float)
    counts = np.arange(int(np.nanmax(active)) + 1)
    shades = plt.cm.viridis(np.linspace(0.0, 0.95, len(counts)))  # luminance rises with count
    colours = {int(c): shades[c] for c in counts}
    draw_categories(ax_map, active[:, 1:], T[1:], alphas, colours, xlog=True, ylog=True)
    ax_map.set_ylabel(r"initialisation scale $\alpha$")
    ax_map.set_title(
        r"(c) $u^2 - v^2$: size of the active set, $\#\{j : |\beta_j| > 10^{-3}\}$",
        fontsize=10,
    )
    legend = category_legend(
        ax_map, colours, {int(c): f"{c}" for c in counts}, title="active", loc="upper left"
    )
    ax_map.add_artist(legend)
    s_codes = sam["dominant"].values
    s_colours = coordinate_colours(len(MU))
    draw_categories(ax_sam, s_codes[:, 1:], T[1:], sam["alpha"].values, s_colours, xlog=True)
    ax_sam.set_title(
        rf"(d) the paper's l2-SAM flow, $L = 2$, $\mu = (1, 2, 3, 4)$, $\rho = {RHO:g}$",
        fontsize=10,
    )
    s_present = sorted({int(c) for c in np.unique(s_codes[np.isfinite(s_codes)])})
    category_legend(
        ax_sam,
        s_colours,
        {c: f"coordinate {c}" if c else r"0: $\beta \approx 0$ (collapsed)" for c in s_present},
        title="leader",
        loc="lower left",
    )
    for ax in (ax_beta, ax_loss, ax_map):
        for T_k in jumps:
            ax.axvline(T_k, color="black", ls=":", lw=0.9)
    jump_line = plt.Line2D([], [], color="black", ls=":", lw=0.9, label=r"jump times $T_k$")
    ax_map.legend(handles=[jump_line], loc="lower right", fontsize=8)
    for ax in axs.flat:
        ax.set_xscale("log")
        ax.set_xlim(T[1], T[-1])
        ax.grid(alpha=0.3, which="major")
    ax_map.set_xlabel(r"$T = t / \log(1/\alpha)$ (gradient-flow time $t$)")
    ax_loss.set_xlabel(r"$T = t / \log(1/\alpha)$")
    ax_beta.set_xlabel(r"$T = t / \log(1/\alpha)$")
    ax_sam.set_xlabel(r"$\tau / \log(1/\alpha)$ (rescaled time $\tau$)")
    ax_sam.set_ylabel(r"initialisation scale $\alpha$")
    fig.suptitle(
        f"Saddle to saddle: n = {N_POINTS} points in d = {D}, "
        f"{SPARSITY}-sparse $\\beta^*$, squared loss; jumps at $T_k$ = "
        + ", ".join(f"{t:.3g}" for t in jumps),
        fontsize=11,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    return fig


def build(out_dir: Path, quick: bool) -> list[Path]:
    datasets = run(quick)
    return save_figure_set(draw(datasets), out_dir, "saddle_to_saddle", datasets)


if __name__ == "__main__":
    print(build(Path("figures"), "--quick" in sys.argv))
