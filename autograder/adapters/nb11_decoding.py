"""Adapters for notebook 11: samplers, generation loops, beam search, the KV cache, continuous batching.

Each exercise is graded on its own: while ``sample_next`` runs, the notebook's ``apply_temperature``,
``top_k_filter`` and ``top_p_filter`` are the course's (``autograder.reference.sampling``), restored
afterwards; the generation loops get the course's greedy choice through their ``pick`` argument; the
cached decoder is built with the course's cache-aware ``ModernBlock``, ``RoPE`` and ``nn.RMSNorm``, and
run with the course's ``KVCache``; the cached attention gets the course's ``RoPE`` and ``KVCache``; the
scheduler drives the course's engines. Models are built here from plain data (a lookup table, or a
configuration and a state dict), and each adapter reports what the student's code returned and what it
asked of the model or the engine.
"""

from __future__ import annotations

import numbers

import torch
from torch import nn

from autograder.adapters import given, need, outcome, summary
from autograder.reference import sampling
from autograder.reference.batching import RecomputeEngine, SlotEngine
from autograder.reference.configs import DecoderConfig
from autograder.reference.decoders import LlamaDecoder
from autograder.reference.kv_cache import KVCache
from autograder.reference.modern import ModernBlock
from autograder.reference.rope import RoPE
from autograder.reference.toy import PrefixTableModel

# --- Exercises 1-3 -----------------------------------------------------------------------


def greedy_of(ns, logits):
    return need(ns, "greedy")(logits)


def temperature_of(ns, logits, temperature):
    given = logits.clone()
    output = need(ns, "apply_temperature")(given, temperature)
    return {"output": output, "input_changed": not torch.equal(given, logits)}


def temperature_refuses(ns, logits, temperature):
    return outcome(need(ns, "apply_temperature"), logits.clone(), temperature)


def filter_of(ns, name: str, logits, value):
    given = logits.clone()
    output = need(ns, name)(given, value)
    return {"output": output, "input_changed": not torch.equal(given, logits)}


# --- Exercise 4 --------------------------------------------------------------------------


def sample_counts(ns, logits, draws: int, kwargs: dict, seed: int):
    """Counts of each token over ``draws`` draws per row of ``logits`` [rows, vocab], in one call, twice
    with generators seeded alike; the course's filters stand in for the notebook's."""
    rows, vocab = logits.shape
    batch = logits.repeat_interleave(draws, dim=0)
    results = []
    with given(
        ns,
        apply_temperature=sampling.apply_temperature,
        top_k_filter=sampling.top_k_filter,
        top_p_filter=sampling.top_p_filter,
        greedy=sampling.greedy,
    ):
        for _ in range(2):
            out = need(ns, "sample_next")(batch.clone(), **kwargs, generator=torch.Generator().manual_seed(seed))
            results.append(out)
    first = results[0]
    if not isinstance(first, torch.Tensor) or first.shape != (rows * draws,) or first.dtype.is_floating_point:
        return {"draws": first, "counts": None}
    if first.min() < 0 or first.max() >= vocab:
        return {"draws": first, "counts": None, "out_of_range": True}
    counts = torch.stack(
        [torch.bincount(first[r * draws : (r + 1) * draws].long(), minlength=vocab) for r in range(rows)]
    )
    return {
        "counts": counts,
        "repeatable": isinstance(results[1], torch.Tensor) and torch.equal(results[0], results[1]),
    }


# --- Exercises 5 and 6: models that report how they were called --------------------------


