"""Running a sweep: in memory, or into a resumable store on disk.

The grid is cut into chunks of consecutive points; each runs through the point runner
(:func:`samflow.engine.run_points`). With an output path, each finished chunk is
written atomically to ``<out>.work/chunk_<first>_<stop>.<sha256>.nc`` carrying the
sweep's key, its name holding the SHA-256 of its bytes; a rerun of the same sweep reads
the chunks whose checksum, key, samflow version and point range match and recomputes
every other one (a chunk of another sweep, of another samflow version, of another chunk
size, a damaged or an unreadable one is never used; one that fails its checksum or
cannot be read is named on stderr as it is recomputed); then the final file is
assembled and the work folder is removed, also when Ctrl-C comes during or just after
the final write; a rerun that finds the final file complete beside a work folder (a run
killed there) removes the folder and says so.
A finished file of the same sweep is returned as it is only where it is what this run
would write (this samflow version, the same attributes but ``history``); else it is
recomputed, said on stderr; ``overwrite`` always recomputes and rewrites it.
An interrupted and resumed sweep gives the same file as an uninterrupted one.
Each chunk runs on the devices while the results of the one before it are converted and
written (:func:`computed`), so at most two chunks are in memory at once.
Without an output path nothing is written. What the files hold:
:data:`samflow.schema.SWEEP`.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np
import xarray as xr

from samflow import devices
from samflow.engine import Points, Setup, one_ahead, start_points
from samflow.errors import InputError, RunFailure
from samflow.inputs import DEFAULT_CHUNK
from samflow.io import check_output, checksum_holds, write_dataset, write_text_atomic
from samflow.regimes import MAX_LEADERS
from samflow.schema import SWEEP, file_attrs
from samflow.sweeps.spec import SweepSpec
from samflow.version import __version__

STOP_AFTER_ENV = "SAMFLOW_STOP_AFTER_CHUNKS"  # test hook: simulate a kill after N chunks


def chunk_plan(size: int, chunk: int, n_devices: int) -> tuple[int, list[np.ndarray]]:
    """Chunk size rounded up to a multiple of the device count, and the index blocks."""
    if int(chunk) != chunk or chunk < 1:
        raise InputError(f"chunk must be an integer >= 1, got {chunk}")
    chunk = max(1, min(int(chunk), size))
    chunk = -(-chunk // n_devices) * n_devices
    return chunk, [np.arange(s, min(s + chunk, size)) for s in range(0, size, chunk)]


def start(
    setup: Setup,
    spec: SweepSpec,
    flat: np.ndarray,
    chunk_size: int,
    points: Callable[[np.ndarray], Points] | None = None,
) -> Callable[[], dict]:
    """Dispatch the grid points ``flat`` (padded to ``chunk_size``); the returned function
    waits and gives their NumPy results ``[len(flat), ...]``
    (:func:`samflow.engine.start_points`). ``points``: the inputs of the padded flat
    indices (default :meth:`samflow.sweeps.spec.SweepSpec.points`)."""
    n = len(flat)
    padded = np.concatenate([flat, np.full(chunk_size - n, flat[-1])])
    inputs = (spec.points if points is None else points)(padded)
    result = start_points(setup, inputs, spec.times())
    return lambda: {k: v[:n] for k, v in result().items()}


def compute(setup: Setup, spec: SweepSpec, flat: np.ndarray, chunk_size: int) -> dict:
    """Run the grid points ``flat`` (padded to ``chunk_size``); NumPy ``[len(flat), ...]``."""
    return start(setup, spec, flat, chunk_size)()


def computed(
    setup: Setup,
    spec: SweepSpec,
    blocks: Iterable[np.ndarray],
    chunk_size: int,
    points: Callable[[np.ndarray], Points] | None = None,
) -> Iterator[dict]:
    """:func:`compute` of each of ``blocks``, in order, the next chunk running on the
    devices while the caller handles one (:func:`samflow.engine.one_ahead`)."""
    return one_ahead(blocks, lambda flat: start(setup, spec, flat, chunk_size, points))


def in_memory(
    spec: SweepSpec,
    setup: Setup,
    blocks: list[np.ndarray],
    chunk_size: int,
    attrs: dict,
    *,
    progress: bool = False,
    points: Callable[[np.ndarray], Points] | None = None,
) -> xr.Dataset:
    """Every chunk of ``blocks`` run and assembled in memory: a sweep without a store
    (:func:`run` without ``out``; the figures' sweeps, whose ``points`` may replace
    what the grid gives)."""
    with _Progress(spec.size, progress) as bar:
        chunks = []
        results = computed(setup, spec, blocks, chunk_size, points)
        for flat, result in zip(blocks, results, strict=True):
            chunks.append(chunk_dataset(result, flat, spec.dtype))
            bar.update(len(flat))
    return assemble(spec, chunks, attrs)


def chunk_dataset(chunk: dict[str, np.ndarray], flat: np.ndarray, dtype: str) -> xr.Dataset:
    """The results of the grid points ``flat`` (dim ``point``), as a store chunk holds them."""
    return SWEEP.dataset({**chunk, "point": flat}, grid=("point",), dtype=dtype)


def assemble(spec: SweepSpec, chunks: list[xr.Dataset], attrs: dict) -> xr.Dataset:
    """Fill the gridded result from chunk Datasets (preallocated, no concatenation copy).

    ``attrs``: the settings and ``history`` (:func:`sweep_attrs`), made the file's
    global attributes.
    """
    times = spec.times()
    data = {a.name: a.array() for a in spec.axes}
    data["time"] = np.arange(len(times))
    data["coord"] = np.arange(1, spec.d + 1)
    for name, var in chunks[0].data_vars.items():
        flat = np.empty((spec.size, *var.shape[1:]), var.dtype)
        for ch in chunks:
            flat[ch["point"].values] = ch[name].values
        data[name] = flat.reshape(*spec.shape, *var.shape[1:])
    if any("layer" in var.dims for var in chunks[0].data_vars.values()):
        data["layer"] = np.arange(1, spec.n_layers + 1)
    data["handoff"] = np.arange(MAX_LEADERS)
    data["step" if spec.mode == "discrete" else "tau"] = times
    if spec.mu_set:
        data["mu_values"] = np.asarray(spec.mu_set)
    if "seed" in spec.axis_names:
        data["seed_alpha"] = spec.seed_alpha(next(a for a in spec.axes if a.name == "seed").array())
    settings = {k: v for k, v in attrs.items() if k != "history"}
    return SWEEP.dataset(
        data, grid=spec.axis_names, dtype=spec.dtype, attrs=settings, history=attrs.get("history")
    )


def sweep_attrs(spec: SweepSpec, history: str | None) -> dict:
    """The settings of a sweep, as file attributes: what it was run with (not what it
    varied), and ``history``."""
    varied = set(spec.axis_names)
    return dict(
        method=spec.rule.name,
        mode=spec.mode,
        depth=spec.depth if "depth" not in varied else None,
        rho=spec.rho if "rho" not in varied else None,
        alpha=spec.alpha if not varied & {"alpha", "seed"} else None,
        dtype=spec.dtype,
        mu=np.asarray(spec.mu) if spec.mu else None,
        n_points=len(spec.data[1]) if spec.data else 1,
        axes=" ".join(spec.axis_names),
        alpha_range=np.asarray(spec.alpha_range) if "seed" in varied else None,
        collapse_factor=spec.classification.collapse_factor,
        plateau_fraction=spec.classification.plateau_fraction,
        flow_formulation=spec.formulation,
        step_path=spec.step_path,
        seed=spec.seed
        if spec.sampling is not None and not varied & {"seed", "noise_seed"}
        else None,
        history=history,
        **spec.model_attrs(),
        **{k: v for k, v in spec.runner.attrs().items() if k not in varied},
    )


def _chunk_name(flat: np.ndarray) -> str:
    """The name of the chunk of the points ``flat``, less its checksum and suffix."""
    return f"chunk_{flat[0]:012d}_{flat[-1] + 1:012d}"


def _read_chunk(
    work: Path, key: str, flat: np.ndarray, say: Callable[[str], None] | None = None
) -> xr.Dataset | None:
    """The chunk of the points ``flat`` in ``work`` if one has the bytes its checksum
    names, is readable, of sweep ``key``, written by this samflow version and holds
    exactly ``flat``; else None. With
    ``say``, each file found and not used is named (a line to ``say``) and removed."""
    for path in sorted(work.glob(f"{_chunk_name(flat)}.*.nc")):
        ds = None
        if checksum_holds(path):
            try:
                ds = xr.load_dataset(path)
            except (OSError, ValueError, RuntimeError):
                ds = None
        if ds is not None and ds.attrs.get("sweep_key") == key:
            if ds.attrs.get("samflow_version") == __version__:
                if np.array_equal(ds["point"].values, flat):
                    return ds
        if say is not None:
            why = (
                "fails its checksum"
                if ds is None
                else "holds another sweep or another samflow version's"
            )
            say(f"samflow: chunk {path} {why}; recomputing it")
            path.unlink(missing_ok=True)
    return None


class _Lock:
    """An exclusive ``fcntl`` lock on ``<work>/lock`` holding the owner's pid.

    The kernel drops the lock when its process dies, so a lock left by a killed run is
    taken over at once; a live owner makes :meth:`acquire` fail naming its pid.
    """

    def __init__(self, path: Path):
        self.path = path
        self.fd: int | None = None

    def acquire(self) -> None:
        import fcntl

        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise InputError(
                f"{self.path.parent.parent / self.path.parent.stem} is in use by process "
                f"{owner} (a sweep writing the same out)"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _clear(work: Path) -> None:
    for path in work.glob("chunk_*"):
        path.unlink(missing_ok=True)
    (work / "spec.json").unlink(missing_ok=True)


def _remove_temporaries(work: Path) -> None:
    """Chunk temporaries a killed run of this sweep left in its work folder (only with
    the lock held). Nothing outside the work folder is touched: a temporary beside
    ``out`` may be another run's file in the making."""
    for path in work.glob(".chunk_*.nc.tmp"):
        path.unlink(missing_ok=True)


