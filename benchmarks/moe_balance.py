"""Expert load over a long training run of notebook 16's mixture, with and without the load-balancing loss.

Notebook 16 trains its mixture for a few seconds, too short to say what the routing does later. This runs the same
mixture (the course's reference decoder, 4 blocks of width 128, each feed-forward network replaced by the
solution's ``MoELayer``: 8 SwiGLU experts of width 96, two per token) with the notebook's optimiser and schedule
(AdamW, linear warm-up over 10 steps, cosine decay to 10% of the peak) on the notebook's TinyStories stream, once
per ``--runs`` entry, from the same seeds and batches. An entry is ``COEFFICIENT:POOLING``: the loss's coefficient,
and how the layers' router logits meet the loss: ``pooled``, concatenated into one loss (as Hugging Face's
``load_balancing_loss_func`` takes them, and the notebook's run), or ``per-layer``, the mean of each layer's own
loss. At every step it records each layer's expert shares
of the top-k choices; the JSON keeps, per window of ``--every`` steps: the busiest expert's share, the least used
one's, the number of starved experts (share below a quarter of the balanced 1/8, over the 4 layers' 32 experts)
and the effective number of experts, exp(entropy of the shares) (8 when balanced, 1 when one expert takes all;
each a mean over the window, and over the layers where it is a share). Writes ``--out`` ``.json`` and ``.md``.

``--router switch`` trains another router instead of the notebook's: top-1, each token's output scaled by its
chosen expert's softmax probability as it is (the Switch Transformer's gate, not renormalized; renormalized, a
single weight is always 1 and the router would get no gradient from the language-model loss), with experts of
width 192 so that the active parameters per token are the notebook's two of width 96.

Run from the repository root:

    .venv/bin/python benchmarks/moe_balance.py --out benchmarks/moe_balance
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import tempfile
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import command, load_average, machine, now
from tokenizers import Tokenizer

from autograder.reference.configs import DecoderConfig
from autograder.reference.decoders import LlamaDecoder
from coursetools.notebook_import import load_from_notebook
from tinystories.config import load_config
from tinystories.prepare import prepare

ROOT = Path(__file__).resolve().parents[1]
# Notebook 16's parts as the solutions write them (the package carries no answer).
MoELayer, load_balancing_loss = load_from_notebook(
    "16_serving_scaling", "MoELayer", "load_balancing_loss", folder=ROOT / "solutions"
)
N_EXPERTS, TOP_K, EXPERT_WIDTH = 8, 2, 96


class SwitchMoE(MoELayer):
    """The notebook's layer with the Switch Transformer's router: each token goes to its top-1 expert, and that
    expert's output is scaled by the token's softmax probability of it (not renormalized to 1)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.reshape(-1, x.shape[-1])
        self.router_logits = self.router(tokens)
        gate, chosen = torch.softmax(self.router_logits.float(), dim=-1).max(dim=-1)  # [N] each
        out = torch.zeros_like(tokens)
        for index, expert in enumerate(self.experts):
            rows = torch.nonzero(chosen == index).flatten()
            if len(rows):
                out = out.index_add(0, rows, gate[rows, None].to(tokens.dtype) * expert(tokens[rows]))
        return out.reshape(x.shape)


# Each router with its layer, its top-k and its experts' width: the same active parameters per token.
ROUTERS = {"notebook": (MoELayer, TOP_K, EXPERT_WIDTH), "switch": (SwitchMoE, 1, TOP_K * EXPERT_WIDTH)}
STARVED = 1 / (4 * N_EXPERTS)  # a quarter of the balanced share


def streams():
    """The notebook's token streams: its tokenizer (``tinystories prepare`` with the cpu_demo config) on the shipped
    sample, the last tenth of the stories held out."""
    work = Path(tempfile.mkdtemp(prefix="moe-balance-"))
    data = prepare(load_config("cpu_demo", [f"data.dir={work / 'prepared'}"]).data, progress=False)
    tokenizer = Tokenizer.from_file(str(data.tokenizer))
    eot = tokenizer.token_to_id("<|endoftext|>")
    text = (ROOT / "data" / "tinystories" / "tinystories_v2_sample.txt").read_text(encoding="utf-8")
    stories = [s.strip() for s in text.split("<|endoftext|>") if s.strip()]
    held_out = len(stories) // 10

    def stream(part):
        return torch.tensor([t for e in tokenizer.encode_batch(part) for t in e.ids + [eot]])

    return tokenizer.get_vocab_size(), stream(stories[:-held_out]), stream(stories[-held_out:])


def mixture(vocab: int, router: str) -> nn.Module:
    layer, top_k, width = ROUTERS[router]
    config = DecoderConfig(vocab_size=vocab, d_model=128, n_layers=4, n_heads=4, n_kv_heads=2,
                           d_ff=TOP_K * EXPERT_WIDTH, max_seq_len=256)
    torch.manual_seed(0)
    model = LlamaDecoder(config)
    torch.manual_seed(1)
    for block in model.blocks:
        block.ffn = layer(config.d_model, width, N_EXPERTS, top_k)
    return model


def shares_of(model) -> torch.Tensor:
    """[layers, experts]: each expert's share of the last forward pass's top-k choices, per layer."""
    return torch.stack([
        torch.bincount(block.ffn.router_logits.topk(block.ffn.top_k, dim=-1).indices.flatten(), minlength=N_EXPERTS)
        / (block.ffn.top_k * len(block.ffn.router_logits))
        for block in model.blocks
    ])


def balance_loss(model, pooling: str) -> torch.Tensor:
    logits = [block.ffn.router_logits for block in model.blocks]
    top_k = model.blocks[0].ffn.top_k
    if pooling == "pooled":  # expert i of every layer counted as one expert
        return load_balancing_loss(torch.cat(logits), top_k)
    return torch.stack([load_balancing_loss(layer, top_k) for layer in logits]).mean()


