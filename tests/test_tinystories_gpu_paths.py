"""Every code path a GPU run takes, run on the CPU at a tiny size, so that CI (which has no GPU) breaks
when one of them does: torch.compile of the model (the reference's and a student's, with notebook 14's loss
and optimizer step), bf16 autocast, the fp16 gradient scaler, fused AdamW, SDPA against the unfused formula.
DDP with two processes is test_tinystories_ddp.py; the compiled optimizer alone, test_tinystories_compiled.py.

Each run is compared with the plain float32 run of the same config and seed (``straight``), over 6 steps
with losses near 6. Tolerances: compiled and unfused-attention runs only reorder float32 sums, 1e-4 absolute
(measured: at most 4.8e-7); bf16 and fp16 autocast round activations to 8 and 11 significant bits, 1e-2 and
1e-3 absolute (measured: 2.0e-4 and 2.4e-5), and each must differ from float32 at all (autocast really ran).
"""

from __future__ import annotations

import re

import pytest
import torch
from tinystories_helpers import ROOT, tiny_config

import tinystories.train as train_module
from tinystories.stack import reference_stack, student_stack, training_keys
from tinystories.train import CompiledLoss, batch_loss, run


def _losses(result) -> list[float]:
    return [row["train_loss"] for row in result.metrics]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("data")


@pytest.fixture(scope="module")
def straight(data_dir, tmp_path_factory):
    return _losses(run(tiny_config(data_dir, tmp_path_factory.mktemp("straight")), progress=False))


@pytest.mark.parametrize("stack", ["reference", "yours"])
def test_torch_compile(stack, straight, data_dir, tmp_path, capsys):
    """train.compile = true: inductor compiles the model (forward and backward) on the CPU, and a student's
    loss too (train.compile_loss), notebook 14's, and its optimizer step (tinystories.compiled_adamw): the
    compiled student stack, resolved for a compiled run as the command resolves it, trains to the eager run's
    losses (1e-4), and its table says which parts it trained."""
    keys = training_keys(compile=True)
    chosen = reference_stack() if stack == "reference" else student_stack(ROOT / "solutions", check=False, keys=keys)
    result = run(tiny_config(data_dir, tmp_path, "train.compile=true"), stack=chosen, progress=False)
    assert _losses(result) == pytest.approx(straight, abs=1e-4, rel=0)
    if stack == "yours":
        table = capsys.readouterr().out
        assert re.search(r"compiled_loss: masked_cross_entropy +notebook 14  yours", table), table
        assert re.search(r"compiled_step: adamw_step_ +notebook 14  yours", table), table
        assert "  loss: cross_entropy" not in table and "  optimizer: AdamW" not in table  # notebook 10's: not called


@pytest.fixture(scope="module")
def yours():
    """A stack with notebook 10's loss and notebook 14's (the solutions'); its other parts are the reference's."""
    return student_stack(ROOT / "solutions", check=False, keys=["loss", "compiled_loss"])


@pytest.fixture(scope="module")
def your_loss(yours):
    return yours.loss


def _recording_backend(graphs: list):
    """A torch.compile backend that keeps each FX graph Dynamo captures and runs it as it is."""

    def backend(graph_module, example_inputs):
        graphs.append(graph_module)
        return graph_module.forward

    return backend


def _captured(graphs) -> list[set[str]]:
    """For each FX graph a recording backend kept, the names of the functions and methods it calls."""
    return [
        {
            getattr(node.target, "__name__", node.target)
            for node in graph.graph.nodes
            if node.op in ("call_function", "call_method")
        }
        for graph in graphs
    ]


def test_a_students_loss_runs_inside_the_compiled_region(yours, data_dir, tmp_path):
    """With train.compile, the loss of notebook 14 runs under torch.compile as the model does (issue 38: on a
    GPU, a loss's separate operations over the logits cost a student's stack most of its gap to the reference),
    together with the cast of the logits to float32. Observed: Dynamo hands the compiler ONE graph that holds
    the cast and the loss's operations over the logits (log_softmax, gather, sum); the result equals the eager
    loss of the float32 logits to float32 rounding (1e-6 relative) for bf16 and float32 logits of two shapes
    and seeds. PyTorch's own loss is left as it is."""
    graphs = []
    loss = batch_loss(yours, tiny_config(data_dir, tmp_path, "train.compile=true"), backend=_recording_backend(graphs))
    assert isinstance(loss, CompiledLoss)
    for seed, (batch, positions, vocabulary, dtype) in enumerate(
        [(2, 24, 37, torch.bfloat16), (3, 32, 301, torch.float32)]
    ):
        generator = torch.Generator().manual_seed(seed)
        logits = torch.randn(batch, positions, vocabulary, generator=generator).to(dtype)
        targets = torch.randint(0, vocabulary, (batch, positions), generator=generator)
        expected = yours.compiled_loss(logits.float().flatten(0, 1), targets.flatten())
        torch.testing.assert_close(loss(logits, targets), expected, rtol=1e-6, atol=0)
    assert loss.fallback is None
    assert len(graphs) == 2, f"the loss was cut into {len(graphs) // 2} graphs per dtype, not one"  # one per dtype
    for captured in _captured(graphs):
        assert {"float", "log_softmax", "gather", "sum"} <= captured, captured
    eager = batch_loss(reference_stack(), tiny_config(data_dir, tmp_path, "train.compile=true"))
    assert not isinstance(eager, CompiledLoss)
    for off in (["train.compile=false"], ["train.compile=true", "train.compile_loss=false"]):
        assert not isinstance(batch_loss(yours, tiny_config(data_dir, tmp_path, *off)), CompiledLoss)


