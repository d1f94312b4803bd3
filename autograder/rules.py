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
  namespace, for what torch-function modes do not see (a plain Python function, a class). A plain Python
  function that torch-function modes do not see (``clip_grad_norm_``) also has its code swapped for code that
  refuses, so a reference kept anywhere (a default argument, a computed name) refuses too.

Either way the exercise fails with a message that quotes the rule.

Rules about what code does rather than what it names are ordinary checks that observe it, with the same
message: "no Python loops" compares the work done for a small and a large input, whatever form a loop takes
(``adapters.lines_run``, ``expect.no_loops``): the lines of the student's code run, the torch functions called
(``map(F.scaled_dot_product_attention, q, k, v)`` runs no line of its own) and the Python values handed to torch
(``torch.tensor(list(itertools.starmap(...)))``); code run from a string is refused there (``builtins``:
``exec``, ``eval``, ``compile``, read from the cell and refused by an audit hook while the code runs); "use your
attention_weights" watches its code run (``adapters.calls_of``); "no [d_k, d_k] matrices" records the shapes that
torch functions make (``adapters.shapes_made``).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import sys
from dataclasses import dataclass

from autograder.errors import RuleBroken

# Ways around the runtime switch: torch's internals (which bypass torch-function modes) and the mode machinery.
_ESCAPES = (
    "torch._C",
    "torch.ops",
    "torch.overrides",
    "torch._refs",
    "torch._prims",
    "torch._decomp",
    "torch.utils._python_dispatch",
    "torch._ops",
)
_ESCAPE_ATTRIBUTES = {
    "__torch_function__",
    "__torch_dispatch__",
    "TorchFunctionMode",
    "TorchDispatchMode",
    "_disable_torch_function",
    "DisableTorchFunction",
    "DisableTorchFunctionSubclass",
}


