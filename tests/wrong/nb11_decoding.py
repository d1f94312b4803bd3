"""Wrong versions of notebook 11's answers (11_decoding): see ``wrong/__init__.py``."""

from autograder.notebooks.nb11_decoding import (
    ATTENTION,
    BATCH,
    BATCHING,
    BEAM,
    CACHE,
    DECODER,
    GENERATE,
    GREEDY,
    SAMPLE,
    TOP_K,
    TOP_P,
)
from wrong import WrongVersion, edit

_SAYS_STABLE_TRUE = "stable=True"

# greedy_temperature --------------------------------------------------------------------------------------------
_RETURN_LOGITS_TEMPERATURE = "return logits / temperature"
_RETURN_LOGITS_ARGMAX = "return logits.argmax(dim=-1)"
_BEST = """\
        best = F.one_hot(logits.argmax(dim=-1), logits.shape[-1]).bool()
        return logits.masked_fill(~best, float("-inf"))
"""

# top_k_filter --------------------------------------------------------------------------------------------------
_ORDER = "order = torch.sort(logits, dim=-1, descending=True, stable=True).indices"
_KEEP = "keep = torch.zeros_like(logits, dtype=torch.bool).scatter_(-1, order[..., :k], True)"

# top_p_filter --------------------------------------------------------------------------------------------------
_PROBS_ORDER = "    probs, order = torch.sort(torch.softmax(logits, dim=-1), dim=-1, descending=True, stable=True)\n"
_TOP_P_PROBS_ORDER = "probs, order = torch.sort(torch.softmax(logits, dim=-1), dim=-1, descending=True, stable=True)"

# sample_next ---------------------------------------------------------------------------------------------------
_DEF_SAMPLE_NEXT = 'def sample_next(logits: torch.Tensor, *, temperature: float = 1.0, top_k: int | None = None,\n                top_p: float | None = None, generator: torch.Generator | None = None) -> torch.Tensor:\n    """One token per row: logits [batch, vocab] -> LongTensor [batch], drawn with `generator` after\n    temperature, then top-k, then top-p (Hugging Face\'s order); temperature 0 gives the greedy token."""\n'
_RETURN_TORCH_MULTINOMIAL = "return torch.multinomial(probs, 1, generator=generator).squeeze(-1)"
_SAMPLE_DEF_SAMPLE_NEXT = 'def sample_next(logits: torch.Tensor, *, temperature: float = 1.0, top_k: int | None = None,\n                top_p: float | None = None, generator: torch.Generator | None = None) -> torch.Tensor:\n    """One token per row: logits [batch, vocab] -> LongTensor [batch], drawn with `generator` after\n    temperature, then top-k, then top-p (Hugging Face\'s order); temperature 0 gives the greedy token."""\n    logits = apply_temperature(logits, temperature)\n'
_NEW_DEF_SAMPLE_NEXT = """\

def sample_next(logits, *, temperature=1.0, top_k=None, top_p=None, generator=None):
"""

# generate ------------------------------------------------------------------------------------------------------
_NEW_X = ""

# generate_batch ------------------------------------------------------------------------------------------------

# beam_search ---------------------------------------------------------------------------------------------------
_RETURN_TOTAL_LEN = "return total / len(tokens) ** length_penalty"

# kv_cache ------------------------------------------------------------------------------------------------------
_RETURN_IF_SELF = "return 0 if self.keys[0] is None else self.keys[0].shape[2]"

# cached_attention ----------------------------------------------------------------------------------------------

# cached_decoder ------------------------------------------------------------------------------------------------
_POSITIONS = "positions = torch.arange(offset, offset + new, device=tokens.device)"
_X = "x = layer(x, mask, positions, cache=cache, layer=i)"
_MASK = "mask = torch.ones(new, offset + new, dtype=torch.bool, device=tokens.device).tril(diagonal=offset)"

# continuous_batching -------------------------------------------------------------------------------------------