class _Watched(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model, self.calls = model, []

    def forward(self, tokens, padding_mask=None):
        self.calls.append(
            {
                "shape": list(tokens.shape),
                "tokens": tokens.clone(),
                "mask": None if padding_mask is None else padding_mask.clone(),
            }
        )
        return self.model(tokens, padding_mask)


def _greedy_pick(logits):
    return logits.argmax(dim=-1)


def _llama(fields: dict, state: dict):
    model = LlamaDecoder(DecoderConfig(**fields)).eval()
    model.load_state_dict(state)
    return model


def _model(spec: dict):
    return PrefixTableModel(spec["table"]) if "table" in spec else _llama(spec["fields"], spec["state"])


def generate_with(ns, spec: dict, prompt, max_new_tokens: int, eos_id):
    model = _Watched(_model(spec))
    out = need(ns, "generate")(model, prompt.clone(), max_new_tokens=max_new_tokens, eos_id=eos_id, pick=_greedy_pick)
    return {"output": out, "calls": [c["shape"] for c in model.calls]}


def generate_batch_with(ns, spec: dict, prompts: list, max_new_tokens: int, pad_id: int, eos_id):
    model = _Watched(_model(spec))
    out = need(ns, "generate_batch")(
        model,
        [p.clone() for p in prompts],
        max_new_tokens=max_new_tokens,
        pad_id=pad_id,
        eos_id=eos_id,
        pick=_greedy_pick,
    )
    first = model.calls[0] if model.calls else {"shape": None, "mask": None}
    last = model.calls[-1] if model.calls else {"tokens": None, "mask": None}
    return {
        "output": out,
        "calls": len(model.calls),
        "first_shape": first["shape"],
        "first_mask": first["mask"],
        "masks_given": all(c["mask"] is not None for c in model.calls),
        "last_tokens": last["tokens"],
        "last_mask": last["mask"],
    }  # what the model was fed, every column


# --- Exercise 7 --------------------------------------------------------------------------


def beam_search_with(ns, table, prompt, beam_size: int, max_new_tokens: int, eos_id: int, length_penalty: float):
    model = PrefixTableModel(table)
    tokens, score = need(ns, "beam_search")(
        model,
        prompt.clone(),
        beam_size=beam_size,
        max_new_tokens=max_new_tokens,
        eos_id=eos_id,
        length_penalty=length_penalty,
    )
    return {"tokens": tokens, "score": float(score) if isinstance(score, numbers.Real | torch.Tensor) else score}


# --- Exercise 8 --------------------------------------------------------------------------


def kv_cache_updates(ns, n_layers: int, updates: list):
    """``KVCache(n_layers)``: its length before anything, then each update's result and the length after it."""
    cache = need(ns, "KVCache")(n_layers)
    record = {"length_empty": cache.length, "steps": []}
    for layer, k, v in updates:
        k_all, v_all = cache.update(layer, k.clone(), v.clone())
        stored = {
            name: list(value) if isinstance(value := getattr(cache, name, None), list | tuple) else None
            for name in ("keys", "values")
        }  # the spec names them: one entry per layer
        record["steps"].append({"k": k_all, "v": v_all, "length": cache.length, **stored})
    return record


# --- Exercise 9 --------------------------------------------------------------------------


def cached_attention_summary(ns, d_model: int, heads: int, kv_heads: int):
    return summary(need(ns, "CachedRotaryGQA")(d_model, heads, kv_heads, RoPE()))


@torch.no_grad()
def cached_attention_steps(ns, d_model: int, heads: int, kv_heads: int, state: dict, x, chunks: list, layer: int):
    """The attention run on ``x``'s chunks in turn with one course ``KVCache``, positions continuing,
    each chunk's mask ``[new, offset + new]`` (causal); its outputs and the cache's length after each call."""
    attention = need(ns, "CachedRotaryGQA")(d_model, heads, kv_heads, RoPE())
    attention.load_state_dict(state)
    cache = KVCache(layer + 1)

    def chunk(start, end):
        mask = torch.ones(end - start, end, dtype=torch.bool).tril(diagonal=start)
        return attention(x[:, start:end], mask, torch.arange(start, end), cache=cache, layer=layer)

    result = _by_chunks(chunk, chunks, cache)
    result["cached_keys"] = cache.keys[layer]  # what the cache holds at the end: the spec says rotated keys
    return result


def _by_chunks(call, chunks: list, cache: KVCache) -> dict:
    """``call(start, end)`` for each chunk in turn: its outputs, or what it raised (and where), and the
    cache's per-layer lengths after each call."""
    result = {"outputs": [], "lengths": [], "error": None}
    for start, end in chunks:
        try:
            result["outputs"].append(call(start, end))
        except NotImplementedError:
            raise
        except Exception as error:  # noqa: BLE001 - reported with the chunk it happened in
            result["error"] = {"chunk": [start, end], "message": f"{type(error).__name__}: {error}"}
        result["lengths"].append([0 if k is None else k.shape[2] for k in cache.keys])
        if result["error"]:
            break
    return result


# --- Exercise 10 -------------------------------------------------------------------------


def _decoder(ns, fields: dict):
    return need(ns, "CachedDecoder")(DecoderConfig(**fields), block=ModernBlock, norm=nn.RMSNorm, rope=RoPE)


@torch.no_grad()
def cached_decoder_steps(ns, fields: dict, state: dict, tokens, chunks: list):
    """The decoder run on ``tokens``' chunks in turn with one course ``KVCache`` (and once without a cache,
    on everything): each call's logits, or what it raised, and the cache's per-layer lengths after it."""
    model = _decoder(ns, fields).eval()
    model.load_state_dict(state)
    cache = KVCache(fields["n_layers"])
    full = model(tokens)
    return {"full": full, **_by_chunks(lambda start, end: model(tokens[:, start:end], cache=cache), chunks, cache)}


@torch.no_grad()
def cached_decoder_generate(ns, fields: dict, state: dict, prompt, max_new_tokens: int):
    """Greedy generation with the student's decoder and a course ``KVCache``: prefill, then one token a call."""
    model = _decoder(ns, fields).eval()
    model.load_state_dict(state)
    cache = KVCache(fields["n_layers"])
    tokens, step = prompt.clone(), prompt[None]
    for _ in range(max_new_tokens):
        token = model(step, cache=cache)[0, -1].argmax()
        tokens = torch.cat([tokens, token.view(1)])
        step = token.view(1, 1)
    return tokens


# --- Exercise 11 -------------------------------------------------------------------------


def serve(ns, spec: dict, prompts: list, n_slots: int, max_new_tokens: int, eos_id):
    if "table" in spec:
        engine = RecomputeEngine(PrefixTableModel(spec["table"]), n_slots)
    else:
        engine = SlotEngine(_llama(spec["fields"], spec["state"]), n_slots, spec["max_len"])
    out = need(ns, "continuous_batching")(
        engine, [p.clone() for p in prompts], max_new_tokens=max_new_tokens, eos_id=eos_id
    )
    return {"output": out, "events": [[kind, what] for kind, what in engine.events]}
