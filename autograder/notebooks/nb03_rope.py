"""Notebook 03's exercises, with their checks and adapters: rotary position embeddings (interleaved pairs).

Oracles, built here without the student's code (no answer of solutions/ ships in the package, issue 54 §4):
- a 2x2 rotation as ``torch.linalg.matrix_exp`` of the generator [[0, -a], [a, 0]];
- the frequencies by their closed form theta_i = base^(-2i/d_k), in float64 (``_rope.frequencies``);
- the rotation of pairs: Hugging Face Llama's ``apply_rotary_pos_emb`` (split halves) on the coordinates read in
  the split-halves order and back, with float64 tables (``autograder/notebooks/_rope.py``);
- for the split-halves convention (Exercise 5) also Llama end to end, ``LlamaRotaryEmbedding`` (its float32 tables,
  a tiny ``LlamaConfig``) and ``apply_rotary_pos_emb``;
- invariances: relative positions only, norms kept, position 0 is the identity;
- ALiBi (exercises 6, 7): the slopes are Hugging Face BLOOM's (``build_alibi_tensor``, read at key 1, where its
  entry is the slope itself), and for powers of two also the closed form 2^(-8h/n) (the first slope and the ratio
  between neighbours); the bias by loops over (h, i, j) on BLOOM's slopes; attention weights with BLOOM's ALiBi
  tensor; and invariances (only i - j matters, constant ratio between heads, a longer sequence extends the bias).

Tolerances: float32 results against float64 oracles at atol 2e-4 + 4e-7 * (largest
position) with inputs in [-1, 1]: float32 rounds the angle m * theta to ~1.2e-7 relative,
so the error grows with m (measured near m = 2047: 8e-5 at d = 64, 1.5e-4 at d = 128,
for both the cos/sin and the complex formulation; bound there: 1e-3); small exact cases 1e-5;
bfloat16 outputs atol/rtol 2e-2 (values up to sqrt(2), bf16 keeps 8 bits). Exercise 5's Llama side (float32 tables)
against the float64 oracle at positions up to 100: <= 3.4e-6 (measured, d_k up to 256), within the same bound.
Precision (Exercise 4): at positions up to 4095, atol 1e-5 against the float64 oracle (float64 angles: <= 1.2e-7,
measured; float32 angles or float32 theta: 4e-5 to 1.2e-4); a bfloat16 output must be the exact rotation rounded
once to bfloat16 (half a bfloat16 ulp + 1e-6; computing in bfloat16 is off by up to 1.5 ulp, measured).
Sizes beyond the notebook's (its longest RoPE table has 2,048 rows, its ALiBi bias 10,000 keys, its widest d_k is
128): a RoPE module with max_seq_len = 10,000 read near its end, 12,000 keys for ALiBi (also with 12 heads, whose
slopes 2^-0.5, 2^-1.5, ... are not powers of two: slope * i and slope * j rounded in float32 separately near 8,500
are off by up to 6.6e-4 where the bias is 0.7, at 1,658 of the 12,288 entries compared, while the distance times
the slope, rounded once, stays within the bias bound below), d_k = 256 for the frequencies
and the permutation, 1,200 angles at once, a matrix at position 3,000; so a table made once for a fixed length and
sliced fails. State: RoPE's cos and sin are non-persistent buffers that forward reads (the adapter replaces the
buffers as ``module.to(device)`` does, through ``Module._apply``, with their negatives: forward must follow), and
the constructor's ``base`` is used.
ALiBi: slopes rtol 1e-5 (HF BLOOM's float32 pow is up to 7e-7 off the exact values for n <= 128, measured; a float32
running product of the ratio drifts by about n * 6e-8; every wrong rule diagnosed is off by 2^(8/n) - 1 > 4% for
n <= 128); the bias atol 1e-6 + rtol 1e-6 (one float32 slope times an exact integer distance; the student's
``alibi_bias`` is given BLOOM's float32 slopes as ``alibi_slopes``, the oracle's own; slopes rounded once from the
exact values, should an answer make its own, are at most 1.0e-7 (relative) from BLOOM's for the head counts these checks
use, measured), float32 also under a float64 default dtype; attention weights against BLOOM's atol 1e-5 (probabilities
in [0, 1]; the two biases differ by up to ~12 per row, which float32 rounds at ~1e-6 before the softmax).
"""

from __future__ import annotations

import math

import torch

from autograder import expect
from autograder.adapters import adapter, forward_backward_inputs, given, need, outcome, shapes_made, summary
from autograder.exercises import Exercise
from autograder.notebooks import _rope
from autograder.notebooks._seeds import seeded

ROTATION = Exercise("rotation_matrix", "a 2x2 rotation", points=1)
FREQUENCIES = Exercise("rope_frequencies", "the frequencies", points=1)
MATRIX = Exercise("rope_matrix", "RoPE as a block-diagonal matrix", points=2)
ROPE = Exercise("rope", "an efficient RoPE module", points=3)
HALVES = Exercise("halves_permutation", "interleaved vs split halves", points=2)
SLOPES = Exercise("alibi_slopes", "ALiBi's slopes", points=2)
ALIBI = Exercise("alibi_bias", "the ALiBi bias", points=2)
EXERCISES = [ROTATION, FREQUENCIES, MATRIX, ROPE, HALVES, SLOPES, ALIBI]
ORACLE_IMPORTS = (
    "transformers.models.bloom.modeling_bloom",
    "transformers.models.llama.modeling_llama",
)  # imported while the notebook runs (grading.grade): seconds

SMALL = {"atol": 1e-5, "rtol": 1e-5}


_gen, _ = seeded(3000)


def _uniform(shape, seed):
    return torch.rand(tuple(shape), generator=_gen(seed)) * 2 - 1


def _tolerance(largest_position: int) -> dict:
    return {"atol": 2e-4 + 4e-7 * largest_position, "rtol": 0.0}


# Float64 angles, float32 tables: each table entry is off by at most half a float32 ulp (6e-8) and forward's float32
# arithmetic adds a few ulps of values up to sqrt(2) (measured: 1.2e-7 at positions near 4095, d_k = 64); angles
# or theta computed in float32 are off by 4e-5 to 1.2e-4 there (measured), well outside.
PRECISE = {"atol": 1e-5, "rtol": 0.0}


def _rounded_once(exact: torch.Tensor) -> torch.Tensor:
    """How far a bfloat16 value rounded once from ``exact`` may be: half a bfloat16 ulp (8 significant bits), plus
    1e-6 for float32's own arithmetic before the rounding (a few float32 ulps of values up to sqrt(2)), which can
    tip a value that lies almost halfway between two bfloat16 numbers."""
    binade = torch.floor(torch.log2(exact.abs().clamp_min(2.0**-126)))
    return 0.5 * torch.exp2(binade - 7) + 1e-6


