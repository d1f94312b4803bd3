"""Notebook 09's exercises, with their checks and adapters: BERT (embeddings, MLM head, BertForMaskedLM), masking, the MLM loss, and the
encoder-decoder Transformer.

Oracles:
- Hugging Face ``transformers.BertForMaskedLM`` built from a tiny random ``transformers.BertConfig``
  (eager attention, dropout 0, eval mode), with the checker's own name mapping from the course's
  names (``embeddings.word``, ``blocks.i.self_attn.q_proj``, ``head.dense``, ...) to Hugging Face's
  (``bert.embeddings.word_embeddings``, ``bert.encoder.layer.i.attention.self.query``,
  ``cls.predictions.transform.dense``, ...): its ``bert.embeddings`` for exercise 1, its
  ``cls.predictions`` (and the gradient reaching its word table) for exercise 2, the whole model
  with ``attention_mask`` and token types for exercise 3 (and its parameter count), and its
  ``labels=`` loss for exercise 5, besides ``F.cross_entropy(ignore_index=-100)``.
- Masking (exercise 4): exact properties (special tokens never picked, labels = the token or -100,
  the input unchanged, inputs equal to the tokens where not picked, the same generator seed gives
  the same result whatever the global generator) and statistics over many draws with a fixed
  generator, each within 5 binomial standard deviations of its expectation (picked fraction 0.15 of
  the non-special tokens; of the picked: [MASK] 0.8 + 0.1/V, random 0.1(1 - 2/V), kept 0.1 + 0.1/V;
  random ids: their mean within 5 standard deviations of (V-1)/2 and all in [0, V)).
- The encoder-decoder (exercise 6): ``torch.nn.Transformer(d, h, n_enc, n_dec, d_ff, dropout=0.0,
  activation, batch_first=True, norm_first)`` in train mode (dropout 0; eval mode's fast path writes
  zeros at padded positions), with the student's block weights copied in (q/k/v stacked into
  ``in_proj_weight``), wrapped in embeddings scaled by sqrt(d_model), the sine/cosine table computed
  here in closed form, and the output layer; masks translated to PyTorch's polarity. Plus the
  invariances: changing a future target token leaves earlier logits unchanged, changing padded
  source tokens leaves every real logit unchanged.
- The parameter count (exercise 7): ``sum(p.numel() for p in module.parameters())`` of the same
  ``nn.Transformer`` (on the meta device, so that no memory is spent) in a module with the embedding
  tables and the output layer, the shared ones tied as ``share_embeddings`` asks (``parameters()``
  counts a shared parameter once). Integers, compared exactly; no tolerance.

``norm=`` is observed by its output: BertEmbeddings and MLMHead are also built with ``GivenNorm`` (LayerNorm's
parameters, no mean subtracted), and their output must be that norm's (a LayerNorm built by name differs).
The other constructor arguments the text names (BertForMaskedLM's ``embeddings``, ``block``, ``head``, ``norm``;
EncoderDecoder's ``encoder_block``, ``decoder_block``, ``norm``, ``positions``) are recording stand-ins for the
reference parts: the parts the text names (and BERT's norms in embeddings, head and blocks) must be modules they made.
"On the device of the tokens" (BertEmbeddings' positions and default segment ids, EncoderDecoder's positions): the
module runs on PyTorch's meta device, where a lookup accepts CPU indices silently, so a TorchFunctionMode
(``CPUBesideMeta``) notes every torch function given a CPU tensor of one or more dimensions beside meta ones.
``mask_tokens`` is also given int32 tokens: its labels must still be int64.
Lengths beyond the notebook's (its configs' default tables have 512 rows): BertEmbeddings with max_positions 600
on 560 tokens, EncoderDecoder with max_len 600 on 520 source and 516 target tokens.

The student's models are built with the course's reference parts (``autograder.reference``), so
these checks never rest on the student's other exercises or earlier notebooks. Diagnoses of known
mistakes are the oracle's computation with the mistake (a missing norm, ignored token types, tanh
GELU, pre-norm blocks, an ignored padding mask, a missing sqrt(d_model), ...).

Tolerances (float32 on CPU): outputs atol 1e-5 + rtol 1e-4; gradients atol 1e-5 + rtol 1e-4; losses
atol 1e-5 + rtol 1e-5; invariances atol 1e-5. Measured for the solution with the reference parts over 40
seeds (widths 16 and 24, vocabularies 30-34, padded batches; encoder-decoders pre- and post-norm, relu
and gelu, shared and separate embeddings): embeddings differ from Hugging Face's by at most 9.5e-7,
BertForMaskedLM logits (of order 1-10) by 5.4e-6, and by 3.8e-6 in the "small activations" case; the
MLM head, its word-table gradient, the loss, and the encoder-decoder's logits and memory were equal to
the oracles' to the last bit here (the same PyTorch kernels), so their tolerance only covers another
BLAS. LayerNorm's eps: BERT's is 1e-12; with PyTorch's default 1e-5, the embeddings (tables of standard
deviation 0.02, as BERT initialises them) move by at least 1.0e-2, and in the model's "small
activations" case (LayerNorm gains and biases scaled by 0.02, so that each block's norm sees inputs of
variance about 1e-3; the head's norm at full gain) the logits move by at least 3.2e-3. Other closest
known mistakes: the tanh GELU in the head moves its logits by at least 8.1e-4, pre-norm blocks BERT's
logits by 3.6, a missing sqrt(d_model) the encoder-decoder's by 0.36.
"""

from __future__ import annotations

import math
import numbers
import re
import warnings
from functools import partial
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn

from autograder import expect
from autograder.adapters import Recording, adapter, forward_backward, load, need, run_on_meta, summary
from autograder.errors import StudentCodeError
from autograder.exercises import Exercise
from autograder.notebooks._seeds import seeded
from autograder.reference.bert import BertEmbeddings as ReferenceEmbeddings
from autograder.reference.bert import MLMHead as ReferenceHead
from autograder.reference.blocks import DecoderBlock, EncoderBlock
from autograder.reference.positions import SinusoidalPositionalEncoding
from autograder.rules import Rule

EMBEDDINGS = Exercise("bert_embeddings", "BertEmbeddings", points=3)
HEAD = Exercise("mlm_head", "the MLM head", points=3)
BERT = Exercise("bert_mlm", "BertForMaskedLM", points=3)
MASKING = Exercise("mask_tokens", "mask_tokens", points=4)
LOSS = Exercise("mlm_loss", "mlm_loss", points=2)
ENCDEC = Exercise("encoder_decoder", "EncoderDecoder", points=4)
COUNT = Exercise(
    "transformer_num_parameters",
    "the encoder-decoder's parameter count",
    points=2,
    rules=(
        Rule(
            "work it out from the sizes in the config; do not build any module",
            (
                "torch.nn.Transformer",
                "torch.nn.TransformerEncoder",
                "torch.nn.TransformerDecoder",
                "torch.nn.TransformerEncoderLayer",
                "torch.nn.TransformerDecoderLayer",
                "torch.nn.MultiheadAttention",
                "torch.nn.Linear",
                "torch.nn.LazyLinear",
                "torch.nn.Embedding",
                "torch.nn.LayerNorm",
                "torch.nn.Module",
            ),
            names=("EncoderDecoder", "EncoderBlock", "DecoderBlock", "LayerNorm", "SinusoidalPositionalEncoding"),
        ),
    ),
)
EXERCISES = [EMBEDDINGS, HEAD, BERT, MASKING, LOSS, ENCDEC, COUNT]
ORACLE_IMPORTS = (
    "transformers.models.bert.modeling_bert",
)  # imported while the notebook runs (grading.grade): seconds

TOL = {"atol": 1e-5, "rtol": 1e-4}
GRAD = {"atol": 1e-5, "rtol": 1e-4}
LOSS_TOL = {"atol": 1e-5, "rtol": 1e-5}
SAME = 1e-5
SIGMAS = 5.0


_gen, _randn = seeded(9000)


def _randint(high, shape, seed, low=0):
    return torch.randint(low, high, shape, generator=_gen(seed))


def _padding(lengths, length):
    """Right padding: True for the first lengths[b] positions of sequence b."""
    return torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]


# --- BERT: configurations, states in the course's names, Hugging Face's model -------------------


def bert_fields(vocab=40, d=16, layers=2, heads=2, d_ff=32, positions=20, types=2):
    return {
        "vocab_size": vocab,
        "d_model": d,
        "n_layers": layers,
        "n_heads": heads,
        "d_ff": d_ff,
        "max_positions": positions,
        "type_vocab_size": types,
        "norm_eps": 1e-12,
        "pad_token_id": 0,
    }


def _linear(prefix, n_in, n_out, seed, bias=0.2):
    return {
        f"{prefix}.weight": _randn((n_out, n_in), seed, n_in**-0.5),
        f"{prefix}.bias": _randn((n_out,), seed + 1, bias),
    }


def _norm(prefix, d, seed, gain=1.0):
    return {
        f"{prefix}.weight": gain * (1.0 + _randn((d,), seed, 0.3)),
        f"{prefix}.bias": _randn((d,), seed + 1, 0.3 * gain),
    }


def embeddings_state(f, seed, std=0.02, prefix=""):
    d = f["d_model"]
    state = {
        f"{prefix}word.weight": _randn((f["vocab_size"], d), seed, std),
        f"{prefix}position.weight": _randn((f["max_positions"], d), seed + 1, std),
        f"{prefix}token_type.weight": _randn((f["type_vocab_size"], d), seed + 2, std),
    }
    return state | _norm(f"{prefix}norm", d, seed + 3)


def head_state(f, seed, prefix="", gain=1.0):
    d = f["d_model"]
    return (
        _linear(f"{prefix}dense", d, d, seed)
        | _norm(f"{prefix}norm", d, seed + 2, gain)
        | {f"{prefix}decoder.bias": _randn((f["vocab_size"],), seed + 4, 0.2)}
    )


def bert_state(f, seed, gain=1.0):
    """A BertForMaskedLM state with the course's names. ``gain`` scales every LayerNorm and bias."""
    d, d_ff = f["d_model"], f["d_ff"]
    state = embeddings_state(f, seed, std=0.5, prefix="embeddings.")
    state |= _norm("embeddings.norm", d, seed + 3, gain)
    for i in range(f["n_layers"]):
        p, s = f"blocks.{i}.", seed + 100 * (i + 1)
        for j, proj in enumerate(("q_proj", "k_proj", "v_proj", "out_proj")):
            state |= _linear(f"{p}self_attn.{proj}", d, d, s + 10 * j, 0.2 * gain)
        state |= _norm(f"{p}norm1", d, s + 50, gain) | _norm(f"{p}norm2", d, s + 60, gain)
        state |= _linear(f"{p}ffn.fc1", d, d_ff, s + 70, 0.2 * gain) | _linear(
            f"{p}ffn.fc2", d_ff, d, s + 80, 0.2 * gain
        )
    state |= head_state(f, seed + 900, "head.")  # the head's own norm at full gain: logits of order 1
    state["head.decoder.weight"] = state["embeddings.word.weight"]
    return state


