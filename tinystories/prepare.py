"""Data for a run: a byte-level BPE tokenizer trained on the stories, and the stories as uint16 tokens.

``prepare(config.data)`` writes, in ``data.dir/<source>-v<vocab>-<key>/``: ``tokenizer.json`` (Hugging
Face ``tokenizers``), ``train.bin`` and ``val.bin`` (each story's ids then ``<|endoftext|>``, uint16,
read back as ``np.memmap``) and ``stats.json`` (stories, tokens, bytes, bytes per token, for bits per
byte). The key hashes the source, the vocabulary size and the input files' sizes, so a second call
reuses the files and a new vocabulary gets its own folder. stats.json is written last: a folder
without it is unfinished and is rebuilt.

``data.tokenizer`` picks who tokenizes. ``fast`` (the default): Hugging Face ``tokenizers`` (Rust).
``yours``: notebook 12's ``train_bpe`` trains the BPE and its ``Tokenizer.encode_iterable`` streams the
stories through it, pure Python and slow (seconds on the shipped sample, about an hour of encoding for the
2.2 GB file: ``benchmarks/tokenizer_prepare.md``). Its folder is ``<source>-v<vocab>-yours-<key>``, the key hashing
your notebook-12 answer cells too, so the two tokenizers (or two versions of yours) never share data. Your
vocabulary and merges are saved as a Hugging Face ``tokenizer.json`` (byte-level BPE, the same ids: checked
on the validation stories before use), so training and sampling read it as they read the fast one. Where
yours is not started, fails its visible checks, cannot be loaded or saved, the fast one is used and
``PreparedData.origin`` says why.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from tinystories.errors import RunError

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "data" / "tinystories" / "tinystories_v2_sample.txt"
EOT = "<|endoftext|>"
VAL_FRACTION = 0.1  # of the sample's stories, the last ones
NB12 = "12_bpe"
NB12_EXERCISES = ("pretokenize", "count_pairs", "merge_word", "train_bpe", "apply_merges", "bpe_tokenizer",
                  "encode_iterable")
YOURS_TRAIN_CHARS = 10_000_000  # your train_bpe sees at most this much of the training stories (pure Python)
FAST = "fast (Hugging Face tokenizers)"


@dataclass
class PreparedData:
    """The prepared files; vocab_size is the tokenizer's (at most data.vocab_size on a small text)."""

    train: Path
    val: Path
    tokenizer: Path
    vocab_size: int
    eot_id: int
    stats: dict
    origin: str = FAST  # which tokenizer made the files: "fast (...)" or "yours (...)", and why


def _story_batches(path: Path, *, drop_partial: bool, progress: bool) -> Iterator[list[str]]:
    from tinystories.stories import iter_story_batches

    yield from iter_story_batches(path, drop_partial=drop_partial, progress=progress)


def _sources(source: str) -> tuple[dict, str]:
    """{"train": (path, drop_partial, slice) ...} and a one-word description of where the text came from."""
    if source == "tinystories_v2":
        try:
            from tinystories.download import DownloadUnavailable, fetch
        except ImportError as error:  # the download module is not installed in this checkout
            reason, fetch = f"no download module: {error}", None
        else:
            try:
                return {"train": (fetch("train"), True), "val": (fetch("valid"), True)}, "tinystories_v2"
            except DownloadUnavailable as error:
                reason = str(error)
        print(f"No internet ({reason}): training on the shipped sample {SAMPLE.relative_to(ROOT)} instead.")
    if not SAMPLE.is_file():
        raise RunError(f"the data file {SAMPLE} is missing (restore it with git checkout data/)")
    return {"sample": (SAMPLE, False)}, "sample"


def _train_tokenizer(batches, vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOT], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator((story for batch in batches for story in batch), trainer=trainer)
    return tokenizer


def _encode(tokenizer, batches, path: Path, eot_id: int, *, progress: bool, desc: str) -> dict:
    stories = tokens = n_bytes = 0
    with open(path, "wb") as out, tqdm(desc=desc, unit=" stories", disable=not progress) as bar:
        for batch in batches:
            ids = []
            for encoding in tokenizer.encode_batch(batch):
                ids.extend(encoding.ids)
                ids.append(eot_id)
            out.write(np.asarray(ids, dtype=np.uint16).tobytes())
            stories += len(batch)
            tokens += len(ids)
            n_bytes += sum(len(s.encode("utf-8")) for s in batch)
            bar.update(len(batch))
    return {"stories": stories, "tokens": tokens, "bytes": n_bytes,
            "bytes_per_token": n_bytes / max(tokens, 1)}


