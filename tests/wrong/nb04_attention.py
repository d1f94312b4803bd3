"""Wrong versions of notebook 04's answers (04_attention): see ``wrong/__init__.py``."""

from autograder.notebooks.nb04_attention import CAUSAL, CROSS, DECODER, PADDING, SDPA, SOFTMAX, WEIGHTS
from wrong import WrongVersion, edit

_RULE = "this exercise's rule is"
_SAYS_INVERTED = "inverted"

# softmax -------------------------------------------------------------------------------------------------------
_SHIFTED = "shifted = x - x.amax(dim=dim, keepdim=True)  # the largest entry becomes 0, all others <= 0"

# attention_weights ---------------------------------------------------------------------------------------------
_SCORES = "scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)"
_RETURN_TORCH_WHERE = "return torch.where(has_visible_key, weights, 0.0)  # ... and are replaced by zeros"

# scaled_dot_product_attention ----------------------------------------------------------------------------------
_RETURN_ATTENTION_WEIGHTS_Q = "return attention_weights(q, k, mask) @ v"

# causal_mask ---------------------------------------------------------------------------------------------------
_RETURN_TORCH_TRIL = "return torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool, device=device))"

# padding_mask --------------------------------------------------------------------------------------------------
_RETURN_TOKEN_IDS_PAD_ID = "return (token_ids != pad_id)[:, None, None, :]"

# decoder_mask --------------------------------------------------------------------------------------------------
_RETURN_CAUSAL_MASK_SEQ_LEN = "return causal_mask(seq_len, device=token_ids.device) & padding_mask(token_ids, pad_id)"

# cross_attention_mask ------------------------------------------------------------------------------------------
_RETURN_PADDING_MASK_SOURCE_IDS = (
    "return padding_mask(source_ids, pad_id).expand(-1, -1, tgt_len, -1)  # a view, no copy"
)

