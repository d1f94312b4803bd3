"""Checks, one module per notebook: ``nb<notebook stem>.py`` with a list ``EXERCISES``.

These run in the checker's process (or the notebook's kernel, for visible feedback)
and compare what the student's code returned with an oracle of their own: PyTorch's
functions and modules, closed forms, invariances. Never with the course's solutions.
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
]
