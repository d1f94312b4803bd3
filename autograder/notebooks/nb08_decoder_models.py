"""Notebook 08's exercises, with their checks and adapters: GPT-2 and a Llama-style decoder, equal to Hugging Face's models.

Oracles (Hugging Face ``transformers``, imported lazily here, never beside student code):

- ``GPT2LMHeadModel`` with a tiny random configuration (``gelu_new``, dropout 0, eval mode) for the
  parameter count (``num_parameters()``), the model's logits (exercise 2, with ``attention_mask`` and
  explicit ``position_ids`` under padding), the loss (``labels=``, exercise 3) and the checkpoint
  layout (exercise 4). Its weights are redrawn here (``_randomize``: linear weights of standard
  deviation ``fan_in ** -0.5``, norms ``1 + 0.3 N(0, 1)``) so that attention is far from uniform and
  every mistake shows; they are copied into the course's names by this module's own mapping
  (``Conv1D`` stores ``[in, out]``; ``c_attn`` is ``q | k | v``).
- ``LlamaAttention`` (exercise 5), ``LlamaDecoderLayer`` (exercise 6) and ``LlamaForCausalLM``
  (exercises 7 and 8), ``eager`` attention, with ``LlamaRotaryEmbedding``'s cos/sin for the given
  positions and the boolean masks turned into HF's additive masks. HF rotates split halves, the course
  interleaved pairs: q and k rows are permuted per head here, ``course = hf.view(heads, head_dim,
  d)[:, argsort(p)]`` with ``p = [0, 2, 4, .., 1, 3, 5, ..]``; head_dim is 8 or more (for 4 the
  permutation is its own inverse). GQA ratios 1, 2 and 4.
- ``Phi3Attention`` (exercise 9), ``eager``, weights redrawn by ``_randomize``: its ``qkv_proj`` holds q, then k,
  then v rows with GQA sizes ([(H + 2G) head_dim, d]); the course's fused weight is that one with the q and
  k row blocks permuted per head as above. ``fuse_qkv``'s layout is judged by Hugging Face alone too: Llama's
  separate weights, fused by the student, loaded into ``Phi3Attention``, must give ``LlamaAttention``'s output.
  The forward is also compared with the unfused computation (``gqa_math``: one ``x @ W.T`` per projection),
  and ``fuse_qkv`` with ``F.linear`` per projection. "One product" is observed with ``adapters.shapes_made``:
  some tensor of batch * seq * (H + 2G) * head_dim numbers must be made (sizes chosen so that no other
  tensor of the forward has that many). "The result is a new dict" is observed by the adapter: the caller's dict
  keeps its keys and its tensor objects, and those keep their values, shapes and version counters.
- What outputs do not show, observed by the adapters: GPT2 and ModernDecoder run on PyTorch's meta device (masks
  and positions made on the device of tokens; a CPU-only grader's other device), also configured for and given
  1040 tokens (``LONG``, beyond GPT2Config's 1024 positions, the notebook's largest: a mask cached for a fixed
  length shows); RotaryGQA and FusedRotaryGQA run there too, on 1040 tokens, without positions (the default
  positions, and any mask they make, on the device of x; their rope makes its angles on x's device); on the meta
  device an embedding lookup or indexing accepts CPU indices silently, so a TorchFunctionMode (``CPUBesideMeta``)
  also notes every torch function given a CPU tensor of one or more dimensions beside meta ones (positions made on
  the CPU and given to ``wpe``); the constructor arguments (GPT2's ``block``/``norm``, ModernBlock's
  ``attention``/``feed_forward``/``norm``, ModernDecoder's ``block``/``norm``) are recording stand-ins for the
  reference parts, and the parts the text names (blocks, ``ln_f`` and the blocks' norms, ``attn``, ``ffn``,
  ``norm1``/``norm2``, the final ``norm``) must be modules they made;
  ``fuse_qkv`` of a whole decoder's state (embeddings, norms, feed-forward, head, with and without biases) keeps
  every other key with equal values (a copy allowed) and adds no key but the qkv_proj ones; the conversions of exercises 4
  and 8 leave the caller's dict as it was (keys, tensor objects, values, version counters, as for ``fuse_qkv``),
  and exercise 4's ``lm_head.weight`` shares wte.weight's storage (HF's tied pair is tied again in the worker, as
  its ``state_dict()`` has it); the calls of ``F.scaled_dot_product_attention`` under ``is_causal=True`` (a
  TorchFunctionMode sees them by any name) get is_causal=True and no mask (attention by hand makes none); the
  fused forward's output follows a known change added to the result of its product of the fused width.
- A query whose keys are all masked (RotaryGQA, FusedRotaryGQA; notebook 04's rule): zero weights, so a zero
  output (closed form), on a left-padded causal mask with one real query masked whole; the other queries equal
  HF's. HF gives such queries uniform weights (its additive mask is finfo.min), which names that mistake.
- Closed forms: the GPT-2 parameter count of the 124M configuration, 124,439,808;
  ``F.cross_entropy`` on a shift done here.

The student's models are built with the course's reference components injected (reference
``PreNormBlock``, ``RoPE``, ``RotaryGroupedQueryAttention``, ``SwiGLU``, ``ModernBlock`` and
``nn.LayerNorm``/``nn.RMSNorm``); converted checkpoints (exercises 4 and 8) are loaded by name into
the reference decoders of ``autograder.reference.decoders`` and judged by their logits against HF's,
after per-key checks that name the known mistakes. Only real (not padded) positions are compared.

Tolerances (float32 on CPU): logits and attention/block outputs atol 1e-4 + rtol 1e-4, losses atol
1e-5 + rtol 1e-5, converted tensors exact up to 1e-6. Measured for the solution (with the reference
components) over 40 seeds of the configurations used here (GPT-2 of width 16 and 24 with 2-3 layers and
norm_eps 1e-5 or 0.1; Llama-style of width 32-48, GQA ratios 1, 2, 4, rope_base 10000 or 500; length 7,
unpadded, left- and right-padded; attention and blocks with random positions): logits differ from HF's
by at most 5.7e-6, attention and block outputs by at most 1.5e-6, losses by 0 (HF's loss is the same
``F.cross_entropy``); the worst error is 0.047 of the bound. The closest known mistake, the exact GELU
instead of GPT-2's tanh approximation, changed the logits by at least 5.4e-4, 3.5 times the bound; every
other diagnosed mistake by more; the Llama-style decoder with norm_eps 0.1 (10 seeds) differs from HF's by at
most 0.011 of the bound, its final norm without that eps by at least 194 times the bound. Mistakes that give the same numbers are not diagnosed where they cannot
differ: positions 0..seq-1 under right padding, or under any padding with RoPE (its scores see only
differences of positions: rows of [batch, seq] positions that are not shifts of one another are given to show row
0's positions used for every row), a missing padding mask under right padding (the causal mask hides the pads),
``repeat`` for ``repeat_interleave`` with one kv head.

Exercise 9 uses the same bounds: fused tensors exact up to 1e-6 (a concatenation copies values), outputs
atol 1e-4 + rtol 1e-4. Measured for the solution over 40 seeds of (d, H, G) = (32, 4, 2), (32, 4, 4),
(48, 4, 1), (48, 6, 2) with shifted positions: at most 7.2e-7 from ``Phi3Attention``; the closest diagnosed
mistake (q, k, v split off in another order) differs by at least 1.03.
"""

from __future__ import annotations

import functools
import math
import numbers
import re
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from autograder import expect
from autograder.adapters import (
    Recording,
    adapter,
    dict_call_observed,
    first_product_perturbed,
    load,
    need,
    outcome,
    run_on_meta,
    shapes_made,
    summary,
)
from autograder.errors import StudentCodeError
from autograder.exercises import Exercise
from autograder.notebooks._seeds import seeded
from autograder.reference import decoders, hf_llama
from autograder.reference.blocks import PreNormBlock
from autograder.reference.feed_forward import SwiGLU
from autograder.reference.modern import ModernBlock, RotaryGroupedQueryAttention
from autograder.reference.rope import RoPE, halves_permutation, rope
from autograder.rules import Rule

# "As a closed form: no model built", enforced as notebook 09's count is: the torch modules a model is built from
# are refused while the function runs (however they are reached: the course's GPT2, Hugging Face's, the meta
# device), and the answer cell may not name the notebook's models or Hugging Face's.
COUNT = Exercise(
    "gpt2_num_parameters",
    "GPT-2's parameter count",
    points=2,
    rules=(
        Rule(
            "as a closed form: no model built",
            (
                "torch.nn.Linear",
                "torch.nn.LazyLinear",
                "torch.nn.Bilinear",
                "torch.nn.Embedding",
                "torch.nn.EmbeddingBag",
                "torch.nn.LayerNorm",
                "torch.nn.RMSNorm",
                "torch.nn.MultiheadAttention",
                "torch.nn.Conv1d",
                "torch.nn.Transformer",
                "torch.nn.TransformerDecoderLayer",
                "torch.nn.TransformerEncoderLayer",
                "torch.nn.Module",
                "transformers.GPT2LMHeadModel",
                "transformers.GPT2Model",
                "transformers.AutoModel",
                "transformers.AutoModelForCausalLM",
            ),
            names=(
                "GPT2",
                "PreNormBlock",
                "LayerNorm",
                "RMSNorm",
                "SwiGLU",
                "ModernBlock",
                "ModernDecoder",
                "RotaryGQA",
                "FusedRotaryGQA",
            ),
        ),
    ),
)
GPT2 = Exercise("gpt2_model", "the GPT-2 model", points=4)
LOSS = Exercise("causal_lm_loss", "the causal language-modelling loss", points=2)
GPT2_CONVERT = Exercise("gpt2_state_from_hf", "loading a GPT-2 checkpoint", points=3)
ROTARY = Exercise("rotary_gqa", "rotary grouped-query attention", points=3)
MODERN_BLOCK = Exercise("modern_block", "the modern (Llama-style) block", points=3)
DECODER = Exercise("modern_decoder", "the modern decoder", points=4)
LLAMA_CONVERT = Exercise("llama_state_from_hf", "loading a Llama checkpoint", points=3)
FUSED = Exercise("fused_rotary_gqa", "one q/k/v product with grouped-query attention", points=3)
EXERCISES = [COUNT, GPT2, LOSS, GPT2_CONVERT, ROTARY, MODERN_BLOCK, DECODER, LLAMA_CONVERT, FUSED]
ORACLE_IMPORTS = (
    "transformers.models.gpt2.modeling_gpt2",
    "transformers.models.llama.modeling_llama",
)  # imported while the notebook runs (grading.grade): seconds

TOL = {"atol": 1e-4, "rtol": 1e-4}
LOSS_TOL = {"atol": 1e-5, "rtol": 1e-5}
EXACT = {"atol": 1e-6, "rtol": 0.0}

# Longer than any sequence the notebook runs (its largest table, GPT2Config's n_positions, has 1024 rows): a tensor
# cached for a fixed length shows. On the meta device the length costs nothing.
LONG = 1040


_gen, _randn = seeded(8000)


def _tokens(batch, length, vocab, seed):
    return torch.randint(0, vocab, (batch, length), generator=_gen(seed))


def _padding(lengths, length, side):
    """True at real tokens: right padding keeps the first ``n``, left padding the last ``n``."""
    index = torch.arange(length)[None, :]
    n = torch.tensor(lengths)[:, None]
    return index < n if side == "right" else index >= length - n


def _positions(padding):
    return (padding.long().cumsum(-1) - 1).clamp(min=0)


def _transformers():
    import transformers

    transformers.logging.set_verbosity_error()
    return transformers


@torch.no_grad()
def _randomize(model, seed):
    """Redraw every parameter: attention far from uniform, norms far from 1, biases far from 0."""
    g = _gen(seed)
    for name, p in model.named_parameters():
        if p.dim() == 1:
            p.copy_(
                1.0 + 0.3 * torch.randn(p.shape, generator=g)
                if name.endswith("weight") and ("ln" in name or "norm" in name)
                else 0.2 * torch.randn(p.shape, generator=g)
            )
        elif any(e in name for e in ("wte", "wpe", "embed_tokens")):
            p.copy_(0.7 * torch.randn(p.shape, generator=g))
        else:
            conv1d = any(c in name for c in ("c_attn", "c_proj", "c_fc"))
            fan_in = p.shape[0] if conv1d else p.shape[1]
            sharp = 1.6 if any(c in name for c in ("c_attn", "q_proj", "k_proj")) else 1.0
            p.copy_(sharp * fan_in**-0.5 * torch.randn(p.shape, generator=g))
    return model


def _config(fields):
    defaults = {"n_kv_heads": None, "rope_base": 10000.0, "norm_eps": 1e-5}
    return SimpleNamespace(**(defaults | fields)) if "max_seq_len" in fields else SimpleNamespace(**fields)


# --- GPT-2: the oracle and the checker's own mapping --------------------------------------


def gpt2_config(fields, **more):
    """Hugging Face's GPT2Config for the course's config ``fields`` (``more``: GPT2Config's own other fields)."""
    return _transformers().GPT2Config(
        vocab_size=fields["vocab_size"],
        n_positions=fields["n_positions"],
        n_embd=fields["d_model"],
        n_layer=fields["n_layers"],
        n_head=fields["n_heads"],
        n_inner=fields["d_ff"],
        **more,
    )


def hf_gpt2(fields, seed):
    config = gpt2_config(
        fields,
        layer_norm_epsilon=fields.get("norm_eps", 1e-5),
        activation_function="gelu_new",
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
    )
    return _randomize(_transformers().GPT2LMHeadModel(config).eval(), seed)


def gpt2_course_state(hf_state, n_layers, d):
    """HF GPT-2 tensors (either layout) under the course's names: this module's own mapping."""
    src = {k[len("transformer.") :] if k.startswith("transformer.") else k: v for k, v in hf_state.items()}
    state = {
        "wte.weight": src["wte.weight"],
        "wpe.weight": src["wpe.weight"],
        "ln_f.weight": src["ln_f.weight"],
        "ln_f.bias": src["ln_f.bias"],
    }
    for i in range(n_layers):
        h, b = f"h.{i}", f"blocks.{i}"
        for ours, theirs in (("norm1", "ln_1"), ("norm2", "ln_2")):
            state |= {f"{b}.{ours}.{p}": src[f"{h}.{theirs}.{p}"] for p in ("weight", "bias")}
        w, bias = src[f"{h}.attn.c_attn.weight"], src[f"{h}.attn.c_attn.bias"]
        for j, proj in enumerate(("q_proj", "k_proj", "v_proj")):
            state[f"{b}.attn.{proj}.weight"] = w[:, j * d : (j + 1) * d].T.contiguous()
            state[f"{b}.attn.{proj}.bias"] = bias[j * d : (j + 1) * d].clone()
        for ours, theirs in (("attn.out_proj", "attn.c_proj"), ("ffn.fc1", "mlp.c_fc"), ("ffn.fc2", "mlp.c_proj")):
            state[f"{b}.{ours}.weight"] = src[f"{h}.{theirs}.weight"].T.contiguous()
            state[f"{b}.{ours}.bias"] = src[f"{h}.{theirs}.bias"].clone()
    state["lm_head.weight"] = src["wte.weight"]
    return state


