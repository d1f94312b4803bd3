"""Train the course's modern decoder on TinyStories: `python -m tinystories train --config cpu_demo`.

By default it trains the student's own parts (``tinystories.stack``: the model of notebook 08, the loss,
optimizer, schedule, clipping and batches of notebook 10 (with ``train.compile``, the loss and optimizer step of
notebook 14)), each unfinished one replaced by the course's;
``--stack reference`` trains the reference parts, none of them an answer: the library's where PyTorch or Hugging Face
has them (``tinystories.library``), brute force, closed forms and notebook 10's oracles for the rest. The same command scales from a laptop CPU
(``cpu_demo``) to one GPU (``gpu_h100``, ``gpu_t4``) and to several with
``torchrun --nproc_per_node=N -m tinystories train``.
"""

import coursetools  # noqa: F401 - quiets torchao's import-time warnings (coursetools/__init__.py)
