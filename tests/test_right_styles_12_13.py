"""Right answers written in other styles pass every check of their exercise (notebooks 12 and 13).

The checks of issue 34 observe what the code does (when each streamed id comes out, the lines of Python a merge
runs, the passes a training step makes, the autocast state of its loss, what ``.grad`` holds, the dtype of the
generated tokens); these answers do the same thing as the solutions in another way, and must not be refused
for it. Each runs in the solution notebook's namespace after ``PRELUDE``, as ``tests/wrong`` does.
"""

from __future__ import annotations

from wrong import PRELUDE

from autograder.exercises import find_exercise, run_exercise
from autograder.impl import LocalImpl

STREAM_ASIDE_APART = '''
def encode_iterable(self, lines):
    """The set-aside kept in a variable of its own, and flushed with the rest when the input ends."""
    held, aside = "", ""
    for chunk in lines:
        text = held + aside + chunk
        keep = max((k for s in self.special_tokens for k in range(1, len(s)) if text.endswith(s[:k])), default=0)
        aside = text[len(text) - keep:]
        pieces = pretokenize(text[:len(text) - keep], self.special_tokens)
        for piece in pieces[:max(0, len(pieces) - 2)]:
            for i in self.encode(piece):
                yield i
        held = "".join(pieces[max(0, len(pieces) - 2):])
    yield from self.encode(held + aside)
'''

STREAM_NEXT = '''
def encode_iterable(self, lines):
    """next() by hand, empty chunks skipped, the held pre-tokens kept as a list."""
    source, held, aside = iter(lines), [], ""
    while True:
        try:
            chunk = next(source)
        except StopIteration:
            break
        if not chunk:
            continue
        text = "".join(held) + aside + chunk
        keep = 0
        for special in self.special_tokens:
            for k in range(len(special) - 1, 0, -1):
                if k > keep and text.endswith(special[:k]):
                    keep = k
        text, aside = text[:len(text) - keep], text[len(text) - keep:]
        pieces = pretokenize(text, self.special_tokens)
        held = pieces[-2:]
        for piece in pieces[:-2]:
            yield from self.encode(piece)
    yield from self.encode("".join(held) + aside)
'''

TRAIN_HEAP = '''
import heapq


class _Greatest:
    """Orders pairs so that heapq's smallest is the greatest pair (ties go to the greatest)."""
    __slots__ = ("pair",)

    def __init__(self, pair):
        self.pair = pair

    def __lt__(self, other):
        return self.pair > other.pair


def train_bpe(text, vocab_size, special_tokens=("<|endoftext|>",)):
    """A heap of (-count, pair) with lazy deletion; an index of the words holding each pair."""
    vocab = {i: bytes([i]) for i in range(256)}
    for token in special_tokens:
        vocab[len(vocab)] = token.encode("utf-8")
    specials = set(special_tokens)
    words = Counter(tuple(bytes([b]) for b in piece.encode("utf-8"))
                    for piece in pretokenize(text, special_tokens) if piece not in specials)
    counts = count_pairs(words)
    where = defaultdict(set)
    for w in words:
        for p in zip(w, w[1:], strict=False):
            where[p].add(w)
    heap = [(-c, _Greatest(p)) for p, c in counts.items()]
    heapq.heapify(heap)
    merges = []
    while len(vocab) < vocab_size:
        while heap and counts.get(heap[0][1].pair, 0) != -heap[0][0]:
            heapq.heappop(heap)  # a stale entry
        if not heap:
            break
        best = heapq.heappop(heap)[1].pair
        merges.append(best)
        vocab[len(vocab)] = best[0] + best[1]
        changed = set()
        for w in list(where.pop(best, ())):
            if w not in words:
                continue
            n = words.pop(w)
            new = merge_word(w, best)
            words[new] = words.get(new, 0) + n
            for p in zip(w, w[1:], strict=False):
                counts[p] -= n
                changed.add(p)
                if counts[p] == 0:
                    del counts[p]
            for p in zip(new, new[1:], strict=False):
                counts[p] = counts.get(p, 0) + n
                where[p].add(new)
                changed.add(p)
        for p in changed:
            if p in counts:
                heapq.heappush(heap, (-counts[p], _Greatest(p)))
    return vocab, merges
'''

