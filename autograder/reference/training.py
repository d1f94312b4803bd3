"""A training loop built only from PyTorch's parts, with the conventions of notebook 10.

Used by the checks of notebook 10 (in the grader) and by its adapters (beside student code), so
that the checkpoint, evaluation, loop and overfitting exercises are graded without the student's
other exercises: ``torch.optim.AdamW``, ``F.cross_entropy``, ``torch.nn.utils.clip_grad_norm_`` and
Hugging Face's schedules (``transformers.get_inverse_sqrt_schedule`` and
``get_cosine_with_min_lr_schedule_with_warmup``, closed forms evaluated in float64, within a few ulps
of the formulas notebook 10 states).

Conventions: ``step`` is the number of the update about to be made; a loop makes updates
``1..max_steps`` with ``lr = schedule(step)`` written into every parameter group; the order per
update is batch, forward, loss, ``zero_grad``, backward, clip, ``optimizer.step()``. Validation runs
every ``eval_interval`` updates and after the last one, with a generator freshly seeded with
``config.eval_seed``, in eval mode under ``torch.no_grad()``.
"""

from __future__ import annotations

import functools
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

# Imported here, not where it is used: the adapters of notebook 10 call the schedule beside student code, and
# everything a worker needs is imported before the student's folder is on sys.path (autograder.worker).
from transformers.optimization import get_cosine_with_min_lr_schedule_with_warmup, get_inverse_sqrt_schedule

from autograder.reference.configs import TrainConfig


def get_batch(tokens, batch_size: int, context_length: int, device="cpu", *, generator=None):
    data = torch.as_tensor(np.asarray(tokens, dtype=np.int64)) if not isinstance(tokens, torch.Tensor) else tokens
    starts = torch.randint(0, len(data) - context_length, (batch_size,), generator=generator)
    window = torch.arange(context_length + 1)
    rows = data[starts[:, None] + window].long()
    return rows[:, :-1].to(device), rows[:, 1:].to(device)


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """PyTorch's cross-entropy, mean over every position. ``F.cross_entropy`` takes a sequence as
    [batch, classes, positions] with targets [batch, positions], so the vocabulary axis is moved second rather than
    the positions flattened (for [N, vocab] logits ``movedim`` changes nothing)."""
    return F.cross_entropy(logits.movedim(-1, 1), targets)


def clip(parameters, max_norm: float) -> torch.Tensor:
    return torch.nn.utils.clip_grad_norm_(parameters, max_norm)


def _rate(scheduler: torch.optim.lr_scheduler.LambdaLR, step: int) -> float:
    """The rate ``scheduler`` gives update ``step``: LambdaLR's own rule, base rate × ``lr_lambda(step)``, read at
    any step without stepping through the ones before (the checks ask for steps in any order)."""
    return scheduler.base_lrs[0] * scheduler.lr_lambdas[0](step)


def _optimizer(lr: float) -> torch.optim.Optimizer:
    """An optimizer to hang a scheduler on: Hugging Face's schedules take their peak rate from one."""
    return torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=lr)


