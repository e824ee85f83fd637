"""Benchmark case 5: one l2-SAM training step of the default CNN, three ways.

The same net (:class:`samflow.images.models.CNN`, channels 8, 16, 32, no biases), the
same synthetic MNIST-shaped data (28x28, one channel), minibatches of 128 drawn without
replacement, rho = 0.05, eta = 0.1:

- samflow: :func:`samflow.images.train.make_run` with ``loop="host"`` (the CPU default)
  and ``loop="scan"``, the convolution chosen by ``conv="auto"`` (the default), and the
  host loop once more with ``conv="lax"`` (``lax.conv`` in every layer) to show what
  the choice buys; a run of ``steps`` steps with a record at both ends, so two
  evaluations of the (small) train and test sets are included in the time;
- equinox + ``lax.scan``: the plain loop a researcher would write (vmapped per-image
  module, ``jax.grad``, the SAM update by hand, every step inside one ``lax.scan``);
- PyTorch CPU: ``torch.nn.Conv2d`` net of the same shape, the same SAM update.

The unit is SAM steps per second.
"""

from __future__ import annotations

import itertools

import numpy as np

BATCH = 128
RHO, ETA = 0.05, 0.1
CHANNELS = (8, 16, 32)


def _data(n_train: int, n_test: int):
    from samflow.images.tasks import BinaryTask

    rng = np.random.default_rng(0)
    raw_test = rng.uniform(0, 1, (n_test, 28, 28, 1)).astype(np.float32)

    def images(n):
        return rng.normal(size=(n, 1, 28, 28)).astype(np.float32)

    def labels(n):
        return np.where(rng.uniform(size=n) < 0.5, -1.0, 1.0).astype(np.float32)

    return BinaryTask(
        images(n_train),
        labels(n_train),
        images(n_test),
        labels(n_test),
        raw_test,
        (3, 8),
        ("3", "8"),
        np.zeros(1, np.float32),
        np.ones(1, np.float32),
    )


def samflow_run(
    loop: str,
    steps: int,
    n_train: int = 1024,
    n_test: int = 128,
    conv: str = "auto",
    batch: int = BATCH,
):
    """``() -> None``: ``steps`` l2-SAM steps of minibatches of ``batch`` through
    samflow's training run."""
    import jax

    from samflow.images.models import cnn_classifier
    from samflow.images.train import TrainConfig, make_run, task_arrays
    from samflow.runners import Discrete, Every

    classifier = cnn_classifier(1, CHANNELS, conv=conv)
    data = task_arrays(_data(n_train, n_test), 0.1)
    runner = Discrete(eta=ETA, steps=steps, save=Every(steps))
    config = TrainConfig("sam-l2", RHO, runner, batch, loop=loop)
    run = make_run(classifier, config)
    params0 = classifier.init(jax.random.key(0))

    def go():
        jax.block_until_ready(run(params0, jax.random.key(1), data))

    return go


def equinox_scan(steps: int, n_train: int = 1024):
    """``() -> None``: the plain equinox + lax.scan SAM loop."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    from samflow.images.models import CNN

    task = _data(n_train, 1)
    x_all, y_all = jnp.asarray(task.x_train), jnp.asarray(task.y_train)
    params, static = eqx.partition(CNN(1, CHANNELS, key=jax.random.key(0)), eqx.is_array)

    def loss(p, x, y):
        net = eqx.combine(p, static)
        return jnp.mean(jax.nn.softplus(-y * jax.vmap(net)(x)))

    def step(p, key):
        idx = jax.random.choice(key, n_train, (BATCH,), replace=False)
        x, y = x_all[idx], y_all[idx]
        g = jax.grad(loss)(p, x, y)
        norm = jnp.sqrt(sum(jnp.sum(v**2) for v in jax.tree_util.tree_leaves(g)))
        ascent = jax.tree_util.tree_map(lambda a, b: a + RHO * b / norm, p, g)
        g2 = jax.grad(loss)(ascent, x, y)
        return jax.tree_util.tree_map(lambda a, b: a - ETA * b, p, g2), None

    run = jax.jit(lambda p, key: jax.lax.scan(step, p, jax.random.split(key, steps))[0])

    def go():
        jax.block_until_ready(run(params, jax.random.key(1)))

    return go


def torch_loop(steps: int, n_train: int = 1024):
    """``() -> None``: the same net and SAM step in PyTorch on the CPU."""
    import torch

    torch.manual_seed(0)
    task = _data(n_train, 1)
    x_all, y_all = torch.from_numpy(task.x_train), torch.from_numpy(task.y_train)
    sizes = (1, *CHANNELS)
    convs = torch.nn.ModuleList(
        torch.nn.Conv2d(a, b, 3, padding=1, bias=False) for a, b in itertools.pairwise(sizes)
    )
    head = torch.nn.Linear(CHANNELS[-1], 1, bias=False)
    params = [*convs.parameters(), *head.parameters()]

    def logits(x):
        for i, conv in enumerate(convs):
            x = torch.relu(conv(x))
            if i < len(convs) - 1:
                x = torch.nn.functional.avg_pool2d(x, 2)
        return head(x.mean((2, 3))).squeeze(-1)

    def loss(x, y):
        return torch.nn.functional.softplus(-y * logits(x)).mean()

    def go():
        for _ in range(steps):
            idx = torch.randperm(n_train)[:BATCH]
            x, y = x_all[idx], y_all[idx]
            g = torch.autograd.grad(loss(x, y), params)
            norm = torch.sqrt(sum((v**2).sum() for v in g))
            with torch.no_grad():
                for p, v in zip(params, g, strict=True):
                    p.add_(RHO * v / norm)
            g2 = torch.autograd.grad(loss(x, y), params)
            with torch.no_grad():
                for p, v, v2 in zip(params, g, g2, strict=True):
                    p.sub_(RHO * v / norm + ETA * v2)

    return go
