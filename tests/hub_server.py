"""A local stand-in for the Hugging Face hub: serves folders' files at ``/<repo>/resolve/<revision>/<name>``.

It answers ``HEAD`` and ``GET`` with the headers ``huggingface_hub`` reads (commit, ETag, size), so the
download code of ``coursetools.pretrained`` and ``tinystories.download`` runs unchanged, without internet.
Data set repos live at ``/datasets/<repo>/resolve/...``, as ``hf_hub_url(..., repo_type="dataset")`` builds.
A GET with ``Range: bytes=N-`` gets ``206 Partial Content`` (how a download resumes). Options imitate
a network that fails: a first GET cut off after some bytes, GETs refused for a while, a corrupted copy.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import re
import threading
from pathlib import Path

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _handler(
    repos: dict[str, Path],
    requests: list[str],
    *,
    etags: dict[str, str],
    cut_after: int | None,
    fail_gets: int,
    ranges: bool,
    cdn: dict[str, str],
):
    state = {"cut": cut_after is None, "fail_gets": fail_gets}
    lock = threading.Lock()

    class Hub(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the hub: a cut connection is then visible to the client

        def _file(self) -> Path | None:
            repo, sep, rest = self.path.lstrip("/").removeprefix("cdn/").partition("/resolve/")
            if not sep or repo not in repos:
                return None
            _revision, _, name = rest.partition("/")
            path = repos[repo] / name.split("?")[0]
            return path if path.is_file() else None

        def _answer(self, body: bool):
            wanted = self.headers.get("Range")
            requests.append(f"{self.command} {self.path}" + (f" [{wanted}]" if wanted else ""))
            path = self._file()
            if path is None:
                self.send_response(404)
                self.send_header("X-Error-Code", "EntryNotFound")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if cdn and not self.path.startswith("/cdn/"):  # an LFS file: metadata here, bytes on the CDN
                data = path.read_bytes()
                self.send_response(302)
                self.send_header("Location", f"{cdn['url']}/cdn{self.path}")
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("X-Linked-Etag", f'"{etags.get(path.name) or hashlib.sha256(data).hexdigest()}"')
                self.send_header("X-Linked-Size", str(len(data)))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            with lock:
                cut, refuse = False, False
                if body and not state["cut"]:
                    state["cut"] = cut = True
                elif body and state["fail_gets"] > 0:
                    state["fail_gets"] -= 1
                    refuse = True
            if refuse:
                self.send_response(503)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            data = path.read_bytes()
            start = 0
            match = re.fullmatch(r"bytes=(\d+)-", wanted or "")
            if ranges and match and int(match[1]) < len(data):
                start = int(match[1])
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            else:
                self.send_response(200)
            self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("ETag", f'"{etags.get(path.name) or hashlib.sha256(data).hexdigest()}"')
            self.send_header("Accept-Ranges", "bytes" if ranges else "none")
            self.send_header("Content-Length", str(len(data) - start))
            self.end_headers()
            if body:
                self.wfile.write(data[start : start + cut_after] if cut else data[start:])
                if cut:  # the connection drops mid-file
                    self.wfile.flush()
                    self.close_connection = True

        def do_HEAD(self):  # noqa: N802 - http.server's naming
            self._answer(body=False)

        def do_GET(self):  # noqa: N802
            self._answer(body=True)

        def log_message(self, *args):
            pass

    return Hub


@contextlib.contextmanager
def serving(
    repos: dict[str, Path],
    *,
    datasets: dict[str, Path] | None = None,
    etags: dict[str, str] | None = None,
    cut_after: int | None = None,
    fail_gets: int = 0,
    ranges: bool = True,
    lfs: bool = False,
):
    """Yield (endpoint URL, list of requests seen) while serving model ``repos`` and ``datasets`` ({repo id: folder}).

    Requests are recorded as ``"GET /path"``, with ``" [bytes=N-]"`` appended when a Range was asked.
    ``etags``: file name -> the ETag (sha256) to announce instead of the file's own (a corrupted copy).
    ``cut_after``: the first GET sends only this many bytes of the file, then closes the connection.
    ``fail_gets``: after that, this many GETs answer 503 (an outage longer than the client's retries).
    ``ranges=False``: Range headers are ignored (200 with the whole file), as some proxies do.
    ``lfs=True``: as the hub serves LFS files, ``/resolve/`` answers 302 with X-Linked-Etag and X-Linked-Size
    and the bytes come from another origin (a second server, standing in for the CDN) at ``/cdn/<path>``.
    """
    requests: list[str] = []
    served = dict(repos) | {f"datasets/{repo}": folder for repo, folder in (datasets or {}).items()}
    cdn: dict[str, str] = {}
    handler = _handler(
        served, requests, etags=etags or {}, cut_after=cut_after, fail_gets=fail_gets, ranges=ranges, cdn=cdn
    )
    servers = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) for _ in range(2 if lfs else 1)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    urls = [f"http://127.0.0.1:{server.server_address[1]}" for server in servers]
    if lfs:
        cdn["url"] = urls[1]
    try:
        yield urls[0], requests
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
