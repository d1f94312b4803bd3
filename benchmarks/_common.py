"""Shared by the decoding benchmarks: the machine's description, the command line, the reference model."""

from __future__ import annotations

import argparse
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
    """The command line as it ran: the interpreter relative to the current folder (``.venv/bin/python``) when it
    lives inside it, else by its name (``python3`` on a GPU machine with its own PyTorch)."""
    python = os.path.relpath(sys.executable)
    if python.startswith(".."):
        python = os.path.basename(sys.executable)
    return " ".join([python, *map(shlex.quote, sys.argv)])


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


def model_arguments(parser: argparse.ArgumentParser, out: str) -> None:
    """The options both decoding benchmarks share: the reference model's size, repeats, threads, output."""
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: steadier on a shared machine)")
    parser.add_argument("--out", default=out)
