"""``prepare --tokenizer yours``: notebook 12's BPE tokenizes the data, or the fast one says why not.

On the 80 KB ``tinystories_tiny.txt`` in place of the shipped sample, with a small vocabulary, so that the
pure-Python trainer takes well under a second.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from tinystories_helpers import ROOT
from tokenizers import Tokenizer as HFTokenizer

from coursetools.notebook_import import load_from_notebook
from coursetools.notebook_vocabulary import STUB_LINE, grade_id
from tinystories import prepare as prep
from tinystories.__main__ import main
from tinystories.config import load_config

TINY_TEXT = ROOT / "data" / "tinystories" / "tinystories_tiny.txt"
SOLUTIONS = ROOT / "solutions"
EOT = "<|endoftext|>"


@pytest.fixture(autouse=True)
def tiny_sample(monkeypatch):
    monkeypatch.setattr(prep, "SAMPLE", TINY_TEXT)


def _data(tmp_path, *overrides):
    return load_config("cpu_demo", [f"data.dir={tmp_path}", "data.vocab_size=300", *overrides]).data


def _split_stories():
    from tinystories.stories import iter_stories

    stories = list(iter_stories(TINY_TEXT, drop_partial=False, progress=False))
    cut = len(stories) - max(1, int(len(stories) * prep.VAL_FRACTION))
    return stories[:cut], stories[cut:]


@pytest.fixture(scope="module")
def solution_bpe():
    return load_from_notebook("12_bpe", "train_bpe", "Tokenizer", folder=SOLUTIONS)


def test_yours_gives_the_ids_of_the_notebook_tokenizer(tmp_path, solution_bpe):
    train_bpe, tokenizer_class = solution_bpe
    data = prep.prepare(_data(tmp_path, "data.tokenizer=yours"), progress=False, course_dir=SOLUTIONS, check=False)
    assert data.origin.startswith("yours (notebook 12 from"), data.origin
    assert "-yours-" in data.train.parent.name and data.stats["tokenizer"] == "yours"
    train, val = _split_stories()
    vocab, merges = train_bpe(EOT.join(train), 300)
    tokenizer = tokenizer_class(vocab, merges)
    for stories, path in ((train, data.train), (val, data.val)):
        expected = [i for story in stories for i in tokenizer.encode(story) + [256]]
        assert prep.load_tokens(path).tolist() == expected
    assert data.eot_id == 256 and data.vocab_size == len(vocab)
    # tokenizer.json, which training and sampling load, encodes and decodes as the notebook's tokenizer does
    hf = HFTokenizer.from_file(str(data.tokenizer))
    for text in (val[0], "Once upon a time, naïve 😀 they'll", f"The end.{EOT}Once"):
        assert hf.encode(text).ids == tokenizer.encode(text)
        assert hf.decode(tokenizer.encode(text.replace(EOT, ""))) == text.replace(EOT, "")
    # a second call finds the files; the fast tokenizer gets a folder of its own
    again = prep.prepare(_data(tmp_path, "data.tokenizer=yours"), progress=False, course_dir=SOLUTIONS)
    assert again.train == data.train and "cached" in again.origin
    fast = prep.prepare(_data(tmp_path), progress=False)
    assert fast.train.parent != data.train.parent and fast.origin == prep.FAST
    assert prep.prepared_folders(_data(tmp_path)) == [fast.train.parent]
    assert prep.prepared_folders(_data(tmp_path, "data.tokenizer=yours")) == [data.train.parent]


def test_the_default_is_fast_and_says_so(tmp_path, capsys):
    assert main(["prepare", "--quiet", "--set", f"data.dir={tmp_path}", "--set", "data.vocab_size=300"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "tokenizer: fast (Hugging Face tokenizers)", out
    stats = json.loads(next(tmp_path.glob("*/stats.json")).read_text())
    assert stats["tokenizer"] == "fast" and "-yours-" not in next(tmp_path.glob("*/stats.json")).parent.name


def test_an_unfinished_notebook_falls_back_with_the_reason(tmp_path, capsys):
    """course/ is the release: its answer cells still hold the stubs."""
    assert (
        main(
            [
                "prepare",
                "--quiet",
                "--tokenizer",
                "yours",
                "--course-dir",
                str(ROOT / "course"),
                "--set",
                f"data.dir={tmp_path}",
                "--set",
                "data.vocab_size=300",
            ]
        )
        == 0
    )
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("tokenizer: fast (Hugging Face tokenizers); yours is not used (not started: "), first
    assert STUB_LINE in first
    assert [p.name for p in tmp_path.iterdir()] == [p.name for p in prep.prepared_folders(_data(tmp_path))]


@pytest.mark.parametrize("broken", ["train_bpe", "encode_iterable"])
def test_a_failing_tokenizer_falls_back(tmp_path, monkeypatch, broken):
    """Code that passes the visible checks may still break on the data: one line, then the fast tokenizer."""
    real = prep._student_bpe

    def loaded(path, code_hash, *, check):
        student = real(path, code_hash, check=False)
        if broken == "train_bpe":

            def train_bpe(*args, **kwargs):
                raise RuntimeError("out of patience")

            student.train_bpe = train_bpe
        else:

            class Tokenizer(student.tokenizer_class):
                calls = 0

                def encode_iterable(self, lines):  # the check of tokenizer.json passes, the data then fails
                    Tokenizer.calls += 1
                    if Tokenizer.calls > 1:
                        raise RuntimeError("out of patience")
                    yield from super().encode_iterable(lines)

            student.tokenizer_class = Tokenizer
        return student

    monkeypatch.setattr(prep, "_student_bpe", loaded)
    data = prep.prepare(_data(tmp_path, "data.tokenizer=yours"), progress=False, course_dir=SOLUTIONS)
    assert data.origin == f"{prep.FAST}; yours is not used (it raised RuntimeError: out of patience)"
    assert data.stats["tokenizer"] == "fast" and np.asarray(prep.load_tokens(data.train)).size > 0
    assert prep.prepared_folders(_data(tmp_path, "data.tokenizer=yours")) == []
    assert [p.name for p in tmp_path.iterdir()] == [data.train.parent.name]  # the unfinished folder is gone


def test_failing_visible_checks_fall_back(tmp_path):
    """A notebook whose encode_iterable encodes each chunk on its own fails its visible checks (about 10 s)."""
    import nbformat

    nb = nbformat.read(SOLUTIONS / "12_bpe" / "12_bpe.ipynb", as_version=4)
    answer = next(c for c in nb.cells if grade_id(c) == "encode_iterable")
    answer.source = (
        "def encode_iterable(self, lines):\n    for line in lines:\n        yield from self.encode(line)\n\n\n"
        "Tokenizer.encode_iterable = encode_iterable\n"
    )
    (tmp_path / "course" / "12_bpe").mkdir(parents=True)
    nbformat.write(nb, tmp_path / "course" / "12_bpe" / "12_bpe.ipynb")
    data = prep.prepare(
        _data(tmp_path / "data", "data.tokenizer=yours"), progress=False, course_dir=tmp_path / "course"
    )
    assert data.origin.startswith(f"{prep.FAST}; yours is not used (failing: encode_iterable: "), data.origin
    assert data.stats["tokenizer"] == "fast"
