"""Reading a run's checkpoint.pt: plain data only, never code.

``torch.load(weights_only=False)`` unpickles whatever the file names, so a checkpoint someone else made
(a shared run, a download) could run any code on this machine as it loads. A checkpoint of ours holds
only tensors, numbers, strings, lists and dicts (the config is stored as a dict), which
``weights_only=True`` reads; a file that names anything else is refused with one line.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import torch

from tinystories.errors import RunError


def load_checkpoint(path: Path, map_location="cpu") -> dict:
    """The checkpoint at ``path``, loaded with ``weights_only=True``; a ``RunError`` (one line) otherwise."""
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        # torch's message is paragraphs of advice; the one that names what the file asked for is the useful one.
        named = [part.strip() for part in str(error).split("\n") if "GLOBAL" in part or "Unsupported" in part]
        raise RunError(f"refusing to load {path}: it holds more than tensors and plain values, and loading it "
                       f"could run code from whoever made it ({named[0] if named else 'not plain data'})") from None
    except Exception as error:  # noqa: BLE001 - a truncated or foreign file
        raise RunError(f"cannot read the checkpoint {path}: {type(error).__name__}") from None
