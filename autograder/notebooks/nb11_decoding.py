"""Notebook 11's exercises, with their checks and adapters: samplers, generation loops, beam search, the KV cache, continuous batching.

Oracles, written here and independent of the notebook's solutions:

- Filters and greedy (exercises 1-3): the kept sets computed in Python from the stated conventions
  (a stable descending order: ties to the lower token id; top-k keeps exactly k; top-p keeps the smallest
  prefix whose probability, computed in float64, reaches p), on constructed logits with ties at the
  boundaries; Hugging Face's ``TopKLogitsWarper`` / ``TopPLogitsWarper`` (imported lazily) on tie-free
  logits, with p halfway inside a token's mass so that no rounding decides. Exact comparison of the kept
  sets; kept logits within 1e-6 of the input (temperature: of ``logits / T``, atol 1e-6 + rtol 1e-6).
  Hidden: rows of 120 logits with 100 or more tied (beyond 16 equal values torch.sort without
  ``stable=True``, and torch.topk, reorder ties on the CPU), for greedy, temperature 0, both filters and sampling.
  ``apply_temperature`` (T = 0 and 2) on float64 logits (the result in float64; values within the same
  tolerance) and on meta logits (the result on the meta device). Top-p on logits around 500 and up to 1000
  (exp overflows in float32): the nucleus of the same logits shifted to a maximum of 0, computed in float64.
- Sampling (exercise 4): 20,000 draws per case from one call, compared with the exact probabilities of
  the filtered distribution (float64): a token of probability 0 must never be drawn, every other
  token's frequency must lie within ``5 sqrt(p (1 - p) / n) + 1e-9`` of ``p``. For a right sampler the
  chance that one of the ~10 tokens of a case leaves its band is about 6e-6 per case; the generator is
  seeded, so the draws are the same at every run anyway (the solution's worst deviation over the cases
  here is 1.8 sigma). The closest known mistake, top-p applied before top-k, moves a token's probability
  by at least 0.20 in the cases built for it (over 50 sigma). Two calls with generators seeded alike must
  draw the same tokens.
- Greedy generation and batched generation (exercises 5, 6): the argmax of the lookup-table model's
  rows (``autograder.reference.toy.PrefixTableModel``), whose logits after a prefix are known exactly;
  the batched outputs must equal the oracle's unbatched ones token for token. ``generate`` (hidden): a
  recording ``pick`` (it must be given ``[1, vocab]``) and a model that records whether gradients are enabled
  in its forward (never, with gradients enabled around the call). Hidden: the course's
  ``LlamaDecoder`` (tiny, random) with greedy tokens from full recomputation here; its margins between
  the best and second-best logit at every step are at least 8.7e-3 for the seeds used (exercises 6, 10,
  11), far above the ~1e-5 by which padding or a cache changes the logits.
- Beam search (exercise 7): brute-force enumeration of every continuation (vocabulary 4, up to 4 new
  tokens, EOS ends a branch) with log-probabilities in float64: with a beam wide enough never to drop a
  candidate, beam search is exhaustive search and must return the enumeration's best hypothesis; with one
  beam, the greedy sequence; with two beams, on a model chosen so that greedy is not optimal, the
  enumeration's best. Scores within 1e-4 (the solution takes the log-softmax in float64: error below
  1e-6). The cases' best and second-best scores differ by at least 0.026; with length penalties 0, 0.5, 1
  and 2 the winners are [1, 0], [1, 0], [1, 1, 0] and [1, 1, 3, 1].
- The KV cache (exercises 8-10): ``torch.cat`` on the stated axis (exact); the course's
  ``RotaryGroupedQueryAttention`` and ``LlamaDecoder`` recomputing the whole sequence without a cache,
  compared with every call's output with the cache (a prompt in one or two chunks, then single tokens):
  atol 1e-4 + rtol 1e-4. Measured for the solution over 40 seeds of the configurations here (width
  32-48, GQA ratios 1, 2, 4, weights of standard deviation 0.3, outputs and logits of size 10-40): at
  most 9.5e-6 (attention) and 9.9e-6 (logits). The closest known mistake, positions restarting at 0 at
  each call, differs by at least 1.4.
  Generated tokens with the cache must equal full recomputation's greedy tokens (exactly).
  Hidden: the attention (default positions) and the decoder (positions and mask) run on the meta device, a
  prompt then one token with a cache: a tensor made on the CPU cannot be mixed with meta tensors, so it raises.
  The cache alone: 5000 positions per layer (in one call, or one at a time; beyond the notebook's max_seq_len
  of 512 and a buffer preallocated for 4096), exact; fed meta keys and values, everything it returns and stores on the meta device;
  ``keys``/``values`` hold None for a layer until its first update (before any update, and between updates).
  The attention with ``mask=None`` (without a cache, and for 3 tokens over 3 cached) against the course's
  attention with no mask, and with ``token_positions=None`` for 2 tokens over 5 cached (positions 0, 1).
  The decoder built with a recording ``rope`` and ``block``: ``rope`` called once, with ``d_model // n_heads``,
  ``max_seq_len`` and ``rope_base`` (500 here), and that module given to each of the 3 blocks; and its logits
  against the course's decoder with ``rope_base`` 500.
- Continuous batching (exercise 11): the engines' logs (``autograder.reference.batching``) and greedy
  outputs computed here one request at a time: equal outputs, no step while a slot is free and a request
  waits, no slot stepped after its request is done.
"""

from __future__ import annotations

import inspect
import itertools
import math
import numbers

import torch
from torch import nn

from autograder import expect
from autograder.adapters import adapter, given, need, outcome, summary
from autograder.errors import StudentCodeError, is_stub
from autograder.exercises import Exercise
from autograder.notebooks._seeds import seeded
from autograder.reference import sampling
from autograder.reference.batching import RecomputeEngine, SlotEngine
from autograder.reference.configs import DecoderConfig
from autograder.reference.decoders import LlamaDecoder
from autograder.reference.kv_cache import KVCache
from autograder.reference.modern import ModernBlock, RotaryGroupedQueryAttention
from autograder.reference.rope import RoPE
from autograder.reference.toy import PrefixTableModel

GREEDY = Exercise("greedy_temperature", "greedy and temperature", points=2)
TOP_K = Exercise("top_k_filter", "top-k", points=2)
TOP_P = Exercise("top_p_filter", "top-p", points=3)
SAMPLE = Exercise("sample_next", "sampling with the filters", points=3)
GENERATE = Exercise("generate", "the generation loop", points=3)
BATCH = Exercise("generate_batch", "batched generation with left padding", points=3)
BEAM = Exercise("beam_search", "beam search", points=5)
CACHE = Exercise("kv_cache", "the KV cache", points=2)
ATTENTION = Exercise("cached_attention", "attention with a cache", points=3)
DECODER = Exercise("cached_decoder", "the decoder with a cache", points=3)
BATCHING = Exercise("continuous_batching", "continuous batching", points=4)
EXERCISES = [GREEDY, TOP_K, TOP_P, SAMPLE, GENERATE, BATCH, BEAM, CACHE, ATTENTION, DECODER, BATCHING]

TOL = {"atol": 1e-4, "rtol": 1e-4}
DRAWS = 20_000
SIGMAS = 5.0

_gen, _randn = seeded(11000)


# --- the conventions, computed here ------------------------------------------------------


def _order(row):
    """Token ids by decreasing value, ties to the lower id."""
    values = row.tolist()
    return sorted(range(len(values)), key=lambda i: (-values[i], i))


def kept_top_k(logits, k):
    keep = torch.zeros(logits.shape, dtype=torch.bool)
    for index in itertools.product(*map(range, logits.shape[:-1])):
        keep[index][_order(logits[index])[:k]] = True
    return keep


def kept_top_p(logits, p):
    keep = torch.zeros(logits.shape, dtype=torch.bool)
    for index in itertools.product(*map(range, logits.shape[:-1])):
        probs = torch.softmax(logits[index].double(), -1).tolist()
        before = 0.0
        for i in _order(logits[index]):
            if before >= p:
                break
            keep[index][i] = True
            before += probs[i]
    return keep


def exact_probabilities(logits, temperature=1.0, top_k=None, top_p=None):
    """The distribution sample_next draws from, in float64, one row per row of ``logits``."""
    z = logits.double()
    if temperature == 0:
        best = torch.tensor([_order(row)[0] for row in z])
        return torch.nn.functional.one_hot(best, z.shape[-1]).double()
    z = z / temperature
    if top_k is not None:
        z = z.masked_fill(~kept_top_k(z, top_k), -math.inf)
    if top_p is not None:
        z = z.masked_fill(~kept_top_p(z, top_p), -math.inf)
    return torch.softmax(z, -1)


def _describe_set(keep):
    return [sorted(torch.nonzero(row).flatten().tolist()) for row in keep.reshape(-1, keep.shape[-1])]


def _kept(got, what, logits):
    out = expect.tensor(got["output"], what, shape=logits.shape)
    expect.that(
        not got["input_changed"],
        f"{what} changed the logits it was given (in place): return a new tensor, "
        "e.g. with masked_fill (not masked_fill_)",
    )
    expect.that(not torch.isnan(out).any(), f"{what} contains NaN: set the removed logits to -inf")
    removed = ~torch.isfinite(out)
    expect.that(bool((out[removed] < 0).all()), f"{what} has +inf entries: removed logits must be -inf")
    return out, ~removed


UNSTABLE = (
    "among tied logits it keeps other tokens than the lower ids. Ties go to the lower token id: use a stable "
    "order, torch.sort(..., descending=True, stable=True) (without stable=True torch.sort, like torch.topk, "
    "may reorder equal values: on the CPU it does beyond 16 of them)"
)


def _same_values_kept(logits, keep, expected_keep):
    """Whether each row keeps as many tokens of each value as expected (only which of the tied ids differs)."""
    rows = zip(
        logits.reshape(-1, logits.shape[-1]),
        keep.reshape(-1, logits.shape[-1]),
        expected_keep.reshape(-1, logits.shape[-1]),
        strict=True,
    )
    return all(sorted(row[mine].tolist()) == sorted(row[theirs].tolist()) for row, mine, theirs in rows)


def _wide_ties():
    """Rows of 120 logits with 100 or more tied: torch.sort without stable=True (and torch.topk) reorders ties on
    the CPU beyond 16 equal values, so only a stable order keeps the lower ids. Row 0: all equal; row 1: token 7
    above 119 tied tokens; row 2: tokens 100-119 above 100 tied ones."""
    logits = torch.zeros(3, 120)
    logits[1, 7] = 3.0
    logits[2, 100:] = 1.0
    return logits


def _check_filter(got, what, logits, expected_keep, mistakes=()):
    out, keep = _kept(got, what, logits)
    if not torch.equal(keep, expected_keep):
        for wrong_keep, diagnosis in mistakes:
            if torch.equal(keep, wrong_keep):
                expect.fail(f"{what} is wrong: {diagnosis}")
        if _same_values_kept(logits, keep, expected_keep):
            expect.fail(
                f"{what} keeps the tokens {_describe_set(keep)}, expected {_describe_set(expected_keep)}: {UNSTABLE}"
            )
        expect.fail(f"{what} keeps the tokens {_describe_set(keep)}, expected {_describe_set(expected_keep)} (per row)")
    expect.close(
        out[keep],
        logits[keep],
        f"the kept logits of {what}",
        atol=1e-6,
        hint="Kept logits are returned unchanged; only the removed ones become -inf.",
    )


# --- Exercise 1 --------------------------------------------------------------------------


def _with_ties():
    logits = _randn((4, 9), 1)
    logits[1, [2, 6]] = logits[1].max() + 1.0  # a tie for the maximum: the lower id wins
    logits[3] = 0.5  # all equal
    return logits


@GREEDY.visible
def test_greedy_picks_the_argmax(impl):
    "greedy(logits) is the argmax over the last axis, ties to the lower token id, for [4, 9] and [2, 3, 9]"
    for logits in (_with_ties(), _randn((2, 3, 9), 2)):
        got = expect.tensor(
            impl.call(greedy_of, logits),
            f"greedy(logits of shape {list(logits.shape)})",
            shape=logits.shape[:-1],
        )
        expected = torch.tensor([_order(row)[0] for row in logits.reshape(-1, 9)]).reshape(logits.shape[:-1])
        expect.that(not got.dtype.is_floating_point, f"greedy returned {got.dtype}: return token ids (argmax)")
        if not torch.equal(got.long(), expected):
            if torch.equal(got.long(), logits.argmin(-1)):
                expect.fail("greedy returns the argmin: the greedy token has the largest logit")
            ties = torch.tensor([max(i for i in range(9) if row[i] == row.max()) for row in logits.reshape(-1, 9)])
            if torch.equal(got.long().flatten(), ties):
                expect.fail(
                    "greedy breaks ties towards the higher token id: the lower id wins (torch.argmax does that)"
                )
            expect.fail(
                f"greedy(logits) returned {got.tolist()}, expected {expected.tolist()}: the argmax over the "
                "last axis (the vocabulary)"
            )


