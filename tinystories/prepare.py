"""Data for a run: a byte-level BPE tokenizer trained on the stories, and the stories as uint16 tokens.

``prepare(config.data)`` writes, in ``data.dir/<source>-v<vocab>-<key>/``: ``tokenizer.json`` (Hugging
Face ``tokenizers``), ``train.bin`` and ``val.bin`` (each story's ids then ``<|endoftext|>``, uint16,
read back as ``np.memmap``) and ``stats.json`` (stories, tokens, bytes, bytes per token, for bits per
byte). The key hashes the source, the vocabulary size and the input files' sizes, so a second call
reuses the files and a new vocabulary gets its own folder. stats.json is written last: a folder
without it is unfinished and is rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import os
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


@dataclass
class PreparedData:
    """The prepared files; vocab_size is the tokenizer's (at most data.vocab_size on a small text)."""

    train: Path
    val: Path
    tokenizer: Path
    vocab_size: int
    eot_id: int
    stats: dict


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


def _folder_name(source: str, vocab_size: int, key: str) -> str:
    return f"{source}-v{vocab_size}-{key}"


def prepared_folders(data_config) -> list[Path]:
    """The finished data folders for ``data_config``'s source and vocabulary, without reading or downloading the
    text (whose sizes make the key): what preflight reports; ``prepare`` picks the one that fits the text."""
    folder = Path(data_config.dir)
    if not folder.is_dir():
        return []
    pattern = _folder_name(data_config.source, data_config.vocab_size, "*")
    return sorted(stats.parent for stats in folder.glob(f"{pattern}/stats.json"))


def load_tokens(path: Path) -> np.memmap:
    return np.memmap(path, dtype=np.uint16, mode="r")


def prepare(data_config, *, progress: bool = True) -> PreparedData:
    """Tokenizer and token files for ``data_config`` (source, vocab_size, dir), built once and cached."""
    if data_config.vocab_size >= 65536:
        raise RunError(f"data.vocab_size {data_config.vocab_size} does not fit uint16 tokens (< 65536)")
    files, source = _sources(data_config.source)
    sizes = {name: path.stat().st_size for name, (path, _) in files.items()}
    key = hashlib.sha256(json.dumps([source, data_config.vocab_size, sizes], sort_keys=True).encode()).hexdigest()[:10]
    folder = Path(data_config.dir) / _folder_name(source, data_config.vocab_size, key)
    stats_path = folder / "stats.json"
    result = PreparedData(folder / "train.bin", folder / "val.bin", folder / "tokenizer.json",
                          data_config.vocab_size, 0, {})
    if stats_path.is_file():
        stats = json.loads(stats_path.read_text())
        result.eot_id, result.stats, result.vocab_size = stats["eot_id"], stats, stats["vocab_size"]
        return result
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise RunError(f"cannot create the data directory {folder}: {error.strerror}") from None

    if source == "sample":
        path, drop = files["sample"]
        stories = [s for batch in _story_batches(path, drop_partial=drop, progress=False) for s in batch]
        cut = len(stories) - max(1, int(len(stories) * VAL_FRACTION))
        train, val = stories[:cut], stories[cut:]
        train_batches = lambda: (train[i:i + 1024] for i in range(0, len(train), 1024))  # noqa: E731
        val_batches = lambda: (val[i:i + 1024] for i in range(0, len(val), 1024))  # noqa: E731
    else:
        train_batches = lambda: _story_batches(files["train"][0], drop_partial=True, progress=progress)  # noqa: E731
        val_batches = lambda: _story_batches(files["val"][0], drop_partial=True, progress=progress)  # noqa: E731

    if progress:
        print(f"Training a {data_config.vocab_size}-token byte-level BPE on the {source} training stories ...")
    tokenizer = _train_tokenizer(train_batches(), data_config.vocab_size)
    eot_id = tokenizer.token_to_id(EOT)
    vocab = tokenizer.get_vocab_size()
    if vocab < data_config.vocab_size:
        # A small text (the shipped sample) has fewer distinct merges than asked: the model keeps
        # data.vocab_size rows (a few are never used), so its size and speed do not depend on the text.
        print(f"Note: the {source} text gives only {vocab} BPE tokens (data.vocab_size is {data_config.vocab_size}).")
    tokenizer.save(str(result.tokenizer))
    stats = {"source": source, "vocab_size": vocab, "eot_id": eot_id,
             "train": _encode(tokenizer, train_batches(), result.train, eot_id, progress=progress, desc="train"),
             "val": _encode(tokenizer, val_batches(), result.val, eot_id, progress=progress, desc="val")}
    tmp = stats_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(stats, indent=1))
    os.replace(tmp, stats_path)
    result.eot_id, result.stats, result.vocab_size = eot_id, stats, vocab
    return result
