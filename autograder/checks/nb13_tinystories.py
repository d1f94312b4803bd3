"""Checks for notebook 13: bits per byte, FLOPs per token and MFU, the ranks' micro-batches, attention maps.

Oracles:

- ``bits_per_byte``: the closed form ``loss * tokens / (n_bytes * ln 2)``; a byte-level model on random
  logits, whose bits per byte are summed here directly in base 2 (``-log2 softmax``, no nats at all); the
  same text cut into fewer tokens with the same total nats gives the same value.
- ``flops_per_token``: ``torch.utils.flop_counter.FlopCounterMode`` around a forward and backward pass of
  ``autograder.reference``'s Llama-style decoder, divided by the tokens of the batch. Measured with torch
  2.13 on CPU: FlopCounterMode does **not** count ``F.scaled_dot_product_attention`` there (the CPU kernel
  ``aten._scaled_dot_product_flash_attention_for_cpu`` has no FLOP formula registered), so the oracle runs
  under ``torch.nn.attention.sdpa_kernel(SDPBackend.MATH)``: attention then decomposes into ``bmm`` for
  ``q k^T`` and ``weights @ v`` over the full ``T x T`` (the causal half is computed and masked), which it
  counts, and backward costs twice forward for every matmul (the gradients of the input and of the weight).
  The embedding lookup, the norms, RoPE and SwiGLU's products are elementwise and not counted. Exact
  integers: the counts match to the FLOP.
- ``mfu``: the closed form ``tokens_per_second * flops_per_token / peak_flops``.
- ``rank_micro_batches``: the partition property (all ranks' micro-batches, concatenated in rank order,
  are the batch; equal shapes; ValueError when not divisible), and gradient accumulation with DDP's mean
  over ranks: ``mean_r sum_i grad(loss(micro_{r,i}) / accumulation_steps)`` equals the full batch's
  gradient of a small embedding-and-linear model under ``F.cross_entropy``.
- ``attention_maps``: Hugging Face's ``LlamaForCausalLM`` (``attn_implementation="eager"``,
  ``output_attentions=True``) with random weights, loaded into ``autograder.reference``'s decoder through
  ``autograder.reference.hf_llama`` (q/k rows permuted per head, which leaves the scores unchanged), on
  which the student's function runs; GQA ratios 1, 2, 4 and 2 with 6 heads. Known mistakes are recognised on
  layer 0 (later layers see other hidden states): HF's maps with ``scaling = 1``, with RoPE's cos = 1 and
  sin = 0, and with the kv heads repeated 0 1 0 1 (an HF model without grouping whose k rows are tiled).

Tolerances (float32 on CPU, any BLAS): bits per byte rtol 1e-6 (measured 0 for the closed form, below
1e-7 relative against the base-2 sum); FLOPs exact (integers; 0.5 allowed for a float that holds one);
MFU rtol 1e-9; micro-batches exact; gradients atol 1e-6 + rtol 1e-5 (measured below 2e-7); attention
maps atol 1e-5 (measured below 1e-6 against HF), rows summing to 1 within 1e-5, weights above the
diagonal at most 1e-9.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from autograder import expect
from autograder.checks._seeds import seeded
from autograder.exercises import Exercise
from autograder.reference import hf_llama
from autograder.reference.configs import DecoderConfig
from autograder.reference.decoders import LlamaDecoder

BITS_PER_BYTE = Exercise("bits_per_byte", "Exercise 1: bits_per_byte", points=2)
FLOPS = Exercise("flops_per_token", "Exercise 2: flops_per_token", points=3)
MFU = Exercise("mfu", "Exercise 3: mfu", points=1)
MICRO = Exercise("rank_micro_batches", "Exercise 4: rank_micro_batches", points=2)
MAPS = Exercise("attention_maps", "Exercise 5: attention_maps", points=4)
EXERCISES = [BITS_PER_BYTE, FLOPS, MFU, MICRO, MAPS]

LN2 = math.log(2.0)
GRAD = {"atol": 1e-6, "rtol": 1e-5}
MAP_ATOL = 1e-5

_gen, _randn = seeded(13000)


def _number(value, call: str) -> float:
    if isinstance(value, dict) and "__unsupported__" in value:
        expect.fail(f"{call} returned a {value['__unsupported__']}, expected a number")
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value)
    expect.that(isinstance(value, int | float) and not isinstance(value, bool),
                f"{call} returned a {type(value).__name__}, expected a number")
    expect.that(math.isfinite(value), f"{call} returned {value}")
    return float(value)


# --- Exercise 1 --------------------------------------------------------------------------

def _bpb(impl, loss, tokens, n_bytes):
    call = f"bits_per_byte({loss!r}, {tokens}, {n_bytes})"
    return _number(impl.bits_per_byte(loss, tokens, n_bytes), call), call


def _bpb_diagnosis(got, loss, tokens, n_bytes) -> str:
    mistakes = [(loss * tokens / n_bytes, "this is nats per byte: divide by ln 2 to turn nats into bits"),
                (loss * n_bytes / (tokens * LN2), "tokens and bytes are swapped: the total bits are loss · tokens / "
                 "ln 2, spread over n_bytes bytes"),
                (loss / LN2, "this is bits per token: multiply by tokens / n_bytes to get bits per byte"),
                (loss * tokens / (n_bytes * math.log(10)), "that divides by ln 10; bits need ln 2")]
    for value, why in mistakes:
        if math.isclose(got, value, rel_tol=1e-6):
            return why
    return "bits per byte = loss · tokens / (n_bytes · ln 2)"


@BITS_PER_BYTE.visible
def test_bpb_closed_form(impl):
    "equals loss · tokens / (n_bytes · ln 2) for several losses, token counts and byte counts"
    for loss, tokens, n_bytes in ((1.45, 5_500_000, 22_500_000), (3.2, 1000, 4100), (0.7, 77, 77), (2.0, 10, 3)):
        got, call = _bpb(impl, loss, tokens, n_bytes)
        expected = loss * tokens / (n_bytes * LN2)
        expect.that(math.isclose(got, expected, rel_tol=1e-6),
                    f"{call} = {got:.6g}, expected {expected:.6g}: {_bpb_diagnosis(got, loss, tokens, n_bytes)}")


@BITS_PER_BYTE.visible
def test_bpb_byte_level_model(impl):
    "a byte-level model (one token per byte): the bits of each byte, -log2 p, summed in base 2 and averaged"
    for seed, length in ((0, 50), (1, 333)):
        text = bytes(torch.randint(32, 127, (length,), generator=_gen(seed)).tolist())
        targets = torch.tensor(list(text))
        logits = _randn((length, 256), seed + 10, scale=3.0).double()
        loss = float(F.cross_entropy(logits, targets))
        bits = -torch.log2(torch.softmax(logits, -1)).gather(1, targets[:, None]).sum()
        got, call = _bpb(impl, loss, length, len(text))
        expected = float(bits) / len(text)
        expect.that(math.isclose(got, expected, rel_tol=1e-6),
                    f"{call} = {got:.6g} for a byte-level model, whose bits per byte are {expected:.6g} (its loss / "
                    f"ln 2): {_bpb_diagnosis(got, loss, length, len(text))}")


@BITS_PER_BYTE.hidden
def test_bpb_invariant_to_the_tokenizer(impl):
    "the same text and the same total nats, cut into 1,000, 400 or 250 tokens, give the same bits per byte"
    n_bytes, total_nats = 1000, 1234.5
    values = []
    for tokens in (1000, 400, 250):
        got, call = _bpb(impl, total_nats / tokens, tokens, n_bytes)
        values.append(got)
        expected = total_nats / (n_bytes * LN2)
        expect.that(math.isclose(got, expected, rel_tol=1e-6),
                    f"{call} = {got:.6g}, expected {expected:.6g} (total nats {total_nats} over {n_bytes} bytes): "
                    f"{_bpb_diagnosis(got, total_nats / tokens, tokens, n_bytes)}")


# --- Exercises 2 and 3 ---------------------------------------------------------------------

def _fields(vocab, d, layers, heads, kv, d_ff):
    return {"vocab_size": vocab, "d_model": d, "n_layers": layers, "n_heads": heads, "d_ff": d_ff,
            "max_seq_len": 512, "n_kv_heads": kv}


def measured_flops_per_token(fields: dict, context_length: int, batch: int = 2) -> int:
    """FlopCounterMode's count of a forward and backward pass, per token (attention as explicit matmuls)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    model = LlamaDecoder(DecoderConfig(**fields))
    tokens = torch.randint(0, fields["vocab_size"], (batch, context_length))
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(tokens).float().logsumexp(-1).sum().backward()
    total = counter.get_total_flops()
    assert total % (batch * context_length) == 0
    return total // (batch * context_length)


