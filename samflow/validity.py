"""Where the rescaled flow stops describing discrete SAM: a validity map over (eta, alpha).

For one setting (method, depth, mu, rho) :func:`validity_map` runs the flow to its fate
at every alpha (one vmapped call) and the discrete runs over the grid (eta, alpha) (one
vmapped call, a record every step), then asks of every discrete run whether it agrees
with the flow on (docs/theory/validity.md#flow-validity):

- ``regime``: the label of the limit (docs/theory/regimes.md#labels-of-the-limit);
- ``path``: the leader path;
- ``handoffs``: the hand-off times in rescaled time, within ``handoff_rtol`` of the
  flow's plus the tau of the step the discrete hand-off was found after (the leader is
  checked after every step, so the crossing lies inside that step);
- ``limit``: ``limit_coord``.

Each is coded 1 (agrees), 0 (disagrees) or -1 (undecided: the discrete run ended before
its fate, or before the flow's path was complete). It also detects what only the
discrete map does (:func:`discrete_behaviour`: period-2 oscillation, catapults,
divergence) and reads the top Hessian eigenvalue along each run against the edges of
stability (:func:`edge_indices`). Everything is computed from the public Datasets of
:func:`samflow.sweep`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import xarray as xr

from samflow import inputs
from samflow._boundary import BoundarySearch
from samflow.errors import InputError
from samflow.runners import MAX_STEPS, default
from samflow.sweeps.spec import SweepSpec

CAP_FACTOR = default(BoundarySearch, "cap_factor")
"""The flow runs to its fate up to this many times its horizon (``Flow.tau_cap``): the
boundary search's own factor, so both label a run alike."""

STEP_CAP_FACTOR = 100.0
"""A discrete run goes on to its fate up to this many times its steps
(``Discrete.step_cap``), less than the boundary search's factor. The map's runs that
this leaves undecided are l2-SAM's at L = 2 and large eta, which no certificate of the
map covers: with 10^4 times the steps the figure took twice as long (153 s against
76 s) and not one label changed."""

CRITERIA = ("regime", "path", "handoffs", "limit")
AGREES, DISAGREES, UNDECIDED = 1, 0, -1
AGREEMENT_ATTRS = {
    "flag_values": np.array([UNDECIDED, DISAGREES, AGREES], dtype=np.int8),
    "flag_meanings": "undecided disagrees agrees",
}
OSCILLATION, CATAPULT, DIVERGENCE = 1, 2, 4
BEHAVIOUR_ATTRS = {
    "flag_masks": np.array([OSCILLATION, CATAPULT, DIVERGENCE], dtype=np.int8),
    "flag_meanings": "oscillation catapult divergence",
}
OSCILLATION_RUN = 8
"""Period-2 oscillation: this many consecutive steps whose increments of beta point
against each other (``<d_t, d_{t+1}> < 0``). A forward-Euler step of a smooth flow
never reverses its increment step after step: that needs a multiplier below -1/2 or a
jump across a valley, which only a finite step makes."""
CATAPULT_FACTOR = 2.0
"""Catapult: the loss rises above this many times its running minimum and later falls
back below that minimum."""
HANDOFF_RTOL = 0.1
"""Relative tolerance of a hand-off time (docs/theory/validity.md#flow-validity: the first-order
error of the iterates, 0.5 eta relative in beta, moves a hand-off by about eta / s, s the slope of
the crossing; a tenth of the hand-off time is where a timeline reads differently)."""
EDGE = 2.0
"""Each edge of stability is met where its index (``eta lambda_max`` for GD) reaches 2."""
TAU_COVER_MIN = 5.0
"""Rescaled time the smallest eta covers at least: room after the last hand-off for the
discrete run to meet its certificate (docs/theory/regimes.md#labels-of-the-limit)."""


