"""Notebook 13's exercise functions, kept here until notebook 13's solutions exist.

At merge the lead exports them from solutions/13_tinystories into tinystories/course.py (a row in
tools/export_course.py's EXPORTS) and changes the one import line in each module that uses them.
Signatures and meanings are those of /work/specs/program.md.
"""

from __future__ import annotations

import math

import torch


def bits_per_byte(loss: float, tokens: int, n_bytes: int) -> float:
    """Mean loss in nats per token over `tokens` tokens that encode `n_bytes` bytes, as bits per byte.

    Unlike the loss, this does not depend on the tokenizer, so runs with different vocabularies compare.
    """
    return loss * tokens / (n_bytes * math.log(2))


def flops_per_token(config, context_length: int) -> int:
    """Training FLOPs per token of the course's ModernDecoder: 3 x forward (forward + backward).

    forward = 2 x (weights of every matmul: q, k, v, out, w1, w2, w3, lm_head; not the embedding, not
    norms) + 4 x n_layers x context_length x d_model (QK^T and weights @ V, no causal saving).
    """
    d, n_layers = config.d_model, config.n_layers
    kv_dim = (config.n_kv_heads or config.n_heads) * (d // config.n_heads)
    per_layer = 2 * d * d + 2 * d * kv_dim + 3 * d * config.d_ff
    weights = n_layers * per_layer + d * config.vocab_size
    forward = 2 * weights + 4 * n_layers * context_length * d
    return 3 * forward


def mfu(tokens_per_second: float, flops_per_token: int, peak_flops: float) -> float:
    """Model FLOPs utilisation: the fraction of the hardware's peak that the model's FLOPs use."""
    return tokens_per_second * flops_per_token / peak_flops


def rank_micro_batches(batch: torch.Tensor, rank: int, world_size: int, accumulation_steps: int) -> list[torch.Tensor]:
    """This rank's contiguous rows of the global batch, in `accumulation_steps` equal micro-batches."""
    n = batch.shape[0]
    if n % (world_size * accumulation_steps):
        raise ValueError(f"a global batch of {n} rows does not split evenly into {world_size} ranks x "
                         f"{accumulation_steps} micro-batches; make the batch size a multiple of "
                         f"{world_size * accumulation_steps}")
    per_rank = n // world_size
    rows = batch[rank * per_rank:(rank + 1) * per_rank]
    return list(rows.split(per_rank // accumulation_steps))


@torch.no_grad()
def attention_maps(model, tokens: torch.Tensor) -> torch.Tensor:
    """[n_layers, batch, n_heads, T, T] causal attention weights of a course ModernDecoder, in float32.

    A forward hook on each block's `attn` sees its input; the weights are recomputed from its q_proj,
    k_proj and rope as softmax(q k^T / sqrt(head_dim)) under the causal mask (the model's SDPA call
    never materialises them).
    """
    maps, handles = [], []

    def hook(attn, args, kwargs, output):
        x = args[0] if args else kwargs["x"]
        positions = args[2] if len(args) > 2 else kwargs.get("token_positions")
        batch, length, _ = x.shape
        if positions is None:
            positions = torch.arange(length, device=x.device)
        if positions.dim() == 2:
            positions = positions[:, None, :]

        def heads(t, n):
            return t.view(batch, length, n, attn.head_dim).transpose(1, 2)

        q = attn.rope(heads(attn.q_proj(x), attn.num_heads), positions).float()
        k = attn.rope(heads(attn.k_proj(x), attn.num_kv_heads), positions).float()
        k = k.repeat_interleave(attn.num_heads // attn.num_kv_heads, dim=1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(attn.head_dim)
        causal = torch.ones(length, length, dtype=torch.bool, device=x.device).tril()
        maps.append(torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1))

    try:
        for block in model.blocks:
            handles.append(block.attn.register_forward_hook(hook, with_kwargs=True))
        model(tokens)
    finally:
        for handle in handles:
            handle.remove()
    return torch.stack(maps)
