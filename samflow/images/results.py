"""The result file of ``samflow cnn``: labelled arrays (xarray), written atomically.

Variables (one method: dims as listed; several methods: a leading ``optimizer`` dim,
named so because ``Dataset.sel(method=...)`` is xarray's own keyword and would silently
do something else):

- ``loss``, ``train_accuracy``, ``test_accuracy_history``, ``background_share_history``,
  ``saliency_background_share_history``: ``(seed, record)``, over training;
- ``top_mass_history``, ``zero_maps_history``, ``occlusion_background_history``,
  ``occlusion_stroke_history``: the controls over training (see
  :class:`samflow.images.train.Metrics`);
- ``background_share``, ``saliency_background_share``, ``test_accuracy``, ``top_mass``,
  ``zero_maps``, ``occlusion_background``, ``occlusion_stroke``: ``(seed)``, at the end
  of training;
- ``background_share_at_loss``, ``step_at_loss``: ``(seed)``, at matched training loss:
  the first record whose training loss is at most ``match_loss`` (NaN where never);
- ``dark_share`` (and ``dark_share_history``): with a ``border`` background only, the
  Grad-CAM share on dark pixels beside the border share;
- ``learned``: ``(seed)`` 0/1, with ``min_accuracy`` given only: whether the run's final
  test accuracy reached it. A pair in which either run did not learn is left out of
  the paired differences (a model at chance has maps that explain nothing);
- ``uniform_background_share``: the share a uniform map scores (background area);
- the paired SAM - GD differences over seeds (same seed: same initialisation and
  minibatch order), ``(contrast)`` with ``contrast`` like ``"sam-l2 - gd"``, for each
  of ``background_share``, ``background_share_at_loss``, ``saliency_background_share``,
  ``top_mass`` (and ``dark_share`` where it is there): ``<name>_diff_mean``,
  ``_diff_ci_low``, ``_diff_ci_high`` (a 95% t interval), ``_diff_p_value``
  (two-sided paired t test) and ``_diff_n`` (pairs);
- ``example_image``: ``(example, row, col, channel)`` test pixels in [0, 1];
  ``example_label``: ``(example)``; ``example_gradcam``, ``example_saliency``:
  ``(example, row, col)`` maps of the first seed at the end of training (the figure is
  drawn from these, so it can be rebuilt from the file alone).

With several ``--alpha`` values every variable gains a leading ``alpha`` dim.
Attributes record the run: method, rho, alpha (one value), eta, dataset, classes,
split note, and as in every samflow file ``Conventions``, ``history`` (the command line)
and the library versions. Every name, dims, dtype and unit: :data:`samflow.schema.IMAGES`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import xarray as xr
from scipy import stats

from samflow.images.train import Metrics, RunResult
from samflow.schema import CONTRASTS, IMAGES

AT_END = ("loss", "train_accuracy")
"""Metrics kept over training only; the others are kept at the end of training too,
their histories as ``<name>_history``."""
DEFAULT_MATCH_LOSS = 0.1
"""Matched-loss threshold: the logistic training loss at which shares are compared
(log 2 = 0.693 at the start; 0.1 is about 96% of the way to zero on a log-loss scale
and reached by both methods in the default runs)."""


def at_matched_loss(
    loss: np.ndarray, values: np.ndarray, steps: np.ndarray, threshold: float
) -> tuple[np.ndarray, np.ndarray]:
    """Per seed, ``values`` and the step at the first record with ``loss <= threshold``.

    ``loss``, ``values``: ``[seed, record]``; NaN for a seed that never gets there.
    """
    reached = loss <= threshold
    first = np.argmax(reached, axis=1)
    ok = reached.any(axis=1)
    rows = np.arange(loss.shape[0])
    value = np.where(ok, values[rows, first], np.nan)
    step = np.where(ok, steps[first].astype(np.float64), np.nan)
    return value, step


def paired_difference(sam: np.ndarray, gd: np.ndarray) -> dict[str, float]:
    """Mean of ``sam - gd`` over seeds, its 95% t interval and the paired t-test p.

    Pairs with a NaN on either side are left out; with fewer than two pairs the
    interval and p are NaN (and the mean too with none).
    """
    d = np.asarray(sam, np.float64) - np.asarray(gd, np.float64)
    d = d[np.isfinite(d)]
    n = d.size
    out = {"mean": float(d.mean()) if n else np.nan, "n": n}
    if n < 2:
        return {**out, "ci_low": np.nan, "ci_high": np.nan, "p_value": np.nan}
    se = d.std(ddof=1) / np.sqrt(n)
    half = stats.t.ppf(0.975, n - 1) * se
    p = float(stats.ttest_1samp(d, 0.0).pvalue) if se > 0 else (1.0 if out["mean"] == 0 else 0.0)
    return {**out, "ci_low": out["mean"] - half, "ci_high": out["mean"] + half, "p_value": p}


def _one_method(run: RunResult, match_loss: float, min_accuracy: float | None) -> xr.Dataset:
    data = {"seed": run.seeds, "record": np.arange(run.record_steps.size)}
    data["step"] = run.record_steps
    for field in Metrics._fields:
        values = getattr(run.history, field)
        if values is None:  # not measured in this run (dark_share with a dark background)
            continue
        if field in AT_END:
            data[field] = values
        else:
            data[f"{field}_history"] = values
            data[field] = values[:, -1]
    data["background_share_at_loss"], data["step_at_loss"] = at_matched_loss(
        run.history.loss, run.history.background_share, run.record_steps, match_loss
    )
    data["example_gradcam"] = run.example_cam
    data["example_saliency"] = run.example_saliency
    data["seconds"] = run.seconds
    if min_accuracy is not None:
        data["learned"] = (data["test_accuracy"] >= min_accuracy).astype(np.int8)
    # one alpha, one method: build_dataset stacks them (and labels the whole)
    return IMAGES.dataset(data, attrs={"match_loss": match_loss, "min_accuracy": min_accuracy})


def _contrasts(ds: xr.Dataset, methods: Sequence[str]) -> xr.Dataset:
    """The paired ``method - gd`` difference variables (module docstring); a pair in
    which either run did not learn (``learned`` 0) is left out."""
    others = [m for m in methods if m != "gd"]
    if "gd" not in methods or not others:
        return ds
    names = [f"{m} - gd" for m in others]

    def kept(var: str, method: str) -> np.ndarray:
        values = ds[var].sel(optimizer=method).values.astype(np.float64)
        if "learned" not in ds:
            return values
        both = ds["learned"].sel(optimizer=method).values * ds["learned"].sel(optimizer="gd")
        return np.where(np.asarray(both) > 0, values, np.nan)

    for var in CONTRASTS:
        if var not in ds:
            continue
        rows = [paired_difference(kept(var, m), kept(var, "gd")) for m in others]
        for key in rows[0]:
            ds[f"{var}_diff_{key}"] = ("contrast", np.array([r[key] for r in rows]))
    return ds.assign_coords(contrast=names)


def build_dataset(
    runs: Sequence[RunResult] | Mapping[float, Sequence[RunResult]],
    examples: Mapping[str, np.ndarray],
    attrs: Mapping[str, object],
    *,
    match_loss: float = DEFAULT_MATCH_LOSS,
    uniform_share: float = np.nan,
    history: str | None = None,
    min_accuracy: float | None = None,
    uniform_dark_share: float | None = None,
) -> xr.Dataset:
    """The result Dataset of one or more methods (same seeds, data and schedule).

    ``runs``: the methods' results, or a mapping alpha -> those results (a leading
    ``alpha`` dim). ``examples``: ``image`` ``[n_ex, H, W, C]`` in [0, 1] and
    ``label`` ``[n_ex]``; ``attrs``: the settings; ``history``: the command line or
    call that made it. ``min_accuracy``: a run whose final test accuracy is below it
    did not learn (``learned``; its pairs are left out of the differences); None:
    every run counts (no ``learned`` variable). ``uniform_dark_share``: the dark area
    fraction beside a ``border`` background. Labelled by :data:`samflow.schema.IMAGES`.
    """
    by_alpha = runs if isinstance(runs, Mapping) else {None: runs}
    parts = []
    for alpha, group in by_alpha.items():
        ds = _one_alpha(group, match_loss, min_accuracy)
        parts.append(ds if alpha is None else ds.expand_dims(alpha=[float(alpha)]))
    ds = parts[0] if len(parts) == 1 else xr.concat(parts, dim="alpha", data_vars="all")
    methods = [run.method for run in next(iter(by_alpha.values()))]
    shared = {
        "uniform_background_share": float(uniform_share),
        "example_image": examples["image"],
        "example_label": examples["label"],
    }
    if uniform_dark_share is not None:
        shared["uniform_dark_share"] = float(uniform_dark_share)
    ds = ds.merge(IMAGES.dataset(shared))
    settings = {k: _attr(v) for k, v in attrs.items()}
    settings.update(method=",".join(methods), match_loss=float(match_loss))
    if min_accuracy is not None:
        settings["min_accuracy"] = float(min_accuracy)
    return IMAGES.conform(ds, attrs=settings, history=history)


def _one_alpha(
    runs: Sequence[RunResult], match_loss: float, min_accuracy: float | None
) -> xr.Dataset:
    parts = [_one_method(run, match_loss, min_accuracy) for run in runs]
    if len(parts) == 1:
        return parts[0]
    ds = xr.concat(parts, dim="optimizer", data_vars="all", coords="minimal")
    ds = ds.assign_coords(optimizer=[run.method for run in runs])
    return _contrasts(ds, [run.method for run in runs])


def _attr(value: object) -> object:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float, str, np.integer, np.floating)):
        return value
    if isinstance(value, (tuple, list)):
        return ",".join(str(v) for v in value)
    return str(value)
