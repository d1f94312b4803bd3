"""Wrong versions of notebook 15's answers (15_post_training): see ``wrong/__init__.py``."""

from autograder.notebooks.nb15_post_training import ADD_LORA, DPO, LOGPROBS, LORA, REFERENCE, SFT_BATCH
from wrong import WrongVersion, edit, solution_answers

# sft_batch -----------------------------------------------------------------------------------------------------
_LABELS = "labels[row, first:n] = tokens[first + 1 :]"
_FIRST = (
    "first = len(prompt) + 1  # labels[first] is the response's first token (after <|user|>, prompt, <|assistant|>)"
)
_INPUTS = "input_ids[row, :n] = tokens[:-1]"
_PAD_LABELS = "labels = torch.full((len(pairs), T), IGNORE, dtype=torch.long)"

# LoRALinear ----------------------------------------------------------------------------------------------------
_FORWARD = "return out + self.scaling * (self.dropout(x) @ self.lora_A.T @ self.lora_B.T)"
_SCALING = "self.scaling = alpha / r"
_MERGE = "self.base.weight += self.scaling * self.lora_B @ self.lora_A"
_UNMERGE = "self.base.weight -= self.scaling * self.lora_B @ self.lora_A"
_INIT_A = "nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # as nn.Linear initialises its weight"
_FREEZE_BASE = "self.base.requires_grad_(False)"

# add_lora ------------------------------------------------------------------------------------------------------
_MATCH = 'if isinstance(module, nn.Linear) and any(name == t or name.endswith("." + t) for t in targets)'
_FREEZE = "model.requires_grad_(False)  # LoRALinear's new A and B, made below, are the only trainable parameters"
_RETURN = "    return model\n"

# response_logprobs ---------------------------------------------------------------------------------------------
_SUM = "return (picked * targets).sum(dim=-1)"
_LOG_P = "log_p = torch.log_softmax(logits.float(), dim=-1)"

# frozen_reference ----------------------------------------------------------------------------------------------
_FROZEN = "return copy.deepcopy(model).eval().requires_grad_(False)"

# dpo_loss ------------------------------------------------------------------------------------------------------
_LOSS = "loss = -F.logsigmoid(chosen - rejected).mean()"
_RETURN_DPO = "return loss, chosen.detach(), rejected.detach()"
_CHOSEN = "chosen = beta * (policy_chosen - reference_chosen)"

