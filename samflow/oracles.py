r"""The field's known results on diagonal linear networks, solved without the engine.

NumPy and SciPy only: these are the independent answers the engine's flows are tested
against (``tests/test_oracles.py``) and that the ``kernel_rich`` and
``saddle_to_saddle`` figures draw. The statements and references are in
docs/theory/oracles.md#oracles.

Setting: regression data \(X\) ``[n, d]`` (\(n < d\), full row rank), real \(y\)
``[n]``, the squared loss \(L(\beta) = (1/(2n)) \lVert X \beta - y\rVert_2^2\), whose gradient is
\(g(\beta) = X^T (X \beta - y) / n\), and the signed diagonal network
\(\beta = u^2 - v^2\) started at \(u = v = \alpha\) (so \(\beta(0) = 0\)), trained by
gradient flow \(\mathrm{d}(u, v)/\mathrm{d}t = -\nabla_{(u, v)} L\).

**The flow in closed form up to one integral** (derived here). \(\mathrm{d}L/\mathrm{d}u = 2 u g\),
\(\mathrm{d}L/\mathrm{d}v = -2 v g\), so \(\mathrm{d} \log u / \mathrm{d}t = -2 g\) and
\(\mathrm{d} \log v / \mathrm{d}t = 2 g\). With the integrated negative gradient
\(S(t) = -\int_0^t g(\beta(t')) \,\mathrm{d}t'\) ``[d]``, \(u = \alpha e^{2 S}\),
\(v = \alpha e^{-2 S}\) and

\[
\beta(t) = \alpha^2 (e^{4 S} - e^{-4 S}) = 2 \alpha^2 \sinh(4 S(t)), \qquad
\frac{\mathrm{d}S}{\mathrm{d}t} = -g(\beta).
\]

\(S\) never overflows where \(u\) and \(v\) would, and \(S(t)\) lies in the row space
of \(X\) (\(g\) does). :func:`u2v2_gradient_flow` integrates it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.integrate import solve_ivp
from scipy.optimize import linprog, lsq_linear

# Newton on the dual stops when the interpolation residual ||X beta - y|| is this
# fraction of ||y||: a few thousand roundings of float64, above the floor of the residual
# itself (measured 1e-15 to 4e-13 from alpha = 100 down to 1e-100).
NEWTON_RTOL = 1e-12
MAX_DUAL_MOVE = 2.0


def _problem(X, y) -> tuple[np.ndarray, np.ndarray]:
    X = np.atleast_2d(np.asarray(X, dtype=np.float64))
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    if X.shape[0] != y.size:
        raise ValueError(f"X has {X.shape[0]} rows but y has {y.size} entries")
    return X, y


def squared_loss(X, y, beta) -> np.ndarray:
    r"""\((1/(2n)) \lVert X \beta - y\rVert^2\) for ``beta`` ``[..., d]``.

    Examples:
        >>> from samflow.oracles import squared_loss
        >>> float(squared_loss([[1.0, 0.0], [0.0, 2.0]], [1.0, 2.0], [0.0, 0.0]))  # (1 + 4) / 4
        1.25
    """
    X, y = _problem(X, y)
    r = np.asarray(beta) @ X.T - y
    return 0.5 * np.mean(r**2, axis=-1)


def woodworth_potential(beta, alpha: float) -> np.ndarray:
    r"""\(Q_\alpha(\beta) = \alpha^2 \sum_i q(\beta_i / \alpha^2)\),
    \(q(z) = 2 - \sqrt{4 + z^2} + z \operatorname{arcsinh}(z / 2)\) (Woodworth et al. 2020), over
    the last axis of ``beta``.

    Examples:
        >>> import numpy as np
        >>> from samflow.oracles import woodworth_potential
        >>> float(woodworth_potential([0.0, 2.0], alpha=1.0).round(4))  # 2 - sqrt(8) + 2 asinh(1)
        0.9343
    """
    z = np.asarray(beta, dtype=np.float64) / alpha**2
    return alpha**2 * np.sum(2 - np.sqrt(4 + z**2) + z * np.arcsinh(z / 2), axis=-1)


def min_l2_interpolant(X, y) -> np.ndarray:
    r"""\(\operatorname{argmin} \lVert \beta\rVert_2\) s.t. \(X \beta = y\): \(X^+ y\) (the kernel
    regime, alpha -> inf).

    Examples:
        >>> from samflow.oracles import min_l2_interpolant
        >>> min_l2_interpolant([[1.0, 2.0]], [2.0]).round(6).tolist()  # y x / ||x||^2
        [0.4, 0.8]
    """
    X, y = _problem(X, y)
    return np.linalg.pinv(X) @ y


def min_l1_interpolant(X, y) -> np.ndarray:
    r"""\(\operatorname{argmin} \lVert \beta\rVert_1\) s.t. \(X \beta = y\) (the rich regime, alpha
    -> 0).

    A linear program in \(\beta = p - q\), \(p, q \ge 0\): \(\min \sum(p + q)\) s.t.
    \(X (p - q) = y\) (HiGHS). For data in general position the solution is unique
    and has at most n nonzero coordinates.

    Examples:
        >>> from samflow.oracles import min_l1_interpolant
        >>> min_l1_interpolant([[1.0, 2.0]], [2.0]).round(6).tolist()  # all on the larger x_j
        [0.0, 1.0]
    """
    X, y = _problem(X, y)
    d = X.shape[1]
    res = linprog(np.ones(2 * d), A_eq=np.c_[X, -X], b_eq=y, bounds=[(0, None)] * (2 * d))
    if res.status != 0:
        raise RuntimeError(f"min-l1 linear program failed: {res.message}")
    return res.x[:d] - res.x[d:]


def _dual_terms(s: np.ndarray, log_c: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``c (cosh(s) - 1)``, ``c sinh(s)``, ``c cosh(s)`` with ``c = e^log_c``, each finite
    wherever its value is.

    For ``|s| <= 1`` straight from ``sinh``, ``cosh`` and ``cosh(s) - 1 = 2 sinh(s/2)^2``
    (no cancellation at tiny ``s``, i.e. large alpha); beyond, ``c e^(+-s)`` as one
    exponential each (no overflow of ``e^|s|`` when ``c`` is tiny, i.e. small alpha).
    """
    small = np.abs(s) <= 1.0
    near = np.where(small, s, 0.0)
    far = np.where(small, 2.0, s)
    up, down = np.exp(far + log_c), np.exp(-far + log_c)
    c = np.exp(log_c)
    sinh = np.where(small, c * np.sinh(near), 0.5 * (up - down))
    cosh = np.where(small, c * np.cosh(near), 0.5 * (up + down))
    conj = np.where(small, 2 * c * np.sinh(0.5 * near) ** 2, 0.5 * (up + down) - c)
    return conj, sinh, cosh