# Families of ready-made functions that several exercises rule out, by qualified name. Each names every route
# to the result that torch offers, not only the obvious one: a softmax is also exp(x - logsumexp(x)) or the last
# column of logcumsumexp; a LayerNorm is also instance_norm or batch_norm on transposed tokens, group_norm with
# one group, or normalize of the centred x; a ReLU is also threshold, hardtanh(0, inf) or leaky_relu with slope 0.
SOFTMAXES = (
    "torch.softmax",
    "torch.nn.functional.softmax",
    "torch.Tensor.softmax",
    "torch.special.softmax",
    "torch.nn.Softmax",
    "torch.nn.Softmax2d",
    "torch.nn.functional.softmin",
    "torch.nn.Softmin",
    "torch.nn.functional.gumbel_softmax",
    "torch._softmax",
    "torch._masked_softmax",
    "torch._safe_softmax",
    "torch.ops.aten._softmax",
    "torch.ops.aten.softmax",
    "torch.ops.aten._safe_softmax",
)
LOG_SOFTMAXES = (
    "torch.log_softmax",
    "torch.nn.functional.log_softmax",
    "torch.Tensor.log_softmax",
    "torch.special.log_softmax",
    "torch.nn.LogSoftmax",
    "torch.nn.AdaptiveLogSoftmaxWithLoss",
    "torch._log_softmax",
    "torch.logsumexp",
    "torch.Tensor.logsumexp",
    "torch.special.logsumexp",
    "torch.logcumsumexp",
    "torch.Tensor.logcumsumexp",
    "torch._logcumsumexp",
    "torch.logaddexp",
    "torch.Tensor.logaddexp",
    "torch.logaddexp2",
    "torch.Tensor.logaddexp2",
    "torch.ops.aten._log_softmax",
    "torch.ops.aten.log_softmax",
    "torch.ops.aten.logsumexp",
    "torch.ops.aten.logcumsumexp",
)
NORMS = (
    "torch.nn.functional.layer_norm",
    "torch.layer_norm",
    "torch.native_layer_norm",
    "torch.nn.LayerNorm",
    "torch.nn.functional.rms_norm",
    "torch.rms_norm",
    "torch._fused_rms_norm",
    "torch.nn.RMSNorm",
    "torch.nn.functional.group_norm",
    "torch.group_norm",
    "torch.native_group_norm",
    "torch.nn.GroupNorm",
    "torch.nn.functional.instance_norm",
    "torch.instance_norm",
    "torch.nn.InstanceNorm1d",
    "torch.nn.InstanceNorm2d",
    "torch.nn.InstanceNorm3d",
    "torch.nn.LazyInstanceNorm1d",
    "torch.nn.LazyInstanceNorm2d",
    "torch.nn.LazyInstanceNorm3d",
    "torch.nn.functional.batch_norm",
    "torch.batch_norm",
    "torch.native_batch_norm",
    "torch._native_batch_norm_legit",
    "torch._native_batch_norm_legit_no_training",
    "torch._batch_norm_impl_index",
    "torch.batch_norm_stats",
    "torch.batch_norm_elemt",
    "torch.batch_norm_gather_stats",
    "torch.batch_norm_gather_stats_with_counts",
    "torch.batch_norm_update_stats",
    "torch.cudnn_batch_norm",
    "torch.miopen_batch_norm",
    "torch.nn.BatchNorm1d",
    "torch.nn.BatchNorm2d",
    "torch.nn.BatchNorm3d",
    "torch.nn.LazyBatchNorm1d",
    "torch.nn.LazyBatchNorm2d",
    "torch.nn.LazyBatchNorm3d",
    "torch.nn.SyncBatchNorm",
    "torch.nn.functional.local_response_norm",
    "torch.nn.LocalResponseNorm",
    "torch.nn.CrossMapLRN2d",
    "torch.nn.functional.normalize",
    "torch.ops.aten.native_layer_norm",
    "torch.ops.aten.layer_norm",
    "torch.ops.aten.rms_norm",
    "torch.ops.aten._fused_rms_norm",
    "torch.ops.aten.native_group_norm",
    "torch.ops.aten.group_norm",
    "torch.ops.aten.instance_norm",
    "torch.ops.aten.batch_norm",
    "torch.ops.aten.native_batch_norm",
)
EMBEDDINGS = (
    "torch.nn.functional.embedding",
    "torch.embedding",
    "torch.nn.Embedding",
    "torch.nn.EmbeddingBag",
    "torch.nn.functional.embedding_bag",
    "torch.ops.aten.embedding",
)
ATTENTIONS = (
    "torch.nn.functional.scaled_dot_product_attention",
    "torch.nn.functional.multi_head_attention_forward",
    "torch.nn.MultiheadAttention",
)
# PyTorch's activation functions, every one (torch.nn.functional's "non-linear activations" and their modules),
# but sigmoid and tanh, which are building blocks; and the normal CDF (GELU is x times it).
_ACTIVATION_NAMES = (
    "relu",
    "relu_",
    "relu6",
    "threshold",
    "threshold_",
    "hardtanh",
    "hardtanh_",
    "leaky_relu",
    "leaky_relu_",
    "rrelu",
    "rrelu_",
    "prelu",
    "elu",
    "elu_",
    "celu",
    "celu_",
    "selu",
    "selu_",
    "gelu",
    "silu",
    "mish",
    "hardswish",
    "hardsigmoid",
    "softplus",
    "glu",
    "logsigmoid",
    "hardshrink",
    "softshrink",
    "tanhshrink",
    "softsign",
)
ACTIVATIONS = (
    tuple(f"torch.nn.functional.{name}" for name in _ACTIVATION_NAMES)
    + (
        "torch.nn.functional._threshold",
        "torch.relu",
        "torch.relu_",
        "torch.Tensor.relu",
        "torch.Tensor.relu_",
        "torch.threshold",
        "torch.threshold_",
        "torch.rrelu",
        "torch.rrelu_",
        "torch.prelu",
        "torch.Tensor.prelu",
        "torch._prelu_kernel",
        "torch.celu",
        "torch.celu_",
        "torch.selu",
        "torch.selu_",
        "torch.hardshrink",
        "torch.Tensor.hardshrink",
        "torch._add_relu",
        "torch._add_relu_",
        "torch.special.ndtr",
        "torch.special.log_ndtr",
    )
    + tuple(
        f"torch.nn.{name}"
        for name in (
            "ReLU",
            "ReLU6",
            "Threshold",
            "Hardtanh",
            "LeakyReLU",
            "RReLU",
            "PReLU",
            "ELU",
            "CELU",
            "SELU",
            "GELU",
            "SiLU",
            "Mish",
            "Hardswish",
            "Hardsigmoid",
            "Softplus",
            "GLU",
            "LogSigmoid",
            "Hardshrink",
            "Softshrink",
            "Tanhshrink",
            "Softsign",
        )
    )
    + tuple(
        f"torch.ops.aten.{name}"
        for name in ("relu", "gelu", "silu", "threshold", "hardtanh", "leaky_relu", "elu", "glu", "special_ndtr")
    )
)
# Code run from a string is code the checks of "no Python loops" could not see: the answer may not run any.
CODE_FROM_STRINGS = ("exec", "eval", "compile")


