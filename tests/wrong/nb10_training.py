"""Wrong versions of notebook 10's answers (10_training): see ``wrong/__init__.py``."""

from autograder.notebooks.nb10_training import (
    ADAMW,
    CHECKPOINT,
    CLIP,
    COSINE,
    CROSS_ENTROPY,
    EVALUATE,
    GET_BATCH,
    INVERSE_SQRT,
    OVERFIT,
    TRAIN,
)
from wrong import WrongVersion, edit

_RULE = "this exercise's rule is: do not call torch.nn.utils.clip_grad_norm_"

# cross_entropy -------------------------------------------------------------------------------------------------
_LOG_PROBS = "log_probs = shifted - torch.log(torch.exp(shifted).sum(dim=-1, keepdim=True))"
_PER_POSITION = "per_position = (1.0 - label_smoothing) * nll + label_smoothing * smooth"

# adamw ---------------------------------------------------------------------------------------------------------

# inverse_sqrt_lr -----------------------------------------------------------------------------------------------
_RETURN_D_MODEL_MIN = "return d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)"

# cosine_lr -----------------------------------------------------------------------------------------------------

# clip_grad_norm ------------------------------------------------------------------------------------------------
_FACTOR = "factor = torch.clamp(max_norm / (total + 1e-6), max=1.0)"

# get_batch -----------------------------------------------------------------------------------------------------
_STARTS = "starts = torch.randint(0, len(tokens) - context_length, (batch_size,), generator=generator)"
_ROWS = "rows = rows.to(device)"
_GET_BATCH_ROWS = "rows = torch.from_numpy(np.asarray(tokens)[index.numpy()].astype(np.int64))"

# checkpoint ----------------------------------------------------------------------------------------------------
_NEW_X = ""

# evaluate ------------------------------------------------------------------------------------------------------

# train ---------------------------------------------------------------------------------------------------------
_NEW_TRAIN_X = ""

# overfit_one_batch ---------------------------------------------------------------------------------------------
_LR = 'lr = optimizer.param_groups[0]["lr"]'

