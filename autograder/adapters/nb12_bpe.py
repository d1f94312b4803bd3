"""Adapters for notebook 12: pre-tokenization, pair counts, merges, BPE training, encoding and decoding.

Replies must be plain data, so every ``bytes`` a student's function returns travels as its hex string (and
anything that is not ``bytes`` as ``"<not bytes: TYPE>"``, so that a check can say what came back). Each
exercise is graded on its own: while ``train_bpe`` runs, the notebook's ``pretokenize``, ``count_pairs`` and
``merge_word`` are the course's (``autograder.reference.bpe``); while the ``Tokenizer`` runs, its
``pretokenize`` and ``apply_merges`` are; the notebook's own are restored afterwards. ``encode_iterable`` runs
on the student's ``Tokenizer`` whose ``encode`` is the course's (on a stand-in where the constructor fails).
``train_bpe_work`` measures the trainer's work as the lines of Python it runs (``sys.settrace``), outside the
standard library, installed packages and the course's grading code, but counting the ``count_pairs`` and
``merge_word`` it is given.
"""

from __future__ import annotations

import re
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import regex

from autograder.adapters import given, need
from autograder.reference import bpe


def _hex(token) -> str:
    if isinstance(token, bytes | bytearray):
        return bytes(token).hex()
    return f"<not bytes: {type(token).__name__}>"


def _sequence(value, item) -> dict:
    """A list or tuple as ``{"items": [...]}``, anything else as ``{"type": name}``."""
    if isinstance(value, list | tuple):
        return {"items": [item(v) for v in value], "type": type(value).__name__}
    return {"items": None, "type": type(value).__name__}


def pretokenize_of(ns, text: str, special_tokens: list):
    out = need(ns, "pretokenize")(text, special_tokens)
    return _sequence(out, lambda s: s if isinstance(s, str) else f"<not str: {type(s).__name__}>")


def count_pairs_of(ns, word_counts: dict):
    out = need(ns, "count_pairs")(dict(word_counts))
    if not isinstance(out, dict):
        return {"pairs": None, "type": type(out).__name__}
    pairs = []
    for pair, n in out.items():
        ok = isinstance(pair, tuple) and len(pair) == 2
        pairs.append(
            [
                _hex(pair[0]) if ok else repr(pair)[:80],
                _hex(pair[1]) if ok else "",
                n if isinstance(n, int) else f"<not int: {type(n).__name__}>",
            ]
        )
    return {"pairs": pairs, "type": "dict"}


def merge_word_of(ns, word: tuple, pair: tuple):
    return _sequence(need(ns, "merge_word")(tuple(word), tuple(pair)), _hex)


def train_bpe_of(ns, text: str, vocab_size: int, special_tokens: list):
    with given(ns, pretokenize=bpe.pretokenize, count_pairs=bpe.count_pairs, merge_word=bpe.merge_word):
        result = need(ns, "train_bpe")(text, vocab_size, list(special_tokens))
    if not (isinstance(result, tuple | list) and len(result) == 2):
        return {"error": f"train_bpe returned a {type(result).__name__}, expected a tuple (vocab, merges)"}
    vocab, merges = result
    if not isinstance(vocab, dict):
        return {"error": f"vocab is a {type(vocab).__name__}, expected a dict[int, bytes]"}
    if not isinstance(merges, list | tuple):
        return {"error": f"merges is a {type(merges).__name__}, expected a list of (bytes, bytes) pairs"}
    return {
        "vocab": [[k if isinstance(k, int) else repr(k)[:40], _hex(v)] for k, v in vocab.items()],
        "merges": [
            [_hex(m[0]), _hex(m[1])] if isinstance(m, tuple | list) and len(m) == 2 else [repr(m)[:80], ""]
            for m in merges
        ],
    }


