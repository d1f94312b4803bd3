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


def test_leaving_destroys_the_process_group(tmp_path):
    # Gloo's threads still alive at interpreter exit can abort a rank whose work is all done
    # (pytorch/pytorch#190489): the command line leaves the group once a run has ended well.
    import torch.distributed as dist

    from tinystories.train import leave_distributed

    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    leave_distributed()
    assert not dist.is_initialized()
    leave_distributed()  # and nothing for one process


def test_the_command_line_leaves_after_a_run_that_ended_well(tmp_path, monkeypatch):
    from tinystories import __main__ as program
    from tinystories import train

    calls = []
    monkeypatch.setattr(train, "run", lambda *args, **kwargs: calls.append("run"))
    monkeypatch.setattr(train, "leave_distributed", lambda: calls.append("leave"))
    assert program.main(["train", *tiny_args(tmp_path / "data", tmp_path / "out")]) == 0
    assert calls == ["run", "leave"]

    def failing_run(*args, **kwargs):
        raise train.RunError("it broke")

    calls.clear()
    monkeypatch.setattr(train, "run", failing_run)
    assert program.main(["train", *tiny_args(tmp_path / "data", tmp_path / "out2")]) == 2
    assert calls == []  # another rank may still be in a collective: destroying the group could deadlock
