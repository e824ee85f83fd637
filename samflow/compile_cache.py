"""JAX's persistent compilation cache, on by default in samflow's cache folder.

A flow program takes 5-20 s to compile and a discrete one 1-3 s, while a quick run
takes well under a second: without a cache on disk every new process pays the
compilation again. With it a second process reads the compiled program back (tracing
the program remains: 1-3 s for a flow, far less for a discrete run).

Where: ``--compile-cache DIR`` (the command line), else ``$SAMFLOW_COMPILE_CACHE``,
else ``$XDG_CACHE_HOME/samflow/jax`` (``~/.cache/samflow/jax``), beside the image data
(:func:`samflow.images.data.default_data_dir`). The value ``off`` turns it off. A folder
already given to JAX itself (``JAX_COMPILATION_CACHE_DIR`` or
``jax.config.update("jax_compilation_cache_dir", ...)``) is kept unless samflow's option
or variable names another. The folder only grows; deleting it is always safe.

The command line turns the cache on before it compiles anything; the library does at
its first run (:func:`samflow.engine.program`), so ``import samflow`` changes nothing.
It has to be set before the process compiles its first program to take effect
everywhere: JAX decides once per process whether a cache is used.

JAX keeps no program with a host callback; :func:`no_host_checks` traces diffrax's
input checks without one, so that flow programs are kept too.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

ENV = "SAMFLOW_COMPILE_CACHE"
OFF = "off"
MIN_COMPILE_SECONDS = 0.1
"""Programs that compile faster than this are not written (the many tiny ones that
JAX compiles for single operations); JAX's own default is 1 s, which would leave out
discrete programs on a fast machine."""

_configured = False


def default_dir() -> Path:
    """``$XDG_CACHE_HOME/samflow/jax``, else ``~/.cache/samflow/jax``."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache).expanduser() / "samflow" / "jax"


def chosen_dir(setting: str | os.PathLike | None = None) -> Path | None:
    """The cache folder for ``setting`` (a folder, ``"off"``, or None for
    ``$SAMFLOW_COMPILE_CACHE`` and then the default); None when the cache is off."""
    if setting is None:
        setting = os.environ.get(ENV) or None
    if setting is None:
        return default_dir()
    if str(setting).strip().lower() == OFF:
        return None
    return Path(setting).expanduser()


def enable(setting: str | os.PathLike | None = None) -> Path | None:
    """Point JAX's persistent compilation cache at ``chosen_dir(setting)``.

    Returns the folder in use (also one the user gave JAX), or None when the cache is
    off. With no ``setting`` and no ``$SAMFLOW_COMPILE_CACHE``, a folder already given
    to JAX is kept. Does not import JAX: before JAX starts, its variables are set.
    """
    global _configured
    _configured = True
    explicit = setting is not None or os.environ.get(ENV)
    own = _get("jax_compilation_cache_dir")
    if own and not explicit:
        return Path(own)
    folder = chosen_dir(setting)
    _set("jax_compilation_cache_dir", None if folder is None else str(folder))
    if folder is not None:
        _set("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    return folder


def _get(name: str):
    if "jax" in sys.modules:
        return getattr(sys.modules["jax"].config, name)
    return os.environ.get(name.upper())


def _set(name: str, value) -> None:
    if "jax" in sys.modules:
        sys.modules["jax"].config.update(name, value)
    elif value is None:
        os.environ.pop(name.upper(), None)
    else:  # JAX reads its options from these variables when it starts
        os.environ[name.upper()] = str(value)


def ensure() -> None:
    """:func:`enable` with the defaults, unless it has run in this process already."""
    if not _configured:
        enable()


@functools.cache
def _nan_mode_checks() -> Callable | None:
    """equinox's compiled check in its own instance (its own trace cache), or None
    when this equinox has other internals."""
    from equinox import _errors, filter_jit

    impl = getattr(_errors, "branched_error_if_impl", None)
    known = hasattr(_errors, "EQX_ON_ERROR") and hasattr(_errors, "branched_error_if_impl_jit")
    return filter_jit(impl) if impl is not None and known else None


@contextlib.contextmanager
def no_host_checks() -> Iterator[None]:
    """Trace equinox's runtime checks without a host callback.

    diffrax checks its save times with ``equinox.error_if``, a host callback by default,
    and JAX never writes a program with a host callback to the persistent cache. The
    times are checked on the host before they get there (:mod:`samflow.runners`;
    :func:`samflow.engine.run_points` pads them by repeating the last one, which the
    check allows), so inside this context the checks are traced in equinox's ``nan``
    mode, which needs no callback. equinox reads that mode at trace time from a module
    attribute; its compiled check gets an instance of its own here, so that no trace
    made here is reused outside (and none from outside here). With another equinox the
    checks stay as they are (and flow programs are not kept on disk).
    """
    checks = _nan_mode_checks()
    if checks is None:
        yield
        return
    from equinox import _errors

    saved = _errors.EQX_ON_ERROR, _errors.branched_error_if_impl_jit
    _errors.EQX_ON_ERROR, _errors.branched_error_if_impl_jit = "nan", checks
    try:
        yield
    finally:
        _errors.EQX_ON_ERROR, _errors.branched_error_if_impl_jit = saved
