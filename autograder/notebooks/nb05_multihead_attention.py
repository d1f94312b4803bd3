"""Notebook 05's exercises, with their checks and adapters: multi-head, fused-QKV, grouped-query and cross attention.

Oracles: ``torch.nn.MultiheadAttention`` with the student's projection weights copied in
(its boolean masks mean the opposite of ours, so they are inverted here), and
``F.scaled_dot_product_attention(..., enable_gqa=True)`` for grouped queries; the KV-cache
size is a closed form; rotary attention uses notebook 03's RoPE oracle, Hugging Face Llama's rotation adapted to
interleaved pairs (``autograder/notebooks/_rope.py``; no answer of solutions/ ships in the package, issue 54 §4), and
the student's class gets the same rotation as its ``rope`` module (``_rope.LlamaRoPE``). Invariances: later tokens
cannot change earlier outputs under a causal mask. Every layer also runs on a sequence of 300 tokens, longer than any of the notebook's (its tables stop
at 256), so nothing sized for a fixed maximum length passes.

What outputs do not show on a CPU-only grader: rotary attention's default positions are made on the device of x.
The layer runs on PyTorch's meta device with a recording stand-in for ``rope`` (it makes nothing itself, so only
the student's own tensors can be on the wrong device), which reports the device of the positions it is given.

Tolerances: float32 at atol 1e-5 + rtol 1e-4 (two matmuls of width <= 24 around attention). Gradients (of the
inputs and of every parameter, against autograd through the same oracles): atol 1e-4 + rtol 1e-3 (``GRAD_TOL``): they
sum over the batch and the tokens (2 x 6 at most) through attention's backward pass, in float32 on the CPU; the
solution is within 2e-6 of the oracles (gradients up to 14 in size), and every mistake the checks name is off by
far more.

Gradients: a forward pass computed under ``torch.no_grad()``, or with a projection ``.detach()``ed, gives the right
outputs and trains nothing; so every layer also runs backward on a fixed upstream gradient, and the gradients of its
inputs (x, and context for cross-attention) and parameters are compared with autograd through the oracle, on the
same state and the same upstream gradient. Rotary attention's default positions 0..seq-1 are also checked with a rope
whose table stops at max_seq_len = seq (``_TableRoPE``), where a shifted default raises.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from autograder import expect
from autograder.adapters import adapter, forward_backward_inputs, lines_run, load, need, outcome, summary
from autograder.errors import StudentCodeError
from autograder.exercises import Exercise
from autograder.notebooks._rope import LlamaRoPE, rotate_pairs
from autograder.notebooks._seeds import seeded
from autograder.rules import CODE_FROM_STRINGS, Rule

MHA = Exercise(
    "multi_head_attention",
    "multi-head attention",
    points=3,
    rules=(Rule("no Python loop over heads, in any form, and no exec, eval or compile", builtins=CODE_FROM_STRINGS),),
)
FUSED = Exercise("fused_qkv_attention", "one fused QKV projection", points=2)
GQA = Exercise(
    "grouped_query_attention",
    "grouped-query attention",
    points=3,
    rules=(
        Rule(
            "write the repeat of the key/value heads yourself (no enable_gqa=True; enable_gqa=False is fine)",
            keywords=("enable_gqa",),
        ),
    ),
)
KV = Exercise("kv_cache_bytes", "KV-cache memory", points=1)
CROSS = Exercise("cross_attention", "cross-attention", points=2)
ROTARY = Exercise("rotary_attention", "RoPE inside multi-head attention", points=2)
EXERCISES = [MHA, FUSED, GQA, KV, CROSS, ROTARY]
ORACLE_IMPORTS = (
    "transformers.models.llama.modeling_llama",
)  # imported while the notebook runs (grading.grade): seconds

TOL = {"atol": 1e-5, "rtol": 1e-4}
GRAD_TOL = {"atol": 1e-4, "rtol": 1e-3}  # gradients: sums over batch x tokens (<= 16) of float32 products


_gen, _randn = seeded(5000)


def _projections(d_model, seed, names=("q_proj", "k_proj", "v_proj", "out_proj"), out_dims=None, bias=True):
    state = {}
    for i, name in enumerate(names):
        out = (out_dims or {}).get(name, d_model)
        state[f"{name}.weight"] = _randn((out, d_model), seed * 10 + i, scale=d_model**-0.5)
        if bias:
            state[f"{name}.bias"] = _randn((out,), seed * 10 + i + 5, scale=0.1)
    return state


def _reference_mha(state, num_heads, d_model):
    """nn.MultiheadAttention holding our weights (q, k and v stacked in its in_proj)."""
    reference = nn.MultiheadAttention(d_model, num_heads, batch_first=True)
    with torch.no_grad():
        reference.in_proj_weight.copy_(torch.cat([state[f"{p}.weight"] for p in ("q_proj", "k_proj", "v_proj")]))
        reference.in_proj_bias.copy_(torch.cat([state[f"{p}.bias"] for p in ("q_proj", "k_proj", "v_proj")]))
        reference.out_proj.weight.copy_(state["out_proj.weight"])
        reference.out_proj.bias.copy_(state["out_proj.bias"])
    return reference


def _torch_mask(mask, num_heads, query, key):
    if mask is None:
        return None
    # [batch or 1, 1, q, k] -> [batch * heads, q, k], inverted
    full = mask.expand(query.shape[0], num_heads, query.shape[1], key.shape[1])
    return ~full.reshape(-1, query.shape[1], key.shape[1])


def torch_mha(state, num_heads, query, key=None, value=None, mask=None):
    """nn.MultiheadAttention with our weights; ``mask`` in the course's polarity (True = may attend)."""
    key = query if key is None else key
    value = key if value is None else value
    reference = _reference_mha(state, num_heads, query.shape[-1])
    attn_mask = _torch_mask(mask, num_heads, query, key)
    with torch.no_grad():
        return reference(query, key, value, attn_mask=attn_mask, need_weights=False)[0]


