"""Mistakes students make in notebook 08."""

from wrong import Wrong


def _fill(template: str, **parts) -> str:
    for key, value in parts.items():
        template = template.replace(f"@{key.upper()}@", value)
    return template


# --- Exercise 1 ----------------------------------------------------------------------------

_COUNT = """
def gpt2_num_parameters(config):
    d, f = config.d_model, config.d_ff
    embeddings = @EMBEDDINGS@
    block = @BLOCK@
    return embeddings + config.n_layers * block + @FINAL@
"""
COUNT_PARTS = {
    "embeddings": "config.vocab_size * d + config.n_positions * d",
    "block": "2 * 2 * d + 4 * (d * d + d) + (d * f + f) + (f * d + d)",
    "final": "2 * d",
}


def count(**changes):
    return _fill(_COUNT, **(COUNT_PARTS | changes))


# --- Exercise 2 ----------------------------------------------------------------------------

_GPT2 = """
class GPT2(nn.Module):
    def __init__(self, config, *, block=PreNormBlock, norm=LayerNorm):
        super().__init__()
        self.config = config
        d = config.d_model
        self.wte = nn.Embedding(config.vocab_size, d)
        self.wpe = nn.Embedding(config.n_positions, d)
        block_norm = @BLOCK_NORM@
        self.blocks = nn.ModuleList([block(d, config.n_heads, config.d_ff, @ACTIVATION@, norm=block_norm)
                                     for _ in range(config.n_layers)])
        self.ln_f = norm(d, eps=config.norm_eps)
        self.lm_head = nn.Linear(d, config.vocab_size, bias=False)
        @TIE@

    def forward(self, tokens, padding_mask=None):
        length = tokens.shape[1]
        causal = @CAUSAL@
        if padding_mask is None:
            positions, mask = torch.arange(length, device=tokens.device), causal
        else:
            positions = @POSITIONS@
            mask = @MASK@
        x = self.wte(tokens) + self.wpe(positions)
        for block in self.blocks:
            x = block(x, mask)
        return @OUT@
"""
GPT2_PARTS = {
    "block_norm": "functools.partial(norm, eps=config.norm_eps)",
    "activation": '"gelu_tanh"',
    "tie": "self.lm_head.weight = self.wte.weight",
    "causal": "torch.ones(length, length, dtype=torch.bool, device=tokens.device).tril()",
    "positions": "(padding_mask.long().cumsum(-1) - 1).clamp(min=0)",
    "mask": "causal & padding_mask[:, None, None, :]",
    "out": "self.lm_head(self.ln_f(x))",
}


def gpt2(**changes):
    return _fill(_GPT2, **(GPT2_PARTS | changes))


# --- Exercise 3 ----------------------------------------------------------------------------

_LOSS = """
def causal_lm_loss(logits, labels, ignore_index=-100):
    vocab = logits.shape[-1]
    @BODY@
"""
LOSS_RIGHT = (
    "return F.cross_entropy(logits[:, :-1].reshape(-1, vocab), labels[:, 1:].reshape(-1), ignore_index=ignore_index)"
)


def loss(body=LOSS_RIGHT):
    return _fill(_LOSS, body=body)


# --- Exercise 4 ----------------------------------------------------------------------------

_GPT2_CONVERT = """
def gpt2_state_from_hf(hf_state, config):
    d = config.d_model
    src = @SRC@
    state = {"wte.weight": src["wte.weight"], "wpe.weight": src["wpe.weight"],
             "ln_f.weight": src["ln_f.weight"], "ln_f.bias": src["ln_f.bias"]}
    for i in range(config.n_layers):
        h, b = f"h.{i}.", f"blocks.{i}."
        for theirs, ours in (("ln_1", "norm1"), ("ln_2", "norm2")):
            state[f"{b}{ours}.weight"] = src[f"{h}{theirs}.weight"]
            state[f"{b}{ours}.bias"] = src[f"{h}{theirs}.bias"]
        qkv_weight, qkv_bias = src[f"{h}attn.c_attn.weight"], src[f"{h}attn.c_attn.bias"]
        for j, name in enumerate(@ORDER@):
            state[f"{b}attn.{name}.weight"] = qkv_weight[:, j * d:(j + 1) * d]@T@
            state[f"{b}attn.{name}.bias"] = qkv_bias[j * d:(j + 1) * d]
        for theirs, ours in (("attn.c_proj", "attn.out_proj"), ("mlp.c_fc", "ffn.fc1"), ("mlp.c_proj", "ffn.fc2")):
            state[f"{b}{ours}.weight"] = src[f"{h}{theirs}.weight"]@T@
            state[f"{b}{ours}.bias"] = src[f"{h}{theirs}.bias"]
    @HEAD@
    return state
"""
GPT2_CONVERT_PARTS = {
    "src": '{k.removeprefix("transformer."): v for k, v in hf_state.items()}',
    "order": '("q_proj", "k_proj", "v_proj")',
    "t": ".t()",
    "head": 'state["lm_head.weight"] = state["wte.weight"]',
}


