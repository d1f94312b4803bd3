"""Fetch a Hugging Face checkpoint (config and safetensors weights) from the hub or a local folder.

Notebook 08 loads OpenAI's GPT-2 into the student's own model with this. The files land in the
hub's usual cache (``~/.cache/huggingface``, or ``HF_HOME``), so the 500 MB download happens once.
Without internet, or with ``HF_HUB_OFFLINE=1`` and nothing cached, ``load_checkpoint`` raises
``CheckpointUnavailable`` with a one-line reason, and the notebook skips that section.

The same code path reads a folder written by ``save_pretrained``: that is how the tests check it
offline, along with a local server that answers like the hub.
"""

from __future__ import annotations

import contextlib
import socket
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import torch

WEIGHTS = "model.safetensors"
FILES = ("config.json", WEIGHTS)


class CheckpointUnavailable(RuntimeError):
    """The checkpoint cannot be had here; the message is one line that says why."""


@dataclass
class Checkpoint:
    folder: Path  # where the files are (a hub cache snapshot, or the folder given)
    config: dict  # config.json
    state: dict[str, torch.Tensor]  # the tensors of model.safetensors, by the checkpoint's own names


def fetch(source: str, files=FILES, *, revision: str | None = None, endpoint: str | None = None,
          cache_dir: str | Path | None = None, timeout: float = 10.0) -> Path:
    """The folder holding ``files`` of ``source``: a local folder as it is, or a hub repo id downloaded to the cache."""
    if Path(source).is_dir():
        missing = [name for name in files if not (Path(source) / name).is_file()]
        if missing:
            raise CheckpointUnavailable(f"{source} has no {', '.join(missing)}")
        return Path(source)
    from huggingface_hub import constants, hf_hub_download

    def download(local_only: bool) -> list[str]:
        return [hf_hub_download(source, name, revision=revision, endpoint=endpoint, cache_dir=cache_dir,
                                etag_timeout=timeout, local_files_only=local_only) for name in files]

    with contextlib.suppress(Exception):  # downloaded before: no network needed
        return Path(download(local_only=True)[0]).parent
    if constants.HF_HUB_OFFLINE:
        raise CheckpointUnavailable(f"{source} is not in the local cache and HF_HUB_OFFLINE is set")
    unreachable = _unreachable(endpoint or constants.ENDPOINT, timeout)
    if unreachable:  # fail in a moment rather than after the hub client's minute of retries
        raise CheckpointUnavailable(unreachable)
    try:
        paths = download(local_only=False)
    except Exception as error:  # noqa: BLE001 - refused, not found, cut off: all mean "skip, and say why"
        raise CheckpointUnavailable(_reason(source, error)) from error
    return Path(paths[0]).parent


def load_checkpoint(source: str, files=FILES, **fetch_options) -> Checkpoint:
    """``source``'s config.json and weights (float tensors as stored), fetched with ``fetch``."""
    import json

    from safetensors.torch import load_file

    folder = fetch(source, files, **fetch_options)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    return Checkpoint(folder, config, load_file(folder / WEIGHTS))


def _unreachable(endpoint: str, timeout: float) -> str | None:
    """Why ``endpoint`` cannot be reached (no DNS, no route, refused), or None when a connection opens."""
    url = urlsplit(endpoint)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname, port), timeout=min(timeout, 5.0)).close()
    except OSError as error:
        return f"no connection to {url.hostname} ({error.strerror or type(error).__name__}): offline?"
    return None


def _reason(source: str, error: Exception) -> str:
    """One line for the student: what failed, without the traceback."""
    text = " ".join(str(error).split())
    if len(text) > 160:
        text = text[:157] + "..."
    return f"could not download {source} from the Hugging Face hub ({type(error).__name__}: {text})"
