"""Image data sets from a data directory, and binary tasks made from them.

Where data is looked for: ``--data-dir``, else ``$SAMFLOW_DATA``, else
``$XDG_CACHE_HOME/samflow/data`` (``~/.cache/samflow/data`` when XDG_CACHE_HOME is
unset). Inside it, each data set is found either in the folder itself or in a
subfolder named after the data set (``mnist/``, ``cifar10/``, ``svhn/``), which is
where ``samflow data download NAME --dir DIR`` puts it.

Formats read (nothing is extracted or converted on disk):

- MNIST: IDX files ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
  ``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte``, each gzipped (``.gz``) or not;
  or the common ``mnist.npz`` (keys ``x_train``, ``y_train``, ``x_test``, ``y_test``).
- CIFAR-10, python version: the folder ``cifar-10-batches-py/`` (``data_batch_1..5``,
  ``test_batch``) or the archive ``cifar-10-python.tar.gz``, read in place. The batches
  are pickles; they are read with an unpickler that only rebuilds numpy arrays, so a
  tampered file cannot run code.
- SVHN cropped digits: ``train_32x32.mat``, ``test_32x32.mat`` (label 10 means digit 0).

When only one split is present (e.g. the MNIST test split alone), it is split into
train and test here, with a seed, and :attr:`ImageDataset.split_note` says so.

Shapes: images are ``[n, H, W, C]`` uint8, labels ``[n]`` int64 (class 0..9).

What is refused (InputError naming the file and the value): a truncated or corrupt file;
an IDX header whose dimensions are 0 or do not match the bytes that follow; pixels that
are not uint8 -- an integer array is taken when every value is in 0..255, a float array
never (whether it means 0..1 or 0..255 would be a guess, and it may hold NaN); labels
that are not integers or lie outside 0..9 (SVHN: 0..10); images and labels of different
counts; train and test images of different shapes.
"""

from __future__ import annotations

import gzip
import io
import math
import os
import pickle
import tarfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from samflow.errors import InputError

DATASETS: tuple[str, ...] = ("mnist", "cifar10", "svhn")

DEFAULT_CLASSES: dict[str, tuple[int, int]] = {
    # 3 vs 8: the classic hard MNIST pair. The digits share most strokes; what tells
    # them apart is thin and partly an absence of ink (the open left side of a 3), so
    # weak features and dark pixels carry real evidence, which is what the effect is about.
    "mnist": (3, 8),
    # The same digits in street-view photographs, for a like-for-like comparison.
    "svhn": (3, 8),
    # airplane vs automobile: the first two classes; a small CNN separates them in a few
    # hundred steps, and sky backgrounds make "dark pixels" differ between the classes.
    "cifar10": (0, 1),
}

CLASS_NAMES: dict[str, tuple[str, ...]] = {
    "mnist": tuple(str(k) for k in range(10)),
    "svhn": tuple(str(k) for k in range(10)),
    "cifar10": (
        "airplane",
        "automobile",
        "bird",
        "cat",
        "deer",
        "dog",
        "frog",
        "horse",
        "ship",
        "truck",
    ),
}

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


@dataclass(frozen=True)
class ImageDataset:
    """A data set read from disk.

    Attributes:
        name: ``mnist``, ``cifar10`` or ``svhn``.
        train: the training split.
        test: the test split.
        source: where it was read from (a path).
        split_note: empty when both splits were on disk; otherwise how train and test
            were made from the one split that was there.
    """

    name: str
    train: ImageSplit
    test: ImageSplit
    source: str
    split_note: str = ""


def default_data_dir() -> Path:
    """``$SAMFLOW_DATA``, else ``$XDG_CACHE_HOME/samflow/data``, else ``~/.cache/...``."""
    env = os.environ.get("SAMFLOW_DATA")
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache).expanduser() / "samflow" / "data"


def resolve_data_dir(data_dir: str | os.PathLike | None) -> Path:
    """The data directory given, or :func:`default_data_dir`."""
    return Path(data_dir).expanduser() if data_dir else default_data_dir()


def _candidate_dirs(data_dir: Path, name: str) -> list[Path]:
    extra = {"mnist": ["MNIST/raw"], "cifar10": ["cifar-10"], "svhn": []}[name]
    return [data_dir, data_dir / name, *(data_dir / e for e in extra)]


