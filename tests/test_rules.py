"""An exercise's rules (``autograder.rules``): each half alone rejects the dodges, right code in any style passes
(and, for the behaviours the checks observe, right code written in another order).

The dodges of "do not call torch.softmax" (``wrong.nb04_attention.SOFTMAX_DODGES``) are rejected by the
static half (the answer cell, read on the grader's side) and by the runtime half (the student's code run
with the rule switched on) separately, so neither depends on the other; ``test_wrong_implementations`` runs
both together, as grading does, and ``test_sandbox`` / ``test_nbgrader_e2e`` run one dodge through the CLI
and nbgrader.
"""

from __future__ import annotations

import pytest
import torch
from notebooks import read, solution_path
from wrong import PRELUDE
from wrong.nb04_attention import SOFTMAX_DODGES
from wrong.nb10_training import TRAIN

from autograder.exercises import find_exercise, rules_result, run_exercise
from autograder.impl import LocalImpl
from autograder.rules import Rule, enforced

# Right answers in other styles than the solutions', per rule-bound exercise.
RIGHT_STYLES = {
    "softmax": [
        "def softmax(x, dim=-1):\n    e = (x - x.max(dim=dim, keepdim=True).values).exp()\n"
        "    return e / e.sum(dim=dim, keepdim=True)\n",
        'def softmax(x, dim=-1):\n    """A stable softmax: torch.softmax is not called."""\n    softmax_values = torch.exp('
        "x - torch.amax(x, dim=dim, keepdim=True))\n    print('softmax')\n"
        "    return torch.div(softmax_values, torch.sum(softmax_values, dim=dim, keepdim=True))\n",
    ],
    "relative_positions": [
        "def relative_positions(n):\n    rows, cols = (torch.arange(n).unsqueeze(d) for d in (1, 0))\n    return cols - rows\n",
        "def relative_positions(n):\n    p = torch.arange(n)\n    return torch.subtract(*torch.meshgrid(p, p, indexing='xy'))\n",
    ],
    "pairwise_sq_distances": [
        "def pairwise_sq_distances(a, b):\n    out = 0\n    for axis in range(1):  # a loop of fixed length is allowed\n"
        "        out = ((a.unsqueeze(1) - b.unsqueeze(0)) ** 2).sum(dim=-1)\n    return out\n",
    ],
    "one_hot": [
        "def one_hot(tokens, vocab_size):\n    out = torch.zeros(*tokens.shape, vocab_size)\n"
        "    return out.scatter_(-1, tokens.unsqueeze(-1), 1.0)\n",
        "def one_hot(tokens, vocab_size):\n    return torch.eq(tokens.unsqueeze(-1), torch.arange(vocab_size)).to(torch.float32)\n",
    ],
    "ffn_activations": [
        "def relu(x):\n    return torch.clamp(x, min=0)\n\n\ndef gelu(x):\n    return x * 0.5 * (1.0 + torch.special.erf("
        "x / 2 ** 0.5))\n\n\ndef gelu_tanh(x):\n    return 0.5 * x * (1 + torch.tanh((2 / math.pi) ** 0.5 * "
        "(x + 0.044715 * torch.pow(x, 3))))\n\n\ndef silu(x):\n    return x / (1 + torch.exp(-x))\n",
        "def relu(x):\n    return x * (x > 0)\n\n\ndef gelu(x):\n    return x * (1 + torch.erf(x * math.sqrt(0.5))) / 2\n"
        "\n\ndef gelu_tanh(x):\n    inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)\n"
        "    return 0.5 * x * (1 + inner.tanh())\n\n\ndef silu(x):\n    return x * x.sigmoid()\n",
    ],
    "cross_entropy": [
        "def cross_entropy(logits, targets, *, ignore_index=-100, label_smoothing=0.0):\n"
        "    v = logits.shape[-1]\n    z = logits.reshape(-1, v)\n    t = targets.reshape(-1)\n"
        "    m = z.amax(-1, keepdim=True)\n    lse = m + (z - m).exp().sum(-1, keepdim=True).log()\n"
        "    logp = z - lse\n    keep = t != ignore_index\n    safe = t.masked_fill(~keep, 0)\n"
        "    picked = logp[torch.arange(len(t)), safe]\n"
        "    loss = -(1 - label_smoothing) * picked - label_smoothing * logp.mean(-1)\n"
        "    return (loss * keep).sum() / keep.sum()\n",
    ],
    "clip_grad_norm": [
        "def clip_grad_norm(parameters, max_norm):\n    grads = [p.grad for p in parameters if p.grad is not None]\n"
        "    total = torch.sqrt(sum((g.double() ** 2).sum() for g in grads)).float() if grads else torch.tensor(0.0)\n"
        "    if total > max_norm:\n        for g in grads:\n            g.mul_(max_norm / (total + 1e-6))\n"
        "    return total\n",
    ],
}
# Notebook 10's train in another order than the text lists it (zero_grad after the step, the lr set after the
# batch is drawn) and with a bar made with total= and updated by hand: the same values, so it must pass.
RIGHT_STYLES["train"] = [TRAIN.replace(
    "        optimizer.zero_grad()\n        loss.backward()\n", "        loss.backward()\n").replace(
    "        optimizer.step()\n", "        optimizer.step()\n        optimizer.zero_grad(set_to_none=True)\n").replace(
    "    model.train()\n", "    model.train()\n    optimizer.zero_grad()\n").replace(
    "    bar = tqdm(range(1, config.max_steps + 1), desc=\"training\", disable=not progress)\n    for step in bar:\n",
    "    bar = tqdm(total=config.max_steps, disable=not progress)\n    for step in range(1, config.max_steps + 1):\n"
    "        bar.update(1)\n")]

