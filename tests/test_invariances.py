"""The two invariances of balanced l2-SAM on one point (docs/theory/balanced.md#scale-invariance),
on sweeps.

``(u, rho) -> (c u, c rho)`` leaves time alone at L = 2 and scales beta by ``c^2``;
``mu -> s mu`` runs the same trajectory ``s`` times faster (``tau -> tau / s``). Checked
on whole trajectories of an alpha sweep across the three regimes, against the
algebra of the derivation (no closed form of the flow exists); USAM, which has
neither invariance, is the control that shows the comparison can fail.
"""

from __future__ import annotations

import numpy as np

import samflow

MU = np.array([1.0, 2.0, 3.0, 4.0])
ALPHA = np.geomspace(0.1, 3.0, 16)  # collapse, sequential and direct at rho = 1
TAUS = np.r_[0.0, np.geomspace(1e-3, 20.0, 60)]


def beta_sweep(method: str, alpha, rho: float, mu, taus) -> tuple[np.ndarray, np.ndarray]:
    """``beta`` ``[alpha, time, d]`` and the regime ``[alpha]`` of a flow sweep."""
    ds = samflow.sweep(
        method,
        depth=2,
        mu=mu,
        rho=rho,
        axes={"alpha": alpha},
        runner=samflow.Flow(tau_max=float(taus[-1]), save=samflow.At(tuple(taus))),
        save_trajectories=True,
    )
    return ds["beta"].values, ds["regime"].values


def relative_error(a: np.ndarray, b: np.ndarray) -> float:
    """Largest error over the records, each relative to the record's norm (beta spans
    many orders of magnitude along a trajectory, and is exactly 0 after a collapse)."""
    scale = np.maximum(np.linalg.norm(b, axis=-1), 1e-300)
    return float(np.max(np.linalg.norm(a - b, axis=-1) / scale))


def test_scaling_u_and_rho_together_at_depth_2():
    c = 3.7
    beta, regime = beta_sweep("sam-l2", ALPHA, 1.0, MU, TAUS)
    beta_c, regime_c = beta_sweep("sam-l2", c * ALPHA, c, MU, TAUS)
    assert set(regime.tolist()) == {1, 2, 3}  # the sweep crosses every regime
    np.testing.assert_array_equal(regime_c, regime)
    # beta = u^2 scales by c^2 at the same tau. Both solves are adaptive with rtol 1e-8
    # and take their own steps; 1e-6 relative is ~100 rtol, far below what a broken
    # invariance would give (USAM below: order 1).
    assert relative_error(beta_c, c**2 * beta) < 1e-6
    usam, _ = beta_sweep("usam", ALPHA, 1.0, MU, TAUS)
    usam_c, _ = beta_sweep("usam", c * ALPHA, c, MU, TAUS)
    assert relative_error(usam_c, c**2 * usam) > 1e-2


def test_scaling_mu_scales_time_at_depth_2():
    s = 2.5
    beta, regime = beta_sweep("sam-l2", ALPHA, 1.0, MU, TAUS)
    beta_s, regime_s = beta_sweep("sam-l2", ALPHA, 1.0, s * MU, TAUS / s)
    np.testing.assert_array_equal(regime_s, regime)
    assert relative_error(beta_s, beta) < 1e-6  # as above: same state, clock s times faster
    # Without the change of clock the trajectories differ: the check can fail.
    beta_same_clock, _ = beta_sweep("sam-l2", ALPHA, 1.0, MU, TAUS / s)
    assert relative_error(beta_s, beta_same_clock) > 1e-2