@torch.no_grad()
def hf_gpt2_logits(model, tokens, padding):
    if padding is None:
        return model(tokens).logits
    return model(tokens, attention_mask=padding.long(), position_ids=_positions(padding)).logits


def _gpt2_fields(seed, d=16, heads=4, layers=2, eps=1e-5):
    return {
        "vocab_size": 53 + seed % 7,
        "n_positions": 20,
        "d_model": d,
        "n_layers": layers,
        "n_heads": heads,
        "d_ff": 3 * d + 4,
        "norm_eps": eps,
    }


def _reference(model_class, fields, state, **kwargs):
    model = model_class(_config(fields), **kwargs).eval()
    model.load_state_dict(state, strict=True)
    return model


@torch.no_grad()
def _gpt2_mistakes(fields, state, tokens, padding):
    ref = _reference(decoders.GPT2, fields, state)
    positions, mask = decoders.positions_and_mask(tokens, padding)
    length = tokens.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    mistakes = [
        (
            ref.run(tokens, positions, None if padding is None else padding[:, None, None, :]),
            "there is no causal mask: position t may attend to positions 0..t only (mask = causal & padding)",
        ),
        (
            _reference(decoders.GPT2, fields, state, activation="gelu")(tokens, padding),
            'the feed-forward network uses the exact GELU; GPT-2 uses the tanh approximation: pass "gelu_tanh" '
            "to every block",
        ),
    ]
    if padding is not None and bool((positions != torch.arange(length))[padding].any()):  # not so if right-padded
        mistakes.append(
            (
                ref.run(tokens, torch.arange(length), mask),
                "the positions of a padded batch are off by the padding: "
                "under left padding the first real token has position 0, positions = (padding_mask.cumsum(-1) - 1)"
                ".clamp(min=0)",
            )
        )
    if _sees_padding(padding, causal):
        mistakes.append(
            (
                ref.run(tokens, positions, causal),
                "padding_mask does not reach the attention: the mask is "
                "causal & padding_mask[:, None, None, :] (padded keys hidden)",
            )
        )
    ref.ln_f = nn.Identity()
    mistakes.append(
        (ref(tokens, padding), "the final LayerNorm is missing: logits = lm_head(ln_f(x)) after the last block")
    )
    if fields.get("norm_eps", 1e-5) != 1e-5:
        plain = _reference(decoders.GPT2, fields, state)
        for block in plain.blocks:
            block.norm1.eps = block.norm2.eps = 1e-5
        mistakes.append(
            (
                plain(tokens, padding),
                "config.norm_eps does not reach the LayerNorms: give every norm eps=config.norm_eps (in the "
                "blocks too, e.g. with functools.partial(norm, eps=config.norm_eps))",
            )
        )
    return mistakes


def _sees_padding(padding, causal):
    """Whether a causal mask alone would let a real token see a padded one (left padding; right padding never)."""
    return padding is not None and bool((causal[None] & padding[:, :, None] & ~padding[:, None, :]).any())


def _real(value, padding, what, shape):
    value = expect.tensor(value, what, shape=shape)
    return value if padding is None else value[padding]


def _logits_close(got, expected, mistakes, padding, what, shape, oracle):
    """The student's logits equal ``expected`` (Hugging Face's) at the real positions; ``mistakes`` (logits, what
    the mistake is) name a known mistake when the logits match one of them instead."""
    real = (lambda t: t) if padding is None else (lambda t: t[padding])
    expect.close(
        _real(got, padding, what, shape),
        real(expected),
        what,
        **TOL,
        alternatives=[(real(w), m) for w, m in mistakes],
        hint=f"The oracle is Hugging Face's {oracle} with the same weights.",
    )


# --- Exercise 1 --------------------------------------------------------------------------

GPT2_124M = 124_439_808


@functools.cache
def _hugging_face_count(fields: tuple[tuple[str, int], ...]) -> int:
    """``GPT2LMHeadModel(config).num_parameters()`` for these fields. Built on the meta device: a count needs the
    parameters' shapes only, and GPT-2 small's 124M random values took 1.7 s to draw, at each wrong count graded."""
    with torch.device("meta"):
        model = _transformers().GPT2LMHeadModel(gpt2_config(dict(fields)))
    return model.num_parameters()


def _count_case(impl, fields):
    got = impl.call(num_parameters, fields)
    what = f"gpt2_num_parameters(GPT2Config({', '.join(f'{k}={v}' for k, v in fields.items())}))"
    expect.that(isinstance(got, int), f"{what} returned {got!r}, expected an int")
    expected = _hugging_face_count(tuple(fields.items()))
    if got == expected:
        return
    d, v, p, n_layers, f = (fields[k] for k in ("d_model", "vocab_size", "n_positions", "n_layers", "d_ff"))
    biases = n_layers * (4 * d + f + d)
    mistakes = {
        expected + v * d: "the output head is counted separately: GPT-2 ties lm_head.weight to wte.weight, so it "
        "counts once",
        expected - biases: "the biases of the attention projections and the MLP are missing (GPT-2's linear layers "
        "have biases)",
        expected - 2 * d: "the final LayerNorm ln_f (weight and bias, 2 * d_model) is missing",
        expected - p * d: "the position table wpe (n_positions x d_model) is missing",
        expected - n_layers * 4 * d: "the blocks' two LayerNorms (2 x (weight + bias) per block) are missing",
        expected - n_layers * 2 * d: "each LayerNorm has a weight AND a bias",
    }
    expect.fail(
        f"{what} is {got:,}, expected {expected:,} (Hugging Face's GPT2LMHeadModel.num_parameters()): "
        + mistakes.get(
            got,
            "count the embeddings (wte, wpe), per block two LayerNorms, the attention "
            "(q, k, v, out: weight and bias), the MLP (two linear layers with bias), "
            "then ln_f; the head is tied",
        )
    )


@COUNT.visible
def test_gpt2_124m(impl):
    "GPT2Config() (GPT-2 small) has 124,439,808 parameters"
    got = impl.call(num_parameters, {})
    expect.that(isinstance(got, int), f"gpt2_num_parameters(GPT2Config()) returned {got!r}, expected an int")
    if got != GPT2_124M:
        _count_case(
            impl,
            {"vocab_size": 50257, "n_positions": 1024, "d_model": 768, "n_layers": 12, "n_heads": 12, "d_ff": 3072},
        )


@COUNT.hidden
def test_tiny_configs(impl):
    "tiny configurations: the count equals Hugging Face's GPT2LMHeadModel(...).num_parameters()"
    for fields in (
        _gpt2_fields(0),
        _gpt2_fields(1, d=24, heads=3, layers=3),
        {"vocab_size": 101, "n_positions": 7, "d_model": 8, "n_layers": 1, "n_heads": 2, "d_ff": 20},
    ):
        _count_case(impl, {k: v for k, v in fields.items() if k != "norm_eps"})


# --- Exercise 2 --------------------------------------------------------------------------

GPT2_NAMES = (
    "self.wte, self.wpe = nn.Embedding(...), self.blocks = nn.ModuleList([block(d_model, n_heads, d_ff, "
    "'gelu_tanh', norm=...) ...]), self.ln_f = norm(d_model, eps=config.norm_eps), self.lm_head = "
    "nn.Linear(d_model, vocab_size, bias=False) with self.lm_head.weight = self.wte.weight"
)


@GPT2.visible
def test_gpt2_parameters(impl):
    "wte, wpe, blocks, ln_f and a head tied to wte: names and shapes, and HF's parameter count"
    fields = _gpt2_fields(0)
    got = impl.call(gpt2_summary, fields)
    expect.that("parameters" in got, "GPT2(config) is not an nn.Module")
    ref = decoders.GPT2(_config(fields))
    expected = {name: list(p.shape) for name, p in ref.named_parameters()}
    params = got["parameters"]
    if "lm_head.weight" in params and not got["tied"]:
        expect.fail(
            "GPT2's head is not tied: lm_head.weight is a parameter of its own. GPT-2 reuses the token "
            "embedding as the output layer: self.lm_head.weight = self.wte.weight"
        )
    if params != expected:
        missing, extra = sorted(set(expected) - set(params)), sorted(set(params) - set(expected))
        expect.fail(
            f"GPT2(config) has parameters that differ from the expected names and shapes (missing: "
            f"{missing[:6]}, unexpected: {extra[:6]}). {GPT2_NAMES}"
        )
    expect.that("lm_head.weight" in got["state_keys"], f"GPT2's state dict has no lm_head.weight. {GPT2_NAMES}")
    count = sum(torch.Size(s).numel() for s in params.values())
    expect.that(
        count == hf_gpt2(fields, 0).num_parameters(),
        f"GPT2 has {count} parameters, HF's GPT-2 of the same configuration has a different number",
    )


def _gpt2_case(impl, fields, seed, batch, length, lengths=None, side="left"):
    hf = hf_gpt2(fields, seed)
    state = gpt2_course_state(hf.state_dict(), fields["n_layers"], fields["d_model"])
    tokens = _tokens(batch, length, fields["vocab_size"], seed + 1)
    padding = None if lengths is None else _padding(lengths, length, side)
    got = impl.call(gpt2_logits, fields, state, tokens, padding)
    what = f"GPT2's logits for tokens of shape {[batch, length]}" + (
        "" if padding is None else f" with {side} padding (real lengths {lengths})"
    )
    _logits_close(
        got,
        hf_gpt2_logits(hf, tokens, padding),
        _gpt2_mistakes(fields, state, tokens, padding),
        padding,
        what,
        [batch, length, fields["vocab_size"]],
        "GPT2LMHeadModel",
    )


@GPT2.visible
def test_gpt2_logits(impl):
    "GPT2's logits equal Hugging Face's GPT2LMHeadModel with the same weights (no padding)"
    _gpt2_case(impl, _gpt2_fields(0), 0, 2, 7)


@GPT2.hidden
def test_gpt2_padding(impl):
    "left- and right-padded batches: the real positions' logits equal HF's (attention_mask, position_ids)"
    _gpt2_case(impl, _gpt2_fields(1), 10, 3, 8, lengths=[8, 5, 2], side="left")
    _gpt2_case(impl, _gpt2_fields(2), 20, 2, 6, lengths=[3, 6], side="right")


@GPT2.hidden
def test_gpt2_other_configs(impl):
    "other widths, depths and lengths, and norm_eps=0.1 reaching every LayerNorm"
    _gpt2_case(impl, _gpt2_fields(3, d=24, heads=3, layers=3), 30, 1, 9)
    _gpt2_case(impl, _gpt2_fields(4, eps=0.1), 40, 2, 5, lengths=[4, 5], side="left")


def _on_the_device_of_tokens(impl, model, fields, length_field):
    """ "Build masks and positions on the device of ``tokens``": the model runs on PyTorch's meta device (a CPU-only
    grader's other device), unpadded and padded; then, configured for longer sequences than any the notebook runs,
    on ``LONG`` tokens (a mask or positions cached for a fixed length shows)."""
    long_fields = fields | {length_field: LONG + 8}
    for case, shape, padded in (
        (fields, [2, 5], False),
        (fields, [2, 5], True),
        (long_fields, [1, LONG], False),
        (long_fields, [2, LONG], True),
    ):
        got = impl.call(model_on_meta, model, case, shape, padded)
        call = (
            f"{model}(config with {length_field}={case[length_field]}).to('meta')(tokens"
            f"{', padding_mask' * padded}) with tokens of shape {shape} on the meta device"
        )
        expect.that(
            not got["raised"],
            f"{call} raised {got['raised']}: {got['message'][:200]}; a tensor your forward makes stays on the CPU "
            "while tokens are elsewhere, or was made for a fixed length: build the mask and the positions on the "
            "device of tokens and for the length of tokens (torch.arange(seq, device=tokens.device), "
            "torch.ones(seq, seq, ..., device=tokens.device)), and do not move padding_mask to the CPU",
        )
        _check_nothing_made_on_the_cpu(got["cpu_beside_meta"], call)
        expected = [*shape, case["vocab_size"]]
        expect.that(
            got["device"] == "meta" and got["shape"] == expected,
            f"{call} returned a tensor on {got['device'] or 'no device'} of shape {got['shape']}; expected "
            f"{expected} on the device of tokens",
        )


@GPT2.hidden
def test_gpt2_uses_the_parts_given(impl):
    "block= and norm= are used: the blocks are made by calling block, ln_f and the blocks' norms by calling norm (recording stand-ins)"
    got = impl.call(gpt2_parts, _gpt2_fields(6, layers=3))
    expect.that(
        got["blocks"] == 3 and got["blocks_by_block"] == 3,
        f"GPT2(config, block=..., norm=...) with n_layers = 3: {got['blocks_by_block']} of its {got['blocks']} "
        "blocks were made by calling the block argument: build them with block(d_model, n_heads, d_ff, 'gelu_tanh', "
        "norm=...), not with a block class by name (the checks pass a block of their own)",
    )
    expect.that(
        got["ln_f_by_norm"],
        "GPT2's ln_f was not made by calling the norm argument (a LayerNorm built by name?): "
        "self.ln_f = norm(d_model, eps=config.norm_eps) (the checks pass a norm of their own)",
    )
    expect.that(
        got["block_norms_by_norm"] == got["block_norms"],
        f"{got['block_norms'] - got['block_norms_by_norm']} of the blocks' {got['block_norms']} norms were not made "
        "by calling the norm argument: give every block norm=functools.partial(norm, eps=config.norm_eps)",
    )


def _check_nothing_made_on_the_cpu(uses: list, call: str) -> None:
    """No torch function of the meta run was given a CPU tensor beside meta ones (``CPUBesideMeta``): an embedding
    lookup or indexing on the meta device accepts CPU indices without raising, where a GPU's lookup does not."""
    if not uses:
        return
    use = uses[0]
    if any(table.startswith("wpe.") for table in use["tables"]):
        what = f"the position table wpe was given positions of shape {use['cpu'][0]} made on the CPU"
    else:
        tables = f" (with {', '.join(use['tables'])})" if use["tables"] else ""
        what = f"{use['function']}{tables} was given a tensor of shape {use['cpu'][0]} made on the CPU"
    expect.fail(
        f"{call}: {what}, beside the model's tensors on the meta device. Positions (and masks) must be made on the "
        "device of tokens, torch.arange(seq, device=tokens.device): on a GPU, CPU positions fail or are copied at "
        "every call"
    )


@GPT2.hidden
def test_gpt2_on_the_device_of_tokens(impl):
    "masks and positions are made on the device of tokens: the model runs on another device (PyTorch's meta device), also for 1040 tokens"
    _on_the_device_of_tokens(impl, "GPT2", _gpt2_fields(5), "n_positions")


# --- Exercise 3 --------------------------------------------------------------------------


