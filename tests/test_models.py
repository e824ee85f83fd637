"""Parametrisations, losses and their summaries (docs/theory/models.md#parametrisations-and-losses)
against references the engine did not produce: NumPy float64 steps and gradients written here,
SciPy's ``solve_ivp`` for the flows, ``jax.hessian`` and NumPy finite differences for the
Hessian."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp
from tolerance import norm_rel

import samflow
from samflow.discrete import simulate
from samflow.errors import InputError
from samflow.flows import FlowConfig, formulation_for, integrate
from samflow.model import Model, Problem
from samflow.precision import precision
from samflow.rules import GD, USAM, get_rule
from samflow.runners import Flow
from samflow.sweeps.spec import SweepSpec

PARAMETRIZATIONS = ("product", "u2-v2", "uv")
LOSSES = ("logistic", "exponential", "squared")
COMBOS = [(p, f) for p in PARAMETRIZATIONS for f in LOSSES]

_simulate = jax.jit(simulate, static_argnames=("rule", "save_theta", "model", "summaries"))
_integrate = jax.jit(integrate, static_argnames=("rule", "config", "model"))


# ---- Independent NumPy float64 references ------------------------------------------


def np_beta(par, th):
    if par == "product":
        return np.prod(th, axis=0)
    return th[0] ** 2 - th[1] ** 2 if par == "u2-v2" else th[0] * th[1]


def np_jacobian(par, th):
    if par == "product":
        return np.stack([np.prod(np.delete(th, k, axis=0), axis=0) for k in range(len(th))])
    return np.stack([2 * th[0], -2 * th[1]]) if par == "u2-v2" else np.stack([th[1], th[0]])


def np_loss_terms(loss, p, y):
    """Per point l and dl/dp, written from the definitions."""
    if loss == "squared":
        return 0.5 * (p - y) ** 2, p - y
    z = y * p
    if loss == "logistic":
        return np.log1p(np.exp(-z)), -y / (1 + np.exp(z))
    return np.exp(-z), -y * np.exp(-z)


def np_loss(par, loss, th, X, y):
    return np_loss_terms(loss, X @ np_beta(par, th), y)[0].mean()


def np_grad(par, loss, th, X, y):
    _, d1 = np_loss_terms(loss, X @ np_beta(par, th), y)
    return (X.T @ d1 / len(y))[None] * np_jacobian(par, th)


def np_sam_l2(par, loss, th, X, y, rho, eta, steps):
    out = [th]
    for _ in range(steps):
        g = np_grad(par, loss, th, X, y)
        th = th - eta * np_grad(par, loss, th + rho * g / np.linalg.norm(g), X, y)
        out.append(th)
    return np.stack(out)


def _problem(par, loss, n=3, d=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = rng.normal(size=n) if loss == "squared" else rng.choice([-1.0, 1.0], size=n)
    L = 3 if par == "product" else 2
    th = 0.3 + 0.5 * rng.random((L, d))
    return X, y, th


# ---- Gradient, loss and one SAM run for every parametrisation x loss ---------------


@pytest.mark.parametrize("par, loss", COMBOS)
def test_loss_and_gradient_match_numpy(par, loss):
    X, y, th = _problem(par, loss)
    m = Model(par, loss)
    with precision("float64"):
        problem = Problem(jnp.asarray(X), jnp.asarray(y))
        g, aux = m.grad_and_aux(jnp.asarray(th), problem, None)
        value = m.value(jnp.asarray(th), problem)
    # float64, a handful of products and sums: a few roundings of 1e-16.
    assert norm_rel(g, np_grad(par, loss, th, X, y)) < 1e-12
    assert abs(float(value) - np_loss(par, loss, th, X, y)) < 1e-12 * abs(float(value))
    assert abs(float(aux.loss) - float(value)) < 1e-15 * abs(float(value))


@pytest.mark.parametrize("par, loss", COMBOS)
def test_discrete_sam_steps_match_numpy(par, loss):
    """Five l2-SAM steps, through the engine's runner, against the NumPy step."""
    X, y, th = _problem(par, loss, seed=1)
    rho, eta, steps = 0.05, 0.1, 5
    with precision("float64"):
        traj = _simulate(
            jnp.asarray(th),
            Problem(jnp.asarray(X), jnp.asarray(y)),
            th.shape[0],
            jnp.asarray(rho),
            jnp.asarray(eta),
            jnp.arange(steps + 1),
            rule=get_rule("sam-l2"),
            save_theta=True,
            model=Model(par, loss),
        )
    want = np_sam_l2(par, loss, th, X, y, rho, eta, steps)
    # float64; five steps of O(1) maps each add a few roundings: far below 1e-10.
    assert norm_rel(np.asarray(traj.theta), want) < 1e-10
    assert norm_rel(np.asarray(traj.beta), np.array([np_beta(par, t) for t in want])) < 1e-10


