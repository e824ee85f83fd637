"""The public entry points: one trajectory, a sweep over a grid.

Both take what varies as objects, in the style of diffrax: the method (a name or a
:class:`samflow.rules.PerturbationRule`), the problem (``mu`` for one point or
``data = (X, y)``), the initialisation, and a runner (:class:`samflow.Discrete` or
:class:`samflow.Flow`). Both describe their run with
:meth:`samflow.sweeps.spec.SweepSpec.from_inputs`, which validates every input once,
raising :class:`samflow.InputError` (a ``ValueError``) that names the bad value, before
JAX is imported or anything compiled; the command line turns it into its one-line exit
2. Both return labelled xarray Datasets, the same the command line writes for the same
settings.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from samflow import inputs, preload
from samflow._removed import refuse
from samflow.classification import Classification
from samflow.errors import InputError
from samflow.init import balanced_start, check_alpha, from_array
from samflow.runners import Discrete, Flow
from samflow.summaries import Summaries
from samflow.sweeps.spec import SweepSpec

if TYPE_CHECKING:  # JAX and xarray are imported once the inputs are checked
    import xarray as xr

    from samflow.rules import PerturbationRule


def initial_theta(
    d: int,
    depth: int,
    alpha: float | None = None,
    alpha_per_coord: Sequence[float] | None = None,
    theta0: np.ndarray | None = None,
) -> np.ndarray:
    """``theta0`` ``[L, d]`` from exactly one of ``alpha``, ``alpha_per_coord``, ``theta0``.

    ``alpha`` (or ``alpha_per_coord``) sets every layer to alpha; the parametrisation
    then makes its start of it (:meth:`samflow.Parametrization.start`: ``uv`` sets
    ``v = 0``, docs/theory/models.md#parametrisations-and-losses)."""
    given = [
        n
        for n, v in (("alpha", alpha), ("alpha_per_coord", alpha_per_coord), ("theta0", theta0))
        if v is not None
    ]
    if len(given) != 1:
        raise InputError(
            "give exactly one initialisation: alpha, alpha_per_coord or theta0"
            + (f" (got {', '.join(given)})" if given else "")
        )
    if alpha is not None:
        a = check_alpha(alpha)
        if np.ndim(alpha) != 0:
            raise InputError(f"alpha must be one number, got {a.tolist()}; use alpha_per_coord")
        return balanced_start(a, d, depth)
    if alpha_per_coord is not None:
        a = check_alpha(alpha_per_coord, "alpha-per-coord")
        if a.size != d:
            raise InputError(f"alpha-per-coord has {a.size} entries but d = {d}")
        return balanced_start(a, d, depth)
    theta0 = inputs.real_array("theta0", theta0)
    if theta0.ndim != 2 or theta0.shape[0] != depth:
        raise InputError(f"theta0 must have shape (L={depth}, d={d}), got {theta0.shape}")
    return from_array(theta0, d)


@refuse("collapse_factor", "sharpness", "active_threshold")
def trajectory(
    method: str | PerturbationRule,
    *,
    depth: int,
    mu: Sequence[float] | None = None,
    data: tuple[np.ndarray, np.ndarray] | None = None,
    alpha: float | None = None,
    alpha_per_coord: Sequence[float] | None = None,
    theta0: np.ndarray | None = None,
    rho: float | None = None,
    runner: Discrete | Flow,
    dtype: str = "float64",
    save_theta: bool = False,
    classification: Classification = Classification(),
    history: str | None = None,
    loss: str = "logistic",
    parametrization: str = "product",
    beta_star: np.ndarray | None = None,
    summaries: Summaries | bool | None = None,
    seed: int | None = None,
    yes: bool = False,
    progress: bool = False,
) -> xr.Dataset:
    r"""Run one trajectory and classify it.

    Args:
        method: a name of :data:`samflow.METHODS` or a :class:`samflow.PerturbationRule`.
        depth: layers L (1..256; ``u2-v2`` and ``uv`` have 2).
        mu: one data point ``[d]`` (entries > 0, \(y = +1\)), or None with ``data``.
        data: ``(X [n, d], y [n])``: labels in {-1, +1} for a margin loss, real targets
            for the squared loss; or None with ``mu``.
        alpha: the start: every layer alpha (``uv``: u = alpha, v = 0).
        alpha_per_coord: instead, per-coordinate scales ``[d]``.
        theta0: instead, the start ``[L, d]`` itself.
        rho: SAM radius (required for SAM; none for gd).
        runner: :class:`samflow.Discrete` or :class:`samflow.Flow`.
        dtype: ``float64`` or ``float32``.
        save_theta: also keep ``theta(time, layer, coord)``.
        classification: the settings of regime classification
            (:class:`samflow.Classification`).
        history: the file's ``history`` line (default: this call).
        loss: ``logistic``, ``exponential``, ``squared`` (real \(y\)) or a
            :class:`samflow.Loss` (docs/theory/models.md#parametrisations-and-losses).
        parametrization: ``product``, ``u2-v2``, ``uv`` or a
            :class:`samflow.Parametrization`.
        beta_star: the ground truth ``[d]``: adds ``test_error(time)`` =
            \(\lVert \beta - \beta^*\rVert_2^2\).
        summaries: the summaries taken at every record (:class:`samflow.Summaries`:
            ``l1_norm``, ``l2_norm``, ``n_active(time)``; with ``sharpness`` the
            Hessian's top eigenvalue ``sharpness(time)`` and ``hessian_trace(time)``);
            True: the default ones; False: none; None (default): on unless the model is
            the paper's and no ``beta_star`` is given.
        seed: keys the stochastic steps of a runner with ``batch``, ``m`` or
            ``label_noise`` (default 0; docs/theory/stochastic.md#stochastic-steps).
        yes: run a discrete run past a day all the same (refused without it: past a
            day anywhere, :func:`samflow.inputs.check_duration`, or on this machine,
            :mod:`samflow.estimate`).
        progress: on a terminal, a discrete run estimated past a few seconds shows a
            bar with its estimated end, a flow past a few seconds its elapsed time
            (:func:`samflow.estimate.trajectory_clock`).

    Returns:
        A Dataset with dims ``time``, ``coord`` (1..d), ``layer`` (1..L):
        ``beta(time, coord)``, ``tau(time)`` (rescaled time; ``eta * step`` for n > 1
        points), ``loss(time)``, ``dominant(time)``, ``theta_final(layer, coord)``,
        ``step(time)`` (discrete), ``theta(time, layer, coord)`` (``save_theta``), the
        scalars ``regime`` (a label of the limit, ``unresolved`` where the run's fate is
        not decided: docs/theory/regimes.md#labels-of-the-limit), ``unresolved_reason``,
        ``stop_leader`` and ``limit_coord`` (none of these three where the model does
        not classify: not the product network with a margin loss), the summaries;
        ``tau`` (and ``step``) are coordinates along ``time``; attributes: the settings,
        the regime's meaning, ``first_amplified``, and for flows where and why the solve
        ended.

    Raises:
        InputError: a bad input, named, before JAX is imported; among them a ``seed``
            given to a deterministic run (it would change nothing).

    Examples:
        One trajectory of the rescaled l2-SAM flow at depth 2, classified (the README's
        example):

        >>> import samflow
        >>> t = samflow.trajectory("sam-l2", depth=2, mu=[1, 2, 3, 4], alpha=0.5, rho=1.0,
        ...                        runner=samflow.Flow(tau_max=50.0))
        >>> t.attrs["regime_meaning"]
        'sequential'
        >>> t.beta.dims, t.beta.shape
        (('time', 'coord'), (200, 4))
        >>> samflow.FLAG_MEANINGS.split()[int(t.regime) + 1]  # the code, read by its flag
        'sequential'
    """
    X, y = inputs.check_problem(mu, data, loss)
    given_theta0 = theta0
    theta0 = initial_theta(X.shape[1], inputs.check_depth(depth), alpha, alpha_per_coord, theta0)
    # Where it started, for the attributes and the history line.
    start = {
        "alpha": None if alpha is None else float(alpha),
        "alpha_per_coord": None
        if alpha_per_coord is None
        else np.asarray(alpha_per_coord, dtype=np.float64),
        "theta0_abs_range": None
        if given_theta0 is None
        else np.array([np.abs(theta0).min(), np.abs(theta0).max()]),
    }
    inputs.check_flag("save_theta", save_theta)
    inputs.check_flag("progress", progress)
    spec = SweepSpec.from_inputs(
        method,
        depth=depth,
        mu=mu,
        data=data,
        rho=rho,
        runner=runner,
        dtype=dtype,
        classification=classification,
        save_trajectories=True,  # a trajectory keeps beta; and theta, checked next
        loss=loss,
        parametrization=parametrization,
        beta_star=beta_star,
        summaries=summaries,
        seed=seed,
    )
    spec.check_size(keep_theta=True)
    _check_duration(spec, yes)
    if given_theta0 is None:  # every input is checked: the model (JAX) may load
        theta0 = spec.model.parametrization.start(theta0)
    return _run_trajectory(spec, X, y, theta0, save_theta, history, mu, start, progress)


def _check_duration(spec: SweepSpec, yes: bool, chunk: int = 1) -> None:
    """A discrete run of ``spec`` (in chunks of ``chunk`` points) past a day refused
    unless ``yes``: past a day on any machine (:func:`samflow.inputs.check_duration`,
    nothing measured), else past a day on this one (:mod:`samflow.estimate`: measured
    once per machine, only for a run that the slowest machine would not finish in a
    day). A flow's solver steps are capped by its ``max_steps``."""
    inputs.check_flag("yes", yes)
    if spec.mode != "discrete":
        return
    points, d, steps = spec.size, spec.d, spec.runner.steps
    inputs.check_duration(points, d, steps, yes)
    if yes:
        return
    from samflow import estimate

    layers = spec.n_layers
    if estimate.seconds(points, d, steps, chunk, estimate.SLOWEST, layers) <= estimate.DAY_SECONDS:
        return
    rates = estimate.rates()
    seconds = estimate.seconds(points, d, steps, chunk, rates, layers, estimate.device_count())
    if seconds > estimate.DAY_SECONDS:
        raise InputError(
            f"{points} point{'s' if points != 1 else ''} x d = {d} x {steps} steps would take "
            f"about {estimate.clock(seconds)} on this machine ({estimate.describe(rates)}), "
            "past a day; pass --yes (Python: yes=True) to run it all the same"
        )


def _summary(theta0: np.ndarray) -> str:
    """A short stand-in for a start array in a ``history`` line."""
    a = np.abs(theta0)
    return (
        f"<array {theta0.shape[0]}x{theta0.shape[1]}, |theta0| in [{a.min():.3g}, {a.max():.3g}]>"
    )


def _run_trajectory(
    spec, X, y, theta0, save_theta, history, mu, start, progress=False
) -> xr.Dataset:
    """Run the checked trajectory of ``spec`` from ``theta0`` ``[L, d]`` on ``(X, y)``;
    ``start``: the ``alpha``, ``alpha_per_coord`` or ``theta0_abs_range`` given."""
    from samflow.engine import run_points, step_path
    from samflow.regimes import MAX_LEADERS, NAMES
    from samflow.schema import TRAJECTORY
    from samflow.summaries import NAMES as SUMMARY_NAMES

    rule, runner, depth, rho, dtype = spec.rule, spec.runner, spec.depth, spec.rho, spec.dtype
    n, d = X.shape
    model = spec.model
    setup = spec.setup(theta0=theta0)
    points = spec.trajectory_points(theta0)
    seed = spec.seed if spec.sampling is not None else None
    times = runner.times()
    from samflow import estimate

    steps = runner.steps if runner.mode == "discrete" else None
    preload.ahead("xarray")  # the Dataset's import overlaps the program's read and run
    with estimate.trajectory_clock(d, steps, spec.n_layers, progress):
        r = {k: v[0] for k, v in run_points(setup, points, times).items()}
    if history is None:
        given = start["theta0_abs_range"] is not None
        history = inputs.python_call(
            "trajectory",
            method=rule.name,
            depth=depth,
            mu=mu,
            alpha=start["alpha"],
            alpha_per_coord=None
            if start["alpha_per_coord"] is None
            else start["alpha_per_coord"].tolist(),
            theta0=_summary(theta0) if given else None,
            rho=rho,
            runner=runner,
            **_model_call(spec),
            seed=seed,
        )
    discrete = runner.mode == "discrete"
    data = {
        "time": np.arange(len(times)),
        "coord": np.arange(1, d + 1),
        "layer": np.arange(1, depth + 1),
        "tau": r["rescaled_tau"] if discrete else times,
        "beta": r["beta"],
        "loss": r["loss"],
        "reached": r["reached"],
        "dominant": r["dominant"],
        "theta0": theta0,
        "theta_final": r["theta_final"][:depth],
        "handoff": np.arange(MAX_LEADERS),
        "leader_path": r["leader_path"],
        "handoff_tau": r["handoff_tau"],
        "n_leaders": r["n_leaders"],
    }
    data["stop_leader"] = r["stop_leader"]
    if model.classifies:
        for name in ("regime", "unresolved_reason", "limit_coord"):
            data[name] = r[name]
    for name in SUMMARY_NAMES:
        if name in r:
            data[name] = r[name]
    if discrete:
        data["step"] = times
        data["handoff_step"] = r["handoff_step"]
    if save_theta:
        data["theta"] = r["theta"][:, :depth]
    if discrete:
        outcome = {"failed_step": int(r["failed_step"]), "step_path": step_path(setup, points)}
    else:
        blowup = bool(np.isfinite(r["blowup_tau"]))
        outcome = {
            "stop_tau": float(r["stop_tau"]),
            "blowup": blowup,
            "overflow_guard_hit": bool(r["overflow_guard_hit"]),
            "collapsed_to_zero": bool(r["collapsed_to_zero"]),
            "solver_failed": bool(r["solver_failed"]),
            "blowup_tau": float(r["blowup_tau"]) if blowup else None,
            "flow_formulation": setup.flow.formulation,
        }
    outcome["underflow_at_start"] = bool(r["underflow_at_start"])
    _say_nonfinite(spec, X, y, theta0, r["theta_final"][:depth], outcome)
    settings = {
        "method": rule.name,
        "depth": depth,
        "rho": rho,
        "mode": runner.mode,
        "dtype": dtype,
        "n_points": n,
        "mu": np.asarray(X[0], dtype=np.float64) if n == 1 else None,
        **start,
        **spec.model_attrs(),
        "regime_meaning": NAMES[int(r["regime"])] if model.classifies else None,
        "first_amplified": int(r["first_amplified"]),
        "collapse_factor": spec.classification.collapse_factor,
        **runner.attrs(),
        "seed": seed,
        **outcome,
    }
    return TRAJECTORY.dataset(data, dtype=dtype, attrs=settings, history=history)


def _say_nonfinite(spec: SweepSpec, X, y, theta0, theta_final, outcome: dict) -> None:
    """Warn, naming the user's method, where a run failed (``failed_step`` >= 0, or a flow's
    ``solver_failed``) and one of the user's methods is not finite at its start or at its
    last finite state (:func:`samflow.user_code.nonfinite_method`): the record dates the
    NaN, this names its maker."""
    if outcome.get("failed_step", -1) < 0 and not outcome.get("solver_failed", False):
        return
    from samflow.user_code import nonfinite_method

    when = (
        f"failed_step {outcome['failed_step']}"
        if "failed_step" in outcome
        else f"stop_tau {outcome['stop_tau']:.6g}"
    )
    for theta, at in ((theta0, "its start theta0"), (theta_final, "its last state")):
        if not np.all(np.isfinite(theta)):
            continue
        found = nonfinite_method(spec.model, theta, X, y, spec.dtype)
        if found is not None:
            warnings.warn(
                f"the run failed ({when}): {found[0]} returns {found[1]} at {at}; "
                "its value must be finite wherever the run goes "
                "(docs/theory/models.md#models-of-your-own)",
                RuntimeWarning,
                stacklevel=4,
            )
            return


def _model_call(spec: SweepSpec) -> dict:
    """The model keywords of a Python call, for its history line (None where default)."""
    loss, parametrization = spec.model.loss.name, spec.model.parametrization.name
    return {
        "loss": None if loss == "logistic" else loss,
        "parametrization": None if parametrization == "product" else parametrization,
        "summaries": spec.summaries if spec.sharpness else None,
    }


@refuse("collapse_factor", "plateau_fraction", "sharpness", "active_threshold")
def sweep(
    method: str | PerturbationRule,
    *,
    depth: int,
    mu: Sequence[float] | None = None,
    data: tuple[np.ndarray, np.ndarray] | None = None,
    axes: Mapping[str, Sequence[float] | np.ndarray | str],
    rho: float | None = None,
    alpha: float | None = None,
    runner: Discrete | Flow,
    dtype: str = "float64",
    out: str | os.PathLike | None = None,
    progress: bool = False,
    overwrite: bool = False,
    chunk: int = inputs.DEFAULT_CHUNK,
    mu_set: np.ndarray | None = None,
    alpha_range: tuple[float, float] = inputs.SEED_ALPHA_RANGE,
    classification: Classification = Classification(),
    save_trajectories: bool = False,
    pad_layers: int = 0,
    history: str | None = None,
    loss: str = "logistic",
    parametrization: str = "product",
    beta_star: np.ndarray | None = None,
    summaries: Summaries | bool | None = None,
    seed: int | None = None,
    yes: bool = False,
) -> xr.Dataset:
    """Run ``method`` over the cartesian grid of ``axes`` in one compiled program.

    Args:
        method: a name of :data:`samflow.METHODS` or a :class:`samflow.PerturbationRule`.
        depth: layers L, unless an axis varies it.
        mu: one data point ``[d]``, or None with ``data``.
        data: ``(X [n, d], y [n])``, or None with ``mu``.
        axes: axis name (``alpha``, ``alpha_j``, ``rho``, ``depth``, ``eta``, ``mu``,
            ``seed``, ``noise_seed``; :mod:`samflow.sweeps.axes`) to its values, or to a
            range ``"START:STOP:NUM[:log|:lin]"``; the grid's dims follow its order.
        rho: SAM radius where no axis sets it.
        alpha: initialisation scale where no axis sets it (default 1).
        runner: :class:`samflow.Discrete` or :class:`samflow.Flow`.
        dtype: ``float64`` or ``float32``.
        out: None runs in memory and writes nothing; a path makes the resumable store
            the command line uses (rerun the same call to resume; a finished file of
            the same sweep, as this version writes it, is returned as it is, one of
            another sweep is refused unless ``overwrite``).
        progress: show a progress bar, on a terminal (its estimated end follows the
            chunks done).
        overwrite: recompute ``out`` and rewrite it, also where it holds another sweep
            (a file of the same sweep from another samflow version, or whose attributes
            differ from what this run writes, is recomputed without it).
        chunk: grid points per call of the compiled program.
        mu_set: the rows ``[k, d]`` a ``mu`` axis indexes.
        alpha_range: for a ``seed`` axis, alpha_j log-uniform in ``(low, high)``.
        classification: the settings of regime classification
            (:class:`samflow.Classification`).
        save_trajectories: keep ``beta`` of every point at every record.
        pad_layers: pad parameters to at least this many layers.
        history: the file's ``history`` line (default: this call).
        loss: the loss, as in :func:`trajectory`.
        parametrization: the parametrisation, as in :func:`trajectory`.
        beta_star: the ground truth ``[d]`` of the ``test_error`` summary.
        summaries: the summaries, as in :func:`trajectory`, per grid point and record.
        seed: keys the stochastic steps of a runner with ``batch``, ``m`` or
            ``label_noise`` where no ``seed`` or ``noise_seed`` axis does (default 0).
        yes: run a discrete sweep past a day all the same (refused without it: past a
            day anywhere, :func:`samflow.inputs.check_duration`, or on this machine,
            :mod:`samflow.estimate`).

    Returns:
        The Dataset of the ``samflow phase`` file: ``regime(<axes>)`` and the
        summaries of :mod:`samflow.regimes` per grid point (``beta`` too with
        ``save_trajectories``).

    Raises:
        InputError: a bad input, named, before anything is compiled; among them a
            ``seed`` given to a run with no stochastic steps, or an ``out`` holding
            another sweep without ``overwrite``.

    Examples:
        GD's regimes at four initialisation scales, in memory (a short discrete run: its
        fate is decided where a certificate proves it, else it is ``unresolved``; at
        alpha 5 the loss's slope underflows and the iterates never move, and the
        take-over certificate labels it from the exact map):

        >>> import samflow
        >>> ds = samflow.sweep("gd", depth=2, mu=[1, 2, 3, 4], axes={"alpha": "0.05:5:4:log"},
        ...                    runner=samflow.Discrete(eta=0.05, steps=200))
        >>> ds.regime.dims, ds.alpha.values.round(3).tolist()
        (('alpha',), [0.05, 0.232, 1.077, 5.0])
        >>> labels = samflow.FLAG_MEANINGS.split()
        >>> [labels[int(code) + 1] for code in ds.regime]
        ['direct', 'direct', 'direct', 'direct']
    """
    if not isinstance(axes, Mapping) or not axes:
        raise InputError("axes must be a non-empty mapping of axis name to values")
    spec = SweepSpec.from_inputs(
        method,
        depth=depth,
        mu=mu,
        data=data,
        axes=axes,
        rho=rho,
        alpha=alpha,
        runner=runner,
        dtype=dtype,
        alpha_range=alpha_range,
        classification=classification,
        save_trajectories=save_trajectories,
        mu_set=mu_set,
        pad_layers=pad_layers,
        loss=loss,
        parametrization=parametrization,
        beta_star=beta_star,
        summaries=summaries,
        seed=seed,
    )
    inputs.integer("chunk", chunk)
    for name, flag in (("progress", progress), ("overwrite", overwrite)):
        inputs.check_flag(name, flag)
    _check_duration(spec, yes, chunk)
    if out is not None:
        from samflow.io import check_output

        check_output(out)
    if history is None:
        history = inputs.python_call(
            "sweep",
            method=spec.rule.name,
            depth=depth,
            mu=mu,
            axes=dict(axes),
            rho=rho,
            alpha=alpha,
            runner=runner,
            **_model_call(spec),
            seed=seed,
        )
    from samflow.sweeps.store import run

    return run(spec, out, chunk=chunk, history=history, progress=progress, overwrite=overwrite)
