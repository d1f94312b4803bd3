"""The outputs the grading worker records for the feedback: images carry alternative text."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from autograder.outputs import NO_DESCRIPTION, _with_alt, describe_figure  # noqa: E402


def test_a_figure_is_described_by_its_titles_and_axis_labels():
    figure, (left, right) = plt.subplots(1, 2)
    figure.suptitle("LayerNorm\non three tokens")
    left.set_title("Before")
    left.set_xlabel("feature value")
    left.set_ylabel("count")
    right.set_title("After")
    figure.colorbar(right.imshow([[0, 1], [2, 3]]), ax=right, label="weight")
    assert describe_figure(figure) == (
        "Figure with 2 panels: LayerNorm on three tokens; "
        "Before (x: feature value, y: count); After; colour bar: weight"
    )
    empty = plt.figure()
    empty.add_subplot().axis("off")
    assert describe_figure(empty) == "Figure without a title or axis labels"
    plt.close("all")


def test_every_image_gets_alt_text_and_its_own_is_kept():
    data = {"image/png": "iVBOR", "text/plain": "<Figure>"}
    assert _with_alt(data, {}, "Figure: loss")["image/png"]["alt"] == "Figure: loss"
    assert _with_alt(data, {"image/png": {"alt": "theirs", "width": 3}}, NO_DESCRIPTION)["image/png"] == {
        "alt": "theirs",
        "width": 3,
    }
    assert _with_alt({"text/plain": "1"}, {}, NO_DESCRIPTION) == {}
