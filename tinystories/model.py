"""The model of a run: the course's ModernDecoder, from the solutions (exported) or from your notebook.

``build_model(config.model, vocab_size, implementation="reference")`` uses ``tinystories.course``,
generated from solutions/ by ``make export``. ``implementation="course"`` runs the answer cells of
your own ``course/08_decoder_models`` (and through its ``earlier`` cell your RMSNorm, RoPE and SwiGLU
from notebooks 02, 03 and 06), so you train what you wrote. Both have the same parameter names, so a
checkpoint of either loads into the other.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import nbformat
from torch import nn

from tinystories.errors import RunError

ROOT = Path(__file__).resolve().parent.parent
COURSE = ROOT / "course"
NOTEBOOK = "08_decoder_models"
# The answer cells --model course needs finished: grade_id -> what a student sees in the notebook.
NEEDED = {"rotary_gqa": "exercise 5 (RotaryGQA)", "modern_block": "exercise 6 (ModernBlock)",
          "modern_decoder": "exercise 7 (ModernDecoder)"}


def decoder_config(model_config, vocab_size: int, config_class):
    from tinystories.course import swiglu_hidden_dim

    return config_class(vocab_size=vocab_size, d_model=model_config.d_model, n_layers=model_config.n_layers,
                        n_heads=model_config.n_heads, d_ff=model_config.d_ff or swiglu_hidden_dim(model_config.d_model),
                        max_seq_len=model_config.context_length, n_kv_heads=model_config.n_kv_heads or None,
                        rope_base=model_config.rope_theta)


def _course_classes(folder: Path):
    from coursetools.notebook_import import load_from_notebook

    path = folder / NOTEBOOK / f"{NOTEBOOK}.ipynb"
    if not path.is_file():
        raise RunError(f"--model course needs your notebook {path}, which is not there")
    for cell in nbformat.read(path, as_version=4).cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in NEEDED and "raise NotImplementedError()" in cell.source:
            raise RunError(f"--model course trains your ModernDecoder: finish notebook 08, {NEEDED[grade_id]} "
                           f"in {path} first (it still says raise NotImplementedError())")
    try:
        # use_earlier looks for notebooks 02, 03 and 06 next to the current directory's folder.
        with contextlib.chdir(path.parent):
            return load_from_notebook(NOTEBOOK, "ModernDecoder", "DecoderConfig", folder=folder)
    except Exception as error:  # noqa: BLE001 - any failure in the student's cells is one line for them
        raise RunError(f"loading your ModernDecoder from {path} raised {type(error).__name__}: {error}") from None


def build_model(model_config, vocab_size: int, *, implementation: str = "reference",
                course_dir: str | Path | None = None) -> nn.Module:
    """A fresh ModernDecoder: "reference" (the solutions' code) or "course" (your notebook 08)."""
    if implementation == "reference":
        from tinystories.course import DecoderConfig, ModernDecoder
    elif implementation == "course":
        ModernDecoder, DecoderConfig = _course_classes(Path(course_dir or COURSE).resolve())
    else:
        raise RunError(f"unknown model implementation {implementation!r}: use reference or course")
    config = decoder_config(model_config, vocab_size, DecoderConfig)
    try:
        return ModernDecoder(config)
    except Exception as error:  # noqa: BLE001
        if implementation == "reference":
            raise
        raise RunError(f"building your ModernDecoder raised {type(error).__name__}: {error}") from None


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def load_trained(out_dir) -> tuple[nn.Module, object, object]:
    """(model in eval mode on the CPU, its tokenizer, its RunConfig) from a run's out_dir."""
    from tokenizers import Tokenizer

    from tinystories.checkpoint import load_checkpoint
    from tinystories.config import from_dict

    out = Path(out_dir)
    checkpoint_path, tokenizer_path = out / "checkpoint.pt", out / "tokenizer.json"
    for path in (checkpoint_path, tokenizer_path):
        if not path.is_file():
            raise RunError(f"{path} is missing: is {out} the out_dir of a finished run?")
    checkpoint = load_checkpoint(checkpoint_path)
    config = from_dict(checkpoint["config"], source=str(checkpoint_path))
    model = build_model(config.model, checkpoint["vocab_size"])
    model.load_state_dict(checkpoint["model"])
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    return model.eval(), tokenizer, config
