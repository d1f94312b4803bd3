"""The TinyStories program's speed on a GPU: tokens/s, ms per step and MFU of the gpu_h100 config.

    .venv/bin/python benchmarks/tinystories_gpu.py                      # on the GPU machine
    .venv/bin/python benchmarks/tinystories_gpu.py --set train.attention=math --output benchmarks/tinystories_gpu_math
    .venv/bin/python benchmarks/tinystories_gpu.py --stack solutions --output benchmarks/tinystories_gpu_solutions
    .venv/bin/python benchmarks/tinystories_gpu.py --device cpu --tiny --steps 3 --output /tmp/x   # a smoke test

It runs the real training loop (``tinystories.train.run``) with the gpu_h100 config for warm-up + N
steps and reports the medians over the N steps after the warm-up (compilation and the allocator settle
in the warm-up). Throughput does not depend on the text, so it trains on the shipped sample (the data
set cannot be downloaded everywhere). Writes OUTPUT.json and OUTPUT.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import tinystories.train as train_module  # noqa: E402
from benchmarks._common import command, machine, now  # noqa: E402
from tinystories.config import load_config  # noqa: E402
from tinystories.stack import COMPILED, reference_stack, student_stack  # noqa: E402
from tinystories.train import peak_flops, run  # noqa: E402

TINY = ["model.d_model=32", "model.n_layers=1", "model.n_heads=2", "model.d_ff=64", "model.context_length=32",
        "data.vocab_size=512", "train.batch_size=4", "train.micro_batch_size=4", "train.compile=false"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="gpu_h100")
    parser.add_argument("--steps", type=int, default=50, help="timed steps after the warm-up")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps first (torch.compile runs here)")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--tiny", action="store_true", help="a tiny model (a smoke test of this script on a CPU)")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument("--stack", choices=("reference", "solutions"), default="reference",
                        help="solutions: the parts a student who finished the notebooks trains (tinystories.stack; with "
                             "train.compile, notebook 14's loss and optimizer step)")
    parser.add_argument("--reference-parts", default="", metavar="PART,PART",
                        help="with --stack solutions: parts taken from the course all the same (loss,optimizer,...), "
                             "to see which of a student's parts costs the time")
    parser.add_argument("--split-at-masks", action="store_true",
                        help="compile a student's loss without capturing data-dependent shapes: the compiled loss is "
                             "cut in two at its boolean mask (tinystories.train.CAPTURE_DYNAMIC_OUTPUT_SHAPES)")
    parser.add_argument("--output", default="benchmarks/tinystories_gpu", help="writes OUTPUT.json and OUTPUT.md")
    args = parser.parse_args(argv)
    train_module.CAPTURE_DYNAMIC_OUTPUT_SHAPES = not args.split_at_masks

    with tempfile.TemporaryDirectory() as tmp:
        total = args.warmup + args.steps
        overrides = [*(TINY if args.tiny else []), "data.source=sample", f"data.dir={tmp}/data",
                     f"train.max_steps={total}", f"train.warmup_steps={min(args.warmup, total - 1)}",
                     f"train.eval_interval={total}", "train.eval_batches=1", f"train.checkpoint_interval={total}",
                     f"train.device={args.device}", "sample.n=1", "sample.max_new_tokens=4",
                     f"out_dir={tmp}/run", *args.set]
        config = load_config(args.config, overrides)
        stack = student_stack(ROOT / "solutions", check=False) if args.stack == "solutions" else reference_stack()
        reference = reference_stack()
        for key in filter(None, (key.strip() for key in args.reference_parts.split(","))):
            getattr(reference, key)  # an unknown part raises here, before any training
            # "loss" and "optimizer" name the parts a run calls, compiled (notebook 14's) or not, as the command's do
            for part in (key, COMPILED[key]) if key in COMPILED else (key,):
                setattr(stack, part, getattr(reference, part))
        result = run(config, stack=stack, progress=False)
    timed = result.metrics[args.warmup:]
    device = torch.device("cuda" if torch.cuda.is_available() and args.device != "cpu" else "cpu")
    report = {
        "command": command(), "date": now(), "machine": machine(),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "config": args.config, "stack": args.stack,
        "reference_parts": args.reference_parts, "split_at_masks": args.split_at_masks,
        "overrides": overrides[len(TINY) if args.tiny else 0:],
        "tokens_per_step": config.train.batch_size * config.model.context_length,
        "timed_steps": len(timed),
        "tokens_per_s": statistics.median(r["tokens_per_s"] for r in timed),
        "ms_per_step": statistics.median(r["ms_per_step"] for r in timed),
        "mfu": statistics.median(r["mfu"] for r in timed) if timed and "mfu" in timed[0] else None,
        "peak_flops": peak_flops(device),
        "peak_memory_gib": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None,
        "final_train_loss": timed[-1]["train_loss"] if timed else None,
    }
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    mfu = f"{100 * report['mfu']:.1f}%" if report["mfu"] is not None else "n/a (peak unknown)"
    eta = 327_680_000 / report["tokens_per_s"] / 60
    memory = f"{report['peak_memory_gib']:.1f} GiB" if report["peak_memory_gib"] is not None else "n/a"
    out.with_suffix(".md").write_text(
        f"# TinyStories training speed ({report['config']}, stack {report['stack']})\n\n"
        f"{report['date']}, {report['device']}; {report['machine']}\n\n"
        f"Command: `{report['command']}`\n\n"
        f"| tokens/s | ms/step | MFU | peak memory | 327.68M tokens would take |\n|---:|---:|---:|---:|---:|\n"
        f"| {report['tokens_per_s']:,.0f} | {report['ms_per_step']:.1f} | {mfu} | {memory} | {eta:.0f} min |\n\n"
        f"Medians over {len(timed)} steps after {args.warmup} warm-up steps; "
        f"{report['tokens_per_step']:,} tokens per step.\n")
    print(out.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
