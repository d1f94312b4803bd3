"""FlashAttention-2's forward pass in Triton (``coursetools/flash_triton.py``) against PyTorch's attention.

On a CUDA GPU (the default), for each shape and dtype, the Triton kernel's output and log-sum-exp are compared
with a float32 reference: ``math_attention`` (SDPA's math path) and ``torch.logsumexp`` of the masked scores,
both computed in float32 from the same (rounded) inputs, a block of queries at a time so that no length runs
out of memory. PyTorch's own FlashAttention (SDPA's flash backend, same dtype) is measured against the same
reference, so the table shows whether the Triton kernel is as accurate as PyTorch's. Then three forwards are timed
(CUDA events, ``--warmup`` untimed calls, the median of ``--repeats``): SDPA's flash backend, the Triton kernel
and ``math_attention``, which builds the [T, T] scores (skipped where it would not fit in the GPU's free memory).

With ``--interpret``, a few small float32 shapes run on the CPU under ``TRITON_INTERPRET=1`` (Triton's
interpreter runs the kernel with NumPy; it is a check of the indexing, the masks and the online softmax, not of
speed, and not of bfloat16: it mis-computes bfloat16 matrix products) against a float64 reference.
With ``--compile-for 90 80 75``, no GPU either: the kernel is compiled to a binary for those NVIDIA architectures
(Triton's own ptxas; no driver), for each dtype and head width, with the shared memory each program asks for.
Writes the results to ``--out`` (JSON).

Run from the repository root (Triton is not one of the course's packages; a GPU machine's torch brings it):

    python3 benchmarks/flash_triton.py                                # a CUDA GPU -> benchmarks/flash_triton.json
    .venv/bin/pip install --target /tmp/tritonlib triton==3.7.1 --no-deps   # a CPU: Triton outside the venv
    PYTHONPATH=/tmp/tritonlib .venv/bin/python benchmarks/flash_triton.py --interpret
    PYTHONPATH=/tmp/tritonlib .venv/bin/python benchmarks/flash_triton.py --compile-for 90 80 75
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autograder.reference.attention import math_attention  # noqa: E402
from benchmarks._common import command, machine, now  # noqa: E402

# (T_q, T_k, d, causal, block_q, block_k): tiles that divide the lengths and tiles that do not, T_q < T_k, one
# query (a decoding step), a tile longer than the sequence, every head width the kernel takes
INTERPRET_SHAPES = [(64, 64, 16, False, 16, 16), (64, 64, 32, True, 16, 16), (50, 50, 32, True, 16, 16),
                    (37, 83, 64, False, 16, 32), (37, 83, 64, True, 32, 16), (100, 100, 128, True, 32, 32),
                    (1, 45, 32, True, 16, 16), (45, 45, 16, False, 64, 64), (130, 130, 64, True, 64, 64),
                    (70, 200, 16, True, 32, 64)]
# the same kinds of shapes on a GPU, with the kernel's default tiles (64 x 64)
GPU_ODD_SHAPES = [(1000, 1000, 64, True), (1000, 1500, 128, True), (777, 1300, 32, False), (1, 2048, 64, True),
                  (300, 300, 16, True), (4096, 4096, 128, False)]
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
# the output's largest error allowed against the reference (with --interpret, in float32: measured errors are
# about 5e-7); on a GPU a 16-bit output passes as well if it is within twice SDPA flash's own error
OUT_ATOL = {"float32": 1e-5, "float16": 1e-3, "bfloat16": 8e-3}
OUT_RTOL = 1e-5
LSE_ATOL = 1e-5  # lse is float32 whatever the inputs, summed from the same rounded inputs as the reference
LSE_ATOL_GPU = 1e-4  # exp and log on the GPU are approximate to a few units in the last place
# the most shared memory one program may have, in bytes (CUDA's "opt-in" maximum per block)
SHARED_MEMORY_PER_BLOCK = {90: 227 * 1024, 80: 163 * 1024, 75: 64 * 1024}


def causal_mask(rows: torch.Tensor, t_q: int, t_k: int) -> torch.Tensor:
    """True where query i (among `rows`) may see key j: j <= i + T_k - T_q (bottom-right, as the notebook)."""
    return torch.arange(t_k, device=rows.device)[None, :] <= rows[:, None] + (t_k - t_q)


def reference(q, k, v, causal, dtype, rows_per_block=512):
    """out and lse of exact attention in `dtype`, SDPA's math path, a block of queries at a time."""
    q, k, v = (x.to(dtype) for x in (q, k, v))
    t_q, t_k, d = q.shape[-2], k.shape[-2], q.shape[-1]
    outs, lses = [], []
    for start in range(0, t_q, rows_per_block):
        rows = torch.arange(start, min(start + rows_per_block, t_q), device=q.device)
        mask = causal_mask(rows, t_q, t_k) if causal else None
        outs.append(math_attention(q[..., rows, :], k, v, mask))
        scores = q[..., rows, :] @ k.transpose(-2, -1) / d**0.5
        lses.append((scores if mask is None else scores.masked_fill(~mask, float("-inf"))).logsumexp(-1))
    return torch.cat(outs, dim=-2), torch.cat(lses, dim=-1)


