"""Engines for continuous batching: they run the model; a scheduler decides which requests run when.

An engine has ``n_slots`` slots and three methods:

- ``start(slot, prompt) -> int``: put a request (a 1-D prompt) into a free slot, run its prompt
  (prefill) and return its first new token (greedy);
- ``step(slots) -> list[int]``: one decoding step for the given slots together (one batched forward
  pass), feeding each slot the last token it returned; returns each slot's next token, in order;
- ``finish(slot)``: the slot's request is done; the slot is free again.

``SlotEngine(model, n_slots, max_len)`` runs the reference ``LlamaDecoder`` with a ``SlotCache``: each slot
keeps its own keys and values and its own position. ``RecomputeEngine(model, n_slots)`` works with any
model ``model(tokens, padding_mask) -> logits`` by recomputing each slot's whole sequence (left-padded).
Both keep a log of their calls (``events``: ("start", slot), ("step", slots), ("finish", slot)) and refuse
a call that makes no sense (starting a busy slot, stepping a free one), so a scheduler's mistakes show.

``static(engine, prompts, ...)`` is the scheduler the benchmark sets against notebook 11's continuous batching
(which no library has for these engines: the benchmark and the tests load it from solutions/, so that the package
carries no answer).
"""

from __future__ import annotations

import torch

from autograder.reference.kv_cache import KVCache, SlotCache


class _Engine:
    def __init__(self, n_slots: int):
        self.n_slots = n_slots
        self.busy = [False] * n_slots
        self.events: list = []
        self.last = [0] * n_slots

    def _slot(self, slot):
        if not isinstance(slot, int) or not 0 <= slot < self.n_slots:
            raise ValueError(f"slot {slot!r} does not exist: slots are 0..{self.n_slots - 1}")
        return slot

    def start(self, slot: int, prompt) -> int:
        slot = self._slot(slot)
        if self.busy[slot]:
            raise RuntimeError(f"slot {slot} is still busy: finish(slot) its request before starting another")
        prompt = torch.as_tensor(prompt).long().flatten()
        self.busy[slot] = True
        self.events.append(("start", slot))
        self.last[slot] = token = self._prefill(slot, prompt)
        return token

    def step(self, slots) -> list[int]:
        slots = [self._slot(s) for s in slots]
        if len(set(slots)) != len(slots) or not slots:
            raise ValueError(f"step needs distinct slots, got {slots}")
        idle = [s for s in slots if not self.busy[s]]
        if idle:
            raise RuntimeError(f"slots {idle} have no request: start(slot, prompt) first")
        self.events.append(("step", list(slots)))
        tokens = self._decode(slots)
        for s, t in zip(slots, tokens, strict=True):
            self.last[s] = t
        return tokens

    def finish(self, slot: int) -> None:
        slot = self._slot(slot)
        if not self.busy[slot]:
            raise RuntimeError(f"slot {slot} is not busy")
        self.busy[slot] = False
        self.events.append(("finish", slot))


class RecomputeEngine(_Engine):
    """Any model ``model(tokens, padding_mask) -> logits``; each step recomputes the slots' sequences."""

    def __init__(self, model, n_slots: int):
        super().__init__(n_slots)
        self.model = model
        self.sequences: list = [None] * n_slots

    @torch.no_grad()
    def _prefill(self, slot, prompt):
        token = int(self.model(prompt[None])[0, -1].argmax())
        self.sequences[slot] = prompt.tolist() + [token]
        return token

    @torch.no_grad()
    def _decode(self, slots):
        longest = max(len(self.sequences[s]) for s in slots)
        tokens = torch.zeros(len(slots), longest, dtype=torch.long)
        mask = torch.zeros(len(slots), longest, dtype=torch.bool)
        for row, s in enumerate(slots):
            n = len(self.sequences[s])
            tokens[row, longest - n :] = torch.tensor(self.sequences[s])
            mask[row, longest - n :] = True
        out = self.model(tokens, mask)[:, -1].argmax(-1).tolist()
        for s, t in zip(slots, out, strict=True):
            self.sequences[s].append(t)
        return out


class SlotEngine(_Engine):
    """The reference ``LlamaDecoder`` with one ``SlotCache``: per-slot keys, values and positions."""

    def __init__(self, model, n_slots: int, max_len: int):
        super().__init__(n_slots)
        self.model = model
        config = model.blocks[0].attn
        self.n_layers = len(model.blocks)
        self.cache = SlotCache(self.n_layers, n_slots, max_len, config.num_kv_heads, config.head_dim)

    @torch.no_grad()
    def _prefill(self, slot, prompt):
        cache = KVCache(self.n_layers)
        token = int(self.model(prompt[None], cache=cache)[0, -1].argmax())
        self.cache.load(slot, cache)
        return token

    @torch.no_grad()
    def _decode(self, slots):
        self.cache.rows = torch.tensor(slots)
        last = torch.tensor([self.last[s] for s in slots])[:, None]
        return self.model(last, cache=self.cache)[:, -1].argmax(-1).tolist()


def _done(new, max_new_tokens, eos_id):
    return len(new) >= max_new_tokens or (eos_id is not None and new[-1] == eos_id)


def static(engine, prompts, *, max_new_tokens: int, eos_id=None) -> list[list[int]]:
    """Batches of ``n_slots`` requests; the next batch starts when the whole batch is done (finished
    sequences keep their slot and are computed along, as in a padded batch)."""
    outputs = [None] * len(prompts)
    for first in range(0, len(prompts), engine.n_slots):
        batch = list(range(first, min(first + engine.n_slots, len(prompts))))
        news = {slot: [engine.start(slot, prompts[r])] for slot, r in enumerate(batch)}
        while not all(_done(new, max_new_tokens, eos_id) for new in news.values()):
            slots = sorted(news)
            for slot, token in zip(slots, engine.step(slots), strict=True):
                if not _done(news[slot], max_new_tokens, eos_id):
                    news[slot].append(token)
        for slot, r in enumerate(batch):
            outputs[r] = news[slot]
            engine.finish(slot)
    return outputs
