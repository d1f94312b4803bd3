"""Rotary position embedding, interleaved pairs (2i, 2i+1), computed with complex numbers."""

from __future__ import annotations

import torch
from torch import nn


def frequencies(d_k: int, base: float = 10000.0) -> torch.Tensor:
    """theta_i = base^(-2i/d_k) for i < d_k/2, in float64."""
    return torch.tensor([base ** (-2 * i / d_k) for i in range(d_k // 2)], dtype=torch.float64)


def rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0, *, theta=None) -> torch.Tensor:
    """Rotate each pair of ``x`` by position * theta: multiplication by exp(i m theta), in float64."""
    d_k = x.shape[-1]
    theta = frequencies(d_k, base).to(x.device) if theta is None else theta  # on x's device: any device works
    pairs = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d_k // 2, 2).contiguous())
    angles = positions.double()[..., None] * theta
    rotated = pairs * torch.polar(torch.ones_like(angles), angles)
    return torch.view_as_real(rotated).reshape(x.shape)


class RoPE(nn.Module):
    """``rope`` as a module with the course's interface: ``RoPE(d_k, max_seq_len, base)``, ``forward(x, token_positions)``.

    ``d_k`` and ``max_seq_len`` are accepted for the interface; the angles are computed for any position.
    """

    def __init__(self, d_k: int | None = None, max_seq_len: int | None = None, base: float = 10000.0):
        super().__init__()
        self.base = base

    def forward(self, x: torch.Tensor, token_positions: torch.Tensor) -> torch.Tensor:
        return rope(x, token_positions, self.base).to(x.dtype)


def halves_permutation(d_k: int) -> torch.Tensor:
    """The indices that take interleaved pairs (2i, 2i+1) to split halves (i, i + d_k/2): ``x[..., p]``."""
    return torch.arange(d_k).view(-1, 2).t().flatten()