# --- oracles -----------------------------------------------------------------------------


def rotation_oracle(angle: torch.Tensor) -> torch.Tensor:
    angle = angle.double()
    generator = torch.zeros(*angle.shape, 2, 2, dtype=torch.float64)
    generator[..., 0, 1], generator[..., 1, 0] = -angle, angle
    return torch.linalg.matrix_exp(generator)


frequencies_oracle = _rope.frequencies  # the closed form, in float64
rope_oracle = _rope.rotate_pairs  # interleaved RoPE: Llama's rotation in the split-halves order and back, in float64
rope_halves_oracle = _rope.rotate_halves  # split-halves RoPE (pair i = (i, i + d/2)): Llama's, in float64


def llama_rope_halves(x, positions, base=10000.0):
    """Split-halves RoPE as Hugging Face's Llama runs it: ``LlamaRotaryEmbedding``'s float32 tables (a tiny
    ``LlamaConfig`` with head_dim d_k) and ``apply_rotary_pos_emb``, independent of the float64 oracles above."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    d_k = x.shape[-1]
    config = LlamaConfig(
        hidden_size=d_k,
        num_attention_heads=1,
        head_dim=d_k,
        rope_parameters={"rope_type": "default", "rope_theta": base},
    )
    cos, sin = LlamaRotaryEmbedding(config)(x, positions)  # [..., seq, d_k] for positions [..., seq]
    rotated, _ = apply_rotary_pos_emb(x, x, cos, sin, unsqueeze_dim=0)  # a leading 1, absorbed below
    return rotated.reshape(x.shape)


def matrix_oracle(d_k: int, position: int, base: float = 10000.0) -> torch.Tensor:
    blocks = rotation_oracle(position * frequencies_oracle(d_k, base))
    return torch.block_diag(*blocks)


def _rope_mistakes(x, positions, base=10000.0):
    d_k = x.shape[-1]
    return [
        (
            rope_oracle(x, -positions, base),
            "the sin terms have the wrong sign: x0' = x0 cos - x1 sin, x1' = x0 sin + x1 cos",
        ),
        (
            rope_halves_oracle(x, positions, base),
            "it rotates the pairs (i, i + d_k/2) (split halves); this course pairs neighbours: (0, 1), (2, 3), ...",
        ),
        (
            rope_oracle(
                x,
                positions,
                base,
                theta=torch.tensor([base ** (-i / d_k) for i in range(d_k // 2)], dtype=torch.float64),
            ),
            "the frequencies are off: pair i turns at base^(-2i/d_k), not base^(-i/d_k)",
        ),
        (
            rope_oracle(x, torch.arange(x.shape[-2]).expand(positions.shape) if positions.dim() else positions, base),
            "it ignores token_positions and uses 0, 1, 2, ...; use the positions it is given",
        ),
    ]


# --- Exercise 1 --------------------------------------------------------------------------


@ROTATION.visible
def test_rotation_values(impl):
    "rotation_matrix(a) = [[cos a, -sin a], [sin a, cos a]]"
    angle = torch.tensor([0.0, 0.3, -1.2, math.pi / 2, 2.5])
    expected = rotation_oracle(angle)
    expect.close(
        impl.call(rotation_matrix, angle),
        expected.float(),
        "rotation_matrix(angles) for 5 angles",
        **SMALL,
        alternatives=[
            (
                expected.transpose(-1, -2),
                "the matrix is transposed: the minus sign belongs on sin in the top-right entry",
            )
        ],
    )


@ROTATION.hidden
def test_rotation_shapes_and_dtypes(impl):
    "a scalar angle gives [2, 2]; angles of shape [...] (1200 of them too) give [..., 2, 2], in the angles' dtype"
    for seed, shape, dtype in [
        (0, (), torch.float32),
        (1, (2, 3), torch.float32),
        (2, (4,), torch.float64),
        (3, (1200,), torch.float32),  # more angles than the notebook's 1000
    ]:
        angle = (_uniform(shape, seed) * 4).to(dtype)
        out = expect.tensor(
            impl.call(rotation_matrix, angle),
            f"rotation_matrix of angles shaped {list(shape)}",
            shape=(*shape, 2, 2),
            dtype=dtype,
        )
        expect.close(out, rotation_oracle(angle).to(dtype), f"rotation_matrix of angles shaped {list(shape)}", **SMALL)


@ROTATION.hidden
def test_rotation_composes(impl):
    "R(a)^T R(b) = R(b - a): the property RoPE is built on"
    a, b = _uniform((6,), 3) * 3, _uniform((6,), 4) * 3
    ra, rb, rdiff = (
        impl.call(rotation_matrix, a),
        impl.call(rotation_matrix, b),
        impl.call(rotation_matrix, b - a),
    )
    expect.close(ra.transpose(-1, -2) @ rb, rdiff, "R(a)^T R(b) compared with R(b - a)", **SMALL)


# --- Exercise 2 --------------------------------------------------------------------------


@FREQUENCIES.visible
def test_frequencies_values(impl):
    "theta_i = base^(-2i/d_k) for i = 0 .. d_k/2 - 1, as float32"
    for d_k in (8, 64):
        expected = frequencies_oracle(d_k, 10000.0)
        got = expect.tensor(
            impl.call(rope_frequencies, d_k, 10000.0),
            f"rope_frequencies({d_k})",
            shape=(d_k // 2,),
            dtype=torch.float32,
        )
        i = torch.arange(d_k // 2, dtype=torch.float64)
        expect.close(
            got,
            expected,
            f"rope_frequencies({d_k})",
            atol=1e-7,
            rtol=1e-5,
            alternatives=[
                (10000.0 ** (-i / d_k), "the exponent is 2i/d_k, not i/d_k"),
                (10000.0 ** (2 * i / d_k), "the sign of the exponent: theta_i = base^(-2i/d_k) gets smaller with i"),
                (10000.0 ** (-2 * (i + 1) / d_k), "i starts at 0, so theta_0 = 1"),
            ],
        )


@FREQUENCIES.hidden
def test_frequencies_base_and_odd(impl):
    "the base argument is used (d_k = 10 and 256), and an odd d_k raises ValueError"
    expect.close(
        impl.call(rope_frequencies, 10, 500.0),
        frequencies_oracle(10, 500.0),
        "rope_frequencies(10, base=500)",
        atol=1e-7,
        rtol=1e-5,
    )
    expect.close(
        impl.call(rope_frequencies, 256, 500000.0),
        frequencies_oracle(256, 500000.0),
        "rope_frequencies(256, base=500000)",
        atol=1e-7,
        rtol=1e-5,
    )
    outcome = impl.call(rope_frequencies_outcome, 7)
    expect.that(
        outcome["raised"] == "ValueError",
        f"rope_frequencies(7) {'raised ' + outcome['raised'] if outcome['raised'] else 'returned'}; "
        "an odd d_k cannot be split into pairs, so raise ValueError",
    )


# --- Exercise 3 --------------------------------------------------------------------------


@MATRIX.visible
def test_matrix_blocks(impl):
    "rope_matrix is block-diagonal with R(position * theta_i) on the (2i, 2i+1) block"
    expected = matrix_oracle(8, 3)
    perm = _rope.split_order(8)
    got = expect.tensor(
        impl.call(rope_matrix, 8, 3, 10000.0), "rope_matrix(8, position=3)", shape=(8, 8), dtype=torch.float32
    )
    expect.close(
        got,
        expected,
        "rope_matrix(8, position=3)",
        **SMALL,
        alternatives=[
            (
                expected.transpose(0, 1),
                "the blocks are transposed: the minus sign goes on sin in the upper-right entry",
            ),
            (expected[perm][:, perm], "it pairs i with i + d_k/2; here pair i is the neighbours (2i, 2i+1)"),
        ],
    )


@MATRIX.hidden
def test_matrix_cases(impl):
    "position 0 is the identity; other sizes, positions (up to 3000) and bases"
    for d_k, position, base in [
        (4, 0, 10000.0),
        (2, 7, 10000.0),
        (16, 100, 10000.0),
        (6, 5, 100.0),
        (24, 3000, 10000.0),
    ]:
        got = expect.tensor(
            impl.call(rope_matrix, d_k, position, base),
            f"rope_matrix({d_k}, {position})",
            shape=(d_k, d_k),
            dtype=torch.float32,
        )
        expect.close(
            got,
            matrix_oracle(d_k, position, base),
            f"rope_matrix({d_k}, position={position}, base={base})",
            **_tolerance(position),
        )


# --- Exercise 4 --------------------------------------------------------------------------


@ROPE.visible
def test_rope_rotates_pairs(impl):
    "RoPE(x, positions) rotates each pair (2i, 2i+1) by position * theta_i"
    x, positions = _uniform((2, 6, 16), 0), torch.tensor([5, 0, 2, 9, 9, 1])
    out = expect.tensor(
        impl.call(rope_forward, 16, 32, x, positions), "RoPE(16, 32)(x, positions)", dtype=torch.float32
    )
    expect.close(
        out,
        rope_oracle(x, positions),
        "RoPE(16, 32)(x, positions) for x of shape [2, 6, 16]",
        **_tolerance(9),
        alternatives=_rope_mistakes(x, positions),
    )


@ROPE.visible
def test_rope_buffers(impl):
    "cos and sin are non-persistent buffers of shape [max_seq_len, d_k // 2]; no parameters"
    summary = impl.call(rope_summary, 8, 20)
    expect.that("parameters" in summary, "RoPE(8, 20) is not an nn.Module")
    expect.that(
        not summary["parameters"], f"RoPE has parameters {list(summary['parameters'])}; it has nothing to learn"
    )
    for name in ("cos", "sin"):
        buffer = summary["buffers"].get(name)
        expect.that(
            buffer is not None and buffer["shape"] == [20, 4],
            f"expected a buffer `{name}` of shape [20, 4]; found {summary['buffers']}",
        )
        expect.that(
            not buffer["persistent"],
            f"register `{name}` with persistent=False: it is recomputed, not saved in checkpoints",
        )


@ROPE.visible
def test_rope_builds_no_rotation_matrix(impl):
    "forward builds no [d_k, d_k] matrix: the element-wise form of Section 5"
    x, positions = _uniform((2, 3, 5, 8), 30), torch.tensor([4, 0, 7, 1, 2])  # d_k = 8; no other axis is 8
    shapes = impl.call(rope_forward_shapes, 8, 16, x, positions)
    square = [shape for shape in shapes if shape[-2:] == [8, 8]]
    expect.that(
        not square,
        f"this exercise's rule is: do not build [d_k, d_k] matrices in forward; your forward "
        f"made tensors of shape {square[0] if square else ''} for d_k = 8: rotate the pairs "
        "element-wise with the cos and sin tables instead",
    )
    # The rule by size, whatever the shape ([..., d_k, d_k + 1] with x padded by a zero column, [d_k, d_k/2, 2],
    # a flattened [d_k * d_k], one matrix per position in a loop): a rotation matrix holds at least d_k * d_k
    # numbers, so any tensor made during forward with at least that many is one. Sound for every right answer
    # here: with d_k = 64 (d_k * d_k = 4096), x of 1 * 2 * 5 * 64 = 640 numbers and max_seq_len = 16, the element-wise
    # form's tensors are O(d_k) per position, a few times x at most (2x2 blocks per pair, or stacked products:
    # 1,280; a table doubled to [max_seq_len, d_k] in forward: 1,024), all below 4,096. The cos and sin buffers
    # ([max_seq_len, d_k/2]) are made in __init__, which the recording does not see (``rope_forward_shapes``).
    d_k, max_seq_len = 64, 16
    x, positions = _uniform((1, 2, 5, d_k), 33), torch.tensor([4, 0, 15, 1, 9])
    shapes = impl.call(rope_forward_shapes, d_k, max_seq_len, x, positions)
    large = [shape for shape in shapes if math.prod(shape) >= d_k * d_k]
    expect.that(
        not large,
        f"this exercise's rule is: do not build [d_k, d_k] matrices in forward; your forward "
        f"made a tensor of shape {large[0] if large else ''} ({math.prod(large[0]) if large else 0:,} numbers) for "
        f"d_k = {d_k} and x of shape {list(x.shape)}: a rotation matrix's worth of numbers (d_k * d_k = "
        f"{d_k * d_k:,}), whatever its shape; rotate the pairs element-wise with the cos and sin tables instead",
    )


@ROPE.hidden
def test_rope_with_heads_and_offsets(impl):
    "works with batch and head dimensions, positions shared or per batch, and large offsets"
    cases = [
        ((2, 3, 5, 8), torch.tensor([3, 4, 5, 6, 7])),  # shared positions, heads dim
        ((2, 3, 5, 8), torch.tensor([[[0, 1, 2, 3, 4]], [[10, 11, 12, 13, 14]]])),  # per batch, broadcast over heads
        ((1, 4, 64), torch.tensor([2044, 2045, 2046, 2047])),  # a KV-cache offset near the end
    ]
    for seed, (shape, positions) in enumerate(cases):
        x = _uniform(shape, 10 + seed)
        out = impl.call(rope_forward, shape[-1], 2048, x, positions)
        expect.close(
            out,
            rope_oracle(x, positions),
            f"RoPE output for x of shape {list(shape)}",
            **_tolerance(int(positions.max())),
            alternatives=_rope_mistakes(x, positions),
        )


@ROPE.hidden
def test_rope_equals_matrix_form(impl):
    "the efficient form equals multiplying each vector by the block-diagonal matrix"
    x, positions = _uniform((5, 32), 20), torch.tensor([0, 1, 17, 300, 1023])
    expected = torch.stack([matrix_oracle(32, int(m)) @ v.double() for m, v in zip(positions, x, strict=True)])
    expect.close(
        impl.call(rope_forward, 32, 1024, x, positions),
        expected,
        "RoPE against the matrix form",
        **_tolerance(1023),
    )


@ROPE.hidden
def test_rope_invariances(impl):
    "q·k depends only on the offset; norms are kept; position 0 changes nothing"
    q, k = _uniform((1, 32), 30), _uniform((1, 32), 31)
    scores = []
    for shift in (0, 5, 200):
        rq = impl.call(rope_forward, 32, 512, q, torch.tensor([3 + shift]))
        rk = impl.call(rope_forward, 32, 512, k, torch.tensor([10 + shift]))
        scores.append(float((rq * rk).sum()))
    expect.that(
        max(scores) - min(scores) < 1e-3,
        f"q·k at positions (3, 10), (8, 15), (203, 210) gave {[round(s, 5) for s in scores]}; "
        "RoPE makes it depend only on the offset 7",
    )
    x = _uniform((3, 7, 16), 32)
    positions = torch.arange(7) * 13
    out = impl.call(rope_forward, 16, 128, x, positions)
    expect.close(out.norm(dim=-1), x.norm(dim=-1), "the length of each rotated vector", atol=1e-4)
    zero = impl.call(rope_forward, 16, 128, x, torch.zeros(7, dtype=torch.long))
    expect.close(zero, x, "RoPE at position 0", atol=1e-6)


@ROPE.hidden
def test_rope_dtypes(impl):
    "bfloat16 in, bfloat16 out; float32 in, float32 out (cos/sin kept in float32 buffers)"
    x, positions = _uniform((2, 6, 16), 40), torch.tensor([1, 50, 2, 3, 99, 7])
    out = impl.call(rope_forward, 16, 128, x.bfloat16(), positions)
    expect.tensor(out, "the output", shape=x.shape)
    expect.that(out.dtype == torch.bfloat16, f"RoPE returns {out.dtype} for a bfloat16 input; cast back to x.dtype")
    expect.close(out, rope_oracle(x.bfloat16(), positions), "the output for a bfloat16 input", atol=2e-2, rtol=2e-2)
    exact = rope_oracle(x.bfloat16(), positions)
    excess = (out.double() - exact).abs() - _rounded_once(exact)
    expect.that(
        bool((excess <= 0).all()),
        f"for a bfloat16 input the output is off the exact rotation by up to {float(excess.max()):.2g} more than "
        "one rounding to bfloat16: it was computed in bfloat16; compute in float32 (x.float(), the float32 "
        "tables) and convert only the result back to x.dtype",
    )
    summary = impl.call(rope_summary, 16, 128)
    for name in ("cos", "sin"):
        expect.that(name in summary["buffers"], f"no buffer `{name}`: precompute cos and sin once, in __init__")


@ROPE.hidden
def test_rope_rejects_bad_input(impl):
    "odd d_k and x.shape[-1] != d_k raise ValueError; positions outside 0..max_seq_len-1 raise IndexError naming max_seq_len"
    outcome = impl.call(rope_construct_outcome, 7, 16)
    expect.that(
        outcome["raised"] == "ValueError",
        f"RoPE(7, 16) {'raised ' + outcome['raised'] if outcome['raised'] else 'was built'}; "
        "an odd d_k has no pairs to rotate: raise ValueError with a clear message",
    )
    for width in (6, 10):
        outcome = impl.call(rope_forward_outcome, 8, 16, _uniform((2, width), 42), torch.tensor([0, 1]))
        expect.that(
            outcome["raised"] == "ValueError",
            f"RoPE(8, 16) on x of shape [2, {width}] "
            + (f"raised {outcome['raised']}" if outcome["raised"] else "returned a result")
            + "; if x.shape[-1] != d_k, raise ValueError",
        )
    for bad in (40, -1, 16):  # 16 = max_seq_len itself last: an off-by-one bound lets torch's own IndexError fire
        outcome = impl.call(rope_forward_outcome, 8, 16, _uniform((2, 8), 41), torch.tensor([0, bad]))
        expect.that(
            outcome["raised"] == "IndexError",
            f"RoPE(8, max_seq_len=16) with position {bad} "
            + (f"raised {outcome['raised']}" if outcome["raised"] else "returned a result")
            + "; raise IndexError: there is no cos/sin row for it"
            + (" (negative positions would wrap around silently)" if bad < 0 else ""),
        )
        expect.that(
            "max_seq_len" in outcome["message"],
            f"RoPE(8, max_seq_len=16) with position {bad} raised IndexError({outcome['message']!r}); its "
            "message must name max_seq_len"
            + (
                ": position max_seq_len itself has no row, so the test is position >= max_seq_len "
                "(this error came from indexing the table, not from your check)"
                if bad == 16
                else ""
            ),
        )


@ROPE.hidden
def test_rope_leaves_x_unchanged(impl):
    "forward leaves x unchanged (no in-place writes into the caller's tensor)"
    x, positions = _uniform((2, 5, 8), 43), torch.tensor([0, 3, 1, 7, 2])
    got = impl.call(rope_forward_input, 8, 16, x, positions)
    expect.close(
        got["output"],
        rope_oracle(x, positions),
        "RoPE(8, 16)(x, positions)",
        **_tolerance(7),
        alternatives=_rope_mistakes(x, positions),
    )
    expect.that(
        not got["x_changed"],
        "RoPE's forward changed the x it was given (an in-place write such as "
        "x[..., 0::2] = ...): the caller still needs x; write the result into a new tensor and leave x unchanged",
    )


# The gradient of x: RoPE is a rotation, x' = R x, so the gradient of x is R^T g = R(-m theta) g, the upstream
# gradient g rotated back: the float64 oracle at the negated positions. Float32 backward through the element-wise
# form rounds as the forward does: the forward's tolerance at the largest position (module docstring).
@ROPE.hidden
def test_rope_gradient_reaches_x(impl):
    "backward through RoPE gives x the upstream gradient rotated back (the inverse rotation)"
    x, positions = _uniform((2, 3, 5, 16), 48), torch.tensor([5, 0, 2, 30, 9])
    grad_output = _uniform(x.shape, 49)
    got = impl.call(rope_forward_backward, 16, 32, x, positions, grad_output)
    expect.close(
        got["output"],
        rope_oracle(x, positions),
        "RoPE(16, 32)(x, positions)",
        **_tolerance(30),
        alternatives=_rope_mistakes(x, positions),
    )
    grads = got.get("grads")
    reached = got.get("requires_grad") and isinstance(grads, dict) and bool(grads["input"].count_nonzero())
    expect.that(
        reached,
        "no gradient reaches x: is it computed from x.detach(), .data or under torch.no_grad()? RoPE(16, 32)'s "
        "output "
        + ("is" if got.get("requires_grad") else "does not require grad, so it is")
        + " cut off from x, and attention could not train the layers that make q and k",
    )
    expect.close(
        expect.gradients(got, "RoPE")["input"],
        rope_oracle(grad_output, -positions),
        "the gradient of x through RoPE(16, 32)",
        **_tolerance(30),
        hint="RoPE is a rotation, so the gradient of x is the upstream gradient rotated back, by -m * theta_i",
    )


@ROPE.hidden
def test_rope_tables_from_float64_angles(impl):
    "cos and sin come from angles computed in float64: exact to float32 rounding even at position 4095"
    x = _uniform((3, 8, 64), 44)
    positions = torch.tensor([4095, 4000, 3999, 3071, 2047, 1234, 4090, 3333])
    expect.close(
        impl.call(rope_forward, 64, 4096, x, positions),
        rope_oracle(x, positions),
        "RoPE(64, 4096)(x, positions) at positions up to 4095",
        **PRECISE,
        hint="Compute theta_i and the angles m * theta_i in float64 (not from rope_frequencies' float32 "
        "values: theta rounded to float32 is off by ~1e-4 radians at m = 4000, and so is an angle "
        "computed in float32), then convert the finished cos and sin tables to float32.",
    )


@ROPE.hidden
def test_rope_uses_base(impl):
    "the constructor's base is used: theta_i = base^(-2i/d_k) for base 500 and 500000 (Llama 3's)"
    x, positions = _uniform((2, 5, 16), 45), torch.tensor([0, 3, 17, 60, 99])
    for base in (500.0, 500000.0):
        expect.close(
            impl.call(rope_forward, 16, 128, x, positions, base),
            rope_oracle(x, positions, base),
            f"RoPE(16, 128, base={base:g})(x, positions)",
            **_tolerance(99),
            alternatives=[
                (
                    rope_oracle(x, positions, 10000.0),
                    f"it ignores the base argument ({base:g}) and uses 10000: theta_i = base^(-2i/d_k) with the "
                    "constructor's base",
                ),
                *_rope_mistakes(x, positions, base),
            ],
        )


@ROPE.hidden
def test_rope_long_tables(impl):
    "max_seq_len = 10000, beyond the notebook's 2048: tables of 10000 rows, right at positions up to 9999"
    d_k, max_seq_len = 8, 10000
    summary = impl.call(rope_summary, d_k, max_seq_len)
    for name in ("cos", "sin"):
        shape = summary.get("buffers", {}).get(name, {}).get("shape")
        expect.that(
            shape == [max_seq_len, d_k // 2],
            f"RoPE({d_k}, {max_seq_len}) has a buffer `{name}` of shape {shape}, expected {[max_seq_len, d_k // 2]}: "
            "one row per position up to max_seq_len (a table made once for a fixed length and sliced stops there)",
        )
    x, positions = _uniform((2, 4, d_k), 46), torch.tensor([9999, 8192, 4096, 9000])
    expect.close(
        impl.call(rope_forward, d_k, max_seq_len, x, positions),
        rope_oracle(x, positions),
        f"RoPE({d_k}, {max_seq_len})(x, positions) at positions up to 9999",
        **_tolerance(9999),
        alternatives=_rope_mistakes(x, positions),
    )


@ROPE.hidden
def test_rope_forward_reads_the_buffers(impl):
    "forward reads the buffers cos and sin, the tensors that module.to(device) moves (not copies kept elsewhere)"
    x, positions = _uniform((3, 8), 47), torch.tensor([0, 1, 5])
    expected = rope_oracle(x, positions)
    expect.close(
        impl.call(rope_forward_moved, 8, 16, x, positions),
        -expected,
        "RoPE(8, 16) after its buffers were replaced, as module.to(device) replaces them, by their negatives",
        **_tolerance(5),
        alternatives=[
            (
                expected,
                "forward does not read the buffers `cos` and `sin`: it uses tables kept elsewhere (plain attributes, "
                "or tables made in forward), which module.to(device) leaves behind; index self.cos and self.sin",
            )
        ],
    )


# --- Exercise 5 --------------------------------------------------------------------------


@HALVES.visible
def test_halves_permutation_values(impl):
    "p = [0, 2, 4, ..., 1, 3, 5, ...]: even coordinates first, then odd"
    expected = _rope.split_order(8)
    got = expect.tensor(impl.call(halves_permutation, 8), "halves_permutation(8)", shape=(8,))
    expect.that(not got.is_floating_point(), "return a LongTensor of indices")
    expect.that(
        got.dtype == torch.long,
        f"halves_permutation(8) has dtype {got.dtype}; return a LongTensor "
        "(torch.int64), the dtype of torch.arange and of index tensors",
    )
    expect.that(
        torch.equal(got.long(), expected),
        f"halves_permutation(8) = {got.tolist()}, expected {expected.tolist()}"
        + (
            ": that is the inverse permutation (it maps halves back to interleaved)"
            if torch.equal(got.long(), torch.argsort(expected))
            else ""
        ),
    )


@HALVES.hidden
def test_halves_permutation_converts_conventions(impl):
    "split-halves RoPE of x[..., p] equals interleaved RoPE of x, permuted by p"
    # The split-halves side is Hugging Face Llama's own rotation, float32 tables included (``llama_rope_halves``).
    for d_k in (2, 16, 64, 256):  # 256: wider than the notebook's 128
        p = expect.tensor(impl.call(halves_permutation, d_k), f"halves_permutation({d_k})", shape=(d_k,)).long()
        x, positions = _uniform((3, 5, d_k), d_k), torch.tensor([0, 3, 8, 100, 7])
        expect.close(
            llama_rope_halves(x[..., p], positions),
            rope_oracle(x, positions)[..., p],
            f"split-halves RoPE of x[..., p] against interleaved RoPE of x, permuted (d_k={d_k})",
            **_tolerance(100),
        )


# --- Exercises 6 and 7: ALiBi ----------------------------------------------------------------
# Oracles: Hugging Face's BLOOM (``build_alibi_tensor``, Press et al.'s rule as BLOOM runs it: it stores slope * j
# per key and leaves the constant -slope * i per query row to softmax's shift invariance) for the slopes and, through
# softmax, for the bias; the closed form 2^(-8h/n) for powers of two; the bias by Python loops over (h, i, j) on
# BLOOM's slopes; invariances. Tolerances: see the module docstring.


def bloom_slopes(n_heads: int) -> torch.Tensor:
    """Hugging Face BLOOM's slopes (float32), read off its public ALiBi tensor: entry j of head h is slope_h * j, so
    j = 1 gives the slope itself, unrounded (a product with 1)."""
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    alibi = build_alibi_tensor(torch.ones(1, 2, dtype=torch.long), n_heads, torch.float32)  # [heads, 1, 2]
    return alibi[:, 0, 1].clone()  # a tensor of its own, not a strided view of the [heads, 1, 2] one


def alibi_slopes_oracle(n_heads: int) -> list[float]:
    """BLOOM's slopes as Python floats (each float32 value exactly), for the float64 oracles of the bias."""
    return bloom_slopes(n_heads).tolist()


