"""An exercise's rules (``autograder.rules``): each half alone rejects the dodges, right code in any style passes
(and, for the behaviours the checks observe, right code written in another order).

The dodges of "do not call torch.softmax" (``wrong.edits.SOFTMAX_DODGES``) are rejected by the
static half (the answer cell, read on the grader's side) and by the runtime half (the student's code run
with the rule switched on) separately, so neither depends on the other; ``test_wrong_implementations`` runs
both together, as grading does, and ``test_sandbox`` / ``test_nbgrader_e2e`` run one dodge through the CLI
and nbgrader.
"""

from __future__ import annotations

import pytest
import torch
from notebooks import read, solution_path
from wrong import PRELUDE
from wrong.edits import (
    SOFTMAX_DODGES,
    TRAIN,
    decoder,
    ffn_fused,
    fuse_only,
    gqa,
    mha,
    nb08_decoder,
    nb08_fused,
    nb08_gpt2,
    nb08_gpt2_convert,
    nb08_llama_convert,
    nb08_rotary,
)

from autograder.exercises import find_exercise, rules_result, run_exercise
from autograder.impl import LocalImpl
from autograder.rules import Rule, enforced
from coursetools.notebook_vocabulary import grade_id

# Right answers in other styles than the solutions', per rule-bound exercise.
RIGHT_STYLES = {
    "softmax": [
        "def softmax(x, dim=-1):\n    e = (x - x.max(dim=dim, keepdim=True).values).exp()\n"
        "    return e / e.sum(dim=dim, keepdim=True)\n",
        'def softmax(x, dim=-1):\n    """A stable softmax: torch.softmax is not called."""\n    softmax_values = torch.exp('
        "x - torch.amax(x, dim=dim, keepdim=True))\n    print('softmax')\n"
        "    return torch.div(softmax_values, torch.sum(softmax_values, dim=dim, keepdim=True))\n",
    ],
    "relative_positions": [
        "def relative_positions(n):\n    rows, cols = (torch.arange(n).unsqueeze(d) for d in (1, 0))\n    return cols - rows\n",
        "def relative_positions(n):\n    p = torch.arange(n)\n    return torch.subtract(*torch.meshgrid(p, p, indexing='xy'))\n",
    ],
    "pairwise_sq_distances": [
        "def pairwise_sq_distances(a, b):\n    out = 0\n    for axis in range(1):  # a loop of fixed length is allowed\n"
        "        out = ((a.unsqueeze(1) - b.unsqueeze(0)) ** 2).sum(dim=-1)\n    return out\n",
    ],
    "one_hot": [
        "def one_hot(tokens, vocab_size):\n    out = torch.zeros(*tokens.shape, vocab_size)\n"
        "    return out.scatter_(-1, tokens.unsqueeze(-1), 1.0)\n",
        "def one_hot(tokens, vocab_size):\n    return torch.eq(tokens.unsqueeze(-1), torch.arange(vocab_size)).to(torch.float32)\n",
    ],
    "ffn_activations": [
        "def relu(x):\n    return torch.where(x > 0, x, 0.0)\n\n\ndef gelu(x):\n    return x * 0.5 * (1.0 + torch.special.erf("
        "x / 2 ** 0.5))\n\n\ndef gelu_tanh(x):\n    return 0.5 * x * (1 + torch.tanh((2 / math.pi) ** 0.5 * "
        "(x + 0.044715 * torch.pow(x, 3))))\n\n\ndef silu(x):\n    return 0.5 * x * (1 + torch.tanh(x / 2))\n",
        "def relu(x):\n    return x * (x > 0)\n\n\ndef gelu(x):\n    return x * (1 + torch.erf(x * math.sqrt(0.5))) / 2\n"
        "\n\ndef gelu_tanh(x):\n    inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)\n"
        "    return 0.5 * x * (1 + inner.tanh())\n\n\ndef silu(x):\n    return x * x.sigmoid()\n",
    ],
    "cross_entropy": [
        "def cross_entropy(logits, targets, *, ignore_index=-100, label_smoothing=0.0):\n"
        "    v = logits.shape[-1]\n    z = logits.reshape(-1, v)\n    t = targets.reshape(-1)\n"
        "    m = z.amax(-1, keepdim=True)\n    lse = m + (z - m).exp().sum(-1, keepdim=True).log()\n"
        "    logp = z - lse\n    keep = t != ignore_index\n    safe = t.masked_fill(~keep, 0)\n"
        "    picked = logp[torch.arange(len(t)), safe]\n"
        "    loss = -(1 - label_smoothing) * picked - label_smoothing * logp.mean(-1)\n"
        "    return (loss * keep).sum() / keep.sum()\n",
    ],
    "clip_grad_norm": [
        "def clip_grad_norm(parameters, max_norm):\n    grads = [p.grad for p in parameters if p.grad is not None]\n"
        "    total = torch.sqrt(sum((g.double() ** 2).sum() for g in grads)).float() if grads else torch.tensor(0.0)\n"
        "    if total > max_norm:\n        for g in grads:\n            g.mul_(max_norm / (total + 1e-6))\n"
        "    return total\n",
    ],
}
RIGHT_STYLES |= {
    # The rule forbids enable_gqa=True only: the repeat written out, with enable_gqa=False said explicitly, is right.
    "grouped_query_attention": [
        gqa().replace("attn_mask=mask)", "attn_mask=mask, enable_gqa=False)"),
        gqa().replace("attn_mask=mask)", "attn_mask=mask, **{'enable_gqa': False})"),
    ],
    # A loop of fixed length (map over the three of q, k, v) is no loop over the heads.
    "multi_head_attention": [
        mha()
        .replace(
            "q, k, v = (einops.rearrange(t, 'b s (h d) -> b h s d', h=self.num_heads) for t in (self.q_proj(x), "
            "self.k_proj(x), self.v_proj(x)))",
            "q, k, v = map(functools.partial(einops.rearrange, pattern='b s (h d) -> b h s d', h=self.num_heads), "
            "(self.q_proj(x), self.k_proj(x), self.v_proj(x)))",
        )
        .replace("class MultiHeadAttention", "import functools\n\n\nclass MultiHeadAttention")
    ],
    # "Use your attention_weights", called however you like: kept in a default argument, looked up in globals(),
    # its result used through another product.
    "scaled_dot_product_attention": [
        "def scaled_dot_product_attention(q, k, v, mask=None, _weights=attention_weights):\n"
        "    return _weights(q, k, mask=mask) @ v\n",
        "def scaled_dot_product_attention(q, k, v, mask=None):\n"
        "    weights = globals()['attention_weights'](q, k, mask)\n"
        "    return torch.matmul(v.transpose(-1, -2), weights.transpose(-1, -2)).transpose(-1, -2)\n",
    ],
    "layer_norm": [
        "class LayerNorm(nn.Module):\n    def __init__(self, d_model, eps=1e-5):\n        super().__init__()\n"
        "        self.eps = eps\n        self.weight = nn.Parameter(torch.ones(d_model))\n"
        "        self.bias = nn.Parameter(torch.zeros(d_model))\n\n    def forward(self, x):\n"
        "        var, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)\n"
        "        return ((x - mean) * torch.rsqrt(var + self.eps) * self.weight + self.bias).to(x.dtype)\n",
    ],
    # A norm (torch.linalg.vector_norm) is a building block; F.normalize, which also divides, is not allowed.
    "rms_norm": [
        "class RMSNorm(nn.Module):\n    def __init__(self, d_model, eps=1e-5):\n        super().__init__()\n"
        "        self.eps = eps\n        self.weight = nn.Parameter(torch.ones(d_model))\n\n"
        "    def forward(self, x):\n        x32 = x.float()\n"
        "        ms = torch.linalg.vector_norm(x32, dim=-1, keepdim=True) ** 2 / x.shape[-1]\n"
        "        return (x32 / torch.sqrt(ms + self.eps) * self.weight).to(x.dtype)\n",
    ],
}
# Notebook 10's train in another order than the text lists it (zero_grad after the step, the lr set after the
# batch is drawn) and with a bar made with total= and updated by hand: the same values, so it must pass.
RIGHT_STYLES["train"] = [
    TRAIN.replace("        optimizer.zero_grad()\n        loss.backward()\n", "        loss.backward()\n")
    .replace("        optimizer.step()\n", "        optimizer.step()\n        optimizer.zero_grad(set_to_none=True)\n")
    .replace("    model.train()\n", "    model.train()\n    optimizer.zero_grad()\n")
    .replace(
        '    bar = tqdm(range(1, config.max_steps + 1), desc="training", disable=not progress)\n    for step in bar:\n',
        "    bar = tqdm(total=config.max_steps, disable=not progress)\n    for step in range(1, config.max_steps + 1):\n"
        "        bar.update(1)\n",
    )
]

