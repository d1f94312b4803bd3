"""Notebook 01's exercises, with their checks and adapters: tokens, embeddings and positions.

Oracles: ``torch.nn.functional.embedding`` and autograd through it; the sinusoidal
formula evaluated in float64 with the ``math`` module; sample statistics with bounds
far outside their sampling error.

Tolerances (float32 on any CPU):
- lookups copy numbers, so they are compared at 1e-6 (exact on every BLAS; the slack
  lets a one-hot matmul pass);
- sinusoidal values: 1e-4 + 2e-7 * (largest position). float32 rounds the angle
  p * w to about 1.2e-7 relative, so the error grows with p; measured worst cases with
  two common formulations: 5e-7 at p < 50, 3e-5 at p < 512 (bound: 2e-4). The text asks for the angles in
  float64, and one check holds it to that at positions near 20,000: 1e-5 (a float64 table rounded once is off
  by 3e-8 there; float32 angles by 6.8e-4, float32 frequencies alone by 4.6e-4);
- initialisation: sample std within 5% of the target on >= 64,000 draws (sampling
  error is 0.3%); extremes within 3 std (+1e-6). Truncation, not clamping: at most 1e-4 of the
  entries (24 of 240,000, the smallest table checked) within 1e-5 (relative) of ±3 std. A clamp puts there every
  draw beyond ±3 std, 2 * (1 - Phi(3)) = 0.27% of them (about 650 of 240,000, binomial sd 25); a truncated normal
  is continuous, so that band holds 2 * phi(3) / 0.9973 * 3e-5 = 2.7e-7 of its mass (0.07 expected entries), and
  float32 rounding at the cut (nn.init.trunc_normal_ clamps its inverse-CDF draw) adds about 1e-7 per entry
  (measured: 2 in 10^7 draws);
- the sinusoidal table's dtype: torch.get_default_dtype(), checked with the default set to float32 and to float64.

Sizes beyond the notebook's (its largest table has 1,024 rows): sinusoidal tables of 2,500 and 20,000 rows, a learned one
of 2,048 and an input layer at positions near 3,000, so that a table or a range of positions made once for a
fixed length and sliced fails. Token ids of any shape include an empty batch ([2, 0] gives [2, 0, embedding_dim]).

What the text says about state and devices is observed directly: the sinusoidal table is a non-persistent buffer
(not in the state_dict) that forward reads, so that ``module.to(device)`` moves what forward uses (the adapter
replaces the buffers as ``to`` does, through ``Module._apply``, with their negatives); the input layer's positions
are LongTensors on the device of ``token_ids`` (it runs on PyTorch's meta device, with a position table that
records the indices it is given: nn.Embedding on meta accepts CPU indices, so its output alone would not tell).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from autograder import expect
from autograder.adapters import adapter, forward_backward, load, need, outcome, summary
from autograder.exercises import Exercise
from autograder.rules import EMBEDDINGS, Rule

EMBEDDING = Exercise(
    "embedding",
    "an Embedding module from scratch",
    points=3,
    rules=(Rule("do not use nn.Embedding or F.embedding", EMBEDDINGS),),
)
SINUSOIDAL = Exercise("sinusoidal", "sinusoidal positional encoding", points=3)
LEARNED = Exercise(
    "learned_positions",
    "learned positional embeddings",
    points=2,
    rules=(Rule("do not reuse your Embedding, nn.Embedding or F.embedding", EMBEDDINGS, names=("Embedding",)),),
)
INPUT = Exercise("input_embedding", "token plus position", points=2)
EXERCISES = [EMBEDDING, SINUSOIDAL, LEARNED, INPUT]

LOOKUP_TOL = 1e-6
SEEDS = (0, 1, 2)

# A truncated normal keeps this fraction of the untruncated std: sqrt(1 - 2*a*phi(a)/(2*Phi(a)-1)) at a=3.
_phi3 = math.exp(-4.5) / math.sqrt(2 * math.pi)
_Phi3 = 0.5 * (1 + math.erf(3 / math.sqrt(2)))
TRUNCATED_STD_FACTOR = math.sqrt(1 - 6 * _phi3 / (2 * _Phi3 - 1))


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(1000 + seed)


def _random(shape, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=_generator(seed))


def _ids(high: int, shape, seed: int) -> torch.Tensor:
    return torch.randint(0, high, shape, generator=_generator(seed))


# At most this fraction of a truncated-normal table may lie on the cut (see the module docstring: a clamp puts 0.27%
# there, a truncated normal about 3e-7).
AT_CUT_LIMIT = 1e-4


def _check_init(weight, *, std: float, truncated: bool, what: str, rule: str):
    weight = expect.tensor(weight, what)
    sample_std, sample_mean = float(weight.std()), float(weight.mean())
    target = std * (TRUNCATED_STD_FACTOR if truncated else 1.0)
    expect.that(
        abs(sample_std / target - 1) < 0.05,
        f"{what} has standard deviation {sample_std:.4g}; expected about {target:.4g} ({rule})",
    )
    expect.that(abs(sample_mean) < 0.05 * std, f"{what} has mean {sample_mean:.3g}; expected about 0")
    if truncated:
        largest = float(weight.abs().max())
        expect.that(
            largest <= 3 * std * (1 + 1e-6),
            f"{what} has a value of magnitude {largest:.4g}, beyond 3 std = {3 * std:.4g}: "
            "the normal distribution must be truncated at ±3 std",
        )
        at_cut = int((weight.detach().double().abs() >= 3 * std * (1 - 1e-5)).sum())
        expect.that(
            at_cut <= AT_CUT_LIMIT * weight.numel(),
            f"{what} has {at_cut} of its {weight.numel():,} entries ({at_cut / weight.numel():.2%}) exactly at ±3 std: "
            "the normal draws beyond ±3 std were clamped (clipped) onto the bound. A truncated normal redraws them "
            "instead (nn.init.trunc_normal_, or draw again the entries outside ±3 std), so no value piles up at "
            "±3 std; clamping puts the 0.27% of draws beyond ±3 std there",
        )


def _expect_index_error(outcome: dict, what: str, position: int, max_len: int):
    expect.that(
        outcome.get("raised") == "IndexError",  # what the docstring says; the demo cell catches IndexError only
        f"{what} with position {position} (max_len={max_len}) "
        + (f"raised {outcome['raised']}" if outcome.get("raised") else "returned a result")
        + "; it must raise IndexError: a position outside 0..max_len-1 has no encoding"
        + (" (negative indices would silently wrap around to the end of the table)" if position < 0 else ""),
    )


# --- Exercise 1: Embedding ---------------------------------------------------------------


@EMBEDDING.visible
def test_embedding_parameters(impl):
    "Embedding has one trainable parameter `weight` of shape [num_embeddings, embedding_dim]"
    info = impl.call(embedding_summary, 11, 5)["summary"]
    expect.that("parameters" in info, "Embedding(11, 5) is not an nn.Module")
    expect.that(
        not any(kind == "Embedding" for kind in info["submodules"].values()),
        "do not wrap torch.nn.Embedding: build the table yourself from nn.Parameter",
    )
    expect.that(
        list(info["parameters"]) == ["weight"],
        f"Embedding(11, 5) has parameters {list(info['parameters'])}; expected exactly one, named "
        "`weight` (the name torch.nn.Embedding uses, so checkpoints load)",
    )
    expect.that(
        info["parameters"]["weight"] == [11, 5],
        f"weight has shape {info['parameters']['weight']}; expected [num_embeddings, embedding_dim] "
        "= [11, 5]: one row per token id",
    )
    expect.that(info["trainable"]["weight"], "weight does not require grad: it must be learned")


@EMBEDDING.visible
def test_embedding_lookup(impl):
    "forward(token_ids) returns the rows of weight, one per id"
    weight, ids = _random((13, 6), 0), _ids(13, (2, 7), 0)
    out = impl.call(embedding_forward, weight, ids)["output"]
    expect.close(
        out,
        F.embedding(ids, weight),
        "Embedding(13, 6)(token_ids) for token_ids of shape [2, 7]",
        atol=LOOKUP_TOL,
        alternatives=[
            (F.embedding(ids, weight) * math.sqrt(6), "it is scaled by sqrt(embedding_dim) although scale=False")
        ],
    )


@EMBEDDING.visible
def test_embedding_scale(impl):
    "with scale=True the rows are multiplied by sqrt(embedding_dim)"
    weight, ids = _random((9, 16), 1), _ids(9, (3, 4), 1)
    out = impl.call(embedding_forward, weight, ids, scale=True)["output"]
    expected = F.embedding(ids, weight) * math.sqrt(16)
    expect.close(
        out,
        expected,
        "Embedding(9, 16, scale=True)(token_ids)",
        atol=LOOKUP_TOL,
        rtol=1e-6,
        alternatives=[
            (F.embedding(ids, weight), "scale=True did not scale the rows"),
            (F.embedding(ids, weight) / math.sqrt(16), "it divides by sqrt(embedding_dim); multiply instead"),
            (F.embedding(ids, weight) * 16, "it multiplies by embedding_dim; the factor is sqrt(embedding_dim)"),
        ],
    )


@EMBEDDING.hidden
def test_embedding_any_shape(impl):
    "token ids of any shape (a single id, 1-D, 3-D) give [..., embedding_dim]"
    for seed, shape in zip(SEEDS, [(), (5,), (2, 3, 4)], strict=True):
        weight, ids = _random((17, 3 + seed), seed), _ids(17, shape, seed)
        out = impl.call(embedding_forward, weight, ids)["output"]
        expect.close(out, F.embedding(ids, weight), f"the output for token_ids of shape {list(shape)}", atol=LOOKUP_TOL)


@EMBEDDING.hidden
def test_embedding_empty_batch(impl):
    "an empty batch of ids, of shape [2, 0], gives an output of shape [2, 0, embedding_dim] (scale=False and True)"
    for scale in (False, True):
        got = impl.call(embedding_empty, 10, 4, [2, 0], scale)
        what = f"Embedding(10, 4, scale={scale})(token_ids) for token_ids of shape [2, 0] (an empty batch)"
        expect.that(
            not got["raised"],
            f"{what} raised {got['raised']}: {got['message']}. Ids of any shape include empty ones; a range check "
            "with token_ids.min() or .max() fails on an empty tensor (there is no smallest id to return): check "
            "every id instead, ((token_ids < 0) | (token_ids >= num_embeddings)).any(), or only when "
            "token_ids.numel() > 0",
        )
        expect.tensor(got["output"], what, shape=(2, 0, 4))


@EMBEDDING.hidden
def test_embedding_initialisation(impl):
    "weight starts truncated-normal (not clamped) at ±3 std, with std sqrt(2 / (num_embeddings + embedding_dim))"
    for seed in SEEDS:
        num, dim = 1500, 160 + 40 * seed  # 240,000 to 360,000 entries: enough to tell truncation from clamping
        weight = impl.call(embedding_summary, num, dim, seed)["weight"]
        _check_init(
            weight,
            std=math.sqrt(2 / (num + dim)),
            truncated=True,
            what=f"Embedding({num}, {dim}).weight at initialisation",
            rule="Xavier/Glorot: sqrt(2 / (num_embeddings + embedding_dim)), truncated at ±3 std",
        )


@EMBEDDING.hidden
def test_embedding_gradient(impl):
    "backward reaches only the rows that were looked up, and repeated ids add up"
    for seed, scale in zip(SEEDS, (False, True, False), strict=True):
        weight = _random((8, 4), seed).requires_grad_()
        ids = torch.tensor([[1, 1, 3], [3, 0, 1]])
        grad_output = _random((2, 3, 4), seed + 10)
        (F.embedding(ids, weight) * (2.0 if scale else 1.0) * grad_output).sum().backward()
        result = impl.call(embedding_forward, weight.detach(), ids, scale=scale, grad_output=grad_output)
        grads = expect.gradients(result, "weight.grad after backward")
        expect.close(
            grads.get("weight"),
            weight.grad,
            f"weight.grad after backward (scale={scale})",
            atol=1e-5,
            hint="Rows 2 and 4-7 were not used and must get zero gradient; row 1 was used three times.",
        )


# --- Exercise 2: sinusoidal positional encoding ------------------------------------------


def sinusoidal_table(max_len: int, d_model: int, positions=None) -> torch.Tensor:
    """pe[p, 2i] = sin(p / 10000^(2i/d)), pe[p, 2i+1] = cos(p / 10000^(2i/d)), in float64."""
    rows = range(max_len) if positions is None else positions.flatten().tolist()
    table = [
        [(math.sin if j % 2 == 0 else math.cos)(p / 10000 ** ((j - j % 2) / d_model)) for j in range(d_model)]
        for p in rows
    ]
    shape = (max_len,) if positions is None else tuple(positions.shape)
    return torch.tensor(table, dtype=torch.float64).reshape(*shape, d_model)


def _sinusoidal_tolerance(largest_position: int) -> float:
    return 1e-4 + 2e-7 * largest_position


def _sinusoidal_mistakes(max_len: int, d_model: int):
    p = torch.arange(max_len, dtype=torch.float64)[:, None]
    even = torch.arange(0, d_model, 2, dtype=torch.float64)
    halves = torch.cat([torch.sin(p / 10000 ** (even / d_model)), torch.cos(p / 10000 ** (even / d_model))], -1)
    j = torch.arange(d_model, dtype=torch.float64)
    pair = torch.div(j, 2, rounding_mode="floor")
    angle, angle_i = p / 10000 ** (2 * pair / d_model), p / 10000 ** (pair / d_model)
    use_sin = j % 2 == 0
    return [
        (
            torch.where(use_sin, torch.cos(angle), torch.sin(angle)),
            "sine and cosine are swapped: even columns 2i hold sin, odd columns 2i+1 hold cos",
        ),
        (
            halves[:, :d_model],
            "it puts all sines first and all cosines after; this course interleaves them: "
            "column 2i is sin, column 2i+1 is cos of the same frequency",
        ),
        (
            torch.where(use_sin, torch.sin(angle_i), torch.cos(angle_i)),
            "the frequencies are off: pair i uses 10000^(-2i/d_model) (the exponent is 2i/d_model, not i/d_model)",
        ),
        (
            torch.where(
                use_sin, torch.sin(p * 10000 ** (2 * pair / d_model)), torch.cos(p * 10000 ** (2 * pair / d_model))
            ),
            "the frequencies are inverted: divide the position by 10000^(2i/d_model)",
        ),
    ]


@SINUSOIDAL.visible
def test_sinusoidal_values(impl):
    "the table holds sin in even columns and cos in odd columns, pair i at frequency 10000^(-2i/d_model)"
    max_len, d_model = 50, 16
    out = impl.call(sinusoidal_forward, max_len, d_model, torch.arange(max_len))
    expect.close(
        out,
        sinusoidal_table(max_len, d_model),
        f"SinusoidalPositionalEncoding({max_len}, {d_model})(torch.arange({max_len}))",
        atol=_sinusoidal_tolerance(max_len),
        alternatives=_sinusoidal_mistakes(max_len, d_model),
    )


@SINUSOIDAL.visible
def test_sinusoidal_is_buffer(impl):
    "the table is a buffer named `pe` of shape [max_len, d_model]: no parameters, no gradient"
    info = impl.call(sinusoidal_summary, 20, 8)
    summary = info["summary"]
    expect.that("parameters" in summary, "SinusoidalPositionalEncoding(20, 8) is not an nn.Module")
    expect.that(
        not summary["parameters"],
        f"it has parameters {list(summary['parameters'])}: a fixed encoding is not learned, so "
        "register the table with register_buffer instead of nn.Parameter",
    )
    expect.that(
        summary["buffers"].get("pe", {}).get("shape") == [20, 8],
        f"expected a buffer `pe` of shape [20, 8]; found buffers {summary['buffers']}",
    )
    expect.that(not info["requires_grad"], "the encoding it returns requires grad; it must not")


@SINUSOIDAL.hidden
def test_sinusoidal_odd_and_other_sizes(impl):
    "odd d_model works: ceil(d/2) sine columns and floor(d/2) cosine columns"
    for max_len, d_model in [(30, 7), (64, 9), (12, 2), (40, 33)]:
        out = impl.call(sinusoidal_forward, max_len, d_model, torch.arange(max_len))
        expect.close(
            out,
            sinusoidal_table(max_len, d_model),
            f"the encoding with d_model={d_model}",
            atol=_sinusoidal_tolerance(max_len),
            alternatives=_sinusoidal_mistakes(max_len, d_model),
        )


@SINUSOIDAL.hidden
def test_sinusoidal_any_positions(impl):
    "positions of any shape and order (not just 0..n-1), up to max_len - 1"
    max_len = 512
    for seed, d_model in zip(SEEDS, (64, 10, 31), strict=True):
        positions = _ids(max_len, (3, 5), seed)
        positions[0, 0] = max_len - 1
        out = impl.call(sinusoidal_forward, max_len, d_model, positions)
        expect.close(
            out,
            sinusoidal_table(max_len, d_model, positions),
            f"the encoding of positions of shape [3, 5] (d_model={d_model})",
            atol=_sinusoidal_tolerance(max_len),
            hint="Look up the given positions; do not assume they are 0, 1, 2, ...",
        )


@SINUSOIDAL.hidden
def test_sinusoidal_out_of_range(impl):
    "positions outside 0..max_len-1 raise IndexError"
    for position in (16, 40, -1):
        outcome = impl.call(sinusoidal_out_of_range, 16, 4, torch.tensor([0, position]))
        _expect_index_error(outcome, "SinusoidalPositionalEncoding(16, 4)", position, 16)


@SINUSOIDAL.hidden
def test_sinusoidal_buffer_not_persistent(impl):
    "`pe` is a non-persistent buffer: it stays out of the state_dict, since it can always be recomputed"
    buffers = impl.call(sinusoidal_summary, 12, 6)["summary"]["buffers"]
    pe = buffers.get("pe")
    expect.that(pe is not None, f"expected a buffer `pe`; found buffers {buffers}")
    expect.that(
        not pe["persistent"],
        "`pe` is in the state_dict: it is a persistent buffer; register it with "
        "register_buffer('pe', table, persistent=False), so checkpoints do not carry a table that can be recomputed",
    )
    saved = sorted(name for name, buffer in buffers.items() if buffer["persistent"])
    expect.that(not saved, f"the state_dict holds the buffers {saved}; the module has nothing to save")


@SINUSOIDAL.hidden
def test_sinusoidal_forward_reads_the_buffer(impl):
    "forward reads the buffer `pe`, the tensor that module.to(device) moves (not a copy kept elsewhere)"
    max_len, d_model = 10, 6
    positions = torch.tensor([[3, 0], [9, 4]])
    out = impl.call(sinusoidal_forward_moved, max_len, d_model, positions)
    expected = sinusoidal_table(max_len, d_model, positions)
    expect.close(
        out,
        -expected,
        f"SinusoidalPositionalEncoding({max_len}, {d_model}) after its buffers were replaced, as module.to(device) "
        "replaces them, by their negatives",
        atol=_sinusoidal_tolerance(max_len),
        alternatives=[
            (
                expected,
                "forward does not read the buffer `pe`: it uses a copy of the table kept elsewhere (a plain "
                "attribute, or a table made in forward), which module.to(device) leaves behind; return rows of self.pe",
            )
        ],
    )


@SINUSOIDAL.hidden
def test_sinusoidal_default_dtype(impl):
    "the buffer `pe`, and so forward's result, has torch's default dtype (float32, and float64 when set so)"
    for default in ("float32", "float64"):
        got = impl.call(sinusoidal_dtypes, 20, 8, default)
        what = f"SinusoidalPositionalEncoding(20, 8) built with torch.get_default_dtype() = torch.{default}"
        expect.that(got["pe"] is not None, f"{what} has no buffer `pe`")
        expect.that(
            got["pe"] == f"torch.{default}",
            f"{what} has a buffer `pe` of dtype {got['pe']}; the table must have the default dtype, torch.{default}: "
            + (
                "a table computed in float64 must be converted at the end, .to(torch.get_default_dtype())"
                if got["pe"] == "torch.float64"
                else "convert it with .to(torch.get_default_dtype()) rather than to a fixed dtype"
            ),
        )
        expect.that(
            got["output"] == f"torch.{default}",
            f"{what} returns {got['output']} from forward; expected rows of `pe`, of dtype torch.{default}",
        )


@SINUSOIDAL.hidden
def test_sinusoidal_long_table(impl):
    "max_len = 2500, more than the notebook uses: the table has 2500 rows, the last ones right"
    max_len, d_model = 2500, 12
    positions = torch.tensor([2499, 1024, 2000, 7])
    got = impl.call(sinusoidal_long, max_len, d_model, positions)
    what = f"SinusoidalPositionalEncoding({max_len}, {d_model})(positions) at positions up to {max_len - 1}"
    expect.that(
        got["pe"] == [max_len, d_model],
        f"SinusoidalPositionalEncoding({max_len}, {d_model}) has a buffer `pe` of shape {got['pe']}, expected "
        f"{[max_len, d_model]}: build the table for max_len positions (a table made once for a fixed length and "
        "sliced stops there)",
    )
    expect.that(not got["raised"], f"{what} raised {got['raised']}: {got['message']}")
    expect.close(
        got["output"],
        sinusoidal_table(max_len, d_model, positions),
        what,
        atol=_sinusoidal_tolerance(max_len),
    )


# A table computed in float64 and rounded once to float32 is off by at most half a float32 step of values <= 1,
# 6e-8 (measured at positions near 20,000, d_model 64: 3e-8 with exp/log and pow frequencies, float64 throughout).
# Angles p * w formed in float32 are off by about p * 6e-8 (float32 keeps 24 bits): measured 6.8e-4 there, and 4.6e-4
# with only the frequencies in float32. This bound lies between the two, 300 times the first and 1/46 of the second.
FLOAT64_TABLE_TOL = 1e-5


@SINUSOIDAL.hidden
def test_sinusoidal_computed_in_float64(impl):
    "max_len = 20000: the angles p * w are computed in float64, so the last rows are right to float32's rounding"
    max_len, d_model = 20000, 64
    positions = torch.tensor([19999, 19998, 19990, 17001, 12345, 5])
    got = impl.call(sinusoidal_long, max_len, d_model, positions)
    what = f"SinusoidalPositionalEncoding({max_len}, {d_model})(positions) at positions up to {max_len - 1}"
    expect.that(not got["raised"], f"{what} raised {got['raised']}: {got['message']}")
    value = expect.tensor(got["output"], what, shape=(len(positions), d_model))
    expected = sinusoidal_table(max_len, d_model, positions)
    error = float((value.detach().double() - expected).abs().max())
    if FLOAT64_TABLE_TOL < error <= _sinusoidal_tolerance(max_len):
        expect.fail(
            f"{what} is off by up to {error:.2g} (tolerance {FLOAT64_TABLE_TOL:g}): the angles p * w were computed in "
            "float32 (torch.arange's default dtype), which keeps about 7 significant digits, so an angle near 20,000 "
            "is off by about 1e-3; compute the positions, the frequencies and the angles in float64, and convert only "
            "the finished table to torch.get_default_dtype()"
        )
    expect.close(value, expected, what, atol=FLOAT64_TABLE_TOL)


# --- Exercise 3: learned positional embeddings --------------------------------------------


@LEARNED.visible
def test_learned_parameter(impl):
    "one trainable parameter `weight` of shape [max_len, d_model]"
    summary = impl.call(learned_summary, 24, 6)["summary"]
    expect.that("parameters" in summary, "LearnedPositionalEmbedding(24, 6) is not an nn.Module")
    expect.that(
        summary["parameters"] == {"weight": [24, 6]},
        f"LearnedPositionalEmbedding(24, 6) has parameters {summary['parameters']}; expected one, "
        "`weight`, of shape [max_len, d_model] = [24, 6]. Learned positions are an nn.Parameter, "
        "not a buffer",
    )
    expect.that(summary["trainable"]["weight"], "weight does not require grad: it must be learned")


@LEARNED.visible
def test_learned_lookup(impl):
    "forward(positions) returns the rows of weight at those positions"
    weight, positions = _random((24, 6), 3), torch.tensor([[5, 0, 23], [7, 7, 1]])
    out = impl.call(learned_forward, weight, positions)["output"]
    expect.close(
        out,
        F.embedding(positions, weight),
        "LearnedPositionalEmbedding(24, 6)(positions)",
        atol=LOOKUP_TOL,
        alternatives=[(weight[: positions.shape[-1]].expand(2, 3, 6), "it ignores the positions it is given")],
    )


@LEARNED.hidden
def test_learned_initialisation(impl):
    "weight starts normal with mean 0 and std 0.02 (Hugging Face's GPT-2 and nanoGPT)"
    for seed in SEEDS:
        weight = impl.call(learned_summary, 1024, 64, seed)["weight"]
        _check_init(
            weight,
            std=0.02,
            truncated=False,
            what="LearnedPositionalEmbedding(1024, 64).weight",
            rule="normal with std 0.02",
        )


@LEARNED.hidden
def test_learned_any_positions_and_gradient(impl):
    "any shape of positions; backward reaches only the rows used"
    for seed, shape in zip(SEEDS, [(9,), (2, 5), (2, 2, 3)], strict=True):
        weight = _random((32, 5), seed).requires_grad_()
        positions = _ids(32, shape, seed)
        grad_output = _random((*shape, 5), seed + 20)
        (F.embedding(positions, weight) * grad_output).sum().backward()
        result = impl.call(learned_forward, weight.detach(), positions, grad_output=grad_output)
        expect.close(
            result["output"],
            F.embedding(positions, weight),
            f"the output for positions of shape {list(shape)}",
            atol=LOOKUP_TOL,
        )
        grads = expect.gradients(result, "weight.grad after backward")
        expect.close(grads.get("weight"), weight.grad, "weight.grad after backward", atol=1e-5)


@LEARNED.hidden
def test_learned_long_table(impl):
    "max_len = 2048, twice the notebook's longest: weight has 2048 rows, and position 2047 is looked up"
    max_len, d_model = 2048, 4
    shape = impl.call(learned_summary, max_len, d_model)["summary"].get("parameters", {}).get("weight")
    expect.that(
        shape == [max_len, d_model],
        f"LearnedPositionalEmbedding({max_len}, {d_model}).weight has shape {shape}, expected {[max_len, d_model]}: "
        "one row per position up to max_len, whatever max_len is",
    )
    weight, positions = _random((max_len, d_model), 6), torch.tensor([[2047, 1500], [1024, 0]])
    expect.close(
        impl.call(learned_forward, weight, positions)["output"],
        F.embedding(positions, weight),
        f"LearnedPositionalEmbedding({max_len}, {d_model})(positions) at positions up to 2047",
        atol=LOOKUP_TOL,
    )


@LEARNED.hidden
def test_learned_out_of_range(impl):
    "positions outside 0..max_len-1 raise IndexError (never clamp)"
    for position in (10, 11, -1):
        outcome = impl.call(learned_out_of_range, 10, 3, torch.tensor([[1, position]]))
        _expect_index_error(outcome, "LearnedPositionalEmbedding(10, 3)", position, 10)


# --- Exercise 4: token plus position -----------------------------------------------------


def _input_oracle(token_weight, position_weight, ids, start_pos, grad_output):
    token_weight = token_weight.clone().requires_grad_()
    position_weight = position_weight.clone().requires_grad_()
    positions = torch.arange(start_pos, start_pos + ids.shape[-1])
    out = F.embedding(ids, token_weight) + F.embedding(positions, position_weight)
    (out * grad_output).sum().backward()
    return out.detach(), token_weight.grad, position_weight.grad


def _input_case(impl, seed, shape, start_pos, *, vocab=20, max_len=16, d_model=6):
    token_weight, position_weight = _random((vocab, d_model), seed), _random((max_len, d_model), seed + 5)
    ids = _ids(vocab, shape, seed)
    grad_output = _random((*shape, d_model), seed + 30)
    expected = _input_oracle(token_weight, position_weight, ids, start_pos or 0, grad_output)
    got = impl.call(input_embedding, token_weight, position_weight, ids, start_pos, grad_output)
    return got, expected, (token_weight, position_weight, ids)


@INPUT.visible
def test_input_adds_token_and_position(impl):
    "output = token_embedding(ids) + position_embedding(0..seq-1), positions along the last axis"
    got, (expected, _, _), (tw, pw, ids) = _input_case(impl, 0, (2, 5), None)
    positions_on_batch = torch.arange(ids.shape[0])[:, None].expand_as(ids)
    expect.close(
        got["output"],
        expected,
        "InputEmbedding(...)(token_ids) for token_ids of shape [2, 5]",
        atol=LOOKUP_TOL,
        alternatives=[
            (
                F.embedding(ids, tw) + F.embedding(positions_on_batch, pw),
                "positions run along the batch axis; they must count along the last (sequence) axis",
            ),
        ],
    )


@INPUT.hidden
def test_input_start_pos(impl):
    "start_pos shifts the positions: start_pos, ..., start_pos + seq - 1"
    for seed, start in zip(SEEDS, (3, 7, 11), strict=True):
        got, (expected, _, _), _ = _input_case(impl, seed, (2, 4), start)
        expect.close(
            got["output"],
            expected,
            f"the output with start_pos={start}",
            atol=LOOKUP_TOL,
            hint="Positions are start_pos, start_pos + 1, ... (used when generating one token at a time).",
        )


@INPUT.hidden
def test_input_shapes(impl):
    "works for one sequence [seq], a batch [batch, seq] with batch != seq, and [a, b, seq]"
    for seed, shape in zip(SEEDS, [(7,), (4, 3), (2, 3, 5)], strict=True):
        got, (expected, _, _), _ = _input_case(impl, seed, shape, 0)
        expect.close(got["output"], expected, f"the output for token_ids of shape {list(shape)}", atol=LOOKUP_TOL)


@INPUT.hidden
def test_input_submodules_and_gradients(impl):
    "the tables are submodules `token_embedding` and `position_embedding`, and both get gradients"
    got, (_, token_grad, position_grad), _ = _input_case(impl, 1, (3, 4), 2)
    names = set(got["summary"]["parameters"])
    expect.that(
        names == {"token_embedding.weight", "position_embedding.weight"},
        f"InputEmbedding has parameters {sorted(names)}; store the two modules as "
        "self.token_embedding and self.position_embedding",
    )
    grads = expect.gradients(got, "InputEmbedding")
    expect.close(grads["token_embedding.weight"], token_grad, "the token table's gradient", atol=1e-5)
    expect.close(
        grads["position_embedding.weight"],
        position_grad,
        "the position table's gradient",
        atol=1e-5,
        hint="Each position's row collects the gradient of every sequence in the batch.",
    )


@INPUT.hidden
def test_input_positions_on_the_device_of_token_ids(impl):
    "the positions are a LongTensor made on the device of token_ids (checked on PyTorch's meta device)"
    for shape, start in (((2, 5), 0), ((3,), 4)):
        got = impl.call(input_embedding_on_meta, 20, 16, 6, list(shape), start)
        what = f"InputEmbedding on the meta device, token_ids of shape {list(shape)}, start_pos={start}"
        expect.that(not got["raised"], f"{what} raised {got['raised']}: {got['message']}")
        expect.that(bool(got["positions"]), f"{what} never called position_embedding")
        for seen in got["positions"]:
            expect.that(
                seen["device"] == "meta",
                f"{what} gave position_embedding positions on the {seen['device']} device, not on the device of "
                "token_ids (meta): build them with torch.arange(..., device=token_ids.device)",
            )
            expect.that(
                seen["dtype"] == "torch.int64",
                f"{what} gave position_embedding positions of dtype {seen['dtype']}; build them as a LongTensor "
                "(torch.long, torch.arange's default for whole numbers)",
            )
        expect.that(got["device"] == "meta", f"{what} returned a tensor on the {got['device']} device, expected meta")


@INPUT.hidden
def test_input_far_positions(impl):
    "positions near 3000 (start_pos = 2990 with a table of 3000 rows), beyond the notebook's 256"
    vocab, max_len, d_model, start = 20, 3000, 6, 2990
    token_weight, position_weight = _random((vocab, d_model), 7), _random((max_len, d_model), 8)
    ids = _ids(vocab, (2, 6), 7)
    got = impl.call(input_embedding_recorded, token_weight, position_weight, ids, start)
    what = f"InputEmbedding(...)(token_ids, start_pos={start}) for token_ids of shape [2, 6] and {max_len} positions"
    wanted = list(range(start, start + 6))
    for seen in got["positions"]:
        given = torch.tensor(seen["values"]).flatten().tolist()
        expect.that(
            bool(given) and given == wanted * (len(given) // len(wanted)),  # [seq], or repeated for the batch
            f"{what} gave position_embedding the positions {given}; expected {wanted}: build the positions "
            "start_pos, ..., start_pos + seq - 1 for each call (a range made once for a fixed length and sliced "
            "stops there)",
        )
    expect.that(not got["raised"], f"{what} raised {got['raised']}: {got['message']}")
    positions = torch.arange(start, start + 6)
    expect.close(
        got["output"],
        F.embedding(ids, token_weight) + F.embedding(positions, position_weight),
        what,
        atol=LOOKUP_TOL,
    )


# ---------------------------------------------------------------------------------------------------------------
# Adapters: the only code in this module that touches the student's objects. They run beside the student's code
# (in the sandboxed worker while grading, in the kernel for the notebook's own test cells), build and call the
# student's classes and functions on the inputs a check gives, and return plain results; they compute and report,
# never judge. A check calls one by reference, ``impl.call(name, ...)``; only functions marked ``@adapter`` can be.
#
# Adapters for notebook 01: tokens, embeddings and positions.


@adapter
def embedding_summary(ns, num_embeddings: int, embedding_dim: int, seed: int = 0):
    torch.manual_seed(seed)
    module = need(ns, "Embedding")(num_embeddings, embedding_dim)
    return {"summary": summary(module), "weight": getattr(module, "weight", None)}


@adapter
def embedding_forward(ns, weight, token_ids, scale=False, grad_output=None):
    num_embeddings, embedding_dim = weight.shape
    module = load(need(ns, "Embedding")(num_embeddings, embedding_dim, scale=scale), {"weight": weight})
    return forward_backward(module, grad_output, token_ids)


@adapter
def embedding_empty(ns, num_embeddings: int, embedding_dim: int, shape: list, scale: bool):
    """What ``Embedding(num_embeddings, embedding_dim, scale=scale)`` raised or returned for empty ids of ``shape``."""
    module = need(ns, "Embedding")(num_embeddings, embedding_dim, scale=scale)
    made = []
    result = outcome(lambda: made.append(module(torch.zeros(shape, dtype=torch.int64))))
    return result | {"output": made[0] if made else None}


@adapter
def sinusoidal_summary(ns, max_len: int, d_model: int):
    module = need(ns, "SinusoidalPositionalEncoding")(max_len, d_model)
    output = module(torch.arange(max_len))
    return {"summary": summary(module), "requires_grad": bool(getattr(output, "requires_grad", False))}


@adapter
def sinusoidal_forward(ns, max_len: int, d_model: int, positions):
    return need(ns, "SinusoidalPositionalEncoding")(max_len, d_model)(positions)


@adapter
def sinusoidal_forward_moved(ns, max_len: int, d_model: int, positions):
    """The module's output after its buffers were replaced, as ``module.to(device)`` replaces them
    (``Module._apply``), by new tensors: their negatives. Forward that reads ``self.pe`` follows them."""
    module = need(ns, "SinusoidalPositionalEncoding")(max_len, d_model)
    module._apply(torch.neg)
    return module(positions)


@adapter
def sinusoidal_long(ns, max_len: int, d_model: int, positions):
    """The shape of the buffer ``pe`` (None without one), and what ``forward(positions)`` raised or returned."""
    module = need(ns, "SinusoidalPositionalEncoding")(max_len, d_model)
    pe = dict(module.named_buffers()).get("pe")
    made = []
    result = outcome(lambda: made.append(module(positions)))
    return result | {"pe": None if pe is None else list(pe.shape), "output": made[0] if made else None}


@adapter
def sinusoidal_dtypes(ns, max_len: int, d_model: int, default_dtype: str):
    """The dtypes of the buffer ``pe`` (None without one) and of ``forward(torch.arange(max_len))``, the module built
    and called with torch's default dtype set to ``torch.<default_dtype>`` (restored afterwards)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, default_dtype))
    try:
        module = need(ns, "SinusoidalPositionalEncoding")(max_len, d_model)
        pe = dict(module.named_buffers()).get("pe")
        output = module(torch.arange(max_len))
    finally:
        torch.set_default_dtype(previous)
    return {
        "pe": None if pe is None else str(pe.dtype),
        "output": str(output.dtype) if isinstance(output, torch.Tensor) else type(output).__name__,
    }


