"""Why discrete l2-SAM (and GD) runs stay unresolved: each unresolved run of a grid, by the
state where it stopped (issue 38).

The runs are the engine's (``samflow.sweep``, balanced step); the state at the stop is
recomputed here by a NumPy float64 loop of the balanced step map (from the start, for
``steps`` or ``step_cap`` steps: an unresolved run stops there), and classed:

- L = 2: ``middle`` (rho c mu_min < 1 < rho c (a + b): some coordinates grow, some shrink),
  ``shrink-region`` (rho c mu_min > 1, no discrete collapse certificate), ``region``
  (rho c (a + b) < 1: should be decided), ``stall``;
- L >= 3, with R = L rho c x_a (a the major, x_j = mu_j u_j^(L-2)):
  ``a-held-back`` (R >= 1, a minor leads), ``b-shares`` (R < 1, the major ahead in rate,
  the shares condition failing), ``c-stall`` (every step ``eta |l'(z~)| F(x_j)`` below
  1e-15 of u_j: the float64 steps round to nothing), ``d-major-leads-R>=1``,
  ``d-not-ahead`` (R < 1, the major not ahead in rate: another coordinate has the
  largest x), ``gd: ...`` for GD; for USAM (``c = sigmoid(-z)``): ``usam: in R`` (every
  ``r_j = rho c x_j <= 1``) or ``outside R``, who leads, and whether the major is ahead in
  rate (docs/theory/regimes.md#usam-returns, #usam-step-returns);

each split by whether max_j u_j is above its start (grow) or below (shrink).

    PYTHONPATH=. python experiments/unresolved_classes.py --grid issue --depth 3 --cap 100
    PYTHONPATH=. python experiments/unresolved_classes.py --grid random --method gd --depth 4
    PYTHONPATH=. python experiments/unresolved_classes.py --grid figure --method usam --depth 4
    PYTHONPATH=. python experiments/unresolved_classes.py --grid figure --depth 4 --follow 1e4

``--follow F``: each unresolved run on its own, a line each: its class, the step's size
in rescaled time at the stop (``h = eta |l'(z~)|``, log10: a run whose loss fell to
1e-60 in its first steps moves by ~1e-60 of the flow's time a step, and no cap takes it
far), the label of the same run with ``F`` times the steps as its cap, and the label and
stop of the flow from the same start and from the map's state at the stop (the figures'
flow settings).

Grids: ``figure`` and ``random`` as experiments/unresolved_shares.py (n = 8: eta 0.01,
2,000 steps); ``issue``: the grid of issue 38 (mu (1, 2, 3, 4), alpha 0.02..5 (24, log) x
rho 0.1..3 (12, log), eta 0.02, 5,000 steps). ``--cap F``: ``step_cap`` F times the steps
(the figures use 1,000); 0: none.
"""

from __future__ import annotations

import argparse
import collections
import time

import numpy as np
from unresolved_shares import ETA, STEPS, _at, _c, grids, runner

import samflow


def end_states(method, mu, u0, L, rho, eta, steps):
    """The balanced step map from u0 [n, d], ``steps`` steps, float64."""
    u = np.array(u0, float)
    rho = np.asarray(rho, float)[:, None]
    for _ in range(steps):
        m = mu * u ** (L - 1)
        if method == "usam":
            z = np.minimum(np.sum(mu * u**L, axis=1, keepdims=True), 700.0)
            w = u - rho * m / (1.0 + np.exp(z))
        elif method == "gd":
            w = u
        else:
            w = u - rho * m / np.sqrt(L * np.sum(m * m, axis=1, keepdims=True))
        zt = np.minimum(np.sum(mu * w**L, axis=1, keepdims=True), 700.0)
        u = u + eta / (1.0 + np.exp(zt)) * mu * w ** (L - 1)
    return u


def _h(mu, u, L, rho, c, eta) -> float:
    """``eta |l'(z~)|`` at ``u > 0`` with the rule's ``c``: the step's length in rescaled
    time (the perturbed point ``w = u (1 - rho c x)``)."""
    w = u * (1 - rho * c * mu * u ** (L - 2))
    return float(eta / (1 + np.exp(min(np.sum(mu * w**L), 700.0))))


def step_size(method, mu, u, L, rho, eta) -> float:
    """``eta |l'(z~)|`` at state ``u``, the rule's ``c`` from experiments/unresolved_shares."""
    u = np.abs(u)
    return _h(mu, u, L, rho, _c(method, u, mu, L), eta)


def follow(method, mu, u0, u_end, L, rho, eta, steps, factor) -> str:
    """The run on its own with ``factor`` times the steps as cap, its flow, and the flow
    from the map's state at the stop ``u_end`` (where a proof that small steps keep to
    the flow would have to carry the map)."""
    kw = dict(depth=L, mu=list(mu))
    if method != "gd":
        kw["rho"] = rho
    cap = samflow.Discrete(eta=eta, steps=steps, step_cap=int(factor * steps))
    longer = samflow.trajectory(method, runner=cap, alpha_per_coord=list(u0), **kw)
    flows = [
        samflow.trajectory(method, runner=runner("flow"), alpha_per_coord=list(u), **kw)
        for u in (u0, np.abs(u_end))
    ]
    start, end = (
        f"{f.attrs['regime_meaning']} (stop tau {f.attrs['stop_tau']:.3g})" for f in flows
    )
    return (
        f"cap {factor:g}x: {longer.attrs['regime_meaning']}; flow: {start}; "
        f"flow from the stop: {end}"
    )


