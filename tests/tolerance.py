"""Float comparisons for the tests: norm-relative or magnitude-aware, never elementwise
relative alone.

Two float32 results of one computation differ by a few roundings: another CPU (AVX-512
kernels sum in another order than AVX2 ones) or another XLA compilation reorders the
reductions. An elementwise relative check then fails wherever an element is near zero,
so each pytree leaf is compared against the scale of the whole leaf. Every call site
says why its tolerance has the size it has.
"""

from __future__ import annotations

import jax
import numpy as np

F32_EPS = float(np.finfo(np.float32).eps)  # 1.19e-7: one float32 rounding, relative

# Two float32 programs that sum the CNN's gradients in different orders (another conv,
# another XLA compilation, YNNPACK on or off, another CPU). The longest reduction is the
# first conv's weight gradient, over n = 16 images x 28 x 28 pixels ~ 1.3e4 products;
# rounding errors add up as a random walk, ~sqrt(n) eps = 1.4e-5 of the leaf's norm
# (measured up to 9.5e-6 on an AVX-512 CPU, YNNPACK against XLA's own kernels). 1e-4
# leaves room for that, and is 4 orders below what a wrong program gives: the YNNPACK
# miscompile of `test_cpu_compiler_options_avoid_an_xla_ynnpack_miscompile` returns
# 1/16 of the value (relative error 0.94), a shifted or mis-padded conv O(1).
CNN_REORDER_RTOL = 1e-4


def _leaf_pairs(actual, desired):
    """Leaf by leaf, as float64 (a list is a pytree: pass a list of numbers as an array)."""
    return zip(
        (np.asarray(a, np.float64) for a in jax.tree_util.tree_leaves(actual)),
        (np.asarray(d, np.float64) for d in jax.tree_util.tree_leaves(desired)),
        strict=True,
    )


def norm_rel(actual, desired) -> float:
    """The largest ``||actual - desired||_2 / ||desired||_2`` over the leaves of two
    pytrees of the same structure (0 where both leaves are 0)."""
    worst = 0.0
    for a, d in _leaf_pairs(actual, desired):
        assert a.shape == d.shape, (a.shape, d.shape)
        error, size = float(np.linalg.norm(a - d)), float(np.linalg.norm(d))
        worst = max(worst, error / size if size > 0 else (np.inf if error > 0 else 0.0))
    return worst


def assert_close(actual, desired, *, rtol: float, atol: float = 0.0, err_msg: str = ""):
    """Per leaf, elementwise: ``|actual - desired| <= rtol |desired| + atol max|desired|``.

    ``rtol`` holds the large elements to a relative error; ``atol`` is relative to the
    leaf's largest finite element, so an element near zero is held to the rounding of
    the leaf's scale, not of its own. NaNs must match.
    """
    for a, d in _leaf_pairs(actual, desired):
        finite = np.abs(d[np.isfinite(d)])
        scale = float(finite.max()) if finite.size else 0.0
        np.testing.assert_allclose(a, d, rtol=rtol, atol=atol * scale, err_msg=err_msg)
