"""The course's pinned packages for a machine that brings its own torch (Colab, Kaggle).

    python tools/colab_requirements.py > colab-requirements.txt

prints requirements.lock without torch and without the packages that belong to the machine's torch:
its CUDA libraries (nvidia-*, cuda-*), triton, and every package torch needs to import (sympy, networkx,
filelock, jinja2, ... read from the installed torch's metadata, with what they need in turn). Colab's torch is
a CUDA build made for its own GPU drivers; installing the course's torch (or other versions of the packages it
was built against) over it would break it. Everything else keeps the lock's exact version.

colab/tinystories_colab.ipynb installs the list with `pip install --no-deps --target DIR` and puts DIR first on
the training program's PYTHONPATH only, so the notebook's own kernel keeps Colab's packages.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from envfiles import canonical, lock_pins  # noqa: E402

# Packages that come with a CUDA torch (or with the machine's driver set-up), whatever their version.
TORCH_FAMILY = re.compile(r"^(torch|triton|nvidia-.*|cuda-.*|pytorch-triton.*)$")


def pinned_torch() -> str:
    """The torch version the course pins (requirements.lock)."""
    return lock_pins()["torch"]


def _requirement_names(requirements: list[str] | None) -> list[str]:
    """Names of the unconditional requirements (no extras, no markers that exclude them here)."""
    names = []
    for requirement in requirements or []:
        spec, _, marker = requirement.partition(";")
        if "extra" in marker:
            continue
        name = re.match(r"[A-Za-z0-9_.-]+", spec.strip())
        if name:
            names.append(canonical(name.group()))
    return names


def torch_closure(requires=importlib.metadata.requires) -> set[str]:
    """torch and every package it needs, transitively, as installed here (``requires(name)`` gives a
    package's requirements; a package that is not installed ends the walk there)."""
    seen, todo = set(), ["torch"]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            todo += _requirement_names(requires(name))
        except importlib.metadata.PackageNotFoundError:
            pass
    return seen


def requirements(pins: dict[str, str] | None = None, keep_out: set[str] | None = None) -> list[str]:
    """``name==version`` lines of the lock, less the torch family and ``keep_out`` (default: torch's closure here)."""
    pins = lock_pins() if pins is None else pins
    keep_out = torch_closure() if keep_out is None else keep_out
    return [
        f"{name}=={version}"
        for name, version in sorted(pins.items())
        if not TORCH_FAMILY.match(name) and name not in keep_out
    ]


def main() -> int:
    try:
        here = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        here = None
    note = f"this machine's torch {here}" if here else "no torch installed here"
    print(f"# requirements.lock without torch {pinned_torch()} and its own packages ({note}).")
    print("\n".join(requirements()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
