"""Run a command on a PATH without Node.js: the course must set up and test with python3 and make only.

    python3 tools/without_node.py make test     # what .ci/run does on a clean clone
    python3 tools/without_node.py make lab

PATH becomes one folder of links to every program on the current PATH except Node's tools, so
`command -v node` fails as on a machine that never had Node. Stubs that fail would not be the
same machine: JupyterLab and jupyter-lsp call `node` and `npm` when they find them (to read yarn's
configuration and npm's prefix), and skip quietly when they do not. make's PYTHON is set to the
real python3, because a venv remembers the folder of the python that created it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

NODE_TOOLS = frozenset({"node", "nodejs", "npm", "npx", "yarn", "yarnpkg", "pnpm", "corepack"})


def link_programs(folder: Path, path: str) -> list[str]:
    """Link every program on ``path`` into ``folder``, first one of a name wins; return the Node tools left out."""
    left_out = []
    for directory in path.split(os.pathsep):
        if not directory or not os.path.isdir(directory):
            continue
        for entry in os.scandir(directory):
            if entry.name in NODE_TOOLS:
                left_out.append(entry.path)
            elif not os.path.lexists(folder / entry.name) and not entry.is_dir() and os.access(entry.path, os.X_OK):
                (folder / entry.name).symlink_to(os.path.abspath(entry.path))
    return left_out


def main(command: list[str]) -> int:
    if not command:
        print(__doc__, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="without-node-") as folder:
        left_out = link_programs(Path(folder), os.environ.get("PATH", ""))
        env = dict(os.environ, PATH=folder)
        python = shutil.which("python3")
        if python and "PYTHON" not in env:
            env["PYTHON"] = python
        print(
            f"without_node: running {' '.join(command)!r} with no Node.js on PATH"
            + (f" (left out: {', '.join(left_out)})" if left_out else ""),
            file=sys.stderr,
            flush=True,
        )
        try:
            return subprocess.run(command, env=env).returncode
        except FileNotFoundError:
            print(f"without_node: {command[0]}: not found on PATH", file=sys.stderr)
            return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
