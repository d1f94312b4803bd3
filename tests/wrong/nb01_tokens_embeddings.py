"""Mistakes students make in notebook 01."""

from wrong import Wrong

_EMBEDDING = """
class Embedding(nn.Module):
    def __init__(self, num_embeddings, embedding_dim, scale=False):
        super().__init__()
        std = math.sqrt(2 / (num_embeddings + embedding_dim))
        {init}
        self.scale = scale

    def forward(self, token_ids):
        out = {lookup}
        return {scaled}
"""


def embedding(
    init="self.weight = nn.Parameter(nn.init.trunc_normal_(torch.empty(num_embeddings, embedding_dim), 0, std, -3 * std, 3 * std))",
    lookup="self.weight[token_ids]",
    scaled="out * math.sqrt(self.weight.shape[1]) if self.scale else out",
):
    return _EMBEDDING.format(init=init, lookup=lookup, scaled=scaled)


_SINUSOIDAL = """
class SinusoidalPositionalEncoding(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        position = torch.arange(max_len, dtype=torch.float32)[:, None]
        even = torch.arange(0, d_model, 2, dtype=torch.float32)
        angle = position / 10000 ** ({exponent})
        pe = torch.zeros(max_len, d_model)
        {fill}
        {register}

    def forward(self, positions):
        {guard}
        return {lookup}
"""
_INTERLEAVED = "pe[:, 0::2] = torch.sin(angle); pe[:, 1::2] = torch.cos(angle[:, : d_model // 2])"
_GUARD = "if positions.numel() and (positions.min() < 0 or positions.max() >= self.pe.shape[0]): raise IndexError(f'max_len is {self.pe.shape[0]}')"


def sinusoidal(
    exponent="even / d_model",
    fill=_INTERLEAVED,
    register='self.register_buffer("pe", pe, persistent=False)',
    guard=_GUARD,
    lookup="self.pe[positions]",
):
    return _SINUSOIDAL.format(exponent=exponent, fill=fill, register=register, guard=guard, lookup=lookup)


_LEARNED = """
class LearnedPositionalEmbedding(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        self.max_len = max_len
        {init}

    def forward(self, positions):
        {guard}
        return {lookup}
"""
_LEARNED_GUARD = "if positions.numel() and (positions.min() < 0 or positions.max() >= self.max_len): raise IndexError(f'max_len is {self.max_len}')"


def learned(
    init="self.weight = nn.Parameter(torch.randn(max_len, d_model) * 0.02)",
    guard=_LEARNED_GUARD,
    lookup="self.weight[positions]",
):
    return _LEARNED.format(init=init, guard=guard, lookup=lookup)


_INPUT = """
class InputEmbedding(nn.Module):
    def __init__(self, token_embedding, position_embedding):
        super().__init__()
        self.{token} = token_embedding
        self.{position} = position_embedding

    def forward(self, token_ids, start_pos=0):
        positions = {positions}
        return {combine}
"""


def input_embedding(
    token="token_embedding",
    position="position_embedding",
    positions="torch.arange(start_pos, start_pos + token_ids.shape[-1])",
    combine=None,
):
    combine = combine or f"self.{token}(token_ids) + self.{position}(positions)"
    return _INPUT.format(token=token, position=position, positions=positions, combine=combine)


# The templates with their defaults are right: tests/test_wrong_implementations.py checks that.
RIGHT = {
    "embedding": embedding(),
    "sinusoidal": sinusoidal(),
    "learned_positions": learned(),
    "input_embedding": input_embedding(),
}

