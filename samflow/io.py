"""Results on disk: xarray Datasets written atomically as netCDF (what they hold:
:mod:`samflow.schema`), figures, and checks of output paths."""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from samflow.errors import InputError, RunFailure

if TYPE_CHECKING:  # the output checks run before xarray (and JAX) are imported
    import xarray as xr

FIGURE_SUFFIXES = (".png", ".pdf", ".svg")
TEMPORARIES: set[str] = set()
"""The temporaries :func:`atomic_write` has open (removed by a forced exit on Ctrl-C,
:mod:`samflow.interrupt`)."""
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


def expand_user(path: str | os.PathLike, what: str) -> Path:
    """``path`` with a leading ``~`` or ``~user`` expanded; InputError naming it when
    that user (or the home folder) does not exist."""
    try:
        return Path(path).expanduser()
    except RuntimeError as err:  # "Could not determine home directory"
        raise InputError(f"{what} {str(path)!r}: {err} (no such user?)") from None


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


def atomic_write(
    path: str | os.PathLike,
    write: Callable[[str], object],
    rename: Callable[[Path], Path] | None = None,
) -> Path:
    """Make ``path`` by ``write(tmp)`` into a temporary file in the same folder, renamed.

    A reader never sees a half-written file, an interrupted write leaves the old file
    (if any) in place and no temporary behind. The suffix of ``path`` is kept on the
    temporary (writers that pick a format from it see the right one). ``rename``: the
    final name from the written temporary (default ``path``); returns the file made.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(
            prefix=f".{path.stem}.", suffix=f"{path.suffix}.tmp", dir=path.parent
        )
        TEMPORARIES.add(tmp)
        os.close(fd)
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a file honours the umask
        final = path if rename is None else rename(Path(tmp))
        os.replace(tmp, final)
    except BaseException:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        TEMPORARIES.discard(tmp)
    return final


def file_digest(path: str | os.PathLike) -> str:
    """The SHA-256 of the bytes of the file at ``path`` (hex)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


_DIGEST = re.compile(r"\.([0-9a-f]{64})$")


def checksummed(path: str | os.PathLike) -> Callable[[Path], Path]:
    """For ``path`` = ``<stem><suffix>``: the function from a written file ``tmp`` to the
    name ``<stem>.<SHA-256 of tmp's bytes><suffix>`` (what :func:`write_dataset` with
    ``checksum`` names its file)."""
    path = Path(path)
    return lambda tmp: path.with_name(f"{path.stem}.{file_digest(tmp)}{path.suffix}")


def checksum_holds(path: str | os.PathLike) -> bool:
    """Whether the file at ``path`` (named by :func:`checksummed`) has the bytes its name
    names: False when they differ, it cannot be read, or its name holds no digest."""
    match = _DIGEST.search(Path(path).stem)
    try:
        return match is not None and file_digest(path) == match.group(1)
    except OSError:
        return False


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (:func:`atomic_write`)."""
    return atomic_write(path, lambda tmp: Path(tmp).write_text(text))


def write_dataset(
    ds: xr.Dataset, path: str | os.PathLike, compress: bool = True, checksum: bool = False
) -> Path:
    """Write ``ds`` to ``path`` as netCDF-4, zlib-compressed unless not ``compress``,
    atomically (:func:`atomic_write`), with the fill values its schema gave it
    (:func:`samflow.schema.encoding`). With ``checksum`` the file is named
    ``<stem>.<SHA-256 of its bytes><suffix>`` (:func:`checksummed`; check it with
    :func:`checksum_holds`). Returns the file written."""
    from samflow.schema import encoding  # here: the schema imports JAX, io is imported early

    enc = encoding(ds, compress)
    rename = checksummed(path) if checksum else None
    try:
        return atomic_write(
            path, lambda tmp: ds.to_netcdf(tmp, engine="netcdf4", encoding=enc), rename
        )
    except RuntimeError as err:  # netCDF4 reports a full disk as "NetCDF: HDF error"
        raise RunFailure(f"writing {path} failed: {err} (is the disk full?)") from err


def save_figure(fig, path: str | os.PathLike) -> Path:
    """Save a matplotlib figure atomically (format from the suffix of ``path``)."""
    fmt = Path(path).suffix.lstrip(".") or None
    return atomic_write(
        path, lambda tmp: fig.savefig(tmp, dpi=150, bbox_inches="tight", format=fmt)
    )