def classify(method, mu, u, L, rho, eta, u0) -> str:
    u = np.abs(u)
    a, lead = int(np.argmax(mu)), int(np.argmax(u))
    m = mu * u ** (L - 1)
    if method == "usam":
        c = 1.0 / (1.0 + np.exp(min(np.sum(mu * u**L), 700.0)))
    else:
        c = 0.0 if method == "gd" else 1.0 / np.sqrt(L * np.sum(m * m))
    x = mu * u ** (L - 2)
    F = x * (1 - rho * c * x) ** (L - 1)
    h = _h(mu, u, L, rho, c, eta)
    trend = "grow" if np.max(u) >= np.max(u0) else "shrink"
    if np.max(np.abs(h * F)) < 1e-15:
        return f"c-stall ({trend})"
    if L == 2:
        top2 = np.sort(mu)[-2:]
        if rho * c * np.min(mu) > 1:
            return f"shrink-region ({trend})"
        return f"{'region' if rho * c * top2.sum() < 1 else 'middle'} ({trend})"
    if method == "gd":
        return f"gd: {'ahead' if np.all(np.delete(x, a) < x[a]) else 'not ahead'} ({trend})"
    if method == "usam":
        ahead = "ahead" if np.all(np.delete(x, a) < x[a]) else "not ahead"
        where = "in R" if np.all(rho * c * x <= 1) else "outside R"
        return f"usam: {where}, {'major' if lead == a else 'minor'} leads, major {ahead} ({trend})"
    R = L * rho * c * x[a]
    ahead = np.all(np.delete(x, a) < x[a])
    if R >= 1:
        return f"{'a-held-back' if lead != a else 'd-major-leads-R>=1'} ({trend})"
    return f"{'b-shares' if ahead else 'd-not-ahead'} ({trend})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", choices=("figure", "random", "issue"), default="issue")
    parser.add_argument("--method", default="sam-l2")
    parser.add_argument("--depth", type=int, default=3)
    parser.add_argument("--cap", type=float, default=100.0)
    parser.add_argument("--follow", type=float, default=0.0, help="rerun each with this cap")
    args = parser.parse_args()
    L = args.depth
    if args.grid == "issue":
        eta, steps = 0.02, 5000
        kw = dict(mu=[1, 2, 3, 4], axes={"alpha": "0.02:5:24:log", "rho": "0.1:3:12:log"})
    else:
        eta, steps = ETA, STEPS
        kw = dict(grids(8, np.random.default_rng(0))[args.grid])
        kw["axes"] = {**kw["axes"], "depth": [L]}
        if args.method == "gd":
            kw["axes"].pop("rho", None)
    cap = int(args.cap * steps) if args.cap else None
    t0 = time.time()
    discrete = samflow.Discrete(eta=eta, steps=steps, step_cap=cap)
    ds = samflow.sweep(args.method, depth=L, runner=discrete, **kw)
    if "depth" in ds.dims:
        ds = ds.isel(depth=0)
    reg = ds["regime"].values
    names = list(ds["regime"].dims)
    mus, u0s, rhos = [], [], []
    for idx in np.argwhere(reg == 0):
        sel = {n: int(i) for n, i in zip(names, idx, strict=True)}
        point = {n: float(ds[n].values[i]) for n, i in sel.items()}
        mu = _at(ds, "mu_values", sel) if "mu_values" in ds else np.asarray(ds.attrs["mu"], float)
        u0 = _at(ds, "seed_alpha", sel) if "seed_alpha" in ds else np.full(len(mu), point["alpha"])
        mus.append(mu), u0s.append(u0), rhos.append(point.get("rho", 0.0))
    counts = collections.Counter()
    if mus:
        mu, u0 = np.array(mus), np.array(u0s)
        u = end_states(args.method, mu, u0, L, rhos, eta, cap or steps)
        for i in range(len(mu)):
            name = classify(args.method, mu[i], u[i], L, rhos[i], eta, u0[i])
            counts[name] += 1
            if args.follow:
                h = step_size(args.method, mu[i], u[i], L, rhos[i], eta)
                more = follow(args.method, mu[i], u0[i], u[i], L, rhos[i], eta, steps, args.follow)
                print(
                    f"  rho {rhos[i]:.3g}, u0 {np.array2string(u0[i], precision=3)}: {name}, "
                    f"log10 h {np.log10(h):.1f}; {more}",
                    flush=True,
                )
    print(
        f"{args.grid} {args.method} L={L} step_cap={cap}: unresolved {int((reg == 0).sum())} "
        f"of {reg.size}: {dict(sorted(counts.items()))} [{time.time() - t0:.0f} s]"
    )


if __name__ == "__main__":
    main()
