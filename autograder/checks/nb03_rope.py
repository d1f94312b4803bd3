"""Checks for notebook 03: rotary position embeddings (interleaved pairs).

Oracles, built here without the student's code:
- a 2x2 rotation as ``torch.linalg.matrix_exp`` of the generator [[0, -a], [a, 0]];
- the rotation of pairs as multiplication by exp(i * m * theta) in complex numbers
  (``torch.view_as_complex``), in float64;
- the split-halves convention written in the style of Hugging Face's ``rotate_half``;
- invariances: relative positions only, norms kept, position 0 is the identity.

Tolerances: float32 results against float64 oracles at atol 2e-4 + 4e-7 * (largest
position) with inputs in [-1, 1]: float32 rounds the angle m * theta to ~1.2e-7 relative,
so the error grows with m (measured near m = 2047: 8e-5 at d = 64, 1.5e-4 at d = 128,
for both the cos/sin and the complex formulation; bound there: 1e-3); small exact cases 1e-5;
bfloat16 outputs atol/rtol 2e-2 (values up to sqrt(2), bf16 keeps 8 bits).
"""

from __future__ import annotations

import math

import torch

from autograder import expect
from autograder.checks._seeds import seeded
from autograder.exercises import Exercise
from autograder.reference import rope as reference_rope

ROTATION = Exercise("rotation_matrix", "Exercise 1: a 2x2 rotation", points=1)
FREQUENCIES = Exercise("rope_frequencies", "Exercise 2: the frequencies", points=1)
MATRIX = Exercise("rope_matrix", "Exercise 3: RoPE as a block-diagonal matrix", points=2)
ROPE = Exercise("rope", "Exercise 4: an efficient RoPE module", points=3)
HALVES = Exercise("halves_permutation", "Exercise 5: interleaved vs split halves", points=2)
EXERCISES = [ROTATION, FREQUENCIES, MATRIX, ROPE, HALVES]

SMALL = {"atol": 1e-5, "rtol": 1e-5}


_gen, _ = seeded(3000)


def _uniform(shape, seed):
    return torch.rand(tuple(shape), generator=_gen(seed)) * 2 - 1


def _tolerance(largest_position: int) -> dict:
    return {"atol": 2e-4 + 4e-7 * largest_position, "rtol": 0.0}


# --- oracles -----------------------------------------------------------------------------


def rotation_oracle(angle: torch.Tensor) -> torch.Tensor:
    angle = angle.double()
    generator = torch.zeros(*angle.shape, 2, 2, dtype=torch.float64)
    generator[..., 0, 1], generator[..., 1, 0] = -angle, angle
    return torch.linalg.matrix_exp(generator)


frequencies_oracle = reference_rope.frequencies
rope_oracle = reference_rope.rope  # interleaved RoPE by complex multiplication, in float64


