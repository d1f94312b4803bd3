"""Mistakes students make in notebook 03.

Each wrong version is the solution's answer cell with one mistake written in (``variant`` checks that the
replaced text is there), so the wrong versions differ from a right one only by the mistake. The two written out
in full are other algorithms, no edit of the solution.
"""

from wrong import Wrong, catalogue

NOTEBOOK = "03_rope"
RIGHT, variant = catalogue(NOTEBOOK)

_EVEN_CHECK = (
    "    if d_k % 2 != 0:\n"
    '        raise ValueError(f"RoPE rotates pairs of coordinates, so d_k must be even; got d_k={d_k}")\n'
)
_THETA = "float(base) ** (-torch.arange(0, d_k, 2, dtype=torch.float64) / d_k)"
_BLOCK_DIAG = "return torch.block_diag(*blocks).float()"
_WIDTH_CHECK = (
    "        if x.shape[-1] != self.d_k:\n"
    '            raise ValueError(f"expected the last axis of x to have size d_k={self.d_k}, got shape {tuple(x.shape)}")\n'
)
_RANGE_CHECK = (
    "        # Reading the positions' values stops torch.compile's graph (and waits for a GPU): not while compiling.\n"
    "        if (not torch.compiler.is_compiling() and token_positions.numel() > 0\n"
    "                and (token_positions.min() < 0 or token_positions.max() >= self.max_seq_len)):\n"
    "            raise IndexError(\n"
    '                f"token positions must lie in [0, max_seq_len) = [0, {self.max_seq_len}), "\n'
    '                f"got values from {token_positions.min().item()} to {token_positions.max().item()}"\n'
    "            )\n"
)
_RANGE_MESSAGE = (
    'f"token positions must lie in [0, max_seq_len) = [0, {self.max_seq_len}), "\n'
    '                f"got values from {token_positions.min().item()} to {token_positions.max().item()}"'
)
_COS_SIN = "        cos = self.cos[token_positions]  # [..., seq, d_k/2]\n        sin = self.sin[token_positions]\n"
_ROTATED = "torch.stack((out_even, out_odd), dim=-1).flatten(-2).to(x.dtype)"
_HALVES = "torch.cat([torch.arange(0, d_k, 2), torch.arange(1, d_k, 2)])"
_SLOPES = "-alibi_slopes(n_heads)[:, None, None] * distance"
_DISTANCE = "(query_positions - key_positions).abs()"

