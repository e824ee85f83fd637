"""The point runner: one compiled program that runs a batch of points to their summaries.

Every way through the engine ends here: :func:`samflow.trajectory` (one point),
:func:`samflow.sweep` and its resumable store (chunks of grid points), the figure
scripts and the benchmarks. A batch of points is a :class:`Points`; what the program
computes is fixed by a :class:`Setup` (the rule, the runner's static settings, the
dtype, what to keep), which is also the key of the compiled-program cache; the record
times are an argument, so one program serves every horizon and schedule of a kind.
:func:`run_points` pads the number of points and of records to a few sizes per
doubling (:func:`bucket`; a sharded batch's points also to whole vectors of
:data:`VECTOR`; padded records are masked out of every summary), so that a
new grid size or record count seldom compiles again; compiled programs are kept on
disk across processes (:mod:`samflow.compile_cache`), and the programs of samflow's own
settings are run as stored with ``jax.export`` (:mod:`samflow.exported`), so that a
second process does not trace them again. :func:`start_points` dispatches a
batch without waiting for it, and :func:`one_ahead` runs a sequence of batches with the
next one on the devices while the caller handles the results of the one before.

Inside the program each point runs the discrete runner (with the regime classifier as
its observer, :data:`samflow.regimes.OBSERVER`; the balanced step of
:mod:`samflow.balanced` where every point starts with equal layers and the rule treats
layers alike, :func:`step_path`) or the flow solver (summarised by
:func:`samflow.regimes.summarize`), so memory grows with points x records, never with
steps. Sharded programs cut the points into tiles spread over every device
(``shard_map``), each device running its tiles one after another (``lax.map``) so a
tile's data stay in cache; discrete tiles are batch-last
(docs/theory/numerics.md#depth-in-one-program and :mod:`samflow.layout`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, NamedTuple, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax
from jax.sharding import NamedSharding, PartitionSpec

from samflow import balanced, compile_cache, devices, exported, mappings, xla_options
from samflow import fate as fates
from samflow.classification import Classification
from samflow.discrete import Extension, Observer, simulate
from samflow.flow_config import ANY_EXTEND
from samflow.layout import argmax_rows, sum_rows
from samflow.model import DEFAULT, Model, Problem, layer_mask
from samflow.precision import precision
from samflow.regimes import FAILED, OBSERVER, finish, path_observer, summarize, track
from samflow.rules import PerturbationRule
from samflow.schema import GRID, POINT
from samflow.stochastic import Sampling
from samflow.summaries import Summaries

if TYPE_CHECKING:  # samflow.flows (diffrax) loads where a flow program is traced
    from samflow.flow_config import FlowConfig

Item, Result = TypeVar("Item"), TypeVar("Result")

KEEP = ("beta", "theta")
"""What a program may keep besides the summaries: ``beta`` ``[C, T, d]`` at every
record; ``theta`` ``[C, T, L_max, d]`` at every record (with ``theta_final``)."""

TILE_BYTES = 16 * 2**10
"""Discrete sweeps run in tiles whose state ``[L_max, d, T]`` takes about this many bytes,
so that it stays in the core's cache for all the steps of the run."""
BALANCED_TILE_BYTES, BALANCED_TILE_POINTS = 4 * 2**10, 128
"""The same for the balanced step, whose state is ``[d, T]``: at least this many bytes and
this many points. Smaller than the general step's: XLA's CPU compiler splits a loop
fusion over two threads once its estimated cost (about ten times the bytes it touches,
for arithmetic-heavy fusions such as the leader check) passes about two hundred
thousand, and inside the step loop each such hand-over costs more than the kernel
(measured on a loaded 2-core machine: a record's split finiteness check took 0.5 ms,
a whole step of a 512-point tile about 6 us). Measured best: 256 points at d = 4 in
float32, 128 at d = 4 in float64 and at d = 16."""
FLOW_TILE_POINTS = 256
"""Flow sweeps solve this many trajectories in lockstep (one vmapped solve): fewer waste
steps on the slowest trajectory of the tile, more pay the solver's per-step overhead."""
UNROLL = 4
"""Steps per iteration of the inner step loop of discrete runs where XLA launches the
loop body's kernels at every iteration (fewer launches per step; :func:`unroll`)."""


def unroll() -> int:
    """Steps per iteration of a discrete run's inner step loop: :data:`UNROLL`, or 1 where
    XLA compiles the loop whole (:func:`samflow.xla_options.loops_compiled_whole`), where
    an unrolled body only makes the function longer: bench case 1's sweep took 0.27-0.34 s
    with 1 against 0.35-0.48 s with 4 (wall, 2 devices, interleaved, 2026-12-07). The
    same steps in the same order either way."""
    return 1 if xla_options.loops_compiled_whole() else UNROLL


RECORDED = frozenset(name for name, v in POINT.items() if v.dims[:2] == (GRID, "time"))
"""The outputs with a record axis (after the point axis; :data:`samflow.schema.POINT`),
cut back to the records asked for by :func:`run_points`."""


VECTOR = 8
"""Points per vector: every tile holds a multiple of this many points
(:func:`tile_points`), so a sharded batch is padded to whole vectors at no cost
(:func:`start_points`)."""
POINT_SIZES, RECORD_SIZES = 4, 8
"""Padded sizes per doubling (:func:`bucket`) of the number of points and of records:
each padded record costs about ten steps in every point (bench case 1), so records get
finer steps (at most 1/8 of padding) than points (at most 1/4)."""


