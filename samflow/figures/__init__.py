"""The figures: one module per figure, each with ``build(out_dir, quick) -> list[Path]``.

``samflow figures`` builds them in this order (what each shows: ``docs/figures.md``):

- ``phase_l2``: l2-SAM regime map over (alpha, rho) at L = 2, GD beside it;
- ``staircase``: dominant coordinate over (alpha, tau), minor first, major last;
- ``timelines``: beta_j / ||beta||_1 against tau, one alpha per regime, and the loss;
- ``linf_limit``: the initialisation-dependent limit of linf-SAM at L = 2, 3, 4;
- ``depth``: the staircase at L = 1, 2, 3, 4 side by side;
- ``depth1_max_margin``: at L = 1 every method finds the l2 max-margin direction;
- ``multipoint``: many points with features of different scales (beyond the paper);
- ``usam``: USAM against l2-SAM, what the normalisation does (beyond the paper);
- ``discrete_vs_flow``: discrete l2-SAM against its flow, error against eta;
- ``flow_validity``: where the flow stops describing discrete SAM, over (eta, alpha),
  with what only the discrete map does and the edges of stability;
- ``gradcam``: CNN Grad-CAM of GD against l2-SAM for every image data set found (none:
  the 8x8 digits built into scikit-learn);
- ``phase_plane``: trajectories in the (beta_1, beta_2) plane, GD, l2-SAM, linf-SAM;
- ``max_margin_l1``: on many points L = 2 finds the l1 max margin, L = 1 the l2 one;
- ``invariant_map``: the l2-SAM edges in alpha / rho over the direction of mu;
- ``kernel_rich``: regression, u^2 - v^2: test error, ||beta||_1 and sharpness against
  alpha for GD, SGD, n-SAM, 1-SAM, with Woodworth's interpolant and the l1 / l2 limits;
- ``saddle_to_saddle``: u^2 - v^2 flows against t / log(1/alpha) with Pesme &
  Flammarion's jump times, beside the l2-SAM staircase on the same axes;
- ``sam_sparsity``: 1-SAM against n-SAM against GD on sparse regression, over rho and
  random problems (Andriushchenko & Flammarion's claim).

Each also runs alone: ``python -m samflow.figures.<name> [--quick]``. ``_engine`` is
the sweep runner they share (one compiled program per configuration).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from samflow.errors import InputError

FIGURES = (
    "phase_l2",
    "staircase",
    "timelines",
    "linf_limit",
    "depth",
    "depth1_max_margin",
    "multipoint",
    "usam",
    "discrete_vs_flow",
    "flow_validity",
    "gradcam",
    "phase_plane",
    "max_margin_l1",
    "invariant_map",
    "kernel_rich",
    "saddle_to_saddle",
    "sam_sparsity",
)


def load(name: str) -> ModuleType:
    """The module of figure ``name`` (one of :data:`FIGURES`)."""
    if name not in FIGURES:
        raise InputError(f"unknown figure {name!r}; figures: {', '.join(FIGURES)}")
    return importlib.import_module(f"{__name__}.{name}")


def describe(name: str) -> str:
    """The first line of figure ``name``'s module docstring."""
    doc = load(name).__doc__ or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""
