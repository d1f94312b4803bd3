"""The training loop: one process, or one per GPU under torchrun (DDP), calling the parts of its stack
(``tinystories.stack``: the student's, or the reference's) for the model, loss, optimizer, schedule,
clipping, batches and samples.

Determinism: the global batch of optimizer step t is drawn from a generator seeded by (seed, t); each
rank takes its contiguous rows of it and splits them into micro-batches (``rank_micro_batches``). So a
resumed run sees the same batches as an uninterrupted one, and N ranks see the rows one process would.

Speed on a GPU: bf16 autocast (fp16 with a GradScaler where bf16 is missing), ``torch.compile``, fused
AdamW, and PyTorch's fused ``scaled_dot_product_attention``. Training batches have no padding, so the
course's ModernDecoder gives its attention no mask tensor and ``is_causal=True`` (notebook 08), which lets
SDPA pick its flash kernel with train.attention = "fused" (a padded batch would pass a boolean mask, and
then the memory-efficient kernel runs); "math" forces the unfused formula of notebook 04 (for comparison).
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from tqdm.auto import tqdm

from tinystories import library
from tinystories.checkpoint import load_checkpoint
from tinystories.config import as_dict, check_out_dir, to_toml
from tinystories.errors import RunError
from tinystories.model import build_model, count_parameters, decoder_config
from tinystories.prepare import load_tokens, prepare
from tinystories.stack import Stack, reference_stack

# Peak dense tensor FLOP/s per GPU at 16-bit precision (vendor data sheets); MFU is omitted elsewhere.
PEAK_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "L4": 121e12, "T4": 65e12}
# The training arithmetic: a checkpoint resumes only with these unchanged.
RESUME_KEYS = {"data": ("source", "vocab_size", "tokenizer"), "model": None,
               "train": ("batch_size", "max_steps", "max_lr", "min_lr", "warmup_steps", "weight_decay",
                         "beta1", "beta2", "grad_clip", "seed")}


@dataclass
class RunResult:
    out_dir: Path
    metrics: list[dict]
    final_val_loss: float
    val_bpb: float
    samples: list[str]
    checkpoint: Path


@dataclass
class _Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0


def init_distributed(train_config) -> None:
    """Join torchrun's process group now (``run`` would join it later); nothing for one process."""
    _init_distributed(_device(train_config))


def leave_distributed() -> None:
    """Leave torchrun's process group after a run that ended well; nothing for one process.

    Gloo's worker threads left alive at interpreter exit can abort the process ("terminate called
    without an active exception", pytorch/pytorch#190489); on PyTorch 2.13 they outlive this call too,
    so the command ends each rank without the interpreter's teardown (``tinystories.__main__``). After a
    failure the group is left alone: the other rank may still be inside a collective, and destroying it
    there can deadlock. ``run`` ends with a barrier, so every rank arrives here with its collectives done."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def _init_distributed(device_kind: str) -> _Dist:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return _Dist()
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device_kind == "cuda" else "gloo")
    return _Dist(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


def _device(train_config) -> str:
    if train_config.device == "cuda" and not torch.cuda.is_available():
        raise RunError("train.device is cuda but PyTorch sees no GPU: use --set train.device=cpu")
    if train_config.device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return train_config.device


def _precision(precision: str, device: torch.device) -> str:
    if device.type == "cpu":
        if precision == "fp16":
            raise RunError("train.precision fp16 needs a GPU: use fp32 or bf16 on the CPU")
        return "fp32" if precision == "auto" else precision
    if precision == "auto":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return precision


def peak_flops(device: torch.device) -> float | None:
    """The GPU's 16-bit peak from PEAK_FLOPS, or None (CPU, unknown GPU)."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in PEAK_FLOPS.items() if key in name), None)


def _check_resumable(saved: dict, config) -> None:
    now = as_dict(config)
    for section, keys in RESUME_KEYS.items():
        for key in keys or now[section]:
            default = getattr(type(getattr(config, section))(), key)  # a key newer than the checkpoint
            was = saved[section].get(key, default)
            if was != now[section][key]:
                raise RunError(f"the checkpoint was trained with {section}.{key} = {was!r}, this "
                               f"config has {now[section][key]!r}: resume with the run's own config "
                               f"(omit --config), or choose a new --out")


