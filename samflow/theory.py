r"""Closed forms of docs/theory/balanced.md#balanced-initialisation (balanced initialisation, one
point x = mu).

Balanced means every layer equals the same vector \(\alpha\) ``[d]`` (or a scalar);
all layers then stay equal to \(u(\tau)\) and \(\beta = u^L\). These functions are the
independent checks the engine is tested against, written straight from the algebra.
Coordinates are labelled 1..d where a label is returned.
"""

from __future__ import annotations

import numpy as np


def _vec(alpha, mu) -> tuple[np.ndarray, np.ndarray]:
    mu = np.asarray(mu, dtype=np.float64)
    return np.broadcast_to(np.asarray(alpha, dtype=np.float64), mu.shape), mu


def gd_u(alpha, mu, tau, depth: int) -> np.ndarray:
    r"""GD rescaled flow \(\mathrm{d}u/\mathrm{d}\tau = \mu u^{L-1}\) for L = 1 and L = 2, ``[...,
    d]``.

    L = 1: \(u = \alpha + \mu \tau\); L = 2: \(u = \alpha \exp(\mu \tau)\). ``tau`` may be an
    array ``[T]``, giving ``[T, d]``.
    """
    alpha, mu = _vec(alpha, mu)
    tau = np.asarray(tau, dtype=np.float64)[..., None]
    if depth == 1:
        return alpha + mu * tau
    if depth == 2:
        return alpha * np.exp(mu * tau)
    raise ValueError("closed form of the GD flow only for depth 1 and 2 (L >= 3 blows up)")


def blowup_tau(alpha, mu, depth: int, rho: float = 0.0) -> np.ndarray:
    r"""Per-coordinate finite blow-up time ``[d]`` for L >= 3 (\(\infty\) if none).

    GD (rho = 0): \(\mathrm{d}u/\mathrm{d}\tau = \mu u^{L-1}\) gives
    \(u^{-(L-2)} = \alpha^{-(L-2)} - (L-2) \mu \tau\), so
    \(\tau_j^* = \alpha_j^{-(L-2)} / ((L-2) \mu_j)\). linf-SAM with odd L: the excess
    \(v = u - \rho\) obeys the same equation,
    \(\tau_j^* = (\alpha_j - \rho)^{-(L-2)} / ((L-2) \mu_j)\) for \(\alpha_j > \rho\); coordinates
    with \(\alpha_j \le \rho\) never blow up.
    """
    if depth < 3:
        raise ValueError("finite-time blow-up needs depth >= 3")
    alpha, mu = _vec(alpha, mu)
    excess = alpha - rho
    with np.errstate(divide="ignore"):
        tau = excess ** (-(depth - 2.0)) / ((depth - 2) * mu)
    return np.where(excess > 0, tau, np.inf)


def linf_l2_u(alpha, mu, rho: float, tau) -> np.ndarray:
    r"""linf-SAM flow at L = 2: \(u_j - \rho = (\alpha_j - \rho) \exp(\mu_j \tau)\), ``[T, d]``.

    A coordinate with \(\alpha_j < \rho\) reaches 0 at \(\tau = \log(\rho/(\rho-\alpha_j))/\mu_j\)
    and stays there (the sign of m flips at 0: Filippov sliding).
    """
    alpha, mu = _vec(alpha, mu)
    tau = np.asarray(tau, dtype=np.float64)[..., None]
    u = rho + (alpha - rho) * np.exp(mu * tau)
    return np.where(alpha < rho, np.maximum(u, 0.0), u)


LIMIT_FINITE = -2
"""Label of a limit that is a finite nonzero point (as ``samflow.regimes.LIMIT_FINITE``)."""


