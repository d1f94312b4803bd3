"""Mistakes students make in notebook 04."""

from wrong import Wrong

SOFTMAX = """
def softmax(x, dim=-1):
    shifted = {shift}
    e = torch.exp(shifted)
    return e / e.sum({sum_dim}, keepdim=True)
"""


def softmax(shift="x - x.amax(dim, keepdim=True)", sum_dim="dim"):
    return SOFTMAX.format(shift=shift, sum_dim=sum_dim)


WEIGHTS = """
def softmax(x, dim=-1):
    e = torch.exp(x - x.amax(dim, keepdim=True))
    return e / e.sum(dim, keepdim=True)


def attention_weights(q, k, mask=None):
    scores = q @ k.transpose(-1, -2) / {scale}
    if mask is not None:
        scores = scores.masked_fill({masked}, float("-inf"))
    weights = softmax(scores, dim={dim})
    weights = {finish}
    return weights
"""


def weights(scale="math.sqrt(q.shape[-1])", masked="~mask", dim="-1", finish="torch.nan_to_num(weights, nan=0.0)"):
    return WEIGHTS.format(scale=scale, masked=masked, dim=dim, finish=finish)


SDPA = (
    WEIGHTS.format(
        scale="math.sqrt(q.shape[-1])", masked="~mask", dim="-1", finish="torch.nan_to_num(weights, nan=0.0)"
    )
    + """

def scaled_dot_product_attention(q, k, v, mask=None):
    return {body}
"""
)


def sdpa(body="attention_weights(q, k, mask) @ v"):
    return SDPA.format(body=body)


def masks(
    causal="torch.ones(seq_len, seq_len, dtype=torch.bool).tril()",
    padding="(token_ids != pad_id)[:, None, None, :]",
    decoder="causal_mask(token_ids.shape[-1]) & padding_mask(token_ids, pad_id)",
    cross="(source_ids != pad_id)[:, None, None, :].expand(-1, 1, target_ids.shape[1], -1)",
):
    return f"""
def causal_mask(seq_len, device=None):
    return {causal}


def padding_mask(token_ids, pad_id):
    return {padding}


def decoder_mask(token_ids, pad_id):
    return {decoder}


def cross_attention_mask(target_ids, source_ids, pad_id):
    return {cross}
"""


# Ways around "do not call torch.softmax" that students try, each a whole answer cell.
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

RIGHT = {
    "softmax": softmax(),
    "attention_weights": weights(),
    "scaled_dot_product_attention": sdpa(),
    "causal_mask": masks(),
    "padding_mask": masks(),
    "decoder_mask": masks(),
    "cross_attention_mask": masks(),
}