NOTEBOOK_OF = {
    "grouped_query_attention": "05_multihead_attention",
    "multi_head_attention": "05_multihead_attention",
    "scaled_dot_product_attention": "04_attention",
    "layer_norm": "02_normalization",
    "rms_norm": "02_normalization",
    "train": "10_training",
    "softmax": "04_attention",
    "one_hot": "00_welcome",
    "relative_positions": "00_welcome",
    "pairwise_sq_distances": "00_welcome",
    "ffn_activations": "06_feed_forward",
    "cross_entropy": "10_training",
    "clip_grad_norm": "10_training",
}


# Issue 34: right answers written otherwise, beside the behaviours the checks now observe (in-place edits of the
# inputs, the caller's dict, the bias halves, the closed form): in-place methods on the function's own copies, a
# dict copied and then popped, slices instead of chunk, a closed form written as a list of shapes.
_ISSUE_34_STYLES = {
    "pairwise_sq_distances": [
        "def pairwise_sq_distances(a, b):\n    rows = a.clone().unsqueeze_(1)  # a copy: the caller's a is untouched\n"
        "    return (rows - b.unsqueeze(0)).pow_(2).sum(-1)\n",
    ],
    "head_dot_products": [
        "def head_dot_products(q, k):\n    return q @ k.transpose(-1, -2)\n",
        "def head_dot_products(q, k):\n    return torch.einsum('...sd,...td->...st', q, k)\n",
    ],
    "fused_swiglu": [
        ffn_fused(
            cat_weight='torch.vstack([state["w1.weight"], state["w3.weight"]])',
            cat_bias='torch.concat((state["w1.bias"], state["w3.bias"]))',
            split='whole = state[f"gate_up_proj.{kind}"]\n            gate, up = whole[:len(whole) // 2], whole[len(whole) // 2:]',
            forward="h = self.gate_up_proj(x)\n        d = h.shape[-1] // 2\n"
            "        return self.down_proj(F.silu(h[..., :d]) * h[..., d:])",
        )
    ],
    "fused_rotary_gqa": [
        fuse_only(
            "\ndef fuse_qkv(state):\n    fused = dict(state)  # a new dict: popping from it leaves the caller's as it was\n"
            "    for key in list(fused):\n        for kind in ('weight', 'bias'):\n"
            "            if key.endswith(f'q_proj.{kind}'):\n                prefix = key[:-len(f'q_proj.{kind}')]\n"
            "                parts = [fused.pop(f'{prefix}{n}_proj.{kind}') for n in 'qkv']\n"
            "                fused[f'{prefix}qkv_proj.{kind}'] = torch.cat(parts)\n    return fused\n"
        )
    ],
    "gpt2_num_parameters": [
        "def gpt2_num_parameters(config):\n    d, f = config.d_model, config.d_ff\n"
        "    block = [(d,), (d,)] + [(d, d), (d,)] * 4 + [(d,), (d,)] + [(f, d), (f,), (d, f), (d,)]\n"
        "    shapes = [(config.vocab_size, d), (config.n_positions, d)] + block * config.n_layers + [(d,), (d,)]\n"
        "    return sum(math.prod(shape) for shape in shapes)\n",
    ],
}
for _exercise_id, _codes in _ISSUE_34_STYLES.items():
    RIGHT_STYLES.setdefault(_exercise_id, []).extend(_codes)