def max_error(a, b) -> float:
    return (a.double() - b.double()).abs().max().item()


def within(a, b, atol, rtol=0.0) -> bool:
    return bool(((a.double() - b.double()).abs() <= atol + rtol * b.double().abs()).all())


def interpret(args) -> dict:
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported: @triton.jit reads it when it decorates
    import triton

    from coursetools.flash_triton import flash_attention_triton

    rows = []
    for t_q, t_k, d, causal, block_q, block_k in INTERPRET_SHAPES:
        g = torch.Generator().manual_seed(t_q * 1000 + t_k + d)
        q = torch.randn(2, 2, t_q, d, generator=g)
        k, v = torch.randn(2, 2, t_k, d, generator=g), torch.randn(2, 2, t_k, d, generator=g)
        out, lse = flash_attention_triton(q, k, v, causal, block_q, block_k)
        ref_out, ref_lse = reference(q, k, v, causal, torch.float64)
        rows.append({"shape": [2, 2, t_q, t_k, d], "causal": causal, "block_q": block_q, "block_k": block_k,
                     "dtype": "float32", "out_max_abs_error": max_error(out, ref_out),
                     "lse_max_abs_error": max_error(lse, ref_lse),
                     "ok": within(out, ref_out, OUT_ATOL["float32"], OUT_RTOL) and within(lse, ref_lse, LSE_ATOL, 1e-5)})
        print(rows[-1], flush=True)
    return {"mode": "interpret (TRITON_INTERPRET=1, CPU)", "triton": triton.__version__, "accuracy": rows,
            "tolerances": {"out": f"atol {OUT_ATOL['float32']}, rtol {OUT_RTOL}", "lse": f"atol {LSE_ATOL}, rtol 1e-5"},
            "reference": "float64: SDPA's math path and logsumexp of the masked scores"}


