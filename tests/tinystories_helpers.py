"""Shared by tests/test_tinystories_*.py: a tiny config and the program's command line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tinystories.config import load_config

ROOT = Path(__file__).resolve().parents[1]

TINY = [
    "data.vocab_size=384",
    "model.d_model=32",
    "model.n_layers=2",
    "model.n_heads=2",
    "model.d_ff=64",
    "model.context_length=32",
    "train.batch_size=8",
    "train.micro_batch_size=4",
    "train.max_steps=6",
    "train.warmup_steps=2",
    "train.eval_interval=3",
    "train.eval_batches=2",
    "train.checkpoint_interval=3",
    "sample.n=1",
    "sample.max_new_tokens=8",
]


def tiny_config(data_dir: Path, out_dir: Path, *overrides: str):
    return load_config("cpu_demo", [*TINY, f"data.dir={data_dir}", f"out_dir={out_dir}", *overrides])


def tiny_args(data_dir: Path, out_dir: Path, *overrides: str) -> list[str]:
    sets = [item for o in [*TINY, f"data.dir={data_dir}", *overrides] for item in ("--set", o)]
    return [*sets, "--out", str(out_dir), "--quiet"]


def cli(*args: str, module: tuple[str, ...] = ("-m", "tinystories"), timeout: int = 120):
    """Run the program in a subprocess from the repository root (so this checkout's package is used)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, *module, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def solution_parts(notebook: str, *names: str) -> dict:
    """{name: the solutions' definition} from ``solutions/NOTEBOOK`` (its preamble and answer cells run), as the
    program loads a student's parts: the oracles the tests hold the reference stack's library parts to."""
    from tinystories.stack import load_from

    return load_from(ROOT / "solutions" / notebook / f"{notebook}.ipynb", list(names))
