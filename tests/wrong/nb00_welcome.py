"""Mistakes students make in notebook 00's warm-up."""

from wrong import Wrong


def relative_positions(
    body="positions = torch.arange(n)\n    return positions[None, :] - positions[:, None]",
):
    return f"\ndef relative_positions(n):\n    {body}\n"


def pairwise_sq_distances(body="diff = a[:, None, :] - b[None, :, :]\n    return (diff ** 2).sum(-1)"):
    return f"\ndef pairwise_sq_distances(a, b):\n    {body}\n"


def head_dot_products(body='return torch.einsum("bhsd,bhtd->bhst", q, k)'):
    return f"\ndef head_dot_products(q, k):\n    {body}\n"


def split_merge_heads(
    split='return einops.rearrange(x, "b s (h d) -> b h s d", h=n_heads)',
    merge='return einops.rearrange(x, "b h s d -> b s (h d)")',
):
    return f"\ndef split_heads(x, n_heads):\n    {split}\n\n\ndef merge_heads(x):\n    {merge}\n"


def one_hot(body="return (tokens[..., None] == torch.arange(vocab_size)).float()"):
    return f"\ndef one_hot(tokens, vocab_size):\n    {body}\n"


RIGHT = {
    "relative_positions": relative_positions(),
    "pairwise_sq_distances": pairwise_sq_distances(),
    "head_dot_products": head_dot_products(),
    "split_merge_heads": split_merge_heads(),
    "one_hot": one_hot(),
}

