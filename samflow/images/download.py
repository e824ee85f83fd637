"""``samflow data download NAME --dir DIR``: fetch canonical files, checked and resumable.

Each file is fetched to ``NAME.part`` beside its final name, its SHA-256 compared with
the table below, and only then renamed (``os.replace``) to its final name, so a final
name always holds a complete, verified file. An interrupted transfer leaves the
``.part`` file; the next run asks the server for the rest (HTTP ``Range``) and appends.
A checksum mismatch removes the ``.part`` file and reports both digests.

The base URL of every data set can be replaced (``--base-url`` or ``$SAMFLOW_DATA_URL``):
a mirror, or the local server the tests start.
"""

from __future__ import annotations

import hashlib
import os
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from samflow.errors import InputError


@dataclass(frozen=True)
class RemoteFile:
    """One file of a data set.

    Attributes:
        name: file name, both on the server (under the base URL) and on disk.
        sha256: hex digest of the complete file.
        size: size in bytes, for progress messages only.
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


def sha256_of(path: Path) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(
    url: str, dest: Path, sha256: str, *, timeout: float = 60.0, log: Callable[[str], None] = print
) -> Path:
    """Download ``url`` to ``dest`` through ``dest.part``, resuming and verifying.

    Returns ``dest``. Raises InputError on a checksum mismatch (the partial file is
    removed) or on a network failure (the partial file is kept for the next run).
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
        with urllib.request.urlopen(request, timeout=timeout) as response:
            # 206: the server sends the rest; 200: it ignored Range, so start over.
            mode = "ab" if offset and response.status == 206 else "wb"
            if offset:
                log(
                    f"{dest.name}: resuming at byte {offset}"
                    if mode == "ab"
                    else f"{dest.name}: server ignored the range request; starting over"
                )
            with part.open(mode) as f:
                for block in iter(lambda: response.read(CHUNK), b""):
                    f.write(block)
    except urllib.error.HTTPError as err:
        if not (err.code == 416 and offset):
            raise InputError(f"download of {url} failed: HTTP {err.code} {err.reason}") from None
        # 416: nothing left to send, the partial file is already complete; verify it.
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        kept = part.stat().st_size if part.is_file() else 0
        raise InputError(
            f"download of {url} failed after {kept} bytes ({reason}); "
            "run the same command again to resume"
        ) from None
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
) -> list[Path]:
    """Fetch every file of data set ``name`` into ``directory/name/``; their paths."""
    if name not in SOURCES:
        raise InputError(f"unknown dataset {name!r}; choose one of {', '.join(SOURCES)}")
    source = SOURCES[name]
    base = base_url or os.environ.get(BASE_URL_ENV) or source.base_url
    if not base.endswith("/"):
        base += "/"
    target = Path(directory).expanduser() / name
    target.mkdir(parents=True, exist_ok=True)
    paths = []
    for remote in source.files:
        log(f"{remote.name} ({remote.size / 1e6:.1f} MB) from {base}")
        paths.append(fetch(base + remote.name, target / remote.name, remote.sha256, log=log))
    return paths
