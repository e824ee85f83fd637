"""The flow's leader path inside one solver step (:func:`samflow.flows.advance_path`)
against an independent NumPy float64 walk along the upper envelope of the lines
``log |beta_j|`` (linear in the step), in vmapped batches where only some trajectories
hand the lead on and some steps are rejected: the branch that does the work only where a
path changes must give every trajectory the path the walk gives it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from samflow.flows import advance_path
from samflow.precision import precision
from samflow.regimes import MAX_LEADERS, path_enter, path_start

T0, T1 = 2.0, 2.5


def walk(l0, l1, lead):
    """The leaders that take over inside the step, ``[(leader, tau), ...]``, then the
    leader at its end if it is another: from ``lead`` (1-based, 0: none), the next
    leader is the line of larger slope that crosses the current one first (the first
    index on a tie), until none crosses before the step's end."""
    slope = l1 - l0
    out, x = [], 0.0
    while lead > 0:
        a = lead - 1
        gain = slope - slope[a]
        with np.errstate(divide="ignore", invalid="ignore"):
            at = np.where(gain > 0, (l0[a] - l0) / np.where(gain > 0, gain, 1.0), np.inf)
        at = np.where(at >= x, at, np.inf)
        j = int(np.argmin(at))
        if not at[j] <= 1:
            break
        x, lead = at[j], j + 1
        out.append((lead, T0 + x * (T1 - T0)))
    top = np.flatnonzero(l1 == l1.max())
    if len(top) == 1 and top[0] + 1 != lead:
        out.append((top[0] + 1, T1))
    return out


def starts(rng, n, d):
    """``n`` steps: ``log |beta|`` at both ends and the leader at the start. A third of
    them hand nothing on (the leader at the start leads the whole step); the rest have
    random ends, most with a crossing somewhere, and a sixth of all have had no leader
    yet (a tied start: the leader at the step's end is their first)."""
    l0 = rng.normal(size=(n, d))
    l1 = l0 + rng.normal(scale=2.0, size=(n, d))
    calm = rng.random(n) < 1 / 3
    lead = np.argmax(l0, axis=1) + 1
    for i in np.flatnonzero(calm):
        a = lead[i] - 1
        l1[i] = l0[i] - 1.0
        l1[i, a] = l0[i, a] + 1.0
    lead[rng.random(n) < 1 / 6] = 0
    return l0, l1, lead.astype(np.int32)


@pytest.mark.parametrize("d", [4, 20])  # written-out crossings (d <= 16) and a scan
def test_a_step_gives_the_envelope_walk(d):
    rng = np.random.default_rng(d)
    n = 64
    l0, l1, lead = starts(rng, n, d)
    accepted = rng.random(n) < 0.8
    major = np.full(n, d, np.int32)

    def one(l0, l1, lead, accepted, major):
        path = path_enter(path_start((), l0.dtype), lead, T0 - 1.0, -1, major)
        return advance_path(path, l0, l1, jnp.asarray(T0), jnp.asarray(T1), major, None, accepted)

    with precision("float64"):
        path = jax.jit(jax.vmap(one))(l0, l1, lead, accepted, major)
    path = jax.tree_util.tree_map(np.asarray, path)
    moved = 0
    for i in range(n):
        want = walk(l0[i], l1[i], int(lead[i])) if accepted[i] else []
        moved += bool(want)
        count = int(path.count[i])
        assert count == (lead[i] > 0) + len(want), (i, want, path.leaders[i])
        assert int(path.lead[i]) == (want[-1][0] if want else lead[i])
        kept = min(count, MAX_LEADERS)
        first = 1 if lead[i] > 0 else 0  # a path without a leader has no entry yet
        if first:
            assert path.leaders[i, 0] == lead[i] and path.tau[i, 0] == T0 - 1.0
        got = list(zip(path.leaders[i, first:kept], path.tau[i, first:kept], strict=True))
        room = MAX_LEADERS - first  # past it, the last slot keeps the latest leader
        expected = want if len(want) <= room else want[: room - 1] + want[-1:]
        assert [g[0] for g in got] == [w[0] for w in expected], i
        # the same formula in float64 on both sides: equal to a few ulps of the step
        np.testing.assert_allclose([g[1] for g in got], [w[1] for w in expected], rtol=1e-14)
    # the batch mixes both kinds, so the branch ran for trajectories that change nothing
    assert 0 < moved < n


@pytest.mark.parametrize("new", [False, True])
def test_a_batch_that_hands_nothing_on_keeps_its_path(new):
    """Every trajectory calm: the branch is not taken, and every path is as it was. With
    one trajectory that has had no leader yet (``new``), the branch runs for it alone
    in the batch, and only it changes: its first leader, the one at the step's end."""
    rng = np.random.default_rng(1)
    n, d = 16, 4
    l0 = rng.normal(size=(n, d))
    lead = (np.argmax(l0, axis=1) + 1).astype(np.int32)
    l1 = l0 - 1.0
    l1[np.arange(n), lead - 1] += 2.0
    if new:
        lead[5] = 0
    major = np.full(n, d, np.int32)

    def one(l0, l1, lead, major):
        path = path_enter(path_start((), l0.dtype), lead, T0 - 1.0, -1, major)
        return path, advance_path(path, l0, l1, jnp.asarray(T0), jnp.asarray(T1), major)

    with precision("float64"):
        before, after = jax.jit(jax.vmap(one))(l0, l1, lead, major)
    before, after = (jax.tree_util.tree_map(np.asarray, p) for p in (before, after))
    others = np.arange(n) != 5
    for b, a in zip(before, after, strict=True):
        np.testing.assert_array_equal(a[others], b[others])
    if new:
        end = int(np.argmax(l1[5])) + 1
        assert int(after.count[5]) == 1 and int(after.lead[5]) == end
        assert after.leaders[5, 0] == end and after.tau[5, 0] == T1
