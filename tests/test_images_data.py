"""Image files and the data directory: tiny files written here, in every format, and
their error paths (samflow.images.formats, samflow.images.data)."""

from __future__ import annotations

import gzip
import io
import pickle
import sys
import tarfile

import numpy as np
import pytest
import scipy.io

from samflow.errors import InputError
from samflow.images import data

RNG = np.random.default_rng(0)


def idx_bytes(array: np.ndarray, magic: int) -> bytes:
    header = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in array.shape)
    return header + array.astype(np.uint8).tobytes()


def digits(n: int, size: int = 8) -> tuple[np.ndarray, np.ndarray]:
    labels = np.arange(n) % 10
    images = RNG.integers(0, 256, size=(n, size, size), dtype=np.uint8)
    return images, labels.astype(np.uint8)


def write_mnist(folder, splits=("train", "t10k"), gz=True, n=40):
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for prefix in splits:
        images, labels = digits(n)
        for kind, arr, magic in (("images-idx3", images, 2051), ("labels-idx1", labels, 2049)):
            raw = idx_bytes(arr, magic)
            name = f"{prefix}-{kind}-ubyte" + (".gz" if gz else "")
            (folder / name).write_bytes(gzip.compress(raw) if gz else raw)
        written[prefix] = (images, labels)
    return written


@pytest.mark.parametrize("gz", [True, False])
def test_mnist_idx_both_splits(tmp_path, gz):
    written = write_mnist(tmp_path, gz=gz)
    ds = data.load_dataset("mnist", tmp_path)
    assert ds.split_note == ""
    assert ds.train.images.shape == (40, 8, 8, 1)
    np.testing.assert_array_equal(ds.train.images[..., 0], written["train"][0])
    np.testing.assert_array_equal(ds.test.labels, written["t10k"][1])


def test_mnist_in_named_subfolder_and_single_split(tmp_path):
    write_mnist(tmp_path / "mnist", splits=("t10k",), n=40)
    ds = data.load_dataset("mnist", tmp_path, split_seed=3, test_fraction=0.25)
    assert ds.train.n == 30 and ds.test.n == 10
    assert "only the test split" in ds.split_note and "seed 3" in ds.split_note
    again = data.load_dataset("mnist", tmp_path, split_seed=3, test_fraction=0.25)
    np.testing.assert_array_equal(ds.test.images, again.test.images)


def test_mnist_npz(tmp_path):
    x, y = digits(20)
    np.savez(tmp_path / "mnist.npz", x_train=x, y_train=y, x_test=x[:10], y_test=y[:10])
    ds = data.load_dataset("mnist", tmp_path)
    assert ds.train.n == 20 and ds.test.n == 10 and ds.train.images.shape[-1] == 1


def cifar_batch(n: int) -> tuple[bytes, np.ndarray, np.ndarray]:
    pixels = RNG.integers(0, 256, size=(n, 3072), dtype=np.uint8)
    labels = list(np.arange(n) % 10)
    return pickle.dumps({b"data": pixels, b"labels": labels}, protocol=2), pixels, labels


def test_cifar_folder_and_archive(tmp_path):
    folder = tmp_path / "a" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    batches = {}
    for name in ("data_batch_1", "data_batch_2", "test_batch"):
        raw, pixels, _ = cifar_batch(12)
        (folder / name).write_bytes(raw)
        batches[name] = (raw, pixels)
    ds = data.load_dataset("cifar10", tmp_path / "a")
    assert ds.train.images.shape == (24, 32, 32, 3) and ds.test.n == 12
    # Row layout: the red plane first, so pixel (0, 0) red is column 0, green 1024.
    pixels = batches["data_batch_1"][1]
    assert ds.train.images[0, 0, 0, 0] == pixels[0, 0]
    assert ds.train.images[0, 0, 0, 1] == pixels[0, 1024]

    archive = tmp_path / "b" / "cifar10" / "cifar-10-python.tar.gz"
    archive.parent.mkdir(parents=True)
    with tarfile.open(archive, "w:gz") as tar:
        for name, (raw, _) in batches.items():
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
    from_tar = data.load_dataset("cifar10", tmp_path / "b")
    np.testing.assert_array_equal(from_tar.train.images, ds.train.images)


