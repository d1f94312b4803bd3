"""Notebook 14's exercises, with their checks and adapters: reading a profile, and FlashAttention's forward and
backward passes written in PyTorch.

Oracles:
- ``top_operators``: PyTorch's own profiler. The checks profile training steps here, on the grader's side, and
  compare the student's ranking of the exported trace with ``prof.key_averages()``'s self CPU times (to 0.01 µs:
  the trace keeps durations to the nanosecond, 0.001 µs, and a sum of a few thousand of them rounds far below
  that). On hand-made traces the oracle is brute force: at every instant (the traces use whole microseconds, so
  the midpoints of unit steps), the innermost operator open on each thread is charged.
- ``flash_attention_forward``: ``F.scaled_dot_product_attention`` and ``torch.logsumexp`` of the masked scores,
  both in float64. Outputs and log-sum-exps of order 1, summed over at most 300 keys in float32: measured errors
  below 1e-6 (6 shapes, float32 answer against the float64 oracle), so atol 1e-5 + rtol 1e-5.
- ``FlashAttention``: autograd through ``F.scaled_dot_product_attention`` in float64. Gradients sum up to 300
  products of order 1 in float32: measured errors below 1e-6, so atol 1e-4 + rtol 1e-4.

The memory rules are observed, not read: ``coursetools.memory.watch_memory`` sees every tensor the student's code
makes, the backward pass included (``_limits`` says what is allowed and why), and ``saved_for_backward`` every
tensor it keeps for the backward pass.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from autograder import expect
from autograder.adapters import adapter, given, need
from autograder.exercises import Exercise
from autograder.notebooks._seeds import seeded
from autograder.rules import ATTENTIONS, LOG_SOFTMAXES, SOFTMAXES, Rule
from coursetools.memory import saved_for_backward, storage_bytes, watch_memory

_NO_READY_MADE = (
    "no ready-made attention or softmax (F.scaled_dot_product_attention, softmax, log_softmax, logsumexp and the "
    "like); and no [T_q, T_k] tensor, not even a boolean mask, nor the score tiles kept until the end"
)
TOP_OPERATORS = Exercise("top_operators", "the operators that take the time", points=2)
FLASH_FORWARD = Exercise(
    "flash_attention_forward",
    "FlashAttention's forward pass",
    points=3,
    rules=(Rule(_NO_READY_MADE, SOFTMAXES + LOG_SOFTMAXES + ATTENTIONS),),
)
FLASH_BACKWARD = Exercise(
    "flash_attention_backward",
    "the backward pass, by recomputation",
    points=3,
    rules=(Rule(_NO_READY_MADE, SOFTMAXES + LOG_SOFTMAXES + ATTENTIONS),),
)
EXERCISES = [TOP_OPERATORS, FLASH_FORWARD, FLASH_BACKWARD]

SELF_TIME_TOL = 0.01  # µs (module docstring)
F32 = {"atol": 1e-5, "rtol": 1e-5}
GRAD = {"atol": 1e-4, "rtol": 1e-4}

_gen, _randn = seeded(14000)


# --- top_operators ---------------------------------------------------------------------------------------------


def _op(name, ts, dur, tid=1):
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 7, "tid": tid, "ts": ts, "dur": dur, "args": {}}


def _hand_made_trace() -> dict:
    """Nested operators on two threads that overlap in time, a grandchild, a parent and child that start together,
    a zero-length operator, siblings that touch, and events that are not operators (an annotation around a step,
    a flow arrow, the process's name)."""
    events = [
        # thread 1: a linear (0-100) holding an addmm (10-70) holding a copy_ (20-30); then a mul (100-130) that
        # starts where the linear ends, holding an empty (100-100) and a copy_ (100-110) that start with it
        _op("aten::linear", 0, 100),
        _op("aten::addmm", 10, 60),
        _op("aten::copy_", 20, 10),
        _op("aten::copy_", 100, 10),  # listed before its parent, which starts at the same instant
        _op("aten::empty", 100, 0),
        _op("aten::mul", 100, 30),
        _op("aten::gelu", 140, 25),
        # thread 2, at the same time: the autograd engine's own operators, nested likewise
        _op("autograd::engine::evaluate_function: MmBackward0", 5, 120, tid=2),
        _op("aten::mm", 15, 80, tid=2),
        _op("aten::mul", 130, 5, tid=2),
        # not operators: what a whole step is annotated with, a forward-backward flow arrow, metadata
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 7, "tid": 1, "ts": 0, "dur": 200},
        {"ph": "s", "cat": "fwdbwd", "name": "fwdbwd", "pid": 7, "tid": 1, "ts": 15, "id": 3},
        {"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "python"}},
    ]
    return {"schemaVersion": 1, "traceEvents": events}


def _brute_force_self_times(trace: dict) -> dict[str, float]:
    """At the middle of each microsecond (the hand-made traces use whole ones), charge the innermost operator open
    on each thread: the one that started last among those open then (the longest, if several started together)."""
    ops = [e for e in trace["traceEvents"] if e.get("cat") == "cpu_op" and e.get("ph") == "X"]
    times = {op["name"]: 0.0 for op in ops}
    end = max(op["ts"] + op["dur"] for op in ops)
    for thread in {op["tid"] for op in ops}:
        for step in range(int(end)):
            instant = step + 0.5
            open_ops = [op for op in ops if op["tid"] == thread and op["ts"] <= instant < op["ts"] + op["dur"]]
            if open_ops:
                innermost = max(open_ops, key=lambda op: (op["ts"], -op["dur"]))
                times[innermost["name"]] += 1.0
    return times


def _total_times(trace):
    totals = {}
    for e in trace["traceEvents"]:
        if e.get("cat") == "cpu_op" and e.get("ph") == "X":
            totals[e["name"]] = totals.get(e["name"], 0.0) + e["dur"]
    return totals


def _ranked(times: dict, k: int) -> list[tuple[str, float]]:
    return sorted(times.items(), key=lambda item: (-item[1], item[0]))[:k]


def _as_ranking(got, what: str) -> list[tuple[str, float]]:
    expect.that(
        isinstance(got, list | tuple) and all(isinstance(r, list | tuple) and len(r) == 2 for r in got),
        f"{what} is {type(got).__name__} {str(got)[:120]}; expected a list of (name, self time in µs) pairs",
    )
    expect.that(
        all(isinstance(name, str) and isinstance(t, int | float) for name, t in got),
        f"{what}: each pair is (name: str, self time: float), got {list(got)[:3]}",
    )
    return [(name, float(t)) for name, t in got]


def _same_ranking(got, expected, what: str, mistakes=(), truth: dict | None = None):
    """``got`` equals ``expected`` (names in order, times to SELF_TIME_TOL); else the known mistake it equals.
    ``truth``: every operator's self time, to tell a ranking whose ties are ordered wrongly."""

    def equal(a, b):
        return [n for n, _ in a] == [n for n, _ in b] and all(
            abs(x - y) <= SELF_TIME_TOL for (_, x), (_, y) in zip(a, b, strict=True)
        )

    if equal(got, expected):
        return
    right_times = truth is not None and all(abs(t - truth.get(n, math.inf)) <= SELF_TIME_TOL for n, t in got)
    descending = all(a[1] >= b[1] - SELF_TIME_TOL for a, b in zip(got, got[1:], strict=False))
    if right_times and descending and len(got) == len(expected):
        expect.fail(
            f"{what} has the right operators and self times in another order: rank by self time, the "
            f"largest first, and equal self times by name, alphabetically (got {[n for n, _ in got]})"
        )
    for wrong, diagnosis in mistakes:
        if equal(got, wrong):
            expect.fail(f"{what} is wrong: {diagnosis}")
    expect.fail(f"{what}: got {got}, expected {expected}")


def _self_time_mistakes(trace: dict, k: int) -> list:
    ops = [e for e in trace["traceEvents"] if e.get("cat") == "cpu_op" and e.get("ph") == "X"]
    everything = [e for e in trace["traceEvents"] if e.get("ph") == "X"]

    def nested_self(events, *, all_descendants=False, one_thread=False, by_start_only=False):
        times = {}
        for thread in {0} if one_thread else {e["tid"] for e in events}:
            mine = [e for e in events if one_thread or e["tid"] == thread]
            key = (lambda e: e["ts"]) if by_start_only else (lambda e: (e["ts"], -e["dur"]))
            mine = sorted(mine, key=key)
            stack = []
            for e in mine:
                while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"]:
                    stack.pop()
                times[e["name"]] = times.get(e["name"], 0.0) + e["dur"]
                for parent in stack if all_descendants else stack[-1:]:
                    times[parent["name"]] -= e["dur"]
                stack.append(e)
        return times

    return [
        (
            _ranked(_total_times(trace), k),
            "it ranks total times; an operator's self time leaves out the time of the operators inside it",
        ),
        (
            _ranked(nested_self(ops, all_descendants=True), k),
            "it subtracts every operator inside, grandchildren too; "
            "subtract only the direct children (a child's own time already excludes the grandchild)",
        ),
        (
            _ranked(nested_self(ops, one_thread=True), k),
            "it nests operators of different threads; nesting only "
            "happens on one thread: group the events by (pid, tid) first",
        ),
        (
            _ranked(nested_self(everything), k),
            "it counts events that are not operators (user annotations such as "
            "ProfilerStep#1): keep the events whose cat is 'cpu_op'",
        ),
        (
            _ranked(nested_self(ops, by_start_only=True), k),
            "two operators that start at the same instant are nested "
            "the wrong way round: the longer one is the parent (sort by start, then by longest first)",
        ),
    ]


@TOP_OPERATORS.visible
def test_hand_made_trace(impl):
    "the self times of a hand-made trace: nesting, two threads, events that are not operators"
    trace = _hand_made_trace()
    truth = _brute_force_self_times(trace)
    got = _as_ranking(impl.call(call_top_operators, trace, 5), "top_operators(trace, k=5)")
    _same_ranking(
        got, _ranked(truth, 5), "top_operators(trace, k=5) on a hand-made trace", _self_time_mistakes(trace, 5), truth
    )


@TOP_OPERATORS.hidden
def test_k_and_ties(impl):
    "k larger than the number of operators gives them all; equal self times are ranked by name"
    trace = {"traceEvents": [_op("b", 0, 10), _op("a", 20, 10), _op("c", 40, 30), _op("a", 40, 20)]}
    truth = _brute_force_self_times(trace)
    expected = _ranked(truth, 10)
    got = _as_ranking(impl.call(call_top_operators, trace, 10), "top_operators(trace, k=10) for 3 operators")
    _same_ranking(got, expected, "top_operators(trace, k=10), where b and c tie at 10 µs", truth=truth)
    got = _as_ranking(impl.call(call_top_operators, trace, 1), "top_operators(trace, k=1)")
    _same_ranking(got, expected[:1], "top_operators(trace, k=1)")


def _profiled_step(seed: int, width: int) -> tuple[dict, dict[str, float]]:
    """A real trace: one training step of a small network profiled here, and the self CPU times the profiler
    itself reports (key_averages) for the operators in it."""
    from torch.profiler import ProfilerActivity, profile

    os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # no profiler log lines in the test cell's output (read lazily)
    with torch.random.fork_rng():  # the notebook's own random numbers stay as they were (visible checks run there)
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width), nn.LayerNorm(width))
        x = torch.randn(16, width)
    optimizer = torch.optim.AdamW(model.parameters())

    def step():
        model(x).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()

    step()  # AdamW makes its state at the first step: profile a later one
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.json"
        prof.export_chrome_trace(str(path))
        trace = json.loads(path.read_text())
    names = {e["name"] for e in trace["traceEvents"] if e.get("cat") == "cpu_op"}
    return trace, {a.key: a.self_cpu_time_total for a in prof.key_averages() if a.key in names}