def _fast_pretokenize(text: str, special_tokens=("<|endoftext|>",)) -> list[str]:
    """The course's pre-tokens (``bpe.pretokenize``'s), found without a Python loop over the characters, so that
    the work ``train_bpe_work`` measures is the trainer's own."""
    specials = sorted(special_tokens, key=len, reverse=True)
    parts = re.split("(" + "|".join(map(re.escape, specials)) + ")", text) if specials else [text]
    pieces = []
    for i, part in enumerate(parts):
        pieces.extend([part] if i % 2 else regex.findall(bpe.GPT2_PATTERN, part))
    return pieces


def _counted_files():
    """Which source files' lines count as the trainer's work: every file but the standard library's, installed
    packages' and the course's own grading code; the course's ``count_pairs`` and ``merge_word``
    (``autograder.reference.bpe``), which the trainer is given, count too."""
    skip = {
        Path(p).resolve()
        for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *sysconfig.get_paths().values()}
        if p
    }
    skip.add(Path(__file__).resolve().parents[1])  # autograder/
    counted_file = str(Path(bpe.__file__).resolve())
    decided: dict = {}

    def counted(filename: str) -> bool:
        if filename not in decided:
            if filename == bpe.__file__ or filename == counted_file:
                decided[filename] = True
            elif filename.startswith("<frozen"):
                decided[filename] = False
            elif filename.startswith("<"):  # a cell (<cell 3>, <answer>, <ipython-input-...>), exec'd text
                decided[filename] = True
            else:
                path = Path(filename).resolve()
                decided[filename] = not any(path == root or root in path.parents for root in skip)
        return decided[filename]

    return counted


class TooMuchWork(Exception):
    """Raised inside ``train_bpe`` once it has run ``limit`` lines, so that a trainer far too slow stops."""


def _traced(function, *args, counted, limit: int, deadline: float):
    """``function(*args)`` with the lines of Python it runs in ``counted`` files counted (``sys.settrace``); a run
    stops with ``TooMuchWork`` past ``limit`` lines or the ``deadline``. Returns (result, lines, stopped, whether
    the tracer was still in place at the end: code that replaces it would hide its work)."""
    lines = 0

    def per_line(frame, event, arg):
        nonlocal lines
        if event == "line":
            lines += 1
            if lines > limit or (lines % 1000 == 0 and time.monotonic() > deadline):
                raise TooMuchWork
        return per_line

    def per_call(frame, event, arg):
        return per_line if counted(frame.f_code.co_filename) else None

    before, result, stopped = sys.gettrace(), None, False
    sys.settrace(per_call)
    try:
        result = function(*args)
        intact = sys.gettrace() is per_call
    except TooMuchWork:
        stopped, intact = True, True
    finally:
        sys.settrace(before)
    return result, lines, stopped, intact


def train_bpe_work(ns, text: str, vocab_sizes: list, special_tokens: list, limit: int, seconds: float) -> dict:
    """For each vocabulary size, ``train_bpe``'s merges and the lines of Python it ran (its own, in any cell or
    file of the student's, and the course's ``count_pairs``/``merge_word`` it is given; not the standard
    library's, nor the pre-tokenizer's), with how often it called ``count_pairs`` and ``merge_word``.
    A run stops at ``limit`` lines, or once the runs have taken ``seconds`` (``"stopped": True``)."""
    function = need(ns, "train_bpe")
    counted = _counted_files()
    deadline = time.monotonic() + seconds
    runs = []
    for vocab_size in vocab_sizes:
        calls = {"count_pairs": 0, "merge_word": 0}

        def counting(name, course_function, calls=calls):
            def counted_call(*args, **kwargs):
                calls[name] += 1
                return course_function(*args, **kwargs)

            return counted_call

        with given(
            ns,
            pretokenize=_fast_pretokenize,
            count_pairs=counting("count_pairs", bpe.count_pairs),
            merge_word=counting("merge_word", bpe.merge_word),
        ):
            result, lines, stopped, intact = _traced(
                function, text, vocab_size, list(special_tokens), counted=counted, limit=limit, deadline=deadline
            )
        if stopped:
            runs.append({"lines": lines, **calls, "merges": [], "tracing_intact": intact, "stopped": True})
            break
        merges = result[1] if isinstance(result, tuple | list) and len(result) == 2 else []
        merges = [
            [_hex(m[0]), _hex(m[1])] if isinstance(m, tuple | list) and len(m) == 2 else [repr(m)[:80], ""]
            for m in (merges if isinstance(merges, list | tuple) else [])
        ]
        runs.append({"lines": lines, **calls, "merges": merges, "tracing_intact": intact, "stopped": False})
    return {"runs": runs}


