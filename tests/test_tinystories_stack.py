"""`python -m tinystories train` trains the student's own parts: which ones, and why not the others.

The parity of the two stacks (same losses from the same seed) is in test_tinystories_train.py.
"""

from __future__ import annotations

import re
import shutil

import nbformat
import pytest
import torch
from tinystories_helpers import ROOT, cli, tiny_args

from coursetools.notebook_vocabulary import grade_id
from tinystories.config import load_config
from tinystories.errors import RunError
from tinystories.model import build_model
from tinystories.stack import PARTS, reference_stack, resolve, student_stack, training_keys

SUMMED = """def cross_entropy(logits, targets, *, ignore_index=-100, label_smoothing=0.0):
    log_probs = logits - logits.logsumexp(-1, keepdim=True)
    return -log_probs.gather(-1, targets.unsqueeze(-1)).sum()  # summed, not averaged
"""
# Notebook 14's step with the learning rate read as a Python number: right values, but a graph per learning rate.
FLOAT_LR = """def adamw_step_(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1=0.9, beta2=0.999, eps=1e-8,
                weight_decay=0.01):
    step += 1
    lr = float(lr)
    bias1, bias2 = 1 - beta1**step, 1 - beta2**step
    for p, g, m, v in zip(params, grads, exp_avgs, exp_avg_sqs, strict=True):
        p.mul_(1 - lr * weight_decay)
        m.lerp_(g, 1 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        p.sub_(lr * (m / bias1) / ((v / bias2).sqrt() + eps))
"""


def test_untouched_stubs_train_the_reference_and_say_so():
    stack = student_stack(ROOT / "course")
    assert set(stack.origins) == {p.key for p in PARTS}
    for key, origin in stack.origins.items():
        assert origin.startswith("reference (not started:") and "NotImplementedError" in origin, (key, origin)
    assert stack.optimizer is torch.optim.AdamW and stack.model is reference_stack().model
    assert re.search(r"model: ModernDecoder +notebook 08  reference \(not started: modern_block", stack.table())


def test_each_part_is_yours_unless_it_fails_its_visible_checks(tmp_path):
    """Notebook 10 finished except a cross_entropy that sums instead of averaging; notebook 08 missing."""
    shutil.copytree(ROOT / "solutions" / "10_training", tmp_path / "10_training")
    path = tmp_path / "10_training" / "10_training.ipynb"
    nb = nbformat.read(path, as_version=4)
    (cell,) = [c for c in nb.cells if grade_id(c) == "cross_entropy"]
    cell.source = SUMMED
    nbformat.write(nb, path)

    stack = student_stack(tmp_path)
    assert (
        stack.origins["model"]
        == f"reference (no notebook {tmp_path / '08_decoder_models' / '08_decoder_models.ipynb'})"
    )
    assert stack.origins["loss"].startswith("reference (failing: cross_entropy: ")
    assert stack.loss is torch.nn.functional.cross_entropy
    for key in ("optimizer", "schedule", "clipping", "batches"):
        assert stack.origins[key] == "yours", (key, stack.origins[key])
    assert stack.optimizer.__module__ == "notebook_10_training"  # really the notebook's class


def test_a_compiled_run_takes_notebook_14s_parts_unless_they_fail(tmp_path):
    """With train.compile the loss and optimizer step are notebook 14's (training_keys), under the same rules:
    here the solutions' masked_cross_entropy passes its visible checks and is yours, and an adamw_step_ that reads
    the learning rate as a Python number (a graph per learning rate) fails them: PyTorch's AdamW trains, and the
    table says why."""
    shutil.copytree(ROOT / "solutions" / "14_systems", tmp_path / "14_systems")
    path = tmp_path / "14_systems" / "14_systems.ipynb"
    nb = nbformat.read(path, as_version=4)
    (cell,) = [c for c in nb.cells if grade_id(c) == "compiled_adamw"]
    cell.source = FLOAT_LR
    nbformat.write(nb, path)

    assert {"compiled_loss", "compiled_step"} <= set(training_keys(compile=True))
    stack = student_stack(tmp_path, keys=["compiled_loss", "compiled_step"])
    assert stack.origins["compiled_loss"] == "yours" and stack.compiled_loss.__module__ == "notebook_14_systems"
    assert stack.origins["compiled_step"].startswith("reference (failing: compiled_adamw: ")
    assert "graphs" in stack.origins["compiled_step"]
    assert stack.compiled_step is torch.optim.AdamW
    optimizer = stack.make_optimizer([torch.nn.Parameter(torch.zeros(2))], fused=False, compiled=True, lr=1e-3)
    assert type(optimizer) is torch.optim.AdamW
    assert re.search(r"compiled_step: adamw_step_ +notebook 14  reference \(failing: compiled_adamw", stack.table())