@TOP_OPERATORS.hidden
def test_real_profiles(impl):
    "on real profiles of training steps: the k operators with the most self CPU time, as key_averages() counts it"
    for seed, width, k in ((1, 32, 10), (2, 64, 25)):
        trace, oracle = _profiled_step(seed, width)
        what = f"top_operators(trace, k={k}) for a profiled training step"
        got = _as_ranking(impl.call(call_top_operators, trace, k), what)
        expect.that(len(got) == k, f"{what} returned {len(got)} operators, expected {k}")
        unknown = [name for name, _ in got if name not in oracle]
        expect.that(not unknown, f"{what} names {unknown[:3]}, which are not operators of the trace")
        wrong = [(name, t, oracle[name]) for name, t in got if abs(t - oracle[name]) > SELF_TIME_TOL]
        if wrong:
            mistakes = _self_time_mistakes(trace, k)
            _same_ranking(got, _ranked(oracle, k), what, mistakes)
        expect.that(
            all(a[1] >= b[1] for a, b in zip(got, got[1:], strict=False)),
            f"{what} is not in decreasing order of self time: {got[:5]}",
        )
        cut = sorted(oracle.values(), reverse=True)[k - 1]  # the k-th largest self time
        left_out = [(n, t) for n, t in _ranked(oracle, len(oracle)) if t > cut + SELF_TIME_TOL and n not in dict(got)]
        expect.that(not left_out, f"{what} leaves out {left_out[:3]}, which took more self time")


