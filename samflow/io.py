"""Labelled results on disk: xarray Datasets written atomically as netCDF."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import xarray as xr

from samflow import __version__
from samflow.errors import InputError
from samflow.regimes import FLAG_MEANINGS, FLAG_VALUES, UNRESOLVED_HOW


def regime_attrs() -> dict:
    """CF flag attributes of a regime variable (docs/theory.md §6 codes)."""
    return {
        "long_name": "regime of the trajectory",
        "flag_values": np.array(FLAG_VALUES, dtype=np.int8),
        "flag_meanings": FLAG_MEANINGS,
        "unresolved_means": UNRESOLVED_HOW,
    }


def library_versions() -> dict[str, str]:
    """Versions of samflow and of the libraries its numbers come from."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"samflow_version": __version__}
    for name in ("jax", "jaxlib", "diffrax", "equinox", "optax", "numpy", "xarray"):
        try:
            out[f"{name}_version"] = version(name)
        except PackageNotFoundError:
            out[f"{name}_version"] = "not installed"
    return out


def base_attrs(history: str | None = None, **attrs) -> dict:
    """The attributes every file carries: CF ``Conventions``, ``history`` (when and by
    which command line or Python call the file was made), library versions, and
    ``attrs`` (None values dropped, booleans as 0/1)."""
    from datetime import UTC, datetime

    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    out = {"Conventions": "CF-1.10", "history": f"{stamp}: {history or 'samflow'}"}
    out.update(library_versions())
    for key, value in attrs.items():
        if value is None:
            continue
        out[key] = int(value) if isinstance(value, bool) else value
    return out


COORDINATE_ATTRS = {
    "alpha": {"long_name": "initialisation scale alpha (w^(l) = alpha)", "units": "1"},
    "rho": {"long_name": "SAM radius rho", "units": "1"},
    "depth": {"long_name": "number of layers L", "units": "1"},
    "eta": {"long_name": "step size eta", "units": "1"},
    "mu": {"long_name": "row of the set of mu vectors", "units": "1"},
    "seed": {"long_name": "seed of the random initialisation", "units": "1"},
    "time": {"long_name": "record index", "units": "1"},
    "coord": {"long_name": "coordinate index j (1-based)", "units": "1"},
    "layer": {"long_name": "layer index l (1-based)", "units": "1"},
    "point": {"long_name": "grid point (flat C-order index)", "units": "1"},
}


def describe(ds: xr.Dataset) -> xr.Dataset:
    """Give every coordinate and variable a ``long_name`` and ``units`` (CF).

    Coordinates take :data:`COORDINATE_ATTRS` (``alpha_j``: the scale of coordinate j);
    a variable without units is dimensionless (``units = "1"``); one without a
    ``long_name`` is named after itself.
    """
    for name in ds.variables:
        attrs = ds[name].attrs
        if name in COORDINATE_ATTRS:
            for key, value in COORDINATE_ATTRS[name].items():
                attrs.setdefault(key, value)
        elif str(name).startswith("alpha_"):
            j = str(name).split("_", 1)[1]
            attrs.setdefault("long_name", f"initialisation scale of coordinate {j}")
        attrs.setdefault("long_name", str(name).replace("_", " "))
        attrs.setdefault("units", "1")
    return ds


FIGURE_SUFFIXES = (".png", ".pdf", ".svg")
NETCDF_SUFFIXES = (".nc", ".nc4", ".cdf")


def check_output(path: str | os.PathLike, suffixes: tuple[str, ...] | None = None) -> Path:
    """``path`` as a file this process can write, checked before any computation.

    InputError naming it when it is empty, a folder, under a file, in a folder that
    cannot be made or written, or (with ``suffixes``) of another kind.
    """
    if path is None or str(path).strip() == "":
        raise InputError("the output path is empty")
    path = Path(path)
    if path.is_dir():
        raise InputError(f"output {str(path)!r} is a folder, not a file")
    if suffixes is not None and path.suffix.lower() not in suffixes:
        raise InputError(
            f"output {str(path)!r}: unknown suffix {path.suffix!r}; use {', '.join(suffixes)}"
        )
    check_folder(path.parent, f"output {str(path)!r}")
    return path


def check_folder(folder: str | os.PathLike, what: str | None = None) -> Path:
    """``folder`` exists as a writable folder or can be made; InputError otherwise."""
    folder = Path(folder)
    what = what or f"folder {str(folder)!r}"
    existing = folder
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise InputError(f"{what}: {str(existing)!r} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(f"{what}: folder {str(existing)!r} is not writable")
    return folder


def atomic_write(path: str | os.PathLike, write: Callable[[str], object]) -> Path:
    """Make ``path`` by ``write(tmp)`` into a temporary file in the same folder, renamed.

    A reader never sees a half-written file, an interrupted write leaves the old file
    (if any) in place and no temporary behind. The suffix of ``path`` is kept on the
    temporary (writers that pick a format from it see the right one).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(
        prefix=f".{path.stem}.", suffix=f"{path.suffix}.tmp", dir=path.parent
    )
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a file honours the umask
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (:func:`atomic_write`)."""
    return atomic_write(path, lambda tmp: Path(tmp).write_text(text))


def write_dataset(ds: xr.Dataset, path: str | os.PathLike) -> Path:
    """Write ``ds`` to ``path`` as netCDF-4, zlib-compressed, atomically (:func:`atomic_write`).

    Every coordinate and variable is given a ``long_name`` and ``units`` first
    (:func:`describe`, in place) if it has none.
    """
    describe(ds)
    encoding = {
        name: {"zlib": True, "complevel": 4}
        for name, var in ds.variables.items()
        if var.dtype.kind in "biuf" and var.ndim > 0
    }
    return atomic_write(path, lambda tmp: ds.to_netcdf(tmp, engine="netcdf4", encoding=encoding))


def save_figure(fig, path: str | os.PathLike) -> Path:
    """Save a matplotlib figure atomically (format from the suffix of ``path``)."""
    fmt = Path(path).suffix.lstrip(".") or None
    return atomic_write(
        path, lambda tmp: fig.savefig(tmp, dpi=150, bbox_inches="tight", format=fmt)
    )