@dataclass(frozen=True)
class Rule:
    """``text`` is what the notebook says; ``forbidden`` the qualified names it rules out (and ``names``,
    ``keywords``: the student's own names, and torch keyword arguments, it rules out)."""

    text: str
    forbidden: tuple[str, ...] = ()
    names: tuple[str, ...] = ()  # the student's own earlier answers this one may not use (read from the cell)
    keywords: tuple[str, ...] = ()  # keyword arguments no torch function may be given a true value for
    builtins: tuple[str, ...] = ()  # Python builtins the student's code may not call (CODE_FROM_STRINGS)

    def to_wire(self) -> dict:
        return {
            "text": self.text,
            "forbidden": list(self.forbidden),
            "keywords": list(self.keywords),
            "builtins": list(self.builtins),
        }

    @functools.cached_property
    def _methods(self) -> set[str]:
        """Tensor methods among the forbidden names: ``x.softmax(...)`` on any object counts."""
        return {name.rsplit(".", 1)[1] for name in self.forbidden if name.startswith("torch.Tensor.")}

    @functools.cached_property
    def _leaves(self) -> set[str]:
        return {name.rsplit(".", 1)[1] for name in self.forbidden} | set(self.builtins)

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
                    if self._forbids(qualified) or _is_escape(qualified) or qualified in self._builtin_names:
                        dotted = ".".join(chain)
                        found.append(f"line {line} uses {dotted}" + (f" ({qualified})" if qualified != dotted else ""))
                        continue
                if node.attr in self._methods:
                    found.append(f"line {line} calls the method .{node.attr}")
                elif node.attr in self.builtins and chain and chain[0] in ("__builtins__", "builtins"):
                    found.append(f"line {line} uses {'.'.join(chain)}")
                elif node.attr in _ESCAPE_ATTRIBUTES:
                    found.append(f"line {line} uses {node.attr}, a way around the rule")
            elif isinstance(node, ast.Name) and node.id in _ESCAPE_ATTRIBUTES:
                found.append(f"line {line} uses {node.id}, a way around the rule")
            elif isinstance(node, ast.Name) and node.id in self.names and isinstance(node.ctx, ast.Load):
                found.append(f"line {line} uses your {node.id}")
            elif isinstance(node, ast.Name) and node.id in self.builtins and isinstance(node.ctx, ast.Load):
                found.append(f"line {line} calls {node.id}")
            elif isinstance(node, ast.keyword) and node.arg in self.keywords and _may_be_true(node.value):
                found.append(f"line {line} passes {node.arg}=")
            elif isinstance(node, ast.keyword) and node.arg is None and isinstance(node.value, ast.Dict):
                found += [
                    f"line {line} passes {key.value}= in **{{...}}"
                    for key, value in zip(node.value.keys, node.value.values, strict=True)
                    if isinstance(key, ast.Constant) and key.value in self.keywords and _may_be_true(value)
                ]
            for text in _looked_up_strings(node):
                if text.strip() in self._leaves:
                    found.append(f"line {line} looks up {text.strip()!r} by name")
                elif any(f"{leaf}(" in text or f".{leaf}" in text for leaf in self._leaves):
                    found.append(f"line {line} runs code from a string that uses {text.strip()!r}")
        return list(dict.fromkeys(found))

    @functools.cached_property
    def _builtin_names(self) -> set[str]:
        return {f"builtins.{name}" for name in self.builtins}

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


