"""Stochastic steps: minibatches, m-sharpness groups and label noise
(docs/theory/stochastic.md#stochastic-steps).

One mechanism for every discrete runner (:func:`samflow.discrete.simulate`, the
diagonal engine; :func:`samflow.fit`, any pytree): the record loop hands each step its
number ``t`` (:func:`samflow.loop.take_steps`), and the run's PRNG key ``K`` (from its
seed, :func:`run_key`) gives the step's key ``fold_in(K, t)``, the one a random rule
gets too. From it come two independent streams:

* the minibatch: the first ``batch`` entries of a random permutation of the ``n``
  examples, drawn with ``fold_in(fold_in(K, t), MINIBATCH)``: a fresh subset every
  step, without replacement within the step (independent across steps, so that an
  example can appear in consecutive steps; not epochs of shuffles);
* the label noise: ``xi`` ``[n]`` random signs (+1 or -1, each with probability 1/2)
  drawn with ``fold_in(fold_in(K, t), LABEL_NOISE)``; the step's labels are
  ``y_i + delta * xi_i`` (each example's noise is fresh at every step).

:func:`draws` is the whole of it for one run; the engine maps it over its grid points
(each point has its own key), and a test can call it to replay a run's draws.

m-sharpness cuts the step's (mini)batch, in the order drawn, into ``batch / m``
consecutive groups of ``m`` examples (:func:`group`); :func:`samflow.steps.step` takes
them as :class:`samflow.steps.Groups`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # JAX is imported when a run is made, not when it is described
    from jax import Array

MINIBATCH = 1
"""The stream of the minibatch draws (folded into the step's key)."""
LABEL_NOISE = 2
"""The stream of the label-noise draws (folded into the step's key)."""


@dataclass(frozen=True)
class Sampling:
    """A run's stochastic step, resolved against its data (static, hashable).

    Attributes:
        n: number of examples.
        batch: examples per step, ``1 <= batch < n``; None: all ``n`` in their order
            (no draw: a ``batch`` equal to ``n`` is this, so it computes exactly the
            full-batch step).
        m: examples per group (m-sharpness), dividing the batch and smaller than it;
            None: one group.
        label_noise: ``delta``; 0: no noise.
    """

    n: int
    batch: int | None = None
    m: int | None = None
    label_noise: float = 0.0

    @classmethod
    def of(cls, runner, n: int) -> Sampling | None:
        """The sampling of a :class:`samflow.runners.Discrete` runner on ``n`` examples
        (None when the run is today's deterministic full-batch step). The runner's
        values are checked (:func:`samflow.inputs.check_sampling`)."""
        if runner.mode != "discrete" or not runner.stochastic:
            return None
        batch = None if runner.batch in (None, n) else runner.batch
        m = None if runner.m in (None, batch or n) else runner.m
        if batch is None and m is None and runner.label_noise == 0:
            return None
        return cls(n=n, batch=batch, m=m, label_noise=runner.label_noise)

    @property
    def size(self) -> int:
        """Examples per step."""
        return self.batch or self.n

    @property
    def groups(self) -> int:
        """Groups per step (1 without m-sharpness)."""
        return self.size // self.m if self.m else 1


def run_key(seed: int | Array) -> Array:
    """The PRNG key of the run of ``seed`` (``jax.random.key(seed)``)."""
    import jax

    return jax.random.key(seed)


def seed_key_data(seeds) -> np.ndarray:
    """The raw key data ``[C, ...]`` (uint32) of :func:`run_key` for each seed, made on
    the host in 64-bit mode (seeds up to 2^53), to travel with a sweep's points."""
    import jax
    import jax.numpy as jnp

    seeds = np.asarray(seeds, np.int64).reshape(-1)
    with jax.enable_x64(True):
        return np.asarray(jax.random.key_data(jax.vmap(run_key)(jnp.asarray(seeds))))


def draws(key: Array, t: Array, sampling: Sampling, dtype) -> tuple[Array | None, Array | None]:
    """Step ``t``'s draws of the run keyed ``key``: ``(index [batch] or None, xi [n] or
    None)``: the minibatch (in the order drawn) and the label noise's signs."""
    import jax

    k = jax.random.fold_in(key, t)
    index = xi = None
    if sampling.batch is not None:
        perm = jax.random.permutation(jax.random.fold_in(k, MINIBATCH), sampling.n)
        index = perm[: sampling.batch]
    if sampling.label_noise > 0:
        xi = jax.random.rademacher(jax.random.fold_in(k, LABEL_NOISE), (sampling.n,), dtype)
    return index, xi


def group(a: Array, sampling: Sampling) -> Array:
    """``[size, ...]`` -> ``[groups, m, ...]``: consecutive groups of the step's examples."""
    return a.reshape(sampling.groups, sampling.size // sampling.groups, *a.shape[1:])