def _missing(name: str, looked_for: str, data_dir: Path) -> InputError:
    dirs = ", ".join(str(d) for d in _candidate_dirs(data_dir, name))
    return InputError(
        f"no {name} data found: looked for {looked_for} in {dirs}; "
        f"get it with: samflow data download {name} --dir {data_dir}"
    )


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


def _find_idx(folder: Path, prefix: str, kind: str) -> Path | None:
    magic_name = {"images": "idx3", "labels": "idx1"}[kind]
    for sep in ("-", "."):
        for suffix in (".gz", ""):
            path = folder / f"{prefix}-{kind}{sep}{magic_name}-ubyte{suffix}"
            if path.is_file():
                return path
    return None


def _idx_split(images_path: Path, labels_path: Path) -> ImageSplit:
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


def _load_mnist(data_dir: Path) -> tuple[dict[str, ImageSplit], str]:
    for folder in _candidate_dirs(data_dir, "mnist"):
        found: dict[str, ImageSplit] = {}
        for split, prefix in (("train", "train"), ("test", "t10k")):
            images = _find_idx(folder, prefix, "images")
            labels = _find_idx(folder, prefix, "labels")
            if images is not None and labels is not None:
                found[split] = _idx_split(images, labels)
        if found:
            return found, str(folder)
        npz = folder / "mnist.npz"
        if npz.is_file():
            try:
                with np.load(npz, allow_pickle=False) as f:
                    arrays = {k: f[k] for k in ("x_train", "y_train", "x_test", "y_test") if k in f}
            except (OSError, ValueError, EOFError, zlib.error, zipfile.BadZipFile) as err:
                raise InputError(f"{npz}: unreadable or truncated npz file ({err})") from None
            for split in ("train", "test"):
                x, y = arrays.get(f"x_{split}"), arrays.get(f"y_{split}")
                if x is not None and y is not None:
                    if x.ndim != 3:
                        raise InputError(
                            f"{npz}: x_{split} has shape {x.shape}, expected [n, 28, 28]"
                        )
                    where = f"{npz} x_{split}/y_{split}"
                    found[split] = _check_split(
                        ImageSplit(
                            _pixels(x, f"{npz} x_{split}")[..., None],
                            _labels(y, f"{npz} y_{split}"),
                        ),
                        where,
                    )
            if not found:
                raise InputError(f"{npz}: no x_train/y_train or x_test/y_test arrays")
            return found, str(npz)
    raise _missing(
        "mnist",
        "train-/t10k-images-idx3-ubyte[.gz] with their labels, or mnist.npz",
        data_dir,
    )


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


def _cifar_batch(raw: bytes, where: str) -> ImageSplit:
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


def _cifar_from_members(read, names: set[str], where: str) -> dict[str, ImageSplit]:
    found: dict[str, ImageSplit] = {}
    train = [_cifar_batch(read(b), f"{where}/{b}") for b in CIFAR_TRAIN_BATCHES if b in names]
    if train:
        found["train"] = _concat(train)
    if "test_batch" in names:
        found["test"] = _cifar_batch(read("test_batch"), f"{where}/test_batch")
    return found


def _load_cifar10(data_dir: Path) -> tuple[dict[str, ImageSplit], str]:
    wanted = {*CIFAR_TRAIN_BATCHES, "test_batch"}
    for folder in _candidate_dirs(data_dir, "cifar10"):
        for batches in (folder / "cifar-10-batches-py", folder):
            names = {n for n in wanted if (batches / n).is_file()}
            if names:
                found = _cifar_from_members(
                    lambda b, d=batches: (d / b).read_bytes(), names, str(batches)
                )
                return found, str(batches)
        archive = folder / "cifar-10-python.tar.gz"
        if archive.is_file():
            try:
                with tarfile.open(archive, "r:gz") as tar:
                    members = {Path(m.name).name: m for m in tar.getmembers() if m.isfile()}
                    names = wanted & set(members)

                    def read(b: str, tar=tar, members=members) -> bytes:
                        return tar.extractfile(members[b]).read()

                    found = _cifar_from_members(read, names, str(archive))
            except (tarfile.TarError, EOFError, OSError, zlib.error) as err:
                raise InputError(f"{archive}: truncated or corrupt archive ({err})") from None
            if not found:
                raise InputError(f"{archive}: no data_batch_* or test_batch inside")
            return found, str(archive)
    raise _missing(
        "cifar10",
        "cifar-10-batches-py/ (data_batch_1..5, test_batch) or cifar-10-python.tar.gz",
        data_dir,
    )