def _folder_name(source: str, vocab_size: int, tokenizer: str, key: str) -> str:
    return f"{source}-v{vocab_size}-{'yours-' if tokenizer == 'yours' else ''}{key}"


def prepared_folders(data_config) -> list[Path]:
    """The finished data folders for ``data_config``'s source, vocabulary and tokenizer, without reading or
    downloading the text (whose sizes make the key): what preflight reports; ``prepare`` picks the one that fits
    the text."""
    folder = Path(data_config.dir)
    if not folder.is_dir():
        return []
    tokenizer = getattr(data_config, "tokenizer", "fast")
    name = re.compile(re.escape(_folder_name(data_config.source, data_config.vocab_size, tokenizer, "")) + "[0-9a-f]+")
    return sorted(stats.parent for stats in folder.glob("*/stats.json") if name.fullmatch(stats.parent.name))


def load_tokens(path: Path) -> np.memmap:
    return np.memmap(path, dtype=np.uint16, mode="r")


def _stories_text(stories, limit: int) -> str:
    """The stories joined by <|endoftext|>, up to ``limit`` characters (whole stories)."""
    kept, size = [], 0
    for story in stories:
        if kept and size + len(story) > limit:
            break
        kept.append(story)
        size += len(story) + len(EOT)
    return EOT.join(kept)


@dataclass
class StudentBPE:
    """Notebook 12's ``train_bpe`` and ``Tokenizer`` (with ``encode_iterable``), and a hash of its answer cells."""

    train_bpe: object
    tokenizer_class: type
    path: Path
    code_hash: str


def _student_answers(course_dir) -> tuple[Path, str] | str:
    """(notebook 12's path, a hash of its answer cells), or why it cannot be used (missing, not started)."""
    from coursetools.notebook_import import answer_cells
    from coursetools.notebook_vocabulary import STUB_LINE, grade_id, is_stub_source
    from tinystories.stack import COURSE

    path = Path(course_dir or COURSE).resolve() / NB12 / f"{NB12}.ipynb"
    if not path.is_file():
        return f"no notebook {path}"
    cells = answer_cells(path)
    stubs = sorted(grade_id(c) for c in cells if is_stub_source(c.source))
    wanted = [e for e in stubs if e in NB12_EXERCISES]
    if wanted:
        return f"not started: {', '.join(wanted)} still say{'s' * (len(wanted) == 1)} {STUB_LINE}"
    return path, hashlib.sha256("\n".join(c.source for c in cells).encode()).hexdigest()[:10]


def _student_bpe(path: Path, code_hash: str, *, check: bool) -> StudentBPE | str:
    """Notebook 12's parts, after its visible checks (``check``), or why they cannot be used."""
    from tinystories.stack import load_from, visible_failures

    if check:
        failures = visible_failures(path, set(NB12_EXERCISES))
        if failures:
            exercise = next(e for e in NB12_EXERCISES if e in failures)
            return f"failing: {exercise}: {failures[exercise]}"
    try:
        loaded = load_from(path, ["train_bpe", "Tokenizer"])
    except Exception as error:  # noqa: BLE001 - any failure in the notebook is one line for the student
        return f"loading {path.name} raised {type(error).__name__}: {error}"
    if not callable(getattr(loaded["Tokenizer"], "encode_iterable", None)):
        return "its Tokenizer has no encode_iterable (run the line Tokenizer.encode_iterable = encode_iterable)"
    return StudentBPE(loaded["train_bpe"], loaded["Tokenizer"], path, code_hash)