WRONG_VERSIONS = (
    # softmax
    WrongVersion(
        SOFTMAX, "no max subtraction (overflows)", "subtract each slice's maximum", edit(_SHIFTED, "shifted = x")
    ),
    WrongVersion(
        SOFTMAX,
        "one maximum for the whole tensor",
        "not one maximum of the whole tensor",
        edit(_SHIFTED, "shifted = x - x.max()  # the largest entry becomes 0, all others <= 0"),
    ),
    WrongVersion(
        SOFTMAX,
        "ignores dim",
        "ignores `dim`",
        edit(_SHIFTED, "shifted = x - x.amax(dim=-1, keepdim=True)  # the largest entry becomes 0, all others <= 0"),
        edit("return exps / exps.sum(dim=dim, keepdim=True)", "return exps / exps.sum(dim=-1, keepdim=True)"),
    ),
    # Full code: the forbidden call is the whole answer.
    WrongVersion(
        SOFTMAX,
        "calls torch.softmax",
        _RULE,
        code="""\
def softmax(x, dim=-1):
    return torch.softmax(x, dim)""",
    ),
    # The rule's dodges (tests/test_rules.py tries each against the static and the runtime half alone too).
    WrongVersion(
        SOFTMAX,
        "an alias of torch.nn.functional",
        _RULE,
        code="""\
from torch.nn import functional as G


def softmax(x, dim=-1):
    return G.softmax(x, dim)
""",
    ),
    WrongVersion(
        SOFTMAX,
        "the method form",
        _RULE,
        code="""\
def softmax(x, dim=-1):
    return x.softmax(dim)
""",
    ),
    WrongVersion(
        SOFTMAX,
        "getattr with a built name",
        _RULE,
        code="""\
def softmax(x, dim=-1):
    return getattr(torch, "soft" + "max")(x, dim)
""",
    ),
    WrongVersion(
        SOFTMAX,
        "a helper that calls it",
        _RULE,
        code="""\
def _helper(x, dim):
    return F.softmax(x, dim=dim)


def softmax(x, dim=-1):
    return _helper(x, dim)
""",
    ),
    WrongVersion(
        SOFTMAX,
        "an import inside the function",
        _RULE,
        code="""\
def softmax(x, dim=-1):
    from torch.nn.functional import softmax as s
    return s(x, dim)
""",
    ),
    WrongVersion(
        SOFTMAX,
        "a reference kept before the check",
        _RULE,
        code="""\
sm = torch.softmax


def softmax(x, dim=-1):
    return sm(x, dim)
""",
    ),
    WrongVersion(
        SOFTMAX,
        "a default argument",
        _RULE,
        code="""\
def softmax(x, dim=-1, _f=torch.softmax):
    return _f(x, dim)
""",
    ),
    WrongVersion(
        SOFTMAX,
        "exp of log_softmax",
        _RULE,
        code="""\
def softmax(x, dim=-1):
    return torch.exp(x - torch.logsumexp(x, dim, keepdim=True))
""",
    ),
    WrongVersion(
        SOFTMAX,
        "nn.Softmax",
        _RULE,
        code="""\
def softmax(x, dim=-1):
    return nn.Softmax(dim)(x)
""",
    ),
    WrongVersion(
        SOFTMAX,
        "torch's internal function",
        _RULE,
        code="""\
def softmax(x, dim=-1):
    return torch._C._VariableFunctions.softmax(x, dim)
""",
    ),
    WrongVersion(
        SOFTMAX,
        "the aten operator",
        _RULE,
        code="""\
def softmax(x, dim=-1):
    return torch.ops.aten._softmax(x, dim % x.dim(), False)
""",
    ),
    # Full code: the last column of logcumsumexp is another algorithm.
    WrongVersion(
        SOFTMAX,
        "the last column of torch.logcumsumexp",
        "this exercise's rule is: do not call torch.softmax",
        code="""\
def softmax(x, dim=-1):
    return torch.exp(x - torch.logcumsumexp(x, dim).narrow(dim, -1, 1))
""",
    ),
    # attention_weights
    WrongVersion(WEIGHTS, "no scale", "not scaled", edit(_SCORES, "scores = q @ k.transpose(-2, -1)")),
    WrongVersion(WEIGHTS, "scales by d_k", "divided by d_k", edit(_SCORES, "scores = q @ k.transpose(-2, -1) / d_k")),
    WrongVersion(
        WEIGHTS,
        "softmax over the query dimension",
        "runs over the queries",
        edit("return softmax(scores, dim=-1)", "return softmax(scores, dim=-2)"),
        edit(
            "weights = softmax(scores, dim=-1)  # rows that are entirely -inf come out as nan here ...",
            "weights = softmax(scores, dim=-2)  # rows that are entirely -inf come out as nan here ...",
        ),
    ),
    # Inverted in both places the solution reads the mask (True taken to mean "masked").
    WrongVersion(
        WEIGHTS,
        "inverted mask",
        _SAYS_INVERTED,
        edit('scores = torch.where(mask, scores, float("-inf"))', 'scores = torch.where(~mask, scores, float("-inf"))'),
        edit("has_visible_key = mask.any(dim=-1, keepdim=True)", "has_visible_key = (~mask).any(dim=-1, keepdim=True)"),
    ),
    WrongVersion(
        WEIGHTS,
        "mask applied after the softmax",
        "after the softmax",
        edit('    scores = torch.where(mask, scores, float("-inf"))\n', ""),
        edit(_RETURN_TORCH_WHERE, "return weights * mask"),
    ),
    WrongVersion(WEIGHTS, "NaN for a fully masked row", "NaN", edit(_RETURN_TORCH_WHERE, "return weights")),
    # scaled_dot_product_attention
    # Full code: the attention written out again (unscaled) instead of a call of attention_weights, another
    # algorithm than the solution's one line.
    WrongVersion(
        SDPA,
        "weights without the scale",
        "not scaled",
        code="""\
def scaled_dot_product_attention(q, k, v, mask=None):
    return softmax(q @ k.transpose(-1, -2) if mask is None else (q @ k.transpose(-1, -2)).masked_fill(~mask, float('-inf'))) @ v
""",
    ),
    # Full code: the forbidden call is the whole answer.
    WrongVersion(
        SDPA,
        "calls torch's function",
        _RULE,
        code="""\
def scaled_dot_product_attention(q, k, v, mask=None):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
""",
    ),
    # Full code: the rule's dodge, the weights written out again.
    WrongVersion(
        SDPA,
        "right values, but the weights written out again instead of attention_weights",
        "without calling your attention_weights",
        code="""\
def scaled_dot_product_attention(q, k, v, mask=None):
    return torch.nan_to_num(softmax((q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).masked_fill(~mask if mask is not None else torch.zeros((), dtype=torch.bool), float('-inf'))), nan=0.0) @ v
""",
    ),
    # A copy of attention_weights on purpose (the solution's, renamed), then the solution's answer calling it.
    WrongVersion(
        SDPA,
        "right values, from a copy of attention_weights under another name",
        "without calling your attention_weights",
        code='def _weights(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:\n    """softmax(q @ k^T / sqrt(d_k)) over the keys, with masked keys removed.\n\n    q: [..., q_len, d_k], k: [..., k_len, d_k], mask: bool, broadcastable to [..., q_len, k_len],\n    True = may attend (or None). Returns [..., q_len, k_len]; rows with no visible key are all zeros.\n    """\n    d_k = q.shape[-1]\n    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)\n    if mask is None:\n        return softmax(scores, dim=-1)\n    scores = torch.where(mask, scores, float("-inf"))\n    weights = softmax(scores, dim=-1)  # rows that are entirely -inf come out as nan here ...\n    has_visible_key = mask.any(dim=-1, keepdim=True)\n    return torch.where(has_visible_key, weights, 0.0)  # ... and are replaced by zeros\n\n\ndef scaled_dot_product_attention(\n    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None\n) -> torch.Tensor:\n    """softmax(q @ k^T / sqrt(d_k)) @ v with an optional boolean mask (True = may attend).\n\n    q: [..., q_len, d_k], k: [..., k_len, d_k], v: [..., k_len, d_v] -> [..., q_len, d_v].\n    """\n    return _weights(q, k, mask) @ v\n\n\nattention_weights = lambda q, k, mask=None: _weights(q, k, mask)\n',
    ),
    WrongVersion(
        SDPA,
        "ignores the mask",
        "attention output with",
        edit(_RETURN_ATTENTION_WEIGHTS_Q, "return attention_weights(q, k) @ v"),
    ),
    WrongVersion(
        SDPA,
        "multiplies v by the scores' transpose",
        "attention output",
        edit(
            _RETURN_ATTENTION_WEIGHTS_Q,
            "return attention_weights(q, k, mask).transpose(-1, -2)[..., : v.shape[-2], : q.shape[-2]] @ v[..., : q.shape[-2], :]",
        ),
    ),
    # causal_mask
    WrongVersion(
        CAUSAL,
        "off-by-one: diagonal masked",
        "diagonal is masked",
        edit(
            _RETURN_TORCH_TRIL,
            "return torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool, device=device), diagonal=-1)",
        ),
    ),
    WrongVersion(
        CAUSAL,
        "off-by-one: sees the next token",
        "sees the next token",
        edit(
            _RETURN_TORCH_TRIL,
            "return torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool, device=device), diagonal=1)",
        ),
    ),
    WrongVersion(
        CAUSAL,
        "inverted polarity",
        _SAYS_INVERTED,
        edit(
            _RETURN_TORCH_TRIL,
            "return torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool, device=device), diagonal=1)",
        ),
    ),
    WrongVersion(
        CAUSAL,
        "float mask",
        "torch.bool",
        edit(_RETURN_TORCH_TRIL, "return torch.tril(torch.ones(seq_len, seq_len, device=device))"),
    ),
    WrongVersion(
        CAUSAL,
        "ignores device",
        "create it on `device`",
        edit(_RETURN_TORCH_TRIL, "return torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool))"),
    ),
    WrongVersion(
        CAUSAL,
        "made on the CPU, then moved to device",
        "on the CPU (ones) and then moved it",
        edit(_RETURN_TORCH_TRIL, "return torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool)).to(device)"),
    ),
    WrongVersion(
        CAUSAL,
        "device=None taken for the CPU, not PyTorch's default device",
        "device=None means PyTorch's default device",
        edit(
            _RETURN_TORCH_TRIL,
            'return torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool, device=device or "cpu"))',
        ),
    ),
    WrongVersion(
        CAUSAL,
        "cut from a mask cached for 512 positions",
        "fixed maximum length",
        code="""\
_CAUSAL = torch.ones(512, 512, dtype=torch.bool).tril()


def causal_mask(seq_len: int, device=None) -> torch.Tensor:
    return _CAUSAL[:seq_len, :seq_len].to(device)
""",
    ),
    # padding_mask
    WrongVersion(
        PADDING,
        "on the query axis only",
        "query axis",
        edit(_RETURN_TOKEN_IDS_PAD_ID, "return (token_ids != pad_id)[:, None, :, None]"),
    ),
    WrongVersion(
        PADDING,
        "inverted",
        _SAYS_INVERTED,
        edit(_RETURN_TOKEN_IDS_PAD_ID, "return (token_ids == pad_id)[:, None, None, :]"),
    ),
    WrongVersion(
        PADDING,
        "not shaped to broadcast over heads and queries",
        "broadcast",
        edit(_RETURN_TOKEN_IDS_PAD_ID, "return token_ids != pad_id"),
    ),
    WrongVersion(
        PADDING,
        "assumes pad_id is 0",
        "pad_id=1",
        edit(_RETURN_TOKEN_IDS_PAD_ID, "return (token_ids != 0)[:, None, None, :]"),
    ),
    WrongVersion(
        PADDING,
        "made on the CPU",
        "make nothing on the CPU",
        edit(_RETURN_TOKEN_IDS_PAD_ID, "return (token_ids.cpu() != pad_id)[:, None, None, :]"),
    ),
    WrongVersion(
        PADDING,
        "real tokens taken as the ids greater than pad_id",
        "it takes the ids greater than pad_id as the real tokens",
        edit(_RETURN_TOKEN_IDS_PAD_ID, "return (token_ids > pad_id)[:, None, None, :]"),
    ),
    # decoder_mask
    WrongVersion(
        DECODER,
        "causal only",
        "padding is not masked",
        edit(
            _RETURN_CAUSAL_MASK_SEQ_LEN,
            "return causal_mask(seq_len, device=token_ids.device).expand(token_ids.shape[0], 1, -1, -1)",
        ),
    ),
    WrongVersion(
        DECODER,
        "padding only",
        "causal part is missing",
        edit(_RETURN_CAUSAL_MASK_SEQ_LEN, "return padding_mask(token_ids, pad_id).expand(-1, 1, seq_len, -1)"),
    ),
    WrongVersion(
        DECODER,
        "OR instead of AND",
        "use &",
        edit(
            _RETURN_CAUSAL_MASK_SEQ_LEN,
            "return causal_mask(seq_len, device=token_ids.device) | padding_mask(token_ids, pad_id)",
        ),
    ),
    WrongVersion(
        DECODER,
        "causal part on the default device",
        "build the causal part on the device of token_ids",
        edit(_RETURN_CAUSAL_MASK_SEQ_LEN, "return causal_mask(seq_len) & padding_mask(token_ids, pad_id)"),
    ),
    WrongVersion(
        DECODER,
        "causal part written out on the default device",
        "build the causal part on the device of token_ids",
        edit(
            _RETURN_CAUSAL_MASK_SEQ_LEN,
            "return torch.ones(seq_len, seq_len, dtype=torch.bool).tril() & padding_mask(token_ids, pad_id)",
        ),
    ),
    WrongVersion(
        DECODER,
        "causal part cut from a table cached for 1024 positions",
        "fixed maximum length",
        edit(
            "    return causal_mask(seq_len, device=token_ids.device) & padding_mask(token_ids, pad_id)\n",
            """\
    table = torch.ones(1024, 1024, dtype=torch.bool, device=token_ids.device).tril()
    return table[:seq_len, :seq_len] & padding_mask(token_ids, pad_id)
""",
        ),
    ),
    WrongVersion(
        DECODER,
        "causal part made on the CPU, then moved to the ids' device",
        "and then moved it",
        edit(
            _RETURN_CAUSAL_MASK_SEQ_LEN,
            "return causal_mask(seq_len).to(token_ids.device) & padding_mask(token_ids, pad_id)",
        ),
    ),
    WrongVersion(
        DECODER,
        "rows with no visible key given their diagonal entry ('to avoid empty rows')",
        "were given their own diagonal entry to avoid an empty row",
        code="""\
def decoder_mask(token_ids, pad_id):
    seq_len = token_ids.shape[-1]
    mask = causal_mask(seq_len, device=token_ids.device) & padding_mask(token_ids, pad_id)
    eye = torch.eye(seq_len, dtype=torch.bool, device=token_ids.device)
    return mask | (eye & ~mask.any(dim=-1, keepdim=True))
""",
    ),
    # cross_attention_mask
    WrongVersion(
        CROSS,
        "masks the target's padding too",
        "padded target",
        edit(
            _RETURN_PADDING_MASK_SOURCE_IDS,
            "return (padding_mask(source_ids, pad_id) & (target_ids != pad_id)[:, None, :, None])",
        ),
    ),
    WrongVersion(
        CROSS,
        "adds a causal part",
        "causal part",
        edit(
            _RETURN_PADDING_MASK_SOURCE_IDS,
            "return padding_mask(source_ids, pad_id) & torch.ones(tgt_len, source_ids.shape[1], dtype=torch.bool).tril()",
        ),
    ),
    WrongVersion(
        CROSS,
        "rows and columns swapped",
        "queries come from the target",
        edit(
            _RETURN_PADDING_MASK_SOURCE_IDS,
            "return padding_mask(source_ids, pad_id).transpose(-1, -2).expand(-1, -1, -1, tgt_len)",
        ),
    ),
    WrongVersion(
        CROSS,
        "query rows made on the default device",
        "make nothing on the CPU",
        edit(
            _RETURN_PADDING_MASK_SOURCE_IDS,
            "return padding_mask(source_ids, pad_id) & torch.ones(tgt_len, 1, dtype=torch.bool)",
        ),
    ),
    WrongVersion(
        CROSS,
        "query rows made on the CPU, then moved to the ids' device",
        "and then moved it",
        edit(
            _RETURN_PADDING_MASK_SOURCE_IDS,
            "return padding_mask(source_ids, pad_id) & torch.ones(tgt_len, 1, dtype=torch.bool).to(source_ids.device)",
        ),
    ),
)
