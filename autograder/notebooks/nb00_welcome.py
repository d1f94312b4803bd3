"""Notebook 00's exercises, with their checks and adapters: the warm-up on tensors, broadcasting, einsum and einops.

Oracles, each computed here without the idea the exercise teaches:
- relative positions: a Python double loop over (i, j); for 1,025 positions (beyond every size the notebook
  uses, so a table built once for a fixed size and sliced fails), ``repeat`` and ``repeat_interleave`` of
  ``arange`` (no broadcasting, and no million-step loop);
- pairwise squared distances: a Python double loop over the pairs, in float64;
- query-key dot products: ``torch.matmul`` with the keys transposed, in float64;
- split and merge heads: ``Tensor.view`` and ``permute`` (no einops);
- one-hot vectors: ``F.one_hot`` (switched off while the student's function runs).

Inputs come in several shapes, size-1 dimensions included, and some checks pass them non-contiguous
(the same values, column-major: ``t.mT.contiguous().mT``), as slices and transposes are in real code.
"Do not modify a or b" is observed on the inputs after the call: values, shape, strides and the version counter
(``Tensor._version``, raised by every in-place method, even one undone later), and with one tensor passed as both
``a`` and ``b``, where an edit of one is an edit of the other. Known mistakes are compared only when they have
the result's shape (``_fitting``), so that naming a mistake never fails.

Tolerances:
- integers, 0/1 tensors and rearrangements (which move numbers without arithmetic) are compared exactly;
- float32 sums (distances and dot products of width <= 16, values up to a few hundred) at atol 1e-4 +
  rtol 1e-5. Measured against float64 on the checks' shapes with 40 seeds each, the broadcasting
  answer used at most 1.6% of that bound, torch.cdist squared 2.5%; einsum and matmul dot products were
  off by at most 1.3e-6. The closest known mistake (dot products scaled by 1/sqrt(d)) is off by more than 3;
- distances of points far from the origin (float32 coordinates near 1e4, differences of a few units), the
  same bound: the broadcast difference a - b of two float32 numbers within a factor 2 of each other is exact
  (Sterbenz), so only the squares and the sum round (measured with broadcasting, einsum on the differences
  and vector_norm squared: under 2% of the bound); the expansion |a|^2 + |b|^2 - 2 a.b, which the exercise's
  text rules out, adds terms near 3e8 where float32's spacing is 32, and is off by 80 and 395 on the check's
  two sets of points. A third set holds two clusters, near +1e4 and near -1e4 in every coordinate, whose
  common mean is near 0: centring on that mean before the expansion leaves each cluster far out (off by
  over 10^5 times the bound in 40 seeds), while the broadcast difference, einsum on it, vector_norm squared and
  torch.cdist squared stay under 3% of the bound. The same points moved to the origin, each by its cluster's
  offset (an exact subtraction), tell this cancellation from other mistakes;
- float64 inputs at 1e-9.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from autograder import expect
from autograder.adapters import adapter, lines_run, need
from autograder.exercises import Exercise
from autograder.notebooks._seeds import seeded
from autograder.rules import CODE_FROM_STRINGS, Rule

RELATIVE = Exercise(
    "relative_positions",
    "relative positions",
    points=1,
    rules=(Rule("no Python loops, in any form, and no exec, eval or compile", builtins=CODE_FROM_STRINGS),),
)
DISTANCES = Exercise(
    "pairwise_sq_distances",
    "pairwise squared distances by broadcasting",
    points=2,
    rules=(
        Rule("no Python loops, in any form, and no exec, eval or compile", builtins=CODE_FROM_STRINGS),
        Rule(
            "no torch.cdist",
            (
                "torch.cdist",
                "torch.nn.functional.pairwise_distance",
                "torch.nn.PairwiseDistance",
                "torch._euclidean_dist",
                "torch.ops.aten._cdist_forward",
            ),
        ),
    ),
)
DOTS = Exercise("head_dot_products", "every query-key dot product with einsum", points=2)
HEADS = Exercise("split_merge_heads", "split and merge heads with einops", points=2)
ONE_HOT = Exercise(
    "one_hot",
    "one-hot vectors",
    points=1,
    rules=(Rule("do not call F.one_hot", ("torch.nn.functional.one_hot",)),),
)
EXERCISES = [RELATIVE, DISTANCES, DOTS, HEADS, ONE_HOT]

F32 = {"atol": 1e-4, "rtol": 1e-5}
F64 = {"atol": 1e-9, "rtol": 1e-9}
EXACT = {"atol": 0.0, "rtol": 0.0}

_gen, _randn = seeded(0)


def _tol(dtype: torch.dtype) -> dict:
    return F64 if dtype == torch.float64 else F32


def _result(got: dict, what: str, *, shape, dtype, shape_mistakes=()) -> torch.Tensor:
    """The returned tensor, or a failure naming the likely mistake behind a wrong shape or dtype."""
    value = got.get("value")
    expect.tensor(value, what)
    for wrong_shape, diagnosis in shape_mistakes:
        if tuple(value.shape) == tuple(wrong_shape) != tuple(shape):
            expect.fail(f"{what} has shape {list(value.shape)}, expected {list(shape)}: {diagnosis}")
    return expect.tensor(value, what, shape=shape, dtype=dtype)


_IN_PLACE = (
    "work on new tensors (a[:, None] or a.unsqueeze(1), a - b), not with methods ending in _ such as unsqueeze_ or sub_"
)


def _unchanged(got: dict, originals: dict[str, torch.Tensor]) -> None:
    """The leading tensor arguments after the call are those before: same values, shape and strides, and no
    in-place operation ran on them (their version counter, which every in-place method raises, even one whose
    change is undone afterwards, as ``unsqueeze_`` then ``squeeze_``)."""
    layouts = zip(got.get("layout_before", ()), got.get("layout_after", ()), strict=True)
    for (name, before), after, (layout, layout_after) in zip(
        originals.items(), got["args_after"], layouts, strict=False
    ):
        same = isinstance(after, torch.Tensor) and after.shape == before.shape and torch.equal(after, before)
        expect.that(same, f"your function changed its input `{name}` in place; {_IN_PLACE}")
        if layout != layout_after:
            changed = ", ".join(
                f"its {key} went from {layout[key]} to {layout_after[key]}"
                for key in ("shape", "stride", "version")
                if layout[key] != layout_after[key]
            )
            expect.fail(
                f"your function changed its input `{name}` in place, even if it put it back afterwards "
                f"({changed}: the version counter counts the in-place operations on a tensor); " + _IN_PLACE
            )


def _fitting(alternatives, shape) -> list:
    """The known mistakes of this shape: only they can be compared with a result of the expected shape (a
    transposed table [t, s] cannot be told apart from [s, t] by its values, and comparing them would fail)."""
    return [(wrong, diagnosis) for wrong, diagnosis in alternatives if tuple(wrong.shape) == tuple(shape)]


# --- Exercise 1: relative positions ---------------------------------------------------------


def _relative_oracle(n: int) -> torch.Tensor:
    return torch.tensor([[j - i for j in range(n)] for i in range(n)], dtype=torch.int64).reshape(n, n)


def _relative_oracle_large(n: int) -> torch.Tensor:
    """The same table for many positions, by repetition instead of a loop: row i is 0..n-1, minus i."""
    positions = torch.arange(n, dtype=torch.int64)
    return (positions.repeat(n) - positions.repeat_interleave(n)).reshape(n, n)


def _check_relative(impl, n: int, *, oracle=_relative_oracle) -> None:
    got = impl.call(call, "relative_positions", [n])
    what = f"relative_positions({n})"
    value = got.get("value")
    expect.tensor(value, what)
    rows = tuple(value.shape)
    if len(rows) == 2 and rows[0] == rows[1] and rows[0] < n:
        expect.fail(
            f"{what} has shape {list(value.shape)}, expected {[n, n]}: it stops at {rows[0]} positions, as a "
            "table built once for a fixed number of positions and sliced does; build the table for the n asked"
        )
    expect.tensor(value, what, shape=(n, n))
    expect.that(
        value.dtype == torch.int64,
        f"{what} has dtype {value.dtype}; positions are whole numbers: torch.arange(n) gives int64 (torch.long)",
    )
    expected = oracle(n)
    expect.close(
        value,
        expected,
        what,
        **EXACT,
        alternatives=[
            (
                -expected,
                "it is transposed: out[i, j] = j - i (the key's position minus the query's), you computed i - j",
            ),
            (
                expected.abs(),
                "it lost the sign: keys to the left of the query (j < i) must get negative offsets",
            ),
        ],
    )


@RELATIVE.visible
def test_relative_positions_small(impl):
    "relative_positions(5)[i, j] equals j - i, as an int64 tensor of shape [5, 5]"
    _check_relative(impl, 5)


@RELATIVE.visible
def test_relative_positions_no_loops(impl):
    "no Python loops: your code does the same work (lines of your code, torch calls) for 3 and for 12 positions"
    expect.no_loops("no Python loops", {f"n = {n}": impl.call(lines, "relative_positions", [n]) for n in (3, 12)})


@RELATIVE.hidden
def test_relative_positions_sizes(impl):
    "any n: 1, 2 and 9 positions"
    for n in (1, 2, 9):
        _check_relative(impl, n)


@RELATIVE.hidden
def test_relative_positions_many(impl):
    "1,025 positions, more than the notebook ever asks for: the table is built for the n asked"
    _check_relative(impl, 1025, oracle=_relative_oracle_large)


# --- Exercise 2: pairwise squared distances ---------------------------------------------------


def _sq_distances_oracle(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a64, b64 = a.double().tolist(), b.double().tolist()
    rows = [[sum((x - y) ** 2 for x, y in zip(p, q, strict=True)) for q in b64] for p in a64]
    return torch.tensor(rows, dtype=torch.float64).reshape(len(a64), len(b64))


def _check_sq_distances(impl, n: int, m: int, d: int, seed: int, *, dtype=torch.float32, strided=False):
    a, b = (_randn((n, d), seed, scale=2.0).to(dtype), _randn((m, d), seed + 50, scale=2.0).to(dtype))
    got = impl.call(call, "pairwise_sq_distances", [a, b], strided=[0, 1] if strided else [])
    what = f"pairwise_sq_distances(a, b) for a of shape [{n}, {d}] and b of shape [{m}, {d}]"
    value = _result(
        got,
        what,
        shape=(n, m),
        dtype=dtype,
        shape_mistakes=[
            ((m, n), "rows follow the points of a and columns those of b: out[i, j] = |a[i] - b[j]|²"),
            ((n, m, d), "the last step, the sum over the coordinates (dim=-1), is missing"),
        ],
    )
    expected = _sq_distances_oracle(a, b)
    expect.close(
        value,
        expected.to(dtype),
        what,
        **_tol(dtype),
        alternatives=[
            (
                expected.sqrt(),
                "these are the distances; the exercise asks for their squares (leave out the square root)",
            ),
            (expected + (a.double() @ b.double().T), "in |a|² + |b|² - 2 a·b the factor 2 is missing"),
            (
                (a.double()[:, None, :] - b.double()[None, :, :]).abs().sum(-1).to(dtype),
                "these are sums of absolute differences |a - b|; square the differences before the sum "
                "((diff ** 2).sum(-1))",
            ),
        ],
    )
    _unchanged(got, {"a": a, "b": b})


def _check_sq_distances_same(impl, n: int, d: int, seed: int) -> None:
    """``pairwise_sq_distances(x, x)``: one tensor passed as both inputs. A function that edits ``a`` in place
    edits ``b`` with it here, whatever it puts back afterwards."""
    x = _randn((n, d), seed, scale=2.0)
    got = impl.call(call, "pairwise_sq_distances", [x], same=True)
    what = f"pairwise_sq_distances(x, x), one tensor x of shape [{n}, {d}] passed as both a and b,"
    _unchanged(got, {"a": x, "b": x})
    expected = _sq_distances_oracle(x, x).float()
    if _right_table(got.get("value"), expected):
        return
    # The same values in two tensors: if that is right, only sharing one tensor made the difference.
    apart = impl.call(call, "pairwise_sq_distances", [x, x.clone()])
    cause = (
        (
            "; with two distinct tensors of the same values it is right, so your function changes a or b in place "
            "(a method ending in _, such as unsqueeze_, or an assignment to .data), and when they are one tensor, "
            "changing a changes b too: " + _IN_PLACE
        )
        if _right_table(apart.get("value"), expected)
        else ""
    )
    value = expect.tensor(got.get("value"), what)
    expect.that(tuple(value.shape) == (n, n), f"{what} has shape {list(value.shape)}, expected {[n, n]}{cause}")
    expect.fail(f"{what} does not hold the squared distances |x[i] - x[j]|²{cause}")


def _right_table(value, expected: torch.Tensor) -> bool:
    """``value`` is a tensor of ``expected``'s shape within the float32 tolerance of it."""
    if not isinstance(value, torch.Tensor) or value.shape != expected.shape:
        return False
    error = (value.detach().double() - expected.double()).abs()
    return bool((error <= F32["atol"] + F32["rtol"] * expected.double().abs()).all())


