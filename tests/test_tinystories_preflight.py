"""`python -m tinystories preflight`: each GPU check fails, on this CPU, with the message a student needs.

The GPU's answers are mocked (CI has no GPU); the timing and the data check run for real at a tiny size.
"""

from __future__ import annotations

import torch
from tinystories_helpers import TINY, cli

from tinystories.config import load_config
from tinystories.preflight import check_compile, check_precision, preflight, report


def test_no_cuda_says_how_to_get_a_gpu_and_skips_the_timing(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    findings = {f.check: f for f in preflight(load_config("gpu_h100", [f"data.dir={tmp_path}"]), name="gpu_h100")}
    assert not findings["CUDA"].ok and "Change runtime type" in findings["CUDA"].fix
    assert not findings["timing"].ok and findings["timing"].detail == "not run: fix the checks above first"
    assert not findings["data"].ok and "prepare --config gpu_h100" in findings["data"].fix


def test_a_gpu_without_bf16_points_to_the_t4_config(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    finding = check_precision(load_config("gpu_h100"))
    assert not finding.ok and "Tesla T4 has no bf16" in finding.detail and "--config gpu_t4" in finding.fix
    assert check_precision(load_config("gpu_t4")).ok  # fp16 runs on a T4


def test_a_broken_compiler_says_how_to_run_without_it(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found")

    monkeypatch.setattr(torch, "compile", broken)
    finding = check_compile(load_config("gpu_h100"))
    assert not finding.ok and "InvalidCxxCompiler" in finding.detail and "train.compile=false" in finding.fix
    assert "ok  " not in report([finding]) and "-> --set train.compile=false" in report([finding])


def test_on_the_cpu_it_times_the_run_and_estimates_its_minutes(tmp_path):
    sets = [item for o in [*TINY, f"data.dir={tmp_path}", "train.device=cpu"] for item in ("--set", o)]
    args = ["preflight", "--config", "cpu_demo", "--stack", "reference", "--steps", "4", *sets]
    unprepared = cli(*args)
    assert unprepared.returncode == 1, unprepared.stderr
    assert "FAIL  data" in unprepared.stdout and "prepare --config cpu_demo" in unprepared.stdout
    assert cli("prepare", "--config", "cpu_demo", *sets, "--quiet").returncode == 0
    ready = cli(*args)
    assert ready.returncode == 0, ready.stdout + ready.stderr
    timing = [line for line in ready.stdout.splitlines() if line.startswith("ok    timing")]
    assert len(timing) == 1 and "tokens/s over 3 steps: the run's 6 steps of 256 tokens take about" in timing[0]