_HF_BLOCK = {
    "attention.self.query": "self_attn.q_proj",
    "attention.self.key": "self_attn.k_proj",
    "attention.self.value": "self_attn.v_proj",
    "attention.output.dense": "self_attn.out_proj",
    "attention.output.LayerNorm": "norm1",
    "intermediate.dense": "ffn.fc1",
    "output.dense": "ffn.fc2",
    "output.LayerNorm": "norm2",
}
_HF_FIXED = {
    "bert.embeddings.word_embeddings.weight": "embeddings.word.weight",
    "bert.embeddings.position_embeddings.weight": "embeddings.position.weight",
    "bert.embeddings.token_type_embeddings.weight": "embeddings.token_type.weight",
    "bert.embeddings.LayerNorm.weight": "embeddings.norm.weight",
    "bert.embeddings.LayerNorm.bias": "embeddings.norm.bias",
    "cls.predictions.transform.dense.weight": "head.dense.weight",
    "cls.predictions.transform.dense.bias": "head.dense.bias",
    "cls.predictions.transform.LayerNorm.weight": "head.norm.weight",
    "cls.predictions.transform.LayerNorm.bias": "head.norm.bias",
    "cls.predictions.bias": "head.decoder.bias",
    "cls.predictions.decoder.bias": "head.decoder.bias",
    "cls.predictions.decoder.weight": "embeddings.word.weight",
}


def course_name(hf_name: str) -> str:
    if hf_name in _HF_FIXED:
        return _HF_FIXED[hf_name]
    match = re.fullmatch(r"bert\.encoder\.layer\.(\d+)\.(.+)\.(weight|bias)", hf_name)
    if not match:
        raise KeyError(hf_name)
    return f"blocks.{match[1]}.{_HF_BLOCK[match[2]]}.{match[3]}"


def hf_bert(f, state=None):
    """Hugging Face's BertForMaskedLM for the course config ``f``, with ``state`` (course names) copied in."""
    import transformers

    config = transformers.BertConfig(
        vocab_size=f["vocab_size"],
        hidden_size=f["d_model"],
        num_hidden_layers=f["n_layers"],
        num_attention_heads=f["n_heads"],
        intermediate_size=f["d_ff"],
        max_position_embeddings=f["max_positions"],
        type_vocab_size=f["type_vocab_size"],
        layer_norm_eps=f["norm_eps"],
        pad_token_id=f["pad_token_id"],
        hidden_act="gelu",
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    config._attn_implementation = "eager"
    model = transformers.BertForMaskedLM(config).eval()
    if state is not None:
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(state[course_name(name)])
    return model


def _config(f):
    return SimpleNamespace(**f)


class GivenNorm(nn.LayerNorm):
    """The ``norm`` a check passes to show that the argument is used: LayerNorm's parameters (``weight``, ``bias``,
    so the course's states load), but no mean subtracted, ``rms_norm(x) * weight + bias``. Its output differs from
    a LayerNorm's wherever the mean of x is not 0, so a part built by name (LayerNorm) shows in the output."""

    def forward(self, x):
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps) + self.bias


def given_norm(x, weight, bias, eps):
    """``GivenNorm``'s computation, for the oracles."""
    return F.rms_norm(x, (x.shape[-1],), weight, eps) + bias


NORM_IGNORED = (
    "the norm argument is not used: a LayerNorm is built by name. Build self.norm by calling the argument, "
    "norm(config.d_model, eps=config.norm_eps) (the checks pass a norm of their own)"
)


# --- Exercise 1 ------------------------------------------------------------------------------------

EMBEDDINGS_NAMES = (
    "self.word, self.position, self.token_type (nn.Embedding) and self.norm = norm(config.d_model, eps=config.norm_eps)"
)


@EMBEDDINGS.visible
def test_embeddings_parameters(impl):
    "word, position, token_type tables and norm, with the shapes the config asks for"
    f = bert_fields(vocab=40, d=16, positions=20, types=3)
    got = impl.call(embeddings_summary, f)
    expect.that("parameters" in got, "BertEmbeddings(config) is not an nn.Module")
    expected = {
        "word.weight": [40, 16],
        "position.weight": [20, 16],
        "token_type.weight": [3, 16],
        "norm.weight": [16],
        "norm.bias": [16],
    }
    expect.that(
        got["parameters"] == expected,
        f"BertEmbeddings(config) has parameters {got['parameters']}, expected {expected}: {EMBEDDINGS_NAMES}",
    )


def _embeddings_mistakes(state, tokens, types, eps):
    word, pos, typ = (
        state["word.weight"][tokens],
        state["position.weight"][: tokens.shape[1]],
        state["token_type.weight"],
    )
    typ = typ[types] if types is not None else typ[0]
    d = word.shape[-1]

    def ln(x, e=eps):
        return F.layer_norm(x, (d,), state["norm.weight"], state["norm.bias"], e)

    mistakes = [
        (
            ln(word + pos),
            "the token types are not added: add self.token_type(token_type_ids), with token_type_ids = zeros when None",
        ),
        (word + pos + typ, "the LayerNorm is missing: return self.norm(word + position + token_type)"),
        (
            ln(word) + pos + typ,
            "the LayerNorm is applied to the word embeddings only, before the sum: normalize the sum of all three",
        ),
        (
            ln(word + pos + typ, 1e-5),
            "the LayerNorm uses eps=1e-5 (PyTorch's default): build it with "
            "norm(config.d_model, eps=config.norm_eps); BERT's eps is 1e-12",
        ),
        (ln(word + typ), "the position embeddings are not added: positions 0..seq-1, self.position(positions)"),
    ]
    if types is not None:
        mistakes.append(
            (
                ln(word + pos + state["token_type.weight"][0]),
                "token_type_ids is ignored: the segment of each token selects its row of self.token_type",
            )
        )
    return mistakes


def _embeddings_case(impl, f, seed, shape, with_types=True):
    state = embeddings_state(f, seed)
    tokens = _randint(f["vocab_size"], shape, seed + 10)
    types = _randint(f["type_vocab_size"], shape, seed + 11) if with_types else None
    got = impl.call(embeddings_forward, f, state, tokens, types)
    hf = hf_bert(
        f,
        {f"embeddings.{k}": v for k, v in state.items()}
        | {k: v for k, v in bert_state(f, 0).items() if not k.startswith("embeddings.")},
    )
    with torch.no_grad():
        expected = hf.bert.embeddings(input_ids=tokens, token_type_ids=types)
    what = (
        f"BertEmbeddings(d_model={f['d_model']})(tokens{', token_type_ids' if with_types else ''}) for tokens of "
        f"shape {list(shape)}"
    )
    expect.that(isinstance(got, dict) and "output" in got, f"{what} did not run")
    expect.close(
        got["output"],
        expected,
        what,
        **TOL,
        alternatives=_embeddings_mistakes(state, tokens, types, 1e-12),
        hint="The oracle is Hugging Face's BertModel embeddings with your weights copied in.",
    )


@EMBEDDINGS.visible
def test_embeddings_forward(impl):
    "equals Hugging Face's BERT embeddings (word + position + token type, LayerNorm eps 1e-12)"
    _embeddings_case(impl, bert_fields(), 0, (2, 7))


@EMBEDDINGS.hidden
def test_embeddings_default_types_and_shapes(impl):
    "token_type_ids=None means segment 0; other widths, lengths and numbers of segments"
    _embeddings_case(impl, bert_fields(), 10, (3, 5), with_types=False)
    _embeddings_case(impl, bert_fields(vocab=30, d=24, positions=12, types=3), 20, (2, 12))
    _embeddings_case(impl, bert_fields(vocab=50, d=8, positions=9), 30, (1, 1))


# Longer than any sequence the notebook runs or configures (BertConfig's and TransformerConfig's default tables have
# 512 rows): a table or positions cached for a fixed length show.
LONG = 560


def _long_case(run, what, advice):
    """Run a case on ``LONG`` tokens; an error the forward raises there (a tensor of a fixed length that does not
    fit) is named."""
    try:
        run()
    except StudentCodeError as error:
        if not str(error).startswith(("RuntimeError", "IndexError", "ValueError")):  # a stub, a missing name
            raise
        expect.fail(f"{what} raised {str(error)[:200]}: {advice}")


@EMBEDDINGS.hidden
def test_embeddings_longer_than_512(impl):
    "max_positions=600 and 560 tokens, beyond BERT's 512: positions made for the length of tokens"
    f = bert_fields(vocab=30, d=8, positions=LONG + 40)
    _long_case(
        lambda: _embeddings_case(impl, f, 60, (1, LONG)),
        f"BertEmbeddings(config with max_positions={LONG + 40})(tokens of shape {[1, LONG]})",
        "the positions (or a table) were made for a fixed length; make them for each call, "
        "torch.arange(seq, device=tokens.device), up to config.max_positions",
    )


@EMBEDDINGS.hidden
def test_embeddings_use_the_norm_given(impl):
    "norm= is used: with a norm of the check's own (no mean subtracted), the output is that norm of the sum"
    f = bert_fields(vocab=30, d=16, positions=10)
    state = embeddings_state(f, 40, std=0.5)  # tables large enough for the sum to have a mean far from 0
    tokens, types = _randint(30, (2, 6), 41), _randint(2, (2, 6), 42)
    got = impl.call(embeddings_forward, f, state, tokens, types, given=True)
    total = state["word.weight"][tokens] + state["position.weight"][:6] + state["token_type.weight"][types]
    what = "BertEmbeddings(config, norm=GivenNorm)(tokens, token_type_ids), GivenNorm a norm of the check's own"
    expect.that(isinstance(got, dict) and "output" in got, f"{what} did not run")
    expect.close(
        got["output"],
        given_norm(total, state["norm.weight"], state["norm.bias"], f["norm_eps"]),
        what,
        **TOL,
        alternatives=[
            (F.layer_norm(total, (16,), state["norm.weight"], state["norm.bias"], f["norm_eps"]), NORM_IGNORED)
        ],
        hint="GivenNorm(d, eps)(x) is rms_norm(x) * weight + bias: the output is GivenNorm(word + position + "
        "token_type) with your weights.",
    )