def linf_limit_index(alpha, mu, rho: float, depth: int = 2) -> int:
    r"""Limit of balanced linf-SAM on one point (Corollary 3.5), a label 1..d, 0 or -2.

    Derivation (docs/theory/balanced.md#balanced-linf-sam). While \(u > 0\),
    \(\operatorname{sign}(m_j) = +1\) and
    the excess \(v_j = u_j - \rho\) obeys the GD flow
    \(\mathrm{d}v_j/\mathrm{d}\tau = \mu_j v_j^{L-1}\):

    - \(\alpha_j > \rho\): \(v_j\) grows, like \(\exp(\mu_j \tau)\) at L = 2, and for
      L >= 3 blows up at \(\tau_j^* = (\alpha_j - \rho)^{-(L-2)} / ((L-2) \mu_j)\). The
      coordinate that grows fastest (L = 2) or blows up first (L >= 3) is the limit
      direction \(e_j^*\), with one formula for every L >= 2:

        \[
        j^* = \operatorname{argmax}\{\mu_j (\alpha_j - \rho)^{L-2} : \alpha_j > \rho\}.
        \]

    - \(\alpha_j < \rho\) (\(v_j < 0\)): for even L, \(v^{L-1} < 0\) and \(u_j\) falls to
      0 in finite time, where the sign of \(m_j\) flips and 0 is absorbing; for odd L,
      \(v^{L-1} > 0\) and \(u_j\) creeps up towards ``rho``, a finite limit.

    So without an \(\alpha_j > \rho\) the limit is 0 (collapse) for even L and a finite
    nonzero point (``-2``) for odd L; a coordinate exactly at ``rho`` is a fixed point
    and gives a finite nonzero limit (``-2``) for every L. Ties in the argmax have
    measure zero and are not resolved (the lowest label is returned).

    Args:
        alpha: ``[d]`` (or a scalar) the balanced start, entries > 0.
        mu: ``[d]`` the data point, entries > 0.
        rho: the linf-SAM radius, >= 0.
        depth: L >= 2 (at L = 1 the field does not depend on the weights).
    """
    if depth < 2:
        raise ValueError("the linf-SAM limit index needs depth >= 2")
    alpha, mu = _vec(alpha, mu)
    grows = alpha > rho
    if grows.any():
        speed = np.where(grows, mu * np.abs(alpha - rho) ** (depth - 2), -np.inf)
        return int(np.argmax(speed)) + 1
    if depth % 2 == 1 or np.any(alpha == rho):
        return LIMIT_FINITE
    return 0


def l2sam_l1_u(alpha, mu, tau) -> np.ndarray:
    r"""l2-SAM at L = 1: the perturbation does not change the gradient,
    \(u = \alpha + \mu \tau\)."""
    return gd_u(alpha, mu, tau, 1)


def l2sam_l2_alpha_bounds(mu, rho: float) -> tuple[float, float]:
    r"""Instantaneous bounds at tau = 0 for uniform alpha, L = 2
    (docs/theory/balanced.md#balanced-l2-sam).

    With \(N_0 = \sqrt{2} \alpha \lVert \mu\rVert\) and
    \(\mathrm{d} \log u_j/\mathrm{d}\tau = \mu_j (1 - \rho \mu_j / N)\): every coordinate shrinks
    when \(\alpha < \rho \mu_{\min} / (\sqrt{2} \lVert \mu\rVert)\) (collapse bound); the
    major coordinate grows fastest from the start when
    \(\alpha \ge \sqrt{2} \rho \mu_{\max} / \lVert \mu\rVert\) (direct bound). Bounds, not
    boundaries: the exact sequential/direct edge is :func:`l2sam_l2_direct_edge`, below this bound.
    """
    mu = np.asarray(mu, dtype=np.float64)
    norm = np.linalg.norm(mu)
    return rho * mu.min() / (np.sqrt(2) * norm), np.sqrt(2) * rho * mu.max() / norm


def l2sam_l2_direct_edge(mu, rho: float) -> float:
    r"""Exact sequential/direct edge in uniform alpha for balanced l2-SAM at L = 2.

    Derivation (docs/theory/balanced.md#direct-edge-depth-2). With every layer equal to \(u\) the
    flow is
    \(\mathrm{d} \log u_j/\mathrm{d}\tau = g_j = \mu_j (1 - \rho \mu_j / N)\),
    \(N = \lVert m\rVert_2 = \sqrt{2 \sum_k \mu_k^2 u_k^2}\). For two coordinates

    \[
    \begin{aligned}
    g_j - g_d &= (\mu_j - \mu_d) - \rho (\mu_j^2 - \mu_d^2) / N \\
              &= (\mu_j - \mu_d) (1 - \rho (\mu_j + \mu_d) / N),
    \end{aligned}
    \]

    so with \(\mu_j < \mu_d\) the major coordinate \(d\) grows faster than \(j\) iff
    \(N > \rho (\mu_j + \mu_d)\); the binding \(j\) is the runner-up ``d-1``. From a
    uniform start (all \(\lvert \beta_j\rvert\) tied, \(N_0 = \sqrt{2} \alpha \lVert \mu\rVert\)):

    - \(N_0 < \rho (\mu_{d-1} + \mu_d)\): \(g_{d-1} > g_d\) at tau = 0, so \(d\) does not
      lead at small tau > 0 (not direct);
    - \(N_0 \ge \rho (\mu_{d-1} + \mu_d)\): then \(N_0 > \rho \mu_d\), every \(g_k > 0\), so
      every \(u_k\) and hence \(N\) grows, and \(N\) never falls back below \(N_0\);
      so \(N(\tau) > \rho (\mu_j + \mu_d)\) for every \(j < d\) and tau > 0, \(g_d > g_j\)
      throughout, and \(\log u_d - \log u_j = \int_0^\tau (g_d - g_j) > 0\): \(d\) leads
      at every tau > 0 (proven for the flow, not only observed).

    Hence the edge \(\alpha^* = \rho (\mu_{(d)} + \mu_{(d-1)}) / (\sqrt{2} \lVert \mu\rVert_2)\)
    with \(\mu_{(d)} > \mu_{(d-1)}\) the two largest entries (0.9037 for mu = (1, 2, 3, 4),
    rho = 1). It is linear in rho: at L = 2 the flow depends on alpha / rho only.
    A classifier that sees recorded times only can call points just below it direct
    (their non-major lead ends before the first record). The depth-2 case of
    :func:`l2sam_direct_edge`.

    Args:
        mu: ``[d]`` the data point, every entry > 0, d >= 2, largest entry unique.
        rho: the SAM radius, >= 0.
    """
    return l2sam_direct_edge(mu, rho, 2)