@GREEDY.visible
def test_temperature_divides(impl):
    "apply_temperature(logits, T) is logits / T for T = 0.5, 1, 2; the input is not changed"
    logits = _randn((3, 8), 3, 2.0)
    for t in (0.5, 1.0, 2.0):
        what = f"apply_temperature(logits, {t})"
        got = impl.call(temperature_of, logits, t)
        expect.that(
            not got["input_changed"], f"{what} changed the logits in place: return logits / temperature as a new tensor"
        )
        expect.close(
            got["output"],
            logits / t,
            what,
            atol=1e-6,
            rtol=1e-6,
            alternatives=[
                (
                    logits * t,
                    "the logits are multiplied by the temperature: divide them, "
                    "logits / temperature (T < 1 must sharpen the distribution)",
                ),
                (logits - math.log(t), "divide the logits by the temperature"),
            ],
        )


@GREEDY.hidden
def test_temperature_zero_is_greedy(impl):
    "apply_temperature(logits, 0) keeps the greedy token's logit (ties: the lower id) and sets the others to -inf"
    logits = _with_ties()
    got = impl.call(temperature_of, logits, 0.0)
    expected = kept_top_k(logits, 1)
    out = expect.tensor(got["output"], "apply_temperature(logits, 0)", shape=logits.shape)
    expect.that(
        bool((torch.isfinite(out) | (out == -math.inf)).all()),
        "apply_temperature(logits, 0) contains NaN "
        "or +inf: temperature 0 must mean greedy; keep the greedy token's logit and set every other logit to "
        "-inf (no division by 0)",
    )
    _check_filter(
        got,
        "apply_temperature(logits, 0)",
        logits,
        expected,
        mistakes=[
            (
                logits == logits.max(-1, keepdim=True).values,
                "on a tie for the maximum keep only the "
                "lower token id (the greedy token), so that sampling at T = 0 is greedy",
            )
        ],
    )


@GREEDY.hidden
def test_greedy_wide_ties(impl):
    "with 100 or more tied logits (where an unstable sort reorders them) greedy and temperature 0 take the lower id"
    logits = _wide_ties()
    expected = torch.tensor([_order(row)[0] for row in logits])
    got = expect.tensor(impl.call(greedy_of, logits), "greedy(logits of shape [3, 120])", shape=[3])
    if not torch.equal(got.long(), expected):
        expect.fail(
            f"greedy(logits with 100 or more tied values) returned {got.tolist()}, expected {expected.tolist()}: "
            "ties go to the lower token id (torch.argmax does that; an unstable sort or torch.topk may not)"
        )
    _check_filter(
        impl.call(temperature_of, logits, 0.0),
        "apply_temperature(logits with 100 or more tied values, 0)",
        logits,
        kept_top_k(logits, 1),
    )


LIKE_THE_LOGITS = (
    "the result has the dtype and the device of logits: logits.masked_fill(...), torch.full_like(logits, ...) or "
    "torch.where(...) keep them (torch.full(shape, ...) without dtype= and device= makes float32 on the CPU)"
)


@GREEDY.hidden
def test_temperature_keeps_dtype_and_device(impl):
    "apply_temperature(logits, T) for T = 0 and 2 in the dtype of float64 logits, and on the meta device of meta ones"
    logits = _with_ties().double()
    for t in (0.0, 2.0):
        what = f"apply_temperature(float64 logits, {t})"
        got = impl.call(temperature_like, logits, t, "cpu")
        expect.that(got["raised"] is None, f"{what} raised {got['raised']}: {got['message'][:200]}")
        expect.that(got["dtype"] == "torch.float64", f"{what} returned {got['dtype']}: {LIKE_THE_LOGITS}")
        if t:
            expect.close(got["output"], logits / t, what, atol=1e-6, rtol=1e-6)
        else:
            _check_filter({"output": got["output"], "input_changed": False}, what, logits, kept_top_k(logits, 1))
    for t in (0.0, 2.0):
        what = f"apply_temperature(logits on the meta device (standing for a GPU), {t})"
        got = impl.call(temperature_like, _with_ties(), t, "meta")
        expect.that(got["raised"] is None, f"{what} raised {got['raised']}: {got['message'][:200]}. {LIKE_THE_LOGITS}")
        expect.that(got["device"] == "meta", f"{what} returned a tensor on {got['device']!r}: {LIKE_THE_LOGITS}")


@GREEDY.hidden
def test_negative_temperature_raises(impl):
    "apply_temperature(logits, -1.0) raises ValueError"
    got = impl.call(temperature_refuses, _randn((2, 5), 4), -1.0)
    expect.that(
        got["raised"] == "ValueError",
        f"apply_temperature(logits, -1.0) "
        f"{'raised ' + got['raised'] if got['raised'] else 'returned'}: raise ValueError for a negative "
        "temperature",
    )


# --- Exercise 2 --------------------------------------------------------------------------


def _tie_logits():
    """Rows with ties at the top-k boundary: [3, 1, 2, 2, 0, 2] keeps {0, 2, 3} for k = 3."""
    return torch.tensor(
        [[3.0, 1.0, 2.0, 2.0, 0.0, 2.0], [1.0, 1.0, 1.0, 1.0, 1.0, 1.0], [0.0, 2.0, -1.0, 2.0, 5.0, 2.0]]
    )


def _top_k_mistakes(logits, k):
    kth = torch.sort(logits, dim=-1, descending=True).values[..., k - 1 : k]
    plus_ties = logits >= kth
    return [
        (kept_top_k(logits, k + 1), f"it keeps k + 1 = {k + 1} tokens: keep exactly k"),
        (
            plus_ties,
            "it keeps every token tied with the k-th: keep exactly k tokens; on a tie at the boundary the "
            "lower token id stays (a stable descending sort)",
        ),
        (kept_top_k(-logits, k), "it keeps the k lowest logits: keep the k highest"),
        (
            kept_top_k(logits.flip(-1), k).flip(-1),
            "on a tie at the boundary it keeps the higher token id: the "
            "lower id stays (torch.sort(..., descending=True, stable=True))",
        ),
    ]


def _top_k_of(impl, logits, k):
    """The filter's result; where it raises for a k above the vocabulary size, a message that says why."""
    try:
        return impl.call(filter_of, "top_k_filter", logits, k)
    except StudentCodeError as error:
        if k <= logits.shape[-1]:
            raise
        expect.fail(
            f"top_k_filter(logits of shape {list(logits.shape)}, {k}) raised {error}: a k above the vocabulary "
            f"size ({logits.shape[-1]}) is not out of range here; it keeps every token (use min(k, vocab))"
        )


@TOP_K.visible
def test_top_k_keeps_exactly_k(impl):
    "top_k_filter keeps exactly k tokens (ties at the boundary: the lower id; k above the vocabulary: all), the others -inf"
    for logits, k in ((_randn((2, 10), 10), 3), (_tie_logits(), 3), (_tie_logits(), 2), (_randn((2, 6), 16), 8)):
        got = _top_k_of(impl, logits, k)
        rows = f" for the rows {logits.tolist()}" if logits.shape[-1] == 6 else ""
        _check_filter(
            got,
            f"top_k_filter(logits, {k}){rows}",
            logits,
            kept_top_k(logits, k),
            _top_k_mistakes(logits, k) if k < logits.shape[-1] else (),
        )


@TOP_K.hidden
def test_top_k_edge_cases_and_hugging_face(impl):
    "k = 1 is greedy, k >= vocab keeps everything, 3-D logits; equal to HF's TopKLogitsWarper without ties"
    from transformers.generation.logits_process import TopKLogitsWarper

    for logits, k in (
        (_randn((3, 7), 11), 1),
        (_randn((2, 7), 12), 7),
        (_randn((2, 7), 13), 20),
        (_randn((2, 3, 11), 14), 4),
    ):
        got = _top_k_of(impl, logits, k)
        _check_filter(
            got,
            f"top_k_filter(logits of shape {list(logits.shape)}, {k})",
            logits,
            kept_top_k(logits, k),
            _top_k_mistakes(logits, min(k, logits.shape[-1] - 1)) if k < logits.shape[-1] else (),
        )
    logits = _randn((4, 50), 15)
    theirs = torch.isfinite(TopKLogitsWarper(top_k=10)(None, logits.clone()))
    _check_filter(impl.call(filter_of, "top_k_filter", logits, 10), "top_k_filter(logits [4, 50], 10)", logits, theirs)


@TOP_K.hidden
def test_top_k_wide_ties(impl):
    "with 100 or more tied logits (where an unstable sort or torch.topk reorders them) exactly the lower ids stay"
    logits = _wide_ties()
    for k in (5, 30):
        _check_filter(
            impl.call(filter_of, "top_k_filter", logits, k),
            f"top_k_filter(logits with 100 or more tied values, {k})",
            logits,
            kept_top_k(logits, k),
            _top_k_mistakes(logits, k),
        )


# --- Exercise 3 --------------------------------------------------------------------------


def _p_inside(logits_row, m):
    """A p halfway inside the mass of the m-th token of the order (1-based): the nucleus has m tokens."""
    probs = torch.softmax(logits_row.double(), -1)
    order = _order(logits_row)
    before = float(probs[order[: m - 1]].sum())
    return before + 0.5 * float(probs[order[m - 1]])


def _top_p_mistakes(logits, p):
    drop = kept_top_p(logits, p) & ~_crossing(logits, p)
    return [
        (
            drop,
            "it drops the token that crosses p: keep the smallest set whose probability REACHES p, the "
            "crossing token included (a token stays while the mass before it is below p)",
        ),
        (
            kept_top_p(logits.flip(-1), p).flip(-1),
            "on a tie it keeps the higher token id first: ties go to the "
            "lower id (torch.sort(..., descending=True, stable=True))",
        ),
    ]


def _crossing(logits, p):
    cross = torch.zeros(logits.shape, dtype=torch.bool)
    keep = kept_top_p(logits, p)
    for r in range(logits.shape[0]):
        order = _order(logits[r])
        last = max(i for i, t in enumerate(order) if keep[r, t])
        cross[r, order[last]] = True
    return cross


@TOP_P.visible
def test_top_p_keeps_the_crossing_token(impl):
    "top_p_filter keeps the smallest prefix whose mass reaches p, the crossing token included"
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.05, 0.15, 0.5, 0.3]])
    logits = probs.log()
    for p in (0.7, 0.6, 0.95, 0.3):
        got = impl.call(filter_of, "top_p_filter", logits, p)
        _check_filter(
            got,
            f"top_p_filter(log([0.5, 0.3, 0.15, 0.05]), {p})",
            logits,
            kept_top_p(logits, p),
            _top_p_mistakes(logits, p),
        )
    logits = _randn((1, 12), 20, 1.5)
    for m in (1, 3, 6):
        p = _p_inside(logits[0], m)
        _check_filter(
            impl.call(filter_of, "top_p_filter", logits, p),
            f"top_p_filter(random logits, {p:.4f})",
            logits,
            kept_top_p(logits, p),
            _top_p_mistakes(logits, p),
        )


@TOP_P.hidden
def test_top_p_ties_and_shapes(impl):
    "ties at the crossing go to the lower id; p = 1 keeps all; 3-D logits; a peaked row keeps one token"
    logits = torch.tensor([[2.0, 1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0, 1.0]])
    for p in (_p_inside(logits[0], 3), 0.5):
        _check_filter(
            impl.call(filter_of, "top_p_filter", logits, p),
            f"top_p_filter(logits with ties, {p:.4f})",
            logits,
            kept_top_p(logits, p),
            _top_p_mistakes(logits, p),
        )
    peaked = torch.tensor([[10.0, 0.0, 0.0, 0.0]])
    _check_filter(
        impl.call(filter_of, "top_p_filter", peaked, 0.5),
        "top_p_filter([10, 0, 0, 0], 0.5)",
        peaked,
        kept_top_p(peaked, 0.5),
    )
    cube = _randn((2, 3, 8), 21)
    _check_filter(
        impl.call(filter_of, "top_p_filter", cube, 0.8),
        "top_p_filter(logits of shape [2, 3, 8], 0.8)",
        cube,
        kept_top_p(cube, 0.8),
    )
    _check_filter(
        impl.call(filter_of, "top_p_filter", cube, 1.0),
        "top_p_filter(logits, 1.0)",
        cube,
        torch.ones(cube.shape, dtype=torch.bool),
    )