def test_exponential_one_point_rescaled_time():
    """One point, exponential loss: tau grows by eta |l'(z~)| = eta exp(-z~) (z~ at the
    perturbed point), and the product network's steps are the NumPy ones."""
    mu = np.array([1.0, 2.0, 3.0])
    th = np.full((2, 3), 0.2)
    rho, eta = 0.1, 0.2
    traj = samflow.trajectory(
        "sam-l2", depth=2, mu=mu, rho=rho, alpha=0.2, loss="exponential",
        runner=samflow.Discrete(eta=eta, steps=4, save=samflow.Every(1)), save_theta=True,
    )  # fmt: skip
    X, y = mu[None], np.ones(1)
    want = np_sam_l2("product", "exponential", th, X, y, rho, eta, 4)
    tau = [0.0]
    for t in want[:-1]:
        g = np_grad("product", "exponential", t, X, y)
        tilde = t + rho * g / np.linalg.norm(g)
        tau.append(tau[-1] + eta * np.exp(-mu @ np_beta("product", tilde)))
    # float64 through four steps: roundings only.
    assert norm_rel(traj["theta"].values, want) < 1e-10
    assert norm_rel(traj["tau"].values, np.array(tau)) < 1e-10
    assert "regime" in traj  # a margin loss on the product network classifies


# ---- Flows against SciPy -----------------------------------------------------------


def _scipy_flow(field, y0, t_max, times):
    sol = solve_ivp(field, (0, t_max), y0, method="DOP853", t_eval=times, rtol=1e-11, atol=1e-13)
    return sol.y.T


def _solve(par, loss, th, X, y, method, rho, times, formulation="auto"):
    rule = get_rule(method)
    model = Model(par, loss)
    balanced = bool(np.all(th == th[:1]) and np.all(th > 0))
    form = formulation_for(rule, formulation, False, balanced, model)
    runner = Flow(rtol=1e-10, atol=1e-12, formulation=formulation)
    with precision("float64") as dt:
        sol = _integrate(
            jnp.asarray(th),
            Problem(jnp.asarray(X), jnp.asarray(y)),
            th.shape[0],
            jnp.asarray(rho),
            jnp.asarray(times),
            rule=rule,
            config=FlowConfig.of(runner, form, dt),
            major=1,
            model=model,
        )
    return form, jax.tree_util.tree_map(np.asarray, sol)