def test_cifar_refuses_code_in_pickle(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    (folder / "test_batch").write_bytes(pickle.dumps({b"data": print}))
    with pytest.raises(InputError, match="refusing"):
        data.load_dataset("cifar10", tmp_path)


def test_svhn_mat(tmp_path):
    x = RNG.integers(0, 256, size=(32, 32, 3, 5), dtype=np.uint8)
    y = np.array([[10], [1], [2], [3], [10]], dtype=np.uint8)
    (tmp_path / "svhn").mkdir()
    for split in ("train", "test"):
        scipy.io.savemat(tmp_path / "svhn" / f"{split}_32x32.mat", {"X": x, "y": y})
    ds = data.load_dataset("svhn", tmp_path)
    assert ds.train.images.shape == (5, 32, 32, 3)
    np.testing.assert_array_equal(ds.train.labels, [0, 1, 2, 3, 0])
    np.testing.assert_array_equal(ds.train.images[2], x[..., 2])


def test_missing_data_message(tmp_path):
    with pytest.raises(InputError) as err:
        data.load_dataset("mnist", tmp_path)
    msg = str(err.value)
    assert "\n" not in msg
    assert "t10k-images-idx3-ubyte" in msg and "mnist.npz" in msg
    assert str(tmp_path) in msg and f"samflow data download mnist --dir {tmp_path}" in msg
    for name in ("cifar10", "svhn"):
        with pytest.raises(InputError, match=f"samflow data download {name}"):
            data.load_dataset(name, tmp_path)


@pytest.mark.parametrize("gz", [True, False])
def test_truncated_idx(tmp_path, gz):
    write_mnist(tmp_path, gz=False)
    path = tmp_path / "train-images-idx3-ubyte"
    raw = path.read_bytes()[:-7]
    if gz:
        path.unlink()
        path, raw = tmp_path / "train-images-idx3-ubyte.gz", gzip.compress(raw)
    path.write_bytes(raw)
    with pytest.raises(InputError, match="truncated"):
        data.load_dataset("mnist", tmp_path)


def test_truncated_gzip_stream(tmp_path):
    write_mnist(tmp_path, gz=True)
    path = tmp_path / "t10k-labels-idx1-ubyte.gz"
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(InputError, match="truncated"):
        data.load_dataset("mnist", tmp_path)


def test_wrong_idx_magic(tmp_path):
    write_mnist(tmp_path, gz=False)
    # Labels where images belong: magic 2049 instead of 2051.
    _, labels = digits(40)
    (tmp_path / "train-images-idx3-ubyte").write_bytes(idx_bytes(labels, 2049))
    with pytest.raises(InputError, match="magic number 2049"):
        data.load_dataset("mnist", tmp_path)


def test_truncated_cifar_archive_and_bad_svhn(tmp_path):
    raw, _, _ = cifar_batch(4)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("cifar-10-batches-py/test_batch")
        info.size = len(raw)
        tar.addfile(info, io.BytesIO(raw))
    (tmp_path / "cifar-10-python.tar.gz").write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    with pytest.raises(InputError, match=r"cifar-10-python\.tar\.gz"):
        data.load_dataset("cifar10", tmp_path)
    (tmp_path / "test_32x32.mat").write_bytes(b"MATLAB 5.0 MAT-file, truncated")
    with pytest.raises(InputError, match=r"test_32x32\.mat"):
        data.load_dataset("svhn", tmp_path)


def test_idx_labels_outside_0_to_9(tmp_path):
    write_mnist(tmp_path, gz=False)
    _, labels = digits(40)
    path = tmp_path / "train-labels-idx1-ubyte"
    path.write_bytes(idx_bytes(labels + 10, 2049))  # every label shifted by 10
    with pytest.raises(InputError, match=r"40 of 40 labels are outside the expected range 0\.\.9"):
        data.load_dataset("mnist", tmp_path)
    labels[7] = 12
    path.write_bytes(idx_bytes(labels, 2049))
    with pytest.raises(InputError, match=r"train-labels-idx1-ubyte: .*label 12 at index 7"):
        data.load_dataset("mnist", tmp_path)


def idx_with_dims(dims: tuple[int, ...], magic: int, payload: bytes) -> bytes:
    return magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in dims) + payload


@pytest.mark.parametrize(
    "dims, payload, message",
    [
        ((2**32 - 1,) * 3, b"\0" * 64, r"promise 79228162458924105385300197375 bytes"),
        ((40, 8, 8), b"\0" * (40 * 64 + 9), r"promise 2560 bytes of data but 2569 follow"),
        ((40, 0, 0), b"", r"dimensions \(40, 0, 0\); none may be 0"),
        ((0, 8, 8), b"", r"dimensions \(0, 8, 8\); none may be 0"),
    ],
)
def test_idx_header_that_does_not_fit_the_file(tmp_path, dims, payload, message):
    write_mnist(tmp_path, gz=False)
    (tmp_path / "train-images-idx3-ubyte").write_bytes(idx_with_dims(dims, 2051, payload))
    with pytest.raises(InputError, match=rf"train-images-idx3-ubyte: .*{message}"):
        data.load_dataset("mnist", tmp_path)


