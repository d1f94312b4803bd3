"""Notebook 13's exercises, with their checks and adapters: bits per byte, FLOPs per token and MFU, the ranks' micro-batches, a GPU training step,
attention maps, generation with a KV cache inside the trained context.

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
- ``train_step``: ``torch.optim.SGD`` / ``AdamW`` steps, in float32 without autocast, on each call's
  micro-batches concatenated (one ``F.cross_entropy`` over the whole batch, ``clip_grad_norm_`` where
  clipping is asked for), on ``autograder.reference``'s decoder; two or three calls in a row, so gradients
  left in ``.grad`` show. What the step did is observed, not its calls: the parameters after each call;
  AdamW's ``step`` count (one per call); a forward hook on the model records ``torch.is_autocast_enabled``,
  ``torch.get_autocast_dtype`` and the logits' dtype; a real ``torch.amp.GradScaler("cpu")`` with
  ``growth_interval=1``, whose scale doubles after each clean step and halves after an overflow (float16
  autocast on the CPU with a scale of 2^30 overflows the gradients: the step must leave the parameters
  exactly as they were). With a scale of 2^12 in float32, scaling and unscaling by a power of two are exact,
  so the scaled step equals the plain one. Known mistakes are recognised by rerunning the oracle with the
  mistake (loss not divided by k, gradients zeroed before each micro-batch, a step per micro-batch,
  gradients never zeroed, clipping at grad_clip / scale, i.e. clipping the scaled gradients). Observed besides:
  the passes in the order they ran (a forward hook gives each forward's rows, a hook on ``lm_head.weight`` each
  backward pass: one forward of each micro-batch then its backward, in turn, not one forward on the micro-batches
  concatenated nor the losses added up before one backward); the logits handed to the step are a tensor subclass
  that records the autocast state of every differentiable operation on them while they are more than a scalar
  (the way to the loss: under autocast when a dtype is given, not after the ``with`` block); a gradient hook
  records the autocast state during each backward pass (autocast is thread-local state the backward runs with:
  backward goes after the ``with`` block); and ``.grad`` when each call returns (None or zeros: zeroed after
  the step, not at the start of the next call).
- ``attention_maps``: Hugging Face's ``LlamaForCausalLM`` (``attn_implementation="eager"``,
  ``output_attentions=True``) with random weights, loaded into ``autograder.reference``'s decoder through
  ``autograder.reference.hf_llama`` (q/k rows permuted per head, which leaves the scores unchanged), on
  which the student's function runs; GQA ratios 1, 2, 4 and 2 with 6 heads. Known mistakes are recognised on
  layer 0 (later layers see other hidden states): HF's maps with ``scaling = 1``, with RoPE's cos = 1 and
  sin = 0, and with the kv heads repeated 0 1 0 1 (an HF model without grouping whose k rows are tiled).
  The way there is observed by forward pre-hooks of the checker's: a hook of the student's on each
  ``block.attn`` when it runs, its ``forward`` not replaced, gradients off, the model run once; then a second
  call on a model made to fail at its last block's attention must leave no hook behind. Hidden: the reference
  decoder (its RoPE's frequencies made on the device of ``x``) and the tokens on PyTorch's meta device, 300 tokens
  (beyond the run's context_length, 128 or 256): positions or a mask made on the CPU, or for a fixed length, raise.
- ``bits_per_byte``, ``mfu``: Python numbers (a tensor is refused); ``flops_per_token``: an ``int``;
  ``rank_micro_batches``: a ``list``.
- ``generate_with_cache``: brute force without a cache. Every token is picked from a full forward pass of
  ``autograder.reference``'s decoder (float64, sharp random weights) over the tokens of the current segment:
  the prompt's last ``window`` tokens, then, each time the segment would outgrow ``window``, the last
  ``window // 2`` tokens. The student's loop runs on the same decoder with the reference ``KVCache``, behind
  a wrapper that records every call (the cache it used, the positions that cache held before and after, the
  tokens fed), so what the model is fed and what the cache holds are observed, not inferred from the tokens.
  Sampling uses a seeded ``torch.Generator`` on both sides: one pick per new token gives the same draws.
  Int32 prompts (a visible and a hidden case): the result must keep the prompt's dtype. Hidden: a window of 300
  (beyond the demo's 128 or 256) on a one-layer decoder of width 8, a prompt of 296 and a restart.

Tolerances (float32 on CPU, any BLAS): bits per byte rtol 1e-6 (measured 0 for the closed form, below
1e-7 relative against the base-2 sum); FLOPs exact (integers; 0.5 allowed for a float that holds one);
MFU rtol 1e-9; micro-batches exact; gradients atol 1e-6 + rtol 1e-5 (measured below 2e-7); attention
maps atol 1e-5 (measured below 1e-6 against HF), rows summing to 1 within 1e-5, weights above the
diagonal at most 1e-9; generated tokens exact (float64: cached and recomputed logits differ by about 1e-15); train_step's parameters atol 1e-6 + rtol 1e-5 in float32
(k small forwards against one big one: measured below 2e-7), atol 3e-3 under bfloat16 autocast (measured
below 7e-4, for updates of about 0.1) and 5e-4 under float16 (measured below 6e-5); its returned loss to 1e-5 in
float32 and 0.02 under autocast (measured below 1.3e-3).
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch import nn

from autograder import expect
from autograder.adapters import adapter, need, outcome
from autograder.exercises import Exercise
from autograder.notebooks._seeds import seeded
from autograder.reference import hf_llama
from autograder.reference.configs import DecoderConfig
from autograder.reference.decoders import LlamaDecoder
from autograder.reference.kv_cache import KVCache
from autograder.reference.sampling import sample_next

BITS_PER_BYTE = Exercise("bits_per_byte", "bits_per_byte", points=2)
FLOPS = Exercise("flops_per_token", "flops_per_token", points=3)
MFU = Exercise("mfu", "mfu", points=1)
MICRO = Exercise("rank_micro_batches", "rank_micro_batches", points=2)
TRAIN_STEP = Exercise("train_step", "train_step", points=5)
MAPS = Exercise("attention_maps", "attention_maps", points=4)
GENERATE = Exercise("generate_with_cache", "generate_with_cache", points=4)
EXERCISES = [BITS_PER_BYTE, FLOPS, MFU, MICRO, TRAIN_STEP, MAPS, GENERATE]
ORACLE_IMPORTS = (
    "transformers.models.llama.modeling_llama",
)  # imported while the notebook runs (grading.grade): seconds

LN2 = math.log(2.0)
GRAD = {"atol": 1e-6, "rtol": 1e-5}
MAP_ATOL = 1e-5

_gen, _randn = seeded(13000)


def _number(value, call: str, kind: type = float) -> float:
    """``value`` as a float, after checking it is the Python number the signature promises: ``-> float`` (an int
    is a float there too, as for type checkers) or ``-> int``."""
    if isinstance(value, dict) and "__unsupported__" in value:
        expect.fail(f"{call} returned a {value['__unsupported__']}, expected a Python {kind.__name__}")
    if isinstance(value, torch.Tensor):
        expect.fail(
            f"{call} returned a tensor ({value!r:.60}), expected a Python {kind.__name__}: compute with "
            "Python numbers and math (or call .item())"
        )
    expect.that(not isinstance(value, bool), f"{call} returned a bool, expected a Python {kind.__name__}")
    if kind is int and isinstance(value, float):
        expect.fail(
            f"{call} returned {value!r}, a float, expected an int (a count of FLOPs): use // or int arithmetic only"
        )
    expect.that(
        isinstance(value, int if kind is int else int | float),
        f"{call} returned a {type(value).__name__}, expected a Python {kind.__name__}",
    )
    expect.that(math.isfinite(value), f"{call} returned {value}")
    return float(value)


# --- Exercise 1 --------------------------------------------------------------------------


def _bpb(impl, loss, tokens, n_bytes):
    call = f"bits_per_byte({loss!r}, {tokens}, {n_bytes})"
    return _number(impl.call(bits_per_byte, loss, tokens, n_bytes), call), call


def _bpb_diagnosis(got, loss, tokens, n_bytes) -> str:
    mistakes = [
        (loss * tokens / n_bytes, "this is nats per byte: divide by ln 2 to turn nats into bits"),
        (
            loss * n_bytes / (tokens * LN2),
            "tokens and bytes are swapped: the total bits are loss · tokens / ln 2, spread over n_bytes bytes",
        ),
        (loss / LN2, "this is bits per token: multiply by tokens / n_bytes to get bits per byte"),
        (loss * tokens / (n_bytes * math.log(10)), "that divides by ln 10; bits need ln 2"),
    ]
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
        expect.that(
            math.isclose(got, expected, rel_tol=1e-6),
            f"{call} = {got:.6g}, expected {expected:.6g}: {_bpb_diagnosis(got, loss, tokens, n_bytes)}",
        )


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
        expect.that(
            math.isclose(got, expected, rel_tol=1e-6),
            f"{call} = {got:.6g} for a byte-level model, whose bits per byte are {expected:.6g} (its loss / "
            f"ln 2): {_bpb_diagnosis(got, loss, length, len(text))}",
        )


@BITS_PER_BYTE.hidden
def test_bpb_invariant_to_the_tokenizer(impl):
    "the same text and the same total nats, cut into 1,000, 400 or 250 tokens, give the same bits per byte"
    n_bytes, total_nats = 1000, 1234.5
    values = []
    for tokens in (1000, 400, 250):
        got, call = _bpb(impl, total_nats / tokens, tokens, n_bytes)
        values.append(got)
        expected = total_nats / (n_bytes * LN2)
        expect.that(
            math.isclose(got, expected, rel_tol=1e-6),
            f"{call} = {got:.6g}, expected {expected:.6g} (total nats {total_nats} over {n_bytes} bytes): "
            f"{_bpb_diagnosis(got, total_nats / tokens, tokens, n_bytes)}",
        )


# --- Exercises 2 and 3 ---------------------------------------------------------------------


def _fields(vocab, d, layers, heads, kv, d_ff):
    return {
        "vocab_size": vocab,
        "d_model": d,
        "n_layers": layers,
        "n_heads": heads,
        "d_ff": d_ff,
        "max_seq_len": 512,
        "n_kv_heads": kv,
    }


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
        (
            2 * weights + attention,
            "this is the forward pass only; training adds the backward pass, twice the "
            "forward's FLOPs (gradients of the inputs and of the weights): multiply by 3",
        ),
        (
            3 * (2 * (weights + d * vocab) + attention),
            "the embedding table is counted as a matmul; a lookup costs no multiply-adds",
        ),
        (
            3 * 2 * weights,
            "attention's own matmuls are missing: q k^T and weights @ v cost 4 · n_layers · "
            "context_length · d_model per token (forward)",
        ),
        (
            3 * (2 * weights + attention // 2),
            "attention is counted for the causal half only; the kernels compute the full T x T",
        ),
        (
            3 * (2 * (weights + layers * 2 * d * (d - kv_width)) + attention),
            "k_proj and v_proj are counted as "
            "d_model x d_model; with grouped-query attention they are d_model x (n_kv_heads · head_dim)",
        ),
        (3 * 2 * (weights - d * vocab) + 3 * attention, "the output head (lm_head, d_model x vocab_size) is missing"),
    ]
    for value, why in mistakes:
        if abs(got - value) < 0.5:
            return why
    return ""


def _flops_case(impl, fields, context):
    call = (
        f"flops_per_token(DecoderConfig(vocab_size={fields['vocab_size']}, d_model={fields['d_model']}, "
        f"n_layers={fields['n_layers']}, n_heads={fields['n_heads']}, n_kv_heads={fields['n_kv_heads']}, "
        f"d_ff={fields['d_ff']}), context_length={context})"
    )
    got = _number(impl.call(flops, fields, context), call, int)
    expected = measured_flops_per_token(fields, context)
    expect.that(
        abs(got - expected) < 0.5,
        f"{call} = {got:,.0f}, but FlopCounterMode counts {expected:,} FLOPs per token for a forward and "
        f"backward pass of that decoder. {_flops_diagnosis(got, fields, context)}".strip(),
    )


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
    got = _number(impl.call(mfu, tps, fpt, peak), call)
    expected = tps * fpt / peak
    why = ""
    if math.isclose(got, 100 * expected, rel_tol=1e-9):
        why = ": return a fraction (0.4), not a percentage (40)"
    elif math.isclose(got, 1 / expected, rel_tol=1e-9):
        why = ": the ratio is upside down; achieved FLOP/s over the peak"
    expect.that(
        math.isclose(got, expected, rel_tol=1e-9),
        f"{call} = {got:.6g}, expected tokens_per_second · flops_per_token / peak_flops = {expected:.6g}{why}",
    )


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
    got = impl.call(micro_batches, batch, world, accumulation)
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
            expect.that(
                len(micro) == accumulation,
                f"{where} returned {len(micro)} micro-batches, expected accumulation_steps = {accumulation}",
            )
            for i, part in enumerate(micro):
                expect.tensor(part, f"{where}[{i}]", shape=(size, batch.shape[1]))
        joined = torch.cat([part for micro in got for part in micro])
        if torch.equal(joined.sort(0).values, batch) and not torch.equal(joined, batch):
            interleaved = torch.cat([batch[rank::world] for rank in range(world)])
            if torch.equal(torch.cat([torch.cat(m) for m in got]), interleaved):
                expect.fail(
                    f"{call}: rank r took the rows r, r + W, r + 2W, ... (interleaved); it takes the "
                    "contiguous rows [r·n/W, (r+1)·n/W)"
                )
            expect.fail(
                f"{call}: every row is there, but not in order: rank r takes the contiguous rows "
                "[r·n/W, (r+1)·n/W) and cuts them into contiguous micro-batches"
            )
        expect.that(
            torch.equal(joined, batch),
            f"{call}: the micro-batches of ranks 0, 1, ..., concatenated, are "
            "not the batch: each row must go to exactly one micro-batch of one rank",
        )


@MICRO.visible
def test_micro_batches_not_divisible(impl):
    "a ValueError with a message when n is not divisible by world_size · accumulation_steps"
    for n, world, accumulation in ((10, 4, 1), (12, 2, 4), (7, 1, 2)):
        call = f"rank_micro_batches(batch of {n} rows, rank=0, world_size={world}, accumulation_steps={accumulation})"
        got = impl.call(micro_batches_error, torch.zeros(n, 2), world, accumulation)
        expect.that(
            got["raised"] == "ValueError",
            f"{call} "
            + (f"raised {got['raised']}" if got["raised"] else "returned without an error")
            + f": {n} rows cannot be "
            f"cut into {world} x {accumulation} equal micro-batches, so raise ValueError with a message that says so",
        )
        expect.that(
            len(got["message"].strip()) >= 10,
            f"{call} raised ValueError({got['message']!r}): say in the message what is not divisible by what",
        )


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
        got = impl.call(micro_batches, tokens, world, accumulation)
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Embedding(11, 8), nn.Tanh(), nn.Linear(8, 11))

        full = _grads(model, tokens, 1.0)
        total = [torch.zeros_like(p) for p in model.parameters()]
        for micro in got:
            expect.that(not isinstance(micro, str), f"{call}: {micro}")
            for part in micro:
                part = expect.tensor(part, f"{call}: a micro-batch")
                expect.that(
                    part.dim() == 2 and part.shape[0] > 0, f"{call}: a micro-batch has shape {list(part.shape)}"
                )
                for t, grad in zip(total, _grads(model, part, 1.0 / accumulation), strict=True):
                    t += grad / world
        for name, (t, f) in zip(
            ("embedding", "linear weight", "linear bias"), zip(total, full, strict=True), strict=False
        ):
            expect.close(
                t,
                f,
                f"{call}: the {name}'s gradient averaged over the ranks and accumulated over the "
                "micro-batches (each loss divided by accumulation_steps)",
                **GRAD,
                hint="It must equal the full batch's gradient: the micro-batches must be equal in size, "
                "accumulation_steps per rank, and together the whole batch.",
            )


# --- Exercise 5 --------------------------------------------------------------------------

STEP_FIELDS = {
    "vocab_size": 29,
    "d_model": 16,
    "n_layers": 2,
    "n_heads": 2,
    "d_ff": 32,
    "max_seq_len": 32,
    "n_kv_heads": None,
}
EXACT = {"atol": 1e-6, "rtol": 1e-5}  # float32 both ways: k small forwards against one big one
HALF = {"bfloat16": {"atol": 3e-3, "rtol": 0.0}, "float16": {"atol": 5e-4, "rtol": 0.0}}
SGD = ("sgd", {"lr": 0.5})
ADAMW = ("adamw", {"lr": 1e-2, "weight_decay": 0.1, "eps": 1e-3})


def _step_setup(seed, fields=STEP_FIELDS):
    torch.manual_seed(13100 + seed)
    return {name: p.detach().clone() for name, p in LlamaDecoder(DecoderConfig(**fields)).state_dict().items()}


def _micro_batches(seed, k, rows, length, vocab, calls=1):
    g = _gen(100 + seed)
    return [
        [
            (torch.randint(0, vocab, (rows, length), generator=g), torch.randint(0, vocab, (rows, length), generator=g))
            for _ in range(k)
        ]
        for _ in range(calls)
    ]


def _oracle(fields, state, steps, optimizer, *, grad_clip=None, mistake=None):
    """torch.optim's steps on each call's micro-batches concatenated: the loss of the whole batch, in float32.

    ``mistake`` gives what a known wrong step does instead: "undivided" (the loss of each micro-batch not divided
    by k), "last" (gradients zeroed before each micro-batch: only the last one's, / k, remains), "every"
    (a step after every micro-batch), "stale" (gradients never zeroed), or ("clip", s) (clipped while scaled by s).
    """
    model = LlamaDecoder(DecoderConfig(**fields))
    model.load_state_dict(state)
    name, kwargs = optimizer
    opt = {"sgd": torch.optim.SGD, "adamw": torch.optim.AdamW}[name](model.parameters(), **kwargs)
    clip = grad_clip
    if isinstance(mistake, tuple):
        clip = grad_clip / mistake[1]

    def loss_of(pairs):
        x, y = torch.cat([p[0] for p in pairs]), torch.cat([p[1] for p in pairs])
        return F.cross_entropy(model(x).flatten(0, 1), y.flatten())

    def update():
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()

    states, losses = [], []
    for micro in steps:
        k = len(micro)
        if mistake == "every":
            for pair in micro:
                (loss_of([pair]) / k).backward()
                update()
                opt.zero_grad()
        elif mistake == "last":
            (loss_of(micro[-1:]) / k).backward()
            update()
        else:
            loss = loss_of(micro)
            losses.append(loss.item())
            (loss * (k if mistake == "undivided" else 1)).backward()
            update()
        if mistake != "stale":
            opt.zero_grad()
        states.append({n: p.detach().clone() for n, p in model.named_parameters()})
    return states, losses


def _close_states(a: dict, b: dict, tol: dict) -> bool:
    return all(torch.allclose(a[n], b[n], **tol) for n in b)


def _step_case(
    impl,
    seed,
    *,
    k,
    rows=2,
    length=6,
    calls=1,
    optimizer=SGD,
    dtype=None,
    scaler=None,
    grad_clip=None,
    fields=STEP_FIELDS,
):
    state = _step_setup(seed, fields)
    steps = _micro_batches(seed, k, rows, length, fields["vocab_size"], calls)
    call = (
        f"train_step(model, {k} micro-batches of {rows} x {length} tokens, {optimizer[0]} optimizer"
        f"{f', dtype=torch.{dtype}' if dtype else ''}{', scaler=GradScaler(...)' if scaler else ''}"
        f"{f', grad_clip={grad_clip}' if grad_clip else ''})"
    )
    got = impl.call(
        train_step,
        fields,
        state,
        steps,
        optimizer=optimizer[0],
        optimizer_kwargs=optimizer[1],
        dtype=dtype,
        scaler=scaler,
        grad_clip=grad_clip,
    )
    if got["raised"]:
        r = got["raised"]
        hint = ""
        if scaler and r["call"] > 0 and "unscale_" in r["message"]:
            hint = (
                ": the scaler's step was not followed by scaler.update(), so the next step's unscale_ finds "
                "this one's state"
            )
        expect.fail(f"{call}, call {r['call'] + 1} of {calls}, raised {r['type']}: {r['message']}{hint}")
    for loss in got["losses"]:
        what = loss["__unsupported__"] if isinstance(loss, dict) else type(loss).__name__
        expect.that(
            isinstance(loss, float),
            f"{call} returned a {what}, expected the mean loss as a Python float (float(...) or .item())",
        )
    return state, steps, got, call


def _compare_step(got, call, fields, state, steps, optimizer, *, grad_clip=None, tol=EXACT, scale=None):
    expected, losses = _oracle(fields, state, steps, optimizer, grad_clip=grad_clip)
    mistakes = [
        (
            "undivided",
            "the loss of each micro-batch must be divided by the number of micro-batches k: "
            "the gradients add up over the k backward passes, so undivided they are k times the batch's",
        ),
        (
            "last",
            "only the last micro-batch's gradient is left: gradients were zeroed before each "
            "micro-batch; zero them once per step, so the k backward passes accumulate in .grad",
        ),
        ("every", "the optimizer stepped after every micro-batch; it steps once, after the last one"),
        (
            "stale",
            "the previous step's gradients were still in .grad: zero the gradients once per step "
            "(optimizer.zero_grad())",
        ),
    ]
    if scale and grad_clip:
        mistakes.append(
            (
                ("clip", scale),
                "the gradients were clipped while still scaled by the GradScaler: call "
                "scaler.unscale_(optimizer) before clip_grad_norm_",
            )
        )
    for i, (state_got, state_expected) in enumerate(zip(got["states"], expected, strict=True)):
        if _close_states(state_got, state_expected, tol):
            continue
        for mistake, why in mistakes:
            wrong, _ = _oracle(fields, state, steps[: i + 1], optimizer, grad_clip=grad_clip, mistake=mistake)
            if _close_states(state_got, wrong[i], tol):
                expect.fail(f"{call}: after call {i + 1}, {why}")
        worst = max(float((state_got[n] - state_expected[n]).abs().max()) for n in state_expected)
        expect.fail(
            f"{call}: after call {i + 1} the parameters differ from one {optimizer[0]} step on the whole "
            f"batch (the micro-batches concatenated) by up to {worst:.3g}"
        )
    for i, (loss, expected_loss) in enumerate(zip(got["losses"], losses, strict=True)):
        allowed = 1e-5 * max(1.0, abs(expected_loss)) if tol is EXACT else 0.02
        expect.that(
            abs(loss - expected_loss) <= allowed,
            f"{call} returned {loss:.6g} at call {i + 1}, expected the mean loss of its micro-batches, "
            f"{expected_loss:.6g}"
            + (
                f" (k = {len(steps[i])} times too large: each micro-batch's loss is divided by k before adding)"
                if math.isclose(loss, expected_loss * len(steps[i]), rel_tol=1e-3)
                else ""
            ),
        )


def _forwards_under(got, call, dtype):
    for i, forwards in enumerate(got["forwards"]):
        expect.that(bool(forwards), f"{call} never called the model at call {i + 1}")
        for f in forwards:
            if dtype is None:
                expect.that(
                    not f["autocast"],
                    f"{call} with dtype=None ran the model under autocast "
                    f"({f['dtype']}): None means float32, no autocast",
                )
                continue
            expect.that(
                f["autocast"],
                f"{call}: the model's forward ran without autocast: wrap the forward and the "
                f"loss in torch.autocast(device_type, dtype=dtype)",
            )
            expect.that(
                f["dtype"] == f"torch.{dtype}",
                f"{call}: the model's forward ran under autocast in "
                f"{f['dtype']}, but dtype=torch.{dtype} was asked for"
                + (
                    " (float16 is the GPU's habit; on this call bfloat16 was requested)"
                    if f["dtype"] == "torch.float16"
                    else ""
                ),
            )
            expect.that(
                f["logits"] == f"torch.{dtype}",
                f"{call}: the logits came out as {f['logits']} under autocast in {dtype}",
            )


def _one_pass_per_micro_batch(got, call, k, rows):
    """For each micro-batch in turn, one forward of its rows and one backward pass, as the adapter saw them run."""
    expected = [f"F{rows}", "B"] * k
    for i, events in enumerate(got["events"]):
        if events == expected:
            continue
        where, ran = f"{call}, at call {i + 1},", " ".join(events)
        forwards, backwards = [e for e in events if e.startswith("F")], events.count("B")
        if k > 1 and forwards == [f"F{k * rows}"]:
            expect.fail(
                f"{where} ran the model once, on the {k} micro-batches concatenated ({k * rows} rows): run one "
                f"forward and one backward per micro-batch, on its own {rows} rows. On the whole batch at "
                "once, its activations are all in memory together, which is what accumulation avoids"
            )
        if k > 1 and len(forwards) == k and backwards == 1:
            expect.fail(
                f"{where} ran {k} forwards and one backward pass ({ran}: the losses added up, then one "
                f"backward): the graphs of all {k} micro-batches were in memory at once. Back-propagate each "
                "micro-batch's loss / k right after its forward, before the next micro-batch"
            )
        if k > 1 and len(forwards) == k and backwards == k:
            expect.fail(
                f"{where} ran all {k} forwards before the backward passes ({ran}): the graphs of all the "
                "micro-batches were in memory at once. Back-propagate each micro-batch's loss / k right after "
                "its forward, before the next micro-batch"
            )
        expect.fail(
            f"{where} ran {ran} (F<rows>: a forward of the model, B: a backward pass); expected one forward "
            f"of each micro-batch's {rows} rows, then its backward, in turn: {' '.join(expected)}"
        )


def _no_gradient_left(got, call):
    for i, left in enumerate(got["grads_left"]):
        expect.that(
            left["values"] == 0,
            f"{call}: when call {i + 1} returned, .grad still held gradients "
            f"({left['values']} of {sum(left.values())} parameters): zero them after the step "
            "(optimizer.zero_grad(), which leaves None; zeros, with set_to_none=False, are fine too), so that "
            "the call leaves no gradient behind and the next one starts from none",
        )


def _loss_under_autocast(got, call, dtype):
    if dtype is None:
        return
    for i, ops in enumerate(got["loss_ops"]):
        outside = list(dict.fromkeys(op["op"] for op in ops if not op["autocast"]))
        expect.that(
            not outside,
            f"{call}, call {i + 1}: {', '.join(outside)} ran on the logits outside autocast: the "
            "loss was computed after the with block. The forward AND the loss go under "
            f"torch.autocast(device_type, dtype=dtype): there F.cross_entropy runs in float32; outside it, "
            f"on {dtype} logits, the loss is computed in {dtype}",
        )


def _backward_outside_autocast(got, call, dtype):
    if dtype is None:
        return
    for i, inside in enumerate(got["backward_autocast"]):
        expect.that(
            not inside,
            f"{call}, call {i + 1}: the backward pass ran inside the autocast block. Only the "
            "forward and the loss go under torch.autocast; call backward after the with block (PyTorch's "
            "autocast documentation: backward passes under autocast are not recommended, the backward ops "
            "already run in the dtypes their forward ops used)",
        )


def _observed(got, call, k, rows, dtype=None):
    """What the step did besides its result: the passes it ran, the loss under autocast and the backward outside
    it, .grad left empty."""
    _one_pass_per_micro_batch(got, call, k, rows)
    _loss_under_autocast(got, call, dtype)
    _backward_outside_autocast(got, call, dtype)
    _no_gradient_left(got, call)


@TRAIN_STEP.visible
def test_step_accumulation_equals_big_batch(impl):
    "float32: k micro-batches, loss / k each, give one SGD or AdamW step on the whole batch; 2 steps in a row"
    for seed, k, optimizer in ((0, 1, SGD), (1, 3, SGD), (2, 2, ADAMW)):
        state, steps, got, call = _step_case(impl, seed, k=k, calls=2, optimizer=optimizer)
        _forwards_under(got, call, None)
        _compare_step(got, call, STEP_FIELDS, state, steps, optimizer)
        _observed(got, call, k, 2)
        if optimizer is ADAMW:
            for i, updates in enumerate(got["updates"]):
                expect.that(
                    updates == [i + 1],
                    f"{call}: after call {i + 1} AdamW has counted {updates} updates "
                    f"per parameter, expected {i + 1}: step the optimizer once per call, after the "
                    f"last micro-batch",
                )


@TRAIN_STEP.visible
def test_step_autocast_bfloat16(impl):
    "dtype=torch.bfloat16: the forward runs under autocast in bfloat16; the step is float32's within bf16 rounding"
    for seed, k in ((3, 2), (4, 1)):
        state, steps, got, call = _step_case(impl, seed, k=k, dtype="bfloat16")
        _forwards_under(got, call, "bfloat16")
        _compare_step(got, call, STEP_FIELDS, state, steps, SGD, tol=HALF["bfloat16"])
        _observed(got, call, k, 2, "bfloat16")


@TRAIN_STEP.visible
def test_step_grad_scaler(impl):
    "a GradScaler: the update equals the unscaled one, clipping sees unscaled gradients, the scale doubles each clean step (growth_interval=1 here)"
    for seed, k, clip in ((5, 2, 0.05), (6, 3, None)):
        scaler = {"init_scale": 2.0**12, "growth_interval": 1}
        state, steps, got, call = _step_case(impl, seed, k=k, calls=2, scaler=scaler, grad_clip=clip)
        _compare_step(got, call, STEP_FIELDS, state, steps, SGD, grad_clip=clip, scale=2.0**12)
        _observed(got, call, k, 2)
        expect.that(
            got["scales"] == [2.0**13, 2.0**14],
            f"{call}: the scaler's scale went 2^12 -> "
            f"{got['scales']} over two steps, expected 2^13, 2^14 (growth_interval=1, no inf): call "
            "scaler.update() once per step, after scaler.step(optimizer)",
        )


@TRAIN_STEP.hidden
def test_step_float16_overflow_skips(impl):
    "float16 with a scale so large that the gradients overflow: no update, the scale halves; then a normal fp16 step"
    state, steps, got, call = _step_case(
        impl, 7, k=2, dtype="float16", scaler={"init_scale": 2.0**30, "growth_interval": 1}
    )
    _forwards_under(got, call, "float16")
    after = got["states"][0]
    finite = all(bool(after[n].isfinite().all()) for n in after)
    expect.that(
        finite,
        f"{call}: the parameters hold inf or nan after a step whose gradients overflowed: let "
        "scaler.step(optimizer) decide, it skips the update when it finds inf or nan",
    )
    expect.that(
        all(torch.equal(after[n], state[n]) for n in after),
        f"{call}: the gradients overflowed in "
        "float16, yet the parameters changed: scaler.step(optimizer) skips such a step; do not call "
        "optimizer.step() yourself",
    )
    expect.that(
        got["scales"] == [2.0**29],
        f"{call}: after an overflow the scale should halve from 2^30 to 2^29, "
        f"got {got['scales']}: call scaler.update() after scaler.step(optimizer)",
    )
    _observed(got, call, 2, 2, "float16")
    state, steps, got, call = _step_case(
        impl, 8, k=2, dtype="float16", calls=2, scaler={"init_scale": 2.0**8, "growth_interval": 1}
    )
    _forwards_under(got, call, "float16")
    _compare_step(got, call, STEP_FIELDS, state, steps, SGD, tol=HALF["float16"])
    _observed(got, call, 2, 2, "float16")


@TRAIN_STEP.hidden
def test_step_more_shapes(impl):
    "AdamW with clipping, 4 micro-batches, grouped-query attention, bfloat16 with a scaler; float32 with clipping"
    gqa = {**STEP_FIELDS, "d_model": 24, "n_heads": 4, "n_kv_heads": 2, "vocab_size": 31}
    state, steps, got, call = _step_case(
        impl, 9, k=4, rows=1, length=9, calls=3, optimizer=ADAMW, grad_clip=0.5, fields=gqa
    )
    _compare_step(got, call, gqa, state, steps, ADAMW, grad_clip=0.5)
    expect.that(
        got["updates"] == [[1], [2], [3]],
        f"{call}: AdamW counted {got['updates']} updates after calls 1, 2, 3; expected 1, 2, 3",
    )
    _observed(got, call, 4, 1)
    state, steps, got, call = _step_case(
        impl, 10, k=2, dtype="bfloat16", calls=2, grad_clip=0.02, scaler={"init_scale": 2.0**10, "growth_interval": 1}
    )
    _forwards_under(got, call, "bfloat16")
    _compare_step(got, call, STEP_FIELDS, state, steps, SGD, grad_clip=0.02, tol=HALF["bfloat16"], scale=2.0**10)
    _observed(got, call, 2, 2, "bfloat16")


# --- Exercise 6 --------------------------------------------------------------------------


def _maps_fields(seed, d=32, heads=4, kv=2, layers=2, base=10000.0):
    return {
        "vocab_size": 53 + seed,
        "d_model": d,
        "n_layers": layers,
        "n_heads": heads,
        "d_ff": 48,
        "max_seq_len": 64,
        "n_kv_heads": kv,
        "rope_base": base,
        "norm_eps": 1e-5,
    }


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
    call = (
        f"attention_maps(model, tokens) on a decoder with {fields['n_layers']} layers, {fields['n_heads']} heads, "
        f"{fields['n_kv_heads']} kv heads, tokens [{batch}, {length}]"
    )
    got = impl.call(attention_maps_run, fields, state, tokens)
    shape = (fields["n_layers"], batch, fields["n_heads"], length, length)
    maps = expect.tensor(got["maps"], call, shape=shape)
    expect.that(maps.dtype == torch.float32, f"{call} has dtype {maps.dtype}, expected torch.float32")
    return hf, tokens, maps, got, call


def _maps_diagnosis(hf, fields, tokens, layer0) -> str:
    scale = fields["d_model"] // fields["n_heads"]
    mistakes = [
        (_hf_maps(hf, tokens, scaling=1.0), f"the scores are not divided by sqrt(head_dim) = {math.sqrt(scale):.3g}"),
        (
            _hf_maps(hf, tokens, no_rope=True),
            "RoPE is missing: rotate q and k with the attention's own "
            "rope(q, positions) before the scores, as its forward does",
        ),
    ]
    if fields["n_kv_heads"] not in (None, fields["n_heads"], 1):
        mistakes.append(
            (
                _hf_maps(_tiled_kv(hf, fields), tokens),
                "query head i reads kv head i % n_kv_heads "
                "(repeat: 0 1 0 1); in the course it reads kv head i // (n_heads // n_kv_heads), "
                "repeat_interleave: 0 0 1 1",
            )
        )
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
    expect.close(
        maps,
        expected,
        call,
        atol=MAP_ATOL,
        hint="The oracle is Hugging Face's LlamaForCausalLM with the same weights, output_attentions=True: "
        "softmax(q k^T / sqrt(head_dim)) with q and k rotated by RoPE and the causal mask, per layer.",
    )


def _structure(maps, got, call):
    upper = torch.ones(maps.shape[-1], maps.shape[-1], dtype=torch.bool).triu(1)
    leak = float(maps[..., upper].abs().max()) if upper.any() else 0.0
    expect.that(
        leak <= 1e-9,
        f"{call}: a position attends to a later one (weight {leak:.3g} above the diagonal): "
        "apply the causal mask before the softmax",
    )
    sums = maps.double().sum(-1)
    expect.that(
        bool(((sums - 1).abs() <= 1e-5).all()),
        f"{call}: rows sum to values between {float(sums.min()):.4g} "
        f"and {float(sums.max()):.4g}, expected 1: softmax over the keys (the last axis)",
    )
    expect.that(
        got["hooks_left"] == 0,
        f"{call} left {got['hooks_left']} hooks on the model: remove them "
        "(handle.remove(), in a finally block) so the model runs as before",
    )
    expect.that(
        got["logits_unchanged"],
        f"{call}: the model's logits changed after the call: the hooks must only "
        "read, and the weights stay as they were",
    )
    _maps_observed(got, call)


def _maps_observed(got, call):
    """What the text asks of the way there: hooks on each block.attn, the model run once without gradients, the
    hooks removed even when the model fails."""
    runs = got["model_calls"]
    expect.that(
        runs == 1,
        f"{call} ran the model {runs} times: run it once, model(tokens), with the hooks on"
        + ("; running the embedding and the blocks by hand is not running the model" if runs == 0 else ""),
    )
    calls = got["attn_calls"]
    expect.that(
        all(not c["forward_replaced"] for c in calls),
        f"{call} replaced block.attn.forward: record the "
        "input with a forward hook (register_forward_hook) instead, which leaves the module as it is",
    )
    expect.that(
        all(c["hooks"] >= 1 for c in calls),
        f"{call}: no hook of yours was on block.attn when it ran: "
        "register a forward hook on each block.attn that records its input",
    )
    expect.that(
        all(not c["grad"] for c in calls),
        f"{call} ran the model with gradients on: decorate "
        "attention_maps with @torch.no_grad() (or run the model inside with torch.no_grad())",
    )
    left = got["hooks_left_after_failure"]
    expect.that(
        left == 0,
        f"attention_maps(model, tokens) on a model that failed in the middle of its forward left "
        f"{left} hooks on the model: remove them in a finally block (try: model(tokens) finally: "
        "handle.remove()), so they go even when something fails",
    )


@MAPS.visible
def test_maps_equal_hugging_face(impl):
    "equal to HF LlamaForCausalLM's output_attentions (eager) with the same weights; 2 query heads per kv head"
    fields = _maps_fields(0)
    hf, tokens, maps, _, call = _maps_case(impl, fields, 0, 2, 9)
    _compare_with_hf(hf, fields, tokens, maps, call)


@MAPS.visible
def test_maps_causal_rows_sum_to_one(impl):
    "zero above the diagonal, rows summing to 1, no hooks left behind, the model's logits unchanged; hooks on each block.attn, the model run once without gradients, the hooks removed when the model fails"
    fields = _maps_fields(1)
    _, _, maps, got, call = _maps_case(impl, fields, 1, 2, 7)
    _structure(maps, got, call)


@MAPS.hidden
def test_maps_other_shapes(impl):
    "multi-query, no grouping, 6 heads in 3 groups, rope_base 500, three layers, one token"
    for seed, fields, batch, length in (
        (2, _maps_fields(2, kv=1), 3, 11),
        (3, _maps_fields(3, kv=4, layers=3), 1, 16),
        (4, _maps_fields(4, d=48, heads=6, kv=3, base=500.0), 2, 10),
        (5, _maps_fields(5, kv=2, layers=1), 2, 1),
    ):
        hf, tokens, maps, got, call = _maps_case(impl, fields, seed, batch, length)
        _structure(maps, got, call)
        _compare_with_hf(hf, fields, tokens, maps, call)


# Beyond the notebook's own lengths (the run's context_length is 128 on the CPU, 256 on a GPU): a mask or positions
# made once for a fixed length fail here too. Shapes only, on the meta device: no values are computed.
META_MAPS_LENGTH = 300


@MAPS.hidden
def test_maps_on_the_device_of_tokens(impl):
    "positions and the causal mask made on the device of tokens: the model and tokens on PyTorch's meta device, 300 tokens"
    fields = _maps_fields(6)
    shape = [2, META_MAPS_LENGTH]
    got = impl.call(attention_maps_on_meta, fields, shape)
    call = f"attention_maps(model.to('meta'), tokens of shape {shape} on the meta device)"
    expect.that(
        not got["raised"],
        f"{call} raised {got['raised']}: {got['message'][:200]}; a tensor your function makes stays on the CPU while "
        "the model and tokens are elsewhere (a GPU), or was made for a fixed length: build the positions and the "
        "causal mask on the device of tokens and for their length (torch.arange(T, device=tokens.device), "
        "torch.ones(T, T, ..., device=tokens.device))",
    )
    expected = [fields["n_layers"], shape[0], fields["n_heads"], shape[1], shape[1]]
    expect.that(
        got["device"] == "meta" and got["shape"] == expected,
        f"{call} returned a tensor on {got['device'] or 'no device'} of shape {got['shape']}; expected {expected} "
        "on the device of tokens",
    )


# --- Exercise 7 --------------------------------------------------------------------------


def _generation_fields(seed, *, layers=2, d=32, heads=4, kv=2, max_seq_len=64):
    return {
        "vocab_size": 37 + seed,
        "d_model": d,
        "n_layers": layers,
        "n_heads": heads,
        "d_ff": 48,
        "max_seq_len": max_seq_len,
        "n_kv_heads": kv,
        "rope_base": 10000.0,
        "norm_eps": 1e-5,
    }


@torch.no_grad()
def _generation_model(fields, seed):
    """The reference decoder in float64 with sharp random weights: a peaked next-token distribution, so
    greedy decoding does not fall into one repeated token at once."""
    model = LlamaDecoder(DecoderConfig(**fields)).double().eval()
    g = _gen(seed + 700)
    for p in model.parameters():
        if p.dim() > 1:
            p.copy_(0.3 * torch.randn(p.shape, generator=g, dtype=torch.float64))
    return model


@torch.no_grad()
def _segments_oracle(model, prompt, *, max_new_tokens, window, eos_id=None, pick=None):
    """(all tokens, [(tokens fed, whether to a new cache) for each call]) by brute force: no cache, a full
    forward pass per new token over the current segment (see the module docstring)."""
    generator = torch.Generator().manual_seed(pick["seed"]) if pick else None
    tokens = prompt.tolist()
    start = cached = max(0, len(tokens) - window)  # the segment's first token; the cache holds tokens[start:cached]
    feeds = []
    for _ in range(max_new_tokens):
        logits = model(torch.tensor(tokens[start:])[None])[:, -1]
        feeds.append((len(tokens) - cached, cached == start))
        cached = len(tokens)
        if pick is None:
            token = int(logits.argmax(dim=-1)[0])
        else:
            token = int(sample_next_oracle(logits, pick, generator)[0])
        tokens.append(token)
        if token == eos_id:
            break
        if cached - start >= window:  # the cache is full: a new segment with the recent half
            start = cached = len(tokens) - window // 2
    return tokens, feeds


def sample_next_oracle(logits, pick, generator):
    """Temperature, then top-k, then a draw: the sampler the adapter hands to the student's loop."""
    from autograder.reference.sampling import sample_next

    return sample_next(logits, temperature=pick["temperature"], top_k=pick["top_k"], generator=generator)


def _generation_case(
    impl,
    seed,
    *,
    prompt_length,
    window,
    max_new_tokens,
    eos_from=None,
    pick=None,
    fields=None,
    prompt_dtype=torch.int64,
):
    """Run the student's loop and the oracle; fail with what differs, named where the mistake is known."""
    fields = fields or _generation_fields(seed)
    model = _generation_model(fields, seed)
    prompt = torch.randint(0, fields["vocab_size"], (prompt_length,), generator=_gen(seed + 800)).to(prompt_dtype)
    expected, feeds = _segments_oracle(model, prompt, max_new_tokens=max_new_tokens, window=window, pick=pick)
    eos_id = None
    if eos_from is not None:  # the token the loop picks at step eos_from ends the text there
        eos_id = expected[prompt_length + eos_from]
        expected, feeds = _segments_oracle(
            model, prompt, max_new_tokens=max_new_tokens, window=window, eos_id=eos_id, pick=pick
        )
    call = (
        f"generate_with_cache(model, prompt of {prompt_length} tokens, max_new_tokens={max_new_tokens}, "
        f"window={window}{f', eos_id={eos_id}' if eos_id is not None else ''}"
        f"{', pick=a seeded sampler' if pick else ', pick=greedy'}"
        f"{f', a {prompt_dtype} prompt' if prompt_dtype != torch.int64 else ''})"
    )
    got = impl.call(
        generate_with_cache,
        fields,
        model.state_dict(),
        prompt.clone(),
        max_new_tokens=max_new_tokens,
        window=window,
        eos_id=eos_id,
        pick=pick,
    )
    _check_calls(got["calls"], feeds, got["caches"], prompt_length, window, call)
    tokens = expect.tensor(got["tokens"], call)
    expect.that(
        tokens.dim() == 1,
        f"{call} returned shape {list(tokens.shape)}, expected a 1-D tensor: the prompt followed by the new tokens",
    )
    expect.that(
        tokens.dtype == prompt.dtype,
        f"{call} returned {tokens.dtype} tokens for a {prompt.dtype} prompt: the "
        "result has the prompt's dtype. pick returns int64 tokens, and torch.cat of a sequence of another "
        "integer dtype with them promotes it to int64: convert each new token with .to(prompt.dtype) before "
        "adding it (or build the result with dtype=prompt.dtype)",
    )
    _check_tokens(tokens.tolist(), expected, prompt_length, eos_id, call)
    shapes = {tuple(s) for s in got["picks"]}
    expect.that(
        len(got["picks"]) == len(expected) - prompt_length and shapes <= {(1, fields["vocab_size"])},
        f"{call} called pick {len(got['picks'])} times with logits of shapes {sorted(shapes)}, "
        f"expected once per new token ({len(expected) - prompt_length}) with the last position's logits "
        f"[1, {fields['vocab_size']}]",
    )
    expect.that(got["prompt_unchanged"], f"{call} changed the prompt tensor in place: build a new sequence")


def _check_calls(calls, feeds, caches, prompt_length, window, call):
    expect.that(
        all(c["cache"] is not None for c in calls),
        f"{call} called the model without a cache: pass cache=new_cache() on the first call and the same "
        "cache on the next ones",
    )
    expect.that(
        not any(c["grad"] for c in calls),
        f"{call} ran the model with gradients on: decorate it with @torch.no_grad(), or every step's "
        "autograd graph stays alive in the cache",
    )
    bad = [c["shape"] for c in calls if c["shape"] is None or len(c["shape"]) != 2 or c["shape"][0] != 1]
    expect.that(not bad, f"{call} fed the model tokens of shape {list(bad[0] or [])}, expected [1, n]" if bad else "")
    fed = [c["shape"][1] for c in calls]
    if calls:
        expect.that(
            fed[0] == feeds[0][0],
            f"{call}: the first call fed {fed[0]} tokens, expected "
            f"{feeds[0][0]}: the prompt's last window tokens (all of a prompt of at most window)",
        )
    held = max(c["after"] for c in calls) if calls else 0
    expect.that(
        held <= window,
        f"{call}: the cache grew to {held} positions, more than window={window}: when it "
        "holds window positions, start a new cache (new_cache()) filled with the last window // 2 tokens",
    )
    if caches > len(calls) > 1 or (len(calls) > 2 and all(c["before"] == 0 for c in calls)):
        expect.fail(
            f"{call} started a new cache for every call ({caches} caches for {len(calls)} calls): keep the "
            "cache between steps and feed it only the newest token"
        )
    for i, c in enumerate(calls[1:], start=1):
        if c["before"]:
            expect.that(
                fed[i] == 1,
                f"{call}: call {i + 1} fed {fed[i]} tokens to a cache that already held "
                f"{c['before']}: after the prefill, feed only the newest token",
            )
        else:
            expect.that(
                fed[i] == window // 2,
                f"{call}: call {i + 1} filled a new cache with {fed[i]} tokens, "
                f"expected the last window // 2 = {window // 2}",
            )
    restarts = [i for i, c in enumerate(calls) if c["before"] == 0]
    expected_restarts = [i for i, (_, new) in enumerate(feeds) if new]
    if restarts != expected_restarts and len(calls) >= len(feeds):
        first = next(i for i in range(len(calls)) if (i in restarts) != (i in expected_restarts))
        before = calls[first]["before"]
        expect.fail(
            f"{call}: call {first + 1} "
            + (
                f"started a new cache while the old one held {calls[first - 1]['after']} of window={window} positions: "
                "start again only when the cache is full"
                if first in restarts
                else f"went on with a cache that held {before} of window={window} positions: when it is full, start a new "
                "one with the last window // 2 tokens"
            )
        )
    expect.that(
        len(calls) == len(feeds),
        f"{call} made {len(calls)} model calls for {len(feeds)} new tokens: one "
        "call per new token (the prefill gives the first); no call after the last token",
    )


def _check_tokens(got, expected, prompt_length, eos_id, call):
    if got == expected:
        return
    if got[:prompt_length] != expected[:prompt_length]:
        expect.fail(f"{call} does not begin with the prompt: return the prompt followed by the new tokens")
    if eos_id is not None and got == expected[:-1]:
        expect.fail(f"{call} stopped at eos_id but dropped it: keep the eos token, then stop")
    if eos_id is not None and len(got) > len(expected) and got[: len(expected)] == expected:
        expect.fail(f"{call} went on after eos_id {eos_id}: stop as soon as it is picked (it is kept)")
    first = next(
        (i for i, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b), min(len(got), len(expected))
    )
    expect.fail(
        f"{call} gave {len(got) - prompt_length} new tokens, expected {len(expected) - prompt_length}; the "
        f"first difference is new token {first - prompt_length + 1} ({got[first] if first < len(got) else 'none'}"
        f" instead of {expected[first] if first < len(expected) else 'none'}). The oracle recomputes every "
        "token without a cache over the current window segment."
    )


@GENERATE.visible
def test_generation_equals_recomputation(impl):
    "greedy tokens equal a full recomputation without a cache over each window segment (prompt 5, window 8, 20 tokens)"
    _generation_case(impl, 0, prompt_length=5, window=8, max_new_tokens=20)


@GENERATE.visible
def test_generation_feeds_and_cache(impl):
    "one call per new token: the prompt, then one token per call; a full cache restarts with window // 2; int32 kept"
    _generation_case(impl, 1, prompt_length=3, window=6, max_new_tokens=16)
    _generation_case(impl, 12, prompt_length=4, window=6, max_new_tokens=9, prompt_dtype=torch.int32)


@GENERATE.hidden
def test_generation_window_beyond_the_demos(impl):
    "a window of 300, beyond the notebook's demo (128 or 256): a prompt of 296, then a restart with the last 150"
    fields = _generation_fields(13, layers=1, d=8, heads=2, kv=1, max_seq_len=320)  # small: a forward of 300 is cheap
    _generation_case(impl, 13, prompt_length=296, window=300, max_new_tokens=8, fields=fields)


@GENERATE.hidden
def test_generation_long_prompts_and_odd_windows(impl):
    "a prompt longer than the window, odd windows (7 keeps 3), the smallest window (2 keeps 1), other decoders"
    _generation_case(impl, 2, prompt_length=12, window=8, max_new_tokens=14, prompt_dtype=torch.int32)
    _generation_case(impl, 3, prompt_length=4, window=7, max_new_tokens=18, fields=_generation_fields(3, kv=1))
    _generation_case(impl, 4, prompt_length=2, window=2, max_new_tokens=6, fields=_generation_fields(4, layers=3, kv=4))
    _generation_case(impl, 5, prompt_length=1, window=16, max_new_tokens=10)


@GENERATE.hidden
def test_generation_stops(impl):
    "eos_id ends the text and is kept (at the first token, mid-window, after a restart); 0 and 1 new tokens"
    _generation_case(impl, 6, prompt_length=4, window=6, max_new_tokens=20, eos_from=0)
    _generation_case(impl, 7, prompt_length=4, window=6, max_new_tokens=20, eos_from=2)
    _generation_case(impl, 8, prompt_length=4, window=6, max_new_tokens=20, eos_from=9)
    _generation_case(impl, 9, prompt_length=4, window=6, max_new_tokens=1)
    _generation_case(impl, 10, prompt_length=4, window=6, max_new_tokens=0)


@GENERATE.hidden
def test_generation_samples(impl):
    "with a seeded sampler (temperature 0.9, top-k 5) as pick: the same draws as the oracle, one pick per token"
    _generation_case(
        impl, 11, prompt_length=5, window=8, max_new_tokens=24, pick={"seed": 3, "temperature": 0.9, "top_k": 5}
    )


# ---------------------------------------------------------------------------------------------------------------
# Adapters: the only code in this module that touches the student's objects. They run beside the student's code
# (in the sandboxed worker while grading, in the kernel for the notebook's own test cells), build and call the
# student's classes and functions on the inputs a check gives, and return plain results; they compute and report,
# never judge. A check calls one by reference, ``impl.call(name, ...)``; only functions marked ``@adapter`` can be.
#
# Adapters for notebook 13: bits per byte, FLOPs per token and MFU, the ranks' micro-batches, attention maps,
# a training step, generation with a KV cache.
#
# ``flops_per_token`` gets the reference ``DecoderConfig``; ``attention_maps``, ``train_step`` and
# ``generate_with_cache`` the reference decoder (``autograder.reference``, with its ``KVCache``), loaded with the
# checker's weights, so grading never rests on notebooks 08 and 11.


@adapter
def bits_per_byte(ns, loss: float, tokens: int, n_bytes: int):
    return need(ns, "bits_per_byte")(loss, tokens, n_bytes)


@adapter
def flops(ns, fields: dict, context_length: int):
    return need(ns, "flops_per_token")(DecoderConfig(**fields), context_length)


@adapter
def mfu(ns, tokens_per_second: float, flops_per_token: int, peak_flops: float):
    return need(ns, "mfu")(tokens_per_second, flops_per_token, peak_flops)


@adapter
def micro_batches(ns, batch: torch.Tensor, world_size: int, accumulation_steps: int) -> list:
    """Every rank's micro-batches (a list of tensors per rank), or a sentence saying what came back instead."""
    function = need(ns, "rank_micro_batches")
    ranks = []
    for rank in range(world_size):
        value = function(batch.clone(), rank, world_size, accumulation_steps)
        if not isinstance(value, list):
            ranks.append(
                f"returned a {type(value).__name__}, expected a list of tensors"
                + (" (list(...) around torch.split's tuple)" if isinstance(value, tuple) else "")
            )
        elif not all(isinstance(part, torch.Tensor) for part in value):
            ranks.append("returned a list that holds something other than tensors")
        else:
            ranks.append([part.clone() for part in value])
    return ranks


@adapter
def micro_batches_error(ns, batch: torch.Tensor, world_size: int, accumulation_steps: int) -> dict:
    return outcome(need(ns, "rank_micro_batches"), batch, 0, world_size, accumulation_steps)


class _InjectedFailure(RuntimeError):
    """Raised by the model in the middle of a forward pass, to see the hooks removed even then."""


def _hook_count(model) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


@adapter
def attention_maps_run(ns, fields: dict, state: dict, tokens: torch.Tensor) -> dict:
    """The student's ``attention_maps`` on the reference decoder holding ``state``, and what it did: for every
    call of a ``block.attn``, whether gradients were on, how many hooks of the student's were on that module and
    whether its ``forward`` was replaced; how many times the model ran; what it left behind. Then a second call on
    a model that fails in the middle of its forward (at its last block's attention): how many hooks it left.
    Gradients are on when it is called: turning them off is the student's job, and observed."""
    attention_maps = need(ns, "attention_maps")
    model = LlamaDecoder(DecoderConfig(**fields)).eval()
    model.load_state_dict(state)
    with torch.no_grad():
        before = model(tokens)
    attn_calls, model_calls = [], []

    def at_attention(module, args):
        attn_calls.append(
            {
                "grad": torch.is_grad_enabled(),
                "forward_replaced": "forward" in vars(module),
                "hooks": len(module._forward_hooks) + len(module._forward_pre_hooks) - 1,
            }
        )

    ours = [block.attn.register_forward_pre_hook(at_attention) for block in model.blocks]
    ours.append(model.register_forward_pre_hook(lambda module, args: model_calls.append(1)))
    with torch.enable_grad():
        value = attention_maps(model, tokens)
    for handle in ours:
        handle.remove()
    hooks = _hook_count(model)
    with torch.no_grad():
        unchanged = bool(torch.equal(model(tokens), before))

    def fail(module, args):
        raise _InjectedFailure("the model failed (the grader made its last attention fail before it ran)")

    # In the middle of the forward: the earlier blocks' hooks have run, the last block's has not.
    failing = model.blocks[-1].attn.register_forward_pre_hook(fail)
    with contextlib.suppress(Exception):  # the failure, or the student's code's own error around it
        attention_maps(model, tokens)
    failing.remove()
    return {
        "maps": value,
        "hooks_left": hooks,
        "logits_unchanged": unchanged,
        "attn_calls": attn_calls,
        "model_calls": len(model_calls),
        "hooks_left_after_failure": _hook_count(model),
    }


@adapter
@torch.no_grad()
def attention_maps_on_meta(ns, fields: dict, shape: list) -> dict:
    """The student's ``attention_maps`` on the reference decoder and tokens moved to PyTorch's meta device (shapes
    only, no values): what it raised, or its result's device and shape. Positions or a mask made on the CPU
    cannot be mixed with meta tensors, so it raises."""
    model = LlamaDecoder(DecoderConfig(**fields)).eval().to("meta")
    tokens = torch.zeros(shape, dtype=torch.long, device="meta")
    made = []
    result = outcome(lambda: made.append(need(ns, "attention_maps")(model, tokens)))
    output = made[0] if made else None
    return result | {"device": str(getattr(output, "device", "")), "shape": list(getattr(output, "shape", []))}


_DTYPES = {None: None, "bfloat16": torch.bfloat16, "float16": torch.float16}
_LOSS_OPS: list = []  # the operations on the logits of the current train_step call (see _Logits)


class _Logits(torch.Tensor):
    """The model's logits as ``train_step`` receives them: every operation on them, or on what is computed from them,
    that takes more than a scalar and gives a result that requires grad (the way from the logits to the loss:
    ``.float()``, ``.flatten()``, ``F.cross_entropy``; not ``loss / k`` nor ``scaler.scale(loss)``) is recorded
    in ``_LOSS_OPS`` with whether autocast was on when it ran."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        result = super().__torch_function__(func, types, args, kwargs or {})
        with torch._C.DisableTorchFunctionSubclass():
            inputs = [a for a in (*args, *(kwargs or {}).values()) if isinstance(a, _Logits)]
            differentiable = any(
                isinstance(r, torch.Tensor) and r.requires_grad
                for r in (result if isinstance(result, tuple | list) else (result,))
            )
            if differentiable and any(a.numel() > 1 for a in inputs):
                device = inputs[0].device.type
                _LOSS_OPS.append(
                    {"op": getattr(func, "__name__", str(func)), "autocast": torch.is_autocast_enabled(device)}
                )
        return result


def _grads_left(model) -> dict:
    """How many parameters hold no gradient (None), zeros, or values."""
    left = {"none": 0, "zeros": 0, "values": 0}
    for p in model.parameters():
        left["none" if p.grad is None else "zeros" if not p.grad.any() else "values"] += 1
    return left


@adapter
def train_step(
    ns,
    fields: dict,
    state: dict,
    steps: list,
    *,
    optimizer: str,
    optimizer_kwargs: dict,
    dtype: str | None = None,
    scaler: dict | None = None,
    grad_clip: float | None = None,
) -> dict:
    """The student's ``train_step`` on the reference decoder, once per entry of ``steps`` (a list of micro-batch lists).

    Reports the parameters after every call, the optimizer's update count per parameter, the scaler's scale,
    the returned losses, and, for every forward pass of the model, the autocast state it ran under and the
    dtype of its logits; the forward and backward passes in the order they ran (``"F<rows>"``, ``"B"``: a hook on
    ``lm_head.weight``, which every backward pass reaches once) and whether a backward pass ran under autocast;
    the operations that turned the logits into the
    loss, with their autocast state (``_Logits``); and what ``.grad`` held when the call returned. An error stops
    the calls and is reported with the call it happened in.
    """
    function = need(ns, "train_step")
    model = LlamaDecoder(DecoderConfig(**fields))
    model.load_state_dict(state)
    kind = {"sgd": torch.optim.SGD, "adamw": torch.optim.AdamW}[optimizer]
    opt = kind(model.parameters(), **optimizer_kwargs)
    grad_scaler = torch.amp.GradScaler("cpu", **scaler) if scaler is not None else None
    seen = _PassObserver(model)
    result = {key: [] for key in _STEP_RECORDS} | {"raised": None}
    for call, micro_batches in enumerate(steps):
        seen.clear()
        _LOSS_OPS.clear()
        try:
            loss = function(
                model,
                [(x.clone(), y.clone()) for x, y in micro_batches],
                opt,
                dtype=_DTYPES[dtype],
                scaler=grad_scaler,
                grad_clip=grad_clip,
            )
        except NotImplementedError:
            raise
        except Exception as error:  # noqa: BLE001
            result["raised"] = {"call": call, "type": type(error).__name__, "message": str(error)}
            break
        for key, value in _after_step(loss, model, opt, grad_scaler, seen).items():
            result[key].append(value)
    _LOSS_OPS.clear()
    return result


_STEP_RECORDS = (
    "losses",
    "states",
    "updates",
    "scales",
    "forwards",
    "events",
    "loss_ops",
    "backward_autocast",
    "grads_left",
)


class _PassObserver:
    """Hooks on a model that record each forward pass (autocast state, logits dtype, rows) and backward pass."""

    def __init__(self, model: torch.nn.Module):
        self.forwards, self.events, self.backward_autocast = [], [], []
        model.register_forward_hook(self._forward, with_kwargs=True)
        model.lm_head.weight.register_hook(self._backward)

    def clear(self) -> None:
        self.forwards.clear()
        self.events.clear()
        self.backward_autocast.clear()

    def _forward(self, module, args, kwargs, output):
        self.forwards.append(
            {
                "autocast": torch.is_autocast_enabled("cpu"),
                "dtype": str(torch.get_autocast_dtype("cpu")),
                "logits": str(getattr(output, "dtype", None)),
            }
        )
        tokens = next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)
        self.events.append(f"F{tokens.shape[0] if tokens is not None and tokens.dim() else '?'}")
        return output.as_subclass(_Logits) if isinstance(output, torch.Tensor) else output

    def _backward(self, grad):
        # Autocast is thread-local state that the backward pass runs with: a backward inside the with shows here.
        self.events.append("B")
        self.backward_autocast.append(torch.is_autocast_enabled("cpu"))


def _after_step(loss, model, opt, grad_scaler, seen: _PassObserver) -> dict:
    """What one call of the student's train_step left: one value per key of ``_STEP_RECORDS``."""
    return {
        "losses": loss
        if isinstance(loss, int | float)
        else {"__unsupported__": "Tensor" if isinstance(loss, torch.Tensor) else type(loss).__qualname__},
        "states": {name: p.detach().clone() for name, p in model.named_parameters()},
        "updates": sorted({int(opt.state[p]["step"]) for p in model.parameters() if "step" in opt.state.get(p, {})}),
        "scales": grad_scaler.get_scale() if grad_scaler is not None else None,
        "forwards": list(seen.forwards),
        "events": list(seen.events),
        "loss_ops": list(_LOSS_OPS),
        "backward_autocast": any(seen.backward_autocast),
        "grads_left": _grads_left(model),
    }


class _Watched(torch.nn.Module):
    """The reference decoder as a cached model, recording every call: how many positions the cache held
    before it, how many tokens it was fed, how many it held after, and whether gradients were on."""

    def __init__(self, model, calls: list):
        super().__init__()
        self.model, self.calls = model, calls

    def forward(self, tokens, cache=None):
        before = None if cache is None else getattr(cache, "length", None)
        shape = list(tokens.shape) if isinstance(tokens, torch.Tensor) else None
        logits = self.model(tokens, cache=cache)
        self.calls.append(
            {
                "cache": id(cache) if cache is not None else None,
                "before": before,
                "shape": shape,
                "after": None if cache is None else cache.length,
                "grad": torch.is_grad_enabled(),
            }
        )
        return logits


@adapter
def generate_with_cache(
    ns,
    fields: dict,
    state: dict,
    prompt: torch.Tensor,
    *,
    max_new_tokens: int,
    window: int,
    eos_id: int | None = None,
    pick: dict | None = None,
) -> dict:
    """The student's ``generate_with_cache`` on the reference decoder (float64) holding ``state``, with the
    reference ``KVCache``: what it returned, every model call, the caches it asked for, and the picks it made.
    Gradients are left as they are (no ``no_grad`` here): turning them off is the student's job, and observed.
    ``pick``: None (greedy) or {"seed": s, "temperature": t, "top_k": k} (a sampler with its own generator)."""
    function = need(ns, "generate_with_cache")
    model = LlamaDecoder(DecoderConfig(**fields)).double().eval()
    model.load_state_dict(state)
    calls, caches, picks = [], [], []

    def new_cache():
        caches.append(KVCache(fields["n_layers"]))
        return caches[-1]

    generator = torch.Generator().manual_seed(pick["seed"]) if pick else None

    def chooser(logits):
        picks.append(list(logits.shape))
        if pick is None:
            return logits.argmax(dim=-1)
        return sample_next(logits, temperature=pick["temperature"], top_k=pick["top_k"], generator=generator)

    original = prompt.clone()
    value = function(
        _Watched(model, calls),
        prompt,
        max_new_tokens=max_new_tokens,
        window=window,
        new_cache=new_cache,
        eos_id=eos_id,
        pick=chooser,
    )
    for call in calls:  # which cache, as its number in the order new_cache made them
        call["cache"] = next((i for i, c in enumerate(caches) if id(c) == call["cache"]), None)
    return {
        "tokens": value,
        "calls": calls,
        "caches": len(caches),
        "picks": picks,
        "prompt_unchanged": bool(torch.equal(prompt, original)),
    }