def _loss_case(impl, seed, ignore_index=None, ignored=()):
    fields = _gpt2_fields(seed)
    hf = hf_gpt2(fields, seed)
    tokens = _tokens(2, 7, fields["vocab_size"], seed + 1)
    labels = tokens.clone()
    for b, t in ignored:
        labels[b, t] = -100 if ignore_index is None else ignore_index
    with torch.no_grad():
        out = hf(tokens, labels=labels) if ignore_index is None else hf(tokens)
    logits = out.logits
    index = -100 if ignore_index is None else ignore_index
    shifted_logits, shifted = logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1)
    expected = F.cross_entropy(shifted_logits, shifted, ignore_index=index)
    if ignore_index is None:
        expect.close(expected, out.loss, "this check's own oracle", **LOSS_TOL)
    got = impl.call(causal_lm_loss, logits, labels, ignore_index)
    call = "causal_lm_loss(logits, labels" + ("" if ignore_index is None else f", ignore_index={ignore_index}") + ")"
    what = f"{call} for logits [2, 7, {fields['vocab_size']}]" + (
        f" with {len(ignored)} ignored labels" * bool(ignored)
    )
    expect.tensor(got, what, shape=[])
    per_token = F.cross_entropy(shifted_logits, shifted.clamp(min=0), reduction="none")
    kept = shifted != index
    mistakes = [
        (
            F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=index),
            "the label shift is missing: the logits at position t predict token t+1, so compare logits[:, :-1] with "
            "labels[:, 1:]",
        ),
        (
            F.cross_entropy(
                logits[:, 1:].reshape(-1, logits.shape[-1]), labels[:, :-1].reshape(-1), ignore_index=index
            ),
            "the shift goes the wrong way: the logits at position t predict token t+1, logits[:, :-1] against "
            "labels[:, 1:]",
        ),
    ]
    if bool((~kept).any()):
        mistakes.append(
            (
                (per_token * kept).sum() / kept.numel(),
                "the mean runs over the ignored positions too: average over the targets that are not ignore_index only",
            )
        )
    if ignore_index is not None:
        mistakes.append(
            (
                F.cross_entropy(shifted_logits, shifted),
                "ignore_index is not used: labels equal to ignore_index must not count (pass it on to F.cross_entropy)",
            )
        )
    expect.close(
        got,
        expected,
        what,
        **LOSS_TOL,
        alternatives=mistakes,
        hint="The oracle is GPT2LMHeadModel(tokens, labels=labels).loss, i.e. F.cross_entropy of "
        "logits[:, :-1] against labels[:, 1:], ignoring ignore_index.",
    )


@LOSS.visible
def test_loss_equals_hf(impl):
    "causal_lm_loss(logits, labels) equals GPT2LMHeadModel(tokens, labels=labels).loss"
    _loss_case(impl, 0)


@LOSS.hidden
def test_loss_ignores_padding(impl):
    "labels -100 (padding) are left out of the mean, as HF's loss does"
    _loss_case(impl, 5, ignored=[(0, 0), (0, 1), (1, 5), (1, 6), (1, 3)])


@LOSS.hidden
def test_loss_other_ignore_index(impl):
    "ignore_index=0 is honoured (F.cross_entropy on a shift done here)"
    _loss_case(impl, 7, ignore_index=0, ignored=[(0, 2), (1, 6), (1, 4)])


# --- Exercise 4 --------------------------------------------------------------------------


def _check_keys(got, expected, what, hub=False):
    expect.that(isinstance(got, dict), f"{what} returned a {type(got).__name__}, expected a dict")
    missing, extra = sorted(set(expected) - set(got)), sorted(set(got) - set(expected))
    if not missing and not extra:
        return
    if missing == ["lm_head.weight"]:
        expect.fail(
            f"{what} has no lm_head.weight: the model's head is tied to wte, and its state dict (loaded "
            "with strict=True) holds both; the hub's file has no lm_head.weight, so use wte.weight"
        )
    if any(k.endswith(("attn.bias", "attn.masked_bias")) for k in extra):
        expect.fail(
            f"{what} passes on {[k for k in extra if 'bias' in k][:2]}: attn.bias and attn.masked_bias "
            "in a GPT-2 checkpoint are buffers (the causal mask), not parameters; skip them"
        )
    if hub and len(missing) > len(expected) // 2:
        expect.fail(
            f"{what} fails on the hub's layout (keys without the 'transformer.' prefix, such as 'h.0.ln_1"
            ".weight', and no lm_head.weight): accept both, e.g. key.removeprefix('transformer.')"
        )
    expect.fail(
        f"{what} has the wrong keys (missing: {missing[:5]}, unexpected: {extra[:5]}); the keys are the "
        "course model's state-dict names"
    )


def _check_values(got, expected, what, diagnose):
    for key, value in expected.items():
        mine = got[key]
        expect.that(isinstance(mine, torch.Tensor), f"{what}[{key!r}] is a {type(mine).__name__}, expected a tensor")
        if mine.shape == value.shape and torch.allclose(mine.double(), value.double(), **EXACT):
            continue
        expect.fail(f"{what}[{key!r}] is wrong: " + diagnose(key, mine, value))


def _gpt2_diagnose(key, mine, value, course):
    if value.dim() == 2 and mine.shape == value.T.shape and torch.equal(mine, value.T):
        return (
            "it is transposed: Conv1D stores its weight [in, out], nn.Linear [out, in]; use .t() on every "
            "Conv1D weight (c_attn, c_proj, c_fc)"
        )
    for other in ("q_proj", "k_proj", "v_proj"):
        if ".attn." in key and other not in key and key.split(".")[-2] in ("q_proj", "k_proj", "v_proj"):
            swapped = key.replace(key.split(".")[-2], other)
            if mine.shape == course[swapped].shape and torch.equal(mine, course[swapped]):
                return (
                    f"it holds {other}'s values: c_attn's output is q | k | v, in that order, each d_model wide "
                    "(weight[:, :d] is q, weight[:, d:2d] k, weight[:, 2d:] v)"
                )
    if mine.shape != value.shape:
        return f"shape {list(mine.shape)}, expected {list(value.shape)}"
    return "the values differ from the checkpoint's tensor that belongs there"


_INPUT_KEPT = (
    "leave hf_state as it is: build a new dict (no pop, no assignment into hf_state, no in-place edit of "
    "its tensors); the caller may still use the checkpoint"
)