def test_your_model_is_the_notebook_class_and_equals_the_reference():
    """solutions/ standing in for a finished course/: the notebook's own class, the reference's numbers."""
    config = load_config("cpu_demo", ["model.d_model=32", "model.n_layers=1", "model.n_heads=2", "model.d_ff=64"])
    torch.manual_seed(0)
    theirs = build_model(config.model, 300, stack=student_stack(ROOT / "solutions", check=False, keys=["model"])).eval()
    ours = build_model(config.model, 300).eval()
    assert type(theirs).__module__ != type(ours).__module__
    ours.load_state_dict(theirs.state_dict())
    tokens = torch.randint(0, 300, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(theirs(tokens), ours(tokens))


def test_the_command_prints_the_table_first(tmp_path):
    default = cli(
        "train", *tiny_args(tmp_path / "d", tmp_path / "a", "train.max_steps=3"), "--course-dir", str(ROOT / "course")
    )
    assert default.returncode == 0, default.stderr
    first = default.stdout.splitlines()[: len(training_keys(compile=False)) + 1]
    assert first[0] == "the parts of this run (--stack yours):"
    assert all("reference (not started:" in line for line in first[1:])
    assert "notebook 14" not in default.stdout  # a run that does not compile neither loads nor lists its parts
    reference = cli("train", *tiny_args(tmp_path / "d", tmp_path / "b", "train.max_steps=3"), "--stack", "reference")
    assert reference.returncode == 0, reference.stderr
    assert reference.stdout.splitlines()[1].endswith("reference (--stack reference)")


def test_reference_parts_take_the_courses_parts_all_the_same():
    """--reference-parts: PyTorch's fused parts for speed, the student's others (here, only the schedule is theirs).
    "loss" and "optimizer" also name notebook 14's parts, which a compiled run calls in their place."""
    stack = resolve(
        "yours",
        ROOT / "solutions",
        keys=("loss", "optimizer", "schedule", "compiled_loss", "compiled_step"),
        reference_parts="loss, optimizer",
    )
    assert stack.optimizer is stack.compiled_step is torch.optim.AdamW
    assert stack.loss is stack.compiled_loss is reference_stack().loss
    for key in ("loss", "optimizer", "compiled_loss", "compiled_step"):
        assert stack.origins[key] == "reference (--reference-parts)", key
    assert stack.origins["schedule"] == "yours" and stack.schedule is not reference_stack().schedule
    with pytest.raises(RunError, match="no part optimiser"):
        resolve("yours", ROOT / "course", reference_parts="optimiser")


def test_each_part_is_one_row_and_its_reference_is_no_answer():
    """A capstone part is one row of ``PARTS``: the Stack's fields are its keys (and the model's config class);
    its reference is PyTorch's or Hugging Face's own, ``tinystories.library``'s (library parts, brute force, closed
    forms), or one of the oracles notebook 10's checks grade against; never a definition of solutions/."""
    import dataclasses

    from tinystories.stack import PARTS, Stack

    fields = {f.name for f in dataclasses.fields(Stack)} - {"config_class", "name", "origins"}
    assert fields == {p.key for p in PARTS}
    homes = {"torch", "transformers", "tinystories.library", "autograder.reference.training"}
    for part in PARTS:
        module = part.reference().__module__
        assert module.split(".")[0] in homes or module in homes, (part, module)
