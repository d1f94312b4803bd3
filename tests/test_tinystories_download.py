"""``tinystories.download.fetch`` against a local stand-in for the hub (tests/hub_server.py), no internet.

The shipped samples play TinyStoriesV2-GPT4-{train,valid}.txt. Broken networks are imitated by the
server: a connection cut mid-file, GETs refused for a while, Range ignored, a corrupted copy.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import time
from pathlib import Path

import pytest
from hub_server import serving

from tinystories.download import FILES, REPO_ID, DownloadUnavailable, fetch
from tinystories.errors import RunError

CHUNK = 1 << 16
CUT = 7 * CHUNK  # bytes sent before the connection drops: whole chunks, all kept on disk
DATA = Path(__file__).resolve().parents[1] / "data" / "tinystories"


@pytest.fixture(autouse=True)
def online(monkeypatch):
    """As on a machine with internet: the suite itself runs with HF_HUB_OFFLINE=1 (conftest.py)."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    # http_get hands bytes over in chunks of this size (10 MB by default): a cut keeps whole chunks only.
    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", CHUNK)


@pytest.fixture
def repo(tmp_path):
    """A folder laid out like roneneldan/TinyStories, with the shipped samples as the V2 files."""
    folder = tmp_path / "repo"
    folder.mkdir()
    shutil.copy(DATA / "tinystories_v2_sample.txt", folder / FILES["train"])
    shutil.copy(DATA / "tinystories_tiny.txt", folder / FILES["valid"])
    return folder


@contextlib.contextmanager
def _hub(monkeypatch, folder, **options):
    """Serve ``folder`` as the data set and point HF_ENDPOINT at it; yield the requests seen."""
    with serving({}, datasets={REPO_ID: folder}, **options) as (endpoint, requests):
        monkeypatch.setenv("HF_ENDPOINT", endpoint)
        yield requests


def _gets(requests):
    return [r for r in requests if r.startswith("GET")]


def _leftovers(cache):
    return sorted(p.name for p in cache.rglob("*") if p.name.endswith(".incomplete"))


def test_downloads_both_splits_once_then_reads_the_cache(repo, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    with _hub(monkeypatch, repo) as requests:
        paths = {split: fetch(split, cache_dir=cache) for split in FILES}
        seen = len(requests)
        again = {split: fetch(split, cache_dir=cache) for split in FILES}
        assert len(requests) == seen, "a cached file is returned without asking the hub"
    assert [r.split()[1].rsplit("/", 1)[1] for r in _gets(requests)] == [FILES["train"], FILES["valid"]]
    assert all("/datasets/roneneldan/TinyStories/resolve/main/" in r for r in requests), requests
    for split, path in paths.items():
        assert path == again[split] and path.is_relative_to(cache) and path.name == FILES[split]
        assert path.read_bytes() == (repo / FILES[split]).read_bytes()
    assert _leftovers(cache) == []
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # and offline, the cache still answers
    assert fetch("valid", cache_dir=cache) == paths["valid"]


def test_a_connection_cut_once_is_resumed_in_the_same_call(repo, tmp_path, monkeypatch):
    with _hub(monkeypatch, repo, cut_after=CUT) as requests:
        path = fetch("train", cache_dir=tmp_path)
    assert path.read_bytes() == (repo / FILES["train"]).read_bytes()
    assert [r.split(" ", 2)[2:] for r in _gets(requests)] == [[], [f"[bytes={CUT}-]"]], requests


@pytest.mark.parametrize("ranges", [True, False], ids=["range", "range ignored"])
def test_an_interrupted_download_is_resumed_by_the_next_call(repo, tmp_path, monkeypatch, ranges):
    original = (repo / FILES["train"]).read_bytes()
    with _hub(monkeypatch, repo, cut_after=CUT, fail_gets=1, ranges=ranges) as requests:
        with pytest.raises(DownloadUnavailable) as raised:  # cut, then the retry is refused: the call gives up
            fetch("train", cache_dir=tmp_path)
        message = str(raised.value)
        assert f"stopped at {CUT:,} of" in message and "resume" in message and "\n" not in message
        (partial,) = tmp_path.rglob("*.incomplete")
        assert partial.read_bytes() == original[:CUT], "what arrived is kept on disk"
        first = len(requests)
        path = fetch("train", cache_dir=tmp_path)
    second = _gets(requests[first:])
    assert second == [f"GET /datasets/{REPO_ID}/resolve/main/{FILES['train']} [bytes={CUT}-]"], second
    assert path.read_bytes() == original
    assert _leftovers(tmp_path) == []


def test_lfs_files_come_from_the_cdn_the_hub_redirects_to(repo, tmp_path, monkeypatch):
    """As on huggingface.co: HEAD /resolve/ answers 302 with X-Linked-Etag/Size, the bytes come from elsewhere."""
    original = (repo / FILES["train"]).read_bytes()
    with _hub(monkeypatch, repo, lfs=True, cut_after=CUT, fail_gets=1) as requests:
        with pytest.raises(DownloadUnavailable, match=f"stopped at {CUT:,} of {len(original):,}"):
            fetch("train", cache_dir=tmp_path)
        first = len(requests)
        path = fetch("train", cache_dir=tmp_path)
    assert path.read_bytes() == original
    assert _gets(requests[first:]) == [f"GET /cdn/datasets/{REPO_ID}/resolve/main/{FILES['train']} [bytes={CUT}-]"]
    assert not [r for r in _gets(requests) if not r.startswith("GET /cdn/")], "no bytes from the hub itself"


def test_a_corrupted_copy_is_rejected_and_deleted(repo, tmp_path, monkeypatch):
    original = (repo / FILES["valid"]).read_bytes()
    corrupted = tmp_path / "corrupted"
    corrupted.mkdir()
    (corrupted / FILES["valid"]).write_bytes(original[:1000] + bytes(100) + original[1100:])  # same size
    cache = tmp_path / "cache"
    sha256 = hashlib.sha256(original).hexdigest()
    with (
        _hub(monkeypatch, corrupted, etags={FILES["valid"]: sha256}),
        pytest.raises(RunError, match="corrupt.*deleted") as raised,
    ):
        fetch("valid", cache_dir=cache)
    assert "\n" not in str(raised.value)
    assert not [p for p in cache.rglob("*") if p.is_file() and not p.name.endswith(".lock")], "nothing kept"
    with _hub(monkeypatch, repo):  # the next call downloads it again
        assert fetch("valid", cache_dir=cache).read_bytes() == original


def test_offline_mode_says_so_at_once(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    with pytest.raises(DownloadUnavailable, match="HF_HUB_OFFLINE") as raised:
        fetch("valid", cache_dir=tmp_path)
    assert "\n" not in str(raised.value)


def test_a_refused_connection_says_so_at_once(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # port 9 (discard) is closed here: refused at once
    start = time.monotonic()
    with pytest.raises(DownloadUnavailable) as raised:
        fetch("train", cache_dir=tmp_path)
    assert time.monotonic() - start < 5, "no retries with back-off when nothing answers"
    assert str(raised.value).startswith("cannot reach http://127.0.0.1:9: ConnectError")
    assert "\n" not in str(raised.value)


def test_an_unknown_split_is_one_line():
    with pytest.raises(RunError, match="'test'.*train, valid"):
        fetch("test")
