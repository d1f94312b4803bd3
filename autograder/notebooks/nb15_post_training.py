"""Notebook 15's exercises, with their checks and adapters: instruction data, LoRA, and DPO's loss.

Oracles:
- ``sft_batch``: brute force written here, position by position, from the text's definition of the chat template
  (``<|user|> prompt <|assistant|> response <|end|>``, inputs the sequence less its last token, labels the sequence
  less its first, -100 where the target is not the response's or ``<|end|>``, padding on the right). And what the
  labels are for: ``F.cross_entropy(..., ignore_index=-100)`` of random logits gives exactly zero gradient to every
  position whose target is a prompt token. Integers, compared exactly.
- ``LoRALinear``: the ``peft`` library's LoRA layer (``get_peft_model`` with ``LoraConfig``) around the same
  ``nn.Linear``, with the student's A and B copied in: outputs, gradients, merged weights. A's initialisation is
  checked against ``nn.Linear``'s (peft's default): uniform on [-1/sqrt(in), 1/sqrt(in)].
- ``add_lora``: ``peft.get_peft_model`` on the same model (the course's reference decoder, tiny random config): the
  layers it wraps, its count of trainable parameters (``get_nb_trainable_parameters``), and the closed form
  r * (in + out) summed over the wrapped layers.
- ``response_logprobs``: ``-F.cross_entropy(..., reduction="none", ignore_index=-100)`` summed per row, and autograd
  through it.
- ``dpo_loss``: the closed form with ``F.logsigmoid``; log 2 when the policy equals the reference; and on a tabular
  problem, the policy that minimizes the expected DPO loss under Bradley-Terry preferences is the reference
  reweighted by exp(r / beta) (the DPO paper's closed form), found by L-BFGS through the student's loss in float64.
- ``frozen_reference``: observed on the course's reference decoder: no parameter storage shared with the model,
  none requiring grad, every module in eval mode, the model left trainable and in training mode; the copy's logits
  equal the model's exactly (the same weights, the same operations), and stay exactly as they were while the model
  takes three SGD steps.

Tolerances (float32 on CPU, any BLAS):
- outputs of LoRA layers of width <= 64 with values of order 1: atol 1e-5 + rtol 1e-5 (float32 against peft's
  float32 evaluation in another order: measured <= 1e-6); gradients atol 1e-4 + rtol 1e-4 (sums over <= 24 rows);
- merged weights: atol 1e-6 (one product of [out, r] by [r, in] with r <= 8, of order 0.1, added once); a weight
  merged then unmerged equals the original to atol 1e-6 (two roundings of values of order 0.3: <= 6e-8);
- log-probabilities summed over <= 40 tokens, each of order 5, in float32: atol 1e-4 + rtol 1e-5 (measured
  <= 4e-6 against float64); their gradients atol 1e-5 (each entry one softmax value, <= 1);
- DPO losses and rewards, float32 inputs of order 10: atol 1e-5 + rtol 1e-5; the tabular optimum: log-probabilities
  within 1e-6 (float64 throughout; L-BFGS reaches the optimum to about 1e-10).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from autograder import expect
from autograder.adapters import adapter, given, need, summary
from autograder.exercises import Exercise
from autograder.notebooks._seeds import seeded
from autograder.reference.configs import DecoderConfig
from autograder.reference.decoders import LlamaDecoder

IGNORE = -100  # the label of a position that is not a target (F.cross_entropy's default ignore_index)

SFT_BATCH = Exercise("sft_batch", "a batch of chat examples and its labels", points=3)
LORA = Exercise("lora_linear", "a LoRA layer", points=3)
ADD_LORA = Exercise("add_lora", "LoRA on chosen layers of a model", points=2)
LOGPROBS = Exercise("response_logprobs", "the log-probability of a response", points=2)
DPO = Exercise("dpo_loss", "DPO's loss", points=3)
REFERENCE = Exercise("frozen_reference", "a frozen reference", points=1)
EXERCISES = [SFT_BATCH, LORA, ADD_LORA, LOGPROBS, DPO, REFERENCE]
ORACLE_IMPORTS = ("peft",)  # imported while the notebook runs (grading.grade): seconds

OUT = {"atol": 1e-5, "rtol": 1e-5}
GRAD = {"atol": 1e-4, "rtol": 1e-4}
MERGED = {"atol": 1e-6}
LOGP = {"atol": 1e-4, "rtol": 1e-5}
LOGP_GRAD = {"atol": 1e-5}
DPO_TOL = {"atol": 1e-5, "rtol": 1e-5}
OPTIMUM = 1e-6

USER, ASSISTANT, END, PAD = 1, 2, 3, 0  # the special tokens' ids in the checks (the notebook's are others)

_gen, _randn = seeded(15000)


# --- Exercise 1: a batch of chat examples ------------------------------------------------------------------------


def _chat_sequences(pairs, user, assistant, end):
    """The template, written out: ``<|user|> prompt <|assistant|> response <|end|>`` for each pair."""
    return [[user, *prompt, assistant, *response, end] for prompt, response in pairs]


def _expected_batch(pairs, user, assistant, end, pad):
    """Position by position, from the text's definition."""
    sequences = _chat_sequences(pairs, user, assistant, end)
    width = max(len(s) for s in sequences) - 1
    inputs, labels = [], []
    for (prompt, _), sequence in zip(pairs, sequences, strict=True):
        first_target = len(prompt) + 2  # the index in `sequence` of the response's first token
        row_in, row_lab = [], []
        for t in range(width):
            if t + 1 < len(sequence):
                row_in.append(sequence[t])
                row_lab.append(sequence[t + 1] if t + 1 >= first_target else IGNORE)
            else:
                row_in.append(pad)
                row_lab.append(IGNORE)
        inputs.append(row_in)
        labels.append(row_lab)
    return torch.tensor(inputs), torch.tensor(labels)


def _batch_mistakes(pairs, user, assistant, end, pad):
    """Known mistakes, each as the labels it makes (the inputs are right in all of them but the last)."""
    _, right = _expected_batch(pairs, user, assistant, end, pad)
    mistakes = []

    def labels_where(counted):
        sequences = _chat_sequences(pairs, user, assistant, end)
        width = right.shape[1]
        rows = []
        for (prompt, response), sequence in zip(pairs, sequences, strict=True):
            row = []
            for t in range(width):
                target = sequence[t + 1] if t + 1 < len(sequence) else None
                row.append(target if target is not None and counted(t + 1, prompt, response, sequence) else IGNORE)
            rows.append(row)
        return torch.tensor(rows)

    mistakes.append(
        (
            labels_where(lambda i, p, r, s: True),
            "every target is counted, the prompt's too: the labels must be -100 wherever the target is <|user|>'s "
            "prompt or the <|assistant|> token, so the model learns only to answer",
        )
    )
    mistakes.append(
        (
            labels_where(lambda i, p, r, s: i >= len(p) + 1),
            "the <|assistant|> token is counted as a target: the prompt ends with it, and only the response's tokens "
            "and <|end|> are targets",
        )
    )
    mistakes.append(
        (
            labels_where(lambda i, p, r, s: len(p) + 2 <= i < len(s) - 1),
            "<|end|> is not a target: the model must learn to end its answer, so <|end|> is counted",
        )
    )
    mistakes.append(
        (
            labels_where(lambda i, p, r, s: len(p) + 3 <= i),
            "the labels are shifted one position too far: the response's first token is not counted",
        )
    )
    unshifted = []
    for (prompt, _), sequence in zip(pairs, _chat_sequences(pairs, user, assistant, end), strict=True):
        row = [sequence[t] if len(prompt) + 2 <= t < len(sequence) else IGNORE for t in range(right.shape[1])]
        unshifted.append(row)
    mistakes.append(
        (
            torch.tensor(unshifted),
            "the labels are not shifted: labels[t] must be the token that follows inputs[t], "
            "the sequence's token t + 1",
        )
    )
    padded_labels = torch.where((right == IGNORE) & _padding(pairs, right.shape[1]), pad, right)
    mistakes.append((padded_labels, "the padding's labels are the padding token; they must be -100, not targets"))
    return mistakes


