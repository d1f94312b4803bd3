"""Framing and (de)serialisation for the pipe between the checker and the worker.

Requests (checker -> worker) are pickled: the worker may read anything the checker
sends. Replies (worker -> checker) are written with ``torch.save`` and read back with
``torch.load(weights_only=True)``, so a reply can carry tensors and plain containers
but never code: nothing a student's process sends can run in the checker.
"""

from __future__ import annotations

import io
import os
import select
import struct
import time

HEADER = struct.Struct("!Q")
MAX_FRAME = 64 * 2**20  # a reply larger than this is refused, not read


class WireError(Exception):
    """The other side closed the pipe, sent garbage, or said too much."""


def send(fd: int, payload: bytes) -> None:
    data = HEADER.pack(len(payload)) + payload
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _read_exactly(fd: int, n: int, deadline: float | None) -> bytes:
    chunks, remaining = [], n
    while remaining:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            raise WireError("the pipe closed")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def receive(fd: int, deadline: float | None = None) -> bytes:
    (size,) = HEADER.unpack(_read_exactly(fd, HEADER.size, deadline))
    if size > MAX_FRAME:
        raise WireError(f"a reply of {size:,} bytes is over the {MAX_FRAME:,}-byte limit")
    return _read_exactly(fd, size, deadline)


def plain(value):
    """A copy of ``value`` made only of plain tensors, numbers, strings and containers.

    Tensors are detached, moved to the CPU and cloned (a Parameter or a tensor subclass
    becomes a plain tensor); anything else is replaced by a note of its type, so that
    a check can say "returned a list, expected a tensor".
    """
    import torch  # here, not at the top: the checker's command line imports this module before torch (see grading)

    if isinstance(value, torch.Tensor):
        return value.detach().cpu().clone().as_subclass(torch.Tensor)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, torch.dtype):
        return str(value)
    return {"__unsupported__": type(value).__qualname__}


def dump_reply(reply) -> bytes:
    import torch

    buffer = io.BytesIO()
    torch.save(reply, buffer)
    return buffer.getvalue()


def load_reply(data: bytes):
    import torch

    try:
        return torch.load(io.BytesIO(data), weights_only=True)
    except Exception as error:  # anything malformed is the sender's fault
        raise WireError(f"an unreadable reply ({type(error).__name__})") from None
