"""Command line: `python -m tinystories {train,preflight,prepare,sample}` (see `--help`).

A user error (bad config, missing data, a checkpoint in the way, out of GPU memory) prints one line
``error: ...`` and exits with status 2, without a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from tinystories.errors import RunError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tinystories", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    def common(sub, *, config_default):
        sub.add_argument("--config", default=config_default,
                         help="a name in tinystories/configs/ (cpu_demo, gpu_h100, gpu_t4) or a .toml path")
        sub.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                         help="override one config value, e.g. --set train.max_steps=200 (repeatable)")
        sub.add_argument("--out", help="the run's folder (config out_dir)")
        sub.add_argument("--quiet", action="store_true", help="no progress bars")

    def stack_options(sub, *, course_help="the folder holding your notebooks (default course/)"):
        from tinystories.stack import PARTS

        sub.add_argument("--stack", choices=("yours", "reference"), default="yours",
                         help="yours (default): the parts of your notebooks (08, 10, 11, 13; 14 with train.compile), "
                              "each unfinished one replaced by the course's reference; reference: only the reference "
                              "parts (no answers: the library's)")
        sub.add_argument("--course-dir", default=None, help=course_help)
        sub.add_argument("--reference-parts", default="", metavar="PART,PART",
                         help="with --stack yours, take these parts from the course all the same, e.g. "
                              "loss,optimizer,clipping: PyTorch's fused versions, for speed on a GPU (loss and "
                              "optimizer also name compiled_loss and compiled_step, notebook 14's, which a run with "
                              "train.compile calls in their place). Parts: " + ", ".join(p.key for p in PARTS))

    train = commands.add_parser("train", help="train (or, with --resume, continue) a run")
    common(train, config_default=None)
    stack_options(train, course_help="the folder holding your notebooks (default course/; with --set "
                                     "data.tokenizer=yours, notebook 12 too)")
    train.add_argument("--resume", action="store_true", help="continue from out_dir/checkpoint.pt")
    train.add_argument("--stop-after", type=int, default=None, metavar="STEP",
                       help="stop with a checkpoint after STEP (to fit a time limit); --resume continues it")

    preflight = commands.add_parser("preflight", help="on a GPU machine, before a long run: CUDA, bf16, compile, "
                                                      "data, and a short timing with the run's estimated minutes")
    common(preflight, config_default="gpu_h100")
    preflight.add_argument("--steps", type=int, default=20, help="optimizer steps to time (default 20)")
    stack_options(preflight)

    prepare = commands.add_parser("prepare", help="download (if needed) the data and build tokenizer and tokens")
    common(prepare, config_default="cpu_demo")
    prepare.add_argument("--tokenizer", choices=("fast", "yours"), default=None,
                         help="fast (the config's default): Hugging Face tokenizers; yours: train_bpe and "
                              "Tokenizer.encode_iterable of your notebook 12 (the fast one where unfinished). Yours is "
                              "pure Python and SLOW: seconds on the sample, about an hour on the full 2.2 GB file; a "
                              "smaller vocabulary trains faster (--set data.vocab_size=512). Sets data.tokenizer")
    prepare.add_argument("--course-dir", default=None, help="the folder holding your notebooks (default course/)")

    sample = commands.add_parser("sample", help="generate stories from a trained run")
    sample.add_argument("--out", required=True, help="the run's folder")
    sample.add_argument("--prompt", default=None)
    sample.add_argument("--n", type=int, default=None)
    sample.add_argument("--max-new-tokens", type=int, default=None)
    sample.add_argument("--temperature", type=float, default=None)
    sample.add_argument("--top-k", type=int, default=None)
    stack_options(sample)
    return parser


def _config(args, *, resume: bool = False):
    from tinystories.config import load_config

    overrides = list(args.set)
    if getattr(args, "tokenizer", None):
        overrides.append(f"data.tokenizer={args.tokenizer}")
    if args.out:
        overrides.append(f"out_dir={args.out}")
    name = args.config
    if name is None:
        saved = Path(args.out or "runs/tinystories") / "config.toml"
        name = str(saved) if resume and saved.is_file() else "cpu_demo"
    return load_config(name, overrides)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "train":
            from tinystories.config import check_out_dir

            config = _config(args, resume=args.resume)  # before importing torch: a typo fails fast
            check_out_dir(config, args.resume)
            from tinystories.stack import resolve, training_keys
            from tinystories.train import init_distributed, leave_distributed, run

            init_distributed(config.train)  # under torchrun: before the stack, which rank 0 alone checks
            stack = resolve(args.stack, args.course_dir, keys=training_keys(config.train.compile),
                            reference_parts=args.reference_parts)
            run(config, stack=stack, resume=args.resume, progress=not args.quiet, stop_after=args.stop_after,
                course_dir=args.course_dir)
            leave_distributed()
        elif args.command == "preflight":
            from tinystories.preflight import preflight, report
            from tinystories.stack import resolve, training_keys

            config = _config(args)
            stack = resolve(args.stack, args.course_dir, keys=training_keys(config.train.compile),
                            reference_parts=args.reference_parts)
            findings = preflight(config, name=args.config, steps=args.steps, stack=stack)
            print(report(findings))
            return 0 if all(f.ok for f in findings) else 1
        elif args.command == "prepare":
            from tinystories.prepare import prepare

            data = prepare(_config(args).data, progress=not args.quiet, course_dir=args.course_dir)
            print(f"tokenizer: {data.origin}")
            print(f"tokenizer {data.tokenizer}; tokens {data.train}, {data.val}")
            for split in ("train", "val"):
                s = data.stats[split]
                print(f"{split}: {s['stories']:,} stories, {s['tokens']:,} tokens, "
                      f"{s['bytes_per_token']:.2f} bytes per token")
        elif args.command == "sample":
            _sample(args)
    except RunError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted (the last checkpoint is intact; --resume continues from it)", file=sys.stderr)
        return 2
    return 0


def _sample(args) -> None:
    import dataclasses

    import torch

    from tinystories.checkpoint import load_checkpoint
    from tinystories.model import load_trained
    from tinystories.stack import resolve
    from tinystories.train import _samples

    model, _, config = load_trained(args.out)
    changes = {"prompt": args.prompt, "n": args.n, "max_new_tokens": args.max_new_tokens,
               "temperature": args.temperature, "top_k": args.top_k}
    config.sample = dataclasses.replace(config.sample, **{k: v for k, v in changes.items() if v is not None})
    checkpoint = load_checkpoint(Path(args.out) / "checkpoint.pt")
    stack = resolve(args.stack, args.course_dir, keys=("sampling", "cached_model", "cache", "generation"),
                    reference_parts=args.reference_parts)
    if stack.name == "yours":
        print(stack.table())
    texts, settings = _samples(model, Path(args.out) / "tokenizer.json", config, checkpoint["eot_id"],
                               torch.device("cpu"), stack)
    print(f"# {settings}")
    for i, text in enumerate(texts):
        print(f"--- {i + 1} ---\n{text}")


def _end_rank(code: int) -> None:
    """End one of torchrun's processes without the interpreter's teardown.

    After ``destroy_process_group`` PyTorch 2.13 still runs gloo's threads (``pt_gloo_runloop``, ``gloo_tcp_loop``:
    listed in ``/proc/self/task`` of each rank as it ends), and tearing the interpreter down under them can abort
    the process ("terminate called without an active exception", pytorch/pytorch#190489), so torchrun reports a
    run that finished as failed (seen once in the suite's DDP test, on a loaded machine). Every file the run
    wrote is closed by now; the standard streams are flushed here."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    status = main()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        _end_rank(status)
    sys.exit(status)
