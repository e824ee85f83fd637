"""JAX's persistent compilation cache, on by default in samflow's cache folder.

A flow program takes 5-20 s to compile and a discrete one 1-3 s, while a quick run
takes well under a second: without a cache on disk every new process pays the
compilation again. With it a second process reads the compiled program back. The
programs of samflow's own settings are stored by :mod:`samflow.exported` instead, in the
folder ``exported/`` inside this one, exported and compiled, so that the second process
does not trace, lower or compile them again (1-3 s for a flow); JAX's cache keeps the
rest (a user's rule or model, ``samflow.fit``, the CNN).

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

The folder is resolved (``~`` expanded, made absolute), so a folder written relative or
absolute is one cache; an empty setting or a ``~user`` that does not exist is an
``InputError``; a folder given by ``--compile-cache`` that cannot be made or written is
refused, one from ``$SAMFLOW_COMPILE_CACHE`` or the default falls back to no cache with
one line on stderr. The cache heals itself (:func:`check_entries`): every entry samflow
writes carries the SHA-256 of its key and bytes, checked when it is read; an entry that
fails (damaged, swapped with another program's, written by another tool) is removed
with one line, and the fresh compile replaces it. A command that still fails with the
cache on is retried once without it (:func:`samflow.cli.main`), naming the folder.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from samflow.errors import InputError
from samflow.io import expand_user

ENV = "SAMFLOW_COMPILE_CACHE"
OFF = "off"
MIN_COMPILE_SECONDS = 0.1
"""Programs that compile faster than this are not written (the many tiny ones that
JAX compiles for single operations); JAX's own default is 1 s, which would leave out
discrete programs on a fast machine."""

_configured = False
_folder: Path | None = None


def resolve(path: str | os.PathLike, what: str) -> Path:
    """``path`` with ``~`` / ``~user`` expanded, absolute and normalised; InputError
    naming it when it is empty or its ``~user`` does not exist."""
    if path is None or str(path).strip() == "":
        raise InputError(f"{what} is empty; give a folder or {OFF}")
    return Path(os.path.abspath(expand_user(path, what)))


def default_dir() -> Path:
    """``$XDG_CACHE_HOME/samflow/jax``, else ``~/.cache/samflow/jax``."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return resolve(cache, "$XDG_CACHE_HOME") / "samflow" / "jax"


def chosen_dir(setting: str | os.PathLike | None = None) -> Path | None:
    """The cache folder for ``setting`` (a folder, ``"off"``, or None for
    ``$SAMFLOW_COMPILE_CACHE`` and then the default), resolved (:func:`resolve`); None
    when the cache is off. InputError for an empty setting or an unknown ``~user``."""
    what = "--compile-cache"
    if setting is None:
        setting, what = os.environ.get(ENV) or None, f"${ENV}"
    if setting is None:
        return default_dir()
    if str(setting).strip().lower() == OFF:
        return None
    return resolve(setting, what)