@TOP_P.hidden
def test_top_p_wide_ties(impl):
    "with 100 or more tied logits (where an unstable sort reorders them) the nucleus holds exactly the lower ids"
    logits = _wide_ties()
    for row, m in ((0, 6), (1, 4), (2, 25)):
        p = _p_inside(logits[row], m)  # halfway inside a token's mass: no rounding decides
        _check_filter(
            impl.call(filter_of, "top_p_filter", logits[row : row + 1], p),
            f"top_p_filter(logits with 100 or more tied values, {p:.4f})",
            logits[row : row + 1],
            kept_top_p(logits[row : row + 1], p),
            _top_p_mistakes(logits[row : row + 1], p),
        )


OVERFLOW = (
    "it keeps the right tokens for the same logits shifted down to a maximum of 0, but not for these: its "
    "probabilities overflow (exp of a logit above about 88 is inf in float32, and inf / inf is NaN). Use "
    "torch.softmax, which subtracts each row's maximum first"
)


@TOP_P.hidden
def test_top_p_large_logits(impl):
    "logits around 500 and up to 1000 (exp overflows): the same nucleus as the logits shifted down to a maximum of 0"
    for logits, m in ((_randn((1, 12), 23, 2.0) + 500.0, 4), (torch.tensor([[1000.0, 999.0, 998.5, 990.0, 0.0]]), 3)):
        p = _p_inside(logits[0], m)  # halfway inside a token's mass: the shift's float32 rounding decides nothing
        expected, shifted = kept_top_p(logits, p), logits - logits.max(-1, keepdim=True).values
        expect.that(torch.equal(kept_top_p(shifted, p), expected), "internal: shifting changed the nucleus")
        what = f"top_p_filter(logits up to {float(logits.max()):.0f}, {p:.4f})"
        got = impl.call(filter_of, "top_p_filter", logits, p)
        _, keep = _kept(got, what, logits)
        if not torch.equal(keep, expected):
            _, keep_shifted = _kept(impl.call(filter_of, "top_p_filter", shifted, p), what, shifted)
            if torch.equal(keep_shifted, expected):
                expect.fail(
                    f"{what} keeps the tokens {_describe_set(keep)}, expected {_describe_set(expected)}: {OVERFLOW}"
                )
        _check_filter(got, what, logits, expected, _top_p_mistakes(logits, p))


@TOP_P.hidden
def test_top_p_equals_hugging_face(impl):
    "equal to HF's TopPLogitsWarper on tie-free logits, p halfway inside a token's mass"
    from transformers.generation.logits_process import TopPLogitsWarper

    logits = _randn((1, 40), 22, 2.0)
    for m in (2, 5, 13):
        p = _p_inside(logits[0], m)
        theirs = torch.isfinite(TopPLogitsWarper(top_p=p)(None, logits.clone()))
        expect.that(int(theirs.sum()) == m, "internal: HF's nucleus differs from the construction")
        _check_filter(
            impl.call(filter_of, "top_p_filter", logits, p),
            f"top_p_filter(logits [1, 40], {p:.4f})",
            logits,
            theirs,
            _top_p_mistakes(logits, p),
        )


# --- Exercise 4 --------------------------------------------------------------------------


def _describe_kwargs(kwargs):
    return ", ".join(f"{k}={v}" for k, v in kwargs.items())


def _sample_case(impl, logits, kwargs, seed, mistakes=()):
    what = f"sample_next(logits, {_describe_kwargs(kwargs)})"
    got = impl.call(sample_counts, logits, DRAWS, kwargs, seed)
    if got.get("counts") is None:
        if got.get("out_of_range"):
            expect.fail(f"{what} returned token ids outside 0..{logits.shape[-1] - 1}")
        draws = got.get("draws")
        shape = list(draws.shape) if isinstance(draws, torch.Tensor) else type(draws).__name__
        expect.fail(
            f"{what} for logits of shape [{logits.shape[0] * DRAWS}, {logits.shape[-1]}] returned {shape} "
            f"{getattr(draws, 'dtype', '')}, expected token ids of shape [{logits.shape[0] * DRAWS}] "
            "(one per row: squeeze the sample axis)"
        )
    frequencies = got["counts"].double() / DRAWS
    expected = exact_probabilities(logits, **kwargs)

    def fits(probs):
        band = SIGMAS * (probs * (1 - probs) / DRAWS).sqrt() + 1e-9
        return bool(((frequencies - probs).abs() <= band).all()) and bool((frequencies[probs == 0] == 0).all())

    if not fits(expected):
        for probs, diagnosis in mistakes:
            if fits(probs):
                expect.fail(f"{what} is wrong: {diagnosis}")
        never = (expected == 0) & (frequencies > 0)
        if never.any() and _same_values_kept(logits, frequencies > 0, expected > 0):
            expect.fail(f"{what} draws other tokens than expected: {UNSTABLE}")
        if never.any():
            row, token = (int(i) for i in torch.nonzero(never)[0])
            expect.fail(
                f"{what} drew token {token} (row {row}) {int(got['counts'][row, token])} times in {DRAWS:,} "
                "draws, but that token is removed by the filters: its probability is exactly 0. Apply "
                "temperature, then top-k, then top-p, and sample from the softmax of what is left"
            )
        sigma = (expected * (1 - expected) / DRAWS).sqrt().clamp(min=1e-12)
        worst = ((frequencies - expected).abs() / sigma).argmax()
        row, token = divmod(int(worst), expected.shape[-1])
        expect.fail(
            f"{what}: token {token} (row {row}) was drawn with frequency {float(frequencies[row, token]):.4f} "
            f"in {DRAWS:,} draws, but its probability is {float(expected[row, token]):.4f} (allowed: "
            f"{SIGMAS:g} standard deviations, {float(SIGMAS * sigma[row, token]):.4f})"
        )
    expect.that(
        got["repeatable"],
        f"{what} drew other tokens with a generator seeded the same way: pass "
        "generator=generator to torch.multinomial (or whatever draws), so that a seed fixes the draws",
    )


@SAMPLE.visible
def test_sample_plain_and_top_k(impl):
    "the frequencies of 20,000 draws match softmax(logits / T) (T = 1, 0.7 with top_k = 3) within 5 sigma"
    logits = _randn((1, 8), 30, 1.5)
    _sample_case(
        impl,
        logits,
        {"temperature": 1.0},
        0,
        [
            (
                exact_probabilities(logits, 1.0, top_k=1),
                "it returns the argmax: draw from the distribution (torch.multinomial(probs, 1, generator=generator))",
            )
        ],
    )
    _sample_case(
        impl,
        logits,
        {"temperature": 0.7, "top_k": 3},
        1,
        [
            (
                exact_probabilities(logits * 0.7, 1.0, top_k=3),
                "the logits are multiplied by the temperature: divide them",
            ),
            (exact_probabilities(logits, 1.0, top_k=3), "the temperature is not applied"),
            (exact_probabilities(logits, 0.7), "top_k is not applied"),
        ],
    )


@SAMPLE.visible
def test_sample_temperature_zero_is_greedy(impl):
    "temperature=0 draws the greedy token every time (ties: the lower id), with or without filters"
    logits = _with_ties()
    _sample_case(impl, logits, {"temperature": 0.0}, 2)
    _sample_case(impl, logits[:2], {"temperature": 0.0, "top_k": 3, "top_p": 0.5}, 3)


def _order_mistakes(logits, t, k, p):
    return [
        (
            _p_then_k(logits, t, k, p),
            "top-p is applied before top-k: the order is temperature, then top-k, then top-p (top-p measures the "
            "mass of what top-k left)",
        ),
        (
            _filters_then_t(logits, t, k, p),
            "the temperature is applied after the filters: it comes first (top-p "
            "measures the mass of the tempered distribution)",
        ),
        (exact_probabilities(logits, t, top_k=k), "top_p is not applied"),
        (exact_probabilities(logits, t, top_p=p), "top_k is not applied"),
    ]


def _p_then_k(logits, t, k, p):
    z = logits.double() / t
    z = z.masked_fill(~kept_top_p(z, p), -math.inf)
    z = z.masked_fill(~kept_top_k(z, k), -math.inf)
    return torch.softmax(z, -1)


def _filters_then_t(logits, t, k, p):
    z = logits.double()
    z = z.masked_fill(~kept_top_k(z, k), -math.inf)
    z = z.masked_fill(~kept_top_p(z, p), -math.inf)
    return torch.softmax(z / t, -1)


@SAMPLE.hidden
def test_sample_with_all_filters_in_order(impl):
    "temperature, then top-k, then top-p (cases where the order changes the distribution), several rows"
    logits = torch.tensor([[2.0, 1.6, 1.4, 1.0, 0.8, 0.2, -0.5, -1.0]])
    t, k, p = 0.8, 4, 0.6
    expect.that(not torch.allclose(exact_probabilities(logits, t, k, p), _p_then_k(logits, t, k, p)), "internal")
    _sample_case(impl, logits, {"temperature": t, "top_k": k, "top_p": p}, 4, _order_mistakes(logits, t, k, p))
    logits = torch.tensor([[1.0, 0.9, 0.8, 0.2, 0.1, 0.0, -0.2, -0.3]])
    t, k, p = 2.5, 5, 0.5
    _sample_case(impl, logits, {"temperature": t, "top_k": k, "top_p": p}, 5, _order_mistakes(logits, t, k, p))
    rows = _randn((3, 8), 31, 1.5)
    _sample_case(impl, rows, {"temperature": 1.3, "top_p": 0.8}, 6)


@SAMPLE.hidden
def test_sample_wide_ties(impl):
    "with 100 or more tied logits only the lower ids are drawn: temperature 0, top_k = 4, top_p inside the 5th token"
    logits = _wide_ties()[:2]
    _sample_case(impl, logits, {"temperature": 0.0}, 7)
    _sample_case(impl, logits, {"top_k": 4}, 8)
    _sample_case(impl, logits[:1], {"top_p": _p_inside(logits[0], 5)}, 9)


# --- Exercises 5 and 6 -------------------------------------------------------------------


def _table(seed, vocab=10, scale=2.0, rows=997):
    return _randn((rows, vocab), seed, scale)


def greedy_oracle(table, prompt, max_new_tokens, eos_id):
    model = PrefixTableModel(table)
    tokens = list(prompt.tolist())
    for _ in range(max_new_tokens):
        tokens.append(int(model.next_logits(tokens).argmax()))
        if eos_id is not None and tokens[-1] == eos_id:
            break
    return tokens


def _llama_spec(seed):
    """The course's decoder (vocabulary 50), random weights of standard deviation 0.3, as a spec for adapters."""
    model, fields, state = _decoder_spec(seed)
    return model, {"fields": fields, "state": state}


@torch.no_grad()
def llama_greedy(model, prompt, max_new_tokens, eos_id):
    tokens = prompt.clone()
    for _ in range(max_new_tokens):
        token = model(tokens[None])[0, -1].argmax()
        tokens = torch.cat([tokens, token.view(1)])
        if eos_id is not None and int(token) == eos_id:
            break
    return tokens.tolist()


def _sequence(value, what):
    got = expect.tensor(value, what)
    expect.that(
        got.dim() == 1,
        f"{what} has shape {list(got.shape)}: return one 1-D tensor, the prompt followed by the new tokens",
    )
    return got.tolist()


def _generate_case(impl, table_seed, prompt, max_new_tokens, eos_id):
    table = _table(table_seed)
    expected = greedy_oracle(table, prompt, max_new_tokens, eos_id)
    what = f"generate(model, {prompt.tolist()}, max_new_tokens={max_new_tokens}, eos_id={eos_id})"
    got = impl.call(generate_with, {"table": table}, prompt, max_new_tokens, eos_id)
    tokens = _sequence(got["output"], what)
    if tokens == expected:
        return
    n = len(prompt)
    if tokens == expected[n:]:
        expect.fail(f"{what} returned only the new tokens: return the prompt followed by them")
    if expected[-1] == eos_id and tokens == expected[:-1]:
        expect.fail(f"{what} leaves out the EOS token: append it, then stop")
    if expected[-1] == eos_id and tokens[: len(expected)] == expected and len(tokens) > len(expected):
        expect.fail(f"{what} goes on after the EOS token: stop as soon as the new token equals eos_id")
    if (
        tokens[:n] == expected[:n]
        and len(tokens) - n in (max_new_tokens - 1, max_new_tokens + 1)
        and tokens[: min(len(tokens), len(expected))] == expected[: min(len(tokens), len(expected))]
    ):
        expect.fail(
            f"{what} returned {len(tokens) - n} new tokens: exactly max_new_tokens = {max_new_tokens} when no EOS comes"
        )
    if any(shape[0] != 1 for shape in got["calls"]) or not got["calls"]:
        expect.fail(f"{what} called the model with shapes {got['calls'][:3]}: call model(tokens[None]), a batch of one")
    expect.fail(
        f"{what} returned {tokens}, expected {expected}: pick the next token from the LAST position's "
        "logits, model(tokens[None])[:, -1]"
    )


