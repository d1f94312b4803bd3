"""Notebook 05 uses the RoPE written in notebook 03 through coursetools.notebook_import."""

from __future__ import annotations

import pytest
import torch
from notebooks import ROOT

from autograder.reference.rope import rope as rope_oracle
from coursetools.notebook_import import load_from_notebook, use_earlier
from coursetools.notebook_vocabulary import STUB_LINE


def test_loads_the_instructors_rope_and_it_is_right():
    RoPE = load_from_notebook("03_rope", "RoPE", folder=ROOT / "solutions")
    x, positions = torch.rand(2, 5, 8) * 2 - 1, torch.tensor([0, 3, 9, 4, 1])
    torch.testing.assert_close(RoPE(8, 16)(x, positions), rope_oracle(x, positions).float(), atol=1e-5, rtol=0)


def test_a_students_unfinished_notebook_gives_its_stub():
    RoPE = load_from_notebook("03_rope", "RoPE", folder=ROOT / "course")
    with pytest.raises(NotImplementedError):
        RoPE(8, 16)


def test_leaves_the_callers_random_numbers_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    load_from_notebook("03_rope", "RoPE", folder=ROOT / "solutions")  # its setup cell seeds torch
    torch.testing.assert_close(torch.rand(3), expected)


def test_leaves_the_callers_thread_count_alone():
    # Notebook 11's setup cell pins one thread; the TinyStories run that loads its generate must keep its own.
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        load_from_notebook("11_decoding", "generate", folder=ROOT / "solutions")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)


def test_says_what_is_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="03_rope.ipynb does not exist"):
        load_from_notebook("03_rope", "RoPE", folder=tmp_path)
    with pytest.raises(NameError, match="defines no NoSuchThing"):
        load_from_notebook("03_rope", "NoSuchThing", folder=ROOT / "solutions")


# use_earlier: later notebooks build on earlier answers, or on the course's reference with one line saying so.


def test_use_earlier_gives_the_students_own_module(capsys):
    from autograder.reference.attention import MultiHeadAttention as Reference

    MultiHeadAttention = use_earlier(
        "05_multihead_attention", "MultiHeadAttention", Reference, folder=ROOT / "solutions"
    )
    assert MultiHeadAttention is not Reference and MultiHeadAttention.__module__ == "notebook_05_multihead_attention"
    assert capsys.readouterr().out == "Using your MultiHeadAttention from 05_multihead_attention.\n"


def test_use_earlier_falls_back_on_a_stub_and_says_so(capsys):
    from autograder.reference.feed_forward import FeedForward as Reference

    assert use_earlier("06_feed_forward", "FeedForward", Reference, folder=ROOT / "course") is Reference
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith(
        f"Your FeedForward from 06_feed_forward is not finished (its answer cell still says {STUB_LINE}); "
        "using the course's reference version built on PyTorch instead."
    )
    assert line.endswith("Finish notebook 06 and re-run this cell to use your own.")


def test_use_earlier_falls_back_when_the_notebook_is_missing_or_broken(tmp_path, capsys):
    assert use_earlier("02_normalization", "LayerNorm", torch.nn.LayerNorm, folder=tmp_path) is torch.nn.LayerNorm
    assert "is not there" in capsys.readouterr().out
    broken = tmp_path / "02_normalization"
    broken.mkdir()
    (broken / "02_normalization.ipynb").write_text("not a notebook")
    assert use_earlier("02_normalization", "LayerNorm", torch.nn.LayerNorm, folder=tmp_path) is torch.nn.LayerNorm
    assert "loading it raised" in capsys.readouterr().out


def test_the_reference_cannot_stand_in_for_an_exercise():
    """Notebook 05 graded with the course's reference attention imported as the answer: refused, and told why."""
    from notebooks import answer_source, read, run_here, solution_path, with_answer

    from autograder.exercises import find_exercise, run_exercise
    from autograder.impl import LocalImpl

    nb = read(solution_path("05_multihead_attention"))
    assert "class MultiHeadAttention" in answer_source(nb, "multi_head_attention")
    cheat = with_answer(nb, "multi_head_attention", "from autograder.reference.attention import MultiHeadAttention\n")
    namespace = run_here(cheat, solution_path("05_multihead_attention").parent)
    exercise, adapters = find_exercise("multi_head_attention")
    result = run_exercise(exercise, LocalImpl(namespace, adapters))
    assert not result.passed
    assert (
        "`MultiHeadAttention` is the course's reference implementation; the exercise asks for your own"
        in result.message
    ), result.message


# The given configuration classes load with the answers, and the course's fallbacks match them.
@pytest.mark.parametrize(
    ("notebook", "name"),
    [
        ("08_decoder_models", "GPT2Config"),
        ("08_decoder_models", "DecoderConfig"),
        ("09_bert_encoder_decoder", "BertConfig"),
        ("09_bert_encoder_decoder", "TransformerConfig"),
        ("10_training", "TrainConfig"),
    ],
)
def test_the_reference_configs_match_the_notebooks(notebook, name):
    import dataclasses

    from autograder.reference import configs

    def described(cls):
        return [(f.name, str(f.type), f.default) for f in dataclasses.fields(cls)]

    assert described(load_from_notebook(notebook, name, folder=ROOT / "course")) == described(getattr(configs, name))


def _fallbacks(nb) -> list[tuple[str, str]]:
    """(earlier notebook, where the fallback comes from) for each ``use_earlier`` call in ``nb``'s code cells."""
    import ast

    imported, calls = {}, []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.Import):
                imported |= {(alias.asname or alias.name).split(".")[0]: alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                imported |= {alias.asname or alias.name: f"{node.module}.{alias.name}" for alias in node.names}
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "use_earlier":
                root = node.args[2]
                while isinstance(root, ast.Attribute):
                    root = root.value
                calls.append((node.args[0].value, imported.get(root.id, root.id)))
    return calls


def test_every_fallback_is_the_courses_reference_or_pytorchs():
    """An unfinished earlier notebook falls back to ``autograder.reference`` or PyTorch's own, as use_earlier's
    line says ("the course's reference version built on PyTorch"), never to a copy of the solutions."""
    from notebooks import NOTEBOOKS, read, solution_path

    found = {notebook: _fallbacks(read(solution_path(notebook))) for notebook in NOTEBOOKS}
    assert sum(map(len, found.values())) >= 10, found  # the parser sees the calls
    wrong = {
        notebook: [
            (earlier, source) for earlier, source in calls if not source.startswith(("autograder.reference", "torch"))
        ]
        for notebook, calls in found.items()
    }
    assert not any(wrong.values()), wrong
