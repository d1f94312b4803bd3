"""Fetch TinyStoriesV2 (``roneneldan/TinyStories`` on the Hugging Face hub) into the hub's cache, resumably.

``fetch("train")`` (2.23 GB) and ``fetch("valid")`` (22.5 MB) return the path of the cached file.

What huggingface_hub 2.4.0 does by itself, read in its ``file_download.py``: ``hf_hub_download`` checks
the size (``Consistency check failed``) and retries a broken transfer a few times inside the same call,
asking for the missing bytes with an HTTP Range; but each call writes to a fresh
``<etag>.<random>.incomplete`` file and deletes it on failure, so an interrupted 2 GB download
(Ctrl-C, a network outage longer than its retries) starts again from zero, and it never checks the
sha256 that the ETag of an LFS file is. So the bytes are moved here with the library's own
``http_get`` into a persistent ``blobs/<etag>.incomplete`` that the next call resumes, the size and
the sha256 are checked, and the file is renamed to ``blobs/<etag>``, where ``hf_hub_download`` finds it
and writes the cache's snapshot link itself. A file already in the cache needs no network.

HF_ENDPOINT and HF_HUB_OFFLINE are honoured (as read by ``huggingface_hub.constants``). Without a
connection the metadata request fails at once (no retries), and ``DownloadUnavailable`` says why
in one line; the caller then falls back to the shipped sample.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from httpx2 import HTTPError  # huggingface_hub's HTTP client: its transport and status errors
from huggingface_hub import constants, get_hf_file_metadata, hf_hub_download, hf_hub_url
from huggingface_hub.errors import LocalEntryNotFoundError
from huggingface_hub.file_download import http_get, repo_folder_name
from huggingface_hub.utils import WeakFileLock, build_hf_headers
from tqdm.auto import tqdm

from .errors import RunError

REPO_ID = "roneneldan/TinyStories"
REPO_TYPE = "dataset"
REVISION = "main"
FILES = {"train": "TinyStoriesV2-GPT4-train.txt", "valid": "TinyStoriesV2-GPT4-valid.txt"}
_SHA256 = re.compile(r"[0-9a-f]{64}")


class DownloadUnavailable(Exception):
    """The file cannot be downloaded here (offline, hub unreachable, transfer broken off); str is one line."""


def fetch(split: str, *, cache_dir: str | Path | None = None) -> Path:
    """The cached path of TinyStoriesV2-GPT4-``split``.txt, downloaded (or resumed) and verified if needed."""
    if split not in FILES:
        raise RunError(f"unknown TinyStories split {split!r}; known: {', '.join(FILES)}")
    filename = FILES[split]
    cache = Path(cache_dir if cache_dir is not None else constants.HF_HUB_CACHE)
    try:
        return _link(filename, cache, local_only=True)
    except LocalEntryNotFoundError:
        pass  # not cached yet
    if constants.HF_HUB_OFFLINE:
        raise DownloadUnavailable(f"HF_HUB_OFFLINE is set and {filename} is not in the cache {cache}")

    endpoint = _endpoint()
    url = hf_hub_url(REPO_ID, filename, repo_type=REPO_TYPE, revision=REVISION, endpoint=endpoint)
    try:  # no retries (retry_on_errors=False): without a connection this fails at once
        meta = get_hf_file_metadata(url, timeout=constants.HF_HUB_ETAG_TIMEOUT, endpoint=endpoint)
    except (HTTPError, OSError) as error:
        raise DownloadUnavailable(f"cannot reach {endpoint}: {_one_line(error)}") from error
    if meta.etag is None or meta.size is None:
        raise DownloadUnavailable(f"{url} answered without an ETag or a size: is HF_ENDPOINT a Hugging Face hub?")

    storage = cache / repo_folder_name(repo_id=REPO_ID, repo_type=REPO_TYPE)
    blob = storage / "blobs" / meta.etag
    partial = blob.with_name(f"{meta.etag}.incomplete")
    lock = cache / ".locks" / storage.name / f"{meta.etag}.resume.lock"
    blob.parent.mkdir(parents=True, exist_ok=True)
    lock.parent.mkdir(parents=True, exist_ok=True)
    with WeakFileLock(lock):  # one writer per partial file (several processes may start together)
        if not blob.exists():
            _download(meta, partial, filename)
            _verify(partial, meta.size, meta.etag, filename)
            os.replace(partial, blob)
    try:
        return _link(filename, cache, local_only=False)
    except (HTTPError, OSError) as error:
        raise DownloadUnavailable(f"{filename} is downloaded but could not be linked into the cache: "
                                  f"{_one_line(error)}") from error


def _link(filename: str, cache: Path, *, local_only: bool) -> Path:
    """hf_hub_download: the cached file, linking a blob that is already there into the snapshot folder."""
    return Path(hf_hub_download(REPO_ID, filename, repo_type=REPO_TYPE, revision=REVISION, cache_dir=cache,
                                endpoint=_endpoint(), etag_timeout=constants.HF_HUB_ETAG_TIMEOUT,
                                local_files_only=local_only))


def _endpoint() -> str:
    """HF_ENDPOINT as set now: huggingface_hub reads it once, at import (a mirror set later still counts)."""
    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def _download(meta, partial: Path, filename: str) -> None:
    """Append the missing bytes of ``meta.location`` to ``partial`` (an HTTP Range from its current size)."""

    have = partial.stat().st_size if partial.exists() else 0
    if have > meta.size:  # not a prefix of this file: start again
        partial.unlink()
        have = 0
    try:
        # A public data set: no token (not to a CDN either). Identity encoding: a Range counts file bytes.
        headers = build_hf_headers(token=False) | {"Accept-Encoding": "identity"}
        with partial.open("ab") as out:
            http_get(meta.location, out, resume_size=have, headers=headers, expected_size=meta.size,
                     displayed_filename=filename)
    except HTTPError as error:  # broke off after the library's own retries: keep what arrived
        got = partial.stat().st_size if partial.exists() else 0
        raise DownloadUnavailable(f"the download of {filename} stopped at {got:,} of {meta.size:,} bytes "
                                  f"({_one_line(error)}); run again to resume it") from error
    except OSError as error:
        if "Consistency check failed" not in str(error):
            raise
        # the server sent another number of bytes than it announced: _verify says so and deletes the file


def _verify(path: Path, size: int, etag: str, filename: str) -> None:
    """Check the size, and the sha256 when the ETag is one (LFS files); delete the file on a mismatch."""
    actual = path.stat().st_size
    if actual != size:
        path.unlink()
        raise RunError(f"downloaded {filename} has {actual:,} bytes, the hub says {size:,}: deleted it, "
                       "run again to download it again")
    if not _SHA256.fullmatch(etag):
        return

    digest = hashlib.sha256()
    with path.open("rb") as data, tqdm(total=size, unit="B", unit_scale=True, desc=f"sha256 {filename}",
                                       disable=size < 1 << 28) as bar:
        while block := data.read(1 << 24):
            digest.update(block)
            bar.update(len(block))
    if digest.hexdigest() != etag:
        path.unlink()
        raise RunError(f"downloaded {filename} is corrupt (sha256 {digest.hexdigest()[:12]}..., the hub says "
                       f"{etag[:12]}...): deleted it, run again to download it again")


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or "no details"
    if len(text) > 160:
        text = text[:157] + "..."
    return f"{type(error).__name__}: {text}"