def alibi_bias_oracle(slopes, q_len: int, k_len: int, keys=None) -> torch.Tensor:
    """bias[h, r, j] = -slope_h * |i - j|, with i = k_len - q_len + r, by loops, in float64; for the key columns
    ``keys`` only (all of them by default)."""
    keys = range(k_len) if keys is None else keys
    rows = [
        [[-slope * abs(k_len - q_len + r - j) for j in keys] for r in range(q_len)] for slope in slopes
    ]  # row r is the query at position i = k_len - q_len + r
    return torch.tensor(rows, dtype=torch.float64).reshape(len(slopes), q_len, len(keys))


def _slope_mistakes(n: int) -> list:
    h = torch.arange(1, n + 1, dtype=torch.float64)
    naive = 2.0 ** (-8.0 * h / n)
    return [
        (naive.flip(0), "the slopes are reversed: head 1 gets the largest slope, 2^(-8/n), and they shrink from there"),
        (2.0 ** (-8.0 * (h - 1) / n), "h starts at 1, so the first slope is 2^(-8/n), not 1"),
        (2.0 ** (-h / n), "the ratio between neighbouring slopes is 2^(-8/n), not 2^(-1/n)"),
        (2.0 ** (8.0 * h / n), "the exponent is negative: slopes are 2^(-8h/n), all below 1"),
        (
            naive,
            f"{n} is not a power of two: take the {2 ** int(math.floor(math.log2(n)))} slopes of the largest "
            "power of two below it, then every other slope of twice that many heads (h = 1, 3, 5, ...)",
        ),
        (
            torch.tensor(sorted(alibi_slopes_oracle(n), reverse=True), dtype=torch.float64),
            "the order: first the slopes of the largest power of two m below n, then the extra ones (not sorted together)",
        ),
    ]


