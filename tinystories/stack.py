"""The parts a run trains with: yours, from your notebooks, or the course's reference.

``python -m tinystories train`` trains YOUR code by default (``--stack yours``): the model of notebook 08
(``ModernDecoder``, built from your RMSNorm, RoPE and SwiGLU through that notebook's ``earlier`` cell),
from notebook 10 the loss, the optimizer, the learning-rate schedule, gradient clipping and the batches,
from notebook 11 the sampling, the cached decoder and its KV cache, and from notebook 13 each rank's
micro-batches, the FLOPs per token and MFU the run reports, bits per byte, and the loop that writes the
run's stories (``sample`` too). A run that compiles (``train.compile``) takes its loss and optimizer step from
notebook 14 instead (``masked_cross_entropy``, and ``adamw_step_`` that ``tinystories.compiled_adamw`` runs
compiled), the two written to compile to one graph, once; notebook 10's serve the runs that do not compile, and
each run loads and checks only the parts it calls (``training_keys``).
A part whose exercise is not started, fails the visible checks of its notebook's test cell, or cannot be
loaded falls back to the course's reference, and the run starts by printing which is which and why.

``--stack reference`` trains the course's reference parts (instructors, CI, benchmarks), none of them an answer
of solutions/ (issue 54 §4): PyTorch's and Hugging Face's own where they have one (``tinystories.library``: the
model and its cached twin from ``nn.RMSNorm``, Llama's rotation and SDPA; Hugging Face's KV cache and logits
processors; ``F.cross_entropy``, ``torch.optim.AdamW``, fused on a GPU, and ``clip_grad_norm_``; the FLOPs that
``FlopCounterMode`` counts), the oracles notebook 10 is graded against for the schedule and the batches, and
brute force (the stories without a cache) or closed forms for the rest. The two stacks are one program: the
same calls with the same arguments, so a run from the same seed gives the same losses to float32 rounding
(``tests/test_tinystories_train.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from coursetools.notebook_vocabulary import STUB_LINE, grade_id, is_stub_source
from tinystories.errors import RunError

if TYPE_CHECKING:
    import torch

ROOT = Path(__file__).resolve().parent.parent
COURSE = ROOT / "course"
NOT_NEEDED = "reference (not needed here)"


def _torch():
    """torch, imported once a part is needed: the command line's parser reads ``PARTS``, and a mistake in its
    arguments or its config is said before the seconds that importing torch takes."""
    import torch
    import torch.nn.functional  # noqa: F401 - the loss's reference

    return torch


def _library():
    from tinystories import library

    return library


@dataclass(frozen=True)
class Part:
    key: str  # the Stack attribute it fills
    name: str  # the definition taken from the notebook
    notebook: str
    exercises: tuple[str, ...]  # grade ids whose visible checks must pass
    reference: Callable[[], object]  # the course's part in its place (see the module's docstring)


# One row per part: reference_stack, student_stack, the run's table and --reference-parts all read these rows.
PARTS = (
    Part("model", "ModernDecoder", "08_decoder_models", ("rotary_gqa", "modern_block", "modern_decoder"),
         lambda: _library().LibraryDecoder),
    Part("loss", "cross_entropy", "10_training", ("cross_entropy",), lambda: _torch().nn.functional.cross_entropy),
    Part("optimizer", "AdamW", "10_training", ("adamw",), lambda: _torch().optim.AdamW),
    Part("schedule", "cosine_lr", "10_training", ("cosine_lr",), lambda: training_oracles().cosine_lr),
    Part("clipping", "clip_grad_norm", "10_training", ("clip_grad_norm",), lambda: _torch().nn.utils.clip_grad_norm_),
    Part("batches", "get_batch", "10_training", ("get_batch",), lambda: training_oracles().get_batch),
    Part("micro_batches", "rank_micro_batches", "13_tinystories", ("rank_micro_batches",),
         lambda: _library().rank_micro_batches),
    Part("flops", "flops_per_token", "13_tinystories", ("flops_per_token",), lambda: _library().flops_per_token),
    Part("mfu", "mfu", "13_tinystories", ("mfu",), lambda: _library().mfu),
    Part("bits_per_byte", "bits_per_byte", "13_tinystories", ("bits_per_byte",), lambda: _library().bits_per_byte),
    Part("sampling", "sample_next", "11_decoding", ("greedy_temperature", "top_k_filter", "top_p_filter", "sample_next"),
         lambda: _library().sample_next),
    Part("cached_model", "CachedDecoder", "11_decoding", ("kv_cache", "cached_attention", "cached_decoder"),
         lambda: _library().LibraryDecoder),
    Part("cache", "KVCache", "11_decoding", ("kv_cache",), lambda: _library().LibraryCache),
    Part("generation", "generate_with_cache", "13_tinystories", ("generate_with_cache",),
         lambda: _library().generate_in_segments),
    Part("compiled_loss", "masked_cross_entropy", "14_systems", ("masked_cross_entropy",), lambda: _torch().nn.functional.cross_entropy),
    Part("compiled_step", "adamw_step_", "14_systems", ("compiled_adamw",), lambda: _torch().optim.AdamW),
)
# The parts a compiled run calls in place of notebook 10's loss and optimizer (``batch_loss``, ``make_optimizer``).
COMPILED = {"loss": "compiled_loss", "optimizer": "compiled_step"}


def training_keys(compile: bool) -> list[str]:
    """The parts a training run calls: with ``train.compile``, notebook 14's loss and optimizer step in place of
    notebook 10's, which are then neither loaded, checked nor listed (and the other way round)."""
    unused = COMPILED.keys() if compile else COMPILED.values()
    return [p.key for p in PARTS if p.key not in unused]


