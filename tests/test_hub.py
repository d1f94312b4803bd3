"""A class on the course's JupyterHub, end to end in a real browser: `make hub-start`, three Unix accounts, Chromium.

The hub is the one `make hub` runs (jupyter/hub/jupyterhub_config.py: PAM logins for two Unix groups, JupyterHub's
default spawner, which starts each user's JupyterLab as that user, and the pure-Python configurable-http-proxy, no
Node.js), started by `make hub-start` on a free port. Its environment is this checkout's .venv, which every account
can read (its Python, where it lies under /root, lent to the accounts as in tests/test_multiuser_exchange.py);
`make hub-install` builds such an environment at /opt/transformer-course in minutes, and
tests/test_hub_install.py checks that step without building it. An instructor and two students are created for the
test, with passwords, and deleted after it, with every process they ran, whatever happens.

What the class does, each step in Chromium, with a screenshot in build/screenshots/hub/ (the last one, of each
page, shows where a failure happened):

1. The hub starts (timed). Each person logs in. The instructor, in a terminal of their running lab (File > New >
   Terminal, typed in Chromium), types step 3 of docs/instructors.md, read from the guide: its safe.directory line
   for a checkout on the server, then the clone (of this checkout's HEAD, in place of GitHub), generate, release,
   the sticky bit on inbound/. Their server, and its formgrader, started before the course folder existed: the
   guide's order (issue 52 §1).
2. Each student opens the Assignments panel, fetches 02_normalization, writes LayerNorm into its answer cell
   (student 1 right, student 2 wrong: the unbiased variance), runs the test cell (and the cells it needs), sees the
   verdict and saves. Student 1 opens a terminal and types the self-check command the notebook prints; it finds
   the fetched copy in their home and prints the score. Both submit from the panel.
3. Student 2 tries what a classmate must not be able to do, and is refused each time: open student 1's server
   (its lab, its files, its API), the instructor's formgrader (page and API), formgrader in their own server; and,
   in code run in their own notebook, list the exchange's inbound/ and read student 1's submission and home.
4. The instructor's lab shows nbgrader's instructor tools, the students' show only the Assignment List. In
   formgrader they collect, autograde each submission (the course's TrustedVerdict: student code only in the
   bubblewrap sandbox), generate and release feedback, with no restart; no second gradebook appears in their home.
5. Each student fetches their feedback in the panel, opens it, and reads their score; in a 1000-px window, every
   output of the feedback fits JupyterLab's HTML viewer (issue 52 §3).
6. The gradebook holds the expected scores.

It needs root (useradd, PAM, the spawner's setuid), Chromium and bubblewrap; it skips elsewhere, saying why, and
fails instead where CI asks for the browser and the sandbox (COURSE_REQUIRE_BROWSER, COURSE_REQUIRE_SANDBOX).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from browser_driver import WIDEST, Terminal, free_port, missing, offline_browser
from notebooks import ROOT, answer_source, read, release_path, solution_path
from test_check_command import printed_check_commands
from test_multiuser_exchange import Accounts, home

from autograder.exercises import checks_for
from coursetools.notebook_vocabulary import answer_id, grade_id, test_id

NOTEBOOK = "02_normalization"
COURSE_ID = "transformer-from-scratch"
SCREENSHOTS = ROOT / "build" / "screenshots" / "hub"
ENV = ROOT / ".venv"  # the class's environment for this test: this checkout's, which `make test` builds
RUNUSER = shutil.which("runuser") or "/usr/sbin/runuser"
# Student 2's LayerNorm divides by d - 1 (the unbiased variance): the visible checks catch it.
RIGHT = "var = (centred * centred).mean(dim=-1, keepdim=True)"
WRONG = "var = (centred * centred).sum(dim=-1, keepdim=True) / (x.shape[-1] - 1)"
# Cells a student runs for Exercise 1: the imports, the answer cell, its test cell.
IMPORTS, ANSWER, TEST = 2, 8, 9


TOOLS = ("useradd", "userdel", "usermod", "groupadd", "groupdel", "chpasswd", "runuser", "unshare", "bwrap", "make")


def _reason() -> str | None:
    if sys.platform != "linux":
        return "a hub of local Unix accounts: Linux only"
    if os.geteuid() != 0:
        return "creates Unix accounts and runs JupyterHub's spawner (setuid): runs as root only, as in CI"
    absent = [tool for tool in TOOLS if shutil.which(tool) is None and not Path("/usr/sbin", tool).exists()]
    if absent:
        return f"needs {', '.join(absent)} (apt-get install passwd util-linux bubblewrap make)"
    if missing():
        return f"needs a browser: {', '.join(missing())}"
    if not (ENV / "bin" / "jupyterhub").exists() or not (ENV / "bin" / "configurable-http-proxy").exists():
        return f"{ENV} has no jupyterhub: `make test` installs jupyter/hub/requirements.txt into it"
    return None


def _closed_folder(path: Path) -> Path | None:
    """The outermost folder on the way to ``path`` that other accounts cannot enter (None if they can)."""
    for folder in reversed(path.resolve().parents):
        if folder != Path("/") and not folder.stat().st_mode & stat.S_IXOTH:
            return folder
    return None


def _lent(argv: list[str], paths: tuple[Path, ...] = (Path(sys.base_prefix).resolve(), ROOT)) -> list[str]:
    """``argv`` in a private mount namespace where every folder that the accounts cannot enter on the way to this
    Python's installation or this checkout (pyenv's under /root; a clone under /root) is an empty, enterable tmpfs
    with only those two bound back in: the accounts reach the class's environment and nothing else of that folder
    (nothing changes outside the namespace). As tests/test_multiuser_exchange.py lends its Python."""
    lent: dict[Path, list[Path]] = {}
    for path in paths:
        folder = _closed_folder(path)
        if folder is not None:
            lent.setdefault(folder, []).append(path)
    if not lent:
        return argv
    lines = ["set -e", "umask 022"]
    for n, (folder, paths) in enumerate(lent.items()):
        for m, path in enumerate(paths):
            lines.append(f'k{n}_{m}=$(mktemp -d); mount --bind {shlex.quote(str(path))} "$k{n}_{m}"')
        lines.append(f"mount -t tmpfs -o mode=0755 tmpfs {shlex.quote(str(folder))}")
        for m, path in enumerate(paths):
            quoted = shlex.quote(str(path))
            lines.append(f'mkdir -p {quoted}; mount --bind "$k{n}_{m}" {quoted}; umount "$k{n}_{m}"; rmdir "$k{n}_{m}"')
    lines.append('exec "$@"')
    return [
        shutil.which("unshare") or "/usr/bin/unshare",
        "--mount",
        "--propagation",
        "private",
        "/bin/sh",
        "-c",
        "; ".join(lines),
        "lend",
        *argv,
    ]


@dataclass
class Person:
    name: str
    password: str
    page: object = None  # playwright Page, once logged in


@dataclass
class Hub:
    url: str
    folder: Path  # COURSE_HUB_DIR
    exchange: Path
    process: subprocess.Popen
    log: Path
    started_s: float
    steps: list[tuple[str, float]] = field(default_factory=list)


def _as(user: str, *argv: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    done = subprocess.run(
        _lent([RUNUSER, "-u", user, "--", *argv]), cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"{user}: {' '.join(argv)}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


def _processes_of(uids: set[int]) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat().st_uid in uids:
                    found.append(int(entry.name))
    return found


def _stop_group(process: subprocess.Popen, timeout: float) -> None:
    """SIGTERM to the hub's process group (JupyterHub then stops every user's server and the proxy), SIGKILL
    after ``timeout``."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=wait)
            return


