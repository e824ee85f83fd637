"""Programs a second process runs without tracing, lowering or compiling them again.

JAX's persistent compile cache (:mod:`samflow.compile_cache`) is keyed by the lowered
program, so a process has to trace and lower a program before it can find it there:
for a flow that is 1-3 s of every first call, longer than the run. Here each program of
samflow's own settings (:func:`setup_text`) is stored twice in the folder ``exported/``
beside the compile cache, keyed by the setup, the shapes, dtypes and shardings of its
arguments, the versions of jax and jaxlib, the source of samflow itself
(:func:`source_digest`) and the backend (:func:`key`):

- exported (``jax.export``: its StableHLO, serialised, ``.exported``);
- compiled (``jax.experimental.serialize_executable``, ``.executable``), keyed by the
  processor besides (:func:`machine`): XLA compiles for the host's instruction set.

A later process reads the compiled entry back and runs it: nothing is traced, lowered
or compiled, and diffrax, equinox and optimistix are never imported. Where there is no
compiled entry (another machine, or one removed) it reads the export, lowers its call,
compiles it and stores the compiled entry. The first process compiles the program it
exported (read back from its bytes), so every process runs the same compiled program,
and its results are the traced program's bit for bit (``tests/test_exported.py``).
A compiled entry is made only by a compile that does not read JAX's compile cache
(:func:`_compile`), and those programs are not written there either.

Every entry is ``MAGIC + sha256(key, bytes) + bytes``, written atomically
(:func:`samflow.io.atomic_write`); one that fails the check (damaged, another
program's, another samflow's) or does not read back as a program for these arguments is
removed with one line on stderr and made afresh (a damaged compiled entry from the
export, a damaged export traced afresh), never run. A program with a piece of the
user's (a rule, a model, a solver object) is not stored: its code is not in the key.
With the compile cache off nothing is stored or read either. The compiled programs a
process holds are released with JAX's (:func:`samflow.mappings.release`). As JAX's own
cache, the folder is trusted: a compiled entry is machine code (and a pickle), so only
its owner should be able to write there.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import jax

from samflow import compile_cache, mappings

if TYPE_CHECKING:
    from samflow.engine import Setup

FOLDER = "exported"
"""The entries' folder, inside the compile cache's folder."""
MAGIC = b"samflow-exported-1\n"
"""What starts every entry, before the SHA-256 of its key and bytes."""
SUFFIX = ".exported"
EXECUTABLE_MAGIC = b"samflow-executable-1\n"
"""What starts every compiled entry, before the SHA-256 of its key and bytes."""
EXECUTABLE_SUFFIX = ".executable"


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
        f"samflow: stored program {path.name[:40]} in {path.parent} {why}; removed, made afresh",
        file=sys.stderr,
    )


def _checked(path: Path, magic: bytes, key_text: str) -> bytes | None:
    """The bytes of the entry at ``path`` where it starts with ``magic`` and the SHA-256
    of ``key_text`` and them; None where it is absent, or fails (then removed)."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    n = len(magic) + 32
    blob = data[n:]
    if data[: len(magic)] != magic or data[len(magic) : n] != _digest(key_text, blob):
        _remove(path, "failed its check (damaged or not this program)")
        return None
    return blob


def _write(path: Path, magic: bytes, key_text: str, blob: bytes) -> None:
    """Write ``blob`` at ``path`` as an entry :func:`_checked` reads back, atomically
    (:func:`samflow.io.atomic_write`); nothing where the folder cannot be written."""
    from samflow.io import atomic_write

    entry = magic + _digest(key_text, blob) + blob
    with contextlib.suppress(OSError):
        atomic_write(path, lambda tmp: Path(tmp).write_bytes(entry))


def _read(path: Path, key_text: str, leaves):
    """The stored program at ``path`` for ``leaves``, or None (absent, or removed)."""
    blob = _checked(path, MAGIC, key_text)
    if blob is None:
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


def _lowered(exported, leaves):
    """The call of ``exported`` on ``leaves`` lowered, without the LAPACK kernels where
    its program calls none (a LAPACK routine is a custom call named ``lapack_...``)."""
    global _lapack_skipped
    fn = jax.jit(exported.call)
    if b"lapack" in exported.mlir_module_serialized or not _skip_lapack():
        return fn.lower(*leaves)
    _lapack_skipped = True
    try:
        return fn.lower(*leaves)
    finally:
        _lapack_skipped = False


def _compile(lowered):
    """``lowered`` compiled afresh, not read from (nor written to) JAX's compile cache,
    and whether it was: XLA's CPU client serialises a program it read back from that cache without
    the code of its kernels (a later process that loads it fails with "Function ...
    not found"), so only a program compiled here is stored (:func:`_store_executable`).
    Where this JAX has other internals, it compiles as usual and says not fresh."""
    from jax._src import compilation_cache as jax_cache

    used = getattr(jax_cache, "is_cache_used", None)
    if used is None:
        return lowered.compile(), False
    jax_cache.is_cache_used = lambda backend: False
    try:
        return lowered.compile(), True
    finally:
        jax_cache.is_cache_used = used


