"""``samflow data download`` against a local threaded HTTP server (never the internet)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from samflow.cli import main
from samflow.errors import InputError, RunFailure
from samflow.images import download as dl

PAYLOAD = bytes(range(256)) * 64  # 16 KiB


class _Handler(BaseHTTPRequestHandler):
    """Serves ``PAYLOAD`` at any path, honouring ``Range: bytes=N-``; records ranges."""

    ranges: ClassVar[list[str | None]] = []

    def do_GET(self):
        header = self.headers.get("Range")
        type(self).ranges.append(header)
        body, status = PAYLOAD, 200
        if header:
            start = int(header.removeprefix("bytes=").rstrip("-"))
            if start >= len(PAYLOAD):
                self.send_response(416)
                self.end_headers()
                return
            body, status = PAYLOAD[start:], 206
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class _ClosesHalfWay(_Handler):
    """First request: promises all of PAYLOAD, sends half, closes the connection (with
    a Content-Length, or without one when ``send_length`` is False). Later requests:
    as :class:`_Handler` (Range honoured)."""

    send_length: ClassVar[bool] = True

    def do_GET(self):
        if type(self).ranges:
            return super().do_GET()
        type(self).ranges.append(self.headers.get("Range"))
        self.send_response(200)
        if self.send_length:
            self.send_header("Content-Length", str(len(PAYLOAD)))
        self.end_headers()
        self.wfile.write(PAYLOAD[: len(PAYLOAD) // 2])
        self.close_connection = True


class _IgnoresRange(_Handler):
    """Always the whole of PAYLOAD with status 200, whatever Range asks for."""

    def do_GET(self):
        type(self).ranges.append(self.headers.get("Range"))
        self.send_response(200)
        self.send_header("Content-Length", str(len(PAYLOAD)))
        self.end_headers()
        self.wfile.write(PAYLOAD)


@contextlib.contextmanager
def serving(handler):
    handler.ranges = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/files"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def server():
    with serving(_Handler) as url:
        yield url


@pytest.fixture
def table(monkeypatch):
    """Replace the mnist entry by one small file whose digest is that of PAYLOAD."""
    good = dl.Source(
        "http://unused.invalid/",
        (dl.RemoteFile("t10k-labels-idx1-ubyte.gz", hashlib.sha256(PAYLOAD).hexdigest(), 16384),),
    )
    monkeypatch.setitem(dl.SOURCES, "mnist", good)
    return good


def test_download_success_and_skip(server, table, tmp_path):
    (path,) = dl.download("mnist", tmp_path, base_url=server, log=lambda _: None)
    assert path == tmp_path / "mnist" / "t10k-labels-idx1-ubyte.gz"
    assert path.read_bytes() == PAYLOAD
    assert list(path.parent.iterdir()) == [path]
    dl.download("mnist", tmp_path, base_url=server, log=lambda _: None)
    assert _Handler.ranges == [None]  # the second call found the verified file


def test_checksum_mismatch_leaves_nothing(server, monkeypatch, tmp_path):
    bad = dl.Source("http://unused.invalid/", (dl.RemoteFile("f.bin", "0" * 64, 16384),))
    monkeypatch.setitem(dl.SOURCES, "svhn", bad)
    with pytest.raises(InputError, match=r"checksum mismatch for f\.bin"):
        dl.download("svhn", tmp_path, base_url=server, log=lambda _: None)
    assert list((tmp_path / "svhn").iterdir()) == []


def test_resume_asks_for_the_rest(server, table, tmp_path):
    target = tmp_path / "mnist"
    target.mkdir()
    (target / "t10k-labels-idx1-ubyte.gz.part").write_bytes(PAYLOAD[:5000])
    (path,) = dl.download("mnist", tmp_path, base_url=server, log=lambda _: None)
    assert _Handler.ranges == ["bytes=5000-"]
    assert path.read_bytes() == PAYLOAD
    assert not (target / "t10k-labels-idx1-ubyte.gz.part").exists()


def test_complete_part_file_is_verified(server, table, tmp_path):
    target = tmp_path / "mnist"
    target.mkdir()
    (target / "t10k-labels-idx1-ubyte.gz.part").write_bytes(PAYLOAD)
    (path,) = dl.download("mnist", tmp_path, base_url=server, log=lambda _: None)
    assert _Handler.ranges == [f"bytes={len(PAYLOAD)}-"] and path.read_bytes() == PAYLOAD


def test_cli_download_and_env_base_url(server, table, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(dl.BASE_URL_ENV, server)
    assert main(["data", "download", "mnist", "--dir", str(tmp_path)]) == 0
    assert (tmp_path / "mnist" / "t10k-labels-idx1-ubyte.gz").read_bytes() == PAYLOAD
    monkeypatch.setitem(dl.SOURCES, "mnist", dl.Source("x", (dl.RemoteFile("g", "1" * 64, 1),)))
    assert main(["data", "download", "mnist", "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("samflow: error: checksum mismatch")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_server_keeps_partial(table, tmp_path):
    part = tmp_path / "mnist" / "t10k-labels-idx1-ubyte.gz.part"
    part.parent.mkdir()
    part.write_bytes(PAYLOAD[:100])
    url = f"http://127.0.0.1:{_closed_port()}/"
    with pytest.raises(RunFailure, match="kept the 100 bytes"):
        dl.download("mnist", tmp_path, base_url=url, log=lambda _: None)
    assert part.read_bytes() == PAYLOAD[:100]


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
    return status, out.getvalue(), err.getvalue()


def _one_line(err: str, prefix: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(prefix), err
    return lines[0]


@pytest.mark.parametrize("send_length", [True, False])
def test_closed_half_way_keeps_part_then_resumes(table, tmp_path, monkeypatch, send_length):
    monkeypatch.setattr(_ClosesHalfWay, "send_length", send_length)
    target = tmp_path / "mnist"
    part = target / "t10k-labels-idx1-ubyte.gz.part"
    argv = ["data", "download", "mnist", "--dir", str(tmp_path)]
    with serving(_ClosesHalfWay) as url:
        status, _, err = _cli([*argv, "--base-url", url])
        line = _one_line(err, "samflow: failed: short read")
        assert status == 1 and "checksum" not in line
        assert f"got {len(PAYLOAD) // 2} of {len(PAYLOAD)} bytes" in line
        assert part.read_bytes() == PAYLOAD[: len(PAYLOAD) // 2]
        status, out, err = _cli([*argv, "--base-url", url])
        assert (status, err) == (0, "")
        assert _ClosesHalfWay.ranges == [None, f"bytes={len(PAYLOAD) // 2}-"]
    assert "resuming at byte 8192" in out
    assert [p.name for p in target.iterdir()] == ["t10k-labels-idx1-ubyte.gz"]
    assert (target / "t10k-labels-idx1-ubyte.gz").read_bytes() == PAYLOAD


def test_server_ignoring_range_starts_over(table, tmp_path):
    part = tmp_path / "mnist" / "t10k-labels-idx1-ubyte.gz.part"
    part.parent.mkdir()
    part.write_bytes(b"x" * 5000)  # not a prefix of PAYLOAD: appending would corrupt
    logged = []
    with serving(_IgnoresRange) as url:
        (path,) = dl.download("mnist", tmp_path, base_url=url, log=logged.append)
        assert _IgnoresRange.ranges == ["bytes=5000-"]
    assert path.read_bytes() == PAYLOAD and not part.exists()
    assert any("starting over" in line for line in logged)


def test_network_failure_is_status_1(table, tmp_path, monkeypatch):
    argv = ["data", "download", "mnist", "--dir", str(tmp_path), "--base-url"]
    status, _, err = _cli([*argv, f"http://127.0.0.1:{_closed_port()}/"])
    assert status == 1 and "refused" in _one_line(err, "samflow: failed: download of")

    def no_dns(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_dns)
    status, _, err = _cli([*argv, "http://no-such-host.invalid/"])
    assert status == 1 and "not known" in _one_line(err, "samflow: failed: download of")


def _no_network(*args, **kwargs):
    raise AssertionError("the network was reached")


@pytest.mark.parametrize(
    "base_url, named",
    [
        ("ftp://example.org/mnist/", "ftp://example.org"),
        ("localhost:8000/mnist", "localhost:8000"),
        ("http://", "http://"),
        ("https://host:80x/", "invalid port"),
        ("/tmp/mirror", "/tmp/mirror"),
        ("", "''"),
    ],
)
def test_bad_base_url_is_status_2_before_network(table, tmp_path, monkeypatch, base_url, named):
    monkeypatch.setattr(dl.urllib.request, "urlopen", _no_network)
    argv = ["data", "download", "mnist", "--dir", str(tmp_path), "--base-url", base_url]
    status, _, err = _cli(argv)
    assert status == 2 and named in _one_line(err, "samflow: error: base_url")
    monkeypatch.setenv(dl.BASE_URL_ENV, base_url or "nope")
    status, _, err = _cli(argv[:5])
    assert status == 2 and "$SAMFLOW_DATA_URL" in _one_line(err, "samflow: error:")


def test_bad_dir_is_status_2_before_network(table, tmp_path, monkeypatch):
    monkeypatch.setattr(dl.urllib.request, "urlopen", _no_network)
    afile = tmp_path / "a_file"
    afile.write_text("x")
    for directory in (afile, afile / "sub", ""):
        status, _, err = _cli(["data", "download", "mnist", "--dir", str(directory)])
        assert status == 2, err
        assert (str(afile) if directory else "--dir is empty") in _one_line(err, "samflow: error:")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "mnist").write_text("a file where the folder goes")
    status, _, err = _cli(["data", "download", "mnist", "--dir", str(tmp_path / "d")])
    assert status == 2 and "is a file" in _one_line(err, "samflow: error:")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_on_a_terminal_and_quiet(server, table, tmp_path, monkeypatch, capsys):
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(["data", "download", "mnist", "--dir", str(tmp_path), "--base-url", server]) == 0
    assert "\rt10k-labels-idx1-ubyte.gz: 16.4 kB of 16.4 kB (100%)\n" in terminal.getvalue()
    assert "done: mnist" in capsys.readouterr().out
    (tmp_path / "mnist" / "t10k-labels-idx1-ubyte.gz").unlink()
    terminal.seek(0)
    terminal.truncate()
    argv = ["data", "download", "mnist", "--dir", str(tmp_path), "--base-url", server, "-q"]
    assert main(argv) == 0
    assert terminal.getvalue() == "" and capsys.readouterr().out == ""
    assert (tmp_path / "mnist" / "t10k-labels-idx1-ubyte.gz").read_bytes() == PAYLOAD


def test_progress_is_silent_off_a_terminal():
    stream = io.StringIO()
    bar = dl.ByteProgress(stream)
    bar.show("f", 10, 20)
    bar.end()
    assert stream.getvalue() == ""
