"""Plausible wrong implementations, one module per notebook (``nb<notebook stem>.py``).

Each module has ``WRONG``: a list of ``Wrong(exercise, mistake, code, says)``, where
``code`` replaces the answer cell and ``says`` is a fragment the failure message must
contain, so the student is told what is wrong, not just that something is.
The code runs after ``PRELUDE``, the imports every course notebook's setup cell makes.
"""

from typing import NamedTuple


class Wrong(NamedTuple):
    exercise: str
    mistake: str
    code: str
    says: str


PRELUDE = "import math\nimport einops\nimport torch\nimport torch.nn.functional as F\nfrom torch import nn\n"
