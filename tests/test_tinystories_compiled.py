"""A compiled run's loss and optimizer: notebook 14's, and ``tinystories.compiled_adamw.CompiledAdamW``, which runs
``adamw_step_`` under torch.compile.

The optimizer is held to ``torch.optim.AdamW`` (foreach=False) over steps with a new learning rate each, in the
loop's two parameter groups (weight decay 0.1 and 0.0). Tolerance rtol 1e-5, atol 1e-6: ``adamw_step_`` computes
the bias corrections from a float32 step tensor, torch.optim's from a Python float (float64), which moved these
parameters (of order 1, lr <= 0.05) by at most 6e-8 (9e-8 resuming from torch.optim.AdamW's state). The graphs
are compiled by a backend that counts them and runs each as it is (no C++ compiler, a second or so); Inductor's
compilation is test_tinystories_gpu_paths.py's.
"""

from __future__ import annotations

import io

import pytest
import torch
from tinystories_helpers import ROOT, solution_parts, tiny_config

from tinystories.compiled_adamw import CompiledAdamW
from tinystories.stack import reference_stack, student_stack
from tinystories.train import CompiledLoss, _Dist, _loop, batch_loss

TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}


@pytest.fixture(scope="module")
def adamw_step_():
    return solution_parts("14_systems", "adamw_step_")["adamw_step_"]


def _counting(graphs: list):
    """A torch.compile backend that counts the graphs it is given and runs each as it is."""

    def backend(graph_module, example_inputs):
        graphs.append(graph_module)
        return graph_module.forward

    return backend


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.LayerNorm(5), torch.nn.Linear(5, 3))


def _groups(model) -> list[dict]:
    """The loop's two groups (tinystories.train._loop): matrices decay, vectors do not."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]


def _train(model, optimizer, steps) -> None:
    """The steps numbered ``steps``, each with its own batch and a learning rate set in the groups, as the loop
    sets the schedule's."""
    for step in steps:
        inputs = torch.randn(4, 6, generator=torch.Generator().manual_seed(step))
        model(inputs).pow(2).mean().backward()
        for group in optimizer.param_groups:
            group["lr"] = 0.01 * (step + 1)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def test_the_compiled_step_is_adamw_compiled_once_per_group(adamw_step_):
    """5 steps, a new learning rate at each: torch.optim.AdamW's parameters, and one graph per group (the
    learning rate reaches the graph as a tensor, which changing does not recompile)."""
    torch._dynamo.reset()
    graphs = []
    model = _model()
    optimizer = CompiledAdamW(_groups(model), adamw_step_, lr=0.01, betas=(0.9, 0.95), backend=_counting(graphs))
    _train(model, optimizer, range(5))
    assert len(graphs) == 2, f"{len(graphs)} compilations for 2 groups over 5 learning rates"
    expected = _model()
    _train(expected, torch.optim.AdamW(_groups(expected), lr=0.01, betas=(0.9, 0.95), foreach=False), range(5))
    for got, want in zip(model.parameters(), expected.parameters(), strict=True):
        torch.testing.assert_close(got, want, **TOLERANCE)


def _checkpointed(model, optimizer) -> dict:
    """The model's and optimizer's states through torch.save and torch.load, as a checkpoint takes them."""
    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


@pytest.mark.parametrize("first", ["compiled", "torch"], ids=["compiled_adamw", "from_torch_adamw"])
def test_a_resumed_optimizer_continues_as_if_never_stopped(first, adamw_step_):
    """2 steps, a checkpoint, a fresh model and optimizer loading it, 2 more steps: the parameters of 4 straight
    steps, bit for bit (the same graphs in the same order), and every parameter's step count says 4. A checkpoint
    of torch.optim.AdamW (a run resumed with train.compile turned on) continues too, to the tolerance above."""
    torch._dynamo.reset()
    options = {"lr": 0.01, "betas": (0.9, 0.95)}

    def compiled(model):
        return CompiledAdamW(_groups(model), adamw_step_, backend=_counting([]), **options)

    straight = _model()
    _train(straight, compiled(straight), range(4))
    model = _model()
    optimizer = compiled(model) if first == "compiled" else torch.optim.AdamW(_groups(model), foreach=False, **options)
    _train(model, optimizer, range(2))
    saved = _checkpointed(model, optimizer)
    resumed = _model()
    resumed.load_state_dict(saved["model"])
    optimizer = compiled(resumed)
    optimizer.load_state_dict(saved["optimizer"])
    _train(resumed, optimizer, range(2, 4))
    for got, want in zip(resumed.parameters(), straight.parameters(), strict=True):
        if first == "compiled":
            assert torch.equal(got, want)
        else:
            torch.testing.assert_close(got, want, **TOLERANCE)
    assert [float(state["step"]) for state in optimizer.state_dict()["state"].values()] == [4.0] * 6


def test_the_loop_takes_notebook_14s_parts_when_it_compiles(adamw_step_, tmp_path):
    """train.compile = false: notebook 10's loss and AdamW, as before; true: notebook 14's masked_cross_entropy and
    adamw_step_ (run by CompiledAdamW). The reference stack compiled keeps F.cross_entropy and torch.optim.AdamW."""
    stack = student_stack(ROOT / "solutions", check=False, keys=["loss", "optimizer", "compiled_loss", "compiled_step"])
    called = []

    def recording(name, loss):
        def recorded(logits, targets):
            called.append(name)
            return loss(logits, targets)

        return recorded

    stack.loss, stack.compiled_loss = recording("10", stack.loss), recording("14", stack.compiled_loss)
    logits, targets = torch.randn(2, 3, 7), torch.randint(0, 7, (2, 3))
    cpu = torch.device("cpu")
    for compile, notebook, optimizer in (("false", "10", stack.optimizer), ("true", "14", CompiledAdamW)):
        config = tiny_config(tmp_path, tmp_path, f"train.compile={compile}", "train.compile_loss=false")
        loop = _loop(config, stack, _Dist(), cpu, "fp32")
        assert type(loop.optimizer) is optimizer
        assert torch.isfinite(batch_loss(stack, config)(logits, targets)) and called[-1] == notebook
    assert loop.optimizer.compiled.__wrapped__ is stack.compiled_step
    assert stack.compiled_step.__module__ == "notebook_14_systems"
    config = tiny_config(tmp_path, tmp_path, "train.compile=true")
    assert type(_loop(config, reference_stack(), _Dist(), cpu, "fp32").optimizer) is torch.optim.AdamW
    assert not isinstance(batch_loss(reference_stack(), config), CompiledLoss)
