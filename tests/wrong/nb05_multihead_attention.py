"""Mistakes students make in notebook 05.

Each wrong version is the solution's answer cell with one mistake written in (``variant`` checks that the
replaced text is there), so the wrong versions differ from a right one only by the mistake. The rules' dodges
too are edits: each replaces one line of the solution's class.
"""

from wrong import Wrong, catalogue

NOTEBOOK = "05_multihead_attention"
RIGHT, variant = catalogue(NOTEBOOK)

_MHA_SPLITS = (
    '        q = rearrange(self.q_proj(x), "b s (h d) -> b h s d", h=self.num_heads)\n'
    '        k = rearrange(self.k_proj(x), "b s (h d) -> b h s d", h=self.num_heads)\n'
    '        v = rearrange(self.v_proj(x), "b s (h d) -> b h s d", h=self.num_heads)\n'
)
_ATTEND = "out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)"
_MERGE = 'rearrange(out, "b h s d -> b s (h d)")'
_GQA_REPEAT = (
    "        k = k.repeat_interleave(group, dim=1)  # [b, num_heads, s, head_dim]: kv heads 0 0 .. 1 1 ..\n"
    "        v = v.repeat_interleave(group, dim=1)\n"
)
_FUSED_SPLIT = 'q, k, v = rearrange(self.qkv_proj(x), "b s (three h d) -> three b h s d", three=3, h=self.num_heads)'
_ROTATE = "        q, k = self.rope(q, token_positions), self.rope(k, token_positions)  # values stay as they are\n"


def mha():
    """The solution's MultiHeadAttention with its three head splits as one generator (tests/test_rules.py rewrites
    that line as a map over q, k and v, a loop of fixed length that is no loop over the heads)."""
    return variant(
        "multi_head_attention",
        (
            _MHA_SPLITS,
            "        q, k, v = (einops.rearrange(t, 'b s (h d) -> b h s d', h=self.num_heads) for t in (self.q_proj(x), "
            "self.k_proj(x), self.v_proj(x)))\n",
        ),
    )


def gqa(repeat=None):
    """The solution's GroupedQueryAttention; with ``repeat``, its two repeat lines become ``k, v = {repeat}``
    (tests/test_rules.py: ``gqa(repeat="k, v")`` leaves the repeat to enable_gqa)."""
    if repeat is None:
        return RIGHT["grouped_query_attention"]
    return variant("grouped_query_attention", (_GQA_REPEAT, f"        k, v = {repeat}\n"))


