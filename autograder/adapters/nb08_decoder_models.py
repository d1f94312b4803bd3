"""Adapters for notebook 08: GPT-2 and a Llama-style decoder.

Configurations are built with the student's own ``GPT2Config`` / ``DecoderConfig`` (given in the
notebook) from plain fields. Every model is built with the course's reference components
(``autograder.reference``: ``PreNormBlock``, ``RoPE``, ``RotaryGroupedQueryAttention``, ``SwiGLU``,
``ModernBlock``) and PyTorch's ``nn.LayerNorm`` / ``nn.RMSNorm`` injected through the constructor
arguments, so grading never depends on the student's notebooks 02-07 or on other exercises here.
"""

from __future__ import annotations

import numbers

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from autograder.adapters import (
    dict_call_observed,
    first_product_perturbed,
    load,
    need,
    outcome,
    shapes_made,
    summary,
)
from autograder.reference.blocks import PreNormBlock
from autograder.reference.feed_forward import SwiGLU
from autograder.reference.modern import ModernBlock, RotaryGroupedQueryAttention
from autograder.reference.rope import RoPE, frequencies, rope


def _number(value):
    return int(value) if isinstance(value, numbers.Integral) and not isinstance(value, bool) else value


def _model_summary(model) -> dict:
    result = summary(model)
    if "parameters" in result:
        result["state_keys"] = list(model.state_dict().keys())
        head, embedding = getattr(model, "lm_head", None), getattr(model, "wte", getattr(model, "tok_emb", None))
        result["tied"] = bool(
            isinstance(head, nn.Module)
            and isinstance(embedding, nn.Module)
            and getattr(head, "weight", None) is getattr(embedding, "weight", 0)
        )
    return result


@torch.no_grad()
def _logits(model, tokens, padding_mask):
    model.eval()
    return model(tokens) if padding_mask is None else model(tokens, padding_mask)


def _options(token_positions, is_causal) -> dict:
    """The keyword arguments of an attention or block call: only those the check gives."""
    options = {} if token_positions is None else {"token_positions": token_positions}
    return options if is_causal is None else options | {"is_causal": is_causal}


# --- Exercise 1 ------------------------------------------------------------------------


def num_parameters(ns, fields: dict):
    return _number(need(ns, "gpt2_num_parameters")(need(ns, "GPT2Config")(**fields)))


# --- Exercise 2 ------------------------------------------------------------------------


def _gpt2(ns, fields: dict):
    return need(ns, "GPT2")(need(ns, "GPT2Config")(**fields), block=PreNormBlock, norm=nn.LayerNorm)


def gpt2_summary(ns, fields: dict):
    return _model_summary(_gpt2(ns, fields))


def gpt2_logits(ns, fields: dict, state: dict, tokens, padding_mask=None):
    return _logits(load(_gpt2(ns, fields), state), tokens, padding_mask)


@torch.no_grad()
def model_on_meta(ns, model: str, fields: dict, shape: list, padded: bool) -> dict:
    """``GPT2`` or ``ModernDecoder`` moved to PyTorch's meta device and run on meta tokens (shapes only, no
    values): what it raised, or its logits' device and shape. A mask or positions made on the CPU (without
    ``device=tokens.device``) cannot be mixed with meta tensors, so it raises."""
    module = (
        (_gpt2(ns, fields) if model == "GPT2" else _decoder(ns, fields, rope=_RoPEOnTheDeviceOfX)).to("meta").eval()
    )
    tokens = torch.zeros(shape, dtype=torch.long, device="meta")
    arguments = (tokens, torch.ones(shape, dtype=torch.bool, device="meta")) if padded else (tokens,)
    made = []
    result = outcome(lambda: made.append(module(*arguments)))
    output = made[0] if made else None
    return result | {"device": str(getattr(output, "device", "")), "shape": list(getattr(output, "shape", []))}


# --- Exercise 3 ------------------------------------------------------------------------


def causal_lm_loss(ns, logits, labels, ignore_index=None):
    loss = need(ns, "causal_lm_loss")
    return loss(logits, labels) if ignore_index is None else loss(logits, labels, ignore_index=ignore_index)


# --- Exercises 4 and 8 -----------------------------------------------------------------


def convert(ns, function: str, config_class: str, fields: dict, hf_state: dict, tied=()):
    """The student's converted state dict (plain tensors), for the check to load into a reference model; what the
    call did to the caller's dict; and whether its ``lm_head.weight`` is the same tensor as its ``wte.weight``.

    ``tied`` names pairs of keys of ``hf_state`` that share one tensor in Hugging Face's ``state_dict()`` (GPT-2's
    head and ``transformer.wte.weight``); the transfer to this process copied them apart, so they are tied again
    here, as the caller's dict has them."""
    hf_state = dict(hf_state)
    for key, source in tied:
        if key in hf_state and source in hf_state:
            hf_state[key] = hf_state[source].detach()  # a second tensor on the same storage, as state_dict() gives
    config = need(ns, config_class)(**fields)
    result, caller = dict_call_observed(lambda state: need(ns, function)(state, config), hf_state)
    value = {str(k): v for k, v in result.items()} if isinstance(result, dict) else result
    head, wte = (value.get(k) for k in ("lm_head.weight", "wte.weight")) if isinstance(value, dict) else (None, None)
    return {"value": value, "caller": caller, "head_is_wte": _same_tensor(head, wte)}


