"""Wrong versions of notebook 08's answers (08_decoder_models): see ``wrong/__init__.py``."""

from autograder.notebooks.nb08_decoder_models import (
    COUNT,
    DECODER,
    FUSED,
    GPT2,
    GPT2_CONVERT,
    LLAMA_CONVERT,
    LOSS,
    MODERN_BLOCK,
    ROTARY,
)
from wrong import WrongVersion, edit

_RULE = "this exercise's rule is: as a closed form: no model built"
_SAYS_PASS_IS_CAUSAL_ON = "pass is_causal on and build no causal mask tensor"

# gpt2_num_parameters -------------------------------------------------------------------------------------------
_RETURN_EMBEDDINGS_CONFIG = "return embeddings + config.n_layers * (norms + attention + mlp) + 2 * d  # + ln_f"

# gpt2_model ----------------------------------------------------------------------------------------------------
_SELF_LM_HEAD_WEIGHT = "        self.lm_head.weight = self.wte.weight  # tied: one matrix, used twice\n"
_CAUSAL = "causal = torch.ones(length, length, dtype=torch.bool, device=tokens.device).tril()"
_MASK = "mask = causal & padding_mask[:, None, None, :]"
_BLOCK_NORM = "block_norm = functools.partial(norm, eps=config.norm_eps)"
_POSITIONS_MASK = "positions, mask = torch.arange(length, device=tokens.device), causal"
_NEW_POSITIONS_MASK = "positions, mask = torch.arange(length), causal"

# causal_lm_loss ------------------------------------------------------------------------------------------------
_PREDICTIONS = """\
    predictions = logits[:, :-1].reshape(-1, logits.shape[-1])
    targets = labels[:, 1:].reshape(-1)
"""
_RETURN_F_CROSS_ENTROPY = "return F.cross_entropy(predictions.float(), targets, ignore_index=ignore_index)"

# gpt2_state_from_hf --------------------------------------------------------------------------------------------
_SRC = 'src = {k.removeprefix("transformer."): v for k, v in hf_state.items()}'
_STATE_LM_HEAD_WEIGHT = '    state["lm_head.weight"] = state["wte.weight"]  # tied\n'

# rotary_gqa ----------------------------------------------------------------------------------------------------
_ATTENDED = "attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal)"
_ROTARY_ATTENDED = "        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal)\n"
_TOKEN_POSITIONS = "token_positions = torch.arange(length, device=x.device)"

# modern_block --------------------------------------------------------------------------------------------------
_SELF_NORM2 = "self.norm2 = norm(config.d_model, eps=config.norm_eps)"
_X = "x = x + self.attn(self.norm1(x), mask, token_positions, is_causal=is_causal)"
_SELF_NORM1 = "self.norm1 = norm(config.d_model, eps=config.norm_eps)"

# modern_decoder ------------------------------------------------------------------------------------------------
_SELF_LM_HEAD = "        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)\n"
_MASK_IS_CAUSAL = "mask, is_causal = causal & padding_mask[:, None, None, :], False"
_POSITIONS_MASK_IS_CAUSAL = "positions, mask, is_causal = torch.arange(length, device=tokens.device), None, True"
_SELF_NORM = "self.norm = norm(config.d_model, eps=config.norm_eps)"
_DECODER_CAUSAL = "causal = torch.ones(length, length, dtype=torch.bool, device=tokens.device).tril()"

# llama_state_from_hf -------------------------------------------------------------------------------------------
_RETURN_WEIGHT_VIEW = "return weight.view(n_heads, head_dim, -1)[:, order].reshape(weight.shape)"

# fused_rotary_gqa ----------------------------------------------------------------------------------------------
_DEF_FUSE_QKV = 'def fuse_qkv(state: dict) -> dict:\n    """Every <prefix>q_proj/k_proj/v_proj trio as one <prefix>qkv_proj, rows q, then k, then v.\n'
_FUSED_ATTENDED = "attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal)"
_FUSED_F_PREFIX = (
    'fused[f"{prefix}qkv_proj.{kind}"] = torch.cat([state[f"{prefix}{n}_proj.{kind}"] for n in "qkv"], dim=0)'
)
_Q_K_V = "q, k, v = self.qkv_proj(x).split([q_size, kv_size, kv_size], dim=-1)  # the one product, then its columns"
_FUSED_Q_K_V = "        q, k, v = self.qkv_proj(x).split([q_size, kv_size, kv_size], dim=-1)  # the one product, then its columns\n"
_NEW_X = ""
_NEW_Q_K_V = "q, k, v = self.qkv_proj(x).chunk(3, dim=-1)"

