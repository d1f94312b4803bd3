"""Mistakes students make in notebook 05."""

from wrong import Wrong

MHA = """
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        if d_model % num_heads:
            raise ValueError("d_model must be divisible by num_heads")
        self.num_heads, self.head_dim = num_heads, d_model // num_heads
        self.q_proj, self.k_proj = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.v_proj, self.out_proj = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        b, s, d = x.shape
        q, k, v = ({split} for t in (self.q_proj(x), self.k_proj(x), self.v_proj(x)))
        {mask_line}
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        o = {merge}
        return {finish}
"""
_SPLIT = "einops.rearrange(t, 'b s (h d) -> b h s d', h=self.num_heads)"
_MERGE = "einops.rearrange(o, 'b h s d -> b s (h d)')"


def mha(split=_SPLIT, merge=_MERGE, finish="self.out_proj(o)", mask_line="pass"):
    return MHA.format(split=split, merge=merge, finish=finish, mask_line=mask_line)


FUSED = """
class FusedQKVAttention(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.qkv_proj, self.out_proj = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        {split}
        q, k, v = (einops.rearrange(t, 'b s (h d) -> b h s d', h=self.num_heads) for t in (q, k, v))
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out_proj(einops.rearrange(o, 'b h s d -> b s (h d)'))
"""


def fused(split="q, k, v = self.qkv_proj(x).chunk(3, dim=-1)"):
    return FUSED.format(split=split)


GQA = """
class GroupedQueryAttention(nn.Module):
    def __init__(self, d_model, num_heads, num_kv_heads):
        super().__init__()
        {guard}
        self.h, self.g, self.hd = num_heads, num_kv_heads, d_model // num_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, num_kv_heads * self.hd, bias=False)
        self.v_proj = nn.Linear(d_model, num_kv_heads * self.hd, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x, mask=None):
        q = einops.rearrange(self.q_proj(x), 'b s (h d) -> b h s d', h=self.h)
        k = einops.rearrange(self.k_proj(x), 'b s (g d) -> b g s d', g=self.g)
        v = einops.rearrange(self.v_proj(x), 'b s (g d) -> b g s d', g=self.g)
        k, v = {repeat}
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out_proj(einops.rearrange(o, 'b h s d -> b s (h d)'))
"""
_GQA_GUARD = "if d_model % num_heads or num_heads % num_kv_heads: raise ValueError('sizes do not divide')"


def gqa(
    repeat="k.repeat_interleave(self.h // self.g, dim=1), v.repeat_interleave(self.h // self.g, dim=1)",
    guard=_GQA_GUARD,
):
    return GQA.format(repeat=repeat, guard=guard)


def kv(body="2 * num_layers * num_kv_heads * head_dim * seq_len * batch_size * bytes_per_value"):
    return f"""
def kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch_size=1, bytes_per_value=2):
    return {body}
"""


CROSS = """
class CrossAttention(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.q_proj, self.k_proj = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.v_proj, self.out_proj = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)

    def forward(self, x, context, mask=None):
        q, k, v = (einops.rearrange(t, 'b s (h d) -> b h s d', h=self.num_heads)
                   for t in ({q_src}, {k_src}, {v_src}))
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out_proj(einops.rearrange(o, 'b h s d -> b s (h d)'))
"""


def cross(q_src="self.q_proj(x)", k_src="self.k_proj(context)", v_src="self.v_proj(context)"):
    return CROSS.format(q_src=q_src, k_src=k_src, v_src=v_src)


ROTARY = (
    mha()
    + """

class RotaryMultiHeadAttention(MultiHeadAttention):
    def __init__(self, d_model, num_heads, rope):
        super().__init__(d_model, num_heads)
        self.rope = rope

    def forward(self, x, mask=None, token_positions=None):
        {positions}
        q, k, v = (einops.rearrange(t, 'b s (h d) -> b h s d', h=self.num_heads)
                   for t in ({q}, {k}, self.v_proj(x)))
        {rotate}
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out_proj(einops.rearrange(o, 'b h s d -> b s (h d)'))
"""
)
_POSITIONS = "token_positions = torch.arange(x.shape[1]) if token_positions is None else token_positions"


