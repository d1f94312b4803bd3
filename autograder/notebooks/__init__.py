"""One module per notebook, ``nb<notebook stem>.py``: everything the autograder knows of that notebook's exercises.

A module holds, for each exercise,
- its declaration (``Exercise``: id, title, points, rules), listed in ``EXERCISES``;
- its checks (``@EXERCISE.visible`` / ``@EXERCISE.hidden``), which run on the grader's side (the checker's process,
  or the notebook's kernel for the visible ones) and compare what the student's code returned with an oracle of
  their own: PyTorch's functions and modules, closed forms, invariances; never the course's solutions;
- its adapters (``@adapter``, ``autograder.adapters``), the only code that touches the student's objects, which
  the checks call by reference (``impl.call(adapter, ...)``) and which run beside the student's code.
Adding an exercise is its cells in the solution notebook (the text and the answer; ``tools/stamp.py`` writes the
test cell), its part of this one module, and the plausible mistakes that prove the checks reject them, in
``tests/wrong/nb<notebook stem>.py``.
"""

NOTEBOOKS = [
    "00_welcome",
    "01_tokens_embeddings",
    "02_normalization",
    "03_rope",
    "04_attention",
    "05_multihead_attention",
    "06_feed_forward",
    "07_blocks",
    "08_decoder_models",
    "09_bert_encoder_decoder",
    "10_training",
    "11_decoding",
    "12_bpe",
    "13_tinystories",
    "14_systems",
    "15_post_training",
    "16_serving_scaling",
]
