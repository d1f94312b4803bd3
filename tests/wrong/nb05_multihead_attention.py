"""Wrong versions of notebook 05's answers (05_multihead_attention): see ``wrong/__init__.py``."""

from autograder.notebooks.nb05_multihead_attention import CROSS, FUSED, GQA, KV, MHA, ROTARY
from wrong import WrongVersion, edit

_RULE = "this exercise's rule is: no Python loop over heads"
_RULE_2 = "this exercise's rule is: write the repeat of the key/value heads yourself"
_NO_GRAD = "no gradient reaches"

# multi_head_attention ------------------------------------------------------------------------------------------
_OUT = "out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # [b, h, s, head_dim]"
_MHA_OUT = "        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # [b, h, s, head_dim]\n"
_Q = """\
        q = rearrange(self.q_proj(x), "b s (h d) -> b h s d", h=self.num_heads)
        k = rearrange(self.k_proj(x), "b s (h d) -> b h s d", h=self.num_heads)
        v = rearrange(self.v_proj(x), "b s (h d) -> b h s d", h=self.num_heads)
"""
_RETURN_SELF_OUT_PROJ = 'return self.out_proj(rearrange(out, "b h s d -> b s (h d)"))'

# fused_qkv_attention -------------------------------------------------------------------------------------------
_Q_K_V = 'q, k, v = rearrange(self.qkv_proj(x), "b s (three h d) -> three b h s d", three=3, h=self.num_heads)'

# grouped_query_attention ---------------------------------------------------------------------------------------
_K = """\
        k = k.repeat_interleave(group, dim=1)  # [b, num_heads, s, head_dim]: kv heads 0 0 .. 1 1 ..
        v = v.repeat_interleave(group, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
"""

# kv_cache_bytes ------------------------------------------------------------------------------------------------
_RETURN_INT_NUM_LAYERS = "return int(2 * num_layers * num_kv_heads * head_dim * seq_len * batch_size * bytes_per_value)"

# cross_attention -----------------------------------------------------------------------------------------------

# rotary_attention ----------------------------------------------------------------------------------------------
_Q_K = "q, k = self.rope(q, token_positions), self.rope(k, token_positions)  # values stay as they are"
_ROTARY_Q_K = "        q, k = self.rope(q, token_positions), self.rope(k, token_positions)  # values stay as they are\n"
_TOKEN_POSITIONS = "token_positions = torch.arange(x.shape[1], device=x.device)"
_NEW_X = ""

