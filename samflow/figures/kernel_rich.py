r"""Figure 15: kernel and rich regimes. Test error, the l1 norm of beta and the
final sharpness against the initialisation scale alpha, for GD, SGD, n-SAM and 1-SAM on sparse
regression, with Woodworth's curve and the l1 / l2 limits.

The problem of Andriushchenko & Flammarion (2022): n = 20 Gaussian points in d = 30,
\(y = X \beta^*\) with a 3-sparse, nonnegative, unit-norm \(\beta^*\); the network
\(\beta = u^2 - v^2\) from \(u = v = \alpha\), the squared loss
\((1/(2n)) \lVert X \beta - y\rVert^2\). Every method takes the same discrete steps: GD (full
batch), SGD (batches of one example, three seeds), n-SAM and 1-SAM (unnormalised
perturbation \(\rho \nabla L\), as in their analysis: method ``usam``; n-SAM one
perturbation for the whole batch, 1-SAM one per example, \(m = 1\)). The step size
is \(\min(\texttt{ETA}, 1 / (8 \alpha^2 \max_i \lVert x_i\rVert^2))\) at each alpha, the same for
every method (stable for one example's Hessian \(8 \alpha^2 x_i x_i^T\) in (u, v) at the
start). Overlaid: Woodworth's interpolant \(\operatorname{argmin} Q_\alpha\) s.t. \(X \beta = y\)
(:func:`samflow.oracles.woodworth_interpolant`, where gradient flow converges,
docs/theory/oracles.md#kernel-and-rich-regimes), the engine's own GD flow (log space, to t = 20000,
alpha <= 1) on it, and the minimum-l1 and minimum-l2 interpolants (dashed and dotted).

Test error \(\lVert \beta - \beta^*\rVert_2^2\) (the excess risk for isotropic Gaussian inputs,
times 2); sharpness: the top eigenvalue of the training loss's Hessian in (u, v) at the
last step. Open markers: runs that did not interpolate (final loss above 1e-8).
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import xarray as xr

from samflow.figures._engine import sweep
from samflow.oracles import min_l1_interpolant, min_l2_interpolant, woodworth_interpolant
from samflow.plotting import OKABE_ITO, save_figure_set
from samflow.runners import At, Discrete, Flow
from samflow.summaries import Summaries
from samflow.sweeps.spec import SweepSpec

N_POINTS, D, SPARSITY, SEED = 20, 30, 3, 1
ALPHA_RANGE = (1e-3, 10.0)
RHO, ETA = 0.1, 0.05
SGD_SEEDS = (0, 1, 2)
T_FLOW = 20_000.0
LOSS_TOL = 1e-8  # a run interpolates when its final training loss is below this
METHODS = {
    "GD": ("gd", None, {}),
    "SGD (batch 1)": ("gd", None, {"batch": 1}),
    "n-SAM": ("usam", RHO, {}),
    "1-SAM": ("usam", RHO, {"m": 1}),
}
STYLE = {
    "GD": {"color": OKABE_ITO[7], "marker": "o", "ls": "-"},
    "SGD (batch 1)": {"color": OKABE_ITO[0], "marker": "s", "ls": "--"},
    "n-SAM": {"color": OKABE_ITO[3], "marker": "^", "ls": "-."},
    "1-SAM": {"color": OKABE_ITO[4], "marker": "v", "ls": ":"},
}
FINAL = ("beta", "loss", "test_error", "l1_norm", "n_active", "sharpness", "hessian_trace")


def make_problem(seed: int = SEED) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Andriushchenko & Flammarion's sparse regression: ``X`` ``[n, d]`` standard Gaussian,
    ``beta*`` with ``SPARSITY`` nonzero entries ``|N(0, 1)|`` scaled to unit l2 norm."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N_POINTS, D))
    beta_star = np.zeros(D)
    beta_star[:SPARSITY] = np.abs(rng.normal(size=SPARSITY))
    beta_star /= np.linalg.norm(beta_star)
    return X, X @ beta_star, beta_star


def step_size(alpha: np.ndarray, X: np.ndarray, eta: float = ETA) -> np.ndarray:
    """``min(eta, 1 / (8 alpha^2 max_i ||x_i||^2))`` per alpha."""
    return np.minimum(eta, 1.0 / (8 * np.asarray(alpha) ** 2 * np.max(np.sum(X**2, axis=1))))


def run(quick: bool) -> xr.Dataset:
    X, y, beta_star = make_problem()
    alphas = np.geomspace(*ALPHA_RANGE, 9 if quick else 25)
    steps = 30_000 if quick else 200_000
    record = (0, steps // 10, steps // 2, steps)
    out: dict[str, np.ndarray] = {name: [] for name in FINAL}
    for method, rho, options in METHODS.values():
        axes = {"alpha": alphas}
        if options.get("batch"):
            axes["noise_seed"] = list(SGD_SEEDS)
        spec = SweepSpec.from_inputs(
            method,
            depth=2,
            runner=Discrete(eta=ETA, steps=steps, save=At(record), **options),
            data=(X, y),
            axes=axes,
            rho=rho,
            loss="squared",
            parametrization="u2-v2",
            beta_star=beta_star,
            summaries=Summaries(sharpness=True),
            save_trajectories=True,
        )
        eta = step_size(spec.points(np.arange(spec.size)).theta0[:, 0, 0], X)
        ds = sweep(spec, quick=quick, layers=None, overrides={"eta": eta})
        if "noise_seed" in ds.dims:
            ds = ds.mean("noise_seed")  # SGD: the mean over its seeds
        for name in FINAL:
            out[name].append(ds[name].isel(time=-1).values)
    flow = _gd_flow(X, y, beta_star, alphas)
    curve_alpha = np.geomspace(*ALPHA_RANGE, 200)
    curve = np.stack([woodworth_interpolant(X, y, a).beta for a in curve_alpha])
    l1, l2 = min_l1_interpolant(X, y), min_l2_interpolant(X, y)
    dims = ("method", "alpha")
    return xr.Dataset(
        {
            "beta": ((*dims, "coord"), np.stack(out["beta"])),
            "loss": (dims, np.stack(out["loss"]), {"long_name": "final training loss"}),
            "test_error": (dims, np.stack(out["test_error"]), {"long_name": "||beta - beta*||^2"}),
            "l1_norm": (dims, np.stack(out["l1_norm"]), {"long_name": "||beta||_1"}),
            "n_active": (dims, np.stack(out["n_active"]), {"long_name": "|beta_j| > 1e-3"}),
            "sharpness": (
                dims,
                np.stack(out["sharpness"]),
                {"long_name": "top Hessian eigenvalue"},
            ),
            "hessian_trace": (dims, np.stack(out["hessian_trace"])),
            "eta": ("alpha", step_size(alphas, X), {"long_name": "step size at each alpha"}),
            "flow_beta": (("alpha", "coord"), flow, {"long_name": f"GD flow at t = {T_FLOW:g}"}),
            "woodworth_beta": (("curve_alpha", "coord"), curve),
            "l1_beta": ("coord", l1, {"long_name": "minimum-l1 interpolant (linprog)"}),
            "l2_beta": ("coord", l2, {"long_name": "minimum-l2 interpolant (X^+ y)"}),
            "beta_star": ("coord", beta_star),
            "X": (("point", "coord"), X),
            "y": ("point", y),
        },
        coords={
            "method": list(METHODS),
            "alpha": alphas,
            "curve_alpha": curve_alpha,
            "coord": np.arange(1, D + 1),
        },
        attrs={
            "rho": RHO,
            "steps": steps,
            "sgd_seeds": list(SGD_SEEDS),
            "perturbation": "usam (rho grad, unnormalised); 1-SAM: m = 1",
            "model": "u2-v2, squared loss (1/(2n)) ||X beta - y||^2",
        },
    )


def _gd_flow(X, y, beta_star, alphas) -> np.ndarray:
    """The engine's GD flow (u2-v2, log space) at ``T_FLOW``, ``[len(alphas), d]``, for
    alpha <= 1 (NaN above: there the flow is stiff for the explicit solver, whose steps
    are ~1 / (8 alpha^2 lambda_max), and it is Woodworth's to 1e-10 by t = 10,
    ``tests/test_oracles.py``)."""
    out = np.full((len(alphas), X.shape[1]), np.nan)
    small = alphas <= 1.0
    alphas = alphas[small]
    spec = SweepSpec.from_inputs(
        "gd",
        depth=2,
        runner=Flow(tau_max=T_FLOW, rtol=1e-8, atol=1e-10, max_steps=200_000),
        data=(X, y),
        axes={"alpha": alphas},
        loss="squared",
        parametrization="u2-v2",
        beta_star=beta_star,
        save_trajectories=True,
    )
    ds = sweep(spec, quick=True, layers=None, times=np.r_[0.0, np.geomspace(1e-2, T_FLOW, 40)])
    out[small] = ds["beta"].values[:, -1]
    return out


def draw(ds: xr.Dataset):
    alphas, curve_alpha = ds["alpha"].values, ds["curve_alpha"].values
    beta_star = ds["beta_star"].values
    curve = ds["woodworth_beta"].values
    fig, axs = plt.subplots(1, 3, figsize=(17, 5.2))
    ax_err, ax_l1, ax_sharp = axs
    limits = {
        "min-l1 interpolant": (ds["l1_beta"].values, "--"),
        "min-l2 interpolant": (ds["l2_beta"].values, ":"),
    }
    ax_err.plot(
        curve_alpha, np.sum((curve - beta_star) ** 2, 1), color="grey", lw=3, alpha=0.6,
        label=r"Woodworth: $\arg\min Q_\alpha$",
    )  # fmt: skip
    ax_l1.plot(curve_alpha, np.abs(curve).sum(1), color="grey", lw=3, alpha=0.6)
    flow = ds["flow_beta"].values
    for ax, values in ((ax_err, np.sum((flow - beta_star) ** 2, 1)), (ax_l1, np.abs(flow).sum(1))):
        ax.plot(
            alphas,
            values,
            "x",
            color="black",
            ms=7,
            label="GD flow (engine)" if ax is ax_err else None,
        )
    for name, (b, ls) in limits.items():
        error = np.sum((b - beta_star) ** 2)
        if error > 1e-12:  # the min-l1 interpolant may be beta* itself (error 0)
            ax_err.axhline(error, color="black", ls=ls, lw=1)
        else:
            name += r" $= \beta^*$ (error 0)"
        ax_l1.axhline(np.abs(b).sum(), color="black", ls=ls, lw=1, label=name)
    for m, label in enumerate(ds["method"].values):
        style = STYLE[str(label)]
        done = ds["loss"].values[m] <= LOSS_TOL
        for ax, name in ((ax_err, "test_error"), (ax_l1, "l1_norm"), (ax_sharp, "sharpness")):
            v = ds[name].values[m]
            ax.plot(alphas, v, color=style["color"], ls=style["ls"], lw=1.2)
            shown = label if ax is not ax_l1 else None
            ax.plot(alphas[done], v[done], style["marker"], color=style["color"], ms=6, label=shown)
            ax.plot(
                alphas[~done], v[~done], style["marker"], color=style["color"], ms=6, mfc="none"
            )
    ax_err.set_ylabel(r"test error $\|\beta - \beta^*\|_2^2$")
    ax_l1.set_ylabel(r"$\|\beta\|_1$")
    ax_sharp.set_ylabel("sharpness: top Hessian eigenvalue at the last step")
    ax_err.set_title("(a) test error", fontsize=10)
    ax_l1.set_title(r"(b) $\ell_1$ norm of the interpolant", fontsize=10)
    ax_sharp.set_title("(c) sharpness of the final point", fontsize=10)
    ax_err.set_yscale("log")
    ax_err.legend(fontsize=8, loc="lower right")
    ax_sharp.set_yscale("log")
    for ax in axs:
        ax.set_xscale("log")
        ax.set_xlabel(r"initialisation scale $\alpha$")
        ax.grid(alpha=0.3, which="both")
    ax_l1.legend(fontsize=8, loc="upper left")
    ax_sharp.legend(fontsize=8, loc="upper left")
    diverged = [
        f"{m} at alpha = {a:.3g}"
        for m, row in zip(ds["method"].values, ds["loss"].values, strict=True)
        for a, v in zip(alphas, row, strict=True)
        if not np.isfinite(v)
    ]
    if diverged:
        ax_err.text(
            0.02, 0.98, "diverged (not drawn):\n" + "\n".join(diverged), transform=ax_err.transAxes,
            va="top", fontsize=8,
        )  # fmt: skip
    a = ds.attrs
    fig.suptitle(
        f"Kernel and rich regimes: n = {N_POINTS}, d = {D}, {SPARSITY}-sparse $\\beta^*$, "
        rf"$u^2 - v^2$, squared loss; SAM: $\rho = {a['rho']:g}$ (unnormalised), "
        f"{a['steps']:,} steps; open markers: not interpolating",
        fontsize=11,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    return fig


def build(out_dir: Path, quick: bool) -> list[Path]:
    ds = run(quick)
    return save_figure_set(draw(ds), out_dir, "kernel_rich", {"": ds})


if __name__ == "__main__":
    print(build(Path("figures"), "--quick" in sys.argv))
