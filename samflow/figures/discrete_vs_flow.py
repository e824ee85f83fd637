r"""Figure 9: discrete l2-SAM against its rescaled flow, error against the step size.

L = 2, mu = (1, 2, 3, 4), rho = 1, alpha = 0.5. The discrete run reads rescaled time
\(\tau_{t+1} = \tau_t + \eta \lvert l'(\tilde{z}_t)\rvert\) (docs/theory/flows.md#rescaled-flows);
its beta is interpolated linearly in tau at \(\tau = 0.5\) and compared with the flow there. As eta
-> 0 the error should fall like eta (slope 1). Right: the trajectories themselves.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import NullFormatter

from samflow.figures._engine import DISCRETE_RECORDS, MU, figure_spec, flow_times, sweep
from samflow.plotting import OKABE_ITO, coord_style, mu_label, save_figure_set
from samflow.sweeps.axes import parse_axis

ALPHA, RHO, TAU_AT, TAU_SHOW = 0.5, 1.0, 0.5, 0.8
ETAS = (0.08, 0.04, 0.02, 0.01, 0.005)


def run(quick: bool) -> dict:
    steps = DISCRETE_RECORDS - 1  # one record per step: enough for eta >= 0.005 to pass tau = 0.5
    disc = figure_spec(
        "sam-l2",
        "discrete",
        depth=2,
        axes=(parse_axis("eta=" + ",".join(str(e) for e in ETAS)),),
        alpha=ALPHA,
        rho=RHO,
        mu=MU,
        steps=steps,
        record_every=1,
        save_trajectories=True,
        to_fate=False,  # draws beta against tau, no labels
    )
    flow = figure_spec(
        "sam-l2",
        "flow",
        depth=2,
        axes=(parse_axis(f"alpha={ALPHA}"),),
        rho=RHO,
        mu=MU,
        save_trajectories=True,
        to_fate=False,
    )
    times = flow_times(TAU_SHOW, quick, tau_min=1e-3)
    times[np.argmin(np.abs(times - TAU_AT))] = TAU_AT  # a record exactly at tau = 0.5
    return {"discrete": sweep(disc, quick=quick), "flow": sweep(flow, quick=quick, times=times)}


def errors(disc, flow) -> np.ndarray:
    """Relative l2 error of beta at TAU_AT for each eta (NaN if the run stopped short)."""
    ref = flow["beta"].isel(alpha=0).values[np.argmin(np.abs(flow["tau"].values - TAU_AT))]
    out = []
    for k in range(disc.sizes["eta"]):
        tau = disc["rescaled_tau"].isel(eta=k).values
        beta = disc["beta"].isel(eta=k).values
        if not tau[-1] >= TAU_AT:
            out.append(np.nan)
            continue
        at = np.array([np.interp(TAU_AT, tau, beta[:, j]) for j in range(beta.shape[1])])
        out.append(np.linalg.norm(at - ref) / np.linalg.norm(ref))
    return np.array(out)


def draw(disc, flow, err):
    eta = disc["eta"].values
    fig, (ax, ax_tr) = plt.subplots(1, 2, figsize=(12, 4.6))
    ok = np.isfinite(err)
    slope = np.polyfit(np.log(eta[ok]), np.log(err[ok]), 1)[0]
    ax.loglog(
        eta[ok], err[ok], "o-", color=OKABE_ITO[4], lw=1.8, label=f"measured (slope {slope:.2f})"
    )
    guide = err[ok][-1] * eta[ok] / eta[ok][-1]
    ax.loglog(eta[ok], guide, "k--", lw=1, label="slope 1")
    for e, v in zip(eta[ok], err[ok], strict=True):
        ax.annotate(f"{v:.1e}", (e, v), xytext=(5, -10), textcoords="offset points", fontsize=8)
    ax.set_xticks(eta, [f"{e:g}" for e in eta], minor=False)
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(r"step size $\eta$")
    ax.set_ylabel(r"$\|\beta_\eta(\tau) - \beta_{flow}(\tau)\|_2 / \|\beta_{flow}(\tau)\|_2$")
    ax.set_title(rf"relative error at $\tau = {TAU_AT:g}$", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    ftau = flow["tau"].values
    fbeta = flow["beta"].isel(alpha=0).values
    show = (ftau > 0) & (ftau <= TAU_SHOW)
    coarse = disc.sel(eta=max(eta))
    dtau = coarse["rescaled_tau"].values
    dbeta = coarse["beta"].values
    dshow = (dtau <= TAU_SHOW) & (np.arange(len(dtau)) % 3 == 0)
    for j in range(fbeta.shape[1]):
        style = coord_style(j)
        ax_tr.plot(ftau[show], fbeta[show, j], color=style["color"], lw=1.8, label=f"$j = {j + 1}$")
        ax_tr.plot(
            dtau[dshow], dbeta[dshow, j], "o", ms=3, mfc="none", color=style["color"], alpha=0.8
        )
    ax_tr.axvline(TAU_AT, color="grey", ls=":", lw=1)
    ax_tr.set_yscale("log")
    ax_tr.set_xlabel(r"rescaled time $\tau$")
    ax_tr.set_ylabel(r"$\beta_j$")
    ax_tr.set_title(
        rf"flow (lines) and discrete $\eta = {max(eta):g}$ (circles, every 3rd step)", fontsize=10
    )
    ax_tr.legend(title="coordinate", fontsize=8, ncol=2)
    ax_tr.grid(alpha=0.3)
    fig.suptitle(
        f"l2-SAM, L = 2, mu = {mu_label(MU)}, rho = {RHO:g}, alpha = {ALPHA:g}: "
        "discrete iterates approach the rescaled flow as eta -> 0",
        fontsize=11,
    )
    return fig, slope


def build(out_dir: Path, quick: bool) -> list[Path]:
    res = run(quick)
    disc, flow = res["discrete"], res["flow"]
    err = errors(disc, flow)
    disc["rel_error_at_tau"] = (
        "eta",
        err,
        {"long_name": f"relative l2 error of beta against the flow at tau = {TAU_AT}"},
    )
    fig, slope = draw(disc, flow, err)
    disc.attrs["error_slope"] = slope
    return save_figure_set(fig, out_dir, "discrete_vs_flow", res)


if __name__ == "__main__":
    print(build(Path("figures"), "--quick" in sys.argv))
