"""The CNN and diagonal classifiers, the SAM step on them, Grad-CAM and training."""

from __future__ import annotations

import re

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from tolerance import CNN_REORDER_RTOL, F32_EPS, assert_close, norm_rel

from samflow import rules, steps
from samflow.errors import InputError
from samflow.images import attribution, models, train
from samflow.images.tasks import BinaryTask
from samflow.runners import At, Discrete, Every, LogSpaced


def _runner(eta: float, steps: int, record_every: int) -> Discrete:
    return Discrete(eta=eta, steps=steps, save=Every(record_every))


def test_cnn_shapes_and_alpha_scaling():
    key = jax.random.key(1)
    one = models.CNN(3, (4, 8), alpha=1.0, key=key)
    two = models.CNN(3, (4, 8), alpha=2.0, key=key)
    x = jax.random.normal(jax.random.key(2), (3, 16, 16))
    call = eqx.filter_jit(lambda net, x: (net(x), net.features(x).shape))
    (logit_one, shape), (logit_two, _) = call(one, x), call(two, x)
    assert shape == (8, 8, 8)
    # No biases: the logit is homogeneous of degree (#conv layers + 1) in the weights.
    # Doubling every weight is exact in binary floating point (measured: equal); 1e-5
    # (~100 eps) allows a compiler that reorders the layers' sums.
    np.testing.assert_allclose(logit_two, 2.0**3 * logit_one, rtol=1e-5)