@SLOPES.visible
def test_alibi_slopes_powers_of_two(impl):
    "8 and 16 heads: 2^(-8h/n), h = 1..n; 12 heads: the 8-head slopes, then 2^(-0.5), 2^(-1.5), ...; float32"
    for n in (8, 16, 12):
        got = expect.tensor(impl.call(alibi_slopes, n), f"alibi_slopes({n})", shape=(n,), dtype=torch.float32)
        expected = torch.tensor(alibi_slopes_oracle(n), dtype=torch.float64)
        expect.close(got, expected, f"alibi_slopes({n})", atol=0.0, rtol=1e-5, alternatives=_slope_mistakes(n))


@SLOPES.hidden
def test_alibi_slopes_other_counts(impl):
    "any number of heads: the paper's rule for non-powers of two, compared with Hugging Face BLOOM's slopes"
    for n in (1, 2, 3, 6, 12, 20, 32, 112):
        got = expect.tensor(impl.call(alibi_slopes, n), f"alibi_slopes({n})", shape=(n,), dtype=torch.float32)
        expect.close(
            got,
            bloom_slopes(n),
            f"alibi_slopes({n}) against Hugging Face BLOOM's",
            atol=0.0,
            rtol=1e-5,
            alternatives=_slope_mistakes(n),
        )