def _flops_diagnosis(got, fields, context) -> str:
    d, layers, vocab = fields["d_model"], fields["n_layers"], fields["vocab_size"]
    kv_width = (fields["n_kv_heads"] or fields["n_heads"]) * d // fields["n_heads"]
    weights = layers * (2 * d * d + 2 * d * kv_width + 3 * d * fields["d_ff"]) + d * vocab
    attention = 4 * layers * context * d
    mistakes = [
        (2 * weights + attention, "this is the forward pass only; training adds the backward pass, twice the "
         "forward's FLOPs (gradients of the inputs and of the weights): multiply by 3"),
        (3 * (2 * (weights + d * vocab) + attention), "the embedding table is counted as a matmul; a lookup "
         "costs no multiply-adds"),
        (3 * 2 * weights, "attention's own matmuls are missing: q k^T and weights @ v cost 4 · n_layers · "
         "context_length · d_model per token (forward)"),
        (3 * (2 * weights + attention // 2), "attention is counted for the causal half only; the kernels "
         "compute the full T x T"),
        (3 * (2 * (weights + layers * 2 * d * (d - kv_width)) + attention), "k_proj and v_proj are counted as "
         "d_model x d_model; with grouped-query attention they are d_model x (n_kv_heads · head_dim)"),
        (3 * 2 * (weights - d * vocab) + 3 * attention, "the output head (lm_head, d_model x vocab_size) is "
         "missing"),
    ]
    for value, why in mistakes:
        if abs(got - value) < 0.5:
            return why
    return ""


def _flops_case(impl, fields, context):
    call = (f"flops_per_token(DecoderConfig(vocab_size={fields['vocab_size']}, d_model={fields['d_model']}, "
            f"n_layers={fields['n_layers']}, n_heads={fields['n_heads']}, n_kv_heads={fields['n_kv_heads']}, "
            f"d_ff={fields['d_ff']}), context_length={context})")
    got = _number(impl.flops(fields, context), call)
    expected = measured_flops_per_token(fields, context)
    expect.that(abs(got - expected) < 0.5,
                f"{call} = {got:,.0f}, but FlopCounterMode counts {expected:,} FLOPs per token for a forward and "
                f"backward pass of that decoder. {_flops_diagnosis(got, fields, context)}".strip())


@FLOPS.visible
def test_flops_small_decoders(impl):
    "equal to FlopCounterMode's count of forward + backward, per token, without and with grouped-query attention"
    _flops_case(impl, _fields(50, 32, 2, 4, None, 48), 16)
    _flops_case(impl, _fields(61, 32, 2, 4, 2, 40), 24)


@FLOPS.hidden
def test_flops_more_configs(impl):
    "multi-query attention, 6 heads in 3 groups, a longer context, one layer"
    _flops_case(impl, _fields(40, 32, 3, 4, 1, 64), 12)
    _flops_case(impl, _fields(33, 48, 1, 6, 3, 80), 64)
    _flops_case(impl, _fields(97, 64, 2, 8, 8, 96), 40)


def _mfu_case(impl, tps, fpt, peak):
    call = f"mfu({tps:g}, {fpt}, {peak:g})"
    got = _number(impl.mfu(tps, fpt, peak), call)
    expected = tps * fpt / peak
    why = ""
    if math.isclose(got, 100 * expected, rel_tol=1e-9):
        why = ": return a fraction (0.4), not a percentage (40)"
    elif math.isclose(got, 1 / expected, rel_tol=1e-9):
        why = ": the ratio is upside down; achieved FLOP/s over the peak"
    expect.that(math.isclose(got, expected, rel_tol=1e-9), f"{call} = {got:.6g}, expected tokens_per_second · "
                f"flops_per_token / peak_flops = {expected:.6g}{why}")


@MFU.visible
def test_mfu_closed_form(impl):
    "achieved FLOP/s (tokens per second x FLOPs per token) as a fraction of the peak"
    _mfu_case(impl, 1_000_000.0, 130_000_000, 989e12)
    _mfu_case(impl, 25_000.0, 3_900_000, 2e11)


@MFU.hidden
def test_mfu_more(impl):
    "several more cases, including an MFU above 1 (a wrong peak) and a tiny one"
    _mfu_case(impl, 3e5, 7_000_000_000, 1e15)
    _mfu_case(impl, 12.5, 1000, 1e12)


# --- Exercise 4 --------------------------------------------------------------------------

def _all_ranks(impl, n, world, accumulation, width=3):
    batch = torch.arange(n * width).view(n, width)
    call = f"rank_micro_batches(batch of {n} rows, rank, world_size={world}, accumulation_steps={accumulation})"
    got = impl.micro_batches(batch, world, accumulation)
    for rank, micro in enumerate(got):
        if isinstance(micro, str):
            expect.fail(f"{call.replace('rank,', f'rank={rank},')} {micro}")
    return batch, got, call


@MICRO.visible
def test_micro_batches_partition(impl):
    "each rank gets accumulation_steps micro-batches of n / (W · A) rows; in rank order they are the batch"
    for n, world, accumulation in ((8, 2, 2), (12, 3, 2), (6, 1, 3), (4, 4, 1), (24, 2, 3)):
        batch, got, call = _all_ranks(impl, n, world, accumulation)
        size = n // (world * accumulation)
        for rank, micro in enumerate(got):
            where = call.replace("rank,", f"rank={rank},")
            expect.that(len(micro) == accumulation, f"{where} returned {len(micro)} micro-batches, expected "
                        f"accumulation_steps = {accumulation}")
            for i, part in enumerate(micro):
                expect.tensor(part, f"{where}[{i}]", shape=(size, batch.shape[1]))
        joined = torch.cat([part for micro in got for part in micro])
        if torch.equal(joined.sort(0).values, batch) and not torch.equal(joined, batch):
            interleaved = torch.cat([batch[rank::world] for rank in range(world)])
            if torch.equal(torch.cat([torch.cat(m) for m in got]), interleaved):
                expect.fail(f"{call}: rank r took the rows r, r + W, r + 2W, ... (interleaved); it takes the "
                            "contiguous rows [r·n/W, (r+1)·n/W)")
            expect.fail(f"{call}: every row is there, but not in order: rank r takes the contiguous rows "
                        "[r·n/W, (r+1)·n/W) and cuts them into contiguous micro-batches")
        expect.that(torch.equal(joined, batch), f"{call}: the micro-batches of ranks 0, 1, ..., concatenated, are "
                    "not the batch: each row must go to exactly one micro-batch of one rank")


@MICRO.visible
def test_micro_batches_not_divisible(impl):
    "a ValueError with a message when n is not divisible by world_size · accumulation_steps"
    for n, world, accumulation in ((10, 4, 1), (12, 2, 4), (7, 1, 2)):
        call = f"rank_micro_batches(batch of {n} rows, rank=0, world_size={world}, accumulation_steps={accumulation})"
        got = impl.micro_batches_error(torch.zeros(n, 2), world, accumulation)
        expect.that(got["raised"] == "ValueError", f"{call} " + (
            f"raised {got['raised']}" if got["raised"] else "returned without an error") + f": {n} rows cannot be "
            f"cut into {world} x {accumulation} equal micro-batches, so raise ValueError with a message that says so")
        expect.that(len(got["message"].strip()) >= 10, f"{call} raised ValueError({got['message']!r}): say in the "
                    "message what is not divisible by what")


def _grads(model, rows, scale):
    """Gradients of the next-token loss on ``rows`` (times ``scale``) of a small embedding-and-linear model."""
    model.zero_grad()
    logits = model(rows[:, :-1])
    (F.cross_entropy(logits.reshape(-1, logits.shape[-1]), rows[:, 1:].reshape(-1)) * scale).backward()
    return [p.grad.clone() for p in model.parameters()]


@MICRO.hidden
def test_gradient_accumulation_equals_the_full_batch(impl):
    "mean over ranks of the accumulated gradients (loss / accumulation_steps per micro-batch) = full-batch gradient"
    for seed, (n, world, accumulation) in enumerate(((16, 2, 2), (12, 3, 2), (24, 2, 4))):
        g = _gen(100 + seed)
        tokens = torch.randint(0, 11, (n, 6), generator=g)
        call = f"rank_micro_batches(tokens [{n}, 6], rank, world_size={world}, accumulation_steps={accumulation})"
        got = impl.micro_batches(tokens, world, accumulation)
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Embedding(11, 8), nn.Tanh(), nn.Linear(8, 11))

        full = _grads(model, tokens, 1.0)
        total = [torch.zeros_like(p) for p in model.parameters()]
        for micro in got:
            expect.that(not isinstance(micro, str), f"{call}: {micro}")
            for part in micro:
                part = expect.tensor(part, f"{call}: a micro-batch")
                expect.that(part.dim() == 2 and part.shape[0] > 0, f"{call}: a micro-batch has shape "
                            f"{list(part.shape)}")
                for t, grad in zip(total, _grads(model, part, 1.0 / accumulation), strict=True):
                    t += grad / world
        for name, (t, f) in zip(("embedding", "linear weight", "linear bias"), zip(total, full, strict=True),
                                strict=False):
            expect.close(t, f, f"{call}: the {name}'s gradient averaged over the ranks and accumulated over the "
                         "micro-batches (each loss divided by accumulation_steps)", **GRAD,
                         hint="It must equal the full batch's gradient: the micro-batches must be equal in size, "
                         "accumulation_steps per rank, and together the whole batch.")


