"""SwiGLU with two input products (w1, w3) against one fused product (gate_up_proj): forward time on the CPU.

Notebook 06, Section 6. The two forms compute the same function from the same weights:
``w2(silu(x w1^T) * (x w3^T))`` and ``down(silu(g) * u)`` with ``(g, u) = (x [w1; w3]^T).chunk(2)``, written
with ``F.linear`` as the course's modules run them. For each number of tokens and each torch thread count,
the two are timed in alternating rounds, the order swapped every round (so neither a busy moment of the
machine nor running second favours one of them; with a fixed order the second form measured up to 20% slower); a
round's time is the fastest of ``repeats`` calls, and the table shows the fastest round of each and the median
and range of the ratio fused / unfused over the rounds. Writes the numbers, the machine and the command to ``--out``
(``.json`` and ``.md``).

Run from the repository root:

    .venv/bin/python benchmarks/fused_swiglu.py --out benchmarks/fused_swiglu
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from _common import command, load_average, machine, now


def best_of(function, x, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function(x)
        times.append(time.perf_counter() - start)
    return min(times)


@torch.no_grad()
def measure(d_model, d_ff, tokens, rounds, seconds_per_round=0.05):
    torch.manual_seed(0)
    w1, w3 = torch.randn(d_ff, d_model) * d_model**-0.5, torch.randn(d_ff, d_model) * d_model**-0.5
    w2, w13 = torch.randn(d_model, d_ff) * d_ff**-0.5, torch.cat([w1, w3])

    def unfused(x):
        return F.linear(F.silu(F.linear(x, w1)) * F.linear(x, w3), w2)

    def fused(x):
        gate, up = F.linear(x, w13).chunk(2, dim=-1)
        return F.linear(F.silu(gate) * up, w2)

    x = torch.randn(tokens, d_model)
    assert torch.allclose(unfused(x), fused(x), atol=1e-5, rtol=1e-4)
    start = time.perf_counter()
    unfused(x)
    repeats = max(3, int(seconds_per_round / max(time.perf_counter() - start, 1e-6)))
    slow, fast = [], []
    for round_ in range(rounds):  # the order is swapped every round, so neither form always runs second
        if round_ % 2:
            fast.append(best_of(fused, x, repeats))
            slow.append(best_of(unfused, x, repeats))
        else:
            slow.append(best_of(unfused, x, repeats))
            fast.append(best_of(fused, x, repeats))
    ratios = [f / s for f, s in zip(fast, slow, strict=True)]
    return {"tokens": tokens, "threads": torch.get_num_threads(), "repeats": repeats,
            "unfused_ms": min(slow) * 1e3, "fused_ms": min(fast) * 1e3, "ratio_of_best": min(fast) / min(slow),
            "ratio_median": sorted(ratios)[len(ratios) // 2], "ratio_min": min(ratios), "ratio_max": max(ratios)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--d-ff", type=int, default=1408)
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 8, 64, 512, 2048])
    parser.add_argument("--threads", type=int, nargs="+", default=[1])
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/fused_swiglu"))
    args = parser.parse_args()
    before, rows = load_average(), []
    for threads in args.threads:
        torch.set_num_threads(threads)
        for tokens in args.tokens:
            rows.append(measure(args.d_model, args.d_ff, tokens, args.rounds))
            print(rows[-1], flush=True)
    result = {"command": command(), "date": now(), "machine": machine(), "load_before": before,
              "load_after": load_average(), "d_model": args.d_model, "d_ff": args.d_ff, "rounds": args.rounds,
              "rows": rows}
    out = args.out
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    lines = ["# SwiGLU: two input products (w1, w3) against one fused gate_up_proj", "",
             f"- command: `{result['command']}`", f"- date: {result['date']}",
             f"- machine: {result['machine']} (the thread count per row is in the table)",
             f"- load average (1, 5, 15 min): before {before}, after {result['load_after']}",
             f"- sizes: d_model {args.d_model}, d_ff {args.d_ff}, float32, forward only, no autograd",
             f"- each time: the fastest of `repeats` calls, in the fastest of {args.rounds} alternating rounds; "
             "the ratio's median and range are over the rounds (each round's fused time / its unfused time)", "",
             "| threads | tokens | unfused (ms) | fused (ms) | fused / unfused: best times | median | range |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['threads']} | {r['tokens']} | {r['unfused_ms']:.3f} | {r['fused_ms']:.3f} | "
              f"{r['ratio_of_best']:.2f} | {r['ratio_median']:.2f} | {r['ratio_min']:.2f}–{r['ratio_max']:.2f} |"
              for r in rows]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