def _svhn_mat(path: Path) -> ImageSplit:
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


def _load_svhn(data_dir: Path) -> tuple[dict[str, ImageSplit], str]:
    for folder in _candidate_dirs(data_dir, "svhn"):
        found = {
            split: _svhn_mat(folder / f"{split}_32x32.mat")
            for split in ("train", "test")
            if (folder / f"{split}_32x32.mat").is_file()
        }
        if found:
            return found, str(folder)
    raise _missing("svhn", "train_32x32.mat, test_32x32.mat", data_dir)


_LOADERS = {"mnist": _load_mnist, "cifar10": _load_cifar10, "svhn": _load_svhn}


def load_dataset(
    name: str,
    data_dir: str | os.PathLike | None = None,
    *,
    split_seed: int = 0,
    test_fraction: float = 0.25,
) -> ImageDataset:
    """Read data set ``name`` from ``data_dir`` (see the module docstring for where).

    If only one split is on disk, a seeded random ``test_fraction`` of it becomes the
    test split and the rest the training split; ``split_note`` records this.
    """
    if name not in _LOADERS:
        raise InputError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
    root = resolve_data_dir(data_dir)
    found, source = _LOADERS[name](root)
    shapes = {split: s.images.shape[1:] for split, s in found.items()}
    if len(set(shapes.values())) > 1:
        raise InputError(
            f"{source}: training images are {shapes['train']} but test images "
            f"{shapes['test']} ([H, W, C]); both splits must have one shape"
        )
    if "train" in found and "test" in found:
        return ImageDataset(name, found["train"], found["test"], source)
    [(only, split)] = found.items()
    rng = np.random.default_rng(split_seed)
    order = rng.permutation(split.n)
    n_test = max(1, round(test_fraction * split.n))
    test_idx, train_idx = order[:n_test], order[n_test:]
    note = (
        f"only the {only} split was found in {source}; it was split at random "
        f"(seed {split_seed}) into {train_idx.size} training and {test_idx.size} test images"
    )
    return ImageDataset(
        name,
        ImageSplit(split.images[train_idx], split.labels[train_idx]),
        ImageSplit(split.images[test_idx], split.labels[test_idx]),
        source,
        note,
    )


Classes = tuple[tuple[int, ...], tuple[int, ...]]
"""The two sides of a binary task, each one class or a group of classes."""