@dataclass(frozen=True)
class Interpolant:
    r"""Woodworth's interpolant and the certificate it was solved with.

    ``beta`` ``[d]``; ``nu`` ``[n]``, the dual variable: \(\beta = 2 \alpha^2 \sinh(X^T \nu)\);
    ``residual``: \(\lVert X \beta - y\rVert / \lVert y\rVert\) (primal feasibility; stationarity
    holds by construction); ``newton_steps``.

    Examples:
        >>> from samflow.oracles import woodworth_interpolant
        >>> solved = woodworth_interpolant([[1.0, 2.0]], [2.0], alpha=1.0)
        >>> solved.beta.shape, solved.nu.shape, bool(solved.residual < 1e-10)
        ((2,), (1,), True)
    """

    beta: np.ndarray
    nu: np.ndarray
    residual: float
    newton_steps: int


def woodworth_interpolant(X, y, alpha: float, *, max_steps: int = 500) -> Interpolant:
    r"""\(\operatorname{argmin} Q_\alpha(\beta)\) s.t. \(X \beta = y\) (Woodworth et al. 2020,
    Theorem 1): where gradient flow on \(u^2 - v^2\) from \(u = v = \alpha\) converges when it
    interpolates.

    **Why this is the limit** (derived here, module docstring):
    \(\beta(t) = 2 \alpha^2 \sinh(4 S(t))\) with \(S(t)\) in the row space of \(X\); if the flow
    converges to an interpolant \(\beta_\infty\), then \(\beta_\infty = 2 \alpha^2 \sinh(X^T \nu)\)
    for some \(\nu\) ``[n]`` (\(X^T \nu = 4 S(\infty)\)). \(Q_\alpha\) is strictly convex with
    \(\mathrm{d}Q_\alpha/\mathrm{d}\beta_i = q'(\beta_i / \alpha^2) = \operatorname{arcsinh}(\beta_i
    / (2 \alpha^2))\) (the \(\sqrt{\cdot}\) terms of \(q'\) cancel), so the KKT conditions of
    \(\min Q_\alpha\) s.t. \(X \beta = y\) are \(\operatorname{arcsinh}(\beta / (2 \alpha^2)) = X^T
    \nu\) and \(X \beta = y\): exactly the flow's limit. Neither the constants of the loss (its
    \(1/(2n)\)) nor the time scale enter: only that \(S\) stays in the row space.

    **How it is solved.** The convex conjugate of \(Q_\alpha\) is
    \(Q^*(s) = \sum_i 2 \alpha^2 (\cosh(s_i) - 1)\), so the dual is the smooth, strictly
    convex (``X`` of full row rank) unconstrained problem in \(n\) variables

    \[
    \min_\nu F(\nu) = 2 \alpha^2 \sum_i \bigl(\cosh((X^T \nu)_i) - 1\bigr) - y^T \nu,
    \]

    \(\nabla F = X \beta(\nu) - y\) (the interpolation residual),
    \(\nabla^2 F = X \operatorname{diag}(2 \alpha^2 \cosh(X^T \nu)) X^T\). Damped Newton (Armijo
    backtracking) from \(\nu = 0\) converges globally and then quadratically.
    \(2 \alpha^2 \cosh(s)\) is evaluated as
    \(e^{s + \log 2 \alpha^2} / 2 + e^{-s + \log 2 \alpha^2} / 2\), so alpha can be as small as the
    data allow (the solution needs \(\lvert X^T \nu\rvert \sim 2 \log(1/\alpha)\)), and ``cosh(s) -
    1`` as \(2 \sinh(s/2)^2\), so large alpha (tiny \(s\)) loses nothing to cancellation. Each step
    moves \(X^T \nu\) by at most ``MAX_DUAL_MOVE`` (from \(\nu = 0\) at alpha = 1e-8 that is ~20
    steps). Stops when the residual is below ``NEWTON_RTOL`` \(\cdot \lVert y\rVert\); raises if it
    does not get there.

    Examples:
        Between the rich (min-l1) and the kernel (min-l2) interpolants as alpha grows:

        >>> from samflow.oracles import woodworth_interpolant
        >>> X, y = [[1.0, 2.0]], [2.0]
        >>> woodworth_interpolant(X, y, alpha=1e-3).beta.round(3).tolist()  # near [0, 1]
        [0.001, 1.0]
        >>> woodworth_interpolant(X, y, alpha=1e3).beta.round(3).tolist()  # [0.4, 0.8]
        [0.4, 0.8]
    """
    X, y = _problem(X, y)
    if not alpha > 0:
        raise ValueError(f"alpha must be positive, got {alpha}")
    log_c = np.log(2.0) + 2.0 * np.log(alpha)  # c = 2 alpha^2
    y_norm = np.linalg.norm(y)

    def dual(nu):  # F(nu) (up to a constant), beta(nu), 2 alpha^2 cosh(X^T nu)
        with np.errstate(over="ignore", invalid="ignore"):
            conj, beta, ch = _dual_terms(X.T @ nu, log_c)
        return float(np.sum(conj) - y @ nu), beta, ch

    nu = np.zeros(X.shape[0])
    F, beta, ch = dual(nu)
    grad = X @ beta - y
    for step in range(max_steps + 1):
        residual = float(np.linalg.norm(grad) / y_norm)
        if residual <= NEWTON_RTOL:
            return Interpolant(beta=beta, nu=nu, residual=residual, newton_steps=step)
        if step == max_steps:
            break
        # lstsq: at extreme alpha (1e-100) cosh underflows on most coordinates and the
        # Hessian, positive definite in exact arithmetic, is singular in float64.
        direction = -np.linalg.lstsq((X * ch) @ X.T, grad, rcond=None)[0]
        # Far from the solution (small alpha, nu = 0) the Newton step is huge: move
        # X^T nu by at most MAX_DUAL_MOVE per step, where e^(X^T nu) changes by e^2.
        direction *= min(1.0, MAX_DUAL_MOVE / np.max(np.abs(X.T @ direction)))
        slope = grad @ direction
        t = 1.0
        while t >= 1e-12:
            trial = nu + t * direction
            F_new, beta_new, ch_new = dual(trial)
            grad_new = X @ beta_new - y
            # Armijo; or, where F's decrease is below its rounding (the last steps),
            # F no higher than rounding and the residual halved.
            if np.isfinite(F_new) and (
                F_new <= F + 1e-4 * t * slope
                or (
                    F_new <= F + 1e-12 * (1 + abs(F))
                    and np.linalg.norm(grad_new) < 0.5 * np.linalg.norm(grad)
                )
            ):
                break
            t *= 0.5
        else:
            break  # no decrease left at float64
        nu, F, beta, ch, grad = trial, F_new, beta_new, ch_new, grad_new
    raise RuntimeError(
        f"Woodworth's dual did not converge at alpha = {alpha:g}: residual {residual:.2e}"
    )


