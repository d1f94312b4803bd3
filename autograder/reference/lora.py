"""LoRA as the ``peft`` library writes it, under the notebook's interface: ``LoRALinear(base, r, alpha, dropout)``.

Notebook 15's fallback where the student's ``LoRALinear`` is unfinished, and the layer its ``add_lora`` check gives
(``autograder.adapters.given``), so that exercise is graded on its own. It is peft's own layer
(``peft.tuners.lora.layer.Linear``), with peft's initialisation (A as ``nn.Linear`` initialises its weight, B zeros)
and its names (``base_layer``, ``lora_A.default``, ``lora_B.default``); ``merge()`` and ``unmerge()`` are peft's.
"""

from __future__ import annotations

from peft import LoraConfig
from peft.tuners.lora.layer import Linear as PeftLoraLinear
from torch import nn


class LoRALinear(PeftLoraLinear):
    def __init__(self, base: nn.Linear, r: int, alpha: float, dropout: float = 0.0):
        config = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout)
        super().__init__(base, "default", config, r=r, lora_alpha=alpha, lora_dropout=dropout)
        base.requires_grad_(False)  # what peft's model wrapper does for the layers it wraps