@functools.lru_cache(maxsize=64)
def _inverse_sqrt_schedule(d_model: int, warmup_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    # The Transformer paper's rate is its peak, d_model^-0.5 · warmup_steps^-0.5 (reached at warmup_steps), times
    # min(step / warmup_steps, (step / warmup_steps)^-0.5): Hugging Face's factor, linear up to num_warmup_steps and
    # (step / timescale)^-0.5 after, with timescale = warmup_steps.
    peak = d_model**-0.5 * warmup_steps**-0.5
    return get_inverse_sqrt_schedule(_optimizer(peak), num_warmup_steps=warmup_steps, timescale=warmup_steps)


def inverse_sqrt_lr(step: int, *, d_model: int, warmup_steps: int) -> float:
    return _rate(_inverse_sqrt_schedule(d_model, warmup_steps), step)


@functools.lru_cache(maxsize=64)
def _cosine_schedule(
    max_lr: float, min_lr: float, warmup_steps: int, decay_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    return get_cosine_with_min_lr_schedule_with_warmup(
        _optimizer(max_lr), num_warmup_steps=warmup_steps, num_training_steps=decay_steps, min_lr=min_lr
    )


def cosine_lr(step: int, *, max_lr: float, min_lr: float, warmup_steps: int, decay_steps: int) -> float:
    """Hugging Face's linear warm-up from 0 and half cosine down to ``min_lr``. Its schedule is defined up to
    ``num_training_steps`` only (past it the cosine comes back up); the course's holds ``min_lr`` after
    ``decay_steps``, hence the rate of ``decay_steps`` for every later step."""
    return _rate(_cosine_schedule(max_lr, min_lr, warmup_steps, decay_steps), min(step, decay_steps))


def evaluate(
    model,
    tokens,
    *,
    batches: int,
    batch_size: int,
    context_length: int,
    generator,
    get_batch=get_batch,
    loss_fn=loss_fn,
) -> float:
    was_training = model.training
    device = next(model.parameters()).device
    model.eval()
    total = 0.0
    with torch.no_grad():
        for _ in range(batches):
            inputs, targets = get_batch(tokens, batch_size, context_length, device, generator=generator)
            total += float(loss_fn(model(inputs), targets))
    model.train(was_training)
    return total / batches


def train(
    model,
    optimizer,
    train_tokens,
    val_tokens,
    config,
    *,
    schedule,
    generator,
    get_batch=get_batch,
    loss_fn=loss_fn,
    clip=clip,
    evaluate=evaluate,
    progress=False,
) -> dict:
    history = {"step": [], "train_loss": [], "lr": [], "tokens_per_s": [], "val_step": [], "val_loss": []}
    device = next(model.parameters()).device
    model.train()
    for step in range(1, config.max_steps + 1):
        start = time.perf_counter()
        lr = schedule(step)
        for group in optimizer.param_groups:
            group["lr"] = lr
        inputs, targets = get_batch(train_tokens, config.batch_size, config.context_length, device, generator=generator)
        loss = loss_fn(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        clip(model.parameters(), config.max_grad_norm)
        optimizer.step()
        history["step"].append(step)
        history["train_loss"].append(loss.item())
        history["lr"].append(lr)
        history["tokens_per_s"].append(inputs.numel() / max(time.perf_counter() - start, 1e-9))
        if step % config.eval_interval == 0 or step == config.max_steps:
            history["val_step"].append(step)
            history["val_loss"].append(
                evaluate(
                    model,
                    val_tokens,
                    batches=config.eval_batches,
                    batch_size=config.batch_size,
                    context_length=config.context_length,
                    generator=torch.Generator().manual_seed(config.eval_seed),
                    get_batch=get_batch,
                    loss_fn=loss_fn,
                )
            )
    return history


class TinyLM(nn.Module):
    """A small next-token model WITH dropout (so that resuming must restore torch's global RNG)."""

    def __init__(self, vocab_size: int = 16, d_model: int = 12, context_length: int = 8, dropout: float = 0.2):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(context_length, d_model)
        self.drop = nn.Dropout(dropout)
        self.mix = nn.Linear(d_model, d_model)
        self.out = nn.Linear(d_model, vocab_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok(tokens) + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        x = x + torch.tanh(self.mix(self.drop(x))).cumsum(1) / torch.arange(1, tokens.shape[1] + 1)[:, None]
        return self.out(self.drop(x))


def tiny_setup(seed: int, lr: float = 3e-2):
    """A TinyLM, its AdamW and a token stream, all from ``seed``."""
    torch.manual_seed(seed)
    model = TinyLM()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1, foreach=False)
    return model, optimizer


def tokens_for(seed: int, length: int = 400, vocab: int = 16) -> torch.Tensor:
    """A token stream with structure to learn: mostly t -> (t + 3) mod vocab, with some noise."""
    g = torch.Generator().manual_seed(seed)
    steps = torch.where(torch.rand(length, generator=g) < 0.8, 3, torch.randint(0, vocab, (length,), generator=g))
    return (steps.cumsum(0) % vocab).to(torch.int64)


def run_steps(model, optimizer, tokens, steps, *, first_step: int, generator, config: TrainConfig, schedule) -> list:
    """Updates ``first_step..first_step+steps-1`` of the loop above (no validation); their losses."""
    losses = []
    model.train()
    for step in range(first_step, first_step + steps):
        lr = schedule(step)
        for group in optimizer.param_groups:
            group["lr"] = lr
        inputs, targets = get_batch(tokens, config.batch_size, config.context_length, generator=generator)
        loss = loss_fn(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        clip(model.parameters(), config.max_grad_norm)
        optimizer.step()
        losses.append(loss.item())
    return losses
