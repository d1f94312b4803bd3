"""Speculative decoding's parts given to the checks of ``speculative_generate`` in place of the student's, so that
exercise is graded on its own: Hugging Face's own rejection sampling (``_speculative_sampling`` of
``transformers.generation.utils``, the algorithm of Leviathan et al., 2023) and its own cache cropping
(``DynamicCache.crop``), under the notebook's interfaces.

Imported with the notebook's checks, before any student code runs, so a submitted ``transformers`` folder cannot
stand in for the library.
"""

from __future__ import annotations

import torch

from autograder.reference.hf_llama import transformers_quiet

_TRANSFORMERS = transformers_quiet()
from transformers.generation.utils import _speculative_sampling  # noqa: E402 - after transformers_quiet


def speculative_accept(target_probs, draft_probs, drafted, generator=None):
    """The tokens a round emits: ``target_probs`` [k + 1, V], ``draft_probs`` [k, V], ``drafted`` [k] -> [n + 1].

    Hugging Face samples with torch's global generator; it runs here under a fork of that generator seeded from
    ``generator``, so that every draw comes from ``generator`` and the global state is left as it was."""
    drafted = drafted.long()
    seed = int(torch.randint(2**62, (), generator=generator))
    with torch.random.fork_rng(devices=[]):
        # The CPU generator alone, which is all the fork keeps: torch.manual_seed would also queue a seed for every
        # accelerator backend, each recording the call's stack (about 2 ms a call, and a check makes thousands).
        torch.default_generator.manual_seed(seed)
        if drafted.numel() == 0:  # no draft: Hugging Face's slicing needs at least one candidate
            return torch.multinomial(target_probs[0], 1)
        tokens, _ = _speculative_sampling(
            drafted[None], draft_probs.log()[None], drafted.numel(), target_probs.log()[None]
        )
    return tokens[0]


def rollback(cache, length: int) -> None:
    """Every layer's keys and values of a ``KVCache`` cut to their first ``length`` positions, by a ``DynamicCache``."""
    if not 0 <= length <= cache.length:
        raise ValueError(f"cannot roll a cache of {cache.length} positions back to {length}")
    for layer, (k, v) in enumerate(zip(cache.keys, cache.values, strict=True)):
        if k is None or k.shape[2] == length:
            continue
        cropped = _TRANSFORMERS.DynamicCache()
        cropped.update(k, v, 0)
        cropped.crop(length - k.shape[2])  # a negative number: that many positions off the end
        cache.keys[layer], cache.values[layer] = cropped.layers[0].keys, cropped.layers[0].values
