"""Notebook 10's exercises, with their checks and adapters: batches, cross-entropy, AdamW, schedules, clipping, checkpoints, the loop.

Oracles: exact properties of the batches (the token stream is a permutation, so every window shows
its start; counts of 4,000 starts against the uniform count); ``F.cross_entropy`` (values and
gradients by autograd, with ``ignore_index`` and ``label_smoothing``, logits up to 1000);
``torch.optim.AdamW(foreach=False)`` over 30 steps of fixed gradients, two parameter groups with
different hyperparameters, a parameter without a gradient every third step, a ``state_dict()`` round
trip through ``torch.save``/``torch.load(weights_only=True)`` mid-run, and a closure that records
whether gradients are on when ``step`` calls it; and over 8 steps of gradients of about 1e-8, where eps
matters (eps added to sqrt(v) with the bias correction folded into the step size is about lr / 2 away
per step); the schedules' closed forms
and ``torch.optim.lr_scheduler.LinearLR`` then ``CosineAnnealingLR`` stepped through;
``torch.nn.utils.clip_grad_norm_`` (also with no gradient at all: norm 0); for checkpoints, evaluation, the loop and overfitting, the
neutral loop of ``autograder.reference.training`` (``torch.optim.AdamW``, ``F.cross_entropy``,
``clip_grad_norm_``) run here on a small model with dropout, the student's function being given
PyTorch's parts (so these exercises never rest on the student's other answers).
The loop is also run with a ``torch.optim.AdamW`` of three parameter groups that records each group's rate
at every ``step()`` (each must be ``schedule(step)``); ``overfit_one_batch`` is given a recording wrapper of
the reference loop (it must be the function that makes the updates, and the rates its schedule gives are
recorded: the first group's, given an optimizer of two groups whose defaults hold another rate);
``get_batch`` on an ``np.memmap`` of 2**21 tokens is watched by ``tracemalloc`` (NumPy reports its arrays to it)
and a ``TorchDispatchMode`` (every tensor an ATen operation makes): no copy of the whole stream; ``evaluate`` and ``train`` get a model
whose first parameter is on the meta device, and the device they ask ``get_batch`` for is recorded. They are
also given recording stand-ins for the parts they take as arguments (``get_batch``, ``loss_fn``; for ``train``
also ``schedule``, ``clip``, ``evaluate``), whose results no notebook function gives (batches of their own
generator, losses shifted by 0.25 per call, validation losses 101, 102, ...): each must be called as the text
says and its results must be what the history (or the mean) holds (atol 1e-12: the same floats; the mean 1e-5).

Tolerances (float32 on CPU), measured for the solution over 20 seeds of each case
(the solution's functions against the oracles here):
cross-entropy values atol 1e-5 + rtol 1e-5 (measured: at most 1.2e-4 absolute on losses of several
thousand, i.e. below 1e-7 relative; below 1e-6 for logits of size 1), gradients atol 1e-6 + rtol 1e-4
(measured 8.2e-8). AdamW parameters atol 1e-6 + rtol 1e-5 over 30 steps (measured 2.4e-7; rounding
does not grow); the closest known mistake after 30 steps (decay after the update, in the group with
lr 0.1 and weight decay 0.5) is 2.1e-3 away. Clipping atol 1e-6 + rtol 1e-5 (measured 0: the same
operations). Schedules rtol 1e-9 against the float64 closed form, 1e-6 against
``torch.optim.lr_scheduler``'s recursive updates (measured 1.9e-14 relative over 3,000 steps); an
off-by-one warm-up is 1/warmup_steps (relative) away. Resuming from a checkpoint: bitwise equality with
the uninterrupted run made beside it in the same process, and atol 1e-5 against the run made here
(measured 0). The loop's history and overfitting: losses atol 1e-5 (measured 0: the same operations
in the same order), learning rates rtol 1e-9; every known mistake of the loop (``tests/wrong``) moves
a loss by at least 5.6e-3 on the checks' cases. Batch statistics: each start's count over 4,000 windows within 6 binomial
standard deviations of the uniform count (a right answer fails with probability below 1e-8 per
start, and the generator is seeded, so the outcome is fixed anyway).
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import io
import math
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from autograder import expect
from autograder.adapters import adapter, need
from autograder.exercises import Exercise
from autograder.notebooks._seeds import seeded
from autograder.reference import training as ref
from autograder.rules import LOG_SOFTMAXES, Rule

GET_BATCH = Exercise("get_batch", "get_batch", points=3)
CROSS_ENTROPY = Exercise(
    "cross_entropy",
    "cross_entropy",
    points=4,
    rules=(
        Rule(
            "do not use F.cross_entropy, F.nll_loss, or any ready-made log_softmax or log-sum-exp (torch.logsumexp, "
            "logcumsumexp, logaddexp included)",
            (
                "torch.nn.functional.cross_entropy",
                "torch.nn.functional.nll_loss",
                "torch.nn.CrossEntropyLoss",
                "torch.nn.NLLLoss",
                *LOG_SOFTMAXES,
            ),
        ),
    ),
)
ADAMW = Exercise("adamw", "AdamW", points=5)
INVERSE_SQRT = Exercise("inverse_sqrt_lr", "inverse_sqrt_lr", points=2)
COSINE = Exercise("cosine_lr", "cosine_lr", points=3)
CLIP = Exercise(
    "clip_grad_norm",
    "clip_grad_norm",
    points=3,
    rules=(
        # clip_grad_norm_ is a plain Python function, unseen by torch-function modes: while the checks run its code is
        # swapped for code that refuses (autograder.rules), so a reference kept anywhere refuses too.
        Rule(
            "do not call torch.nn.utils.clip_grad_norm_ (nor its parts get_total_norm and clip_grads_with_norm_)",
            (
                "torch.nn.utils.clip_grad_norm_",
                "torch.nn.utils.clip_grad_norm",
                "torch.nn.utils.clip_grads_with_norm_",
                "torch.nn.utils.get_total_norm",
            ),
        ),
    ),
)
CHECKPOINT = Exercise("checkpoint", "save_checkpoint and load_checkpoint", points=4)
EVALUATE = Exercise("evaluate", "evaluate", points=2)
TRAIN = Exercise("train", "train", points=5)
OVERFIT = Exercise("overfit_one_batch", "overfit_one_batch", points=2)
EXERCISES = [CROSS_ENTROPY, ADAMW, INVERSE_SQRT, COSINE, CLIP, GET_BATCH, CHECKPOINT, EVALUATE, TRAIN, OVERFIT]

LOSS = {"atol": 1e-5, "rtol": 1e-5}
LOSS_GRAD = {"atol": 1e-6, "rtol": 1e-4}
ADAM = {"atol": 1e-6, "rtol": 1e-5}
CLIPPED = {"atol": 1e-6, "rtol": 1e-5}
HISTORY = {"atol": 1e-5, "rtol": 0.0}

_gen, _randn = seeded(10000)


# --- Exercise 6: get_batch ---------------------------------------------------------------


def _stream(length: int, seed: int, offset: int = 40000) -> torch.Tensor:
    """Distinct token ids (a shuffled range, above int16's maximum), so that a window shows where it starts."""
    return torch.randperm(length, generator=_gen(seed)) + offset


def _got_batch(impl, tokens, batch_size, context, **kwargs):
    got = impl.call(batch, tokens, batch_size, context, **kwargs)
    call = f"get_batch(tokens, {batch_size}, {context}, {kwargs.get('device', 'cpu')!r}, generator=...)"
    expect.that(
        got.get("returned") == "pair", f"{call} returned a {got.get('returned')}, expected a pair (inputs, targets)"
    )
    expect.that(
        got["types"] == ["Tensor", "Tensor"], f"{call} returned ({', '.join(got['types'])}), expected two torch tensors"
    )
    for name, dtype, shape in zip(("inputs", "targets"), got["dtypes"], got["shapes"], strict=True):
        expect.that(
            dtype == "torch.int64",
            f"{call}: {name} has dtype {dtype}, expected torch.int64 (embedding "
            "tables and the loss want int64: convert with .long() or .astype(np.int64))",
        )
        expect.that(
            shape == [batch_size, context], f"{call}: {name} has shape {shape}, expected {[batch_size, context]}"
        )
    return got, call


def _windows(got, call, tokens, context) -> torch.Tensor:
    """The start of each window, after checking that inputs and targets are the stream's windows."""
    position = torch.full((int(tokens.max()) + 1,), -1, dtype=torch.long)
    position[tokens] = torch.arange(len(tokens))
    inputs, targets = got["inputs"], got["targets"]
    expect.that(
        bool((inputs >= 0).all())
        and bool((inputs < len(position)).all())
        and bool((targets >= 0).all())
        and bool((targets < len(position)).all()),
        f"{call} returned ids that are not in tokens (were they cast to a smaller integer type?)",
    )
    starts = position[inputs[:, 0]]
    expect.that(bool((starts >= 0).all()), f"{call} returned ids that are not in tokens")
    expected_inputs = tokens[starts[:, None] + torch.arange(context)]
    expect.that(
        torch.equal(inputs, expected_inputs),
        f"{call}: the rows of inputs are not windows of consecutive "
        "tokens: inputs[b] must be tokens[s : s + context_length] for a start s",
    )
    if torch.equal(targets, inputs):
        expect.fail(
            f"{call}: targets equal inputs: the targets are the inputs shifted by one token, "
            "tokens[s + 1 : s + context_length + 1]"
        )
    expect.that(
        torch.equal(targets, tokens[starts[:, None] + 1 + torch.arange(context)]),
        f"{call}: targets are not the inputs shifted by one: targets[b] must be tokens[s + 1 : s + "
        "context_length + 1] for the same start s as inputs[b]",
    )
    expect.that(
        int(starts.max()) <= len(tokens) - context - 1,
        f"{call} used a start past the last valid one, len(tokens) - context_length - 1 = {len(tokens) - context - 1}",
    )
    return starts


@GET_BATCH.visible
def test_batch_windows(impl):
    "inputs and targets: int64 [batch, context]; windows of the stream; targets shifted by one; within bounds"
    tokens = _stream(50, 0)
    got, call = _got_batch(impl, tokens, 64, 8, seed=1)
    _windows(got, call, tokens, 8)


@GET_BATCH.visible
def test_batch_every_start(impl):
    "over 4,000 windows from a fixed generator every valid start occurs, about equally often (within 6 sd)"
    tokens, context, draws = _stream(20, 2), 4, 4000
    got, call = _got_batch(impl, tokens, draws, context, seed=3)
    starts = _windows(got, call, tokens, context)
    counts = torch.bincount(starts, minlength=len(tokens) - context)
    valid = len(tokens) - context
    missing = [s for s in range(valid) if counts[s] == 0]
    if missing == [valid - 1]:
        expect.fail(
            f"{call}: the last valid start, len(tokens) - context_length - 1 = {valid - 1}, never occurred "
            f"in {draws} windows: draw with torch.randint(0, len(tokens) - context_length, ...) (the upper "
            "bound is excluded)"
        )
    expect.that(
        not missing,
        f"{call}: the starts {missing} never occurred in {draws} windows; every start from 0 "
        f"to len(tokens) - context_length - 1 = {valid - 1} must be possible",
    )
    mean, sd = draws / valid, math.sqrt(draws / valid * (1 - 1 / valid))
    worst = int((counts.float() - mean).abs().argmax())
    expect.that(
        abs(float(counts[worst]) - mean) <= 6 * sd,
        f"{call}: start {worst} occurred {int(counts[worst])} "
        f"times in {draws} windows, expected about {mean:.0f} (± {6 * sd:.0f}): the starts must be uniform",
    )


@GET_BATCH.hidden
def test_batch_inputs_and_device(impl):
    "np.memmap, tensor and int32 inputs; the batch is on the device asked for (meta)"
    for kind, dtype, length, context in (
        ("memmap", "uint16", 300, 16),
        ("tensor", "int64", 40, 5),
        ("numpy", "int32", 100, 1),
    ):
        tokens = _stream(length, 10 + length, offset=40000 if dtype == "uint16" else 70000)
        got, call = _got_batch(impl, tokens, 8, context, kind=kind, dtype=dtype, seed=4)
        _windows(got, call + f" on a {kind} of {dtype}", tokens, context)
    got, call = _got_batch(impl, _stream(30, 5), 4, 6, device="meta", seed=5)
    expect.that(
        got["devices"] == ["meta", "meta"],
        f"{call}: the batch is on {got['devices'][0]}, expected the "
        "device given (here 'meta'): move it with .to(device)",
    )


@GET_BATCH.hidden
def test_batch_generator(impl):
    "the same generator seed gives the same batch whatever the global generator; another seed, another batch"
    tokens = _stream(200, 6)
    first, _ = _got_batch(impl, tokens, 16, 8, seed=7, global_seed=1)
    again, call = _got_batch(impl, tokens, 16, 8, seed=7, global_seed=2)
    expect.that(
        torch.equal(first["inputs"], again["inputs"]),
        f"{call}: with the same generator seed but another "
        "global seed (torch.manual_seed) the batch changed: draw the starts from the generator, "
        "torch.randint(..., generator=generator)",
    )
    other, _ = _got_batch(impl, tokens, 16, 8, seed=8, global_seed=1)
    expect.that(
        not torch.equal(first["inputs"], other["inputs"]),
        f"{call}: another generator seed gave the same batch: draw the starts from the generator you are given",
    )


# "Index the array with the windows' positions rather than turning the whole file into a tensor, so that a memmap is
# read only where the windows are": a memmap of 2**21 tokens (a sparse file, nothing written), 4 windows of 8.
MEMMAP_TOKENS = 2**21


@GET_BATCH.hidden
def test_batch_reads_only_the_windows(impl):
    "a memmap of 2,097,152 tokens is read only where the windows are: no copy of the whole stream, in NumPy or torch"
    got = impl.call(batch_copies, MEMMAP_TOKENS, 4, 8)
    call = f"get_batch(np.memmap of {MEMMAP_TOKENS:,} uint16 tokens, 4, 8, generator=...)"
    advice = (
        "index the memmap with the windows' positions, tokens[starts[:, None] + torch.arange(context_length + 1)] "
        "(or its slices), and convert only those windows; turning the whole file into an array or tensor reads "
        "all of it"
    )
    expect.that(
        got["numpy_peak"] < MEMMAP_TOKENS,  # a copy of the stream is 2 bytes a token at least; 4 windows, < 1 KB
        f"{call} allocated {got['numpy_peak'] / 2**20:.1f} MB of NumPy/Python memory for a batch of 4 x 9 tokens: "
        f"the whole token file was copied (converted to another dtype, np.array or tolist): {advice}",
    )
    expect.that(
        not got["torch_copies"],
        f"{call} made a torch tensor of {got['torch_copies'][:1]} numbers that is not the memmap's memory (by "
        f"{got['torch_ops'][:1]}): the whole token file was copied into a tensor (torch.tensor, .long(), "
        f"torch.as_tensor with a dtype): {advice}",
    )


# --- Exercise 1: cross_entropy -----------------------------------------------------------


def _loss_oracle(logits, targets, ignore_index=-100, label_smoothing=0.0):
    x = logits.clone().requires_grad_()
    value = F.cross_entropy(
        x.reshape(-1, x.shape[-1]), targets.reshape(-1), ignore_index=ignore_index, label_smoothing=label_smoothing
    )
    value.backward()
    return value.detach(), x.grad


def _loss_mistakes(logits, targets, ignore_index, eps):
    z, y = logits.reshape(-1, logits.shape[-1]).double(), targets.reshape(-1)
    keep = y != ignore_index
    log_p = z.log_softmax(-1)
    nll = -log_p.gather(-1, torch.where(keep, y, 0)[:, None])[:, 0]
    v = z.shape[-1]
    smooth = -log_p.mean(-1)
    others = (-log_p.sum(-1) - nll) / (v - 1)
    mistakes = [
        (
            (((1 - eps) * nll + eps * smooth) * keep).sum() / len(y),
            "the mean is over every position: divide by the number of positions whose target is not ignore_index",
        ),
        (
            ((1 - eps) * nll + eps * others)[keep].mean(),
            "the smoothing mass is spread over the V - 1 other classes; "
            "PyTorch spreads ε over all V classes, the target included: ε · mean over all classes of -log p",
        ),
        (
            F.cross_entropy(z.softmax(-1), torch.where(keep, y, -100), label_smoothing=eps),
            "softmax is applied to the logits before a loss that applies it again: the loss takes the raw logits",
        ),
    ]
    if eps:
        mistakes.append((nll[keep].mean(), "label_smoothing is ignored: (1 - ε)·(-log p_target) + ε·mean_c(-log p_c)"))
        mistakes.append(
            (
                ((1 - eps) * nll + eps * (-log_p.sum(-1)))[keep].mean(),
                "the smoothing term is the sum of -log p over the classes; PyTorch uses the mean (ε/V each)",
            )
        )
    return mistakes


def _loss_case(impl, shape, seed, scale=1.0, ignored=0.0, **kwargs):
    logits = _randn(shape, seed, scale)
    v = shape[-1]
    targets = torch.randint(0, v, shape[:-1], generator=_gen(seed + 1))
    ignore_index = kwargs.get("ignore_index", -100)
    if ignored:
        drop = torch.rand(shape[:-1], generator=_gen(seed + 2)) < ignored
        drop.view(-1)[0] = False
        targets = torch.where(drop, ignore_index, targets)
    got = impl.call(loss_and_gradient, logits, targets, kwargs)
    what = (
        f"cross_entropy(logits of shape {list(shape)}, scale {scale:g}, "
        f"{'some targets ignored, ' if ignored else ''}{', '.join(f'{k}={v}' for k, v in kwargs.items())})"
    )
    value, grad = _loss_oracle(logits, targets, ignore_index, kwargs.get("label_smoothing", 0.0))
    expect.tensor(got["value"], what)
    expect.that(got["value"].numel() == 1, f"{what} has shape {list(got['value'].shape)}, expected a scalar (the mean)")
    expect.close(
        got["value"].reshape(()),
        value,
        what,
        **LOSS,
        alternatives=[
            (m.float().reshape(()), d)
            for m, d in _loss_mistakes(logits, targets, ignore_index, kwargs.get("label_smoothing", 0.0))
        ],
        hint="Compute log p = z - m - log(sum(exp(z - m))) with m the largest logit (log-sum-exp); "
        "never log(softmax(z)), whose exponentials overflow.",
    )
    expect.that(not isinstance(got["grad"], str), f"{what}: {got['grad']}")
    expect.close(got["grad"], grad, f"the gradient of {what} with respect to the logits", **LOSS_GRAD)


@CROSS_ENTROPY.visible
def test_loss_plain(impl):
    "equals F.cross_entropy on [N, V] and [batch, seq, V] logits, value and gradient"
    _loss_case(impl, (6, 5), 0)
    _loss_case(impl, (2, 3, 7), 10)


@CROSS_ENTROPY.visible
def test_loss_stable(impl):
    "stays finite and equals F.cross_entropy for logits of size 1000"
    _loss_case(impl, (4, 6), 20, scale=1000.0)
    _loss_case(impl, (2, 5, 9), 25, scale=300.0, label_smoothing=0.1)


@CROSS_ENTROPY.visible
def test_loss_ignore_and_smoothing(impl):
    "ignore_index positions are left out of the mean; label_smoothing as PyTorch defines it"
    _loss_case(impl, (3, 8, 11), 30, ignored=0.4)
    _loss_case(impl, (5, 13), 40, label_smoothing=0.1)


@CROSS_ENTROPY.hidden
def test_loss_options_together(impl):
    "smoothing with ignored positions, another ignore_index, large logits, several shapes"
    _loss_case(impl, (4, 6, 17), 50, ignored=0.3, label_smoothing=0.2)
    _loss_case(impl, (2, 2, 3, 5), 60, scale=1000.0, ignored=0.5, ignore_index=0, label_smoothing=0.1)
    _loss_case(impl, (40, 3), 70, scale=4.0, ignored=0.2, label_smoothing=0.05)


# --- Exercise 2: AdamW -------------------------------------------------------------------

GROUPS = [
    {"params": [0, 1], "lr": 1e-2, "weight_decay": 0.1},
    {"params": [2], "lr": 0.1, "weight_decay": 0.5, "betas": (0.8, 0.9), "eps": 1e-6},
]
DEFAULTS = {"betas": (0.9, 0.999), "eps": 1e-8}


def _adam_problem(seed, steps=30, scale=1.0):
    initial = [_randn((3, 4), seed), _randn((4,), seed + 1), _randn((2, 3), seed + 2)]
    grads = []
    for k in range(steps):
        step = [_randn(tuple(t.shape), seed + 10 + 3 * k + i, scale * (0.5 + i)) for i, t in enumerate(initial)]
        if k % 3 == 1:
            step[1] = None  # parameter 1 takes no part in this loss
        grads.append(step)
    return initial, grads


def adam_oracle(initial, groups, defaults, grads, mistake=None):
    """``torch.optim.AdamW`` (mistake None) or AdamW written here with one known mistake."""
    params = [torch.nn.Parameter(t.clone()) for t in initial]
    built = [dict(g, params=[params[i] for i in g["params"]]) for g in groups]
    if mistake is None:
        optimizer = torch.optim.AdamW(built, **defaults, foreach=False)
    trajectory, state, group_steps = [], {}, [0] * len(groups)
    for step_grads in grads:
        for p, g in zip(params, step_grads, strict=True):
            p.grad = None if g is None else g.clone()
        if mistake is None:
            optimizer.step()
        else:
            with torch.no_grad():
                for gi, group in enumerate(groups):
                    options = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01} | defaults | group
                    lr, (b1, b2), eps, wd = options["lr"], options["betas"], options["eps"], options["weight_decay"]
                    group_steps[gi] += 1
                    for i in group["params"]:
                        p = params[i]
                        if p.grad is None:
                            continue
                        s = state.setdefault(i, {"step": 0, "m": torch.zeros_like(p), "v": torch.zeros_like(p)})
                        s["step"] += 1
                        t = group_steps[gi] if mistake == "group step" else s["step"]
                        g = p.grad + wd * p if mistake == "l2" else p.grad
                        if mistake not in ("l2", "decay after"):
                            p.mul_(1 - lr * wd)
                        s["m"].mul_(b1).add_(g, alpha=1 - b1)
                        s["v"].mul_(b2).addcmul_(g, g, value=1 - b2)
                        if mistake == "no bias correction":
                            m_hat, v_hat = s["m"], s["v"]
                        elif mistake == "eps folded":  # Adam's "efficient" form: eps added to sqrt(v), not sqrt(v_hat)
                            m_hat, v_hat = s["m"] * math.sqrt(1 - b2**t) / (1 - b1**t), s["v"]
                        else:
                            m_hat, v_hat = s["m"] / (1 - b1**t), s["v"] / (1 - b2**t)
                        p.addcdiv_(m_hat, v_hat.sqrt() + eps, value=-lr)
                        if mistake == "decay after":
                            p.mul_(1 - lr * wd)
        trajectory.append([p.detach().clone() for p in params])
    return trajectory


