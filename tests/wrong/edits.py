"""The solution's answer cells with named parts replaced: builders of the right answers in other styles and of the
rule dodges that ``tests/test_rules.py`` grades, and of notebook 06's activations for
``tests/test_wrong_implementations.py``. Each is an edit of the solution (``variant``), so it follows the solution
and fails loudly when the text it replaces is gone. (The catalogued wrong versions are not here: they are in
``wrong/nb<notebook>.py``; see ``wrong/__init__.py``.)
"""

from wrong import solution_answers, variant

# ---------------------------------------------------------------------------------------------------------------
# 04_attention: ways around "do not call torch.softmax" that students try, each a whole answer cell (the dodge
# itself, no edit of the solution; tests/test_rules.py tries each against the static and the runtime half).
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

# ---------------------------------------------------------------------------------------------------------------
# 05_multihead_attention
_NB05 = "05_multihead_attention"
_MHA_SPLITS = (
    '        q = rearrange(self.q_proj(x), "b s (h d) -> b h s d", h=self.num_heads)\n'
    '        k = rearrange(self.k_proj(x), "b s (h d) -> b h s d", h=self.num_heads)\n'
    '        v = rearrange(self.v_proj(x), "b s (h d) -> b h s d", h=self.num_heads)\n'
)
_GQA_REPEAT = (
    "        k = k.repeat_interleave(group, dim=1)  # [b, num_heads, s, head_dim]: kv heads 0 0 .. 1 1 ..\n"
    "        v = v.repeat_interleave(group, dim=1)\n"
)


def mha():
    """The solution's MultiHeadAttention with its three head splits as one generator (tests/test_rules.py rewrites
    that line as a map over q, k and v, a loop of fixed length that is no loop over the heads)."""
    return variant(
        _NB05,
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
        return solution_answers(_NB05)["grouped_query_attention"]
    return variant(_NB05, "grouped_query_attention", (_GQA_REPEAT, f"        k, v = {repeat}\n"))


# ---------------------------------------------------------------------------------------------------------------
# 06_feed_forward
_NB06 = "06_feed_forward"
_RELU = "torch.where(x > 0, x, torch.zeros_like(x))"
_GELU = "0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))"
_GELU_TANH = (
    "inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)\n    return 0.5 * x * (1.0 + torch.tanh(inner))"
)
_SILU = "x * torch.sigmoid(x)"
_CAT_W = 'torch.cat([state["w1.weight"], state["w3.weight"]], dim=0)'
_CAT_B = 'torch.cat([state["w1.bias"], state["w3.bias"]], dim=0)'
_SPLIT = 'gate, up = state[f"gate_up_proj.{kind}"].chunk(2, dim=0)'
_FORWARD = "gate, up = self.gate_up_proj(x).chunk(2, dim=-1)\n        return self.down_proj(silu(gate) * up)"


def activations(relu=None, gelu=None, gelu_tanh=None, silu=None, extra=""):
    """The solution's activations, each one given replaced by the expression it returns; ``extra`` goes first."""
    edits = [(_RELU, relu), (_GELU, gelu), (_GELU_TANH, gelu_tanh and f"return {gelu_tanh}"), (_SILU, silu)]
    return extra + variant(_NB06, "ffn_activations", *((old, new) for old, new in edits if new is not None))


def ffn_fused(cat_weight=None, cat_bias=None, split=None, forward=None):
    """The solution's fused_swiglu cell with the parts given replaced: the fused weight and bias, unfuse's split
    of one fused tensor into gate and up, FusedSwiGLU.forward's body."""
    parts = {_CAT_W: cat_weight, _CAT_B: cat_bias, _SPLIT: split, _FORWARD: forward}
    return variant(_NB06, "fused_swiglu", *((old, new) for old, new in parts.items() if new is not None))


# ---------------------------------------------------------------------------------------------------------------
# 07_blocks
_CAUSAL = "torch.ones(length, length, dtype=torch.bool, device=x.device).tril()"


def decoder(causal=_CAUSAL):
    """The solution's DecoderBlock with the causal mask made by ``causal`` (tests/test_rules.py writes it otherwise)."""
    return variant("07_blocks", "decoder_block", (_CAUSAL, causal))


# ---------------------------------------------------------------------------------------------------------------
# 08_decoder_models
_NB08 = "08_decoder_models"
_GPT2_CAUSAL = "torch.ones(length, length, dtype=torch.bool, device=tokens.device).tril()"
_HEAD = 'state["lm_head.weight"] = state["wte.weight"]  # tied'
_ATTEND = "attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal)"
_RETURN = "return self.out_proj(attended.transpose(1, 2).reshape(batch, length, -1))"
_QKV = "q, k, v = self.qkv_proj(x).split([q_size, kv_size, kv_size], dim=-1)  # the one product, then its columns"


def nb08_gpt2(causal=_GPT2_CAUSAL):
    """GPT2 with the causal mask made by ``causal``."""
    return variant(_NB08, "gpt2_model", (_GPT2_CAUSAL, causal))


def nb08_gpt2_convert(head=_HEAD):
    """gpt2_state_from_hf with ``head`` in place of the line that sets lm_head.weight."""
    return variant(_NB08, "gpt2_state_from_hf", (_HEAD, head))


def nb08_rotary(attend=None):
    """RotaryGQA with ``out = attend`` as its attention (``attend`` may run over lines, ending with ``out = ...``)."""
    if attend is None:
        return solution_answers(_NB08)["rotary_gqa"]
    return variant(_NB08, "rotary_gqa", (_ATTEND, f"out = {attend}"), (_RETURN, _RETURN.replace("(attended.", "(out.")))


def nb08_decoder(*replacements):
    """ModernDecoder with the ``(old, new)`` replacements made."""
    return variant(_NB08, "modern_decoder", *replacements)


def nb08_llama_convert(*replacements):
    """llama_state_from_hf with the ``(old, new)`` replacements made."""
    return variant(_NB08, "llama_state_from_hf", *replacements)


def nb08_fused(qkv=None):
    """fuse_qkv and FusedRotaryGQA; ``qkv`` makes q, k and v in forward, with hd, h, g the head size and counts."""
    if qkv is None:
        return solution_answers(_NB08)["fused_rotary_gqa"]
    return variant(
        _NB08, "fused_rotary_gqa", (_QKV, f"hd, h, g = self.head_dim, self.num_heads, self.num_kv_heads\n        {qkv}")
    )


def fuse_only(fuse_qkv: str) -> str:
    """The solution's cell with another ``fuse_qkv``."""
    right = solution_answers(_NB08)["fused_rotary_gqa"]
    return fuse_qkv + "\n\nclass FusedRotaryGQA" + right.split("\n\nclass FusedRotaryGQA", 1)[1]


# ---------------------------------------------------------------------------------------------------------------
# 10_training: the solution's train, which tests/test_rules.py edits into a right answer in another order.
TRAIN = solution_answers("10_training")["train"]
