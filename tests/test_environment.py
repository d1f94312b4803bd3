"""The pip, conda and Binder paths pin the same versions, and the Binder files install the course."""

from __future__ import annotations

import concurrent.futures
import functools
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import pytest
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


def test_binder_requirements_resolve_to_exactly_the_lock():
    """pip resolves Binder's pip list from scratch (dry run) to the locked set and nothing else.

    The CPU index that Binder adds is not reachable here; torch 2.13.0+cpu comes from the
    same wheel the course uses.
    """
    resolved, said = _dry_runs()[BINDER]
    assert resolved is not None, said[-3:]
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


def _make_dry_run(tmp_path, torch_choice, gpu_listing):
    """The commands `make` would run to set up a new venv (make -n), with a stand-in nvidia-smi on PATH that
    lists ``gpu_listing`` (None: it fails, as where there is no driver)."""
    bin_dir = tmp_path / f"bin-{torch_choice}-{gpu_listing is not None}"
    bin_dir.mkdir()
    fake = bin_dir / "nvidia-smi"
    fake.write_text(f"#!/bin/sh\necho '{gpu_listing}'\n" if gpu_listing else "#!/bin/sh\nexit 9\n")
    fake.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
    return subprocess.run(
        ["make", "-n", f"VENV={tmp_path}/venv", f"TORCH={torch_choice}", "stamp"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _torch_commands(output):
    return [line for line in output.splitlines() if "torch" in line and "pip" in line]


@pytest.mark.skipif(sys.platform != "linux", reason="the CPU/CUDA choice is Linux's (macOS has one build)")
def test_make_installs_the_cpu_or_the_cuda_build_of_the_locked_torch(tmp_path):
    version = envfiles.lock_pins()["torch"]
    gpu = "GPU 0: Tesla T4 (UUID: GPU-0)"
    for choice, listing, build in [
        ("auto", None, "cpu"),
        ("auto", gpu, "cuda"),
        ("cpu", gpu, "cpu"),
        ("cuda", None, "cuda"),
    ]:
        result = _make_dry_run(tmp_path, choice, listing)
        assert result.returncode == 0, result.stderr
        commands = _torch_commands(result.stdout)
        install = [c for c in commands if " install " in c]
        assert install, result.stdout
        if build == "cpu":
            assert install[0].endswith(f"--no-deps torch=={version}+cpu --extra-index-url {envfiles.TORCH_CPU_INDEX}")
            assert not any("uninstall" in c for c in commands)
        else:  # PyPI's default Linux wheel; an installed CPU build (which satisfies ==version too) goes first
            assert install[-1].endswith(f"-c requirements.lock torch=={version}"), install
            assert any("uninstall --quiet -y torch" in c for c in commands)
        stamp = [line for line in result.stdout.splitlines() if line.startswith("touch ")]
        assert stamp and stamp[-1].endswith(f"-{build}"), "the stamp names the build, so a switch reinstalls"
    wrong = _make_dry_run(tmp_path, "gpu", None)
    assert wrong.returncode != 0 and "use auto, cpu or cuda" in wrong.stderr


def test_torch_is_one_version_everywhere():
    """The lock's torch is the one pyproject pins, both environment files install (Binder's CPU build), the
    Makefile installs (it reads the lock) and the Colab notebook's package list names."""
    sys.path.insert(0, str(ROOT / "tools"))
    import colab_requirements

    version = envfiles.lock_pins()["torch"]
    assert envfiles.direct_pins()["torch"] == version
    assert f"torch=={version}" in _pip_section(ROOT / "environment.yml")[2]
    assert f"torch=={version}+cpu" in _pip_section(ROOT / "binder" / "environment.yml")[2]
    assert "TORCH_VERSION := $(shell sed -n 's/^torch==//p' requirements.lock)" in (ROOT / "Makefile").read_text()
    assert colab_requirements.pinned_torch() == version
    assert not any(line.startswith("torch==") for line in colab_requirements.requirements())


# --- the lock installs on every Python the README promises ("3.11 or newer") --------------------------------------

OLDEST_MINOR = int(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"].split(".")[-1])
NEWEST_MINOR = 14  # the newest Python release (3.14, October 2025)


def _version(python: str) -> tuple[int, int, int] | None:
    try:
        done = subprocess.run(
            [python, "-c", "import sys; print(*sys.version_info[:3])"], capture_output=True, text=True, timeout=30
        )
    except OSError:
        return None
    return tuple(map(int, done.stdout.split())) if done.returncode == 0 else None


@functools.cache  # one search of the machine for all of the parametrized test's cases
def _pythons() -> dict[int, tuple[tuple[int, int, int], str]]:
    """Minor -> (version, interpreter): the oldest patch release of each minor found on this machine (the strictest
    for a package's Requires-Python): python3 on PATH and Debian's /usr/bin/python3, python3.M, and pyenv's."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = {"/usr/bin/python3", *(str(p) for p in pyenv.glob("3.*/bin/python3"))}
    candidates |= {
        found
        for name in ("python3", *(f"python3.{m}" for m in range(OLDEST_MINOR, NEWEST_MINOR + 1)))
        if (found := shutil.which(name))
    }
    found: dict[int, tuple[tuple[int, int, int], str]] = {}
    for python in sorted(candidates):
        version = _version(python)
        if version and version[0] == 3 and (version[1] not in found or version < found[version[1]][0]):
            found[version[1]] = (version, python)
    return found


BINDER = "binder"  # _dry_runs()'s key for Binder's pip list


@functools.cache
def _dry_runs() -> dict:
    """pip's dry runs of these tests, all at once: the lock for each Python found (by minor), and Binder's pip list
    (``BINDER``). Each run spends about half its time waiting on the package index (26 s of wall, 12 s of CPU, on
    the 2-core machine), so side by side they take little more than the longest of them."""
    _, _, pip = _pip_section(ROOT / "binder" / "environment.yml")
    with tempfile.TemporaryDirectory(prefix="binder-requirements-") as folder:
        binder = Path(folder) / "requirements.txt"
        binder.write_text("\n".join(line for line in pip if not line.startswith("--extra-index-url")))
        runs = {
            minor: (ROOT / "requirements.lock", {"python": python, "deps": False})
            for minor, (_, python) in _pythons().items()
            if OLDEST_MINOR <= minor <= NEWEST_MINOR
        }
        runs[BINDER] = (binder, {})
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(runs)) as pool:
            started = {key: pool.submit(envfiles.dry_run, path, **options) for key, (path, options) in runs.items()}
            return {key: future.result() for key, future in started.items()}


@pytest.mark.parametrize("minor", range(OLDEST_MINOR, NEWEST_MINOR + 1), ids=lambda m: f"3.{m}")
def test_every_locked_version_installs_on_each_python_the_readme_promises(minor):
    """pip (dry run, for that interpreter: ``pip --python``) finds every pin of the lock installable there.

    ``make`` installs the lock as constraints, so a pin with no release for that Python (a Requires-Python above
    it, no wheel and no source) stops the set-up. torch resolves to the CPU wheel this machine has for 3.11, and
    to PyPI's release elsewhere; both are the lock's version.
    """
    python = _pythons().get(minor)
    if python is None:
        pytest.skip(f"no Python 3.{minor} on this machine")
    (version, interpreter) = python
    resolved, said = _dry_runs()[minor]
    assert resolved is not None, f"Python {'.'.join(map(str, version))} ({interpreter}): {said[-2:]}"
    assert resolved == envfiles.lock_pins()
