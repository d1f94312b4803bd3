"""Mistakes students make in notebook 11.

Each wrong version is the solution's answer cell with one mistake written in (``variant`` checks that the
replaced text is there), so the wrong versions differ from a right one only by the mistake.
"""

from wrong import Wrong, catalogue

NOTEBOOK = "11_decoding"
RIGHT, variant = catalogue(NOTEBOOK)


SAMPLE_INLINE = """
def sample_next(logits, *, temperature=1.0, top_k=None, top_p=None, generator=None):
    {body}
    probs = torch.softmax(logits, dim=-1)
    return torch.multinomial(probs, 1, generator={generator}).squeeze(-1)
"""


def sample(body, generator="generator"):
    return SAMPLE_INLINE.format(body=body, generator=generator)


ORDER = (
    "logits = apply_temperature(logits, temperature)\n    if top_k is not None:\n        logits = "
    "top_k_filter(logits, top_k)\n    if top_p is not None:\n        logits = top_p_filter(logits, top_p)"
)

WRONG = [
    # Exercise 1
    Wrong(
        "greedy_temperature",
        "temperature multiplied instead of divided",
        variant("greedy_temperature", ("return logits / temperature", "return logits * temperature")),
        "multiplied by the temperature",
    ),
    Wrong(
        "greedy_temperature",
        "temperature 0 divides by zero (no greedy case)",
        variant("greedy_temperature", ("    if temperature == 0:\n", "    if False:\n")),
        "temperature 0 must mean greedy",
    ),
    Wrong(
        "greedy_temperature",
        "greedy ties to the higher id",
        variant(
            "greedy_temperature",
            ("return logits.argmax(dim=-1)", "return logits.shape[-1] - 1 - logits.flip(-1).argmax(dim=-1)"),
        ),
        "ties towards the higher token id",
    ),
    Wrong(
        "greedy_temperature",
        "greedy takes the argmin",
        variant("greedy_temperature", ("return logits.argmax(dim=-1)", "return logits.argmin(dim=-1)")),
        "returns the argmin",
    ),
    Wrong(
        "greedy_temperature",
        "negative temperature accepted",
        variant("greedy_temperature", ("    if temperature < 0:\n", "    if temperature < -100:\n")),
        "raise ValueError",
    ),
    Wrong(
        "greedy_temperature",
        "temperature applied in place",
        variant("greedy_temperature", ("return logits / temperature", "return logits.div_(temperature)")),
        "changed the logits in place",
    ),
    # Exercise 2
    Wrong(
        "top_k_filter",
        "keeps k + 1 on ties (every token tied with the k-th)",
        variant(
            "top_k_filter",
            (
                "    keep = torch.zeros_like(logits, dtype=torch.bool).scatter_(-1, order[..., :k], True)\n",
                "    kth = logits.gather(-1, order[..., k - 1:k])\n    keep = logits >= kth\n",
            ),
        ),
        "keeps every token tied with the k-th",
    ),
    Wrong(
        "top_k_filter",
        "keeps the wrong end (the k lowest)",
        variant("top_k_filter", ("descending=True", "descending=False")),
        "keeps the k lowest logits",
    ),
    Wrong(
        "top_k_filter",
        "no bound on k (narrow raises for k above the vocabulary)",
        variant("top_k_filter", ("order[..., :k]", "order.narrow(-1, 0, k)")),
        "not out of range here",
    ),
    Wrong(
        "top_k_filter",
        "torch.topk's threshold: no bound on k, and it keeps the ties",
        "def top_k_filter(logits, k):\n    kth = torch.topk(logits, k, dim=-1).values[..., -1:]\n"
        "    return logits.masked_fill(logits < kth, float('-inf'))\n",
        "tied with the k-th",
    ),
    Wrong(
        "top_k_filter",
        "keeps k + 1 tokens",
        variant("top_k_filter", ("order[..., :k]", "order[..., :k + 1]")),
        "keeps k + 1",
    ),
    # Exercise 3
    Wrong(
        "top_p_filter",
        "drops the crossing token",
        variant("top_p_filter", ("keep_sorted = before < p", "keep_sorted = before + probs < p")),
        "drops the token that crosses p",
    ),
    Wrong(
        "top_p_filter",
        "ties go to the higher id (ascending sort flipped)",
        variant(
            "top_p_filter",
            (
                "probs, order = torch.sort(torch.softmax(logits, dim=-1), dim=-1, descending=True, stable=True)",
                "probs, order = torch.sort(torch.softmax(logits, dim=-1), dim=-1, stable=True)\n"
                "    probs, order = probs.flip(-1), order.flip(-1)",
            ),
        ),
        "ties go to the",
    ),
    Wrong(
        "top_p_filter",
        "keeps the complement (the tail)",
        variant(
            "top_p_filter",
            ('return logits.masked_fill(~keep, float("-inf"))', 'return logits.masked_fill(keep, float("-inf"))'),
        ),
        "keeps the tokens",
    ),
    Wrong(
        "top_p_filter",
        "adds up the probabilities in token-id order, unsorted",
        variant(
            "top_p_filter",
            (
                "probs, order = torch.sort(torch.softmax(logits, dim=-1), dim=-1, descending=True, stable=True)",
                "probs = torch.softmax(logits, dim=-1)\n    order = torch.arange(logits.shape[-1])"
                ".expand(logits.shape)",
            ),
        ),
        "keeps the tokens",
    ),
    # Exercise 4
    Wrong(
        "sample_next",
        "top-p applied before top-k",
        sample(
            "logits = apply_temperature(logits, temperature)\n    if top_p is not None:\n        logits = "
            "top_p_filter(logits, top_p)\n    if top_k is not None:\n        logits = top_k_filter(logits, top_k)"
        ),
        "top-p is applied before top-k",
    ),
    Wrong("sample_next", "the generator is not used", sample(ORDER, generator="None"), "seeded the same way"),
    Wrong(
        "sample_next",
        "temperature multiplied",
        sample(ORDER.replace("apply_temperature(logits, temperature)", "logits * temperature")),
        "multiplied by the temperature",
    ),
    Wrong(
        "sample_next",
        "temperature 0 treated as no temperature",
        sample(
            ORDER.replace(
                "logits = apply_temperature(logits, temperature)",
                "logits = apply_temperature(logits, temperature) if temperature else logits",
            )
        ),
        "removed by the filters",
    ),
    Wrong(
        "sample_next",
        "temperature applied after the filters",
        sample(
            "if top_k is not None:\n        logits = top_k_filter(logits, top_k)\n    if top_p is not None:\n        "
            "logits = top_p_filter(logits, top_p)\n    logits = apply_temperature(logits, temperature)"
        ),
        "after the filters",
    ),
    Wrong(
        "sample_next",
        "argmax instead of a draw",
        sample(ORDER).replace(
            "return torch.multinomial(probs, 1, generator=generator).squeeze(-1)", "return probs.argmax(-1)"
        ),
        "it returns the argmax",
    ),
    Wrong("sample_next", "keeps the sample axis", sample(ORDER).replace(".squeeze(-1)", ""), "squeeze the sample axis"),
    # Exercise 5
    Wrong(
        "generate",
        "EOS left out of the output",
        variant(
            "generate",
            (
                "        sequence = torch.cat([sequence, token.view(1).to(sequence.dtype)])\n        if eos_id is not None and "
                "int(token) == eos_id:\n            break\n",
                "        if eos_id is not None and int(token) == eos_id:\n            break\n"
                "        sequence = torch.cat([sequence, token.view(1).to(sequence.dtype)])\n",
            ),
        ),
        "leaves out the EOS token",
    ),
    Wrong(
        "generate",
        "returns only the new tokens",
        variant("generate", ("    return sequence\n", "    return sequence[len(prompt):]\n")),
        "returned only the new tokens",
    ),
    Wrong(
        "generate",
        "first position's logits",
        variant("generate", ("model(sequence[None])[:, -1]", "model(sequence[None])[:, 0]")),
        "LAST position's logits",
    ),
    Wrong(
        "generate",
        "one token too many at the limit",
        variant("generate", ("range(max_new_tokens)", "range(max_new_tokens + 1)")),
        "exactly max_new_tokens",
    ),
    Wrong(
        "generate",
        "no stop at EOS",
        variant("generate", ("        if eos_id is not None and int(token) == eos_id:\n            break\n", "")),
        "goes on after the EOS",
    ),
    # Exercise 6
    Wrong(
        "generate_batch",
        "left padding without the attention mask",
        variant("generate_batch", ("model(tokens, padding_mask)", "model(tokens)")),
        "without padding_mask",
    ),
    Wrong(
        "generate_batch",
        "right padding",
        variant(
            "generate_batch",
            (
                "        tokens[row, longest - len(prompt):] = prompt\n        padding_mask[row, longest - len(prompt):] = True\n",
                "        tokens[row, :len(prompt)] = prompt\n        padding_mask[row, :len(prompt)] = True\n",
            ),
        ),
        "padded on the right",
    ),
    Wrong(
        "generate_batch",
        "finished sequences go on",
        variant(
            "generate_batch",
            (
                "            if not finished[row]:\n                new[row].append(int(picked[row]))",
                "            new[row].append(int(pick(model(tokens, padding_mask)[:, -1]).long()[row]))",
            ),
        ),
        "goes on after its EOS",
    ),
    Wrong(
        "generate_batch",
        "stops when the first sequence finishes",
        variant("generate_batch", ("        if finished.all():", "        if finished.any():")),
        "stopped early",
    ),
    # Exercise 7
    Wrong(
        "beam_search",
        "scores not length-normalised",
        variant("beam_search", ("return total / len(tokens) ** length_penalty", "return total")),
        "normalised by the length",
    ),
    Wrong(
        "beam_search",
        "finished beams extended",
        variant("beam_search", ("            if tokens[-1] == eos_id:\n", "            if False:\n")),
        "never extend it",
    ),
    Wrong(
        "beam_search",
        "length counted with the prompt",
        variant(
            "beam_search",
            (
                "return total / len(tokens) ** length_penalty",
                "return total / (len(tokens) + len(prompt)) ** length_penalty",
            ),
        ),
        "n the number of new tokens",
    ),
    Wrong(
        "beam_search",
        "returns only the new tokens",
        variant(
            "beam_search",
            (
                "return torch.cat([prompt, torch.tensor(best, dtype=prompt.dtype)]), best_score",
                "return torch.tensor(best, dtype=prompt.dtype), best_score",
            ),
        ),
        "the prompt followed by the best hypothesis",
    ),
    Wrong(
        "beam_search",
        "keeps one beam whatever beam_size",
        variant("beam_search", ("candidates[:beam_size]", "candidates[:1]")),
        "it kept one beam",
    ),
    # Exercise 8
    Wrong(
        "kv_cache",
        "appends along the heads axis",
        variant("kv_cache", ("torch.cat([self.keys[layer], k], dim=2)", "torch.cat([self.keys[layer], k], dim=1)")),
        "Sizes of tensors must match except in dimension 1",
    ),
    Wrong(
        "kv_cache",
        "length counts the updates",
        variant(
            "kv_cache",
            (
                "        return 0 if self.keys[0] is None else self.keys[0].shape[2]\n",
                "        return sum(k is not None for k in self.keys)\n",
            ),
        ),
        "not the number of updates",
    ),
    Wrong(
        "kv_cache",
        "returns only the new keys and values",
        variant(
            "kv_cache",
            (
                "        if self.keys[layer] is not None:\n",
                "        new_k, new_v = k, v\n        if self.keys[layer] is not None:\n",
            ),
            ("        return k, v\n", "        return new_k, new_v\n"),
        ),
        "returned only the new keys",
    ),
    Wrong(
        "kv_cache",
        "one store shared by every layer",
        variant(
            "kv_cache",
            (
                "            k = torch.cat([self.keys[layer], k], dim=2)\n            v = torch.cat([self.values[layer], v], "
                "dim=2)\n        self.keys[layer], self.values[layer] = k, v\n",
                "            k = torch.cat([self.keys[layer], k], dim=2)\n            v = torch.cat([self.values[layer], v], "
                "dim=2)\n        self.keys = [k] * len(self.keys)\n        self.values = [v] * len(self.values)\n",
            ),
        ),
        "the layers share one store",
    ),
    Wrong(
        "kv_cache",
        "stores under other names than keys and values",
        RIGHT["kv_cache"].replace("self.keys", "self.k_store").replace("self.values", "self.v_store"),
        "cache.keys is not a list with one entry per layer",
    ),
    Wrong(
        "generate_batch",
        "finished rows keep being fed the model's picks (right outputs)",
        variant(
            "generate_batch",
            ("        picked = torch.where(finished, torch.full_like(picked, pad_id), picked)\n", ""),
            (
                "padding_mask = torch.cat([padding_mask, ~finished[:, None]], dim=1)",
                "padding_mask = torch.cat([padding_mask, torch.ones_like(finished)[:, None]], dim=1)",
            ),
        ),
        "a finished sequence gets pad_id with mask False from then on",
    ),
    Wrong(
        "beam_search",
        "no early stopping: searches on after beam_size hypotheses are finished",
        variant("beam_search", ("        if len(finished) >= beam_size:\n            live = []\n", "")),
        "stop then (early stopping)",
    ),
    # Exercise 9
    Wrong(
        "cached_attention",
        "the cache is never used",
        variant(
            "cached_attention", ("        if cache is not None:\n            k, v = cache.update(layer, k, v)\n", "")
        ),
        "the cache is still empty",
    ),
    Wrong(
        "cached_attention",
        "positions of the new tokens ignored (0..new-1)",
        variant("cached_attention", ("        if token_positions is None:\n", "        if True:\n")),
        "The first call (empty cache) is right",
    ),
    Wrong(
        "cached_attention",
        "every call writes into layer 0",
        variant("cached_attention", ("cache.update(layer, k, v)", "cache.update(0, k, v)")),
        "once per call",
    ),
    Wrong(
        "cached_attention",
        "raw keys cached, all rotated after each update (right outputs)",
        variant(
            "cached_attention",
            (
                "        k = self.rope(heads(self.k_proj(x), self.num_kv_heads), token_positions)\n",
                "        k = heads(self.k_proj(x), self.num_kv_heads)\n",
            ),
            (
                "        if cache is not None:\n            k, v = cache.update(layer, k, v)\n",
                "        if cache is not None:\n            k, v = cache.update(layer, k, v)\n"
                "            k = self.rope(k, torch.arange(k.shape[2]))\n        else:\n            k = self.rope(k, token_positions)\n",
            ),
        ),
        "the cache holds the keys before RoPE",
    ),
    # Exercise 10
    Wrong(
        "cached_decoder",
        "cache positions not advanced",
        variant(
            "cached_decoder",
            (
                "positions = torch.arange(offset, offset + new, device=tokens.device)",
                "positions = torch.arange(new, device=tokens.device)",
            ),
        ),
        "the positions restart at 0",
    ),
    Wrong(
        "cached_decoder",
        "the cache is not passed to the blocks",
        variant(
            "cached_decoder", ("x = layer(x, mask, positions, cache=cache, layer=i)", "x = layer(x, mask, positions)")
        ),
        "pass cache=cache (and layer=i) to every block",
    ),
    Wrong(
        "cached_decoder",
        "mask without the offset",
        variant(
            "cached_decoder",
            (
                "mask = torch.ones(new, offset + new, dtype=torch.bool, device=tokens.device).tril(diagonal=offset)",
                "mask = torch.ones(new, new, dtype=torch.bool, device=tokens.device).tril()",
            ),
        ),
        "the mask covers every key",
    ),
    Wrong(
        "cached_decoder",
        "every block writes into layer 0",
        variant("cached_decoder", ("cache=cache, layer=i)", "cache=cache, layer=0)")),
        "block i must get layer=i",
    ),
    # Exercise 11
    Wrong(
        "continuous_batching",
        "static batching: slots refilled only when the whole batch is done",
        """
def continuous_batching(engine, prompts, *, max_new_tokens, eos_id=None):
    def done(new):
        return len(new) >= max_new_tokens or (eos_id is not None and new[-1] == eos_id)

    outputs = [None] * len(prompts)
    for first in range(0, len(prompts), engine.n_slots):
        batch = list(range(first, min(first + engine.n_slots, len(prompts))))
        news = {slot: [engine.start(slot, prompts[r])] for slot, r in enumerate(batch)}
        while not all(done(new) for new in news.values()):
            slots = sorted(news)
            for slot, token in zip(slots, engine.step(slots)):
                if not done(news[slot]):
                    news[slot].append(token)
        for slot, r in enumerate(batch):
            outputs[r] = news[slot]
            engine.finish(slot)
    return outputs
""",
        "static batching's waste",
    ),
    Wrong(
        "continuous_batching",
        "refills only when every slot is free",
        variant(
            "continuous_batching",
            (
                "        for slot in range(engine.n_slots):\n            while slot not in running and waiting:",
                "        for slot in range(engine.n_slots if not running else 0):\n            while slot not in running "
                "and waiting:",
            ),
        ),
        "while requests were waiting",
    ),
    Wrong(
        "continuous_batching",
        "outputs in the order they finish",
        variant(
            "continuous_batching",
            (
                "    outputs, running = [None] * len(prompts), {}",
                "    outputs, running, finished = [None] * len(prompts), {}, []",
            ),
            (
                "                outputs[request] = new\n                engine.finish(slot)\n                del running[slot]",
                "                outputs[request] = new\n                finished.append(new)\n                "
                "engine.finish(slot)\n                del running[slot]",
            ),
            ("    return outputs\n", "    return [o for o in outputs if len(o) == 1] + finished\n"),
        ),
        "in another order",
    ),
    Wrong(
        "continuous_batching",
        "the first token is not checked",
        variant(
            "continuous_batching",
            (
                "                if done(new):\n                    outputs[request] = new\n                    "
                "engine.finish(slot)\n                else:\n                    running[slot] = (request, new)",
                "                running[slot] = (request, new)",
            ),
        ),
        "goes on after it is done",
    ),
]