def gpt2_convert(**changes):
    return _fill(_GPT2_CONVERT, **(GPT2_CONVERT_PARTS | changes))


# --- Exercise 5 ----------------------------------------------------------------------------

_ROTARY = """
class RotaryGQA(nn.Module):
    def __init__(self, d_model, num_heads, num_kv_heads, rope):
        super().__init__()
        self.num_heads, self.num_kv_heads = num_heads, num_kv_heads
        self.head_dim = d_model // num_heads
        self.rope = rope
        self.q_proj = nn.Linear(d_model, d_model, bias=@BIAS@)
        self.k_proj = nn.Linear(d_model, num_kv_heads * self.head_dim, bias=@BIAS@)
        self.v_proj = nn.Linear(d_model, num_kv_heads * self.head_dim, bias=@BIAS@)
        self.out_proj = nn.Linear(d_model, d_model, bias=@BIAS@)

    def forward(self, x, mask=None, token_positions=None, is_causal=False):
        batch, length, _ = x.shape
        if @IGNORE@token_positions is None:
            token_positions = torch.arange(length)
        positions = token_positions[:, None, :] if token_positions.dim() == 2 else token_positions

        def heads(t, n):
            return t.view(batch, length, n, self.head_dim).transpose(1, 2)

        @QK@
        v = @V@
        group = self.num_heads // self.num_kv_heads
        k, v = @REPEAT@
        out = @ATTEND@
        return self.out_proj(out.transpose(1, 2).reshape(batch, length, -1))
"""
ROTARY_PARTS = {
    "bias": "False",
    "ignore": "",
    "qk": (
        "q = self.rope(heads(self.q_proj(x), self.num_heads), positions)\n"
        "        k = self.rope(heads(self.k_proj(x), self.num_kv_heads), positions)"
    ),
    "v": "heads(self.v_proj(x), self.num_kv_heads)",
    "repeat": "k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)",
    "attend": "F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal)",
}


def rotary(**changes):
    return _fill(_ROTARY, **(ROTARY_PARTS | changes))


# --- Exercise 6 ----------------------------------------------------------------------------

_MODERN_BLOCK = """
class ModernBlock(nn.Module):
    def __init__(self, config, rope, *, attention=RotaryGQA, feed_forward=SwiGLU, norm=RMSNorm):
        super().__init__()
        self.norm1 = norm(config.d_model@EPS@)
        self.attn = attention(config.d_model, config.n_heads, config.n_kv_heads or config.n_heads, rope)
        self.norm2 = @NORM2@
        self.ffn = feed_forward(config.d_model, config.d_ff)

    def forward(self, x, mask=None, token_positions=None, is_causal=False):
        @BODY@
"""
MODERN_BLOCK_PARTS = {
    "eps": ", eps=config.norm_eps",
    "norm2": "norm(config.d_model@EPS@)",
    "body": (
        "x = x + self.attn(self.norm1(x), mask, token_positions, is_causal=is_causal)\n"
        "        return x + self.ffn(self.norm2(x))"
    ),
}


def modern_block(**changes):
    parts = MODERN_BLOCK_PARTS | changes
    return _fill(_fill(_MODERN_BLOCK, norm2=parts["norm2"]), **{k: v for k, v in parts.items() if k != "norm2"})


# --- Exercise 7 ----------------------------------------------------------------------------

