"""The unresolved share of labelled runs per (method, depth, mode), and a check of the
decided labels against independent integrations run 50-100 times longer (issue 38).

Grids: ``figure``: the figures' mu (1, 2, 3, 4), alpha over 1e-4..10 and rho over
0.02..5 (log), uniform starts; ``random``: random mu in d = 4 (one point), random
non-uniform starts (the ``seed`` axis) and a few rho. Settings: flows as the figures run
them (``tau_max`` 200, ``tau_cap`` 1e4 times it, samflow.figures FLOW_SETTINGS); discrete
runs at the figures' default step and length (eta 0.01, 2,000 steps; no step cap, or with
``--step-cap`` the figures' 1,000 times the steps).

The check: for a sample of decided runs, an independent float64 integration of the
balanced system (flows: SciPy DOP853, rtol 1e-11, in log space, to 100 times the
engine's horizon, and from a blow-up guard (L >= 3, log beta_max 80) on in v_j =
u_j^-(L-2) until the first v_j reaches 0, the blow-up itself, so that a race still on at
the guard is followed to its end (unchecked where the two largest rates there agree to
1e-6, below the integration's error); discrete: a NumPy loop of the balanced step map,
50 times the engine's steps, labelled collapse where its largest |beta_j| stays below
its start over the second half and grows by under 1% from the second quarter to the
last) gives a leader path and so a label (docs/theory/regimes.md#definitions), linf-SAM
flows also collapse (every u_j at 0) and finite (odd L, every u_j at rho), linf-SAM's
step also collapse (even L, every |u_j| at the end in the band eta mu_j rho^(L-1) / 2
where the step hovers) and finite (odd L, every u_j at the end at most rho and risen
from its start); a label contradicts when it differs. A reference run that itself ends
undecided (still moving at its horizon) counts as unchecked, not as agreeing; so does a
discrete one that stalled (no step moved it over its second half: its steps fell below
float64 rounding, as linf-SAM's certified collapses at large rho do, where h ~ e^(-rho^2
sum mu)).

    PYTHONPATH=. python experiments/unresolved_shares.py --quick    # ~15 min on 2 cores
    PYTHONPATH=. python experiments/unresolved_shares.py --out shares.json  # fuller grids
    PYTHONPATH=. python experiments/unresolved_shares.py --quick --methods sam-linf \
        --modes discrete --step-cap    # discrete runs to their fate, as the figures run them
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from scipy.integrate import solve_ivp

import samflow

FLOW_SETTINGS = {"rtol": 1e-6, "atol": 1e-9, "max_steps": 20_000}  # samflow.figures._engine
TAU_MAX, ETA, STEPS = 200.0, 0.01, 2000
# The figures' run-to-fate caps (samflow/figures/_engine.py reads the same defaults).
CAP_FACTOR = samflow.BoundarySearch().cap_factor  # flows: tau_cap = CAP_FACTOR * tau_max
STEP_CAP_FACTOR = samflow.BoundarySearch().step_cap_factor  # discrete, with --step-cap
METHODS = ("gd", "sam-l2", "usam", "sam-linf")
MEANINGS = "failed unresolved collapse sequential direct returned major_lost minor_end finite"
CODE = {name: k - 1 for k, name in enumerate(MEANINGS.split())}


def grids(n: int, rng: np.random.Generator) -> dict:
    """The two grids: sweep keyword arguments (without method, runner)."""
    mu_set = rng.uniform(0.2, 5.0, size=(max(2, n // 2), 4))
    return {
        "figure": {
            "mu": [1.0, 2.0, 3.0, 4.0],
            "axes": {"alpha": f"1e-4:10:{n}:log", "rho": f"0.02:5:{n}:log", "depth": [2, 3, 4]},
        },
        "random": {
            "mu": list(mu_set[0]),
            "mu_set": mu_set,
            "axes": {
                "mu": list(range(len(mu_set))),
                "seed": list(range(max(2, n // 2))),
                "rho": list(np.round(np.geomspace(0.1, 3.0, 3), 4)),
                "depth": [2, 3, 4],
            },
        },
    }


def runner(mode: str, step_cap: bool = False):
    """The figures' runner; ``step_cap``: discrete runs go on to their fate, up to 100
    times their steps, as the figures run them (samflow/figures/_engine.py)."""
    if mode == "flow":
        return samflow.Flow(tau_max=TAU_MAX, tau_cap=CAP_FACTOR * TAU_MAX, **FLOW_SETTINGS)
    cap = round(STEP_CAP_FACTOR * STEPS) if step_cap else None
    return samflow.Discrete(eta=ETA, steps=STEPS, step_cap=cap)


def run(method: str, mode: str, grid: dict, step_cap: bool = False):
    kwargs = dict(grid)
    axes = dict(kwargs.pop("axes"))
    if method == "gd":
        axes.pop("rho", None)
    return samflow.sweep(method, depth=2, axes=axes, runner=runner(mode, step_cap), **kwargs)


# --- the independent reference -------------------------------------------------------------


def _c(method: str, u: np.ndarray, mu: np.ndarray, L: int) -> float:
    """The rule's c (eps = -c m, m_j = mu_j u_j^(L-1)) at u > 0."""
    if method == "sam-l2":
        return 1.0 / np.sqrt(L * np.sum(mu**2 * u ** (2 * L - 2)))
    if method == "usam":
        return 1.0 / (1.0 + np.exp(min(np.sum(mu * u**L), 700.0)))
    return 0.0


