"""The rules' closed-form balanced flows against the generic rescaled field.

``samflow.flows`` integrates a rule's ``BalancedFlow`` (log space, or the linf form)
whenever the start is balanced and positive. Those fields are derived by hand
(docs/theory/flows.md#rescaled-flows-4), so they are checked here against the field the engine
builds from the rule's ``direction`` alone, for every method and depth they serve, and the
two formulations are checked to give the same trajectories.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from runs import save_times, solve_flow

from samflow import METHODS, get_rule
from samflow.flows import rescaled_field
from samflow.init import balanced_start
from samflow.model import DEFAULT, layer_mask, single_point
from samflow.precision import precision


def _generic_du(rule, u, mu, depth, n_layers, rho):
    """du/dtau of a balanced start from the generic field: every real row moves alike."""
    rows = np.asarray(layer_mask(depth, n_layers, np.float64))
    theta = rows * u[None, :] + (1 - rows)
    args = (single_point(jnp.asarray(mu)), jnp.asarray(rows), jnp.asarray(rho), rule, DEFAULT)
    dtheta = np.asarray(rescaled_field(0.0, jnp.asarray(theta), args))
    real = dtheta[:depth]
    np.testing.assert_allclose(real, np.broadcast_to(real[0], real.shape), rtol=1e-13, atol=0)
    np.testing.assert_array_equal(dtheta[depth:], 0.0)  # padding rows do not move
    return real[0]


def _closed_du(rule, u, mu, depth, rho):
    closed = rule.balanced
    y = closed.state(jnp.asarray(u))
    dy = np.asarray(closed.field(0.0, y, (jnp.asarray(mu), jnp.asarray(depth), jnp.asarray(rho))))
    return dy * u if closed.formulation == "log" else dy  # d log u = du / u


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("depth", [1, 2, 3, 4])
def test_closed_form_equals_the_generic_field(method, depth):
    rule = get_rule(method)
    rng = np.random.default_rng(depth * 10 + METHODS.index(method))
    with precision("float64"):
        for _ in range(6):
            d = int(rng.integers(1, 6))
            mu = rng.uniform(0.2, 4.0, d)
            u = rng.uniform(0.05, 3.0, d)
            rho = float(rng.uniform(0.05, 2.0))
            closed = _closed_du(rule, u, mu, depth, rho)
            for n_layers in (depth, 5):  # unpadded and padded to L_max = 5
                generic = _generic_du(rule, u, mu, depth, n_layers, rho)
                np.testing.assert_allclose(closed, generic, rtol=1e-11, atol=1e-14)


def test_closed_forms_cover_both_signs_of_the_perturbed_point():
    """``rho`` large enough that ``w~ = u (1 - r)`` changes sign (odd and even powers)."""
    mu, u = np.array([1.0, 2.0, 3.0]), np.array([0.1, 0.2, 0.3])
    with precision("float64"):
        for method, rho in (("sam-l2", 1.0), ("usam", 1.0), ("sam-linf", 0.15)):
            rule = get_rule(method)
            for depth in (2, 3, 4):
                closed = _closed_du(rule, u, mu, depth, rho)
                generic = _generic_du(rule, u, mu, depth, depth, rho)
                if depth == 2:  # du_j/dtau = mu_j w~_j: the sign of w~ itself
                    assert np.any(generic < 0) and np.any(generic > 0), method
                np.testing.assert_allclose(closed, generic, rtol=1e-11, atol=1e-14)


def test_linf_closed_form_holds_zero_for_even_depth():
    """At u_j = 0 with L even the sign flips around 0: the closed form stops there."""
    rule = get_rule("sam-linf")
    mu, u = np.array([1.0, 2.0]), np.array([0.0, 1.0])
    with precision("float64"):
        assert _closed_du(rule, u, mu, 2, 0.5)[0] == 0.0
        assert _closed_du(rule, u, mu, 3, 0.5)[0] == pytest.approx(0.25)  # mu (0 - rho)^2


@pytest.mark.parametrize("method", ["gd", "sam-l2", "usam"])
@pytest.mark.parametrize("depth", [2, 3])
def test_log_and_linear_trajectories_agree(method, depth):
    """The same solve in log space and in theta space (both tight)."""
    mu = np.array([1.0, 2.0, 3.0, 4.0])
    taus = save_times(8.0 if depth == 2 else 0.55, 40)  # L = 3 blows up near 0.62
    theta0 = balanced_start(0.4, 4, depth)
    kw = dict(rtol=1e-11, atol=1e-13)
    rho = None if method == "gd" else 0.6  # gd takes no rho
    log = solve_flow(single_point(mu), theta0, depth, method, rho, taus, formulation="log", **kw)
    lin = solve_flow(single_point(mu), theta0, depth, method, rho, taus, formulation="linear", **kw)
    assert log.valid.all() and lin.valid.all()
    assert np.isfinite(log.beta).all() and np.max(log.beta[-1] / log.beta[0]) > 1.5  # it moved
    np.testing.assert_allclose(log.beta, lin.beta, rtol=1e-7, atol=1e-12)


def test_usam_log_form_matches_scipy():
    """USAM's log form (the only non-scale-invariant closed form) against solve_ivp.

    Solved at the tolerances of test_log_and_linear_trajectories_agree, on its mu and
    depth: one compiled program serves both (tests/runs.py pads the save grids)."""
    from scipy.integrate import solve_ivp
    from scipy.special import expit

    mu, alpha, rho, depth = np.array([1.0, 2.0, 3.0, 4.0]), 0.5, 0.8, 2

    def rhs(t, u):  # du/dtau = mu w~, w~ = u - rho c mu u, c = sigmoid(-sum mu u^2)
        c = expit(-np.sum(mu * u**2))
        return mu * (u - rho * c * mu * u)

    taus = save_times(3.0, 30)
    ref = solve_ivp(rhs, (0, taus[-1]), np.full(4, alpha), t_eval=taus, rtol=1e-12, atol=1e-14)
    sol = solve_flow(
        single_point(mu),
        balanced_start(alpha, 4, depth),
        depth,
        "usam",
        rho,
        taus,
        formulation="log",
        rtol=1e-11,
        atol=1e-13,
    )
    np.testing.assert_allclose(sol.beta, ref.y.T**2, rtol=1e-7)


def test_a_rule_without_closed_form_uses_the_generic_field():
    """A user rule (no ``balanced``) is solved in theta space, equal to sam-l2 at rho/2."""
    from samflow import PerturbationRule

    def double_l2(g, batch_ndim=0):
        return jax.tree_util.tree_map(lambda e: 2 * e, get_rule("sam-l2").direction(g, batch_ndim))

    rule = PerturbationRule("double-l2", double_l2, scale_invariant=True)
    mu, taus = np.array([1.0, 2.0, 3.0, 4.0]), save_times(6.0, 20)
    mine = solve_flow(single_point(mu), balanced_start(0.5, 4, 2), 2, rule, 0.5, taus)
    ref = solve_flow(single_point(mu), balanced_start(0.5, 4, 2), 2, "sam-l2", 1.0, taus)
    np.testing.assert_allclose(mine.beta, ref.beta, rtol=1e-6)  # two adaptive solves


def test_signed_int_pow_against_numpy():
    """Binary powering against NumPy's float64 power, for every depth - 1 the engine may
    use (0..255) and signs, zeros, tiny and large x: equal where k = 0 or 1; within
    4 k ulps otherwise (each multiply rounds once, and the error of x^(2^i) doubles
    with each squaring: at most about 2 k rounding errors, relative). Overflow gives
    inf as NumPy does; underflow 0 (XLA flushes subnormals) or a subnormal."""
    from samflow.rules import signed_int_pow

    x = np.array([-3.0, -1.5, -1.0, -0.7, -1e-3, 0.0, 1e-3, 0.3, 1.0, 1.01, 2.5])
    k = np.arange(256)
    with precision("float64"):
        got = np.asarray(jax.jit(signed_int_pow)(jnp.asarray(x)[:, None], jnp.asarray(k)))
    with np.errstate(over="ignore", under="ignore"):
        want = np.power(x[:, None], k[None, :])
    np.testing.assert_array_equal(got[:, :2], want[:, :2])
    finite = np.isfinite(want) & (np.abs(want) > np.finfo(float).tiny)
    rel = np.abs(got - want)[finite] / np.abs(want)[finite]
    assert np.all(rel <= 4 * np.broadcast_to(k, want.shape)[finite] * np.finfo(float).eps)
    big = ~np.isfinite(want)
    np.testing.assert_array_equal(got[big], want[big])
    # Below the smallest normal number XLA flushes to zero where NumPy keeps subnormals.
    small = ~finite & ~big
    assert np.all(np.abs(got[small]) <= np.finfo(float).tiny)


def test_signed_int_pow_static_power_is_the_traced_one():
    """A static power (a program for one depth) multiplies the same factors in the same
    order as the traced one: equal bit for bit, k = 0..40."""
    from samflow.rules import signed_int_pow

    x = jnp.asarray([-3.0, -0.7, 0.0, 1e-3, 0.3, 1.01, 2.5])
    with precision("float64"):
        traced = jax.jit(signed_int_pow)
        for k in range(41):
            static = jax.jit(lambda x, k=k: signed_int_pow(x, k))(x)
            np.testing.assert_array_equal(static, traced(x, jnp.asarray(k)), err_msg=str(k))


@pytest.mark.parametrize("method", ["gd", "sam-l2", "usam", "sam-linf"])
def test_closed_form_field_with_a_static_depth(method):
    """The balanced closed-form field compiled for one depth equals the field of a traced
    depth: at L = 2 the log form adds 0 instead of (L - 2) s and multiplies by 1 instead
    of exp(0), which XLA's exp may miss by an ulp, so 4 ulps relative; at L >= 3 the
    same operations."""
    from samflow.rules import get_rule

    closed = get_rule(method).balanced
    mu = jnp.asarray([0.5, 1.0, 2.0, 3.0])
    y = jnp.asarray([-2.0, -0.3, 0.4, 1.1])  # log u (log form) or u (linf)
    with precision("float64"):
        rho = jnp.asarray(0.4)
        for depth in (2, 3, 4, 5):
            static = jax.jit(lambda y, depth=depth: closed.field(0.0, y, (mu, depth, rho)))(y)
            traced = jax.jit(lambda y, d: closed.field(0.0, y, (mu, d, rho)))(y, jnp.asarray(depth))
            np.testing.assert_allclose(
                static, traced, rtol=4 * np.finfo(float).eps, err_msg=str(depth)
            )


def test_the_jax_free_method_table_is_the_rules_own():
    """``samflow.inputs.METHODS`` (name -> takes rho) lets the command line and the
    input checks name the methods without importing JAX; it must say what the rules
    themselves say, so the table is written once in meaning."""
    from samflow.inputs import METHODS as LISTED
    from samflow.rules import RULES

    assert list(LISTED) == list(RULES) == list(METHODS)
    assert {name: rule.needs_rho for name, rule in RULES.items()} == LISTED