def test_idx_count_mismatch_names_both_files(tmp_path):
    write_mnist(tmp_path, gz=False)
    _, labels = digits(30)
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(idx_bytes(labels, 2049))
    with pytest.raises(InputError, match=r"holds 40 images but .*labels-idx1-ubyte holds 30"):
        data.load_dataset("mnist", tmp_path)


@pytest.mark.parametrize(
    "x, message",
    [
        (np.full((4, 8, 8), 0.5), r"x_train: pixels are float64; expected uint8"),
        (np.full((4, 8, 8), np.nan, np.float32), r"pixels are float32 and contain NaN"),
        (np.full((4, 8, 8), 300, np.int16), r"pixel values 300\.\.300 are outside 0\.\.255"),
        (np.full((4, 8, 8), -1, np.int64), r"pixel values -1\.\.-1 are outside 0\.\.255"),
        (np.zeros((4, 0, 0), np.uint8), r"images are 0x0 pixels"),
        (np.zeros((0, 8, 8), np.uint8), r"no images"),
    ],
)
def test_npz_pixels_must_be_bytes(tmp_path, x, message):
    y = np.arange(x.shape[0]) % 10
    np.savez(tmp_path / "mnist.npz", x_train=x, y_train=y)
    with pytest.raises(InputError, match=rf"mnist\.npz.*{message}"):
        data.load_dataset("mnist", tmp_path)


def test_npz_integer_pixels_and_labels_accepted_bad_labels_refused(tmp_path):
    x = RNG.integers(0, 256, size=(10, 8, 8)).astype(np.int64)
    y = np.arange(10.0)
    np.savez(tmp_path / "mnist.npz", x_train=x, y_train=y, x_test=x, y_test=y)
    ds = data.load_dataset("mnist", tmp_path)
    assert ds.train.images.dtype == np.uint8 and ds.train.labels.dtype == np.int64
    np.testing.assert_array_equal(ds.train.images[..., 0], x)
    for y, message in ((np.full(10, np.nan), "float64 with NaN"), (np.full(10, 2.5), "float64")):
        np.savez(tmp_path / "mnist.npz", x_train=x, y_train=y)
        with pytest.raises(InputError, match=rf"y_train: labels are {message}"):
            data.load_dataset("mnist", tmp_path)


def test_truncated_npz(tmp_path):
    x, y = digits(20)
    np.savez(tmp_path / "mnist.npz", x_train=x, y_train=y)
    raw = (tmp_path / "mnist.npz").read_bytes()
    (tmp_path / "mnist.npz").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(InputError, match=r"mnist\.npz: unreadable or truncated"):
        data.load_dataset("mnist", tmp_path)


def test_svhn_refuses_float_pixels_and_shifted_labels(tmp_path):
    path = tmp_path / "test_32x32.mat"
    good_y = np.array([[10], [1], [2]], dtype=np.uint8)
    scipy.io.savemat(path, {"X": np.full((32, 32, 3, 3), np.nan), "y": good_y})
    with pytest.raises(InputError, match=r"test_32x32\.mat X: pixels are float64 and contain NaN"):
        data.load_dataset("svhn", tmp_path)
    x = RNG.integers(0, 256, size=(32, 32, 3, 3), dtype=np.uint8)
    scipy.io.savemat(path, {"X": x, "y": good_y + 10})
    with pytest.raises(InputError, match=r"test_32x32\.mat y: 3 of 3 labels .* range 0\.\.10"):
        data.load_dataset("svhn", tmp_path)
    scipy.io.savemat(path, {"X": x, "y": good_y.astype(np.float64)})  # MATLAB's doubles
    ds = data.load_dataset("svhn", tmp_path)
    assert sorted([*ds.train.labels, *ds.test.labels]) == [0, 1, 2]


