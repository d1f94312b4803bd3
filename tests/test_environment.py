"""The pip, conda and Binder paths pin the same versions, and the Binder files install the course."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib

import yaml
from notebooks import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import envfiles  # noqa: E402


def _pip_section(path):
    spec = yaml.safe_load(path.read_text())
    deps = spec["dependencies"]
    (pip,) = [d["pip"] for d in deps if isinstance(d, dict)]
    return spec, deps, pip


def test_direct_pins_are_exact_and_locked():
    direct, locked = envfiles.direct_pins(), envfiles.lock_pins()
    assert direct["torch"] == "2.13.0"
    for name, version in direct.items():
        assert locked.get(name) == version, f"{name}: pyproject pins {version}, the lock {locked.get(name)}"


def test_environment_files_are_generated_from_the_lock():
    assert envfiles.main("check") == 0, "run `make envfiles`"
    locked = envfiles.lock_pins()
    for path in (ROOT / "environment.yml", ROOT / "binder" / "environment.yml"):
        _, deps, pip = _pip_section(path)
        assert "python=3.11" in deps, f"{path}: nbgrader 0.9 needs python >= 3.11"
        assert envfiles.parse_pins(pip) == locked, f"{path} and requirements.lock disagree"


def test_binder_configuration_follows_repo2docker_rules():
    binder = ROOT / "binder"
    _, _, pip = _pip_section(binder / "environment.yml")
    assert f"--extra-index-url {envfiles.TORCH_CPU_INDEX}" in pip and "torch==2.13.0+cpu" in pip
    post_build = (binder / "postBuild").read_text().splitlines()
    assert post_build[0] == "#!/bin/bash" and any(line.startswith("set -e") for line in post_build)
    assert os.access(binder / "postBuild", os.X_OK)
    assert any("pip install --no-deps -e ." in line for line in post_build), "the autograder package"
    assert not (binder / "requirements.txt").exists(), "environment.yml would shadow it"


def test_binder_requirements_resolve_to_exactly_the_lock(tmp_path):
    """pip resolves Binder's pip list from scratch (dry run) to the locked set and nothing else.

    The CPU index that Binder adds is not reachable here; torch 2.13.0+cpu comes from the
    same wheel the course uses.
    """
    _, _, pip = _pip_section(ROOT / "binder" / "environment.yml")
    requirements = tmp_path / "binder-requirements.txt"
    requirements.write_text("\n".join(line for line in pip if not line.startswith("--extra-index-url")))
    report = tmp_path / "report.json"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
         "--report", str(report), "-r", str(requirements)],
        check=True, timeout=600,
    )
    resolved = {
        envfiles.canonical(item["metadata"]["name"]): item["metadata"]["version"].split("+")[0]
        for item in json.loads(report.read_text())["install"]
    }
    assert resolved == envfiles.lock_pins()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert all(envfiles.canonical(d.split("==")[0]) in resolved for d in project["dependencies"])


def test_binder_conda_side_is_what_repo2docker_reads():
    """No conda here (nor conda-forge), so the conda solve cannot run; this checks what repo2docker parses.

    repo2docker (checked with 2026.4.0's `--no-build --debug`, see docs/student_lab.md) picks its base
    environment by the `python=X.Y` spec, then runs `mamba env update -p $NB_PYTHON_PREFIX --file
    binder/environment.yml` into the environment the server runs from, then `binder/postBuild`.
    """
    import re

    spec, deps, pip = _pip_section(ROOT / "binder" / "environment.yml")
    assert set(spec) <= {"name", "channels", "dependencies"} and spec["channels"] == ["conda-forge"]
    conda = [d for d in deps if not isinstance(d, dict)]
    assert deps[-1] == {"pip": pip}, "one pip section, last"
    simple_spec = re.compile(r"^[a-z0-9][a-z0-9_.-]*(=[0-9][0-9a-z.*]*)?$")  # name[=version], as envfiles writes
    assert all(isinstance(d, str) and simple_spec.match(d) for d in conda), conda
    names = [d.split("=")[0] for d in conda]
    assert len(names) == len(set(names)) and "pip" in names, "pip (for the pip section) once"
    assert [d for d in conda if d.startswith("python=")] == [f"python={envfiles.PYTHON}"]
    # A package from both conda and pip would be installed twice, at versions the lock does not decide.
    assert not set(names) & set(envfiles.parse_pins(pip)), "installed by conda and by pip"