@SLOPES.hidden
def test_alibi_slopes_geometric(impl):
    "for a power of two, each slope is the previous one times 2^(-8/n) (a geometric sequence)"
    for n in (4, 64):
        slopes = expect.tensor(impl.call(alibi_slopes, n), f"alibi_slopes({n})", shape=(n,)).double()
        ratios = slopes[1:] / slopes[:-1]
        expect.close(
            ratios,
            torch.full((n - 1,), 2.0 ** (-8.0 / n), dtype=torch.float64),
            f"the ratios of neighbouring slopes for {n} heads",
            atol=0.0,
            rtol=1e-5,
            hint=f"each slope is the previous one times 2^(-8/{n})",
        )
        expect.close(
            slopes[:1],
            torch.tensor([2.0 ** (-8.0 / n)], dtype=torch.float64),
            f"the first of {n} slopes",
            atol=0.0,
            rtol=1e-5,
            hint="the first slope is 2^(-8/n) (h = 1)",
        )


ALIBI_BIAS_TOL = {"atol": 1e-6, "rtol": 1e-6}  # one float32 slope times an exact distance (module docstring)


def _bias_mistakes(n: int, q_len: int, k_len: int) -> list:
    slopes = alibi_slopes_oracle(n)
    right = alibi_bias_oracle(slopes, q_len, k_len)
    i = (k_len - q_len + torch.arange(q_len, dtype=torch.float64))[:, None]
    j = torch.arange(k_len, dtype=torch.float64)[None, :]
    s = torch.tensor(slopes, dtype=torch.float64)[:, None, None]
    top_left = -s * (torch.arange(q_len, dtype=torch.float64)[:, None] - j).abs()
    return [
        (-right, "the sign: the bias is a penalty, -slope * distance, never positive"),
        (
            -s * (j - i),
            "the distance is i - j for a key j before the query i (a penalty there); "
            "keys after the query get -slope * |i - j|",
        ),
        (-s * (i - j), "keys after the query (j > i) get -slope * |i - j| too, not a positive bias"),
        (right.flip(0), "the heads are in reverse order: head h takes alibi_slopes(n_heads)[h]"),
        (
            top_left,
            "the queries are the last q_len positions (i = k_len - q_len + r), as with a KV cache, "
            "not positions 0 .. q_len - 1",
        ),
    ]