# --- Exercise 5 --------------------------------------------------------------------------

def _maps_fields(seed, d=32, heads=4, kv=2, layers=2, base=10000.0):
    return {"vocab_size": 53 + seed, "d_model": d, "n_layers": layers, "n_heads": heads, "d_ff": 48,
            "max_seq_len": 64, "n_kv_heads": kv, "rope_base": base, "norm_eps": 1e-5}


@torch.no_grad()
def _hf_model(fields, seed, *, kv_tiled_from=None):
    """HF's Llama with sharp random weights (attention far from uniform); optionally k/v tiled from another."""
    T = hf_llama.transformers_quiet()
    model = T.LlamaForCausalLM(hf_llama.hf_config(fields)).eval()
    g = _gen(seed)
    for name, p in model.named_parameters():
        if p.dim() == 1:
            p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=g))
        elif "embed_tokens" in name:
            p.copy_(torch.randn(p.shape, generator=g))
        else:
            sharp = 2.0 if ("q_proj" in name or "k_proj" in name) else 1.0
            p.copy_(sharp * p.shape[1] ** -0.5 * torch.randn(p.shape, generator=g))
    return model


def _tiled_kv(model, fields):
    """An HF model without grouping whose head i reads the grouped model's kv head i % n_kv_heads (0 1 0 1)."""
    heads, kv = fields["n_heads"], fields["n_kv_heads"]
    wide = dict(fields, n_kv_heads=heads)
    T = hf_llama.transformers_quiet()
    other = T.LlamaForCausalLM(hf_llama.hf_config(wide)).eval()
    state = model.state_dict()
    head_dim = fields["d_model"] // heads
    for key in list(state):
        if key.endswith(("k_proj.weight", "v_proj.weight")):
            rows = state[key].view(kv, head_dim, -1)
            state[key] = rows[torch.arange(heads) % kv].reshape(heads * head_dim, -1)
    other.load_state_dict(state)
    return other


