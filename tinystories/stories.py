"""Read TinyStories files story by story without loading them whole (the V2 train file is 2.2 GB).

Stories are separated by ``<|endoftext|>``. The file is read in blocks of bytes and split on the
separator's bytes, so a separator cut in two by a block boundary, or a UTF-8 character cut in two, is
still found whole. Each story is decoded (invalid UTF-8 becomes U+FFFD rather than stopping a long
run), stripped, and skipped when empty. The full V2 files begin and end in the middle of a story:
``drop_partial=True`` drops the text before the first separator and after the last one.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from tqdm.auto import tqdm

SEPARATOR = "<|endoftext|>"
_SEP = SEPARATOR.encode()


def iter_stories(path: str | Path, *, drop_partial: bool, block_bytes: int = 1 << 24,
                 progress: bool = True) -> Iterator[str]:
    """The stories of the file at ``path``, in order, stripped, empty ones skipped; tqdm over bytes if ``progress``."""
    if block_bytes < 1:
        raise ValueError(f"block_bytes must be at least 1, not {block_bytes}")
    path = Path(path)
    pending = bytearray()  # bytes read and not yet yielded: the start of the story being read
    first = True  # the piece before the first separator
    with path.open("rb") as data, tqdm(total=path.stat().st_size, unit="B", unit_scale=True, desc=path.name,
                                       disable=not progress) as bar:
        while block := data.read(block_bytes):
            bar.update(len(block))
            search = max(0, len(pending) - len(_SEP) + 1)  # a separator may begin in the previous block
            pending += block
            done = 0
            while (found := pending.find(_SEP, search)) >= 0:
                if not (first and drop_partial):
                    yield from _story(pending[done:found])
                first = False
                done = search = found + len(_SEP)
            del pending[:done]
    if not drop_partial:  # the text after the last separator (or the whole file when it has none)
        yield from _story(pending)


def _story(raw: bytes | bytearray) -> Iterator[str]:
    text = raw.decode("utf-8", errors="replace").strip()
    if text:
        yield text


def iter_story_batches(path: str | Path, *, drop_partial: bool, batch_stories: int = 1024,
                       progress: bool = True) -> Iterator[list[str]]:
    """``iter_stories`` in lists of ``batch_stories`` (the last one shorter), for batched tokenizers."""
    if batch_stories < 1:
        raise ValueError(f"batch_stories must be at least 1, not {batch_stories}")
    batch: list[str] = []
    for story in iter_stories(path, drop_partial=drop_partial, progress=progress):
        batch.append(story)
        if len(batch) == batch_stories:
            yield batch
            batch = []
    if batch:
        yield batch


def count_bytes(stories: Iterable[str]) -> int:
    """UTF-8 bytes of ``stories`` (the denominator of bits per byte)."""
    return sum(len(story.encode("utf-8")) for story in stories)