def _save(path: Path, state: dict) -> None:
    """Write to a temporary file, then rename: a crash mid-write never destroys the last good checkpoint."""
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def _plot(metrics: list[dict], path: Path) -> None:
    # A Figure of its own, not pyplot's: switching pyplot's backend (to draw without a screen) would also switch it in
    # a notebook that calls ``run``, whose later plt.show() would then show nothing.
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    train = [(m["step"], m["train_loss"]) for m in metrics if "train_loss" in m]
    val = [(m["step"], m["val_loss"]) for m in metrics if "val_loss" in m]
    if train:
        ax.plot(*zip(*train, strict=True), label="train", alpha=0.7)
    if val:
        ax.plot(*zip(*val, strict=True), "o-", label="validation")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("cross-entropy (nats per token)")
    ax.set_title("TinyStories training")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def _cached_model(model, config, stack: Stack):
    """The trained weights in the stack's CachedDecoder (the same parameters as the ModernDecoder), in eval
    mode; the reference's (``tinystories.library``), with one line saying why, when the student's cannot hold them."""
    decoder = decoder_config(config.model, model.lm_head.out_features, stack.config_class)
    try:
        cached = stack.cached_model(decoder)
        cached.load_state_dict(model.state_dict())
    except Exception as error:  # noqa: BLE001 - the student's class: one line, then the course's
        if stack.cached_model is library.LibraryDecoder:
            raise
        print(f"your CachedDecoder cannot hold the trained weights ({type(error).__name__}: {error}); "
              "sampling with the course's")
        stack.cached_model, stack.cache = library.LibraryDecoder, library.LibraryCache
        stack.origins["cached_model"] = stack.origins["cache"] = f"reference (failed: {type(error).__name__})"
        return _cached_model(model, config, stack)
    return cached.to(next(model.parameters()).device).eval()


SAMPLING_PARTS = ("sampling", "cached_model", "cache", "generation")


def _samples(model, tokenizer_path: Path, config, eot_id: int, device, stack: Stack) -> tuple[list[str], str]:
    """The config's samples, written by the stack's ``generation`` loop (notebook 13's ``generate_with_cache``)
    with its KV cache, inside the trained context (``config.model.context_length`` positions). Where the
    student's sampling parts raise on the trained model, one line says so and the course's write them."""
    from tokenizers import Tokenizer

    s = config.sample
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    prompt = torch.tensor(tokenizer.encode(s.prompt).ids, dtype=torch.long, device=device)

    def write() -> list[str]:
        generator = torch.Generator(device=device).manual_seed(config.train.seed)
        pick = functools.partial(stack.sampling, temperature=s.temperature, top_k=s.top_k or None,
                                 generator=generator)
        cached, n_layers, texts = _cached_model(model, config, stack), config.model.n_layers, []
        for _ in range(s.n):
            ids = stack.generation(cached, prompt, max_new_tokens=s.max_new_tokens,
                                   window=config.model.context_length, new_cache=lambda: stack.cache(n_layers),
                                   eos_id=eot_id, pick=pick)
            texts.append(tokenizer.decode([i for i in ids.tolist() if i != eot_id]))
        return texts

    try:
        texts = write()
    except Exception as error:  # noqa: BLE001 - the student's parts: one line, then the course's
        if all(stack.origins.get(key) != "yours" for key in SAMPLING_PARTS):
            raise
        print(f"your sampling parts raised {type(error).__name__}: {error}; the course's write the samples")
        reference = reference_stack()
        for key in SAMPLING_PARTS:
            setattr(stack, key, getattr(reference, key))
            stack.origins[key] = f"reference (raised {type(error).__name__} on the trained model)"
        texts = write()
    settings = (f"prompt {s.prompt!r}, temperature {s.temperature}, top_k {s.top_k or 'off'}, "
                f"max_new_tokens {s.max_new_tokens}, seed {config.train.seed}")
    return texts, settings