WRONG_VERSIONS = (
    # greedy_temperature
    WrongVersion(
        GREEDY,
        "temperature multiplied instead of divided",
        "multiplied by the temperature",
        edit(_RETURN_LOGITS_TEMPERATURE, "return logits * temperature"),
    ),
    WrongVersion(
        GREEDY,
        "temperature divides the unnormalised probabilities, not the logits",
        "divide the logits by the temperature",
        edit(_RETURN_LOGITS_TEMPERATURE, "return torch.log(torch.exp(logits) / temperature)"),
    ),
    WrongVersion(
        GREEDY,
        "temperature 0 divides by zero (no greedy case)",
        "temperature 0 must mean greedy",
        edit("if temperature == 0:", "if False:"),
    ),
    WrongVersion(
        GREEDY,
        "greedy ties to the higher id",
        "ties towards the higher token id",
        edit(_RETURN_LOGITS_ARGMAX, "return logits.shape[-1] - 1 - logits.flip(-1).argmax(dim=-1)"),
    ),
    WrongVersion(
        GREEDY,
        "greedy takes the argmin",
        "returns the argmin",
        edit(_RETURN_LOGITS_ARGMAX, "return logits.argmin(dim=-1)"),
    ),
    WrongVersion(
        GREEDY,
        "negative temperature accepted",
        "raise ValueError",
        edit("if temperature < 0:", "if temperature < -100:"),
    ),
    WrongVersion(
        GREEDY,
        "temperature applied in place",
        "changed the logits in place",
        edit(_RETURN_LOGITS_TEMPERATURE, "return logits.div_(temperature)"),
    ),
    WrongVersion(
        GREEDY,
        "greedy from an unstable sort (ties reordered beyond 16 values)",
        "ties go to the lower token id",
        edit(_RETURN_LOGITS_ARGMAX, "return torch.sort(logits, dim=-1, descending=True).indices[..., 0]"),
    ),
    WrongVersion(
        GREEDY,
        "temperature 0 built with torch.full (float32, on the CPU)",
        "the result has the dtype and the device of logits",
        edit(
            _BEST,
            """\
        best = logits.argmax(dim=-1, keepdim=True)
        return torch.full(logits.shape, float("-inf")).scatter(-1, best, logits.gather(-1, best).float())
""",
        ),
    ),
    WrongVersion(
        GREEDY,
        "temperature 0 built with torch.full in the logits' dtype, on the CPU",
        "the result has the dtype and the device of logits",
        edit(
            _BEST,
            """\
        best = logits.argmax(dim=-1, keepdim=True)
        return torch.full(logits.shape, float("-inf"), dtype=logits.dtype).scatter(-1, best, logits.gather(-1, best))
""",
        ),
    ),
    # top_k_filter
    WrongVersion(
        TOP_K,
        "keeps k + 1 on ties (every token tied with the k-th)",
        "keeps every token tied with the k-th",
        edit(
            "    keep = torch.zeros_like(logits, dtype=torch.bool).scatter_(-1, order[..., :k], True)\n",
            """\
    kth = logits.gather(-1, order[..., k - 1:k])
    keep = logits >= kth
""",
        ),
    ),
    WrongVersion(
        TOP_K,
        "keeps the wrong end (the k lowest)",
        "keeps the k lowest logits",
        edit(_ORDER, "order = torch.sort(logits, dim=-1, descending=False, stable=True).indices"),
    ),
    WrongVersion(
        TOP_K,
        "no bound on k (narrow raises for k above the vocabulary)",
        "not out of range here",
        edit(_KEEP, "keep = torch.zeros_like(logits, dtype=torch.bool).scatter_(-1, order.narrow(-1, 0, k), True)"),
    ),
    WrongVersion(
        TOP_K,
        "torch.topk's threshold: no bound on k, and it keeps the ties",
        "tied with the k-th",
        code="""\
def top_k_filter(logits, k):
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, float('-inf'))
""",
    ),
    WrongVersion(
        TOP_K,
        "keeps k + 1 tokens",
        "keeps k + 1",
        edit(_KEEP, "keep = torch.zeros_like(logits, dtype=torch.bool).scatter_(-1, order[..., :k + 1], True)"),
    ),
    WrongVersion(
        TOP_K,
        "an unstable sort: tied tokens other than the lower ids kept",
        _SAYS_STABLE_TRUE,
        edit(_ORDER, "order = torch.sort(logits, dim=-1, descending=True).indices"),
    ),
    WrongVersion(
        TOP_K,
        "torch.topk's indices: tied tokens other than the lower ids kept",
        _SAYS_STABLE_TRUE,
        edit(_ORDER, "order = torch.topk(logits, min(k, logits.shape[-1]), dim=-1).indices"),
    ),
    # top_p_filter
    WrongVersion(
        TOP_P,
        "drops the crossing token",
        "drops the token that crosses p",
        edit("keep_sorted = before < p", "keep_sorted = before + probs < p"),
    ),
    WrongVersion(
        TOP_P,
        "ties go to the higher id (ascending sort flipped)",
        "ties go to the",
        edit(
            _PROBS_ORDER,
            """\
    probs, order = torch.sort(torch.softmax(logits, dim=-1), dim=-1, stable=True)
    probs, order = probs.flip(-1), order.flip(-1)
""",
        ),
    ),
    WrongVersion(
        TOP_P,
        "keeps the complement (the tail)",
        "keeps the tokens",
        edit('return logits.masked_fill(~keep, float("-inf"))', 'return logits.masked_fill(keep, float("-inf"))'),
    ),
    WrongVersion(
        TOP_P,
        "adds up the probabilities in token-id order, unsorted",
        "keeps the tokens",
        edit(
            _PROBS_ORDER,
            """\
    probs = torch.softmax(logits, dim=-1)
    order = torch.arange(logits.shape[-1]).expand(logits.shape)
""",
        ),
    ),
    WrongVersion(
        TOP_P,
        "an unstable sort: tied tokens other than the lower ids kept",
        _SAYS_STABLE_TRUE,
        edit(_TOP_P_PROBS_ORDER, "probs, order = torch.sort(torch.softmax(logits, dim=-1), dim=-1, descending=True)"),
    ),
    WrongVersion(
        TOP_P,
        "softmax by hand without subtracting the maximum (overflows for large logits)",
        "its probabilities overflow",
        edit(
            _TOP_P_PROBS_ORDER,
            "probs, order = torch.sort(logits.exp() / logits.exp().sum(-1, keepdim=True), dim=-1, descending=True, stable=True)",
        ),
    ),
    # sample_next
    WrongVersion(
        SAMPLE,
        "top-p applied before top-k",
        "top-p is applied before top-k",
        code="""\

def sample_next(logits, *, temperature=1.0, top_k=None, top_p=None, generator=None):
    logits = apply_temperature(logits, temperature)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    probs = torch.softmax(logits, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
""",
    ),
    WrongVersion(
        SAMPLE,
        "the generator is not used",
        "seeded the same way",
        edit(_DEF_SAMPLE_NEXT, _NEW_DEF_SAMPLE_NEXT),
        edit(_RETURN_TORCH_MULTINOMIAL, "return torch.multinomial(probs, 1, generator=None).squeeze(-1)"),
    ),
    WrongVersion(
        SAMPLE,
        "temperature multiplied",
        "multiplied by the temperature",
        edit(
            _SAMPLE_DEF_SAMPLE_NEXT,
            """\

def sample_next(logits, *, temperature=1.0, top_k=None, top_p=None, generator=None):
    logits = logits * temperature
""",
        ),
    ),
    WrongVersion(
        SAMPLE,
        "temperature 0 treated as no temperature",
        "removed by the filters",
        edit(
            _SAMPLE_DEF_SAMPLE_NEXT,
            """\

def sample_next(logits, *, temperature=1.0, top_k=None, top_p=None, generator=None):
    logits = apply_temperature(logits, temperature) if temperature else logits
""",
        ),
    ),
    WrongVersion(
        SAMPLE,
        "temperature applied after the filters",
        "after the filters",
        edit(_SAMPLE_DEF_SAMPLE_NEXT, _NEW_DEF_SAMPLE_NEXT),
        edit(
            "        logits = top_p_filter(logits, top_p)\n",
            """\
        logits = top_p_filter(logits, top_p)
    logits = apply_temperature(logits, temperature)
""",
        ),
    ),
    WrongVersion(
        SAMPLE,
        "argmax instead of a draw",
        "it returns the argmax",
        edit(_DEF_SAMPLE_NEXT, _NEW_DEF_SAMPLE_NEXT),
        edit(_RETURN_TORCH_MULTINOMIAL, "return probs.argmax(-1)"),
    ),
    WrongVersion(
        SAMPLE,
        "keeps the sample axis",
        "squeeze the sample axis",
        edit(_DEF_SAMPLE_NEXT, _NEW_DEF_SAMPLE_NEXT),
        edit(_RETURN_TORCH_MULTINOMIAL, "return torch.multinomial(probs, 1, generator=generator)"),
    ),
    WrongVersion(
        SAMPLE,
        "its own top-k with torch.topk: tied tokens other than the lower ids drawn",
        _SAYS_STABLE_TRUE,
        edit(
            """\
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
""",
            """\
    if top_k is not None:
        best = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).indices
        keep = torch.zeros_like(logits, dtype=torch.bool).scatter_(-1, best, True)
        logits = logits.masked_fill(~keep, float("-inf"))
""",
        ),
    ),
    # generate
    WrongVersion(
        GENERATE,
        "EOS left out of the output",
        "leaves out the EOS token",
        edit("        sequence = torch.cat([sequence, token.view(1).to(sequence.dtype)])\n", _NEW_X),
        edit(
            "            break\n",
            """\
            break
        sequence = torch.cat([sequence, token.view(1).to(sequence.dtype)])
""",
        ),
    ),
    WrongVersion(
        GENERATE,
        "returns only the new tokens",
        "returned only the new tokens",
        edit("return sequence", "return sequence[len(prompt):]"),
    ),
    WrongVersion(
        GENERATE,
        "first position's logits",
        "LAST position's logits",
        edit("logits = model(sequence[None])[:, -1]", "logits = model(sequence[None])[:, 0]"),
    ),
    WrongVersion(
        GENERATE,
        "one token too many at the limit",
        "exactly max_new_tokens",
        edit("for _ in range(max_new_tokens):", "for _ in range(max_new_tokens + 1):"),
    ),
    WrongVersion(
        GENERATE,
        "no stop at EOS",
        "goes on after the EOS",
        edit(
            """\
        if eos_id is not None and int(token) == eos_id:
            break
""",
            _NEW_X,
        ),
    ),
    WrongVersion(
        GENERATE,
        "pick given the 1-D logits of the last position",
        "expected [1, 10]",
        edit(
            """\
        logits = model(sequence[None])[:, -1]
        token = pick(logits)[0]
""",
            """\
        logits = model(sequence[None])[0, -1]
        token = pick(logits)
""",
        ),
    ),
    WrongVersion(
        GENERATE,
        "no torch.no_grad: the model runs with gradients enabled",
        "run it under torch.no_grad()",
        edit("@torch.no_grad()\n", _NEW_X),
    ),
    # generate_batch
    WrongVersion(
        BATCH,
        "left padding without the attention mask",
        "without padding_mask",
        edit("picked = pick(model(tokens, padding_mask)[:, -1]).long()", "picked = pick(model(tokens)[:, -1]).long()"),
    ),
    WrongVersion(
        BATCH,
        "right padding",
        "padded on the right",
        edit(
            """\
        tokens[row, longest - len(prompt):] = prompt
        padding_mask[row, longest - len(prompt):] = True
""",
            """\
        tokens[row, :len(prompt)] = prompt
        padding_mask[row, :len(prompt)] = True
""",
        ),
    ),
    WrongVersion(
        BATCH,
        "finished sequences go on",
        "goes on after its EOS",
        edit(
            """\
            if not finished[row]:
                new[row].append(int(picked[row]))
""",
            "            new[row].append(int(pick(model(tokens, padding_mask)[:, -1]).long()[row]))\n",
        ),
    ),
    WrongVersion(
        BATCH,
        "stops when the first sequence finishes",
        "stopped early",
        edit("if finished.all():", "if finished.any():"),
    ),
    WrongVersion(
        BATCH,
        "finished rows keep being fed the model's picks (right outputs)",
        "a finished sequence gets pad_id with mask False from then on",
        edit("        picked = torch.where(finished, torch.full_like(picked, pad_id), picked)\n", ""),
        edit(
            "padding_mask = torch.cat([padding_mask, ~finished[:, None]], dim=1)",
            "padding_mask = torch.cat([padding_mask, torch.ones_like(finished)[:, None]], dim=1)",
        ),
    ),
    # beam_search
    WrongVersion(
        BEAM, "scores not length-normalised", "normalised by the length", edit(_RETURN_TOTAL_LEN, "return total")
    ),
    WrongVersion(BEAM, "finished beams extended", "never extend it", edit("if tokens[-1] == eos_id:", "if False:")),
    WrongVersion(
        BEAM,
        "length counted with the prompt",
        "n the number of new tokens",
        edit(_RETURN_TOTAL_LEN, "return total / (len(tokens) + len(prompt)) ** length_penalty"),
    ),
    WrongVersion(
        BEAM,
        "returns only the new tokens",
        "the prompt followed by the best hypothesis",
        edit(
            "return torch.cat([prompt, torch.tensor(best, dtype=prompt.dtype)]), best_score",
            "return torch.tensor(best, dtype=prompt.dtype), best_score",
        ),
    ),
    WrongVersion(
        BEAM,
        "keeps one beam whatever beam_size",
        "it kept one beam",
        edit("for tokens, total in candidates[:beam_size]:", "for tokens, total in candidates[:1]:"),
    ),
    WrongVersion(
        BEAM,
        "no early stopping: searches on after beam_size hypotheses are finished",
        "stop then (early stopping)",
        edit(
            """\
        if len(finished) >= beam_size:
            live = []
""",
            "",
        ),
    ),
    # kv_cache
    WrongVersion(
        CACHE,
        "appends along the heads axis",
        "Sizes of tensors must match except in dimension 1",
        edit("k = torch.cat([self.keys[layer], k], dim=2)", "k = torch.cat([self.keys[layer], k], dim=1)"),
    ),
    WrongVersion(
        CACHE,
        "length counts the updates",
        "not the number of updates",
        edit(_RETURN_IF_SELF, "return sum(k is not None for k in self.keys)"),
    ),
    WrongVersion(
        CACHE,
        "returns only the new keys and values",
        "returned only the new keys",
        edit(
            '        """Append k, v [batch, kv_heads, new, head_dim] to `layer`\'s store (dim 2); return everything stored."""\n',
            '        """Append k, v [batch, kv_heads, new, head_dim] to `layer`\'s store (dim 2); return everything stored."""\n        new_k, new_v = k, v\n',
        ),
        edit("return k, v", "return new_k, new_v"),
    ),
    WrongVersion(
        CACHE,
        "one store shared by every layer",
        "the layers share one store",
        edit(
            "        self.keys[layer], self.values[layer] = k, v\n",
            """\
        self.keys = [k] * len(self.keys)
        self.values = [v] * len(self.values)
""",
        ),
    ),
    WrongVersion(
        CACHE,
        "stores under other names than keys and values",
        "cache.keys is not a list with one entry per layer",
        edit(
            """\
        self.keys = [None] * n_layers
        self.values = [None] * n_layers
""",
            """\
        self.k_store = [None] * n_layers
        self.v_store = [None] * n_layers
""",
        ),
        edit(_RETURN_IF_SELF, "return 0 if self.k_store[0] is None else self.k_store[0].shape[2]"),
        edit(
            """\
        if self.keys[layer] is not None:
            k = torch.cat([self.keys[layer], k], dim=2)
            v = torch.cat([self.values[layer], v], dim=2)
        self.keys[layer], self.values[layer] = k, v
""",
            """\
        if self.k_store[layer] is not None:
            k = torch.cat([self.k_store[layer], k], dim=2)
            v = torch.cat([self.v_store[layer], v], dim=2)
        self.k_store[layer], self.v_store[layer] = k, v
""",
        ),
    ),
    WrongVersion(
        CACHE,
        "a buffer preallocated for 512 positions",
        "with no buffer of a fixed size",
        code="""\
class KVCache:
    def __init__(self, n_layers: int, max_len: int = 512):
        self.keys = [None] * n_layers
        self.values = [None] * n_layers
        self.buffers = [None] * n_layers
        self.max_len = max_len

    @property
    def length(self) -> int:
        return 0 if self.keys[0] is None else self.keys[0].shape[2]

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        if self.buffers[layer] is None:
            batch, heads, _, head_dim = k.shape
            self.buffers[layer] = (k.new_zeros(batch, heads, self.max_len, head_dim),
                                   v.new_zeros(batch, heads, self.max_len, head_dim))
        start = 0 if self.keys[layer] is None else self.keys[layer].shape[2]
        end = start + k.shape[2]
        k_buffer, v_buffer = self.buffers[layer]
        k_buffer[:, :, start:end] = k
        v_buffer[:, :, start:end] = v
        self.keys[layer], self.values[layer] = k_buffer[:, :, :end], v_buffer[:, :, :end]
        return self.keys[layer], self.values[layer]
""",
    ),
    WrongVersion(
        CACHE,
        "a growing buffer made with torch.zeros on the CPU",
        "Keep the keys and values on the device of k and v",
        code="""\
class KVCache:
    def __init__(self, n_layers: int):
        self.keys = [None] * n_layers
        self.values = [None] * n_layers

    @property
    def length(self) -> int:
        return 0 if self.keys[0] is None else self.keys[0].shape[2]

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        stored = 0 if self.keys[layer] is None else self.keys[layer].shape[2]
        batch, heads, new, head_dim = k.shape
        k_all = torch.zeros(batch, heads, stored + new, head_dim, dtype=k.dtype)
        v_all = torch.zeros(batch, heads, stored + new, head_dim, dtype=v.dtype)
        if stored:
            k_all[:, :, :stored] = self.keys[layer]
            v_all[:, :, :stored] = self.values[layer]
        k_all[:, :, stored:] = k
        v_all[:, :, stored:] = v
        self.keys[layer], self.values[layer] = k_all, v_all
        return k_all, v_all
""",
    ),
    WrongVersion(
        CACHE,
        "the store kept on the CPU (offloaded), the concatenation returned",
        "Keep the keys and values on the device of k and v",
        edit(
            "self.keys[layer], self.values[layer] = k, v",
            'self.keys[layer], self.values[layer] = k.to("cpu"), v.to("cpu")',
        ),
    ),
    WrongVersion(
        CACHE,
        "layers pre-filled with empty tensors instead of None",
        "a layer holds None until its first update",
        code="""\
class KVCache:
    def __init__(self, n_layers):
        self.keys = [torch.empty(0) for _ in range(n_layers)]
        self.values = [torch.empty(0) for _ in range(n_layers)]

    @property
    def length(self):
        return self.keys[0].shape[2] if self.keys[0].dim() == 4 else 0

    def update(self, layer, k, v):
        if self.keys[layer].numel() == 0:
            self.keys[layer], self.values[layer] = k[:, :, :0], v[:, :, :0]
        self.keys[layer] = torch.cat([self.keys[layer], k], dim=2)
        self.values[layer] = torch.cat([self.values[layer], v], dim=2)
        return self.keys[layer], self.values[layer]
""",
    ),
    # Full code: a preallocated store is another data structure, no edit of the solution.
    WrongVersion(
        CACHE,
        "buffers preallocated for 1024 positions",
        "no buffer of a fixed size",
        code="""\
class KVCache:
    def __init__(self, n_layers, capacity=1024):
        self.n_layers, self.capacity = n_layers, capacity
        self._k, self._v, self._n = [None] * n_layers, [None] * n_layers, [0] * n_layers

    def update(self, layer, k, v):
        if self._k[layer] is None:
            b, h, _, d = k.shape
            self._k[layer] = k.new_zeros(b, h, self.capacity, d)
            self._v[layer] = v.new_zeros(b, h, self.capacity, d)
        n = self._n[layer]
        self._k[layer][:, :, n : n + k.shape[2]] = k
        self._v[layer][:, :, n : n + v.shape[2]] = v
        self._n[layer] = n + k.shape[2]
        return self._k[layer][:, :, : self._n[layer]], self._v[layer][:, :, : self._n[layer]]

    @property
    def keys(self):
        return [None if t is None else t[:, :, :n] for t, n in zip(self._k, self._n)]

    @property
    def values(self):
        return [None if t is None else t[:, :, :n] for t, n in zip(self._v, self._n)]

    @property
    def length(self):
        return self._n[0]
""",
    ),
    # cached_attention
    WrongVersion(
        ATTENTION,
        "the cache is never used",
        "the cache is still empty",
        edit(
            """\
        if cache is not None:
            k, v = cache.update(layer, k, v)
""",
            "",
        ),
    ),
    WrongVersion(
        ATTENTION,
        "positions of the new tokens ignored (0..new-1)",
        "The first call (empty cache) is right",
        edit("if token_positions is None:", "if True:"),
    ),
    WrongVersion(
        ATTENTION,
        "every call writes into layer 0",
        "once per call",
        edit("k, v = cache.update(layer, k, v)", "k, v = cache.update(0, k, v)"),
    ),
    WrongVersion(
        ATTENTION,
        "raw keys cached, all rotated after each update (right outputs)",
        "the cache holds the keys before RoPE",
        edit(
            "k = self.rope(heads(self.k_proj(x), self.num_kv_heads), token_positions)",
            "k = heads(self.k_proj(x), self.num_kv_heads)",
        ),
        edit(
            "            k, v = cache.update(layer, k, v)\n",
            """\
            k, v = cache.update(layer, k, v)
            k = self.rope(k, torch.arange(k.shape[2]))
        else:
            k = self.rope(k, token_positions)
""",
        ),
    ),
    WrongVersion(
        ATTENTION,
        "default positions made on the CPU",
        "device=x.device",
        edit("token_positions = torch.arange(new, device=x.device)", "token_positions = torch.arange(new)"),
    ),
    WrongVersion(
        ATTENTION,
        "causal attention when no mask is given",
        "with mask=None it attends causally",
        edit(
            "attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)",
            "attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None)",
        ),
    ),
    WrongVersion(
        ATTENTION,
        "token_positions=None with a cache continues from the cache's length",
        "None means 0 .. new-1, cache or not",
        edit(
            "            token_positions = torch.arange(new, device=x.device)\n",
            """\
            offset = 0 if cache is None or cache.keys[layer] is None else cache.keys[layer].shape[2]
            token_positions = torch.arange(offset, offset + new, device=x.device)
""",
        ),
    ),
    # cached_decoder
    WrongVersion(
        DECODER,
        "cache positions not advanced",
        "the positions restart at 0",
        edit(_POSITIONS, "positions = torch.arange(new, device=tokens.device)"),
    ),
    WrongVersion(
        DECODER,
        "the cache is not passed to the blocks",
        "pass cache=cache (and layer=i) to every block",
        edit(_X, "x = layer(x, mask, positions)"),
    ),
    WrongVersion(
        DECODER,
        "mask without the offset",
        "the mask covers every key",
        edit(_MASK, "mask = torch.ones(new, new, dtype=torch.bool, device=tokens.device).tril()"),
    ),
    WrongVersion(
        DECODER,
        "every block writes into layer 0",
        "block i must get layer=i",
        edit(_X, "x = layer(x, mask, positions, cache=cache, layer=0)"),
    ),
    WrongVersion(
        DECODER,
        "positions made on the CPU",
        "device=tokens.device",
        edit(_POSITIONS, "positions = torch.arange(offset, offset + new)"),
    ),
    WrongVersion(
        DECODER,
        "mask made on the CPU",
        "device=tokens.device",
        edit(_MASK, "mask = torch.ones(new, offset + new, dtype=torch.bool).tril(diagonal=offset)"),
    ),
    WrongVersion(
        DECODER,
        "one rope built per block",
        "built one rope per block",
        edit(
            "        self.blocks = nn.ModuleList([block(config, shared_rope) for _ in range(config.n_layers)])\n",
            """\
        self.blocks = nn.ModuleList(
            [block(config, rope(d // config.n_heads, config.max_seq_len, config.rope_base)) for _ in range(config.n_layers)]
        )
""",
        ),
    ),
    WrongVersion(
        DECODER,
        "rope_base not passed (the default base 10000)",
        "expected config.rope_base = 500.0",
        edit(
            "shared_rope = rope(d // config.n_heads, config.max_seq_len, config.rope_base)",
            "shared_rope = rope(d // config.n_heads, config.max_seq_len)",
        ),
    ),
    # continuous_batching
    WrongVersion(
        BATCHING,
        "static batching: slots refilled only when the whole batch is done",
        "static batching's waste",
        code="""\

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
    ),
    WrongVersion(
        BATCHING,
        "refills only when every slot is free",
        "while requests were waiting",
        edit("for slot in range(engine.n_slots):", "for slot in range(engine.n_slots if not running else 0):"),
    ),
    WrongVersion(
        BATCHING,
        "outputs in the order they finish",
        "in another order",
        edit(
            "outputs, running = [None] * len(prompts), {}  # running: slot -> (request, its new tokens)",
            "outputs, running, finished = [None] * len(prompts), {}, []  # running: slot -> (request, its new tokens)",
        ),
        edit(
            """\
            if done(new):
                outputs[request] = new
""",
            """\
            if done(new):
                outputs[request] = new
                finished.append(new)
""",
        ),
        edit("return outputs", "return [o for o in outputs if len(o) == 1] + finished"),
    ),
    WrongVersion(
        BATCHING,
        "the first token is not checked",
        "goes on after it is done",
        edit(
            """\
                if done(new):
                    outputs[request] = new
                    engine.finish(slot)
                else:
                    running[slot] = (request, new)
""",
            "                running[slot] = (request, new)\n",
        ),
    ),
)
