"""Notebook 16's exercises, with their checks and adapters: weight-only quantization, speculative decoding and a
mixture of experts.

Each exercise is graded on its own: the parts an exercise builds on are given to it in place of the notebook's
(``autograder.adapters.given``), and none of them is a copy of an answer: the quantization parts are recorded from
torchao's results (``autograder.reference.quantization``), the acceptance rule and the cache's rollback are Hugging
Face's (``autograder.reference.speculative``), the router is Mixtral's (``autograder.reference.moe``).

Section 1, weight-only quantization.

Oracles:
- ``quantize_int8``: torchao's ``Int8WeightOnlyConfig`` applied by ``torchao.quantization.quantize_`` to an
  ``nn.Linear`` holding the same weight; its ``Int8Tensor``'s ``qdata`` and ``scale`` are compared exactly (integers,
  and the scale computed by the same float32 operations). ``dequantize_int8``: the closed form q * scale.
- ``quantize_int4``: torchao's tinygemm primitives (``_choose_qparams_affine_tinygemm``,
  ``_quantize_affine_tinygemm``, ``_dequantize_affine_tinygemm`` in ``torchao.quantization.quant_primitives``, with
  block (1, group_size), uint4 range 0..15, float32 scales and zeros), compared exactly for the integers, scales and
  zeros. ``pack_int4``/``unpack_int4``: the byte written out bit by bit (16 * even column + odd column, the layout of
  torchao's tile-packed int4 tensor before ``_convert_weight_to_int4pack``), and the round trip. And PyTorch's CPU int4
  kernel ``torch._weight_int4pack_mm_for_cpu``, fed the student's integers unpacked in the stated order with their
  scales and zeros: its product must equal x @ dequantized(W).T (for the group sizes it takes: 32, 64, 128, 256).
- ``QuantizedLinear``: ``torch._weight_int8pack_mm`` (int8) and ``torch._weight_int4pack_mm_for_cpu`` (int4; for
  group size 16, which it does not take, the product with torchao's dequantized weight) on the torchao integers of
  the same weight, plus the bias; ``weight_hat()`` against torchao's dequantized weight; its buffers, parameters and
  attributes observed before and after ``forward`` (no float tensor as large as W).
Tolerances (float32 on CPU, any BLAS):
- integers, scales and zeros: exact (the same float32 operations in the same order as torchao's);
- dequantized weights: atol 1e-6 + rtol 1e-6 (one multiply and one add per entry, values of order 1; an FMA or
  another order of the two changes the last bit only);
- layer outputs (inputs of width <= 128, values of order 1): atol 1e-4 + rtol 1e-4 against the kernels, which
  accumulate in another order (measured against float64 on the checks' shapes: <= 2e-6, the float32 matmul's error
  too), and atol 1e-5 + rtol 1e-5 against the float32 matmul x @ dequantized(W).T.

Section 2, speculative decoding.

Oracles:
- ``speculative_accept``: the rule's exact output distribution for fixed drafted tokens, written here as
  probabilities (not draws): the outcome "drafts 0..j-1 accepted, then y" has probability
  prod_{i<j} a_i * (1 - a_j) * r_j(y), with a_i = min(1, p_i(x_i) / q_i(x_i)) and r_j = max(0, p_j - q_j)
  normalised; "all k accepted, then y" has prod a_i * p_k(y). Compared with the frequencies of 4,000 calls. And an
  invariance that does not use the rule's details: with the drafted tokens drawn from the draft's distributions
  (here, by the checks), the first emitted token is distributed as target_probs[0], whatever the draft.
  Deterministic cases: draft = target (every draft accepted, then the bonus, one-hot so known); a drafted token of
  target probability 0 (always rejected) with a one-hot residual (its replacement known), over 20 seeds.
- ``rollback``: slicing the stored tensors here, ``[:, :, :length]`` (exact).
- ``speculative_generate``: greedy (temperature 0) equals the target's own greedy decoding recomputed from the
  whole prefix without a cache (brute force) and, on tiny random ``LlamaForCausalLM`` target (2 layers) and draft
  (1 layer), Hugging Face's ``generate(assistant_model=draft, do_sample=False)``; the course's decoder is loaded
  with the same weights (``autograder.reference.hf_llama.course_state``). The smallest margin between the best
  and second-best target logit along those greedy paths is checked to be above 1e-3 (far above the ~1e-6 by which
  the two implementations' logits differ), so no rounding decides a token. With sampling: lookup-table models
  (``autograder.reference.toy.PrefixTableModel``'s hash of the prefix, behind the cache interface: each layer
  stores the tokens it was fed) whose distribution of the next three tokens is enumerated exactly (27 outcomes),
  against the frequencies of 1,500 calls. What the models are fed and what their caches hold is observed at
  every call (the table models' caches hold the tokens themselves).

Statistical tests: Pearson's chi-square statistic of the counts against the exact probabilities, the
outcomes whose expected count is below 20 pooled into one cell; the test fails when the statistic exceeds the
chi-square quantile at 1 - 1e-6 (degrees of freedom: cells - 1), so a right answer fails with probability about
1e-6 per test (the approximation is good with every expected count >= 20); an outcome of probability 0 that is
drawn fails at once. The draws are seeded, so a verdict is the same at every run. The known mistakes move the
statistic far beyond the threshold (the wrong versions, tests/wrong).

Tolerances: none; tokens are compared exactly, and the stored keys of a rolled-back cache too.

Section 3, a mixture of experts.

Oracles:
- ``route``: Hugging Face's ``MixtralTopKRouter`` (transformers 5.x) on the same logits (its weight the identity,
  so its router logits are the given ones): softmax over the experts in float32, top k, renormalised. Compared as
  sets per token (each row sorted by expert id), so any order of the k choices passes; the ids exactly.
- ``MoELayer``: ``MixtralSparseMoeBlock`` (tiny config, router jitter 0) with the student's router weight as
  ``gate.weight`` and the experts' weights in its fused layout (``gate_up_proj[e]`` = w1's rows then w3's,
  ``down_proj[e]`` = w2): outputs, and the gradients of the router, of every expert's w1, w3, w2 and of the input.
  Graded with Mixtral's router (``autograder.reference.moe``) in place of the student's ``route``. The rule "no loop
  over tokens" is observed: the experts are made by the ``expert`` argument, a course class that records each
  call; each expert must run at most once per forward, on exactly the tokens routed to it (rows compared as
  sets, exactly), and never on a token not routed to it; and the student's lines, torch calls and Python values
  given to torch must not grow with the number of tokens (``lines_run``, every expert hit at both sizes).
- ``load_balancing_loss``: ``load_balancing_loss_func`` of the same transformers (a one-layer tuple of logits,
  no attention mask), which counts every one of the top-k assignments and divides by the number of tokens (the
  fractions sum to k); the closed form E * sum_i f_i * P_i in float64; and its gradient with respect to the logits
  (through P only: the counts are not differentiable). Several layers: HF pools them (counts and probabilities
  summed over the layers' rows), the same as the student's loss of the concatenated logits.

Tolerances (float32 on CPU, any BLAS):
- routing weights: atol 1e-6 (one softmax and one division of float32 values of order 1);
- MoE outputs, widths <= 32, values of order 1, summed over k <= 4 experts: atol 1e-5 + rtol 1e-5 (measured
  <= 1e-6 against HF's float32 evaluation in another order); gradients atol 1e-4 + rtol 1e-4 (sums over <= 64
  tokens);
- the load-balancing loss, of order 1 to E * k: atol 1e-5 + rtol 1e-5 (means of <= 200 float32 probabilities);
  its gradient atol 1e-6 (entries of order 1 / N).
"""

from __future__ import annotations

import itertools
import math

import torch
import torch.nn.functional as F
from torch import nn

from autograder import expect
from autograder.adapters import adapter, given, need, summary
from autograder.exercises import Exercise
from autograder.notebooks._seeds import seeded
from autograder.reference import kv_cache as _s_kv_cache
from autograder.reference import moe as _m_reference
from autograder.reference import quantization as _q_reference
from autograder.reference import speculative as _s_reference
from autograder.reference import toy as _s_toy

_q_gen, _q_randn = seeded(16100)

INT8 = Exercise("quantize_int8", "int8 weights, one scale per output channel", points=2)
INT4 = Exercise("quantize_int4", "int4 weights in groups, two per byte", points=3)
QLINEAR = Exercise("quantized_linear", "a linear layer from quantized weights", points=3)
QUANT_EXERCISES = [INT8, INT4, QLINEAR]
QUANT_ORACLE_IMPORTS = ("torchao",)  # imported while the notebook runs (grading.grade): seconds

_Q_DEQ = {"atol": 1e-6, "rtol": 1e-6}
_Q_KERNEL = {"atol": 1e-4, "rtol": 1e-4}
_Q_OUT = {"atol": 1e-5, "rtol": 1e-5}


