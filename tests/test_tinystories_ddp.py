"""DDP on the CPU (gloo, 2 processes under torchrun) trains like one process on the same global batch,
with a student's notebook-10 parts that rank 0 alone checked.

Each rank takes its contiguous half of step t's global batch, so the gradients are the same average
over the same rows, summed in another order: the losses agree to rel 1e-5 (float32) over the steps,
not bit for bit.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest
from tinystories_helpers import ROOT, cli, tiny_args


def _losses(out):
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r["train_loss"] for r in rows], [r["val_loss"] for r in rows if "val_loss" in r]


def test_two_processes_train_like_one(tmp_path):
    # A student who finished notebook 10 (and nothing else): its parts are theirs, checked by rank 0 alone.
    course = tmp_path / "course"
    shutil.copytree(ROOT / "solutions" / "10_training", course / "10_training")
    data = tmp_path / "data"
    steps = ["train.max_steps=4", "train.eval_interval=2", "train.checkpoint_interval=4"]
    single = cli("train", *tiny_args(data, tmp_path / "one", *steps), "--course-dir", str(course))
    assert single.returncode == 0, single.stderr
    ddp = cli(
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "tinystories",
        "train",
        "--course-dir",
        str(course),
        *tiny_args(data, tmp_path / "two", *steps),
        module=("-m", "torch.distributed.run"),
        timeout=240,
    )
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    assert ddp.stdout.count("the parts of this run") == ddp.stdout.count("model: ModernDecoder (") == 1  # rank 0 alone
    assert ddp.stdout.count("with notebook 10's visible checks") == 1, ddp.stdout  # checked once, not per rank
    assert re.search(r"optimizer: AdamW +notebook 10  yours", ddp.stdout), ddp.stdout
    assert "x 2" in ddp.stdout and "1 micro-batch of 4 per process" in ddp.stdout
    assert "2 micro-batches of 4 per process" in single.stdout
    (train1, val1), (train2, val2) = _losses(tmp_path / "one"), _losses(tmp_path / "two")
    assert len(train1) == len(train2) == 4 and len(val1) == len(val2) == 2
    assert train2 == pytest.approx(train1, rel=1e-5)
    assert val2 == pytest.approx(val1, rel=1e-5)
    assert (tmp_path / "two" / "checkpoint.pt").is_file() and (tmp_path / "two" / "samples.txt").is_file()