def _check_nothing_made_on_the_cpu(uses: list, call: str, advice: dict) -> None:
    """No torch function of the meta run was given a CPU tensor beside meta ones (``CPUBesideMeta``): an embedding
    lookup or indexing on the meta device accepts CPU indices without raising, where a GPU's does not. ``advice``:
    a table's name prefix -> what was made on the CPU and how to make it on the device of the tokens."""
    if not uses:
        return
    use = uses[0]
    named = [text for prefix, text in advice.items() if any(t.startswith(prefix) for t in use["tables"])]
    tables = f" (with {', '.join(use['tables'])})" if use["tables"] else ""
    what = named[0] if named else f"{use['function']}{tables} was given a tensor made on the CPU"
    expect.fail(
        f"{call}: {what} (a tensor of shape {use['cpu'][0]} on the CPU beside the model's tensors on the meta "
        "device; on a GPU it fails or is copied at every call)"
    )


EMBEDDINGS_ON_THE_CPU = {
    "position.": "the position table was given positions made on the CPU: torch.arange(seq, device=tokens.device)",
    "token_type.": "the token-type table was given default segment ids made on the CPU: make them on the device of "
    "tokens, torch.zeros_like(tokens)",
}


@EMBEDDINGS.hidden
def test_embeddings_on_the_device_of_tokens(impl):
    "positions and default segment ids are made on the device of tokens: the module runs on PyTorch's meta device, also for 560 tokens"
    long_fields = bert_fields(vocab=30, d=8, positions=LONG + 40)
    for fields, shape, with_types in (
        (bert_fields(), [2, 5], False),
        (bert_fields(), [2, 5], True),
        (long_fields, [2, LONG], False),
    ):
        got = impl.call(embeddings_on_meta, fields, shape, with_types)
        call = (
            f"BertEmbeddings(config with max_positions={fields['max_positions']}).to('meta')(tokens"
            f"{', token_type_ids' * with_types}) with tokens of shape {shape} on the meta device"
        )
        expect.that(
            not got["raised"],
            f"{call} raised {got['raised']}: {got['message'][:200]}; make the positions and the default segment "
            "ids on the device of tokens and for the length of tokens",
        )
        _check_nothing_made_on_the_cpu(got["cpu_beside_meta"], call, EMBEDDINGS_ON_THE_CPU)
        expected = [*shape, fields["d_model"]]
        expect.that(
            got["device"] == "meta" and got["shape"] == expected,
            f"{call} returned a tensor on {got['device'] or 'no device'} of shape {got['shape']}; expected "
            f"{expected} on the device of tokens",
        )


# --- Exercise 2 ------------------------------------------------------------------------------------

HEAD_NAMES = (
    "self.dense = nn.Linear(d_model, d_model), self.norm = norm(d_model, eps=config.norm_eps), "
    "self.decoder = nn.Linear(d_model, vocab_size) with its bias, and self.decoder.weight = "
    "word_embeddings.weight (no other attribute holding the word table)"
)


@HEAD.visible
def test_head_parameters_and_tying(impl):
    "dense, norm and decoder (with bias); decoder.weight is the word embedding parameter itself"
    f = bert_fields(vocab=40, d=16)
    got = impl.call(head_summary, f)
    expect.that("parameters" in got, "MLMHead(config, word_embeddings) is not an nn.Module")
    expected = {
        "dense.weight": [16, 16],
        "dense.bias": [16],
        "norm.weight": [16],
        "norm.bias": [16],
        "decoder.weight": [40, 16],
        "decoder.bias": [40],
    }
    params = got["parameters"]
    if params != expected:
        expect.that(
            "decoder.bias" in params or "decoder.weight" not in params,
            "the decoder has no bias: nn.Linear(d_model, vocab_size) keeps its bias (one number per word)",
        )
        expect.fail(f"MLMHead has parameters {params}, expected {expected}: {HEAD_NAMES}")
    expect.that(
        got["shares_word_weight"],
        "decoder.weight is not the word embedding table: the decoder must use "
        "the same nn.Parameter, self.decoder.weight = word_embeddings.weight (a copy has the same values "
        "only at the start and gets no gradient from the embedding's use)",
    )


def _head_hf(f, state, word):
    full = bert_state(f, 0)
    full |= {f"head.{k}": v for k, v in state.items()} | {"embeddings.word.weight": word}
    return hf_bert(f, full)


def _head_mistakes(f, state, word, hidden):
    d = f["d_model"]
    h = F.linear(hidden, state["dense.weight"], state["dense.bias"])

    def out(x, norm=True):
        if norm:
            x = F.layer_norm(x, (d,), state["norm.weight"], state["norm.bias"], 1e-12)
        return F.linear(x, word, state["decoder.bias"])

    return [
        (out(F.gelu(h, approximate="tanh")), "the GELU is the tanh approximation: BERT uses the exact GELU, F.gelu(x)"),
        (out(F.gelu(h), norm=False), "the LayerNorm is missing: decoder(norm(gelu(dense(hidden))))"),
        (out(F.relu(h)), "the activation is ReLU: BERT's head uses the exact GELU"),
        (out(h), "the activation is missing: decoder(norm(gelu(dense(hidden))))"),
        (
            out(F.gelu(F.layer_norm(h, (d,), state["norm.weight"], state["norm.bias"], 1e-12)), norm=False),
            "the norm comes before the GELU: dense, then GELU, then norm",
        ),
        (
            F.linear(F.layer_norm(F.gelu(h), (d,), state["norm.weight"], state["norm.bias"], 1e-12), word),
            "the decoder's bias is not added",
        ),
    ]


def _head_case(impl, f, seed, shape, grads=False):
    state = head_state(f, seed)
    word = _randn((f["vocab_size"], f["d_model"]), seed + 20, 0.5)
    hidden = _randn((*shape, f["d_model"]), seed + 21)
    grad_output = _randn((*shape, f["vocab_size"]), seed + 22) if grads else None
    got = impl.call(head_forward, f, state, word, hidden, grad_output)
    hf = _head_hf(f, state, word)
    hidden_hf = hidden.clone()
    expected = hf.cls.predictions(hidden_hf)
    what = f"MLMHead(d_model={f['d_model']}, vocab_size={f['vocab_size']})(hidden) for hidden of shape {list(hidden.shape)}"
    expect.close(
        got["output"],
        expected.detach(),
        what,
        **TOL,
        alternatives=_head_mistakes(f, state, word, hidden),
        hint="The oracle is Hugging Face's BertForMaskedLM head (cls.predictions) with your weights copied in; "
        "the decoder's weight is the word table given to MLMHead.",
    )
    if grads:
        expected.backward(grad_output)
        grads_got = expect.gradients(got, what)
        table = hf.bert.embeddings.word_embeddings.weight.grad
        expect.close(
            got.get("word_grad"),
            table,
            f"the gradient reaching the word table through {what}",
            **GRAD,
            alternatives=[
                (
                    torch.zeros_like(table),
                    "no gradient reaches the word embedding table: "
                    "self.decoder.weight must be word_embeddings.weight itself, not a copy",
                )
            ],
        )
        for ours, theirs in (
            ("dense.weight", "cls.predictions.transform.dense.weight"),
            ("norm.weight", "cls.predictions.transform.LayerNorm.weight"),
            ("decoder.bias", "cls.predictions.bias"),
        ):
            expect.close(
                grads_got.get(ours), dict(hf.named_parameters())[theirs].grad, f"the gradient of {ours}", **GRAD
            )


@HEAD.visible
def test_head_forward(impl):
    "equals Hugging Face's MLM head (dense, exact GELU, LayerNorm, decoder tied to the word table)"
    _head_case(impl, bert_fields(), 0, (2, 5))


@HEAD.hidden
def test_head_gradients_reach_the_word_table(impl):
    "the gradient of the logits reaches the word embedding table (tied) and the head's own parameters"
    _head_case(impl, bert_fields(vocab=30, d=24), 10, (3, 4), grads=True)
    _head_case(impl, bert_fields(vocab=50, d=8), 20, (1, 6), grads=True)


@HEAD.hidden
def test_head_uses_the_norm_given(impl):
    "norm= is used: with a norm of the check's own (no mean subtracted), the logits are decoder(norm(gelu(dense(h))))"
    f = bert_fields(vocab=30, d=16)
    state = head_state(f, 50)
    word = _randn((30, 16), 51, 0.5)
    hidden = _randn((2, 5, 16), 52)
    got = impl.call(head_forward, f, state, word, hidden, given=True)
    h = F.gelu(F.linear(hidden, state["dense.weight"], state["dense.bias"]))
    what = "MLMHead(config, word_embeddings, norm=GivenNorm)(hidden), GivenNorm a norm of the check's own"
    expect.close(
        got.get("output"),
        F.linear(given_norm(h, state["norm.weight"], state["norm.bias"], f["norm_eps"]), word, state["decoder.bias"]),
        what,
        **TOL,
        alternatives=[
            (
                F.linear(
                    F.layer_norm(h, (16,), state["norm.weight"], state["norm.bias"], 1e-12), word, state["decoder.bias"]
                ),
                NORM_IGNORED,
            )
        ],
        hint="GivenNorm(d, eps)(x) is rms_norm(x) * weight + bias.",
    )


# --- Exercise 3 ------------------------------------------------------------------------------------

BERT_NAMES = (
    "self.embeddings = embeddings(config, norm=norm), self.blocks = nn.ModuleList of n_layers "
    "block(...) and self.head = head(config, self.embeddings.word, norm=norm)"
)


def bert_parameters(f):
    hf = hf_bert(f)
    shapes = {}
    for name, p in hf.named_parameters():
        shapes.setdefault(course_name(name), list(p.shape))
    return shapes, hf.num_parameters()


@BERT.visible
def test_bert_parameters(impl):
    "embeddings, blocks, head with the course's names; as many parameters as Hugging Face's (the head is tied)"
    f = bert_fields(vocab=40, d=16, layers=3)
    got = impl.call(bert_summary, f)
    expect.that("parameters" in got, "BertForMaskedLM(config) is not an nn.Module")
    expected, count = bert_parameters(f)
    params = got["parameters"]
    if "head.decoder.weight" in params and set(params) - {"head.decoder.weight"} == set(expected):
        expect.fail(
            "the head's decoder has a weight of its own: pass the model's word table, "
            "head(config, self.embeddings.word, norm=norm), so that the output layer is tied to it "
            f"(you have {got['count']} parameters, Hugging Face's BertForMaskedLM {count})"
        )
    expect.that(params == expected, f"BertForMaskedLM has parameters {params}, expected {expected}: {BERT_NAMES}")
    expect.that(got["count"] == count, f"BertForMaskedLM has {got['count']} parameters, Hugging Face's {count}")