@functools.cache
def machine() -> str:
    """This processor, as compiled code depends on it: the architecture and the
    instruction-set flags the kernel reports (``/proc/cpuinfo``), and ``XLA_FLAGS``.
    Code compiled for one never runs on another (XLA compiles for the host's
    instruction set: a cache shared with a machine without AVX-512 must not hand it
    AVX-512 code)."""
    import os
    import platform

    lines = []
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as info:
            seen = set()
            for line in info:
                name = line.split(":")[0].strip()
                if name in ("flags", "Features", "model name", "CPU part") and name not in seen:
                    seen.add(name)
                    lines.append(line.strip())
    if not lines:
        lines.append(platform.processor())
    flags = hashlib.sha256("\n".join(lines).encode()).hexdigest()[:32]
    return f"{platform.machine()} cpu {flags} XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}"


def _executable_key(key_text: str, leaves) -> str:
    """The key of a compiled entry: the export's, the processor (:func:`machine`) and
    the devices the arguments are on (a compiled program runs on those it was compiled
    for)."""
    devices = sorted({device.id for leaf in leaves for device in leaf.sharding.device_set})
    return f"{key_text}\ncompiled for {machine()} on devices {devices}"


def _read_executable(path: Path, key_text: str):
    """The compiled program stored at ``path`` (a :class:`jax.stages.Compiled`), or
    None (absent, or removed)."""
    blob = _checked(path, EXECUTABLE_MAGIC, key_text)
    if blob is None:
        return None
    try:
        import pickle

        from jax.experimental import serialize_executable

        payload, in_tree, out_tree, ids = pickle.loads(zlib.decompress(blob))
        by_id = {device.id: device for device in jax.devices()}
        devices = [by_id[i] for i in ids]
        return serialize_executable.deserialize_and_load(
            payload, in_tree, out_tree, execution_devices=devices
        )
    except Exception:  # whatever a damaged entry raises, it is not run
        _remove(path, "does not read back as this program")
        return None


def _store_executable(path: Path, key_text: str, compiled) -> None:
    """Store ``compiled`` at ``path``, zlib-compressed (level 1: a flow's 3.3 MB to 0.58
    MB in 0.02 s, read back in 0.01 s); nothing where it cannot be serialised."""
    import pickle

    from jax.experimental import serialize_executable

    try:
        ids = [device.id for device in compiled.runtime_executable().local_devices()]
        blob = zlib.compress(pickle.dumps((*serialize_executable.serialize(compiled), ids)), 1)
    except Exception:  # this JAX cannot serialise it: later processes read the export
        return
    _write(path, EXECUTABLE_MAGIC, key_text, blob)


_loaded: dict[str, object] = {}
"""The compiled programs read or made in this process, by key."""


def forget() -> None:
    """Drop the compiled programs held here (:func:`samflow.mappings.release`)."""
    _loaded.clear()


def runnable(setup: Setup, args: tuple, traced: Callable[[], Callable]) -> Callable | None:
    """A function of ``args`` (a pytree of placed JAX arrays) that runs the program of
    ``setup``: its compiled form read back from disk; or else its export read back (or
    exported now from ``traced()``, the jitted program) and compiled afresh
    (:func:`_compile`), both then stored. None where the setup is not exported (a piece
    of the user's, the compile cache off, or no ``jax.export`` serialisation here:
    ``flatbuffers`` missing), and the caller runs the traced program itself.

    A compiled entry skips even the lowering of the stored program's call (0.1-0.2 s of
    a flow's first call): the process deserialises it and runs it. It is keyed as the
    export is and by :func:`machine` and the arguments' devices besides.

    Call it under the setup's precision (:func:`samflow.precision.precision`), as the
    program runs."""
    compile_cache.ensure()
    text = setup_text(setup)
    where = folder()
    if text is None or where is None:
        return None
    leaves, tree = jax.tree.flatten(args)
    key_text = key(text, tree, leaves)
    compiled_key = _executable_key(key_text, leaves)
    compiled = _loaded.get(compiled_key)
    if compiled is None:
        compiled_path = where / (
            hashlib.sha256(compiled_key.encode()).hexdigest() + EXECUTABLE_SUFFIX
        )
        compiled = _read_executable(compiled_path, compiled_key)
        if compiled is not None:
            mappings.loaded()  # its kernels' pages count (samflow.mappings)
        else:  # made here: JAX's compile events mark it
            path = where / (hashlib.sha256(key_text.encode()).hexdigest() + SUFFIX)
            exported = _read(path, key_text, leaves)
            if exported is None:
                try:
                    blob = _export(traced(), tree, leaves)
                except ImportError:  # serialisation needs flatbuffers
                    return None
                exported = jax.export.deserialize(bytearray(blob))
                _write(path, MAGIC, key_text, blob)
            compiled, fresh = _compile(_lowered(exported, leaves))
            if fresh:
                _store_executable(compiled_path, compiled_key, compiled)
        if len(_loaded) >= 256:
            _loaded.clear()
        _loaded[compiled_key] = compiled
    return lambda *a: compiled(*jax.tree.leaves(a))
