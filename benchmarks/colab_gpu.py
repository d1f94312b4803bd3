"""The Colab notebook on a GPU machine that brings its own CUDA torch, as Colab does (a check, not a timing).

    python3 benchmarks/colab_gpu.py OUTDIR [--steps 40]
    .venv/bin/python benchmarks/colab_gpu.py /tmp/x --cpu-tiny     # a smoke test of this script on a CPU

Runs the code cells of colab/tinystories_colab.ipynb in order with the machine's python3 (its torch; nothing
installed: INSTALL=False; no Jupyter needed, so a bare GPU machine will do), on the gpu_t4 config (fp16 with a
GradScaler, torch.compile) and the shipped sample for a few steps, the checkpoint interval taken from the
preflight's measured speed. It stops half-way with a checkpoint, then runs the cells again, which continue the
run with --resume. Copies the run's metrics.jsonl, loss_curve.png, samples.txt and config.toml to OUTDIR (the
checkpoint stays in a temporary folder).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TINY = ["model.d_model=32", "model.n_layers=1", "model.n_heads=2", "model.d_ff=64", "model.context_length=32",
        "data.vocab_size=512", "train.batch_size=4", "train.micro_batch_size=4", "train.compile=false",
        "train.device=cpu", "train.precision=fp32"]


def _display_without_jupyter() -> None:
    """IPython.display where IPython is missing: an image is reported by its size."""
    try:
        import IPython.display  # noqa: F401
    except ImportError:
        module = types.ModuleType("IPython.display")
        module.Image = lambda filename: Path(filename)
        module.display = lambda image: print(f"[image {image}: {image.stat().st_size:,} bytes]")
        sys.modules["IPython"] = types.ModuleType("IPython")
        sys.modules["IPython.display"] = module


def run_cells(parameters: str) -> None:
    cells = json.loads((ROOT / "colab" / "tinystories_colab.ipynb").read_text())["cells"]
    namespace: dict = {}
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        print(f"\n##### cell {cell['id']}", flush=True)
        exec(compile("".join(cell["source"]), cell["id"], "exec"), namespace)  # noqa: S102 - the course's own cells
        if "parameters" in cell["metadata"].get("tags", []):
            exec(parameters, namespace)  # noqa: S102


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--cpu-tiny", action="store_true", help="a tiny model on the CPU in fp32 (a smoke test)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    _display_without_jupyter()
    with tempfile.TemporaryDirectory() as tmp:
        overrides = [*(TINY if args.cpu_tiny else []), "data.source=sample", f"data.dir={tmp}/data",
                     f"train.max_steps={args.steps}", "train.warmup_steps=5",
                     f"train.eval_interval={args.steps // 2}", "train.eval_batches=2", "sample.n=2",
                     "sample.max_new_tokens=40"]
        parameters = "\n".join([
            f"REPO = {str(ROOT)!r}", "NOTEBOOKS = 'none'", "INSTALL = False", f"RUN_DIR = {tmp + '/run'!r}",
            f"OVERRIDES = {overrides!r}", "CHECKPOINT_MINUTES = 0.05", "PREFLIGHT_STEPS = 8"])
        run_cells(parameters + f"\nSTOP_AFTER = {args.steps // 2}")
        print("\n##### again, as after a disconnection", flush=True)
        run_cells(parameters + "\nSTOP_AFTER = None")
        for name in ("metrics.jsonl", "loss_curve.png", "samples.txt", "config.toml"):
            if (Path(tmp) / "run" / name).is_file():
                shutil.copy(Path(tmp) / "run" / name, out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
