"""Adapters for notebook 13: bits per byte, FLOPs per token and MFU, the ranks' micro-batches, attention maps.

``flops_per_token`` gets the reference ``DecoderConfig`` and ``attention_maps`` the reference decoder
(``autograder.reference``), loaded with the checker's weights, so grading never rests on notebook 08.
"""

from __future__ import annotations

import torch

from autograder.adapters import need, outcome
from autograder.reference.configs import DecoderConfig
from autograder.reference.decoders import LlamaDecoder


def bits_per_byte(ns, loss: float, tokens: int, n_bytes: int):
    return need(ns, "bits_per_byte")(loss, tokens, n_bytes)


def flops(ns, fields: dict, context_length: int):
    return need(ns, "flops_per_token")(DecoderConfig(**fields), context_length)


def mfu(ns, tokens_per_second: float, flops_per_token: int, peak_flops: float):
    return need(ns, "mfu")(tokens_per_second, flops_per_token, peak_flops)


def micro_batches(ns, batch: torch.Tensor, world_size: int, accumulation_steps: int) -> list:
    """Every rank's micro-batches (a list of tensors per rank), or a sentence saying what came back instead."""
    function = need(ns, "rank_micro_batches")
    ranks = []
    for rank in range(world_size):
        value = function(batch.clone(), rank, world_size, accumulation_steps)
        if not isinstance(value, list | tuple):
            ranks.append(f"returned a {type(value).__name__}, expected a list of tensors")
        elif not all(isinstance(part, torch.Tensor) for part in value):
            ranks.append("returned a list that holds something other than tensors")
        else:
            ranks.append([part.clone() for part in value])
    return ranks


def micro_batches_error(ns, batch: torch.Tensor, world_size: int, accumulation_steps: int) -> dict:
    return outcome(need(ns, "rank_micro_batches"), batch, 0, world_size, accumulation_steps)


@torch.no_grad()
def maps(ns, fields: dict, state: dict, tokens: torch.Tensor) -> dict:
    """The student's ``attention_maps`` on the reference decoder holding ``state``, and what it left behind."""
    attention_maps = need(ns, "attention_maps")
    model = LlamaDecoder(DecoderConfig(**fields)).eval()
    model.load_state_dict(state)
    before = model(tokens)
    value = attention_maps(model, tokens)
    hooks = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())
    return {"maps": value, "hooks_left": hooks, "logits_unchanged": bool(torch.equal(model(tokens), before))}