@adapter
def sinusoidal_out_of_range(ns, max_len: int, d_model: int, positions):
    return outcome(need(ns, "SinusoidalPositionalEncoding")(max_len, d_model), positions)


@adapter
def learned_summary(ns, max_len: int, d_model: int, seed: int = 0):
    torch.manual_seed(seed)
    module = need(ns, "LearnedPositionalEmbedding")(max_len, d_model)
    return {"summary": summary(module), "weight": getattr(module, "weight", None)}


@adapter
def learned_forward(ns, weight, positions, grad_output=None):
    max_len, d_model = weight.shape
    module = load(need(ns, "LearnedPositionalEmbedding")(max_len, d_model), {"weight": weight})
    return forward_backward(module, grad_output, positions)


@adapter
def learned_out_of_range(ns, max_len: int, d_model: int, positions):
    return outcome(need(ns, "LearnedPositionalEmbedding")(max_len, d_model), positions)


@adapter
def input_embedding(ns, token_weight, position_weight, token_ids, start_pos=None, grad_output=None):
    """InputEmbedding around torch's own nn.Embedding tables, so only this exercise is tested."""
    module = need(ns, "InputEmbedding")(
        nn.Embedding.from_pretrained(token_weight.clone(), freeze=False),
        nn.Embedding.from_pretrained(position_weight.clone(), freeze=False),
    )
    kwargs = {} if start_pos is None else {"start_pos": start_pos}
    result = forward_backward(module, grad_output, token_ids, **kwargs)
    result["summary"] = summary(module)
    return result


