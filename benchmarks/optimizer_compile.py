"""Can ``torch.compile`` take a student's optimizer step without recompiling as the learning rate changes?

    .venv/bin/python benchmarks/optimizer_compile.py --output benchmarks/optimizer_compile

Issue 38 §1: on an H100 the student's stack trains at 0.85-0.89x the reference's tokens/s, and PyTorch's fused
AdamW in place of notebook 10's loop gives 0.93x (benchmarks/tinystories_gpu.md). Compiling the student's
``step`` would close that part only if the schedule's new learning rate each step did not recompile it. This
counts the graphs Dynamo compiles (``CompileCounterWithBackend``, Inductor behind it) over a few calls whose
learning rate changes at every call:

- one line of an update each, for the ways a learning rate reaches a tensor operation (a scalar argument such
  as ``value=-lr``, a factor ``lr * x``, a decay factor ``1 - lr * wd`` with ``wd`` 0.1 and with 0.0, as the
  no-decay group has);
- the solution's ``AdamW.step`` (notebook 10) over a small model, two parameter groups and a cosine schedule,
  with Inductor's own decompositions and with ``addcdiv`` decomposed too (its ``value=`` then becomes a
  product, which Dynamo could keep symbolic).

CPU only: the graph count does not depend on the device. Writes OUTPUT.json and OUTPUT.md.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

import torch
from torch._dynamo.testing import CompileCounterWithBackend

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import command, machine, now  # noqa: E402
from tinystories.stack import student_stack  # noqa: E402

CALLS = 6  # each with a new learning rate


def _decay(p, x, lr, wd):
    p.mul_(1 - lr * wd)


UPDATES = {  # name -> (update, weight decay)
    "p.addcdiv_(x, x + 1, value=-lr)": (lambda p, x, lr, wd: p.addcdiv_(x, x + 1, value=-lr), 0.0),
    "p.add_(x, alpha=-lr)": (lambda p, x, lr, wd: p.add_(x, alpha=-lr), 0.0),
    "p.sub_(lr * x)": (lambda p, x, lr, wd: p.sub_(lr * x), 0.0),
    "p.mul_(1 - lr * wd), wd = 0.1": (_decay, 0.1),
    "p.mul_(1 - lr * wd), wd = 0.0": (_decay, 0.0),
}


def graphs_of_update(update, wd: float) -> int:
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(update, backend=counter)
    p, x = torch.ones(8), torch.full((8,), 0.5)
    for call in range(CALLS):
        compiled(p, x, 1e-3 * (call + 1), wd)
    return counter.frame_count


def inductor_with_addcdiv_decomposed():
    from torch._decomp import get_decompositions
    from torch._inductor.compile_fx import compile_fx
    from torch._inductor.decomposition import select_decomp_table

    aten = torch.ops.aten
    table = {**select_decomp_table(), **get_decompositions([aten.addcdiv, aten.addcdiv_])}
    return functools.partial(compile_fx, decompositions=table)


def graphs_of_adamw(backend, decays: tuple[float, ...]) -> tuple[int, list[float]]:
    """(graphs compiled over CALLS steps of the solution's AdamW, one parameter group per weight decay in
    ``decays``; after each step, the largest difference of the parameters from the same steps run eagerly).
    The learning rate rises by 1e-3 a step, so a step that applies a stale one differs by about a step's size."""
    adamw = student_stack(ROOT / "solutions", check=False, keys=("optimizer",)).optimizer

    def steps(compiled: bool) -> list[list[torch.Tensor]]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4))
        params = [[p for p in model.parameters() if p.dim() >= 2], [p for p in model.parameters() if p.dim() < 2]]
        if len(decays) == 1:
            params = [params[0] + params[1]]
        groups = [{"params": group, "weight_decay": decay} for group, decay in zip(params, decays, strict=True)]
        optimizer = adamw(groups, lr=1e-3, betas=(0.9, 0.95))
        step = torch.compile(optimizer.step, backend=counter) if compiled else optimizer.step
        x = torch.randn(32, 16, generator=torch.Generator().manual_seed(1))
        after = []
        for call in range(CALLS):
            for group in optimizer.param_groups:
                group["lr"] = 1e-3 * (call + 1)
            model(x).square().mean().backward()
            step()
            optimizer.zero_grad(set_to_none=True)
            after.append([p.detach().clone() for p in model.parameters()])
        return after

    torch._dynamo.reset()
    counter = CompileCounterWithBackend(backend)
    eager, compiled = steps(False), steps(True)
    differences = [max((a - b).abs().max().item() for a, b in zip(e, c, strict=True))
                   for e, c in zip(eager, compiled, strict=True)]
    return counter.frame_count, differences


ADAMW = {  # name -> (backend, weight decay of each parameter group)
    "notebook 10's AdamW.step, groups with weight decay 0.1 and 0.0, Inductor": (lambda: "inductor", (0.1, 0.0)),
    "the same with addcdiv decomposed": (lambda: inductor_with_addcdiv_decomposed(), (0.1, 0.0)),
    "notebook 10's AdamW.step, one group with weight decay 0.1, Inductor": (lambda: "inductor", (0.1,)),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", default="benchmarks/optimizer_compile")
    args = parser.parse_args()
    rows = [{"code": name, "graphs": graphs_of_update(*UPDATES[name])} for name in UPDATES]
    for name, (backend, decays) in ADAMW.items():
        graphs, differences = graphs_of_adamw(backend(), decays)
        rows.append({"code": name, "graphs": graphs, "difference_from_eager_after_each_step": differences})
    result = {"date": now(), "command": command(), "machine": machine(), "calls": CALLS,
              "specialize_float": torch._dynamo.config.specialize_float,
              "recompile_limit": torch._dynamo.config.recompile_limit, "rows": rows}
    Path(f"{args.output}.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = ["# A student's optimizer step under torch.compile while the learning rate changes", "",
             f"`{result['command']}` ({result['date']}; {result['machine']}; Dynamo's specialize_float "
             f"{result['specialize_float']}, recompile limit {result['recompile_limit']})", "",
             f"| code, called {CALLS} times with a new learning rate each "
             "| graphs compiled (Dynamo's frames, restarts included) |", "|---|---:|"]
    lines += [f"| `{row['code']}` | {row['graphs']} |" for row in rows if "difference_from_eager_after_each_step" not in row]
    lines += [f"| {row['code']} | {row['graphs']} |" for row in rows if "difference_from_eager_after_each_step" in row]
    lines += ["", "The AdamW rows' parameters against the same steps run eagerly (the learning rate rises by 1e-3 a step):",
              "", "| code | largest difference after each step |", "|---|---|"]
    lines += [f"| {row['code']} | {', '.join(f'{d:.1e}' for d in row['difference_from_eager_after_each_step'])} |"
              for row in rows if "difference_from_eager_after_each_step" in row]
    Path(f"{args.output}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