# --- FlashAttention: shapes, oracles and limits ----------------------------------------------------------------


def _qkv(batch, heads, t_q, t_k, d, seed, score_scale=1.0):
    """Queries, keys and values; ``score_scale`` multiplies the queries and the keys (so the scores by its square)."""
    g = _gen(seed)
    q, k, v = (torch.randn(batch, heads, t, d, generator=g) for t in (t_q, t_k, t_k))
    return q * score_scale, k * score_scale, v


def _mask(t_q, t_k):
    """The course's causal mask for T_q <= T_k: the queries are the last T_q positions (bottom-right, as with a KV
    cache and in FlashAttention-2), so query i sees keys j <= i + T_k - T_q."""
    return torch.ones(t_q, t_k, dtype=torch.bool).tril(diagonal=t_k - t_q)


def _scores(q, k, causal, scale=None):
    s = q.double() @ k.double().transpose(-2, -1) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    return s.masked_fill(~_mask(q.shape[-2], k.shape[-2]), -math.inf) if causal else s


def _oracle(q, k, v, causal):
    mask = _mask(q.shape[-2], k.shape[-2]) if causal else None
    out = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask)
    return out, torch.logsumexp(_scores(q, k, causal), -1)


def _forward_mistakes(q, k, v, causal):
    t_q, t_k = q.shape[-2], k.shape[-2]
    q64, k64, v64 = q.double(), k.double(), v.double()
    out, lse = _oracle(q, k, v, causal)
    row_max = _scores(q, k, causal).amax(-1, keepdim=True)
    mask = _mask(t_q, t_k) if causal else None
    outs = [
        (
            F.scaled_dot_product_attention(q64, k64, v64, attn_mask=mask, scale=1.0),
            "the scores are not scaled by 1/sqrt(d)",
        ),
        (
            torch.exp(lse[..., None] - row_max) * out,
            "the output is not divided by the running sum l: divide the accumulator once, after the last key tile",
        ),
    ]
    if causal:
        outs.append((F.scaled_dot_product_attention(q64, k64, v64), "the causal mask is missing"))
        if t_q != t_k:
            outs.append(
                (
                    F.scaled_dot_product_attention(q64, k64, v64, is_causal=True),
                    "the causal mask is aligned top-left (SDPA's is_causal); here the queries are the last T_q "
                    "positions: query i sees keys j <= i + T_k - T_q",
                )
            )
    lses = [
        (torch.logsumexp(_scores(q, k, causal, scale=1.0), -1), "the scores are not scaled by 1/sqrt(d)"),
        (row_max.squeeze(-1), "it returns the running max m; the log-sum-exp is m + log(l)"),
        (lse - row_max.squeeze(-1), "it returns log(l) alone; the log-sum-exp is m + log(l)"),
        (lse / math.log(2), "it is in bits (log2); the log-sum-exp uses the natural log"),
    ]
    return outs, lses