@ALIBI.visible
def test_alibi_bias_square(impl):
    "bias[h, i, j] = -slope_h * |i - j| for 4 heads and 6 positions, as float32 [heads, q_len, k_len]"
    got = expect.tensor(impl.call(alibi_bias, 4, 6, 6), "alibi_bias(4, 6, 6)", shape=(4, 6, 6), dtype=torch.float32)
    expect.that(
        not torch.equal(got[0], got[-1]),
        "alibi_bias(4, 6, 6) gives every head the same bias: head h has its own slope, alibi_slopes(n_heads)[h]",
    )
    expect.close(
        got,
        alibi_bias_oracle(alibi_slopes_oracle(4), 6, 6),
        "alibi_bias(4, 6, 6)",
        atol=1e-6,
        rtol=1e-6,
        alternatives=_bias_mistakes(4, 6, 6),
    )


@ALIBI.hidden
def test_alibi_bias_cached_queries(impl):
    "fewer queries than keys (a KV cache, up to 1,500 keys), and a number of heads that is not a power of two"
    for n, q_len, k_len in [(8, 1, 9), (6, 3, 10), (12, 5, 5), (2, 7, 40), (3, 2, 1500)]:
        got = expect.tensor(
            impl.call(alibi_bias, n, q_len, k_len),
            f"alibi_bias({n}, {q_len}, {k_len})",
            shape=(n, q_len, k_len),
            dtype=torch.float32,
        )
        expect.close(
            got,
            alibi_bias_oracle(alibi_slopes_oracle(n), q_len, k_len),
            f"alibi_bias({n}, {q_len}, {k_len})",
            atol=1e-6,
            rtol=1e-6,
            alternatives=_bias_mistakes(n, q_len, k_len),
        )


