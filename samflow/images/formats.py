"""Image file formats: IDX (gzipped or not) and npz for MNIST, the CIFAR-10 python
pickles (read with a safe unpickler), SVHN's ``.mat``. Each reader takes a file (or an
archive) and returns :class:`ImageSplit` s; where files are looked for is
:mod:`samflow.images.data`'s.

- IDX: ``train-images-idx3-ubyte`` and its siblings, magic numbers 2051 (images) and
  2049 (labels), gunzipped in memory if gzip.
- npz: ``mnist.npz`` with ``x_train``, ``y_train``, ``x_test``, ``y_test``.
- CIFAR-10, python version: ``data_batch_1..5``, ``test_batch`` (pickles), in a folder
  or in ``cifar-10-python.tar.gz``. They are read with an unpickler that only rebuilds
  numpy arrays, so a tampered file cannot run code.
- SVHN cropped digits: ``train_32x32.mat``, ``test_32x32.mat`` (label 10 means digit 0).

Shapes: images are ``[n, H, W, C]`` uint8, labels ``[n]`` int64 (class 0..9).

What is refused (InputError naming the file and the value): a truncated or corrupt file;
an IDX header whose dimensions are 0 or do not match the bytes that follow; pixels that
are not uint8 -- an integer array is taken when every value is in 0..255, a float array
never (whether it means 0..1 or 0..255 would be a guess, and it may hold NaN); labels
that are not integers or lie outside 0..9 (SVHN: 0..10); images and labels of different
counts.
"""

from __future__ import annotations

import gzip
import io
import math
import pickle
import tarfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from samflow.errors import InputError

IDX_IMAGES_MAGIC = 2051
IDX_LABELS_MAGIC = 2049


@dataclass(frozen=True)
class ImageSplit:
    """One split of a data set.

    Attributes:
        images: ``[n, H, W, C]`` uint8.
        labels: ``[n]`` int64, class indices 0..9.
    """

    images: np.ndarray
    labels: np.ndarray

    @property
    def n(self) -> int:
        return int(self.images.shape[0])


def _read_bytes(path: Path) -> bytes:
    """File contents, gunzipped if the file is gzip; InputError if it is truncated."""
    raw = path.read_bytes()
    if raw[:2] != b"\x1f\x8b":
        return raw
    try:
        return gzip.decompress(raw)
    except (EOFError, OSError, zlib.error) as err:
        raise InputError(f"{path}: truncated or corrupt gzip file ({err})") from None


def read_idx(path: Path, expected_magic: int) -> np.ndarray:
    """An IDX array of unsigned bytes (``[n]`` labels or ``[n, rows, cols]`` images).

    The magic number is ``0x0000 0x08 ndim``: 2049 for labels, 2051 for images.
    """
    data = _read_bytes(path)
    if len(data) < 4:
        raise InputError(f"{path}: truncated IDX file ({len(data)} bytes)")
    magic = int.from_bytes(data[:4], "big")
    if magic != expected_magic:
        raise InputError(
            f"{path}: wrong IDX magic number {magic} (expected {expected_magic}); "
            "not an MNIST file of this kind"
        )
    ndim = data[3]
    header = 4 + 4 * ndim
    if len(data) < header:
        raise InputError(f"{path}: truncated IDX header ({len(data)} bytes)")
    shape = tuple(int.from_bytes(data[4 + 4 * k : 8 + 4 * k], "big") for k in range(ndim))
    if 0 in shape:
        raise InputError(f"{path}: IDX header gives dimensions {shape}; none may be 0")
    size = math.prod(shape)  # Python ints: four 32-bit dimensions must not wrap around
    found = len(data) - header
    if found < size:
        raise InputError(
            f"{path}: truncated IDX file: header dimensions {shape} promise {size} bytes "
            f"of data, found {found}"
        )
    if found > size:
        raise InputError(
            f"{path}: IDX header dimensions {shape} promise {size} bytes of data but "
            f"{found} follow; not a valid IDX file"
        )
    return np.frombuffer(data, dtype=np.uint8, count=size, offset=header).reshape(shape)