@GENERATE.visible
def test_generate_stops_at_eos_and_at_the_limit(impl):
    "greedy generate on the lookup-table model: stops after EOS (kept) and after max_new_tokens"
    _generate_case(impl, 40, torch.tensor([3, 1, 4]), 12, 0)
    _generate_case(impl, 41, torch.tensor([2]), 5, None)


@GENERATE.hidden
def test_generate_picks_from_one_row_without_gradients(impl):
    "pick is given the last position's logits as [1, vocab]; the model runs under torch.no_grad()"
    table = _table(46)
    what = "generate(model, [2, 7], max_new_tokens=4)"
    got = impl.call(generate_with, {"table": table}, torch.tensor([2, 7]), 4, None)
    expect.that(
        bool(got["picked"]) and all(shape == [1, table.shape[1]] for shape in got["picked"]),
        f"{what} gave pick logits of shapes {got['picked'][:3]}, expected [1, {table.shape[1]}]: pick gets the "
        "last position's logits of the batch of one, model(tokens[None])[:, -1] (a sampler such as sample_next "
        "takes [batch, vocab])",
    )
    expect.that(
        not any(got["grad_enabled"]),
        f"{what} ran the model with gradients enabled: run it under torch.no_grad() (decorate generate with "
        "@torch.no_grad(), or call the model inside `with torch.no_grad():`), so that no graph is kept",
    )


@GENERATE.hidden
def test_generate_edge_cases(impl):
    "more prompts and seeds; max_new_tokens = 0 and 1; an EOS that never comes"
    _generate_case(impl, 42, torch.tensor([1, 5, 9, 2, 6]), 9, 3)
    _generate_case(impl, 43, torch.tensor([7, 7]), 0, 0)
    _generate_case(impl, 44, torch.tensor([4]), 1, 0)
    _generate_case(impl, 45, torch.tensor([8, 1]), 6, 99)


def _check_finished_rows_fed_padding(got, what, prompts, pad_id, eos_id, expected):
    """What the outputs do not show: after its EOS, a row is fed pad_id with padding_mask False (the last call's
    inputs hold every column appended before it)."""
    fed, mask = got.get("last_tokens"), got.get("last_mask")
    if eos_id is None or not isinstance(fed, torch.Tensor) or not isinstance(mask, torch.Tensor):
        return
    longest = max(len(p) for p in prompts)
    for row, (prompt, full) in enumerate(zip(prompts, expected, strict=True)):
        new = full[len(prompt) :]
        if eos_id not in new:
            continue
        after = longest + new.index(eos_id) + 1  # the first column appended after this row's EOS
        if after >= fed.shape[1]:
            continue
        expect.that(
            bool((fed[row, after:] == pad_id).all()) and not bool(mask[row, after:].any()),
            f"{what}: after prompt {row} emitted EOS, the model was still fed {fed[row, after:].tolist()} "
            f"with padding_mask {mask[row, after:].tolist()} for it: a finished sequence gets pad_id with "
            "mask False from then on, so the model never attends to tokens it was not meant to generate",
        )


def _check_batch(impl, spec, prompts, max_new_tokens, pad_id, eos_id, expected):
    what = (
        f"generate_batch(model, prompts of lengths {[len(p) for p in prompts]}, max_new_tokens={max_new_tokens}, "
        f"pad_id={pad_id}, eos_id={eos_id})"
    )
    got = impl.call(generate_batch_with, spec, prompts, max_new_tokens, pad_id, eos_id)
    out = got["output"]
    expect.that(
        isinstance(out, list) and len(out) == len(prompts),
        f"{what} returned "
        f"{type(out).__name__ if not isinstance(out, list) else f'{len(out)} items'}: return a list with one "
        "1-D tensor per prompt",
    )
    tokens = [_sequence(o, f"{what}[{i}]") for i, o in enumerate(out)]
    if tokens == expected:
        _check_finished_rows_fed_padding(got, what, prompts, pad_id, eos_id, expected)
        return
    mask = got["first_mask"]
    if not got["masks_given"]:
        expect.fail(
            f"{what} differs from one prompt at a time: the model was called without padding_mask. Left "
            "padding needs the attention mask, model(tokens, padding_mask), or the pad tokens are read as text"
        )
    if mask is not None and not bool(mask[:, -1].all()):
        expect.fail(
            f"{what}: the prompts are padded on the right (the last column holds padding): pad on the left, so "
            "that every prompt ends in the last column"
        )
    for i, (t, e) in enumerate(zip(tokens, expected, strict=True)):
        if t != e:
            if eos_id is not None and eos_id in e[len(prompts[i]) :] and t[: len(e)] == e:
                expect.fail(
                    f"{what}: prompt {i} goes on after its EOS token: a finished sequence gets pad_id with "
                    "mask False, and its output ends at its EOS"
                )
            if t == e[: len(t)] and len(t) < len(e):
                expect.fail(
                    f"{what}: prompt {i} stopped early, after {len(t) - len(prompts[i])} new tokens: the loop "
                    "runs until EVERY sequence is finished or max_new_tokens steps"
                )
            expect.fail(f"{what}: prompt {i} gave {t}, expected {e} (what generate gives for it alone)")


@BATCH.visible
def test_batch_equals_one_at_a_time(impl):
    "left-padded batches give exactly the greedy outputs of each prompt alone (lookup-table model)"
    table = _table(50)
    prompts = [torch.tensor([5, 3]), torch.tensor([9, 4, 5, 3, 1]), torch.tensor([2])]
    expected = [greedy_oracle(table, p, 8, 0) for p in prompts]
    _check_batch(impl, {"table": table}, prompts, 8, 9, 0, expected)


@BATCH.hidden
def test_batch_other_cases(impl):
    "more prompts and seeds, no EOS, and the course's LlamaDecoder (positions and mask from padding_mask)"
    table = _table(51)
    prompts = [torch.tensor([1, 2, 3, 4]), torch.tensor([6]), torch.tensor([7, 8]), torch.tensor([3, 3, 3, 3, 3, 3])]
    _check_batch(impl, {"table": table}, prompts, 7, 0, 5, [greedy_oracle(table, p, 7, 5) for p in prompts])
    _check_batch(
        impl, {"table": table}, prompts[:2], 4, 0, None, [greedy_oracle(table, p, 4, None) for p in prompts[:2]]
    )
    model, spec = _llama_spec(52)
    prompts = [torch.tensor([5, 17, 3]), torch.tensor([8, 1, 30, 22, 9, 14]), torch.tensor([2, 2])]
    _check_batch(impl, spec, prompts, 6, 0, 11, [llama_greedy(model, p, 6, 11) for p in prompts])


# --- Exercise 7 --------------------------------------------------------------------------


def enumerate_hypotheses(table, prompt, max_new_tokens, eos_id):
    """Every continuation (EOS ends one) with its summed log-probability in float64."""
    model = PrefixTableModel(table.double())
    found, frontier = [], [([], 0.0)]
    for step in range(max_new_tokens):
        next_frontier = []
        for tokens, total in frontier:
            log_probs = torch.log_softmax(model.next_logits(prompt.tolist() + tokens), -1).tolist()
            for v, lp in enumerate(log_probs):
                child = (tokens + [v], total + lp)
                (found if v == eos_id or step == max_new_tokens - 1 else next_frontier).append(child)
        frontier = next_frontier
    return found


def best_hypothesis(table, prompt, max_new_tokens, eos_id, alpha):
    scored = sorted(
        ((total / len(t) ** alpha, t) for t, total in enumerate_hypotheses(table, prompt, max_new_tokens, eos_id)),
        reverse=True,
    )
    return scored[0][1], scored[0][0], scored[0][0] - scored[1][0]


def beam_oracle(table, prompt, beam_size, max_new_tokens, eos_id, alpha, *, early_stopping=True):
    """Beam search as the notebook states it, in float64: (new tokens, score) of the best finished hypothesis.

    ``early_stopping=False`` is the mistake of searching on after ``beam_size`` hypotheses are finished.
    """
    model = PrefixTableModel(table.double())
    live, finished = [((), 0.0)], []
    for _ in range(max_new_tokens):
        ranked = sorted(
            (
                (total + step, tokens + (v,))
                for tokens, total in live
                for v, step in enumerate(
                    torch.log_softmax(model.next_logits(prompt.tolist() + list(tokens)), -1).tolist()
                )
            ),
            reverse=True,
        )
        kept = ranked[:beam_size]
        finished += [(total / len(tokens) ** alpha, tokens) for total, tokens in kept if tokens[-1] == eos_id]
        live = [(tokens, total) for total, tokens in kept if tokens[-1] != eos_id]
        if early_stopping and len(finished) >= beam_size:
            live = []
        if not live:
            break
    finished += [(total / len(tokens) ** alpha, tokens) for tokens, total in live]
    score, tokens = max(finished)
    return list(tokens), score


def _beam_case(
    impl, table, prompt, beam_size, max_new_tokens, eos_id, alpha, expected=None, expected_score=None, mistakes=()
):
    what = (
        f"beam_search(model, {prompt.tolist()}, beam_size={beam_size}, max_new_tokens={max_new_tokens}, "
        f"eos_id={eos_id}, length_penalty={alpha})"
    )
    got = impl.call(beam_search_with, table, prompt, beam_size, max_new_tokens, eos_id, alpha)
    tokens = _sequence(got["tokens"], f"the tokens of {what}")
    expect.that(
        isinstance(got["score"], float),
        f"the score of {what} is a {type(got['score']).__name__}: return (tokens, score) with the score as a float",
    )
    n = len(prompt)
    if tokens[:n] != prompt.tolist():
        expect.fail(f"{what} returned {tokens}: return the prompt followed by the best hypothesis")
    new = tokens[n:]
    if eos_id in new[:-1]:
        expect.fail(
            f"{what} returned {new} after the prompt, with tokens after an EOS: a hypothesis that ends "
            "with EOS is finished; set it aside and never extend it"
        )
    if expected is None:
        return new, got["score"]
    if new != expected:
        for wrong, diagnosis in mistakes:
            if new == wrong:
                expect.fail(f"{what} returned {new}, expected {expected}: {diagnosis}")
        hypotheses = dict((tuple(t), total) for t, total in enumerate_hypotheses(table, prompt, max_new_tokens, eos_id))
        raw = max(hypotheses, key=lambda t: hypotheses[t])
        by_total_length = max(hypotheses, key=lambda t: hypotheses[t] / (len(t) + n) ** alpha)
        if alpha != 0 and new == list(raw):
            expect.fail(
                f"{what} returned {new}, the best by summed log-probability; the score is normalised by the "
                f"length: sum of log-probs / n^{alpha}, n the number of new tokens (EOS included)"
            )
        if new == list(by_total_length) and list(by_total_length) != expected:
            expect.fail(f"{what} returned {new}: the length in the score counts the NEW tokens only, not the prompt")
        # Two mistakes that can give the same tokens: EOS never ending a hypothesis (the best of the full-length
        # continuations, EOS an ordinary token), and a search that keeps a single beam (the greedy continuation).
        unfinished = {tuple(t): total for t, total in enumerate_hypotheses(table, prompt, max_new_tokens, eos_id=-1)}
        named = [
            diagnosis
            for found, diagnosis in (
                (
                    list(max(unfinished, key=lambda t: unfinished[t] / len(t) ** alpha)),
                    "the search went on from hypotheses ending with EOS (a hypothesis that ends with EOS is finished; set "
                    "it aside and never extend it)",
                ),
                (
                    greedy_oracle(table, prompt, max_new_tokens, eos_id)[n:] if beam_size > 1 else None,
                    f"it kept one beam, the greedy continuation (keep the {beam_size} best hypotheses at every step)",
                ),
            )
            if new == found
        ]
        if named:
            expect.fail(f"{what} returned {new}, expected {expected}: {'; or '.join(named)}")
        expect.fail(f"{what} returned {new} after the prompt, expected {expected} (score {expected_score:.4f})")
    expect.that(
        abs(got["score"] - expected_score) <= 1e-4,
        f"{what} found {new} but gave it the score "
        f"{got['score']:.6f}, expected {expected_score:.6f}: score = (sum of the log-probabilities of the new "
        f"tokens) / n^length_penalty with n the number of new tokens, EOS included",
    )
    return new, got["score"]