def validity_map(
    method: str = "sam-l2",
    *,
    depth: int = 2,
    mu: Sequence[float] = (1.0, 2.0, 3.0, 4.0),
    rho: float | None = 0.1,
    alpha: Sequence[float],
    eta: Sequence[float],
    tau_cover: float | None = None,
    steps: int | None = None,
    max_steps: int = 20_000,
    tau_max: float = 50.0,
    handoff_rtol: float | None = None,
    sharpness: bool = True,
    pad_layers: int = 0,
    history: str | None = None,
) -> xr.Dataset:
    r"""Compare discrete ``method`` with its rescaled flow over the grid (eta, alpha).

    Args:
        method: ``gd``, ``sam-l2``, ``usam`` (``sam-linf`` works; its leader checks
            are noisier).
        depth, mu, rho: the setting (one point \(x = \mu\); ``rho`` None for GD).
        alpha: initialisation scales (balanced, uniform), ``[A]``.
        eta: step sizes ``[E]``; every discrete run takes the same number of steps.
        tau_cover: rescaled time the smallest eta must cover (default: 1.5 times the
            flow's last hand-off over alpha, at least ``TAU_COVER_MIN``). Steps: ``2 tau_cover /
            min(eta)`` (a step buys \(\eta \lvert l'(\tilde{z})\rvert \le \eta / 2\) of tau while
            the margin is positive), at most ``max_steps``; or ``steps`` given.
        tau_max: the flow's horizon; it runs on to its fate up to
            :attr:`samflow.BoundarySearch.cap_factor` (its default) times ``tau_max``.
        handoff_rtol: relative tolerance of hand-off times (default ``HANDOFF_RTOL``).
        sharpness: track the top Hessian eigenvalue at every step (the edges of
            stability; without it they are NaN).
        pad_layers: pad to this many layers (:func:`samflow.sweep`), so that maps at
            several depths share their compiled programs.
        history: the file's ``history`` line (default: this call).

    Returns:
        A Dataset over \((\eta, \alpha)\): ``<criterion>_agrees`` (int8, 1 / 0 / -1),
        ``n_agree`` (criteria that agree), ``discrete_behaviour`` (CF flag masks),
        ``discrete_regime``, ``discrete_limit``, ``tau_reached``, ``gd_edge_index``,
        ``sam_edge_index`` (their maxima along the run), ``sharpness_max``; over
        ``alpha``: ``flow_regime``, ``flow_limit``, ``eta_valid_<criterion>`` (the
        largest eta with agreement at it and every smaller eta of the grid; NaN if
        none), ``eta_breakdown`` (the smallest eta with a disagreement),
        ``eta_gd_edge``, ``eta_sam_edge`` (the smallest eta whose run meets the edge).

    Raises:
        InputError: any bad argument, named as given (``alpha="0.1,1"``, a complex
            ``alpha``, ``handoff_rtol="x"``, ``tau_cover=0`` or NaN, ``max_steps=0``,
            ``steps`` too many for the grid), before either sweep runs: the discrete
            sweep is checked up front at its most steps.
    """
    import samflow

    handoff_rtol = (
        HANDOFF_RTOL if handoff_rtol is None else inputs.real("handoff_rtol", handoff_rtol)
    )
    if not handoff_rtol >= 0:
        raise InputError(f"handoff_rtol must be >= 0, got {handoff_rtol}")
    alpha, eta = _grid("alpha", alpha), np.sort(_grid("eta", eta))
    max_steps = inputs.integer("max_steps", max_steps, 1, MAX_STEPS - 1)
    if tau_cover is not None:
        tau_cover = inputs.positive("tau_cover", tau_cover)
    if steps is not None:
        steps = inputs.integer("steps", steps, 1, MAX_STEPS - 1)
    tau_max = inputs.positive("tau_max", tau_max)
    inputs.check_flag("sharpness", sharpness)
    rho = None if method == "gd" else rho
    flow_runner = samflow.Flow(
        tau_max=tau_max, save=samflow.LogSpaced(1), tau_cap=CAP_FACTOR * tau_max
    )
    flow_kw = dict(depth=depth, mu=list(mu), rho=rho, pad_layers=pad_layers)
    disc_kw = dict(
        **flow_kw,
        axes={"eta": eta, "alpha": alpha},
        save_trajectories=True,
        summaries=samflow.Summaries(sharpness=sharpness),
    )
    # Every input is checked before the flow runs, the discrete sweep's too: at the steps
    # given, or those tau_cover asks for; else at the fewest the flow can ask for
    # (tau_cover >= TAU_COVER_MIN), so that no run is refused that would fit.
    SweepSpec.from_inputs(method, axes={"alpha": alpha}, runner=flow_runner, **flow_kw)
    fewest = steps or _steps(TAU_COVER_MIN if tau_cover is None else tau_cover, eta, max_steps)
    if steps or fewest == max_steps:
        given = f"{'steps' if steps else 'max_steps'} = {fewest}"
    else:
        given = f"the {fewest} steps of min(eta) = {eta[0]:g}"
    _check_discrete(method, disc_kw, float(eta[0]), fewest, given)
    flow = samflow.sweep(method, axes={"alpha": alpha}, runner=flow_runner, **flow_kw)
    if tau_cover is None:
        last = flow["handoff_tau"].max("handoff").values
        tau_cover = max(TAU_COVER_MIN, 1.5 * float(np.nanmax(last, initial=0.0)))
    if steps is None:
        steps = _steps(tau_cover, eta, max_steps)
    disc = samflow.sweep(
        method,
        runner=samflow.Discrete(
            eta=float(eta[0]), steps=steps, save=samflow.Every(1), step_cap=_cap(steps)
        ),
        **disc_kw,
    )
    out = compare(flow, disc, handoff_rtol)
    out["discrete_behaviour"] = discrete_behaviour(
        disc["beta"], disc["loss"], disc["regime"], disc["reached"]
    )
    if not sharpness:  # no eigenvalue tracked: the edges are not known
        disc["sharpness"] = xr.full_like(disc["rescaled_tau"], np.nan)
    gd_index, sam_index = edge_indices(disc, method, depth, np.asarray(mu), rho)
    out["gd_edge_index"] = gd_index
    out["sam_edge_index"] = sam_index
    out["sharpness_max"] = disc["sharpness"].where(disc["reached"] > 0).max("time")
    out["sharpness_max"].attrs.update(
        long_name="largest top Hessian eigenvalue along the discrete run"
    )
    out = out.merge(curves(out))
    out.attrs.update(edge_scores(out))
    out.attrs.update(
        history=history or f"samflow.validity.validity_map({method!r}, depth={depth}, ...)",
        method=method,
        depth=depth,
        mu=np.asarray(mu, dtype=np.float64),
        rho=np.nan if rho is None else float(rho),
        steps=steps,
        tau_cover=tau_cover,
        tau_max=tau_max,
        tau_cap=CAP_FACTOR * tau_max,
        step_cap=_cap(steps),
        handoff_rtol=handoff_rtol,
        oscillation_run=OSCILLATION_RUN,
        catapult_factor=CATAPULT_FACTOR,
    )
    return out