ADAM_MISTAKES = {
    "l2": "the weight decay is added to the gradient (L2, as in Adam); AdamW decays the parameter itself, "
    "p *= 1 - lr * weight_decay, apart from the gradient",
    "no bias correction": "the bias correction is missing: divide m by 1 - beta1**t and v by 1 - beta2**t",
    "decay after": "the weight decay is applied after the Adam step; AdamW shrinks the parameter first, then steps",
    "group step": "the step count t is counted per group (or per step() call); it must be per parameter, in "
    "self.state[p]['step'], and a parameter without a gradient is not counted",
    "eps folded": "the bias correction is folded into the step size, lr * sqrt(1 - beta2**t) / (1 - beta1**t) "
    "* m / (sqrt(v) + eps): eps is then added to sqrt(v), not to sqrt(v_hat), a larger eps early on (Adam's "
    "'efficient' form); AdamW divides by sqrt(v_hat) + eps with v_hat = v / (1 - beta2**t), as torch.optim.AdamW",
}


def _adam_case(
    impl, seed, *, resume_at=None, closure_at=None, groups=GROUPS, defaults=DEFAULTS, steps=30, scale=1.0, what=""
):
    initial, grads = _adam_problem(seed, steps, scale)
    got = impl.call(adamw, initial, groups, defaults, grads, resume_at=resume_at, closure_at=closure_at)
    expect.that(
        got["is_optimizer"],
        "AdamW(...) is not a torch.optim.Optimizer: subclass it and call super().__init__(params, defaults)",
    )
    expected = adam_oracle(initial, groups, defaults, grads)
    what = (
        "AdamW with two parameter groups"
        + what
        + (f", its state_dict() reloaded before step {resume_at + 1}" if resume_at is not None else "")
    )
    expect.that(len(got["trajectory"]) == len(expected), f"{what} did not run {len(expected)} steps")
    variants = {name: adam_oracle(initial, groups, defaults, grads, name) for name in ADAM_MISTAKES}
    for k, (mine, theirs) in enumerate(zip(got["trajectory"], expected, strict=True)):
        for i in range(len(theirs)):
            expect.close(
                mine[i],
                theirs[i],
                f"{what}: parameter {i} after step {k + 1}",
                **ADAM,
                alternatives=[(variants[name][k][i], ADAM_MISTAKES[name]) for name in ADAM_MISTAKES],
                hint="The oracle is torch.optim.AdamW(foreach=False). "
                + (
                    "Parameter 1 has no gradient on steps 2, 5, 8, ...: skip it entirely then "
                    "(no decay, no step, its step count unchanged). "
                    if i == 1
                    else ""
                )
                + (
                    "Was the state kept somewhere other than self.state (which state_dict() saves)?"
                    if resume_at is not None and k >= resume_at
                    else ""
                ),
            )
    return got


