"""docs/instructors.md's recipe for a class on one machine, its first step run as written.

It records only the assignment being taught, so nbgrader's export holds rows for that assignment alone (a
recorded assignment gets a row per student, 0 where nothing was submitted), and it leaves course/ as it was.
"""

from __future__ import annotations

import csv
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from notebooks import ROOT
from released import nbgrader_environment

from autograder.nbgrader_plugin import quiet_gradebook_warnings

GUIDE = ROOT / "docs" / "instructors.md"


def recipe() -> list[str]:
    """The commands of the guide's first code block under "On one machine", without their comments."""
    section = GUIDE.read_text().split("## On one machine (no hub)", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.split("#", 1)[0].strip()]


def test_the_recipe_records_only_the_assignment_it_teaches(tmp_path):
    commands = recipe()
    assert not any(command.startswith("make") for command in commands), commands
    (generate,) = [c for c in commands if c.startswith("nbgrader generate_assignment")]
    for part in ("solutions", "course"):
        shutil.copytree(ROOT / part, tmp_path / part)
    shutil.copy(ROOT / "nbgrader_config.py", tmp_path)
    before = {p.relative_to(tmp_path): p.read_bytes() for p in (tmp_path / "course").rglob("*") if p.is_file()}
    nbgrader = [str(Path(sys.executable).parent / "nbgrader")]
    done = subprocess.run(
        nbgrader + shlex.split(generate)[1:] + ["--log-level=WARN"],
        cwd=tmp_path,
        env=nbgrader_environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    from nbgrader.api import Gradebook

    quiet_gradebook_warnings()
    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}") as gradebook:
        gradebook.add_student("alice")
    exported = subprocess.run(
        nbgrader + ["export", "--log-level=WARN"],
        cwd=tmp_path,
        env=nbgrader_environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert exported.returncode == 0, exported.stderr[-2000:]
    with (tmp_path / "grades.csv").open() as file:
        rows = [(row["assignment"], row["student_id"]) for row in csv.DictReader(file)]
    assert rows == [(shlex.split(generate)[2], "alice")]
    after = {p.relative_to(tmp_path): p.read_bytes() for p in (tmp_path / "course").rglob("*") if p.is_file()}
    assert after == before, "the recipe changed course/"