def u2v2_beta(S, alpha: float) -> np.ndarray:
    r"""\(\beta = 2 \alpha^2 \sinh(4 S)\) for ``S`` ``[..., d]``, as
    \(\operatorname{sign}(S) (e^{4\lvert S\rvert + \log \alpha^2} - e^{-4\lvert S\rvert + \log
    \alpha^2})\): finite wherever beta is, for any alpha > 0.

    Examples:
        >>> from samflow.oracles import u2v2_beta
        >>> u2v2_beta([0.0, 0.25], alpha=1.0).round(4).tolist()  # 2 sinh(1) = 2.3504
        [0.0, 2.3504]
    """
    S = np.asarray(S, dtype=np.float64)
    log_a2, a = 2.0 * np.log(alpha), np.abs(S)
    return np.sign(S) * (np.exp(4 * a + log_a2) - np.exp(-4 * a + log_a2))


def u2v2_gradient_flow(
    X,
    y,
    alpha: float,
    t_eval,
    *,
    rtol: float = 1e-10,
    atol: float = 1e-12,
    max_step: float = 1.0,
    events=None,
):
    r"""Gradient flow on \(u^2 - v^2\) from \(u = v = \alpha\), in log space (SciPy).

    The state is \(S\) ``[d]`` of the module docstring, \(\mathrm{d}S/\mathrm{d}t = -g(\beta)\),
    \(\beta = 2 \alpha^2 \sinh(4 S)\), evaluated as
    \(\operatorname{sign}(S) (e^{4\lvert S\rvert + \log \alpha^2} - e^{-4\lvert S\rvert + \log
    \alpha^2})\) so that alpha down to 1e-100 neither underflows nor overflows (\(\lvert S\rvert\)
    is about \(\log(1/\alpha) / 2\) where a coordinate is active). The Jacobian
    \(-X^T X \operatorname{diag}(8 \alpha^2 \cosh(4 S)) / n\) is handed to the implicit solver
    (LSODA), since near an interpolant the field is stiff while the plateaus are long. ``max_step``:
    on a plateau the field is nearly constant and LSODA's steps grow until one overshoots into
    overflow (which it reports as success, with NaN): steps are capped, and a non-finite state
    raises.

    ``t_eval`` ``[T]`` times to return; ``events`` passed to ``solve_ivp`` (functions of
    ``(t, S)``; :func:`u2v2_beta` maps \(S\) to beta). Returns the ``solve_ivp`` result
    with \(\beta\) ``[T, d]`` added.

    Examples:
        The flow from a small start reaches Woodworth's interpolant:

        >>> from samflow.oracles import u2v2_gradient_flow, woodworth_interpolant
        >>> X, y = [[1.0, 2.0]], [2.0]
        >>> solution = u2v2_gradient_flow(X, y, alpha=0.1, t_eval=[0.0, 200.0])
        >>> solution.beta.shape
        (2, 2)
        >>> solution.beta[-1].round(3).tolist()
        [0.097, 0.952]
        >>> woodworth_interpolant(X, y, alpha=0.1).beta.round(3).tolist()
        [0.097, 0.952]
    """
    X, y = _problem(X, y)
    n = X.shape[0]
    log_a2 = 2.0 * np.log(alpha)

    def field(t, S):
        return -X.T @ (X @ u2v2_beta(S, alpha) - y) / n

    def jacobian(t, S):
        dbeta = 4 * (np.exp(4 * np.abs(S) + log_a2) + np.exp(-4 * np.abs(S) + log_a2))
        return -(X.T @ X) * dbeta[None, :] / n

    t_eval = np.asarray(t_eval, dtype=np.float64)
    sol = solve_ivp(
        field,
        (0.0, float(t_eval[-1])),
        np.zeros(X.shape[1]),
        method="LSODA",
        t_eval=t_eval,
        jac=jacobian,
        rtol=rtol,
        atol=atol,
        max_step=max_step,
        events=events,
    )
    if sol.status < 0 or not np.all(np.isfinite(sol.y)):
        raise RuntimeError(f"u2-v2 flow failed at alpha = {alpha:g}: {sol.message}")
    sol.beta = u2v2_beta(sol.y.T, alpha)
    return sol