@pytest.mark.parametrize("par, loss", COMBOS)
def test_flow_fields_match_numpy(par, loss):
    """The fields the flows solve, for every parametrisation x loss: the SAM gradient
    flow ``-grad Loss(w + rho g/||g||)`` in plain time, and for a margin loss on one
    point the rescaled one, ``-grad Loss(w~) / |l'(z~)|`` (docs/theory/flows.md#rescaled-flows)."""
    from samflow.flows import plain_field, rescaled_field

    X, y, th = _problem(par, loss, seed=7)
    rho, rule, model = 0.1, get_rule("sam-l2"), Model(par, loss)

    def tilde(w, X, y):
        g = np_grad(par, loss, w, X, y)
        return w + rho * g / np.linalg.norm(g)

    with precision("float64"):
        mask = jnp.ones((th.shape[0], 1))
        args = (Problem(jnp.asarray(X), jnp.asarray(y)), mask, rho, rule, model)
        plain = np.asarray(plain_field(0.0, jnp.asarray(th), args))
        # float64, one gradient at a perturbed point: roundings only.
        assert norm_rel(plain, -np_grad(par, loss, tilde(th, X, y), X, y)) < 1e-12
        if loss == "squared":
            return
        X1, y1 = X[:1], y[:1]
        args = (Problem(jnp.asarray(X1), jnp.asarray(y1)), mask, rho, rule, model)
        rescaled = np.asarray(rescaled_field(0.0, jnp.asarray(th), args))
    w = tilde(th, X1, y1)
    _, d1 = np_loss_terms(loss, X1 @ np_beta(par, w), y1)
    assert norm_rel(rescaled, -np_grad(par, loss, w, X1, y1) / abs(d1[0])) < 1e-12


@pytest.mark.parametrize(
    "par, loss, method, n",
    [
        ("u2-v2", "squared", "gd", 3),  # linear (forced below)
        ("uv", "logistic", "sam-l2", 3),
        ("product", "exponential", "sam-l2", 1),  # one point: rescaled time
    ],
)
def test_flow_matches_scipy(par, loss, method, n):
    """Solved flows against DOP853 on a field written here from the NumPy gradient."""
    X, y, _ = _problem(par, loss, n=n, d=3, seed=2)
    if n == 1:
        X, y = np.abs(X), np.ones(1)
    th = np.full((2, 3), 0.3)
    if par == "uv":
        th[1] = 0.0
    rho = 0.05 if method == "sam-l2" else 0.0
    times = np.linspace(0.0, 2.0, 5)

    def field(t, flat):
        w = flat.reshape(th.shape)
        g = np_grad(par, loss, w, X, y)
        if rho:
            w = w + rho * g / np.linalg.norm(g)
            g = np_grad(par, loss, w, X, y)
        if n == 1:  # rescaled: divide by |l'(z~)|
            g = g / abs(np_loss_terms(loss, X @ np_beta(par, w), y)[1][0])
        return -g.ravel()

    want = _scipy_flow(field, th.ravel(), times[-1], times).reshape(-1, *th.shape)
    form, sol = _solve(par, loss, th, X, y, method, rho, times, "linear")
    assert form == "linear"
    # rtol 1e-10 in both solvers over a horizon of O(1) steps of an O(1) field: errors
    # of 1e-9 relative at most; 1e-7 leaves room and is far below any wrong field.
    assert norm_rel(sol.theta, want) < 1e-7
    assert not sol.failed


