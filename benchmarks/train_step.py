"""One training step of the course's ModernDecoder against Hugging Face's LlamaForCausalLM (sdpa), same shapes.

    .venv/bin/python benchmarks/train_step.py                       # CPU, float32, eager and torch.compile
    .venv/bin/python benchmarks/train_step.py --device cuda --dtype bf16 --modes eager compile \\
        --output benchmarks/train_step_gpu                          # a GPU: the configs' own micro-batches

A step is what ``tinystories.train`` does per micro-batch: forward, ``F.cross_entropy`` over every position,
backward, ``torch.optim.AdamW`` (fused on a GPU), ``zero_grad``. The course's model is the one a student who
finished notebook 08 trains (``tinystories.model.build_model`` with the solutions' ``ModernDecoder``);
Hugging Face's is a ``LlamaForCausalLM`` with the same width, depth, heads, SwiGLU width, vocabulary and
untied head, ``attn_implementation="sdpa"``, no KV cache; both parameter counts are printed and must be
equal. For each config's shapes both models step in one process, alternating (the order swapped every
round) so that a busy moment of the machine does not favour one; each step is timed on its own
(``torch.cuda.synchronize`` around it on a GPU) after untimed warm-up steps, and the table gives the median
tokens/s. ``--dtype bf16`` runs the forward and the loss under ``torch.autocast`` (weights and optimizer in
float32, as in the training program).

Writes OUTPUT.json and re-renders OUTPUT's folder's ``train_step.md`` from every ``train_step*.json`` there,
so the CPU and the GPU numbers sit side by side (``--render`` only re-renders).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from benchmarks._common import command, load_average, machine, now  # noqa: E402
from tinystories.config import load_config  # noqa: E402
from tinystories.model import build_model, count_parameters  # noqa: E402
from tinystories.stack import student_stack  # noqa: E402


def course_model(m, vocab_size: int):
    """The solutions' ModernDecoder of the run's shapes: what ``--stack yours`` trains once notebook 08 is done."""
    return build_model(m, vocab_size, stack=student_stack(ROOT / "solutions", check=False, keys=["model"]))

CPU_BATCH = {"cpu_demo": 32, "gpu_h100": 4}  # sequences per step on a CPU (gpu_h100's own 128 would take minutes)


def hf_llama(m, vocab_size: int):
    """A LlamaForCausalLM of the run's shapes, with PyTorch's scaled_dot_product_attention and no KV cache."""
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=vocab_size, hidden_size=m.d_model, intermediate_size=m.d_ff, num_hidden_layers=m.n_layers,
        num_attention_heads=m.n_heads, num_key_value_heads=m.n_kv_heads or m.n_heads,
        max_position_embeddings=m.context_length, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": m.rope_theta}, tie_word_embeddings=False,
        attention_bias=False, mlp_bias=False, use_cache=False, bos_token_id=0, eos_token_id=0)
    config._attn_implementation = "sdpa"  # as autograder.reference.hf_llama sets it (transformers 5)
    model = transformers.LlamaForCausalLM(config)
    implementation = getattr(model.config, "_attn_implementation", None)
    if implementation != "sdpa":
        raise SystemExit(f"LlamaForCausalLM was built with attention {implementation!r}, not 'sdpa'")
    return model


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_step(model, device: torch.device, dtype, hf: bool):
    """A function running one training step on (inputs, targets) and returning the loss (a tensor)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1,
                                  **({"fused": True} if device.type == "cuda" else {}))

    def step(inputs, targets):
        with torch.autocast(device_type=device.type, dtype=dtype, enabled=dtype is not None):
            logits = model(input_ids=inputs, use_cache=False).logits if hf else model(inputs)
            loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    return step


