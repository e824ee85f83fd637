"""Labelled results on disk: xarray Datasets written atomically as netCDF."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import xarray as xr

from samflow import __version__
from samflow.regimes import FLAG_MEANINGS, FLAG_VALUES, UNRESOLVED_HOW


def regime_attrs() -> dict:
    """CF flag attributes of a regime variable (docs/theory.md §6 codes)."""
    return {
        "long_name": "regime of the trajectory",
        "flag_values": np.array(FLAG_VALUES, dtype=np.int8),
        "flag_meanings": FLAG_MEANINGS,
        "unresolved_means": UNRESOLVED_HOW,
    }


def base_attrs(**attrs) -> dict:
    """Provenance attributes every file carries; None values are dropped."""
    out = {"samflow_version": __version__}
    for key, value in attrs.items():
        if value is None:
            continue
        out[key] = int(value) if isinstance(value, bool) else value
    return out


def write_dataset(ds: xr.Dataset, path: str | os.PathLike) -> Path:
    """Write ``ds`` to ``path`` atomically: a temporary file in the same folder, renamed.

    A reader never sees a half-written file, and an interrupted write leaves the old
    file (if any) in place.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        ds.to_netcdf(tmp, engine="netcdf4")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def save_figure(fig, path: str | os.PathLike) -> Path:
    """Save a matplotlib figure atomically (format from the suffix)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=150, bbox_inches="tight")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
