"""A slow, obviously correct byte-level BPE: the oracle for notebook 12's checks (and its tests).

Written differently from the notebook's solution on purpose: special tokens are found by scanning the
text position by position (longest first), every pair is recounted from scratch after every merge, and
encoding applies the merges one after another in the order they were learned (not by rank). Only the
GPT-2 pre-tokenizer regex is shared, because it is the convention itself.

Conventions (notebook 12): ids 0..255 are the bytes, then the special tokens in the order given, then the
merges in the order learned. Training merges the most frequent adjacent pair inside a pre-token; among
pairs of equal count, the lexicographically greatest ``(bytes_a, bytes_b)`` wins (``tie_break="greatest"``).
``tie_break="hf"`` is Hugging Face ``tokenizers``' rule instead (the pair of smallest ids in its own
vocabulary: specials, then the 256 byte characters sorted as Unicode, then merges), so that the tests can
show that this is the only difference in training between the two.
"""

from __future__ import annotations

import functools

import regex

GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def split_specials(text: str, special_tokens) -> list[tuple[bool, str]]:
    """``(is_special, piece)`` in order, found by a left-to-right scan; the longest special wins."""
    specials = sorted(set(special_tokens), key=len, reverse=True)
    pieces, plain, i = [], "", 0
    while i < len(text):
        found = None
        for special in specials:
            if special and text.startswith(special, i):
                found = special
                break
        if found is None:
            plain += text[i]
            i += 1
            continue
        if plain:
            pieces.append((False, plain))
            plain = ""
        pieces.append((True, found))
        i += len(found)
    if plain:
        pieces.append((False, plain))
    return pieces


def pretokenize(text: str, special_tokens=("<|endoftext|>",)) -> list[str]:
    """GPT-2's pre-tokens of the text between special tokens; the special tokens are items of their own."""
    out = []
    for special, piece in split_specials(text, special_tokens):
        if special:
            out.append(piece)
        else:
            out += regex.findall(GPT2_PATTERN, piece)
    return out


def word_counts(text: str, special_tokens=("<|endoftext|>",)) -> dict[tuple[bytes, ...], int]:
    """Each pre-token (special tokens left out) as a tuple of one-byte tokens, with its frequency."""
    counts: dict = {}
    for special, piece in split_specials(text, special_tokens):
        if special:
            continue
        for pre in regex.findall(GPT2_PATTERN, piece):
            word = tuple(bytes([b]) for b in pre.encode("utf-8"))
            counts[word] = counts.get(word, 0) + 1
    return counts


def count_pairs(counts: dict) -> dict[tuple[bytes, bytes], int]:
    pairs: dict = {}
    for word, n in counts.items():
        for i in range(len(word) - 1):
            pair = (word[i], word[i + 1])
            pairs[pair] = pairs.get(pair, 0) + n
    return pairs


def merge_word(word: tuple, pair: tuple[bytes, bytes]) -> tuple:
    """Every occurrence of ``pair`` replaced by one token, left to right, occurrences not overlapping."""
    out = []
    i = 0
    while i < len(word):
        if i < len(word) - 1 and word[i] == pair[0] and word[i + 1] == pair[1]:
            out.append(pair[0] + pair[1])
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's printable stand-in character for each byte (Hugging Face's ByteLevel alphabet)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def train(
    text: str,
    vocab_size: int,
    special_tokens=("<|endoftext|>",),
    *,
    tie_break: str = "greatest",
    steps: list | None = None,
):
    """``(vocab, merges)`` by naive recounting. ``steps``, when given, receives ``(pair, count, n_tied)``."""
    vocab, merges, taken = _train(text, vocab_size, tuple(special_tokens), tie_break)
    if steps is not None:
        steps.extend(taken)
    return dict(vocab), list(merges)


# The checks train on the same few texts again and again (each of notebook 12's exercises, and every wrong version
# in tests/wrong): the naive trainer is slow and pure, so its results are kept, and each caller gets copies.
@functools.lru_cache(maxsize=32)
def _train(text: str, vocab_size: int, special_tokens: tuple[str, ...], tie_break: str):
    vocab = {b: bytes([b]) for b in range(256)}
    for special in special_tokens:
        vocab[len(vocab)] = special.encode("utf-8")
    hf_ids = {}  # Hugging Face's ids, for tie_break="hf"
    for special in special_tokens:
        hf_ids[special.encode("utf-8")] = len(hf_ids)
    for _char, b in sorted((c, b) for b, c in bytes_to_unicode().items()):
        hf_ids[bytes([b])] = len(hf_ids)
    counts = word_counts(text, special_tokens)
    merges = []
    steps = []
    while len(vocab) < vocab_size:
        pairs = count_pairs(counts)
        if not pairs:
            break
        top = max(pairs.values())
        tied = [pair for pair, n in pairs.items() if n == top]
        if tie_break == "greatest":
            best = max(tied)
        else:
            best = min(tied, key=lambda pair: (hf_ids[pair[0]], hf_ids[pair[1]]))
        steps.append((best, top, len(tied)))
        merges.append(best)
        vocab[len(vocab)] = best[0] + best[1]
        hf_ids.setdefault(best[0] + best[1], len(hf_ids))
        counts = {merge_word(word, best): n for word, n in counts.items()}
    return vocab, tuple(merges), tuple(steps)


def encode(text: str, vocab: dict, merges: list, special_tokens=("<|endoftext|>",)) -> list[int]:
    """Each pre-token's bytes, with the merges applied one after another in the order learned."""
    ids = {token: i for i, token in vocab.items()}
    out = []
    for special, piece in split_specials(text, special_tokens):
        if special:
            out.append(ids[piece.encode("utf-8")])
            continue
        for pre in regex.findall(GPT2_PATTERN, piece):
            word = tuple(bytes([b]) for b in pre.encode("utf-8"))
            for pair in merges:
                if len(word) == 1:
                    break
                word = merge_word(word, pair)
            out += [ids[token] for token in word]
    return out


def decode(ids, vocab: dict) -> str:
    return b"".join(vocab[i] for i in ids).decode("utf-8", errors="replace")


def apply_merges(piece: bytes, ranks: dict) -> list[bytes]:
    """The tokens of one pre-token: every merge replayed in rank order (the course's stand-in in grading)."""
    word = tuple(bytes([b]) for b in piece)
    for pair in sorted(ranks, key=ranks.get):
        if len(word) < 2:
            break
        word = merge_word(word, pair)
    return list(word)
