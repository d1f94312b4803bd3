"""Shared by the decoding benchmarks: the machine's description, the command line, the reference model."""

from __future__ import annotations

import datetime
import os
import platform
import shlex
import sys

import torch

from autograder.reference.configs import DecoderConfig
from autograder.reference.decoders import LlamaDecoder


def machine() -> str:
    return (f"{os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}, torch "
            f"{torch.__version__}, {torch.get_num_threads()} torch threads")


def command() -> str:
    return " ".join([".venv/bin/python", *map(shlex.quote, sys.argv)])


def now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def model(d_model: int, n_layers: int, n_heads: int, n_kv_heads: int, vocab: int, max_len: int, seed: int = 0):
    """The course's reference decoder with random weights (the timings do not depend on the values)."""
    torch.manual_seed(seed)
    config = DecoderConfig(vocab_size=vocab, d_model=d_model, n_layers=n_layers, n_heads=n_heads,
                           d_ff=4 * d_model, max_seq_len=max_len, n_kv_heads=n_kv_heads)
    return LlamaDecoder(config).eval(), config