def _held_key(key_file: Path) -> str | None:
    """The sweep key in ``spec.json``; None when it is missing or unreadable (a folder
    without a readable spec is rebuilt: its chunks carry their own key and are checked)."""
    try:
        held = json.loads(key_file.read_text())
    except (OSError, ValueError):
        return None
    return held.get("key") if isinstance(held, dict) else None


def _finished(out: Path, key: str, attrs: dict, overwrite: bool) -> xr.Dataset | None:
    """The finished result at ``out`` if it is this sweep's, as this samflow writes it;
    None where there is none, or ``overwrite`` (always recomputed and rewritten), or the
    file holds this sweep but differs from what this run would write (another samflow
    version, another attribute text: :func:`_differs`, said on stderr: when in doubt,
    recompute); refuse another sweep's."""
    if not out.exists() or overwrite:
        return None
    try:
        ds = xr.load_dataset(out)
    except (OSError, ValueError, RuntimeError):
        ds = None
    if ds is not None and ds.attrs.get("sweep_key") == key:
        stale = _differs(ds, attrs)
        if stale is None:
            return ds
        _stderr(f"samflow: {out} holds this sweep but {stale}; recomputing it")
        return None
    what = "another sweep" if ds is not None else "an unreadable file"
    raise InputError(f"{out} holds {what}; pass overwrite (--overwrite) or choose another out")


