"""``python -m autograder doctor``: everything grading needs on this machine, one line per item, with the fix.

Run it from the course root (the folder with ``nbgrader_config.py``) on the machine and account that grade,
before grading. It checks, in order:

- **sandbox**: bubblewrap starts and can make the namespaces grading uses;
- **worker**: a worker started exactly as grading starts one (the same ``Sandbox``, the same course folders
  shown and hidden) imports the course's package, torch, and every notebook's adapters and checks. This is
  what fails when the package lies where the sandbox does not show it (installed under the user's own
  site-packages, or reached only through ``PYTHONPATH``), or torch is missing from the Python that grades;
- **data**: the course's ``data/`` folder exists and student code can read it inside the sandbox;
- **warm**: whether workers are forked from one process that imported torch once (``autograder.zygote``), or
  start cold where a sandbox's namespaces cannot be joined (slower, equally isolated);
- **versions**: Python satisfies the course's ``requires-python``, and every package the lock pins is
  installed at the lock's version (torch's ``+cpu``/``+cuXXX`` build tag aside);
- **exchange**: nbgrader's exchange folder, where one is configured and exists, has the modes the
  instructor's guide sets (``chmod 1777``: everyone may write, only owners may delete).

``grade-class`` runs the first two (``preflight``) before it grades anyone: a broken set-up then stops it
with these lines, instead of failing every submission.
"""

from __future__ import annotations

import stat
import sys
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from autograder.errors import GradingError, SandboxError
from autograder.sandbox import INSTALL_HINT, Limits, Sandbox, SandboxUnavailable, unavailable_reason

PROBE_ADAPTERS = "autograder.notebooks.nb00_welcome"  # the worker's first import; the probe imports the rest
LOCK = Path(__file__).resolve().parents[1] / "requirements.lock"
PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
EXCHANGE_MODE = 0o1777  # the guide's `chmod 1777 EXCHANGE`


@dataclass
class Finding:
    item: str
    ok: bool | None  # None: not applicable here (skipped)
    said: str
    fix: str = ""

    def line(self) -> str:
        mark = {True: "ok  ", False: "FAIL", None: "skip"}[self.ok]
        return f"{mark}  {self.item}: {self.said}" + (f" -> fix: {self.fix}" if self.fix and not self.ok else "")


def sandbox_finding() -> Finding:
    reason = unavailable_reason()
    if reason is None:
        return Finding("sandbox", True, "bubblewrap starts and makes its namespaces")
    return Finding("sandbox", False, reason, INSTALL_HINT)


IMPORT_PROBE = """\
import importlib
from autograder.notebooks import NOTEBOOKS
from autograder.exercises import module_name
for _name in NOTEBOOKS:
    importlib.import_module('autograder.notebooks.' + module_name(_name))
"""


def _data_probe(data: Path) -> str:
    """What the worker runs (the grader's own code, not a student's) to read the course's data."""
    return (
        f"import pathlib\n_files = [p for p in pathlib.Path({str(data)!r}).rglob('*') if p.is_file()]\n"
        f"assert _files, 'no file under {data} is visible inside the sandbox'\n"
        "_files[0].open('rb').read(1)\n"
    )


FIX_IMPORT = (
    "install the course's package into the Python that grades, in a folder the sandbox shows "
    "(`python -m pip install -c requirements.lock -e .` from the course root, with that Python), "
    "not in the user site-packages or through PYTHONPATH"
)


def worker_findings(
    course_root: Path | None, private: list[Path] = (), limits: Limits | None = None, data: bool = True
) -> list[Finding]:
    """Start a sandboxed worker as grading does; say whether it imports what grading needs (and, with ``data``,
    reads the course's data folder)."""
    from autograder.process import Worker

    probes = [
        ("worker", IMPORT_PROBE, "a sandboxed worker imports the course's package, torch, every adapter and check")
    ]
    if data and course_root is not None:
        probes.append(
            ("data", _data_probe(course_root / "data"), f"{course_root / 'data'} is readable inside a sandboxed worker")
        )
    found = []
    with tempfile.TemporaryDirectory(prefix="autograder-doctor-") as empty:
        Path(empty).chmod(0o755)
        try:
            with Sandbox(Path(empty), course_root, list(private), limits or Limits()) as sandbox:
                worker = Worker(sandbox)
                try:
                    worker = worker.ready(PROBE_ADAPTERS)  # a cold one instead, where a warm one cannot start
                    for item, source, said in probes:
                        reply = worker.request({"op": "exec", "index": 0, "source": source}, 120, f"checking {item}")
                        fix = (
                            FIX_IMPORT
                            if item == "worker"
                            else f"make {course_root / 'data'} readable by all (chmod -R o+rX)"
                        )
                        found.append(
                            Finding(item, True, said)
                            if reply["ok"]
                            else Finding(item, False, f"in a sandboxed worker: {reply['error']}", fix)
                        )
                finally:
                    worker.kill()
                found.append(warm_finding())
        except (SandboxError, GradingError, SandboxUnavailable) as error:
            if isinstance(error, SandboxUnavailable):  # its message says what to change
                return [Finding("worker", False, f"no sandbox for a worker: {error}")]
            return [
                Finding(
                    "worker", False, f"a sandboxed worker did not start: {getattr(error, 'reason', error)}", FIX_IMPORT
                )
            ]
    return found