def idx_split(images_path: Path, labels_path: Path) -> ImageSplit:
    """One split from its IDX images and labels files."""
    images = read_idx(images_path, IDX_IMAGES_MAGIC)
    labels = read_idx(labels_path, IDX_LABELS_MAGIC)
    if images.shape[0] != labels.shape[0]:
        raise InputError(
            f"{images_path} holds {images.shape[0]} images but {labels_path} holds "
            f"{labels.shape[0]} labels"
        )
    labels = _labels(labels, str(labels_path))
    return _check_split(ImageSplit(images[..., None], labels), str(images_path))


def _pixels(x, where: str) -> np.ndarray:
    """``x`` as uint8 pixels: uint8 as is, other integers if all are in 0..255."""
    x = np.asarray(x)
    if x.dtype == np.uint8:
        return x
    if x.dtype.kind in "iu":
        if x.size and (x.min() < 0 or x.max() > 255):
            raise InputError(
                f"{where}: pixel values {x.min()}..{x.max()} are outside 0..255 ({x.dtype})"
            )
        return x.astype(np.uint8)
    nan = " and contain NaN" if x.dtype.kind in "fc" and np.isnan(x).any() else ""
    raise InputError(f"{where}: pixels are {x.dtype}{nan}; expected uint8 (or integers in 0..255)")


def _labels(y, where: str, top: int = 9) -> np.ndarray:
    """``y`` as ``[n]`` int64 class indices in 0..top; InputError naming a bad one."""
    y = np.asarray(y).ravel()
    if y.dtype.kind == "f" and np.all(np.isfinite(y)) and np.all(y == np.round(y)):
        y = y.astype(np.int64)  # MATLAB writes whole numbers as doubles
    if y.dtype.kind not in "iu":
        nan = " with NaN" if y.dtype.kind in "fc" and np.isnan(y).any() else ""
        raise InputError(f"{where}: labels are {y.dtype}{nan}, not whole numbers")
    bad = (y < 0) | (y > top)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise InputError(
            f"{where}: {int(bad.sum())} of {y.size} labels are outside the expected range "
            f"0..{top} (values {y.min()}..{y.max()}; label {y[first]} at index {first})"
        )
    return y.astype(np.int64)


def _check_split(split: ImageSplit, where: str) -> ImageSplit:
    """``split`` if its counts agree and no dimension is 0; InputError otherwise."""
    n, m = split.images.shape[0], split.labels.shape[0]
    if n != m:
        raise InputError(f"{where}: {n} images but {m} labels")
    if n == 0:
        raise InputError(f"{where}: no images")
    if 0 in split.images.shape[1:]:
        h, w, c = split.images.shape[1:]
        raise InputError(f"{where}: images are {h}x{w} pixels with {c} channels; none may be 0")
    return split


def mnist_npz(npz: Path) -> dict[str, ImageSplit]:
    """The splits of an ``mnist.npz`` (keys ``x_train``, ``y_train``, ``x_test``,
    ``y_test``; one pair is enough)."""
    found: dict[str, ImageSplit] = {}
    try:
        with np.load(npz, allow_pickle=False) as f:
            arrays = {k: f[k] for k in ("x_train", "y_train", "x_test", "y_test") if k in f}
    except (OSError, ValueError, EOFError, zlib.error, zipfile.BadZipFile) as err:
        raise InputError(f"{npz}: unreadable or truncated npz file ({err})") from None
    for split in ("train", "test"):
        x, y = arrays.get(f"x_{split}"), arrays.get(f"y_{split}")
        if x is not None and y is not None:
            if x.ndim != 3:
                raise InputError(f"{npz}: x_{split} has shape {x.shape}, expected [n, 28, 28]")
            where = f"{npz} x_{split}/y_{split}"
            found[split] = _check_split(
                ImageSplit(
                    _pixels(x, f"{npz} x_{split}")[..., None], _labels(y, f"{npz} y_{split}")
                ),
                where,
            )
    if not found:
        raise InputError(f"{npz}: no x_train/y_train or x_test/y_test arrays")
    return found


