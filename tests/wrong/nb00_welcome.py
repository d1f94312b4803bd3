"""Wrong versions of notebook 00's answers (00_welcome): see ``wrong/__init__.py``."""

from autograder.notebooks.nb00_welcome import DISTANCES, DOTS, HEADS, ONE_HOT, RELATIVE
from wrong import WrongVersion, edit

_RULE = "this exercise's rule is: no Python loops"

# relative_positions --------------------------------------------------------------------------------------------
_RETURN_POSITIONS_NONE = "return positions[None, :] - positions[:, None]"
_POSITIONS = "positions = torch.arange(n)"

# pairwise_sq_distances -----------------------------------------------------------------------------------------
_RETURN_DIFFERENCES_DIFFERENCES = "return (differences * differences).sum(dim=-1)"
_DIFFERENCES = "differences = a[:, None, :] - b[None, :, :]  # [n, 1, d] - [1, m, d] -> [n, m, d]"
_DISTANCES_DIFFERENCES = "    differences = a[:, None, :] - b[None, :, :]  # [n, 1, d] - [1, m, d] -> [n, m, d]\n"

# head_dot_products ---------------------------------------------------------------------------------------------
_RETURN_TORCH_EINSUM = 'return torch.einsum("bhsd,bhtd->bhst", q, k)'

# split_merge_heads ---------------------------------------------------------------------------------------------
_RETURN_EINOPS_REARRANGE = 'return einops.rearrange(x, "b s (h d) -> b h s d", h=n_heads)'
_HEADS_RETURN_EINOPS_REARRANGE = 'return einops.rearrange(x, "b h s d -> b s (h d)")'
_HEADS_RETURN_EINOPS_REARRANGE_2 = '    return einops.rearrange(x, "b h s d -> b s (h d)")\n'
_NEW_RETURN_EINOPS_REARRANGE = 'return einops.rearrange(x, "b h s d -> b s (d h)")'

# one_hot -------------------------------------------------------------------------------------------------------
_RETURN_TOKENS_NONE = "return (tokens[..., None] == torch.arange(vocab_size)).float()"

