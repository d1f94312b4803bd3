"""Seeded inputs for checks: every random tensor a check draws comes from its own fixed generator."""

from __future__ import annotations

import torch


def seeded(base: int):
    """``gen(seed)`` and ``randn(shape, seed, scale=1.0)``, seeded ``base + seed`` (one base per notebook)."""

    def gen(seed: int) -> torch.Generator:
        return torch.Generator().manual_seed(base + seed)

    def randn(shape, seed: int, scale: float = 1.0) -> torch.Tensor:
        return torch.randn(*shape, generator=gen(seed)) * scale

    return gen, randn