def measure(name: str, *, device, dtype, compile_: bool, batch: int | None, warmup: int, steps: int, seed: int):
    config = load_config(name)
    m = config.model
    vocab = config.data.vocab_size
    batch = batch or (CPU_BATCH.get(name, 4) if device.type == "cpu" else config.train.micro_batch_size)
    torch.manual_seed(seed)
    models = {"course": course_model(m, vocab).to(device).train(), "hf": hf_llama(m, vocab).to(device).train()}
    counts = {key: count_parameters(model) for key, model in models.items()}
    print(f"{name}: course ModernDecoder {counts['course']:,} parameters, LlamaForCausalLM {counts['hf']:,}",
          flush=True)
    if counts["course"] != counts["hf"]:
        raise SystemExit(f"parameter counts differ: {counts}")
    steppers = {}
    for key, model in models.items():
        runnable = torch.compile(model) if compile_ else model
        steppers[key] = make_step(runnable, device, dtype, hf=key == "hf")
    generator = torch.Generator().manual_seed(seed)
    rows = torch.randint(0, vocab, (batch, m.context_length + 1), generator=generator).to(device)
    inputs, targets = rows[:, :-1], rows[:, 1:]
    times: dict[str, list[float]] = {key: [] for key in models}
    warm_seconds = {}
    for key in models:  # warm-up (and compilation), untimed
        start = time.perf_counter()
        for _ in range(warmup):
            steppers[key](inputs, targets)
        synchronize(device)
        warm_seconds[key] = time.perf_counter() - start
    for round_ in range(steps):
        for key in (list(models) if round_ % 2 == 0 else list(reversed(models))):
            synchronize(device)
            start = time.perf_counter()
            steppers[key](inputs, targets)
            synchronize(device)
            times[key].append(time.perf_counter() - start)
    tokens = batch * m.context_length
    speeds = {key: [tokens / t for t in values] for key, values in times.items()}
    medians = {key: statistics.median(values) for key, values in speeds.items()}
    shape = {"d_model": m.d_model, "n_layers": m.n_layers, "n_heads": m.n_heads, "n_kv_heads": m.n_kv_heads or m.n_heads,
             "d_ff": m.d_ff or "SwiGLU default", "vocab_size": vocab, "context_length": m.context_length, "batch": batch}
    return {"config": name, "shape": shape, "parameters": counts["course"], "warmup_seconds": warm_seconds,
            "median_tokens_per_s": medians, "course_over_hf": medians["course"] / medians["hf"],
            "tokens_per_s": speeds}


