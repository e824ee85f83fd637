"""Grid axes: parsing ``NAME=START:STOP:NUM[:log|:lin]`` or ``NAME=v1,v2,...`` and checks.

========== =============================================================================
alpha      uniform initialisation scale, w^(l) = alpha for every real layer
alpha_j    per-coordinate scale of coordinate j (1-based), overriding alpha there
rho        SAM radius
depth      number of layers (integers); shapes are padded to the largest depth
eta        step size (discrete runner)
mu         index into a set of mu vectors (``mu_set``, ``[k, d]``); one point each
seed       random initialisations: alpha_j log-uniform in ``alpha_range`` (integers);
           in a stochastic run it keys the steps' draws too
noise_seed the seed of the stochastic steps only (integers; the initialisation stays)
========== =============================================================================
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from samflow.errors import InputError
from samflow.inputs import MAX_LAYERS, check_bytes, real_array

POINT_BYTES = 128
"""The least a grid point's result holds (its summaries): an axis longer than the
machine's memory allows at that rate is refused before its values are made."""

FIXED_AXES = ("alpha", "rho", "depth", "eta", "mu", "seed", "noise_seed")
INTEGER_AXES = ("depth", "seed", "mu", "noise_seed")


@dataclass(frozen=True)
class Axis:
    """One grid axis: its name and values (a 1-D float or int array as a tuple)."""

    name: str
    values: tuple

    def array(self) -> np.ndarray:
        dtype = np.int64 if self.name in INTEGER_AXES else np.float64
        return np.asarray(self.values, dtype=dtype)


def _check_name(name: str, d: int | None) -> None:
    m = re.fullmatch(r"alpha_(\d+)", name)
    if name not in FIXED_AXES and not m:
        raise InputError(f"unknown axis {name!r}; choose from {', '.join(FIXED_AXES)}, alpha_j")
    if m and d is not None and not 1 <= int(m.group(1)) <= d:
        raise InputError(f"axis {name}: coordinate must be 1..{d}")


def make_axis(name: str, values, d: int | None = None) -> Axis:
    """An :class:`Axis` from given values; InputError naming what is wrong."""
    _check_name(name, d)
    if isinstance(values, str):
        raise InputError(f"axis {name}: values must be numbers, got {values!r}")
    values = real_array(f"axis {name}", values)
    if values.ndim > 1:
        raise InputError(
            f"axis {name} takes a flat list of values, got shape {values.shape}: {values.tolist()}"
        )
    values = values.reshape(-1)
    if values.size == 0:
        raise InputError(f"axis {name} is empty")
    if name in INTEGER_AXES:
        if np.any(np.abs(values) >= 2.0**53):
            raise InputError(f"axis {name} takes integers below 2^53, got {values.tolist()}")
        if not np.allclose(values, np.round(values)):
            raise InputError(f"axis {name} takes integers, got {values.tolist()}")
        values = np.round(values).astype(np.int64)
    if len(np.unique(values)) != values.size:
        raise InputError(f"axis {name} repeats a value: {values.tolist()}")
    return Axis(name, tuple(values.tolist()))


def parse_axis(text: str, d: int | None = None) -> Axis:
    """Parse ``NAME=START:STOP:NUM[:log|:lin]`` or ``NAME=v1,v2,...``."""
    if "=" not in text:
        raise InputError(
            f"bad axis {text!r}: expected NAME=START:STOP:NUM[:log|:lin] or NAME=v1,v2"
        )
    name, spec = (s.strip() for s in text.split("=", 1))
    _check_name(name, d)
    if not spec.isascii():  # float() takes other scripts' digits: '١' is 1
        raise InputError(f"bad axis {text!r}: values must be ASCII numbers")
    try:
        if ":" in spec:
            parts = spec.split(":")
            if len(parts) not in (3, 4) or (len(parts) == 4 and parts[3] not in ("log", "lin")):
                raise InputError(f"bad axis {text!r}: expected START:STOP:NUM[:log|:lin]")
            start, stop, num = float(parts[0]), float(parts[1]), int(parts[2])
            scale = parts[3] if len(parts) == 4 else "lin"
            if num < 1:
                raise InputError(f"axis {name}: NUM must be >= 1, got {num}")
            check_bytes(f"axis {name} of {num} points", num * POINT_BYTES)
            if not (np.isfinite(start) and np.isfinite(stop)):
                raise InputError(f"axis {name}: range must be finite, got {spec!r}")
            if scale == "log":
                if start <= 0 or stop <= 0:
                    raise InputError(f"axis {name}: a log range needs positive ends, got {spec!r}")
                values = np.geomspace(start, stop, num)
            else:
                values = np.linspace(start, stop, num)
        else:
            items = spec.split(",")
            if any(not v.strip() for v in items):
                raise InputError(f"bad axis {text!r}: an empty item in the list of values")
            values = np.array([float(v) for v in items])
    except InputError:
        raise
    except ValueError:
        raise InputError(f"bad axis {text!r}: values must be numbers") from None
    return make_axis(name, values, d)


def check_axes(axes: list[Axis] | tuple[Axis, ...], mode: str) -> None:
    """Value checks that depend on the axis (InputError naming the axis)."""
    names = [a.name for a in axes]
    for name in names:
        if names.count(name) > 1:
            raise InputError(f"axis {name} given twice")
    for a in axes:
        v = a.array()
        if a.name in ("alpha", "eta") or a.name.startswith("alpha_"):
            if np.any(v <= 0):
                raise InputError(f"axis {a.name} must be > 0, got {v.tolist()}")
        if a.name == "rho" and np.any(v < 0):
            raise InputError(f"axis rho must be >= 0, got {v.tolist()}")
        if a.name in ("seed", "mu", "noise_seed") and np.any(v < 0):
            raise InputError(f"axis {a.name} must be >= 0, got {v.tolist()}")
        if a.name == "depth" and (np.any(v < 1) or np.any(v > MAX_LAYERS)):
            raise InputError(f"axis depth must lie in 1..{MAX_LAYERS}, got {v.tolist()}")
        if a.name in ("eta", "noise_seed") and mode == "flow":
            raise InputError(f"axis {a.name} needs the discrete runner")
