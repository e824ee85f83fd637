"""Single runs through the pure engine functions, with NumPy results, for the tests.

The tests check the pure functions (``samflow.discrete.simulate``,
``samflow.flows.integrate``) against independent references; these helpers only cast
the inputs, pick the formulation as ``samflow.trajectory`` does, and jit the calls.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from samflow.discrete import simulate
from samflow.flows import FlowConfig, formulation_for, integrate
from samflow.init import is_balanced
from samflow.model import Problem
from samflow.precision import precision
from samflow.rules import check_rho, get_rule
from samflow.runners import Discrete, Every, Flow, LogSpaced

_simulate = jax.jit(simulate, static_argnames=("rule", "save_theta"))
_integrate = jax.jit(integrate, static_argnames=("rule", "config"))

SAVE_SLOTS = 128
"""Every save grid of :func:`solve_flow` up to this many times is padded to it (the last
time repeated, as the engine pads its record grids) and the records cut back after the
solve: a compiled program serves every grid length of its rule and settings, instead of
one compile (about 10 s of CPU) per length. The saves do not steer the solve (diffrax
interpolates them inside the accepted steps), so the real records are those of the
unpadded grid."""


def record_schedule(steps: int, every: int | None = None, n_log: int | None = None):
    return Discrete(steps=steps, save=Every(every) if n_log is None else LogSpaced(n_log)).times()


def save_times(tau_max: float, n_save: int, tau_min: float | None = None):
    return Flow(tau_max=tau_max, save=LogSpaced(n_save - 1, first=tau_min)).times()


def _problem(problem, dt):
    return Problem(jnp.asarray(problem.X, dt), jnp.asarray(problem.y, dt))


def run_discrete(
    problem, theta0, depth, method, rho, eta, schedule, save_theta=False, dtype="float64"
):
    """``simulate`` from ``theta0`` ``[L_max, d]`` (``depth`` real rows, traced)."""
    rule = get_rule(method)
    rho = check_rho(rule, rho)
    with precision(dtype) as dt:
        traj = _simulate(
            jnp.asarray(theta0, dt),
            _problem(problem, dt),
            depth,
            jnp.asarray(rho, dt),
            jnp.asarray(eta, dt),
            jnp.asarray(schedule, jnp.int64 if dt == np.float64 else jnp.int32),
            rule=rule,
            save_theta=save_theta,
        )
        return jax.tree_util.tree_map(np.asarray, traj)


def solve_flow(
    problem,
    theta0,
    depth,
    method,
    rho,
    save_tau,
    formulation="auto",
    solver="tsit5",
    rtol=1e-8,
    atol=1e-10,
    max_steps=100_000,
    dtype="float64",
):
    """``integrate`` from ``theta0`` ``[L_max, d]``, the formulation chosen as
    ``samflow.trajectory`` chooses it."""
    rule = get_rule(method)
    rho = check_rho(rule, rho)
    runner = Flow(rtol=rtol, atol=atol, solver=solver, max_steps=max_steps, formulation=formulation)
    X = np.asarray(problem.X)
    positive = X.shape[0] == 1 and bool(np.all(X > 0))
    form = formulation_for(rule, formulation, positive, is_balanced(theta0, depth))
    save_tau = np.asarray(save_tau)
    n = save_tau.shape[0]
    padded = np.concatenate([save_tau, np.full(max(SAVE_SLOTS - n, 0), save_tau[-1])])
    with precision(dtype) as dt:
        sol = _integrate(
            jnp.asarray(theta0, dt),
            _problem(problem, dt),
            depth,
            jnp.asarray(rho, dt),
            jnp.asarray(padded, dt),
            rule=rule,
            config=FlowConfig.of(runner, form, dt),
        )
        sol = jax.tree_util.tree_map(np.asarray, sol)
    # the records of the real save times (the scalars and the leader path do not depend
    # on the padding: the repeated times add records at the horizon only)
    return sol._replace(
        **{k: getattr(sol, k)[:n] for k in ("tau", "beta", "loss", "theta", "valid")}
    )


def l2_step(u, mu, L, rho, eta):
    """One balanced l2-SAM step of the logistic loss in NumPy float64 (the tests'
    independent reference), states [n, d]: w~ = u - rho m / ||m||_2 (m_j = mu_j u_j^(L-1)
    in each of the L layers), u' = u + eta sigmoid(-z~) mu w~^(L-1), z~ = sum_j mu_j
    w~_j^L."""
    m = mu * u ** (L - 1)
    w = u - rho * m / np.sqrt(L * np.sum(m * m, axis=1, keepdims=True))
    zt = np.minimum(np.sum(mu * w**L, axis=1, keepdims=True), 700.0)
    return u + eta / (1.0 + np.exp(zt)) * mu * w ** (L - 1)


def l2_log_field(mu, L, rho):
    """The balanced l2-SAM flow in ``s = log u`` for SciPy (the tests' independent
    reference): ``f(t, s) = x (1 - rho c x)^(L-1)``, ``x_j = mu_j u_j^(L-2)``, ``c = 1 /
    ||m||_2``, ``||m||_2^2 = L sum_j mu_j^2 u_j^(2L-2)``; ``mu`` one state's ``[d]``."""

    def f(t, y):
        v = np.exp(y)
        x = mu * v ** (L - 2)
        c = 1.0 / np.sqrt(L * np.sum(mu**2 * v ** (2 * L - 2)))
        return x * (1 - rho * c * x) ** (L - 1)

    return f


def certify(rule, s, mu, depth, rho, eta=None, at_end=False, in_step=False):
    """``rule``'s certificate (``BalancedFlow.fate``) over a batch of states ``s`` ``[n, d]``
    (one program), in float64 as the engine evaluates it (samflow.precision: a scoped x64
    context): ``mu`` ``[n, d]`` or one ``[d]`` for all, ``rho`` a number or ``[n]``, ``eta``
    None (the flow's) or a step size; ``at_end``: the certificate of a run's last state
    (``BalancedFlow.end_fate``); ``in_step``: the one a flow's solver checks at each step
    (``BalancedFlow.step_fate``). Returns NumPy ``(code, winner)``, each ``[n]``."""
    with jax.enable_x64(True):
        s = jnp.asarray(s, dtype=jnp.float64)
        mu = jnp.broadcast_to(jnp.asarray(mu, dtype=jnp.float64), s.shape)
        rho = jnp.broadcast_to(jnp.asarray(rho, dtype=jnp.float64), s.shape[:1])
        eta = None if eta is None else jnp.asarray(eta, dtype=jnp.float64)

        def one(s_, mu_, rho_):
            closed = rule.balanced
            fate = closed.end_fate if at_end else closed.step_fate if in_step else closed.fate
            return fate(s_, mu_, depth, rho_, eta)

        code, winner = jax.jit(jax.vmap(one))(s, mu, rho)
        return np.asarray(code), np.asarray(winner)


def write_mnist_test_split(folder: Path, images: np.ndarray, labels: np.ndarray) -> Path:
    """``folder`` holding ``images`` ``[n, h, w]`` and ``labels`` ``[n]`` (uint8) as the gzipped
    IDX files of MNIST's test split, the only split on the shared machines."""
    folder.mkdir()
    for name, arr, magic in (
        ("t10k-images-idx3-ubyte.gz", images, 2051),
        ("t10k-labels-idx1-ubyte.gz", labels, 2049),
    ):
        header = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in arr.shape)
        (folder / name).write_bytes(gzip.compress(header + arr.tobytes()))
    return folder