def apply_merges_of(ns, pieces: list, merges: list):
    ranks = {tuple(pair): rank for rank, pair in enumerate(merges)}
    return [_sequence(need(ns, "apply_merges")(bytes(piece), dict(ranks)), _hex) for piece in pieces]


def tokenizer_of(ns, vocab: dict, merges: list, special_tokens: list, texts: list, id_lists: list):
    """Encodings of ``texts``, decodings of those encodings and of ``id_lists``, and a second encode (cache)."""
    with given(ns, pretokenize=bpe.pretokenize, apply_merges=bpe.apply_merges):
        tokenizer = need(ns, "Tokenizer")(dict(vocab), [tuple(m) for m in merges], list(special_tokens))
        encoded = [tokenizer.encode(text) for text in texts]
        again = [tokenizer.encode(text) for text in texts]
        plain_ids = [list(ids) if isinstance(ids, list | tuple) else None for ids in encoded]
        decoded = [tokenizer.decode(ids) if ids is not None else None for ids in plain_ids]
        decoded_given = [tokenizer.decode(list(ids)) for ids in id_lists]
    return {
        "encoded": [_sequence(ids, lambda i: i if isinstance(i, int) else -1) for ids in encoded],
        "again": [list(ids) if isinstance(ids, list | tuple) else None for ids in again],
        "decoded": [d if isinstance(d, str) or d is None else f"<not str: {type(d).__name__}>" for d in decoded],
        "decoded_given": [d if isinstance(d, str) else f"<not str: {type(d).__name__}>" for d in decoded_given],
    }


def tokenizer_work(
    ns, vocab: dict, merges: list, special_tokens: list, piece: str, repeats: int, limit: int, seconds: float
) -> dict:
    """The lines of Python (counted as ``train_bpe_work`` counts them, the course's ``apply_merges`` included)
    that the student's ``Tokenizer`` runs to encode the pre-token ``piece``: a first time, again in a second call,
    and ``repeats`` times over in one call on a new tokenizer; and what the course's ``apply_merges`` runs for it
    alone. ``"stopped"``: a run went past ``limit`` lines or the ``seconds``."""
    counted = _counted_files()
    deadline = time.monotonic() + seconds
    ranks = {tuple(pair): rank for rank, pair in enumerate(merges)}
    _, merge_lines, _, _ = _traced(
        bpe.apply_merges, piece.encode("utf-8"), ranks, counted=counted, limit=limit, deadline=deadline
    )
    work = {"apply_merges": merge_lines, "stopped": False, "tracing_intact": True}
    with given(ns, pretokenize=_fast_pretokenize, apply_merges=bpe.apply_merges):
        make = need(ns, "Tokenizer")
        tokenizer = make(dict(vocab), [tuple(m) for m in merges], list(special_tokens))
        fresh = make(dict(vocab), [tuple(m) for m in merges], list(special_tokens))
        for name, encoder, text in (
            ("first", tokenizer, piece),
            ("again", tokenizer, piece),
            ("repeated", fresh, piece * repeats),
        ):
            _, lines, stopped, intact = _traced(encoder.encode, text, counted=counted, limit=limit, deadline=deadline)
            work[name] = lines
            work["stopped"] |= stopped
            work["tracing_intact"] &= intact
    return work


class ReadTooMuch(Exception):
    """Raised by an endless input after ``limit`` chunks, so that code that reads it all stops."""