def profile(name: str, *, device, dtype, batch: int | None, seed: int, path: Path) -> None:
    """torch.profiler's table of the operators of 3 eager steps of each model (after 2 untimed), into ``path``."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as profiler

    config = load_config(name)
    m, vocab = config.model, config.data.vocab_size
    batch = batch or (CPU_BATCH.get(name, 4) if device.type == "cpu" else config.train.micro_batch_size)
    torch.manual_seed(seed)
    rows = torch.randint(0, vocab, (batch, m.context_length + 1), generator=torch.Generator().manual_seed(seed))
    rows = rows.to(device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    sort = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    text = [f"command: {command()}", f"date: {now()}", f"machine: {machine()}", f"load average: {load_average()}",
            f"{name} shapes, batch {batch}, 3 profiled steps per model", ""]
    for key, model in (("course", course_model(m, vocab)), ("hf", hf_llama(m, vocab))):
        step = make_step(model.to(device).train(), device, dtype, hf=key == "hf")
        for _ in range(2):
            step(rows[:, :-1], rows[:, 1:])
        synchronize(device)
        with profiler(activities=activities) as prof:
            for _ in range(3):
                step(rows[:, :-1], rows[:, 1:])
            synchronize(device)
        text += [f"== {key}", prof.key_averages().table(sort_by=sort, row_limit=25), ""]
    path.write_text("\n".join(text) + "\n")
    print("\n".join(text))


def compiler_note(device: torch.device) -> str | None:
    """Why torch.compile cannot run here, or None."""
    if device.type == "cpu" and not (shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")):
        return "no C++ compiler on this machine: torch.compile (inductor) needs one on a CPU"
    if device.type == "cuda":
        try:
            import triton  # noqa: F401
        except ImportError:
            return "triton is not installed: torch.compile (inductor) needs it on a GPU"
    return None


def render(folder: Path) -> str:
    """train_step.md from every train_step*.json in ``folder``."""
    lines = ["# One training step: the course's ModernDecoder against Hugging Face's LlamaForCausalLM", "",
             "Written by `benchmarks/train_step.py` (its docstring says what a step is and how it is timed); "
             "each section is one run of it. tokens/s: the median and the best of the timed steps. course / HF "
             "(above 1: the course's model is faster): the ratio of the medians; the median of the paired "
             "ratios (each course step over the HF step next to it in time, which cancels slow changes of the "
             "machine's load); the ratio of the best steps (interference only slows a step down, so on a "
             "shared machine the best step is the closest to the model's own speed).", ""]
    for path in sorted(folder.glob("train_step*.json")):
        report = json.loads(path.read_text())
        lines += [f"## {report['device']}, {report['dtype']} (`{path.name}`)", "",
                  f"- command: `{report['command']}`", f"- date: {report['date']}",
                  f"- machine: {report['machine']}" + (f"; {report['accelerator']}" if report.get("accelerator") else ""),
                  f"- torch {report['torch']}, transformers {report['transformers']}",
                  f"- load average (1, 5, 15 min): before {report['load_before']}, after {report['load_after']}",
                  f"- {report['warmup']} untimed warm-up steps, then {report['steps']} timed steps per model, "
                  "alternating", ""]
        lines += [f"- {note}" for note in report.get("notes", [])]
        lines += ["", "| shapes | mode | d_model, layers, heads, d_ff, vocab | batch x context | parameters "
                  "| course tokens/s: median, best | HF tokens/s: median, best | course / HF: medians, "
                  "paired, best |", "|---|---|---|---|---:|---:|---:|---:|"]
        for run in report["runs"]:
            s, speeds = run["shape"], run["tokens_per_s"]
            best = {key: max(values) for key, values in speeds.items()}
            paired = statistics.median(c / h for c, h in zip(speeds["course"], speeds["hf"], strict=True))
            lines.append(f"| {run['config']} | {run['mode']} | {s['d_model']}, {s['n_layers']}, {s['n_heads']}, "
                         f"{s['d_ff']}, {s['vocab_size']} | {s['batch']} x {s['context_length']} | "
                         f"{run['parameters']:,} | {run['median_tokens_per_s']['course']:,.0f}, {best['course']:,.0f} | "
                         f"{run['median_tokens_per_s']['hf']:,.0f}, {best['hf']:,.0f} | {run['course_over_hf']:.2f}, "
                         f"{paired:.2f}, {best['course'] / best['hf']:.2f} |")
        lines.append("")
    notes = folder / "train_step_notes.md"
    if notes.is_file():
        lines += [notes.read_text().rstrip(), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=["cpu_demo", "gpu_h100"])
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--dtype", choices=["float32", "bf16"], default="float32",
                        help="bf16: torch.autocast around the forward and the loss")
    parser.add_argument("--modes", nargs="+", choices=["eager", "compile"], default=["eager", "compile"])
    parser.add_argument("--compile", action="store_true", help="the same as --modes compile")
    parser.add_argument("--batch", type=int, default=None,
                        help=f"sequences per step (default: on a CPU {CPU_BATCH}, on a GPU each config's micro_batch_size)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per model and mode")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default="benchmarks/train_step_cpu",
                        help="writes OUTPUT.json and re-renders train_step.md in OUTPUT's folder")
    parser.add_argument("--render", action="store_true", help="only re-render train_step.md in OUTPUT's folder")
    parser.add_argument("--profile", action="store_true",
                        help="instead of timing: torch.profiler's operator table of 3 eager steps of each model, for "
                             "each config, into OUTPUT_profile_CONFIG.txt")
    args = parser.parse_args(argv)
    out = Path(args.output)
    if args.render:
        (out.parent / "train_step.md").write_text(render(out.parent))
        return 0
    if args.profile:
        for name in args.configs:
            profile(name, device=torch.device(args.device), dtype={"float32": None, "bf16": torch.bfloat16}[args.dtype],
                    batch=args.batch, seed=args.seed, path=out.parent / f"{out.name}_profile_{name}.txt")
        return 0

    import transformers

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda but torch.cuda.is_available() is False")
    dtype = {"float32": None, "bf16": torch.bfloat16}[args.dtype]
    modes = ["compile"] if args.compile else list(dict.fromkeys(args.modes))
    notes = []
    if "compile" in modes and (why := compiler_note(device)):
        notes.append(f"torch.compile not measured: {why}")
        modes.remove("compile")
    report = {"command": command(), "date": now(), "machine": machine(), "device": str(device),
              "accelerator": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
              "dtype": args.dtype, "torch": torch.__version__, "transformers": transformers.__version__,
              "load_before": load_average(), "warmup": args.warmup, "steps": args.steps, "notes": notes, "runs": []}
    for mode in modes:
        for name in args.configs:
            start = time.perf_counter()
            run = measure(name, device=device, dtype=dtype, compile_=mode == "compile", batch=args.batch,
                          warmup=args.warmup, steps=args.steps, seed=args.seed)
            run["mode"] = mode
            run["wall_seconds"] = time.perf_counter() - start
            report["runs"].append(run)
            print(f"{name} {mode}: course {run['median_tokens_per_s']['course']:,.0f} tokens/s, HF "
                  f"{run['median_tokens_per_s']['hf']:,.0f}, ratio {run['course_over_hf']:.2f} "
                  f"({run['wall_seconds']:.0f} s)", flush=True)
            if device.type == "cuda":
                torch.cuda.empty_cache()
    report["load_after"] = load_average()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    text = render(out.parent)
    (out.parent / "train_step.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