_DECODER = """
class ModernDecoder(nn.Module):
    def __init__(self, config, *, block=ModernBlock, norm=RMSNorm, rope=RoPE):
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        shared = rope(config.d_model // config.n_heads, config.max_seq_len@BASE@)
        self.blocks = nn.ModuleList([block(config, shared) for _ in range(config.n_layers)])
        self.norm = norm(config.d_model, eps=config.norm_eps)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        @TIE@

    def forward(self, tokens, padding_mask=None):
        length = tokens.shape[1]
        causal = torch.ones(length, length, dtype=torch.bool, device=tokens.device).tril()
        if padding_mask is None:
            positions, mask, is_causal = torch.arange(length, device=tokens.device), @PLAIN_MASK@
        else:
            positions = @POSITIONS@
            mask, is_causal = @MASK@, @PADDED_IS_CAUSAL@
        x = self.tok_emb(tokens)
        for block in self.blocks:
            x = block(x, mask, positions, is_causal=is_causal)
        return @OUT@
"""
DECODER_PARTS = {
    "base": ", config.rope_base",
    "tie": "pass",
    "mask": "causal & padding_mask[:, None, None, :]",
    "plain_mask": "None, True",
    "padded_is_causal": "False",
    "positions": "(padding_mask.long().cumsum(-1) - 1).clamp(min=0)",
    "out": "self.lm_head(self.norm(x))",
}


def decoder(**changes):
    return _fill(_DECODER, **(DECODER_PARTS | changes))


# --- Exercise 8 ----------------------------------------------------------------------------

_LLAMA_CONVERT = """
def llama_state_from_hf(hf_state, config):
    head_dim = config.d_model // config.n_heads
    order = @ORDER@

    def interleaved(weight, n_heads):
        @PERMUTE@

    state = {"tok_emb.weight": hf_state["model.embed_tokens.weight"], "norm.weight": hf_state["model.norm.weight"],
             "lm_head.weight": hf_state["lm_head.weight"]}
    for i in range(config.n_layers):
        h, b = f"model.layers.{i}.", f"blocks.{i}."
        state[f"{b}attn.q_proj.weight"] = interleaved(hf_state[f"{h}self_attn.q_proj.weight"], config.n_heads)
        state[f"{b}attn.k_proj.weight"] = interleaved(hf_state[f"{h}self_attn.k_proj.weight"],
                                                      config.n_kv_heads or config.n_heads)
        state[f"{b}attn.v_proj.weight"] = @V@
        state[f"{b}attn.out_proj.weight"] = hf_state[f"{h}self_attn.o_proj.weight"]
        for theirs, ours in (("gate_proj", "w1"), ("up_proj", "w3"), ("down_proj", "w2")):
            state[f"{b}ffn.{ours}.weight"] = hf_state[f"{h}mlp.{theirs}.weight"]
        state[f"{b}norm1.weight"] = hf_state[f"{h}input_layernorm.weight"]
        state[f"{b}norm2.weight"] = hf_state[f"{h}post_attention_layernorm.weight"]
    return state
"""
LLAMA_PARTS = {
    "order": "torch.argsort(halves_permutation(head_dim))",
    "permute": "return weight.view(n_heads, head_dim, -1)[:, order].reshape(weight.shape)",
    "v": 'hf_state[f"{h}self_attn.v_proj.weight"]',
}


def llama_convert(**changes):
    return _fill(_LLAMA_CONVERT, **(LLAMA_PARTS | changes))


# --- Exercise 9 ----------------------------------------------------------------------------

_FUSED = """
def fuse_qkv(state):
    fused = {k: v for k, v in state.items() if not k.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight",
                                                                  "q_proj.bias", "k_proj.bias", "v_proj.bias"))}
    for key in state:
        for kind in ("weight", "bias"):
            if key.endswith(f"q_proj.{kind}"):
                prefix = key[:-len(f"q_proj.{kind}")]
                q, k, v = (state[f"{prefix}{n}_proj.{kind}"] for n in "qkv")
                fused[f"{prefix}qkv_proj.{kind}"] = @CAT@
    return fused


class FusedRotaryGQA(nn.Module):
    def __init__(self, d_model, num_heads, num_kv_heads, rope):
        super().__init__()
        self.num_heads, self.num_kv_heads = num_heads, num_kv_heads
        self.head_dim = d_model // num_heads
        self.rope = rope
        self.qkv_proj = nn.Linear(d_model, @ROWS@, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x, mask=None, token_positions=None, is_causal=False):
        batch, length, _ = x.shape
        if token_positions is None:
            token_positions = torch.arange(length)
        positions = token_positions[:, None, :] if token_positions.dim() == 2 else token_positions
        hd, h, g = self.head_dim, self.num_heads, self.num_kv_heads
        @QKV@

        def heads(t, n):
            return t.reshape(batch, length, n, hd).transpose(1, 2)

        q, k, v = self.rope(heads(q, h), positions), self.rope(heads(k, g), positions), heads(v, g)
        k, v = k.repeat_interleave(h // g, dim=1), v.repeat_interleave(h // g, dim=1)
        out = @ATTEND@
        return self.out_proj(out.transpose(1, 2).reshape(batch, length, -1))
"""
FUSED_PARTS = {
    "cat": "torch.cat([q, k, v], dim=0)",
    "rows": "(num_heads + 2 * num_kv_heads) * self.head_dim",
    "qkv": "q, k, v = self.qkv_proj(x).split([h * hd, g * hd, g * hd], dim=-1)",
    "attend": "F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal)",
}


