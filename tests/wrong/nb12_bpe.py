"""Mistakes students make in notebook 12.

Each wrong version is the solution's answer cell with one mistake written in (``variant`` checks that the
replaced text is there), so the wrong versions differ from a right one only by the mistake. The code runs in
the solution notebook's namespace, so ``PRETOKEN``, ``re``, ``Counter`` and ``defaultdict`` are there.
"""

from wrong import Wrong, catalogue

NOTEBOOK = "12_bpe"
RIGHT, variant = catalogue(NOTEBOOK)


BEST = "best = max(pair_counts, key=lambda pair: (pair_counts[pair], pair))  # ties: the greatest pair"

# Right merges, counted the slow way: every pair recounted and every word merged at each step.
RECOUNT = """
def train_bpe(text, vocab_size, special_tokens=("<|endoftext|>",)):
    vocab = {i: bytes([i]) for i in range(256)}
    for token in special_tokens:
        vocab[len(vocab)] = token.encode("utf-8")
    specials = set(special_tokens)
    word_counts = Counter(tuple(bytes([b]) for b in piece.encode("utf-8"))
                          for piece in pretokenize(text, special_tokens) if piece not in specials)
    merges = []
    while len(vocab) < vocab_size:
        pair_counts = count_pairs(word_counts)
        if not pair_counts:
            break
        best = max(pair_counts, key=lambda pair: (pair_counts[pair], pair))
        merges.append(best)
        vocab[len(vocab)] = best[0] + best[1]
        merged = Counter()
        for word, count in word_counts.items():
            merged[merge_word(word, best)] += count
        word_counts = merged
    return vocab, merges
"""

# Right merges, incremental in name only: count_pairs once, then every pair recounted with the trainer's own loops.
OWN_RECOUNT = """
def train_bpe(text, vocab_size, special_tokens=("<|endoftext|>",)):
    vocab = {i: bytes([i]) for i in range(256)}
    for token in special_tokens:
        vocab[len(vocab)] = token.encode("utf-8")
    specials = set(special_tokens)
    word_counts = Counter(tuple(bytes([b]) for b in piece.encode("utf-8"))
                          for piece in pretokenize(text, special_tokens) if piece not in specials)
    pair_counts = count_pairs(word_counts)
    merges = []
    while len(vocab) < vocab_size and pair_counts:
        best = max(pair_counts, key=lambda pair: (pair_counts[pair], pair))
        merges.append(best)
        vocab[len(vocab)] = best[0] + best[1]
        merged = Counter()
        for word, count in word_counts.items():
            merged[merge_word(word, best) if best[0] in word else word] += count
        word_counts = merged
        pair_counts = defaultdict(int)
        for word, count in word_counts.items():
            for pair in zip(word, word[1:], strict=False):
                pair_counts[pair] += count
    return vocab, merges
"""

# Right merges through names taken when the cell ran: the notebook's own count_pairs and merge_word, at every merge.
ALIASED = """
_count = count_pairs
_merge = merge_word

def train_bpe(text, vocab_size, special_tokens=("<|endoftext|>",)):
    vocab = {i: bytes([i]) for i in range(256)}
    for token in special_tokens:
        vocab[len(vocab)] = token.encode("utf-8")
    specials = set(special_tokens)
    word_counts = Counter(tuple(bytes([b]) for b in piece.encode("utf-8"))
                          for piece in pretokenize(text, special_tokens) if piece not in specials)
    pair_counts = count_pairs(word_counts)
    merges = []
    while len(vocab) < vocab_size and pair_counts:
        best = max(pair_counts, key=lambda pair: (pair_counts[pair], pair))
        merges.append(best)
        vocab[len(vocab)] = best[0] + best[1]
        word_counts = {_merge(w, best): n for w, n in word_counts.items()}
        pair_counts = _count(word_counts)
    return vocab, merges
"""