@ALIBI.hidden
def test_alibi_bias_many_keys(impl):
    "12,000 keys, beyond the notebook's 10,000: the bias is built for the lengths asked"
    n, q_len, k_len = 2, 2, 12000
    got = expect.tensor(impl.call(alibi_bias, n, q_len, k_len), f"alibi_bias({n}, {q_len}, {k_len})")
    expect.that(
        tuple(got.shape) == (n, q_len, k_len),
        f"alibi_bias({n}, {q_len}, {k_len}) has shape {list(got.shape)}, expected {[n, q_len, k_len]}"
        + (
            ": it stops short of the lengths asked, as positions or distances made once for a fixed length and "
            "sliced do; build them for q_len and k_len"
            if got.dim() == 3 and (got.shape[1] < q_len or got.shape[2] < k_len)
            else ""
        ),
    )
    expect.close(
        got,
        alibi_bias_oracle(alibi_slopes_oracle(n), q_len, k_len),
        f"alibi_bias({n}, {q_len}, {k_len})",
        atol=1e-6,
        rtol=1e-6,
        alternatives=_bias_mistakes(n, q_len, k_len),
    )


@ALIBI.hidden
def test_alibi_bias_far_positions(impl):
    "2 queries at positions near 12,000, 12 heads: each bias is one float32 product of a slope and an exact distance"
    # 12 heads: slopes 2^-0.5, 2^-1.5, ... whose products with i and j round. 12,000 keys, as the check above: far
    # enough for the rounding to show, and a [k_len, k_len] table of distances sliced to the last rows (576 MB) fits.
    n, q_len, k_len = 12, 2, 12000
    what = f"alibi_bias({n}, {q_len}, {k_len})"
    got = expect.tensor(impl.call(alibi_bias, n, q_len, k_len), what, shape=(n, q_len, k_len), dtype=torch.float32)
    # Compared on the first and the last 256 keys (far from the queries, and next to them), where the loop oracle
    # stays fast; the cancellation shows next to the queries, where the bias is small and the terms are not.
    keys = torch.cat([torch.arange(256), torch.arange(k_len - 256, k_len)])
    expected = alibi_bias_oracle(alibi_slopes_oracle(n), q_len, k_len, keys=keys.tolist())
    got = got[:, :, keys]
    error = (got.double() - expected).abs()
    if not bool((error <= ALIBI_BIAS_TOL["atol"] + ALIBI_BIAS_TOL["rtol"] * expected.abs()).all()):
        # Products slope * i and slope * j near 8,500 are 2^-10 apart in float32: their difference is off by that much.
        largest_term_step = max(alibi_slopes_oracle(n)) * k_len * 2.0**-23
        expect.that(
            float(error.max()) > 2 * largest_term_step,
            f"{what} is off by up to {float(error.max()):.3g} near the diagonal, where the bias is small: slope * i "
            "and slope * j were rounded in float32 separately (values near 8,500, 0.001 apart) before their difference "
            "was taken, so the small distances lost their digits; take the distance |i - j| first (exact in "
            "integers) and multiply it by the slope once",
        )
    expect.close(got, expected, what, **ALIBI_BIAS_TOL)


@ALIBI.hidden
def test_alibi_bias_float32_whatever_the_default_dtype(impl):
    "float32 even when torch's default dtype is float64 (torch.set_default_dtype)"
    n, q_len, k_len = 4, 3, 7
    what = f"alibi_bias({n}, {q_len}, {k_len}) under torch.set_default_dtype(torch.float64)"
    got = expect.tensor(impl.call(alibi_bias_default_float64, n, q_len, k_len), what, shape=(n, q_len, k_len))
    expect.that(
        got.dtype == torch.float32,
        f"{what} returns {got.dtype}; the bias is float32 whatever the default dtype: the distances were made in "
        "torch.get_default_dtype() (a floating arange without dtype=, or torch.get_default_dtype() itself), which "
        "promotes the float32 slopes; take the distances from integer positions, then .float()",
    )
    expect.close(got, alibi_bias_oracle(alibi_slopes_oracle(n), q_len, k_len), what, **ALIBI_BIAS_TOL)


@ALIBI.hidden
def test_alibi_bias_matches_bloom(impl):
    "with a causal mask, softmax(scores + bias) equals the same with Hugging Face BLOOM's ALiBi tensor"
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    n, length = 8, 24
    scores = _uniform((n, length, length), 50) * 4
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    bloom = build_alibi_tensor(torch.ones(1, length, dtype=torch.long), n, torch.float32)  # [heads, 1, length]
    got = expect.tensor(
        impl.call(alibi_bias, n, length, length),
        f"alibi_bias({n}, {length}, {length})",
        shape=(n, length, length),
    )
    ours = (scores + got).masked_fill(~causal, float("-inf")).softmax(-1)
    theirs = (scores + bloom).masked_fill(~causal, float("-inf")).softmax(-1)
    expect.close(
        ours,
        theirs,
        "causal attention weights with your bias, against BLOOM's",
        atol=1e-5,
        hint="BLOOM adds slope_h * j; yours, -slope_h * (i - j), differs by -slope_h * i in each row, "
        "which softmax ignores, so the weights must agree",
    )