@dataclass(frozen=True)
class Saddles:
    r"""The limit of the \(u^2 - v^2\) gradient flow as alpha -> 0 (Pesme & Flammarion 2023).

    ``times`` ``[K + 1]``: jump times in units of \(t / \log(1/\alpha)\), ``times[0] = 0``;
    ``betas`` ``[K + 1, d]``: the saddle visited after each jump (``betas[0] = 0``, the
    start; the last one interpolates); ``s`` ``[K + 1, d]``: the rescaled integrated
    gradient at each jump (\(\lvert s_i\rvert \le 1\); \(\lvert s_i\rvert = 1\) where a coordinate
    may be nonzero); ``losses`` ``[K + 1]``: ``L(betas[k])``; ``entering`` ``[K + 1]``: the
    coordinate (0-based; -1 at the start) whose \(\lvert s_i\rvert\) reached 1 at each jump.

    Examples:
        >>> from samflow.oracles import saddle_to_saddle
        >>> path = saddle_to_saddle([[1.0, 2.0]], [2.0])
        >>> path.betas.shape, path.entering.tolist()  # the start, then coordinate 1
        ((2, 2), [-1, 1])
    """

    times: np.ndarray
    betas: np.ndarray
    s: np.ndarray
    losses: np.ndarray
    entering: np.ndarray

    @property
    def active_sets(self) -> list[tuple[int, ...]]:
        """The support of each saddle (0-based coordinates)."""
        return [tuple(np.flatnonzero(b).tolist()) for b in self.betas]