@pytest.mark.parametrize("a", [1e-8, 0.5])
def test_log_flow_matches_scipy(a):
    """u2-v2 gradient flow in log space (the ``auto`` formulation for gd from u = v),
    against SciPy on the problem solved independently in R with beta = -2 a^2 sinh(4 R)
    written here; from a = 1e-8 too: the well-conditioned state is what lets the
    saddle-to-saddle runs go this small. And at a = 0.5 against the linear u, v flow."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(2, 3))
    star = np.array([1.0, -0.5, 0.0])
    y = X @ star
    times = np.array([0.0, 2.0, 5.0, 10.0, 30.0])

    def field(t, R):
        beta = -2 * a * a * np.sinh(4 * R)
        return X.T @ (X @ beta - y) / len(y)

    R = _scipy_flow(field, np.zeros(3), times[-1], times)
    want = -2 * a * a * np.sinh(4 * R)
    form, sol = _solve("u2-v2", "squared", np.full((2, 3), a), X, y, "gd", 0.0, times)
    assert form == "log"
    # Relative to the scale of beta at each time (it grows from 0 to O(1)): the log
    # state is O(log(1/a)) ~ 10 and both solvers keep rtol 1e-10 on it.
    for got, ref in zip(sol.beta[1:], want[1:], strict=True):
        assert np.linalg.norm(got - ref) <= 1e-6 * np.linalg.norm(ref)
    assert np.linalg.norm(X @ sol.beta[-1] - y) < 1e-3  # it interpolates
    if a > 1e-3:  # the linear u, v flow gives the same theta

        def uv_field(t, flat):
            return -np_grad("u2-v2", "squared", flat.reshape(2, 3), X, y).ravel()

        lin = _scipy_flow(uv_field, np.full(6, a), times[-1], times).reshape(-1, 2, 3)
        assert norm_rel(sol.theta, lin) < 1e-6


# ---- Hessian and sharpness ---------------------------------------------------------


@pytest.mark.parametrize("par, loss", COMBOS)
def test_hessian_matches_jax_and_finite_differences(par, loss):
    X, y, th = _problem(par, loss, seed=4)
    m = Model(par, loss)

    @jax.jit
    def both(th, X, y):
        problem = Problem(X, y)
        H_jax = jax.hessian(lambda t: m.value(t, problem))(th)
        return m.hessian(th, problem), H_jax, *m.sharpness(th, problem)

    with precision("float64"):
        H, H_jax, top, trace = map(np.asarray, both(*map(jnp.asarray, (th, X, y))))
    k = th.size
    # jax.hessian differentiates the same loss in another order: roundings only.
    assert norm_rel(H, H_jax.reshape(k, k)) < 1e-12
    # Central differences of the NumPy gradient: error O(h^2) ~ 1e-10 plus rounding
    # eps / h ~ 1e-11 relative; 1e-7 is far below any wrong entry (O(1)).
    h = 1e-5
    fd = np.empty((k, k))
    for i in range(k):
        e = np.zeros(k)
        e[i] = h
        plus = np_grad(par, loss, th + e.reshape(th.shape), X, y).ravel()
        minus = np_grad(par, loss, th - e.reshape(th.shape), X, y).ravel()
        fd[:, i] = (plus - minus) / (2 * h)
    assert norm_rel(H, fd) < 1e-7
    eig = np.linalg.eigvalsh((fd + fd.T) / 2)
    assert abs(float(top) - eig.max()) < 1e-6 * np.abs(eig).max()
    assert abs(float(trace) - np.trace(fd)) < 1e-6 * np.abs(eig).max()


def test_top_eigenvalue_on_hard_matrices():
    """The Householder + Sturm bisection against NumPy's eigvalsh: random symmetric
    matrices, a repeated top eigenvalue, a zero matrix, n = 1 and n = 2."""
    from samflow.model import top_eigenvalue

    rng = np.random.default_rng(10)
    for n in (1, 2, 9):
        H = rng.normal(size=(n, n, 4))
        H = H + H.transpose(1, 0, 2)
        H[..., 2] = 0.0
        H[..., 3] = np.diag(np.r_[np.full(max(n - 1, 0), 3.0), 3.0])  # all eigenvalues 3
        with precision("float64"):
            got = np.asarray(jax.jit(top_eigenvalue)(jnp.asarray(H)))
        want = np.array([np.linalg.eigvalsh(H[..., b]).max() for b in range(4)])
        # Householder is backward stable and 64 halvings of the Gershgorin interval
        # resolve 5e-20 of it: a few roundings of the matrix's norm.
        assert np.max(np.abs(got - want)) < 1e-13 * max(1.0, np.abs(H).max())


def test_sharpness_with_padding_rows_is_the_real_networks():
    """Depth 2 padded to 4 rows (a depth axis): the padding adds zero eigenvalues only,
    and the trace and top eigenvalue are those of the depth-2 Hessian."""
    X, y, th = _problem("product", "logistic", seed=5)
    th2 = th[:2]
    padded = np.concatenate([th2, np.ones((2, th.shape[1]))])
    m = Model()
    with precision("float64"):
        problem = Problem(jnp.asarray(X), jnp.asarray(y))
        mask = jnp.asarray([1.0, 1.0, 0.0, 0.0])[:, None]
        top_p, tr_p = m.sharpness(jnp.asarray(padded), problem, mask)
        top, tr = m.sharpness(jnp.asarray(th2), problem)
    assert abs(float(top_p) - float(top)) < 1e-12 * abs(float(top))
    assert abs(float(tr_p) - float(tr)) < 1e-12 * abs(float(tr))


def test_summaries_in_a_sweep_match_the_records():
    """A sweep's summaries (batch-last, in the record loop) against NumPy on its beta."""
    rng = np.random.default_rng(6)
    X = rng.normal(size=(4, 6))
    star = np.array([1.0, 0.0, 0.0, -1.0, 0.0, 0.0])
    y = X @ star
    ds = samflow.sweep(
        "sam-l2", depth=2, data=(X, y), loss="squared", parametrization="u2-v2",
        axes={"rho": [0.0, 0.05]}, alpha=0.1, beta_star=star,
        summaries=samflow.Summaries(sharpness=True),
        save_trajectories=True, runner=samflow.Discrete(eta=0.05, steps=200),
    )  # fmt: skip
    beta = ds["beta"].values  # [rho, time, coord]
    assert "regime" not in ds and "limit_coord" not in ds
    # float64 reductions over 6 coordinates: roundings only.
    assert norm_rel(ds["l1_norm"].values, np.abs(beta).sum(-1)) < 1e-12
    assert norm_rel(ds["l2_norm"].values, np.linalg.norm(beta, axis=-1)) < 1e-12
    assert norm_rel(ds["test_error"].values, ((beta - star) ** 2).sum(-1)) < 1e-12
    assert np.array_equal(ds["n_active"].values, (np.abs(beta) > 1e-3).sum(-1))
    assert np.all(np.isfinite(ds["sharpness"].values))
    assert np.all(ds["sharpness"].values >= ds["hessian_trace"].values / 12)  # lambda_max >= mean
    assert ds.attrs["loss"] == "squared" and ds.attrs["parametrization"] == "u2-v2"


