"""Adapters for notebook 13: bits per byte, FLOPs per token and MFU, the ranks' micro-batches, attention maps,
a training step, generation with a KV cache.

``flops_per_token`` gets the reference ``DecoderConfig``; ``attention_maps``, ``train_step`` and
``generate_with_cache`` the reference decoder (``autograder.reference``, with its ``KVCache``), loaded with the
checker's weights, so grading never rests on notebooks 08 and 11.
"""

from __future__ import annotations

import contextlib

import torch

from autograder.adapters import need, outcome
from autograder.reference.configs import DecoderConfig
from autograder.reference.decoders import LlamaDecoder
from autograder.reference.kv_cache import KVCache
from autograder.reference.sampling import sample_next


def bits_per_byte(ns, loss: float, tokens: int, n_bytes: int):
    return need(ns, "bits_per_byte")(loss, tokens, n_bytes)


def flops(ns, fields: dict, context_length: int):
    return need(ns, "flops_per_token")(DecoderConfig(**fields), context_length)


def mfu(ns, tokens_per_second: float, flops_per_token: int, peak_flops: float):
    return need(ns, "mfu")(tokens_per_second, flops_per_token, peak_flops)


def micro_batches(ns, batch: torch.Tensor, world_size: int, accumulation_steps: int) -> list:
    """Every rank's micro-batches (a list of tensors per rank), or a sentence saying what came back instead."""
    function = need(ns, "rank_micro_batches")
    ranks = []
    for rank in range(world_size):
        value = function(batch.clone(), rank, world_size, accumulation_steps)
        if not isinstance(value, list):
            ranks.append(
                f"returned a {type(value).__name__}, expected a list of tensors"
                + (" (list(...) around torch.split's tuple)" if isinstance(value, tuple) else "")
            )
        elif not all(isinstance(part, torch.Tensor) for part in value):
            ranks.append("returned a list that holds something other than tensors")
        else:
            ranks.append([part.clone() for part in value])
    return ranks


def micro_batches_error(ns, batch: torch.Tensor, world_size: int, accumulation_steps: int) -> dict:
    return outcome(need(ns, "rank_micro_batches"), batch, 0, world_size, accumulation_steps)


class _InjectedFailure(RuntimeError):
    """Raised by the model in the middle of a forward pass, to see the hooks removed even then."""


def _hook_count(model) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def maps(ns, fields: dict, state: dict, tokens: torch.Tensor) -> dict:
    """The student's ``attention_maps`` on the reference decoder holding ``state``, and what it did: for every
    call of a ``block.attn``, whether gradients were on, how many hooks of the student's were on that module and
    whether its ``forward`` was replaced; how many times the model ran; what it left behind. Then a second call on
    a model that fails in the middle of its forward (at its last block's attention): how many hooks it left.
    Gradients are on when it is called: turning them off is the student's job, and observed."""
    attention_maps = need(ns, "attention_maps")
    model = LlamaDecoder(DecoderConfig(**fields)).eval()
    model.load_state_dict(state)
    with torch.no_grad():
        before = model(tokens)
    attn_calls, model_calls = [], []

    def at_attention(module, args):
        attn_calls.append(
            {
                "grad": torch.is_grad_enabled(),
                "forward_replaced": "forward" in vars(module),
                "hooks": len(module._forward_hooks) + len(module._forward_pre_hooks) - 1,
            }
        )

    ours = [block.attn.register_forward_pre_hook(at_attention) for block in model.blocks]
    ours.append(model.register_forward_pre_hook(lambda module, args: model_calls.append(1)))
    with torch.enable_grad():
        value = attention_maps(model, tokens)
    for handle in ours:
        handle.remove()
    hooks = _hook_count(model)
    with torch.no_grad():
        unchanged = bool(torch.equal(model(tokens), before))

    def fail(module, args):
        raise _InjectedFailure("the model failed (the grader made its last attention fail before it ran)")

    # In the middle of the forward: the earlier blocks' hooks have run, the last block's has not.
    failing = model.blocks[-1].attn.register_forward_pre_hook(fail)
    with contextlib.suppress(Exception):  # the failure, or the student's code's own error around it
        attention_maps(model, tokens)
    failing.remove()
    return {
        "maps": value,
        "hooks_left": hooks,
        "logits_unchanged": unchanged,
        "attn_calls": attn_calls,
        "model_calls": len(model_calls),
        "hooks_left_after_failure": _hook_count(model),
    }