def _evaluate(model, tokens, config, d: _Dist, device, autocast, accumulation: int, stack: Stack, loss) -> float:
    """Mean validation loss over eval_batches fixed global batches (the same windows at every evaluation,
    for any number of processes: each rank takes its rows, in micro-batches, as in training)."""
    t = config.train
    generator = torch.Generator().manual_seed(t.seed + 1_000_003)
    total = torch.zeros((), device=device, dtype=torch.float64)
    model.eval()
    with torch.no_grad():
        for _ in range(t.eval_batches):
            x, y = stack.batches(tokens, t.batch_size, config.model.context_length, generator=generator)
            xs = stack.micro_batches(x, d.rank, d.world, accumulation)
            ys = stack.micro_batches(y, d.rank, d.world, accumulation)
            for xb, yb in zip(xs, ys, strict=True):
                with autocast():
                    logits = model(xb.to(device))
                total += loss(logits, yb.to(device)) / accumulation
    model.train()
    if d.world > 1:
        dist.all_reduce(total)
        total /= d.world
    return float(total) / t.eval_batches


def _use_compile_cache(enabled: bool) -> None:
    """Turn Inductor's FX graph cache on or off for this process (``train.compile_cache``, off by default).

    With PyTorch 2.11 on an H100 and an H200, a model compiled from graphs loaded out of a warm cache trained
    23% slower than the same model compiled from nothing. On the H200, turning off this one cache (and not the
    AOTAutograd cache) gave the speed back, for about 8 s more compilation per start
    (benchmarks/tinystories_gpu.md). Every start after the first on a machine, a resumed run included, would
    otherwise load the slower graphs.
    """
    import torch._inductor.config as inductor_config

    inductor_config.fx_graph_cache = enabled


# Notebook 10's loss ends with ``per_position[keep].mean()``: a boolean mask, whose output size depends on the
# data. Without this, Dynamo cuts the compiled loss in two there; with it, the loss is one graph, and on an H100
# a run's peak memory fell from 8.3 to 7.1 GiB, the reference's (benchmarks/tinystories_gpu.md). A compiled run
# now takes notebook 14's loss, which has no such mask; this still serves a loss compiled with one.
CAPTURE_DYNAMIC_OUTPUT_SHAPES = True


class CompiledLoss:
    """A batch's loss run under ``torch.compile`` (``train.compile_loss``), falling back to the loss itself, with
    one line, if compiling it fails.

    PyTorch's ``F.cross_entropy`` makes two passes over the logits (log-softmax, then the picked values); a loss written out as separate operations (notebook
    10's) reads and writes the float32 logits once per operation, and on a GPU that cost a student's stack
    most of its gap to the reference (benchmarks/tinystories_gpu.md). Compiled, Inductor fuses those
    operations; what the loss computes is unchanged (``tests/test_tinystories_gpu_paths.py``). A loss that
    raises when run eagerly too raises its own error, readable, not a compiler's.
    """

    def __init__(self, loss, backend="inductor", say=print):
        self.eager, self.say = loss, say
        self.compiled = torch.compile(loss, backend=backend)
        self.fallback: Exception | None = None

    def __call__(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if self.fallback is None:
            try:
                with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=CAPTURE_DYNAMIC_OUTPUT_SHAPES):
                    return self.compiled(logits, targets)
            except torch.OutOfMemoryError:
                raise
            except Exception as error:  # noqa: BLE001 - the eager call below tells a compiler failure from the loss's own
                result = self.eager(logits, targets)
                self.fallback = error
                cause = getattr(error, "inner_exception", None) or error  # a compiler's own error, unwrapped
                first_line = next(iter(str(cause).splitlines()), "")
                self.say(f"torch.compile could not compile the loss ({type(cause).__name__}: {first_line}); "
                         "it runs eagerly")
                return result
        return self.eager(logits, targets)