WRONG = [
    # The rule "do not build [d_k, d_k] matrices in forward": right values, built the slow way.
    Wrong(
        "rope",
        "builds a rotation matrix per position",
        variant(
            "rope",
            (
                "        x_even = x[..., 0::2]",
                "        R = torch.zeros(*cos.shape[:-1], self.d_k, self.d_k)\n"
                "        i = torch.arange(self.d_k // 2)\n"
                "        R[..., 2 * i, 2 * i], R[..., 2 * i, 2 * i + 1] = cos, -sin\n"
                "        R[..., 2 * i + 1, 2 * i], R[..., 2 * i + 1, 2 * i + 1] = sin, cos\n"
                "        x_even = x[..., 0::2]",
            ),
            ("return " + _ROTATED, "return torch.einsum('...ij,...j->...i', R, x.float()).to(x.dtype)"),
        ),
        "this exercise's rule is: do not build [d_k, d_k] matrices in forward",
    ),
    Wrong(
        "rotation_matrix",
        "minus sign on the wrong sin",
        variant(
            "rotation_matrix",
            ("torch.stack([cos, -sin]", "torch.stack([cos, sin]"),
            ("torch.stack([sin, cos]", "torch.stack([-sin, cos]"),
        ),
        "transposed",
    ),
    Wrong(
        "rotation_matrix",
        "no minus sign at all",
        variant("rotation_matrix", ("torch.stack([cos, -sin]", "torch.stack([cos, sin]")),
        "rotation_matrix(angles)",
    ),
    Wrong(
        "rotation_matrix",
        "only works for a scalar angle",
        variant(
            "rotation_matrix",
            (
                "    first_row = torch.stack([cos, -sin], dim=-1)\n"
                "    second_row = torch.stack([sin, cos], dim=-1)\n"
                "    return torch.stack([first_row, second_row], dim=-2)",
                "    return torch.tensor([[float(cos), -float(sin)], [float(sin), float(cos)]])",
            ),
        ),
        "rotation_matrix",
    ),
    Wrong(
        "rope_frequencies",
        "exponent i/d",
        variant("rope_frequencies", ("torch.arange(0, d_k, 2,", "torch.arange(0, d_k // 2,")),
        "not i/d_k",
    ),
    Wrong(
        "rope_frequencies",
        "positive exponent",
        variant("rope_frequencies", ("** -exponents", "** exponents")),
        "sign of the exponent",
    ),
    Wrong(
        "rope_frequencies",
        "starts at i = 1",
        variant("rope_frequencies", ("torch.arange(0, d_k, 2,", "torch.arange(2, d_k + 2, 2,")),
        "i starts at 0",
    ),
    Wrong(
        "rope_frequencies",
        "no error for odd d_k",
        variant("rope_frequencies", (_EVEN_CHECK, "")),
        "raise ValueError",
    ),
    Wrong(
        "rope_matrix",
        "blocks transposed (sin sign)",
        # The blocks written out, not rotation_matrix(...).mT: a student whose rotation_matrix is itself transposed
        # (its first mistake) would otherwise get right blocks, and tests/test_nbgrader_e2e.py's "wrong" student has both.
        variant(
            "rope_matrix",
            (
                "blocks = rotation_matrix(position * theta)",
                "cos, sin = torch.cos(position * theta), torch.sin(position * theta)\n"
                "    blocks = torch.stack([torch.stack([cos, sin], -1), torch.stack([-sin, cos], -1)], -2)",
            ),
        ),
        "blocks are transposed",
    ),
    Wrong(
        "rope_matrix",
        "pairs (i, i + d/2)",
        variant(
            "rope_matrix",
            (
                _BLOCK_DIAG,
                "pairs = torch.cat([torch.arange(0, d_k, 2), torch.arange(1, d_k, 2)])  # i sits at 2i, i + d_k/2 at 2i+1\n"
                "    return torch.block_diag(*blocks)[pairs][:, pairs].float()",
            ),
        ),
        "pairs i with i + d_k/2",
    ),
    Wrong(
        "rope_matrix",
        "ignores the base",
        variant("rope_matrix", ("float(base) ** (", "10000.0 ** (")),
        "base=100.0",
    ),
    Wrong(
        "rope",
        "rotates (i, i + d/2) pairs while claiming interleaved",
        variant(
            "rope",
            ("x[..., 0::2].float()", "x[..., : self.d_k // 2].float()"),
            ("x[..., 1::2].float()", "x[..., self.d_k // 2 :].float()"),
            ("torch.stack((out_even, out_odd), dim=-1).flatten(-2)", "torch.cat((out_even, out_odd), dim=-1)"),
        ),
        "split halves",
    ),
    Wrong(
        "rope",
        "sin terms with the wrong signs (turns the other way)",
        variant(
            "rope",
            ("x_even * cos - x_odd * sin", "x_even * cos + x_odd * sin"),
            ("x_even * sin + x_odd * cos", "-x_even * sin + x_odd * cos"),
        ),
        "wrong sign",
    ),
    Wrong(
        "rope",
        "frequencies base^(-i/d)",
        variant("rope", ("dtype=torch.float64) / d_k)", "dtype=torch.float64) / (2 * d_k))")),
        "not base^(-i/d_k)",
    ),
    Wrong(
        "rope",
        "ignores the positions",
        variant("rope", (_COS_SIN, "        token_positions = torch.arange(x.shape[-2])\n" + _COS_SIN)),
        "ignores token_positions",
    ),
    Wrong(
        "rope",
        "cos/sin recomputed per call in float64",
        variant(
            "rope",
            (
                _COS_SIN,
                "        theta = 10000.0 ** (-torch.arange(0, self.d_k, 2, dtype=torch.float64) / self.d_k)\n"
                "        angles = token_positions[..., None].double() * theta\n"
                "        cos, sin = angles.cos(), angles.sin()\n",
            ),
            (".flatten(-2).to(x.dtype)", ".flatten(-2)"),
        ),
        "dtype torch.float64",
    ),
    Wrong(
        "rope",
        "persistent buffers",
        variant("rope", ("persistent=False", "persistent=True"), ("persistent=False", "persistent=True")),
        "persistent=False",
    ),
    Wrong("rope", "no range check: -1 wraps around", variant("rope", (_RANGE_CHECK, "")), "raise IndexError"),
    Wrong(
        "halves_permutation",
        "the inverse permutation",
        variant("halves_permutation", (_HALVES, f"torch.argsort({_HALVES})")),
        "inverse permutation",
    ),
    Wrong(
        "halves_permutation",
        "odd coordinates first",
        variant("halves_permutation", (_HALVES, "torch.cat([torch.arange(1, d_k, 2), torch.arange(0, d_k, 2)])")),
        "expected [0, 2, 4, 6, 1, 3, 5, 7]",
    ),
    Wrong(
        "halves_permutation",
        "returns int32 indices",
        variant("halves_permutation", (_HALVES, _HALVES + ".int()")),
        "(torch.int64)",
    ),
    Wrong(
        "rope_matrix",
        "returns float64",
        variant("rope_matrix", (_BLOCK_DIAG, "return torch.block_diag(*blocks)")),
        "expected torch.float32",
    ),
    Wrong(
        "rope",
        "angles computed in float32",
        variant(
            "rope",
            ("torch.arange(0, d_k, 2, dtype=torch.float64)", "torch.arange(0, d_k, 2, dtype=torch.float32)"),
            ("torch.arange(max_seq_len, dtype=torch.float64)", "torch.arange(max_seq_len, dtype=torch.float32)"),
        ),
        "Compute theta_i and the angles m * theta_i in float64",
    ),
    Wrong(
        "rope",
        "float64 angles from rope_frequencies' float32 theta",
        variant("rope", (_THETA, f"({_THETA}).float().double()")),
        "Compute theta_i and the angles m * theta_i in float64",
    ),
    Wrong(
        "rope",
        "computes in x's dtype (bfloat16 arithmetic)",
        variant(
            "rope",
            ("x[..., 0::2].float()", "x[..., 0::2]"),
            ("x[..., 1::2].float()", "x[..., 1::2]"),
            ("        out_even =", "        cos, sin = cos.to(x.dtype), sin.to(x.dtype)\n        out_even ="),
        ),
        "it was computed in bfloat16",
    ),
    Wrong(
        "rope",
        "writes the result into the caller's x",
        variant("rope", ("return " + _ROTATED, f"return x.copy_({_ROTATED})")),
        "changed the x it was given",
    ),
    Wrong(
        "rope",
        "IndexError message without max_seq_len",
        variant("rope", (_RANGE_MESSAGE, '"position out of range"')),
        "must name max_seq_len",
    ),
    Wrong(
        "rope",
        "no ValueError when x.shape[-1] != d_k",
        variant("rope", (_WIDTH_CHECK, "")),
        "if x.shape[-1] != d_k, raise ValueError",
    ),
    Wrong(
        "rope",
        "ValueError for an out-of-range position",
        variant("rope", ("raise IndexError(", "raise ValueError(")),
        "raised ValueError; raise IndexError",
    ),
    Wrong(
        "rope",
        "off-by-one bound (> max_seq_len): torch's own IndexError fires",
        variant("rope", ("token_positions.max() >= self.max_seq_len)", "token_positions.max() > self.max_seq_len)")),
        "the test is position >= max_seq_len",
    ),
    Wrong(
        "halves_permutation",
        "returns floats",
        variant("halves_permutation", (_HALVES, _HALVES + ".float()")),
        "LongTensor",
    ),
    Wrong(
        "alibi_slopes",
        "reversed (smallest slope first)",
        variant("alibi_slopes", ("torch.tensor(slopes,", "torch.tensor(slopes[::-1],")),
        "reversed",
    ),
    Wrong(
        "alibi_slopes", "h starts at 0", variant("alibi_slopes", ("range(1, m + 1)", "range(0, m)")), "h starts at 1"
    ),
    Wrong(
        "alibi_slopes",
        "ratio 2^(-1/n) instead of 2^(-8/n)",
        variant(
            "alibi_slopes", ("2.0 ** (-8.0 * h / m)", "2.0 ** (-h / m)"), ("(-8.0 * h / (2 * m))", "(-h / (2 * m))")
        ),
        "not 2^(-1/n)",
    ),
    Wrong(
        "alibi_slopes",
        "positive exponent",
        variant(
            "alibi_slopes",
            ("2.0 ** (-8.0 * h / m)", "2.0 ** (8.0 * h / m)"),
            ("(-8.0 * h / (2 * m))", "(8.0 * h / (2 * m))"),
        ),
        "exponent is negative",
    ),
    # Full code: the closed form 2^(-8h/n) for every n is another algorithm, not the solution's two lists.
    Wrong(
        "alibi_slopes",
        "2^(-8h/n) for every n, ignoring the rule for non-powers of two",
        "def alibi_slopes(n_heads):\n    h = torch.arange(1, n_heads + 1, dtype=torch.float64)\n"
        "    return (2.0 ** (-8.0 * h / n_heads)).float()\n",
        "is not a power of two",
    ),
    Wrong(
        "alibi_slopes",
        "all slopes sorted together",
        variant("alibi_slopes", ("torch.tensor(slopes,", "torch.tensor(sorted(slopes, reverse=True),")),
        "not sorted together",
    ),
    Wrong(
        "alibi_slopes",
        "returns float64",
        variant("alibi_slopes", ("dtype=torch.float32", "dtype=torch.float64")),
        "expected torch.float32",
    ),
    Wrong(
        "alibi_bias",
        "sign flipped (a reward for distance)",
        variant("alibi_bias", ("return -alibi_slopes", "return alibi_slopes")),
        "never positive",
    ),
    Wrong(
        "alibi_bias",
        "j - i instead of i - j",
        variant("alibi_bias", (_DISTANCE, "(key_positions - query_positions)")),
        "the distance is i - j",
    ),
    Wrong(
        "alibi_bias",
        "keys after the query get a positive bias (no absolute value)",
        variant("alibi_bias", (_DISTANCE, "(query_positions - key_positions)")),
        "keys after the query",
    ),
    Wrong(
        "alibi_bias",
        "one slope for every head",
        variant("alibi_bias", (_SLOPES, "-alibi_slopes(n_heads)[0] * distance.expand(n_heads, -1, -1)")),
        "same bias",
    ),
    Wrong(
        "alibi_bias",
        "slopes not broadcast over the heads axis (heads last)",
        variant("alibi_bias", (_SLOPES, "-alibi_slopes(n_heads) * distance[..., None]")),
        "expected [4, 6, 6]",
    ),
    Wrong(
        "alibi_bias",
        "heads in reverse order",
        variant("alibi_bias", ("alibi_slopes(n_heads)[:, None, None]", "alibi_slopes(n_heads).flip(0)[:, None, None]")),
        "reverse order",
    ),
    Wrong(
        "alibi_bias",
        "queries at positions 0 .. q_len - 1",
        variant("alibi_bias", ("torch.arange(k_len - q_len, k_len)", "torch.arange(q_len)")),
        "the last q_len positions",
    ),
    # From a blind round: one table for 512 positions, sliced; right for every short call, not for a long cache.
    # Full code: a fixed table, sliced, is another algorithm.
    Wrong(
        "alibi_bias",
        "a fixed table of 512 positions, sliced",
        "def alibi_bias(n_heads, q_len, k_len):\n"
        "    positions = torch.arange(512)\n"
        "    table = -alibi_slopes(n_heads)[:, None, None] * (positions[:, None] - positions[None, :]).abs().float()\n"
        "    return table[:, k_len - q_len:k_len, :k_len]\n",
        "expected [3, 2, 1500]",
    ),
]
