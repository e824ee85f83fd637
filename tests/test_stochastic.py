"""Stochastic steps (minibatches, m-sharpness, label noise, seeds) against NumPy float64
references written here, replaying the engine's draws (samflow.stochastic.draws).

Tolerances: float64 runs of a few dozen steps, where engine and reference differ only in
the order of their sums: each step adds a few roundings (~1e-16 relative), so 1e-12 of
the parameters' norm leaves three orders of room and is ten orders below any error of
the method (a wrong example, group or sign changes a step by O(eta)).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tolerance import norm_rel

import samflow
from samflow.cli import main
from samflow.errors import InputError
from samflow.stochastic import Sampling, draws, run_key
from samflow.sweeps.spec import SweepSpec

RTOL = 1e-12  # see the module docstring
N, D, DEPTH, ALPHA, ETA, RHO, STEPS = 6, 3, 2, 0.6, 0.2, 0.15, 12


def problem():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(N, D)) + np.array([1.0, 0.5, 0.2])
    y = np.where(rng.random(N) < 0.5, -1.0, 1.0)
    return X, y


# ---- NumPy references ---------------------------------------------------------------


def np_grad(W, X, y):
    """Gradient of the mean logistic loss of the product network beta = prod_l W[l]."""
    beta = np.prod(W, axis=0)
    z = y * (X @ beta)
    c = ((-1.0 / (1.0 + np.exp(z))) * y) @ X / len(y)
    others = np.stack([np.prod(np.delete(W, l, axis=0), axis=0) for l in range(len(W))])
    return c[None] * others


def np_sam_step(W, X, y, rho, eta, m):
    """One l2-SAM step on (X, y), groups of m consecutive examples each perturbed on
    their own, the descent gradient their mean (m = len(y): plain SAM; rho = 0: GD)."""
    grads = []
    for k in range(0, len(y), m):
        Xk, yk = X[k : k + m], y[k : k + m]
        g = np_grad(W, Xk, yk)
        eps = g / np.linalg.norm(g) if rho > 0 else 0 * g
        grads.append(np_grad(W + rho * eps, Xk, yk))
    return W - eta * np.mean(grads, axis=0)


def np_run(X, y, seed, *, batch=None, m=None, rho=RHO, steps=STEPS):
    """The engine's run replayed: each step's minibatch from samflow.stochastic.draws."""
    sampling = Sampling(n=N, batch=batch, m=m)
    key = run_key(seed)
    W = np.full((DEPTH, D), ALPHA)
    for t in range(steps):
        with jax.enable_x64(True):
            index, _ = draws(key, t, sampling, jnp.float64)
        rows = np.arange(N) if index is None else np.asarray(index)
        W = np_sam_step(W, X[rows], y[rows], rho, ETA, m or len(rows))
    return W


def engine(method, seed=None, **runner):
    X, y = problem()
    return samflow.trajectory(
        method,
        depth=DEPTH,
        data=(X, y),
        alpha=ALPHA,
        rho=None if method == "gd" else RHO,
        runner=samflow.Discrete(eta=ETA, steps=STEPS, save=samflow.Every(STEPS), **runner),
        seed=seed,
    )


# ---- (a) full batch is today's step ---------------------------------------------------


def test_batch_n_and_m_n_are_the_deterministic_run_exactly():
    today = engine("sam-l2")
    same = engine("sam-l2", batch=N, m=N)
    with pytest.raises(InputError, match="seed 5: nothing in this run is random"):
        engine("sam-l2", batch=N, m=N, seed=5)  # full batch, m = n: the seed changes nothing
    np.testing.assert_array_equal(same["theta_final"].values, today["theta_final"].values)
    np.testing.assert_array_equal(same["beta"].values, today["beta"].values)
    assert "batch" not in today.attrs and "seed" not in today.attrs
    assert same.attrs["batch"] == N and same.attrs["m"] == N
    # A full-batch runner keeps today's sweep key and history.
    X, y = problem()
    spec = dict(depth=DEPTH, data=(X, y), rho=RHO, axes={"alpha": [0.5, 1.0]})
    plain = SweepSpec.from_inputs("sam-l2", runner=samflow.Discrete(eta=ETA), **spec)
    assert "batch" not in repr(plain.runner)
    assert plain.sampling is None
    batch_n = SweepSpec.from_inputs("sam-l2", runner=samflow.Discrete(eta=ETA, batch=N), **spec)
    assert batch_n.sampling is None


# ---- (b) minibatch SGD / SAM replay the engine's draws --------------------------------


# sam-l2 with batch 3, m = 1 shares its compiled program with the seed test below
@pytest.mark.parametrize(("method", "batch", "m"), [("gd", 2, None), ("sam-l2", 3, 1)])
def test_minibatch_steps_match_numpy(method, batch, m):
    X, y = problem()
    ds = engine(method, seed=11, batch=batch, m=m)
    want = np_run(X, y, 11, batch=batch, m=m, rho=0.0 if method == "gd" else RHO)
    assert norm_rel(ds["theta_final"].values, want) < RTOL
    assert ds.attrs["batch"] == batch and ds.attrs["seed"] == 11
    # the draws are subsets without replacement, fresh at every step
    with jax.enable_x64(True):
        sampling = Sampling(N, batch)
        idx = [np.asarray(draws(run_key(11), t, sampling, jnp.float64)[0]) for t in range(8)]
    assert all(len(set(i.tolist())) == batch for i in idx)
    assert len({tuple(sorted(i.tolist())) for i in idx}) > 1


# ---- (c) m-sharpness: 1-SAM ------------------------------------------------------------


def test_one_sam_full_batch_matches_numpy_and_differs_from_n_sam():
    X, y = problem()
    one = engine("sam-l2", m=1)
    W = np.full((DEPTH, D), ALPHA)
    for _ in range(STEPS):
        W = np_sam_step(W, X, y, RHO, ETA, 1)  # each example its own eps_i
    assert norm_rel(one["theta_final"].values, W) < RTOL
    n_sam = engine("sam-l2")
    assert norm_rel(one["theta_final"].values, n_sam["theta_final"].values) > 1e-4


# ---- (d) seeds vmapped ----------------------------------------------------------------


def test_seed_axes_equal_separate_runs():
    X, y = problem()
    runner = samflow.Discrete(eta=ETA, steps=STEPS, save=samflow.Every(STEPS), batch=3, m=1)
    common = dict(depth=DEPTH, data=(X, y), rho=RHO, runner=runner, save_trajectories=True)
    sw = samflow.sweep("sam-l2", alpha=ALPHA, axes={"noise_seed": [0, 1, 2]}, **common)
    finals = []
    for s in (0, 1, 2):
        one = engine("sam-l2", seed=s, batch=3, m=1)
        # one program per grid point and per trajectory: the same arithmetic, maybe
        # another vectorisation of it (float64 roundings: RTOL)
        assert norm_rel(sw["beta"].sel(noise_seed=s).values, one["beta"].values) < RTOL
        finals.append(one["beta"].values[-1])
    assert min(np.linalg.norm(finals[i] - finals[j]) for i, j in ((0, 1), (0, 2), (1, 2))) > 1e-6
    # the seed axis draws the initialisation and keys the steps with the same seed
    init = samflow.sweep("sam-l2", axes={"seed": [4, 5, 6]}, **common)  # the program above
    alone = samflow.trajectory(
        "sam-l2",
        depth=DEPTH,
        data=(X, y),
        alpha_per_coord=init["seed_alpha"].values[0],
        rho=RHO,
        runner=runner,
        seed=4,
    )
    assert norm_rel(init["beta"].sel(seed=4).values, alone["beta"].values) < RTOL


# ---- (e) label noise, in samflow.fit (any pytree, real labels) --------------------------


def test_fit_label_noise_minibatch_one_sam_replays_numpy():
    rng = np.random.default_rng(3)
    X, y = rng.normal(size=(8, 5)), rng.normal(size=8)
    runner = samflow.Discrete(eta=0.1, steps=15, batch=4, m=1, label_noise=0.3)
    sampling = Sampling(n=8, batch=4, m=1, label_noise=0.3)

    def loss(w, X, y):
        return 0.5 * jnp.mean((X @ w - y) ** 2)

    out = samflow.fit(
        loss, jnp.zeros(5), "sam-l2", rho=0.05, runner=runner, data=(X, y), dtype="float64", seed=9
    )
    w = np.zeros(5)
    for t in range(15):
        with jax.enable_x64(True):
            index, xi = map(np.asarray, draws(run_key(9), t, sampling, jnp.float64))
        Xb, yb = X[index], (y + 0.3 * xi)[index]
        grads = []
        for i in range(4):  # m = 1: every example its own perturbation
            g = Xb[i] * (Xb[i] @ w - yb[i])
            wp = w + 0.05 * g / np.linalg.norm(g)
            grads.append(Xb[i] * (Xb[i] @ wp - yb[i]))
        w = w - 0.1 * np.mean(grads, axis=0)
    assert norm_rel(out.params, w) < RTOL
    # the recorded loss is the full, noiseless training loss
    np.testing.assert_allclose(out.loss[-1], 0.5 * np.mean((X @ w - y) ** 2), rtol=1e-12)


def test_label_noise_on_u2_v2_regression_replays_numpy():
    # The diagonal engine with real labels (u2-v2, squared loss): label-noise minibatch
    # SGD and label-noise 2-SAM, replayed in NumPy with the engine's draws.
    rng = np.random.default_rng(5)
    X, y = rng.normal(size=(8, 5)), rng.normal(size=8)
    a, eta, rho, steps, seed = 0.3, 0.05, 0.1, 15, 4

    def grad(W, Xb, yb):  # W = (u, v): beta = u^2 - v^2, loss (1/2b) ||Xb beta - yb||^2
        c = Xb.T @ (Xb @ (W[0] ** 2 - W[1] ** 2) - yb) / len(yb)
        return np.stack([2 * W[0] * c, -2 * W[1] * c])

    for method, m in (("gd", None), ("sam-l2", 2)):
        runner = samflow.Discrete(eta=eta, steps=steps, save=samflow.Every(steps), batch=4, m=m,
                                  label_noise=0.5)  # fmt: skip
        ds = samflow.trajectory(
            method, depth=2, data=(X, y), loss="squared", parametrization="u2-v2", alpha=a,
            rho=None if method == "gd" else rho, runner=runner, seed=seed,
        )  # fmt: skip
        sampling = Sampling(n=8, batch=4, m=m, label_noise=0.5)
        W = np.full((2, 5), a)
        for t in range(steps):
            with jax.enable_x64(True):
                index, xi = map(np.asarray, draws(run_key(seed), t, sampling, jnp.float64))
            Xb, yb = X[index], (y + 0.5 * xi)[index]
            if m is None:
                W = W - eta * grad(W, Xb, yb)
                continue
            grads = []
            for k in range(0, 4, m):
                g = grad(W, Xb[k : k + m], yb[k : k + m])
                grads.append(grad(W + rho * g / np.linalg.norm(g), Xb[k : k + m], yb[k : k + m]))
            W = W - eta * np.mean(grads, axis=0)
        assert norm_rel(ds["theta_final"].values, W) < RTOL, method
        assert ds.attrs["label_noise"] == 0.5 and ds.attrs["step_path"] == "general"


def test_label_noise_signs_are_fair():
    # 4000 draws of +-1: the mean is within 4 standard deviations (1 / sqrt(4000)) of 0
    sampling = Sampling(n=8, label_noise=1.0)
    with jax.enable_x64(True):
        xi = jax.vmap(lambda t: draws(run_key(0), t, sampling, jnp.float64)[1])(jnp.arange(500))
    xi = np.asarray(xi)
    assert set(np.unique(xi).tolist()) == {-1.0, 1.0}
    assert abs(xi.mean()) < 4 / np.sqrt(xi.size)
    assert abs(np.mean(xi[1:] * xi[:-1])) < 4 / np.sqrt(xi.size)  # fresh at each step


# ---- (f) bad input ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("runner", "method", "match"),
    [
        (dict(batch=7), "sam-l2", "batch = 7 exceeds the number of data points n = 6"),
        (dict(batch=0), "sam-l2", "batch must be an integer >= 1, got 0"),
        (dict(batch=4, m=3), "sam-l2", "m = 3 must divide batch = 4"),
        (dict(m=4), "sam-l2", r"m = 4 must divide n = 6 \(full batch\)"),
        (dict(m=2), "gd", "m = 2 needs a method that perturbs; gd does not"),
        (dict(label_noise=-0.1), "sam-l2", "label-noise must be >= 0, got -0.1"),
        (dict(label_noise=float("nan")), "sam-l2", "label-noise must be finite"),
        (dict(batch=2.5), "sam-l2", "batch must be an integer"),
        (dict(label_noise=0.1), "gd", r"label_noise = 0.1 needs real labels"),
    ],
)
def test_bad_stochastic_inputs(runner, method, match):
    X, y = problem()
    with pytest.raises(samflow.InputError, match=match):
        SweepSpec.from_inputs(
            method,
            depth=DEPTH,
            data=(X, y),
            rho=None if method == "gd" else RHO,
            runner=samflow.Discrete(eta=ETA, **runner),
        )


def test_bad_seeds_and_fit_inputs(capsys):
    X, y = problem()
    common = dict(depth=DEPTH, data=(X, y), rho=RHO)
    with pytest.raises(samflow.InputError, match=r"seed must be an integer in 0\.\.\d+, got -1"):
        SweepSpec.from_inputs("sam-l2", runner=samflow.Discrete(batch=2), seed=-1, **common)
    with pytest.raises(samflow.InputError, match="seed is set both as a value and by an axis"):
        SweepSpec.from_inputs(
            "sam-l2", runner=samflow.Discrete(batch=2), seed=1, axes={"noise_seed": [0]}, **common
        )
    with pytest.raises(samflow.InputError, match="axis noise_seed needs stochastic steps"):
        SweepSpec.from_inputs(
            "sam-l2", runner=samflow.Discrete(), axes={"noise_seed": [0, 1]}, **common
        )
    with pytest.raises(samflow.InputError, match=r"need the examples: pass data=\(X, y\)"):
        samflow.fit(lambda w: jnp.sum(w**2), jnp.ones(2), "gd", runner=samflow.Discrete(batch=1))
    with pytest.raises(samflow.InputError, match="data: X and y hold 3 and 2 examples"):
        samflow.fit(
            lambda w, X, y: jnp.sum(w**2),
            jnp.ones(2),
            "gd",
            runner=samflow.Discrete(batch=1),
            data=(np.ones((3, 2)), np.ones(2)),
        )
    rc = main(["trajectory", "--method", "sam-l2", "--depth", "2", "--mu", "1,2", "--rho",
               "0.1", "--alpha", "1", "--batch", "2", "--out", "never.nc"])  # fmt: skip
    assert rc == 2
    assert "batch = 2 exceeds the number of data points n = 1" in capsys.readouterr().err