def _safe_globals() -> dict[tuple[str, str], object]:
    import codecs

    from numpy._core import multiarray, numeric

    allowed: dict[tuple[str, str], object] = {
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        # Python 3 writes bytes in protocol-2 pickles as codecs.encode(text, "latin1").
        ("_codecs", "encode"): codecs.encode,
    }
    for core in ("numpy.core", "numpy._core"):
        allowed[(f"{core}.multiarray", "_reconstruct")] = multiarray._reconstruct
        allowed[(f"{core}.multiarray", "scalar")] = multiarray.scalar
        allowed[(f"{core}.numeric", "_frombuffer")] = numeric._frombuffer
    return allowed


class _ArrayUnpickler(pickle.Unpickler):
    """Rebuilds the dicts of numpy arrays in CIFAR batches and nothing else."""

    _ALLOWED: ClassVar[dict[tuple[str, str], object]] = _safe_globals()

    def find_class(self, module: str, name: str):
        try:
            return self._ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(
                f"refusing to load {module}.{name} from a data file"
            ) from None


def cifar_batch(raw: bytes, where: str) -> ImageSplit:
    try:
        batch = _ArrayUnpickler(io.BytesIO(raw), encoding="bytes").load()
        data, labels = np.asarray(batch[b"data"]), np.asarray(batch[b"labels"])
    except (pickle.UnpicklingError, EOFError, KeyError, TypeError, ValueError) as err:
        raise InputError(f"{where}: truncated or invalid CIFAR-10 batch ({err})") from None
    data, labels = _pixels(data, where), _labels(labels, where)
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise InputError(f"{where}: CIFAR-10 data has shape {data.shape}, expected [n, 3072]")
    # Rows hold the red, green and blue 32x32 planes one after the other.
    images = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return _check_split(ImageSplit(images, labels), where)


def _concat(parts: list[ImageSplit]) -> ImageSplit:
    return ImageSplit(
        np.concatenate([p.images for p in parts]), np.concatenate([p.labels for p in parts])
    )


CIFAR_TRAIN_BATCHES = tuple(f"data_batch_{k}" for k in range(1, 6))


def cifar_from_members(read, names: set[str], where: str) -> dict[str, ImageSplit]:
    """The splits of the CIFAR-10 batches ``names``, each read by ``read(name) -> bytes``."""
    found: dict[str, ImageSplit] = {}
    train = [cifar_batch(read(b), f"{where}/{b}") for b in CIFAR_TRAIN_BATCHES if b in names]
    if train:
        found["train"] = _concat(train)
    if "test_batch" in names:
        found["test"] = cifar_batch(read("test_batch"), f"{where}/test_batch")
    return found


def cifar_archive(archive: Path) -> dict[str, ImageSplit]:
    """The splits in ``cifar-10-python.tar.gz``, read in place (nothing extracted)."""
    wanted = {*CIFAR_TRAIN_BATCHES, "test_batch"}
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = {Path(m.name).name: m for m in tar.getmembers() if m.isfile()}
            names = wanted & set(members)

            def read(b: str, tar=tar, members=members) -> bytes:
                return tar.extractfile(members[b]).read()

            found = cifar_from_members(read, names, str(archive))
    except (tarfile.TarError, EOFError, OSError, zlib.error) as err:
        raise InputError(f"{archive}: truncated or corrupt archive ({err})") from None
    if not found:
        raise InputError(f"{archive}: no data_batch_* or test_batch inside")
    return found


def svhn_mat(path: Path) -> ImageSplit:
    """One split of SVHN cropped digits from its ``.mat`` file."""
    import scipy.io

    try:
        mat = scipy.io.loadmat(path)
        x, y = mat["X"], mat["y"]
    except Exception as err:  # scipy reports a damaged file in many ways (even IndexError)
        raise InputError(f"{path}: truncated or invalid SVHN .mat file ({err!r})") from None
    if x.ndim != 4 or x.shape[:3] != (32, 32, 3):
        raise InputError(f"{path}: X has shape {x.shape}, expected [32, 32, 3, n]")
    labels = _labels(y, f"{path} y", top=10)
    labels[labels == 10] = 0  # SVHN stores the digit 0 as class 10
    images = np.ascontiguousarray(_pixels(x, f"{path} X").transpose(3, 0, 1, 2))
    return _check_split(ImageSplit(images, labels), str(path))