# Right merges and incremental counts, but every word visited at each merge to find those that contain the pair.
SCAN = """
def train_bpe(text, vocab_size, special_tokens=("<|endoftext|>",)):
    vocab = {i: bytes([i]) for i in range(256)}
    for token in special_tokens:
        vocab[len(vocab)] = token.encode("utf-8")
    specials = set(special_tokens)
    word_counts = Counter(tuple(bytes([b]) for b in piece.encode("utf-8"))
                          for piece in pretokenize(text, special_tokens) if piece not in specials)
    pair_counts = count_pairs(word_counts)
    merges = []
    while len(vocab) < vocab_size and pair_counts:
        best = max(pair_counts, key=lambda pair: (pair_counts[pair], pair))
        merges.append(best)
        vocab[len(vocab)] = best[0] + best[1]
        touched = [w for w in word_counts if best in zip(w, w[1:], strict=False)]
        for word in touched:
            count = word_counts.pop(word)
            new = merge_word(word, best)
            word_counts[new] += count
            for pair in zip(word, word[1:], strict=False):
                pair_counts[pair] -= count
                if pair_counts[pair] == 0:
                    del pair_counts[pair]
            for pair in zip(new, new[1:], strict=False):
                pair_counts[pair] = pair_counts.get(pair, 0) + count
    return vocab, merges
"""

# One pass over the merges in rank order instead of repeatedly merging the lowest-ranked pair present.
ONE_PASS = """
def apply_merges(piece, ranks):
    tokens = tuple(bytes([b]) for b in piece)
    for pair in sorted(ranks, key=ranks.get):
        tokens = merge_word(tokens, pair)
    return list(tokens)
"""