@torch.no_grad()
def _hf_maps(model, tokens, *, scaling=None, no_rope=False):
    originals = []
    if scaling is not None:
        for layer in model.model.layers:
            originals.append(layer.self_attn.scaling)
            layer.self_attn.scaling = scaling
    rotary = model.model.rotary_emb
    forward = rotary.forward
    if no_rope:
        def flat(x, position_ids):
            cos, sin = forward(x, position_ids)
            return torch.ones_like(cos), torch.zeros_like(sin)
        rotary.forward = flat
    try:
        return torch.stack(model(tokens, output_attentions=True).attentions)
    finally:
        rotary.forward = forward
        for layer, value in zip(model.model.layers, originals, strict=False):
            layer.self_attn.scaling = value


def _maps_case(impl, fields, seed, batch, length):
    hf = _hf_model(fields, seed)
    tokens = torch.randint(0, fields["vocab_size"], (batch, length), generator=_gen(seed + 50))
    state = hf_llama.course_state(hf.state_dict(), fields)
    call = (f"attention_maps(model, tokens) on a decoder with {fields['n_layers']} layers, {fields['n_heads']} heads, "
            f"{fields['n_kv_heads']} kv heads, tokens [{batch}, {length}]")
    got = impl.maps(fields, state, tokens)
    shape = (fields["n_layers"], batch, fields["n_heads"], length, length)
    maps = expect.tensor(got["maps"], call, shape=shape)
    expect.that(maps.dtype == torch.float32, f"{call} has dtype {maps.dtype}, expected torch.float32")
    return hf, tokens, maps, got, call