@contextlib.contextmanager
def class_hub(tag: str, students_group: str, instructors_group: str):
    """`make hub-start` with this checkout's .venv as the class's environment, on free ports; stopped on exit."""
    scratch = Path(tempfile.mkdtemp(prefix=f"ts-hub-{tag}-", dir="/tmp"))
    scratch.chmod(0o755)  # the hub's settings/ inside it are every account's to read
    folder, exchange, log = scratch / "hub", scratch / "exchange", scratch / "hub.log"
    port, hub_port, api_port = free_port(), free_port(), free_port()
    command = [
        "make",
        "--no-print-directory",
        "-C",
        str(ROOT),
        "hub-start",
        f"HUB_PREFIX={ENV}",
        f"HUB_DIR={folder}",
        f"HUB_URL=http://127.0.0.1:{port}",
        f"HUB_INTERNAL_PORTS={hub_port},{api_port}",
        f"HUB_STUDENTS={students_group}",
        f"HUB_INSTRUCTORS={instructors_group}",
        f"HUB_EXCHANGE={exchange}",
    ]
    started = time.monotonic()
    with open(log, "w") as out:
        # In a session of its own, so that one signal reaches make and the hub; in a mount namespace of its own
        # where this Python is lent to the accounts, if it lies where they cannot read it (/root).
        process = subprocess.Popen(
            _lent(command),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={"PATH": os.environ["PATH"], "LANG": "C.UTF-8"},
        )
    url = f"http://127.0.0.1:{port}"
    try:
        while True:
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"{url}/hub/api/", timeout=2) as reply:
                    if json.loads(reply.read()).get("version"):
                        break
            if process.poll() is not None or time.monotonic() - started > 60:
                raise RuntimeError(f"the hub did not start (exit {process.poll()}):\n{log.read_text()[-4000:]}")
            time.sleep(0.1)
        yield Hub(url, folder, exchange, process, log, time.monotonic() - started)
    finally:
        _stop_group(process, timeout=20)
        shutil.rmtree(scratch, ignore_errors=True)