def _as_hugging_face(vocab: dict, merges: list, eot_id: int):
    """The same byte-level BPE as a Hugging Face tokenizer (what tokenizer.json holds for training and sampling)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers.convert_slow_tokenizer import bytes_to_unicode  # GPT-2's byte -> character table, HF's own

    char = bytes_to_unicode()

    def printable(token: bytes) -> str:
        return "".join(char[b] for b in token)

    table = {printable(token): i for i, token in vocab.items() if i != eot_id}
    if len(table) != len(vocab) - 1:
        raise ValueError("two ids of the vocabulary have the same bytes")
    table[EOT] = eot_id
    tokenizer = Tokenizer(models.BPE(vocab=table, merges=[(printable(a), printable(b)) for a, b in merges]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([EOT])
    return tokenizer


def _train_yours(student: StudentBPE, train_stories, val_stories, vocab_size: int):
    """(your Tokenizer, the same as a Hugging Face tokenizer, eot id), or ValueError saying why not."""
    vocab, merges = student.train_bpe(_stories_text(train_stories, YOURS_TRAIN_CHARS), vocab_size)
    vocab, merges = dict(vocab), [tuple(m) for m in merges]
    ids = [i for i, token in vocab.items() if token == EOT.encode()]
    if len(ids) != 1:
        raise ValueError(f"its vocabulary holds {EOT} {len(ids)} times")
    if max(vocab) >= vocab_size or sorted(vocab) != list(range(len(vocab))):
        raise ValueError(f"its vocabulary's ids are not 0..{len(vocab) - 1} below data.vocab_size {vocab_size}")
    tokenizer = student.tokenizer_class(vocab, merges)
    hf = _as_hugging_face(vocab, merges, ids[0])
    probe = EOT.join(val_stories[:20]) + EOT
    if list(tokenizer.encode_iterable([probe])) != hf.encode(probe).ids:
        raise ValueError("tokenizer.json would encode the validation stories differently from your Tokenizer")
    return tokenizer, hf, ids[0]


def _encode_yours(tokenizer, batches, path: Path, *, progress: bool, desc: str) -> dict:
    """Your encode_iterable over the stories, each followed by <|endoftext|>, streamed to ``path``."""
    counts = {"stories": 0, "bytes": 0}

    def chunks():
        for batch in batches:
            for story in batch:
                counts["stories"] += 1
                counts["bytes"] += len(story.encode("utf-8"))
                bar.update(1)
                yield story
                yield EOT

    tokens, block = 0, []
    with open(path, "wb") as out, tqdm(desc=desc, unit=" stories", disable=not progress) as bar:
        for i in tokenizer.encode_iterable(chunks()):
            block.append(i)
            if len(block) == 1 << 16:
                out.write(np.asarray(block, dtype=np.uint16).tobytes())
                tokens, block = tokens + len(block), []
        out.write(np.asarray(block, dtype=np.uint16).tobytes())
        tokens += len(block)
    return {"stories": counts["stories"], "tokens": tokens, "bytes": counts["bytes"],
            "bytes_per_token": counts["bytes"] / max(tokens, 1)}


def _instead_of_yours(data_config, folder: Path, error: Exception, *, progress: bool) -> PreparedData:
    """The fast tokenizer's data, after your code raised ``error`` while building ``folder`` (removed)."""
    shutil.rmtree(folder, ignore_errors=True)
    fallback = prepare(dataclasses.replace(data_config, tokenizer="fast"), progress=progress)
    fallback.origin = f"{FAST}; yours is not used (it raised {type(error).__name__}: {error})"
    return fallback


def _tokenizer_choice(data_config, course_dir) -> tuple[str, str, Path | None, str | None]:
    """(choice, origin, notebook 12's path, its code's hash): "yours" only where its answers can be loaded."""
    choice = getattr(data_config, "tokenizer", "fast")
    if choice not in ("fast", "yours"):
        raise RunError(f"data.tokenizer must be fast or yours, got {choice!r}")
    if choice == "fast":
        return choice, FAST, None, None
    answers = _student_answers(course_dir)
    if isinstance(answers, str):
        return "fast", f"{FAST}; yours is not used ({answers})", None, None
    path, code_hash = answers
    return choice, f"yours (notebook 12 from {path}: train_bpe and Tokenizer.encode_iterable, pure Python)", path, code_hash


def _split(files: dict, source: str, progress: bool):
    """Two callables giving the training and the validation stories in batches (each call starts over)."""
    if source != "sample":
        return (lambda: _story_batches(files["train"][0], drop_partial=True, progress=progress),
                lambda: _story_batches(files["val"][0], drop_partial=True, progress=progress))
    path, drop = files["sample"]
    stories = [s for batch in _story_batches(path, drop_partial=drop, progress=False) for s in batch]
    cut = len(stories) - max(1, int(len(stories) * VAL_FRACTION))
    train, val = stories[:cut], stories[cut:]
    return (lambda: (train[i:i + 1024] for i in range(0, len(train), 1024)),
            lambda: (val[i:i + 1024] for i in range(0, len(val), 1024)))