TRAIN_LISTS = '''
_my_merge = merge_word  # the notebook's own, taken when the cell runs


def train_bpe(text, vocab_size, special_tokens=("<|endoftext|>",)):
    """An index of lists (stale words skipped), the maximum found by a Python loop."""
    vocab = {i: bytes([i]) for i in range(256)}
    for token in special_tokens:
        vocab[len(vocab)] = token.encode("utf-8")
    word_counts = {}
    for piece in pretokenize(text, special_tokens):
        if piece in special_tokens:
            continue
        word = tuple(bytes([b]) for b in piece.encode("utf-8"))
        word_counts[word] = word_counts.get(word, 0) + 1
    pair_counts = count_pairs(word_counts)
    index = {}
    for word in word_counts:
        for pair in set(zip(word, word[1:], strict=False)):
            index.setdefault(pair, []).append(word)
    merges = []
    while len(vocab) < vocab_size and pair_counts:
        best, top = None, 0
        for pair, c in pair_counts.items():
            if c > top or (c == top and pair > best):
                best, top = pair, c
        merges.append(best)
        vocab[len(vocab)] = best[0] + best[1]
        for word in index.pop(best):
            if word not in word_counts:
                continue
            n = word_counts.pop(word)
            new = _my_merge(word, best)
            word_counts[new] = word_counts.get(new, 0) + n
            for pair in zip(word, word[1:], strict=False):
                pair_counts[pair] -= n
                if not pair_counts[pair]:
                    del pair_counts[pair]
            for pair in set(zip(new, new[1:], strict=False)):
                index.setdefault(pair, []).append(new)
            for pair in zip(new, new[1:], strict=False):
                pair_counts[pair] = pair_counts.get(pair, 0) + n
    return vocab, merges
'''

TRAIN_COUNT_PAIRS_PER_WORD = '''
def train_bpe(text, vocab_size, special_tokens=("<|endoftext|>",)):
    """count_pairs called again, but only on each word the merge changes: {old word: -n} and {new word: n}."""
    vocab = {i: bytes([i]) for i in range(256)}
    for token in special_tokens:
        vocab[len(vocab)] = token.encode("utf-8")
    specials = set(special_tokens)
    word_counts = Counter(tuple(bytes([b]) for b in piece.encode("utf-8"))
                          for piece in pretokenize(text, special_tokens) if piece not in specials)
    pair_counts = Counter(count_pairs(word_counts))
    words_with = defaultdict(set)
    for word in word_counts:
        for pair in zip(word, word[1:], strict=False):
            words_with[pair].add(word)
    merges = []
    while len(vocab) < vocab_size and pair_counts:
        best = max(pair_counts, key=lambda pair: (pair_counts[pair], pair))
        merges.append(best)
        vocab[len(vocab)] = best[0] + best[1]
        for word in words_with.pop(best):
            n = word_counts.pop(word)
            new = merge_word(word, best)
            word_counts[new] += n
            old_pairs, new_pairs = count_pairs({word: n}), count_pairs({new: n})
            pair_counts.subtract(old_pairs)
            pair_counts.update(new_pairs)
            for pair in old_pairs:
                if pair_counts[pair] <= 0:
                    del pair_counts[pair]
                if pair != best:
                    words_with[pair].discard(word)
            for pair in new_pairs:
                words_with[pair].add(new)
    return vocab, merges
'''

STEP_SET_TO_ZEROS = '''
def train_step(model, micro_batches, optimizer, *, dtype=None, scaler=None, grad_clip=None):
    """Zeros left in .grad (set_to_none=False), through the model; the loss taken by a helper inside the block."""
    device_type = next(model.parameters()).device.type

    def loss_of(inputs, targets):
        logits = model(inputs)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    total = 0.0
    for inputs, targets in micro_batches:
        with torch.autocast(device_type, dtype=dtype, enabled=dtype is not None):
            loss = loss_of(inputs, targets) / len(micro_batches)
        if scaler is None:
            loss.backward()
        else:
            scaler.scale(loss).backward()
        total += float(loss.detach())
    if scaler is not None:
        scaler.unscale_(optimizer)
    if grad_clip is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    model.zero_grad(set_to_none=False)
    return total
'''