BEAM_SEEDS = {"exhaustive": (60, 111), "two_beams": 36, "early_stopping": ((3, 2), (5, 3), (2, 3))}


def _exhaustive(impl, seed, alphas, max_new_tokens=4):
    table = _table(seed, vocab=4, scale=1.5)
    prompt = torch.tensor([1, 2])
    for alpha in alphas:
        best, score, _ = best_hypothesis(table, prompt, max_new_tokens, 0, alpha)
        _beam_case(impl, table, prompt, 500, max_new_tokens, 0, alpha, best, score)


@BEAM.visible
def test_beam_wide_is_exhaustive(impl):
    "with a beam that drops nothing, the best of all continuations (brute force), length_penalty 1 and 0"
    _exhaustive(impl, BEAM_SEEDS["exhaustive"][0], (1.0, 0.0))


@BEAM.visible
def test_beam_of_one_is_greedy(impl):
    "beam_size=1 returns the greedy sequence"
    table = _table(62, vocab=5, scale=1.5)
    prompt = torch.tensor([3])
    expected = greedy_oracle(table, prompt, 5, 0)[1:]
    model = PrefixTableModel(table.double())
    total = sum(float(torch.log_softmax(model.next_logits([3] + expected[:i]), -1)[t]) for i, t in enumerate(expected))
    _beam_case(impl, table, prompt, 1, 5, 0, 1.0, expected, total / len(expected))


@BEAM.hidden
def test_beam_length_penalty_changes_the_winner(impl):
    "length_penalty 0, 0.5, 1, 2 on a model where they give different winners, against brute force"
    _exhaustive(impl, BEAM_SEEDS["exhaustive"][1], (0.0, 0.5, 1.0, 2.0))


@BEAM.hidden
def test_two_beams_beat_greedy(impl):
    "two beams find the best sequence where greedy does not (vocabulary 3, 3 steps)"
    torch.manual_seed(BEAM_SEEDS["two_beams"])
    table = torch.randn(997, 3) * 1.5
    prompt = torch.tensor([1])
    best, score, _ = best_hypothesis(table, prompt, 3, 0, 1.0)
    expect.that(greedy_oracle(table, prompt, 3, 0)[1:] != best, "internal: greedy is optimal here")
    _beam_case(impl, table, prompt, 2, 3, 0, 1.0, best, score)


@BEAM.hidden
def test_beam_stops_when_enough_are_finished(impl):
    "stops once beam_size hypotheses are finished (early stopping), on models where searching on changes the winner"
    for seed, beam_size in BEAM_SEEDS["early_stopping"]:
        table, prompt = _table(seed, vocab=4, scale=1.5), torch.tensor([1])
        best, score = beam_oracle(table, prompt, beam_size, 5, 0, 1.0)
        searched_on, _ = beam_oracle(table, prompt, beam_size, 5, 0, 1.0, early_stopping=False)
        expect.that(best != searched_on, "internal: early stopping does not change the winner here")
        _beam_case(
            impl,
            table,
            prompt,
            beam_size,
            5,
            0,
            1.0,
            best,
            score,
            mistakes=[
                (
                    searched_on,
                    f"the search went on after {beam_size} hypotheses were finished; stop then (early "
                    "stopping), and the answer is the best of the finished ones",
                )
            ],
        )


# --- Exercise 8 --------------------------------------------------------------------------


def _cache_updates(seed, shapes):
    return [
        (layer, _randn((2, 3, n, 4), seed + i), _randn((2, 3, n, 4), seed + 50 + i))
        for i, (layer, n) in enumerate(shapes)
    ]


def _check_cache(impl, n_layers, shapes, seed):
    updates = _cache_updates(seed, shapes)
    got = impl.call(kv_cache_updates, n_layers, updates)
    expect.that(
        got["length_empty"] == 0, f"KVCache({n_layers}).length is {got['length_empty']} before any update, expected 0"
    )
    stored = {}
    for i, ((layer, k, v), step) in enumerate(zip(updates, got["steps"], strict=True)):
        what = f"update number {i + 1} (layer {layer}, {k.shape[2]} new positions)"
        before = stored.get(layer)
        k_all = k if before is None else torch.cat([before[0], k], 2)
        v_all = v if before is None else torch.cat([before[1], v], 2)
        stored[layer] = (k_all, v_all)
        if (
            before is not None
            and isinstance(step["k"], torch.Tensor)
            and step["k"].shape == k.shape
            and torch.equal(step["k"], k)
        ):
            expect.fail(
                f"{what} returned only the new keys: return everything stored for this layer, the cached keys first"
            )
        if step["k"] is not None and isinstance(step["k"], torch.Tensor) and step["k"].shape != k_all.shape:
            every = torch.cat([u[1] for u in updates[: i + 1]], 2)
            if step["k"].shape == every.shape and torch.equal(step["k"], every):
                expect.fail(f"{what}: the layers share one store: keep one list of keys and values per layer")
            expect.fail(
                f"{what} returned keys of shape {list(step['k'].shape)}, expected {list(k_all.shape)}: append "
                "along the sequence axis, torch.cat([cached, k], dim=2)"
            )
        expect.close(step["k"], k_all, f"the keys returned by {what}", atol=0)
        expect.close(step["v"], v_all, f"the values returned by {what}", atol=0)
        length = stored[0][0].shape[2] if 0 in stored else 0
        expect.that(
            step["length"] == length,
            f"after {what}, length is {step['length']}, expected {length}: the "
            "number of positions stored in layer 0 (not the number of updates)",
        )
    for name, index in (("keys", 0), ("values", 1)):  # the stores the spec names (the demos read them)
        held = got["steps"][-1].get(name)
        expect.that(
            isinstance(held, list) and len(held) == n_layers,
            f"after the updates, cache.{name} is not a list with one entry per layer ({n_layers})",
        )
        for layer in range(n_layers):
            what = f"cache.{name}[{layer}] after the updates"
            if layer in stored:
                expect.close(held[layer], stored[layer][index], what, atol=0)
            else:
                expect.that(held[layer] is None, f"{what} is not None, though layer {layer} was never updated")


@CACHE.visible
def test_cache_appends_per_layer(impl):
    "update appends along dim 2 and returns everything stored; length follows layer 0"
    _check_cache(impl, 2, [(0, 5), (1, 5), (0, 1), (1, 1), (0, 1), (1, 1)], 70)


@CACHE.hidden
def test_cache_other_patterns(impl):
    "three layers, chunks of several positions, a layer updated before layer 0"
    _check_cache(impl, 3, [(2, 2), (0, 3), (1, 3), (2, 3), (0, 2), (0, 1)], 80)


def _describe_entry(entry):
    return (
        "None"
        if entry is None
        else f"a tensor of shape {list(entry.shape)}"
        if isinstance(entry, torch.Tensor)
        else type(entry).__name__
    )


@CACHE.hidden
def test_cache_layers_hold_none_until_their_first_update(impl):
    "keys and values hold None for every layer before any update, and for each layer until its own first update"
    updates = _cache_updates(85, [(1, 2), (2, 3), (1, 1)])
    got = impl.call(kv_cache_updates, 3, updates)
    states, updated = [("before any update", got["empty"], set())], set()
    for i, ((layer, _, _), step) in enumerate(zip(updates, got["steps"], strict=True)):
        updated = updated | {layer}
        states.append((f"after update number {i + 1} (layer {layer})", step, updated))
    for when, held, updated in states:
        for name in ("keys", "values"):
            entries = held.get(name)
            expect.that(
                isinstance(entries, list) and len(entries) == 3,
                f"KVCache(3).{name} {when} is not a list with one entry per layer (3)",
            )
            for other in sorted(set(range(3)) - updated):
                expect.that(
                    entries[other] is None,
                    f"KVCache(3).{name}[{other}] {when} is {_describe_entry(entries[other])}: a layer holds None "
                    "until its first update (test `is None`, then store k and v), not an empty tensor",
                )


# Positions per layer: beyond the notebook's max_seq_len (512), its longest demo (6 + 128) and the powers of two a
# preallocated buffer would plausibly take (1024, 4096).
LONG_CACHE = 5000


def _long_cache_plan():
    """Layer 0: 4950 positions in one call, then 50 one at a time; layer 1: 350 one at a time (50 of them
    interleaved with layer 0's), then 4650 in one call."""
    return [(0, 4950)] + [(1, 1)] * 300 + [(0, 1), (1, 1)] * 50 + [(1, 4650)]


@CACHE.hidden
def test_cache_holds_any_number_of_positions(impl):
    "5000 positions per layer (in one call, or one at a time): beyond the notebook's 512 and beyond 4096"
    plan = _long_cache_plan()
    keys = [_randn((1, 1, LONG_CACHE, 2), 90 + layer) for layer in range(2)]
    values = [_randn((1, 1, LONG_CACHE, 2), 95 + layer) for layer in range(2)]
    got = impl.call(kv_cache_filled, 2, keys, values, plan)
    if got["raised"] is not None:
        layer, n = plan[got["update"]]
        expect.fail(
            f"KVCache.update number {got['update'] + 1} (layer {layer}, {n} new positions after {got['stored']}) "
            f"raised {got['raised']}: {got['message'][:200]}. The cache holds any number of positions, in one call "
            "or many: grow it (torch.cat), with no buffer of a fixed size"
        )
    for layer in range(2):
        for name, returned, expected in zip(("keys", "values"), got["returned"][layer], (keys, values), strict=True):
            what = f"the {name} returned by layer {layer}'s last update, after {LONG_CACHE} positions"
            held = returned.shape[2] if isinstance(returned, torch.Tensor) and returned.dim() == 4 else LONG_CACHE
            expect.that(
                held >= LONG_CACHE,
                f"{what} hold {held} positions, expected {LONG_CACHE}: the cache holds any number of positions: "
                "grow it (torch.cat), with no buffer of a fixed size",
            )
            expect.close(returned, expected[layer], what, atol=0)
            expect.close(
                got[name][layer], expected[layer], f"cache.{name}[{layer}] after {LONG_CACHE} positions", atol=0
            )
    expect.that(got["length"] == LONG_CACHE, f"after {LONG_CACHE} positions, length is {got['length']}")


ON_THE_DEVICE_OF_K = (
    "Keep the keys and values on the device of k and v: torch.cat them, or make any buffer on k.device "
    "(torch.zeros(...) without device= is on the CPU)"
)


@CACHE.hidden
def test_cache_on_the_device_of_k_and_v(impl):
    "on the meta device (standing for a GPU), the keys and values returned and stored stay on the device of k and v"
    got = impl.call(kv_cache_on_meta, 2, [2, 3, 4], [(0, 5), (1, 5), (0, 1), (1, 1), (0, 2)])
    expect.that(
        got["raised"] is None,
        f"KVCache.update on PyTorch's meta device (standing for a GPU) raised {got['raised']}: "
        f"{got['message'][:200]}. {ON_THE_DEVICE_OF_K}",
    )
    for where, device in got["devices"]:
        expect.that(
            device == "meta",
            f"{where} is on {device!r}, though k and v were on the meta device (standing for a GPU). "
            f"{ON_THE_DEVICE_OF_K}",
        )
    expect.that(got["length"] == 8, f"after 8 positions on the meta device, length is {got['length']}")


# --- Exercise 9 --------------------------------------------------------------------------


def _attention_state(d, heads, kv_heads, seed):
    head_dim = d // heads
    return {
        "q_proj.weight": _randn((d, d), seed, 0.3),
        "k_proj.weight": _randn((kv_heads * head_dim, d), seed + 1, 0.3),
        "v_proj.weight": _randn((kv_heads * head_dim, d), seed + 2, 0.3),
        "out_proj.weight": _randn((d, d), seed + 3, 0.3),
    }


