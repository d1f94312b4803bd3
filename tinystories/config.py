"""Run configuration: dataclasses filled from a TOML file, then from ``--set section.key=value``.

Every key has a default here; a TOML file (``tinystories/configs/<name>.toml`` or any path) and the
overrides change them. Unknown sections or keys, wrong types and bad values raise ``RunError`` with
one line that names the key and the keys that exist, so a typo never trains the wrong model silently.
"""

from __future__ import annotations

import dataclasses
import tomllib
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tinystories.errors import RunError

CONFIG_DIR = Path(__file__).resolve().parent / "configs"


@dataclass
class DataConfig:
    source: str = "sample"          # "sample" (shipped, offline) or "tinystories_v2" (download)
    vocab_size: int = 2048          # byte-level BPE vocabulary, "<|endoftext|>" included
    dir: str = "data/tinystories/prepared"  # tokenizer and token files (cached)
    tokenizer: str = "fast"         # "fast": Hugging Face tokenizers; "yours": notebook 12's BPE (pure Python, slow)


@dataclass
class ModelConfig:
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int = 0             # 0: as many as n_heads (no grouping)
    d_ff: int = 384                 # SwiGLU's hidden width (notebook 06's swiglu_hidden_dim(128): 8/3 d_model up to 64s)
    context_length: int = 128
    rope_theta: float = 10000.0


@dataclass
class TrainConfig:
    batch_size: int = 32            # global sequences per optimizer step (all ranks, all micro-batches)
    micro_batch_size: int = 32      # sequences per forward/backward on one rank
    max_steps: int = 1000
    max_lr: float = 3e-3
    min_lr: float = 3e-4
    warmup_steps: int = 50
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0          # 0: no clipping
    eval_interval: int = 100
    eval_batches: int = 10          # global batches of batch_size sequences, the same ones at every evaluation
    checkpoint_interval: int = 500
    seed: int = 0
    compile: bool = False
    compile_loss: bool = True       # with compile: a loss that is not PyTorch's (yours) is compiled too; false: eager
    compile_cache: bool = False     # Inductor's FX graph cache; warm loads trained 23% slower (benchmarks/tinystories_gpu.md)
    precision: str = "auto"         # "bf16" | "fp16" | "fp32" | "auto" (bf16 if supported, else fp16; fp32 on CPU)
    attention: str = "fused"        # "fused": SDPA picks its kernels; "math": the unfused formula of notebook 04
    device: str = "auto"            # "auto" | "cpu" | "cuda"


@dataclass
class SampleConfig:
    prompt: str = "Once upon a time"
    n: int = 3
    max_new_tokens: int = 100
    temperature: float = 0.8
    top_k: int = 50                 # 0: no top-k filter


@dataclass
class RunConfig:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    sample: SampleConfig = field(default_factory=SampleConfig)
    out_dir: str = "runs/tinystories"


CHOICES = {
    ("data", "source"): ("sample", "tinystories_v2"),
    ("data", "tokenizer"): ("fast", "yours"),
    ("train", "precision"): ("bf16", "fp16", "fp32", "auto"),
    ("train", "attention"): ("fused", "math"),
    ("train", "device"): ("auto", "cpu", "cuda"),
}


def _known(obj) -> str:
    return ", ".join(f.name for f in dataclasses.fields(obj))


def _coerce(where: str, kind, value):
    """value as the field's type (int, float, str, bool), or RunError naming the key."""
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
            return value.lower() in ("true", "1")
    elif kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str):
            try:
                return int(value.replace("_", ""))
            except ValueError:
                pass
    elif kind is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
    elif kind is str:
        if isinstance(value, str):
            return value
    raise RunError(f"{where} must be {kind.__name__}, got {value!r}")


def _set(config: RunConfig, key: str, value, *, source: str) -> None:
    if key == "out_dir":
        config.out_dir = _coerce(f"out_dir ({source})", str, value)
        return
    section, _, name = key.partition(".")
    sections = [f.name for f in dataclasses.fields(RunConfig) if f.name != "out_dir"]
    if section not in sections or not name:
        raise RunError(f"unknown config key {key!r} ({source}); sections are {', '.join(sections)}, and out_dir")
    part = getattr(config, section)
    hints = typing.get_type_hints(type(part))
    if name not in hints:
        raise RunError(f"unknown config key {key!r} ({source}); [{section}] has {_known(part)}")
    value = _coerce(f"{key} ({source})", hints[name], value)
    choices = CHOICES.get((section, name))
    if choices and value not in choices:
        raise RunError(f"{key} ({source}) must be one of {', '.join(choices)}, got {value!r}")
    setattr(part, name, value)