def _shown(value) -> str:
    """An attribute's value for a message: NumPy scalars and arrays as Python ones."""
    return repr(value.tolist() if isinstance(value, np.ndarray | np.generic) else value)


def _differs(ds: xr.Dataset, attrs: dict) -> str | None:
    """How the finished file ``ds`` of this sweep differs from what this run writes (its
    global attributes, ``history`` aside, with this samflow's and its libraries'
    versions; each variable's attributes as the schema says them now), or None."""
    want = {k: v for k, v in file_attrs(**attrs).items() if k != "history"}
    have = {k: v for k, v in ds.attrs.items() if k != "history"}
    if have.get("samflow_version") != want.get("samflow_version"):
        return (
            f"was written by samflow {have.get('samflow_version')}, not "
            f"{want.get('samflow_version')}"
        )
    for name in sorted(set(want) | set(have)):
        a, b = have.get(name), want.get(name)
        if a is None or b is None or not np.array_equal(np.asarray(a), np.asarray(b)):
            return f"its attribute {name} is {_shown(a)}, not {_shown(b)}"
    problems = SWEEP.check(ds)
    if problems:
        return f"its text differs from this version's ({problems[0]})"
    return None


def run(
    spec: SweepSpec,
    out: str | os.PathLike | None = None,
    *,
    chunk: int = DEFAULT_CHUNK,
    history: str | None = None,
    progress: bool = False,
    overwrite: bool = False,
    size_limit_bytes: int | None = None,
) -> xr.Dataset:
    """Run ``spec``; with ``out``, resumably into that file (see the module docstring).

    With ``out``: a finished file of the same sweep is returned as it is ("already
    complete"); a file of another sweep, or a work folder of another sweep, is refused
    (``InputError``) unless ``overwrite``; a second run on the same ``out`` is refused
    while the first holds the lock.
    """
    if size_limit_bytes is not None:
        spec.check_size(size_limit_bytes)
    devices.start_distributed()
    setup = spec.setup()
    chunk_size, blocks = chunk_plan(spec.size, chunk, len(devices.mesh().devices.flat))
    attrs = sweep_attrs(spec, history)
    key = spec.key()
    attrs["sweep_key"] = key
    if out is None:
        return in_memory(spec, setup, blocks, chunk_size, attrs, progress=progress)

    out = check_output(out)
    work = out.with_name(out.name + ".work")
    lock = _Lock(work / "lock")
    if devices.is_writer():
        done = _finished(out, key, attrs, overwrite)
        if done is not None:
            if progress:
                print(f"{out}: already complete", file=sys.stderr)
            if work.is_dir() and _remove_stale(work, lock):
                print(f"{out}: complete; removed its stale work folder {work}", file=sys.stderr)
            return done
        work.mkdir(parents=True, exist_ok=True)
        lock.acquire()
    try:
        return _run_store(
            spec, setup, out, work, key, blocks, chunk_size, attrs, progress, overwrite
        )
    finally:
        lock.release()