def _padding(pairs, width):
    lengths = torch.tensor([len(p) + len(r) + 2 for p, r in pairs])  # inputs per row: the sequence less one token
    return torch.arange(width)[None, :] >= lengths[:, None]


def _check_batch(impl, pairs, what, specials=(USER, ASSISTANT, END, PAD)):
    called = impl.call(call_sft_batch, pairs, *specials)
    got = called["output"]
    expect.that(
        called["pairs_unchanged"],
        f"sft_batch changed the lists it was given ({what}); build new sequences and leave `pairs` as it was",
    )
    expect.that(
        isinstance(got, (tuple, list)) and len(got) == 2,
        f"sft_batch returned {type(got).__name__}; expected a pair (input_ids, labels)",
    )
    inputs_right, labels_right = _expected_batch(pairs, *specials)
    shape = list(inputs_right.shape)
    full = [[specials[0], *p, specials[1], *r, specials[2]] for p, r in pairs]
    given = got[0]
    if isinstance(given, torch.Tensor) and list(given.shape) == [shape[0], shape[1] + 1]:
        expect.that(
            not all(given[i, : len(s)].tolist() == s for i, s in enumerate(full)),
            f"input_ids for {what} hold the whole sequence; the inputs are the sequence less its last token "
            "(<|end|> is only a target: nothing is predicted after it)",
        )
    inputs = expect.tensor(got[0], f"input_ids for {what}", shape=shape)
    labels = expect.tensor(got[1], f"labels for {what}", shape=shape)
    for name, value in (("input_ids", inputs), ("labels", labels)):
        expect.that(value.dtype == torch.long, f"{name} for {what} has dtype {value.dtype}; token ids are torch.long")
    expect.that(
        torch.equal(inputs, inputs_right),
        f"input_ids for {what} are {inputs.tolist()}; expected {inputs_right.tolist()} "
        "(<|user|> prompt <|assistant|> response <|end|>, less the last token, padded on the right)",
    )
    if not torch.equal(labels, labels_right):
        for wrong, diagnosis in _batch_mistakes(pairs, *specials):
            if torch.equal(labels, wrong):
                expect.fail(f"labels for {what} are wrong: {diagnosis}")
        expect.fail(f"labels for {what} are {labels.tolist()}; expected {labels_right.tolist()}")
    return inputs, labels


@SFT_BATCH.visible
def test_one_example(impl):
    "one (prompt, response) pair: its input ids and labels"
    _check_batch(impl, [([11, 12, 13], [21, 22])], "one pair, prompt [11, 12, 13], response [21, 22]")


@SFT_BATCH.visible
def test_two_examples_padded(impl):
    "two pairs of different lengths: the shorter one padded on the right, its padding not counted"
    _check_batch(impl, [([11, 12], [21, 22, 23, 24]), ([14], [25])], "two pairs of different lengths")


def _random_tokens(g, n_max):
    return torch.randint(10, 500, (int(torch.randint(1, n_max + 1, (), generator=g)),), generator=g).tolist()


@SFT_BATCH.hidden
def test_random_batches(impl):
    "random batches of up to six pairs, prompts and responses of 1 to 12 tokens, other special ids"
    for seed in range(4):
        g = _gen(seed)
        n = int(torch.randint(1, 7, (), generator=g))

        pairs = [(_random_tokens(g, 12), _random_tokens(g, 12)) for _ in range(n)]
        specials = (501 + seed, 502 + seed, 503 + seed, 504 + seed)
        _check_batch(impl, pairs, f"a batch of {n} random pairs (seed {seed})", specials)


@SFT_BATCH.hidden
def test_special_ids_inside_the_text(impl):
    "a prompt and a response that hold the special ids themselves (as a user may type <|end|>): positions, not searches"
    specials = (USER, ASSISTANT, END, PAD)
    pairs = [([11, ASSISTANT, 12, END], [21, ASSISTANT, END, 22]), ([USER, 13], [END, 23, 24])]
    _check_batch(impl, pairs, "pairs whose prompts and responses contain the special ids", specials)


@SFT_BATCH.hidden
def test_prompt_tokens_get_no_gradient(impl):
    "F.cross_entropy with your labels gives exactly zero gradient where the target is a prompt token"
    pairs = [([11, 12, 13, 14], [21, 22]), ([15, 16], [23, 24, 25, 26])]
    inputs, labels = _check_batch(impl, pairs, "two pairs")
    logits = _randn((*labels.shape, 32), 40).requires_grad_()
    F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE).backward()
    per_position = logits.grad.abs().sum(-1)
    prompt_targets = labels == IGNORE
    expect.that(
        bool((per_position[prompt_targets] == 0).all()),
        "a position whose target is not the response's gets a gradient: its label must be -100",
    )
    expect.that(bool((per_position[~prompt_targets] > 0).all()), "a response position gets no gradient")


# --- Exercise 2: a LoRA layer ------------------------------------------------------------------------------------


def _base_state(in_features, out_features, bias, seed):
    state = {"weight": _randn((out_features, in_features), seed) / math.sqrt(in_features)}
    if bias:
        state["bias"] = _randn((out_features,), seed + 1) * 0.1
    return state


def _base(state):
    out_features, in_features = state["weight"].shape
    layer = nn.Linear(in_features, out_features, bias="bias" in state)
    layer.load_state_dict(state)
    return layer


class _Wrapper(nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, x):
        return self.layer(x)


def _peft_layer(state, r, alpha, A, B):
    """peft's LoRA around the same base layer, with A and B copied in."""
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(_Wrapper(_base(state)), LoraConfig(r=r, lora_alpha=alpha, target_modules=["layer"]))
    layer = model.base_model.model.layer
    with torch.no_grad():
        layer.lora_A["default"].weight.copy_(A)
        layer.lora_B["default"].weight.copy_(B)
    return model


def _lora_mistakes(state, r, alpha, A, B, x):
    base = F.linear(x, state["weight"], state.get("bias"))
    product = x @ A.T @ B.T
    return [
        (base + product, "the LoRA path is not scaled: multiply it by alpha / r"),
        (base + alpha * product, "the LoRA path is scaled by alpha; the scale is alpha / r"),
        (base + r / alpha * product, "the LoRA path is scaled by r / alpha; the scale is alpha / r"),
        (base + alpha * r * product, "the LoRA path is scaled by alpha * r; the scale is alpha / r"),
        (base, "the LoRA path is not added: the output is the base layer's alone"),
    ]