WRONG = [
    # The exercises' rules (autograder.rules): each message quotes the rule.
    Wrong(
        "multi_head_attention",
        "a Python loop over heads",
        variant(
            "multi_head_attention",
            (
                _ATTEND,
                "out = torch.cat([F.scaled_dot_product_attention(q[:, i:i + 1], k[:, i:i + 1], v[:, i:i + 1], "
                "attn_mask=mask) for i in range(self.num_heads)], dim=1)",
            ),
        ),
        "this exercise's rule is: no Python loop over heads",
    ),
    Wrong(
        "multi_head_attention",
        "a loop over heads written as map (no extra lines run)",
        variant(
            "multi_head_attention",
            (
                _ATTEND,
                "out = torch.stack(list(map(F.scaled_dot_product_attention, q.unbind(1), k.unbind(1), v.unbind(1))), "
                "dim=1)",
            ),
        ),
        "this exercise's rule is: no Python loop over heads",
    ),
    Wrong(
        "multi_head_attention",
        "a loop over heads run from a string with exec",
        variant(
            "multi_head_attention",
            (
                _ATTEND,
                "env = dict(F=F, torch=torch, q=q, k=k, v=v, mask=mask, h=self.num_heads)\n"
                "        exec('out = torch.cat([F.scaled_dot_product_attention(q[:, i:i + 1], k[:, i:i + 1], '\n"
                "             'v[:, i:i + 1], attn_mask=mask) for i in range(h)], dim=1)', env)\n"
                "        out = env['out']",
            ),
        ),
        "this exercise's rule is: no Python loop over heads",
    ),
    Wrong(
        "multi_head_attention",
        "a loop over heads in a string, run by an eval reached by name",
        variant(
            "multi_head_attention",
            (
                _ATTEND,
                "out = vars(__import__('built' + 'ins'))['ev' + 'al']('torch.cat([F.scaled_dot_product_attention('\n"
                "             'q[:, i:i + 1], k[:, i:i + 1], v[:, i:i + 1], attn_mask=mask) for i in range(h)], 1)', "
                "dict(F=F, torch=torch, q=q, k=k, v=v, mask=mask, h=self.num_heads))",
            ),
        ),
        "this exercise's rule is: no Python loop over heads",
    ),
    Wrong(
        "grouped_query_attention",
        "enable_gqa=True spelled as a dict of keywords",
        variant(
            "grouped_query_attention",
            (_GQA_REPEAT, ""),
            ("attn_mask=mask)", "attn_mask=mask, **{'enable_gqa': True})"),
        ),
        "this exercise's rule is: write the repeat of the key/value heads yourself",
    ),
    Wrong(
        "grouped_query_attention",
        "enable_gqa=1",
        variant("grouped_query_attention", (_GQA_REPEAT, ""), ("attn_mask=mask)", "attn_mask=mask, enable_gqa=1)")),
        "this exercise's rule is: write the repeat of the key/value heads yourself",
    ),
    Wrong(
        "grouped_query_attention",
        "lets enable_gqa repeat the heads",
        variant("grouped_query_attention", (_GQA_REPEAT, ""), ("attn_mask=mask)", "attn_mask=mask, enable_gqa=True)")),
        "this exercise's rule is: write the repeat of the key/value heads yourself",
    ),
    Wrong(
        "multi_head_attention",
        "heads split by reshape without a transpose",
        variant(
            "multi_head_attention",
            (
                _MHA_SPLITS,
                "        b, s, d = x.shape\n"
                "        q, k, v = (t.reshape(b, self.num_heads, s, self.head_dim) "
                "for t in (self.q_proj(x), self.k_proj(x), self.v_proj(x)))\n",
            ),
            (_MERGE, "out.reshape(b, s, d)"),
        ),
        "without a transpose",
    ),
    Wrong(
        "multi_head_attention",
        "output projection missing",
        variant("multi_head_attention", (f"return self.out_proj({_MERGE})", f"return {_MERGE}")),
        "out_proj is not applied",
    ),
    Wrong(
        "multi_head_attention",
        "mask broadcast over the heads instead of the batch",
        variant(
            "multi_head_attention",
            (
                "        " + _ATTEND,
                "        mask = mask.transpose(0, 1) if mask is not None and mask.dim() == 4 else mask\n        "
                + _ATTEND,
            ),
        ),
        "broadcast over the heads instead of the batch",
    ),
    Wrong(
        "multi_head_attention",
        "heads taken from the wrong end of the features",
        variant(
            "multi_head_attention",
            (_MHA_SPLITS, _MHA_SPLITS.replace('"b s (h d) ->', '"b s (d h) ->')),
            ('"b h s d -> b s (h d)"', '"b h s d -> b s (d h)"'),
        ),
        "MultiHeadAttention(16, 4)(x)",
    ),
    Wrong(
        "multi_head_attention",
        "one fused Linear instead of the four named ones",
        variant(
            "multi_head_attention",
            (
                "self.q_proj = nn.Linear(d_model, d_model)\n        self.k_proj = nn.Linear(d_model, d_model)",
                "self.qkv = nn.Linear(d_model, 3 * d_model)\n        self.q_proj = self.k_proj = None",
            ),
        ),
        "expected",
    ),
    Wrong(
        "fused_qkv_attention",
        "splits as [k | q | v]",
        variant(
            "fused_qkv_attention", ("q, k, v = rearrange(self.qkv_proj(x)", "k, q, v = rearrange(self.qkv_proj(x)")
        ),
        "q and k are swapped",
    ),
    Wrong(
        "fused_qkv_attention",
        "per-head interleaved split (another library's layout)",
        variant("fused_qkv_attention", ('"b s (three h d) ->', '"b s (h three d) ->')),
        "FusedQKVAttention",
    ),
    Wrong(
        "fused_qkv_attention",
        "splits along the sequence axis",
        variant(
            "fused_qkv_attention",
            (
                _FUSED_SPLIT,
                'q, k, v = (rearrange(t, "b s (h d) -> b h s d", h=self.num_heads)\n'
                "                   for t in self.qkv_proj(x).reshape(x.shape[0], -1, x.shape[-1]).chunk(3, dim=1))",
            ),
        ),
        "FusedQKVAttention",
    ),
    Wrong(
        "grouped_query_attention",
        "K/V groups repeated in the wrong order",
        variant(
            "grouped_query_attention",
            (_GQA_REPEAT.split("\n")[0], "        k = k.repeat(1, group, 1, 1)"),
            ("v.repeat_interleave(group, dim=1)", "v.repeat(1, group, 1, 1)"),
        ),
        "wrong order",
    ),
    Wrong(
        "grouped_query_attention",
        "only the keys are repeated",
        variant("grouped_query_attention", ("v.repeat_interleave(group, dim=1)", "v.repeat(1, group, 1, 1)")),
        "GroupedQueryAttention",
    ),
    Wrong(
        "grouped_query_attention",
        "no check that the heads divide",
        variant(
            "grouped_query_attention",
            (
                "        if d_model % num_heads != 0:\n"
                '            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")\n',
                "",
            ),
            (
                "        if num_heads % num_kv_heads != 0:\n"
                '            raise ValueError(f"num_heads={num_heads} is not divisible by num_kv_heads={num_kv_heads}")\n',
                "",
            ),
        ),
        "must raise ValueError",
    ),
    Wrong(
        "kv_cache_bytes",
        "forgets that V is cached too",
        variant("kv_cache_bytes", ("int(2 * num_layers", "int(num_layers")),
        "factor 2",
    ),
    Wrong(
        "kv_cache_bytes",
        "ignores the batch",
        variant("kv_cache_bytes", (" * batch_size * bytes_per_value)", " * bytes_per_value)")),
        "expected",
    ),
    Wrong(
        "kv_cache_bytes",
        "returns GiB as a float",
        variant("kv_cache_bytes", ("return int(", "return ("), (" * bytes_per_value)", " * bytes_per_value / 2**30)")),
        "(int)",
    ),
    Wrong(
        "cross_attention",
        "keys and values from x (self-attention)",
        variant(
            "cross_attention",
            ("self.k_proj(context)", "self.k_proj(x)"),
            ("self.v_proj(context)", "self.v_proj(x)"),
        ),
        "come from `context`",
    ),
    Wrong(
        "cross_attention",
        "queries from the context",
        variant("cross_attention", ("self.q_proj(x)", "self.q_proj(context)")),
        "has shape",
    ),
    Wrong(
        "cross_attention",
        "no output projection",
        variant(
            "cross_attention",
            (
                'return self.out_proj(rearrange(out, "b h t d -> b t (h d)"))',
                'return rearrange(out, "b h t d -> b t (h d)")',
            ),
        ),
        "out_proj is not applied",
    ),
    Wrong(
        "rotary_attention",
        "rotates the values too",
        variant(
            "rotary_attention", (_ROTATE, "        q, k, v = (self.rope(t, token_positions) for t in (q, k, v))\n")
        ),
        "values are rotated too",
    ),
    Wrong(
        "rotary_attention",
        "rotates only the queries",
        variant("rotary_attention", (_ROTATE, "        q = self.rope(q, token_positions)\n")),
        "only the queries",
    ),
    Wrong(
        "rotary_attention",
        "rotates before the head split",
        variant(
            "rotary_attention",
            ("rearrange(self.q_proj(x),", "rearrange(self.rope(self.q_proj(x), token_positions),"),
            ("rearrange(self.k_proj(x),", "rearrange(self.rope(self.k_proj(x), token_positions),"),
            (_ROTATE, ""),
        ),
        "before the head split",
    ),
    Wrong(
        "rotary_attention",
        "ignores the given positions",
        variant(
            "rotary_attention",
            ("        if token_positions is None:\n            token_positions", "        token_positions"),
        ),
        "ignores token_positions",
    ),
    Wrong("rotary_attention", "forgets to rotate", variant("rotary_attention", (_ROTATE, "")), "no rotation"),
]
