"""``tinystories.stories``: the streaming reader equals ``str.split`` on the whole text, for every block size."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from tinystories import stories as stories_module
from tinystories.stories import SEPARATOR, count_bytes, iter_stories, iter_story_batches

TINY = Path(__file__).resolve().parents[1] / "data" / "tinystories" / "tinystories_tiny.txt"

# Separators at the ends, side by side, whitespace-only and empty stories, look-alikes that are not
# separators, and multi-byte UTF-8 characters for block boundaries to fall inside.
CRAFTED = [
    "",
    "no separator at all, just one cut-off story ",
    SEPARATOR,
    SEPARATOR * 3,
    f"cut-off end{SEPARATOR} Story one. \n{SEPARATOR}\n\nStory two.{SEPARATOR}start of a cut-off st",
    f"{SEPARATOR}Une fée naïve — 🐉 dragon!{SEPARATOR}   \n\t {SEPARATOR}<|endof{SEPARATOR}<|<|endoftext|>x",
    f"a<|endoftext|<|endoftext|>b{SEPARATOR}{SEPARATOR}é{SEPARATOR}ü\n",
    'Lily said, "Hi!"\n<|endoftext|>\nTom 😊 smiled.\n<|endoftext|>\n',
]


def _expected(text: str, drop_partial: bool) -> list[str]:
    """The oracle: the whole text split in memory."""
    pieces = text.split(SEPARATOR)
    if drop_partial:
        pieces = pieces[1:-1]
    return [piece.strip() for piece in pieces if piece.strip()]


@pytest.mark.parametrize("drop_partial", [False, True])
@pytest.mark.parametrize("case", range(len(CRAFTED)))
def test_every_block_size_gives_the_split_of_the_whole_text(tmp_path, case, drop_partial):
    text = CRAFTED[case]
    path = tmp_path / "stories.txt"
    path.write_text(text, encoding="utf-8")
    expected = _expected(text, drop_partial)
    for block_bytes in [*range(1, 65), 1 << 24]:
        got = list(iter_stories(path, drop_partial=drop_partial, block_bytes=block_bytes, progress=False))
        assert got == expected, f"block_bytes={block_bytes}"


def test_the_tiny_sample_has_100_whole_stories():
    text = TINY.read_text(encoding="utf-8")
    assert text.count(SEPARATOR) == 100 and text.endswith(f"\n{SEPARATOR}\n")
    stories = list(iter_stories(TINY, drop_partial=False, progress=False))
    assert len(stories) == 100 and stories == _expected(text, False)
    assert stories[0].startswith("Once upon a time") and stories[-1].endswith("fun day on the farm.")
    # SOURCES.md: each story is stripped and followed by "\n<|endoftext|>\n" (15 bytes)
    assert count_bytes(stories) == TINY.stat().st_size - 100 * len(f"\n{SEPARATOR}\n")
    # the shipped samples are cut to whole stories: dropping "partial" ends loses the first story only
    assert list(iter_stories(TINY, drop_partial=True, progress=False)) == stories[1:]
    small_blocks = list(iter_stories(TINY, drop_partial=False, block_bytes=997, progress=False))
    assert small_blocks == stories


def test_batches_are_the_stories_in_order():
    stories = list(iter_stories(TINY, drop_partial=True, progress=False))
    batches = list(iter_story_batches(TINY, drop_partial=True, batch_stories=7, progress=False))
    assert [len(b) for b in batches] == [7] * 14 + [1]
    assert [s for b in batches for s in b] == stories
    assert list(iter_story_batches(TINY, drop_partial=True, progress=False)) == [stories]
    with pytest.raises(ValueError, match="batch_stories"):
        next(iter_story_batches(TINY, drop_partial=True, batch_stories=0))


def test_count_bytes_counts_utf8():
    assert count_bytes([]) == 0
    assert count_bytes(["abc", "é", "🐉"]) == 3 + 2 + 4


def test_progress_is_over_the_bytes_of_the_file(monkeypatch):
    bars = []

    class Recording(stories_module.tqdm):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            bars.append(self)

    monkeypatch.setattr(stories_module, "tqdm", Recording)
    list(iter_stories(TINY, drop_partial=False, block_bytes=10_000, progress=True))
    size = TINY.stat().st_size
    assert len(bars) == 1 and bars[0].total == size and bars[0].n == size and bars[0].unit == "B"


def test_a_big_file_is_streamed_not_read_whole(tmp_path):
    story = "Once upon a time, a small cat found a red ball. " * 20
    path = tmp_path / "big.txt"
    n = 4000
    path.write_text(f"\n{SEPARATOR}\n".join([story] * n), encoding="utf-8")  # about 4 MB
    size = path.stat().st_size
    assert size > 3_800_000

    def peak_memory(read) -> tuple[int, int]:
        tracemalloc.start()
        try:
            result = read()
            return result, tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    whole, whole_peak = peak_memory(lambda: len(path.read_text(encoding="utf-8").split(SEPARATOR)))
    assert whole == n and whole_peak > size, "the measure sees a whole-file read"
    count, peak = peak_memory(
        lambda: sum(1 for _ in iter_stories(path, drop_partial=False, block_bytes=1 << 16, progress=False))
    )
    assert count == n
    assert peak < 1_000_000, f"peak {peak:,} bytes of Python memory for a {size:,}-byte file"


def test_a_block_size_below_one_is_refused(tmp_path):
    with pytest.raises(ValueError, match="block_bytes"):
        next(iter_stories(TINY, drop_partial=False, block_bytes=0))
