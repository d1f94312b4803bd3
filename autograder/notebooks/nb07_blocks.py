"""Notebook 07's exercises, with their checks and adapters: the residual connection, pre-norm and post-norm blocks, encoder and decoder blocks.

Oracles: ``torch.nn.TransformerEncoderLayer`` (``norm_first`` True and False) and
``torch.nn.TransformerDecoderLayer``, with ``dropout=0.0``, ``batch_first=True``, activation
"relu" or "gelu", in train mode (PyTorch's eval-mode fast path returns zeros at padded positions),
with the student's weights copied in (q/k/v stacked into ``in_proj_weight``/``in_proj_bias``,
``fc1``/``fc2`` as ``linear1``/``linear2``) and the masks translated to PyTorch's polarity (True =
NOT allowed; ``*_key_padding_mask`` True = padding); their parameter gradients by autograd; and
invariances: changing future tokens leaves earlier decoder outputs unchanged, changing padded tokens
leaves the real tokens' outputs unchanged. The student's blocks are built with the course's
reference components (``autograder.reference``), so these checks never rest on notebooks 02, 05, 06.
The residual connection is checked against ``x + sublayer(x)`` computed here, and its input
gradient against ``grad + J^T grad`` by autograd.

Diagnoses of known mistakes (post-norm order in a pre-norm block, a missing residual, one LayerNorm
for both sublayers, cross-attention on the decoder's own states, ...) are the same composition
written here with the reference components, each with the mistake.

Forward computes with the parts it was given, not copies of them: each block is also built with components
that are not the reference ones (``_OTHER_COMPONENTS``: a norm that does not centre, RMS-like with LayerNorm's
parameters; attentions and an FFN whose outputs are scaled by 0.5, 1.5 and -0.5), and compared with the same
composition written here from those components (atol 1e-5 + rtol 1e-4, as above: the same operations). A forward
that computes a LayerNorm itself with ``self.norm1``'s weights, or attention or the FFN with their projections,
gives the reference part's result instead, which is how the diagnosis names the part.

The encoder's masks (an all-True one for padding_mask=None, if it makes one) and the decoder's causal mask are
made on the device of x: the block and its inputs are moved to PyTorch's meta device
(shapes without values, so a CPU-only grader can see it); a tensor made on the CPU in forward or kept from
__init__ as a plain attribute cannot be mixed with meta tensors, and raises. The block also runs there on 1100
target tokens, longer than any sequence notebook 07 runs (and than 1024, a common maximum length): a causal mask cut
from a table made in __init__ for a fixed length (a non-persistent buffer moves with the block) has the wrong shape.

Tolerances (float32 on CPU): block outputs atol 1e-5 + rtol 1e-4, parameter gradients atol 1e-4 +
rtol 1e-4. Measured for the solution with the reference components over 40 seeds (pre- and
post-norm blocks of width 8 with relu and gelu, and decoder blocks of width 12 with target and
memory padding, both norm orders): outputs differ from PyTorch's layers by at most 1.0e-6 (LayerNorm
outputs are O(1); PyTorch's fused in-projection sums in another order), gradients by at most
7.6e-6. The closest known mistake, one LayerNorm for both sublayers (the norms' weights are drawn
with standard deviation 0.3), differed by at least 0.52. Invariances: atol 1e-5 (masked keys get
exactly zero weight, so an unchanged output is recomputed from the same numbers).

The parallel block (Exercise 6) has two oracles: Hugging Face's ``GPTJBlock`` (a tiny random
``GPTJConfig``, eager attention, dropout 0, imported lazily here) with the student's weights copied in
(``ln_1`` = norm1, ``mlp.fc_in``/``fc_out`` = ffn.fc1/fc2; GPT-J's attention projections have no biases,
so those cases set the student's to zero; every ``position_ids`` is 0, where GPT-J's rotary embedding
is the identity; the boolean mask becomes GPT-J's additive one), and, for cases with attention biases,
``x + attn(norm1(x)) + ffn(norm1(x))`` composed here from the reference components, with gradients by
autograd through each. Same tolerances as the other blocks. Measured over 60 cases (widths 8 and 12,
relu, gelu and gelu_tanh, causal and no mask): the composition differs from ``GPTJBlock`` by at most
7.2e-7 in outputs and 6.0e-6 in gradients; the closest known mistake (sequential sublayers, FFN on the
attention's output, norm after the sum, ...) differed by at least 0.59.
"""

from __future__ import annotations

import torch
from torch import nn

from autograder import expect
from autograder.adapters import adapter, forward_backward, load, need, outcome, summary
from autograder.exercises import Exercise
from autograder.notebooks._seeds import seeded
from autograder.reference.attention import CrossAttention, MultiHeadAttention
from autograder.reference.feed_forward import FeedForward

RESIDUAL = Exercise("residual", "the residual connection", points=2)
PRE_NORM = Exercise("pre_norm_block", "the pre-norm block", points=3)
POST_NORM = Exercise("post_norm_block", "the post-norm block", points=3)
ENCODER = Exercise("encoder_block", "the encoder block with a padding mask", points=3)
DECODER = Exercise("decoder_block", "the decoder block", points=4)
PARALLEL = Exercise("parallel_block", "the parallel block (GPT-J, PaLM)", points=3)
EXERCISES = [RESIDUAL, PRE_NORM, POST_NORM, ENCODER, DECODER, PARALLEL]
ORACLE_IMPORTS = (
    "transformers.models.gptj.modeling_gptj",
)  # imported while the notebook runs (grading.grade): seconds

TOL = {"atol": 1e-5, "rtol": 1e-4}
GRAD = {"atol": 1e-4, "rtol": 1e-4}
SAME = {"atol": 1e-5, "rtol": 0.0}


_gen, _randn = seeded(7000)


# --- states and the PyTorch oracles ------------------------------------------------------


def _linear(prefix, n_in, n_out, seed):
    return {
        f"{prefix}.weight": _randn((n_out, n_in), seed, n_in**-0.5),
        f"{prefix}.bias": _randn((n_out,), seed + 1, 0.2),
    }


def _norm(prefix, d, seed):
    return {f"{prefix}.weight": 1.0 + _randn((d,), seed, 0.3), f"{prefix}.bias": _randn((d,), seed + 1, 0.3)}


def _attention(prefix, d, seed):
    state = {}
    for i, name in enumerate(("q_proj", "k_proj", "v_proj", "out_proj")):
        state |= _linear(f"{prefix}.{name}", d, d, seed + 10 * i)
    return state


def block_state(d, d_ff, seed, attention="attn", cross=False):
    """A state dict with the course's names: norm1, <attention>, norm2, ffn (and cross_attn, norm3)."""
    state = _attention(attention, d, seed) | _norm("norm1", d, seed + 50) | _norm("norm2", d, seed + 60)
    state |= _linear("ffn.fc1", d, d_ff, seed + 70) | _linear("ffn.fc2", d_ff, d, seed + 80)
    if cross:
        state |= _attention("cross_attn", d, seed + 100) | _norm("norm3", d, seed + 150)
    return state


def _to_torch_attention(state, prefix, target):
    q, k, v = (f"{prefix}.{n}_proj" for n in "qkv")
    return {
        f"{target}.in_proj_weight": torch.cat([state[f"{p}.weight"] for p in (q, k, v)]),
        f"{target}.in_proj_bias": torch.cat([state[f"{p}.bias"] for p in (q, k, v)]),
        f"{target}.out_proj.weight": state[f"{prefix}.out_proj.weight"],
        f"{target}.out_proj.bias": state[f"{prefix}.out_proj.bias"],
    }


def torch_layer(state, d, heads, d_ff, activation, norm_first, attention="attn", decoder=False):
    """PyTorch's own layer with the course-named ``state`` copied in."""
    layer_class = nn.TransformerDecoderLayer if decoder else nn.TransformerEncoderLayer
    layer = layer_class(d, heads, d_ff, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first)
    copied = _to_torch_attention(state, attention, "self_attn")
    copied |= {
        "linear1.weight": state["ffn.fc1.weight"],
        "linear1.bias": state["ffn.fc1.bias"],
        "linear2.weight": state["ffn.fc2.weight"],
        "linear2.bias": state["ffn.fc2.bias"],
    }
    norms = ("norm1", "norm2", "norm3") if decoder else ("norm1", "norm2")
    copied |= {f"{n}.{p}": state[f"{n}.{p}"] for n in norms for p in ("weight", "bias")}
    if decoder:
        copied |= _to_torch_attention(state, "cross_attn", "multihead_attn")
    layer.load_state_dict(copied, strict=True)
    return layer.train()  # train mode with dropout 0: no fast path, which zeroes padded positions


