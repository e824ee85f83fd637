"""Results on disk: xarray Datasets written atomically as netCDF (what they hold:
:mod:`samflow.schema`), figures, and checks of output paths."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from samflow.errors import InputError, RunFailure

if TYPE_CHECKING:  # the output checks run before xarray (and JAX) are imported
    import xarray as xr

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
    if folder is None or str(folder).strip() == "":
        raise InputError(f"{what or 'the output folder'} is empty")
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


def write_dataset(ds: xr.Dataset, path: str | os.PathLike, compress: bool = True) -> Path:
    """Write ``ds`` to ``path`` as netCDF-4, zlib-compressed unless not ``compress``,
    atomically (:func:`atomic_write`), with the fill values its schema gave it
    (:func:`samflow.schema.encoding`)."""
    from samflow.schema import encoding  # here: the schema imports JAX, io is imported early

    enc = encoding(ds, compress)
    try:
        return atomic_write(path, lambda tmp: ds.to_netcdf(tmp, engine="netcdf4", encoding=enc))
    except RuntimeError as err:  # netCDF4 reports a full disk as "NetCDF: HDF error"
        raise RunFailure(f"writing {path} failed: {err} (is the disk full?)") from err


def save_figure(fig, path: str | os.PathLike) -> Path:
    """Save a matplotlib figure atomically (format from the suffix of ``path``)."""
    fmt = Path(path).suffix.lstrip(".") or None
    return atomic_write(
        path, lambda tmp: fig.savefig(tmp, dpi=150, bbox_inches="tight", format=fmt)
    )
