"""The reference stack's library parts (``tinystories.library``) are the course's parts, by independent oracles.

- ``LibraryDecoder`` gives Hugging Face's ``LlamaForCausalLM`` logits (a tiny random config; HF's weights in the
  course's names and layout, ``autograder.reference.hf_llama.course_state``), and the solutions' ``ModernDecoder``
  and ``CachedDecoder`` logits with the same weights: with and without a padding mask, with either stack's KV cache
  (float32 on the CPU, atol 1e-5: the models differ only in the order of their float32 operations).
- ``LibraryCache`` is notebook 11's ``KVCache`` for a student's ``CachedDecoder``: token by token it gives the logits
  of one full forward.
- ``sample_next`` draws what the solutions' ``sample_next`` draws from the same generator: the same filtered
  distribution, for each temperature, top-k and top-p on logits without ties (random normals).
- ``generate_in_segments`` (no cache) writes the tokens of the solutions' ``generate_with_cache`` with their
  ``CachedDecoder`` and ``KVCache``: greedy and sampled, prompts shorter and longer than the window, restarts.
- ``flops_per_token`` (FlopCounterMode) is the solutions' closed form to the FLOP; ``rank_micro_batches``,
  ``mfu`` and ``bits_per_byte`` give the solutions' values (exact for the tensors, rtol 1e-12 for the floats).
"""

from __future__ import annotations

import pytest
import torch
from tinystories_helpers import solution_parts

from autograder.reference import hf_llama
from tinystories import library
from tinystories.library import DecoderConfig, LibraryCache, LibraryDecoder, sample_next

ATOL = 1e-5
SHAPES = [  # (d_model, n_layers, n_heads, n_kv_heads, d_ff, seed)
    (32, 2, 4, None, 64, 0),
    (48, 1, 6, 2, 96, 1),
    (64, 3, 4, 1, 80, 2),
]


@pytest.fixture(scope="module")
def solutions():
    return (
        solution_parts("08_decoder_models", "DecoderConfig", "ModernDecoder")
        | solution_parts("11_decoding", "CachedDecoder", "KVCache", "sample_next")
        | solution_parts(
            "13_tinystories", "generate_with_cache", "flops_per_token", "mfu", "bits_per_byte", "rank_micro_batches"
        )
    )


def fields(d_model, n_layers, n_heads, n_kv_heads, d_ff):
    return dict(vocab_size=61, d_model=d_model, n_layers=n_layers, n_heads=n_heads, d_ff=d_ff, max_seq_len=40,
                n_kv_heads=n_kv_heads)  # fmt: skip