def _grid(name: str, values) -> np.ndarray:
    """``values`` of the axis ``name`` as a non-empty 1-D float64 array of numbers > 0;
    ``InputError`` naming the argument (a string is refused: ``"0.1,1"`` is the command
    line's form, not Python's)."""
    if isinstance(values, str):
        raise InputError(
            f"{name} must be a list of numbers, got the string {values!r} (write "
            f'{name}=[0.1, 1], not {name}="0.1,1")'
        )
    a = inputs.real_array(name, values)
    if a.ndim != 1 or not a.size:
        raise InputError(f"{name} must be a non-empty list of numbers, got shape {a.shape}")
    if np.any(a <= 0):
        raise InputError(f"{name} must hold numbers > 0, got {a.tolist()}")
    return a


def _steps(tau_cover: float, eta: np.ndarray, max_steps: int) -> int:
    """The discrete steps for ``tau_cover``: ``2 tau_cover / min(eta)``, at most
    ``max_steps`` (a step buys ``eta |l'(z~)| <= eta / 2`` of tau)."""
    return int(min(max_steps, np.ceil(2.0 * tau_cover / eta[0])))


def _cap(steps: int) -> int:
    """The discrete runs' ``step_cap``: :data:`STEP_CAP_FACTOR` times their steps."""
    return int(min(MAX_STEPS - 1, STEP_CAP_FACTOR * steps))


def _check_discrete(method, kw: dict, eta: float, steps: int, given: str) -> None:
    """The discrete sweep of ``steps`` checked as :func:`samflow.sweep` checks it, its
    size included; a size refused is blamed on ``given``, the argument that set it."""
    import samflow

    def runner(steps: int):
        return samflow.Discrete(eta=eta, steps=steps, save=samflow.Every(1))

    SweepSpec.from_inputs(method, runner=runner(1), **kw)  # all but the size
    try:
        SweepSpec.from_inputs(method, runner=runner(steps), **kw)
    except InputError as e:  # the rest passed at one step: this is the size
        raise InputError(f"{given}: too many steps for this grid: {e}") from None