class Screens:
    """A numbered screenshot of a page after each step; ``failed`` takes one of every page."""

    def __init__(self):
        shutil.rmtree(SCREENSHOTS, ignore_errors=True)
        SCREENSHOTS.mkdir(parents=True)
        self.count = 0

    def shot(self, page, name: str) -> None:
        self.count += 1
        with contextlib.suppress(Exception):  # a screenshot never hides the failure being recorded
            page.screenshot(path=str(SCREENSHOTS / f"{self.count:02d}_{name}.png"))


def _log_in(page, hub: Hub, person: Person) -> None:
    page.goto(f"{hub.url}/hub/login")
    page.fill("#username_input", person.name)
    page.fill("#password_input", person.password)
    page.click("#login_submit")


def _in_lab(page) -> None:
    page.wait_for_url(re.compile(r".*/user/[^/]+/lab.*"), timeout=180_000)
    page.locator("#jp-MainMenu .lm-MenuBar-itemLabel", has_text="Nbgrader").wait_for(timeout=120_000)


def _nbgrader_menu(page) -> set[str]:
    page.locator("#jp-MainMenu .lm-MenuBar-itemLabel", has_text="Nbgrader").click()
    items = set(page.locator(".lm-Menu .lm-Menu-item:visible .lm-Menu-itemLabel").all_inner_texts())
    page.keyboard.press("Escape")
    return items


def _assignments(page):
    """The Assignments panel, opened from the Nbgrader menu (or brought forward if open)."""
    tab = page.locator(".lm-TabBar-tab", has_text="Assignments")
    if tab.count():
        tab.click()
    else:
        page.locator("#jp-MainMenu .lm-MenuBar-itemLabel", has_text="Nbgrader").click()
        page.locator(".lm-Menu .lm-Menu-itemLabel", has_text="Assignment List").click()
    panel = page.locator("#nbgrader-assignment-list")
    panel.wait_for(timeout=30_000)
    return panel


def _cell(page, index: int):
    return page.locator(".jp-Notebook .jp-Cell").nth(index)


def _run(page, index: int) -> None:
    cell = _cell(page, index)
    cell.scroll_into_view_if_needed()
    cell.locator(".jp-InputPrompt").click()
    page.keyboard.press("Shift+Enter")