NOTEBOOK_OF |= {
    "head_dot_products": "00_welcome",
    "fused_swiglu": "06_feed_forward",
    "fused_rotary_gqa": "08_decoder_models",
    "gpt2_num_parameters": "08_decoder_models",
}

# Blind round b1: right answers written otherwise, beside the behaviours the checks now observe (RoPE's float64
# angles, bfloat16 rounded once, x left unchanged, IndexError naming max_seq_len; the fused product's result
# used, however it is computed; the decoder's causal mask on the device of x).
_ROPE_STYLE = """
class RoPE(nn.Module):
    def __init__(self, d_k, max_seq_len, base=10000.0):
        super().__init__()
        if d_k % 2:
            raise ValueError(f"d_k={d_k} is odd")
        self.d_k, self.max_seq_len = d_k, max_seq_len
        theta = torch.tensor([base ** (-2 * i / d_k) for i in range(d_k // 2)], dtype=torch.float64)
        angles = torch.outer(torch.arange(max_seq_len, dtype=torch.float64), theta)
        self.register_buffer("cos", angles.cos().to(torch.float32), persistent=False)
        self.register_buffer("sin", angles.sin().to(torch.float32), persistent=False)

    def forward(self, x, token_positions):
        if x.size(-1) != self.d_k:
            raise ValueError("x.shape[-1] must equal d_k")
        if bool((token_positions < 0).any()) or bool((token_positions >= self.max_seq_len).any()):
            raise IndexError(f"a position is outside [0, max_seq_len) with max_seq_len={self.max_seq_len}")
        cos, sin = self.cos[token_positions], self.sin[token_positions]
        {body}
"""
_BLIND_B1_STYLES = {
    "rope": [
        _ROPE_STYLE.replace(
            "{body}",
            "pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2).contiguous())\n"
            "        rotated = pairs * torch.complex(cos, sin)\n"
            "        return torch.view_as_real(rotated).flatten(-2).type_as(x)",
        ),
        _ROPE_STYLE.replace(
            "{body}",
            "out = x.float().clone()  # a copy of its own: the in-place writes leave x as it was\n"
            "        even, odd = x[..., 0::2].float(), x[..., 1::2].float()\n"
            "        out[..., 0::2] = even * cos - odd * sin\n"
            "        out[..., 1::2] = even * sin + odd * cos\n"
            "        return out.to(x.dtype)",
        ),
    ],
    "halves_permutation": [
        "def halves_permutation(d_k):\n    return torch.arange(d_k).view(-1, 2).t().reshape(-1)\n",
        "def halves_permutation(d_k):\n    return torch.tensor([*range(0, d_k, 2), *range(1, d_k, 2)])\n",
    ],
    "rope_matrix": [  # float32 angles are allowed here (the text says so); the matrix filled entry by entry
        "def rope_matrix(d_k, position, base=10000.0):\n    out = torch.zeros(d_k, d_k)\n"
        "    angles = position * base ** (-torch.arange(0, d_k, 2, dtype=torch.float32) / d_k)\n"
        "    for i, a in enumerate(angles):\n"
        "        out[2 * i:2 * i + 2, 2 * i:2 * i + 2] = rotation_matrix(a)\n    return out\n",
    ],
    "fused_swiglu": [
        ffn_fused(
            forward="h = F.linear(x, self.gate_up_proj.weight, self.gate_up_proj.bias)\n"
            "        gate, up = h.tensor_split(2, dim=-1)\n        return self.down_proj(F.silu(gate) * up)"
        ),
        ffn_fused(
            forward="flat = x.reshape(-1, x.shape[-1]) @ self.gate_up_proj.weight.t()\n"
            "        if self.gate_up_proj.bias is not None:\n            flat = flat + self.gate_up_proj.bias\n"
            "        gate, up = flat.reshape(*x.shape[:-1], -1).chunk(2, dim=-1)\n"
            "        return self.down_proj(gate * torch.sigmoid(gate) * up)"
        ),
    ],
    "decoder_block": [
        decoder(causal="torch.arange(length, device=x.device)[:, None] >= torch.arange(length, device=x.device)"),
    ],
}
for _exercise_id, _codes in _BLIND_B1_STYLES.items():
    RIGHT_STYLES.setdefault(_exercise_id, []).extend(_codes)