def compare(flow: xr.Dataset, disc: xr.Dataset, handoff_rtol: float = HANDOFF_RTOL) -> xr.Dataset:
    r"""The four agreements of ``disc`` \((\eta, \alpha)\) with ``flow`` \((\alpha)\)."""
    flow_alpha = flow
    flow = xr.Dataset(
        {k: flow[k].expand_dims(eta=disc["eta"]).transpose("eta", "alpha", ...) for k in _FLOW}
    )
    f_regime, d_regime = flow["regime"].values, disc["regime"].values
    d_decided = (d_regime != 0) & (f_regime != 0)
    regime = np.where(d_decided, (d_regime == f_regime).astype(np.int8), UNDECIDED)
    f_limit, d_limit = flow["limit_coord"].values, disc["limit_coord"].values
    limit = np.where(d_decided, (d_limit == f_limit).astype(np.int8), UNDECIDED)

    tau = disc["rescaled_tau"].where(disc["reached"] > 0)
    tau_end = tau.max("time").values  # [E, A]
    # A discrete run cannot blow up (|l'(z)| decays like e^-z): at L >= 3 it is as decided
    # as it gets once it has passed the flow's blow-up time.
    past_blowup = tau_end >= flow["blowup_tau"].values
    complete = (d_regime != 0) | past_blowup
    path, handoffs, shift = _paths(flow, disc, tau.values, tau_end, complete, handoff_rtol)
    # Past a blow-up the regime is read from the path (docs/theory/regimes.md#definitions), the
    # limit is the leader at the end.
    regime = np.where(past_blowup & (d_regime == 0), path, regime)
    d_lead = disc["stop_leader"].values
    limit = np.where(past_blowup & (d_regime == 0), (d_lead == f_limit).astype(np.int8), limit)

    dims = disc["regime"].dims
    out = xr.Dataset(coords={k: disc.coords[k] for k in dims})
    for name, value in zip(CRITERIA, (regime, path, handoffs, limit), strict=True):
        out[f"{name}_agrees"] = (
            dims,
            value.astype(np.int8),
            {
                "long_name": f"discrete run agrees with the flow on its {name}",
                **AGREEMENT_ATTRS,
            },
        )
    out["n_agree"] = (
        dims,
        sum((out[f"{c}_agrees"].values == AGREES) for c in CRITERIA).astype(np.int8),
        {"long_name": "number of criteria (regime, path, handoffs, limit) that agree"},
    )
    out["discrete_regime"] = disc["regime"]
    out["discrete_limit"] = disc["limit_coord"]
    out["flow_regime"] = flow_alpha["regime"]
    out["flow_limit"] = flow_alpha["limit_coord"]
    out["tau_reached"] = (dims, tau_end, {"long_name": "rescaled time the discrete run reached"})
    out["handoff_shift"] = (
        dims,
        shift,
        {"long_name": "largest |discrete - flow| hand-off time over the shared hand-offs"},
    )
    return out


_FLOW = ("regime", "limit_coord", "leader_path", "n_leaders", "handoff_tau", "blowup_tau")


def _paths(flow, disc, tau, tau_end, complete, rtol):
    """Path and hand-off agreement ``[E, A]`` (int8 codes), point by point, and the
    largest shift of a hand-off time in tau over the hand-offs the paths share."""
    eta = disc["eta"].values
    f_path, d_path = flow["leader_path"].values, disc["leader_path"].values
    f_n, d_n = flow["n_leaders"].values, disc["n_leaders"].values
    f_tau, d_tau = flow["handoff_tau"].values, disc["handoff_tau"].values
    d_step = disc["handoff_step"].values
    # Below the collapse scale the iterates hover at 0 and the leader is noise: the
    # discrete path is read up to there, as the flow's ends at its collapse event.
    l1 = disc["l1_norm"].where(disc["reached"] > 0).values
    small = l1 < disc.attrs["collapse_factor"] * l1[..., :1]
    collapsed_at = np.where(small.any(-1), disc["step"].values[small.argmax(-1)], np.inf)
    width = f_path.shape[-1]
    path = np.full(f_n.shape, UNDECIDED, np.int8)
    hand = np.full(f_n.shape, UNDECIDED, np.int8)
    shift = np.full(f_n.shape, np.nan)
    for idx in np.ndindex(f_n.shape):
        nf, nd = int(f_n[idx]), int(d_n[idx])
        if nd <= width:
            nd = 1 + int(np.sum(d_step[idx][1:nd] < collapsed_at[idx]))
        shown = min(nf, nd, width)
        same = np.array_equal(f_path[idx][:shown], d_path[idx][:shown])
        # Flow hand-offs the discrete run had time to make (with the tolerance).
        due = 1 + int(np.sum(f_tau[idx][1 : min(nf, width)] * (1 + rtol) < tau_end[idx]))
        if d_path[idx][0] == 0:  # no leader seen: beta did not move (|l'| underflowed)
            continue
        if not same or nd > nf or nd < min(due, nf):
            path[idx] = DISAGREES
        elif nd == nf and (complete[idx] or due >= nf):
            path[idx] = AGREES
        if path[idx] == DISAGREES:
            hand[idx] = DISAGREES
            continue
        k = np.arange(1, shown)
        s = d_step[idx][k]
        # The leader is checked after every step: the crossing lies inside step s, whose
        # tau increment is the most the hand-off's tau can be late by. Past the records
        # (a run taken to its fate) the increment is bounded by eta |l'| <= eta.
        recorded = s < tau[idx].shape[0]
        at = np.minimum(s, tau[idx].shape[0] - 1)
        late = np.where(recorded, tau[idx][at] - tau[idx][np.maximum(at - 1, 0)], eta[idx[0]])
        moved = np.abs(d_tau[idx][k] - f_tau[idx][k])
        shift[idx] = moved.max() if k.size else np.nan
        hand[idx] = DISAGREES if not (moved <= rtol * f_tau[idx][k] + late).all() else path[idx]
    return path, hand, shift


