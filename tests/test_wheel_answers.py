"""The wheel holds no answer of solutions/ (issue 54 §4, "Answers only in solutions/").

``pip install .`` ships autograder, coursetools and tinystories, so anyone with the package (a student on a
JupyterHub) can read any of its functions with ``inspect.getsource``. An answer must live only in solutions/: the
checks' oracles and injected parts are PyTorch's and Hugging Face's own, closed forms, or built at grading time
from solutions/.

The test builds the wheel from a copy of the sources (never the repository's own build/, whose build/lib keeps
files that are gone) and compares each multi-line function or class definition in its .py files (methods and
nested functions too) with each multi-line top-level definition of the answer cells of solutions/: docstrings
stripped, comments and layout normalized by ``ast.unparse``, a copy where ``difflib.SequenceMatcher``'s ratio is at
least 0.85.

A closed form is not an answer to hide: a function whose body is one ``return`` of arithmetic on its arguments,
numbers and ``math``'s functions (MFU's definition, bits per byte) is the formula the notebook's text states, and
any right answer has the same text. Such definitions are left out on both sides.
"""

from __future__ import annotations

import ast
import difflib
import shutil
import subprocess
import sys
import zipfile

import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager
from notebooks import ROOT

from coursetools.notebook_vocabulary import is_answer_cell, without_solution_markers

SIMILAR = 0.85  # SequenceMatcher.ratio of two normalized definitions at or above which one is a copy of the other

# What the wheel is built from (pyproject.toml's packages, readme and licence).
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "autograder", "coursetools", "tinystories")

# (module in the wheel, definition) pairs that still copy an answer of solutions/. This list may only shrink
# (issue 54 §4): a copy not listed here is a new leak, and a listed one that no longer matches must be removed, so
# the list stays exact.
KNOWN_COPIES = {
    # No library part fits and the oracle is the definition the notebook's text states, which any right answer spells
    # the same way. PyTorch's nn.TransformerEncoderLayer(norm_first=True) and Hugging Face's LlamaDecoderLayer build
    # their own parts under other names and masks; the checks need a block of the parts they inject, under the
    # course's names, that passes the course's mask, rope and cache through: x + attn(norm1(x)), then + ffn(norm2(x)).
    ("autograder/reference/blocks.py", "PreNormBlock"),
    ("autograder/reference/modern.py", "ModernBlock"),
    # No tokenizer library applies one merge to a word of given tokens (tokenizers' BPE starts from characters and
    # applies its whole table); grading hands this to the student's train_bpe and counts its lines of Python.
    ("autograder/reference/bpe.py", "merge_word"),
    # The mean loss over a number of drawn batches in eval mode: no library has it.
    ("autograder/reference/training.py", "evaluate"),
}

DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def normalized(node: ast.AST) -> str:
    """A definition's source without its docstrings (its own and its methods'), laid out by ``ast.unparse``."""
    for inner in ast.walk(node):
        if isinstance(inner, DEFINITIONS):
            first = inner.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                inner.body = inner.body[1:] or [ast.Pass()]
    return ast.unparse(node)


ARITHMETIC = (ast.BinOp, ast.UnaryOp, ast.Name, ast.Constant, ast.operator, ast.unaryop, ast.Load)


def is_closed_form(node: ast.AST) -> bool:
    """A function whose body (docstring aside) is one ``return`` of arithmetic on names, numbers and ``math.*``."""
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or len(node.body) != 1:
        return False
    (statement,) = node.body
    if not isinstance(statement, ast.Return) or statement.value is None:
        return False

    def math_function(inner):
        return isinstance(inner, ast.Attribute) and isinstance(inner.value, ast.Name) and inner.value.id == "math"

    allowed = []
    for inner in ast.walk(statement.value):
        if isinstance(inner, ast.Call):
            allowed.append(math_function(inner.func))
        elif isinstance(inner, ast.Attribute):
            allowed.append(math_function(inner))
        else:
            allowed.append(isinstance(inner, ARITHMETIC + (ast.Call, ast.Attribute)))
    return all(allowed)


def definitions(source: str, *, nested: bool) -> dict[str, str]:
    """Qualified name (``Class.method``) -> normalized source, for each multi-line definition in ``source``: the
    top-level ones, or all of them."""
    found = {}

    def visit(body, prefix):
        for node in body:
            if isinstance(node, DEFINITIONS):
                name = prefix + node.name
                if nested:
                    visit(node.body, name + ".")  # before ``normalized``, which drops docstrings in place
                text = normalized(node)  # drops the docstring, so the closed-form test sees the body alone
                if "\n" in text and not is_closed_form(node):
                    found[name] = text

    visit(ast.parse(source).body, "")
    return found


