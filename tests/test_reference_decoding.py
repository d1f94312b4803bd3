"""The reference decoder's cache support (notebook 11's fallback, grading engines and benchmarks).

With a ``KVCache`` the reference ``LlamaDecoder`` gives, call by call, the logits of recomputing the whole
sequence; the ``SlotEngine`` (per-slot caches and positions) and the ``RecomputeEngine`` serve mixed-length
requests with the greedy tokens of one request at a time, under both schedules; without a cache nothing
changed (notebooks 08 and 09's checks run the same models).
"""

from __future__ import annotations

import pytest
import torch

from autograder.reference.batching import RecomputeEngine, SlotEngine, static
from autograder.reference.configs import DecoderConfig
from autograder.reference.decoders import LlamaDecoder
from autograder.reference.kv_cache import KVCache


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models: one thread, as the notebook uses (two threads on a busy 2-core machine were 40x slower)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _decoder(seed=0):
    torch.manual_seed(seed)
    model = LlamaDecoder(
        DecoderConfig(vocab_size=30, d_model=32, n_layers=2, n_heads=4, d_ff=48, max_seq_len=64, n_kv_heads=2)
    ).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.3)
    return model


@torch.no_grad()
def test_cached_calls_equal_recomputation():
    model = _decoder()
    tokens = torch.randint(0, 30, (2, 10), generator=torch.Generator().manual_seed(1))
    full = model(tokens)
    cache = KVCache(2)
    pieces = [model(tokens[:, a:b], cache=cache) for a, b in ((0, 4), (4, 7), (7, 8), (8, 9), (9, 10))]
    assert cache.length == 10
    torch.testing.assert_close(torch.cat(pieces, 1), full, atol=1e-4, rtol=1e-4)


@torch.no_grad()
def test_engines_and_schedules_give_one_at_a_time_greedy_tokens():
    model = _decoder(2)
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(0, 30, (int(n),), generator=g) for n in torch.randint(1, 8, (7,), generator=g)]

    def alone(prompt):
        tokens, new = prompt[None], []
        for _ in range(9):
            new.append(int(model(tokens)[0, -1].argmax()))
            tokens = torch.cat([tokens, torch.tensor([[new[-1]]])], 1)
            if new[-1] == 5:
                break
        return new

    expected = [alone(p) for p in prompts]
    for engine in (lambda: SlotEngine(model, 3, 32), lambda: RecomputeEngine(model, 3)):
        for schedule in (solutions_continuous_batching(), static):
            assert schedule(engine(), prompts, max_new_tokens=9, eos_id=5) == expected


def test_the_beam_oracle_with_a_wide_beam_is_brute_force():
    """The checks' beam search (notebook 11's spec) agrees with enumeration when no candidate is dropped."""
    from autograder.notebooks.nb11_decoding import _table, beam_oracle, best_hypothesis

    for seed in (60, 111, 7):
        table, prompt = _table(seed, vocab=4, scale=1.5), torch.tensor([1, 2])
        for alpha in (0.0, 1.0):
            best, score, _ = best_hypothesis(table, prompt, 4, 0, alpha)
            assert beam_oracle(table, prompt, 500, 4, 0, alpha) == (best, pytest.approx(score))


@torch.no_grad()
def test_the_reference_generate_is_notebook_11s_loop():
    """Notebook 13's fallback for notebook 11's ``generate``: token for token the solution's loop, greedy and
    sampled, stopping at eos (kept) or after max_new_tokens."""
    from notebooks import ROOT

    from autograder.reference.sampling import generate, sample_next
    from coursetools.notebook_import import load_from_notebook

    theirs = load_from_notebook("11_decoding", "generate", folder=ROOT / "solutions")
    model = _decoder(4)
    for seed in range(4):
        prompt = torch.randint(0, 30, (1 + seed,), generator=torch.Generator().manual_seed(seed))
        greedy_run = theirs(model, prompt, max_new_tokens=12)
        for eos_id in (None, int(greedy_run[len(prompt) + 2])):  # no eos, then one the loop meets
            kwargs = {"max_new_tokens": 12, "eos_id": eos_id}
            got, expected = generate(model, prompt, **kwargs), theirs(model, prompt, **kwargs)
            assert torch.equal(got, expected), (seed, eos_id, got, expected)
        # sampled: the same draws from generators seeded alike
        drawn = [run(model, prompt, max_new_tokens=8, pick=_sampler(sample_next, seed)) for run in (generate, theirs)]
        assert torch.equal(*drawn), drawn


def _sampler(sample_next, seed):
    generator = torch.Generator().manual_seed(100 + seed)
    return lambda logits: sample_next(logits, temperature=0.9, top_k=10, generator=generator)


def solutions_continuous_batching():
    """Notebook 11's continuous batching as the solutions write it: no library has a scheduler for these engines, and
    the package carries no answer (tests/test_wheel_answers.py), so the tests and the benchmark load it from there."""
    from notebooks import ROOT

    from coursetools.notebook_import import load_from_notebook

    return load_from_notebook("11_decoding", "continuous_batching", folder=ROOT / "solutions")