@DISTANCES.visible
def test_sq_distances_values(impl):
    "a [4, 3] and b [6, 3] give the [4, 6] table of |a[i] - b[j]|²"
    _check_sq_distances(impl, 4, 6, 3, 0)


@DISTANCES.visible
def test_sq_distances_no_loops(impl):
    "no Python loops: your code does the same work (lines of your code, torch calls) for 2 and 9 points, 3 and 12 coordinates"
    # Both sizes vary: a loop over the coordinates does the same work for any number of points.
    runs = {
        f"{n} points of {d} coordinates": impl.call(
            lines, "pairwise_sq_distances", [_randn((n, d), n), _randn((n + 1, d), n + 1)]
        )
        for n, d in ((2, 3), (9, 3), (2, 12))
    }
    expect.no_loops("no Python loops", runs)


@DISTANCES.hidden
def test_sq_distances_shapes_and_dtype(impl):
    "size-1 dimensions (one point, one coordinate), non-contiguous inputs left unchanged, float64 stays float64"
    for n, m, d, seed, dtype in [
        (1, 5, 2, 1, torch.float32),
        (3, 1, 1, 2, torch.float32),
        (5, 4, 16, 3, torch.float32),
        (7, 3, 8, 4, torch.float64),
    ]:
        _check_sq_distances(impl, n, m, d, seed, dtype=dtype, strided=d > 1 and n > 1)


