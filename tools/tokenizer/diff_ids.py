#!/usr/bin/env python3
"""Shows where the engine's ids differ from Hugging Face `tokenizers` for one corpus
document (or any file), with the tokens around the first difference.

Usage: python3 tools/tokenizer/diff_ids.py TOKENIZER DOC [--no-special] [--m2 PATH]
  TOKENIZER: a name from common.TOKENIZERS (ours, olmo2, ...) or a tokenizer.json path
  DOC:       a corpus file name (english_000.txt) or a path
  --m2:      the m2 binary (default build-text/src/cli/m2, then build/src/cli/m2)
"""
import argparse
import os
import subprocess
import sys
import tempfile

from common import CORPUS, ROOT, load_hf, tokenizer_json


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tokenizer")
    ap.add_argument("doc")
    ap.add_argument("--no-special", action="store_true")
    ap.add_argument("--m2")
    args = ap.parse_args()
    m2 = args.m2 or next((p for p in (os.path.join(ROOT, "build-text/src/cli/m2"), os.path.join(ROOT, "build/src/cli/m2"))
                          if os.path.exists(p)), None)
    if not m2:
        sys.exit("no m2 binary found; pass --m2")
    doc = args.doc if os.path.exists(args.doc) else os.path.join(CORPUS, args.doc)
    text = open(doc, "rb").read().decode("utf-8", "replace")

    hf = load_hf(args.tokenizer)
    hf.encode_special_tokens = args.no_special
    want = hf.encode(text, add_special_tokens=False).ids

    with tempfile.NamedTemporaryFile("w", suffix=".json", encoding="utf-8") as f:
        f.write(tokenizer_json(args.tokenizer))
        f.flush()
        cmd = [m2, "tokenize", "-m", f.name, "-f", doc] + (["--no-special"] if args.no_special else [])
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()
    got = [int(x) for x in out.split(",")] if out else []

    if got == want:
        print(f"identical: {len(got)} ids")
        return
    i = next((k for k in range(min(len(got), len(want))) if got[k] != want[k]), min(len(got), len(want)))
    print(f"first difference at index {i} (m2 {len(got)} ids, HF {len(want)} ids)")
    lo = max(0, i - 5)
    show = lambda ids: " | ".join(f"{t}:{hf.id_to_token(t)!r}" for t in ids[lo:i + 6])
    print("HF: ", show(want))
    print("m2: ", show(got))
    print("text around it:", repr(hf.decode(want[lo:i + 6], skip_special_tokens=False)))


if __name__ == "__main__":
    main()
