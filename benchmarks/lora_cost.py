"""LoRA against full fine-tuning: trainable parameters, the bytes of gradients and AdamW state, and step time.

Notebook 15 (section 3) measures one model; this records the same comparison over model widths and LoRA ranks.
The model is the course's reference decoder (``autograder.reference.decoders.LlamaDecoder``, the fallback of the
student's notebook-08 ``ModernDecoder``) with random weights. LoRA is the ``peft`` library's
(``get_peft_model`` with ``LoraConfig``) around every projection of the attention and the feed-forward network,
as in the notebook. A step is one forward and backward pass of ``--batch`` sequences of ``--length`` tokens and
one ``torch.optim.AdamW`` step; its time is the median of ``--repeats`` steps after one untimed step (which
creates AdamW's state). The bytes are counted from the tensors themselves: the gradients that exist after
backward and the optimizer's state tensors. Writes ``--out`` (``.json`` and ``.md``).

Run from the repository root:

    .venv/bin/python benchmarks/lora_cost.py --out benchmarks/lora_cost
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from _common import command, load_average, machine, model, now
from peft import LoraConfig, get_peft_model

TARGETS = ["q_proj", "k_proj", "v_proj", "out_proj", "w1", "w2", "w3"]
MIB = 2**20


def tensor_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if torch.is_tensor(t) and t.dim() > 0)


def step_cost(decoder, batch, repeats):
    """(gradient bytes, AdamW state bytes, median seconds of a step) for the parameters that require grad."""
    trainable = [p for p in decoder.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-4)
    decoder.train()
    times, gradients = [], 0
    for _ in range(repeats + 1):
        start = time.perf_counter()
        loss = F.cross_entropy(decoder(batch[:, :-1]).flatten(0, 1), batch[:, 1:].flatten())
        loss.backward()
        gradients = tensor_bytes(p.grad for p in decoder.parameters())
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    state = tensor_bytes(t for s in optimizer.state.values() for t in s.values())
    return gradients, state, statistics.median(times[1:])


def measure(d_model, layers, heads, vocab, ranks, batch_size, length, repeats):
    rows = []
    for rank in [None, *ranks]:  # None: full fine-tuning
        decoder, config = model(d_model, layers, heads, heads, vocab, length)
        total = sum(p.numel() for p in decoder.parameters())
        if rank is not None:
            decoder = get_peft_model(decoder, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=TARGETS))
        trainable = sum(p.numel() for p in decoder.parameters() if p.requires_grad)
        batch = torch.randint(0, vocab, (batch_size, length + 1), generator=torch.Generator().manual_seed(1))
        gradients, state, seconds = step_cost(decoder, batch, repeats)
        rows.append(
            {
                "d_model": d_model,
                "n_layers": layers,
                "d_ff": config.d_ff,
                "parameters": total,
                "method": "full" if rank is None else f"LoRA r={rank}",
                "trainable": trainable,
                "gradient_bytes": gradients,
                "adamw_state_bytes": state,
                "step_seconds": round(seconds, 4),
            }
        )
        print(rows[-1], flush=True)
    return rows


def markdown(result) -> str:
    lines = [
        "# LoRA against full fine-tuning: memory of the training state and time of a step",
        "",
        f"- command: `{result['command']}`",
        f"- date: {result['date']}",
        f"- machine: {result['machine']}",
        f"- load average (1, 5, 15 min): before {result['load_average_before']}, after {result['load_average_after']}",
        f"- model: the course's reference decoder, random weights, vocabulary {result['vocab_size']}, "
        f"{result['n_heads']} heads; LoRA: peft around {', '.join(TARGETS)} (alpha = 2r)",
        f"- a step: {result['batch']} x {result['length']} tokens, forward, backward and AdamW; the median of "
        f"{result['repeats']} steps after an untimed one; float32",
        "",
        "| d_model | layers | parameters | method | trainable | share | gradients (MiB) | AdamW state (MiB) | "
        "step (ms) | step / full |",
        "|---:|---:|---:|:---|---:|---:|---:|---:|---:|---:|",
    ]
    full = {r["d_model"]: r for r in result["results"] if r["method"] == "full"}  # each width's full fine-tuning
    for r in result["results"]:
        lines.append(
            f"| {r['d_model']} | {r['n_layers']} | {r['parameters']:,} | {r['method']} | "
            f"{r['trainable']:,} | {r['trainable'] / r['parameters']:.1%} | "
            f"{r['gradient_bytes'] / MIB:.2f} | {r['adamw_state_bytes'] / MIB:.2f} | "
            f"{1000 * r['step_seconds']:.0f} | {r['step_seconds'] / full[r['d_model']]['step_seconds']:.2f} |"
        )
    lora = [r for r in result["results"] if r["method"] != "full"]
    memory = [r["adamw_state_bytes"] / full[r["d_model"]]["adamw_state_bytes"] for r in lora]
    speed = [r["step_seconds"] / full[r["d_model"]]["step_seconds"] for r in lora]
    lines += [
        "",
        f"Over these rows, LoRA's AdamW state is {min(memory):.1%} to {max(memory):.1%} of full fine-tuning's, "
        f"and its step takes {min(speed):.2f} to {max(speed):.2f} times as long. Its gradients are those of A and "
        "B only (the frozen weights get none), and its trainable count is r (in + out) summed over the wrapped "
        "layers; the forward and backward passes still run through every frozen weight.",
    ]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", type=int, nargs="+", default=[128, 256, 512])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=2051, help="notebook 15's: 2,048 BPE tokens and 3 special ones")
    parser.add_argument("--ranks", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: steadier on a shared machine)")
    parser.add_argument("--out", default="benchmarks/lora_cost")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    load_before, rows = load_average(), []
    for width in args.widths:
        rows += measure(width, args.layers, args.heads, args.vocab, args.ranks, args.batch, args.length, args.repeats)
    result = {
        "command": command(),
        "date": now(),
        "machine": machine(),
        "torch": torch.__version__,
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "vocab_size": args.vocab,
        "n_heads": args.heads,
        "batch": args.batch,
        "length": args.length,
        "repeats": args.repeats,
        "targets": TARGETS,
        "results": rows,
    }
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(result))


if __name__ == "__main__":
    main()
