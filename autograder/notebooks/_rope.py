"""Rotary position embeddings for the checks of notebooks 03 and 05, built on Hugging Face's Llama.

No answer of solutions/ ships in the package (issue 54 §4), so the checks' RoPE is Llama's own rotation,
``apply_rotary_pos_emb``, adapted to the course's layout:

- the course rotates interleaved pairs (2i, 2i+1), Llama split halves (i, i + d/2). Reading the coordinates in
  ``split_order`` (the even ones, then the odd ones) turns the one layout into the other, so the course's rotation
  of ``x`` is Llama's rotation of ``x[..., order]``, read back in the inverse order;
- Llama's own tables (``LlamaRotaryEmbedding``) are computed in float32, whose angles m * theta_i are off by up to
  1.2e-4 at m = 4095, coarser than notebook 03's precision check (1e-5). The tables here are in Llama's layout (each
  angle twice, ``torch.cat((freqs, freqs))``, as ``LlamaRotaryEmbedding.forward`` makes them), from the closed form
  theta_i = base^(-2i/d) in float64, and the rotation runs in float64.

``transformers`` is imported where it is used, not with the module: the notebook's kernel imports this module for
its test cells, and only the checks that rotate need Llama.
"""

from __future__ import annotations

import torch
from torch import nn


def frequencies(d: int, base: float = 10000.0) -> torch.Tensor:
    """theta_i = base^(-2i/d) for i < d/2 (RoFormer's closed form), in float64."""
    return torch.tensor([base ** (-2 * i / d) for i in range(d // 2)], dtype=torch.float64)


def split_order(d: int) -> torch.Tensor:
    """The coordinates 0..d-1 sorted by parity, a stable sort (even ones first, each group in its order):
    ``x[..., split_order(d)]`` holds the first coordinates of the interleaved pairs, then the second ones."""
    return torch.argsort(torch.arange(d) % 2, stable=True)


def rotate_halves(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0, *, theta=None) -> torch.Tensor:
    """Split-halves RoPE of ``x`` [..., d] at ``positions`` (broadcast against x's leading axes), in float64:
    Llama's ``apply_rotary_pos_emb`` on tables of the angles positions * theta (``theta`` defaults to
    ``frequencies(d, base)``)."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    theta = frequencies(x.shape[-1], base) if theta is None else theta
    angles = positions.to(torch.float64)[..., None] * theta.to(x.device)
    angles = torch.cat((angles, angles), dim=-1)
    x = x.double()
    # Llama inserts a heads axis into cos and sin at ``unsqueeze_dim``; at 0 it is a leading 1, which
    # broadcasting absorbs (or the reshape drops, when x has no more axes than the positions).
    rotated, _ = apply_rotary_pos_emb(x, x, angles.cos(), angles.sin(), unsqueeze_dim=0)
    return rotated.reshape(x.shape)


def rotate_pairs(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0, *, theta=None) -> torch.Tensor:
    """The course's RoPE (interleaved pairs) of ``x`` at ``positions``, in float64: ``rotate_halves`` of x in the
    split-halves layout, read back in the interleaved one."""
    order = split_order(x.shape[-1]).to(x.device)
    return rotate_halves(x[..., order], positions, base, theta=theta)[..., torch.argsort(order)]


class LlamaRoPE(nn.Module):
    """``rotate_pairs`` with the course's RoPE interface, ``forward(x, token_positions)`` -> x's shape and dtype:
    the RoPE module a check hands to the student's attention (computed in float64, returned in x's dtype)."""

    def __init__(self, base: float = 10000.0):
        super().__init__()
        self.base = base

    def forward(self, x: torch.Tensor, token_positions: torch.Tensor) -> torch.Tensor:
        return rotate_pairs(x, token_positions, self.base).to(x.dtype)