def discrete_behaviour(
    beta: xr.DataArray,
    loss: xr.DataArray,
    regime: xr.DataArray | None = None,
    reached: xr.DataArray | None = None,
) -> xr.DataArray:
    """CF flag masks of what only the discrete map does, per run
    (docs/theory/validity.md#flow-validity).

    Args:
        beta: ``[..., time, coord]``, a record every step.
        loss: ``[..., time]``.
        regime: ``[...]`` (-1: failed, a NaN or overflow); None: not classified.
        reached: ``[..., time]``, records inside the run; None: every record.

    Bits: 1 oscillation (``OSCILLATION_RUN`` consecutive reversed increments of beta),
    2 catapult (the loss above ``CATAPULT_FACTOR`` times its running minimum, then back
    below it), 4 divergence (failed, or a non-finite record).
    """
    ok = np.ones(loss.shape, bool) if reached is None else (reached > 0).values
    failed = False if regime is None else regime.values == -1
    dims = loss.dims[:-1]
    b = np.where(ok[..., None], beta.values, np.nan)
    step = np.diff(b, axis=-2)
    reversed_ = np.einsum("...tc,...tc->...t", step[..., 1:, :], step[..., :-1, :]) < 0
    oscillation = _longest_run(reversed_) >= OSCILLATION_RUN
    lo = np.where(ok, loss.values, np.nan)
    floor = np.fmin.accumulate(np.where(np.isfinite(lo), lo, np.inf), axis=-1)
    spike = lo[..., 1:] > CATAPULT_FACTOR * floor[..., :-1]
    first = np.where(spike.any(-1), spike.argmax(-1), lo.shape[-1])
    t = np.arange(lo.shape[-1] - 1)
    level = np.take_along_axis(floor[..., :-1], np.minimum(first, t[-1])[..., None], -1)
    back = (t >= first[..., None]) & (lo[..., 1:] < level)
    catapult = spike.any(-1) & back.any(-1)
    finite = np.isfinite(np.where(ok[..., None], beta.values, 0.0)).all((-1, -2))
    divergence = failed | ~finite
    code = OSCILLATION * oscillation + CATAPULT * catapult + DIVERGENCE * divergence
    return xr.DataArray(
        code.astype(np.int8),
        dims=dims,
        coords={k: v for k, v in loss.coords.items() if set(v.dims) <= set(dims)},
        attrs={"long_name": "what only the discrete map does", **BEHAVIOUR_ATTRS},
    )


def _longest_run(flags: np.ndarray) -> np.ndarray:
    """Length of the longest run of True along the last axis ``[..., T] -> [...]``."""
    t = np.arange(flags.shape[-1])
    last_false = np.maximum.accumulate(np.where(flags, -1, t), axis=-1)
    return np.max(np.where(flags, t - last_false, 0), axis=-1, initial=0)


