"""The command line: each bad input is ONE line on stderr starting "error:", exit 2, no traceback,
and a good checkpoint is never overwritten."""

from __future__ import annotations

import pytest
from tinystories_helpers import ROOT, cli, tiny_args


def _one_line_error(result, *words):
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in result.stderr, result.stderr
    assert all(w in lines[0] for w in words), lines[0]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    data, out = tmp_path_factory.mktemp("data"), tmp_path_factory.mktemp("runs") / "run"
    result = cli("train", *tiny_args(data, out))
    assert result.returncode == 0, result.stderr
    return data, out


def test_train_then_sample(trained):
    _, out = trained
    result = cli("sample", "--out", str(out), "--prompt", "Once", "--n", "2", "--max-new-tokens", "5")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("--- ") == 2 and "temperature 0.8" in result.stdout


def test_existing_checkpoint_without_resume(trained):
    data, out = trained
    before = (out / "checkpoint.pt").read_bytes()
    _one_line_error(cli("train", *tiny_args(data, out)), "already exists", "--resume")
    _one_line_error(cli("train", *tiny_args(data, out, "model.d_model=64"), "--resume"), "model.d_model")
    assert (out / "checkpoint.pt").read_bytes() == before


@pytest.mark.parametrize(
    "args, words",
    [
        (["train", "--set", "model.d_modle=3"], ["model.d_modle", "d_model"]),
        (["train", "--config", "no_such_config"], ["no config", "cpu_demo"]),
        (["train", "--set", "train.precision=fp16", "--set", "train.device=cpu"], ["fp16"]),
        (["sample", "--out", "/nonexistent/run"], ["checkpoint.pt is missing"]),
    ],
)
def test_bad_input_is_one_line(args, words, tmp_path):
    if args[0] == "train":
        args = [*args, "--quiet", "--out", str(tmp_path / "o"), "--set", f"data.dir={tmp_path / 'd'}"]
    _one_line_error(cli(*args), *words)


def test_resume_without_checkpoint_and_missing_data(tmp_path):
    _one_line_error(cli("train", *tiny_args(tmp_path / "d", tmp_path / "o"), "--resume"), "no checkpoint")
    # A data directory that cannot be created (a file stands in the way).
    blocker = tmp_path / "file"
    blocker.write_text("")
    _one_line_error(cli("train", *tiny_args(blocker / "sub", tmp_path / "o2")), "data directory")


def test_missing_token_file(trained, tmp_path):
    data, _ = trained
    (token_file,) = data.rglob("train.bin")
    saved = token_file.read_bytes()
    token_file.unlink()
    try:
        _one_line_error(cli("train", *tiny_args(data, tmp_path / "o")), "train.bin is missing")
    finally:
        token_file.write_bytes(saved)


@pytest.mark.parametrize("stack", ["reference", "solutions"])
def test_gpu_benchmark_script_runs_tiny_on_cpu(stack, tmp_path):
    """The exact script a GPU run uses, at a tiny size on the CPU, for both stacks: it trains and writes its
    JSON and Markdown."""
    import json

    result = cli(
        "--device",
        "cpu",
        "--tiny",
        "--steps",
        "3",
        "--warmup",
        "1",
        "--stack",
        stack,
        "--output",
        str(tmp_path / "bench"),
        module=(str(ROOT / "benchmarks" / "tinystories_gpu.py"),),
    )
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "bench.json").read_text())
    assert report["timed_steps"] == 3 and report["tokens_per_s"] > 0 and report["mfu"] is None
    assert report["stack"] == stack and f"stack {stack}" in (tmp_path / "bench.md").read_text()


class _RunsCode:
    """What a booby-trapped checkpoint carries: unpickling it would run ``touch MARKER``."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


def test_a_checkpoint_that_carries_code_is_refused(trained, tmp_path):
    """sample and train --resume load with weights_only=True: a pickled callable is refused in one line, not run.

    The control: the same file without the callable loads (sample works)."""
    import shutil

    import torch

    data, out = trained
    run = tmp_path / "shared-run"
    shutil.copytree(out, run)
    state = torch.load(run / "checkpoint.pt", weights_only=True)
    marker = tmp_path / "code-ran"
    torch.save({**state, "extra": _RunsCode(marker)}, run / "checkpoint.pt")
    _one_line_error(cli("sample", "--out", str(run)), "refusing to load", "checkpoint.pt", "posix.system")
    _one_line_error(cli("train", *tiny_args(data, run), "--resume"), "refusing to load")
    assert not marker.exists(), "loading the checkpoint ran its code"
    torch.save(state, run / "checkpoint.pt")
    assert cli("sample", "--out", str(run), "--n", "1", "--max-new-tokens", "2").returncode == 0