NOTEBOOK_OF |= {
    "rope": "03_rope",
    "halves_permutation": "03_rope",
    "rope_matrix": "03_rope",
    "decoder_block": "07_blocks",
}

# Blind round b2, notebook 08: right answers written otherwise, beside the behaviours the checks now observe (the
# model's tensors on the device of tokens, the caller's hf_state left as it was, lm_head the same tensor as wte,
# is_causal passed on to SDPA when SDPA is called, q, k and v taken from the one product's result).
_MANUAL_ATTENTION = (
    "None\n        scores = q @ k.transpose(-1, -2) / self.head_dim ** 0.5\n        if is_causal:\n"
    "            mask = torch.ones(length, length, dtype=torch.bool, device=x.device).tril()\n"
    "        if mask is not None:\n            scores = scores.masked_fill(~mask, float('-inf'))\n"
    "        out = scores.softmax(-1).nan_to_num(nan=0.0) @ v"  # a query with no key: zero weights
)
_BLIND_B2_NB08_STYLES = {
    "gpt2_model": [
        nb08_gpt2(
            causal="torch.arange(length, device=tokens.device)[:, None] >= torch.arange(length, device=tokens.device)"
        )
    ],
    "modern_decoder": [
        nb08_decoder().replace("torch.arange(length, device=tokens.device)", "torch.arange(length).to(tokens.device)")
    ],
    "gpt2_state_from_hf": [
        nb08_gpt2_convert(
            head='state["lm_head.weight"] = src.get("lm_head.weight", state["wte.weight"])  # tied in HF\'s state_dict'
        )
    ],
    "llama_state_from_hf": [
        nb08_llama_convert().replace(
            "    head_dim = config.d_model",
            "    hf_state = dict(hf_state)  # a copy of its own: popping leaves the "
            "caller's\n    hf_state['lm_head.weight'] = hf_state.pop('lm_head.weight')\n    head_dim = config.d_model",
        )
    ],
    "rotary_gqa": [
        nb08_rotary(attend=_MANUAL_ATTENTION),  # attention by hand: no SDPA call to pass is_causal to
        nb08_rotary(attend="F.scaled_dot_product_attention(q, k, v, mask, 0.0, is_causal)"),
    ],
    "fused_rotary_gqa": [
        nb08_fused(
            qkv="y = F.linear(x, self.qkv_proj.weight)\n"
            "        q, k, v = y[..., :h * hd], y[..., h * hd:(h + g) * hd], y[..., (h + g) * hd:]"
        )
    ],
}
for _exercise_id, _codes in _BLIND_B2_NB08_STYLES.items():
    RIGHT_STYLES.setdefault(_exercise_id, []).extend(_codes)