def _ran(page, index: int, timeout_ms: int = 120_000) -> str:
    """Cell ``index``'s output, once the kernel has run it (its prompt shows a number)."""
    cell = _cell(page, index)
    cell.locator(".jp-InputArea-prompt", has_text=re.compile(r"\[\d+\]")).wait_for(timeout=timeout_ms)
    return cell.locator(".jp-OutputArea").text_content()


def _write_answer(page, source: str) -> None:
    """Type ``source`` into the answer cell as a student does: click into it, select all, type."""
    editor = _cell(page, ANSWER).locator(".cm-content")
    editor.scroll_into_view_if_needed()
    editor.click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(source)
    page.keyboard.press("Escape")


def _modal(page) -> str:
    """The text of formgrader's dialog once it shows (its title, message and log), then closed."""
    dialog = page.locator(".modal.in, .modal.show").last
    dialog.wait_for(timeout=180_000)
    text = dialog.inner_text()
    dialog.locator(".modal-footer button").click()
    dialog.wait_for(state="detached", timeout=30_000)
    return text


PROBE = """import os
for what, path in {targets!r}:
    try:
        os.listdir(path) if what == "list" else open(path, "rb").read(1)
        print("OPENED", what, path)
    except OSError as error:
        print("REFUSED", type(error).__name__, what, path)
print("PROBE DONE")"""


def test_a_class_on_the_hub_in_a_browser():
    reason = _reason()
    if reason:
        if (
            os.environ.get("COURSE_REQUIRE_BROWSER") == "1"
            and os.environ.get("COURSE_REQUIRE_SANDBOX") == "1"
            and os.geteuid() == 0
        ):
            pytest.fail(f"CI runs the hub's class: {reason}")
        pytest.skip(reason)
    began = time.monotonic()
    steps: list[tuple[str, float]] = []

    def step(name: str) -> None:
        steps.append((name, time.monotonic() - began))

    exercises = {e.id: e.points for e in checks_for(NOTEBOOK).exercises}
    assert set(exercises) == {"layer_norm", "rms_norm"}, "notebook 02's exercises changed"
    solved = answer_source(read(solution_path(NOTEBOOK)), "layer_norm")
    assert RIGHT in solved, "the solution's LayerNorm changed: update RIGHT and WRONG"
    released = read(release_path(NOTEBOOK)).cells
    assert grade_id(released[ANSWER]) == "layer_norm"
    assert grade_id(released[TEST]) == test_id("layer_norm") and "import torch" in released[IMPORTS].source

    accounts = Accounts()
    groups = [f"ts_students_{accounts.tag}", f"ts_instructors_{accounts.tag}"]
    screens = Screens()
    people: list[Person] = []
    try:
        for group in groups:
            subprocess.run(["groupadd", group], check=True, capture_output=True)
        for role, group in (("inst", groups[1]), ("stu1", groups[0]), ("stu2", groups[0])):
            person = Person(accounts.add(role), secrets.token_urlsafe(12))
            subprocess.run(["usermod", "-aG", group, person.name], check=True, capture_output=True)
            subprocess.run(
                ["chpasswd"], input=f"{person.name}:{person.password}\n", text=True, check=True, capture_output=True
            )
            people.append(person)
        inst, stu1, stu2 = people
        step("accounts")
        with class_hub(accounts.tag, *groups) as hub:
            step(f"hub started ({hub.started_s:.1f} s)")
            _class(hub, inst, stu1, stu2, exercises, solved, screens, step)
            step("class done")
    finally:
        uids = set()
        for person in people:
            with contextlib.suppress(KeyError):
                uids.add(home(person.name).stat().st_uid)
        for pid in _processes_of(uids):  # anything the hub's stop left behind, of these accounts only
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        failed = accounts.delete()
        for group in groups:
            subprocess.run(["groupdel", group], capture_output=True)
        print("\n" + "\n".join(f"{seconds:6.1f} s  {name}" for name, seconds in steps))
        print(f"the hub's class took {time.monotonic() - began:.1f} s")
    assert not failed, f"could not delete the test's accounts: {failed}"


