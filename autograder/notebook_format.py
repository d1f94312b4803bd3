"""``nbformat``, imported without the one slow import it never uses.

nbformat validates notebooks with jsonschema, and importing jsonschema imports ``rfc3987_syntax`` (when
installed, as it is here: jupyter-events asks for it) only to register the "iri" and "iri-reference"
*format* checks; that import builds a Lark grammar, which takes 1 to 5 seconds, more than the rest of
``python -m autograder check``'s own imports. nbformat's schemas use no ``format`` keyword and it passes
no format checker, so nothing here needs it. When jsonschema is not imported yet, this makes that one
optional import fail while nbformat (and jsonschema) load, then lets it be imported normally again:
jsonschema skips those two format checks in this process, as it does wherever the package is missing.

The course's lock holds jsonschema below 4.25, so ``rfc3987_syntax`` is not installed there and every process
(nbgrader's, Jupyter's) is spared it; this keeps ``check`` fast where the course runs on another environment's
newer jsonschema (Colab, an instructor's own).

    from autograder.notebook_format import nbformat
"""

from __future__ import annotations

import sys

SKIPPED = "rfc3987_syntax"


def _import_nbformat():
    if "jsonschema" in sys.modules or SKIPPED in sys.modules:
        import nbformat

        return nbformat
    sys.modules[SKIPPED] = None  # `import rfc3987_syntax` raises ImportError, which jsonschema expects
    try:
        import nbformat
    finally:
        if sys.modules.get(SKIPPED, 0) is None:
            del sys.modules[SKIPPED]
    return nbformat


nbformat = _import_nbformat()
