"""A local stand-in for the Hugging Face hub: serves a folder's files at ``/<repo>/resolve/<revision>/<name>``.

It answers ``HEAD`` and ``GET`` with the headers ``huggingface_hub`` reads (commit, ETag, size), so the
download code of ``coursetools.pretrained`` runs unchanged, without internet.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import threading
from pathlib import Path

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _handler(repos: dict[str, Path], requests: list[str]):
    class Hub(http.server.BaseHTTPRequestHandler):
        def _file(self) -> Path | None:
            repo, sep, rest = self.path.lstrip("/").partition("/resolve/")
            if not sep or repo not in repos:
                return None
            _revision, _, name = rest.partition("/")
            path = repos[repo] / name.split("?")[0]
            return path if path.is_file() else None

        def _answer(self, body: bool):
            requests.append(f"{self.command} {self.path}")
            path = self._file()
            if path is None:
                self.send_response(404)
                self.send_header("X-Error-Code", "EntryNotFound")
                self.end_headers()
                return
            data = path.read_bytes()
            self.send_response(200)
            self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body:
                self.wfile.write(data)

        def do_HEAD(self):  # noqa: N802 - http.server's naming
            self._answer(body=False)

        def do_GET(self):  # noqa: N802
            self._answer(body=True)

        def log_message(self, *args):
            pass

    return Hub


@contextlib.contextmanager
def serving(repos: dict[str, Path]):
    """Yield (endpoint URL, list of requests seen) while serving ``repos`` ({repo id: folder})."""
    requests: list[str] = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(repos, requests))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", requests
    finally:
        server.shutdown()
        server.server_close()