def _q_torchao():
    """torchao's quantization API and primitives, imported without its import-time warnings (libraries for GPUs
    it cannot load on a CPU, and torch's notes on its enums)."""
    import logging
    import warnings

    loggers = [logging.getLogger(name) for name in ("torchao", "torch.utils._pytree")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import torchao.quantization as tq
            from torchao.quantization import quant_primitives as qp
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
    return tq, qp


def _q_oracle_int8(weight):
    """torchao's Int8WeightOnlyConfig on an nn.Linear holding ``weight``: its integers and per-row scales."""
    tq, _ = _q_torchao()
    layer = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    with torch.no_grad():
        layer.weight.copy_(weight)
    tq.quantize_(layer, tq.Int8WeightOnlyConfig(set_inductor_config=False))  # no global settings changed
    return layer.weight.qdata.detach().clone(), layer.weight.scale.detach().reshape(-1).clone()


def _q_oracle_int4(weight, group_size):
    """torchao's tinygemm int4 primitives: integers 0..15, float32 scales and zeros [out, in // group_size]."""
    _, qp = _q_torchao()
    block = (1, group_size)
    scales, zeros = qp._choose_qparams_affine_tinygemm(
        weight, qp.MappingType.ASYMMETRIC, block, torch.int32, 0, 15,
        scale_dtype=torch.float32, zero_point_dtype=torch.float32,
    )  # fmt: skip
    q = qp._quantize_affine_tinygemm(weight, block, scales, zeros, torch.int32, 0, 15)
    deq = qp._dequantize_affine_tinygemm(q, block, scales, zeros, torch.int32, 0, 15)
    shape = (weight.shape[0], weight.shape[1] // group_size)
    return q.to(torch.uint8), scales.reshape(shape), zeros.reshape(shape), deq


def _q_bytes(q):
    """Two int4 values per byte, written out: the even column times 16 plus the odd column."""
    out = torch.zeros(q.shape[0], q.shape[1] // 2, dtype=torch.uint8)
    for j in range(q.shape[1] // 2):
        out[:, j] = q[:, 2 * j].to(torch.int32) * 16 + q[:, 2 * j + 1].to(torch.int32)
    return out


def _q_int4_kernel(x, q, scales, zeros, group_size):
    """PyTorch's CPU int4 kernel: x @ ((q - 8) * scale + zero).T, from the integers 0..15 [out, in]; None for a group
    size it does not take (32, 64, 128, 256). It wants a multiple of 16 rows: padded with zero rows, cut after."""
    if group_size not in (32, 64, 128, 256):
        return None
    rows = q.shape[0]
    pad = -rows % 16
    q = torch.cat([q.to(torch.int32), torch.full((pad, q.shape[1]), 8, dtype=torch.int32)])
    scales = torch.cat([scales, torch.ones(pad, scales.shape[1])])
    zeros = torch.cat([zeros, torch.zeros(pad, zeros.shape[1])])
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.contiguous(), 1)
    scales_and_zeros = torch.stack([scales, zeros], dim=-1).transpose(0, 1).contiguous()
    return torch.ops.aten._weight_int4pack_mm_for_cpu(x.contiguous(), packed, group_size, scales_and_zeros)[:, :rows]


def _q_mismatch(got, want):
    """Where two integer tensors differ, in words ("" when they do not)."""
    differ = got.to(torch.int32) != want.to(torch.int32)
    if not bool(differ.any()):
        return ""
    index = tuple(int(i) for i in differ.nonzero()[0])
    return (
        f"{int(differ.sum())} of {want.numel()} differ; at {list(index)} got {int(got[index])}, "
        f"expected {int(want[index])}"
    )


# --- Exercise: int8 weights ----------------------------------------------------------------------------------------


def _q_int8_mistakes(weight):
    amax = weight.abs().amax(dim=1).clamp(min=torch.finfo(torch.float32).eps)
    columns = weight.abs().amax(dim=0).clamp(min=torch.finfo(torch.float32).eps)
    scaled = weight * (1.0 / (amax / 127.5))[:, None]
    return [
        (lambda s, q: s.shape == columns.shape and torch.equal(s, columns / 127.5),
         "the scale is taken over the wrong axis: one scale per output channel is the max of |W| over a row "
         "(dim 1, the input features), not over a column"),
        (lambda s, q: torch.allclose(s, amax / 127, rtol=1e-6, atol=0),
         "the scale is max|row| / 127; torchao divides by 127.5 = (127 - (-128)) / 2, half the width of int8's range"),
        (lambda s, q: torch.equal(q, torch.clamp(torch.round(weight / (amax / 127.5)[:, None]), -128, 127).to(q.dtype)),
         "the integers are round(W / scale); the stated convention is round(W * (1 / scale)), the reciprocal "
         "first, as torchao computes it (the two differ in the last bit, and so in a few roundings)"),
        (lambda s, q: torch.equal(q.to(torch.int32), torch.clamp(scaled.trunc(), -128, 127).to(torch.int32)),
         "the integers are truncated toward zero (a cast to int8 without rounding): round to the nearest first"),
        (lambda s, q: torch.equal(q.to(torch.int32), torch.clamp(torch.floor(scaled + 0.5), -128, 127).to(torch.int32)),
         "ties are rounded up (floor(x + 0.5)); torch.round rounds halves to the even integer, as torchao does"),
        (lambda s, q: torch.equal(q.to(torch.int32), torch.round(scaled).to(torch.int32).to(torch.int8).to(torch.int32))
         and bool((torch.round(scaled) > 127).any()),
         "the integers are not clamped to [-128, 127]: the row's largest positive value rounds to 128, which "
         "wraps around to -128 in int8"),
    ]  # fmt: skip


def _q_check_int8(impl, weight, what):
    got = impl.call(call_quantize_int8, weight)
    expect.that(got["unchanged"], f"quantize_int8 changed the weight it was given ({what}); leave it as it was")
    out = got["output"]
    expect.that(
        isinstance(out, (tuple, list)) and len(out) == 2,
        f"quantize_int8 returned {type(out).__name__} for {what}; expected a pair (q, scale)",
    )
    rows, cols = weight.shape
    q_right, scale_right = _q_oracle_int8(weight)
    scale = expect.tensor(out[1], f"the scale for {what}", dtype=torch.float32)
    q = expect.tensor(out[0], f"q for {what}", shape=(rows, cols))
    if list(scale.shape) == [cols] and cols != rows:
        expect.fail(
            f"the scale for {what} has shape [{cols}], one per input column: the scale is per output channel, "
            f"the max of |W| over each row, shape [{rows}]"
        )
    expect.tensor(scale, f"the scale for {what}", shape=(rows,))
    expect.that(
        bool((scale > 0).all()),
        f"the scale for {what} is 0 for a row of zeros (and q is then 0 / 0): the scale is at least "
        "torch.finfo(torch.float32).eps",
    )
    expect.that(q.dtype == torch.int8, f"q for {what} has dtype {q.dtype}, expected torch.int8")
    if not (torch.equal(scale, scale_right) and torch.equal(q, q_right)):
        for wrong, diagnosis in _q_int8_mistakes(weight):
            if wrong(scale, q):
                expect.fail(f"quantize_int8 on {what} is wrong: {diagnosis}")
    expect.close(
        scale, scale_right, f"the scale for {what}", atol=0.0,
        hint="Expected torchao's: max over the row of |W|, divided by 127.5, at least torch.finfo(torch.float32).eps.",
    )  # fmt: skip
    expect.that(
        torch.equal(q, q_right),
        f"q for {what} differs from torchao's Int8WeightOnlyConfig integers: {_q_mismatch(q, q_right)} "
        "(expected clamp(round(W * (1 / scale)), -128, 127), halves rounded to even)",
    )
    expect.close(got["dequantized"], q_right.float() * scale_right[:, None], f"dequantize_int8(q, scale) for {what}",
                 **_Q_DEQ, hint="dequantize_int8 returns q * scale, each row by its own scale, in float32.")  # fmt: skip
    expect.that(
        got["dequantized"].dtype == torch.float32,
        f"dequantize_int8 for {what} returned {got['dequantized'].dtype}, expected float32",
    )


@INT8.visible
def test_int8_like_torchao(impl):
    "a random [16, 16] weight: the integers and scales equal torchao's Int8WeightOnlyConfig's; dequantize is q * scale"
    _q_check_int8(impl, _q_randn((16, 16), 1, 0.05), "a random [16, 16] weight")


@INT8.visible
def test_int8_extremes(impl):
    "each row's largest |value| lands on the end of the range: +max gives 127 (127.5 rounds to 128, clamped), -max -128"
    weight = _q_randn((6, 10), 2)
    weight[0, 3] = 4.0  # the largest value of row 0 is positive
    weight[1, 7] = -4.0  # and that of row 1 negative
    _q_check_int8(impl, weight, "a [6, 10] weight whose rows 0 and 1 peak at +4 and -4")


@INT8.hidden
def test_int8_shapes_and_seeds(impl):
    "other shapes and scales of values, as torchao's"
    for seed, (shape, size) in enumerate([((64, 128), 0.02), ((24, 40), 1.0), ((5, 7), 30.0), ((1, 3), 1.0)]):
        _q_check_int8(impl, _q_randn(shape, 10 + seed, size), f"a random {list(shape)} weight (seed {seed})")


@INT8.hidden
def test_int8_edge_rows(impl):
    "an all-zero row (the scale's eps floor, q 0), a row with one huge value, halves exactly between two integers"
    weight = _q_randn((4, 8), 20)
    weight[0] = 0.0
    weight[1, 2] = 1000.0
    weight[2] = torch.tensor([127.5, 0.5, 1.5, 2.5, -2.5, -0.5, 3.5, -127.5])  # scale 1: every value a tie
    _q_check_int8(impl, weight, "a [4, 8] weight with a zero row, a huge value and ties at .5")


# --- Exercise: int4 weights ----------------------------------------------------------------------------------------


def _q_check_int4(impl, weight, group_size, what, kernel=True):
    got = impl.call(call_quantize_int4, weight, group_size)
    expect.that(got["unchanged"], f"quantize_int4 changed the weight it was given ({what}); leave it as it was")
    out = got["output"]
    expect.that(
        isinstance(out, (tuple, list)) and len(out) == 3,
        f"quantize_int4 returned {type(out).__name__} for {what}; expected (q, scales, zeros)",
    )
    rows, cols = weight.shape
    q_right, s_right, z_right, deq_right = _q_oracle_int4(weight, group_size)
    q = expect.tensor(out[0], f"q for {what}", shape=(rows, cols))
    expect.that(q.dtype == torch.uint8, f"q for {what} has dtype {q.dtype}, expected torch.uint8 (values 0..15)")
    for name, value in (("scales", out[1]), ("zeros", out[2])):
        value = expect.tensor(value, f"{name} for {what}", dtype=torch.float32)
        if list(value.shape) == [rows // group_size, cols] and rows % group_size == 0 and rows != cols:
            expect.fail(
                f"{name} for {what} has shape {list(value.shape)}: the groups run down the columns (over output "
                f"channels); a group is {group_size} consecutive input columns of one row, shape [{rows}, "
                f"{cols // group_size}]"
            )
        expect.tensor(value, f"{name} for {what}", shape=(rows, cols // group_size))
    scales, zeros = out[1], out[2]
    expect.that(bool((q <= 15).all()), f"q for {what} has values above 15: int4's unsigned range is 0..15")
    if torch.equal(scales, s_right) and not torch.equal(zeros, z_right):
        for mid in (7, 7.5):
            if torch.allclose(zeros, s_right * (mid - 8) + z_right, rtol=1e-6, atol=1e-7):
                expect.fail(
                    f"the zeros for {what} are off by {8 - mid:g} step{'s' if mid == 7 else ''}: zero = min + 8 * "
                    f"scale (the mid-point of 0..15 is (0 + 15 + 1) / 2 = 8), so that (q - 8) * scale + zero maps "
                    "q = 0 to the group's min"
                )
    if not torch.equal(scales, s_right) and torch.allclose(scales, s_right * 15 / 16, rtol=1e-6, atol=0):
        expect.fail(f"the scales for {what} are (max - min) / 16; with 16 levels 0..15 there are 15 steps: / 15")
    expect.that(
        torch.equal(scales, s_right),
        f"the scales for {what} differ from torchao's: expected (max - min) / 15 over each group of {group_size} "
        f"columns, at least the smallest normal float32 (differ by up to {float((scales - s_right).abs().max()):.3g})",
    )
    expect.that(
        torch.equal(zeros, z_right),
        f"the zeros for {what} differ from torchao's: expected min + 8 * scale over each group of {group_size} "
        f"columns (differ by up to {float((zeros - z_right).abs().max()):.3g})",
    )
    if not torch.equal(q, q_right):
        off = set((q.to(torch.int32) - q_right.to(torch.int32)).unique().tolist())
        if off in ({-1}, {1}, {-1, 0}, {0, 1}):
            expect.fail(
                f"q for {what} is off by {max(off, key=abs)} almost everywhere: the zero point is counted one step off; q = round((W - "
                "(zero - 8 * scale)) / scale), so the group's min is 0 and its max 15"
            )
        expect.fail(
            f"q for {what} differs from torchao's tinygemm integers: {_q_mismatch(q, q_right)} (expected clamp(round("
            "(W - (zero - 8 * scale)) / scale), 0, 15), dividing by the scale)"
        )
    expect.close(got["dequantized"], deq_right, f"dequantize_int4(q, scales, zeros) for {what}", **_Q_DEQ,
                 alternatives=[((q_right.float() - 7) * s_right.repeat_interleave(group_size, 1)
                                + z_right.repeat_interleave(group_size, 1),
                                "the zero point is off by one: dequantize as (q - 8) * scale + zero")],
                 hint="Expected (q - 8) * scale + zero, each group of columns with its own scale and zero.")  # fmt: skip
    if kernel and group_size in (32, 64, 128, 256):
        x = _q_randn((3, cols), 99)
        expect.close(
            x @ got["dequantized"].T,
            _q_int4_kernel(x, q_right, s_right, z_right, group_size),
            f"x @ dequantize_int4(...).T for {what}, against PyTorch's CPU int4 kernel",
            **_Q_KERNEL,
        )


def _q_check_packing(impl, q, what):
    got = impl.call(call_pack_int4, q)
    rows, cols = q.shape
    packed = got["packed"]
    expect.that(got["unchanged"], f"pack_int4 changed the q it was given ({what})")
    if isinstance(packed, torch.Tensor) and list(packed.shape) == [rows // 2, cols] and rows != cols // 2:
        expect.fail(
            f"pack_int4 on {what} returned shape {list(packed.shape)}: it pairs rows; pair the columns of each row "
            f"(two neighbouring input features), shape [{rows}, {cols // 2}]"
        )
    packed = expect.tensor(packed, f"pack_int4 on {what}", shape=(rows, cols // 2))
    expect.that(packed.dtype == torch.uint8, f"pack_int4 on {what} returned {packed.dtype}, expected torch.uint8")
    right = _q_bytes(q)
    if not torch.equal(packed, right):
        swapped = _q_bytes(torch.stack([q[:, 1::2], q[:, 0::2]], dim=-1).flatten(-2))
        if torch.equal(packed, swapped):
            expect.fail(
                f"pack_int4 on {what} uses the other nibble order: the even column (0, 2, ...) goes in the high four "
                "bits and the odd column in the low four, byte = 16 * q[:, 2j] + q[:, 2j + 1]"
            )
        halves = _q_bytes(torch.stack([q[:, : cols // 2], q[:, cols // 2 :]], dim=-1).flatten(-2))
        if torch.equal(packed, halves):
            expect.fail(
                f"pack_int4 on {what} pairs column j with column j + {cols // 2} (the two halves); pair neighbours: "
                "byte j holds columns 2j (high four bits) and 2j + 1 (low four bits)"
            )
        expect.fail(
            f"pack_int4 on {what}: {_q_mismatch(packed, right)} (expected byte j = 16 * q[:, 2j] + q[:, 2j + 1])"
        )
    unpacked = expect.tensor(got["unpacked"], f"unpack_int4(pack_int4(q)) on {what}", shape=(rows, cols))
    expect.that(unpacked.dtype == torch.uint8, f"unpack_int4 on {what} returned {unpacked.dtype}, expected torch.uint8")
    expect.that(
        torch.equal(unpacked, q),
        f"unpack_int4(pack_int4(q)) on {what} is not q: {_q_mismatch(unpacked, q)} (the high four bits are "
        "packed >> 4, the low four packed & 15, and they go back to columns 2j and 2j + 1)",
    )
    given_bytes = expect.tensor(got["unpacked_right"], f"unpack_int4 of torch's bytes for {what}", shape=(rows, cols))
    expect.that(torch.equal(given_bytes, q), f"unpack_int4 of correctly packed bytes for {what} is not q")


@INT4.visible
def test_int4_like_torchao(impl):
    "a random [8, 64] weight in groups of 32: q, scales, zeros equal torchao's tinygemm ones; dequantized like torchao"
    _q_check_int4(impl, _q_randn((8, 64), 30, 0.05), 32, "a random [8, 64] weight, group_size 32")


@INT4.visible
def test_int4_packing(impl):
    "pack_int4: byte j of a row is 16 * q[2j] + q[2j + 1]; unpack_int4 undoes it"
    q = torch.randint(0, 16, (4, 12), generator=_q_gen(31)).to(torch.uint8)
    _q_check_packing(impl, q, "random int4 values [4, 12]")


@INT4.hidden
def test_int4_shapes_and_groups(impl):
    "other shapes and group sizes (16, 32, 64, a whole row), against torchao and PyTorch's CPU int4 kernel"
    for seed, (shape, g, size) in enumerate(
        [((64, 128), 32, 0.02), ((16, 64), 64, 1.0), ((24, 96), 16, 3.0), ((3, 32), 32, 1.0), ((32, 64), 32, 1.0)]
    ):
        _q_check_int4(impl, _q_randn(shape, 40 + seed, size), g, f"a random {list(shape)} weight, group_size {g}")


@INT4.hidden
def test_int4_edge_groups(impl):
    "a constant group (scale at its floor), one huge value in a group, an all-positive group"
    weight = _q_randn((4, 64), 50)
    weight[0, :32] = 0.25
    weight[1, 40] = 500.0
    weight[2, 32:] = weight[2, 32:].abs() + 3.0
    _q_check_int4(impl, weight, 32, "a [4, 64] weight with a constant group, a huge value and a positive group")


def _q_half_steps(rows, groups, seed, group_size=32):
    """Weights whose values sit half a step between two int4 levels, the steps computed as torchao computes them
    (scale = (max - min) / 15, zero = min + 8 * scale, levels from zero - 8 * scale): there the float32 order of the
    stated operations decides the integer, where random weights almost never land."""
    gen = _q_gen(seed)
    weight = torch.empty(rows, groups * group_size)
    for r in range(rows):
        for g in range(groups):
            low = torch.randn((), generator=gen)
            high = low + torch.rand((), generator=gen) * 3 + 0.1
            scale = torch.clamp((high - low) / 15, min=torch.finfo(torch.float32).smallest_normal)
            start = (low + scale * 8) - scale * 8
            halves = start + (torch.arange(group_size - 2, dtype=torch.float32) % 15 + 0.5) * scale
            weight[r, g * group_size : (g + 1) * group_size] = torch.cat([low[None], high[None], halves])
    return weight


@INT4.hidden
def test_int4_half_steps(impl):
    "values half a step between two levels: the integers follow the stated float32 operations, in their order"
    _q_check_int4(
        impl, _q_half_steps(8, 4, 56), 32, "a [8, 128] weight whose values sit half a step between int4 levels"
    )


@INT4.hidden
def test_int4_packing_more(impl):
    "packing on other shapes, every value 0..15 in both nibbles"
    q = torch.arange(16, dtype=torch.uint8).repeat(16, 1)
    q[1::2] = q[1::2].flip(-1)
    _q_check_packing(impl, q, "every value 0..15 in each nibble [16, 16]")
    q = torch.randint(0, 16, (6, 96), generator=_q_gen(52)).to(torch.uint8)
    _q_check_packing(impl, q, "random int4 values [6, 96]")


@INT4.hidden
def test_int4_group_size_must_divide(impl):
    "a group size that does not divide in_features is refused with a ValueError"
    got = impl.call(refused_quantize_int4, _q_randn((4, 48), 53), 32)
    expect.that(
        got["raised"] == "ValueError",
        "quantize_int4 of a [4, 48] weight with group_size 32 "
        + (f"raised {got['raised']}" if got["raised"] else "raised nothing")
        + "; expected a ValueError (48 columns are not whole groups of 32)",
    )


# --- Exercise: a quantized linear layer ------------------------------------------------------------------------------


def _q_linear_state(out_features, in_features, bias, seed):
    state = {"weight": _q_randn((out_features, in_features), seed) / math.sqrt(in_features)}
    if bias:
        state["bias"] = _q_randn((out_features,), seed + 1, 0.1)
    return state


def _q_records(weight, bits, group_size):
    """What the course's parts return for ``weight`` (torchao's integers, as the checks of those parts use them), for
    the layer's code to be given in place of the notebook's parts (``autograder.reference.quantization``)."""
    if bits == 8:
        q, scale = _q_oracle_int8(weight)
        return {
            "quantize_int8": [((weight,), (q, scale))],
            "dequantize_int8": [((q, scale), q.float() * scale[:, None])],
        }
    q, scales, zeros, weight_hat = _q_oracle_int4(weight, group_size)
    packed = _q_bytes(q)
    return {
        "quantize_int4": [((weight, group_size), (q, scales, zeros))],
        "dequantize_int4": [((q, scales, zeros), weight_hat)],
        "pack_int4": [((q,), packed)],
        "unpack_int4": [((packed,), q)],
    }


def _q_check_linear(impl, out_features, in_features, bias, bits, group_size, shape, seed):
    state = _q_linear_state(out_features, in_features, bias, seed)
    x = _q_randn((*shape, in_features), seed + 2)
    got = impl.call(run_quantized_linear, state, bits, group_size, x, _q_records(state["weight"], bits, group_size))
    what = f"QuantizedLinear(nn.Linear({in_features}, {out_features}, bias={bias}), bits={bits}" + (
        f", group_size={group_size})" if bits == 4 else ")"
    )
    held = got["held"]
    floats = [
        f"{name} {info[0]}"
        for name, info in held.items()
        if info[1].startswith("torch.float") and math.prod(info[0]) >= out_features * in_features
    ]
    expect.that(
        not floats,
        f"{what} holds a float tensor as large as the weight ({', '.join(floats)}); keep only the quantized weight, "
        "its scales (and zeros) and the bias, and dequantize inside forward",
    )
    expect.that(not got["parameters"], f"{what} has parameters {got['parameters']}; keep everything as buffers")
    weight = state["weight"]
    b = state.get("bias")
    flat = x.reshape(-1, in_features)
    if bits == 8:
        q, scale = _q_oracle_int8(weight)
        expected_held = {
            "qweight": ([out_features, in_features], "torch.int8"),
            "scales": ([out_features], "torch.float32"),
        }
        kernel = torch._weight_int8pack_mm(flat, q, scale)
        deq = q.float() * scale[:, None]
    else:
        q, s, z, deq = _q_oracle_int4(weight, group_size)
        expected_held = {
            "qweight": ([out_features, in_features // 2], "torch.uint8"),
            "scales": ([out_features, in_features // group_size], "torch.float32"),
            "zeros": ([out_features, in_features // group_size], "torch.float32"),
        }
        kernel = _q_int4_kernel(flat, q, s, z, group_size)
        if kernel is None:  # a group size the kernel does not take: torchao's dequantized weight instead
            kernel = flat @ deq.T
    for name, (shape_, dtype) in expected_held.items():
        expect.that(
            held.get(name) is not None
            and list(held[name][0]) == shape_
            and held[name][1] == dtype
            and got["buffers"].get(name),
            f"{what}: expected a buffer `{name}` of shape {shape_} and dtype {dtype}; found "
            f"{held.get(name, 'none') if not held.get(name) else list(held[name][0])} {held.get(name, (0, ''))[1]}"
            + ("" if got["buffers"].get(name, True) else " (an attribute, not a registered buffer)"),
        )
    if bias:
        expect.that(
            not ("bias" in held and torch.equal(got["bias"], b + 1.0)),
            f"{what}: its `bias` changed when the nn.Linear's bias was changed after the layer was made: it shares "
            "the Linear's memory; register a copy (linear.bias.detach().clone())",
        )
        expect.that(
            "bias" in held and torch.equal(got["bias"], b),
            f"{what}: expected a buffer `bias` equal to the linear layer's bias",
        )
    attributes = {"bits": bits, "group_size": group_size, "in_features": in_features, "out_features": out_features}
    expect.that(
        got["attributes"] == attributes,
        f"{what} has the attributes {got['attributes']}; expected {attributes}",
    )
    expect.close(
        got["weight_hat"], deq, f"{what}.weight_hat()", **_Q_DEQ,
        hint="weight_hat() returns the weight dequantized from the buffers, [out, in] float32.",
    )  # fmt: skip
    expected = (kernel.reshape(*shape, out_features) + (b if bias else 0)).detach()
    exact = (x @ deq.T + (b if bias else 0)).detach()
    expect.close(
        got["output"], expected, f"{what}(x) for x of shape {[*shape, in_features]}, against PyTorch's int{bits} kernel",
        **_Q_KERNEL,
        alternatives=[(x @ deq.T, "the bias is not added")] if bias else [],
    )  # fmt: skip
    expect.close(got["output"], exact, f"{what}(x), against x @ dequantized(W).T + bias", **_Q_OUT)
    expect.close(got["second"], exact[..., :1, :] if shape else exact, f"{what}(x) called again", **_Q_OUT)
    return got


@QLINEAR.visible
def test_int8_layer(impl):
    "bits=8: buffers qweight int8 [out, in] and scales [out], no float weight kept; output equals torch._weight_int8pack_mm"
    _q_check_linear(impl, 12, 16, True, 8, 32, (2, 5), 60)


@QLINEAR.visible
def test_int4_layer(impl):
    "bits=4: qweight uint8 [out, in // 2] packed, scales and zeros [out, in // g]; output equals PyTorch's int4 kernel"
    _q_check_linear(impl, 12, 64, True, 4, 32, (2, 5), 70)


@QLINEAR.hidden
def test_layers_more_shapes(impl):
    "no bias, other widths and group sizes, inputs of 1 to 3 dimensions"
    for seed, args in enumerate(
        [(64, 128, False, 8, 32, (3,)), (32, 128, False, 4, 64, (1, 1)), (48, 32, True, 4, 16, (2, 2, 3)),
         (256, 64, True, 8, 32, (4, 2))]
    ):  # fmt: skip
        _q_check_linear(impl, *args, 80 + 10 * seed)


@QLINEAR.hidden
def test_layer_refuses_other_bits(impl):
    "bits other than 8 and 4 are refused with a ValueError"
    state = _q_linear_state(8, 32, True, 120)
    # The course's parts work for this weight at either width, so only the layer's own test of `bits` can refuse.
    records = _q_records(state["weight"], 8, 32) | _q_records(state["weight"], 4, 32)
    got = impl.call(refused_quantized_linear, state, 3, records)
    expect.that(
        got["raised"] == "ValueError",
        "QuantizedLinear(..., bits=3) "
        + (f"raised {got['raised']}" if got["raised"] else "raised nothing")
        + "; expected a ValueError (only 8 and 4 bits are asked for)",
    )


# --- Adapters --------------------------------------------------------------------------------------------------------


@adapter
def call_quantize_int8(ns, weight):
    given_weight = weight.clone()
    output = need(ns, "quantize_int8")(given_weight)
    result = {"output": output, "unchanged": torch.equal(given_weight, weight), "dequantized": None}
    if isinstance(output, (tuple, list)) and len(output) == 2:
        result["dequantized"] = need(ns, "dequantize_int8")(*output)
    return result


@adapter
def call_quantize_int4(ns, weight, group_size):
    given_weight = weight.clone()
    output = need(ns, "quantize_int4")(given_weight, group_size)
    result = {"output": output, "unchanged": torch.equal(given_weight, weight), "dequantized": None}
    if isinstance(output, (tuple, list)) and len(output) == 3:
        result["dequantized"] = need(ns, "dequantize_int4")(*output)
    return result


@adapter
def refused_quantize_int4(ns, weight, group_size):
    from autograder.adapters import outcome

    return outcome(need(ns, "quantize_int4"), weight, group_size)


@adapter
def call_pack_int4(ns, q):
    given_q = q.clone()
    packed = need(ns, "pack_int4")(given_q)
    unpack = need(ns, "unpack_int4")
    right = (q[:, 0::2] << 4) | q[:, 1::2]
    unpacked = unpack(packed.clone()) if isinstance(packed, torch.Tensor) else None
    return {
        "packed": packed,
        "unchanged": torch.equal(given_q, q),
        "unpacked": unpacked,
        "unpacked_right": unpack(right),
    }


def _q_layer(ns, state, bits, group_size, records, linear=None):
    if linear is None:
        linear = nn.Linear(state["weight"].shape[1], state["weight"].shape[0], bias="bias" in state)
        linear.load_state_dict(state)
    with given(ns, **_q_reference.given_parts(records)):
        return need(ns, "QuantizedLinear")(linear, bits, group_size)


def _q_held(layer):
    held = {}
    for name, t in [*layer.named_parameters(), *layer.named_buffers(), *vars(layer).items()]:
        if isinstance(t, torch.Tensor) and name not in held:
            held[name] = (list(t.shape), str(t.dtype))
    return held


@adapter
def run_quantized_linear(ns, state, bits, group_size, x, records):
    linear = nn.Linear(state["weight"].shape[1], state["weight"].shape[0], bias="bias" in state)
    linear.load_state_dict(state)
    layer = _q_layer(ns, state, bits, group_size, records, linear)
    with torch.no_grad():  # what the layer holds must not move with the nn.Linear it was made from
        linear.weight.add_(1.0)
        if linear.bias is not None:
            linear.bias.add_(1.0)
    with given(ns, **_q_reference.given_parts(records)), torch.no_grad():
        output = layer(x)
        second = layer(x[..., :1, :] if x.dim() > 1 else x)
        weight_hat = layer.weight_hat() if callable(getattr(layer, "weight_hat", None)) else None
    held = _q_held(layer)
    buffers = {name: True for name, _ in layer.named_buffers()}
    buffers |= {name: False for name in held if name not in buffers}
    bias = dict(layer.named_buffers()).get("bias", getattr(layer, "bias", None))
    return {
        "output": output,
        "second": second,
        "weight_hat": weight_hat,
        "attributes": {
            name: getattr(layer, name, None) for name in ("bits", "group_size", "in_features", "out_features")
        },
        "held": held,
        "buffers": buffers,
        "parameters": [name for name, _ in layer.named_parameters()],
        "bias": bias.detach().clone() if isinstance(bias, torch.Tensor) else None,
    }


@adapter
def refused_quantized_linear(ns, state, bits, records):
    from autograder.adapters import outcome

    return outcome(_q_layer, ns, state, bits, 32, records)


SPEC_ACCEPT = Exercise("speculative_accept", "the acceptance rule", points=3)
SPEC_ROLLBACK = Exercise("kv_rollback", "rolling a KV cache back", points=1)
SPEC_GENERATE = Exercise("speculative_generate", "speculative decoding", points=4)
SPEC_EXERCISES = [SPEC_ACCEPT, SPEC_ROLLBACK, SPEC_GENERATE]
SPEC_ORACLE_IMPORTS = ("transformers.models.llama.modeling_llama",)  # imported while the notebook runs: seconds

_s_gen, _s_randn = seeded(16200)
_S_TAIL = 1e-6  # the false-failure probability of each statistical test
_S_POOL = 20  # outcomes expected fewer times than this are pooled into one cell
_S_ACCEPT_DRAWS = 4000
_S_GENERATE_DRAWS = 1500


def _s_chi2_quantile(df: int, tail: float = _S_TAIL) -> float:
    """x with P(chi-square(df) > x) = tail, by bisection on the regularized upper incomplete gamma function."""
    lo, hi = 0.0, 20.0 * df + 200.0
    for _ in range(100):
        mid = (lo + hi) / 2
        survival = torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), torch.tensor(mid / 2))
        lo, hi = (mid, hi) if float(survival) > tail else (lo, mid)
    return hi


def _s_chi2(counts: dict, probs: dict) -> tuple[float, float, list]:
    """Pearson's statistic of ``counts`` (outcome -> count) against ``probs`` (outcome -> probability), its
    threshold, and the outcomes of probability 0 that were drawn."""
    n = sum(counts.values())
    impossible = [o for o, c in counts.items() if c and probs.get(o, 0.0) <= 0]
    cells, pooled_p, pooled_c = [], 0.0, 0
    for outcome, p in probs.items():
        if n * p < _S_POOL:
            pooled_p, pooled_c = pooled_p + p, pooled_c + counts.get(outcome, 0)
        else:
            cells.append((counts.get(outcome, 0), p))
    if pooled_p > 0:
        cells.append((pooled_c, pooled_p))
    statistic = sum((c - n * p) ** 2 / (n * p) for c, p in cells)
    return statistic, _s_chi2_quantile(max(len(cells) - 1, 1)), impossible


def _s_fits(counts: dict, probs: dict) -> bool:
    statistic, threshold, impossible = _s_chi2(counts, probs)
    return not impossible and statistic <= threshold


def _s_describe(outcome) -> str:
    return str(list(outcome)) if isinstance(outcome, tuple) else str(outcome)


def _s_compare(counts: dict, probs: dict, what: str, mistakes=(), advice: str = ""):
    """Fail unless the counts fit the probabilities (chi-square at 1 - 1e-6); name a known mistake they fit."""
    statistic, threshold, impossible = _s_chi2(counts, probs)
    n = sum(counts.values())
    if not impossible and statistic <= threshold:
        return
    for wrong, diagnosis in mistakes:
        if _s_fits(counts, wrong):
            expect.fail(f"{what} is wrong: {diagnosis}")
    if impossible:
        outcome = impossible[0]
        expect.fail(
            f"{what}: the outcome {_s_describe(outcome)} came {counts[outcome]} times in {n:,} draws, but its "
            f"probability is exactly 0. {advice}".strip()
        )
    worst = max(probs, key=lambda o: abs(counts.get(o, 0) - n * probs[o]) / math.sqrt(n * probs[o] + 1e-12))
    expect.fail(
        f"{what}: the frequencies of {n:,} draws do not follow the expected distribution (chi-square statistic "
        f"{statistic:.0f}, above {threshold:.0f}, which a right answer exceeds with probability 1e-6); for example "
        f"{_s_describe(worst)} came {counts.get(worst, 0)} times, expected about {n * probs[worst]:.0f}. "
        f"{advice}".strip()
    )


# --- Exercise: the acceptance rule ----------------------------------------------------------------------------------


def _s_rule(p, q, drafted, *, accept=None, replace=None, bonus_row=None, keep_rejected=False):
    """The exact distribution (outcome tuple -> probability, float64) of the rule's output for fixed ``drafted``;
    the keywords give known mistakes' versions of it."""
    p, q = p.double(), q.double()
    k = len(drafted)
    accept = accept or (lambda px, qx: min(1.0, px / qx) if qx > 0 else float(px > 0))
    replace = replace or (lambda pi, qi: (pi - qi).clamp(min=0))
    out, reach = {}, 1.0
    for i, x in enumerate(drafted):
        a = accept(float(p[i, x]), float(q[i, x]))
        weights = replace(p[i], q[i])
        if reach * (1 - a) > 0 and float(weights.sum()) > 0:
            for y in range(p.shape[1]):
                if weights[y] > 0:
                    head = tuple(drafted[: i + 1]) if keep_rejected else tuple(drafted[:i])
                    key = (*head, y)
                    out[key] = out.get(key, 0.0) + reach * (1 - a) * float(weights[y] / weights.sum())
        reach *= a
    last = p[k if bonus_row is None else bonus_row]
    for y in range(p.shape[1]):
        if reach > 0 and last[y] > 0:
            key = (*drafted, y)
            out[key] = out.get(key, 0.0) + reach * float(last[y])
    return out


def _s_rule_mistakes(p, q, drafted):
    k = len(drafted)
    mistakes = [
        (
            _s_rule(p, q, drafted, replace=lambda pi, qi: pi),
            "at a rejection the replacement is drawn from the target's distribution p; draw it from the residual "
            "max(0, p - q), normalised (p alone would count again the mass that acceptance already gave)",
        ),
        (
            _s_rule(p, q, drafted, replace=lambda pi, qi: (qi - pi).clamp(min=0)),
            "the residual is max(0, q - p); it is max(0, p - q), normalised: the tokens the draft proposes too rarely",
        ),
        (
            _s_rule(p, q, drafted, accept=lambda px, qx: min(1.0, qx / px) if px > 0 else 0.0),
            "a drafted token is accepted with probability min(1, q / p); it is min(1, p / q)",
        ),
        (
            _s_rule(p, q, drafted, accept=lambda px, qx: px),
            "a drafted token is accepted with probability p(x); it is min(1, p(x) / q(x))",
        ),
        (
            _s_rule(p, q, drafted, accept=lambda px, qx: 1.0 - min(1.0, px / qx) if qx > 0 else 0.0),
            "the test is reversed: accept when u < min(1, p / q), u uniform on [0, 1)",
        ),
        (
            _s_rule(p, q, drafted, keep_rejected=True),
            "the rejected drafted token is kept: the output is the accepted drafts, then the replacement",
        ),
    ]
    if k:
        mistakes.append(
            (
                _s_rule(p, q, drafted, bonus_row=k - 1),
                f"the bonus token is drawn from target_probs[{k - 1}]; after the k accepted drafts it comes from "
                f"target_probs[k] = target_probs[{k}], the target's distribution after the last drafted token",
            )
        )
    return mistakes


def _s_probs(shape, seed, scale=1.5):
    return torch.softmax(_s_randn(shape, seed, scale), dim=-1)


def _s_emitted(value, what, k, drafted=None):
    got = expect.tensor(value, what)
    expect.that(got.dim() == 1, f"{what} has shape {list(got.shape)}; return a 1-D tensor of the emitted tokens")
    expect.that(got.dtype == torch.long, f"{what} has dtype {got.dtype}; token ids are torch.long")
    expect.that(
        1 <= got.numel() <= k + 1,
        f"{what} returned {got.numel()} tokens; a round emits 1 to k + 1 = {k + 1}: the accepted drafts, then one "
        "token (the replacement at the first rejection, or the bonus token when all k are accepted)",
    )
    if drafted is not None:
        n = got.numel() - 1
        expect.that(
            got[:n].tolist() == drafted[:n].tolist(),
            f"{what} returned {got.tolist()}, which does not start with drafted tokens ({drafted.tolist()}): "
            "the emitted tokens are the accepted drafts, in order, then one more",
        )
    return got.tolist()


_S_CHANGED = (
    "speculative_accept changed its inputs (target_probs, draft_probs or drafted) in place; compute the residual "
    "in a new tensor: the caller goes on with them"
)


def _s_accept_calls(impl, target, draft, drafted, seeds, what, situation):
    got = impl.call(spec_accept_calls, target, draft, drafted, seeds)
    if got["error"]:
        expect.fail(f"{what} raised {got['error']}. {situation}")
    expect.that(got["unchanged"], _S_CHANGED)
    return got["outputs"]


def _s_one_hot(token, vocab):
    return F.one_hot(torch.tensor(token), vocab).float()


@SPEC_ACCEPT.visible
def test_accept_everything_when_draft_is_target(impl):
    "draft_probs = target_probs: every drafted token accepted, whatever the draws, then the bonus from target_probs[k]"
    for seed, (k, vocab) in enumerate(((3, 6), (1, 4), (5, 8))):
        target = _s_probs((k + 1, vocab), 10 + seed)
        bonus = (seed * 3 + 1) % vocab
        target[k] = _s_one_hot(bonus, vocab)  # the bonus token is known
        target[k - 1] = _s_one_hot((bonus + 1) % vocab, vocab)
        drafted = torch.multinomial(target[:k], 1, generator=_s_gen(20 + seed)).flatten()
        what = f"speculative_accept with draft_probs = target_probs (k = {k}, V = {vocab})"
        situation = (
            "Here p = q, so every drafted token is accepted (min(1, p / q) = 1) and a rejection never happens: "
            "accept when u < p / q (u uniform on [0, 1)), so that no residual (all zeros here) is ever drawn from"
        )
        for emitted in _s_accept_calls(impl, target, target[:k].clone(), drafted, list(range(10)), what, situation):
            tokens = _s_emitted(emitted, what, k, drafted)
            expect.that(
                len(tokens) == k + 1,
                f"{what} returned {tokens} for drafted {drafted.tolist()}: when p = q every drafted token is "
                "accepted (min(1, p / q) = 1), and then the round adds the bonus token, drawn from "
                f"target_probs[k]: {k + 1} tokens. Did you forget the bonus token?",
            )
            expect.that(
                tokens[-1] == bonus,
                f"{what}: the bonus token is {tokens[-1]}; target_probs[k] puts all its mass on {bonus}: draw the "
                "bonus from target_probs[k], the target's distribution after the last drafted token",
            )


def _s_rejection_case(k, vocab, j, seed):
    """Drafts 0..j-1 with q = p (accepted), draft j of target probability 0 whose residual is one-hot."""
    target = _s_probs((k + 1, vocab), 30 + seed)
    draft = target[:k].clone()
    x, right, other = (seed % vocab), (seed + 1) % vocab, (seed + 2) % vocab
    target[j] = torch.zeros(vocab)
    target[j, right], target[j, other] = 0.5, 0.5
    draft[j] = torch.zeros(vocab)
    draft[j, x], draft[j, other] = 0.5, 0.5
    drafted = torch.multinomial(draft, 1, generator=_s_gen(40 + seed)).flatten()
    drafted[j] = x
    return target, draft, drafted, right


@SPEC_ACCEPT.visible
def test_accept_rejects_a_token_the_target_never_picks(impl):
    "a drafted token of target probability 0 is always rejected; its replacement comes from max(0, p - q) (one-hot)"
    for seed, (k, vocab, j) in enumerate(((3, 5, 1), (2, 4, 0), (4, 6, 3))):
        target, draft, drafted, right = _s_rejection_case(k, vocab, j, seed)
        what = f"speculative_accept (k = {k}, drafted {drafted.tolist()})"
        residual = (target[j] - draft[j]).clamp(min=0)
        situation = (
            f"Drafted token {j} has target probability 0, so it is always rejected; the ones before it always accepted."
        )
        for emitted in _s_accept_calls(impl, target, draft, drafted, list(range(20)), what, situation):
            tokens = _s_emitted(emitted, what, k, drafted)
            expect.that(
                len(tokens) >= j + 1,
                f"{what} returned {tokens}: drafted token {j} is {int(drafted[j])}, but it was rejected before; "
                f"the drafts before it have draft_probs = target_probs, so they are always accepted",
            )
            expect.that(
                len(tokens) == j + 1,
                f"{what} returned {tokens}: it accepted drafted token {j} ({int(drafted[j])}), which the target "
                f"gives probability target_probs[{j}, {int(drafted[j])}] = 0, so the target always rejects it "
                "(accept with probability min(1, p / q) = 0); the round ends at the first rejection",
            )
            expect.that(
                tokens[j] == right,
                f"{what} replaced the rejected token by {tokens[j]}; the residual max(0, p - q) = "
                f"{residual.tolist()} leaves only token {right}: draw the replacement from the residual, "
                "normalised, not from p or q",
            )


def _s_enumeration_case(impl, target, draft, drafted, seed, what):
    got = impl.call(spec_accept_counts, target, draft, drafted, _S_ACCEPT_DRAWS, seed)
    if got["error"]:
        expect.fail(f"{what}: {got['error']}")
    counts = {tuple(o): c for o, c in got["counts"]}
    k = len(drafted)
    for outcome in counts:
        expect.that(
            1 <= len(outcome) <= k + 1 and list(outcome[:-1]) == drafted.tolist()[: len(outcome) - 1],
            f"{what} returned {list(outcome)}; expected the accepted drafts of {drafted.tolist()}, then one token",
        )
    expected = _s_rule(target, draft, drafted.tolist())
    _s_compare(
        counts,
        expected,
        f"{what}, {_S_ACCEPT_DRAWS:,} calls",
        _s_rule_mistakes(target, draft, drafted.tolist()),
        "Accept drafted token i with probability min(1, p_i(x) / q_i(x)); at the first rejection draw from "
        "max(0, p_i - q_i) normalised and stop; after k acceptances draw the bonus from target_probs[k].",
    )


@SPEC_ACCEPT.visible
def test_accept_output_distribution_is_the_rules(impl):
    "4,000 calls (k = 2, V = 4): the frequencies of the emitted sequences match the rule's exact distribution"
    target = torch.tensor([[0.5, 0.2, 0.2, 0.1], [0.1, 0.3, 0.4, 0.2], [0.25, 0.25, 0.3, 0.2]])
    draft = torch.tensor([[0.2, 0.6, 0.1, 0.1], [0.4, 0.1, 0.3, 0.2]])
    _s_enumeration_case(impl, target, draft, torch.tensor([1, 0]), 0, "speculative_accept (k = 2, drafted [1, 0])")


@SPEC_ACCEPT.hidden
def test_accept_more_distributions(impl):
    "other k (0, 1, 3), vocabularies and random distributions: frequencies against the rule's exact distribution"
    for seed, (k, vocab) in enumerate(((0, 4), (1, 3), (3, 3))):
        target, draft = _s_probs((k + 1, vocab), 60 + seed, 1.0), _s_probs((k, vocab), 70 + seed, 1.0)
        drafted = torch.multinomial(draft, 1, generator=_s_gen(80 + seed)).flatten() if k else torch.zeros(0).long()
        what = f"speculative_accept (k = {k}, V = {vocab}, drafted {drafted.tolist()})"
        _s_enumeration_case(impl, target, draft, drafted, 1 + seed, what)


@SPEC_ACCEPT.hidden
def test_accept_first_token_follows_the_target(impl):
    "drafts drawn from the draft's distributions: the first emitted token is distributed as target_probs[0]"
    for seed, (k, vocab) in enumerate(((3, 5), (1, 6))):
        target, draft = _s_probs((k + 1, vocab), 90 + seed, 1.2), _s_probs((k, vocab), 95 + seed, 1.2)
        got = impl.call(spec_first_token_counts, target, draft, _S_ACCEPT_DRAWS, 10 + seed)
        if got["error"]:
            expect.that(got["error"] != _S_CHANGED, _S_CHANGED)
            expect.fail(f"speculative_accept: {got['error']}")
        counts = dict(enumerate(got["counts"]))
        expected = {y: float(target[0, y]) for y in range(vocab)}
        first_mistakes = [
            (
                {y: float(draft[0, y]) for y in range(vocab)},
                "the first emitted token follows the draft's distribution: a drafted token must be accepted with "
                "probability min(1, p / q) only, else replaced from the residual",
            )
        ]
        no_residual = {
            y: float(
                torch.minimum(target[0], draft[0])[y] + (1 - torch.minimum(target[0], draft[0]).sum()) * target[0, y]
            )
            for y in range(vocab)
        }
        first_mistakes.append(
            (
                no_residual,
                "at a rejection the replacement is drawn from p; draw it from the residual max(0, p - q), normalised",
            )
        )
        _s_compare(
            counts,
            expected,
            f"the first token speculative_accept emits (k = {k}, V = {vocab}, drafts drawn from draft_probs)",
            first_mistakes,
            "Whatever the draft, the first token must follow target_probs[0] exactly.",
        )


@SPEC_ACCEPT.hidden
def test_accept_draws_only_from_the_generator(impl):
    "generators seeded alike give the same tokens, whatever torch's global seed; the inputs are left unchanged"
    target, draft = _s_probs((4, 5), 100, 1.0), _s_probs((3, 5), 101, 1.0)
    drafted = torch.tensor([2, 0, 4])
    got = impl.call(spec_accept_repeatability, target, draft, drafted)
    expect.that(
        got["same"],
        "speculative_accept drew other tokens from generators seeded alike (with torch's global seed changed "
        "between the calls): draw every random number from `generator` (torch.rand(..., generator=generator), "
        "torch.multinomial(..., generator=generator))",
    )
    expect.that(
        got["unchanged"],
        "speculative_accept changed its inputs (target_probs, draft_probs or drafted) in place; compute the "
        "residual in a new tensor",
    )


# --- Exercise: rolling a cache back -----------------------------------------------------------------------------------


def _s_cache_plan(seed, layers=3, lengths=(4, 3), shape=(2, 2, 5)):
    b, h, d = shape
    return [
        [
            (_s_randn((b, h, n, d), seed + 10 * i + layer), _s_randn((b, h, n, d), seed + 10 * i + layer + 5))
            for layer in range(layers)
        ]
        for i, n in enumerate(lengths)
    ]


def _s_rollback_case(impl, plan, length, what, none_layers=()):
    got = impl.call(spec_rolled_back, plan, length, list(none_layers))
    if got["raised"]:
        expect.fail(f"{what} raised {got['raised']}")
    layers = len(plan[0])
    full_k = [torch.cat([step[layer][0] for step in plan], dim=2) for layer in range(layers)]
    full_v = [torch.cat([step[layer][1] for step in plan], dim=2) for layer in range(layers)]
    total = full_k[0].shape[2]
    expect.that(
        got["changed"] or length == total,
        f"{what} left the cache it was given unchanged ({total} positions): cut its keys and values in place "
        "(cache.keys[i] = ..., cache.values[i] = ...), since the caller goes on with that cache",
    )
    for layer in range(layers):
        if layer in none_layers:
            expect.that(
                got["keys"][layer] is None and got["values"][layer] is None,
                f"{what}: layer {layer} held None (it was never updated); leave it None",
            )
            continue
        for name, full in (("keys", full_k), ("values", full_v)):
            value = got[name][layer]
            expect.that(value is not None, f"{what}: {name}[{layer}] is None; keep its first {length} positions")
            value = expect.tensor(value, f"{what}: {name}[{layer}]")
            if list(value.shape) == list(full[layer].shape) and length < total:
                expect.fail(
                    f"{what}: layer {layer}'s {name} still hold all {total} positions; cut every layer's keys "
                    "and values to their first `length` positions"
                )
            expected = full[layer][:, :, :length]
            if (
                list(value.shape) == list(expected.shape)
                and length
                and torch.equal(value, full[layer][:, :, total - length :])
                and length < total
            ):
                expect.fail(
                    f"{what}: {name}[{layer}] holds the LAST {length} positions; keep the first {length} "
                    "([:, :, :length]): the prefix that was accepted"
                )
            expect.that(
                list(value.shape) == list(expected.shape),
                f"{what}: {name}[{layer}] has shape {list(value.shape)}, expected {list(expected.shape)}: cut the "
                "sequence axis, dim 2 of [batch, kv_heads, length, head_dim]",
            )
            expect.that(
                torch.equal(value, expected),
                f"{what}: {name}[{layer}] differs from the first {length} positions it held",
            )
    expect.that(got["length"] == length, f"{what}: cache.length is {got['length']} afterwards, expected {length}")
    after = got["after_update"]
    expect.that(
        after == length + 2,
        f"{what}: after rolling back, an update of 2 positions gave a cache of {after} positions, expected {length + 2}",
    )


@SPEC_ROLLBACK.visible
def test_rollback_cuts_every_layer(impl):
    "a 3-layer cache of 7 positions rolled back to 4: every layer's keys and values are their first 4 positions"
    _s_rollback_case(impl, _s_cache_plan(0), 4, "rollback(cache, 4) of a cache of 7 positions")


@SPEC_ROLLBACK.hidden
def test_rollback_edge_lengths(impl):
    "back to the current length (nothing cut), to 1, to 0; a layer that holds None stays None; other shapes"
    plan = _s_cache_plan(20, layers=2, lengths=(1, 1, 3), shape=(1, 4, 3))
    for length in (5, 1, 0):
        _s_rollback_case(impl, plan, length, f"rollback(cache, {length}) of a cache of 5 positions")
    plan = _s_cache_plan(30, layers=3, lengths=(6,), shape=(3, 1, 2))
    _s_rollback_case(impl, plan, 2, "rollback(cache, 2) where layer 2 holds None", none_layers=(2,))


@SPEC_ROLLBACK.hidden
def test_rollback_refuses_impossible_lengths(impl):
    "rollback beyond the cache's length, or to a negative length, raises ValueError"
    plan = _s_cache_plan(40, layers=2, lengths=(3,))
    for length in (4, -1):
        got = impl.call(spec_rolled_back, plan, length, [])
        expect.that(
            str(got["raised"]).startswith("ValueError"),
            f"rollback(cache, {length}) of a cache of 3 positions "
            + (f"raised {got['raised']}" if got["raised"] else "did not raise")
            + "; raise ValueError: a cache can only be cut to 0 <= length <= cache.length",
        )


# --- Exercise: speculative decoding ------------------------------------------------------------------------------------


def _s_table(seed, vocab, scale=2.0, rows=997):
    return _s_randn((rows, vocab), seed, scale)


def _s_table_greedy(table, prompt, max_new_tokens):
    oracle = _s_toy.PrefixTableModel(table)
    tokens = list(prompt)
    for _ in range(max_new_tokens):
        tokens.append(int(oracle.next_logits(tokens).argmax()))
    return tokens


def _s_check_observed(got, what, output, prompt_length, k):
    """What the models were fed and what their caches held, call by call."""
    calls = got["calls"]
    target_calls = [c for c in calls if c["model"] == "target"]
    expect.that(bool(target_calls) or len(output) == prompt_length, f"{what} never called the target")
    for model in ("target", "draft"):
        bare = [c for c in calls if c["model"] == model and not c["cache"]]
        expect.that(
            not bare,
            f"{what} called the {model} without a cache: call {model}(tokens, cache={model}_cache) with a "
            f"KVCache(len({model}.blocks)) kept across the rounds",
        )
    round_starts = True  # the next draft call starts a round
    for index, call in enumerate(calls):
        model = call["model"]
        lengths = call["lengths"]
        expect.that(
            len(set(lengths)) <= 1,
            f"{what}: when the {model} was called, the layers of its cache held {lengths} positions: roll every "
            "layer back to the same length",
        )
        stored = call["stored"]
        check = model == "target" or round_starts
        if check and stored is not None and stored != output[: len(stored)]:
            accepted = next((i for i, (a, b) in enumerate(zip(stored, output, strict=False)) if a != b), len(output))
            expect.fail(
                f"{what}: when the {model} was called (its call {sum(c['model'] == model for c in calls[:index]) + 1}"
                f"), its cache held {len(stored)} tokens {stored}, but only the first {accepted} are the output's "
                f"({output[: len(stored)]}): the cache was not rolled back after a rejection, so it holds keys "
                f"and values of rejected tokens. After each round cut both caches to the accepted tokens "
                "(rollback(cache, length))"
            )
        first_call = not any(c["model"] == model for c in calls[:index])
        if model == "draft" and not first_call:
            expect.that(
                call["fed"] <= k + 1,
                f"{what}: the draft was fed {call['fed']} tokens in one call (its cache held "
                f"{lengths[0] if lengths else 0}): keep its cache from round to round and feed it only what the cache "
                "lacks (after its first call, which holds the prompt)",
            )
        if model == "target":
            round_starts = True
            if call is not target_calls[0]:
                expect.that(
                    call["fed"] <= k + 1,
                    f"{what}: the target was fed {call['fed']} tokens in one forward (its cache held "
                    f"{lengths[0] if lengths else 0}); after the first forward feed it only what its cache lacks, "
                    f"at most k + 1 = {k + 1} tokens (the last accepted token and the drafted ones)",
                )
        else:
            round_starts = False
    return target_calls


def _s_output(value, what, prompt, max_new_tokens):
    got = expect.tensor(value, what)
    expect.that(
        got.dim() == 1, f"{what} has shape {list(got.shape)}; return one 1-D tensor, the prompt then the new tokens"
    )
    expect.that(got.dtype == torch.long, f"{what} has dtype {got.dtype}; token ids are torch.long")
    tokens = got.tolist()
    expect.that(
        tokens[: len(prompt)] == list(prompt),
        f"{what} returned {tokens}, which does not start with the prompt {list(prompt)}",
    )
    expect.that(
        len(tokens) == len(prompt) + max_new_tokens,
        f"{what} returned {len(tokens) - len(prompt)} new tokens; exactly max_new_tokens = {max_new_tokens} (cut "
        "the last round's tokens when they go beyond)",
    )
    return tokens


def _s_raised(got, what, expected, prompt_length, k):
    """When the student's code raised: first what the models were fed until then, judged against the right output
    (a cache that kept rejected tokens makes the next round's shapes wrong, and is the mistake to name), then the
    error itself."""
    if got.get("raised"):
        _s_check_observed(got, what, expected, prompt_length, k)
        expect.fail(f"{what} raised {got['raised']}")


def _s_greedy_observed(impl, target_spec, draft_spec, prompt, k, max_new_tokens, expected, what):
    """The student's greedy speculative_generate on these models, with every model call observed: returns what the
    adapter saw, the tokens, and the target's calls (``expected``, the right output, judges a run that raised)."""
    got = impl.call(spec_generate_observed, target_spec, draft_spec, torch.tensor(prompt), k, max_new_tokens, 0.0, None)
    _s_raised(got, what, expected, len(prompt), k)
    tokens = _s_output(got["output"], what, prompt, max_new_tokens)
    return got, tokens, _s_check_observed(got, what, tokens, len(prompt), k)


def _s_greedy_table_case(impl, seed, prompt, k, max_new_tokens, vocab=10, target_layers=2, draft_layers=2, same=False):
    target = _s_table(seed, vocab)
    draft = target.clone() if same else target + _s_randn(tuple(target.shape), seed + 1, 1.5)
    what = f"speculative_generate(target, draft, {prompt}, k={k}, max_new_tokens={max_new_tokens})"
    expected = _s_table_greedy(target, prompt, max_new_tokens)
    got, tokens, target_calls = _s_greedy_observed(
        impl,
        {"table": target, "layers": target_layers},
        {"table": draft, "layers": draft_layers},
        prompt,
        k,
        max_new_tokens,
        expected,
        what,
    )
    if tokens != expected:
        first = next(i for i, (a, b) in enumerate(zip(tokens, expected, strict=True)) if a != b)
        expect.fail(
            f"{what} returned {tokens}; the target's own greedy decoding gives {expected} (first difference at "
            f"position {first}): with temperature 0 speculative decoding changes nothing. Check which of the "
            "target's logits score which drafted token: the target's logits at the position of token t give the "
            "distribution of token t + 1"
        )
    return got, target_calls


@SPEC_GENERATE.visible
def test_generate_greedy_equals_the_targets_greedy(impl):
    "temperature 0 on lookup-table models: the target's own greedy tokens; caches hold only accepted tokens"
    _s_greedy_table_case(impl, 0, [3, 1, 4], 3, 12)
    _s_greedy_table_case(impl, 10, [7], 2, 9)


@SPEC_GENERATE.visible
def test_generate_one_target_forward_per_round(impl):
    "a draft that equals the target (every draft accepted): about max_new_tokens / (k + 1) target forwards"
    k, n = 3, 20
    got, target_calls = _s_greedy_table_case(impl, 20, [5, 2], k, n, same=True)
    allowed = math.ceil(n / (k + 1)) + 1
    expect.that(
        len(target_calls) <= allowed,
        f"speculative_generate(k={k}, max_new_tokens={n}) with a draft that proposes exactly the target's tokens "
        f"ran the target {len(target_calls)} times; every drafted token is accepted, so each round's one target "
        f"forward verifies all k drafts and adds the bonus token: at most ceil({n} / (k + 1)) + 1 = {allowed} "
        "forwards (one forward per round, and the bonus token kept)",
    )


def _s_llama_pair(seed):
    """Tiny random Llama target (2 layers) and draft (1 layer) in HF and in the course's names, and HF's greedy."""
    from autograder.reference.hf_llama import course_state, hf_config, transformers_quiet

    transformers = transformers_quiet()
    fields = {
        "vocab_size": 40,
        "d_model": 32,
        "n_layers": 2,
        "n_heads": 4,
        "n_kv_heads": 2,
        "d_ff": 48,
        "max_seq_len": 64,
    }
    draft_fields = dict(fields, n_layers=1)
    models, states = [], []
    for i, f in enumerate((fields, draft_fields)):
        hf = transformers.LlamaForCausalLM(hf_config(f)).eval()
        with torch.no_grad():
            for j, p in enumerate(hf.parameters()):
                if p.dim() > 1:
                    p.copy_(_s_randn(tuple(p.shape), 1000 * (seed + 1) + 100 * i + j, 0.3))
        hf.generation_config.eos_token_id = None
        hf.generation_config.pad_token_id = 0
        models.append(hf)
        states.append(course_state(hf.state_dict(), f))
    return models, (fields, draft_fields), states


@torch.no_grad()
def _s_llama_greedy(fields, state, prompt, max_new_tokens):
    """Greedy decoding recomputed from the whole prefix (no cache), and the smallest top-2 margin on its path."""
    from autograder.reference.configs import DecoderConfig
    from autograder.reference.decoders import LlamaDecoder

    model = LlamaDecoder(DecoderConfig(**fields)).eval()
    model.load_state_dict(state)
    tokens, margin = list(prompt), math.inf
    for _ in range(max_new_tokens):
        logits = model(torch.tensor([tokens]))[0, -1]
        top = logits.topk(2).values
        margin = min(margin, float(top[0] - top[1]))
        tokens.append(int(logits.argmax()))
    return tokens, margin


def _s_llama_case(impl, seed, prompt, k, max_new_tokens):
    (hf_target, hf_draft), (fields, draft_fields), (state, draft_state) = _s_llama_pair(seed)
    expected, margin = _s_llama_greedy(fields, state, prompt, max_new_tokens)
    expect.that(margin > 1e-3, f"internal: a near tie on the greedy path (margin {margin:.2g})")
    with torch.no_grad():
        hf = hf_target.generate(
            torch.tensor([prompt]), assistant_model=hf_draft, do_sample=False, max_new_tokens=max_new_tokens
        )[0].tolist()
    expect.that(hf == expected, f"internal: Hugging Face's assisted generation gave {hf}, recomputation {expected}")
    what = f"speculative_generate(k={k}, max_new_tokens={max_new_tokens}) on tiny random Llama models"
    _, tokens, _ = _s_greedy_observed(
        impl,
        {"fields": fields, "state": state},
        {"fields": draft_fields, "state": draft_state},
        prompt,
        k,
        max_new_tokens,
        expected,
        what,
    )
    expect.that(
        tokens == hf,
        f"{what} returned {tokens}; Hugging Face's generate(assistant_model=draft) and the target's own greedy "
        f"decoding give {hf}",
    )


@SPEC_GENERATE.visible
def test_generate_equals_hugging_face_assisted_generation(impl):
    "tiny random Llama target and draft: the tokens of Hugging Face's generate(assistant_model=draft), greedy"
    _s_llama_case(impl, 0, [3, 17, 8, 25], 3, 16)


@SPEC_GENERATE.hidden
def test_generate_llama_more_cases(impl):
    "Llama models: k = 1 and 5, a one-token prompt"
    _s_llama_case(impl, 1, [5], 1, 10)
    _s_llama_case(impl, 2, [9, 2, 30], 5, 14)


@SPEC_GENERATE.hidden
def test_generate_edge_cases(impl):
    "max_new_tokens 0 and 1; k = 0; k larger than max_new_tokens; a draft with 1 layer and a target with 3"
    _s_greedy_table_case(impl, 30, [2, 2], 3, 0)
    _s_greedy_table_case(impl, 31, [4], 3, 1)
    _s_greedy_table_case(impl, 32, [1, 8, 3], 6, 4)
    _s_greedy_table_case(impl, 34, [3], 0, 5)
    _s_greedy_table_case(impl, 33, [6, 0], 2, 11, target_layers=3, draft_layers=1)


def _s_sequence_distribution(table, prompt, n, temperature):
    oracle = _s_toy.PrefixTableModel(table)
    vocab = table.shape[1]
    out = {}
    for tail in itertools.product(range(vocab), repeat=n):
        prob, tokens = 1.0, list(prompt)
        for y in tail:
            prob *= float(torch.softmax(oracle.next_logits(tokens).double() / temperature, -1)[y])
            tokens.append(y)
        out[tail] = prob
    return out


def _s_sampling_case(impl, seed, k, temperature):
    vocab, n, prompt = 3, 3, [1, 2]
    target = _s_table(seed, vocab, 1.0)
    draft = _s_table(seed + 1, vocab, 1.0)
    got = impl.call(
        spec_generate_counts,
        {"table": target, "layers": 2},
        {"table": draft, "layers": 2},
        torch.tensor(prompt),
        k,
        n,
        temperature,
        _S_GENERATE_DRAWS,
        seed,
    )
    what = f"speculative_generate(k={k}, max_new_tokens={n}, temperature={temperature}) on lookup-table models (V = 3)"
    if got["error"]:
        expect.fail(f"{what}: {got['error']}")
    counts = {tuple(o): c for o, c in got["counts"]}
    _s_compare(
        counts,
        _s_sequence_distribution(target, prompt, n, temperature),
        f"the new tokens of {what}, {_S_GENERATE_DRAWS:,} calls",
        [
            (
                _s_sequence_distribution(draft, prompt, n, temperature),
                "the tokens follow the draft's distribution, not the target's: every drafted token must go "
                "through speculative_accept with the target's and the draft's distributions",
            )
        ],
        "Draw each drafted token from the draft's distribution next_token_probs(logits, temperature) with "
        "torch.multinomial(q, 1, generator=generator), give speculative_accept the target's distributions at the "
        "k + 1 positions (after the last accepted token and after each drafted one) and the draft's at the k "
        "drafts, both at the same temperature.",
    )


@SPEC_GENERATE.hidden
def test_generate_samples_the_targets_distribution(impl):
    "temperature 0.8, k = 2: the next three tokens of 1,500 calls follow the target's distribution (chi-square)"
    _s_sampling_case(impl, 40, 2, 0.8)


@SPEC_GENERATE.hidden
def test_generate_draws_only_from_the_generator(impl):
    "with sampling, generators seeded alike give the same tokens, whatever torch's global seed"
    target, draft = _s_table(50, 6, 1.0), _s_table(51, 6, 1.0)
    got = impl.call(
        spec_generate_repeatability,
        {"table": target, "layers": 2},
        {"table": draft, "layers": 2},
        torch.tensor([1]),
        2,
        12,
    )
    expect.that(
        got["same"],
        "speculative_generate drew other tokens from generators seeded alike (torch's global seed changed between "
        "the calls): pass `generator` to every draw (torch.multinomial(..., generator=generator) and "
        "speculative_accept(..., generator))",
    )


# --- Adapters (section 2) ---------------------------------------------------------------------------------------------


@adapter
def spec_accept_calls(ns, target_probs, draft_probs, drafted, seeds: list):
    """The student's speculative_accept once per seed, each with a generator of that seed (and fresh inputs): the
    outputs, whether the inputs were left as they were, and the first error raised, if any."""
    accept = need(ns, "speculative_accept")
    outputs, unchanged = [], True
    for s in seeds:
        inputs = [target_probs.clone(), draft_probs.clone(), drafted.clone()]
        try:
            outputs.append(accept(*inputs, torch.Generator().manual_seed(s)))
        except NotImplementedError:
            raise
        except Exception as error:  # noqa: BLE001
            return {"outputs": outputs, "unchanged": unchanged, "error": f"{type(error).__name__}: {error}"}
        unchanged &= all(torch.equal(a, b) for a, b in zip(inputs, (target_probs, draft_probs, drafted), strict=True))
    return {"outputs": outputs, "unchanged": unchanged, "error": None}


def _s_count_outcomes(accept, target_probs, draft_probs, drafted, draws, generator):
    counts, originals = {}, [target_probs.clone(), draft_probs.clone(), drafted.clone()]
    for _ in range(draws):
        out = accept(target_probs, draft_probs, drafted, generator)
        if not all(torch.equal(a, b) for a, b in zip(originals, (target_probs, draft_probs, drafted), strict=True)):
            return None, _S_CHANGED
        if not isinstance(out, torch.Tensor) or out.dim() != 1:
            return None, f"returned {type(out).__name__} {list(getattr(out, 'shape', []))}; expected a 1-D tensor"
        key = tuple(int(t) for t in out)
        counts[key] = counts.get(key, 0) + 1
    return counts, None


@adapter
def spec_accept_counts(ns, target_probs, draft_probs, drafted, draws: int, seed: int):
    """How often each output came in ``draws`` calls with fixed inputs and one generator."""
    counts, error = _s_count_outcomes(
        need(ns, "speculative_accept"), target_probs, draft_probs, drafted, draws, torch.Generator().manual_seed(seed)
    )
    return {"counts": [[list(o), c] for o, c in (counts or {}).items()], "error": error}


@adapter
def spec_first_token_counts(ns, target_probs, draft_probs, draws: int, seed: int):
    """The first emitted token's counts, the drafts drawn here from draft_probs (a generator of their own)."""
    accept = need(ns, "speculative_accept")
    drafts, generator = torch.Generator().manual_seed(seed + 1000), torch.Generator().manual_seed(seed)
    counts, originals = [0] * target_probs.shape[1], (target_probs.clone(), draft_probs.clone())
    for _ in range(draws):
        drafted = torch.multinomial(draft_probs, 1, generator=drafts).flatten()
        out = accept(target_probs, draft_probs, drafted, generator)
        if not (torch.equal(target_probs, originals[0]) and torch.equal(draft_probs, originals[1])):
            return {"counts": None, "error": _S_CHANGED}
        if not isinstance(out, torch.Tensor) or out.dim() != 1 or out.numel() == 0:
            return {"counts": None, "error": f"returned {type(out).__name__}; expected a 1-D tensor of tokens"}
        counts[int(out[0])] += 1
    return {"counts": counts, "error": None}


@adapter
def spec_accept_repeatability(ns, target_probs, draft_probs, drafted):
    accept = need(ns, "speculative_accept")
    inputs = [target_probs.clone(), draft_probs.clone(), drafted.clone()]
    runs = []
    for global_seed in (1, 2):
        torch.manual_seed(global_seed)
        generator = torch.Generator().manual_seed(7)
        runs.append([accept(*inputs, generator).tolist() for _ in range(30)])
    unchanged = all(torch.equal(a, b) for a, b in zip(inputs, (target_probs, draft_probs, drafted), strict=True))
    return {"same": runs[0] == runs[1], "unchanged": unchanged}


@adapter
def spec_rolled_back(ns, plan: list, length: int, none_layers: list):
    """A course KVCache filled by ``plan`` (per update, per layer: k, v), the student's rollback(cache, length),
    then what the same cache holds, its length, and its length after one more update of 2 positions."""
    layers = len(plan[0])
    cache = _s_kv_cache.KVCache(layers)
    for step in plan:
        for layer, (k, v) in enumerate(step):
            if layer not in none_layers:
                cache.update(layer, k, v)
    before = [k for k in cache.keys]
    try:
        need(ns, "rollback")(cache, length)
    except NotImplementedError:
        raise
    except Exception as error:  # noqa: BLE001
        return {"raised": f"{type(error).__name__}: {error}"}
    result = {
        "raised": None,
        "keys": [None if k is None else k.clone() for k in cache.keys],
        "values": [None if v is None else v.clone() for v in cache.values],
        "changed": any(a is not b for a, b in zip(before, cache.keys, strict=False)),
        "length": cache.length,
    }
    k, v = plan[0][0]
    extra = (k[:, :, :1].repeat(1, 1, 2, 1), v[:, :, :1].repeat(1, 1, 2, 1))
    cache.update(0, *extra)
    result["after_update"] = cache.length
    return result


class _STableModel(nn.Module):
    """A decoder with a KV cache whose logits are known exactly: PrefixTableModel's table row of the hash of the
    prefix. Layer i of the cache stores the tokens fed (keys and values [1, 1, T, 1]); the logits come from what
    the LAST layer holds, so a layer that was not rolled back changes them."""

    def __init__(self, table, layers):
        super().__init__()
        self.register_buffer("table", table.clone())
        self.blocks = nn.ModuleList(nn.Identity() for _ in range(layers))

    def forward(self, tokens, cache=None):
        if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.shape[0] != 1:
            raise ValueError(f"the model takes tokens of shape [1, new], got {list(getattr(tokens, 'shape', []))}")
        if cache is None:
            context = tokens[0].tolist()
        else:
            stored = tokens.float()[:, None, :, None]
            for layer in range(len(self.blocks)):
                keys, _ = cache.update(layer, stored, stored)
            context = keys[0, 0, :, 0].long().tolist()
        rows, h = [], 0
        for token in context:
            h = (h * 31 + token + 1) % self.table.shape[0]
            rows.append(h)
        return self.table[rows[-tokens.shape[1] :]][None]


def _s_model(spec: dict):
    if "table" in spec:
        return _STableModel(spec["table"], spec["layers"]).eval()
    from autograder.reference.configs import DecoderConfig
    from autograder.reference.decoders import LlamaDecoder

    model = LlamaDecoder(DecoderConfig(**spec["fields"])).eval()
    model.load_state_dict(spec["state"])
    return model


class _SWatched(nn.Module):
    """A model that logs every call: what it was fed, and what its cache held then (the tokens, for a table model)."""

    def __init__(self, model, name, log):
        super().__init__()
        self.model, self.name, self.log = model, name, log
        self.blocks = model.blocks

    def forward(self, tokens, cache=None, **kwargs):
        entry = {
            "model": self.name,
            "fed": int(tokens.shape[-1]),
            "cache": cache is not None,
            "lengths": [],
            "stored": None,
        }
        if cache is not None:
            entry["lengths"] = [0 if k is None else int(k.shape[2]) for k in cache.keys]
            last = cache.keys[len(self.blocks) - 1] if len(cache.keys) >= len(self.blocks) else None
            if isinstance(self.model, _STableModel):
                entry["stored"] = [] if last is None else last[0, 0, :, 0].long().tolist()
        self.log.append(entry)
        return self.model(tokens, cache=cache, **kwargs)


def _s_given(ns):
    return given(
        ns,
        KVCache=_s_kv_cache.KVCache,
        speculative_accept=_s_reference.speculative_accept,
        rollback=_s_reference.rollback,
    )


@adapter
def spec_generate_observed(
    ns, target_spec: dict, draft_spec: dict, prompt, k: int, max_new_tokens: int, temperature, seed
):
    """The student's speculative_generate with models that log their calls (the course's KVCache, acceptance rule
    and rollback in place of the notebook's)."""
    log = []
    target, draft = _SWatched(_s_model(target_spec), "target", log), _SWatched(_s_model(draft_spec), "draft", log)
    generator = None if seed is None else torch.Generator().manual_seed(seed)
    generate = need(ns, "speculative_generate")
    with _s_given(ns):
        try:
            out = generate(
                target,
                draft,
                prompt.clone(),
                k=k,
                max_new_tokens=max_new_tokens,
                temperature=temperature,
                generator=generator,
            )
        except NotImplementedError:
            raise
        except Exception as error:  # noqa: BLE001 - what the models were fed so far may say why (a stale cache)
            return {"output": None, "calls": log, "raised": f"{type(error).__name__}: {error}"}
    return {"output": out, "calls": log, "raised": None}


@adapter
def spec_generate_counts(ns, target_spec, draft_spec, prompt, k, max_new_tokens, temperature, draws, seed):
    """How often each sequence of new tokens came in ``draws`` calls sharing one generator."""
    target, draft = _s_model(target_spec), _s_model(draft_spec)
    generator, counts = torch.Generator().manual_seed(seed), {}
    with _s_given(ns):
        generate = need(ns, "speculative_generate")
        for _ in range(draws):
            out = generate(
                target,
                draft,
                prompt.clone(),
                k=k,
                max_new_tokens=max_new_tokens,
                temperature=temperature,
                generator=generator,
            )
            if not isinstance(out, torch.Tensor) or out.dim() != 1 or out.numel() != len(prompt) + max_new_tokens:
                shape = list(getattr(out, "shape", []))
                return {
                    "counts": [],
                    "error": f"returned {type(out).__name__} of shape {shape}; expected "
                    f"[{len(prompt) + max_new_tokens}] (the prompt, then max_new_tokens tokens)",
                }
            key = tuple(int(t) for t in out[len(prompt) :])
            counts[key] = counts.get(key, 0) + 1
    return {"counts": [[list(o), c] for o, c in counts.items()], "error": None}


@adapter
def spec_generate_repeatability(ns, target_spec, draft_spec, prompt, k, max_new_tokens):
    target, draft = _s_model(target_spec), _s_model(draft_spec)
    runs = []
    with _s_given(ns):
        generate = need(ns, "speculative_generate")
        for global_seed in (1, 2):
            torch.manual_seed(global_seed)
            generator = torch.Generator().manual_seed(3)
            runs.append(
                [
                    generate(
                        target,
                        draft,
                        prompt.clone(),
                        k=k,
                        max_new_tokens=max_new_tokens,
                        temperature=1.0,
                        generator=generator,
                    ).tolist()
                    for _ in range(5)
                ]
            )
    return {"same": runs[0] == runs[1]}


MOE_ROUTE = Exercise("moe_route", "a top-k router", points=2)
MOE_LAYER = Exercise("moe_layer", "a mixture-of-experts layer", points=4)
MOE_LOSS = Exercise("moe_balance_loss", "the load-balancing loss", points=2)
MOE_EXERCISES = [MOE_ROUTE, MOE_LAYER, MOE_LOSS]
MOE_ORACLE_IMPORTS = ("transformers.models.mixtral.modeling_mixtral",)

_M_WEIGHTS = {"atol": 1e-6}
_M_OUT = {"atol": 1e-5, "rtol": 1e-5}
_M_GRAD = {"atol": 1e-4, "rtol": 1e-4}
_M_LOSS = {"atol": 1e-5, "rtol": 1e-5}
_M_LOSS_GRAD = {"atol": 1e-6}

_m_gen, _m_randn = seeded(16300)


def _m_config(d_model, d_ff, n_experts, top_k):
    from transformers import MixtralConfig

    config = MixtralConfig(
        hidden_size=d_model,
        intermediate_size=d_ff,
        num_local_experts=n_experts,
        num_experts_per_tok=top_k,
        router_jitter_noise=0.0,
        hidden_act="silu",
    )
    config._experts_implementation = "eager"  # the plain loop over experts (a standalone block has no default)
    return config


def _m_probabilities(logits):
    return torch.softmax(logits.double(), dim=-1)


# --- Exercise 1: the router ---------------------------------------------------------------------------------------


def _m_hf_route(logits, k):
    """Mixtral's router on these logits: its weight the identity, so F.linear gives the logits back."""
    from transformers.models.mixtral.modeling_mixtral import MixtralTopKRouter

    n_experts = logits.shape[-1]
    router = MixtralTopKRouter(_m_config(n_experts, 4, n_experts, k)).to(logits.dtype)  # F.linear: one dtype
    with torch.no_grad():
        router.weight.copy_(torch.eye(n_experts))
        _, weights, experts = router(logits)
    return weights, experts


def _m_by_expert(weights, experts):
    """Each row's (weight, expert) pairs sorted by expert id: the k choices as a set."""
    order = experts.argsort(dim=-1)
    return weights.gather(-1, order), experts.gather(-1, order)


def _m_route_mistakes(logits, k):
    p = torch.softmax(logits.float(), dim=-1)
    top = p.topk(k, dim=-1)
    over_tokens = torch.softmax(logits.float(), dim=0).topk(k, dim=-1)
    low = p.topk(k, dim=-1, largest=False)
    return [
        (top.values, top.indices, "the weights are not renormalised: divide the k probabilities by their sum"),
        (
            over_tokens.values / over_tokens.values.sum(-1, keepdim=True),
            over_tokens.indices,
            "the softmax is taken over the tokens (dim 0); it is over the experts, the last dimension",
        ),
        (low.values / low.values.sum(-1, keepdim=True), low.indices, "these are the k least likely experts"),
    ]


def _m_check_route(impl, n_tokens, n_experts, k, seed, scale=2.0, dtype=torch.float32):
    logits = _m_randn((n_tokens, n_experts), seed, scale).to(dtype)
    got = impl.call(moe_call_route, logits, k)
    what = f"route(router_logits of shape [{n_tokens}, {n_experts}]{'' if dtype == torch.float32 else f', {dtype}'}, k={k})"
    expect.that(
        isinstance(got, (tuple, list)) and len(got) == 2,
        f"{what} returned {type(got).__name__}; expected a pair (weights, experts)",
    )
    weights = expect.tensor(got[0], f"{what}'s weights", shape=[n_tokens, k])
    experts = expect.tensor(got[1], f"{what}'s experts", shape=[n_tokens, k])
    expect.that(weights.is_floating_point(), f"{what}'s weights have dtype {weights.dtype}; expected floats")
    expect.that(experts.dtype == torch.long, f"{what}'s experts have dtype {experts.dtype}; expected torch.long ids")
    expect.that(
        weights.dtype == torch.float32,
        f"{what}'s weights have dtype {weights.dtype}: take the softmax in float32 (router_logits.float()), as "
        "Mixtral's router does, so the weights are float32 whatever the logits' dtype",
    )
    hf_weights, hf_experts = _m_by_expert(*_m_hf_route(logits, k))
    weights, experts = _m_by_expert(weights.float(), experts)
    if not torch.equal(experts, hf_experts):
        for wrong_w, wrong_e, diagnosis in _m_route_mistakes(logits, k):
            if torch.equal(experts, _m_by_expert(wrong_w, wrong_e)[1]) and not torch.equal(
                wrong_e.sort(-1)[0], hf_experts
            ):
                expect.fail(f"{what}: the experts chosen are wrong: {diagnosis}")
        expect.fail(
            f"{what}: the experts chosen per token are {experts.tolist()}; expected {hf_experts.tolist()} "
            "(the k experts of highest probability)"
        )
    alternatives = [(_m_by_expert(w, e)[0], d) for w, e, d in _m_route_mistakes(logits, k)]
    expect.close(weights, hf_weights, f"{what}'s weights", **_M_WEIGHTS, alternatives=alternatives)


@MOE_ROUTE.visible
def test_route_like_mixtral(impl):
    "8 tokens, 4 experts, k = 2: the same experts and weights as Hugging Face's Mixtral router"
    _m_check_route(impl, 8, 4, 2, 0)


@MOE_ROUTE.visible
def test_route_weights_sum_to_one(impl):
    "6 tokens, 8 experts, k = 3: each token's k weights sum to 1 (renormalised), in any order of the k"
    _m_check_route(impl, 6, 8, 3, 1)


@MOE_ROUTE.hidden
def test_route_more_shapes(impl):
    "k = 1 (weights all 1), k = E (every expert), one token, large logits"
    for seed, (n, e, k, scale) in enumerate([(10, 4, 1, 2.0), (5, 6, 6, 2.0), (1, 8, 2, 2.0), (12, 8, 2, 30.0)]):
        _m_check_route(impl, n, e, k, 10 + seed, scale)


@MOE_ROUTE.hidden
def test_route_in_float32(impl):
    "float16 and float64 logits: the softmax taken in float32, the weights float32 as Mixtral's"
    _m_check_route(impl, 9, 6, 2, 30, dtype=torch.float16)
    _m_check_route(impl, 9, 6, 3, 31, dtype=torch.float64)


@MOE_ROUTE.hidden
def test_route_gradient(impl):
    "the weights are differentiable: their gradient with respect to the logits equals the oracle's"
    logits = _m_randn((7, 6), 20)
    table = _m_randn((7, 6), 21)  # the scalar sum_j table[n, experts[n, j]] * weights[n, j]: any order of the k
    got = impl.call(moe_call_route, logits, 2, table)
    expect.that(not isinstance(got.get("grad"), str), f"route's weights: {got.get('grad')}")
    leaf = logits.clone().requires_grad_()
    top = torch.softmax(leaf, dim=-1).topk(2, dim=-1)
    weights = top.values / top.values.sum(-1, keepdim=True)
    (weights * table.gather(-1, top.indices)).sum().backward()
    expect.close(got["grad"], leaf.grad, "the gradient of route's weights with respect to the logits", **_M_GRAD)


# --- Exercise 2: the layer ----------------------------------------------------------------------------------------


class _m_RecordedSwiGLU(nn.Module):
    """The course's SwiGLU (w1 gate, w3 up, w2 down, no biases), recording every call's input rows."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w1 = nn.Linear(d_model, d_ff, bias=False)
        self.w3 = nn.Linear(d_model, d_ff, bias=False)
        self.w2 = nn.Linear(d_ff, d_model, bias=False)
        self.calls = []

    def forward(self, x):
        self.calls.append(x.detach().reshape(-1, x.shape[-1]).clone())
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def _m_layer_state(d_model, d_ff, n_experts, seed):
    state = {"router.weight": _m_randn((n_experts, d_model), seed, 1.0 / math.sqrt(d_model))}
    for e in range(n_experts):
        state[f"experts.{e}.w1.weight"] = _m_randn((d_ff, d_model), seed + 1 + 3 * e, 1.0 / math.sqrt(d_model))
        state[f"experts.{e}.w3.weight"] = _m_randn((d_ff, d_model), seed + 2 + 3 * e, 1.0 / math.sqrt(d_model))
        state[f"experts.{e}.w2.weight"] = _m_randn((d_model, d_ff), seed + 3 + 3 * e, 1.0 / math.sqrt(d_ff))
    return state


def _m_hf_block(state, d_model, d_ff, n_experts, k):
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock

    block = MixtralSparseMoeBlock(_m_config(d_model, d_ff, n_experts, k))
    with torch.no_grad():
        block.gate.weight.copy_(state["router.weight"])
        for e in range(n_experts):
            block.experts.gate_up_proj[e].copy_(
                torch.cat([state[f"experts.{e}.w1.weight"], state[f"experts.{e}.w3.weight"]])
            )
            block.experts.down_proj[e].copy_(state[f"experts.{e}.w2.weight"])
    return block


def _m_expert(state, e, x):
    return F.linear(
        F.silu(F.linear(x, state[f"experts.{e}.w1.weight"])) * F.linear(x, state[f"experts.{e}.w3.weight"]),
        state[f"experts.{e}.w2.weight"],
    )


def _m_layer_mistakes(state, n_experts, k, x):
    tokens = x.reshape(-1, x.shape[-1])
    p = torch.softmax(tokens @ state["router.weight"].T, dim=-1)
    top = p.topk(k, dim=-1)
    right = top.values / top.values.sum(-1, keepdim=True)
    outputs = torch.stack([_m_expert(state, e, tokens) for e in range(n_experts)], dim=1)  # [N, E, d]
    chosen = outputs.gather(1, top.indices[..., None].expand(-1, -1, tokens.shape[-1]))  # [N, k, d]
    weighted_inputs = torch.stack(
        [
            torch.stack([_m_expert(state, int(e), right[n, j] * tokens[n]) for j, e in enumerate(top.indices[n])])
            for n in range(tokens.shape[0])
        ]
    )
    return [
        ((top.values[..., None] * chosen).sum(1).reshape(x.shape), "the router's weights are not renormalised"),
        (chosen.sum(1).reshape(x.shape), "the experts' outputs are added without the router's weights"),
        (
            weighted_inputs.sum(1).reshape(x.shape),
            "each token is multiplied by its weight before the expert; the weight multiplies the expert's output",
        ),
    ]


def _m_check_layer(impl, shape, d_ff, n_experts, k, seed, grads=True):
    d_model = shape[-1]
    state = _m_layer_state(d_model, d_ff, n_experts, seed)
    x = _m_randn(shape, seed + 100)
    grad_output = _m_randn(shape, seed + 101) if grads else None
    got = impl.call(moe_run_layer, state, d_model, d_ff, n_experts, k, x, grad_output)
    what = f"MoELayer({d_model}, {d_ff}, n_experts={n_experts}, top_k={k})"
    expect.that(not got.get("load_error"), f"{what}: {got.get('load_error')}")
    block = _m_hf_block(state, d_model, d_ff, n_experts, k)
    xr = x.reshape(1, -1, d_model).clone().requires_grad_(grads)
    expected = block(xr)
    expect.close(
        got["output"],
        expected.reshape(shape),
        f"{what}(x) for x of shape {list(shape)}",
        **_M_OUT,
        alternatives=_m_layer_mistakes(state, n_experts, k, x),
    )
    _m_expect_dispatch(got, state, n_experts, k, x, what)
    if grads:
        expected.backward(grad_output.reshape(expected.shape))
        found = expect.gradients(got, what)
        expect.close(found.get("router.weight"), block.gate.weight.grad, f"{what}: the router's gradient", **_M_GRAD)
        for e in range(n_experts):
            w1_grad, w3_grad = block.experts.gate_up_proj.grad[e].chunk(2)
            for name, expected_grad in (("w1", w1_grad), ("w3", w3_grad), ("w2", block.experts.down_proj.grad[e])):
                expect.close(
                    found.get(f"experts.{e}.{name}.weight"),
                    expected_grad,
                    f"{what}: the gradient of experts[{e}].{name}.weight",
                    **_M_GRAD,
                )
        expect.close(found.get("input"), xr.grad.reshape(shape), f"{what}: the gradient of x", **_M_GRAD)
    return got


def _m_expect_dispatch(got, state, n_experts, k, x, what):
    """The rule, observed: each expert ran at most once, on exactly the tokens routed to it."""
    tokens = x.reshape(-1, x.shape[-1])
    chosen = torch.softmax(tokens @ state["router.weight"].T, dim=-1).topk(k, dim=-1).indices
    for e, calls in enumerate(got["calls"]):
        routed = tokens[(chosen == e).any(-1)]
        calls = [c for c in calls if c.shape[0]]  # a call with no tokens does no work
        expect.that(
            len(calls) <= 1,
            f"{what}: experts[{e}] was called {len(calls)} times in one forward pass, for {routed.shape[0]} tokens "
            "routed to it: that is a loop over tokens. Call each expert once, on all its tokens together",
        )
        if not calls:
            expect.that(
                routed.shape[0] == 0,
                f"{what}: experts[{e}] was never called, but {routed.shape[0]} tokens are routed to it",
            )
            continue
        seen = calls[0]
        expect.that(
            seen.shape[0] <= routed.shape[0],
            f"{what}: experts[{e}] ran on {seen.shape[0]} tokens, but only {routed.shape[0]} are routed to it: an "
            "expert must run only on its own tokens (computing every expert on every token and masking costs "
            "n_experts / top_k times the compute)",
        )
        expect.that(
            seen.shape == routed.shape,
            f"{what}: experts[{e}] ran on {seen.shape[0]} tokens; {routed.shape[0]} are routed to it",
        )
        same = torch.equal(seen[seen[:, 0].argsort()], routed[routed[:, 0].argsort()])
        expect.that(
            same,
            f"{what}: experts[{e}] was given other vectors than those of the tokens routed to it (were they "
            "scaled or changed?): each expert runs on its tokens' vectors as they are, and its output is weighted",
        )


@MOE_LAYER.visible
def test_moe_layer_parts(impl):
    "a router nn.Linear(d_model, n_experts, bias=False), n_experts experts made by `expert`, router_logits kept"
    d_model, d_ff, n_experts, k = 16, 24, 4, 2
    state = _m_layer_state(d_model, d_ff, n_experts, 30)
    x = _m_randn((2, 5, d_model), 31)
    got = impl.call(moe_run_layer, state, d_model, d_ff, n_experts, k, x, None)
    what = f"MoELayer({d_model}, {d_ff}, n_experts={n_experts}, top_k={k}, expert=...)"
    expected = sorted(
        ["router.weight", *(f"experts.{e}.{w}.weight" for e in range(n_experts) for w in "w1 w3 w2".split())]
    )
    params = got["summary"].get("parameters", {})
    expect.that(
        not got.get("router_bias"),
        f"{what}: the router has a bias; it is nn.Linear(d_model, n_experts, bias=False), as Mixtral's",
    )
    expect.that(
        sorted(params) == expected,
        f"{what} has parameters {sorted(params)}; expected router.weight [{n_experts}, {d_model}] and, for each "
        f"expert i, experts.i.w1/w3/w2.weight: `self.router` and `self.experts`, an nn.ModuleList of the modules "
        "made by `expert(d_model, d_ff)`",
    )
    expect.that(
        got["made"] == n_experts and got["experts_made_by_expert"],
        f"{what}: `expert` made {got['made']} modules and self.experts holds "
        f"{'them' if got['experts_made_by_expert'] else 'others'}; expected self.experts[i] = expert(d_model, d_ff) "
        f"for i in range({n_experts})",
    )
    logits = expect.tensor(
        got["router_logits"],
        f"{what}: self.router_logits after a forward pass of x [2, 5, {d_model}] (10 tokens, flattened)",
        shape=[10, n_experts],
    )
    expect.close(logits, x.reshape(-1, d_model) @ state["router.weight"].T, f"{what}: self.router_logits", **_M_OUT)
    expect.that(
        got["router_logits_graph"],
        f"{what}: self.router_logits has no graph back to the router's weight (detached?): the load-balancing loss "
        "is computed from it and must train the router",
    )


@MOE_LAYER.visible
def test_moe_layer_like_mixtral(impl):
    "x [2, 5, 16], 4 experts, top 2: output and gradients equal Mixtral's sparse MoE block; each expert once"
    _m_check_layer(impl, (2, 5, 16), 24, 4, 2, 40)


@MOE_LAYER.hidden
def test_moe_layer_more_shapes(impl):
    "top 1, top 3 of 8, every expert (k = E), x of 2 to 4 dimensions"
    cases = [((12, 8), 16, 4, 1), ((3, 7, 16), 12, 8, 3), ((2, 2, 3, 8), 8, 3, 3), ((1, 1, 16), 24, 4, 2)]
    for seed, (shape, d_ff, n_experts, k) in enumerate(cases):
        _m_check_layer(impl, shape, d_ff, n_experts, k, 50 + 20 * seed)


@MOE_LAYER.hidden
def test_moe_layer_no_loop_over_tokens(impl):
    "the work of your code does not grow with the number of tokens (every expert hit at both sizes)"
    d_model, d_ff, n_experts, k = 8, 8, 4, 2
    state = _m_layer_state(d_model, d_ff, n_experts, 130)
    runs = {}
    for n in (16, 64):
        x = _m_randn((n, d_model), 131 + n)
        chosen = torch.softmax(x @ state["router.weight"].T, -1).topk(k, -1).indices
        assert all((chosen == e).any() for e in range(n_experts)), "every expert must be hit: choose another seed"
        runs[f"{n} tokens"] = impl.call(moe_layer_work, state, d_model, d_ff, n_experts, k, x)
    expect.no_loops("no Python loop over tokens (a loop over the experts is fine)", runs)


# --- Exercise 3: the load-balancing loss --------------------------------------------------------------------------


def _m_loss_closed_form(logits, k):
    """E * sum_i f_i P_i in float64: f_i the top-k assignments of expert i over the tokens, P_i its mean probability."""
    n, e = logits.shape
    p = _m_probabilities(logits)
    counts = F.one_hot(p.topk(k, -1).indices, e).sum((0, 1)).double()
    return e * (counts / n * p.mean(0)).sum()


def _m_loss_mistakes(logits, k):
    n, e = logits.shape
    p = _m_probabilities(logits)
    top = p.topk(k, -1)
    counts = F.one_hot(top.indices, e).sum((0, 1)).double()
    first = F.one_hot(top.indices[:, 0], e).sum(0).double()
    renormalised = torch.zeros_like(p).scatter(-1, top.indices, top.values / top.values.sum(-1, keepdim=True))
    return [
        (
            e * (counts / (n * k) * p.mean(0)).sum(),
            "the counts are divided by tokens × k; Mixtral divides by the number of tokens, so the fractions sum to k",
        ),
        (e * (first / n * p.mean(0)).sum(), "only each token's first choice is counted; count all k of its experts"),
        (
            e * (counts / n * renormalised.mean(0)).sum(),
            "the mean probability P_i is taken after top-k (from the renormalised weights); it is the softmax over "
            "all experts, before top-k",
        ),
        (e * (p.mean(0) ** 2).sum(), "the fractions f_i are mean probabilities; f_i counts the tokens routed to i"),
        ((counts / n * p.mean(0)).sum(), "the sum is not multiplied by the number of experts E"),
    ]


def _m_check_loss(impl, n, e, k, seed, scale=1.5, grads=False):
    logits = _m_randn((n, e), seed, scale)
    got = impl.call(moe_call_loss, logits, k, grads)
    what = f"load_balancing_loss(router_logits of shape [{n}, {e}], top_k={k})"
    loss = expect.tensor(got["loss"], what)
    expect.that(loss.dim() == 0, f"{what} has shape {list(loss.shape)}; expected a scalar (0-D tensor)")
    from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func

    leaf = logits.clone().requires_grad_()
    hf = load_balancing_loss_func((leaf,), e, k)
    mistakes = _m_loss_mistakes(logits, k)
    expect.close(
        loss, hf.detach(), f"{what} (against Hugging Face's load_balancing_loss_func)", **_M_LOSS, alternatives=mistakes
    )
    expect.close(loss, _m_loss_closed_form(logits, k), f"{what} (against E * sum_i f_i P_i)", **_M_LOSS)
    if grads:
        hf.backward()
        expect.that(
            not isinstance(got["grad"], str),
            f"{what}: {got['grad']}; the loss trains the router through the mean probabilities P_i",
        )
        expect.close(got["grad"], leaf.grad, f"{what}: its gradient with respect to the router logits", **_M_LOSS_GRAD)


@MOE_LOSS.visible
def test_balance_loss_like_mixtral(impl):
    "12 tokens, 4 experts, top 2: equal to Hugging Face's load_balancing_loss_func and to E * sum f_i P_i"
    _m_check_loss(impl, 12, 4, 2, 0)


@MOE_LOSS.visible
def test_balance_loss_gradient(impl):
    "20 tokens, 8 experts, top 2: the gradient reaches the logits through the mean probabilities, as Mixtral's"
    _m_check_loss(impl, 20, 8, 2, 1, grads=True)


@MOE_LOSS.hidden
def test_balance_loss_more_shapes(impl):
    "top 1, top 3 of 6, every expert, one token, sharp logits; gradients"
    for seed, (n, e, k, scale) in enumerate(
        [(30, 4, 1, 1.5), (9, 6, 3, 1.5), (5, 3, 3, 1.5), (1, 4, 2, 1.5), (40, 8, 2, 8.0)]
    ):
        _m_check_loss(impl, n, e, k, 10 + seed, scale, grads=True)


@MOE_LOSS.hidden
def test_balance_loss_extremes(impl):
    "every token sent to one expert: E (k = 1); a perfectly balanced routing with uniform probabilities: k"
    n, e = 16, 4
    collapsed = torch.zeros(n, e)
    collapsed[:, 2] = 40.0
    got = impl.call(moe_call_loss, collapsed, 1, False)
    expect.close(
        got["loss"], _m_loss_closed_form(collapsed, 1), "the loss when every token goes to expert 2 (k = 1)", **_M_LOSS
    )
    # each token prefers a different pair of experts, by a hair: the counts are balanced, the probabilities ~uniform
    balanced = torch.zeros(n, e)
    balanced[torch.arange(n), torch.arange(n) % e] = 1e-3
    balanced[torch.arange(n), (torch.arange(n) + 1) % e] = 5e-4
    got = impl.call(moe_call_loss, balanced, 2, False)
    expect.close(
        got["loss"], torch.tensor(2.0, dtype=torch.float64), "the loss of a balanced routing (k = 2)", atol=1e-3
    )


@MOE_LOSS.hidden
def test_balance_loss_several_layers(impl):
    "the logits of three layers concatenated: Hugging Face's loss of the tuple of layers (it pools their rows)"
    from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func

    layers = tuple(_m_randn((10, 4), 60 + i, 1.5) for i in range(3))
    got = impl.call(moe_call_loss, torch.cat(layers), 2, False)
    expect.close(
        got["loss"],
        load_balancing_loss_func(layers, 4, 2),
        "load_balancing_loss of three layers' logits concatenated [30, 4], top_k=2",
        **_M_LOSS,
        alternatives=_m_loss_mistakes(torch.cat(layers), 2),
    )


# Adapters (section 3): the only code of this section that touches the student's objects.


@adapter
def moe_call_route(ns, logits, k, table=None):
    leaf = logits.clone().requires_grad_(table is not None)
    got = need(ns, "route")(leaf, k)
    if table is None:
        return got
    weights, experts = got
    result = {}
    if isinstance(weights, torch.Tensor) and weights.requires_grad and weights.shape == (logits.shape[0], k):
        (weights * table.gather(-1, experts)).sum().backward()
        result["grad"] = leaf.grad
    else:
        result["grad"] = "the weights have no graph back to the logits, or the wrong shape"
    return result


def _m_build(ns, state, d_model, d_ff, n_experts, k):
    from autograder.adapters import Recording

    made = Recording(_m_RecordedSwiGLU)
    with given(ns, route=_m_reference.route):
        layer = need(ns, "MoELayer")(d_model, d_ff, n_experts, k, expert=made)
    error = None
    try:
        layer.load_state_dict(state, strict=True)
    except Exception as failed:  # noqa: BLE001 - reported as a failure
        error = f"its parameters could not be loaded by name: {str(failed)[:300]}"
    return layer, made, error


@adapter
def moe_run_layer(ns, state, d_model, d_ff, n_experts, k, x, grad_output):
    layer, made, error = _m_build(ns, state, d_model, d_ff, n_experts, k)
    router = getattr(layer, "router", None)
    experts = list(getattr(layer, "experts", []) or [])
    result = {
        "summary": summary(layer),
        "load_error": error,
        "router_bias": getattr(router, "bias", None) is not None,
        "made": len(made.made),
        "experts_made_by_expert": len(experts) == n_experts and all(made.built(m) for m in experts),
    }
    if error:
        return result
    xr = x.clone().requires_grad_(grad_output is not None)
    with given(ns, route=_m_reference.route):
        result |= _m_forward_backward(layer, xr, grad_output)
    logits = getattr(layer, "router_logits", None)
    result["router_logits"] = logits.detach() if isinstance(logits, torch.Tensor) else logits
    result["router_logits_graph"] = False
    if isinstance(logits, torch.Tensor) and logits.requires_grad:
        grads = torch.autograd.grad(logits.sum(), [layer.router.weight], allow_unused=True)
        result["router_logits_graph"] = grads[0] is not None
    result["calls"] = [[c for c in m.calls] for m in experts] if len(experts) == n_experts else []
    return result


def _m_forward_backward(layer, xr, grad_output):
    output = layer(xr)
    result = {"output": output.detach() if isinstance(output, torch.Tensor) else output}
    if grad_output is None:
        return result
    if not isinstance(output, torch.Tensor) or output.shape != grad_output.shape or not output.requires_grad:
        result["grads"] = "the output has no graph, or another shape than x"
        return result
    output.backward(grad_output, retain_graph=True)
    result["grads"] = {n: (p.grad if p.grad is not None else torch.zeros_like(p)) for n, p in layer.named_parameters()}
    result["grads"]["input"] = xr.grad
    return result


@adapter
def moe_layer_work(ns, state, d_model, d_ff, n_experts, k, x):
    from autograder.adapters import lines_run

    layer, _, _ = _m_build(ns, state, d_model, d_ff, n_experts, k)
    with given(ns, route=_m_reference.route), torch.no_grad():
        return lines_run(layer, x)["work"]


@adapter
def moe_call_loss(ns, logits, k, grads=False):
    leaf = logits.clone().requires_grad_(grads)
    loss = need(ns, "load_balancing_loss")(leaf, k)
    result = {"loss": loss.detach() if isinstance(loss, torch.Tensor) else loss}
    if grads:
        if isinstance(loss, torch.Tensor) and loss.requires_grad and loss.dim() == 0:
            loss.backward()
            result["grad"] = leaf.grad
        else:
            result["grad"] = "the loss has no graph back to the logits (detached, or computed without them)"
    return result


EXERCISES = [*QUANT_EXERCISES, *SPEC_EXERCISES, *MOE_EXERCISES]
# Imported while the notebook runs (grading.grade), seconds: torchao for section 1's oracles, Hugging Face's Llama
# and Mixtral for sections 2 and 3.
ORACLE_IMPORTS = (*QUANT_ORACLE_IMPORTS, *SPEC_ORACLE_IMPORTS, *MOE_ORACLE_IMPORTS)