NOTEBOOK_OF |= {exercise_id: "08_decoder_models" for exercise_id in _BLIND_B2_NB08_STYLES}


def _rule_bound() -> list[tuple[str, str]]:
    """(notebook, exercise) for every exercise that declares a rule."""
    from autograder.exercises import checks_for
    from autograder.notebooks import NOTEBOOKS

    return [(n, e.id) for n in NOTEBOOKS for e in checks_for(n).exercises if e.rules]


def _namespace(namespaces, exercise_id: str, code: str) -> dict:
    namespace = dict(namespaces[NOTEBOOK_OF[exercise_id]])
    exec(compile(PRELUDE + code, "<answer>", "exec"), namespace)
    return namespace


def _runtime_only(namespaces, exercise_id: str, code: str):
    exercise, adapters = find_exercise(exercise_id)
    return run_exercise(exercise, LocalImpl(_namespace(namespaces, exercise_id, code), adapters))


@pytest.mark.parametrize("dodge", SOFTMAX_DODGES)
def test_the_static_half_alone_rejects_each_dodge(dodge):
    exercise, _ = find_exercise("softmax")
    result = rules_result(exercise, SOFTMAX_DODGES[dodge], [PRELUDE])
    assert not result.passed and result.message.startswith("this exercise's rule is: do not call torch.softmax")


def test_an_ipython_magic_does_not_hide_the_cell_from_the_static_half():
    """A cell the kernel runs but plain Python cannot parse (a %magic line) is read as the kernel runs it."""
    exercise, _ = find_exercise("softmax")
    cell = "%config InlineBackend.figure_format = 'png'\ndef softmax(x, dim=-1):\n    return torch.softmax(x, dim)\n"
    assert not rules_result(exercise, cell, [PRELUDE]).passed


@pytest.mark.parametrize("dodge", SOFTMAX_DODGES)
def test_the_runtime_half_alone_rejects_each_dodge(dodge, solution_namespaces):
    result = _runtime_only(solution_namespaces, "softmax", SOFTMAX_DODGES[dodge])
    assert not result.passed and "this exercise's rule is" in result.message, result.message


def test_a_helper_in_another_cell_is_refused_at_runtime(solution_namespaces):
    """The answer cell reads clean; the helper it calls lives in a cell the static half does not read."""
    namespace = _namespace(solution_namespaces, "softmax", "def helper(x, dim):\n    return F.softmax(x, dim)\n")
    answer = "def softmax(x, dim=-1):\n    return helper(x, dim)\n"
    exercise, adapters = find_exercise("softmax")
    assert rules_result(exercise, answer, [PRELUDE]).passed
    exec(answer, namespace)
    result = run_exercise(exercise, LocalImpl(namespace, adapters), source=answer, context=[PRELUDE])
    assert not result.passed and "your code called torch.nn.functional.softmax" in result.message, result.message