_FAR = 1e4  # where float32's spacing is 1e-3 and squares near 3e8 are spaced 32 apart


def _far_offsets(count: int, clusters: bool) -> torch.Tensor:
    """Each point's offset from the origin, [count, 1]: ``_FAR`` for all of them, or with ``clusters`` ``+_FAR`` for
    the first half and ``-_FAR`` for the rest (two clusters whose common mean is near the origin)."""
    signs = torch.ones(count, 1)
    if clusters:
        signs[count // 2 :] = -1.0
    return signs * _FAR


def _check_sq_distances_far(impl, n: int, m: int, d: int, seed: int, *, clusters: bool = False) -> None:
    """Points near ``_FAR`` in every coordinate (or, with ``clusters``, half near ``+_FAR`` and half near ``-_FAR``),
    a few units from their cluster's centre, in float32; and the same points moved to the origin by subtracting
    their offset (exact in float32: Sterbenz), so that a result right near the origin and wrong far from it can be
    put down to cancellation."""
    a_near, b_near = _randn((n, d), seed, scale=2.0), _randn((m, d), seed + 50, scale=2.0)
    a_offset, b_offset = _far_offsets(n, clusters), _far_offsets(m, clusters)
    a, b = a_near + a_offset, b_near + b_offset
    a_near, b_near = a - a_offset, b - b_offset  # exactly the differences the far points carry
    expected = _sq_distances_oracle(a, b)
    where = f"two clusters of float32 points near ±{_FAR:g}" if clusters else f"float32 points near {_FAR:g}"
    what = f"pairwise_sq_distances(a, b) for a [{n}, {d}] and b [{m}, {d}] of {where}"
    got = impl.call(call, "pairwise_sq_distances", [a, b])
    value = _result(got, what, shape=(n, m), dtype=torch.float32)
    _unchanged(got, {"a": a, "b": b})
    if _right_table(value, expected):
        return
    near = impl.call(call, "pairwise_sq_distances", [a_near, b_near]).get("value")
    if _right_table(near, _sq_distances_oracle(a_near, b_near)):
        error = float((value.detach().double() - expected).abs().max())
        centring = (
            " (centring on the mean of all the points does not cure it: the two clusters' mean is near the origin, "
            "and each cluster is still far from it)"
            if clusters
            else ""
        )
        expect.fail(
            f"{what} is off by up to {error:.3g}, though the same points moved to the origin give the right table: "
            "digits were lost to cancellation, as with the expansion |a|² + |b|² - 2 a·b (in float32 its terms are "
            f"near 3e8, where numbers are 32 apart){centring}; this exercise asks for the broadcast difference "
            "a[:, None, :] - b[None, :, :], squared and summed over the coordinates"
        )
    expect.close(value, expected.float(), what, **F32)


@DISTANCES.hidden
def test_sq_distances_far_from_origin(impl):
    "float32 points near 1e4, and in two clusters near ±1e4: the broadcast difference keeps every digit that the expansion |a|² + |b|² - 2 a·b loses"
    for n, m, d, seed in ((4, 5, 3, 7), (3, 6, 16, 8)):
        _check_sq_distances_far(impl, n, m, d, seed)
    # Two clusters whose common mean is near 0: centring all the points on it leaves each cluster far out.
    _check_sq_distances_far(impl, 6, 8, 3, 9, clusters=True)


@DISTANCES.hidden
def test_sq_distances_same_tensor_twice(impl):
    "one tensor passed as both a and b, pairwise_sq_distances(x, x): its [n, n] table, and x left as it was"
    for n, d, seed in ((5, 3, 5), (1, 2, 6)):
        _check_sq_distances_same(impl, n, d, seed)


# --- Exercise 3: query-key dot products -----------------------------------------------------------


def _check_dots(impl, b: int, h: int, s: int, t: int, d: int, seed: int, *, dtype=torch.float32, strided=False):
    q, k = _randn((b, h, s, d), seed).to(dtype), _randn((b, h, t, d), seed + 50).to(dtype)
    got = impl.call(call, "head_dot_products", [q, k], strided=[0, 1] if strided else [])
    what = f"head_dot_products(q, k) for q of shape {[b, h, s, d]} and k of shape {[b, h, t, d]}"
    value = _result(
        got,
        what,
        shape=(b, h, s, t),
        dtype=dtype,
        shape_mistakes=[
            (
                (b, h, t, s),
                "it is transposed: queries index the rows and keys the columns, [batch, heads, s, t]",
            ),
            ((h, b, s, t), "the batch and head axes are swapped; keep the order [batch, heads, s, t]"),
            ((b, h, s), "it also sums over the keys; sum over the head dimension d only"),
        ],
    )
    expected = torch.matmul(q.double(), k.double().transpose(-1, -2))
    expect.close(
        value,
        expected.to(dtype),
        what,
        **_tol(dtype),
        alternatives=_fitting(_dots_mistakes(q.double(), k.double(), expected), expected.shape),
    )
    _unchanged(got, {"q": q, "k": k})


def _dots_mistakes(q: torch.Tensor, k: torch.Tensor, expected: torch.Tensor) -> list:
    """Known mistakes, computed in float64 with matmul and sums (not einsum): (their result, what went wrong)."""
    d = q.shape[-1]
    return [
        (
            expected / math.sqrt(d),
            "it is divided by sqrt(d): this exercise asks for the plain dot products "
            "(the scaling comes with attention, in notebook 04)",
        ),
        (
            expected.softmax(-1),
            "a softmax was applied: this exercise asks for the raw dot products "
            "(the softmax comes with attention, in notebook 04)",
        ),
        (expected.transpose(-1, -2), "it is transposed: out[..., i, j] = q[..., i, :] · k[..., j, :]"),
        (
            expected.transpose(0, 1),
            "the batch and head axes are swapped; keep the order [batch, heads, s, t]",
        ),
        (
            torch.matmul(q, k.sum(0, keepdim=True).transpose(-1, -2)),
            "every query meets the keys of all batch elements added up: in the einsum string the batch axis of k has "
            "a letter of its own, so it is summed over; give q and k the same batch letter (bhsd,bhtd->bhst)",
        ),
        (
            torch.matmul(q, k.sum(1, keepdim=True).transpose(-1, -2)),
            "every query meets the keys of all heads added up: in the einsum string the head axis of k has a letter "
            "of its own, so it is summed over; give q and k the same head letter (bhsd,bhtd->bhst)",
        ),
    ]


@DOTS.visible
def test_head_dot_products_values(impl):
    "q [2, 3, 4, 5] and k [2, 3, 6, 5] give the [2, 3, 4, 6] dot products q·k of each batch and head"
    _check_dots(impl, 2, 3, 4, 6, 5, 0)


@DOTS.hidden
def test_head_dot_products_shapes_and_dtype(impl):
    "size-1 batch, heads and head dimension; as many keys as queries; non-contiguous inputs; float64 stays float64"
    for b, h, s, t, d, seed, dtype in [
        (1, 1, 3, 3, 1, 1, torch.float32),
        (2, 2, 5, 5, 8, 2, torch.float32),
        (3, 2, 1, 7, 16, 3, torch.float32),
        (2, 4, 3, 2, 4, 4, torch.float64),
    ]:
        _check_dots(impl, b, h, s, t, d, seed, dtype=dtype, strided=s > 1 and d > 1)


# --- Exercise 4: split and merge heads ---------------------------------------------------------------


def _split_oracle(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    b, s, width = x.shape
    return x.contiguous().view(b, s, n_heads, width // n_heads).permute(0, 2, 1, 3)


def _merge_oracle(y: torch.Tensor) -> torch.Tensor:
    b, h, s, d = y.shape
    return y.permute(0, 2, 1, 3).contiguous().view(b, s, h * d)


_SPLIT_ORDER = (
    "head i owns the columns i * d_head up to (i + 1) * d_head - 1, so the pattern is 'b s (h d)', not 'b s (d h)'"
)


def _check_split(impl, b: int, s: int, h: int, d: int, seed: int, *, dtype=torch.float32, strided=False):
    x = _randn((b, s, h * d), seed).to(dtype)
    got = impl.call(call, "split_heads", [x, h], strided=[0] if strided else [])
    what = f"split_heads(x, {h}) for x of shape {[b, s, h * d]}"
    value = _result(
        got,
        what,
        shape=(b, h, s, d),
        dtype=dtype,
        shape_mistakes=[
            ((b, s, h, d), "the head axis must come before the sequence axis: [batch, heads, seq, d_head]"),
        ],
    )
    expect.close(
        value,
        _split_oracle(x, h),
        what,
        **EXACT,
        alternatives=[
            (x.view(b, s, d, h).permute(0, 3, 1, 2), _SPLIT_ORDER),
            (
                x.reshape(b, h, s, d),
                "a reshape alone does not move the head axis: it mixes positions into heads; "
                "split the last axis into (h d), then move h in front of s",
            ),
        ],
    )
    _unchanged(got, {"x": x})


def _check_merge(impl, b: int, h: int, s: int, d: int, seed: int, *, dtype=torch.float32, strided=False):
    y = _randn((b, h, s, d), seed).to(dtype)
    got = impl.call(call, "merge_heads", [y], strided=[0] if strided else [])
    what = f"merge_heads(y) for y of shape {[b, h, s, d]}"
    value = _result(
        got,
        what,
        shape=(b, s, h * d),
        dtype=dtype,
        shape_mistakes=[
            (
                (b, h, s * d),
                "heads and positions are merged the wrong way: [batch, heads, seq, d_head] -> [batch, seq, heads * d_head]",
            ),
        ],
    )
    expect.close(
        value,
        _merge_oracle(y),
        what,
        **EXACT,
        alternatives=[
            (
                y.permute(0, 2, 3, 1).reshape(b, s, h * d),
                "merge_heads must undo split_heads: " + _SPLIT_ORDER,
            ),
            (
                y.reshape(b, s, h * d),
                "a reshape alone does not move the head axis back behind the sequence axis; "
                "move h behind s first, then join (h d)",
            ),
        ],
    )
    _unchanged(got, {"y": y})


@HEADS.visible
def test_split_heads(impl):
    "split_heads: x [2, 5, 12] with 3 heads gives [2, 3, 5, 4], head i holding columns 4i to 4i + 3"
    _check_split(impl, 2, 5, 3, 4, 0)


@HEADS.visible
def test_merge_heads(impl):
    "merge_heads: y [2, 3, 5, 4] gives [2, 5, 12], undoing split_heads"
    _check_merge(impl, 2, 3, 5, 4, 1)


@HEADS.hidden
def test_heads_shapes_and_layouts(impl):
    "1 head, one column per head, non-contiguous inputs, float64 stays float64"
    for b, s, h, d, seed, dtype in [
        (1, 4, 1, 8, 2, torch.float32),
        (2, 3, 8, 1, 3, torch.float32),
        (3, 6, 2, 4, 4, torch.float32),
        (2, 2, 3, 2, 5, torch.float64),
    ]:
        _check_split(impl, b, s, h, d, seed, dtype=dtype, strided=True)
        _check_merge(impl, b, h, s, d, seed + 10, dtype=dtype, strided=True)


# --- Exercise 5: one-hot vectors ---------------------------------------------------------------------


def _check_one_hot(impl, tokens: torch.Tensor, vocab_size: int):
    got = impl.call(one_hot, tokens, vocab_size)
    what = f"one_hot(tokens, {vocab_size}) for tokens of shape {list(tokens.shape)}"
    shape = (*tokens.shape, vocab_size)
    value = _result(
        got,
        what,
        shape=shape,
        dtype=None,
        shape_mistakes=[
            ((vocab_size, *tokens.shape), "the vocabulary axis comes last: [..., vocab_size]"),
            (
                (tokens.numel(), vocab_size),
                "keep the leading shape of tokens: [..., vocab_size], not flattened",
            ),
        ],
    )
    expect.that(
        value.dtype == torch.float32,
        f"{what} has dtype {value.dtype}, expected torch.float32: convert with .float(), so that "
        "the result can multiply a matrix of embeddings",
    )
    expected = F.one_hot(tokens, vocab_size).float()
    expect.close(
        value,
        expected,
        what,
        **EXACT,
        alternatives=[
            (
                F.one_hot((tokens - 1).clamp(min=0), vocab_size).float() * (tokens > 0)[..., None],
                "the ones are one place too far left: token ids start at 0, so compare with torch.arange(vocab_size)",
            ),
        ],
    )


@ONE_HOT.visible
def test_one_hot_small(impl):
    "tokens [2, 0, 3] with a vocabulary of 5 give the float32 rows e_2, e_0, e_3"
    _check_one_hot(impl, torch.tensor([2, 0, 3]), 5)


@ONE_HOT.hidden
def test_one_hot_shapes(impl):
    "a [batch, seq] grid of tokens, a single token (a 0-d tensor), a vocabulary of 1"
    _check_one_hot(impl, torch.randint(0, 7, (2, 4), generator=_gen(1)), 7)
    _check_one_hot(impl, torch.tensor(3), 4)
    _check_one_hot(impl, torch.zeros(5, dtype=torch.int64), 1)


# ---------------------------------------------------------------------------------------------------------------
# Adapters: the only code in this module that touches the student's objects. They run beside the student's code
# (in the sandboxed worker while grading, in the kernel for the notebook's own test cells), build and call the
# student's classes and functions on the inputs a check gives, and return plain results; they compute and report,
# never judge. A check calls one by reference, ``impl.call(name, ...)``; only functions marked ``@adapter`` can be.
#
# Adapters for notebook 00: the warm-up functions on tensors.


def _strided(t: torch.Tensor) -> torch.Tensor:
    """The same values in column-major layout: not contiguous, as after a transpose or a slice."""
    return t.mT.contiguous().mT


def _layout(t) -> dict | None:
    """What an in-place method changes in a tensor besides its values: shape, strides, version counter.

    ``_version`` goes up with every in-place operation (``sub_``, ``unsqueeze_``), even one undone later.
    """
    if not isinstance(t, torch.Tensor):
        return None
    return {"shape": list(t.shape), "stride": list(t.stride()), "version": t._version}


@adapter
def call(ns, name: str, args: list, strided: list[int] = (), same: bool = False):
    """What ``name(*args)`` returns, and the arguments afterwards (a check looks for in-place edits).

    The arguments at the positions in ``strided`` are passed non-contiguous. With ``same``, the first argument
    is passed twice (``name(x, x)``): one tensor as both inputs, as a caller may.
    """
    args = [_strided(a) if i in strided else a for i, a in enumerate(args)]
    if same:
        args = [args[0], args[0]]
    before = [_layout(a) for a in args]
    value = need(ns, name)(*args)
    return {"value": value, "args_after": args, "layout_before": before, "layout_after": [_layout(a) for a in args]}


@adapter
def one_hot(ns, tokens, vocab_size: int):
    """``one_hot(tokens, vocab_size)`` (the exercise's rule switches ``F.one_hot`` off: ``autograder.rules``)."""
    return {"value": need(ns, "one_hot")(tokens, vocab_size)}


@adapter
def lines(ns, name: str, args: list) -> int:
    """The work ``name(*args)`` does: lines of the student's code, torch calls (``lines_run``)."""
    return lines_run(need(ns, name), *args)["work"]
