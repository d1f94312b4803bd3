"""A real browser for the tests: Debian's Chromium, driven by PyPI's ``playwright``, kept offline.

Nothing here needs Node.js or a browser download: playwright's Python package launches the system
Chromium (``/usr/bin/chromium``; ``CHROMIUM`` overrides it). Every request that would leave this
machine is refused and recorded, so a page that draws here draws on an offline university hub too.

``jupyter_lab()`` starts JupyterLab headless on a free localhost port with a token, the way
``make lab`` does (or through ``make lab`` itself), for tests that drive a student's session.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
LOCAL = re.compile(r"^(file:|data:|blob:|about:|http://127\.0\.0\.1[:/])")


def missing() -> list[str]:
    """What this machine lacks to run the browser tests (empty when they can run)."""
    absent = [] if Path(CHROMIUM).exists() else [f"Chromium ({CHROMIUM})"]
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        absent.append("the playwright package (make installs it)")
    return absent


# CI installs Chromium (.ci/run) and sets COURSE_REQUIRE_BROWSER, so that these tests never skip there.
requires_browser = pytest.mark.skipif(
    bool(missing()) and not os.environ.get("COURSE_REQUIRE_BROWSER"), reason=f"missing: {', '.join(missing())}"
)


@dataclass
class Browsing:
    """A page, with what it tried to fetch from outside and the JavaScript errors it raised."""

    page: object  # playwright.sync_api.Page
    blocked: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)


@contextmanager
def offline_page(*, width: int = 1280, height: int = 900) -> Iterator[Browsing]:
    """A fresh headless Chromium page that may reach only this machine."""
    with offline_browser(width=width, height=height) as new_page:
        yield new_page()


@contextmanager
def offline_browser(*, width: int = 1280, height: int = 900) -> Iterator[Callable[[], Browsing]]:
    """One headless Chromium; each call of what it yields opens a page in a context of its own (its own cookies:
    another person logged in), which may reach only this machine."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:

            def new_page() -> Browsing:
                page = browser.new_context(viewport={"width": width, "height": height}).new_page()
                browsing = Browsing(page)
                page.on("pageerror", lambda error: browsing.page_errors.append(str(error)))

                def route(route):
                    address = route.request.url
                    if LOCAL.match(address):
                        return route.continue_()
                    browsing.blocked.append(address)
                    return route.abort()

                page.route("**/*", route)
                return browsing

            yield new_page
        finally:
            browser.close()


# Every output block of a page whose text is wider than the box it is drawn in (a code cell's source, as in a
# notebook, scrolls in its own box).
WIDEST = """() => {
    const blocks = [...document.querySelectorAll("div.output_area pre")];
    return {blocks: blocks.length,
            overflowing: blocks.filter(pre => pre.scrollWidth > pre.clientWidth + 1)
                               .map(pre => [pre.scrollWidth, pre.clientWidth, pre.innerText.slice(0, 80)])};
}"""

# What a terminal's shell writes, less its colours, titles and carriage returns.
ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\r")


class Terminal:
    """A terminal of JupyterLab in ``page``, opened as a person does (*File > New > Terminal*), which takes what is
    typed into it as a person does; what its shell wrote is read from terminado's websocket messages (xterm draws
    on a canvas)."""

    def __init__(self, page, timeout_s: float = 60):
        self.page, self.frames = page, []
        opened = []

        def listen(ws) -> None:
            if "/terminals/websocket/" in ws.url and not opened:  # this terminal's, the first opened from now on
                opened.append(ws)
                ws.on("framereceived", lambda payload: self.frames.append(payload))

        page.on("websocket", listen)
        page.locator("#jp-MainMenu .lm-MenuBar-itemLabel", has_text="File").click(timeout=60_000)
        page.locator(".lm-Menu .lm-Menu-itemLabel", has_text=re.compile(r"^New$")).hover()
        page.locator(".lm-Menu .lm-Menu-itemLabel", has_text=re.compile(r"^Terminal$")).click()
        self.xterm = page.locator(".jp-Terminal:visible .xterm").last
        self.xterm.wait_for(timeout=timeout_s * 1000)
        self.wait_for(lambda text: text.strip() != "", timeout_s)  # the shell's first prompt

    def output(self) -> str:
        """Everything the shell has written so far, as plain text."""
        text = []
        for frame in self.frames:
            with contextlib.suppress(ValueError, TypeError):
                kind, *data = json.loads(frame)
                if kind == "stdout":
                    text.append(data[0])
        return ANSI.sub("", "".join(text))

    def wait_for(self, done: Callable[[str], bool], timeout_s: float) -> str:
        """The output once ``done(output)`` holds, or as it stands after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while not done(self.output()) and time.monotonic() < deadline:
            self.page.wait_for_timeout(250)
        return self.output()

    def type(self, line: str) -> None:
        """Type ``line`` and press Enter."""
        self.xterm.click()
        self.page.keyboard.type(line)
        self.page.keyboard.press("Enter")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Lab:
    url: str  # http://127.0.0.1:PORT
    token: str
    root: Path

    def tree(self, path: str) -> str:
        """The URL that opens ``path`` (relative to the server's root) in JupyterLab."""
        return f"{self.url}/lab/tree/{path}?token={self.token}"


@contextmanager
def jupyter_lab(
    root: Path,
    *,
    env: dict | None = None,
    args: tuple[str, ...] = (),
    token: str = "course-test-token",
    start_timeout: float = 90,
    via_make: bool = False,
) -> Iterator[Lab]:
    """JupyterLab serving ``root`` headless on a free localhost port; stopped on exit.

    ``via_make`` starts it with the students' own command, ``make lab`` (their settings included), with
    ``root`` as ``LAB_DIR`` and the port, token and ``args`` as ``LAB_ARGS``.
    """
    port = free_port()
    options = ["--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1", f"--ServerApp.token={token}", *args]
    if via_make:
        command = [
            "make",
            "--no-print-directory",
            "-C",
            str(ROOT),
            "lab",
            f"LAB_DIR={root}",
            f"LAB_ARGS={shlex.join(options)}",
        ]
    else:
        jupyter = Path(sys.executable).parent / "jupyter"
        command = [jupyter, "lab", "--allow-root", f"--ServerApp.root_dir={root}", *options]
    log = tempfile.TemporaryFile("w+")  # noqa: SIM115 - closed below; its tail explains a failed start
    # A session of its own, so that stopping it stops make, the server and its kernels together.
    server = subprocess.Popen(
        command, cwd=root, env=env or dict(os.environ), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + start_timeout
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    tail = log.read()[-3000:]
                    raise RuntimeError(f"JupyterLab did not start (exit {server.poll()}):\n{tail}") from None
                time.sleep(0.5)
        yield Lab(url, token, root)
    finally:
        _stop(server)
        log.close()


def _stop(server: subprocess.Popen) -> None:
    """SIGTERM to the server's process group (the server shuts its kernels down), SIGKILL if it hangs."""
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(server.pid, sig)
        except ProcessLookupError:
            return
        try:
            server.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
