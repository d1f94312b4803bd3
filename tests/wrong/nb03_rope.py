"""Wrong versions of notebook 03's answers (03_rope): see ``wrong/__init__.py``."""

from autograder.notebooks.nb03_rope import ALIBI, FREQUENCIES, HALVES, MATRIX, ROPE, ROTATION, SLOPES
from wrong import WrongVersion, edit

# rotation_matrix -----------------------------------------------------------------------------------------------

# rope_frequencies ----------------------------------------------------------------------------------------------
_EXPONENTS = "exponents = torch.arange(0, d_k, 2, dtype=torch.float64) / d_k"

# rope_matrix ---------------------------------------------------------------------------------------------------

# rope ----------------------------------------------------------------------------------------------------------
_RETURN_TORCH_STACK = "return torch.stack((out_even, out_odd), dim=-1).flatten(-2).to(x.dtype)"
_X_EVEN = """\
        x_even = x[..., 0::2].float()    # first coordinate of every pair
        x_odd = x[..., 1::2].float()     # second coordinate of every pair
"""
_THETA = "theta = float(base) ** (-torch.arange(0, d_k, 2, dtype=torch.float64) / d_k)  # [d_k/2]"
_COS = """\
        cos = self.cos[token_positions]  # [..., seq, d_k/2]
        sin = self.sin[token_positions]
"""
_NEW_X = ""

# halves_permutation --------------------------------------------------------------------------------------------
_RETURN_TORCH_CAT = "return torch.cat([torch.arange(0, d_k, 2), torch.arange(1, d_k, 2)])"

# alibi_slopes --------------------------------------------------------------------------------------------------
_RETURN_TORCH_TENSOR = "return torch.tensor(slopes, dtype=torch.float32)"
_SLOPES = """\
    slopes = [2.0 ** (-8.0 * h / m) for h in range(1, m + 1)]
    slopes += [2.0 ** (-8.0 * h / (2 * m)) for h in range(1, 2 * m + 1, 2)][: n_heads - m]
"""

# alibi_bias ----------------------------------------------------------------------------------------------------
_RETURN_ALIBI_SLOPES_N_HEADS = (
    "return -alibi_slopes(n_heads)[:, None, None] * distance             # [n_heads, q_len, k_len]"
)
_DISTANCE = "distance = (query_positions - key_positions).abs().float()          # [q_len, k_len]"

