r"""Figure 8 (beyond the paper): USAM against l2-SAM. Is the normalisation the cause?

Regime maps over (alpha, rho) of the rescaled flows at L = 2, mu = (1, 2, 3, 4),
records to tau = 200 as in figure 1. l2-SAM perturbs by \(\rho g / \lVert g\rVert\): at L = 2
\(\mathrm{d} \log u_j / \mathrm{d}\tau = \mu_j (1 - \rho \mu_j / N)\) with \(N\) proportional to
alpha, so only alpha / rho matters (diagonal bands). USAM perturbs by \(\rho g\), which carries
the loss factor \(\lvert l'(z)\rvert\) and is not scale invariant:
\(\mathrm{d} \log u_j / \mathrm{d}\tau = \mu_j (1 - \rho \mu_j \operatorname{sigmoid}(-z))\)
(derived here), so whether the minor coordinates lead depends on rho (and on alpha only through the
margin z). Middle: the dominant coordinate early on (at tau = 0.1), which shows which coordinate is
amplified first; right: the number of hand-offs of the dominant coordinate up to tau = 200.

Bottom row, the control (docs/theory/controls.md#normalisation-or-shrinkage):
\(\varepsilon = g / \lvert l'(z)\rvert\), USAM without the loss factor (neither normalised nor
shrinking). At L = 2 its relative shift \(\rho \mu_j\) is constant, so
\(\mathrm{d} \log u_j / \mathrm{d}\tau = \mu_j (1 - \rho \mu_j)\) and the leader,
\(\operatorname{argmax}_j \mu_j (1 - \rho \mu_j)\), never changes: minor coordinates can lead (for
rho above \(1 / (\mu_3 + \mu_4)\)) but there is no hand-off. The hand-offs of l2-SAM and USAM come
from the shrinking of their perturbation relative to the weights (\(1 / \lVert m\rVert\) or
\(\operatorname{sigmoid}(-z)\)), not from the normalisation as such.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

from samflow.figures._engine import MU, figure_spec, flow_times, sweep
from samflow.plotting import (
    category_legend,
    coordinate_colours,
    dominant_codes,
    dominant_legend,
    draw_categories,
    draw_regimes,
    mu_label,
    regime_legend,
    save_figure_set,
)
from samflow.rules import BalancedFlow, PerturbationRule, signed_int_pow
from samflow.sweeps.axes import parse_axis
from samflow.theory import l2sam_l2_alpha_bounds, l2sam_l2_direct_edge


def _unnormalised_direction(g, batch_ndim: int = 0):
    return g


def _nofactor_field(tau, s, args):
    """``ds_j/dtau = mu_j u_j^(L-2) (1 - rho mu_j u_j^(L-2))^(L-1)``, ``s = log u``.

    docs/theory/controls.md#normalisation-or-shrinkage: ``eps = -m``, so ``w~_j = u_j (1 - r_j)``
    with ``r_j = rho mu_j u_j^(L-2)`` (docs/theory/flows.md#log-space-form with ``c = 1``); at L =
    2 the rate is constant.
    """
    mu, depth, rho = args
    power = jnp.exp((depth.astype(s.dtype) - 2) * s)  # u^(L-2)
    return mu * power * signed_int_pow(1 - rho * mu * power, depth - 1)


USAM_NOFACTOR = PerturbationRule(
    "usam-nofactor",
    _unnormalised_direction,
    # Not scale invariant: the flag makes the one-point engine hand the rule the gradient
    # without its loss factor, -m = g / |l'(z)| (samflow.model.ascent_direction), which
    # is this control's definition. With more than one point it would be plain USAM.
    scale_invariant=True,
    balanced=BalancedFlow("log", _nofactor_field),
)
"""The control of docs/theory/controls.md#normalisation-or-shrinkage: ``eps = g / |l'(z)|`` (one
data point only)."""

TAU_MAX, TAU_EARLY = 200.0, 0.1
METHODS = {
    "l2sam": ("sam-l2", "l2-SAM"),
    "usam": ("usam", "USAM"),
    "nofactor": (USAM_NOFACTOR, "USAM, no loss factor"),
}
MAX_HANDOFFS = 4  # the hand-off map lumps 4 and more together


def run(quick: bool) -> dict:
    n_alpha, n_rho = (32, 16) if quick else (160, 96)
    axes = (parse_axis(f"alpha=0.01:10:{n_alpha}:log"), parse_axis(f"rho=0.05:5:{n_rho}:log"))
    times = flow_times(TAU_MAX, quick, tau_min=1e-3)
    times[np.argmin(np.abs(times - TAU_EARLY))] = TAU_EARLY
    out = {}
    for key, (method, _) in METHODS.items():
        spec = figure_spec(method, "flow", depth=2, axes=axes, mu=MU, tau_max=TAU_MAX)
        out[key] = sweep(spec, quick=quick, times=times)
    return out


def early_dominant(ds) -> np.ndarray:
    k = int(np.argmin(np.abs(ds["tau"].values - TAU_EARLY)))
    codes = dominant_codes(ds["dominant"].values, ds["beta_norm"].values)
    return codes[..., k]


def handoff_codes(ds) -> np.ndarray:
    """``n_handoffs`` capped at MAX_HANDOFFS; NaN where the run failed."""
    codes = np.minimum(ds["n_handoffs"].values, MAX_HANDOFFS).astype(float)
    return np.where(ds["regime"].values == -1, np.nan, codes)


def _line(ax, x, y, style, label=None) -> None:
    ax.plot(x, y, "w-", lw=2)
    ax.plot(x, y, "k", ls=style, lw=1.2, label=label)


def draw(datasets: dict):
    fig, axs = plt.subplots(3, 3, figsize=(16, 12.5), sharex=True, sharey=True)
    colours = coordinate_colours(len(MU))
    handoff_colours = {
        k: plt.get_cmap("viridis")(k / MAX_HANDOFFS) for k in range(MAX_HANDOFFS + 1)
    }
    handoff_colours[0] = "#EEEEEE"
    codes = set()
    for row, (key, (_, label)) in enumerate(METHODS.items()):
        ds = datasets[key]
        draw_regimes(axs[row, 0], ds["regime"], "alpha", "rho")
        codes |= set(np.unique(ds["regime"].values).tolist())
        title = f"{label} flow, L = 2, mu = {mu_label(MU)}: regime"
        if key == "nofactor":  # the leader never changes: "sequential" is a minor limit here
            title = f"{label}, L = 2: regime (2: minor leader, kept)"
        axs[row, 0].set_title(title, fontsize=10)
        alpha, rho = ds["alpha"].values, ds["rho"].values
        draw_categories(axs[row, 1], early_dominant(ds).T, alpha, rho, colours)
        axs[row, 1].set_title(
            rf"{label}: dominant coordinate at $\tau = {TAU_EARLY:g}$", fontsize=10
        )
        draw_categories(axs[row, 2], handoff_codes(ds).T, alpha, rho, handoff_colours)
        axs[row, 2].set_title(
            rf"{label}: hand-offs of the leader up to $\tau = {TAU_MAX:g}$", fontsize=10
        )
        axs[row, 0].set_ylabel(r"$\rho$")
    for ax in axs[:2].flat:
        ax.set_xlabel("")
    for ax in axs[2]:
        ax.set_xlabel(r"$\alpha$")
    alpha = datasets["l2sam"]["alpha"].values
    rho_line = np.geomspace(0.05, 5, 50)
    lo = np.array([l2sam_l2_alpha_bounds(MU, r)[0] for r in rho_line])
    hi = np.array([l2sam_l2_direct_edge(MU, r) for r in rho_line])
    for ax in axs[0]:
        for bound, style, label in ((lo, "--", "all shrink"), (hi, ":", "exact direct edge")):
            _line(ax, bound, rho_line, style, f"{label} at " + r"$\tau=0$")
    axs[0, 0].legend(loc="lower right", fontsize=8, framealpha=0.9)
    # USAM: every coordinate shrinks at the start when rho mu_1 sigmoid(-z_0) > 1.
    z0 = np.sum(MU) * alpha**2
    with np.errstate(over="ignore"):
        rho_all_shrink = (1 + np.exp(z0)) / MU[0]
    for ax in axs[1]:
        _line(
            ax,
            alpha,
            rho_all_shrink,
            "--",
            r"all shrink at $\tau=0$ above: $\rho\,\mu_1\,\sigma(-z_0) = 1$",
        )
    axs[1, 0].legend(loc="lower right", fontsize=8, framealpha=0.9)
    # Control: constant rates mu_j (1 - rho mu_j); all shrink above 1/mu_1, and the leader
    # passes from j + 1 to j (as rho grows) at rho = 1 / (mu_j + mu_{j+1}).
    edge = np.array([alpha[0] / 2, alpha[-1] * 2])
    for ax in axs[2]:
        _line(ax, edge, np.full(2, 1 / MU[0]), "--", r"all shrink above: $\rho\,\mu_1 = 1$")
        for j in range(len(MU) - 1):
            _line(
                ax,
                edge,
                np.full(2, 1 / (MU[j] + MU[j + 1])),
                ":",
                r"leader $j{+}1 \to j$: $\rho = 1/(\mu_j + \mu_{j+1})$" if j == 0 else None,
            )
    axs[2, 0].legend(loc="lower right", fontsize=8, framealpha=0.9)
    rho = datasets["l2sam"]["rho"].values
    step_a, step_r = np.sqrt(alpha[1] / alpha[0]), np.sqrt(rho[1] / rho[0])
    axs[0, 0].set_xlim(alpha[0] / step_a, alpha[-1] * step_a)
    axs[0, 0].set_ylim(rho[0] / step_r, rho[-1] * step_r)
    regime_legend(axs[0, 2], sorted(codes), loc="upper left", bbox_to_anchor=(1.03, 1.0))
    dominant_legend(axs[1, 2], colours, 4, bbox_to_anchor=(1.03, 1.0))
    names = {k: str(k) for k in range(MAX_HANDOFFS)} | {MAX_HANDOFFS: f">= {MAX_HANDOFFS}"}
    category_legend(
        axs[2, 2],
        handoff_colours,
        names,
        title="hand-offs",
        loc="upper left",
        bbox_to_anchor=(1.03, 1.0),
    )
    fig.suptitle(
        r"USAM vs l2-SAM vs USAM without its loss factor (rescaled flows to $\tau = 200$):"
        " which ingredient makes minor features lead, and then hand over?",
        fontsize=11,
        y=0.95,
    )
    fig.subplots_adjust(top=0.91, hspace=0.18)
    return fig


def build(out_dir: Path, quick: bool) -> list[Path]:
    datasets = run(quick)
    for ds in datasets.values():
        ds["dominant_early"] = (
            ("alpha", "rho"),
            np.nan_to_num(early_dominant(ds), nan=-1).astype(np.int32),
            {"long_name": f"dominant coordinate at tau = {TAU_EARLY} (0 collapsed, -1 none)"},
        )
    return save_figure_set(draw(datasets), out_dir, "usam", datasets)


if __name__ == "__main__":
    print(build(Path("figures"), "--quick" in sys.argv))
