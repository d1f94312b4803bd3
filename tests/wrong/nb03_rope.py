"""Mistakes students make in notebook 03."""

from wrong import Wrong

ROTATION = """
def rotation_matrix(angle):
    c, s = torch.cos(angle), torch.sin(angle)
    return torch.stack([torch.stack([c, {top_right}], -1), torch.stack([{bottom_left}, c], -1)], -2)
"""


def rotation(top_right="-s", bottom_left="s"):
    return ROTATION.format(top_right=top_right, bottom_left=bottom_left)


FREQUENCIES = """
def rope_frequencies(d_k, base=10000.0):
    {guard}
    return base ** ({exponent})
"""
_FREQ_GUARD = "if d_k % 2: raise ValueError('d_k must be even')"


def frequencies(exponent="-torch.arange(0, d_k, 2, dtype=torch.float32) / d_k", guard=_FREQ_GUARD):
    return FREQUENCIES.format(exponent=exponent, guard=guard)


MATRIX = """
def rope_matrix(d_k, position, base=10000.0):
    theta = base ** (-torch.arange(0, d_k, 2, dtype=torch.float64) / d_k)
    out = torch.zeros(d_k, d_k)
    for i, t in enumerate(theta.tolist()):
        a = torch.tensor(position * t, dtype=torch.float64)
        c, s = float(torch.cos(a)), float(torch.sin(a))
        j, k = {pair}
        out[j, j], out[j, k], out[k, j], out[k, k] = c, {sign}s, {other}s, c
    return out
"""


def matrix(pair="2 * i, 2 * i + 1", sign="-", other=""):
    return MATRIX.format(pair=pair, sign=sign, other=other)


ROPE = """
class RoPE(nn.Module):
    def __init__(self, d_k, max_seq_len, base=10000.0):
        super().__init__()
        if d_k % 2:
            raise ValueError("d_k must be even")
        self.d_k, self.max_seq_len = d_k, max_seq_len
        theta = base ** (-torch.arange(0, d_k, 2, dtype={angles}) / {denominator})
        angles = torch.arange(max_seq_len, dtype={angles})[:, None] * theta
        self.register_buffer("cos", torch.cos(angles).float(), persistent={persistent})
        self.register_buffer("sin", torch.sin(angles).float(), persistent={persistent})

    def forward(self, x, token_positions):
        {width}
        {guard}
        {positions}
        cos, sin = self.cos[token_positions], self.sin[token_positions]
        {pairs}
        out = torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], -1).flatten(-2)
        return {cast}
"""
_ROPE_GUARD = (
    "if token_positions.numel() and (token_positions.min() < 0 or token_positions.max() >= self.max_seq_len): "
    "raise IndexError(f'positions must lie in [0, max_seq_len={self.max_seq_len})')"
)
_ROPE_WIDTH = "if x.shape[-1] != self.d_k: raise ValueError('the last axis of x must be d_k')"


def rope(
    denominator="d_k",
    persistent="False",
    guard=_ROPE_GUARD,
    positions="",
    pairs="x0, x1 = x.float()[..., 0::2], x.float()[..., 1::2]",
    cast="out.to(x.dtype)",
    angles="torch.float64",
    width=_ROPE_WIDTH,
):
    return ROPE.format(
        denominator=denominator,
        persistent=persistent,
        guard=guard,
        positions=positions,
        pairs=pairs,
        cast=cast,
        angles=angles,
        width=width,
    )


HALVES = """
def halves_permutation(d_k):
    return {body}
"""


def halves(body="torch.cat([torch.arange(0, d_k, 2), torch.arange(1, d_k, 2)])"):
    return HALVES.format(body=body)


SLOPES = """
def alibi_slopes(n_heads):
    m = 2 ** math.floor(math.log2(n_heads))
    slopes = [2.0 ** (-8.0 * h / m) for h in range({first})]
    slopes += [2.0 ** (-8.0 * h / (2 * m)) for h in range(1, 2 * m + 1, 2)][: n_heads - m]
    return torch.tensor({order}, dtype=torch.float32)
"""


def slopes(first="1, m + 1", order="slopes"):
    return SLOPES.format(first=first, order=order)


def _slopes_body(body):
    return f"def alibi_slopes(n_heads):\n    h = torch.arange(1, n_heads + 1, dtype=torch.float64)\n    return ({body}).float()\n"


ALIBI = """
def alibi_bias(n_heads, q_len, k_len):
    i = torch.arange({queries})[:, None]
    j = torch.arange(k_len)[None, :]
    return {body}
"""


def alibi(queries="k_len - q_len, k_len", body="-alibi_slopes(n_heads)[:, None, None] * (i - j).abs().float()"):
    return ALIBI.format(queries=queries, body=body)


RIGHT = {
    "rotation_matrix": rotation(),
    "rope_frequencies": frequencies(),
    "rope_matrix": matrix(),
    "rope": rope(),
    "halves_permutation": halves(),
    "alibi_slopes": slopes(),
    "alibi_bias": alibi(),
}