def _padded(t, block):
    return -(-t // block) * block


def _limits(q, k, block_q, block_k, *, backward=False) -> dict:
    """What a tiled attention may make: no tensor bigger than its inputs (padded to whole tiles) or one tile of
    scores per batch and head; alive at once, at most three copies of q, k and v (padded) and eight tiles, and for
    the backward pass two more copies (dQ, dK, dV and the gradients it is given). The answers measured use about
    one copy and two tiles (forward) and two copies (backward). A [T_q, T_k] tensor, or the score tiles kept, is
    more: the checks choose T much larger than d and the tiles, so these bounds part them."""
    *batch, t_q, d = q.shape
    t_k = k.shape[-2]
    heads = math.prod(batch)
    inputs = heads * (_padded(t_q, block_q) + 2 * _padded(t_k, block_k)) * d
    largest = heads * max(_padded(t_q, block_q) * d, _padded(t_k, block_k) * d, block_q * block_k)
    peak = q.element_size() * ((5 if backward else 3) * inputs + 8 * heads * block_q * block_k)
    return {
        "largest": largest,
        "peak_bytes": peak,
        "quadratic": t_q * t_k,
        "quadratic_bytes": q.element_size() * heads * t_q * t_k,
    }


def _check_memory(seen: dict, limits: dict, what: str):
    expect.that(
        seen["largest_numel"] <= limits["largest"],
        f"{what} made a tensor of shape {seen['largest']} ({seen['largest_numel']:,} numbers), more than its inputs or "
        f"a [block_q, block_k] tile of scores per batch and head ({limits['largest']:,}); for "
        f"T_q x T_k = {limits['quadratic']:,} scores that is a quadratic tensor (a [T_q, T_k] mask made once is one "
        "too): work tile by tile, and build each tile's mask from the positions of its rows and columns",
    )
    expect.that(
        seen["peak_bytes"] <= limits["peak_bytes"],
        f"{what} had {seen['peak_bytes']:,} bytes of tensors alive at once, more than a few tiles and copies of its "
        f"inputs ({limits['peak_bytes']:,}; all the scores take {limits['quadratic_bytes']:,}): do not keep every "
        "tile's scores or probabilities, combine each tile into the running max, sum and output, then let it go",
    )


# --- flash_attention_forward -----------------------------------------------------------------------------------

# (batch, heads, T_q, T_k, d, block_q, block_k, causal, seed): tiles that divide the lengths and tiles that do not,
# one tile for everything, causal with T_q < T_k (bottom-right), T_q > T_k, row tiles taller than key tiles.
FORWARD_CASES = [
    (2, 3, 37, 37, 16, 16, 8, False, 1),
    (1, 2, 50, 50, 8, 16, 16, True, 2),
    (2, 1, 23, 41, 32, 8, 16, False, 3),
    (1, 1, 64, 64, 4, 64, 64, True, 4),
    (1, 2, 5, 70, 8, 4, 32, True, 5),
    (1, 2, 70, 5, 8, 16, 4, False, 6),
    (1, 1, 48, 48, 8, 32, 16, True, 7),
    (1, 2, 29, 61, 8, 16, 8, True, 16),
]


def _check_forward(impl, case, *, score_scale=1.0):
    batch, heads, t_q, t_k, d, bq, bk, causal, seed = case
    q, k, v = _qkv(batch, heads, t_q, t_k, d, seed, score_scale)
    # Each score is rounded to float32 before exp: a relative error of 2^-24 of the largest score moves the weights,
    # hence the output and the log-sum-exp, by about that much; measured: at most 2.2 of them (20 seeds); 16 are allowed.
    largest = float(_scores(q, k, causal).abs().masked_fill(~_scores(q, k, causal).isfinite(), 0).max())
    tol = {"atol": max(F32["atol"], 16 * 2**-24 * largest), "rtol": F32["rtol"]}
    what = f"flash_attention_forward for q [{batch}, {heads}, {t_q}, {d}], T_k = {t_k}, tiles {bq} x {bk}" + (
        ", causal" if causal else ""
    )
    got = impl.call(run_flash_forward, q, k, v, causal, bq, bk)
    expect.that(
        isinstance(got["value"], list | tuple) and len(got["value"]) == 2,
        f"{what} returned {type(got['value']).__name__}; expected a pair (out, lse)",
    )
    out, lse = got["value"]
    expected_out, expected_lse = _oracle(q, k, v, causal)
    outs, lses = _forward_mistakes(q, k, v, causal)
    hint = (
        "When a new tile raises the running max from m to m', rescale the sum and the output accumulated so far "
        "by exp(m - m'); and subtract the running max before exp, so that no exponential overflows."
    )
    expect.tensor(out, f"the output of {what}", shape=q.shape)
    expect.close(out, expected_out, f"the output of {what}", **tol, alternatives=outs, hint=hint)
    expect.tensor(lse, f"the log-sum-exp of {what}", shape=q.shape[:-1])
    expect.close(lse, expected_lse, f"the log-sum-exp of {what}", **tol, alternatives=lses, hint=hint)
    return got


@FLASH_FORWARD.visible
def test_forward_small(impl):
    "output and log-sum-exp equal SDPA's and torch.logsumexp's: tiles that do not divide T, causal or not"
    for case in FORWARD_CASES[:2]:
        _check_forward(impl, case)


@FLASH_FORWARD.hidden
def test_forward_shapes_and_tiles(impl):
    "more shapes: T_q != T_k, one tile for everything, causal with T_q < T_k (bottom-right), tall and wide tiles"
    for case in FORWARD_CASES[2:]:
        _check_forward(impl, case)


@FLASH_FORWARD.hidden
def test_forward_large_scores(impl):
    "scores in the hundreds (queries and keys scaled by 8): the running max keeps every exp finite"
    _check_forward(impl, (1, 2, 40, 40, 16, 16, 8, True, 8), score_scale=8.0)


# T much larger than d and the tiles, so that a quadratic tensor is far above the limits (``_limits``).
assert all(case[2] <= case[3] for case in FORWARD_CASES if case[7])  # causal needs T_q <= T_k (``_mask``)
MEMORY_CASES = [(1, 2, 400, 400, 8, 32, 16, True, 9), (1, 1, 160, 256, 8, 16, 32, False, 10)]


@FLASH_FORWARD.hidden
def test_forward_memory(impl):
    "no [T_q, T_k] tensor, and no more alive at once than a few tiles and copies of the inputs"
    for case in MEMORY_CASES:
        got = _check_forward(impl, case)
        batch, heads, t_q, t_k, d, bq, bk, causal, _ = case
        q, k, _ = _qkv(batch, heads, t_q, t_k, d, 0)
        _check_memory(got["memory"], _limits(q, k, bq, bk), f"flash_attention_forward (T_q = {t_q}, T_k = {t_k})")


# --- FlashAttention: the backward pass -------------------------------------------------------------------------


def _course_forward(q, k, v, causal=False, block_q=32, block_k=32):
    """The forward pass written out in float64 (the whole score matrix, no tiles), in place of the student's, so the
    backward is graded on its own. It calls no softmax: the exercise's rules refuse those while the checks run."""
    with torch.no_grad():
        scores = _scores(q, k, causal)
        row_max = scores.amax(-1, keepdim=True)
        weights = torch.exp(scores - row_max)
        total = weights.sum(-1, keepdim=True)
        out = (weights / total) @ v.double()
        return out.to(q.dtype), (row_max + torch.log(total)).squeeze(-1).to(q.dtype)


def _oracle_grads(q, k, v, causal, grad_out):
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    mask = _mask(q.shape[-2], k.shape[-2]) if causal else None
    F.scaled_dot_product_attention(*leaves, attn_mask=mask).backward(grad_out.double())
    return [t.grad for t in leaves]


def _grad_mistakes(q, k, v, causal, grad_out):
    dq, dk, dv = _oracle_grads(q, k, v, causal, grad_out)
    # Without the D = rowsum(dO * O) term: dS = P * dP, i.e. the gradient through exp alone, not the softmax.
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    s = _scores(*leaves[:2], causal)
    p = torch.exp(s - torch.logsumexp(s, -1, keepdim=True).detach())
    (p @ leaves[2]).backward(grad_out.double())
    no_delta = [t.grad for t in leaves]
    return {
        "q": [
            (no_delta[0], "dS = P * (dP - D) needs D = rowsum(dO * O) per query; it is missing"),
            (dq * math.sqrt(q.shape[-1]), "dS is not multiplied by the scale 1/sqrt(d) in dQ = dS K * scale"),
        ],
        "k": [
            (no_delta[1], "dS = P * (dP - D) needs D = rowsum(dO * O) per query; it is missing"),
            (dk * math.sqrt(q.shape[-1]), "dS is not multiplied by the scale 1/sqrt(d) in dK = dS^T Q * scale"),
            (dv, "dK and dV are swapped"),
        ],
        "v": [(dk, "dK and dV are swapped")],
    }


BACKWARD_CASES = [
    (1, 2, 37, 37, 16, 16, 8, False, 11),
    (2, 1, 45, 45, 8, 16, 16, True, 12),
    (1, 2, 23, 41, 32, 8, 16, False, 13),
    (1, 1, 70, 5, 8, 16, 4, False, 14),
    (1, 2, 5, 70, 8, 4, 32, True, 15),
    (1, 2, 29, 61, 8, 16, 8, True, 17),
]


def _check_backward(impl, case):
    batch, heads, t_q, t_k, d, bq, bk, causal, seed = case
    q, k, v = _qkv(batch, heads, t_q, t_k, d, seed)
    grad_out = _randn((batch, heads, t_q, d), seed + 100)
    what = f"FlashAttention's gradients for q [{batch}, {heads}, {t_q}, {d}], T_k = {t_k}, tiles {bq} x {bk}" + (
        ", causal" if causal else ""
    )
    got = impl.call(run_flash_backward, q, k, v, causal, bq, bk, grad_out)
    expect.that(isinstance(got.get("grads"), dict), f"{what}: {got.get('grads')}")
    mistakes = _grad_mistakes(q, k, v, causal, grad_out)
    for name, expected in zip("qkv", _oracle_grads(q, k, v, causal, grad_out), strict=True):
        expect.close(got["grads"][name], expected, f"d{name.upper()} of {what}", **GRAD, alternatives=mistakes[name])
    return got


@FLASH_BACKWARD.visible
def test_backward_small(impl):
    "dQ, dK and dV equal autograd's through SDPA, causal or not, with tiles that do not divide T"
    for case in BACKWARD_CASES[:2]:
        _check_backward(impl, case)


@FLASH_BACKWARD.hidden
def test_backward_shapes(impl):
    "more shapes: T_q != T_k, causal with T_q < T_k (bottom-right)"
    for case in BACKWARD_CASES[2:]:
        _check_backward(impl, case)


@FLASH_BACKWARD.visible
def test_backward_saves_no_probabilities(impl):
    "what forward keeps for backward: q, k, v, the output and the log-sum-exp, not the probabilities"
    batch, heads, t_q, t_k, d, bq, bk, causal, seed = MEMORY_CASES[0]
    q, k, v = _qkv(batch, heads, t_q, t_k, d, seed)
    got = impl.call(run_flash_backward, q, k, v, causal, bq, bk, _randn(q.shape, seed + 100))
    inputs = 4 * q.numel() + k.numel() + v.numel()  # q, k, v, out, and lse and a little more as the fourth q
    kept = got["saved_bytes"] // q.element_size()
    expect.that(
        kept <= inputs,
        f"FlashAttention keeps {kept:,} numbers for its backward pass (ctx.save_for_backward and attributes of ctx), "
        f"more than q, k, v, the output and the log-sum-exp ({inputs:,} at most) for T = {t_q}: the backward pass "
        "recomputes the probabilities from the saved log-sum-exp, P = exp(S - lse), instead of keeping them",
    )


@FLASH_BACKWARD.hidden
def test_backward_memory(impl):
    "the backward pass makes no [T_q, T_k] tensor either, and keeps no more alive than a few tiles"
    for case in MEMORY_CASES:
        got = _check_backward(impl, case)
        batch, heads, t_q, t_k, d, bq, bk, causal, _ = case
        q, k, _ = _qkv(batch, heads, t_q, t_k, d, 0)
        _check_memory(
            got["memory"], _limits(q, k, bq, bk, backward=True), f"FlashAttention.backward (T_q = {t_q}, T_k = {t_k})"
        )


# ---------------------------------------------------------------------------------------------------------------
# Adapters: the only code in this module that touches the student's objects (see autograder/notebooks/__init__.py).


@adapter
def call_top_operators(ns, trace: dict, k: int):
    return need(ns, "top_operators")(trace, k)


def _memory(seen) -> dict:
    return {"peak_bytes": seen.peak_bytes, "largest": list(seen.largest), "largest_numel": seen.largest_numel}


@adapter
def run_flash_forward(ns, q, k, v, causal: bool, block_q: int, block_k: int):
    """The student's forward, and what it made meanwhile (``coursetools.memory``)."""
    forward = need(ns, "flash_attention_forward")
    with watch_memory() as seen:
        value = forward(q, k, v, causal, block_q, block_k)
    return {"value": value, "memory": _memory(seen)}


@adapter
def run_flash_backward(ns, q, k, v, causal: bool, block_q: int, block_k: int, grad_out):
    """``FlashAttention.apply`` with PyTorch's attention as ``flash_attention_forward`` (the forward pass is the
    previous exercise's), then ``backward(grad_out)``: the gradients, the bytes kept for the backward pass (saved
    tensors and tensors set on ctx) and what the backward pass made."""
    function = need(ns, "FlashAttention")
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    with given(ns, flash_attention_forward=_course_forward), saved_for_backward() as saved:
        out = function.apply(*leaves, causal, block_q, block_k)
    if not isinstance(out, torch.Tensor) or out.shape != q.shape or out.grad_fn is None:
        return {
            "grads": f"FlashAttention.apply returned {type(out).__name__} {list(getattr(out, 'shape', []))}; "
            f"expected the output, of q's shape {list(q.shape)}, with a grad_fn"
        }
    on_ctx = (
        [value for value in vars(out.grad_fn).values() if isinstance(value, torch.Tensor)]
        if hasattr(out.grad_fn, "__dict__")
        else []
    )
    kept = storage_bytes([*saved, *on_ctx])
    with watch_memory() as seen:
        out.backward(grad_out)
    grads = {name: t.grad if t.grad is not None else torch.zeros_like(t) for name, t in zip("qkv", leaves, strict=True)}
    return {"grads": grads, "saved_bytes": kept, "memory": _memory(seen)}


with contextlib.suppress(ImportError):  # the profiler's import is slow the first time: pay it while importing
    import torch.profiler  # noqa: F401