def _from_torch_grads(layer, d, attention="attn"):
    """The layer's parameter gradients under the course's names."""
    grads = {}
    for name, p in layer.named_parameters():
        g = p.grad
        target = {"self_attn": attention, "multihead_attn": "cross_attn"}.get(name.split(".")[0])
        if name.endswith("in_proj_weight") or name.endswith("in_proj_bias"):
            kind = "weight" if name.endswith("weight") else "bias"
            for i, proj in enumerate(("q_proj", "k_proj", "v_proj")):
                grads[f"{target}.{proj}.{kind}"] = g[i * d : (i + 1) * d]
        elif name.startswith(("self_attn.", "multihead_attn.")):
            grads[f"{target}.{name.split('.', 1)[1]}"] = g
        elif name.startswith("linear"):
            grads[name.replace("linear", "ffn.fc")] = g
        else:
            grads[name] = g
    return grads


def _not(mask):
    return None if mask is None else ~mask


def encoder_oracle(
    state, x, heads, d_ff, activation, norm_first, mask=None, padding=None, attention="attn", grad_output=None
):
    layer = torch_layer(state, x.shape[-1], heads, d_ff, activation, norm_first, attention)
    out = layer(x, src_mask=_not(mask), src_key_padding_mask=_not(padding))
    if grad_output is None:
        return out.detach(), None
    out.backward(grad_output)
    return out.detach(), _from_torch_grads(layer, x.shape[-1], attention)


def causal(length):
    return torch.ones(length, length, dtype=torch.bool).tril()


def decoder_oracle(
    state, x, memory, heads, d_ff, activation, norm_first, tgt_padding=None, memory_padding=None, grad_output=None
):
    layer = torch_layer(state, x.shape[-1], heads, d_ff, activation, norm_first, "self_attn", decoder=True)
    out = layer(
        x,
        memory,
        tgt_mask=~causal(x.shape[1]),
        tgt_key_padding_mask=_not(tgt_padding),
        memory_key_padding_mask=_not(memory_padding),
    )
    if grad_output is None:
        return out.detach(), None
    out.backward(grad_output)
    return out.detach(), _from_torch_grads(layer, x.shape[-1], "self_attn")


# --- the same blocks composed here from reference components, for diagnoses -------------


class _Parts:
    """A block's parts with ``state`` loaded: the reference components, except those named in ``other`` (norm1,
    norm2, norm3, attn, cross, ffn), which are ``_OTHER_COMPONENTS``'."""

    def __init__(self, state, d, heads, d_ff, activation, attention="attn", other=()):
        def sub(prefix):
            return {k[len(prefix) + 1 :]: v for k, v in state.items() if k.startswith(prefix + ".")}

        def component(part, argument):
            return (_OTHER_COMPONENTS if part in other else COMPONENTS_BY_ARGUMENT)[argument]

        self.attn = component("attn", "attention")(d, heads)
        self.attn.load_state_dict(sub(attention))
        self.ffn = component("ffn", "feed_forward")(d, d_ff, activation)
        self.ffn.load_state_dict(sub("ffn"))
        self.norms = {}
        for n in ("norm1", "norm2", "norm3"):
            if f"{n}.weight" in state:
                self.norms[n] = component(n, "norm")(d)
                self.norms[n].load_state_dict(sub(n))
        if "cross_attn.q_proj.weight" in state:
            self.cross = component("cross", "cross_attention")(d, heads)
            self.cross.load_state_dict(sub("cross_attn"))


# --- components other than the reference ones, to see that forward computes with the parts it was given -------