_DTYPES = {None: None, "bfloat16": torch.bfloat16, "float16": torch.float16}
_LOSS_OPS: list = []  # the operations on the logits of the current train_step call (see _Logits)


class _Logits(torch.Tensor):
    """The model's logits as ``train_step`` receives them: every operation on them, or on what is computed from them,
    that takes more than a scalar and gives a result that requires grad (the way from the logits to the loss:
    ``.float()``, ``.flatten()``, ``F.cross_entropy``; not ``loss / k`` nor ``scaler.scale(loss)``) is recorded
    in ``_LOSS_OPS`` with whether autocast was on when it ran."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        result = super().__torch_function__(func, types, args, kwargs or {})
        with torch._C.DisableTorchFunctionSubclass():
            inputs = [a for a in (*args, *(kwargs or {}).values()) if isinstance(a, _Logits)]
            differentiable = any(
                isinstance(r, torch.Tensor) and r.requires_grad
                for r in (result if isinstance(result, tuple | list) else (result,))
            )
            if differentiable and any(a.numel() > 1 for a in inputs):
                device = inputs[0].device.type
                _LOSS_OPS.append(
                    {"op": getattr(func, "__name__", str(func)), "autocast": torch.is_autocast_enabled(device)}
                )
        return result


def _grads_left(model) -> dict:
    """How many parameters hold no gradient (None), zeros, or values."""
    left = {"none": 0, "zeros": 0, "values": 0}
    for p in model.parameters():
        left["none" if p.grad is None else "zeros" if not p.grad.any() else "values"] += 1
    return left


def train_step(
    ns,
    fields: dict,
    state: dict,
    steps: list,
    *,
    optimizer: str,
    optimizer_kwargs: dict,
    dtype: str | None = None,
    scaler: dict | None = None,
    grad_clip: float | None = None,
) -> dict:
    """The student's ``train_step`` on the reference decoder, once per entry of ``steps`` (a list of micro-batch lists).

    Reports the parameters after every call, the optimizer's update count per parameter, the scaler's scale,
    the returned losses, and, for every forward pass of the model, the autocast state it ran under and the
    dtype of its logits; the forward and backward passes in the order they ran (``"F<rows>"``, ``"B"``: a hook on
    ``lm_head.weight``, which every backward pass reaches once) and whether a backward pass ran under autocast;
    the operations that turned the logits into the
    loss, with their autocast state (``_Logits``); and what ``.grad`` held when the call returned. An error stops
    the calls and is reported with the call it happened in.
    """
    function = need(ns, "train_step")
    model = LlamaDecoder(DecoderConfig(**fields))
    model.load_state_dict(state)
    kind = {"sgd": torch.optim.SGD, "adamw": torch.optim.AdamW}[optimizer]
    opt = kind(model.parameters(), **optimizer_kwargs)
    grad_scaler = torch.amp.GradScaler("cpu", **scaler) if scaler is not None else None
    seen = _PassObserver(model)
    result = {key: [] for key in _STEP_RECORDS} | {"raised": None}
    for call, micro_batches in enumerate(steps):
        seen.clear()
        _LOSS_OPS.clear()
        try:
            loss = function(
                model,
                [(x.clone(), y.clone()) for x, y in micro_batches],
                opt,
                dtype=_DTYPES[dtype],
                scaler=grad_scaler,
                grad_clip=grad_clip,
            )
        except NotImplementedError:
            raise
        except Exception as error:  # noqa: BLE001
            result["raised"] = {"call": call, "type": type(error).__name__, "message": str(error)}
            break
        for key, value in _after_step(loss, model, opt, grad_scaler, seen).items():
            result[key].append(value)
    _LOSS_OPS.clear()
    return result


_STEP_RECORDS = (
    "losses",
    "states",
    "updates",
    "scales",
    "forwards",
    "events",
    "loss_ops",
    "backward_autocast",
    "grads_left",
)


class _PassObserver:
    """Hooks on a model that record each forward pass (autocast state, logits dtype, rows) and backward pass."""

    def __init__(self, model: torch.nn.Module):
        self.forwards, self.events, self.backward_autocast = [], [], []
        model.register_forward_hook(self._forward, with_kwargs=True)
        model.lm_head.weight.register_hook(self._backward)

    def clear(self) -> None:
        self.forwards.clear()
        self.events.clear()
        self.backward_autocast.clear()

    def _forward(self, module, args, kwargs, output):
        self.forwards.append(
            {
                "autocast": torch.is_autocast_enabled("cpu"),
                "dtype": str(torch.get_autocast_dtype("cpu")),
                "logits": str(getattr(output, "dtype", None)),
            }
        )
        tokens = next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)
        self.events.append(f"F{tokens.shape[0] if tokens is not None and tokens.dim() else '?'}")
        return output.as_subclass(_Logits) if isinstance(output, torch.Tensor) else output

    def _backward(self, grad):
        # Autocast is thread-local state that the backward pass runs with: a backward inside the with shows here.
        self.events.append("B")
        self.backward_autocast.append(torch.is_autocast_enabled("cpu"))


def _after_step(loss, model, opt, grad_scaler, seen: _PassObserver) -> dict:
    """What one call of the student's train_step left: one value per key of ``_STEP_RECORDS``."""
    return {
        "losses": loss
        if isinstance(loss, int | float)
        else {"__unsupported__": "Tensor" if isinstance(loss, torch.Tensor) else type(loss).__qualname__},
        "states": {name: p.detach().clone() for name, p in model.named_parameters()},
        "updates": sorted({int(opt.state[p]["step"]) for p in model.parameters() if "step" in opt.state.get(p, {})}),
        "scales": grad_scaler.get_scale() if grad_scaler is not None else None,
        "forwards": list(seen.forwards),
        "events": list(seen.events),
        "loss_ops": list(_LOSS_OPS),
        "backward_autocast": any(seen.backward_autocast),
        "grads_left": _grads_left(model),
    }


