"""Wrong versions of notebook 01's answers (01_tokens_embeddings): see ``wrong/__init__.py``."""

from autograder.notebooks.nb01_tokens_embeddings import EMBEDDING, INPUT, LEARNED, SINUSOIDAL
from wrong import WrongVersion, edit

# embedding -----------------------------------------------------------------------------------------------------
_VECTORS = "vectors = self.weight[token_ids]"
_SCALE = "vectors = vectors * math.sqrt(self.embedding_dim)"
_NN_INIT_TRUNC_NORMAL = "nn.init.trunc_normal_(weight, mean=0.0, std=std, a=-3 * std, b=3 * std)"

# sinusoidal ----------------------------------------------------------------------------------------------------
_TABLE_TORCH_SIN = """\
        table[:, 0::2] = torch.sin(angles)
        table[:, 1::2] = torch.cos(angles[:, : d_model // 2])
"""
_INV_FREQ = "inv_freq = torch.pow(torch.tensor(10000.0, dtype=torch.float64), -even_dims / d_model)"
_SELF_REGISTER_BUFFER_PE = 'self.register_buffer("pe", table.to(torch.get_default_dtype()), persistent=False)'
_RETURN_SELF_PE = "return self.pe[positions]"

# learned_positions ---------------------------------------------------------------------------------------------
_RETURN_SELF_WEIGHT = "return self.weight[positions]"
_SELF_WEIGHT = "self.weight = nn.Parameter(torch.empty(max_len, d_model))"

# input_embedding -----------------------------------------------------------------------------------------------
_POSITIONS = "positions = torch.arange(start_pos, start_pos + seq_len, dtype=torch.long, device=token_ids.device)"
_RETURN_SELF_TOKEN_EMBEDDING = "return self.token_embedding(token_ids) + self.position_embedding(positions)"

