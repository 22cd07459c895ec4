#!/usr/bin/env python3
"""Tokenizer encode speed of m2 against Hugging Face `tokenizers`, one thread each, on the
same files in the same run: prints MB/s for both and the ratio.

Usage: python3 bench/tokenizer_bench.py [--bench build/bench/tokenizer_bench]
                                        [--tokenizer ours|olmo2|deepseek_v3|PATH ...]
Groups: english (testdata/tokenizer/corpus/english_*), code (python_*, c_*, code_*),
zh+ja (zh_*, ja_*). Each side encodes one document at a time with special tokens
parsed, warms up once, then takes the best of several passes lasting >= 2 s in total.
"""
import os

# One thread for HF: set before tokenizers is imported (Rayon reads it at start-up).
os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import argparse
import glob
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "tokenizer"))
from common import CORPUS, load_hf, tokenizer_json  # noqa: E402

GROUPS = {
    "english": ["english_*.txt"],
    "code": ["python_*.txt", "c_*.txt", "code_*.txt"],
    "zh+ja": ["zh_*.txt", "ja_*.txt"],
}


def files_of(patterns):
    return sorted(f for p in patterns for f in glob.glob(os.path.join(CORPUS, p)))


def time_hf(tok, docs, min_seconds):
    for d in docs:
        tok.encode(d, add_special_tokens=False)
    best, total, passes = 1e30, 0.0, 0
    while total < min_seconds or passes < 3:
        start = time.perf_counter()
        for d in docs:
            tok.encode(d, add_special_tokens=False)
        s = time.perf_counter() - start
        best, total, passes = min(best, s), total + s, passes + 1
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default_bench = next((p for p in (os.path.join(ROOT, "build", "bench", "tokenizer_bench"),
                                      os.path.join(ROOT, "build-text", "bench", "tokenizer_bench"))
                          if os.path.exists(p)), None)
    ap.add_argument("--bench", default=default_bench, help="the tokenizer_bench binary")
    ap.add_argument("--tokenizer", action="append", help="default: ours, olmo2, deepseek_v3")
    ap.add_argument("--min-seconds", type=float, default=2.0)
    args = ap.parse_args()
    if not args.bench:
        sys.exit("tokenizer_bench binary not found; build it and pass --bench")
    import tokenizers
    print(f"m2 {args.bench} vs Hugging Face tokenizers {tokenizers.__version__}, one thread each")
    print(f"{'tokenizer':<12} {'group':<8} {'MB':>6} {'m2 MB/s':>9} {'HF MB/s':>9} {'m2/HF':>7}")
    for name in args.tokenizer or ["ours", "olmo2", "deepseek_v3"]:
        hf = load_hf(name)
        with tempfile.NamedTemporaryFile("w", suffix=".json", encoding="utf-8") as f:
            f.write(tokenizer_json(name))
            f.flush()
            cmd = [args.bench, "-t", f.name, "--min-seconds", str(args.min_seconds)]
            cmd += [f"{g}={','.join(files_of(p))}" for g, p in GROUPS.items()]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        m2 = {m.group(1): float(m.group(2)) for m in re.finditer(r"RESULT group=(\S+) .* mbps=([\d.]+)", out)}
        for group, patterns in GROUPS.items():
            docs = [open(p, "rb").read().decode("utf-8", "replace") for p in files_of(patterns)]
            nbytes = sum(len(d.encode("utf-8")) for d in docs)
            hf_mbps = nbytes / time_hf(hf, docs, args.min_seconds) / 1e6
            print(f"{name:<12} {group:<8} {nbytes / 1e6:>6.2f} {m2[group]:>9.2f} {hf_mbps:>9.2f} {m2[group] / hf_mbps:>6.2f}x",
                  flush=True)


if __name__ == "__main__":
    main()