class _Watched(torch.nn.Module):
    """The reference decoder as a cached model, recording every call: how many positions the cache held
    before it, how many tokens it was fed, how many it held after, and whether gradients were on."""

    def __init__(self, model, calls: list):
        super().__init__()
        self.model, self.calls = model, calls

    def forward(self, tokens, cache=None):
        before = None if cache is None else getattr(cache, "length", None)
        shape = list(tokens.shape) if isinstance(tokens, torch.Tensor) else None
        logits = self.model(tokens, cache=cache)
        self.calls.append(
            {
                "cache": id(cache) if cache is not None else None,
                "before": before,
                "shape": shape,
                "after": None if cache is None else cache.length,
                "grad": torch.is_grad_enabled(),
            }
        )
        return logits


def generate_with_cache(
    ns,
    fields: dict,
    state: dict,
    prompt: torch.Tensor,
    *,
    max_new_tokens: int,
    window: int,
    eos_id: int | None = None,
    pick: dict | None = None,
) -> dict:
    """The student's ``generate_with_cache`` on the reference decoder (float64) holding ``state``, with the
    reference ``KVCache``: what it returned, every model call, the caches it asked for, and the picks it made.
    Gradients are left as they are (no ``no_grad`` here): turning them off is the student's job, and observed.
    ``pick``: None (greedy) or {"seed": s, "temperature": t, "top_k": k} (a sampler with its own generator)."""
    function = need(ns, "generate_with_cache")
    model = LlamaDecoder(DecoderConfig(**fields)).double().eval()
    model.load_state_dict(state)
    calls, caches, picks = [], [], []

    def new_cache():
        caches.append(KVCache(fields["n_layers"]))
        return caches[-1]

    generator = torch.Generator().manual_seed(pick["seed"]) if pick else None

    def chooser(logits):
        picks.append(list(logits.shape))
        if pick is None:
            return logits.argmax(dim=-1)
        return sample_next(logits, temperature=pick["temperature"], top_k=pick["top_k"], generator=generator)

    original = prompt.clone()
    value = function(
        _Watched(model, calls),
        prompt,
        max_new_tokens=max_new_tokens,
        window=window,
        new_cache=new_cache,
        eos_id=eos_id,
        pick=chooser,
    )
    for call in calls:  # which cache, as its number in the order new_cache made them
        call["cache"] = next((i for i, c in enumerate(caches) if id(c) == call["cache"]), None)
    return {
        "tokens": value,
        "calls": calls,
        "caches": len(caches),
        "picks": picks,
        "prompt_unchanged": bool(torch.equal(prompt, original)),
    }
