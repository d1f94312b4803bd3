"""Mistakes students make in notebook 08.

Each wrong version is the solution's answer cell with one mistake written in (``variant`` checks that the
replaced text is there), so the wrong versions differ from a right one only by the mistake; the few written out
in full say why.
"""

from wrong import Wrong, catalogue

NOTEBOOK = "08_decoder_models"
RIGHT, variant = catalogue(NOTEBOOK)

# The solution's lines that the wrong versions (and the helpers tests/test_rules.py uses) replace.
_GPT2_CAUSAL = "torch.ones(length, length, dtype=torch.bool, device=tokens.device).tril()"
_PADDED_POSITIONS = "(padding_mask.long().cumsum(-1) - 1).clamp(min=0)"
_HEAD = 'state["lm_head.weight"] = state["wte.weight"]  # tied'
_SRC = 'src = {k.removeprefix("transformer."): v for k, v in hf_state.items()}'
_ATTEND = "attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal)"
_RETURN = "return self.out_proj(attended.transpose(1, 2).reshape(batch, length, -1))"
_PASS_CAUSAL = "attn_mask=mask, is_causal=is_causal)"
_CAUSAL_TENSOR = "attn_mask=torch.ones(length, length, dtype=torch.bool).tril() if is_causal else mask)"
_ROW_0 = ("token_positions = token_positions[:, None, :]", "token_positions = token_positions[0]")
_PROJECTIONS = (
    "self.q_proj = nn.Linear(d_model, d_model, bias=False)\n"
    "        self.k_proj = nn.Linear(d_model, num_kv_heads * self.head_dim, bias=False)\n"
    "        self.v_proj = nn.Linear(d_model, num_kv_heads * self.head_dim, bias=False)\n"
    "        self.out_proj = nn.Linear(d_model, d_model, bias=False)"
)
_BLOCK_BODY = (
    "x = x + self.attn(self.norm1(x), mask, token_positions, is_causal=is_causal)\n"
    "        return x + self.ffn(self.norm2(x))"
)
_PERMUTE = "return weight.view(n_heads, head_dim, -1)[:, order].reshape(weight.shape)"
_CAT = 'torch.cat([state[f"{prefix}{n}_proj.{kind}"] for n in "qkv"], dim=0)'
_QKV = "q, k, v = self.qkv_proj(x).split([q_size, kv_size, kv_size], dim=-1)  # the one product, then its columns"
_CHUNK = "q, k, v = self.qkv_proj(x).chunk(3, dim=-1)"


# The solution with named parts replaced, for the right answers in other styles of tests/test_rules.py.
def gpt2(causal=_GPT2_CAUSAL):
    """GPT2 with the causal mask made by ``causal``."""
    return variant("gpt2_model", (_GPT2_CAUSAL, causal))


def gpt2_convert(head=_HEAD):
    """gpt2_state_from_hf with ``head`` in place of the line that sets lm_head.weight."""
    return variant("gpt2_state_from_hf", (_HEAD, head))


def rotary(attend=None):
    """RotaryGQA with ``out = attend`` as its attention (``attend`` may run over lines, ending with ``out = ...``)."""
    if attend is None:
        return RIGHT["rotary_gqa"]
    return variant("rotary_gqa", (_ATTEND, f"out = {attend}"), (_RETURN, _RETURN.replace("(attended.", "(out.")))


def decoder(*replacements):
    """ModernDecoder with the ``(old, new)`` replacements made."""
    return variant("modern_decoder", *replacements)


def llama_convert(*replacements):
    """llama_state_from_hf with the ``(old, new)`` replacements made."""
    return variant("llama_state_from_hf", *replacements)


def fused(qkv=None):
    """fuse_qkv and FusedRotaryGQA; ``qkv`` makes q, k and v in forward, with hd, h, g the head size and counts."""
    if qkv is None:
        return RIGHT["fused_rotary_gqa"]
    return variant(
        "fused_rotary_gqa", (_QKV, f"hd, h, g = self.head_dim, self.num_heads, self.num_kv_heads\n        {qkv}")
    )


def fuse_only(fuse_qkv: str) -> str:
    """The solution's cell with another ``fuse_qkv``."""
    return fuse_qkv + "\n\nclass FusedRotaryGQA" + RIGHT["fused_rotary_gqa"].split("\n\nclass FusedRotaryGQA", 1)[1]


