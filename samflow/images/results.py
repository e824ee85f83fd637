"""The result file of ``samflow cnn``: labelled arrays (xarray), written atomically.

Variables (one method: dims as listed; several methods: a leading ``optimizer`` dim,
named so because ``Dataset.sel(method=...)`` is xarray's own keyword and would silently
do something else):

- ``loss``, ``train_accuracy``, ``test_accuracy_history``, ``background_share_history``,
  ``saliency_background_share_history``: ``(seed, record)``, over training;
- ``background_share``, ``saliency_background_share``, ``test_accuracy``: ``(seed)``,
  at the end of training;
- ``example_image``: ``(example, row, col, channel)`` test pixels in [0, 1];
  ``example_label``: ``(example)``; ``example_gradcam``, ``example_saliency``:
  ``(example, row, col)`` maps of the first seed at the end of training (the figure is
  drawn from these, so it can be rebuilt from the file alone).

Attributes record the run: method, rho, alpha, eta, dataset, classes, split note,
samflow version and the command line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import xarray as xr

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
}


def _one_method(run: RunResult) -> xr.Dataset:
    coords = {"seed": run.seeds, "record": np.arange(run.record_steps.size)}
    data = {}
    for var, (field, meaning, units) in _HISTORY.items():
        data[var] = (
            ("seed", "record"),
            getattr(run.history, field).astype(np.float32),
            {"long_name": meaning, "units": units},
        )
    for var in ("background_share", "saliency_background_share", "test_accuracy"):
        meaning = next(m for f, m, _ in _HISTORY.values() if f == var)
        data[var] = (
            ("seed",),
            getattr(run.history, var)[:, -1].astype(np.float32),
            {"long_name": meaning + ", at the end of training", "units": "1"},
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


def build_dataset(
    runs: Sequence[RunResult],
    examples: Mapping[str, np.ndarray],
    attrs: Mapping[str, object],
) -> xr.Dataset:
    """The result Dataset of one or more methods (same seeds, data and schedule).

    ``examples``: ``image`` ``[n_ex, H, W, C]`` in [0, 1] and ``label`` ``[n_ex]``.
    """
    parts = [_one_method(run) for run in runs]
    if len(parts) == 1:
        ds = parts[0]
    else:
        ds = xr.concat(parts, dim="optimizer", data_vars="all", coords="minimal")
        ds = ds.assign_coords(optimizer=[run.method for run in runs])
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
    ds.attrs["method"] = ",".join(run.method for run in runs)
    return ds


def _attr(value: object) -> object:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float, str, np.integer, np.floating)):
        return value
    if isinstance(value, (tuple, list)):
        return ",".join(str(v) for v in value)
    return str(value)