def torch_mha_gradients(state, num_heads, grad_output, x, context=None, mask=None):
    """Autograd through ``torch_mha``'s oracle: the gradients of ``x`` (and ``context``) and of every parameter of
    the course's layout (in_proj's gradient split back into q_proj, k_proj and v_proj), for ``grad_output``."""
    x = x.clone().requires_grad_()
    kv = None if context is None else context.clone().requires_grad_()
    reference = _reference_mha(state, num_heads, x.shape[-1])
    source = x if kv is None else kv
    out = reference(x, source, source, attn_mask=_torch_mask(mask, num_heads, x, source), need_weights=False)[0]
    out.backward(grad_output)
    weights, biases = reference.in_proj_weight.grad.chunk(3), reference.in_proj_bias.grad.chunk(3)
    grads = {"x": x.grad} | ({} if kv is None else {"context": kv.grad})
    for i, p in enumerate(("q_proj", "k_proj", "v_proj")):
        grads |= {f"{p}.weight": weights[i], f"{p}.bias": biases[i]}
    return grads | {"out_proj.weight": reference.out_proj.weight.grad, "out_proj.bias": reference.out_proj.bias.grad}


def autograd_gradients(oracle, state, grad_output, x):
    """Autograd through a functional ``oracle(state, x)``: the gradients of ``x`` and of every tensor of ``state``."""
    leaves = {name: t.clone().requires_grad_() for name, t in state.items()}
    x = x.clone().requires_grad_()
    oracle(leaves, x).backward(grad_output)
    return {"x": x.grad} | {name: t.grad for name, t in leaves.items()}


def check_gradients(got, expected: dict, what: str):
    """The gradients an adapter reported (``attention_backward``) against the oracle's ``expected`` (name ->
    tensor): a name whose gradient is missing or all zeros where the oracle's is not is named first."""
    grads = expect.gradients(got, what)
    missing = [
        name
        for name, want in expected.items()
        if bool(want.abs().max() > GRAD_TOL["atol"])
        and (not isinstance(grads.get(name), torch.Tensor) or not bool(grads[name].abs().max() > 0))
    ]
    expect.that(
        not missing,
        f"{what}: no gradient reaches {', '.join(missing)}: is it computed under torch.no_grad() or .detach()ed?",
    )
    for name, want in expected.items():
        expect.close(grads.get(name), want, f"{what}: the gradient of {name}", **GRAD_TOL)


def _manual(state, num_heads, x, context=None, mask=None, *, split="correct", out_proj=True, mask_fix=None):
    """The plausible wrong versions, written out (used only to name a student's mistake)."""
    context = x if context is None else context
    b, t, d = x.shape
    s, hd = context.shape[1], d // num_heads

    def project(name, inp):
        return inp @ state[f"{name}.weight"].T + state[f"{name}.bias"]

    def heads(tensor, length):
        if split == "reshape":  # reshape without the transpose: mixes positions and heads
            return tensor.reshape(b, num_heads, length, hd)
        return tensor.reshape(b, length, num_heads, hd).transpose(1, 2)

    q, k, v = heads(project("q_proj", x), t), heads(project("k_proj", context), s), heads(project("v_proj", context), s)
    if mask is not None and mask_fix is not None:
        mask = mask_fix(mask)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    out = out.reshape(b, t, d) if split == "reshape" else out.transpose(1, 2).reshape(b, t, d)
    return out @ state["out_proj.weight"].T + state["out_proj.bias"] if out_proj else out


def _mha_mistakes(state, num_heads, x, context=None, mask=None):
    mistakes = [
        (
            _manual(state, num_heads, x, context, mask, split="reshape"),
            "the heads are split with a reshape to [batch, heads, seq, head_dim] without a transpose; split the "
            "feature axis: 'b s (h d) -> b h s d'",
        ),
        (_manual(state, num_heads, x, context, mask, out_proj=False), "the output projection out_proj is not applied"),
    ]
    if mask is not None and mask.dim() == 4 and mask.shape[0] == num_heads > 1 and mask.shape[1] == 1:
        mistakes.append(
            (
                _manual(state, num_heads, x, context, mask, mask_fix=lambda m: m.transpose(0, 1)),
                "the mask is broadcast over the heads instead of the batch: keep its batch axis first "
                "and a size-1 heads axis",
            )
        )
    return mistakes


def _check_submodules(impl, class_name, args, expected):
    summary = impl.call(attention_summary, class_name, args)
    expect.that("parameters" in summary, f"{class_name}{tuple(args)} is not an nn.Module")
    got = summary["parameters"]
    expect.that(
        got == expected,
        f"{class_name}{tuple(args)} has parameters {got}; expected {expected} "
        "(the names matter: checkpoints are loaded by name)",
    )


def _mha_state(d, h, seed):
    return _projections(d, seed)


