"""What one GPT-2 block keeps for its backward pass, measured three ways (issue 55 §1, notebook 14's exercise 2).

Notebook 14's checks grade a student's formula against one measurement: the storages of the tensors autograd saves
(``coursetools.block_memory.measured_block_bytes``, through ``saved_tensors_hooks``). This benchmark shows that
measurement is what a device really holds:

- ``saved``: the bytes of the distinct storages autograd saves, parameters left out (what the checks use);
- ``cpu_alive``: the bytes the forward pass allocated on the CPU and left alive (``coursetools.memory.watch_memory``:
  a dispatch mode that follows every storage); the block's input was allocated before, its output after, and both
  have one shape, so this equals ``saved`` when nothing but the saved tensors outlives the forward pass;
- on a GPU, ``cuda_alive``: ``torch.cuda.memory_allocated()`` after the forward pass minus before (the same
  reasoning; the caching allocator rounds every block up to 512 bytes), and ``cuda_peak``:
  ``torch.cuda.max_memory_allocated()`` during the forward pass minus before (the temporaries included).

    .venv/bin/python benchmarks/activation_memory.py            # CPU rows (and GPU rows where CUDA is present)
    python3 benchmarks/activation_memory.py --out activation_memory_gpu.json   # on a lent GPU
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from _common import command, machine, now

from coursetools.block_memory import PreNormBlock, measured_block_bytes
from coursetools.memory import watch_memory

HERE = Path(__file__).resolve().parent
SHAPES = ((1, 64, 64, 4), (2, 128, 128, 4), (4, 256, 256, 8), (2, 1024, 768, 12), (8, 1024, 768, 12))


def cpu_alive(batch: int, seq: int, width: int, heads: int) -> int:
    torch.manual_seed(0)
    block = PreNormBlock(width, heads)
    x = torch.randn(batch, seq, width, requires_grad=True)
    with watch_memory() as seen:
        y = block(x)
    assert y.shape == x.shape
    return seen.alive_bytes - y.untyped_storage().nbytes() + x.untyped_storage().nbytes()


def cuda_alive_and_peak(batch: int, seq: int, width: int, heads: int) -> tuple[int, int]:
    torch.manual_seed(0)
    block = PreNormBlock(width, heads).cuda()
    x = torch.randn(batch, seq, width, device="cuda", requires_grad=True)
    block(x).sum().backward()  # a first pass: cuBLAS's workspace and the like are allocated once, here
    block.zero_grad(set_to_none=True)
    x.grad = None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    y = block(x)
    torch.cuda.synchronize()
    alive, peak = torch.cuda.memory_allocated() - before, torch.cuda.max_memory_allocated() - before
    del y
    return alive, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(HERE / "activation_memory.json"))
    args = parser.parse_args()
    rows = []
    for shape in SHAPES:
        row = {"shape": dict(zip(("batch", "seq", "width", "heads"), shape, strict=True)),
               "saved": measured_block_bytes(*shape), "cpu_alive": cpu_alive(*shape)}
        if torch.cuda.is_available():
            row["cuda_alive"], row["cuda_peak"] = cuda_alive_and_peak(*shape)
        rows.append(row)
        print(row, flush=True)
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "none"
    Path(args.out).write_text(json.dumps({"command": command(), "date": now(), "machine": machine(), "gpu": device,
                                          "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