def _check_lora_forward(impl, in_features, out_features, bias, r, alpha, shape, seed):
    state = _base_state(in_features, out_features, bias, seed)
    A = _randn((r, in_features), seed + 2) / math.sqrt(in_features)
    B = _randn((out_features, r), seed + 3) * 0.3
    x = _randn((*shape, in_features), seed + 4)
    grad_output = _randn((*shape, out_features), seed + 5)
    got = impl.call(run_lora, state, r, alpha, 0.0, A, B, x, grad_output)
    what = f"LoRALinear(nn.Linear({in_features}, {out_features}, bias={bias}), r={r}, alpha={alpha})"
    model = _peft_layer(state, r, alpha, A, B)
    xr = x.clone().requires_grad_()
    expected = model(xr)
    expected.backward(grad_output)
    expect.close(
        got["output"],
        expected,
        f"{what}(x) for x of shape {[*shape, in_features]}",
        **OUT,
        alternatives=_lora_mistakes(state, r, alpha, A, B, x),
    )
    layer = model.base_model.model.layer
    grads = expect.gradients(got, what)
    expect.close(grads.get("lora_A"), layer.lora_A["default"].weight.grad, f"{what}: the gradient of lora_A", **GRAD)
    expect.close(grads.get("lora_B"), layer.lora_B["default"].weight.grad, f"{what}: the gradient of lora_B", **GRAD)
    expect.close(grads.get("input"), xr.grad, f"{what}: the gradient of x", **GRAD)
    return got, model, state, x


@LORA.visible
def test_lora_starts_as_the_base_layer(impl):
    "lora_A [r, in] and lora_B [out, r] trainable, B zeros, the base frozen, scaling alpha / r, output = base(x)"
    for in_features, out_features, bias, r, alpha in ((16, 12, True, 4, 8.0), (10, 6, False, 2, 3.0)):
        state = _base_state(in_features, out_features, bias, 10 + r)
        x = _randn((5, in_features), 11)
        got = impl.call(made_lora, state, r, alpha, 0.0, x)
        what = f"LoRALinear(nn.Linear({in_features}, {out_features}, bias={bias}), r={r}, alpha={alpha})"
        info = got["summary"]
        expect.that("parameters" in info, f"{what} is not an nn.Module")
        params, trainable = info["parameters"], info["trainable"]
        expect.that(
            params.get("lora_A") == [r, in_features] and params.get("lora_B") == [out_features, r],
            f"{what} has parameters {params}; expected lora_A of shape [{r}, {in_features}] (r, in_features) and "
            f"lora_B of shape [{out_features}, {r}] (out_features, r), as nn.Parameters named so",
        )
        expect.that(
            trainable["lora_A"] and trainable["lora_B"], f"{what}: lora_A and lora_B must require grad (trainable)"
        )
        base_names = ["base.weight"] + ["base.bias"] * bias
        expect.that(
            sorted(set(params) - {"lora_A", "lora_B"}) == sorted(base_names),
            f"{what} has parameters {sorted(params)}; expected the wrapped layer as `base` ({', '.join(base_names)}) "
            "and lora_A, lora_B",
        )
        frozen = [name for name in base_names if trainable[name]]
        expect.that(not frozen, f"{what}: {', '.join(frozen)} still require grad; the base layer must be frozen")
        expect.that(
            bool((got["B"] == 0).all()), f"{what}: lora_B must start at zeros, so the layer starts as the base layer"
        )
        expect.that(
            bool((got["A"] != 0).any()),
            f"{what}: lora_A is all zeros; with B zero too, neither would ever get a gradient. A starts random",
        )
        expect.that(
            isinstance(got["scaling"], (int, float)) and math.isclose(got["scaling"], alpha / r, rel_tol=1e-9),
            f"{what}: scaling is {got['scaling']!r}; expected alpha / r = {alpha / r:g}",
        )
        expect.close(
            got["output"],
            F.linear(x, state["weight"], state.get("bias")),
            f"{what}(x) at the start",
            **OUT,
            hint="At the start B is zero, so the output is the base layer's.",
        )


@LORA.visible
def test_lora_forward_like_peft(impl):
    "with A and B set: the output and the gradients of A, B and x equal peft's LoRA"
    _check_lora_forward(impl, 16, 12, True, 4, 8.0, (2, 5), 20)


@LORA.hidden
def test_lora_more_shapes(impl):
    "other widths, ranks, alphas, no bias, inputs of 1 to 3 dimensions"
    for seed, (in_f, out_f, bias, r, alpha, shape) in enumerate(
        [(32, 64, False, 8, 16.0, (3, 4)), (64, 24, True, 1, 1.0, ()), (20, 20, True, 6, 12.0, (2, 2, 3))]
    ):
        _check_lora_forward(impl, in_f, out_f, bias, r, alpha, shape, 30 + 10 * seed)


@LORA.hidden
def test_lora_a_starts_like_a_linear_layer(impl):
    "lora_A starts uniform on [-1/sqrt(in), 1/sqrt(in)], as nn.Linear initialises its weight (peft's default)"
    in_features, r = 64, 8
    state = _base_state(in_features, 32, True, 50)
    got = impl.call(made_lora, state, r, 16.0, 0.0, _randn((2, in_features), 51))
    A = expect.tensor(got["A"], "lora_A", shape=(r, in_features)).detach().double()
    bound = 1 / math.sqrt(in_features)
    expect.that(
        float(A.abs().max()) <= bound * (1 + 1e-6),
        f"lora_A at the start has entries up to {float(A.abs().max()):.3g}; nn.Linear's initialisation "
        f"(nn.init.kaiming_uniform_ with a=sqrt(5)) keeps them within 1/sqrt(in_features) = {bound:.3g}",
    )
    # A uniform on [-b, b] has standard deviation b / sqrt(3); over 512 entries the estimate is within 10% with
    # probability above 0.999 (its relative standard error is about 2.8%).
    std = float(A.std())
    expect.that(
        abs(std - bound / math.sqrt(3)) <= 0.1 * bound / math.sqrt(3),
        f"lora_A at the start has standard deviation {std:.3g}; uniform on [-{bound:.3g}, {bound:.3g}] has "
        f"{bound / math.sqrt(3):.3g}: initialise it as nn.Linear initialises its weight",
    )


