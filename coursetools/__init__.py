"""Helpers the notebooks use that are not exercises (pictures, views)."""

import logging

# torchao (notebook 16's oracle) is imported by transformers and peft whenever it is installed. At import it registers
# its enums with torch's pytree, which torch 2.13 answers with one deprecation warning per enum, and it tries to load
# its GPU kernels, warning where they cannot load: noise in every notebook and command that imports a Hugging Face
# model. These two loggers keep their errors. The course's other packages (autograder, tinystories) import this first.
for _name in ("torch.utils._pytree", "torchao"):
    logging.getLogger(_name).setLevel(logging.ERROR)