def _top_two(mu) -> tuple[float, float, float]:
    """The largest and second largest entries of a checked ``mu`` and its l2 norm."""
    mu = np.asarray(mu, dtype=np.float64)
    if mu.ndim != 1 or mu.size < 2 or not np.all(np.isfinite(mu)) or np.any(mu <= 0):
        raise ValueError(f"mu must be a vector of d >= 2 finite entries > 0, got {mu}")
    top, second = np.sort(mu)[::-1][:2]
    if top == second:
        raise ValueError("the largest entry of mu must be unique (a tie has no major coordinate)")
    return float(top), float(second), float(np.linalg.norm(mu))


def _direct_edge_m(a: float, b: float, depth: int) -> float:
    r"""``M* = (a^(1+q) - b^(1+q)) / (a^q - b^q)``, ``q = 1/(L-1)``, for ``a > b > 0``.

    The root ``M > a`` of ``a (1 - a/M)^(L-1) = b (1 - b/M)^(L-1)`` (see
    :func:`l2sam_direct_edge`). Written as ``a (1 - t^(1+q)) / (1 - t^q)`` with
    ``t = b/a`` through ``expm1``, so that large L (q small) loses no digits:
    ``a + b`` at L = 2, \(a + \sqrt{a b} + b\) at L = 3, ``-> a L`` as ``b -> a``.
    """
    if depth == 2:
        return a + b  # exact in floating point, as the L = 2 edge always was
    q = 1.0 / (depth - 1)
    log_t = np.log(b / a)
    return float(a * np.expm1((1.0 + q) * log_t) / np.expm1(q * log_t))