@pytest.mark.parametrize(("d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "seed"), SHAPES)
def test_library_decoder_is_hugging_faces_llama(d_model, n_layers, n_heads, n_kv_heads, d_ff, seed):
    transformers = hf_llama.transformers_quiet()
    shape = fields(d_model, n_layers, n_heads, n_kv_heads, d_ff)
    torch.manual_seed(seed)
    hf = transformers.LlamaForCausalLM(hf_llama.hf_config(shape, "sdpa")).eval()
    ours = LibraryDecoder(DecoderConfig(**shape)).eval()
    ours.load_state_dict(hf_llama.course_state(hf.state_dict(), shape))
    tokens = torch.randint(0, 61, (3, 23), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        torch.testing.assert_close(ours(tokens), hf(tokens).logits, atol=ATOL, rtol=0)


@pytest.mark.parametrize(("d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "seed"), SHAPES)
def test_library_decoder_is_the_solutions_decoder(solutions, d_model, n_layers, n_heads, n_kv_heads, d_ff, seed):
    """Same weights (either way round): the solutions' ModernDecoder logits, also under left padding, and their
    CachedDecoder's through a prompt and three single tokens, each model with the other stack's cache."""
    shape = fields(d_model, n_layers, n_heads, n_kv_heads, d_ff)
    torch.manual_seed(seed)
    theirs = solutions["ModernDecoder"](solutions["DecoderConfig"](**shape)).eval()
    ours = LibraryDecoder(DecoderConfig(**shape)).eval()
    ours.load_state_dict(theirs.state_dict())
    cached = solutions["CachedDecoder"](solutions["DecoderConfig"](**shape)).eval()
    cached.load_state_dict(ours.state_dict())
    tokens = torch.randint(0, 61, (2, 17), generator=torch.Generator().manual_seed(seed))
    padding = torch.ones(2, 17, dtype=torch.bool)
    padding[0, :5] = False
    with torch.no_grad():
        torch.testing.assert_close(ours(tokens), theirs(tokens), atol=ATOL, rtol=0)
        torch.testing.assert_close(ours(tokens, padding), theirs(tokens, padding), atol=ATOL, rtol=0)
        full = theirs(tokens)
        for model, cache in ((ours, solutions["KVCache"](n_layers)), (cached, LibraryCache(n_layers))):
            steps = [model(tokens[:, :14], cache=cache)] + [
                model(tokens[:, i : i + 1], cache=cache) for i in (14, 15, 16)
            ]
            assert cache.length == 17
            torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=ATOL, rtol=0)


def test_library_cache_appends_along_the_positions():
    cache = LibraryCache(2)
    assert cache.length == 0
    first = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)
    keys, values = cache.update(0, *first)
    torch.testing.assert_close((keys, values), first)
    cache.update(1, *first)
    more = torch.randn(1, 2, 1, 4), torch.randn(1, 2, 1, 4)
    keys, values = cache.update(0, *more)
    assert cache.length == 4 and keys.shape == (1, 2, 4, 4)
    torch.testing.assert_close(keys, torch.cat([first[0], more[0]], dim=2))
    torch.testing.assert_close(values, torch.cat([first[1], more[1]], dim=2))


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("temperature", "top_k", "top_p"),
                         [(1.0, None, None), (0.7, None, None), (1.3, 5, None), (0.9, None, 0.8),
                          (0.8, 10, 0.6), (1.0, 1, None), (1.0, None, 0.05), (0.0, None, None)])  # fmt: skip
def test_library_sampling_draws_what_the_solutions_draw(solutions, seed, temperature, top_k, top_p):
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(seed)) * 3
    options = dict(temperature=temperature, top_k=top_k, top_p=top_p)
    for draw in range(5):
        ours = sample_next(logits, **options, generator=torch.Generator().manual_seed(draw))
        theirs = solutions["sample_next"](logits, **options, generator=torch.Generator().manual_seed(draw))
        assert torch.equal(ours, theirs), (options, draw)


@pytest.mark.parametrize(("prompt_length", "window", "max_new_tokens"), [(5, 12, 30), (20, 12, 25), (3, 7, 16)])
@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "sampled"])
def test_library_generation_writes_the_solutions_tokens(solutions, prompt_length, window, max_new_tokens, sampled):
    shape = fields(32, 2, 4, 2, 64)
    torch.manual_seed(prompt_length)
    model = solutions["CachedDecoder"](solutions["DecoderConfig"](**shape)).eval()
    for p in model.parameters():  # sharper than the default initialisation: varied, decisive picks
        p.data.mul_(4.0 if p.dim() > 1 else 1.0)
    prompt = torch.randint(0, 61, (prompt_length,), generator=torch.Generator().manual_seed(window))

    def pick(generator):
        if not sampled:
            return lambda logits: logits.argmax(dim=-1)
        return lambda logits: solutions["sample_next"](logits, temperature=1.0, generator=generator)

    options = dict(max_new_tokens=max_new_tokens, window=window, eos_id=None)
    theirs = solutions["generate_with_cache"](
        model, prompt, new_cache=lambda: solutions["KVCache"](2), **options, pick=pick(torch.Generator().manual_seed(3))
    )
    ours = library.generate_in_segments(model, prompt, **options, pick=pick(torch.Generator().manual_seed(3)))
    assert len(ours) == prompt_length + max_new_tokens and torch.equal(ours, theirs)
    eos = int(theirs[prompt_length + 4])
    stopped = library.generate_in_segments(
        model,
        prompt,
        max_new_tokens=max_new_tokens,
        window=window,
        eos_id=eos,
        pick=pick(torch.Generator().manual_seed(3)),
    )
    first = prompt_length + int((theirs[prompt_length:] == eos).nonzero()[0])
    assert torch.equal(stopped, theirs[: first + 1])


@pytest.mark.parametrize(("d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "seed"), SHAPES)
@pytest.mark.parametrize("context", [1, 16, 100])
def test_library_measures_the_solutions_flops(solutions, d_model, n_layers, n_heads, n_kv_heads, d_ff, seed, context):
    shape = fields(d_model, n_layers, n_heads, n_kv_heads, d_ff)
    ours = library.flops_per_token(DecoderConfig(**shape), context)
    assert isinstance(ours, int) and ours == solutions["flops_per_token"](solutions["DecoderConfig"](**shape), context)


@pytest.mark.parametrize(("n", "world", "accumulation"), [(8, 2, 2), (12, 3, 2), (6, 1, 3), (4, 4, 1), (24, 2, 3)])
def test_library_micro_batches_are_the_solutions(solutions, n, world, accumulation):
    batch = torch.arange(n * 3).view(n, 3)
    for rank in range(world):
        ours = library.rank_micro_batches(batch, rank, world, accumulation)
        theirs = solutions["rank_micro_batches"](batch, rank, world, accumulation)
        assert len(ours) == len(theirs) and all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True))
    with pytest.raises(ValueError):
        library.rank_micro_batches(batch, 0, world, n + 1)


@pytest.mark.parametrize("numbers", [(2.5, 1000, 4100, 1e12), (0.7, 37, 101, 3.3e9), (6.2, 5, 5, 1.0)])
def test_library_closed_forms_give_the_solutions_values(solutions, numbers):
    loss, tokens, n_bytes, peak = numbers
    assert library.bits_per_byte(loss, tokens, n_bytes) == pytest.approx(
        solutions["bits_per_byte"](loss, tokens, n_bytes), rel=1e-12
    )
    assert library.mfu(tokens * 1e3, n_bytes * 1e6, peak) == pytest.approx(
        solutions["mfu"](tokens * 1e3, n_bytes * 1e6, peak), rel=1e-12
    )
