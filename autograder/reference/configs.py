"""The configuration classes the notebooks give their students, for when a notebook is not there.

Notebooks 08, 09 and 10 show these dataclasses in cells with ids ``configs`` / ``config-<name>``;
later notebooks load the student's own copies with ``use_earlier`` and fall back on these.
``tests/test_notebook_import.py`` checks that they match the notebooks' field for field.
"""

# No `from __future__ import annotations` here: the check compares field types as the notebooks see them.
from dataclasses import dataclass


@dataclass
class GPT2Config:
    vocab_size: int = 50257
    n_positions: int = 1024
    d_model: int = 768
    n_layers: int = 12
    n_heads: int = 12
    d_ff: int = 3072
    norm_eps: float = 1e-5


@dataclass
class DecoderConfig:
    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    d_ff: int
    max_seq_len: int
    n_kv_heads: int | None = None
    rope_base: float = 10000.0
    norm_eps: float = 1e-5


@dataclass
class BertConfig:
    vocab_size: int = 30522
    d_model: int = 768
    n_layers: int = 12
    n_heads: int = 12
    d_ff: int = 3072
    max_positions: int = 512
    type_vocab_size: int = 2
    norm_eps: float = 1e-12
    pad_token_id: int = 0


@dataclass
class TransformerConfig:
    src_vocab_size: int
    tgt_vocab_size: int
    d_model: int = 512
    n_heads: int = 8
    n_encoder_layers: int = 6
    n_decoder_layers: int = 6
    d_ff: int = 2048
    max_len: int = 512
    activation: str = "relu"
    norm_first: bool = False
    share_embeddings: bool = False


@dataclass
class TrainConfig:
    batch_size: int = 16
    context_length: int = 64
    max_steps: int = 200
    max_grad_norm: float = 1.0
    eval_interval: int = 50
    eval_batches: int = 4
    eval_seed: int = 1234