STEP_TWO_BLOCKS = '''
import contextlib


def train_step(model, micro_batches, optimizer, *, dtype=None, scaler=None, grad_clip=None):
    """Zeroed at the start as well as after; forward and loss in two autocast blocks; nullcontext without a dtype."""
    device_type = next(model.parameters()).device.type
    precision = (lambda: torch.autocast(device_type=device_type, dtype=dtype)) if dtype else contextlib.nullcontext
    optimizer.zero_grad()
    losses = []
    for inputs, targets in micro_batches:
        with precision():
            logits = model(inputs)
        with precision():
            loss = F.cross_entropy(logits.transpose(1, 2).float(), targets)
        losses.append(loss.detach())
        scaled = loss / len(micro_batches)
        (scaled if scaler is None else scaler.scale(scaled)).backward()
    if scaler:
        scaler.unscale_(optimizer)
    if grad_clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=grad_clip)
    if scaler:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return torch.stack(losses).mean().item()
'''

GENERATE_LIST = '''
@torch.no_grad()
def generate_with_cache(model, prompt, *, max_new_tokens, window, new_cache, eos_id=None, pick):
    """The tokens kept as Python ints; the result built at the end in the prompt's dtype."""
    tokens = prompt.tolist()
    cache = new_cache()
    feed = tokens[-window:]
    for _ in range(max_new_tokens):
        logits = model(torch.tensor([feed], dtype=prompt.dtype), cache=cache)
        token = int(pick(logits[:, -1])[0])
        tokens.append(token)
        if token == eos_id:
            break
        if cache.length >= window:
            cache, feed = new_cache(), tokens[-(window // 2):]
        else:
            feed = [token]
    return torch.tensor(tokens, dtype=prompt.dtype)
'''

GENERATE_PREALLOCATED = '''
@torch.no_grad()
def generate_with_cache(model, prompt, *, max_new_tokens, window, new_cache, eos_id=None, pick):
    """One tensor allocated up front with the prompt's dtype; each new token written into it."""
    out = torch.empty(len(prompt) + max_new_tokens, dtype=prompt.dtype)
    out[:len(prompt)] = prompt
    n, cache, start = len(prompt), new_cache(), max(0, len(prompt) - window)
    for _ in range(max_new_tokens):
        logits = model(out[start:n][None], cache=cache)
        out[n] = pick(logits[:, -1])[0]
        n += 1
        if eos_id is not None and out[n - 1].item() == eos_id:
            break
        if cache.length >= window:
            cache, start = new_cache(), n - window // 2
        else:
            start = n - 1
    return out[:n].clone()
'''

TOKENIZER_LRU = '''
import functools


class Tokenizer:
    """The cache is functools.lru_cache on a per-instance function; special ids kept in a dict of their own."""

    def __init__(self, vocab, merges, special_tokens=("<|endoftext|>",)):
        self.vocab = dict(vocab)
        self.special_tokens = list(special_tokens)
        ids = {token: i for i, token in self.vocab.items()}
        self.special_ids = {s: ids[s.encode("utf-8")] for s in self.special_tokens}
        ranks = {tuple(pair): rank for rank, pair in enumerate(merges)}
        self.piece_ids = functools.lru_cache(maxsize=None)(
            lambda piece: tuple(ids[t] for t in apply_merges(piece.encode("utf-8"), ranks)))

    def encode(self, text):
        out = []
        for piece in pretokenize(text, self.special_tokens):
            if piece in self.special_ids:
                out.append(self.special_ids[piece])
            else:
                out.extend(self.piece_ids(piece))
        return out

    def decode(self, ids):
        return b"".join(map(self.vocab.__getitem__, ids)).decode("utf-8", errors="replace")
'''