WRONG_VERSIONS = (
    # relative_positions
    # Full code: a loop in place of the broadcast is another algorithm, no edit of the solution.
    WrongVersion(
        RELATIVE,
        "a nested comprehension",
        _RULE,
        code="""\
def relative_positions(n):
    return torch.tensor([[j - i for j in range(n)] for i in range(n)])
""",
    ),
    # Full code: a loop (the rule's dodge).
    WrongVersion(
        RELATIVE,
        "a for loop filling rows",
        _RULE,
        code="""\
def relative_positions(n):
    out = torch.empty(n, n, dtype=torch.int64)
    for i in range(n):
        out[i] = torch.arange(n) - i
    return out
""",
    ),
    WrongVersion(
        RELATIVE,
        "query minus key (transposed)",
        "it is transposed",
        edit(_RETURN_POSITIONS_NONE, "return positions[:, None] - positions[None, :]"),
    ),
    WrongVersion(
        RELATIVE,
        "float positions",
        "whole numbers",
        edit(_POSITIONS, "positions = torch.arange(n, dtype=torch.float32)"),
    ),
    WrongVersion(
        RELATIVE,
        "absolute distance",
        "lost the sign",
        edit(_RETURN_POSITIONS_NONE, "return (positions[None, :] - positions[:, None]).abs()"),
    ),
    WrongVersion(
        RELATIVE,
        "size hard-coded to the example's 5",
        "relative_positions(1) has shape [5, 5], expected [1, 1]",
        edit(_POSITIONS, "positions = torch.arange(5)"),
    ),
    # Full code: a table built once, when the cell runs, and sliced.
    WrongVersion(
        RELATIVE,
        "a table built once for 64 positions and sliced",
        "as a table built once for a fixed number of positions and sliced does",
        code="""\
_POSITIONS = torch.arange(64)
_TABLE = _POSITIONS[None, :] - _POSITIONS[:, None]


def relative_positions(n):
    return _TABLE[:n, :n]
""",
    ),
    # Full code: the same, with a bigger table (512 positions, more than the notebook ever shows).
    WrongVersion(
        RELATIVE,
        "a table built once for 512 positions and sliced",
        "it stops at 512 positions",
        code="""\
_TABLE = torch.arange(512)[None, :] - torch.arange(512)[:, None]


def relative_positions(n):
    return _TABLE[:n, :n].clone()
""",
    ),
    # pairwise_sq_distances
    # Full code: a loop (the rule's dodge).
    WrongVersion(
        DISTANCES,
        "a loop over the rows of a",
        _RULE,
        code="""\
def pairwise_sq_distances(a, b):
    return torch.stack([((row - b) ** 2).sum(-1) for row in a])
""",
    ),
    # Full code: the forbidden call in place of the computation.
    WrongVersion(
        DISTANCES,
        "calls torch.cdist",
        "this exercise's rule is: no torch.cdist",
        code="""\
def pairwise_sq_distances(a, b):
    return torch.cdist(a, b) ** 2
""",
    ),
    # Full code: the forbidden call, reached through a name kept outside the function.
    WrongVersion(
        DISTANCES,
        "keeps a reference to torch.cdist",
        "this exercise's rule is: no torch.cdist",
        code="""\
dist = torch.cdist


def pairwise_sq_distances(a, b):
    return dist(a, b) ** 2
""",
    ),
    WrongVersion(
        DISTANCES,
        "distances, not squared",
        "leave out the square root",
        edit(_RETURN_DIFFERENCES_DIFFERENCES, "return (differences * differences).sum(dim=-1).sqrt()"),
    ),
    WrongVersion(
        DISTANCES,
        "absolute differences, not squares (a missing square)",
        "square the differences before the sum",
        edit(_RETURN_DIFFERENCES_DIFFERENCES, "return differences.abs().sum(dim=-1)"),
    ),
    WrongVersion(
        DISTANCES,
        "columns follow a (b minus a the other way round)",
        "rows follow the points of a",
        edit(_DIFFERENCES, "differences = b[:, None, :] - a[None, :, :]  # [n, 1, d] - [1, m, d] -> [n, m, d]"),
    ),
    # Full code: the expansion |a|^2 + |b|^2 - 2 a.b is another algorithm.
    WrongVersion(
        DISTANCES,
        "expansion without the factor 2",
        "the factor 2 is missing",
        code="""\
def pairwise_sq_distances(a, b):
    return (a ** 2).sum(-1)[:, None] + (b ** 2).sum(-1)[None, :] - a @ b.T
""",
    ),
    WrongVersion(
        DISTANCES,
        "forgets the sum over coordinates",
        "the sum over the coordinates",
        edit(_RETURN_DIFFERENCES_DIFFERENCES, "return differences * differences"),
    ),
    WrongVersion(
        DISTANCES,
        "edits the input in place with unsqueeze_",
        "changed its input `a` in place",
        edit(_DIFFERENCES, "differences = a.unsqueeze_(1) - b[None, :, :]  # [n, 1, d] - [1, m, d] -> [n, m, d]"),
    ),
    WrongVersion(
        DISTANCES,
        "unsqueeze_ on the input, squeeze_ to put the shape back",
        "changed its input `a` in place, even if it put it back afterwards",
        edit(
            _DISTANCES_DIFFERENCES,
            """\
    a.unsqueeze_(1)
    differences = a - b[None, :, :]
    a.squeeze_(1)
""",
        ),
    ),
    WrongVersion(
        DISTANCES,
        "centres both inputs in place (sub_), then adds the centre back",
        "changed its input `a` in place",
        code='def pairwise_sq_distances(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:\n    """[n, d] and [m, d] -> [n, m] with out[i, j] = |a[i] - b[j]|^2, by broadcasting (no loops)."""\n    centre = a.mean(0)\n    a.sub_(centre)\n    b.sub_(centre)\n    differences = a[:, None, :] - b[None, :, :]  # [n, 1, d] - [1, m, d] -> [n, m, d]\n    out = (differences * differences).sum(dim=-1)\n    a.add_(centre)\n    b.add_(centre)\n    return out\n',
    ),
    WrongVersion(
        DISTANCES,
        "reshapes the input through .data and back (no method ending in _)",
        "when they are one tensor, changing a changes b too",
        edit(
            _DISTANCES_DIFFERENCES,
            """\
    a.data = a.data.unsqueeze(1)
    differences = a - b[None, :, :]
    a.data = a.data.squeeze(1)
""",
        ),
    ),
    WrongVersion(
        DISTANCES,
        "squeezes away size-1 dimensions",
        "expected [1, 5]",
        edit(
            _DIFFERENCES,
            "differences = (a[:, None, :] - b[None, :, :]).squeeze()  # [n, 1, d] - [1, m, d] -> [n, m, d]",
        ),
    ),
    WrongVersion(
        DISTANCES,
        "computes in float32 whatever the input",
        "expected torch.float64",
        edit(
            _DIFFERENCES,
            "differences = a.float()[:, None, :] - b.float()[None, :, :]  # [n, 1, d] - [1, m, d] -> [n, m, d]",
        ),
    ),
    # Full code: the expansion with its factor 2 is right near the origin, and loses digits far from it.
    WrongVersion(
        DISTANCES,
        "the expansion |a|^2 + |b|^2 - 2 a.b (cancels digits far from the origin)",
        "digits were lost to cancellation",
        code="""\
def pairwise_sq_distances(a, b):
    return (a ** 2).sum(-1)[:, None] + (b ** 2).sum(-1)[None, :] - 2 * a @ b.T
""",
    ),
    # Full code: the same expansion written with einsum and clamped at 0, as some libraries do.
    WrongVersion(
        DISTANCES,
        "the expansion by einsum, clamped at 0",
        "digits were lost to cancellation",
        code="""\
def pairwise_sq_distances(a, b):
    squares_a = torch.einsum("nd,nd->n", a, a)
    squares_b = torch.einsum("md,md->m", b, b)
    return (squares_a[:, None] + squares_b[None, :] - 2 * torch.einsum("nd,md->nm", a, b)).clamp(min=0)
""",
    ),
    # Full code: the expansion after centring on the mean of all the points; right for one cluster, not for two.
    WrongVersion(
        DISTANCES,
        "the expansion |a|^2 + |b|^2 - 2 a.b after centring on the common mean (two clusters far from it)",
        "centring on the mean of all the points does not cure it",
        code="""\
def pairwise_sq_distances(a, b):
    centre = torch.cat([a, b]).mean(dim=0, keepdim=True)
    a, b = a - centre, b - centre
    return ((a * a).sum(-1)[:, None] + (b * b).sum(-1)[None, :] - 2 * a @ b.T).clamp(min=0)
""",
    ),
    # Full code: broadcasting over the points, a loop over the coordinates (its work grows with d, not n).
    WrongVersion(
        DISTANCES,
        "broadcasts over the points but loops over the coordinates (sum of a generator)",
        _RULE,
        code="""\
def pairwise_sq_distances(a, b):
    return sum((a[:, None, c] - b[None, :, c]) ** 2 for c in range(a.shape[1]))
""",
    ),
    # head_dot_products
    WrongVersion(
        DOTS,
        "keys along the rows (output transposed)",
        "it is transposed",
        edit(_RETURN_TORCH_EINSUM, 'return torch.einsum("bhsd,bhtd->bhts", q, k)'),
    ),
    WrongVersion(
        DOTS,
        "scaled by 1/sqrt(d) already",
        "divided by sqrt(d)",
        edit(_RETURN_TORCH_EINSUM, 'return torch.einsum("bhsd,bhtd->bhst", q, k) / math.sqrt(q.shape[-1])'),
    ),
    WrongVersion(
        DOTS,
        "batch and head axes swapped",
        "batch and head axes are swapped",
        edit(_RETURN_TORCH_EINSUM, 'return torch.einsum("bhsd,bhtd->hbst", q, k)'),
    ),
    WrongVersion(
        DOTS,
        "sums over the keys as well",
        "it also sums over the keys",
        edit(_RETURN_TORCH_EINSUM, 'return torch.einsum("bhsd,bhtd->bhs", q, k)'),
    ),
    WrongVersion(
        DOTS,
        "divided by d (right shape, values wrong)",
        "differs from the expected values",
        edit(_RETURN_TORCH_EINSUM, 'return torch.einsum("bhsd,bhtd->bhst", q, k) / q.shape[-1]'),
    ),
    WrongVersion(
        DOTS,
        "softmax applied",
        "a softmax was applied",
        edit(_RETURN_TORCH_EINSUM, 'return torch.einsum("bhsd,bhtd->bhst", q, k).softmax(dim=-1)'),
    ),
    WrongVersion(
        DOTS,
        "a letter of its own for the keys' batch axis (summed over)",
        "the batch axis of k has a letter of its own",
        edit(_RETURN_TORCH_EINSUM, 'return torch.einsum("bhsd,chtd->bhst", q, k)'),
    ),
    WrongVersion(
        DOTS,
        "a letter of its own for the keys' head axis (summed over)",
        "the head axis of k has a letter of its own",
        edit(_RETURN_TORCH_EINSUM, 'return torch.einsum("bhsd,bgtd->bhst", q, k)'),
    ),
    WrongVersion(
        DOTS,
        "casts to float32",
        "expected torch.float64",
        edit(_RETURN_TORCH_EINSUM, 'return torch.einsum("bhsd,bhtd->bhst", q.float(), k.float())'),
    ),
    # split_merge_heads
    WrongVersion(
        HEADS,
        "(d h): heads interleaved column by column",
        "not 'b s (d h)'",
        edit(_RETURN_EINOPS_REARRANGE, 'return einops.rearrange(x, "b s (d h) -> b h s d", h=n_heads)'),
        edit(_HEADS_RETURN_EINOPS_REARRANGE, _NEW_RETURN_EINOPS_REARRANGE),
    ),
    WrongVersion(
        HEADS,
        "a bare reshape, no axis moved",
        "a reshape alone does not move the head axis",
        edit(
            '    return einops.rearrange(x, "b s (h d) -> b h s d", h=n_heads)\n',
            """\
    b, s, w = x.shape
    return x.reshape(b, n_heads, s, w // n_heads)
""",
        ),
        edit(
            _HEADS_RETURN_EINOPS_REARRANGE_2,
            """\
    b, h, s, d = x.shape
    return x.reshape(b, s, h * d)
""",
        ),
    ),
    WrongVersion(
        HEADS,
        "head axis left behind the sequence axis",
        "the head axis must come before the sequence axis",
        edit(_RETURN_EINOPS_REARRANGE, 'return einops.rearrange(x, "b s (h d) -> b s h d", h=n_heads)'),
        edit(_HEADS_RETURN_EINOPS_REARRANGE, 'return einops.rearrange(x, "b s h d -> b s (h d)")'),
    ),
    WrongVersion(
        HEADS,
        "merge with (d h), undoing a different split",
        "merge_heads must undo split_heads",
        edit(_HEADS_RETURN_EINOPS_REARRANGE, _NEW_RETURN_EINOPS_REARRANGE),
    ),
    WrongVersion(
        HEADS,
        "merge with view after the transpose (not contiguous)",
        "view size is not compatible",
        edit(
            _HEADS_RETURN_EINOPS_REARRANGE_2,
            """\
    b, h, s, d = x.shape
    return x.transpose(1, 2).view(b, s, h * d)
""",
        ),
    ),
    WrongVersion(
        HEADS,
        "head width hard-coded to the example's 4",
        "split_heads(x, 1) for x of shape [1, 4, 8] has shape [1, 2, 4, 4], expected [1, 1, 4, 8]",
        edit(_RETURN_EINOPS_REARRANGE, 'return einops.rearrange(x, "b s (h d) -> b h s d", d=4)'),
    ),
    WrongVersion(
        HEADS,
        "heads merged over the sequence axis",
        "heads and positions are merged the wrong way",
        edit(_HEADS_RETURN_EINOPS_REARRANGE, 'return einops.rearrange(x, "b h s d -> b h (s d)")'),
    ),
    # one_hot
    WrongVersion(
        ONE_HOT,
        "returns the bool comparison",
        "expected torch.float32",
        edit(_RETURN_TOKENS_NONE, "return tokens[..., None] == torch.arange(vocab_size)"),
    ),
    WrongVersion(
        ONE_HOT,
        "ids counted from 1",
        "one place too far left",
        edit(_RETURN_TOKENS_NONE, "return (tokens[..., None] == torch.arange(1, vocab_size + 1)).float()"),
    ),
    WrongVersion(
        ONE_HOT,
        "vocabulary axis first",
        "the vocabulary axis comes last",
        edit(_RETURN_TOKENS_NONE, "return (tokens[None] == torch.arange(vocab_size)[:, None]).float()"),
    ),
    WrongVersion(
        ONE_HOT,
        "flattens the tokens",
        "not flattened",
        edit(_RETURN_TOKENS_NONE, "return (tokens.reshape(-1, 1) == torch.arange(vocab_size)).float()"),
    ),
    # Full code: the forbidden call in place of the computation.
    WrongVersion(
        ONE_HOT,
        "calls F.one_hot",
        "this exercise's rule is: do not call F.one_hot",
        code="""\
def one_hot(tokens, vocab_size):
    return F.one_hot(tokens, vocab_size).float()
""",
    ),
)