@dataclass
class Stack:
    """What a run calls. ``model`` is the ModernDecoder class, ``config_class`` its DecoderConfig;
    ``cached_model`` the CachedDecoder that holds the trained weights for sampling, ``cache`` its KVCache;
    ``compiled_loss`` and ``compiled_step`` replace ``loss`` and ``optimizer`` in a compiled run (``COMPILED``);
    ``origins`` says, for each part, "yours" or "reference (why)"."""

    model: type
    config_class: type
    loss: object
    optimizer: type
    schedule: object
    clipping: object
    batches: object
    micro_batches: object
    flops: object
    mfu: object
    bits_per_byte: object
    sampling: object
    cached_model: type
    cache: type
    generation: object
    compiled_loss: object
    compiled_step: object
    name: str = "reference"
    origins: dict[str, str] = field(default_factory=dict)

    def make_optimizer(self, groups, *, fused: bool, compiled: bool = False, **options) -> torch.optim.Optimizer:
        """The optimizer over ``groups``: ``optimizer``, or with ``compiled`` (``train.compile``) ``compiled_step``,
        notebook 14's ``adamw_step_`` run compiled by ``CompiledAdamW``, or its reference, PyTorch's AdamW. PyTorch's
        fused AdamW kernel where asked for and it is PyTorch's."""
        from tinystories.compiled_adamw import CompiledAdamW

        optimizer = self.compiled_step if compiled else self.optimizer
        if fused and optimizer is _torch().optim.AdamW:
            options["fused"] = True
        if not isinstance(optimizer, type):  # notebook 14's adamw_step_: a function, not an optimizer class
            return CompiledAdamW(groups, optimizer, **options)
        return optimizer(groups, **options)

    def table(self) -> str:
        """One line per part this stack was resolved for (``student_stack(keys=...)`` leaves the others out)."""
        width = max(len(f"{p.key}: {p.name}") for p in PARTS)
        lines = [f"the parts of this run (--stack {self.name}):"]
        lines += [f"  {f'{p.key}: {p.name}':<{width}}  notebook {p.notebook[:2]}  {self.origins[p.key]}"
                  for p in PARTS if self.origins[p.key] != NOT_NEEDED]
        return "\n".join(lines)


def training_oracles():
    """``autograder.reference.training``: the schedule and batches notebook 10's checks grade against."""
    from autograder.reference import training

    return training


def reference_stack(reason: str = "--stack reference") -> Stack:
    stack = Stack(config_class=_library().DecoderConfig, **{p.key: p.reference() for p in PARTS})
    stack.origins = {p.key: f"reference ({reason})" for p in PARTS}
    return stack


def _stubs(path: Path) -> set[str]:
    """Grade ids of the answer cells that still hold the stub."""
    from coursetools.notebook_import import answer_cells

    return {grade_id(cell) for cell in answer_cells(path) if is_stub_source(cell.source)}


def visible_failures(path: Path, exercises: set[str]) -> dict[str, str]:
    """{grade id: the first line of why} for the exercises whose visible checks fail, as the test cells run them,
    on the cells the program loads (the demos are not run)."""
    from autograder.grading import self_check

    report, _ = self_check(path, exercises=exercises, hidden=False, definitions_only=True)
    return {r.exercise.id: r.message.splitlines()[0] for r in report.exercises if not r.passed}


def load_from(path: Path, names: list[str]) -> dict:
    """{name: value} of ``names`` as defined by the notebook at ``path`` (its preamble and answer cells run)."""
    from coursetools.notebook_import import load_from_notebook

    with contextlib.chdir(path.parent):  # the notebook's `earlier` cell looks for notebooks beside it
        values = load_from_notebook(path.parent.name, *names, folder=path.parent.parent)
    return dict(zip(names, values if len(names) > 1 else [values], strict=True))