def _validate(config: RunConfig) -> None:
    m, t = config.model, config.train
    positive = [("data.vocab_size", config.data.vocab_size), ("model.d_model", m.d_model),
                ("model.n_layers", m.n_layers), ("model.n_heads", m.n_heads), ("model.d_ff", m.d_ff),
                ("model.context_length", m.context_length), ("train.batch_size", t.batch_size),
                ("train.micro_batch_size", t.micro_batch_size), ("train.max_steps", t.max_steps),
                ("train.eval_interval", t.eval_interval), ("train.eval_batches", t.eval_batches),
                ("train.checkpoint_interval", t.checkpoint_interval)]
    for key, value in positive:
        if value <= 0:
            raise RunError(f"{key} must be positive, got {value}")
    if not 256 + 1 <= config.data.vocab_size < 65536:
        raise RunError(f"data.vocab_size must lie in [257, 65535] (256 bytes + <|endoftext|>; uint16 tokens), "
                       f"got {config.data.vocab_size}")
    if m.d_model % m.n_heads or (m.d_model // m.n_heads) % 2:
        raise RunError(f"model.d_model ({m.d_model}) must be n_heads ({m.n_heads}) times an even head size (RoPE)")
    if m.n_kv_heads and m.n_heads % m.n_kv_heads:
        raise RunError(f"model.n_kv_heads ({m.n_kv_heads}) must divide model.n_heads ({m.n_heads})")
    if t.batch_size % t.micro_batch_size:
        raise RunError(f"train.batch_size ({t.batch_size}) must be a multiple of train.micro_batch_size "
                       f"({t.micro_batch_size})")
    if t.warmup_steps < 0 or t.warmup_steps >= t.max_steps:
        raise RunError(f"train.warmup_steps ({t.warmup_steps}) must lie in [0, train.max_steps={t.max_steps})")


def config_path(name_or_path: str) -> Path:
    """A config's file: a name in tinystories/configs/, or a path."""
    named = CONFIG_DIR / f"{name_or_path}.toml"
    if named.is_file():
        return named
    path = Path(name_or_path)
    if path.is_file():
        return path
    names = sorted(p.stem for p in CONFIG_DIR.glob("*.toml"))
    raise RunError(f"no config {name_or_path!r}: use one of {', '.join(names)} or the path of a .toml file")


def _flatten(table: dict, prefix: str = "") -> list[tuple[str, object]]:
    items = []
    for key, value in table.items():
        if isinstance(value, dict):
            items += _flatten(value, f"{prefix}{key}.")
        else:
            items.append((f"{prefix}{key}", value))
    return items


def from_dict(table: dict, *, source: str = "dict") -> RunConfig:
    config = RunConfig()
    for key, value in _flatten(table):
        _set(config, key, value, source=source)
    return config


def load_config(name_or_path: str = "cpu_demo", overrides: Sequence[str] = ()) -> RunConfig:
    """The named (or given) TOML config with ``section.key=value`` overrides applied, validated."""
    path = config_path(name_or_path)
    try:
        table = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as error:
        raise RunError(f"{path} is not valid TOML: {error}") from None
    return _overridden(from_dict(table, source=path.name), overrides)


def with_overrides(config: RunConfig, overrides: Sequence[str]) -> RunConfig:
    """A copy of ``config`` with ``section.key=value`` overrides applied, validated (``config`` is unchanged)."""
    return _overridden(from_dict(as_dict(config)), overrides)


def _overridden(config: RunConfig, overrides: Sequence[str]) -> RunConfig:
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise RunError(f"--set expects section.key=value, got {item!r}")
        _set(config, key.strip(), value.strip(), source="--set")
    _validate(config)
    return config


def check_out_dir(config: RunConfig, resume: bool) -> None:
    """Refuse to start over a run's checkpoint without --resume, or to resume nothing (no torch needed)."""
    checkpoint = Path(config.out_dir) / "checkpoint.pt"
    if checkpoint.exists() and not resume:
        raise RunError(f"{checkpoint} already exists: add --resume to continue that run, or choose another --out")
    if resume and not checkpoint.is_file():
        raise RunError(f"--resume: there is no checkpoint {checkpoint} to continue")


def to_toml(config: RunConfig) -> str:
    """The config as TOML (written to out_dir/config.toml; loading it gives the same config)."""
    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return repr(v)

    lines = [f"out_dir = {value(config.out_dir)}"]
    for section in ("data", "model", "train", "sample"):
        lines.append(f"\n[{section}]")
        part = getattr(config, section)
        lines += [f"{f.name} = {value(getattr(part, f.name))}" for f in dataclasses.fields(part)]
    return "\n".join(lines) + "\n"


def as_dict(config: RunConfig) -> dict:
    return dataclasses.asdict(config)
