#!/usr/bin/env python3
"""Perplexity of the bundled model computed by transformers, checked against `m2 perplexity`.

    python3 tools/train/perplexity_check.py [--m2 build/src/cli/m2] [--model models/m2-tiny]
        [--file testdata/m2-tiny/heldout_code.txt] [--context 512] [--stride 256]
    python3 tools/train/perplexity_check.py --write-heldout   # (re)writes the held-out file

The same text is tokenized by `tokenizers` (plain text: no special-token parsing) and scored
by MiniMaxM2ForCausalLM in fp32 from the BF16 weights with the windowing m2 documents in
src/runtime/perplexity.h: windows of `context` tokens every `stride` tokens, each scoring only
the tokens no earlier window scored. Prints both perplexities and their relative difference;
exits 1 when it is above --tolerance (default 1e-4: fp32 sums in a different order).

The held-out file holds Python standard-library modules that training never saw (the same
hash split as tools/train/corpus.py), about 100 KB.
"""
import argparse
import json
import math
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)


def write_heldout(path, max_bytes=100_000):
    import corpus
    texts = corpus.load_code(max_bytes, 0, heldout=True)
    out = ""
    for t in texts:
        if len(out) + len(t) > max_bytes and out:
            break
        out += t if t.endswith("\n") else t + "\n"
    with open(path, "w", encoding="utf-8") as f:
        f.write(out)
    print("wrote %s: %d files, %d bytes" % (path, len(texts), len(out.encode())))


def hf_perplexity(model_dir, text, context, stride):
    import torch
    from tokenizers import Tokenizer
    from transformers import MiniMaxM2ForCausalLM
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    # The held-out code holds no special-token strings, so this equals m2's plain-text reading.
    ids = tok.encode(text, add_special_tokens=False).ids
    model = MiniMaxM2ForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    n = len(ids)
    nll, scored, done, begin = 0.0, 0, 1, 0
    with torch.no_grad():
        while done < n:
            end = min(n, begin + context)
            first = max(done, begin + 1)
            x = torch.tensor([ids[begin:end]])
            logits = model(x).logits[0].double()
            lp = torch.log_softmax(logits, dim=-1)
            for t in range(first, end):
                nll -= lp[t - 1 - begin, ids[t]].item()
                scored += 1
            done = end
            if end == n:
                break
            begin += stride
    return math.exp(nll / scored), nll / scored, scored, n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--m2", default=os.path.join(REPO, "build", "src", "cli", "m2"))
    ap.add_argument("--model", default=os.path.join(REPO, "models", "m2-tiny"))
    ap.add_argument("--file", default=os.path.join(REPO, "testdata", "m2-tiny", "heldout_code.txt"))
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--stride", type=int, default=256)
    ap.add_argument("--tolerance", type=float, default=1e-4)
    ap.add_argument("--write-heldout", action="store_true")
    a = ap.parse_args()
    if a.write_heldout:
        write_heldout(a.file)
        return 0
    with open(a.file, encoding="utf-8") as f:
        text = f.read()
    ppl, mean_nll, scored, n = hf_perplexity(a.model, text, a.context, a.stride)
    print("transformers: perplexity %.4f (mean NLL %.6f over %d scored tokens of %d)" % (ppl, mean_nll, scored, n))
    out = subprocess.run([a.m2, "perplexity", "-m", a.model, "-f", a.file, "--context", str(a.context),
                          "--stride", str(a.stride), "--json"], check=True, capture_output=True, text=True).stdout
    j = json.loads(out)
    rel = abs(j["perplexity"] / ppl - 1)
    print("m2:           perplexity %.4f (mean NLL %.6f over %d scored tokens of %d)" % (
        j["perplexity"], j["mean_nll"], j["scored_tokens"], j["tokens"]))
    print("relative difference %.2e (tolerance %.0e)" % (rel, a.tolerance))
    ok = rel <= a.tolerance and j["tokens"] == n and j["scored_tokens"] == scored
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