def compile_only(args) -> dict:
    """Compiles the kernel to a GPU binary for each NVIDIA architecture in --compile-for (90: H100/H200, 80: A100,
    75: T4) without a GPU: Triton's own ptxas, no driver. Shows that it lowers, and how much shared memory a
    program asks for (a launch fails where that exceeds the GPU's: SHARED_MEMORY_PER_BLOCK)."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise SystemExit("--compile-for compiles for a GPU: unset TRITON_INTERPRET")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from coursetools.flash_triton import _flash_forward_kernel

    rows = []
    for arch in args.compile_for:
        for name, short in (("float16", "fp16"), ("bfloat16", "bf16"), ("float32", "fp32")):
            if name == "bfloat16" and arch < 80:  # no bfloat16 tensor cores before Ampere
                continue
            for d, causal in ((d, c) for d in (16, 32, 64, 128) for c in (False, True)):
                signature = {"q_ptr": f"*{short}", "k_ptr": f"*{short}", "v_ptr": f"*{short}", "o_ptr": f"*{short}",
                             "lse_ptr": "*fp32", "t_q": "i32", "t_k": "i32", "scale": "fp32",
                             **dict.fromkeys(["D", "BLOCK_Q", "BLOCK_K", "CAUSAL", "PRECISION"], "constexpr")}
                constants = {"D": d, "BLOCK_Q": args.block_q, "BLOCK_K": args.block_k, "CAUSAL": causal,
                             "PRECISION": "ieee" if name == "float32" else "tf32"}
                try:
                    compiled = triton.compile(ASTSource(_flash_forward_kernel, signature, constants),
                                              target=GPUTarget("cuda", arch, 32))
                    shared = compiled.metadata.shared
                    row = {"sm": arch, "dtype": name, "d": d, "causal": causal, "ok": True, "shared_bytes": shared,
                           "fits": shared <= SHARED_MEMORY_PER_BLOCK.get(arch, shared)}
                except Exception as error:  # whatever the compiler raises is the result
                    row = {"sm": arch, "dtype": name, "d": d, "causal": causal, "ok": False, "error": f"{error}"[:300]}
                rows.append(row)
                print(row, flush=True)
    return {"mode": f"compile only, no GPU (sm {args.compile_for}), tiles {args.block_q} x {args.block_k}",
            "triton": triton.__version__, "accuracy": rows}


def milliseconds(function, warmup: int, repeats: int) -> float:
    for _ in range(warmup):  # the first Triton call compiles the kernel
        function()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        function()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def accuracy_row(q, k, v, causal, dtype_name, flash_attention_triton) -> dict:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    (b, h, t_q, d), t_k = q.shape, k.shape[-2]
    out, lse = flash_attention_triton(q, k, v, causal)
    ref_out, ref_lse = reference(q, k, v, causal, torch.float32)
    row = {"shape": [b, h, t_q, t_k, d], "causal": causal, "dtype": dtype_name,
           "out_max_abs_error": max_error(out, ref_out), "lse_max_abs_error": max_error(lse, ref_lse)}
    sdpa_error = None
    if dtype_name != "float32" and t_q == t_k:  # SDPA's flash backend: 16-bit, and is_causal aligns top-left
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            sdpa = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        sdpa_error = max_error(sdpa, ref_out)
        row["sdpa_flash_out_max_abs_error"] = sdpa_error
        row["triton_vs_sdpa_flash_max_abs_difference"] = max_error(out, sdpa)
    atol = max(OUT_ATOL[dtype_name], 2 * (sdpa_error or 0.0))
    row["ok"] = within(out, ref_out, atol, OUT_RTOL) and within(lse, ref_lse, LSE_ATOL_GPU, 1e-5)
    return row


def gpu(args) -> dict:
    import triton
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from coursetools.flash_triton import flash_attention_triton

    device, accuracy, timings = torch.device("cuda"), [], []
    g = torch.Generator(device=device).manual_seed(0)
    for name in args.dtypes:
        for t_q, t_k, d, causal in GPU_ODD_SHAPES:
            q = torch.randn(2, 3, t_q, d, device=device, generator=g, dtype=DTYPES[name])
            k, v = (torch.randn(2, 3, t_k, d, device=device, generator=g, dtype=DTYPES[name]) for _ in range(2))
            accuracy.append(accuracy_row(q, k, v, causal, name, flash_attention_triton))
            print(accuracy[-1], flush=True)
    for name in [n for n in args.dtypes if n != "float32"]:  # SDPA's flash backend takes 16-bit inputs only
        for t in args.lengths:
            for causal in (False, True):
                q, k, v = (torch.randn(args.batch, args.heads, t, args.head_dim, device=device, generator=g,
                                       dtype=DTYPES[name]) for _ in range(3))
                accuracy.append(accuracy_row(q, k, v, causal, name, flash_attention_triton))
                print(accuracy[-1], flush=True)
                flops = 4 * args.batch * args.heads * t * t * args.head_dim / (2 if causal else 1)
                row = {"shape": [args.batch, args.heads, t, t, args.head_dim], "causal": causal, "dtype": name}

                def sdpa_flash(q=q, k=k, v=v, causal=causal):
                    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                mask = torch.ones(t, t, dtype=torch.bool, device=device).tril() if causal else None
                candidates = {"sdpa_flash": sdpa_flash,
                              "triton": lambda q=q, k=k, v=v, causal=causal: flash_attention_triton(
                                  q, k, v, causal, args.block_q, args.block_k),
                              "math_attention": lambda q=q, k=k, v=v, mask=mask: math_attention(q, k, v, mask)}
                for label, function in candidates.items():
                    # the math path keeps about three [B, H, T, T] tensors (scores, probabilities, a copy)
                    need = 3 * args.batch * args.heads * t * t * q.element_size()
                    if label == "math_attention" and need > 0.8 * torch.cuda.mem_get_info()[0]:
                        row[f"{label}_ms"], row[f"{label}_note"] = None, f"skipped: needs about {need / 2**30:.0f} GiB"
                        continue
                    try:
                        ms = milliseconds(function, args.warmup, args.repeats)
                        row[f"{label}_ms"], row[f"{label}_tflops"] = round(ms, 4), round(flops / ms / 1e9, 1)
                    except (RuntimeError, torch.cuda.OutOfMemoryError) as error:
                        row[f"{label}_ms"], row[f"{label}_note"] = None, f"{type(error).__name__}: {error}"[:200]
                    torch.cuda.empty_cache()
                timings.append(row)
                print(row, flush=True)
    return {"mode": "gpu", "gpu": torch.cuda.get_device_name(device), "triton": triton.__version__,
            "blocks": [args.block_q, args.block_k], "warmup": args.warmup, "repeats": args.repeats,
            "tolerances": {"out": f"max(atol {OUT_ATOL}, 2 x SDPA flash's error), rtol {OUT_RTOL}",
                           "lse": f"atol {LSE_ATOL_GPU}, rtol 1e-5"},
            "reference": "float32 from the same inputs: SDPA's math path and logsumexp of the masked scores",
            "accuracy": accuracy, "timings_ms_median": timings}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interpret", action="store_true", help="small float32 shapes on the CPU, Triton's interpreter")
    parser.add_argument("--compile-for", type=int, nargs="+", metavar="SM",
                        help="only compile the kernel for these NVIDIA architectures (90 80 75), no GPU needed")
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048, 4096, 8192])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--dtypes", nargs="+", choices=list(DTYPES), default=["float16", "bfloat16", "float32"])
    parser.add_argument("--block-q", type=int, default=64)
    parser.add_argument("--block-k", type=int, default=64)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", help="JSON (default benchmarks/flash_triton.json, or flash_triton_interpret.json)")
    args = parser.parse_args(argv)
    if not (args.interpret or args.compile_for or torch.cuda.is_available()):
        print("no CUDA GPU here: run with --interpret on a CPU (see the docstring)", file=sys.stderr)
        return 2
    started = now()
    result = interpret(args) if args.interpret else compile_only(args) if args.compile_for else gpu(args)
    result = {"command": command(), "date": started, "machine": machine(), "torch": torch.__version__, **result}
    suffix = "_interpret" if args.interpret else "_compiled" if args.compile_for else ""
    out = Path(args.out or f"benchmarks/flash_triton{suffix}.json")
    out.write_text(json.dumps(result, indent=1) + "\n")
    failed = [row for row in result["accuracy"] if not row["ok"]]
    print(f"{len(result['accuracy']) - len(failed)} of {len(result['accuracy'])} passed; "
          f"written to {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