@ADAMW.visible
def test_adamw_steps(impl):
    "30 steps with two parameter groups equal torch.optim.AdamW's; self.state[p] has step, exp_avg, exp_avg_sq"
    got = _adam_case(impl, 0)
    keys = got["state_keys"].get("0")
    expect.that(
        bool(keys) and {"step", "exp_avg", "exp_avg_sq"} <= set(keys),
        f"self.state[p] has the keys {keys}, expected 'step', 'exp_avg' and 'exp_avg_sq'",
    )
    steps = [got["steps"].get(str(i)) for i in range(3)]
    expect.that(
        steps == [30.0, 20.0, 30.0],
        f"self.state[p]['step'] of the three parameters is {steps}, "
        "expected 30, 20 (the second had no gradient on 10 of the 30 steps) and 30",
    )


@ADAMW.hidden
def test_adamw_state_dict_round_trip(impl):
    "a state_dict() saved after 12 steps and loaded into a fresh AdamW goes on exactly as before"
    _adam_case(impl, 100, resume_at=12)


@ADAMW.hidden
def test_adamw_defaults_and_closure(impl):
    "the defaults (lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0.01); step(closure) runs it with gradients on, returns its loss"
    groups = [{"params": [0, 1, 2]}]
    got = _adam_case(impl, 200, groups=groups, defaults={}, closure_at=3, steps=8)
    expect.that(
        got.get("closure_grad_enabled") is True,
        "step(closure) called the closure with gradients switched "
        "off (step runs under torch.no_grad()), so its loss.backward() could not work: call it inside "
        "with torch.enable_grad():",
    )
    closure = got["closure"]
    expect.that(
        isinstance(closure, torch.Tensor) and float(closure) == 42.0,
        f"step(closure) returned {closure!r}, expected the closure's loss (tensor(42.))",
    )


@ADAMW.hidden
def test_adamw_eps_with_tiny_gradients(impl):
    "gradients of about 1e-8, the size of eps, over the first steps: eps is added to sqrt(v_hat), as torch.optim.AdamW does"
    # With gradients this small the step depends on eps; ADAM's bound (1e-6) is far below the folded form's gap
    # (about lr / 2 per step).
    _adam_case(impl, 300, steps=8, scale=1e-8, what=", gradients of about 1e-8")


# --- Exercises 3 and 4: the schedules ----------------------------------------------------


def _floats(values, what):
    for v in values:
        expect.that(
            isinstance(v, int | float) and not isinstance(v, bool),
            f"{what} returned a {type(v).__name__}, expected a Python float",
        )
    return [float(v) for v in values]


def _compare(got, expected, steps, what, rtol, mistakes=()):
    for step, mine, theirs in zip(steps, got, expected, strict=True):
        if abs(mine - theirs) <= rtol * abs(theirs) + 1e-15:
            continue
        for wrong, diagnosis in mistakes:
            values = [wrong(s) for s in steps]
            if all(abs(a - b) <= rtol * abs(b) + 1e-15 for a, b in zip(got, values, strict=True)):
                expect.fail(f"{what} is wrong: {diagnosis}")
        expect.fail(f"{what} at step {step} is {mine:.6g}, expected {theirs:.6g}")


def _inverse_sqrt_mistakes(d, w):
    return [
        (
            lambda s: 0.0 if s == 0 else d**-0.5 * min((s + 1) ** -0.5, (s + 1) * w**-1.5),
            "the warm-up is off by one: use the step as given (step 0 gives 0)",
        ),
        (
            lambda s: d**-0.5 * min(s**-1.5 if s else 0.0, s * w**-0.5),
            "the exponents are swapped: d_model^-0.5 · min(step^-0.5, step · warmup_steps^-1.5)",
        ),
        (
            lambda s: 0.0 if s == 0 else d**-0.5 * max(s**-0.5, s * w**-1.5),
            "max instead of min: the rate rises linearly, peaks at warmup_steps, then falls as 1/sqrt(step)",
        ),
    ]


def _inverse_sqrt_case(impl, d, w, steps):
    what = f"inverse_sqrt_lr(step, d_model={d}, warmup_steps={w})"
    got = _floats(impl.call(schedule, "inverse_sqrt_lr", steps, {"d_model": d, "warmup_steps": w}), what)
    _compare(
        got,
        [ref.inverse_sqrt_lr(s, d_model=d, warmup_steps=w) for s in steps],
        steps,
        what,
        1e-9,
        _inverse_sqrt_mistakes(d, w),
    )


@INVERSE_SQRT.visible
def test_inverse_sqrt_boundaries(impl):
    "0 at step 0; the peak d^-0.5 · warmup^-0.5 at warmup_steps; linear before, 1/sqrt(step) after"
    d, w = 512, 4000
    what = f"inverse_sqrt_lr(step, d_model={d}, warmup_steps={w})"
    got = _floats(
        impl.call(schedule, "inverse_sqrt_lr", [0, 2000, 4000, 16000], {"d_model": d, "warmup_steps": w}), what
    )
    peak = d**-0.5 * w**-0.5
    expect.that(got[0] == 0.0, f"{what} at step 0 is {got[0]:.6g}, expected 0 (no update has been made yet)")
    _compare(got, [0.0, peak / 2, peak, peak / 2], [0, 2000, 4000, 16000], what, 1e-9, _inverse_sqrt_mistakes(d, w))


@INVERSE_SQRT.hidden
def test_inverse_sqrt_closed_form(impl):
    "every step up to 3 × warmup equals the closed form, for two widths and warm-ups"
    _inverse_sqrt_case(impl, 64, 10, list(range(0, 31)))
    _inverse_sqrt_case(impl, 256, 7, list(range(0, 40, 3)))


def _cosine_mistakes(max_lr, min_lr, w, d):
    def cosine(progress):
        return min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * progress))

    return [
        (
            lambda s: (
                max_lr * (s + 1) / w
                if s < w
                else ref.cosine_lr(s, max_lr=max_lr, min_lr=min_lr, warmup_steps=w, decay_steps=d)
            ),
            "the warm-up is off by one: max_lr · step / warmup_steps, 0 at step 0 and max_lr at warmup_steps",
        ),
        (
            lambda s: max_lr * s / w if s < w else (cosine(s / d) if s <= d else min_lr),
            "the cosine runs over the wrong span: progress = (step - warmup_steps) / (decay_steps - warmup_steps)",
        ),
        (
            lambda s: max_lr * s / w if s < w else cosine((s - w) / (d - w)),
            "there is no floor after decay_steps: the cosine comes back up; return min_lr for step > decay_steps",
        ),
        (
            lambda s: max_lr * s / w if s < w else max_lr * 0.5 * (1 + math.cos(math.pi * min(s - w, d - w) / (d - w))),
            "the decay ends at 0 instead of min_lr: min_lr + (max_lr - min_lr) · (1 + cos(π · progress)) / 2",
        ),
        (
            lambda s: (
                max_lr * s / w
                if s < w
                else max_lr * 0.5 * (1 + math.cos(math.pi * (s - w) / (d - w)))
                if s <= d
                else min_lr
            ),  # the same, with the floor after decay_steps right
            "the decay ends at 0 instead of min_lr: min_lr + (max_lr - min_lr) · (1 + cos(π · progress)) / 2",
        ),
    ]


def _cosine_case(impl, max_lr, min_lr, w, d, steps, rtol=1e-9):
    kwargs = {"max_lr": max_lr, "min_lr": min_lr, "warmup_steps": w, "decay_steps": d}
    what = f"cosine_lr(step, max_lr={max_lr:g}, min_lr={min_lr:g}, warmup_steps={w}, decay_steps={d})"
    got = _floats(impl.call(schedule, "cosine_lr", steps, kwargs), what)
    _compare(
        got, [ref.cosine_lr(s, **kwargs) for s in steps], steps, what, rtol, _cosine_mistakes(max_lr, min_lr, w, d)
    )
    return got


@COSINE.visible
def test_cosine_boundaries(impl):
    "0 at step 0, max_lr at warmup_steps, halfway between at the middle of the decay, min_lr at and after decay_steps"
    max_lr, min_lr, w, d = 1e-3, 1e-4, 100, 1100
    steps = [0, 50, 100, 600, 1100, 1101, 5000]
    got = _cosine_case(impl, max_lr, min_lr, w, d, steps)
    expect.that(got[0] == 0.0 and got[2] == max_lr, "cosine_lr gives 0 at step 0 and max_lr at warmup_steps")


@COSINE.hidden
def test_cosine_against_torch(impl):
    "equals LinearLR (warm-up) then CosineAnnealingLR (decay) stepped through, and the closed form everywhere"
    max_lr, min_lr, w, d = 6e-4, 6e-5, 20, 300
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=max_lr)
    warm = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=1 / w, total_iters=w - 1)
    decay = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=d - w, eta_min=min_lr)
    theirs = [0.0]
    for step in range(1, d + 1):
        theirs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        (warm if step < w else decay).step()
    steps = list(range(0, d + 1))
    what = f"cosine_lr(step, max_lr={max_lr:g}, min_lr={min_lr:g}, warmup_steps={w}, decay_steps={d})"
    got = _floats(
        impl.call(
            schedule,
            "cosine_lr",
            steps,
            {"max_lr": max_lr, "min_lr": min_lr, "warmup_steps": w, "decay_steps": d},
        ),
        what,
    )
    _compare(
        got, theirs, steps, what + " (against torch.optim.lr_scheduler)", 1e-6, _cosine_mistakes(max_lr, min_lr, w, d)
    )
    _cosine_case(impl, 1.0, 0.0, 1, 7, list(range(0, 12)))
    _cosine_case(impl, 3e-3, 3e-4, 5, 40, list(range(0, 60, 2)))


