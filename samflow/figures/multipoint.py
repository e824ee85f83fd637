r"""Figure 7 (beyond the paper): does sequential amplification survive many points?

Random separable data: n points, d = 4, \(x_i = y_i (s \cdot a_i)\) with feature scales
s = (0.5, 1, 2, 4), \(a_{ij} \sim U[0.25, 1.75]\) and random labels, so each feature
separates the data on its own but with a different margin and per-point spread
(seed 0). Discrete l2-SAM (rho = 1) and GD (rho = 0) at L = 2 with eta = 0.05, in
plain time \(t = \eta \cdot \text{steps}\) (for n > 1 the loss does not factor out), from balanced
alpha. Image: the dominant coordinate over (alpha, t), as in figure 2. For large
alpha the initial margin is already huge, the loss vanishes and nothing moves: the
rows stay tied (white). Quick build: n = 16; full build: n = 8, 16, 32.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from samflow.figures._engine import figure_spec, log_steps, sweep
from samflow.plotting import (
    REGIME_COLOURS,
    REGIME_NAMES,
    category_legend,
    coordinate_colours,
    dominant_codes,
    dominant_legend,
    draw_categories,
    mu_label,
    save_figure_set,
)
from samflow.sweeps.axes import parse_axis

SCALES = (0.5, 1.0, 2.0, 4.0)
RHO, ETA = 1.0, 0.05
TIE = -3


def make_data(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    a = rng.uniform(0.25, 1.75, size=(n, len(SCALES)))
    return y[:, None] * np.asarray(SCALES)[None, :] * a, y


def run(quick: bool) -> dict:
    steps = 20_000 if quick else 200_000
    n_alpha = 40 if quick else 160
    out = {}
    for n in (16,) if quick else (8, 16, 32):
        X, y = make_data(n)
        data = (tuple(map(tuple, X.tolist())), tuple(y.tolist()))
        for key, rho in (("l2sam", RHO), ("gd", 0.0)):
            spec = figure_spec(
                "sam-l2",
                "discrete",
                depth=2,
                axes=(parse_axis(f"alpha=0.05:2:{n_alpha}:log"),),
                rho=rho,
                eta=ETA,
                steps=steps,
                data=data,
                save_trajectories=True,
            )
            ds = sweep(spec, quick=quick, times=log_steps(steps))
            ds["X"] = (("point", "coord"), X, {"long_name": "inputs x_i"})
            ds["y"] = ("point", y, {"long_name": "labels y_i"})
            out[f"{key}_n{n}"] = ds
    return out


def codes_with_ties(ds) -> np.ndarray:
    codes = dominant_codes(ds["dominant"].values, ds["beta_norm"].values)
    beta = np.abs(ds["beta"].values)
    spread = beta.max(axis=-1) - beta.min(axis=-1)
    return np.where(spread <= 1e-6 * beta.max(axis=-1), TIE, codes)


def draw(datasets: dict):
    ns = sorted({int(k.split("_n")[1]) for k in datasets})
    fig, axs = plt.subplots(
        len(ns),
        3,
        figsize=(12.5, 4.4 * len(ns)),
        squeeze=False,
        gridspec_kw={"width_ratios": [3, 0.2, 3], "hspace": 0.35},
    )
    colours = {**coordinate_colours(len(SCALES)), TIE: "white"}
    regimes = set()
    for row, n in enumerate(ns):
        sam, gd = datasets[f"l2sam_n{n}"], datasets[f"gd_n{n}"]
        t = ETA * sam["step"].values[1:]
        alpha = sam["alpha"].values
        for ax, ds, label in (
            (axs[row, 0], sam, f"l2-SAM, rho = {RHO:g}"),
            (axs[row, 2], gd, "GD"),
        ):
            draw_categories(ax, codes_with_ties(ds)[:, 1:], t, alpha, colours)
            ax.set_xlabel(r"time $t = \eta \cdot$ steps")
            ax.set_title(f"{label}, L = 2, n = {n}, scales s = {mu_label(SCALES)}", fontsize=10)
        axs[row, 0].set_ylabel(r"initialisation scale $\alpha$")
        reg = sam["regime"].values.astype(int)
        regimes |= set(reg.tolist())
        draw_categories(
            axs[row, 1],
            reg[:, None],
            [0.0],
            alpha,
            {c: REGIME_COLOURS[c] for c in sorted(set(reg.tolist()))},
            xlog=False,
            ylog=True,
        )
        axs[row, 1].set_xticks([])
        axs[row, 1].set_yticks([])
        axs[row, 1].set_title("regime\n(SAM)", fontsize=8)
    leg = category_legend(
        axs[0, 2],
        {c: REGIME_COLOURS[c] for c in sorted(regimes)},
        {c: f"{c}: {REGIME_NAMES[c]}" for c in sorted(regimes)},
        title="regime code (strip)",
        loc="lower left",
        bbox_to_anchor=(1.03, 0.0),
    )
    axs[0, 2].add_artist(leg)
    tie = {TIE: r"tie: all $|\beta_j|$ equal"}
    dominant_legend(axs[0, 2], colours, 4, tie, bbox_to_anchor=(1.03, 1.0))
    fig.suptitle(
        "Many points: discrete l2-SAM vs GD on random separable data, "
        f"eta = {ETA:g}, features of scales {mu_label(SCALES)}",
        fontsize=11,
        y=0.93 if len(ns) > 1 else 1.02,
    )
    return fig


def build(out_dir: Path, quick: bool) -> list[Path]:
    datasets = run(quick)
    return save_figure_set(draw(datasets), out_dir, "multipoint", datasets)


if __name__ == "__main__":
    print(build(Path("figures"), "--quick" in sys.argv))
