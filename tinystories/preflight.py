"""Before a long run on a rented GPU: `python -m tinystories preflight --config gpu_h100`.

Minutes on a paid GPU are lost to a run that dies at step 1 (no CUDA in this torch, no bf16 on a T4, a
compiler missing, a micro-batch that does not fit) or that would take far longer than planned. Preflight
checks each of these in about a minute and says what to change when one fails:

- CUDA: PyTorch sees a GPU (the config's device is cuda or auto);
- bf16: the GPU supports the precision the config asks for (a T4 has no bf16: gpu_t4 uses fp16);
- compile: ``torch.compile`` works here, when the config compiles;
- data: the tokenizer and token files for the config are prepared (``python -m tinystories prepare``);
- timing: ``steps`` real optimizer steps of the config (on the shipped sample: throughput does not depend on
  the text) give tokens/s, the estimated minutes of the whole run, and the peak GPU memory against the card's.

The timing runs only where the earlier checks passed; the process exits 1 if any check failed.
"""

from __future__ import annotations

import contextlib
import io
import statistics
import tempfile
from dataclasses import dataclass

import torch


@dataclass
class Finding:
    check: str
    ok: bool
    detail: str
    fix: str = ""


def _wants_cuda(config) -> bool:
    """train.device = cuda, or auto in a config that asks for 16-bit precision (the GPU configs do; cpu_demo's
    auto means "a GPU if there is one")."""
    t = config.train
    return t.device == "cuda" or (t.device == "auto" and t.precision in ("bf16", "fp16"))


def check_cuda(config) -> Finding:
    if not _wants_cuda(config):
        return Finding("CUDA", True, f"not needed: train.device = {config.train.device}, train.precision = "
                                     f"{config.train.precision}")
    if torch.cuda.is_available():
        return Finding("CUDA", True, f"{torch.cuda.get_device_name(0)}, CUDA {torch.version.cuda}, "
                                     f"{torch.cuda.device_count()} GPU(s)")
    build = "this torch is a CPU-only build" if torch.version.cuda is None else f"torch {torch.__version__} sees none"
    return Finding("CUDA", False, f"no GPU: {build}",
                   "on Colab or Kaggle choose a GPU runtime (Runtime > Change runtime type > T4 GPU) and restart; on "
                   "a GPU machine install PyTorch's CUDA build of the same version (pytorch.org's install selector "
                   "gives the command); to try the program on this machine's CPU, use --config cpu_demo")


def check_precision(config) -> Finding:
    precision = config.train.precision
    if not (_wants_cuda(config) and torch.cuda.is_available()):
        if precision == "fp16":
            return Finding("precision", False, "train.precision = fp16 needs a GPU", "--set train.precision=fp32")
        return Finding("precision", True, f"{precision} on the CPU")
    if precision in ("bf16", "auto") and not torch.cuda.is_bf16_supported():
        if precision == "auto":
            return Finding("precision", True, "auto: no bf16 on this GPU, so fp16 with a gradient scaler")
        return Finding("precision", False, f"train.precision = bf16, but {torch.cuda.get_device_name(0)} has no "
                                           "bf16 (a T4 or older)",
                       "use --config gpu_t4 (fp16 with a gradient scaler), or --set train.precision=fp16")
    return Finding("precision", True, f"{precision} is supported")


def check_compile(config) -> Finding:
    if not config.train.compile:
        return Finding("compile", True, "not used (train.compile = false)")
    device = "cuda" if _wants_cuda(config) and torch.cuda.is_available() else "cpu"
    layer = torch.nn.Linear(8, 8).to(device)
    try:
        compiled = torch.compile(layer)
        x = torch.randn(4, 8, device=device)
        torch.testing.assert_close(compiled(x), layer(x))
    except Exception as error:  # noqa: BLE001 - whatever breaks compilation, the fix is the same
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        return Finding("compile", False, f"torch.compile failed: {type(error).__name__}: {first}",
                       "--set train.compile=false (slower, same results), or install a C compiler (gcc) and "
                       "Python's headers")
    return Finding("compile", True, f"torch.compile works on {device}")


def check_data(config, name: str = "NAME") -> Finding:
    from tinystories.prepare import prepared_folders

    source = config.data.source
    ready = prepared_folders(config.data)
    if ready:
        return Finding("data", True, f"prepared in {ready[-1]}")
    yours = " made by your tokenizer" if getattr(config.data, "tokenizer", "fast") == "yours" else ""
    return Finding("data", False, f"no {source} tokens{yours} of {config.data.vocab_size} tokens' vocabulary in "
                                  f"{config.data.dir}",
                   f"python -m tinystories prepare --config {name}"
                   f"{' --tokenizer yours' if getattr(config.data, 'tokenizer', 'fast') == 'yours' else ''} first "
                   "(the run would otherwise start "
                   f"by {'tokenizing the shipped sample' if source == 'sample' else 'downloading and tokenizing the data set'})")


def check_timing(config, steps: int, stack=None) -> list[Finding]:
    """``steps`` optimizer steps of ``config`` (the first quarter untimed): speed, the run's minutes, memory."""
    from tinystories.config import with_overrides
    from tinystories.train import run

    warmup = max(1, steps // 4)
    with tempfile.TemporaryDirectory() as tmp:
        timed = with_overrides(config, [
            "data.source=sample", f"data.dir={tmp}/data", f"train.max_steps={steps}",
            f"train.warmup_steps={min(config.train.warmup_steps, steps - 1)}", f"train.eval_interval={steps}",
            "train.eval_batches=1", f"train.checkpoint_interval={steps}", "sample.n=1", "sample.max_new_tokens=4",
            f"out_dir={tmp}/run"])
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        with contextlib.redirect_stdout(io.StringIO()):
            result = run(timed, stack=stack, progress=False)
    speed = statistics.median(row["tokens_per_s"] for row in result.metrics[warmup:])
    tokens = config.train.batch_size * config.model.context_length
    minutes = config.train.max_steps * tokens / speed / 60
    findings = [Finding("timing", True, f"{speed:,.0f} tokens/s over {steps - warmup} steps: the run's "
                                        f"{config.train.max_steps:,} steps of {tokens:,} tokens take about "
                                        f"{minutes:,.0f} min (validation and checkpoints not counted)")]
    if torch.cuda.is_available() and result.metrics:
        peak, total = torch.cuda.max_memory_allocated(), torch.cuda.get_device_properties(0).total_memory
        fits = peak < 0.9 * total
        findings.append(Finding("memory", fits, f"peak {peak / 2**30:.1f} GiB of {total / 2**30:.1f} GiB",
                                "" if fits else f"--set train.micro_batch_size={max(1, config.train.micro_batch_size // 2)}"
                                                " (train.batch_size stays: gradient accumulation makes up the rest)"))
    return findings


def preflight(config, *, name: str = "NAME", steps: int = 20, stack=None) -> list[Finding]:
    """The checks for ``config`` (``name``: how the command line calls it, for the fixes)."""
    findings = [check_cuda(config), check_precision(config), check_compile(config), check_data(config, name)]
    if all(f.ok for f in findings[:3]):
        findings += check_timing(config, steps, stack)
    else:
        findings.append(Finding("timing", False, "not run: fix the checks above first"))
    return findings


def report(findings: list[Finding]) -> str:
    width = max(len(f.check) for f in findings)
    lines = []
    for f in findings:
        lines.append(f"{'ok  ' if f.ok else 'FAIL'}  {f.check:<{width}}  {f.detail}")
        if f.fix:
            lines.append(f"      {'':<{width}}  -> {f.fix}")
    return "\n".join(lines)

