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


def seed_cpu(seed: int) -> torch.Generator:
    """``torch.manual_seed(seed)`` for the grader's own draws, which are all on the CPU: the same state of the CPU
    generator, without the rest. torch.manual_seed also queues a seed for each accelerator backend (CUDA, XPU,
    MTIA), and each one records the caller's stack: 2-4 ms a call under pytest, and the checks of one notebook make
    hundreds. Adapters, which seed beside the student's code, keep torch.manual_seed: that code may draw elsewhere.
    """
    return torch.default_generator.manual_seed(int(seed))