WRONG_VERSIONS = (
    # multi_head_attention
    WrongVersion(
        MHA,
        "a Python loop over heads",
        _RULE,
        edit(
            _OUT,
            "out = torch.cat([F.scaled_dot_product_attention(q[:, i:i + 1], k[:, i:i + 1], v[:, i:i + 1], attn_mask=mask) for i in range(self.num_heads)], dim=1)  # [b, h, s, head_dim]",
        ),
    ),
    WrongVersion(
        MHA,
        "a loop over heads written as map (no extra lines run)",
        _RULE,
        edit(
            _OUT,
            "out = torch.stack(list(map(F.scaled_dot_product_attention, q.unbind(1), k.unbind(1), v.unbind(1))), dim=1)  # [b, h, s, head_dim]",
        ),
    ),
    WrongVersion(
        MHA,
        "a loop over heads run from a string with exec",
        _RULE,
        edit(
            _MHA_OUT,
            """\
        env = dict(F=F, torch=torch, q=q, k=k, v=v, mask=mask, h=self.num_heads)
        exec('out = torch.cat([F.scaled_dot_product_attention(q[:, i:i + 1], k[:, i:i + 1], '
             'v[:, i:i + 1], attn_mask=mask) for i in range(h)], dim=1)', env)
        out = env['out']  # [b, h, s, head_dim]
""",
        ),
    ),
    WrongVersion(
        MHA,
        "a loop over heads in a string, run by an eval reached by name",
        _RULE,
        edit(
            _MHA_OUT,
            """\
        out = vars(__import__('built' + 'ins'))['ev' + 'al']('torch.cat([F.scaled_dot_product_attention('
             'q[:, i:i + 1], k[:, i:i + 1], v[:, i:i + 1], attn_mask=mask) for i in range(h)], 1)', dict(F=F, torch=torch, q=q, k=k, v=v, mask=mask, h=self.num_heads))  # [b, h, s, head_dim]
""",
        ),
    ),
    WrongVersion(
        MHA,
        "a loop over a fixed number of head slots (32)",
        "128 heads of size 1",
        edit(
            _MHA_OUT,
            """\
        out = torch.zeros_like(q)
        for slot in range(32):
            hh = slot % self.num_heads
            out[:, hh:hh + 1] = F.scaled_dot_product_attention(q[:, hh:hh + 1], k[:, hh:hh + 1], v[:, hh:hh + 1], attn_mask=mask)
""",
        ),
    ),
    WrongVersion(
        MHA,
        "the forward pass under torch.no_grad()",
        "the output does not require grad",
        edit(
            "        q = rearrange(self.q_proj(x)",
            "        with torch.no_grad():\n            return self._forward(x, mask)\n\n"
            "    def _forward(self, x, mask):\n        q = rearrange(self.q_proj(x)",
        ),
    ),
    WrongVersion(
        MHA,
        "the values detached",
        _NO_GRAD + " v_proj.weight, v_proj.bias",
        edit(
            'v = rearrange(self.v_proj(x), "b s (h d) -> b h s d", h=self.num_heads)',
            'v = rearrange(self.v_proj(x), "b s (h d) -> b h s d", h=self.num_heads).detach()',
        ),
    ),
    WrongVersion(
        MHA,
        "attention scores in numpy with map(np.matmul, ...)",
        _NO_GRAD + " q_proj.weight",
        edit(
            _MHA_OUT,
            """\
        import numpy as np
        scores = torch.from_numpy(np.stack(list(map(np.matmul, q.detach().numpy(), k.detach().numpy().swapaxes(-1, -2)))))
        scores = scores / math.sqrt(self.head_dim)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        out = scores.softmax(dim=-1) @ v  # [b, h, s, head_dim]
""",
        ),
    ),
    WrongVersion(
        MHA,
        "heads split by reshape without a transpose",
        "without a transpose",
        edit(
            _Q,
            """\
        b, s, d = x.shape
        q, k, v = (t.reshape(b, self.num_heads, s, self.head_dim) for t in (self.q_proj(x), self.k_proj(x), self.v_proj(x)))
""",
        ),
        edit(_RETURN_SELF_OUT_PROJ, "return self.out_proj(out.reshape(b, s, d))"),
    ),
    WrongVersion(
        MHA,
        "output projection missing",
        "out_proj is not applied",
        edit(_RETURN_SELF_OUT_PROJ, 'return rearrange(out, "b h s d -> b s (h d)")'),
    ),
    WrongVersion(
        MHA,
        "mask broadcast over the heads instead of the batch",
        "broadcast over the heads instead of the batch",
        edit(
            '        v = rearrange(self.v_proj(x), "b s (h d) -> b h s d", h=self.num_heads)\n',
            """\
        v = rearrange(self.v_proj(x), "b s (h d) -> b h s d", h=self.num_heads)
        mask = mask.transpose(0, 1) if mask is not None and mask.dim() == 4 else mask
""",
        ),
    ),
    WrongVersion(
        MHA,
        "heads taken from the wrong end of the features",
        "MultiHeadAttention(16, 4)(x)",
        edit(
            _Q,
            """\
        q = rearrange(self.q_proj(x), "b s (d h) -> b h s d", h=self.num_heads)
        k = rearrange(self.k_proj(x), "b s (d h) -> b h s d", h=self.num_heads)
        v = rearrange(self.v_proj(x), "b s (d h) -> b h s d", h=self.num_heads)
""",
        ),
        edit(_RETURN_SELF_OUT_PROJ, 'return self.out_proj(rearrange(out, "b h s d -> b s (d h)"))'),
    ),
    WrongVersion(
        MHA,
        "one fused Linear instead of the four named ones",
        "expected",
        edit(
            """\
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
""",
            """\
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.q_proj = self.k_proj = None
""",
        ),
    ),
    # fused_qkv_attention
    WrongVersion(
        FUSED,
        "splits as [k | q | v]",
        "q and k are swapped",
        edit(
            _Q_K_V,
            'k, q, v = rearrange(self.qkv_proj(x), "b s (three h d) -> three b h s d", three=3, h=self.num_heads)',
        ),
    ),
    WrongVersion(
        FUSED,
        "per-head interleaved split (another library's layout)",
        "FusedQKVAttention",
        edit(
            _Q_K_V,
            'q, k, v = rearrange(self.qkv_proj(x), "b s (h three d) -> three b h s d", three=3, h=self.num_heads)',
        ),
    ),
    WrongVersion(
        FUSED,
        "splits along the sequence axis",
        "FusedQKVAttention",
        edit(
            '        q, k, v = rearrange(self.qkv_proj(x), "b s (three h d) -> three b h s d", three=3, h=self.num_heads)\n',
            """\
        q, k, v = (rearrange(t, "b s (h d) -> b h s d", h=self.num_heads)
                   for t in self.qkv_proj(x).reshape(x.shape[0], -1, x.shape[-1]).chunk(3, dim=1))
""",
        ),
    ),
    WrongVersion(
        FUSED,
        "the fused projection detached",
        _NO_GRAD,
        edit(
            _Q_K_V,
            'q, k, v = (rearrange(t, "b s (h d) -> b h s d", h=self.num_heads) for t in self.qkv_proj(x).detach().chunk(3, dim=-1))',
        ),
    ),
    # grouped_query_attention
    WrongVersion(
        GQA,
        "enable_gqa=True spelled as a dict of keywords",
        _RULE_2,
        edit(_K, "        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **{'enable_gqa': True})\n"),
    ),
    WrongVersion(
        GQA,
        "enable_gqa=1",
        _RULE_2,
        edit(_K, "        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=1)\n"),
    ),
    WrongVersion(
        GQA,
        "lets enable_gqa repeat the heads",
        _RULE_2,
        edit(_K, "        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)\n"),
    ),
    WrongVersion(
        GQA,
        "K/V groups repeated in the wrong order",
        "wrong order",
        edit(
            """\
        k = k.repeat_interleave(group, dim=1)  # [b, num_heads, s, head_dim]: kv heads 0 0 .. 1 1 ..
        v = v.repeat_interleave(group, dim=1)
""",
            """\
        k = k.repeat(1, group, 1, 1)
        v = v.repeat(1, group, 1, 1)
""",
        ),
    ),
    WrongVersion(
        GQA,
        "only the keys are repeated",
        "GroupedQueryAttention",
        edit("v = v.repeat_interleave(group, dim=1)", "v = v.repeat(1, group, 1, 1)"),
    ),
    WrongVersion(
        GQA,
        "the keys detached",
        _NO_GRAD + " k_proj.weight",
        edit("k = k.repeat_interleave(group, dim=1)", "k = k.detach().repeat_interleave(group, dim=1)"),
    ),
    WrongVersion(
        GQA,
        "no check that the heads divide",
        "must raise ValueError",
        edit(
            """\
        if d_model % num_heads != 0:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
        if num_heads % num_kv_heads != 0:
            raise ValueError(f"num_heads={num_heads} is not divisible by num_kv_heads={num_kv_heads}")
""",
            "",
        ),
    ),
    # kv_cache_bytes
    WrongVersion(
        KV,
        "forgets that V is cached too",
        "factor 2",
        edit(
            _RETURN_INT_NUM_LAYERS,
            "return int(num_layers * num_kv_heads * head_dim * seq_len * batch_size * bytes_per_value)",
        ),
    ),
    WrongVersion(
        KV,
        "ignores the batch",
        "expected",
        edit(
            _RETURN_INT_NUM_LAYERS, "return int(2 * num_layers * num_kv_heads * head_dim * seq_len * bytes_per_value)"
        ),
    ),
    WrongVersion(
        KV,
        "returns GiB as a float",
        "(int)",
        edit(
            _RETURN_INT_NUM_LAYERS,
            "return (2 * num_layers * num_kv_heads * head_dim * seq_len * batch_size * bytes_per_value / 2**30)",
        ),
    ),
    # cross_attention
    WrongVersion(
        CROSS,
        "keys and values from x (self-attention)",
        "come from `context`",
        edit(
            """\
        k = rearrange(self.k_proj(context), "b s (h d) -> b h s d", h=self.num_heads)
        v = rearrange(self.v_proj(context), "b s (h d) -> b h s d", h=self.num_heads)
""",
            """\
        k = rearrange(self.k_proj(x), "b s (h d) -> b h s d", h=self.num_heads)
        v = rearrange(self.v_proj(x), "b s (h d) -> b h s d", h=self.num_heads)
""",
        ),
    ),
    WrongVersion(
        CROSS,
        "the keys' projection detached",
        _NO_GRAD + " k_proj.weight:",  # k_proj.bias gets none in the oracle either (softmax is shift-invariant)
        edit(
            'k = rearrange(self.k_proj(context), "b s (h d) -> b h s d", h=self.num_heads)',
            'k = rearrange(self.k_proj(context).detach(), "b s (h d) -> b h s d", h=self.num_heads)',
        ),
    ),
    WrongVersion(
        CROSS,
        "queries from the context",
        "has shape",
        edit(
            'q = rearrange(self.q_proj(x), "b t (h d) -> b h t d", h=self.num_heads)',
            'q = rearrange(self.q_proj(context), "b t (h d) -> b h t d", h=self.num_heads)',
        ),
    ),
    WrongVersion(
        CROSS,
        "no output projection",
        "out_proj is not applied",
        edit(
            'return self.out_proj(rearrange(out, "b h t d -> b t (h d)"))',
            'return rearrange(out, "b h t d -> b t (h d)")',
        ),
    ),
    # rotary_attention
    WrongVersion(
        ROTARY,
        "rotates the values too",
        "values are rotated too",
        edit(_Q_K, "q, k, v = (self.rope(t, token_positions) for t in (q, k, v))"),
    ),
    WrongVersion(
        ROTARY, "rotates only the queries", "only the queries", edit(_Q_K, "q = self.rope(q, token_positions)")
    ),
    WrongVersion(
        ROTARY,
        "rotates before the head split",
        "before the head split",
        edit(
            """\
        q = rearrange(self.q_proj(x), "b s (h d) -> b h s d", h=self.num_heads)
        k = rearrange(self.k_proj(x), "b s (h d) -> b h s d", h=self.num_heads)
""",
            """\
        q = rearrange(self.rope(self.q_proj(x), token_positions), "b s (h d) -> b h s d", h=self.num_heads)
        k = rearrange(self.rope(self.k_proj(x), token_positions), "b s (h d) -> b h s d", h=self.num_heads)
""",
        ),
        edit(_ROTARY_Q_K, _NEW_X),
    ),
    WrongVersion(
        ROTARY,
        "ignores the given positions",
        "ignores token_positions",
        edit(
            """\
        if token_positions is None:
            token_positions = torch.arange(x.shape[1], device=x.device)
""",
            "        token_positions = torch.arange(x.shape[1], device=x.device)\n",
        ),
    ),
    WrongVersion(
        ROTARY, "rotates only the keys", "only the keys are rotated", edit(_Q_K, "k = self.rope(k, token_positions)")
    ),
    WrongVersion(ROTARY, "forgets to rotate", "no rotation", edit(_ROTARY_Q_K, _NEW_X)),
    WrongVersion(
        ROTARY,
        "the rotated queries and keys detached",
        _NO_GRAD + " q_proj.weight, q_proj.bias, k_proj.weight, k_proj.bias",
        edit(_Q_K, "q, k = self.rope(q, token_positions).detach(), self.rope(k, token_positions).detach()"),
    ),
    WrongVersion(
        ROTARY,
        "default positions 1..seq",
        "the default positions are 0, 1, ..., seq - 1",
        edit(_TOKEN_POSITIONS, "token_positions = torch.arange(1, x.shape[1] + 1, device=x.device)"),
    ),
    WrongVersion(
        ROTARY,
        "default positions made on the CPU",
        "make the default positions on the device of x",
        edit(_TOKEN_POSITIONS, "token_positions = torch.arange(x.shape[1])"),
    ),
    WrongVersion(
        ROTARY,
        "default positions cut from a table of 256",
        "fixed maximum length",
        edit(
            "        self.rope = rope\n",
            """\
        self.rope = rope
        self.register_buffer("positions", torch.arange(256), persistent=False)
""",
        ),
        edit(_TOKEN_POSITIONS, "token_positions = self.positions[: x.shape[1]]"),
    ),
)
