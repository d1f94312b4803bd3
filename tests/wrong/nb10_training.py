"""Mistakes students make in notebook 10.

Each wrong version is the solution's answer cell with one mistake written in (``variant`` checks that the
replaced text is there), so the wrong versions differ from a right one only by the mistake; the few written out
in full say why. The code runs in the solution notebook's namespace, which has ``np``, ``time``, ``tqdm``,
``TrainConfig`` and the other answers.
"""

from wrong import Wrong, catalogue

NOTEBOOK = "10_training"
RIGHT, variant = catalogue(NOTEBOOK)

# The solution's train, which tests/test_rules.py edits into a right answer in another order.
TRAIN = RIGHT["train"]

_STARTS = "torch.randint(0, len(tokens) - context_length, (batch_size,), generator=generator)"

WRONG = [
    # The exercises' rules (autograder.rules), against a determined student: each message quotes the rule.
    # The first three are full code, not edits: clip_grad_norm_ (or its parts) reached by a detour, no computation.
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
        variant(
            "cross_entropy",
            ("torch.log(torch.exp(shifted).sum(dim=-1, keepdim=True))", "torch.logcumsumexp(shifted, dim=-1)[:, -1:]"),
        ),
        "this exercise's rule is: do not use F.cross_entropy",
    ),
    Wrong(
        "cross_entropy",
        "log-sum-exp by folding logaddexp over the vocabulary",
        variant(
            "cross_entropy",
            (
                "torch.log(torch.exp(shifted).sum(dim=-1, keepdim=True))",
                "functools.reduce(torch.logaddexp, shifted.unbind(-1))[:, None]",
            ),
            ("def cross_entropy", "import functools\n\n\ndef cross_entropy"),
        ),
        "this exercise's rule is: do not use F.cross_entropy",
    ),
    # Exercise 6 (get_batch)
    Wrong(
        "get_batch",
        "the last valid start is never drawn",
        variant(
            "get_batch", (_STARTS, _STARTS.replace("len(tokens) - context_length", "len(tokens) - context_length - 1"))
        ),
        "the last valid start",
    ),
    Wrong(
        "get_batch",
        "a start one past the last valid one",
        variant(
            "get_batch", (_STARTS, _STARTS.replace("len(tokens) - context_length", "len(tokens) - context_length + 1"))
        ),
        "out of bounds",
    ),
    Wrong(
        "get_batch",
        "targets not shifted",
        variant("get_batch", ("return rows[:, :-1], rows[:, 1:]", "return rows[:, :-1], rows[:, :-1]")),
        "targets equal inputs",
    ),
    Wrong(
        "get_batch",
        "the device is ignored",
        variant("get_batch", ("rows = rows.to(device)", 'rows = rows.to("cpu")')),
        "'meta'",
    ),
    Wrong(
        "get_batch",
        "the global generator instead of the one given",
        variant("get_batch", (", generator=generator)", ")")),
        "draw the starts from the generator",
    ),
    Wrong(
        "get_batch",
        "int32 output",
        variant("get_batch", ("rows = rows.to(device)", "rows = rows.to(device, torch.int32)")),
        "expected torch.int64",
    ),
    Wrong(
        "get_batch",
        "the token dtype is kept (uint16)",
        variant(
            "get_batch",
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
        variant(
            "cross_entropy",
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
        variant(
            "cross_entropy", ("return per_position[keep].mean()", "return (per_position * keep).sum() / len(keep)")
        ),
        "the mean is over every position",
    ),
    Wrong(
        "cross_entropy",
        "smoothing mass spread over V - 1 classes",
        variant(
            "cross_entropy",
            ("smooth = -log_probs.mean(dim=-1)", "smooth = (-log_probs.sum(dim=-1) - nll) / (logits.shape[-1] - 1)"),
        ),
        "V - 1 other classes",
    ),
    Wrong(
        "cross_entropy",
        "log of a naive softmax",
        variant(
            "cross_entropy",
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
        variant(
            "adamw",
            ("                p.mul_(1 - lr * decay)\n", "                grad = p.grad + decay * p\n"),
            ("add_(p.grad, alpha=1 - beta1)", "add_(grad, alpha=1 - beta1)"),
            ("addcmul_(p.grad, p.grad, value=1 - beta2)", "addcmul_(grad, grad, value=1 - beta2)"),
        ),
        "added to the gradient",
    ),
    Wrong(
        "adamw",
        "no bias correction",
        variant(
            "adamw",
            ('m_hat = state["exp_avg"] / (1 - beta1 ** t)', 'm_hat = state["exp_avg"]'),
            ('v_hat = state["exp_avg_sq"] / (1 - beta2 ** t)', 'v_hat = state["exp_avg_sq"]'),
        ),
        "bias correction is missing",
    ),
    Wrong(
        "adamw",
        "decay applied after the update",
        variant(
            "adamw",
            ("                p.mul_(1 - lr * decay)\n", ""),
            ("value=-lr)", "value=-lr)\n                p.mul_(1 - lr * decay)"),
        ),
        "applied after the Adam step",
    ),
    Wrong(
        "adamw",
        "step counted per group",
        variant(
            "adamw",
            (
                "            for p in [q for q",
                '            group.setdefault("count", 0)\n            group["count"] += 1\n            for p in [q for q',
            ),
            ('t = state["step"]', 't = group["count"]'),
        ),
        "counted per group",
    ),
    Wrong(
        "adamw",
        "the closure called with gradients off",
        variant(
            "adamw",
            ("            with torch.enable_grad():\n                loss = closure()", "            loss = closure()"),
        ),
        "torch.enable_grad()",
    ),
    # Exercise 3 (inverse_sqrt_lr)
    Wrong(
        "inverse_sqrt_lr",
        "warm-up off by one",
        variant(
            "inverse_sqrt_lr",
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
        variant(
            "inverse_sqrt_lr",
            ("min(step ** -0.5, step * warmup_steps ** -1.5)", "min(step ** -1.5, step * warmup_steps ** -0.5)"),
        ),
        "exponents are swapped",
    ),
    Wrong(
        "inverse_sqrt_lr",
        "max instead of min",
        variant("inverse_sqrt_lr", ("min(step ** -0.5", "max(step ** -0.5")),
        "max instead of min",
    ),
    Wrong(
        "inverse_sqrt_lr",
        "step 0 not handled",
        variant("inverse_sqrt_lr", ("    if step == 0:\n        return 0.0\n", "")),
        "ZeroDivisionError",
    ),
    # Exercise 4 (cosine_lr)
    Wrong(
        "cosine_lr",
        "warm-up off by one",
        variant("cosine_lr", ("max_lr * step / warmup_steps", "max_lr * (step + 1) / warmup_steps")),
        "off by one",
    ),
    Wrong(
        "cosine_lr",
        "cosine over the wrong span",
        variant(
            "cosine_lr",
            ("progress = (step - warmup_steps) / (decay_steps - warmup_steps)", "progress = step / decay_steps"),
        ),
        "wrong span",
    ),
    Wrong(
        "cosine_lr",
        "no floor after the end",
        variant("cosine_lr", ("    if step > decay_steps:\n        return min_lr\n", "")),
        "no floor after decay_steps",
    ),
    Wrong(
        "cosine_lr",
        "decays to 0 instead of min_lr",
        variant("cosine_lr", ("return min_lr + 0.5 * (max_lr - min_lr) *", "return 0.5 * max_lr *")),
        "ends at 0 instead of min_lr",
    ),
    # Exercise 5 (clip_grad_norm)
    Wrong(
        "clip_grad_norm",
        "each parameter clipped by its own norm",
        variant(
            "clip_grad_norm",
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
        variant("clip_grad_norm", ("torch.clamp(max_norm / (total + 1e-6), max=1.0)", "max_norm / (total + 1e-6)")),
        "scaled up",
    ),
    Wrong(
        "clip_grad_norm",
        "a generator iterated twice",
        variant(
            "clip_grad_norm",
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
        variant(
            "clip_grad_norm",
            ("grads = [p.grad for p in parameters if p.grad is not None]", "grads = [p.grad for p in parameters]"),
            ("torch.stack([torch.linalg.vector_norm(g) for g in grads])", "torch.stack([g.norm() for g in grads])"),
        ),
        "NoneType",
    ),
    Wrong(
        "clip_grad_norm",
        "crashes when no parameter has a gradient",
        variant("clip_grad_norm", ("    if not grads:\n        return torch.tensor(0.0)\n", "")),
        "non-empty",
    ),
    # Exercise 7
    Wrong(
        "checkpoint",
        "the optimizer is not saved",
        variant("checkpoint", ('    optimizer.load_state_dict(checkpoint["optimizer"])\n', "")),
        "optimizer's state",
    ),
    Wrong(
        "checkpoint",
        "the generator is not saved",
        variant("checkpoint", ('    generator.set_state(checkpoint["generator"])\n', "")),
        "batch generator's state",
    ),
    Wrong(
        "checkpoint",
        "the global random state is not saved",
        variant("checkpoint", ('    torch.set_rng_state(checkpoint["torch_rng"])\n', "")),
        "global random state",
    ),
    Wrong(
        "checkpoint",
        "the step is not returned",
        variant("checkpoint", ('    return checkpoint["step"]\n', "")),
        "expected the saved step",
    ),
    # Exercise 8
    Wrong("evaluate", "no eval mode", variant("evaluate", ("    model.eval()\n", "")), "call model.eval()"),
    Wrong(
        "evaluate",
        "the mode is not restored",
        variant("evaluate", ("model.train(was_training)", "model.train()")),
        "restore the mode",
    ),
    Wrong(
        "evaluate",
        "gradients recorded",
        variant("evaluate", ("    with torch.no_grad():\n        for", "    if True:\n        for")),
        "torch.no_grad()",
    ),
    Wrong(
        "evaluate",
        "the sum instead of the mean",
        variant("evaluate", ("return total / batches", "return total")),
        "return their mean",
    ),
    # Exercise 9
    Wrong("train", "zero_grad missing", variant("train", ("        optimizer.zero_grad()\n", "")), "never zeroed"),
    Wrong(
        "train",
        "clip after step",
        variant(
            "train",
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
        variant("train", ("lr = schedule(step)", "lr = schedule(step - 1)")),
        "schedule(t - 1)",
    ),
    Wrong(
        "train",
        "validation drawn from the training generator",
        variant("train", ("generator=torch.Generator().manual_seed(config.eval_seed)", "generator=generator")),
        "training generator",
    ),
    Wrong("train", "no model.train()", variant("train", ("    model.train()\n", "")), "never put in train mode"),
    Wrong(
        "train",
        "no validation after the last step",
        variant("train", (" or step == config.max_steps", "")),
        "one per validation",
    ),
    # Exercise 10
    Wrong(
        "overfit_one_batch",
        "returns the validation losses",
        variant("overfit_one_batch", ('return history["train_loss"]', 'return history["val_loss"]')),
        "expected 100",
    ),
    Wrong(
        "overfit_one_batch",
        "a learning rate of its own",
        variant("overfit_one_batch", ("schedule=lambda step: lr", "schedule=lambda step: 1e-3")),
        "not the optimizer's",
    ),
    Wrong(
        "overfit_one_batch",
        "one step too few",
        variant("overfit_one_batch", ("max_steps=steps,", "max_steps=steps - 1,")),
        "one per step",
    ),
    Wrong(
        "overfit_one_batch",
        "random windows of the batch instead of the batch",
        variant(
            "overfit_one_batch",
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
        variant(
            "train",
            (
                '        bar.set_postfix(loss=f"{loss.item():.3f}", lr=f"{lr:.2e}", tok_s=f"{speed:,.0f}", refresh=False)\n',
                "",
            ),
        ),
        "the bar's postfix was set 0 times",
    ),
    Wrong(
        "train",
        "a bar without the learning rate",
        variant("train", ('lr=f"{lr:.2e}", ', "")),
        "does not show the learning rate",
    ),
    Wrong(
        "train",
        "the bar shown even with progress=False",
        variant("train", ("disable=not progress", "disable=False")),
        "progress=False) still showed a bar",
    ),
]