WRONG = [
    Wrong(
        "learned_positions",
        "raises ValueError where the text says IndexError",
        learned(guard=_LEARNED_GUARD.replace("raise IndexError", "raise ValueError")),
        "raised ValueError; it must raise IndexError",
    ),
    Wrong(
        "sinusoidal",
        "raises ValueError where the text says IndexError",
        sinusoidal(guard=_GUARD.replace("raise IndexError", "raise ValueError")),
        "raised ValueError; it must raise IndexError",
    ),
    # The exercises' rules (autograder.rules): each message quotes the rule.
    Wrong(
        "embedding",
        "calls F.embedding under another name",
        "from torch.nn.functional import embedding as lookup\n" + embedding(lookup="lookup(token_ids, self.weight)"),
        "this exercise's rule is: do not use nn.Embedding or F.embedding",
    ),
    Wrong(
        "learned_positions",
        "reuses the student's Embedding",
        learned(init="self.table = Embedding(max_len, d_model); self.weight = self.table.weight"),
        "this exercise's rule is: do not reuse your Embedding",
    ),
    Wrong(
        "learned_positions",
        "calls F.embedding",
        learned(lookup="F.embedding(positions, self.weight)"),
        "this exercise's rule is: do not reuse your Embedding, nn.Embedding or F.embedding",
    ),
    # Exercise 1: Embedding
    Wrong(
        "embedding",
        "standard normal init, as torch.nn.Embedding does",
        embedding(init="self.weight = nn.Parameter(torch.randn(num_embeddings, embedding_dim))"),
        "standard deviation",
    ),
    Wrong(
        "embedding",
        "Xavier normal without truncation",
        embedding(
            init="self.weight = nn.Parameter(nn.init.xavier_normal_(torch.empty(num_embeddings, embedding_dim)))"
        ),
        "must be truncated",
    ),
    Wrong(
        "embedding",
        "table stored transposed",
        embedding(
            init="self.weight = nn.Parameter(torch.randn(embedding_dim, num_embeddings) * std)",
            lookup="self.weight.T[token_ids]",
            scaled="out * math.sqrt(self.weight.shape[0]) if self.scale else out",
        ),
        "expected [num_embeddings, embedding_dim]",
    ),
    Wrong(
        "embedding",
        "divides by sqrt(d) instead of multiplying",
        embedding(scaled="out / math.sqrt(self.weight.shape[1]) if self.scale else out"),
        "divides by sqrt(embedding_dim)",
    ),
    Wrong(
        "embedding", "always scales", embedding(scaled="out * math.sqrt(self.weight.shape[1])"), "although scale=False"
    ),
    Wrong(
        "embedding",
        "wraps nn.Embedding",
        embedding(init="self.table = nn.Embedding(num_embeddings, embedding_dim)", lookup="self.table(token_ids)"),
        "this exercise's rule is: do not use nn.Embedding or F.embedding",
    ),
    Wrong(
        "embedding",
        "looks up through .data, so no gradient reaches the table",
        embedding(lookup="self.weight.data[token_ids]"),
        "weight.grad",
    ),
    # Exercise 2: sinusoidal
    Wrong(
        "sinusoidal",
        "sin and cos swapped",
        sinusoidal(fill="pe[:, 0::2] = torch.cos(angle); pe[:, 1::2] = torch.sin(angle[:, : d_model // 2])"),
        "sine and cosine are swapped",
    ),
    Wrong(
        "sinusoidal",
        "sines first, then cosines (split halves)",
        sinusoidal(fill="pe = torch.cat([torch.sin(angle), torch.cos(angle)], -1)[:, :d_model]"),
        "interleaves them",
    ),
    Wrong(
        "sinusoidal",
        "exponent i/d instead of 2i/d",
        sinusoidal(exponent="(even / 2) / d_model"),
        "the exponent is 2i/d_model",
    ),
    Wrong(
        "sinusoidal",
        "table is a learnable parameter",
        sinusoidal(register="self.pe = nn.Parameter(pe)"),
        "register_buffer",
    ),
    Wrong(
        "sinusoidal",
        "breaks for odd d_model",
        sinusoidal(fill="pe[:, 0::2] = torch.sin(angle); pe[:, 1::2] = torch.cos(angle)"),
        "odd d_model works",
    ),
    Wrong(
        "sinusoidal",
        "ignores the positions and returns the first rows",
        sinusoidal(lookup="self.pe[: positions.shape[-1]].expand(*positions.shape, -1)"),
        "do not assume they are 0, 1, 2",
    ),
    Wrong(
        "sinusoidal",
        "no range check: -1 wraps to the last row",
        sinusoidal(guard="pass"),
        "negative indices would silently wrap",
    ),
    # Exercise 3: learned positions
    Wrong(
        "learned_positions",
        "clamps positions instead of raising",
        learned(guard="positions = positions.clamp(0, self.max_len - 1)"),
        "must raise IndexError",
    ),
    Wrong(
        "learned_positions",
        "a buffer, not a parameter",
        learned(init="self.register_buffer('weight', torch.randn(max_len, d_model) * 0.02)"),
        "not a buffer",
    ),
    Wrong(
        "learned_positions",
        "unit-variance init",
        learned(init="self.weight = nn.Parameter(torch.randn(max_len, d_model))"),
        "standard deviation",
    ),
    Wrong(
        "learned_positions",
        "ignores the positions",
        learned(lookup="self.weight[: positions.shape[-1]].expand(*positions.shape, -1)"),
        "ignores the positions",
    ),
    # Exercise 4: token plus position
    Wrong(
        "input_embedding",
        "positions along the batch axis",
        input_embedding(positions="torch.arange(token_ids.shape[0])[:, None]"),
        "batch axis",
    ),
    Wrong(
        "input_embedding",
        "ignores start_pos",
        input_embedding(positions="torch.arange(token_ids.shape[-1])"),
        "start_pos",
    ),
    Wrong(
        "input_embedding",
        "concatenates instead of adding",
        input_embedding(
            combine="torch.cat([self.token_embedding(token_ids), self.position_embedding(positions).expand(*token_ids.shape, -1)], -1)"
        ),
        "has shape",
    ),
    Wrong(
        "input_embedding",
        "other submodule names",
        input_embedding(token="tok", position="pos"),
        "self.token_embedding and self.position_embedding",
    ),
]