def _class(
    hub: Hub, inst: Person, stu1: Person, stu2: Person, exercises: dict, solved: str, screens: Screens, step
) -> None:
    # The hub's own folders: its database and cookie secret root's alone, its settings every account's to read;
    # the exchange as the multi-user recipe makes it.
    assert stat.S_IMODE((hub.folder / "private").stat().st_mode) == 0o700
    assert stat.S_IMODE((hub.folder / "settings").stat().st_mode) == 0o755
    assert stat.S_IMODE(hub.exchange.stat().st_mode) == 0o1777

    course = home(inst.name) / "transformer-course"
    with offline_browser(height=1000) as new_page:
        browsings = {}
        try:
            for person in (stu1, stu2, inst):
                browsings[person.name] = new_page()
                person.page = browsings[person.name].page
                _log_in(person.page, hub, person)  # the three servers start at once
            for person in (stu1, stu2, inst):
                _in_lab(person.page)
                screens.shot(person.page, f"{person.name}_logged_in")
            step("three logged in, their servers started")
            tools = {person.name: _nbgrader_menu(person.page) for person in (stu1, inst)}
            assert tools[stu1.name] == {"Assignment List"}, tools
            assert {"Formgrader", "Create assignment", "Course List", "Assignment List"} <= tools[inst.name], tools
            # Step 3 of the guide, in the guide's order: the instructor's server is running, and they clone the
            # course and release the notebook from its terminal (formgrader must then work without a restart).
            typed = _type_guide_step_3(inst.page, hub, screens)
            assert course.is_dir() and (course / "nbgrader_config.py").is_file(), typed[-3000:]
            inbound = hub.exchange / COURSE_ID / "inbound"
            assert stat.S_IMODE(inbound.stat().st_mode) == 0o3733 and inbound.owner() == inst.name
            step("instructor released 02_normalization")

            # Fetch, answer, run the test cell, save, submit: both students, each step started for both at once.
            for student in (stu1, stu2):
                panel = _assignments(student.page)
                row = panel.locator("#released_assignments_list .list_item", has_text=NOTEBOOK)
                row.locator("button", has_text="Fetch").click(timeout=60_000)
            for student in (stu1, stu2):
                panel = _assignments(student.page)
                toggle = panel.locator("#fetched_assignments_list a.assignment-notebooks-link", has_text=NOTEBOOK)
                toggle.click(timeout=60_000)
                screens.shot(student.page, f"{student.name}_fetched")
                panel.locator("#fetched_assignments_list .nested_list_item a", has_text=NOTEBOOK).click()
                fetched_notebook = home(student.name) / NOTEBOOK / f"{NOTEBOOK}.ipynb"
                assert fetched_notebook.owner() == student.name
            step("both fetched")
            for student, answer in ((stu1, solved), (stu2, solved.replace(RIGHT, WRONG))):
                page = student.page
                page.locator("#jp-main-statusbar", has_text="| Idle").wait_for(timeout=120_000)
                _write_answer(page, answer)
                for index in (IMPORTS, ANSWER, TEST):
                    _run(page, index)
            verdicts = {}
            for student in (stu1, stu2):
                verdicts[student.name] = _ran(student.page, TEST)
                _cell(student.page, TEST).scroll_into_view_if_needed()
                screens.shot(student.page, f"{student.name}_test_cell")
                student.page.keyboard.press("Control+s")
            assert re.search(r"All \d+ visible and \d+ hidden checks passed\.", verdicts[stu1.name]), verdicts
            assert "✗ output equals F.layer_norm" in verdicts[stu2.name], verdicts
            assert re.search(r"\d+ of \d+ checks failed", verdicts[stu2.name]), verdicts
            step("both answered and ran the test cell")
            stu1.page.locator(".lm-TabBar-tab.jp-mod-dirty").wait_for(state="detached", timeout=30_000)  # saved
            said = _check_in_terminal(stu1.page, stu1, screens)
            total = sum(exercises.values())
            assert f"checking {home(stu1.name) / NOTEBOOK / f'{NOTEBOOK}.ipynb'}" in said, said[-3000:]
            assert f"Score: {exercises['layer_norm']}/{total}" in said, said[-3000:]
            stu1.page.locator(".lm-TabBar-tab", has_text=f"{NOTEBOOK}.ipynb").click()
            step("student 1 checked the notebook with the printed command in their terminal")
            for student in (stu1, stu2):
                student.page.locator(".jp-Notebook").wait_for()
                student.page.locator(".lm-TabBar-tab.jp-mod-dirty").wait_for(state="detached", timeout=30_000)
                panel = _assignments(student.page)
                fetched = panel.locator(
                    "#fetched_assignments_list > .list_item",
                    has=student.page.locator("a.assignment-notebooks-link", has_text=NOTEBOOK),
                )
                fetched.locator("button", has_text="Submit").click()
            for student in (stu1, stu2):
                panel = _assignments(student.page)
                panel.locator("#submitted_assignments_list .list_item", has_text=NOTEBOOK).first.wait_for(
                    timeout=60_000
                )
                screens.shot(student.page, f"{student.name}_submitted")
            submissions = {path.owner(): path for path in inbound.iterdir()}
            assert set(submissions) == {stu1.name, stu2.name}, submissions
            assert all(stat.S_IMODE(p.stat().st_mode) == 0o770 for p in submissions.values()), "PrivateSubmit"
            step("both submitted from the panel")

            _refusals(hub, inst, stu1, stu2, submissions[stu1.name], screens)
            step("student 2 refused each time")

            log = _formgrader(hub, inst, stu1, stu2, screens)
            assert "Applying preprocessor: TrustedVerdict" in log, log[-3000:]
            assert not (home(inst.name) / "gradebook.db").exists(), "formgrader made a second gradebook in the home"
            step("instructor collected, autograded, released feedback in formgrader")

            scores = {stu1.name: exercises["layer_norm"], stu2.name: 0}
            assert f"Trusted verdict for {NOTEBOOK}: {scores[stu1.name]}/{total}" in log, log[-3000:]
            for student in (stu1, stu2):
                panel = _assignments(student.page)
                panel.locator("#refresh_assignments_list").click()
                panel.locator("#submitted_assignments_list", has_text="feedback available to fetch").wait_for(
                    timeout=60_000
                )
                panel.locator("#submitted_assignments_list button", has_text="Fetch Feedback").first.click()
            for student in (stu1, stu2):
                page = student.page
                panel = _assignments(page)
                panel.locator("#submitted_assignments_list a", has_text="view feedback").first.click(timeout=60_000)
                page.locator(".jp-DirListing-item", has_text=f"{NOTEBOOK}.html").dblclick(timeout=30_000)
                body = page.frame_locator(".jp-HTMLViewer iframe").locator("body")
                body.locator("text=Score:").first.wait_for(timeout=30_000)
                screens.shot(page, f"{student.name}_feedback")
                said = body.inner_text()
                expected = f"{NOTEBOOK} (Score: {scores[student.name]:.1f} / {total:.1f})"
                assert expected in said, (student.name, said[:300])
                # In a 1000-px window, every output of the feedback (each exercise's reason) fits the viewer's frame.
                page.set_viewport_size({"width": 1000, "height": 1000})
                page.wait_for_timeout(500)
                widths = body.evaluate(f"body => ({WIDEST})()")
                assert widths["blocks"] >= len(exercises) and widths["overflowing"] == [], (student.name, widths)
            step("both fetched their feedback and read their score")
            for browsing in browsings.values():
                assert browsing.blocked == [], f"requests left this machine: {browsing.blocked}"
        except BaseException:
            for name, browsing in browsings.items():
                screens.shot(browsing.page, f"failure_{name}")
            print(f"the hub's log: {hub.log}\n{hub.log.read_text()[-6000:]}")
            raise

    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        graded = {}
        for student in (stu1, stu2):
            notebook = gradebook.find_submission_notebook(NOTEBOOK, NOTEBOOK, student.name)
            graded[student.name] = {answer_id(g.name): g.score for g in notebook.grades}
    assert graded == {
        stu1.name: {"layer_norm": exercises["layer_norm"], "rms_norm": 0},
        stu2.name: {"layer_norm": 0, "rms_norm": 0},
    }, graded