def _reference_bert(f, state, norm_first=False, block_eps=None):
    """The model composed here from the reference parts, with a choice of mistakes (for diagnoses)."""
    config = _config(f)
    embeddings = ReferenceEmbeddings(config)
    eps = f["norm_eps"] if block_eps is None else block_eps
    blocks = nn.ModuleList(
        EncoderBlock(
            f["d_model"], f["n_heads"], f["d_ff"], "gelu", norm_first=norm_first, norm=partial(nn.LayerNorm, eps=eps)
        )
        for _ in range(f["n_layers"])
    )
    head = ReferenceHead(config, embeddings.word)
    model = nn.ModuleDict({"embeddings": embeddings, "blocks": blocks, "head": head})
    model.load_state_dict(state)

    @torch.no_grad()
    def run(tokens, types, padding):
        x = embeddings(tokens, types)
        for block in blocks:
            x = block(x, padding)
        return head(x)

    return run


def _bert_mistakes(f, state, tokens, types, padding):
    mistakes = [
        (
            _reference_bert(f, state, norm_first=True)(tokens, types, padding),
            "the blocks are pre-norm: BERT's blocks are post-norm, block(..., 'gelu', norm_first=False, ...)",
        ),
        (
            _reference_bert(f, state, block_eps=1e-5)(tokens, types, padding),
            "the blocks' LayerNorms use eps=1e-5 (the default): build them with "
            "norm=partial(norm, eps=config.norm_eps)",
        ),
    ]
    if padding is not None:
        mistakes.append(
            (
                _reference_bert(f, state)(tokens, types, None),
                "the padding mask does not reach the blocks: pass padding_mask to every block",
            )
        )
    if types is not None:
        mistakes.append(
            (
                _reference_bert(f, state)(tokens, None, padding),
                "token_type_ids does not reach the embeddings: self.embeddings(tokens, token_type_ids)",
            )
        )
    return mistakes