@LORA.hidden
def test_lora_merge_and_unmerge(impl):
    "merge() adds scaling * B @ A into the base weight (as peft merges), the output unchanged; unmerge() undoes it"
    in_f, out_f, r, alpha = 24, 16, 4, 8.0
    state = _base_state(in_f, out_f, True, 60)
    A = _randn((r, in_f), 61) / math.sqrt(in_f)
    B = _randn((out_f, r), 62) * 0.3
    x = _randn((6, in_f), 63)
    got = impl.call(merged_lora, state, r, alpha, A, B, x)
    merged = _peft_layer(state, r, alpha, A, B).merge_and_unload().layer
    before = F.linear(x, state["weight"], state["bias"]) + alpha / r * (x @ A.T @ B.T)
    expect.close(
        got["merged_weight"],
        merged.weight,
        "the base layer's weight after merge()",
        **MERGED,
        alternatives=[
            (state["weight"] + B @ A, "merge() adds B @ A without the scaling alpha / r"),
            (state["weight"], "merge() does not change the base layer's weight"),
        ],
    )
    expect.close(got["merged_bias"], merged.bias, "the base layer's bias after merge() (unchanged)", **MERGED)
    expect.close(
        got["merged_output"],
        before,
        "the output after merge()",
        **OUT,
        alternatives=[
            (
                before + alpha / r * (x @ A.T @ B.T),
                "after merge() the LoRA path is added again: once merged, the output is the base layer's alone",
            )
        ],
    )
    expect.close(
        got["merged_twice_weight"],
        merged.weight,
        "the weight after a second merge()",
        **MERGED,
        hint="merge() on a merged layer must change nothing.",
    )
    expect.close(
        got["unmerged_weight"], state["weight"], "the base layer's weight after merge() then unmerge()", **MERGED
    )
    expect.close(got["unmerged_output"], before, "the output after merge() then unmerge()", **OUT)
    expect.close(
        got["unmerged_twice_weight"],
        state["weight"],
        "the weight after a second unmerge()",
        **MERGED,
        hint="unmerge() on a layer that is not merged must change nothing.",
    )
    expect.that(
        got["merged_flag"] is True and got["unmerged_flag"] is False,
        f"self.merged is {got['merged_flag']!r} after merge() and {got['unmerged_flag']!r} after unmerge(); "
        "expected True, then False",
    )
    expect.that(
        not got["base_trainable_after"] and got["lora_trainable_after"],
        f"after merge() and unmerge(), base.{', base.'.join(got['base_trainable_after']) or 'weight'} requires grad "
        "or lora_A, lora_B no longer do: change the weight's values in place (under torch.no_grad()), so the base "
        "stays frozen and LoRA trainable",
    )


DRAWS = 4000  # dropout masks drawn for one input row: their covariance is estimated to about 3%


@LORA.hidden
def test_lora_dropout_only_on_the_lora_path(impl):
    "dropout acts on the input of the LoRA path in training mode, never on the base layer's, and not in eval mode"
    in_f, out_f, r, alpha, p = 16, 8, 4, 8.0, 0.5
    state = _base_state(in_f, out_f, True, 70)
    A = _randn((r, in_f), 71) / math.sqrt(in_f)
    B = _randn((out_f, r), 72) * 0.3
    x = _randn((400, in_f), 73)
    got = impl.call(dropout_lora, state, r, alpha, p, A, B, x, DRAWS)
    base = F.linear(x, state["weight"], state["bias"])
    what = f"LoRALinear with dropout={p}"
    expect.close(
        got["train_with_B_zero"],
        base,
        f"{what} in training mode, with B zero",
        **OUT,
        hint="Dropout belongs on the LoRA path's input only: the base layer sees x itself.",
    )
    delta = alpha / r * (x @ A.T @ B.T)
    expect.close(got["eval"], base + delta, f"{what} in eval mode", **OUT, hint="In eval mode dropout does nothing.")
    train = expect.tensor(got["train"], f"{what} in training mode", shape=base.shape).detach()
    expect.that(
        not torch.allclose(train, base + delta, **OUT),
        f"{what} in training mode equals eval mode: the dropout is not applied",
    )
    # One input row, repeated: over the rows, the LoRA part scaling * B @ A @ (mask * x / (1 - p)) has the mean of
    # eval mode's and the covariance scaling² (B A) diag(x² p / (1 - p)) (B A)^T, each feature of x dropped on its
    # own. Dropout placed elsewhere (on the LoRA path's output, or between A and B) has another covariance.
    BA = alpha / r * (B @ A).double()
    row = x[0].double()
    drops = (
        expect.tensor(got["train_repeated"], f"{what} in training mode", shape=(DRAWS, out_f)).detach().double()
        - F.linear(x[:1], state["weight"], state["bias"]).double()
    )
    expect.close(
        drops.mean(0),
        BA @ row,
        f"{what} in training mode: the mean of the LoRA part over {DRAWS} draws",
        atol=0.15 * float((BA @ row).abs().max()),
        hint="Inverted dropout keeps the mean: the kept inputs are scaled by 1 / (1 - p).",
    )
    expected_cov = BA @ torch.diag(row**2 * p / (1 - p)) @ BA.T
    cov = torch.cov(drops.T)
    off = float(torch.linalg.matrix_norm(cov - expected_cov) / torch.linalg.matrix_norm(expected_cov))
    expect.that(
        off < 0.2,
        f"{what} in training mode: the LoRA part varies from draw to draw unlike scaling * B @ A @ dropout(x), "
        f"where each input feature is kept (scaled by 1 / (1 - p)) or zeroed on its own (its covariance is "
        f"{off:.0%} off): put the dropout on the LoRA path's input",
    )


# --- Exercise 3: LoRA on chosen layers ---------------------------------------------------------------------------

_MODEL = DecoderConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=48, max_seq_len=16)


class _LinearHead(nn.Linear):
    """An nn.Linear subclass, as a model may hold (a layer with its own name or hooks): still an nn.Linear."""


def _decoder(state, subclass_head=False):
    model = LlamaDecoder(_MODEL)
    model.load_state_dict(state)
    if subclass_head:
        model.lm_head.__class__ = _LinearHead
    return model


def _model_state(seed):
    torch.manual_seed(15000 + seed)
    return LlamaDecoder(_MODEL).state_dict()


def _peft_model(state, targets, r, alpha, subclass_head=False):
    from peft import LoraConfig, get_peft_model

    model = _decoder(state, subclass_head)
    return get_peft_model(model, LoraConfig(r=r, lora_alpha=alpha, target_modules=list(targets)))


def _closed_form_count(wrapped, r):
    shapes = {name: module for name, module in LlamaDecoder(_MODEL).named_modules()}
    return sum(r * (shapes[name].in_features + shapes[name].out_features) for name in wrapped)


def _check_add_lora(impl, targets, r, alpha, seed, linear_targets=None, dropout=0.0, subclass_head=False):
    """``linear_targets``: the targets that name nn.Linear layers, for peft (which refuses the others), when
    ``targets`` also names other modules."""
    state = _model_state(seed)
    tokens = torch.randint(0, _MODEL.vocab_size, (2, 10), generator=_gen(seed))
    peft_model = _peft_model(state, linear_targets or targets, r, alpha, subclass_head)
    expected_wrapped = sorted(
        name.removeprefix("base_model.model.")
        for name, module in peft_model.named_modules()
        if type(module).__name__ == "Linear" and hasattr(module, "lora_A")
    )
    # A and B random (the same for both), so the output shows which layers were wrapped and how they are scaled
    weights = {}
    for i, name in enumerate(expected_wrapped):
        layer = peft_model.get_submodule("base_model.model." + name)
        weights[name] = tuple(
            _randn(tuple(part["default"].weight.shape), seed + 2 * i + k) * 0.5
            for k, part in enumerate((layer.lora_A, layer.lora_B))
        )
    got = impl.call(run_add_lora, state, list(targets), r, alpha, dropout, tokens, weights, subclass_head)
    what = f"add_lora(model, {list(targets)}, r={r}, alpha={alpha}, dropout={dropout})"
    expect.that(got["returned_model"], f"{what} returned {got['returned']}; it returns the model it changed")
    wrapped = sorted(got["wrapped"])
    missing, extra = sorted(set(expected_wrapped) - set(wrapped)), sorted(set(wrapped) - set(expected_wrapped))
    expect.that(
        not missing and not extra,
        f"{what} wrapped {wrapped}; expected {expected_wrapped}"
        + (f" (missing: {missing})" if missing else "")
        + (f" (not targets: {extra})" if extra else "")
        + ". A layer is a target when its full name equals a target or ends with '.' + the target",
    )
    wrong_dropout = sorted(name for name, p in got["dropouts"].items() if not math.isclose(p, dropout))
    expect.that(
        not wrong_dropout,
        f"{what}: the LoRA layers {wrong_dropout[:3]} have dropout {[got['dropouts'][n] for n in wrong_dropout[:3]]}; "
        f"pass dropout={dropout} on to LoRALinear",
    )
    trainable = got["trainable"]
    not_lora = sorted(name for name in trainable if "lora_" not in name)
    expect.that(not not_lora, f"{what}: {not_lora[:4]} still require grad; every parameter but LoRA's is frozen")
    expected_count = peft_model.get_nb_trainable_parameters()[0]
    closed_form = _closed_form_count(expected_wrapped, r)
    assert expected_count == closed_form, (expected_count, closed_form)  # peft and the closed form agree
    expect.that(
        got["trainable_count"] == expected_count,
        f"{what} leaves {got['trainable_count']} trainable parameters; expected r * (in + out) summed over the wrapped "
        f"layers = {expected_count} (peft's count)",
    )
    with torch.no_grad():
        start = peft_model(tokens)
        for name, (a, b) in weights.items():
            layer = peft_model.get_submodule("base_model.model." + name)
            layer.lora_A["default"].weight.copy_(a)
            layer.lora_B["default"].weight.copy_(b)
        expected = peft_model(tokens)
    expect.close(
        got["start"],
        start,
        f"the model's logits right after {what}",
        **OUT,
        hint="LoRA starts with B = 0, so the model is unchanged.",
    )
    expect.close(
        got["output"], expected, f"the model's logits after {what}, its LoRA weights then set at random", **OUT
    )


