"""Install the students' JupyterLab settings (jupyter/student/) into a Jupyter config directory.

jupyter/student/ is the one source of these settings: nbgrader's instructor tools (create-assignment,
formgrader, course list) disabled and locked, no "official Jupyter news?" pop-up, and terminals that run the
course's Python. `make lab` reads the folder in place (on JUPYTER_CONFIG_PATH, for that server only, so an
instructor's own `jupyter lab` keeps formgrader). A Binder image has no instructor, so binder/postBuild runs
this script to merge the same files into its environment's config directory, ``sys.prefix/etc/jupyter``.

Merging goes through jupyter_server's own config manager (as `jupyter server extension disable` does), so
what other packages wrote there stays. Our settings land in the top-level files (``jupyter_server_config.json``,
``labconfig/page_config.json``), which outrank the ``*.d/`` files that packages install: nbgrader's
``jupyter_server_config.d/nbgrader.json`` enables formgrader, and a ``*.d`` file of ours would lose to it.

``jupyter_server_config.py`` (the lab's terminals: the course's Python first on PATH, no login shell) is Python,
which no config manager merges: it goes into the target's ``jupyter_server_config.py`` as one block between two
marker lines, added at the end of a file that is already there and replaced on a second run. It finds
``terminal.bashrc`` (the terminals' start-up file) beside itself, so that file is copied beside it.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from jupyter_core.paths import ENV_CONFIG_PATH
from jupyter_server.config_manager import BaseJSONConfigManager

STUDENT = Path(__file__).resolve().parents[1] / "jupyter" / "student"


BEGIN = "# >>> transformer-course: the students' settings (tools/student_settings.py) >>>"
END = "# <<< transformer-course: the students' settings <<<"


def _merge_python(source: Path, destination: Path) -> None:
    """Put ``source`` into ``destination`` between BEGIN and END, keeping the rest of ``destination``."""
    block = f"{BEGIN}\n{source.read_text(encoding='utf-8').rstrip()}\n{END}\n"
    text = destination.read_text(encoding="utf-8") if destination.exists() else ""
    start, end = text.find(BEGIN), text.find(END)
    if start >= 0 and end > start:
        text = text[:start] + block + text[end + len(END) :].lstrip("\n")
    else:
        text = text + ("\n" if text and not text.endswith("\n") else "") + block
    destination.parent.mkdir(parents=True, exist_ok=True)
    destination.write_text(text, encoding="utf-8")


def install(target: Path) -> list[Path]:
    """Merge every ``jupyter/student/**/NAME.json`` into ``target/**/NAME.json`` and every ``NAME.py`` into
    ``target/**/NAME.py``, and copy the other files (``terminal.bashrc``); the files written."""
    written = []
    for source in sorted(STUDENT.rglob("*.json")):
        relative = source.relative_to(STUDENT)
        manager = BaseJSONConfigManager(config_dir=str(target / relative.parent))
        manager.update(relative.stem, json.loads(source.read_text(encoding="utf-8")))
        written.append(target / relative)
    for source in sorted(STUDENT.rglob("*.py")):
        relative = source.relative_to(STUDENT)
        _merge_python(source, target / relative)
        written.append(target / relative)
    for source in sorted(p for p in STUDENT.rglob("*") if p.is_file() and p.suffix not in (".json", ".py")):
        relative = source.relative_to(STUDENT)
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target / relative)
        written.append(target / relative)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "target",
        nargs="?",
        type=Path,
        default=Path(ENV_CONFIG_PATH[0]),
        help="a Jupyter config directory (default: this environment's, %(default)s)",
    )
    for path in install(parser.parse_args(argv).target):
        print(f"student settings: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
