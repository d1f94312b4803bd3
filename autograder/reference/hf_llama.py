"""Hugging Face's Llama in the course's names: a tiny config and the weight mapping.

Shared by the checks of notebook 08 (its decoder against ``LlamaForCausalLM``) and notebook 13 (attention
maps against ``output_attentions``). ``fields`` is a dict with the fields of ``DecoderConfig``. HF rotates
split halves, the course interleaved pairs, so the q and k rows are permuted per head:
``course = hf.view(heads, head_dim, d)[:, argsort(p)]`` with ``p = halves_permutation(head_dim)``.
Attention scores are unchanged by this permutation (it permutes q and k alike), so per-head attention
weights of the two models are the same.
"""

from __future__ import annotations

import torch

from autograder.reference.rope import halves_permutation


def transformers_quiet():
    import transformers

    transformers.logging.set_verbosity_error()
    return transformers


def hf_config(fields: dict, attn_implementation: str = "eager"):
    """A ``LlamaConfig`` with the course's fields (untied head, no biases)."""
    T = transformers_quiet()
    config = T.LlamaConfig(
        vocab_size=fields["vocab_size"],
        hidden_size=fields["d_model"],
        intermediate_size=fields["d_ff"],
        num_hidden_layers=fields["n_layers"],
        num_attention_heads=fields["n_heads"],
        num_key_value_heads=fields.get("n_kv_heads") or fields["n_heads"],
        max_position_embeddings=fields["max_seq_len"],
        rms_norm_eps=fields.get("norm_eps", 1e-5),
        rope_parameters={"rope_type": "default", "rope_theta": fields.get("rope_base", 10000.0)},
        tie_word_embeddings=False,
        attention_bias=False,
        mlp_bias=False,
        bos_token_id=0,
        eos_token_id=0,
    )
    config._attn_implementation = attn_implementation
    return config


def interleaved(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """HF's q/k rows (split halves per head) in the course's order (interleaved pairs)."""
    head_dim = weight.shape[0] // heads
    order = torch.argsort(halves_permutation(head_dim))
    return weight.view(heads, head_dim, -1)[:, order].reshape(weight.shape).contiguous()


def attention_state(hf_state: dict, prefix: str, heads: int, kv: int) -> dict:
    return {
        "q_proj.weight": interleaved(hf_state[f"{prefix}q_proj.weight"], heads),
        "k_proj.weight": interleaved(hf_state[f"{prefix}k_proj.weight"], kv),
        "v_proj.weight": hf_state[f"{prefix}v_proj.weight"].clone(),
        "out_proj.weight": hf_state[f"{prefix}o_proj.weight"].clone(),
    }


def block_state(hf_state: dict, prefix: str, heads: int, kv: int) -> dict:
    state = {f"attn.{k}": v for k, v in attention_state(hf_state, f"{prefix}self_attn.", heads, kv).items()}
    for ours, theirs in (("w1", "gate_proj"), ("w3", "up_proj"), ("w2", "down_proj")):
        state[f"ffn.{ours}.weight"] = hf_state[f"{prefix}mlp.{theirs}.weight"].clone()
    state["norm1.weight"] = hf_state[f"{prefix}input_layernorm.weight"].clone()
    state["norm2.weight"] = hf_state[f"{prefix}post_attention_layernorm.weight"].clone()
    return state


def course_state(hf_state: dict, fields: dict) -> dict:
    """A ``LlamaForCausalLM`` state dict in the names of the course's decoder (``tok_emb``, ``blocks``, ...)."""
    heads, kv = fields["n_heads"], fields.get("n_kv_heads") or fields["n_heads"]
    state = {
        "tok_emb.weight": hf_state["model.embed_tokens.weight"],
        "norm.weight": hf_state["model.norm.weight"],
        "lm_head.weight": hf_state["lm_head.weight"],
    }
    for i in range(fields["n_layers"]):
        state |= {f"blocks.{i}.{k}": v for k, v in block_state(hf_state, f"model.layers.{i}.", heads, kv).items()}
    return state