def _run_store(spec, setup, out, work, key, blocks, chunk_size, attrs, progress, overwrite):
    key_file = work / "spec.json"
    if devices.is_writer():
        _remove_temporaries(work)
        held = _held_key(key_file)
        if held is None or (held != key and overwrite):
            _clear(work)  # a folder without its spec (or to be overwritten) is rebuilt
        elif held != key:
            raise InputError(
                f"{work} holds chunks of another sweep; pass overwrite (--overwrite), remove "
                "it, or choose another out"
            )
        write_text_atomic(key_file, json.dumps({"key": key, "history": attrs.get("history")}))
    devices.barrier("samflow: work folder ready")
    say = _stderr if devices.is_writer() else None
    found = [_read_chunk(work, key, b, say) for b in blocks]
    todo = devices.agreed(np.array([ch is None for ch in found]))
    stop_after = int(os.environ.get(STOP_AFTER_ENV, "0") or 0)
    done_now = 0
    # The chunks to do, in order, each computed while the one before is written.
    results = computed(setup, spec, [b for b, t in zip(blocks, todo, strict=True) if t], chunk_size)
    with _Progress(spec.size, progress) as bar:
        if progress and not todo.all():
            bar.write(f"resuming: {int((~todo).sum())} of {len(blocks)} chunks done")
        for i, flat in enumerate(blocks):
            if todo[i]:
                ds = chunk_dataset(next(results), flat, spec.dtype)
                ds.attrs["sweep_key"] = key
                ds.attrs["samflow_version"] = __version__
                if devices.is_writer():
                    # A chunk lives until the sweep is done: written uncompressed (zlib
                    # took four times as long as computing it, bench case 1's grid), no
                    # larger on disk than the results in memory (SweepSpec.check_size).
                    # Named by the SHA-256 of its bytes, checked when it is reused.
                    write_dataset(ds, work / f"{_chunk_name(flat)}.nc", False, checksum=True)
                found[i] = ds
                done_now += 1
                if stop_after and done_now >= stop_after:
                    raise KeyboardInterrupt(f"stopped after {done_now} chunks ({STOP_AFTER_ENV})")
            bar.update(len(flat))
    devices.barrier("samflow: every chunk written")
    # A process that did not see a chunk process 0 found reads it now (shared disk).
    found = [
        _read_chunk(work, key, b) if ch is None else ch for b, ch in zip(blocks, found, strict=True)
    ]
    if any(ch is None for ch in found):
        raise RunFailure(f"{work}: a chunk written by process 0 cannot be read here")
    ds = assemble(spec, found, attrs)
    if devices.is_writer():
        try:
            write_dataset(ds, out)
        finally:
            # Once the final file is in place (it is renamed there whole), its chunks
            # are spent: removed even when Ctrl-C came during or just after the write.
            if _holds(out, key):
                _remove_work(work)
    return ds


def _holds(out: Path, key: str) -> bool:
    """Whether ``out`` is the finished file of the sweep ``key`` (its attributes read,
    not its arrays)."""
    try:
        with xr.open_dataset(out) as ds:
            return ds.attrs.get("sweep_key") == key
    except (OSError, ValueError, RuntimeError):
        return False


def _remove_work(work: Path) -> None:
    """Remove the work folder ``work`` to the end: a Ctrl-C that arrives while it is
    removed waits until it is gone (a few milliseconds), then is raised."""
    interrupted = False
    while True:
        try:
            shutil.rmtree(work, ignore_errors=True)
            break
        except KeyboardInterrupt:
            interrupted = True
    if interrupted:
        raise KeyboardInterrupt


def _remove_stale(work: Path, lock: _Lock) -> bool:
    """Remove ``work``, the work folder of a sweep whose final file is complete (a run
    stopped between writing it and removing the folder), unless another run holds its
    lock; whether it was removed."""
    try:
        lock.acquire()
    except InputError:
        return False  # in use by a live run: it removes the folder itself
    try:
        _remove_work(work)
    finally:
        lock.release()
    return True


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class _Progress:
    """A bar over grid points (not chunks) that says when the program is compiling, and
    once chunks are done their rate and the estimated end; shown on a terminal."""

    def __init__(self, total: int, shown: bool):
        from tqdm.auto import tqdm

        # On a terminal only (None: tqdm's test of stderr), so a log gets no bar.
        self.bar = tqdm(
            total=total, desc="compiling", unit="point", disable=None if shown else True
        )

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.bar.close()

    def write(self, text: str) -> None:
        self.bar.write(text, file=sys.stderr)

    def update(self, n: int) -> None:
        self.bar.set_description("sweep", refresh=False)
        self.bar.update(n)
