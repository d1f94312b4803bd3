"""Notebook 04's exercises, with their checks and adapters: softmax, scaled dot-product attention and masks.

Mask convention: boolean, True = this query may attend to this key (the polarity of
``torch.nn.functional.scaled_dot_product_attention``). A query whose keys are all
masked gets zero weights and a zero output, as torch's function gives.

Oracles: ``torch.softmax`` and ``F.scaled_dot_product_attention`` (float32 here), masks
from ``torch.tril`` and comparisons, and invariances computed on the student's own
outputs (future tokens, padding, permutations).

Where the masks are made, which outputs do not show on a CPU-only grader: the mask functions run on PyTorch's
meta device (``causal_mask(n, device="meta")``, token ids on meta), and report their result's device, or what they
raised (a tensor made on the CPU cannot be combined with meta tensors), and the CPU tensors of more than one
element that torch functions made meanwhile (a mask made on the CPU and then moved; a scalar is no part of a mask).
``causal_mask(n)`` with no device also runs under ``with torch.device("meta")``: None means PyTorch's default
device. Lengths go beyond any of the notebook's (1100 positions), so a mask cached up to a fixed length is seen.
Pad ids are not always the smallest (pad_id 5 among ids 0 to 9: padding is ``!= pad_id``, not ``> pad_id``), and
left padding leaves a query whose visible keys are all padding with a row of False (no diagonal added).

Tolerances: float32 outputs of order 1 at atol 1e-5 + rtol 1e-5 (sums of <= 16 products);
probabilities at atol 1e-6; masks compared exactly.
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F

from autograder import expect
from autograder.adapters import adapter, calls_of, need, outcome
from autograder.exercises import Exercise
from autograder.notebooks._seeds import seeded
from autograder.rules import ATTENTIONS, LOG_SOFTMAXES, SOFTMAXES, Rule

SOFTMAX = Exercise(
    "softmax",
    "a numerically stable softmax",
    points=1,
    rules=(
        Rule(
            "do not call torch.softmax, F.softmax, Tensor.softmax or any other ready-made softmax (log_softmax, "
            "logsumexp, logcumsumexp and logaddexp included)",
            SOFTMAXES + LOG_SOFTMAXES + ATTENTIONS,
        ),
    ),
)
WEIGHTS = Exercise(
    "attention_weights",
    "attention weights",
    points=2,
    rules=(
        Rule(
            "do not call torch.softmax, F.softmax or F.scaled_dot_product_attention",
            SOFTMAXES + LOG_SOFTMAXES + ATTENTIONS,
        ),
    ),
)
SDPA = Exercise(
    "scaled_dot_product_attention",
    "scaled dot-product attention",
    points=2,
    rules=(Rule("use your attention_weights; do not call F.scaled_dot_product_attention", ATTENTIONS),),
)
CAUSAL = Exercise("causal_mask", "the causal mask", points=1)
PADDING = Exercise("padding_mask", "the padding mask", points=1)
DECODER = Exercise("decoder_mask", "causal plus padding", points=1)
CROSS = Exercise("cross_attention_mask", "the cross-attention mask", points=1)
EXERCISES = [SOFTMAX, WEIGHTS, SDPA, CAUSAL, PADDING, DECODER, CROSS]

TOL = {"atol": 1e-5, "rtol": 1e-5}
PROB = {"atol": 1e-6, "rtol": 1e-5}


_gen, _randn = seeded(4000)


def _mask(shape, seed, keep_one=True):
    mask = torch.rand(*shape, generator=_gen(seed)) > 0.4
    if keep_one:
        mask[..., 0] = True  # every query keeps at least one key
    return mask


def oracle_weights(q, k, mask=None):
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return torch.nan_to_num(weights, nan=0.0)


def _weight_mistakes(q, k, mask=None):
    d_k = q.shape[-1]
    raw = q @ k.transpose(-1, -2)
    mistakes = [
        (
            torch.softmax(raw, -1) if mask is None else torch.softmax(raw.masked_fill(~mask, float("-inf")), -1),
            "the scores are not scaled: divide q·k by sqrt(d_k)",
        ),
        (
            torch.softmax(raw / d_k, -1)
            if mask is None
            else torch.softmax((raw / d_k).masked_fill(~mask, float("-inf")), -1),
            "the scores are divided by d_k; divide by sqrt(d_k)",
        ),
        (
            torch.softmax(raw / math.sqrt(d_k), -2)
            if mask is None
            else torch.nan_to_num(torch.softmax((raw / math.sqrt(d_k)).masked_fill(~mask, float("-inf")), -2)),
            "the softmax runs over the queries; each query's weights over the keys (the last dimension) must sum to 1",
        ),
    ]
    if mask is not None:
        scaled = raw / math.sqrt(d_k)
        mistakes += [
            (
                torch.nan_to_num(torch.softmax(scaled.masked_fill(mask, float("-inf")), -1)),
                "the mask is inverted: True means the query MAY attend to that key",
            ),
            (
                torch.softmax(scaled, -1) * mask,
                "the mask is applied after the softmax, so the rows no longer sum to 1; fill masked scores with -inf before it",
            ),
        ]
    return mistakes


# --- Exercise 1: softmax -----------------------------------------------------------------


@SOFTMAX.visible
def test_softmax_values(impl):
    "softmax(x, dim) equals torch.softmax along the given dimension"
    x = _randn((3, 5), 0, scale=3)
    for dim in (-1, 0):
        expect.close(
            impl.call(softmax, x, dim),
            torch.softmax(x, dim),
            f"softmax(x, dim={dim}) for x of shape [3, 5]",
            **PROB,
            alternatives=[(torch.softmax(x, -1 - dim), "it ignores `dim`")] if dim == 0 else (),
        )


@SOFTMAX.visible
def test_softmax_large_logits(impl):
    "large logits (1000) do not overflow"
    x = torch.tensor([[1000.0, 999.0, 990.0], [-5.0, 0.0, 5.0]])
    got = impl.call(softmax, x, -1)
    if (
        isinstance(got, torch.Tensor)
        and got.shape == x.shape
        and got[0].isfinite().all()
        and not got[1].isfinite().all()
    ):
        expect.fail(
            "softmax of the rows [1000, 999, 990] and [-5, 0, 5] is NaN for the second row: subtract the "
            "maximum of each slice (keepdim=True), not one maximum of the whole tensor (exp(-5 - 1000) is 0)"
        )
    expect.close(
        got,
        torch.softmax(x, -1),
        "softmax of logits near 1000",
        **PROB,
        hint="exp(1000) overflows to inf; subtract each slice's maximum before exponentiating.",
    )


@SOFTMAX.hidden
def test_softmax_rows_on_different_scales(impl):
    "each slice is shifted by its own maximum; -inf entries get probability 0"
    x = torch.tensor([[1000.0, 998.0, 995.0], [-1000.0, -1001.0, -1003.0], [2.0, float("-inf"), 0.0]])
    expect.close(
        impl.call(softmax, x, -1),
        torch.softmax(x, -1),
        "softmax of rows near +1000, near -1000, and with -inf",
        **PROB,
        hint="Subtract the maximum of each slice (keepdim=True), not one maximum of the whole tensor.",
    )


@SOFTMAX.hidden
def test_softmax_dims_and_dtypes(impl):
    "any dimension of a 4-D tensor; float64 stays float64"
    x = _randn((2, 3, 4, 5), 1, scale=4)
    for dim in (1, -2, 3):
        expect.close(
            impl.call(softmax, x, dim),
            torch.softmax(x, dim),
            f"softmax over dim={dim} of a [2, 3, 4, 5] tensor",
            **PROB,
        )
    x64 = _randn((4, 6), 2).double()
    out = expect.tensor(impl.call(softmax, x64, -1), "softmax of a float64 tensor", dtype=torch.float64)
    expect.close(out, torch.softmax(x64, -1), "softmax of a float64 tensor", atol=1e-12, rtol=1e-10)


# --- Exercises 2 and 3: attention ---------------------------------------------------------


@WEIGHTS.visible
def test_weights_no_mask(impl):
    "weights = softmax(q kᵀ / sqrt(d_k)) over the keys; each row sums to 1"
    q, k = _randn((2, 4, 8), 3), _randn((2, 6, 8), 4)
    expect.close(
        impl.call(attention_weights, q, k),
        oracle_weights(q, k),
        "attention_weights(q, k) for q [2, 4, 8], k [2, 6, 8]",
        **PROB,
        alternatives=_weight_mistakes(q, k),
    )


@WEIGHTS.visible
def test_weights_with_mask(impl):
    "masked keys get weight 0 and the rest still sum to 1 (True = may attend)"
    q, k, mask = _randn((2, 4, 8), 5), _randn((2, 6, 8), 6), _mask((2, 4, 6), 7)
    expect.close(
        impl.call(attention_weights, q, k, mask),
        oracle_weights(q, k, mask),
        "attention_weights(q, k, mask)",
        **PROB,
        alternatives=_weight_mistakes(q, k, mask),
    )


@WEIGHTS.hidden
def test_weights_fully_masked_row(impl):
    "a query with every key masked gets all-zero weights, and no NaN reaches the other rows"
    q, k = _randn((3, 5, 4), 8), _randn((3, 7, 4), 9)
    mask = _mask((3, 5, 7), 10)
    mask[1, 2] = False
    got = expect.tensor(impl.call(attention_weights, q, k, mask), "attention_weights", shape=(3, 5, 7))
    expect.that(
        bool(torch.isfinite(got).all()),
        "the weights contain NaN or inf when one query has every key masked; "
        "give such a row zeros (e.g. torch.nan_to_num, or torch.where on mask.any(-1))",
    )
    expect.close(got, oracle_weights(q, k, mask), "attention_weights with one fully masked row", **PROB)


@WEIGHTS.hidden
def test_weights_broadcast_masks(impl):
    "4-D inputs with masks shaped [batch, 1, 1, k_len] and [q_len, k_len]"
    q, k = _randn((2, 3, 4, 8), 11), _randn((2, 3, 5, 8), 12)
    for seed, shape in [(13, (2, 1, 1, 5)), (14, (4, 5))]:
        mask = _mask(shape, seed)
        expect.close(
            impl.call(attention_weights, q, k, mask),
            oracle_weights(q, k, mask),
            f"attention_weights with a mask of shape {list(shape)}",
            **PROB,
            alternatives=_weight_mistakes(q, k, mask),
        )


def _sdpa(q, k, v, mask=None):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@SDPA.visible
def test_sdpa_matches_torch(impl):
    "equals torch's scaled_dot_product_attention (3-D, d_v != d_k, no mask)"
    q, k, v = _randn((2, 4, 8), 20), _randn((2, 6, 8), 21), _randn((2, 6, 3), 22)
    expect.close(
        impl.call(scaled_dot_product_attention, q, k, v),
        _sdpa(q, k, v),
        "attention output for q [2,4,8], k [2,6,8], v [2,6,3]",
        **TOL,
        alternatives=[(w @ v, diagnosis) for w, diagnosis in _weight_mistakes(q, k)],
    )


@SDPA.visible
def test_sdpa_uses_attention_weights(impl):
    "uses your attention_weights: it runs while scaled_dot_product_attention does, called however you like"
    q, k, v = _randn((1, 3, 4), 32), _randn((1, 5, 4), 33), _randn((1, 5, 2), 34)
    got = impl.call(attention_weights_used, q, k, v, _mask((1, 3, 5), 35))
    # None: attention_weights is no Python function whose code could be watched; nothing to observe, so no failure.
    expect.that(
        got["calls"] != 0,
        f"this exercise's rule is: {SDPA.rules[0].text}; your scaled_dot_product_attention "
        "computed the weights without calling your attention_weights",
    )


@SDPA.hidden
def test_sdpa_with_masks(impl):
    "4-D with causal and padding masks, and a fully masked row (zero output, no NaN elsewhere)"
    q, k, v = _randn((2, 3, 5, 8), 23), _randn((2, 3, 5, 8), 24), _randn((2, 3, 5, 4), 25)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    padding = torch.tensor([[True] * 5, [True, True, True, False, False]])[:, None, None, :]
    empty = _mask((2, 3, 5, 5), 26)
    empty[0, 1, 3] = False
    for name, mask in [("a causal mask", causal), ("a padding mask", padding), ("a fully masked row", empty)]:
        got = impl.call(scaled_dot_product_attention, q, k, v, mask)
        expect.close(
            got,
            _sdpa(q, k, v, mask),
            f"attention output with {name}",
            **TOL,
            alternatives=[(w @ v, d) for w, d in _weight_mistakes(q, k, mask)],
        )


@SDPA.hidden
def test_sdpa_invariances(impl):
    "causal: changing later tokens leaves earlier outputs alone; no mask: permuting keys and values together changes nothing"
    q, k, v = _randn((1, 6, 8), 27), _randn((1, 6, 8), 28), _randn((1, 6, 8), 29)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    before = impl.call(scaled_dot_product_attention, q, k, v, causal)
    k2, v2 = k.clone(), v.clone()
    k2[:, 4:], v2[:, 4:] = _randn((1, 2, 8), 30), _randn((1, 2, 8), 31)
    after = impl.call(scaled_dot_product_attention, q, k2, v2, causal)
    expect.close(
        after[:, :4],
        before[:, :4],
        "outputs of positions 0-3 after changing tokens 4 and 5 under the causal mask",
        atol=1e-6,
        hint="A query must never see a later key when the causal mask is given.",
    )
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    permuted = impl.call(scaled_dot_product_attention, q, k[:, perm], v[:, perm])
    expect.close(
        permuted,
        impl.call(scaled_dot_product_attention, q, k, v),
        "the output after permuting the keys and values together",
        **TOL,
        hint="Without a mask, attention is a weighted average over a set: the order of keys cannot matter.",
    )


# --- Exercises 4-7: masks -----------------------------------------------------------------


def _mask_result(value, what, shape):
    mask = expect.tensor(value, what, shape=shape)
    expect.that(mask.dtype == torch.bool, f"{what} has dtype {mask.dtype}; masks are torch.bool (True = may attend)")
    return mask


def _same_mask(got, expected, what, mistakes=()):
    if torch.equal(got, expected):
        return
    for wrong, diagnosis in mistakes:
        if wrong.shape == got.shape and torch.equal(got, wrong):
            expect.fail(f"{what} is wrong: {diagnosis}")
    if expected.numel() > 400:  # too large to print: say where it goes wrong
        wrong_at = [int(i) for i in (got != expected).nonzero()[0]]
        expect.fail(
            f"{what} is wrong at {int((got != expected).sum())} entries, the first at index {wrong_at} "
            f"(got {bool(got[tuple(wrong_at)])}, expected {bool(expected[tuple(wrong_at)])})"
        )
    expect.fail(f"{what} is wrong:\n{got.int()}\nexpected\n{expected.int()}")


# Longer than any sequence of the notebooks (and than 1024, a common maximum length): a mask cached up to a fixed
# length and sliced fails here.
LONG = 1100


def _long_mask(impl, name, args, what, shape):
    """Mask function ``name`` on ``args`` (a length of ``LONG``), with failures that say what an error or a wrong
    shape at this length usually is."""
    got = impl.call(mask_outcome, name, *args)
    value, cached = (
        got["mask"],
        "is the mask cut from a table made for a fixed maximum length? Make it for the length asked",
    )
    expect.that(not got["raised"], f"{what} raised {got['raised']}: {got['message']}; {cached}")
    if isinstance(value, torch.Tensor) and tuple(value.shape) != tuple(shape):
        expect.fail(f"{what} has shape {list(value.shape)}, expected {list(shape)}: {cached}")
    return _mask_result(value, what, shape)


def _on_meta(impl, name, args, what, shape, fix):
    """Run mask function ``name`` on PyTorch's meta device (``args`` for ``mask_on_meta``) and fail unless the
    result is on meta and nothing of it was made on the CPU: a CPU-only grader's other device, so a mask made on
    the CPU, moved or not, is seen. ``fix`` says how."""
    got = impl.call(mask_on_meta, name, *args)
    expect.that(
        not got["raised"],
        f"{what} raised {got['raised']}: {got['message']}; part of your mask is made on the CPU while the "
        f"input is on another device: {fix}",
    )
    expect.that(
        got["device"] == "meta",
        f"{what} returned {got['device'] or 'no tensor'} instead of a tensor on the meta device: {fix}",
    )
    expect.that(got["shape"] == list(shape), f"{what} has shape {got['shape']}, expected {list(shape)}")
    for function, made in got["made_on_cpu"]:
        expect.fail(
            f"{what} made a tensor of shape {made} on the CPU ({function}) and then moved it: make the mask on "
            f"the device, not on the CPU; {fix}"
        )


@CAUSAL.visible
def test_causal_mask_values(impl):
    "causal_mask(n): True on and below the diagonal (query i sees keys 0..i)"
    expected = torch.ones(5, 5, dtype=torch.bool).tril()
    got = _mask_result(impl.call(causal_mask, 5), "causal_mask(5)", (5, 5))
    _same_mask(
        got,
        expected,
        "causal_mask(5)",
        [
            (
                torch.ones(5, 5, dtype=torch.bool).tril(-1),
                "off by one: the diagonal is masked, but a token may attend to itself",
            ),
            (torch.ones(5, 5, dtype=torch.bool).tril(1), "off by one: each query also sees the next token"),
            (~expected, "inverted: True must mean 'may attend'"),
            (torch.ones(5, 5, dtype=torch.bool).triu(), "it is the transpose: row i (the query) may see columns 0..i"),
        ],
    )


@CAUSAL.hidden
def test_causal_mask_sizes(impl):
    "works for sizes 1, 2, 9 and 1100 (longer than any sequence of this notebook)"
    for n in (1, 2, 9):
        got = _mask_result(impl.call(causal_mask, n), f"causal_mask({n})", (n, n))
        _same_mask(got, torch.ones(n, n, dtype=torch.bool).tril(), f"causal_mask({n})")
    got = _long_mask(impl, "causal_mask", [LONG], f"causal_mask({LONG})", (LONG, LONG))
    _same_mask(got, torch.ones(LONG, LONG, dtype=torch.bool).tril(), f"causal_mask({LONG})")


@CAUSAL.hidden
def test_causal_mask_on_the_given_device(impl):
    "causal_mask(n, device=...) makes the mask on that device, not on the CPU and then moved (meta here)"
    _on_meta(
        impl,
        "causal_mask",
        [[], 6],
        "causal_mask(6, device='meta')",
        (6, 6),
        "create it on `device`, e.g. torch.ones(seq_len, seq_len, dtype=torch.bool, device=device)",
    )


@CAUSAL.hidden
def test_causal_mask_on_the_default_device(impl):
    "causal_mask(n) with no device makes the mask on PyTorch's default device (meta here, set by torch.device)"
    got = impl.call(mask_on_meta, "causal_mask", [], 6, default_device=True)
    what = "causal_mask(6) under `with torch.device('meta')` (PyTorch's default device set to meta)"
    expect.that(not got["raised"], f"{what} raised {got['raised']}: {got['message']}")
    expect.that(
        got["device"] == "meta",
        f"{what} returned {got['device'] or 'no tensor'}: device=None means PyTorch's default device, not the "
        "CPU; hand None on to the factory (torch.ones(..., device=None) uses the default device)",
    )


_IDS = torch.tensor([[5, 7, 9, 0, 0], [3, 0, 0, 0, 0], [4, 4, 4, 4, 4]])


def _padding_oracle(ids, pad):
    return (ids != pad)[:, None, None, :]


def _long_ids(pad, batch=2):
    """[batch, LONG] ids, the later sequences padded on the right with ``pad``."""
    ids = torch.randint(pad + 1, pad + 50, (batch, LONG), generator=_gen(90))
    for b in range(1, batch):
        ids[b, LONG - 300 * b :] = pad
    return ids


@PADDING.hidden
def test_padding_mask_on_the_device_of_the_ids(impl):
    "the mask is made on the device of token_ids, not on the CPU and then moved (PyTorch's meta device here)"
    _on_meta(
        impl,
        "padding_mask",
        [[[2, 5]], 0],
        "padding_mask(token_ids, 0) with token_ids on the meta device",
        (2, 1, 1, 5),
        "compare the tensor itself, (token_ids != pad_id), and make nothing on the CPU (no .cpu(), .tolist())",
    )


@PADDING.visible
def test_padding_mask_values(impl):
    "padding_mask(ids, pad_id) is [batch, 1, 1, seq], True where the key token is not padding"
    got = impl.call(padding_mask, _IDS, 0)
    keys = _IDS != 0
    if isinstance(got, torch.Tensor) and tuple(got.shape) == (3, 1, 5, 1):
        expect.fail(
            "padding_mask has shape [3, 1, 5, 1]: it masks the query axis; padding tokens are KEYS "
            "nobody may attend to, so the sequence belongs in the last dimension: [batch, 1, 1, seq]"
        )
    if isinstance(got, torch.Tensor) and tuple(got.shape) == (3, 5):
        expect.fail(
            "padding_mask has shape [3, 5]; against scores [batch, heads, q_len, k_len] it would broadcast "
            "its batch axis over the queries. Return [batch, 1, 1, seq]"
        )
    got = _mask_result(got, "padding_mask(ids, 0)", (3, 1, 1, 5))
    _same_mask(
        got,
        _padding_oracle(_IDS, 0),
        "padding_mask(ids, 0)",
        [(~keys[:, None, None, :], "inverted: True marks real tokens (may attend)")],
    )


@PADDING.hidden
def test_padding_mask_other_pad_id_and_effect(impl):
    "any pad_id and length (1100 ids); changing padded tokens changes no output of real queries"
    ids = torch.tensor([[2, 2, 8, 1], [6, 1, 1, 1]])
    got = _mask_result(impl.call(padding_mask, ids, 1), "padding_mask(ids, pad_id=1)", (2, 1, 1, 4))
    _same_mask(got, _padding_oracle(ids, 1), "padding_mask(ids, pad_id=1)")
    # A pad_id in the middle of the vocabulary: ids below it are real tokens too.
    middle = torch.tensor([[0, 9, 5, 3, 5], [7, 1, 2, 5, 5]])
    what = "padding_mask(ids, pad_id=5) for ids from 0 to 9"
    got_middle = _mask_result(impl.call(padding_mask, middle, 5), what, (2, 1, 1, 5))
    _same_mask(
        got_middle,
        _padding_oracle(middle, 5),
        what,
        [
            (
                (middle > 5)[:, None, None, :],
                "it takes the ids greater than pad_id as the real tokens; ids below pad_id are real tokens too: "
                "padding is exactly the ids equal to pad_id (token_ids != pad_id)",
            )
        ],
    )
    long_ids = _long_ids(8)
    long = _long_mask(impl, "padding_mask", [long_ids, 8], f"padding_mask of {LONG} ids", (2, 1, 1, LONG))
    _same_mask(long, _padding_oracle(long_ids, 8), f"padding_mask of {LONG} ids")
    q, k, v = _randn((2, 3, 4, 8), 40), _randn((2, 3, 4, 8), 41), _randn((2, 3, 4, 8), 42)
    k2, v2 = k.clone(), v.clone()
    k2[1, :, 1:], v2[1, :, 1:] = 50.0, -50.0  # garbage at the padded keys
    out, out2 = _sdpa(q, k, v, got), _sdpa(q, k2, v2, got)
    expect.close(out2, out, "attention outputs after changing the padded keys and values (using your mask)", atol=1e-5)


def _decoder_oracle(ids, pad):
    seq = ids.shape[-1]
    return torch.ones(seq, seq, dtype=torch.bool).tril() & (ids != pad)[:, None, None, :]


@DECODER.visible
def test_decoder_mask_values(impl):
    "decoder_mask(ids, pad_id) = causal AND padding, shaped [batch, 1, seq, seq]"
    got = _mask_result(impl.call(decoder_mask, _IDS, 0), "decoder_mask(ids, 0)", (3, 1, 5, 5))
    causal = torch.ones(5, 5, dtype=torch.bool).tril().expand(3, 1, 5, 5)
    padding = _padding_oracle(_IDS, 0).expand(3, 1, 5, 5)
    _same_mask(
        got,
        _decoder_oracle(_IDS, 0),
        "decoder_mask(ids, 0)",
        [
            (causal, "padding is not masked; combine both masks with &"),
            (padding, "the causal part is missing"),
            (causal | padding, "it combines with OR; a key must pass both masks: use &"),
        ],
    )


@DECODER.hidden
def test_decoder_mask_other_pad_id(impl):
    "any pad_id and length, 1100 included (longer than any sequence of this notebook)"
    ids = torch.tensor([[9, 9, 9, 2, 2, 2, 2], [9, 3, 4, 5, 6, 7, 8]])
    got = _mask_result(impl.call(decoder_mask, ids, 2), "decoder_mask(ids, pad_id=2)", (2, 1, 7, 7))
    _same_mask(got, _decoder_oracle(ids, 2), "decoder_mask(ids, pad_id=2)")
    long_ids = _long_ids(2, batch=1)
    what = f"decoder_mask of {LONG} ids"
    got = _long_mask(impl, "decoder_mask", [long_ids, 2], what, (1, 1, LONG, LONG))
    _same_mask(got, _decoder_oracle(long_ids, 2), what)


@DECODER.hidden
def test_decoder_mask_left_padding(impl):
    "left padding: a padded query whose visible keys are all padding gets a row of False (attention gives it zeros)"
    ids = torch.tensor([[0, 0, 5, 6, 7], [3, 4, 0, 8, 9]])
    what = "decoder_mask(ids, 0) for left-padded ids [[0, 0, 5, 6, 7], [3, 4, 0, 8, 9]]"
    got = _mask_result(impl.call(decoder_mask, ids, 0), what, (2, 1, 5, 5))
    expected = _decoder_oracle(ids, 0)
    empty_rows = ~expected.any(-1, keepdim=True)
    eye = torch.eye(5, dtype=torch.bool)
    _same_mask(
        got,
        expected,
        what,
        [
            (
                expected | (eye & empty_rows),
                "the queries with no visible key (the first two, whose keys so far are all padding) were given "
                "their own diagonal entry to avoid an empty row; the mask is True exactly when j <= i and key j is "
                "not padding, so such a row is all False: the attention gives a query that sees nothing zero weights",
            ),
            (
                expected | (eye & (ids == 0)[:, None, :, None]),
                "padded queries were given their own diagonal entry; the mask is True exactly when j <= i and key j "
                "is not padding, so a padding key is never visible, even to itself",
            ),
        ],
    )


@DECODER.hidden
def test_decoder_mask_on_the_device_of_the_ids(impl):
    "the mask, causal part included, is made on the device of token_ids, not moved there (meta here)"
    _on_meta(
        impl,
        "decoder_mask",
        [[[2, 5]], 0],
        "decoder_mask(token_ids, 0) with token_ids on the meta device",
        (2, 1, 5, 5),
        "build the causal part on the device of token_ids, causal_mask(seq_len, device=token_ids.device)",
    )


def _cross_oracle(target, source, pad):
    return (source != pad)[:, None, None, :].expand(target.shape[0], 1, target.shape[1], source.shape[1])


@CROSS.visible
def test_cross_mask_values(impl):
    "cross_attention_mask(target, source, pad_id): [batch, 1, tgt_len, src_len], True where the SOURCE token is real"
    target, source = torch.tensor([[4, 5, 0], [6, 0, 0]]), _IDS[:2]
    got = impl.call(cross_attention_mask, target, source, 0)
    if isinstance(got, torch.Tensor) and tuple(got.shape) == (2, 1, 5, 3):
        expect.fail(
            "the mask has shape [2, 1, 5, 3]: queries come from the target (rows), keys from the source (columns)"
        )
    got = _mask_result(got, "cross_attention_mask(target, source, 0)", (2, 1, 3, 5))
    both = _cross_oracle(target, source, 0) & (target != 0)[:, None, :, None]
    causal = _cross_oracle(target, source, 0) & torch.ones(3, 5, dtype=torch.bool).tril()
    _same_mask(
        got,
        _cross_oracle(target, source, 0),
        "cross_attention_mask(target, source, 0)",
        [
            (both, "it also masks padded target positions (queries); only the source keys are masked here"),
            (causal, "it adds a causal part; the decoder may look at the whole source"),
            (~_cross_oracle(target, source, 0), "inverted: True marks real source tokens"),
        ],
    )


@CROSS.hidden
def test_cross_mask_other_sizes(impl):
    "other pad ids and lengths, 1100 included (longer than any sequence of this notebook)"
    target, source = torch.tensor([[1, 1, 1, 1]]), torch.tensor([[8, 8, 7, 7, 7, 7]])
    got = _mask_result(
        impl.call(cross_attention_mask, target, source, 7), "cross_attention_mask with pad_id=7", (1, 1, 4, 6)
    )
    _same_mask(got, _cross_oracle(target, source, 7), "cross_attention_mask with pad_id=7")
    source, target = _long_ids(7), _long_ids(7)[:, :900]
    what = f"cross_attention_mask with {LONG} source and 900 target ids"
    got = _long_mask(impl, "cross_attention_mask", [target, source, 7], what, (2, 1, 900, LONG))
    _same_mask(got, _cross_oracle(target, source, 7), what)


@CROSS.hidden
def test_cross_mask_on_the_device_of_the_ids(impl):
    "the mask is made on the device of the ids, not on the CPU and then moved (PyTorch's meta device here)"
    _on_meta(
        impl,
        "cross_attention_mask",
        [[[2, 3], [2, 5]], 0],
        "cross_attention_mask(target_ids, source_ids, 0) with the ids on the meta device",
        (2, 1, 3, 5),
        "make nothing on the CPU: start from the source's padding mask and expand it",
    )


# ---------------------------------------------------------------------------------------------------------------
# Adapters: the only code in this module that touches the student's objects. They run beside the student's code
# (in the sandboxed worker while grading, in the kernel for the notebook's own test cells), build and call the
# student's classes and functions on the inputs a check gives, and return plain results; they compute and report,
# never judge. A check calls one by reference, ``impl.call(name, ...)``; only functions marked ``@adapter`` can be.
#
# Adapters for notebook 04: softmax, attention and masks.


@adapter
def softmax(ns, x, dim=-1):
    return need(ns, "softmax")(x, dim=dim)


@adapter
def attention_weights(ns, q, k, mask=None):
    return need(ns, "attention_weights")(q, k, mask)


@adapter
def scaled_dot_product_attention(ns, q, k, v, mask=None):
    return need(ns, "scaled_dot_product_attention")(q, k, v, mask)


@adapter
def attention_weights_used(ns, q, k, v, mask=None) -> dict:
    """``scaled_dot_product_attention(q, k, v, mask)`` and how many times the student's ``attention_weights`` ran
    meanwhile (``calls_of``: reached by any name or reference; None when it is not a Python function)."""
    return calls_of(need(ns, "attention_weights"), need(ns, "scaled_dot_product_attention"), q, k, v, mask)


@adapter
def causal_mask(ns, seq_len: int):
    return need(ns, "causal_mask")(seq_len)


@adapter
def padding_mask(ns, token_ids, pad_id: int):
    return need(ns, "padding_mask")(token_ids, pad_id)


@adapter
def decoder_mask(ns, token_ids, pad_id: int):
    return need(ns, "decoder_mask")(token_ids, pad_id)


@adapter
def cross_attention_mask(ns, target_ids, source_ids, pad_id: int):
    return need(ns, "cross_attention_mask")(target_ids, source_ids, pad_id)


@adapter
def mask_on_meta(ns, name: str, id_shapes: list, *args, default_device: bool = False) -> dict:
    """The mask function ``name`` run on PyTorch's meta device (shapes only, no values): given token ids of
    ``id_shapes`` on meta, then ``args``; or, with no id shapes (``causal_mask``), ``args`` and ``device="meta"``,
    or with ``default_device`` no device at all, under ``with torch.device("meta")`` (PyTorch's default device).
    What it raised, or its result's device and shape, and ``made_on_cpu``: the torch function and shape of each
    CPU tensor of more than one element made meanwhile (``_cpu_tensors_made``). A tensor it makes on the CPU
    cannot be combined with meta tensors, so it raises (or, returned alone, is reported on the CPU; moved with
    ``.to``, it is in ``made_on_cpu``)."""
    ids = [torch.zeros(shape, dtype=torch.long, device="meta") for shape in id_shapes]
    keywords = {} if id_shapes or default_device else {"device": torch.device("meta")}
    made, on_cpu = [], []
    with torch.device("meta") if default_device else contextlib.nullcontext():
        result = _outcome_on_meta(
            lambda: made.append(_cpu_tensors_made(on_cpu, need(ns, name), *ids, *args, **keywords))
        )
    mask = made[0] if made else None
    return result | {
        "device": str(getattr(mask, "device", "")),
        "shape": list(getattr(mask, "shape", [])),
        "made_on_cpu": on_cpu,
    }


def _cpu_tensors_made(on_cpu: list, function, *args, **kwargs):
    """``function(*args, **kwargs)``, appending to ``on_cpu`` the name and shape of every CPU tensor of more than
    one element that a torch function made meanwhile (factories, operations, methods, slices: a torch-function
    mode sees every call the code makes, however it is reached). A 0-d or 1-element tensor (``torch.tensor(True)``)
    is a scalar, not a part of a mask made on the wrong device, so it does not count."""
    from torch.overrides import TorchFunctionMode

    class Record(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            result = func(*args, **(kwargs or {}))
            for value in result if isinstance(result, tuple | list) else (result,):
                if isinstance(value, torch.Tensor) and value.device.type == "cpu" and value.numel() > 1:
                    on_cpu.append([getattr(func, "__name__", repr(func)), list(value.shape)])
            return result

    with Record():
        return function(*args, **kwargs)


def _outcome_on_meta(function) -> dict:
    """``outcome``, except that a meta tensor's refusal to be read (``.cpu()``, ``.tolist()``: a NotImplementedError
    naming meta) is reported as what the code raised, not taken for an unanswered stub."""
    try:
        return outcome(function)
    except NotImplementedError as error:
        if "meta" not in str(error):
            raise
        return {"raised": type(error).__name__, "message": str(error)}


@adapter
def mask_outcome(ns, name: str, *args) -> dict:
    """The mask function ``name`` on ``args``: its result, or what it raised (``outcome``), for the long masks,
    where an error usually comes from a table made for a fixed maximum length."""
    made = []
    result = outcome(lambda: made.append(need(ns, name)(*args)))
    return result | {"mask": made[0] if made else None}
