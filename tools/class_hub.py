"""Checks before `make hub` builds or starts a class's JupyterHub (Makefile, "A JupyterHub for a class").

    python tools/class_hub.py preflight --prefix /opt/transformer-course            # before building the environment
    /opt/transformer-course/bin/python tools/class_hub.py preflight --prefix /opt/transformer-course --running
    python tools/class_hub.py step "installing torch" -- PIP_COMMAND...              # a long install step, not silent

The hub runs as root and starts each user's JupyterLab as that user, from one environment that every account must
be able to read: its Python installation included. A pyenv Python under /root, or an environment in someone's
home, gives every student's server "Permission denied" at its first start; this says so before anything is built,
with the fix. Only the standard library is used: the first check runs with the Python that will build the
environment, before the environment exists.
"""

from __future__ import annotations

import argparse
import os
import pwd
import stat
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

OLDEST = (3, 11)  # pyproject.toml's requires-python (nbgrader 0.9)


def closed_to_others(path: Path) -> str | None:
    """The first folder on the way to ``path`` (itself included) that other accounts cannot enter, or ``path``
    itself if it is a file they cannot read; None when every account can read it."""
    path = Path(os.path.abspath(path))
    for folder in [*reversed(path.parents), path]:
        if not folder.exists():
            return None  # to be made (by root, with umask 022, which the Makefile sets)
        mode = folder.stat().st_mode
        if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
            return f"{folder} (mode {stat.filemode(mode)})"
    if path.is_file() and not path.stat().st_mode & stat.S_IROTH:
        return f"{path} (mode {stat.filemode(path.stat().st_mode)})"
    return None


def homes() -> set[Path]:
    """Root's home and every account's home that is not a system folder."""
    found = {Path("/root")}
    for entry in pwd.getpwall():
        home = Path(entry.pw_dir)
        if entry.pw_uid >= 1000 and home not in (Path("/"), Path("/nonexistent")) and len(home.parts) > 2:
            found.add(home)
    return found


def problems(
    prefix: Path, *, running: bool, python: Path | None = None, stdlib: Path | None = None, root: bool | None = None
) -> list[str]:
    """What stops a class's hub from using ``prefix`` as its environment, with this Python, each with its fix."""
    said = []
    if sys.platform != "linux":
        said.append("the class's hub runs on Linux (local Unix accounts, PAM, one process per user)")
    if not (os.geteuid() == 0 if root is None else root):
        said.append("run it as root: the hub starts each user's server as that user (sudo make hub)")
    if sys.version_info < OLDEST:
        said.append(
            f"Python {sys.version.split()[0]} is too old: the course needs {'.'.join(map(str, OLDEST))} or "
            "later (HUB_PYTHON=/path/to/python3.11)"
        )
    python = python or Path(os.path.realpath(sys.executable))
    stdlib = stdlib or Path(sysconfig.get_paths()["stdlib"])
    for what, path in (("this Python", python), ("its standard library", stdlib)):
        closed = closed_to_others(path)
        if closed:
            said.append(
                f"{what} ({path}) is where the students' accounts cannot read it: {closed}. Build the "
                "class's environment from a Python every account can read, e.g. make hub "
                "HUB_PYTHON=/usr/bin/python3"
            )
    prefix = Path(os.path.abspath(prefix))
    home = next((h for h in homes() if prefix == h or h in prefix.parents), None)
    if home:
        said.append(
            f"the class's environment {prefix} lies in {home}, a home: install it where every account "
            "can read it and no one can change it, e.g. HUB_PREFIX=/opt/transformer-course"
        )
    closed = closed_to_others(prefix)
    if closed:
        said.append(f"the class's environment {prefix} is where the students' accounts cannot read it: {closed}")
    if running:
        for tool in ("jupyterhub", "jupyterhub-singleuser", "configurable-http-proxy"):
            if not (prefix / "bin" / tool).is_file():
                said.append(
                    f"{prefix} has no {tool}: build the environment first (make hub-install HUB_PREFIX={prefix})"
                )
    return said


def step(what: str, command: list[str], every: float = 10.0) -> int:
    """Run ``command`` (its own output goes to the terminal as it comes), saying ``what`` it does when it starts,
    every ``every`` seconds while it runs, and how it ended: pip's quiet installs of torch and the lock took 13 and
    93 s here with nothing on the screen (issue 52 §5)."""
    print(f"make hub: {what}...", flush=True)
    started = time.monotonic()
    process = subprocess.Popen(command)
    while True:
        try:
            status = process.wait(timeout=every)
            break
        except subprocess.TimeoutExpired:
            print(f"make hub: {what}, {time.monotonic() - started:.0f} s so far", flush=True)
    seconds = time.monotonic() - started
    print(
        f"make hub: {what}: {'done' if status == 0 else f'failed (exit status {status})'} in {seconds:.0f} s",
        flush=True,
    )
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("preflight", help="check that a class's hub can be built or started here")
    check.add_argument("--prefix", type=Path, required=True, help="the class's environment (HUB_PREFIX)")
    check.add_argument("--running", action="store_true", help="the environment is built: check it has the hub")
    long_step = sub.add_parser("step", help="run a long install step, saying what it does as it runs")
    long_step.add_argument("what", help="what the step does, e.g. 'installing torch'")
    long_step.add_argument("--every", type=float, default=10.0, help="seconds between progress lines")
    long_step.add_argument("argv", nargs=argparse.REMAINDER, help="-- the command")
    args = parser.parse_args(argv)
    if args.command == "step":
        return step(args.what, args.argv[1:] if args.argv[:1] == ["--"] else args.argv, args.every)
    found = problems(args.prefix, running=args.running)
    for problem in found:
        print(f"make hub: {problem}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