MAPS_PRE_HOOKS = '''
def attention_maps(model, tokens):
    """Forward pre-hooks that keep the input by layer; no_grad as a with block; the maps built with einsum."""
    seen = {}
    handles = [block.attn.register_forward_pre_hook(lambda module, args, i=i: seen.__setitem__(i, args[0]))
               for i, block in enumerate(model.blocks)]
    try:
        with torch.no_grad():
            model(tokens)
    finally:
        while handles:
            handles.pop().remove()
    batch, length = tokens.shape
    positions = torch.arange(length, device=tokens.device)
    maps = []
    with torch.no_grad():
        for i, block in enumerate(model.blocks):
            attn, x = block.attn, seen[i]
            q = attn.q_proj(x).unflatten(-1, (attn.num_heads, attn.head_dim)).transpose(1, 2)
            k = attn.k_proj(x).unflatten(-1, (attn.num_kv_heads, attn.head_dim)).transpose(1, 2)
            q, k = attn.rope(q, positions), attn.rope(k, positions)
            k = k.repeat_interleave(attn.num_heads // attn.num_kv_heads, dim=1)
            scores = torch.einsum("bhqd,bhkd->bhqk", q, k).float() / attn.head_dim ** 0.5
            future = torch.triu(torch.ones(length, length, dtype=torch.bool, device=tokens.device), diagonal=1)
            maps.append(torch.softmax(scores.masked_fill(future, -torch.inf), dim=-1))
    return torch.stack(maps)
'''

RIGHT_STYLES = [
    ("12_bpe", "encode_iterable", "the set-aside kept apart, flushed at the end", STREAM_ASIDE_APART),
    ("12_bpe", "encode_iterable", "next() by hand, empty chunks skipped", STREAM_NEXT),
    ("12_bpe", "train_bpe", "a heap with lazy deletion", TRAIN_HEAP),
    ("12_bpe", "train_bpe", "an index of lists, a Python loop for the maximum, merge_word aliased", TRAIN_LISTS),
    ("12_bpe", "train_bpe", "count_pairs on each changed word only", TRAIN_COUNT_PAIRS_PER_WORD),
    ("12_bpe", "bpe_tokenizer", "functools.lru_cache per instance, special ids in a dict", TOKENIZER_LRU),
    ("13_tinystories", "attention_maps", "forward pre-hooks, no_grad as a with block, einsum", MAPS_PRE_HOOKS),
    ("13_tinystories", "train_step", "zeros left by model.zero_grad(set_to_none=False)", STEP_SET_TO_ZEROS),
    ("13_tinystories", "train_step", "two autocast blocks, zero_grad before and after", STEP_TWO_BLOCKS),
    ("13_tinystories", "generate_with_cache", "Python ints, one torch.tensor at the end", GENERATE_LIST),
    ("13_tinystories", "generate_with_cache", "a preallocated tensor in the prompt's dtype", GENERATE_PREALLOCATED),
]


class _RightStyles:
    """One notebook's right answers in other styles. A class per notebook, with its ``notebook``: pytest-xdist
    runs it beside that notebook's TestChecksNN, which has already executed the notebook in the same process
    (``conftest.in_process_notebooks``)."""

    notebook: str

    def test_right_answer_in_another_style_passes(self, exercise_id, style, code, solution_namespaces):
        namespace = dict(solution_namespaces[self.notebook])
        exec(compile(PRELUDE + code, "<answer>", "exec"), namespace)
        exercise, adapters = find_exercise(exercise_id)
        result = run_exercise(exercise, LocalImpl(namespace, adapters), source=code, context=[PRELUDE])
        assert result.passed, f"{style}: {result.message}"


def pytest_generate_tests(metafunc):
    if metafunc.cls is not None and issubclass(metafunc.cls, _RightStyles):
        styles = [
            (exercise, style, code)
            for notebook, exercise, style, code in RIGHT_STYLES
            if notebook == metafunc.cls.notebook
        ]
        metafunc.parametrize(
            ("exercise_id", "style", "code"), styles, ids=[f"{exercise}: {style}" for exercise, style, _ in styles]
        )


for _notebook in dict.fromkeys(notebook for notebook, *_ in RIGHT_STYLES):
    _name = f"TestRightStyles{_notebook[:2]}"
    globals()[_name] = type(_name, (_RightStyles,), {"notebook": _notebook})