@pytest.fixture(scope="session")
def wheel_sources(tmp_path_factory) -> dict[str, str]:
    """Module path in the wheel -> its text, for each .py file of a wheel built from a copy of the sources."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"
    source.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=ignore)
        else:
            shutil.copy2(path, source / name)
    out = tmp / "dist"
    # Offline: no index, no build isolation (the venv's setuptools builds it), no dependencies.
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-index", "--no-build-isolation",
         "-w", str(out), str(source)],
        check=True,
        cwd=tmp,
    )  # fmt: skip
    (wheel,) = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return {name: archive.read(name).decode() for name in archive.namelist() if name.endswith(".py")}


def answer_definitions() -> dict[tuple[str, str], str]:
    """(notebook, name) -> normalized source, for each multi-line top-level definition of the answer cells."""
    python = TransformerManager()  # a cell's IPython syntax (magics, !commands) as the Python a kernel runs
    found = {}
    for path in sorted((ROOT / "solutions").glob("*/*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code" and is_answer_cell(cell):
                source = python.transform_cell(without_solution_markers(cell.source))
                for name, text in definitions(source, nested=False).items():
                    found[(path.stem, name)] = text
    return found


def copies(wheel: dict[str, str], answers: dict[tuple[str, str], str]) -> dict[tuple[str, str], tuple[str, str]]:
    """(wheel module, definition) -> the (notebook, answer) it copies, for each wheel definition that copies one."""
    ours = {
        (module, name): text
        for module, source in wheel.items()
        for name, text in definitions(source, nested=True).items()
    }
    exact = {text: answer for answer, text in answers.items()}
    found = {key: exact[text] for key, text in ours.items() if text in exact}
    for answer, text in answers.items():
        matcher = difflib.SequenceMatcher(None, autojunk=False)
        matcher.set_seq2(text)  # the answer's index is built once, for all the wheel's definitions
        for key, candidate in ours.items():
            if key in found:
                continue
            matcher.set_seq1(candidate)
            # the cheap upper bounds of ratio() first: it is quadratic
            if (
                matcher.real_quick_ratio() >= SIMILAR
                and matcher.quick_ratio() >= SIMILAR
                and matcher.ratio() >= SIMILAR
            ):
                found[key] = answer
    return found


def test_wheel_copies_no_new_answer(wheel_sources):
    "no definition in the wheel copies an answer of solutions/, beyond KNOWN_COPIES (which may only shrink)"
    answers = answer_definitions()
    assert len(answers) > 80, f"only {len(answers)} answer definitions found in solutions/"
    assert "autograder/notebooks/nb03_rope.py" in wheel_sources, sorted(wheel_sources)
    found = copies(wheel_sources, answers)
    new = {key: found[key] for key in sorted(set(found) - KNOWN_COPIES)}
    assert not new, (
        "definitions in the wheel copy answers of solutions/ (issue 54 §4: answers live only in solutions/; use "
        "PyTorch's or Hugging Face's own parts, closed forms, or build them from solutions/ at grading time): "
        + "; ".join(
            f"{module}: {name} copies {notebook}'s {answer}" for (module, name), (notebook, answer) in new.items()
        )
    )
    gone = sorted(KNOWN_COPIES - set(found))
    assert not gone, f"no longer copies of an answer: remove them from KNOWN_COPIES: {gone}"


def test_a_copy_is_found_whatever_its_docstrings_comments_and_layout():
    "the comparison itself: a copy with other docstrings, comments and line breaks, nested in a class, is found"
    answer = 'def scale(x, factor):\n    """Doc."""\n    y = x * factor  # why\n    return y.sum(dim=-1)\n'
    wheel = {
        "pkg/copy.py": "class Holder:\n    def scale(x, factor):\n        y = (x *\n             factor)\n        return y.sum(dim=-1)\n",
        "pkg/other.py": "def unrelated(path):\n    with open(path) as f:\n        return f.read().splitlines()\n",
    }
    found = copies(wheel, {("nb", "scale"): definitions(answer, nested=False)["scale"]})
    assert found == {("pkg/copy.py", "Holder.scale"): ("nb", "scale")}


@pytest.mark.parametrize(
    ("source", "closed"),
    [
        ("def mfu(t, f, p):\n    'doc'\n    return t * f / p", True),
        ("def bpb(loss, n, b):\n    return loss * n / (b * math.log(2))", True),
        ("def greedy(logits):\n    return logits.argmax(dim=-1)", False),
        ("def lr(step, w):\n    if step < w:\n        return step / w\n    return 1.0", False),
        ("def f(x):\n    return helper(x) * 2", False),
        ("def f(x):\n    return [x for _ in range(3)]", False),
    ],
)
def test_only_one_return_of_arithmetic_is_a_closed_form(source, closed):
    (node,) = ast.parse(source).body
    normalized(node)
    assert is_closed_form(node) is closed
