"""The optimizer of a compiled run (``train.compile``): notebook 14's ``adamw_step_`` under ``torch.compile``.

Notebook 10's AdamW cannot be compiled: its learning rate reaches the update as a Python number, which Dynamo
bakes into the graph, so every step of the schedule compiles again, or, past the recompile limit, runs eagerly
(``benchmarks/optimizer_compile.md``). Notebook 14's ``adamw_step_(params, grads, exp_avgs, exp_avg_sqs, step,
lr, ...)`` takes the step count and the learning rate as 0-D tensors, which are inputs of its graph: this class
writes each step's learning rate into that tensor in place, and Dynamo compiles the step once per parameter group
(the two groups differ in their weight decay and their tensors' shapes, which the graph is specialised on).

The state is torch.optim.AdamW's, in ``self.state``: per parameter ``step``, ``exp_avg`` and ``exp_avg_sq``, so
``state_dict``, ``load_state_dict`` and a resumed run work as with PyTorch's. One difference: ``adamw_step_``
counts one step for its whole list, so the parameters of a group share ONE step tensor, the same object in each
of their states (``torch.save`` keeps it one tensor). This program gives every parameter a gradient at every
step, so each parameter's count is torch.optim.AdamW's; a parameter that sometimes had none would count the
group's steps, not its own.
"""

from __future__ import annotations

import torch


class CompiledAdamW(torch.optim.Optimizer):
    """AdamW whose update is ``step_fn`` (notebook 14's ``adamw_step_``) compiled; ``lr``, ``betas``, ``eps`` and
    ``weight_decay`` as torch.optim.AdamW's, per parameter group."""

    def __init__(self, params, step_fn, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, backend="inductor"):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        # One compiled function; Dynamo keeps a graph per group, told apart by its guards. dynamic=False: the
        # second group's other shapes would otherwise make Dynamo recompile with symbolic shapes (slower kernels).
        self.compiled = torch.compile(step_fn, backend=backend, dynamic=False)
        self.lr_tensors: dict[int, torch.Tensor] = {}  # per group: its learning rate, an input of the graph

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for index, group in enumerate(self.param_groups):
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            step = self._shared_step(params)
            lr = self.lr_tensors.setdefault(index, torch.zeros((), device=params[0].device))
            lr.fill_(group["lr"])  # the schedule's value, in place: the graph reads it, nothing recompiles
            beta1, beta2 = group["betas"]
            self.compiled(params, [p.grad for p in params], [self.state[p]["exp_avg"] for p in params],
                          [self.state[p]["exp_avg_sq"] for p in params], step, lr, beta1, beta2, group["eps"],
                          group["weight_decay"])
        return loss

    def _shared_step(self, params: list[torch.Tensor]) -> torch.Tensor:
        """The group's step count, put in every parameter's state (and their moments, zero at first): a 0-D float32
        tensor on the parameters' device, as PyTorch's fused AdamW keeps it. After ``load_state_dict`` (which may
        give each parameter its own copy, or a Python number from an AdamW of notebook 10) it is the first
        parameter's, which the others equal."""
        device = params[0].device
        step = torch.as_tensor(self.state[params[0]].get("step", 0), dtype=torch.float32, device=device)
        for p in params:
            state = self.state[p]
            if "exp_avg" not in state:
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["step"] = step
        return step
