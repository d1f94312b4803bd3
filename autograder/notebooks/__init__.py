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

# What a worker grading the notebook imports before any student code runs, beyond what every worker imports
# (``autograder.worker.preload``): these notebooks' cells, or their adapters, import Hugging Face's models, whose
# ``modeling_utils`` takes about 3 s (benchmarks/worker_imports.md, which records what each solution's graded run
# imports). Imported once by the grader's zygote (``autograder.zygote``), whose forks are these notebooks' workers,
# a class pays it once, not per submission. A worker's imports depend on its notebook alone, forked or cold
# (notebooks with the same tuple share a zygote; tests/test_warm_workers.py), so a grade never depends on which
# notebooks were graded before it.
_HUGGING_FACE = ("transformers.modeling_utils",)
WORKER_IMPORTS: dict[str, tuple[str, ...]] = dict.fromkeys(
    [
        "03_rope",
        "08_decoder_models",
        "09_bert_encoder_decoder",
        "10_training",
        "13_tinystories",
        "15_post_training",
        "16_serving_scaling",
    ],
    _HUGGING_FACE,
)
