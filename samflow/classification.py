"""How a run's records are read as a regime: :class:`Classification`, its settings.

The classifier itself (:mod:`samflow.regimes`) runs inside the compiled program; its
settings are a small frozen object made, and checked, before JAX loads, so that a bad
value is refused before any compilation. Every default lives here, once: the Python API,
the sweeps, the command line (which reads its defaults and help from the fields) and the
file attributes all take them from this object.
"""

from __future__ import annotations

from dataclasses import dataclass

from samflow.inputs import fraction


@dataclass(frozen=True)
class Classification:
    r"""The settings of regime classification (hashable: part of a program's key).

    Attributes:
        collapse_factor: the scale at which a *record* counts as collapsed, in (0, 1):
            the figures draw records with \(\lVert \beta\rVert_1\) below this fraction of
            \(\lVert \beta(0)\rVert_1\) as collapsed (:func:`samflow.plotting.dominant_codes`), and
            the validity map reads no discrete leader below it. No regime label uses it: a run
            is labelled collapse only by a collapse certificate
            (docs/theory/regimes.md#collapse-certificates), flows and discrete runs alike.
        plateau_fraction: the plateau ends when the loss falls to this fraction of its
            initial value, in (0, 1).

    Raises:
        InputError: a field outside (0, 1), or not a number.

    Examples:
        >>> import samflow
        >>> samflow.Classification(collapse_factor=1e-4)
        Classification(collapse_factor=0.0001, plateau_fraction=0.5)
        >>> samflow.Classification(plateau_fraction=2.0)
        Traceback (most recent call last):
            ...
        samflow.errors.InputError: plateau-fraction must lie in (0, 1), got 2.0
    """

    collapse_factor: float = 1e-3
    plateau_fraction: float = 0.5

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "collapse_factor", fraction("collapse-factor", self.collapse_factor)
        )
        object.__setattr__(
            self, "plateau_fraction", fraction("plateau-fraction", self.plateau_fraction)
        )
