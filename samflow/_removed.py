"""Keywords removed in 0.2.0 (CHANGELOG.md): a call that still gives one is refused with
a ``TypeError`` that names what replaced it, not Python's bare "unexpected keyword
argument".

Each replacement is an object that holds its settings and checks them when it is made:
a save schedule (:class:`samflow.Every`, :class:`samflow.LogSpaced`,
:class:`samflow.At`), :class:`samflow.Classification` or :class:`samflow.Summaries`.
"""

from __future__ import annotations

import functools

REPLACEMENTS = {
    "record_every": "save=samflow.Every(record_every)",
    "log_records": "save=samflow.LogSpaced(log_records)",
    "record_steps": "save=samflow.At(record_steps)",
    "n_save": "save=samflow.LogSpaced(n_save - 1)",
    "tau_min": "save=samflow.LogSpaced(n, first=tau_min)",
    "save_tau": "save=samflow.At(save_tau)",
    "collapse_factor": "classification=samflow.Classification(collapse_factor=...)",
    "plateau_fraction": "classification=samflow.Classification(plateau_fraction=...)",
    "sharpness": "summaries=samflow.Summaries(sharpness=True)",
    "active_threshold": "summaries=samflow.Summaries(active_threshold=...)",
}
"""Each removed keyword and what to write instead."""


def refuse(*names: str):
    """Refuse the removed keywords ``names`` (keys of :data:`REPLACEMENTS`) in calls of
    the decorated function, or of the decorated class's constructor, naming each one's
    replacement; every other call goes through unchanged (same signature)."""
    unknown = set(names) - set(REPLACEMENTS)
    if unknown:
        raise ValueError(f"no replacement recorded for {sorted(unknown)}")

    def decorate(target):
        if isinstance(target, type):
            target.__init__ = _checked(target.__init__, names, target.__name__)
            return target
        return _checked(target, names, target.__qualname__)

    return decorate


def _checked(function, names: tuple[str, ...], owner: str):
    @functools.wraps(function)
    def call(*args, **kwargs):
        for name in names:
            if name in kwargs:
                raise TypeError(
                    f"{owner}() no longer takes {name}= (removed in samflow 0.2.0): "
                    f"use {REPLACEMENTS[name]}"
                )
        return function(*args, **kwargs)

    return call
