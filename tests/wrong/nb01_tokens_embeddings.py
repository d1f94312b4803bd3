"""Mistakes students make in notebook 01.

Each wrong version is the solution's answer cell with one mistake written in (``variant`` checks that the
replaced text is there), so the wrong versions differ from a right one only by the mistake.
"""

from wrong import Wrong, catalogue

NOTEBOOK = "01_tokens_embeddings"
RIGHT, variant = catalogue(NOTEBOOK)

# The range check of SinusoidalPositionalEncoding and LearnedPositionalEmbedding (the same lines in both).
_GUARD = (
    "        if positions.numel() > 0 and (positions.min() < 0 or positions.max() >= self.max_len):\n"
    "            raise IndexError(\n"
    '                f"positions must lie in [0, max_len) = [0, {self.max_len}), "\n'
    '                f"got values from {positions.min().item()} to {positions.max().item()}"\n'
    "            )\n"
)
_TRUNC_NORMAL = "nn.init.trunc_normal_(weight, mean=0.0, std=std, a=-3 * std, b=3 * std)"
_LEARNED_INIT = "self.weight = nn.Parameter(torch.empty(max_len, d_model))"
_FILL = "        table[:, 0::2] = torch.sin(angles)\n        table[:, 1::2] = torch.cos(angles[:, : d_model // 2])\n"
_POSITIONS = "positions = torch.arange(start_pos, start_pos + seq_len, dtype=torch.long, device=token_ids.device)"
_SUM = "return self.token_embedding(token_ids) + self.position_embedding(positions)"

