"""Wrong versions of notebook 12's answers (12_bpe): see ``wrong/__init__.py``."""

from autograder.notebooks.nb12_bpe import APPLY, COUNT_PAIRS, MERGE_WORD, PRETOKENIZE, STREAM, TOKENIZER, TRAIN
from wrong import WrongVersion, edit

_SAYS_UPDATE_THE_COUNTS = "update the counts incrementally"
_SAYS_LOWEST_RANK = "LOWEST rank"

# pretokenize ---------------------------------------------------------------------------------------------------
_PARTS = 'parts = re.split("(" + "|".join(map(re.escape, specials)) + ")", text)'

# count_pairs ---------------------------------------------------------------------------------------------------
_FOR_PAIR_IN = "for pair in zip(word, word[1:], strict=False):"

# merge_word ----------------------------------------------------------------------------------------------------

# train_bpe -----------------------------------------------------------------------------------------------------
_BEST = "best = max(pair_counts, key=lambda pair: (pair_counts[pair], pair))  # ties: the greatest pair"
_FOR_PIECE_IN = "for piece in pretokenize(text, special_tokens) if piece not in specials)"
_WORDS_WITH_PAIR_ADD = "                words_with[pair].add(new)\n"
_DEF_TRAIN_BPE = 'def train_bpe(text: str, vocab_size: int, special_tokens=("<|endoftext|>",)):\n'
_FOR_WORD_IN = """\
        for word in words_with.pop(best):
            count = word_counts.pop(word)
            new = merge_word(word, best)
            word_counts[new] += count
            for pair in zip(word, word[1:], strict=False):
                pair_counts[pair] -= count
                if pair_counts[pair] == 0:
                    del pair_counts[pair]
                if pair != best:
                    words_with[pair].discard(word)
            for pair in zip(new, new[1:], strict=False):
                pair_counts[pair] = pair_counts.get(pair, 0) + count
                words_with[pair].add(new)
"""
_WORDS_WITH = """\
    words_with = defaultdict(set)
    for word in word_counts:
        for pair in zip(word, word[1:], strict=False):
            words_with[pair].add(word)
"""
_NEW_X = ""
_NEW_DEF_TRAIN_BPE = """\

def train_bpe(text, vocab_size, special_tokens=("<|endoftext|>",)):
"""
_NEW_BEST = "best = max(pair_counts, key=lambda pair: (pair_counts[pair], pair))"

# apply_merges --------------------------------------------------------------------------------------------------

# bpe_tokenizer -------------------------------------------------------------------------------------------------
_RETURN_B_JOIN = 'return b"".join(self.vocab[i] for i in ids).decode("utf-8", errors="replace")'
_TOKENIZER_FOR_PIECE_IN = "for piece in pretokenize(text, self.special_tokens):"

# encode_iterable -----------------------------------------------------------------------------------------------
_FOR_SPECIAL_IN = "for special in self.special_tokens:"
_STREAM_FOR_PIECE_IN = "for piece in pieces[:-2]:  # finished: more text cannot change them"
_BUFFER = 'buffer = "".join(pieces[-2:]) + buffer[len(buffer) - keep:]'

