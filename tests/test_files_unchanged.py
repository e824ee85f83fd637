"""Every file the library writes is the one it wrote before the open-engine redesign
(issue 31), to rounding: a fixed set of commands (:mod:`tests.golden`) against the files
kept in ``tests/golden_files/``."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from tests.golden import COMMANDS, FILES, differences, write


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_file_unchanged(name, tmp_path):
    for path in write(name, tmp_path):
        reference = FILES / path.name
        assert reference.exists(), f"no kept file {reference.name}"
        with xr.open_dataset(reference) as ref, xr.open_dataset(path) as new:
            ref.load()
            new.load()
            assert differences(ref, new) == [], path.name


def test_differences_sees_a_change():
    """The comparison is not blind: a float moved by 1e-6 of itself, an integer label
    changed, an attribute dropped and a variable renamed are each reported."""
    with xr.open_dataset(FILES / "traj_flow_l2.nc") as kept:
        ref = kept.load()
    assert differences(ref, ref.copy(deep=True)) == []
    moved = ref.copy(deep=True)
    moved["beta"].values[3, 1] *= 1 + 1e-6
    assert any(line.startswith("beta:") for line in differences(ref, moved))
    relabelled = ref.copy(deep=True)
    relabelled["regime"].values = np.int8(relabelled["regime"].values + 1)
    assert any(line.startswith("regime:") for line in differences(ref, relabelled))
    stripped = ref.copy(deep=True)
    del stripped.attrs["rho"]
    assert any("attribute rho" in line for line in differences(ref, stripped))
    renamed = ref.rename({"loss": "training_loss"})
    assert any(line.startswith("variables:") for line in differences(ref, renamed))