def enable(setting: str | os.PathLike | None = None) -> Path | None:
    """Point JAX's persistent compilation cache at ``chosen_dir(setting)``.

    Returns the folder in use (also one the user gave JAX), or None when the cache is
    off. With no ``setting`` and no ``$SAMFLOW_COMPILE_CACHE``, a folder already given
    to JAX is kept. A ``setting`` folder that cannot be made or written is refused
    (InputError); the variable's or the default folder then turns the cache off with
    one line on stderr. Does not import JAX: before JAX starts, its variables are set.

    Args:
        setting: a folder, the word that turns the cache off, or None (the variable's
            or the default folder).

    Returns:
        The folder in use, or None when the cache is off.

    Raises:
        InputError: a ``setting`` that is no str or path (``enable(123)``), naming it, or
            a folder that cannot be made or written.
    """
    global _configured, _folder
    if setting is not None and not isinstance(setting, str | os.PathLike):
        raise InputError(
            f"compile cache setting must be a folder (a str or a path) or {OFF!r}, got "
            f"{setting!r} ({type(setting).__name__})"
        )
    _configured = True
    explicit = setting is not None or os.environ.get(ENV)
    own = _get("jax_compilation_cache_dir")
    if own and not explicit:
        _folder = Path(own)
        check_entries()
        return _folder
    folder = chosen_dir(setting)
    if folder is not None and not _usable(folder):
        why = f"compile cache folder {str(folder)!r} cannot be made or written"
        if setting is not None:
            raise InputError(f"{why}; give another --compile-cache or {OFF}")
        print(f"samflow: {why}; compiling without a cache", file=sys.stderr)
        folder = None
    _set("jax_compilation_cache_dir", None if folder is None else str(folder))
    if folder is not None:
        _set("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    _folder = folder
    check_entries()
    return folder


def _usable(folder: Path) -> bool:
    """Whether ``folder`` is (or can be made) a folder this process writes."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return folder.is_dir() and os.access(folder, os.W_OK | os.X_OK)


def folder_in_use() -> Path | None:
    """The cache folder :func:`enable` set in this process (None: off or not set)."""
    return _folder


def turn_off() -> None:
    """No persistent cache for the rest of this process (what a retry without the
    cache uses): JAX's cache is reset and disabled, and its in-memory programs cleared."""
    global _folder
    _folder = None
    if "jax" in sys.modules:
        import jax
        from jax._src import compilation_cache

        jax.config.update("jax_enable_compilation_cache", False)
        compilation_cache.reset_cache()
        jax.clear_caches()
    else:
        os.environ["JAX_ENABLE_COMPILATION_CACHE"] = "false"


MAGIC = b"samflow-checked-1\n"
"""What starts every cache entry samflow writes, before the SHA-256 of key and bytes."""


def _digest(key: str, value: bytes) -> bytes:
    return hashlib.sha256(key.encode() + b"\0" + value).digest()


def check_entries() -> bool:
    """Make JAX's persistent cache check its entries (once JAX is imported; before,
    this runs again at the first compile, :func:`ensure`). Returns whether the checks
    are in place (False: this JAX has other internals, and the cache is as JAX's).

    Each entry written is ``MAGIC + sha256(key, bytes) + bytes``; a read that does not
    match (or an entry without it) removes the entry, says so once per entry on stderr
    and reports a miss, so that JAX compiles afresh and writes the fresh program.
    """
    if "jax" not in sys.modules:
        return False
    try:
        from jax._src import compilation_cache as cc
    except ImportError:
        return False
    if not hasattr(cc, "get_file_cache") or not hasattr(cc, "_cache"):
        return False
    if getattr(cc.get_file_cache, "_samflow_checked", False):
        if cc._cache is not None and not isinstance(cc._cache, _Checked):
            cc._cache = _Checked(cc._cache)
        return True

    original = cc.get_file_cache

    def get_file_cache(path):
        made = original(path)
        return None if made is None else (_Checked(made[0]), made[1])

    get_file_cache._samflow_checked = True
    cc.get_file_cache = get_file_cache
    if cc._cache is not None and not isinstance(cc._cache, _Checked):
        cc._cache = _Checked(cc._cache)
    return True


class _Checked:
    """A JAX cache whose entries carry and check the SHA-256 of their key and bytes."""

    def __init__(self, base):
        self._base = base

    @property
    def _path(self):
        return self._base._path

    def __getattr__(self, name):
        return getattr(self._base, name)

    def get(self, key: str) -> bytes | None:
        value = self._base.get(key)
        if value is None:
            return None
        n = len(MAGIC) + 32
        if value[: len(MAGIC)] == MAGIC and value[len(MAGIC) : n] == _digest(key, value[n:]):
            return value[n:]
        self._remove(key)
        return None

    def put(self, key: str, value: bytes) -> None:
        self._base.put(key, MAGIC + _digest(key, value) + value)

    def _remove(self, key: str) -> None:
        folder = Path(str(self._base._path))
        removed = False
        for path in folder.glob(f"{key}*"):
            with contextlib.suppress(OSError):
                path.unlink()
                removed = True
        if removed:
            print(
                f"samflow: compile cache entry {key[:40]} in {folder} failed its check "
                "(damaged or not samflow's); removed, compiling afresh",
                file=sys.stderr,
            )


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
    """:func:`enable` with the defaults, unless it has run in this process already; and
    the entry checks (:func:`check_entries`), once JAX is imported."""
    if not _configured:
        enable()
    check_entries()


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