WRONG_VERSIONS = (
    # sft_batch
    WrongVersion(
        SFT_BATCH, "counts the prompt too", "every target is counted", edit(_LABELS, "labels[row, :n] = tokens[1:]")
    ),
    WrongVersion(
        SFT_BATCH,
        "counts the assistant token",
        "the <|assistant|> token is counted",
        edit(_LABELS, "labels[row, first - 1 : n] = tokens[first:]"),
    ),
    WrongVersion(
        SFT_BATCH,
        "does not count <|end|>",
        "<|end|> is not a target",
        edit(_LABELS, "labels[row, first : n - 1] = tokens[first + 1 : -1]"),
    ),
    WrongVersion(
        SFT_BATCH,
        "shifted one too far",
        "shifted one position too far",
        edit(_LABELS, "labels[row, first + 1 : n] = tokens[first + 2 :]"),
    ),
    WrongVersion(
        SFT_BATCH,
        "labels not shifted",
        "the labels are not shifted",
        edit(_LABELS, "labels[row, first + 1 : n] = tokens[first + 1 : n]"),
    ),
    WrongVersion(
        SFT_BATCH,
        "padding labelled with the padding token",
        "the padding's labels are the padding token",
        edit(_PAD_LABELS, "labels = torch.full((len(pairs), T), pad_id, dtype=torch.long)"),
        edit(_LABELS, "labels[row, :n] = IGNORE\n        labels[row, first:n] = tokens[first + 1 :]"),
    ),
    WrongVersion(
        SFT_BATCH,
        "inputs hold the whole sequence",
        "hold the whole sequence",
        edit(
            "T = max(len(sequence) for sequence in sequences) - 1", "T = max(len(sequence) for sequence in sequences)"
        ),
        edit(_INPUTS, "input_ids[row, : n + 1] = tokens"),
    ),
    WrongVersion(
        SFT_BATCH,
        "padded on the left",
        "expected",
        edit(_INPUTS, "input_ids[row, T - n :] = tokens[:-1]"),
        edit(_LABELS, "labels[row, T - n + first :] = tokens[first + 1 :]"),
    ),
    WrongVersion(
        SFT_BATCH,
        "finds the <|assistant|> token by searching for it",
        "labels for pairs whose prompts and responses contain the special ids are",
        edit(_FIRST, "first = sequence.index(assistant_id)"),
    ),
    WrongVersion(
        SFT_BATCH,
        "appends <|end|> to the caller's responses",
        "changed the lists it was given",
        edit(
            "    sequences = [[user_id, *prompt, assistant_id, *response, end_id] for prompt, response in pairs]",
            "    for _, response in pairs:\n        response.append(end_id)\n"
            "    sequences = [[user_id, *prompt, assistant_id, *response] for prompt, response in pairs]",
        ),
    ),
    WrongVersion(
        SFT_BATCH,
        "float tensors",
        "token ids are torch.long",
        edit("return input_ids, labels", "return input_ids.float(), labels.float()"),
    ),
    # LoRALinear
    WrongVersion(
        LORA,
        "no scaling",
        "the LoRA path is not scaled",
        edit(_FORWARD, "return out + self.dropout(x) @ self.lora_A.T @ self.lora_B.T"),
    ),
    WrongVersion(LORA, "scaled by alpha", "scaled by alpha;", edit(_SCALING, "self.scaling = alpha")),
    WrongVersion(LORA, "scaled by r / alpha", "scaled by r / alpha", edit(_SCALING, "self.scaling = r / alpha")),
    WrongVersion(LORA, "scaled by alpha * r", "scaled by alpha * r", edit(_SCALING, "self.scaling = alpha * r")),
    WrongVersion(LORA, "the LoRA path not added", "the LoRA path is not added", edit(_FORWARD, "return out")),
    WrongVersion(
        LORA,
        "A zero, B random",
        "lora_B must start at zeros",
        edit(_INIT_A, "nn.init.zeros_(self.lora_A)"),
        edit(
            "self.lora_B = nn.Parameter(torch.zeros(base.out_features, r))",
            "self.lora_B = nn.Parameter(torch.randn(base.out_features, r) * 0.01)",
        ),
    ),
    WrongVersion(LORA, "A and B both zero", "lora_A is all zeros", edit(_INIT_A, "nn.init.zeros_(self.lora_A)")),
    WrongVersion(LORA, "A from a standard normal", "has entries up to", edit(_INIT_A, "nn.init.normal_(self.lora_A)")),
    WrongVersion(
        LORA,
        "A uniform but far too small",
        "standard deviation",
        edit(_INIT_A, "nn.init.uniform_(self.lora_A, -0.01, 0.01)"),
    ),
    WrongVersion(
        LORA,
        "A from nn.init.kaiming_uniform_'s default",
        "has entries up to",
        edit(_INIT_A, "nn.init.kaiming_uniform_(self.lora_A)"),
    ),
    WrongVersion(LORA, "the base not frozen", "the base layer must be frozen", edit(_FREEZE_BASE, "pass")),
    WrongVersion(
        LORA,
        "merge without the scaling",
        "merge() adds B @ A without the scaling",
        edit(_MERGE, "self.base.weight += self.lora_B @ self.lora_A"),
        edit(_UNMERGE, "self.base.weight -= self.lora_B @ self.lora_A"),
    ),
    WrongVersion(
        LORA,
        "forward adds the LoRA path after merging",
        "the LoRA path is added again",
        edit("        if self.merged:  # the correction is inside base.weight now\n            return out\n", ""),
    ),
    WrongVersion(
        LORA,
        "merge does nothing",
        "merge() does not change the base layer's weight",
        edit(_MERGE, "pass"),
        edit(_UNMERGE, "pass"),
    ),
    WrongVersion(LORA, "merges twice", "second merge()", edit("        if not self.merged:\n", "        if True:\n")),
    WrongVersion(
        LORA,
        "merge makes a new, trainable weight",
        "requires grad",
        edit(_MERGE, "self.base.weight = nn.Parameter(self.base.weight + self.scaling * self.lora_B @ self.lora_A)"),
        edit(_UNMERGE, "self.base.weight = nn.Parameter(self.base.weight - self.scaling * self.lora_B @ self.lora_A)"),
    ),
    WrongVersion(
        LORA,
        "merge state kept under another name",
        "self.merged is",
        code=solution_answers("15_post_training")["lora_linear"].replace("self.merged", "self.is_merged"),
    ),
    WrongVersion(LORA, "unmerge does nothing", "merge() then unmerge()", edit(_UNMERGE, "pass")),
    WrongVersion(
        LORA,
        "dropout on the output",
        "dropout",
        edit("out = self.base(x)\n", "out = self.dropout(self.base(x))\n"),
        edit(_FORWARD, "return out + self.scaling * (x @ self.lora_A.T @ self.lora_B.T)"),
    ),
    WrongVersion(
        LORA,
        "dropout on the LoRA path's output",
        "its covariance",
        edit(_FORWARD, "return out + self.dropout(self.scaling * (x @ self.lora_A.T @ self.lora_B.T))"),
    ),
    WrongVersion(
        LORA,
        "dropout between A and B",
        "its covariance",
        edit(_FORWARD, "return out + self.scaling * (self.dropout(x @ self.lora_A.T) @ self.lora_B.T)"),
    ),
    WrongVersion(
        LORA,
        "no dropout at all",
        "the dropout is not applied",
        edit(_FORWARD, "return out + self.scaling * (x @ self.lora_A.T @ self.lora_B.T)"),
    ),
    # add_lora
    WrongVersion(
        ADD_LORA,
        "targets matched as substrings",
        "not targets",
        edit(_MATCH, "if isinstance(module, nn.Linear) and any(t in name for t in targets)"),
    ),
    WrongVersion(
        ADD_LORA,
        "targets matched by the last part of the name only",
        "missing",
        edit(_MATCH, 'if isinstance(module, nn.Linear) and name.rpartition(".")[2] in targets'),
    ),
    WrongVersion(
        ADD_LORA,
        "wraps any module whose name matches",
        "your code raised",
        edit(_MATCH, 'if name and any(name == t or name.endswith("." + t) for t in targets)'),
    ),
    WrongVersion(
        ADD_LORA,
        "a layer chosen by two targets is wrapped twice",
        "wrap each of them once",
        code=solution_answers("15_post_training")["add_lora"].replace(
            "name for name, module in model.named_modules()\n        if isinstance(module, nn.Linear) and "
            'any(name == t or name.endswith("." + t) for t in targets)',
            "name for t in targets for name, module in model.named_modules()\n        if isinstance(module, nn.Linear) "
            'and (name == t or name.endswith("." + t))',
        ),
    ),
    WrongVersion(
        ADD_LORA,
        "r capped at the layer's width",
        "wider than the 32-wide layers",
        edit(
            "setattr(parent, child, LoRALinear(getattr(parent, child), r, alpha, dropout))",
            "layer = getattr(parent, child)\n"
            "        setattr(parent, child, LoRALinear(layer, min(r, layer.in_features, layer.out_features), alpha, dropout))",
        ),
    ),
    WrongVersion(
        ADD_LORA,
        "type(module) is nn.Linear",
        "subclass of nn.Linear",
        edit("if isinstance(module, nn.Linear) and", "if type(module) is nn.Linear and"),
    ),
    WrongVersion(ADD_LORA, "nothing frozen", "still require grad", edit(_FREEZE, "pass")),
    WrongVersion(
        ADD_LORA,
        "only the wrapped layers frozen",
        "still require grad",
        edit(_FREEZE, "pass"),
        edit(
            "        parent = model.get_submodule(parent_name)\n",
            "        parent = model.get_submodule(parent_name)\n        getattr(parent, child).requires_grad_(False)\n",
        ),
    ),
    WrongVersion(
        ADD_LORA,
        "freezes everything, LoRA too",
        "trainable parameters; expected",
        edit(_RETURN, "    model.requires_grad_(False)\n    return model\n"),
    ),
    WrongVersion(
        ADD_LORA,
        "dropout not passed on",
        "pass dropout=0.1 on to LoRALinear",
        edit(
            "setattr(parent, child, LoRALinear(getattr(parent, child), r, alpha, dropout))",
            "setattr(parent, child, LoRALinear(getattr(parent, child), r, alpha))",
        ),
    ),
    WrongVersion(ADD_LORA, "returns nothing", "it returns the model it changed", edit(_RETURN, "    return None\n")),
    WrongVersion(
        ADD_LORA,
        "alpha and r swapped",
        "differs from the expected values",
        edit(
            "setattr(parent, child, LoRALinear(getattr(parent, child), r, alpha, dropout))",
            "setattr(parent, child, LoRALinear(getattr(parent, child), r, r, dropout))",
        ),
    ),
    # response_logprobs
    WrongVersion(
        LOGPROBS,
        "averaged",
        "it averages the log-probabilities",
        edit(_SUM, "return (picked * targets).sum(dim=-1) / targets.sum(dim=-1)"),
    ),
    WrongVersion(
        LOGPROBS,
        "ignored positions counted",
        "labelled -100 (prompt and padding) are counted",
        edit(_SUM, "return picked.sum(dim=-1)"),
    ),
    WrongVersion(LOGPROBS, "raw logits", "it sums the raw logits", edit(_LOG_P, "log_p = logits.float()")),
    WrongVersion(
        LOGPROBS,
        "probabilities",
        "it sums probabilities",
        edit(_LOG_P, "log_p = torch.softmax(logits.float(), dim=-1)"),
    ),
    WrongVersion(
        LOGPROBS,
        "log_softmax in the logits' dtype",
        "compute in float32 or wider",
        edit(_LOG_P, "log_p = torch.log_softmax(logits, dim=-1)"),
    ),
    WrongVersion(
        LOGPROBS,
        "a mean per row times the row's count",
        "a row with none",
        edit(
            _SUM,
            "return torch.stack([F.cross_entropy(row.float(), y, ignore_index=IGNORE) * -(y != IGNORE).sum() "
            "for row, y in zip(logits, labels, strict=True)])",
        ),
    ),
    WrongVersion(LOGPROBS, "negated", "its sign is flipped", edit(_SUM, "return -(picked * targets).sum(dim=-1)")),
    WrongVersion(
        LOGPROBS,
        "log of softmax",
        "NaN or inf",
        edit(_LOG_P, "log_p = torch.softmax(logits.float(), dim=-1).log()"),
    ),
    WrongVersion(
        LOGPROBS,
        "detached",
        "no gradient reached the logits",
        edit(_LOG_P, "log_p = torch.log_softmax(logits.detach().float(), dim=-1)"),
    ),
    # dpo_loss
    WrongVersion(
        DPO,
        "margin sign flipped",
        "the margin's sign is flipped",
        edit(_LOSS, "loss = -F.logsigmoid(rejected - chosen).mean()"),
    ),
    WrongVersion(
        DPO,
        "beta missing",
        "beta is missing",
        edit(_CHOSEN, "chosen = policy_chosen - reference_chosen"),
        edit(
            "rejected = beta * (policy_rejected - reference_rejected)",
            "rejected = policy_rejected - reference_rejected",
        ),
    ),
    WrongVersion(
        DPO,
        "divides by beta",
        "it divides by beta",
        edit(_CHOSEN, "chosen = (policy_chosen - reference_chosen) / beta"),
        edit(
            "rejected = beta * (policy_rejected - reference_rejected)",
            "rejected = (policy_rejected - reference_rejected) / beta",
        ),
    ),
    WrongVersion(
        DPO,
        "sum over the batch",
        "it sums over the batch",
        edit(_LOSS, "loss = -F.logsigmoid(chosen - rejected).sum()"),
    ),
    WrongVersion(
        DPO, "loss sign flipped", "its sign is flipped", edit(_LOSS, "loss = F.logsigmoid(chosen - rejected).mean()")
    ),
    WrongVersion(
        DPO,
        "reference signs wrong",
        "the reference's log-probabilities enter with the wrong signs",
        edit(
            _LOSS,
            "loss = -F.logsigmoid(beta * ((policy_chosen - policy_rejected) - (reference_rejected - reference_chosen))).mean()",
        ),
    ),
    WrongVersion(
        DPO,
        "rewards not detached",
        "the rewards returned still require grad",
        edit(_RETURN_DPO, "return loss, chosen, rejected"),
    ),
    WrongVersion(
        DPO,
        "log of a sigmoid",
        "NaN or inf",
        edit(_LOSS, "loss = -torch.log(torch.sigmoid(chosen - rejected)).mean()"),
    ),
    WrongVersion(
        DPO,
        "computed in float32",
        "keep the inputs' dtype",
        edit(_LOSS, "loss = -F.logsigmoid((chosen - rejected).float()).mean()"),
    ),
    WrongVersion(
        DPO,
        "computed in float64",
        "keep the inputs' dtype",
        edit(_LOSS, "loss = -F.logsigmoid((chosen - rejected).double()).mean()"),
    ),
    WrongVersion(
        DPO,
        "beta = 0 taken for the default",
        "(beta=0.0)",
        edit(_CHOSEN, "beta = beta or 0.1\n    " + _CHOSEN),
    ),
    WrongVersion(
        DPO,
        "rewards swapped",
        "the chosen rewards",
        edit(_RETURN_DPO, "return loss, rejected.detach(), chosen.detach()"),
    ),
    WrongVersion(
        DPO,
        "the loss detached",
        "no gradient reached the policy",
        edit(_RETURN_DPO, "return loss.detach(), chosen.detach(), rejected.detach()"),
    ),
    # frozen_reference
    WrongVersion(REFERENCE, "returns the model itself", "returned the model itself", edit(_FROZEN, "return model")),
    WrongVersion(
        REFERENCE,
        "a shallow copy",
        "shares",
        edit(_FROZEN, "reference = copy.copy(model)\n    reference.training = False\n    return reference"),
    ),
    WrongVersion(
        REFERENCE,
        "not frozen",
        "require grad: freeze them",
        edit(_FROZEN, "return copy.deepcopy(model).eval()"),
    ),
    WrongVersion(
        REFERENCE,
        "not in eval mode",
        "are in training mode",
        edit(_FROZEN, "return copy.deepcopy(model).requires_grad_(False)"),
    ),
    WrongVersion(
        REFERENCE,
        "freezes the model before copying it",
        "froze the model it was given",
        edit(_FROZEN, "model.eval().requires_grad_(False)\n    return copy.deepcopy(model)"),
    ),
    WrongVersion(
        REFERENCE,
        "only the top module in eval mode",
        "are in training mode",
        edit(
            _FROZEN,
            "reference = copy.deepcopy(model).requires_grad_(False)\n    reference.training = False\n    return reference",
        ),
    ),
    WrongVersion(
        REFERENCE,
        "puts the model back in training mode",
        "changed its modules' modes",
        edit(
            _FROZEN,
            "model.eval()\n    reference = copy.deepcopy(model).requires_grad_(False)\n    model.train()\n    return reference",
        ),
    ),
)
