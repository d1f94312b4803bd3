"""Tokens/s of the TinyStories run with the solutions' parts (a finished student's stack) and the reference's.

    .venv/bin/python benchmarks/stack_speed.py                  # cpu_demo, 3 rounds of 5 + 30 steps per stack
    .venv/bin/python benchmarks/stack_speed.py --config gpu_h100 --set train.device=cuda --output /tmp/gpu_stacks

A student's parts must not make their run silently slower. This runs the real loop (``tinystories.train.run``)
with ``--stack yours`` as a student who finished notebooks 08 and 10 would have it (solutions/ standing in
for course/: their ``ModernDecoder``, ``cross_entropy``, ``AdamW``, ``cosine_lr``, ``clip_grad_norm`` and
``get_batch``) and with ``--stack reference`` (the library's parts: ``tinystories.library.LibraryDecoder`` on
``nn.RMSNorm``, Llama's rotation and SDPA, PyTorch's ``F.cross_entropy``, ``torch.optim.AdamW`` and
``clip_grad_norm_``; the schedule and the batches, which no library has, are the solutions' in both), alternating the two in rounds so that a busy moment of the machine does not favour
one. Each round's speed is the median tokens/s of its timed steps (after untimed warm-up steps); the table
gives the median over rounds. Writes OUTPUT.json and OUTPUT.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import command, load_average, machine, now  # noqa: E402
from tinystories.config import load_config  # noqa: E402
from tinystories.stack import reference_stack, student_stack  # noqa: E402
from tinystories.train import run  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="cpu_demo")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30, help="timed steps per round")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps first in each round")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument("--output", default="benchmarks/stack_speed", help="writes OUTPUT.json and OUTPUT.md")
    args = parser.parse_args(argv)

    stacks = {"yours (the solutions)": student_stack(ROOT / "solutions", check=False), "reference": reference_stack()}
    speeds: dict[str, list[float]] = {name: [] for name in stacks}
    before = load_average()
    with tempfile.TemporaryDirectory() as tmp:
        total = args.warmup + args.steps
        overrides = [f"data.dir={tmp}/data", f"train.max_steps={total}",
                     f"train.warmup_steps={min(args.warmup, total - 1)}", f"train.eval_interval={total}",
                     "train.eval_batches=1", f"train.checkpoint_interval={total}", "sample.n=1",
                     "sample.max_new_tokens=4", *args.set]
        for round_ in range(args.rounds):
            order = list(stacks) if round_ % 2 == 0 else list(reversed(stacks))
            for name in order:
                config = load_config(args.config, [*overrides, f"out_dir={tmp}/{round_}-{name.split()[0]}"])
                result = run(config, stack=stacks[name], progress=False)
                speeds[name].append(statistics.median(m["tokens_per_s"] for m in result.metrics[args.warmup:]))
    medians = {name: statistics.median(values) for name, values in speeds.items()}
    ratio = medians["reference"] / medians["yours (the solutions)"]
    report = {"command": command(), "date": now(), "machine": machine(), "load_before": before,
              "load_after": load_average(), "config": args.config, "overrides": overrides, "rounds": args.rounds,
              "tokens_per_s": speeds, "median_tokens_per_s": medians, "reference_over_yours": ratio}
    out = Path(args.output)
    out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [f"# The TinyStories run: your stack (the solutions' parts) against the reference's, {args.config}", "",
             f"- command: `{report['command']}`", f"- date: {report['date']}", f"- machine: {report['machine']}",
             f"- load average (1, 5, 15 min): before {before}, after {report['load_after']}",
             f"- each round: {args.warmup} untimed + {args.steps} timed optimizer steps of the real loop per stack; "
             f"{args.rounds} rounds, the order swapped every round", "",
             "| stack | tokens/s per round | median |", "|---|---|---:|"]
    lines += [f"| {name} | {', '.join(f'{v:,.0f}' for v in values)} | {medians[name]:,.0f} |"
              for name, values in speeds.items()]
    lines += ["", f"The reference is {ratio:.2f}x as fast as the solutions' stack."]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