def _causal(t):
    return torch.ones(t, t, dtype=torch.bool).tril()


def _padding(lengths, total):
    return (torch.arange(total)[None, :] < torch.tensor(lengths)[:, None])[:, None, None, :]


# Longer than any sequence of the notebook (its tables, sinusoidal and rotary, stop at 256 positions).
LONG = 300


# --- Exercise 1 --------------------------------------------------------------------------


@MHA.visible
def test_mha_parameters(impl):
    "submodules q_proj, k_proj, v_proj, out_proj: nn.Linear(d_model, d_model) with bias"
    _check_submodules(
        impl,
        "MultiHeadAttention",
        [16, 4],
        {
            f"{p}.{w}": ([16, 16] if w == "weight" else [16])
            for p in ("q_proj", "k_proj", "v_proj", "out_proj")
            for w in ("weight", "bias")
        },
    )


@MHA.visible
def test_mha_matches_torch(impl):
    "equals torch.nn.MultiheadAttention with the same weights (no mask)"
    state, x = _mha_state(16, 4, 0), _randn((2, 5, 16), 1)
    got = impl.call(attention_forward, "MultiHeadAttention", [16, 4], state, [x])
    expect.close(
        got,
        torch_mha(state, 4, x),
        "MultiHeadAttention(16, 4)(x) for x [2, 5, 16]",
        **TOL,
        alternatives=_mha_mistakes(state, 4, x),
    )


@MHA.visible
def test_mha_no_loop_over_heads(impl):
    "no Python loop over heads: your forward does the same work (lines of your code, torch calls) for 2, 8 and 128 heads"
    # A loop over a fixed number of head slots (``for slot in range(32): h = slot % H``) does the same work for any H
    # up to its length, so 2 against 8 heads cannot tell it from right code. 128 heads (of size 1) is more than such
    # a constant plausibly is: a loop whose length follows H then does more work (no_loops), and one of fixed length
    # does the same work but leaves the heads beyond its slots unset, which the output at 128 heads shows.
    x = _randn((2, 5, 16), 3)
    runs = {f"{h} heads": impl.call(forward_lines, "MultiHeadAttention", [16, h], [x]) for h in (2, 8)}
    runs["128 heads (d_model 128)"] = impl.call(
        forward_lines, "MultiHeadAttention", [128, 128], [_randn((2, 5, 128), 4)]
    )
    expect.no_loops("no Python loop over heads", runs)
    state, x = _mha_state(128, 128, 24), _randn((2, 5, 128), 240)
    got = impl.call(attention_forward, "MultiHeadAttention", [128, 128], state, [x])
    expect.close(
        got,
        torch_mha(state, 128, x),
        "MultiHeadAttention(128, 128)(x) for x [2, 5, 128], 128 heads of size 1",
        **TOL,
        hint="Every head must be attended: a loop over a fixed number of head slots (range(32), say) leaves the "
        "heads beyond them unset, and the rule is no Python loop over heads: attend all heads at once, on "
        "[batch, heads, seq, head_dim].",
    )


@MHA.hidden
def test_mha_gradients(impl):
    "gradients of x and of every parameter match autograd through nn.MultiheadAttention (causal mask)"
    state, x, mask = _mha_state(16, 4, 25), _randn((2, 6, 16), 250), _causal(6)[None, None]
    grad_output = _randn((2, 6, 16), 251)
    got = impl.call(attention_backward, "MultiHeadAttention", [16, 4], state, [x], grad_output, mask)
    check_gradients(got, torch_mha_gradients(state, 4, grad_output, x, mask=mask), "MultiHeadAttention(16, 4)")


@MHA.hidden
def test_mha_masks_and_sizes(impl):
    "causal and per-sequence padding masks; other sizes (one head, three heads, 300 tokens)"
    cases = [
        (12, 3, _causal(6)[None, None], 2, 6),
        (8, 1, None, 3, 6),
        (8, 2, _padding([4, 2], 6), 4, 6),
        (16, 4, _padding([6, 3], 6) & _causal(6), 5, 6),
        (8, 2, _padding([LONG, 200], LONG) & _causal(LONG), 6, LONG),
    ]
    for d, h, mask, seed, length in cases:
        state, x = _mha_state(d, h, seed), _randn((2, length, d), seed + 50)
        got = impl.call(attention_forward, "MultiHeadAttention", [d, h], state, [x], mask)
        expect.close(
            got,
            torch_mha(state, h, x, mask=mask),
            f"MultiHeadAttention({d}, {h}) with "
            + ("no mask" if mask is None else f"a mask of shape {list(mask.shape)}"),
            **TOL,
            alternatives=_mha_mistakes(state, h, x, mask=mask),
        )


@MHA.hidden
def test_mha_causal_and_errors(impl):
    "later tokens do not change earlier outputs under a causal mask; d_model % num_heads != 0 raises ValueError"
    state, x = _mha_state(16, 4, 6), _randn((1, 6, 16), 60)
    x2 = x.clone()
    x2[:, 4:] = _randn((1, 2, 16), 61)
    mask = _causal(6)[None, None]
    a = impl.call(attention_forward, "MultiHeadAttention", [16, 4], state, [x], mask)
    b = impl.call(attention_forward, "MultiHeadAttention", [16, 4], state, [x2], mask)
    expect.close(b[:, :4], a[:, :4], "outputs of positions 0-3 after changing tokens 4 and 5 (causal mask)", atol=1e-6)
    outcome = impl.call(construct_outcome, "MultiHeadAttention", [10, 4])
    expect.that(
        outcome["raised"] == "ValueError",
        "MultiHeadAttention(10, 4) must raise ValueError: 10 features do not split into 4 equal heads",
    )