def _bert_case(impl, f, seed, lengths, length, with_types=True, gain=1.0):
    state = bert_state(f, seed, gain)
    tokens = _randint(f["vocab_size"], (len(lengths), length), seed + 10, low=1)
    padding = None if lengths is None or all(n == length for n in lengths) else _padding(lengths, length)
    if padding is not None:
        tokens[~padding] = f["pad_token_id"]
    types = (torch.arange(length)[None, :] >= torch.tensor(lengths)[:, None] // 2).long() if with_types else None
    got = impl.call(bert_forward, f, state, tokens, types, padding)
    hf = hf_bert(f, state)
    with torch.no_grad():
        expected = hf(
            input_ids=tokens, token_type_ids=types, attention_mask=None if padding is None else padding.long()
        ).logits
    real = torch.ones(tokens.shape, dtype=torch.bool) if padding is None else padding
    what = (
        f"BertForMaskedLM(d_model={f['d_model']}, n_layers={f['n_layers']})(tokens"
        f"{', token_type_ids' * with_types}{', padding_mask' * (padding is not None)}) for lengths {lengths} "
        f"at the real positions"
    )
    output = expect.tensor(got.get("output"), what, shape=expected.shape)
    expect.close(
        output[real],
        expected[real],
        what,
        **TOL,
        alternatives=[(m[real], s) for m, s in _bert_mistakes(f, state, tokens, types, padding)],
        hint="The oracle is Hugging Face's BertForMaskedLM with your weights copied in and "
        "attention_mask = padding_mask.",
    )


@BERT.visible
def test_bert_forward_with_padding(impl):
    "equals Hugging Face's BertForMaskedLM on a padded batch with token types (real positions)"
    _bert_case(impl, bert_fields(), 0, [7, 4], 7)


@BERT.hidden
def test_bert_other_shapes(impl):
    "no padding, no token types, other widths, depths and lengths"
    _bert_case(impl, bert_fields(vocab=30, d=24, layers=1, heads=3, d_ff=40), 10, [5, 5, 5], 5, with_types=False)
    _bert_case(impl, bert_fields(vocab=50, d=16, layers=3, heads=4, d_ff=24, positions=12), 20, [12, 3, 9], 12)


@BERT.hidden
def test_bert_layer_norm_eps(impl):
    "small activations, where LayerNorm's eps matters: still equal to Hugging Face's (eps 1e-12 everywhere)"
    _bert_case(impl, bert_fields(), 30, [6, 6], 6, gain=0.02)


@BERT.hidden
def test_bert_uses_the_parts_given(impl):
    "embeddings=, block=, head= and norm= are used: each part made by calling its argument, every norm by calling norm (recording stand-ins)"
    got = impl.call(bert_parts, bert_fields(layers=3))
    for part, argument, call in (
        ("embeddings", "embeddings", "self.embeddings = embeddings(config, norm=norm)"),
        ("head", "head", "self.head = head(config, self.embeddings.word, norm=norm)"),
        ("embeddings.norm", "norm", "self.embeddings = embeddings(config, norm=norm)"),
        ("head.norm", "norm", "self.head = head(config, self.embeddings.word, norm=norm)"),
    ):
        expect.that(
            got[part],
            f"BertForMaskedLM's {part} was not made by calling the {argument} argument (a default or a class "
            f"built by name?): {call} (the checks pass parts of their own)",
        )
    expect.that(
        got["blocks"] == 3 and got["blocks_by_block"] == 3,
        f"BertForMaskedLM(config, block=...) with n_layers = 3: {got['blocks_by_block']} of its {got['blocks']} "
        "blocks were made by calling the block argument: block(d_model, n_heads, d_ff, 'gelu', norm_first=False, "
        "norm=block_norm), not a block class by name",
    )
    expect.that(
        got["block_norms_by_norm"] == got["block_norms"],
        f"{got['block_norms'] - got['block_norms_by_norm']} of the blocks' {got['block_norms']} norms were not made "
        "by calling the norm argument: give every block norm=block_norm, partial(norm, eps=config.norm_eps)",
    )


@BERT.hidden
def test_bert_padding_is_invisible(impl):
    "changing the padded tokens leaves the logits at the real positions unchanged"
    f = bert_fields()
    state = bert_state(f, 40)
    padding = _padding([8, 3], 8)
    tokens = _randint(f["vocab_size"], (2, 8), 41, low=1)
    changed = torch.where(padding, tokens, _randint(f["vocab_size"], (2, 8), 42, low=1))
    first = expect.tensor(
        impl.call(bert_forward, f, state, tokens, None, padding).get("output"), "BertForMaskedLM(...)"
    )
    second = expect.tensor(
        impl.call(bert_forward, f, state, changed, None, padding).get("output"), "BertForMaskedLM(...)"
    )
    delta = float((first - second).abs()[padding].max())
    expect.that(
        delta <= SAME,
        f"changing the padded tokens changed the logits at real positions by up to {delta:.3g}: "
        "pass padding_mask to every block",
    )


# --- Exercise 4 ------------------------------------------------------------------------------------

PAD, CLS, SEP, MASK = 0, 1, 2, 3
SPECIAL = [PAD, CLS, SEP, MASK]


def masking_batch(batch, length, vocab, seed):
    """[CLS] words [SEP] [PAD]...: right-padded sequences of random lengths; words are ids >= 4."""
    lengths = _randint(length - 1, (batch,), seed, low=max(1, length // 4))
    tokens = _randint(vocab, (batch, length), seed + 1, low=len(SPECIAL))
    tokens[:, 0] = CLS
    tokens[torch.arange(length)[None, :] > lengths[:, None]] = PAD
    tokens[torch.arange(batch), lengths] = SEP
    return tokens


def _options(vocab, probability=None, special=SPECIAL):
    options = {"mask_token_id": MASK, "vocab_size": vocab, "special_ids": special}
    return options if probability is None else options | {"probability": probability}


def _masking_draws(impl, tokens, options, seed, draws=1, global_seed=0):
    got = impl.call(mask_tokens_run, tokens, options, seed, global_seed, draws)
    what = "mask_tokens(tokens, ...)"
    expect.that(
        "inputs" in got,
        f"{what} returned {type(got.get('result')).__name__ if isinstance(got, dict) else got}, "
        "expected a pair (inputs, labels)",
    )
    expect.that(
        torch.equal(got["tokens_after"], tokens),
        f"{what} changed its argument tokens in place: make a new "
        "tensor for inputs (tokens.clone(), or torch.where(...)) and leave tokens as it was",
    )
    pairs = []
    for inputs, labels in zip(got["inputs"], got["labels"], strict=True):
        inputs = expect.tensor(inputs, f"inputs returned by {what}", shape=tokens.shape)
        labels = expect.tensor(labels, f"labels returned by {what}", shape=tokens.shape)
        expect.that(
            labels.dtype == torch.long,
            f"labels has dtype {labels.dtype} for tokens of dtype {tokens.dtype}, expected torch.long (int64) "
            "whatever the tokens' integer dtype (F.cross_entropy takes int64 targets): make them with .long()",
        )
        pairs.append((inputs, labels))
    return pairs


def _check_consistency(tokens, inputs, labels, special):
    is_special = torch.isin(tokens, torch.as_tensor(special))
    picked = labels != -100
    expect.that(
        bool((~picked).any()),
        "labels has no -100 at all: labels must hold the original token at the picked "
        "positions and -100 everywhere else",
    )
    expect.that(
        not bool((picked & is_special).any()),
        "a special token was picked (its label is not -100): tokens "
        "whose id is in special_ids ([CLS], [SEP], [PAD], [MASK], ...) are never picked",
    )
    expect.that(
        bool(((labels == tokens) | ~picked).all()),
        "labels must hold the original token at the picked positions and -100 everywhere else",
    )
    expect.that(
        bool((inputs == tokens)[~picked].all()),
        "inputs differ from tokens at positions that were not picked (label -100): only picked tokens are replaced",
    )
    expect.that(bool(picked.any()), "no token was picked")
    expect.that(
        bool((~picked & ~is_special).any()),
        "every non-special token was picked (labels must be -100 where "
        "the token was not picked): pick each one with probability `probability`",
    )


@MASKING.visible
def test_masking_labels_and_specials(impl):
    "labels = the token where picked, -100 elsewhere; specials never picked; tokens left unchanged"
    tokens = masking_batch(32, 24, 60, 0)
    for inputs, labels in _masking_draws(impl, tokens, _options(60), 1, draws=3):
        _check_consistency(tokens, inputs, labels, SPECIAL)


def _within(observed, expected, n, what, advice):
    spread = SIGMAS * math.sqrt(expected * (1 - expected) / n)
    expect.that(
        abs(observed - expected) <= spread,
        f"{what} is {observed:.4f}, expected {expected:.4f} "
        f"(± {spread:.4f}, {SIGMAS:g} standard deviations over {n} tokens): {advice}",
    )


def masking_counts(tokens, pairs):
    counts = dict.fromkeys(("eligible", "picked", "mask", "random", "kept"), 0)
    random_ids = []
    eligible = ~torch.isin(tokens, torch.tensor(SPECIAL))
    for inputs, labels in pairs:
        picked = labels != -100
        counts["eligible"] += int(eligible.sum())
        counts["picked"] += int(picked.sum())
        counts["mask"] += int((picked & (inputs == MASK)).sum())
        replaced = picked & (inputs != MASK) & (inputs != tokens)
        counts["random"] += int(replaced.sum())
        counts["kept"] += int((picked & (inputs == tokens)).sum())
        random_ids.append(inputs[replaced])
    return counts, torch.cat(random_ids)


def _masking_statistics(impl, vocab, probability, seed, draws=20):
    tokens = masking_batch(128, 64, vocab, seed)
    pairs = _masking_draws(impl, tokens, _options(vocab, probability), seed + 1, draws=draws)
    for inputs, labels in pairs[:1]:
        _check_consistency(tokens, inputs, labels, SPECIAL)
    counts, random_ids = masking_counts(tokens, pairs)
    p = 0.15 if probability is None else probability
    _within(
        counts["picked"] / counts["eligible"],
        p,
        counts["eligible"],
        "the fraction of non-special tokens picked",
        f"pick each non-special token with probability {p}",
    )
    advice = "of the picked tokens, 80% become mask_token_id, 10% a random id, 10% stay as they are"
    _within(
        counts["mask"] / counts["picked"],
        0.8 + 0.1 / vocab,
        counts["picked"],
        "the fraction of picked tokens replaced by [MASK]",
        advice,
    )
    _within(
        counts["random"] / counts["picked"],
        0.1 * (1 - 2 / vocab),
        counts["picked"],
        "the fraction of picked tokens replaced by a random token",
        advice,
    )
    _within(
        counts["kept"] / counts["picked"],
        0.1 + 0.1 / vocab,
        counts["picked"],
        "the fraction of picked tokens left unchanged",
        advice,
    )
    return random_ids


@MASKING.visible
def test_masking_proportions(impl):
    "over 20 draws: 15% of the non-special tokens picked; of those 80% [MASK], 10% random, 10% kept"
    _masking_statistics(impl, 60, None, 10)


@MASKING.hidden
def test_masking_uses_the_generator(impl):
    "the same generator seed gives the same result whatever the global generator; another seed another result"
    tokens = masking_batch(16, 32, 60, 20)
    first = _masking_draws(impl, tokens, _options(60), 21, global_seed=1)[0]
    again = _masking_draws(impl, tokens, _options(60), 21, global_seed=2)[0]
    other = _masking_draws(impl, tokens, _options(60), 22, global_seed=1)[0]
    expect.that(
        torch.equal(first[0], again[0]) and torch.equal(first[1], again[1]),
        "the same generator gave "
        "different results when the global random generator was in another state: draw every random number "
        "from the generator argument, torch.rand(..., generator=generator), torch.randint(..., "
        "generator=generator)",
    )
    expect.that(not torch.equal(first[1], other[1]), "two generator seeds picked the same tokens: use the generator")


@MASKING.hidden
def test_masking_random_ids_and_options(impl):
    "random replacements uniform in [0, vocab_size); probability and tensor special_ids respected; 1-D tokens"
    vocab = 40
    random_ids = _masking_statistics(impl, vocab, 0.3, 30)
    n = random_ids.numel()
    expect.that(
        n > 0 and int(random_ids.min()) >= 0 and int(random_ids.max()) < vocab,
        f"random replacements must be ids in [0, {vocab}) (vocab_size)",
    )
    mean, expected = float(random_ids.double().mean()), (vocab - 1) / 2
    spread = SIGMAS * math.sqrt((vocab**2 - 1) / 12 / n)
    expect.that(
        abs(mean - expected) <= spread,
        f"the random replacement ids have mean {mean:.2f}, expected "
        f"{expected:.2f} ± {spread:.2f}: draw them uniformly from [0, vocab_size)",
    )
    tokens = masking_batch(1, 400, 60, 40)[0]
    tokens[::7] = 9  # an ordinary word declared special
    special = torch.tensor(SPECIAL + [9])
    for inputs, labels in _masking_draws(impl, tokens, _options(60, 0.5, special), 41, draws=2):
        _check_consistency(tokens, inputs, labels, special)


@MASKING.hidden
def test_masking_every_id_drawn(impl):
    "with a vocabulary of 8, every id but [MASK] turns up among the random replacements, the last one included"
    vocab = 8
    random_ids = _masking_statistics(impl, vocab, 0.5, 60)
    # About 3,700 replacements over the 7 ids they can show (not [MASK]; a draw equal to the original token is not
    # seen as one): each id is expected about 500 times, so a right answer misses one with probability ~e^-500.
    missing = sorted(set(range(vocab)) - {MASK} - set(random_ids.tolist()))
    expect.that(
        not missing,
        f"over {random_ids.numel()} random replacements with vocab_size={vocab}, the ids {missing} never came up: "
        "draw from all of [0, vocab_size), torch.randint(vocab_size, ...) (its upper bound is excluded already; "
        "randint(0, vocab_size - 1) never draws the last id)",
    )


@MASKING.hidden
def test_masking_int32_tokens(impl):
    "int32 tokens: labels are still torch.long, inputs the tokens where not picked"
    tokens = masking_batch(16, 24, 60, 50).int()
    for inputs, labels in _masking_draws(impl, tokens, _options(60), 51):
        _check_consistency(tokens, inputs, labels, SPECIAL)


# --- Exercise 5 ------------------------------------------------------------------------------------


def _loss_mistakes(logits, labels):
    flat, target = logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)
    picked = target != -100
    each = F.cross_entropy(flat, target.clamp(min=0), reduction="none")
    return [
        (
            each[picked].sum() / target.numel(),
            "the loss is averaged over all positions: divide the sum over "
            "the picked positions by their number (labels != -100), not by the number of all positions",
        ),
        (
            each.mean(),
            "the loss includes the positions without a target (label -100): average over labels != -100 "
            "only (F.cross_entropy(..., ignore_index=-100))",
        ),
        (each[picked].sum(), "the loss is summed: average it over the picked positions"),
    ]


def _loss_case(impl, logits, labels, what, expected=None):
    got = impl.call(mlm_loss_run, logits, labels)
    reference = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
    loss = expect.tensor(got.get("loss"), what)
    expect.that(loss.numel() == 1, f"{what} has shape {list(loss.shape)}, expected a scalar")
    for value, name in ((reference, "F.cross_entropy(..., ignore_index=-100)"),) + (
        ((expected, "Hugging Face's BertForMaskedLM(..., labels=labels).loss"),) if expected is not None else ()
    ):
        expect.close(
            loss.reshape(()),
            value.detach(),
            what,
            **LOSS_TOL,
            alternatives=_loss_mistakes(logits, labels),
            hint=f"The oracle is {name}.",
        )


def _labels(shape, vocab, seed, p=0.15):
    labels = _randint(vocab, shape, seed)
    labels[torch.rand(shape, generator=_gen(seed + 1)) >= p] = -100
    labels.view(-1)[0] = 3  # at least one target
    return labels


@LOSS.visible
def test_loss_on_picked_positions(impl):
    "the cross-entropy averaged over the positions with a label (labels != -100)"
    logits, labels = _randn((4, 9, 20), 0, 2.0), _labels((4, 9), 20, 1)
    _loss_case(impl, logits, labels, "mlm_loss(logits [4, 9, 20], labels [4, 9])")


@LOSS.hidden
def test_loss_equals_hugging_face(impl):
    "equals Hugging Face's BertForMaskedLM loss with labels; 2-D logits"
    f = bert_fields()
    hf = hf_bert(f, bert_state(f, 10))
    tokens, labels = _randint(f["vocab_size"], (3, 8), 11, low=1), _labels((3, 8), f["vocab_size"], 12, 0.3)
    with torch.no_grad():
        out = hf(input_ids=tokens, labels=labels)
    _loss_case(impl, out.logits, labels, "mlm_loss(logits of BertForMaskedLM, labels)", expected=out.loss)
    logits, labels = _randn((30, 12), 13, 3.0), _labels((30,), 12, 14, 0.5)
    _loss_case(impl, logits, labels, "mlm_loss(logits [30, 12], labels [30])")


@LOSS.hidden
def test_loss_with_large_logits(impl):
    "finite and right for logits far apart (a target 100s of nats below the largest logit)"
    logits, labels = _randn((6, 7, 16), 15, 80.0), _labels((6, 7), 16, 16, 0.6)
    what = "mlm_loss(logits [6, 7, 16] spread over hundreds, labels [6, 7])"
    loss = expect.tensor(impl.call(mlm_loss_run, logits, labels).get("loss"), what)
    expect.that(
        bool(torch.isfinite(loss).all()),
        f"{what} returned {loss.detach().reshape(-1)[:1].tolist()}, but the cross-entropy there is finite: "
        "softmax underflows to 0 for a target far below the largest logit, and log(0) is -inf. Take "
        "log_softmax (or F.cross_entropy), which subtracts the largest logit before exponentiating",
    )
    _loss_case(impl, logits, labels, what)


# --- Exercise 6 ------------------------------------------------------------------------------------


def encdec_fields(
    src_vocab=30,
    tgt_vocab=25,
    d=16,
    heads=2,
    n_enc=2,
    n_dec=2,
    d_ff=32,
    max_len=20,
    activation="relu",
    norm_first=False,
    share=False,
):
    return {
        "src_vocab_size": src_vocab,
        "tgt_vocab_size": tgt_vocab,
        "d_model": d,
        "n_heads": heads,
        "n_encoder_layers": n_enc,
        "n_decoder_layers": n_dec,
        "d_ff": d_ff,
        "max_len": max_len,
        "activation": activation,
        "norm_first": norm_first,
        "share_embeddings": share,
    }


def _block(prefix, d, d_ff, seed, cross):
    state = {}
    for i, proj in enumerate(("q_proj", "k_proj", "v_proj", "out_proj")):
        state |= _linear(f"{prefix}self_attn.{proj}", d, d, seed + 10 * i)
        if cross:
            state |= _linear(f"{prefix}cross_attn.{proj}", d, d, seed + 100 + 10 * i)
    for j, n in enumerate(("norm1", "norm2", "norm3") if cross else ("norm1", "norm2")):
        state |= _norm(f"{prefix}{n}", d, seed + 50 + 10 * j)
    return state | _linear(f"{prefix}ffn.fc1", d, d_ff, seed + 90) | _linear(f"{prefix}ffn.fc2", d_ff, d, seed + 95)


def encdec_state(f, seed):
    d = f["d_model"]
    state = {"src_embed.weight": _randn((f["src_vocab_size"], d), seed, d**-0.5)}
    state["tgt_embed.weight"] = (
        state["src_embed.weight"] if f["share_embeddings"] else _randn((f["tgt_vocab_size"], d), seed + 1, d**-0.5)
    )
    state |= {
        "out_proj.weight": state["tgt_embed.weight"]
        if f["share_embeddings"]
        else _randn((f["tgt_vocab_size"], d), seed + 2, d**-0.5),
        "out_proj.bias": _randn((f["tgt_vocab_size"],), seed + 3, 0.2),
    }
    for i in range(f["n_encoder_layers"]):
        state |= _block(f"encoder.{i}.", d, f["d_ff"], seed + 1000 * (i + 1), cross=False)
    for i in range(f["n_decoder_layers"]):
        state |= _block(f"decoder.{i}.", d, f["d_ff"], seed + 500 + 1000 * (i + 1), cross=True)
    return state | _norm("encoder_norm", d, seed + 7) | _norm("decoder_norm", d, seed + 8)


def encdec_parameters(f):
    shapes = {name: list(v.shape) for name, v in encdec_state(f, 0).items()}
    if f["share_embeddings"]:
        del shapes["tgt_embed.weight"], shapes["out_proj.weight"]
    return shapes


def sinusoid_table(length, d):
    """Closed form: column 2i is sin(p / 10000^(2i/d)), column 2i + 1 is cos of the same angle."""
    table = torch.zeros(length, d, dtype=torch.float64)
    for p in range(length):
        for c in range(d):
            angle = p / 10000 ** ((c - c % 2) / d)
            table[p, c] = math.sin(angle) if c % 2 == 0 else math.cos(angle)
    return table.float()


def torch_transformer(f, state):
    """nn.Transformer with the course-named ``state`` copied in (train mode, dropout 0)."""
    d = f["d_model"]
    with warnings.catch_warnings():  # the nested-tensor fast path is off for norm_first or odd head counts; we say
        warnings.filterwarnings("ignore", message="enable_nested_tensor is True")  # nothing of it to the student
        model = nn.Transformer(
            d,
            f["n_heads"],
            f["n_encoder_layers"],
            f["n_decoder_layers"],
            f["d_ff"],
            dropout=0.0,
            activation=f["activation"],
            batch_first=True,
            norm_first=f["norm_first"],
        )
    copied = {}
    for stack, count in (("encoder", f["n_encoder_layers"]), ("decoder", f["n_decoder_layers"])):
        for i in range(count):
            p, t = f"{stack}.{i}.", f"{stack}.layers.{i}."
            for ours, theirs in (("self_attn", "self_attn"), ("cross_attn", "multihead_attn")):
                if f"{p}{ours}.q_proj.weight" not in state:
                    continue
                for kind in ("weight", "bias"):
                    copied[f"{t}{theirs}.in_proj_{kind}"] = torch.cat(
                        [state[f"{p}{ours}.{x}_proj.{kind}"] for x in "qkv"]
                    )
                    copied[f"{t}{theirs}.out_proj.{kind}"] = state[f"{p}{ours}.out_proj.{kind}"]
            for kind in ("weight", "bias"):
                copied[f"{t}linear1.{kind}"] = state[f"{p}ffn.fc1.{kind}"]
                copied[f"{t}linear2.{kind}"] = state[f"{p}ffn.fc2.{kind}"]
                for n in ("norm1", "norm2", "norm3"):
                    if f"{p}{n}.{kind}" in state:
                        copied[f"{t}{n}.{kind}"] = state[f"{p}{n}.{kind}"]
        for kind in ("weight", "bias"):
            copied[f"{stack}.norm.{kind}"] = state[f"{stack}_norm.{kind}"]
    model.load_state_dict(copied, strict=True)
    return model.train()


def _not(mask):
    return None if mask is None else ~mask


@torch.no_grad()
def encdec_oracle(
    f,
    state,
    src,
    tgt,
    src_padding=None,
    tgt_padding=None,
    *,
    scale=True,
    memory_padding=True,
    encoder_norm=True,
    decoder_norm=True,
    memory_from_embeddings=False,
    positions=True,
):
    """Logits and memory of nn.Transformer wrapped in the embeddings and output layer (and known mistakes)."""
    model, d = torch_transformer(f, state), f["d_model"]
    table = sinusoid_table(max(src.shape[1], tgt.shape[1]), d)

    def embed(weight, tokens):
        x = weight[tokens] * (math.sqrt(d) if scale else 1.0)
        return x + table[: tokens.shape[1]] if positions else x

    x = embed(state["src_embed.weight"], src)
    for layer in model.encoder.layers:
        x = layer(x, src_key_padding_mask=_not(src_padding))
    memory = model.encoder.norm(x) if encoder_norm else x
    if memory_from_embeddings:
        memory = embed(state["src_embed.weight"], src)
    y = embed(state["tgt_embed.weight"], tgt)
    causal = ~torch.ones(tgt.shape[1], tgt.shape[1], dtype=torch.bool).tril()
    for layer in model.decoder.layers:
        y = layer(
            y,
            memory,
            tgt_mask=causal,
            tgt_key_padding_mask=_not(tgt_padding),
            memory_key_padding_mask=_not(src_padding) if memory_padding else None,
        )
    if decoder_norm:
        y = model.decoder.norm(y)
    return F.linear(y, state["out_proj.weight"], state["out_proj.bias"]), memory


ENCDEC_MISTAKES = [
    (
        {"scale": False},
        "the embeddings are not multiplied by sqrt(d_model): embed(tokens) * math.sqrt(d_model) + positions",
    ),
    (
        {"memory_padding": False},
        "the source padding does not reach the decoder's cross-attention: pass src_padding "
        "as memory_padding to every decoder block",
    ),
    (
        {"memory_from_embeddings": True},
        "the decoder reads the source embeddings, not the encoder's output: memory = encode(src, src_padding)",
    ),
    ({"encoder_norm": False}, "the encoder stack's final LayerNorm is missing: encode returns encoder_norm(x)"),
    ({"decoder_norm": False}, "the decoder stack's final LayerNorm is missing: out_proj(decoder_norm(x))"),
    (
        {"encoder_norm": False, "decoder_norm": False},
        "the final LayerNorms of both stacks are missing (encoder_norm, "
        "decoder_norm): like nn.Transformer, each stack ends with one",
    ),
    ({"positions": False}, "the positions are not added: + self.positions(torch.arange(length))"),
]


def _encdec_case(impl, f, seed, src_lengths, src_len, tgt_lengths, tgt_len, diagnose=True):
    state = encdec_state(f, seed)
    src = _randint(f["src_vocab_size"], (len(src_lengths), src_len), seed + 10)
    tgt = _randint(f["tgt_vocab_size"], (len(tgt_lengths), tgt_len), seed + 11)
    src_padding = None if all(n == src_len for n in src_lengths) else _padding(src_lengths, src_len)
    tgt_padding = None if all(n == tgt_len for n in tgt_lengths) else _padding(tgt_lengths, tgt_len)
    got = impl.call(encdec_forward, f, state, src, tgt, src_padding, tgt_padding)
    expected, memory = encdec_oracle(f, state, src, tgt, src_padding, tgt_padding)
    real = torch.ones(tgt.shape, dtype=torch.bool) if tgt_padding is None else tgt_padding
    what = (
        f"EncoderDecoder(d_model={f['d_model']}, norm_first={f['norm_first']}, share_embeddings="
        f"{f['share_embeddings']})(src, tgt{', src_padding' * (src_padding is not None)}"
        f"{', tgt_padding' * (tgt_padding is not None)}) at the real target positions"
    )
    output = expect.tensor(got.get("output"), what, shape=expected.shape)
    mistakes = [  # diagnose=False: long sequences, where the oracle with each mistake would cost seconds
        (encdec_oracle(f, state, src, tgt, src_padding, tgt_padding, **kw)[0][real], s)
        for kw, s in ENCDEC_MISTAKES * diagnose
    ]
    hint = (
        "The oracle is nn.Transformer(norm_first=...) with your block weights copied in, wrapped in the embeddings "
        "(scaled by sqrt(d_model), plus the sinusoidal table) and out_proj; masks: causal tgt_mask, "
        "src_key_padding_mask = memory_key_padding_mask = ~src_padding, tgt_key_padding_mask = ~tgt_padding."
    )
    expect.close(output[real], expected[real], what, **TOL, alternatives=mistakes, hint=hint)
    src_real = torch.ones(src.shape, dtype=torch.bool) if src_padding is None else src_padding
    got_memory = expect.tensor(got.get("memory"), "encode(src, src_padding)", shape=memory.shape)
    expect.close(
        got_memory[src_real],
        memory[src_real],
        "encode(src, src_padding) at the real source positions",
        **TOL,
        hint="encode returns encoder_norm of the last encoder block's output.",
    )


@ENCDEC.visible
def test_encdec_parameters(impl):
    "src_embed, tgt_embed, encoder, encoder_norm, decoder, decoder_norm, out_proj; shared embeddings counted once"
    for share in (False, True):
        f = encdec_fields(src_vocab=30, tgt_vocab=30 if share else 25, share=share)
        got = impl.call(encdec_summary, f)
        expect.that("parameters" in got, "EncoderDecoder(config) is not an nn.Module")
        expected = encdec_parameters(f)
        params = got["parameters"]
        if share and params != expected:
            extra = sorted({"tgt_embed.weight", "out_proj.weight"} & set(params))
            expect.that(
                not extra,
                f"with share_embeddings=True, {' and '.join(extra)} should be the source table's "
                "parameter, not one of their own: self.tgt_embed = self.src_embed and "
                "self.out_proj.weight = self.tgt_embed.weight",
            )
        expect.that(
            params == expected,
            f"EncoderDecoder (share_embeddings={share}) has parameters {params}, expected {expected}",
        )
        count = sum(math.prod(s) for s in expected.values())
        expect.that(got["count"] == count, f"EncoderDecoder has {got['count']} parameters, expected {count}")


@ENCDEC.visible
def test_encdec_forward_with_padding(impl):
    "equals nn.Transformer wrapped in scaled embeddings, sinusoids and out_proj; source and target padding"
    _encdec_case(impl, encdec_fields(), 0, [7, 4], 7, [5, 3], 5)


@ENCDEC.visible
def test_encdec_is_causal(impl):
    "changing target tokens after position t leaves the logits at positions 0..t unchanged"
    f = encdec_fields()
    state = encdec_state(f, 5)
    src, tgt = _randint(30, (2, 6), 6), _randint(25, (2, 6), 7)
    base = expect.tensor(impl.call(encdec_forward, f, state, src, tgt).get("output"), "EncoderDecoder(...)(src, tgt)")
    for t in (0, 3):
        changed = tgt.clone()
        changed[:, t + 1 :] = (changed[:, t + 1 :] + 1) % 25
        moved = expect.tensor(
            impl.call(encdec_forward, f, state, src, changed).get("output"), "EncoderDecoder(...)(src, tgt)"
        )
        delta = float((moved - base)[:, : t + 1].abs().max())
        expect.that(
            delta <= SAME,
            f"changing the target tokens after position {t} changed the logits at positions "
            f"0..{t} by up to {delta:.3g}: a target logit may depend only on the target tokens up to its position "
            "(the decoder's self-attention is causal, and the memory must come from the source alone)",
        )


@ENCDEC.hidden
def test_encdec_options(impl):
    "pre-norm, shared embeddings, GELU, other widths, depths and lengths; encode() equals nn.Transformer's encoder"
    _encdec_case(impl, encdec_fields(norm_first=True), 10, [6, 6], 6, [4, 2], 4)
    _encdec_case(
        impl,
        encdec_fields(src_vocab=20, tgt_vocab=20, share=True, d=24, heads=3, n_enc=1, n_dec=3, activation="gelu"),
        20,
        [3, 8, 5],
        8,
        [6, 6, 6],
        6,
    )
    _encdec_case(impl, encdec_fields(src_vocab=20, tgt_vocab=20, share=True, norm_first=True), 30, [5, 2], 5, [7, 7], 7)


@ENCDEC.hidden
def test_encdec_longer_than_512(impl):
    "max_len=600, a source of 520 tokens and a target of 516, beyond the default 512: positions(config.max_len, d_model)"
    f = encdec_fields(d=8, heads=2, n_enc=1, n_dec=1, d_ff=16, max_len=LONG + 40)
    _long_case(
        lambda: _encdec_case(impl, f, 50, [520], 520, [516], 516, diagnose=False),
        f"EncoderDecoder(config with max_len={LONG + 40})(src of 520 tokens, tgt of 516)",
        "the position table or the positions were made for a fixed length; build self.positions = "
        "positions(config.max_len, config.d_model) and the positions for each call, torch.arange(length, "
        "device=src.device)",
    )


ENCDEC_ON_THE_CPU = {
    "positions.": "the position table was given positions made on the CPU: torch.arange(length, device=tokens.device)",
}


@ENCDEC.hidden
def test_encdec_on_the_device_of_tokens(impl):
    "positions (and any mask) made on the device of the tokens: the model runs on PyTorch's meta device, also for 520 and 516 tokens"
    for fields, src_len, tgt_len in (
        (encdec_fields(), 6, 4),
        (encdec_fields(d=8, heads=2, n_enc=1, n_dec=1, d_ff=16, max_len=LONG + 40), 520, 516),
    ):
        got = impl.call(encdec_on_meta, fields, src_len, tgt_len)
        call = (
            f"EncoderDecoder(config with max_len={fields['max_len']}).to('meta')(src, tgt, src_padding, tgt_padding) "
            f"with src of {src_len} and tgt of {tgt_len} tokens on the meta device"
        )
        expect.that(
            not got["raised"],
            f"{call} raised {got['raised']}: {got['message'][:200]}; make the positions on the device of the tokens "
            "and for their length, torch.arange(length, device=tokens.device)",
        )
        _check_nothing_made_on_the_cpu(got["cpu_beside_meta"], call, ENCDEC_ON_THE_CPU)
        expected = [2, tgt_len, fields["tgt_vocab_size"]]
        expect.that(
            got["device"] == "meta" and got["shape"] == expected,
            f"{call} returned a tensor on {got['device'] or 'no device'} of shape {got['shape']}; expected "
            f"{expected} on the device of the tokens",
        )


@ENCDEC.hidden
def test_encdec_uses_the_parts_given(impl):
    "encoder_block=, decoder_block=, norm= and positions= are used: each part made by calling its argument (recording stand-ins)"
    got = impl.call(encdec_parts, encdec_fields(n_enc=2, n_dec=3))
    for stack, argument, count in (("encoder", "encoder_block", 2), ("decoder", "decoder_block", 3)):
        expect.that(
            got[stack] == count and got[f"{stack}_by_block"] == count,
            f"EncoderDecoder's {stack} has {got[stack]} blocks, {got[f'{stack}_by_block']} of them made by calling "
            f"the {argument} argument; expected {count}: {argument}(d_model, n_heads, d_ff, activation, norm_first), "
            "not a block class by name (the checks pass blocks of their own)",
        )
    for part, argument, call in (
        ("encoder_norm", "norm", "self.encoder_norm = norm(d_model)"),
        ("decoder_norm", "norm", "self.decoder_norm = norm(d_model)"),
        ("positions", "positions", "self.positions = positions(config.max_len, config.d_model)"),
    ):
        expect.that(
            got[part],
            f"EncoderDecoder's {part} was not made by calling the {argument} argument (a class built by name?): "
            f"{call} (the checks pass parts of their own)",
        )


@ENCDEC.hidden
def test_encdec_source_padding_is_invisible(impl):
    "changing padded source tokens leaves every logit unchanged; share_embeddings with two vocabularies is refused"
    f = encdec_fields()
    state = encdec_state(f, 40)
    src_padding = _padding([7, 3], 7)
    src, tgt = _randint(30, (2, 7), 41), _randint(25, (2, 5), 42)
    changed = torch.where(src_padding, src, _randint(30, (2, 7), 43))
    first = expect.tensor(
        impl.call(encdec_forward, f, state, src, tgt, src_padding).get("output"), "EncoderDecoder(...)"
    )
    second = expect.tensor(
        impl.call(encdec_forward, f, state, changed, tgt, src_padding).get("output"), "EncoderDecoder(...)"
    )
    delta = float((first - second).abs().max())
    expect.that(
        delta <= SAME,
        f"changing padded source tokens changed the logits by up to {delta:.3g}: src_padding "
        "must reach the encoder blocks and, as memory_padding, every decoder block",
    )
    error = impl.call(encdec_build_error, encdec_fields(src_vocab=30, tgt_vocab=25, share=True))
    expect.that(
        error == "ValueError",
        "EncoderDecoder with share_embeddings=True and two vocabulary sizes "
        f"{'raised ' + error if error else 'did not raise'}: raise a ValueError (one table cannot serve both)",
    )


# --- Exercise 7 ------------------------------------------------------------------------------------


def count_oracle(f) -> int:
    """Parameters of nn.Transformer plus the embedding tables and out_proj, shared ones once (meta device)."""
    d = f["d_model"]
    whole = nn.Module()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="enable_nested_tensor is True")
        whole.core = nn.Transformer(
            d, f["n_heads"], f["n_encoder_layers"], f["n_decoder_layers"], f["d_ff"], batch_first=True, device="meta"
        )
    whole.src = nn.Embedding(f["src_vocab_size"], d, device="meta")
    whole.tgt = whole.src if f["share_embeddings"] else nn.Embedding(f["tgt_vocab_size"], d, device="meta")
    whole.out = nn.Linear(d, f["tgt_vocab_size"], device="meta")
    if f["share_embeddings"]:
        whole.out.weight = whole.tgt.weight
    return sum(p.numel() for p in whole.parameters())


def _count_mistakes(f) -> dict:
    """Counts that known mistakes give, with what each one got wrong (the first listed wins on a tie)."""
    expected, d, d_ff = count_oracle(f), f["d_model"], f["d_ff"]
    n_enc, n_dec, src, tgt = f["n_encoder_layers"], f["n_decoder_layers"], f["src_vocab_size"], f["tgt_vocab_size"]
    attention = 4 * (d * d + d)
    biases = n_enc * (4 * d + d_ff + d) + n_dec * (8 * d + d_ff + d) + tgt
    one_table = "with share_embeddings, src_embed, tgt_embed and out_proj.weight are one parameter"
    pairs = (
        [
            (expected + 2 * tgt * d, f"the shared table is counted three times: {one_table}"),
            (expected + tgt * d, f"the shared table is counted twice: {one_table}"),
        ]
        if f["share_embeddings"]
        else [
            (
                expected - tgt * d,
                "out_proj.weight is missing: without share_embeddings it is a [tgt_vocab_size, d_model] "
                "matrix of its own",
            ),
            (expected + (src - tgt) * (d + 1), "out_proj has tgt_vocab_size outputs, not src_vocab_size"),
        ]
    )
    pairs += [
        (
            expected - biases,
            "the biases are missing (every nn.Linear here has one: the attention projections, the "
            "FFN's two layers, out_proj)",
        ),
        (
            expected - tgt,
            "out_proj's bias (one number per target token) is missing; it stays when the weight is shared",
        ),
        (expected - 4 * d, "the final LayerNorms encoder_norm and decoder_norm (weight and bias each) are missing"),
        (
            expected - n_dec * (attention + 2 * d),
            "the decoder blocks are counted like encoder blocks: each decoder "
            "block also has a cross-attention and a third LayerNorm",
        ),
        (
            expected - n_dec * attention,
            "the decoder blocks' cross-attention (four d x d projections with biases) is missing",
        ),
        (expected - n_dec * 2 * d, "a decoder block has three LayerNorms (self-attention, cross-attention, FFN)"),
        (expected - (n_enc * 2 + n_dec * 3 + 2) * d, "each LayerNorm has a weight AND a bias (2 * d_model)"),
        (expected + (n_dec - n_enc) * (attention + 2 * d), "n_encoder_layers and n_decoder_layers are swapped"),
    ]
    mistakes = {}
    for value, message in pairs:  # two mistakes that give the same count (in one configuration) are both named
        if value != expected:
            mistakes[value] = f"{mistakes[value]}; or {message}" if value in mistakes else message
    return mistakes


def _count_case(impl, f):
    got = impl.call(count_parameters, f)
    what = f"transformer_num_parameters(TransformerConfig({', '.join(f'{k}={v!r}' for k, v in f.items())}))"
    expect.that(isinstance(got, int), f"{what} returned {got!r}, expected an int")
    expected = count_oracle(f)
    if got != expected:
        expect.fail(
            f"{what} is {got:,}, expected {expected:,} (nn.Transformer's parameters plus the embedding tables "
            "and out_proj, each shared parameter once): "
            + _count_mistakes(f).get(
                got,
                "count the embedding tables, per encoder block a self-attention, an FFN and two "
                "LayerNorms, per decoder block two attentions, an FFN and three LayerNorms, the two "
                "final LayerNorms, and out_proj; every nn.Linear has a bias",
            )
        )


@COUNT.visible
def test_count_small_models(impl):
    "equals the parameters of nn.Transformer plus embeddings and out_proj: separate and shared tables"
    _count_case(impl, encdec_fields())
    _count_case(impl, encdec_fields(src_vocab=40, tgt_vocab=40, share=True, d=32, heads=4, d_ff=64))


@COUNT.hidden
def test_count_other_sizes(impl):
    "other widths and depths (encoder and decoder unequal), two vocabularies, the base configuration"
    _count_case(impl, encdec_fields(src_vocab=50, tgt_vocab=7, d=24, heads=3, n_enc=1, n_dec=3, d_ff=40))
    _count_case(
        impl,
        encdec_fields(
            src_vocab=11, tgt_vocab=11, share=True, d=8, n_enc=4, n_dec=1, d_ff=8, activation="gelu", norm_first=True
        ),
    )
    _count_case(
        impl,
        encdec_fields(
            src_vocab=37000, tgt_vocab=37000, share=True, d=512, heads=8, n_enc=6, n_dec=6, d_ff=2048, max_len=512
        ),
    )


# ---------------------------------------------------------------------------------------------------------------
# Adapters: the only code in this module that touches the student's objects. They run beside the student's code
# (in the sandboxed worker while grading, in the kernel for the notebook's own test cells), build and call the
# student's classes and functions on the inputs a check gives, and return plain results; they compute and report,
# never judge. A check calls one by reference, ``impl.call(name, ...)``; only functions marked ``@adapter`` can be.
#
# Adapters for notebook 09: BERT's embeddings, MLM head, BertForMaskedLM, masking, the MLM loss, the
# encoder-decoder Transformer and its parameter count.
#
# Configurations are built with the student's own dataclasses (``BertConfig``, ``TransformerConfig``)
# from plain dicts. The models take their parts as constructor arguments; here they get the course's
# reference parts (``autograder.reference``: embeddings, MLM head, encoder and decoder blocks, the
# sinusoidal table) and ``nn.LayerNorm``, so grading never depends on the student's other exercises or
# earlier notebooks.


def _bert_config(ns, fields: dict):
    return need(ns, "BertConfig")(**fields)


def _counted(module) -> dict:
    result = summary(module)
    if isinstance(module, nn.Module):
        result["count"] = sum(p.numel() for p in module.parameters())
    return result


# --- Exercise 1 ----------------------------------------------------------------------------


def _embeddings(ns, fields, given=False):
    return need(ns, "BertEmbeddings")(_bert_config(ns, fields), norm=GivenNorm if given else nn.LayerNorm)


@adapter
def embeddings_summary(ns, fields: dict):
    return summary(_embeddings(ns, fields))


@adapter
def embeddings_forward(ns, fields: dict, state: dict, tokens, token_type_ids=None, given=False):
    """The output; ``given``: built with the check's ``GivenNorm`` as ``norm``."""
    module = load(_embeddings(ns, fields, given), state).eval()
    args = [tokens] if token_type_ids is None else [tokens, token_type_ids]
    return {"output": module(*args)}


def _modules(model, name: str) -> list:
    modules = getattr(model, name, None)
    return list(modules) if isinstance(modules, nn.ModuleList) else []


@adapter
def embeddings_on_meta(ns, fields: dict, shape: list, with_types: bool) -> dict:
    """``BertEmbeddings`` on PyTorch's meta device, on meta tokens (and token types): see ``_on_meta``."""
    tokens = torch.zeros(shape, dtype=torch.long, device="meta")
    return run_on_meta(_embeddings(ns, fields), *([tokens, torch.zeros_like(tokens)] if with_types else [tokens]))


# --- Exercise 2 ----------------------------------------------------------------------------


def _head(ns, fields, given=False):
    config = _bert_config(ns, fields)
    word = nn.Embedding(config.vocab_size, config.d_model)
    return need(ns, "MLMHead")(config, word, norm=GivenNorm if given else nn.LayerNorm), word


@adapter
def head_summary(ns, fields: dict):
    head, word = _head(ns, fields)
    result = summary(head)
    if isinstance(head, nn.Module):
        result["shares_word_weight"] = any(p is word.weight for p in head.parameters())
    return result


@adapter
def head_forward(ns, fields: dict, state: dict, word_weight, hidden, grad_output=None, given=False):
    """Load ``state`` (without the decoder's weight) and the word table, run, and backpropagate; ``given``: built
    with the check's ``GivenNorm`` as ``norm``."""
    head, word = _head(ns, fields, given)
    with torch.no_grad():
        word.weight.copy_(word_weight)
    head.load_state_dict(state, strict=False)  # decoder.weight comes from the word table (or must equal it)
    missing = [k for k in head.state_dict() if k not in state and k != "decoder.weight"]
    unexpected = [k for k in state if k not in head.state_dict()]
    if missing or unexpected:
        raise KeyError(f"MLMHead's state dict does not fit: missing {missing}, unexpected {unexpected}")
    result = forward_backward(head.eval(), grad_output, hidden)
    if grad_output is not None and isinstance(result.get("grads"), dict):
        result["word_grad"] = word.weight.grad if word.weight.grad is not None else torch.zeros_like(word.weight)
    return result


# --- Exercise 3 ----------------------------------------------------------------------------

BERT_PARTS = {"embeddings": ReferenceEmbeddings, "block": EncoderBlock, "head": ReferenceHead, "norm": nn.LayerNorm}


def _bert(ns, fields):
    return need(ns, "BertForMaskedLM")(_bert_config(ns, fields), **BERT_PARTS)


@adapter
def bert_summary(ns, fields: dict):
    return _counted(_bert(ns, fields))


@adapter
def bert_parts(ns, fields: dict) -> dict:
    """Which parts of ``BertForMaskedLM`` were made by calling its ``embeddings``, ``block``, ``head`` and ``norm``
    arguments (recording stand-ins for the reference parts)."""
    parts = {name: Recording(make) for name, make in BERT_PARTS.items()}
    norm = parts["norm"]
    model = need(ns, "BertForMaskedLM")(_bert_config(ns, fields), **parts)
    embeddings, head, blocks = (
        getattr(model, "embeddings", None),
        getattr(model, "head", None),
        _modules(model, "blocks"),
    )
    return {
        "embeddings": parts["embeddings"].built(embeddings),
        "head": parts["head"].built(head),
        "embeddings.norm": norm.built(getattr(embeddings, "norm", None)),
        "head.norm": norm.built(getattr(head, "norm", None)),
        "blocks": len(blocks),
        "blocks_by_block": sum(parts["block"].built(b) for b in blocks),
        "block_norms": 2 * len(blocks),
        "block_norms_by_norm": sum(norm.built(getattr(b, name, None)) for b in blocks for name in ("norm1", "norm2")),
    }


@adapter
def bert_forward(ns, fields: dict, state: dict, tokens, token_type_ids=None, padding_mask=None):
    module = load(_bert(ns, fields), state).eval()
    with torch.no_grad():
        return {"output": module(tokens, token_type_ids, padding_mask)}


# --- Exercise 4 ----------------------------------------------------------------------------


@adapter
def mask_tokens_run(ns, tokens, options: dict, seed: int, global_seed: int = 0, draws: int = 1):
    """``draws`` calls of ``mask_tokens`` with one generator seeded ``seed`` (global RNG seeded ``global_seed``)."""
    mask_tokens = need(ns, "mask_tokens")
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(global_seed)
    given = tokens.clone()
    inputs, labels = [], []
    for _ in range(draws):
        result = mask_tokens(given, generator=generator, **options)
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            return {"result": result}
        inputs.append(result[0])
        labels.append(result[1])
        if not torch.equal(given, tokens):
            break
    return {"inputs": inputs, "labels": labels, "tokens_after": given}


# --- Exercise 5 ----------------------------------------------------------------------------


@adapter
def mlm_loss_run(ns, logits, labels, backward: bool = False):
    logits = logits.clone().requires_grad_(backward)
    loss = need(ns, "mlm_loss")(logits, labels)
    result = {"loss": loss}
    if backward and isinstance(loss, torch.Tensor) and loss.requires_grad and loss.dim() == 0:
        loss.backward()
        result["logits_grad"] = logits.grad
    return result


# --- Exercise 6 ----------------------------------------------------------------------------

ENCDEC_PARTS = {
    "encoder_block": EncoderBlock,
    "decoder_block": DecoderBlock,
    "norm": nn.LayerNorm,
    "positions": SinusoidalPositionalEncoding,
}


def _encdec(ns, fields):
    return need(ns, "EncoderDecoder")(need(ns, "TransformerConfig")(**fields), **ENCDEC_PARTS)


@adapter
def encdec_summary(ns, fields: dict):
    return _counted(_encdec(ns, fields))


@adapter
def encdec_build_error(ns, fields: dict):
    """What constructing the model raised (or None)."""
    try:
        _encdec(ns, fields)
    except NotImplementedError:
        raise
    except Exception as error:  # noqa: BLE001
        return type(error).__name__
    return None


@adapter
def encdec_forward(ns, fields: dict, state: dict, src, tgt, src_padding=None, tgt_padding=None):
    """``forward`` and ``encode`` of the model with ``state`` loaded by name."""
    module = load(_encdec(ns, fields), state).train()  # no dropout in the course's parts: train == eval
    with torch.no_grad():
        return {"output": module(src, tgt, src_padding, tgt_padding), "memory": module.encode(src, src_padding)}


@adapter
def encdec_on_meta(ns, fields: dict, src_len: int, tgt_len: int) -> dict:
    """``EncoderDecoder`` on PyTorch's meta device, on meta tokens and padding masks: see ``_on_meta``."""
    src = torch.zeros(2, src_len, dtype=torch.long, device="meta")
    tgt = torch.zeros(2, tgt_len, dtype=torch.long, device="meta")
    masks = (
        torch.ones(2, src_len, dtype=torch.bool, device="meta"),
        torch.ones(2, tgt_len, dtype=torch.bool, device="meta"),
    )
    return run_on_meta(_encdec(ns, fields), src, tgt, *masks)


@adapter
def encdec_parts(ns, fields: dict) -> dict:
    """Which parts of ``EncoderDecoder`` were made by calling its ``encoder_block``, ``decoder_block``, ``norm`` and
    ``positions`` arguments (recording stand-ins for the reference parts)."""
    parts = {name: Recording(make) for name, make in ENCDEC_PARTS.items()}
    model = need(ns, "EncoderDecoder")(need(ns, "TransformerConfig")(**fields), **parts)
    encoder, decoder = _modules(model, "encoder"), _modules(model, "decoder")
    return {
        "encoder": len(encoder),
        "encoder_by_block": sum(parts["encoder_block"].built(b) for b in encoder),
        "decoder": len(decoder),
        "decoder_by_block": sum(parts["decoder_block"].built(b) for b in decoder),
        "encoder_norm": parts["norm"].built(getattr(model, "encoder_norm", None)),
        "decoder_norm": parts["norm"].built(getattr(model, "decoder_norm", None)),
        "positions": parts["positions"].built(getattr(model, "positions", None)),
    }


# --- Exercise 7 ----------------------------------------------------------------------------


@adapter
def count_parameters(ns, fields: dict):
    """What ``transformer_num_parameters(TransformerConfig(**fields))`` returns (an int as a plain int)."""
    value = need(ns, "transformer_num_parameters")(need(ns, "TransformerConfig")(**fields))
    return int(value) if isinstance(value, numbers.Integral) and not isinstance(value, bool) else value
