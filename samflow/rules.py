"""Perturbation rules: GD, l2-SAM, linf-SAM and USAM, and how to write your own.

SAM evaluates the descent gradient at ``theta + rho * eps(g)``, ``g = grad Loss(theta)``
(docs/theory/setting.md#algorithms). A rule is the map ``g -> eps`` over a parameter pytree:

========== ============================== ======================================
method     eps(g)                         note
========== ============================== ======================================
gd         none                           the ascent gradient is not evaluated
sam-l2     g / ||g||_2                    norm over every leaf and coordinate
sam-linf   sign(g)
usam       g                              unnormalised control
========== ============================== ======================================

A rule is a :class:`PerturbationRule` object; every entry point takes one where it
takes a method name, so a new rule needs no edit of samflow::

    half = samflow.PerturbationRule("half-l2", lambda g, batch_ndim: ...)
    samflow.trajectory(half, depth=2, mu=[1, 2, 3, 4], alpha=0.5, rho=1.0, runner=...)

Beside each built-in rule stands the closed form of its flow from a balanced positive
start on one point (:class:`BalancedFlow`), which the flow solver uses in log space
(docs/theory/flows.md#rescaled-flows); ``tests/test_rules.py`` checks each closed form against the
generic field built from ``direction``. A user rule without one is solved in the
generic (linear) formulation.

A rule may also say what it does on a network whose layers are all equal
(``layers_alike``): then a discrete run from equal layers runs one vector ``u`` instead
of every layer (:mod:`samflow.balanced`). The built-in rules say it; a user rule
without it runs the general step.

A *random* rule (``random=True``, e.g. :data:`RANDOM_L2`) gets a PRNG key and the step
number as well; the discrete runners hand them, flows refuse it. What a direction
returns must have the gradient's structure, shapes and dtypes: anything else is refused
when first traced (an int ``eps`` would truncate to 0 and run GD under the rule's name).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from samflow import fate as _fate
from samflow import inputs
from samflow.errors import InputError
from samflow.layout import sum_leading

PyTree = Any


def tree_l2_norm(tree: PyTree, batch_ndim: int = 0) -> Array:
    """``||tree||_2`` over every leaf and coordinate, per element of the trailing batch axes."""
    leaves = jax.tree_util.tree_leaves(tree)
    return jnp.sqrt(sum(sum_leading(jnp.square(leaf), batch_ndim) for leaf in leaves))


def _l2_direction(g: PyTree, batch_ndim: int = 0) -> PyTree:
    norm = tree_l2_norm(g, batch_ndim)
    # A zero gradient (e.g. all weights zero) gives no perturbation rather than 0/0.
    safe = jnp.where(norm > 0, norm, 1.0)
    return jax.tree_util.tree_map(lambda leaf: leaf / safe.astype(leaf.dtype), g)


def _linf_direction(g: PyTree, batch_ndim: int = 0) -> PyTree:
    return jax.tree_util.tree_map(jnp.sign, g)


def _usam_direction(g: PyTree, batch_ndim: int = 0) -> PyTree:
    return g


# Directions on L equal layers (PerturbationRule.layers_alike): g [d, *batch] is the
# gradient of each of the n_layers real layers (an int, or [*batch] ints).


def _l2_alike(g: Array, n_layers, batch_ndim: int = 0) -> Array:
    # ||(g, ..., g)||_2 over L layers = sqrt(L sum_j g_j^2); zero gives no perturbation.
    norm = jnp.sqrt(jnp.asarray(n_layers, g.dtype) * sum_leading(jnp.square(g), batch_ndim))
    return g / jnp.where(norm > 0, norm, 1.0).astype(g.dtype)


def _linf_alike(g: Array, n_layers, batch_ndim: int = 0) -> Array:
    return jnp.sign(g)


def _usam_alike(g: Array, n_layers, batch_ndim: int = 0) -> Array:
    return g


def signed_int_pow(x: Array, k: Array | int) -> Array:
    """``x ** k`` for a traced integer ``0 <= k < 2 ** b`` (``b`` the bit length of
    :data:`samflow.inputs.MAX_LAYERS`, so every ``depth - 1``) and any sign of ``x``; a
    static ``k`` (a Python or NumPy int) takes the multiplies of its own bits only, in
    the same order (the same numbers).

    By binary powering: ``x^k = prod_{bits i of k} x^(2^i)``, each ``x^(2^i)`` the square
    of the one before, taken where bit ``i`` is set; elementwise multiplies that XLA fuses.
    XLA's ``pow`` with a traced exponent is a scalar call into the C library per element
    (a quarter of a log-space flow sweep's time, bench case 3). ``k = 1`` (depth 2) is
    ``x`` exactly; higher powers are within a few ulps of the correctly rounded one.
    """
    if isinstance(k, int | np.integer):  # a static power: the multiplies of its bits only
        result, power, k = None, x, int(k)
        while k:
            if k & 1:
                result = power if result is None else result * power
            k >>= 1
            power = power * power if k else power
        return jnp.ones_like(x) if result is None else result
    k = jnp.asarray(k)
    result, power = jnp.ones_like(x), x
    for bit in range(inputs.MAX_LAYERS.bit_length()):
        result = jnp.where((k >> bit) & 1 == 1, result * power, result)
        power = power * power
    return result


@dataclass(frozen=True)
class BalancedFlow:
    """Closed form of a rule's rescaled flow from a balanced positive start, one point.

    Every real layer then stays equal to one vector ``u`` ``[d]``
    (docs/theory/balanced.md#balanced-initialisation); the solver integrates ``y = log u``
    (``formulation = "log"``) or ``y = u`` (``"linf"``) with ``field(tau, y, (mu, depth, rho)) ->
    dy/dtau``.

    ``fate(y, mu, depth, rho, eta=None) -> (code, winner)`` (optional) is the rule's
    *certificate* (docs/theory/regimes.md#labels-of-the-limit): a condition on the state ``y``
    ``[d]`` that provably fixes the run's future, as a :mod:`samflow.fate` code (``OPEN``: nothing
    certified; ``LEADS``: coordinate ``winner`` (1-based), once it leads, leads for
    ever; ``COLLAPSE``: beta tends to 0, or for a discrete run stays in a ball around 0
    set by the step; ``FINITE``: beta tends to a finite nonzero point; ``WINS_LATER``: the
    major leads for ever from some finite time on, not necessarily from its next lead;
    ``RETURNS``: so does the major, and leading now it hands the lead on first). ``eta`` (a
    step size) asks for the discrete balanced step (:mod:`samflow.balanced`) of the
    logistic loss instead of the flow: only what is proven for that map is returned.
    ``TAKES_OVER``: coordinate ``winner`` takes the lead within finite time and keeps it
    for ever, and where ``winner`` is a minor coordinate the major does not lead in
    between (:mod:`samflow.fate`).

    ``blowup_won_by_rate``: the flow's finite-time blow-up (L >= 3) is won by the
    coordinate with the largest rate variable ``x_j = mu_j u_j^(L-2)`` at the start,
    whoever leads where the solve stops (docs/theory/regimes.md#blow-up-winner). The
    proof needs the log form ``d log u_j/dtau = x_j (1 - rho c x_j)^(L-1)`` with one ``c``
    for every coordinate, decaying fast enough at the blow-up (``int c x_w x_k dtau``
    finite): GD, l2-SAM and USAM declare it. False (the default, a rule of yours): the
    blow-up decides nothing (the leader at the solver's guard can still lose a race
    beyond it); the run is labelled only where ``fate`` decides it at the stop.

    ``fate_at_end`` (optional, same signature): the certificate at the end of a run only
    (the last state of a flow or of a discrete run taken to its fate), where it may add
    what is too costly to try at every check of a run (a solver step of a flow, each
    chunk of a discrete run's extension): every code :attr:`fate` gives, and more. A run
    it decides is labelled at its end, not stopped earlier.

    ``fate_in_step`` (optional, same signature): the certificate a flow's solver checks
    at every step (its stopping event) of a run taken to its fate, where it may leave out
    what costs more than the step itself: every code it gives, :attr:`fate` gives too. A
    run that only :attr:`fate` decides then goes on until ``fate_in_step`` decides it or
    the run ends, where :attr:`end_fate` is tried. Discrete runs check :attr:`fate` (once
    per chunk of steps).

    ``follows`` (optional, ``(y, mu, depth, rho, eta, attempt) -> (holds, winner,
    first)``): a certificate of the discrete step tried at a run's end only where
    ``attempt`` (the engine: the run is undecided by its path and :attr:`fate_at_end`), as
    ``TAKES_OVER`` with ``winner``; ``first`` who leads first from that state where proven
    (the major, or a minor that leads strictly before the major could), else 0 (it names
    the regime of a run that has seen no leader; docs/theory/regimes.md#vanishing-steps).

    ``collapse_in_step`` (optional, ``(s, mu, depth, rho) -> bool``): whether a collapse
    certificate of the flow holds at a state: all that the stopping event of a run *not*
    taken to its fate (no ``tau_cap``) asks at each step (a collapse edge counts only where
    one is proven). Default: :attr:`step_fate`'s code is ``COLLAPSE``.
    """

    formulation: str
    field: Callable[[Array, Array, tuple], Array]
    fate: Callable[..., tuple[Array, Array]] | None = None
    blowup_won_by_rate: bool = False
    fate_at_end: Callable[..., tuple[Array, Array]] | None = None
    fate_in_step: Callable[..., tuple[Array, Array]] | None = None
    collapse_in_step: Callable[..., Array] | None = None
    follows: Callable[..., tuple[Array, Array, Array]] | None = None

    @property
    def end_fate(self) -> Callable[..., tuple[Array, Array]] | None:
        """The certificate tried at a run's end: :attr:`fate_at_end`, else :attr:`fate`."""
        return self.fate if self.fate_at_end is None else self.fate_at_end

    @property
    def step_fate(self) -> Callable[..., tuple[Array, Array]] | None:
        """The certificate a flow's solver checks at every step: :attr:`fate_in_step`,
        else :attr:`fate`."""
        return self.fate if self.fate_in_step is None else self.fate_in_step

    @property
    def step_collapse(self) -> Callable[..., Array] | None:
        """Whether a collapse is proven at a state, as the stopping event of a run not
        taken to its fate checks it: :attr:`collapse_in_step`, else :attr:`step_fate`'s
        code is ``COLLAPSE``; None without a certificate."""
        if self.collapse_in_step is not None or self.step_fate is None:
            return self.collapse_in_step
        step_fate = self.step_fate

        def collapses(s, mu, depth, rho):
            return step_fate(s, mu, depth, rho)[0] == _fate.COLLAPSE

        return collapses

    def __post_init__(self) -> None:
        if not isinstance(self.blowup_won_by_rate, bool):
            raise InputError(
                "BalancedFlow: blowup_won_by_rate must be True or False, "
                f"got {self.blowup_won_by_rate!r}"
            )

    def state(self, u: Array) -> Array:
        """``u`` -> the solver's state ``y``."""
        return jnp.log(u) if self.formulation == "log" else u

    def u(self, y: Array) -> Array:
        """The solver's state ``y`` -> ``u``."""
        return jnp.exp(y) if self.formulation == "log" else y


def _log_form(
    log_c: Callable[[Array, Array, Array], Array],
    step_collapse: Callable[[Array, Array, Array], Array] | None = None,
    deep_collapse: Callable[[Array, Array, Array, Array], Array] | None = None,
    lead: Callable[..., tuple[Array, Array]] | None = None,
    finite: Callable[..., Array] | None = None,
    returns: tuple[Callable[..., Array], int] | None = None,
    blowup_won_by_rate: bool = False,
    empties: Callable[..., Array] | None = None,
    hands_on: Callable[..., Array] | None = None,
    follows: Callable[..., tuple[Array, Array, Array]] | None = None,
) -> BalancedFlow:
    """The log-space field of a rule whose perturbed point is ``w~ = u (1 - r)``.

    Derivation (docs/theory/flows.md#rescaled-flows): with ``m_j = mu_j u_j^(L-1)`` and
    ``eps = -c m`` (``c >= 0``), ``w~_j = u_j - rho c mu_j u_j^(L-1) = u_j (1 - r_j)``,
    ``r_j = rho mu_j u_j^(L-2) c``, so ``du_j/dtau = mu_j w~_j^(L-1)`` gives
    ``ds_j/dtau = mu_j u_j^(L-2) (1 - r_j)^(L-1)`` for ``s = log u``. ``log_c(log_mu,
    s, L)`` is the rule's ``log c``; every power is taken in log space.
    ``step_collapse(mu, rho, eta)``: where the discrete step keeps a shrinking run near
    0 (see ``fate``); None: never certified. ``deep_collapse(s, mu, L, rho)``: where the
    flow at even ``L >= 4`` provably collapses (see ``fate``); None: never certified there.
    ``lead(s, mu, L, rho, eta) -> (holds, winner, overtakes)``: a lead certificate at any
    ``L >= 2`` (docs/theory/regimes.md#lead-certificates-at-every-depth): where ``holds``,
    coordinate ``winner`` (1-based), once it leads, leads for ever, for the flow (``eta``
    None) or the discrete balanced step; where ``overtakes`` (used at L >= 3), the
    coordinate with the strictly largest rate variable ``x_j = mu_j u_j^(L-2)`` (the major
    where the major is ahead in rate) takes the lead within finite time, whoever leads
    now, and keeps the largest ``x`` (a minor one then stays ahead of the major ``a``:
    ``u_w / u_a = ((x_w / x_a) (mu_a / mu_w))^(1/(L-2)) > 1``)
    (docs/theory/regimes.md#takeover-at-every-depth); None: none beyond the region at L = 2.
    ``blowup_won_by_rate``: :attr:`BalancedFlow.blowup_won_by_rate`, for a ``log_c`` with
    which the proof of docs/theory/regimes.md#blow-up-winner holds.
    ``finite(s, mu, L, rho, eta)``: where the flow (``eta`` None) or the discrete step at
    ``L >= 3`` provably converges to a finite nonzero point
    (docs/theory/regimes.md#finite-limits-of-usam); None: never certified.
    ``returns``: ``(where, code)``: ``where(s, mu, L, rho, eta)`` says where the major at
    ``L >= 3`` provably leads for ever from some time on, as ``code``:
    :data:`samflow.fate.RETURNS` where, leading now, it also hands the lead on first
    (docs/theory/regimes.md#usam-returns), :data:`samflow.fate.WINS_LATER` where it may
    still lead and lose before (docs/theory/regimes.md#escape-past-the-fixed-point); None:
    never certified.
    ``empties(s, mu, rho, eta)``: where the flow (``eta`` None) or the discrete step at
    ``L = 2`` provably enters ``rho c mu_min > 1`` from the middle
    (docs/theory/regimes.md#middle-empties); None: never certified.
    ``hands_on(s, mu, L, rho, eta)``: where some minor provably leads strictly at a later
    time: where ``returns`` holds there, the code is :data:`samflow.fate.RETURNS` whatever
    ``returns``' own code (docs/theory/regimes.md#pinned-major); tried only at a run's end
    (:attr:`BalancedFlow.fate_at_end`: ``fate(..., at_end=True)``), a verified
    integration too costly for every check; None: never certified.
    ``follows(s, mu, L, rho, eta) -> (holds, winner, first)``: where the discrete step at
    ``L >= 3``, its steps small, provably follows its flow into a take-over certificate
    (docs/theory/regimes.md#vanishing-steps): TAKES_OVER, that winner, ``first`` who leads
    first from the state where proven (else 0); tried only at a discrete run's end where
    nothing else decides it; None: never certified.
    """

    def field(tau, s, args):
        mu, depth, rho = args
        log_mu = jnp.log(mu)
        # A static depth (a program for one depth) drops u^(L-2) = 1 at L = 2: a third of
        # the exponentials (the same numbers: adding 0, multiplying by 1).
        flat = isinstance(depth, int | np.integer) and depth == 2
        L = jnp.asarray(depth).astype(s.dtype)
        lift = 0.0 if flat else (L - 2) * s  # log u^(L-2)
        r = jnp.exp(jnp.log(rho) + log_mu + lift + log_c(log_mu, s, L))
        return mu * (1.0 if flat else jnp.exp(lift)) * signed_int_pow(1 - r, depth - 1)

    def fate(s, mu, depth, rho, eta=None, at_end=False, in_step=False, collapse_only=False):
        """Certificate of the log form (docs/theory/regimes.md#labels-of-the-limit), for the rules
        whose ``c`` does not grow while every coordinate grows (GD: ``c = 0``; l2-SAM:
        ``c = 1/||m||_2``; USAM: ``c = sigmoid(-z)``).

        L = 1: the field is ``mu`` whatever the perturbation, so the major, once it
        leads, leads for ever. L = 2: ``g_j = d log u_j / dtau = mu_j (1 - rho c mu_j)``,
        and ``g_j - g_k = (mu_j - mu_k) (1 - rho c (mu_j + mu_k))``. In the region
        ``rho c (a + b) < 1`` (``a``, ``b`` the two largest mu) every ``g_j > 0``, so
        every ``u_j`` grows, ``c`` does not grow, and the region is never left; in it
        the rates are ordered as mu, so ``u_major / u_j`` never falls: the major, once it
        leads, leads for ever. The discrete balanced step multiplies ``u_j`` by
        ``1 + h g_j`` (``h = eta |l'| <= eta``): with every ``g_j > 0`` the same argument
        holds for any step. More (docs/theory/regimes.md#takeover-certificate): with
        ``c <= c0`` (its value now), ``g_a - g_j >= delta_j = (mu_a - mu_j) (1 - rho c0 (a +
        b)) > 0``, so ``log(u_a / u_j)`` grows at least ``delta_j`` per unit of tau (flow) or
        by ``log(1 + h delta_j / (1 + eta a))`` per step, and the sum of ``h`` diverges (a
        finite sum would bound every ``u_j``, so ``z``, so ``h >= eta e^-Z / 2`` at every
        step): the major takes the lead within finite time: TAKES_OVER, winner the major.
        ``rho c mu_min > 1``: every ``g_j < 0``, every ``u_j`` falls, ``c`` does not
        fall, and the flow's beta tends to 0 (in finite time for l2-SAM): COLLAPSE; for
        the discrete step only where ``step_collapse`` proves it stays near 0. The same
        where ``empties`` proves the run enters ``rho c mu_min > 1`` within finite time
        (docs/theory/regimes.md#middle-empties).
        Even L >= 4: COLLAPSE where ``deep_collapse`` proves it, for the flow or the
        discrete step (docs/theory/regimes.md#collapse-certificates). Any L >= 2: LEADS
        where the rule's ``lead`` certificate holds
        (docs/theory/regimes.md#lead-certificates-at-every-depth; it excludes both
        collapse certificates); L >= 3: TAKES_OVER, winner the coordinate with the
        strictly largest rate variable (the major, or a minor one, which then stays ahead
        of the major for ever), where its take-over condition holds
        (docs/theory/regimes.md#takeover-at-every-depth).
        L >= 3: ``returns``' code (WINS_LATER or RETURNS), winner the major, where it
        proves the major leads for ever from some finite time on (WINS_LATER: not that it
        keeps its next lead, so the run's label is known only where the path already ends
        in a return, docs/theory/regimes.md#escape-past-the-fixed-point; RETURNS: and,
        leading now, it hands the lead on first, docs/theory/regimes.md#usam-returns;
        RETURNS also where ``hands_on`` proves a minor leads later,
        docs/theory/regimes.md#pinned-major).
        Otherwise OPEN (a blow-up decides).
        ``in_step``: at a step of a flow's solver (``empties`` left out);
        ``collapse_only``: the collapse certificates alone (OPEN or COLLAPSE, and what
        L = 1 and the region at L = 2 say).
        """
        L = jnp.asarray(depth).astype(s.dtype)
        c = jnp.exp(log_c(jnp.log(mu), s, L))
        top2 = jnp.sort(mu)[-2:] if mu.shape[0] > 1 else jnp.concatenate([mu, jnp.zeros(1)])
        region = rho * c * jnp.sum(top2) < 1
        shrink = rho * c * jnp.min(mu) > 1
        if empties is not None and not in_step:  # the middle empties into it (depth 2)
            # (a search of 60 halvings: not at each step of a flow, whose own steps cost
            # less; a run it decides goes on into rho c mu_min > 1, which decides it)
            shrink = shrink | empties(s, mu, rho, eta)
        if eta is not None:
            shrink = shrink & (False if step_collapse is None else step_collapse(mu, rho, eta))
        at_two = jnp.where(region, _fate.TAKES_OVER, jnp.where(shrink, _fate.COLLAPSE, _fate.OPEN))
        deep = jnp.zeros((), bool)
        if deep_collapse is not None:
            deep = (depth >= 4) & (depth % 2 == 0) & deep_collapse(s, mu, L, rho, eta)
        deeper = jnp.where(deep, _fate.COLLAPSE, _fate.OPEN)
        code = jnp.where(depth == 1, _fate.LEADS, jnp.where(depth == 2, at_two, deeper))
        winner = jnp.argmax(mu) + 1
        if collapse_only:  # what follows proves no collapse (and excludes none proven)
            return code.astype(jnp.int32), winner.astype(jnp.int32)
        if lead is not None:
            holds, leader, overtakes = lead(s, mu, L, rho, eta)
            # Where the region at L = 2 holds, both name the major (and TAKES_OVER says more).
            certified = (depth >= 2) & holds & (code != _fate.LEADS) & (code != _fate.TAKES_OVER)
            code = jnp.where(certified, _fate.LEADS, code)
            winner = jnp.where(certified, leader, winner)
            # L >= 3: the largest rate stays the largest, and its lead over each coordinate
            # ahead grows by a fixed share of its own log growth, which has no bound: it
            # takes the lead (docs/theory/regimes.md#takeover-at-every-depth). The major, or
            # a minor one, which stays ahead of the major (a larger x, a smaller mu).
            # At L = 2 (log x = log mu: the major) where the lead's middle certificate holds
            # (docs/theory/regimes.md#middle-at-depth-two).
            # A minor that leads already, certified by the lead certificate, stays LEADS
            # (GD's step certifies the largest rate whether it leads or not: a minor that
            # does not lead yet still takes over).
            top = jnp.argmax(_log_x(s, mu, L)) + 1
            leads_now = s[top - 1] >= jnp.max(s)
            kept = certified & (winner == top) & (top != _major(mu)) & leads_now
            taking = (depth >= 2) & overtakes & (code != _fate.COLLAPSE) & ~kept
            code = jnp.where(taking, _fate.TAKES_OVER, code)
            winner = jnp.where(taking, top, winner)
        if finite is not None:
            # L >= 3: every u_j grows to a point where every r_j = 1 (it excludes the
            # lead certificates: a winner keeps the largest x, which no such point has).
            converges = (depth >= 3) & (code == _fate.OPEN) & finite(s, mu, L, rho, eta)
            code = jnp.where(converges, _fate.FINITE, code)
        if returns is not None:
            # L >= 3: the major wins in the end (it excludes the lead certificates, which
            # keep the lead, and the finite limit); RETURNS: leading now, it loses it first.
            where, returns_code = returns
            back = (depth >= 3) & (code == _fate.OPEN) & where(s, mu, L, rho, eta)
            code = jnp.where(back, returns_code, code)
            odd = not isinstance(depth, int | np.integer) or (depth >= 3 and depth % 2 == 1)
            if hands_on is not None and at_end and odd:  # a static even depth: never
                # ... and a minor leads later: the major, leading now, hands the lead on first
                # (a verified integration of up to thousands of phases: at the run's end only)
                code = jnp.where(back & hands_on(s, mu, L, rho, eta), _fate.RETURNS, code)
            winner = jnp.where(back, _major(mu), winner)
        return code.astype(jnp.int32), winner.astype(jnp.int32)

    def fate_at_end(s, mu, depth, rho, eta=None):
        """:func:`fate` at a run's last state, ``hands_on`` included."""
        return fate(s, mu, depth, rho, eta, at_end=True)

    def fate_in_step(s, mu, depth, rho, eta=None):
        """:func:`fate` at a step of a flow's solver, ``empties`` left out."""
        return fate(s, mu, depth, rho, eta, in_step=True)

    def collapse_in_step(s, mu, depth, rho):
        """Whether :func:`fate` at a step of a flow's solver says collapse: its collapse
        certificates alone (the lead, finite and return certificates prove none, and the
        lead certificates hold in none of the collapse regions), ``empties`` left out."""
        code, _ = fate(s, mu, depth, rho, in_step=True, collapse_only=True)
        return code == _fate.COLLAPSE

    def follows_at_end(s, mu, depth, rho, eta, attempt):
        """``follows`` at a discrete run's end where ``attempt`` (its path decides nothing
        yet); nothing at a static depth below 3."""
        if isinstance(depth, int | np.integer) and depth < 3:
            return jnp.zeros((), bool), _major(mu).astype(jnp.int32), jnp.zeros((), jnp.int32)
        holds, taker, first = follows(s, mu, depth, rho, eta, attempt=attempt)
        return (depth >= 3) & holds, taker, first

    at_end = None if hands_on is None else fate_at_end
    in_step = None if empties is None else fate_in_step
    verified = None if follows is None else follows_at_end
    return BalancedFlow(
        "log", field, fate, blowup_won_by_rate, at_end, in_step, collapse_in_step, verified
    )


def _gd_log_c(log_mu, s, L):
    return jnp.full((), -jnp.inf, s.dtype)  # c = 0: no perturbation


def _l2_log_c(log_mu, s, L):
    # c = 1 / ||m||_2, ||m||_2^2 = L sum_k mu_k^2 u_k^(2L-2), by logsumexp.
    return -0.5 * (jnp.log(L) + jax.nn.logsumexp(2 * log_mu + 2 * (L - 1) * s))


def _log_x(s, mu, L):
    """``log x_j = log mu_j + (L - 2) s_j``, the rate variables ``x_j = mu_j u_j^(L-2)`` in
    logs (``s = log |u|``)."""
    return jnp.log(mu) + (L - 2) * s


def _major(mu):
    """The major's 1-based index (the largest mu): the winner of every lead certificate
    below but GD's flow at L >= 3."""
    return jnp.argmax(mu) + 1


def _ahead_in_rate(s, mu, L):
    """Whether the major ``a`` has the largest rate variable, ``x_k < x_a`` for every
    ``k != a`` (``x_j = mu_j u_j^(L-2)``, compared in logs): the first condition of the
    take-over at every depth (docs/theory/regimes.md#takeover-at-every-depth)."""
    a = jnp.argmax(mu)
    log_x = _log_x(s, mu, L)
    others = jnp.arange(mu.shape[0]) != a
    return jnp.all(~others | (log_x < log_x[a]))


def _gd_lead(s, mu, L, rho, eta=None):
    """GD's lead certificate at every depth
    (docs/theory/regimes.md#lead-certificates-at-every-depth).

    ``d log u_j/dtau = x_j = mu_j u_j^(L-2)``. Discrete step: ``u_j' = u_j (1 + h x_j)``,
    ``h > 0``: every factor is at least 1 and ordered as ``x``, and the order of ``x``
    follows that of ``u`` (``x_w / x_j = (mu_w / mu_j) (u_w / u_j)^(L-2)``), so the
    coordinate ``w`` with the largest ``x``, once it leads, leads for ever (the major
    wherever the major leads, as ``x_major >= x_j`` there; where no one ``x`` is largest,
    the major's lead still holds). Flow at L >= 3: the path is closed form,
    ``u_j^-(L-2) = u_j(t)^-(L-2) - (L-2) mu_j (tau - t)``, lines in tau that reach 0 at
    ``T_j = u_j^-(L-2) / ((L-2) mu_j)`` (the blow-up of ``u_j``); the leader is the line
    lowest, and a coordinate ``w`` with the first ``T_w`` (ties: the smaller mu, whose
    line is lower before ``T_w``), once lowest, stays lowest up to ``T_w`` (two lines cross
    once): the winner is ``argmin T_j``. At L = 2 the region of ``fate`` holds (c = 0).

    Take-over (third value, L >= 3): where one coordinate ``w`` has the strictly largest
    ``x`` (the major or a minor one), for the step by the argument of
    docs/theory/regimes.md#takeover-at-every-depth with ``c = 0``, ``kappa = 1``; for the
    flow ``w`` is the winner (its line reaches 0 first, so it is the lowest before it does).
    """
    if eta is not None:
        # The winner: the coordinate with the largest x, where it is the only one (the
        # major wherever the major leads; else the major, which leads for ever once it leads).
        log_x = _log_x(s, mu, L)
        top = jnp.argmax(log_x)
        only = jnp.sum(log_x == log_x[top]) == 1
        winner = jnp.where(only, top + 1, _major(mu))
        return jnp.ones((), bool), winner, (L >= 3) & only
    key = -(L - 2) * s - jnp.log(mu)  # log T_j + log(L - 2)
    first = key == jnp.min(key)
    winner = jnp.argmin(jnp.where(first, mu, jnp.inf)) + 1
    only = jnp.sum(first) == 1  # the winner is the one largest x
    return L >= 3, jnp.where(L >= 3, winner, _major(mu)), (L >= 3) & only


def _l2_lead(s, mu, L, rho, eta=None):
    """l2-SAM's lead certificate at every depth
    (docs/theory/regimes.md#lead-certificates-at-every-depth): the leader ``w`` has the
    largest rate variable (``x_w >= x_j``, ``x_j = mu_j u_j^(L-2)``; the major wherever the
    major leads) and ``u_w >= sqrt(L) rho``. With ``M = ||m||_2 / rho``, ``d log u_j/dtau =
    F(x_j) = x_j (1 - x_j/M)^(L-1)``, increasing on ``[0, M/L]``; and ``||m||_2 >= sqrt(L)
    mu_w u_w^(L-1)`` gives ``x_w <= M/L`` there, so ``F(x_w) >= F(x_j) >= 0``: ``u_w / |u_j|``,
    hence ``x_w / x_j``, does not fall, ``u_w`` does not fall, and the lead and the bound never
    break (for the discrete step ``u_j' = u_j (1 + h F(x_j))`` too: every factor is in ``[1, 1
    + h F(x_w)]``). The winner is ``w``, a minor coordinate where one leads with the largest
    rate. Below the bound, at L >= 3, where :func:`_l2_shares_kept` holds for ``w``.
    Take-over (third value, L >= 3), by the coordinate ``t`` with the strictly largest rate
    (the major, or a minor one: docs/theory/regimes.md#minor-winner): ``x_k < x_t`` for
    every other ``k`` and ``u_t > sqrt(L) rho`` or :func:`_l2_shares_kept` for ``t``, whoever
    leads (docs/theory/regimes.md#takeover-at-every-depth), or :func:`_l2_region_outlasts`
    for ``t`` (docs/theory/regimes.md#region-outlasts); or, at odd L,
    :func:`_l2_past_fixed_point` with the leader past the crossing bound,
    :func:`_l2_lead_kept_past` (docs/theory/regimes.md#escape-past-the-fixed-point,
    #crossing-bound). At L = 2 the third value is
    :func:`_l2_middle` (docs/theory/regimes.md#middle-at-depth-two). Compared in logs."""
    log_x = _log_x(s, mu, L)
    # The leader; among coordinates tied at the top, the one with the largest rate (the
    # major where it is among them), which the exact first step puts strictly ahead.
    at_top = s == jnp.max(s)
    w = jnp.argmax(jnp.where(at_top, log_x, -jnp.inf))
    fastest = jnp.all(log_x <= log_x[w])
    bound = jnp.log(rho) + 0.5 * jnp.log(L)
    leads = (fastest & (s[w] >= bound)) | _l2_shares_kept(s, mu, L, rho, w)
    leads = leads | _l2_race_to_bound(s, mu, L, rho, w, eta)
    # The take-over's coordinate: the strictly largest rate, the major or a minor one
    # (docs/theory/regimes.md#minor-winner: it keeps u above the major's for ever).
    top = jnp.argmax(log_x)
    ahead = jnp.all((jnp.arange(mu.shape[0]) == top) | (log_x < log_x[top]))
    gap = s[top] - bound
    shares = _l2_shares_kept(s, mu, L, rho, top)
    # Odd L: the major escapes past the fixed point, and the leader is past the crossing
    # bound: no minor can overtake the major at any lead it takes, so its first lead is
    # for good (docs/theory/regimes.md#escape-past-the-fixed-point, #crossing-bound).
    past = _l2_past_fixed_point(s, mu, L, rho, eta) & _l2_lead_kept_past(s, mu, L, rho, eta)
    deep = (L >= 3) & ((((gap > 0) | shares) & ahead) | past)
    deep = deep | _l2_region_outlasts(s, mu, L, rho, top)  # a race kept below R = 1
    return leads, w + 1, deep | ((L == 2) & _l2_middle(s, mu, rho, eta))


def _l2_middle(s, mu, rho, eta=None):
    r"""Where l2-SAM at L = 2, outside the region ``rho c (a + b) < 1``, provably enters it
    with the major not leading before (derived in docs/theory/regimes.md#middle-at-depth-two),
    for the flow (``eta`` None) or the discrete step. With ``K = ||m||_2 / rho``, ``d log
    u_j/dtau = g_j = mu_j (1 - mu_j / K)``, and ``K >= P_j = sqrt(2) mu_j u_j / rho``: a
    coordinate with ``u_j > rho / sqrt(2)`` (the set ``G``) has ``g_j > 0`` and never falls
    (each step factor ``1 + h g_j > 1``), so ``K >= K_lo = max_G P_j`` for ever; its growth
    rate is at least ``mu_j (1 - mu_j / P_j)`` now, so (the step's ``sum h`` diverges while
    ``K <= a + b`` bounds every ``u_k``) the region comes within finite time, where the major
    takes over. The major does not lead before it where (A) it is strictly behind ``b``
    (the second largest mu: ``g_a <= g_b`` outside the region; step: also ``(eta / 2) mu_a
    (mu_a / K_lo - 1) <= 1``, so that ``0 <= 1 + h g_a <= 1 + h g_b``, as ``h <= eta / 2``
    at L = 2, :func:`_h_max`), or (B) at any lead of the
    major the region holds: ``2 (mu_a^2 U^2 + sum_{G - a} mu_j^2 u_j^2) > (rho (a + b))^2``,
    ``U = max_G u_j`` (then ``u_a >= U`` and each ``u_j`` of ``G`` is at least its value
    now). Compared in logs (``s = log |u|``)."""
    log_mu, log_rho = jnp.log(mu), jnp.log(rho)
    half_log2 = 0.5 * jnp.log(2.0)
    a = jnp.argmax(mu)
    others = jnp.arange(mu.shape[0]) != a
    b = jnp.argmax(jnp.where(others, mu, -jnp.inf))
    grows = s > log_rho - half_log2  # u_j > rho / sqrt(2): never falls
    log_P = half_log2 + log_mu + s - log_rho  # log (sqrt(2) mu_j u_j / rho)
    log_K_lo = jnp.max(jnp.where(grows, log_P, -jnp.inf))
    top2 = jnp.sort(mu)[-2:] if mu.shape[0] > 1 else jnp.concatenate([mu, jnp.zeros(1)])
    log_ab = jnp.log(jnp.sum(top2))
    behind = others[b] & (mu[a] > mu[b]) & (s[a] < s[b])
    if eta is not None:  # h <= eta / 2: the major's factor stays nonnegative, below b's
        behind = behind & (_h_max(eta, 2) * mu[a] * (mu[a] * jnp.exp(-log_K_lo) - 1) <= 1)
    log_U = jnp.max(jnp.where(grows, s, -jnp.inf))
    log_rest = jnp.where(grows & others, 2 * (log_mu + s), -jnp.inf)
    log_sum = jax.nn.logsumexp(jnp.append(log_rest, 2 * (log_mu[a] + log_U)))
    at_lead = half_log2 + 0.5 * log_sum - log_rho > log_ab  # log K at the major's lead
    return jnp.any(grows) & (behind | at_lead)


def _l2_middle_empties(s, mu, rho, eta=None):
    r"""Where l2-SAM at L = 2, in the middle, provably enters the collapse region
    ``K < mu_min`` (``rho c mu_min > 1``) within finite time (derived in
    docs/theory/regimes.md#middle-empties), for the flow (``eta`` None) or the discrete
    step. With ``K = ||m||_2 / rho``, ``g_j = mu_j (1 - mu_j / K)`` rises with ``K``, so while
    ``K <= K0`` (its value now) ``g_j <= nu_j = mu_j (1 - mu_j / K0)``: after a rescaled time
    ``T`` (``sum h`` for the step, whose factors ``1 + h g_j`` lie in ``(0, e^(h nu_j)]``
    while ``K >= mu_min``, as ``(eta / 2) mu_max^2 < mu_min``, ``h <= eta / 2``,
    :func:`_h_max`) ``|u_j| <= |u_j(0)| e^(nu_j T)``, so ``K^2 <= Q(T) = sum_j P_j^2 e^(2 nu_j
    T)``, ``P_j = sqrt(2) mu_j u_j / rho``. ``Q`` is convex with ``Q(0) = K0^2``: where ``Q <
    mu_min^2`` on ``[T, T + eta / 2]`` (the flow: at ``T``), ``Q <= K0^2`` on ``[0, T + eta /
    2]``, the bound holds up to there, and the first step past ``T`` lands inside: ``K <
    mu_min``. ``T`` is the best place of the window (``log Q(T + eta / 2) = log Q(T)``; the
    flow: the minimum of ``log Q``), found by 60 halvings of ``[0, T_hi]``, past which the
    shrinking terms (``nu_j < 0``) add less than ``e^-50 mu_min^2``; any ``T`` is sound. A
    coordinate with ``u_j >= rho / sqrt(2)`` has ``nu_j >= 0`` and ``P_j >= mu_j``, so
    ``Q >= mu_min^2``: never where :func:`_l2_middle` holds. Compared in logs (``s = log
    |u|``)."""
    log_mu = jnp.log(mu)
    log_A = jnp.log(2.0) + 2 * (log_mu + s - jnp.log(rho))  # log P_j^2
    nu = mu * (1 - mu * jnp.exp(-0.5 * jax.nn.logsumexp(log_A)))  # mu_j (1 - mu_j / K0)
    log_floor = 2 * jnp.log(jnp.min(mu))
    window = 0.0 if eta is None else _h_max(eta, 2)

    def excess(T):  # log Q(T) - log mu_min^2
        return jax.nn.logsumexp(log_A + 2 * nu * T) - log_floor

    def past_best(T):  # the window [T, T + eta / 2] (the flow: T) is at or past its best
        if eta is None:
            return jnp.sum(nu * jax.nn.softmax(log_A + 2 * nu * T)) >= 0
        return excess(T + window) >= excess(T)

    falls = nu < 0
    slowest = jnp.min(jnp.where(falls, -nu, jnp.inf))
    far = jnp.maximum(excess(0.0) + jnp.log(mu.shape[0]) + 50.0, 0.0)
    T_hi = jnp.where(jnp.any(falls), far / (2 * jnp.where(falls.any(), slowest, 1.0)), 0.0)

    def halve(_, bracket):  # past_best(hi) or hi = T_hi; not past_best(lo) or lo = 0
        lo, hi = bracket
        mid = 0.5 * (lo + hi)
        past = past_best(mid)
        return jnp.where(past, lo, mid), jnp.where(past, mid, hi)

    lo, hi = jax.lax.fori_loop(0, 60, halve, (jnp.zeros_like(T_hi), T_hi))
    empties = jnp.zeros((), bool)
    for T in (lo, hi):
        empties = empties | ((excess(T) < 0) & (excess(T + window) < 0))
    if eta is not None:  # every factor positive while K >= mu_min
        empties = empties & (_h_max(eta, 2) * jnp.max(mu) ** 2 < jnp.min(mu))
    return empties


def _l2_race_to_bound(s, mu, L, rho, w, eta=None):
    r"""Where the leader ``w`` of l2-SAM (L >= 3), below ``u_w = B = sqrt(L) rho``, provably
    reaches that bound still leading with the largest rate
    (docs/theory/regimes.md#lead-certificates-at-every-depth, *race to the bound*), for the
    flow (``eta`` None) or the discrete step. While ``w`` leads with the largest rate
    (``x_w >= x_k``, ``x_j = mu_j u_j^n``, ``n = L - 2``), ``r_k = rho c x_k <= r_w <= b /
    u_w`` (``b = rho / sqrt(L)``), so every ``F(x_k)`` lies in ``[0, x_k]`` and ``F(x_w) >=
    mu_w (u_w - b)^(L-1) / u_w``: in ``tau`` (the sum of ``h <= _h_max(eta, L)`` for the
    step) ``|u_k|^-n >= |u_k(0)|^-n - n mu_k tau`` and ``(u_w - b)^-n <= P(tau) = (u_w(0) -
    b)^-n - a tau``, ``a = n mu_w sigma``, ``sigma = 1 / (1 + n h_max mu_w (B - b)^n)`` (1
    for the flow): lines. With ``q = P^(1/n)``, ``u_w^-n <= (q / (1 + b q))^n``, and ``w``
    keeps both conditions while, for every ``k != w``, ``phi_k(q) = m_k (|u_k(0)|^-n - n mu_k
    tau) - (q / (1 + b q))^n > 0`` (``m_k = min(1, mu_w / mu_k)``, ``tau = (P(0) - q^n) /
    a``) for ``q`` from ``P(T* + h_max)^(1/n)`` (0 where that is negative: a step cannot get
    there) to ``P(0)^(1/n)``, ``T*`` where ``u_w``'s bound reaches ``B``. ``phi_k`` is ``m_k
    |u_k(0)|^-n - m_k n mu_k P(0) / a`` plus ``beta_k q^n - (q / (1 + b q))^n``, ``beta_k =
    m_k n mu_k / a``, whose derivative is ``n q^(n-1) (beta_k - (1 + b q)^-(n+1))``: it falls
    then rises, so its least value on the interval is at ``q_c = (beta_k^(-1/(n+1)) - 1) /
    b`` held to the interval, checked there (exactly; a margin of ``1e-9`` of ``m_k
    |u_k(0)|^-n`` for rounding). Then ``u_w`` reaches ``B`` ahead, where the lead
    certificate holds."""
    Lp = jnp.maximum(L, 3.0)  # the lines are for L >= 3 (L = 2 masked below)
    n = Lp - 2
    b = rho / jnp.sqrt(Lp)
    B = rho * jnp.sqrt(Lp)
    above = s[w] > jnp.log(b)
    v0 = jnp.where(above, jnp.exp(s[w]) - b, 1.0)  # u_w - b
    h_max = 0.0 if eta is None else _h_max(eta, L)
    sigma = 1 / (1 + n * h_max * mu[w] * (B - b) ** n)
    a = n * mu[w] * sigma
    P0 = v0**-n
    P_low = (B - b) ** -n - a * h_max  # P at T* + h_max
    q_lo, q_hi = jnp.maximum(P_low, 0.0) ** (1 / n), 1 / v0
    A = jnp.exp(-n * s)  # |u_k|^-n now
    m = jnp.minimum(1.0, mu[w] / mu)
    beta = m * n * mu / a
    q_c = (beta ** (-1 / (n + 1)) - 1) / b
    q = jnp.clip(q_c, q_lo, q_hi)
    tau = (P0 - q**n) / a
    phi = m * (A - n * mu * tau) - (q / (1 + b * q)) ** n
    others = jnp.arange(mu.shape[0]) != w
    ok = jnp.all(~others | (phi > 1e-9 * m * A))
    return (L >= 3) & above & ok


def _l2_shares_kept(s, mu, L, rho, a=None):
    r"""Where l2-SAM's region ``R = L rho c x_a < 1`` is kept for ever below ``u_a =
    sqrt(L) rho`` (L >= 3; docs/theory/regimes.md#takeover-at-every-depth, *shares*): ``a``
    (the major by default; any coordinate, as the argument never uses that its mu is the
    largest) ahead in rate (``q_k = x_k / x_a < 1``), ``R < 1``, and ``sum_{k != a} r_k
    g(q_k) <= 1 / (L - 1)``, ``r_k = (q_k u_k / u_a)^2``, ``g(q) = 1 - q`` for ``q <=
    p / (p + 1)``, else ``(p / (q (p + 1)))^p / (p + 1)``, ``p = 2 (L - 1) / (L - 2)``.
    Compared in logs."""
    a = jnp.argmax(mu) if a is None else a
    log_mu = jnp.log(mu)
    Lp = jnp.maximum(L, 3.0)  # p is finite at L >= 3 only (L = 2 masked below)
    log_x = log_mu + (Lp - 2) * s
    log_q = log_x - log_x[a]
    others = jnp.arange(mu.shape[0]) != a
    log_R = jnp.log(Lp) + jnp.log(rho) + _l2_log_c(log_mu, s, Lp) + log_x[a]
    p = 2 * (Lp - 1) / (Lp - 2)
    q = jnp.exp(jnp.minimum(log_q, 0.0))
    near = q > p / (p + 1)
    log_g = jnp.where(
        near,
        p * (jnp.log(p) - jnp.log(p + 1) - jnp.minimum(log_q, 0.0)) - jnp.log(p + 1),
        jnp.log1p(-jnp.where(near, 0.0, q)),
    )
    log_r = 2 * (log_q + s - s[a])
    total = jnp.sum(jnp.where(others, jnp.exp(log_r + log_g), 0.0))
    ahead = jnp.all(~others | (log_q < 0))
    return (L >= 3) & ahead & (log_R < 0) & (total <= 1 / (Lp - 1))


def _l2_lead_kept_past(s, mu, L, rho, eta=None):
    r"""Where, at odd ``L >= 3``, no minor ``k`` can take the lead from l2-SAM's major ``a``
    at any lead the major takes from now on (derived in
    docs/theory/regimes.md#crossing-bound): the leader past the *crossing bound*. With
    ``B = sqrt(L) rho``, ``g(y) = y (1 - y)^(L-1)`` (``d log u_j/dtau = g(y_j) / (rho c)``,
    ``y_j = rho c x_j``) and ``q_k = mu_k / mu_a < 1``, ``y*(q_k) = (1 - t) / (1 - t q_k)``,
    ``t = q_k^(1/(L-1))``, is the root of ``g(y) = g(q_k y)`` above 0: below it ``F_c(x_a) >
    F_c(q_k x_a)``. No ``u_j`` falls at odd L, so at any lead of the major ``u_a = U >= M =
    max_j u_j`` (now), every ``u_j`` is at least its value now, and while ``log(u_a / u_k)
    <= d_k``, ``y_a <= Y_k(U) = (B / L) mu_a U^n / sqrt(A_k U^(2L-2) + C_k)``, ``A_k = mu_a^2
    (1 + q_k^2 e^(-2 (L-1) d_k))``, ``C_k = sum_{j != a, k} mu_j^2 u_j^(2L-2)`` (now), ``n = L
    - 2``; ``Y_k`` rises up to ``A_k U^(2L-2) = n C_k`` and falls after, so its sup over ``U
    >= M`` is at the larger of the two. Where that sup is below ``y*(q_k)`` for every minor
    ``k`` (and ``M > B / L``), the flow's crossing (``d_k = 0``) has ``log(u_a / u_k)``
    rising and a step keeps ``u_a' > u_k'``. Step: ``d_k = log(1 + E (1 + E)^-n)``, ``E =
    eta mu_k B^n``, beyond which a step of ``k`` (at most ``eta mu_k B^n e^(-n d_k)`` in log
    while ``u_a <= B``, with the step condition of :func:`_l2_past_fixed_point`) cannot
    cover the gap; ``d_k = 0`` for the flow (``eta`` None). Coordinates with ``mu_k = mu_a``
    are exempt (ahead in rate, they stay behind in ``u``). Compared in logs."""
    Lp = jnp.maximum(L, 3.0)  # the argument is for odd L >= 3 (masked by the caller)
    n = Lp - 2
    log_mu = jnp.log(mu)
    a = jnp.argmax(mu)
    idx = jnp.arange(mu.shape[0])
    log_q = jnp.minimum(log_mu - log_mu[a], 0.0)
    minor = (idx != a) & (log_q < 0)
    log_q = jnp.where(minor, log_q, -1.0)  # finite where exempt (masked below)
    log_t = log_q / (Lp - 1)
    log_y_star = jnp.log(-jnp.expm1(log_t)) - jnp.log(-jnp.expm1(log_t + log_q))
    log_b = jnp.log(rho) - 0.5 * jnp.log(Lp)  # log (B / L)
    if eta is None:
        d = jnp.zeros_like(log_q)
    else:
        E = jnp.exp(jnp.log(eta) + log_mu + n * (log_b + jnp.log(Lp)))  # eta mu_k B^n
        d = jnp.log1p(jnp.exp(jnp.log(E) - n * jnp.log1p(E)))
    log_A = 2 * log_mu[a] + jnp.log1p(jnp.exp(2 * log_q - 2 * (Lp - 1) * d))  # per k
    # log C_k: the others (neither a nor k) at their values now; -inf where there are none
    terms = 2 * log_mu + 2 * (Lp - 1) * s
    rest = (idx[None, :] != a) & (idx[None, :] != idx[:, None])  # [k, j]
    log_C = jax.nn.logsumexp(jnp.where(rest, terms[None, :], -jnp.inf), axis=1)
    top = jnp.max(s)
    log_U = jnp.maximum(top, (jnp.log(n) + log_C - log_A) / (2 * Lp - 2))  # the sup's U
    log_Y = log_b + log_mu[a] + n * log_U - 0.5 * jnp.logaddexp(log_A + (2 * Lp - 2) * log_U, log_C)
    return (top > log_b) & jnp.all(~minor | (log_Y < log_y_star))


def _l2_region_outlasts(s, mu, L, rho, a, grid=64):
    r"""Where l2-SAM's region ``R = L rho c x_a < 1`` provably holds for ever, with a bound
    ``theta < 1`` (L >= 3, any parity; flow and the discrete step at any ``eta``; derived in
    docs/theory/regimes.md#region-outlasts): ``a`` strictly ahead in rate (``q_k = x_k / x_a
    < 1``, ``x_j = mu_j u_j^(L-2)``) and, with ``v_k = q_k |u_k|`` (``v_a = u_a``), ``B =
    sqrt(L) rho``, ``n = L - 2``, ``p = 2 (L - 1) / n``,

    ``Phi(r) = r^2 (u_a^2 + sum_{k != a} v_k^2 (q_k + (1 - q_k) r^n)^-p) > B^2`` for every
    ``r >= 1``

    (``R = B / ||v||``, and while ``R < 1`` the growth ``r = u_a(t) / u_a`` bounds ``||v||^2``
    below by ``Phi(r)``). ``Phi / r^2`` falls in ``r``, so on a geometric grid ``r_0 = 1 <
    ... < r_N = max(1, 2 B / u_a)`` the check ``r_i^2 (Phi / r^2)(r_(i+1)) > B^2`` covers each
    cell, and past ``r_N`` ``Phi >= 4 B^2``: a rigorous test, not a sample. Nothing uses that
    ``mu_a`` is the largest. ``s = log |u|``; the cells' sums are taken in linear space."""
    Lp = jnp.maximum(L, 3.0)  # the argument is for L >= 3 (L = 2 masked below)
    n = Lp - 2
    p = 2 * (Lp - 1) / n
    log_B = jnp.log(rho) + 0.5 * jnp.log(Lp)
    log_q = jnp.log(mu) + n * s - (jnp.log(mu[a]) + n * s[a])
    others = jnp.arange(mu.shape[0]) != a
    ahead = jnp.all(~others | (log_q < 0))
    q = jnp.exp(jnp.where(others, jnp.minimum(log_q, 0.0), -1.0))  # a masked: q < 1 there
    log_v2 = 2 * (log_q + s - log_B)  # log (v_k / B)^2
    log_end = jnp.maximum(0.0, jnp.log(2.0) + log_B - s[a])
    log_r = log_end * jnp.arange(grid + 1) / grid  # [grid + 1]

    # Phi(r) / (r B)^2 at each cell's right end, summed in linear space: E_k = q_k + (1 -
    # q_k) r^n >= 1, so E_k^-p lies in (0, 1]; an overflow (a v_k or u_a far above B) only
    # makes the sum infinite where it is huge, and an inf * 0 (NaN) fails the check. Two
    # transcendentals per coordinate and cell, against five for the same sum in logs
    # (which took most of a flow step's time at L = 3 where runs are taken to their fate).
    t = jnp.exp(n * log_r[1:])  # r^n [grid]
    E = q[:, None] + (1 - q[:, None]) * t  # [d, grid]
    w = jnp.where(others, jnp.exp(log_v2), 0.0)  # (v_k / B)^2, a masked
    rest = jnp.exp(2 * (s[a] - log_B)) + jnp.sum(w[:, None] * jnp.exp(-p * jnp.log(E)), axis=0)
    cells = rest * jnp.exp(2 * log_r[:-1])  # each cell's lower bound of Phi / B^2
    return (L >= 3) & ahead & jnp.all(cells > 1)


def _l2_past_fixed_point(s, mu, L, rho, eta=None):
    r"""Where the major of l2-SAM at odd ``L >= 3`` provably leads for ever from some
    finite time on (derived in docs/theory/regimes.md#escape-past-the-fixed-point): the
    major ``a`` strictly ahead in rate (``x_k < x_a``), some ``u_j`` above the fixed point
    ``u*`` (every ``r_j = 1``: ``u*_j = (X / mu_j)^(1/n)``, ``n = L - 2``, ``||u*||_2 = rho /
    sqrt(L)``), and for the step ``n eta x_bar ((L-2)/L)^(L-2) < 1``, ``x_bar = mu_a
    (sqrt(L) rho)^n``, which keeps the order of ``x`` at every step while ``u_a <= sqrt(L)
    rho``. At odd L no ``u_j`` falls; a run whose ``u_a`` stayed below ``sqrt(L) rho``
    would be bounded, so would converge to a point where every step factor is 1, which is
    ``u*``, out of reach from above it. So ``u_a`` passes ``sqrt(L) rho`` ahead in rate,
    where the take-over of docs/theory/regimes.md#takeover-at-every-depth holds. Compared
    in logs (``s = log u``)."""
    Lp = jnp.maximum(L, 3.0)  # the argument is for odd L >= 3 (the rest masked below)
    n = Lp - 2
    log_mu, log_rho = jnp.log(mu), jnp.log(rho)
    # log u*_j = log rho - log(L)/2 - log(sum_k mu_k^(-2/n))/2 - log(mu_j)/n
    log_u_star = log_rho - 0.5 * jnp.log(Lp) - 0.5 * jax.nn.logsumexp(-2 * log_mu / n) - log_mu / n
    # above u* by more than rounding: at u* itself nothing moves
    above = jnp.any(s > log_u_star + 1e-10)
    odd = (jnp.round(L) % 2 == 1) & (L >= 3)
    ok = odd & above & _ahead_in_rate(s, mu, Lp)
    if eta is None:
        return ok
    log_x_bar = jnp.log(jnp.max(mu)) + n * (log_rho + 0.5 * jnp.log(Lp))
    log_kink = n * (jnp.log(n) - jnp.log(Lp))  # log ((L-2)/L)^(L-2)
    return ok & (jnp.log(n) + jnp.log(eta) + log_x_bar + log_kink < 0)


def _l2_hands_on(s, mu, L, rho, eta=None, phases=2048, gamma=0.004):
    r"""Where, at odd ``L >= 3``, some minor of l2-SAM provably leads strictly within finite
    time (derived in docs/theory/regimes.md#pinned-major): a verified box integration of the
    balanced flow (``eta`` None) or step. With ``b = B / L = rho / sqrt(L)``, ``n = L - 2``,
    ``y_j = rho c x_j = b mu_j u_j^n / sqrt(mu_j^2 u_j^(2L-2) + C_j)``, ``C_j = sum_{l != j}
    mu_l^2 u_l^(2L-2)``: ``d u_j^-n / dtau = -n mu_j (1 - y_j)^(L-1)``, no ``u_j`` falls (odd
    L), and ``y_j`` as a function of ``u_j`` rises up to ``mu_j^2 u_j^(2L-2) = n C_j`` and
    falls after, so a box bounds every factor ``k_j = (1 - y_j)^(L-1)`` from both sides. An
    upper and a lower trajectory per coordinate (comparison: each one's rate is bounded at
    its own value, the others anywhere in the box; for the step, whose map ``u (1 + h F)``
    is increasing under the escape's step condition, by Bernoulli, ``1 - n e <= (1 +
    e)^-n <= 1 / (1 + n e)``) are advanced in phases of ``Delta`` in tau (a sum of step
    sizes ``h <= eta``); each phase guesses the box's top and holds where the upper
    trajectory stays inside it (the first state to leave it would contradict the bounds
    before it); the steps' overshoots of the phases' ends telescope, costing ``eta`` times
    the rates' variation. Where some minor's lower trajectory passes the major's upper one
    at a phase's end, that minor leads there. Tried only where the major leads now,
    strictly ahead in rate, and is pinned (``|y_a - 1| <= 0.1``); ``phases`` and ``gamma``
    (each phase's share of the fastest coordinate's ``u^-n``) bound its cost and set its
    reach. Compared in logs (``s = log u``); ``L`` is taken as at least 3 (the caller masks
    the rest)."""
    Lp = jnp.maximum(L, 3.0)
    n = Lp - 2
    log_mu = jnp.log(mu)
    log_b = jnp.log(rho) - 0.5 * jnp.log(Lp)
    a = jnp.argmax(mu)
    idx = jnp.arange(mu.shape[0])
    others = idx[None, :] != idx[:, None]  # [j, l]
    step = 0.0 if eta is None else eta

    def log_y(log_u, log_C):  # log y_j at u_j = e^log_u, the others' sum C_j
        return (
            log_b
            + log_mu
            + n * log_u
            - 0.5 * jnp.logaddexp(2 * log_mu + (2 * Lp - 2) * log_u, log_C)
        )

    def factors(log_p, log_r, log_lo, log_hi):
        # bounds of (1 - y_j)^(L-1) with u_j in [p_j, r_j], every other u_l in [lo_l, hi_l]
        P_lo, P_hi = 2 * log_mu + (2 * Lp - 2) * log_lo, 2 * log_mu + (2 * Lp - 2) * log_hi
        C_lo = jax.nn.logsumexp(jnp.where(others, P_lo[None, :], -jnp.inf), axis=1)
        C_hi = jax.nn.logsumexp(jnp.where(others, P_hi[None, :], -jnp.inf), axis=1)
        peak = (jnp.log(n) + C_lo - 2 * log_mu) / (2 * Lp - 2)
        y_hi = jnp.exp(log_y(jnp.clip(peak, log_p, log_r), C_lo))
        y_lo = jnp.exp(jnp.minimum(log_y(log_p, C_hi), log_y(log_r, C_hi)))
        far, near = jnp.abs(1 - y_lo), jnp.abs(1 - y_hi)
        k_hi = jnp.maximum(far, near) ** (Lp - 1)
        k_lo = jnp.where((y_lo <= 1) & (y_hi >= 1), 0.0, jnp.minimum(far, near) ** (Lp - 1))
        return k_lo, k_hi

    def log_u(A):  # u from u^-n (A <= 0: past a blow-up)
        return jnp.where(A > 0, -jnp.log(jnp.where(A > 0, A, 1.0)) / n, jnp.inf)

    def phase(carry):
        # u^-n bounds at the phase's first state t_i (tau_(t_i) = T_i + e_i, 0 <= e_i < eta):
        # of the upper trajectory, from Vl down to S = V - n mu k_prev eta; of the lower one,
        # from Wf - n mu kl_prev eta up to W (each sum over phases drops only the e_i terms
        # that telescope: derived in docs/theory/regimes.md#pinned-major)
        V, Vl, W, Wf, k_prev, kl_prev, alive, led, i = carry
        S = V - n * mu * k_prev * step
        log_from, log_lo = log_u(Vl), log_u(W)
        # Delta: the fastest coordinate's u^-n falls by gamma of itself at its last rate
        delta = gamma * jnp.min(S / (n * mu * jnp.maximum(k_prev, 1e-300)))

        def guess(k):  # the box's top where u^-n falls at twice the rate k
            return log_u(S - 2 * n * mu * k * delta)

        log_guess = guess(k_prev)
        for _ in range(3):  # refine the guess from its own rates (only the last is checked)
            log_guess = guess(factors(log_from, log_guess, log_lo, log_guess)[1])
        # the upper trajectory: its own value in [from, guess], the others in the box
        k_hi = factors(log_from, log_guess, log_lo, log_guess)[1]
        top = S - n * mu * k_hi * delta
        # the lower one: its own value from W up to its far end at the box's fastest rate
        k_far = factors(log_lo, log_guess, log_lo, log_guess)[1]
        log_far = log_u(Wf - n * mu * (kl_prev * step + k_far * delta))
        k_lo = factors(log_lo, jnp.minimum(log_far, log_guess), log_lo, log_guess)[0]
        x_bar = jnp.exp(log_mu + n * log_guess) * k_hi
        kl = k_lo / (1 + n * step * x_bar)  # the lower rate per unit of tau
        ok_now = alive & ~led & jnp.all((top > 0) & (log_u(top) <= log_guess))
        V_new = jnp.minimum(V, V - n * mu * (k_hi * delta + step * jnp.maximum(k_prev - k_hi, 0)))
        Vl_new = jnp.minimum(
            Vl, Vl - n * mu * (k_hi * delta - step * jnp.maximum(k_hi - k_prev, 0))
        )
        W_new = jnp.minimum(W, W - n * mu * (kl * delta - step * jnp.maximum(kl - kl_prev, 0)))
        Wf_new = Wf - n * mu * (kl * delta + step * jnp.maximum(kl_prev - kl, 0))
        # at the next phase's first state: u_k >= W_new^(-1/n), u_a <= (V_new - n mu k eta)^(-1/n)
        log_top_a = log_u(V_new - n * mu * k_hi * step)[a]
        passed = (idx != a) & (log_u(W_new) > log_top_a)
        led_new = led | (ok_now & jnp.any(passed))
        # past L rho (above B = sqrt(L) rho) ahead of every minor, the major keeps the lead
        # (the lead certificate): stop, without a proof
        log_bottom_a = log_u(W_new)[a]
        kept = (log_bottom_a > log_b + 0.5 * jnp.log(Lp) + jnp.log(Lp)) & jnp.all(
            (idx == a) | (log_u(V_new - n * mu * k_hi * step) < log_bottom_a)
        )
        new = (V_new, Vl_new, W_new, Wf_new, k_hi, kl)
        keep = (V, Vl, W, Wf, k_prev, kl_prev)
        carry = tuple(jnp.where(ok_now, x, y) for x, y in zip(new, keep, strict=True))
        return (*carry, ok_now & ~led_new & ~kept, led_new, i + 1)

    # only where the major leads now, strictly ahead in rate (elsewhere the escape's code
    # names the run already, or nothing does); a batch loops while any state is alive
    start = (jnp.round(L) % 2 == 1) & (L >= 3) & (s[a] >= jnp.max(s)) & _ahead_in_rate(s, mu, Lp)
    # ... and pinned, |y_a - 1| <= 0.1 (the class this is for: elsewhere the loop seldom
    # ends in a proof, and a batch pays for its longest loop)
    log_y_a = jnp.log(rho) + log_mu[a] + n * s[a] + _l2_log_c(log_mu, s, Lp)
    start = start & (jnp.abs(jnp.expm1(log_y_a)) <= 0.1)
    A0 = jnp.exp(-n * s)
    _, k0 = factors(s, s, s, s)
    init = (A0, A0, A0, A0, k0, jnp.zeros_like(k0), start, jnp.zeros((), bool), 0)
    *_, led, _ = jax.lax.while_loop(lambda c: c[6] & (c[8] < phases), phase, init)
    return start & led


def _interval_pow(lo, hi, k):
    """The range of ``y^k`` for ``y`` in ``[lo, hi]`` (elementwise), ``k`` a traced
    nonnegative integer (:func:`signed_int_pow`)."""
    a, b = signed_int_pow(lo, k), signed_int_pow(hi, k)
    low, high = jnp.minimum(a, b), jnp.maximum(a, b)
    return jnp.where((k % 2 == 0) & (lo < 0) & (hi > 0), 0.0, low), high


def _interval_mul(a, b):
    """The range of a product of two intervals ``(low, high)`` (elementwise)."""
    p = jnp.stack([a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1]])
    return jnp.min(p, axis=0), jnp.max(p, axis=0)


FOLLOW_TRIES = (
    (1e-2, False, 2**15),
    (1e-7, True, 2**15),
    (1e-3, False, 2**17),
    (1.5e-9, True, 2**18),
)
"""The tries of :func:`_l2_follows`, in order: ``(tol, per_step, steps)``, the reference's
steps kept to ``H (|G|^2 + N |G|) <= tol`` (the bound's growth per unit of rescaled time)
or, ``per_step``, ``H^2 (|G|^2 + N |G|) <= tol`` (its growth per step: longer steps where
the field is steep, near a blow-up), for up to ``steps`` reference steps. Each is a proof
where it holds; a later one is tried where an earlier gave up. The third is the first
version's one budget, so every state that version decided is still decided; the fourth, a
fine budget per step, takes runs whose coordinates near their blow-up together."""


def _l2_follows(s, mu, L, rho, eta=None, tries=None, e_max=0.3, start_share=0.01, attempt=True):
    r"""Where the discrete l2-SAM step at ``L >= 3``, its steps small, provably follows its
    flow into the take-over certificate (derived in docs/theory/regimes.md#vanishing-steps):
    ``(holds, winner, first)``, the run's code then ``TAKES_OVER`` with that winner.

    In ``s = log u`` the step is ``s' = s + log(1 + h G(s))``, ``G`` the flow's field and
    ``h = eta sigmoid(-z~)`` its length in rescaled time: a variable-step Euler scheme of the
    flow. A coarse Euler run of the same field from the same state, steps ``H``, is a
    reference: both, drawn as polygons in ``tau``, solve ``sigma' = G(sigma) + delta``, and on
    a box ``D`` around the reference the distance ``e`` of the two obeys ``e' <= mu_D e +
    h_D (|G|^2 + 2 N |G|) + H (|G|^2 + N |G|)`` (per coarse step, integrated, the bound
    never let to shrink; plus the reference's rounding),
    ``mu_D`` a bound of the Jacobian's log-norm (infinity norm) on ``D``, ``N`` of its norm,
    ``|G|`` of the field, ``h_D`` of the step: interval bounds in closed form. A step is
    taken where the new bound stays inside the box it was computed on (else ``H`` halves),
    where ``h_D |G|, H |G| <= 1/2``, and where the try's ``tol`` holds. A coordinate ``k``
    is above ``j`` on a step where their gap exceeds what the two can be off by, or where
    ``k`` was not below ``j`` at the map's state and ``G_k > G_j`` on every box since (the
    map's gap rose at each of its steps: a start tied at the top parts by its rates). On
    each box, every coordinate ``t`` that could lead (none above it) must outpace
    every other such coordinate on the whole box (``G_t > G_k``), so a lead it takes is
    kept; where ``t`` is a minor, the major must never be able to lead. ``first``, who
    leads first: a minor alone able to lead on a box that holds a step of the map (``h_D
    <= H``), the major never able to before (it leads strictly there, so a minor leads
    first); where no minor could ever lead, the major; else 0 (not proven). It holds where a
    box has one coordinate ``t`` strictly largest in ``x`` and ``u_t > sqrt(L) rho`` (the
    take-over at every depth) with ``h_D <= H`` (a step lands there). A try gives up where
    the bound passes ``e_max``, where no coordinate is left that could still win (each lost
    a lead it could take, or, once the major could lead, the major did), or after its steps;
    the next then starts again from ``s`` (``tries``, :data:`FOLLOW_TRIES`). Tried only
    where the step now is at most ``start_share`` of ``eta`` (the runs whose steps have
    vanished) and ``attempt`` (the engine: where the run's path and certificates decide
    nothing); the flow (``eta`` None) never."""
    if eta is None:
        return jnp.zeros((), bool), _major(mu), jnp.zeros((), jnp.int32)
    dtype = s.dtype
    if isinstance(L, int | np.integer):  # a static depth: the powers' own multiplies only
        Lp = float(max(L, 3))
        k1 = max(int(L), 3) - 1  # L - 1
    else:
        Lp = jnp.maximum(L, 3.0)
        k1 = jnp.round(Lp).astype(jnp.int32) - 1
    n = Lp - 2
    log_mu = jnp.log(mu)
    idx = jnp.arange(mu.shape[0])
    rest = idx[None, :] != idx[:, None]
    a = jnp.argmax(mu)
    log_B = jnp.log(rho) + 0.5 * jnp.log(Lp)
    eps = jnp.finfo(dtype).eps

    def log_M(t):  # M = ||m||_2 / rho = 1 / (rho c), so q_j = x_j / M = rho c x_j
        return -_l2_log_c(log_mu, t, Lp) - jnp.log(rho)

    def field(t):
        log_x = _log_x(t, mu, Lp)
        return jnp.exp(log_x) * signed_int_pow(1 - jnp.exp(log_x - log_M(t)), k1)

    def step_now(t):
        q = jnp.exp(log_mu + n * t - log_M(t))
        z = jnp.sum(mu * signed_int_pow(jnp.exp(t) * (1 - q), k1 + 1))
        return eta * jax.nn.sigmoid(-z)

    def box(lo, hi):
        x0, x1 = jnp.exp(log_mu + n * lo), jnp.exp(log_mu + n * hi)
        m0, m1 = 2 * log_mu + 2 * (Lp - 1) * lo, 2 * log_mu + 2 * (Lp - 1) * hi
        C0 = jax.nn.logsumexp(jnp.where(rest, m0[None, :], -jnp.inf), axis=1)
        C1 = jax.nn.logsumexp(jnp.where(rest, m1[None, :], -jnp.inf), axis=1)
        w0, w1 = jax.nn.sigmoid(m0 - C1), jax.nn.sigmoid(m1 - C0)  # m_k^2 / ||m||^2
        q0 = jnp.exp(log_mu + n * lo - log_M(hi))
        q1 = jnp.exp(log_mu + n * hi - log_M(lo))
        one_q = (1 - q1, 1 - q0)
        G0, G1 = _interval_mul((x0, x1), _interval_pow(*one_q, k1))
        P = _interval_pow(*one_q, k1 - 1)
        A = jnp.maximum(jnp.abs(one_q[0]), jnp.abs(one_q[1]))
        B = (n - n * Lp * q1 + (Lp - 1) ** 2 * q0 * w0, n - n * Lp * q0 + (Lp - 1) ** 2 * q1 * w1)
        D0, D1 = _interval_mul(P, B)  # J_jj / x_j
        off = signed_int_pow(A, k1 - 1) * (Lp - 1) ** 2 * q1 * (1 - w0)  # sum |J_jk| / x_j
        Y = D1 + off
        log_norm = jnp.max(jnp.where(Y > 0, x1 * Y, x0 * Y))
        norm = jnp.max(x1 * (jnp.maximum(jnp.abs(D0), jnp.abs(D1)) + off))
        w_lo, w_hi = _interval_mul((jnp.exp(lo), jnp.exp(hi)), one_q)  # the perturbed point
        z_lo = jnp.sum(mu * _interval_pow(w_lo, w_hi, k1 + 1)[0])
        g = jnp.max(jnp.maximum(jnp.abs(G0), jnp.abs(G1)))
        slack = 1 + 1e-9  # the bounds' own rounding
        log_norm = log_norm + 1e-9 * jnp.abs(log_norm)
        return G0, G1, g * slack, log_norm, norm * slack, eta * jax.nn.sigmoid(-z_lo) * slack

    tries = FOLLOW_TRIES if tries is None else tries
    tol = jnp.asarray([t[0] for t in tries], dtype)
    per_step = jnp.asarray([t[1] for t in tries])
    steps = jnp.asarray([t[2] for t in tries])

    def advance(c):
        t, E, H, grow, kept, seen, ahead, first, minors, status, winner, i, k = c
        t1 = t + jnp.log1p(H * field(t))
        R = 1.5 * E + 1e-10
        # the box, widened by ``grow`` (guessed from the last box) to hold every step of
        # the map whose start it holds: checked below, 2 h_D |G| at most
        lo, hi = jnp.minimum(t, t1) - R - grow, jnp.maximum(t, t1) + R + grow
        G0, G1, g, log_norm, norm, h = box(lo, hi)
        need = 2 * h * g + 4 * eps * (1 + jnp.max(jnp.abs(t1)))
        spread = jnp.exp(jnp.maximum(log_norm * H, 0.0))
        K = g * g + norm * g
        # (the bound never shrinks: it then bounds the distance all along the step)
        E1 = spread * (E + H * (h * (K + norm * g) + H * K))
        # the reference's own rounding: a few ulps of the state and of the step's move
        E1 = (E1 + 4 * eps * (1 + jnp.max(jnp.abs(t1))) + 64 * eps * H * g) * (1 + 1e-9)
        within = jnp.where(per_step[k], H * H * K, H * K) <= tol[k]
        ok = (h * g <= 0.5) & (H * g <= 0.5) & (E1 <= R) & within & jnp.isfinite(E1)
        wide = need <= grow
        ok = ok & wide
        # k strictly above j over the step: the reference's gap at both ends (it is linear
        # in between) beyond what the two can be off by, 2 (R + grow) [j, k]
        margin = 2 * (R + grow)
        gap = jnp.minimum(t[None, :] - t[:, None], t1[None, :] - t1[:, None])
        # ... or not below j at the map's start and outpacing it on every box since: the
        # map's gap s_k - s_j then rose at each of its steps ([j, k] as above)
        ahead1 = ahead & (G0[None, :] > G1[:, None])
        above = rest & ((gap > margin) | ahead1)
        can = ~jnp.any(above, axis=1)  # who can lead during the step
        # ... and whether each keeps a lead it takes: it outpaces every other that can
        loses = jnp.any(can[None, :] & rest & ~(G0[:, None] > G1[None, :]), axis=1)
        kept1 = kept & ~(can & loses)
        seen1 = seen | can[a]
        # who leads first from the state: a minor alone able to lead on a step that
        # holds a step of the map after the state (h_D <= H), the major never able to
        # lead before (so a minor, this one or another, leads first); or, where no
        # minor could ever lead, the major
        alone = (jnp.sum(can) == 1) & ~can[a] & (h <= H) & ~seen1
        first1 = jnp.where((first == 0) & alone, jnp.argmax(can).astype(jnp.int32) + 1, first)
        minors1 = minors | jnp.any(can & (idx != a))
        top = jnp.argmax(log_mu + n * t1)
        x_gap = log_mu[top] - log_mu + n * jnp.minimum(t[top] - t, t1[top] - t1)
        strict = jnp.all((idx == top) | (x_gap > n * margin))
        holds = ok & strict & (lo[top] > log_B) & kept1[top] & ((top == a) | ~seen1) & (h <= H)
        kept1, seen1 = jnp.where(ok, kept1, kept), jnp.where(ok, seen1, seen)
        hopeless = ~jnp.any(kept1 & ((idx == a) | ~seen1))  # kept only falls, seen only rises
        failed = (ok & (E1 > e_max)) | (~ok & (H < 1e-280)) | (need > 0.01) | hopeless
        failed = failed | (i + 1 >= steps[k])
        status = jnp.where(holds, 1, jnp.where(failed, 2, 0))
        c = (
            jnp.where(ok, t1, t),
            jnp.where(ok, E1, E),
            jnp.where(ok, 1.25 * H, jnp.where(wide, 0.5 * H, H)),
            2 * need,
            kept1,
            seen1,
            jnp.where(ok, ahead1, ahead),
            jnp.where(ok, first1, first),
            jnp.where(ok, minors1, minors),
            status,
            jnp.where(holds, top + 1, winner),
            i + 1,
            k,
        )
        again = (status == 2) & (k + 1 < len(tries))  # the next try, from the start
        return jax.tree.map(lambda x, y: jnp.where(again, x, y), start_of(k + 1), c)

    g0 = jnp.max(jnp.abs(field(s)))
    start = attempt & (L >= 3) & (step_now(s) <= start_share * eta)
    start = start & jnp.all(jnp.isfinite(s)) & jnp.isfinite(g0)

    def start_of(k):  # a try's start
        return (
            s,
            jnp.zeros((), dtype),
            jnp.asarray(1e-3, dtype) / (1 + g0) ** 2,
            jnp.asarray(1e-9, dtype),
            jnp.ones(mu.shape, bool),
            jnp.zeros((), bool),
            rest & (s[None, :] >= s[:, None]),  # [j, k]: k not below j at the map's state
            jnp.zeros((), jnp.int32),
            jnp.zeros((), bool),
            jnp.where(start, 0, 2),
            _major(mu),
            jnp.zeros((), jnp.int32),
            jnp.asarray(k, jnp.int32),
        )

    end = jax.lax.while_loop(lambda c: c[9] == 0, advance, start_of(0))
    *_, leader, minors, status, winner, _, _ = end
    leader = jnp.where((leader == 0) & ~minors & (winner == a + 1), a + 1, leader)
    return status == 1, winner.astype(jnp.int32), leader.astype(jnp.int32)


def _usam_peak(p):
    """The top ``y* = p (1 + e^-y*)`` of ``y^p sigmoid(-y)`` (``0 <= p < 1``), by its
    contraction from ``y = p``: ``|slope| <= p e^-y < 1``, 40 steps to 1e-12 and less.

    A loop, not unrolled: unrolled, with ``p`` a constant of the program (one depth), XLA's
    algebraic simplifier went round in circles on the chain (50 runs and a logged error
    at every compile of a USAM program that takes runs to their fate)."""
    return jax.lax.fori_loop(0, 40, lambda _, y: p * (1 + jnp.exp(-y)), p)


def _usam_lead(s, mu, L, rho, eta=None):
    """USAM's lead certificates at every depth
    (docs/theory/regimes.md#lead-certificates-at-every-depth), for the coordinate ``w``
    with the largest rate variable (``c = sigmoid(-z)``, ``z = sum_k mu_k u_k^L``, ``x_j =
    mu_j u_j^(L-2)``; the major wherever the major leads; where no one ``x`` is largest,
    the major), ``w`` leading. In the region ``L rho c x_w <= 1`` every ``d log
    u_j/dtau = x_j (1 - rho c x_j)^(L-1)`` (and every step factor ``1 + h`` times it) is
    nonnegative and ordered as ``x``, and ``x_w / x_j = (mu_w / mu_j) (u_w / u_j)^(L-2)``
    does not fall: the lead and the largest ``x`` stay with ``w``, and every ``u_j``, so
    ``z``, grows while the region holds. It holds for ever where

    - (bound) ``L rho phi <= 1``, ``phi`` the largest ``mu_w v^(L-2) sigmoid(-mu_w v^L)``
      over ``v >= u_w`` (``c x_w`` is at most that, as ``z >= mu_w u_w^L`` and ``u_w``
      never falls); with ``y = mu_w v^L`` it is ``mu_w^(2/L) y^p sigmoid(-y)``, ``p = 1 -
      2/L``, unimodal in ``y`` with its top at ``y* = p (1 + e^-y*)`` (a contraction);
    - (fall) ``L rho c x_w <= 1`` and ``(1 - c) L mu_w u_w^L >= L - 2``: then ``c u_w^(L-2)``
      does not rise (flow: its log's rate is at most ``F(x_w) ((L - 2) - (1 - c) L mu_w
      u_w^L)``; step: by the concavity of ``log sigmoid(-z)`` and ``q^L - 1 >= L log q``).

    Take-over (third value, L >= 3): (bound) or (fall) with the region's inequality strict,
    and ``x_k < x_w`` for every other ``k`` (``w`` the major, or a minor one, which then keeps
    the major behind it: ``x_w > x_a`` with ``mu_w < mu_a``), whoever leads
    (docs/theory/regimes.md#takeover-at-every-depth, #minor-winner). Compared in logs."""
    log_mu = jnp.log(mu)
    log_x = log_mu + (L - 2) * s
    top = jnp.argmax(log_x)
    w = jnp.where(jnp.sum(log_x == log_x[top]) == 1, top, jnp.argmax(mu))
    log_L, log_rho = jnp.log(L), jnp.log(rho)
    z = jnp.exp(jax.nn.logsumexp(log_mu + L * s))
    log_c, log_1mc = -jax.nn.softplus(z), -jax.nn.softplus(-z)  # log c, log (1 - c)
    inside_by = log_L + log_rho + log_c + log_x[w]
    inside = inside_by <= 0
    fall = log_1mc + log_L + log_mu[w] + L * s[w] >= jnp.log(jnp.maximum(L - 2, 0.0))
    p = 1 - 2 / L
    peak = _usam_peak(p)

    def log_theta(log_v):  # log of L rho sup_{v' >= v} phi(v')
        y = jnp.maximum(jnp.exp(log_mu[w] + L * log_v), peak)
        log_phi = (2 / L) * log_mu[w] + p * jnp.log(jnp.maximum(y, jnp.finfo(s.dtype).tiny))
        return log_L + log_rho + log_phi - jax.nn.softplus(y)

    bound_by = log_theta(s[w])
    holds = (
        (bound_by <= 0) | (inside & fall) | _usam_wide(s, log_x, w, L, rho, log_c, log_theta, eta)
    )
    strict = (bound_by < 0) | ((inside_by < 0) & fall)
    # w has the strictly largest x: the major, or a minor one (then ahead of the major for
    # ever, docs/theory/regimes.md#minor-winner)
    overtakes = (L >= 3) & strict & (jnp.sum(log_x == log_x[top]) == 1)
    overtakes = overtakes | _usam_late_lead(s, mu, L, rho, eta)  # w is the major there
    return holds, w + 1, overtakes


def _usam_wide(s, log_x, w, L, rho, log_c, log_theta, eta=None):
    """USAM's lead of ``w`` (the leader, with the largest ``x``) beyond the region, L >= 3
    (docs/theory/regimes.md#usam-wide-lead). With ``theta = L rho sup_{v >= u_w} phi(v) <
    L``, ``rho c x_w <= theta / L`` for ever, so ``F(x_w) >= (1 - theta/L)^(L-1) x_w``, and
    ``F(x_j) <= x_j``: ``w`` keeps the lead where every ``x_j <= (1 - theta/L)^(L-1) x_w``
    (flow and step: that ratio then only falls). Flow, more (*two phases*): while ``r_w =
    rho c x_w <= eps`` (``eps >= r_w`` now, ``x_j <= (1 - eps)^(L-1) x_w``) ``w`` keeps the
    lead and ``Y_j = u_j^-(L-2)`` falls at most ``b_j = mu_j / (mu_w (1 - eps)^(L-1))`` times
    as fast as ``Y_w``; the phase ends (if ever) with ``u_w >= U = max(u_w, (2 eps / (rho
    mu_w))^(1/(L-2)))``, where ``x_j / x_w <= (mu_j / mu_w) / ((Y_j / Y_U) (1 - q_j) + b_j)``,
    ``q_j = x_j / (x_w (1 - eps)^(L-1))``, and the first condition at ``theta(U)`` then holds.
    Discrete step: the same, the phase being ``u_w <= (2 eps / (rho mu_w))^(1/(L-2))``, with
    ``b_j`` times ``1 + (L - 2) eta eps / rho`` (Bernoulli's inequality on each step's
    factors). Tried at 8 values of ``eps``. Compared in logs."""
    Lp = jnp.maximum(L, 3.0)
    others = jnp.arange(s.shape[0]) != w
    log_q = jnp.where(others, log_x - log_x[w], -jnp.inf)
    log_theta_now = log_theta(s[w])
    theta_now = jnp.exp(log_theta_now)
    now = (theta_now < Lp) & jnp.all(
        log_q <= (Lp - 1) * jnp.log1p(-jnp.minimum(theta_now / Lp, 1.0))
    )
    r_w = jnp.exp(jnp.log(rho) + log_c + log_x[w])
    eps_hi = 1 - jnp.exp(jnp.max(log_q) / (Lp - 1))
    log_mu = log_x - (Lp - 2) * s

    def phases(k, ok):
        eps = r_w + (eps_hi - r_w) * (k + 1) / 8
        log_keep = (Lp - 1) * jnp.log1p(-jnp.minimum(eps, 1.0))  # log (1 - eps)^(L-1)
        log_U = jnp.maximum(s[w], (jnp.log(2 * eps) - jnp.log(rho) - log_mu[w]) / (Lp - 2))
        theta = jnp.exp(log_theta(log_U))
        log_b = log_mu - log_mu[w] - log_keep
        if eta is not None:  # a step's Y_w falls by 1 + (L - 2) h x_w <= 1 + (L-2) eta eps/rho less
            log_b = log_b + jnp.log1p((Lp - 2) * eta * eps / rho)
        q = jnp.exp(jnp.minimum(log_q - log_keep, 0.0))
        spread = jnp.exp(-(Lp - 2) * (s - log_U))  # Y_j / Y_U
        ratio = jnp.exp(log_mu - log_mu[w]) / (spread * (1 - q) + jnp.exp(log_b))
        later = jnp.log(ratio) <= (Lp - 1) * jnp.log1p(-jnp.minimum(theta / Lp, 1.0))
        good = (eps > r_w) & (eps < 1) & (theta < Lp) & jnp.all(~others | later)
        return ok | good

    two = jax.lax.fori_loop(0, 8, phases, jnp.zeros((), bool))
    return (L >= 3) & (now | (two & (eps_hi > r_w)))


def _usam_finite(s, mu, L, rho, eta=None):
    """Where USAM at ``L >= 3`` provably converges to a finite nonzero point
    (docs/theory/regimes.md#finite-limits-of-usam): every ``r_j = rho c x_j <= 1`` (``c =
    sigmoid(-z)``, ``x_j = mu_j u_j^(L-2)``) and ``z <= Z`` with ``h(Z) < Z``, ``h(z) = K
    (1 + e^z)^q``, ``q = L / (L - 2)``, ``K = sum_j mu_j (rho mu_j)^-q``. The set of all
    ``r_j <= 1`` is never left and every ``u_j`` grows in it; there ``z <= h(z)`` (``u_j^(L-2)
    <= 1 / (rho c mu_j)``), so ``z`` cannot pass ``Z``: ``u`` grows to a bounded limit, a
    point where every ``r_j = 1``. ``Z`` is the minimum of the convex ``h(z) - z`` (Newton
    on ``log K + log q + (q - 1) softplus(l) + l = 0``, ``l = log t``, ``t = e^Z``, from
    above). Discrete step (``eta`` given): also ``(L - 2) m_L gamma <= 1`` (a step keeps every
    ``r_j <= 1``) and ``z_1 (1 + gamma')^L <= Z`` (it cannot jump past ``Z``), ``gamma =
    eta (1 + e^Z) / (2 rho)``, ``m_L = max_r r (1 - r)^(L-2)``, ``gamma' = gamma max_r r (1 -
    r)^(L-1)``, ``z_1 <=`` the left root of ``h(z) = z`` (by bisection). Compared in logs."""
    tiny = jnp.finfo(s.dtype).tiny
    Lp = jnp.maximum(L, 3.0)  # q is finite at L >= 3 only (L = 2 masked by the caller)
    log_mu = jnp.log(mu)
    q = Lp / (Lp - 2)
    log_K = jax.nn.logsumexp(log_mu - q * (jnp.log(rho) + log_mu))
    log_z = jax.nn.logsumexp(log_mu + Lp * s)
    log_r = jnp.log(rho) + _usam_log_c(log_mu, s, Lp) + log_mu + (Lp - 2) * s

    Z = _usam_gap_top(log_K, q)
    log_h = log_K + q * jax.nn.softplus(Z)
    gap = (Z > 0) & (log_h < jnp.log(jnp.maximum(Z, tiny)))
    holds = gap & jnp.all(log_r <= 0) & (log_z <= jnp.log(jnp.maximum(Z, tiny)))
    if eta is None:
        return holds

    hi = _usam_left_root(log_K, q, Z)
    gamma = eta * (1 + jnp.exp(Z)) / (2 * rho)
    m_L = (Lp - 2) ** (Lp - 2) / (Lp - 1) ** (Lp - 1)  # max_r r (1 - r)^(L-2)
    m_next = (Lp - 1) ** (Lp - 1) / Lp**Lp  # max_r r (1 - r)^(L-1)
    kept = (Lp - 2) * m_L * gamma <= 1
    no_jump = jnp.log(jnp.maximum(hi, tiny)) + Lp * jnp.log1p(gamma * m_next) <= jnp.log(
        jnp.maximum(Z, tiny)
    )
    return holds & kept & no_jump


def _usam_gap_top(log_K, q):
    """The top ``Z`` of ``z - K (1 + e^z)^q`` (``q > 1``): ``t = e^Z`` solves ``K q (1 +
    t)^(q - 1) t = 1``, by Newton on the increasing, convex ``G(l) = log K + log q + (q - 1)
    softplus(l) + l`` (``l = Z``) from above (``G >= 0`` at the start); a loop, not unrolled
    (the certificates sit in every compiled USAM program)."""

    def newton(_, l):
        G = log_K + jnp.log(q) + (q - 1) * jax.nn.softplus(l) + l
        return l - G / (1 + (q - 1) * jax.nn.sigmoid(l))

    return jax.lax.fori_loop(0, 60, newton, -(log_K + jnp.log(q)))


def _usam_left_root(log_K, q, Z):
    """The upper end of a bracket, 60 halvings of ``[0, Z]`` narrow, of the left root of
    ``h(z) = K (1 + e^z)^q = z`` below the gap's ``Z`` (where ``h(0) > 0`` and
    ``h(Z) < Z``): ``h(lo) > lo`` and ``h(hi) < hi`` hold at every halving."""
    tiny = jnp.finfo(Z.dtype).tiny

    def halve(_, bracket):
        lo, hi = bracket
        mid = 0.5 * (lo + hi)
        above = log_K + q * jax.nn.softplus(mid) > jnp.log(jnp.maximum(mid, tiny))
        return jnp.where(above, mid, lo), jnp.where(above, hi, mid)

    return jax.lax.fori_loop(0, 60, halve, (jnp.zeros_like(Z), Z))[1]


def _usam_z_star(log_mu, Lp, log_rho):
    """``z* >= y*`` where ``2 L rho mu_max^(2/L) z^p sigmoid(-z) = 1`` (``p = 1 - 2/L``,
    ``y*`` the top of ``z^p sigmoid(-z)``; ``z* = y*`` where the left side is at most 1
    there), by bisection, and whether it lies below 700 (else no certificate: ``e^z*``
    overflows). Past ``z*`` every ``2 L r_j <= 1`` in any USAM state, as ``mu_j u_j^L <= z``
    (docs/theory/regimes.md#usam-step-returns)."""
    tiny = jnp.finfo(log_mu.dtype).tiny
    p = 1 - 2 / Lp
    y_top = _usam_peak(p)
    log_top = jnp.log(2 * Lp) + log_rho + (2 / Lp) * jnp.max(log_mu)

    def past(z):  # 2 L rho mu_max^(2/L) z^p sigmoid(-z) <= 1
        return log_top + p * jnp.log(jnp.maximum(z, tiny)) - jax.nn.softplus(z) <= 0

    def halve(_, bracket):  # past(hi), not past(lo)
        lo, hi = bracket
        mid = 0.5 * (lo + hi)
        return jnp.where(past(mid), lo, mid), jnp.where(past(mid), mid, hi)

    far = jnp.asarray(700.0, log_mu.dtype)  # e^z overflows float64 just above
    _, z_star = jax.lax.fori_loop(0, 80, halve, (y_top, far))
    z_star = jnp.where(past(y_top), y_top, z_star)
    return z_star, past(z_star)


def _usam_late_lead(s, mu, L, rho, eta=None):
    """Where the USAM major at ``L >= 3`` provably leads for the first time only past ``z*``
    and then for ever (docs/theory/regimes.md#usam-late-lead): a minor ``l`` leads, the state
    is in ``R``, the major ``a`` has the strictly largest ``x``, no fixed point exists, and
    (step) the conditions of the step's return with ``z_end = z*`` hold; and, with ``delta =
    log(x_a / x_l)``, ``K = (L - 2) (1 + gamma m_L') / (1 - 1/L)^(L-1)`` (``gamma = 0`` for the
    flow) and ``Lambda = log((z* / mu_l)^(1/L) (1 + gamma m_L') / u_l)`` (a bound of the log
    growth of ``u_l`` while ``z < z*``), ``log(1 - e^-delta) + K Lambda < log(1 - mu_l /
    mu_a)``: ``delta`` grows only while ``r_l < 1/L``, by at most ``K (e^delta - 1)`` times
    the log growth of ``u_l``, so below ``z*`` it stays below ``log(mu_a / mu_l)``, where
    ``u_a < u_l``. Past ``z*`` the take-over at every depth holds for the major. Compared in
    logs."""
    Lp = jnp.maximum(L, 3.0)
    q = Lp / (Lp - 2)
    log_mu, log_rho = jnp.log(mu), jnp.log(rho)
    a, lead = jnp.argmax(mu), jnp.argmax(s)
    log_x = log_mu + (Lp - 2) * s
    log_r = log_rho + _usam_log_c(log_mu, s, Lp) + log_x
    log_K = jax.nn.logsumexp(log_mu - q * (log_rho + log_mu))
    Z = _usam_gap_top(log_K, q)
    tiny = jnp.finfo(s.dtype).tiny
    no_fixed = (Z <= 0) | (log_K + q * jax.nn.softplus(Z) > jnp.log(jnp.maximum(Z, tiny)) + 1e-9)
    z_star, reaches = _usam_z_star(log_mu, Lp, log_rho)
    m_next = (Lp - 1) ** (Lp - 1) / Lp**Lp  # max_r r (1 - r)^(L-1)
    ok = (L >= 3) & (lead != a) & jnp.all(log_r <= 0) & _ahead_in_rate(s, mu, Lp) & no_fixed
    ok = ok & reaches
    if eta is None:
        gamma = jnp.zeros((), s.dtype)
    else:
        gamma = eta * (1 + jnp.exp(z_star)) / (2 * rho)
        m_L = (Lp - 2) ** (Lp - 2) / (Lp - 1) ** (Lp - 1)  # max_r r (1 - r)^(L-2)
        ok = ok & ((Lp - 2) * m_L * gamma <= 1)  # R kept
        ok = ok & ((Lp - 2) * gamma * ((Lp - 2) / Lp) ** (Lp - 2) < 1)  # order of x kept
    grow = jnp.log1p(gamma * m_next)
    K = (Lp - 2) * (1 + gamma * m_next) / (1 - 1 / Lp) ** (Lp - 1)
    Lam = jnp.maximum((jnp.log(z_star) - log_mu[lead]) / Lp + grow - s[lead], 0.0)
    delta = jnp.maximum(log_x[a] - log_x[lead], tiny)
    behind = jnp.log(-jnp.expm1(-delta)) + K * Lam < jnp.log1p(-jnp.exp(log_mu[lead] - log_mu[a]))
    return ok & behind


def _usam_returns(s, mu, L, rho, eta=None):
    """Where USAM at ``L >= 3`` provably ends led by the major, which, if it leads now,
    first hands the lead on (docs/theory/regimes.md#usam-returns): the state is in ``R``
    (every ``r_j = rho c x_j <= 1``), the major ``a`` has the strictly largest ``x``, no
    fixed point exists (``h(Z) > Z``, ``h``, ``Z`` as in :func:`_usam_finite`), and a minor
    leads, or the major leads (``u_a >= u_j``) and its own gap holds: ``h_a(Z_a) < Z_a``
    with ``h_a(z) = K_a (1 + e^z)^q``, ``K_a = (sum_j mu_j) (rho mu_a)^-q``, ``Z_a`` the top
    of ``z - h_a(z)``, and ``z <= Z_a``. Flow: ``R`` is never left and every ``u_j`` grows in
    it; with no fixed point ``z`` grows without bound, and while the major leads ``z <=
    h_a(z)``: the major loses the lead before ``z`` reaches ``Z_a``. Then ``c -> 0``, every
    ``r_j -> 0`` and the flow blows up in finite time, won by the largest ``x``, the major
    (docs/theory/regimes.md#blow-up-winner). Discrete step (``eta`` given,
    docs/theory/regimes.md#usam-step-returns): also, with ``gamma = eta (1 + e^z_end) / (2
    rho)`` (a bound of ``h / (rho c)`` while ``z <= z_end``), ``(L - 2) m_L gamma <= 1``
    (``R`` kept, as in :func:`_usam_finite`), ``(L - 2) gamma ((L - 2)/L)^(L-2) < 1`` (the
    order of ``x`` kept) and, the major leading, ``z_lo (1 + gamma m_L')^L <= Z_a`` (no
    step jumps the gap, ``z_lo >=`` the left root of ``h_a(z) = z``, by bisection); ``z_end
    = max(z*, Z_a)`` (``z*`` alone where a minor leads), ``z* >= y*`` where ``2 L rho
    mu_max^(2/L) z^p sigmoid(-z) = 1`` (``p = 1 - 2/L``, ``y*`` the top of ``z^p
    sigmoid(-z)``): past ``z*`` every ``L r_j <= 1/2`` in any state (``mu_j u_j^L <= z``),
    the take-over at every depth holds for the major (docs/theory/regimes.md#takeover-at-
    every-depth), and ``z`` gets there (no fixed point). Compared in logs."""
    tiny = jnp.finfo(s.dtype).tiny
    Lp = jnp.maximum(L, 3.0)  # q is finite at L >= 3 only (L = 2 masked by the caller)
    q = Lp / (Lp - 2)
    log_mu, log_rho = jnp.log(mu), jnp.log(rho)
    a = jnp.argmax(mu)
    log_r = log_rho + _usam_log_c(log_mu, s, Lp) + log_mu + (Lp - 2) * s
    log_K = jax.nn.logsumexp(log_mu - q * (log_rho + log_mu))
    Z = _usam_gap_top(log_K, q)
    # No fixed point: the convex h(z) - z is positive at its top Z (or on z >= 0 where Z <= 0);
    # a margin of 1e-9 in logs over Newton's last iterate, converged to rounding.
    no_fixed = (Z <= 0) | (log_K + q * jax.nn.softplus(Z) > jnp.log(jnp.maximum(Z, tiny)) + 1e-9)
    log_Ka = jnp.log(jnp.sum(mu)) - q * (log_rho + log_mu[a])
    Za = _usam_gap_top(log_Ka, q)
    log_Za = jnp.log(jnp.maximum(Za, tiny))
    gap = (Za > 0) & (log_Ka + q * jax.nn.softplus(Za) < log_Za)
    log_z = jax.nn.logsumexp(log_mu + Lp * s)
    leads = jnp.all(s <= s[a])
    handed_on = ~leads | (gap & (log_z <= log_Za))  # a minor leads now, or will
    holds = (L >= 3) & jnp.all(log_r <= 0) & _ahead_in_rate(s, mu, Lp) & no_fixed & handed_on
    if eta is None:
        return holds
    z_star, reaches = _usam_z_star(log_mu, Lp, log_rho)
    z_lo = _usam_left_root(log_Ka, q, Za)
    z_end = jnp.where(leads, jnp.maximum(z_star, Za), z_star)
    gamma = eta * (1 + jnp.exp(z_end)) / (2 * rho)
    m_L = (Lp - 2) ** (Lp - 2) / (Lp - 1) ** (Lp - 1)  # max_r r (1 - r)^(L-2)
    m_next = (Lp - 1) ** (Lp - 1) / Lp**Lp  # max_r r (1 - r)^(L-1)
    kept = (Lp - 2) * m_L * gamma <= 1
    ordered = (Lp - 2) * gamma * ((Lp - 2) / Lp) ** (Lp - 2) < 1
    no_jump = ~leads | (jnp.log(jnp.maximum(z_lo, tiny)) + Lp * jnp.log1p(gamma * m_next) <= log_Za)
    return holds & reaches & kept & ordered & no_jump


def _h_max(eta, L):
    """The largest step ``h = eta sigmoid(-z~)`` the balanced logistic step takes at depth
    ``L``: ``eta / 2`` at even ``L``, where the margin at the perturbed point, ``z~ =
    sum_j mu_j w~_j^L``, is never negative (docs/theory/regimes.md#discrete-collapse-at-depth-two);
    ``eta`` at odd ``L`` (there ``w~_j`` may be negative, and ``z~`` with it)."""
    return jnp.where(jnp.round(L) % 2 == 0, eta / 2, eta)


def _l2_step_collapse(mu, rho, eta):
    """Where the discrete l2-SAM step at L = 2 keeps ``N = ||m||_2 < rho mu_1`` for ever
    (derived here). There every factor ``1 + h mu_j (1 - rho mu_j / N)`` of ``u_j`` is
    below 1, and above -1 while ``N > h rho mu_j^2 / (2 + h mu_j)``: in that band ``N``
    falls. Below it, ``|factor_j| <= 1 + h mu_j + h rho mu_j^2 / N`` and
    ``mu_j |u_j| <= N / sqrt 2`` give ``N' <= (1 + h mu_d) N + h rho mu_d^2 <= B =
    h rho mu_d^2 (1 + (1 + h mu_d) / (2 + h mu_d))``. So with ``B < rho mu_1`` the set
    ``N < rho mu_1`` is never left and beta stays within ``N^2 / (2 mu_j^2)`` of 0. ``B``
    grows with ``h = eta sigmoid(-z~)``, and at L = 2 the margin at the perturbed point,
    ``z~ = sum_j mu_j w_j^2``, is never negative, so ``h <= eta / 2``: the bound at
    ``eta / 2`` covers every step."""
    a, lo = jnp.max(mu), jnp.min(mu)
    h = _h_max(eta, 2)
    return h * a * a * (1 + (1 + h * a) / (2 + h * a)) < lo


def _l2_deep_collapse(s, mu, L, rho, eta=None):
    """Where l2-SAM at even ``L >= 4`` provably collapses (derived in
    docs/theory/regimes.md#collapse-certificates). Flow (``eta`` None): ``U = max_j u_j <
    rho_0 = rho mu_min / (sqrt(L) ||mu||_2)``. ``N = ||m||_2 <= sqrt(L) ||mu||_2 U^(L-1)``,
    so a coordinate at the maximum has ``r = rho mu_j U^(L-2) / N >= rho_0 / U > 1`` and
    shrinks (``(1 - r)^(L-1) < 0``, L - 1 odd): ``U`` never rises, the bound holds for
    ever, and ``dU/dtau <= -mu_min U^(L-1) (r_0 - 1)^(L-1)`` drives ``U``, hence beta, to
    0. Discrete step (``eta`` given): ``U`` never leaves ``[0, B]``, ``B = max(U, eta J)``,
    ``J = min(mu_max (rho / sqrt L)^(L-1), mu_max^(1/L) (p / e)^p)``, ``p = (L-1)/L``,
    where ``B < rho_0`` and ``(B / rho_0)^(1/(L-2)) (1 + eta sqrt(L) ||mu||_2 B^(L-1) /
    rho) <= 1``: a coordinate with ``r_j >= 1`` has ``|u_j'|
    = |u_j| |1 - a_j|``, ``a_j = h x_j (r_j - 1)^(L-1)``, at most ``|u_j|`` for ``a_j <= 2``
    and else below ``h mu_j |w~_j|^(L-1) <= h mu_j (|u_j| r_j)^(L-1) <= eta mu_max (rho /
    sqrt L)^(L-1)`` (``|u_j| r_j = rho mu_j |u_j|^(L-1) / N <= rho / sqrt L``), and below
    ``eta mu_j t^(L-1) e^(-mu_j t^L) <= eta mu_j^(1/L) (p / e)^p`` (``t = |w~_j|``, ``h <= eta
    e^(-z~)``, ``z~ >= mu_j t^L`` at even L); one with ``r_j < 1`` has ``|u_j| <
    U (U / rho_0)^(1/(L-2))`` and grows by at most ``1 + h N / rho``. Compared in logs
    (``s = log |u|``)."""
    log_rho0 = jnp.log(rho * jnp.min(mu)) - 0.5 * jnp.log(L) - 0.5 * jnp.log(jnp.sum(mu * mu))
    if eta is None:
        return (jnp.max(s) < log_rho0) | _l2_shrinking_below_fixed_point(s, mu, L, rho)
    Lp = jnp.maximum(L, 4.0)  # the step's bound is for L >= 4 (masked by the caller)
    # The jump past 0: below eta mu_max (rho / sqrt L)^(L-1), and below eta mu_max^(1/L)
    # (p / e)^p, p = (L-1)/L, as h <= eta e^(-z~) and z~ >= mu_j |w~_j|^L.
    log_mu_max = jnp.log(jnp.max(mu))
    p = (Lp - 1) / Lp
    log_step = jnp.log(eta) + jnp.minimum(
        log_mu_max + (Lp - 1) * (jnp.log(rho) - 0.5 * jnp.log(Lp)),
        log_mu_max / Lp + p * (jnp.log(p) - 1),
    )

    def ball(log_U):  # U never leaves [0, max(U, eta J)], inside U < rho_0
        log_B = jnp.maximum(log_U, log_step)
        grow = jnp.log1p(eta * jnp.sqrt(Lp * jnp.sum(mu * mu)) * jnp.exp((Lp - 1) * log_B) / rho)
        return (log_B < log_rho0) & ((log_B - log_rho0) / (Lp - 2) + grow <= 0)

    return ball(jnp.max(s)) | _l2_step_shrinks_to_ball(s, mu, Lp, rho, eta, log_rho0, ball)


def _l2_step_shrinks_to_ball(s, mu, L, rho, eta, log_rho0, ball):
    r"""The discrete step's form of :func:`_l2_shrinking_below_fixed_point` (l2-SAM, even
    ``L >= 4``; derived in docs/theory/regimes.md#collapse-certificates): every
    \(r_j \ge 1\), some \(u_j < u^\star_j\), and a level \(U_\ell\) at which ``ball``
    (the first certificate's, for the step) holds, with, for every \(j\),

    \[ \ell_j = \Bigl(\frac{\sqrt{L}\,\mu_{\min} U_\ell^{L-1}}{\rho\,\mu_j}\Bigr)^{1/(L-2)}
        \ge (L-2)\,\frac{\eta}{2}\,\mu_j \Bigl(\frac{\rho}{\sqrt L}\Bigr)^{L-1}. \]

    In the region \(A = \{r_j \ge 1\ \forall j\}\) the step multiplies \(u_j\) by
    \(f_j = 1 - a_j\), \(a_j = h x_j (r_j - 1)^{L-1} \ge 0\) (``L - 1`` odd), \(h \le
    \eta/2\) at even ``L``. \(r_j \ge 1\) reads \(\rho\mu_j u_j^{L-2} \ge N \ge
    \sqrt{L}\,\mu_{\min} U^{L-1}\), so \(u_j \ge \ell_j\) while \(U \ge U_\ell\); and
    \(N \ge \sqrt{L}\,\mu_j u_j^{L-1}\) gives \(r_j \le \rho/(\sqrt{L} u_j)\), so, with
    \(\delta = r_j - 1\), \((L-2)\,h x_j \delta^{L-2} r_j \le (L-2)\,h x_j r_j^{L-1} \le
    (L-2)\,h \mu_j (\rho/\sqrt L)^{L-1}/u_j \le 1\). Then \(0 \le a_j \le 1/(L-2)\) (no
    overshoot, \(f_j \in (0, 1]\)), every \(f_k \le 1\) gives \(N' \le N\), and by
    Bernoulli \(r_j' \ge r_j f_j^{L-2} \ge (1 + \delta)(1 - (L-2)\,a_j) \ge 1\), as
    \((L-2)\,a_j (1 + \delta) = \delta \cdot (L-2)\,h x_j \delta^{L-2} r_j \le \delta\):
    \(A\) is kept and no \(u_j\) rises. While \(U \ge U_\ell\), \(u\) is monotone, so it
    converges; a limit with \(U \ge U_\ell\) has \(N > 0\), is a fixed point of the
    (continuous) step, so every \(a_j = 0\), and has every \(r_j \ge 1\), so no \(u_j\) is
    0 and every \(r_j = 1\): the limit is \(u^\star\), which a coordinate already below
    \(u^\star_j\) cannot reach. So \(U\) falls below \(U_\ell\), where ``ball`` holds
    (it is monotone in \(U\)). The levels tried are \(\rho_0 (1 - 2^{-k})\), \(k =
    1..40\), and \(\rho_0 2^{-k/4}\), \(k = 4..43\). Compared in logs; ``L`` as at least 4
    (the caller masks the rest)."""
    log_mu, log_rho = jnp.log(mu), jnp.log(rho)
    half_log_L = 0.5 * jnp.log(L)
    k = jnp.arange(1, 41, dtype=s.dtype)
    log_level = log_rho0 + jnp.concatenate([jnp.log1p(-(2.0**-k)), -0.25 * jnp.log(2.0) * (k + 3)])
    log_floor = (  # log l_j at each level [levels, d]
        half_log_L + jnp.min(log_mu) + (L - 1) * log_level[:, None] - log_rho - log_mu
    ) / (L - 2)
    log_need = jnp.log(L - 2) + jnp.log(_h_max(eta, L)) + log_mu + (L - 1) * (log_rho - half_log_L)
    # (1e-9: the bounds' own rounding)
    kept = jnp.all(log_floor >= log_need + 1e-9, axis=1) & jax.vmap(ball)(log_level)
    return _l2_shrinking_below_fixed_point(s, mu, L, rho) & jnp.any(kept)


def _l2_shrinking_below_fixed_point(s, mu, L, rho):
    r"""The second flow certificate of l2-SAM's collapse at even ``L >= 4`` (derived in
    docs/theory/regimes.md#collapse-certificates): every \(r_j \ge 1\) and some
    \(u_j < u^\star_j\), the fixed point's coordinate. The region \(\{r_j \ge 1\ \forall
    j\}\) is never left (where \(r_j = 1\), \(u_j\) stands still and \(N\) does not rise),
    every \(u_j\) falls in it, and the only nonzero limit it allows is \(u^\star\), which a
    coordinate already below it cannot reach: so beta tends to 0. With \(p = (2L-2)/(L-2)\),
    \((1 - p/2) \log N^\star = \tfrac12 \log L - \tfrac{p}{2} \log\rho + \tfrac12 \log \sum_k
    \mu_k^{2-p}\) and \(\log u^\star_j = (\log N^\star - \log\rho - \log\mu_j)/(L-2)\).
    Compared in logs (``s = log |u|``); ``L`` is taken as at least 4 (the caller masks
    the rest)."""
    Lp = jnp.maximum(L, 4.0)
    log_mu, log_rho = jnp.log(mu), jnp.log(rho)
    log_r = log_rho + log_mu + (Lp - 2) * s + _l2_log_c(log_mu, s, Lp)  # r_j = rho c x_j
    p = (2 * Lp - 2) / (Lp - 2)
    log_n_star = (
        0.5 * jnp.log(Lp) - 0.5 * p * log_rho + 0.5 * jax.nn.logsumexp((2 - p) * log_mu)
    ) / (1 - 0.5 * p)
    log_u_star = (log_n_star - log_rho - log_mu) / (Lp - 2)
    # below u* by more than rounding: at u* itself (every r_j = 1) nothing moves
    return (jnp.min(log_r) >= 0) & jnp.any(s < log_u_star - 1e-10)


def _usam_step_collapse(mu, rho, eta):
    """Where the discrete USAM step at L = 2 shrinks every ``|u_j|`` for ever (derived
    here): with ``rho c mu_1 > 1`` each factor ``1 + h mu_j (1 - rho c mu_j)`` is below 1,
    and above -1 when ``h mu_j (rho c mu_j - 1) < 2``; ``c = sigmoid(-z) <= 1/2`` (``z >=
    0``) and ``h = eta sigmoid(-z~) <= eta / 2`` (``z~ = sum_j mu_j w_j^2 >= 0`` at the
    perturbed point), so ``(eta / 2) mu_d (rho mu_d / 2 - 1) < 2`` suffices. Then ``z``
    falls, ``c`` rises, the factors stay in (-1, 1) and beta tends to 0."""
    a = jnp.max(mu)
    return _h_max(eta, 2) * a * (rho * a / 2 - 1) < 2


def _usam_log_c(log_mu, s, L):
    # c = |l'(z)| = sigmoid(-z), z = sum_k mu_k u_k^L: log c = -softplus(z).
    return -jax.nn.softplus(jnp.exp(jax.nn.logsumexp(log_mu + L * s)))


def _linf_field(tau, u, args):
    """``du_j/dtau = mu_j (u_j - rho)^(L-1)``, since ``sign(m_j) = +1`` while ``u > 0``.

    For even L a coordinate below rho falls to 0, where the sign flips and the field
    points back to 0 from both sides (Filippov sliding): 0 is absorbing, the field is
    set to 0 there (docs/theory/balanced.md#balanced-initialisation).
    """
    mu, depth, rho = args
    grows = (u > 0) | (depth % 2 == 1)
    return jnp.where(grows, mu * signed_int_pow(u - rho, depth - 1), 0.0)


def _linf_fate(u, mu, depth, rho, eta=None):
    """Certificate of the linf-SAM flow from ``u > 0`` (docs/theory/regimes.md#labels-of-the-limit),
    or of its discrete balanced step with step size ``eta`` (:func:`_linf_step_fate`).

    L = 1: the field is ``mu``: LEADS, winner the major. Otherwise the excess
    ``v = u - rho`` keeps its sign (``u = rho`` is a fixed point), for flows:

    - L = 2: ``v_j = v_j(0) e^(mu_j tau)``. With some ``u_j > rho``, the winner ``j*``
      is the largest mu among them: every ``u_k <= rho`` never grows, and an excess
      ``v_k > 0`` with ``mu_k <= mu_j*`` never gains on ``v_j*``: LEADS. All
      ``u_j < rho``: each reaches 0, which absorbs: COLLAPSE; else (the largest at
      rho exactly) FINITE.
    - odd L >= 3: ``du/dtau = mu (u - rho)^(L-1) >= 0``, so every ``u_j <= rho``
      creeps up to rho: all ``u_j <= rho`` gives FINITE (``beta -> rho^L`` where
      ``u_j(0) > 0``).
    - even L >= 4: below rho ``u`` falls to the absorbing 0: all ``u_j < rho`` gives
      COLLAPSE, all ``<= rho`` with one at rho FINITE.
    - L >= 3 with some ``u_j > rho``: the first blow-up wins (:func:`_linf_first_blowup`):
      TAKES_OVER, winner the coordinate that blows up first; OPEN where two blow up
      within a relative ``LINF_TIE`` of each other.

    The discrete step can jump past rho or 0, which the flow cannot: its certificates
    (``eta`` given, ``u`` the signed ``u = sign(beta) |beta|^(1/L)``) hold only where the
    step size keeps it from doing so (:func:`_linf_step_fate`).
    """
    above = u > rho
    winner = jnp.argmax(jnp.where(above, mu, -jnp.inf)) + 1
    below_all, at_most = jnp.all(u < rho), jnp.all(u <= rho)
    lower = jnp.where(below_all, _fate.COLLAPSE, _fate.FINITE)
    two = jnp.where(jnp.any(above), _fate.LEADS, lower)
    first, first_code = _linf_first_blowup(u, mu, depth, rho)
    deep = jnp.where(at_most, jnp.where(depth % 2 == 1, _fate.FINITE, lower), first_code)
    flow = jnp.where(depth == 2, two, deep)
    winner = jnp.where(depth == 2, winner, first)
    if eta is not None:
        flow, winner = _linf_step_fate(u, mu, depth, rho, eta)
    code = jnp.where(depth == 1, _fate.LEADS, flow)
    winner = jnp.where(depth == 1, jnp.argmax(mu) + 1, winner)
    return code.astype(jnp.int32), winner.astype(jnp.int32)


LINF_TIE = 1e-4
"""How far apart, in ``log T_j``, linf-SAM's first two blow-ups must be for
:func:`_linf_first_blowup` to name the first: 1e-4, a relative 1e-4 in the times, far
above what the solver's relative error in ``u - rho`` (``Flow.rtol``, 1e-8 by default,
times ``L - 2`` in ``log T``) can move them."""


def _linf_first_blowup(u, mu, depth, rho):
    r"""linf-SAM's flow at ``L >= 3`` with some ``u_j > rho`` (derived in
    docs/theory/regimes.md#linf-first-blow-up): ``(TAKES_OVER, w)`` with ``w`` the
    coordinate that blows up first, ``(OPEN, w)`` where the first two blow-ups are within
    :data:`LINF_TIE` (in ``log T``) of each other.

    The coordinates are uncoupled: ``dv_j/dtau = mu_j v_j^(L-1)`` for the excess
    ``v_j = u_j - rho > 0``, so ``Y_j = v_j^-(L-2)`` falls on a line,
    ``Y_j(tau) = Y_j - (L-2) mu_j tau``, and ``u_j`` blows up at
    ``T_j = Y_j / ((L-2) mu_j)``. The leader (the largest ``u``, always one above rho:
    those at most rho stay there) is the lowest line. The first to reach 0, ``w``, leads
    from some time before ``T_w`` on: no other line is below it there. The lowest of
    lines is concave in tau, so its slope ``-(L-2) mu`` only falls: the leaders from now
    on have ever larger mu, up to ``mu_w``. So where ``w`` is a minor coordinate the major
    (largest mu) does not lead in between, as TAKES_OVER's minor winner needs; the
    order of the ``T_j`` never changes (each falls as ``T_j - tau``).
    """
    above = u > rho
    p = jnp.maximum(depth - 2, 1)
    v = jnp.where(above, u - rho, 1.0)
    log_t = jnp.where(above, -p * jnp.log(v) - jnp.log(p * mu), jnp.inf)
    w = jnp.argmin(log_t)
    second = jnp.min(jnp.where(jnp.arange(u.shape[-1]) == w, jnp.inf, log_t))
    code = jnp.where(second - log_t[w] > LINF_TIE, _fate.TAKES_OVER, _fate.OPEN)
    return w + 1, code


def _linf_step_fate(u, mu, depth, rho, eta):
    """Certificate of linf-SAM's discrete balanced step at ``L >= 2`` (derived in
    docs/theory/regimes.md#linf-sam-discrete-step), ``u`` ``[d]`` signed.

    The step (logistic loss, one point): ``w~_j = u_j - rho sign(u_j)^(L-1)``, ``u_j' = u_j
    + h mu_j w~_j^(L-1)``, ``h = eta sigmoid(-z~)``; ``h <= eta/2`` at even L (``z~ =
    sum_k mu_k w~_k^L >= 0``), ``h < eta`` at odd L. At even L it is odd in each ``u_j``,
    so ``|u_j|`` is the state; at odd L a positive ``u_j`` stays positive. With ``v_j =
    |u_j| - rho``, a coordinate with ``|u_j| > rho`` (the set P) has ``v_j' = v_j (1 + h
    y_j)``, ``y_j = mu_j v_j^(L-2)``: it grows and stays in P. A coordinate at most rho
    stays at most rho (*kept*) where at even L ``eta mu_j rho^(L-2) <= 2`` (it cannot
    jump past ``-rho``) and at odd L (``0 < u_j``) ``eta mu_j (rho - u_j)^(L-2) <= 1`` (it
    cannot jump past ``rho``; ``rho - u_j`` only falls).

    - Every coordinate in P or kept, P not empty: LEADS, winner the largest ``y`` in P
      (the major if several share it): its factor ``1 + h y`` is the largest, so its
      lead over P and the order of ``y`` are kept; the kept ones stay at most rho. Where
      one ``w`` in P has the largest ``y`` strictly: TAKES_OVER, winner ``w`` (``v_w / v_k``
      grows by a factor ``(1 + h y_w) / (1 + h y_k) > 1`` bounded away from 1 for ever,
      and ``sum min(h y_w, 1)`` diverges: were it finite, every ``u`` would be bounded, so
      ``h`` bounded below). A minor ``w`` keeps the major behind it meanwhile: a kept
      major stays at most rho; one in P has ``y_a < y_w`` and ``mu_a > mu_w``, so ``v_a <
      v_w`` (L >= 3; at L = 2 ``y = mu`` and ``w`` is the major).
    - Even L, every ``|u_j| < rho`` and kept: COLLAPSE; each ``|u_j|`` falls (by at least
      ``h mu_j (rho - |u_j|)^(L-1)``, ``h`` bounded below) into ``|u_j| <= eta mu_j
      rho^(L-1) / 2``, a ball set by the step, and stays there.
    - Odd L, every ``0 < u_j < rho`` and kept: FINITE, ``u -> rho (1, ..., 1)``.

    Otherwise OPEN. States within 64 rounding units of rho are neither above nor below
    (``u`` is recovered from beta, and ``u = rho`` is a fixed point): OPEN. Compared in logs.
    """
    L = jnp.asarray(depth).astype(u.dtype)
    tol = 64 * jnp.finfo(u.dtype).eps
    even = depth % 2 == 0
    size = jnp.where(even, jnp.abs(u), u)  # the state: |u| at even L; u (> 0 kept) at odd L
    above = size > rho * (1 + tol)
    below = (size < rho * (1 - tol)) & (size > 0)
    log_eta_mu = jnp.log(eta) + jnp.log(mu)
    gap = jnp.where(below, rho - size, rho)
    kept_even = log_eta_mu + (L - 2) * jnp.log(rho) <= jnp.log(2.0)
    kept_odd = log_eta_mu + (L - 2) * jnp.log(gap) <= 0
    kept = below & jnp.where(even, kept_even, kept_odd)
    stays = jnp.all(above | kept)
    log_y = jnp.where(
        above, jnp.log(mu) + (L - 2) * jnp.log(jnp.where(above, size - rho, 1)), -jnp.inf
    )
    top = jnp.argmax(log_y)
    only = jnp.sum(log_y == log_y[top]) == 1
    a = jnp.argmax(mu)
    winner = jnp.where(only, top + 1, a + 1)
    lead = jnp.where(only, _fate.TAKES_OVER, _fate.LEADS)
    low = jnp.where(even, _fate.COLLAPSE, _fate.FINITE)
    code = jnp.where(
        stays & jnp.any(above), lead, jnp.where(stays & jnp.all(kept), low, _fate.OPEN)
    )
    return code, winner


@dataclass(frozen=True)
class PerturbationRule:
    r"""How the ascent direction \(\varepsilon\) is made from the gradient.

    Frozen and hashable: a rule is a static argument of compiled programs (a rule
    made with a lambda compiles once per rule object). Its fields are checked when it
    is made, and what ``direction`` returns when it is first traced (:meth:`perturbed`):
    an \(\varepsilon\) whose pytree structure, leaf shapes or dtypes differ from the gradient's
    is refused with an ``InputError``, never broadcast or cast.

    Attributes:
        name: the method's name in files and on the command line.
        direction: ``(g, batch_ndim) -> eps`` over pytrees, or None for no ascent step
            (GD); ``batch_ndim`` trailing axes of every leaf are independent problems
            (norms are per batch element). A zero gradient should give a zero eps.
            \(\varepsilon\) has the structure, shapes and dtypes of \(g\).
        scale_invariant: \(\varepsilon(c g) = \varepsilon(g)\) for every \(c > 0\). Then, for one
            data point, the loss factors out of the dynamics (docs/theory/flows.md#rescaled-flows)
            and the engine takes \(\varepsilon\) from the gradient without its loss factor. False
            (the safe default) always uses the true gradient.
        balanced: closed form of the flow from a balanced positive start (or None).
        random: ``direction`` is ``(g, batch_ndim, key, step) -> eps``: it also gets a
            PRNG key of its own for this step and the step's number (from 0). The
            discrete runners hand both (:func:`samflow.discrete.simulate`,
            :func:`samflow.fit`, the image training); a random rule has no flow.
        layers_alike: the rule declares that it treats the layers of the diagonal
            network alike (equal layer gradients give equal perturbations) and says
            how: ``(g, n_layers, batch_ndim) -> eps``, with \(g\) ``[d, *batch]`` the
            gradient of each of ``n_layers`` real layers (an int or ``[*batch]``
            ints) and \(\varepsilon\) that of each layer, of \(g\)'s shape and dtype; it must
            equal what ``direction`` gives each layer of ``(g, ..., g)``. With it,
            discrete runs from equal layers take the balanced step
            (:mod:`samflow.balanced`); None (the default for a rule of yours): always
            the general one. GD (no ``direction``) needs none.

    Raises:
        InputError: when made: an empty name, a ``direction`` or ``layers_alike`` that
            is not callable, flags that are not booleans, a ``balanced`` that is not a
            :class:`BalancedFlow`, a random rule without a direction or with a closed
            form, ``layers_alike`` on a random rule or one without a direction. When
            first traced (:meth:`perturbed`): an \(\varepsilon\) whose structure, shapes or
            dtypes differ from the gradient's.

    Examples:
        The built-in rules, and a rule of one's own (the sign of the gradient, which is
        linf-SAM's direction):

        >>> import jax
        >>> import jax.numpy as jnp
        >>> import samflow
        >>> [(rule.name, rule.scale_invariant) for rule in (samflow.GD, samflow.SAM_L2)]
        [('gd', True), ('sam-l2', True)]
        >>> sign = samflow.PerturbationRule(
        ...     "sam-sign", lambda g, batch_ndim: jax.tree.map(jnp.sign, g), scale_invariant=True)
        >>> sign.needs_rho
        True
        >>> sign.direction(jnp.array([0.5, -2.0]), 0).tolist()
        [1.0, -1.0]
    """

    name: str
    direction: Callable[..., PyTree] | None
    scale_invariant: bool = False
    balanced: BalancedFlow | None = None
    random: bool = False
    layers_alike: Callable[..., Array] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise InputError(f"a rule's name must be a non-empty string, got {self.name!r}")
        if self.direction is not None and not callable(self.direction):
            raise InputError(
                f"rule {self.name}: direction must be a function g -> eps or None, "
                f"got {self.direction!r}"
            )
        for flag in ("scale_invariant", "random"):
            if not isinstance(getattr(self, flag), bool):
                raise InputError(
                    f"rule {self.name}: {flag} must be True or False, got {getattr(self, flag)!r}"
                )
        if self.balanced is not None and not isinstance(self.balanced, BalancedFlow):
            raise InputError(
                f"rule {self.name}: balanced must be a BalancedFlow or None, got {self.balanced!r}"
            )
        if self.random and (self.direction is None or self.balanced is not None):
            raise InputError(
                f"rule {self.name}: a random rule needs a direction and has no closed-form flow"
            )
        if self.layers_alike is not None and not callable(self.layers_alike):
            raise InputError(
                f"rule {self.name}: layers_alike must be a function (g, n_layers, batch_ndim) "
                f"-> eps or None, got {self.layers_alike!r}"
            )
        if self.layers_alike is not None and (self.random or self.direction is None):
            raise InputError(
                f"rule {self.name}: layers_alike is for a deterministic rule with a direction"
            )

    @property
    def needs_rho(self) -> bool:
        """Whether the rule perturbs (and so needs a radius rho)."""
        return self.direction is not None

    def perturbed(
        self,
        params: PyTree,
        grads: PyTree,
        rho,
        batch_ndim: int = 0,
        *,
        key: Array | None = None,
        step: Array | None = None,
    ) -> PyTree:
        """``params + rho * eps(grads)``; ``params`` itself for a rule without ascent.

        ``key`` (this step's PRNG key) and ``step`` (its number) are what a random
        rule's direction gets; other rules ignore them.
        """
        if self.direction is None:
            return params
        if self.random:
            if key is None or step is None:
                raise InputError(
                    f"rule {self.name} draws a random direction and needs a key and a step "
                    "number: run it with a discrete runner (a flow has neither)"
                )
            eps = self.direction(grads, batch_ndim, key, step)
        else:
            eps = self.direction(grads, batch_ndim)
        _check_like(self.name, eps, grads)
        return jax.tree_util.tree_map(lambda p, e: p + rho * e, params, eps)

    @property
    def treats_layers_alike(self) -> bool:
        """Whether a run from equal layers may take the balanced step: GD, or a rule
        that declares :attr:`layers_alike`."""
        return self.direction is None or self.layers_alike is not None

    def perturbed_alike(self, u: Array, g: Array, n_layers, rho, batch_ndim: int = 0) -> Array:
        r"""The perturbed layer \(u + \rho \cdot \varepsilon\) of a network whose real layers all
        equal ``u`` ``[d, *batch]`` and all have gradient ``g``; ``u`` for GD. Requires
        :attr:`treats_layers_alike`."""
        if self.direction is None:
            return u
        if self.layers_alike is None:
            raise ValueError(f"rule {self.name} does not declare layers_alike")
        eps = self.layers_alike(g, n_layers, batch_ndim)
        _check_like(self.name, eps, g)
        return u + rho * eps


def _check_like(name: str, eps: PyTree, grads: PyTree) -> None:
    """InputError unless ``eps`` has the structure, shapes and dtypes of ``grads``
    (checked when traced: these are static properties)."""
    want, got = jax.tree_util.tree_structure(grads), jax.tree_util.tree_structure(eps)
    if want != got:
        raise InputError(
            f"rule {name}: direction returned a pytree of structure {got}; "
            f"it must have the gradient's structure {want}"
        )
    for path, g, e in zip(
        (
            jax.tree_util.keystr(p) or "eps"
            for p, _ in jax.tree_util.tree_flatten_with_path(grads)[0]
        ),
        jax.tree_util.tree_leaves(grads),
        jax.tree_util.tree_leaves(eps),
        strict=True,
    ):
        shape, dtype = jnp.shape(e), jnp.result_type(e)
        if shape != jnp.shape(g) or dtype != jnp.result_type(g):
            raise InputError(
                f"rule {name}: direction returned {path} of shape {shape} and dtype {dtype}; "
                f"it must match the gradient's shape {jnp.shape(g)} and dtype "
                f"{jnp.result_type(g)} (no broadcasting, no casting)"
            )


def _random_l2_direction(g: PyTree, batch_ndim: int, key: Array, step: Array) -> PyTree:
    leaves, treedef = jax.tree_util.tree_flatten(g)
    keys = jax.random.split(key, len(leaves))
    z = [
        jax.random.normal(k, jnp.shape(leaf), jnp.result_type(leaf))
        for k, leaf in zip(keys, leaves, strict=True)
    ]
    return _l2_direction(jax.tree_util.tree_unflatten(treedef, z), batch_ndim)


GD = PerturbationRule(
    "gd", None, True, _log_form(_gd_log_c, lead=_gd_lead, blowup_won_by_rate=True)
)
r"""Gradient descent: no ascent step (\(\varepsilon = 0\)), so it needs no rho."""
SAM_L2 = PerturbationRule(
    "sam-l2",
    _l2_direction,
    True,
    _log_form(
        _l2_log_c,
        _l2_step_collapse,
        _l2_deep_collapse,
        _l2_lead,
        returns=(_l2_past_fixed_point, _fate.WINS_LATER),
        blowup_won_by_rate=True,
        empties=_l2_middle_empties,
        hands_on=_l2_hands_on,
        follows=_l2_follows,
    ),
    layers_alike=_l2_alike,
)
r"""l2-SAM: \(\varepsilon = g / \lVert g\rVert_2\) over every layer (scale invariant)."""
SAM_LINF = PerturbationRule(
    "sam-linf",
    _linf_direction,
    True,
    BalancedFlow("linf", _linf_field, _linf_fate),
    layers_alike=_linf_alike,
)
r"""linf-SAM: \(\varepsilon = \operatorname{sign}(g)\) elementwise (scale invariant)."""
USAM = PerturbationRule(
    "usam",
    _usam_direction,
    False,
    _log_form(
        _usam_log_c,
        _usam_step_collapse,
        lead=_usam_lead,
        finite=_usam_finite,
        returns=(_usam_returns, _fate.RETURNS),
        blowup_won_by_rate=True,
    ),
    layers_alike=_usam_alike,
)
r"""Unnormalised SAM (USAM), a control: \(\varepsilon = g\) (not scale invariant)."""

RULES: dict[str, PerturbationRule] = {r.name: r for r in (GD, SAM_L2, SAM_LINF, USAM)}
METHODS: tuple[str, ...] = tuple(inputs.METHODS)
"""The names of the built-in rules (listed, without JAX, in :data:`samflow.inputs.METHODS`)."""

RANDOM_L2 = PerturbationRule("random-l2", _random_l2_direction, True, random=True)
"""A control, not a method of the paper: a direction drawn uniformly on the unit sphere
at every step, ``eps = z / ||z||_2`` with ``z ~ N(0, I)`` (a new ``z`` per step and per
batch element), so ``theta + rho * eps`` lies at distance ``rho`` in a random direction.
An example of a random rule; it is not in :data:`METHODS`."""


def get_rule(method: str | PerturbationRule) -> PerturbationRule:
    """The rule of ``method`` (a name or a rule).

    Args:
        method: a name of :data:`METHODS` (``gd``, ``sam-l2``, ``sam-linf``, ``usam``)
            or a :class:`PerturbationRule`, which is returned as it is.

    Returns:
        The :class:`PerturbationRule`.

    Raises:
        InputError: ``method`` is neither a known name nor a rule (naming it).

    Examples:
        >>> import samflow
        >>> samflow.METHODS
        ('gd', 'sam-l2', 'sam-linf', 'usam')
        >>> samflow.get_rule("sam-l2") is samflow.SAM_L2
        True
        >>> samflow.get_rule("sam")
        Traceback (most recent call last):
            ...
        samflow.errors.InputError: unknown method 'sam'; choose one of gd, sam-l2, ...
    """
    if isinstance(method, PerturbationRule):
        return method
    try:
        return RULES[method]
    except (KeyError, TypeError):
        raise InputError(
            f"unknown method {method!r}; choose one of {', '.join(METHODS)} "
            "or pass a PerturbationRule"
        ) from None


def check_rho(rule: PerturbationRule, rho, ignored_ok: bool = False) -> float:
    """Validated ``rho`` for ``rule`` (:func:`samflow.inputs.check_rho`)."""
    return inputs.check_rho(rule, rho, ignored_ok)