WRONG = [
    Wrong("softmax", "no max subtraction (overflows)", softmax(shift="x"), "subtract each slice's maximum"),
    Wrong(
        "softmax",
        "one maximum for the whole tensor",
        softmax(shift="x - x.max()"),
        "not one maximum of the whole tensor",
    ),
    Wrong("softmax", "ignores dim", softmax(shift="x - x.amax(-1, keepdim=True)", sum_dim="-1"), "ignores `dim`"),
    Wrong(
        "softmax",
        "calls torch.softmax",
        "def softmax(x, dim=-1):\n    return torch.softmax(x, dim)",
        "this exercise's rule is",
    ),
    # The rule's dodges (tests/test_rules.py tries each against the static and the runtime half alone too).
    *(Wrong("softmax", dodge, code, "this exercise's rule is") for dodge, code in SOFTMAX_DODGES.items()),
    Wrong("attention_weights", "no scale", weights(scale="1.0"), "not scaled"),
    Wrong("attention_weights", "scales by d_k", weights(scale="q.shape[-1]"), "divided by d_k"),
    Wrong("attention_weights", "softmax over the query dimension", weights(dim="-2"), "runs over the queries"),
    Wrong("attention_weights", "inverted mask", weights(masked="mask"), "inverted"),
    Wrong(
        "attention_weights",
        "mask applied after the softmax",
        WEIGHTS.format(
            scale="math.sqrt(q.shape[-1])",
            masked="torch.zeros_like(mask, dtype=torch.bool)",
            dim="-1",
            finish="weights * mask if mask is not None else weights",
        ),
        "after the softmax",
    ),
    Wrong("attention_weights", "NaN for a fully masked row", weights(finish="weights"), "NaN"),
    Wrong(
        "scaled_dot_product_attention",
        "weights without the scale",
        sdpa(
            body="softmax(q @ k.transpose(-1, -2) if mask is None else (q @ k.transpose(-1, -2)).masked_fill(~mask, float('-inf'))) @ v"
        ),
        "not scaled",
    ),
    Wrong(
        "scaled_dot_product_attention",
        "calls torch's function",
        sdpa(body="torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)"),
        "this exercise's rule is",
    ),
    Wrong(
        "scaled_dot_product_attention",
        "right values, but the weights written out again instead of attention_weights",
        sdpa(
            body="torch.nan_to_num(softmax((q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).masked_fill("
            "~mask if mask is not None else torch.zeros((), dtype=torch.bool), float('-inf'))), nan=0.0) @ v"
        ),
        "without calling your attention_weights",
    ),
    Wrong(
        "scaled_dot_product_attention",
        "right values, from a copy of attention_weights under another name",
        sdpa(body="_weights(q, k, mask) @ v").replace("def attention_weights(", "def _weights(")
        + "\n\nattention_weights = lambda q, k, mask=None: _weights(q, k, mask)\n",
        "without calling your attention_weights",
    ),
    Wrong(
        "softmax",
        "the last column of torch.logcumsumexp",
        "def softmax(x, dim=-1):\n    return torch.exp(x - torch.logcumsumexp(x, dim).narrow(dim, -1, 1))\n",
        "this exercise's rule is: do not call torch.softmax",
    ),
    Wrong(
        "scaled_dot_product_attention",
        "ignores the mask",
        sdpa(body="attention_weights(q, k) @ v"),
        "attention output with",
    ),
    Wrong(
        "scaled_dot_product_attention",
        "multiplies v by the scores' transpose",
        sdpa(
            body="attention_weights(q, k, mask).transpose(-1, -2)[..., : v.shape[-2], : q.shape[-2]] @ v[..., : q.shape[-2], :]"
        ),
        "attention output",
    ),
    Wrong(
        "causal_mask",
        "off-by-one: diagonal masked",
        masks(causal="torch.ones(seq_len, seq_len, dtype=torch.bool).tril(-1)"),
        "diagonal is masked",
    ),
    Wrong(
        "causal_mask",
        "off-by-one: sees the next token",
        masks(causal="torch.ones(seq_len, seq_len, dtype=torch.bool).tril(1)"),
        "sees the next token",
    ),
    Wrong(
        "causal_mask",
        "inverted polarity",
        masks(causal="torch.ones(seq_len, seq_len, dtype=torch.bool).triu(1)"),
        "inverted",
    ),
    Wrong("causal_mask", "float mask", masks(causal="torch.ones(seq_len, seq_len).tril()"), "torch.bool"),
    Wrong(
        "padding_mask", "on the query axis only", masks(padding="(token_ids != pad_id)[:, None, :, None]"), "query axis"
    ),
    Wrong("padding_mask", "inverted", masks(padding="(token_ids == pad_id)[:, None, None, :]"), "inverted"),
    Wrong(
        "padding_mask",
        "not shaped to broadcast over heads and queries",
        masks(padding="token_ids != pad_id"),
        "broadcast",
    ),
    Wrong("padding_mask", "assumes pad_id is 0", masks(padding="(token_ids != 0)[:, None, None, :]"), "pad_id=1"),
    Wrong(
        "decoder_mask",
        "causal only",
        masks(decoder="causal_mask(token_ids.shape[-1]).expand(token_ids.shape[0], 1, -1, -1)"),
        "padding is not masked",
    ),
    Wrong(
        "decoder_mask",
        "padding only",
        masks(decoder="padding_mask(token_ids, pad_id).expand(-1, 1, token_ids.shape[-1], -1)"),
        "causal part is missing",
    ),
    Wrong(
        "decoder_mask",
        "OR instead of AND",
        masks(decoder="causal_mask(token_ids.shape[-1]) | padding_mask(token_ids, pad_id)"),
        "use &",
    ),
    Wrong(
        "cross_attention_mask",
        "masks the target's padding too",
        masks(cross="((source_ids != pad_id)[:, None, None, :] & (target_ids != pad_id)[:, None, :, None])"),
        "padded target",
    ),
    Wrong(
        "cross_attention_mask",
        "adds a causal part",
        masks(
            cross="(source_ids != pad_id)[:, None, None, :] & torch.ones(target_ids.shape[1], source_ids.shape[1], dtype=torch.bool).tril()"
        ),
        "causal part",
    ),
    Wrong(
        "cross_attention_mask",
        "rows and columns swapped",
        masks(cross="(source_ids != pad_id)[:, None, :, None].expand(-1, 1, -1, target_ids.shape[1])"),
        "queries come from the target",
    ),
]