def saddle_to_saddle(X, y, *, max_jumps: int = 200) -> Saddles:
    r"""The jump times and saddles of the vanishing-alpha \(u^2 - v^2\) flow (the algorithm
    of Pesme & Flammarion 2023, in this module's normalisation).

    **Derivation of the constants** (derived here). With \(S\) of the module docstring
    and \(\lvert \beta_i\rvert = 2 \alpha^2 \lvert \sinh(4 S_i)\rvert \sim \alpha^2 e^{4 \lvert
    S_i\rvert}\), define the rescaled time \(T = t / \log(1/\alpha)\) and
    \(s = 2 S / \log(1/\alpha)\): then
    \(\lvert \beta_i\rvert \sim \alpha^{2 - 2 \lvert s_i\rvert}\), so as alpha -> 0 a coordinate is
    zero while \(\lvert s_i\rvert < 1\) and can be nonzero only at \(\lvert s_i\rvert = 1\), with
    the sign of \(s_i\); and
    \(\mathrm{d}s/\mathrm{d}T = 2 \mathrm{d}S/\mathrm{d}t \log(1/\alpha) / \log(1/\alpha) = -2
    g(\beta)\). In the limit \(s\) moves at the constant velocity \(-2 g(\beta^k)\) while beta rests
    on a saddle \(\beta^k\), until a free coordinate's \(\lvert s_i\rvert\) reaches 1; then beta
    jumps (in \(T\)-time zero; it takes ``O(1)`` of \(t\)) to

    \[
    \begin{gathered}
    \beta^{k+1} = \operatorname{argmin} L(\beta) \quad \text{s.t.} \quad
    \beta_i \ge 0 \text{ where } s_i = 1, \\
    \beta_i \le 0 \text{ where } s_i = -1, \quad \beta_i = 0 \text{ where } \lvert s_i\rvert < 1,
    \end{gathered}
    \]

    a sign-constrained least-squares problem (``scipy.optimize.lsq_linear``, BVLS, an
    exact active-set method). Its KKT conditions give \(g_i = 0\) where \(\beta_i \ne 0\)
    (those \(s_i\) stay at +-1) and \(s_i g_i \ge 0\) on the boundary where \(\beta_i = 0\):
    \(s_i\) is then pushed back inside (a coordinate leaves the support and is free
    again). The first jump is at
    \(T_1 = 1 / (2 \lVert g(0)\rVert_\infty) = n / (2 \lVert X^T y\rVert_\infty)\). The run ends at
    a saddle with \(g = 0\) (with \(n < d\) in general position, an
    interpolant: the minimum-l1 one, by the paper's result and checked in the tests).

    For a loss ``c L`` (another normalisation), every time divides by \(c\). Assumes the
    generic case of the paper: one coordinate reaches the boundary at a time and each
    constrained problem has a unique solution (``X`` restricted to the support has full
    column rank).

    Examples:
        One point: the larger coordinate enters first, at once the interpolant:

        >>> from samflow.oracles import saddle_to_saddle
        >>> path = saddle_to_saddle([[1.0, 2.0]], [2.0])
        >>> path.betas[-1].round(6).tolist(), path.times.round(4).tolist()
        ([0.0, 1.0], [0.0, 0.125])
    """
    X, y = _problem(X, y)
    n, d = X.shape
    s = np.zeros(d)
    beta = np.zeros(d)
    boundary = np.zeros(d)  # sign(s_i) where |s_i| = 1 (beta_i may be nonzero), else 0
    scale = np.linalg.norm(X.T @ y) / n  # |g(0)|: the gradients' scale, for the zero tests
    T = 0.0
    record = {"times": [0.0], "betas": [beta], "s": [s], "entering": [-1]}
    for _ in range(max_jumps):
        g = X.T @ (X @ beta - y) / n
        if np.linalg.norm(g) <= 1e-12 * scale:
            break
        # a boundary coordinate at 0 pushed inwards (s_i g_i > 0) is free again
        boundary[(boundary != 0) & (beta == 0) & (boundary * g > 1e-12 * scale)] = 0
        rate = -2.0 * g
        free = (boundary == 0) & (np.abs(rate) > 1e-12 * scale)
        with np.errstate(divide="ignore", invalid="ignore"):
            wait = np.where(rate > 0, (1 - s) / rate, (-1 - s) / rate)
        wait = np.where(free, wait, np.inf)
        i = int(np.argmin(wait))
        if not np.isfinite(wait[i]):
            break
        T += wait[i]
        s = np.where(boundary != 0, boundary, s + wait[i] * rate)
        s[i] = boundary[i] = np.sign(rate[i])
        cols = np.flatnonzero(boundary)
        lower = np.where(boundary[cols] > 0, 0.0, -np.inf)
        upper = np.where(boundary[cols] > 0, np.inf, 0.0)
        fit = lsq_linear(X[:, cols], y, bounds=(lower, upper), method="bvls", tol=1e-15)
        beta = np.zeros(d)
        beta[cols] = fit.x
        record["times"].append(T)
        record["betas"].append(beta)
        record["s"].append(s.copy())
        record["entering"].append(i)
    else:
        raise RuntimeError(f"saddle_to_saddle: no interpolant after {max_jumps} jumps")
    betas = np.array(record["betas"])
    return Saddles(
        times=np.array(record["times"]),
        betas=betas,
        s=np.array(record["s"]),
        losses=squared_loss(X, y, betas),
        entering=np.array(record["entering"]),
    )