def flow_reference(method, mu, u0, L, rho, tau_end):
    """Leader path and end of the balanced flow by DOP853 (rtol 1e-11), in log space for
    gd/l2/usam (ds_j/dtau = mu_j u_j^(L-2) (1 - r_j)^(L-1)) and in u for linf
    (du_j/dtau = mu_j (u_j - rho)^(L-1), 0 absorbing at even L). Returns (path, how):
    how is 'blowup', 'collapse', 'finite' or 'open' (still moving at tau_end)."""
    top0 = L * np.log(np.max(u0))

    if method == "sam-linf":

        def field(t, u):
            grows = (u > 0) | (L % 2 == 1)
            return np.where(grows, mu * (u - rho) ** (L - 1), 0.0)

        def log_max(y):
            return L * np.log(max(np.max(np.abs(y)), 1e-300))

        y0 = np.array(u0, float)
    else:

        def field(t, s):
            u = np.exp(s)
            x = mu * u ** (L - 2)
            r = rho * _c(method, u, mu, L) * x if method != "gd" else 0.0 * x
            return x * (1 - r) ** (L - 1)

        def log_max(y):
            return L * np.max(y)

        y0 = np.log(np.asarray(u0, float))

    def high(t, y):
        return 80.0 - log_max(y)  # nearer a blow-up, the steps fall below float64 spacing

    def low(t, y):
        return log_max(y) - (top0 - 60.0)

    high.terminal = low.terminal = True
    if L == 2:  # no finite-time blow-up at L = 2: growth is exponential, run to tau_end
        high = None
    sol = solve_ivp(
        field,
        (0.0, tau_end),
        y0,
        method="DOP853",
        rtol=1e-11,
        atol=1e-13,
        events=(high, low) if high else (lambda t, y: 1.0, low),
    )
    ys = sol.y.T
    lead = np.argmax(np.abs(ys) if method == "sam-linf" else ys, axis=1) + 1
    start = 1 if len(set(np.round(np.abs(y0), 14))) == 1 else 0  # a tied start has no leader
    path = [int(k) for i, k in enumerate(lead[start:]) if i == 0 or k != lead[start:][i - 1]]
    if sol.status == 1 and len(sol.t_events[0]):
        how = "blowup"
    elif sol.status == -1 and log_max(ys[-1]) > log_max(y0) + 20:
        how = "blowup"  # the steps fell below float64 spacing on the way up
    elif sol.status == 1:
        how = "collapse"
    elif method == "sam-linf" and np.max(np.abs(ys[-1])) < 1e-6 * np.max(u0):
        how = "collapse"  # every u_j reached the absorbing 0 (even L) or its sliding
    elif method == "sam-linf" and L % 2 == 1 and np.all(np.abs(ys[-1] - rho) < 1e-2 * rho):
        how = "finite"  # odd L: every u_j crept up to rho from below
    else:
        how = "finite" if np.max(np.abs(field(0, ys[-1]))) < 1e-10 else "open"
    if how == "blowup" and method != "sam-linf":  # the race goes on: follow it to the end
        log_x = np.sort(np.log(mu) + (L - 2) * ys[-1])
        if log_x[-1] - log_x[-2] < 1e-6:
            # The two largest rates agree closer than the integration's error after a
            # long run (rtol 1e-11 per step): the race's end is not resolved here.
            return path, "unresolved"
        for k in _race_to_blowup(method, mu, ys[-1], L, rho):
            if k != path[-1]:
                path.append(k)
    return path, how