@dataclass(frozen=True)
class BinaryTask:
    """A two-class problem ready for training.

    Attributes:
        x_train: ``[n_train, C, H, W]`` float32 network inputs (normalised if asked).
        y_train: ``[n_train]`` float32 labels in {-1, +1}.
        x_test: ``[n_test, C, H, W]`` float32.
        y_test: ``[n_test]`` float32 in {-1, +1}.
        raw_test: ``[n_test, H, W, C]`` float32 test pixels in [0, 1] before
            normalisation: background masks and figures use these.
        classes: the two sides ``(A, B)``, tuples of class indices (one each for a pair
            of classes); images of ``A`` are labelled -1 and those of ``B`` +1.
        class_names: names of ``A`` and ``B`` (a group's names joined by ``+``).
        mean, std: ``[C]`` per-channel statistics of the training pixels in [0, 1]
            used to normalise (0 and 1 when not normalised).
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    raw_test: np.ndarray
    classes: Classes
    class_names: tuple[str, str]
    mean: np.ndarray
    std: np.ndarray


def class_groups(classes: tuple) -> Classes:
    """``(a, b)`` with each side a class index or a sequence of them -> two tuples."""
    if len(classes) != 2:
        raise InputError(f"a binary task needs two sides, got {classes!r}")
    groups = tuple(
        (int(side),) if np.ndim(side) == 0 else tuple(int(c) for c in side) for side in classes
    )
    if set(groups[0]) & set(groups[1]):
        raise InputError(f"the two sides share classes: {classes!r}")
    return groups[0], groups[1]


def classes_text(classes: Classes) -> str:
    """The ``--classes`` spelling of ``classes``: ``3,8`` or ``0+1+2+3+4,5+6+7+8+9``."""
    return ",".join("+".join(str(c) for c in side) for side in classes)


def parse_classes(text: str | None, dataset: str) -> Classes:
    """``"A,B"`` -> the two sides; the data set's default pair for None.

    A side is a class (``3``, or a name such as ``airplane``) or several joined by ``+``
    (``0+1+2+3+4``): a binary task between two groups of classes, which can use every
    image of a data set (``--classes 0+1+2+3+4,5+6+7+8+9``).
    """
    if text is None:
        return class_groups(DEFAULT_CLASSES[dataset])
    names = CLASS_NAMES[dataset]
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 2:
        raise InputError(f"--classes needs two classes (or groups A+B) as A,B, got {text!r}")
    sides = []
    for part in parts:
        side = []
        for p in (q.strip() for q in part.split("+")):
            if p.isdigit() and int(p) < len(names):
                side.append(int(p))
            elif p in names:
                side.append(names.index(p))
            else:
                raise InputError(f"--classes: {p!r} is not a class of {dataset} (0..9 or a name)")
        if len(set(side)) != len(side):
            raise InputError(f"--classes: {part!r} names a class twice")
        sides.append(tuple(side))
    if set(sides[0]) & set(sides[1]):
        what = "two different classes" if len(sides[0]) == len(sides[1]) == 1 else "disjoint groups"
        raise InputError(f"--classes needs {what}, got {text!r}")
    return sides[0], sides[1]


def _pick(split: ImageSplit, classes: Classes, n: int | None, rng) -> ImageSplit:
    keep = np.flatnonzero(np.isin(split.labels, classes[0] + classes[1]))
    if n is not None and n < keep.size:
        keep = np.sort(rng.choice(keep, size=n, replace=False))
    return ImageSplit(split.images[keep], split.labels[keep])


def binary_task(
    dataset: ImageDataset,
    classes: tuple | None = None,
    *,
    n_train: int | None = None,
    n_test: int | None = None,
    normalise: bool = True,
    seed: int = 0,
) -> BinaryTask:
    """Images of two classes (or groups of classes: :func:`class_groups`), labels -1
    (first side) / +1 (second), optional subsample.

    ``normalise`` subtracts the per-channel mean and divides by the standard deviation
    of the training pixels; then dark background is a constant nonzero input, as it is
    for networks trained on standardised data, rather than exactly zero.
    """
    classes = class_groups(classes if classes is not None else DEFAULT_CLASSES[dataset.name])
    names = CLASS_NAMES[dataset.name]
    rng = np.random.default_rng(seed)

    def side_name(side: tuple[int, ...]) -> str:
        return "+".join(names[c] for c in side)

    def label(side: tuple[int, ...]) -> str:
        digits = "+".join(str(c) for c in side)
        text = side_name(side)
        return f"class {digits}" if text == digits else f"class {digits} ({text})"

    splits = {}
    for what, full, n in (("training", dataset.train, n_train), ("test", dataset.test, n_test)):
        split = _pick(full, classes, n, rng)
        for side, other in ((classes[0], classes[1]), (classes[1], classes[0])):
            if not np.any(np.isin(full.labels, side)):
                raise InputError(
                    f"{dataset.name}: the {what} split ({full.n} images, {dataset.source}) "
                    f"has no images of {label(side)} and "
                    f"{int(np.sum(np.isin(full.labels, other)))} of {label(other)}; "
                    "need both classes"
                )
            if not np.any(np.isin(split.labels, side)):
                raise InputError(
                    f"{dataset.name}: the {n} {what} images drawn at random include none of "
                    f"{label(side)}; draw more (n_{'train' if what == 'training' else 'test'})"
                )
        splits[what] = split
    train, test = splits["training"], splits["test"]
    raw_train = train.images.astype(np.float32) / 255.0
    raw_test = test.images.astype(np.float32) / 255.0
    channels = raw_train.shape[-1]
    if normalise:
        mean = raw_train.mean(axis=(0, 1, 2))
        std = raw_train.std(axis=(0, 1, 2))
        std = np.where(std > 0, std, 1.0).astype(np.float32)
    else:
        mean = np.zeros(channels, np.float32)
        std = np.ones(channels, np.float32)

    def net_input(raw: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(((raw - mean) / std).transpose(0, 3, 1, 2), dtype=np.float32)

    def signs(labels: np.ndarray) -> np.ndarray:
        return np.where(np.isin(labels, classes[1]), 1.0, -1.0).astype(np.float32)

    return BinaryTask(
        x_train=net_input(raw_train),
        y_train=signs(train.labels),
        x_test=net_input(raw_test),
        y_test=signs(test.labels),
        raw_test=raw_test,
        classes=classes,
        class_names=(side_name(classes[0]), side_name(classes[1])),
        mean=np.asarray(mean, np.float32),
        std=np.asarray(std, np.float32),
    )