# --- Exercise 5: clip_grad_norm ----------------------------------------------------------


def _clip_case(impl, shapes, scale, max_norm, seed, *, as_generator=False, unit=1.0):
    """``unit``: the size the gradients are compared at (they are divided by it first), so that gradients of norm
    1e-6, where the 1e-6 in the factor matters, are compared at the same relative precision as large ones."""
    grads = [None if s is None else _randn(s, seed + i, scale) for i, s in enumerate(shapes)]
    got = impl.call(clip, grads, max_norm, as_generator=as_generator)
    params = []
    for g in grads:
        p = torch.nn.Parameter(torch.zeros(3) if g is None else torch.zeros_like(g))
        p.grad = None if g is None else g.clone()
        params.append(p)
    total = torch.nn.utils.clip_grad_norm_(params, max_norm)
    what = (
        f"clip_grad_norm({'(p for p in params)' if as_generator else 'params'}, {max_norm}) with gradient norm "
        f"{float(total):.3g}{' and some parameters without gradients' if None in grads else ''}"
    )
    expect.tensor(got["total"], f"the norm returned by {what}")
    expect.close(
        got["total"].reshape(()),
        total,
        f"the norm returned by {what}",
        **CLIPPED,
        hint="Return the global norm before clipping: sqrt of the sum of every gradient's squared entries.",
    )
    for i, (mine, p) in enumerate(zip(got["grads"], params, strict=True)):
        if p.grad is None:
            expect.that(mine is None, f"{what}: a parameter without a gradient got one")
            continue
        per_param = grads[i] * min(1.0, max_norm / (float(grads[i].norm()) + 1e-6))
        mistakes = [
            (
                grads[i] * max_norm / (float(total) + 1e-6),
                "small gradients are scaled up: the factor max_norm / (norm + 1e-6) is clamped at 1",
            ),
            (
                per_param,
                "each parameter is clipped by its own norm; all gradients are scaled by one factor "
                "computed from the global norm",
            ),
            (
                grads[i] * min(1.0, max_norm / float(total)),
                "the factor is max_norm / norm, without the + 1e-6: the text's factor is "
                "min(1, max_norm / (norm + 1e-6)), as torch.nn.utils.clip_grad_norm_'s (it matters for tiny norms)",
            ),
        ]
        if as_generator:
            mistakes.append(
                (
                    grads[i],
                    "the gradients were not changed: a generator (model.parameters()) can be "
                    "iterated only once; make a list of the gradients first",
                )
            )
        expect.close(
            mine / unit,
            p.grad / unit,
            f"{what}: the gradient of parameter {i}",
            **CLIPPED,
            alternatives=[(wrong / unit, why) for wrong, why in mistakes],
        )


@CLIP.visible
def test_clip_large_and_small(impl):
    "large gradients are scaled to the norm max_norm, small ones left alone; the norm before clipping is returned"
    _clip_case(impl, [(3, 4), (5,), (2, 2)], 2.0, 1.0, 0)
    _clip_case(impl, [(3, 4), (5,)], 0.05, 1.0, 10)


@CLIP.hidden
def test_clip_none_and_generator(impl):
    "parameters without gradients are skipped; none at all gives the norm 0; a generator of parameters works"
    _clip_case(impl, [(4,), None, (2, 3), None], 3.0, 0.5, 20)
    _clip_case(impl, [(6, 2), (3,), (1,)], 1.5, 2.0, 30, as_generator=True)
    _clip_case(impl, [(3,), None], 0.1, 5.0, 40, as_generator=True)
    _clip_case(impl, [None, None], 1.0, 1.0, 50)


@CLIP.hidden
def test_clip_tiny_norms(impl):
    "gradients of norm about 2e-6 clipped to 1e-6: the factor is max_norm / (norm + 1e-6), the 1e-6 included"
    _clip_case(impl, [(3, 4), (5,)], 4e-7, 1e-6, 60, unit=1e-7)


# --- Exercise 7 --------------------------------------------------------------------------

TINY = {"batch_size": 4, "context_length": 8, "max_grad_norm": 0.5}
SCHEDULE = {"max_lr": 3e-2, "min_lr": 3e-3, "warmup_steps": 3, "decay_steps": 12}


def _tiny_state(seed):
    torch.manual_seed(10000 + seed)
    return ref.TinyLM().state_dict()


def resumed_oracle(state, tokens, total, stop, seeds, keep=("model", "optimizer", "generator", "rng")):
    """The losses after resuming at ``stop`` when the checkpoint restored only ``keep``."""
    config = ref.TrainConfig(**TINY)

    def schedule(step):
        return ref.cosine_lr(step, **SCHEDULE)

    model, optimizer = ref.tiny_setup(seeds["init"])
    model.load_state_dict(state)
    torch.manual_seed(seeds["dropout"])
    generator = torch.Generator().manual_seed(seeds["batches"])
    ref.run_steps(model, optimizer, tokens, stop, first_step=1, generator=generator, config=config, schedule=schedule)
    saved = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "generator": generator.get_state(),
        "rng": torch.get_rng_state(),
    }
    fresh_model, fresh_optimizer = ref.tiny_setup(seeds["init"] + 1)
    fresh_generator = torch.Generator().manual_seed(seeds["batches"] + 1)
    torch.manual_seed(seeds["dropout"] + 1)
    if "model" in keep:
        fresh_model.load_state_dict(saved["model"])
    if "optimizer" in keep:
        fresh_optimizer.load_state_dict(saved["optimizer"])
    if "generator" in keep:
        fresh_generator.set_state(saved["generator"])
    if "rng" in keep:
        torch.set_rng_state(saved["rng"])
    return ref.run_steps(
        fresh_model,
        fresh_optimizer,
        tokens,
        total - stop,
        first_step=stop + 1,
        generator=fresh_generator,
        config=config,
        schedule=schedule,
    )


CHECKPOINT_MISTAKES = {
    "optimizer": "the optimizer's state is not restored (save optimizer.state_dict() and load it with "
    "optimizer.load_state_dict): AdamW's m, v and step counts start again from zero",
    "generator": "the batch generator's state is not restored (generator.get_state() / generator.set_state()): "
    "the resumed run sees other batches",
    "rng": "torch's global random state is not restored (torch.get_rng_state() / torch.set_rng_state()): "
    "dropout draws other masks after resuming",
    "model": "the model's parameters are not restored (model.state_dict() / model.load_state_dict())",
}


def _checkpoint_case(impl, seed, total, stop):
    state, tokens = _tiny_state(seed), ref.tokens_for(seed)
    seeds = {"init": seed, "dropout": seed + 100, "batches": seed + 200}
    got = impl.call(checkpoint, state, tokens, TINY, SCHEDULE, total=total, stop=stop, seeds=seeds)
    what = f"saving after {stop} of {total} steps and loading into fresh objects"
    expect.that(
        got["step"] == stop and not isinstance(got["step"], bool),
        f"{what}: load_checkpoint returned {got['step']!r}, expected the saved step, {stop}",
    )
    expected = resumed_oracle(state, tokens, total, stop, seeds)
    expect.close(
        torch.tensor(got["uninterrupted"]),
        torch.tensor(resumed_oracle(state, tokens, total, 0, seeds)),
        "the uninterrupted run's losses (computed beside your code)",
        **HISTORY,
    )
    mine = torch.tensor(got["resumed"], dtype=torch.float64)
    if torch.equal(mine, torch.tensor(got["uninterrupted"][stop:], dtype=torch.float64)):
        return
    for part, diagnosis in CHECKPOINT_MISTAKES.items():
        keep = [k for k in ("model", "optimizer", "generator", "rng") if k != part]
        if torch.allclose(
            mine,
            torch.tensor(resumed_oracle(state, tokens, total, stop, seeds, keep), dtype=torch.float64),
            atol=HISTORY["atol"],
            rtol=0,
        ):
            expect.fail(f"{what}: {diagnosis}")
    expect.close(
        mine,
        torch.tensor(expected),
        f"{what}: the losses after resuming",
        atol=0.0,
        hint="Resuming must reproduce the uninterrupted run exactly: restore the model, the optimizer, the "
        "generator and torch's global random state, and return the step.",
    )


@CHECKPOINT.visible
def test_checkpoint_resumes_exactly(impl):
    "a run saved after 4 of 10 steps and loaded into fresh objects gives the uninterrupted run's losses, bit for bit"
    _checkpoint_case(impl, 0, 10, 4)


@CHECKPOINT.hidden
def test_checkpoint_other_points(impl):
    "saved after 1 step, and after 9 of 12 steps (into the cosine decay)"
    _checkpoint_case(impl, 1, 5, 1)
    _checkpoint_case(impl, 2, 12, 9)


# --- Exercise 8 --------------------------------------------------------------------------


def evaluate_oracle(state, tokens, batches, batch_size, context, seed):
    model = ref.TinyLM()
    model.load_state_dict(state)
    return ref.evaluate(
        model,
        tokens,
        batches=batches,
        batch_size=batch_size,
        context_length=context,
        generator=torch.Generator().manual_seed(seed),
    )


def _evaluate_case(impl, seed, training, batches=3, batch_size=4, context=8):
    state, tokens = _tiny_state(seed), ref.tokens_for(seed + 50)
    got = impl.call(
        evaluate,
        state,
        tokens,
        batches=batches,
        batch_size=batch_size,
        context_length=context,
        seed=seed,
        training=training,
    )
    what = f"evaluate(model in {'train' if training else 'eval'} mode, tokens, batches={batches}, ...)"
    expect.that(
        len(got["calls"]) == batches,
        f"{what} called loss_fn {len(got['calls'])} times, expected once per "
        f"batch ({batches}): use the loss_fn and get_batch you are given",
    )
    expect.that(
        not any(c["training"] for c in got["calls"]),
        f"{what}: the model was in train mode during the evaluation (dropout on): call model.eval() first",
    )
    expect.that(
        not any(c["grad_enabled"] for c in got["calls"]),
        f"{what}: gradients were recorded: evaluate under torch.no_grad()",
    )
    expect.that(
        got["training_after"] == training,
        f"{what} left the model in "
        f"{'train' if got['training_after'] else 'eval'} mode: restore the mode it was in (model.train(was_training))",
    )
    value = got["value"]
    expect.that(isinstance(value, float), f"{what} returned a {type(value).__name__}, expected a Python float")
    expected = evaluate_oracle(state, tokens, batches, batch_size, context, seed)
    expect.close(
        torch.tensor(value),
        torch.tensor(expected),
        what,
        **HISTORY,
        alternatives=[(torch.tensor(expected * batches), "the losses are summed: return their mean")],
    )


@EVALUATE.visible
def test_evaluate_mean_loss(impl):
    "the mean loss over the batches, in eval mode under no_grad; the model back in train mode after"
    _evaluate_case(impl, 0, True)


def _check_batch_devices(impl, function):
    devices = impl.call(batch_devices, function, _tiny_state(5), ref.tokens_for(305), ref.tokens_for(405, length=120))
    expect.that(bool(devices), f"{function} never called the get_batch it was given")
    expect.that(
        all(device == "meta" for device in devices),
        f"{function} asked get_batch for batches on {sorted(set(devices))} for a model whose parameters are on "
        "'meta' (standing for a GPU): pass the model's device, next(model.parameters()).device",
    )


@EVALUATE.hidden
def test_evaluate_asks_for_the_models_device(impl):
    "get_batch is asked for batches on the model's device, next(model.parameters()).device (meta here)"
    _check_batch_devices(impl, "evaluate")


