"""The set-up needs only python3 and make: nothing it runs calls Node.js.

.ci/run proves it on a clean clone: `python3 tools/without_node.py make test` creates the venv and
runs this whole suite on a PATH where node, npm and their kind do not exist. Here is the cheap half,
for every local run: what make would run for `lab`, `test` and `outputs` from scratch (a dry run,
on that same PATH), and Binder's and conda's files.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from notebooks import ROOT

sys.path.insert(0, str(ROOT / "tools"))
from without_node import NODE_TOOLS  # noqa: E402

# A command word, not part of a longer name (torchrun's --nproc_per_node is not node).
CALLS_NODE = re.compile(r"(?:^|[\s;&|(`/])(?:" + "|".join(sorted(NODE_TOOLS)) + r")(?=\s|$|;)")


def without_node(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "tools" / "without_node.py"), *command],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def planned_commands(makefile: Path = ROOT / "Makefile") -> list[str]:
    """What `make lab test outputs` would run from a fresh clone (every target out of date), not run."""
    done = without_node("make", "-f", str(makefile), "--dry-run", "--always-make", "lab", "test", "outputs")
    assert done.returncode == 0, done.stderr[-2000:]
    complaints = [line for line in done.stderr.splitlines() if not line.startswith("without_node: ")]
    assert complaints == [], "make's own $(shell ...) calls failed"
    return done.stdout.splitlines()


def node_calls(lines: list[str]) -> list[str]:
    return [line for line in lines if CALLS_NODE.search(line.split("#")[0])]


def test_without_node_hides_node_and_keeps_the_rest():
    done = without_node(
        "sh", "-c", "for t in node npm npx; do command -v $t && exit 1; done; command -v make && command -v python3"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    if shutil.which("node"):  # this machine has Node: it was there to hide
        assert shutil.which("node") in done.stderr, done.stderr


def test_make_lab_and_test_call_no_node():
    commands = planned_commands()
    assert any("-m venv" in line for line in commands) and any("pip install" in line for line in commands)
    assert any("jupyter lab" in line for line in commands) and any("pytest" in line for line in commands)
    assert node_calls(commands) == []


def test_the_check_sees_a_node_step(tmp_path):
    """The Makefile as it was (an `npm ci` step for the browser libraries) is caught, and so is a $(shell node)."""
    old = (
        (ROOT / "Makefile")
        .read_text()
        .replace(
            "lab: $(STAMP)", "node_modules/.stamp: $(STAMP)\n\tnpm ci --no-audit\n\nlab: $(STAMP) node_modules/.stamp"
        )
    )
    makefile = tmp_path / "Makefile"
    makefile.write_text(old)
    assert node_calls(planned_commands(makefile)) == ["npm ci --no-audit"]
    makefile.write_text("NODE_VERSION := $(shell node --version)\n" + (ROOT / "Makefile").read_text())
    with pytest.raises(AssertionError, match="shell"):
        planned_commands(makefile)
    assert node_calls(["torchrun --nproc_per_node=8 -m tinystories", "cd x && node tests/render.mjs"]) == [
        "cd x && node tests/render.mjs"
    ]


def test_binder_and_conda_need_no_node():
    assert node_calls((ROOT / "binder" / "postBuild").read_text().splitlines()) == []
    for path in (ROOT / "environment.yml", ROOT / "binder" / "environment.yml"):
        conda = [d for d in yaml.safe_load(path.read_text())["dependencies"] if isinstance(d, str)]
        assert not [d for d in conda if d.split("=")[0] in NODE_TOOLS], f"{path}: {conda}"
