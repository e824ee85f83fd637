"""How a run ended, as far as its limit is concerned: the codes a run's *fate* takes.

A regime is a statement about the limit ``tau -> infinity``
(docs/theory/regimes.md#labels-of-the-limit), so a run is labelled only once its fate is decided:
an event ended it (beta reached 0, or a finite-time blow-up), or a *certificate* holds at its end
state, a condition that provably fixes what happens next (an invariant region of the flow,
:meth:`samflow.rules.BalancedFlow.fate`). Otherwise the run is unresolved, whatever its leader path
so far.

Codes (``int``, the same in every batch element):

- :data:`OPEN` (0): nothing decided; the run is unresolved.
- :data:`SETTLED` (1): the leader at the end leads for ever (no further hand-off):
  the leader path is complete and names the regime.
- :data:`COLLAPSE` (2): beta tends to 0 (the collapse event, or a certificate).
- :data:`FINITE` (3): beta converges to a finite nonzero point (a certificate).
- :data:`BLOWUP` (4): a finite-time blow-up ended the run (L >= 3) with the blow-up's
  proven winner leading (docs/theory/regimes.md#blow-up-winner): the leader at the
  blow-up is the limit's. A blow-up without a proven winner is OPEN.
- :data:`TAKEOVER` (5): the certified *winner* does not lead where the run stopped, but
  a certificate (or, for a flow, the blow-up's winner,
  docs/theory/regimes.md#blow-up-winner) proves it takes the lead within finite time and
  keeps it for ever (docs/theory/regimes.md#takeover-certificate): the limit's leader is
  the winner, and the regime is the path seen so far with the winner appended
  (:func:`samflow.regimes.finish`, which is handed the winner). The leaders in between,
  if any, are not followed: where the winner is the major they change no label
  (sequential or returned); where it is a minor coordinate the proof also keeps the major
  from leading in between (it stays behind the winner), so the label is *major_lost* if
  the major led before, else *minor_end*.

- :data:`RETURN` (6): a certificate proves the major leads for ever from some time on
  and, where it leads at the stop, hands the lead on first
  (docs/theory/regimes.md#usam-returns): where the major has led, the regime is
  *returned*, the limit's leader the major (else unresolved).

A certificate itself (what :meth:`samflow.rules.BalancedFlow.fate` returns) uses
:data:`OPEN`, :data:`COLLAPSE`, :data:`FINITE`, :data:`LEADS` (the winner it names
leads for ever once it leads), :data:`TAKES_OVER` (the winner leads for ever once it
leads, takes the lead within finite time, and, a minor one, keeps the major from leading
in between); the run is :data:`SETTLED` when that winner leads, and :data:`TAKEOVER`
under :data:`TAKES_OVER` when it does not;
:data:`RETURNS` (the winner, the major, leads for ever from some time on, and if it
leads now it loses the lead first), the run :data:`RETURN` where the major leads, or at
the run's end; :data:`WINS_LATER` (the major leads for ever from some finite time on, but
may still lead and lose before), the run :data:`RETURN` only where the path seen so far
already makes it *returned* (the major led before and a minor leads now, or the major
leads again).
"""

from __future__ import annotations

OPEN, SETTLED, COLLAPSE, FINITE, BLOWUP, TAKEOVER, RETURN = range(7)
LEADS = SETTLED
"""A certificate's code: its winner, once it leads, leads for ever."""
TAKES_OVER = TAKEOVER
"""A certificate's code: its winner leads for ever once it leads, and it takes the lead
within finite time (a minor winner: without the major leading in between)."""
RETURNS = RETURN
"""A certificate's code: its winner (the major) leads for ever from some time on, and,
leading now, hands the lead on first."""
WINS_LATER = 7
"""A certificate's code: its winner (the major) leads for ever from some finite time on,
but may still lead and lose before; it names the run's regime only where the path seen so
far already makes it *returned* (the major led before and a minor leads now, or the major
leads again)."""
MEANINGS = "open settled collapse finite blowup takeover return"