@EVALUATE.hidden
def test_evaluate_uses_the_parts_it_is_given(impl):
    "recording get_batch and loss_fn passed in: a batch and a loss per batch, the mean of what loss_fn returned"
    batches = 3
    got = impl.call(evaluate_recorded, _tiny_state(6), ref.tokens_for(306), batches=batches, batch_size=2, context=5)
    what = f"evaluate(model, tokens, batches={batches}, ..., get_batch=<recording>, loss_fn=<recording>)"
    _check_used(what, "get_batch", len(got["batches"]), batches, "per batch")
    _check_used(what, "loss_fn", len(got["losses"]), batches, "per batch")
    _check_targets(what, got["losses"])
    value = got["value"]
    expect.that(isinstance(value, float), f"{what} returned a {type(value).__name__}, expected a Python float")
    mean = sum(loss["value"] for loss in got["losses"]) / batches
    expect.close(
        torch.tensor(value),
        torch.tensor(mean),
        f"{what} (the mean of the {batches} losses loss_fn returned, {mean:.6g})",
        **HISTORY,
        hint="Return the mean of what the loss_fn you are given returns, not of a loss computed otherwise.",
    )


@EVALUATE.hidden
def test_evaluate_restores_eval_mode(impl):
    "a model handed over in eval mode stays in eval mode; other sizes"
    _evaluate_case(impl, 1, False, batches=5, batch_size=2, context=5)


# --- Exercise 9 --------------------------------------------------------------------------


def train_oracle(state, train_tokens, val_tokens, config, schedule_kwargs, seed, global_seed, mistake=None):
    """The reference loop (mistake None), or the same loop written here with one known mistake."""
    config = ref.TrainConfig(**config)
    model, optimizer = ref.tiny_setup(0)
    model.load_state_dict(state)
    model.eval()
    generator = torch.Generator().manual_seed(seed)

    def schedule(step):
        return ref.cosine_lr(step, **schedule_kwargs)

    torch.manual_seed(global_seed)
    if mistake is None:
        return ref.train(model, optimizer, train_tokens, val_tokens, config, schedule=schedule, generator=generator)
    history = {"train_loss": [], "lr": [], "val_loss": []}
    if mistake != "no train mode":
        model.train()
    for step in range(1, config.max_steps + 1):
        lr = schedule(step - 1 if mistake == "lr t-1" else step)
        for group in optimizer.param_groups:
            group["lr"] = lr
        inputs, targets = ref.get_batch(train_tokens, config.batch_size, config.context_length, generator=generator)
        loss = ref.loss_fn(model(inputs), targets)
        if mistake != "no zero_grad":
            optimizer.zero_grad()
        loss.backward()
        if mistake == "clip after step":
            optimizer.step()
            ref.clip(model.parameters(), config.max_grad_norm)
        else:
            ref.clip(model.parameters(), config.max_grad_norm)
            optimizer.step()
        history["train_loss"].append(loss.item())
        history["lr"].append(lr)
        if step % config.eval_interval == 0 or step == config.max_steps:
            val_generator = generator if mistake == "val generator" else torch.Generator().manual_seed(config.eval_seed)
            history["val_loss"].append(
                ref.evaluate(
                    model,
                    val_tokens,
                    batches=config.eval_batches,
                    batch_size=config.batch_size,
                    context_length=config.context_length,
                    generator=val_generator,
                )
            )
    return history


TRAIN_MISTAKES = {
    "no zero_grad": "the gradients are never zeroed: call optimizer.zero_grad() before loss.backward() at every step",
    "clip after step": "the gradients are clipped after optimizer.step(): clip first, then step",
    "lr t-1": "update t uses schedule(t - 1): the step numbers are 1..max_steps and update t uses schedule(t)",
    "val generator": "the validation batches come from the training generator: use a fresh "
    "torch.Generator().manual_seed(config.eval_seed) at each evaluation",
    "no train mode": "the model was never put in train mode (model.train()), so it trained without dropout",
}


def _train_case(impl, seed, config, schedule_kwargs):
    state = _tiny_state(seed)
    train_tokens, val_tokens = ref.tokens_for(seed + 300), ref.tokens_for(seed + 400, length=120)
    got = impl.call(
        train,
        state,
        train_tokens,
        val_tokens,
        config,
        schedule_kwargs,
        seed=seed + 500,
        global_seed=seed + 600,
    )
    history = got["history"]
    what = f"train(..., TrainConfig({', '.join(f'{k}={v}' for k, v in config.items())}))"
    expect.that(
        "__unsupported__" not in history,
        f"{what} returned a {history.get('__unsupported__')}, expected the history dict",
    )
    keys = ("step", "train_loss", "lr", "tokens_per_s", "val_step", "val_loss")
    missing = [k for k in keys if k not in history]
    expect.that(not missing, f"the history of {what} has no key(s) {missing}; expected {list(keys)}")
    expected = train_oracle(state, train_tokens, val_tokens, config, schedule_kwargs, seed + 500, seed + 600)
    for key in keys:
        expect.that(
            isinstance(history[key], list), f"history[{key!r}] is a {type(history[key]).__name__}, expected a list"
        )
        expect.that(
            len(history[key]) == len(expected[key]),
            f"history[{key!r}] of {what} has {len(history[key])} "
            f"entries, expected {len(expected[key])}"
            + (
                " (one per validation: every eval_interval updates and after the last one)"
                if key.startswith("val")
                else " (one per update)"
            ),
        )
    expect.that(
        list(history["step"]) == expected["step"] and list(history["val_step"]) == expected["val_step"],
        f"the steps of {what} are {history['step']} and val_step {history['val_step']}, expected "
        f"{expected['step']} and {expected['val_step']}",
    )
    expect.that(
        all(isinstance(v, float) and v > 0 for v in history["tokens_per_s"]),
        "history['tokens_per_s'] must hold positive floats (the batch's tokens / the update's seconds)",
    )
    variants = {
        m: train_oracle(state, train_tokens, val_tokens, config, schedule_kwargs, seed + 500, seed + 600, m)
        for m in TRAIN_MISTAKES
    }
    for key, tol in (("lr", {"atol": 1e-12, "rtol": 1e-9}), ("train_loss", HISTORY), ("val_loss", HISTORY)):
        expect.close(
            torch.tensor(history[key], dtype=torch.float64),
            torch.tensor(expected[key], dtype=torch.float64),
            f"history[{key!r}] of {what}",
            **tol,
            alternatives=[(torch.tensor(v[key], dtype=torch.float64), TRAIN_MISTAKES[m]) for m, v in variants.items()],
            hint="The oracle is the same loop with torch.optim.AdamW, F.cross_entropy and clip_grad_norm_: "
            "per update, lr into every group, batch, forward, loss, zero_grad, backward, clip, step.",
        )
    expect.that(got["training_after"], f"after {what} the model is in eval mode: it should be in train mode")


@TRAIN.visible
def test_train_history(impl):
    "the history (losses, lr, validation) equals the reference loop's on a small model with dropout"
    _train_case(
        impl,
        0,
        {
            "batch_size": 4,
            "context_length": 8,
            "max_steps": 9,
            "eval_interval": 4,
            "eval_batches": 2,
            "max_grad_norm": 0.5,
        },
        SCHEDULE,
    )


@TRAIN.hidden
def test_train_asks_for_the_models_device(impl):
    "get_batch is asked for batches on the model's device, next(model.parameters()).device (meta here)"
    _check_batch_devices(impl, "train")


@TRAIN.hidden
def test_train_shows_a_progress_bar(impl):
    "a tqdm bar over the max_steps updates with loss, lr and tokens/s in its postfix; none shown with progress=False"
    config = {
        "batch_size": 2,
        "context_length": 6,
        "max_steps": 5,
        "eval_interval": 5,
        "eval_batches": 1,
        "max_grad_norm": 1.0,
    }
    got = impl.call(
        train_bars,
        _tiny_state(3),
        ref.tokens_for(303),
        ref.tokens_for(403, length=120),
        config,
        SCHEDULE,
        seed=503,
    )
    shown = [bar for bar in got["True"] if not bar["disabled"]]
    expect.that(
        len(shown) >= 1,
        "train(..., progress=True) showed no tqdm bar: wrap the steps in tqdm(..., disable=not progress)",
    )
    steps = [bar for bar in shown if bar["total"] == 5]
    expect.that(
        steps,
        f"train(..., progress=True) showed bars of lengths {[b['total'] for b in shown]}: the bar runs "
        "over the max_steps (here 5) updates",
    )
    postfixes = [text.lower() for bar in steps for text in bar["postfixes"]]
    expect.that(
        len(postfixes) >= 5,
        f"the bar's postfix was set {len(postfixes)} times over 5 updates: call bar.set_postfix(...) at every update",
    )
    missing = [
        name
        for name, words in (("the loss", ("loss",)), ("the learning rate", ("lr", "learning")), ("tokens/s", ("tok",)))
        if not any(w in postfixes[-1] for w in words)
    ]
    expect.that(
        not missing,
        f"the bar's postfix {postfixes[-1]!r} does not show {' and '.join(missing)}: "
        "bar.set_postfix(loss=..., lr=..., tok_s=...)",
    )
    expect.that(
        all(bar["disabled"] for bar in got["False"]),
        "train(..., progress=False) still showed a bar: tqdm(..., disable=not progress)",
    )


@TRAIN.hidden
def test_train_other_settings(impl):
    "another schedule, batch size, clipping threshold and evaluation interval"
    _train_case(
        impl,
        1,
        {
            "batch_size": 3,
            "context_length": 6,
            "max_steps": 7,
            "eval_interval": 3,
            "eval_batches": 1,
            "max_grad_norm": 0.1,
            "eval_seed": 7,
        },
        {"max_lr": 5e-2, "min_lr": 0.0, "warmup_steps": 2, "decay_steps": 6},
    )


GROUP_RATES = (0.123, 0.456, 0.789)  # the groups' initial rates: none is a value of the schedule below


@TRAIN.hidden
def test_train_sets_every_group(impl):
    "with three parameter groups (decay, no decay, embeddings), every group runs each update at schedule(step)"
    config = {
        "batch_size": 2,
        "context_length": 6,
        "max_steps": 5,
        "eval_interval": 5,
        "eval_batches": 1,
        "max_grad_norm": 1.0,
    }
    got = impl.call(
        train_groups, _tiny_state(4), ref.tokens_for(304), ref.tokens_for(404, length=120), config, SCHEDULE
    )
    rates = got["rates"]
    what = f"train(..., max_steps={config['max_steps']}) with an optimizer of {len(GROUP_RATES)} parameter groups"
    expect.that(
        len(rates) == config["max_steps"],
        f"{what} called optimizer.step() {len(rates)} times, expected once per update ({config['max_steps']})",
    )
    expected = [ref.cosine_lr(step, **SCHEDULE) for step in range(1, config["max_steps"] + 1)]
    wrong = [
        (step, group, rate, lr)
        for step, (seen, lr) in enumerate(zip(rates, expected, strict=True), start=1)
        for group, rate in enumerate(seen)
        if not math.isclose(rate, lr, rel_tol=1e-12, abs_tol=1e-15)  # the same float, set or computed alike
    ]
    if not wrong:
        return
    if all(group > 0 for _, group, _, _ in wrong) and all(
        math.isclose(rate, GROUP_RATES[group]) for _, group, rate, _ in wrong
    ):
        expect.fail(
            f"{what}: the scheduled learning rate was set on the first parameter group only "
            "(optimizer.param_groups[0]['lr'] = lr); the other groups trained at their initial rates "
            f"{list(GROUP_RATES[1:])}. Write it into every group: for group in optimizer.param_groups: "
            "group['lr'] = lr"
        )
    step, group, rate, lr = wrong[0]
    expect.fail(
        f"{what}: update {step} ran parameter group {group} at lr {rate:.6g}, expected schedule({step}) = "
        f"{lr:.6g} in every group (for group in optimizer.param_groups: group['lr'] = lr, before optimizer.step())"
    )


