"""Programs a second process calls without tracing them again (``jax.export``).

JAX's persistent compile cache (:mod:`samflow.compile_cache`) is keyed by the lowered
program, so a process has to trace and lower a program before it can find it there:
for a flow that is 1-3 s of every first call, longer than the run. Here each program of
samflow's own settings (:func:`setup_text`) is exported once (``jax.export``: its
StableHLO, serialised) and stored beside the compile cache, in its folder
``exported/``, keyed by the setup, the shapes, dtypes and shardings of its arguments,
the versions of jax and jaxlib, the source of samflow itself (:func:`source_digest`)
and the backend (:func:`key`). A later process reads it back and calls it: JAX then
traces only a call of the stored program and finds its compiled form in the compile
cache, and diffrax, equinox and optimistix are never imported. The first process runs
the program it exported too (read back from its bytes), so both compile one program.

Every entry is ``MAGIC + sha256(key, bytes) + bytes``, written atomically
(:func:`samflow.io.atomic_write`); one that fails the check (damaged, another
program's, another samflow's) or does not read back as a program for these arguments is
removed with one line on stderr, traced afresh and written again, never run. A program
with a piece of the user's (a rule, a model, a solver object) is not exported: its code
is not in the key. With the compile cache off nothing is exported or read either.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import jax

from samflow import compile_cache

if TYPE_CHECKING:
    from samflow.engine import Setup

FOLDER = "exported"
"""The entries' folder, inside the compile cache's folder."""
MAGIC = b"samflow-exported-1\n"
"""What starts every entry, before the SHA-256 of its key and bytes."""
SUFFIX = ".exported"


def setup_text(setup: Setup) -> str | None:
    """``setup`` written out, the same in every process; None where a piece of it is
    the user's (a rule, parametrisation, loss or solver object not built in), whose
    code no text names."""
    from samflow.rules import METHODS, get_rule

    rule, model, flow = setup.rule, setup.model, setup.flow
    if rule.name not in METHODS or get_rule(rule.name) is not rule or not model.built_in:
        return None
    if flow is not None and not isinstance(flow.solver, str):
        return None
    fields = {
        **{name: getattr(setup, name) for name in setup.__dataclass_fields__},
        "rule": rule.name,
        "model": (model.parametrization.name, model.loss.name),
    }
    return repr(sorted(fields.items()))


@functools.cache
def source_digest() -> str:
    """The SHA-256 of samflow's own source (every ``.py`` file of the package): a
    program exported by other code than this is never read back as this one's."""
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def _sharding(leaf):
    """The sharding an argument is placed with, or None where JAX may move it (an
    array that was not put on devices: ``jnp.asarray``)."""
    return leaf.sharding if leaf.committed else None


def _aval(leaf) -> str:
    sharding = _sharding(leaf)
    spec = getattr(sharding, "spec", None)
    where = "any" if sharding is None else "one"
    if spec is not None:
        where = f"{tuple(sharding.mesh.shape.items())}:{spec}"
    return f"{leaf.dtype}{list(leaf.shape)}@{where}"


def key(text: str, tree, leaves) -> str:
    """The key of the program of setup ``text`` on arguments ``leaves`` of pytree
    ``tree``: with the versions, samflow's source and the backend."""
    import jaxlib

    devices = jax.devices()
    backend = devices[0].client
    return "\n".join(
        [
            text,
            str(tree),
            " ".join(_aval(leaf) for leaf in leaves),
            f"jax {jax.__version__} jaxlib {jaxlib.__version__} samflow {source_digest()}",
            f"{backend.platform} {backend.platform_version} {len(devices)} x "
            f"{devices[0].device_kind}",
            f"matmul precision {jax.config.jax_default_matmul_precision}",
        ]
    )


def folder() -> Path | None:
    """Where entries live (None: the compile cache is off, nothing is exported)."""
    cache = compile_cache.folder_in_use()
    return None if cache is None else cache / FOLDER


def _digest(key_text: str, blob: bytes) -> bytes:
    return hashlib.sha256(key_text.encode() + b"\0" + blob).digest()


def _remove(path: Path, why: str) -> None:
    with contextlib.suppress(OSError):
        path.unlink()
    print(
        f"samflow: exported program {path.name[:40]} in {path.parent} {why}; removed, "
        "tracing afresh",
        file=sys.stderr,
    )


