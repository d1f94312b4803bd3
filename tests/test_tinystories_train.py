"""The training program on a tiny model: its outputs, exact resume, and notebook 13's helpers.

Resume is exact: on one CPU the same operations run in the same order, so the losses of 3 steps +
resume + 3 steps equal those of 6 straight steps bit for bit (compared with ==).
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from tinystories_helpers import ROOT, solution_parts, tiny_config

from tinystories.errors import RunError
from tinystories.model import load_trained
from tinystories.train import run


@pytest.fixture(scope="module")
def solutions():
    """The instructor's answers the program loads for --stack reference (notebook 13's) and notebook 08's model."""
    from types import SimpleNamespace

    return SimpleNamespace(
        **solution_parts("08_decoder_models", "DecoderConfig", "ModernDecoder"),
        **solution_parts("13_tinystories", "attention_maps", "bits_per_byte", "flops_per_token", "rank_micro_batches"),
    )


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("data")


@pytest.fixture(scope="module")
def straight(data_dir, tmp_path_factory):
    return run(tiny_config(data_dir, tmp_path_factory.mktemp("straight")), progress=False)


def test_a_tiny_run_writes_everything(straight):
    out = straight.out_dir
    for name in ("config.toml", "metrics.jsonl", "checkpoint.pt", "loss_curve.png", "samples.txt", "tokenizer.json"):
        assert (out / name).is_file(), name
    assert (out / "loss_curve.png").read_bytes()[:4] == b"\x89PNG"
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6] and rows == straight.metrics
    assert all({"train_loss", "lr", "tokens", "tokens_per_s"} <= r.keys() for r in rows)
    assert [r["step"] for r in rows if "val_loss" in r] == [3, 6]
    assert rows[0]["train_loss"] == pytest.approx(math.log(384), rel=0.1)  # about uniform at the start
    assert rows[-1]["train_loss"] < rows[0]["train_loss"]
    assert straight.final_val_loss == rows[-1]["val_loss"] and straight.val_bpb > 0
    assert len(straight.samples) == 1 and "temperature 0.8" in (out / "samples.txt").read_text()
    model, tokenizer, config = load_trained(out)
    assert not model.training and config.model.d_model == 32
    assert tokenizer.decode(tokenizer.encode("Once upon a time").ids) == "Once upon a time"