def rope_halves_oracle(x, positions, base=10000.0):
    """Split-halves RoPE (pair i = (i, i + d/2)), written like HF's rotate_half."""
    d_k = x.shape[-1]
    angles = positions.double()[..., None] * frequencies_oracle(d_k, base)
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    x = x.double()
    rotate_half = torch.cat([-x[..., d_k // 2:], x[..., : d_k // 2]], -1)
    return x * cos + rotate_half * sin


def matrix_oracle(d_k: int, position: int, base: float = 10000.0) -> torch.Tensor:
    blocks = rotation_oracle(position * frequencies_oracle(d_k, base))
    return torch.block_diag(*blocks)


def _halves_perm(d_k):
    return torch.cat([torch.arange(0, d_k, 2), torch.arange(1, d_k, 2)])


def _rope_mistakes(x, positions, base=10000.0):
    d_k = x.shape[-1]
    return [
        (rope_oracle(x, -positions, base), "the sin terms have the wrong sign: x0' = x0 cos - x1 sin, x1' = x0 sin + x1 cos"),
        (rope_halves_oracle(x, positions, base),
         "it rotates the pairs (i, i + d_k/2) (split halves); this course pairs neighbours: (0, 1), (2, 3), ..."),
        (rope_oracle(x, positions, base, theta=torch.tensor([base ** (-i / d_k) for i in range(d_k // 2)], dtype=torch.float64)),
         "the frequencies are off: pair i turns at base^(-2i/d_k), not base^(-i/d_k)"),
        (rope_oracle(x, torch.arange(x.shape[-2]).expand(positions.shape) if positions.dim() else positions, base),
         "it ignores token_positions and uses 0, 1, 2, ...; use the positions it is given"),
    ]


# --- Exercise 1 --------------------------------------------------------------------------


@ROTATION.visible
def test_rotation_values(impl):
    "rotation_matrix(a) = [[cos a, -sin a], [sin a, cos a]]"
    angle = torch.tensor([0.0, 0.3, -1.2, math.pi / 2, 2.5])
    expected = rotation_oracle(angle)
    expect.close(
        impl.rotation_matrix(angle), expected.float(), "rotation_matrix(angles) for 5 angles", **SMALL,
        alternatives=[(expected.transpose(-1, -2), "the matrix is transposed: the minus sign belongs on sin in the top-right entry")],
    )


@ROTATION.hidden
def test_rotation_shapes_and_dtypes(impl):
    "a scalar angle gives [2, 2]; angles of shape [...] give [..., 2, 2], in the angles' dtype"
    for seed, shape, dtype in [(0, (), torch.float32), (1, (2, 3), torch.float32), (2, (4,), torch.float64)]:
        angle = (_uniform(shape, seed) * 4).to(dtype)
        out = expect.tensor(impl.rotation_matrix(angle), f"rotation_matrix of angles shaped {list(shape)}",
                            shape=(*shape, 2, 2), dtype=dtype)
        expect.close(out, rotation_oracle(angle).to(dtype), f"rotation_matrix of angles shaped {list(shape)}", **SMALL)


@ROTATION.hidden
def test_rotation_composes(impl):
    "R(a)^T R(b) = R(b - a): the property RoPE is built on"
    a, b = _uniform((6,), 3) * 3, _uniform((6,), 4) * 3
    ra, rb, rdiff = impl.rotation_matrix(a), impl.rotation_matrix(b), impl.rotation_matrix(b - a)
    expect.close(ra.transpose(-1, -2) @ rb, rdiff, "R(a)^T R(b) compared with R(b - a)", **SMALL)


# --- Exercise 2 --------------------------------------------------------------------------


@FREQUENCIES.visible
def test_frequencies_values(impl):
    "theta_i = base^(-2i/d_k) for i = 0 .. d_k/2 - 1, as float32"
    for d_k in (8, 64):
        expected = frequencies_oracle(d_k, 10000.0)
        got = expect.tensor(impl.rope_frequencies(d_k, 10000.0), f"rope_frequencies({d_k})",
                            shape=(d_k // 2,), dtype=torch.float32)
        i = torch.arange(d_k // 2, dtype=torch.float64)
        expect.close(
            got, expected, f"rope_frequencies({d_k})", atol=1e-7, rtol=1e-5,
            alternatives=[
                (10000.0 ** (-i / d_k), "the exponent is 2i/d_k, not i/d_k"),
                (10000.0 ** (2 * i / d_k), "the sign of the exponent: theta_i = base^(-2i/d_k) gets smaller with i"),
                (10000.0 ** (-2 * (i + 1) / d_k), "i starts at 0, so theta_0 = 1"),
            ],
        )


@FREQUENCIES.hidden
def test_frequencies_base_and_odd(impl):
    "the base argument is used, and an odd d_k raises ValueError"
    expect.close(impl.rope_frequencies(10, 500.0), frequencies_oracle(10, 500.0), "rope_frequencies(10, base=500)",
                 atol=1e-7, rtol=1e-5)
    outcome = impl.rope_frequencies_outcome(7)
    expect.that(outcome["raised"] == "ValueError",
                f"rope_frequencies(7) {'raised ' + outcome['raised'] if outcome['raised'] else 'returned'}; "
                "an odd d_k cannot be split into pairs, so raise ValueError")


# --- Exercise 3 --------------------------------------------------------------------------


@MATRIX.visible
def test_matrix_blocks(impl):
    "rope_matrix is block-diagonal with R(position * theta_i) on the (2i, 2i+1) block"
    expected = matrix_oracle(8, 3)
    perm = _halves_perm(8)
    expect.close(
        impl.rope_matrix(8, 3, 10000.0), expected, "rope_matrix(8, position=3)", **SMALL,
        alternatives=[
            (expected.transpose(0, 1), "the blocks are transposed: the minus sign goes on sin in the upper-right entry"),
            (expected[perm][:, perm],
             "it pairs i with i + d_k/2; here pair i is the neighbours (2i, 2i+1)"),
        ],
    )


@MATRIX.hidden
def test_matrix_cases(impl):
    "position 0 is the identity; other sizes, positions and bases; orthogonal"
    for d_k, position, base in [(4, 0, 10000.0), (2, 7, 10000.0), (16, 100, 10000.0), (6, 5, 100.0)]:
        got = expect.tensor(impl.rope_matrix(d_k, position, base), f"rope_matrix({d_k}, {position})", shape=(d_k, d_k))
        expect.close(got, matrix_oracle(d_k, position, base), f"rope_matrix({d_k}, position={position}, base={base})",
                     **_tolerance(position))


# --- Exercise 4 --------------------------------------------------------------------------


@ROPE.visible
def test_rope_rotates_pairs(impl):
    "RoPE(x, positions) rotates each pair (2i, 2i+1) by position * theta_i"
    x, positions = _uniform((2, 6, 16), 0), torch.tensor([5, 0, 2, 9, 9, 1])
    out = expect.tensor(impl.rope_forward(16, 32, x, positions), "RoPE(16, 32)(x, positions)", dtype=torch.float32)
    expect.close(out, rope_oracle(x, positions), "RoPE(16, 32)(x, positions) for x of shape [2, 6, 16]",
                 **_tolerance(9), alternatives=_rope_mistakes(x, positions))


@ROPE.visible
def test_rope_buffers(impl):
    "cos and sin are non-persistent buffers of shape [max_seq_len, d_k // 2]; no parameters"
    summary = impl.rope_summary(8, 20)
    expect.that("parameters" in summary, "RoPE(8, 20) is not an nn.Module")
    expect.that(not summary["parameters"], f"RoPE has parameters {list(summary['parameters'])}; it has nothing to learn")
    for name in ("cos", "sin"):
        buffer = summary["buffers"].get(name)
        expect.that(buffer is not None and buffer["shape"] == [20, 4],
                    f"expected a buffer `{name}` of shape [20, 4]; found {summary['buffers']}")
        expect.that(not buffer["persistent"],
                    f"register `{name}` with persistent=False: it is recomputed, not saved in checkpoints")


@ROPE.visible
def test_rope_builds_no_rotation_matrix(impl):
    "forward builds no [d_k, d_k] matrix: the element-wise form of Section 5"
    x, positions = _uniform((2, 3, 5, 8), 30), torch.tensor([4, 0, 7, 1, 2])  # d_k = 8; no other axis is 8
    shapes = impl.rope_forward_shapes(8, 16, x, positions)
    square = [shape for shape in shapes if shape[-2:] == [8, 8]]
    expect.that(not square, f"this exercise's rule is: do not build [d_k, d_k] matrices in forward; your forward "
                            f"made tensors of shape {square[0] if square else ''} for d_k = 8: rotate the pairs "
                            "element-wise with the cos and sin tables instead")


@ROPE.hidden
def test_rope_with_heads_and_offsets(impl):
    "works with batch and head dimensions, positions shared or per batch, and large offsets"
    cases = [
        ((2, 3, 5, 8), torch.tensor([3, 4, 5, 6, 7])),                  # shared positions, heads dim
        ((2, 3, 5, 8), torch.tensor([[[0, 1, 2, 3, 4]], [[10, 11, 12, 13, 14]]])),  # per batch, broadcast over heads
        ((1, 4, 64), torch.tensor([2044, 2045, 2046, 2047])),             # a KV-cache offset near the end
    ]
    for seed, (shape, positions) in enumerate(cases):
        x = _uniform(shape, 10 + seed)
        out = impl.rope_forward(shape[-1], 2048, x, positions)
        expect.close(out, rope_oracle(x, positions), f"RoPE output for x of shape {list(shape)}",
                     **_tolerance(int(positions.max())), alternatives=_rope_mistakes(x, positions))


@ROPE.hidden
def test_rope_equals_matrix_form(impl):
    "the efficient form equals multiplying each vector by the block-diagonal matrix"
    x, positions = _uniform((5, 32), 20), torch.tensor([0, 1, 17, 300, 1023])
    expected = torch.stack([matrix_oracle(32, int(m)) @ v.double() for m, v in zip(positions, x, strict=True)])
    expect.close(impl.rope_forward(32, 1024, x, positions), expected, "RoPE against the matrix form",
                 **_tolerance(1023))


@ROPE.hidden
def test_rope_invariances(impl):
    "q·k depends only on the offset; norms are kept; position 0 changes nothing"
    q, k = _uniform((1, 32), 30), _uniform((1, 32), 31)
    scores = []
    for shift in (0, 5, 200):
        rq = impl.rope_forward(32, 512, q, torch.tensor([3 + shift]))
        rk = impl.rope_forward(32, 512, k, torch.tensor([10 + shift]))
        scores.append(float((rq * rk).sum()))
    expect.that(max(scores) - min(scores) < 1e-3,
                f"q·k at positions (3, 10), (8, 15), (203, 210) gave {[round(s, 5) for s in scores]}; "
                "RoPE makes it depend only on the offset 7")
    x = _uniform((3, 7, 16), 32)
    positions = torch.arange(7) * 13
    out = impl.rope_forward(16, 128, x, positions)
    expect.close(out.norm(dim=-1), x.norm(dim=-1), "the length of each rotated vector", atol=1e-4)
    zero = impl.rope_forward(16, 128, x, torch.zeros(7, dtype=torch.long))
    expect.close(zero, x, "RoPE at position 0", atol=1e-6)


@ROPE.hidden
def test_rope_dtypes(impl):
    "bfloat16 in, bfloat16 out; float32 in, float32 out (cos/sin kept in float32 buffers)"
    x, positions = _uniform((2, 6, 16), 40), torch.tensor([1, 50, 2, 3, 99, 7])
    out = impl.rope_forward(16, 128, x.bfloat16(), positions)
    expect.tensor(out, "the output", shape=x.shape)
    expect.that(out.dtype == torch.bfloat16, f"RoPE returns {out.dtype} for a bfloat16 input; cast back to x.dtype")
    expect.close(out, rope_oracle(x.bfloat16(), positions), "the output for a bfloat16 input", atol=2e-2, rtol=2e-2)
    summary = impl.rope_summary(16, 128)
    for name in ("cos", "sin"):
        expect.that(name in summary["buffers"], f"no buffer `{name}`: precompute cos and sin once, in __init__")


@ROPE.hidden
def test_rope_rejects_bad_input(impl):
    "odd d_k raises ValueError; positions outside 0..max_seq_len-1 raise IndexError"
    outcome = impl.rope_construct_outcome(7, 16)
    expect.that(outcome["raised"] == "ValueError",
                f"RoPE(7, 16) {'raised ' + outcome['raised'] if outcome['raised'] else 'was built'}; "
                "an odd d_k has no pairs to rotate: raise ValueError with a clear message")
    for bad in (16, 40, -1):
        outcome = impl.rope_forward_outcome(8, 16, _uniform((2, 8), 41), torch.tensor([0, bad]))
        expect.that(outcome["raised"] in ("IndexError", "ValueError"),
                    f"RoPE(8, max_seq_len=16) with position {bad} "
                    + (f"raised {outcome['raised']}" if outcome["raised"] else "returned a result")
                    + "; raise IndexError: there is no cos/sin row for it"
                    + (" (negative positions would wrap around silently)" if bad < 0 else ""))


# --- Exercise 5 --------------------------------------------------------------------------


@HALVES.visible
def test_halves_permutation_values(impl):
    "p = [0, 2, 4, ..., 1, 3, 5, ...]: even coordinates first, then odd"
    expected = _halves_perm(8)
    got = expect.tensor(impl.halves_permutation(8), "halves_permutation(8)", shape=(8,))
    expect.that(not got.is_floating_point(), "return a LongTensor of indices")
    expect.that(
        torch.equal(got.long(), expected),
        f"halves_permutation(8) = {got.tolist()}, expected {expected.tolist()}"
        + (": that is the inverse permutation (it maps halves back to interleaved)"
           if torch.equal(got.long(), torch.argsort(expected)) else ""),
    )


@HALVES.hidden
def test_halves_permutation_converts_conventions(impl):
    "split-halves RoPE of x[..., p] equals interleaved RoPE of x, permuted by p"
    for d_k in (2, 16, 64):
        p = expect.tensor(impl.halves_permutation(d_k), f"halves_permutation({d_k})", shape=(d_k,)).long()
        x, positions = _uniform((3, 5, d_k), d_k), torch.tensor([0, 3, 8, 100, 7])
        expect.close(rope_halves_oracle(x[..., p], positions), rope_oracle(x, positions)[..., p],
                     f"split-halves RoPE of x[..., p] against interleaved RoPE of x, permuted (d_k={d_k})",
                     **_tolerance(100))
