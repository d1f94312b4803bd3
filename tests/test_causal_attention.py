"""The causal fast path (no mask tensor, ``is_causal=True``: flash attention possible on a GPU) equals the
explicit boolean mask, in outputs and gradients (float32 on the CPU, atol 1e-5), for the reference components
and for the program's reference model (``tinystories.library.LibraryDecoder``); padded batches keep the
explicit mask; with a KV cache (fewer queries than keys) the reference builds the offset mask itself, since
SDPA's ``is_causal`` anchors the triangle top-left.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from autograder.reference.configs import DecoderConfig as ReferenceConfig
from autograder.reference.decoders import LlamaDecoder
from autograder.reference.kv_cache import KVCache
from autograder.reference.modern import RotaryGroupedQueryAttention
from autograder.reference.rope import RoPE as ReferenceRoPE
from tinystories.library import LibraryDecoder

ATOL = 1e-5


def _causal(length: int) -> torch.Tensor:
    return torch.ones(length, length, dtype=torch.bool).tril()


def _outputs_and_grads(module, x, *args, **kwargs):
    x = x.clone().requires_grad_(True)
    out = module(x, *args, **kwargs)
    grads = torch.autograd.grad((out * out).sum(), [x, *module.parameters()])
    return out.detach(), grads


def _assert_same(a, b):
    (out_a, grads_a), (out_b, grads_b) = a, b
    torch.testing.assert_close(out_a, out_b, atol=ATOL, rtol=0)
    for ga, gb in zip(grads_a, grads_b, strict=True):
        torch.testing.assert_close(ga, gb, atol=ATOL, rtol=0)


class SDPACalls(TorchFunctionMode):
    """Records (attn_mask is given, is_causal) of every F.scaled_dot_product_attention call."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            mask = kwargs.get("attn_mask", args[3] if len(args) > 3 else None)
            self.calls.append((mask is not None, bool(kwargs.get("is_causal", False))))
        return func(*args, **kwargs)


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_attention_is_causal_equals_the_causal_mask(kv_heads):
    torch.manual_seed(0)
    x = torch.randn(2, 7, 32)
    attention = RotaryGroupedQueryAttention(32, 4, kv_heads, ReferenceRoPE(8, 16))
    _assert_same(_outputs_and_grads(attention, x, None, is_causal=True), _outputs_and_grads(attention, x, _causal(7)))


def test_reference_refuses_a_mask_with_is_causal():
    attention = RotaryGroupedQueryAttention(32, 4, 2, ReferenceRoPE(8, 16))
    with pytest.raises(ValueError, match="mask=None"):
        attention(torch.randn(1, 3, 32), _causal(3), is_causal=True)


def _decoders():
    torch.manual_seed(1)
    fields = dict(vocab_size=50, d_model=32, n_layers=2, n_heads=4, d_ff=48, max_seq_len=16, n_kv_heads=2)
    return LlamaDecoder(ReferenceConfig(**fields)), LibraryDecoder(ReferenceConfig(**fields))


@pytest.mark.parametrize("which", [0, 1], ids=["reference", "library"])
def test_decoder_fast_path_equals_the_explicit_mask(which):
    """No padding: is_causal=True and no mask; an all-True padding mask takes the explicit path. Same logits and
    gradients; and SDPA is called as described."""
    model = _decoders()[which]
    tokens = torch.randint(0, 50, (3, 9), generator=torch.Generator().manual_seed(2))
    everything_real = torch.ones(3, 9, dtype=torch.bool)
    results = []
    for padding, expected in ((None, (False, True)), (everything_real, (True, False))):
        with SDPACalls() as seen:
            logits = model(tokens) if padding is None else model(tokens, padding)
        assert seen.calls == [expected] * 2, seen.calls  # (mask given, is_causal) in each of the 2 layers
        grads = torch.autograd.grad(logits.square().mean(), list(model.parameters()))
        results.append((logits.detach(), grads))
    _assert_same(*results)


def test_reference_cache_uses_the_offset_mask():
    """With cached keys SDPA's is_causal would hide them (top-left triangle): the reference builds
    ones(q_len, k_len).tril(k_len - q_len) instead, and decoding with a cache gives the full run's logits."""
    torch.manual_seed(3)
    attention = RotaryGroupedQueryAttention(32, 4, 2, ReferenceRoPE(8, 16)).eval()
    x = torch.randn(2, 8, 32)
    with torch.no_grad():
        full = attention(x, None, is_causal=True)
        cache = KVCache(1)
        attention(x[:, :5], None, torch.arange(5), cache=cache, layer=0, is_causal=True)
        with SDPACalls() as seen:
            last = attention(x[:, 5:], None, torch.arange(5, 8), cache=cache, layer=0, is_causal=True)
    assert seen.calls == [(True, False)]
    torch.testing.assert_close(last, full[:, 5:], atol=ATOL, rtol=0)

    model = _decoders()[0].eval()
    tokens = torch.randint(0, 50, (1, 9), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        full_logits = model(tokens)
        cache = KVCache(2)
        steps = [model(tokens[:, :6], cache=cache)] + [model(tokens[:, i : i + 1], cache=cache) for i in range(6, 9)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full_logits, atol=ATOL, rtol=0)


def test_the_solutions_decoder_is_one_graph_for_torch_compile():
    """RoPE's range check reads the positions' values (a graph break, and a GPU synchronisation); it is skipped
    while torch.compile traces, so the whole forward is one graph."""
    model = _decoders()[1]
    explanation = torch._dynamo.explain(model)(torch.randint(0, 50, (2, 9)))
    assert explanation.graph_break_count == 0, [str(b.reason) for b in explanation.break_reasons]
    assert explanation.graph_count == 1