WRONG = [
    Wrong(
        "learned_positions",
        "raises ValueError where the text says IndexError",
        variant("learned_positions", ("raise IndexError(", "raise ValueError(")),
        "raised ValueError; it must raise IndexError",
    ),
    Wrong(
        "sinusoidal",
        "raises ValueError where the text says IndexError",
        variant("sinusoidal", ("raise IndexError(", "raise ValueError(")),
        "raised ValueError; it must raise IndexError",
    ),
    # The exercises' rules (autograder.rules): each message quotes the rule.
    Wrong(
        "embedding",
        "calls F.embedding under another name",
        variant(
            "embedding",
            ("class Embedding(", "from torch.nn.functional import embedding as lookup\n\n\nclass Embedding("),
            ("vectors = self.weight[token_ids]", "vectors = lookup(token_ids, self.weight)"),
        ),
        "this exercise's rule is: do not use nn.Embedding or F.embedding",
    ),
    Wrong(
        "learned_positions",
        "reuses the student's Embedding",
        variant(
            "learned_positions",
            (
                _LEARNED_INIT + "\n        nn.init.normal_(self.weight, mean=0.0, std=0.02)",
                "self.table = Embedding(max_len, d_model)\n        self.weight = self.table.weight",
            ),
        ),
        "this exercise's rule is: do not reuse your Embedding",
    ),
    Wrong(
        "learned_positions",
        "calls F.embedding",
        variant("learned_positions", ("return self.weight[positions]", "return F.embedding(positions, self.weight)")),
        "this exercise's rule is: do not reuse your Embedding, nn.Embedding or F.embedding",
    ),
    # Exercise 1: Embedding
    Wrong(
        "embedding",
        "standard normal init, as torch.nn.Embedding does",
        variant("embedding", (_TRUNC_NORMAL, "nn.init.normal_(weight)")),
        "standard deviation",
    ),
    Wrong(
        "embedding",
        "Xavier normal without truncation",
        variant("embedding", (_TRUNC_NORMAL, "nn.init.xavier_normal_(weight)")),
        "must be truncated",
    ),
    Wrong(
        "embedding",
        "table stored transposed",
        variant(
            "embedding",
            ("torch.empty(num_embeddings, embedding_dim)", "torch.empty(embedding_dim, num_embeddings)"),
            ("self.weight[token_ids]", "self.weight.T[token_ids]"),
        ),
        "expected [num_embeddings, embedding_dim]",
    ),
    Wrong(
        "embedding",
        "divides by sqrt(d) instead of multiplying",
        variant("embedding", ("vectors * math.sqrt(", "vectors / math.sqrt(")),
        "divides by sqrt(embedding_dim)",
    ),
    Wrong(
        "embedding",
        "always scales",
        variant("embedding", ("        if self.scale:\n            vectors = vectors", "        vectors = vectors")),
        "although scale=False",
    ),
    Wrong(
        "embedding",
        "wraps nn.Embedding",
        variant(
            "embedding",
            ("self.weight = nn.Parameter(weight)", "self.table = nn.Embedding(num_embeddings, embedding_dim)"),
            ("self.weight[token_ids]", "self.table(token_ids)"),
        ),
        "this exercise's rule is: do not use nn.Embedding or F.embedding",
    ),
    Wrong(
        "embedding",
        "looks up through .data, so no gradient reaches the table",
        variant("embedding", ("self.weight[token_ids]", "self.weight.data[token_ids]")),
        "weight.grad",
    ),
    # Exercise 2: sinusoidal
    Wrong(
        "sinusoidal",
        "sin and cos swapped",
        variant(
            "sinusoidal",
            ("table[:, 0::2] = torch.sin(", "table[:, 0::2] = torch.cos("),
            ("table[:, 1::2] = torch.cos(", "table[:, 1::2] = torch.sin("),
        ),
        "sine and cosine are swapped",
    ),
    Wrong(
        "sinusoidal",
        "sines first, then cosines (split halves)",
        variant(
            "sinusoidal",
            (_FILL, "        table = torch.cat([torch.sin(angles), torch.cos(angles)], -1)[:, :d_model]\n"),
        ),
        "interleaves them",
    ),
    Wrong(
        "sinusoidal",
        "exponent i/d instead of 2i/d",
        variant("sinusoidal", ("-even_dims / d_model", "-(even_dims / 2) / d_model")),
        "the exponent is 2i/d_model",
    ),
    Wrong(
        "sinusoidal",
        "table is a learnable parameter",
        variant(
            "sinusoidal",
            (
                'self.register_buffer("pe", table.to(torch.get_default_dtype()), persistent=False)',
                "self.pe = nn.Parameter(table.to(torch.get_default_dtype()))",
            ),
        ),
        "register_buffer",
    ),
    Wrong(
        "sinusoidal",
        "breaks for odd d_model",
        variant("sinusoidal", ("torch.cos(angles[:, : d_model // 2])", "torch.cos(angles)")),
        "odd d_model works",
    ),
    Wrong(
        "sinusoidal",
        "ignores the positions and returns the first rows",
        variant(
            "sinusoidal",
            ("return self.pe[positions]", "return self.pe[: positions.shape[-1]].expand(*positions.shape, -1)"),
        ),
        "do not assume they are 0, 1, 2",
    ),
    Wrong(
        "sinusoidal",
        "no range check: -1 wraps to the last row",
        variant("sinusoidal", (_GUARD, "")),
        "negative indices would silently wrap",
    ),
    # Exercise 3: learned positions
    Wrong(
        "learned_positions",
        "clamps positions instead of raising",
        variant("learned_positions", (_GUARD, "        positions = positions.clamp(0, self.max_len - 1)\n")),
        "must raise IndexError",
    ),
    Wrong(
        "learned_positions",
        "a buffer, not a parameter",
        variant("learned_positions", (_LEARNED_INIT, 'self.register_buffer("weight", torch.empty(max_len, d_model))')),
        "not a buffer",
    ),
    Wrong(
        "learned_positions",
        "unit-variance init",
        variant("learned_positions", ("std=0.02", "std=1.0")),
        "standard deviation",
    ),
    Wrong(
        "learned_positions",
        "ignores the positions",
        variant(
            "learned_positions",
            ("return self.weight[positions]", "return self.weight[: positions.shape[-1]].expand(*positions.shape, -1)"),
        ),
        "ignores the positions",
    ),
    # Exercise 4: token plus position
    Wrong(
        "input_embedding",
        "positions along the batch axis",
        variant(
            "input_embedding",
            (_POSITIONS, "positions = torch.arange(token_ids.shape[0], device=token_ids.device)[:, None]"),
        ),
        "batch axis",
    ),
    Wrong(
        "input_embedding",
        "ignores start_pos",
        variant("input_embedding", ("torch.arange(start_pos, start_pos + seq_len,", "torch.arange(seq_len,")),
        "start_pos",
    ),
    Wrong(
        "input_embedding",
        "concatenates instead of adding",
        variant(
            "input_embedding",
            (
                _SUM,
                "return torch.cat([self.token_embedding(token_ids), "
                "self.position_embedding(positions).expand(*token_ids.shape, -1)], -1)",
            ),
        ),
        "has shape",
    ),
    Wrong(
        "input_embedding",
        "other submodule names",
        variant(
            "input_embedding",
            (
                "self.token_embedding = token_embedding\n        self.position_embedding = position_embedding",
                "self.tok = token_embedding\n        self.pos = position_embedding",
            ),
            (_SUM, "return self.tok(token_ids) + self.pos(positions)"),
        ),
        "self.token_embedding and self.position_embedding",
    ),
]
