"""Mistakes students make in notebook 10.

Each wrong version is a right answer with one edit (``_edit`` insists that the edited text is there),
so it differs from the right one only by the mistake. The code runs in the solution notebook's
namespace, which has ``np``, ``time``, ``tqdm``, ``TrainConfig`` and the other answers.
"""

from wrong import Wrong

GET_BATCH = """
import numpy as np


def get_batch(tokens, batch_size, context_length, device="cpu", *, generator=None):
    starts = torch.randint(0, len(tokens) - context_length, (batch_size,), generator=generator)
    index = starts[:, None] + torch.arange(context_length + 1)
    if isinstance(tokens, torch.Tensor):
        rows = tokens[index].long()
    else:
        rows = torch.from_numpy(np.asarray(tokens)[index.numpy()].astype(np.int64))
    rows = rows.to(device)
    return rows[:, :-1], rows[:, 1:]
"""

CROSS_ENTROPY = """
def cross_entropy(logits, targets, *, ignore_index=-100, label_smoothing=0.0):
    logits = logits.reshape(-1, logits.shape[-1])
    targets = targets.reshape(-1)
    keep = targets != ignore_index
    shifted = logits - logits.max(dim=-1, keepdim=True).values
    log_probs = shifted - torch.log(torch.exp(shifted).sum(dim=-1, keepdim=True))
    nll = -log_probs.gather(-1, torch.where(keep, targets, 0)[:, None]).squeeze(-1)
    smooth = -log_probs.mean(dim=-1)
    per_position = (1.0 - label_smoothing) * nll + label_smoothing * smooth
    return per_position[keep].mean()
"""

ADAMW = """
class AdamW(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, (beta1, beta2), eps, decay = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            group.setdefault("count", 0)
            group["count"] += 1
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                t = state["step"]
                grad = p.grad
                p.mul_(1 - lr * decay)
                state["exp_avg"].mul_(beta1).add_(grad, alpha=1 - beta1)
                state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                m_hat = state["exp_avg"] / (1 - beta1 ** t)
                v_hat = state["exp_avg_sq"] / (1 - beta2 ** t)
                p.addcdiv_(m_hat, v_hat.sqrt().add_(eps), value=-lr)
        return loss
"""

INVERSE_SQRT = """
def inverse_sqrt_lr(step, *, d_model, warmup_steps):
    if step == 0:
        return 0.0
    return d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)
"""

COSINE = """
def cosine_lr(step, *, max_lr, min_lr, warmup_steps, decay_steps):
    if step < warmup_steps:
        return max_lr * step / warmup_steps
    if step > decay_steps:
        return min_lr
    progress = (step - warmup_steps) / (decay_steps - warmup_steps)
    return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + math.cos(math.pi * progress))
"""

CLIP = """
def clip_grad_norm(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    factor = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.mul_(factor)
    return total
"""

CHECKPOINT = """
def save_checkpoint(path, *, model, optimizer, step, generator):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                "generator": generator.get_state(), "torch_rng": torch.get_rng_state()}, path)


def load_checkpoint(path, *, model, optimizer, generator):
    checkpoint = torch.load(path, weights_only=True)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    generator.set_state(checkpoint["generator"])
    torch.set_rng_state(checkpoint["torch_rng"])
    return checkpoint["step"]
"""

EVALUATE = """
def evaluate(model, tokens, *, batches, batch_size, context_length, generator, get_batch=get_batch,
             loss_fn=cross_entropy):
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
"""

TRAIN = """
def train(model, optimizer, train_tokens, val_tokens, config, *, schedule, generator, get_batch=get_batch,
          loss_fn=cross_entropy, clip=clip_grad_norm, evaluate=evaluate, progress=True):
    history = {key: [] for key in ("step", "train_loss", "lr", "tokens_per_s", "val_step", "val_loss")}
    device = next(model.parameters()).device
    model.train()
    bar = tqdm(range(1, config.max_steps + 1), desc="training", disable=not progress)
    for step in bar:
        start = time.perf_counter()
        lr = schedule(step)
        for group in optimizer.param_groups:
            group["lr"] = lr
        inputs, targets = get_batch(train_tokens, config.batch_size, config.context_length, device,
                                    generator=generator)
        loss = loss_fn(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        clip(model.parameters(), config.max_grad_norm)
        optimizer.step()
        speed = inputs.numel() / max(time.perf_counter() - start, 1e-9)
        for key, value in (("step", step), ("train_loss", loss.item()), ("lr", lr), ("tokens_per_s", speed)):
            history[key].append(value)
        bar.set_postfix(loss=f"{loss.item():.3f}", lr=f"{lr:.2e}", tok_s=f"{speed:,.0f}", refresh=False)
        if step % config.eval_interval == 0 or step == config.max_steps:
            history["val_step"].append(step)
            history["val_loss"].append(evaluate(
                model, val_tokens, batches=config.eval_batches, batch_size=config.batch_size,
                context_length=config.context_length, generator=torch.Generator().manual_seed(config.eval_seed),
                get_batch=get_batch, loss_fn=loss_fn))
    return history
"""