def fused(**changes):
    return _fill(_FUSED, **(FUSED_PARTS | changes))


def fuse_only(fuse_qkv: str) -> str:
    """The fused template with another ``fuse_qkv``."""
    return fuse_qkv + "\n\nclass FusedRotaryGQA" + fused().split("\n\nclass FusedRotaryGQA", 1)[1]


# "The result is a new dict" (issue 34): three ways of getting the values right while changing the caller's dict.
_FUSE_IN_PLACE = """
def fuse_qkv(state):
    trios = [(key[:-len(f"q_proj.{kind}")], kind) for key in state for kind in ("weight", "bias")
             if key.endswith(f"q_proj.{kind}")]
    for prefix, kind in trios:
        parts = [state.pop(f"{prefix}{n}_proj.{kind}") for n in "qkv"]
        state[f"{prefix}qkv_proj.{kind}"] = torch.cat(parts, dim=0)
    return state
"""
# "Leave hf_state as it is": the conversions of Exercises 4 and 8 changing the caller's checkpoint.
_STRIP_IN_PLACE = """
def _strip(hf_state):
    for key in list(hf_state):
        hf_state[key.removeprefix("transformer.")] = hf_state.pop(key)
    return hf_state
"""
# "Pass is_causal on" to SDPA: a causal mask tensor instead (the same numbers, no flash kernel), by any name.
_SDPA_ALIAS = (
    "attend = F.scaled_dot_product_attention\n        out = attend(q, k, v, attn_mask=torch.full((length, length), "
    "float('-inf')).triu(1) if is_causal else mask)"
)
_FUSE_POPS = """
def fuse_qkv(state):
    fused = {}
    for key in list(state):
        for kind in ("weight", "bias"):
            if key.endswith(f"q_proj.{kind}"):
                prefix = key[:-len(f"q_proj.{kind}")]
                parts = [state.pop(f"{prefix}{n}_proj.{kind}") for n in "qkv"]
                fused[f"{prefix}qkv_proj.{kind}"] = torch.cat(parts, dim=0)
    fused.update(state)
    return fused
"""


RIGHT = {
    "gpt2_num_parameters": count(),
    "gpt2_model": gpt2(),
    "causal_lm_loss": loss(),
    "gpt2_state_from_hf": gpt2_convert(),
    "rotary_gqa": rotary(),
    "modern_block": modern_block(),
    "modern_decoder": decoder(),
    "llama_state_from_hf": llama_convert(),
    "fused_rotary_gqa": fused(),
}

