"""Configs load, overrides apply, and every mistake is one line that names the key."""

from __future__ import annotations

import pytest
import torch

from tinystories.config import CONFIG_DIR, from_dict, load_config, to_toml
from tinystories.errors import RunError


@pytest.mark.parametrize("name", sorted(p.stem for p in CONFIG_DIR.glob("*.toml")))
def test_shipped_configs_load_and_round_trip(name, tmp_path):
    config = load_config(name)
    path = tmp_path / "config.toml"
    path.write_text(to_toml(config))
    assert load_config(str(path)) == config


def test_the_gpu_config_is_the_reference_run():
    config = load_config("gpu_h100")
    m, t = config.model, config.train
    assert (config.data.vocab_size, m.context_length, m.d_model, m.d_ff, m.n_layers, m.n_heads) == (
        10000,
        256,
        512,
        1344,
        4,
        16,
    )
    assert t.batch_size * m.context_length * t.max_steps == 327_680_000
    assert (t.precision, t.compile, config.data.source) == ("bf16", True, "tinystories_v2")
    assert load_config("gpu_t4").train.precision == "fp16"


def test_overrides_are_typed():
    config = load_config(
        "cpu_demo", ["train.max_steps=700", "train.max_lr=1e-3", "train.compile=true", "model.d_model=64", "out_dir=x"]
    )
    assert (config.train.max_steps, config.train.max_lr, config.train.compile) == (700, 1e-3, True)
    assert (config.model.d_model, config.out_dir) == (64, "x")


@pytest.mark.parametrize(
    "override, words",
    [
        ("train.max_stepz=3", ["train.max_stepz", "max_steps"]),
        ("trian.max_steps=3", ["trian.max_steps", "train"]),
        ("train.max_steps=many", ["train.max_steps", "int"]),
        ("train.precision=fp8", ["train.precision", "bf16"]),
        ("train.micro_batch_size=5", ["micro_batch_size", "multiple"]),
        ("model.n_heads=3", ["n_heads"]),
        ("data.vocab_size=70000", ["vocab_size"]),
        ("train.max_steps", ["section.key=value"]),
    ],
)
def test_bad_values_name_the_key(override, words):
    with pytest.raises(RunError) as error:
        load_config("cpu_demo", [override])
    message = str(error.value)
    assert "\n" not in message and all(w in message for w in words), message


def test_unknown_key_in_a_file(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[model]\nd_modle = 3\n")
    with pytest.raises(RunError, match="d_modle.*d_model"):
        load_config(str(path))
    with pytest.raises(RunError, match="no config 'nope'"):
        load_config("nope")
    with pytest.raises(RunError, match="must be int"):
        from_dict({"model": {"d_model": 1.5}})


@pytest.mark.parametrize(
    ("world", "hint"), [(8, "train.micro_batch_size=16 "), (16, "train.micro_batch_size=8 "), (3, "a multiple of 3")]
)
def test_a_batch_that_cannot_be_split_names_what_would_fit(world, hint):
    """The GPU configs' micro-batch is one GPU's whole batch (128): under torchrun with 8 or 16 processes the run
    stops before building anything, and says which micro-batch fits each process's share."""
    from tinystories.train import _Dist, _loop

    config = load_config("gpu_h100")
    with pytest.raises(RunError, match="must be a multiple of") as error:
        _loop(config, stack=None, d=_Dist(world=world), device=torch.device("cpu"), precision="fp32")
    assert hint in str(error.value)