OVERFIT = """
def overfit_one_batch(model, optimizer, inputs, targets, *, steps=100, train=train):
    lr = optimizer.param_groups[0]["lr"]
    config = TrainConfig(batch_size=inputs.shape[0], context_length=inputs.shape[1], max_steps=steps,
                         eval_interval=steps, eval_batches=1)
    history = train(model, optimizer, None, None, config, schedule=lambda step: lr, generator=None,
                    get_batch=lambda *args, **kwargs: (inputs, targets), progress=False)
    return history["train_loss"]
"""


def _edit(code, *pairs):
    for old, new in pairs:
        assert old in code, old
        code = code.replace(old, new)
    return code


RIGHT = {
    "get_batch": GET_BATCH,
    "cross_entropy": CROSS_ENTROPY,
    "adamw": ADAMW,
    "inverse_sqrt_lr": INVERSE_SQRT,
    "cosine_lr": COSINE,
    "clip_grad_norm": CLIP,
    "checkpoint": CHECKPOINT,
    "evaluate": EVALUATE,
    "train": TRAIN,
    "overfit_one_batch": OVERFIT,
}

_STARTS = "torch.randint(0, len(tokens) - context_length, (batch_size,), generator=generator)"

WRONG = [
    # The exercises' rules (autograder.rules), against a determined student: each message quotes the rule.
    Wrong(
        "clip_grad_norm",
        "clip_grad_norm_ by a computed name, kept in a default argument",
        "def clip_grad_norm(parameters, max_norm, _clip=getattr(torch.nn.utils, 'clip_grad_norm' + chr(95))):\n"
        "    return _clip(parameters, max_norm)\n",
        "this exercise's rule is: do not call torch.nn.utils.clip_grad_norm_",
    ),
    Wrong(
        "clip_grad_norm",
        "the function clip_grad_norm_ wraps, reached through its module",
        "import importlib\n\n_module = importlib.import_module('torch.nn.utils.' + 'clip' + '_grad')\n"
        "_inner = vars(_module)['clip_grad_norm' + chr(95)].__wrapped__\n\n\n"
        "def clip_grad_norm(parameters, max_norm):\n    with torch.no_grad():\n"
        "        return _inner(list(parameters), max_norm)\n",
        "this exercise's rule is: do not call torch.nn.utils.clip_grad_norm_",
    ),
    Wrong(
        "clip_grad_norm",
        "get_total_norm and clip_grads_with_norm_ kept in a tuple",
        "_tools = tuple(vars(torch.nn.utils)[n] for n in sorted(vars(torch.nn.utils)) if n.endswith('_norm') "
        "or n.endswith('with_norm_'))\n\n\n"
        "def clip_grad_norm(parameters, max_norm):\n    parameters = list(parameters)\n"
        "    grads = [p.grad for p in parameters if p.grad is not None]\n"
        "    total = [t for t in _tools if 'total' in t.__name__][0](grads)\n"
        "    [t for t in _tools if 'with_norm' in t.__name__][0](parameters, max_norm, total)\n"
        "    return total\n",
        "this exercise's rule is: do not call torch.nn.utils.clip_grad_norm_",
    ),
    Wrong(
        "cross_entropy",
        "log-sum-exp through torch.logcumsumexp",
        _edit(
            CROSS_ENTROPY,
            ("torch.log(torch.exp(shifted).sum(dim=-1, keepdim=True))", "torch.logcumsumexp(shifted, dim=-1)[:, -1:]"),
        ),
        "this exercise's rule is: do not use F.cross_entropy",
    ),
    Wrong(
        "cross_entropy",
        "log-sum-exp by folding logaddexp over the vocabulary",
        _edit(
            CROSS_ENTROPY,
            (
                "torch.log(torch.exp(shifted).sum(dim=-1, keepdim=True))",
                "functools.reduce(torch.logaddexp, shifted.unbind(-1))[:, None]",
            ),
        ).replace("def cross_entropy", "import functools\n\n\ndef cross_entropy"),
        "this exercise's rule is: do not use F.cross_entropy",
    ),
    # Exercise 6 (get_batch)
    Wrong(
        "get_batch",
        "the last valid start is never drawn",
        _edit(
            GET_BATCH, (_STARTS, _STARTS.replace("len(tokens) - context_length", "len(tokens) - context_length - 1"))
        ),
        "the last valid start",
    ),
    Wrong(
        "get_batch",
        "a start one past the last valid one",
        _edit(
            GET_BATCH, (_STARTS, _STARTS.replace("len(tokens) - context_length", "len(tokens) - context_length + 1"))
        ),
        "out of bounds",
    ),
    Wrong(
        "get_batch",
        "targets not shifted",
        _edit(GET_BATCH, ("return rows[:, :-1], rows[:, 1:]", "return rows[:, :-1], rows[:, :-1]")),
        "targets equal inputs",
    ),
    Wrong(
        "get_batch",
        "the device is ignored",
        _edit(GET_BATCH, ("rows = rows.to(device)", 'rows = rows.to("cpu")')),
        "'meta'",
    ),
    Wrong(
        "get_batch",
        "the global generator instead of the one given",
        _edit(GET_BATCH, (", generator=generator)", ")")),
        "draw the starts from the generator",
    ),
    Wrong(
        "get_batch",
        "int32 output",
        _edit(GET_BATCH, ("rows = rows.to(device)", "rows = rows.to(device, torch.int32)")),
        "expected torch.int64",
    ),
    Wrong(
        "get_batch",
        "the token dtype is kept (uint16)",
        _edit(
            GET_BATCH,
            (
                "rows = torch.from_numpy(np.asarray(tokens)[index.numpy()].astype(np.int64))",
                "rows = torch.from_numpy(np.asarray(tokens)[index.numpy()])",
            ),
            ("rows = tokens[index].long()", "rows = tokens[index]"),
        ),
        "expected torch.int64",
    ),
    # Exercise 1 (cross_entropy)
    Wrong(
        "cross_entropy",
        "softmax applied before the loss",
        _edit(
            CROSS_ENTROPY,
            (
                "logits = logits.reshape(-1, logits.shape[-1])",
                "logits = torch.softmax(logits.reshape(-1, logits.shape[-1]), dim=-1)",
            ),
        ),
        "softmax is applied to the logits before",
    ),
    Wrong(
        "cross_entropy",
        "mean over every position, ignored ones included",
        _edit(CROSS_ENTROPY, ("return per_position[keep].mean()", "return (per_position * keep).sum() / len(keep)")),
        "the mean is over every position",
    ),
    Wrong(
        "cross_entropy",
        "smoothing mass spread over V - 1 classes",
        _edit(
            CROSS_ENTROPY,
            ("smooth = -log_probs.mean(dim=-1)", "smooth = (-log_probs.sum(dim=-1) - nll) / (logits.shape[-1] - 1)"),
        ),
        "V - 1 other classes",
    ),
    Wrong(
        "cross_entropy",
        "log of a naive softmax",
        _edit(
            CROSS_ENTROPY,
            (
                "log_probs = shifted - torch.log(torch.exp(shifted).sum(dim=-1, keepdim=True))",
                "log_probs = torch.log(torch.exp(logits) / torch.exp(logits).sum(dim=-1, keepdim=True))",
            ),
        ),
        "NaN or inf",
    ),
    # Exercise 2 (AdamW)
    Wrong(
        "adamw",
        "L2 added to the gradient instead of decoupled decay",
        _edit(ADAMW, ("grad = p.grad\n                p.mul_(1 - lr * decay)", "grad = p.grad + decay * p")),
        "added to the gradient",
    ),
    Wrong(
        "adamw",
        "no bias correction",
        _edit(
            ADAMW,
            ('m_hat = state["exp_avg"] / (1 - beta1 ** t)', 'm_hat = state["exp_avg"]'),
            ('v_hat = state["exp_avg_sq"] / (1 - beta2 ** t)', 'v_hat = state["exp_avg_sq"]'),
        ),
        "bias correction is missing",
    ),
    Wrong(
        "adamw",
        "decay applied after the update",
        _edit(
            ADAMW,
            ("                p.mul_(1 - lr * decay)\n", ""),
            ("value=-lr)", "value=-lr)\n                p.mul_(1 - lr * decay)"),
        ),
        "applied after the Adam step",
    ),
    Wrong(
        "adamw",
        "step counted per group",
        _edit(ADAMW, ('t = state["step"]', 't = group["count"]')),
        "counted per group",
    ),
    Wrong(
        "adamw",
        "the closure called with gradients off",
        _edit(
            ADAMW,
            ("            with torch.enable_grad():\n                loss = closure()", "            loss = closure()"),
        ),
        "torch.enable_grad()",
    ),
    # Exercise 3 (inverse_sqrt_lr)
    Wrong(
        "inverse_sqrt_lr",
        "warm-up off by one",
        _edit(
            INVERSE_SQRT,
            (
                "min(step ** -0.5, step * warmup_steps ** -1.5)",
                "min((step + 1) ** -0.5, (step + 1) * warmup_steps ** -1.5)",
            ),
        ),
        "off by one",
    ),
    Wrong(
        "inverse_sqrt_lr",
        "exponents swapped",
        _edit(
            INVERSE_SQRT,
            ("min(step ** -0.5, step * warmup_steps ** -1.5)", "min(step ** -1.5, step * warmup_steps ** -0.5)"),
        ),
        "exponents are swapped",
    ),
    Wrong(
        "inverse_sqrt_lr",
        "max instead of min",
        _edit(INVERSE_SQRT, ("min(step ** -0.5", "max(step ** -0.5")),
        "max instead of min",
    ),
    Wrong(
        "inverse_sqrt_lr",
        "step 0 not handled",
        _edit(INVERSE_SQRT, ("    if step == 0:\n        return 0.0\n", "")),
        "ZeroDivisionError",
    ),
    # Exercise 4 (cosine_lr)
    Wrong(
        "cosine_lr",
        "warm-up off by one",
        _edit(COSINE, ("max_lr * step / warmup_steps", "max_lr * (step + 1) / warmup_steps")),
        "off by one",
    ),
    Wrong(
        "cosine_lr",
        "cosine over the wrong span",
        _edit(
            COSINE, ("progress = (step - warmup_steps) / (decay_steps - warmup_steps)", "progress = step / decay_steps")
        ),
        "wrong span",
    ),
    Wrong(
        "cosine_lr",
        "no floor after the end",
        _edit(COSINE, ("    if step > decay_steps:\n        return min_lr\n", "")),
        "no floor after decay_steps",
    ),
    Wrong(
        "cosine_lr",
        "decays to 0 instead of min_lr",
        _edit(COSINE, ("return min_lr + 0.5 * (max_lr - min_lr) *", "return 0.5 * max_lr *")),
        "ends at 0 instead of min_lr",
    ),
    # Exercise 5 (clip_grad_norm)
    Wrong(
        "clip_grad_norm",
        "each parameter clipped by its own norm",
        _edit(
            CLIP,
            (
                "    for g in grads:\n        g.mul_(factor)",
                "    for g in grads:\n        g.mul_(torch.clamp(max_norm / (g.norm() + 1e-6), max=1.0))",
            ),
        ),
        "clipped by its own norm",
    ),
    Wrong(
        "clip_grad_norm",
        "small gradients scaled up",
        _edit(CLIP, ("torch.clamp(max_norm / (total + 1e-6), max=1.0)", "max_norm / (total + 1e-6)")),
        "scaled up",
    ),
    Wrong(
        "clip_grad_norm",
        "a generator iterated twice",
        _edit(
            CLIP,
            (
                "    for g in grads:\n        g.mul_(factor)",
                "    for p in parameters:\n        if p.grad is not None:\n            p.grad.mul_(factor)",
            ),
        ),
        "iterated only once",
    ),
    Wrong(
        "clip_grad_norm",
        "crashes on parameters without gradients",
        _edit(
            CLIP,
            ("grads = [p.grad for p in parameters if p.grad is not None]", "grads = [p.grad for p in parameters]"),
            ("torch.stack([torch.linalg.vector_norm(g) for g in grads])", "torch.stack([g.norm() for g in grads])"),
        ),
        "NoneType",
    ),
    Wrong(
        "clip_grad_norm",
        "crashes when no parameter has a gradient",
        _edit(CLIP, ("    if not grads:\n        return torch.tensor(0.0)\n", "")),
        "non-empty",
    ),
    # Exercise 7
    Wrong(
        "checkpoint",
        "the optimizer is not saved",
        _edit(CHECKPOINT, ('    optimizer.load_state_dict(checkpoint["optimizer"])\n', "")),
        "optimizer's state",
    ),
    Wrong(
        "checkpoint",
        "the generator is not saved",
        _edit(CHECKPOINT, ('    generator.set_state(checkpoint["generator"])\n', "")),
        "batch generator's state",
    ),
    Wrong(
        "checkpoint",
        "the global random state is not saved",
        _edit(CHECKPOINT, ('    torch.set_rng_state(checkpoint["torch_rng"])\n', "")),
        "global random state",
    ),
    Wrong(
        "checkpoint",
        "the step is not returned",
        _edit(CHECKPOINT, ('    return checkpoint["step"]\n', "")),
        "expected the saved step",
    ),
    # Exercise 8
    Wrong("evaluate", "no eval mode", _edit(EVALUATE, ("    model.eval()\n", "")), "call model.eval()"),
    Wrong(
        "evaluate",
        "the mode is not restored",
        _edit(EVALUATE, ("model.train(was_training)", "model.train()")),
        "restore the mode",
    ),
    Wrong(
        "evaluate",
        "gradients recorded",
        _edit(EVALUATE, ("    with torch.no_grad():\n        for", "    if True:\n        for")),
        "torch.no_grad()",
    ),
    Wrong(
        "evaluate",
        "the sum instead of the mean",
        _edit(EVALUATE, ("return total / batches", "return total")),
        "return their mean",
    ),
    # Exercise 9
    Wrong("train", "zero_grad missing", _edit(TRAIN, ("        optimizer.zero_grad()\n", "")), "never zeroed"),
    Wrong(
        "train",
        "clip after step",
        _edit(
            TRAIN,
            (
                "        clip(model.parameters(), config.max_grad_norm)\n        optimizer.step()",
                "        optimizer.step()\n        clip(model.parameters(), config.max_grad_norm)",
            ),
        ),
        "clipped after optimizer.step()",
    ),
    Wrong(
        "train",
        "lr = schedule(t - 1)",
        _edit(TRAIN, ("lr = schedule(step)", "lr = schedule(step - 1)")),
        "schedule(t - 1)",
    ),
    Wrong(
        "train",
        "validation drawn from the training generator",
        _edit(TRAIN, ("generator=torch.Generator().manual_seed(config.eval_seed)", "generator=generator")),
        "training generator",
    ),
    Wrong("train", "no model.train()", _edit(TRAIN, ("    model.train()\n", "")), "never put in train mode"),
    Wrong(
        "train",
        "no validation after the last step",
        _edit(TRAIN, (" or step == config.max_steps", "")),
        "one per validation",
    ),
    # Exercise 10
    Wrong(
        "overfit_one_batch",
        "returns the validation losses",
        _edit(OVERFIT, ('return history["train_loss"]', 'return history["val_loss"]')),
        "expected 100",
    ),
    Wrong(
        "overfit_one_batch",
        "a learning rate of its own",
        _edit(OVERFIT, ("schedule=lambda step: lr", "schedule=lambda step: 1e-3")),
        "not the optimizer's",
    ),
    Wrong(
        "overfit_one_batch",
        "one step too few",
        _edit(OVERFIT, ("max_steps=steps,", "max_steps=steps - 1,")),
        "one per step",
    ),
    Wrong(
        "overfit_one_batch",
        "random windows of the batch instead of the batch",
        _edit(
            OVERFIT,
            (
                "get_batch=lambda *args, **kwargs: (inputs, targets)",
                "get_batch=lambda *args, **kwargs: get_batch(inputs.flatten(), inputs.shape[0], "
                "inputs.shape[1], generator=torch.Generator().manual_seed(0))",
            ),
        ),
        "always returns (inputs, targets)",
    ),
    # The progress bar the text asks for (observed by recording tqdm), and a right loop in another order.
    Wrong(
        "train",
        "no postfix on the bar",
        TRAIN.replace(
            '        bar.set_postfix(loss=f"{loss.item():.3f}", lr=f"{lr:.2e}", tok_s=f"{speed:,.0f}", refresh=False)\n',
            "",
        ),
        "the bar's postfix was set 0 times",
    ),
    Wrong(
        "train",
        "a bar without the learning rate",
        TRAIN.replace('lr=f"{lr:.2e}", ', ""),
        "does not show the learning rate",
    ),
    Wrong(
        "train",
        "the bar shown even with progress=False",
        TRAIN.replace("disable=not progress", "disable=False"),
        "progress=False) still showed a bar",
    ),
]