class _UncentredNorm(nn.Module):
    """A norm that is not a LayerNorm (it does not subtract the mean: RMSNorm with a bias), with LayerNorm's
    parameter names and shapes, so the block's state dict is unchanged."""

    def __init__(self, d_model: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight + self.bias


class _HalfAttention(MultiHeadAttention):
    """The reference self-attention, its output scaled by 0.5."""

    def forward(self, *args, **kwargs):
        return 0.5 * super().forward(*args, **kwargs)


class _ScaledCrossAttention(CrossAttention):
    """The reference cross-attention, its output scaled by 1.5."""

    def forward(self, *args, **kwargs):
        return 1.5 * super().forward(*args, **kwargs)


class _NegatedFeedForward(FeedForward):
    """The reference FFN, its output scaled by -0.5."""

    def forward(self, *args, **kwargs):
        return -0.5 * super().forward(*args, **kwargs)


COMPONENTS_BY_ARGUMENT = {
    "attention": MultiHeadAttention,
    "cross_attention": CrossAttention,
    "feed_forward": FeedForward,
    "norm": nn.LayerNorm,
}
_OTHER_COMPONENTS = {
    "attention": _HalfAttention,
    "cross_attention": _ScaledCrossAttention,
    "feed_forward": _NegatedFeedForward,
    "norm": _UncentredNorm,
}


def _check_uses_parts(impl, class_name, args, kwargs, state, inputs, call_kwargs, oracle, what):
    """``class_name(*args, **kwargs)`` built with ``_OTHER_COMPONENTS`` and loaded with ``state`` computes the
    composition ``oracle(parts)`` of those same components; when it computes it with one part replaced by the
    reference component instead, the message names that part (forward re-implements it, with its weights)."""
    got = impl.call(block_forward, class_name, args, kwargs, state, inputs, call_kwargs, components="other")
    attention = "self_attn" if "self_attn.q_proj.weight" in state else "attn"
    calls = {n: f"self.{n}(...)" for n in ("norm1", "norm2", "norm3") if f"{n}.weight" in state}
    calls |= {"attn": f"self.{attention}(h, mask)", "ffn": "self.ffn(h)"}
    if "cross_attn.q_proj.weight" in state:
        calls["cross"] = "self.cross_attn(h, memory, memory_mask)"
    d, heads, d_ff = args
    activation = kwargs.get("activation", "relu")

    @torch.no_grad()
    def composition(other):
        return oracle(_Parts(state, d, heads, d_ff, activation, attention, other=other))

    mistakes = [
        (
            composition(set(calls) - {part}),
            f"forward does not compute with {call.split('(')[0]}, the part built from the constructor argument: it "
            f"recomputes it (with its weights?) as the default component would; call it, {call}, so that a "
            "caller's component is what the block computes with",
        )
        for part, call in calls.items()
    ]
    expected = composition(set(calls))
    expect.close(
        got["output"],
        expected,
        f"{what}, built with components other than the reference ones (a norm that does not centre; attention "
        "and FFN outputs scaled)",
        **TOL,
        alternatives=mistakes,
        hint="The oracle is the same formula composed from the components the block was given: forward must call "
        "its parts (self.norm1(x), self.attn(h, mask), self.ffn(h), ...), not recompute them.",
    )


@torch.no_grad()
def composed(parts, x, steps, mask=None, memory=None, memory_mask=None):
    """A block as a list of (kind, sublayer, norm) steps, kinds including a few known mistakes."""
    for kind, sub, norm_name in steps:
        norm = parts.norms[norm_name]

        def f(h, sub=sub):
            if sub == "attn":
                return parts.attn(h, mask)
            if sub == "cross":
                return parts.cross(h, memory, memory_mask)
            if sub == "self-cross":  # cross-attention reading the decoder's own states
                return parts.cross(h, h, None)
            return parts.ffn(h)

        if kind == "pre":
            x = x + f(norm(x))
        elif kind == "post":
            x = norm(x + f(x))
        elif kind == "bare-pre":  # residual missing
            x = f(norm(x))
        elif kind == "bare-post":
            x = norm(f(x))
        elif kind == "normed-pre":  # the residual stream itself normalized: h = norm(x); x = h + f(h)
            h = norm(x)
            x = h + f(h)
        elif kind == "prepost":  # norm before and after: norm(x + f(norm(x)))
            x = norm(x + f(norm(x)))
    return x


def _check_gradients(got, what, expected_grads):
    grads = expect.gradients(got, what)
    for name, value in expected_grads.items():
        expect.close(grads.get(name), value, f"the gradient of {name}", **GRAD)


# --- Exercise 1 --------------------------------------------------------------------------

RESIDUAL_NAMES = "store the sublayer as self.sublayer (an nn.Module attribute, so its parameters are registered)"


def _residual_case(impl, kind, d, seed, shape, mask=None, grads=False):
    sub = nn.Linear(d, d) if kind == "linear" else MultiHeadAttention(d, 2)
    state = _linear("sublayer", d, d, seed) if kind == "linear" else _attention("sublayer", d, seed)
    sub.load_state_dict({k.split(".", 1)[1]: v for k, v in state.items()})
    x, grad_output = _randn(shape, seed + 5), (_randn(shape, seed + 6) if grads else None)
    call_kwargs = {} if mask is None else {"mask": mask}
    got = impl.call(residual_forward, kind, d, state, x, call_kwargs, grad_output)
    what = f"Residual({'nn.Linear' if kind == 'linear' else 'MultiHeadAttention'}({d}, ...))(x{', mask=mask' * (mask is not None)})"
    expect.that(isinstance(got, dict) and "input_after" in got, f"{what} did not run")
    expect.that(
        torch.equal(got["input_after"], got["input_before"]),
        f"{what} changes its input x in place (x += ...): the caller's x must stay as it was; "
        "return x + self.sublayer(x) as a new tensor",
    )
    with torch.no_grad():
        inner = sub(x, **call_kwargs)
        mistakes = [
            (inner, "the residual is missing: return x + self.sublayer(x), not the sublayer's output alone"),
            (x, "the sublayer's output is not added: return x + self.sublayer(x)"),
            (2 * x + inner, "x is added twice: x + self.sublayer(x)"),
        ]
        if mask is not None:
            mistakes.append(
                (
                    x + sub(x),
                    "the mask does not reach the sublayer: pass the extra arguments on, "
                    "forward(x, *args, **kwargs) returns x + self.sublayer(x, *args, **kwargs)",
                )
            )
    expect.close(got["output"], x + inner, what, **TOL, alternatives=mistakes)
    if grads:
        g = expect.gradients(got, what)
        xr = x.clone().requires_grad_()
        params = dict(sub.named_parameters())
        (xr + sub(xr, **call_kwargs)).backward(grad_output)
        expect.close(
            got.get("input_grad"),
            xr.grad,
            f"the gradient of x through {what}",
            **GRAD,
            alternatives=[
                (
                    xr.grad - grad_output,
                    "the identity path x carries no gradient: do not detach x "
                    "(no x.detach() or x.data); the gradient of x + f(x) is grad + J^T grad",
                )
            ],
        )
        for name, p in params.items():
            expect.close(g.get(f"sublayer.{name}"), p.grad, f"the gradient of sublayer.{name}", **GRAD)


@RESIDUAL.visible
def test_residual_adds_the_input(impl):
    "Residual(nn.Linear(8, 8))(x) equals x + linear(x), keeps the sublayer's parameters, leaves x unchanged"
    got = impl.call(residual_summary, "linear", 8)
    expect.that("parameters" in got, "Residual(sublayer) is not an nn.Module: subclass nn.Module")
    expect.that(
        got["parameters"] == {"sublayer.weight": [8, 8], "sublayer.bias": [8]},
        f"Residual(nn.Linear(8, 8)) has parameters {got['parameters']}, expected sublayer.weight and "
        f"sublayer.bias: the sublayer is not registered; {RESIDUAL_NAMES}",
    )
    _residual_case(impl, "linear", 8, 0, (2, 5, 8))


@RESIDUAL.hidden
def test_residual_passes_arguments_on(impl):
    "extra arguments reach the sublayer: Residual(attention)(x, mask=causal) equals x + attention(x, causal)"
    _residual_case(impl, "attention", 8, 10, (2, 6, 8), mask=causal(6))
    _residual_case(impl, "linear", 12, 20, (7, 12))


@RESIDUAL.hidden
def test_residual_gradients(impl):
    "the gradient reaches x through both paths (grad + J^T grad) and reaches the sublayer's parameters"
    _residual_case(impl, "linear", 8, 30, (3, 4, 8), grads=True)
    _residual_case(impl, "attention", 8, 40, (2, 5, 8), mask=causal(5), grads=True)


# --- Exercises 2 and 3 -------------------------------------------------------------------


def _block_parameters(d, d_ff, attention="attn", cross=False):
    shapes = {}
    for prefix in (attention, "cross_attn") if cross else (attention,):
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            shapes |= {f"{prefix}.{proj}.weight": [d, d], f"{prefix}.{proj}.bias": [d]}
    for n in ("norm1", "norm2", "norm3") if cross else ("norm1", "norm2"):
        shapes |= {f"{n}.weight": [d], f"{n}.bias": [d]}
    return shapes | {
        "ffn.fc1.weight": [d_ff, d],
        "ffn.fc1.bias": [d_ff],
        "ffn.fc2.weight": [d, d_ff],
        "ffn.fc2.bias": [d],
    }


_MADE_BY = {
    "norm": "norm",
    "attn": "attention",
    "self_attn": "attention",
    "cross_attn": "cross_attention",
    "ffn": "feed_forward",
}


def _check_parts_from_arguments(impl, class_name, args, kwargs, expected):
    """Each part (norm1, attn, ...) is what calling its constructor argument returned (recording factories)."""
    parts = impl.call(block_parts, class_name, args, kwargs)
    for name in sorted({n.split(".")[0] for n in expected}):
        argument = _MADE_BY[name.rstrip("0123456789")]
        expect.that(
            parts.get(name) == argument,
            f"{class_name}.{name} was not made by calling the `{argument}` argument "
            + (f"(it came from `{parts[name]}`)" if parts.get(name) else "(a class named directly?)")
            + f": build it as self.{name} = {argument}(...), so that a caller's {argument}= is used",
        )


def _check_block_parameters(impl, class_name, args, kwargs, expected, names):
    got = impl.call(block_summary, class_name, args, kwargs)
    call = f"{class_name}({', '.join(map(str, args))}, ...)"
    expect.that("parameters" in got, f"{call} is not an nn.Module")
    params = got["parameters"]
    if params == expected:
        _check_parts_from_arguments(impl, class_name, args, kwargs, expected)
        return
    norms = sorted(n.split(".")[0] for n in expected if n.startswith("norm") and n.endswith("weight"))
    lost = [n for n in norms if f"{n}.weight" not in params]
    if lost and set(expected) - set(params) == {f"{n}.{p}" for n in lost for p in ("weight", "bias")}:
        expect.fail(
            f"{call} has no parameters named {', '.join(lost)}: one LayerNorm is shared by several "
            f"sublayers (or not created); each sublayer needs its own, {', '.join(norms)} = norm(d_model)"
        )
    missing, extra = sorted(set(expected) - set(params)), sorted(set(params) - set(expected))
    expect.fail(
        f"{call} has parameters that differ from the expected names and shapes (missing: {missing[:6]}, "
        f"unexpected: {extra[:6]}). {names}"
    )


PRE_NAMES = (
    "self.norm1 = norm(d_model), self.attn = attention(d_model, num_heads), self.norm2 = norm(d_model), "
    "self.ffn = feed_forward(d_model, d_ff, activation); the names matter, checkpoints load by name"
)


def _block_mistakes(parts, x, mask, pre):
    first, second = ("pre", "post") if pre else ("post", "pre")
    mistakes = [
        (
            composed(parts, x, [(second, "attn", "norm1"), (second, "ffn", "norm2")], mask),
            "this is the post-norm order; a pre-norm block normalizes the sublayer's input inside the branch: "
            "x = x + attn(norm1(x)), then x = x + ffn(norm2(x))"
            if pre
            else "this is the pre-norm order; a post-norm block normalizes after the residual add: x = norm1(x + attn(x)), "
            "then x = norm2(x + ffn(x))",
        ),
        (
            composed(parts, x, [(f"bare-{first}", "attn", "norm1"), (first, "ffn", "norm2")], mask),
            "the residual connection around attention is missing: add the block's input back (x + ...)",
        ),
        (
            composed(parts, x, [(first, "attn", "norm1"), (f"bare-{first}", "ffn", "norm2")], mask),
            "the residual connection around the feed-forward network is missing: add its input back (x + ...)",
        ),
        (
            composed(parts, x, [(first, "attn", "norm1"), (first, "ffn", "norm1")], mask),
            "norm1 is used for both sublayers; the feed-forward network's LayerNorm is norm2",
        ),
        (
            composed(parts, x, [(first, "attn", "norm1"), (first, "ffn", "norm2")], None),
            "the mask does not reach the attention: pass mask on to self.attn(..., mask)",
        ),
    ]
    if pre:
        mistakes += [
            (
                composed(parts, x, [("prepost", "attn", "norm1"), ("prepost", "ffn", "norm2")], mask),
                "the norm is applied after the residual add as well; in a pre-norm block the residual stream x is "
                "never normalized: x = x + attn(norm1(x))",
            ),
            (
                composed(parts, x, [("normed-pre", "attn", "norm1"), ("normed-pre", "ffn", "norm2")], mask),
                "the residual adds the normalized h = norm1(x) instead of x: keep the residual stream as it is, "
                "x = x + attn(norm1(x))",
            ),
        ]
    return mistakes


def _block_case(impl, class_name, d, heads, d_ff, activation, shape, seed, mask, grads=False):
    pre = class_name == "PreNormBlock"
    state, x = block_state(d, d_ff, seed), _randn(shape, seed + 500)
    grad_output = _randn(shape, seed + 600) if grads else None
    kwargs = {"activation": activation}
    got = impl.call(block_forward, class_name, [d, heads, d_ff], kwargs, state, [x], {"mask": mask}, grad_output)
    expected, expected_grads = encoder_oracle(
        state, x, heads, d_ff, activation, pre, mask=mask, grad_output=grad_output
    )
    parts = _Parts(state, d, heads, d_ff, activation)
    mistakes = _block_mistakes(parts, x, mask, pre)
    other = "gelu" if activation == "relu" else "relu"
    mistakes.append(
        (
            encoder_oracle(state, x, heads, d_ff, other, pre, mask=mask)[0],
            f"the feed-forward network uses {other} where activation={activation!r} was asked: "
            "pass activation on to feed_forward(d_model, d_ff, activation)",
        )
    )
    what = (
        f"{class_name}({d}, {heads}, {d_ff}, activation={activation!r})(x, mask="
        f"{'None' if mask is None else 'causal'}) for x of shape {list(shape)}"
    )
    expect.close(
        got["output"],
        expected,
        what,
        **TOL,
        alternatives=mistakes,
        hint=f"The oracle is nn.TransformerEncoderLayer(norm_first={pre}) with your weights copied in.",
    )
    if grads:
        _check_gradients(got, what, expected_grads)


def _block_checks(exercise, class_name):
    pre = class_name == "PreNormBlock"
    layer = f"nn.TransformerEncoderLayer(norm_first={pre})"

    @exercise.visible
    def test_parameters(impl):
        _check_block_parameters(impl, class_name, [8, 2, 32], {}, _block_parameters(8, 32), PRE_NAMES)

    test_parameters.__doc__ = "norm1, attn, norm2, ffn built from the components it is given (names and shapes)"

    @exercise.visible
    def test_forward(impl):
        _block_case(impl, class_name, 8, 2, 32, "relu", (2, 5, 8), 0, causal(5))

    test_forward.__doc__ = f"{class_name}(8, 2, 32) with a causal mask equals {layer} with the same weights"

    @exercise.hidden
    def test_options_and_shapes(impl):
        _block_case(impl, class_name, 12, 3, 20, "gelu", (3, 7, 12), 10, None)
        _block_case(
            impl,
            class_name,
            16,
            4,
            48,
            "relu",
            (1, 9, 16),
            20,
            (torch.rand(9, 9, generator=_gen(3)) > 0.4) | torch.eye(9, dtype=torch.bool),
        )

    test_options_and_shapes.__doc__ = "activation='gelu', no mask, a random mask, other widths, heads and lengths"

    @exercise.hidden
    def test_gradients(impl):
        _block_case(impl, class_name, 8, 2, 24, "gelu", (2, 6, 8), 30, causal(6), grads=True)

    test_gradients.__doc__ = f"parameter gradients equal autograd's through {layer}"

    @exercise.hidden
    def test_uses_its_parts(impl):
        state, x, mask = block_state(8, 24, 45), _randn((2, 5, 8), 545), causal(5)
        _check_uses_parts(
            impl,
            class_name,
            [8, 2, 24],
            {},
            state,
            [x],
            {"mask": mask},
            lambda parts: composed(parts, x, _order(pre, [("attn", "norm1"), ("ffn", "norm2")]), mask),
            f"{class_name}(8, 2, 24)(x, mask=causal)",
        )

    test_uses_its_parts.__doc__ = (
        "forward computes with the parts it was given: built with other components (a norm that is not a "
        "LayerNorm), it equals the same formula composed from them"
    )
    for function, name in (
        (test_parameters, "parameters"),
        (test_forward, "forward"),
        (test_options_and_shapes, "options_and_shapes"),
        (test_gradients, "gradients"),
        (test_uses_its_parts, "uses_its_parts"),
    ):
        function.__name__ = function.__qualname__ = f"test_{class_name.lower()}_{name}"


_block_checks(PRE_NORM, "PreNormBlock")
_block_checks(POST_NORM, "PostNormBlock")


# --- Exercise 4 --------------------------------------------------------------------------

ENCODER_NAMES = (
    "self.self_attn = attention(d_model, num_heads), self.norm1 = norm(d_model), self.ffn = "
    "feed_forward(d_model, d_ff, activation), self.norm2 = norm(d_model)"
)


def _padding(batch, length, real_lengths):
    """Right padding: True for the first real_lengths[b] positions of sequence b."""
    return torch.arange(length)[None, :] < torch.tensor(real_lengths)[:, None]


def _order(norm_first, subs):
    return [("pre" if norm_first else "post", sub, norm) for sub, norm in subs]


def _encoder_mistakes(parts, x, padding, norm_first):
    keys = None if padding is None else padding[:, None, None, :]
    steps = _order(norm_first, [("attn", "norm1"), ("ffn", "norm2")])
    length = x.shape[1]
    mistakes = [
        (
            composed(parts, x, _order(not norm_first, [("attn", "norm1"), ("ffn", "norm2")]), keys),
            f"norm_first={norm_first} asks for the {'pre' if norm_first else 'post'}-norm order: "
            + (
                "x = x + self_attn(norm1(x)), then x = x + ffn(norm2(x))"
                if norm_first
                else "x = norm1(x + self_attn(x)), then x = norm2(x + ffn(x))"
            ),
        ),
        (
            composed(parts, x, steps, causal(length) if keys is None else keys & causal(length)),
            "an encoder attends in both directions: there is no causal mask, only the padding mask",
        ),
    ]
    if padding is not None:
        mistakes += [
            (
                composed(parts, x, steps, ~keys),
                "the padding mask is inverted: padding_mask is True for real tokens, "
                "and in an attention mask True means 'may attend'",
            ),
            (
                composed(parts, x, steps, None),
                "the padding mask does not reach the attention: build "
                "mask = padding_mask[:, None, None, :] and pass it to self.self_attn",
            ),
            (
                composed(parts, x, steps, padding[:, None, :, None]),
                "the padding mask is on the query axis: padded "
                "*keys* must be hidden from every query, mask = padding_mask[:, None, None, :] (the last axis is keys)",
            ),
        ]
    return mistakes + _block_mistakes(parts, x, keys, norm_first)[1:4]


def _encoder_case(impl, d, heads, d_ff, activation, norm_first, shape, seed, real_lengths=None, grads=False):
    state, x = block_state(d, d_ff, seed, "self_attn"), _randn(shape, seed + 500)
    padding = None if real_lengths is None else _padding(shape[0], shape[1], real_lengths)
    grad_output = _randn(shape, seed + 600) if grads else None
    kwargs = {"activation": activation, "norm_first": norm_first}
    got = impl.call(
        block_forward,
        "EncoderBlock",
        [d, heads, d_ff],
        kwargs,
        state,
        [x],
        {"padding_mask": padding},
        grad_output,
    )
    expected, expected_grads = encoder_oracle(
        state, x, heads, d_ff, activation, norm_first, padding=padding, attention="self_attn", grad_output=grad_output
    )
    parts = _Parts(state, d, heads, d_ff, activation, "self_attn")
    what = (
        f"EncoderBlock({d}, {heads}, {d_ff}, activation={activation!r}, norm_first={norm_first})(x, padding_mask)"
        f" for x of shape {list(shape)}, real lengths {real_lengths}"
    )
    expect.close(
        got["output"],
        expected,
        what,
        **TOL,
        alternatives=_encoder_mistakes(parts, x, padding, norm_first),
        hint=f"The oracle is nn.TransformerEncoderLayer(norm_first={norm_first}) with your weights copied in "
        "and src_key_padding_mask = ~padding_mask.",
    )
    if grads:
        _check_gradients(got, what, expected_grads)


def _padding_invariance(impl, class_name, args, kwargs, state, inputs, call_kwargs, changed, real, what):
    """Changing padded tokens (inputs -> changed) leaves the outputs at the ``real`` positions unchanged."""
    first = expect.tensor(
        impl.call(block_forward, class_name, args, kwargs, state, inputs, call_kwargs)["output"], what
    )
    second = expect.tensor(
        impl.call(block_forward, class_name, args, kwargs, state, changed, call_kwargs)["output"], what
    )
    expect.that(first.shape == second.shape, f"{what} changes shape with its input")
    delta = (first - second).abs()[real]
    return float(delta.max()) if delta.numel() else 0.0


@ENCODER.visible
def test_encoder_parameters(impl):
    "self_attn, norm1, ffn, norm2 built from the components it is given (names and shapes)"
    _check_block_parameters(impl, "EncoderBlock", [8, 2, 32], {}, _block_parameters(8, 32, "self_attn"), ENCODER_NAMES)


@ENCODER.visible
def test_encoder_forward_with_padding(impl):
    "EncoderBlock(8, 2, 32) (post-norm) with a padding mask equals nn.TransformerEncoderLayer with src_key_padding_mask"
    _encoder_case(impl, 8, 2, 32, "relu", False, (3, 6, 8), 0, real_lengths=[6, 4, 2])


@ENCODER.visible
def test_encoder_padding_is_invisible(impl):
    "changing the padded tokens leaves the outputs of the real tokens unchanged"
    state, x = block_state(8, 32, 5, "self_attn"), _randn((2, 7, 8), 505)
    padding = _padding(2, 7, [7, 3])
    changed = torch.where(padding[..., None], x, _randn((2, 7, 8), 506, 5.0))
    for norm_first in (False, True):
        delta = _padding_invariance(
            impl,
            "EncoderBlock",
            [8, 2, 32],
            {"norm_first": norm_first},
            state,
            [x],
            {"padding_mask": padding},
            [changed],
            padding,
            "EncoderBlock(8, 2, 32)(x, padding_mask)",
        )
        expect.that(
            delta <= SAME["atol"],
            f"with norm_first={norm_first}, changing the padded tokens changed the "
            f"outputs of real tokens by up to {delta:.3g}: padded keys must be hidden from every query. "
            "padding_mask is [batch, seq], True = real token; the attention mask is "
            "padding_mask[:, None, None, :] (True = may attend, on the key axis)",
        )


@ENCODER.hidden
def test_encoder_options(impl):
    "norm_first=True, activation='gelu', no padding mask, other widths and heads"
    _encoder_case(impl, 8, 2, 32, "relu", True, (3, 6, 8), 10, real_lengths=[6, 4, 2])
    _encoder_case(impl, 12, 3, 20, "gelu", False, (2, 5, 12), 20)
    _encoder_case(impl, 16, 4, 40, "gelu", True, (2, 8, 16), 30, real_lengths=[1, 8])


@ENCODER.hidden
def test_encoder_gradients(impl):
    "parameter gradients equal autograd's through nn.TransformerEncoderLayer, pre- and post-norm"
    for norm_first in (False, True):
        _encoder_case(impl, 8, 2, 24, "gelu", norm_first, (2, 6, 8), 40 + norm_first, real_lengths=[6, 3], grads=True)


@ENCODER.hidden
def test_encoder_uses_its_parts(impl):
    "forward computes with the parts it was given (a norm that is not a LayerNorm...), pre- and post-norm"
    state, x = block_state(8, 24, 46, "self_attn"), _randn((2, 6, 8), 546)
    padding = _padding(2, 6, [6, 4])
    for norm_first in (False, True):
        _check_uses_parts(
            impl,
            "EncoderBlock",
            [8, 2, 24],
            {"norm_first": norm_first},
            state,
            [x],
            {"padding_mask": padding},
            lambda parts, norm_first=norm_first: composed(
                parts, x, _order(norm_first, [("attn", "norm1"), ("ffn", "norm2")]), padding[:, None, None, :]
            ),
            f"EncoderBlock(8, 2, 24, norm_first={norm_first})(x, padding_mask)",
        )


@ENCODER.hidden
def test_encoder_on_the_device_of_x(impl):
    "any mask the block makes is made on the device of x: the block runs on another device (PyTorch's meta device)"
    for padded in (False, True):
        got = impl.call(encoder_on_meta, [8, 2, 32], [2, 5, 8], padded)
        call = f"EncoderBlock(8, 2, 32).to('meta')(x{', padding_mask' * padded}) with x on the meta device" + (
            "" if padded else ", padding_mask=None"
        )
        expect.that(
            not got["raised"],
            f"{call} raised {got['raised']}: {got['message']}; a tensor your block makes stays on the CPU while x "
            "is elsewhere: with padding_mask=None, pass no mask (None) to the attention, or make any mask on the "
            "device of x (an all-True mask made with torch.ones(...) without device=x.device is on the CPU)",
        )
        expect.that(
            got["device"] == "meta" and got["shape"] == [2, 5, 8],
            f"{call} returned a tensor on {got['device'] or 'no device'} of shape {got['shape']}; expected "
            "[2, 5, 8] on the device of x",
        )


# --- Exercise 5 --------------------------------------------------------------------------

DECODER_NAMES = (
    "self.self_attn = attention(d_model, num_heads), self.norm1, self.cross_attn = "
    "cross_attention(d_model, num_heads), self.norm2, self.ffn = feed_forward(d_model, d_ff, activation), "
    "self.norm3, each norm = norm(d_model)"
)


def _decoder_mistakes(parts, x, memory, tgt_padding, memory_padding, norm_first):
    length = x.shape[1]
    self_mask = causal(length) if tgt_padding is None else causal(length) & tgt_padding[:, None, None, :]
    memory_mask = None if memory_padding is None else memory_padding[:, None, None, :]
    subs = [("attn", "norm1"), ("cross", "norm2"), ("ffn", "norm3")]

    def run(steps, mask=self_mask, mem_mask=memory_mask):
        return composed(parts, x, steps, mask, memory, mem_mask)

    kind = "pre" if norm_first else "post"
    mistakes = [
        (
            run(_order(norm_first, [("attn", "norm1"), ("self-cross", "norm2"), ("ffn", "norm3")])),
            "the cross-attention reads the decoder's own states: its keys and values come from memory (the encoder's "
            "output), cross_attn(h, memory, memory_mask), only its queries from the decoder",
        ),
        (
            run(_order(norm_first, subs), mask=None if tgt_padding is None else tgt_padding[:, None, None, :]),
            "the self-attention has no causal mask: a token must not see the tokens after it",
        ),
        (
            run(_order(not norm_first, subs)),
            f"norm_first={norm_first} asks for the {'pre' if norm_first else 'post'}-norm order in all three sublayers",
        ),
        (
            run(_order(norm_first, [("cross", "norm1"), ("attn", "norm2"), ("ffn", "norm3")])),
            "the sublayers are in the wrong order: causal self-attention first, then cross-attention, then the FFN",
        ),
        (
            run([(kind, "attn", "norm1"), (f"bare-{kind}", "cross", "norm2"), (kind, "ffn", "norm3")]),
            "the residual connection around the cross-attention is missing",
        ),
        (
            run([(kind, "attn", "norm1"), (kind, "cross", "norm2"), (kind, "ffn", "norm2")]),
            "norm2 is used twice; the FFN's LayerNorm is norm3",
        ),
    ]
    if memory_padding is not None:
        mistakes.append(
            (
                run(_order(norm_first, subs), mem_mask=None),
                "memory_padding does not reach the cross-attention: mask = memory_padding[:, None, None, :]",
            )
        )
    if tgt_padding is not None:
        mistakes.append(
            (
                run(_order(norm_first, subs), mask=causal(length)),
                "tgt_padding does not reach the "
                "self-attention: combine it with the causal mask, causal & tgt_padding[:, None, None, :]",
            )
        )
    return mistakes


def _decoder_case(
    impl,
    d,
    heads,
    d_ff,
    activation,
    norm_first,
    shape,
    memory_len,
    seed,
    tgt_lengths=None,
    memory_lengths=None,
    grads=False,
):
    state = block_state(d, d_ff, seed, "self_attn", cross=True)
    x, memory = _randn(shape, seed + 500), _randn((shape[0], memory_len, d), seed + 501)
    tgt_padding = None if tgt_lengths is None else _padding(shape[0], shape[1], tgt_lengths)
    memory_padding = None if memory_lengths is None else _padding(shape[0], memory_len, memory_lengths)
    grad_output = _randn(shape, seed + 600) if grads else None
    kwargs = {"activation": activation, "norm_first": norm_first}
    got = impl.call(
        block_forward,
        "DecoderBlock",
        [d, heads, d_ff],
        kwargs,
        state,
        [x, memory],
        {"tgt_padding": tgt_padding, "memory_padding": memory_padding},
        grad_output,
    )
    expected, expected_grads = decoder_oracle(
        state, x, memory, heads, d_ff, activation, norm_first, tgt_padding, memory_padding, grad_output
    )
    parts = _Parts(state, d, heads, d_ff, activation, "self_attn")
    what = (
        f"DecoderBlock({d}, {heads}, {d_ff}, activation={activation!r}, norm_first={norm_first})(x, memory"
        f"{', tgt_padding' * (tgt_padding is not None)}{', memory_padding' * (memory_padding is not None)}) "
        f"for x of shape {list(shape)} and memory of length {memory_len}"
    )
    expect.close(
        got["output"],
        expected,
        what,
        **TOL,
        alternatives=_decoder_mistakes(parts, x, memory, tgt_padding, memory_padding, norm_first),
        hint=f"The oracle is nn.TransformerDecoderLayer(norm_first={norm_first}) with your weights copied "
        "in, a causal tgt_mask and the key padding masks ~tgt_padding and ~memory_padding.",
    )
    if grads:
        _check_gradients(got, what, expected_grads)


@DECODER.visible
def test_decoder_parameters(impl):
    "self_attn, norm1, cross_attn, norm2, ffn, norm3 built from the components it is given (names and shapes)"
    _check_block_parameters(
        impl, "DecoderBlock", [8, 2, 32], {}, _block_parameters(8, 32, "self_attn", cross=True), DECODER_NAMES
    )


@DECODER.visible
def test_decoder_forward(impl):
    "DecoderBlock(8, 2, 32) (post-norm) equals nn.TransformerDecoderLayer with a causal tgt_mask"
    _decoder_case(impl, 8, 2, 32, "relu", False, (2, 5, 8), 7, 0)


@DECODER.visible
def test_decoder_is_causal(impl):
    "changing the tokens after position t leaves the outputs at positions 0..t unchanged"
    state = block_state(8, 32, 5, "self_attn", cross=True)
    x, memory = _randn((2, 6, 8), 505), _randn((2, 4, 8), 506)
    for t in (0, 3):
        changed = x.clone()
        changed[:, t + 1 :] = _randn((2, 5 - t, 8), 507 + t, 5.0)
        earlier = torch.zeros(2, 6, dtype=torch.bool)
        earlier[:, : t + 1] = True
        delta = _padding_invariance(
            impl,
            "DecoderBlock",
            [8, 2, 32],
            {},
            state,
            [x, memory],
            {},
            [changed, memory],
            earlier,
            "DecoderBlock(8, 2, 32)(x, memory)",
        )
        expect.that(
            delta <= SAME["atol"],
            f"changing the tokens after position {t} changed the outputs at positions "
            f"0..{t} by up to {delta:.3g}: the self-attention has no causal mask (or a wrong one); a token "
            "may attend to itself and the tokens before it only",
        )


@DECODER.hidden
def test_decoder_options_and_padding(impl):
    "norm_first=True, activation='gelu', target and memory padding, other widths and lengths"
    _decoder_case(impl, 8, 2, 32, "relu", True, (2, 5, 8), 7, 10)
    _decoder_case(impl, 12, 3, 20, "gelu", False, (3, 6, 12), 4, 20, tgt_lengths=[6, 4, 2], memory_lengths=[4, 1, 3])
    _decoder_case(impl, 16, 4, 40, "gelu", True, (2, 4, 16), 9, 30, tgt_lengths=[2, 4], memory_lengths=[9, 5])


@DECODER.hidden
def test_decoder_memory_padding_is_invisible(impl):
    "changing the padded memory tokens leaves every output unchanged"
    state = block_state(8, 32, 15, "self_attn", cross=True)
    x, memory = _randn((2, 5, 8), 515), _randn((2, 6, 8), 516)
    memory_padding = _padding(2, 6, [6, 2])
    changed = torch.where(memory_padding[..., None], memory, _randn((2, 6, 8), 517, 5.0))
    for norm_first in (False, True):
        delta = _padding_invariance(
            impl,
            "DecoderBlock",
            [8, 2, 32],
            {"norm_first": norm_first},
            state,
            [x, memory],
            {"memory_padding": memory_padding},
            [x, changed],
            torch.ones(2, 5, dtype=torch.bool),
            "DecoderBlock(8, 2, 32)(x, memory, memory_padding=...)",
        )
        expect.that(
            delta <= SAME["atol"],
            f"with norm_first={norm_first}, changing the padded memory tokens changed "
            f"the outputs by up to {delta:.3g}: the cross-attention must hide padded memory keys, "
            "mask = memory_padding[:, None, None, :]",
        )


@DECODER.hidden
def test_decoder_mask_on_the_device_of_x(impl):
    "the causal mask is made on the device of x: the block runs on another device (PyTorch's meta device)"
    for padded in (False, True):
        got = impl.call(decoder_on_meta, [8, 2, 32], [2, 5, 8], 4, padded)
        call = (
            f"DecoderBlock(8, 2, 32).to('meta')(x, memory{', tgt_padding, memory_padding' * padded}) with x and "
            "memory on the meta device"
        )
        expect.that(
            not got["raised"],
            f"{call} raised {got['raised']}: {got['message']}; a tensor your block makes "
            "stays on the CPU while x is elsewhere: build the causal mask in forward on the device of x, "
            "torch.ones(t, t, dtype=torch.bool, device=x.device).tril() (a mask made in __init__ as a plain "
            "attribute does not move with the block)",
        )
        expect.that(
            got["device"] == "meta" and got["shape"] == [2, 5, 8],
            f"{call} returned a tensor on {got['device'] or 'no device'} of shape {got['shape']}; expected "
            "[2, 5, 8] on the device of x",
        )


@DECODER.hidden
def test_decoder_mask_for_any_length(impl):
    "the causal mask is made in forward for the length of x: 1100 target tokens (on the meta device, shapes only)"
    length = 1100  # longer than any sequence notebook 07 runs, and than 1024
    got = impl.call(decoder_on_meta, [8, 2, 32], [1, length, 8], 3, False)
    call = f"DecoderBlock(8, 2, 32).to('meta')(x, memory) with x of shape [1, {length}, 8] on the meta device"
    expect.that(
        not got["raised"],
        f"{call} raised {got['raised']}: {got['message']}; is the causal mask cut from a table made for a fixed "
        "maximum length? Build it in forward for the length of x, "
        "torch.ones(t, t, dtype=torch.bool, device=x.device).tril()",
    )
    expect.that(
        got["device"] == "meta" and got["shape"] == [1, length, 8],
        f"{call} returned a tensor on {got['device'] or 'no device'} of shape {got['shape']}; expected "
        f"[1, {length}, 8] on the device of x",
    )


@DECODER.hidden
def test_decoder_uses_its_parts(impl):
    "forward computes with the parts it was given (a norm that is not a LayerNorm...), pre- and post-norm"
    state = block_state(8, 24, 47, "self_attn", cross=True)
    x, memory = _randn((2, 5, 8), 547), _randn((2, 6, 8), 548)
    tgt_padding, memory_padding = _padding(2, 5, [5, 3]), _padding(2, 6, [6, 2])
    self_mask, memory_mask = causal(5) & tgt_padding[:, None, None, :], memory_padding[:, None, None, :]
    subs = [("attn", "norm1"), ("cross", "norm2"), ("ffn", "norm3")]
    for norm_first in (False, True):
        _check_uses_parts(
            impl,
            "DecoderBlock",
            [8, 2, 24],
            {"norm_first": norm_first},
            state,
            [x, memory],
            {"tgt_padding": tgt_padding, "memory_padding": memory_padding},
            lambda parts, norm_first=norm_first: composed(
                parts, x, _order(norm_first, subs), self_mask, memory, memory_mask
            ),
            f"DecoderBlock(8, 2, 24, norm_first={norm_first})(x, memory, tgt_padding, memory_padding)",
        )


@DECODER.hidden
def test_decoder_gradients(impl):
    "parameter gradients equal autograd's through nn.TransformerDecoderLayer, pre- and post-norm"
    for norm_first in (False, True):
        _decoder_case(
            impl,
            8,
            2,
            24,
            "gelu",
            norm_first,
            (2, 5, 8),
            6,
            40 + norm_first,
            tgt_lengths=[5, 3],
            memory_lengths=[6, 4],
            grads=True,
        )


# --- Exercise 6 --------------------------------------------------------------------------

PARALLEL_NAMES = (
    "self.norm1 = norm(d_model), self.attn = attention(d_model, num_heads), self.ffn = "
    "feed_forward(d_model, d_ff, activation), and no other norm: one LayerNorm feeds both sublayers"
)
_GPTJ_ACTIVATION = {"relu": "relu", "gelu": "gelu", "gelu_tanh": "gelu_new"}


def parallel_state(d, d_ff, seed, attention_bias=True):
    """norm1, attn, ffn; without attention biases (zeros) for GPT-J, whose q/k/v/out projections have none."""
    state = {k: v for k, v in block_state(d, d_ff, seed).items() if not k.startswith("norm2")}
    if not attention_bias:
        state |= {k: torch.zeros_like(v) for k, v in state.items() if k.startswith("attn.") and k.endswith("bias")}
    return state


def gptj_oracle(state, x, heads, d_ff, activation, mask, grad_output=None):
    """Hugging Face's ``GPTJBlock`` (tiny random config) with ``state`` copied in: x + attn(ln_1(x)) + mlp(ln_1(x)).

    GPT-J rotates q and k by their positions (rotary, notebook 03); with every ``position_ids`` 0 the rotation
    is the identity, so its attention is plain softmax attention. Its mask is additive (0 allowed, the float
    minimum hidden), and its attention projections have no biases: ``state``'s must be zero.
    """
    from transformers.models.gptj.modeling_gptj import GPTJBlock

    from autograder.reference.hf_llama import transformers_quiet

    T = transformers_quiet()
    d = x.shape[-1]
    config = T.GPTJConfig(
        n_embd=d,
        n_head=heads,
        n_inner=d_ff,
        rotary_dim=d // heads,
        n_positions=max(64, x.shape[1]),
        activation_function=_GPTJ_ACTIVATION[activation],
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        layer_norm_epsilon=1e-5,
    )
    config._attn_implementation = "eager"
    block = GPTJBlock(config, layer_idx=0).train()
    assert all(float(state[f"attn.{p}.bias"].abs().max()) == 0 for p in ("q_proj", "k_proj", "v_proj", "out_proj"))
    copied = {
        "ln_1.weight": state["norm1.weight"],
        "ln_1.bias": state["norm1.bias"],
        "mlp.fc_in.weight": state["ffn.fc1.weight"],
        "mlp.fc_in.bias": state["ffn.fc1.bias"],
        "mlp.fc_out.weight": state["ffn.fc2.weight"],
        "mlp.fc_out.bias": state["ffn.fc2.bias"],
    }
    copied |= {f"attn.{p}.weight": state[f"attn.{p}.weight"] for p in ("q_proj", "k_proj", "v_proj", "out_proj")}
    block.load_state_dict({k: v.clone() for k, v in copied.items()}, strict=False)  # strict: the rotary buffer
    additive = None
    if mask is not None:
        full = torch.broadcast_to(mask, (x.shape[0], 1, x.shape[1], x.shape[1]))
        additive = torch.zeros(full.shape).masked_fill(~full, torch.finfo(torch.float32).min)
    out = block(x, attention_mask=additive, position_ids=torch.zeros(x.shape[:2], dtype=torch.long))[0]
    if grad_output is None:
        return out.detach(), None
    out.backward(grad_output)
    names = {
        v: k
        for k, v in {
            "norm1.weight": "ln_1.weight",
            "norm1.bias": "ln_1.bias",
            "ffn.fc1.weight": "mlp.fc_in.weight",
            "ffn.fc1.bias": "mlp.fc_in.bias",
            "ffn.fc2.weight": "mlp.fc_out.weight",
            "ffn.fc2.bias": "mlp.fc_out.bias",
        }.items()
    }
    grads = {names.get(n, n): p.grad for n, p in block.named_parameters()}
    return out.detach(), grads


def parallel_composed(parts, x, mask, kind="parallel"):
    """The parallel block and its known mistakes, composed here from the reference components."""
    ln, attn, ffn = parts.norms["norm1"], parts.attn, parts.ffn
    h = ln(x)
    if kind == "parallel":
        return x + attn(h, mask) + ffn(h)
    if kind == "sequential":
        x = x + attn(h, mask)
        return x + ffn(ln(x))
    if kind == "no-residual":
        return attn(h, mask) + ffn(h)
    if kind == "ffn-of-attn":
        a = attn(h, mask)
        return x + a + ffn(a)
    if kind == "norm-after":
        return ln(x + attn(x, mask) + ffn(x))
    if kind == "norm-after-too":
        return ln(x + attn(h, mask) + ffn(h))
    if kind == "ffn-unnormalized":
        return x + attn(h, mask) + ffn(x)
    if kind == "normed-residual":
        return h + attn(h, mask) + ffn(h)
    raise ValueError(kind)


_PARALLEL_MISTAKES = {
    "sequential": "the sublayers run one after the other (the pre-norm block): in the parallel block the FFN "
    "reads norm1(x) of the block's input, not the stream after attention; y = x + attn(h) + ffn(h) "
    "with h = norm1(x)",
    "no-residual": "the residual is missing: y = x + attn(h, mask) + ffn(h), the block's input x added back",
    "ffn-of-attn": "the FFN reads the attention's output; in the parallel block both sublayers read the same "
    "h = norm1(x): y = x + attn(h, mask) + ffn(h)",
    "norm-after": "the norm is applied after the sum (post-norm order): the parallel block normalizes the input, "
    "h = norm1(x), and leaves the residual stream alone: y = x + attn(h, mask) + ffn(h)",
    "norm-after-too": "the norm is applied after the sum as well: the residual stream is never normalized, "
    "y = x + attn(h, mask) + ffn(h)",
    "ffn-unnormalized": "the FFN reads x unnormalized: both sublayers read h = norm1(x)",
    "normed-residual": "the residual adds the normalized h = norm1(x) instead of x: y = x + attn(h, mask) + ffn(h)",
}


def _parallel_case(impl, d, heads, d_ff, activation, shape, seed, mask, oracle="gptj", grads=False):
    state, x = parallel_state(d, d_ff, seed, attention_bias=oracle != "gptj"), _randn(shape, seed + 500)
    grad_output = _randn(shape, seed + 600) if grads else None
    got = impl.call(
        block_forward,
        "ParallelBlock",
        [d, heads, d_ff],
        {"activation": activation},
        state,
        [x],
        {"mask": mask},
        grad_output,
    )
    parts = _Parts(state, d, heads, d_ff, activation)
    with torch.no_grad():
        mistakes = [(parallel_composed(parts, x, mask, kind), message) for kind, message in _PARALLEL_MISTAKES.items()]
        mistakes.append(
            (
                parallel_composed(parts, x, None),
                "the mask does not reach the attention: pass mask on to self.attn(h, mask)",
            )
        )
    what = (
        f"ParallelBlock({d}, {heads}, {d_ff}, activation={activation!r})(x, mask="
        f"{'None' if mask is None else 'causal' if torch.equal(mask, causal(shape[1])) else 'random'}) "
        f"for x of shape {list(shape)}"
    )
    if oracle == "gptj":
        expected, expected_grads = gptj_oracle(state, x, heads, d_ff, activation, mask, grad_output)
        hint = (
            "The oracle is Hugging Face's GPTJBlock, x + attn(ln_1(x)) + mlp(ln_1(x)), with your weights "
            "copied in (attention biases zero, positions 0 so that its rotary embedding is the identity)."
        )
    else:
        parts = _Parts(state, d, heads, d_ff, activation)
        params = [p for m in (parts.attn, parts.ffn, parts.norms["norm1"]) for p in m.parameters()]
        for p in params:
            p.requires_grad_(grads)
        out = parallel_composed(parts, x, mask)
        expected, expected_grads = out.detach(), None
        if grads:
            out.backward(grad_output)
            expected_grads = {
                f"{prefix}.{n}": p.grad
                for prefix, m in (("attn", parts.attn), ("ffn", parts.ffn), ("norm1", parts.norms["norm1"]))
                for n, p in m.named_parameters()
            }
        hint = "The oracle is x + attn(norm1(x), mask) + ffn(norm1(x)) with the reference components."
    expect.close(got["output"], expected, what, **TOL, alternatives=mistakes, hint=hint)
    if grads:
        _check_gradients(got, what, expected_grads)


@PARALLEL.visible
def test_parallel_parameters(impl):
    "norm1, attn, ffn built from the components it is given, and one norm only (names and shapes)"
    expected = {k: v for k, v in _block_parameters(8, 32).items() if not k.startswith("norm2")}
    got = impl.call(block_summary, "ParallelBlock", [8, 2, 32], {})
    params = got.get("parameters", {})
    extra_norms = sorted({n.split(".")[0] for n in set(params) - set(expected) if n.startswith("norm")})
    expect.that(
        not extra_norms or set(params) - set(expected) != {f"{n}.{p}" for n in extra_norms for p in ("weight", "bias")},
        f"ParallelBlock(8, 2, 32) has a second norm ({', '.join(extra_norms)}): the parallel block of GPT-J and "
        "PaLM has one LayerNorm, norm1, whose output h = norm1(x) feeds both attn and ffn (two norms is "
        "GPT-NeoX's variant, not this exercise's)",
    )
    _check_block_parameters(impl, "ParallelBlock", [8, 2, 32], {}, expected, PARALLEL_NAMES)


@PARALLEL.visible
def test_parallel_forward(impl):
    "ParallelBlock(8, 2, 32, 'gelu_tanh') with a causal mask equals Hugging Face's GPTJBlock with the same weights"
    _parallel_case(impl, 8, 2, 32, "gelu_tanh", (2, 5, 8), 0, causal(5))


@PARALLEL.hidden
def test_parallel_options_and_shapes(impl):
    "activation='relu' and 'gelu', no mask, a random mask, attention biases, other widths, heads and lengths"
    _parallel_case(impl, 12, 3, 20, "relu", (3, 7, 12), 10, None)
    _parallel_case(
        impl,
        16,
        4,
        48,
        "gelu",
        (1, 9, 16),
        20,
        (torch.rand(9, 9, generator=_gen(4)) > 0.4) | torch.eye(9, dtype=torch.bool),
    )
    _parallel_case(impl, 8, 2, 24, "relu", (2, 6, 8), 25, causal(6), oracle="composed")
    _parallel_case(impl, 12, 4, 36, "gelu", (2, 5, 12), 27, None, oracle="composed")


@PARALLEL.hidden
def test_parallel_gradients(impl):
    "parameter gradients equal autograd's through GPTJBlock and through x + attn(norm1(x)) + ffn(norm1(x))"
    _parallel_case(impl, 8, 2, 24, "gelu_tanh", (2, 6, 8), 30, causal(6), grads=True)
    _parallel_case(impl, 8, 2, 24, "gelu", (2, 6, 8), 35, causal(6), oracle="composed", grads=True)


@PARALLEL.hidden
def test_parallel_uses_its_parts(impl):
    "forward computes with the parts it was given: built with other components (a norm that is not a LayerNorm...)"
    state, x, mask = parallel_state(8, 24, 48), _randn((2, 5, 8), 549), causal(5)
    _check_uses_parts(
        impl,
        "ParallelBlock",
        [8, 2, 24],
        {},
        state,
        [x],
        {"mask": mask},
        lambda parts: parallel_composed(parts, x, mask),
        "ParallelBlock(8, 2, 24)(x, mask=causal)",
    )


# ---------------------------------------------------------------------------------------------------------------
# Adapters: the only code in this module that touches the student's objects. They run beside the student's code
# (in the sandboxed worker while grading, in the kernel for the notebook's own test cells), build and call the
# student's classes and functions on the inputs a check gives, and return plain results; they compute and report,
# never judge. A check calls one by reference, ``impl.call(name, ...)``; only functions marked ``@adapter`` can be.
#
# Adapters for notebook 07: the residual connection, pre-/post-norm blocks, encoder and decoder blocks.
#
# The blocks take their components as constructor arguments; here they get the course's reference
# components (``autograder.reference``), so grading never depends on the student's notebooks 02, 05
# and 06.


def _components(class_name: str, components: str = "reference") -> dict:
    """The component arguments ``class_name`` takes: the reference components (``autograder.reference``,
    ``nn.LayerNorm``), or with ``components="other"`` ``_OTHER_COMPONENTS`` (not the reference ones)."""
    chosen = _OTHER_COMPONENTS if components == "other" else COMPONENTS_BY_ARGUMENT
    arguments = ("attention", "feed_forward", "norm") + ("cross_attention",) * (class_name == "DecoderBlock")
    return {argument: chosen[argument] for argument in arguments}


def _build(ns, class_name: str, args: list, kwargs: dict, components: str = "reference"):
    return need(ns, class_name)(*args, **kwargs, **_components(class_name, components))


@adapter
def block_parts(ns, class_name: str, args: list, kwargs: dict) -> dict:
    """Build the block with factories that record what they make: child name -> the argument that made it.

    The text requires the parts to be made by calling the arguments (``norm(d_model)``), not by naming a
    class: a block that ignores ``norm=partial(RMSNorm, eps=...)`` would otherwise pass here, with LayerNorms
    equal to the reference ones, and fail only in a later notebook.
    """
    components = _components(class_name)
    made = {}  # id(module) -> the argument whose call returned it

    def recording(argument, factory):
        def make(*args, **kwargs):
            module = factory(*args, **kwargs)
            made[id(module)] = argument
            return module

        return make

    block = need(ns, class_name)(*args, **kwargs, **{name: recording(name, f) for name, f in components.items()})
    if not isinstance(block, nn.Module):
        return {}
    return {name: made.get(id(child)) for name, child in block.named_children()}


@adapter
def block_summary(ns, class_name: str, args: list, kwargs: dict):
    return summary(_build(ns, class_name, args, kwargs))


@adapter
def block_forward(
    ns,
    class_name: str,
    args: list,
    kwargs: dict,
    state: dict,
    inputs: list,
    call_kwargs: dict,
    grad_output=None,
    components: str = "reference",
):
    """Build the block with the reference components (or ``components="other"``: ``_build``), load ``state`` by
    name, run it (and backward)."""
    module = load(_build(ns, class_name, args, kwargs, components), state)
    return forward_backward(module, grad_output, *inputs, **call_kwargs)


@adapter
def encoder_on_meta(ns, args: list, x_shape: list, padded: bool) -> dict:
    """``EncoderBlock(*args)`` moved to PyTorch's meta device and run on a meta x (and, if ``padded``, a meta padding
    mask): what it raised, or its output's device and shape. A mask it makes on the CPU raises beside meta tensors."""
    block = _build(ns, "EncoderBlock", args, {}).to("meta")
    batch, length, d_model = x_shape
    x = torch.empty(batch, length, d_model, device="meta")
    paddings = [torch.ones(batch, length, dtype=torch.bool, device="meta")] if padded else []
    made = []
    result = outcome(lambda: made.append(block(x, *paddings)))
    output = made[0] if made else None
    return result | {"device": str(getattr(output, "device", "")), "shape": list(getattr(output, "shape", []))}


@adapter
def decoder_on_meta(ns, args: list, x_shape: list, memory_len: int, padded: bool) -> dict:
    """``DecoderBlock(*args)`` moved to PyTorch's meta device and run on meta inputs (shapes only, no values):
    what it raised, or its output's device and shape. A tensor it makes on the CPU (a mask built without
    ``device=x.device``, or kept as a plain attribute) cannot be mixed with meta tensors, so it raises."""
    block = _build(ns, "DecoderBlock", args, {}).to("meta")
    batch, length, d_model = x_shape
    x, memory = (
        torch.empty(batch, length, d_model, device="meta"),
        torch.empty(batch, memory_len, d_model, device="meta"),
    )
    paddings = (
        [
            torch.ones(batch, length, dtype=torch.bool, device="meta"),
            torch.ones(batch, memory_len, dtype=torch.bool, device="meta"),
        ]
        if padded
        else []
    )
    made = []
    result = outcome(lambda: made.append(block(x, memory, *paddings)))
    output = made[0] if made else None
    return result | {"device": str(getattr(output, "device", "")), "shape": list(getattr(output, "shape", []))}


def _sublayer(kind: str, d_model: int) -> nn.Module:
    return nn.Linear(d_model, d_model) if kind == "linear" else MultiHeadAttention(d_model, 2)


@adapter
def residual_summary(ns, kind: str, d_model: int):
    return summary(need(ns, "Residual")(_sublayer(kind, d_model)))


@adapter
def residual_forward(ns, kind: str, d_model: int, state: dict, x, call_kwargs: dict, grad_output=None):
    """``Residual(sublayer)(x, **call_kwargs)``; whether ``x`` was changed; gradients of ``x`` and parameters."""
    module = load(need(ns, "Residual")(_sublayer(kind, d_model)), state)
    given = x.clone().requires_grad_(grad_output is not None)
    seen = given.detach().clone()
    result = forward_backward(module, grad_output, given, **call_kwargs)
    result["input_after"] = given.detach().clone()
    result["input_before"] = seen
    if grad_output is not None and isinstance(result.get("grads"), dict):
        result["input_grad"] = given.grad if given.grad is not None else torch.zeros_like(given)
    return result