def _same_tensor(a, b) -> bool:
    """Whether two tensors are views of the same numbers (one object, or detached views of one parameter)."""
    return (
        isinstance(a, torch.Tensor)
        and isinstance(b, torch.Tensor)
        and a.shape == b.shape
        and a.stride() == b.stride()
        and a.storage_offset() == b.storage_offset()
        and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    )


# --- Exercise 5 ------------------------------------------------------------------------


def _rotary_gqa(ns, d_model, num_heads, num_kv_heads, max_seq_len):
    rope = RoPE(d_model // num_heads, max_seq_len)
    return need(ns, "RotaryGQA")(d_model, num_heads, num_kv_heads, rope)


def rotary_gqa_summary(ns, d_model: int, num_heads: int, num_kv_heads: int):
    return summary(_rotary_gqa(ns, d_model, num_heads, num_kv_heads, 64))


def rotary_gqa_attributes(ns, d_model: int, num_heads: int, num_kv_heads: int) -> dict:
    """The attributes the spec names (notebook 13's attention_maps reads them): sizes, and whether ``rope`` is
    the module it was given."""
    rope = RoPE(d_model // num_heads, 64)
    module = need(ns, "RotaryGQA")(d_model, num_heads, num_kv_heads, rope)
    found = {name: getattr(module, name, None) for name in ("num_heads", "num_kv_heads", "head_dim")}
    return {name: value if isinstance(value, int) else repr(value)[:40] for name, value in found.items()} | {
        "rope_is_given": getattr(module, "rope", None) is rope
    }


@torch.no_grad()
def rotary_gqa_forward(
    ns, d_model: int, num_heads: int, num_kv_heads: int, state: dict, x, mask=None, token_positions=None, is_causal=None
):
    module = load(_rotary_gqa(ns, d_model, num_heads, num_kv_heads, 64), state).eval()
    return module(x, mask, **_options(token_positions, is_causal))


def _sdpa_calls(module, x, mask, token_positions, is_causal) -> list:
    """The ``attn_mask`` (its shape, or None) and ``is_causal`` of every call to
    ``F.scaled_dot_product_attention`` during one forward, however the function is reached (a TorchFunctionMode
    sees the call, not the name it was called by)."""
    calls = []

    class Record(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if getattr(func, "__name__", "") == "scaled_dot_product_attention":
                given = kwargs.get("attn_mask", args[3] if len(args) > 3 else None)
                causal = kwargs.get("is_causal", args[5] if len(args) > 5 else False)
                calls.append(
                    {
                        "attn_mask": list(given.shape) if isinstance(given, torch.Tensor) else repr(given)[:40],
                        "is_causal": causal if isinstance(causal, bool) else repr(causal)[:40],
                    }
                )
            return func(*args, **kwargs)

    with torch.no_grad(), Record():
        module(x, mask, **_options(token_positions, is_causal))
    return calls


def rotary_gqa_sdpa_calls(
    ns, d_model: int, num_heads: int, num_kv_heads: int, x, mask=None, token_positions=None, is_causal=None
) -> list:
    return _sdpa_calls(
        _rotary_gqa(ns, d_model, num_heads, num_kv_heads, 64).eval(), x, mask, token_positions, is_causal
    )


# --- Exercise 6 ------------------------------------------------------------------------


def _modern_block(ns, fields: dict):
    config = need(ns, "DecoderConfig")(**fields)
    rope = RoPE(config.d_model // config.n_heads, config.max_seq_len, config.rope_base)
    return need(ns, "ModernBlock")(
        config, rope, attention=RotaryGroupedQueryAttention, feed_forward=SwiGLU, norm=nn.RMSNorm
    )


def modern_block_summary(ns, fields: dict):
    return summary(_modern_block(ns, fields))


@torch.no_grad()
def modern_block_forward(ns, fields: dict, state: dict, x, mask=None, token_positions=None, is_causal=None):
    module = load(_modern_block(ns, fields), state).eval()
    return module(x, mask, **_options(token_positions, is_causal))


# --- Exercise 7 ------------------------------------------------------------------------


def _decoder(ns, fields: dict, rope=RoPE):
    return need(ns, "ModernDecoder")(need(ns, "DecoderConfig")(**fields), block=ModernBlock, norm=nn.RMSNorm, rope=rope)


class _RoPEOnTheDeviceOfX(RoPE):
    """The reference RoPE with its frequencies made on the device of ``x`` (the reference makes them on the CPU), so
    that on the meta device only the student's own tensors can be on the wrong device."""

    def forward(self, x, token_positions):
        theta = frequencies(x.shape[-1], self.base).to(x.device)
        return rope(x, token_positions, self.base, theta=theta).to(x.dtype)


def decoder_summary(ns, fields: dict):
    return _model_summary(_decoder(ns, fields))


def decoder_logits(ns, fields: dict, state: dict, tokens, padding_mask=None):
    return _logits(load(_decoder(ns, fields), state), tokens, padding_mask)


@torch.no_grad()
def decoder_observed(ns, fields: dict, tokens, padding_mask=None) -> dict:
    """What the blocks of a ``ModernDecoder`` are given: the rotary modules, and the positions, the mask (its
    shape, or None) and ``is_causal`` (False when not given) in each forward.

    Recording stand-ins for ``rope`` and ``block`` (reference parts underneath) observe what the logits do
    not show: whether every block shares ONE rotary module, which positions reach the blocks, and whether a
    purely causal mask arrives as ``is_causal=True`` without a tensor.
    """
    seen = {"ropes_made": 0, "block_ropes": [], "positions": [], "masks": [], "is_causal": []}

    def rope(*args, **kwargs):
        seen["ropes_made"] += 1
        return RoPE(*args, **kwargs)

    def block(config, rope_module, *args, **kwargs):
        module = ModernBlock(config, rope_module, *args, **kwargs)
        seen["block_ropes"].append(id(rope_module))
        forward = module.forward

        def recording_forward(x, mask=None, token_positions=None, *rest, **named):
            seen["positions"].append(token_positions)
            seen["masks"].append(list(mask.shape) if isinstance(mask, torch.Tensor) else repr(mask)[:40])
            seen["is_causal"].append(rest[0] if rest else named.get("is_causal", False))
            return forward(x, mask, token_positions, *rest, **named)

        module.forward = recording_forward
        return module

    model = need(ns, "ModernDecoder")(need(ns, "DecoderConfig")(**fields), block=block, norm=nn.RMSNorm, rope=rope)
    model(tokens) if padding_mask is None else model(tokens, padding_mask)
    return {
        "ropes_made": seen["ropes_made"],
        "blocks": len(seen["block_ropes"]),
        "distinct_ropes": len(set(seen["block_ropes"])),
        "positions": seen["positions"],
        "masks": seen["masks"],
        "is_causal": [value if isinstance(value, bool) else repr(value)[:40] for value in seen["is_causal"]],
    }


# --- Exercise 9 ------------------------------------------------------------------------


def fuse_qkv(ns, state: dict):
    """``fuse_qkv(state)``'s result, and what the call did to the caller's dict ("the result is a new dict")."""
    result, caller = dict_call_observed(need(ns, "fuse_qkv"), state)
    value = {str(k): v for k, v in result.items()} if isinstance(result, dict) else result
    return {"value": value, "caller": caller}


def _fused(ns, d_model, num_heads, num_kv_heads, rope=None):
    rope = RoPE(d_model // num_heads, 64) if rope is None else rope
    return need(ns, "FusedRotaryGQA")(d_model, num_heads, num_kv_heads, rope)


def fused_summary(ns, d_model: int, num_heads: int, num_kv_heads: int):
    return summary(_fused(ns, d_model, num_heads, num_kv_heads))


def fused_attributes(ns, d_model: int, num_heads: int, num_kv_heads: int) -> dict:
    rope = RoPE(d_model // num_heads, 64)
    module = _fused(ns, d_model, num_heads, num_kv_heads, rope)
    found = {name: getattr(module, name, None) for name in ("num_heads", "num_kv_heads", "head_dim")}
    return {name: value if isinstance(value, int) else repr(value)[:40] for name, value in found.items()} | {
        "rope_is_given": getattr(module, "rope", None) is rope
    }


@torch.no_grad()
def fused_forward(
    ns, d_model: int, num_heads: int, num_kv_heads: int, state: dict, x, mask=None, token_positions=None, is_causal=None
):
    module = load(_fused(ns, d_model, num_heads, num_kv_heads), state).eval()
    return module(x, mask, **_options(token_positions, is_causal))


def fused_sdpa_calls(
    ns, d_model: int, num_heads: int, num_kv_heads: int, x, mask=None, token_positions=None, is_causal=None
) -> list:
    return _sdpa_calls(_fused(ns, d_model, num_heads, num_kv_heads).eval(), x, mask, token_positions, is_causal)


def fused_forward_perturbed(ns, d_model: int, num_heads: int, num_kv_heads: int, state: dict, x, mask, delta):
    """``FusedRotaryGQA``'s output when ``delta`` is added to the result of the first matrix product with
    ``delta.shape[-1]`` ((num_heads + 2 * num_kv_heads) * head_dim) output features and ``delta.numel()``
    numbers, however it is computed (``qkv_proj(x)``, ``F.linear``, ``@``)."""
    module = load(_fused(ns, d_model, num_heads, num_kv_heads), state).eval()
    with torch.no_grad(), first_product_perturbed(delta) as done:
        output = module(x, mask)
    return {"output": output, "perturbed": bool(done)}


@torch.no_grad()
def fused_shapes_made(ns, d_model: int, num_heads: int, num_kv_heads: int, x) -> list:
    """The shapes of the tensors torch functions made during one forward (causal mask), for "one product"."""
    module = _fused(ns, d_model, num_heads, num_kv_heads).eval()
    mask = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril()
    return shapes_made(module, x, mask)["shapes"]
