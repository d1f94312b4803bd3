"""Continuous against static batching: new tokens per second on requests of mixed lengths.

The course's reference decoder serves ``--requests`` requests (prompts of 4-32 tokens, each with its own
budget of 8-``--max-new`` new tokens, a stand-in for sequences that end at EOS) through the ``SlotEngine``
(per-slot KV caches and positions), once with the static schedule (the next batch starts when the whole
batch is done; finished sequences are computed along, as in a padded batch) and once with the continuous
one (a slot is refilled as soon as its request ends). Both give every request the same tokens. Best of
``--repeats`` runs per schedule and number of slots. Writes ``--out`` ``.json`` and ``.md``.

Run from the repository root:

    .venv/bin/python benchmarks/continuous_batching.py --out benchmarks/continuous_batching
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from _common import command, load_average, machine, model, model_arguments, now

from autograder.reference.batching import SlotEngine, static
from coursetools.notebook_import import load_from_notebook

# Notebook 11's scheduler as the solutions write it (the package carries no answer, and no library drives these engines).
continuous = load_from_notebook("11_decoding", "continuous_batching", folder=Path(__file__).resolve().parents[1] / "solutions")


class Budgets:
    """An engine whose request ``r`` ends after ``budgets[r]`` tokens (the token -1 stands for its EOS)."""

    def __init__(self, engine, prompts, budgets):
        self.engine, self.n_slots, self.prompts, self.budgets = engine, engine.n_slots, prompts, budgets
        self.owner, self.count = {}, {}

    def start(self, slot, prompt):
        self.owner[slot] = next(r for r, p in enumerate(self.prompts) if p is prompt)
        self.count[slot] = 1
        return self._mark(slot, self.engine.start(slot, prompt))

    def step(self, slots):
        for s in slots:
            self.count[s] += 1
        return [self._mark(s, t) for s, t in zip(slots, self.engine.step(slots), strict=True)]

    def _mark(self, slot, token):
        return -1 if self.count[slot] >= self.budgets[self.owner[slot]] else token

    def finish(self, slot):
        self.engine.finish(slot)


def run(schedule, decoder, prompts, budgets, n_slots, max_len):
    engine = Budgets(SlotEngine(decoder, n_slots, max_len), prompts, budgets)
    start = time.perf_counter()
    outputs = schedule(engine, prompts, max_new_tokens=max(budgets), eos_id=-1)
    seconds = time.perf_counter() - start
    steps = sum(kind == "step" for kind, _ in engine.engine.events)
    return seconds, steps, outputs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, nargs="+", default=[2, 4, 8, 16])
    parser.add_argument("--requests", type=int, default=48)
    parser.add_argument("--max-new", type=int, default=96)
    model_arguments(parser, out="benchmarks/continuous_batching")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 1000, (int(torch.randint(4, 33, (), generator=g)),), generator=g)
               for _ in range(args.requests)]
    budgets = [int(torch.randint(8, args.max_new + 1, (), generator=g)) for _ in range(args.requests)]
    max_len = 32 + args.max_new + 1
    decoder, config = model(args.d_model, args.layers, args.heads, args.kv_heads, 1000, max_len)
    load_before, rows = load_average(), []
    for n_slots in args.slots:
        row = {"n_slots": n_slots}
        outputs = {}
        for name, schedule in (("static", static), ("continuous", continuous)):
            best = None
            for _ in range(args.repeats):
                seconds, steps, out = run(schedule, decoder, prompts, budgets, n_slots, max_len)
                best = seconds if best is None else min(best, seconds)
            outputs[name] = out
            row[f"{name}_seconds"] = round(best, 3)
            row[f"{name}_steps"] = steps
            row[f"{name}_tokens_per_s"] = round(sum(budgets) / best, 1)
        row["same_outputs"] = outputs["static"] == outputs["continuous"]
        row["speedup"] = round(row["static_seconds"] / row["continuous_seconds"], 2)
        rows.append(row)
        print(row, flush=True)
    result = {"command": command(), "date": now(), "machine": machine(), "torch": torch.__version__,
              "load_average_before": load_before, "load_average_after": load_average(),
              "model": {"d_model": config.d_model, "n_layers": config.n_layers, "n_heads": config.n_heads,
                        "n_kv_heads": config.n_kv_heads, "d_ff": config.d_ff, "vocab_size": config.vocab_size},
              "requests": args.requests, "new_tokens": sum(budgets), "budget_range": [8, args.max_new],
              "repeats": args.repeats, "results": rows}
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    lines = ["# Continuous against static batching", "", f"- command: `{result['command']}`",
             f"- date: {result['date']}", f"- machine: {result['machine']}",
             f"- load average (1, 5, 15 min): before {load_before}, after {result['load_average_after']}",
             f"- model: the course's reference decoder, {result['model']}, `SlotEngine` (per-slot KV caches)",
             f"- {args.requests} requests, prompts of 4-32 tokens, 8-{args.max_new} new tokens each "
             f"({sum(budgets)} in all); best of {args.repeats} runs", "",
             "| slots | static tokens/s | static steps | continuous tokens/s | continuous steps | speed-up | same outputs |",
             "|---:|---:|---:|---:|---:|---:|:---:|"]
    lines += [f"| {r['n_slots']} | {r['static_tokens_per_s']:.0f} | {r['static_steps']} | "
              f"{r['continuous_tokens_per_s']:.0f} | {r['continuous_steps']} | {r['speedup']:.2f} | {r['same_outputs']} |"
              for r in rows]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