# ---- Inputs ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(loss="hinge"), "unknown loss 'hinge'"),
        (dict(parametrization="w3"), "unknown parametrization 'w3'"),
        (dict(parametrization="u2-v2", depth=3), "depth must be 2"),
        (dict(data=(np.eye(2), np.array([0.5, 1.0]))), "labels must be -1 or +1"),
        (dict(data=(np.eye(2), np.array([np.nan, 1.0])), loss="squared"), "NaN or inf"),
        (dict(beta_star=np.ones(3)), "beta_star must have shape (2,)"),
        (dict(beta_star=np.ones(2), summaries=False), "needs summaries on"),
    ],
)
def test_bad_model_inputs_are_refused(kwargs, message):
    args = dict(depth=2, data=(np.eye(2), np.array([1.0, -1.0])), runner=samflow.Discrete())
    args.update(kwargs)
    with pytest.raises(InputError, match=re.escape(message)):
        SweepSpec.from_inputs("gd", **args)


def test_flow_formulation_outside_the_model_is_refused():
    u2v2 = Model("u2-v2", "squared")
    assert formulation_for(GD, "auto", False, True, u2v2) == "log"
    assert formulation_for(USAM, "auto", False, True, u2v2) == "linear"
    for rule, form in ((USAM, "log"), (GD, "linf")):
        with pytest.raises(InputError, match=f"formulation '{form}' is not available.*{rule.name}"):
            formulation_for(rule, form, False, True, u2v2)


def test_squared_loss_on_one_point_is_allowed():
    """mu with the squared loss: the target y = 1, plain time (no rescaling)."""
    ds = samflow.trajectory(
        "gd", depth=2, mu=[1.0, 2.0], alpha=0.5, loss="squared",
        runner=samflow.Discrete(eta=0.1, steps=5, save=samflow.Every(1)),
    )  # fmt: skip
    assert np.allclose(ds["tau"].values, 0.1 * np.arange(6), rtol=0, atol=1e-15)
    assert "regime" not in ds and "regime_meaning" not in ds.attrs
    assert ds["tau"].attrs["long_name"] == "time eta * steps"
    assert ds["loss"].attrs["long_name"] == "squared loss"