def _maps_diagnosis(hf, fields, tokens, layer0) -> str:
    scale = fields["d_model"] // fields["n_heads"]
    mistakes = [(_hf_maps(hf, tokens, scaling=1.0), "the scores are not divided by sqrt(head_dim) = "
                 f"{math.sqrt(scale):.3g}"),
                (_hf_maps(hf, tokens, no_rope=True), "RoPE is missing: rotate q and k with the attention's own "
                 "rope(q, positions) before the scores, as its forward does")]
    if fields["n_kv_heads"] not in (None, fields["n_heads"], 1):
        mistakes.append((_hf_maps(_tiled_kv(hf, fields), tokens), "query head i reads kv head i % n_kv_heads "
                         "(repeat: 0 1 0 1); in the course it reads kv head i // (n_heads // n_kv_heads), "
                         "repeat_interleave: 0 0 1 1"))
    for wrong, why in mistakes:
        if torch.allclose(layer0, wrong[0], atol=MAP_ATOL):
            return why
    return ""


def _compare_with_hf(hf, fields, tokens, maps, call):
    expected = _hf_maps(hf, tokens)
    if not torch.allclose(maps[0], expected[0], atol=MAP_ATOL):
        why = _maps_diagnosis(hf, fields, tokens, maps[0])
        if why:
            expect.fail(f"{call}: layer 0's maps are wrong: {why}")
    expect.close(maps, expected, call, atol=MAP_ATOL,
                 hint="The oracle is Hugging Face's LlamaForCausalLM with the same weights, output_attentions=True: "
                 "softmax(q k^T / sqrt(head_dim)) with q and k rotated by RoPE and the causal mask, per layer.")