def _may_be_true(node: ast.AST) -> bool:
    """Whether a keyword's value may be true: ``enable_gqa=False`` (or 0, None) is allowed, a literal true value is
    not; an expression is left to the runtime half, which sees its value."""
    try:
        return bool(ast.literal_eval(node))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False


def _is_escape(qualified: str) -> bool:
    return any(qualified == e or qualified.startswith(e + ".") for e in _ESCAPES)


def _imports(tree: ast.AST, *, top_level_only: bool) -> dict[str, str]:
    """Local name -> qualified name, for each import in ``tree`` (or ``tree`` itself, an import)."""
    nodes = (
        [tree]
        if isinstance(tree, ast.Import | ast.ImportFrom)
        else (tree.body if top_level_only else list(ast.walk(tree)))
    )
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


_LOOKUPS = {
    "getattr",
    "attrgetter",
    "methodcaller",
    "__getattribute__",
    "__getattr__",
    "get",
    "pop",
    "eval",
    "exec",
    "compile",
    "import_module",
    "__import__",
}


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
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "join"
        and len(node.args) == 1
        and isinstance(node.args[0], ast.List | ast.Tuple)
    ):
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


@contextlib.contextmanager
def enforced(rules: list[dict], namespace: dict | None = None):
    """Refuse the forbidden functions of ``rules`` (``Rule.to_wire()`` dicts) while the block runs.

    ``namespace``: the student's globals, where an alias such as ``sm = torch.softmax`` lives.
    """
    if not rules:
        yield
        return
    with _refusing_code_from_strings(rules), _refusing_python_functions(rules), _refusing_torch(rules, namespace):
        yield


@contextlib.contextmanager
def _refusing_torch(rules: list[dict], namespace: dict | None):
    """The forbidden torch functions and keywords, refused by a torch-function mode and switched off by name."""
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
                if _keyword_value(func, keyword, args, kwargs or {}):
                    raise RuleBroken(f"this exercise's rule is: {text} (your code passed {keyword}=True)")
            return func(*args, **(kwargs or {}))

    def stand_in(original):
        def refused_call(*args, **kwargs):
            raise broken(original)

        return refused_call

    # Also switch the names off where they are looked up: torch's modules and classes, the student's globals.
    saved = [
        (owner, key, getattr(owner, key), key in vars(owner))  # ..., whether the owner held it itself
        for owner, key in owners.values()
    ]
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


def _keyword_value(func, keyword: str, args: tuple, kwargs: dict):
    """The value ``func`` was given for ``keyword``, by name or by position (None when not given)."""
    if keyword in kwargs:
        return kwargs[keyword]
    position = _parameters(func).index(keyword) if keyword in _parameters(func) else len(args)
    return args[position] if position < len(args) else None


@functools.lru_cache(maxsize=256)
def _parameters(func) -> tuple[str, ...]:
    """``func``'s parameter names: from its signature, or for a builtin, from the first line of its docstring
    (``scaled_dot_product_attention(query, key, value, attn_mask=None, ...) -> Tensor``)."""
    import inspect
    import re

    with contextlib.suppress(TypeError, ValueError):
        return tuple(inspect.signature(func).parameters)
    header = re.match(r"\s*\w+\(([^)]*)\)", getattr(func, "__doc__", None) or "")
    if header is None:
        return ()
    names = (re.match(r"\s*\*{0,2}(\w+)", part) for part in header.group(1).split(","))
    return tuple(name.group(1) for name in names if name)


