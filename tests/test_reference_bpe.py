"""The slow reference BPE (the checks' oracle for notebook 12) against Hugging Face ``tokenizers``.

With Hugging Face's tie-break (the pair of smallest ids in its vocabulary), the reference trainer reproduces
every merge of HF's ``BpeTrainer`` fed the documents between the special tokens; so the course's and HF's
trainers differ only in how they break ties (and in HF counting special tokens' text when it is not split out).
The reference encoder (merges replayed in order) equals HF's encode with the same vocabulary and merges.
"""

from __future__ import annotations

import json

from notebooks import ROOT

from autograder.reference import bpe

EOT = "<|endoftext|>"
TEXT = (ROOT / "data" / "tinystories" / "tinystories_tiny.txt").read_text(encoding="utf-8")[:30_000]


def _hf(documents, vocab_size):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    hf = Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    hf.train_from_iterator(
        documents,
        trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=[EOT],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    to_byte = {c: b for b, c in bpe.bytes_to_unicode().items()}
    merges = [tuple(bytes(to_byte[c] for c in part) for part in m) for m in json.loads(hf.to_str())["model"]["merges"]]
    return hf, merges


def test_byte_alphabet_is_hugging_faces():
    from tokenizers import pre_tokenizers

    assert set(bpe.bytes_to_unicode().values()) == set(pre_tokenizers.ByteLevel.alphabet())


def test_reference_with_hf_tie_break_reproduces_hf_training():
    steps = []
    _, ours = bpe.train(TEXT, 600, (EOT,), steps=steps)
    _, hf_rule = bpe.train(TEXT, 600, (EOT,), tie_break="hf")
    _, theirs = _hf(TEXT.split(EOT), 600)
    assert hf_rule == theirs  # all 343 merges
    first_tie = next(k for k, (_, _, tied) in enumerate(steps) if tied > 1)
    assert ours[:first_tie] == theirs[:first_tie]
    assert ours != theirs  # the tie-break does differ on this text


def test_hf_counts_the_special_token_text_when_not_split_out():
    _, split = _hf(TEXT.split(EOT), 300)
    _, whole = _hf([TEXT], 300)
    assert split != whole


def test_reference_encoder_equals_rank_order_and_hf():
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab, merges = bpe.train(TEXT[:12_000], 420, (EOT,))
    ranks = {pair: r for r, pair in enumerate(merges)}
    char = bpe.bytes_to_unicode()
    hf = Tokenizer(
        models.BPE(
            vocab={"".join(char[b] for b in t): i for i, t in vocab.items() if i != 256},
            merges=[("".join(char[b] for b in a), "".join(char[b] for b in c)) for a, c in merges],
        )
    )
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    text = TEXT[12_000:16_000].replace(EOT, "") + " naïve 😀 日本語"
    ids = bpe.encode(text, vocab, merges, (EOT,))
    assert ids == hf.encode(text).ids
    assert bpe.decode(ids, vocab) == text
    for piece in {p.encode() for p in bpe.pretokenize(text)}:
        assert bpe.apply_merges(piece, ranks) == [vocab[i] for i in bpe.encode(piece.decode(), vocab, merges)]
