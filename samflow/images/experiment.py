"""The image study as one Python call: :func:`study` is what ``samflow cnn`` runs.

``samflow.images.study(["gd", "sam-l2"], alpha=[1.5, 2, 2.5, 3], seeds=10, ...)``
returns the Dataset that ``samflow cnn --method gd,sam-l2 --alpha 1.5,2,2.5,3 --seeds 10
...`` writes (:mod:`samflow.images.results`), every default defined once, here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import xarray as xr

from samflow.errors import InputError
from samflow.images import data as image_data
from samflow.images import tasks
from samflow.images.attribution import (
    DEFAULT_BACKGROUND_THRESHOLD,
    DEFAULT_BOX,
    Background,
    background_mask,
)
from samflow.images.models import check_conv, default_channels, make_classifier
from samflow.images.results import DEFAULT_MATCH_LOSS, build_dataset
from samflow.images.train import (
    TrainConfig,
    example_indices,
    train_seeds,
    uniform_share,
)
from samflow.runners import Discrete, Every

# Chosen on MNIST 3 vs 8 (docs/images.md): with alpha = 2 and rho = 0.25, l2-SAM sits in
# the medium regime (a loss plateau, then learning), while rho = 0.5 at alpha = 1 and
# rho = 1 at alpha = 2 stayed at log 2 (collapse) for 240 steps.
DEFAULTS = {
    "rho": 0.25,
    "alpha": 2.0,
    "eta": 0.3,
    "steps": 600,
    "batch": 128,
    "seeds": 3,
    "n_train": 1000,
    "n_test": 500,
    "record_every": 100,
    "examples": 6,
}


def check_alphas(alpha: float | Sequence[float], shown: str | None = None) -> list[float]:
    """``alpha`` as a list of distinct positive finite floats; InputError naming it
    (as ``shown``, the text it came from, if given) otherwise."""
    alphas = [float(a) for a in np.atleast_1d(np.asarray(alpha, dtype=np.float64))]
    shown = shown if shown is not None else ",".join(f"{a:g}" for a in alphas)
    if not alphas or not all(np.isfinite(alphas)) or min(alphas) <= 0:
        raise InputError(f"alpha must be positive, got {shown}")
    if len(set(alphas)) < len(alphas):
        raise InputError(f"alpha repeats a value: {shown}")
    return alphas


def check_settings(
    *,
    background_threshold: float,
    match_loss: float,
    background: str = "dark",
    background_box: float = DEFAULT_BOX,
    min_accuracy: float | None = None,
) -> Background:
    """The background mask; InputError naming a bad measurement setting (the training
    settings are :class:`samflow.images.train.TrainConfig`'s)."""
    mask = Background(background, background_threshold, background_box)
    if not 0 < match_loss:
        raise InputError(f"match_loss must be positive, got {match_loss}")
    if min_accuracy is not None and not 0 <= min_accuracy <= 1:
        raise InputError(f"min_accuracy must be in [0, 1], got {min_accuracy}")
    return mask


def study(
    methods: Sequence[str],
    *,
    dataset: str = "mnist",
    data_dir: str | None = None,
    classes: str | None = None,
    alpha: float | Sequence[float] = DEFAULTS["alpha"],
    rho: float = DEFAULTS["rho"],
    eta: float = DEFAULTS["eta"],
    base_optimizer: str = "sgd",
    steps: int = DEFAULTS["steps"],
    batch: int | None = DEFAULTS["batch"],
    seeds: int = DEFAULTS["seeds"],
    model: str = "cnn",
    channels: tuple[int, ...] | None = None,
    conv: str = "auto",
    n_train: int = DEFAULTS["n_train"],
    n_test: int = DEFAULTS["n_test"],
    normalise: bool = True,
    background_threshold: float = DEFAULT_BACKGROUND_THRESHOLD,
    background: str = "dark",
    background_box: float = DEFAULT_BOX,
    min_accuracy: float | None = None,
    record_every: int = DEFAULTS["record_every"],
    split_seed: int = 0,
    examples: int = DEFAULTS["examples"],
    match_loss: float = DEFAULT_MATCH_LOSS,
    loop: str = "auto",
    log: Callable[[str], None] = print,
    history: str | None = None,
) -> xr.Dataset:
    """Train ``methods`` on a binary image task for every alpha and seed; the result.

    Every method sees the same data, initialisation and minibatch order per seed, so
    the SAM - GD differences in the result are paired. ``batch=None`` (or 0): full
    batch. ``conv`` chooses how the CNN's convolutions are computed
    (:func:`samflow.images.models.conv_same`; the numbers agree to float32 rounding).
    ``channels``: the CNN's conv widths; None:
    :func:`samflow.images.models.default_channels` of the image size (8, 16, 32; 8, 16
    for the 8x8 digits). ``log`` gets the progress lines (``lambda _: None`` for
    none). ``background``:
    ``dark`` (brightness below ``background_threshold``) or ``border`` (outside the
    centred box of side ``background_box``; :class:`samflow.images.attribution.Background`).
    ``min_accuracy``: a run whose final test accuracy is below it did not learn; its
    seed's pairs are left out of the paired differences (None: all count). Returns the
    Dataset of :mod:`samflow.images.results` (an ``alpha`` dim for several alphas).

    Examples:
        GD against l2-SAM on scikit-learn's built-in 8x8 digits, with the L = 2 diagonal
        network on the pixels (the CNN is ``model="cnn"``), tiny and quick:

        >>> from samflow.images import study
        >>> result = study(["gd", "sam-l2"], dataset="digits", model="diagonal", steps=10,
        ...                seeds=1, n_train=64, n_test=64, batch=None, record_every=5,
        ...                examples=2, log=lambda _: None)
        >>> result.optimizer.values.tolist(), result.step.values.tolist()
        (['gd', 'sam-l2'], [0, 5, 10])
        >>> result.background_share.dims
        ('optimizer', 'seed')
        >>> bool((result.loss.isel(record=-1) < result.loss.isel(record=0)).all())
        True
    """
    alphas = check_alphas(alpha)
    check_conv(conv)
    mask = check_settings(
        background_threshold=background_threshold,
        match_loss=match_loss,
        background=background,
        background_box=background_box,
        min_accuracy=min_accuracy,
    )
    batch = batch or None  # 0 or None: full batch
    runner = Discrete(eta=eta, steps=steps, save=Every(record_every))
    # Made (and so checked) before any data is read.
    configs = [TrainConfig(m, rho, runner, batch, base_optimizer, loop) for m in methods]
    pair = tasks.parse_classes(classes, dataset)
    data = image_data.load_dataset(dataset, data_dir, split_seed=split_seed)
    if data.split_note:
        log(f"note: {data.split_note}")
    task = tasks.binary_task(
        data, pair, n_train=n_train, n_test=n_test, normalise=normalise, seed=split_seed
    )
    n_train, n_test = task.x_train.shape[0], task.x_test.shape[0]
    height, width = task.x_train.shape[2:]
    if channels is None:
        channels = default_channels(height, width)
    if model == "cnn" and min(height, width) < 2 ** (len(channels) - 1):
        raise InputError(
            f"channels {','.join(map(str, channels))}: {len(channels)} conv layers "
            f"halve the {height}x{width} images {len(channels) - 1} times, to nothing; "
            f"use at most {min(height, width).bit_length()} layers"
        )
    for config in configs:
        config.check_batch(n_train)
    log(
        f"{dataset} {task.class_names[0]} (-1) vs {task.class_names[1]} (+1): "
        f"{n_train} training, {n_test} test images; model {model}, alpha "
        f"{','.join(f'{a:g}' for a in alphas)}"
    )
    shown = example_indices(task.y_test, examples)
    runs = {}
    for a in alphas:
        classifier = make_classifier(
            model, task.x_train.shape[1:], alpha=a, channels=channels, conv=conv
        )
        if len(alphas) > 1:
            log(f"alpha {a:g}:")
        runs[a] = [
            train_seeds(
                classifier,
                task,
                config,
                list(range(seeds)),
                threshold=mask,
                examples=shown,
                log=log,
            )
            for config in configs
        ]
    attrs = {
        "title": "GD vs SAM on images: background share of attribution",
        "dataset": dataset,
        "classes": tasks.classes_text(pair),
        "class_names": task.class_names,
        "split_note": data.split_note or "train and test splits as published",
        "source": data.source,
        "model": model,
        "rho": rho,
        "eta": eta,
        "base_optimizer": base_optimizer,
        "steps": steps,
        "batch": "full" if batch is None else batch,
        "n_train": n_train,
        "n_test": n_test,
        "normalise": normalise,
        "background_threshold": background_threshold,
        "attribution_class": "the true label of each test image",
    }
    if background != "dark":  # a dark-background file stays as before the option
        attrs["background"] = background
        attrs["background_box"] = background_box
    if model == "cnn":
        attrs["channels"] = channels
        attrs["conv"] = conv
    if len(alphas) == 1:
        attrs["alpha"] = alphas[0]
    dark = np.asarray(background_mask(task.raw_test, background_threshold))
    return build_dataset(
        runs if len(alphas) > 1 else runs[alphas[0]],
        {"image": task.raw_test[shown], "label": task.y_test[shown]},
        attrs,
        match_loss=match_loss,
        uniform_share=uniform_share(np.asarray(mask.mask(task.raw_test))),
        min_accuracy=min_accuracy,
        uniform_dark_share=None if background == "dark" else uniform_share(dark),
        history=history
        or f"samflow.images.study({list(methods)!r}, dataset={dataset!r}, alpha={alphas!r}, ...)",
    )


def summary_lines(ds: xr.Dataset) -> list[str]:
    """The printed summary of a result: per alpha and method, then the paired
    differences (what ``samflow cnn`` prints at the end)."""
    lines = [f"uniform map background share: {float(ds['uniform_background_share']):.3f}"]
    if "uniform_dark_share" in ds:
        lines[0] += f"; dark share: {float(ds['uniform_dark_share']):.3f}"
    alphas = ds["alpha"].values if "alpha" in ds.dims else [None]
    for a in alphas:
        one = ds if a is None else ds.sel(alpha=a)
        if a is not None:
            lines.append(f"alpha {a:g}:")
        methods = one["optimizer"].values if "optimizer" in one.dims else [ds.attrs["method"]]
        for m in methods:
            lines.append(_method_line(one.sel(optimizer=m) if "optimizer" in one.dims else one, m))
        lines.extend(_not_learned(one, methods))
        shares = [("background_share", "at the end")]
        shares.append(("background_share_at_loss", f"at loss {ds.attrs['match_loss']:g}"))
        if "dark_share" in ds:
            shares.append(("dark_share", "on dark pixels at the end"))
        for contrast in one["contrast"].values if "contrast" in one.dims else []:
            c = one.sel(contrast=contrast)
            for var, label in shares:
                lines.append(
                    f"  {contrast} Grad-CAM background share {label}: "
                    f"{float(c[var + '_diff_mean']):+.3f} [{float(c[var + '_diff_ci_low']):+.3f}, "
                    f"{float(c[var + '_diff_ci_high']):+.3f}] (95% CI), paired t p = "
                    f"{float(c[var + '_diff_p_value']):.3g}, {int(c[var + '_diff_n'])} seeds"
                )
    return lines


def _not_learned(ds: xr.Dataset, methods) -> list[str]:
    """The runs that did not learn (``learned`` 0), by name, and the pairs left out."""
    if "learned" not in ds:
        return []
    several = "optimizer" in ds.dims
    out = []
    for m in methods:
        one = ds.sel(optimizer=m) if several else ds
        for seed, ok, acc in zip(
            one["seed"].values, one["learned"].values, one["test_accuracy"].values, strict=True
        ):
            if not ok:
                out.append(
                    f"  did not learn: {m} seed {seed} (test accuracy {acc:.3f} < "
                    f"{ds.attrs['min_accuracy']:g})"
                )
    if several and out:
        pairs = int(np.sum(np.any(ds["learned"].values == 0, axis=0)))
        out.append(f"  {pairs} seed pair(s) left out of the paired differences")
    return out


def _method_line(ds: xr.Dataset, method: str) -> str:
    def ms(name: str) -> str:
        v = ds[name].values.astype(np.float64)
        n = int(np.sum(np.isfinite(v)))
        sd = np.nanstd(v, ddof=1) if n > 1 else 0.0
        return f"{np.nanmean(v):.3f} ± {sd:.3f}" if n else "n/a"

    dark = f", dark pixels {ms('dark_share')}" if "dark_share" in ds else ""
    return (
        f"{method:8s} background share: Grad-CAM {ms('background_share')}{dark}, saliency "
        f"{ms('saliency_background_share')}; top-10% mass {ms('top_mass')}; occlusion drop "
        f"background {ms('occlusion_background')} / stroke {ms('occlusion_stroke')}; test "
        f"accuracy {ms('test_accuracy')} over {ds.sizes['seed']} seeds "
        f"({float(ds['seconds']):.0f} s)"
    )
