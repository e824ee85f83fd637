"""Continuous-time flows with diffrax (docs/theory/flows.md#rescaled-flows and
docs/theory/balanced.md#balanced-initialisation).

One data point and a margin loss: the *rescaled* flow in ``tau``,

    dtheta / dtau = m(theta~),    m[l, j] = y x_j G[l, j],    theta~ = theta + rho eps,

with ``G`` the parametrisation's Jacobian (for the paper's network ``m^(l)_j = mu_j
prod_{k != l} w^(k)_j``), where ``eps`` is the method's perturbation of ``g = l'(z) m``.
For scale-invariant rules (l2, linf) ``eps`` is computed from ``-m`` directly (``l'(z)``
underflows once the margin is large); USAM keeps the factor. More than one point, or a
loss that is not a margin loss: the plain SAM gradient flow ``dtheta/dt = -grad
Loss(theta + rho eps)`` with ``t = eta * steps``.

Three formulations, chosen by :func:`formulation_for` (or forced with
:class:`samflow.runners.Flow`'s ``formulation``) from what the model and the rule
declare (:func:`formulated` builds each, for every model: docs/theory/models.md#models-of-your-own):

``log``
    Balanced positive initialisation (every real layer equal to the same vector
    alpha > 0), one point, a rule whose closed form is a log form (gd, sam-l2, usam):
    all layers stay equal to ``u``, and the state is ``s = log u``. The field stands
    beside its rule (:class:`samflow.rules.BalancedFlow`, derivation in
    docs/theory/flows.md#rescaled-flows); every power is taken in log space, so exponential growth
    does not overflow. On a parametrisation that declares a log-space gradient descent
    (:class:`samflow.parametrizations.LogGradientFlow`, u2-v2), gd from its balanced start, any
    data and loss, with the state ``R`` of that closed form.
``linf``
    Balanced positive initialisation, one point, sam-linf: ``du_j/dtau = mu_j (u_j -
    rho)^(L-1)`` with 0 absorbing for even L (beside the rule as well).
``linear``
    Any initialisation and data: the state is ``theta`` ``[L_max, d]`` itself. linf
    here uses ``sign`` as it is; where a sign switches, the adaptive solver may need
    many steps, and reaching ``max_steps`` is reported as a failure, not hidden.

Stopping: a :class:`diffrax.Event` ends the solve when ``log max_j |beta_j|`` leaves
``(log max|beta(0)| - singular_log_range, log_beta_max)``.

- Upper edge: for L >= 3 this is the finite-time blow-up of
docs/theory/balanced.md#balanced-initialisation and its
  ``tau`` is reported (``blowup``). Near it ``beta ~ (tau* - tau)^(-L/(L-2))``, so the
  edge is lowered to ``L/(L-2) * singular_log_range``: a higher one would ask for tau
  closer to tau* than the dtype resolves. For L <= 2 it guards against overflow
  (``log_beta_max`` is half the log of the dtype's largest number, so every square
  taken in a norm stays finite). Records after it are NaN: the horizon ended there.
  The edge is seen at the end of a solver step, and in the log formulation one step
  can be long (the field is nearly constant there): records inside that step but
  beyond the edge lie past the horizon as well (``valid`` is False).
- Lower edge: l2-SAM in the collapse regime reaches ``beta = 0`` in *finite* rescaled
  time (derived here: at L = 2, while u is small, ``d log u_j/dtau ~ -rho mu_j^2 / N``
  with ``N`` proportional to ``|u|``, so ``dN/dtau`` tends to a negative constant).
  The field is 0/0 at the origin and the discrete iterates hover there, so the
  solution is continued as ``beta = 0`` (``collapsed``) and later records are zero.
  The edge is a collapse only where the rule's certificate proves it at that state
  (docs/theory/regimes.md#collapse-certificates); a closed form without it goes on below
  the edge, the linear formulation stops there unresolved.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, NamedTuple

import diffrax
import equinox as eqx
import equinox.internal as eqxi
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
from jax import Array

from samflow import fate as fates
from samflow import runners
from samflow.compile_cache import no_host_checks
from samflow.errors import InputError
from samflow.flow_config import (  # noqa: F401 (its callers import FlowConfig here)
    ANY_EXTEND,
    FlowConfig,
    formulation_for,
)
from samflow.layout import max_rows, min_rows
from samflow.model import DEFAULT, Model, Problem, inner_products, layer_mask, weighted_points
from samflow.regimes import LeaderPath, path_enter, path_start, top
from samflow.rules import PerturbationRule


class Tsit5Interpolation(diffrax.AbstractLocalInterpolation):
    """Tsit5's dense output, ``y(t0 + x h) = y0 + sum_i b_i(x) k_i``: diffrax's
    polynomials ``b_i`` (Tsitouras 2011, as ``diffrax.Tsit5`` has them), the sum written
    out over the seven stages.

    diffrax contracts the stage axis with a dot, which inside a vmapped solve first
    transposes the stages of every trajectory at every saved time (bench case 3: a
    twentieth of a flow sweep); seven multiply-adds fuse with the rest. Agrees with
    diffrax's to rounding (``tests/test_flows.py``).
    """

    t0: Array
    t1: Array
    y0: Array
    k: Array  # [7, *y]

    def __init__(self, *, t0, t1, y0, y1, k):
        del y1  # diffrax's interface
        self.t0, self.t1, self.y0, self.k = t0, t1, y0, k

    def evaluate(self, t0, t1=None, left=True):
        del left
        if t1 is not None:
            return self.evaluate(t1) - self.evaluate(t0)
        x = (t0 - self.t0) / (self.t1 - self.t0)
        x2 = x * x
        b = (
            -1.0530884977290216 * x * (x - 1.3299890189751412)
            * (x2 - 1.4364028541716351 * x + 0.7139816917074209),
            0.1017 * x2 * (x2 - 2.1966568338249754 * x + 1.2949852507374631),
            2.490627285651252793 * x2 * (x2 - 2.38535645472061657 * x + 1.57803468208092486),
            -16.54810288924490272 * (x - 1.21712927295533244) * (x - 0.61620406037800089) * x2,
            47.37952196281928122 * (x - 1.203071208372362603) * (x - 0.658047292653547382) * x2,
            -34.87065786149660974 * (x - 1.2) * (x - 0.666666666666666667) * x2,
            2.5 * (x - 1) * (x - 0.6) * x2,
        )  # fmt: skip
        return self.y0 + sum(bi * self.k[i] for i, bi in enumerate(b))


class Tsit5(diffrax.Tsit5):
    """diffrax's Tsit5 with its stages written out: the same tableau, error estimate,
    dense output and first-same-as-last reuse, in a few fused operations per step.

    diffrax runs the stages of any Runge-Kutta method as a loop over a stage buffer,
    which inside a vmapped solve costs more than the field of a balanced flow (d = 4:
    about a sixth of a sweep's time, bench case 3). Here every stage is
    ``y_i = y0 + sum_j a_ij k_j``, ``k_i = dt f(t0 + c_i dt, y_i)``; the last stage sits
    at ``y1`` (the tableau's last row of ``a`` is its ``b``), and its field is the next
    step's first (FSAL). Only the order of the sums differs from diffrax's, so the two
    agree to rounding (``tests/test_flows.py``).
    """

    interpolation_cls: ClassVar[Callable[..., Tsit5Interpolation]] = Tsit5Interpolation

    def init(self, terms, t0, t1, y0, args):
        # The solver's state is the field at the step's start (first same as last):
        # evaluated here once before the loop (diffrax evaluates it in the first step,
        # under a branch that every step then runs, and keeps a first-step flag for it).
        return terms.vf(t0, y0, args)

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        f0 = solver_state
        control = terms.contr(t0, t1)
        dt = t1 - t0
        if made_jump is not False:
            # After a jump the stored field is stale: evaluate it. Any trajectory of a
            # vmapped batch needing it makes the batch evaluate it, as in diffrax (an
            # unbatched predicate keeps this a branch, not a select). diffrax passes
            # False itself where the controller cannot jump (samflow's solves): no branch.
            f0 = jax.lax.cond(
                eqxi.unvmap_any(made_jump), lambda: terms.vf(t0, y0, args), lambda: f0
            )
        ks = [terms.prod(f0, control)]
        for a_row, c in zip(_TSIT5_A, _TSIT5_C, strict=True):
            yi = y0
            for a, k in zip(a_row, ks, strict=True):  # stage i uses k_0 .. k_{i-1}
                yi = yi + a * k
            fi = terms.vf(t1 if c == 1 else t0 + c * dt, yi, args)
            ks.append(terms.prod(fi, control))
        y_error = sum(b * k for b, k in zip(_TSIT5_B_ERROR, ks, strict=True))
        dense = dict(y0=y0, y1=yi, k=jnp.stack(ks))
        return yi, y_error, dense, fi, diffrax.RESULTS.successful


_TSIT5_TABLEAU = diffrax.Tsit5.tableau
_TSIT5_A = tuple(tuple(float(a) for a in row) for row in _TSIT5_TABLEAU.a_lower)
_TSIT5_C = tuple(float(c) for c in _TSIT5_TABLEAU.c)
_TSIT5_B_ERROR = tuple(float(b) for b in _TSIT5_TABLEAU.b_error)
# y1 is the last stage's point: Tsit5's last row of a is b (and c = 1 there).
assert np.allclose(_TSIT5_TABLEAU.a_lower[-1], _TSIT5_TABLEAU.b_sol[:-1])
assert _TSIT5_TABLEAU.b_sol[-1] == 0 and _TSIT5_C[-1] == 1

SOLVERS = {
    name: Tsit5 if name == "tsit5" else getattr(diffrax, name.capitalize())
    for name in runners.SOLVERS
}
"""The solver class of each name a :class:`samflow.Flow` accepts: diffrax's, with
``tsit5`` as :class:`Tsit5` (the same method, its stages written out)."""


def solver_of(config: FlowConfig) -> diffrax.AbstractSolver:
    """The solver object of ``config``: its named solver (:data:`SOLVERS`), or the
    object the runner was given."""
    solver = config.solver
    return SOLVERS[solver]() if isinstance(solver, str) else solver


UNROLL_PATH = 16
"""Up to this many coordinates the leader path's crossings are written out (advance_path)."""


class FlowSolution(NamedTuple):
    """A solved flow at the saved times (a sweep adds leading grid axes).

    Fields:
        tau: ``[T]`` saved rescaled times (plain time ``t`` for n > 1); ``tau[0] = 0``.
        beta: ``[T, d]`` predictor, NaN after the stop.
        loss: ``[T]`` loss, NaN after the stop.
        theta: ``[T, L_max, d]`` parameters, NaN after the stop.
        stop_tau: scalar, where the solve ended: the horizon, a solver failure (the
            first record whose beta or loss is not finite, where one is), or the event
            (where ``log max|beta|`` crossed its edge inside the last step).
        blowup: scalar bool, True when the upper norm event ended the solve.
        collapsed: scalar bool, True when beta reached 0 (the lower norm event where a
            collapse certificate holds).
        valid: ``[T]`` bool, records that hold a solution (before the stop, or zero
            after a collapse). Records the solver reached before a failure stay valid:
            the failure is flagged, the accepted part of the trajectory kept.
        failed: scalar bool, True when the solver failed (max_steps, non-finite state),
            or a record it reached has a beta or loss that is not finite.
        lead_start: scalar int, the dominant coordinate as ``tau -> 0+`` (0: none), from
            the field at tau = 0 (:func:`lead_at_start`): who leads before any save time.
        path: the :class:`samflow.regimes.LeaderPath` of the solve, from ``lead_start``
            and every accepted solver step up to the stop (:class:`LeaderWatch`).
        fate: scalar int, what decided the run's future where it stopped
            (:mod:`samflow.fate`): the collapse event, a blow-up (L >= 3), or the
            rule's certificate (:meth:`samflow.rules.BalancedFlow.fate`) at the end
            state; ``OPEN`` where nothing did.
        winner: scalar int (1-based), the limit's leader where ``fate`` is ``TAKEOVER``
            (the certificate's winner, or the blow-up's winner,
            docs/theory/regimes.md#blow-up-winner: the major or a minor coordinate,
            :func:`samflow.regimes.finish`); the major elsewhere.
    """

    tau: Array
    beta: Array
    loss: Array
    theta: Array
    stop_tau: Array
    blowup: Array
    collapsed: Array
    valid: Array
    failed: Array
    lead_start: Array
    path: LeaderPath
    fate: Array
    winner: Array


def lead_at_start(beta0: Array, dbeta0: Array) -> Array:
    """The dominant coordinate (1-based) of ``beta(tau)`` as ``tau -> 0+``, 0 if none.

    ``|beta_j(tau)| = |beta_j(0)| + tau s_j + O(tau^2)`` with ``s_j = sign(beta_j(0))
    dbeta_j/dtau(0)`` (``|dbeta_j/dtau(0)|`` where ``beta_j(0) = 0``), so for small tau
    the largest ``|beta_j(0)|`` leads and, among exact ties (a uniform start), the
    largest ``s_j``. A tie in both (identical coordinates, or beta = 0 at rest) has no
    leader at first order: 0, as for a tied record (docs/theory/regimes.md#definitions). This makes
    the classification independent of the first save time: a hand-off before it is seen.
    """
    mag = jnp.abs(beta0)
    slope = jnp.where(beta0 != 0, jnp.sign(beta0) * dbeta0, jnp.abs(dbeta0))
    top = mag == jnp.max(mag)
    score = jnp.where(top, slope, -jnp.inf)
    winners = top & (score == jnp.max(score))
    resting = jnp.all(mag == 0) & jnp.all(slope == 0)
    unique = (jnp.sum(winners) == 1) & ~resting
    return jnp.where(unique, jnp.argmax(score) + 1, 0).astype(jnp.int32)


def rescaled_field(tau, theta, args):
    """One point, a margin loss, any parametrisation: ``dtheta/dtau = m(theta~)`` with
    ``m = y x G(theta)`` (``G`` :meth:`samflow.model.Model.jacobian`, padding rows masked) and
    ``theta~ = theta + rho eps``; the ascent is ``-m`` for a scale-invariant rule, else ``-|l'(z)|
    m`` with ``|l'(z)|`` the loss's :meth:`samflow.losses.MarginLoss.rate`
    (docs/theory/flows.md#rescaled-flows, docs/theory/models.md#parametrisations-and-losses).
    ``args``: ``(problem, mask, rho, rule, model)``."""
    problem, mask, rho, rule, model = args
    yx = problem.y[0] * problem.X[0]

    def m(th):
        return yx * model.jacobian(th) * mask

    if rule.scale_invariant:
        scale = 1.0
    else:
        scale = model.loss.rate(jnp.sum(yx * model.beta(theta)))
    return m(rule.perturbed(theta, -scale * m(theta), rho))


def plain_field(tau, theta, args):
    """The SAM gradient flow ``-grad Loss(theta + rho eps)`` of any model, in plain time
    (GD: ``-grad Loss(theta)``). ``args``: ``(problem, mask, rho, rule, model)``."""
    problem, mask, rho, rule, model = args
    if rule.direction is None:
        return -model.grad_and_aux(theta, problem, mask)[0]
    g, _ = model.grad_and_aux(theta, problem, mask)
    return -model.grad_and_aux(rule.perturbed(theta, g, rho), problem, mask)[0]


def log_gd_field(tau, R, args):
    """Gradient descent in the log-space state ``R`` of a parametrisation's
    :class:`samflow.parametrizations.LogGradientFlow`: ``dR/dt = c(beta)``, ``c =
    grad_beta Loss`` ``[d]``. One point with a margin loss runs in rescaled time (``c``
    divided by ``|l'(z)|``), else in plain time. ``args``: ``(problem, a, model)``."""
    problem, a, model = args
    b = model.parametrization.log_gd.beta(R, a)
    p = inner_products(problem.X, b)
    _, d1, _ = model.loss.derivatives(p, problem.y)
    c = weighted_points(problem.X, d1) / p.shape[0]
    if model.rescales(problem.X.shape[0]):
        c = c / jnp.abs(d1[0])
    return c


def _to_theta(y, formulation, n_layers, depth):
    """Flow state -> ``theta`` ``[..., L_max, d]`` (balanced states fill real layers)."""
    if formulation == "linear":
        return y
    u = jnp.exp(y) if formulation == "log" else y  # the rule's BalancedFlow state
    rows = layer_mask(depth, n_layers, u.dtype)
    return rows * u[..., None, :] + (1 - rows)


NEWTON_CROSSING = 6
"""Newton iterations on the cubic Hermite interpolant that refine each hand-off time
inside a solver step (:func:`advance_path`), from the linear crossing."""


def _hermite_crossing(d0, d1, m0, m1, x_lin, lo):
    """The largest root in ``[lo, 1]`` of the cubic Hermite ``D(x)`` on ``x in [0, 1]``
    with ``D(0) = d0``, ``D(1) = d1 >= 0``, ``D'(0) = m0``, ``D'(1) = m1``.

    Where ``D(lo) < 0`` the root is bracketed by ``[lo, 1]``: Newton from the linear
    crossing ``x_lin``, the bracket updated by the sign of ``D`` at every iterate and a
    bisection wherever a step would leave it. Where ``D(lo) >= 0`` (a tie at ``lo``, as
    at a uniform start, where ``D(x) = x (m0 + c2 x + c3 x^2)``): with ``y = x - lo``,
    ``D = D(lo) + y (D'(lo) + y D''(lo)/2 + c3 y^2)``, so Newton starts from the positive
    root of that quadratic (exact for ``D(lo) = 0``); without one below 1 the lead
    passes at ``lo``. Falls back to ``x_lin`` where the result is not finite.
    """
    # D(x) = c0 + c1 x + c2 x^2 + c3 x^3 (the Hermite basis in powers of x)
    c0, c1 = d0, m0
    c2 = 3.0 * (d1 - d0) - 2.0 * m0 - m1
    c3 = 2.0 * (d0 - d1) + m0 + m1

    def value(x):
        return ((c3 * x + c2) * x + c1) * x + c0

    def slope(x):
        return (3.0 * c3 * x + 2.0 * c2) * x + c1

    v_lo = value(lo)
    tied = v_lo >= 0
    # the tie: positive root y of A + B y + C y^2, in the form that does not cancel
    A, B, C = slope(lo), 3.0 * c3 * lo + c2, c3
    disc = jnp.sqrt(jnp.maximum(B * B - 4.0 * A * C, 0.0))
    y = -2.0 * A / (B + disc)
    y = jnp.where((A < 0) & (B * B - 4.0 * A * C >= 0) & (B + disc > 0), y, 0.0)
    x = jnp.where(tied, jnp.clip(lo + y, lo, 1.0), jnp.clip(x_lin, lo, 1.0))
    a, b = lo, jnp.ones_like(lo)
    for _ in range(NEWTON_CROSSING):
        v, g = value(x), slope(x)
        a, b = jnp.where(v < 0, x, a), jnp.where(v < 0, b, x)
        step = x - v / jnp.where(g != 0, g, 1.0)
        inside = (step >= a) & (step <= b) & (g != 0)
        x = jnp.where(inside, step, 0.5 * (a + b))
    x = jnp.where(tied & (y == 0), lo, x)
    return jnp.where(jnp.isfinite(x), jnp.clip(x, lo, 1.0), x_lin)


def advance_path(
    path: LeaderPath,
    l0: Array,
    l1: Array,
    t0: Array,
    t1: Array,
    major: Array,
    rates: Callable[[], tuple[Array, Array]] | None = None,
    accepted: Array | bool = True,
) -> LeaderPath:
    """``path`` after a solver step from ``t0`` to ``t1`` with ``log |beta|`` ``[d]`` going
    from ``l0`` to ``l1``; ``rates()`` gives ``d log |beta| / dt`` at both ends. A step
    not ``accepted`` leaves the path as it is.

    Which leaders take over inside the step: ``log |beta_j|`` taken linear in tau, the
    leaders along it are the upper envelope of ``d`` lines: from the current leader,
    the next is the line that crosses it first, and so on (each has a larger slope than
    the last, so at most ``d - 1`` crossings). When: each crossing is refined on the
    cubic Hermite interpolant of the difference of the two ``log |beta|`` (values and
    rates at both ends, :func:`_hermite_crossing`), an error fourth order in the step
    length instead of the line's second order (docs/theory/regimes.md#definitions); without rates
    the line's crossing is kept. Refined times never go back: each is at least the one
    before it in the step. A path without a leader yet (a tie at the start) takes the
    leader at ``t1``, as does one whose envelope disagrees with ``l1`` in the last bit.

    Most steps change nothing: the leader crosses no line and still leads at ``t1``.
    That is read from the first crossing and the leader at ``t1`` alone, and the rest
    (the later crossings, the rates and their refinement, the writes into the path) is
    a branch taken only where some trajectory of a vmapped batch changes its path. The
    rates are computed there too, from the step's ends, so a step that hands nothing on
    evaluates no field of its own. The branch replaces the refinement's, so a step
    still runs one (each costs about as much as a small kernel sequence): bench case 3
    went from 0.110-0.114 to 0.100-0.102 CPU-s per sweep (docs/benchmarks.md), its
    outputs the same bit for bit (of three sweeps taken to their fate, one hand-off
    time moved by an ulp).
    """
    d = l0.shape[0]
    small = d <= UNROLL_PATH
    slope = l1 - l0
    both = jnp.isfinite(l0) & jnp.isfinite(l1)
    finite = min_rows(both) if small else jnp.all(both)

    def take(v, i):
        """``v[i]`` (``i`` an index or an array of them): for a few coordinates as a
        chain of selects, which fuse with the arithmetic around them (a gather is a
        kernel of its own, and this runs in every solver step)."""
        if not small:
            return v[i]
        out = jnp.broadcast_to(v[0], jnp.shape(i))
        for k in range(1, d):
            out = jnp.where(i == k, v[k], out)
        return out

    def first_min(v):
        """``jnp.argmin(v)`` of a ``v`` without NaN (the first smallest entry), and that
        entry; for a few coordinates as a running minimum."""
        if not small:
            i = jnp.argmin(v)
            return i, v[i]
        best, index = v[0], jnp.zeros((), jnp.int32)
        for k in range(1, d):
            smaller = v[k] < best
            best, index = jnp.where(smaller, v[k], best), jnp.where(smaller, k, index)
        return index, best

    def cross(carry, _):
        lead, s = carry
        a = jnp.maximum(lead - 1, 0)
        gain = slope - take(slope, a)
        at = jnp.where(gain > 0, (take(l0, a) - l0) / jnp.where(gain > 0, gain, 1.0), jnp.inf)
        at = jnp.where((at >= s) & (lead > 0) & finite, at, jnp.inf)  # no NaN left
        j, at_j = first_min(at)
        hit = at_j <= 1
        new = jnp.where(hit, j + 1, 0).astype(jnp.int32)
        x = jnp.where(hit, at_j, s)
        return (jnp.where(hit, new, lead), x), (new, a, j, s, x)

    # Whether the path can change: a first crossing inside the step, or a new leader at
    # its end (each later crossing of the envelope follows a first one).
    carry = (path.lead, jnp.zeros((), l0.dtype))
    first = cross(carry, None)[1][0] if d > 1 else jnp.zeros((), jnp.int32)
    last = jnp.where(finite, top(l1), 0)
    changes = accepted & ((first > 0) | ((last > 0) & (last != path.lead)))

    def changed():
        # First the envelope's crossings (cheap, one after another), then every crossing
        # refined at once, then the path. Written out for a few coordinates, with selects
        # for the indexing: a loop in every solver step costs more than its d - 1 small
        # bodies, and every gather, reduction or stacking a kernel of its own.
        steps_carry = carry
        if small:
            steps = []
            for _ in range(d - 1):
                steps_carry, out = cross(steps_carry, None)
                steps.append(out)
            new, a, j, lo, x = (list(v) for v in zip(*steps, strict=True)) if steps else [[]] * 5
        else:
            _, (new, a, j, lo, x) = jax.lax.scan(cross, steps_carry, None, length=d - 1)
        if rates is not None and d > 1:
            h = t1 - t0

            def refine():
                r0, r1 = rates()
                if not small:
                    refined = _hermite_crossing(
                        l0[j] - l0[a],
                        l1[j] - l1[a],
                        h * (r0[j] - r0[a]),
                        h * (r1[j] - r1[a]),
                        x,
                        lo,
                    )
                    return jax.lax.cummax(jnp.where(new > 0, refined, 0.0))
                out, top_x = [], None
                for k in range(d - 1):
                    jk, ak = j[k], a[k]
                    refined = _hermite_crossing(
                        take(l0, jk) - take(l0, ak),
                        take(l1, jk) - take(l1, ak),
                        h * (take(r0, jk) - take(r0, ak)),
                        h * (take(r1, jk) - take(r1, ak)),
                        x[k],
                        lo[k],
                    )
                    refined = jnp.where(new[k] > 0, refined, 0.0)
                    top_x = refined if top_x is None else jnp.maximum(top_x, refined)  # cummax
                    out.append(top_x)
                return out

            # Most steps hand nothing over: a vmapped solve refines only where one does.
            crossed = max_rows(jnp.stack(new) > 0) if small else jnp.any(new > 0)
            x = jax.lax.cond(eqxi.unvmap_any(crossed), refine, lambda: x)
        moved = path
        for k in range(d - 1):
            moved = path_enter(moved, new[k], t0 + x[k] * (t1 - t0), -1, major)
        moved = path_enter(moved, last, t1, -1, major)
        return jax.tree_util.tree_map(lambda m, p: jnp.where(accepted, m, p), moved, path)

    return jax.lax.cond(eqxi.unvmap_any(changes), changed, lambda: path)


class LeaderWatch(diffrax.AbstractAdaptiveStepSizeController):
    """A step-size controller that also follows the leader at every accepted step.

    It delegates every decision to ``inner`` (a PID controller) and carries in its
    state the :class:`samflow.regimes.LeaderPath`, advanced by :func:`advance_path` on the
    steps ``inner`` accepts, and the last accepted step ``(t0, t1, log max|beta|`` at
    both ends), which places a stopping event inside it; ``SaveAt(controller_state=
    True)`` hands them back. ``level`` maps a solver state to ``log |beta|`` ``[d]``.

    With ``field`` (the solve's vector field, ``field(t, y, args)``) the hand-offs are
    refined on a cubic in each step: the rate ``d log |beta| / dt`` of a state is the
    field pushed through ``level`` (a jvp), evaluated at both ends of a step only where
    a trajectory's path changes in it (:func:`advance_path`). Without it, the linear
    crossings.
    """

    inner: diffrax.PIDController
    path0: LeaderPath
    major: Array
    level: Callable = eqx.field(static=True)
    field: Callable | None = eqx.field(static=True, default=None)

    @property
    def rtol(self):
        return self.inner.rtol

    @property
    def atol(self):
        return self.inner.atol

    @property
    def norm(self):
        return self.inner.norm

    def wrap(self, direction):
        return eqx.tree_at(lambda c: c.inner, self, self.inner.wrap(direction))

    def _rate(self, t, y, args):
        """``d log |beta| / dt`` ``[d]`` at state ``y``."""
        return jax.jvp(self.level, (y,), (self.field(t, y, args),))[1]

    def init(self, terms, t0, t1, y0, dt0, args, func, error_order):
        tnext, state = self.inner.init(terms, t0, t1, y0, dt0, args, func, error_order)
        level = jnp.max(self.level(y0))
        # The last item is the step _stop reads.
        return tnext, (state, self.path0, (t0, t0, level, level))

    def adapt_step_size(self, t0, t1, y0, y1_candidate, args, y_error, error_order, state):
        inner_state, path, last = state
        # A step whose stages overflowed is rejected like one with too large an error: the
        # PID controller then shortens it by its factormin. Left NaN, the error would make
        # every later step size NaN and each step rejected up to max_steps. (diffeqsolve
        # starts every solve with a step of 0.01: it wraps the term, and its initial-step
        # estimate is used only for a bare ODETerm. From alpha = 2.6e-4 at L = 3, rho = 2
        # the field is ~1e4 and that first step overflowed:
        # docs/theory/numerics.md#overflowing-steps.)
        # (The candidate is replaced by y0 for the error's scale: an inf there gives inf/inf.)
        finite = jnp.all(jnp.isfinite(y1_candidate)) & jnp.all(jnp.isfinite(y_error))
        keep, tprev, tnext, jump, inner_state, result = self.inner.adapt_step_size(
            t0,
            t1,
            y0,
            jnp.where(finite, y1_candidate, y0),
            args,
            jnp.where(finite, y_error, jnp.inf),
            error_order,
            inner_state,
        )
        l0, l1 = self.level(y0), self.level(y1_candidate)
        rates = None
        if self.field is not None:

            def rates():
                return self._rate(t0, y0, args), self._rate(t1, y1_candidate, args)

        path = advance_path(path, l0, l1, t0, t1, self.major, rates, keep)
        step = (t0, t1, jnp.max(l0), jnp.max(l1))
        last = jax.tree_util.tree_map(lambda a, b: jnp.where(keep, a, b), step, last)
        return keep, tprev, tnext, jump, (inner_state, path, last), result


def _solve(field, y0, args, saves, config, problem, major, start, log_beta, cond_fn, extend):
    """The diffrax solve of ``field`` from ``y0`` over ``saves`` ``[T]`` (``saves[0] = 0``
    the start, ``saves[-1]`` the horizon; kept there and at the end, which is
    ``extend`` times the horizon), stopped where ``cond_fn`` changes sign, with
    the leader path watched between the steps (:class:`LeaderWatch`, ``log_beta`` the
    state's ``log |beta|``). ``start``: beta and its rate at the start, for the first
    leader; ``major`` (1-based, :func:`_major`). Returns the solution and that first
    leader."""
    # diffrax steps t1 back by 100 ULPs (100 chained nextafter ops). Where XLA can prove
    # the times equal across a vmapped tile (times shared and speed 1, or a tile of copies
    # of one point), it sinks that broadcast through the chain one op per pass and gives
    # up after 50 passes with an error line ("stuck in a circular simplification loop").
    # The barrier (an identity) hides the broadcast: same numbers, no such line.
    saves = jax.lax.optimization_barrier(saves)
    lead_start = lead_at_start(*start)
    path0 = path_enter(path_start((), y0.dtype), lead_start, saves[0], -1, major)
    # max norm: padding rows (constant ones) must not change the step sizes
    pid = diffrax.PIDController(rtol=config.rtol, atol=config.atol, norm=optx.max_norm)
    saveat = diffrax.SaveAt(
        subs=[diffrax.SubSaveAt(ts=saves), diffrax.SubSaveAt(t1=True)], controller_state=True
    )
    with no_host_checks():  # a program with a host callback is never kept on disk
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(field),
            solver_of(config),
            t0=saves[0],
            t1=saves[-1] * extend,
            dt0=None,
            y0=y0,
            args=args,
            saveat=saveat,
            stepsize_controller=LeaderWatch(pid, path0, major, log_beta, field),
            # No root-find: near a singularity the interpolant is too steep for Newton to
            # converge, and the adaptive steps there are already tiny, so the end of the
            # step in which the level is crossed locates the event to well within 1e-6
            # relative.
            event=diffrax.Event(cond_fn),
            max_steps=config.max_steps,
            throw=False,
        )
    return sol, lead_start


def _ended(sol) -> tuple[Array, Array, Array, Array]:
    """From a :func:`_solve` solution: the saved states, the state at the end, whether
    the event stopped the solve, and whether it failed (ended neither at the horizon nor
    at the event, or with a non-finite state)."""
    y_end = sol.ys[1][0]
    event = sol.result == diffrax.RESULTS.event_occurred
    ok = (sol.result == diffrax.RESULTS.successful) | event
    return sol.ys[0], y_end, event, ~ok | ~jnp.all(jnp.isfinite(y_end))


def _stop(sol, edge: Array, event: Array) -> tuple[LeaderPath, Array]:
    """From a :func:`_solve` solution: the leader path and the time the solve stopped.

    The event is seen at the end of a step, which can be long in log space (the overflow
    guard of L = 2 is crossed inside a step from tau ~ 43 to the horizon): where the
    event stopped it, the stop is placed where ``log max|beta|`` crosses ``edge``,
    linearly inside that last step; else it is the end of the solve."""
    _, path, (ta, tb, la, lb) = sol.controller_state
    frac = jnp.clip((edge - la) / jnp.where(lb != la, lb - la, 1.0), 0.0, 1.0)
    return path, jnp.where(event, ta + frac * (tb - ta), sol.ts[1][0])


class Formulated(NamedTuple):
    """A model's flow as solved in one formulation (:func:`formulated`).

    Fields:
        y0: the state at the start.
        field: ``(tau, y, args) -> dy/dtau`` and its ``args``.
        args: the field's arguments.
        beta_of: ``y -> beta`` ``[d]`` of a state.
        log_beta: ``y -> log |beta|`` ``[d]``, 0 clipped to the smallest normal number.
        log_beta_max: ``y -> log max_j |beta_j|``, not clipped (``log 0 = -inf``) where
            the solve is ``singular``.
        to_theta: ``y -> theta`` ``[L_max, d]`` of a state mapped back by ``unscale``.
        unscale: a solved state -> the state of the problem as given (undoes ``c``).
        speed: solved time = ``speed * tau``.
        certify: ``y -> (code, winner)``, the certificate the solver checks at each step
            (:attr:`samflow.rules.BalancedFlow.step_fate`), or None.
        certify_end: the same at the run's last state
            (:attr:`samflow.rules.BalancedFlow.end_fate`), or None.
        proves_collapse: ``y -> bool``, whether a collapse certificate holds, as the
            solver checks it at each step of a run not taken to its fate
            (:attr:`samflow.rules.BalancedFlow.step_collapse`), or None.
        singular: whether the solve follows the finite-time singularities of
        docs/theory/balanced.md#balanced-initialisation (a collapse event at ``beta -> 0``, the
        blow-up edge lowered for L >= 3):
            the model's :attr:`samflow.model.Model.closed_forms`. Elsewhere only the
            overflow guard stops it.
    """

    y0: Array
    field: Callable
    args: tuple
    beta_of: Callable[[Array], Array]
    log_beta: Callable[[Array], Array]
    log_beta_max: Callable[[Array], Array]
    to_theta: Callable[[Array], Array]
    unscale: Callable[[Array], Array]
    speed: Array
    certify: Callable | None
    singular: bool
    certify_end: Callable | None = None
    proves_collapse: Callable | None = None


def formulated(theta0, problem, depth, rho, rule, form, model) -> Formulated:
    """``model``'s flow from ``theta0`` in formulation ``form`` (:func:`formulation_for`):
    a rule's closed form (log, linf) on the paper's model, a parametrisation's log-space
    gradient descent (log), or ``theta`` itself (linear) under :func:`rescaled_field` for
    one point of a margin loss, else :func:`plain_field`."""
    dtype = theta0.dtype
    n_layers, _ = theta0.shape
    static = depth if isinstance(depth, int | np.integer) else None
    depth = jnp.asarray(depth)
    rho = jnp.asarray(rho, dtype)
    mask = layer_mask(depth, n_layers, dtype)
    tiny = jnp.finfo(dtype).tiny
    one = jnp.ones((), dtype)
    certify = certify_end = proves_collapse = None

    def identity(y):
        return y

    if form == "log" and not model.closed_forms:  # the parametrisation's gd, u = v = a
        a, log_gd = theta0[0], model.parametrization.log_gd

        def beta_of(R):
            return log_gd.beta(R, a)

        def to_theta(R):
            return log_gd.theta(R, a)

        y0, field, args = jnp.zeros_like(a), log_gd_field, (problem, a, model)
        unscale, speed = identity, one

    elif form != "linear":  # the rule's closed form, balanced start: state u [d]
        mu = problem.X[0]
        # (u, rho) -> (c u, c rho) maps a balanced solution at tau to one at c^(2-L) tau
        # (docs/theory/balanced.md#scale-invariance). At L >= 3 the closed forms are solved with a
        # largest alpha above 1 scaled to 1: from alpha = 300 the blow-up comes at tau ~ 1e-3 and
        # the solver could not start. (Small alphas are left alone: at L = 8, alpha =
        # 1e-8 the time factor would be 1e-48.) Scaled: tau_s = speed * tau; the state is
        # mapped back at the end.
        largest = jnp.max(theta0[0])
        scaled = rule.scale_invariant & (depth >= 3) & (largest > 1)
        c = jnp.where(scaled, 1.0 / largest, 1.0).astype(dtype)
        speed = c ** (2 - depth).astype(dtype)
        closed = rule.balanced
        field_depth = depth if static is None else static  # static: the field specialises
        y0, field, args = closed.state(c * theta0[0]), closed.field, (mu, field_depth, c * rho)
        if closed.fate is not None:

            def certify(y):
                return closed.step_fate(y, mu, field_depth, c * rho)

            def certify_end(y):
                return closed.end_fate(y, mu, field_depth, c * rho)

            def proves_collapse(y):
                return closed.step_collapse(y, mu, field_depth, c * rho)

        def to_theta(y):
            return _to_theta(y, form, n_layers, depth)

        def beta_of(y):
            return model.beta(to_theta(y))

        def unscale(y):
            return y - jnp.log(c) if form == "log" else y / c

    else:
        rescaled = model.rescales(problem.X.shape[0])
        field = rescaled_field if rescaled else plain_field
        y0, args = theta0, (problem, mask, rho, rule, model)
        to_theta, unscale, beta_of, speed = identity, identity, model.beta, one

    def log_beta(y):
        if form == "log" and model.closed_forms:
            return depth * y
        return jnp.log(jnp.maximum(jnp.abs(beta_of(y)), tiny))

    def log_beta_max(y):
        if form == "log" and model.closed_forms:
            return depth * jnp.max(y)
        if model.closed_forms:  # not clipped: the collapse edge (log 0 = -inf) is seen
            return jnp.log(jnp.max(jnp.abs(beta_of(y))))
        return jnp.max(log_beta(y))

    return Formulated(
        y0, field, args, beta_of, log_beta, log_beta_max, to_theta, unscale, speed, certify,
        model.closed_forms, certify_end, proves_collapse,
    )  # fmt: skip


def _major(problem: Problem, major: Array | int | None) -> Array:
    """The major coordinate (1-based) of a solve: ``major`` as given, or for one point
    ``argmax_j mu_j + 1`` (the engine's :func:`samflow.engine._major` of one point);
    ``n`` points need it given (:func:`samflow.model.major_coordinate`)."""
    if major is None:
        if problem.X.shape[0] != 1:
            raise InputError("integrate: n points need major (samflow.model.major_coordinate)")
        major = jnp.argmax(problem.X[0]) + 1
    return jnp.asarray(major, jnp.int32)


def integrate(
    theta0: Array,
    problem: Problem,
    depth: Array | int,
    rho: Array | float,
    save_tau: Array,
    *,
    rule: PerturbationRule,
    config: FlowConfig,
    major: Array | int | None = None,
    model: Model = DEFAULT,
    extend: Array | None = None,
) -> FlowSolution:
    """Pure, vmappable solve from ``theta0`` ``[L_max, d]`` saving at ``save_tau`` ``[T]``.

    ``save_tau[0]`` must be 0 and ``save_tau[-1]`` is the horizon. ``extend``: the
    ratio ``tau_cap / tau_max`` where ``config.extend`` is
    :data:`samflow.flow_config.ANY_EXTEND` (a scalar of ``save_tau``'s dtype; otherwise
    not read). ``major`` (1-based)
    is the major coordinate, for the leader path: by default ``argmax_j mu_j`` of one
    point; ``n`` points need it given (:func:`samflow.model.major_coordinate`).
    ``model``: the parametrisation and loss (static), solved as :func:`formulated` says.
    Where the model has no closed forms (:attr:`samflow.model.Model.closed_forms`) the
    solve has no collapse event (beta(0) may be 0) and no certificate, only the
    overflow guard.
    """
    n_layers, _ = theta0.shape
    depth = jnp.asarray(depth)
    major = _major(problem, major)
    mask = layer_mask(depth, n_layers, theta0.dtype)
    f = formulated(theta0, problem, depth, rho, rule, config.formulation, model)
    y0, field, args, log_beta_max = f.y0, f.field, f.args, f.log_beta_max
    save_scaled = save_tau * f.speed
    beta0, dbeta0 = jax.jvp(f.beta_of, (y0,), (field(save_tau[0], y0, args),))

    # Each use below takes the certificate of a state computed once (``cert``: the
    # ``(code, winner)`` of :func:`certificate`) rather than tracing it again: it is most
    # of the program (700-1,000 equations for l2-SAM and USAM), and was traced three times
    # at the end of the solve and twice per step of a run to its fate.
    def certificate(y):
        """The rule's certificate ``(code, winner)`` of state ``y``, or None without one."""
        return None if f.certify is None else f.certify(y)

    def certified_collapse(cert):
        """Whether the certificate ``cert`` of a state proves that beta tends to 0 from it."""
        if cert is None:
            return jnp.zeros((), bool)
        return cert[0] == fates.COLLAPSE

    if f.singular:
        low = log_beta_max(y0) - config.singular_log_range
        high = jnp.where(
            depth >= 3,
            jnp.minimum(config.log_beta_max, depth / (depth - 2) * config.singular_log_range),
            config.log_beta_max,
        )

        def edges(y, collapsed):
            # The lower edge is a collapse only where a certificate proves it
            # (docs/theory/regimes.md#collapse-certificates): a closed form without one goes
            # on (its log state stays finite: a coordinate may yet grow, as USAM's with
            # rho mu_j < 2 does); the linear formulation, which has no certificate, stops
            # there unresolved (its field is 0/0 at beta = 0).
            level = log_beta_max(y)
            lower = level - low
            if f.certify is not None:
                lower = jnp.where(collapsed, lower, jnp.inf)
            return jnp.minimum(high - level, lower)

    else:
        high = config.log_beta_max

        def edges(y, collapsed):
            return high - log_beta_max(y)

    def fate_of(y, cert, end=False):
        """The certified fate of state ``y`` (OPEN, SETTLED, COLLAPSE, FINITE or RETURN;
        at the run's ``end`` also TAKEOVER) and the certificate's winner (the major without
        one), from its certificate ``cert`` (:func:`certificate`)."""
        if cert is None:
            return jnp.asarray(fates.OPEN, jnp.int32), major
        code, winner = cert
        # TAKES_OVER also says the winner takes the lead: the flow runs on to it (the
        # hand-off is seen, at a finite tau); only the run's end (below) labels by it.
        leading = top(f.log_beta(y)) == winner
        leads = (code == fates.LEADS) | (code == fates.TAKES_OVER)
        settled = leads & leading
        takeover = end & (code == fates.TAKES_OVER) & ~settled
        # The major wins in the end (docs/theory/regimes.md#usam-returns,
        # #escape-past-the-fixed-point). RETURNS: where it leads now it hands the lead on
        # first, so the run is returned; where a minor leads, at the run's end (the regime
        # is returned where the major led before, regimes.finish). WINS_LATER (it may lead
        # and lose before): only at the run's end with a minor leading.
        returning = ((code == fates.RETURNS) & (leading | end)) | (
            (code == fates.WINS_LATER) & end & ~leading
        )
        code = jnp.select(
            [settled, code == fates.COLLAPSE, code == fates.FINITE, takeover, returning],
            [fates.SETTLED, fates.COLLAPSE, fates.FINITE, fates.TAKEOVER, fates.RETURN],
            fates.OPEN,
        )
        return code.astype(jnp.int32), jnp.asarray(winner, jnp.int32)

    if config.capped and f.certify is not None:  # past the horizon, stop where decided

        def cond_fn(t, y, args, **kwargs):
            cert = certificate(y)
            decided = (t >= save_scaled[-1]) & (fate_of(y, cert)[0] != fates.OPEN)
            return jnp.where(decided, -1.0, edges(y, certified_collapse(cert)))

    else:

        def cond_fn(t, y, args, **kwargs):
            # Only whether a collapse is proven matters here (a cheaper check).
            proven = f.singular and f.proves_collapse is not None
            return edges(y, f.proves_collapse(y) if proven else certified_collapse(None))

    if config.extend == ANY_EXTEND:
        if extend is None:
            raise ValueError("a flow of FlowConfig.extend ANY_EXTEND needs its extend")
        extend = jnp.asarray(extend, save_scaled.dtype)
    else:
        extend = config.extend
    sol, lead_start = _solve(
        field, y0, args, save_scaled, config, problem, major, (beta0, dbeta0), f.log_beta,
        cond_fn, extend,
    )  # fmt: skip
    ys, y_end, event, failed = _ended(sol)
    # The last state's certificate with what is tried only there (BalancedFlow.end_fate).
    cert_end = None if f.certify_end is None else f.certify_end(y_end)
    if f.singular:
        # the event fired inside the edges
        certified_stop = event & (edges(y_end, certified_collapse(cert_end)) >= 0)
        shrunk = event & ~certified_stop & (log_beta_max(y_end) < low + 1)
        collapsed = shrunk & certified_collapse(cert_end)
        edge = jnp.where(shrunk, low, high)
    else:
        certified_stop, shrunk, edge = jnp.zeros((), bool), jnp.zeros((), bool), high
        collapsed = shrunk
    blowup = event & ~certified_stop & ~shrunk
    at_blowup, blowup_winner = jnp.asarray(fates.BLOWUP, jnp.int32), major
    closed = rule.balanced
    by_rate = closed is not None and closed.blowup_won_by_rate
    by_rate = by_rate and config.formulation == "log" and model.closed_forms
    if by_rate:
        # The blow-up's winner is the largest x_j = mu_j u_j^(L-2), whoever leads where
        # the solve stopped (docs/theory/regimes.md#blow-up-winner): where another
        # coordinate leads there, the race is not over, and the winner takes the lead
        # later: a take-over. The major: sequential or returned. A minor one: the flow
        # keeps the order of x, so the winner (larger x, smaller mu) is ahead of the major
        # at every tau, which never led: minor_end. The order of x is read at the start,
        # exactly, not from a solved state in which the gaps may have shrunk below the
        # solver's error. Only the rules whose closed form carries the proof
        # (BalancedFlow.blowup_won_by_rate).
        log_x = jnp.log(problem.X[0]) + (depth - 2) * y0
        blowup_winner = top(log_x)
        racing = blowup_winner != top(f.log_beta(y_end))
        at_blowup = jnp.where(
            racing, jnp.where(blowup_winner > 0, fates.TAKEOVER, fates.OPEN), at_blowup
        )
    end_fate, end_winner = fate_of(y_end, cert_end, end=True)
    # Any other blow-up is decided only by a certificate at the stop (linf-SAM's first
    # blow-up): the leader at the guard need not win the race beyond it
    # (docs/theory/regimes.md#labels-of-the-limit).
    at_event = blowup & (depth >= 3) & by_rate
    fate = jnp.select([collapsed, at_event], [fates.COLLAPSE, at_blowup], end_fate)
    fate = fate.astype(jnp.int32)
    winner = jnp.where(at_event, blowup_winner, end_winner)
    winner = jnp.where(fate == fates.TAKEOVER, winner, major).astype(jnp.int32)
    unscaled = f.unscale(ys)
    path, stop = _stop(sol, edge, event & ~certified_stop)
    path = path._replace(tau=path.tau / f.speed)
    # Records beyond the stop, or beyond the upper edge, are past the horizon. A NaN
    # record inside the horizon stays valid, so that the run is FAILED, never
    # classified from its other records. After a collapse beta is 0 (padding rows one).
    valid = (save_scaled <= stop) & ~(jax.vmap(log_beta_max)(ys) > high)
    stop = stop / f.speed
    zero = jnp.where(mask > 0, 0.0, 1.0).astype(theta0.dtype)
    after = jnp.where(collapsed & ~failed, zero, jnp.nan)
    theta = jnp.where(valid[:, None, None], jax.vmap(f.to_theta)(unscaled), after)
    b = jnp.where(
        valid[:, None], jax.vmap(f.beta_of)(unscaled), jnp.where(collapsed & ~failed, 0.0, jnp.nan)
    )
    lossv = jax.vmap(lambda th: model.value(th, problem))(theta)
    # A NaN or infinity the solver did not see (a user's beta or loss of a finite state,
    # or a stop time of NaN) fails the run as a discrete run's failed_step does; the
    # solve is then taken to stop at the first such record, which says where.
    sound = jnp.all(jnp.isfinite(b), axis=1) & jnp.isfinite(lossv)
    broken = valid & ~sound
    first_broken = jnp.min(jnp.where(broken, save_tau, jnp.inf))
    nonfinite = jnp.any(broken) | ~jnp.isfinite(stop)
    stop = jnp.where(jnp.isfinite(stop), jnp.minimum(stop, first_broken), save_tau[0])
    failed = failed | nonfinite
    return FlowSolution(
        tau=save_tau,
        beta=b,
        loss=lossv,
        theta=theta,
        stop_tau=stop,
        blowup=blowup,
        collapsed=collapsed,
        valid=valid | (collapsed & ~failed),
        failed=failed,
        lead_start=lead_start,
        path=path,
        fate=fate,
        winner=winner,
    )


def start_rate(
    theta0: Array,
    problem: Problem,
    depth: Array | int,
    rho: Array | float,
    *,
    rule: PerturbationRule,
    config: FlowConfig,
    model: Model = DEFAULT,
) -> Array:
    """``d log ||beta||_1 / dtau`` at ``tau = 0`` of the solve :func:`integrate` runs from
    ``theta0`` (the same formulation and time; vmappable).

    The engine solves a tile of trajectories in lockstep, each tile as long as its
    slowest member, and orders a chunk's points by this rate first: where the flow
    starts to grow or shrink, and how fast, tells its regime and so roughly how many
    solver steps it takes (a collapse follows its singularity in many small steps, a
    direct run grows in few long ones). The rate is ``sum_j softmax_j(log |beta|)
    d log |beta_j| / dtau``, from the field at the start by forward differentiation.
    """
    f = formulated(theta0, problem, depth, rho, rule, config.formulation, model)
    zero = jnp.zeros((), theta0.dtype)
    _, rate = jax.jvp(
        lambda y: jax.nn.logsumexp(f.log_beta(y)), (f.y0,), (f.field(zero, f.y0, f.args),)
    )
    return rate * f.speed