WRONG_VERSIONS = (
    # gpt2_num_parameters
    WrongVersion(
        COUNT,
        "head counted separately (untied)",
        "the output head is counted separately",
        edit(
            _RETURN_EMBEDDINGS_CONFIG,
            "return embeddings + config.n_layers * (norms + attention + mlp) + 2 * d + config.vocab_size * d  # + ln_f",
        ),
    ),
    WrongVersion(
        COUNT,
        "biases forgotten",
        "the biases of the attention projections and the MLP are missing",
        edit(
            """\
    attention = 4 * (d * d + d)              # q, k, v, out, each with a bias
    mlp = (d * f + f) + (f * d + d)          # fc1 and fc2, with biases
""",
            """\
    attention = 4 * d * d              # q, k, v, out, each with a bias
    mlp = 2 * d * f          # fc1 and fc2, with biases
""",
        ),
    ),
    WrongVersion(
        COUNT,
        "final LayerNorm forgotten",
        "the final LayerNorm ln_f",
        edit(
            _RETURN_EMBEDDINGS_CONFIG, "return embeddings + config.n_layers * (norms + attention + mlp) + 0  # + ln_f"
        ),
    ),
    WrongVersion(
        COUNT,
        "position table forgotten",
        "the position table wpe",
        edit("embeddings = config.vocab_size * d + config.n_positions * d", "embeddings = config.vocab_size * d"),
    ),
    # "As a closed form: no model built" (issue 34): counting a model built here, the course's or Hugging Face's.
    # Full code, not edits: each counts a built model instead of working it out (another algorithm).
    WrongVersion(
        COUNT,
        "counts the parameters of the notebook's GPT2",
        _RULE,
        code="""\

def gpt2_num_parameters(config):
    return sum(p.numel() for p in GPT2(config).parameters())
""",
    ),
    WrongVersion(
        COUNT,
        "builds GPT2 on the meta device (no memory, still a model)",
        _RULE,
        code="""\

def gpt2_num_parameters(config):
    build = globals()['GP' + 'T2']
    with torch.device('meta'):
        model = build(config)
    return sum(p.numel() for p in model.parameters())
""",
    ),
    WrongVersion(
        COUNT,
        "asks Hugging Face's GPT2LMHeadModel",
        _RULE,
        code="""\

def gpt2_num_parameters(config):
    import transformers
    hf = transformers.GPT2Config(vocab_size=config.vocab_size, n_positions=config.n_positions, n_embd=config.d_model,
                                 n_layer=config.n_layers, n_head=config.n_heads, n_inner=config.d_ff)
    return transformers.GPT2LMHeadModel(hf).num_parameters()
""",
    ),
    # gpt2_model
    WrongVersion(GPT2, "head not tied", "head is not tied", edit(_SELF_LM_HEAD_WEIGHT, "")),
    WrongVersion(
        GPT2,
        "positions 0..seq-1 under left padding",
        "the positions of a padded batch are off by the padding",
        edit("positions = (padding_mask.long().cumsum(-1) - 1).clamp(min=0)", "positions = torch.arange(length)"),
    ),
    WrongVersion(
        GPT2,
        "no final LayerNorm",
        "the final LayerNorm is missing",
        edit("return self.lm_head(self.ln_f(x))", "return self.lm_head(x)"),
    ),
    WrongVersion(
        GPT2,
        "no causal mask",
        "there is no causal mask",
        edit(_CAUSAL, "causal = None"),
        edit(_MASK, "mask = padding_mask[:, None, None, :]"),
    ),
    WrongVersion(
        GPT2,
        "exact GELU instead of the tanh approximation",
        "uses the exact GELU",
        edit(
            '[block(d, config.n_heads, config.d_ff, "gelu_tanh", norm=block_norm) for _ in range(config.n_layers)]',
            '[block(d, config.n_heads, config.d_ff, "gelu", norm=block_norm) for _ in range(config.n_layers)]',
        ),
    ),
    WrongVersion(
        GPT2,
        "norm_eps not passed to the blocks' LayerNorms",
        "config.norm_eps does not reach the LayerNorms",
        edit(_BLOCK_NORM, "block_norm = norm"),
    ),
    WrongVersion(
        GPT2, "padding mask ignored", "padding_mask does not reach the attention", edit(_MASK, "mask = causal")
    ),
    # Invisible on a CPU: the model run on the meta device.
    WrongVersion(
        GPT2,
        "mask and positions made on the CPU",
        "a tensor your forward makes stays on the CPU",
        edit(_CAUSAL, "causal = torch.ones(length, length, dtype=torch.bool).tril()"),
        edit(_POSITIONS_MASK, _NEW_POSITIONS_MASK),
    ),
    # A causal mask cached for GPT-2's 1024 positions (observed beyond them, on the meta device).
    WrongVersion(
        GPT2,
        "causal mask cached for 1024 positions",
        "or was made for a fixed length",
        edit(
            _SELF_LM_HEAD_WEIGHT,
            """\
        self.lm_head.weight = self.wte.weight  # tied: one matrix, used twice
        self.register_buffer("causal", torch.ones(1024, 1024, dtype=torch.bool).tril(), persistent=False)
""",
        ),
        edit(_CAUSAL, "causal = self.causal[:length, :length]"),
    ),
    # Invisible on the meta device unless the lookup is observed: nn.Embedding there accepts CPU indices.
    WrongVersion(
        GPT2,
        "positions made on the CPU (the mask on the device of tokens)",
        "the position table wpe was given positions",
        edit(_POSITIONS_MASK, _NEW_POSITIONS_MASK),
    ),
    # The constructor arguments, observed by recording stand-ins (the reference parts give the same numbers).
    WrongVersion(
        GPT2,
        "block= ignored: PreNormBlock by name",
        "blocks were made by calling the block argument",
        edit("            [block(d, config.n_heads,", "            [PreNormBlock(d, config.n_heads,"),
    ),
    WrongVersion(
        GPT2,
        "norm= ignored for ln_f: LayerNorm by name",
        "ln_f was not made by calling the norm argument",
        edit("self.ln_f = norm(d, eps=config.norm_eps)", "self.ln_f = LayerNorm(d, eps=config.norm_eps)"),
    ),
    WrongVersion(
        GPT2,
        "blocks' norms a LayerNorm by name (with the config's eps)",
        "norms were not made by calling the norm argument",
        edit(_BLOCK_NORM, "block_norm = functools.partial(LayerNorm, eps=config.norm_eps)"),
    ),
    # causal_lm_loss
    WrongVersion(
        LOSS,
        "no shift",
        "the label shift is missing",
        edit(
            _PREDICTIONS,
            """\
    predictions = logits.reshape(-1, logits.shape[-1])
    targets = labels.reshape(-1)
""",
        ),
    ),
    WrongVersion(
        LOSS,
        "shifted the wrong way",
        "the shift goes the wrong way",
        edit(
            _PREDICTIONS,
            """\
    predictions = logits[:, 1:].reshape(-1, logits.shape[-1])
    targets = labels[:, :-1].reshape(-1)
""",
        ),
    ),
    WrongVersion(
        LOSS,
        "mean over the ignored positions too",
        "the mean runs over the ignored positions",
        edit(
            _RETURN_F_CROSS_ENTROPY,
            "return F.cross_entropy(predictions.float(), targets, ignore_index=ignore_index, reduction='none').mean()",
        ),
    ),
    WrongVersion(
        LOSS,
        "ignore_index not passed on",
        "ignore_index is not used",
        edit(_RETURN_F_CROSS_ENTROPY, "return F.cross_entropy(predictions.float(), targets)"),
    ),
    # gpt2_state_from_hf
    WrongVersion(
        GPT2_CONVERT,
        "Conv1D weights not transposed",
        "Conv1D stores its weight",
        edit(
            'state[f"{b}attn.{name}.weight"] = qkv_weight[:, j * d:(j + 1) * d].t().contiguous()',
            'state[f"{b}attn.{name}.weight"] = qkv_weight[:, j * d:(j + 1) * d].contiguous()',
        ),
        edit(
            'state[f"{b}{ours}.weight"] = src[f"{h}{theirs}.weight"].t().contiguous()  # Conv1D: [in, out]',
            'state[f"{b}{ours}.weight"] = src[f"{h}{theirs}.weight"].contiguous()  # Conv1D: [in, out]',
        ),
    ),
    WrongVersion(
        GPT2_CONVERT,
        "q, k, v split in the wrong order",
        "c_attn's output is q | k | v",
        edit(
            'for j, name in enumerate(("q_proj", "k_proj", "v_proj")):  # columns q | k | v',
            'for j, name in enumerate(("k_proj", "q_proj", "v_proj")):  # columns q | k | v',
        ),
    ),
    WrongVersion(
        GPT2_CONVERT,
        "prefix expected (fails on the hub layout)",
        "on the hub's layout the keys have no 'transformer.' prefix",
        edit(_SRC, 'src = {k[len("transformer."):]: v for k, v in hf_state.items() if k.startswith("transformer.")}'),
    ),
    WrongVersion(GPT2_CONVERT, "lm_head.weight missing", "has no lm_head.weight", edit(_STATE_LM_HEAD_WEIGHT, "")),
    WrongVersion(
        GPT2_CONVERT,
        "every key copied, buffers included",
        "are buffers",
        edit(
            _STATE_LM_HEAD_WEIGHT,
            """\
    state["lm_head.weight"] = state["wte.weight"]  # tied
    state.update({k: v for k, v in src.items() if k.endswith("attn.bias")})
""",
        ),
    ),
    WrongVersion(
        GPT2_CONVERT,
        "lm_head.weight a copy of wte.weight, not the same tensor",
        "is not the same tensor as",
        edit(
            'state["lm_head.weight"] = state["wte.weight"]  # tied',
            'state["lm_head.weight"] = state["wte.weight"].clone()',
        ),
    ),
    WrongVersion(
        GPT2_CONVERT,
        "the caller's hf_state stripped of its prefix in place",
        "changed the caller's dict",
        edit(
            "def gpt2_state_from_hf(hf_state: dict, config: GPT2Config) -> dict:\n",
            """\
def _strip(hf_state):
    for key in list(hf_state):
        hf_state[key.removeprefix("transformer.")] = hf_state.pop(key)
    return hf_state


def gpt2_state_from_hf(hf_state: dict, config: GPT2Config) -> dict:
""",
        ),
        edit(_SRC, "src = _strip(hf_state)"),
    ),
    # rotary_gqa
    WrongVersion(
        ROTARY,
        "values rotated too",
        "the values are rotated too",
        edit(
            "v = heads(self.v_proj(x), self.num_kv_heads)  # values are not rotated",
            "v = self.rope(heads(self.v_proj(x), self.num_kv_heads), token_positions)",
        ),
    ),
    WrongVersion(
        ROTARY,
        "kv heads repeated 0 1 0 1",
        "repeated in the wrong order",
        edit(
            "k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # kv heads 0 0 1 1 ...",
            "k, v = k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)  # kv heads 0 0 1 1 ...",
        ),
    ),
    WrongVersion(
        ROTARY,
        "token_positions ignored",
        "token_positions is ignored",
        edit("if token_positions is None:", "if True or token_positions is None:"),
    ),
    WrongVersion(
        ROTARY,
        "RoPE over the whole d_model",
        "RoPE is applied across the whole d_model",
        edit(
            """\
        q = self.rope(heads(self.q_proj(x), self.num_heads), token_positions)
        k = self.rope(heads(self.k_proj(x), self.num_kv_heads), token_positions)
""",
            """\
        q = heads(self.rope(self.q_proj(x), token_positions), self.num_heads)
        k = heads(self.rope(self.k_proj(x), token_positions), self.num_kv_heads)
""",
        ),
    ),
    WrongVersion(
        ROTARY,
        "projections with biases",
        "have no bias",
        edit(
            """\
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(d_model, num_kv_heads * self.head_dim, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)
""",
            """\
        self.q_proj = nn.Linear(d_model, d_model, bias=True)
        self.k_proj = nn.Linear(d_model, num_kv_heads * self.head_dim, bias=True)
        self.v_proj = nn.Linear(d_model, num_kv_heads * self.head_dim, bias=True)
        self.out_proj = nn.Linear(d_model, d_model, bias=True)
""",
        ),
    ),
    WrongVersion(
        ROTARY,
        "is_causal accepted but not passed on",
        "is_causal=True is ignored",
        edit(_ATTENDED, "attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)"),
    ),
    WrongVersion(
        ROTARY,
        "is_causal turned into a causal mask tensor",
        _SAYS_PASS_IS_CAUSAL_ON,
        edit(
            _ATTENDED,
            "attended = F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(length, length, dtype=torch.bool).tril() if is_causal else mask)",
        ),
    ),
    WrongVersion(
        ROTARY,
        "is_causal turned into a float mask, SDPA under another name",
        _SAYS_PASS_IS_CAUSAL_ON,
        edit(
            _ROTARY_ATTENDED,
            """\
        attend = F.scaled_dot_product_attention
        attended = attend(q, k, v, attn_mask=torch.full((length, length), float('-inf')).triu(1) if is_causal else mask)
""",
        ),
    ),
    WrongVersion(
        ROTARY,
        "[batch, seq] positions of row 0 for every row",
        "every row is rotated by the positions of row 0",
        edit("token_positions = token_positions[:, None, :]", "token_positions = token_positions[0]"),
    ),
    WrongVersion(
        ROTARY,
        "RoPE over the whole d_model, values included",
        "RoPE is applied to the whole d_model and to the values",
        edit(
            """\
        q = self.rope(heads(self.q_proj(x), self.num_heads), token_positions)
        k = self.rope(heads(self.k_proj(x), self.num_kv_heads), token_positions)
        v = heads(self.v_proj(x), self.num_kv_heads)  # values are not rotated
""",
            """\
        q = heads(self.rope(self.q_proj(x), token_positions), self.num_heads)
        k = heads(self.rope(self.k_proj(x), token_positions), self.num_kv_heads)
        v = heads(self.rope(self.v_proj(x), token_positions), self.num_kv_heads)
""",
        ),
    ),
    WrongVersion(
        ROTARY,
        "mask not passed to the attention",
        "the mask does not reach the attention",
        edit(_ATTENDED, "attended = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)"),
    ),
    # The attributes the spec names (notebook 13 reads them), and the rope it was given.
    WrongVersion(
        ROTARY,
        "head counts kept under other names",
        "store self.num_heads, self.num_kv_heads and self.head_dim",
        edit("self.num_heads, self.num_kv_heads = num_heads, num_kv_heads", "self.h, self.g = num_heads, num_kv_heads"),
        edit(
            """\
        q = self.rope(heads(self.q_proj(x), self.num_heads), token_positions)
        k = self.rope(heads(self.k_proj(x), self.num_kv_heads), token_positions)
        v = heads(self.v_proj(x), self.num_kv_heads)  # values are not rotated
        group = self.num_heads // self.num_kv_heads
""",
            """\
        q = self.rope(heads(self.q_proj(x), self.h), token_positions)
        k = self.rope(heads(self.k_proj(x), self.g), token_positions)
        v = heads(self.v_proj(x), self.g)  # values are not rotated
        group = self.h // self.g
""",
        ),
    ),
    WrongVersion(
        ROTARY,
        "a rope of its own instead of the one given",
        "is not the rope it was given",
        edit("self.rope = rope", "self.rope = type(rope)(self.head_dim, 64)"),
    ),
    # Where the default positions are made (observed on PyTorch's meta device).
    WrongVersion(
        ROTARY,
        "default positions made on the CPU",
        "make the default positions on the device of x",
        edit(_TOKEN_POSITIONS, "token_positions = torch.arange(length)"),
    ),
    WrongVersion(
        ROTARY,
        "default positions cached for 1024 tokens",
        "or has a fixed size",
        edit(
            "        self.out_proj = nn.Linear(d_model, d_model, bias=False)\n",
            """\
        self.out_proj = nn.Linear(d_model, d_model, bias=False)
        self.register_buffer("positions", torch.arange(1024), persistent=False)
""",
        ),
        edit(_TOKEN_POSITIONS, "token_positions = self.positions[:length]"),
    ),
    # A query whose keys are all masked (notebook 04's rule): zero weights, a zero output. Attention written out by hand.
    WrongVersion(
        ROTARY,
        "attention by hand with masked_fill(-inf): NaN for fully masked queries",
        "comes out as NaN",
        edit(
            _ROTARY_ATTENDED,
            """\
        scores = q @ k.transpose(-2, -1) / self.head_dim ** 0.5
        if is_causal:
            mask = torch.ones(length, length, dtype=torch.bool, device=x.device).tril()
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        attended = scores.softmax(-1) @ v
""",
        ),
    ),
    WrongVersion(
        ROTARY,
        "attention by hand with masked_fill(finfo.min): uniform weights for fully masked queries",
        "gets uniform weights over them",
        edit(
            _ROTARY_ATTENDED,
            """\
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / self.head_dim ** 0.5
        if is_causal:
            mask = torch.ones(length, length, dtype=torch.bool, device=x.device).tril()
        if mask is not None:
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        attended = torch.einsum("bhqk,bhkd->bhqd", scores.softmax(-1), v)
""",
        ),
    ),
    # modern_block
    WrongVersion(
        MODERN_BLOCK,
        "post-norm where pre-norm is required",
        "this is the post-norm order",
        edit(
            """\
        x = x + self.attn(self.norm1(x), mask, token_positions, is_causal=is_causal)
        return x + self.ffn(self.norm2(x))
""",
            """\
        x = self.norm1(x + self.attn(x, mask, token_positions, is_causal=is_causal))
        return self.norm2(x + self.ffn(x))
""",
        ),
    ),
    WrongVersion(
        MODERN_BLOCK,
        "one norm shared by both sublayers",
        "one norm is shared",
        edit(_SELF_NORM2, "self.norm2 = self.norm1"),
    ),
    WrongVersion(
        MODERN_BLOCK,
        "residual missing around the attention",
        "the residual connection around the attention is missing",
        edit(_X, "x = self.attn(self.norm1(x), mask, token_positions, is_causal=is_causal)"),
    ),
    WrongVersion(
        MODERN_BLOCK,
        "token_positions not passed on",
        "token_positions does not reach the attention",
        edit(_X, "x = x + self.attn(self.norm1(x), mask, is_causal=is_causal)"),
    ),
    WrongVersion(
        MODERN_BLOCK,
        "norm_eps not passed",
        "config.norm_eps does not reach the norms",
        edit(_SELF_NORM1, "self.norm1 = norm(config.d_model)"),
        edit(_SELF_NORM2, "self.norm2 = norm(config.d_model)"),
    ),
    WrongVersion(
        MODERN_BLOCK,
        "is_causal not passed on",
        "is_causal does not reach the attention",
        edit(_X, "x = x + self.attn(self.norm1(x), mask, token_positions)"),
    ),
    WrongVersion(
        MODERN_BLOCK,
        "norm1 before the FFN too",
        "norm1 is used before both sublayers",
        edit("return x + self.ffn(self.norm2(x))", "return x + self.ffn(self.norm1(x))"),
    ),
    WrongVersion(
        MODERN_BLOCK,
        "residual missing around the FFN",
        "the residual connection around the feed-forward network is missing",
        edit("return x + self.ffn(self.norm2(x))", "return self.ffn(self.norm2(x))"),
    ),
    WrongVersion(
        MODERN_BLOCK,
        "mask not passed on",
        "the mask does not reach the attention: self.attn(h, mask, token_positions)",
        edit(_X, "x = x + self.attn(self.norm1(x), token_positions=token_positions, is_causal=is_causal)"),
    ),
    # The constructor arguments, observed by recording stand-ins (the notebook's own parts give the same numbers).
    WrongVersion(
        MODERN_BLOCK,
        "attention= ignored: RotaryGQA by name",
        "attn was not made by calling the attention argument",
        edit("        self.attn = attention(config.d_model,", "        self.attn = RotaryGQA(config.d_model,"),
    ),
    WrongVersion(
        MODERN_BLOCK,
        "feed_forward= ignored: SwiGLU by name",
        "ffn was not made by calling the feed_forward argument",
        edit("self.ffn = feed_forward(config.d_model, config.d_ff)", "self.ffn = SwiGLU(config.d_model, config.d_ff)"),
    ),
    WrongVersion(
        MODERN_BLOCK,
        "norm= ignored: RMSNorm by name",
        "norm1 was not made by calling the norm argument",
        edit(_SELF_NORM1, "self.norm1 = RMSNorm(config.d_model, eps=config.norm_eps)"),
        edit(_SELF_NORM2, "self.norm2 = RMSNorm(config.d_model, eps=config.norm_eps)"),
    ),
    # modern_decoder
    WrongVersion(
        DECODER,
        "head tied to the embedding",
        "head is tied",
        edit(
            _SELF_LM_HEAD,
            """\
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.lm_head.weight = self.tok_emb.weight
""",
        ),
    ),
    WrongVersion(
        DECODER,
        "padding mask ignored",
        "padding_mask does not reach the attention",
        edit(_MASK_IS_CAUSAL, "mask, is_causal = causal, False"),
    ),
    WrongVersion(
        DECODER,
        "no final norm",
        "the final norm is missing",
        edit("return self.lm_head(self.norm(x))", "return self.lm_head(x)"),
    ),
    # Invisible in the logits: what the recording blocks are given.
    WrongVersion(
        DECODER,
        "the causal mask as a tensor without padding (no flash attention)",
        "the mask is purely causal, so give no mask tensor",
        edit(
            _POSITIONS_MASK_IS_CAUSAL,
            "positions, mask, is_causal = torch.arange(length, device=tokens.device), torch.ones(length, length, dtype=torch.bool, device=tokens.device).tril(), False",
        ),
    ),
    WrongVersion(
        DECODER,
        "is_causal=True with the padded mask too",
        "is_causal=True",
        edit(_MASK_IS_CAUSAL, "mask, is_causal = causal & padding_mask[:, None, None, :], True"),
    ),
    WrongVersion(
        DECODER,
        "rope_base not passed to RoPE",
        "config.rope_base does not reach RoPE",
        edit(
            "shared_rope = rope(config.d_model // config.n_heads, config.max_seq_len, config.rope_base)",
            "shared_rope = rope(config.d_model // config.n_heads, config.max_seq_len)",
        ),
    ),
    # Invisible in the logits (RoPE depends on position differences only); the recording blocks see them.
    WrongVersion(
        DECODER,
        "one RoPE per block",
        "make ONE, rope(head_dim, max_seq_len, rope_base)",
        edit(
            "self.blocks = nn.ModuleList([block(config, shared_rope) for _ in range(config.n_layers)])",
            "self.blocks = nn.ModuleList([block(config, rope(config.d_model // config.n_heads, config.max_seq_len, config.rope_base)) for _ in range(config.n_layers)])",
        ),
    ),
    WrongVersion(
        DECODER,
        "positions counted from 1",
        "the first real token of each row is position 0",
        edit(
            "positions = (padding_mask.long().cumsum(-1) - 1).clamp(min=0)",
            "positions = padding_mask.long().cumsum(-1)",
        ),
    ),
    WrongVersion(
        DECODER,
        "norm_eps not passed to the final norm",
        "config.norm_eps does not reach the final norm",
        edit(_SELF_NORM, "self.norm = norm(config.d_model)"),
    ),
    WrongVersion(
        DECODER,
        "mask and positions made on the CPU",
        "a tensor your forward makes stays on the CPU",
        edit(_POSITIONS_MASK_IS_CAUSAL, "positions, mask, is_causal = torch.arange(length), None, True"),
        edit(_DECODER_CAUSAL, "causal = torch.ones(length, length, dtype=torch.bool).tril()"),
    ),
    # A causal mask cached for a fixed length (observed beyond it, on the meta device).
    WrongVersion(
        DECODER,
        "causal mask cached for 1024 positions",
        "or was made for a fixed length",
        edit(
            _SELF_LM_HEAD,
            """\
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.register_buffer("causal", torch.ones(1024, 1024, dtype=torch.bool).tril(), persistent=False)
""",
        ),
        edit(_DECODER_CAUSAL, "causal = self.causal[:length, :length]"),
    ),
    # The constructor arguments, observed by recording stand-ins (the notebook's own parts give the same numbers).
    WrongVersion(
        DECODER,
        "norm= ignored for the final norm: nn.RMSNorm by name",
        "final norm was not made by calling the norm argument",
        edit(_SELF_NORM, "self.norm = nn.RMSNorm(config.d_model, eps=config.norm_eps)"),
    ),
    WrongVersion(
        DECODER,
        "block= ignored: ModernBlock by name",
        "blocks were made by calling the block argument",
        edit(
            "        self.blocks = nn.ModuleList([block(config, shared_rope)",
            "        self.blocks = nn.ModuleList([ModernBlock(config, shared_rope)",
        ),
    ),
    # llama_state_from_hf
    WrongVersion(
        LLAMA_CONVERT, "q/k rows not permuted", "are not permuted", edit(_RETURN_WEIGHT_VIEW, "return weight")
    ),
    WrongVersion(
        LLAMA_CONVERT,
        "the permutation instead of its inverse",
        "permuted by halves_permutation itself",
        edit("order = torch.argsort(halves_permutation(head_dim))", "order = halves_permutation(head_dim)"),
    ),
    WrongVersion(
        LLAMA_CONVERT,
        "v rows permuted too",
        "v_proj is permuted too",
        edit(
            'state[f"{b}attn.v_proj.weight"] = hf_state[f"{h}self_attn.v_proj.weight"]',
            'state[f"{b}attn.v_proj.weight"] = interleaved(hf_state[f"{h}self_attn.v_proj.weight"], config.n_kv_heads or config.n_heads)',
        ),
    ),
    WrongVersion(
        LLAMA_CONVERT,
        "rows permuted across the whole projection",
        "permuted across the whole projection",
        edit(_RETURN_WEIGHT_VIEW, "return weight[torch.argsort(halves_permutation(weight.shape[0]))]"),
    ),
    WrongVersion(
        LLAMA_CONVERT,
        "the permuted q written back into the caller's hf_state",
        "changed the caller's dict: it replaced",
        edit(
            '        state[f"{b}attn.q_proj.weight"] = interleaved(hf_state[f"{h}self_attn.q_proj.weight"], config.n_heads)\n',
            """\
        hf_state[f"{h}self_attn.q_proj.weight"] = interleaved(hf_state[f"{h}self_attn.q_proj.weight"], config.n_heads)
        state[f"{b}attn.q_proj.weight"] = hf_state[f"{h}self_attn.q_proj.weight"]
""",
        ),
    ),
    WrongVersion(
        LLAMA_CONVERT,
        "q/k rows permuted in place in the caller's tensors",
        "modified the caller's tensors",
        edit(
            "        return weight.view(n_heads, head_dim, -1)[:, order].reshape(weight.shape)\n",
            """\
        weight.copy_(weight.view(n_heads, head_dim, -1)[:, order].reshape(weight.shape))
        return weight
""",
        ),
    ),
    # fused_rotary_gqa
    # fuse_qkv written otherwise: the caller's dict changed while the values come out right.
    WrongVersion(
        FUSED,
        "fuse_qkv edits the caller's dict and returns it",
        "returned the dict it was given",
        edit(_DEF_FUSE_QKV, _NEW_X),
        edit(
            '    Weights are [rows, d_model] (nn.Linear\'s [out, in]), biases [rows], when present; the result is a new dict\n    with every other key as it was.\n    """\n    separate = tuple(f"{n}_proj.{kind}" for n in "qkv" for kind in ("weight", "bias"))\n    fused = {key: value for key, value in state.items() if not key.endswith(separate)}\n    for key in state:\n        for kind in ("weight", "bias"):\n            if key.endswith(f"q_proj.{kind}"):\n                prefix = key.removesuffix(f"q_proj.{kind}")\n                fused[f"{prefix}qkv_proj.{kind}"] = torch.cat([state[f"{prefix}{n}_proj.{kind}"] for n in "qkv"], dim=0)\n    return fused\n',
            """\
def fuse_qkv(state):
    trios = [(key[:-len(f"q_proj.{kind}")], kind) for key in state for kind in ("weight", "bias")
             if key.endswith(f"q_proj.{kind}")]
    for prefix, kind in trios:
        parts = [state.pop(f"{prefix}{n}_proj.{kind}") for n in "qkv"]
        state[f"{prefix}qkv_proj.{kind}"] = torch.cat(parts, dim=0)
    return state
""",
        ),
    ),
    WrongVersion(
        FUSED,
        "fuse_qkv pops q/k/v out of the caller's dict",
        "changed the caller's dict: it removed",
        edit(_DEF_FUSE_QKV, _NEW_X),
        edit(
            '    Weights are [rows, d_model] (nn.Linear\'s [out, in]), biases [rows], when present; the result is a new dict\n    with every other key as it was.\n    """\n    separate = tuple(f"{n}_proj.{kind}" for n in "qkv" for kind in ("weight", "bias"))\n    fused = {key: value for key, value in state.items() if not key.endswith(separate)}\n    for key in state:\n',
            """\
def fuse_qkv(state):
    fused = {}
    for key in list(state):
""",
        ),
        edit(
            """\
                prefix = key.removesuffix(f"q_proj.{kind}")
                fused[f"{prefix}qkv_proj.{kind}"] = torch.cat([state[f"{prefix}{n}_proj.{kind}"] for n in "qkv"], dim=0)
""",
            """\
                prefix = key[:-len(f"q_proj.{kind}")]
                parts = [state.pop(f"{prefix}{n}_proj.{kind}") for n in "qkv"]
                fused[f"{prefix}qkv_proj.{kind}"] = torch.cat(parts, dim=0)
    fused.update(state)
""",
        ),
    ),
    WrongVersion(
        FUSED,
        "fuse_qkv reuses the q tensor for the fused one (.data)",
        "modified the caller's tensors",
        edit(
            '                fused[f"{prefix}qkv_proj.{kind}"] = torch.cat([state[f"{prefix}{n}_proj.{kind}"] for n in "qkv"], dim=0)\n',
            """\
                q = state[f"{prefix}q_proj.{kind}"]
                q.data = torch.cat([state[f"{prefix}{n}_proj.{kind}"] for n in "qkv"], dim=0)  # no new tensor
                fused[f"{prefix}qkv_proj.{kind}"] = q
""",
        ),
    ),
    WrongVersion(
        FUSED,
        "is_causal accepted but not passed on",
        "is_causal=True is ignored",
        edit(_FUSED_ATTENDED, "attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)"),
    ),
    WrongVersion(
        FUSED,
        "fused in the order k, q, v",
        "stacks the projections in another order",
        edit(
            _FUSED_F_PREFIX,
            'fused[f"{prefix}qkv_proj.{kind}"] = torch.cat([state[f"{prefix}{n}_proj.{kind}"] for n in "kqv"], dim=0)',
        ),
    ),
    WrongVersion(
        FUSED,
        "fused weight transposed (Conv1D layout)",
        "is transposed",
        edit(
            _FUSED_F_PREFIX,
            'fused[f"{prefix}qkv_proj.{kind}"] = torch.cat([state[f"{prefix}{n}_proj.{kind}"].t() for n in "qkv"], dim=1) if kind == "weight" else torch.cat([state[f"{prefix}{n}_proj.{kind}"] for n in "qkv"], dim=0)',
        ),
    ),
    WrongVersion(
        FUSED,
        "joined along the wrong dim",
        "joined along dim 1",
        edit(
            _FUSED_F_PREFIX,
            'fused[f"{prefix}qkv_proj.{kind}"] = torch.cat([state[f"{prefix}{n}_proj.{kind}"] for n in "qkv"], dim=-1)',
        ),
    ),
    WrongVersion(
        FUSED, "split sizes assume num_kv_heads == num_heads", "not three equal parts", edit(_Q_K_V, _NEW_Q_K_V)
    ),
    WrongVersion(
        FUSED,
        "qkv_proj sized as if num_kv_heads == num_heads",
        "assumes num_kv_heads == num_heads",
        edit(
            "self.qkv_proj = nn.Linear(d_model, (num_heads + 2 * num_kv_heads) * self.head_dim, bias=False)",
            "self.qkv_proj = nn.Linear(d_model, 3 * d_model, bias=False)",
        ),
        edit(_Q_K_V, _NEW_Q_K_V),
    ),
    WrongVersion(
        FUSED,
        "split in the order k, q, v",
        "split off in the order k-q-v",
        edit(
            _Q_K_V,
            "k, q, v = self.qkv_proj(x).split([kv_size, q_size, kv_size], dim=-1)  # the one product, then its columns",
        ),
    ),
    WrongVersion(
        FUSED,
        "split in the order q, v, k",
        "split off in the order q-v-k",
        edit(
            _Q_K_V,
            "q, v, k = self.qkv_proj(x).split([q_size, kv_size, kv_size], dim=-1)  # the one product, then its columns",
        ),
    ),
    WrongVersion(
        FUSED,
        "split in the order v, k, q",
        "split off in the order v-k-q",
        edit(
            _Q_K_V,
            "v, k, q = self.qkv_proj(x).split([kv_size, kv_size, q_size], dim=-1)  # the one product, then its columns",
        ),
    ),
    WrongVersion(
        FUSED,
        "split along the sequence dim",
        "along its last dim",
        edit(
            _Q_K_V,
            "q, k, v = self.qkv_proj(x).split([q_size, kv_size, kv_size], dim=1)  # the one product, then its columns",
        ),
    ),
    WrongVersion(
        FUSED,
        "three products with slices of the weight",
        "not computed by one product",
        edit(
            _FUSED_Q_K_V,
            """\
        w = self.qkv_proj.weight
        q, k, v = (F.linear(x, part) for part in w.split([q_size, kv_size, kv_size], dim=0))
""",
        ),
    ),
    WrongVersion(
        FUSED,
        "three products concatenated to the fused width, then split",
        "no matrix product of that width ran",
        edit(
            _FUSED_Q_K_V,
            """\
        w = self.qkv_proj.weight
        sizes = [q_size, kv_size, kv_size]
        q, k, v = torch.cat([x @ part.t() for part in w.split(sizes)], -1).split(sizes, dim=-1)
""",
        ),
    ),
    WrongVersion(
        FUSED,
        "[batch, seq] positions of row 0 for every row",
        "every row is rotated by the positions of row 0",
        edit("token_positions = token_positions[:, None, :]", "token_positions = token_positions[0]"),
    ),
    WrongVersion(
        FUSED,
        "is_causal turned into a causal mask tensor",
        _SAYS_PASS_IS_CAUSAL_ON,
        edit(
            _FUSED_ATTENDED,
            "attended = F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(length, length, dtype=torch.bool).tril() if is_causal else mask)",
        ),
    ),
    WrongVersion(
        FUSED,
        "default positions made on the CPU",
        "make the default positions on the device of x",
        edit("token_positions = torch.arange(length, device=x.device)", "token_positions = torch.arange(length)"),
    ),
    # A whole decoder's state dict: the keys that are not q/k/v projections.
    WrongVersion(
        FUSED,
        "fuse_qkv keeps only the attention keys (norms, feed-forward, embeddings lost)",
        "lost the keys",
        edit(
            "fused = {key: value for key, value in state.items() if not key.endswith(separate)}",
            'fused = {key: value for key, value in state.items() if key.endswith("out_proj.weight")}',
        ),
    ),
    # A query whose keys are all masked gets zero weights, as in RotaryGQA (notebook 04's rule).
    WrongVersion(
        FUSED,
        "attention by hand with masked_fill(-inf): NaN for fully masked queries",
        "comes out as NaN",
        edit(
            "        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal)\n",
            """\
        scores = q @ k.transpose(-2, -1) / self.head_dim ** 0.5
        if is_causal:
            mask = torch.ones(length, length, dtype=torch.bool, device=x.device).tril()
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        attended = scores.softmax(-1) @ v
""",
        ),
    ),
)
