"""The Triton FlashAttention kernel (``coursetools/flash_triton.py``) without Triton: Triton is not one of the
course's packages, so the kernel runs only on a GPU machine or under Triton's interpreter
(``benchmarks/flash_triton.py --interpret``, recorded in ``benchmarks/flash_triton.md``). What can be checked
here is the source: it parses, imports Triton at its top, defines the wrapper notebook 14 calls with the
signature it calls, and the benchmark script leaves importing it (and Triton) to its functions, so that it
imports where Triton is missing and the interpreter's environment variable is set before Triton is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _module(path: str) -> ast.Module:
    return ast.parse((ROOT / path).read_text(encoding="utf-8"))


def _top_level_imports(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            names.add(node.module)
    return names


def test_the_kernel_module_imports_triton_and_defines_the_wrapper():
    tree = _module("coursetools/flash_triton.py")
    assert {"triton", "triton.language"} <= _top_level_imports(tree)
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    wrapper = functions["flash_attention_triton"]
    assert [a.arg for a in wrapper.args.args] == ["q", "k", "v", "causal", "block_q", "block_k"]
    assert [ast.literal_eval(d) for d in wrapper.args.defaults] == [False, 64, 64]
    jitted = [name for name, node in functions.items() if any("jit" in ast.unparse(d) for d in node.decorator_list)]
    assert jitted, "no @triton.jit kernel"


def test_the_benchmark_imports_neither_triton_nor_the_kernel_at_its_top():
    imported = _top_level_imports(_module("benchmarks/flash_triton.py"))
    assert not {name for name in imported if name.split(".")[0] == "triton" or name == "coursetools.flash_triton"}