def rotary(
    positions=_POSITIONS,
    q="self.q_proj(x)",
    k="self.k_proj(x)",
    rotate="q, k = self.rope(q, token_positions), self.rope(k, token_positions)",
):
    return ROTARY.format(positions=positions, q=q, k=k, rotate=rotate)


RIGHT = {
    "multi_head_attention": mha(),
    "fused_qkv_attention": fused(),
    "grouped_query_attention": gqa(),
    "kv_cache_bytes": kv(),
    "cross_attention": cross(),
    "rotary_attention": rotary(),
}

WRONG = [
    # The exercises' rules (autograder.rules): each message quotes the rule.
    Wrong(
        "multi_head_attention",
        "a Python loop over heads",
        mha().replace(
            "o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)",
            "o = torch.cat([F.scaled_dot_product_attention(q[:, i:i + 1], k[:, i:i + 1], v[:, i:i + 1], "
            "attn_mask=mask) for i in range(self.num_heads)], dim=1)",
        ),
        "this exercise's rule is: no Python loop over heads",
    ),
    Wrong(
        "multi_head_attention",
        "a loop over heads written as map (no extra lines run)",
        mha().replace(
            "o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)",
            "o = torch.stack(list(map(F.scaled_dot_product_attention, q.unbind(1), k.unbind(1), v.unbind(1))), dim=1)",
        ),
        "this exercise's rule is: no Python loop over heads",
    ),
    Wrong(
        "multi_head_attention",
        "a loop over heads run from a string with exec",
        mha().replace(
            "o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)",
            "env = dict(F=F, torch=torch, q=q, k=k, v=v, mask=mask, h=self.num_heads)\n"
            "        exec('o = torch.cat([F.scaled_dot_product_attention(q[:, i:i + 1], k[:, i:i + 1], '\n"
            "             'v[:, i:i + 1], attn_mask=mask) for i in range(h)], dim=1)', env)\n"
            "        o = env['o']",
        ),
        "this exercise's rule is: no Python loop over heads",
    ),
    Wrong(
        "multi_head_attention",
        "a loop over heads in a string, run by an eval reached by name",
        mha().replace(
            "o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)",
            "o = vars(__import__('built' + 'ins'))['ev' + 'al']('torch.cat([F.scaled_dot_product_attention('\n"
            "             'q[:, i:i + 1], k[:, i:i + 1], v[:, i:i + 1], attn_mask=mask) for i in range(h)], 1)', "
            "dict(F=F, torch=torch, q=q, k=k, v=v, mask=mask, h=self.num_heads))",
        ),
        "this exercise's rule is: no Python loop over heads",
    ),
    Wrong(
        "grouped_query_attention",
        "enable_gqa=True spelled as a dict of keywords",
        gqa(repeat="k, v").replace("attn_mask=mask)", "attn_mask=mask, **{'enable_gqa': True})"),
        "this exercise's rule is: write the repeat of the key/value heads yourself",
    ),
    Wrong(
        "grouped_query_attention",
        "enable_gqa=1",
        gqa(repeat="k, v").replace("attn_mask=mask)", "attn_mask=mask, enable_gqa=1)"),
        "this exercise's rule is: write the repeat of the key/value heads yourself",
    ),
    Wrong(
        "grouped_query_attention",
        "lets enable_gqa repeat the heads",
        gqa(repeat="k, v").replace("attn_mask=mask)", "attn_mask=mask, enable_gqa=True)"),
        "this exercise's rule is: write the repeat of the key/value heads yourself",
    ),
    Wrong(
        "multi_head_attention",
        "heads split by reshape without a transpose",
        mha(split="t.reshape(b, self.num_heads, s, self.head_dim)", merge="o.reshape(b, s, d)"),
        "without a transpose",
    ),
    Wrong("multi_head_attention", "output projection missing", mha(finish="o"), "out_proj is not applied"),
    Wrong(
        "multi_head_attention",
        "mask broadcast over the heads instead of the batch",
        mha(mask_line="mask = mask.transpose(0, 1) if mask is not None and mask.dim() == 4 else mask"),
        "broadcast over the heads instead of the batch",
    ),
    Wrong(
        "multi_head_attention",
        "heads taken from the wrong end of the features",
        mha(
            split="einops.rearrange(t, 'b s (d h) -> b h s d', h=self.num_heads)",
            merge="einops.rearrange(o, 'b h s d -> b s (d h)')",
        ),
        "MultiHeadAttention(16, 4)(x)",
    ),
    Wrong(
        "multi_head_attention",
        "one fused Linear instead of the four named ones",
        mha().replace(
            "self.q_proj, self.k_proj = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)",
            "self.qkv = nn.Linear(d_model, 3 * d_model); self.q_proj = self.k_proj = None",
        ),
        "expected",
    ),
    Wrong(
        "fused_qkv_attention",
        "splits as [k | q | v]",
        fused(split="k, q, v = self.qkv_proj(x).chunk(3, dim=-1)"),
        "q and k are swapped",
    ),
    Wrong(
        "fused_qkv_attention",
        "per-head interleaved split (another library's layout)",
        fused(
            split="q, k, v = einops.rearrange(self.qkv_proj(x), 'b s (h three d) -> three b s (h d)', three=3, h=self.num_heads)"
        ),
        "FusedQKVAttention",
    ),
    Wrong(
        "fused_qkv_attention",
        "splits along the sequence axis",
        fused(split="q, k, v = self.qkv_proj(x).reshape(x.shape[0], -1, x.shape[-1]).chunk(3, dim=1)"),
        "FusedQKVAttention",
    ),
    Wrong(
        "grouped_query_attention",
        "K/V groups repeated in the wrong order",
        gqa(repeat="k.repeat(1, self.h // self.g, 1, 1), v.repeat(1, self.h // self.g, 1, 1)"),
        "wrong order",
    ),
    Wrong(
        "grouped_query_attention",
        "only the keys are repeated",
        gqa(repeat="k.repeat_interleave(self.h // self.g, dim=1), v.repeat(1, self.h // self.g, 1, 1)"),
        "GroupedQueryAttention",
    ),
    Wrong("grouped_query_attention", "no check that the heads divide", gqa(guard="pass"), "must raise ValueError"),
    Wrong(
        "kv_cache_bytes",
        "forgets that V is cached too",
        kv(body="num_layers * num_kv_heads * head_dim * seq_len * batch_size * bytes_per_value"),
        "factor 2",
    ),
    Wrong(
        "kv_cache_bytes",
        "ignores the batch",
        kv(body="2 * num_layers * num_kv_heads * head_dim * seq_len * bytes_per_value"),
        "expected",
    ),
    Wrong(
        "kv_cache_bytes",
        "returns GiB as a float",
        kv(body="2 * num_layers * num_kv_heads * head_dim * seq_len * batch_size * bytes_per_value / 2**30"),
        "(int)",
    ),
    Wrong(
        "cross_attention",
        "keys and values from x (self-attention)",
        cross(k_src="self.k_proj(x)", v_src="self.v_proj(x)"),
        "come from `context`",
    ),
    Wrong("cross_attention", "queries from the context", cross(q_src="self.q_proj(context)"), "has shape"),
    Wrong(
        "cross_attention",
        "no output projection",
        CROSS.format(q_src="self.q_proj(x)", k_src="self.k_proj(context)", v_src="self.v_proj(context)").replace(
            "return self.out_proj(einops.rearrange(o, 'b h s d -> b s (h d)'))",
            "return einops.rearrange(o, 'b h s d -> b s (h d)')",
        ),
        "out_proj is not applied",
    ),
    Wrong(
        "rotary_attention",
        "rotates the values too",
        rotary(rotate="q, k, v = (self.rope(t, token_positions) for t in (q, k, v))"),
        "values are rotated too",
    ),
    Wrong(
        "rotary_attention",
        "rotates only the queries",
        rotary(rotate="q = self.rope(q, token_positions)"),
        "only the queries",
    ),
    Wrong(
        "rotary_attention",
        "rotates before the head split",
        rotary(
            q="self.rope(self.q_proj(x), token_positions)",
            k="self.rope(self.k_proj(x), token_positions)",
            rotate="pass",
        ),
        "before the head split",
    ),
    Wrong(
        "rotary_attention",
        "ignores the given positions",
        rotary(positions="token_positions = torch.arange(x.shape[1])"),
        "ignores token_positions",
    ),
    Wrong("rotary_attention", "forgets to rotate", rotary(rotate="pass"), "no rotation"),
]
