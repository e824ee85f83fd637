r"""Figure 17: 1-SAM against n-SAM against GD on sparse regression (Andriushchenko &
Flammarion 2022), over rho and random problems.

Their claim: on sparse regression with a diagonal network, SAM's implicit bias is
towards sparser interpolants than GD's, and more so with m-sharpness: 1-SAM (one
perturbation per example) reaches a sparser interpolant with lower test error than
n-SAM (one perturbation for the batch), which beats GD, at the same rho. Their
problem: n = 20 Gaussian points in d = 30, \(y = X \beta^*\), \(\beta^*\) 3-sparse,
nonnegative, unit norm (``samflow.figures.kernel_rich.make_problem``, one random
problem per seed). Here: the networks \(u^2 - v^2\) (from \(u = v = \alpha\)) and ``uv``
(their code's: \(u = \alpha\), \(v = 0\)), alpha = 0.1, the squared loss, full-batch
discrete steps (eta = 0.05) of GD, n-SAM and 1-SAM, with the unnormalised perturbation
\(\rho \nabla L\) of their analysis (``usam``) and with l2-SAM's normalised one
(``sam-l2``), over a grid of rho.

Each panel: the mean over the problems of the final test error \(\lVert \beta - \beta^*\rVert^2\)
(left), \(\lVert \beta\rVert_1\) (middle) and the final training loss (right; SAM with a
normalised perturbation keeps moving at an interpolant, so it need not converge),
with the minimum-l1 interpolant's values dashed. The table of docs/figures.md is the
full build's.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import xarray as xr

from samflow.engine import run_points
from samflow.figures.kernel_rich import make_problem
from samflow.oracles import min_l1_interpolant
from samflow.plotting import OKABE_ITO, save_figure_set
from samflow.runners import At, Discrete
from samflow.summaries import Summaries
from samflow.sweeps.spec import SweepSpec

ALPHA, ETA = 0.1, 0.05
RHOS = {"usam": (0.02, 0.05, 0.1, 0.2), "sam-l2": (0.003, 0.01, 0.03, 0.1)}
PARAMETRIZATIONS = ("u2-v2", "uv")
VARIANTS = {"GD": None, "n-SAM": None, "1-SAM": 1}  # m: None is one group (n-SAM)
STYLE = {
    "GD": {"color": OKABE_ITO[7], "marker": "o", "ls": "-"},
    "n-SAM": {"color": OKABE_ITO[3], "marker": "^", "ls": "-."},
    "1-SAM": {"color": OKABE_ITO[4], "marker": "v", "ls": ":"},
}
FINAL = ("loss", "test_error", "l1_norm", "n_active", "sharpness")


def _spec(method, parametrization, rhos, m, steps, X, y, beta_star) -> SweepSpec:
    return SweepSpec.from_inputs(
        method,
        depth=2,
        runner=Discrete(eta=ETA, steps=steps, save=At((0, steps)), m=m),
        data=(X, y),
        axes={"rho": list(rhos)},
        alpha=ALPHA,
        loss="squared",
        parametrization=parametrization,
        beta_star=beta_star,
        summaries=Summaries(sharpness=True),
    )


def _final(spec: SweepSpec, problems) -> dict[str, np.ndarray]:
    """``spec`` (one program) on each problem ``(X, y, beta*)``: final values ``[K, rho]``."""
    setup = spec.setup(sharded=False)
    base = spec.points(np.arange(spec.size))
    out = {name: [] for name in FINAL}
    for X, y, beta_star in problems:
        points = base._replace(X=X[None], y=y, beta_star=beta_star)
        result = run_points(setup, points, spec.times())
        for name in FINAL:
            out[name].append(np.asarray(result[name])[:, -1])
    return {k: np.stack(v) for k, v in out.items()}


def run(quick: bool) -> xr.Dataset:
    seeds = np.arange(3 if quick else 10)
    steps = 10_000 if quick else 50_000
    problems = [make_problem(int(s)) for s in seeds]
    values = {name: np.full((2, 2, 3, len(seeds), 4), np.nan) for name in FINAL}
    for p, param in enumerate(PARAMETRIZATIONS):
        for k, (method, rhos) in enumerate(RHOS.items()):
            for v, (variant, m) in enumerate(VARIANTS.items()):
                if variant == "GD" and k == 1:  # GD does not depend on the perturbation
                    for name in FINAL:
                        values[name][p, k, v] = values[name][p, 0, v]
                    continue
                X, y, beta_star = problems[0]
                # GD: the same rule with rho = 0 (the perturbation is scaled by rho)
                grid = (0.0,) if variant == "GD" else rhos
                spec = _spec(method, param, grid, m, steps, X, y, beta_star)
                final = _final(spec, problems)
                for name in FINAL:
                    values[name][p, k, v] = final[name]  # GD: [K, 1] broadcast over rho
    l1 = [min_l1_interpolant(X, y) for X, y, _ in problems]
    dims = ("parametrization", "perturbation", "variant", "problem", "rho_index")
    return xr.Dataset(
        {
            **{name: (dims, values[name]) for name in FINAL},
            "rho": (("perturbation", "rho_index"), np.array(list(RHOS.values()))),
            "l1_test_error": (
                "problem",
                [np.sum((b - bs) ** 2) for b, (_, _, bs) in zip(l1, problems, strict=True)],
            ),
            "l1_l1_norm": ("problem", [np.abs(b).sum() for b in l1]),
        },
        coords={
            "parametrization": list(PARAMETRIZATIONS),
            "perturbation": list(RHOS),
            "variant": list(VARIANTS),
            "problem": seeds,
        },
        attrs={"alpha": ALPHA, "eta": ETA, "steps": steps, "n": 20, "d": 30, "sparsity": 3},
    )


def table(ds: xr.Dataset) -> str:
    """A Markdown table: means over the problems of the final test error and l1 norm, and
    on how many problems n-SAM beats GD, 1-SAM beats n-SAM, and both (1-SAM < n-SAM <
    GD, the claim), in test error."""
    rows = [
        "| network | perturbation | rho | test error: GD | n-SAM | 1-SAM | l1 norm: GD "
        "| n-SAM | 1-SAM | n-SAM < GD | 1-SAM < n-SAM | 1-SAM < n-SAM < GD |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for param in ds["parametrization"].values:
        for pert in ds["perturbation"].values:
            one = ds.sel(parametrization=param, perturbation=pert)
            for r, rho in enumerate(one["rho"].values):
                err = one["test_error"].isel(rho_index=r)
                l1 = one["l1_norm"].isel(rho_index=r)
                e = {v: err.sel(variant=v).values for v in VARIANTS}
                wins = (
                    e["n-SAM"] < e["GD"],
                    e["1-SAM"] < e["n-SAM"],
                    (e["1-SAM"] < e["n-SAM"]) & (e["n-SAM"] < e["GD"]),
                )
                rows.append(
                    f"| {param} | {pert} | {rho:g} | "
                    + " | ".join(f"{e[v].mean():.3g}" for v in VARIANTS)
                    + " | "
                    + " | ".join(f"{l1.sel(variant=v).values.mean():.3f}" for v in VARIANTS)
                    + " | "
                    + " | ".join(f"{int(w.sum())}/{w.size}" for w in wins)
                    + " |"
                )
    return "\n".join(rows)


def draw(ds: xr.Dataset):
    fig, axs = plt.subplots(4, 3, figsize=(14, 15), sharex="row")
    for p, param in enumerate(ds["parametrization"].values):
        for k, pert in enumerate(ds["perturbation"].values):
            row = axs[2 * p + k]
            one = ds.sel(parametrization=param, perturbation=pert)
            rho = one["rho"].values
            for variant in VARIANTS:
                style = STYLE[variant]
                for ax, name in zip(row, ("test_error", "l1_norm", "loss"), strict=True):
                    v = one[name].sel(variant=variant).values  # [problem, rho]
                    ax.plot(rho, v.mean(0), lw=1.4, label=variant, **style)
                    ax.fill_between(rho, v.min(0), v.max(0), color=style["color"], alpha=0.12)
            l1_error = float(ds["l1_test_error"].mean())
            if l1_error > 1e-12:  # the min-l1 interpolant is often beta* itself
                row[0].axhline(l1_error, color="black", ls="--", lw=1)
            row[1].axhline(ds["l1_l1_norm"].mean(), color="black", ls="--", lw=1, label="min-l1")
            row[0].set_ylabel(f"{param}, {pert}\n" + r"test error $\|\beta - \beta^*\|^2$")
            row[1].set_ylabel(r"$\|\beta\|_1$")
            row[2].set_ylabel("final training loss")
            for ax in row:
                ax.set_xscale("log")
                ax.set_xticks(rho, [f"{r:g}" for r in rho])
                ax.minorticks_off()
                ax.set_xlabel(r"$\rho$")
                ax.grid(alpha=0.3)
            row[0].set_yscale("log")
            row[2].set_yscale("log")
    axs[0, 0].legend(fontsize=8, title="mean; band: min-max over problems")
    l1_error = float(ds["l1_test_error"].mean())
    note = "= beta* (test error 0)" if l1_error <= 1e-12 else f"test error {l1_error:.2g}"
    axs[0, 1].legend(fontsize=8, title=f"min-l1 interpolant {note}")
    a = ds.attrs
    fig.suptitle(
        f"1-SAM vs n-SAM vs GD on sparse regression (n = {a['n']}, d = {a['d']}, "
        f"{a['sparsity']}-sparse): alpha = {a['alpha']:g}, eta = {a['eta']:g}, "
        f"{a['steps']:,} steps, {ds.sizes['problem']} random problems",
        fontsize=11,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    return fig


def build(out_dir: Path, quick: bool) -> list[Path]:
    ds = run(quick)
    print(table(ds))
    return save_figure_set(draw(ds), out_dir, "sam_sparsity", {"": ds})


if __name__ == "__main__":
    print(build(Path("figures"), "--quick" in sys.argv))
