"""The library's parts in the places of the course's: what ``--stack reference`` trains and samples with.

No answer of solutions/ ships in the package (issue 54 §4), so where PyTorch or Hugging Face has a part, the
reference is theirs:

- ``LibraryDecoder``: notebook 08's modern decoder assembled from ``nn.Embedding``, ``nn.RMSNorm``, Llama's
  rotation (``apply_rotary_pos_emb``), ``F.scaled_dot_product_attention`` (grouped-query heads through
  ``enable_gqa``) and a SiLU-gated MLP, under the parameter names of the course's ``ModernDecoder``, so a checkpoint
  of either stack loads into the other. With ``cache=`` it is also notebook 11's ``CachedDecoder``.
- ``LibraryCache``: Hugging Face's ``DynamicCache`` behind notebook 11's ``KVCache`` interface (``update(layer, k,
  v)``, ``length``), so it serves a student's ``CachedDecoder`` as well as the decoder here.
- ``sample_next``: Hugging Face's logits processors (temperature, top-k, top-p, in ``generate``'s order), then
  ``torch.multinomial``.
- ``flops_per_token``: what ``torch.utils.flop_counter.FlopCounterMode`` counts in a forward and backward pass of
  the decoder, on PyTorch's meta device (shapes only: no memory, no arithmetic), attention as explicit matmuls.
- ``rank_micro_batches``: ``Tensor.tensor_split``, twice.
- ``generate_in_segments``: the run's stories by brute force, without a cache: a full forward pass over the current
  segment for each new token, the segments of notebook 13's ``generate_with_cache``.
- ``mfu`` and ``bits_per_byte``: their closed forms, definitions rather than answers.

The schedule and the batches are the checks' own (``autograder.reference.training``), the oracles notebook 10's
exercises are graded against.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from autograder.reference.configs import DecoderConfig  # the dataclass notebook 08 gives its students

__all__ = ["DecoderConfig", "LibraryCache", "LibraryDecoder", "bits_per_byte", "flops_per_token",
           "generate_in_segments", "mfu", "rank_micro_batches", "sample_next"]


def _llama_tables(head_dim: int, max_seq_len: int, base: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [max_seq_len, head_dim] of the angles m * base^(-2i/head_dim) in Llama's layout (each angle twice,
    as ``LlamaRotaryEmbedding`` lays them out), computed in float64 and kept in float32."""
    theta = float(base) ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.outer(torch.arange(max_seq_len, dtype=torch.float64), theta)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos().float(), angles.sin().float()


class LibraryDecoder(nn.Module):
    """Llama from PyTorch's and Hugging Face's parts: ``forward(tokens, padding_mask=None, cache=None) -> logits``.

    The course rotates interleaved pairs (2i, 2i+1), Llama split halves (i, i + d/2): the queries and keys are read
    even coordinates first (``self.halves``), which turns the one layout into the other, and rotated by Llama. They are
    not read back: attention scores only see q . k, which reading both alike does not change (a cache therefore holds
    keys in the split-halves layout).
    """

    def __init__(self, config):
        super().__init__()
        self.config = config
        d, heads = config.d_model, config.n_heads
        self.kv_heads, self.head_dim = config.n_kv_heads or heads, d // heads
        kv_width = self.kv_heads * self.head_dim
        self.tok_emb = nn.Embedding(config.vocab_size, d)
        # Containers named as the course's modules, so the parameters are: blocks.i.norm1.weight,
        # blocks.i.attn.{q,k,v,out}_proj.weight, blocks.i.norm2.weight, blocks.i.ffn.{w1,w3,w2}.weight.
        self.blocks = nn.ModuleList(
            nn.ModuleDict({
                "norm1": nn.RMSNorm(d, eps=config.norm_eps),
                "attn": nn.ModuleDict({
                    "q_proj": nn.Linear(d, d, bias=False),
                    "k_proj": nn.Linear(d, kv_width, bias=False),
                    "v_proj": nn.Linear(d, kv_width, bias=False),
                    "out_proj": nn.Linear(d, d, bias=False),
                }),
                "norm2": nn.RMSNorm(d, eps=config.norm_eps),
                "ffn": nn.ModuleDict({
                    "w1": nn.Linear(d, config.d_ff, bias=False),  # gate
                    "w3": nn.Linear(d, config.d_ff, bias=False),  # up
                    "w2": nn.Linear(config.d_ff, d, bias=False),  # down
                }),
            })
            for _ in range(config.n_layers)
        )  # fmt: skip
        self.norm = nn.RMSNorm(d, eps=config.norm_eps)
        self.lm_head = nn.Linear(d, config.vocab_size, bias=False)
        cos, sin = _llama_tables(self.head_dim, config.max_seq_len, config.rope_base)
        self.register_buffer("cos", cos, persistent=False)  # not in the state dict: the course's has no tables
        self.register_buffer("sin", sin, persistent=False)
        halves = torch.argsort(torch.arange(self.head_dim) % 2, stable=True)  # even coordinates, then odd
        self.register_buffer("halves", halves, persistent=False)

    def _attend(self, attn, x, positions, mask, is_causal, cache, layer):
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        batch, new, _ = x.shape
        q = attn["q_proj"](x).view(batch, new, -1, self.head_dim).transpose(1, 2)
        k = attn["k_proj"](x).view(batch, new, self.kv_heads, self.head_dim).transpose(1, 2)
        v = attn["v_proj"](x).view(batch, new, self.kv_heads, self.head_dim).transpose(1, 2)
        # Llama's rotation in float32 whatever the autocast dtype, as the course's RoPE computes it.
        q, k = apply_rotary_pos_emb(q[..., self.halves].float(), k[..., self.halves].float(), self.cos[positions],
                                    self.sin[positions], unsqueeze_dim=0 if positions.dim() == 1 else 1)
        q, k = q.to(v.dtype), k.to(v.dtype)
        if cache is not None:
            k, v = cache.update(layer, k, v)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, enable_gqa=True)
        return attn["out_proj"](out.transpose(1, 2).reshape(batch, new, -1))

    def forward(self, tokens: torch.Tensor, padding_mask: torch.Tensor | None = None, cache=None) -> torch.Tensor:
        """tokens [batch, new] -> logits [batch, new, vocab]. Without a padding mask or a cache: causal attention with
        no mask tensor (SDPA may pick a flash kernel). ``padding_mask`` [batch, new], True = a real token: positions
        count real tokens. With a cache: positions continue from ``cache.length`` and the new tokens see every
        cached one."""
        new, device = tokens.shape[1], tokens.device
        offset = 0 if cache is None else cache.length
        positions, mask, is_causal = torch.arange(offset, offset + new, device=device), None, cache is None
        if cache is not None:
            mask = torch.ones(new, offset + new, dtype=torch.bool, device=device).tril(diagonal=offset)
        elif padding_mask is not None:
            positions = (padding_mask.long().cumsum(-1) - 1).clamp(min=0)
            causal = torch.ones(new, new, dtype=torch.bool, device=device).tril()
            mask, is_causal = causal & padding_mask[:, None, None, :], False
        x = self.tok_emb(tokens)
        for layer, block in enumerate(self.blocks):
            x = x + self._attend(block["attn"], block["norm1"](x), positions, mask, is_causal, cache, layer)
            ffn, h = block["ffn"], block["norm2"](x)
            x = x + ffn["w2"](F.silu(ffn["w1"](h)) * ffn["w3"](h))
        return self.lm_head(self.norm(x))