PARTS_CONFIG = {  # validations after updates 2, 4 and 5 (the last)
    "batch_size": 2,
    "context_length": 6,
    "max_steps": 5,
    "eval_interval": 2,
    "eval_batches": 2,
    "max_grad_norm": 0.7,
    "eval_seed": 11,
}


def _check_used(what, part, calls, expected, per):
    expect.that(
        calls == expected,
        f"{what} called the {part} it was given {calls} times, expected {expected} (once {per}): call the {part} "
        f"argument (the checks pass their own), not a function of the notebook by name",
    )


def _check_targets(what, losses):
    expect.that(
        all(loss["targets"] for loss in losses),
        f"{what}: the targets handed to loss_fn are not those the get_batch it was given returned: "
        "inputs, targets = get_batch(...); loss_fn(model(inputs), targets)",
    )


@TRAIN.hidden
def test_train_uses_the_parts_it_is_given(impl):
    "recording get_batch, loss_fn, clip, schedule and evaluate passed in: each used, its results in the history"
    config, steps = PARTS_CONFIG, PARTS_CONFIG["max_steps"]
    got = impl.call(train_recorded, _tiny_state(7), ref.tokens_for(307), ref.tokens_for(407, length=120), config)
    what = f"train(..., max_steps={steps}) with recording parts"
    training = [loss for loss in got["losses"] if not loss["evaluating"]]
    _check_used(what, "get_batch", got["batches"].count(False), steps, "per update, besides evaluate's")
    _check_used(what, "loss_fn", len(training), steps, "per update, besides evaluate's")
    _check_targets(what, training)
    _check_used(what, "clip", len(got["clips"]), steps, "per update")
    expect.that(
        all(c["max_norm"] == config["max_grad_norm"] and c["models"] for c in got["clips"]),
        f"{what} called clip with other arguments than the model's parameters and config.max_grad_norm "
        f"({config['max_grad_norm']}): clip(model.parameters(), config.max_grad_norm)",
    )
    expect.that(
        sorted(set(got["steps"])) == list(range(1, steps + 1)),
        f"{what} called the schedule it was given with the steps {sorted(set(got['steps']))}, expected 1..{steps}: "
        "lr = schedule(step) at every update",
    )
    validations = [step for step in range(1, steps + 1) if step % config["eval_interval"] == 0 or step == steps]
    _check_used(what, "evaluate", len(got["evaluations"]), len(validations), f"per validation, after {validations}")
    history = got["history"]
    expect.that(
        isinstance(history, dict) and all(isinstance(history.get(k), list) for k in ("train_loss", "lr", "val_loss")),
        f"{what} returned no history dict of lists",
    )
    for key, expected, source in (
        ("train_loss", [loss["value"] for loss in training], "loss.item() of loss = loss_fn(model(inputs), targets)"),
        ("lr", [PARTS_RATE * step for step in range(1, steps + 1)], "lr = schedule(step)"),
        ("val_loss", [evaluation["value"] for evaluation in got["evaluations"]], "what evaluate returned"),
    ):
        expect.close(
            torch.tensor(history[key], dtype=torch.float64),
            torch.tensor(expected, dtype=torch.float64),
            f"history[{key!r}] of {what}",
            atol=1e-12,  # the given parts' own floats, stored as they are
            rtol=0.0,
            hint=f"Store {source}, from the parts given as arguments.",
        )
    for evaluation in got["evaluations"]:
        expect.that(
            evaluation["batches"] == evaluation["losses"] == config["eval_batches"],
            f"{what}: evaluate drew {evaluation['batches']} batches with train's get_batch and computed "
            f"{evaluation['losses']} losses with its loss_fn, expected {config['eval_batches']} of each: pass them on, "
            "evaluate(..., get_batch=get_batch, loss_fn=loss_fn)",
        )
        sizes = [config[name] for name in ("eval_batches", "batch_size", "context_length")]
        expect.that(
            evaluation["model"] and evaluation["sizes"] == sizes and evaluation["seed"] == config["eval_seed"],
            f"{what} called evaluate with batches, batch_size, context_length = {evaluation['sizes']} and a "
            f"generator seeded {evaluation['seed']}, expected the model, {sizes} and "
            f"torch.Generator().manual_seed(config.eval_seed) ({config['eval_seed']})",
        )


# --- Exercise 10 -------------------------------------------------------------------------


def overfit_oracle(state, inputs, targets, steps, lr):
    model = ref.TinyLM(dropout=0.0)
    model.load_state_dict(state)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0, foreach=False)
    config = ref.TrainConfig(
        batch_size=inputs.shape[0], context_length=inputs.shape[1], max_steps=steps, eval_interval=steps, eval_batches=1
    )
    return ref.train(
        model,
        optimizer,
        None,
        None,
        config,
        schedule=lambda step: lr,
        generator=None,
        get_batch=lambda *args, **kwargs: (inputs, targets),
    )["train_loss"]


def _overfit_case(impl, seed, steps, lr, shape=(4, 8), final=None):
    state = _tiny_state(seed)
    inputs = torch.randint(0, 16, shape, generator=_gen(seed + 700))
    targets = torch.randint(0, 16, shape, generator=_gen(seed + 701))
    got = impl.call(overfit, state, inputs, targets, steps=steps, lr=lr)["losses"]
    what = f"overfit_one_batch(model, AdamW(lr={lr:g}), a batch of shape {list(shape)}, steps={steps})"
    expect.that(isinstance(got, list), f"{what} returned a {type(got).__name__}, expected the list of training losses")
    expect.that(
        len(got) == steps, f"{what} returned {len(got)} losses, expected {steps}, one per step (history['train_loss'])"
    )
    expect.that(all(isinstance(v, float) for v in got), f"{what} returned a list holding other things than floats")
    expected = overfit_oracle(state, inputs, targets, steps, lr)
    mistakes = [
        (
            torch.tensor(overfit_oracle(state, inputs, targets, steps, 1e-3)),
            "the learning rate is not the optimizer's: the schedule must return "
            "optimizer.param_groups[0]['lr'] at every step",
        )
    ]
    if final is not None and not got[-1] < final:  # a known mistake first: it says more than the last loss
        for wrong, diagnosis in mistakes:
            if torch.allclose(torch.tensor(got, dtype=torch.float64), wrong.double(), **HISTORY):
                expect.fail(f"{what} is wrong: {diagnosis}")
        expect.fail(f"{what}: the last loss is {got[-1]:.4f}, expected below {final}")
    expect.close(
        torch.tensor(got),
        torch.tensor(expected),
        what,
        **HISTORY,
        alternatives=mistakes,
        hint="The oracle calls the loop with a get_batch that always returns (inputs, targets) and a constant "
        "schedule.",
    )


@OVERFIT.visible
def test_overfit_reaches_zero(impl):
    "100 steps on one batch bring a tiny model's loss below 0.05, equal to the reference loop's losses"
    _overfit_case(impl, 0, 100, 3e-2, final=0.05)


@OVERFIT.hidden
def test_overfit_other_batch(impl):
    "another batch shape, learning rate and number of steps"
    _overfit_case(impl, 1, 30, 1e-2, shape=(2, 5))


@OVERFIT.hidden
def test_overfit_calls_the_given_train(impl):
    "the steps are made by the train it is given (the argument), once, with the model, the optimizer and the config; the schedule gives the first group's rate (not the defaults')"
    steps, shape = 7, (3, 6)
    state = _tiny_state(2)
    inputs = torch.randint(0, 16, shape, generator=_gen(720))
    targets = torch.randint(0, 16, shape, generator=_gen(721))
    lr, default, second = 2e-2, 1e-4, 5e-3
    got = impl.call(overfit, state, inputs, targets, steps=steps, lr=lr, record=True, other_lrs=(default, second))
    calls = got["calls"]
    what = (
        f"overfit_one_batch(model, optimizer, a batch of shape {list(shape)}, steps={steps}, train=...) with "
        f"param_groups[0]['lr'] = {lr:g}, param_groups[1]['lr'] = {second:g}, optimizer.defaults['lr'] = {default:g}"
    )
    expect.that(
        len(calls) >= 1,
        f"{what} never called the train it was given (its train argument): make the {steps} updates by calling "
        "train(model, optimizer, None, None, config, schedule=..., generator=None, get_batch=..., progress=False), "
        "not a loop of its own",
    )
    expect.that(
        len(calls) == 1, f"{what} called train {len(calls)} times, expected once (one run of max_steps={steps})"
    )
    call = calls[0]
    expect.that(
        call["model"] and call["optimizer"],
        f"{what} called train without the model and the optimizer it was given (train(model, optimizer, ...))",
    )
    sizes = (call["batch_size"], call["context_length"], call["max_steps"])
    expect.that(
        sizes == (shape[0], shape[1], steps),
        f"{what} called train with a config of batch_size, context_length, max_steps = {sizes}, expected "
        f"{(shape[0], shape[1], steps)} (the batch's shape and steps)",
    )
    _check_constant_rate(
        what, call.get("lr", []), lr, {default: "optimizer.defaults['lr']", second: "the last group's rate"}
    )


def _check_constant_rate(what: str, rates: list, lr: float, others: dict) -> None:
    """ "A constant schedule: the learning rate of the optimizer's first group when the function is called"."""
    if rates and all(math.isclose(rate, lr, rel_tol=1e-9) for rate in rates):
        return
    for other, name in others.items():
        if rates and all(math.isclose(rate, other, rel_tol=1e-9) for rate in rates):
            expect.fail(
                f"{what}: the schedule gave {other:g} at every step, {name}; the rate is the first group's, "
                "optimizer.param_groups[0]['lr'] when the function is called (a group's own rate: the defaults "
                "only fill in groups that give none)"
            )
    expect.fail(
        f"{what}: the schedule gave the rates {rates[:4]}...; expected {lr:g} at every step, the first group's "
        "rate optimizer.param_groups[0]['lr'] read when the function is called"
    )


# ---------------------------------------------------------------------------------------------------------------
# Adapters: the only code in this module that touches the student's objects. They run beside the student's code
# (in the sandboxed worker while grading, in the kernel for the notebook's own test cells), build and call the
# student's classes and functions on the inputs a check gives, and return plain results; they compute and report,
# never judge. A check calls one by reference, ``impl.call(name, ...)``; only functions marked ``@adapter`` can be.
#
# Adapters for notebook 10: batches, cross-entropy, AdamW, schedules, clipping, checkpoints, the loop.
#
# The exercises that use other parts (checkpoints, evaluate, train, overfit_one_batch) get PyTorch's
# parts and the neutral loop of ``autograder.reference.training`` injected, so each is graded alone.


def _describe_batch(value, with_values: bool) -> dict:
    if not isinstance(value, tuple | list) or len(value) != 2:
        return {"returned": type(value).__name__}
    result = {"returned": "pair", "types": [type(v).__name__ for v in value]}
    if all(isinstance(v, torch.Tensor) for v in value):
        result |= {
            "devices": [str(v.device) for v in value],
            "dtypes": [str(v.dtype) for v in value],
            "shapes": [list(v.shape) for v in value],
        }
        if with_values:
            result |= {"inputs": value[0], "targets": value[1]}
    return result


