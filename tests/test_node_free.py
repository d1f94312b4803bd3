"""The set-up needs only python3 and make: nothing it runs calls Node.js.

.ci/run proves it on a clean clone. It runs `make test`, which creates the venv and then runs
this whole suite, with `node`, `npm` and `npx` replaced on PATH by stubs that fail and record
every call. Here is the cheap half, for every local run: the commands that make would run for
`lab`, `test` and `outputs` from scratch (a dry run), under the same stubs, and Binder's files.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import yaml
from notebooks import ROOT

NODE_TOOLS = ("node", "npm", "npx", "yarn", "pnpm", "corepack")
# A command word, not part of a longer name (torchrun's --nproc_per_node is not node).
CALLS_NODE = re.compile(r"(?:^|[\s;&|(`/])(?:" + "|".join(NODE_TOOLS) + r")(?=\s|$|;)")


def stubbed_env(folder: Path) -> dict:
    """An environment whose PATH finds Node's tools first as stubs that fail and log to folder/called."""
    folder.mkdir()
    for tool in NODE_TOOLS:
        stub = folder / tool
        stub.write_text(f'#!/bin/sh\necho "{tool} $*" >> "{folder}/called"\n'
                        f'echo "{tool} was called: the course must not need Node.js" >&2\nexit 127\n')
        stub.chmod(0o755)
    return dict(os.environ, PATH=f"{folder}{os.pathsep}{os.environ['PATH']}")


def planned_commands(tmp_path: Path, makefile: Path = ROOT / "Makefile") -> list[str]:
    """What `make lab test outputs` would run from a fresh clone (every target out of date), not run."""
    env = stubbed_env(tmp_path / "stubs")
    done = subprocess.run(["make", "-f", str(makefile), "--dry-run", "--always-make", "lab", "test", "outputs"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert not (tmp_path / "stubs" / "called").exists(), (tmp_path / "stubs" / "called").read_text()
    return done.stdout.splitlines()


def node_calls(lines: list[str]) -> list[str]:
    return [line for line in lines if CALLS_NODE.search(line.split("#")[0])]


def test_make_lab_and_test_call_no_node(tmp_path):
    commands = planned_commands(tmp_path)
    assert any("-m venv" in line for line in commands) and any("pip install" in line for line in commands)
    assert any("jupyter lab" in line for line in commands) and any("pytest" in line for line in commands)
    assert node_calls(commands) == []


def test_the_check_sees_a_node_step(tmp_path):
    """The Makefile as it was, with its `npm ci` step for the browser libraries, is caught."""
    old = (ROOT / "Makefile").read_text().replace(
        "lab: $(STAMP)", "node_modules/.stamp: $(STAMP)\n\tnpm ci --no-audit\n\nlab: $(STAMP) node_modules/.stamp")
    makefile = tmp_path / "Makefile"
    makefile.write_text(old)
    assert node_calls(planned_commands(tmp_path, makefile)) == ["npm ci --no-audit"]
    assert node_calls(["torchrun --nproc_per_node=8 -m tinystories", "cd x && node tests/render.mjs"]) == [
        "cd x && node tests/render.mjs"]


def test_binder_and_conda_need_no_node():
    assert node_calls((ROOT / "binder" / "postBuild").read_text().splitlines()) == []
    for path in (ROOT / "environment.yml", ROOT / "binder" / "environment.yml"):
        conda = [d for d in yaml.safe_load(path.read_text())["dependencies"] if isinstance(d, str)]
        assert not [d for d in conda if d.split("=")[0] in ("nodejs", "yarn")], f"{path}: {conda}"
