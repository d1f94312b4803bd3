"""Mistakes students make in notebook 04.

Each wrong version is the solution's answer cell with one mistake written in (``variant`` checks that the
replaced text is there), so the wrong versions differ from a right one only by the mistake. Those written out
in full are the rules' dodges (a whole answer that calls what the rule forbids) and other algorithms.
"""

from wrong import Wrong, catalogue

NOTEBOOK = "04_attention"
RIGHT, variant = catalogue(NOTEBOOK)

# Ways around "do not call torch.softmax" that students try, each a whole answer cell (full code: each is the
# dodge itself, no edit of the solution; tests/test_rules.py tries each against the static and the runtime half).
SOFTMAX_DODGES = {
    "an alias of torch.nn.functional": "from torch.nn import functional as G\n\n\ndef softmax(x, dim=-1):\n"
    "    return G.softmax(x, dim)\n",
    "the method form": "def softmax(x, dim=-1):\n    return x.softmax(dim)\n",
    "getattr with a built name": 'def softmax(x, dim=-1):\n    return getattr(torch, "soft" + "max")(x, dim)\n',
    "a helper that calls it": "def _helper(x, dim):\n    return F.softmax(x, dim=dim)\n\n\ndef softmax(x, dim=-1):\n"
    "    return _helper(x, dim)\n",
    "an import inside the function": "def softmax(x, dim=-1):\n    from torch.nn.functional import softmax as s\n"
    "    return s(x, dim)\n",
    "a reference kept before the check": "sm = torch.softmax\n\n\ndef softmax(x, dim=-1):\n    return sm(x, dim)\n",
    "a default argument": "def softmax(x, dim=-1, _f=torch.softmax):\n    return _f(x, dim)\n",
    "exp of log_softmax": "def softmax(x, dim=-1):\n    return torch.exp(x - torch.logsumexp(x, dim, keepdim=True))\n",
    "nn.Softmax": "def softmax(x, dim=-1):\n    return nn.Softmax(dim)(x)\n",
    "torch's internal function": "def softmax(x, dim=-1):\n    return torch._C._VariableFunctions.softmax(x, dim)\n",
    "the aten operator": "def softmax(x, dim=-1):\n    return torch.ops.aten._softmax(x, dim % x.dim(), False)\n",
}

_SCALE = "/ math.sqrt(d_k)"
_MASK_SCORES = '    scores = torch.where(mask, scores, float("-inf"))\n'
_ZERO_ROWS = "return torch.where(has_visible_key, weights, 0.0)  # ... and are replaced by zeros"
_SDPA = "return attention_weights(q, k, mask) @ v"
_CAUSAL = ", device=device))"
_DECODER = "causal_mask(seq_len, device=token_ids.device) & padding_mask(token_ids, pad_id)"
_CROSS = "padding_mask(source_ids, pad_id).expand(-1, -1, tgt_len, -1)  # a view, no copy"