WRONG_VERSIONS = (
    # rotation_matrix
    WrongVersion(
        ROTATION,
        "minus sign on the wrong sin",
        "transposed",
        edit(
            """\
    first_row = torch.stack([cos, -sin], dim=-1)
    second_row = torch.stack([sin, cos], dim=-1)
""",
            """\
    first_row = torch.stack([cos, sin], dim=-1)
    second_row = torch.stack([-sin, cos], dim=-1)
""",
        ),
    ),
    WrongVersion(
        ROTATION,
        "no minus sign at all",
        "rotation_matrix(angles)",
        edit("first_row = torch.stack([cos, -sin], dim=-1)", "first_row = torch.stack([cos, sin], dim=-1)"),
    ),
    WrongVersion(
        ROTATION,
        "only works for a scalar angle",
        "rotation_matrix",
        edit(
            """\
    first_row = torch.stack([cos, -sin], dim=-1)
    second_row = torch.stack([sin, cos], dim=-1)
    return torch.stack([first_row, second_row], dim=-2)
""",
            "    return torch.tensor([[float(cos), -float(sin)], [float(sin), float(cos)]])\n",
        ),
    ),
    # rope_frequencies
    WrongVersion(
        FREQUENCIES,
        "exponent i/d",
        "not i/d_k",
        edit(_EXPONENTS, "exponents = torch.arange(0, d_k // 2, dtype=torch.float64) / d_k"),
    ),
    WrongVersion(
        FREQUENCIES,
        "positive exponent",
        "sign of the exponent",
        edit("return (float(base) ** -exponents).float()", "return (float(base) ** exponents).float()"),
    ),
    WrongVersion(
        FREQUENCIES,
        "starts at i = 1",
        "i starts at 0",
        edit(_EXPONENTS, "exponents = torch.arange(2, d_k + 2, 2, dtype=torch.float64) / d_k"),
    ),
    WrongVersion(
        FREQUENCIES,
        "no error for odd d_k",
        "raise ValueError",
        edit(
            """\
    if d_k % 2 != 0:
        raise ValueError(f"RoPE rotates pairs of coordinates, so d_k must be even; got d_k={d_k}")
""",
            "",
        ),
    ),
    # rope_matrix
    # The blocks written out, not rotation_matrix(...).mT: a student whose rotation_matrix is itself transposed
    # (its first mistake) would otherwise get right blocks, and tests/test_nbgrader_e2e.py's "wrong" student has both.
    WrongVersion(
        MATRIX,
        "blocks transposed (sin sign)",
        "blocks are transposed",
        edit(
            "    blocks = rotation_matrix(position * theta)                                    # [d_k/2, 2, 2]\n",
            """\
    cos, sin = torch.cos(position * theta), torch.sin(position * theta)
    blocks = torch.stack([torch.stack([cos, sin], -1), torch.stack([-sin, cos], -1)], -2)                                    # [d_k/2, 2, 2]
""",
        ),
    ),
    WrongVersion(
        MATRIX,
        "pairs (i, i + d/2)",
        "pairs i with i + d_k/2",
        edit(
            "    return torch.block_diag(*blocks).float()\n",
            """\
    pairs = torch.cat([torch.arange(0, d_k, 2), torch.arange(1, d_k, 2)])  # i sits at 2i, i + d_k/2 at 2i+1
    return torch.block_diag(*blocks)[pairs][:, pairs].float()
""",
        ),
    ),
    WrongVersion(
        MATRIX,
        "ignores the base",
        "base=100.0",
        edit(
            "theta = float(base) ** (-torch.arange(0, d_k, 2, dtype=torch.float64) / d_k)  # float64 angles",
            "theta = 10000.0 ** (-torch.arange(0, d_k, 2, dtype=torch.float64) / d_k)  # float64 angles",
        ),
    ),
    WrongVersion(
        MATRIX,
        "returns float64",
        "expected torch.float32",
        edit("return torch.block_diag(*blocks).float()", "return torch.block_diag(*blocks)"),
    ),
    # rope
    # The rule "do not build [d_k, d_k] matrices in forward": right values, built the slow way.
    WrongVersion(
        ROPE,
        "builds a rotation matrix per position",
        "this exercise's rule is: do not build [d_k, d_k] matrices in forward",
        edit(
            "        sin = self.sin[token_positions]\n",
            """\
        sin = self.sin[token_positions]
        R = torch.zeros(*cos.shape[:-1], self.d_k, self.d_k)
        i = torch.arange(self.d_k // 2)
        R[..., 2 * i, 2 * i], R[..., 2 * i, 2 * i + 1] = cos, -sin
        R[..., 2 * i + 1, 2 * i], R[..., 2 * i + 1, 2 * i + 1] = sin, cos
""",
        ),
        edit(_RETURN_TORCH_STACK, "return torch.einsum('...ij,...j->...i', R, x.float()).to(x.dtype)"),
    ),
    # Blind round: the same matrices, one column wider ([..., d_k, d_k + 1], x padded with a zero), which the
    # exact shape [d_k, d_k] missed; the rule is checked by size too.
    WrongVersion(
        ROPE,
        "builds [d_k, d_k + 1] rotation matrices and pads x with a zero column",
        "a rotation matrix's worth of numbers (d_k * d_k",
        edit(
            "        sin = self.sin[token_positions]\n",
            """\
        sin = self.sin[token_positions]
        R = torch.zeros(*cos.shape[:-1], self.d_k, self.d_k + 1)
        i = torch.arange(self.d_k // 2)
        R[..., 2 * i, 2 * i], R[..., 2 * i, 2 * i + 1] = cos, -sin
        R[..., 2 * i + 1, 2 * i], R[..., 2 * i + 1, 2 * i + 1] = sin, cos
""",
        ),
        edit(_RETURN_TORCH_STACK, "return (R @ F.pad(x.float(), (0, 1))[..., None])[..., 0].to(x.dtype)"),
    ),
    WrongVersion(
        ROPE,
        "computes from x.detach(): no gradient reaches x",
        "no gradient reaches x: is it computed from x.detach(), .data or under torch.no_grad()?",
        edit(
            _X_EVEN,
            """\
        xf = x.detach().float()
        x_even = xf[..., 0::2]    # first coordinate of every pair
        x_odd = xf[..., 1::2]     # second coordinate of every pair
""",
        ),
    ),
    WrongVersion(
        ROPE,
        "rotates (i, i + d/2) pairs while claiming interleaved",
        "split halves",
        edit(
            _X_EVEN,
            """\
        x_even = x[..., : self.d_k // 2].float()    # first coordinate of every pair
        x_odd = x[..., self.d_k // 2 :].float()     # second coordinate of every pair
""",
        ),
        edit(_RETURN_TORCH_STACK, "return torch.cat((out_even, out_odd), dim=-1).to(x.dtype)"),
    ),
    WrongVersion(
        ROPE,
        "sin terms with the wrong signs (turns the other way)",
        "wrong sign",
        edit(
            """\
        out_even = x_even * cos - x_odd * sin
        out_odd = x_even * sin + x_odd * cos
""",
            """\
        out_even = x_even * cos + x_odd * sin
        out_odd = -x_even * sin + x_odd * cos
""",
        ),
    ),
    WrongVersion(
        ROPE,
        "frequencies base^(-i/d)",
        "not base^(-i/d_k)",
        edit(_THETA, "theta = float(base) ** (-torch.arange(0, d_k, 2, dtype=torch.float64) / (2 * d_k))  # [d_k/2]"),
    ),
    WrongVersion(
        ROPE,
        "ignores the positions",
        "ignores token_positions",
        edit(
            "            )\n",
            """\
            )
        token_positions = torch.arange(x.shape[-2])
""",
        ),
    ),
    WrongVersion(
        ROPE,
        "cos/sin recomputed per call in float64",
        "dtype torch.float64",
        edit(
            _COS,
            """\
        theta = 10000.0 ** (-torch.arange(0, self.d_k, 2, dtype=torch.float64) / self.d_k)
        angles = token_positions[..., None].double() * theta
        cos, sin = angles.cos(), angles.sin()
""",
        ),
        edit(_RETURN_TORCH_STACK, "return torch.stack((out_even, out_odd), dim=-1).flatten(-2)"),
    ),
    WrongVersion(
        ROPE,
        "persistent buffers",
        "persistent=False",
        edit(
            """\
        self.register_buffer("cos", torch.cos(angles).float(), persistent=False)
        self.register_buffer("sin", torch.sin(angles).float(), persistent=False)
""",
            """\
        self.register_buffer("cos", torch.cos(angles).float(), persistent=True)
        self.register_buffer("sin", torch.sin(angles).float(), persistent=True)
""",
        ),
    ),
    WrongVersion(
        ROPE,
        "no range check: -1 wraps around",
        "raise IndexError",
        edit(
            """\
        # Reading the positions' values stops torch.compile's graph (and waits for a GPU): not while compiling.
        if (not torch.compiler.is_compiling() and token_positions.numel() > 0
                and (token_positions.min() < 0 or token_positions.max() >= self.max_seq_len)):
            raise IndexError(
                f"token positions must lie in [0, max_seq_len) = [0, {self.max_seq_len}), "
                f"got values from {token_positions.min().item()} to {token_positions.max().item()}"
            )
""",
            _NEW_X,
        ),
    ),
    WrongVersion(
        ROPE,
        "angles computed in float32",
        "Compute theta_i and the angles m * theta_i in float64",
        edit(
            """\
        theta = float(base) ** (-torch.arange(0, d_k, 2, dtype=torch.float64) / d_k)  # [d_k/2]
        angles = torch.arange(max_seq_len, dtype=torch.float64)[:, None] * theta      # [max_seq_len, d_k/2]
""",
            """\
        theta = float(base) ** (-torch.arange(0, d_k, 2, dtype=torch.float32) / d_k)  # [d_k/2]
        angles = torch.arange(max_seq_len, dtype=torch.float32)[:, None] * theta      # [max_seq_len, d_k/2]
""",
        ),
    ),
    WrongVersion(
        ROPE,
        "float64 angles from rope_frequencies' float32 theta",
        "Compute theta_i and the angles m * theta_i in float64",
        edit(
            _THETA,
            "theta = (float(base) ** (-torch.arange(0, d_k, 2, dtype=torch.float64) / d_k)).float().double()  # [d_k/2]",
        ),
    ),
    WrongVersion(
        ROPE,
        "computes in x's dtype (bfloat16 arithmetic)",
        "it was computed in bfloat16",
        edit(
            _X_EVEN,
            """\
        x_even = x[..., 0::2]    # first coordinate of every pair
        x_odd = x[..., 1::2]     # second coordinate of every pair
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
""",
        ),
    ),
    WrongVersion(
        ROPE,
        "writes the result into the caller's x",
        "changed the x it was given",
        edit(_RETURN_TORCH_STACK, "return x.copy_(torch.stack((out_even, out_odd), dim=-1).flatten(-2).to(x.dtype))"),
    ),
    WrongVersion(
        ROPE,
        "IndexError message without max_seq_len",
        "must name max_seq_len",
        edit(
            """\
                f"token positions must lie in [0, max_seq_len) = [0, {self.max_seq_len}), "
                f"got values from {token_positions.min().item()} to {token_positions.max().item()}"
""",
            '                "position out of range"\n',
        ),
    ),
    WrongVersion(
        ROPE,
        "no ValueError when x.shape[-1] != d_k",
        "if x.shape[-1] != d_k, raise ValueError",
        edit(
            """\
        if x.shape[-1] != self.d_k:
            raise ValueError(f"expected the last axis of x to have size d_k={self.d_k}, got shape {tuple(x.shape)}")
""",
            _NEW_X,
        ),
    ),
    WrongVersion(
        ROPE,
        "ValueError for an out-of-range position",
        "raised ValueError; raise IndexError",
        edit("raise IndexError(", "raise ValueError("),
    ),
    WrongVersion(
        ROPE,
        "off-by-one bound (> max_seq_len): torch's own IndexError fires",
        "the test is position >= max_seq_len",
        edit(
            "and (token_positions.min() < 0 or token_positions.max() >= self.max_seq_len)):",
            "and (token_positions.min() < 0 or token_positions.max() > self.max_seq_len)):",
        ),
    ),
    WrongVersion(
        ROPE,
        "base ignored: 10000 hard-coded",
        "it ignores the base argument",
        edit(_THETA, "theta = 10000.0 ** (-torch.arange(0, d_k, 2, dtype=torch.float64) / d_k)  # [d_k/2]"),
    ),
    WrongVersion(
        ROPE,
        "tables capped at 4096 rows",
        "one row per position up to max_seq_len",
        edit(
            "angles = torch.arange(max_seq_len, dtype=torch.float64)[:, None] * theta      # [max_seq_len, d_k/2]",
            "angles = torch.arange(min(max_seq_len, 4096), dtype=torch.float64)[:, None] * theta",
        ),
    ),
    WrongVersion(
        ROPE,
        "forward reads copies of the tables kept as plain attributes (module.to(device) leaves them behind)",
        "forward does not read the buffers `cos` and `sin`",
        edit(
            '        self.register_buffer("sin", torch.sin(angles).float(), persistent=False)\n',
            """\
        self.register_buffer("sin", torch.sin(angles).float(), persistent=False)
        self.tables = (self.cos, self.sin)
""",
        ),
        edit(
            _COS,
            """\
        cos = self.tables[0][token_positions]
        sin = self.tables[1][token_positions]
""",
        ),
    ),
    # halves_permutation
    WrongVersion(
        HALVES,
        "the inverse permutation",
        "inverse permutation",
        edit(_RETURN_TORCH_CAT, "return torch.argsort(torch.cat([torch.arange(0, d_k, 2), torch.arange(1, d_k, 2)]))"),
    ),
    WrongVersion(
        HALVES,
        "odd coordinates first",
        "expected [0, 2, 4, 6, 1, 3, 5, 7]",
        edit(_RETURN_TORCH_CAT, "return torch.cat([torch.arange(1, d_k, 2), torch.arange(0, d_k, 2)])"),
    ),
    WrongVersion(
        HALVES,
        "returns int32 indices",
        "(torch.int64)",
        edit(_RETURN_TORCH_CAT, "return torch.cat([torch.arange(0, d_k, 2), torch.arange(1, d_k, 2)]).int()"),
    ),
    WrongVersion(
        HALVES,
        "returns floats",
        "LongTensor",
        edit(_RETURN_TORCH_CAT, "return torch.cat([torch.arange(0, d_k, 2), torch.arange(1, d_k, 2)]).float()"),
    ),
    # alibi_slopes
    WrongVersion(
        SLOPES,
        "reversed (smallest slope first)",
        "reversed",
        edit(_RETURN_TORCH_TENSOR, "return torch.tensor(slopes[::-1], dtype=torch.float32)"),
    ),
    WrongVersion(
        SLOPES,
        "h starts at 0",
        "h starts at 1",
        edit(
            "slopes = [2.0 ** (-8.0 * h / m) for h in range(1, m + 1)]",
            "slopes = [2.0 ** (-8.0 * h / m) for h in range(0, m)]",
        ),
    ),
    WrongVersion(
        SLOPES,
        "ratio 2^(-1/n) instead of 2^(-8/n)",
        "not 2^(-1/n)",
        edit(
            _SLOPES,
            """\
    slopes = [2.0 ** (-h / m) for h in range(1, m + 1)]
    slopes += [2.0 ** (-h / (2 * m)) for h in range(1, 2 * m + 1, 2)][: n_heads - m]
""",
        ),
    ),
    WrongVersion(
        SLOPES,
        "positive exponent",
        "exponent is negative",
        edit(
            _SLOPES,
            """\
    slopes = [2.0 ** (8.0 * h / m) for h in range(1, m + 1)]
    slopes += [2.0 ** (8.0 * h / (2 * m)) for h in range(1, 2 * m + 1, 2)][: n_heads - m]
""",
        ),
    ),
    # Full code: the closed form 2^(-8h/n) for every n is another algorithm, not the solution's two lists.
    WrongVersion(
        SLOPES,
        "2^(-8h/n) for every n, ignoring the rule for non-powers of two",
        "is not a power of two",
        code="""\
def alibi_slopes(n_heads):
    h = torch.arange(1, n_heads + 1, dtype=torch.float64)
    return (2.0 ** (-8.0 * h / n_heads)).float()
""",
    ),
    WrongVersion(
        SLOPES,
        "all slopes sorted together",
        "not sorted together",
        edit(_RETURN_TORCH_TENSOR, "return torch.tensor(sorted(slopes, reverse=True), dtype=torch.float32)"),
    ),
    WrongVersion(
        SLOPES,
        "returns float64",
        "expected torch.float32",
        edit(_RETURN_TORCH_TENSOR, "return torch.tensor(slopes, dtype=torch.float64)"),
    ),
    # alibi_bias
    WrongVersion(
        ALIBI,
        "sign flipped (a reward for distance)",
        "never positive",
        edit(
            _RETURN_ALIBI_SLOPES_N_HEADS,
            "return alibi_slopes(n_heads)[:, None, None] * distance             # [n_heads, q_len, k_len]",
        ),
    ),
    WrongVersion(
        ALIBI,
        "j - i instead of i - j",
        "the distance is i - j",
        edit(_DISTANCE, "distance = (key_positions - query_positions).float()          # [q_len, k_len]"),
    ),
    WrongVersion(
        ALIBI,
        "keys after the query get a positive bias (no absolute value)",
        "keys after the query",
        edit(_DISTANCE, "distance = (query_positions - key_positions).float()          # [q_len, k_len]"),
    ),
    WrongVersion(
        ALIBI,
        "one slope for every head",
        "same bias",
        edit(
            _RETURN_ALIBI_SLOPES_N_HEADS,
            "return -alibi_slopes(n_heads)[0] * distance.expand(n_heads, -1, -1)             # [n_heads, q_len, k_len]",
        ),
    ),
    WrongVersion(
        ALIBI,
        "slopes not broadcast over the heads axis (heads last)",
        "expected [4, 6, 6]",
        edit(
            _RETURN_ALIBI_SLOPES_N_HEADS,
            "return -alibi_slopes(n_heads) * distance[..., None]             # [n_heads, q_len, k_len]",
        ),
    ),
    WrongVersion(
        ALIBI,
        "heads in reverse order",
        "reverse order",
        edit(
            _RETURN_ALIBI_SLOPES_N_HEADS,
            "return -alibi_slopes(n_heads).flip(0)[:, None, None] * distance             # [n_heads, q_len, k_len]",
        ),
    ),
    WrongVersion(
        ALIBI,
        "queries at positions 0 .. q_len - 1",
        "the last q_len positions",
        edit(
            "query_positions = torch.arange(k_len - q_len, k_len)[:, None]      # [q_len, 1]",
            "query_positions = torch.arange(q_len)[:, None]      # [q_len, 1]",
        ),
    ),
    # From a blind round: one table for 512 positions, sliced; right for every short call, not for a long cache.
    # Full code: a fixed table, sliced, is another algorithm.
    WrongVersion(
        ALIBI,
        "a fixed table of 512 positions, sliced",
        "expected [3, 2, 1500]",
        code="""\
def alibi_bias(n_heads, q_len, k_len):
    positions = torch.arange(512)
    table = -alibi_slopes(n_heads)[:, None, None] * (positions[:, None] - positions[None, :]).abs().float()
    return table[:, k_len - q_len:k_len, :k_len]
""",
    ),
    # Full code: positions made once, when the cell runs, for 4096 tokens, and sliced.
    WrongVersion(
        ALIBI,
        "positions made once for 4096 tokens and sliced",
        "made once for a fixed length and sliced",
        code="""\
_POSITIONS = torch.arange(4096)


def alibi_bias(n_heads, q_len, k_len):
    query_positions = _POSITIONS[k_len - q_len : k_len][:, None]
    key_positions = _POSITIONS[:k_len][None, :]
    distance = (query_positions - key_positions).abs().float()
    return -alibi_slopes(n_heads)[:, None, None] * distance
""",
    ),
    WrongVersion(
        ALIBI,
        "BLOOM-style: slope * i and slope * j formed separately in float32, then |difference|",
        "were rounded in float32 separately",
        code="""\
def alibi_bias(n_heads, q_len, k_len):
    slopes = alibi_slopes(n_heads)[:, None, None]
    query_term = slopes * torch.arange(k_len - q_len, k_len, dtype=torch.float32)[None, :, None]
    key_term = slopes * torch.arange(k_len, dtype=torch.float32)[None, None, :]
    return -(query_term - key_term).abs()
""",
    ),
    WrongVersion(
        ALIBI,
        "distances made in torch.get_default_dtype(): float64 under a float64 default",
        "the bias is float32 whatever the default dtype",
        edit(_DISTANCE, "distance = (query_positions - key_positions).abs().to(torch.get_default_dtype())"),
    ),
)
