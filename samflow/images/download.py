"""``samflow data download NAME --dir DIR``: fetch canonical files, checked and resumable.

Each file is fetched to ``NAME.part`` beside its final name, its SHA-256 compared with
the table below, and only then renamed (``os.replace``) to its final name, so a final
name always holds a complete, verified file. An interrupted transfer (a connection
closed early, a reset, a timeout) keeps the ``.part`` file and is reported as a short
read (:class:`~samflow.errors.RunFailure`); the next run asks the server for the rest
(HTTP ``Range``) and appends, or starts over if the server ignores the range (200).
Only a checksum mismatch of a complete file removes the ``.part`` file; both digests
are reported (InputError: the source does not serve the file this table names).

The base URL of every data set can be replaced (``--base-url`` or ``$SAMFLOW_DATA_URL``):
a mirror, a ``file://`` folder, or the local server the tests start. It is checked, and
the target folder too, before any network access.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from samflow.errors import InputError, RunFailure
from samflow.io import check_folder, expand_user


@dataclass(frozen=True)
class RemoteFile:
    """One file of a data set.

    Attributes:
        name: file name, both on the server (under the base URL) and on disk.
        sha256: hex digest of the complete file.
        size: size in bytes: for progress, and to tell a short read when the server
            sends no length.
    """

    name: str
    sha256: str
    size: int


@dataclass(frozen=True)
class Source:
    """Where a data set comes from: ``base_url + name`` for each file."""

    base_url: str
    files: tuple[RemoteFile, ...]


# Digests of the canonical files as published (MNIST: LeCun et al.'s gzip files, as kept
# on the PyTorch mirror; CIFAR-10: Krizhevsky's python archive; SVHN: Stanford's .mat files).
SOURCES: dict[str, Source] = {
    "mnist": Source(
        "https://ossci-datasets.s3.amazonaws.com/mnist/",
        (
            RemoteFile(
                "train-images-idx3-ubyte.gz",
                "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
                9912422,
            ),
            RemoteFile(
                "train-labels-idx1-ubyte.gz",
                "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
                28881,
            ),
            RemoteFile(
                "t10k-images-idx3-ubyte.gz",
                "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
                1648877,
            ),
            RemoteFile(
                "t10k-labels-idx1-ubyte.gz",
                "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
                4542,
            ),
        ),
    ),
    "cifar10": Source(
        "https://www.cs.toronto.edu/~kriz/",
        (
            RemoteFile(
                "cifar-10-python.tar.gz",
                "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce",
                170498071,
            ),
        ),
    ),
    "svhn": Source(
        "http://ufldl.stanford.edu/housenumbers/",
        (
            RemoteFile(
                "train_32x32.mat",
                "435e94d69a87fde4fd4d7f3dd208dfc32cb6ae8af2240d066de1df7508d083b8",
                182040794,
            ),
            RemoteFile(
                "test_32x32.mat",
                "cdce80dfb2a2c4c6160906d0bd7c68ec5a99d7ca4831afa54f09182025b6a75b",
                64275384,
            ),
        ),
    ),
}

BASE_URL_ENV = "SAMFLOW_DATA_URL"
CHUNK = 1 << 20

Progress = Callable[[int, int | None], None]
"""``(bytes received so far, bytes expected or None)``, called after each block."""


def sha256_of(path: Path) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


class ByteProgress:
    """Bytes received, redrawn in place on one line of ``stream`` (stderr) when it is a
    terminal, at most every ``interval`` seconds; silent on a pipe or file, where the
    log lines say what happened."""

    def __init__(self, stream: TextIO | None = None, interval: float = 0.2):
        self.stream = sys.stderr if stream is None else stream
        self.live = self.stream.isatty()
        self.interval = interval
        self._last = -float("inf")
        self._drawn = False

    def show(self, name: str, done: int, total: int | None) -> None:
        now = time.monotonic()
        if not self.live or (now - self._last < self.interval and done != total):
            return
        self._last = now
        of = f" of {_size(total)} ({100 * done // total}%)" if total else ""
        self.stream.write(f"\r{name}: {_size(done)}{of}")
        self.stream.flush()
        self._drawn = True
        if total and done >= total:
            self.end()

    def end(self) -> None:
        """End the line (before a log or error line is written)."""
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False
        self._last = -float("inf")


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB"


def check_base_url(url: str, what: str = "base_url") -> str:
    """``url`` ending in ``/`` if it is an http(s) URL with a host or a file URL."""
    parts = urllib.parse.urlsplit(url)
    try:
        parts.port  # noqa: B018 -- raises ValueError on a port that is not a number
    except ValueError:
        raise InputError(f"{what} {url!r} has an invalid port") from None
    if parts.scheme not in ("http", "https", "file") or (
        parts.scheme != "file" and not parts.hostname
    ):
        raise InputError(f"{what} {url!r} is not an http://, https:// or file:// URL")
    return url if url.endswith("/") else url + "/"


_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-\d+/(\d+|\*)")


def _receive(
    response, url: str, part: Path, offset: int, size: int | None, progress: Progress | None
) -> tuple[int, int | None]:
    """Write ``response`` to ``part`` (appending to its ``offset`` bytes if the server
    sent the rest); ``(bytes in part, bytes the complete file has, if known)``."""
    start, expected = 0, None
    if offset and response.status == 206:
        match = _CONTENT_RANGE.match(response.headers.get("Content-Range", ""))
        start = int(match.group(1)) if match else offset
        if match and match.group(2) != "*":
            expected = int(match.group(2))
        if start not in (0, offset):
            raise RunFailure(
                f"{url}: asked for bytes from {offset}, the server sent bytes from {start}; "
                f"remove {part} and run again"
            )
    length = response.headers.get("Content-Length", "")
    if length.isdigit():
        expected = start + int(length)
    elif expected is None:
        expected = size
    done = start
    try:
        f = part.open("ab" if start else "wb")
    except OSError as err:
        raise RunFailure(f"cannot write {part}: {err.strerror or err}") from None
    with f:
        while True:
            try:
                block = response.read(CHUNK)
            except (OSError, http.client.HTTPException) as err:  # reset, timeout, ...
                raise _short_read(url, part, done, expected, err) from None
            if not block:
                break
            try:
                f.write(block)
            except OSError as err:
                raise RunFailure(f"cannot write {part}: {err.strerror or err}") from None
            done += len(block)
            if progress is not None:
                progress(done, expected)
    return done, expected


def _short_read(url: str, part: Path, done: int, expected: int | None, why) -> RunFailure:
    of = f" of {expected}" if expected else ""
    return RunFailure(
        f"short read from {url}: got {done}{of} bytes ({why}); kept {part}, "
        "run the same command again to resume"
    )


def fetch(
    url: str,
    dest: Path,
    sha256: str,
    *,
    size: int | None = None,
    timeout: float = 60.0,
    log: Callable[[str], None] = print,
    progress: Progress | None = None,
) -> Path:
    """Download ``url`` to ``dest`` through ``dest.part``, resuming and verifying.

    Returns ``dest``. Raises RunFailure on a network or disk failure or a short read
    (the partial file is kept for the next run), InputError on a checksum mismatch of
    the complete file (the partial file is removed). ``size``: the expected size,
    used only when the server does not send a length.
    """
    if dest.is_file() and sha256_of(dest) == sha256:
        log(f"{dest}: present, checksum ok")
        return dest
    part = dest.with_name(dest.name + ".part")
    offset = part.stat().st_size if part.is_file() else 0
    request = urllib.request.Request(url)
    if offset:
        request.add_header("Range", f"bytes={offset}-")
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as err:
        if not (err.code == 416 and offset):
            raise RunFailure(f"download of {url} failed: HTTP {err.code} {err.reason}") from None
        # 416: nothing left to send, the partial file is already complete; verify it.
        done, expected = offset, None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as err:
        reason = getattr(err, "reason", err)
        kept = f"; kept the {offset} bytes of {part}" if offset else ""
        raise RunFailure(
            f"download of {url} failed ({reason}){kept}; run the same command again"
        ) from None
    else:
        with response:
            # 206: the server sends the rest; 200 (or a file URL): it sends it all, from 0.
            if offset:
                log(
                    f"{dest.name}: resuming at byte {offset}"
                    if response.status == 206
                    else f"{dest.name}: server ignored the range request; starting over"
                )
            done, expected = _receive(response, url, part, offset, size, progress)
    if expected is not None and done < expected:
        raise _short_read(url, part, done, expected, "the connection closed early")
    got = sha256_of(part)
    if got != sha256:
        part.unlink()
        raise InputError(
            f"checksum mismatch for {dest.name} from {url}: expected sha256 {sha256}, "
            f"got {got}; the download was removed"
        )
    os.replace(part, dest)
    log(f"{dest}: downloaded, checksum ok")
    return dest


def download(
    name: str,
    directory: str | os.PathLike,
    *,
    base_url: str | None = None,
    log: Callable[[str], None] = print,
    progress: ByteProgress | None = None,
) -> list[Path]:
    """Fetch every file of data set ``name`` into ``directory/name/``; their paths.

    ``base_url`` (else ``$SAMFLOW_DATA_URL``, else the canonical one) and the target
    folder are checked first: InputError before any network access.
    """
    if name not in SOURCES:
        raise InputError(f"unknown dataset {name!r}; choose one of {', '.join(SOURCES)}")
    source = SOURCES[name]
    if base_url is not None:
        base = check_base_url(base_url)
    elif os.environ.get(BASE_URL_ENV):
        base = check_base_url(os.environ[BASE_URL_ENV], f"${BASE_URL_ENV}")
    else:
        base = source.base_url
    folder = expand_user(directory, "data directory")
    target = check_folder(folder / name, f"data directory {str(directory)!r}")
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise RunFailure(f"cannot make folder {target}: {err.strerror or err}") from None
    paths = []
    for remote in source.files:
        log(f"{remote.name} ({remote.size / 1e6:.1f} MB) from {base}")
        show = None
        if progress is not None:

            def show(done: int, total: int | None, file: str = remote.name) -> None:
                progress.show(file, done, total)

        try:
            path = fetch(
                base + remote.name,
                target / remote.name,
                remote.sha256,
                size=remote.size,
                log=log,
                progress=show,
            )
        finally:
            if progress is not None:
                progress.end()
        paths.append(path)
    return paths