@adapter
def batch(
    ns,
    tokens: torch.Tensor,
    batch_size: int,
    context_length: int,
    *,
    kind: str = "numpy",
    dtype: str = "uint16",
    device: str = "cpu",
    seed: int | None = 0,
    global_seed: int = 0,
) -> dict:
    """``get_batch`` on ``tokens`` handed over as a NumPy array, an ``np.memmap`` file or a tensor."""
    get_batch = need(ns, "get_batch")
    array = tokens.numpy().astype(dtype)
    with tempfile.TemporaryDirectory(
        prefix="get-batch-", ignore_cleanup_errors=True
    ) as folder:  # removed afterwards, also when run unsandboxed
        if kind == "memmap":
            array.tofile(Path(folder) / "tokens.bin")
            data = np.memmap(Path(folder) / "tokens.bin", dtype=dtype, mode="r")
        elif kind == "tensor":
            data = torch.from_numpy(array.astype(np.int64))
        else:
            data = array
        torch.manual_seed(global_seed)
        generator = None if seed is None else torch.Generator().manual_seed(seed)
        value = get_batch(data, batch_size, context_length, device, generator=generator)
        return _describe_batch(value, with_values=device != "meta")


@adapter
def batch_copies(ns, length: int, batch_size: int, context_length: int) -> dict:
    """``get_batch`` on an ``np.memmap`` of ``length`` uint16 tokens (a sparse file of zeros): the peak of the
    NumPy and Python memory it allocated (``tracemalloc``, which NumPy reports its arrays to), and the sizes of the
    tensors of half the stream or more that an ATen operation made outside the memmap's memory (a
    ``TorchDispatchMode`` sees every one, however it was reached; ``torch.from_numpy`` of the memmap and its views
    are the memmap's memory, not a copy)."""
    import tracemalloc

    from torch.utils._python_dispatch import TorchDispatchMode

    get_batch = need(ns, "get_batch")
    copies, ops = [], []

    with tempfile.TemporaryDirectory(prefix="get-batch-", ignore_cleanup_errors=True) as folder:
        path = Path(folder) / "tokens.bin"
        with open(path, "wb") as file:
            file.truncate(2 * length)  # a sparse file: nothing is written
        data = np.memmap(path, dtype=np.uint16, mode="r")
        low, high = data.ctypes.data, data.ctypes.data + data.nbytes

        class Record(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                result = func(*args, **(kwargs or {}))
                for value in result if isinstance(result, tuple | list) else (result,):
                    if (
                        isinstance(value, torch.Tensor)
                        and value.numel() >= length // 2
                        and not low <= value.untyped_storage().data_ptr() < high
                    ):
                        copies.append(value.numel())
                        ops.append(str(func))
                return result

        tracing = tracemalloc.is_tracing()
        if not tracing:
            tracemalloc.start()
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        try:
            with Record():
                get_batch(data, batch_size, context_length, "cpu", generator=torch.Generator().manual_seed(0))
            peak = tracemalloc.get_traced_memory()[1] - before
        finally:
            if not tracing:
                tracemalloc.stop()
        del data
    return {"numpy_peak": peak, "torch_copies": copies, "torch_ops": ops}


# --- Exercise 1: cross_entropy -----------------------------------------------------------


@adapter
def loss_and_gradient(ns, logits: torch.Tensor, targets: torch.Tensor, kwargs: dict) -> dict:
    """``cross_entropy(logits, targets, **kwargs)`` and the gradient of the loss with respect to ``logits``."""
    cross_entropy = need(ns, "cross_entropy")
    given = logits.clone().requires_grad_()
    value = cross_entropy(given, targets, **kwargs)
    result = {"value": value}
    if not isinstance(value, torch.Tensor) or value.numel() != 1:
        return result
    if not value.requires_grad:
        result["grad"] = "the loss does not require grad: was it computed from .detach(), .item() or under no_grad?"
        return result
    value.reshape(()).backward()
    result["grad"] = given.grad if given.grad is not None else torch.zeros_like(given)
    return result


# --- Exercise 2: AdamW -------------------------------------------------------------------


@adapter
def adamw(
    ns,
    initial: list,
    groups: list,
    defaults: dict,
    grads: list,
    *,
    resume_at: int | None = None,
    closure_at: int | None = None,
) -> dict:
    """Run the student's AdamW over a fixed sequence of gradients (None: no gradient this step).

    ``groups``: ``[{"params": [indices], **options}]``. At ``resume_at`` the optimizer's ``state_dict()`` goes
    through ``torch.save``/``torch.load(weights_only=True)`` into a fresh optimizer. At ``closure_at`` the
    gradients are set by a closure passed to ``step``.
    """
    optimizer_class = need(ns, "AdamW")
    params = [nn.Parameter(t.clone()) for t in initial]

    def make():
        return optimizer_class([dict(g, params=[params[i] for i in g["params"]]) for g in groups], **defaults)

    optimizer = make()
    result = {"is_optimizer": isinstance(optimizer, torch.optim.Optimizer), "trajectory": [], "closure": None}
    if not result["is_optimizer"]:
        return result
    for k, step_grads in enumerate(grads):
        if k == resume_at:
            buffer = io.BytesIO()
            torch.save(optimizer.state_dict(), buffer)
            buffer.seek(0)
            saved = torch.load(buffer, weights_only=True)
            optimizer = make()
            optimizer.load_state_dict(saved)
        for p, g in zip(params, step_grads, strict=True):
            p.grad = None if g is None else g.clone()
        if k == closure_at:
            given = [None if g is None else g.clone() for g in step_grads]

            def closure(given=given):
                result["closure_grad_enabled"] = torch.is_grad_enabled()
                for p, g in zip(params, given, strict=True):
                    p.grad = None if g is None else g.clone()
                return torch.tensor(42.0)

            for p in params:
                p.grad = None
            result["closure"] = optimizer.step(closure)
        else:
            optimizer.step()
        result["trajectory"].append([p.detach().clone() for p in params])
    result["state_keys"] = {
        i: sorted(map(str, optimizer.state[p].keys())) for i, p in enumerate(params) if p in optimizer.state
    }
    result["steps"] = {
        i: float(optimizer.state[p]["step"])
        for i, p in enumerate(params)
        if p in optimizer.state and "step" in optimizer.state[p]
    }
    return result


# --- Exercises 3 and 4: the schedules ----------------------------------------------------


@adapter
def schedule(ns, name: str, steps: list, kwargs: dict) -> list:
    function = need(ns, name)
    return [function(step, **kwargs) for step in steps]


# --- Exercise 5: clip_grad_norm ----------------------------------------------------------


@adapter
def clip(ns, grads: list, max_norm: float, *, as_generator: bool = False) -> dict:
    """``clip_grad_norm`` on parameters with these gradients (None: no gradient); the norm and the gradients."""
    clip_grad_norm = need(ns, "clip_grad_norm")
    params = []
    for g in grads:
        p = nn.Parameter(torch.zeros(3) if g is None else torch.zeros_like(g))
        p.grad = None if g is None else g.clone()
        params.append(p)
    given = (p for p in params) if as_generator else list(params)
    total = clip_grad_norm(given, max_norm)
    return {"total": total, "grads": [p.grad for p in params]}


# --- Exercise 7 --------------------------------------------------------------------------


@adapter
def checkpoint(
    ns, state: dict, tokens: torch.Tensor, config: dict, schedule_kwargs: dict, *, total: int, stop: int, seeds: dict
) -> dict:
    """A reference run of ``total`` updates, and the same run saved after ``stop`` and resumed into fresh objects."""
    save_checkpoint, load_checkpoint = need(ns, "save_checkpoint"), need(ns, "load_checkpoint")
    config = ref.TrainConfig(**config)

    def schedule(step):
        return ref.cosine_lr(step, **schedule_kwargs)

    def start():
        model, optimizer = ref.tiny_setup(seeds["init"])
        model.load_state_dict(state)
        torch.manual_seed(seeds["dropout"])
        return model, optimizer, torch.Generator().manual_seed(seeds["batches"])

    model, optimizer, generator = start()
    uninterrupted = ref.run_steps(
        model, optimizer, tokens, total, first_step=1, generator=generator, config=config, schedule=schedule
    )
    model, optimizer, generator = start()
    first = ref.run_steps(
        model, optimizer, tokens, stop, first_step=1, generator=generator, config=config, schedule=schedule
    )
    with tempfile.TemporaryDirectory(
        prefix="checkpoint-", ignore_cleanup_errors=True
    ) as folder:  # removed afterwards, also unsandboxed
        path = Path(folder) / "run.pt"
        save_checkpoint(path, model=model, optimizer=optimizer, step=stop, generator=generator)
        fresh_model, fresh_optimizer = ref.tiny_setup(seeds["init"] + 1)  # other weights, an empty optimizer
        fresh_generator = torch.Generator().manual_seed(seeds["batches"] + 1)
        torch.manual_seed(seeds["dropout"] + 1)  # another global random state
        step = load_checkpoint(path, model=fresh_model, optimizer=fresh_optimizer, generator=fresh_generator)
    following = (step if isinstance(step, int) and not isinstance(step, bool) else stop) + 1
    resumed = ref.run_steps(
        fresh_model,
        fresh_optimizer,
        tokens,
        total - stop,
        first_step=following,
        generator=fresh_generator,
        config=config,
        schedule=schedule,
    )
    return {
        "uninterrupted": uninterrupted,
        "first": first,
        "resumed": resumed,
        "step": step if isinstance(step, int | float | None) else {"__unsupported__": type(step).__qualname__},
    }


# --- Exercise 8 --------------------------------------------------------------------------


@adapter
def evaluate(
    ns,
    state: dict,
    tokens: torch.Tensor,
    *,
    batches: int,
    batch_size: int,
    context_length: int,
    seed: int,
    training: bool,
) -> dict:
    """``evaluate`` on a TinyLM (with dropout) handed over in train or eval mode, with PyTorch's loss injected."""
    evaluate = need(ns, "evaluate")
    model = ref.TinyLM()
    model.load_state_dict(state)
    model.train(training)
    calls = []

    def loss_fn(logits, targets):
        calls.append({"training": model.training, "grad_enabled": torch.is_grad_enabled()})
        return ref.loss_fn(logits, targets)

    torch.manual_seed(0)
    value = evaluate(
        model,
        tokens,
        batches=batches,
        batch_size=batch_size,
        context_length=context_length,
        generator=torch.Generator().manual_seed(seed),
        get_batch=ref.get_batch,
        loss_fn=loss_fn,
    )
    return {"value": value, "calls": calls, "training_after": model.training}


class _ReportsMeta(nn.Module):
    """A TinyLM whose first parameter (unused) is on the meta device: ``next(model.parameters()).device`` says
    'meta' while the model computes on the CPU, so the device a function asks get_batch for can be observed."""

    def __init__(self, state: dict):
        super().__init__()
        self.where = nn.Parameter(torch.zeros(1, device="meta"))
        self.inner = ref.TinyLM()
        self.inner.load_state_dict(state)

    def forward(self, tokens):
        return self.inner(tokens)


@adapter
def batch_devices(ns, function: str, state: dict, train_tokens: torch.Tensor, val_tokens: torch.Tensor) -> list:
    """The device ``evaluate`` or ``train`` (a short run) asks ``get_batch`` for, at every call, for a model whose
    first parameter is on the meta device; the batches themselves are made on the CPU."""
    model, devices = _ReportsMeta(state), []

    def get_batch(tokens, batch_size, context_length, device="cpu", *, generator=None):
        devices.append(str(torch.device(device)))
        return ref.get_batch(tokens, batch_size, context_length, generator=generator)

    common = {"generator": torch.Generator().manual_seed(0), "get_batch": get_batch, "loss_fn": ref.loss_fn}
    if function == "evaluate":
        need(ns, "evaluate")(model, val_tokens, batches=2, batch_size=2, context_length=6, **common)
    else:
        config = ref.TrainConfig(batch_size=2, context_length=6, max_steps=2, eval_interval=2, eval_batches=1)
        optimizer = torch.optim.AdamW(model.inner.parameters(), lr=1e-2, foreach=False)
        need(ns, "train")(
            model,
            optimizer,
            train_tokens,
            val_tokens,
            config,
            schedule=lambda step: 1e-2,
            clip=ref.clip,
            evaluate=ref.evaluate,
            progress=False,
            **common,
        )
    return devices


# --- Exercise 9 --------------------------------------------------------------------------


@adapter
def train(
    ns,
    state: dict,
    train_tokens: torch.Tensor,
    val_tokens: torch.Tensor,
    config: dict,
    schedule_kwargs: dict,
    *,
    seed: int,
    global_seed: int,
) -> dict:
    """``train`` on a TinyLM (with dropout, handed over in eval mode) with PyTorch's parts injected."""
    train = need(ns, "train")
    model, optimizer = ref.tiny_setup(0)
    model.load_state_dict(state)
    model.eval()

    def schedule(step):
        return ref.cosine_lr(step, **schedule_kwargs)

    torch.manual_seed(global_seed)
    history = train(
        model,
        optimizer,
        train_tokens,
        val_tokens,
        ref.TrainConfig(**config),
        schedule=schedule,
        generator=torch.Generator().manual_seed(seed),
        get_batch=ref.get_batch,
        loss_fn=ref.loss_fn,
        clip=ref.clip,
        evaluate=ref.evaluate,
        progress=False,
    )
    return {
        "history": history if isinstance(history, dict) else {"__unsupported__": type(history).__qualname__},
        "training_after": model.training,
    }


@contextlib.contextmanager
def _watched_bars():
    """Record every tqdm bar made while the block runs (however tqdm was imported): its length, whether it is
    disabled, and what its postfix said at each update."""
    from tqdm.std import tqdm as base

    bars, init, postfix, postfix_str = [], base.__init__, base.set_postfix, base.set_postfix_str

    def recording_init(self, iterable=None, *args, **kwargs):
        init(self, iterable, *args, **kwargs)
        bars.append({"total": self.total, "disabled": bool(self.disable), "postfixes": []})
        self._course_record = bars[-1]

    def recording_postfix(self, ordered_dict=None, refresh=True, **kwargs):
        if hasattr(self, "_course_record"):
            shown = dict(ordered_dict or {}, **kwargs)
            self._course_record["postfixes"].append(", ".join(f"{k}={v}" for k, v in shown.items()))
        return postfix(self, ordered_dict, refresh, **kwargs)

    def recording_postfix_str(self, s="", refresh=True):
        if hasattr(self, "_course_record"):
            self._course_record["postfixes"].append(str(s))
        return postfix_str(self, s, refresh)

    base.__init__, base.set_postfix, base.set_postfix_str = recording_init, recording_postfix, recording_postfix_str
    try:
        yield bars
    finally:
        base.__init__, base.set_postfix, base.set_postfix_str = init, postfix, postfix_str


@adapter
def train_bars(
    ns,
    state: dict,
    train_tokens: torch.Tensor,
    val_tokens: torch.Tensor,
    config: dict,
    schedule_kwargs: dict,
    *,
    seed: int,
) -> dict:
    """The tqdm bars ``train`` shows with progress=True and with progress=False (PyTorch's parts injected)."""
    train = need(ns, "train")
    shown = {}
    for progress in (True, False):
        model, optimizer = ref.tiny_setup(0)
        model.load_state_dict(state)
        with _watched_bars() as bars:
            train(
                model,
                optimizer,
                train_tokens,
                val_tokens,
                ref.TrainConfig(**config),
                schedule=lambda step: ref.cosine_lr(step, **schedule_kwargs),
                generator=torch.Generator().manual_seed(seed),
                get_batch=ref.get_batch,
                loss_fn=ref.loss_fn,
                clip=ref.clip,
                evaluate=ref.evaluate,
                progress=progress,
            )
        shown[str(progress)] = bars
    return shown


class _RateRecordingAdamW(torch.optim.AdamW):
    """``torch.optim.AdamW`` that records, at every ``step()``, the learning rate each parameter group has."""

    def __init__(self, params, **kwargs):
        super().__init__(params, foreach=False, **kwargs)
        self.rates = []

    def step(self, closure=None):
        self.rates.append([float(group["lr"]) for group in self.param_groups])
        return super().step(closure)


@adapter
def train_groups(
    ns, state: dict, train_tokens: torch.Tensor, val_tokens: torch.Tensor, config: dict, schedule_kwargs: dict
) -> dict:
    """``train`` with an AdamW of three parameter groups (weights with decay, biases without, embeddings), each
    with its own initial rate; the rate of every group at every ``optimizer.step()``."""
    train = need(ns, "train")
    model, _ = ref.tiny_setup(0)
    model.load_state_dict(state)
    named = dict(model.named_parameters())
    embeddings = [p for name, p in named.items() if name.startswith(("tok.", "pos."))]
    weights = [p for name, p in named.items() if name.endswith("weight") and not name.startswith(("tok.", "pos."))]
    biases = [p for name, p in named.items() if name.endswith("bias")]
    optimizer = _RateRecordingAdamW(
        [
            {"params": weights, "lr": GROUP_RATES[0], "weight_decay": 0.1},
            {"params": biases, "lr": GROUP_RATES[1], "weight_decay": 0.0},
            {"params": embeddings, "lr": GROUP_RATES[2], "weight_decay": 0.0},
        ]
    )
    train(
        model,
        optimizer,
        train_tokens,
        val_tokens,
        ref.TrainConfig(**config),
        schedule=lambda step: ref.cosine_lr(step, **schedule_kwargs),
        generator=torch.Generator().manual_seed(0),
        get_batch=ref.get_batch,
        loss_fn=ref.loss_fn,
        clip=ref.clip,
        evaluate=ref.evaluate,
        progress=False,
    )
    return {"rates": optimizer.rates}


PARTS_RATE = 1e-3  # the recording schedule: PARTS_RATE * step


class _RecordingParts:
    """Stand-ins for the parts ``train`` and ``evaluate`` are given, recording each call, with results no function of
    the notebook gives: batches drawn with a generator of their own, losses shifted by 0.25 per call (the gradients
    are unchanged), the rate ``PARTS_RATE * step``, validation losses 101.0, 102.0, ... (evaluate runs the
    reference evaluation with what it is given, so the get_batch and loss_fn handed on are recorded too)."""

    def __init__(self, model):
        self.model, self.evaluating, self.last_targets = model, False, None
        self.own = torch.Generator().manual_seed(2024)
        self.batches, self.losses, self.clips, self.steps, self.evaluations = [], [], [], [], []

    def get_batch(self, tokens, batch_size, context_length, device="cpu", *, generator=None):
        inputs, targets = ref.get_batch(tokens, batch_size, context_length, generator=self.own)
        self.batches.append(self.evaluating)
        self.last_targets = targets
        return inputs, targets

    def loss_fn(self, logits, targets):
        loss = ref.loss_fn(logits, targets) + 0.25 * (len(self.losses) + 1)
        last = self.last_targets
        same = isinstance(targets, torch.Tensor) and last is not None and targets.shape == last.shape
        self.losses.append(
            {
                "evaluating": self.evaluating,
                "value": float(loss.detach()),
                "targets": same and torch.equal(targets, last),
            }
        )
        return loss

    def clip(self, parameters, max_norm):
        parameters = list(parameters)
        models = {id(p) for p in parameters} == {id(p) for p in self.model.parameters()}
        self.clips.append({"max_norm": max_norm, "models": models})
        return ref.clip(parameters, max_norm)

    def schedule(self, step):
        self.steps.append(step)
        return PARTS_RATE * step

    def evaluate(self, *args, **kwargs):
        given = inspect.signature(ref.evaluate).bind(*args, **kwargs).arguments  # raises as evaluate itself would
        batches, losses = len(self.batches), len(self.losses)
        self.evaluating = True
        try:
            ref.evaluate(*args, **kwargs)
        finally:
            self.evaluating = False
        generator = given.get("generator")
        self.evaluations.append(
            {
                "model": given.get("model") is self.model,
                "sizes": [given.get(name) for name in ("batches", "batch_size", "context_length")],
                "seed": generator.initial_seed() if isinstance(generator, torch.Generator) else None,
                "batches": len(self.batches) - batches,
                "losses": len(self.losses) - losses,
                "value": 100.0 + len(self.evaluations) + 1,
            }
        )
        return self.evaluations[-1]["value"]

    def record(self) -> dict:
        return {name: getattr(self, name) for name in ("batches", "losses", "clips", "steps", "evaluations")}


@adapter
def evaluate_recorded(ns, state: dict, tokens: torch.Tensor, *, batches: int, batch_size: int, context: int) -> dict:
    """``evaluate`` given recording ``get_batch`` and ``loss_fn`` (``_RecordingParts``): what it returned and the
    calls they recorded."""
    model = ref.TinyLM()
    model.load_state_dict(state)
    parts = _RecordingParts(model)
    value = need(ns, "evaluate")(
        model,
        tokens,
        batches=batches,
        batch_size=batch_size,
        context_length=context,
        generator=torch.Generator().manual_seed(0),
        get_batch=parts.get_batch,
        loss_fn=parts.loss_fn,
    )
    return parts.record() | {"value": value}


@adapter
def train_recorded(ns, state: dict, train_tokens: torch.Tensor, val_tokens: torch.Tensor, config: dict) -> dict:
    """``train`` given recording ``schedule``, ``get_batch``, ``loss_fn``, ``clip`` and ``evaluate``
    (``_RecordingParts``): the history it returned and the calls they recorded."""
    model, optimizer = ref.tiny_setup(0)
    model.load_state_dict(state)
    parts = _RecordingParts(model)
    history = need(ns, "train")(
        model,
        optimizer,
        train_tokens,
        val_tokens,
        ref.TrainConfig(**config),
        schedule=parts.schedule,
        generator=torch.Generator().manual_seed(0),
        get_batch=parts.get_batch,
        loss_fn=parts.loss_fn,
        clip=parts.clip,
        evaluate=parts.evaluate,
        progress=False,
    )
    return parts.record() | {
        "history": history if isinstance(history, dict) else {"__unsupported__": type(history).__qualname__}
    }


# --- Exercise 10 -------------------------------------------------------------------------


@adapter
def overfit(
    ns,
    state: dict,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    *,
    steps: int,
    lr: float,
    record: bool = False,
    other_lrs: tuple | None = None,
) -> dict:
    """``overfit_one_batch`` on a TinyLM without dropout, PyTorch's AdamW, and the reference loop injected; with
    ``record``, also what each call of that loop was given (the model, the optimizer, the config's sizes) and the
    rates its schedule gave (the loop's ``history["lr"]``). With ``other_lrs`` = (default, second group's), the
    optimizer has two groups, the first at ``lr``, and ``optimizer.defaults["lr"]`` is another rate."""
    overfit_one_batch = need(ns, "overfit_one_batch")
    model = ref.TinyLM(dropout=0.0)
    model.load_state_dict(copy.deepcopy(state))
    params = list(model.parameters())
    groups = (
        params if other_lrs is None else [{"params": params[:2], "lr": lr}, {"params": params[2:], "lr": other_lrs[1]}]
    )
    default = lr if other_lrs is None else other_lrs[0]
    optimizer = torch.optim.AdamW(groups, lr=default, weight_decay=0.0, foreach=False)
    calls = []

    def recording_train(*args, **kwargs):
        given = inspect.signature(ref.train).bind(*args, **kwargs).arguments  # raises as train itself would
        config = given.get("config")
        calls.append(
            {
                "model": given.get("model") is model,
                "optimizer": given.get("optimizer") is optimizer,
                **{name: getattr(config, name, None) for name in ("batch_size", "context_length", "max_steps")},
            }
        )
        history = ref.train(*args, **kwargs)
        calls[-1]["lr"] = [float(rate) for rate in history["lr"]]
        return history

    losses = overfit_one_batch(model, optimizer, inputs, targets, steps=steps, train=recording_train)
    result = {"losses": list(losses) if isinstance(losses, list | tuple) else losses}
    return result | {"calls": calls} if record else result