def test_default_sweep_key_is_unchanged():
    """The paper's model keeps its sweep key when options are added, so stores resume; it
    changed on purpose with the meaning of its labels (``LABELS``: labels of the limit,
    docs/theory/regimes.md#labels-of-the-limit; key 7dca2231ec6b9a49 before, commit 850addb), and
    with the key's format (``KEY_FORMAT`` 2, issue 31: generic over the settings objects; key
    81fb7a2dbd049a4a before), and again with LABELS limit-2 (leader paths read every step;
    62a32c67d12c5dc1 before), limit-3 (the take-over certificate; c2ae2e6a1ebffd2d
    before), limit-4 (the take-over at every depth; 0fae938522ff0d83 before), limit-5
    (this stop's certificates: linf-SAM's discrete step, USAM's finite limits and wide
    leads, l2-SAM's minor leaders; fc35857ad47a4be8 before) and limit-6 (take-overs by a
    minor winner, the blow-up's winner only where a closed form declares its proof;
    a0a15563a571e89d before) and limit-7 (a blow-up without a proven winner unresolved,
    linf-SAM's first blow-up, l2-SAM's middle at depth two and its take-over by a minor;
    5264b7b5555fee57 before) and limit-8 (the discrete collapse at L = 2 with h <= eta / 2,
    l2-SAM's middle that empties, crossing bound and region that outlasts;
    7f8ed0936188d315 before) and limit-9 (l2-SAM's exact race to the bound and its pinned
    major that hands the lead on; 7be61b4696a064a4 before) and limit-10 (the discrete map
    that follows its flow where its steps vanished; 8061127e6828820c before), so that no
    chunk of an old key is ever resumed."""
    args = dict(depth=2, mu=[1.0, 2.0], axes={"alpha": [0.1, 1.0]}, runner=samflow.Discrete())
    spec = SweepSpec.from_inputs("gd", **args)
    assert spec.summaries is None and spec.key() == "b5115abd73cb4b19"
    assert SweepSpec.from_inputs("gd", loss="exponential", **args).key() != spec.key()


def test_fit_takes_the_models_loss():
    """``Model.loss_fn`` as a ``samflow.fit`` loss: three GD steps of uv with the squared
    loss are the NumPy ones."""
    X, y, _ = _problem("uv", "squared", seed=8)
    th = np.stack([np.full(4, 0.5), np.zeros(4)])
    res = samflow.fit(
        samflow.Model("uv", "squared").loss_fn(X, y), th, "gd",
        runner=samflow.Discrete(eta=0.1, steps=3, save=samflow.Every(1)), dtype="float64",
        save_params=True,
    )  # fmt: skip
    want = [th]
    for _ in range(3):
        want.append(want[-1] - 0.1 * np_grad("uv", "squared", want[-1], X, y))
    # float64, three steps: roundings only.
    assert norm_rel(np.asarray(res.saved_params), np.array(want)) < 1e-12
    with pytest.raises(InputError, match="labels must be"):
        samflow.Model("uv", "logistic").loss_fn(X, y)