def warm_finding() -> Finding:
    """Whether workers start warm here (forked from the zygote) or cold; said after a worker has started."""
    from autograder import zygote

    if zygote.usable():
        return Finding("warm", True, "each worker is forked from one process that imported torch once")
    return Finding(
        "warm", None, f"each worker starts cold, importing torch itself (about 1 s more): {zygote.why_cold()}"
    )


def data_finding(course_root: Path) -> Finding | None:
    """The grader's side of the data check: the folder exists (the worker checks it is readable inside)."""
    if not (course_root / "data").is_dir():
        return Finding(
            "data",
            False,
            f"no folder {course_root / 'data'}",
            "copy the repository's data/ folder into the course root",
        )
    return None


def preflight(course_root: Path | None, private: list[Path] = (), limits: Limits | None = None) -> list[Finding]:
    """The fast part, which ``grade-class`` runs before grading: the sandbox starts, and a sandboxed worker
    imports what grading needs (a few seconds). The data is left to ``findings``: not every notebook reads it."""
    found = [sandbox_finding()]
    if found[0].ok:
        found += worker_findings(course_root, private, limits, data=False)
    return found


def _pins(lock: Path) -> dict[str, str]:
    pins = {}
    for line in lock.read_text().splitlines():
        name, sep, version = line.split("#", 1)[0].strip().partition("==")
        if sep:
            pins[name.strip().lower()] = version.strip()
    return pins


def versions_finding(lock: Path = LOCK, pyproject: Path = PYPROJECT) -> Finding:
    if not lock.is_file():
        return Finding("versions", None, f"no lock file at {lock} to compare with")
    from packaging.specifiers import SpecifierSet

    problems = []
    if pyproject.is_file():
        import tomllib

        wanted = tomllib.loads(pyproject.read_text())["project"].get("requires-python", "")
        here = ".".join(map(str, sys.version_info[:3]))
        if wanted and here not in SpecifierSet(wanted):
            problems.append(f"Python {here} (the course needs {wanted})")
    for name, version in _pins(lock).items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            problems.append(f"{name} missing (lock: {version})")
            continue
        if installed.split("+")[0] != version.split("+")[0]:
            problems.append(f"{name} {installed} (lock: {version})")
    torch = metadata.version("torch") if _installed("torch") else "missing"
    here = f"Python {sys.version.split()[0]}, torch {torch}"
    if problems:
        return Finding(
            "versions",
            False,
            f"{here}; differs from the lock: {', '.join(problems)}",
            f"{sys.executable} -m pip install -c {lock} -e . (from the course root)",
        )
    return Finding("versions", True, f"{here}; every package at the lock's version")


def _installed(name: str) -> bool:
    try:
        metadata.version(name)
        return True
    except metadata.PackageNotFoundError:
        return False


def exchange_finding(root: str | None) -> Finding:
    if not root:
        return Finding("exchange", None, "no exchange configured")
    path = Path(root)
    if not path.exists():
        return Finding(
            "exchange", None, f"{path} does not exist (needed only where students submit through nbgrader's exchange)"
        )
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & EXCHANGE_MODE != EXCHANGE_MODE:
        return Finding("exchange", False, f"{path} has mode {mode:o}, not {EXCHANGE_MODE:o}", f"sudo chmod 1777 {path}")
    return Finding("exchange", True, f"{path} has mode {mode:o} (everyone may submit, only owners may delete)")


def nbgrader_settings(options: list[str] = ()):
    """nbgrader's configuration as ``nbgrader autograde`` would read it here: the course folder and exchange."""
    from nbgrader.apps import AutogradeApp
    from nbgrader.exchange.default import Exchange

    app = AutogradeApp()
    app.initialize(["--log-level=ERROR", *options])
    configured = app.config.Exchange.get("root") if "Exchange" in app.config else None
    return app.coursedir, configured or Exchange.class_traits()["root"].default_value


def findings(options: list[str] = ()) -> list[Finding]:
    """Everything, in order."""
    from autograder.nbgrader_plugin import private_paths

    coursedir, exchange = nbgrader_settings(options)
    root = Path(coursedir.root).resolve()
    found = [sandbox_finding()]
    missing_data = data_finding(root)
    if found[0].ok:
        found += worker_findings(root, private_paths(coursedir), data=missing_data is None)
    if missing_data is not None:
        found.append(missing_data)
    return [*found, versions_finding(), exchange_finding(exchange)]


def main(options: list[str] = ()) -> int:
    """Print one line per item; exit 0 when nothing failed, 1 otherwise."""
    if not Path("nbgrader_config.py").is_file():
        print(
            "note: no nbgrader_config.py here; run doctor from the course root to check its folders too",
            file=sys.stderr,
        )
    found = findings(options)
    for finding in found:
        print(finding.line())
    failed = [f for f in found if f.ok is False]
    print("grading can run here" if not failed else f"{len(failed)} problem(s): grading would fail until fixed")
    return 1 if failed else 0