GUIDE = ROOT / "docs" / "instructors.md"
GITHUB = "https://github.com/transformer-course/transformer-course"
DEFAULT_EXCHANGE = "/usr/local/share/nbgrader/exchange"
SERVERS_CHECKOUT = "/srv/transformer-course"  # the guide's example of a checkout on the server, another account's
TERMINAL_TROUBLE = ("fatal:", "Traceback", "rror:", "denied", "No such file", "command not found")


def guide_step_3(source: Path, exchange: Path) -> list[str]:
    """The lines of docs/instructors.md's hub step 3, as an instructor types them to clone ``source``, a checkout
    on this server that root owns (this one), with the class's exchange at ``exchange``: the guide's
    ``safe.directory`` line for such a checkout first, as it says, then the step's block."""
    text = GUIDE.read_text()
    step = text[text.index("3. **Your course folder and the release**") : text.index("4. **Students**")]
    release, safe = (block.splitlines() for block in re.findall(r"```bash\n(.*?)```", step, re.DOTALL))
    git_dir = Path(
        subprocess.run(
            ["git", "-C", str(source), "rev-parse", "--absolute-git-dir"], capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    lines = [line.strip().replace(f"{SERVERS_CHECKOUT}/.git", str(git_dir)) for line in safe]
    lines += [line.strip().replace(GITHUB, str(source)).replace(DEFAULT_EXCHANGE, str(exchange)) for line in release]
    assert any("safe.directory" in line for line in lines) and any(str(source) in line for line in lines), lines
    return [line for line in lines if line]


def _type_guide_step_3(page, hub: Hub, screens) -> str:
    """The instructor opens a terminal in their running lab and types the guide's step 3; what the shell said."""
    terminal = Terminal(page)
    for line in guide_step_3(ROOT, hub.exchange):
        terminal.type(line)
    terminal.type("echo step 3 ended with $((40 + 2))")  # the shell prints 42 once every line before has run
    said = terminal.wait_for(lambda text: "step 3 ended with 42" in text, 240)
    screens.shot(page, "instructor_typed_step_3")
    assert "step 3 ended with 42" in said, said[-3000:]
    trouble = [sign for sign in TERMINAL_TROUBLE if sign in said]
    assert not trouble, (trouble, said[-3000:])
    return said


def _check_in_terminal(page, student: Person, screens) -> str:
    """The student opens a terminal in their lab and types the self-check command the fetched notebook prints."""
    fetched = home(student.name) / NOTEBOOK / f"{NOTEBOOK}.ipynb"
    (command,) = printed_check_commands(read(fetched))
    terminal = Terminal(page)
    terminal.type(command)
    said = terminal.wait_for(lambda text: "Score:" in text or "no such file" in text, 240)
    screens.shot(page, f"{student.name}_terminal_check")
    return said


def _refusals(hub: Hub, inst: Person, stu1: Person, stu2: Person, submission: Path, screens: Screens) -> None:
    """What student 2 tries, logged in as themselves, and what the hub and the machine answer."""
    page = stu2.page.context.new_page()  # a second tab, logged in as student 2; their lab stays open in the first
    answers = {}
    for what, path in (
        ("student 1's lab", f"/user/{stu1.name}/lab"),
        ("student 1's notebook, through their server's files", f"/user/{stu1.name}/files/{NOTEBOOK}/{NOTEBOOK}.ipynb"),
        ("the instructor's formgrader", f"/user/{inst.name}/formgrader"),
        (
            "student 1's submission, through formgrader's API",
            f"/user/{inst.name}/formgrader/api/submission/{NOTEBOOK}/{stu1.name}",
        ),
    ):
        reply = page.goto(hub.url + path)
        answers[what] = (reply.status, page.locator("body").inner_text()[:200])
        assert reply.status == 403 and "You do not have permission to access Server" in answers[what][1], (
            what,
            answers,
        )
    screens.shot(page, f"{stu2.name}_refused_a_server")
    api = page.request.get(f"{hub.url}/user/{stu1.name}/api/contents/{NOTEBOOK}/{NOTEBOOK}.ipynb", max_redirects=0)
    assert api.status == 403, ("student 1's notebook, through their server's API", api.status, api.text()[:200])
    own = page.goto(f"{hub.url}/user/{stu2.name}/formgrader")
    assert own.status == 404, "formgrader is off in a student's own server"
    page.close()
    page = stu2.page

    # Code in their own notebook (their own account): the exchange and student 1's home keep them out.
    targets = [
        ("list", str(hub.exchange / COURSE_ID / "inbound")),
        ("list", str(submission)),
        ("read", str(submission / f"{NOTEBOOK}.ipynb")),
        ("list", str(home(stu1.name))),
    ]
    notebook_tab = page.locator(".lm-TabBar-tab", has_text=f"{NOTEBOOK}.ipynb")
    notebook_tab.click()
    last = page.locator(".jp-Notebook .jp-Cell").count() - 1
    _cell(page, last).scroll_into_view_if_needed()
    _cell(page, last).locator(".jp-InputPrompt").click()
    page.keyboard.press("b")  # a new cell below, as a student adds one
    page.keyboard.press("Enter")
    page.keyboard.insert_text(PROBE.format(targets=targets))
    page.keyboard.press("Shift+Enter")
    said = _ran(page, last + 1)
    screens.shot(page, f"{stu2.name}_refused_files")
    assert "PROBE DONE" in said and "OPENED" not in said, said
    assert said.count("REFUSED PermissionError") == len(targets), said


def _formgrader(hub: Hub, inst: Person, stu1: Person, stu2: Person, screens: Screens) -> str:
    """The instructor's formgrader: collect, autograde each submission, generate and release feedback; the
    dialogs' text."""
    page, said = inst.page, []
    base = f"{hub.url}/user/{inst.name}/formgrader"
    page.goto(base)
    # The configuration formgrader loaded (it shows it): the course's, from the instructor's course folder, and the
    # class's exchange with the course's exchange classes.
    loaded = page.locator("#collapseConfig pre").text_content()
    for setting in (
        "autograder.exchange.OwnerCheckedCollect",
        "autograder.exchange.PrivateSubmit",
        "TrustedVerdict",
        str(hub.exchange),
    ):
        assert setting in loaded, (setting, loaded[:3000])
    row = page.locator("tr", has=page.locator("td", has_text=NOTEBOOK))
    row.locator("td.collect a").click(timeout=60_000)
    said.append(_modal(page))
    assert "Successfully collected" in said[-1], said[-1]
    page.goto(f"{base}/manage_submissions/{NOTEBOOK}")
    for student in (stu1, stu2):
        submission = page.locator("tr", has=page.locator("td", has_text=student.name))
        submission.locator("td.autograde a").click(timeout=60_000)
        # while it grades, the row says what it is doing and for how long (coursetools.formgrader_progress)
        page.locator("td", has_text=re.compile(r"^Please wait: autograding: .* \(\d+ s\)$")).wait_for(timeout=10_000)
        said.append(_modal(page))
        assert "Successfully autograded" in said[-1], said[-1]
    page.reload()
    page.locator("td", has_text=" / ").first.wait_for(timeout=30_000)
    screens.shot(page, f"{inst.name}_autograded")
    page.goto(base)
    for button in ("td.generate-feedback a", "td.release-feedback a"):
        row.locator(button).click(timeout=60_000)
        said.append(_modal(page))
        assert "Successfully" in said[-1], said[-1]
    screens.shot(page, f"{inst.name}_released_feedback")
    return "\n".join(said)