def gradient_norm(beta: np.ndarray, mu: np.ndarray, depth: int) -> np.ndarray:
    """``||grad Loss||_2`` ``[...]`` of a balanced state from its beta ``[..., d]``.

    Every layer has ``|u_j| = |beta_j|^(1/L)``, so (docs/theory/setting.md#setting,
    docs/theory/flows.md#log-space-form) ``||g|| = |l'(z)| sqrt(L sum_j mu_j^2 |beta_j|^(2 (L - 1)
    / L))``, ``z = <mu, beta>``.
    """
    z = beta @ mu
    m2 = depth * np.sum(mu**2 * np.abs(beta) ** (2.0 * (depth - 1) / depth), axis=-1)
    return np.sqrt(m2) * np.exp(-np.logaddexp(0.0, z))


def edge_indices(disc: xr.Dataset, method: str, depth: int, mu: np.ndarray, rho):
    """The largest index of GD's and of the method's edge of stability along each run.

    GD: ``eta lambda``; USAM: ``eta lambda (1 + rho lambda)``; l2-SAM: ``eta lambda
    (1 + rho lambda / ||g||)`` (docs/theory/validity.md#flow-validity); an edge is met where its
    index reaches 2. ``lambda`` is the top Hessian eigenvalue at each record.
    """
    lam = disc["sharpness"].where(disc["reached"] > 0)
    eta = disc["eta"]
    gd = (eta * lam).max("time")
    if method == "usam":
        sam = eta * lam * (1 + rho * lam)
    elif method in ("sam-l2", "sam-linf"):
        g = xr.apply_ufunc(
            gradient_norm,
            disc["beta"],
            kwargs={"mu": mu, "depth": depth},
            input_core_dims=[["coord"]],
        )
        sam = eta * lam * (1 + rho * lam / g)
    else:
        sam = eta * lam
    sam = sam.max("time")
    gd.attrs.update(long_name="largest eta lambda_max along the run (GD's edge at 2)")
    sam.attrs.update(long_name=f"largest {method} edge index along the run (its edge at 2)")
    return gd, sam


def curves(out: xr.Dataset) -> xr.Dataset:
    """Per alpha: the largest valid eta of each criterion, the breakdown, the edges."""
    eta = out["eta"].values
    res = xr.Dataset()

    def largest_valid(ok):  # ok [E, A]: agreement at this and every smaller eta
        chain = np.logical_and.accumulate(ok, axis=0)
        last = np.where(chain.any(0), chain.sum(0) - 1, -1)
        return np.where(last >= 0, eta[np.maximum(last, 0)], np.nan)

    def smallest(flag):
        return np.where(flag.any(0), eta[flag.argmax(0)], np.nan)

    for c in CRITERIA:
        res[f"eta_valid_{c}"] = (
            "alpha",
            largest_valid(out[f"{c}_agrees"].values == AGREES),
            {"long_name": f"largest eta with {c} agreement at it and every smaller eta"},
        )
    broken = np.any([out[f"{c}_agrees"].values == DISAGREES for c in CRITERIA], axis=0)
    res["eta_breakdown"] = (
        "alpha",
        smallest(broken),
        {"long_name": "smallest eta at which some criterion disagrees"},
    )
    for name in ("gd", "sam"):
        met = out[f"{name}_edge_index"].values >= EDGE
        res[f"eta_{name}_edge"] = (
            "alpha",
            smallest(met),
            {"long_name": f"smallest eta whose run meets the {name} edge of stability"},
        )
    return res.assign_coords(alpha=out["alpha"])


def edge_scores(out: xr.Dataset) -> dict:
    """How well each edge of stability predicts the breakdown, as file attributes.

    Over the alphas where both are met: the median of ``|log10(eta_edge /
    eta_breakdown)|`` (0: the same grid eta), and how many alphas the edge is met without
    a breakdown on the grid (``false_alarms``) or missed (``misses``).
    """
    scores = {}
    breakdown = out["eta_breakdown"].values
    for name in ("gd", "sam"):
        edge = out[f"eta_{name}_edge"].values
        both = np.isfinite(edge) & np.isfinite(breakdown)
        error = np.abs(np.log10(edge[both] / breakdown[both]))
        scores[f"{name}_edge_log10_error_median"] = (
            float(np.median(error)) if both.any() else np.nan
        )
        scores[f"{name}_edge_false_alarms"] = int(
            np.sum(np.isfinite(edge) & ~np.isfinite(breakdown))
        )
        scores[f"{name}_edge_misses"] = int(np.sum(~np.isfinite(edge) & np.isfinite(breakdown)))
    return scores