WRONG = [
    # Exercise 1
    Wrong(
        "pretokenize",
        "special tokens dropped (no capturing group)",
        variant(
            "pretokenize",
            (
                'parts = re.split("(" + "|".join(map(re.escape, specials)) + ")", text)',
                'parts = re.split("|".join(map(re.escape, specials)), text)',
            ),
            ("if i % 2:", "if False:"),
        ),
        "is not in the result",
    ),
    Wrong(
        "pretokenize",
        "no special-token split: the regex cuts <|endoftext|>",
        variant("pretokenize", ("    if not special_tokens:\n", "    if True:\n")),
        "cut the special token",
    ),
    Wrong(
        "pretokenize",
        "special tokens not escaped",
        variant("pretokenize", ("map(re.escape, specials)", "specials")),
        "pretokenize(",
    ),
    Wrong(
        "pretokenize",
        "specials not sorted longest first",
        variant("pretokenize", ("sorted(special_tokens, key=len, reverse=True)", "list(special_tokens)")),
        "the longest special token first",
    ),
    Wrong(
        "pretokenize",
        "whitespace split instead of GPT-2's regex",
        variant(
            "pretokenize", ("pieces.extend(PRETOKEN.findall(part))", "pieces.extend(re.findall(r'\\S+|\\s+', part))")
        ),
        "GPT-2's pattern",
    ),
    # Exercise 2
    Wrong(
        "count_pairs",
        "pairs of count 0 kept (words of frequency 0)",
        variant("count_pairs", ("return {pair: n for pair, n in counts.items() if n > 0}", "return dict(counts)")),
        "with count 0",
    ),
    Wrong(
        "count_pairs",
        "frequencies ignored",
        variant("count_pairs", ("counts[pair] += n", "counts[pair] += 1")),
        "ignores the words' frequencies",
    ),
    Wrong(
        "count_pairs",
        "a pair counted once per word",
        variant(
            "count_pairs",
            ("for pair in zip(word, word[1:], strict=False):", "for pair in set(zip(word, word[1:], strict=False)):"),
        ),
        "once per word",
    ),
    Wrong(
        "count_pairs",
        "the last pair of each word missed",
        variant("count_pairs", ("zip(word, word[1:], strict=False)", "zip(word[:-1], word[1:-1], strict=False)")),
        "has count",
    ),
    # Exercise 3
    Wrong(
        "merge_word",
        "overlapping occurrences merged (no skip after a merge)",
        variant("merge_word", ("            i += 2\n", "            i += 1\n")),
        "no longer spell",
    ),
    Wrong(
        "merge_word",
        "only the first occurrence merged",
        "def merge_word(word, pair):\n    for i in range(len(word) - 1):\n"
        "        if word[i] == pair[0] and word[i + 1] == pair[1]:\n"
        "            return word[:i] + (word[i] + word[i + 1],) + word[i + 2:]\n    return tuple(word)\n",
        "every occurrence",
    ),
    Wrong(
        "merge_word",
        "scans right to left",
        "def merge_word(word, pair):\n    merged, i = [], len(word) - 1\n    while i >= 0:\n"
        "        if i > 0 and word[i - 1] == pair[0] and word[i] == pair[1]:\n"
        "            merged.insert(0, word[i - 1] + word[i])\n            i -= 2\n        else:\n"
        "            merged.insert(0, word[i])\n            i -= 1\n    return tuple(merged)\n",
        "left to right",
    ),
    Wrong(
        "merge_word",
        "returns a list",
        variant("merge_word", ("return tuple(merged)", "return merged")),
        "expected a tuple",
    ),
    # Exercise 4
    Wrong(
        "train_bpe",
        "ties to the least pair",
        variant("train_bpe", (BEST, "best = min(pair_counts, key=lambda pair: (-pair_counts[pair], pair))")),
        "a tie",
    ),
    Wrong(
        "train_bpe",
        "ties to the first pair seen",
        variant("train_bpe", (BEST, "best = max(pair_counts, key=lambda pair: pair_counts[pair])")),
        "a tie",
    ),
    Wrong(
        "train_bpe",
        "stale counts: never updated after a merge",
        variant(
            "train_bpe",
            ("                pair_counts[pair] -= count\n", ""),
            ("                if pair_counts[pair] == 0:\n                    del pair_counts[pair]\n", ""),
            (
                "                pair_counts[pair] = pair_counts.get(pair, 0) + count\n",
                "                pair_counts.setdefault(pair, 0)\n",
            ),
            (
                "        for word in words_with.pop(best):",
                "        del pair_counts[best]\n        for word in words_with.pop(best):",
            ),
        ),
        "not the most frequent",
    ),
    Wrong(
        "train_bpe",
        "merges across the special token (specials not split out)",
        variant(
            "train_bpe",
            (
                "for piece in pretokenize(text, special_tokens) if piece not in specials)",
                "for piece in pretokenize(text, ()) if piece not in specials)",
            ),
        ),
        "never occurs inside a pre-token",
    ),
    Wrong(
        "train_bpe",
        "merges across pre-token boundaries (the whole text is one word)",
        variant(
            "train_bpe",
            (
                "for piece in pretokenize(text, special_tokens) if piece not in specials)",
                "for piece in text.split('<|endoftext|>') if piece)",
            ),
        ),
        "never occurs inside a pre-token",
    ),
    Wrong(
        "train_bpe",
        "specials after the merges",
        variant(
            "train_bpe",
            ('    for token in special_tokens:\n        vocab[len(vocab)] = token.encode("utf-8")\n', ""),
            (
                "    return vocab, merges",
                "    for token in special_tokens:\n"
                '        vocab[len(vocab)] = token.encode("utf-8")\n    return vocab, merges',
            ),
        ),
        "right after the 256 bytes",
    ),
    Wrong(
        "train_bpe",
        "vocab_size counts only the merges",
        variant(
            "train_bpe",
            ("while len(vocab) < vocab_size and pair_counts:", "while len(merges) < vocab_size - 256 and pair_counts:"),
        ),
        "merges, expected",
    ),
    # Exercise 5
    Wrong(
        "apply_merges",
        "the highest rank first",
        variant(
            "apply_merges",
            ('key=lambda pair: ranks.get(pair, float("inf")))', "key=lambda pair: -ranks.get(pair, -1))"),
            ("        if best not in ranks:\n", "        if best not in ranks or ranks[best] < 0:\n"),
        ),
        "LOWEST rank",
    ),
    Wrong(
        "apply_merges",
        "the leftmost pair that has a rank, whatever its rank",
        variant(
            "apply_merges",
            (
                'best = min(zip(tokens, tokens[1:], strict=False), key=lambda pair: ranks.get(pair, float("inf")))',
                "best = next((p for p in zip(tokens, tokens[1:], strict=False) if p in ranks), (None, None))",
            ),
        ),
        "LOWEST rank",
    ),
    Wrong(
        "apply_merges",
        "one pass over the merges, first occurrence only",
        "def apply_merges(piece, ranks):\n    tokens = [bytes([b]) for b in piece]\n"
        "    for pair in sorted(ranks, key=ranks.get):\n        for i in range(len(tokens) - 1):\n"
        "            if (tokens[i], tokens[i + 1]) == pair:\n"
        "                tokens[i:i + 2] = [pair[0] + pair[1]]\n                break\n    return tokens\n",
        "expected",
    ),
    # Exercise 6
    Wrong(
        "bpe_tokenizer",
        "bytes decoded per token",
        variant(
            "bpe_tokenizer",
            (
                'return b"".join(self.vocab[i] for i in ids).decode("utf-8", errors="replace")',
                'return "".join(self.vocab[i].decode("utf-8", errors="replace") for i in ids)',
            ),
        ),
        "decode once",
    ),
    Wrong(
        "bpe_tokenizer",
        "special tokens forgotten in encode",
        variant(
            "bpe_tokenizer",
            ("for piece in pretokenize(text, self.special_tokens):", "for piece in pretokenize(text, ()):"),
        ),
        "must become its own id",
    ),
    Wrong(
        "bpe_tokenizer",
        "only <|endoftext|> set aside",
        variant(
            "bpe_tokenizer",
            (
                "for piece in pretokenize(text, self.special_tokens):",
                'for piece in pretokenize(text, ["<|endoftext|>"]):',
            ),
        ),
        "<|pad|> must become",
    ),
    Wrong(
        "bpe_tokenizer",
        "a special token's id guessed as 256 + its position",
        variant(
            "bpe_tokenizer",
            (
                'token_ids.append(self.ids[piece.encode("utf-8")])',
                "token_ids.append(256 + self.special_tokens.index(piece))",
            ),
        ),
        "not 256 + its position",
    ),
    Wrong(
        "bpe_tokenizer",
        "a cache filled but never read",
        variant("bpe_tokenizer", ("if piece not in self.cache:", "if True:")),
        "were not reused",
    ),
    Wrong(
        "bpe_tokenizer",
        "a cache made inside encode, lost after each call",
        variant("bpe_tokenizer", ("        token_ids = []\n", "        token_ids = []\n        self.cache = {}\n")),
        "a cache made inside encode",
    ),
    Wrong(
        "bpe_tokenizer",
        "decode with errors='ignore'",
        variant("bpe_tokenizer", ('decode("utf-8", errors="replace")', 'decode("utf-8", errors="ignore")')),
        "errors='replace'",
    ),
    Wrong(
        "bpe_tokenizer",
        "merges applied in reverse order",
        variant(
            "bpe_tokenizer",
            (
                "self.ranks = {pair: rank for rank, pair in enumerate(merges)}",
                "self.ranks = {pair: -rank for rank, pair in enumerate(merges)}",
            ),
        ),
        "gave",
    ),
    # Exercise 7
    Wrong(
        "encode_iterable",
        "reads the whole input first (not lazy)",
        "def encode_iterable(self, lines):\n    yield from self.encode(''.join(lines))\n",
        "it is not lazy",
    ),
    Wrong(
        "encode_iterable",
        "each chunk encoded on its own",
        "def encode_iterable(self, lines):\n    for line in lines:\n        yield from self.encode(line)\n",
        "encodes each chunk on its own",
    ),
    Wrong(
        "encode_iterable",
        "what is left at the end is dropped",
        variant("encode_iterable", ("    yield from self.encode(buffer)\n", "")),
        "never came out",
    ),
    Wrong(
        "encode_iterable",
        "a special token cut by a chunk boundary is not held back",
        variant("encode_iterable", ("        for special in self.special_tokens:\n", "        for special in ():\n")),
        "beginning of a special token",
    ),
    Wrong(
        "encode_iterable",
        "only the last pre-token held back",
        variant("encode_iterable", ("pieces[:-2]", "pieces[:-1]"), ("pieces[-2:]", "pieces[-1:]")),
        "Hold back the last TWO pre-tokens",
    ),
    Wrong(
        "encode_iterable",
        "the finished pre-tokens encoded joined together",
        variant(
            "encode_iterable",
            (
                "        for piece in pieces[:-2]:  # finished: more text cannot change them\n"
                "            yield from self.encode(piece)\n",
                "        yield from self.encode(''.join(pieces[:-2]))\n",
            ),
        ),
        "Encode each finished pre-token on its own",
    ),
    Wrong(
        "encode_iterable",
        "the set-aside beginning of a special token dropped when the input ends",
        variant(
            "encode_iterable",
            ('    buffer = ""\n', '    buffer, aside = "", ""\n'),
            ("        buffer += chunk\n", "        buffer += aside + chunk\n"),
            (
                '        buffer = "".join(pieces[-2:]) + buffer[len(buffer) - keep:]\n',
                '        aside, buffer = buffer[len(buffer) - keep:], "".join(pieces[-2:])\n',
            ),
        ),
        "set aside as a possible beginning of a special token and never came out",
    ),
    Wrong(
        "encode_iterable",
        "the set-aside looks only at <|endoftext|>",
        variant(
            "encode_iterable",
            ("        for special in self.special_tokens:\n", '        for special in ["<|endoftext|>"]:\n'),
        ),
        "must look at every special token the tokenizer was given",
    ),
    Wrong(
        "encode_iterable",
        "reads one chunk ahead (encodes a chunk once the next one is read)",
        variant(
            "encode_iterable",
            (
                "    for chunk in lines:\n        buffer += chunk\n",
                "    previous = None\n    for chunk in lines:\n        if previous is None:\n"
                "            previous = chunk\n            continue\n"
                "        buffer, previous = buffer + previous, chunk\n",
            ),
            ("    yield from self.encode(buffer)\n", "    yield from self.encode(buffer + (previous or ''))\n"),
        ),
        "reads one chunk ahead",
    ),
    Wrong(
        "encode_iterable",
        "holds back three pre-tokens",
        variant("encode_iterable", ("pieces[:-2]", "pieces[:-3]"), ("pieces[-2:]", "pieces[-3:]")),
        "holds back more than the last two pre-tokens",
    ),
    Wrong(
        "encode_iterable",
        "a story at a time: waits for <|endoftext|>",
        "def encode_iterable(self, lines):\n    buffer = ''\n    for chunk in lines:\n        buffer += chunk\n"
        "        *stories, buffer = buffer.split('<|endoftext|>')\n        for story in stories:\n"
        "            yield from self.encode(story)\n            yield self.encode('<|endoftext|>')[0]\n"
        "    yield from self.encode(buffer)\n",
        "held back",
    ),
    # Right results, wrong way (last, so that the nbgrader class's wrong student is not a slow one):
    Wrong(
        "train_bpe",
        "recounts every pair and merges every word at each step (right merges)",
        RECOUNT,
        "update the counts incrementally",
    ),
    Wrong(
        "train_bpe",
        "count_pairs once, then every pair recounted with its own loops (right merges)",
        OWN_RECOUNT,
        "update the counts incrementally",
    ),
    Wrong(
        "train_bpe",
        "recounts through aliases of count_pairs and merge_word taken at definition (right merges)",
        ALIASED,
        "update the counts incrementally",
    ),
    Wrong(
        "train_bpe",
        "visits every word at each merge to find those with the pair (right merges)",
        SCAN,
        "not with the corpus",
    ),
    Wrong("apply_merges", "one pass over the merges in rank order", ONE_PASS, "that is one pass over the merges"),
]
