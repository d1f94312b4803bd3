"""Notebook 16's quantization parts given to the checks of ``QuantizedLinear`` in place of the student's, so that
exercise is graded on its own. They are recorded, not written: the checks compute on the grader's side, with torchao
as the checks of those parts do, what each part returns for the weight of the layer they build, and the layer's code
is given functions that return those results for those arguments and refuse any others. No quantization code runs
here, and none of the notebook's answers ships in the package.
"""

from __future__ import annotations

import inspect

import torch

# The notebook's parts: their parameters, in order, with the defaults the notebook gives them.
PARTS = {
    "quantize_int8": inspect.Signature([inspect.Parameter("weight", inspect.Parameter.POSITIONAL_OR_KEYWORD)]),
    "dequantize_int8": inspect.Signature(
        [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in ("q", "scale")]
    ),
    "quantize_int4": inspect.Signature(
        [
            inspect.Parameter("weight", inspect.Parameter.POSITIONAL_OR_KEYWORD),
            inspect.Parameter("group_size", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=32),
        ]
    ),
    "dequantize_int4": inspect.Signature(
        [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in ("q", "scales", "zeros")]
    ),
    "pack_int4": inspect.Signature([inspect.Parameter("q", inspect.Parameter.POSITIONAL_OR_KEYWORD)]),
    "unpack_int4": inspect.Signature([inspect.Parameter("packed", inspect.Parameter.POSITIONAL_OR_KEYWORD)]),
}


def _same(given, recorded) -> bool:
    """The same value: tensors of one shape and equal entries (whatever their dtype), or equal numbers."""
    if isinstance(recorded, torch.Tensor):
        return (
            isinstance(given, torch.Tensor)
            and given.shape == recorded.shape
            and torch.equal(given.detach().to(torch.float64), recorded.to(torch.float64))
        )
    return given == recorded


class Recorded:
    """A part known by its calls: ``calls`` lists (arguments, result) pairs, the arguments in ``PARTS[name]``'s order."""

    def __init__(self, name: str, calls):
        self.__name__ = self.__qualname__ = name
        self.signature = PARTS[name]
        self.calls = [(list(arguments), result) for arguments, result in calls]

    def __call__(self, *args, **kwargs):
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        for arguments, result in self.calls:
            if len(arguments) == len(bound.args) and all(map(_same, bound.args, arguments)):
                if isinstance(result, (list, tuple)):
                    return tuple(r.clone() for r in result)
                return result.clone()
        for arguments, _ in self.calls:  # the same tensors, another number: say which
            if len(arguments) == len(bound.args) and all(
                _same(given, recorded)
                for given, recorded in zip(bound.args, arguments, strict=True)
                if isinstance(recorded, torch.Tensor)
            ):
                name, given, recorded = next(
                    (name, given, recorded)
                    for name, given, recorded in zip(self.signature.parameters, bound.args, arguments, strict=True)
                    if not _same(given, recorded)
                )
                raise ValueError(f"{self.__name__} was called with {name}={given!r}, but the layer's is {recorded!r}")
        raise ValueError(
            f"the course's {self.__name__}, given to your QuantizedLinear while it is checked, knows only the values "
            f"of the checked layer's weight: call it on the layer's weight (and on what the course's parts returned)"
        )


def given_parts(records: dict) -> dict:
    """Every part of ``PARTS`` as a ``Recorded`` of ``records`` (name -> calls; a part not recorded refuses every call)."""
    return {name: Recorded(name, records.get(name, ())) for name in PARTS}