WRONG = [
    Wrong(
        "softmax",
        "no max subtraction (overflows)",
        variant(
            "softmax",
            (
                "shifted = x - x.amax(dim=dim, keepdim=True)  # the largest entry becomes 0, all others <= 0",
                "shifted = x",
            ),
        ),
        "subtract each slice's maximum",
    ),
    Wrong(
        "softmax",
        "one maximum for the whole tensor",
        variant("softmax", ("x.amax(dim=dim, keepdim=True)", "x.max()")),
        "not one maximum of the whole tensor",
    ),
    Wrong(
        "softmax",
        "ignores dim",
        variant("softmax", ("x.amax(dim=dim,", "x.amax(dim=-1,"), ("exps.sum(dim=dim,", "exps.sum(dim=-1,")),
        "ignores `dim`",
    ),
    # Full code: the forbidden call is the whole answer.
    Wrong(
        "softmax",
        "calls torch.softmax",
        "def softmax(x, dim=-1):\n    return torch.softmax(x, dim)",
        "this exercise's rule is",
    ),
    # The rule's dodges (tests/test_rules.py tries each against the static and the runtime half alone too).
    *(Wrong("softmax", dodge, code, "this exercise's rule is") for dodge, code in SOFTMAX_DODGES.items()),
    Wrong("attention_weights", "no scale", variant("attention_weights", (" " + _SCALE, "")), "not scaled"),
    Wrong("attention_weights", "scales by d_k", variant("attention_weights", (_SCALE, "/ d_k")), "divided by d_k"),
    Wrong(
        "attention_weights",
        "softmax over the query dimension",
        variant(
            "attention_weights",
            ("return softmax(scores, dim=-1)", "return softmax(scores, dim=-2)"),
            ("weights = softmax(scores, dim=-1)", "weights = softmax(scores, dim=-2)"),
        ),
        "runs over the queries",
    ),
    Wrong(
        "attention_weights",
        "inverted mask",
        # Inverted in both places the solution reads the mask (True taken to mean "masked").
        variant(
            "attention_weights",
            ("torch.where(mask, scores,", "torch.where(~mask, scores,"),
            ("mask.any(dim=-1", "(~mask).any(dim=-1"),
        ),
        "inverted",
    ),
    Wrong(
        "attention_weights",
        "mask applied after the softmax",
        variant("attention_weights", (_MASK_SCORES, ""), (_ZERO_ROWS, "return weights * mask")),
        "after the softmax",
    ),
    Wrong(
        "attention_weights",
        "NaN for a fully masked row",
        variant("attention_weights", (_ZERO_ROWS, "return weights")),
        "NaN",
    ),
    # Full code: the attention written out again (unscaled) instead of a call of attention_weights, another
    # algorithm than the solution's one line.
    Wrong(
        "scaled_dot_product_attention",
        "weights without the scale",
        "def scaled_dot_product_attention(q, k, v, mask=None):\n"
        "    return softmax(q @ k.transpose(-1, -2) if mask is None else (q @ k.transpose(-1, -2)).masked_fill("
        "~mask, float('-inf'))) @ v\n",
        "not scaled",
    ),
    # Full code: the forbidden call is the whole answer.
    Wrong(
        "scaled_dot_product_attention",
        "calls torch's function",
        "def scaled_dot_product_attention(q, k, v, mask=None):\n"
        "    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)\n",
        "this exercise's rule is",
    ),
    # Full code: the rule's dodge, the weights written out again.
    Wrong(
        "scaled_dot_product_attention",
        "right values, but the weights written out again instead of attention_weights",
        "def scaled_dot_product_attention(q, k, v, mask=None):\n"
        "    return torch.nan_to_num(softmax((q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).masked_fill("
        "~mask if mask is not None else torch.zeros((), dtype=torch.bool), float('-inf'))), nan=0.0) @ v\n",
        "without calling your attention_weights",
    ),
    # A copy of attention_weights on purpose (the solution's, renamed), then the solution's answer calling it.
    Wrong(
        "scaled_dot_product_attention",
        "right values, from a copy of attention_weights under another name",
        variant("attention_weights", ("def attention_weights(", "def _weights("))
        + "\n\n"
        + variant("scaled_dot_product_attention", (_SDPA, "return _weights(q, k, mask) @ v"))
        + "\n\nattention_weights = lambda q, k, mask=None: _weights(q, k, mask)\n",
        "without calling your attention_weights",
    ),
    # Full code: the last column of logcumsumexp is another algorithm.
    Wrong(
        "softmax",
        "the last column of torch.logcumsumexp",
        "def softmax(x, dim=-1):\n    return torch.exp(x - torch.logcumsumexp(x, dim).narrow(dim, -1, 1))\n",
        "this exercise's rule is: do not call torch.softmax",
    ),
    Wrong(
        "scaled_dot_product_attention",
        "ignores the mask",
        variant("scaled_dot_product_attention", ("attention_weights(q, k, mask)", "attention_weights(q, k)")),
        "attention output with",
    ),
    Wrong(
        "scaled_dot_product_attention",
        "multiplies v by the scores' transpose",
        variant(
            "scaled_dot_product_attention",
            (
                _SDPA,
                "return attention_weights(q, k, mask).transpose(-1, -2)[..., : v.shape[-2], : q.shape[-2]] "
                "@ v[..., : q.shape[-2], :]",
            ),
        ),
        "attention output",
    ),
    Wrong(
        "causal_mask",
        "off-by-one: diagonal masked",
        variant("causal_mask", (_CAUSAL, ", device=device), diagonal=-1)")),
        "diagonal is masked",
    ),
    Wrong(
        "causal_mask",
        "off-by-one: sees the next token",
        variant("causal_mask", (_CAUSAL, ", device=device), diagonal=1)")),
        "sees the next token",
    ),
    Wrong(
        "causal_mask",
        "inverted polarity",
        variant("causal_mask", ("torch.tril(", "torch.triu("), (_CAUSAL, ", device=device), diagonal=1)")),
        "inverted",
    ),
    Wrong("causal_mask", "float mask", variant("causal_mask", ("dtype=torch.bool, ", "")), "torch.bool"),
    Wrong(
        "padding_mask",
        "on the query axis only",
        variant("padding_mask", ("[:, None, None, :]", "[:, None, :, None]")),
        "query axis",
    ),
    Wrong(
        "padding_mask", "inverted", variant("padding_mask", ("token_ids != pad_id", "token_ids == pad_id")), "inverted"
    ),
    Wrong(
        "padding_mask",
        "not shaped to broadcast over heads and queries",
        variant("padding_mask", ("(token_ids != pad_id)[:, None, None, :]", "token_ids != pad_id")),
        "broadcast",
    ),
    Wrong("padding_mask", "assumes pad_id is 0", variant("padding_mask", ("!= pad_id", "!= 0")), "pad_id=1"),
    Wrong(
        "decoder_mask",
        "causal only",
        variant(
            "decoder_mask",
            (_DECODER, "causal_mask(seq_len, device=token_ids.device).expand(token_ids.shape[0], 1, -1, -1)"),
        ),
        "padding is not masked",
    ),
    Wrong(
        "decoder_mask",
        "padding only",
        variant("decoder_mask", (_DECODER, "padding_mask(token_ids, pad_id).expand(-1, 1, seq_len, -1)")),
        "causal part is missing",
    ),
    Wrong(
        "decoder_mask",
        "OR instead of AND",
        variant("decoder_mask", (") & padding_mask(", ") | padding_mask(")),
        "use &",
    ),
    Wrong(
        "cross_attention_mask",
        "masks the target's padding too",
        variant(
            "cross_attention_mask",
            (_CROSS, "(padding_mask(source_ids, pad_id) & (target_ids != pad_id)[:, None, :, None])"),
        ),
        "padded target",
    ),
    Wrong(
        "cross_attention_mask",
        "adds a causal part",
        variant(
            "cross_attention_mask",
            (
                _CROSS,
                "padding_mask(source_ids, pad_id) & torch.ones(tgt_len, source_ids.shape[1], dtype=torch.bool).tril()",
            ),
        ),
        "causal part",
    ),
    Wrong(
        "cross_attention_mask",
        "rows and columns swapped",
        variant(
            "cross_attention_mask",
            (_CROSS, "padding_mask(source_ids, pad_id).transpose(-1, -2).expand(-1, -1, -1, tgt_len)"),
        ),
        "queries come from the target",
    ),
]
