"""The sweep store: kill and resume at any moment, chunk sizes and device counts that
change between runs, locks, leftovers of other runs, finished files."""

import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import xarray as xr

import samflow
from samflow.sweeps.store import STOP_AFTER_ENV, _Lock

GRID = ["--axis", "alpha=0.05:3:6:log", "--axis", "rho=0.2,0.6,1,1.4,2"]
PHASE = ["phase", "--method", "sam-l2", "--depth", "2", "--mu", "1,2,3,4", *GRID]
PHASE += ["--eta", "0.05", "--steps", "400", "-q"]


def run_phase(out, chunk: int, devices: int = 1, stop_after: int = 0, extra=(), wait=True):
    env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
    env.pop(STOP_AFTER_ENV, None)
    if stop_after:
        env[STOP_AFTER_ENV] = str(stop_after)
    code = "import sys; from samflow.cli import main; sys.exit(main(sys.argv[1:]))"
    phase, extra = list(PHASE), list(extra)
    if "--steps" in extra:  # an option is given once (the command line refuses it twice)
        i = extra.index("--steps")
        phase[phase.index("--steps") + 1] = extra[i + 1]
        del extra[i : i + 2]
    argv = [sys.executable, "-c", code, *phase, "--chunk", str(chunk), "--out", str(out), *extra]
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    if not wait:
        return proc
    _, stderr = proc.communicate(timeout=300)
    return proc.returncode, stderr


def same_result(a: xr.Dataset, b: xr.Dataset) -> None:
    assert set(a.data_vars) == set(b.data_vars)
    for name in a.data_vars:
        np.testing.assert_array_equal(a[name].values, b[name].values, err_msg=name)
    keep = lambda ds: {k: v for k, v in ds.attrs.items() if k != "history"}  # noqa: E731
    assert str(keep(a)) == str(keep(b))


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    out = tmp_path_factory.mktemp("clean") / "clean.nc"
    status, err = run_phase(out, chunk=8)
    assert status == 0, err
    return xr.load_dataset(out)


@pytest.mark.parametrize(
    "chunk, devices, stop_after, resume_chunk, resume_devices",
    [
        (3, 1, 1, 3, 1),  # the same command again
        (7, 2, 2, 7, 2),
        (3, 1, 4, 7, 2),  # another chunk size and device count on resume
        (4, 2, 3, 5, 1),
    ],
)
def test_resume_after_a_stop_equals_a_clean_run(
    tmp_path, clean, chunk, devices, stop_after, resume_chunk, resume_devices
):
    out = tmp_path / "g.nc"
    status, _ = run_phase(out, chunk, devices, stop_after=stop_after)
    assert status == 130 and not out.exists()
    assert len(list((tmp_path / "g.nc.work").glob("chunk_*.nc"))) == stop_after
    status, err = run_phase(out, resume_chunk, resume_devices)
    assert status == 0, err
    same_result(xr.load_dataset(out), clean)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.nc"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kill_at_a_random_moment(tmp_path, clean, seed):
    rng = random.Random(seed)
    out = tmp_path / "k.nc"
    proc = run_phase(out, chunk=rng.choice([2, 3, 5]), devices=rng.choice([1, 2]), wait=False)
    time.sleep(rng.uniform(1.0, 6.0))
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    status, err = run_phase(out, chunk=rng.choice([2, 3, 5]), devices=rng.choice([1, 2]))
    assert status == 0, err
    same_result(xr.load_dataset(out), clean)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.nc"]  # no temporaries left


def test_unreadable_and_foreign_chunks_are_recomputed(tmp_path, clean):
    out = tmp_path / "t.nc"
    assert run_phase(out, chunk=6, stop_after=3)[0] == 130
    chunks = sorted((tmp_path / "t.nc.work").glob("chunk_*.nc"))
    os.truncate(chunks[0], 2000)  # a chunk cut short
    # a chunk of another sweep under a name this one uses
    other = tmp_path / "other.nc"
    ds = xr.load_dataset(chunks[1])
    ds.attrs["sweep_key"] = "0123456789abcdef"
    ds.to_netcdf(other)
    os.replace(other, chunks[1])
    status, err = run_phase(out, chunk=6)
    assert status == 0, err
    same_result(xr.load_dataset(out), clean)


def test_work_folder_without_its_spec_is_rebuilt(tmp_path, clean):
    out = tmp_path / "w.nc"
    assert run_phase(out, chunk=6, stop_after=2)[0] == 130
    (tmp_path / "w.nc.work" / "spec.json").unlink()
    assert run_phase(out, chunk=6)[0] == 0
    same_result(xr.load_dataset(out), clean)