WRONG = [
    # The exercises' rules (autograder.rules): each message quotes the rule.
    Wrong(
        "relative_positions",
        "a nested comprehension",
        relative_positions("return torch.tensor([[j - i for j in range(n)] for i in range(n)])"),
        "this exercise's rule is: no Python loops",
    ),
    Wrong(
        "relative_positions",
        "a for loop filling rows",
        relative_positions(
            "out = torch.empty(n, n, dtype=torch.int64)\n    for i in range(n):\n"
            "        out[i] = torch.arange(n) - i\n    return out"
        ),
        "this exercise's rule is: no Python loops",
    ),
    Wrong(
        "pairwise_sq_distances",
        "a loop over the rows of a",
        pairwise_sq_distances("return torch.stack([((row - b) ** 2).sum(-1) for row in a])"),
        "this exercise's rule is: no Python loops",
    ),
    Wrong(
        "pairwise_sq_distances",
        "calls torch.cdist",
        pairwise_sq_distances("return torch.cdist(a, b) ** 2"),
        "this exercise's rule is: no torch.cdist",
    ),
    Wrong(
        "pairwise_sq_distances",
        "keeps a reference to torch.cdist",
        "dist = torch.cdist\n" + pairwise_sq_distances("return dist(a, b) ** 2"),
        "this exercise's rule is: no torch.cdist",
    ),
    Wrong(
        "relative_positions",
        "query minus key (transposed)",
        relative_positions("positions = torch.arange(n)\n    return positions[:, None] - positions[None, :]"),
        "it is transposed",
    ),
    Wrong(
        "relative_positions",
        "float positions",
        relative_positions(
            "positions = torch.arange(n, dtype=torch.float32)\n    return positions[None, :] - positions[:, None]"
        ),
        "whole numbers",
    ),
    Wrong(
        "relative_positions",
        "absolute distance",
        relative_positions("positions = torch.arange(n)\n    return (positions[None, :] - positions[:, None]).abs()"),
        "lost the sign",
    ),
    Wrong(
        "relative_positions",
        "size hard-coded to the example's 5",
        relative_positions("positions = torch.arange(5)\n    return positions[None, :] - positions[:, None]"),
        "relative_positions(1) has shape [5, 5], expected [1, 1]",
    ),
    Wrong(
        "pairwise_sq_distances",
        "distances, not squared",
        pairwise_sq_distances("diff = a[:, None, :] - b[None, :, :]\n    return (diff ** 2).sum(-1).sqrt()"),
        "leave out the square root",
    ),
    Wrong(
        "pairwise_sq_distances",
        "absolute differences, not squares (a missing square)",
        pairwise_sq_distances("diff = a[:, None, :] - b[None, :, :]\n    return diff.abs().sum(-1)"),
        "square the differences before the sum",
    ),
    Wrong(
        "pairwise_sq_distances",
        "columns follow a (b minus a the other way round)",
        pairwise_sq_distances("diff = b[:, None, :] - a[None, :, :]\n    return (diff ** 2).sum(-1)"),
        "rows follow the points of a",
    ),
    Wrong(
        "pairwise_sq_distances",
        "expansion without the factor 2",
        pairwise_sq_distances("return (a ** 2).sum(-1)[:, None] + (b ** 2).sum(-1)[None, :] - a @ b.T"),
        "the factor 2 is missing",
    ),
    Wrong(
        "pairwise_sq_distances",
        "forgets the sum over coordinates",
        pairwise_sq_distances("return (a[:, None, :] - b[None, :, :]) ** 2"),
        "the sum over the coordinates",
    ),
    Wrong(
        "pairwise_sq_distances",
        "edits the input in place with unsqueeze_",
        pairwise_sq_distances("diff = a.unsqueeze_(1) - b[None, :, :]\n    return (diff ** 2).sum(-1)"),
        "changed its input `a` in place",
    ),
    Wrong(
        "pairwise_sq_distances",
        "unsqueeze_ on the input, squeeze_ to put the shape back",
        pairwise_sq_distances(
            "a.unsqueeze_(1)\n    diff = a - b[None, :, :]\n    a.squeeze_(1)\n    return (diff ** 2).sum(-1)"
        ),
        "changed its input `a` in place, even if it put it back afterwards",
    ),
    Wrong(
        "pairwise_sq_distances",
        "centres both inputs in place (sub_), then adds the centre back",
        pairwise_sq_distances(
            "centre = a.mean(0)\n    a.sub_(centre)\n    b.sub_(centre)\n"
            "    out = ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)\n"
            "    a.add_(centre)\n    b.add_(centre)\n    return out"
        ),
        "changed its input `a` in place",
    ),
    Wrong(
        "pairwise_sq_distances",
        "reshapes the input through .data and back (no method ending in _)",
        pairwise_sq_distances(
            "a.data = a.data.unsqueeze(1)\n    diff = a - b.unsqueeze(0)\n"
            "    a.data = a.data.squeeze(1)\n    return (diff ** 2).sum(-1)"
        ),
        "when they are one tensor, changing a changes b too",
    ),
    Wrong(
        "pairwise_sq_distances",
        "squeezes away size-1 dimensions",
        pairwise_sq_distances("diff = (a[:, None, :] - b[None, :, :]).squeeze()\n    return (diff ** 2).sum(-1)"),
        "expected [1, 5]",
    ),
    Wrong(
        "pairwise_sq_distances",
        "computes in float32 whatever the input",
        pairwise_sq_distances("diff = a.float()[:, None, :] - b.float()[None, :, :]\n    return (diff ** 2).sum(-1)"),
        "expected torch.float64",
    ),
    Wrong(
        "head_dot_products",
        "keys along the rows (output transposed)",
        head_dot_products('return torch.einsum("bhsd,bhtd->bhts", q, k)'),
        "it is transposed",
    ),
    Wrong(
        "head_dot_products",
        "scaled by 1/sqrt(d) already",
        head_dot_products('return torch.einsum("bhsd,bhtd->bhst", q, k) / math.sqrt(q.shape[-1])'),
        "divided by sqrt(d)",
    ),
    Wrong(
        "head_dot_products",
        "batch and head axes swapped",
        head_dot_products('return torch.einsum("bhsd,bhtd->hbst", q, k)'),
        "batch and head axes are swapped",
    ),
    Wrong(
        "head_dot_products",
        "sums over the keys as well",
        head_dot_products('return torch.einsum("bhsd,bhtd->bhs", q, k)'),
        "it also sums over the keys",
    ),
    Wrong(
        "head_dot_products",
        "divided by d (right shape, values wrong)",
        head_dot_products('return torch.einsum("bhsd,bhtd->bhst", q, k) / q.shape[-1]'),
        "differs from the expected values",
    ),
    Wrong(
        "head_dot_products",
        "softmax applied",
        head_dot_products('return torch.einsum("bhsd,bhtd->bhst", q, k).softmax(dim=-1)'),
        "a softmax was applied",
    ),
    Wrong(
        "head_dot_products",
        "a letter of its own for the keys' batch axis (summed over)",
        head_dot_products('return torch.einsum("bhsd,chtd->bhst", q, k)'),
        "the batch axis of k has a letter of its own",
    ),
    Wrong(
        "head_dot_products",
        "a letter of its own for the keys' head axis (summed over)",
        head_dot_products('return torch.einsum("bhsd,bgtd->bhst", q, k)'),
        "the head axis of k has a letter of its own",
    ),
    Wrong(
        "head_dot_products",
        "casts to float32",
        head_dot_products('return torch.einsum("bhsd,bhtd->bhst", q.float(), k.float())'),
        "expected torch.float64",
    ),
    Wrong(
        "split_merge_heads",
        "(d h): heads interleaved column by column",
        split_merge_heads(
            split='return einops.rearrange(x, "b s (d h) -> b h s d", h=n_heads)',
            merge='return einops.rearrange(x, "b h s d -> b s (d h)")',
        ),
        "not 'b s (d h)'",
    ),
    Wrong(
        "split_merge_heads",
        "a bare reshape, no axis moved",
        split_merge_heads(
            split="b, s, w = x.shape\n    return x.reshape(b, n_heads, s, w // n_heads)",
            merge="b, h, s, d = x.shape\n    return x.reshape(b, s, h * d)",
        ),
        "a reshape alone does not move the head axis",
    ),
    Wrong(
        "split_merge_heads",
        "head axis left behind the sequence axis",
        split_merge_heads(
            split='return einops.rearrange(x, "b s (h d) -> b s h d", h=n_heads)',
            merge='return einops.rearrange(x, "b s h d -> b s (h d)")',
        ),
        "the head axis must come before the sequence axis",
    ),
    Wrong(
        "split_merge_heads",
        "merge with (d h), undoing a different split",
        split_merge_heads(merge='return einops.rearrange(x, "b h s d -> b s (d h)")'),
        "merge_heads must undo split_heads",
    ),
    Wrong(
        "split_merge_heads",
        "merge with view after the transpose (not contiguous)",
        split_merge_heads(merge="b, h, s, d = x.shape\n    return x.transpose(1, 2).view(b, s, h * d)"),
        "view size is not compatible",
    ),
    Wrong(
        "split_merge_heads",
        "head width hard-coded to the example's 4",
        split_merge_heads(split='return einops.rearrange(x, "b s (h d) -> b h s d", d=4)'),
        "split_heads(x, 1) for x of shape [1, 4, 8] has shape [1, 2, 4, 4], expected [1, 1, 4, 8]",
    ),
    Wrong(
        "split_merge_heads",
        "heads merged over the sequence axis",
        split_merge_heads(merge='return einops.rearrange(x, "b h s d -> b h (s d)")'),
        "heads and positions are merged the wrong way",
    ),
    Wrong(
        "one_hot",
        "returns the bool comparison",
        one_hot("return tokens[..., None] == torch.arange(vocab_size)"),
        "expected torch.float32",
    ),
    Wrong(
        "one_hot",
        "ids counted from 1",
        one_hot("return (tokens[..., None] == torch.arange(1, vocab_size + 1)).float()"),
        "one place too far left",
    ),
    Wrong(
        "one_hot",
        "vocabulary axis first",
        one_hot("return (tokens[None] == torch.arange(vocab_size)[:, None]).float()"),
        "the vocabulary axis comes last",
    ),
    Wrong(
        "one_hot",
        "flattens the tokens",
        one_hot("return (tokens.reshape(-1, 1) == torch.arange(vocab_size)).float()"),
        "not flattened",
    ),
    Wrong(
        "one_hot",
        "calls F.one_hot",
        one_hot("return F.one_hot(tokens, vocab_size).float()"),
        "this exercise's rule is: do not call F.one_hot",
    ),
]