def _race_to_blowup(method, mu, s, L, rho):
    """Leaders from log-state ``s`` (at the guard, u ~ e^20) to the blow-up itself, in
    v_j = u_j^-(L-2) (dv_j/dtau = -(L-2) mu_j (1 - r_j)^(L-1)): the blow-up is the first
    v_j to reach 0, which float64 resolves where u_j^L overflows long before; leader
    argmin v_j."""
    v0 = np.exp(-(L - 2) * np.asarray(s, float))

    def field(t, v):
        u = np.maximum(v, 1e-300) ** (-1.0 / (L - 2))
        x = mu * u ** (L - 2)
        with np.errstate(over="ignore", invalid="ignore"):
            r = rho * _c(method, u, mu, L) * x  # _c is 0 for GD
        r = np.nan_to_num(r, nan=0.0)
        return -(L - 2) * mu * (1 - r) ** (L - 1)

    def hits_zero(t, v):
        return np.min(v)

    hits_zero.terminal = True
    end = 1e3 * np.max(v0 / ((L - 2) * mu))
    sol = solve_ivp(field, (0.0, end), v0, method="DOP853", rtol=1e-12, atol=1e-300,
                    events=hits_zero)  # fmt: skip
    lead = np.argmin(sol.y.T, axis=1) + 1
    return [int(k) for i, k in enumerate(lead) if i == 0 or k != lead[i - 1]]