# Code from exec, eval or compile, refused while a rule that says so is in force. An audit hook sees every run
# of code from a string however exec was reached (an alias, a default argument, a helper in another cell); it
# refuses only those the student's code asks for, not those of the libraries it calls.
_CODE_FROM_STRINGS_REFUSED: list[str] = []  # the texts of the rules in force that refuse them (a stack)
_AUDIT_HOOK_ADDED = []


def _refuse_code_from_strings(event: str, args) -> None:
    if (
        _CODE_FROM_STRINGS_REFUSED
        and event in ("exec", "compile")
        and is_student_code(sys._getframe(1).f_code.co_filename)
    ):
        raise RuleBroken(
            f"this exercise's rule is: {_CODE_FROM_STRINGS_REFUSED[-1]} (your code ran code from a "
            "string with exec, eval or compile)"
        )


@contextlib.contextmanager
def _refusing_code_from_strings(rules: list[dict]):
    texts = [rule["text"] for rule in rules if rule.get("builtins")]
    if not texts:
        yield
        return
    if not _AUDIT_HOOK_ADDED:  # an audit hook cannot be removed: one for the process, idle when no rule is in force
        sys.addaudithook(_refuse_code_from_strings)
        _AUDIT_HOOK_ADDED.append(True)
    _CODE_FROM_STRINGS_REFUSED.append(texts[0])
    try:
        yield
    finally:
        _CODE_FROM_STRINGS_REFUSED.pop()


@functools.lru_cache(maxsize=1)
def _library_roots() -> tuple[str, ...]:
    import os

    import autograder

    roots = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        os.path.dirname(os.path.abspath(autograder.__file__)),
    }
    return tuple(os.path.join(os.path.realpath(root), "") for root in roots) + tuple(
        os.path.join(root, "") for root in roots
    )


def is_student_code(filename: str) -> bool:
    """Whether code from ``filename`` is the student's: a notebook cell, a module of theirs, code from a string;
    not Python's, an installed library's or the course's (``<frozen ...>`` is Python's own)."""
    return not (filename.startswith("<frozen ") or filename.startswith(_library_roots()))


# Plain Python functions that torch-function modes do not see (``clip_grad_norm_``: its name is switched off,
# but a reference kept in a default argument or reached by a computed name would still run it). While the rule is
# in force their code itself is swapped for code that refuses, so every reference to them refuses.


@contextlib.contextmanager
def _refusing_python_functions(rules: list[dict]):
    swapped = []  # (function, its own code)
    for rule in rules:
        for name in rule["forbidden"]:
            for function in _unseen_python_functions(_resolve(name)):
                if all(function is not done for done, _ in swapped):
                    swapped.append((function, function.__code__))
                    function.__code__ = _refusing_code(
                        f"this exercise's rule is: {rule['text']} (your code called {name})",
                        len(function.__code__.co_freevars),
                    )
    try:
        yield
    finally:
        for function, code in reversed(swapped):
            function.__code__ = code


def _unseen_python_functions(target) -> list:
    """``target`` and the functions it wraps (``functools.wraps``'s ``__wrapped__``), when they are plain Python
    functions that do not hand themselves to torch-function modes (those are refused by the mode)."""
    import types

    chain = []
    while isinstance(target, types.FunctionType) and target not in chain:
        chain.append(target)
        target = getattr(target, "__wrapped__", None)
    if any("handle_torch_function" in function.__code__.co_names for function in chain):
        return []
    return chain


@functools.lru_cache(maxsize=64)
def _refusing_code(message: str, free_variables: int):
    """Code that raises ``message``, with as many free variables as the code it stands in for (Python requires it)."""
    cells = [f"_cell{i}" for i in range(free_variables)]
    source = (
        "def outer():\n"
        + "".join(f"    {cell} = None\n" for cell in cells)
        + "    def refused(*args, **kwargs):\n"
        + (f"        ({', '.join(cells)},)\n" if cells else "")
        + f"        raise RuntimeError({message!r})\n    return refused\n"
    )
    namespace = {}
    exec(compile(source, "<rule>", "exec"), namespace)  # noqa: S102 - our own code, built from our own text
    return namespace["outer"]().__code__