def test_a_second_run_on_the_same_out_is_refused(tmp_path):
    work = tmp_path / "l.nc.work"
    work.mkdir()
    lock = _Lock(work / "lock")
    lock.acquire()
    try:
        status, err = run_phase(tmp_path / "l.nc", chunk=6)
    finally:
        lock.release()
    assert status == 2
    assert f"in use by process {os.getpid()}" in err and len(err.strip().splitlines()) == 1


def test_finished_and_foreign_outputs(tmp_path, clean):
    out = tmp_path / "f.nc"
    assert run_phase(out, chunk=30)[0] == 0
    mtime = out.stat().st_mtime_ns
    status, err = run_phase(out, chunk=30, extra=["--steps", "400"])
    assert status == 0 and out.stat().st_mtime_ns == mtime  # already complete: not rerun
    status, err = run_phase(out, chunk=30, extra=["--steps", "300"])
    assert status == 2 and "another sweep" in err and "--overwrite" in err
    status, err = run_phase(out, chunk=30, extra=["--steps", "300", "--overwrite"])
    assert status == 0
    assert int(xr.load_dataset(out)["step"].values[-1]) == 300


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_files_honour_the_umask(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        samflow.trajectory(
            "gd", depth=2, mu=[1.0, 2.0], alpha=0.5, runner=samflow.Discrete(0.1, 10)
        ).to_netcdf(tmp_path / "ref.nc")
        from samflow.io import write_dataset

        path = write_dataset(xr.load_dataset(tmp_path / "ref.nc"), tmp_path / "u.nc")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == mode


def test_one_ahead_starts_the_next_chunk_before_taking_a_result():
    """Chunks are taken in order, and each is started before the one before it is taken
    (so the devices run it while the caller writes the other); at most two are open."""
    from samflow.engine import one_ahead

    log = []

    def start(i):
        log.append(("start", i))
        return lambda: log.append(("take", i)) or 10 * i

    assert list(one_ahead(range(3), start)) == [0, 10, 20]
    assert log == [
        ("start", 0),
        ("start", 1),
        ("take", 0),
        ("start", 2),
        ("take", 1),
        ("take", 2),
    ]
    assert list(one_ahead([], start)) == []


def test_chunks_are_written_plain_and_the_file_compressed(tmp_path, clean):
    """The work folder's chunks skip zlib (they live until the sweep ends); the final file
    is compressed (level COMPLEVEL, shuffled) and holds the same values."""
    import netCDF4

    from samflow.schema import COMPLEVEL

    out = tmp_path / "c.nc"
    status, _ = run_phase(out, chunk=8, stop_after=1)
    assert status == 130
    (chunk,) = (tmp_path / "c.nc.work").glob("chunk_*.nc")
    with netCDF4.Dataset(chunk) as nc:
        assert not nc["regime"].filters()["zlib"]
        assert not nc["beta_norm"].filters()["zlib"]
    status, err = run_phase(out, chunk=8)
    assert status == 0, err
    with netCDF4.Dataset(out) as nc:
        filters = nc["beta_norm"].filters()
        assert filters["zlib"] and filters["shuffle"] and filters["complevel"] == COMPLEVEL
    same_result(xr.load_dataset(out), clean)


def test_damaged_chunks_are_recomputed_never_used(tmp_path, monkeypatch, capfd):
    """Work-folder chunks are plain netCDF named by the SHA-256 of their bytes: 8 bytes
    flipped anywhere in a chunk (header, attributes, data) make it fail its check, it is
    named on stderr and recomputed, and the final file equals an uninterrupted run's."""
    import shutil

    from samflow.io import checksum_holds

    kw = dict(
        depth=2,
        mu=[1.0, 2.0],
        axes={"alpha": [0.1, 0.3, 1.0], "rho": [0.2, 0.5]},
        runner=samflow.Discrete(0.05, 60),
        chunk=2,
    )
    samflow.sweep("sam-l2", out=tmp_path / "clean.nc", **kw)
    clean = xr.load_dataset(tmp_path / "clean.nc")
    out = tmp_path / "d.nc"
    monkeypatch.setenv(STOP_AFTER_ENV, "3")  # every chunk written, no final file yet
    with pytest.raises(KeyboardInterrupt):
        samflow.sweep("sam-l2", out=out, **kw)
    monkeypatch.delenv(STOP_AFTER_ENV)
    work = tmp_path / "d.nc.work"
    kept = tmp_path / "kept"
    shutil.copytree(work, kept)
    chunks = sorted(kept.glob("chunk_*.nc"))
    assert len(chunks) == 3 and all(checksum_holds(p) for p in chunks)
    size = chunks[1].stat().st_size
    rng = np.random.default_rng(0)
    offsets = sorted({0, 100, 1000, size - 8, *rng.integers(0, size - 8, 20).tolist()})
    for offset in offsets:
        shutil.rmtree(work, ignore_errors=True)
        out.unlink(missing_ok=True)
        shutil.copytree(kept, work)
        damaged = work / chunks[1].name
        with open(damaged, "r+b") as f:
            f.seek(offset)
            data = f.read(8)
            f.seek(offset)
            f.write(bytes(b ^ 0xFF for b in data))
        capfd.readouterr()
        samflow.sweep("sam-l2", out=out, **kw)
        err = capfd.readouterr().err
        assert f"chunk {damaged} fails its checksum; recomputing it" in err, offset
        same_result(xr.load_dataset(out), clean)
        assert not work.exists()


def test_ctrl_c_at_random_moments_stops_promptly_and_cleanly(tmp_path, clean):
    """SIGINT at random moments (import, compile, chunks, the final write): the sweep
    ends within seconds with status 130 and one line, or had already finished (the file
    complete; a Ctrl-C after the command ends the process at once); no temporary is
    left, and a resume gives the uninterrupted result."""
    rng = random.Random(30)
    out = tmp_path / "i.nc"
    for trial in range(4):
        out.unlink(missing_ok=True)
        proc = run_phase(out, chunk=rng.choice([2, 3, 5]), wait=False)
        time.sleep(rng.uniform(0.5, 4.0))
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            pytest.fail(f"trial {trial}: still running 15 s after SIGINT")
        if proc.returncode == 130:
            assert err.strip().splitlines()[-1] == "samflow: interrupted", err
        else:
            assert proc.returncode in (0, -signal.SIGINT) and out.exists(), err
        assert not list(tmp_path.rglob("*.tmp")), trial
    status, err = run_phase(out, chunk=5)
    assert status == 0, err
    same_result(xr.load_dataset(out), clean)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["i.nc"]


def _tiny_sweep(out):
    return samflow.sweep(
        "gd", depth=2, mu=[1.0, 2.0], axes={"alpha": [0.1, 0.2, 0.3]}, chunk=1, out=out,
        runner=samflow.Discrete(eta=0.1, steps=10),
    )  # fmt: skip


def test_ctrl_c_just_after_the_final_write_leaves_no_work_folder(tmp_path, monkeypatch):
    """The interrupt arrives once the final file is in place, before the work folder is
    removed (the issue's ``s.nc.work/`` of 47 chunks): the folder goes all the same."""
    from samflow.sweeps import store

    write = store.write_dataset

    def write_then_interrupt(ds, path, compress=True, checksum=False):
        written = write(ds, path, compress, checksum)
        if not checksum:  # the final file, not a chunk
            raise KeyboardInterrupt
        return written

    monkeypatch.setattr(store, "write_dataset", write_then_interrupt)
    out = tmp_path / "s.nc"
    with pytest.raises(KeyboardInterrupt):
        _tiny_sweep(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.nc"]


def test_ctrl_c_while_the_work_folder_is_removed_removes_it(tmp_path, monkeypatch):
    from samflow.sweeps import store

    rmtree, calls = store.shutil.rmtree, []

    def interrupted_once(path, ignore_errors=False):
        calls.append(path)
        if len(calls) == 1:
            raise KeyboardInterrupt
        rmtree(path, ignore_errors=ignore_errors)

    monkeypatch.setattr(store.shutil, "rmtree", interrupted_once)
    with pytest.raises(KeyboardInterrupt):
        _tiny_sweep(tmp_path / "s.nc")
    assert len(calls) == 2 and sorted(p.name for p in tmp_path.iterdir()) == ["s.nc"]


def test_a_rerun_removes_a_stale_work_folder_and_says_so(tmp_path, capsys):
    out = tmp_path / "s.nc"
    first = _tiny_sweep(out)
    stale = tmp_path / "s.nc.work"
    stale.mkdir()
    (stale / "chunk_0_1.0123.nc").write_bytes(b"left by a run killed after its final write")
    again = _tiny_sweep(out)
    assert f"{out}: complete; removed its stale work folder {stale}" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.nc"]
    xr.testing.assert_identical(again, first)


def _rewrite(out, change) -> int:
    """``out`` rewritten with ``change(ds)`` applied; its new mtime."""
    ds = xr.load_dataset(out)
    change(ds)
    out.unlink()
    ds.to_netcdf(out)
    return out.stat().st_mtime_ns


@pytest.mark.parametrize(
    "change, said",
    [
        (lambda ds: ds["loss"].attrs.update(long_name="old text"), "loss: long_name 'old text'"),
        (lambda ds: ds.attrs.update(samflow_version="0.0.1"), "written by samflow 0.0.1, not"),
        (lambda ds: ds.attrs.update(collapse_factor=9.0), "attribute collapse_factor is 9.0"),
        (lambda ds: ds.attrs.update(extra="x"), "its attribute extra is 'x', not None"),
    ],
)
def test_a_file_of_this_sweep_as_another_version_wrote_it_is_recomputed(
    tmp_path, capsys, change, said
):
    """A finished file whose key matches but whose text is not this version's (the
    issue's stale reuse: a long_name changed between versions) is recomputed, said on
    stderr; the rewritten file is the one a fresh run writes."""
    out = tmp_path / "s.nc"
    first = _tiny_sweep(out)
    written = xr.load_dataset(out)
    _rewrite(out, change)
    again = _tiny_sweep(out)
    err = capsys.readouterr().err
    assert f"samflow: {out} holds this sweep but" in err and said in err
    same_result(xr.load_dataset(out), written)
    xr.testing.assert_equal(again, first)


def test_overwrite_always_recomputes_and_rewrites(tmp_path, capsys):
    """``overwrite`` rewrites a finished file of the same sweep (it returned the old file,
    stale text and all); a plain rerun of a file as this version writes it reuses it."""
    out = tmp_path / "s.nc"
    first = _tiny_sweep(out)
    written = xr.load_dataset(out)
    mtime = out.stat().st_mtime_ns
    _tiny_sweep(out)
    assert out.stat().st_mtime_ns == mtime  # as this version writes it: reused
    _rewrite(out, lambda ds: ds["loss"].attrs.update(long_name="old text"))
    again = samflow.sweep(
        "gd", depth=2, mu=[1.0, 2.0], axes={"alpha": [0.1, 0.2, 0.3]}, chunk=1, out=out,
        runner=samflow.Discrete(eta=0.1, steps=10), overwrite=True,
    )  # fmt: skip
    assert xr.load_dataset(out)["loss"].attrs["long_name"] == first["loss"].attrs["long_name"]
    same_result(xr.load_dataset(out), written)
    xr.testing.assert_equal(again, first)
    assert "holds this sweep but" not in capsys.readouterr().err  # overwrite asks no question


def test_a_chunk_of_another_samflow_version_is_recomputed(tmp_path, capsys):
    """A chunk whose key matches but that another samflow version wrote is never used."""
    from samflow.io import write_dataset

    out = tmp_path / "s.nc"
    with pytest.raises(KeyboardInterrupt):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv(STOP_AFTER_ENV, "2")
            _tiny_sweep(out)
    chunks = sorted((tmp_path / "s.nc.work").glob("chunk_*.nc"))
    assert len(chunks) == 2
    ds = xr.load_dataset(chunks[0])
    ds.attrs["samflow_version"] = "0.0.1"
    chunks[0].unlink()
    write_dataset(ds, chunks[0].parent / (chunks[0].name.split(".")[0] + ".nc"), False, True)
    done = _tiny_sweep(out)
    err = capsys.readouterr().err
    assert err.count("holds another sweep or another samflow version's; recomputing it") == 1
    fresh = _tiny_sweep(tmp_path / "fresh.nc")
    xr.testing.assert_equal(done, fresh)
    same_result(xr.load_dataset(out), xr.load_dataset(tmp_path / "fresh.nc"))


def test_a_real_ctrl_c_after_the_first_chunk_exits_130_and_resumes_identically(tmp_path):
    """A real SIGINT to ``samflow phase ... --chunk 1 --out x.nc`` as soon as its first
    chunk is on disk: status 130 within GRACE_SECONDS (samflow.interrupt's bound) plus a
    second of slack for a loaded machine, the last line ``samflow: interrupted``, no
    temporary; the rerun says it resumes and writes the file an uninterrupted run writes
    (every variable bit for bit, every attribute but ``history``). 20000 steps per point
    make a chunk take a few tenths of a second here, so that six chunks outlast the
    signal."""
    from samflow.interrupt import GRACE_SECONDS

    argv = ["--axis", "alpha=0.05:3:6:log", "--steps", "20000", "--chunk", "1"]
    argv = ["phase", "--method", "sam-l2", "--rho", "0.5", "--depth", "2", "--mu", "1,2,3,4",
            "--eta", "0.05", *argv]  # fmt: skip
    code = "import sys; from samflow.cli import main; sys.exit(main(sys.argv[1:]))"
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=1"}
    env.pop(STOP_AFTER_ENV, None)  # one device: a chunk of 1 point is 1 point

    def phase(out):
        return subprocess.Popen(
            [sys.executable, "-c", code, *argv, "--out", str(out)], env=env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    out = tmp_path / "x.nc"
    work = tmp_path / "x.nc.work"
    proc = phase(out)
    deadline = time.monotonic() + 120
    while not list(work.glob("chunk_*.nc")):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no chunk within 120 s"
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    _, err = proc.communicate(timeout=60)
    took = time.monotonic() - sent
    assert proc.returncode == 130, err
    assert took < GRACE_SECONDS + 1.0, took
    assert err.strip().splitlines()[-1] == "samflow: interrupted"
    assert not out.exists() and not list(tmp_path.rglob("*.tmp"))
    kept = len(list(work.glob("chunk_*.nc")))
    assert 1 <= kept < 6  # the premise: stopped between chunks, the first one kept
    _, err = phase(out).communicate(timeout=300)
    assert f"resuming: {kept} of 6 chunks done" in err, err.replace("\r", "\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.nc"]
    clean = tmp_path / "clean" / "x.nc"  # the same sweep, uninterrupted, in Python
    clean.parent.mkdir()
    samflow.sweep(
        "sam-l2", rho=0.5, depth=2, mu=[1.0, 2.0, 3.0, 4.0], axes={"alpha": "0.05:3:6:log"},
        runner=samflow.Discrete(eta=0.05, steps=20000), chunk=1, out=clean,
    )  # fmt: skip
    same_result(xr.load_dataset(out), xr.load_dataset(clean))


def test_ctrl_c_during_the_final_write_keeps_the_chunks_for_the_rerun(tmp_path, monkeypatch):
    """An interrupt before the final file is in place (its write cut short) keeps the
    work folder: the rerun reads every chunk (none recomputed), writes the file and
    removes the folder; beside the complete file a stale folder is removed by a rerun,
    which says so, also on the command line with -q."""
    from samflow import engine
    from samflow.cli import main
    from samflow.sweeps import store

    write = store.write_dataset

    def interrupted(ds, path, compress=True, checksum=False):
        if not checksum:
            raise KeyboardInterrupt
        return write(ds, path, compress, checksum)

    out = tmp_path / "s.nc"
    with monkeypatch.context() as mp:
        mp.setattr(store, "write_dataset", interrupted)
        with pytest.raises(KeyboardInterrupt):
            _tiny_sweep(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.nc.work"]
    assert len(list((tmp_path / "s.nc.work").glob("chunk_*.nc"))) == 3
    with monkeypatch.context() as mp:  # nothing is computed again
        mp.setattr(store, "start_points", lambda *a: pytest.fail("a chunk was recomputed"))
        resumed = _tiny_sweep(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.nc"]
    xr.testing.assert_equal(resumed, _tiny_sweep(tmp_path / "fresh.nc"))
    assert engine.start_points is store.start_points
    stale = tmp_path / "s.nc.work"
    stale.mkdir()
    (stale / "chunk_000000000000_000000000001.0123.nc").write_bytes(b"left behind")
    argv = ["phase", "--method", "gd", "--depth", "2", "--mu", "1,2", "--axis",
            "alpha=0.1,0.2,0.3", "--eta", "0.1", "--steps", "10", "--chunk", "1", "-q"]  # fmt: skip
    out2 = tmp_path / "c.nc"
    assert main([*argv, "--out", str(out2)]) == 0
    stale2 = tmp_path / "c.nc.work"
    stale2.mkdir()
    (stale2 / "lock").write_text("1")
    mtime = out2.stat().st_mtime_ns
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main([*argv, "--out", str(out2)]) == 0
    assert err.getvalue() == f"{out2}: complete; removed its stale work folder {stale2}\n"
    assert out2.stat().st_mtime_ns == mtime and not stale2.exists()