def prepare(data_config, *, progress: bool = True, course_dir: str | Path | None = None,
            check: bool = True) -> PreparedData:
    """Tokenizer and token files for ``data_config`` (source, vocab_size, dir, tokenizer), built once and cached.

    ``data.tokenizer = "yours"`` takes notebook 12 from ``course_dir`` (default course/); ``check=False`` skips
    its visible checks (tests that know it is right). ``PreparedData.origin`` says which tokenizer was used.
    """
    if data_config.vocab_size >= 65536:
        raise RunError(f"data.vocab_size {data_config.vocab_size} does not fit uint16 tokens (< 65536)")
    choice, origin, path, code_hash = _tokenizer_choice(data_config, course_dir)
    files, source = _sources(data_config.source)
    sizes = {name: file.stat().st_size for name, (file, _) in files.items()}
    keyed = [source, data_config.vocab_size, sizes] + ([choice, code_hash] if choice == "yours" else [])
    key = hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()[:10]
    folder = Path(data_config.dir) / _folder_name(source, data_config.vocab_size, choice, key)
    stats_path = folder / "stats.json"
    result = PreparedData(folder / "train.bin", folder / "val.bin", folder / "tokenizer.json",
                          data_config.vocab_size, 0, {}, origin)
    if stats_path.is_file():
        stats = json.loads(stats_path.read_text())
        result.eot_id, result.stats, result.vocab_size = stats["eot_id"], stats, stats["vocab_size"]
        result.origin = stats.get("origin", origin) + f"; cached in {folder}"
        return result

    student = None
    if choice == "yours":
        student = _student_bpe(path, code_hash, check=check)
        if isinstance(student, str):
            fallback = prepare(dataclasses.replace(data_config, tokenizer="fast"), progress=progress)
            fallback.origin = f"{FAST}; yours is not used ({student})"
            return fallback
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise RunError(f"cannot create the data directory {folder}: {error.strerror}") from None
    train_batches, val_batches = _split(files, source, progress)
    built = _build(data_config, source, student, train_batches, val_batches, result, progress=progress)
    if isinstance(built, Exception):  # your train_bpe or encode_iterable raised: the fast tokenizer instead
        return _instead_of_yours(data_config, folder, built, progress=progress)
    stats = {"source": source, "tokenizer": choice, "origin": origin, **built}
    tmp = stats_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(stats, indent=1))
    os.replace(tmp, stats_path)
    result.eot_id, result.stats, result.vocab_size = stats["eot_id"], stats, stats["vocab_size"]
    return result


def _build(data_config, source: str, student, train_batches, val_batches, result: PreparedData, *,
           progress: bool) -> dict | Exception:
    """Train the tokenizer (yours: ``student``, or the fast one), save it and encode both splits: the stats, or
    the exception your code raised (the fast tokenizer's own errors propagate)."""
    if student is not None:
        if progress:
            print(f"Training a {data_config.vocab_size}-token byte-level BPE with your train_bpe (notebook 12, pure "
                  f"Python: slow) on the {source} training stories ...")
        first_val = next(iter(val_batches()), [])
        try:
            mine, tokenizer, eot_id = _train_yours(student, (s for b in train_batches() for s in b), first_val,
                                                   data_config.vocab_size)
        except Exception as error:  # noqa: BLE001 - your code: one line, then the fast tokenizer
            return error
        encode = lambda batches, out, desc: _encode_yours(mine, batches, out, progress=progress,  # noqa: E731
                                                          desc=desc)
    else:
        if progress:
            print(f"Training a {data_config.vocab_size}-token byte-level BPE on the {source} training stories ...")
        tokenizer = _train_tokenizer(train_batches(), data_config.vocab_size)
        eot_id = tokenizer.token_to_id(EOT)
        encode = lambda batches, out, desc: _encode(tokenizer, batches, out, eot_id,  # noqa: E731
                                                    progress=progress, desc=desc)
    vocab = tokenizer.get_vocab_size()
    if vocab < data_config.vocab_size:
        # A small text (the shipped sample) has fewer distinct merges than asked: the model keeps
        # data.vocab_size rows (a few are never used), so its size and speed do not depend on the text.
        print(f"Note: the {source} text gives only {vocab} BPE tokens (data.vocab_size is {data_config.vocab_size}).")
    tokenizer.save(str(result.tokenizer))
    try:
        return {"vocab_size": vocab, "eot_id": eot_id,
                "train": encode(train_batches(), result.train, "train"),
                "val": encode(val_batches(), result.val, "val")}
    except Exception as error:
        if student is None:
            raise
        return error  # your encode_iterable raised
