"""Training image classifiers with the engine's own step, and metrics at a schedule.

One run is ``init`` + :func:`samflow.steps.step` driven by a
:class:`~samflow.runners.Discrete` runner, with metrics taken at its records
``0, record_every, 2 * record_every, ..., steps``. With a base optimiser other than
plain SGD (momentum, Adam) the step is :func:`samflow.transform.sam` around it, its
state carried along. Seeds (initialisation and minibatch order) run one after another
through the same compiled functions; the data and its train/test split do not change
with the seed, and every method sees the same initialisation and minibatches per seed.

Two drivers, the same numbers (the same keys, the same step function):

- ``scan``: one compiled program, the engine's record loop
  (:func:`samflow.loop.record_loop`), each interval an inner scan of ``record_every``
  steps. Best where dispatch is costly (a GPU).
- ``host``: a Python loop over one compiled step and one compiled evaluation. On a CPU
  this is several times faster: XLA's CPU convolution runs far slower inside a loop body
  than outside one (jax-ml/jax#12868; benchmarks/bench.py case 5 measures it).

``auto`` picks ``host`` on a CPU and ``scan`` elsewhere.

On a CPU both drivers compile with :func:`compiler_options`, which keeps XLA from
handing convolutions and reductions to its YNNPACK library (about 1.5x faster for the
default CNN's step; docs/images.md has the numbers).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import Array

from samflow import mappings, rules, steps
from samflow.errors import InputError
from samflow.images.attribution import (
    Background,
    attribution_maps,
    background_mask,
    mean_background_share,
)
from samflow.images.models import Classifier, PyTree, logistic_loss
from samflow.images.tasks import BinaryTask
from samflow.loop import Interval, record_loop
from samflow.runners import At, Discrete, Every, LogSpaced, check_counters
from samflow.transform import apply_step, sam

BASE_OPTIMIZERS = ("sgd", "momentum", "adam")
LOOPS = ("auto", "host", "scan")
MAX_RECORDS = 10**6
"""At most this many records per run (the history is held in memory)."""
MOMENTUM = 0.9
TOP_FRACTION = 0.1
"""Concentration of a map: the share of its mass on its top 10% of pixels."""


YNN_OPTION = "xla_cpu_experimental_ynn_fusion_type"
"""The XLA CPU option naming the op kinds given to YNNPACK; empty: none."""


@functools.cache
def compiler_options() -> dict[str, str] | None:
    """XLA options for compiling image training on this backend; None: XLA's defaults.

    On a CPU, XLA (jaxlib 0.10) hands single convolutions and reductions to YNNPACK by
    default. For the small convolutions and the pooling of the default CNN that is
    slower than XLA's own kernels: an l2-SAM step at batch 128 takes about 14 ms with
    the option empty and 21 ms with the default (docs/images.md). It also avoids a
    miscompile of the YNNPACK path (chained convolutions with constant kernels; see
    ``tests/test_images_cnn.py``). The option is experimental; where this jaxlib does
    not know it, the defaults are kept.
    """
    if jax.default_backend() != "cpu":
        return None
    options = {YNN_OPTION: ""}
    try:
        jax.jit(lambda v: v + 1, compiler_options=options).lower(1.0).compile()
    except jax.errors.JaxRuntimeError:  # "No such compile option": keep XLA's defaults
        return None
    return options


def base_optimizer(name: str, eta: float) -> optax.GradientTransformation | None:
    """The optax base of ``name`` at learning rate ``eta``; None for plain SGD.

    ``sgd``: ``p - eta * g`` by :func:`samflow.steps.step` itself (no optax);
    ``momentum``: ``optax.sgd(eta, momentum=0.9)`` (heavy ball); ``adam``:
    ``optax.adam(eta)`` with optax's default betas and epsilon.
    """
    if name == "sgd":
        return None
    if name == "momentum":
        return optax.sgd(eta, momentum=MOMENTUM)
    if name == "adam":
        return optax.adam(eta)
    raise InputError(f"unknown base optimizer {name!r}; choose from {', '.join(BASE_OPTIMIZERS)}")


@dataclass(frozen=True)
class TrainConfig:
    """How to train: a rule at a radius, the :class:`~samflow.runners.Discrete` runner
    (step size, steps, records), the minibatches, the base optimiser and the driver.

    Checked when made (``InputError`` naming the bad value); the batch against the
    training set by :meth:`check_batch`, once the data is read.

    Attributes:
        method: a method of :data:`samflow.rules.METHODS` (``gd``, ``sam-l2``, ...) or a
            :class:`~samflow.rules.PerturbationRule` (made a rule when the config is).
        rho: SAM perturbation radius, finite and ``>= 0`` (ignored by GD).
        runner: ``eta`` (the learning rate of the base optimiser), ``steps`` and the
            records, which must be evenly spaced (``record_every`` dividing ``steps``):
            the minibatch keys are drawn per record interval.
        batch: minibatch size, or None for full-batch steps.
        base_optimizer: what takes the (SAM) gradient, one of :data:`BASE_OPTIMIZERS`
            (see :func:`base_optimizer`).
        loop: the driver, one of :data:`LOOPS` (module docstring).
    """

    method: str | rules.PerturbationRule
    rho: float
    runner: Discrete
    batch: int | None = None
    base_optimizer: str = "sgd"
    loop: str = "auto"

    def __post_init__(self) -> None:
        rule = rules.get_rule(self.method)
        object.__setattr__(self, "method", rule)
        # One rho serves every method of a study: GD ignores it.
        object.__setattr__(self, "rho", rules.check_rho(rule, self.rho, ignored_ok=True))
        if not isinstance(self.runner, Discrete):
            raise InputError(f"image training needs a Discrete runner, got {self.runner!r}")
        check_counters(self.runner, "float32")  # images compute in float32
        base_optimizer(self.base_optimizer, self.runner.eta)  # an unknown name raises
        if self.loop not in LOOPS:
            raise InputError(f"unknown loop {self.loop!r}; choose from {', '.join(LOOPS)}")
        if self.batch is not None and (isinstance(self.batch, bool) or not self.batch >= 1):
            raise InputError(f"batch must be an integer >= 1 or None, got {self.batch!r}")
        # Counted before ``times()`` is built: a step count of 2^31 would fill memory.
        runner, save = self.runner, self.runner.save
        every = save.k if isinstance(save, Every) else None
        n_records = len(save.times) - 1 if isinstance(save, At) else -1
        if every is not None:
            n_records = runner.steps // every
        if isinstance(save, LogSpaced) or (every is not None and runner.steps % every):
            raise InputError(
                f"steps ({runner.steps}) must be a multiple of record_every ({every}): "
                "image training records at evenly spaced steps"
            )
        if n_records > MAX_RECORDS:
            raise InputError(
                f"steps {runner.steps} / record_every {every} makes {n_records} records; "
                f"at most {MAX_RECORDS}"
            )
        times = runner.times()
        if np.unique(np.diff(times)).size != 1:
            shown = (
                times.tolist()
                if times.size <= 6
                else [*times[:3].tolist(), "...", *times[-2:].tolist()]
            )
            raise InputError(
                f"records at steps {shown} are not evenly spaced: image training records "
                "at evenly spaced steps (give record_every dividing steps)"
            )

    @property
    def rule(self) -> rules.PerturbationRule:
        """The perturbation rule (``method`` is one once the config is made)."""
        return self.method

    @property
    def record_every(self) -> int:
        """Steps between two records."""
        times = self.runner.times()
        return int(times[1] - times[0])

    @property
    def n_records(self) -> int:
        """Records including the one at step 0."""
        return int(self.runner.times().size)

    def check_batch(self, n_train: int) -> None:
        """InputError unless the minibatch fits in the ``n_train`` training images."""
        if self.batch is not None and not self.batch <= n_train:
            raise InputError(f"batch {self.batch} must be between 1 and n_train = {n_train}")


class Metrics(NamedTuple):
    """Metrics at one record (each a scalar; stacked over records by the scan).

    Fields:
        loss: logistic loss on the whole training set.
        train_accuracy: fraction of training images classified right.
        test_accuracy: the same on the test images.
        background_share: mean Grad-CAM background share over the test images.
        saliency_background_share: the same for input-gradient saliency.
        top_mass: mean share of each Grad-CAM map's mass on its top 10% of pixels
            (concentration: 0.1 for a uniform map, 1 for one on a tenth of the image).
        zero_maps: number of test images whose Grad-CAM map is zero everywhere (left
            out of the shares).
        occlusion_background: mean drop of the true-class evidence ``y * logit`` when
            the background pixels of a test image are set to the training mean.
        occlusion_stroke: the same when the stroke (non-background) pixels are.
        dark_share: with a ``border`` background, the mean Grad-CAM share on dark pixels
            (brightness below the threshold), reported beside the border share; None
            (no variable in the file) with the ``dark`` background, where it is
            ``background_share`` itself.
    """

    loss: Array
    train_accuracy: Array
    test_accuracy: Array
    background_share: Array
    saliency_background_share: Array
    top_mass: Array
    zero_maps: Array
    occlusion_background: Array
    occlusion_stroke: Array
    dark_share: Array | None = None


class TaskArrays(NamedTuple):
    """Device copies of a task; shapes as in :class:`samflow.images.tasks.BinaryTask`.

    Fields:
        x_train: ``[n_train, C, H, W]``; y_train: ``[n_train]``;
        x_test: ``[n_test, C, H, W]``; y_test: ``[n_test]``;
        background: ``[n_test, H, W]`` bool, background pixels of the test images.
        fill: ``[C]`` per-channel mean of the training inputs (what occlusion puts in).
        dark: ``[n_test, H, W]`` bool dark pixels beside a ``border`` background, else None.
    """

    x_train: Array
    y_train: Array
    x_test: Array
    y_test: Array
    background: Array
    fill: Array
    dark: Array | None = None


def task_arrays(task: BinaryTask, background: float | Background) -> TaskArrays:
    """Move a task to the device, with its test background mask: ``background`` a
    :class:`~samflow.images.attribution.Background`, or a brightness threshold (the
    ``dark`` mask at it)."""
    if not isinstance(background, Background):
        background = Background("dark", background)
    raw = jnp.asarray(task.raw_test)
    dark = None if background.kind == "dark" else background_mask(raw, background.threshold)
    return TaskArrays(
        jnp.asarray(task.x_train),
        jnp.asarray(task.y_train),
        jnp.asarray(task.x_test),
        jnp.asarray(task.y_test),
        background.mask(raw),
        jnp.asarray(task.x_train.mean(axis=(0, 2, 3))),
        dark,
    )


def uniform_share(background: np.ndarray) -> float:
    """The background share a uniform map scores: the mean background area fraction."""
    return float(np.mean(np.asarray(background, dtype=np.float64).mean(axis=(1, 2))))


def top_mass(maps: Array, fraction: float = TOP_FRACTION) -> Array:
    """Per-map share of mass on its top ``fraction`` of pixels, ``[n]``; NaN if all zero."""
    flat = maps.reshape(maps.shape[0], -1)
    k = max(1, round(fraction * flat.shape[1]))
    top = jnp.sum(jax.lax.top_k(flat, k)[0], axis=1)
    total = jnp.sum(flat, axis=1)
    return jnp.where(total > 0, top / jnp.where(total > 0, total, 1.0), jnp.nan)


def evaluate(classifier: Classifier, params: PyTree, data: TaskArrays) -> Metrics:
    """All metrics of ``params`` on ``data``."""

    def logits(x: Array) -> Array:
        return jax.vmap(lambda xi: classifier.logit(params, xi))(x)

    train_margin = data.y_train * logits(data.x_train)
    test_margin = data.y_test * logits(data.x_test)
    cams, sal = attribution_maps(classifier, params, data.x_test, data.y_test)
    fill = data.fill[None, :, None, None]

    def occluded(where: Array) -> Array:  # where [n, H, W]: the pixels set to the mean
        x = jnp.where(where[:, None], fill, data.x_test)
        return jnp.mean(test_margin - data.y_test * logits(x))

    return Metrics(
        loss=logistic_loss(train_margin),
        train_accuracy=jnp.mean(train_margin > 0),
        test_accuracy=jnp.mean(test_margin > 0),
        background_share=mean_background_share(cams, data.background),
        saliency_background_share=mean_background_share(sal, data.background),
        top_mass=jnp.nanmean(top_mass(cams)),
        zero_maps=jnp.sum(jnp.all(cams == 0, axis=(1, 2))).astype(jnp.float32),
        occlusion_background=occluded(data.background),
        occlusion_stroke=occluded(~data.background),
        dark_share=None if data.dark is None else mean_background_share(cams, data.dark),
    )


def resolve_loop(loop: str) -> str:
    """``host`` or ``scan`` for ``loop`` (``auto``: host on a CPU, else scan)."""
    if loop == "auto":
        return "host" if jax.default_backend() == "cpu" else "scan"
    return loop


def make_run(
    classifier: Classifier, config: TrainConfig
) -> Callable[[PyTree, Array, TaskArrays], tuple[PyTree, Metrics]]:
    """``(params0, key, data) -> (final params, Metrics [n_records])``, compiled once.

    Step ``i`` of record interval ``r`` uses the minibatch key
    ``split(split(key, n_records - 1)[r], record_every)[i]`` in both drivers; a random
    rule draws with ``fold_in`` of that key and 1, and gets the step's number.
    """
    rule, rho, eta = config.rule, config.rho, config.runner.eta
    record_every, n_records = config.record_every, config.n_records
    base = base_optimizer(config.base_optimizer, eta)
    # Plain SGD keeps the engine's own step, so earlier results are reproduced exactly.
    tx = None if base is None else sam(base, rho, rule)

    def one_step(carry: tuple[PyTree, optax.OptState], key: Array, t: Array, data: TaskArrays):
        params, opt_state = carry
        if config.batch is None:
            x, y = data.x_train, data.y_train
        else:
            idx = jax.random.choice(key, data.x_train.shape[0], (config.batch,), replace=False)
            x, y = data.x_train[idx], data.y_train[idx]
        rule_key = jax.random.fold_in(key, 1) if rule.random else None

        def grad_and_aux(p: PyTree):
            return classifier.grad_and_aux(p, x, y)

        if tx is None:
            new, _ = steps.step(params, grad_and_aux, rule, rho, eta, key=rule_key, t=t)
            return new, opt_state
        return apply_step(tx, params, opt_state, lambda p: grad_and_aux(p)[0], key=rule_key, step=t)

    if resolve_loop(config.loop) == "host":
        options = compiler_options()
        step_fn = jax.jit(one_step, compiler_options=options)
        evaluate_fn = jax.jit(
            lambda params, data: evaluate(classifier, params, data), compiler_options=options
        )
        split_fn = jax.jit(lambda k: jax.random.split(k, record_every))

        def run_host(params0: PyTree, key: Array, data: TaskArrays) -> tuple[PyTree, Metrics]:
            chunk_keys = jax.random.split(key, n_records - 1)
            carry = (params0, None if tx is None else tx.init(params0))
            history = []
            for r in range(n_records):
                history.append(evaluate_fn(carry[0], data))
                if r < n_records - 1:
                    step_keys = split_fn(chunk_keys[r])
                    for i in range(record_every):
                        t = np.int32(r * record_every + i)  # an array: no recompile per t
                        carry = step_fn(carry, step_keys[i], t, data)
            stacked = jax.tree_util.tree_map(lambda *v: jnp.stack(v), *history)
            return carry[0], stacked

        return run_host

    record_steps = np.asarray(config.runner.times(), np.int32)

    @functools.partial(jax.jit, compiler_options=compiler_options())
    def run(params0: PyTree, key: Array, data: TaskArrays) -> tuple[PyTree, Metrics]:
        chunk_keys = jax.random.split(key, n_records - 1)

        def advance(carry, interval: Interval):
            step_keys = jax.random.split(chunk_keys[interval.index], record_every)
            numbers = interval.start + jnp.arange(record_every, dtype=interval.start.dtype)
            carry, _ = jax.lax.scan(
                lambda c, kt: (one_step(c, *kt, data), None), carry, (step_keys, numbers)
            )
            return carry

        def record(carry):
            return carry, evaluate(classifier, carry[0], data)

        # No ``start``: the metrics appear once in the program (half the compile time).
        opt_state0 = None if tx is None else tx.init(params0)
        out = record_loop(advance, record, (params0, opt_state0), jnp.asarray(record_steps))
        return out.state[0], out.records

    return run


@dataclass(frozen=True)
class RunResult:
    """One method over several seeds.

    Attributes:
        method: the method's name.
        seeds: ``[n_seeds]`` seed values.
        record_steps: ``[n_records]`` step numbers of the records.
        history: Metrics whose fields are ``[n_seeds, n_records]`` numpy arrays.
        example_cam: ``[n_examples, H, W]`` Grad-CAM-slot maps of the example test
            images for the first seed at the end of training.
        example_saliency: ``[n_examples, H, W]`` saliency maps, same images and seed.
        seconds: wall-clock time of training and evaluation, compilation included.
    """

    method: str
    seeds: np.ndarray
    record_steps: np.ndarray
    history: Metrics
    example_cam: np.ndarray
    example_saliency: np.ndarray
    seconds: float


def example_indices(y_test: np.ndarray, n_examples: int) -> np.ndarray:
    """First test images, alternating the two classes, ``[min(n_examples, n_test)]``."""
    neg, pos = np.flatnonzero(y_test < 0), np.flatnonzero(y_test > 0)
    order = [i for pair in zip(neg, pos, strict=False) for i in pair]
    order += [i for i in range(y_test.size) if i not in set(order)]
    return np.asarray(order[:n_examples], dtype=np.int64)


def train_seeds(
    classifier: Classifier,
    task: BinaryTask,
    config: TrainConfig,
    seeds: Sequence[int],
    *,
    threshold: float | Background,
    examples: np.ndarray,
    log: Callable[[str], None] = print,
) -> RunResult:
    """Train ``classifier`` on ``task`` once per seed; metrics and example maps.

    ``threshold``: the background (:func:`task_arrays`)."""
    config.check_batch(task.x_train.shape[0])
    mappings.relieve()
    data = task_arrays(task, threshold)
    run = make_run(classifier, config)
    start = time.perf_counter()
    histories = []
    for i, seed in enumerate(seeds):
        init_key, train_key = jax.random.split(jax.random.key(seed))
        params, history = run(classifier.init(init_key), train_key, data)
        history = jax.tree_util.tree_map(np.asarray, history)
        histories.append(history)
        if i == 0:
            cams, sal = attribution_maps(
                classifier, params, data.x_test[examples], data.y_test[examples]
            )
            example_cam, example_saliency = np.asarray(cams), np.asarray(sal)
        base = "" if config.base_optimizer == "sgd" else f" ({config.base_optimizer})"
        log(
            f"{config.rule.name}{base} seed {seed}: loss {history.loss[-1]:.4f}, "
            f"test accuracy {history.test_accuracy[-1]:.3f}, background share "
            f"Grad-CAM {history.background_share[-1]:.3f} / saliency "
            f"{history.saliency_background_share[-1]:.3f} "
            f"({time.perf_counter() - start:.0f} s)"
        )
    stacked = Metrics(
        *(None if field[0] is None else np.stack(field) for field in zip(*histories, strict=True))
    )
    return RunResult(
        method=config.rule.name,
        seeds=np.asarray(seeds, dtype=np.int64),
        record_steps=config.runner.times(),
        history=stacked,
        example_cam=example_cam,
        example_saliency=example_saliency,
        seconds=time.perf_counter() - start,
    )