@ALIBI.hidden
def test_alibi_bias_invariances(impl):
    "depends only on i - j; zero on the diagonal; symmetric; a longer sequence extends it; constant head ratios"
    n, length = 8, 33
    bias = expect.tensor(
        impl.call(alibi_bias, n, length, length),
        f"alibi_bias({n}, {length}, {length})",
        shape=(n, length, length),
    ).double()
    expect.close(
        bias[:, 1:, 1:],
        bias[:, :-1, :-1],
        "the bias moved one step along its diagonals",
        atol=1e-6,
        hint="it must depend on i - j only",
    )
    expect.close(
        bias.diagonal(dim1=1, dim2=2),
        torch.zeros(n, length, dtype=torch.float64),
        "the diagonal (i = j)",
        atol=0.0,
        hint="a key at the query's own position has distance 0",
    )
    expect.close(
        bias.transpose(1, 2),
        bias,
        "the transposed bias",
        atol=1e-6,
        hint="keys after the query get -slope * |i - j|, the same as keys as far before it",
    )
    off = ~torch.eye(length, dtype=torch.bool)
    ratios = bias[1:][:, off] / bias[:-1][:, off]
    expect.close(
        ratios,
        torch.full_like(ratios, 2.0 ** (-8.0 / n)),
        "bias[h + 1] / bias[h] off the diagonal",
        atol=0.0,
        rtol=1e-5,
        hint="each head's bias is the previous head's times 2^(-8/n)",
    )
    longer = expect.tensor(
        impl.call(alibi_bias, n, 2 * length, 2 * length),
        f"alibi_bias({n}, {2 * length}, {2 * length})",
        shape=(n, 2 * length, 2 * length),
    )
    expect.close(
        longer[:, :length, :length],
        bias,
        f"the first {length} rows and columns of alibi_bias({n}, "
        f"{2 * length}, {2 * length}) against alibi_bias({n}, {length}, {length})",
        atol=1e-6,
        hint="a longer sequence must extend the bias, not change it",
    )


# ---------------------------------------------------------------------------------------------------------------
# Adapters: the only code in this module that touches the student's objects. They run beside the student's code
# (in the sandboxed worker while grading, in the kernel for the notebook's own test cells), build and call the
# student's classes and functions on the inputs a check gives, and return plain results; they compute and report,
# never judge. A check calls one by reference, ``impl.call(name, ...)``; only functions marked ``@adapter`` can be.
#
# Adapters for notebook 03: rotary position embeddings and ALiBi.


@adapter
def rotation_matrix(ns, angle):
    return need(ns, "rotation_matrix")(angle)


@adapter
def rope_frequencies(ns, d_k: int, base: float):
    return need(ns, "rope_frequencies")(d_k, base)


@adapter
def rope_frequencies_outcome(ns, d_k: int):
    return outcome(need(ns, "rope_frequencies"), d_k)


@adapter
def rope_matrix(ns, d_k: int, position: int, base: float):
    return need(ns, "rope_matrix")(d_k, position, base)


@adapter
def rope_summary(ns, d_k: int, max_seq_len: int):
    module = need(ns, "RoPE")(d_k, max_seq_len)
    return summary(module)


@adapter
def rope_forward(ns, d_k: int, max_seq_len: int, x, token_positions, base: float = 10000.0):
    return need(ns, "RoPE")(d_k, max_seq_len, base)(x, token_positions)


@adapter
def rope_forward_backward(ns, d_k: int, max_seq_len: int, x, token_positions, grad_output):
    """The output of RoPE on a copy of ``x`` that requires grad, whether it requires grad, and, after
    ``output.backward(grad_output)``, the gradient of x as ``grads["input"]`` (zeros when none reached it)."""
    module = need(ns, "RoPE")(d_k, max_seq_len)
    result = forward_backward_inputs(module, grad_output, {"input": x}, token_positions)
    output = result["output"]
    result["requires_grad"] = bool(isinstance(output, torch.Tensor) and output.requires_grad)
    return result


@adapter
def rope_forward_moved(ns, d_k: int, max_seq_len: int, x, token_positions):
    """The output after the module's buffers were replaced, as ``module.to(device)`` replaces them
    (``Module._apply``), by new tensors: their negatives. Forward that reads ``self.cos`` and ``self.sin`` follows."""
    module = need(ns, "RoPE")(d_k, max_seq_len)
    module._apply(torch.neg)
    return module(x, token_positions)


@adapter
def rope_forward_input(ns, d_k: int, max_seq_len: int, x, token_positions):
    """The output, and whether forward changed ``x``: its values, or its version counter (an in-place write of
    the same values counts too)."""
    before, version = x.clone(), x._version
    output = need(ns, "RoPE")(d_k, max_seq_len)(x, token_positions)
    return {"output": output, "x_changed": x._version != version or not torch.equal(x, before)}


@adapter
def rope_forward_shapes(ns, d_k: int, max_seq_len: int, x, token_positions) -> list:
    """The shape of every tensor that ``forward`` makes (the module is built outside the recording)."""
    module = need(ns, "RoPE")(d_k, max_seq_len)
    return shapes_made(module, x, token_positions)["shapes"]


@adapter
def rope_construct_outcome(ns, d_k: int, max_seq_len: int):
    return outcome(need(ns, "RoPE"), d_k, max_seq_len)


@adapter
def rope_forward_outcome(ns, d_k: int, max_seq_len: int, x, token_positions):
    return outcome(need(ns, "RoPE")(d_k, max_seq_len), x, token_positions)


@adapter
def halves_permutation(ns, d_k: int):
    return need(ns, "halves_permutation")(d_k)


@adapter
def alibi_slopes(ns, n_heads: int):
    return need(ns, "alibi_slopes")(n_heads)


# Exercise 6 as Hugging Face BLOOM computes it (float32), given to the student's ``alibi_bias`` under the name
# ``alibi_slopes`` so that Exercise 7 is graded on its own; the checks' oracles use the same slopes. The notebook's
# own demo imports BLOOM's module in this process too.
_course_alibi_slopes = bloom_slopes


@adapter
def alibi_bias(ns, n_heads: int, q_len: int, k_len: int):
    """The student's ``alibi_bias``, with the course's ``alibi_slopes`` in their namespace while it runs."""
    with given(ns, alibi_slopes=_course_alibi_slopes):
        return need(ns, "alibi_bias")(n_heads, q_len, k_len)


@adapter
def alibi_bias_default_float64(ns, n_heads: int, q_len: int, k_len: int):
    """``alibi_bias`` as ``alibi_bias`` above, run with torch's default dtype set to float64 (restored afterwards)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        with given(ns, alibi_slopes=_course_alibi_slopes):
            return need(ns, "alibi_bias")(n_heads, q_len, k_len)
    finally:
        torch.set_default_dtype(previous)