WRONG_VERSIONS = (
    # embedding
    WrongVersion(
        EMBEDDING,
        "calls F.embedding under another name",
        "this exercise's rule is: do not use nn.Embedding or F.embedding",
        edit(
            "class Embedding(nn.Module):\n",
            """\
from torch.nn.functional import embedding as lookup


class Embedding(nn.Module):
""",
        ),
        edit(_VECTORS, "vectors = lookup(token_ids, self.weight)"),
    ),
    WrongVersion(
        EMBEDDING,
        "standard normal init, as torch.nn.Embedding does",
        "standard deviation",
        edit(_NN_INIT_TRUNC_NORMAL, "nn.init.normal_(weight)"),
    ),
    WrongVersion(
        EMBEDDING,
        "Xavier normal without truncation",
        "must be truncated",
        edit(_NN_INIT_TRUNC_NORMAL, "nn.init.xavier_normal_(weight)"),
    ),
    WrongVersion(
        EMBEDDING,
        "table stored transposed",
        "expected [num_embeddings, embedding_dim]",
        edit(
            "weight = torch.empty(num_embeddings, embedding_dim)", "weight = torch.empty(embedding_dim, num_embeddings)"
        ),
        edit(_VECTORS, "vectors = self.weight.T[token_ids]"),
    ),
    WrongVersion(
        EMBEDDING,
        "divides by sqrt(d) instead of multiplying",
        "divides by sqrt(embedding_dim)",
        edit("vectors = vectors * math.sqrt(self.embedding_dim)", "vectors = vectors / math.sqrt(self.embedding_dim)"),
    ),
    WrongVersion(
        EMBEDDING,
        "always scales",
        "although scale=False",
        edit(
            """\
        if self.scale:
            vectors = vectors * math.sqrt(self.embedding_dim)
""",
            "        vectors = vectors * math.sqrt(self.embedding_dim)\n",
        ),
    ),
    WrongVersion(
        EMBEDDING,
        "wraps nn.Embedding",
        "this exercise's rule is: do not use nn.Embedding or F.embedding",
        edit("self.weight = nn.Parameter(weight)", "self.table = nn.Embedding(num_embeddings, embedding_dim)"),
        edit(_VECTORS, "vectors = self.table(token_ids)"),
    ),
    WrongVersion(
        EMBEDDING,
        "looks up through .data, so no gradient reaches the table",
        "weight.grad",
        edit(_VECTORS, "vectors = self.weight.data[token_ids]"),
    ),
    WrongVersion(
        EMBEDDING,
        "normal draws clamped onto ±3 std instead of truncated",
        "were clamped (clipped) onto the bound",
        edit(
            _NN_INIT_TRUNC_NORMAL,
            "weight = (torch.randn(num_embeddings, embedding_dim) * std).clamp(-3 * std, 3 * std)",
        ),
    ),
    WrongVersion(
        EMBEDDING,
        "range check with .min()/.max() alone, which raise on an empty id tensor",
        "fails on an empty tensor",
        edit(
            "if token_ids.numel() > 0 and (token_ids.min() < 0 or token_ids.max() >= self.num_embeddings):",
            "if token_ids.min() < 0 or token_ids.max() >= self.num_embeddings:",
        ),
    ),
    WrongVersion(
        EMBEDDING,
        "scale=True stored but never applied",
        "scale=True did not scale the rows",
        edit(f"        if self.scale:\n            {_SCALE}\n", ""),
    ),
    WrongVersion(
        EMBEDDING,
        "scaled by embedding_dim, not its square root",
        "it multiplies by embedding_dim",
        edit(_SCALE, "vectors = vectors * self.embedding_dim"),
    ),
    # sinusoidal
    WrongVersion(
        SINUSOIDAL,
        "raises ValueError where the text says IndexError",
        "raised ValueError; it must raise IndexError",
        edit("raise IndexError(", "raise ValueError("),
    ),
    WrongVersion(
        SINUSOIDAL,
        "sin and cos swapped",
        "sine and cosine are swapped",
        edit(
            _TABLE_TORCH_SIN,
            """\
        table[:, 0::2] = torch.cos(angles)
        table[:, 1::2] = torch.sin(angles[:, : d_model // 2])
""",
        ),
    ),
    WrongVersion(
        SINUSOIDAL,
        "sines first, then cosines (split halves)",
        "interleaves them",
        edit(_TABLE_TORCH_SIN, "        table = torch.cat([torch.sin(angles), torch.cos(angles)], -1)[:, :d_model]\n"),
    ),
    WrongVersion(
        SINUSOIDAL,
        "exponent i/d instead of 2i/d",
        "the exponent is 2i/d_model",
        edit(_INV_FREQ, "inv_freq = torch.pow(torch.tensor(10000.0, dtype=torch.float64), -(even_dims / 2) / d_model)"),
    ),
    WrongVersion(
        SINUSOIDAL,
        "table is a learnable parameter",
        "register_buffer",
        edit(_SELF_REGISTER_BUFFER_PE, "self.pe = nn.Parameter(table.to(torch.get_default_dtype()))"),
    ),
    WrongVersion(
        SINUSOIDAL,
        "breaks for odd d_model",
        "odd d_model works",
        edit("table[:, 1::2] = torch.cos(angles[:, : d_model // 2])", "table[:, 1::2] = torch.cos(angles)"),
    ),
    WrongVersion(
        SINUSOIDAL,
        "ignores the positions and returns the first rows",
        "do not assume they are 0, 1, 2",
        edit(_RETURN_SELF_PE, "return self.pe[: positions.shape[-1]].expand(*positions.shape, -1)"),
    ),
    WrongVersion(
        SINUSOIDAL,
        "no range check: -1 wraps to the last row",
        "negative indices would silently wrap",
        edit(
            """\
        if positions.numel() > 0 and (positions.min() < 0 or positions.max() >= self.max_len):
            raise IndexError(
                f"positions must lie in [0, max_len) = [0, {self.max_len}), "
                f"got values from {positions.min().item()} to {positions.max().item()}"
            )
""",
            "",
        ),
    ),
    WrongVersion(
        SINUSOIDAL,
        "pe registered as a persistent buffer (in the state_dict)",
        "`pe` is in the state_dict",
        edit(_SELF_REGISTER_BUFFER_PE, 'self.register_buffer("pe", table.to(torch.get_default_dtype()))'),
    ),
    WrongVersion(
        SINUSOIDAL,
        "forward reads a plain attribute, not the buffer (module.to(device) leaves it behind)",
        "forward does not read the buffer `pe`",
        edit(
            '        self.register_buffer("pe", table.to(torch.get_default_dtype()), persistent=False)\n',
            """\
        self.register_buffer("pe", table.to(torch.get_default_dtype()), persistent=False)
        self.table = self.pe
""",
        ),
        edit(_RETURN_SELF_PE, "return self.table[positions]"),
    ),
    WrongVersion(
        SINUSOIDAL,
        "table computed for 1024 positions, its first max_len rows kept",
        "build the table for max_len positions",
        edit(
            "positions = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)         # [max_len, 1]",
            "positions = torch.arange(1024, dtype=torch.float64).unsqueeze(1)            # [1024, 1]",
        ),
        edit(
            "table = torch.zeros(max_len, d_model, dtype=torch.float64)",
            "table = torch.zeros(1024, d_model, dtype=torch.float64)",
        ),
        edit(
            _SELF_REGISTER_BUFFER_PE,
            'self.register_buffer("pe", table[:max_len].to(torch.get_default_dtype()), persistent=False)',
        ),
    ),
    WrongVersion(
        SINUSOIDAL,
        "float64 table kept (not converted to the default dtype)",
        "must be converted at the end",
        edit(_SELF_REGISTER_BUFFER_PE, 'self.register_buffer("pe", table, persistent=False)'),
    ),
    WrongVersion(
        SINUSOIDAL,
        "table converted to float32 whatever the default dtype",
        "rather than to a fixed dtype",
        edit(_SELF_REGISTER_BUFFER_PE, 'self.register_buffer("pe", table.float(), persistent=False)'),
    ),
    WrongVersion(
        SINUSOIDAL,
        "angles computed in float32 (torch.arange's default float dtype), only the finished table converted",
        "the angles p * w were computed in float32",
        edit(
            """\
        positions = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)         # [max_len, 1]
        even_dims = torch.arange(0, d_model, 2, dtype=torch.float64)                 # 2i, ceil(d/2) values
        inv_freq = torch.pow(torch.tensor(10000.0, dtype=torch.float64), -even_dims / d_model)
""",
            """\
        positions = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)         # [max_len, 1]
        even_dims = torch.arange(0, d_model, 2, dtype=torch.float32)                 # 2i, ceil(d/2) values
        inv_freq = torch.pow(torch.tensor(10000.0, dtype=torch.float32), -even_dims / d_model)
""",
        ),
    ),
    WrongVersion(
        SINUSOIDAL,
        "frequencies computed in float32 (exp of a float32 arange), positions and angles in float64",
        "the angles p * w were computed in float32",
        edit(_INV_FREQ, "inv_freq = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model)).double()"),
    ),
    WrongVersion(
        SINUSOIDAL,
        "frequencies inverted: the position multiplied by 10000^(2i/d_model)",
        "the frequencies are inverted",
        edit(_INV_FREQ, "inv_freq = torch.pow(torch.tensor(10000.0, dtype=torch.float64), even_dims / d_model)"),
    ),
    # learned_positions
    WrongVersion(
        LEARNED,
        "raises ValueError where the text says IndexError",
        "raised ValueError; it must raise IndexError",
        edit("raise IndexError(", "raise ValueError("),
    ),
    WrongVersion(
        LEARNED,
        "reuses the student's Embedding",
        "this exercise's rule is: do not reuse your Embedding",
        edit(
            """\
        self.weight = nn.Parameter(torch.empty(max_len, d_model))
        nn.init.normal_(self.weight, mean=0.0, std=0.02)
""",
            """\
        self.table = Embedding(max_len, d_model)
        self.weight = self.table.weight
""",
        ),
    ),
    WrongVersion(
        LEARNED,
        "calls F.embedding",
        "this exercise's rule is: do not reuse your Embedding, nn.Embedding or F.embedding",
        edit(_RETURN_SELF_WEIGHT, "return F.embedding(positions, self.weight)"),
    ),
    WrongVersion(
        LEARNED,
        "clamps positions instead of raising",
        "must raise IndexError",
        edit(
            """\
        if positions.numel() > 0 and (positions.min() < 0 or positions.max() >= self.max_len):
            raise IndexError(
                f"positions must lie in [0, max_len) = [0, {self.max_len}), "
                f"got values from {positions.min().item()} to {positions.max().item()}"
            )
""",
            "        positions = positions.clamp(0, self.max_len - 1)\n",
        ),
    ),
    WrongVersion(
        LEARNED,
        "a buffer, not a parameter",
        "not a buffer",
        edit(_SELF_WEIGHT, 'self.register_buffer("weight", torch.empty(max_len, d_model))'),
    ),
    WrongVersion(
        LEARNED,
        "unit-variance init",
        "standard deviation",
        edit("nn.init.normal_(self.weight, mean=0.0, std=0.02)", "nn.init.normal_(self.weight, mean=0.0, std=1.0)"),
    ),
    WrongVersion(
        LEARNED,
        "ignores the positions",
        "ignores the positions",
        edit(_RETURN_SELF_WEIGHT, "return self.weight[: positions.shape[-1]].expand(*positions.shape, -1)"),
    ),
    WrongVersion(
        LEARNED,
        "weight capped at 1024 rows (GPT-2's context)",
        "one row per position up to max_len",
        edit(_SELF_WEIGHT, "self.weight = nn.Parameter(torch.empty(min(max_len, 1024), d_model))"),
    ),
    # input_embedding
    WrongVersion(
        INPUT,
        "positions along the batch axis",
        "batch axis",
        edit(_POSITIONS, "positions = torch.arange(token_ids.shape[0], device=token_ids.device)[:, None]"),
    ),
    WrongVersion(
        INPUT,
        "ignores start_pos",
        "start_pos",
        edit(_POSITIONS, "positions = torch.arange(seq_len, dtype=torch.long, device=token_ids.device)"),
    ),
    WrongVersion(
        INPUT,
        "concatenates instead of adding",
        "has shape",
        edit(
            _RETURN_SELF_TOKEN_EMBEDDING,
            "return torch.cat([self.token_embedding(token_ids), self.position_embedding(positions).expand(*token_ids.shape, -1)], -1)",
        ),
    ),
    WrongVersion(
        INPUT,
        "other submodule names",
        "self.token_embedding and self.position_embedding",
        edit(
            """\
        self.token_embedding = token_embedding
        self.position_embedding = position_embedding
""",
            """\
        self.tok = token_embedding
        self.pos = position_embedding
""",
        ),
        edit(_RETURN_SELF_TOKEN_EMBEDDING, "return self.tok(token_ids) + self.pos(positions)"),
    ),
    WrongVersion(
        INPUT,
        "positions made on the CPU, whatever the device of token_ids",
        "not on the device of token_ids",
        edit(_POSITIONS, "positions = torch.arange(start_pos, start_pos + seq_len, dtype=torch.long)"),
    ),
    WrongVersion(
        INPUT,
        "positions as int32",
        "build them as a LongTensor",
        edit(
            _POSITIONS,
            "positions = torch.arange(start_pos, start_pos + seq_len, dtype=torch.int32, device=token_ids.device)",
        ),
    ),
    WrongVersion(
        INPUT,
        "positions 0..1023 made once, in __init__, and sliced",
        "a range made once for a fixed length and sliced",
        edit(
            "        self.position_embedding = position_embedding\n",
            """\
        self.position_embedding = position_embedding
        self.register_buffer("positions", torch.arange(1024), persistent=False)
""",
        ),
        edit(_POSITIONS, "positions = self.positions[start_pos : start_pos + seq_len]"),
    ),
)
