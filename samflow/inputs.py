"""Every input of a run checked once, here, without JAX; and the defaults they share.

Each check raises :class:`samflow.InputError` (a ``ValueError``) with one line naming
the bad value; the command line prints it and exits 2. Nothing here imports JAX, so a
bad command line is refused in a fraction of a second, before any compilation:
:meth:`samflow.sweeps.spec.SweepSpec.from_inputs`, the one constructor of a run's
description, is built from these checks, and the runners
(:mod:`samflow.runners`) check their own fields with them.

Sizes are refused before any work too: :func:`check_bytes` compares what a run would
hold in memory with what the machine has.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Sequence

import numpy as np

from samflow.errors import InputError

METHODS: dict[str, bool] = {"gd": False, "sam-l2": True, "sam-linf": True, "usam": True}
"""The built-in methods (:mod:`samflow.rules`) and whether each takes a radius rho."""
DTYPES = ("float64", "float32")
PARAMETRIZATIONS = ("product", "u2-v2", "uv")
"""The names of the built-in parametrisations (:mod:`samflow.parametrizations`, the
command line's choices), here so that a name is checked before JAX loads: the diagonal
network's predictor (docs/theory/models.md#parametrisations-and-losses): ``product`` beta = w^(1)
... w^(L) (the paper's, any depth); ``u2-v2`` beta = u^2 - v^2 and ``uv`` beta = u v (two rows u, v:
depth 2)."""
LOSSES = ("logistic", "exponential", "squared")
"""The names of the built-in per-point losses (:mod:`samflow.losses`): ``logistic`` and
``exponential`` of the margin y <beta, x> (labels in {-1, +1}); ``squared`` (1/2)(<beta,
x> - y)^2 with real y (docs/theory/models.md#parametrisations-and-losses)."""
MAX_HESSIAN = 512
"""Largest Hessian (``L_max * d`` rows) whose top eigenvalue a run solves exactly at
every record (``sharpness``): the solve costs ``(L d)^3``. Compiling does not grow with
``L`` (the curvature and the eigensolve are loops and cumulative products, not unrolled
over layers): ``trajectory --depth 128 --mu 1,2,3,4 --sharpness`` compiled in 11 s and
0.8 GiB peak (2026-12-05, 2-core machine)."""
SEED_ALPHA_RANGE = (0.05, 5.0)
"""A ``seed`` axis draws alpha_j log-uniform in this range."""
DEFAULT_CHUNK = 16384
"""Grid points per chunk of a sweep (each chunk is one call of the compiled program)."""

MAX_LAYERS = 256
"""Deepest network: the layer products are unrolled in the compiled program
(:func:`samflow.model.exclusive_products`), so its size and compile time grow with the
depth; a thousand layers would compile for many minutes before the first step."""
MEMORY_SHARE = 0.5
"""A run may plan to hold at most this share of the machine's memory."""


def _kind(value) -> str:
    return type(value).__name__


def _scalar(value):
    """A 0-d array (NumPy, JAX, ...; not a traced value) as its NumPy scalar."""
    if getattr(value, "ndim", None) == 0 and hasattr(value, "__array__"):
        try:
            return np.asarray(value)[()]
        except Exception:  # a JAX tracer: no value to check here
            return value
    return value


def real(name: str, value) -> float:
    """A finite real number (not a bool, string or complex; a 0-d NumPy or JAX array is
    its number); InputError naming it."""
    value = _scalar(value)
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        raise InputError(f"{name} must be a number, got {value!r} ({_kind(value)})")
    value = float(value)
    if not math.isfinite(value):
        raise InputError(f"{name} must be finite, got {value}")
    return value


def positive(name: str, value) -> float:
    """A finite number > 0."""
    value = real(name, value)
    if value <= 0:
        raise InputError(f"{name} must be > 0, got {value}")
    return value


def fraction(name: str, value) -> float:
    """A number in the open interval (0, 1)."""
    value = real(name, value)
    if not 0 < value < 1:
        raise InputError(f"{name} must lie in (0, 1), got {value}")
    return value


def integer(name: str, value, minimum: int = 1, maximum: int | None = None) -> int:
    """A whole number in ``[minimum, maximum]`` (an integral float is taken, a bool not)."""
    value = _scalar(value)
    bad = isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real)
    if bad or not math.isfinite(value) or int(value) != value:
        raise InputError(f"{name} must be an integer, got {value!r} ({_kind(value)})")
    value = int(value)
    if value < minimum or (maximum is not None and value > maximum):
        bound = f">= {minimum}" if maximum is None else f"in {minimum}..{maximum}"
        raise InputError(f"{name} must be an integer {bound}, got {value}")
    return value


def real_array(name: str, value, ndim: int | None = None) -> np.ndarray:
    """A float64 array of finite real numbers (no strings, booleans, complex or objects,
    no masked entries), of ``ndim`` dimensions with no empty axis when ``ndim`` is given."""
    if np.ma.isMaskedArray(value):
        if np.ma.is_masked(value):
            raise InputError(
                f"{name} has {int(np.ma.count_masked(value))} masked entries; fill or drop them "
                "(a mask is not a value)"
            )
        value = np.ma.getdata(value)
    try:
        a = np.asarray(value)
    except (TypeError, ValueError):  # ragged nesting
        raise InputError(f"{name} must be an array of numbers, got {value!r}") from None
    if a.dtype.kind == "c":
        raise InputError(f"{name} must be real, got complex values")
    if a.dtype.kind not in "iuf":
        raise InputError(f"{name} must hold numbers, got {a.dtype} values")
    a = a.astype(np.float64)
    if ndim is not None and (a.ndim != ndim or 0 in a.shape):
        raise InputError(f"{name} must be a non-empty {ndim}-D array, got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise InputError(f"{name} contains NaN or inf")
    return a


def check_depth(depth, name: str = "depth") -> int:
    """Number of layers, 1..:data:`MAX_LAYERS`."""
    return integer(name, depth, 1, MAX_LAYERS)


def check_alpha(alpha, name: str = "alpha") -> np.ndarray:
    """Positive, finite initialisation scales ``[k]`` (a number gives ``[1]``)."""
    a = np.atleast_1d(real_array(name, alpha))
    if a.ndim != 1 or a.size == 0:
        raise InputError(f"{name} must be a number or a non-empty vector, got shape {a.shape}")
    if np.any(a <= 0):
        raise InputError(f"{name} must be > 0, got {a.tolist()}")
    return a


def check_method(method) -> None:
    """A name of :data:`METHODS` or a rule object (it checks itself when made)."""
    if isinstance(method, str) and method in METHODS:
        return
    if not isinstance(method, str) and hasattr(method, "needs_rho"):
        return
    raise InputError(
        f"unknown method {method!r}; choose one of {', '.join(METHODS)} or pass a PerturbationRule"
    )


def check_rho(method, rho, ignored_ok: bool = False) -> float:
    """Validated ``rho`` for ``method`` (a name or a rule): required, finite and >= 0 when
    the method perturbs; None or 0 for one without ascent step (0 is returned), or any
    finite ``rho >= 0`` with ``ignored_ok`` (a signature where rho is positional)."""
    check_method(method)
    needs = METHODS[method] if isinstance(method, str) else method.needs_rho
    name = method if isinstance(method, str) else method.name
    if rho is None:
        if needs:
            raise InputError(f"method {name} needs rho")
        return 0.0
    rho = real("rho", rho)
    if rho < 0:
        raise InputError(f"rho must be >= 0, got {rho}")
    if not needs and rho != 0 and not ignored_ok:
        raise InputError(f"method {name} takes no rho (it has no ascent step), got rho = {rho}")
    return rho


def check_dtype(dtype) -> str:
    """``float64`` or ``float32`` (a name or a NumPy dtype)."""
    try:  # np.dtype(None) is float64: None is refused, not read as a choice
        name = np.dtype(dtype).name if not isinstance(dtype, str | None) else dtype
    except TypeError:
        name = None
    if name not in DTYPES:
        raise InputError(f"unknown dtype {dtype!r}; choose float64 or float32")
    return name


def check_range(name: str, value) -> tuple[float, float]:
    """``(low, high)`` with ``0 < low < high``, both finite."""
    if isinstance(value, str) or not isinstance(value, Sequence | np.ndarray):
        raise InputError(f"{name} must be a pair (LOW, HIGH), got {value!r}")
    if len(value) != 2:
        raise InputError(f"{name} must be a pair (LOW, HIGH), got {len(value)} values")
    lo, hi = (real(name, v) for v in value)
    if not 0 < lo < hi:
        raise InputError(f"{name} must be 0 < LOW < HIGH, got {lo}, {hi}")
    return lo, hi


def check_flag(name: str, value) -> bool:
    """A bool (``True``/``False``, not a number or a string)."""
    if not isinstance(value, bool | np.bool_):
        raise InputError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def check_major(mu: np.ndarray, name: str = "mu") -> None:
    """Refuse a ``mu`` ``[d]`` (or rows ``[k, d]``) whose largest entry is tied: the major
    coordinate, ``argmax_j mu_j``, names the regimes (docs/theory/regimes.md#definitions)."""
    rows = np.atleast_2d(mu)
    tied = np.sum(rows == rows.max(axis=1, keepdims=True), axis=1) > 1
    if np.any(tied):
        raise InputError(
            f"{name} {rows[np.argmax(tied)].tolist()}: its largest entry is tied, so there "
            "is no major coordinate (argmax mu); make it unique"
        )


def check_model(parametrization, loss, depth) -> tuple[object, object]:
    """The model options, checked before JAX loads: a name must be that of a built-in
    parametrisation (:data:`PARAMETRIZATIONS`) or loss (:data:`LOSSES`); an object (a
    :class:`samflow.Parametrization` or :class:`samflow.Loss`) checked itself when it was
    made, and :class:`samflow.model.Model` refuses anything else. A parametrisation with
    a fixed number of rows (its ``rows``: u2-v2 and uv have two, u and v) takes only
    that ``depth``."""
    for what, value, names in (
        ("parametrization", parametrization, PARAMETRIZATIONS),
        ("loss", loss, LOSSES),
    ):
        if isinstance(value, str) and value not in names:
            raise InputError(f"unknown {what} {value!r}; choose from {', '.join(names)}")
        check_hashable(value, what)
    rows = fixed_rows(parametrization)
    if rows is not None and depth != rows:
        name = getattr(parametrization, "name", parametrization)
        raise InputError(
            f"parametrization {name} has {rows} rows: depth must be {rows}, got {depth}"
        )
    return parametrization, loss


DAY_SECONDS = 86_400.0
FASTEST_RATE = 1e12
"""Coordinate-steps per second (grid points x d x steps, the benchmarks' unit) that no
machine samflow runs on reaches: about 650 times the fastest marginal rate measured on
the bench CPU (1.53e9/s, docs/benchmarks.md, case 4b). A run past a day at this rate
takes longer than a day anywhere."""


def check_duration(points: int, d: int, steps: int, yes: bool) -> None:
    """Refuse (``InputError``) a discrete run of ``points`` x ``d`` x ``steps`` that no
    machine finishes in a day (:data:`FASTEST_RATE`), unless ``yes``: a typo of a few
    zeros in ``steps`` would run until killed, with no word."""
    check_flag("yes", yes)
    work = float(points) * float(d) * float(steps)
    if not yes and work > FASTEST_RATE * DAY_SECONDS:
        days = work / (FASTEST_RATE * DAY_SECONDS)
        raise InputError(
            f"{points} point{'s' if points != 1 else ''} x d = {d} x {steps} steps is "
            f"{work:.3g} coordinate-steps: more "
            f"than {days:.3g} days even at {FASTEST_RATE:.0e}/s, beyond any machine; pass "
            "--yes (Python: yes=True) to run it all the same"
        )


def check_hashable(value, what: str) -> None:
    """Refuse (``InputError``) a parametrisation or loss that cannot be hashed: it is a
    static argument of compiled programs, so it must be a frozen dataclass (of hashable
    fields); the message names the class's ``__hash__`` and why it fails."""
    try:
        hash(value)
    except TypeError as err:
        cls = type(value).__name__
        if type(value).__hash__ is None:
            why = f"{cls}.__hash__ is None, as @dataclass without frozen=True makes it"
        else:
            first = (str(err).strip().splitlines() or [""])[0]
            why = f"{cls}.__hash__ raises TypeError: {first}; hold tuples, not lists or arrays"
        raise InputError(
            f"{what} {cls} is not hashable ({why}): make it a frozen dataclass "
            "(@dataclass(frozen=True)), as programs are compiled for it"
        ) from None


def fixed_rows(parametrization) -> int | None:
    """The number of rows a parametrisation (a name or an object) fixes, or None for a
    product of any depth (its ``rows``, read from the built-in names without JAX)."""
    if isinstance(parametrization, str):
        return None if parametrization == "product" else 2
    return getattr(parametrization, "rows", None)


def check_beta_star(beta_star, d: int) -> np.ndarray | None:
    """The ground truth ``beta*`` ``[d]`` (finite), or None."""
    if beta_star is None:
        return None
    b = real_array("beta_star", beta_star)
    if b.shape != (d,):
        raise InputError(f"beta_star must have shape ({d},) like a data point, got {b.shape}")
    return b


def check_problem(mu=None, data=None, loss="logistic") -> tuple[np.ndarray, np.ndarray]:
    """The data set of a run: one point ``mu`` or ``data = (X, y)``, exactly one.

    ``mu`` ``[d]`` finite and > 0 (the point ``x = mu``, ``y = +1``, for the squared loss
    too: the target 1); ``data`` a pair of ``X`` ``[n, d]`` finite and ``y`` ``[n]``, in
    {-1, +1} for a margin loss (logistic, exponential), any finite reals for the squared
    loss (a loss's name, or a :class:`samflow.Loss` whose ``margin`` says which). Returns
    ``X`` ``[n, d]`` and ``y`` ``[n]``, NumPy float64.
    """
    if (mu is None) == (data is None):
        raise InputError("give exactly one of mu (one point) and data (X, y)")
    if mu is not None:
        mu = real_array("mu", mu, ndim=1)
        if np.any(mu <= 0):
            raise InputError(f"mu entries must be > 0, got {mu.tolist()}")
        check_major(mu)
        return mu[None, :], np.ones(1)
    if isinstance(data, str) or not isinstance(data, Sequence) or len(data) != 2:
        raise InputError(f"data must be a pair (X, y), got {_kind(data)}")
    X, y = real_array("data X", data[0], ndim=2), real_array("data y", data[1], ndim=1)
    if X.shape[0] != y.shape[0]:
        raise InputError(f"data: X and y have shapes {X.shape} and {y.shape}; need (n, d) and (n,)")
    # Anything else (not a loss) is refused by samflow.model.Model, which names it.
    margin = loss != "squared" if isinstance(loss, str) else getattr(loss, "margin", True)
    if margin and not np.all(np.isin(y, (-1.0, 1.0))):
        shown = np.unique(y)[:8].tolist()
        name = getattr(loss, "name", loss)
        raise InputError(f"data: labels must be -1 or +1 for the {name} loss, got {shown}")
    return X, y


MAX_SEED = 2**53
"""Seeds are integers in ``0 .. MAX_SEED - 1`` (exact in a float64 axis)."""


NOTHING_RANDOM = (
    "nothing in this run is random (only a Discrete runner with batch, m or label_noise draws)"
)
"""Why a seed given to a deterministic run is refused (it would change nothing)."""


def check_seed(seed, name: str = "seed") -> int:
    """A seed: an integer in ``0 .. MAX_SEED - 1``."""
    return integer(name, seed, 0, MAX_SEED - 1)


def check_sampling(runner, method, n: int, margin_loss: bool = True) -> None:
    """The stochastic settings of a discrete ``runner`` against the data (``n``
    examples) and the ``method`` (a name or a rule); InputError naming the value.

    ``batch`` at most ``n``; ``m`` dividing the batch (``n`` for full batch) and only
    with a rule that perturbs (GD has no perturbation to split: ``m`` would change
    nothing); ``label_noise`` only with real labels (not a margin loss: adding noise to
    a label in {-1, +1} is not a label of that loss).
    """
    if runner.mode != "discrete" or not runner.stochastic:
        return
    if runner.batch is not None and runner.batch > n:
        raise InputError(f"batch = {runner.batch} exceeds the number of data points n = {n}")
    size = runner.batch or n
    if runner.m is not None:
        check_method(method)
        needs = METHODS[method] if isinstance(method, str) else method.needs_rho
        name = method if isinstance(method, str) else method.name
        if not needs:
            raise InputError(f"m = {runner.m} needs a method that perturbs; {name} does not")
        if runner.m > size or size % runner.m:
            what = f"batch = {size}" if runner.batch is not None else f"n = {size} (full batch)"
            raise InputError(f"m = {runner.m} must divide {what}")
    if runner.label_noise > 0 and margin_loss:
        raise InputError(
            f"label_noise = {runner.label_noise} needs real labels (the squared loss); "
            "labels in {-1, +1} of a margin loss take no additive noise"
        )


def memory_bytes() -> int:
    """Physical memory of this machine."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_bytes(what: str, need: float, limit: float | None = None) -> None:
    """Refuse a run that would hold ``need`` bytes, over ``limit`` (default
    :data:`MEMORY_SHARE` of the machine's memory); the message says what to shrink."""
    limit = MEMORY_SHARE * memory_bytes() if limit is None else limit
    if need > limit:
        raise InputError(
            f"{what} would need {need / 2**30:.3g} GiB, over the limit of "
            f"{limit / 2**30:.3g} GiB on this machine"
        )


def python_call(name: str, **kwargs) -> str:
    """A readable record of a Python call, for a file's ``history`` attribute."""
    shown = ", ".join(f"{k}={v!r}" for k, v in kwargs.items() if v is not None)
    return f"samflow.{name}({shown})"