@pytest.mark.parametrize("exercise_id, code", [(e, c) for e, codes in RIGHT_STYLES.items() for c in codes])
def test_right_code_in_other_styles_passes_both_halves(exercise_id, code, solution_namespaces):
    exercise, adapters = find_exercise(exercise_id)
    namespace = _namespace(solution_namespaces, exercise_id, code)
    result = run_exercise(exercise, LocalImpl(namespace, adapters), source=code, context=[PRELUDE])
    assert result.passed, result.message


@pytest.mark.parametrize("notebook, exercise_id", _rule_bound())
def test_the_solutions_follow_their_rules(notebook, exercise_id):
    """The static half on the solution's own answer cell, with its notebook's cells as context."""
    nb = read(solution_path(notebook))
    (cell,) = [c for c in nb.cells if grade_id(c) == exercise_id]
    exercise, _ = find_exercise(exercise_id)
    others = [c.source for c in nb.cells if c.cell_type == "code" and c is not cell]
    assert rules_result(exercise, cell.source, others).passed


def test_the_rule_is_switched_off_afterwards_and_restores_everything():
    rule = Rule("no softmax", ("torch.softmax", "torch.Tensor.softmax", "torch.nn.functional.softmax"))
    namespace = {"sm": torch.softmax, "other": torch.exp}
    x = torch.randn(3)
    expected = torch.softmax(x, 0)
    with enforced([rule.to_wire()], namespace):
        for call in (
            lambda: torch.softmax(x, 0),
            lambda: x.softmax(0),
            lambda: namespace["sm"](x, 0),
            lambda: torch.nn.functional.softmax(x, 0),
        ):
            with pytest.raises(RuntimeError, match="no softmax"):
                call()
        assert torch.equal(namespace["other"](x), torch.exp(x))  # what the rule does not name still works
    assert namespace["sm"] is torch.softmax and "softmax" not in vars(torch.Tensor)
    assert torch.equal(x.softmax(0), expected) and torch.equal(torch.nn.functional.softmax(x, 0), expected)


# Ways around a rule written here rather than in tests/wrong (they need helpers of their own): each names the
# exercise, the dodge, a whole answer cell, and what the message says.
_ACTIVATIONS = (
    "def relu(x):\n    return {relu}\n\n\ndef gelu(x):\n    return {gelu}\n\n\n"
    "def gelu_tanh(x):\n    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))\n"
    "\n\ndef silu(x):\n    return {silu}\n"
)


def _activations(
    relu="torch.clamp(x, min=0)", gelu="0.5 * x * (1 + torch.erf(x / math.sqrt(2)))", silu="x * torch.sigmoid(x)"
):
    return _ACTIVATIONS.format(relu=relu, gelu=gelu, silu=silu)


RULE_DODGES = [
    (
        "relative_positions",
        "a loop with no line of its own: starmap over the pairs, handed to torch.tensor",
        "import itertools\nimport operator\n\n\ndef relative_positions(n):\n"
        "    return -torch.tensor(list(itertools.starmap(operator.sub, itertools.product(range(n), repeat=2)))).reshape(n, n)\n",
        "this exercise's rule is: no Python loops",
    ),
    (
        "relative_positions",
        "a double loop run from a string",
        "def relative_positions(n):\n    return eval('torch.tensor([[j - i for j in range(n)] for i in range(n)])')\n",
        "this exercise's rule is: no Python loops",
    ),
    (
        "pairwise_sq_distances",
        "a loop over the points written as map",
        "import itertools\n\n\ndef pairwise_sq_distances(a, b):\n"
        "    return torch.stack(list(map(torch.sub, a.unbind(0), itertools.repeat(b)))).pow(2).sum(-1)\n",
        "this exercise's rule is: no Python loops",
    ),
    (
        "ffn_activations",
        "ReLU as F.threshold",
        _activations(relu="F.threshold(x, 0.0, 0.0)"),
        "this exercise's rule is: do not call any of PyTorch's ready-made activations",
    ),
    (
        "ffn_activations",
        "ReLU as F.hardtanh(x, 0, inf)",
        _activations(relu="F.hardtanh(x, 0.0, float('inf'))"),
        "this exercise's rule is: do not call any of PyTorch's ready-made activations",
    ),
    (
        "ffn_activations",
        "ReLU as leaky_relu with slope 0",
        _activations(relu="F.leaky_relu(x, 0.0)"),
        "this exercise's rule is: do not call any of PyTorch's ready-made activations",
    ),
    (
        "ffn_activations",
        "SiLU through F.glu",
        _activations(silu="F.glu(torch.cat([x, x], dim=-1), dim=-1)"),
        "this exercise's rule is: do not call any of PyTorch's ready-made activations",
    ),
    (
        "ffn_activations",
        "GELU as x times the normal CDF",
        _activations(gelu="x * torch.special.ndtr(x)"),
        "this exercise's rule is: do not call any of PyTorch's ready-made activations",
    ),
]
NOTEBOOK_OF |= {"relative_positions": "00_welcome", "ffn_activations": "06_feed_forward"}


