"""Binary tasks from image data sets (samflow.images.tasks): classes, groups, labels,
subsampling, normalisation, and the errors that name a missing class."""

from __future__ import annotations

import numpy as np
import pytest
from test_images_data import write_mnist

from samflow.errors import InputError
from samflow.images import data, formats, tasks


def test_binary_task(tmp_path):
    write_mnist(tmp_path, n=100)
    ds = data.load_dataset("mnist", tmp_path)
    task = tasks.binary_task(ds, (3, 8), n_train=15, seed=1)
    assert task.x_train.shape == (15, 1, 8, 8) and task.x_train.dtype == np.float32
    assert set(np.unique(task.y_train)) == {-1.0, 1.0}
    assert task.x_test.shape[0] == 20  # all 3s and 8s of the test split
    assert task.raw_test.min() >= 0 and task.raw_test.max() <= 1
    # Standardised pixels have unit scale; their float32 mean (960 values) is zero to
    # ~sqrt(960) eps = 4e-6 of that scale.
    np.testing.assert_allclose(task.x_train.mean(), 0.0, atol=1e-5)
    plain = tasks.binary_task(ds, (3, 8), normalise=False)
    np.testing.assert_allclose(plain.x_test.transpose(0, 2, 3, 1), plain.raw_test)
    no_eights = data.ImageDataset(
        "mnist", ds.train, formats.ImageSplit(ds.test.images[:8], ds.test.labels[:8]), "here"
    )
    with pytest.raises(InputError, match="need both"):
        tasks.binary_task(no_eights, (3, 8))


def test_binary_task_between_groups_of_classes(tmp_path):
    write_mnist(tmp_path, n=100)
    ds = data.load_dataset("mnist", tmp_path)
    low, high = (0, 1, 2, 3, 4), (5, 6, 7, 8, 9)
    task = tasks.binary_task(ds, (low, high), normalise=False)
    assert task.x_test.shape[0] == ds.test.n  # every image is on one side
    np.testing.assert_array_equal(task.y_test, np.where(ds.test.labels >= 5, 1.0, -1.0))
    assert task.classes == (low, high) and task.class_names == ("0+1+2+3+4", "5+6+7+8+9")
    with pytest.raises(InputError, match="share classes"):
        tasks.binary_task(ds, ((1, 2), (2, 3)))


def test_parse_classes():
    assert tasks.parse_classes(None, "mnist") == ((3,), (8,))
    assert tasks.parse_classes("airplane,ship", "cifar10") == ((0,), (8,))
    groups = tasks.parse_classes("0+1+2+3+4, 5+6+7+8+9", "mnist")
    assert groups == ((0, 1, 2, 3, 4), (5, 6, 7, 8, 9))
    assert tasks.classes_text(groups) == "0+1+2+3+4,5+6+7+8+9"
    for bad in ("3", "3,3", "3,x", "1,2,3", "1+2,2+3", "1+1,2", "3+,8"):
        with pytest.raises(InputError):
            tasks.parse_classes(bad, "mnist")


def test_class_without_images_is_named(tmp_path):
    write_mnist(tmp_path, n=100)
    ds = data.load_dataset("mnist", tmp_path)
    keep = ds.test.labels != 8
    no_eights = data.ImageDataset(
        "mnist", ds.train, formats.ImageSplit(ds.test.images[keep], ds.test.labels[keep]), "here"
    )
    with pytest.raises(
        InputError, match=r"test split \(90 images, here\) has no images of class 8"
    ):
        tasks.binary_task(no_eights, (3, 8))
    with pytest.raises(InputError, match=r"the 1 training images drawn .* none of class"):
        tasks.binary_task(ds, (3, 8), n_train=1)
    no_cars = ds.train.labels != 1
    cifar = data.ImageDataset(
        "cifar10",
        formats.ImageSplit(ds.train.images[no_cars], ds.train.labels[no_cars]),
        ds.test,
        "x",
    )
    with pytest.raises(InputError, match=r"training split .* no images of class 1 \(automobile\)"):
        tasks.binary_task(cifar, (0, 1))
