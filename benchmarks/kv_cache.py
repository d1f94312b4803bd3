"""Greedy generation with and without a KV cache: seconds and speed-up against the number of new tokens.

The course's reference decoder (``autograder.reference.decoders.LlamaDecoder``) generates ``n`` tokens
after a prompt, once recomputing the whole sequence at every step, once with a ``KVCache`` (prefill, then
one token per step); both must give the same tokens. Each timing is the best of ``--repeats`` runs.
Writes the numbers, the machine, torch's version and the command to ``--out`` (``.json`` and ``.md``).

Run from the repository root:

    .venv/bin/python benchmarks/kv_cache.py --out benchmarks/kv_cache
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from _common import command, load_average, machine, model, model_arguments, now

from autograder.reference.kv_cache import KVCache


@torch.no_grad()
def without_cache(decoder, prompt, n):
    tokens = prompt
    for _ in range(n):
        tokens = torch.cat([tokens, decoder(tokens)[:, -1:].argmax(-1)], dim=1)
    return tokens


@torch.no_grad()
def with_cache(decoder, prompt, n):
    cache, tokens, step = KVCache(len(decoder.blocks)), prompt, prompt
    for _ in range(n):
        step = decoder(step, cache=cache)[:, -1:].argmax(-1)
        tokens = torch.cat([tokens, step], dim=1)
    return tokens


def best_of(function, repeats, *args):
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function(*args)
        times.append(time.perf_counter() - start)
    return min(times), result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 32, 64, 128, 256, 512])
    parser.add_argument("--prompt", type=int, default=16)
    model_arguments(parser, out="benchmarks/kv_cache")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    decoder, config = model(args.d_model, args.layers, args.heads, args.kv_heads, 1000, args.prompt + max(args.lengths))
    prompt = torch.randint(0, 1000, (1, args.prompt), generator=torch.Generator().manual_seed(0))
    load_before, rows = load_average(), []
    for n in args.lengths:
        slow, a = best_of(without_cache, args.repeats, decoder, prompt, n)
        fast, b = best_of(with_cache, args.repeats, decoder, prompt, n)
        same = torch.equal(a, b)
        rows.append({"new_tokens": n, "seconds_without_cache": round(slow, 4), "seconds_with_cache": round(fast, 4),
                     "speedup": round(slow / fast, 2), "same_tokens": same})
        print(rows[-1], flush=True)
    result = {"command": command(), "date": now(), "machine": machine(), "torch": torch.__version__,
              "load_average_before": load_before, "load_average_after": load_average(),
              "model": {"d_model": config.d_model, "n_layers": config.n_layers, "n_heads": config.n_heads,
                        "n_kv_heads": config.n_kv_heads, "d_ff": config.d_ff, "vocab_size": config.vocab_size,
                        "parameters": sum(p.numel() for p in decoder.parameters())},
              "prompt_tokens": args.prompt, "repeats": args.repeats, "results": rows}
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    lines = ["# KV cache: greedy generation with and without the cache", "",
             f"- command: `{result['command']}`", f"- date: {result['date']}", f"- machine: {result['machine']}",
             f"- load average (1, 5, 15 min): before {load_before}, after {result['load_average_after']}",
             f"- model: the course's reference decoder, {result['model']}", f"- prompt: {args.prompt} tokens; best of "
             f"{args.repeats} runs; batch 1; float32", "",
             "| new tokens | without cache (s) | with cache (s) | speed-up | same tokens |", "|---:|---:|---:|---:|:---:|"]
    lines += [f"| {r['new_tokens']} | {r['seconds_without_cache']:.3f} | {r['seconds_with_cache']:.3f} | "
              f"{r['speedup']:.1f} | {r['same_tokens']} |" for r in rows]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
