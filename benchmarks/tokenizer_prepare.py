"""``python -m tinystories prepare`` with the fast tokenizer and with yours (notebook 12's solution).

On the shipped sample (``data/tinystories/tinystories_v2_sample.txt``, 1.4 MB, 90 % of the stories train the
tokenizer), for each vocabulary size: the wall time of ``prepare`` with ``data.tokenizer = "fast"`` (Hugging
Face ``tokenizers``) and with ``"yours"`` (``train_bpe`` and ``Tokenizer.encode_iterable`` of
``solutions/12_bpe``, its visible checks skipped), split for yours into training and encoding (both splits),
each the median of ``--repeats`` runs into a fresh folder; and, once, the time of notebook 12's visible checks
that ``--tokenizer yours`` runs before its first use.

Run from the repository root:

    .venv/bin/python benchmarks/tokenizer_prepare.py --out benchmarks/tokenizer_prepare
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from _common import command, load_average, machine, now

from tinystories import prepare as prep
from tinystories.config import load_config
from tinystories.stack import visible_failures

SOLUTIONS = Path("solutions")


def timed(function, seconds: list):
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            seconds.append(time.perf_counter() - start)

    return wrapper


def one(vocab_size: int, tokenizer: str) -> dict:
    train_s, encode_s = [], []
    real_train, real_encode = prep._train_yours, prep._encode_yours
    prep._train_yours, prep._encode_yours = timed(real_train, train_s), timed(real_encode, encode_s)
    try:
        with tempfile.TemporaryDirectory() as folder:
            data = load_config("cpu_demo", [f"data.dir={folder}", f"data.vocab_size={vocab_size}",
                                            f"data.tokenizer={tokenizer}"]).data
            start = time.perf_counter()
            prepared = prep.prepare(data, progress=False, course_dir=SOLUTIONS, check=False)
            total = time.perf_counter() - start
    finally:
        prep._train_yours, prep._encode_yours = real_train, real_encode
    assert prepared.origin.startswith(tokenizer), prepared.origin
    stats = prepared.stats
    return {"total_s": total, "train_s": sum(train_s), "encode_s": sum(encode_s),
            "tokens": stats["train"]["tokens"] + stats["val"]["tokens"],
            "bytes": stats["train"]["bytes"] + stats["val"]["bytes"], "vocab_reached": prepared.vocab_size}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab-sizes", type=int, nargs="+", default=[512, 2048])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="benchmarks/tokenizer_prepare")
    args = parser.parse_args()
    load_before, rows = load_average(), []
    start = time.perf_counter()
    failures = visible_failures((SOLUTIONS / prep.NB12 / f"{prep.NB12}.ipynb").resolve(), set(prep.NB12_EXERCISES))
    checks_s = time.perf_counter() - start
    assert not failures, failures
    for vocab_size in args.vocab_sizes:
        for tokenizer in ("fast", "yours"):
            runs = [one(vocab_size, tokenizer) for _ in range(args.repeats)]
            row = {key: statistics.median(r[key] for r in runs) for key in ("total_s", "train_s", "encode_s")}
            row.update(vocab_size=vocab_size, tokenizer=tokenizer, tokens=runs[0]["tokens"], bytes=runs[0]["bytes"],
                       vocab_reached=runs[0]["vocab_reached"])
            rows.append(row)
            print(row, flush=True)
    result = {"command": command(), "date": now(), "machine": machine(), "repeats": args.repeats,
              "visible_checks_s": checks_s, "load_before": load_before, "load_after": load_average(), "results": rows}
    Path(args.out + ".json").write_text(json.dumps(result, indent=2) + "\n")
    lines = ["# `tinystories prepare`: the fast tokenizer and yours (notebook 12's solution)", "",
             f"- command: `{result['command']}`", f"- date: {result['date']}", f"- machine: {result['machine']}",
             f"- load average (1, 5, 15 min): before {load_before}, after {result['load_after']}",
             f"- data: the shipped sample, `{prep.SAMPLE.relative_to(prep.ROOT)}`; median of {args.repeats} runs, each "
             "into a fresh folder; yours with its visible checks skipped",
             f"- notebook 12's visible checks, which `--tokenizer yours` runs once before building its folder: "
             f"{checks_s:.1f} s", "",
             "| vocab | tokenizer | prepare (s) | of which training (s) | encoding (s) | encoding (MB/s) | tokens |",
             "|---:|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        encode = f"{r['encode_s']:.2f}" if r["tokenizer"] == "yours" else "-"
        speed = f"{r['bytes'] / r['encode_s'] / 1e6:.2f}" if r["tokenizer"] == "yours" else "-"
        train = f"{r['train_s']:.2f}" if r["tokenizer"] == "yours" else "-"
        lines.append(f"| {r['vocab_size']} | {r['tokenizer']} | {r['total_s']:.2f} | {train} | {encode} | {speed} | "
                     f"{r['tokens']:,} |")
    yours = [r for r in rows if r["tokenizer"] == "yours"]
    slowest = min(r["bytes"] / r["encode_s"] for r in yours)
    lines += ["", f"At the slower encoding speed measured here ({slowest / 1e6:.2f} MB/s), the 2.2 GB TinyStoriesV2 "
              f"training file would take about {2.2e9 / slowest / 3600:.1f} hours to encode with yours (an "
              "extrapolation, not a measurement); yours trains on at most its first "
              f"{prep.YOURS_TRAIN_CHARS:,} characters."]
    Path(args.out + ".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