@pytest.mark.parametrize("exercise_id, dodge, code, says", RULE_DODGES, ids=[d[1] for d in RULE_DODGES])
def test_each_rule_dodge_is_rejected_with_the_rule(exercise_id, dodge, code, says, solution_namespaces):
    exercise, adapters = find_exercise(exercise_id)
    namespace = _namespace(solution_namespaces, exercise_id, code)
    result = run_exercise(exercise, LocalImpl(namespace, adapters), source=code, context=[PRELUDE])
    assert not result.passed and says in result.message, result.message


# The dodges only the runtime half can see (a name computed, a reference kept where the cell does not show it).
RUNTIME_DODGES = [
    (
        "clip_grad_norm",
        "def clip_grad_norm(parameters, max_norm, _clip=getattr(torch.nn.utils, 'clip_grad_norm' + chr(95))):"
        "\n    return _clip(parameters, max_norm)\n",
    ),
    (
        "relative_positions",
        "_run = vars(__import__('built' + 'ins'))[''.join(reversed('lave'))]\n\n\ndef relative_positions(n):\n"
        "    return _run('torch.tensor([[j - i for j in range(n)] for i in range(n)])', dict(torch=torch, n=n))\n",
    ),
    (
        "grouped_query_attention",
        gqa(repeat="k, v").replace("attn_mask=mask)", "attn_mask=mask, **{'enable_' + 'gqa': True})"),
    ),
]


@pytest.mark.parametrize("exercise_id, code", RUNTIME_DODGES, ids=[d[0] for d in RUNTIME_DODGES])
def test_the_runtime_half_alone_rejects_what_the_cell_hides(exercise_id, code, solution_namespaces):
    exercise, _ = find_exercise(exercise_id)
    assert rules_result(exercise, code, [PRELUDE]).passed  # the static half cannot see it...
    result = _runtime_only(solution_namespaces, exercise_id, code)
    assert not result.passed and "this exercise's rule is" in result.message, result.message  # ...the runtime half does


def test_a_refused_python_function_is_restored_afterwards():
    """clip_grad_norm_'s code is swapped while the rule is in force, and given back after."""
    rule = Rule("no clip", ("torch.nn.utils.clip_grad_norm_",))
    kept = torch.nn.utils.clip_grad_norm_
    parameter = torch.nn.Parameter(torch.ones(4))
    parameter.grad = torch.full((4,), 3.0)
    with enforced([rule.to_wire()]), pytest.raises(RuntimeError, match="no clip"):
        kept([parameter], 1.0)
    assert torch.isclose(kept([parameter], 1.0), torch.tensor(6.0)) and torch.allclose(
        parameter.grad, torch.full((4,), 0.5)
    )


def test_a_broken_rule_is_said_once_without_the_graders_class_name(solution_namespaces):
    """Read from the answer cell and met again in every call, a broken rule is one finding: the test cell's
    lines and a report's message say it once, as the rule and what broke it."""
    from autograder.feedback import render

    code = "def softmax(x, dim=-1):\n    return torch.softmax(x, dim=dim)\n"
    exercise, adapters = find_exercise("softmax")
    result = run_exercise(
        exercise, LocalImpl(_namespace(solution_namespaces, "softmax", code), adapters), source=code, context=[PRELUDE]
    )
    failed = [r for r in result.results if not r.passed]
    assert len(failed) >= 3 and all(r.broke_rule for r in failed), [r.message for r in failed]
    runtime_only = _runtime_only(solution_namespaces, "softmax", code)  # as for a helper the source does not show
    for shown in (render(result), result.message, render(runtime_only), runtime_only.message):
        assert shown.count("this exercise's rule is") == 1, shown
        assert "RuleBroken" not in shown and "autograder." not in shown, shown