WRONG_VERSIONS = (
    # cross_entropy
    WrongVersion(
        CROSS_ENTROPY,
        "log-sum-exp through torch.logcumsumexp",
        "this exercise's rule is: do not use F.cross_entropy",
        edit(_LOG_PROBS, "log_probs = shifted - torch.logcumsumexp(shifted, dim=-1)[:, -1:]"),
    ),
    WrongVersion(
        CROSS_ENTROPY,
        "log-sum-exp by folding logaddexp over the vocabulary",
        "this exercise's rule is: do not use F.cross_entropy",
        edit(
            "def cross_entropy(logits: torch.Tensor, targets: torch.Tensor, *, ignore_index: int = -100,\n",
            """\
import functools


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor, *, ignore_index: int = -100,
""",
        ),
        edit(_LOG_PROBS, "log_probs = shifted - functools.reduce(torch.logaddexp, shifted.unbind(-1))[:, None]"),
    ),
    WrongVersion(
        CROSS_ENTROPY,
        "softmax applied before the loss",
        "softmax is applied to the logits before",
        edit(
            "logits = logits.reshape(-1, logits.shape[-1])",
            "logits = torch.softmax(logits.reshape(-1, logits.shape[-1]), dim=-1)",
        ),
    ),
    WrongVersion(
        CROSS_ENTROPY,
        "mean over every position, ignored ones included",
        "the mean is over every position",
        edit("return per_position[keep].mean()", "return (per_position * keep).sum() / len(keep)"),
    ),
    WrongVersion(
        CROSS_ENTROPY,
        "smoothing mass spread over V - 1 classes",
        "V - 1 other classes",
        edit("smooth = -log_probs.mean(dim=-1)", "smooth = (-log_probs.sum(dim=-1) - nll) / (logits.shape[-1] - 1)"),
    ),
    WrongVersion(
        CROSS_ENTROPY,
        "label_smoothing accepted but never used",
        "label_smoothing is ignored",
        edit(_PER_POSITION, "per_position = nll"),
    ),
    WrongVersion(
        CROSS_ENTROPY,
        "smoothing term summed over the classes",
        "the smoothing term is the sum of -log p",
        edit("smooth = -log_probs.mean(dim=-1)", "smooth = -log_probs.sum(dim=-1)"),
    ),
    WrongVersion(
        CROSS_ENTROPY,
        "log of a naive softmax",
        "NaN or inf",
        edit(_LOG_PROBS, "log_probs = torch.log(torch.exp(logits) / torch.exp(logits).sum(dim=-1, keepdim=True))"),
    ),
    # adamw
    WrongVersion(
        ADAMW,
        "L2 added to the gradient instead of decoupled decay",
        "added to the gradient",
        edit(
            """\
                p.mul_(1 - lr * decay)
                state["exp_avg"].mul_(beta1).add_(p.grad, alpha=1 - beta1)
                state["exp_avg_sq"].mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
""",
            """\
                grad = p.grad + decay * p
                state["exp_avg"].mul_(beta1).add_(grad, alpha=1 - beta1)
                state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
""",
        ),
    ),
    WrongVersion(
        ADAMW,
        "no bias correction",
        "bias correction is missing",
        edit(
            """\
                m_hat = state["exp_avg"] / (1 - beta1 ** t)
                v_hat = state["exp_avg_sq"] / (1 - beta2 ** t)
""",
            """\
                m_hat = state["exp_avg"]
                v_hat = state["exp_avg_sq"]
""",
        ),
    ),
    WrongVersion(
        ADAMW,
        "decay applied after the update",
        "applied after the Adam step",
        edit("                p.mul_(1 - lr * decay)\n", ""),
        edit(
            "                p.addcdiv_(m_hat, v_hat.sqrt().add_(eps), value=-lr)\n",
            """\
                p.addcdiv_(m_hat, v_hat.sqrt().add_(eps), value=-lr)
                p.mul_(1 - lr * decay)
""",
        ),
    ),
    WrongVersion(
        ADAMW,
        "step counted per group",
        "counted per group",
        edit(
            '            lr, (beta1, beta2), eps, decay = group["lr"], group["betas"], group["eps"], group["weight_decay"]\n',
            """\
            lr, (beta1, beta2), eps, decay = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            group.setdefault("count", 0)
            group["count"] += 1
""",
        ),
        edit('t = state["step"]', 't = group["count"]'),
    ),
    WrongVersion(
        ADAMW,
        "the closure called with gradients off",
        "torch.enable_grad()",
        edit(
            """\
            with torch.enable_grad():
                loss = closure()
""",
            "            loss = closure()\n",
        ),
    ),
    # eps is added to sqrt(v_hat), the bias-corrected v (observed with gradients of the size of eps).
    WrongVersion(
        ADAMW,
        "bias correction folded into the step size (eps not corrected)",
        "the bias correction is folded into the step size",
        edit(
            """\
                m_hat = state["exp_avg"] / (1 - beta1 ** t)
                v_hat = state["exp_avg_sq"] / (1 - beta2 ** t)
                p.addcdiv_(m_hat, v_hat.sqrt().add_(eps), value=-lr)
""",
            """\
                step_size = lr * math.sqrt(1 - beta2 ** t) / (1 - beta1 ** t)
                p.addcdiv_(state["exp_avg"], state["exp_avg_sq"].sqrt().add_(eps), value=-step_size)
""",
        ),
    ),
    # inverse_sqrt_lr
    WrongVersion(
        INVERSE_SQRT,
        "warm-up off by one",
        "off by one",
        edit(
            _RETURN_D_MODEL_MIN, "return d_model ** -0.5 * min((step + 1) ** -0.5, (step + 1) * warmup_steps ** -1.5)"
        ),
    ),
    WrongVersion(
        INVERSE_SQRT,
        "exponents swapped",
        "exponents are swapped",
        edit(_RETURN_D_MODEL_MIN, "return d_model ** -0.5 * min(step ** -1.5, step * warmup_steps ** -0.5)"),
    ),
    WrongVersion(
        INVERSE_SQRT,
        "max instead of min",
        "max instead of min",
        edit(_RETURN_D_MODEL_MIN, "return d_model ** -0.5 * max(step ** -0.5, step * warmup_steps ** -1.5)"),
    ),
    WrongVersion(
        INVERSE_SQRT,
        "step 0 not handled",
        "ZeroDivisionError",
        edit(
            """\
    if step == 0:
        return 0.0
""",
            "",
        ),
    ),
    # cosine_lr
    WrongVersion(
        COSINE,
        "warm-up off by one",
        "off by one",
        edit("return max_lr * step / warmup_steps", "return max_lr * (step + 1) / warmup_steps"),
    ),
    WrongVersion(
        COSINE,
        "cosine over the wrong span",
        "wrong span",
        edit("progress = (step - warmup_steps) / (decay_steps - warmup_steps)", "progress = step / decay_steps"),
    ),
    WrongVersion(
        COSINE,
        "no floor after the end",
        "no floor after decay_steps",
        edit(
            """\
    if step > decay_steps:
        return min_lr
""",
            "",
        ),
    ),
    WrongVersion(
        COSINE,
        "decays to 0 instead of min_lr",
        "ends at 0 instead of min_lr",
        edit(
            "return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + math.cos(math.pi * progress))",
            "return 0.5 * max_lr * (1.0 + math.cos(math.pi * progress))",
        ),
    ),
    # clip_grad_norm
    # The first three are full code, not edits: clip_grad_norm_ (or its parts) reached by a detour, no computation.
    WrongVersion(
        CLIP,
        "clip_grad_norm_ by a computed name, kept in a default argument",
        _RULE,
        code="""\
def clip_grad_norm(parameters, max_norm, _clip=getattr(torch.nn.utils, 'clip_grad_norm' + chr(95))):
    return _clip(parameters, max_norm)
""",
    ),
    WrongVersion(
        CLIP,
        "the function clip_grad_norm_ wraps, reached through its module",
        _RULE,
        code="""\
import importlib

_module = importlib.import_module('torch.nn.utils.' + 'clip' + '_grad')
_inner = vars(_module)['clip_grad_norm' + chr(95)].__wrapped__


def clip_grad_norm(parameters, max_norm):
    with torch.no_grad():
        return _inner(list(parameters), max_norm)
""",
    ),
    WrongVersion(
        CLIP,
        "get_total_norm and clip_grads_with_norm_ kept in a tuple",
        _RULE,
        code="""\
_tools = tuple(vars(torch.nn.utils)[n] for n in sorted(vars(torch.nn.utils)) if n.endswith('_norm') or n.endswith('with_norm_'))


def clip_grad_norm(parameters, max_norm):
    parameters = list(parameters)
    grads = [p.grad for p in parameters if p.grad is not None]
    total = [t for t in _tools if 'total' in t.__name__][0](grads)
    [t for t in _tools if 'with_norm' in t.__name__][0](parameters, max_norm, total)
    return total
""",
    ),
    WrongVersion(
        CLIP,
        "each parameter clipped by its own norm",
        "clipped by its own norm",
        edit("g.mul_(factor)", "g.mul_(torch.clamp(max_norm / (g.norm() + 1e-6), max=1.0))"),
    ),
    WrongVersion(CLIP, "small gradients scaled up", "scaled up", edit(_FACTOR, "factor = max_norm / (total + 1e-6)")),
    WrongVersion(
        CLIP,
        "a generator iterated twice",
        "iterated only once",
        edit(
            """\
    for g in grads:
        g.mul_(factor)
""",
            """\
    for p in parameters:
        if p.grad is not None:
            p.grad.mul_(factor)
""",
        ),
    ),
    WrongVersion(
        CLIP,
        "crashes on parameters without gradients",
        "NoneType",
        edit("grads = [p.grad for p in parameters if p.grad is not None]", "grads = [p.grad for p in parameters]"),
        edit(
            "total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))",
            "total = torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))",
        ),
    ),
    WrongVersion(
        CLIP,
        "crashes when no parameter has a gradient",
        "non-empty",
        edit(
            """\
    if not grads:
        return torch.tensor(0.0)
""",
            "",
        ),
    ),
    WrongVersion(
        CLIP,
        "the factor without the + 1e-6",
        "without the + 1e-6",
        edit(_FACTOR, "factor = torch.clamp(max_norm / total, max=1.0)"),
    ),
    # get_batch
    WrongVersion(
        GET_BATCH,
        "the last valid start is never drawn",
        "the last valid start",
        edit(
            _STARTS, "starts = torch.randint(0, len(tokens) - context_length - 1, (batch_size,), generator=generator)"
        ),
    ),
    WrongVersion(
        GET_BATCH,
        "a start one past the last valid one",
        "out of bounds",
        edit(
            _STARTS, "starts = torch.randint(0, len(tokens) - context_length + 1, (batch_size,), generator=generator)"
        ),
    ),
    WrongVersion(
        GET_BATCH,
        "targets not shifted",
        "targets equal inputs",
        edit("return rows[:, :-1], rows[:, 1:]", "return rows[:, :-1], rows[:, :-1]"),
    ),
    WrongVersion(GET_BATCH, "the device is ignored", "'meta'", edit(_ROWS, 'rows = rows.to("cpu")')),
    WrongVersion(
        GET_BATCH,
        "the global generator instead of the one given",
        "draw the starts from the generator",
        edit(_STARTS, "starts = torch.randint(0, len(tokens) - context_length, (batch_size,))"),
    ),
    WrongVersion(GET_BATCH, "int32 output", "expected torch.int64", edit(_ROWS, "rows = rows.to(device, torch.int32)")),
    WrongVersion(
        GET_BATCH,
        "the token dtype is kept (uint16)",
        "expected torch.int64",
        edit("rows = tokens[index].long()", "rows = tokens[index]"),
        edit(_GET_BATCH_ROWS, "rows = torch.from_numpy(np.asarray(tokens)[index.numpy()])"),
    ),
    # Only the windows are read: no copy of the whole memmap (observed with tracemalloc and a TorchDispatchMode).
    WrongVersion(
        GET_BATCH,
        "whole token file converted to an int64 array before slicing",
        "the whole token file was copied",
        edit(_GET_BATCH_ROWS, "rows = torch.from_numpy(np.asarray(tokens, dtype=np.int64))[index]"),
    ),
    WrongVersion(
        GET_BATCH,
        "whole memmap turned into a tensor with torch.tensor",
        "copied into a tensor",
        edit(_GET_BATCH_ROWS, "rows = torch.tensor(tokens, dtype=torch.long)[index]"),
    ),
    # checkpoint
    WrongVersion(
        CHECKPOINT,
        "the optimizer is not saved",
        "optimizer's state",
        edit('    optimizer.load_state_dict(checkpoint["optimizer"])\n', _NEW_X),
    ),
    WrongVersion(
        CHECKPOINT,
        "the generator is not saved",
        "batch generator's state",
        edit('    generator.set_state(checkpoint["generator"])\n', _NEW_X),
    ),
    WrongVersion(
        CHECKPOINT,
        "the global random state is not saved",
        "global random state",
        edit('    torch.set_rng_state(checkpoint["torch_rng"])\n', _NEW_X),
    ),
    WrongVersion(
        CHECKPOINT,
        "the step is not returned",
        "expected the saved step",
        edit('    return checkpoint["step"]\n', _NEW_X),
    ),
    # evaluate
    WrongVersion(EVALUATE, "no eval mode", "call model.eval()", edit("    model.eval()\n", "")),
    WrongVersion(
        EVALUATE, "the mode is not restored", "restore the mode", edit("model.train(was_training)", "model.train()")
    ),
    WrongVersion(EVALUATE, "gradients recorded", "torch.no_grad()", edit("with torch.no_grad():", "if True:")),
    WrongVersion(
        EVALUATE, "the sum instead of the mean", "return their mean", edit("return total / batches", "return total")
    ),
    WrongVersion(
        EVALUATE,
        "batches asked for on the CPU, not on the model's device",
        "next(model.parameters()).device",
        edit("device = next(model.parameters()).device", 'device = "cpu"'),
    ),
    WrongVersion(
        EVALUATE,
        "the notebook's cross_entropy by name, not the loss_fn given",
        "use the loss_fn and get_batch you are given",
        edit(
            "total += float(loss_fn(model(inputs), targets))", "total += float(cross_entropy(model(inputs), targets))"
        ),
    ),
    WrongVersion(
        EVALUATE,
        "loss_fn called, but the mean taken of the notebook's cross_entropy",
        "the mean of the 3 losses loss_fn returned",
        edit(
            "            total += float(loss_fn(model(inputs), targets))\n",
            """\
            logits = model(inputs)
            loss_fn(logits, targets)
            total += float(cross_entropy(logits, targets))
""",
        ),
    ),
    # train
    WrongVersion(TRAIN, "zero_grad missing", "never zeroed", edit("        optimizer.zero_grad()\n", _NEW_TRAIN_X)),
    WrongVersion(
        TRAIN,
        "clip after step",
        "clipped after optimizer.step()",
        edit("        optimizer.step()\n", ""),
        edit("        loss.backward()\n", "        loss.backward()\n        optimizer.step()\n"),
    ),
    WrongVersion(
        TRAIN, "lr = schedule(t - 1)", "schedule(t - 1)", edit("lr = schedule(step)", "lr = schedule(step - 1)")
    ),
    WrongVersion(
        TRAIN,
        "validation drawn from the training generator",
        "training generator",
        edit(
            "context_length=config.context_length, generator=torch.Generator().manual_seed(config.eval_seed),",
            "context_length=config.context_length, generator=generator,",
        ),
    ),
    WrongVersion(TRAIN, "no model.train()", "never put in train mode", edit("    model.train()\n", _NEW_TRAIN_X)),
    WrongVersion(
        TRAIN,
        "no validation after the last step",
        "one per validation",
        edit(
            "if step % config.eval_interval == 0 or step == config.max_steps:", "if step % config.eval_interval == 0:"
        ),
    ),
    # The progress bar the text asks for (observed by recording tqdm), and a right loop in another order.
    WrongVersion(
        TRAIN,
        "no postfix on the bar",
        "the bar's postfix was set 0 times",
        edit(
            '        bar.set_postfix(loss=f"{loss.item():.3f}", lr=f"{lr:.2e}", tok_s=f"{speed:,.0f}", refresh=False)\n',
            _NEW_TRAIN_X,
        ),
    ),
    WrongVersion(
        TRAIN,
        "a bar without the learning rate",
        "does not show the learning rate",
        edit(
            'bar.set_postfix(loss=f"{loss.item():.3f}", lr=f"{lr:.2e}", tok_s=f"{speed:,.0f}", refresh=False)',
            'bar.set_postfix(loss=f"{loss.item():.3f}", tok_s=f"{speed:,.0f}", refresh=False)',
        ),
    ),
    WrongVersion(
        TRAIN,
        "the bar shown even with progress=False",
        "progress=False) still showed a bar",
        edit(
            'bar = tqdm(range(1, config.max_steps + 1), desc="training", disable=not progress)',
            'bar = tqdm(range(1, config.max_steps + 1), desc="training", disable=False)',
        ),
    ),
    WrongVersion(
        TRAIN,
        "the scheduled rate set on the first parameter group only",
        "set on the first parameter group only",
        edit(
            """\
        for group in optimizer.param_groups:
            group["lr"] = lr
""",
            '        optimizer.param_groups[0]["lr"] = lr\n',
        ),
    ),
    WrongVersion(
        TRAIN,
        "batches asked for on the CPU, not on the model's device",
        "next(model.parameters()).device",
        edit("device = next(model.parameters()).device", 'device = "cpu"'),
    ),
    # The parts given as arguments, used (observed with recording stand-ins, whose results no notebook function gives).
    WrongVersion(
        TRAIN,
        "the loss by the notebook's cross_entropy, not the loss_fn given",
        "called the loss_fn it was given 0 times",
        edit("loss = loss_fn(model(inputs), targets)", "loss = cross_entropy(model(inputs), targets)"),
    ),
    WrongVersion(
        TRAIN,
        "clipping by the notebook's clip_grad_norm, not the clip given",
        "called the clip it was given 0 times",
        edit(
            "clip(model.parameters(), config.max_grad_norm)", "clip_grad_norm(model.parameters(), config.max_grad_norm)"
        ),
    ),
    WrongVersion(
        TRAIN,
        "evaluate not handed the get_batch and loss_fn given",
        "evaluate(..., get_batch=get_batch, loss_fn=loss_fn)",
        edit(
            """\
                context_length=config.context_length, generator=torch.Generator().manual_seed(config.eval_seed),
                get_batch=get_batch, loss_fn=loss_fn))
""",
            "                context_length=config.context_length, generator=torch.Generator().manual_seed(config.eval_seed)))\n",
        ),
    ),
    # overfit_one_batch
    WrongVersion(
        OVERFIT,
        "returns the validation losses",
        "expected 100",
        edit('return history["train_loss"]', 'return history["val_loss"]'),
    ),
    WrongVersion(
        OVERFIT,
        "a learning rate of its own",
        "not the optimizer's",
        edit(
            "history = train(model, optimizer, None, None, config, schedule=lambda step: lr, generator=None,",
            "history = train(model, optimizer, None, None, config, schedule=lambda step: 1e-3, generator=None,",
        ),
    ),
    WrongVersion(
        OVERFIT,
        "one step too few",
        "one per step",
        edit(
            "config = TrainConfig(batch_size=inputs.shape[0], context_length=inputs.shape[1], max_steps=steps,",
            "config = TrainConfig(batch_size=inputs.shape[0], context_length=inputs.shape[1], max_steps=steps - 1,",
        ),
    ),
    WrongVersion(
        OVERFIT,
        "random windows of the batch instead of the batch",
        "always returns (inputs, targets)",
        edit(
            "get_batch=lambda *args, **kwargs: (inputs, targets), progress=False)",
            "get_batch=lambda *args, **kwargs: get_batch(inputs.flatten(), inputs.shape[0], inputs.shape[1], generator=torch.Generator().manual_seed(0)), progress=False)",
        ),
    ),
    WrongVersion(
        OVERFIT,
        "a loop of its own: the train argument is never called",
        "never called the train it was given",
        code="""\
def overfit_one_batch(model, optimizer, inputs, targets, *, steps=100, train=train):
    model.train()
    losses = []
    for _ in range(steps):
        logits = model(inputs)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
    return losses
""",
    ),
    # The rate of the first group, not the optimizer's defaults (observed with two groups and other defaults).
    WrongVersion(
        OVERFIT,
        "constant lr taken from optimizer.defaults",
        "optimizer.defaults['lr']",
        edit(_LR, 'lr = optimizer.defaults["lr"]'),
    ),
    WrongVersion(
        OVERFIT,
        "constant lr taken from the last parameter group",
        "the last group's rate",
        edit(_LR, 'lr = optimizer.param_groups[-1]["lr"]'),
    ),
)