def _structure(maps, got, call):
    upper = torch.ones(maps.shape[-1], maps.shape[-1], dtype=torch.bool).triu(1)
    leak = float(maps[..., upper].abs().max()) if upper.any() else 0.0
    expect.that(leak <= 1e-9, f"{call}: a position attends to a later one (weight {leak:.3g} above the diagonal): "
                "apply the causal mask before the softmax")
    sums = maps.double().sum(-1)
    expect.that(bool(((sums - 1).abs() <= 1e-5).all()), f"{call}: rows sum to values between {float(sums.min()):.4g} "
                f"and {float(sums.max()):.4g}, expected 1: softmax over the keys (the last axis)")
    expect.that(got["hooks_left"] == 0, f"{call} left {got['hooks_left']} hooks on the model: remove them "
                "(handle.remove(), in a finally block) so the model runs as before")
    expect.that(got["logits_unchanged"], f"{call}: the model's logits changed after the call: the hooks must only "
                "read, and the weights stay as they were")


@MAPS.visible
def test_maps_equal_hugging_face(impl):
    "equal to HF LlamaForCausalLM's output_attentions (eager) with the same weights; 2 query heads per kv head"
    fields = _maps_fields(0)
    hf, tokens, maps, _, call = _maps_case(impl, fields, 0, 2, 9)
    _compare_with_hf(hf, fields, tokens, maps, call)


@MAPS.visible
def test_maps_causal_rows_sum_to_one(impl):
    "zero above the diagonal, rows summing to 1, no hooks left behind, the model's logits unchanged"
    fields = _maps_fields(1)
    _, _, maps, got, call = _maps_case(impl, fields, 1, 2, 7)
    _structure(maps, got, call)


@MAPS.hidden
def test_maps_other_shapes(impl):
    "multi-query, no grouping, 6 heads in 3 groups, rope_base 500, three layers, one token"
    for seed, fields, batch, length in ((2, _maps_fields(2, kv=1), 3, 11), (3, _maps_fields(3, kv=4, layers=3), 1, 16),
                                        (4, _maps_fields(4, d=48, heads=6, kv=3, base=500.0), 2, 10),
                                        (5, _maps_fields(5, kv=2, layers=1), 2, 1)):
        hf, tokens, maps, got, call = _maps_case(impl, fields, seed, batch, length)
        _structure(maps, got, call)
        _compare_with_hf(hf, fields, tokens, maps, call)