# --- Exercise 2 --------------------------------------------------------------------------


def _fused(state):
    return {
        "qkv_proj.weight": torch.cat([state[f"{p}.weight"] for p in ("q_proj", "k_proj", "v_proj")]),
        "qkv_proj.bias": torch.cat([state[f"{p}.bias"] for p in ("q_proj", "k_proj", "v_proj")]),
        "out_proj.weight": state["out_proj.weight"],
        "out_proj.bias": state["out_proj.bias"],
    }


def _fused_mistakes(state, h, x, mask=None):
    swapped = dict(
        state,
        **{
            "q_proj.weight": state["k_proj.weight"],
            "q_proj.bias": state["k_proj.bias"],
            "k_proj.weight": state["q_proj.weight"],
            "k_proj.bias": state["q_proj.bias"],
        },
    )
    return [(torch_mha(swapped, h, x, mask=mask), "q and k are swapped: the fused output splits as [q | k | v]")]


@FUSED.visible
def test_fused_parameters_and_output(impl):
    "qkv_proj = nn.Linear(d_model, 3 * d_model) split as [q | k | v]; equal to separate projections"
    _check_submodules(
        impl,
        "FusedQKVAttention",
        [16, 4],
        {"qkv_proj.weight": [48, 16], "qkv_proj.bias": [48], "out_proj.weight": [16, 16], "out_proj.bias": [16]},
    )
    state, x = _mha_state(16, 4, 7), _randn((2, 5, 16), 70)
    got = impl.call(attention_forward, "FusedQKVAttention", [16, 4], _fused(state), [x])
    expect.close(
        got,
        torch_mha(state, 4, x),
        "FusedQKVAttention(16, 4)(x)",
        **TOL,
        alternatives=_fused_mistakes(state, 4, x) + _mha_mistakes(state, 4, x),
    )


@FUSED.hidden
def test_fused_masks_and_sizes(impl):
    "with causal and padding masks, and other sizes (300 tokens included)"
    cases = [(12, 3, _causal(5)[None, None], 8), (8, 2, _padding([5, 1], 5), 9), (8, 2, _causal(LONG), 10)]
    for d, h, mask, seed in cases:
        state, x = _mha_state(d, h, seed), _randn((2, mask.shape[-1], d), seed + 80)
        got = impl.call(attention_forward, "FusedQKVAttention", [d, h], _fused(state), [x], mask)
        expect.close(
            got,
            torch_mha(state, h, x, mask=mask),
            f"FusedQKVAttention({d}, {h}) with a mask",
            **TOL,
            alternatives=_fused_mistakes(state, h, x, mask) + _mha_mistakes(state, h, x, mask=mask),
        )


@FUSED.hidden
def test_fused_gradients(impl):
    "gradients of x, qkv_proj and out_proj match autograd through nn.MultiheadAttention (causal mask)"
    state, x, mask = _mha_state(12, 3, 26), _randn((2, 6, 12), 260), _causal(6)[None, None]
    grad_output = _randn((2, 6, 12), 261)
    got = impl.call(attention_backward, "FusedQKVAttention", [12, 3], _fused(state), [x], grad_output, mask)
    expected = torch_mha_gradients(state, 3, grad_output, x, mask=mask)
    check_gradients(
        got,
        {
            "x": expected["x"],
            "qkv_proj.weight": torch.cat([expected[f"{p}.weight"] for p in ("q_proj", "k_proj", "v_proj")]),
            "qkv_proj.bias": torch.cat([expected[f"{p}.bias"] for p in ("q_proj", "k_proj", "v_proj")]),
            "out_proj.weight": expected["out_proj.weight"],
            "out_proj.bias": expected["out_proj.bias"],
        },
        "FusedQKVAttention(12, 3)",
    )


# --- Exercise 3 --------------------------------------------------------------------------


def _gqa_state(d, h, g, seed):
    hd = d // h
    return _projections(d, seed, out_dims={"k_proj": g * hd, "v_proj": g * hd}, bias=False)


