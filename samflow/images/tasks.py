"""Binary tasks from an image data set: two classes or two groups of classes, labels
-1 / +1, an optional seeded subsample, and standardised network inputs.

``parse_classes("3,8", "mnist")`` or ``"0+1+2+3+4,5+6+7+8+9"`` gives the two sides;
:func:`binary_task` makes the arrays training uses (:class:`BinaryTask`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from samflow.errors import InputError
from samflow.images.data import ImageDataset
from samflow.images.formats import ImageSplit

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
    # The built-in 8x8 digits (no download): the MNIST pair again, at 8x8.
    "digits": (3, 8),
}

CLASS_NAMES: dict[str, tuple[str, ...]] = {
    "mnist": tuple(str(k) for k in range(10)),
    "svhn": tuple(str(k) for k in range(10)),
    "digits": tuple(str(k) for k in range(10)),
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
    """The ``classes`` spelling of ``classes``: ``3,8`` or ``0+1+2+3+4,5+6+7+8+9``."""
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
        raise InputError(f"classes needs two classes (or groups A+B) as A,B, got {text!r}")
    sides = []
    for part in parts:
        side = []
        for p in (q.strip() for q in part.split("+")):
            if p.isdigit() and int(p) < len(names):
                side.append(int(p))
            elif p in names:
                side.append(names.index(p))
            else:
                raise InputError(f"classes: {p!r} is not a class of {dataset} (0..9 or a name)")
        if len(set(side)) != len(side):
            raise InputError(f"classes: {part!r} names a class twice")
        sides.append(tuple(side))
    if set(sides[0]) & set(sides[1]):
        what = "two different classes" if len(sides[0]) == len(sides[1]) == 1 else "disjoint groups"
        raise InputError(f"classes needs {what}, got {text!r}")
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