def _gpt2_convert_case(impl, fields, seed, hub):
    hf = hf_gpt2(fields, seed)
    hf_state = hf.state_dict()
    course = gpt2_course_state(hf_state, fields["n_layers"], fields["d_model"])
    if hub:  # the hub's model.safetensors: no prefix, no lm_head.weight (tied), the attention buffers kept
        n = fields["n_positions"]
        hf_state = {k.removeprefix("transformer."): v for k, v in hf_state.items() if k != "lm_head.weight"}
        for i in range(fields["n_layers"]):
            hf_state[f"h.{i}.attn.bias"] = torch.ones(n, n).tril().view(1, 1, n, n)
            hf_state[f"h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
    what = (
        "gpt2_state_from_hf(" + ("the hub's model.safetensors" if hub else "GPT2LMHeadModel.state_dict()") + ", config)"
    )
    try:
        result = impl.call(
            convert,
            "gpt2_state_from_hf",
            "GPT2Config",
            fields,
            hf_state,
            tied=[("lm_head.weight", "transformer.wte.weight")],
        )
    except StudentCodeError as error:
        if hub and str(error).startswith("KeyError"):
            expect.fail(
                f"{what} raised {error}: on the hub's layout the keys have no 'transformer.' prefix (such as "
                "'h.0.ln_1.weight') and there is no lm_head.weight; accept both layouts, e.g. with "
                "key.removeprefix('transformer.')"
            )
        raise
    got = result["value"]
    _check_keys(got, course, what, hub)
    _check_values(got, course, what, functools.partial(_gpt2_diagnose, course=course))
    expect.that(
        result["head_is_wte"],
        f"{what}['lm_head.weight'] has wte's values but is not the same tensor as "
        "['wte.weight'] (a copy, such as .clone()): the head is tied, so give both keys one tensor, "
        "state['lm_head.weight'] = state['wte.weight']",
    )
    _check_caller_unchanged(result["caller"], what, _INPUT_KEPT)
    model = _reference(decoders.GPT2, fields, got)
    tokens = _tokens(2, 6, fields["vocab_size"], seed + 3)
    with torch.no_grad():
        expect.close(model(tokens), hf_gpt2_logits(hf, tokens, None), f"the logits of the state {what} gives", **TOL)


@GPT2_CONVERT.visible
def test_gpt2_convert_model_layout(impl):
    "GPT2LMHeadModel.state_dict() converted: right keys and tensors; loaded, the logits equal HF's"
    _gpt2_convert_case(impl, _gpt2_fields(0), 100, hub=False)


@GPT2_CONVERT.hidden
def test_gpt2_convert_hub_layout(impl):
    "the hub's layout (no 'transformer.' prefix, no lm_head.weight, attention buffers present)"
    _gpt2_convert_case(impl, _gpt2_fields(1, d=24, heads=3, layers=3), 110, hub=True)


@GPT2_CONVERT.hidden
def test_gpt2_convert_square_mlp(impl):
    "another configuration, d_ff = d_model (every Conv1D weight square: a missing transpose only shows in values)"
    fields = dict(_gpt2_fields(2, d=12, heads=2), d_ff=12)
    _gpt2_convert_case(impl, fields, 120, hub=False)


# --- Llama: the oracles and the checker's own mapping ------------------------------------


def _llama_fields(seed, d=32, heads=4, kv=2, layers=2, eps=1e-5, base=10000.0):
    return {
        "vocab_size": 47 + seed % 5,
        "d_model": d,
        "n_layers": layers,
        "n_heads": heads,
        "d_ff": 40 + 8 * (seed % 3),
        "max_seq_len": 24,
        "n_kv_heads": kv,
        "rope_base": base,
        "norm_eps": eps,
    }


_hf_llama_config = hf_llama.hf_config
_interleaved = hf_llama.interleaved
llama_attention_state = hf_llama.attention_state
llama_block_state = hf_llama.block_state
llama_course_state = hf_llama.course_state


def _additive(mask, batch, length):
    full = (
        torch.ones(batch, 1, length, length, dtype=torch.bool)
        if mask is None
        else mask.expand(batch, 1, length, length)
    )
    return torch.zeros(full.shape).masked_fill(~full, torch.finfo(torch.float32).min)


def _position_ids(positions, batch, length):
    if positions is None:
        positions = torch.arange(length)
    return positions.expand(batch, length) if positions.dim() == 1 else positions


@torch.no_grad()
def hf_layer(kind, fields, seed, x, mask, positions):
    """HF's LlamaAttention or LlamaDecoderLayer with random weights: (course-named state, output)."""
    T = _transformers()
    from transformers.models.llama import modeling_llama as llama

    config = _hf_llama_config(fields)
    layer = (llama.LlamaAttention if kind == "attention" else llama.LlamaDecoderLayer)(config, layer_idx=0).eval()
    _randomize(layer, seed)
    batch, length, _ = x.shape
    cos_sin = llama.LlamaRotaryEmbedding(config)(x, _position_ids(positions, batch, length))
    out = layer(x, position_embeddings=cos_sin, attention_mask=_additive(mask, batch, length))
    out = out[0] if isinstance(out, tuple) else out
    heads, kv = fields["n_heads"], fields.get("n_kv_heads") or fields["n_heads"]
    hf_state = layer.state_dict()
    state = (
        llama_attention_state(hf_state, "", heads, kv)
        if kind == "attention"
        else llama_block_state(hf_state, "", heads, kv)
    )
    del T
    return state, out


def _query_rows(mask, batch, length):
    """Queries that may attend to at least one key (HF gives fully masked rows uniform weights)."""
    if mask is None:
        return torch.ones(batch, length, dtype=torch.bool)
    return mask.expand(batch, 1, length, length).any(-1)[:, 0]


# --- Exercise 5 --------------------------------------------------------------------------


@torch.no_grad()
def gqa_math(
    state, x, heads, kv, mask, positions, *, rotate_v=False, tile=False, rope_full=False, ignore_positions=False
):
    """Rotary GQA written out with einsum and the reference rope, with switches for known mistakes."""
    batch, length, d = x.shape
    hd = d // heads
    if positions is None or ignore_positions:
        positions = torch.arange(length)
    pos = positions[:, None, :] if positions.dim() == 2 else positions
    q, k, v = (x @ state[f"{n}_proj.weight"].T for n in "qkv")
    if rope_full:  # rotated before the head split, across the whole width, as the queries and keys are
        q, k = (rope(t, positions).float() for t in (q, k))
        if rotate_v:
            v = rope(v, positions).float()
    q = q.view(batch, length, heads, hd).transpose(1, 2)
    k = k.view(batch, length, kv, hd).transpose(1, 2)
    v = v.view(batch, length, kv, hd).transpose(1, 2)
    if not rope_full:
        q, k = rope(q, pos).float(), rope(k, pos).float()
        if rotate_v:
            v = rope(v, pos).float()
    group = heads // kv
    k, v = (t.repeat(1, group, 1, 1) if tile else t.repeat_interleave(group, dim=1) for t in (k, v))
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / hd**0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(-1).nan_to_num(0.0)
    out = torch.einsum("bhqk,bhkd->bhqd", weights, v).transpose(1, 2).reshape(batch, length, d)
    return out @ state["out_proj.weight"].T


ROTARY_NAMES = (
    "q_proj = nn.Linear(d_model, d_model, bias=False), k_proj and v_proj = nn.Linear(d_model, "
    "num_kv_heads * head_dim, bias=False), out_proj = nn.Linear(d_model, d_model, bias=False)"
)


@ROTARY.visible
def test_rotary_gqa_parameters(impl):
    "q_proj, k_proj, v_proj (num_kv_heads * head_dim wide), out_proj, no biases"
    got = impl.call(rotary_gqa_summary, 32, 4, 2)
    expect.that("parameters" in got, "RotaryGQA(...) is not an nn.Module")
    expected = {
        "q_proj.weight": [32, 32],
        "k_proj.weight": [16, 32],
        "v_proj.weight": [16, 32],
        "out_proj.weight": [32, 32],
    }
    if got["parameters"] != expected:
        biases = [n for n in got["parameters"] if n.endswith("bias")]
        expect.fail(
            f"RotaryGQA(32, 4, 2, rope) has parameters {got['parameters']}"
            + (": Llama's projections have no bias (bias=False)" if biases else "")
            + f"; expected {ROTARY_NAMES}"
        )
    attributes = impl.call(rotary_gqa_attributes, 32, 4, 2)
    for name, value in (("num_heads", 4), ("num_kv_heads", 2), ("head_dim", 8)):
        expect.that(
            attributes.get(name) == value,
            f"RotaryGQA(32, 4, 2, rope).{name} is {attributes.get(name)}, "
            f"expected {value}: store self.num_heads, self.num_kv_heads and self.head_dim (notebook 13 reads them)",
        )
    expect.that(
        attributes.get("rope_is_given"),
        "RotaryGQA(32, 4, 2, rope).rope is not the rope it was given: "
        "store it as self.rope (the decoder shares one among its blocks)",
    )


def _rotary_case(impl, d, heads, kv, shape, seed, mask_kind="causal", positions=None, lengths=None):
    fields = _llama_fields(seed, d=d, heads=heads, kv=kv)
    batch, length = shape
    x = _randn((batch, length, d), seed + 500)
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    padding = None if lengths is None else _padding(lengths, length, "left")
    if padding is not None:
        positions = _positions(padding)
    mask = {"causal": causal, "none": None}[mask_kind]
    if padding is not None:
        mask = causal & padding[:, None, None, :]
    state, expected = hf_layer("attention", fields, seed, x, mask, positions)
    got = impl.call(rotary_gqa_forward, d, heads, kv, state, x, mask, positions)
    rows = _query_rows(mask, batch, length)
    if padding is not None:
        rows = rows & padding
    what = (
        f"RotaryGQA({d}, {heads}, {kv}, rope)(x, mask={'None' if mask is None else 'causal'}"
        + ("" if positions is None else f", token_positions of shape {list(positions.shape)}")
        + ")"
    )
    mistakes = [
        (
            gqa_math(state, x, heads, kv, mask, positions, rotate_v=True),
            "the values are rotated too: RoPE turns "
            "queries and keys only (their dot product then depends on the distance); v stays as it is",
        ),
        (
            gqa_math(state, x, heads, kv, mask, positions, rope_full=True),
            "RoPE is applied across the whole "
            "d_model; it works per head: split into heads first, then rotate each head's head_dim coordinates",
        ),
        (
            gqa_math(state, x, heads, kv, mask, positions, rotate_v=True, rope_full=True),
            "RoPE is applied to the whole d_model and to the values; rotate q and k only, per head",
        ),
        (
            gqa_math(state, x, heads, kv, mask, None, rotate_v=False),
            "token_positions is ignored: rotate by "
            "the positions given (default 0..seq-1 only when token_positions is None)",
        ),
    ]
    if 1 < kv < heads:  # with one kv head, repeat and repeat_interleave agree
        mistakes.append(
            (
                gqa_math(state, x, heads, kv, mask, positions, tile=True),
                "the key/value heads are "
                "repeated in the wrong order (0 1 0 1 ...): query head i reads kv head i // group, "
                "so use repeat_interleave(group, dim=1) (0 0 1 1 ...), not repeat",
            )
        )
    if mask is not None:
        mistakes.append((gqa_math(state, x, heads, kv, None, positions), "the mask does not reach the attention"))
    if positions is not None and positions.dim() == 2:
        mistakes.append((gqa_math(state, x, heads, kv, mask, positions[0]), POSITIONS_ROW_0))
    expect.close(
        _real(got, rows, what, [batch, length, d]),
        expected[rows],
        what,
        **TOL,
        alternatives=[(w[rows], m) for w, m in mistakes],
        hint="The oracle is Hugging Face's LlamaAttention with the same weights (its q/k rows permuted "
        "to the interleaved layout) and the same positions.",
    )


@ROTARY.visible
def test_rotary_gqa_forward(impl):
    "RotaryGQA(32, 4, 2) with a causal mask equals HF's LlamaAttention (2 query heads per kv head)"
    _rotary_case(impl, 32, 4, 2, (2, 6), 0)


@ROTARY.hidden
def test_rotary_gqa_ratios_and_positions(impl):
    "GQA ratios 1 and 4, token_positions given (not starting at 0), no mask"
    _rotary_case(impl, 32, 4, 4, (2, 5), 10, positions=torch.arange(3, 8))
    _rotary_case(impl, 48, 4, 1, (1, 7), 20, mask_kind="none", positions=torch.tensor([5, 1, 0, 9, 2, 2, 7]))


POSITIONS_ROW_0 = (
    "every row is rotated by the positions of row 0: [batch, seq] token_positions give each row its own "
    "positions; use positions[:, None, :] so that they broadcast over the heads"
)
# Rows whose positions are not shifts of one another (RoPE's scores see only differences of positions).
BATCHED_POSITIONS = torch.tensor([[0, 1, 2, 5, 6, 9], [3, 3, 4, 8, 10, 11], [7, 2, 0, 1, 5, 6]])


@ROTARY.hidden
def test_rotary_gqa_batched_positions(impl):
    "token_positions [batch, seq]: a left-padded batch (causal & padding mask), and rows with different gaps"
    _rotary_case(impl, 32, 4, 2, (3, 6), 30, lengths=[6, 3, 4])
    _rotary_case(impl, 32, 4, 2, (3, 6), 31, positions=BATCHED_POSITIONS)


IS_CAUSAL_IGNORED = (
    "is_causal=True is ignored: with mask=None every query then sees every key. Pass it on: "
    "F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal)"
)


@ROTARY.hidden
def test_rotary_gqa_is_causal(impl):
    "is_causal=True with mask=None attends causally, as with the causal mask (SDPA's is_causal, no mask tensor)"
    for seed, (d, heads, kv), (batch, length) in ((40, (32, 4, 2), (2, 6)), (41, (48, 6, 6), (1, 5))):
        fields = _llama_fields(seed, d=d, heads=heads, kv=kv)
        x = _randn((batch, length, d), seed + 500)
        causal = torch.ones(length, length, dtype=torch.bool).tril()
        state, expected = hf_layer("attention", fields, seed, x, causal, None)
        what = f"RotaryGQA({d}, {heads}, {kv}, rope)(x, mask=None, is_causal=True)"
        got = expect.tensor(
            impl.call(rotary_gqa_forward, d, heads, kv, state, x, None, None, is_causal=True),
            what,
            shape=[batch, length, d],
        )
        expect.close(
            got,
            expected,
            what,
            **TOL,
            alternatives=[(gqa_math(state, x, heads, kv, None, None), IS_CAUSAL_IGNORED)],
            hint="The oracle is Hugging Face's LlamaAttention with the causal mask.",
        )
        _check_is_causal_passed_on(impl.call(rotary_gqa_sdpa_calls, d, heads, kv, x, None, None, is_causal=True), what)


def _attention_on_the_device_of_x(impl, name: str, d: int, heads: int, kv: int) -> None:
    """ "token_positions None means 0..seq-1, made on the device of x": the attention runs on PyTorch's meta device
    (a CPU-only grader's other device) without positions, with a mask and with is_causal=True, for a sequence
    longer than any in the notebook."""
    for options in ({}, {"is_causal": True}):
        shape = [2, LONG]
        got = impl.call(attention_on_meta, name, d, heads, kv, shape, options)
        call = (
            f"{name}({d}, {heads}, {kv}, rope).to('meta')(x, None{', is_causal=True' * bool(options)}) with x of "
            f"shape {[*shape, d]} on the meta device and no token_positions"
        )
        expect.that(
            not got["raised"],
            f"{call} raised {got['raised']}: {got['message'][:200]}; a tensor your forward makes stays on the CPU "
            "while x is elsewhere (or has a fixed size): make the default positions on the device of x, "
            "torch.arange(seq, device=x.device), and any mask of your own there too",
        )
        expect.that(
            got["device"] == "meta" and got["shape"] == [*shape, d],
            f"{call} returned a tensor on {got['device'] or 'no device'} of shape {got['shape']}; expected "
            f"{[*shape, d]} on the device of x",
        )


@ROTARY.hidden
def test_rotary_gqa_on_the_device_of_x(impl):
    "default positions (and any mask made here) on the device of x: the module runs on PyTorch's meta device, 1040 tokens"
    _attention_on_the_device_of_x(impl, "RotaryGQA", 32, 4, 2)


# "A query whose keys are all masked gets zero weights" (notebook 04's rule, the README's convention for masks): a
# left-padded batch, whose padded queries see only padding under the causal mask, and one real query masked whole.
FULLY_MASKED_NAN = (
    "a query whose keys are all masked comes out as NaN: the softmax of a row of -inf is 0/0. Such a query gets "
    "zero weights and so a zero output (notebook 04's rule, what F.scaled_dot_product_attention gives): written by "
    "hand, put zeros in those rows, e.g. torch.nan_to_num(weights, nan=0.0)"
)
FULLY_MASKED_UNIFORM = (
    "a query whose keys are all masked gets uniform weights over them (a large negative number, such as "
    "torch.finfo(dtype).min or -1e9, in place of -inf, as Hugging Face's models do); it must get zero weights and "
    "so a zero output (notebook 04's rule, what F.scaled_dot_product_attention gives)"
)


def _fully_masked_mask(batch: int, length: int) -> torch.Tensor:
    """Causal and left padding ([batch, 1, seq, seq]), and query 2 of row 0 (no padding) masked whole."""
    padding = _padding([length, length // 2, length - 2][:batch], length, "left")
    mask = torch.ones(length, length, dtype=torch.bool).tril() & padding[:, None, None, :]
    mask[0, 0, 2] = False
    return mask


def _check_fully_masked(got, name: str, heads: int, kv: int, x, mask, oracle_output) -> None:
    """What an attention adapter returned on ``mask``: queries with some key equal the oracle's output, queries with
    none are 0. The oracle is Hugging Face's (its fully masked rows get uniform weights: the known mistake)."""
    batch, length, d = x.shape
    fully = ~mask.expand(batch, 1, length, length).any(-1)[:, 0]  # [batch, seq]: queries with no key
    what = (
        f"{name}({d}, {heads}, {kv}, rope)(x, mask) for a causal mask with left padding (queries before a row's "
        f"first real token see no key) and query 2 of row 0 masked whole"
    )
    got = expect.tensor(got, what, shape=[batch, length, d])
    expect.that(not bool(got[fully].isnan().any()), f"{what} is wrong: {FULLY_MASKED_NAN}")
    expected = oracle_output.masked_fill(fully[..., None], 0.0)
    expect.close(got, expected, what, **TOL, alternatives=[(oracle_output, FULLY_MASKED_UNIFORM)])


@ROTARY.hidden
def test_rotary_gqa_fully_masked_queries(impl):
    "a query whose keys are all masked (left padding, a row masked whole) gets zero weights: a zero output, no NaN"
    d, heads, kv, batch, length, seed = 32, 4, 2, 3, 6, 60
    x, mask = _randn((batch, length, d), seed + 500), _fully_masked_mask(batch, length)
    state, expected = hf_layer("attention", _llama_fields(seed, d=d, heads=heads, kv=kv), seed, x, mask, None)
    got = impl.call(rotary_gqa_forward, d, heads, kv, state, x, mask, None)
    _check_fully_masked(got, "RotaryGQA", heads, kv, x, mask, expected)


def _check_is_causal_passed_on(calls: list, what: str) -> None:
    """ "is_causal: pass it on": every call of F.scaled_dot_product_attention the forward makes (attention written
    by hand makes none) gets is_causal=True and no mask tensor, so that SDPA may pick its flash kernel."""
    for call in calls:
        expect.that(
            call["is_causal"] is True and call["attn_mask"] == "None",
            f"{what} called F.scaled_dot_product_attention with attn_mask={call['attn_mask']} and is_causal="
            f"{call['is_causal']}: pass is_causal on and build no causal mask tensor, "
            "F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal) (a mask tensor "
            "rules out the flash kernel)",
        )


# --- Exercise 6 --------------------------------------------------------------------------

MODERN_NAMES = (
    "norm1 = norm(d_model, eps=config.norm_eps), attn = attention(d_model, n_heads, n_kv_heads or "
    "n_heads, rope), norm2 = norm(d_model, eps=config.norm_eps), ffn = feed_forward(d_model, d_ff)"
)


def _block_parameters(d, heads, kv, d_ff):
    hd = d // heads
    return {
        "norm1.weight": [d],
        "attn.q_proj.weight": [d, d],
        "attn.k_proj.weight": [kv * hd, d],
        "attn.v_proj.weight": [kv * hd, d],
        "attn.out_proj.weight": [d, d],
        "norm2.weight": [d],
        "ffn.w1.weight": [d_ff, d],
        "ffn.w3.weight": [d_ff, d],
        "ffn.w2.weight": [d, d_ff],
    }


@MODERN_BLOCK.visible
def test_modern_block_parameters(impl):
    "norm1, attn, norm2, ffn built from the components it is given (names and shapes)"
    fields = _llama_fields(0)
    got = impl.call(modern_block_summary, fields)
    expect.that("parameters" in got, "ModernBlock(config, rope) is not an nn.Module")
    expected = _block_parameters(32, 4, 2, fields["d_ff"])
    params = got["parameters"]
    if params == expected:
        return
    if "norm2.weight" not in params and set(expected) - set(params) == {"norm2.weight"}:
        expect.fail(
            "ModernBlock has no norm2: one norm is shared by both sublayers (or not created); each "
            "sublayer needs its own, norm1 and norm2"
        )
    missing, extra = sorted(set(expected) - set(params)), sorted(set(params) - set(expected))
    expect.fail(
        f"ModernBlock(config, rope) has parameters that differ from the expected names and shapes (missing: "
        f"{missing[:6]}, unexpected: {extra[:6]}). {MODERN_NAMES}"
    )


@torch.no_grad()
def _composed_block(state, fields, x, mask, positions, order):
    cfg = _config(fields)
    heads, kv = cfg.n_heads, cfg.n_kv_heads or cfg.n_heads

    def sub(prefix):
        return {k[len(prefix) + 1 :]: v for k, v in state.items() if k.startswith(prefix + ".")}

    attn = RotaryGroupedQueryAttention(
        cfg.d_model, heads, kv, RoPE(cfg.d_model // heads, cfg.max_seq_len, cfg.rope_base)
    )
    attn.load_state_dict(sub("attn"))
    ffn = SwiGLU(cfg.d_model, cfg.d_ff)
    ffn.load_state_dict(sub("ffn"))
    norms = {}
    for n in ("norm1", "norm2"):
        norms[n] = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        norms[n].load_state_dict(sub(n))
    plain = nn.RMSNorm(cfg.d_model)
    plain.load_state_dict(sub("norm1"))
    plain2 = nn.RMSNorm(cfg.d_model)
    plain2.load_state_dict(sub("norm2"))
    a = lambda h, m=mask: attn(h, m, positions)  # noqa: E731
    n1, n2 = norms["norm1"], norms["norm2"]
    if order == "post":
        x = n1(x + a(x))
        return n2(x + ffn(x))
    if order == "shared":
        x = x + a(n1(x))
        return x + ffn(n1(x))
    if order == "no-attn-residual":
        x = a(n1(x))
        return x + ffn(n2(x))
    if order == "no-ffn-residual":
        x = x + a(n1(x))
        return ffn(n2(x))
    if order == "no-mask":
        x = x + a(n1(x), None)
        return x + ffn(n2(x))
    if order == "no-positions":
        x = x + attn(n1(x), mask)
        return x + ffn(n2(x))
    if order == "no-eps":
        x = x + a(plain(x))
        return x + ffn(plain2(x))
    raise ValueError(order)


def _modern_block_case(impl, fields, shape, seed, lengths=None, positions=None):
    batch, length = shape
    d = fields["d_model"]
    x = _randn((batch, length, d), seed + 500, 2.0)
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    padding = None if lengths is None else _padding(lengths, length, "left")
    if padding is not None:
        positions = _positions(padding)
    mask = causal if padding is None else causal & padding[:, None, None, :]
    state, expected = hf_layer("block", fields, seed, x, mask, positions)
    got = impl.call(modern_block_forward, fields, state, x, mask, positions)
    rows = _query_rows(mask, batch, length) & (True if padding is None else padding)
    what = (
        f"ModernBlock(DecoderConfig(d_model={d}, n_heads={fields['n_heads']}, n_kv_heads={fields['n_kv_heads']}"
        f", norm_eps={fields['norm_eps']}, ...), rope)(x, mask"
        + (", token_positions)" if positions is not None else ")")
    )
    messages = {
        "post": "this is the post-norm order; the modern block is pre-norm: x = x + attn(norm1(x), ...), then "
        "x = x + ffn(norm2(x))",
        "shared": "norm1 is used before both sublayers; the feed-forward network's norm is norm2",
        "no-attn-residual": "the residual connection around the attention is missing",
        "no-ffn-residual": "the residual connection around the feed-forward network is missing",
        "no-mask": "the mask does not reach the attention: self.attn(h, mask, token_positions)",
        "no-positions": "token_positions does not reach the attention: self.attn(h, mask, token_positions)",
        "no-eps": "config.norm_eps does not reach the norms: norm(d_model, eps=config.norm_eps)",
    }
    mistakes = [
        (_composed_block(state, fields, x, mask, positions, o)[rows], m)
        for o, m in messages.items()
        if (o != "no-positions" or positions is not None) and (o != "no-eps" or fields["norm_eps"] != 1e-5)
    ]
    expect.close(
        _real(got, rows, what, [batch, length, d]),
        expected[rows],
        what,
        **TOL,
        alternatives=mistakes,
        hint="The oracle is Hugging Face's LlamaDecoderLayer with the same weights.",
    )


@MODERN_BLOCK.visible
def test_modern_block_forward(impl):
    "ModernBlock with a causal mask equals HF's LlamaDecoderLayer (RMSNorm, rotary GQA, SwiGLU, pre-norm)"
    _modern_block_case(impl, _llama_fields(0), (2, 6), 0)


@MODERN_BLOCK.hidden
def test_modern_block_padding_and_eps(impl):
    "left padding with batched positions, no grouping (n_kv_heads=None), norm_eps=0.1"
    _modern_block_case(impl, _llama_fields(1, kv=None, eps=0.1), (3, 7), 10, lengths=[7, 4, 2])
    _modern_block_case(impl, _llama_fields(2, d=48, heads=6, kv=3), (2, 5), 20, lengths=[5, 3])


@MODERN_BLOCK.hidden
def test_modern_block_positions(impl):
    "token_positions with gaps (0, 1, 2, 5, 6, 9) reach the attention"
    _modern_block_case(impl, _llama_fields(3, kv=1), (2, 6), 30, positions=torch.tensor([0, 1, 2, 5, 6, 9]))


@MODERN_BLOCK.hidden
def test_modern_block_uses_the_parts_given(impl):
    "attention=, feed_forward= and norm= are used: attn, ffn, norm1 and norm2 are made by calling them (recording stand-ins)"
    got = impl.call(modern_block_parts, _llama_fields(6))
    for part, argument, call in (
        ("attn", "attention", "attention(d_model, n_heads, n_kv_heads or n_heads, rope)"),
        ("ffn", "feed_forward", "feed_forward(d_model, d_ff)"),
        ("norm1", "norm", "norm(d_model, eps=config.norm_eps)"),
        ("norm2", "norm", "norm(d_model, eps=config.norm_eps)"),
    ):
        expect.that(
            got[part],
            f"ModernBlock's {part} was not made by calling the {argument} argument (a class built by name?): "
            f"self.{part} = {call} (the checks pass parts of their own)",
        )


@MODERN_BLOCK.hidden
def test_modern_block_is_causal(impl):
    "is_causal=True (mask=None) reaches the attention: the output equals the one with the causal mask"
    fields = _llama_fields(4, kv=2)
    batch, length, d = 2, 6, fields["d_model"]
    x = _randn((batch, length, d), 540, 2.0)
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    state, expected = hf_layer("block", fields, 4, x, causal, None)
    what = f"ModernBlock(DecoderConfig(d_model={d}, ...), rope)(x, None, is_causal=True)"
    got = expect.tensor(
        impl.call(modern_block_forward, fields, state, x, None, None, is_causal=True),
        what,
        shape=[batch, length, d],
    )
    expect.close(
        got,
        expected,
        what,
        **TOL,
        alternatives=[
            (
                _composed_block(state, fields, x, None, None, "no-mask"),
                "is_causal does not reach the attention (every query sees every key): "
                "self.attn(h, mask, token_positions, is_causal=is_causal)",
            )
        ],
        hint="The oracle is Hugging Face's LlamaDecoderLayer with the causal mask.",
    )


# --- Exercises 7 and 8: the whole decoder ---------------------------------------------


def hf_llama(fields, seed):
    T = _transformers()
    return _randomize(T.LlamaForCausalLM(_hf_llama_config(fields)).eval(), seed)


@torch.no_grad()
def hf_llama_logits(model, tokens, padding):
    if padding is None:
        return model(tokens).logits
    return model(tokens, attention_mask=padding.long(), position_ids=_positions(padding)).logits


DECODER_NAMES = (
    "self.tok_emb = nn.Embedding(vocab_size, d_model), self.blocks = nn.ModuleList([block(config, "
    "rope) ...]) with one rope = rope(head_dim, max_seq_len, rope_base) shared by all, self.norm = "
    "norm(d_model, eps=config.norm_eps), self.lm_head = nn.Linear(d_model, vocab_size, bias=False)"
)


@DECODER.visible
def test_decoder_parameters(impl):
    "tok_emb, blocks, norm and an untied lm_head: names and shapes"
    fields = _llama_fields(0)
    got = impl.call(decoder_summary, fields)
    expect.that("parameters" in got, "ModernDecoder(config) is not an nn.Module")
    expected = {n: list(p.shape) for n, p in decoders.LlamaDecoder(_config(fields)).named_parameters()}
    params = got["parameters"]
    if got["tied"] or ("lm_head.weight" not in params and "lm_head.weight" in got["state_keys"]):
        expect.fail(
            "ModernDecoder's head is tied to the embedding; in this model (as in Llama 2 and 3 8B) lm_head "
            "is a separate nn.Linear(d_model, vocab_size, bias=False): do not share its weight"
        )
    if params != expected:
        missing, extra = sorted(set(expected) - set(params)), sorted(set(params) - set(expected))
        expect.fail(
            f"ModernDecoder(config) has parameters that differ from the expected names and shapes (missing: "
            f"{missing[:6]}, unexpected: {extra[:6]}). {DECODER_NAMES}"
        )


@torch.no_grad()
def _decoder_mistakes(fields, state, tokens, padding):
    ref = _reference(decoders.LlamaDecoder, fields, state)
    positions, mask = decoders.positions_and_mask(tokens, padding)
    length = tokens.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    mistakes = [
        (
            ref.run(tokens, positions, None if padding is None else padding[:, None, None, :]),
            "there is no causal mask: position t may attend to positions 0..t only (mask = causal & padding)",
        )
    ]
    # positions 0..seq-1 under left padding are no mistake here: RoPE sees only differences of positions
    if _sees_padding(padding, causal):
        mistakes.append(
            (
                ref.run(tokens, positions, causal),
                "padding_mask does not reach the attention: the mask is causal & padding_mask[:, None, None, :]",
            )
        )
    if fields["rope_base"] != 10000.0:
        mistakes.append(
            (
                _reference(decoders.LlamaDecoder, dict(fields, rope_base=10000.0), state)(tokens, padding),
                "config.rope_base does not reach RoPE: rope(head_dim, max_seq_len, config.rope_base)",
            )
        )
    if fields["norm_eps"] != 1e-5:
        plain = _reference(decoders.LlamaDecoder, fields, state)
        plain.norm.eps = None  # nn.RMSNorm's default: torch.finfo(dtype).eps
        mistakes.append(
            (
                plain(tokens, padding),
                "config.norm_eps does not reach the final norm: self.norm = norm(d_model, eps=config.norm_eps)",
            )
        )
    ref.norm = nn.Identity()
    mistakes.append((ref(tokens, padding), "the final norm is missing: logits = lm_head(norm(x)) after the last block"))
    return mistakes


def _decoder_case(impl, fields, seed, batch, length, lengths=None, side="left"):
    hf = hf_llama(fields, seed)
    state = llama_course_state(hf.state_dict(), fields)
    tokens = _tokens(batch, length, fields["vocab_size"], seed + 1)
    padding = None if lengths is None else _padding(lengths, length, side)
    got = impl.call(decoder_logits, fields, state, tokens, padding)
    what = (
        f"ModernDecoder's logits (n_heads={fields['n_heads']}, n_kv_heads={fields['n_kv_heads']}) for tokens of "
        f"shape {[batch, length]}" + ("" if padding is None else f" with {side} padding (real lengths {lengths})")
    )
    _logits_close(
        got,
        hf_llama_logits(hf, tokens, padding),
        _decoder_mistakes(fields, state, tokens, padding),
        padding,
        what,
        [batch, length, fields["vocab_size"]],
        "LlamaForCausalLM",
    )


@DECODER.visible
def test_decoder_logits(impl):
    "ModernDecoder's logits equal HF's LlamaForCausalLM with the same weights (no padding)"
    _decoder_case(impl, _llama_fields(0), 200, 2, 7)


@DECODER.hidden
def test_decoder_padding(impl):
    "left- and right-padded batches: the real positions' logits equal HF's"
    _decoder_case(impl, _llama_fields(1, kv=1), 210, 3, 8, lengths=[8, 5, 2], side="left")
    _decoder_case(impl, _llama_fields(2, kv=None), 220, 2, 6, lengths=[3, 6], side="right")


@DECODER.hidden
def test_decoder_shares_one_rope_and_counts_real_tokens(impl):
    "one RoPE shared by every block; under left padding the blocks get positions (cumsum(mask) - 1).clamp(min=0)"
    fields = _llama_fields(2, layers=3)
    lengths, length = [7, 4, 1], 7
    padding = _padding(lengths, length, "left")
    seen = impl.call(decoder_observed, fields, _tokens(3, length, fields["vocab_size"], 5), padding)
    expect.that(seen["blocks"] == 3, f"ModernDecoder built {seen['blocks']} blocks for n_layers = 3")
    expect.that(
        seen["ropes_made"] == 1 and seen["distinct_ropes"] == 1,
        f"ModernDecoder made {seen['ropes_made']} RoPE module(s) and gave its 3 blocks {seen['distinct_ropes']} "
        "different one(s): make ONE, rope(head_dim, max_seq_len, rope_base), and give it to every block",
    )
    expected = (padding.long().cumsum(-1) - 1).clamp(min=0)
    for i, positions in enumerate(seen["positions"]):
        what = f"the positions block {i} received under left padding (real lengths {lengths})"
        expect.that(isinstance(positions, torch.Tensor), f"{what}: none; pass token_positions to every block")
        if positions.numel() != expected.numel():  # e.g. one row of positions for the whole batch
            expect.that(positions.shape[-1] == length, f"{what} have shape {list(positions.shape)}")
            positions = torch.broadcast_to(positions.reshape(-1, length), expected.shape)
        expect.close(
            positions.reshape(expected.shape),
            expected,
            what,
            atol=0,
            hint="Positions count real tokens: the first real token of each row is position 0.",
        )


@DECODER.visible
def test_decoder_is_causal_without_padding(impl):
    "no padding: the blocks get mask=None and is_causal=True (flash attention possible); padding: the mask, is_causal False"
    fields = _llama_fields(2, layers=2)
    length = 6
    tokens = _tokens(2, length, fields["vocab_size"], 7)
    seen = impl.call(decoder_observed, fields, tokens, None)
    for i, (mask, causal) in enumerate(zip(seen["masks"], seen["is_causal"], strict=True)):
        expect.that(
            mask == "None" and causal is True,
            f"without padding block {i} got mask {mask} and is_causal={causal}; the mask is purely causal, so "
            "give no mask tensor and let SDPA build it: block(x, None, positions, is_causal=True)",
        )
    padding = _padding([6, 3], length, "left")
    seen = impl.call(decoder_observed, fields, tokens, padding)
    for i, (mask, causal) in enumerate(zip(seen["masks"], seen["is_causal"], strict=True)):
        expect.that(
            causal is False,
            f"with padding block {i} got is_causal={causal}: a padded batch needs its "
            "explicit mask (causal & padding_mask[:, None, None, :]) and is_causal=False",
        )
        expect.that(mask != "None", f"with padding block {i} got no mask: pass causal & padding_mask[:, None, None, :]")


@DECODER.hidden
def test_decoder_other_configs(impl):
    "more heads (ratio 4), another rope_base, three layers; norm_eps=0.1 reaching the final norm"
    _decoder_case(impl, _llama_fields(3, d=32, heads=4, kv=1, layers=3, base=500.0), 230, 2, 9, lengths=[9, 6])
    _decoder_case(impl, _llama_fields(4, kv=2, eps=0.1), 240, 2, 6)


@DECODER.hidden
def test_decoder_uses_the_parts_given(impl):
    "block= and norm= are used: the blocks are made by calling block, the final norm by calling norm (recording stand-ins)"
    got = impl.call(decoder_parts, _llama_fields(6, layers=3))
    expect.that(
        got["blocks"] == 3 and got["blocks_by_block"] == 3,
        f"ModernDecoder(config, block=...) with n_layers = 3: {got['blocks_by_block']} of its {got['blocks']} blocks "
        "were made by calling the block argument: block(config, that_rope), not a block class by name",
    )
    expect.that(
        got["norm_by_norm"],
        "ModernDecoder's final norm was not made by calling the norm argument (an RMSNorm built by name?): "
        "self.norm = norm(d_model, eps=config.norm_eps) (the checks pass a norm of their own)",
    )


@DECODER.hidden
def test_decoder_on_the_device_of_tokens(impl):
    "masks and positions are made on the device of tokens: the model runs on another device (PyTorch's meta device), also for 1040 tokens"
    _on_the_device_of_tokens(impl, "ModernDecoder", _llama_fields(5), "max_seq_len")


def _llama_diagnose(key, mine, value, hf_state, fields):
    heads, kv = fields["n_heads"], fields.get("n_kv_heads") or fields["n_heads"]
    d = fields["d_model"]
    hd = d // heads
    name = key.split(".")[-2]
    i = key.split(".")[1] if key.startswith("blocks.") else None
    if name in ("q_proj", "k_proj", "v_proj") and i is not None:
        raw = hf_state[f"model.layers.{i}.self_attn.{name}.weight"]
        n = heads if name == "q_proj" else kv
        p = halves_permutation(hd)
        if mine.shape == raw.shape:
            if name == "v_proj" and torch.equal(mine, _interleaved(raw, n)):
                return (
                    "v_proj is permuted too: only queries and keys are rotated, so only their rows change "
                    "order; copy v_proj as it is"
                )
            if torch.equal(mine, raw):
                return (
                    f"the rows of {name} are not permuted: HF rotates split halves (i, i + head_dim/2), the "
                    "course's RoPE interleaved pairs (2i, 2i+1); reorder each head's rows by the inverse of "
                    "halves_permutation(head_dim)"
                )
            if torch.equal(mine, raw.view(n, hd, d)[:, p].reshape(raw.shape)):
                return (
                    "the rows are permuted by halves_permutation itself; you need its inverse, "
                    "torch.argsort(halves_permutation(head_dim)) (it takes split halves back to interleaved "
                    "pairs)"
                )
            whole = torch.argsort(halves_permutation(raw.shape[0]))
            if torch.equal(mine, raw[whole]):
                return (
                    "the rows are permuted across the whole projection; the permutation works per head: "
                    "weight.view(n_heads, head_dim, d_model)[:, order]"
                )
    if mine.shape != value.shape:
        return f"shape {list(mine.shape)}, expected {list(value.shape)}"
    return "the values differ from the checkpoint's tensor that belongs there (check the name mapping)"


def _llama_convert_case(impl, fields, seed):
    hf = hf_llama(fields, seed)
    hf_state = hf.state_dict()
    course = llama_course_state(hf_state, fields)
    what = "llama_state_from_hf(LlamaForCausalLM.state_dict(), config)"
    result = impl.call(convert, "llama_state_from_hf", "DecoderConfig", fields, hf_state)
    got = result["value"]
    _check_keys(got, course, what)
    _check_values(got, course, what, functools.partial(_llama_diagnose, hf_state=hf_state, fields=fields))
    _check_caller_unchanged(result["caller"], what, _INPUT_KEPT)
    model = _reference(decoders.LlamaDecoder, fields, got)
    tokens = _tokens(2, 6, fields["vocab_size"], seed + 3)
    with torch.no_grad():
        expect.close(model(tokens), hf_llama_logits(hf, tokens, None), f"the logits of the state {what} gives", **TOL)


@LLAMA_CONVERT.visible
def test_llama_convert(impl):
    "LlamaForCausalLM.state_dict() converted: names, q/k rows permuted per head; loaded, the logits equal HF's"
    _llama_convert_case(impl, _llama_fields(0), 300)


@LLAMA_CONVERT.hidden
def test_llama_convert_other_configs(impl):
    "no grouping (n_kv_heads=None), head_dim 16, three layers"
    _llama_convert_case(impl, _llama_fields(1, kv=None), 310)
    _llama_convert_case(impl, _llama_fields(2, d=48, heads=3, kv=1, layers=3), 320)


# --- Exercise 9 --------------------------------------------------------------------------


def _separate_state(seed, d, heads, kv, *, bias=False, prefix="", extra=()):
    """Random separate projections in the course's names (``prefix`` + q_proj/k_proj/v_proj), plus other keys."""
    hd = d // heads
    sizes = {"q": heads * hd, "k": kv * hd, "v": kv * hd}
    state = {
        f"{prefix}{n}_proj.weight": _randn((rows, d), seed + i, d**-0.5) for i, (n, rows) in enumerate(sizes.items())
    }
    if bias:
        state |= {
            f"{prefix}{n}_proj.bias": _randn((rows,), seed + 10 + i, 0.5) for i, (n, rows) in enumerate(sizes.items())
        }
    for i, name in enumerate(extra):
        state[name] = _randn((d, d), seed + 20 + i)
    return state


def _fuse_diagnose(fused, parts, what):
    """Name the known mistakes of a fused weight (or bias): order, transposition, the wrong dim."""
    q, k, v = parts
    if fused.dim() == 2 and fused.shape[1] != q.shape[1] and fused.shape[0] == q.shape[1]:
        if torch.equal(fused, torch.cat([q.T, k.T, v.T], 1)):
            return (
                f"{what} is transposed ([d_model, out], Conv1D's layout, as in GPT-2's c_attn): nn.Linear's "
                "weight is [out, in], so stack the rows, torch.cat([q, k, v], dim=0)"
            )
        return (
            f"{what} has shape {list(fused.shape)}: the projections are joined along dim 1; stack their rows "
            "(dim 0), so that the output columns of one product are q, then k, then v"
        )
    for order in ((k, q, v), (v, k, q), (q, v, k), (k, v, q), (v, q, k)):
        if fused.shape[0] == sum(t.shape[0] for t in order) and torch.equal(fused, torch.cat(order, 0)):
            return f"{what} stacks the projections in another order: the layout (Phi-3's qkv_proj) is q, then k, then v"
    return f"{what} has shape {list(fused.shape)}, expected {[q.shape[0] + k.shape[0] + v.shape[0], *q.shape[1:]]}"


def _fuse_case(impl, seed, d, heads, kv, *, bias=False, prefix="", extra=()):
    state = _separate_state(seed, d, heads, kv, bias=bias, prefix=prefix, extra=extra)
    what = f"fuse_qkv(state with {prefix}q_proj/k_proj/v_proj" + (" weights and biases" if bias else "") + ")"
    result = impl.call(fuse_qkv, state)
    got = result["value"]
    expect.that(isinstance(got, dict), f"{what} returned a {type(got).__name__}, expected a dict")
    kinds = ("weight", "bias") if bias else ("weight",)
    expected_keys = sorted([*extra, *(f"{prefix}qkv_proj.{kind}" for kind in kinds)])
    expect.that(
        sorted(got) == expected_keys,
        f"{what} has the keys {sorted(got)}, expected {expected_keys}: "
        "q_proj, k_proj and v_proj become one qkv_proj (same prefix), every other key passes through",
    )
    for name in extra:
        expect.that(
            isinstance(got[name], torch.Tensor) and torch.equal(got[name], state[name]),
            f"{what}[{name!r}] changed: keys other than q/k/v_proj pass through as they are",
        )
    x = _randn((2, 5, d), seed + 40)
    for kind in kinds:
        parts = [state[f"{prefix}{n}_proj.{kind}"] for n in "qkv"]
        fused = expect.tensor(got[f"{prefix}qkv_proj.{kind}"], f"{what}[{prefix!r} + 'qkv_proj.{kind}']")
        rows = sum(t.shape[0] for t in parts)
        if tuple(fused.shape) != (rows, *parts[0].shape[1:]) or not torch.allclose(
            fused.double(), torch.cat(parts, 0).double(), **EXACT
        ):
            expect.fail(f"{what} is wrong: " + _fuse_diagnose(fused, parts, f"qkv_proj.{kind}"))
    # The oracle: one product with the fused tensors gives the three separate products side by side.
    w = [state[f"{prefix}{n}_proj.weight"] for n in "qkv"]
    b = [state[f"{prefix}{n}_proj.bias"] for n in "qkv"] if bias else [None] * 3
    separate = torch.cat([F.linear(x, wi, bi) for wi, bi in zip(w, b, strict=True)], -1)
    one = F.linear(x, got[f"{prefix}qkv_proj.weight"], got.get(f"{prefix}qkv_proj.bias"))
    expect.close(one, separate, f"F.linear(x, *{what}'s qkv_proj)", **TOL)
    _check_caller_unchanged(result["caller"], what, _NEW_DICT)


def _decoder_state(seed, d, heads, kv, d_ff, layers, *, bias):
    """A whole decoder's state dict in the course's names (embeddings, per block norms, attention and feed-forward,
    final norm, head; ``bias``: GPT-2's biases everywhere): random tensors of the right shapes."""
    hd, vocab = d // heads, 29
    shapes = {"tok_emb.weight": (vocab, d)}
    for i in range(layers):
        b = f"blocks.{i}."
        shapes |= {f"{b}norm1.weight": (d,), f"{b}norm2.weight": (d,)}
        shapes |= {
            f"{b}attn.{n}_proj.weight": (rows, d) for n, rows in (("q", heads * hd), ("k", kv * hd), ("v", kv * hd))
        }
        shapes |= {f"{b}attn.out_proj.weight": (d, d), f"{b}ffn.w1.weight": (d_ff, d), f"{b}ffn.w3.weight": (d_ff, d)}
        shapes[f"{b}ffn.w2.weight"] = (d, d_ff)
    shapes |= {"norm.weight": (d,), "lm_head.weight": (vocab, d)}
    if bias:
        shapes |= {
            k.replace(".weight", ".bias"): s[:1] for k, s in shapes.items() if "blocks." in k or k == "norm.weight"
        }
    return {key: _randn(shape, seed + i) for i, (key, shape) in enumerate(shapes.items())}


def _fuse_decoder_case(impl, seed, d, heads, kv, layers, *, bias):
    """ "Every other key passes through unchanged", in a whole decoder's state: norms, feed-forward, embeddings,
    head and the attention's out_proj keep their keys and their values; no key is added but the qkv_proj ones."""
    state = _decoder_state(seed, d, heads, kv, 3 * d, layers, bias=bias)
    what = f"fuse_qkv(a whole decoder's state dict: {layers} blocks{', with biases' if bias else ''})"
    got = impl.call(fuse_qkv, state)["value"]
    expect.that(isinstance(got, dict), f"{what} returned a {type(got).__name__}, expected a dict")
    projection = re.compile(r"(.*)[qkv]_proj\.(weight|bias)")
    others = [k for k in state if not projection.fullmatch(k)]
    fused = {f"{m[1]}qkv_proj.{m[2]}" for k in state if (m := projection.fullmatch(k))}
    lost, extra = [k for k in others if k not in got], sorted(set(got) - set(others) - fused)
    expect.that(
        not lost,
        f"{what} lost the keys {lost[:6]}{' ...' if len(lost) > 6 else ''}: every key that is not a q/k/v projection "
        "(norms, feed-forward, embeddings, head, out_proj) passes through unchanged, under its own name",
    )
    expect.that(
        not extra,
        f"{what} has keys it should not have, {extra[:6]}: the only new keys are the <prefix>qkv_proj ones, and "
        "q_proj, k_proj and v_proj are gone",
    )
    expect.that(
        fused <= set(got),
        f"{what} has no {sorted(fused - set(got))[:4]}: every block's q/k/v trio becomes one <prefix>qkv_proj",
    )
    for key in others:
        value = got[key]
        expect.that(
            isinstance(value, torch.Tensor)
            and value.dtype == state[key].dtype
            and value.shape == state[key].shape
            and torch.equal(value, state[key]),
            f"{what}[{key!r}] changed: keys other than the q/k/v projections pass through with the same values "
            "(the tensor itself or a copy)",
        )
    for key in sorted(fused):
        parts = [state[key.replace("qkv_proj", f"{n}_proj")] for n in "qkv"]
        value = expect.tensor(got[key], f"{what}[{key!r}]")
        if value.shape != torch.cat(parts, 0).shape or not torch.equal(value, torch.cat(parts, 0)):
            expect.fail(f"{what} is wrong: " + _fuse_diagnose(value, parts, key))


_NEW_DICT = (
    "build the result as a new dict (fused = {...}) and leave the caller's dict and its tensors as they "
    "were: the caller may still need its separate projections"
)


def _check_caller_unchanged(caller: dict, what: str, advice: str) -> None:
    """ "Leave the input as it is": the caller's dict keeps its keys and its tensors, unmodified (``adapters``
    observe the dict, the tensor objects and their version counters)."""
    expect.that(not caller["same_dict"], f"{what} returned the dict it was given, changed: {advice}")
    changed = [
        f"removed {caller['removed']}" if caller["removed"] else "",
        f"added {caller['added']}" if caller["added"] else "",
        f"replaced the tensors of {caller['replaced']}" if caller["replaced"] else "",
    ]
    changed = [c for c in changed if c]
    expect.that(not changed, f"{what} changed the caller's dict: it {', '.join(changed)}; {advice}")
    expect.that(
        not caller["edited"],
        f"{what} modified the caller's tensors {caller['edited']} in place (an in-place "
        f"operation, a method ending in _ or an assignment to .data); {advice}",
    )


@torch.no_grad()
def hf_phi3_attention(fields, seed, x, mask, positions):
    """HF's Phi3Attention (fused ``qkv_proj``, q then k then v) with random weights: (its state, output)."""
    T = _transformers()
    from transformers.models.phi3 import modeling_phi3 as phi3

    kv = fields.get("n_kv_heads") or fields["n_heads"]
    config = T.Phi3Config(
        vocab_size=fields["vocab_size"],
        hidden_size=fields["d_model"],
        intermediate_size=fields["d_ff"],
        num_hidden_layers=1,
        num_attention_heads=fields["n_heads"],
        num_key_value_heads=kv,
        max_position_embeddings=fields["max_seq_len"],
        rope_parameters={"rope_type": "default", "rope_theta": fields["rope_base"]},
        pad_token_id=0,
        bos_token_id=0,
        eos_token_id=0,
        attention_dropout=0.0,
    )
    config._attn_implementation = "eager"
    layer = _randomize(phi3.Phi3Attention(config, layer_idx=0).eval(), seed)
    batch, length, _ = x.shape
    cos_sin = phi3.Phi3RotaryEmbedding(config)(x, _position_ids(positions, batch, length))
    out = layer(x, position_embeddings=cos_sin, attention_mask=_additive(mask, batch, length))[0]
    return layer.state_dict(), out


def phi3_course_state(hf_state, heads, kv):
    """Phi-3's attention in the course's names: qkv_proj's q and k row blocks taken to interleaved pairs."""
    qkv, hd = hf_state["qkv_proj.weight"], hf_state["o_proj.weight"].shape[1] // heads
    q, k, v = qkv.split([heads * hd, kv * hd, kv * hd], 0)
    return {
        "qkv_proj.weight": torch.cat([_interleaved(q, heads), _interleaved(k, kv), v], 0),
        "out_proj.weight": hf_state["o_proj.weight"].clone(),
    }


FUSED_NAMES = (
    "qkv_proj = nn.Linear(d_model, (num_heads + 2 * num_kv_heads) * head_dim, bias=False), "
    "out_proj = nn.Linear(d_model, d_model, bias=False)"
)
FUSED_SPLIT = (
    "split qkv_proj(x) along its last dim into num_heads * head_dim, num_kv_heads * head_dim and "
    "num_kv_heads * head_dim columns (q, k, v: not three equal parts unless num_kv_heads == num_heads)"
)


@FUSED.visible
def test_fuse_qkv(impl):
    "fuse_qkv: one qkv_proj.weight whose product is the q, k and v products side by side (4 heads, 4 and 2 kv heads)"
    _fuse_case(impl, 0, 32, 4, 4)
    _fuse_case(impl, 1, 32, 4, 2, extra=("out_proj.weight",))


@FUSED.hidden
def test_fuse_qkv_biases_prefixes(impl):
    "biases fused too; keys with a prefix (a whole decoder's state), other keys passed through; GQA ratios 1, 2, 4"
    _fuse_case(impl, 2, 24, 3, 3, bias=True, prefix="blocks.1.attn.", extra=("blocks.1.attn.out_proj.weight",))
    _fuse_case(impl, 3, 48, 4, 1, bias=True, extra=("out_proj.weight",))
    _fuse_case(impl, 4, 32, 8, 2, prefix="attn.")


@FUSED.hidden
def test_fuse_qkv_whole_decoder(impl):
    "a whole decoder's state dict: norms, feed-forward, embeddings, head and out_proj pass through unchanged, no key added"
    _fuse_decoder_case(impl, 7, 32, 4, 2, 2, bias=False)
    _fuse_decoder_case(impl, 8, 24, 3, 3, 3, bias=True)


@FUSED.hidden
def test_fuse_qkv_layout_is_phi3s(impl):
    "the layout is Phi-3's: Llama's separate q/k/v weights fused by fuse_qkv, loaded into HF's Phi3Attention, give LlamaAttention's output"
    T = _transformers()
    from transformers.models.phi3 import modeling_phi3 as phi3

    for seed, (d, heads, kv) in ((5, (32, 4, 2)), (6, (48, 6, 2))):
        fields = _llama_fields(seed, d=d, heads=heads, kv=kv)
        x, length = _randn((2, 6, d), seed + 600), 6
        causal = torch.ones(length, length, dtype=torch.bool).tril()
        from transformers.models.llama import modeling_llama as llama

        config = _hf_llama_config(fields)
        llama_layer = _randomize(llama.LlamaAttention(config, layer_idx=0).eval(), seed)
        separate = {k: v for k, v in llama_layer.state_dict().items()}
        fused = impl.call(fuse_qkv, separate)["value"]
        expect.that(
            isinstance(fused, dict) and "qkv_proj.weight" in fused,
            "fuse_qkv(LlamaAttention.state_dict()) has no 'qkv_proj.weight'",
        )
        phi3_config = T.Phi3Config(
            hidden_size=d,
            intermediate_size=fields["d_ff"],
            num_attention_heads=heads,
            num_key_value_heads=kv,
            num_hidden_layers=1,
            pad_token_id=0,
            bos_token_id=0,
            eos_token_id=0,
            max_position_embeddings=24,
        )
        phi3_config._attn_implementation = "eager"
        phi3_layer = phi3.Phi3Attention(phi3_config, layer_idx=0).eval()
        weight = expect.tensor(
            fused["qkv_proj.weight"], "fuse_qkv(...)['qkv_proj.weight']", shape=phi3_layer.qkv_proj.weight.shape
        )
        with torch.no_grad():
            phi3_layer.qkv_proj.weight.copy_(weight)
            phi3_layer.o_proj.weight.copy_(separate["o_proj.weight"])
            positions = _position_ids(None, 2, length)
            cos_sin = llama.LlamaRotaryEmbedding(config)(x, positions)
            mask = _additive(causal, 2, length)
            expected = llama_layer(x, position_embeddings=cos_sin, attention_mask=mask)[0]
            got = phi3_layer(x, position_embeddings=cos_sin, attention_mask=mask)[0]
        expect.close(
            got,
            expected,
            f"Phi3Attention with fuse_qkv(LlamaAttention({heads} heads, {kv} kv heads)."
            "state_dict()) (its output compared with LlamaAttention's)",
            **TOL,
            hint="Phi-3's qkv_proj rows are q (num_heads * head_dim), then k and v (num_kv_heads * head_dim each).",
        )


@FUSED.visible
def test_fused_parameters(impl):
    "FusedRotaryGQA(32, 4, 2, rope): qkv_proj [(4 + 2 * 2) * 8, 32], out_proj, no biases; the attributes"
    got = impl.call(fused_summary, 32, 4, 2)
    expect.that("parameters" in got, "FusedRotaryGQA(...) is not an nn.Module")
    expected = {"qkv_proj.weight": [64, 32], "out_proj.weight": [32, 32]}
    if got["parameters"] != expected:
        rows = got["parameters"].get("qkv_proj.weight", [None])[0]
        expect.fail(
            f"FusedRotaryGQA(32, 4, 2, rope) has parameters {got['parameters']}"
            + (
                ": qkv_proj's size assumes num_kv_heads == num_heads (3 * d_model rows); k and v have num_kv_heads "
                "heads each"
                if rows == 96
                else ""
            )
            + f"; expected {FUSED_NAMES}"
        )
    attributes = impl.call(fused_attributes, 32, 4, 2)
    for name, value in (("num_heads", 4), ("num_kv_heads", 2), ("head_dim", 8)):
        expect.that(
            attributes.get(name) == value,
            f"FusedRotaryGQA(32, 4, 2, rope).{name} is "
            f"{attributes.get(name)}, expected {value}: store self.num_heads, self.num_kv_heads, self.head_dim",
        )
    expect.that(
        attributes.get("rope_is_given"),
        "FusedRotaryGQA(32, 4, 2, rope).rope is not the rope it was given: store it as self.rope",
    )


def _split_mistake(state, heads, kv, order):
    """The separate q/k/v weights a forward reads from the fused one when it splits in another ``order``."""
    qkv, hd = state["qkv_proj.weight"], state["out_proj.weight"].shape[1] // heads
    sizes = {"q": heads * hd, "k": kv * hd, "v": kv * hd}
    parts = dict(zip(order, qkv.split([sizes[n] for n in order], 0), strict=True))
    return {f"{n}_proj.weight": parts[n] for n in "qkv"} | {"out_proj.weight": state["out_proj.weight"]}


def _fused_case(impl, d, heads, kv, shape, seed, positions=None, lengths=None):
    fields = _llama_fields(seed, d=d, heads=heads, kv=kv)
    batch, length = shape
    x = _randn((batch, length, d), seed + 700)
    mask = torch.ones(length, length, dtype=torch.bool).tril()
    rows = torch.ones(batch, length, dtype=torch.bool)
    if lengths is not None:
        padding = _padding(lengths, length, "left")
        positions, mask, rows = _positions(padding), mask & padding[:, None, None, :], padding
    hf_state, expected = hf_phi3_attention(fields, seed, x, mask, positions)
    state = phi3_course_state(hf_state, heads, kv)
    what = (
        f"FusedRotaryGQA({d}, {heads}, {kv}, rope)(x, causal mask"
        + ("" if positions is None else f", token_positions of shape {list(positions.shape)}")
        + ")"
    )
    try:
        got = impl.call(fused_forward, d, heads, kv, state, x, mask, positions)
    except StudentCodeError as error:
        if not str(error).startswith("RuntimeError"):  # a stub, a missing name: the usual message
            raise
        expect.fail(f"{what} raised {error}. Hint: {FUSED_SPLIT}")
    mistakes = [
        (
            gqa_math(_split_mistake(state, heads, kv, order), x, heads, kv, mask, positions),
            f"q, k and v are split off in the order {'-'.join(order)}: the rows of qkv_proj are q, then k, then v",
        )
        for order in ("kqv", "qvk", "vkq")
        if not (kv == heads and order == "qvk")
    ]
    if positions is not None and positions.dim() == 2:
        mistakes.append(
            (gqa_math(_split_mistake(state, heads, kv, "qkv"), x, heads, kv, mask, positions[0]), POSITIONS_ROW_0)
        )
    got = _real(got, rows, what, [batch, length, d])
    expect.close(
        got,
        expected[rows],
        what,
        **TOL,
        alternatives=[(w[rows], m) for w, m in mistakes],
        hint="The oracle is Hugging Face's Phi3Attention (fused qkv_proj) with the same weights (its q/k row "
        f"blocks permuted to the interleaved layout). {FUSED_SPLIT}.",
    )
    unfused = gqa_math(_split_mistake(state, heads, kv, "qkv"), x, heads, kv, mask, positions)  # F.linear per part
    expect.close(got, unfused[rows], f"{what}, compared with the separate q/k/v products and attention", **TOL)


def _one_product(impl, d, heads, kv, batch, length):
    hd = d // heads
    made = impl.call(fused_shapes_made, d, heads, kv, _randn((batch, length, d), 800))
    numel = batch * length * (heads + 2 * kv) * hd
    expect.that(
        any(math.prod(shape) == numel and shape[0] == batch for shape in made),
        f"FusedRotaryGQA({d}, {heads}, {kv}, rope)'s forward made no tensor of batch * seq * (num_heads + 2 * "
        f"num_kv_heads) * head_dim = {numel} numbers: q, k and v are not computed by one product; use "
        "self.qkv_proj(x) once, then split it (three products with slices of the weight are what fusing avoids)",
    )
    _one_product_used(impl, d, heads, kv, batch, length)


def _one_product_used(impl, d, heads, kv, batch, length):
    """The output comes from the one product: a known change added to the result of the (first) matrix product of
    the fused width must change the output as it changes the reference computation fed with that result."""
    width = (heads + 2 * kv) * (d // heads)
    fields = _llama_fields(810, d=d, heads=heads, kv=kv)
    x = _randn((batch, length, d), 810)
    mask = torch.ones(length, length, dtype=torch.bool).tril()
    state = phi3_course_state(hf_phi3_attention(fields, 810, x, mask, None)[0], heads, kv)
    delta = _randn((batch, length, width), 811)
    got = impl.call(fused_forward_perturbed, d, heads, kv, state, x, mask, delta)
    what = (
        f"FusedRotaryGQA({d}, {heads}, {kv}, rope)(x, causal mask) when the grader adds a known change to the "
        f"result of its product of {width} output features"
    )
    expect.that(
        got["perturbed"],
        f"{what}: no matrix product of that width ran, so q, k and v are not computed by "
        "one product; use self.qkv_proj(x) once, then split it",
    )
    output = expect.tensor(got["output"], what, shape=[batch, length, d])
    unchanged = gqa_math(_split_mistake(state, heads, kv, "qkv"), x, heads, kv, mask, None)
    if torch.allclose(output, unchanged, **TOL):
        expect.fail(
            f"{what}: the output did not change, so q, k and v are not taken from that product's result "
            "(three products concatenated are not one product); split self.qkv_proj(x)"
        )
    expect.close(
        output,
        _shifted_reference(state, delta, x, heads, kv, mask),
        what,
        **TOL,
        hint="q, k and v must be the three column blocks of the one product's result: self.qkv_proj(x).split(...)",
    )


@torch.no_grad()
def _shifted_reference(state, delta, x, heads, kv, mask):
    """The reference rotary GQA whose q, k and v projections' results are shifted by delta's three column blocks."""
    d, hd = x.shape[-1], x.shape[-1] // heads
    sizes = [heads * hd, kv * hd, kv * hd]
    module = RotaryGroupedQueryAttention(d, heads, kv, RoPE(hd, 64)).eval()
    module.load_state_dict(_split_mistake(state, heads, kv, "qkv"))
    for name, shift in zip(("q_proj", "k_proj", "v_proj"), delta.split(sizes, -1), strict=True):
        getattr(module, name).register_forward_hook(lambda _module, _inputs, result, shift=shift: result + shift)
    return module(x, mask)


@FUSED.visible
def test_fused_forward(impl):
    "FusedRotaryGQA(32, 4, 2) with a causal mask equals HF's Phi3Attention and the separate q/k/v computation; one product"
    _fused_case(impl, 32, 4, 2, (2, 6), 0)
    _one_product(impl, 32, 4, 2, 2, 5)


@FUSED.hidden
def test_fused_is_causal(impl):
    "is_causal=True with mask=None attends causally, as with the causal mask"
    d, heads, kv, batch, length = 32, 4, 2, 2, 6
    fields = _llama_fields(50, d=d, heads=heads, kv=kv)
    x = _randn((batch, length, d), 550)
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    hf_state, expected = hf_phi3_attention(fields, 50, x, causal, None)
    state = phi3_course_state(hf_state, heads, kv)
    what = f"FusedRotaryGQA({d}, {heads}, {kv}, rope)(x, mask=None, is_causal=True)"
    got = expect.tensor(
        impl.call(fused_forward, d, heads, kv, state, x, None, None, is_causal=True),
        what,
        shape=[batch, length, d],
    )
    ignored = gqa_math(_split_mistake(state, heads, kv, "qkv"), x, heads, kv, None, None)
    expect.close(
        got,
        expected,
        what,
        **TOL,
        alternatives=[(ignored, IS_CAUSAL_IGNORED)],
        hint="The oracle is Hugging Face's Phi3Attention with the causal mask.",
    )
    _check_is_causal_passed_on(impl.call(fused_sdpa_calls, d, heads, kv, x, None, None, is_causal=True), what)


@FUSED.hidden
def test_fused_ratios_positions_padding(impl):
    "GQA ratios 1 and 4, positions not starting at 0, a left-padded batch, [batch, seq] positions with different gaps per row; one product for each size"
    _fused_case(impl, 32, 4, 4, (2, 5), 10, positions=torch.arange(3, 8))
    _fused_case(impl, 48, 4, 1, (1, 7), 20, positions=torch.tensor([5, 1, 0, 9, 2, 2, 7]))
    _fused_case(impl, 48, 6, 2, (3, 6), 30, lengths=[6, 3, 4])
    _fused_case(impl, 32, 4, 2, (3, 6), 31, positions=BATCHED_POSITIONS)
    _one_product(impl, 48, 4, 1, 3, 4)
    _one_product(impl, 48, 6, 3, 1, 7)


@FUSED.hidden
def test_fused_fully_masked_queries(impl):
    "a query whose keys are all masked (left padding, a row masked whole) gets zero weights, as in RotaryGQA"
    d, heads, kv, batch, length, seed = 32, 4, 2, 3, 6, 61
    x, mask = _randn((batch, length, d), seed + 700), _fully_masked_mask(batch, length)
    hf_state, expected = hf_phi3_attention(_llama_fields(seed, d=d, heads=heads, kv=kv), seed, x, mask, None)
    state = phi3_course_state(hf_state, heads, kv)
    got = impl.call(fused_forward, d, heads, kv, state, x, mask, None)
    _check_fully_masked(got, "FusedRotaryGQA", heads, kv, x, mask, expected)


@FUSED.hidden
def test_fused_on_the_device_of_x(impl):
    "default positions (and any mask made here) on the device of x: the module runs on PyTorch's meta device, 1040 tokens"
    _attention_on_the_device_of_x(impl, "FusedRotaryGQA", 48, 6, 2)


# ---------------------------------------------------------------------------------------------------------------
# Adapters: the only code in this module that touches the student's objects. They run beside the student's code
# (in the sandboxed worker while grading, in the kernel for the notebook's own test cells), build and call the
# student's classes and functions on the inputs a check gives, and return plain results; they compute and report,
# never judge. A check calls one by reference, ``impl.call(name, ...)``; only functions marked ``@adapter`` can be.
#
# Adapters for notebook 08: GPT-2 and a Llama-style decoder.
#
# Configurations are built with the student's own ``GPT2Config`` / ``DecoderConfig`` (given in the
# notebook) from plain fields. Every model is built with the course's reference components
# (``autograder.reference``: ``PreNormBlock``, ``RoPE``, ``RotaryGroupedQueryAttention``, ``SwiGLU``,
# ``ModernBlock``) and PyTorch's ``nn.LayerNorm`` / ``nn.RMSNorm`` injected through the constructor
# arguments, so grading never depends on the student's notebooks 02-07 or on other exercises here.


def _number(value):
    return int(value) if isinstance(value, numbers.Integral) and not isinstance(value, bool) else value


def _model_summary(model) -> dict:
    result = summary(model)
    if "parameters" in result:
        result["state_keys"] = list(model.state_dict().keys())
        head, embedding = getattr(model, "lm_head", None), getattr(model, "wte", getattr(model, "tok_emb", None))
        result["tied"] = bool(
            isinstance(head, nn.Module)
            and isinstance(embedding, nn.Module)
            and getattr(head, "weight", None) is getattr(embedding, "weight", 0)
        )
    return result


@torch.no_grad()
def _logits(model, tokens, padding_mask):
    model.eval()
    return model(tokens) if padding_mask is None else model(tokens, padding_mask)


def _options(token_positions, is_causal) -> dict:
    """The keyword arguments of an attention or block call: only those the check gives."""
    options = {} if token_positions is None else {"token_positions": token_positions}
    return options if is_causal is None else options | {"is_causal": is_causal}


# --- Exercise 1 ------------------------------------------------------------------------


@adapter
def num_parameters(ns, fields: dict):
    return _number(need(ns, "gpt2_num_parameters")(need(ns, "GPT2Config")(**fields)))


# --- Exercise 2 ------------------------------------------------------------------------


def _gpt2(ns, fields: dict):
    return need(ns, "GPT2")(need(ns, "GPT2Config")(**fields), block=PreNormBlock, norm=nn.LayerNorm)


@adapter
def gpt2_summary(ns, fields: dict):
    return _model_summary(_gpt2(ns, fields))


def _blocks(model) -> list:
    blocks = getattr(model, "blocks", None)
    return list(blocks) if isinstance(blocks, nn.ModuleList) else []


@adapter
def gpt2_parts(ns, fields: dict) -> dict:
    """Which parts of ``GPT2`` were made by calling its ``block`` and ``norm`` arguments (recording stand-ins for
    the reference ``PreNormBlock`` and ``nn.LayerNorm``)."""
    block, norm = Recording(PreNormBlock), Recording(nn.LayerNorm)
    model = need(ns, "GPT2")(need(ns, "GPT2Config")(**fields), block=block, norm=norm)
    blocks = _blocks(model)
    return {
        "blocks": len(blocks),
        "blocks_by_block": sum(block.built(b) for b in blocks),
        "ln_f_by_norm": norm.built(getattr(model, "ln_f", None)),
        "block_norms": 2 * len(blocks),
        "block_norms_by_norm": sum(norm.built(getattr(b, name, None)) for b in blocks for name in ("norm1", "norm2")),
    }


@adapter
def gpt2_logits(ns, fields: dict, state: dict, tokens, padding_mask=None):
    return _logits(load(_gpt2(ns, fields), state), tokens, padding_mask)


@adapter
@torch.no_grad()
def model_on_meta(ns, model: str, fields: dict, shape: list, padded: bool) -> dict:
    """``GPT2`` or ``ModernDecoder`` moved to PyTorch's meta device and run on meta tokens (shapes only, no
    values): what it raised, or its logits' device and shape. A mask or positions made on the CPU (without
    ``device=tokens.device``) cannot be mixed with meta tensors, so it raises."""
    module = _gpt2(ns, fields) if model == "GPT2" else _decoder(ns, fields)
    tokens = torch.zeros(shape, dtype=torch.long, device="meta")
    arguments = (tokens, torch.ones(shape, dtype=torch.bool, device="meta")) if padded else (tokens,)
    return run_on_meta(module, *arguments)


# --- Exercise 3 ------------------------------------------------------------------------


@adapter
def causal_lm_loss(ns, logits, labels, ignore_index=None):
    loss = need(ns, "causal_lm_loss")
    return loss(logits, labels) if ignore_index is None else loss(logits, labels, ignore_index=ignore_index)


# --- Exercises 4 and 8 -----------------------------------------------------------------


@adapter
def convert(ns, function: str, config_class: str, fields: dict, hf_state: dict, tied=()):
    """The student's converted state dict (plain tensors), for the check to load into a reference model; what the
    call did to the caller's dict; and whether its ``lm_head.weight`` is the same tensor as its ``wte.weight``.

    ``tied`` names pairs of keys of ``hf_state`` that share one tensor in Hugging Face's ``state_dict()`` (GPT-2's
    head and ``transformer.wte.weight``); the transfer to this process copied them apart, so they are tied again
    here, as the caller's dict has them."""
    hf_state = dict(hf_state)
    for key, source in tied:
        if key in hf_state and source in hf_state:
            hf_state[key] = hf_state[source].detach()  # a second tensor on the same storage, as state_dict() gives
    config = need(ns, config_class)(**fields)
    result, caller = dict_call_observed(lambda state: need(ns, function)(state, config), hf_state)
    value = {str(k): v for k, v in result.items()} if isinstance(result, dict) else result
    head, wte = (value.get(k) for k in ("lm_head.weight", "wte.weight")) if isinstance(value, dict) else (None, None)
    return {"value": value, "caller": caller, "head_is_wte": _same_tensor(head, wte)}


def _same_tensor(a, b) -> bool:
    """Whether two tensors are views of the same numbers (one object, or detached views of one parameter)."""
    return (
        isinstance(a, torch.Tensor)
        and isinstance(b, torch.Tensor)
        and a.shape == b.shape
        and a.stride() == b.stride()
        and a.storage_offset() == b.storage_offset()
        and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    )


# --- Exercise 5 ------------------------------------------------------------------------


def _rotary_gqa(ns, d_model, num_heads, num_kv_heads, max_seq_len):
    rope = RoPE(d_model // num_heads, max_seq_len)
    return need(ns, "RotaryGQA")(d_model, num_heads, num_kv_heads, rope)


@adapter
def rotary_gqa_summary(ns, d_model: int, num_heads: int, num_kv_heads: int):
    return summary(_rotary_gqa(ns, d_model, num_heads, num_kv_heads, 64))


@adapter
def rotary_gqa_attributes(ns, d_model: int, num_heads: int, num_kv_heads: int) -> dict:
    """The attributes the spec names (notebook 13's attention_maps reads them): sizes, and whether ``rope`` is
    the module it was given."""
    rope = RoPE(d_model // num_heads, 64)
    module = need(ns, "RotaryGQA")(d_model, num_heads, num_kv_heads, rope)
    found = {name: getattr(module, name, None) for name in ("num_heads", "num_kv_heads", "head_dim")}
    return {name: value if isinstance(value, int) else repr(value)[:40] for name, value in found.items()} | {
        "rope_is_given": getattr(module, "rope", None) is rope
    }


@adapter
@torch.no_grad()
def rotary_gqa_forward(
    ns, d_model: int, num_heads: int, num_kv_heads: int, state: dict, x, mask=None, token_positions=None, is_causal=None
):
    module = load(_rotary_gqa(ns, d_model, num_heads, num_kv_heads, 64), state).eval()
    return module(x, mask, **_options(token_positions, is_causal))


def _sdpa_calls(module, x, mask, token_positions, is_causal) -> list:
    """The ``attn_mask`` (its shape, or None) and ``is_causal`` of every call to
    ``F.scaled_dot_product_attention`` during one forward, however the function is reached (a TorchFunctionMode
    sees the call, not the name it was called by)."""
    calls = []

    class Record(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if getattr(func, "__name__", "") == "scaled_dot_product_attention":
                given = kwargs.get("attn_mask", args[3] if len(args) > 3 else None)
                causal = kwargs.get("is_causal", args[5] if len(args) > 5 else False)
                calls.append(
                    {
                        "attn_mask": list(given.shape) if isinstance(given, torch.Tensor) else repr(given)[:40],
                        "is_causal": causal if isinstance(causal, bool) else repr(causal)[:40],
                    }
                )
            return func(*args, **kwargs)

    with torch.no_grad(), Record():
        module(x, mask, **_options(token_positions, is_causal))
    return calls


@adapter
def rotary_gqa_sdpa_calls(
    ns, d_model: int, num_heads: int, num_kv_heads: int, x, mask=None, token_positions=None, is_causal=None
) -> list:
    return _sdpa_calls(
        _rotary_gqa(ns, d_model, num_heads, num_kv_heads, 64).eval(), x, mask, token_positions, is_causal
    )


@adapter
@torch.no_grad()
def attention_on_meta(ns, name: str, d_model: int, num_heads: int, num_kv_heads: int, shape: list, options: dict):
    """``RotaryGQA`` or ``FusedRotaryGQA`` moved to PyTorch's meta device and run on a meta ``x`` with no
    ``token_positions`` (and ``options``, such as ``is_causal``): what it raised, or its output's device and
    shape. Its rope makes its angles on the device of ``x``, so only the attention's own tensors (the default
    positions, a causal mask written by hand) can be on the wrong device."""
    rope = RoPE(d_model // num_heads, 2 * shape[1])
    module = need(ns, name)(d_model, num_heads, num_kv_heads, rope).to("meta").eval()
    x = torch.zeros([*shape, d_model], device="meta")
    made = []
    result = outcome(lambda: made.append(module(x, None, **options)))
    output = made[0] if made else None
    return result | {"device": str(getattr(output, "device", "")), "shape": list(getattr(output, "shape", []))}


# --- Exercise 6 ------------------------------------------------------------------------


def _modern_block(ns, fields: dict):
    config = need(ns, "DecoderConfig")(**fields)
    rope = RoPE(config.d_model // config.n_heads, config.max_seq_len, config.rope_base)
    return need(ns, "ModernBlock")(
        config, rope, attention=RotaryGroupedQueryAttention, feed_forward=SwiGLU, norm=nn.RMSNorm
    )


@adapter
def modern_block_parts(ns, fields: dict) -> dict:
    """Which parts of ``ModernBlock`` were made by calling its ``attention``, ``feed_forward`` and ``norm`` arguments
    (recording stand-ins for the reference parts)."""
    config = need(ns, "DecoderConfig")(**fields)
    rope = RoPE(config.d_model // config.n_heads, config.max_seq_len, config.rope_base)
    attention, feed_forward, norm = Recording(RotaryGroupedQueryAttention), Recording(SwiGLU), Recording(nn.RMSNorm)
    module = need(ns, "ModernBlock")(config, rope, attention=attention, feed_forward=feed_forward, norm=norm)
    return {
        "attn": attention.built(getattr(module, "attn", None)),
        "ffn": feed_forward.built(getattr(module, "ffn", None)),
        "norm1": norm.built(getattr(module, "norm1", None)),
        "norm2": norm.built(getattr(module, "norm2", None)),
    }


@adapter
def modern_block_summary(ns, fields: dict):
    return summary(_modern_block(ns, fields))


@adapter
@torch.no_grad()
def modern_block_forward(ns, fields: dict, state: dict, x, mask=None, token_positions=None, is_causal=None):
    module = load(_modern_block(ns, fields), state).eval()
    return module(x, mask, **_options(token_positions, is_causal))


# --- Exercise 7 ------------------------------------------------------------------------


def _decoder(ns, fields: dict):
    return need(ns, "ModernDecoder")(need(ns, "DecoderConfig")(**fields), block=ModernBlock, norm=nn.RMSNorm, rope=RoPE)


@adapter
def decoder_parts(ns, fields: dict) -> dict:
    """Which parts of ``ModernDecoder`` were made by calling its ``block`` and ``norm`` arguments (recording
    stand-ins for the reference ``ModernBlock`` and ``nn.RMSNorm``)."""
    block, norm = Recording(ModernBlock), Recording(nn.RMSNorm)
    model = need(ns, "ModernDecoder")(need(ns, "DecoderConfig")(**fields), block=block, norm=norm, rope=RoPE)
    blocks = _blocks(model)
    return {
        "blocks": len(blocks),
        "blocks_by_block": sum(block.built(b) for b in blocks),
        "norm_by_norm": norm.built(getattr(model, "norm", None)),
    }


@adapter
def decoder_summary(ns, fields: dict):
    return _model_summary(_decoder(ns, fields))


@adapter
def decoder_logits(ns, fields: dict, state: dict, tokens, padding_mask=None):
    return _logits(load(_decoder(ns, fields), state), tokens, padding_mask)


@adapter
@torch.no_grad()
def decoder_observed(ns, fields: dict, tokens, padding_mask=None) -> dict:
    """What the blocks of a ``ModernDecoder`` are given: the rotary modules, and the positions, the mask (its
    shape, or None) and ``is_causal`` (False when not given) in each forward.

    Recording stand-ins for ``rope`` and ``block`` (reference parts underneath) observe what the logits do
    not show: whether every block shares ONE rotary module, which positions reach the blocks, and whether a
    purely causal mask arrives as ``is_causal=True`` without a tensor.
    """
    seen = {"ropes_made": 0, "block_ropes": [], "positions": [], "masks": [], "is_causal": []}

    def rope(*args, **kwargs):
        seen["ropes_made"] += 1
        return RoPE(*args, **kwargs)

    def block(config, rope_module, *args, **kwargs):
        module = ModernBlock(config, rope_module, *args, **kwargs)
        seen["block_ropes"].append(id(rope_module))
        forward = module.forward

        def recording_forward(x, mask=None, token_positions=None, *rest, **named):
            seen["positions"].append(token_positions)
            seen["masks"].append(list(mask.shape) if isinstance(mask, torch.Tensor) else repr(mask)[:40])
            seen["is_causal"].append(rest[0] if rest else named.get("is_causal", False))
            return forward(x, mask, token_positions, *rest, **named)

        module.forward = recording_forward
        return module

    model = need(ns, "ModernDecoder")(need(ns, "DecoderConfig")(**fields), block=block, norm=nn.RMSNorm, rope=rope)
    model(tokens) if padding_mask is None else model(tokens, padding_mask)
    return {
        "ropes_made": seen["ropes_made"],
        "blocks": len(seen["block_ropes"]),
        "distinct_ropes": len(set(seen["block_ropes"])),
        "positions": seen["positions"],
        "masks": seen["masks"],
        "is_causal": [value if isinstance(value, bool) else repr(value)[:40] for value in seen["is_causal"]],
    }


# --- Exercise 9 ------------------------------------------------------------------------


@adapter
def fuse_qkv(ns, state: dict):
    """``fuse_qkv(state)``'s result, and what the call did to the caller's dict ("the result is a new dict")."""
    result, caller = dict_call_observed(need(ns, "fuse_qkv"), state)
    value = {str(k): v for k, v in result.items()} if isinstance(result, dict) else result
    return {"value": value, "caller": caller}


def _fused(ns, d_model, num_heads, num_kv_heads, rope=None):
    rope = RoPE(d_model // num_heads, 64) if rope is None else rope
    return need(ns, "FusedRotaryGQA")(d_model, num_heads, num_kv_heads, rope)


@adapter
def fused_summary(ns, d_model: int, num_heads: int, num_kv_heads: int):
    return summary(_fused(ns, d_model, num_heads, num_kv_heads))


@adapter
def fused_attributes(ns, d_model: int, num_heads: int, num_kv_heads: int) -> dict:
    rope = RoPE(d_model // num_heads, 64)
    module = _fused(ns, d_model, num_heads, num_kv_heads, rope)
    found = {name: getattr(module, name, None) for name in ("num_heads", "num_kv_heads", "head_dim")}
    return {name: value if isinstance(value, int) else repr(value)[:40] for name, value in found.items()} | {
        "rope_is_given": getattr(module, "rope", None) is rope
    }


@adapter
@torch.no_grad()
def fused_forward(
    ns, d_model: int, num_heads: int, num_kv_heads: int, state: dict, x, mask=None, token_positions=None, is_causal=None
):
    module = load(_fused(ns, d_model, num_heads, num_kv_heads), state).eval()
    return module(x, mask, **_options(token_positions, is_causal))


@adapter
def fused_sdpa_calls(
    ns, d_model: int, num_heads: int, num_kv_heads: int, x, mask=None, token_positions=None, is_causal=None
) -> list:
    return _sdpa_calls(_fused(ns, d_model, num_heads, num_kv_heads).eval(), x, mask, token_positions, is_causal)


@adapter
def fused_forward_perturbed(ns, d_model: int, num_heads: int, num_kv_heads: int, state: dict, x, mask, delta):
    """``FusedRotaryGQA``'s output when ``delta`` is added to the result of the first matrix product with
    ``delta.shape[-1]`` ((num_heads + 2 * num_kv_heads) * head_dim) output features and ``delta.numel()``
    numbers, however it is computed (``qkv_proj(x)``, ``F.linear``, ``@``)."""
    module = load(_fused(ns, d_model, num_heads, num_kv_heads), state).eval()
    with torch.no_grad(), first_product_perturbed(delta) as done:
        output = module(x, mask)
    return {"output": output, "perturbed": bool(done)}


@adapter
@torch.no_grad()
def fused_shapes_made(ns, d_model: int, num_heads: int, num_kv_heads: int, x) -> list:
    """The shapes of the tensors torch functions made during one forward (causal mask), for "one product"."""
    module = _fused(ns, d_model, num_heads, num_kv_heads).eval()
    mask = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril()
    return shapes_made(module, x, mask)["shapes"]
