"""The parts of a Llama-style decoder block with the course's interface.

``RotaryGroupedQueryAttention(d_model, num_heads, num_kv_heads, rope)``: ``q_proj`` [d_model ->
d_model], ``k_proj`` and ``v_proj`` [d_model -> num_kv_heads * head_dim], ``out_proj``, all without
bias; queries and keys rotated by ``rope(x, token_positions)`` (interleaved pairs), query head ``i``
reading key/value head ``i // (num_heads // num_kv_heads)``. ``forward(x, mask=None,
token_positions=None, cache=None, layer=0)``, mask boolean, True = may attend, ``token_positions`` [seq] or
[batch, seq]. Given a ``cache`` (``autograder.reference.kv_cache``), the rotated keys and the values of ``x``
are handed to ``cache.update(layer, k, v)``, which returns all the keys and values to attend to (the cached
ones first); the caller gives the positions of the new tokens and a mask over all the keys.
``is_causal=True`` (with ``mask=None``) is the causal mask without a mask tensor: SDPA gets ``is_causal=True``
and may pick a flash kernel. SDPA's ``is_causal`` aligns the triangle top-left, which is right only when the
queries and the keys are the same tokens; with a cache (fewer queries than keys) the queries are the LAST
tokens, so the mask is built explicitly, ``ones(q_len, k_len).tril(k_len - q_len)``.

``ModernBlock(config, rope)``: pre-norm, ``norm1``, ``attn``, ``norm2``, ``ffn`` (RMSNorm, the
attention above, SwiGLU), ``forward(x, mask=None, token_positions=None, cache=None, layer=0, is_causal=False)``
(the cache and the layer index go to the attention only when a cache is given, ``is_causal`` only when True). ``config`` needs
``d_model``, ``n_heads``, ``n_kv_heads``, ``d_ff`` and ``norm_eps``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from autograder.reference.feed_forward import SwiGLU


class RotaryGroupedQueryAttention(nn.Module):
    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int, rope: nn.Module):
        super().__init__()
        if d_model % num_heads or num_heads % num_kv_heads:
            raise ValueError(f"need num_kv_heads | num_heads | d_model, got {num_kv_heads}, {num_heads}, {d_model}")
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, d_model // num_heads
        self.rope = rope
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(d_model, num_kv_heads * self.head_dim, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        token_positions: torch.Tensor | None = None,
        cache=None,
        layer: int = 0,
        is_causal: bool = False,
    ) -> torch.Tensor:
        if is_causal and mask is not None:
            raise ValueError("is_causal=True stands for the causal mask: give mask=None with it")
        batch, length, _ = x.shape
        if token_positions is None:
            token_positions = torch.arange(length, device=x.device)
        if token_positions.dim() == 2:  # one row of positions per sequence: broadcast over heads
            token_positions = token_positions[:, None, :]

        def heads(t, n):
            return t.view(batch, length, n, self.head_dim).transpose(1, 2)

        q = self.rope(heads(self.q_proj(x), self.num_heads), token_positions)
        k = self.rope(heads(self.k_proj(x), self.num_kv_heads), token_positions)
        v = heads(self.v_proj(x), self.num_kv_heads)
        if cache is not None:
            k, v = cache.update(layer, k, v)
        if is_causal and k.shape[-2] != length:  # cached keys come first: the new queries are the last tokens
            mask = torch.ones(length, k.shape[-2], dtype=torch.bool, device=x.device).tril(k.shape[-2] - length)
            is_causal = False
        empty = None
        if mask is not None:  # a query with no key to attend to: zero weights, not NaN
            empty = ~mask.any(-1, keepdim=True)
            mask = mask | empty
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, enable_gqa=True)
        if empty is not None:
            out = out.masked_fill(empty, 0.0)
        return self.out_proj(out.transpose(1, 2).flatten(2))


class ModernBlock(nn.Module):
    """Pre-norm with the parts it is given: ``x + attn(norm1(x), ...)``, then ``+ ffn(norm2(x))``.

    Its default norm is PyTorch's ``nn.RMSNorm`` and its attention runs SDPA. The block is not Hugging Face's
    ``LlamaDecoderLayer``, which computes the same composition: that layer builds its own parts under other names
    (``input_layernorm``, ``self_attn.o_proj``, ``mlp.gate_proj``, ...), rotates split halves from the
    ``position_embeddings`` (cos, sin) its caller computes, and takes Hugging Face's ``Cache`` and masks.
    The checks inject this block into a student's ``ModernDecoder`` and ``CachedDecoder``, so it must rotate with the
    ``rope`` module the student's decoder hands it (a wrong one must show in the logits), make its parts by the
    ``attention``, ``feed_forward`` and ``norm`` arguments, keep the course's parameter names (states are loaded by
    name) and pass the course's cache, layer index and ``is_causal`` on. What is left is two residual additions, the
    definition of a pre-norm block, which any correct answer writes the same way.
    """

    def __init__(
        self, config, rope: nn.Module, *, attention=RotaryGroupedQueryAttention, feed_forward=SwiGLU, norm=nn.RMSNorm
    ):
        super().__init__()
        self.norm1 = norm(config.d_model, eps=config.norm_eps)
        self.attn = attention(config.d_model, config.n_heads, config.n_kv_heads or config.n_heads, rope)
        self.norm2 = norm(config.d_model, eps=config.norm_eps)
        self.ffn = feed_forward(config.d_model, config.d_ff)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        token_positions: torch.Tensor | None = None,
        cache=None,
        layer: int = 0,
        is_causal: bool = False,
    ) -> torch.Tensor:
        extra = {} if cache is None else {"cache": cache, "layer": layer}
        if is_causal:
            extra["is_causal"] = True
        x = x + self.attn(self.norm1(x), mask, token_positions, **extra)
        return x + self.ffn(self.norm2(x))
