"""Image data sets in a data directory: where they are looked for, and how both
splits are made when only one is there.

Where data is looked for: ``--data-dir``, else ``$SAMFLOW_DATA``, else
``$XDG_CACHE_HOME/samflow/data`` (``~/.cache/samflow/data`` when XDG_CACHE_HOME is
unset). Inside it, each data set is found either in the folder itself or in a
subfolder named after the data set (``mnist/``, ``cifar10/``, ``svhn/``), which is
where ``samflow data download NAME --dir DIR`` puts it.

Files read (nothing is extracted or converted on disk; the readers and what they
refuse are :mod:`samflow.images.formats`):

- MNIST: IDX files ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
  ``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte``, each gzipped (``.gz``) or not;
  or the common ``mnist.npz``.
- CIFAR-10, python version: the folder ``cifar-10-batches-py/`` (``data_batch_1..5``,
  ``test_batch``) or the archive ``cifar-10-python.tar.gz``, read in place.
- SVHN cropped digits: ``train_32x32.mat``, ``test_32x32.mat``.

Built in, with no download: ``digits``, scikit-learn's copy of the UCI optical
handwritten digits (1,797 real 8x8 images, 16 grey levels, shipped inside the
scikit-learn package, :func:`sklearn.datasets.load_digits`); its pixels 0..16 are
scaled to 0..255 (``round(v * 255 / 16)``) and it is one split, divided as below.
``data_dir`` plays no part for it. The ``gradcam`` figure falls back to it when none of
the others is found.

When only one split is present (e.g. the MNIST test split alone), it is split into
train and test here, with a seed, and :attr:`ImageDataset.split_note` says so. Train
and test images of different shapes are refused. Binary tasks made from a data set
are :mod:`samflow.images.tasks`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from samflow.errors import InputError
from samflow.images.formats import (
    CIFAR_TRAIN_BATCHES,
    ImageSplit,
    cifar_archive,
    cifar_from_members,
    idx_split,
    mnist_npz,
    svhn_mat,
)
from samflow.io import expand_user

DATASETS: tuple[str, ...] = ("mnist", "cifar10", "svhn")
"""The data sets read from files in a data directory (``samflow data download`` fetches them)."""
BUILTIN: tuple[str, ...] = ("digits",)
"""The data sets that ship inside an installed package: no download, no data directory."""
TITLES: dict[str, str] = {
    "mnist": "MNIST",
    "cifar10": "CIFAR-10",
    "svhn": "SVHN",
    "digits": "8x8 digits built into scikit-learn (load_digits, no download)",
}
"""How figures name each data set."""


@dataclass(frozen=True)
class ImageDataset:
    """A data set read from disk.

    Attributes:
        name: ``mnist``, ``cifar10``, ``svhn`` or ``digits``.
        train: the training split.
        test: the test split.
        source: where it was read from (a path; for ``digits``, the package).
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
        return expand_user(env, "$SAMFLOW_DATA")
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return expand_user(cache, "$XDG_CACHE_HOME") / "samflow" / "data"


def resolve_data_dir(data_dir: str | os.PathLike | None) -> Path:
    """The data directory given (InputError naming a ``~user`` that does not exist),
    or :func:`default_data_dir`."""
    return expand_user(data_dir, "data directory") if data_dir else default_data_dir()


def _candidate_dirs(data_dir: Path, name: str) -> list[Path]:
    extra = {"mnist": ["MNIST/raw"], "cifar10": ["cifar-10"], "svhn": []}[name]
    return [data_dir, data_dir / name, *(data_dir / e for e in extra)]


def _missing(name: str, looked_for: str, data_dir: Path) -> InputError:
    dirs = ", ".join(str(d) for d in _candidate_dirs(data_dir, name))
    return InputError(
        f"no {name} data found: looked for {looked_for} in {dirs}; "
        f"get it with: samflow data download {name} --dir {data_dir}"
    )


def _find_idx(folder: Path, prefix: str, kind: str) -> Path | None:
    magic_name = {"images": "idx3", "labels": "idx1"}[kind]
    for sep in ("-", "."):
        for suffix in (".gz", ""):
            path = folder / f"{prefix}-{kind}{sep}{magic_name}-ubyte{suffix}"
            if path.is_file():
                return path
    return None