# "The result is a new dict" (issue 34): ways of getting the values right while changing the caller's dict.
_FUSE_IN_PLACE = """
def fuse_qkv(state):
    trios = [(key[:-len(f"q_proj.{kind}")], kind) for key in state for kind in ("weight", "bias")
             if key.endswith(f"q_proj.{kind}")]
    for prefix, kind in trios:
        parts = [state.pop(f"{prefix}{n}_proj.{kind}") for n in "qkv"]
        state[f"{prefix}qkv_proj.{kind}"] = torch.cat(parts, dim=0)
    return state
"""
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
# "Leave hf_state as it is": the conversion of Exercise 4 changing the caller's checkpoint.
_STRIP_IN_PLACE = """def _strip(hf_state):
    for key in list(hf_state):
        hf_state[key.removeprefix("transformer.")] = hf_state.pop(key)
    return hf_state


"""
# "Pass is_causal on" to SDPA: a causal mask tensor instead (the same numbers, no flash kernel), by any name.
_SDPA_ALIAS = (
    "attend = F.scaled_dot_product_attention\n        attended = attend(q, k, v, attn_mask=torch.full((length, length), "
    "float('-inf')).triu(1) if is_causal else mask)"
)

WRONG = [
    # Exercise 1
    Wrong(
        "gpt2_num_parameters",
        "head counted separately (untied)",
        variant("gpt2_num_parameters", ("+ 2 * d  # + ln_f", "+ 2 * d + config.vocab_size * d  # + ln_f")),
        "the output head is counted separately",
    ),
    Wrong(
        "gpt2_num_parameters",
        "biases forgotten",
        variant(
            "gpt2_num_parameters",
            ("attention = 4 * (d * d + d)", "attention = 4 * d * d"),
            ("mlp = (d * f + f) + (f * d + d)", "mlp = 2 * d * f"),
        ),
        "the biases of the attention projections and the MLP are missing",
    ),
    Wrong(
        "gpt2_num_parameters",
        "final LayerNorm forgotten",
        variant("gpt2_num_parameters", ("+ 2 * d  # + ln_f", "+ 0  # + ln_f")),
        "the final LayerNorm ln_f",
    ),
    Wrong(
        "gpt2_num_parameters",
        "position table forgotten",
        variant("gpt2_num_parameters", ("config.vocab_size * d + config.n_positions * d", "config.vocab_size * d")),
        "the position table wpe",
    ),
    # "As a closed form: no model built" (issue 34): counting a model built here, the course's or Hugging Face's.
    # Full code, not edits: each counts a built model instead of working it out (another algorithm).
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
    Wrong(
        "gpt2_model",
        "head not tied",
        variant("gpt2_model", ("        self.lm_head.weight = self.wte.weight  # tied: one matrix, used twice\n", "")),
        "head is not tied",
    ),
    Wrong(
        "gpt2_model",
        "positions 0..seq-1 under left padding",
        variant("gpt2_model", (_PADDED_POSITIONS, "torch.arange(length)")),
        "the positions of a padded batch are off by the padding",
    ),
    Wrong(
        "gpt2_model",
        "no final LayerNorm",
        variant("gpt2_model", ("return self.lm_head(self.ln_f(x))", "return self.lm_head(x)")),
        "the final LayerNorm is missing",
    ),
    Wrong(
        "gpt2_model",
        "no causal mask",
        variant(
            "gpt2_model",
            (_GPT2_CAUSAL, "None"),
            ("mask = causal & padding_mask[:, None, None, :]", "mask = padding_mask[:, None, None, :]"),
        ),
        "there is no causal mask",
    ),
    Wrong(
        "gpt2_model",
        "exact GELU instead of the tanh approximation",
        variant("gpt2_model", ('"gelu_tanh", norm=block_norm', '"gelu", norm=block_norm')),
        "uses the exact GELU",
    ),
    Wrong(
        "gpt2_model",
        "norm_eps not passed to the blocks' LayerNorms",
        variant("gpt2_model", ("block_norm = functools.partial(norm, eps=config.norm_eps)", "block_norm = norm")),
        "config.norm_eps does not reach the LayerNorms",
    ),
    Wrong(
        "gpt2_model",
        "padding mask ignored",
        variant("gpt2_model", ("mask = causal & padding_mask[:, None, None, :]", "mask = causal")),
        "padding_mask does not reach the attention",
    ),
    # Invisible on a CPU: the model run on the meta device.
    Wrong(
        "gpt2_model",
        "mask and positions made on the CPU",
        variant(
            "gpt2_model",
            ("dtype=torch.bool, device=tokens.device)", "dtype=torch.bool)"),
            ("torch.arange(length, device=tokens.device)", "torch.arange(length)"),
        ),
        "a tensor your forward makes stays on the CPU",
    ),
    # Exercise 3
    Wrong(
        "causal_lm_loss",
        "no shift",
        variant("causal_lm_loss", ("logits[:, :-1]", "logits"), ("labels[:, 1:]", "labels")),
        "the label shift is missing",
    ),
    Wrong(
        "causal_lm_loss",
        "shifted the wrong way",
        variant("causal_lm_loss", ("logits[:, :-1]", "logits[:, 1:]"), ("labels[:, 1:]", "labels[:, :-1]")),
        "the shift goes the wrong way",
    ),
    Wrong(
        "causal_lm_loss",
        "mean over the ignored positions too",
        variant(
            "causal_lm_loss", ("ignore_index=ignore_index)", "ignore_index=ignore_index, reduction='none').mean()")
        ),
        "the mean runs over the ignored positions",
    ),
    Wrong(
        "causal_lm_loss",
        "ignore_index not passed on",
        variant("causal_lm_loss", (", ignore_index=ignore_index)", ")")),
        "ignore_index is not used",
    ),
    # Exercise 4
    Wrong(
        "gpt2_state_from_hf",
        "Conv1D weights not transposed",
        variant(
            "gpt2_state_from_hf",
            ("(j + 1) * d].t().contiguous()", "(j + 1) * d].contiguous()"),
            ('.weight"].t().contiguous()', '.weight"].contiguous()'),
        ),
        "Conv1D stores its weight",
    ),
    Wrong(
        "gpt2_state_from_hf",
        "q, k, v split in the wrong order",
        variant("gpt2_state_from_hf", ('("q_proj", "k_proj", "v_proj")', '("k_proj", "q_proj", "v_proj")')),
        "c_attn's output is q | k | v",
    ),
    Wrong(
        "gpt2_state_from_hf",
        "prefix expected (fails on the hub layout)",
        variant(
            "gpt2_state_from_hf",
            (_SRC, 'src = {k[len("transformer."):]: v for k, v in hf_state.items() if k.startswith("transformer.")}'),
        ),
        "on the hub's layout the keys have no 'transformer.' prefix",
    ),
    Wrong(
        "gpt2_state_from_hf",
        "lm_head.weight missing",
        variant("gpt2_state_from_hf", (f"    {_HEAD}\n", "")),
        "has no lm_head.weight",
    ),
    Wrong(
        "gpt2_state_from_hf",
        "every key copied, buffers included",
        variant(
            "gpt2_state_from_hf",
            (_HEAD, _HEAD + '\n    state.update({k: v for k, v in src.items() if k.endswith("attn.bias")})'),
        ),
        "are buffers",
    ),
    Wrong(
        "gpt2_state_from_hf",
        "lm_head.weight a copy of wte.weight, not the same tensor",
        variant("gpt2_state_from_hf", (_HEAD, 'state["lm_head.weight"] = state["wte.weight"].clone()')),
        "is not the same tensor as",
    ),
    Wrong(
        "gpt2_state_from_hf",
        "the caller's hf_state stripped of its prefix in place",
        variant(
            "gpt2_state_from_hf",
            ("def gpt2_state_from_hf(", _STRIP_IN_PLACE + "def gpt2_state_from_hf("),
            (_SRC, "src = _strip(hf_state)"),
        ),
        "changed the caller's dict",
    ),
    # Exercise 5
    Wrong(
        "rotary_gqa",
        "values rotated too",
        variant(
            "rotary_gqa",
            (
                "v = heads(self.v_proj(x), self.num_kv_heads)  # values are not rotated",
                "v = self.rope(heads(self.v_proj(x), self.num_kv_heads), token_positions)",
            ),
        ),
        "the values are rotated too",
    ),
    Wrong(
        "rotary_gqa",
        "kv heads repeated 0 1 0 1",
        variant(
            "rotary_gqa",
            (
                "k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)",
                "k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)",
            ),
        ),
        "repeated in the wrong order",
    ),
    Wrong(
        "rotary_gqa",
        "token_positions ignored",
        variant("rotary_gqa", ("if token_positions is None:", "if True or token_positions is None:")),
        "token_positions is ignored",
    ),
    Wrong(
        "rotary_gqa",
        "RoPE over the whole d_model",
        variant(
            "rotary_gqa",
            (
                "q = self.rope(heads(self.q_proj(x), self.num_heads), token_positions)\n"
                "        k = self.rope(heads(self.k_proj(x), self.num_kv_heads), token_positions)",
                "q = heads(self.rope(self.q_proj(x), token_positions), self.num_heads)\n"
                "        k = heads(self.rope(self.k_proj(x), token_positions), self.num_kv_heads)",
            ),
        ),
        "RoPE is applied across the whole d_model",
    ),
    Wrong(
        "rotary_gqa",
        "projections with biases",
        variant("rotary_gqa", (_PROJECTIONS, _PROJECTIONS.replace("bias=False", "bias=True"))),
        "have no bias",
    ),
    Wrong(
        "rotary_gqa",
        "is_causal accepted but not passed on",
        variant("rotary_gqa", (_PASS_CAUSAL, "attn_mask=mask)")),
        "is_causal=True is ignored",
    ),
    Wrong(
        "rotary_gqa",
        "is_causal turned into a causal mask tensor",
        variant("rotary_gqa", (_PASS_CAUSAL, _CAUSAL_TENSOR)),
        "pass is_causal on and build no causal mask tensor",
    ),
    Wrong(
        "rotary_gqa",
        "is_causal turned into a float mask, SDPA under another name",
        variant("rotary_gqa", (_ATTEND, _SDPA_ALIAS)),
        "pass is_causal on and build no causal mask tensor",
    ),
    Wrong(
        "rotary_gqa",
        "[batch, seq] positions of row 0 for every row",
        variant("rotary_gqa", _ROW_0),
        "every row is rotated by the positions of row 0",
    ),
    # Exercise 6
    Wrong(
        "modern_block",
        "post-norm where pre-norm is required",
        variant(
            "modern_block",
            (
                _BLOCK_BODY,
                "x = self.norm1(x + self.attn(x, mask, token_positions, is_causal=is_causal))\n"
                "        return self.norm2(x + self.ffn(x))",
            ),
        ),
        "this is the post-norm order",
    ),
    Wrong(
        "modern_block",
        "one norm shared by both sublayers",
        variant("modern_block", ("self.norm2 = norm(config.d_model, eps=config.norm_eps)", "self.norm2 = self.norm1")),
        "one norm is shared",
    ),
    Wrong(
        "modern_block",
        "residual missing around the attention",
        variant("modern_block", ("x = x + self.attn(", "x = self.attn(")),
        "the residual connection around the attention is missing",
    ),
    Wrong(
        "modern_block",
        "token_positions not passed on",
        variant("modern_block", ("mask, token_positions, is_causal=is_causal)", "mask, is_causal=is_causal)")),
        "token_positions does not reach the attention",
    ),
    Wrong(
        "modern_block",
        "norm_eps not passed",
        variant(
            "modern_block",
            ("self.norm1 = norm(config.d_model, eps=config.norm_eps)", "self.norm1 = norm(config.d_model)"),
            ("self.norm2 = norm(config.d_model, eps=config.norm_eps)", "self.norm2 = norm(config.d_model)"),
        ),
        "config.norm_eps does not reach the norms",
    ),
    Wrong(
        "modern_block",
        "is_causal not passed on",
        variant("modern_block", ("token_positions, is_causal=is_causal)", "token_positions)")),
        "is_causal does not reach the attention",
    ),
    # Exercise 7
    Wrong(
        "modern_decoder",
        "head tied to the embedding",
        variant(
            "modern_decoder",
            (
                "self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)",
                "self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)\n"
                "        self.lm_head.weight = self.tok_emb.weight",
            ),
        ),
        "head is tied",
    ),
    Wrong(
        "modern_decoder",
        "padding mask ignored",
        variant("modern_decoder", ("causal & padding_mask[:, None, None, :], False", "causal, False")),
        "padding_mask does not reach the attention",
    ),
    Wrong(
        "modern_decoder",
        "no final norm",
        variant("modern_decoder", ("return self.lm_head(self.norm(x))", "return self.lm_head(x)")),
        "the final norm is missing",
    ),
    # Invisible in the logits: what the recording blocks are given.
    Wrong(
        "modern_decoder",
        "the causal mask as a tensor without padding (no flash attention)",
        variant(
            "modern_decoder",
            (
                "torch.arange(length, device=tokens.device), None, True",
                "torch.arange(length, device=tokens.device), "
                "torch.ones(length, length, dtype=torch.bool, device=tokens.device).tril(), False",
            ),
        ),
        "the mask is purely causal, so give no mask tensor",
    ),
    Wrong(
        "modern_decoder",
        "is_causal=True with the padded mask too",
        variant("modern_decoder", ("padding_mask[:, None, None, :], False", "padding_mask[:, None, None, :], True")),
        "is_causal=True",
    ),
    Wrong(
        "modern_decoder",
        "rope_base not passed to RoPE",
        variant("modern_decoder", ("config.max_seq_len, config.rope_base)", "config.max_seq_len)")),
        "config.rope_base does not reach RoPE",
    ),
    # Invisible in the logits (RoPE depends on position differences only); the recording blocks see them.
    Wrong(
        "modern_decoder",
        "one RoPE per block",
        variant(
            "modern_decoder",
            (
                "block(config, shared_rope) for _ in",
                "block(config, rope(config.d_model // config.n_heads, config.max_seq_len, config.rope_base)) for _ in",
            ),
        ),
        "make ONE, rope(head_dim, max_seq_len, rope_base)",
    ),
    Wrong(
        "modern_decoder",
        "positions counted from 1",
        variant("modern_decoder", (_PADDED_POSITIONS, "padding_mask.long().cumsum(-1)")),
        "the first real token of each row is position 0",
    ),
    Wrong(
        "modern_decoder",
        "norm_eps not passed to the final norm",
        variant(
            "modern_decoder",
            ("self.norm = norm(config.d_model, eps=config.norm_eps)", "self.norm = norm(config.d_model)"),
        ),
        "config.norm_eps does not reach the final norm",
    ),
    Wrong(
        "modern_decoder",
        "mask and positions made on the CPU",
        variant(
            "modern_decoder",
            ("torch.arange(length, device=tokens.device)", "torch.arange(length)"),
            ("dtype=torch.bool, device=tokens.device)", "dtype=torch.bool)"),
        ),
        "a tensor your forward makes stays on the CPU",
    ),
    # Exercise 8
    Wrong(
        "llama_state_from_hf",
        "q/k rows not permuted",
        variant("llama_state_from_hf", (_PERMUTE, "return weight")),
        "are not permuted",
    ),
    Wrong(
        "llama_state_from_hf",
        "the permutation instead of its inverse",
        variant(
            "llama_state_from_hf",
            ("order = torch.argsort(halves_permutation(head_dim))", "order = halves_permutation(head_dim)"),
        ),
        "permuted by halves_permutation itself",
    ),
    Wrong(
        "llama_state_from_hf",
        "v rows permuted too",
        variant(
            "llama_state_from_hf",
            (
                '= hf_state[f"{h}self_attn.v_proj.weight"]',
                '= interleaved(hf_state[f"{h}self_attn.v_proj.weight"], config.n_kv_heads or config.n_heads)',
            ),
        ),
        "v_proj is permuted too",
    ),
    Wrong(
        "llama_state_from_hf",
        "rows permuted across the whole projection",
        variant("llama_state_from_hf", (_PERMUTE, "return weight[torch.argsort(halves_permutation(weight.shape[0]))]")),
        "permuted across the whole projection",
    ),
    Wrong(
        "llama_state_from_hf",
        "the permuted q written back into the caller's hf_state",
        variant(
            "llama_state_from_hf",
            (
                'state[f"{b}attn.q_proj.weight"] = interleaved(hf_state[f"{h}self_attn.q_proj.weight"], config.n_heads)',
                'hf_state[f"{h}self_attn.q_proj.weight"] = interleaved(hf_state[f"{h}self_attn.q_proj.weight"], '
                'config.n_heads)\n        state[f"{b}attn.q_proj.weight"] = hf_state[f"{h}self_attn.q_proj.weight"]',
            ),
        ),
        "changed the caller's dict: it replaced",
    ),
    Wrong(
        "llama_state_from_hf",
        "q/k rows permuted in place in the caller's tensors",
        variant(
            "llama_state_from_hf",
            (
                _PERMUTE,
                "weight.copy_(weight.view(n_heads, head_dim, -1)[:, order].reshape(weight.shape))\n"
                "        return weight",
            ),
        ),
        "modified the caller's tensors",
    ),
    # The attributes the spec names (notebook 13 reads them), and the rope it was given.
    Wrong(
        "rotary_gqa",
        "head counts kept under other names",
        # A rename everywhere: the solution's cell with every occurrence replaced (variant replaces once).
        RIGHT["rotary_gqa"].replace("self.num_heads", "self.h").replace("self.num_kv_heads", "self.g"),
        "store self.num_heads, self.num_kv_heads and self.head_dim",
    ),
    Wrong(
        "rotary_gqa",
        "a rope of its own instead of the one given",
        variant("rotary_gqa", ("        self.rope = rope\n", "        self.rope = type(rope)(self.head_dim, 64)\n")),
        "is not the rope it was given",
    ),
    # Exercise 9
    # fuse_qkv written otherwise (full code, not an edit): the caller's dict changed while the values come out right.
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
        variant(
            "fused_rotary_gqa",
            (
                f'fused[f"{{prefix}}qkv_proj.{{kind}}"] = {_CAT}',
                f'q = state[f"{{prefix}}q_proj.{{kind}}"]\n                q.data = {_CAT}  # no new tensor\n'
                '                fused[f"{prefix}qkv_proj.{kind}"] = q',
            ),
        ),
        "modified the caller's tensors",
    ),
    Wrong(
        "fused_rotary_gqa",
        "is_causal accepted but not passed on",
        variant("fused_rotary_gqa", (_PASS_CAUSAL, "attn_mask=mask)")),
        "is_causal=True is ignored",
    ),
    Wrong(
        "fused_rotary_gqa",
        "fused in the order k, q, v",
        variant("fused_rotary_gqa", ('for n in "qkv"], dim=0)', 'for n in "kqv"], dim=0)')),
        "stacks the projections in another order",
    ),
    Wrong(
        "fused_rotary_gqa",
        "fused weight transposed (Conv1D layout)",
        variant(
            "fused_rotary_gqa",
            (
                _CAT,
                'torch.cat([state[f"{prefix}{n}_proj.{kind}"].t() for n in "qkv"], dim=1) if kind == "weight" '
                f"else {_CAT}",
            ),
        ),
        "is transposed",
    ),
    Wrong(
        "fused_rotary_gqa",
        "joined along the wrong dim",
        variant("fused_rotary_gqa", ('for n in "qkv"], dim=0)', 'for n in "qkv"], dim=-1)')),
        "joined along dim 1",
    ),
    Wrong(
        "fused_rotary_gqa",
        "split sizes assume num_kv_heads == num_heads",
        variant("fused_rotary_gqa", (_QKV, _CHUNK)),
        "not three equal parts",
    ),
    Wrong(
        "fused_rotary_gqa",
        "qkv_proj sized as if num_kv_heads == num_heads",
        variant(
            "fused_rotary_gqa",
            ("nn.Linear(d_model, (num_heads + 2 * num_kv_heads) * self.head_dim,", "nn.Linear(d_model, 3 * d_model,"),
            (_QKV, _CHUNK),
        ),
        "assumes num_kv_heads == num_heads",
    ),
    Wrong(
        "fused_rotary_gqa",
        "split in the order k, q, v",
        variant(
            "fused_rotary_gqa",
            (
                "q, k, v = self.qkv_proj(x).split([q_size, kv_size, kv_size]",
                "k, q, v = self.qkv_proj(x).split([kv_size, q_size, kv_size]",
            ),
        ),
        "split off in the order k-q-v",
    ),
    Wrong(
        "fused_rotary_gqa",
        "split along the sequence dim",
        variant("fused_rotary_gqa", ("kv_size, kv_size], dim=-1)", "kv_size, kv_size], dim=1)")),
        "along its last dim",
    ),
    Wrong(
        "fused_rotary_gqa",
        "three products with slices of the weight",
        variant(
            "fused_rotary_gqa",
            (
                _QKV,
                "w = self.qkv_proj.weight\n"
                "        q, k, v = (F.linear(x, part) for part in w.split([q_size, kv_size, kv_size], dim=0))",
            ),
        ),
        "not computed by one product",
    ),
    Wrong(
        "fused_rotary_gqa",
        "three products concatenated to the fused width, then split",
        variant(
            "fused_rotary_gqa",
            (
                _QKV,
                "w = self.qkv_proj.weight\n        sizes = [q_size, kv_size, kv_size]\n"
                "        q, k, v = torch.cat([x @ part.t() for part in w.split(sizes)], -1).split(sizes, dim=-1)",
            ),
        ),
        "no matrix product of that width ran",
    ),
    Wrong(
        "fused_rotary_gqa",
        "[batch, seq] positions of row 0 for every row",
        variant("fused_rotary_gqa", _ROW_0),
        "every row is rotated by the positions of row 0",
    ),
    Wrong(
        "fused_rotary_gqa",
        "is_causal turned into a causal mask tensor",
        variant("fused_rotary_gqa", (_PASS_CAUSAL, _CAUSAL_TENSOR)),
        "pass is_causal on and build no causal mask tensor",
    ),
]