def gqa_oracle(state, h, g, x, mask=None, *, grouping="interleave"):
    b, s, d = x.shape
    hd = d // h
    q = (x @ state["q_proj.weight"].T).reshape(b, s, h, hd).transpose(1, 2)
    k = (x @ state["k_proj.weight"].T).reshape(b, s, g, hd).transpose(1, 2)
    v = (x @ state["v_proj.weight"].T).reshape(b, s, g, hd).transpose(1, 2)
    if grouping == "interleave":
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    else:  # the mistake: tile the K/V heads instead of repeating each in place
        out = F.scaled_dot_product_attention(q, k.repeat(1, h // g, 1, 1), v.repeat(1, h // g, 1, 1), attn_mask=mask)
    return out.transpose(1, 2).reshape(b, s, d) @ state["out_proj.weight"].T


@GQA.visible
def test_gqa_parameters_and_output(impl):
    "k_proj/v_proj produce num_kv_heads * head_dim features; query head i reads K/V head i // (num_heads / num_kv_heads)"
    _check_submodules(
        impl,
        "GroupedQueryAttention",
        [16, 4, 2],
        {"q_proj.weight": [16, 16], "k_proj.weight": [8, 16], "v_proj.weight": [8, 16], "out_proj.weight": [16, 16]},
    )
    state, x = _gqa_state(16, 4, 2, 10), _randn((2, 5, 16), 100)
    got = impl.call(attention_forward, "GroupedQueryAttention", [16, 4, 2], state, [x])
    expect.close(
        got,
        gqa_oracle(state, 4, 2, x),
        "GroupedQueryAttention(16, 4, num_kv_heads=2)(x)",
        **TOL,
        alternatives=[
            (
                gqa_oracle(state, 4, 2, x, grouping="tile"),
                "the K/V heads are repeated in the wrong order: with 4 query heads and 2 K/V heads, "
                "query heads 0 and 1 share K/V head 0 (repeat_interleave), not heads 0 and 2 (repeat)",
            )
        ],
    )


@GQA.hidden
def test_gqa_sizes_masks_and_errors(impl):
    "multi-query (1 K/V head), ordinary MHA (num_kv_heads = num_heads), 3 groups, 300 tokens, a causal mask; bad sizes raise"
    for d, h, g, seed, t in [
        (16, 4, 1, 11, 6),
        (16, 4, 4, 12, 6),
        (24, 6, 2, 13, 6),
        (12, 6, 3, 14, 6),
        (8, 4, 2, 15, LONG),
    ]:
        state, x, mask = _gqa_state(d, h, g, seed), _randn((2, t, d), seed + 100), _causal(t)[None, None]
        got = impl.call(attention_forward, "GroupedQueryAttention", [d, h, g], state, [x], mask)
        expect.close(
            got,
            gqa_oracle(state, h, g, x, mask),
            f"GroupedQueryAttention({d}, {h}, {g}) with a causal mask",
            **TOL,
            alternatives=[
                (
                    gqa_oracle(state, h, g, x, mask, grouping="tile"),
                    "the K/V heads are repeated in the wrong order (use repeat_interleave)",
                )
            ],
        )
    for args in ([16, 4, 3], [10, 4, 2]):
        outcome = impl.call(construct_outcome, "GroupedQueryAttention", args)
        expect.that(outcome["raised"] == "ValueError", f"GroupedQueryAttention{tuple(args)} must raise ValueError")


@GQA.hidden
def test_gqa_gradients(impl):
    "gradients of x and of every projection match autograd through scaled_dot_product_attention(enable_gqa=True)"
    state, x, mask = _gqa_state(16, 4, 2, 27), _randn((2, 6, 16), 270), _causal(6)[None, None]
    grad_output = _randn((2, 6, 16), 271)
    got = impl.call(attention_backward, "GroupedQueryAttention", [16, 4, 2], state, [x], grad_output, mask)
    expected = autograd_gradients(lambda st, xx: gqa_oracle(st, 4, 2, xx, mask), state, grad_output, x)
    check_gradients(got, expected, "GroupedQueryAttention(16, 4, 2)")


# --- Exercise 4 --------------------------------------------------------------------------


def _kv_expected(layers, kv_heads, head_dim, seq, batch=1, nbytes=2):
    return 2 * layers * kv_heads * head_dim * seq * batch * nbytes


@KV.visible
def test_kv_cache_llama2_7b(impl):
    "Llama-2-7B (32 layers, 32 K/V heads of 128) at 4096 tokens in bf16: 2 GiB"
    got = impl.call(kv_cache_bytes, 32, 32, 128, 4096)
    expected = _kv_expected(32, 32, 128, 4096)
    expect.that(got["type"] == "int", f"kv_cache_bytes returned a {got['type']}; return a whole number of bytes (int)")
    expect.that(
        got["value"] == expected,
        f"kv_cache_bytes(32, 32, 128, 4096) = {got['value']}, expected {expected} "
        + ("(K AND V are both cached: the factor 2)" if got["value"] * 2 == expected else ""),
    )


@KV.hidden
def test_kv_cache_other_configurations(impl):
    "batch size and bytes per value count; grouped K/V heads shrink the cache; 128k tokens (over 2**32 bytes) stay exact"
    # The last: 2 * 80 * 8 * 128 * 131072 * 16 * 2 bytes, about 1.4e12: beyond 32-bit integers, exact in an int.
    for args in [(80, 8, 128, 4096, 1, 2), (12, 12, 64, 1024, 8, 4), (1, 1, 1, 1, 1, 1), (80, 8, 128, 131072, 16, 2)]:
        got = impl.call(kv_cache_bytes, *args)
        expect.that(
            got["value"] == _kv_expected(*args) and got["type"] == "int",
            f"kv_cache_bytes{args} = {got['value']} (a {got['type']}), expected the int {_kv_expected(*args)}",
        )
    got = impl.call(
        kv_cache_bytes, num_layers=2, num_kv_heads=2, head_dim=4, seq_len=8, batch_size=3, bytes_per_value=1
    )
    expect.that(
        got["value"] == _kv_expected(2, 2, 4, 8, 3, 1),
        f"kv_cache_bytes with keyword arguments gave {got['value']}, expected {_kv_expected(2, 2, 4, 8, 3, 1)}",
    )


# --- Exercise 5 --------------------------------------------------------------------------


def _cross_mistakes(state, h, x, context, mask=None):
    # Values taken from x cannot be one: the checks' x and context differ in length, so such values cannot be
    # attended over (the student's code raises, and the message says so).
    return [
        (torch_mha(state, h, x, x, x), "keys and values come from x; in cross-attention they come from `context`")
    ] + _mha_mistakes(state, h, x, context, mask)


@CROSS.visible
def test_cross_attention_matches_torch(impl):
    "queries from x [batch, tgt, d], keys and values from context [batch, src, d]; equals nn.MultiheadAttention"
    _check_submodules(
        impl,
        "CrossAttention",
        [16, 4],
        {
            f"{p}.{w}": ([16, 16] if w == "weight" else [16])
            for p in ("q_proj", "k_proj", "v_proj", "out_proj")
            for w in ("weight", "bias")
        },
    )
    state, x, context = _mha_state(16, 4, 15), _randn((2, 3, 16), 150), _randn((2, 7, 16), 151)
    got = impl.call(attention_forward, "CrossAttention", [16, 4], state, [x, context])
    expect.close(
        got,
        torch_mha(state, 4, x, context),
        "CrossAttention(16, 4)(x [2, 3, 16], context [2, 7, 16])",
        **TOL,
        alternatives=_cross_mistakes(state, 4, x, context),
    )


@CROSS.hidden
def test_cross_attention_padding(impl):
    "a source padding mask [batch, 1, 1, src_len] hides padded source tokens; 300 target and 280 source tokens"
    for tgt, src, lengths, seed in [(4, 6, [6, 2], 16), (LONG, 280, [280, 100], 17)]:
        state, x, context = (
            _mha_state(12, 3, seed),
            _randn((2, tgt, 12), seed * 10),
            _randn((2, src, 12), seed * 10 + 1),
        )
        mask = _padding(lengths, src)
        got = impl.call(attention_forward, "CrossAttention", [12, 3], state, [x, context], mask)
        expect.close(
            got,
            torch_mha(state, 3, x, context, mask=mask),
            f"CrossAttention with a source padding mask, {tgt} target and {src} source tokens",
            **TOL,
            alternatives=_cross_mistakes(state, 3, x, context, mask),
        )


@CROSS.hidden
def test_cross_attention_gradients(impl):
    "gradients of x, of context and of every parameter match autograd through nn.MultiheadAttention (padding mask)"
    state, x, context = _mha_state(12, 3, 28), _randn((2, 4, 12), 280), _randn((2, 6, 12), 281)
    mask, grad_output = _padding([6, 2], 6), _randn((2, 4, 12), 282)
    got = impl.call(attention_backward, "CrossAttention", [12, 3], state, [x, context], grad_output, mask)
    expected = torch_mha_gradients(state, 3, grad_output, x, context, mask)
    check_gradients(got, expected, "CrossAttention(12, 3)")


# --- Exercise 6 --------------------------------------------------------------------------


def rotary_oracle(state, num_heads, x, mask=None, positions=None, *, rotate=("q", "k"), before_split=False):
    """Attention with interleaved RoPE (Llama's rotation, ``rotate_pairs``, in float64) on the chosen projections."""

    b, s, d = x.shape
    positions = torch.arange(s) if positions is None else positions
    projected = {n: x @ state[f"{n}_proj.weight"].T + state[f"{n}_proj.bias"] for n in ("q", "k", "v")}
    if before_split:
        projected = {n: rotate_pairs(t, positions).float() if n in rotate else t for n, t in projected.items()}
    heads = {n: t.reshape(b, s, num_heads, d // num_heads).transpose(1, 2) for n, t in projected.items()}
    if not before_split:
        heads = {n: rotate_pairs(t, positions).float() if n in rotate else t for n, t in heads.items()}
    out = F.scaled_dot_product_attention(heads["q"], heads["k"], heads["v"], attn_mask=mask)
    return out.transpose(1, 2).reshape(b, s, d) @ state["out_proj.weight"].T + state["out_proj.bias"]


def _rotary_mistakes(state, h, x, mask=None, positions=None):
    return [
        (
            rotary_oracle(state, h, x, mask, positions, rotate=("q", "k", "v")),
            "the values are rotated too; RoPE turns only queries and keys",
        ),
        (
            rotary_oracle(state, h, x, mask, positions, rotate=("q",)),
            "only the queries are rotated; rotate the keys as well",
        ),
        (
            rotary_oracle(state, h, x, mask, positions, rotate=("k",)),
            "only the keys are rotated; rotate the queries as well",
        ),
        (
            rotary_oracle(state, h, x, mask, positions, before_split=True),
            "RoPE is applied before the head split; it works within each head, on [batch, heads, seq, head_dim]",
        ),
        (rotary_oracle(state, h, x, mask, None), "it ignores token_positions and uses 0, 1, 2, ..."),
        (torch_mha(state, h, x, mask=mask), "no rotation is applied: call self.rope on the queries and keys"),
    ]


@ROTARY.visible
def test_rotary_attention_output(impl):
    "queries and keys of every head are rotated by their positions (default 0..seq-1); values are not"
    state, x = _mha_state(16, 4, 17), _randn((2, 5, 16), 170)
    got = impl.call(rotary_forward, [16, 4], state, x)
    expect.close(
        got,
        rotary_oracle(state, 4, x),
        "RotaryMultiHeadAttention(16, 4, rope)(x)",
        **TOL,
        alternatives=_rotary_mistakes(state, 4, x),
    )


@ROTARY.hidden
def test_rotary_attention_positions_and_mask(impl):
    "given token_positions with gaps, and a causal mask"
    # Only differences of positions matter, so a shifted 0..n-1 would not tell; gaps do.
    state, x = _mha_state(24, 3, 18), _randn((2, 6, 24), 180)
    positions, mask = torch.tensor([3, 5, 6, 10, 11, 40]), _causal(6)[None, None]
    got = impl.call(rotary_forward, [24, 3], state, x, mask, positions)
    expect.close(
        got,
        rotary_oracle(state, 3, x, mask, positions),
        "RotaryMultiHeadAttention with positions [3, 5, 6, 10, 11, 40] and a causal mask",
        **TOL,
        alternatives=_rotary_mistakes(state, 3, x, mask, positions),
    )


@ROTARY.hidden
def test_rotary_attention_long_default_positions(impl):
    "the default positions 0..seq-1 for 300 tokens (longer than the notebook's tables)"
    state, x, mask = _mha_state(8, 2, 21), _randn((1, LONG, 8), 210), _causal(LONG)
    try:
        got = impl.call(rotary_forward, [8, 2], state, x, mask)
    except StudentCodeError as error:
        if error.stub:
            raise
        expect.fail(
            f"RotaryMultiHeadAttention(8, 2, rope)(x) for {LONG} tokens, no token_positions, raised {error}: are "
            "the default positions cut from a table made for a fixed maximum length? Use 0, 1, ..., seq - 1 for "
            "the length of x, whatever it is"
        )
    expect.close(
        got,
        rotary_oracle(state, 2, x, mask),
        f"RotaryMultiHeadAttention(8, 2, rope)(x) for {LONG} tokens, no token_positions",
        **TOL,
        alternatives=_rotary_mistakes(state, 2, x, mask),
        hint="Without token_positions, use 0, 1, ..., seq - 1 for the length of x, whatever it is.",
    )


@ROTARY.hidden
def test_rotary_attention_default_positions_fill_the_table(impl):
    "without token_positions, x as long as the rope's table (max_seq_len) uses positions 0..seq-1, all of it"
    # The notebook: "when it is None use 0, 1, ..., seq - 1". Only differences of positions reach the scores, so a
    # shifted default (1..seq) gives the same outputs; a rope whose table holds max_seq_len positions, as notebook
    # 03's RoPE(head_dim, max_seq_len) does (``_TableRoPE``), has no row for position seq = max_seq_len.
    n = 16
    state, x, mask = _mha_state(8, 2, 29), _randn((2, n, 8), 290), _causal(n)
    call = f"RotaryMultiHeadAttention(8, 2, rope) with a rope of max_seq_len={n}, on x of {n} tokens without token_positions"
    fix = "the default positions are 0, 1, ..., seq - 1 (torch.arange(seq)), which fit a table of max_seq_len = seq"
    try:
        got = impl.call(rotary_forward, [8, 2], state, x, mask, max_seq_len=n)
    except StudentCodeError as error:
        if error.stub:
            raise
        expect.fail(f"{call} raised {error}: {fix}; not 1, ..., seq")
    expect.close(
        got,
        rotary_oracle(state, 2, x, mask),
        call,
        **TOL,
        alternatives=_rotary_mistakes(state, 2, x, mask),
        hint=f"{fix}.",
    )


@ROTARY.hidden
def test_rotary_attention_gradients(impl):
    "gradients of x and of every parameter match autograd through the rotary oracle (default positions, causal mask)"
    state, x, mask = _mha_state(16, 4, 30), _randn((2, 6, 16), 300), _causal(6)[None, None]
    grad_output = _randn((2, 6, 16), 301)
    got = impl.call(rotary_backward, [16, 4], state, x, grad_output, mask)
    expected = autograd_gradients(lambda st, xx: rotary_oracle(st, 4, xx, mask), state, grad_output, x)
    check_gradients(got, expected, "RotaryMultiHeadAttention(16, 4, rope)")


@ROTARY.hidden
def test_rotary_attention_default_positions_on_the_device_of_x(impl):
    "without token_positions, the positions are made on the device of x: the layer runs on PyTorch's meta device"
    got = impl.call(rotary_on_meta, [16, 4], [2, 5, 16])
    call = "RotaryMultiHeadAttention(16, 4, rope).to('meta')(x) with x on the meta device and no token_positions"
    fix = "make the default positions on the device of x, torch.arange(seq, device=x.device)"
    expect.that(
        not got["raised"],
        f"{call} raised {got['raised']}: {got['message']}; a tensor your forward makes stays on the CPU: {fix}",
    )
    expect.that(bool(got["positions"]), f"{call} never called self.rope: rotate the queries and keys with it")
    wrong = sorted({device for device in got["positions"] if device != "meta"})
    expect.that(not wrong, f"{call} gave self.rope positions on {', '.join(wrong)}, not on the device of x: {fix}")
    expect.that(
        got["device"] == "meta" and got["shape"] == [2, 5, 16],
        f"{call} returned a tensor on {got['device'] or 'no device'} of shape {got['shape']}; expected "
        "[2, 5, 16] on the device of x",
    )


@ROTARY.hidden
def test_rotary_attention_only_relative_positions_matter(impl):
    "shifting every position by the same amount leaves the output unchanged"
    state, x = _mha_state(16, 2, 19), _randn((1, 7, 16), 190)
    a = impl.call(rotary_forward, [16, 2], state, x, None, torch.arange(7))
    b = impl.call(rotary_forward, [16, 2], state, x, None, torch.arange(7) + 300)
    expect.close(
        b,
        a,
        "the output with positions 300..306 against 0..6",
        atol=1e-4,
        hint="Rotate queries and keys by the SAME positions, inside each head.",
    )


# ---------------------------------------------------------------------------------------------------------------
# Adapters: the only code in this module that touches the student's objects. They run beside the student's code
# (in the sandboxed worker while grading, in the kernel for the notebook's own test cells), build and call the
# student's classes and functions on the inputs a check gives, and return plain results; they compute and report,
# never judge. A check calls one by reference, ``impl.call(name, ...)``; only functions marked ``@adapter`` can be.
#
# Adapters for notebook 05: multi-head, fused-QKV, grouped-query and cross attention.


@adapter
def attention_summary(ns, class_name: str, args: list):
    return summary(need(ns, class_name)(*args))


@adapter
def attention_forward(ns, class_name: str, args: list, state: dict, inputs: list, mask=None):
    """Build ``class_name(*args)``, load ``state`` by name, return ``module(*inputs, mask=mask)``."""
    module = load(need(ns, class_name)(*args), state)
    return module(*inputs, mask=mask)


@adapter
def attention_backward(ns, class_name: str, args: list, state: dict, inputs: list, grad_output, mask=None):
    """``attention_forward`` and a backward pass of ``grad_output``: the output and the gradients of every parameter
    and of the inputs (named ``x``, ``context``)."""
    module = load(need(ns, class_name)(*args), state)
    return forward_backward_inputs(module, grad_output, dict(zip(("x", "context"), inputs, strict=False)), mask=mask)


@adapter
def forward_lines(ns, class_name: str, args: list, inputs: list) -> dict:
    """The work one forward pass of ``class_name(*args)`` does: lines of the student's code, torch calls
    (``lines_run``)."""
    module = need(ns, class_name)(*args)
    return lines_run(module, *inputs)["work"]


@adapter
def construct_outcome(ns, class_name: str, args: list):
    return outcome(need(ns, class_name), *args)


@adapter
def kv_cache_bytes(ns, *args, **kwargs):
    value = need(ns, "kv_cache_bytes")(*args, **kwargs)
    return {"value": value if isinstance(value, (int, float)) else str(value), "type": type(value).__name__}


class _PositionsSeen(nn.Module):
    """A stand-in for ``rope`` that rotates nothing and makes no tensor: it notes the device of the positions it is
    given (``seen``) and returns ``x``, so that on the meta device only the student's own tensors are observed."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def forward(self, x, token_positions):
        self.seen.append(str(getattr(token_positions, "device", type(token_positions).__name__)))
        return x


@adapter
@torch.no_grad()
def rotary_on_meta(ns, args: list, x_shape: list) -> dict:
    """``RotaryMultiHeadAttention(*args, rope)`` moved to PyTorch's meta device and run on a meta ``x`` without
    token_positions (shapes only, no values): what it raised, or its output's device and shape, and the device of
    the positions each call of ``rope`` was given. Positions made on the CPU reach ``rope`` on the CPU (or, mixed
    with meta tensors, raise)."""
    rope = _PositionsSeen()
    module = need(ns, "RotaryMultiHeadAttention")(*args, rope).to("meta")
    made = []
    try:
        result = outcome(lambda: made.append(module(torch.empty(x_shape, device="meta"))))
    except NotImplementedError as error:  # a meta tensor refusing to be read (.tolist(), .cpu()) is no stub
        if "meta" not in str(error):
            raise
        result = {"raised": type(error).__name__, "message": str(error)}
    output = made[0] if made else None
    return result | {
        "device": str(getattr(output, "device", "")),
        "shape": list(getattr(output, "shape", [])),
        "positions": rope.seen,
    }


class _TableRoPE(LlamaRoPE):
    """``LlamaRoPE`` bounded like notebook 03's ``RoPE(head_dim, max_seq_len)``: it looks the positions up in a table
    of ``max_seq_len`` rows, so a position >= max_seq_len raises IndexError."""

    def __init__(self, max_seq_len: int):
        super().__init__()
        self.register_buffer("table", torch.arange(max_seq_len), persistent=False)

    def forward(self, x: torch.Tensor, token_positions: torch.Tensor) -> torch.Tensor:
        return super().forward(x, self.table[torch.as_tensor(token_positions).long()])


@adapter
def rotary_forward(ns, args: list, state: dict, x, mask=None, token_positions=None, max_seq_len=None):
    """The student's attention around the checker's own RoPE, so exercise 6 does not rest on notebook 03 (with
    ``max_seq_len``, one whose table stops there, ``_TableRoPE``)."""
    rope = LlamaRoPE() if max_seq_len is None else _TableRoPE(max_seq_len)
    module = load(need(ns, "RotaryMultiHeadAttention")(*args, rope), state)
    kwargs = {} if token_positions is None else {"token_positions": token_positions}
    return module(x, mask, **kwargs)


@adapter
def rotary_backward(ns, args: list, state: dict, x, grad_output, mask=None):
    """``rotary_forward`` (default positions) and a backward pass of ``grad_output``: the output and the gradients of
    every parameter and of ``x``."""
    module = load(need(ns, "RotaryMultiHeadAttention")(*args, LlamaRoPE()), state)
    return forward_backward_inputs(module, grad_output, {"x": x}, mask)
