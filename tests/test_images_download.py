"""``samflow data download`` against a local threaded HTTP server (never the internet)."""

from __future__ import annotations

import hashlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from samflow.cli import main
from samflow.errors import InputError
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


@pytest.fixture
def server():
    _Handler.ranges = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/files"
    httpd.shutdown()
    httpd.server_close()


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


def test_unreachable_server_keeps_partial(table, tmp_path):
    with pytest.raises(InputError, match="run the same command again to resume"):
        dl.download("mnist", tmp_path, base_url="http://127.0.0.1:9/", log=lambda _: None)