_MATRICES = (
    "R = torch.zeros(*cos.shape[:-1], self.d_k, self.d_k)\n"
    "        i = torch.arange(self.d_k // 2)\n"
    "        R[..., 2 * i, 2 * i], R[..., 2 * i, 2 * i + 1] = cos, -sin\n"
    "        R[..., 2 * i + 1, 2 * i], R[..., 2 * i + 1, 2 * i + 1] = sin, cos\n"
    "        x0, x1 = x.float()[..., 0::2], x.float()[..., 1::2]"
)

WRONG = [
    # The rule "do not build [d_k, d_k] matrices in forward": right values, built the slow way.
    Wrong(
        "rope",
        "builds a rotation matrix per position",
        rope(pairs=_MATRICES, cast="torch.einsum('...ij,...j->...i', R, x.float()).to(x.dtype)"),
        "this exercise's rule is: do not build [d_k, d_k] matrices in forward",
    ),
    Wrong("rotation_matrix", "minus sign on the wrong sin", rotation(top_right="s", bottom_left="-s"), "transposed"),
    Wrong("rotation_matrix", "no minus sign at all", rotation(top_right="s"), "rotation_matrix(angles)"),
    Wrong(
        "rotation_matrix",
        "only works for a scalar angle",
        "def rotation_matrix(angle):\n    c, s = torch.cos(angle), torch.sin(angle)\n"
        "    return torch.tensor([[float(c), -float(s)], [float(s), float(c)]])",
        "rotation_matrix",
    ),
    Wrong(
        "rope_frequencies",
        "exponent i/d",
        frequencies(exponent="-torch.arange(0, d_k // 2, dtype=torch.float32) / d_k"),
        "not i/d_k",
    ),
    Wrong(
        "rope_frequencies",
        "positive exponent",
        frequencies(exponent="torch.arange(0, d_k, 2, dtype=torch.float32) / d_k"),
        "sign of the exponent",
    ),
    Wrong(
        "rope_frequencies",
        "starts at i = 1",
        frequencies(exponent="-torch.arange(2, d_k + 2, 2, dtype=torch.float32) / d_k"),
        "i starts at 0",
    ),
    Wrong("rope_frequencies", "no error for odd d_k", frequencies(guard="pass"), "raise ValueError"),
    Wrong("rope_matrix", "blocks transposed (sin sign)", matrix(sign="", other="-"), "blocks are transposed"),
    Wrong("rope_matrix", "pairs (i, i + d/2)", matrix(pair="i, i + d_k // 2"), "pairs i with i + d_k/2"),
    Wrong("rope_matrix", "ignores the base", matrix().replace("base ** (", "10000.0 ** ("), "base=100.0"),
    Wrong(
        "rope",
        "rotates (i, i + d/2) pairs while claiming interleaved",
        rope(
            pairs="x0, x1 = x.float()[..., : self.d_k // 2], x.float()[..., self.d_k // 2:]",
            cast="torch.cat([out[..., 0::2], out[..., 1::2]], -1).to(x.dtype)",
        ),
        "split halves",
    ),
    Wrong(
        "rope",
        "sin terms with the wrong signs (turns the other way)",
        rope().replace("x0 * cos - x1 * sin, x0 * sin + x1 * cos", "x0 * cos + x1 * sin, -x0 * sin + x1 * cos"),
        "wrong sign",
    ),
    Wrong("rope", "frequencies base^(-i/d)", rope(denominator="(2 * d_k)"), "not base^(-i/d_k)"),
    Wrong(
        "rope",
        "ignores the positions",
        rope(positions="token_positions = torch.arange(x.shape[-2])"),
        "ignores token_positions",
    ),
    Wrong(
        "rope",
        "cos/sin recomputed per call in float64",
        rope(
            pairs="theta = 10000.0 ** (-torch.arange(0, self.d_k, 2, dtype=torch.float64) / self.d_k); "
            "angles = token_positions[..., None].double() * theta; cos, sin = angles.cos(), angles.sin(); "
            "x0, x1 = x[..., 0::2], x[..., 1::2]",
            cast="out",
        ),
        "dtype torch.float64",
    ),
    Wrong("rope", "persistent buffers", rope(persistent="True"), "persistent=False"),
    Wrong("rope", "no range check: -1 wraps around", rope(guard="pass"), "raise IndexError"),
    Wrong(
        "halves_permutation",
        "the inverse permutation",
        halves(body="torch.argsort(torch.cat([torch.arange(0, d_k, 2), torch.arange(1, d_k, 2)]))"),
        "inverse permutation",
    ),
    Wrong(
        "halves_permutation",
        "odd coordinates first",
        halves(body="torch.cat([torch.arange(1, d_k, 2), torch.arange(0, d_k, 2)])"),
        "expected [0, 2, 4, 6, 1, 3, 5, 7]",
    ),
    Wrong(
        "halves_permutation",
        "returns int32 indices",
        halves(body="torch.cat([torch.arange(0, d_k, 2), torch.arange(1, d_k, 2)]).int()"),
        "(torch.int64)",
    ),
    Wrong(
        "rope_matrix",
        "returns float64",
        matrix().replace("return out", "return out.double()"),
        "expected torch.float32",
    ),
    Wrong(
        "rope",
        "angles computed in float32",
        rope(angles="torch.float32"),
        "Compute theta_i and the angles m * theta_i in float64",
    ),
    Wrong(
        "rope",
        "float64 angles from rope_frequencies' float32 theta",
        rope().replace("theta = base", "theta = (base").replace("/ d_k)\n", "/ d_k)).float().double()\n", 1),
        "Compute theta_i and the angles m * theta_i in float64",
    ),
    Wrong(
        "rope",
        "computes in x's dtype (bfloat16 arithmetic)",
        rope(pairs="x0, x1 = x[..., 0::2], x[..., 1::2]; cos, sin = cos.to(x.dtype), sin.to(x.dtype)"),
        "it was computed in bfloat16",
    ),
    Wrong(
        "rope",
        "writes the result into the caller's x",
        rope(cast="x.copy_(out.to(x.dtype))"),
        "changed the x it was given",
    ),
    Wrong(
        "rope",
        "IndexError message without max_seq_len",
        rope(
            guard=_ROPE_GUARD.replace(
                "f'positions must lie in [0, max_seq_len={self.max_seq_len})'", "'position out of range'"
            )
        ),
        "must name max_seq_len",
    ),
    Wrong(
        "rope", "no ValueError when x.shape[-1] != d_k", rope(width="pass"), "if x.shape[-1] != d_k, raise ValueError"
    ),
    Wrong(
        "rope",
        "ValueError for an out-of-range position",
        rope(guard=_ROPE_GUARD.replace("raise IndexError", "raise ValueError")),
        "raised ValueError; raise IndexError",
    ),
    Wrong(
        "rope",
        "off-by-one bound (> max_seq_len): torch's own IndexError fires",
        rope(guard=_ROPE_GUARD.replace(">= self.max_seq_len", "> self.max_seq_len")),
        "the test is position >= max_seq_len",
    ),
    Wrong(
        "halves_permutation",
        "returns floats",
        halves(body="torch.cat([torch.arange(0, d_k, 2), torch.arange(1, d_k, 2)]).float()"),
        "LongTensor",
    ),
    Wrong("alibi_slopes", "reversed (smallest slope first)", slopes(order="slopes[::-1]"), "reversed"),
    Wrong("alibi_slopes", "h starts at 0", slopes(first="0, m"), "h starts at 1"),
    Wrong("alibi_slopes", "ratio 2^(-1/n) instead of 2^(-8/n)", _slopes_body("2.0 ** (-h / n_heads)"), "not 2^(-1/n)"),
    Wrong("alibi_slopes", "positive exponent", _slopes_body("2.0 ** (8.0 * h / n_heads)"), "exponent is negative"),
    Wrong(
        "alibi_slopes",
        "2^(-8h/n) for every n, ignoring the rule for non-powers of two",
        _slopes_body("2.0 ** (-8.0 * h / n_heads)"),
        "is not a power of two",
    ),
    Wrong(
        "alibi_slopes",
        "all slopes sorted together",
        slopes(order="sorted(slopes, reverse=True)"),
        "not sorted together",
    ),
    Wrong(
        "alibi_slopes",
        "returns float64",
        _slopes_body("2.0 ** (-8.0 * h / n_heads)").replace(".float()", ""),
        "expected torch.float32",
    ),
    Wrong(
        "alibi_bias",
        "sign flipped (a reward for distance)",
        alibi(body="alibi_slopes(n_heads)[:, None, None] * (i - j).abs().float()"),
        "never positive",
    ),
    Wrong(
        "alibi_bias",
        "j - i instead of i - j",
        alibi(body="-alibi_slopes(n_heads)[:, None, None] * (j - i).float()"),
        "the distance is i - j",
    ),
    Wrong(
        "alibi_bias",
        "keys after the query get a positive bias (no absolute value)",
        alibi(body="-alibi_slopes(n_heads)[:, None, None] * (i - j).float()"),
        "keys after the query",
    ),
    Wrong(
        "alibi_bias",
        "one slope for every head",
        alibi(body="-alibi_slopes(n_heads)[0] * (i - j).abs().float().expand(n_heads, -1, -1)"),
        "same bias",
    ),
    Wrong(
        "alibi_bias",
        "slopes not broadcast over the heads axis (heads last)",
        alibi(body="-alibi_slopes(n_heads) * (i - j).abs().float()[..., None]"),
        "expected [4, 6, 6]",
    ),
    Wrong(
        "alibi_bias",
        "heads in reverse order",
        alibi(body="-alibi_slopes(n_heads).flip(0)[:, None, None] * (i - j).abs().float()"),
        "reverse order",
    ),
    Wrong("alibi_bias", "queries at positions 0 .. q_len - 1", alibi(queries="q_len"), "the last q_len positions"),
    # From a blind round: one table for 512 positions, sliced; right for every short call, not for a long cache.
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