def test_command_line_regression_file(tmp_path):
    """``samflow trajectory`` with --loss squared --parametrization u2-v2 on a tiny
    problem: beta_star from the --data file, the summaries in the written file, no
    regime; the schema accepts it."""
    import xarray as xr

    from samflow.cli import main
    from samflow.schema import TRAJECTORY

    X = _problem("u2-v2", "squared", n=3, d=4, seed=9)[0]
    star = np.array([1.0, 0.0, 0.0, 0.0])
    np.savez(tmp_path / "reg.npz", X=X, y=X @ star, beta_star=star)
    out = tmp_path / "r.nc"
    argv = [
        "trajectory", "--method", "gd", "--depth", "2", "--data", str(tmp_path / "reg.npz"),
        "--loss", "squared", "--parametrization", "u2-v2", "--alpha", "0.1",
        "--steps", "50", "--eta", "0.1", "--out", str(out), "-q",
    ]  # fmt: skip
    assert main(argv) == 0
    with xr.open_dataset(out) as ds:
        assert TRAJECTORY.check(ds) == []
        assert "regime" not in ds and ds.attrs["loss"] == "squared"
        beta = ds["beta"].values
        assert norm_rel(ds["test_error"].values, ((beta - star) ** 2).sum(-1)) < 1e-12
    assert main([*argv[:-3], "--beta-star", str(tmp_path / "x.npy"), "--out", str(out)]) == 2


@pytest.mark.parametrize(
    ("x_batch", "v_batch"),
    [((), ()), ((1,), (5,)), ((1, 1), (3, 5)), ((5,), (5,)), ((1, 5), (3, 5))],
)
@pytest.mark.parametrize("n", [1, 7])
def test_data_contractions_against_numpy(n, x_batch, v_batch):
    """``sum_j X_ij v_j`` and ``sum_i a_i X_ij`` with data shared by the batch (the
    matrix product) or varying along it (the sum of rows), against NumPy's einsum in
    float64. Both forms sum d = 6 or n = 7 products in float64: their difference is a few
    roundings of the largest term, so 1e-13 of the result's norm is room for reordering
    and far below a wrong row or a transposed X (O(1))."""
    from samflow.model import inner_products, weighted_points

    rng = np.random.default_rng(n + len(x_batch))
    d = 6
    X = rng.normal(size=(n, d, *x_batch))
    v = rng.normal(size=(d, *v_batch))
    a = rng.normal(size=(n, *v_batch))
    Xb = np.broadcast_to(X, (n, d, *np.broadcast_shapes(x_batch, v_batch)))
    with precision("float64"):
        got_p = np.asarray(inner_products(jnp.asarray(X), jnp.asarray(v)))
        got_c = np.asarray(weighted_points(jnp.asarray(X), jnp.asarray(a)))
    want_p = np.einsum("ij...,j...->i...", Xb, v)
    want_c = np.einsum("ij...,i...->j...", Xb, a)
    assert got_p.shape == want_p.shape and got_c.shape == want_c.shape
    assert norm_rel(got_p, want_p) < 1e-13
    assert norm_rel(got_c, want_c) < 1e-13


def test_pair_products_compile_to_a_program_of_fixed_size():
    """The curvature ``B[l, k] = prod_{m != l, k} w_m`` of the product network is a
    program whose size does not grow with depth (the former product unrolled over every
    pair of layers had L^3 / 2 multiplies and took 11 GB to compile at L = 128), and it
    equals the product of the other layers taken directly, zeros included, to rounding
    (a few ulps: the products are taken in another order)."""
    import math

    from samflow.parametrizations import pair_products
    from samflow.precision import precision

    sizes = [len(jax.jit(pair_products).lower(jnp.ones((L, 4, 1))).as_text()) for L in (8, 128)]
    assert sizes[1] < 1.2 * sizes[0], sizes
    rng = np.random.default_rng(3)
    theta = rng.uniform(0.5, 1.5, (7, 3, 2)) * rng.choice([-1.0, 1.0], (7, 3, 2))
    theta[2, 0, 0] = theta[5, 1, 1] = 0.0
    with precision("float64"):
        B = np.asarray(pair_products(jnp.asarray(theta)))
    assert B.dtype == np.float64
    for l in range(7):
        for k in range(7):
            want = (
                np.zeros((3, 2))
                if l == k
                else math.prod(theta[m] for m in range(7) if m not in (l, k))
            )
            np.testing.assert_allclose(B[l, k], want, rtol=8 * np.finfo(float).eps, atol=0)
