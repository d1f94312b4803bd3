"""BPE training and encoding: the notebook-12 solution (pure Python) against Hugging Face ``tokenizers`` (Rust).

On ``data/tinystories/tinystories_v2_sample.txt`` (1.4 MB): ``train_bpe`` from ``solutions/12_bpe`` (loaded
with ``coursetools.notebook_import.load_from_notebook``, not copied) and HF's ``BpeTrainer`` (ByteLevel
pre-tokenizer, fed the documents between the ``<|endoftext|>`` tokens) for each vocabulary size; then encode
throughput of the whole sample with each trained tokenizer (the solution's ``Tokenizer``, fresh cache; HF's
``encode_batch`` on the documents). Each time is the median of ``--repeats`` runs.

Run from the repository root:

    .venv/bin/python benchmarks/tokenizer_bpe.py --out benchmarks/tokenizer_bpe
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from _common import command, load_average, machine, now
from transformers.convert_slow_tokenizer import bytes_to_unicode  # GPT-2's byte-to-character table

from coursetools.notebook_import import load_from_notebook

EOT = "<|endoftext|>"


def median_time(repeats, function, *args):
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function(*args)
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def hf_train(documents, vocab_size):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    hf = Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    hf.train_from_iterator(documents, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[EOT], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    return hf


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab-sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data", default="data/tinystories/tinystories_v2_sample.txt")
    parser.add_argument("--out", default="benchmarks/tokenizer_bpe")
    args = parser.parse_args()
    train_bpe, tokenizer_class = load_from_notebook("12_bpe", "train_bpe", "Tokenizer", folder=Path("solutions"))
    text = Path(args.data).read_text(encoding="utf-8")
    documents = text.split(EOT)
    n_bytes = len(text.encode("utf-8"))
    to_byte = {c: b for b, c in bytes_to_unicode().items()}
    load_before, rows = load_average(), []
    for vocab_size in args.vocab_sizes:
        ours_s, (vocab, merges) = median_time(args.repeats, train_bpe, text, vocab_size)
        hf_s, hf = median_time(args.repeats, hf_train, documents, vocab_size)
        hf_merges = [tuple(bytes(to_byte[c] for c in part) for part in m)
                     for m in json.loads(hf.to_str())["model"]["merges"]]
        same = next((k for k, (a, b) in enumerate(zip(merges, hf_merges, strict=False)) if a != b),
                    min(len(merges), len(hf_merges)))
        enc_s, ids = median_time(args.repeats, lambda v=vocab, m=merges: tokenizer_class(v, m).encode(text))
        hf_enc_s, encodings = median_time(args.repeats, hf.encode_batch, documents)
        hf_tokens = sum(len(e.ids) for e in encodings) + len(documents) - 1
        rows.append({"vocab_size": vocab_size, "vocab_reached": len(vocab), "hf_vocab_reached": hf.get_vocab_size(),
                     "train_s": ours_s, "hf_train_s": hf_s, "first_equal_merges": same,
                     "encode_s": enc_s, "encode_mb_per_s": n_bytes / enc_s / 1e6, "tokens": len(ids),
                     "hf_encode_s": hf_enc_s, "hf_encode_mb_per_s": n_bytes / hf_enc_s / 1e6, "hf_tokens": hf_tokens,
                     "bytes_per_token": n_bytes / len(ids)})
        print(rows[-1], flush=True)
    result = {"command": command(), "date": now(), "machine": machine(), "data": args.data, "bytes": n_bytes,
              "repeats": args.repeats, "load_before": load_before, "load_after": load_average(), "results": rows}
    Path(args.out + ".json").write_text(json.dumps(result, indent=2) + "\n")
    lines = ["# BPE tokenizer: the notebook-12 solution against Hugging Face tokenizers", "",
             f"- command: `{result['command']}`", f"- date: {result['date']}", f"- machine: {result['machine']}",
             f"- load average (1, 5, 15 min): before {load_before}, after {result['load_after']}",
             f"- data: `{args.data}` ({n_bytes:,} bytes); median of {args.repeats} runs; HF trained on the documents "
             "between `<|endoftext|>`; the solution's encode starts with an empty cache; HF encodes with "
             "`encode_batch` (parallel)",
             "- the 1.4 MB sample supports at most about 8,000 tokens: training stops when every pre-token is one token",
             "", "| vocab asked | reached (ours / HF) | train ours (s) | train HF (s) | equal first merges | "
             "encode ours (MB/s) | encode HF (MB/s) | bytes/token |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['vocab_size']} | {r['vocab_reached']} / {r['hf_vocab_reached']} | {r['train_s']:.2f} | "
                     f"{r['hf_train_s']:.2f} | {r['first_equal_merges']} | {r['encode_mb_per_s']:.2f} | "
                     f"{r['hf_encode_mb_per_s']:.2f} | {r['bytes_per_token']:.2f} |")
    lines += ["", "The merges differ after the first tie that the two rules break differently (ours: the greatest "
              "pair of bytes; HF: the smallest ids in its vocabulary), see notebook 12, Section 6."]
    Path(args.out + ".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
