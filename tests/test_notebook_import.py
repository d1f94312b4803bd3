"""Notebook 05 uses the RoPE written in notebook 03 through coursetools.notebook_import."""

from __future__ import annotations

import pytest
import torch
from notebooks import ROOT

from autograder.reference.rope import rope as rope_oracle
from coursetools.notebook_import import load_from_notebook


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


def test_says_what_is_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="03_rope.ipynb does not exist"):
        load_from_notebook("03_rope", "RoPE", folder=tmp_path)
    with pytest.raises(NameError, match="defines no NoSuchThing"):
        load_from_notebook("03_rope", "NoSuchThing", folder=ROOT / "solutions")