def _load_mnist(data_dir: Path) -> tuple[dict[str, ImageSplit], str]:
    for folder in _candidate_dirs(data_dir, "mnist"):
        found: dict[str, ImageSplit] = {}
        for split, prefix in (("train", "train"), ("test", "t10k")):
            images = _find_idx(folder, prefix, "images")
            labels = _find_idx(folder, prefix, "labels")
            if images is not None and labels is not None:
                found[split] = idx_split(images, labels)
        if found:
            return found, str(folder)
        npz = folder / "mnist.npz"
        if npz.is_file():
            return mnist_npz(npz), str(npz)
    raise _missing(
        "mnist",
        "train-/t10k-images-idx3-ubyte[.gz] with their labels, or mnist.npz",
        data_dir,
    )


def _load_cifar10(data_dir: Path) -> tuple[dict[str, ImageSplit], str]:
    wanted = {*CIFAR_TRAIN_BATCHES, "test_batch"}
    for folder in _candidate_dirs(data_dir, "cifar10"):
        for batches in (folder / "cifar-10-batches-py", folder):
            names = {n for n in wanted if (batches / n).is_file()}
            if names:
                found = cifar_from_members(
                    lambda b, d=batches: (d / b).read_bytes(), names, str(batches)
                )
                return found, str(batches)
        archive = folder / "cifar-10-python.tar.gz"
        if archive.is_file():
            return cifar_archive(archive), str(archive)
    raise _missing(
        "cifar10",
        "cifar-10-batches-py/ (data_batch_1..5, test_batch) or cifar-10-python.tar.gz",
        data_dir,
    )


def _load_svhn(data_dir: Path) -> tuple[dict[str, ImageSplit], str]:
    for folder in _candidate_dirs(data_dir, "svhn"):
        found = {
            split: svhn_mat(folder / f"{split}_32x32.mat")
            for split in ("train", "test")
            if (folder / f"{split}_32x32.mat").is_file()
        }
        if found:
            return found, str(folder)
    raise _missing("svhn", "train_32x32.mat, test_32x32.mat", data_dir)


DIGITS_LEVELS = 16
"""load_digits' pixels are counts 0..16 (of 4x4 blocks of a 32x32 bitmap)."""


def _load_digits(data_dir: Path) -> tuple[dict[str, ImageSplit], str]:
    """scikit-learn's 1,797 8x8 digits as one split; ``data_dir`` is not used."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as err:
        raise InputError(
            f"the built-in digits need scikit-learn ({err}); pip install scikit-learn"
        ) from None
    import sklearn

    raw = load_digits()
    pixels = np.asarray(raw.images, dtype=np.float64)
    if pixels.shape[1:] != (8, 8) or pixels.min() < 0 or pixels.max() > DIGITS_LEVELS:
        raise InputError(
            f"scikit-learn's load_digits gave images {pixels.shape} in "
            f"[{pixels.min():g}, {pixels.max():g}], expected [n, 8, 8] in [0, {DIGITS_LEVELS}]"
        )
    images = np.rint(pixels * (255 / DIGITS_LEVELS)).astype(np.uint8)[..., None]
    labels = np.asarray(raw.target, dtype=np.int64)
    source = f"scikit-learn {sklearn.__version__} sklearn.datasets.load_digits (built in)"
    return {"train": ImageSplit(images, labels)}, source


_LOADERS = {
    "mnist": _load_mnist,
    "cifar10": _load_cifar10,
    "svhn": _load_svhn,
    "digits": _load_digits,
}


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
        raise InputError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS + BUILTIN)}")
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
    found_in = (
        f"{source} is one set of {split.n} images"
        if name in BUILTIN
        else f"only the {only} split was found in {source}"
    )
    note = (
        f"{found_in}; it was split at random (seed {split_seed}) into "
        f"{train_idx.size} training and {test_idx.size} test images"
    )
    return ImageDataset(
        name,
        ImageSplit(split.images[train_idx], split.labels[train_idx]),
        ImageSplit(split.images[test_idx], split.labels[test_idx]),
        source,
        note,
    )
