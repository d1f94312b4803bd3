"""Rules an exercise states ("do not call F.softmax"), declared once in its registry entry and enforced twice.

A ``Rule`` names the library functions and classes an exercise forbids, by qualified name
(``"torch.nn.functional.softmax"``, ``"torch.Tensor.softmax"``), with the sentence the notebook says.

- **On the grader's side**, before any check runs, ``Rule.violations`` reads the submitted answer cell's
  source: a forbidden name reached through any import alias (``from torch.nn import functional as G``;
  ``G.softmax``), the method form (``x.softmax``), a direct import (even inside a function), a name
  spelled as a string (``getattr(torch, "soft" + "max")``), or a way around the runtime switch (``torch._C``,
  ``torch.ops``, torch-function or dispatch modes). Student code cannot touch this: it runs elsewhere.
- **While the student's code runs** for that exercise's checks (``enforced``): a ``TorchFunctionMode``
  refuses every forbidden torch function however it is reached (an alias taken before the check, a helper
  in another cell), and the names themselves are switched off in torch's modules and in the student's
  namespace, for what torch-function modes do not see (a plain Python function, a class).

Either way the exercise fails with a message that quotes the rule.

Rules about what code does rather than what it names are ordinary checks that observe it, with the same
message: "no Python loops" counts the lines of notebook code run for a small and a large input
(``adapters.lines_run``, ``expect.no_loops``); "no [d_k, d_k] matrices" records the shapes that torch
functions make (``adapters.shapes_made``).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import sys
from dataclasses import dataclass

# Ways around the runtime switch: torch's internals (which bypass torch-function modes) and the mode machinery.
_ESCAPES = ("torch._C", "torch.ops", "torch.overrides", "torch._refs", "torch._prims", "torch._decomp",
            "torch.utils._python_dispatch", "torch._ops")
_ESCAPE_ATTRIBUTES = {"__torch_function__", "__torch_dispatch__", "TorchFunctionMode", "TorchDispatchMode",
                      "_disable_torch_function", "DisableTorchFunction", "DisableTorchFunctionSubclass"}


# Families of ready-made functions that several exercises rule out, by qualified name.
SOFTMAXES = ("torch.softmax", "torch.nn.functional.softmax", "torch.Tensor.softmax", "torch.special.softmax",
             "torch.nn.Softmax", "torch.nn.functional.softmin", "torch.nn.Softmin", "torch._softmax",
             "torch.ops.aten._softmax", "torch.ops.aten.softmax", "torch.ops.aten._safe_softmax")
LOG_SOFTMAXES = ("torch.log_softmax", "torch.nn.functional.log_softmax", "torch.Tensor.log_softmax",
                 "torch.special.log_softmax", "torch.nn.LogSoftmax", "torch._log_softmax",
                 "torch.logsumexp", "torch.Tensor.logsumexp", "torch.special.logsumexp",
                 "torch.ops.aten._log_softmax", "torch.ops.aten.log_softmax", "torch.ops.aten.logsumexp")
NORMS = ("torch.nn.functional.layer_norm", "torch.layer_norm", "torch.native_layer_norm", "torch.nn.LayerNorm",
         "torch.nn.functional.rms_norm", "torch.rms_norm", "torch.nn.RMSNorm", "torch.nn.functional.group_norm",
         "torch.nn.GroupNorm", "torch.ops.aten.native_layer_norm", "torch.ops.aten.layer_norm",
         "torch.ops.aten.rms_norm", "torch.ops.aten._fused_rms_norm")
EMBEDDINGS = ("torch.nn.functional.embedding", "torch.embedding", "torch.nn.Embedding", "torch.nn.EmbeddingBag",
              "torch.nn.functional.embedding_bag", "torch.ops.aten.embedding")
ATTENTIONS = ("torch.nn.functional.scaled_dot_product_attention", "torch.nn.functional.multi_head_attention_forward",
              "torch.nn.MultiheadAttention")


@dataclass(frozen=True)
class Rule:
    """``text`` is what the notebook says; ``forbidden`` the qualified names it rules out (and ``names``,
    ``keywords``: the student's own names, and torch keyword arguments, it rules out)."""

    text: str
    forbidden: tuple[str, ...] = ()
    names: tuple[str, ...] = ()  # the student's own earlier answers this one may not use (read from the cell)
    keywords: tuple[str, ...] = ()  # keyword arguments no torch function may be given a true value for

    def to_wire(self) -> dict:
        return {"text": self.text, "forbidden": list(self.forbidden), "keywords": list(self.keywords)}

    @functools.cached_property
    def _methods(self) -> set[str]:
        """Tensor methods among the forbidden names: ``x.softmax(...)`` on any object counts."""
        return {name.rsplit(".", 1)[1] for name in self.forbidden if name.startswith("torch.Tensor.")}

    @functools.cached_property
    def _leaves(self) -> set[str]:
        return {name.rsplit(".", 1)[1] for name in self.forbidden}

    def violations(self, source: str, context: list[str] = ()) -> list[str]:
        """What in ``source`` (an answer cell) breaks the rule, one phrase each, with its line.

        ``context``: the notebook's other cells, for the aliases their imports define (``F``, ``nn``).
        """
        try:
            tree = _parse(source)
        except SyntaxError:
            return []  # the cell fails to run; its checks say so
        aliases = _context_aliases(tuple(context)) | _imports(tree, top_level_only=False)
        found = []
        for node in ast.walk(tree):
            line = getattr(node, "lineno", "?")
            if isinstance(node, ast.Import | ast.ImportFrom):
                for name, qualified in _imports(node, top_level_only=False).items():
                    if self._forbids(qualified) or _is_escape(qualified):
                        found.append(f"line {line} imports {qualified} (as {name})")
            elif isinstance(node, ast.Attribute):
                chain = _chain(node)
                if chain and chain[0] in aliases:
                    qualified = ".".join([aliases[chain[0]], *chain[1:]])
                    if self._forbids(qualified) or _is_escape(qualified):
                        dotted = ".".join(chain)
                        found.append(f"line {line} uses {dotted}" + (f" ({qualified})" if qualified != dotted else ""))
                        continue
                if node.attr in self._methods:
                    found.append(f"line {line} calls the method .{node.attr}")
                elif node.attr in _ESCAPE_ATTRIBUTES:
                    found.append(f"line {line} uses {node.attr}, a way around the rule")
            elif isinstance(node, ast.Name) and node.id in _ESCAPE_ATTRIBUTES:
                found.append(f"line {line} uses {node.id}, a way around the rule")
            elif isinstance(node, ast.Name) and node.id in self.names and isinstance(node.ctx, ast.Load):
                found.append(f"line {line} uses your {node.id}")
            elif isinstance(node, ast.keyword) and node.arg in self.keywords:
                found.append(f"line {line} passes {node.arg}=")
            for text in _looked_up_strings(node):
                if text.strip() in self._leaves:
                    found.append(f"line {line} looks up {text.strip()!r} by name")
                elif any(f"{leaf}(" in text or f".{leaf}" in text for leaf in self._leaves):
                    found.append(f"line {line} runs code from a string that uses {text.strip()!r}")
        return list(dict.fromkeys(found))

    def _forbids(self, qualified: str) -> bool:
        if qualified in self.forbidden:
            return True
        target = _resolve(qualified)
        return target is not None and any(target is _resolve(name) for name in self.forbidden)

    def message(self, violations: list[str]) -> str:
        return f"this exercise's rule is: {self.text}; your answer cell breaks it: {'; '.join(violations)}"


@functools.lru_cache(maxsize=16)
def _context_aliases(context: tuple[str, ...]) -> dict[str, str]:
    """The names the notebook's other cells import (``F``, ``nn``), parsed once per notebook, not per rule."""
    aliases = {"torch": "torch"}
    for text in context:
        with contextlib.suppress(SyntaxError):
            aliases |= _imports(_parse(text), top_level_only=True)
    return aliases


def _parse(source: str) -> ast.Module:
    """A cell as Python, as the kernel runs it: IPython syntax (``%time``, ``!ls``) turned into calls first."""
    from IPython.core.inputtransformer2 import TransformerManager

    return ast.parse(TransformerManager().transform_cell(source))


def _is_escape(qualified: str) -> bool:
    return any(qualified == e or qualified.startswith(e + ".") for e in _ESCAPES)


def _imports(tree: ast.AST, *, top_level_only: bool) -> dict[str, str]:
    """Local name -> qualified name, for each import in ``tree`` (or ``tree`` itself, an import)."""
    nodes = [tree] if isinstance(tree, ast.Import | ast.ImportFrom) else (
        tree.body if top_level_only else list(ast.walk(tree)))
    found = {}
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    found[alias.asname] = alias.name
                else:
                    root = alias.name.split(".")[0]
                    found[root] = root
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                found[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return found


def _chain(node: ast.Attribute) -> list[str] | None:
    """``a.b.c`` as ["a", "b", "c"]; None when the chain does not start at a plain name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return [node.id, *reversed(parts)] if isinstance(node, ast.Name) else None


_LOOKUPS = {"getattr", "attrgetter", "methodcaller", "__getattribute__", "__getattr__", "get", "pop",
            "eval", "exec", "compile", "import_module", "__import__"}


def _looked_up_strings(node: ast.AST) -> list[str]:
    """Constant strings that ``node`` uses to look something up: getattr's name, a dict key, eval's code.

    Not every string: ``print("softmax")`` is allowed."""
    if isinstance(node, ast.Subscript):
        candidates = [node.slice]
    elif isinstance(node, ast.Call):
        function = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        candidates = [*node.args, *(k.value for k in node.keywords)] if function in _LOOKUPS else []
    else:
        return []
    return [text for text in map(_constant_string, candidates) if text is not None]


def _constant_string(node: ast.AST) -> str | None:
    """The value of a string built only from constants: "softmax", "soft" + "max", "".join(["soft", "max"])."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _constant_string(node.left), _constant_string(node.right)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.JoinedStr):
        parts = [_constant_string(v) for v in node.values]
        return None if None in parts else "".join(parts)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "join"
            and len(node.args) == 1 and isinstance(node.args[0], ast.List | ast.Tuple)):
        separator = _constant_string(node.func.value)
        parts = [_constant_string(e) for e in node.args[0].elts]
        return None if separator is None or None in parts else separator.join(parts)
    return None


def _resolve(qualified: str):
    """The object a ``torch...`` name stands for, or None (only torch's own names are ever looked up)."""
    parts = qualified.split(".")
    if parts[0] != "torch" or "torch" not in sys.modules:
        return None
    value = sys.modules["torch"]
    for part in parts[1:]:
        try:
            value = getattr(value, part)
        except Exception:  # noqa: BLE001 - not a name torch has
            return None
    return value


# --- while the student's code runs ---------------------------------------------------------------


class RuleBroken(RuntimeError):
    """Raised inside the student's code when it calls what the exercise's rule forbids."""


@contextlib.contextmanager
def enforced(rules: list[dict], namespace: dict | None = None):
    """Refuse the forbidden functions of ``rules`` (``Rule.to_wire()`` dicts) while the block runs.

    ``namespace``: the student's globals, where an alias such as ``sm = torch.softmax`` lives.
    """
    if not rules:
        yield
        return
    from torch.overrides import TorchFunctionMode

    refused = {}  # id(object) -> (its qualified name, the rule's text, the object)
    owners = {}  # (id(owner), attribute name) -> (module or class, attribute name) where a name is looked up
    keywords = {keyword: rule["text"] for rule in rules for keyword in rule.get("keywords", ())}
    for rule in rules:
        for name in rule["forbidden"]:
            target = _resolve(name)
            owner, key = _resolve(name.rsplit(".", 1)[0]), name.rsplit(".", 1)[1]
            if target is not None and owner is not None:
                refused[id(target)] = (name, rule["text"], target)
                owners[id(owner), key] = (owner, key)

    def broken(value) -> RuleBroken | None:
        entry = refused.get(id(value))
        if entry is None or entry[2] is not value:
            return None
        return RuleBroken(f"this exercise's rule is: {entry[1]} (your code called {entry[0]})")

    class Refuse(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if error := broken(func):
                raise error
            for keyword, text in keywords.items():
                if (kwargs or {}).get(keyword):
                    raise RuleBroken(f"this exercise's rule is: {text} (your code passed {keyword}=True)")
            return func(*args, **(kwargs or {}))

    def stand_in(original):
        def refused_call(*args, **kwargs):
            raise broken(original)

        return refused_call

    # Also switch the names off where they are looked up: torch's modules and classes, the student's globals.
    saved = [(owner, key, getattr(owner, key), key in vars(owner))  # ..., whether the owner held it itself
             for owner, key in owners.values()]
    if namespace is not None:
        saved += [(namespace, key, value, True) for key, value in list(namespace.items()) if broken(value)]
    for owner, key, value, _ in saved:
        _put(owner, key, stand_in(value))
    try:
        with Refuse():
            yield
    finally:
        for owner, key, value, held in reversed(saved):
            if held:
                _put(owner, key, value)
            else:  # a method inherited from torch's C base class: remove the stand-in to uncover it
                delattr(owner, key)


def _put(owner, key: str, value) -> None:
    if isinstance(owner, dict):
        owner[key] = value
    else:
        setattr(owner, key, value)
