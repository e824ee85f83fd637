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
- ``uniform_background_share``: the share a uniform map scores (background area);
- the paired SAM - GD differences over seeds (same seed: same initialisation and
  minibatch order), ``(contrast)`` with ``contrast`` like ``"sam-l2 - gd"``, for each
  of ``background_share``, ``background_share_at_loss``, ``saliency_background_share``
  and ``top_mass``: ``<name>_diff_mean``, ``_diff_ci_low``, ``_diff_ci_high`` (a 95%
  t interval), ``_diff_p_value`` (two-sided paired t test) and ``_diff_n`` (pairs);
- ``example_image``: ``(example, row, col, channel)`` test pixels in [0, 1];
  ``example_label``: ``(example)``; ``example_gradcam``, ``example_saliency``:
  ``(example, row, col)`` maps of the first seed at the end of training (the figure is
  drawn from these, so it can be rebuilt from the file alone).

With several ``--alpha`` values every variable gains a leading ``alpha`` dim.
Attributes record the run: method, rho, alpha (one value), eta, dataset, classes,
split note, samflow version and the command line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import xarray as xr
from scipy import stats

from samflow.images.train import RunResult

_HISTORY = {
    "loss": ("loss", "logistic loss on the training set", "1"),
    "train_accuracy": ("train_accuracy", "fraction of training images classified right", "1"),
    "test_accuracy_history": ("test_accuracy", "fraction of test images classified right", "1"),
    "background_share_history": (
        "background_share",
        "mean share of positive Grad-CAM mass on background test pixels",
        "1",
    ),
    "saliency_background_share_history": (
        "saliency_background_share",
        "mean share of input-gradient saliency mass on background test pixels",
        "1",
    ),
    "top_mass_history": (
        "top_mass",
        "mean share of Grad-CAM mass on the top 10% of pixels of each map",
        "1",
    ),
    "zero_maps_history": ("zero_maps", "test images whose Grad-CAM map is zero everywhere", "1"),
    "occlusion_background_history": (
        "occlusion_background",
        "mean drop of y * logit when the background pixels are set to the training mean",
        "1",
    ),
    "occlusion_stroke_history": (
        "occlusion_stroke",
        "mean drop of y * logit when the stroke pixels are set to the training mean",
        "1",
    ),
}
FINAL = (
    "background_share",
    "saliency_background_share",
    "test_accuracy",
    "top_mass",
    "zero_maps",
    "occlusion_background",
    "occlusion_stroke",
)
CONTRASTS = (
    "background_share",
    "background_share_at_loss",
    "saliency_background_share",
    "top_mass",
)
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


def _one_method(run: RunResult, match_loss: float) -> xr.Dataset:
    coords = {"seed": run.seeds, "record": np.arange(run.record_steps.size)}
    data = {}
    for var, (field, meaning, units) in _HISTORY.items():
        data[var] = (
            ("seed", "record"),
            getattr(run.history, field).astype(np.float32),
            {"long_name": meaning, "units": units},
        )
    for var in FINAL:
        meaning = next(m for f, m, _ in _HISTORY.values() if f == var)
        data[var] = (
            ("seed",),
            getattr(run.history, var)[:, -1].astype(np.float32),
            {"long_name": meaning + ", at the end of training", "units": "1"},
        )
    share, step = at_matched_loss(
        run.history.loss, run.history.background_share, run.record_steps, match_loss
    )
    data["background_share_at_loss"] = (
        ("seed",),
        share.astype(np.float32),
        {
            "long_name": "mean Grad-CAM background share at the first record with training "
            f"loss <= {match_loss:g}",
            "units": "1",
        },
    )
    data["step_at_loss"] = (
        ("seed",),
        step,
        {"long_name": f"step of the first record with training loss <= {match_loss:g}"},
    )
    data["example_gradcam"] = (
        ("example", "row", "col"),
        run.example_cam.astype(np.float32),
        {"long_name": "Grad-CAM map of the first seed at the end of training"},
    )
    data["example_saliency"] = (
        ("example", "row", "col"),
        run.example_saliency.astype(np.float32),
        {"long_name": "input-gradient saliency of the first seed at the end of training"},
    )
    ds = xr.Dataset(data, coords=coords)
    ds["step"] = ("record", run.record_steps, {"long_name": "training step of the record"})
    ds["seconds"] = ((), run.seconds, {"long_name": "wall-clock time, compilation included"})
    return ds.set_coords("step")


def _contrasts(ds: xr.Dataset, methods: Sequence[str]) -> xr.Dataset:
    """The paired ``method - gd`` difference variables (module docstring)."""
    others = [m for m in methods if m != "gd"]
    if "gd" not in methods or not others:
        return ds
    names = [f"{m} - gd" for m in others]
    for var in CONTRASTS:
        rows = [
            paired_difference(ds[var].sel(optimizer=m).values, ds[var].sel(optimizer="gd").values)
            for m in others
        ]
        for key, meaning in (
            ("mean", "mean over seeds of the paired difference"),
            ("ci_low", "lower end of the 95% t interval of the mean paired difference"),
            ("ci_high", "upper end of the 95% t interval of the mean paired difference"),
            ("p_value", "two-sided paired t test p value"),
            ("n", "number of seed pairs"),
        ):
            ds[f"{var}_diff_{key}"] = (
                ("contrast",),
                np.array([r[key] for r in rows]),
                {"long_name": f"{var}: {meaning} (method - gd, same seed)"},
            )
    return ds.assign_coords(contrast=names)


def build_dataset(
    runs: Sequence[RunResult] | Mapping[float, Sequence[RunResult]],
    examples: Mapping[str, np.ndarray],
    attrs: Mapping[str, object],
    *,
    match_loss: float = DEFAULT_MATCH_LOSS,
    uniform_share: float = np.nan,
) -> xr.Dataset:
    """The result Dataset of one or more methods (same seeds, data and schedule).

    ``runs``: the methods' results, or a mapping alpha -> those results (a leading
    ``alpha`` dim). ``examples``: ``image`` ``[n_ex, H, W, C]`` in [0, 1] and
    ``label`` ``[n_ex]``.
    """
    by_alpha = runs if isinstance(runs, Mapping) else {None: runs}
    parts = []
    for alpha, group in by_alpha.items():
        ds = _one_alpha(group, match_loss)
        parts.append(ds if alpha is None else ds.expand_dims(alpha=[float(alpha)]))
    ds = parts[0] if len(parts) == 1 else xr.concat(parts, dim="alpha", data_vars="all")
    if "alpha" in ds.dims:
        ds["alpha"].attrs = {"long_name": "initialisation scale", "units": "1"}
    methods = [run.method for run in next(iter(by_alpha.values()))]
    ds["uniform_background_share"] = (
        (),
        float(uniform_share),
        {"long_name": "background share of a uniform map (mean background area)", "units": "1"},
    )
    ds["example_image"] = (
        ("example", "row", "col", "channel"),
        np.asarray(examples["image"], np.float32),
        {"long_name": "test image pixels before normalisation", "units": "1 (0 = black)"},
    )
    ds["example_label"] = (
        ("example",),
        np.asarray(examples["label"], np.float32),
        {"long_name": "label in {-1, +1} (-1: first class, +1: second class)"},
    )
    ds.attrs.update({k: _attr(v) for k, v in attrs.items()})
    ds.attrs["method"] = ",".join(methods)
    ds.attrs["match_loss"] = float(match_loss)
    return ds


def _one_alpha(runs: Sequence[RunResult], match_loss: float) -> xr.Dataset:
    parts = [_one_method(run, match_loss) for run in runs]
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