def _equinox_logit(net: models.CNN, x: jax.Array) -> jax.Array:
    """One image through ``eqx.nn.Conv2d`` itself (``lax.conv`` inside equinox, NCHW)."""
    for i, layer in enumerate(net.convs):
        x = jax.nn.relu(layer(x))
        if i < len(net.convs) - 1:
            k, h, w = x.shape
            x = x.reshape(k, h // 2, 2, w // 2, 2).mean(axis=(2, 4))
    return net.head(jnp.mean(x, axis=(1, 2)))


@pytest.mark.parametrize("in_channels", [1, 3])
@pytest.mark.parametrize("conv", models.CONVS)
def test_every_conv_matches_equinox_conv2d(conv, in_channels):
    """Logits, parameter and input gradients, and a forward-mode derivative of the
    default CNN, float32, against the same weights run through ``eqx.nn.Conv2d``."""
    x = jax.random.normal(jax.random.key(1), (12, in_channels, 28, 28))
    y = jnp.where(jax.random.uniform(jax.random.key(2), (12,)) < 0.5, -1.0, 1.0)
    net = models.CNN(in_channels, alpha=2.0, conv=conv, key=jax.random.key(3))
    params, static = eqx.partition(net, eqx.is_inexact_array)

    def logits(p, x, batched):
        m = eqx.combine(p, static)
        return m.logits(x) if batched else jax.vmap(lambda xi: _equinox_logit(m, xi))(x)

    def loss(p, x, batched):
        return models.logistic_loss(y * logits(p, x, batched))

    # The convs sum in different orders: the same float32 rounding as two compilations.
    batched = jax.jit(logits, static_argnums=2)
    reference = batched(params, x, False)
    assert norm_rel(batched(params, x, True), reference) < CNN_REORDER_RTOL
    assert norm_rel(jax.jit(jax.vmap(net))(x), reference) < CNN_REORDER_RTOL  # one at a time
    for argnum in (0, 1):  # parameters, then the input (what saliency maps use)
        grad = jax.jit(jax.grad(loss, argnums=argnum), static_argnums=2)
        assert norm_rel(grad(params, x, True), grad(params, x, False)) < CNN_REORDER_RTOL

    # Forward mode on the logits (not the loss, a sum that cancels). The tangent is an
    # argument: a constant one meets an XLA miscompile (next test).
    tangent = jax.tree_util.tree_map(jnp.ones_like, params)
    jvp = jax.jit(
        lambda t, b: jax.jvp(lambda p: logits(p, x, b), (params,), (t,))[1], static_argnums=1
    )
    assert norm_rel(jvp(tangent, True), jvp(tangent, False)) < CNN_REORDER_RTOL


def test_cpu_compiler_options_avoid_an_xla_ynnpack_miscompile():
    """Three chained SAME convolutions with constant all-ones kernels, summed: with
    YNNPACK fusions on (XLA's CPU default in jaxlib 0.10) the compiled program returned
    1/16 of the value; :func:`train.compiler_options` turns them off. The reference
    passes the kernels as arguments, which XLA compiles correctly either way."""
    x = jax.random.normal(jax.random.key(1), (4, 28, 28, 1))
    shapes = [(3, 3, 1, 8), (3, 3, 8, 16), (3, 3, 16, 32)]

    def chain(x, *kernels):
        for w in kernels:
            x = models.conv_same(x, w, "lax")
        return jnp.sum(x)

    reference = jax.jit(chain)(x, *[jnp.ones(s) for s in shapes])
    constant = jax.jit(
        lambda x: chain(x, *[jnp.ones(s) for s in shapes]),
        compiler_options=train.compiler_options(),
    )(x)
    # A float32 sum of n terms errs by ~sqrt(n) eps of the sum of the terms' magnitudes,
    # not of the sum, which cancels (x is signed; relative to it the two differ by 5e-5).
    # With n ~ 1e5 that is 4e-5; measured 1.2e-6. The miscompile errs by 2e-2 of it.
    magnitudes = jax.jit(chain)(jnp.abs(x), *[jnp.ones(s) for s in shapes])
    assert abs(float(constant) - float(reference)) <= 1e-4 * float(magnitudes)


@pytest.mark.parametrize("kernel", [(2, 2), (3, 3), (5, 3)])
def test_shifted_conv_matches_lax_conv(kernel):
    """SAME padding for odd and even kernels, non-square images, several channels."""
    x = jax.random.normal(jax.random.key(4), (3, 9, 6, 2))
    w = jax.random.normal(jax.random.key(5), (*kernel, 2, 4))
    # Each output sums at most 5 x 3 x 2 = 30 products: a few eps of the outputs' scale
    # (measured 1.7e-7 of it); elements near zero are held to that scale.
    assert_close(
        models.conv_same(x, w, "shifted"), models.conv_same(x, w, "lax"), rtol=1e-5, atol=1e-5
    )


def test_unknown_conv_is_an_input_error():
    with pytest.raises(InputError, match="unknown conv 'fft'"):
        models.CNN(1, key=jax.random.key(0), conv="fft")


def test_cpu_compiler_options_change_speed_not_results():
    """The YNNPACK option (on a CPU) leaves a CNN gradient the same to float32 rounding."""
    options = train.compiler_options()
    if jax.default_backend() == "cpu":
        assert options == {train.YNN_OPTION: ""}
    clf = models.cnn_classifier(1)
    params = clf.init(jax.random.key(0))
    x = jax.random.normal(jax.random.key(1), (16, 1, 28, 28))
    y = jnp.where(jnp.arange(16) % 2 == 0, 1.0, -1.0)
    with_options = jax.jit(clf.grad_and_aux, compiler_options=options)(params, x, y)
    default = jax.jit(clf.grad_and_aux)(params, x, y)
    # Not elementwise: some gradient entries are near zero. Measured 9.5e-6 on AVX-512.
    assert norm_rel(with_options, default) < CNN_REORDER_RTOL


def test_one_sam_step_on_the_cnn_matches_optax():
    clf = models.cnn_classifier(1, (3, 4))
    params = clf.init(jax.random.key(0))
    x = jax.random.normal(jax.random.key(1), (6, 1, 8, 8))
    y = jnp.array([1.0, -1.0, 1.0, 1.0, -1.0, -1.0])
    rho, eta = 0.3, 0.7

    def grad_fn(p):
        return clf.grad_and_aux(p, x, y)

    ours = jax.jit(lambda p: steps.step(p, grad_fn, rules.SAM_L2, rho, eta)[0])(params)

    # optax's SAM: one normalised ascent step of size rho, then SGD from the cached point.
    sam = optax.contrib.sam(
        optax.sgd(eta),
        optax.chain(optax.contrib.normalize(), optax.sgd(rho)),
        sync_period=2,
        opaque_mode=True,
    )

    @jax.jit
    def optax_step(p):
        updates, _ = sam.update(grad_fn(p)[0], sam.init(p), p, grad_fn=lambda q, _: grad_fn(q)[0])
        return optax.apply_updates(p, updates)

    theirs = optax_step(params)
    # One step by two programs: a few roundings of each leaf's scale (measured: equal).
    assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    moved = sum(
        float(jnp.abs(a - b).sum())
        for a, b in zip(
            jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(params), strict=True
        )
    )
    assert moved > 0


@pytest.mark.parametrize(
    "base_optimizer, base",
    [("momentum", optax.sgd(0.2, momentum=0.9)), ("adam", optax.adam(0.2))],
)
def test_base_optimizers_train_as_optax_contrib_sam(base_optimizer, base):
    task = _planted_patch_task(n=16, size=8)
    clf = models.diagonal_classifier((1, 8, 8), alpha=0.5)
    config = train.TrainConfig("sam-l2", 0.1, _runner(0.2, 6, 3), None, base_optimizer)
    data = train.task_arrays(task, 0.6)
    params0 = clf.init(None) * jnp.linspace(0.5, 1.5, 64)
    ours, history = train.make_run(clf, config)(params0, jax.random.key(0), data)

    # The reference: optax's SAM (one normalised ascent step, then the base step from
    # the unperturbed point, per call) around the same base, in a Python loop.
    sam = optax.contrib.sam(
        base,
        optax.chain(optax.contrib.normalize(), optax.sgd(0.1)),
        sync_period=2,
        opaque_mode=True,
    )

    def grad(p):
        return clf.grad_and_aux(p, data.x_train, data.y_train)[0]

    update = jax.jit(lambda p, s: sam.update(grad(p), s, p, grad_fn=lambda q, _: grad(q)))
    theirs, state, losses = params0, sam.init(params0), []
    for t in range(config.runner.steps + 1):
        if t % config.record_every == 0:
            losses.append(float(clf.grad_and_aux(theirs, data.x_train, data.y_train)[1].loss))
        if t < config.runner.steps:
            updates, state = update(theirs, state)
            theirs = optax.apply_updates(theirs, updates)
    # Six steps by two programs: a few roundings of the parameters' scale per step
    # (measured <= 8e-8 of it). Under Adam the loss falls to ~1e-8: the small records
    # are held to the scale of the first.
    assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    assert_close(history.loss, np.asarray(losses), rtol=1e-5, atol=1e-6)
    assert history.loss[-1] < history.loss[0]


@pytest.mark.parametrize(
    "args, message",
    [
        (("sam-l2", float("inf"), _runner(0.1, 4, 2)), "rho must be finite, got inf"),
        (("sam-l2", -1.0, _runner(0.1, 4, 2)), "rho must be >= 0, got -1.0"),
        (
            ("sam-l2", 0.1, _runner(0.1, 4, 3)),
            r"steps \(4\) must be a multiple of record_every \(3\)",
        ),
        (("sam-l2", 0.1, Discrete(steps=100, save=LogSpaced(5))), "evenly spaced"),
        (
            ("sam-l2", 0.1, Discrete(save=At((0, 2, 3)))),
            r"records at steps \[0, 2, 3\] are not",
        ),
        (("sam-l2", 0.1, Discrete(steps=201)), r"steps \[0, 2, 4, '...', 200, 201\] are not"),
        (("sam-l2", 0.1, _runner(0.1, 2**31 - 1, 1)), "2147483647 records; at most 1000000"),
        (("sam-l2", 0.1, _runner(0.1, 4, 2), 0), "batch must be an integer >= 1 or None, got 0"),
        (("sam-l2", 0.1, _runner(0.1, 4, 2), None, "sgd", "gpu"), "unknown loop 'gpu'"),
        (("sam-l2", 0.1, {"eta": 0.1}), "needs a Discrete runner"),
    ],
)
def test_a_bad_training_config_names_the_value(args, message):
    with pytest.raises(InputError, match=message):
        train.TrainConfig(*args)


def test_unknown_base_optimizer_is_an_input_error():
    with pytest.raises(InputError, match="'rmsprop'"):
        train.TrainConfig("gd", 0.0, _runner(0.1, 2, 1), None, "rmsprop")


def test_diagonal_gradient_matches_autodiff():
    clf = models.diagonal_classifier((1, 4, 4), alpha=0.5)
    theta = clf.init(None) * jnp.linspace(0.5, 1.5, 16)
    x = jax.random.normal(jax.random.key(3), (5, 1, 4, 4))
    y = jnp.array([1.0, -1.0, 1.0, -1.0, 1.0])

    def loss(t):
        return models.logistic_loss(y * jax.vmap(lambda xi: clf.logit(t, xi))(x))

    @jax.jit
    def both(t):
        return (
            clf.grad_and_aux(t, x, y),
            jax.grad(loss)(t),
            loss(t),
            attribution.saliency(clf, t, x[0]),
        )

    (grads, aux), reference, value, saliency = both(theta)
    # Each logit sums 16 products of size ~0.25: sqrt(16) eps of that is ~1e-7 of a
    # loss ~0.8 and of the gradient's scale (measured 1.6e-7 and 7e-8); 1e-5 leaves room.
    assert_close(grads, reference, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(aux.loss, value, rtol=1e-5)
    # Saliency of a linear model is |beta| = |w1 * w2| at every image: one float32
    # product on each side, so at most one rounding apart (measured: equal).
    np.testing.assert_allclose(saliency, jnp.abs(theta[0] * theta[1]).reshape(4, 4), rtol=F32_EPS)


def _planted_patch_task(n: int = 48, size: int = 12) -> BinaryTask:
    """Weak noise everywhere; a 4x4 patch in the top-left corner holds +1 or -1: the label."""
    rng = np.random.default_rng(0)
    x = rng.normal(0.0, 0.1, size=(n, 1, size, size)).astype(np.float32)
    y = np.where(np.arange(n) % 2 == 0, 1.0, -1.0).astype(np.float32)
    x[:, :, :4, :4] = y[:, None, None, None]
    raw = np.clip(x.transpose(0, 2, 3, 1) + 0.5, 0.0, 1.0)
    return BinaryTask(x, y, x, y, raw, (0, 1), ("minus", "plus"), np.zeros(1), np.ones(1))


def test_gradcam_and_saliency_concentrate_on_a_planted_patch():
    task = _planted_patch_task()
    clf = models.cnn_classifier(1, (4, 8), alpha=1.0)
    config = train.TrainConfig("gd", 0.0, _runner(1.0, 40, 40), None)
    # "Background" here is the patch: its share should be far above its 16/144 area.
    patch = np.zeros((12, 12), bool)
    patch[:4, :4] = True
    result = train.train_seeds(
        clf, task, config, [0], threshold=0.99, examples=np.arange(0, 8, 2), log=lambda _: None
    )
    assert result.history.train_accuracy[0, -1] == 1.0
    cam_share = attribution.background_shares(result.example_cam, patch[None])
    sal_share = attribution.background_shares(result.example_saliency, patch[None])
    area = patch.mean()
    assert float(jnp.min(cam_share)) > 3 * area, cam_share
    # Saliency does not localise here: the input gradient of a ReLU net with global
    # pooling is spread over every pixel whose first-layer units are active, noise
    # included. It is checked against the closed form of the diagonal network instead.
    assert float(jnp.mean(sal_share)) > 0.5 * area, sal_share


def test_training_records_and_background_share():
    task = _planted_patch_task(n=32, size=8)
    clf = models.diagonal_classifier((1, 8, 8), alpha=0.5)
    config = train.TrainConfig("sam-l2", 0.1, _runner(0.5, 6, 3), 4)
    result = train.train_seeds(
        clf, task, config, [0, 1], threshold=0.6, examples=np.arange(3), log=lambda _: None
    )
    assert result.record_steps.tolist() == [0, 3, 6]
    assert result.history.loss.shape == (2, 3)
    assert result.example_cam.shape == (3, 8, 8)
    # Step-0 metrics do not depend on the seed (balanced init of the diagonal network).
    # Two rows of one batched program may sum in another order (vector body against
    # remainder): a few eps of a positive loss (measured: equal).
    np.testing.assert_allclose(result.history.loss[0, 0], result.history.loss[1, 0], rtol=1e-5)
    assert np.all((result.history.background_share >= 0) & (result.history.background_share <= 1))


def test_background_share_by_hand():
    maps = jnp.array([[[1.0, 3.0], [0.0, 0.0]], [[0.0, 0.0], [0.0, 0.0]]])
    background = jnp.array([[[True, False], [True, True]]] * 2)
    shares = attribution.background_shares(maps, background)
    np.testing.assert_allclose(shares[0], 0.25)  # 1 / (1 + 3): exact in binary
    assert np.isnan(shares[1])
    np.testing.assert_allclose(attribution.mean_background_share(maps, background), 0.25)


@pytest.mark.parametrize(
    "method, base",
    [("sam-l2", "sgd"), ("sam-linf", "momentum"), (rules.RANDOM_L2, "sgd")],
    ids=["sam-l2", "sam-linf", "random-l2"],
)
def test_host_and_scan_drivers_agree(method, base):
    """The Python-driven loop (fast on a CPU) and the one compiled program (for a GPU)
    use the same keys and step: the same run to float32 rounding."""
    task = _planted_patch_task(n=24, size=8)
    clf = models.cnn_classifier(1, (3, 4), alpha=1.0)
    data = train.task_arrays(task, 0.6)
    params0 = clf.init(jax.random.key(3))
    out = {}
    for loop in ("host", "scan"):
        config = train.TrainConfig(method, 0.2, _runner(0.3, 8, 4), 6, base, loop=loop)
        out[loop] = train.make_run(clf, config)(params0, jax.random.key(5), data)
    # Eight steps by two programs: a few roundings of each leaf's scale per step
    # (measured <= 1.7e-7 of it); the near-zero records (occlusion deltas, ~1e-4) are
    # held to their own leaf's scale, not to an absolute 1e-6.
    assert_close(out["host"], out["scan"], rtol=1e-5, atol=1e-6)
    moved = jax.tree_util.tree_map(
        lambda a, b: float(jnp.abs(a - b).max()), out["host"][0], params0
    )
    assert max(jax.tree_util.tree_leaves(moved)) > 1e-3  # it trained


def test_controls_by_hand():
    """Concentration: a uniform map puts 10% of its mass on its top 10% of pixels, a
    map on one pixel all of it; the uniform share is the background area fraction."""
    maps = jnp.stack([jnp.ones((10, 10)), jnp.zeros((10, 10)).at[3, 4].set(2.0)])
    # Ratios of sums of positive pixels: a few roundings (measured 1.5e-8).
    np.testing.assert_allclose(train.top_mass(maps), [0.1, 1.0], rtol=1e-6)
    assert np.isnan(train.top_mass(jnp.zeros((1, 10, 10)))[0])
    background = np.zeros((2, 4, 4), bool)
    background[0, :2] = True  # half of image 0, none of image 1
    assert train.uniform_share(background) == 0.25


def test_occlusion_of_the_evidence_pixels_hurts_most():
    """On the planted-patch task the patch carries the label: setting it to the mean
    removes more evidence than setting the rest of the image to the mean."""
    task = _planted_patch_task(n=32, size=8)
    clf = models.diagonal_classifier((1, 8, 8), alpha=0.5)
    config = train.TrainConfig("gd", 0.0, _runner(0.5, 20, 20), None)
    patch = np.zeros((32, 8, 8), bool)
    patch[:, :4, :4] = True
    data = train.task_arrays(task, 0.6)._replace(background=jnp.asarray(~patch))
    _, history = train.make_run(clf, config)(clf.init(None), jax.random.key(0), data)
    assert float(history.occlusion_stroke[-1]) > 5 * abs(float(history.occlusion_background[-1]))
    assert float(history.zero_maps[-1]) == 0


def test_border_background_is_outside_the_centred_box():
    """The box of side 0.5 in a 32x32 image is rows and columns 8..23 (16 pixels,
    margins of 8 on each side); on 12x12 it is 3..8; the mask is the same for every
    image and does not depend on the pixels."""
    inside = attribution.box_mask(32, 32, 0.5)
    assert inside.sum() == 256 and inside[8:24, 8:24].all()
    np.testing.assert_array_equal(np.flatnonzero(inside.any(axis=1)), np.arange(8, 24))
    np.testing.assert_array_equal(np.flatnonzero(attribution.box_mask(12, 12, 0.5)[6]), range(3, 9))
    rng = np.random.default_rng(0)
    raw = rng.uniform(size=(3, 32, 32, 3)).astype(np.float32)
    mask = np.asarray(attribution.Background("border").mask(raw))
    assert mask.shape == (3, 32, 32) and (mask == ~inside).all()
    dark = attribution.Background("dark", 0.3).mask(raw)
    np.testing.assert_array_equal(dark, raw.mean(axis=-1) < 0.3)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"kind": "edge"}, "unknown background 'edge'"),
        ({"kind": "border", "box": 1.0}, "background_box must be in (0, 1), got 1.0"),
        ({"kind": "border", "box": 0.0}, "got 0.0"),
        ({"threshold": 0.0}, "background_threshold must be in (0, 1], got 0.0"),
    ],
)
def test_a_bad_background_names_the_value(kwargs, message):
    with pytest.raises(InputError, match=re.escape(message)):
        attribution.Background(**kwargs)


@pytest.mark.parametrize(
    "size, channels, side",
    [
        (28, (8, 16, 32), 7),
        (32, (8, 16, 32), 8),
        (12, (8, 16, 32), 3),
        (8, (8, 16), 4),
        (4, (8,), 4),
    ],
)
def test_default_channels_keep_a_grad_cam_map_of_at_least_3x3(size, channels, side):
    """MNIST, CIFAR-10 and the 12x12 test images keep the three blocks; the built-in 8x8
    digits get two (a 4x4 map, not 2x2). The side is that of the map the CNN computes."""
    assert models.default_channels(size, size) == channels
    net = models.CNN(1, channels, key=jax.random.key(0))
    assert net.features(jnp.ones((1, size, size))).shape == (channels[-1], side, side)