WRONG = [
    # Exercise 1
    Wrong(
        "gpt2_num_parameters",
        "head counted separately (untied)",
        count(final="2 * d + config.vocab_size * d"),
        "the output head is counted separately",
    ),
    Wrong(
        "gpt2_num_parameters",
        "biases forgotten",
        count(block="2 * 2 * d + 4 * d * d + 2 * d * f"),
        "the biases of the attention projections and the MLP are missing",
    ),
    Wrong("gpt2_num_parameters", "final LayerNorm forgotten", count(final="0"), "the final LayerNorm ln_f"),
    Wrong(
        "gpt2_num_parameters",
        "position table forgotten",
        count(embeddings="config.vocab_size * d"),
        "the position table wpe",
    ),
    # "As a closed form: no model built" (issue 34): counting a model built here, the course's or Hugging Face's.
    Wrong(
        "gpt2_num_parameters",
        "counts the parameters of the notebook's GPT2",
        "\ndef gpt2_num_parameters(config):\n    return sum(p.numel() for p in GPT2(config).parameters())\n",
        "this exercise's rule is: as a closed form: no model built",
    ),
    Wrong(
        "gpt2_num_parameters",
        "builds GPT2 on the meta device (no memory, still a model)",
        "\ndef gpt2_num_parameters(config):\n    build = globals()['GP' + 'T2']\n    with torch.device('meta'):\n"
        "        model = build(config)\n    return sum(p.numel() for p in model.parameters())\n",
        "this exercise's rule is: as a closed form: no model built",
    ),
    Wrong(
        "gpt2_num_parameters",
        "asks Hugging Face's GPT2LMHeadModel",
        "\ndef gpt2_num_parameters(config):\n    import transformers\n"
        "    hf = transformers.GPT2Config(vocab_size=config.vocab_size, n_positions=config.n_positions, "
        "n_embd=config.d_model,\n                                 n_layer=config.n_layers, n_head=config.n_heads, "
        "n_inner=config.d_ff)\n    return transformers.GPT2LMHeadModel(hf).num_parameters()\n",
        "this exercise's rule is: as a closed form: no model built",
    ),
    # Exercise 2
    Wrong("gpt2_model", "head not tied", gpt2(tie="pass"), "head is not tied"),
    Wrong(
        "gpt2_model",
        "positions 0..seq-1 under left padding",
        gpt2(positions="torch.arange(length)"),
        "the positions of a padded batch are off by the padding",
    ),
    Wrong("gpt2_model", "no final LayerNorm", gpt2(out="self.lm_head(x)"), "the final LayerNorm is missing"),
    Wrong(
        "gpt2_model",
        "no causal mask",
        gpt2(causal="None", mask="padding_mask[:, None, None, :]"),
        "there is no causal mask",
    ),
    Wrong(
        "gpt2_model", "exact GELU instead of the tanh approximation", gpt2(activation='"gelu"'), "uses the exact GELU"
    ),
    Wrong(
        "gpt2_model",
        "norm_eps not passed to the blocks' LayerNorms",
        gpt2(block_norm="norm"),
        "config.norm_eps does not reach the LayerNorms",
    ),
    Wrong("gpt2_model", "padding mask ignored", gpt2(mask="causal"), "padding_mask does not reach the attention"),
    # Invisible on a CPU: the model run on the meta device.
    Wrong(
        "gpt2_model",
        "mask and positions made on the CPU",
        gpt2().replace(", device=tokens.device", ""),
        "a tensor your forward makes stays on the CPU",
    ),
    # Exercise 3
    Wrong(
        "causal_lm_loss",
        "no shift",
        loss("return F.cross_entropy(logits.reshape(-1, vocab), labels.reshape(-1), ignore_index=ignore_index)"),
        "the label shift is missing",
    ),
    Wrong(
        "causal_lm_loss",
        "shifted the wrong way",
        loss(
            "return F.cross_entropy(logits[:, 1:].reshape(-1, vocab), labels[:, :-1].reshape(-1), "
            "ignore_index=ignore_index)"
        ),
        "the shift goes the wrong way",
    ),
    Wrong(
        "causal_lm_loss",
        "mean over the ignored positions too",
        loss(
            "return F.cross_entropy(logits[:, :-1].reshape(-1, vocab), labels[:, 1:].reshape(-1), "
            "ignore_index=ignore_index, reduction='none').mean()"
        ),
        "the mean runs over the ignored positions",
    ),
    Wrong(
        "causal_lm_loss",
        "ignore_index not passed on",
        loss("return F.cross_entropy(logits[:, :-1].reshape(-1, vocab), labels[:, 1:].reshape(-1))"),
        "ignore_index is not used",
    ),
    # Exercise 4
    Wrong("gpt2_state_from_hf", "Conv1D weights not transposed", gpt2_convert(t=""), "Conv1D stores its weight"),
    Wrong(
        "gpt2_state_from_hf",
        "q, k, v split in the wrong order",
        gpt2_convert(order='("k_proj", "q_proj", "v_proj")'),
        "c_attn's output is q | k | v",
    ),
    Wrong(
        "gpt2_state_from_hf",
        "prefix expected (fails on the hub layout)",
        gpt2_convert(src='{k[len("transformer."):]: v for k, v in hf_state.items() if k.startswith("transformer.")}'),
        "on the hub's layout the keys have no 'transformer.' prefix",
    ),
    Wrong("gpt2_state_from_hf", "lm_head.weight missing", gpt2_convert(head="pass"), "has no lm_head.weight"),
    Wrong(
        "gpt2_state_from_hf",
        "every key copied, buffers included",
        gpt2_convert(
            head='state["lm_head.weight"] = state["wte.weight"]\n'
            '    state.update({k: v for k, v in src.items() if k.endswith("attn.bias")})'
        ),
        "are buffers",
    ),
    Wrong(
        "gpt2_state_from_hf",
        "lm_head.weight a copy of wte.weight, not the same tensor",
        gpt2_convert(head='state["lm_head.weight"] = state["wte.weight"].clone()'),
        "is not the same tensor as",
    ),
    Wrong(
        "gpt2_state_from_hf",
        "the caller's hf_state stripped of its prefix in place",
        _STRIP_IN_PLACE + gpt2_convert(src="_strip(hf_state)"),
        "changed the caller's dict",
    ),
    # Exercise 5
    Wrong(
        "rotary_gqa",
        "values rotated too",
        rotary(v="self.rope(heads(self.v_proj(x), self.num_kv_heads), positions)"),
        "the values are rotated too",
    ),
    Wrong(
        "rotary_gqa",
        "kv heads repeated 0 1 0 1",
        rotary(repeat="k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)"),
        "repeated in the wrong order",
    ),
    Wrong("rotary_gqa", "token_positions ignored", rotary(ignore="True or "), "token_positions is ignored"),
    Wrong(
        "rotary_gqa",
        "RoPE over the whole d_model",
        rotary(
            qk="q = heads(self.rope(self.q_proj(x), token_positions), self.num_heads)\n"
            "        k = heads(self.rope(self.k_proj(x), token_positions), self.num_kv_heads)"
        ),
        "RoPE is applied across the whole d_model",
    ),
    Wrong("rotary_gqa", "projections with biases", rotary(bias="True"), "have no bias"),
    Wrong(
        "rotary_gqa",
        "is_causal accepted but not passed on",
        rotary(attend="F.scaled_dot_product_attention(q, k, v, attn_mask=mask)"),
        "is_causal=True is ignored",
    ),
    Wrong(
        "rotary_gqa",
        "is_causal turned into a causal mask tensor",
        rotary(
            attend="F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(length, length, dtype=torch.bool)"
            ".tril() if is_causal else mask)"
        ),
        "pass is_causal on and build no causal mask tensor",
    ),
    Wrong(
        "rotary_gqa",
        "is_causal turned into a float mask, SDPA under another name",
        rotary(attend="None\n        " + _SDPA_ALIAS),
        "pass is_causal on and build no causal mask tensor",
    ),
    Wrong(
        "rotary_gqa",
        "[batch, seq] positions of row 0 for every row",
        rotary().replace("token_positions[:, None, :] if", "token_positions[0] if"),
        "every row is rotated by the positions of row 0",
    ),
    # Exercise 6
    Wrong(
        "modern_block",
        "post-norm where pre-norm is required",
        modern_block(
            body="x = self.norm1(x + self.attn(x, mask, token_positions))\n        return self.norm2(x + self.ffn(x))"
        ),
        "this is the post-norm order",
    ),
    Wrong("modern_block", "one norm shared by both sublayers", modern_block(norm2="self.norm1"), "one norm is shared"),
    Wrong(
        "modern_block",
        "residual missing around the attention",
        modern_block(
            body="x = self.attn(self.norm1(x), mask, token_positions)\n        return x + self.ffn(self.norm2(x))"
        ),
        "the residual connection around the attention is missing",
    ),
    Wrong(
        "modern_block",
        "token_positions not passed on",
        modern_block(body="x = x + self.attn(self.norm1(x), mask)\n        return x + self.ffn(self.norm2(x))"),
        "token_positions does not reach the attention",
    ),
    Wrong("modern_block", "norm_eps not passed", modern_block(eps=""), "config.norm_eps does not reach the norms"),
    Wrong(
        "modern_block",
        "is_causal not passed on",
        modern_block(
            body="x = x + self.attn(self.norm1(x), mask, token_positions)\n        return x + self.ffn(self.norm2(x))"
        ),
        "is_causal does not reach the attention",
    ),
    # Exercise 7
    Wrong(
        "modern_decoder",
        "head tied to the embedding",
        decoder(tie="self.lm_head.weight = self.tok_emb.weight"),
        "head is tied",
    ),
    Wrong(
        "modern_decoder", "padding mask ignored", decoder(mask="causal"), "padding_mask does not reach the attention"
    ),
    Wrong("modern_decoder", "no final norm", decoder(out="self.lm_head(x)"), "the final norm is missing"),
    # Invisible in the logits: what the recording blocks are given.
    Wrong(
        "modern_decoder",
        "the causal mask as a tensor without padding (no flash attention)",
        decoder(plain_mask="causal, False"),
        "the mask is purely causal, so give no mask tensor",
    ),
    Wrong(
        "modern_decoder", "is_causal=True with the padded mask too", decoder(padded_is_causal="True"), "is_causal=True"
    ),
    Wrong("modern_decoder", "rope_base not passed to RoPE", decoder(base=""), "config.rope_base does not reach RoPE"),
    # Invisible in the logits (RoPE depends on position differences only); the recording blocks see them.
    Wrong(
        "modern_decoder",
        "one RoPE per block",
        decoder().replace(
            "block(config, shared) for _ in",
            "block(config, rope(config.d_model // config.n_heads, config.max_seq_len, config.rope_base)) for _ in",
        ),
        "make ONE, rope(head_dim, max_seq_len, rope_base)",
    ),
    Wrong(
        "modern_decoder",
        "positions counted from 1",
        decoder(positions="padding_mask.long().cumsum(-1)"),
        "the first real token of each row is position 0",
    ),
    Wrong(
        "modern_decoder",
        "norm_eps not passed to the final norm",
        decoder().replace("self.norm = norm(config.d_model, eps=config.norm_eps)", "self.norm = norm(config.d_model)"),
        "config.norm_eps does not reach the final norm",
    ),
    Wrong(
        "modern_decoder",
        "mask and positions made on the CPU",
        decoder().replace(", device=tokens.device", ""),
        "a tensor your forward makes stays on the CPU",
    ),
    # Exercise 8
    Wrong("llama_state_from_hf", "q/k rows not permuted", llama_convert(permute="return weight"), "are not permuted"),
    Wrong(
        "llama_state_from_hf",
        "the permutation instead of its inverse",
        llama_convert(order="halves_permutation(head_dim)"),
        "permuted by halves_permutation itself",
    ),
    Wrong(
        "llama_state_from_hf",
        "v rows permuted too",
        llama_convert(v='interleaved(hf_state[f"{h}self_attn.v_proj.weight"], config.n_kv_heads or config.n_heads)'),
        "v_proj is permuted too",
    ),
    Wrong(
        "llama_state_from_hf",
        "rows permuted across the whole projection",
        llama_convert(permute="return weight[torch.argsort(halves_permutation(weight.shape[0]))]"),
        "permuted across the whole projection",
    ),
    Wrong(
        "llama_state_from_hf",
        "the permuted q written back into the caller's hf_state",
        llama_convert().replace(
            'state[f"{b}attn.q_proj.weight"] = interleaved(hf_state[f"{h}self_attn.q_proj.weight"], config.n_heads)',
            'hf_state[f"{h}self_attn.q_proj.weight"] = interleaved(hf_state[f"{h}self_attn.q_proj.weight"], '
            'config.n_heads)\n        state[f"{b}attn.q_proj.weight"] = hf_state[f"{h}self_attn.q_proj.weight"]',
        ),
        "changed the caller's dict: it replaced",
    ),
    Wrong(
        "llama_state_from_hf",
        "q/k rows permuted in place in the caller's tensors",
        llama_convert(
            permute="weight.copy_(weight.view(n_heads, head_dim, -1)[:, order].reshape(weight.shape))\n"
            "        return weight"
        ),
        "modified the caller's tensors",
    ),
    # The attributes the spec names (notebook 13 reads them), and the rope it was given.
    Wrong(
        "rotary_gqa",
        "head counts kept under other names",
        rotary().replace("self.num_heads", "self.h").replace("self.num_kv_heads", "self.g"),
        "store self.num_heads, self.num_kv_heads and self.head_dim",
    ),
    Wrong(
        "rotary_gqa",
        "a rope of its own instead of the one given",
        rotary().replace("        self.rope = rope\n", "        self.rope = type(rope)(self.head_dim, 64)\n"),
        "is not the rope it was given",
    ),
    # Exercise 9
    Wrong(
        "fused_rotary_gqa",
        "fuse_qkv edits the caller's dict and returns it",
        fuse_only(_FUSE_IN_PLACE),
        "returned the dict it was given",
    ),
    Wrong(
        "fused_rotary_gqa",
        "fuse_qkv pops q/k/v out of the caller's dict",
        fuse_only(_FUSE_POPS),
        "changed the caller's dict: it removed",
    ),
    Wrong(
        "fused_rotary_gqa",
        "fuse_qkv reuses the q tensor for the fused one (.data)",
        fused().replace(
            'fused[f"{prefix}qkv_proj.{kind}"] = torch.cat([q, k, v], dim=0)',
            "q.data = torch.cat([q, k, v], dim=0)  # no new tensor\n"
            '                fused[f"{prefix}qkv_proj.{kind}"] = q',
        ),
        "modified the caller's tensors",
    ),
    Wrong(
        "fused_rotary_gqa",
        "is_causal accepted but not passed on",
        fused(attend="F.scaled_dot_product_attention(q, k, v, attn_mask=mask)"),
        "is_causal=True is ignored",
    ),
    Wrong(
        "fused_rotary_gqa",
        "fused in the order k, q, v",
        fused(cat="torch.cat([k, q, v], dim=0)"),
        "stacks the projections in another order",
    ),
    Wrong(
        "fused_rotary_gqa",
        "fused weight transposed (Conv1D layout)",
        fused(cat="torch.cat([q.t(), k.t(), v.t()], dim=1) if q.dim() == 2 else torch.cat([q, k, v])"),
        "is transposed",
    ),
    Wrong(
        "fused_rotary_gqa",
        "joined along the wrong dim",
        fused(cat="torch.cat([q, k, v], dim=-1)"),
        "joined along dim 1",
    ),
    Wrong(
        "fused_rotary_gqa",
        "split sizes assume num_kv_heads == num_heads",
        fused(qkv="q, k, v = self.qkv_proj(x).chunk(3, dim=-1)"),
        "not three equal parts",
    ),
    Wrong(
        "fused_rotary_gqa",
        "qkv_proj sized as if num_kv_heads == num_heads",
        fused(rows="3 * d_model", qkv="q, k, v = self.qkv_proj(x).chunk(3, dim=-1)"),
        "assumes num_kv_heads == num_heads",
    ),
    Wrong(
        "fused_rotary_gqa",
        "split in the order k, q, v",
        fused(qkv="k, q, v = self.qkv_proj(x).split([g * hd, h * hd, g * hd], dim=-1)"),
        "split off in the order k-q-v",
    ),
    Wrong(
        "fused_rotary_gqa",
        "split along the sequence dim",
        fused(qkv="q, k, v = self.qkv_proj(x).split([h * hd, g * hd, g * hd], dim=1)"),
        "along its last dim",
    ),
    Wrong(
        "fused_rotary_gqa",
        "three products with slices of the weight",
        fused(
            qkv="w = self.qkv_proj.weight\n"
            "        q, k, v = (F.linear(x, part) for part in w.split([h * hd, g * hd, g * hd], dim=0))"
        ),
        "not computed by one product",
    ),
    Wrong(
        "fused_rotary_gqa",
        "three products concatenated to the fused width, then split",
        fused(
            qkv="w = self.qkv_proj.weight\n        sizes = [h * hd, g * hd, g * hd]\n"
            "        q, k, v = torch.cat([x @ part.t() for part in w.split(sizes)], -1).split(sizes, dim=-1)"
        ),
        "no matrix product of that width ran",
    ),
    Wrong(
        "fused_rotary_gqa",
        "[batch, seq] positions of row 0 for every row",
        fused().replace("token_positions[:, None, :] if", "token_positions[0] if"),
        "every row is rotated by the positions of row 0",
    ),
    Wrong(
        "fused_rotary_gqa",
        "is_causal turned into a causal mask tensor",
        fused(
            attend="F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(length, length, dtype=torch.bool)"
            ".tril() if is_causal else mask)"
        ),
        "pass is_causal on and build no causal mask tensor",
    ),
]