def l2sam_direct_edge(mu, rho: float, depth: int) -> float:
    r"""The sequential/direct edge in uniform alpha of balanced l2-SAM on one point, any L.

    Derivation (docs/theory/balanced.md#direct-edge-any-depth). From a uniform balanced start
    \(u = \alpha\) the state is \(u\) ``[d]``, \(\beta = u^L\), and
    (docs/theory/flows.md#log-space-form)

    \[
    \begin{gathered}
    \mathrm{d} \log u_j / \mathrm{d}\tau = \mu_j u_j^{L-2} (1 - r_j)^{L-1}, \\
    r_j = \rho \mu_j u_j^{L-2} / N, \qquad N = \sqrt{L \textstyle\sum_k \mu_k^2 u_k^{2L-2}}.
    \end{gathered}
    \]

    At tau = 0, \(u = \alpha\): \(N_0 = \sqrt{L} \alpha^{L-1} \lVert \mu\rVert_2\), so
    \(r_j = \mu_j / M\) with \(M = \sqrt{L} \alpha \lVert \mu\rVert_2 / \rho\), and the growth rate
    of every \(\log \lvert \beta_j\rvert = L \log u_j\) is \(L \alpha^{L-2} f(\mu_j)\) with

    \[
    f(x) = x (1 - x/M)^{L-1}.
    \]

    Every \(\lvert \beta_j(0)\rvert\) is \(\alpha^L\) (a tie), so the leader as tau -> 0+ is
    \(\operatorname{argmax}_j f(\mu_j)\): the major \(d\) (\(\mu_d = a\), the unique largest) leads
    at 0+ iff \(f(a) > f(\mu_j)\) for every \(j < d\).

    1. *Unimodal.* \(f'(x) = (1 - x/M)^{L-2} (1 - L x / M)\): on ``[0, M]`` f rises to
       its peak at \(M/L\) and falls to 0 at \(M\).
    2. *The runner-up binds* (for \(M > a\)): if \(f(a) > f(b)\) with \(b = \mu_{d-1} < a \le M\),
       then \(b < M/L\) (both on the falling side would give \(f(a) < f(b)\)), so every
       \(\mu_j \le b\) has \(f(\mu_j) \le f(b) < f(a)\).
    3. *The edge.* For \(M > a\) both \(1 - x/M\) are positive, and taking (L-1)-th
       roots, \(f(a) > f(b)\) iff \(h(a) > h(b)\) with \(h(x) = x^q (1 - x/M)\),
       \(q = 1/(L-1)\): \(a^q - b^q > (a^{1+q} - b^{1+q}) / M\), i.e. \(M > M^*\) with

        \[
        M^* = (a^{1+q} - b^{1+q}) / (a^q - b^q),
        \]

        linear in \(1/M\), so one root and one side. \(M^* > a\) (as \(a b^q > b^{1+q}\)):
        the root lies on the branch \(M > a\). At the tie \(b < M^*/L < a\) (step 1), so
        \(M^* < a L\), the limit as \(b \to a\). L = 2: \(a + b\); L = 3:
        \(a + \sqrt{a b} + b\) (a difference of cubes in \(\sqrt a\), \(\sqrt b\)).

    4. *Other branch* \(M \le a\) (\(r_d \ge 1\)): at even L \(f(a) \le 0 < f(x)\) for
       \(x < M\) and f falls beyond M, so \(d\) never leads at 0+ there. At odd L
       \(f \ge 0\) rises again beyond \(M\), and \(d\) can lead at 0+ for small alpha
       (every \(\mu_j > M\)): a lead at the start that is observed to be lost later
       (docs/theory/regimes.md#three-regimes), which this edge does not describe.

    So \(\alpha^* = \rho M^* / (\sqrt{L} \lVert \mu\rVert_2)\): for \(\alpha > \alpha^*\) the major
    leads at tau = 0+, for \(\alpha\) between \(\rho a / (\sqrt{L} \lVert \mu\rVert)\) and
    \(\alpha^*\) it does not (the runner-up grows faster), and at \(\alpha^*\) the two tie at first
    order.

    *What is proven*: leading at 0+ is necessary for a direct run, so no run with
    \(a < M < M^*\) is direct; at L = 2 it is also sufficient
    (docs/theory/balanced.md#direct-edge-depth-2: \(N\) only grows above the edge). *Observed*
    at L >= 3: above \(\alpha^*\) the major keeps the lead (the upper direct edge of
    :func:`samflow.boundary` at L = 2..6 equals \(\alpha^*\) to the bisection tolerance,
    ``tests/test_theory.py``). For mu = (1, 2, 3, 4), rho = 0.1: 0.0904, 0.1103, 0.1272, 0.1422,
    0.1557 at L = 2..6. Linear in rho (docs/theory/balanced.md#scale-invariance) and unchanged by
    \(\mu \to s \mu\).

    Args:
        mu: ``[d]`` the data point, every entry > 0, d >= 2, largest entry unique.
        rho: the SAM radius, >= 0.
        depth: L >= 2 (at L = 1 the perturbation does not change the field: no edge).
    """
    if int(depth) != depth or depth < 2:
        raise ValueError(f"the direct edge needs an integer depth >= 2, got {depth}")
    a, b, norm = _top_two(mu)
    return float(rho * _direct_edge_m(a, b, int(depth)) / (np.sqrt(depth) * norm))


def l2_max_margin_direction(mu) -> np.ndarray:
    r"""The l2 max-margin direction for one point: \(\mu / \lVert \mu\rVert_2\)."""
    mu = np.asarray(mu, dtype=np.float64)
    return mu / np.linalg.norm(mu)


def l1_max_margin_direction(mu) -> np.ndarray:
    r"""The l1 max-margin direction for one point: \(e_j\) with
    \(j = \operatorname{argmax} \lvert \mu_j\rvert\)."""
    mu = np.asarray(mu, dtype=np.float64)
    e = np.zeros_like(mu)
    e[np.argmax(np.abs(mu))] = 1.0
    return e
