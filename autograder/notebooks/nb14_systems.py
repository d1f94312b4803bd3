"""Notebook 14's exercises, with their checks and adapters: reading a profile, and FlashAttention's forward and
backward passes written in PyTorch.

Oracles:
- ``top_operators``: PyTorch's own profiler. The checks profile training steps here, on the grader's side, and
  compare the student's ranking of the exported trace with ``prof.key_averages()``'s self CPU times (to 0.01 µs:
  the trace keeps durations to the nanosecond, 0.001 µs, and a sum of a few thousand of them rounds far below
  that). On hand-made traces the oracle is brute force: at every instant (the traces use whole microseconds, so
  the midpoints of unit steps), the innermost operator open on each thread is charged.
- ``block_activation_bytes``: a measurement. ``coursetools.block_memory`` runs the block the formula describes and
  sums the distinct storages autograd saves (``saved_tensors_hooks``), parameters left out; integers, compared
  exactly. A wrong formula is diagnosed by fitting its differences from the measurements, over at least seven
  shapes, to the terms a block's memory is made of (``_ACTIVATION_TERMS``).
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
from coursetools.block_memory import measured_block_bytes
from coursetools.memory import bytes_held_by, saved_for_backward, storage_bytes, tensors_held_by, watch_memory

_NO_READY_MADE = (
    "no ready-made attention or softmax (F.scaled_dot_product_attention, softmax, log_softmax, logsumexp and the "
    "like), no NumPy and no .tolist(), and only a few Python numbers per tile (an .item() for a loop bound); no "
    "[T_q, T_k] tensor, not even a boolean mask, no product larger than a tile, and the score tiles not kept"
)
# The values leave PyTorch in bulk only through these, which the rule refuses (so a NumPy attention cannot hide from
# the checks, which watch PyTorch's operators); one number at a time (.item(), float()), the checks count them.
_LEAVING_TORCH = ("torch.Tensor.numpy", "torch.Tensor.__array__", "torch.Tensor.tolist")
SCALARS_PER_TILE = 4  # Python numbers taken out of tensors per pair of tiles, beyond SCALARS_ALLOWED
SCALARS_ALLOWED = 64
TOP_OPERATORS = Exercise("top_operators", "the operators that take the time", points=2)
ACTIVATIONS = Exercise("block_activation_bytes", "the memory one block keeps", points=2)
FLASH_FORWARD = Exercise(
    "flash_attention_forward",
    "FlashAttention's forward pass",
    points=3,
    rules=(Rule(_NO_READY_MADE, SOFTMAXES + LOG_SOFTMAXES + ATTENTIONS + _LEAVING_TORCH),),
)
FLASH_BACKWARD = Exercise(
    "flash_attention_backward",
    "the backward pass, by recomputation",
    points=3,
    rules=(Rule(_NO_READY_MADE, SOFTMAXES + LOG_SOFTMAXES + ATTENTIONS + _LEAVING_TORCH),),
)
AVERAGE = Exercise("average_gradients", "data parallelism: average the gradients", points=2)
OVERLAP = Exercise("overlapped_sync", "overlap: all-reduce during the backward pass", points=2)
BUCKETS = Exercise("bucketed_sync", "buckets of gradients", points=3)
SHARDED = Exercise(
    "sharded_adamw",
    "sharded optimizer state (ZeRO-1)",
    points=3,
    rules=(
        Rule(
            "write the sharding yourself: not ZeroRedundancyOptimizer or FSDP",
            (
                "torch.distributed.optim.ZeroRedundancyOptimizer",
                "torch.distributed.fsdp.FullyShardedDataParallel",
                "torch.distributed.fsdp.fully_shard",
            ),
        ),
    ),
)
_READY_LOSSES = (
    "torch.nn.functional.cross_entropy",
    "torch.nn.functional.nll_loss",
    "torch._C._nn.nll_loss",
    "torch._C._nn.nll_loss_nd",
    "torch._C._nn.nll_loss2d",
    "torch._C._nn.cross_entropy_loss",
    "torch.nn.CrossEntropyLoss",
    "torch.nn.NLLLoss",
    "torch.nn.functional.binary_cross_entropy_with_logits",
)
MASKED_LOSS = Exercise(
    "masked_cross_entropy",
    "a loss without a data-dependent shape",
    points=2,
    rules=(Rule("do not call F.cross_entropy or F.nll_loss (or their modules)", _READY_LOSSES),),
)
_READY_ADAMW = (
    "torch.optim.AdamW",
    "torch.optim.Adam",
    "torch.optim.adamw.adamw",
    "torch.optim.adam.adam",
    "torch._fused_adamw_",
    "torch._fused_adam_",
)
COMPILED_ADAMW = Exercise(
    "compiled_adamw",
    "an AdamW step that compiles once",
    points=2,
    rules=(Rule("do not call torch.optim's Adam or AdamW, their functional forms or the fused kernels", _READY_ADAMW),),
)
EXERCISES = [
    TOP_OPERATORS,
    ACTIVATIONS,
    FLASH_FORWARD,
    FLASH_BACKWARD,
    AVERAGE,
    OVERLAP,
    BUCKETS,
    SHARDED,
    MASKED_LOSS,
    COMPILED_ADAMW,
]

SELF_TIME_TOL = 0.01  # µs (module docstring)
F32 = {"atol": 1e-5, "rtol": 1e-5}
GRAD = {"atol": 1e-4, "rtol": 1e-4}

_gen, _randn = seeded(14000)


# --- top_operators ---------------------------------------------------------------------------------------------


def _op(name, ts, dur, tid=1, pid=7):
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": {}}


def _hand_made_trace() -> dict:
    """Nested operators on two threads that overlap in time and on a thread of another process with the same thread
    id, a grandchild, a parent and child that start together, a zero-length operator, siblings that touch, a child
    whose end is rounded past its parent's, an annotation inside an operator, and events that are not operators
    (an annotation around the step, a flow arrow, the process's name)."""
    annotation = {"ph": "X", "cat": "user_annotation", "pid": 7, "tid": 1}
    events = [
        # process 7, thread 1: a linear (0-100) holding an addmm (10-70) holding a copy_ (20-30); then a mul
        # (100-130) that starts where the linear ends, holding an empty (100-100) and a copy_ (100-110) that start
        # with it
        _op("aten::linear", 0, 100),
        _op("aten::addmm", 10, 60),
        _op("aten::copy_", 20, 10),
        _op("aten::copy_", 100, 10),  # listed before its parent, which starts at the same instant
        _op("aten::empty", 100, 0),
        _op("aten::mul", 100, 30),
        # a gelu holding an annotation holding an erf: among the operators, the erf is the gelu's child
        _op("aten::gelu", 140, 25),
        annotation | {"name": "## gelu ##", "ts": 145, "dur": 15},
        _op("aten::erf", 147, 10),
        # a child that starts inside its parent and whose end, rounded to the nanosecond, is 1 ns past the parent's
        _op("aten::add", 170, 10.0),
        _op("aten::fill_", 174, 6.001),
        # process 7, thread 2, at the same time: the autograd engine's own operators, nested likewise
        _op("autograd::engine::evaluate_function: MmBackward0", 5, 120, tid=2),
        _op("aten::mm", 15, 80, tid=2),
        _op("aten::mul", 130, 5, tid=2),
        # process 8, whose thread has the id 1 too: not nested in process 7's operators
        _op("aten::bmm", 50, 40, pid=8),
        # not operators: what a whole step is annotated with, a forward-backward flow arrow, metadata
        annotation | {"name": "ProfilerStep#1", "ts": 0, "dur": 200},
        {"ph": "s", "cat": "fwdbwd", "name": "fwdbwd", "pid": 7, "tid": 1, "ts": 15, "id": 3},
        {"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "python"}},
    ]
    return {"schemaVersion": 1, "traceEvents": events}


def _brute_force_self_times(trace: dict) -> dict[str, float]:
    """At the middle of each microsecond (the hand-made traces start and end their operators at whole ones, to a
    nanosecond), charge the innermost operator open on each thread of each process: the one that started last
    among those open then (the longest, if several started together)."""
    ops = [e for e in trace["traceEvents"] if e.get("cat") == "cpu_op" and e.get("ph") == "X"]
    times = {op["name"]: 0.0 for op in ops}
    end = max(op["ts"] + op["dur"] for op in ops)
    for thread in {(op["pid"], op["tid"]) for op in ops}:
        for step in range(int(end)):
            instant = step + 0.5
            open_ops = [
                op for op in ops if (op["pid"], op["tid"]) == thread and op["ts"] <= instant < op["ts"] + op["dur"]
            ]
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
    op_names = {e["name"] for e in ops}

    def nested_self(
        events, *, all_descendants=False, thread=lambda e: (e["pid"], e["tid"]), by_start_only=False, ends_inside=False
    ):
        times = {}
        for key in {thread(e) for e in events}:
            order = (lambda e: e["ts"]) if by_start_only else (lambda e: (e["ts"], -e["dur"]))
            stack = []
            for e in sorted((e for e in events if thread(e) == key), key=order):
                last = e["ts"] + e["dur"] if ends_inside else e["ts"]  # the instant that must fall inside the parent
                while stack and (
                    e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] or last > stack[-1]["ts"] + stack[-1]["dur"]
                ):
                    stack.pop()
                times[e["name"]] = times.get(e["name"], 0.0) + e["dur"]
                for parent in stack if all_descendants else stack[-1:]:
                    times[parent["name"]] -= e["dur"]
                stack.append(e)
        return times

    def ops_only(times):
        return {name: t for name, t in times.items() if name in op_names}

    return [
        (
            _ranked(_total_times(trace), k),
            "it ranks total times; an operator's self time leaves out the time of the operators inside it",
        ),
        (
            _ranked(nested_self(ops, all_descendants=True), k),
            "it subtracts every operator inside, grandchildren too; subtract only the direct children (a child's own "
            "time already excludes the grandchild)",
        ),
        (
            _ranked(nested_self(ops, thread=lambda e: 0), k),
            "it nests operators of different threads; nesting only happens on one thread: group the events by "
            "(pid, tid) first",
        ),
        (
            _ranked(nested_self(ops, thread=lambda e: e["tid"]), k),
            "it nests operators of two processes whose threads have the same id: a thread is (pid, tid), not tid alone",
        ),
        (
            _ranked(nested_self(everything), k),
            "it counts events that are not operators (user annotations such as ProfilerStep#1): keep the events whose "
            "cat is 'cpu_op'",
        ),
        (
            _ranked(ops_only(nested_self(everything)), k),
            "it lets annotations take part in the nesting (the erf inside '## gelu ##' inside the gelu is the gelu's "
            "child among the operators): keep only the events whose cat is 'cpu_op' before nesting",
        ),
        (
            _ranked(nested_self(ops, ends_inside=True), k),
            "it asks a child to end before its parent ends; durations are rounded, so a child may end a nanosecond "
            "after its parent: a child is an event that starts inside it",
        ),
        (
            _ranked(nested_self(ops, by_start_only=True), k),
            "two operators that start at the same instant are nested the wrong way round: the longer one is the parent "
            "(sort by start, then by longest first)",
        ),
    ]


@TOP_OPERATORS.visible
def test_hand_made_trace(impl):
    "the self times of a hand-made trace: nesting, threads and processes, events that are not operators"
    trace = _hand_made_trace()
    truth = _brute_force_self_times(trace)
    k = len(truth)  # all of them: each mistake shows somewhere in the ranking
    got = _as_ranking(impl.call(call_top_operators, trace, k), f"top_operators(trace, k={k})")
    what = f"top_operators(trace, k={k}) on a hand-made trace"
    _same_ranking(got, _ranked(truth, k), what, _self_time_mistakes(trace, k), truth)


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


# --- block_activation_bytes --------------------------------------------------------------------------------------

# Shapes (batch, seq, width, heads): batch, length, width and heads each vary on its own, so that the differences
# between a formula and the measurements determine the terms below (seven of them: at least seven shapes).
ACTIVATION_SHAPES_VISIBLE = (
    (1, 1, 4, 1),
    (2, 5, 8, 2),
    (1, 7, 12, 3),
    (3, 4, 16, 4),
    (2, 9, 6, 1),
    (1, 16, 8, 2),
    (2, 3, 10, 5),
    (4, 2, 4, 2),
)
ACTIVATION_SHAPES_HIDDEN = (
    (1, 1, 8, 8),
    (3, 17, 12, 3),
    (1, 33, 16, 8),
    (4, 9, 20, 5),
    (2, 64, 64, 4),
    (1, 2, 6, 6),
    (5, 11, 24, 6),
    (2, 40, 32, 1),
    (1, 128, 16, 2),
    (3, 3, 36, 9),
)


# What a wrong formula's difference from the measurement is made of: (monomial, its name, bytes per element, what a
# whole number of such tensors is). A term in the width alone depends on neither the batch nor the length: parameters.
def _plural(n: int) -> str:
    return "s" * (n != 1)


_ACTIVATION_TERMS = (
    (
        lambda b, t, d, h: b * t * d,
        "batch·seq·width",
        4,
        lambda n: f"{n} [batch, seq, width] float32 tensor{_plural(n)}",
    ),
    (
        lambda b, t, d, h: b * t,
        "batch·seq",
        4,
        lambda n: f"{n} [batch, seq, 1] float32 tensor{_plural(n)} (a LayerNorm keeps its mean and 1/sigma)",
    ),
    (
        lambda b, t, d, h: b * h * t * t,
        "batch·heads·seq²",
        4,
        lambda n: f"{n} [batch, heads, seq, seq] float32 tensor{_plural(n)} (attention scores or probabilities)",
    ),
    (
        lambda b, t, d, h: t * t,
        "seq²",
        1,
        lambda n: f"{n} byte{_plural(n)} per entry of a [seq, seq] tensor (the boolean mask takes one)",
    ),
    (lambda b, t, d, h: d * d, "width²", 0, None),
    (lambda b, t, d, h: d, "width", 0, None),
    (lambda b, t, d, h: 1, "a constant", 0, None),
)


def _call_text(shape) -> str:
    return "block_activation_bytes({}, {}, {}, {})".format(*shape)


def _whole_factor(got: list, measured: list, shapes) -> str:
    """The mistakes that scale every float32 tensor: elements counted, or another dtype's bytes."""
    masks = [t * t for _, t, _, _ in shapes]
    for per_element, why in (
        (1, "it counts elements, not bytes: each float32 element takes 4 bytes"),
        (2, "it counts 2 bytes per element; the block runs in float32, 4 bytes each"),
        (8, "it counts 8 bytes per element; the block runs in float32, 4 bytes each"),
    ):
        for mask_bytes in (1, per_element):
            if all(
                g == (m - mask) // 4 * per_element + mask * mask_bytes
                for g, m, mask in zip(got, measured, masks, strict=True)
            ):
                return why
    return ""


def _activation_diagnosis(got: list, measured: list, shapes) -> str:
    """What the formula's differences from the measurements are made of, in the units of ``_ACTIVATION_TERMS``."""
    whole = _whole_factor(got, measured, shapes)
    if whole:
        return whole
    rows = torch.tensor([[term[0](*shape) for term in _ACTIVATION_TERMS] for shape in shapes], dtype=torch.float64)
    diff = torch.tensor([g - m for g, m in zip(got, measured, strict=True)], dtype=torch.float64)
    coefficients = torch.linalg.lstsq(rows, diff.unsqueeze(-1)).solution.squeeze(-1).round()
    if not torch.equal(rows @ coefficients, diff):
        return "its differences from the measurements are not whole numbers of the block's tensors"
    parts = []
    for (_, name, size, tensors), c in zip(_ACTIVATION_TERMS, coefficients.long().tolist(), strict=True):
        if c and tensors is None:
            return (
                f"it has a term in {name}, which depends on neither the batch nor the length: that is the "
                "parameters, which the block holds anyway and which are not counted"
            )
        if c:
            count = tensors(abs(c) // size) if abs(c) % size == 0 else f"{abs(c)}·{name} bytes"
            parts.append(f"{count} too {'many' if c > 0 else 'few'}")
    return "it counts " + "; ".join(parts)


def _check_activation_bytes(impl, shapes):
    got = impl.call(call_block_activation_bytes, list(shapes))
    expect.that(
        not got["tensors_made"],
        f"{_call_text(shapes[0])} made {got['tensors_made']} tensors (or read numbers out of them); the text asks for "
        "a formula in Python arithmetic on the four numbers, without running the block or making tensors",
    )
    for value, shape in zip(got["values"], shapes, strict=True):
        if isinstance(value, dict) and "__unsupported__" in value:
            expect.fail(f"{_call_text(shape)} returned a {value['__unsupported__']}, expected an int")
        expect.that(
            isinstance(value, int) and not isinstance(value, bool),
            f"{_call_text(shape)} returned {value!r}, expected an int (a number of bytes): use // or whole numbers",
        )
    measured = [measured_block_bytes(*shape) for shape in shapes]
    for value, expected, shape in zip(got["values"], measured, shapes, strict=True):
        if value != expected:
            expect.fail(
                f"{_call_text(shape)} = {value:,}, but a PreNormBlock of that shape keeps {expected:,} bytes for its "
                f"backward pass (measured: each saved storage once, parameters left out); "
                f"{_activation_diagnosis(got['values'], measured, shapes)}"
            )


@ACTIVATIONS.visible
def test_activation_bytes_small_blocks(impl):
    "the bytes a PreNormBlock keeps for its backward pass, measured, for 8 small shapes (1 to 5 heads)"
    _check_activation_bytes(impl, ACTIVATION_SHAPES_VISIBLE)


@ACTIVATIONS.hidden
def test_activation_bytes_more_shapes(impl):
    "10 more shapes: one head, as many heads as the width, lengths up to 128"
    _check_activation_bytes(impl, ACTIVATION_SHAPES_HIDDEN)


# --- FlashAttention: shapes, oracles and limits ----------------------------------------------------------------


def _qkv(leading, t_q, t_k, d, seed, score_scale=1.0, *, signs=(1, 1)):
    """Queries, keys and values of shapes [*leading, T, d]; ``score_scale`` multiplies the queries and the keys (so
    the scores by its square); ``signs`` (1 or -1) make all the queries' and keys' entries of one sign, so that all
    the scores have the sign of their product."""
    g = _gen(seed)
    q, k, v = (torch.randn(*leading, t, d, generator=g) for t in (t_q, t_k, t_k))
    if signs != (1, 1):
        q, k = signs[0] * q.abs(), signs[1] * k.abs()
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
    scores per batch and head; no matrix product whose result is larger than a tile, unless one of its sizes is the
    head width d (P V, dS K, dS^T Q); and alive at once, at most six copies of q, k and v (padded) and sixteen tiles,
    ten copies for the backward pass (which makes dQ, dK and dV and is given dO), room for a computation in float64.
    The answers measured, in float32, use about one copy and two tiles (forward) and two copies (backward); in
    float64, four and seven. A [T_q, T_k] tensor, or the score tiles kept, is more: the checks choose T much larger
    than d and the tiles (and d, block_q and block_k all different), so these bounds part them."""
    *batch, t_q, d = q.shape
    t_k = k.shape[-2]
    heads = math.prod(batch)
    inputs = heads * (_padded(t_q, block_q) + 2 * _padded(t_k, block_k)) * d
    largest = heads * max(_padded(t_q, block_q) * d, _padded(t_k, block_k) * d, block_q * block_k)
    peak = q.element_size() * ((10 if backward else 6) * inputs + 16 * heads * block_q * block_k)
    return {
        "largest": largest,
        "peak_bytes": peak,
        "quadratic": t_q * t_k,
        "quadratic_bytes": q.element_size() * heads * t_q * t_k,
        "tile": (block_q, block_k),
        "d": d,
        "scalars": SCALARS_ALLOWED + SCALARS_PER_TILE * -(-t_q // block_q) * -(-t_k // block_k),
    }


def _check_memory(seen: dict, limits: dict, what: str):
    expect.that(
        seen["largest_numel"] <= limits["largest"],
        f"{what} made a tensor of shape {seen['largest']} ({seen['largest_numel']:,} numbers), more than its inputs or "
        f"a [block_q, block_k] tile of scores per batch and head ({limits['largest']:,}); for "
        f"T_q x T_k = {limits['quadratic']:,} scores that is a quadratic tensor (a [T_q, T_k] mask made once is one "
        "too): work tile by tile, and build each tile's mask from the positions of its rows and columns",
    )
    (block_q, block_k), d = limits["tile"], limits["d"]
    too_big = [shape for shape in seen["products"] if d not in shape and shape[0] * shape[1] > block_q * block_k]
    expect.that(
        not too_big,
        f"{what} multiplied matrices into a [{too_big[0][0] if too_big else 0}, {too_big[0][1] if too_big else 0}] "
        f"result, larger than a tile of block_q x block_k = {block_q} x {block_k} scores: take key tiles of block_k "
        "keys and query tiles of block_q queries (or smaller), as given",
    )
    expect.that(
        seen["scalars"] <= limits["scalars"],
        f"{what} took {seen['scalars']:,} Python numbers out of tensors (.item(), float(), int()), more than a few per "
        f"pair of tiles ({limits['scalars']:,}): compute with tensors, not number by number in Python",
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
    ((2, 3), 37, 37, 16, 16, 8, False, 1),
    ((1, 2), 50, 50, 8, 16, 16, True, 2),
    ((2, 1), 23, 41, 32, 8, 16, False, 3),
    ((1, 1), 64, 64, 4, 64, 64, True, 4),
    ((1, 2), 5, 70, 8, 4, 32, True, 5),
    ((1, 2), 70, 5, 8, 16, 4, False, 6),
    ((1, 1), 48, 48, 8, 32, 16, True, 7),
    ((1, 2), 29, 61, 8, 16, 8, True, 16),
    ((1, 2), 40, 40, 8, 16, 5, True, 18),  # a key tile starts at the last row of a query tile: needed by that row
]


def _describe(q, t_k, bq, bk, causal) -> str:
    return f"q {list(q.shape)}, T_k = {t_k}, tiles {bq} x {bk}" + (", causal" if causal else "")


def _check_forward(impl, case, *, score_scale=1.0, signs=(1, 1)):
    leading, t_q, t_k, d, bq, bk, causal, seed = case
    q, k, v = _qkv(leading, t_q, t_k, d, seed, score_scale, signs=signs)
    # Each score is rounded to float32 before exp: a relative error of 2^-24 of the largest score moves the weights,
    # hence the output and the log-sum-exp, by about that much; measured: at most 2.2 of them (20 seeds); 16 are allowed.
    scores = _scores(q, k, causal)
    largest = float(scores.abs().masked_fill(~scores.isfinite(), 0).max())
    tol = {"atol": max(F32["atol"], 16 * 2**-24 * largest), "rtol": F32["rtol"]}
    what = f"flash_attention_forward for {_describe(q, t_k, bq, bk, causal)}"
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
        "by exp(m - m'); and subtract the running max before exp, so that no exponential overflows or underflows."
    )
    expect.tensor(out, f"the output of {what}", shape=q.shape, dtype=q.dtype)
    expect.close(out, expected_out, f"the output of {what}", **tol, alternatives=outs, hint=hint)
    expect.tensor(lse, f"the log-sum-exp of {what}", shape=q.shape[:-1], dtype=q.dtype)
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
    _check_forward(impl, ((1, 2), 40, 40, 16, 16, 8, True, 8), score_scale=8.0)


@FLASH_FORWARD.hidden
def test_forward_negative_scores(impl):
    "every score far below zero (about -150): the running max starts at -inf, not 0, so exp does not underflow"
    _check_forward(impl, ((1, 2), 40, 40, 16, 16, 8, True, 19), score_scale=6.0, signs=(1, -1))


@FLASH_FORWARD.hidden
def test_forward_leading_dimensions(impl):
    "any leading dimensions: [heads, T, d] and [batch, 1, heads, T, d]"
    for leading, seed in (((3,), 20), ((2, 1, 2), 21)):
        _check_forward(impl, (leading, 33, 45, 8, 16, 8, True, seed))


# T much larger than d and the tiles, so that a quadratic tensor is far above the limits (``_limits``); d, block_q
# and block_k all different.
assert all(case[1] <= case[2] for case in FORWARD_CASES if case[6])  # causal needs T_q <= T_k (``_mask``)
MEMORY_CASES = [((1, 2), 800, 800, 8, 64, 32, True, 9), ((1, 1), 384, 640, 4, 32, 64, False, 10)]


@FLASH_FORWARD.hidden
def test_forward_memory(impl):
    "no [T_q, T_k] tensor, no product larger than a tile, no more alive at once than a few tiles and copies of the inputs"
    for case in MEMORY_CASES:
        got = _check_forward(impl, case)
        leading, t_q, t_k, d, bq, bk, causal, seed = case
        q, k, _ = _qkv(leading, t_q, t_k, d, seed)
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
    ((1, 2), 37, 37, 16, 16, 8, False, 11),
    ((2, 1), 45, 45, 8, 16, 16, True, 12),
    ((1, 2), 23, 41, 32, 8, 16, False, 13),
    ((1, 1), 70, 5, 8, 16, 4, False, 14),
    ((1, 2), 5, 70, 8, 4, 32, True, 15),
    ((1, 2), 29, 61, 8, 16, 8, True, 17),
    ((3,), 33, 45, 8, 16, 8, True, 22),  # [heads, T, d]: any leading dimensions
]


def _check_backward(impl, case, *, score_scale=1.0):
    leading, t_q, t_k, d, bq, bk, causal, seed = case
    q, k, v = _qkv(leading, t_q, t_k, d, seed, score_scale)
    grad_out = _randn((*leading, t_q, d), seed + 100)
    what = f"FlashAttention's gradients for {_describe(q, t_k, bq, bk, causal)}"
    got = impl.call(run_flash_backward, q, k, v, causal, bq, bk, grad_out)
    expect.that(isinstance(got.get("grads"), dict), f"{what}: {got.get('grads')}")
    mistakes = _grad_mistakes(q, k, v, causal, grad_out)
    # As in the forward pass, the float32 rounding of the largest score moves the probabilities by about 2^-24 of it,
    # relative; the gradients, by that much of their largest entry (16 such roundings allowed).
    scores = _scores(q, k, causal)
    largest = float(scores.abs().masked_fill(~scores.isfinite(), 0).max())
    for name, expected in zip("qkv", _oracle_grads(q, k, v, causal, grad_out), strict=True):
        tol = {"atol": max(GRAD["atol"], 16 * 2**-24 * largest * float(expected.abs().max())), "rtol": GRAD["rtol"]}
        expect.close(got["grads"][name], expected, f"d{name.upper()} of {what}", **tol, alternatives=mistakes[name])
    return got


@FLASH_BACKWARD.visible
def test_backward_small(impl):
    "dQ, dK and dV equal autograd's through SDPA, causal or not, with tiles that do not divide T"
    for case in BACKWARD_CASES[:2]:
        _check_backward(impl, case)


@FLASH_BACKWARD.hidden
def test_backward_shapes(impl):
    "more shapes: T_q != T_k, causal with T_q < T_k (bottom-right), [heads, T, d]"
    for case in BACKWARD_CASES[2:]:
        _check_backward(impl, case)


@FLASH_BACKWARD.hidden
def test_backward_large_scores(impl):
    "scores in the hundreds: P = exp(S - lse) stays finite where exp(S) / exp(lse) overflows"
    _check_backward(impl, ((1, 2), 40, 40, 16, 16, 8, True, 23), score_scale=8.0)


@FLASH_BACKWARD.visible
def test_backward_saves_no_probabilities(impl):
    "what forward keeps for backward: q, k, v, the output and the log-sum-exp, not the probabilities"
    leading, t_q, t_k, d, bq, bk, causal, seed = MEMORY_CASES[0]
    q, k, v = _qkv(leading, t_q, t_k, d, seed)
    got = impl.call(run_flash_backward, q, k, v, causal, bq, bk, _randn(q.shape, seed + 100))
    inputs = 4 * q.numel() + k.numel() + v.numel()  # q, k, v, out, and lse and a little more as the fourth q
    kept = got["saved_bytes"] // q.element_size()
    expect.that(
        kept <= inputs,
        f"FlashAttention keeps {kept:,} numbers for its backward pass (ctx.save_for_backward and what ctx holds in "
        f"its attributes, lists included), more than q, k, v, the output and the log-sum-exp ({inputs:,} at most) "
        f"for T = {t_q}: the backward pass recomputes the probabilities from the saved log-sum-exp, "
        "P = exp(S - lse), instead of keeping them",
    )


@FLASH_BACKWARD.hidden
def test_backward_memory(impl):
    "the backward pass makes no [T_q, T_k] tensor either, no product larger than a tile, and keeps no more alive"
    for case in MEMORY_CASES:
        got = _check_backward(impl, case)
        leading, t_q, t_k, d, bq, bk, causal, seed = case
        q, k, _ = _qkv(leading, t_q, t_k, d, seed)
        limits = _limits(q, k, bq, bk, backward=True)
        _check_memory(got["memory"], limits, f"FlashAttention.backward (T_q = {t_q}, T_k = {t_k})")


# --- data parallelism -------------------------------------------------------------------------------------------

# The model every data-parallel check trains: Linear layers of these (inputs, outputs) with tanh between, whose eight
# parameters have different sizes (so buckets of a given size in bytes group them in one way only).
LAYERS = ((6, 10), (10, 12), (12, 5), (5, 3))
PARAMETERS = [shape for n_in, n_out in LAYERS for shape in ((n_out, n_in), (n_out,))]
STEPS, LR = 3, 0.1
PARAMS_TOL = {"atol": 1e-5, "rtol": 1e-5}  # 3 SGD steps; the ranks sum their halves' gradients in another order


def _mlp(head_first: bool = False) -> nn.Module:
    """The layers in a Sequential; or, with ``head_first``, the last layer registered first (as a model's head often
    is), so that its gradients, ready first in backward, are the first in ``model.parameters()``, not the last."""
    layers = []
    for n_in, n_out in LAYERS:
        layers += [nn.Linear(n_in, n_out), nn.Tanh()]
    if not head_first:
        return nn.Sequential(*layers[:-1])
    return _HeadFirst(layers[-2], nn.Sequential(*layers[:-2]))


class _HeadFirst(nn.Module):
    def __init__(self, head: nn.Module, body: nn.Module):
        super().__init__()
        self.head, self.body = head, body

    def forward(self, x):
        return self.head(self.body(x))


def _shapes(head_first: bool = False) -> list:
    return [tuple(p.shape) for p in _mlp(head_first).parameters()]


def _initial_state(seed: int, head_first: bool = False) -> dict:
    with torch.random.fork_rng():
        torch.manual_seed(14000 + seed)
        return {name: t.detach().clone() for name, t in _mlp(head_first).state_dict().items()}


def _batches(seed: int, batch: int, steps: int = STEPS):
    g = _gen(100 + seed)
    return torch.randn(steps, batch, LAYERS[0][0], generator=g), torch.randn(steps, batch, LAYERS[-1][1], generator=g)


def _single_process(state, xs, ys, *, lr=LR, scale=1.0, head_first=False, freeze_first=False) -> dict:
    """The oracle: one process, the whole batch, plain SGD (``scale`` multiplies each gradient: a known mistake)."""
    model = _mlp(head_first)
    model.load_state_dict(state)
    if freeze_first:
        next(model.parameters()).requires_grad_(False)
    for x, y in zip(xs, ys, strict=True):
        F.mse_loss(model(x), y).backward()
        with torch.no_grad():
            for p in model.parameters():
                if p.grad is not None:
                    p -= lr * scale * p.grad
                p.grad = None
    return {name: t.detach().clone() for name, t in model.state_dict().items()}


def _ddp_oracle(state, xs, ys, world_size) -> list[dict]:
    """PyTorch's DistributedDataParallel on the same ranks and shards (forked processes, gloo)."""
    from torch.nn.parallel import DistributedDataParallel

    from coursetools.ranks import run_ranks

    def work(rank, world):
        model = _mlp()
        model.load_state_dict(state)
        ddp = DistributedDataParallel(model)
        for x, y in zip(xs, ys, strict=True):
            F.mse_loss(ddp(x.chunk(world)[rank]), y.chunk(world)[rank]).backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= LR * p.grad
                    p.grad = None
        return {name: t.detach().clone() for name, t in model.state_dict().items()}

    return run_ranks(work, world_size)


def _params_mistakes(state, xs, ys, world_size, **model):
    return [
        (
            _single_process(state, xs, ys, scale=world_size, **model),
            "the gradients are summed over the ranks, not averaged: divide the all-reduced sum by the world size",
        ),
        (
            _single_process(state, xs, ys, scale=1 / world_size, **model),
            "the gradients are divided by the world size twice (or all-reduced and averaged twice)",
        ),
    ]


def _ran(got, what):
    expect.that(isinstance(got, dict) and ("ranks" in got or "failed" in got), f"{what}: no result ({got})")
    expect.that(not got.get("failed"), f"{what}: {got.get('failed')}")
    return got["ranks"]


def _check_params(ranks, expected, what, mistakes=()):
    first = ranks[0]["params"]
    for rank, result in enumerate(ranks[1:], start=1):
        for name, value in result["params"].items():
            expect.that(
                torch.allclose(value, first[name], atol=1e-6),
                f"{what}: after the steps rank {rank}'s {name} differs from rank 0's: the ranks trained on different "
                "gradients (every rank must end each step with the same, averaged gradient)",
            )
    for name, value in first.items():
        alternatives = [(wrong[name], diagnosis) for wrong, diagnosis in mistakes]
        expect.close(
            value,
            expected[name],
            f"{what}: parameter {name} after {STEPS} steps",
            **PARAMS_TOL,
            alternatives=alternatives,
        )


def _check_training(train, *, world_size, batch, seed, extra=(), head_first=False, freeze_first=False):
    """``train(state, xs, ys, world_size, model_options, *extra)``: a call of one of the training adapters (named at
    the call, ``lambda *args: impl.call(train_with_average, *args)``), checked against one process."""
    model = {"head_first": head_first, "freeze_first": freeze_first}
    state, (xs, ys) = _initial_state(seed, head_first), _batches(seed, batch)
    what = (
        f"{world_size} ranks, each on {batch // world_size} of a batch of {batch}"
        + (", the head registered first" if head_first else "")
        + (", the first parameter frozen" if freeze_first else "")
    )
    got = train(state, xs, ys, world_size, model, *extra)
    ranks = _ran(got, what)
    _check_params(
        ranks, _single_process(state, xs, ys, **model), what, _params_mistakes(state, xs, ys, world_size, **model)
    )
    return ranks, what


def _only_all_reduces(ranks, what):
    for rank, result in enumerate(ranks):
        others = sorted({c["name"] for c in result["sent"] if c["name"] != "all_reduce"})
        expect.that(
            not others,
            f"{what}: rank {rank} sent {', '.join(others)}; the exercise averages with all-reduces (dist.all_reduce), "
            "one collective that leaves the sum on every rank",
        )


@AVERAGE.visible
def test_average_like_one_process(impl):
    "2 ranks, each on half of the batch: the parameters after 3 steps equal one process on the whole batch"
    ranks, what = _check_training(lambda *args: impl.call(train_with_average, *args), world_size=2, batch=8, seed=1)
    _only_all_reduces(ranks, what)


@AVERAGE.hidden
def test_average_like_ddp(impl):
    "3 ranks: the same parameters as PyTorch's DistributedDataParallel and as one process"
    state, (xs, ys) = _initial_state(2), _batches(2, 9)
    ranks = _ran(impl.call(train_with_average, state, xs, ys, 3, {}), "3 ranks")
    for rank, expected in enumerate(_ddp_oracle(state, xs, ys, 3)):
        for name, value in ranks[rank]["params"].items():
            expect.close(
                value,
                expected[name],
                f"3 ranks: rank {rank}'s {name}, against DistributedDataParallel's",
                **PARAMS_TOL,
                alternatives=[(w[name], d) for w, d in _params_mistakes(state, xs, ys, 3)],
            )


@AVERAGE.hidden
def test_average_skips_parameters_without_gradients(impl):
    "a frozen parameter (no gradient) is left alone"
    ranks, what = _check_training(
        lambda *args: impl.call(train_with_average, *args), world_size=2, batch=8, seed=3, freeze_first=True
    )
    _only_all_reduces(ranks, what)


def _launched_during_backward(ranks, what):
    for rank, result in enumerate(ranks):
        sent = [c for c in result["sent"] if c["name"] == "all_reduce"]
        expect.that(sent, f"{what}: rank {rank} sent no all_reduce through torch.distributed")
        late = [c for c in sent if not c["during_backward"]]
        expect.that(
            not late,
            f"{what}: rank {rank} sent {len(late)} of its {len(sent)} all-reduces after the backward pass had "
            "finished; send each one from the hook, as its gradient is ready, so it overlaps the rest of backward",
        )
        blocking = [c for c in sent if not c["async"]]
        expect.that(
            not blocking,
            f"{what}: rank {rank} sent {len(blocking)} all-reduces with async_op=False: each one blocks the backward "
            "pass until it is done; send them with async_op=True and wait for them in wait()",
        )
        waited = [c for c in sent if c["waited_during_backward"]]
        expect.that(
            not waited,
            f"{what}: rank {rank} waited for {len(waited)} all-reduces during the backward pass (work.wait() in the "
            "hook): that blocks backward until each one is through, as a synchronous call would; wait in wait()",
        )


@OVERLAP.visible
def test_overlap_like_one_process(impl):
    "2 ranks: the same parameters as one process, every all-reduce sent during backward, asynchronously"
    ranks, what = _check_training(lambda *args: impl.call(train_with_overlap, *args), world_size=2, batch=8, seed=4)
    _launched_during_backward(ranks, what)


@OVERLAP.hidden
def test_overlap_three_ranks(impl):
    "3 ranks, the first parameter frozen: one all-reduce per parameter with a gradient per step"
    ranks, what = _check_training(
        lambda *args: impl.call(train_with_overlap, *args), world_size=3, batch=9, seed=5, freeze_first=True
    )
    _launched_during_backward(ranks, what)
    for rank, result in enumerate(ranks):
        count = sum(c["name"] == "all_reduce" for c in result["sent"])
        expected = STEPS * (len(PARAMETERS) - 1)
        expect.that(
            count == expected,
            f"{what}: rank {rank} sent {count} all-reduces in {STEPS} steps, expected one per parameter with a "
            f"gradient per step ({expected})",
        )


def _buckets(bucket_bytes: int, shapes, element_size: int = 4) -> list[int]:
    """The numbers of elements of the buckets the text describes, filled in the order of ``shapes``: each parameter
    joins the current bucket unless that would take it past ``bucket_bytes``. The text's order is the reverse of
    ``model.parameters()``; forward order is a known mistake."""
    sizes, current = [], None
    for shape in shapes:
        numel = math.prod(shape)
        if current is None or (current + numel) * element_size > bucket_bytes:
            if current is not None:
                sizes.append(current)
            current = 0
        current += numel
    return [*sizes, current]


def _check_buckets(impl, bucket_bytes, world_size, seed, head_first=False):
    ranks, what = _check_training(
        lambda *args: impl.call(train_with_buckets, *args),
        world_size=world_size,
        batch=4 * world_size,
        seed=seed,
        extra=(bucket_bytes,),
        head_first=head_first,
    )
    what = f"{what}, buckets of {bucket_bytes} bytes"
    _launched_during_backward(ranks, what)
    expected = sorted(_buckets(bucket_bytes, reversed(_shapes(head_first))))
    forward_order = sorted(_buckets(bucket_bytes, _shapes(head_first)))
    for rank, result in enumerate(ranks):
        sizes = [c["numel"] for c in result["sent"] if c["name"] == "all_reduce"]
        per_step = len(sizes) / STEPS
        expect.that(
            sorted(sizes) == sorted(expected * STEPS),
            f"{what}: rank {rank} sent {per_step:g} all-reduces per step, of {sorted(sizes)[: len(expected) + 2]}... "
            f"elements; the buckets hold {expected} elements, one all-reduce each per step"
            + (
                "; those are the buckets of the parameters in forward order: fill them from the last parameter, "
                "whose gradient is ready first"
                if sorted(sizes) == sorted(forward_order * STEPS)
                else ""
            ),
        )


# Bucket sizes whose buckets differ from forward order's, one for every parameter, one bucket for all, a parameter
# larger than a bucket (w1: 480 bytes), and a bucket filled exactly (12 + 60 + 20 = 92 bytes: the last three).
BUCKET_CASES = [(2, 360, 6), (2, 4, 7), (3, 10_000, 8), (2, 300, 9), (2, 92, 24)]


@BUCKETS.visible
def test_buckets_like_one_process(impl):
    "2 ranks, buckets of 360 bytes: the parameters of one process, one all-reduce per bucket, during backward"
    world_size, bucket_bytes, seed = BUCKET_CASES[0]
    _check_buckets(impl, bucket_bytes, world_size, seed)


@BUCKETS.hidden
def test_bucket_sizes(impl):
    "a bucket per parameter (4 bytes), one for all (10,000 bytes, 3 ranks), a parameter larger than a bucket, a bucket"
    "filled exactly, and a model whose head is registered first (its gradients are ready first but listed first)"
    for world_size, bucket_bytes, seed in BUCKET_CASES[1:]:
        _check_buckets(impl, bucket_bytes, world_size, seed)
    _check_buckets(impl, 300, 2, 25, head_first=True)


# --- ZeRO-1 ------------------------------------------------------------------------------------------------------

ADAMW = {"lr": 1e-2, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1}
ADAMW_TOL = {"atol": 1e-6, "rtol": 1e-5}  # the same gradients and AdamW's arithmetic: float32 rounding only


def _adamw_oracle(state, xs, ys, **options) -> dict:
    model = _mlp()
    model.load_state_dict(state)
    optimizer = torch.optim.AdamW(model.parameters(), **(ADAMW | options))
    for x, y in zip(xs, ys, strict=True):
        F.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return {name: t.detach().clone() for name, t in model.state_dict().items()}


def _owners(world_size) -> list[int]:
    """The owner of each parameter by the text's rule: from the largest parameter to the smallest (ties in list
    order), each goes to the rank that owns the fewest elements so far (the lowest rank on a tie)."""
    owned, owners = [0] * world_size, [0] * len(PARAMETERS)
    for index in sorted(range(len(PARAMETERS)), key=lambda i: -math.prod(PARAMETERS[i])):
        owner = min(range(world_size), key=lambda r: (owned[r], r))
        owned[owner] += math.prod(PARAMETERS[index])
        owners[index] = owner
    return owners


def _owned_bytes(world_size, rank) -> int:
    return 4 * sum(
        math.prod(shape) for shape, owner in zip(PARAMETERS, _owners(world_size), strict=True) if owner == rank
    )


def _check_sharded(impl, world_size, seed, **options):
    state, (xs, ys) = _initial_state(seed), _batches(seed, 8)
    what = f"ShardedAdamW on {world_size} ranks"
    ranks = _ran(impl.call(train_with_sharded_adamw, state, xs, ys, world_size, ADAMW | options), what)
    expected = _adamw_oracle(state, xs, ys, **options)
    for rank, result in enumerate(ranks):
        for name, value in result["params"].items():
            expect.close(
                value,
                expected[name],
                f"{what}: rank {rank}'s {name} after {STEPS} AdamW steps",
                **ADAMW_TOL,
                hint="Every rank steps the parameters it owns, then each parameter is broadcast from its owner.",
            )
    for rank, result in enumerate(ranks):
        owned, held = _owned_bytes(world_size, rank), result["state_bytes"]
        total = 8 * sum(math.prod(shape) for shape in PARAMETERS)
        expect.that(
            2 * owned <= held <= 2 * owned + 64 * len(PARAMETERS),
            f"{what}: rank {rank}'s optimizer holds {held:,} bytes of tensors besides the parameters; AdamW's two "
            f"moments of the parameters it owns take {2 * owned:,} (of all the parameters: {total:,}; the owners: "
            "from the largest parameter to the smallest, each to the rank that owns the fewest elements so far)"
            + (": it keeps state for every parameter, not only for its shard" if held >= total else "")
            + (": it keeps less than the moments of its shard" if held < 2 * owned else ""),
        )
    owners = _owners(world_size)
    owned_numel = [sum(math.prod(PARAMETERS[i]) for i, o in enumerate(owners) if o == r) for r in range(world_size)]
    rule = (
        "from the largest parameter to the smallest, each to the rank that owns the fewest elements so far, the "
        "lowest rank on a tie, ties between parameters in list order"
    )
    for rank, result in enumerate(ranks):
        for step, sent in enumerate(result["broadcasts"], start=1):
            per_source = [sum(numel for src, numel in sent if src == r) for r in range(world_size)]
            expect.that(
                per_source == owned_numel,
                f"{what}: at step {step} rank {rank}'s broadcasts carried {per_source} elements from ranks "
                f"0..{world_size - 1}; each parameter is broadcast from its owner, so {owned_numel} ({rule})",
            )
        weights = {i: PARAMETERS[i] for i in range(len(PARAMETERS)) if len(PARAMETERS[i]) == 2}  # distinct shapes
        held = {tuple(shape) for shape in result["held_shapes"]}
        made = {tuple(shape) for shape in result["shapes"]}
        for i, shape in weights.items():
            mine = owners[i] == rank
            expect.that(
                (shape in held) == mine,
                f"{what}: rank {rank}'s optimizer {'lacks' if mine else 'holds'} state of the shape of parameter {i} "
                f"{list(shape)}, which rank {owners[i]} owns ({rule}): a rank keeps AdamW's moments for the "
                "parameters it owns, and only for those",
            )
            expect.that(
                mine or shape not in made,
                f"{what}: rank {rank}'s step() made tensors of the shape of parameter {i} {list(shape)}, which rank "
                f"{owners[i]} owns: a rank computes nothing for the parameters others own (no state, no update, even "
                "for a moment); it receives them by broadcast",
            )
    return ranks


@SHARDED.visible
def test_sharded_like_adamw(impl):
    "2 ranks: the parameters of torch.optim.AdamW on one process, each rank holding the moments of its shard only"
    _check_sharded(impl, 2, 10)


@SHARDED.hidden
def test_sharded_three_ranks(impl):
    "3 ranks, other hyperparameters (no weight decay, another learning rate)"
    _check_sharded(impl, 3, 11, lr=3e-2, weight_decay=0.0)


@SHARDED.hidden
def test_sharded_like_zero_redundancy_optimizer(impl):
    "the same parameters as PyTorch's ZeroRedundancyOptimizer (AdamW inside) on the same 2 ranks"
    from torch.distributed.optim import ZeroRedundancyOptimizer

    from coursetools.ranks import run_ranks

    state, (xs, ys) = _initial_state(12), _batches(12, 8)

    def work(rank, world):
        model = _mlp()
        model.load_state_dict(state)
        optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, **ADAMW)
        for x, y in zip(xs, ys, strict=True):
            F.mse_loss(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return {name: t.detach().clone() for name, t in model.state_dict().items()}

    expected = run_ranks(work, 2)
    ranks = _ran(impl.call(train_with_sharded_adamw, state, xs, ys, 2, ADAMW), "ShardedAdamW on 2 ranks")
    for rank, result in enumerate(ranks):
        for name, value in result["params"].items():
            expect.close(
                value, expected[rank][name], f"rank {rank}'s {name}, against ZeroRedundancyOptimizer's", **ADAMW_TOL
            )


# --- steps that compile -----------------------------------------------------------------------------------------

# masked_cross_entropy: the mean over the kept tokens of -log softmax in float32; F.cross_entropy's own rounding
# differs from any other order of the same sums by a few float32 ulps of the loss (order 1-10): 1e-5.
LOSS_TOL = {"atol": 1e-5, "rtol": 1e-5}
# The graph count that dynamo reports for a function it can trace whole (torch._dynamo.explain).
ONE_GRAPH = "one graph, no graph break"


def _loss_case(seed, shape, vocab, ignore_index, *, ignored_share=0.3, scale=1.0):
    g = _gen(200 + seed)
    logits = torch.randn(*shape, vocab, generator=g) * scale
    targets = torch.randint(0 if ignore_index != 0 else 1, vocab, shape, generator=g)
    ignored = torch.rand(shape, generator=g) < ignored_share
    ignored.view(-1)[0] = False  # at least one token counts
    return logits, targets.masked_fill(ignored, ignore_index)


def _loss_mistakes(logits, targets, ignore_index):
    flat_logits, flat_targets = logits.reshape(-1, logits.shape[-1]).double(), targets.reshape(-1)
    kept = flat_targets != ignore_index
    total = F.cross_entropy(flat_logits, flat_targets, ignore_index=ignore_index, reduction="sum")
    as_class = torch.where(kept, flat_targets, 0)
    return [
        (
            total / flat_targets.numel(),
            "it divides by every token; the mean is over the tokens that count (the sum of the 0/1 weights)",
        ),
        (total, "it returns the sum; the loss is the mean over the tokens that count"),
        (
            F.cross_entropy(flat_logits, as_class),
            "the ignored tokens are counted (as class 0): weight each token's loss "
            "by 1 if its target is not ignore_index, else 0",
        ),
    ]


def _check_loss(impl, seed, shape, vocab, ignore_index, *, scale=1.0):
    logits, targets = _loss_case(seed, shape, vocab, ignore_index, scale=scale)
    what = f"masked_cross_entropy for logits {list(logits.shape)}, ignore_index={ignore_index}"
    got = impl.call(run_masked_cross_entropy, logits, targets, ignore_index)
    flat_logits = logits.reshape(-1, vocab).double().requires_grad_()
    expected = F.cross_entropy(flat_logits, targets.reshape(-1), ignore_index=ignore_index)
    expected.backward()
    mistakes = _loss_mistakes(logits, targets, ignore_index)
    expect.close(
        got["value"],
        expected.detach(),
        what,
        **LOSS_TOL,
        alternatives=mistakes,
        hint="Use log_softmax, not log(softmax): it stays finite for logits far apart.",
    )
    expect.close(got["grad"], flat_logits.grad.reshape(logits.shape), f"the gradient of {what}", **LOSS_TOL)
    return got, what


def _one_graph(got, what, cure):
    breaks = got["graph_breaks"]
    expect.that(
        got["graphs"] == 1 and not breaks,
        f"{what}: torch.compile traced {got['graphs']} graphs with {len(breaks)} graph breaks"
        + (f" ({breaks[0][:160]})" if breaks else "")
        + f"; the text asks for {ONE_GRAPH}: {cure}",
    )


_NO_DATA_DEPENDENT = (
    "the number of tokens kept is only known once the targets are read, so boolean indexing (logits[mask]), "
    "nonzero or .item() splits the graph there; weight every token's loss by a 0/1 mask instead"
)


@MASKED_LOSS.visible
def test_loss_like_cross_entropy(impl):
    "the value and gradient of F.cross_entropy with ignore_index, traced as one graph by torch.compile"
    for seed, shape in ((1, (4, 6)), (2, (24,))):
        got, what = _check_loss(impl, seed, shape, 11, -100)
        _one_graph(got, what, _NO_DATA_DEPENDENT)


@MASKED_LOSS.hidden
def test_loss_other_ignore_index_and_large_logits(impl):
    "ignore_index=0 (a padding id) and = V (past the classes), logits hundreds apart, compiled (fullgraph) = eager"
    got, what = _check_loss(impl, 3, (3, 5), 17, 0)
    _one_graph(got, what, _NO_DATA_DEPENDENT)
    got, what = _check_loss(impl, 5, (2, 2, 6), 9, 9)
    _one_graph(got, what, _NO_DATA_DEPENDENT)
    got, what = _check_loss(impl, 4, (2, 7), 13, -100, scale=200.0)
    expect.that(got["compiled"] is not None, f"{what}: torch.compile(fullgraph=True) failed: {got['compile_error']}")
    expect.close(got["compiled"], got["value"], f"{what}, compiled against eager", **LOSS_TOL)


# compiled_adamw ---------------------------------------------------------------------------------------------------

# 5 steps of size lr <= 0.05 on values of order 1, compiled or not; a float32 step tensor makes the bias corrections
# 1 - beta^t about 3e-5 off in relative terms (torch.optim's are float64), which moves the parameters by about 1e-6.
ADAMW_STEP_TOL = {"atol": 1e-5, "rtol": 1e-5}


def _adamw_case(seed, shapes, steps=5, grad_scale=1.0):
    g = _gen(300 + seed)
    params = [torch.randn(*shape, generator=g) for shape in shapes]
    grads = [[torch.randn(*shape, generator=g) * grad_scale for shape in shapes] for _ in range(steps)]
    lrs = [0.01 * (i + 1) for i in range(steps)]  # a schedule: a new learning rate at every step
    return params, grads, lrs


def _adamw_oracle_steps(params, grads, lrs, betas, eps, weight_decay):
    leaves = [p.clone().requires_grad_() for p in params]
    optimizer = torch.optim.AdamW(leaves, lr=lrs[0], betas=betas, eps=eps, weight_decay=weight_decay)
    for step_grads, lr in zip(grads, lrs, strict=True):
        for p, g in zip(leaves, step_grads, strict=True):
            p.grad = g.clone()
        optimizer.param_groups[0]["lr"] = lr
        optimizer.step()
    return [p.detach() for p in leaves]


def _adamw_mistakes(params, grads, lrs, betas, eps, weight_decay):
    """AdamW with one known mistake each, written out (the mistakes have no library of their own)."""

    def run(*, bias_correction=True, decay_after=False, eps_inside=False):
        ps = [p.clone().double() for p in params]
        ms, vs = [torch.zeros_like(p) for p in ps], [torch.zeros_like(p) for p in ps]
        for t, (step_grads, lr) in enumerate(zip(grads, lrs, strict=True), start=1):
            for p, g, m, v in zip(ps, step_grads, ms, vs, strict=True):
                g = g.double()
                if not decay_after:
                    p.mul_(1 - lr * weight_decay)
                m.mul_(betas[0]).add_(g, alpha=1 - betas[0])
                v.mul_(betas[1]).addcmul_(g, g, value=1 - betas[1])
                c1, c2 = (1 - betas[0] ** t, 1 - betas[1] ** t) if bias_correction else (1.0, 1.0)
                denominator = (v / c2 + eps).sqrt() if eps_inside else (v / c2).sqrt() + eps
                p.sub_(lr * (m / c1) / denominator)
                if decay_after:
                    p.mul_(1 - lr * weight_decay)
        return ps

    return [
        (
            run(bias_correction=False),
            "the moments are not bias-corrected: divide m by 1 - beta1^t and v by 1 - beta2^t",
        ),
        (run(eps_inside=True), "eps is added inside the square root; AdamW adds it to sqrt(v_hat)"),
        (
            run(decay_after=True),
            "the weight decay is applied after the update; AdamW (decoupled, as torch.optim.AdamW) "
            "shrinks p by lr * weight_decay before it",
        ),
    ]


def _check_adamw(impl, seed, shapes, *, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, compiled=True, grad_scale=1.0):
    params, grads, lrs = _adamw_case(seed, shapes, grad_scale=grad_scale)
    what = f"adamw_step_ over {len(lrs)} steps with a new lr each step, parameters {[list(s) for s in shapes]}" + (
        ", compiled" if compiled else ", not compiled"
    )
    got = impl.call(run_adamw_steps, params, grads, lrs, betas, eps, weight_decay, compiled)
    expected = _adamw_oracle_steps(params, grads, lrs, betas, eps, weight_decay)
    expect.that(
        not got["replaced"],
        f"{what}: adamw_step_ put new tensors in the list of parameters (at {got['replaced']}); it updates the "
        "tensors it is given, in place (p.mul_, p.sub_, m.lerp_, ...), as an optimizer must: the model holds them",
    )
    step = got["step"]  # first: a step that stays 0 also makes every update wrong, for this reason
    expect.that(
        isinstance(step, torch.Tensor) and step.dim() == 0 and float(step) == len(lrs),
        f"{what}: the step tensor reads {step} afterwards; adamw_step_ adds 1 to it in place at every call",
    )
    mistakes = _adamw_mistakes(params, grads, lrs, betas, eps, weight_decay)
    for i, (value, oracle) in enumerate(zip(got["params"], expected, strict=True)):
        expect.close(
            value,
            oracle,
            f"{what}: parameter {i}",
            **ADAMW_STEP_TOL,
            alternatives=[(wrong[i], diagnosis) for wrong, diagnosis in mistakes],
        )
    return got, what


@COMPILED_ADAMW.visible
def test_adamw_like_torch_optim_compiled_once(impl):
    "5 compiled steps with a new learning rate each: torch.optim.AdamW's parameters, and a single compilation"
    got, what = _check_adamw(impl, 1, [(3, 4), (4,)])
    expect.that(
        got["compiles"] == 1,
        f"{what}: torch.compile compiled {got['compiles']} graphs; one is enough when lr and step stay 0-D tensors "
        "(.item(), float(lr), a Python step count or a graph break turns each value into a new graph)",
    )


@COMPILED_ADAMW.hidden
def test_adamw_eager_and_other_settings(impl):
    "not compiled; compiled with three parameters, no weight decay, other betas and eps; an eps that matters"
    _check_adamw(impl, 2, [(5,), (2, 3)], compiled=False)
    # Gradients of 1e-3 and eps 1e-2: eps outweighs sqrt(v_hat), so where it is added shows.
    _check_adamw(impl, 4, [(3, 3)], eps=1e-2, grad_scale=1e-3)
    got, what = _check_adamw(impl, 3, [(2, 2), (3,), (1, 4)], betas=(0.8, 0.99), eps=1e-6, weight_decay=0.0)
    expect.that(got["compiles"] == 1, f"{what}: torch.compile compiled {got['compiles']} graphs, expected one")


# ---------------------------------------------------------------------------------------------------------------
# Adapters: the only code in this module that touches the student's objects (see autograder/notebooks/__init__.py).


@adapter
def call_top_operators(ns, trace: dict, k: int):
    return need(ns, "top_operators")(trace, k)


@adapter
def call_block_activation_bytes(ns, shapes: list):
    """The student's formula for each shape, and how many tensors it made (a formula makes none)."""
    formula = need(ns, "block_activation_bytes")
    with watch_memory() as seen:
        values = [formula(*shape) for shape in shapes]
    return {"values": values, "tensors_made": seen.made + seen.scalars}


def _memory(seen) -> dict:
    return {
        "peak_bytes": seen.peak_bytes,
        "largest": list(seen.largest),
        "largest_numel": seen.largest_numel,
        "products": [list(shape) for shape in seen.products],
        "scalars": seen.scalars,
    }


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
    kept = storage_bytes([*saved, *tensors_held_by(getattr(out.grad_fn, "__dict__", {}))])  # ctx's attributes too
    with watch_memory() as seen:
        out.backward(grad_out)
    grads = {name: t.grad if t.grad is not None else torch.zeros_like(t) for name, t in zip("qkv", leaves, strict=True)}
    return {"grads": grads, "saved_bytes": kept, "memory": _memory(seen)}


def _on_ranks(ns, work, world_size):
    """``work(rank, world)`` on forked ranks (``coursetools.ranks``): their results, or why a rank failed."""
    from autograder.errors import TimeLimitExceeded
    from coursetools.ranks import RANK_TIMEOUT, RanksFailed, run_ranks

    try:
        return {"ranks": run_ranks(work, world_size)}
    except NotImplementedError:  # a rank met the stub (coursetools.ranks.unfinished): raised here as the stub is
        raise NotImplementedError() from None
    except RanksFailed as error:
        if error.hung:  # as the grader's own time limit would say it, so the exercise's other checks do not wait too
            raise TimeLimitExceeded(RANK_TIMEOUT) from None
        said = str(error)
        if "Connection reset by peer" in said or "Connection closed by peer" in said:
            said += " (another rank had stopped: every rank must send the same collectives, in the same order)"
        return {"failed": said}


def _sgd_training(ns, make_sync, state, xs, ys, world_size, model_options: dict):
    """Each rank trains the checks' model (``_mlp``, ``model_options``: ``head_first``, ``freeze_first``) on its
    shard of each batch with plain SGD, calling the student's gradient synchronisation between backward and the
    step; what it sent is recorded."""
    from coursetools.ranks import recorded_collectives

    def work(rank, world):
        model = _mlp(model_options.get("head_first", False))
        model.load_state_dict(state)
        if model_options.get("freeze_first"):
            next(model.parameters()).requires_grad_(False)
        with recorded_collectives(ns) as sent:
            finish = make_sync(model)
            for x, y in zip(xs, ys, strict=True):
                F.mse_loss(model(x.chunk(world)[rank]), y.chunk(world)[rank]).backward()
                finish()
                with torch.no_grad():
                    for p in model.parameters():
                        if p.grad is not None:
                            p -= LR * p.grad
                        p.grad = None
        return {"params": {name: t.detach().clone() for name, t in model.state_dict().items()}, "sent": list(sent)}

    return _on_ranks(ns, work, world_size)


@adapter
def train_with_average(ns, state, xs, ys, world_size: int, model_options: dict):
    average = need(ns, "average_gradients")
    return _sgd_training(ns, lambda model: lambda: average(model), state, xs, ys, world_size, model_options)


@adapter
def train_with_overlap(ns, state, xs, ys, world_size: int, model_options: dict):
    make = need(ns, "OverlappedGradientSync")
    return _sgd_training(ns, lambda model: make(model).wait, state, xs, ys, world_size, model_options)


@adapter
def train_with_buckets(ns, state, xs, ys, world_size: int, model_options: dict, bucket_bytes: int):
    make = need(ns, "BucketedGradientSync")
    return _sgd_training(ns, lambda model: make(model, bucket_bytes).wait, state, xs, ys, world_size, model_options)


@adapter
def train_with_sharded_adamw(ns, state, xs, ys, world_size: int, options: dict):
    """Each rank computes the whole batch's gradients (the same on every rank) and steps the student's
    ShardedAdamW; reports the parameters, the bytes of tensors the optimizer holds besides them, each step's
    broadcasts (from which rank, how many elements), the shapes of the tensors its steps made and of those it holds."""
    from coursetools.ranks import recorded_collectives

    sharded = need(ns, "ShardedAdamW")

    def work(rank, world):
        model = _mlp()
        model.load_state_dict(state)
        params = list(model.parameters())
        optimizer = sharded(params, **options)
        broadcasts, shapes = [], set()
        for x, y in zip(xs, ys, strict=True):
            F.mse_loss(model(x), y).backward()
            with recorded_collectives(ns) as sent, watch_memory() as seen:
                optimizer.step()
            broadcasts.append([[c["src"], c["numel"]] for c in sent if c["name"] == "broadcast"])
            shapes |= seen.shapes
            for p in params:
                p.grad = None
        return {
            "params": {name: t.detach().clone() for name, t in model.state_dict().items()},
            "state_bytes": bytes_held_by(optimizer, leave_out=params),
            "broadcasts": broadcasts,
            "shapes": sorted(list(shape) for shape in shapes),
            "held_shapes": sorted({tuple(t.shape) for t in tensors_held_by(optimizer, leave_out=params)}),
        }

    return _on_ranks(ns, work, world_size)


@adapter
def run_masked_cross_entropy(ns, logits, targets, ignore_index: int):
    """The student's loss: its value and the logits' gradient (eager), what dynamo makes of it
    (``torch._dynamo.explain``) and its value compiled with ``fullgraph=True`` (the aot_eager backend: dynamo and
    AOTAutograd, no generated code, so it takes a second on any CPU)."""
    import torch._dynamo

    loss = need(ns, "masked_cross_entropy")
    leaf = logits.clone().requires_grad_()
    value = loss(leaf, targets, ignore_index)
    grad = None
    if isinstance(value, torch.Tensor) and value.requires_grad:
        value.backward()
        grad = leaf.grad
    torch._dynamo.reset()
    explained = torch._dynamo.explain(loss)(logits, targets, ignore_index)
    torch._dynamo.reset()
    compiled, compile_error = None, ""
    try:
        compiled = torch.compile(loss, backend="aot_eager", fullgraph=True)(logits, targets, ignore_index)
    except Exception as error:  # noqa: BLE001 - reported to the check, which says it
        compile_error = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    torch._dynamo.reset()
    return {
        "value": value.detach() if isinstance(value, torch.Tensor) else value,
        "grad": grad,
        "graphs": explained.graph_count,
        "graph_breaks": [str(b.reason) for b in explained.break_reasons],
        "compiled": compiled.detach() if isinstance(compiled, torch.Tensor) else None,
        "compile_error": compile_error,
    }


@adapter
def run_adamw_steps(ns, params, grads, lrs, betas, eps, weight_decay, compiled: bool):
    """The student's adamw_step_ over the steps, its learning rate a 0-D tensor set in place before each (as a
    scheduler does), compiled or not; how many graphs torch.compile compiled (a backend that counts them)."""
    import torch._dynamo

    step_fn = need(ns, "adamw_step_")
    compiles = []

    def counting_backend(graph_module, example_inputs):
        compiles.append(len(example_inputs))
        return graph_module.forward

    torch._dynamo.reset()
    run = torch.compile(step_fn, backend=counting_backend) if compiled else step_fn
    params = [p.clone() for p in params]
    originals = list(params)  # the tensors given: the step updates these, in place, not new ones in the list
    exp_avgs, exp_avg_sqs = [torch.zeros_like(p) for p in params], [torch.zeros_like(p) for p in params]
    step, lr = torch.tensor(0.0), torch.tensor(lrs[0])
    for step_grads, value in zip(grads, lrs, strict=True):
        lr.fill_(value)
        run(params, step_grads, exp_avgs, exp_avg_sqs, step, lr, betas[0], betas[1], eps, weight_decay)
    torch._dynamo.reset()
    return {
        "params": originals,
        "replaced": [i for i, (p, o) in enumerate(zip(params, originals, strict=True)) if p is not o],
        "step": step,
        "compiles": len(compiles),
    }


with contextlib.suppress(ImportError):  # the profiler's import is slow the first time: pay it while importing
    import torch.profiler  # noqa: F401