def test_resume_is_exact(straight, data_dir, tmp_path):
    config = tiny_config(data_dir, tmp_path)
    first = run(config, progress=False, stop_after=3)
    assert [r["step"] for r in first.metrics] == [1, 2, 3]
    second = run(config, progress=False, resume=True)
    assert [r["train_loss"] for r in second.metrics] == [r["train_loss"] for r in straight.metrics]
    assert second.final_val_loss == straight.final_val_loss
    a = torch.load(straight.checkpoint, weights_only=True)["model"]
    b = torch.load(second.checkpoint, weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_good_checkpoint_is_never_overwritten(straight, data_dir):
    before = straight.checkpoint.read_bytes()
    with pytest.raises(RunError, match="already exists: add --resume"):
        run(tiny_config(data_dir, straight.out_dir), progress=False)
    with pytest.raises(RunError, match="model.d_model"):
        run(tiny_config(data_dir, straight.out_dir, "model.d_model=64"), progress=False, resume=True)
    assert straight.checkpoint.read_bytes() == before


def test_bits_per_byte_and_flops(solutions):
    assert solutions.bits_per_byte(math.log(2), 10, 10) == pytest.approx(1.0)
    assert solutions.bits_per_byte(2.0, 100, 400) == pytest.approx(2.0 * 100 / 400 / math.log(2))
    config = solutions.DecoderConfig(
        vocab_size=100, d_model=32, n_layers=3, n_heads=4, d_ff=80, max_seq_len=16, n_kv_heads=2
    )
    model = solutions.ModernDecoder(config)
    matmul_weights = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert solutions.flops_per_token(config, 16) == 3 * (2 * matmul_weights + 4 * 3 * 16 * 32)


def test_rank_micro_batches_cover_the_batch_once(solutions):
    batch = torch.arange(24).view(12, 2)
    parts = [solutions.rank_micro_batches(batch, r, 3, 2) for r in range(3)]
    assert all(len(p) == 2 and p[0].shape == (2, 2) for p in parts)
    torch.testing.assert_close(torch.cat([m for p in parts for m in p]), batch)
    with pytest.raises(ValueError, match="multiple of 8"):
        solutions.rank_micro_batches(batch, 0, 4, 2)


@pytest.mark.parametrize("n_kv_heads", [None, 2])
def test_attention_maps_reproduce_the_attention_output(solutions, n_kv_heads):
    """Oracle: maps @ V (V from v_proj, kv heads repeated) then out_proj is what SDPA gave the block."""
    torch.manual_seed(0)
    config = solutions.DecoderConfig(
        vocab_size=60, d_model=32, n_layers=2, n_heads=4, d_ff=64, max_seq_len=16, n_kv_heads=n_kv_heads
    )
    model = solutions.ModernDecoder(config).eval()
    tokens = torch.randint(0, 60, (2, 10))
    seen = []
    handles = [
        b.attn.register_forward_hook(lambda mod, args, out: seen.append((mod, args[0], out))) for b in model.blocks
    ]
    maps = solutions.attention_maps(model, tokens)
    for h in handles:
        h.remove()
    assert maps.shape == (2, 2, 4, 10, 10) and maps.dtype == torch.float32
    torch.testing.assert_close(maps.sum(-1), torch.ones(2, 2, 4, 10))
    assert torch.all(maps.triu(1) == 0)
    for layer, (attn, x, out) in enumerate(seen[:2]):
        v = attn.v_proj(x).view(2, 10, attn.num_kv_heads, attn.head_dim).transpose(1, 2)
        v = v.repeat_interleave(attn.num_heads // attn.num_kv_heads, dim=1)
        mixed = (maps[layer] @ v).transpose(1, 2).reshape(2, 10, -1)
        torch.testing.assert_close(attn.out_proj(mixed), out, atol=1e-5, rtol=1e-5)


def test_out_of_memory_is_one_line(data_dir, tmp_path, monkeypatch):
    """A GPU running out of memory (simulated: a model whose forward raises it) says what to lower."""
    import tinystories.train as train_module

    class Exhausting(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(2, 2))

        def forward(self, tokens):
            raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(train_module, "build_model", lambda *a, **k: Exhausting())
    with pytest.raises(RunError, match="lower it .*train.micro_batch_size=2"):
        run(tiny_config(data_dir, tmp_path), progress=False)
    assert not (tmp_path / "checkpoint.pt").exists()


def test_your_stack_and_the_reference_are_one_program(straight, data_dir, tmp_path):
    """The solutions' notebooks as a student's finished course/ (their ModernDecoder, cross_entropy, AdamW,
    cosine_lr, clip_grad_norm and get_batch) against the reference stack, same config and seed: the losses
    agree to float32 rounding. Tolerance 1e-4 absolute on losses near 6: the two AdamWs and cross-entropies
    round differently, measured at most 4.8e-7 apart over these 6 steps, while a real difference (a
    schedule without warm-up and decay) moved them by 0.055."""
    from tinystories.stack import PARTS, student_stack

    yours = student_stack(ROOT / "solutions", check=False)
    assert set(yours.origins.values()) == {"yours"} and len(yours.origins) == len(PARTS)
    assert yours.optimizer is not torch.optim.AdamW and yours.loss.__module__ != "torch.nn.functional"
    result = run(tiny_config(data_dir, tmp_path), stack=yours, progress=False)
    reference = [row["train_loss"] for row in straight.metrics]
    assert [row["train_loss"] for row in result.metrics] == pytest.approx(reference, abs=1e-4, rel=0)
    assert result.final_val_loss == pytest.approx(straight.final_val_loss, abs=1e-4, rel=0)
    saved = torch.load(result.checkpoint, weights_only=True)
    assert saved["stack"] == "yours" and saved["origins"]["optimizer"] == "yours"


def test_samples_come_from_the_stacks_loop_and_survive_its_failure(straight, capsys):
    """The run's stories are the stack's generate_with_cache on the trained weights; a student's loop that
    raises on the trained model costs one line, and the course's parts write the stories."""
    from tinystories.checkpoint import load_checkpoint
    from tinystories.stack import reference_stack
    from tinystories.train import _samples

    model, _, config = load_trained(straight.out_dir)
    eot = load_checkpoint(straight.out_dir / "checkpoint.pt")["eot_id"]
    tokenizer = straight.out_dir / "tokenizer.json"
    calls = []

    def recording(model, prompt, **options):
        calls.append(options["window"])
        return reference_stack().generation(model, prompt, **options)

    stack = reference_stack()
    stack.generation = recording
    texts, _ = _samples(model, tokenizer, config, eot, torch.device("cpu"), stack)
    assert texts == straight.samples and calls == [config.model.context_length] * config.sample.n

    def broken(model, prompt, **options):
        raise IndexError("position 32 is out of range")

    stack = reference_stack()
    stack.generation, stack.origins["generation"] = broken, "yours"
    texts, _ = _samples(model, tokenizer, config, eot, torch.device("cpu"), stack)
    assert texts == straight.samples and stack.origins["generation"].startswith("reference (raised IndexError")
    assert "your sampling parts raised IndexError: position 32 is out of range" in capsys.readouterr().out


def test_the_loss_curve_leaves_the_callers_plots_alone(tmp_path):
    """Notebook 13 calls ``run`` in its kernel and draws with pyplot afterwards: writing loss_curve.png must not
    switch pyplot's backend (to Agg, which shows nothing), as it once did."""
    import matplotlib
    import matplotlib.pyplot as plt

    from tinystories.train import _plot

    before = matplotlib.get_backend()
    plt.switch_backend("svg")  # a backend of the caller's that is not Agg (the notebook's is the inline one)
    try:
        _plot([{"step": 1, "train_loss": 3.0}, {"step": 2, "train_loss": 2.5, "val_loss": 2.7}], tmp_path / "curve.png")
        assert matplotlib.get_backend() == "svg"
        assert (tmp_path / "curve.png").read_bytes()[:4] == b"\x89PNG"
    finally:
        plt.switch_backend(before)