def student_stack(course_dir: str | Path | None = None, *, check: bool = True, keys=None) -> Stack:
    """Your parts from ``course_dir`` (default course/), each replaced by the reference's where it is not
    ready. ``check=False`` skips the visible checks (tests that already know the notebooks are right);
    ``keys`` limits the work to those parts (``sample`` needs only the sampling ones), the others stay the
    reference's."""
    folder = Path(course_dir or COURSE).resolve()
    origins, yours = {p.key: NOT_NEEDED for p in PARTS}, {}
    wanted = [p for p in PARTS if keys is None or p.key in keys]
    for notebook in dict.fromkeys(p.notebook for p in wanted):
        parts = [p for p in wanted if p.notebook == notebook]
        path = folder / notebook / f"{notebook}.ipynb"
        if not path.is_file():
            origins.update({p.key: f"reference (no notebook {path})" for p in parts})
            continue
        stubs = _stubs(path)
        ready = [p for p in parts if not stubs & set(p.exercises)]
        origins.update({p.key: f"reference (not started: {', '.join(sorted(stubs & set(p.exercises)))} still "
                               f"say{'s' * (len(stubs & set(p.exercises)) == 1)} {STUB_LINE})" for p in parts if p not in ready})
        if ready and check:
            print(f"checking {', '.join(p.name for p in ready)} with notebook {notebook[:2]}'s visible checks ...",
                  flush=True)
            failures = visible_failures(path, {e for p in ready for e in p.exercises})
            for p in list(ready):
                failed = [f"{e}: {failures[e]}" for e in p.exercises if e in failures]
                if failed:
                    origins[p.key] = f"reference (failing: {failed[0]})"
                    ready.remove(p)
        if not ready:
            continue
        names = [p.name for p in ready] + (["DecoderConfig"] if any(p.key == "model" for p in ready) else [])
        try:
            loaded = load_from(path, names)
        except Exception as error:  # noqa: BLE001 - any failure in the notebook is one line for the student
            origins.update({p.key: f"reference (loading {path.name} raised {type(error).__name__}: {error})"
                            for p in ready})
            continue
        yours |= {p.key: loaded[p.name] for p in ready}
        if "DecoderConfig" in loaded:
            yours["config_class"] = loaded["DecoderConfig"]
        origins.update({p.key: "yours" for p in ready})
    values = {p.key: yours[p.key] if p.key in yours else p.reference() for p in PARTS}
    stack = Stack(config_class=yours.get("config_class") or _library().DecoderConfig, name="yours", **values)
    stack.origins = origins
    return stack


def resolve(name: str, course_dir: str | Path | None = None, keys=None, reference_parts: str = "") -> Stack:
    """``--stack yours`` or ``--stack reference``; ``reference_parts`` ("loss,optimizer"): parts to take from the
    course all the same (``--reference-parts``), without loading or checking yours; "loss" and "optimizer" name
    notebook 14's ``compiled_loss`` and ``compiled_step`` too, which a compiled run calls in their place."""
    if name == "reference":
        return reference_stack()
    if name != "yours":
        raise RunError(f"unknown stack {name!r}: use yours or reference")
    forced = [key.strip() for key in reference_parts.split(",") if key.strip()]
    unknown = sorted(set(forced) - {p.key for p in PARTS})
    if unknown:
        raise RunError(f"--reference-parts: no part {', '.join(unknown)}; the parts are "
                       f"{', '.join(p.key for p in PARTS)}")
    forced += [COMPILED[key] for key in forced if key in COMPILED]  # "loss": the loss the run calls, compiled or not
    stack = _resolve_yours(course_dir, [p.key for p in PARTS if (keys is None or p.key in keys) and p.key not in forced])
    for part in [p for p in PARTS if p.key in forced and (keys is None or p.key in keys)]:
        setattr(stack, part.key, part.reference())
        stack.origins[part.key] = "reference (--reference-parts)"
        if part.key == "model":
            stack.config_class = _library().DecoderConfig
    return stack


def _resolve_yours(course_dir, keys) -> Stack:
    """``student_stack`` for ``keys``. Under torchrun (a process group of several ranks), rank 0 alone runs the
    visible checks and sends its verdict to the others, which load the parts it found ready without checking
    them again: every process trains the same parts, and the checks cost one process's time, not one per GPU."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return student_stack(course_dir, keys=keys)
    group = dist.new_group(backend="gloo")  # objects travel on the CPU whatever the training backend
    checked = student_stack(course_dir, keys=keys) if dist.get_rank() == 0 else None
    verdict = [checked.origins if checked else None]
    dist.broadcast_object_list(verdict, src=0, group=group)
    dist.destroy_process_group(group)
    if checked:
        return checked
    origins = verdict[0]
    stack = student_stack(course_dir, check=False, keys=[key for key, origin in origins.items() if origin == "yours"])
    stack.origins = origins
    return stack