class LibraryCache:
    """Hugging Face's ``DynamicCache`` with notebook 11's ``KVCache`` interface: ``update(layer, k, v)`` appends k, v
    [batch, kv_heads, new, head_dim] to ``layer`` and returns all it holds; ``length`` counts layer 0's positions."""

    def __init__(self, n_layers: int):
        from transformers import DynamicCache

        self.n_layers, self.store = n_layers, DynamicCache()

    @property
    def length(self) -> int:
        return self.store.get_seq_length(0)

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.store.update(k, v, layer)


def sample_next(logits: torch.Tensor, *, temperature: float = 1.0, top_k: int | None = None,
                top_p: float | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
    """One token per row of logits [batch, vocab] -> [batch], after Hugging Face's temperature, top-k and top-p
    processors; temperature 0 is the greedy token (Hugging Face's processors take only positive ones)."""
    from transformers.generation.logits_process import (
        LogitsProcessorList,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    if temperature == 0:
        return logits.argmax(dim=-1)
    processors = LogitsProcessorList([TemperatureLogitsWarper(temperature)])
    if top_k is not None:
        processors.append(TopKLogitsWarper(top_k))
    if top_p is not None:
        processors.append(TopPLogitsWarper(top_p))
    scores = processors(None, logits)  # these processors read only the scores, not the tokens so far
    return torch.multinomial(scores.softmax(dim=-1), 1, generator=generator).squeeze(-1)


def flops_per_token(config, context_length: int) -> int:
    """Training FLOPs per token (forward and backward) of a ``LibraryDecoder`` of ``config`` on sequences of
    ``context_length`` tokens, as FlopCounterMode counts them: every matmul, attention's q k^T and weights @ v over
    the whole T x T (SDPA's math backend spells them out; the fused kernels have no FLOP formula on the CPU)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):
        model = LibraryDecoder(config)
        tokens = torch.zeros(1, context_length, dtype=torch.long)
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(tokens).sum().backward()
    return counter.get_total_flops() // context_length


def mfu(tokens_per_second: float, flops_per_token: int, peak_flops: float) -> float:
    """Model FLOPs utilisation, by its definition: the FLOPs the training does per second over the peak."""
    return tokens_per_second * flops_per_token / peak_flops


def bits_per_byte(loss: float, tokens: int, n_bytes: int) -> float:
    """Nats per token to bits per byte: the whole text's nats (loss x tokens), in bits (/ ln 2), per byte."""
    return loss * tokens / math.log(2) / n_bytes


def rank_micro_batches(batch: torch.Tensor, rank: int, world_size: int, accumulation_steps: int) -> list:
    """Rank ``rank``'s contiguous share of ``batch`` in ``accumulation_steps`` equal pieces (``tensor_split``)."""
    if batch.shape[0] % (world_size * accumulation_steps):
        raise ValueError(f"{batch.shape[0]} sequences do not split evenly into {world_size} ranks of "
                         f"{accumulation_steps} micro-batches")
    return list(batch.tensor_split(world_size)[rank].tensor_split(accumulation_steps))


@torch.no_grad()
def generate_in_segments(model, prompt: torch.Tensor, *, max_new_tokens: int, window: int, new_cache=None,
                         eos_id: int | None = None, pick) -> torch.Tensor:
    """prompt [length] -> the prompt and the new tokens, 1-D, each token picked from a full forward pass (no cache;
    ``new_cache`` is not used) over the current segment: the prompt's last ``window`` tokens, then, each time the
    segment holds ``window`` tokens, the last ``window // 2``. The tokens notebook 13's cached loop gives."""
    tokens = prompt.clone()
    first = max(0, len(tokens) - window)  # where the current segment starts
    for _ in range(max_new_tokens):
        segment = tokens[first:]
        token = pick(model(segment[None])[:, -1])[0]
        tokens = torch.cat([tokens, token.view(1).to(tokens.dtype)])
        if eos_id is not None and int(token) == eos_id:
            break
        if len(segment) >= window:
            first = len(tokens) - window // 2
    return tokens