@ADD_LORA.visible
def test_attention_projections(impl):
    "targets q_proj and v_proj: the same layers, trainable parameters and outputs as peft's get_peft_model"
    _check_add_lora(impl, ("q_proj", "v_proj"), 4, 8.0, 1)


@ADD_LORA.hidden
def test_other_targets(impl):
    "the feed-forward layers, the output head, a full name and a two-part suffix, a dropout passed on"
    for seed, (targets, r, alpha, dropout) in enumerate(
        [
            (("w1", "w2", "w3"), 2, 4.0, 0.0),
            (("lm_head",), 8, 8.0, 0.0),
            (("blocks.1.attn.k_proj",), 4, 16.0, 0.0),
            (("attn.out_proj", "q_proj"), 3, 6.0, 0.1),
        ]
    ):
        _check_add_lora(impl, targets, r, alpha, 10 + seed, dropout=dropout)


@ADD_LORA.hidden
def test_overlapping_targets_wrap_once(impl):
    "two targets that name the same layers ('q_proj' and 'attn.q_proj') wrap each of them once"
    _check_add_lora(impl, ("q_proj", "attn.q_proj"), 4, 8.0, 40)


@ADD_LORA.hidden
def test_a_rank_wider_than_a_layer(impl):
    "r = 40, wider than the 32-wide layers: A and B take r as given ([40, in] and [out, 40]), as peft does"
    _check_add_lora(impl, ("w2", "v_proj"), 40, 40.0, 41)


@ADD_LORA.hidden
def test_a_subclass_of_linear_is_a_linear(impl):
    "an output head whose class is a subclass of nn.Linear is an nn.Linear (isinstance), and is wrapped"
    _check_add_lora(impl, ("lm_head", "w1"), 4, 4.0, 42, subclass_head=True)


@ADD_LORA.hidden
def test_only_linear_layers_are_chosen(impl):
    "a target that names other modules too ('attn', the attention modules; 'norm', the final RMSNorm) wraps none of them"
    _check_add_lora(impl, ("attn", "norm", "w2"), 2, 4.0, 30, linear_targets=("w2",))


@ADD_LORA.hidden
def test_a_target_that_is_a_prefix_matches_nothing(impl):
    "'proj' is not a target of 'blocks.0.attn.q_proj' (only a whole dot-separated suffix is), and 'v_proj' still is"
    _check_add_lora(impl, ("proj", "v_proj"), 2, 2.0, 20)


# --- Exercise 4: the log-probability of a response ---------------------------------------------------------------


