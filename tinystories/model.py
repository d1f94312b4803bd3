"""The model of a run: the ModernDecoder of its stack (tinystories.stack), yours or the course's.

Both have the same parameter names, so a checkpoint of either loads into the other.
"""

from __future__ import annotations

from pathlib import Path

from torch import nn

from tinystories.errors import RunError


def decoder_config(model_config, vocab_size: int, config_class):
    return config_class(vocab_size=vocab_size, d_model=model_config.d_model, n_layers=model_config.n_layers,
                        n_heads=model_config.n_heads, d_ff=model_config.d_ff,
                        max_seq_len=model_config.context_length, n_kv_heads=model_config.n_kv_heads or None,
                        rope_base=model_config.rope_theta)


def build_model(model_config, vocab_size: int, *, stack=None) -> nn.Module:
    """A fresh ModernDecoder of ``stack`` (default: the course's reference)."""
    from tinystories.stack import reference_stack

    stack = stack or reference_stack()
    config = decoder_config(model_config, vocab_size, stack.config_class)
    try:
        return stack.model(config)
    except Exception as error:  # noqa: BLE001 - a failure in the student's class is one line for them
        if stack.origins.get("model") != "yours":
            raise
        raise RunError(f"building your ModernDecoder raised {type(error).__name__}: {error} "
                       "(--stack reference trains the course's)") from None


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
