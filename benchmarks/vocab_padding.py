"""The output layer's matmul with GPT-2's vocabulary, 50,257 rows, and padded to a multiple of 64, 50,304.

nanoGPT pads GPT-2's vocabulary to 50,304 for speed on GPUs, whose matmul tiles and tensor cores work in
blocks of 8, 64 or 128. This script measures what the padding does on the machine it runs on: the time of
``hidden @ W.T`` (forward) for ``W`` of ``[V, d_model]``, for both values of ``V``. The two sizes are timed
alternately, in an order that swaps every round, so that a slow phase of a shared machine hits both; the
results are medians over rounds.

    .venv/bin/python benchmarks/vocab_padding.py            # writes benchmarks/vocab_padding.{json,md}
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks._common import command, load_average, machine, now  # noqa: E402

VOCABS = (50257, 50304)  # GPT-2's vocabulary; the next multiple of 64


def seconds(hidden: torch.Tensor, weight: torch.Tensor, inner: int) -> float:
    """Mean time of one ``F.linear(hidden, weight)`` over ``inner`` calls."""
    start = time.perf_counter()
    for _ in range(inner):
        F.linear(hidden, weight)
    return (time.perf_counter() - start) / inner


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=256, help="rows of the hidden states (batch x sequence)")
    parser.add_argument("--d-model", type=int, default=768)
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument("--inner", type=int, default=3, help="calls per timing")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: steadier on a shared machine)")
    parser.add_argument("--out", default=str(Path(__file__).with_name("vocab_padding")))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(args.tokens, args.d_model, generator=g)
    weights = {v: torch.randn(v, args.d_model, generator=g) * args.d_model ** -0.5 for v in VOCABS}
    for v in VOCABS:  # warm-up: allocator and BLAS paths
        seconds(hidden, weights[v], 1)
    load_before, times = load_average(), {v: [] for v in VOCABS}
    for r in range(args.rounds):
        for v in VOCABS if r % 2 == 0 else VOCABS[::-1]:
            times[v].append(seconds(hidden, weights[v], args.inner))
    medians = {v: statistics.median(t) for v, t in times.items()}
    flops = {v: 2 * args.tokens * args.d_model * v for v in VOCABS}
    rows = [{"vocab_size": v, "median_ms": round(1e3 * medians[v], 3),
             "min_ms": round(1e3 * min(times[v]), 3), "max_ms": round(1e3 * max(times[v]), 3),
             "gflop_per_s": round(flops[v] / medians[v] / 1e9, 2)} for v in VOCABS]
    ratio = medians[VOCABS[1]] / medians[VOCABS[0]]
    # Each round timed both sizes back to back: their ratio within a round cancels most of the machine's drift.
    paired = sorted(p / u for u, p in zip(times[VOCABS[0]], times[VOCABS[1]], strict=True))
    quartiles = statistics.quantiles(paired, n=4)
    resolved = not quartiles[0] <= 1.0 <= quartiles[2]
    result = {"command": command(), "date": now(), "machine": machine(), "torch": torch.__version__,
              "load_average_before": load_before, "load_average_after": load_average(),
              "tokens": args.tokens, "d_model": args.d_model, "rounds": args.rounds, "inner": args.inner,
              "dtype": "float32", "device": "cpu", "results": rows, "padded_over_unpadded_time": round(ratio, 3),
              "paired_ratio_median": round(statistics.median(paired), 3),
              "paired_ratio_quartiles": [round(quartiles[0], 3), round(quartiles[2], 3)],
              "difference_resolved": resolved}
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    lines = ["# Vocabulary padding: the output layer's matmul for V = 50,257 and 50,304", "",
             f"- command: `{result['command']}`", f"- date: {result['date']}", f"- machine: {result['machine']}",
             f"- load average (1, 5, 15 min): before {load_before}, after {result['load_average_after']}",
             f"- work: `F.linear(hidden, W)`, hidden `[{args.tokens}, {args.d_model}]`, W `[V, {args.d_model}]`, "
             f"float32 on the CPU; {args.rounds} rounds, the two sizes alternated (order swapped every round), "
             f"each timing the mean of {args.inner} calls; medians over rounds", "",
             "| V | median (ms) | min (ms) | max (ms) | GFLOP/s at the median |", "|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['vocab_size']} | {r['median_ms']:.1f} | {r['min_ms']:.1f} | {r['max_ms']:.1f} | "
              f"{r['gflop_per_s']:.1f} |" for r in rows]
    lines += ["", f"Padded time / unpadded time: {ratio:.3f} (ratio of the medians); per round, the median ratio is "
              f"{statistics.median(paired):.3f}, its quartiles {quartiles[0]:.3f} and {quartiles[2]:.3f}. The padded "
              f"matrix has 47 more rows (+{100 * (VOCABS[1] / VOCABS[0] - 1):.2f}% work).",
              "", ("The quartiles of the per-round ratio exclude 1: this machine resolves a difference."
                   if resolved else "The quartiles of the per-round ratio include 1: on this CPU the two sizes take "
                   "the same time within the noise of the measurement."),
              "", "No GPU was measured. The gain that padding is for is a GPU effect (matmul tiles and tensor "
              "cores work in blocks of 8, 64 or 128); nanoGPT's model.py pads to 50,304 'for efficiency'."]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