class _RecordingEmbedding(nn.Embedding):
    """nn.Embedding that notes the device and dtype of the indices it is given."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen = []

    def forward(self, ids):
        values = None if ids.device.type == "meta" else ids.tolist()
        self.seen.append({"device": str(ids.device), "dtype": str(ids.dtype), "values": values})
        return super().forward(ids)


@adapter
def input_embedding_on_meta(ns, vocab: int, max_len: int, d_model: int, ids_shape: list, start_pos: int):
    """InputEmbedding with both tables on PyTorch's meta device, called on meta token ids: what it raised, the
    device and dtype of the positions it gave the position table, and its output's device."""
    positions = _RecordingEmbedding(max_len, d_model, device="meta")
    module = need(ns, "InputEmbedding")(nn.Embedding(vocab, d_model, device="meta"), positions)
    token_ids = torch.zeros(ids_shape, dtype=torch.long, device="meta")
    made = []
    result = outcome(lambda: made.append(module(token_ids, start_pos=start_pos)))
    return result | {"positions": positions.seen, "device": str(getattr(made[0], "device", "")) if made else ""}


@adapter
def input_embedding_recorded(ns, token_weight, position_weight, token_ids, start_pos: int):
    """InputEmbedding around torch's tables, the position table recording what it is given: what the call raised,
    the positions, and the output."""
    positions = _RecordingEmbedding.from_pretrained(position_weight.clone())
    module = need(ns, "InputEmbedding")(nn.Embedding.from_pretrained(token_weight.clone()), positions)
    made = []
    result = outcome(lambda: made.append(module(token_ids, start_pos=start_pos)))
    return result | {"positions": positions.seen, "output": made[0] if made else None}
