"""Every benchmark script still imports: nothing in the product imports them, so a renamed function or module
broke one unseen (``tokenizer_prepare.py`` imported a name that had been renamed). Importing a script runs
none of its measurements (each waits for ``__main__``). A driver that ``check_latency.py`` starts as a program
and that does its work at import (``_check_phases.py``) is only read: every module it imports must exist.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted(path for path in (ROOT / "benchmarks").glob("*.py") if path.name != "_common.py")


def _as_a_program_would(monkeypatch) -> None:
    """sys.path as ``.venv/bin/python benchmarks/NAME.py`` from the repository root has it: the script's folder
    first (``from _common import ...``), the repository (an editable install) after it."""
    monkeypatch.syspath_prepend(str(ROOT))
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))


def _is_program_at_import(path: Path) -> bool:
    return '__name__ == "__main__"' not in path.read_text(encoding="utf-8")


@pytest.mark.parametrize("path", [p for p in SCRIPTS if not _is_program_at_import(p)], ids=lambda p: p.stem)
def test_a_benchmark_script_imports(path, monkeypatch):
    _as_a_program_would(monkeypatch)
    module = importlib.import_module(path.stem)
    assert callable(getattr(module, "main", None)), f"{path.name} has no main()"


@pytest.mark.parametrize("path", [p for p in SCRIPTS if _is_program_at_import(p)], ids=lambda p: p.stem)
def test_a_driver_imports_only_modules_that_exist(path, monkeypatch):
    _as_a_program_would(monkeypatch)
    imported = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            imported.add(node.module)
            module = importlib.import_module(node.module)
            for alias in node.names:  # `from M import name`: a name M lacks is as broken as a missing M
                assert hasattr(module, alias.name) or importlib.util.find_spec(f"{node.module}.{alias.name}"), (
                    f"{path.name}: {node.module} has no {alias.name}"
                )
    missing = sorted(name for name in imported if name not in sys.modules and importlib.util.find_spec(name) is None)
    assert not missing, f"{path.name} imports modules that do not exist: {missing}"