def _attention_case(impl, d, heads, kv_heads, seed, length, chunks, layer=0, batch=2):
    state = _attention_state(d, heads, kv_heads, seed)
    x = _randn((batch, length, d), seed + 10)
    reference = RotaryGroupedQueryAttention(d, heads, kv_heads, RoPE())
    reference.load_state_dict(state)
    with torch.no_grad():
        full = reference(x, torch.ones(length, length, dtype=torch.bool).tril())
    got = impl.call(cached_attention_steps, d, heads, kv_heads, state, x, chunks, layer)
    for i, (start, end) in enumerate(chunks):
        what = (
            f"CachedRotaryGQA({d}, {heads}, {kv_heads}) on the tokens {start}..{end - 1} after {start} cached "
            f"(cache=cache, layer={layer})"
        )
        lengths = got["lengths"][i]
        length_after = lengths[layer]
        if not any(lengths):
            expect.fail(
                f"{what}: the cache is still empty: call k, v = cache.update(layer, k, v) with the rotated "
                "keys, before attention"
            )
        if got["error"] is not None and got["error"]["chunk"] == [start, end]:
            if start > 0 and length_after == 0:
                expect.fail(f"{what}: the cache is still empty: call k, v = cache.update(layer, k, v) before attention")
            expect.fail(
                f"{what} raised {got['error']['message']}: attend over all the keys and values that "
                "cache.update(layer, k, v) returns (the mask is [new, offset + new])"
            )
        out = got["outputs"][i]
        if length_after != end:
            expect.fail(
                f"{what}: layer {layer} of the cache holds {length_after} positions, expected {end}: "
                f"update the cache of layer `layer` (={layer}) once per call"
            )
        hint = (
            ""
            if start == 0
            else "The first call (empty cache) is right: store the keys AFTER RoPE (each at its "
            "own position), and attend over the keys and values cache.update returns."
        )
        expect.close(out, full[:, start:end], what, **TOL, hint=hint)
    # The outputs alone would pass raw keys that are rotated after cache.update; the spec stores rotated keys.
    keys = (x @ state["k_proj.weight"].T).view(batch, length, kv_heads, d // heads).transpose(1, 2)
    expect.close(
        got.get("cached_keys"),
        RoPE()(keys, torch.arange(length)),
        f"the keys that layer {layer} of the cache holds after all the calls",
        **TOL,
        alternatives=[
            (
                keys,
                "the cache holds the keys before RoPE: rotate them first, then "
                "k, v = cache.update(layer, k, v), so each key is rotated once, at its own position",
            )
        ],
    )


@ATTENTION.visible
def test_attention_prompt_then_single_tokens(impl):
    "a 5-token prompt then 3 single tokens with the cache equal full causal attention (course's reference)"
    summary = impl.call(cached_attention_summary, 32, 4, 2)
    expected = {
        "q_proj.weight": [32, 32],
        "k_proj.weight": [16, 32],
        "v_proj.weight": [16, 32],
        "out_proj.weight": [32, 32],
    }
    expect.that(
        summary.get("parameters") == expected,
        f"CachedRotaryGQA(32, 4, 2, rope) has parameters {summary.get('parameters')}, expected {expected} (no biases)",
    )
    _attention_case(impl, 32, 4, 2, 90, 8, [(0, 5), (5, 6), (6, 7), (7, 8)])


@ATTENTION.hidden
def test_attention_chunks_and_groups(impl):
    "prompts in two chunks, GQA ratios 1 and 4, another layer index"
    _attention_case(impl, 32, 4, 4, 91, 9, [(0, 3), (3, 7), (7, 8), (8, 9)])
    _attention_case(impl, 48, 4, 1, 92, 7, [(0, 4), (4, 5), (5, 7)], layer=2, batch=1)


@torch.no_grad()
def _reference_calls(d, heads, kv_heads, state, x, calls, cached):
    """The course's attention on the same calls as ``cached_attention_calls``, positions ``0 .. new-1`` where
    ``None`` (the spec's default), written out."""
    reference = RotaryGroupedQueryAttention(d, heads, kv_heads, RoPE())
    reference.load_state_dict(state)
    options = {"cache": KVCache(1), "layer": 0} if cached else {}
    return [
        reference(x[:, start:end], mask, torch.arange(end - start) if positions is None else positions, **options)
        for start, end, mask, positions in calls
    ]


def _check_calls(impl, d, heads, kv_heads, state, x, calls, cached, alternatives):
    """The student's attention against the course's on ``calls`` (one course ``KVCache`` across them when
    ``cached``); ``alternatives[i]``: the known mistakes of call ``i``."""
    got = impl.call(cached_attention_calls, d, heads, kv_heads, state, x, calls, cached)
    expected = _reference_calls(d, heads, kv_heads, state, x, calls, cached)
    for i, ((start, end, mask, positions), want) in enumerate(zip(calls, expected, strict=True)):
        what = (
            f"CachedRotaryGQA({d}, {heads}, {kv_heads}) on the tokens {start}..{end - 1}"
            f"{f' after {start} cached' if cached else ', without a cache'}, with "
            f"mask={'None' if mask is None else f'a [{mask.shape[0]}, {mask.shape[1]}] mask'} and "
            f"token_positions={'None' if positions is None else positions.tolist()}"
        )
        if got["raised"] is not None and got["call"] == [start, end]:
            expect.fail(f"{what} raised {got['raised']}: {got['message'][:200]}")
        expect.close(got["outputs"][i], want, what, **TOL, alternatives=alternatives[i])


def _causal(new, total):
    """The causal mask of ``new`` queries that are the last of ``total`` keys; and the one aligned at the top left
    (what is_causal=True gives scaled_dot_product_attention when there are more keys than queries)."""
    ones = torch.ones(new, total, dtype=torch.bool)
    return ones.tril(diagonal=total - new), ones.tril()


NO_MASK_GIVEN = (
    "with mask=None it attends causally: mask=None means every query attends to every key (the caller builds the "
    "mask; the decoder passes a causal one). Pass attn_mask=mask and nothing else"
)


@ATTENTION.hidden
def test_attention_without_a_mask_sees_every_key(impl):
    "mask=None: every query attends to every key (no causal mask added), without a cache and over a cache"
    d, heads, kv_heads, seed = 32, 4, 2, 93
    state = _attention_state(d, heads, kv_heads, seed)
    x = _randn((2, 6, d), seed + 10)
    causal = _reference_calls(d, heads, kv_heads, state, x, [(0, 5, _causal(5, 5)[0], None)], cached=False)[0]
    _check_calls(impl, d, heads, kv_heads, state, x, [(0, 5, None, None)], False, [[(causal, NO_MASK_GIVEN)]])
    prefill = (0, 3, _causal(3, 3)[0], torch.arange(3))
    wrong = [
        _reference_calls(d, heads, kv_heads, state, x, [prefill, (3, 6, mask, torch.arange(3, 6))], cached=True)[1]
        for mask in _causal(3, 6)
    ]
    _check_calls(
        impl,
        d,
        heads,
        kv_heads,
        state,
        x,
        [prefill, (3, 6, None, torch.arange(3, 6))],
        True,
        [[], [(w, NO_MASK_GIVEN) for w in wrong]],
    )


@ATTENTION.hidden
def test_attention_default_positions_with_a_cache(impl):
    "token_positions=None means positions 0..new-1 even over a cache holding 5 positions (the caller gives others)"
    d, heads, kv_heads, seed = 32, 4, 2, 94
    state = _attention_state(d, heads, kv_heads, seed)
    x = _randn((2, 7, d), seed + 10)
    prefill, everything = (0, 5, _causal(5, 5)[0], torch.arange(5)), torch.ones(2, 7, dtype=torch.bool)
    continued = _reference_calls(
        d, heads, kv_heads, state, x, [prefill, (5, 7, everything, torch.arange(5, 7))], cached=True
    )[1]
    diagnosis = (
        "with token_positions=None it rotates the new tokens at positions continuing from the cache: None means "
        "0 .. new-1, cache or not (the caller passes the positions; the decoder passes cache.length onward)"
    )
    _check_calls(
        impl, d, heads, kv_heads, state, x, [prefill, (5, 7, everything, None)], True, [[], [(continued, diagnosis)]]
    )


# --- Exercise 10 -------------------------------------------------------------------------


def _decoder_spec(seed, n_kv_heads=2, d=32, heads=4, n_layers=2, rope_base=10000.0):
    fields = {
        "vocab_size": 50,
        "d_model": d,
        "n_layers": n_layers,
        "n_heads": heads,
        "d_ff": 48,
        "max_seq_len": 64,
        "n_kv_heads": n_kv_heads,
        "rope_base": rope_base,
    }
    model = LlamaDecoder(DecoderConfig(**fields))
    state = {}
    for i, (name, p) in enumerate(model.state_dict().items()):
        state[name] = (
            _randn(tuple(p.shape), seed + i, 0.3) if p.dim() > 1 else 1 + _randn(tuple(p.shape), seed + i, 0.1)
        )
    model.load_state_dict(state)
    return model.eval(), fields, state


@torch.no_grad()
def _restarted_positions(model, tokens, chunks):
    """What a model whose positions restart at 0 at every call gives (the course's decoder, with that mistake)."""
    cache, outputs = KVCache(len(model.blocks)), []
    for start, end in chunks:
        new = end - start
        mask = torch.ones(new, start + new, dtype=torch.bool).tril(diagonal=start)
        outputs.append(model.run(tokens[:, start:end], torch.arange(new), mask, cache=cache))
    return outputs


def _decoder_case(impl, seed, chunks, length, n_kv_heads=2, batch=2, rope_base=10000.0):
    model, fields, state = _decoder_spec(seed, n_kv_heads, rope_base=rope_base)
    tokens = torch.randint(0, 50, (batch, length), generator=_gen(seed + 500))
    with torch.no_grad():
        full = model(tokens)
    got = impl.call(cached_decoder_steps, fields, state, tokens, chunks)
    expect.close(
        got["full"],
        full,
        "CachedDecoder(config)(tokens) without a cache",
        **TOL,
        hint="Without a cache: positions 0..seq-1 and the causal mask, as ModernDecoder.",
    )
    restarted = _restarted_positions(model, tokens, chunks)
    for i, (start, end) in enumerate(chunks):
        what = f"the logits of the call on the tokens {start}..{end - 1} after {start} cached"
        lengths = got["lengths"][i]
        if got["error"] is not None and got["error"]["chunk"] == [start, end]:
            if lengths[0] > end:
                expect.fail(
                    f"{what} raised {got['error']['message']}; layer 0 of the cache holds {lengths[0]} "
                    f"positions, expected at most {end}: block i must get layer=i"
                )
            expect.fail(
                f"{what} raised {got['error']['message']}. With a cache the mask covers every key, "
                "torch.ones(new, offset + new).tril(diagonal=offset), offset = cache.length"
            )
        if lengths[0] == 0:
            expect.fail(f"{what}: the cache is still empty: pass cache=cache (and layer=i) to every block")
        if lengths != [end] * fields["n_layers"]:
            expect.fail(
                f"after {what.split('of ', 1)[1]}, the cache's layers hold {lengths} positions, expected "
                f"{[end] * fields['n_layers']}: block i must get layer=i"
            )
        expect.close(
            got["outputs"][i],
            full[:, start:end],
            what,
            **TOL,
            alternatives=[
                (
                    restarted[i],
                    "the positions restart at 0 at every call: the new tokens are at "
                    "positions cache.length, cache.length + 1, ... (read offset = cache.length before "
                    "the blocks run)",
                )
            ],
        )


@DECODER.visible
def test_decoder_with_cache_equals_recomputation(impl):
    "a 5-token prompt then single tokens: each call's logits equal the course's decoder on the whole sequence"
    _decoder_case(impl, 100, [(0, 5), (5, 6), (6, 7), (7, 8)], 8)


@DECODER.visible
def test_decoder_generates_the_same_tokens(impl):
    "greedy generation with the cache gives the tokens of full recomputation"
    model, fields, state = _decoder_spec(110)
    prompt = torch.tensor([4, 8, 15, 16, 23, 42])
    expected = llama_greedy(model, prompt, 10, None)
    got = _sequence(impl.call(cached_decoder_generate, fields, state, prompt, 10), "greedy generation with your cache")
    expect.that(got == expected, f"greedy generation with the cache gave {got[6:]}, without it {expected[6:]}")


def _check_on_meta(got, what, advice):
    expect.that(
        got["raised"] is None,
        f"{what} on PyTorch's meta device (standing for a GPU) raised {got['raised']}: {got['message'][:200]}. "
        f"{advice}",
    )
    expect.that(got["device"] == "meta", f"{what} on the meta device returned a tensor on {got['device']!r}")


@ATTENTION.hidden
def test_attention_default_positions_on_the_device_of_x(impl):
    "on the meta device (standing for a GPU), with token_positions=None, with and without a cache: nothing made on the CPU"
    for cached in (False, True):
        _check_on_meta(
            impl.call(attention_on_meta, 32, 4, 2, [2, 5], cached),
            f"CachedRotaryGQA()(x, token_positions=None{', cache=KVCache(1)' if cached else ''})",
            "Make the default positions on the device of x: torch.arange(new, device=x.device)",
        )


@DECODER.hidden
def test_decoder_positions_and_mask_on_the_device_of_tokens(impl):
    "on the meta device (standing for a GPU), a prompt then one token with a cache: positions and mask on tokens' device"
    _, fields, _ = _decoder_spec(0)
    _check_on_meta(
        impl.call(decoder_on_meta, fields, [2, 5]),
        "CachedDecoder(tokens, cache=cache), a prompt of 5 then one token,",
        "Make the positions and the mask on the device of tokens: torch.arange(offset, offset + new, "
        "device=tokens.device) and torch.ones(new, offset + new, dtype=torch.bool, device=tokens.device)",
    )


@DECODER.hidden
def test_decoder_shares_one_rope_with_the_config_base(impl):
    "rope(d_model // n_heads, max_seq_len, rope_base) called once, that module given to all 3 blocks; rope_base 500"
    _, fields, _ = _decoder_spec(0, n_layers=3, rope_base=500.0)
    got = impl.call(decoder_ropes, fields)
    calls, given = got["rope_calls"], got["blocks_given"]
    if None not in given and len(set(given)) == len(given) > 1:  # every block got a rope of its own
        expect.fail(
            "CachedDecoder built one rope per block: build ONE rope(d_model // n_heads, max_seq_len, rope_base) "
            "and give that same module to every block"
        )
    expect.that(
        len(calls) == 1,
        f"CachedDecoder called rope {len(calls)} times, expected once: build one rope(d_model // n_heads, "
        "max_seq_len, rope_base) and give that same module to every block",
    )
    expect.that(
        given == [0] * fields["n_layers"],
        f"the {fields['n_layers']} blocks got the rope made by `rope` {given.count(0)} times: every block gets "
        "that one module, block(config, the_rope)",
    )
    expected = {"d_k": fields["d_model"] // fields["n_heads"], "max_seq_len": fields["max_seq_len"], "base": 500.0}
    for name, value in expected.items():
        config_name = {"d_k": "d_model // n_heads", "base": "config.rope_base"}.get(name, f"config.{name}")
        expect.that(
            calls[0].get(name) == value,
            f"rope was called with {name}={calls[0].get(name)!r}, expected {config_name} = {value!r}: "
            "rope(config.d_model // config.n_heads, config.max_seq_len, config.rope_base)",
        )
    _decoder_case(impl, 140, [(0, 4), (4, 5), (5, 6)], 6, rope_base=500.0)  # and the logits rotate with that base


@DECODER.hidden
def test_decoder_prompt_in_chunks(impl):
    "a prompt in two chunks (4 then 3 tokens) then single tokens; one kv head; batch 1"
    _decoder_case(impl, 120, [(0, 4), (4, 7), (7, 8), (8, 9)], 9)
    _decoder_case(impl, 130, [(0, 2), (2, 5), (5, 6)], 6, n_kv_heads=1, batch=1)


# --- Exercise 11 -------------------------------------------------------------------------


def _check_schedule(events, n_slots, n_requests, outputs, what):
    started, holding, steps_held = 0, {}, {}
    for kind, arg in events:
        if kind == "start":
            holding[arg] = started
            steps_held[started] = 0
            started += 1
        elif kind == "finish":
            request = holding.pop(arg)
            need = len(outputs[request]) - 1
            if steps_held[request] > need:
                expect.fail(
                    f"{what}: the slot of request {request} was stepped {steps_held[request] - need} more "
                    "time(s) after the request was done: finish(slot) it at once and refill the slot (this "
                    "is static batching's waste)"
                )
        else:
            for slot in arg:
                steps_held[holding[slot]] += 1
            if started < n_requests and len(arg) < n_slots:
                expect.fail(
                    f"{what}: a step ran {len(arg)} of {n_slots} slots while requests were waiting: refill a "
                    "slot as soon as its request finishes, before the next step"
                )
            if sorted(arg) != sorted(holding):
                expect.fail(
                    f"{what}: a step ran the slots {sorted(arg)} while {sorted(holding)} were busy: each step "
                    "runs every busy slot"
                )


def _batching_case(impl, spec, prompts, n_slots, max_new_tokens, eos_id, expected):
    what = (
        f"continuous_batching(engine with {n_slots} slots, {len(prompts)} prompts, max_new_tokens="
        f"{max_new_tokens}, eos_id={eos_id})"
    )
    got = impl.call(serve, spec, prompts, n_slots, max_new_tokens, eos_id)
    out = got["output"]
    expect.that(
        isinstance(out, list) and len(out) == len(prompts),
        f"{what} returned "
        f"{type(out).__name__ if not isinstance(out, list) else f'{len(out)} items'}: one list of new tokens "
        "per prompt, in the order of the prompts",
    )
    out = [o.tolist() if isinstance(o, torch.Tensor) else o for o in out]
    if out != expected:
        if sorted(map(str, out)) == sorted(map(str, expected)):
            expect.fail(f"{what}: the outputs are in another order: return them in the order of the prompts")
        for i, (o, e) in enumerate(zip(out, expected, strict=True)):
            if o != e:
                if isinstance(o, list) and o[: len(e)] == e and len(o) > len(e):
                    expect.fail(
                        f"{what}: request {i} goes on after it is done ({e}): it ends at eos_id (kept) or after "
                        "max_new_tokens new tokens"
                    )
                if isinstance(o, list) and e[: len(o)] == o:
                    expect.fail(
                        f"{what}: request {i} stopped after {len(o)} tokens, expected {e}: count the first "
                        "token (from start) too, and stop at EOS or max_new_tokens"
                    )
                expect.fail(f"{what}: request {i} gave {o}, expected {e} (greedy generation alone)")
    _check_schedule(got["events"], n_slots, len(prompts), expected, what)


def _requests(seed, n, vocab=10):
    lengths = torch.randint(1, 6, (n,), generator=_gen(seed))
    return [torch.randint(1, vocab, (int(m),), generator=_gen(seed + 1 + i)) for i, m in enumerate(lengths)]


def _table_outputs(table, prompts, max_new_tokens, eos_id):
    return [greedy_oracle(table, p, max_new_tokens, eos_id)[len(p) :] for p in prompts]


@BATCHING.visible
def test_batching_equals_one_at_a_time(impl):
    "8 requests of mixed lengths on 3 slots: the outputs of greedy generation alone, slots refilled at once"
    table = _table(140, scale=1.0)
    prompts = _requests(141, 8)
    expected = _table_outputs(table, prompts, 9, 0)
    expect.that(len({len(e) for e in expected}) > 2, "internal: lengths not mixed")
    _batching_case(impl, {"table": table}, prompts, 3, 9, 0, expected)


@BATCHING.hidden
def test_batching_edge_cases(impl):
    "one slot; more slots than requests; requests done at their first token; no EOS"
    table = _table(150, scale=1.0)
    prompts = _requests(151, 6)
    for n_slots, max_new, eos in ((1, 5, 0), (8, 6, 0), (2, 1, 0), (3, 4, None)):
        _batching_case(
            impl, {"table": table}, prompts, n_slots, max_new, eos, _table_outputs(table, prompts, max_new, eos)
        )


@BATCHING.hidden
def test_batching_with_the_slot_engine(impl):
    "the course's SlotEngine (per-slot KV caches and positions) with its reference decoder"
    model, spec = _llama_spec(160)
    prompts = _requests(161, 7, vocab=50)
    expected = [llama_greedy(model, p, 8, 41)[len(p) :] for p in prompts]
    expect.that(len({len(e) for e in expected}) > 2, "internal: lengths not mixed")
    _batching_case(impl, dict(spec, max_len=32), prompts, 3, 8, 41, expected)


# ---------------------------------------------------------------------------------------------------------------
# Adapters: the only code in this module that touches the student's objects. They run beside the student's code
# (in the sandboxed worker while grading, in the kernel for the notebook's own test cells), build and call the
# student's classes and functions on the inputs a check gives, and return plain results; they compute and report,
# never judge. A check calls one by reference, ``impl.call(name, ...)``; only functions marked ``@adapter`` can be.
#
# Adapters for notebook 11: samplers, generation loops, beam search, the KV cache, continuous batching.
#
# Each exercise is graded on its own: while ``sample_next`` runs, the notebook's ``apply_temperature``,
# ``top_k_filter`` and ``top_p_filter`` are the course's (``autograder.reference.sampling``), restored
# afterwards; the generation loops get the course's greedy choice through their ``pick`` argument; the
# cached decoder is built with the course's cache-aware ``ModernBlock``, ``RoPE`` and ``nn.RMSNorm``, and
# run with the course's ``KVCache``; the cached attention gets the course's ``RoPE`` and ``KVCache``; the
# scheduler drives the course's engines. Models are built here from plain data (a lookup table, or a
# configuration and a state dict), and each adapter reports what the student's code returned and what it
# asked of the model or the engine.


@adapter
def greedy_of(ns, logits):
    return need(ns, "greedy")(logits)


@adapter
def temperature_of(ns, logits, temperature):
    given = logits.clone()
    output = need(ns, "apply_temperature")(given, temperature)
    return {"output": output, "input_changed": not torch.equal(given, logits)}


@adapter
def temperature_like(ns, logits, temperature, device: str) -> dict:
    """``apply_temperature`` on ``logits`` moved to ``device``: what it raised, or its result's dtype and device,
    and the result itself off the meta device. A tensor made on the CPU beside meta ones gives a CPU result, or
    raises."""
    made = []
    try:
        result = outcome(lambda: made.append(need(ns, "apply_temperature")(logits.to(device), temperature)))
    except NotImplementedError as error:  # a meta tensor refusing an operation is no stub
        if is_stub(error):
            raise
        result = {"raised": type(error).__name__, "message": str(error)}
    out = made[0] if made else None
    on_meta = isinstance(out, torch.Tensor) and out.device.type == "meta"
    return result | {
        "dtype": str(getattr(out, "dtype", type(out).__name__)),
        "device": str(getattr(out, "device", "")),
        "output": None if on_meta else out,
    }


@adapter
def temperature_refuses(ns, logits, temperature):
    return outcome(need(ns, "apply_temperature"), logits.clone(), temperature)


@adapter
def filter_of(ns, name: str, logits, value):
    given = logits.clone()
    output = need(ns, name)(given, value)
    return {"output": output, "input_changed": not torch.equal(given, logits)}


# --- Exercise 4 --------------------------------------------------------------------------


@adapter
def sample_counts(ns, logits, draws: int, kwargs: dict, seed: int):
    """Counts of each token over ``draws`` draws per row of ``logits`` [rows, vocab], in one call, twice
    with generators seeded alike; the course's filters stand in for the notebook's."""
    rows, vocab = logits.shape
    batch = logits.repeat_interleave(draws, dim=0)
    results = []
    with given(
        ns,
        apply_temperature=sampling.apply_temperature,
        top_k_filter=sampling.top_k_filter,
        top_p_filter=sampling.top_p_filter,
        greedy=sampling.greedy,
    ):
        for _ in range(2):
            out = need(ns, "sample_next")(batch.clone(), **kwargs, generator=torch.Generator().manual_seed(seed))
            results.append(out)
    first = results[0]
    if not isinstance(first, torch.Tensor) or first.shape != (rows * draws,) or first.dtype.is_floating_point:
        return {"draws": first, "counts": None}
    if first.min() < 0 or first.max() >= vocab:
        return {"draws": first, "counts": None, "out_of_range": True}
    counts = torch.stack(
        [torch.bincount(first[r * draws : (r + 1) * draws].long(), minlength=vocab) for r in range(rows)]
    )
    return {
        "counts": counts,
        "repeatable": isinstance(results[1], torch.Tensor) and torch.equal(results[0], results[1]),
    }


# --- Exercises 5 and 6: models that report how they were called --------------------------


class _Watched(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model, self.calls = model, []

    def forward(self, tokens, padding_mask=None):
        self.calls.append(
            {
                "shape": list(tokens.shape),
                "tokens": tokens.clone(),
                "mask": None if padding_mask is None else padding_mask.clone(),
                "grad_enabled": torch.is_grad_enabled(),  # generate's text: the model runs under torch.no_grad()
            }
        )
        return self.model(tokens, padding_mask)


def _greedy_pick(logits):
    return logits.argmax(dim=-1)


def _llama(fields: dict, state: dict):
    model = LlamaDecoder(DecoderConfig(**fields)).eval()
    model.load_state_dict(state)
    return model


def _model(spec: dict):
    return PrefixTableModel(spec["table"]) if "table" in spec else _llama(spec["fields"], spec["state"])


@adapter
def generate_with(ns, spec: dict, prompt, max_new_tokens: int, eos_id):
    """``generate`` with a model and a greedy ``pick`` that record how they were called: the model's input shapes
    and whether gradients were enabled in it (with gradients enabled around the call, whatever the caller's mode),
    the shapes of the logits ``pick`` was given."""
    model, picked = _Watched(_model(spec)), []

    def pick(logits):
        picked.append(list(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__)
        return _greedy_pick(logits)

    with torch.enable_grad():
        out = need(ns, "generate")(model, prompt.clone(), max_new_tokens=max_new_tokens, eos_id=eos_id, pick=pick)
    return {
        "output": out,
        "calls": [c["shape"] for c in model.calls],
        "grad_enabled": [c["grad_enabled"] for c in model.calls],
        "picked": picked,
    }


@adapter
def generate_batch_with(ns, spec: dict, prompts: list, max_new_tokens: int, pad_id: int, eos_id):
    model = _Watched(_model(spec))
    out = need(ns, "generate_batch")(
        model,
        [p.clone() for p in prompts],
        max_new_tokens=max_new_tokens,
        pad_id=pad_id,
        eos_id=eos_id,
        pick=_greedy_pick,
    )
    first = model.calls[0] if model.calls else {"shape": None, "mask": None}
    last = model.calls[-1] if model.calls else {"tokens": None, "mask": None}
    return {
        "output": out,
        "calls": len(model.calls),
        "first_shape": first["shape"],
        "first_mask": first["mask"],
        "masks_given": all(c["mask"] is not None for c in model.calls),
        "last_tokens": last["tokens"],
        "last_mask": last["mask"],
    }  # what the model was fed, every column


# --- Exercise 7 --------------------------------------------------------------------------


@adapter
def beam_search_with(ns, table, prompt, beam_size: int, max_new_tokens: int, eos_id: int, length_penalty: float):
    model = PrefixTableModel(table)
    tokens, score = need(ns, "beam_search")(
        model,
        prompt.clone(),
        beam_size=beam_size,
        max_new_tokens=max_new_tokens,
        eos_id=eos_id,
        length_penalty=length_penalty,
    )
    return {"tokens": tokens, "score": float(score) if isinstance(score, numbers.Real | torch.Tensor) else score}


# --- Exercise 8 --------------------------------------------------------------------------


@adapter
def kv_cache_updates(ns, n_layers: int, updates: list):
    """``KVCache(n_layers)``: its length before anything, then each update's result and the length after it."""
    cache = need(ns, "KVCache")(n_layers)

    def stored():  # the spec names them: one entry per layer
        return {
            name: list(value) if isinstance(value := getattr(cache, name, None), list | tuple) else None
            for name in ("keys", "values")
        }

    record = {"length_empty": cache.length, "empty": stored(), "steps": []}
    for layer, k, v in updates:
        k_all, v_all = cache.update(layer, k.clone(), v.clone())
        record["steps"].append({"k": k_all, "v": v_all, "length": cache.length, **stored()})
    return record


@adapter
def kv_cache_filled(ns, n_layers: int, keys: list, values: list, plan: list) -> dict:
    """``KVCache(n_layers)`` given, for each ``(layer, n)`` of ``plan`` in turn, the next ``n`` positions of
    ``keys[layer]`` and ``values[layer]``: what each layer's last update returned, the length and the stores at
    the end; or, when an update raised, which one, what it raised and how many positions the layer held."""
    cache = need(ns, "KVCache")(n_layers)
    filled, returned = [0] * n_layers, [(None, None)] * n_layers
    for index, (layer, n) in enumerate(plan):
        start = filled[layer]
        k, v = (t[layer][:, :, start : start + n].clone() for t in (keys, values))

        def update(layer=layer, k=k, v=v):
            k_all, v_all = cache.update(layer, k, v)
            returned[layer] = (k_all, v_all)

        result = outcome(update)
        if result["raised"] is not None:
            return result | {"update": index, "stored": start}
        filled[layer] += n
    stores = {
        name: list(value) if isinstance(value := getattr(cache, name, None), list | tuple) else [None] * n_layers
        for name in ("keys", "values")
    }
    return {"raised": None, "returned": returned, "length": cache.length, **stores}


@adapter
@torch.no_grad()
def kv_cache_on_meta(ns, n_layers: int, shape: list, plan: list) -> dict:
    """``KVCache(n_layers)`` given meta ``k`` and ``v`` (``[batch, kv_heads, n, head_dim]`` from ``shape`` without
    ``n``) for each ``(layer, n)`` of ``plan``: what it raised, or the device of every tensor it returned and of
    its stores at the end, and its length. A buffer made on the CPU cannot take meta tensors, so it raises."""
    cache = need(ns, "KVCache")(n_layers)
    batch, heads, head_dim = shape
    devices = []

    def run():
        for index, (layer, n) in enumerate(plan):
            k, v = (torch.zeros(batch, heads, n, head_dim, device="meta") for _ in range(2))
            for name, t in zip(("keys", "values"), cache.update(layer, k, v), strict=True):
                devices.append((f"the {name} returned by update number {index + 1}", str(getattr(t, "device", ""))))
        for name in ("keys", "values"):
            stored = getattr(cache, name, None)
            for layer, t in enumerate(stored if isinstance(stored, list | tuple) else []):
                devices.append((f"cache.{name}[{layer}] after the updates", str(getattr(t, "device", ""))))

    try:
        result = outcome(run)
    except NotImplementedError as error:  # a meta tensor refusing to be copied to the CPU is no stub
        if is_stub(error):
            raise
        result = {"raised": type(error).__name__, "message": str(error)}
    return result | {"devices": devices, "length": cache.length if result["raised"] is None else None}


# --- Exercise 9 --------------------------------------------------------------------------


@adapter
def cached_attention_summary(ns, d_model: int, heads: int, kv_heads: int):
    return summary(need(ns, "CachedRotaryGQA")(d_model, heads, kv_heads, RoPE()))


@adapter
@torch.no_grad()
def cached_attention_steps(ns, d_model: int, heads: int, kv_heads: int, state: dict, x, chunks: list, layer: int):
    """The attention run on ``x``'s chunks in turn with one course ``KVCache``, positions continuing,
    each chunk's mask ``[new, offset + new]`` (causal); its outputs and the cache's length after each call."""
    attention = need(ns, "CachedRotaryGQA")(d_model, heads, kv_heads, RoPE())
    attention.load_state_dict(state)
    cache = KVCache(layer + 1)

    def chunk(start, end):
        mask = torch.ones(end - start, end, dtype=torch.bool).tril(diagonal=start)
        return attention(x[:, start:end], mask, torch.arange(start, end), cache=cache, layer=layer)

    result = _by_chunks(chunk, chunks, cache)
    result["cached_keys"] = cache.keys[layer]  # what the cache holds at the end: the spec says rotated keys
    return result


def _by_chunks(call, chunks: list, cache: KVCache) -> dict:
    """``call(start, end)`` for each chunk in turn: its outputs, or what it raised (and where), and the
    cache's per-layer lengths after each call."""
    result = {"outputs": [], "lengths": [], "error": None}
    for start, end in chunks:
        try:
            result["outputs"].append(call(start, end))
        except NotImplementedError:
            raise
        except Exception as error:  # noqa: BLE001 - reported with the chunk it happened in
            result["error"] = {"chunk": [start, end], "message": f"{type(error).__name__}: {error}"}
        result["lengths"].append([0 if k is None else k.shape[2] for k in cache.keys])
        if result["error"]:
            break
    return result


@adapter
@torch.no_grad()
def attention_on_meta(ns, d_model: int, heads: int, kv_heads: int, shape: list, cached: bool) -> dict:
    """``CachedRotaryGQA`` on the meta device, on meta ``x`` with ``token_positions=None`` (and a course
    ``KVCache`` when ``cached``): what it raised, or its output's device. Default positions made on the CPU
    cannot be mixed with meta tensors, so it raises."""
    module = need(ns, "CachedRotaryGQA")(d_model, heads, kv_heads, RoPE(d_model // heads, 64))
    module = module.to("meta").eval()
    x = torch.zeros([*shape, d_model], device="meta")
    options = {"cache": KVCache(1), "layer": 0} if cached else {}
    made = []
    result = outcome(lambda: made.append(module(x, None, None, **options)))
    return result | {"device": str(getattr(made[0] if made else None, "device", ""))}


@adapter
@torch.no_grad()
def cached_attention_calls(ns, d_model: int, heads: int, kv_heads: int, state: dict, x, calls: list, cached: bool):
    """The attention on ``x``'s chunks in turn, each call ``(start, end, mask, token_positions)`` given as it is
    (None included), with one course ``KVCache`` (layer 0) across them when ``cached``: each call's output, or
    which call raised what."""
    attention = need(ns, "CachedRotaryGQA")(d_model, heads, kv_heads, RoPE())
    attention.load_state_dict(state)
    options = {"cache": KVCache(1), "layer": 0} if cached else {}
    outputs = []
    for start, end, mask, positions in calls:

        def call(start=start, end=end, mask=mask, positions=positions):
            outputs.append(attention(x[:, start:end], mask, positions, **options))

        result = outcome(call)
        if result["raised"] is not None:
            return result | {"outputs": outputs, "call": [start, end]}
    return {"raised": None, "outputs": outputs}


# --- Exercise 10 -------------------------------------------------------------------------


@adapter
@torch.no_grad()
def decoder_on_meta(ns, fields: dict, shape: list) -> dict:
    """``CachedDecoder`` (the course's blocks, a RoPE that works on any device) on the meta device: a prompt of
    ``shape``, then one token, with a course ``KVCache``: what it raised, or the last logits' device. Positions
    or a mask made on the CPU cannot be mixed with meta tensors, so it raises."""
    model = need(ns, "CachedDecoder")(DecoderConfig(**fields), block=ModernBlock, norm=nn.RMSNorm, rope=RoPE)
    model = model.to("meta").eval()
    cache, made = KVCache(fields["n_layers"]), []

    def run():
        model(torch.zeros(shape, dtype=torch.long, device="meta"), cache=cache)
        made.append(model(torch.zeros([shape[0], 1], dtype=torch.long, device="meta"), cache=cache))

    return outcome(run) | {"device": str(getattr(made[0] if made else None, "device", ""))}


@adapter
def decoder_ropes(ns, fields: dict) -> dict:
    """``CachedDecoder`` built with a ``rope`` and a ``block`` that record how they are called: the arguments of
    each ``rope`` call, bound to ``RoPE(d_k, max_seq_len, base)`` (its defaults filled in), and, for each block,
    which of those calls made the rope it got (None: none of them)."""
    ropes, calls, given = [], [], []

    def rope(*args, **kwargs):
        bound = inspect.signature(RoPE).bind(*args, **kwargs)
        bound.apply_defaults()
        calls.append(dict(bound.arguments))
        ropes.append(RoPE(*args, **kwargs))
        return ropes[-1]

    def block(config, rope, **kwargs):
        given.append(next((i for i, made in enumerate(ropes) if made is rope), None))
        return ModernBlock(config, rope, **kwargs)

    need(ns, "CachedDecoder")(DecoderConfig(**fields), block=block, norm=nn.RMSNorm, rope=rope)
    return {"rope_calls": calls, "blocks_given": given}


def _decoder(ns, fields: dict):
    return need(ns, "CachedDecoder")(DecoderConfig(**fields), block=ModernBlock, norm=nn.RMSNorm, rope=RoPE)


@adapter
@torch.no_grad()
def cached_decoder_steps(ns, fields: dict, state: dict, tokens, chunks: list):
    """The decoder run on ``tokens``' chunks in turn with one course ``KVCache`` (and once without a cache,
    on everything): each call's logits, or what it raised, and the cache's per-layer lengths after it."""
    model = _decoder(ns, fields).eval()
    model.load_state_dict(state)
    cache = KVCache(fields["n_layers"])
    full = model(tokens)
    return {"full": full, **_by_chunks(lambda start, end: model(tokens[:, start:end], cache=cache), chunks, cache)}


@adapter
@torch.no_grad()
def cached_decoder_generate(ns, fields: dict, state: dict, prompt, max_new_tokens: int):
    """Greedy generation with the student's decoder and a course ``KVCache``: prefill, then one token a call."""
    model = _decoder(ns, fields).eval()
    model.load_state_dict(state)
    cache = KVCache(fields["n_layers"])
    tokens, step = prompt.clone(), prompt[None]
    for _ in range(max_new_tokens):
        token = model(step, cache=cache)[0, -1].argmax()
        tokens = torch.cat([tokens, token.view(1)])
        step = token.view(1, 1)
    return tokens


# --- Exercise 11 -------------------------------------------------------------------------


@adapter
def serve(ns, spec: dict, prompts: list, n_slots: int, max_new_tokens: int, eos_id):
    if "table" in spec:
        engine = RecomputeEngine(PrefixTableModel(spec["table"]), n_slots)
    else:
        engine = SlotEngine(_llama(spec["fields"], spec["state"]), n_slots, spec["max_len"])
    out = need(ns, "continuous_batching")(
        engine, [p.clone() for p in prompts], max_new_tokens=max_new_tokens, eos_id=eos_id
    )
    return {"output": out, "events": [[kind, what] for kind, what in engine.events]}