def _logprob_case(shape, vocab, seed, scale=3.0):
    g = _gen(seed)
    B, T = shape
    logits = torch.randn(B, T, vocab, generator=g) * scale
    labels = torch.randint(0, vocab, (B, T), generator=g)
    for row in range(B):  # a prompt part, then the response, then padding
        start = int(torch.randint(0, T // 2 + 1, (), generator=g))
        end = int(torch.randint(start + 1, T + 1, (), generator=g))
        labels[row, :start] = IGNORE
        labels[row, end:] = IGNORE
    return logits, labels


def _logprob_oracle(logits, labels):
    per_token = -F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=IGNORE, reduction="none")
    return per_token.sum(-1)


def _logprob_mistakes(logits, labels):
    counted = labels != IGNORE
    safe = torch.where(counted, labels, 0)
    logp = torch.log_softmax(logits.double(), -1).gather(-1, safe[..., None]).squeeze(-1)
    raw = logits.double().gather(-1, safe[..., None]).squeeze(-1)
    probs = torch.softmax(logits.double(), -1).gather(-1, safe[..., None]).squeeze(-1)
    return [
        (
            (logp * counted).sum(-1) / counted.sum(-1),
            "it averages the log-probabilities over the response's tokens; "
            "DPO uses their sum, the log-probability of the whole response",
        ),
        (logp.sum(-1), "the positions labelled -100 (prompt and padding) are counted"),
        ((raw * counted).sum(-1), "it sums the raw logits; take log_softmax over the vocabulary first"),
        ((probs * counted).sum(-1), "it sums probabilities; sum log-probabilities (log_softmax)"),
        (((logp * counted).sum(-1)).neg(), "its sign is flipped: log-probabilities are negative"),
    ]


def _check_logprobs(impl, shape, vocab, seed, scale=3.0, grads=False):
    logits, labels = _logprob_case(shape, vocab, seed, scale)
    grad_output = _randn((shape[0],), seed + 1) if grads else None
    got = impl.call(call_response_logprobs, logits, labels, grad_output)
    what = f"response_logprobs for logits of shape {[*shape, vocab]}"
    expect.close(
        got["output"],
        _logprob_oracle(logits.double(), labels),
        what,
        **LOGP,
        alternatives=_logprob_mistakes(logits, labels),
    )
    if grads:
        leaf = logits.clone().requires_grad_()
        _logprob_oracle(leaf, labels).backward(grad_output)
        expect.that(
            isinstance(got.get("grad"), torch.Tensor), f"{what}: no gradient reached the logits ({got.get('grad')})"
        )
        expect.close(got["grad"], leaf.grad, f"{what}: the gradient of the logits", **LOGP_GRAD)


@LOGPROBS.visible
def test_logprobs_small(impl):
    "the sum of log p(label) over the positions not labelled -100, per row"
    _check_logprobs(impl, (3, 6), 10, 0)


@LOGPROBS.hidden
def test_logprobs_shapes_and_gradient(impl):
    "more shapes and vocabularies, and the gradient of the logits equals autograd through F.cross_entropy's"
    for seed, (shape, vocab) in enumerate([((1, 12), 50), ((4, 9), 7), ((2, 40), 300)]):
        _check_logprobs(impl, shape, vocab, 10 + seed, grads=True)


@LOGPROBS.hidden
def test_logprobs_any_targets(impl):
    "targets anywhere in a row (several turns of a conversation), and a row with none, whose sum is 0"
    logits, labels = _logprob_case((3, 12), 30, 25)
    scattered = torch.tensor([1, 0, 0, 1, 1, 0, 1, 0, 0, 0, 1, 1], dtype=torch.bool)
    labels[0] = torch.where(scattered, torch.randint(0, 30, (12,), generator=_gen(26)), IGNORE)
    labels[1] = IGNORE  # no target at all
    got = impl.call(call_response_logprobs, logits, labels)
    expect.close(
        got["output"],
        _logprob_oracle(logits.double(), labels),
        "response_logprobs for a row with targets here and there, and a row with none",
        **LOGP,
        hint="Every position whose label is not -100 counts, wherever it is; a row without one sums to 0.",
    )


@LOGPROBS.hidden
def test_logprobs_bfloat16_logits(impl):
    "bfloat16 logits: the log-probabilities and their sums computed in float32 or wider"
    logits, labels = _logprob_case((2, 24), 50, 30)
    logits = logits.bfloat16()
    got = impl.call(call_response_logprobs, logits, labels)
    what = "response_logprobs for bfloat16 logits of shape [2, 24, 50]"
    out = expect.tensor(got["output"], what, shape=(2,))
    expect.that(
        out.dtype in (torch.float32, torch.float64),
        f"{what} returns {out.dtype}; compute in float32 or wider and return that: bfloat16 keeps 8 bits of a sum",
    )
    expect.close(
        out,
        _logprob_oracle(logits.double(), labels),
        what,
        **LOGP,
        hint="Cast the logits to float32 before log_softmax: in bfloat16 each log-probability is off by "
        "about 1% of its size.",
    )


@LOGPROBS.hidden
def test_logprobs_large_logits(impl):
    "logits of size 100 stay finite (log_softmax, not the log of a softmax that rounds to 0)"
    _check_logprobs(impl, (2, 8), 20, 20, scale=100.0)


# --- Exercise 5: DPO's loss --------------------------------------------------------------------------------------


def _dpo_oracle(pc, pr, rc, rr, beta):
    chosen, rejected = beta * (pc - rc), beta * (pr - rr)
    return -F.logsigmoid(chosen - rejected).mean(), chosen, rejected


def _dpo_mistakes(pc, pr, rc, rr, beta):
    margin = (pc - rc) - (pr - rr)
    return [
        (
            -F.logsigmoid(-beta * margin).mean(),
            "the margin's sign is flipped: the chosen response's reward comes first, "
            "-log sigmoid(r_chosen - r_rejected)",
        ),
        (-F.logsigmoid(margin).mean(), "beta is missing: the rewards are beta times the log-ratios"),
        (-F.logsigmoid(margin / beta).mean(), "it divides by beta; the rewards are beta times the log-ratios"),
        (-F.logsigmoid(beta * margin).sum(), "it sums over the batch; the loss is the mean"),
        (F.logsigmoid(beta * margin).mean(), "its sign is flipped: the loss is -log sigmoid(...), which is positive"),
        (
            -F.logsigmoid(beta * ((pc - pr) - (rr - rc))).mean(),
            "the reference's log-probabilities enter with the "
            "wrong signs: the margin is (pi_c - ref_c) - (pi_r - ref_r)",
        ),
    ]


def _dpo_inputs(batch, seed, scale=10.0, dtype=torch.float32):
    g = _gen(seed)
    return [(-scale * torch.rand(batch, generator=g, dtype=torch.float64) * 3).to(dtype) for _ in range(4)]


def _check_dpo(impl, batch, beta, seed, scale=10.0):
    pc, pr, rc, rr = _dpo_inputs(batch, seed, scale)
    got = impl.call(call_dpo_loss, pc, pr, rc, rr, beta)
    what = f"dpo_loss on a batch of {batch} (beta={beta})"
    loss, chosen, rejected = _dpo_oracle(pc.double(), pr.double(), rc.double(), rr.double(), beta)
    expect.close(
        got["loss"],
        loss,
        f"the loss of {what}",
        **DPO_TOL,
        alternatives=_dpo_mistakes(pc.double(), pr.double(), rc.double(), rr.double(), beta),
    )
    expect.close(
        got["chosen"],
        chosen,
        f"the chosen rewards of {what}",
        **DPO_TOL,
        hint="The chosen reward is beta * (policy_chosen - reference_chosen), per pair.",
    )
    expect.close(
        got["rejected"],
        rejected,
        f"the rejected rewards of {what}",
        **DPO_TOL,
        hint="The rejected reward is beta * (policy_rejected - reference_rejected), per pair.",
    )
    return got


@DPO.visible
def test_dpo_closed_form(impl):
    "the loss -mean(log sigmoid(beta * margin)) and the rewards beta * (policy - reference), per pair"
    _check_dpo(impl, 4, 0.1, 0)


@DPO.visible
def test_dpo_is_log_2_when_policy_is_reference(impl):
    "when the policy's log-probabilities equal the reference's, the loss is log 2 and the rewards 0"
    pc, pr, _, _ = _dpo_inputs(5, 1)
    got = impl.call(call_dpo_loss, pc, pr, pc.clone(), pr.clone(), 0.5)
    expect.close(
        got["loss"],
        torch.tensor(math.log(2)),
        "dpo_loss with the policy equal to the reference",
        **DPO_TOL,
        hint="log sigmoid(0) = -log 2.",
    )
    expect.close(got["chosen"], torch.zeros(5), "the chosen rewards with the policy equal to the reference", **DPO_TOL)


@DPO.hidden
def test_dpo_more_batches(impl):
    "other batch sizes and betas (0 among them: every reward 0, the loss log 2)"
    for seed, (batch, beta) in enumerate([(1, 0.5), (16, 0.05), (7, 2.0), (3, 0.0)]):
        _check_dpo(impl, batch, beta, 10 + seed)


@DPO.hidden
def test_dpo_rewards_are_detached(impl):
    "the rewards are returned without a graph (for logging); the loss has one, and its gradient is right"
    pc, pr, rc, rr = _dpo_inputs(6, 20)
    got = impl.call(call_dpo_loss, pc, pr, rc, rr, 0.2, True)
    expect.that(
        got["rewards_detached"], "the rewards returned still require grad: return them .detach()ed, as values to log"
    )
    expect.that(
        isinstance(got.get("grads"), dict), f"no gradient reached the policy's log-probabilities ({got.get('grads')})"
    )
    leaves = [t.double().clone().requires_grad_() for t in (pc, pr)]
    _dpo_oracle(leaves[0], leaves[1], rc.double(), rr.double(), 0.2)[0].backward()
    for name, leaf in zip(("policy_chosen", "policy_rejected"), leaves, strict=True):
        expect.close(got["grads"][name], leaf.grad, f"the gradient of the loss with respect to {name}", **DPO_TOL)


@DPO.hidden
def test_dpo_large_margins_stay_finite(impl):
    "margins of +-2000 nats: the loss is finite (log sigmoid, not the log of a sigmoid that rounds to 0 or 1)"
    pc = torch.tensor([-10.0, -3000.0])
    pr = torch.tensor([-3000.0, -10.0])
    zero = torch.zeros(2)
    got = impl.call(call_dpo_loss, pc, pr, zero, zero, 1.0)
    expected = _dpo_oracle(pc.double(), pr.double(), zero.double(), zero.double(), 1.0)[0]
    expect.close(
        got["loss"],
        expected,
        "dpo_loss for margins of +2990 and -2990",
        **DPO_TOL,
        hint="log(sigmoid(m)) rounds to log(0) = -inf for a large negative m: use F.logsigmoid.",
    )


@DPO.hidden
def test_dpo_keeps_the_inputs_dtype(impl):
    "float64 log-probabilities give a float64 loss and rewards, float32 ones float32"
    for seed, dtype in ((30, torch.float64), (31, torch.float32)):
        pc, pr, rc, rr = _dpo_inputs(3, seed, dtype=dtype)
        got = impl.call(call_dpo_loss, pc, pr, rc, rr, 0.1)
        loss = expect.tensor(got["loss"], f"the loss of {dtype} inputs", shape=())
        chosen = expect.tensor(got["chosen"], f"the chosen rewards of {dtype} inputs", shape=(3,))
        expect.that(
            loss.dtype == dtype and chosen.dtype == dtype,
            f"the loss and rewards of {dtype} inputs are {loss.dtype} and {chosen.dtype}; keep the inputs' dtype",
        )


def _tabular_optimum(log_reference, rewards, beta):
    """The DPO paper's closed form: the reference reweighted by exp(r / beta), normalized."""
    return torch.log_softmax(log_reference + rewards / beta, dim=0)


@DPO.hidden
def test_dpo_optimum_on_a_tabular_policy(impl):
    "minimizing your loss over Bradley-Terry preferences gives the reference reweighted by exp(r / beta)"
    for seed, (n, beta) in enumerate([(4, 0.5), (6, 0.2)]):
        g = _gen(40 + seed)
        log_reference = torch.log_softmax(torch.randn(n, generator=g, dtype=torch.float64), 0)
        rewards = torch.randn(n, generator=g, dtype=torch.float64)
        got = impl.call(optimize_tabular_dpo, log_reference, rewards, beta)
        found = expect.tensor(got, "the optimized policy's log-probabilities", shape=(n,))
        expected = _tabular_optimum(log_reference, rewards, beta)
        error = float((found.double() - expected).abs().max())
        expect.that(
            error <= OPTIMUM,
            f"with {n} responses and beta={beta}, the policy that minimizes your loss (expected over Bradley-Terry "
            f"preferences, found by L-BFGS) is off from reference * exp(r / beta), normalized, by {error:.3g} in "
            f"log-probability (tolerance {OPTIMUM:g})",
        )


# --- Exercise 6: a frozen reference ------------------------------------------------------------------------------


def _reference_case(impl, seed, train_steps=0, mode="train"):
    state = _model_state(seed)
    tokens = torch.randint(0, _MODEL.vocab_size, (2, 9), generator=_gen(seed))
    got = impl.call(make_reference, state, tokens, train_steps, mode)
    expect.that(got["module"], f"frozen_reference returned a {got['returned']}; it returns a model (an nn.Module)")
    expect.that(not got["same_object"], "frozen_reference returned the model itself; the reference is a copy of it")
    expect.that(
        not got["shared"],
        f"the reference shares {got['shared'][:3]} with the model (the same tensors): training the policy would move "
        "the reference too. Copy the model deeply (copy.deepcopy)",
    )
    return got


@REFERENCE.visible
def test_a_frozen_copy(impl):
    "a copy of the model with its own parameters, none trainable, in eval mode, giving the model's outputs"
    got = _reference_case(impl, 50)
    expect.that(
        not got["trainable"],
        f"the reference's parameters {got['trainable'][:3]} require grad: freeze them (requires_grad_(False)), so "
        "no gradient is computed for them and no optimizer moves them",
    )
    expect.that(
        not got["training"],
        f"the reference's modules {got['training'][:3]} are in training mode: put it in eval mode (.eval()), so "
        "dropout is off when it scores answers",
    )
    expect.close(got["reference_output"], got["model_output"], "the reference's logits", atol=0.0)
    _model_kept(got)


def _model_kept(got):
    expect.that(
        got["model_trainable"] and got["model_modes_kept"],
        "frozen_reference froze the model it was given, or changed its modules' modes: the policy must stay "
        "trainable, each module in the mode it was in; freeze and switch the copy only",
    )


@REFERENCE.hidden
def test_the_models_modes_are_kept(impl):
    "a model given in eval mode, or with one block in eval mode, is left in those modes; its copy is all eval"
    for seed, mode in ((52, "eval"), (53, "mixed")):
        got = _reference_case(impl, seed, mode=mode)
        expect.that(not got["training"], f"the reference of a model in {mode} mode has modules in training mode")
        _model_kept(got)


@REFERENCE.hidden
def test_the_reference_stays_while_the_policy_trains(impl):
    "three optimizer steps on the model leave the reference's outputs exactly as they were"
    got = _reference_case(impl, 51, train_steps=3)
    expect.that(got["model_moved"], "the model did not change when trained: was it frozen by frozen_reference?")
    expect.close(
        got["reference_after"],
        got["reference_output"],
        "the reference's logits after three training steps of the model",
        atol=0.0,
        hint="The reference must not move while the policy trains.",
    )


# ---------------------------------------------------------------------------------------------------------------
# Adapters: the only code in this module that touches the student's objects (autograder.adapters).


@adapter
def call_sft_batch(ns, pairs, user, assistant, end, pad):
    given_pairs = [(list(prompt), list(response)) for prompt, response in pairs]
    output = need(ns, "sft_batch")(given_pairs, user, assistant, end, pad)
    return {"output": output, "pairs_unchanged": given_pairs == [(list(p), list(r)) for p, r in pairs]}


def _lora(ns, state, r, alpha, dropout):
    return need(ns, "LoRALinear")(_base(state), r, alpha, dropout)


def _set(layer, A, B):
    with torch.no_grad():
        layer.lora_A.copy_(A)
        layer.lora_B.copy_(B)


@adapter
def made_lora(ns, state, r, alpha, dropout, x):
    layer = _lora(ns, state, r, alpha, dropout).eval()
    with torch.no_grad():
        output = layer(x)
    return {
        "summary": summary(layer),
        "A": layer.lora_A.detach().clone(),
        "B": layer.lora_B.detach().clone(),
        "scaling": getattr(layer, "scaling", None),
        "output": output,
    }


@adapter
def run_lora(ns, state, r, alpha, dropout, A, B, x, grad_output):
    layer = _lora(ns, state, r, alpha, dropout).eval()
    _set(layer, A, B)
    xr = x.clone().requires_grad_()
    output = layer(xr)
    result = {"output": output}
    if not isinstance(output, torch.Tensor) or output.shape != grad_output.shape or not output.requires_grad:
        result["grads"] = "the output has no graph or the wrong shape"
        return result
    output.backward(grad_output)
    result["grads"] = {"lora_A": layer.lora_A.grad, "lora_B": layer.lora_B.grad, "input": xr.grad}
    return result


@adapter
def merged_lora(ns, state, r, alpha, A, B, x):
    layer = _lora(ns, state, r, alpha, 0.0).eval()
    _set(layer, A, B)
    result = {}
    with torch.no_grad():
        layer.merge()
        result["merged_flag"] = getattr(layer, "merged", None)
        result["merged_weight"] = layer.base.weight.clone()
        result["merged_bias"] = layer.base.bias.clone()
        result["merged_output"] = layer(x)
        layer.merge()
        result["merged_twice_weight"] = layer.base.weight.clone()
        layer.unmerge()
        result["unmerged_flag"] = getattr(layer, "merged", None)
        result["unmerged_weight"] = layer.base.weight.clone()
        result["unmerged_output"] = layer(x)
        layer.unmerge()
        result["unmerged_twice_weight"] = layer.base.weight.clone()
    result["base_trainable_after"] = sorted(name for name, p in layer.base.named_parameters() if p.requires_grad)
    result["lora_trainable_after"] = bool(layer.lora_A.requires_grad and layer.lora_B.requires_grad)
    return result


@adapter
def dropout_lora(ns, state, r, alpha, p, A, B, x, draws):
    torch.manual_seed(0)
    layer = _lora(ns, state, r, alpha, p)
    result = {}
    with torch.no_grad():
        layer.train()
        result["train_with_B_zero"] = layer(x)
        _set(layer, A, B)
        result["train"] = layer(x)
        result["train_repeated"] = layer(x[:1].expand(draws, -1).contiguous())
        layer.eval()
        result["eval"] = layer(x)
    return result


@adapter
def run_add_lora(ns, state, targets, r, alpha, dropout, tokens, weights, subclass_head=False):
    """The student's add_lora with the course's LoRALinear (peft's layer, ``autograder.reference.lora``)."""
    from autograder.reference.lora import LoRALinear

    model = _decoder(state, subclass_head)
    with given(ns, LoRALinear=LoRALinear):
        returned = need(ns, "add_lora")(model, list(targets), r, alpha, dropout)
    result = {"returned_model": returned is model, "returned": type(returned).__name__}
    model.eval()
    wrapped = [name for name, module in model.named_modules() if isinstance(module, LoRALinear)]
    result["wrapped"] = wrapped
    result["dropouts"] = {
        name: float(getattr(model.get_submodule(name).lora_dropout["default"], "p", 0.0)) for name in wrapped
    }
    result["trainable"] = [name for name, p in model.named_parameters() if p.requires_grad]
    result["trainable_count"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
    with torch.no_grad():
        result["start"] = model(tokens)
        for name, (a, b) in weights.items():
            if name in wrapped:
                model.get_submodule(name).lora_A["default"].weight.copy_(a)
                model.get_submodule(name).lora_B["default"].weight.copy_(b)
        result["output"] = model(tokens)
    return result


@adapter
def call_response_logprobs(ns, logits, labels, grad_output=None):
    leaf = logits.clone().requires_grad_(grad_output is not None)
    output = need(ns, "response_logprobs")(leaf, labels)
    result = {"output": output}
    if grad_output is not None:
        if isinstance(output, torch.Tensor) and output.requires_grad and output.shape == grad_output.shape:
            output.backward(grad_output)
            result["grad"] = leaf.grad
        else:
            result["grad"] = "the output has no graph or the wrong shape"
    return result


@adapter
def call_dpo_loss(ns, pc, pr, rc, rr, beta, grads=False):
    leaves = {"policy_chosen": pc.clone().requires_grad_(grads), "policy_rejected": pr.clone().requires_grad_(grads)}
    references = {"reference_chosen": rc.clone(), "reference_rejected": rr.clone()}
    got = need(ns, "dpo_loss")(*leaves.values(), *references.values(), beta)
    if not (isinstance(got, (tuple, list)) and len(got) == 3):
        return {"loss": got, "chosen": None, "rejected": None}
    loss, chosen, rejected = got
    result = {"loss": loss, "chosen": chosen, "rejected": rejected}
    if grads:
        result["rewards_detached"] = not any(getattr(t, "requires_grad", False) for t in (chosen, rejected))
        if isinstance(loss, torch.Tensor) and loss.requires_grad and loss.dim() == 0:
            loss.backward()
            result["grads"] = {name: t.grad for name, t in leaves.items()} | dict.fromkeys(references)
        else:
            result["grads"] = "the loss is not a scalar with a graph"
    return result


@adapter
def optimize_tabular_dpo(ns, log_reference, rewards, beta):
    """Minimize the expected DPO loss of a tabular policy (one logit per response) by L-BFGS, through the student's
    loss: over every ordered pair (i, j), weighted by the Bradley-Terry probability sigmoid(r_i - r_j) that i is
    preferred, one call per pair."""
    loss_of = need(ns, "dpo_loss")
    n = len(rewards)
    pairs = [(i, j) for i in range(n) for j in range(n) if i != j]
    weights = [torch.sigmoid(rewards[i] - rewards[j]) for i, j in pairs]
    logits = log_reference.clone().requires_grad_()
    optimizer = torch.optim.LBFGS(
        [logits], lr=1, max_iter=500, tolerance_grad=1e-14, tolerance_change=1e-16, line_search_fn="strong_wolfe"
    )

    def closure():
        optimizer.zero_grad()
        log_policy = torch.log_softmax(logits, 0)
        total = sum(
            w
            * loss_of(
                log_policy[i : i + 1], log_policy[j : j + 1], log_reference[i : i + 1], log_reference[j : j + 1], beta
            )[0]
            for w, (i, j) in zip(weights, pairs, strict=True)
        )
        total.backward()
        return total

    for _ in range(3):
        optimizer.step(closure)
    return torch.log_softmax(logits.detach(), 0)


@adapter
def make_reference(ns, state, tokens, train_steps, mode="train"):
    """The student's frozen_reference of a reference decoder in training mode, what it shares with the model, and
    (with ``train_steps``) the reference's outputs after the model has trained."""
    model = LlamaDecoder(_MODEL)
    model.load_state_dict(state)
    model.train(mode == "train")
    if mode == "mixed":  # one block in eval mode, the rest training
        model.train()
        model.blocks[0].eval()
    modes = {name: m.training for name, m in model.named_modules()}
    reference = need(ns, "frozen_reference")(model)
    result = {"module": isinstance(reference, nn.Module), "returned": type(reference).__name__}
    if not result["module"]:
        return result
    result["same_object"] = reference is model
    ours = {p.data_ptr(): name for name, p in model.named_parameters()}
    result["shared"] = sorted(ours[p.data_ptr()] for p in reference.parameters() if p.data_ptr() in ours)
    result["trainable"] = [name for name, p in reference.named_parameters() if p.requires_grad]
    result["training"] = [name or "(the model)" for name, m in reference.named_modules() if m.training]
    result["model_trainable"] = all(p.requires_grad for p in model.parameters())
    result["model_modes_kept"] = modes == {name: m.training for name, m in model.named_modules()}
    with torch.no_grad():
        result["model_output"] = model(tokens)
        result["reference_output"] = reference(tokens)
    if train_steps:
        before = [p.detach().clone() for p in model.parameters()]
        trainable = [p for p in model.parameters() if p.requires_grad]
        if trainable:
            optimizer = torch.optim.SGD(trainable, lr=0.1)
            for _ in range(train_steps):
                optimizer.zero_grad()
                model(tokens).logsumexp(-1).mean().backward()
                optimizer.step()
        result["model_moved"] = any(not torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))
        with torch.no_grad():
            result["reference_after"] = reference(tokens)
    return result
