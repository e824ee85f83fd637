"""What a researcher would otherwise use: the same l2-SAM math outside samflow.

Every baseline runs the update of docs/theory/setting.md#setting-2 for one data point ``x = mu``,
``y = +1`` on an L-layer diagonal network, l2-SAM, and the rescaled time
``tau += eta |l'(z~)|``. Grids are balanced initialisations ``w^(l) = alpha`` with a
per-point ``rho``; the step size ``eta`` is shared.
"""

from __future__ import annotations

import time

import numpy as np


def grid_inputs(n_points: int, depth: int, d: int, dtype) -> dict[str, np.ndarray]:
    """A square (alpha, rho) grid of ``n_points`` (rounded to a square), as in the bench."""
    side = round(np.sqrt(n_points))
    alpha, rho = np.meshgrid(np.geomspace(0.05, 2.0, side), np.linspace(0.1, 1.5, side))
    return {
        "alpha": alpha.ravel().astype(dtype),
        "rho": rho.ravel().astype(dtype),
        "mu": np.arange(1, d + 1, dtype=dtype),
        "depth": depth,
    }


# ---------------------------------------------------------------- NumPy, batched
def numpy_run(inputs: dict, eta: float, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Batched over the grid with NumPy: ``theta`` ``[B, L, d]`` (grid first, as usual).

    Returns ``theta`` and ``tau`` after ``steps`` steps.
    """
    alpha, rho, mu, L = inputs["alpha"], inputs["rho"], inputs["mu"], inputs["depth"]
    dtype = alpha.dtype
    theta = np.repeat(alpha[:, None, None], L, axis=1) * np.ones_like(mu)
    tau = np.zeros_like(alpha)
    eta = dtype.type(eta)

    def grad(theta):
        ones = np.ones_like(theta[:, :1])
        prefix = np.concatenate([ones, np.cumprod(theta[:, :-1], axis=1)], axis=1)
        suffix = np.concatenate([np.cumprod(theta[:, :0:-1], axis=1)[:, ::-1], ones], axis=1)
        z = np.sum(mu * np.prod(theta, axis=1), axis=1)
        with np.errstate(over="ignore"):  # exp(z) = inf gives l'(z) = -0, as it should
            lprime = -1.0 / (1.0 + np.exp(z))
        return (lprime[:, None, None] * mu) * prefix * suffix, lprime

    for _ in range(steps):
        g, _ = grad(theta)
        norm = np.sqrt(np.sum(g * g, axis=(1, 2)))
        eps = g / np.where(norm > 0, norm, 1)[:, None, None]
        g_adv, lprime_adv = grad(theta + rho[:, None, None] * eps)
        theta = theta - eta * g_adv
        tau = tau - eta * lprime_adv
    return theta, tau


# ---------------------------------------------------------------- PyTorch, batched
def torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def torch_run(inputs: dict, eta: float, steps: int):
    """The NumPy baseline in PyTorch on the CPU (all its threads), ``[B, L, d]``."""
    import torch

    dt = torch.float32 if inputs["alpha"].dtype == np.float32 else torch.float64
    alpha = torch.as_tensor(inputs["alpha"], dtype=dt)
    rho = torch.as_tensor(inputs["rho"], dtype=dt)[:, None, None]
    mu = torch.as_tensor(inputs["mu"], dtype=dt)
    L = inputs["depth"]
    theta = alpha[:, None, None].expand(-1, L, len(mu)).clone()
    tau = torch.zeros_like(alpha)

    def grad(theta):
        ones = torch.ones_like(theta[:, :1])
        prefix = torch.cat([ones, torch.cumprod(theta[:, :-1], dim=1)], dim=1)
        suffix = torch.cat([torch.cumprod(theta.flip(1)[:, :-1], dim=1).flip(1), ones], dim=1)
        z = torch.sum(mu * torch.prod(theta, dim=1), dim=1)
        lprime = -torch.sigmoid(-z)
        return (lprime[:, None, None] * mu) * prefix * suffix, lprime

    with torch.no_grad():
        for _ in range(steps):
            g, _ = grad(theta)
            norm = torch.sqrt(torch.sum(g * g, dim=(1, 2)))
            eps = g / torch.where(norm > 0, norm, torch.ones_like(norm))[:, None, None]
            g_adv, lprime_adv = grad(theta + rho * eps)
            theta = theta - eta * g_adv
            tau = tau - eta * lprime_adv
    return theta.numpy(), tau.numpy()


# ------------------------------------------------ optax SAM, one trajectory at a time
def optax_loop(inputs: dict, eta: float, steps: int, n_traj: int) -> float:
    """Seconds for ``n_traj`` trajectories, each a Python loop of jitted optax SAM steps.

    ``optax.contrib.sam`` (opaque mode) with an SGD outer optimiser and a normalised
    SGD ascent, as in the optax docs; the loss is the diagonal net's logistic loss and
    the gradient comes from ``jax.grad``. Only the first ``n_traj`` grid points run.
    """
    import jax
    import jax.numpy as jnp
    import optax
    import optax.contrib

    f64 = inputs["alpha"].dtype == np.float64
    with jax.enable_x64(f64):
        dt = jnp.float64 if f64 else jnp.float32
        mu, L = jnp.asarray(inputs["mu"], dt), inputs["depth"]

        def loss(theta):
            return jax.nn.softplus(-jnp.sum(mu * jnp.prod(theta, axis=0)))

        grad = jax.grad(loss)

        def make(rho):
            return optax.contrib.sam(
                optax.sgd(eta),
                optax.chain(optax.contrib.normalize(), optax.sgd(rho)),
                opaque_mode=True,
            )

        @jax.jit
        def step(theta, state, rho):
            updates, state = make(rho).update(
                grad(theta), state, theta, grad_fn=lambda p, _: grad(p)
            )
            return optax.apply_updates(theta, updates), state

        start = time.perf_counter()
        for i in range(n_traj):
            rho = jnp.asarray(inputs["rho"][i], dt)
            theta = jnp.full((L, len(mu)), inputs["alpha"][i], dt)
            state = make(rho).init(theta)
            for _ in range(steps):
                theta, state = step(theta, state, rho)
            jax.block_until_ready(theta)
        return time.perf_counter() - start


# ------------------------------------------------- SciPy solve_ivp, one trajectory each
def scipy_flow_loop(
    alpha: np.ndarray, rho: np.ndarray, mu: np.ndarray, tau_max: float, rtol: float, atol: float
) -> tuple[float, int]:
    """Seconds for the balanced L = 2 l2-SAM rescaled flow of each (alpha, rho), looped.

    The same log-space field as samflow's ``log`` formulation
    (docs/theory/balanced.md#balanced-initialisation: ``d log u_j/dtau = mu_j (1 - rho mu_j / N)``,
    ``N = sqrt(2 sum mu_k^2 u_k^2)``), RK45 at the same tolerances, with the same stop when
    ``beta`` collapses. Returns the seconds and the number of failed solves.
    """
    from scipy.integrate import solve_ivp

    log_mu = np.log(mu)

    def field(tau, s, rho):
        log_n = 0.5 * (np.log(2.0) + np.logaddexp.reduce(2 * log_mu + 2 * s))
        return mu * (1.0 - rho * np.exp(log_mu - log_n))

    failed = 0
    start = time.perf_counter()
    for a, r in zip(alpha, rho, strict=True):
        s0 = np.full(len(mu), np.log(a))
        low = 2 * np.max(s0) - 16.0

        def collapse(tau, s, rho, low=low):
            return 2 * np.max(s) - low

        collapse.terminal = True
        sol = solve_ivp(
            field,
            (0.0, tau_max),
            s0,
            method="RK45",
            rtol=rtol,
            atol=atol,
            args=(r,),
            events=collapse,
        )
        failed += sol.status < 0
    return time.perf_counter() - start, failed
