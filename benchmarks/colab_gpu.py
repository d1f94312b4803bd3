"""The Colab notebook on a GPU machine that brings its own CUDA torch, as Colab does (a check, not a timing).

    python3 benchmarks/colab_gpu.py OUTDIR [--steps 40]

Executes colab/tinystories_colab.ipynb with the machine's python3 (its torch, nothing installed: INSTALL=False),
the gpu_t4 config (fp16 with a GradScaler, torch.compile) on the shipped sample for a few steps, the checkpoint
interval taken from the preflight's measured speed. Writes OUTDIR/colab_gpu.ipynb (the executed notebook) and the
run's metrics.jsonl, loss_curve.png, samples.txt and config.toml (the checkpoint stays in a temporary folder).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        nb = nbformat.read(ROOT / "colab" / "tinystories_colab.ipynb", as_version=4)
        (index,) = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
        overrides = ["data.source=sample", f"data.dir={tmp}/data", f"train.max_steps={args.steps}",
                     "train.warmup_steps=5", f"train.eval_interval={args.steps // 2}", "train.eval_batches=2",
                     "sample.n=2", "sample.max_new_tokens=40"]
        nb.cells.insert(index + 1, nbformat.v4.new_code_cell("\n".join([
            f"REPO = {str(ROOT)!r}", "NOTEBOOKS = 'none'", "INSTALL = False", f"RUN_DIR = {tmp + '/run'!r}",
            f"OVERRIDES = {overrides!r}", "CHECKPOINT_MINUTES = 0.05", f"STOP_AFTER = {args.steps // 2}"]),
            id="injected-parameters"))
        client = NotebookClient(nb, timeout=400, kernel_name="python3", resources={"metadata": {"path": tmp}})
        try:
            client.execute()
        finally:
            nbformat.write(nb, out / "colab_gpu.ipynb")
        # As after a disconnection: the same notebook again continues from the checkpoint.
        for cell in nb.cells:
            if cell.id == "injected-parameters":
                cell.source = cell.source.replace(f"STOP_AFTER = {args.steps // 2}", "STOP_AFTER = None")
        try:
            NotebookClient(nb, timeout=400, kernel_name="python3", resources={"metadata": {"path": tmp}}).execute()
        finally:
            nbformat.write(nb, out / "colab_gpu_resumed.ipynb")
        for name in ("metrics.jsonl", "loss_curve.png", "samples.txt", "config.toml"):
            if (Path(tmp) / "run" / name).is_file():
                shutil.copy(Path(tmp) / "run" / name, out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
