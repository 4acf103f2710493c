"""Downloads from a local HTTP server that misbehaves: a body cut short of its Content-Length, a
changed file, a missing one, no server at all, a damaged zip; and a stale copy in the cache.
Nothing half-downloaded may be kept or reused (``attnsvm data download`` of a ``toy`` dataset
registered for the case)."""

from __future__ import annotations

import hashlib
import http.server
import io
import threading
import zipfile

from reliability_harness import Case, accepted, refused

from attnsvm.rec.data import catalog
from attnsvm.rec.data.catalog import DatasetSpec, SourceFile
from attnsvm.rec.data.readers import read_pairs

DOWNLOAD = "download"
PAIRS = b"1 1\n1 2\n1 3\n2 1\n2 2\n2 3\n3 3\n3 1\n3 2\n"


def _damaged_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("toy/toy.txt", PAIRS * 40)
    data = bytearray(buffer.getvalue())
    data[45:55] = b"\x00" * 10  # inside the member: its CRC-32 fails
    return bytes(data)


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/toy.txt":
            self._send(PAIRS)
        elif self.path == "/toy.zip":
            self._send(_damaged_zip())
        elif self.path == "/cut.txt":  # promises more than it sends, then hangs up
            self.send_response(200)
            self.send_header("Content-Length", str(len(PAIRS) + 100))
            self.end_headers()
            self.wfile.write(PAIRS[:20])
        else:
            self.send_error(404)

    def _send(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def _serve(workspace) -> str:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    workspace.cleanups.append(server.server_close)
    workspace.cleanups.append(server.shutdown)
    return f"http://127.0.0.1:{server.server_address[1]}"


def _download(workspace, path: str, checksum: str | None = None, *, base: str | None = None):
    spec = DatasetSpec(
        name="toy",
        description="toy pairs",
        files=(SourceFile("toy.txt", read_pairs),),
        preprocess=lambda data: data,
        preprocessing="none",
        url=(base or _serve(workspace)) + path,
        checksum=checksum,
    )
    catalog.DATASETS["toy"] = spec
    workspace.cleanups.append(lambda: catalog.DATASETS.pop("toy", None))
    return ["data", "download", "toy", "--cache-dir", str(workspace.root / "cache")]


def _nothing_kept(workspace, output: str) -> None:
    kept = [p.name for p in (workspace.root / "cache").rglob("*") if p.is_file()]
    assert kept == [], kept


def _prepared(workspace, output: str) -> None:
    assert "prepared toy" in output, output
    raw = workspace.root / "cache" / "toy" / "toy.txt"
    assert raw.read_bytes() == PAIRS


def _stale_copy(workspace) -> list[str]:
    workspace.file("cache/toy/toy.txt", PAIRS[:7])  # a copy cut short by an older version
    return _download(workspace, "/toy.txt", "sha256:" + hashlib.sha256(PAIRS).hexdigest())


def _no_server(workspace) -> list[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    server.server_close()  # the port is closed: the connection is refused
    return _download(workspace, "/toy.txt", base=base)


def download_cases() -> list[Case]:
    good = "sha256:" + hashlib.sha256(PAIRS).hexdigest()
    return [
        refused("a body cut short of its Content-Length", DOWNLOAD,
                lambda w: _download(w, "/cut.txt"),
                r"cut.txt: download truncated: 20 of 136 bytes arrived", _nothing_kept),
        refused("a file that changed upstream (checksum)", DOWNLOAD,
                lambda w: _download(w, "/toy.txt", "sha256:" + "0" * 64),
                r"toy.txt: sha256 [0-9a-f]+ differs from the published", _nothing_kept),
        refused("a missing file (404)", DOWNLOAD, lambda w: _download(w, "/gone.txt"),
                r"gone.txt: download failed \(Not Found\): check the network and try again, or "
                r"fetch the file another way", _nothing_kept),
        refused("no server listening", DOWNLOAD, _no_server,
                r"toy.txt: download failed \(.*refused.*\): check the network", _nothing_kept),
        refused("a damaged zip without a checksum", DOWNLOAD,
                lambda w: _download(w, "/toy.zip"),
                r"^error: http://127.0.0.1:\d+/toy.zip:toy/toy.txt: is damaged inside the archive "
                r"\(Bad CRC-32.*\): .*download or copy it again \(the download was not kept\)",
                _nothing_kept),
        accepted("a stale, short copy in the cache is fetched again", DOWNLOAD, _stale_copy,
                 _prepared),
        accepted("a good download, checksum verified", DOWNLOAD,
                 lambda w: _download(w, "/toy.txt", good), _prepared),
    ]  # fmt: skip