def _course_encode(vocab: dict, merges: list, special_tokens: list):
    """The course's ``encode`` (the reference pre-tokenizer and ``apply_merges``), with a cache per text."""
    ids = {token: i for i, token in vocab.items()}
    ranks = {tuple(pair): rank for rank, pair in enumerate(merges)}
    cache = {}

    def encode(text: str) -> list:
        if text not in cache:
            out = []
            for piece in bpe.pretokenize(text, special_tokens):
                if piece in special_tokens:
                    out.append(ids[piece.encode("utf-8")])
                else:
                    out.extend(ids[t] for t in bpe.apply_merges(piece.encode("utf-8"), ranks))
            cache[text] = out
        return list(cache[text])

    return encode


class _CourseTokenizer:
    """Stands in for the student's Tokenizer when its constructor cannot run (Exercise 6 unfinished)."""

    def __init__(self, vocab, merges, special_tokens):
        self.vocab, self.merges, self.special_tokens = dict(vocab), list(merges), list(special_tokens)
        self.ranks = {pair: rank for rank, pair in enumerate(self.merges)}
        self.ids = {token: i for i, token in self.vocab.items()}
        self.cache = {}


def _streaming_tokenizer(ns, vocab, merges, special_tokens):
    """The student's Tokenizer with the course's ``encode`` (so Exercise 6 costs only itself), or a stand-in."""
    try:
        tokenizer = ns["Tokenizer"](dict(vocab), [tuple(m) for m in merges], list(special_tokens))
    except Exception:  # noqa: BLE001 - an unfinished Tokenizer: grade encode_iterable with the course's
        tokenizer = _CourseTokenizer(vocab, [tuple(m) for m in merges], special_tokens)
    tokenizer.encode = _course_encode(vocab, merges, special_tokens)
    return tokenizer


def _scratch_file(text: str):
    """``text`` in a temporary file, opened for reading: the grader's data folder may be out of the sandbox's
    sight, so the checks send the text and this side writes it (where the sandbox lets a process write)."""
    handle = tempfile.TemporaryFile("w+", encoding="utf-8", newline="")
    handle.write(text)
    handle.seek(0)
    return handle


def encode_iterable_of(
    ns,
    vocab: dict,
    merges: list,
    special_tokens: list,
    inputs: list,
    *,
    endless: bool = False,
    limit: int = 0,
    take: int = 0,
) -> list:
    """For each input (a list of chunks, or ``{"file_text": text}``: a real file holding ``text``, written to this
    process's scratch folder and read line by line), what ``encode_iterable``
    yielded and, for each id, how many chunks and how many bytes it had read when that id came out.

    ``endless``: each input's chunks are repeated forever (``ReadTooMuch`` after ``limit`` chunks), and only
    the first ``take`` ids are asked for.
    """
    function = need(ns, "encode_iterable")
    results = []
    with given(ns, pretokenize=bpe.pretokenize, apply_merges=bpe.apply_merges):
        for spec in inputs:
            tokenizer = _streaming_tokenizer(ns, vocab, merges, special_tokens)
            read = {"chunks": 0, "bytes": 0, "done": False}
            opened = _scratch_file(spec["file_text"]) if isinstance(spec, dict) else None

            def source(chunks=opened if opened is not None else spec, read=read):
                while True:
                    for chunk in chunks:
                        if endless and read["chunks"] >= limit:
                            raise ReadTooMuch
                        read["chunks"] += 1
                        read["bytes"] += len(chunk.encode("utf-8"))
                        yield chunk
                    if not endless:
                        break
                read["done"] = True

            ids, trace, error, kind = [], [], None, None
            try:
                out = function(tokenizer, source())
                kind = type(out).__name__
                iterator = iter(out)
                while not (endless and len(ids) >= take):
                    try:
                        i = next(iterator)
                    except StopIteration:
                        break
                    ids.append(i if isinstance(i, int) else -1)
                    trace.append([read["chunks"], read["bytes"], int(read["done"])])
                if hasattr(out, "close"):
                    out.close()
            except ReadTooMuch:
                error = "read too much"
            finally:
                if opened is not None:
                    opened.close()
            results.append({"ids": ids, "trace": trace, "type": kind, "error": error, "chunks": read["chunks"]})
    return results