def test_cifar_refuses_float_pixels_and_labels_out_of_range(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    batch = {b"data": np.full((2, 3072), 0.5), b"labels": [0, 1]}
    (folder / "test_batch").write_bytes(pickle.dumps(batch, protocol=2))
    with pytest.raises(InputError, match=r"test_batch: pixels are float64"):
        data.load_dataset("cifar10", tmp_path)
    batch = {b"data": np.zeros((2, 3072), np.uint8), b"labels": [10, 11]}
    (folder / "test_batch").write_bytes(pickle.dumps(batch, protocol=2))
    with pytest.raises(InputError, match=r"test_batch: 2 of 2 labels are outside .* 10\.\.11"):
        data.load_dataset("cifar10", tmp_path)


def test_train_and_test_of_different_shapes(tmp_path):
    x, y = digits(10)
    np.savez(tmp_path / "mnist.npz", x_train=x, y_train=y, x_test=x[:, :4, :4], y_test=y)
    with pytest.raises(InputError, match=r"\(8, 8, 1\) but test images \(4, 4, 1\)"):
        data.load_dataset("mnist", tmp_path)


def test_default_data_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("SAMFLOW_DATA", str(tmp_path))
    assert data.default_data_dir() == tmp_path
    monkeypatch.delenv("SAMFLOW_DATA")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert data.default_data_dir() == tmp_path / "cache" / "samflow" / "data"


def test_builtin_digits_are_sklearns_pixels_split_once(tmp_path):
    """The built-in digits: every one of scikit-learn's 1,797 8x8 images, once, as uint8
    ``round(v * 255 / 16)`` of its 0..16 counts (exact: integer arithmetic on both
    sides), labels as given, split at random with the seed; no data directory used."""
    from sklearn.datasets import load_digits

    raw = load_digits()
    ds = data.load_dataset("digits", tmp_path / "not-there", split_seed=0)
    assert ds.name == "digits" and "load_digits" in ds.source and "built in" in ds.source
    assert "one set of 1797 images" in ds.split_note and "seed 0" in ds.split_note
    for split in (ds.train, ds.test):
        assert split.images.shape[1:] == (8, 8, 1) and split.images.dtype == np.uint8
        assert split.labels.dtype == np.int64
    assert (ds.train.n, ds.test.n) == (1348, 449)  # test_fraction 0.25 of 1797, rounded
    # Undo the seeded split: load_dataset puts order[:n_test] in test, the rest in train.
    order = np.random.default_rng(0).permutation(1797)
    images = np.empty((1797, 8, 8, 1), np.uint8)
    labels = np.empty(1797, np.int64)
    images[order[449:]], labels[order[449:]] = ds.train.images, ds.train.labels
    images[order[:449]], labels[order[:449]] = ds.test.images, ds.test.labels
    np.testing.assert_array_equal(labels, raw.target)
    expected = np.rint(raw.images * 255 / 16).astype(np.uint8)
    np.testing.assert_array_equal(images[..., 0], expected)
    assert images.max() == 255 and images.min() == 0
    # Another seed, another split of the same images.
    other = data.load_dataset("digits", split_seed=1)
    assert not np.array_equal(other.test.labels, ds.test.labels)


def test_builtin_digits_class_pair_and_task():
    """The default pair is 3 vs 8 (as for MNIST): only those images, 3 labelled -1 and
    8 labelled +1, every one of them when no subsample is asked; a named pair works."""
    from sklearn.datasets import load_digits

    from samflow.images import tasks

    target = load_digits().target
    ds = data.load_dataset("digits")
    assert tasks.parse_classes(None, "digits") == ((3,), (8,))
    task = tasks.binary_task(ds, normalise=False)
    assert task.class_names == ("3", "8")
    n_train, n_test = task.x_train.shape[0], task.x_test.shape[0]
    assert n_train + n_test == np.sum(target == 3) + np.sum(target == 8)
    assert task.x_train.shape[1:] == (1, 8, 8)
    train_3 = int(np.sum(np.isin(ds.train.labels, 3)))
    assert int(np.sum(task.y_train == -1)) == train_3
    assert int(np.sum(task.y_train == 1)) == n_train - train_3
    # raw pixels in [0, 1]: uint8 / 255, the dark background exactly 0
    assert task.raw_test.min() == 0.0 and task.raw_test.max() == 1.0
    assert tasks.parse_classes("1,7", "digits") == ((1,), (7,))
    with pytest.raises(InputError, match="not a class of digits"):
        tasks.parse_classes("1,airplane", "digits")


def test_builtin_digits_without_scikit_learn_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)  # import fails
    with pytest.raises(InputError, match="need scikit-learn") as err:
        data.load_dataset("digits")
    assert "\n" not in str(err.value)


def test_unknown_dataset_names_the_builtin_too():
    with pytest.raises(InputError, match="mnist, cifar10, svhn, digits"):
        data.load_dataset("fashion")