def _read(path: Path, key_text: str, leaves):
    """The stored program at ``path`` for ``leaves``, or None (absent, or removed)."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    n = len(MAGIC) + 32
    blob = data[n:]
    if data[: len(MAGIC)] != MAGIC or data[len(MAGIC) : n] != _digest(key_text, blob):
        _remove(path, "failed its check (damaged or not this program)")
        return None
    try:
        exported = jax.export.deserialize(bytearray(blob))
        fits = exported.nr_devices in (1, len(jax.devices())) and [
            (a.shape, a.dtype) for a in exported.in_avals
        ] == [(leaf.shape, leaf.dtype) for leaf in leaves]
    except Exception:  # whatever a damaged program raises, it is not run
        fits = False
    if not fits:
        _remove(path, "does not read back as this program")
        return None
    return exported


def _export(traced: Callable, tree, leaves) -> bytes:
    """``traced`` (a jitted program of the pytree ``tree`` of arguments) exported on
    ``leaves``, serialised."""

    def flat(*args):
        return traced(*jax.tree.unflatten(tree, args))

    shardings = tuple(_sharding(leaf) for leaf in leaves)
    specs = [
        jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding)
        for leaf, sharding in zip(leaves, shardings, strict=True)
    ]
    return jax.export.export(jax.jit(flat, in_shardings=shardings))(*specs).serialize()


_lapack_skipped = False  # set while a program that calls no LAPACK is lowered


def _skip_lapack() -> bool:
    """Let a call of a stored program that uses no LAPACK routine lower without
    loading JAX's CPU LAPACK kernels: jax (0.10) loads them for every call of an
    exported program on a CPU, which imports ``scipy.linalg`` (0.2-0.4 s). Returns
    whether the hook is in place (False: this JAX has other internals, and it loads
    them as before)."""
    try:
        from jax._src.export import _export
    except ImportError:
        return False
    original = getattr(_export, "_ensure_backends_initialized", None)
    if original is None:
        return False
    if getattr(original, "_samflow", False):
        return True

    def ensure(platforms):
        if not _lapack_skipped:
            original(platforms)

    ensure._samflow = True
    _export._ensure_backends_initialized = ensure
    return True


@functools.lru_cache(maxsize=64)
def _callable(exported) -> Callable:
    """The jitted call of ``exported``, lowered without the LAPACK kernels where its
    program calls none (a LAPACK routine is a custom call named ``lapack_...``)."""
    fn = jax.jit(exported.call)
    if b"lapack" in exported.mlir_module_serialized or not _skip_lapack():
        return fn

    def call(*args):
        global _lapack_skipped
        _lapack_skipped = True
        try:
            return fn(*args)
        finally:
            _lapack_skipped = False

    return call


_loaded: dict[str, object] = {}
"""The programs read or exported in this process, by key."""


def runnable(setup: Setup, args: tuple, traced: Callable[[], Callable]) -> Callable | None:
    """A function of ``args`` (a pytree of placed JAX arrays) that runs the program of
    ``setup``, read back from disk or exported now from ``traced()`` (the jitted
    program) and stored; None where the setup is not exported (a piece of the user's,
    the compile cache off, or no ``jax.export`` serialisation here: ``flatbuffers``
    missing), and the caller runs the traced program itself.

    Call it under the setup's precision (:func:`samflow.precision.precision`), as the
    program runs."""
    compile_cache.ensure()
    text = setup_text(setup)
    where = folder()
    if text is None or where is None:
        return None
    leaves, tree = jax.tree.flatten(args)
    key_text = key(text, tree, leaves)
    exported = _loaded.get(key_text)
    if exported is None:
        path = where / (hashlib.sha256(key_text.encode()).hexdigest() + SUFFIX)
        exported = _read(path, key_text, leaves)
        if exported is None:
            try:
                blob = _export(traced(), tree, leaves)
            except ImportError:  # serialisation needs flatbuffers
                return None
            exported = jax.export.deserialize(bytearray(blob))
            with contextlib.suppress(OSError):
                from samflow.io import atomic_write

                entry = MAGIC + _digest(key_text, blob) + blob
                atomic_write(path, lambda tmp: Path(tmp).write_bytes(entry))
        if len(_loaded) >= 256:
            _loaded.clear()
        _loaded[key_text] = exported
    call = _callable(exported)
    return lambda *a: call(*jax.tree.leaves(a))