def discrete_reference(method, mu, u0, L, rho, eta, steps):
    """Leader path (read every step) of the balanced step map, float64:
    u_j' = u_j + eta |l'(z~)| mu_j w~_j^(L-1), w~ = u + rho eps(g), z~ = sum mu_j w~_j^L."""
    u = np.array(u0, float)
    path, how, prev = [], "open", None
    tied = len(set(np.round(np.abs(u), 14))) == 1
    top0 = L * np.log(np.max(np.abs(u)))
    quarter = [-np.inf] * 4  # largest log max_j |beta_j| per quarter of the run
    half = None
    for i in range(steps):
        if i == steps // 2:
            half = u.copy()
        m = mu * u ** (L - 1)
        lp = 1.0 / (1.0 + np.exp(min(np.sum(mu * u**L), 700.0)))  # |l'(z)|
        if method == "gd":
            w = u
        elif method == "sam-l2":
            norm = np.sqrt(L * np.sum(m * m))
            w = u - rho * m / norm if norm > 0 else u
        elif method == "usam":
            w = u - rho * lp * m
        else:
            w = u - rho * np.sign(m)
        zt = np.sum(mu * w**L)
        u = u + eta / (1.0 + np.exp(min(zt, 700.0))) * mu * w ** (L - 1)
        a = np.abs(u)
        if not np.all(np.isfinite(a)) or L * np.log(max(np.max(a), 1e-300)) > 600:
            how = "blowup"
            break
        k = int(np.argmax(a)) + 1
        if not (tied and len(set(np.round(a, 14))) == 1) and k != prev:
            path.append(k)
            prev = k
        level = L * np.log(max(np.max(a), 1e-300))
        if i >= steps // 4:
            quarter[min(3, 4 * i // steps)] = max(quarter[min(3, 4 * i // steps)], level)
    if how == "open" and half is not None and np.array_equal(u, half):
        # Stalled: no step moved u over the second half (eta |l'(z~)| below its rounding
        # unit), so the float run says nothing of the limit: unchecked.
        return path, "stalled"
    if how == "open" and max(quarter[2:]) < top0 and quarter[3] <= quarter[1] + 0.01:
        how = "collapse"  # hovering near 0 below the start, not growing (1%)
    if method == "sam-linf" and how == "open":
        # linf-SAM's step hovers near 0 in a band set by the step, which a start below it
        # rises into; every u_j inside its band at the end is a collapse, and at odd L
        # every u_j at most rho, risen since the start, a finite limit (u -> rho).
        if L % 2 == 0 and np.all(np.abs(u) <= eta * mu * rho ** (L - 1) / 2):
            how = "collapse"
        elif L % 2 == 1 and np.all((u <= rho) & (u >= np.asarray(u0))):
            how = "finite"
    return path, how


def path_label(path, major) -> str:
    if not path:
        return "unresolved"
    if path[-1] == major:
        if len(path) == 1:
            return "direct"
        return "sequential" if path.count(major) == 1 else "returned"
    return "major_lost" if major in path else "minor_end"


def _at(ds, name, sel):
    var = ds[name]
    return np.asarray(var.isel({k: v for k, v in sel.items() if k in var.dims}).values, float)


def check(ds, method, mode, rng, n_check, L):
    """(checked, contradicted, unchecked, examples) over a sample of decided runs."""
    regime = ds["regime"].values
    decided = np.argwhere(regime > 0)
    if len(decided) == 0 or n_check == 0:
        return 0, 0, 0, []
    pick = decided[rng.choice(len(decided), size=min(n_check, len(decided)), replace=False)]
    names = list(ds["regime"].dims)
    checked = contradicted = unchecked = 0
    examples = []
    for idx in pick:
        sel = {n: int(i) for n, i in zip(names, idx, strict=True)}
        point = {n: ds[n].values[i] for n, i in sel.items()}
        rho = float(point.get("rho", 0.0))
        mu = _at(ds, "mu_values", sel) if "mu_values" in ds else np.asarray(ds.attrs["mu"], float)
        u0 = _at(ds, "seed_alpha", sel) if "seed_alpha" in ds else np.full(len(mu), point["alpha"])
        major = int(np.argmax(mu)) + 1
        label = MEANINGS.split()[regime[tuple(idx)] + 1]
        if mode == "flow":
            # 100 times the longer of the engine's stop and the figures' cap: a label the
            # engine proved at its horizon (a return) may be seen only far beyond it.
            horizon = max(float(ds["stop_tau"].values[tuple(idx)]), CAP_FACTOR * TAU_MAX)
            path, how = flow_reference(method, mu, u0, L, rho, 100.0 * horizon)
        else:
            path, how = discrete_reference(method, mu, u0, L, rho, ETA, 50 * STEPS)
        if how == "collapse":
            ref = "collapse"
        elif how == "finite":
            ref = "finite"
        elif how == "blowup":
            ref = path_label(path, major)
        elif how in ("stalled", "unresolved"):
            ref = None
        elif L == 2 and path and path[-1] == major:
            # Still moving at L = 2: every rate tends to mu_j as c decays, so the major's
            # lead at the end of a run this long is not handed on again.
            ref = path_label(path, major)
        else:  # still moving at L >= 3: no label (the major may still hand the lead on)
            ref = None
        if ref is None:
            unchecked += 1
            continue
        checked += 1
        if ref != label:
            contradicted += 1
            examples.append({**{k: float(v) for k, v in point.items()}, "engine": label,
                             "reference": ref, "path": path[:12], "how": how})  # fmt: skip
    return checked, contradicted, unchecked, examples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small grids, small check sample")
    parser.add_argument("--n", type=int, default=None, help="points per grid axis")
    parser.add_argument("--check", type=int, default=None, help="decided runs checked per row")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--modes", default="flow,discrete")
    parser.add_argument("--out", default=None, help="write the table as JSON here")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--step-cap", action="store_true", help="discrete runs go on to 100x their steps"
    )
    args = parser.parse_args()
    n = args.n or (8 if args.quick else 16)
    n_check = args.check if args.check is not None else (4 if args.quick else 20)
    rng = np.random.default_rng(args.seed)
    rows = []
    for grid_name, grid in grids(n, np.random.default_rng(args.seed)).items():
        for method in args.methods.split(","):
            for mode in args.modes.split(","):
                t0 = time.time()
                ds = run(method, mode, grid, args.step_cap)

                for L in (2, 3, 4):
                    part = ds.sel(depth=L)
                    reg = part["regime"].values
                    ch = check(part, method, mode, rng, n_check, L)
                    row = {
                        "grid": grid_name, "method": method, "mode": mode, "depth": L,
                        "runs": int(reg.size), "unresolved": int(np.sum(reg == 0)),
                        "failed": int(np.sum(reg < 0)),
                        "share": float(np.mean(reg == 0)),
                        "checked": ch[0], "contradicted": ch[1], "unchecked": ch[2],
                        "examples": ch[3][:3],
                    }  # fmt: skip
                    rows.append(row)
                    print(
                        f"{grid_name:7s} {method:8s} {mode:8s} L={L} runs {row['runs']:5d} "
                        f"unresolved {row['unresolved']:5d} ({100 * row['share']:5.1f}%) "
                        f"failed {row['failed']:3d} checked {ch[0]:3d} contradicted {ch[1]} "
                        f"unchecked {ch[2]}  [{time.time() - t0:.0f} s]",
                        flush=True,
                    )
                    for ex in ch[3][:3]:
                        print("   contradicted:", ex, flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
