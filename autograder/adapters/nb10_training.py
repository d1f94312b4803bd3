"""Adapters for notebook 10: batches, cross-entropy, AdamW, schedules, clipping, checkpoints, the loop.

The exercises that use other parts (checkpoints, evaluate, train, overfit_one_batch) get PyTorch's
parts and the neutral loop of ``autograder.reference.training`` injected, so each is graded alone.
"""

from __future__ import annotations

import contextlib
import copy
import io
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

from autograder.adapters import need
from autograder.reference import training as ref

# --- Exercise 6: get_batch ---------------------------------------------------------------


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


# --- Exercise 1: cross_entropy -----------------------------------------------------------


def loss(ns, logits: torch.Tensor, targets: torch.Tensor, kwargs: dict) -> dict:
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


def schedule(ns, name: str, steps: list, kwargs: dict) -> list:
    function = need(ns, name)
    return [function(step, **kwargs) for step in steps]


# --- Exercise 5: clip_grad_norm ----------------------------------------------------------


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


# --- Exercise 9 --------------------------------------------------------------------------


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


# --- Exercise 10 -------------------------------------------------------------------------


def overfit(ns, state: dict, inputs: torch.Tensor, targets: torch.Tensor, *, steps: int, lr: float) -> dict:
    """``overfit_one_batch`` on a TinyLM without dropout, PyTorch's AdamW, and the reference loop injected."""
    overfit_one_batch = need(ns, "overfit_one_batch")
    model = ref.TinyLM(dropout=0.0)
    model.load_state_dict(copy.deepcopy(state))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0, foreach=False)
    losses = overfit_one_batch(model, optimizer, inputs, targets, steps=steps, train=ref.train)
    return {"losses": list(losses) if isinstance(losses, list | tuple) else losses}
