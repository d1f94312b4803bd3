"""Mistakes students make in notebook 00's warm-up.

Each wrong version is the solution's answer cell with one mistake written in (``variant`` checks that the
replaced text is there), so the wrong versions differ from a right one only by the mistake. The few written out
in full are the rules' dodges (a loop, a forbidden call) and other algorithms, which are no edit of the solution.
"""

from wrong import Wrong, catalogue

NOTEBOOK = "00_welcome"
RIGHT, variant = catalogue(NOTEBOOK)

_DIFFERENCES = "    differences = a[:, None, :] - b[None, :, :]  # [n, 1, d] - [1, m, d] -> [n, m, d]\n"
_SQUARED_SUM = "return (differences * differences).sum(dim=-1)"
_EINSUM = '"bhsd,bhtd->bhst", q, k'
_SPLIT = '"b s (h d) -> b h s d"'
_MERGE = '"b h s d -> b s (h d)"'
_ONE_HOT = "return (tokens[..., None] == torch.arange(vocab_size)).float()"

WRONG = [
    # The exercises' rules (autograder.rules): each message quotes the rule.
    # Full code: a loop in place of the broadcast is another algorithm, no edit of the solution.
    Wrong(
        "relative_positions",
        "a nested comprehension",
        "def relative_positions(n):\n    return torch.tensor([[j - i for j in range(n)] for i in range(n)])\n",
        "this exercise's rule is: no Python loops",
    ),
    # Full code: a loop (the rule's dodge).
    Wrong(
        "relative_positions",
        "a for loop filling rows",
        "def relative_positions(n):\n    out = torch.empty(n, n, dtype=torch.int64)\n    for i in range(n):\n"
        "        out[i] = torch.arange(n) - i\n    return out\n",
        "this exercise's rule is: no Python loops",
    ),
    # Full code: a loop (the rule's dodge).
    Wrong(
        "pairwise_sq_distances",
        "a loop over the rows of a",
        "def pairwise_sq_distances(a, b):\n    return torch.stack([((row - b) ** 2).sum(-1) for row in a])\n",
        "this exercise's rule is: no Python loops",
    ),
    # Full code: the forbidden call in place of the computation.
    Wrong(
        "pairwise_sq_distances",
        "calls torch.cdist",
        "def pairwise_sq_distances(a, b):\n    return torch.cdist(a, b) ** 2\n",
        "this exercise's rule is: no torch.cdist",
    ),
    # Full code: the forbidden call, reached through a name kept outside the function.
    Wrong(
        "pairwise_sq_distances",
        "keeps a reference to torch.cdist",
        "dist = torch.cdist\n\n\ndef pairwise_sq_distances(a, b):\n    return dist(a, b) ** 2\n",
        "this exercise's rule is: no torch.cdist",
    ),
    Wrong(
        "relative_positions",
        "query minus key (transposed)",
        variant(
            "relative_positions", ("positions[None, :] - positions[:, None]", "positions[:, None] - positions[None, :]")
        ),
        "it is transposed",
    ),
    Wrong(
        "relative_positions",
        "float positions",
        variant("relative_positions", ("torch.arange(n)", "torch.arange(n, dtype=torch.float32)")),
        "whole numbers",
    ),
    Wrong(
        "relative_positions",
        "absolute distance",
        variant(
            "relative_positions",
            (
                "return positions[None, :] - positions[:, None]",
                "return (positions[None, :] - positions[:, None]).abs()",
            ),
        ),
        "lost the sign",
    ),
    Wrong(
        "relative_positions",
        "size hard-coded to the example's 5",
        variant("relative_positions", ("torch.arange(n)", "torch.arange(5)")),
        "relative_positions(1) has shape [5, 5], expected [1, 1]",
    ),
    Wrong(
        "pairwise_sq_distances",
        "distances, not squared",
        variant("pairwise_sq_distances", (_SQUARED_SUM, _SQUARED_SUM + ".sqrt()")),
        "leave out the square root",
    ),
    Wrong(
        "pairwise_sq_distances",
        "absolute differences, not squares (a missing square)",
        variant("pairwise_sq_distances", ("(differences * differences)", "differences.abs()")),
        "square the differences before the sum",
    ),
    Wrong(
        "pairwise_sq_distances",
        "columns follow a (b minus a the other way round)",
        variant("pairwise_sq_distances", ("a[:, None, :] - b[None, :, :]", "b[:, None, :] - a[None, :, :]")),
        "rows follow the points of a",
    ),
    # Full code: the expansion |a|^2 + |b|^2 - 2 a.b is another algorithm.
    Wrong(
        "pairwise_sq_distances",
        "expansion without the factor 2",
        "def pairwise_sq_distances(a, b):\n"
        "    return (a ** 2).sum(-1)[:, None] + (b ** 2).sum(-1)[None, :] - a @ b.T\n",
        "the factor 2 is missing",
    ),
    Wrong(
        "pairwise_sq_distances",
        "forgets the sum over coordinates",
        variant("pairwise_sq_distances", (_SQUARED_SUM, "return differences * differences")),
        "the sum over the coordinates",
    ),
    Wrong(
        "pairwise_sq_distances",
        "edits the input in place with unsqueeze_",
        variant("pairwise_sq_distances", ("a[:, None, :] - b", "a.unsqueeze_(1) - b")),
        "changed its input `a` in place",
    ),
    Wrong(
        "pairwise_sq_distances",
        "unsqueeze_ on the input, squeeze_ to put the shape back",
        variant(
            "pairwise_sq_distances",
            (_DIFFERENCES, "    a.unsqueeze_(1)\n    differences = a - b[None, :, :]\n    a.squeeze_(1)\n"),
        ),
        "changed its input `a` in place, even if it put it back afterwards",
    ),
    Wrong(
        "pairwise_sq_distances",
        "centres both inputs in place (sub_), then adds the centre back",
        variant(
            "pairwise_sq_distances",
            (_DIFFERENCES, "    centre = a.mean(0)\n    a.sub_(centre)\n    b.sub_(centre)\n" + _DIFFERENCES),
            (
                _SQUARED_SUM,
                "out = (differences * differences).sum(dim=-1)\n    a.add_(centre)\n    b.add_(centre)\n    return out",
            ),
        ),
        "changed its input `a` in place",
    ),
    Wrong(
        "pairwise_sq_distances",
        "reshapes the input through .data and back (no method ending in _)",
        variant(
            "pairwise_sq_distances",
            (
                _DIFFERENCES,
                "    a.data = a.data.unsqueeze(1)\n    differences = a - b[None, :, :]\n    a.data = a.data.squeeze(1)\n",
            ),
        ),
        "when they are one tensor, changing a changes b too",
    ),
    Wrong(
        "pairwise_sq_distances",
        "squeezes away size-1 dimensions",
        variant(
            "pairwise_sq_distances", ("a[:, None, :] - b[None, :, :]", "(a[:, None, :] - b[None, :, :]).squeeze()")
        ),
        "expected [1, 5]",
    ),
    Wrong(
        "pairwise_sq_distances",
        "computes in float32 whatever the input",
        variant(
            "pairwise_sq_distances", ("a[:, None, :] - b[None, :, :]", "a.float()[:, None, :] - b.float()[None, :, :]")
        ),
        "expected torch.float64",
    ),
    Wrong(
        "head_dot_products",
        "keys along the rows (output transposed)",
        variant("head_dot_products", ("->bhst", "->bhts")),
        "it is transposed",
    ),
    Wrong(
        "head_dot_products",
        "scaled by 1/sqrt(d) already",
        variant("head_dot_products", (_EINSUM + ")", _EINSUM + ") / math.sqrt(q.shape[-1])")),
        "divided by sqrt(d)",
    ),
    Wrong(
        "head_dot_products",
        "batch and head axes swapped",
        variant("head_dot_products", ("->bhst", "->hbst")),
        "batch and head axes are swapped",
    ),
    Wrong(
        "head_dot_products",
        "sums over the keys as well",
        variant("head_dot_products", ("->bhst", "->bhs")),
        "it also sums over the keys",
    ),
    Wrong(
        "head_dot_products",
        "divided by d (right shape, values wrong)",
        variant("head_dot_products", (_EINSUM + ")", _EINSUM + ") / q.shape[-1]")),
        "differs from the expected values",
    ),
    Wrong(
        "head_dot_products",
        "softmax applied",
        variant("head_dot_products", (_EINSUM + ")", _EINSUM + ").softmax(dim=-1)")),
        "a softmax was applied",
    ),
    Wrong(
        "head_dot_products",
        "a letter of its own for the keys' batch axis (summed over)",
        variant("head_dot_products", ("bhsd,bhtd", "bhsd,chtd")),
        "the batch axis of k has a letter of its own",
    ),
    Wrong(
        "head_dot_products",
        "a letter of its own for the keys' head axis (summed over)",
        variant("head_dot_products", ("bhsd,bhtd", "bhsd,bgtd")),
        "the head axis of k has a letter of its own",
    ),
    Wrong(
        "head_dot_products",
        "casts to float32",
        variant("head_dot_products", ("q, k)", "q.float(), k.float())")),
        "expected torch.float64",
    ),
    Wrong(
        "split_merge_heads",
        "(d h): heads interleaved column by column",
        variant("split_merge_heads", (_SPLIT, '"b s (d h) -> b h s d"'), (_MERGE, '"b h s d -> b s (d h)"')),
        "not 'b s (d h)'",
    ),
    Wrong(
        "split_merge_heads",
        "a bare reshape, no axis moved",
        variant(
            "split_merge_heads",
            (
                'return einops.rearrange(x, "b s (h d) -> b h s d", h=n_heads)',
                "b, s, w = x.shape\n    return x.reshape(b, n_heads, s, w // n_heads)",
            ),
            (
                'return einops.rearrange(x, "b h s d -> b s (h d)")',
                "b, h, s, d = x.shape\n    return x.reshape(b, s, h * d)",
            ),
        ),
        "a reshape alone does not move the head axis",
    ),
    Wrong(
        "split_merge_heads",
        "head axis left behind the sequence axis",
        variant("split_merge_heads", (_SPLIT, '"b s (h d) -> b s h d"'), (_MERGE, '"b s h d -> b s (h d)"')),
        "the head axis must come before the sequence axis",
    ),
    Wrong(
        "split_merge_heads",
        "merge with (d h), undoing a different split",
        variant("split_merge_heads", (_MERGE, '"b h s d -> b s (d h)"')),
        "merge_heads must undo split_heads",
    ),
    Wrong(
        "split_merge_heads",
        "merge with view after the transpose (not contiguous)",
        variant(
            "split_merge_heads",
            (
                'return einops.rearrange(x, "b h s d -> b s (h d)")',
                "b, h, s, d = x.shape\n    return x.transpose(1, 2).view(b, s, h * d)",
            ),
        ),
        "view size is not compatible",
    ),
    Wrong(
        "split_merge_heads",
        "head width hard-coded to the example's 4",
        variant("split_merge_heads", ("h=n_heads)", "d=4)")),
        "split_heads(x, 1) for x of shape [1, 4, 8] has shape [1, 2, 4, 4], expected [1, 1, 4, 8]",
    ),
    Wrong(
        "split_merge_heads",
        "heads merged over the sequence axis",
        variant("split_merge_heads", (_MERGE, '"b h s d -> b h (s d)"')),
        "heads and positions are merged the wrong way",
    ),
    Wrong(
        "one_hot",
        "returns the bool comparison",
        variant("one_hot", (_ONE_HOT, "return tokens[..., None] == torch.arange(vocab_size)")),
        "expected torch.float32",
    ),
    Wrong(
        "one_hot",
        "ids counted from 1",
        variant("one_hot", ("torch.arange(vocab_size)", "torch.arange(1, vocab_size + 1)")),
        "one place too far left",
    ),
    Wrong(
        "one_hot",
        "vocabulary axis first",
        variant(
            "one_hot",
            ("tokens[..., None] == torch.arange(vocab_size)", "tokens[None] == torch.arange(vocab_size)[:, None]"),
        ),
        "the vocabulary axis comes last",
    ),
    Wrong(
        "one_hot",
        "flattens the tokens",
        variant("one_hot", ("tokens[..., None]", "tokens.reshape(-1, 1)")),
        "not flattened",
    ),
    # Full code: the forbidden call in place of the computation.
    Wrong(
        "one_hot",
        "calls F.one_hot",
        "def one_hot(tokens, vocab_size):\n    return F.one_hot(tokens, vocab_size).float()\n",
        "this exercise's rule is: do not call F.one_hot",
    ),
]