def train(model, stream, steps, coefficient, pooling, peak_lr, batch=8, length=64, warmup=10, seed=1):
    """The notebook's ``train`` with its load-balancing term; returns the shares at every step [steps, layers, E]."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=peak_lr, betas=(0.9, 0.95), weight_decay=0.0)
    windows = torch.Generator().manual_seed(seed)
    shares = []
    model.train()
    for step in range(steps):
        progress = max(step - warmup, 0) / max(steps - warmup, 1)
        for group in optimizer.param_groups:
            group["lr"] = peak_lr * min((step + 1) / warmup, 0.1 + 0.45 * (1 + math.cos(math.pi * progress)))
        starts = torch.randint(0, len(stream) - length - 1, (batch,), generator=windows).tolist()
        chunk = torch.stack([stream[s:s + length + 1] for s in starts])
        loss = F.cross_entropy(model(chunk[:, :-1]).flatten(0, 1), chunk[:, 1:].flatten())
        if coefficient:
            loss = loss + coefficient * balance_loss(model, pooling)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        with torch.no_grad():
            shares.append(shares_of(model))
    model.eval()
    return torch.stack(shares)


@torch.no_grad()
def perplexity(model, stream, length=128, windows=16):
    chunk = stream[: windows * (length + 1)].view(windows, length + 1)
    return math.exp(F.cross_entropy(model(chunk[:, :-1]).flatten(0, 1), chunk[:, 1:].flatten()))


def summary(shares: torch.Tensor) -> dict:
    """The measures of a window of steps' shares [steps, layers, E] (see the module's docstring)."""
    entropy = -(shares.clamp_min(1e-12) * shares.clamp_min(1e-12).log()).sum(-1)  # [steps, layers]
    return {
        "busiest": round(float(shares.max(-1).values.mean()), 4),
        "least": round(float(shares.min(-1).values.mean()), 4),
        "starved": round(float((shares < STARVED).sum((-1, -2)).float().mean()), 2),
        "effective_experts": round(float(entropy.exp().mean()), 3),
    }


def run_entry(entry: str) -> tuple[float, str]:
    """``COEFFICIENT:POOLING`` -> (coefficient, pooling), for argparse (a bad entry is its usage error)."""
    coefficient, _, pooling = entry.partition(":")
    if pooling not in ("pooled", "per-layer"):
        raise argparse.ArgumentTypeError(f"{entry!r}: expected COEFFICIENT:pooled or COEFFICIENT:per-layer")
    return float(coefficient), pooling


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--every", type=int, default=50)
    default_runs = ["0:pooled", "0.01:pooled", "0.1:pooled", "0.01:per-layer", "0.1:per-layer"]
    # argparse passes a list default through as it is: the entries are parsed here like the command line's
    parser.add_argument("--runs", nargs="+", type=run_entry, default=[run_entry(e) for e in default_runs])
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--router", choices=sorted(ROUTERS), default="notebook")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="benchmarks/moe_balance")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    before = load_average()
    vocab, train_stream, val_stream = streams()
    start = mixture(vocab, args.router)
    _, top_k, width = ROUTERS[args.router]
    runs = []
    for coefficient, pooling in args.runs:
        model = copy.deepcopy(start)
        began = time.perf_counter()
        shares = train(model, train_stream, args.steps, coefficient, pooling, args.lr)
        seconds = time.perf_counter() - began
        windows = [
            {"steps": [i, min(i + args.every, args.steps)], **summary(shares[i:i + args.every])}
            for i in range(0, args.steps, args.every)
        ]
        runs.append({"coefficient": coefficient, "pooling": pooling if coefficient else "none", "seconds": round(seconds, 1),
                     "perplexity": round(perplexity(model, val_stream), 2), "windows": windows,
                     "first_step": summary(shares[:1]), "last_window": windows[-1]})
        print(f"{coefficient}:{pooling}: {seconds:.0f} s, last window {windows[-1]}", flush=True)
    result = {"command": command(), "date": now(), "machine": machine(),
              "load_average": {"before": before, "after": load_average()},
              "setup": {"router": args.router, "experts": N_EXPERTS, "top_k": top_k, "expert_width": width, "d_model": 128,
                        "layers": 4, "steps": args.steps, "peak_lr": args.lr, "batch": [8, 64],
                        "starved_below": STARVED},
              "runs": runs}
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    lines = [
        "# Expert load over a long run of notebook 16's mixture, with and without the load-balancing loss", "",
        f"- command: `{result['command']}`", f"- date: {result['date']}", f"- machine: {result['machine']}",
        f"- load average (1, 5, 15 min): before {before}, after {result['load_average']['after']}",
        f"- setup: {result['setup']}", "",
        "Per run: the first step, then the mean of the last window of steps. Balanced: every share 0.125, "
        "8 effective experts, none starved (below a quarter of 0.125, of the 32 experts of the 4 layers).", "",
        "| coefficient | layers | busiest share (step 0 → end) | least used (end) | starved (end) | effective experts "
        "(step 0 → end) | held-out perplexity | seconds |",
        "|---:|:---|---:|---:|---:|---:|---:|---:|",
    ]
    for run in runs:
        first, last = run["first_step"], run["last_window"]
        lines.append(f"| {run['coefficient']} | {run['pooling']} | {first['busiest']:.3f} → {last['busiest']:.3f} | {last['least']:.3f} "
                     f"| {last['starved']:.1f} | {first['effective_experts']:.2f} → {last['effective_experts']:.2f} "
                     f"| {run['perplexity']:.1f} | {run['seconds']:.0f} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