WRONG_VERSIONS = (
    # pretokenize
    WrongVersion(
        PRETOKENIZE,
        "special tokens dropped (no capturing group)",
        "is not in the result",
        edit(_PARTS, 'parts = re.split("|".join(map(re.escape, specials)), text)'),
        edit(
            "if i % 2:  # re.split puts the captured separators at the odd positions",
            "if False:  # re.split puts the captured separators at the odd positions",
        ),
    ),
    WrongVersion(
        PRETOKENIZE,
        "no special-token split: the regex cuts <|endoftext|>",
        "cut the special token",
        edit("if not special_tokens:", "if True:"),
    ),
    WrongVersion(
        PRETOKENIZE,
        "special tokens not escaped",
        "pretokenize(",
        edit(_PARTS, 'parts = re.split("(" + "|".join(specials) + ")", text)'),
    ),
    WrongVersion(
        PRETOKENIZE,
        "specials not sorted longest first",
        "the longest special token first",
        edit("specials = sorted(special_tokens, key=len, reverse=True)", "specials = list(special_tokens)"),
    ),
    WrongVersion(
        PRETOKENIZE,
        "whitespace split instead of GPT-2's regex",
        "GPT-2's pattern",
        edit("pieces.extend(PRETOKEN.findall(part))", "pieces.extend(re.findall(r'\\S+|\\s+', part))"),
    ),
    # count_pairs
    WrongVersion(
        COUNT_PAIRS,
        "pairs of count 0 kept (words of frequency 0)",
        "with count 0",
        edit(
            "return {pair: n for pair, n in counts.items() if n > 0}  # words of frequency 0 count nothing",
            "return dict(counts)  # words of frequency 0 count nothing",
        ),
    ),
    WrongVersion(
        COUNT_PAIRS,
        "frequencies ignored",
        "ignores the words' frequencies",
        edit("counts[pair] += n", "counts[pair] += 1"),
    ),
    WrongVersion(
        COUNT_PAIRS,
        "a pair counted once per word",
        "once per word",
        edit(_FOR_PAIR_IN, "for pair in set(zip(word, word[1:], strict=False)):"),
    ),
    WrongVersion(
        COUNT_PAIRS,
        "the last pair of each word missed",
        "has count",
        edit(_FOR_PAIR_IN, "for pair in zip(word[:-1], word[1:-1], strict=False):"),
    ),
    # merge_word
    WrongVersion(
        MERGE_WORD,
        "overlapping occurrences merged (no skip after a merge)",
        "no longer spell",
        edit("i += 2", "i += 1"),
    ),
    WrongVersion(
        MERGE_WORD,
        "only the first occurrence merged",
        "every occurrence",
        code="""\
def merge_word(word, pair):
    for i in range(len(word) - 1):
        if word[i] == pair[0] and word[i + 1] == pair[1]:
            return word[:i] + (word[i] + word[i + 1],) + word[i + 2:]
    return tuple(word)
""",
    ),
    WrongVersion(
        MERGE_WORD,
        "scans right to left",
        "left to right",
        code="""\
def merge_word(word, pair):
    merged, i = [], len(word) - 1
    while i >= 0:
        if i > 0 and word[i - 1] == pair[0] and word[i] == pair[1]:
            merged.insert(0, word[i - 1] + word[i])
            i -= 2
        else:
            merged.insert(0, word[i])
            i -= 1
    return tuple(merged)
""",
    ),
    WrongVersion(MERGE_WORD, "returns a list", "expected a tuple", edit("return tuple(merged)", "return merged")),
    # train_bpe
    WrongVersion(
        TRAIN,
        "ties to the least pair",
        "a tie",
        edit(_BEST, "best = min(pair_counts, key=lambda pair: (-pair_counts[pair], pair))"),
    ),
    WrongVersion(
        TRAIN,
        "ties to the first pair seen",
        "a tie",
        edit(_BEST, "best = max(pair_counts, key=lambda pair: pair_counts[pair])"),
    ),
    WrongVersion(
        TRAIN,
        "stale counts: never updated after a merge",
        "not the most frequent",
        edit(
            "        vocab[len(vocab)] = best[0] + best[1]\n",
            """\
        vocab[len(vocab)] = best[0] + best[1]
        del pair_counts[best]
""",
        ),
        edit(
            """\
                pair_counts[pair] -= count
                if pair_counts[pair] == 0:
                    del pair_counts[pair]
""",
            _NEW_X,
        ),
        edit("pair_counts[pair] = pair_counts.get(pair, 0) + count", "pair_counts.setdefault(pair, 0)"),
    ),
    WrongVersion(
        TRAIN,
        "merges across the special token (specials not split out)",
        "never occurs inside a pre-token",
        edit(_FOR_PIECE_IN, "for piece in pretokenize(text, ()) if piece not in specials)"),
    ),
    WrongVersion(
        TRAIN,
        "merges across pre-token boundaries (the whole text is one word)",
        "never occurs inside a pre-token",
        edit(_FOR_PIECE_IN, "for piece in text.split('<|endoftext|>') if piece)"),
    ),
    WrongVersion(
        TRAIN,
        "specials after the merges",
        "right after the 256 bytes",
        edit(
            """\
    for token in special_tokens:
        vocab[len(vocab)] = token.encode("utf-8")
""",
            _NEW_X,
        ),
        edit(
            _WORDS_WITH_PAIR_ADD,
            """\
                words_with[pair].add(new)
    for token in special_tokens:
        vocab[len(vocab)] = token.encode("utf-8")
""",
        ),
    ),
    WrongVersion(
        TRAIN,
        "vocab_size counts only the merges",
        "merges, expected",
        edit("while len(vocab) < vocab_size and pair_counts:", "while len(merges) < vocab_size - 256 and pair_counts:"),
    ),
    # Right results, wrong way (last, so that the nbgrader class's wrong student is not a slow one):
    WrongVersion(
        TRAIN,
        "recounts every pair and merges every word at each step (right merges)",
        _SAYS_UPDATE_THE_COUNTS,
        edit(_DEF_TRAIN_BPE, _NEW_DEF_TRAIN_BPE),
        edit(
            """\
    pair_counts = count_pairs(word_counts)
    words_with = defaultdict(set)
    for word in word_counts:
        for pair in zip(word, word[1:], strict=False):
            words_with[pair].add(word)
""",
            _NEW_X,
        ),
        edit(
            """\
    while len(vocab) < vocab_size and pair_counts:
        best = max(pair_counts, key=lambda pair: (pair_counts[pair], pair))  # ties: the greatest pair
""",
            """\
    while len(vocab) < vocab_size:
        pair_counts = count_pairs(word_counts)
        if not pair_counts:
            break
        best = max(pair_counts, key=lambda pair: (pair_counts[pair], pair))
""",
        ),
        edit(
            _FOR_WORD_IN,
            """\
        merged = Counter()
        for word, count in word_counts.items():
            merged[merge_word(word, best)] += count
        word_counts = merged
""",
        ),
    ),
    WrongVersion(
        TRAIN,
        "count_pairs once, then every pair recounted with its own loops (right merges)",
        _SAYS_UPDATE_THE_COUNTS,
        edit(_DEF_TRAIN_BPE, _NEW_DEF_TRAIN_BPE),
        edit(_WORDS_WITH, _NEW_X),
        edit(_BEST, _NEW_BEST),
        edit(
            """\
        for word in words_with.pop(best):
            count = word_counts.pop(word)
            new = merge_word(word, best)
            word_counts[new] += count
""",
            """\
        merged = Counter()
        for word, count in word_counts.items():
            merged[merge_word(word, best) if best[0] in word else word] += count
        word_counts = merged
        pair_counts = defaultdict(int)
        for word, count in word_counts.items():
""",
        ),
        edit(
            """\
                pair_counts[pair] -= count
                if pair_counts[pair] == 0:
                    del pair_counts[pair]
                if pair != best:
                    words_with[pair].discard(word)
            for pair in zip(new, new[1:], strict=False):
                pair_counts[pair] = pair_counts.get(pair, 0) + count
                words_with[pair].add(new)
""",
            "                pair_counts[pair] += count\n",
        ),
    ),
    WrongVersion(
        TRAIN,
        "recounts through aliases of count_pairs and merge_word taken at definition (right merges)",
        _SAYS_UPDATE_THE_COUNTS,
        edit(
            _DEF_TRAIN_BPE,
            """\

_count = count_pairs
_merge = merge_word

def train_bpe(text, vocab_size, special_tokens=("<|endoftext|>",)):
""",
        ),
        edit(_WORDS_WITH, _NEW_X),
        edit(_BEST, _NEW_BEST),
        edit(
            _FOR_WORD_IN,
            """\
        word_counts = {_merge(w, best): n for w, n in word_counts.items()}
        pair_counts = _count(word_counts)
""",
        ),
    ),
    WrongVersion(
        TRAIN,
        "visits every word at each merge to find those with the pair (right merges)",
        "not with the corpus",
        edit(_DEF_TRAIN_BPE, _NEW_DEF_TRAIN_BPE),
        edit(_WORDS_WITH, _NEW_X),
        edit(_BEST, _NEW_BEST),
        edit(
            "        for word in words_with.pop(best):\n",
            """\
        touched = [w for w in word_counts if best in zip(w, w[1:], strict=False)]
        for word in touched:
""",
        ),
        edit(
            """\
                if pair != best:
                    words_with[pair].discard(word)
""",
            _NEW_X,
        ),
        edit(_WORDS_WITH_PAIR_ADD, _NEW_X),
    ),
    # apply_merges
    WrongVersion(
        APPLY,
        "the highest rank first",
        _SAYS_LOWEST_RANK,
        edit(
            """\
        best = min(zip(tokens, tokens[1:], strict=False), key=lambda pair: ranks.get(pair, float("inf")))
        if best not in ranks:
""",
            """\
        best = min(zip(tokens, tokens[1:], strict=False), key=lambda pair: -ranks.get(pair, -1))
        if best not in ranks or ranks[best] < 0:
""",
        ),
    ),
    WrongVersion(
        APPLY,
        "the leftmost pair that has a rank, whatever its rank",
        _SAYS_LOWEST_RANK,
        edit(
            'best = min(zip(tokens, tokens[1:], strict=False), key=lambda pair: ranks.get(pair, float("inf")))',
            "best = next((p for p in zip(tokens, tokens[1:], strict=False) if p in ranks), (None, None))",
        ),
    ),
    WrongVersion(
        APPLY,
        "one pass over the merges, first occurrence only",
        "expected",
        code="""\
def apply_merges(piece, ranks):
    tokens = [bytes([b]) for b in piece]
    for pair in sorted(ranks, key=ranks.get):
        for i in range(len(tokens) - 1):
            if (tokens[i], tokens[i + 1]) == pair:
                tokens[i:i + 2] = [pair[0] + pair[1]]
                break
    return tokens
""",
    ),
    WrongVersion(
        APPLY,
        "the merges taken in the order of the dict's keys, not by their rank values",
        "not its place in the dict",
        code="""\
def apply_merges(piece, ranks):
    tokens = tuple(bytes([b]) for b in piece)
    for pair in ranks:
        tokens = merge_word(tokens, pair)
    return list(tokens)
""",
    ),
    WrongVersion(
        APPLY,
        "only the pairs present at the start, in rank order (pairs made by merges never merged)",
        _SAYS_LOWEST_RANK,
        code="""\
def apply_merges(piece, ranks):
    tokens = tuple(bytes([b]) for b in piece)
    present = sorted({pair for pair in zip(tokens, tokens[1:]) if pair in ranks}, key=ranks.get)
    for pair in present:
        tokens = merge_word(tokens, pair)
    return list(tokens)
""",
    ),
    WrongVersion(
        APPLY,
        "the lowest-rank pair merged once, not again and again",
        _SAYS_LOWEST_RANK,
        code="""\
def apply_merges(piece, ranks):
    tokens = tuple(bytes([b]) for b in piece)
    present = [pair for pair in zip(tokens, tokens[1:]) if pair in ranks]
    if present:
        tokens = merge_word(tokens, min(present, key=ranks.get))
    return list(tokens)
""",
    ),
    # bpe_tokenizer
    WrongVersion(
        TOKENIZER,
        "bytes decoded per token",
        "decode once",
        edit(_RETURN_B_JOIN, 'return "".join(self.vocab[i].decode("utf-8", errors="replace") for i in ids)'),
    ),
    WrongVersion(
        TOKENIZER,
        "special tokens forgotten in encode",
        "must become its own id",
        edit(_TOKENIZER_FOR_PIECE_IN, "for piece in pretokenize(text, ()):"),
    ),
    WrongVersion(
        TOKENIZER,
        "only <|endoftext|> set aside",
        "<|pad|> must become",
        edit(_TOKENIZER_FOR_PIECE_IN, 'for piece in pretokenize(text, ["<|endoftext|>"]):'),
    ),
    WrongVersion(
        TOKENIZER,
        "a special token's id guessed as 256 + its position",
        "not 256 + its position",
        edit(
            'token_ids.append(self.ids[piece.encode("utf-8")])',
            "token_ids.append(256 + self.special_tokens.index(piece))",
        ),
    ),
    WrongVersion(
        TOKENIZER, "a cache filled but never read", "were not reused", edit("if piece not in self.cache:", "if True:")
    ),
    WrongVersion(
        TOKENIZER,
        "a cache made inside encode, lost after each call",
        "a cache made inside encode",
        edit(
            "        token_ids = []\n",
            """\
        token_ids = []
        self.cache = {}
""",
        ),
    ),
    WrongVersion(
        TOKENIZER,
        "decode with errors='ignore'",
        "errors='replace'",
        edit(_RETURN_B_JOIN, 'return b"".join(self.vocab[i] for i in ids).decode("utf-8", errors="ignore")'),
    ),
    WrongVersion(
        TOKENIZER,
        "merges applied in reverse order",
        "gave",
        edit(
            "self.ranks = {pair: rank for rank, pair in enumerate(merges)}",
            "self.ranks = {pair: -rank for rank, pair in enumerate(merges)}",
        ),
    ),
    # encode_iterable
    WrongVersion(
        STREAM,
        "reads the whole input first (not lazy)",
        "it is not lazy",
        edit(
            '    """Yield the ids of "".join(lines), reading `lines` (any iterable of str) one chunk at a time.\n\n    The ids are those of self.encode("".join(lines)) for any chunking. Held back at any moment: at most the\n    last two pre-tokens, the beginning of a special token, and the chunk just read.\n    """\n    buffer = ""\n    for chunk in lines:\n        buffer += chunk\n        keep = 0  # the length of the longest end of the buffer that may still become a special token\n        for special in self.special_tokens:\n            for k in range(min(len(special) - 1, len(buffer)), keep, -1):\n                if special.startswith(buffer[len(buffer) - k:]):\n                    keep = k\n                    break\n        pieces = pretokenize(buffer[:len(buffer) - keep], self.special_tokens)\n        for piece in pieces[:-2]:  # finished: more text cannot change them\n            yield from self.encode(piece)\n        buffer = "".join(pieces[-2:]) + buffer[len(buffer) - keep:]\n    yield from self.encode(buffer)\n\n\nTokenizer.encode_iterable = encode_iterable  # from now on a method of every Tokenizer\n',
            "    yield from self.encode(''.join(lines))\n",
        ),
    ),
    WrongVersion(
        STREAM,
        "each chunk encoded on its own",
        "encodes each chunk on its own",
        code="""\
def encode_iterable(self, lines):
    for line in lines:
        yield from self.encode(line)
""",
    ),
    WrongVersion(
        STREAM, "what is left at the end is dropped", "never came out", edit("    yield from self.encode(buffer)\n", "")
    ),
    WrongVersion(
        STREAM,
        "a special token cut by a chunk boundary is not held back",
        "beginning of a special token",
        edit(_FOR_SPECIAL_IN, "for special in ():"),
    ),
    WrongVersion(
        STREAM,
        "only the last pre-token held back",
        "Hold back the last TWO pre-tokens",
        edit(_STREAM_FOR_PIECE_IN, "for piece in pieces[:-1]:  # finished: more text cannot change them"),
        edit(_BUFFER, 'buffer = "".join(pieces[-1:]) + buffer[len(buffer) - keep:]'),
    ),
    WrongVersion(
        STREAM,
        "the finished pre-tokens encoded joined together",
        "Encode each finished pre-token on its own",
        edit(
            """\
        for piece in pieces[:-2]:  # finished: more text cannot change them
            yield from self.encode(piece)
""",
            "        yield from self.encode(''.join(pieces[:-2]))\n",
        ),
    ),
    WrongVersion(
        STREAM,
        "the set-aside beginning of a special token dropped when the input ends",
        "set aside as a possible beginning of a special token and never came out",
        edit('buffer = ""', 'buffer, aside = "", ""'),
        edit("buffer += chunk", "buffer += aside + chunk"),
        edit(_BUFFER, 'aside, buffer = buffer[len(buffer) - keep:], "".join(pieces[-2:])'),
    ),
    WrongVersion(
        STREAM,
        "the set-aside looks only at <|endoftext|>",
        "must look at every special token the tokenizer was given",
        edit(_FOR_SPECIAL_IN, 'for special in ["<|endoftext|>"]:'),
    ),
    WrongVersion(
        STREAM,
        "reads one chunk ahead (encodes a chunk once the next one is read)",
        "reads one chunk ahead",
        edit(
            '    buffer = ""\n',
            """\
    buffer = ""
    previous = None
""",
        ),
        edit(
            "        buffer += chunk\n",
            """\
        if previous is None:
            previous = chunk
            continue
        buffer, previous = buffer + previous, chunk
""",
        ),
        edit("yield from self.encode(buffer)", "yield from self.encode(buffer + (previous or ''))"),
    ),
    WrongVersion(
        STREAM,
        "holds back three pre-tokens",
        "holds back more than the last two pre-tokens",
        edit(_STREAM_FOR_PIECE_IN, "for piece in pieces[:-3]:  # finished: more text cannot change them"),
        edit(_BUFFER, 'buffer = "".join(pieces[-3:]) + buffer[len(buffer) - keep:]'),
    ),
    WrongVersion(
        STREAM,
        "a story at a time: waits for <|endoftext|>",
        "held back",
        code="""\
def encode_iterable(self, lines):
    buffer = ''
    for chunk in lines:
        buffer += chunk
        *stories, buffer = buffer.split('<|endoftext|>')
        for story in stories:
            yield from self.encode(story)
            yield self.encode('<|endoftext|>')[0]
    yield from self.encode(buffer)
""",
    ),
)