def batch_loss(stack: Stack, config, *, backend="inductor", say=print):
    """The loss of a batch as the loop computes it: ``(B, T, V)`` logits in autocast's dtype and ``(B, T)``
    targets, given to the stack's loss as float32 ``(B*T, V)`` logits and ``(B*T,)`` targets. That loss is
    notebook 10's ``stack.loss``, or with ``train.compile`` notebook 14's ``stack.compiled_loss``
    (``masked_cross_entropy``: no boolean mask, so no data-dependent shape to cut the graph at).

    With ``train.compile`` and ``train.compile_loss``, a loss that is not PyTorch's own runs compiled
    (``CompiledLoss``), as the model does, and the cast to float32 with it, so that Inductor reads the bf16
    logits where the loss needs them rather than a float32 copy written first (1.3 GB a step in gpu_h100). The
    loss still receives exactly the float32 values (the cast is exact).

    A student's clipping stays eager: compiled, the solution's trained 3% slower on an H100 (two alternated pairs
    of runs). So does notebook 10's optimizer step: its learning rate changes every step and reaches the update as
    a Python number (``p.addcdiv_(m, v, value=-lr)``, ``alpha=-lr``, and ``1 - lr * wd`` with the no-decay
    group's ``wd = 0.0``), which Dynamo can only bake into the graph: every new value recompiles the solution's
    step, with or without ``addcdiv`` decomposed, until the recompile limit leaves it eager anyway. With a single
    decay group it stops recompiling and applies a stale learning rate, silently (benchmarks/optimizer_compile.md).
    A compiled run's optimizer is notebook 14's step instead, whose learning rate is a tensor
    (``tinystories.compiled_adamw``)."""
    loss = stack.compiled_loss if config.train.compile else stack.loss

    def loss_of_batch(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return loss(logits.float().flatten(0, 1), targets.flatten())

    t = config.train
    if t.compile and t.compile_loss and loss is not torch.nn.functional.cross_entropy:
        return CompiledLoss(loss_of_batch, backend=backend, say=say)
    return loss_of_batch


@dataclass
class _Loop:
    """What every step of a run calls: the parts, the process group, the model (compiled, under DDP: ``model``;
    the module itself: ``raw_model``), the optimizer and its gradient scaler, and the contexts a forward pass
    runs in (``autocast``, and ``kernel``: the SDPA backend ``train.attention`` asks for)."""

    config: object
    stack: Stack
    d: _Dist
    device: torch.device
    raw_model: torch.nn.Module
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    autocast: object
    kernel: object
    accumulation: int
    loss: object = None  # batch_loss: the loss of (B, T, V) logits and (B, T) targets, compiled by _compile


def _load_data(config, d: _Dist, progress: bool, course_dir):
    """The prepared data and its train and validation tokens: rank 0 builds it, the others then find it cached."""
    if d.main:
        data = prepare(config.data, progress=progress, course_dir=course_dir)
        print(f"tokenizer: {data.origin}")
    if d.world > 1:
        dist.barrier()
    if not d.main:
        data = prepare(config.data, progress=False, course_dir=course_dir)
    for path in (data.train, data.val):
        if not path.is_file():
            raise RunError(f"the token file {path} is missing: delete {path.parent} so it is rebuilt")
    train_tokens, val_tokens = load_tokens(data.train), load_tokens(data.val)
    if min(len(train_tokens), len(val_tokens)) <= config.model.context_length:
        raise RunError(f"the data has fewer tokens than model.context_length ({config.model.context_length})")
    return data, train_tokens, val_tokens


def _restore(loop: _Loop, checkpoint_path: Path, out: Path) -> tuple[int, list[dict]]:
    """Resume: the checkpoint's weights, optimizer, scaler and generators; its step, and the metrics up to it."""
    state = load_checkpoint(checkpoint_path, map_location=loop.device)
    _check_resumable(state["config"], loop.config)
    loop.raw_model.load_state_dict(state["model"])
    loop.optimizer.load_state_dict(state["optimizer"])
    loop.scaler.load_state_dict(state["scaler"])
    # map_location put every tensor on the device; the generators take their states as CPU byte tensors.
    torch.set_rng_state(state["rng"]["torch"].cpu())
    if loop.device.type == "cuda" and state["rng"].get("cuda") is not None:
        torch.cuda.set_rng_state(state["rng"]["cuda"].cpu())
    start, metrics = state["step"], []
    if (out / "metrics.jsonl").is_file():
        lines = (out / "metrics.jsonl").read_text().splitlines()
        metrics = [json.loads(line) for line in lines if line.strip()]
        metrics = [row for row in metrics if row["step"] <= start]
    return start, metrics


def _checkpoint(loop: _Loop, path: Path, step: int, eot_id: int) -> None:
    """Everything a resumed run needs to continue as if never stopped (rank 0 writes it)."""
    if not loop.d.main:
        return
    _save(path, {
        "model": loop.raw_model.state_dict(), "optimizer": loop.optimizer.state_dict(),
        "scaler": loop.scaler.state_dict(), "step": step, "config": as_dict(loop.config), "stack": loop.stack.name,
        "origins": loop.stack.origins, "vocab_size": loop.config.data.vocab_size, "eot_id": eot_id,
        "rng": {"torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state() if loop.device.type == "cuda" else None}})


def _step(loop: _Loop, step: int, train_tokens) -> tuple[float, float, torch.Tensor | None]:
    """One optimizer step over the global batch of ``step``: (learning rate, mean training loss, gradient norm
    before clipping, or None without clipping)."""
    t, m, d, stack, device = loop.config.train, loop.config.model, loop.d, loop.stack, loop.device
    lr = stack.schedule(step, max_lr=t.max_lr, min_lr=t.min_lr, warmup_steps=t.warmup_steps, decay_steps=t.max_steps)
    for group in loop.optimizer.param_groups:
        group["lr"] = lr
    generator = torch.Generator().manual_seed((t.seed << 32) + step)
    x, y = stack.batches(train_tokens, t.batch_size, m.context_length, generator=generator)
    xs = stack.micro_batches(x, d.rank, d.world, loop.accumulation)
    ys = stack.micro_batches(y, d.rank, d.world, loop.accumulation)
    loss_sum = torch.zeros((), device=device)
    for i, (xb, yb) in enumerate(zip(xs, ys, strict=True)):
        sync = d.world == 1 or i == loop.accumulation - 1
        with (contextlib.nullcontext() if sync else loop.model.no_sync()), loop.autocast(), loop.kernel():
            logits = loop.model(xb.to(device, non_blocking=True))
            loss = loop.loss(logits, yb.to(device)) / loop.accumulation
        loop.scaler.scale(loss).backward()
        loss_sum += loss.detach()
    loop.scaler.unscale_(loop.optimizer)
    grad_norm = stack.clipping(list(loop.raw_model.parameters()), t.grad_clip) if t.grad_clip > 0 else None
    loop.scaler.step(loop.optimizer)
    loop.scaler.update()
    loop.optimizer.zero_grad(set_to_none=True)
    if d.world > 1:
        dist.all_reduce(loss_sum)
        loss_sum /= d.world
    train_loss = float(loss_sum)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return lr, train_loss, grad_norm


def _write_samples(loop: _Loop, data, out: Path, say) -> list[str]:
    """Rank 0's stories from the trained model, into out/samples.txt and printed."""
    with loop.kernel():
        samples, settings = _samples(loop.raw_model, data.tokenizer, loop.config, data.eot_id, loop.device, loop.stack)
    text = f"# {settings}\n" + "".join(f"\n--- sample {i + 1} ---\n{s}\n" for i, s in enumerate(samples))
    (out / "samples.txt").write_text(text)
    say(f"\nSamples ({settings}):")
    for i, s in enumerate(samples):
        say(f"--- {i + 1} ---\n{s}")
    return samples


def _micro_batch_hint(t, world: int) -> str:
    """The largest micro-batch that fits: the configs' micro-batch is one GPU's whole batch, which several
    processes' shares cannot hold."""
    share, remainder = divmod(t.batch_size, world)
    if remainder or share == 0:
        return f"; with {world} processes, choose a train.batch_size that is a multiple of {world}"
    fits = max(m for m in range(1, min(share, t.micro_batch_size) + 1) if share % m == 0)
    return f"; for example --set train.micro_batch_size={fits} (each process's share is {share} sequences)"


def _loop(config, stack: Stack, d: _Dist, device: torch.device, precision: str) -> _Loop:
    """The model, its optimizer and scaler, and the forward pass's contexts, as ``config.train`` asks."""
    t = config.train
    accumulation, remainder = divmod(t.batch_size, d.world * t.micro_batch_size)
    if remainder or accumulation == 0:
        raise RunError(f"train.batch_size ({t.batch_size}) must be a multiple of {d.world} processes x "
                       f"train.micro_batch_size ({t.micro_batch_size}){_micro_batch_hint(t, d.world)}")
    torch.manual_seed(t.seed)
    raw_model = build_model(config.model, config.data.vocab_size, stack=stack).to(device)
    decay = [p for p in raw_model.parameters() if p.dim() >= 2]
    no_decay = [p for p in raw_model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": t.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    optimizer = stack.make_optimizer(groups, fused=device.type == "cuda", compiled=t.compile, lr=t.max_lr,
                                     betas=(t.beta1, t.beta2))
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    autocast = functools.partial(torch.autocast, device_type=device.type, dtype=dtype, enabled=dtype is not None)
    kernel = contextlib.nullcontext
    if t.attention == "math":
        from torch.nn.attention import SDPBackend, sdpa_kernel
        kernel = functools.partial(sdpa_kernel, SDPBackend.MATH)
    return _Loop(config, stack, d, device, raw_model, raw_model, optimizer, scaler, autocast, kernel, accumulation)


def _compile(loop: _Loop, say) -> None:
    """``train.compile``: the model compiled, and a student's loss (``batch_loss``; a student's optimizer, made by
    ``_loop``, compiles its own step); under torchrun, DDP around the model.
    After a resume has loaded the weights into the module itself."""
    t, d = loop.config.train, loop.d
    if t.compile:
        _use_compile_cache(t.compile_cache)
        loop.model = torch.compile(loop.model)
    loop.loss = batch_loss(loop.stack, loop.config, say=say)
    if d.world > 1:
        loop.model = torch.nn.parallel.DistributedDataParallel(
            loop.model, device_ids=[d.local_rank] if loop.device.type == "cuda" else None)


def _start_out_dir(config, tokenizer: Path, out: Path, metrics: list[dict]) -> None:
    """out_dir's config.toml, tokenizer.json and metrics.jsonl (the rows kept from before a resume)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.toml").write_text(to_toml(config))
    shutil.copyfile(tokenizer, out / "tokenizer.json")
    with open(out / "metrics.jsonl", "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in metrics)


def _describe(loop: _Loop, precision: str) -> str:
    t, m, d = loop.config.train, loop.config.model, loop.d
    return (f"model: ModernDecoder ({loop.stack.origins['model']}), {count_parameters(loop.raw_model):,} parameters; "
            f"device {loop.device}{f' x {d.world}' if d.world > 1 else ''}, {precision}, attention {t.attention}, "
            f"compile {t.compile}; {t.batch_size} x {m.context_length} tokens per step ({loop.accumulation} "
            f"micro-batch{'es' if loop.accumulation > 1 else ''} of {t.micro_batch_size} per process)")


def run(config, *, stack: Stack | None = None, resume: bool = False, progress: bool = True,
        stop_after: int | None = None, course_dir=None) -> RunResult:
    """Train as ``config`` says and write out_dir/{config.toml, metrics.jsonl, checkpoint.pt,
    loss_curve.png, samples.txt, tokenizer.json}.

    ``stack``: the parts to train with (``tinystories.stack``: yours or the reference, the default).
    ``stop_after``: stop (with a checkpoint) after that step, as a job with a time limit would; resume
    later with ``resume=True``. ``course_dir``: where notebook 12 is, for ``data.tokenizer = "yours"``.
    """
    stack = stack or reference_stack()
    t, m = config.train, config.model
    d, device, precision = _place(t)
    say = print if d.main else (lambda *a, **k: None)
    out = Path(config.out_dir)
    checkpoint_path = out / "checkpoint.pt"
    check_out_dir(config, resume)
    say(stack.table())
    loop = _loop(config, stack, d, device, precision)
    data, train_tokens, val_tokens = _load_data(config, d, progress, course_dir)
    start, metrics = _restore(loop, checkpoint_path, out) if resume else (0, [])
    _compile(loop, say)

    stack = loop.stack
    per_token = stack.flops(decoder_config(m, config.data.vocab_size, stack.config_class), m.context_length)
    peak = peak_flops(device) if precision in ("bf16", "fp16") else None
    tokens_per_step = t.batch_size * m.context_length
    val_stats = data.stats["val"]
    if d.main:
        _start_out_dir(config, data.tokenizer, out, metrics)
    say(_describe(loop, precision))

    last = min(t.max_steps, stop_after) if stop_after else t.max_steps
    bar = tqdm(total=t.max_steps, initial=start, disable=not (progress and d.main), unit="step",
               desc="training", dynamic_ncols=True)
    metrics_file = open(out / "metrics.jsonl", "a") if d.main else None  # noqa: SIM115
    tokens_seen = start * tokens_per_step
    val_loss = val_bpb = math.nan
    try:
        for step in range(start + 1, last + 1):
            began = time.perf_counter()
            lr, train_loss, grad_norm = _step(loop, step, train_tokens)
            seconds = time.perf_counter() - began
            tokens_seen += tokens_per_step
            row = {"step": step, "train_loss": train_loss, "lr": lr, "tokens": tokens_seen,
                   "tokens_per_s": tokens_per_step / seconds, "ms_per_step": 1000 * seconds,
                   **({} if grad_norm is None else {"grad_norm": float(grad_norm)}),
                   **({"mfu": stack.mfu(tokens_per_step / seconds / d.world, per_token, peak)} if peak else {})}
            if not math.isfinite(train_loss):
                raise RunError(f"the training loss became {train_loss} at step {step}: lower train.max_lr")
            if step % t.eval_interval == 0 or step == t.max_steps:
                val_loss, val_bpb = _validate(loop, val_tokens, val_stats, config, d, device)
                row.update(val_loss=val_loss, val_bpb=val_bpb)
                say(f"step {step}: train loss {train_loss:.3f}, val loss {val_loss:.3f}, {val_bpb:.3f} bits per byte")
            metrics.append(row)
            if metrics_file:
                metrics_file.write(json.dumps(row) + "\n")
                metrics_file.flush()
            bar.set_postfix(loss=f"{train_loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{row['tokens_per_s']:,.0f}",
                            refresh=False)
            bar.update(1)
            if step % t.checkpoint_interval == 0 or step == last:
                _checkpoint(loop, checkpoint_path, step, data.eot_id)
    except torch.OutOfMemoryError:
        raise RunError(f"out of GPU memory with train.micro_batch_size={t.micro_batch_size}: lower it "
                       f"(e.g. --set train.micro_batch_size={max(1, t.micro_batch_size // 2)}); "
                       f"train.batch_size stays, gradient accumulation makes up the rest") from None
    finally:
        bar.close()
        if metrics_file:
            metrics_file.close()

    if math.isnan(val_loss):  # this run (a resumed one, or one stopped early) evaluated nothing: the last it did
        val_rows = [row for row in metrics if "val_loss" in row]
        if val_rows:
            val_loss, val_bpb = val_rows[-1]["val_loss"], val_rows[-1]["val_bpb"]
    samples = _finish(loop, data, metrics, out, say) if d.main else []
    if d.world > 1:
        dist.barrier()
    return RunResult(out, metrics, val_loss, val_bpb, samples, checkpoint_path)


def _place(train_config) -> tuple[_Dist, torch.device, str]:
    """This process's rank (joining torchrun's group), its device and the precision it trains in."""
    device_kind = _device(train_config)
    d = _init_distributed(device_kind)
    device = torch.device(f"cuda:{d.local_rank}" if device_kind == "cuda" else "cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    return d, device, _precision(train_config.precision, device)


def _validate(loop: _Loop, val_tokens, val_stats: dict, config, d: _Dist, device) -> tuple[float, float]:
    """The validation loss (every rank's share averaged) and its bits per byte."""
    with loop.kernel():
        val_loss = _evaluate(loop.model, val_tokens, config, d, device, loop.autocast, loop.accumulation, loop.stack,
                             loop.loss)
    return val_loss, loop.stack.bits_per_byte(val_loss, val_stats["tokens"], val_stats["bytes"])


def _finish(loop: _Loop, data, metrics: list[dict], out: Path, say) -> list[str]:
    """Rank 0's last outputs: the loss curve and the stories; returns the stories."""
    _plot(metrics, out / "loss_curve.png")
    samples = _write_samples(loop, data, out, say)
    say(f"\nwrote {out}/: checkpoint.pt, metrics.jsonl, loss_curve.png, samples.txt")
    return samples