def bucket(n: int, multiple: int = 1, per_doubling: int = POINT_SIZES) -> int:
    """The padded size of ``n`` (points or records): ``n`` up to ``per_doubling`` (a
    power of two), else the least ``m * 2**k >= n`` with ``m`` in ``per_doubling + 1 ..
    2 * per_doubling``, rounded up to a multiple of ``multiple``.

    At most ``1 / per_doubling`` more than ``n``, and ``per_doubling`` sizes per
    doubling, so that most changes of a grid's size or of the number of records reuse a
    compiled program.
    """
    if n <= per_doubling:
        size = n
    else:  # per_doubling * step < n <= 2 * per_doubling * step
        step = 2 ** ((n - 1).bit_length() - per_doubling.bit_length())
        size = -(-n // step) * step
    return -(-size // multiple) * multiple


class Points(NamedTuple):
    """Inputs of ``C`` points (NumPy or JAX arrays).

    Fields:
        theta0: ``[C, L_max, d]`` initial parameters (rows beyond a point's depth: ones).
        X: ``[C, n, d]`` data of each point, or ``[1, n, d]`` shared by all.
        y: ``[n]`` labels, shared.
        depth: ``[C]`` int real layers, or ``[1]`` shared.
        rho: ``[C]`` radii.
        eta: ``[C]`` step sizes (unused by flows).
        beta_star: ``[d]`` the ground truth of ``test_error``, shared; None: none.
        key: ``[C, k]`` uint32 raw PRNG key data of each point's stochastic steps
            (:func:`samflow.stochastic.seed_key_data`), or None for deterministic steps.
    """

    theta0: Array
    X: Array
    y: Array
    depth: Array
    rho: Array
    eta: Array
    beta_star: Array | None = None
    key: Array | None = None

    @property
    def size(self) -> int:
        return int(self.theta0.shape[0])

    def shared(self, name: str) -> bool:
        """Whether input ``name`` is one entry shared by every point."""
        if name in ("y", "beta_star"):
            return True
        return name in ("X", "depth") and np.shape(getattr(self, name))[0] == 1

    def take(self, index: np.ndarray) -> Points:
        """The points at ``index`` (shared inputs stay shared)."""
        per_point = {
            k: (v if self.shared(k) or v is None else np.asarray(v)[index])
            for k, v in self._asdict().items()
        }
        return Points(**per_point)


POINT_AXES = Points(theta0=0, X=0, y=None, depth=0, rho=0, eta=0, beta_star=None, key=0)
"""The axis of each input that runs over the points (None: shared by all), as
``in_axes`` of a ``vmap`` over a :class:`Points` whose ``X`` and ``depth`` have one
entry per point."""


@dataclass(frozen=True)
class Setup:
    """What a program computes (hashable: the key of its compilation).

    Attributes:
        rule: the perturbation rule.
        mode: ``discrete`` or ``flow``.
        dtype: ``float64`` or ``float32``.
        flow: the flow's static configuration (flows only).
        classification: the settings of :func:`samflow.regimes.finish`
            (:class:`samflow.Classification`).
        keep: names from :data:`KEEP` to return besides the summaries.
        padding: whether rows of ``theta0`` beyond a point's depth may be padding.
            Without it a program takes every row as a real layer and ignores ``depth``
            (a static depth): a discrete one saves the layer mask in every step, a flow's
            closed form drops what is constant at that depth.
        sharded: tile and spread the points over every device; without it the batch
            runs as one piece on the default device (single trajectories).
        major: the major coordinate (1-based) of ``n``-point data shared by every point
            (:func:`samflow.model.major_coordinate`); 0 for one point, where each
            point's major is its own ``argmax_j mu_j``.
        model: the parametrisation and loss (:class:`samflow.model.Model`). Where it
            does not classify (:attr:`samflow.model.Model.classifies`) the program
            gives no ``regime`` and no ``limit_coord``.
        summaries: the regression summaries to take at every record
            (:class:`samflow.summaries.Summaries`), or None.
        step_path: the discrete step: ``auto`` (:func:`run_points` takes ``balanced``
            where :func:`step_path` allows it, else ``general``), ``balanced`` (one
            vector per point, :mod:`samflow.balanced`; the points must allow it) or
            ``general`` (every layer). A program made from an ``auto`` setup by
            :func:`program` runs the general step.
        sampling: the stochastic steps (:class:`samflow.stochastic.Sampling`), or None
            for today's deterministic full-batch step; with it every point carries its
            PRNG key (:attr:`Points.key`), and the step is the general one.
        step_cap: discrete only: a run whose fate is not decided at its last record
            goes on, unrecorded, until it is (:func:`_discrete_fate`) or until this
            step (:attr:`samflow.Discrete.step_cap`); None: it ends at its last record.
            The cap is the program's argument, not part of its key: :func:`start_points`
            runs every cap with the program of :data:`ANY_CAP`.
    """

    rule: PerturbationRule
    mode: str
    dtype: str = "float64"
    flow: FlowConfig | None = None
    classification: Classification = Classification()
    keep: tuple[str, ...] = ()
    padding: bool = True
    sharded: bool = True
    major: int = 0
    model: Model = DEFAULT
    summaries: Summaries | None = None
    step_path: str = "auto"
    sampling: Sampling | None = None
    step_cap: int | None = None

    def __post_init__(self) -> None:
        if self.step_path not in ("auto", *balanced.STEP_PATHS):
            raise ValueError(f"step_path must be auto, balanced or general, not {self.step_path!r}")


ANY_CAP = -1
"""``Setup.step_cap`` of the program that :func:`start_points` runs for any cap: the runs
are taken to their fate, and the cap is the program's argument ``cap``, so that one
compiled program serves every ``step_cap`` (the figures' and the boundary's are a
multiple of the steps, which differ from one call to the next)."""


FIRST_PASS = 100
"""A batch of discrete runs taken to their fate runs together up to this many times its
last record's step (or its cap, if less); the runs still undecided there run again, from
their start, up to the cap, in groups of one vector per device (:func:`start_points`,
:func:`_run_on`). The steps of
a batch go on until its last run stops, so without this a cap far past what most runs
need would cost every run of the batch the steps of its slowest."""


def step_path(setup: Setup, points: Points) -> str:
    """The step ``points`` (NumPy) run with under ``setup``: ``balanced`` where the setup
    allows it and every point starts with equal real layers
    (:func:`samflow.balanced.applies`), unless ``setup.step_path`` is
    ``general``; else ``general``. ValueError for ``balanced`` where it does not apply."""
    ok = balanced.applies(
        setup.mode, setup.rule, points.theta0, points.depth, setup.model, setup.sampling
    )
    if setup.step_path == "balanced" and not ok:
        raise ValueError(
            f"the balanced step does not apply to these points (rule {setup.rule.name}, "
            f"mode {setup.mode}, {setup.model}): it needs a discrete run of the product "
            "network with the logistic loss, full-batch deterministic steps, equal real "
            "layers at every point and a rule that treats layers alike"
        )
    if setup.step_path == "general":
        return balanced.GENERAL
    return balanced.BALANCED if ok else balanced.GENERAL


def record_summaries(
    what: Summaries, model: Model, problem: Problem, beta_star: Array | None
) -> Callable[[Array, Array | None], dict[str, Array]]:
    """``(theta [L_max, d, *batch], mask) -> {name: [*batch]}``: the summaries ``what``
    (:class:`samflow.summaries.Summaries`) of the parameters at one record.

    ``beta_star`` ``[d, *batch]`` (or broadcasting) when ``what.test_error``.
    """

    def take(theta: Array, mask: Array | None) -> dict[str, Array]:
        b = model.beta(theta)
        out = {
            "l1_norm": sum_rows(jnp.abs(b)),
            "l2_norm": jnp.sqrt(sum_rows(b * b)),
            "n_active": sum_rows((jnp.abs(b) > what.active_threshold).astype(jnp.int32)),
        }
        if what.test_error:
            e = b - beta_star
            out["test_error"] = sum_rows(e * e)
        if what.sharpness:
            out["sharpness"], out["hessian_trace"] = model.sharpness(theta, problem, mask)
        return out

    return take


def tile_points(
    mode: str,
    n_points: int,
    n_layers: int,
    d: int,
    dtype,
    n_devices: int,
    accelerator: bool = False,
    balanced_step: bool = False,
) -> int:
    """Grid points per tile for a chunk of ``n_points`` on ``n_devices``.

    Discrete: the tile's state fits :data:`TILE_BYTES` (``[n_layers, d]`` per point),
    or :data:`BALANCED_TILE_BYTES` (at least :data:`BALANCED_TILE_POINTS` points) for
    the ``balanced_step`` (``[d]`` per point);
    flows: :data:`FLOW_TILE_POINTS`.
    A small chunk, or any chunk on an ``accelerator`` (a GPU, where each operation in a
    tile is a kernel launch and no small cache is to be fitted), gets one tile per
    device. Always a multiple of :data:`VECTOR`, the vector width, so that no tile ends in
    a scalar remainder.
    """
    if accelerator:
        fit = n_points
    elif mode == "discrete" and balanced_step:
        per_point = d * np.dtype(dtype).itemsize
        fit = max(BALANCED_TILE_POINTS, BALANCED_TILE_BYTES // per_point // VECTOR * VECTOR)
    elif mode == "discrete":
        per_point = n_layers * d * np.dtype(dtype).itemsize
        fit = max(VECTOR, TILE_BYTES // per_point // VECTOR * VECTOR)
    else:
        fit = FLOW_TILE_POINTS
    share = -(-n_points // n_devices)
    return min(fit, -(-share // VECTOR) * VECTOR)


def _counting(n_records) -> Observer:
    """The regime classifier's observer, taking records from number ``n_records`` on as
    invalid (padding: they leave the classification as it was)."""

    def start(beta0, loss0):
        tracker, scalars = OBSERVER.start(beta0, loss0)
        return (tracker, jnp.ones((), jnp.int32)), scalars

    def take(state, beta, loss):
        tracker, count = state
        tracker, scalars = track(tracker, beta, loss, valid=count < n_records)
        return (tracker, count + 1), scalars

    return Observer(start=start, track=take)


def _major(setup: Setup, mu: Array) -> Array:
    """The major coordinate(s): ``argmax_j mu_j + 1`` of ``mu`` ``[d, *batch]`` for one
    point (ties are refused where mu is validated), or the setup's for shared data."""
    if setup.major:
        return jnp.asarray(setup.major, jnp.int32)
    return argmax_rows(mu) + 1


def _underflow(setup: Setup, theta0: Array) -> Array:
    """Whether ``beta(0)`` underflowed: a coordinate whose layers are all nonzero has
    ``beta_j = 0`` in the dtype (depth 8, alpha 1e-8 in float32; for u2-v2 and uv, see
    :meth:`samflow.model.Model.underflow`). ``[L_max, d, *batch]`` -> ``[*batch]``; such
    a run is reported failed, never classified."""
    return setup.model.underflow(theta0)


def _not_classified(setup: Setup, out: dict) -> None:
    """Remove the regime labels where the model does not classify
    (docs/theory/models.md#parametrisations-and-losses)."""
    if not setup.model.classifies:
        del out["regime"], out["unresolved_reason"], out["limit_coord"]


def _certifiable(setup: Setup, n: int) -> bool:
    """Whether a discrete run of ``setup`` on ``n`` data points may be certified at all
    (:func:`_discrete_fate`): the rule has a certificate and the setting keeps layers
    equal, on one point."""
    closed = setup.rule.balanced
    alike = balanced.setting_applies("discrete", setup.rule, setup.model, setup.sampling)
    return closed is not None and closed.fate is not None and n == 1 and alike


def _discrete_fate(
    setup: Setup,
    watched,
    beta_last: Array,
    theta0: Array,
    X: Array,
    y: Array,
    depth,
    rho,
    eta,
    at_end: bool = False,
) -> tuple[Array, Array, Array]:
    """What decided a discrete run's future (:mod:`samflow.fate`), ``[*batch]``, at the
    state of ``beta_last`` ``[d, *batch]``, ``watched`` the path observer's state there;
    the certificate's winner ``[*batch]`` (1-based), the limit's leader of a
    ``TAKEOVER`` (the major or a minor coordinate, :func:`samflow.regimes.finish`); and
    who leads first from there (the major, or a minor that leads before the major can)
    where a run that has seen no leader is taken over by the map that follows its flow
    (else 0: :func:`samflow.regimes.finish` parts a tie by mu).

    The fall of ``max_j |beta_j|`` by ``singular_log_range`` below its start (the path
    observer's frozen floor) decides nothing by itself
    (docs/theory/regimes.md#collapse-certificates): a run is a collapse only where the
    certificate below says so, and a run whose path froze there is settled by no
    certificate of the lead (its later leaders were not followed). A certificate: for a
    run whose layers stay equal
    (every real layer of ``theta0`` ``[L_max, d, *batch]`` equal, the paper's model,
    full batch, a rule that treats layers alike: :mod:`samflow.balanced`, whichever
    step ran) on one point ``mu > 0`` with ``y = +1``, the rule's
    :meth:`samflow.rules.BalancedFlow.fate` for the discrete map with step ``eta`` at
    the last record (``|u_j| = |beta_j|^(1/L)``, signed as beta for a rule solved in ``u``;
    at L = 1 the winner must also be positive); ``at_end`` (static): the run's last state,
    with :attr:`samflow.rules.BalancedFlow.end_fate`.
    """
    path, floor = watched
    frozen = jnp.isinf(floor)
    closed = setup.rule.balanced
    first = jnp.zeros(frozen.shape, jnp.int32)  # who leads first: not proven
    if not _certifiable(setup, X.shape[0]):
        return jnp.full(frozen.shape, fates.OPEN, jnp.int32), _major(setup, X[0]), first
    # Per point (balanced.equal_layers asks it of the whole batch, on the host).
    depths = jnp.broadcast_to(jnp.asarray(depth), theta0.shape[2:])
    real = layer_mask(depths, theta0.shape[0], theta0.dtype) > 0  # [L_max, 1, *batch]
    equal = jnp.all((theta0 == theta0[:1]) | ~real, axis=(0, 1))
    mu = jnp.broadcast_to(X[0], beta_last.shape)
    depth = jnp.broadcast_to(jnp.asarray(depth), beta_last.shape[1:])
    rho = jnp.broadcast_to(jnp.asarray(rho, beta_last.dtype), beta_last.shape[1:])
    eta = jnp.broadcast_to(jnp.asarray(eta, beta_last.dtype), beta_last.shape[1:])
    s = jnp.log(jnp.abs(beta_last)) / depth.astype(beta_last.dtype)
    # The certificate's state: s = log |u|, or for a rule solved in u (linf-SAM) the signed
    # u = sign(beta) |beta|^(1/L) (at even L the rule's step is odd in u: |u| is the state).
    state = s if closed.formulation == "log" else jnp.sign(beta_last) * jnp.exp(s)
    if at_end and not setup.padding:
        # One depth (the row count): the end's certificate specialises to it, as a flow's
        # does (at L = 2 it leaves out what only odd depths try).
        static, end_fate = theta0.shape[0], closed.end_fate
        code, winner = jax.vmap(
            lambda st, m, r, e: end_fate(st, m, static, r, e), in_axes=(-1, -1, 0, 0)
        )(state, mu, rho, eta)
    else:
        certificate = closed.end_fate if at_end else closed.fate
        code, winner = jax.vmap(certificate, in_axes=(-1, -1, 0, 0, 0))(state, mu, depth, rho, eta)
    at_winner = jnp.take_along_axis(beta_last, (winner - 1)[None], axis=0)[0]
    one_point = jnp.all(mu > 0, axis=0) & (y[0] > 0)
    certified = equal & one_point
    settled = (
        certified
        & ~frozen
        & ((code == fates.LEADS) | (code == fates.TAKES_OVER))
        & (path.lead == winner)
        & ((depth > 1) | (at_winner > 0))
    )
    # The winner takes the lead later (docs/theory/regimes.md#takeover-certificate): the
    # path seen so far, with the winner appended, names the regime (the winner of
    # TAKES_OVER is the major, or a minor one that keeps the major behind it).
    # (Also where no leader was ever seen: a start tied at the top whose steps underflow.)
    takeover = certified & ~frozen & (code == fates.TAKES_OVER) & ~settled
    # A lead certificate at a start tied at the top that never moved (no leader seen), the
    # major among the tied: the exact map's first step puts the major strictly ahead (its
    # rate is the largest, docs/theory/regimes.md#takeover-certificate), and then it leads
    # for ever: labelled as a take-over from no leader (direct).
    top = jnp.max(jnp.abs(beta_last), axis=0)
    tied_lead = (
        certified
        & ~frozen
        & (code == fates.LEADS)
        & (path.count == 0)
        & (depth >= 2)
        & (winner == jnp.argmax(mu, axis=0) + 1)
        & (jnp.abs(at_winner) >= top)
    )
    takeover = takeover | tied_lead
    # The major leads for ever from some finite time on (docs/theory/regimes.md#usam-returns,
    # #escape-past-the-fixed-point): the run is returned where the path so far already
    # makes it so, whatever happens in between: the major led before and a minor leads
    # now, or it leads again now; under RETURNS (leading now, it hands the lead on first)
    # also where it leads now for the first time.
    eventually = (code == fates.RETURNS) | (code == fates.WINS_LATER)
    again = (path.lead != winner) | (path.major_leads > 1) | (code == fates.RETURNS)
    returned = certified & ~frozen & eventually & (path.major_leads > 0) & again
    collapsed = certified & (code == fates.COLLAPSE)
    finite = certified & (code == fates.FINITE)  # linf-SAM's step at odd L, USAM
    fate = jnp.select(
        [collapsed, finite, settled, takeover, returned],
        [fates.COLLAPSE, fates.FINITE, fates.SETTLED, fates.TAKEOVER, fates.RETURN],
        fates.OPEN,
    )
    if at_end and closed.follows is not None and (setup.padding or theta0.shape[0] >= 3):
        # Steps that vanished (docs/theory/regimes.md#vanishing-steps): a verified run of
        # the flow, tried only where nothing above decided the run (OPEN, or the major's
        # later win that its path does not yet make a return): TAKES_OVER with its winner.
        undecided = certified & ~frozen & (fate == fates.OPEN)
        undecided = undecided & ((code == fates.OPEN) | (code == fates.WINS_LATER))
        follows = closed.follows
        if not setup.padding:  # one depth, static: the certificate's powers specialise
            static = theta0.shape[0]
            follows = lambda st, m, L, r, e, a: closed.follows(st, m, static, r, e, a)  # noqa: E731
        holds, taker, leads_first = _in_groups(follows, undecided, state, mu, depth, rho, eta)
        major = jnp.argmax(mu, axis=0) + 1
        take = undecided & holds & ((code == fates.OPEN) | (taker == major))
        # a run that has seen no leader is named by who leads first: proven, or not taken
        take = take & ((path.count > 0) | (leads_first > 0))
        fate = jnp.where(take, jnp.where(path.lead == taker, fates.SETTLED, fates.TAKEOVER), fate)
        winner = jnp.where(take, taker, winner)
        first = jnp.where(take & (path.count == 0), leads_first, first)
    return fate.astype(jnp.int32), winner.astype(jnp.int32), first


def _in_groups(certificate: Callable, attempt: Array, *args: Array) -> tuple[Array, ...]:
    """``certificate(*point_args, attempt) -> (holds, *values)`` (one point's, a loop; the
    values int) for the points of the batch's last axis where ``attempt`` holds, gathered
    :data:`VECTOR` at a time: ``(holds, *values)`` ``[T]``, False and 0 where not attempted.

    A loop under ``vmap`` runs until its slowest lane stops, so in a tile of 128 points
    every point would pay the iterations of the one attempted; gathered, a group of
    attempted points pays its own. The last group's start is clamped to the batch, so it
    may run again points of the group before it (the same points: the same results)."""
    T = attempt.shape[-1]
    size = min(VECTOR, T)
    order = jnp.argsort(~attempt, stable=True)  # the attempted points first
    count = jnp.sum(attempt)
    run = jax.vmap(certificate, in_axes=(-1,) * len(args) + (0,))

    def group(carry):
        g, holds, values = carry
        idx = lax.dynamic_slice(order, (jnp.minimum(g * size, T - size),), (size,))
        tried = attempt[idx]
        h, *got = run(*(jnp.take(a, idx, axis=-1) for a in args), tried)
        got = [jnp.where(tried, v, 0).astype(jnp.int32) for v in got]
        values = tuple(v.at[idx].set(w) for v, w in zip(values, got, strict=True))
        return g + 1, holds.at[idx].set(h & tried), values

    probe = (jnp.take(a, jnp.zeros(1, jnp.int32), axis=-1) for a in args)
    n_values = len(jax.eval_shape(run, *probe, jnp.zeros(1, bool))) - 1
    values = tuple(jnp.zeros(T, jnp.int32) for _ in range(n_values))
    init = (jnp.zeros((), jnp.int32), jnp.zeros(T, bool), values)
    _, holds, values = lax.while_loop(lambda c: c[0] * size < count, group, init)
    return (holds, *values)


def _discrete_tile(setup: Setup) -> Callable:
    keep_beta, keep_theta = "beta" in setup.keep, "theta" in setup.keep

    def tile(points: Points, times, n_records, cap):
        # Batch-last: theta0 [L_max, d, T], X [n, d, T], depth, rho, eta [T], key [k, T].
        theta0, X, y, depth, rho, eta, beta_star, key = points
        major = _major(setup, X[0])
        problem = Problem(X, y[:, None])
        take = None
        if setup.summaries is not None:
            take = record_summaries(setup.summaries, setup.model, problem, beta_star[:, None])
        point_keys = None
        if setup.sampling is not None:
            point_keys = jax.random.wrap_key_data(jnp.moveaxis(key, -1, 0))

        def fate(watched, beta, at_end=False):
            return _discrete_fate(setup, watched, beta, theta0, X, y, depth, rho, eta, at_end)

        extension = None  # where nothing can be certified, a longer run decides nothing
        if setup.step_cap is not None and _certifiable(setup, X.shape[0]):
            extension = Extension(
                cap=cap,
                decided=lambda beta, watched: fate(watched, beta)[0] != fates.OPEN,
            )
        traj = simulate(
            theta0,
            problem,
            # Without padding rows the runner needs no layer mask: a static depth.
            depth if setup.padding else theta0.shape[0],
            rho,
            eta,
            times,
            rule=setup.rule,
            unroll=unroll(),
            observer=_counting(n_records),
            record_beta=keep_beta,
            save_theta=keep_theta,
            step_observer=path_observer(major),
            model=setup.model,
            summaries=take,
            balanced_step=setup.step_path == balanced.BALANCED,
            sampling=setup.sampling,
            point_keys=point_keys,
            extension=extension,
        )
        # Taken to its fate, the run is labelled where it stopped, past its records.
        beta_end = traj.tracker[0].beta_last if extension is None else traj.beta_end
        end_fate, winner, first = fate(traj.watched, beta_end, at_end=True)
        out = finish(
            traj.tracker[0],
            traj.tracked,
            traj.tau,
            valid=(jnp.arange(times.shape[0]) < n_records)[:, None],
            failed=traj.failed_step >= 0,
            settings=setup.classification,
            path=traj.watched[0],
            major=major,
            fate=end_fate,
            winner=winner,
            first=first,
        )
        del out["horizon"]
        underflow = _underflow(setup, theta0)
        out["regime"] = jnp.where(underflow, FAILED, out["regime"]).astype(jnp.int8)
        out["underflow_at_start"] = underflow.astype(jnp.int8)
        _not_classified(setup, out)
        out.update(traj.tracked)
        if traj.summaries is not None:
            out.update(traj.summaries)
        out["failed_step"] = traj.failed_step
        # The run goes on after a failure, in NaN: records from the failed one on are not states.
        ok = (traj.failed_step < 0) | (times[:, None] < traj.failed_step)
        out["reached"] = jnp.broadcast_to(ok, traj.tau.shape).astype(jnp.int8)
        out["rescaled_tau"] = traj.tau
        if keep_beta:
            out["beta"] = traj.beta
        if keep_theta:
            out["theta"], out["theta_final"] = traj.theta, traj.theta_final
        return {k: jnp.moveaxis(v, -1, 0) for k, v in out.items()}

    return tile


def _flow_tile(setup: Setup) -> Callable:
    from samflow.flows import integrate

    keep_beta, keep_theta = "beta" in setup.keep, "theta" in setup.keep

    def one(point: Points, times, n_records, cap):
        theta0, X, y, depth, rho, _, beta_star, _ = point
        major = _major(setup, X[0])
        problem = Problem(X, y)
        sol = integrate(
            theta0,
            problem,
            # Without padding rows every row is a real layer: a static depth, for which
            # the closed forms drop what is constant (samflow.rules, the log form).
            depth if setup.padding else theta0.shape[0],
            rho,
            times,
            rule=setup.rule,
            config=setup.flow,
            major=major,
            model=setup.model,
            extend=cap,
        )
        at_blowup = sol.blowup & (depth >= 3)
        # The path runs to the stop: at an upper event (a blow-up, or the overflow guard
        # at L <= 2) its last leader is the one at the event, later than the last record.
        out = summarize(
            sol.beta,
            sol.tau,
            sol.loss,
            sol.valid & (jnp.arange(times.shape[0]) < n_records),
            sol.failed,
            setup.classification,
            major=major,
            path=sol.path,
            fate=sol.fate,
            winner=sol.winner,
        )
        horizon = out.pop("horizon")
        del out["handoff_step"]  # flows have no steps
        underflow = _underflow(setup, theta0)
        out["regime"] = jnp.where(underflow, FAILED, out["regime"]).astype(jnp.int8)
        out["underflow_at_start"] = underflow.astype(jnp.int8)
        _not_classified(setup, out)
        if setup.summaries is not None:
            mask = layer_mask(depth, theta0.shape[0], theta0.dtype)
            take = record_summaries(setup.summaries, setup.model, problem, beta_star)
            out.update(jax.vmap(lambda th: take(th, mask))(sol.theta))
        out["blowup_tau"] = jnp.where(at_blowup, sol.stop_tau, jnp.nan)
        out["stop_tau"] = sol.stop_tau
        out["collapsed_to_zero"] = sol.collapsed.astype(jnp.int8)
        out["overflow_guard_hit"] = (sol.blowup & (depth < 3)).astype(jnp.int8)
        out["solver_failed"] = sol.failed.astype(jnp.int8)
        out["reached"] = sol.valid.astype(jnp.int8)
        if keep_beta:
            out["beta"] = sol.beta
        if keep_theta:
            out["theta"], out["theta_final"] = sol.theta, sol.theta[horizon]
        return out

    def tile(points: Points, times, n_records, cap):
        return jax.vmap(one, in_axes=(POINT_AXES, None, None, None))(points, times, n_records, cap)

    return tile


def _start_rate(setup: Setup, point: Points) -> Array:
    """One point's :func:`samflow.flows.start_rate` under ``setup``."""
    from samflow.flows import start_rate

    return start_rate(
        point.theta0,
        Problem(point.X, point.y),
        point.depth,
        point.rho,
        rule=setup.rule,
        config=setup.flow,
        model=setup.model,
    )


def cost_order(rate: Array, slots: int, n_devices: int) -> Array:
    """The permutation ``[slots]`` that lays a chunk's flow points out in tiles: slot
    ``p`` gets padded point ``perm[p]`` (points beyond ``C = len(rate)`` are copies of
    the last one).

    A tile solves its trajectories in lockstep until the slowest is done, so each tile
    should hold trajectories of like length: the points are sorted by their start
    ``rate`` (:func:`samflow.flows.start_rate`, a stand-in for the regime and so for
    the number of solver steps). The sorted points are then dealt to the devices in
    turn (device k gets sorted points k, k + n, k + 2n, ...), so that each device's
    contiguous share of the slots gets as much work as the others. NaN rates sort last.
    On the bench's 64 x 64 (alpha, rho) grid of l2-SAM flows the steps the tiles pay
    for fall from 1.57 to 1.26 times the steps the trajectories need.
    """
    C = rate.shape[0]
    padded = rate[jnp.minimum(jnp.arange(slots), C - 1)]
    order = jnp.argsort(padded, stable=True)
    return order.reshape(slots // n_devices, n_devices).T.reshape(slots)


@functools.lru_cache(maxsize=64)
def program(setup: Setup) -> Callable:
    """The jitted ``(points, times, n_records=None, cap=None) -> summaries`` program of
    ``setup`` (cached; compiled once per shape of its inputs).

    ``points`` a :class:`Points` of JAX arrays (any ``C``), ``times`` ``[T]`` the record
    times (discrete: step indices; flow: tau), starting at 0; ``n_records`` (an int
    scalar, None: ``T``) how many of them are real: the rest repeat the last time and
    are masked out of the summaries; ``cap`` (a scalar of ``times``' dtype; None:
    ``setup.step_cap``) the step a discrete run taken to its fate ends at in any case
    (read only where ``setup.step_cap`` is not None), and for a flow whose
    ``setup.flow.extend`` is :data:`samflow.flow_config.ANY_EXTEND`, the ratio
    ``tau_cap / tau_max`` (:func:`start_points` runs every ``tau_cap`` so). Returns a
    dict of ``[C, ...]`` arrays (the names of :data:`samflow.schema.POINT`).
    """
    return jax.jit(traced_program(setup))


def traced_program(setup: Setup) -> Callable:
    """:func:`program` before ``jit``: to be called inside a larger compiled program
    (a bisection loop around it, say)."""
    compile_cache.ensure()  # the library's first run: keep what it compiles
    batch_last = setup.mode == "discrete"
    tile_fn = _discrete_tile(setup) if batch_last else _flow_tile(setup)
    mesh = devices.mesh() if setup.sharded else None
    n_dev = mesh.size if mesh is not None else 1
    first = mesh.devices.flat[0] if mesh is not None else jax.devices()[0]
    accelerator = first.platform != "cpu"

    def run_tiles(tiles: Points, times, n_records, cap):
        # One tile at a time; what every point shares (y, beta_star) is not cut in tiles.
        shared = {"y": tiles.y, "beta_star": tiles.beta_star}
        return lax.map(
            lambda tile: tile_fn(tile._replace(**shared), times, n_records, cap),
            tiles._replace(y=None, beta_star=None),
        )

    if mesh is not None:
        in_tiles = Points(
            *(PartitionSpec() if a is None else PartitionSpec("grid") for a in POINT_AXES)
        )
        run_tiles = jax.shard_map(
            run_tiles,
            mesh=mesh,
            in_specs=(in_tiles, PartitionSpec(), PartitionSpec(), PartitionSpec()),
            out_specs=PartitionSpec("grid"),
            check_vma=False,  # diffrax's solver state mixes per-device and shared values
        )

    def run(points: Points, times, n_records=None, cap=None):
        if cap is None:
            if setup.step_cap is not None and setup.step_cap < 0:
                raise ValueError("a program of ANY_CAP needs its cap as an argument")
            if setup.flow is not None and setup.flow.extend == ANY_EXTEND:
                raise ValueError("a program of ANY_EXTEND needs its extend as the cap")
            cap = 0 if setup.step_cap is None else setup.step_cap
        cap = jnp.asarray(cap, times.dtype)
        theta0 = points.theta0
        C, n_layers, d = theta0.shape
        beta_star = points.beta_star
        if beta_star is None:
            beta_star = jnp.zeros((d,), theta0.dtype)
        # Deterministic steps draw nothing: no key travels (an empty pytree).
        key = points.key if setup.sampling is not None else None
        points = points._replace(beta_star=beta_star, key=key)
        T = tile_points(
            setup.mode,
            C,
            n_layers,
            d,
            theta0.dtype,
            n_dev,
            accelerator,
            setup.step_path == balanced.BALANCED,
        )
        n_records = jnp.asarray(times.shape[0] if n_records is None else n_records, jnp.int32)
        n_tiles = -(-C // (n_dev * T)) * n_dev

        # Flow tiles take their points in the order of cost_order (slot p holds point
        # index[p]); discrete ones in the chunk's order, padded with the last point.
        slots = n_tiles * T
        ordered = not batch_last and n_tiles > 1
        if ordered:
            per_point = points._replace(
                X=jnp.broadcast_to(points.X, (C, *points.X.shape[1:])),
                depth=jnp.broadcast_to(points.depth, (C,)),
            )
            rate = jax.vmap(functools.partial(_start_rate, setup), in_axes=(POINT_AXES,))(per_point)
            perm = cost_order(rate, slots, n_dev)
            index = jnp.minimum(perm, C - 1)
        else:
            index = jnp.minimum(jnp.arange(slots), C - 1)

        def to_tiles(a, shareable=False):  # [C, *s] -> [n_tiles, *s, T] or [n_tiles, T, *s]
            if shareable and a.shape[0] == 1 and batch_last:  # one entry that broadcasts
                return jnp.broadcast_to(jnp.moveaxis(a, 0, -1), (n_tiles, *a.shape[1:], 1))
            a = jnp.broadcast_to(a, (C, *a.shape[1:]))[index]
            a = a.reshape(n_tiles, T, *a.shape[1:])
            return jnp.moveaxis(a, 1, -1) if batch_last else a

        tiles = points._replace(
            theta0=to_tiles(theta0),
            X=to_tiles(points.X, True),
            depth=to_tiles(points.depth, True),
            rho=to_tiles(points.rho),
            eta=to_tiles(points.eta),
            key=key if key is None else to_tiles(key),
        )
        out = run_tiles(tiles, times, n_records, cap)
        # Slot p of the tiles holds point index[p]: point i < C sits at slot where[i].
        where = (
            jnp.zeros(slots, perm.dtype).at[perm].set(jnp.arange(slots, dtype=perm.dtype))
            if ordered
            else None
        )
        out = {k: v.reshape(slots, *v.shape[2:]) for k, v in out.items()}
        return {k: v[where[:C]] if ordered else v[:C] for k, v in out.items()}

    return run


def place(setup: Setup, points: Points, times: np.ndarray) -> tuple[Points, Array]:
    """``points`` and ``times`` as JAX arrays of the setup's dtype, on the devices.

    Call inside ``samflow.precision.precision(setup.dtype)``. A sharded setup splits the
    points over every device (``C`` must be a multiple of the device count: the caller
    pads) and replicates what every point shares (``y``; ``X``, ``depth`` of leading
    size 1).
    """
    dt = np.dtype(setup.dtype)
    index_dtype = np.int64 if dt == np.float64 else np.int32

    def put(name, value):
        if value is None:
            return None
        kinds = {"depth": np.int32, "key": np.uint32}
        # converted on the host and put as it is: a conversion on the device, or
        # jnp.asarray's staging, compiles a program of its own for every shape in every
        # process (tens of milliseconds of a first call)
        host = np.asarray(value, kinds.get(name, dt))
        if not setup.sharded:
            return jax.device_put(host)
        mesh = devices.mesh()
        spec = PartitionSpec() if points.shared(name) else PartitionSpec("grid")
        return jax.device_put(host, NamedSharding(mesh, spec))

    args = Points(**{k: put(k, v) for k, v in points._asdict().items()})
    return args, jax.device_put(np.asarray(times, index_dtype if setup.mode == "discrete" else dt))


def start_points(
    setup: Setup, points: Points, times: np.ndarray, first_pass: bool = True
) -> Callable[[], dict[str, np.ndarray]]:
    """:func:`run_points`, dispatched: the program starts on the devices and this returns
    at once a function that waits for it and returns the results.

    JAX runs a dispatched program in the background, so the caller's own work (the
    previous chunk's results, a file being written: :func:`one_ahead`) overlaps the
    devices' run. The program is :func:`program`'s, run as stored by
    :func:`samflow.exported.runnable` where the setup is samflow's own (the same
    compiled code, never traced again in a later process).

    Discrete runs taken to their fate (``setup.step_cap``) run in two passes where the
    cap is more than :data:`FIRST_PASS` times the last record's step: all of them up to
    that, then (in ``result``) the undecided ones again, from their start, up to the cap
    (``first_pass=False``). Each run's records and label are one run's, whichever pass
    gave them: a run is the same map from the same start in either batch. Flows taken
    past the horizon (``tau_cap``) run the program of
    :data:`samflow.flow_config.ANY_EXTEND`, with ``tau_cap / tau_max`` as its ``cap``:
    one compiled program for every ``tau_cap``.
    """
    C, T = points.size, len(times)
    whole, cap = setup, setup.step_cap
    again = False
    if cap is not None and setup.mode == "discrete" and first_pass:
        first = FIRST_PASS * int(times[-1])
        again = first < cap and _certifiable(setup, np.shape(points.X)[-2])
        cap = min(cap, first) if again else cap
    flow = setup.flow
    if flow is not None and flow.capped:  # any tau_cap: its ratio is the program's argument
        cap, flow = flow.extend, flow._replace(extend=ANY_EXTEND)
    setup = replace(
        setup,
        step_path=step_path(setup, points),
        step_cap=None if cap is None or setup.mode != "discrete" else ANY_CAP,
        flow=flow,
    )
    n_dev = len(devices.mesh().devices.flat) if setup.sharded else 1
    # A sharded batch also to whole vectors on every device: its tiles hold a multiple of
    # VECTOR points whatever C is (tile_points), so 1..8 points (or 9..16, on one device)
    # run the same slots, the same arithmetic per point, and now one program; a
    # trajectory (one point, unsharded) keeps its own size, its states one point's.
    multiple = VECTOR * n_dev if setup.sharded else 1
    padded = points.take(np.minimum(np.arange(bucket(C, multiple)), C - 1))
    record_times = times
    times = np.concatenate([times, np.repeat(times[-1:], bucket(T, 1, RECORD_SIZES) - T)])
    with precision(setup.dtype):
        placed = place(setup, padded, times)
        cap_arg = jax.device_put(np.asarray(0 if cap is None else cap, placed[1].dtype))
        args = (*placed, jax.device_put(np.int32(T)), cap_arg)
        fn = exported.runnable(setup, args, lambda: program(setup)) or program(setup)
        running = fn(*args)

    def result() -> dict[str, np.ndarray]:
        with precision(setup.dtype):
            out = {k: np.asarray(v) for k, v in devices.gather(running).items()}
        out = {k: v[:C, :T] if k in RECORDED else v[:C] for k, v in out.items()}
        if again and "regime" in out:
            _run_on(whole, points, record_times, out, n_dev)
        return out

    return result


def _run_on(
    setup: Setup, points: Points, times: np.ndarray, out: dict[str, np.ndarray], n_dev: int
) -> None:
    """The second pass of :func:`start_points`: the runs of ``out`` left unresolved (and
    not failed) by the first run again, from their start, up to ``setup.step_cap``; their
    results replace theirs in ``out`` (each array copied).

    They run in groups of one vector per device (:data:`VECTOR`; a group of a sharded
    batch holds ``VECTOR`` points per device, the last group padded with its last run),
    all dispatched before the first is read: a group is one tile, which steps until its
    own runs stop, as the tiles of one batch would, and every group has the same shape,
    so the second pass compiles one program per setup, whatever the number of its runs.
    A trajectory (one point, not sharded) runs again alone."""
    from samflow.regimes import UNRESOLVED

    open_ = np.flatnonzero((out["regime"] == UNRESOLVED) & (out["failed_step"] < 0))
    if open_.size == 0:
        return
    group = min(VECTOR * (n_dev if setup.sharded else 1), points.size)
    pending = []
    for first in range(0, open_.size, group):
        runs = open_[first : first + group]
        index = runs[np.minimum(np.arange(group), runs.size - 1)]
        pending.append((runs, start_points(setup, points.take(index), times, first_pass=False)))
    for k in list(out):
        out[k] = np.array(out[k])  # the device's buffer is read-only
    for runs, result in pending:
        more = result()
        for k in out:
            out[k][runs] = more[k][: runs.size]


def run_points(setup: Setup, points: Points, times: np.ndarray) -> dict[str, np.ndarray]:
    """Run ``points`` (NumPy, float64 inputs) under ``setup``; NumPy summaries ``[C, ...]``.

    The discrete step is the one :func:`step_path` picks for the points. The points and
    the records are padded to their :func:`bucket` (the points of a sharded setup to a
    multiple of :data:`VECTOR` per device; the last point and
    the last time repeated, padded records masked), so that the program compiled for
    one size serves every size of its bucket; the padding is cut off the results. A
    sharded setup needs ``C`` to be a multiple of the device count (the caller pads).
    """
    mappings.relieve()  # nothing of the engine's in flight: old programs may be dropped
    return start_points(setup, points, times)()


def one_ahead(
    items: Iterable[Item], start: Callable[[Item], Callable[[], Result]]
) -> Iterator[Result]:
    """The results of ``start(item)()`` for each of ``items``, in order, each item started
    before the result of the one before it is taken.

    ``start`` dispatches (:func:`start_points`) and returns the function that waits for
    the result; so while the caller handles one chunk's results (to NumPy, into a
    Dataset, onto disk), the devices already run the next chunk. At most two chunks
    are in flight.
    """
    mappings.relieve()  # before the first item starts, while nothing of ours is in flight
    waiting = None
    for item in items:
        started = start(item)
        if waiting is not None:
            yield waiting()
        waiting = started
    if waiting is not None:
        yield waiting()
