"""``coursetools.pretrained``: the code that fetches GPT-2's real weights, checked without internet.

A tiny random GPT-2 saved with ``save_pretrained`` stands in for the real one: read from its folder,
and served by a local stand-in for the hub (``hub_server``), through the same download code.
"""

from __future__ import annotations

import time

import pytest
import torch
from hub_server import serving

from coursetools.pretrained import CheckpointUnavailable, load_checkpoint


@pytest.fixture(autouse=True)
def online(monkeypatch):
    """As on a machine with internet: the suite itself runs with HF_HUB_OFFLINE=1 (conftest.py)."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


@pytest.fixture(scope="module")
def saved_gpt2(tmp_path_factory):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(vocab_size=64, n_positions=32, n_embd=16, n_layer=2, n_head=2, bos_token_id=0, eos_token_id=0)
    ).eval()
    folder = tmp_path_factory.mktemp("tiny-gpt2")
    model.save_pretrained(folder)
    return model, folder


def _same_tensors(state, model):
    expected = {k.removeprefix("transformer."): v for k, v in model.state_dict().items()}
    got = {k.removeprefix("transformer."): v for k, v in state.items()}
    assert set(got) <= set(expected) and set(expected) - set(got) <= {"lm_head.weight"}  # the tied head is not saved
    for name, tensor in got.items():
        assert torch.equal(tensor, expected[name]), name


def test_reads_a_folder_written_by_save_pretrained(saved_gpt2):
    model, folder = saved_gpt2
    checkpoint = load_checkpoint(str(folder))
    assert checkpoint.folder == folder
    assert checkpoint.config["n_embd"] == 16 and checkpoint.config["model_type"] == "gpt2"
    _same_tensors(checkpoint.state, model)


def test_downloads_from_a_hub_once_then_reads_the_cache(saved_gpt2, tmp_path):
    model, folder = saved_gpt2
    with serving({"someone/tiny-gpt2": folder}) as (endpoint, requests):
        checkpoint = load_checkpoint("someone/tiny-gpt2", endpoint=endpoint, cache_dir=tmp_path)
        assert {r.split()[0] for r in requests} == {"HEAD", "GET"}, requests
        assert any(r.startswith("GET") and r.endswith("model.safetensors") for r in requests), requests
        seen = len(requests)
        again = load_checkpoint("someone/tiny-gpt2", endpoint=endpoint, cache_dir=tmp_path)
        assert len(requests) == seen, "a cached checkpoint is read without asking the hub"
    assert checkpoint.folder.is_relative_to(tmp_path) and again.folder == checkpoint.folder
    _same_tensors(checkpoint.state, model)


def test_a_repository_the_hub_does_not_have_is_one_line(saved_gpt2, tmp_path):
    _, folder = saved_gpt2
    with serving({"someone/tiny-gpt2": folder}) as (endpoint, _), pytest.raises(CheckpointUnavailable) as raised:
        load_checkpoint("someone/missing", endpoint=endpoint, cache_dir=tmp_path)
    assert "someone/missing" in str(raised.value) and "\n" not in str(raised.value)


def test_no_connection_is_said_in_a_moment(tmp_path):
    start = time.monotonic()
    with pytest.raises(CheckpointUnavailable) as raised:  # port 9 (discard) is closed here: refused at once
        load_checkpoint("openai-community/gpt2", endpoint="http://127.0.0.1:9", cache_dir=tmp_path)
    assert time.monotonic() - start < 5, "no retries with back-off when nothing answers"
    assert "no connection to 127.0.0.1" in str(raised.value) and "\n" not in str(raised.value)


def test_offline_mode_with_nothing_cached_says_so(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(CheckpointUnavailable, match="HF_HUB_OFFLINE"):
        load_checkpoint("openai-community/gpt2", cache_dir=tmp_path)


def test_a_folder_without_the_weights_says_which_file(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(CheckpointUnavailable, match="model.safetensors"):
        load_checkpoint(str(tmp_path))


@pytest.mark.parametrize("served", [False, True], ids=["folder", "local hub"])
def test_notebook_08_loads_a_saved_gpt2_into_its_own_model(saved_gpt2, tmp_path, served, solution_namespaces):
    """Notebook 08's path for the real GPT-2 (fetch, config, convert, load, generate), on a tiny saved one."""
    ns = solution_namespaces["08_decoder_models"]
    hf, folder = saved_gpt2
    with serving({"someone/tiny-gpt2": folder}) as (endpoint, _):
        checkpoint = load_checkpoint(
            "someone/tiny-gpt2" if served else str(folder), endpoint=endpoint, cache_dir=tmp_path
        )
    config = ns["gpt2_config_from_hf"](checkpoint.config)
    model = ns["GPT2"](config).eval()
    model.load_state_dict(ns["gpt2_state_from_hf"](checkpoint.state, config), strict=True)
    prompt = torch.tensor([[5, 17, 3, 42]])
    with torch.no_grad():
        torch.testing.assert_close(model(prompt), hf(prompt).logits, atol=1e-5, rtol=1e-4)
        theirs = hf.generate(
            prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=12, do_sample=False, pad_token_id=0
        )
    assert ns["greedy"](model, prompt, steps=12) == theirs[0, prompt.shape[1] :].tolist()