def test_a_loss_the_compiler_cannot_take_runs_eagerly_with_one_line(your_loss):
    """A compiler failure costs speed, not the run: the loss runs eagerly from then on, and one line says why.
    A loss that fails eagerly too raises its own error (the student's, readable), not the compiler's."""

    def broken_compiler(graph_module, example_inputs):
        raise RuntimeError("no C++ compiler\nmore detail")

    said = []
    loss = CompiledLoss(your_loss, backend=broken_compiler, say=said.append)
    logits, targets = torch.randn(8, 5), torch.tensor([0, 1, 2, 3, 4, 0, 1, 2])
    torch.testing.assert_close(loss(logits, targets), your_loss(logits, targets), rtol=0, atol=0)
    assert loss.fallback is not None and len(said) == 1
    assert "the loss" in said[0] and "no C++ compiler" in said[0] and "eagerly" in said[0]
    loss(logits, targets)
    assert len(said) == 1

    def wrong_shape(logits, targets):
        return logits @ targets

    with pytest.raises(RuntimeError) as raised:
        CompiledLoss(wrong_shape, say=said.append)(logits, targets)
    assert "Dynamo" not in type(raised.value).__name__ and len(said) == 1


@pytest.mark.parametrize("on", [False, True], ids=["default", "compile_cache=true"])
def test_compile_cache_is_off_unless_the_config_asks(on, data_dir, tmp_path, monkeypatch):
    """train.compile_cache: a compiled run turns Inductor's FX graph cache off unless the config turns it on
    (a warm one trained 23% slower on an H100 and an H200, benchmarks/tinystories_gpu.md). What is observed is
    the setting in force when the model is compiled; the compilation itself is test_torch_compile's."""
    import torch._inductor.config as inductor_config

    seen = []

    def compile_and_record(model, *args, **kwargs):
        seen.append(inductor_config.fx_graph_cache)
        return model

    monkeypatch.setattr(torch, "compile", compile_and_record)
    overrides = ["train.compile=true"] + (["train.compile_cache=true"] if on else [])
    with inductor_config.patch(fx_graph_cache=not on):  # start from the other value; restored afterwards
        run(tiny_config(data_dir, tmp_path, *overrides), progress=False)
    assert seen and set(seen) == {on}


def test_sdpa_kernels_match_the_unfused_formula(straight, data_dir, tmp_path):
    result = run(tiny_config(data_dir, tmp_path, "train.attention=math"), progress=False)
    assert _losses(result) == pytest.approx(straight, abs=1e-4, rel=0)


def test_bf16_autocast(straight, data_dir, tmp_path):
    result = run(tiny_config(data_dir, tmp_path, "train.precision=bf16"), progress=False)
    losses = _losses(result)
    assert losses != straight  # autocast really ran in bfloat16
    assert losses == pytest.approx(straight, abs=1e-2, rel=0)


def test_fp16_with_the_gradient_scaler(straight, data_dir, tmp_path, monkeypatch):
    """The path of a GPU without bf16 (a T4): fp16 autocast and a GradScaler, here on the CPU's fp16 kernels."""
    monkeypatch.setattr(train_module, "_precision", lambda precision, device: "fp16")
    result = run(tiny_config(data_dir, tmp_path), progress=False)
    assert _losses(result) != straight and _losses(result) == pytest.approx(straight, abs=1e-3, rel=0)
    scaler = torch.load(result.checkpoint, weights_only=True)["scaler"]
    assert scaler["scale"] > 0 and scaler["_growth_tracker"] == 6  # enabled, and no step was skipped


def test_fused_adamw_is_torchs_fused_kernel():
    """make_optimizer(fused=True), as a CUDA run calls it, gives torch's fused AdamW; one step equals the
    for-each implementation's to 1e-6 (fused AdamW runs on the CPU too in the pinned torch)."""
    torch.manual_seed(0)
    weights = [torch.randn(8, 4), torch.randn(4)]
    steps = []
    for fused in (True, False):
        params = [torch.nn.Parameter(w.clone()) for w in weights]
        optimizer = reference_stack().make_optimizer(
            [{"params": params, "weight_decay": 0.1}], fused=fused, lr=1e-2, betas=(0.9, 0.95)
        )
        assert optimizer.defaults["fused"] is (True if fused else None)
        for p in params:
            p.grad = torch.ones_like(p)
        optimizer.step()
        steps.append(params)
    for a, b in zip(*steps, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
    # A student's AdamW has no fused kernel: it is called without the flag.
    yours = student_stack(ROOT / "solutions", check=False, keys=["optimizer"])
    optimizer = yours.make_optimizer([{"params": [torch.nn.Parameter(torch.zeros(2))]}], fused=True, lr=1e-3)
    assert type(optimizer) is yours.optimizer