NOTEBOOK_OF = {"train": "10_training", "softmax": "04_attention", "one_hot": "00_welcome", "relative_positions": "00_welcome",
               "pairwise_sq_distances": "00_welcome", "ffn_activations": "06_feed_forward",
               "cross_entropy": "10_training", "clip_grad_norm": "10_training"}


def _rule_bound() -> list[tuple[str, str]]:
    """(notebook, exercise) for every exercise that declares a rule."""
    from autograder.checks import NOTEBOOKS
    from autograder.exercises import checks_for

    return [(n, e.id) for n in NOTEBOOKS for e in checks_for(n).exercises if e.rules]


def _namespace(namespaces, exercise_id: str, code: str) -> dict:
    namespace = dict(namespaces[NOTEBOOK_OF[exercise_id]])
    exec(compile(PRELUDE + code, "<answer>", "exec"), namespace)
    return namespace


def _runtime_only(namespaces, exercise_id: str, code: str):
    exercise, adapters = find_exercise(exercise_id)
    return run_exercise(exercise, LocalImpl(_namespace(namespaces, exercise_id, code), adapters))


@pytest.mark.parametrize("dodge", SOFTMAX_DODGES)
def test_the_static_half_alone_rejects_each_dodge(dodge):
    exercise, _ = find_exercise("softmax")
    result = rules_result(exercise, SOFTMAX_DODGES[dodge], [PRELUDE])
    assert not result.passed and result.message.startswith("this exercise's rule is: do not call torch.softmax")


def test_an_ipython_magic_does_not_hide_the_cell_from_the_static_half():
    """A cell the kernel runs but plain Python cannot parse (a %magic line) is read as the kernel runs it."""
    exercise, _ = find_exercise("softmax")
    cell = "%config InlineBackend.figure_format = 'png'\ndef softmax(x, dim=-1):\n    return torch.softmax(x, dim)\n"
    assert not rules_result(exercise, cell, [PRELUDE]).passed


@pytest.mark.parametrize("dodge", SOFTMAX_DODGES)
def test_the_runtime_half_alone_rejects_each_dodge(dodge, solution_namespaces):
    result = _runtime_only(solution_namespaces, "softmax", SOFTMAX_DODGES[dodge])
    assert not result.passed and "this exercise's rule is" in result.message, result.message


def test_a_helper_in_another_cell_is_refused_at_runtime(solution_namespaces):
    """The answer cell reads clean; the helper it calls lives in a cell the static half does not read."""
    namespace = _namespace(solution_namespaces, "softmax", "def helper(x, dim):\n    return F.softmax(x, dim)\n")
    answer = "def softmax(x, dim=-1):\n    return helper(x, dim)\n"
    exercise, adapters = find_exercise("softmax")
    assert rules_result(exercise, answer, [PRELUDE]).passed
    exec(answer, namespace)
    result = run_exercise(exercise, LocalImpl(namespace, adapters), source=answer, context=[PRELUDE])
    assert not result.passed and "your code called torch.nn.functional.softmax" in result.message, result.message


@pytest.mark.parametrize("exercise_id, code", [(e, c) for e, codes in RIGHT_STYLES.items() for c in codes])
def test_right_code_in_other_styles_passes_both_halves(exercise_id, code, solution_namespaces):
    exercise, adapters = find_exercise(exercise_id)
    namespace = _namespace(solution_namespaces, exercise_id, code)
    result = run_exercise(exercise, LocalImpl(namespace, adapters), source=code, context=[PRELUDE])
    assert result.passed, result.message


@pytest.mark.parametrize("notebook, exercise_id", _rule_bound())
def test_the_solutions_follow_their_rules(notebook, exercise_id):
    """The static half on the solution's own answer cell, with its notebook's cells as context."""
    nb = read(solution_path(notebook))
    (cell,) = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == exercise_id]
    exercise, _ = find_exercise(exercise_id)
    others = [c.source for c in nb.cells if c.cell_type == "code" and c is not cell]
    assert rules_result(exercise, cell.source, others).passed


def test_the_rule_is_switched_off_afterwards_and_restores_everything():
    rule = Rule("no softmax", ("torch.softmax", "torch.Tensor.softmax", "torch.nn.functional.softmax"))
    namespace = {"sm": torch.softmax, "other": torch.exp}
    x = torch.randn(3)
    expected = torch.softmax(x, 0)
    with enforced([rule.to_wire()], namespace):
        for call in (lambda: torch.softmax(x, 0), lambda: x.softmax(0), lambda: namespace["sm"](x, 0),
                     lambda: torch.nn.functional.softmax(x, 0)):
            with pytest.raises(RuntimeError, match="no softmax"):
                call()
        assert torch.equal(namespace["other"](x), torch.exp(x))  # what the rule does not name still works
    assert namespace["sm"] is torch.softmax and "softmax" not in vars(torch.Tensor)
    assert torch.equal(x.softmax(0), expected) and torch.equal(torch.nn.functional.softmax(x, 0), expected)
